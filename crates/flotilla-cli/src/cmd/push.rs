//! `flotilla push [REMOTE] [SRC[:DST]]`: run inside a session's runtime, asks the
//! authority to push commits of the session's tree. The runtime cannot push itself
//! (no remote is writable from its sandbox): the authority takes the commits from
//! the tree, opens a question showing the branch, the remote and the commits, and
//! pushes exactly that commit, once, from outside the sandbox when a human answers
//! allow; the session is told the outcome. `REMOTE` is `origin` (the session's
//! repository, the only one); `SRC` is `HEAD` (default) or a branch of the tree;
//! `DST` a branch of the remote (default `flotilla/session-<id>`). Exits 1: the push
//! waits for a human.
//!
//! Environment (set by the session's runtime): `FLOTILLA_SERVER`, `FLOTILLA_CA`,
//! `FLOTILLA_SESSION_TOKEN_FILE` (or `FLOTILLA_SESSION_TOKEN`).

use crate::{Cli, EXIT_REFUSED};
use flotilla_api::sessions::{PushRequest, PushResponse};

/// Arguments of `flotilla push`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The remote (`origin`, the only one).
    pub remote: Option<String>,
    /// `SRC[:DST]` (default `HEAD:flotilla/session-<id>`).
    pub refspec: Option<String>,
}

/// Asks for the push; returns 1 (a question waits).
pub fn run(_cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let client = super::exec::session_client()?;
    let rt = super::runtime()?;
    let r: PushResponse = rt.block_on(client.post(
        "/v1/push",
        &PushRequest {
            remote: args.remote.clone(),
            refspec: args.refspec.clone(),
        },
    ))?;
    eprintln!(
        "flotilla push: question {} asks a human to allow pushing {} to origin {}:",
        r.question,
        &r.commit[..12.min(r.commit.len())],
        r.branch
    );
    for c in &r.commits {
        eprintln!("  {c}");
    }
    eprintln!(
        "the authority pushes exactly this commit when they allow it, and tells this session"
    );
    Ok(EXIT_REFUSED)
}
