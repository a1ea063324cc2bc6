//! `flotilla check [TARGET]`: pre-flight — what would make a start fail (missing
//! programs or files, unreadable `env_file`s, missing secrets, busy ports), checked on
//! every host involved, before anything starts. Read-only. Exit 0 when every check
//! passes, 1 otherwise.

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_exec::hosts::{CheckReport, Finding};
use flotilla_exec::remote::{Call, Reply};
use flotilla_exec::transport::Transport;

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
    let mut hosts: Vec<&str> = topology
        .components
        .iter()
        .filter(|c| c.is_managed() && (names.is_empty() || names.contains(&c.name)))
        .map(|c| c.host.as_str())
        .collect();
    hosts.sort();
    hosts.dedup();
    let reports = reports(cli, &topology, &hosts, &names, &loaded.base_dir)?;
    print(&reports, args.json)?;
    Ok(if reports.iter().all(CheckReport::ok) {
        EXIT_OK
    } else {
        EXIT_REFUSED
    })
}

/// The pre-flight report of each of `hosts`: local ones checked here, remote ones
/// asked to check themselves (all at once, within `--host-timeout`).
pub fn reports(
    cli: &Cli,
    topology: &flotilla_model::Topology,
    hosts: &[&str],
    names: &[String],
    base_dir: &std::path::Path,
) -> anyhow::Result<Vec<CheckReport>> {
    let state = super::state_dir(cli, topology)?;
    let secrets = flotilla_exec::operate::secrets(&state)?;
    let pool = super::ssh_pool(cli, topology);
    let rt = super::runtime()?;
    let asks = hosts.iter().map(|&host| {
        let pool = &pool;
        let (state, secrets) = (&state, &secrets);
        async move {
            let remote = topology.hosts.get(host).is_some_and(|h| h.is_remote());
            let findings = if !remote {
                flotilla_exec::preflight::check(topology, host, names, base_dir, state, secrets)
            } else {
                let call = Call::Check {
                    snapshot: topology.snapshot(host),
                    names: names.to_vec(),
                };
                match pool.call(host, call, cli.host_timeout, None).await {
                    Ok(Reply::Checked { findings }) => findings,
                    Ok(other) => vec![Finding {
                        check: "reachable".into(),
                        ok: false,
                        saw: format!("unexpected answer {other:?}"),
                    }],
                    Err(e) => vec![Finding {
                        check: "reachable".into(),
                        ok: false,
                        saw: e.to_string(),
                    }],
                }
            };
            CheckReport {
                host: host.to_string(),
                findings,
            }
        }
    });
    Ok(rt.block_on(futures_util::future::join_all(asks)))
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
