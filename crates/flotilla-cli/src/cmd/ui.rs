//! `flotilla ui [OBJECT] [--print]`: open the web dashboard's page of OBJECT
//! (`flotilla_api::links::Link::parse`) under the authority's URL (`--server`,
//! else the default listening address) in this machine's browser
//! (`flotilla_exec::browser`), or print its URL.

use crate::{Cli, EXIT_OK, EXIT_USAGE};
use flotilla_api::links::Link;

/// Arguments of `flotilla ui`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The page: `component/NAME`, `host/NAME`, `question/ID`, `rollout/ID`,
    /// `session/ID`, `stack/NAME`, `revision/DIGEST`, or a list (`questions`,
    /// `sessions`, `stacks`, `revisions`, `releases`, `alerts`); default the
    /// overview.
    pub object: Option<String>,
    /// Print the URL instead of opening it (also what happens when there is no
    /// browser here: no display, no `$BROWSER`).
    #[arg(long)]
    pub print: bool,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let link = match Link::parse(args.object.as_deref().unwrap_or("overview")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let base = cli
        .server
        .server
        .clone()
        .unwrap_or_else(|| format!("https://{}", flotilla_server::authority::DEFAULT_LISTEN));
    let url = link.url(&base);
    if args.print {
        println!("{url}");
        return Ok(EXIT_OK);
    }
    match flotilla_exec::browser::open(&url) {
        Ok(how) => eprintln!("opened {url} ({how})"),
        Err(e) => {
            eprintln!("{e}: open it yourself:");
            println!("{url}");
        }
    }
    Ok(EXIT_OK)
}
