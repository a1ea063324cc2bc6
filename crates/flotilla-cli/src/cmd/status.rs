//! `flotilla status [TARGET]`: what every component really is, measured now, each
//! signal with its evidence; with `--server`, the fleet as its agents last reported
//! it through the authority (no inventory needed; a host whose agent is late is
//! `unreachable` with its last-known state). Read-only. Exit 0 when everything is as desired and
//! healthy, 1 otherwise.

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_exec::observe::{value_name as name, StatusReport};
use std::time::Duration;

/// Arguments of `flotilla status`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A component or stack, shown with what it depends on (default: everything).
    pub target: Option<String>,
    /// Print JSON: {"observed_at_ms", "components": [{name, host, lifecycle, desired,
    /// health, condition, observability, ownership, started_by, config_identity:
    /// {selected, running}, runtime_identity, evidence: [{signal, source, at_ms, saw}]}],
    /// "interrupted": [operations], "in_progress": [operations], "stacks": [{name,
    /// health, evidence}] (each stack's end-to-end readiness probes, run now)}.
    #[arg(long)]
    pub json: bool,
    /// Refresh every --interval until interrupted, under a header with the time (UTC).
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// How often --watch refreshes (at least 100ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", requires = "watch", value_parser = interval)]
    pub interval: Duration,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    if cli.server.server.is_some() {
        return fleet(cli, args);
    }
    let (_, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let topology = validated.topology;
    let names: Vec<String> = match args.target.as_deref().map(|t| (t, topology.target(t))) {
        None => Vec::new(),
        Some((_, Some(target))) => topology.with_upstream(&target),
        Some((t, None)) => {
            let bad = super::resolve_target(&topology, "status", super::Takes::Either, t)
                .expect_err("names nothing");
            return Ok(bad.report());
        }
    };
    let state = super::state_dir(cli, &topology).ok();
    let notes = if cli.verbose > 0 {
        tested_notes(&topology, &names)
    } else {
        Vec::new()
    };
    // One runtime and one set of SSH connections for every refresh of `--watch`.
    let rt = super::runtime()?;
    let world = super::world(cli, topology)?;
    loop {
        let began = std::time::Instant::now();
        let report = rt.block_on(world.status(&names))?;
        let adopting = unfinished_adopts(state.as_ref(), &names);
        if args.json {
            let mut json = serde_json::to_value(&report)?;
            if !adopting.is_empty() {
                json["unfinished_adopts"] = serde_json::to_value(
                    adopting.iter().map(|r| r.redacted()).collect::<Vec<_>>(),
                )?;
            }
            println!("{}", serde_json::to_string_pretty(&json)?);
        } else {
            if args.watch {
                if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                    print!("\x1b[2J\x1b[H");
                }
                println!("{}", watch_header(report.observed_at_ms, args.interval));
            }
            print!("{}", text(&report, cli.verbose > 0));
            for r in &adopting {
                println!("{}", adopt_line(r));
            }
            for n in &notes {
                println!("note: {n}");
            }
        }
        if !args.watch {
            return Ok(if report.all_ok() && adopting.is_empty() {
                EXIT_OK
            } else {
                EXIT_REFUSED
            });
        }
        // Output may be piped (`status --watch | tee`): show each refresh as it comes.
        let _ = std::io::Write::flush(&mut std::io::stdout());
        std::thread::sleep(args.interval.saturating_sub(began.elapsed()));
    }
}

/// What `status -v` says of how far what it shows was tested: this machine's
/// platform when Flotilla's CI does not run there, and the `kubernetes` components
/// (of `names`; all when empty), whose adapter it never ran against a real cluster.
fn tested_notes(topology: &flotilla_model::Topology, names: &[String]) -> Vec<String> {
    let mut notes = Vec::new();
    let platform = flotilla_exec::remote::this_platform();
    if let Some(c) = flotilla_exec::hosts::platform_caveat(&platform) {
        notes.push(format!("this machine ({platform}): {c}"));
    }
    let on_clusters: Vec<&str> = topology
        .order()
        .iter()
        .map(|&id| topology.component(id))
        .filter(|c| c.adapter == Some(flotilla_model::inventory::AdapterKind::Kubernetes))
        .filter(|c| names.is_empty() || names.contains(&c.name))
        .map(|c| c.name.as_str())
        .collect();
    if !on_clusters.is_empty() {
        notes.push(format!(
            "{} ({}): {}",
            on_clusters.join(", "),
            "kubernetes",
            flotilla_kube::adapter::UNTESTED
        ));
    }
    notes
}

