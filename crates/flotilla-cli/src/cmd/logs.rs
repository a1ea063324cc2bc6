//! `flotilla logs COMPONENT [-f] [--tail N]`: a component's log (its stdout and stderr);
//! for a component on an `ssh` host, read on that host.

use crate::{Cli, EXIT_OK, EXIT_USAGE};
use flotilla_exec::statedir::StateDir;
use std::io::Write;

/// Arguments of `flotilla logs`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The component.
    pub component: String,
    /// Keep printing new lines as they are written (until interrupted).
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// How many of the last lines to print first.
    #[arg(long, short = 'n', default_value_t = 50)]
    pub tail: usize,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let (_, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    if validated.topology.id(&args.component).is_none() {
        eprintln!("error: `{}` is not a component", args.component);
        return Ok(EXIT_USAGE);
    }
    let topology = &validated.topology;
    let component = topology.component(topology.id(&args.component).expect("checked"));
    if topology
        .hosts
        .get(&component.host)
        .is_some_and(|h| h.is_remote())
    {
        return remote(cli, topology, &component.host, args);
    }
    let state = StateDir::resolve(cli.state_dir.as_deref())?;
    let path = state.log(&args.component);
    if !path.exists() && !args.follow {
        eprintln!(
            "no log yet for `{}` ({} does not exist: it was never started here)",
            args.component,
            path.display()
        );
        return Ok(EXIT_OK);
    }
    let lines = flotilla_exec::logs::tail_log(&path, args.tail).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    for l in lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    if !args.follow {
        return Ok(EXIT_OK);
    }
    let from = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    flotilla_exec::logs::follow(&path, from, &mut out)?;
    Ok(EXIT_OK)
}

/// The log of a component on an `ssh` host, read there.
fn remote(
    cli: &Cli,
    topology: &flotilla_model::Topology,
    host: &str,
    args: &Args,
) -> anyhow::Result<u8> {
    if args.follow {
        eprintln!(
            "error: `{}` runs on host `{host}`: `logs -f` follows local logs only; use `ssh` there, or `flotilla logs {}` again",
            args.component, args.component
        );
        return Ok(EXIT_USAGE);
    }
    let fleet = super::ssh_pool(cli, topology);
    let rt = super::runtime()?;
    let call = flotilla_exec::remote::Call::Logs {
        component: args.component.clone(),
        lines: args.tail,
    };
    match rt.block_on(flotilla_exec::remote::call(
        &fleet,
        host,
        call,
        cli.host_timeout,
    )) {
        Ok(flotilla_exec::remote::Reply::Logs {
            path,
            exists,
            lines,
        }) => {
            if !exists {
                eprintln!(
                    "no log yet for `{}` on host `{host}` ({path})",
                    args.component
                );
            }
            let mut out = std::io::stdout().lock();
            for l in lines {
                writeln!(out, "{l}")?;
            }
            Ok(EXIT_OK)
        }
        Ok(other) => anyhow::bail!("host `{host}` answered with {other:?}"),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(crate::EXIT_REFUSED)
        }
    }
}
