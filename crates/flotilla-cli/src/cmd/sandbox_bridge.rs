//! `flotilla sandbox-bridge --forward PORT=SOCKET… -- PROGRAM [ARG…]`: the first
//! program of a session's sandbox when it has no network of its own
//! (`network = "proxy"`): listens on the loopback ports inside, relays each
//! connection to its Unix socket (served by the authority outside), runs the agent
//! and exits with its status ([`flotilla_sessions::bridge`]). Not for people.

use crate::Cli;

/// Arguments of `flotilla sandbox-bridge`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// `PORT=SOCKET`: connections to 127.0.0.1:PORT go to SOCKET.
    #[arg(long = "forward", value_parser = flotilla_sessions::bridge::Forward::parse)]
    pub forwards: Vec<flotilla_sessions::bridge::Forward>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

/// Runs the agent behind the bridge; returns its exit status (128 + signal when
/// a signal ended it).
pub fn run(_cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    use std::os::unix::process::ExitStatusExt;
    let status = flotilla_sessions::bridge::run(&args.forwards, &args.argv[0], &args.argv[1..])?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        _ => 1,
    })
}
