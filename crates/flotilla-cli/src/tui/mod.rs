//! `flotilla tui`: a terminal UI over the same library as the CLI — a component
//! table over a log pane that follows the selected components; start, stop and
//! restart that show their plan (and equivalent command) and ask before applying
//! exactly that plan; every status signal's evidence one key away; the dependency
//! view; with `--server`, the authority's fleet and its open questions, answerable.
//!
//! Code map:
//! - `model.rs`: the state ([`model::App`]): plain data, no IO.
//! - `action.rs`: what flows through the channel ([`action::Action`]) and what the
//!   update asks for ([`action::Effect`]).
//! - `update.rs`: keys and data → state and effects; pure.
//! - `components/`: the screen, one file per component (table, log pane, help,
//!   plan dialog, evidence, dependency view, questions pane), each drawing from the
//!   state alone.
//! - `source.rs`: the library calls: observe, follow logs, plan, apply, answer.
//! - `runtime.rs`: the event loop (input thread + tasks → channel → update → draw).
//! - `terminal.rs`: raw mode and the alternate screen, restored on every exit
//!   (panics too); standard error captured meanwhile.

pub mod action;
pub mod components;
pub mod model;
pub mod runtime;
pub mod source;
pub mod terminal;
pub mod update;

#[cfg(test)]
mod tests;

use crate::{cmd, load, Cli, EXIT_OK};
use std::sync::Arc;
use std::time::Duration;

/// What `flotilla tui` was asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often to observe again.
    pub interval: Duration,
    /// Readiness deadline per component an action starts.
    pub ready_timeout: Duration,
}

/// Runs the terminal UI until it quits; returns the exit status.
///
/// # Errors
/// The inventory or the authority cannot be used, or the terminal cannot be set up.
pub fn run(cli: &Cli, opts: &Options) -> anyhow::Result<u8> {
    let server = cli.server.server.clone();
    // Local mode needs the inventory; with --server it is optional (it adds the
    // actions, the logs and the dependency view).
    let inventory = server.is_none() || cli.file.is_some() || load::inventory_path(None).is_ok();
    let loaded = if inventory {
        match cmd::topology_or_exit(cli)? {
            Ok(v) => Some(v),
            Err(code) => return Ok(code),
        }
    } else {
        None
    };
    let rt = cmd::runtime()?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (world, operate, graph) = match loaded {
        Some((loaded, validated)) => {
            let graph = components::deps::graph(&validated.topology);
            let world = Arc::new(cmd::world(cli, validated.topology)?);
            let operate = source::Operate {
                explicit_state: cli.state_dir.clone(),
                base_dir: loaded.base_dir,
                ready_timeout: opts.ready_timeout,
            };
            (Some(world), Some(operate), Some(graph))
        }
        None => (None, None, None),
    };
    let client = match &server {
        Some(_) => Some(cmd::authority::client(cli)?),
        None => None,
    };
    let mode = match (&server, &world) {
        (Some(url), _) => model::Mode::Server { url: url.clone() },
        (None, Some(w)) => model::Mode::Local {
            project: w.project().to_string(),
        },
        (None, None) => unreachable!("local mode loads the inventory"),
    };
    let can_operate = match &world {
        Some(_) => Ok(()),
        None => Err("no inventory here: start, stop and restart need it (-f FILE)".to_string()),
    };
    let app = model::App::new(mode, graph, can_operate);
    let source = Arc::new(source::Source::new(
        tx.clone(),
        world,
        operate,
        client,
        opts.interval,
    ));
    let mut screen = terminal::Screen::enter()?;
    runtime::spawn_input(tx);
    let result = rt.block_on(runtime::run(app, source, rx, &mut screen.terminal));
    let captured = screen.leave();
    if !captured.is_empty() {
        eprint!("{captured}");
    }
    result?;
    // An observation under way (a remote host slow to answer) is not waited for.
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(EXIT_OK)
}
