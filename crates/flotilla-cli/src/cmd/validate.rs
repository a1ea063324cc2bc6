//! `flotilla validate`: report every problem in the inventory.

use crate::{load, render, Cli, EXIT_OK, EXIT_USAGE};
use flotilla_model::{LocatedDiagnostic, Severity};
use serde::Serialize;

/// Arguments of `flotilla validate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print a JSON report instead: {"valid", "file", "summary", "diagnostics": [{code, severity, message, location: {file, start: {line, column}, end, source_line}, labels, help}]}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    valid: bool,
    file: &'a str,
    summary: Option<Summary>,
    diagnostics: Vec<LocatedDiagnostic>,
}

#[derive(Serialize)]
struct Summary {
    hosts: usize,
    components: usize,
    stacks: usize,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let path = load::inventory_path(cli.file.as_deref())?;
    let loaded = load::load(&path)?;
    let file = path.display().to_string();
    let (valid, diags, summary) = match &loaded.result {
        Ok(v) => (
            true,
            v.warnings.clone(),
            Some(Summary {
                hosts: v.topology.hosts.len(),
                components: v.topology.components.len(),
                stacks: v.topology.stacks.len(),
            }),
        ),
        Err(d) => (false, d.clone(), None),
    };
    if args.json {
        let report = Report {
            valid,
            file: &file,
            summary,
            diagnostics: diags.iter().map(|d| d.locate(&loaded.sources)).collect(),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        render::diagnostics(&loaded.sources, &diags);
        let warnings = diags
            .iter()
            .filter(|d| d.severity == Severity::Warning)
            .count();
        let errors = diags.len() - warnings;
        let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        match summary {
            Some(s) => println!(
                "{file}: valid: {} on {}, {}{}",
                plural(s.components, "component"),
                plural(s.hosts, "host"),
                plural(s.stacks, "stack"),
                if warnings > 0 {
                    format!(" ({})", plural(warnings, "warning"))
                } else {
                    String::new()
                }
            ),
            None => eprintln!(
                "{file}: invalid: {}{}",
                plural(errors, "error"),
                if warnings > 0 {
                    format!(", {}", plural(warnings, "warning"))
                } else {
                    String::new()
                }
            ),
        }
    }
    // The process ends after the report: the topology and the sources are left to it
    // rather than freed piece by piece (a large inventory's take measurable time).
    std::mem::forget(loaded);
    Ok(if valid { EXIT_OK } else { EXIT_USAGE })
}
