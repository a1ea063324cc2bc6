//! `flotilla logs [TARGET…] [-f] [-n N] [--timestamps] [--since WHEN]`: the logs (stdout
//! and stderr) of components — several interleaved in time order, each line prefixed
//! with its component's name — and Flotilla's marker line at every start and stop. A
//! component on an `ssh` host is read on that host; one on an `agent` host by its
//! agent (through the authority, with `--server`). A container's lines are copied from
//! its engine, a `kubernetes` component's from its pods (with the engine's or the
//! container runtime's timestamps), into its log first. `-f` follows them all: local
//! logs every 0.1 s, the others (and engines and clusters) asked every second for
//! what was appended since.

use crate::{Cli, EXIT_OK};
use flotilla_exec::logs::{self, TimedLine};
use std::io::{IsTerminal, Write};

/// What `flotilla logs --help` says after the options.
const AFTER_HELP: &str = "\
Several components (or a stack: its members and what they depend on; no target: \
every component) are interleaved in the order their lines were written, each line \
prefixed with its component's name (`llm   | …`), coloured on a terminal unless \
NO_COLOR is set. Flotilla writes a marker line into a component's log at every start \
and stop: `--- flotilla 2026-12-01T10:41:03.120Z: started pid 4242 (op-12) ---`.

When a line was written: a process component's log writer stamps every line as it \
reads it, so each line has its own time (to the millisecond). A line without a stamp \
(written by an older Flotilla, or by a systemd or launchd job) is known by the time of \
the next stamped or marker line after it, else the file's last modification. \
--timestamps shows that time (RFC 3339, UTC); lines are ordered by it, and --since \
leaves out the lines it proves older.";

/// Arguments of `flotilla logs`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Components or stacks (a stack stands for its members and what they depend
    /// on). None: every component.
    #[arg(value_name = "TARGET")]
    pub targets: Vec<String>,
    /// Keep printing new lines as they are written (until interrupted); logs on
    /// other hosts are asked for their new lines every second.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// How many of the last lines of each log to print first [default: 50, or all
    /// with --since].
    #[arg(long, short = 'n', value_name = "N")]
    pub tail: Option<usize>,
    /// Prefix each line with the time it had been written by (see below).
    #[arg(short = 't', long)]
    pub timestamps: bool,
    /// Only lines that may have been written at or after WHEN: a duration ago (`10m`,
    /// `1h30m`) or an RFC 3339 time (`2026-12-01T10:41:03Z`, with an offset
    /// `…+01:00`; without a zone, UTC).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<u64>,
    /// Never colour the name prefixes.
    #[arg(long)]
    pub no_color: bool,
}

/// `--since`: a duration before now, or an RFC 3339 time; in ms since the epoch.
fn parse_since(text: &str) -> Result<u64, String> {
    let now = std::time::SystemTime::now();
    let at = match humantime::parse_duration(text) {
        Ok(d) => now.checked_sub(d).unwrap_or(std::time::UNIX_EPOCH),
        Err(_) => parse_time(text).ok_or_else(|| {
            format!(
                "expected a duration (`10m`, `1h30m`) or an RFC 3339 time (`2026-12-01T10:41:03Z`, `2026-12-01T11:41:03+01:00`; without a zone, UTC), not `{text}`"
            )
        })?,
    };
    Ok(at
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0))
}

/// An RFC 3339 time: `Z`, an offset (`+01:00`, `-05:30`) or, without a zone, UTC.
fn parse_time(text: &str) -> Option<std::time::SystemTime> {
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Some(t);
    }
    // `…T11:41:03+01:00`: the offset after the time of day.
    let time_of_day = text.find(['T', 't', ' '])?;
    let i = text.rfind(['+', '-']).filter(|&i| i > time_of_day)?;
    let (base, zone) = text.split_at(i);
    let (h, m) = zone[1..].split_once(':')?;
    let (h, m): (u64, u64) = (h.parse().ok()?, m.parse().ok()?);
    if h > 23 || m > 59 || zone[1..].len() != 5 {
        return None;
    }
    let t = humantime::parse_rfc3339_weak(base).ok()?;
    let off = std::time::Duration::from_secs(h * 3600 + m * 60);
    if zone.starts_with('+') {
        t.checked_sub(off)
    } else {
        t.checked_add(off)
    }
}