/// The project's adopts that are unfinished (of `names`' components; all when
/// empty): a CLI killed mid-adopt leaves one, and status says so.
fn unfinished_adopts(
    state: Option<&flotilla_exec::statedir::StateDir>,
    names: &[String],
) -> Vec<flotilla_exec::adopt::record::AdoptRecord> {
    let Some(state) = state else {
        return Vec::new();
    };
    flotilla_exec::adopt::record::all(state)
        .into_iter()
        .filter_map(|r| match r {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("warning: {}", flotilla_exec::error::chain(&e));
                None
            }
        })
        .filter(|r| !r.phase.finished() && (names.is_empty() || names.contains(&r.component)))
        .collect()
}

/// `ADOPT UNFINISHED: …`: where an unfinished adopt is, and the ways out.
fn adopt_line(r: &flotilla_exec::adopt::record::AdoptRecord) -> String {
    format!(
        "ADOPT UNFINISHED: `{}` was {} ({}{}) — from {}; {}",
        r.component,
        r.phase.describe(),
        r.phase.as_str(),
        if r.interrupted() {
            format!(", interrupted: its flotilla, pid {}, is gone", r.pid)
        } else {
            format!(", by pid {}", r.pid)
        },
        r.prior.describe(),
        r.ways_out()
    )
}

/// `status --server`: the authority's merged, aged view of its agents' reports.
fn fleet(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let rt = super::runtime()?;
    let client = super::authority::client(cli)?;
    loop {
        let began = std::time::Instant::now();
        let fleet = rt.block_on(client.status())?;
        let mut report = fleet.report;
        if let Some(t) = &args.target {
            report.components.retain(|c| &c.name == t || &c.host == t);
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            if args.watch {
                if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                    print!("\x1b[2J\x1b[H");
                }
                println!("{}", watch_header(report.observed_at_ms, args.interval));
            }
            match &fleet.selection {
                Some(s) => println!("revision {} (index {})", s.revision, s.index),
                None => println!("no revision selected (flotilla config publish)"),
            }
            for h in &fleet.hosts {
                let age = h
                    .age_ms
                    .map(|a| format!(", last report {} ago", flotilla_exec::observe::age(a)))
                    .unwrap_or_default();
                let rev = match (&h.revision, &fleet.selection) {
                    (Some(r), Some(s)) if r == &s.revision => ", on the selected revision".into(),
                    (Some(r), _) => format!(", on {r}"),
                    (None, _) => String::new(),
                };
                let before = h
                    .report_before
                    .as_ref()
                    .map(|op| format!(", from before {op} (a newer report is due)"))
                    .unwrap_or_default();
                println!("host {}: {}{age}{before}{rev}", h.host, h.observability);
                if let Some(id) = &h.agent_identity {
                    println!("  agent: {}", agent_identity(id));
                    if let Some(c) = &id.conflict {
                        println!("  agent: WARNING: {c}");
                    }
                    for e in &id.skipped {
                        println!(
                            "  skips {} {} ({}, rolled back {}): `flotilla release unskip {} --host {}{}` allows it again",
                            e.name,
                            e.version,
                            render::short_digest(&e.sha256),
                            e.reason,
                            e.version,
                            h.host,
                            if e.name == flotilla_release::AGENT_RELEASE {
                                String::new()
                            } else {
                                format!(" --name {}", e.name)
                            }
                        );
                    }
                }
                if let Some(rep) = &h.report {
                    for d in &rep.drift {
                        let saw: Vec<&str> = d.evidence.iter().map(|e| e.saw.as_str()).collect();
                        println!("  drift {} {}: {}", d.component, d.kind, saw.join("; "));
                    }
                }
            }
            print!("{}", text(&report, cli.verbose > 0));
        }
        if !args.watch {
            // With a target, only the hosts of what it names count.
            let hosts_ok = fleet
                .hosts
                .iter()
                .filter(|h| {
                    args.target.is_none() || report.components.iter().any(|c| c.host == h.host)
                })
                .all(|h| h.observability == "observed");
            return Ok(if report.all_ok() && hosts_ok {
                EXIT_OK
            } else {
                EXIT_REFUSED
            });
        }
        let _ = std::io::Write::flush(&mut std::io::stdout());
        std::thread::sleep(args.interval.saturating_sub(began.elapsed()));
    }
}

/// The shortest `--interval`.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Parses `--interval`: a humantime duration of at least [`MIN_INTERVAL`].
fn interval(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "{text} is too short: at least {}",
            humantime::format_duration(MIN_INTERVAL)
        ));
    }
    Ok(d)
}

/// `status at 14:03:07 UTC, every 2s (Ctrl-C to stop)`.
fn watch_header(at_ms: i64, every: Duration) -> String {
    format!(
        "status at {} UTC, every {} (Ctrl-C to stop)",
        utc_time_of_day(at_ms),
        humantime::format_duration(every)
    )
}

/// `HH:MM:SS` (UTC) of a time in ms since the Unix epoch.
pub fn utc_time_of_day(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, (s % 3600) / 60, s % 60)
}

