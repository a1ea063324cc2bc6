//! `flotilla exec -- PROGRAM [ARG…]`: run inside a session's runtime, asks the
//! authority's executor to run an argv list on the session's behalf (the runtime
//! itself holds no credentials). Allowlisted reads run at once; anything else
//! opens a question for that exact argv and runs only once it is answered allow
//! (run the same command again then). Prints the program's output (capped by the
//! authority: the marker names `flotilla output ID` for the whole) and exits with
//! its status, or 124 (timed out), 126 (not allowed yet), 137 (a signal), 125
//! (`flotilla exec` itself failed).
//!
//! Environment (set by the session's runtime): `FLOTILLA_SERVER`, `FLOTILLA_CA`,
//! `FLOTILLA_SESSION_TOKEN_FILE` (or `FLOTILLA_SESSION_TOKEN`).

use crate::Cli;
use flotilla_api::sessions::{ExecRequest, ExecResponse};
use std::io::Write;

/// Arguments of `flotilla exec`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The program and its arguments (an argv list: no shell).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

/// `flotilla exec`'s own failure (the authority unreachable, not inside a runtime), as
/// `docker run` says 125: a program's status never means it.
pub const EXIT_EXEC_FAILED: u8 = 125;
/// Not run: a question asks a human to allow it (or a push waits for an answer), as a
/// shell says 126 for a command it may not run.
pub const EXIT_NOT_ALLOWED: u8 = 126;
/// The executor's timeout ended the program (as `timeout(1)` says).
pub const EXIT_TIMED_OUT: u8 = 124;
/// A signal ended the program (128 + SIGKILL; the executor does not pass the number on).
pub const EXIT_SIGNALED: u8 = 137;

/// Runs the command. Exit status: the program's own when it ran; otherwise
/// [`EXIT_TIMED_OUT`], [`EXIT_SIGNALED`], [`EXIT_NOT_ALLOWED`] or
/// [`EXIT_EXEC_FAILED`] (its cause printed), so that the program's 1, 2 or 3 is
/// never mistaken for Flotilla's.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    match exec(cli, args) {
        Ok(code) => Ok(code),
        Err(e) => {
            crate::print_error(e.as_ref());
            Ok(EXIT_EXEC_FAILED)
        }
    }
}

fn exec(_cli: &Cli, args: &Args) -> anyhow::Result<u8> {
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
        return Ok(EXIT_NOT_ALLOWED);
    }
    if r.outcome == "asked" {
        eprintln!(
            "flotilla exec: not an allowlisted read: question {} asks a human to allow exactly this argv; run the same command again once it is answered",
            r.question.unwrap_or_default()
        );
        return Ok(EXIT_NOT_ALLOWED);
    }
    std::io::stdout().write_all(r.stdout.as_bytes())?;
    std::io::stderr().write_all(r.stderr.as_bytes())?;
    if r.timed_out {
        eprintln!("flotilla exec: the executor's timeout ended it");
        return Ok(EXIT_TIMED_OUT);
    }
    Ok(match r.status {
        Some(c) => c.clamp(0, 255) as u8,
        None => {
            eprintln!("flotilla exec: a signal ended it");
            EXIT_SIGNALED
        }
    })
}

/// A client of the authority with the session's own credential, from the
/// runtime's environment (`FLOTILLA_SERVER`, `FLOTILLA_CA`, the credential).
///
/// # Errors
/// A variable that is not set (not inside a runtime), an unreadable file.
pub fn session_client() -> anyhow::Result<flotilla_api::Client> {
    let var = |k: &str| {
        std::env::var(k).map_err(|_| {
            crate::usage!("{k} is not set: this command runs inside a session's runtime")
        })
    };
    let url = var("FLOTILLA_SERVER")?;
    let ca_path = var("FLOTILLA_CA")?;
    let token = super::gate::session_token()?;
    let ca = std::fs::read_to_string(&ca_path).map_err(|e| anyhow::anyhow!("{ca_path}: {e}"))?;
    Ok(flotilla_api::Client::new(&url, &ca, Some(token))?)
}
