//! `flotilla output ID`: a whole tool or executor output that was shown capped.

use crate::{Cli, EXIT_OK};
use std::io::Write;

/// Arguments of `flotilla output`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The output's id (named in the capped text's marker).
    pub id: String,
}

/// Runs the command; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let client = super::authority::client(cli)?;
    let rt = super::runtime()?;
    let text = rt.block_on(client.get_text(&format!("/v1/outputs/{}", args.id)))?;
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(EXIT_OK)
}