fn text(r: &StatusReport, verbose: bool) -> String {
    let mut rows = vec![vec![
        "COMPONENT".to_string(),
        "HOST".into(),
        "LIFECYCLE".into(),
        "DESIRED".into(),
        "HEALTH".into(),
        "CONDITION".into(),
        "OWNER".into(),
        "PID".into(),
        "RUNTIME".into(),
        "OBSERVED".into(),
    ]];
    for c in &r.components {
        rows.push(vec![
            c.name.clone(),
            c.host.clone(),
            name(&c.lifecycle),
            c.desired.as_ref().map(name).unwrap_or_else(|| "-".into()),
            name(&c.health),
            c.condition.as_str().to_string(),
            c.ownership.to_string(),
            c.runtime_identity
                .as_ref()
                .filter(|i| i.measured.pid > 0)
                .map(|i| i.measured.pid.to_string())
                .unwrap_or_else(|| "-".into()),
            c.runtime_identity
                .as_ref()
                .map(runtime_column)
                .unwrap_or_else(|| "-".into()),
            seen(c, r.observed_at_ms),
        ]);
    }
    let mut out = render::table(&rows);
    for st in &r.stacks {
        out.push_str(&format!(
            "stack {}: route {}{}\n",
            st.name,
            name(&st.health),
            st.evidence
                .iter()
                .map(|e| format!("; {}", e.saw))
                .collect::<String>()
        ));
    }
    for c in &r.components {
        let wanted = verbose || !c.is_ok();
        if wanted {
            for e in &c.evidence {
                out.push_str(&format!(
                    "  {} {}: {} ({})\n",
                    c.name,
                    name(&e.signal),
                    e.saw,
                    e.source
                ));
            }
        }
    }
    for op in &r.interrupted {
        out.push_str(&format!(
            "interrupted: {} `{}` (pid {}) never finished; the next change reconciles with what runs\n",
            op.id, op.command_line, op.pid
        ));
    }
    for op in &r.in_progress {
        out.push_str(&format!(
            "in progress: {} `{}` (pid {})\n",
            op.id, op.command_line, op.pid
        ));
    }
    out
}

/// `observed`, or e.g. `unreachable (last: running, 42s ago)`.
pub fn seen(c: &flotilla_exec::observe::ComponentStatus, now_ms: i64) -> String {
    if c.observability == flotilla_model::status::Observability::Observed {
        return "observed".into();
    }
    match &c.last_known {
        Some(l) => format!(
            "{} (last: {}, {} ago)",
            name(&c.observability),
            name(&l.lifecycle),
            flotilla_exec::observe::age(now_ms - l.observed_at_ms)
        ),
        None => format!("{} (never seen)", name(&c.observability)),
    }
}

/// The RUNTIME column: the measured executable digest, and against the selected
/// release when there is one (`= llama-server 2.0.0`, `!= llama-server 2.0.0`).
pub fn runtime_column(rt: &flotilla_model::status::RuntimeStatus) -> String {
    let measured = render::short_digest(&rt.measured.exe_sha256);
    match (&rt.release, rt.runs_release()) {
        (Some(r), Some(true)) => format!("{measured} = {} {}", r.name, r.version),
        (Some(r), _) => format!(
            "{measured} != {} {} ({})",
            r.name,
            r.version,
            render::short_digest(&r.sha256)
        ),
        (None, _) => measured,
    }
}

/// One line: the agent's measured executable digest against its selected release.
fn agent_identity(id: &flotilla_api::wire::AgentIdentityDto) -> String {
    let running = id
        .running_sha256
        .as_deref()
        .map(render::short_digest)
        .unwrap_or_else(|| "not measured".into());
    let mut line = match &id.release {
        Some(r) if id.runtime_identity == "matches" => format!(
            "runs {running} (measured) = release {} {}",
            r.name, r.version
        ),
        Some(r) => format!(
            "runs {running} (measured), NOT release {} {} ({})",
            r.name,
            r.version,
            render::short_digest(&r.sha256)
        ),
        None => format!("runs {running} (measured); no release rolled out to it"),
    };
    if let Some(u) = &id.updating_to {
        line.push_str(&format!(
            "; updating to {} {} (rollout {})",
            u.name, u.version, u.rollout
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_of_day_is_utc() {
        assert_eq!(utc_time_of_day(0), "00:00:00");
        // 2024-03-01T13:04:05.999Z
        assert_eq!(utc_time_of_day(1_709_298_245_999), "13:04:05");
        assert_eq!(
            watch_header(1_709_298_245_000, Duration::from_millis(500)),
            "status at 13:04:05 UTC, every 500ms (Ctrl-C to stop)"
        );
    }

    #[test]
    fn interval_has_a_floor() {
        assert_eq!(interval("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(interval("100ms"), Ok(Duration::from_millis(100)));
        assert!(interval("99ms").unwrap_err().contains("at least 100ms"));
        assert!(interval("soon").is_err());
    }
}
