//! Pre-flight checks (`flotilla check`): what would make a start fail, found before
//! anything starts, on the host the components run on — their programs, working
//! directories, path arguments (model files…), `env_file`s, secrets and `${env.NAME}`
//! variables, and their ports; for a container, its engine (reachable), its image
//! (present, or pulled by its policy) and its bind mounts' sources. Read-only: nothing is started, written or signalled.

use crate::secrets::SecretResolver;
use crate::statedir::StateDir;
use flotilla_model::topology::Component;
use flotilla_model::Topology;
use serde::Serialize;
use std::path::Path;

/// One finding of [`check`] or [`crate::preflight::check`].
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Finding {
    /// What was checked: `reachable`, `platform`, `flotilla`, `disk`, `tool <name>`.
    pub check: String,
    /// Whether it is fine.
    pub ok: bool,
    /// What was seen.
    pub saw: String,
}

/// Checks every managed component of `topology` on `host` named in `names` (all when
/// empty). `base_dir` is where relative paths start (the inventory's directory here,
/// the home directory on a remote host). Each finding's `check` is
/// `<component>: <what>`.
pub fn check(
    topology: &Topology,
    host: &str,
    names: &[String],
    base_dir: &Path,
    state: &StateDir,
    secrets: &SecretResolver,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let comps: Vec<&Component> = topology
        .components
        .iter()
        .filter(|c| c.host == host && c.is_managed())
        .filter(|c| names.is_empty() || names.contains(&c.name))
        .collect();
    let ports: Vec<u16> = comps
        .iter()
        .flat_map(|c| {
            c.endpoints
                .values()
                .filter(|e| e.is_local_bind())
                .map(|e| e.port)
        })
        .collect();
    let listening = crate::process::listeners_on(&ports).unwrap_or_default();
    let adapters = crate::adapter::Adapters::native();
    for c in comps {
        let mut push = |what: &str, ok: bool, saw: String| {
            out.push(Finding {
                check: format!("{}: {what}", c.name),
                ok,
                saw,
            })
        };
        // The owner of its lifecycle is there to be asked.
        let owner = match c.adapter.unwrap_or_default() {
            flotilla_model::inventory::AdapterKind::Systemd => {
                Some(("systemd", crate::adapter::systemd::unavailable()))
            }
            flotilla_model::inventory::AdapterKind::Launchd => {
                Some(("launchd", crate::adapter::launchd::unavailable()))
            }
            _ => None,
        };
        if let Some((name, why)) = owner {
            match why {
                Some(why) => push("owner", false, why),
                None => push("owner", true, format!("{name} can be asked")),
            }
        }
        // An owner that is asked through its own API (a cluster) checks what a start
        // needs there itself; nothing of it runs on this machine.
        if let Some(findings) = adapters
            .for_component(c)
            .preflight(topology.project_name(), c)
        {
            for (what, ok, saw) in findings {
                push(&what, ok, saw);
            }
            continue;
        }
        let container = c.adapter == Some(flotilla_model::inventory::AdapterKind::Container);
        if container {
            let findings = crate::adapter::container::preflight::preflight(
                topology.project_name(),
                c,
                base_dir,
                secrets,
            );
            for (what, ok, saw) in findings {
                push(&what, ok, saw);
            }
        }
        let cwd = match &c.cwd {
            Some(d) => base_dir.join(d),
            None => base_dir.to_path_buf(),
        };
        if !cwd.is_dir() {
            push(
                "cwd",
                false,
                format!("{} is not a directory", cwd.display()),
            );
        }
        let env = crate::environment::effective(c, secrets, base_dir);
        match &env {
            Ok(_) => push(
                "environment",
                true,
                format!(
                    "secrets, env_file and ${{env.…}} resolve{}",
                    c.env_file
                        .as_ref()
                        .map(|f| format!(" ({f} read)"))
                        .unwrap_or_default()
                ),
            ),
            Err(first) => {
                // Every problem, not only the first one `effective` stopped at.
                let all = crate::environment::problems(c, secrets, base_dir);
                if all.is_empty() {
                    push("environment", false, first.clone());
                }
                for problem in all {
                    push("environment", false, problem);
                }
            }
        }
        // A container's command runs inside its image, not on this host.
        if let Some(program) = c.command.first().filter(|_| !container) {
            let env = env.clone().unwrap_or_default();
            match crate::process::resolve_program(&c.name, program, &cwd, &env) {
                Ok(p) => push("program", true, format!("{program} → {}", p.display())),
                Err(e) => push("program", false, e.to_string()),
            }
            for arg in c.command.iter().skip(1) {
                // Arguments that are plainly paths (model files, configs) must exist;
                // `--flag=/path` counts too.
                let path = arg.split_once('=').map(|(_, v)| v).unwrap_or(arg);
                let pathlike =
                    path.starts_with('/') || path.starts_with("./") || path.starts_with("../");
                if pathlike && !path.contains("://") && !path.contains("${") {
                    let p = cwd.join(path);
                    if !p.exists() {
                        push(
                            "file",
                            false,
                            format!(
                                "{} does not exist (an argument of its command)",
                                p.display()
                            ),
                        );
                    }
                }
            }
        }
        // A container's ports are the ones it publishes (checked with it above).
        let endpoints = c.endpoints.iter().filter(|_| !container);
        for (name, ep) in endpoints.filter(|(_, e)| e.is_local_bind()) {
            match listening.get(&ep.port).and_then(|ls| ls.first()) {
                None => push(
                    &format!("port {}", ep.port),
                    true,
                    format!("free (endpoint `{name}`)"),
                ),
                Some(l) => {
                    let ours = l.pid.is_some_and(|pid| {
                        crate::process::marked_processes(state.root())
                            .unwrap_or_default()
                            .iter()
                            .any(|(p, _, comp)| *p == pid && *comp == c.name)
                    });
                    push(
                        &format!("port {}", ep.port),
                        ours,
                        if ours {
                            format!("in use by `{}` itself, running ({})", c.name, l.describe())
                        } else {
                            format!(
                                "busy: {} listens on it (endpoint `{name}`)",
                                crate::discover::containers::describe_holder(
                                    l,
                                    &crate::adapter::container::engine::socket_for(
                                        c.container_api.as_deref()
                                    )
                                )
                            )
                        },
                    )
                }
            }
        }
    }
    out
}
