//! `flotilla config publish|history|show|diff|select`: the authority's revisions
//! (immutable desired states named by their SHA-256) and which one is selected; and
//! `flotilla config migrate` ([`super::config_migrate`]), which needs no authority.

use crate::{Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_api::wire::{PublishRequest, SelectRequest, SelectResponse};
use flotilla_api::ClientError;

/// Arguments of `flotilla config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// `flotilla config` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate the inventory (-f) and publish it as a revision, selecting it. The
    /// same content twice is the same revision and changes nothing.
    Publish {
        /// Only if this revision is the one selected now (compare-and-swap).
        #[arg(long, value_name = "sha256:…")]
        expect: Option<String>,
        /// Print JSON: {revision, changed, selection}.
        #[arg(long)]
        json: bool,
    },
    /// The revisions, newest first, and the selection log.
    History {
        /// Print JSON: {revisions, selections}.
        #[arg(long)]
        json: bool,
    },
    /// One revision's topology (JSON).
    Show {
        /// The revision (`sha256:…`, or a unique prefix of its hex).
        revision: String,
    },
    /// What changed between two revisions, per component.
    Diff {
        /// From.
        from: String,
        /// To.
        to: String,
        /// Print JSON: {from, to, changes}.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite the inventory (-f) to the current format version, keeping comments
    /// and order; shows the difference first.
    Migrate(super::config_migrate::Options),
    /// Select an existing revision (e.g. to roll back), only if `--expect` is the
    /// one selected now.
    Select {
        /// The revision.
        revision: String,
        /// The revision selected now (compare-and-swap; required).
        #[arg(long, value_name = "sha256:…")]
        expect: String,
        /// Print JSON: {revision, changed, selection}.
        #[arg(long)]
        json: bool,
    },
}

fn print_selected(r: &SelectResponse, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else if r.changed {
        println!("selected {} (index {})", r.revision, r.selection.index);
    } else {
        println!("{} is already selected: nothing changed", r.revision);
    }
    Ok(())
}

/// A stale `--expect` is exit 1 with the current revision named; other errors bubble.
fn refused(e: ClientError) -> anyhow::Result<u8> {
    match &e {
        ClientError::Api {
            status: 409, error, ..
        } => {
            eprintln!(
                "refused: the selected revision is {}, not the one --expect names; nothing changed",
                error.current.as_deref().unwrap_or("none")
            );
            Ok(EXIT_REFUSED)
        }
        _ => Err(e.into()),
    }
}

/// Expands a unique hex prefix to a full revision name
/// ([`flotilla_api::Client::resolve_revision`]); none or several is a usage error.
async fn resolve(client: &flotilla_api::Client, rev: &str) -> anyhow::Result<String> {
    use flotilla_api::RevisionPrefixError as E;
    client.resolve_revision(rev).await.map_err(|e| match e {
        E::Client(e) => e.into(),
        e => crate::usage(e.to_string()),
    })
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    match &args.command {
        ConfigCommand::Migrate(o) => super::config_migrate::run(cli.file.as_deref(), o),
        command => with_authority(cli, command),
    }
}

/// The subcommands that speak to the authority.
fn with_authority(cli: &Cli, command: &ConfigCommand) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    let client = super::authority::client(cli)?;
    match command {
        ConfigCommand::Migrate(o) => super::config_migrate::run(cli.file.as_deref(), o),
        ConfigCommand::Publish { expect, json } => {
            let (_loaded, validated) = match super::topology_or_exit(cli)? {
                Ok(v) => v,
                Err(code) => return Ok(code),
            };
            let topology = serde_json::from_str(&validated.topology.revision_json())?;
            match rt.block_on(client.publish(&PublishRequest {
                topology,
                expect: expect.clone(),
            })) {
                Ok(r) => {
                    print_selected(&r, *json)?;
                    Ok(EXIT_OK)
                }
                Err(e) => refused(e),
            }
        }
        ConfigCommand::History { json } => {
            let h = rt.block_on(client.history())?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&h)?);
                return Ok(EXIT_OK);
            }
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let mut rows = vec![vec![
                "REVISION".to_string(),
                "PUBLISHED".into(),
                "BY".into(),
                "SELECTED".into(),
            ]];
            for r in &h.revisions {
                rows.push(vec![
                    r.revision.clone(),
                    flotilla_exec::observe::age(now_ms - r.created_ms) + " ago",
                    r.published_by.clone(),
                    if r.selected {
                        "*".into()
                    } else {
                        String::new()
                    },
                ]);
            }
            print!("{}", crate::render::table(&rows));
            if !h.selections.is_empty() {
                println!();
                let mut rows = vec![vec![
                    "INDEX".to_string(),
                    "SELECTED".into(),
                    "WHEN".into(),
                    "BY".into(),
                ]];
                for s in &h.selections {
                    rows.push(vec![
                        s.index.to_string(),
                        s.revision.clone(),
                        flotilla_exec::observe::age(now_ms - s.selected_ms) + " ago",
                        s.selected_by.clone(),
                    ]);
                }
                print!("{}", crate::render::table(&rows));
            }
            Ok(EXIT_OK)
        }
        ConfigCommand::Show { revision } => {
            let rev = rt.block_on(resolve(&client, revision))?;
            let r = rt.block_on(client.revision(&rev))?;
            println!("{}", serde_json::to_string_pretty(&r.topology)?);
            Ok(EXIT_OK)
        }
        ConfigCommand::Diff { from, to, json } => {
            let (a, b) = rt.block_on(async {
                Ok::<_, anyhow::Error>((resolve(&client, from).await?, resolve(&client, to).await?))
            })?;
            let d = rt.block_on(client.diff(&a, &b))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&d)?);
                return Ok(EXIT_OK);
            }
            if d.changes.is_empty() {
                println!("no changes");
            }
            for c in &d.changes {
                println!(
                    "{} {} {}{}",
                    c.change,
                    c.kind,
                    c.name,
                    if c.restarts { " (restarts)" } else { "" }
                );
                for line in &c.details {
                    println!("    {line}");
                }
            }
            Ok(EXIT_OK)
        }
        ConfigCommand::Select {
            revision,
            expect,
            json,
        } => {
            let (rev, expect) = rt.block_on(async {
                Ok::<_, anyhow::Error>((
                    resolve(&client, revision).await?,
                    resolve(&client, expect).await?,
                ))
            })?;
            match rt.block_on(client.select(&SelectRequest {
                revision: rev,
                expect: Some(expect),
            })) {
                Ok(r) => {
                    print_selected(&r, *json)?;
                    Ok(EXIT_OK)
                }
                Err(e) => refused(e),
            }
        }
    }
}
