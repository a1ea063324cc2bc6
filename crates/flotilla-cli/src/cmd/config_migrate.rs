//! `flotilla config migrate [--dry-run | --check]`: rewrites the inventory (-f) to
//! the current format version ([`flotilla_model::inventory::INVENTORY_VERSION`]),
//! keeping its comments and order ([`flotilla_model::migrate`]). It prints what
//! changes and the difference (unified, with three lines of context) first, then
//! replaces the file atomically with the same permissions. Nothing is written on
//! any error, with `--dry-run`, or with `--check` (exit 1 when the file would
//! change: for CI).

use crate::{load, usage, EXIT_OK, EXIT_REFUSED};
use flotilla_model::migrate::{migrate, MigrateError};
use flotilla_model::Format;
use std::os::unix::fs::PermissionsExt;

/// Options of `flotilla config migrate`.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Show what would change; write nothing.
    #[arg(long, conflicts_with = "check")]
    pub dry_run: bool,
    /// Write nothing; exit 1 when the inventory is not at the current format
    /// version (or does not declare it).
    #[arg(long)]
    pub check: bool,
}

/// Runs it; returns the exit status.
pub fn run(file: Option<&std::path::Path>, o: &Options) -> anyhow::Result<u8> {
    let path = load::inventory_path(file)?;
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(&path).map_err(|e| usage(format!("cannot read {shown}: {e}")))?;
    let m = migrate(&text, Format::from_path(&shown)).map_err(|e| match e {
        MigrateError::Syntax { .. } => usage(format!("{shown}:{e} (nothing written)")),
        e => usage(format!("{shown}: {e} (nothing written)")),
    })?;
    if m.changes.is_empty() {
        println!(
            "{shown} is at inventory format version {} (this flotilla's): nothing to change",
            m.to
        );
        return Ok(EXIT_OK);
    }
    let from = if m.declared {
        format!("version {}", m.from)
    } else {
        format!("version {} (not declared)", m.from)
    };
    println!("{shown}: inventory format {from} → version {}", m.to);
    for c in &m.changes {
        println!("  {c}");
    }
    let diff = similar::TextDiff::from_lines(&text, &m.text);
    print!(
        "{}",
        diff.unified_diff()
            .context_radius(3)
            .header(&shown, &format!("{shown} (migrated)"))
    );
    if o.check {
        return Ok(EXIT_REFUSED);
    }
    if o.dry_run {
        println!("nothing written (--dry-run)");
        return Ok(EXIT_OK);
    }
    // Through a symbolic link: the file it points at is rewritten (atomically, in
    // its own directory), and the link stays a link.
    let target = std::fs::canonicalize(&path)
        .map_err(|e| anyhow::anyhow!("cannot resolve {shown}: {e} (it is unchanged)"))?;
    let mode = std::fs::metadata(&target)?.permissions().mode() & 0o7777;
    flotilla_release::install::write_atomic(&target, m.text.as_bytes(), mode)
        .map_err(|e| anyhow::anyhow!("cannot write {shown}: {e} (it is unchanged)"))?;
    println!("wrote {shown}");
    Ok(EXIT_OK)
}
