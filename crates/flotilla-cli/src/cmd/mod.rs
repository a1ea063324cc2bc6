//! One module per subcommand.

pub mod adopt;
pub mod agent;
pub mod apply;
pub mod authority;
pub mod backup;
pub mod check;
pub mod completions;
pub mod config;
pub mod config_migrate;
pub mod credentials;
pub mod discover;
pub mod down;
pub mod exec;
pub mod gate;
pub mod host;
pub mod host_uninstall;
pub mod import;
pub mod lifecycle;
pub mod logs;
pub mod man;
pub mod notifications;
pub mod operations;
pub mod output;
pub mod plan;
pub mod ps;
pub mod push;
pub mod question;
pub mod questions;
pub mod release;
pub mod restart;
pub mod restore;
pub mod sandbox_bridge;
pub mod schema;
pub mod serve;
pub mod session;
pub mod session_pod;
pub mod start;
pub mod status;
pub mod stop;
pub mod token;
pub mod topology;
pub mod tui;
pub mod ui;
pub mod ui_link;
pub mod up;
pub mod validate;

use crate::load::{self, Loaded};
use crate::{render, Cli, EXIT_USAGE};
use flotilla_model::{Target, Topology, Validated};
use std::fmt;

/// Loads and validates the inventory; on invalid input prints the diagnostics and
/// returns the exit status to use.
pub fn topology_or_exit(cli: &Cli) -> anyhow::Result<Result<(Loaded, Validated), u8>> {
    let path = load::inventory_path(cli.file.as_deref())?;
    let mut loaded = load::load(&path)?;
    let result = std::mem::replace(&mut loaded.result, Err(Vec::new()));
    match result {
        Ok(mut v) => {
            render::diagnostics(&loaded.sources, &v.warnings);
            // The project: -p, else the inventory's `project`, else its directory's name.
            let project = match (&cli.project, &v.topology.project) {
                (Some(p), _) if !flotilla_model::topology::valid_project_name(p) => {
                    return Err(crate::usage(format!("`{p}` is not a project name (-p/FLOTILLA_PROJECT): use lowercase letters, digits, `-` and `_` (at most 63, starting with a letter or digit)")));
                }
                (Some(p), _) => p.clone(),
                (None, Some(p)) => p.clone(),
                (None, None) => flotilla_model::topology::project_from_dir_name(
                    &std::path::absolute(&loaded.base_dir)
                        .ok()
                        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                        .unwrap_or_default(),
                ),
            };
            v.topology.set_project(project);
            Ok(Ok((loaded, v)))
        }
        Err(diags) => {
            render::diagnostics(&loaded.sources, &diags);
            let errors = diags
                .iter()
                .filter(|d| d.severity == flotilla_model::Severity::Error)
                .count();
            let message = format!(
                "{} is invalid ({errors} error{})",
                path.display(),
                if errors == 1 { "" } else { "s" }
            );
            eprintln!("error: {message}");
            if crate::wants_json() {
                // The promised `{"error": …}` object, with each diagnostic as
                // `validate --json` gives it.
                let mut json = crate::error_json(&anyhow::anyhow!(message), EXIT_USAGE);
                json["error"]["diagnostics"] = serde_json::to_value(
                    diags
                        .iter()
                        .map(|d| d.locate(&loaded.sources))
                        .collect::<Vec<_>>(),
                )?;
                println!("{json}");
            }
            Ok(Err(EXIT_USAGE))
        }
    }
}

/// The inventory's host names, `a, b, c`: what a message about an unknown host lists.
pub fn host_names(topology: &Topology) -> String {
    topology
        .hosts
        .keys()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}

/// The state directory of `topology`'s project, as read-only verbs see it.
pub fn state_dir(
    cli: &Cli,
    topology: &flotilla_model::Topology,
) -> std::io::Result<flotilla_exec::statedir::StateDir> {
    flotilla_exec::statedir::StateDir::resolve(cli.state_dir.as_deref(), topology.project_name())
}

