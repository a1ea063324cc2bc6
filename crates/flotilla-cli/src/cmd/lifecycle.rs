//! Shared by the mutating verbs (`up`, `down`, `start`, `stop`, `restart`, `apply`):
//! load the inventory, build a session, print the plan and progress, report.

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_exec::executor::Event;
use flotilla_exec::operate::{Invocation, InvocationOutcome, OperateError};
use flotilla_exec::statedir::StateDir;
use flotilla_plan::{Operation, Plan};
use std::io::{IsTerminal, Write};

// Output of a mutating verb never panics on a closed pipe: an operation must finish
// (and journal) even if whoever reads its output went away.
macro_rules! out {
    ($($t:tt)*) => {{ let _ = writeln!(std::io::stdout(), $($t)*); }};
}
macro_rules! err {
    ($($t:tt)*) => {{ let _ = writeln!(std::io::stderr(), $($t)*); }};
}
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Options every mutating verb takes.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOpts {
    /// Print the plan and stop: change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long each started component may take to become ready.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Print the result as JSON ({"operation", "plan", "report"}) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs an operation on a stack (`up`, `down`: `verb` is the word typed); a
/// component target is a usage error.
pub fn run_stack(cli: &Cli, verb: &str, op: Operation, opts: &RunOpts) -> anyhow::Result<u8> {
    run_checked(cli, verb, Some(op), None, opts, super::Takes::Stack)
}

/// Runs an operation (or applies `given`); `verb` is the word typed (`start`,
/// `apply`…); returns the exit status.
pub fn run(
    cli: &Cli,
    verb: &str,
    op: Option<Operation>,
    given: Option<Plan>,
    opts: &RunOpts,
) -> anyhow::Result<u8> {
    run_checked(cli, verb, op, given, opts, super::Takes::Either)
}

/// `up`/`down` without a stack: every stack the inventory declares, in turn (by
/// name for `up`, the reverse for `down`), each its own operation, like `docker
/// compose up` brings up the whole file. `up` stops at the first stack that does not
/// come up; `down` goes on and exits with the worst status. An inventory without
/// stacks is a usage error (exit 2) naming the component verbs instead.
pub fn every_stack(
    cli: &Cli,
    verb: &str,
    op: impl Fn(&str) -> Operation,
    opts: &RunOpts,
) -> anyhow::Result<u8> {
    let (_, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let mut stacks: Vec<String> = validated.topology.stacks.keys().cloned().collect();
    if stacks.is_empty() {
        let instead = if verb == "down" { "stop" } else { "start" };
        err!("error: `{verb}` without a stack brings every stack {}, and the inventory declares none", if verb == "down" { "down" } else { "up" });
        err!("  declare one ([stacks.NAME] with components = [...]), or use `flotilla {instead} COMPONENT`");
        err!("usage: flotilla {verb} [STACK]  (one component: flotilla {instead} COMPONENT)");
        return Ok(crate::EXIT_USAGE);
    }
    if verb == "down" {
        stacks.reverse();
    }
    let several = stacks.len() > 1;
    let mut left = Vec::new();
    for stack in &stacks {
        if several {
            err!("==> {verb} {stack}");
        }
        let code = run_stack(cli, verb, op(stack), opts)?;
        if code != EXIT_OK {
            if verb == "up" {
                return Ok(code);
            }
            left.push((stack, code));
        }
    }
    // A stack refused because another stack's members still used its components
    // may go down once that one is down: each is tried once more.
    let mut worst = EXIT_OK;
    for (stack, code) in left {
        worst = worst.max(if several {
            err!("==> {verb} {stack} (again, after the others)");
            run_stack(cli, verb, op(stack), opts)?
        } else {
            code
        });
    }
    Ok(worst)
}

fn run_checked(
    cli: &Cli,
    verb: &str,
    op: Option<Operation>,
    given: Option<Plan>,
    opts: &RunOpts,
    takes: super::Takes,
) -> anyhow::Result<u8> {
    let (loaded, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    // A target the verb cannot take is a usage error, found before the lock is taken.
    if let Some(o) = &op {
        if let Err(bad) = super::resolve_target(&validated.topology, verb, takes, &o.target) {
            if opts.json && bad.is_unknown() {
                out!("{}", serde_json::to_string_pretty(&bad.refusal_json(o))?);
            }
            return Ok(bad.report());
        }
    }
    // A verb that changes something moves a state directory from before projects
    // into this project first.
    let state = StateDir::prepare(cli.state_dir.as_deref(), validated.topology.project_name())?;
    let base_dir = loaded.base_dir.clone();
    let terminal = std::io::stderr().is_terminal() && !opts.json;
    let progress = Arc::new(Progress::new(terminal));
    let p2 = Arc::clone(&progress);
    let json = opts.json;
    let fleet = super::authority::transport(cli, &validated.topology)?;
    super::authority::warn_unless_selected(cli, &validated.topology);
    let topology = Arc::new(validated.topology);
    let cancel = flotilla_exec::CancellationToken::new();
    let invocation = Invocation {
        fleet,
        host_timeout: cli.host_timeout,
        cancel: cancel.clone(),
        topology: Arc::clone(&topology),
        state,
        base_dir,
        ready_timeout: opts.timeout,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        events: Arc::new(move |e| p2.event(e)),
        show_plan: Box::new(move |plan| {
            if !json {
                let _ = write!(std::io::stdout(), "{}", render::plan(plan));
            }
        }),
    };
    let rt = super::runtime()?;
    let interrupts = rt.spawn(interrupts(cancel));
    let result = rt.block_on(invocation.run(op.as_ref(), given, opts.dry_run));
    interrupts.abort();
    progress.finish();
    match result {
        Err(OperateError::Locked(e))
            if matches!(e, flotilla_exec::lock::LockError::Held { .. }) =>
        {
            err!("error: {e}");
            if opts.json {
                out!(
                    "{}",
                    serde_json::json!({ "error": { "kind": "locked", "message": e.to_string() } })
                );
            }
            Ok(EXIT_REFUSED)
        }
        Err(OperateError::StalePlan(why)) => {
            err!("error: refused: stale plan: {why}");
            if opts.json {
                out!(
                    "{}",
                    serde_json::json!({ "error": { "kind": "stale-plan", "message": why } })
                );
            }
            Ok(EXIT_REFUSED)
        }
        Err(e) => Err(e.into()),
        Ok(InvocationOutcome::Refused(r)) => {
            if opts.json {
                out!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({ "refusal": r }))?
                );
            } else if let (true, Err(bad)) = (
                r.is_unknown_target(),
                super::resolve_target(&topology, verb, takes, &r.operation.target),
            ) {
                // Checked above; said the same way should the planner find it first.
                bad.report();
            } else {
                for line in flotilla_plan::render::refusal_lines(&r, verb) {
                    err!("{line}");
                }
            }
            Ok(if r.is_unknown_target() {
                crate::EXIT_USAGE
            } else {
                EXIT_REFUSED
            })
        }
        Ok(InvocationOutcome::Planned(plan)) => {
            if opts.json {
                out!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                out!("dry run: nothing was changed");
            }
            Ok(EXIT_OK)
        }
        Ok(InvocationOutcome::Applied {
            plan,
            report,
            operation,
        }) => {
            if opts.json {
                out!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "operation": operation, "plan": plan, "report": report })
                    )?
                );
            } else if report.failed.is_some() {
                let _ = write!(std::io::stderr(), "{}", applied(&operation, &report));
            } else {
                let _ = write!(std::io::stdout(), "{}", applied(&operation, &report));
            }
            Ok(if report.succeeded() {
                EXIT_OK
            } else {
                EXIT_REFUSED
            })
        }
    }
}

