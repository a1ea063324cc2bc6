//! `flotilla exec -- PROGRAM [ARG…]`: run inside a session's runtime, asks the
//! authority's executor to run an argv list on the session's behalf (the runtime
//! itself holds no credentials). Allowlisted reads run at once; anything else
//! opens a question for that exact argv and runs only once it is answered allow
//! (run the same command again then). Prints the program's output (capped by the
//! authority: the marker names `flotilla output ID` for the whole) and exits with
//! its status.
//!
//! Environment (set by the session's runtime): `FLOTILLA_SERVER`, `FLOTILLA_CA`,
//! `FLOTILLA_SESSION_TOKEN_FILE` (or `FLOTILLA_SESSION_TOKEN`).

use crate::{Cli, EXIT_REFUSED};
use flotilla_server::sessions::{ExecRequest, ExecResponse};
use std::io::Write;

/// Arguments of `flotilla exec`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The program and its arguments (an argv list: no shell).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

/// Runs the command; returns the program's exit status (1 when a question was
/// opened instead, or it was killed).
pub fn run(_cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let client = session_client()?;
    let rt = super::runtime()?;
    let r: ExecResponse = rt.block_on(client.post(
        "/v1/exec",
        &ExecRequest {
            argv: args.argv.clone(),
        },
    ))?;
    if r.outcome == "asked"
        && args
            .argv
            .starts_with(&["git".to_string(), "push".to_string()])
    {
        eprint!("flotilla exec: {}", r.stderr);
        return Ok(EXIT_REFUSED);
    }
    if r.outcome == "asked" {
        eprintln!(
            "flotilla exec: not an allowlisted read: question {} asks a human to allow exactly this argv; run the same command again once it is answered",
            r.question.unwrap_or_default()
        );
        return Ok(EXIT_REFUSED);
    }
    std::io::stdout().write_all(r.stdout.as_bytes())?;
    std::io::stderr().write_all(r.stderr.as_bytes())?;
    if r.timed_out {
        eprintln!("flotilla exec: the executor's timeout ended it");
    }
    Ok(r.status.map_or(EXIT_REFUSED, |c| c.clamp(0, 255) as u8))
}

/// A client of the authority with the session's own credential, from the
/// runtime's environment (`FLOTILLA_SERVER`, `FLOTILLA_CA`, the credential).
///
/// # Errors
/// A variable that is not set (not inside a runtime), an unreadable file.
pub fn session_client() -> anyhow::Result<flotilla_server::Client> {
    let var = |k: &str| {
        std::env::var(k).map_err(|_| {
            anyhow::anyhow!("{k} is not set: this command runs inside a session's runtime")
        })
    };
    let url = var("FLOTILLA_SERVER")?;
    let ca_path = var("FLOTILLA_CA")?;
    let token = super::gate::session_token()?;
    let ca = std::fs::read_to_string(&ca_path).map_err(|e| anyhow::anyhow!("{ca_path}: {e}"))?;
    Ok(flotilla_server::Client::new(&url, &ca, Some(token))?)
}
