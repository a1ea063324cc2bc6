//! `flotilla gate hook`: the permission gate as a Claude Code command hook
//! (`PreToolUse`, `PermissionRequest`; <https://code.claude.com/docs/en/hooks>).
//!
//! Reads the hook's input JSON on stdin, asks the authority's gate
//! (`POST /v1/gate/hook`, with the session's own credential), prints the answer
//! JSON on stdout and exits 0. **Fails closed**: any error (no or bad input, no
//! credential, the authority unreachable or slow, an answer without a decision)
//! exits 2 with the reason on stderr, which Claude Code treats as a block; never
//! 1, which it would treat as "go ahead".
//!
//! Environment (set by the session's runtime): `FLOTILLA_SERVER` (the authority's
//! URL), `FLOTILLA_CA` (its CA, PEM file), `FLOTILLA_SESSION_TOKEN_FILE` (the file
//! holding the session's credential; or the credential itself in
//! `FLOTILLA_SESSION_TOKEN`).

use crate::{Cli, EXIT_OK};
use std::io::{Read, Write};
use std::time::Duration;

/// Exit status of a denied or failed hook (Claude Code: a blocking error).
pub const EXIT_BLOCK: u8 = 2;

/// Arguments of `flotilla gate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: GateCommand,
}

/// `flotilla gate` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum GateCommand {
    /// Answer one Claude Code hook call (stdin: its JSON; stdout: the decision).
    Hook {
        /// How long to wait for the authority.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
}

/// Runs the subcommand; returns the exit status (never fails: errors deny).
///
/// The whole input is read before anything else (a writer that is cut off gets no
/// EPIPE from us); SIGPIPE is ignored (`main`), so a closed peer is an error here,
/// answered with exit 2; a closed standard output is found before any work (Rust's
/// runtime reopens it on `/dev/null`, where a decision would be lost: see
/// [`stdout_lost`]).
pub fn run(_cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let GateCommand::Hook { timeout } = &args.command;
    if let Some(why) = stdout_lost() {
        eprintln!(
            "flotilla gate: denied (the gate failed closed): {why}: no decision could be given"
        );
        return Ok(EXIT_BLOCK);
    }
    match hook(*timeout) {
        Ok(answer) => {
            let mut out = std::io::stdout();
            let written = out
                .write_all(&answer)
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.flush());
            match written {
                Ok(()) => Ok(EXIT_OK),
                Err(e) => {
                    eprintln!("flotilla gate: denied (the gate failed closed): cannot write the decision: {e}");
                    Ok(EXIT_BLOCK)
                }
            }
        }
        Err(why) => {
            eprintln!("flotilla gate: denied (the gate failed closed): {why:#}");
            Ok(EXIT_BLOCK)
        }
    }
}

fn hook(timeout: Duration) -> anyhow::Result<Vec<u8>> {
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input)?;
    let limit = flotilla_server::sessions::GATE_BODY_LIMIT;
    if input.len() > limit {
        anyhow::bail!(
            "the hook payload is {} bytes; the gate reads at most {limit}",
            input.len()
        );
    }
    flotilla_sessions::hook::HookInput::parse(&input)?;
    let var = |k: &str| std::env::var(k).map_err(|_| anyhow::anyhow!("{k} is not set"));
    let url = var("FLOTILLA_SERVER")?;
    let ca_path = var("FLOTILLA_CA")?;
    let token = session_token()?;
    let ca = std::fs::read_to_string(&ca_path).map_err(|e| anyhow::anyhow!("{ca_path}: {e}"))?;
    let client = flotilla_api::Client::new(&url, &ca, Some(token))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answer = rt.block_on(async {
        tokio::time::timeout(timeout, client.post_bytes("/v1/gate/hook", input, timeout))
            .await
            .map_err(|_| anyhow::anyhow!("the authority did not answer within {timeout:?}"))?
            .map_err(anyhow::Error::from)
    })?;
    let v: serde_json::Value = serde_json::from_slice(&answer)?;
    if v.get("hookSpecificOutput").is_none() {
        anyhow::bail!("the authority's answer has no decision: {v}");
    }
    Ok(answer)
}

/// Why a decision written to standard output would reach nobody: it is closed, or
/// it is `/dev/null` (Rust's runtime reopens a closed standard descriptor on
/// `/dev/null` before `main`, so a closed one shows up as that).
fn stdout_lost() -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let fd = std::io::stdout();
    let meta = match nix::sys::stat::fstat(&fd) {
        Ok(m) => m,
        Err(e) => return Some(format!("standard output is closed ({e})")),
    };
    let null = std::fs::metadata("/dev/null").ok()?;
    let is_char = (meta.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFCHR;
    (is_char && null.file_type().is_char_device() && meta.st_rdev == null.rdev())
        .then(|| "standard output is closed (or /dev/null)".to_string())
}

/// The session's credential: `FLOTILLA_SESSION_TOKEN`, else the contents of the
/// file `FLOTILLA_SESSION_TOKEN_FILE` names.
///
/// # Errors
/// When neither is set, or the file cannot be read.
pub fn session_token() -> anyhow::Result<String> {
    if let Ok(t) = std::env::var("FLOTILLA_SESSION_TOKEN") {
        return Ok(t);
    }
    let path = std::env::var("FLOTILLA_SESSION_TOKEN_FILE").map_err(|_| {
        anyhow::anyhow!("neither FLOTILLA_SESSION_TOKEN nor FLOTILLA_SESSION_TOKEN_FILE is set")
    })?;
    Ok(std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{path}: {e}"))?
        .trim()
        .to_string())
}
