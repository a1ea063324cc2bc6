//! `flotilla`: the command-line interface. Each subcommand lives in its own file under
//! `cmd/` and is a thin call into `flotilla-model` / `flotilla-plan`.
//!
//! Code map:
//! - `main.rs`: argument parsing (clap), dispatch, error printing, exit codes.
//! - `load.rs`: finding and reading the inventory and its templates.
//! - `render.rs`: diagnostics and aligned tables.
//! - `cmd/*.rs`: one file per subcommand.

mod cmd;
mod load;
mod render;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the operation was refused, or something is not as desired or healthy.
pub const EXIT_REFUSED: u8 = 1;
/// Exit status: usage error, unreadable or invalid inventory.
pub const EXIT_USAGE: u8 = 2;

const AFTER_HELP: &str = "\
Exit status:
  0  success
  1  refused (the plan cannot proceed), or not as desired / unhealthy
  2  usage error, or an unreadable or invalid inventory

Environment:
  FLOTILLA_FILE  inventory path (same as -f)
  NO_COLOR       disable colour in diagnostics";

/// Flotilla: declare a fleet of self-hosted AI services once, plan every change
/// before touching anything, and see a status that cannot lie.
#[derive(Parser, Debug)]
#[command(name = "flotilla", version, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// Inventory file (TOML, or JSON by its .json extension). Default: ./flotilla.toml, then ./flotilla.json.
    #[arg(
        short = 'f',
        long = "file",
        global = true,
        env = "FLOTILLA_FILE",
        value_name = "FILE"
    )]
    pub file: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check the inventory and report every problem with its file:line:column.
    Validate(cmd::validate::Args),
    /// Show what an operation would do, without doing it.
    Plan(cmd::plan::Args),
    /// Show the validated dependency graph (table, JSON or Graphviz dot).
    Topology(cmd::topology::Args),
    /// Print the JSON Schema (draft 2020-12) of the inventory or of a template.
    Schema(cmd::schema::Args),
    /// Print a shell completion script.
    Completions(cmd::completions::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Validate(a) => cmd::validate::run(&cli, a),
        Command::Plan(a) => cmd::plan::run(&cli, a),
        Command::Topology(a) => cmd::topology::run(&cli, a),
        Command::Schema(a) => cmd::schema::run(a),
        Command::Completions(a) => cmd::completions::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(EXIT_USAGE)
        }
    }
}
