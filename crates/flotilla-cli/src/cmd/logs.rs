//! `flotilla logs COMPONENT [-f] [--tail N]`: a component's log (its stdout and stderr).

use crate::{Cli, EXIT_OK, EXIT_USAGE};
use flotilla_exec::statedir::StateDir;
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

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
    let mut pos = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    loop {
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < pos {
            pos = 0; // rotated (copy-truncate)
        }
        if len > pos {
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(pos))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            out.write_all(&buf)?;
            out.flush()?;
            pos += buf.len() as u64;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
