//! `flotilla check [TARGET]`: pre-flight — what would make a start fail (missing
//! programs or files, unreadable `env_file`s, missing secrets, busy ports), checked on
//! every host involved, before anything starts. Read-only. Exit 0 when every check
//! passes, 1 otherwise.

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_exec::hosts::CheckReport;

/// Arguments of `flotilla check`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A component or stack, with what it depends on (default: everything).
    pub target: Option<String>,
    /// Print JSON: [{host, findings: [{check, ok, saw}]}].
    #[arg(long)]
    pub json: bool,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let (loaded, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let topology = validated.topology;
    let names = match &args.target {
        None => Vec::new(),
        Some(t) => match super::resolve_target(&topology, "check", super::Takes::Either, t) {
            Ok(target) => topology.with_upstream(&target),
            Err(bad) => return Ok(bad.report()),
        },
    };
    let mut hosts: Vec<String> = topology
        .components
        .iter()
        .filter(|c| c.is_managed() && (names.is_empty() || names.contains(&c.name)))
        .map(|c| c.host.clone())
        .collect();
    hosts.sort();
    hosts.dedup();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let reports = reports(cli, topology.clone(), &hosts, &names, &loaded.base_dir)?;
    print(&reports, args.json)?;
    Ok(if reports.iter().all(CheckReport::ok) {
        EXIT_OK
    } else {
        EXIT_REFUSED
    })
}

/// The pre-flight report of each of `hosts` ([`flotilla_exec::world::World::preflight`]).
pub fn reports(
    cli: &Cli,
    topology: flotilla_model::Topology,
    hosts: &[&str],
    names: &[String],
    base_dir: &std::path::Path,
) -> anyhow::Result<Vec<CheckReport>> {
    let rt = super::runtime()?;
    let world = super::world(cli, topology)?;
    Ok(rt.block_on(world.preflight(hosts, names, base_dir)))
}

/// Prints `reports` as tables (one per host) or JSON.
pub fn print(reports: &[CheckReport], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(reports)?);
        return Ok(());
    }
    for r in reports {
        println!("host {}:", r.host);
        let mut table = vec![vec!["CHECK".to_string(), "OK".into(), "SAW".into()]];
        for f in &r.findings {
            table.push(vec![
                f.check.clone(),
                if f.ok { "yes".into() } else { "NO".into() },
                f.saw.clone(),
            ]);
        }
        print!("{}", render::table(&table));
    }
    let problems: usize = reports
        .iter()
        .map(|r| r.findings.iter().filter(|f| !f.ok).count())
        .sum();
    if problems > 0 {
        println!("{problems} problem(s): fix them before `up`");
    } else {
        println!("all checks passed");
    }
    Ok(())
}
