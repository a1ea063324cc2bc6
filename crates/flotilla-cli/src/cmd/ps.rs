//! `flotilla ps [TARGET]`: compact status, one line per component: name, state,
//! health, pid, ports, uptime, restarts. The same observation as `status` (read-only),
//! and the same exit status: 0 when every component shown is as desired and healthy,
//! 1 otherwise.

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_exec::observe::{age, value_name as name, StatusReport};
use flotilla_model::status::ComponentStatus;
use flotilla_model::Topology;
use serde::Serialize;

/// Arguments of `flotilla ps`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A component or stack, shown with what it depends on (default: everything).
    pub target: Option<String>,
    /// Print JSON: {"observed_at_ms", "components": [{name, host, state, health,
    /// condition, ok, pid, ports, started_at_ms, uptime_ms, restarts}]} (`null` where
    /// nothing is known).
    #[arg(long)]
    pub json: bool,
}

/// One line of `ps`.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    host: String,
    /// Lifecycle (`running`, `stopped`…).
    state: String,
    health: String,
    condition: String,
    /// As desired and healthy (what the exit status sums up).
    ok: bool,
    pid: Option<u32>,
    /// The ports of the component's endpoints, as declared.
    ports: Vec<u16>,
    started_at_ms: Option<i64>,
    uptime_ms: Option<i64>,
    /// Restarts the native owner made on its own (systemd's `NRestarts`), when the
    /// observation reports them.
    restarts: Option<u64>,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let (_, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let topology = validated.topology;
    let names = match &args.target {
        None => Vec::new(),
        Some(t) => match super::resolve_target(&topology, "ps", super::Takes::Either, t) {
            Ok(target) => topology.with_upstream(&target),
            Err(bad) => return Ok(bad.report()),
        },
    };
    let report = super::runtime()?
        .block_on(super::world(cli, topology.clone())?.observe(&names))?
        .0;
    let rows: Vec<Row> = report
        .components
        .iter()
        .map(|c| row(&topology, &report, c))
        .collect();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "observed_at_ms": report.observed_at_ms,
                "components": rows,
            }))?
        );
    } else {
        print!("{}", text(&rows));
    }
    Ok(if report.all_ok() {
        EXIT_OK
    } else {
        EXIT_REFUSED
    })
}

fn row(topology: &Topology, report: &StatusReport, c: &ComponentStatus) -> Row {
    let mut ports: Vec<u16> = topology
        .id(&c.name)
        .map(|id| {
            topology
                .component(id)
                .endpoints
                .values()
                .map(|e| e.port)
                .collect()
        })
        .unwrap_or_default();
    ports.sort_unstable();
    ports.dedup();
    // Edited since it started: the ports it really listens on.
    if let Some(running) = &c.running_ports {
        ports = running.clone();
    }
    // Its process, also while it is starting or stopping.
    let live = matches!(
        c.lifecycle,
        flotilla_model::Lifecycle::Running
            | flotilla_model::Lifecycle::Starting
            | flotilla_model::Lifecycle::Stopping
    );
    let identity = c.runtime_identity.as_ref().filter(|_| live);
    let started_at_ms = identity.map(|i| i.started_at_ms);
    Row {
        name: c.name.clone(),
        host: c.host.clone(),
        state: name(&c.lifecycle),
        health: name(&c.health),
        condition: c.condition.as_str().to_string(),
        ok: c.is_ok(),
        pid: identity.map(|i| i.measured.pid),
        ports,
        started_at_ms,
        uptime_ms: started_at_ms.map(|s| (report.observed_at_ms - s).max(0)),
        restarts: c.restarts,
    }
}

fn text(rows: &[Row]) -> String {
    let dash = || "-".to_string();
    let mut table = vec![vec![
        "NAME".to_string(),
        "STATE".into(),
        "HEALTH".into(),
        "PID".into(),
        "PORTS".into(),
        "UPTIME".into(),
        "RESTARTS".into(),
    ]];
    for r in rows {
        table.push(vec![
            r.name.clone(),
            r.state.clone(),
            r.health.clone(),
            r.pid.map(|p| p.to_string()).unwrap_or_else(dash),
            if r.ports.is_empty() {
                dash()
            } else {
                r.ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            },
            r.uptime_ms.map(age).unwrap_or_else(dash),
            r.restarts.map(|n| n.to_string()).unwrap_or_else(dash),
        ]);
    }
    let mut out = render::table(&table);
    let not_ok: Vec<String> = rows
        .iter()
        .filter(|r| !r.ok)
        .map(|r| {
            if r.condition == "ok" {
                r.name.clone()
            } else {
                format!("{} ({})", r.name, r.condition)
            }
        })
        .collect();
    if !not_ok.is_empty() {
        out.push_str(&format!(
            "not as desired or healthy: {} (why: flotilla status -v)\n",
            not_ok.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, ok: bool, condition: &str) -> Row {
        Row {
            name: name.into(),
            host: "local".into(),
            state: "running".into(),
            health: "healthy".into(),
            condition: condition.into(),
            ok,
            pid: Some(42),
            ports: vec![8080, 9090],
            started_at_ms: Some(0),
            uptime_ms: Some(61_000),
            restarts: None,
        }
    }

    #[test]
    fn compact_table_and_a_line_for_what_is_not_ok() {
        let out = text(&[r("llm", true, "ok"), r("proxy", false, "drift")]);
        assert_eq!(
            out,
            "NAME   STATE    HEALTH   PID  PORTS      UPTIME  RESTARTS\n\
             llm    running  healthy  42   8080,9090  1m 1s   -\n\
             proxy  running  healthy  42   8080,9090  1m 1s   -\n\
             not as desired or healthy: proxy (drift) (why: flotilla status -v)\n"
        );
    }
}
