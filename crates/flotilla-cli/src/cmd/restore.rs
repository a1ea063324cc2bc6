//! `flotilla restore ARCHIVE`: a project's state directory from an archive of
//! `flotilla backup`; `flotilla serve restore ARCHIVE`: the authority's (and its
//! PostgreSQL database with `--database-url`). Refused with nothing changed for an
//! archive cut short, altered or from a newer version, and while the target is in
//! use; the state it replaces is kept beside it. A thin call into
//! `flotilla_exec::backup` / `flotilla_server::backup`.

use super::authority::{authority_dir, StoreArgs};
use super::backup::failed;
use crate::{Cli, EXIT_OK};
use flotilla_exec::statedir::StateDir;
use flotilla_store::backup::{BackupError, Manifest, Restored};
use std::path::PathBuf;

/// Arguments of `flotilla restore`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The archive (a directory `project-<name>-<time>` made by `flotilla backup`).
    /// It is restored into the project it was taken of, under the state directory
    /// (`--state-dir`); `-p NAME` restores it as another project.
    pub archive: PathBuf,
    /// Print JSON: {target, previous, manifest}.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `flotilla serve restore`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The archive (a directory `authority-<time>` made by `flotilla serve backup`
    /// or before a migration).
    pub archive: PathBuf,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Print JSON: {target, previous, database, manifest}.
    #[arg(long)]
    pub json: bool,
}

/// An archive that is not there is a usage error.
fn exists(archive: &std::path::Path) -> anyhow::Result<()> {
    if archive.exists() {
        return Ok(());
    }
    Err(crate::usage(format!(
        "there is no archive at {}",
        archive.display()
    )))
}

/// `flotilla restore`.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    exists(&args.archive)?;
    let project = match &cli.project {
        Some(p) => p.clone(),
        // The archive's own project (read again, and checked, by the restore).
        None => match Manifest::read(&args.archive, flotilla_store::backup::sqlite::supported) {
            Ok(m) => m.name,
            Err(e) => return failed(e, args.json),
        },
    };
    let state = StateDir::resolve(cli.state_dir.as_deref(), &project)?;
    let done = flotilla_exec::backup::restore_project(
        &state,
        &args.archive,
        flotilla_exec::this_process::now_ms(),
    );
    report(done, args.json)
}

/// `flotilla serve restore`.
pub fn run_serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<u8> {
    exists(&args.archive)?;
    let dir = authority_dir(cli, &args.store)?;
    let rt = super::runtime()?;
    let done = rt.block_on(flotilla_server::backup::restore_authority(
        &dir,
        &args.archive,
        args.store.database_url.as_deref(),
        flotilla_exec::this_process::now_ms(),
    ));
    report(done, args.json)
}

/// Prints what a restore did.
fn report(done: Result<Restored, BackupError>, json: bool) -> anyhow::Result<u8> {
    let r = match done {
        Ok(r) => r,
        Err(e) => return failed(e, json),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "target": r.target,
                "previous": r.previous,
                "database": r.database.as_ref().map(|d| serde_json::json!({
                    "name": d.database,
                    "previous": d.previous,
                })),
                "manifest": r.manifest,
            }))?
        );
        return Ok(EXIT_OK);
    }
    let m = &r.manifest;
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(m.created_ms.max(0) as u64);
    println!(
        "restored {} `{}` into {} (backup of {}, {} by flotilla {}, {})",
        m.kind,
        m.name,
        r.target.display(),
        humantime::format_rfc3339_millis(when),
        m.reason,
        m.flotilla_version,
        m.source.display()
    );
    let files = m
        .files
        .iter()
        .filter(|f| f.kind == flotilla_store::backup::EntryKind::File)
        .count();
    println!(
        "  checked: {files} files by size and SHA-256; {} database(s): integrity, schema, row counts",
        m.databases.len()
    );
    match &r.previous {
        Some(p) => println!("  the state it replaced is kept in {}", p.display()),
        None => println!("  there was nothing there before"),
    }
    if let Some(d) = &r.database {
        match &d.previous {
            Some(p) => println!(
                "  PostgreSQL database {} restored; its previous content is kept as database {p}",
                d.database
            ),
            None => println!("  PostgreSQL database {} created from the dump", d.database),
        }
    }
    Ok(EXIT_OK)
}