/// `topology`'s project opened ([`flotilla_exec::world::World`]): its state
/// directory (`--state-dir`), secrets, and its remote hosts reached over SSH or, with
/// `--server`, through the authority to their agents, within `--host-timeout`.
pub fn world(
    cli: &Cli,
    topology: impl Into<std::sync::Arc<Topology>>,
) -> anyhow::Result<flotilla_exec::world::World> {
    let topology = topology.into();
    let fleet = authority::transport(cli, &topology)?;
    Ok(flotilla_exec::world::World::open(
        topology,
        cli.state_dir.as_deref(),
        fleet,
        cli.host_timeout,
    )?)
}

/// A tokio runtime for one command.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// SSH connections to the topology's remote hosts, connecting within `--host-timeout`;
/// with `--ssh-persist`, masters kept in `<state>/run/ssh/` (created owner-only) and
/// reused across invocations.
pub fn ssh_pool(cli: &Cli, topology: &flotilla_model::Topology) -> flotilla_exec::ssh::Pool {
    let pool = flotilla_exec::ssh::Pool::new(topology.hosts.clone(), cli.host_timeout);
    let Some(idle) = cli.ssh_persist else {
        return pool;
    };
    let Ok(state) = state_dir(cli, topology) else {
        return pool;
    };
    // Shared by the projects (a socket path must stay short, and a master is per
    // user and host settings, not per project).
    match flotilla_exec::ssh::Persistence::in_state_dir(state.base(), idle) {
        Ok(p) => pool.persist(p),
        Err(why) => {
            eprintln!("warning: --ssh-persist: {why}; one connection per invocation");
            pool
        }
    }
}

/// What kind of target a verb takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A component (`logs`).
    Component,
    /// A stack (`up`, `down`).
    Stack,
    /// Either (`start`, `stop`, `restart`, `status`, `ps`, `plan start`…).
    Either,
}

impl Takes {
    fn noun(self) -> &'static str {
        match self {
            Takes::Component => "a component",
            Takes::Stack => "a stack",
            Takes::Either => "a component or a stack",
        }
    }
}

/// A target name a verb cannot take: unknown, or of the wrong kind. Its `Display` is
/// the whole message: what was typed and by which verb, the closest name, and what
/// exists that the verb takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTarget {
    /// The name typed.
    pub name: String,
    /// The verb typed (`up`, `plan up`, `status`…).
    pub verb: String,
    /// What the verb takes.
    pub takes: Takes,
    /// `Some(true)`: it names a component; `Some(false)`: a stack; `None`: nothing.
    pub is_component: Option<bool>,
    /// The closest name of the kind the verb takes, if one is close.
    pub suggestion: Option<String>,
    /// `components: …` / `stacks: …` lines.
    pub existing: Vec<String>,
}

impl BadTarget {
    /// Whether the name names nothing at all (rather than the wrong kind of thing).
    pub fn is_unknown(&self) -> bool {
        self.is_component.is_none()
    }

    /// The planner's refusal for an unknown target of `op`, as `--json` prints it
    /// (`{"refusal": {operation, reasons: [{kind: "unknown-target", target, suggestion}]}}`).
    pub fn refusal_json(&self, op: &flotilla_plan::Operation) -> serde_json::Value {
        let refusal = flotilla_plan::Refusal {
            operation: op.clone(),
            reasons: vec![flotilla_plan::Reason::UnknownTarget {
                target: self.name.clone(),
                suggestion: self.suggestion.clone(),
            }],
        };
        serde_json::json!({ "refusal": refusal })
    }

    /// Prints `error: …` on standard error and returns [`EXIT_USAGE`].
    pub fn report(&self) -> u8 {
        eprintln!("error: {self}");
        EXIT_USAGE
    }
}

