//! `flotilla session-pod prepare` and `flotilla session-pod run -- CLAUDE [ARG…]`:
//! the two containers of a session's pod (`[runtime] kind = "kubernetes"`,
//! [`flotilla_sessions::pod`]). Not for people.
//!
//! Environment (set in the pod by the authority): `FLOTILLA_SERVER`, `FLOTILLA_CA`,
//! `FLOTILLA_SESSION_TOKEN_FILE`, `FLOTILLA_SESSION`, `HOME`, `FLOTILLA_RUN`; for
//! `prepare` also `FLOTILLA_TREE`, `FLOTILLA_TREE_ORIGIN`, `FLOTILLA_TREE_BASE`,
//! `FLOTILLA_TREE_BRANCH` (empty: a detached `HEAD`) and `FLOTILLA_AUTHORITY_WAIT`
//! (how long to keep trying to reach the authority).

use crate::Cli;
use std::path::PathBuf;

/// Arguments of `flotilla session-pod`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: PodCommand,
}

/// What the container does.
#[derive(clap::Subcommand, Debug)]
pub enum PodCommand {
    /// The init container: the session's tree on its first boot (from the
    /// authority's bundle), the agent's home reset.
    Prepare,
    /// The agent container: runs Claude Code and reports its end.
    Run {
        /// Claude Code and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .map_err(|_| crate::usage!("{name} is not set: this command runs inside a session's pod"))
}

/// Runs the container's part; its exit status.
pub fn run(_cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let home = PathBuf::from(var("HOME")?);
    match &args.command {
        PodCommand::Prepare => {
            let tree = PathBuf::from(var("FLOTILLA_TREE")?);
            // On the claim, whose root the pod's group may write.
            for d in [&tree, &home] {
                std::fs::create_dir_all(d)
                    .map_err(|e| anyhow::anyhow!("making {}: {e}", d.display()))?;
            }
            if tree.join(".git").exists() {
                eprintln!("flotilla session-pod: the tree {} is there", tree.display());
            } else {
                let id = var("FLOTILLA_SESSION")?;
                let client = super::exec::session_client()?;
                let bundle = std::env::temp_dir().join(format!("session-{id}.bundle"));
                let rt = super::runtime()?;
                // The authority may be restarting: its refusals end this at once,
                // a connection that fails is tried again for FLOTILLA_AUTHORITY_WAIT
                // (`[runtime.kubernetes] authority_wait`, default 2 min).
                let patience = std::env::var("FLOTILLA_AUTHORITY_WAIT")
                    .ok()
                    .and_then(|v| humantime::parse_duration(&v).ok())
                    .unwrap_or(std::time::Duration::from_secs(120));
                let deadline = std::time::Instant::now() + patience;
                let mut wait = std::time::Duration::from_millis(500);
                let bytes = loop {
                    match rt.block_on(client.download_session_tree(&bundle)) {
                        Ok(b) => break b,
                        Err(e @ flotilla_api::ClientError::Http { .. })
                            if std::time::Instant::now() + wait < deadline =>
                        {
                            eprintln!("flotilla session-pod: {e}; trying again in {wait:?}");
                            std::thread::sleep(wait);
                            wait = (wait * 2).min(std::time::Duration::from_secs(5));
                        }
                        Err(e) => return Err(e.into()),
                    }
                };
                let branch = var("FLOTILLA_TREE_BRANCH")?;
                flotilla_sessions::clone_cache::tree_from_bundle(
                    &bundle,
                    &tree,
                    &id,
                    &var("FLOTILLA_TREE_ORIGIN")?,
                    &var("FLOTILLA_TREE_BASE")?,
                    (!branch.is_empty()).then_some(branch.as_str()),
                )?;
                let _ = std::fs::remove_file(&bundle);
                eprintln!(
                    "flotilla session-pod: made the tree {} from a bundle of {bytes} bytes",
                    tree.display()
                );
            }
            let removed = flotilla_sessions::privsep::launcher::reset_home(&home)?;
            if !removed.is_empty() {
                eprintln!(
                    "flotilla session-pod: removed from the home: {}",
                    removed.join(", ")
                );
            }
            Ok(0)
        }
        PodCommand::Run { argv } => {
            let code = flotilla_sessions::pod::run_agent(&flotilla_sessions::pod::AgentRun {
                program: PathBuf::from(&argv[0]),
                args: argv[1..].to_vec(),
                home,
                run: PathBuf::from(var("FLOTILLA_RUN")?),
                termination_log: std::env::var_os("FLOTILLA_TERMINATION_LOG")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| flotilla_sessions::pod::TERMINATION_LOG.into()),
            })?;
            Ok(code.clamp(0, 255) as u8)
        }
    }
}