/// What an applied plan came to, as the mutating verbs print it: `op-12: done (2
/// steps)`, or where it failed, the last lines of that component's log, what the
/// cleanup stopped and where the details are.
pub fn applied(operation: &str, report: &flotilla_exec::executor::ApplyReport) -> String {
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    let Some(f) = &report.failed else {
        line(format!(
            "{operation}: done ({} step{})",
            report.steps.len(),
            if report.steps.len() == 1 { "" } else { "s" }
        ));
        return out;
    };
    line(format!(
        "{operation}: failed at `{}`: {}",
        f.component, f.summary
    ));
    if let Some(tail) = f.evidence.get("log_tail").and_then(|t| t.as_array()) {
        if !tail.is_empty() {
            line("  last lines of its log:".into());
            for l in tail {
                line(format!("    {}", l.as_str().unwrap_or_default()));
            }
        }
    }
    if !report.cleanup.is_empty() {
        line("  cleaned up (stopped what this run started):".into());
        for c in &report.cleanup {
            line(format!("    {}: {}", c.component, c.summary));
        }
    }
    line(format!("  details: flotilla operations show {operation}"));
    out
}

/// Progress output: a spinner on a terminal, plain lines otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    current: Mutex<Vec<String>>,
}

impl Progress {
    fn new(terminal: bool) -> Self {
        let bar = terminal.then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
                    .expect("template"),
            );
            b.enable_steady_tick(Duration::from_millis(100));
            b
        });
        Progress {
            bar,
            current: Mutex::new(Vec::new()),
        }
    }

    fn line(&self, text: String) {
        match &self.bar {
            Some(b) => b.println(text),
            None => err!("{text}"),
        }
    }

    fn event(&self, e: Event) {
        match &e {
            Event::StepStarted { step, .. } if step.action != flotilla_plan::Action::Noop => {
                self.current.lock().unwrap().push(step.component.clone());
                if self.bar.is_some() {
                    return; // the spinner shows what runs
                }
            }
            Event::Probe { component, outcome } => {
                if let Some(b) = &self.bar {
                    b.set_message(format!("{component}: {}", outcome.evidence));
                }
            }
            Event::StepFinished(r) => {
                self.current.lock().unwrap().retain(|c| c != &r.component);
            }
            _ => {}
        }
        if let Some(line) = flotilla_exec::progress::line(&e) {
            self.line(line);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Ctrl-C once cancels the run (no further step starts; what it started is stopped
/// and journaled); twice abandons it as it is: the process exits 130 (128 + SIGINT,
/// as a shell reports an interrupted command).
async fn interrupts(cancel: flotilla_exec::CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    // SIGTERM (`timeout`, systemd, process-compose) is asked to stop like Ctrl-C.
    let mut term = signal(SignalKind::terminate()).ok();
    let mut asked = async || match term.as_mut() {
        Some(t) => tokio::select! {
            r = tokio::signal::ctrl_c() => r.is_ok().then_some(130),
            _ = t.recv() => Some(143),
        },
        None => tokio::signal::ctrl_c().await.is_ok().then_some(130),
    };
    if asked().await.is_some() {
        cancel.cancel();
        err!("interrupted: stopping what this run started (Ctrl-C again to abandon it as is)");
        if let Some(code) = asked().await {
            std::process::exit(code);
        }
    }
}