impl fmt::Display for BadTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, verb, takes) = (&self.name, &self.verb, self.takes.noun());
        match self.is_component {
            None => {
                let what = match self.takes {
                    Takes::Component => "a component",
                    Takes::Stack => "a stack",
                    Takes::Either => "a component nor a stack",
                };
                let not = if self.takes == Takes::Either {
                    "neither"
                } else {
                    "not"
                };
                write!(f, "`{name}` is {not} {what} ({verb} takes {takes})")?;
            }
            Some(true) => {
                // `up llm` → `start llm`, `plan down llm` → `plan stop llm`.
                let instead = match verb.rsplit_once(' ') {
                    Some((head, "up")) => Some(format!("{head} start")),
                    Some((head, "down")) => Some(format!("{head} stop")),
                    None if verb == "up" => Some("start".to_string()),
                    None if verb == "down" => Some("stop".to_string()),
                    _ => None,
                };
                write!(
                    f,
                    "`{name}` is a component, not a stack ({verb} takes {takes}"
                )?;
                if let Some(i) = instead {
                    write!(f, "; for a component: flotilla {i} {name}")?;
                }
                write!(f, ")")?;
            }
            Some(false) => write!(
                f,
                "`{name}` is a stack, not a component ({verb} takes {takes})"
            )?,
        }
        if let Some(s) = &self.suggestion {
            write!(f, "; did you mean `{s}`?")?;
        }
        for line in &self.existing {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

/// How many names a `components:` line shows before `… and N more`.
const MAX_LISTED: usize = 24;

/// `NAME (member, member)` for every stack, or `none declared`.
pub fn stacks_with_members(topology: &Topology) -> Vec<String> {
    topology
        .stacks
        .values()
        .map(|s| format!("{} ({})", s.name, s.components.join(", ")))
        .collect()
}

fn listed(label: &str, names: Vec<String>, none: &str) -> String {
    if names.is_empty() {
        return format!("{label}: {none}");
    }
    let more = names.len().saturating_sub(MAX_LISTED);
    let mut line = format!(
        "{label}: {}",
        names
            .into_iter()
            .take(MAX_LISTED)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if more > 0 {
        line.push_str(&format!(
            " … and {more} more (flotilla topology lists them)"
        ));
    }
    line
}

/// Resolves `name` as the target of `verb` (the words typed: `up`, `plan up`,
/// `status`…), which takes `takes`.
///
/// # Errors
/// A [`BadTarget`] when it names nothing, or something the verb does not take.
pub fn resolve_target<'t>(
    topology: &'t Topology,
    verb: &str,
    takes: Takes,
    name: &str,
) -> Result<Target<'t>, BadTarget> {
    let found = topology.target(name);
    let is_component = match found {
        Some(Target::Component(_)) => Some(true),
        Some(Target::Stack(_)) => Some(false),
        None => None,
    };
    let fits = match (takes, is_component) {
        (_, None) => false,
        (Takes::Either, _) => true,
        (Takes::Component, Some(c)) => c,
        (Takes::Stack, Some(c)) => !c,
    };
    if let (true, Some(t)) = (fits, found) {
        return Ok(t);
    }
    let components =
        || -> Vec<String> { topology.components.iter().map(|c| c.name.clone()).collect() };
    let mut existing = Vec::new();
    let mut candidates: Vec<String> = Vec::new();
    if takes != Takes::Stack {
        candidates.extend(components());
        existing.push(listed("components", components(), "none declared"));
    }
    if takes != Takes::Component {
        candidates.extend(topology.stacks.keys().cloned());
        existing.push(listed(
            "stacks",
            stacks_with_members(topology),
            "none declared (declare [stacks.NAME] with components = [...])",
        ));
    }
    let suggestion = if is_component.is_none() {
        flotilla_model::diag::did_you_mean(name, candidates.iter().map(String::as_str))
            .map(str::to_string)
    } else {
        None
    };
    Err(BadTarget {
        name: name.to_string(),
        verb: verb.to_string(),
        takes,
        is_component,
        suggestion,
        existing,
    })
}
