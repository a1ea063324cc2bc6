//! `flotilla ui [OBJECT] [--print]`: open the web dashboard's page of OBJECT
//! (`flotilla_api::links::Link::parse`) under the authority's URL (`--server`,
//! else the default listening address) in this machine's browser
//! (`flotilla_exec::browser`), or print its URL. A component, host or stack is
//! looked up first in what the authority knows (`GET /v1/status`, with the operator
//! credential): one it does not know is a usage error naming what it knows; when
//! the authority cannot be asked, the URL is given unchecked, saying so.

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
    let object = args.object.as_deref().unwrap_or("overview");
    let link = match Link::parse(object) {
        Ok(l) => l,
        Err(e) => {
            let hint = if object.contains('/') {
                String::new()
            } else {
                format!("\n  a component, host or stack is named with its kind: `flotilla ui component/{object}`, `host/{object}`, `stack/{object}`")
            };
            return Err(crate::usage(format!("{e}{hint}")));
        }
    };
    if let Some((kind, name)) = match &link {
        Link::Component(n) => Some(("component", n)),
        Link::Host(n) => Some(("host", n)),
        Link::Stack(n) => Some(("stack", n)),
        _ => None,
    } {
        match known(cli, kind) {
            Ok(names) if !names.iter().any(|n| n == name) => {
                eprintln!(
                    "error: the authority knows no {kind} `{name}`{}",
                    match flotilla_model::diag::did_you_mean(name, names.iter().map(String::as_str))
                    {
                        Some(s) => format!(" (did you mean `{kind}/{s}`?)"),
                        None if names.is_empty() => format!(" (it knows no {kind} at all)"),
                        None => format!(" ({kind}s: {})", names.join(", ")),
                    }
                );
                return Ok(EXIT_USAGE);
            }
            Ok(_) => {}
            Err(e) => eprintln!("note: not checked that {kind} `{name}` exists: {e:#}"),
        }
    }
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
            eprintln!("{e}; open it yourself:");
            println!("{url}");
        }
    }
    Ok(EXIT_OK)
}

/// The names of every `kind` (`component`, `host`, `stack`) the authority knows.
fn known(cli: &Cli, kind: &str) -> anyhow::Result<Vec<String>> {
    let client = super::authority::client(cli)?;
    let status = super::runtime()?.block_on(client.status())?;
    Ok(match kind {
        "component" => status
            .report
            .components
            .into_iter()
            .map(|c| c.name)
            .collect(),
        "host" => status.hosts.into_iter().map(|h| h.host).collect(),
        _ => status.report.stacks.into_iter().map(|s| s.name).collect(),
    })
}
