//! `flotilla completions SHELL`: a completion script for bash, zsh, fish, elvish or PowerShell.

use crate::EXIT_OK;

/// Arguments of `flotilla completions`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shell.
    pub shell: clap_complete::Shell,
}

/// Runs the subcommand; returns the exit status.
pub fn run(args: &Args) -> anyhow::Result<u8> {
    let mut cmd = crate::command();
    clap_complete::generate(args.shell, &mut cmd, "flotilla", &mut std::io::stdout());
    Ok(EXIT_OK)
}