/// ANSI colours for the name prefixes, one per component in turn.
const PALETTE: &[&str] = &["36", "33", "32", "35", "34", "96", "93", "92", "95", "94"];

/// How each line is written: the component prefix (when there are several), its
/// colour, the time.
#[derive(Debug)]
struct Render {
    /// `name   | ` per component, or empty strings for one component.
    prefixes: Vec<String>,
    timestamps: bool,
    since: Option<u64>,
}

impl Render {
    fn new(names: &[String], colour: bool, timestamps: bool, since: Option<u64>) -> Render {
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let prefixes = if names.len() < 2 {
            vec![String::new(); names.len()]
        } else {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let plain = format!("{n:<width$} |");
                    if colour {
                        format!("\x1b[{}m{plain}\x1b[0m ", PALETTE[i % PALETTE.len()])
                    } else {
                        format!("{plain} ")
                    }
                })
                .collect()
        };
        Render {
            prefixes,
            timestamps,
            since,
        }
    }

    /// Writes `line` of component `i` (nothing if --since leaves it out).
    fn line(&self, out: &mut impl Write, i: usize, line: &TimedLine) -> std::io::Result<()> {
        if self.since.is_some_and(|s| line.at_ms < s) {
            return Ok(());
        }
        out.write_all(self.prefixes[i].as_bytes())?;
        if self.timestamps {
            write!(out, "{} ", logs::rfc3339_ms(line.at_ms))?;
        }
        writeln!(out, "{}", line.text)
    }
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let (_, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let topology = &validated.topology;
    // The components, in the order named (a stack's in dependency order), once each.
    let mut names: Vec<String> = Vec::new();
    let named = !args.targets.is_empty();
    if !named {
        names.extend(
            topology
                .order()
                .iter()
                .map(|&id| topology.component(id).name.clone()),
        );
    }
    for t in &args.targets {
        let target = match super::resolve_target(topology, "logs", super::Takes::Either, t) {
            Ok(target) => target,
            Err(bad) => return Ok(bad.report()),
        };
        // A component is itself; a stack its members and what they depend on.
        let members = match target {
            flotilla_model::Target::Component(id) => vec![topology.component(id).name.clone()],
            flotilla_model::Target::Stack(_) => topology.with_upstream(&target),
        };
        let ordered = topology
            .order()
            .iter()
            .map(|&id| &topology.component(id).name)
            .filter(|n| members.contains(n));
        for n in ordered {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let host_of = |name: &str| {
        let c = topology.component(topology.id(name).expect("resolved"));
        topology
            .hosts
            .get(&c.host)
            .filter(|h| h.is_remote())
            .map(|_| c.host.clone())
    };
    let tail = args
        .tail
        .unwrap_or(if args.since.is_some() { usize::MAX } else { 50 });
    let state = super::state_dir(cli, topology)?;
    let mut sources: Vec<Vec<TimedLine>> = Vec::with_capacity(names.len());
    // (component index, log, where it ended) of local logs; (index, host, where
    // it ended) of logs read on their hosts, for following.
    let mut follow_local: Vec<(usize, std::path::PathBuf, u64)> = Vec::new();
    let mut follow_remote: Vec<(usize, String, u64)> = Vec::new();
    let mut remote_ctx = None;
    let mut failed = false;
    // Components whose owner keeps their output (a container's engine, a cluster's
    // pods): their lines are copied into their logs.
    let adapters = flotilla_exec::adapter::Adapters::native();
    let mut collected: Vec<(flotilla_model::Component, std::path::PathBuf)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if let Some(host) = host_of(name) {
            let (fleet, rt) = match &remote_ctx {
                Some(ctx) => ctx,
                None => remote_ctx.insert((
                    super::authority::transport(cli, topology)?,
                    super::runtime()?,
                )),
            };
            match remote_read(cli, topology, fleet, rt, &host, name, Read::Tail(tail)) {
                Ok((lines, end)) => {
                    sources.push(lines);
                    match end {
                        Some(end) => follow_remote.push((i, host, end)),
                        None if args.follow => {
                            eprintln!(
                                "error: host `{host}` runs a flotilla that cannot follow a log: `{name}` is not followed (upgrade it, or run `flotilla logs -f {name}` there)"
                            );
                            failed = true;
                        }
                        None => {}
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    failed = true;
                    sources.push(Vec::new());
                }
            }
            continue;
        }
        let path = state.log(name);
        let c = topology.component(topology.id(name).expect("resolved"));
        if c.is_managed() {
            // Output its owner keeps is copied in first.
            match adapters
                .for_component(c)
                .collect_log(topology.project_name(), c, &path)
            {
                None => {}
                Some(copied) => {
                    if let Err(e) = copied {
                        eprintln!("warning: `{name}`: {e}");
                    }
                    collected.push((c.clone(), path.clone()));
                }
            }
        }
        if !path.exists() && !args.follow && named {
            eprintln!(
                "no log yet for `{name}` ({} does not exist: it was never started here)",
                path.display()
            );
        }
        let got = logs::tail_timed(&path, tail)?;
        follow_local.push((i, path, got.end));
        sources.push(got.lines);
    }
    let colour = !args.no_color
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::io::stdout().is_terminal();
    let render = Render::new(&names, colour, args.timestamps, args.since);
    let mut out = std::io::stdout().lock();
    for (i, line) in logs::merge(sources) {
        render.line(&mut out, i, &line)?;
    }
    out.flush()?;
    if !args.follow {
        return Ok(if failed { crate::EXIT_REFUSED } else { EXIT_OK });
    }
    // Local logs are polled every 0.1 s; logs on other hosts are asked for what
    // was appended since the last answer every REMOTE_POLL.
    let local: Vec<usize> = follow_local.iter().map(|(i, _, _)| *i).collect();
    let mut follower =
        logs::Follower::new(follow_local.into_iter().map(|(_, path, end)| (path, end)));
    let mut next_remote = std::time::Instant::now() + REMOTE_POLL;
    let mut complained = std::collections::BTreeSet::new();
    loop {
        let mut batch: Vec<Vec<TimedLine>> = vec![Vec::new(); names.len()];
        for (k, line) in follower.poll()? {
            batch[local[k]].push(line);
        }
        if !collected.is_empty() && std::time::Instant::now() >= next_remote {
            for (c, path) in &collected {
                let copied =
                    adapters
                        .for_component(c)
                        .collect_log(topology.project_name(), c, path);
                match copied {
                    Some(Err(e)) => {
                        // Said once until it works again; following goes on.
                        if complained.insert(c.name.clone()) {
                            eprintln!("error: `{}`: {e} (still following)", c.name);
                        }
                    }
                    _ => {
                        complained.remove(&c.name);
                    }
                }
            }
            if follow_remote.is_empty() {
                next_remote = std::time::Instant::now() + REMOTE_POLL;
            }
        }
        if !follow_remote.is_empty() && std::time::Instant::now() >= next_remote {
            let (fleet, rt) = remote_ctx.as_ref().expect("remote logs were read");
            for (i, host, end) in follow_remote.iter_mut() {
                let name = &names[*i];
                match remote_read(cli, topology, fleet, rt, host, name, Read::Since(*end)) {
                    Ok((lines, Some(next))) => {
                        complained.remove(name);
                        *end = next;
                        batch[*i].extend(lines);
                    }
                    Ok((_, None)) => {}
                    Err(e) => {
                        // Said once until it answers again; following goes on.
                        if complained.insert(name.clone()) {
                            eprintln!("error: {e} (still following)");
                        }
                    }
                }
            }
            next_remote = std::time::Instant::now() + REMOTE_POLL;
        }
        for (i, line) in logs::merge(batch) {
            render.line(&mut out, i, &line)?;
        }
        out.flush()?;
        std::thread::sleep(logs::FOLLOW_POLL);
    }
}

/// How often `logs -f` asks another host for the new lines of a log there.
const REMOTE_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// What [`read_remote`] asks for.
#[derive(Debug, Clone, Copy)]
pub enum Read {
    /// The last N lines.
    Tail(usize),
    /// The whole lines appended since this byte offset.
    Since(u64),
}

/// A log read on another host.
#[derive(Debug)]
pub struct RemoteLog {
    /// The log's path there.
    pub path: String,
    /// Whether it exists there.
    pub exists: bool,
    /// The lines, timed (stamped lines by their own time, others by the file's
    /// modification time there).
    pub lines: Vec<TimedLine>,
    /// Where the log ended (a byte offset; `None` from a host that cannot follow).
    pub end: Option<u64>,
}

/// Lines of `name`'s log on another host (`ssh`, or `agent` through the authority),
/// read there: the last ones or those appended since an offset, within `timeout`.
/// Shared by `logs` and the terminal UI.
pub async fn read_remote(
    fleet: &dyn flotilla_exec::transport::Transport,
    project: Option<String>,
    host: &str,
    name: &str,
    read: Read,
    timeout: std::time::Duration,
) -> anyhow::Result<RemoteLog> {
    let (lines, from) = match read {
        Read::Tail(n) => (n, None),
        Read::Since(at) => (0, Some(at)),
    };
    let call = flotilla_exec::remote::Call::Logs {
        component: name.to_string(),
        lines,
        project,
        from,
    };
    match fleet.call(host, call, timeout, None).await {
        Ok(flotilla_exec::remote::Reply::Logs {
            path,
            exists,
            lines,
            modified_ms,
            end,
        }) => {
            let now = flotilla_exec::this_process::now_ms().max(0) as u64;
            Ok(RemoteLog {
                path,
                exists,
                lines: logs::bound_times(lines, modified_ms.unwrap_or(now)),
                end,
            })
        }
        Ok(other) => anyhow::bail!("host `{host}` answered with {other:?}"),
        Err(e) => anyhow::bail!("{e}"),
    }
}

/// [`read_remote`] on `rt`, saying when a log does not exist yet; the lines and
/// where the log ended.
fn remote_read(
    cli: &Cli,
    topology: &flotilla_model::Topology,
    fleet: &std::sync::Arc<dyn flotilla_exec::transport::Transport>,
    rt: &tokio::runtime::Runtime,
    host: &str,
    name: &str,
    read: Read,
) -> anyhow::Result<(Vec<TimedLine>, Option<u64>)> {
    let log = rt.block_on(read_remote(
        fleet.as_ref(),
        topology.project.clone(),
        host,
        name,
        read,
        cli.host_timeout,
    ))?;
    if !log.exists && matches!(read, Read::Tail(_)) {
        eprintln!("no log yet for `{name}` on host `{host}` ({})", log.path);
    }
    Ok((log.lines, log.end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_utc_offsets_and_zoneless_times() {
        let utc = parse_since("2026-12-01T10:41:03Z").unwrap();
        assert_eq!(parse_since("2026-12-01T11:41:03+01:00").unwrap(), utc);
        assert_eq!(parse_since("2026-12-01T05:11:03-05:30").unwrap(), utc);
        assert_eq!(parse_since("2026-12-01T10:41:03").unwrap(), utc);
        assert!(parse_since("2026-12-01T10:41:03+25:00").is_err());
        assert!(parse_since("yesterday").is_err());
    }

    #[test]
    fn prefixes_are_padded_and_coloured_only_when_asked() {
        let names = vec!["llm".to_string(), "proxy".to_string()];
        let line = TimedLine {
            at_ms: 1_796_121_663_120,
            text: "hello".into(),
        };
        let mut out = Vec::new();
        let plain = Render::new(&names, false, false, None);
        plain.line(&mut out, 0, &line).unwrap();
        plain.line(&mut out, 1, &line).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "llm   | hello\nproxy | hello\n"
        );
        let mut out = Vec::new();
        let coloured = Render::new(&names, true, true, None);
        coloured.line(&mut out, 1, &line).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\x1b[33mproxy |\x1b[0m 2026-12-01T10:41:03.120Z hello\n"
        );
        // One component: no prefix. --since leaves older lines out.
        let one = Render::new(&names[..1], true, false, Some(line.at_ms + 1));
        let mut out = Vec::new();
        one.line(&mut out, 0, &line).unwrap();
        assert!(out.is_empty());
        let one = Render::new(&names[..1], true, false, Some(line.at_ms));
        one.line(&mut out, 0, &line).unwrap();
        assert_eq!(out, b"hello\n");
    }

    #[test]
    fn since_takes_a_duration_or_a_time() {
        assert_eq!(
            parse_since("2026-12-01T10:41:03Z").unwrap(),
            1_796_121_663_000
        );
        let ago = parse_since("10m").unwrap();
        let now = flotilla_exec::this_process::now_ms() as u64;
        assert!((now - ago).abs_diff(600_000) < 5_000);
        assert!(parse_since("yesterday").is_err());
    }
}
