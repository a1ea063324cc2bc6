//! `flotilla discover [HOST] [--port PORT…] [--json]`: what runs on a host that the
//! inventory does not cover — listening processes, systemd units, containers — each
//! with a proposed inventory entry, printed as TOML to paste (every line but the
//! entries a `#` comment) or as JSON. Read-only: it never adopts, starts, stops or
//! changes anything ([`flotilla_exec::discover`]). A remote host is looked at by its
//! own flotilla (`host serve` over SSH, or its agent through the authority).
//! Without an inventory here (no `-f`, no `flotilla.toml`), nothing counts as covered.

use crate::{load, Cli, EXIT_OK, EXIT_USAGE};
use flotilla_exec::discover::{self, Discovery, Options};
use flotilla_model::{Format, SourceFile, Sources, Topology};

/// Arguments of `flotilla discover`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The host to look at, by its inventory name (default: this machine, `local`).
    pub host: Option<String>,
    /// Only what listens on (or publishes) this TCP port; repeatable. Without it,
    /// every listening port and the running units the administrator wrote.
    #[arg(long = "port", value_name = "PORT")]
    pub ports: Vec<u16>,
    /// Print JSON: {host, sources: [{source, looked, saw}], findings: [{name,
    /// adapter, process, unit, container, listening, answers, notes, proposal}],
    /// skipped: [{what, reason}]}; `proposal` is the inventory entry.
    #[arg(long)]
    pub json: bool,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let no_inventory = cli.file.is_none()
        && !load::DEFAULT_FILES
            .iter()
            .any(|f| std::path::Path::new(f).exists());
    let topology = if no_inventory {
        eprintln!(
            "note: no inventory here ({}): nothing counts as covered",
            load::DEFAULT_FILES.join(", ")
        );
        empty_topology()?
    } else {
        match super::topology_or_exit(cli)? {
            Ok((_, v)) => v.topology,
            Err(code) => return Ok(code),
        }
    };
    let host = args.host.clone().unwrap_or_else(|| "local".to_string());
    let Some(h) = topology.hosts.get(&host) else {
        eprintln!(
            "error: no host `{host}` in the inventory (hosts: {})",
            super::host_names(&topology)
        );
        return Ok(EXIT_USAGE);
    };
    let options = Options {
        ports: args.ports.clone(),
        taken_names: topology.components.iter().map(|c| c.name.clone()).collect(),
        probe_timeout_ms: None,
    };
    let rt = super::runtime()?;
    let report: Discovery = if h.is_remote() {
        let fleet = super::authority::transport(cli, &topology)?;
        // The host's own look (the engine's time limit, three questions a port) on
        // top of connecting.
        let timeout = cli.host_timeout + std::time::Duration::from_secs(30);
        rt.block_on(flotilla_exec::hosts::discover(
            fleet.as_ref(),
            &topology,
            &host,
            options,
            timeout,
        ))?
    } else {
        let state = (!no_inventory)
            .then(|| super::state_dir(cli, &topology).ok())
            .flatten();
        rt.block_on(discover::discover(
            &topology.snapshot(&host),
            state.as_ref(),
            &options,
        ))
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_toml());
    }
    Ok(EXIT_OK)
}

/// The topology of an empty inventory: the implicit host `local`, nothing else.
fn empty_topology() -> anyhow::Result<Topology> {
    let mut sources = Sources::new();
    let file = sources.add(SourceFile::new("(no inventory)", Format::Toml, ""));
    let mut topology = flotilla_model::validate(&sources, file, &[])
        .map_err(|d| anyhow::anyhow!("an empty inventory does not validate: {d:?}"))?
        .topology;
    topology.set_project("default");
    Ok(topology)
}
