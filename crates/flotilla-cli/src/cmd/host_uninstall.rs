//! `flotilla host uninstall HOST [--purge] [--force] [--json]`: removes what `host
//! install` put on an SSH host ([`flotilla_exec::hosts::uninstall`]), keeping its
//! state directory unless `--purge`; refused (exit 1) while flotilla processes run
//! from the install, unless `--force`.

use crate::{EXIT_OK, EXIT_REFUSED};
use flotilla_exec::hosts::{self, UninstallError};
use flotilla_exec::ssh::Pool;

/// Options of `flotilla host uninstall`.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Host name in the inventory.
    pub host: String,
    /// Remove flotilla's files from the host's state directory too (projects'
    /// journals, logs and instances, the agent's files, backups); files flotilla did
    /// not write there are kept, and listed.
    #[arg(long)]
    pub purge: bool,
    /// Remove the install even while processes run from it (they keep running,
    /// unmanaged, until they exit).
    #[arg(long)]
    pub force: bool,
    /// Print JSON: {host, removed, state_dir, purged, kept}.
    #[arg(long)]
    pub json: bool,
}

/// Runs it on `fleet`; returns the exit status.
pub fn run(fleet: &Pool, o: &Options) -> anyhow::Result<u8> {
    let result = super::runtime()?.block_on(hosts::uninstall(fleet, &o.host, o.purge, o.force));
    match result {
        Ok(r) => {
            if o.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                match &r.removed {
                    Some(root) => println!("removed flotilla from `{}`: {root}", r.host),
                    None => println!(
                        "flotilla is not installed on `{}`: nothing to remove",
                        r.host
                    ),
                }
                if r.purged && r.kept.is_empty() {
                    println!("removed its state directory {}", r.state_dir);
                } else if r.purged {
                    println!(
                        "removed flotilla's files from its state directory {}, and kept what flotilla did not write there: {}",
                        r.state_dir,
                        r.kept.join(", ")
                    );
                } else {
                    println!(
                        "kept its state directory {} (--purge removes it)",
                        r.state_dir
                    );
                }
            }
            Ok(EXIT_OK)
        }
        Err(e @ UninstallError::Running { .. }) => {
            eprintln!("refused: {e}");
            Ok(EXIT_REFUSED)
        }
        Err(e) => Err(e.into()),
    }
}
