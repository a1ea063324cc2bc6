//! `fleet_load`: the load generator of `scripts/bench-fleet`.
//!
//! Drives a running `flotilla serve` on loopback with N simulated agents, all in this
//! one process, and prints figures (it never asserts a timing):
//!
//! 1. Publishes revision 1, an inventory of N hosts `h00001…` (`transport = "agent"`)
//!    with one tiny `process` component each, with `flotilla config publish` (the
//!    real CLI, when `--flotilla` is given; else through the client API). Revisions 2
//!    and 3 change one component's command: the selection index moves, so every
//!    agent's poll wakes and gets its snapshot again. The publish request of 10,000
//!    such hosts is ~2.06 MB, just under axum's default request body limit (2 MiB,
//!    2.10 MB); the generator says so when a fleet is larger.
//! 2. Makes N agent credentials by the real join flow: the operator's
//!    `POST /v1/tokens` and the agent's `POST /v1/join` per host, a few at a time.
//! 3. Gives every agent its own HTTP/1.1 connection (its own [`Client`], so its own
//!    connection pool) and a first non-blocking poll, then parks one long poll per
//!    agent (`GET /v1/hosts/{host}/snapshot?index=<current>&wait=300s`) and waits
//!    until the authority's `/metrics` shows `flotilla_longpoll_waiters N`.
//! 4. Publishes revision 2 through the client API and measures, for every agent, the
//!    time from just before the publish request is sent until its poll returned with
//!    the new index: p50, p99, max. The authority's RSS before the polls, while
//!    holding them, and its peak (`VmRSS`/`VmHWM` of `/proc/<pid>/status`).
//! 5. Baseline, same agents and connections: each polls without waiting (`wait=0s`)
//!    every `--period` (30 s, LLMKube's heartbeat) at a uniformly random phase;
//!    revision 3 is published at a uniformly random moment of the first period and
//!    each agent's propagation is the time until its next poll saw it.
//! 6. Prints a summary block, and as a diagnostic the time the role filter
//!    (`Topology::host_view`) takes for all N hosts on one core.
//!
//! Several authorities (`--url A,B,C`, and their pids in `--authority-pid`):
//! the operator publishes through the first, agent k polls the (k mod n)-th, the
//! waiters are the sum of every authority's gauge and the RSS figures the sum of
//! their processes'.
//!
//! Bounded: every phase has a deadline and the whole run `--time-limit`; on any
//! failure it says which phase, how far it got and the first error, and exits 1.
//!
//! Usage: `fleet_load --url https://127.0.0.1:PORT[,…] --operator-file FILE [--agents N]
//! [--authority-pid PID[,…]] [--flotilla PATH] [--work-dir DIR] [--period 30s]
//! [--join-concurrency 16] [--connect-concurrency 100] [--time-limit 240s]`

use flotilla_model::{validate, Format, SourceFile, Sources, Topology};
use flotilla_server::api::{
    JoinRequest, PublishRequest, SelectResponse, SnapshotResponse, TokenRequest,
};
use flotilla_server::authority::OperatorFile;
use flotilla_server::Client;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, Error>;

/// The longest a long poll of this benchmark asks to wait (the authority's maximum).
const LONG_WAIT: Duration = Duration::from_secs(300);
/// axum's default request body limit (`DefaultBodyLimit`, 2 MiB).
const AXUM_BODY_LIMIT: usize = 2 * 1024 * 1024;

const USAGE: &str =
    "usage: fleet_load --url https://127.0.0.1:PORT[,…] --operator-file FILE [--agents N] \
[--authority-pid PID[,…]] [--flotilla PATH] [--work-dir DIR] [--period 30s] \
[--join-concurrency 16] [--connect-concurrency 100] [--time-limit 240s]";

/// The command line.
struct Args {
    /// One authority's URL or several, comma-separated.
    url: String,
    operator_file: PathBuf,
    agents: usize,
    /// The authorities' pids (comma-separated in `--authority-pid`).
    authority_pid: Vec<u32>,
    flotilla: Option<PathBuf>,
    work_dir: PathBuf,
    period: Duration,
    join_concurrency: usize,
    connect_concurrency: usize,
    time_limit: Duration,
}

fn parse_args() -> Res<Args> {
    let mut url = None;
    let mut operator_file = None;
    let mut a = Args {
        url: String::new(),
        operator_file: PathBuf::new(),
        agents: 10_000,
        authority_pid: Vec::new(),
        flotilla: None,
        work_dir: std::env::temp_dir(),
        period: Duration::from_secs(30),
        join_concurrency: 16,
        connect_concurrency: 100,
        time_limit: Duration::from_secs(240),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--url" => url = Some(value),
            "--operator-file" => operator_file = Some(PathBuf::from(value)),
            "--agents" => a.agents = value.parse().map_err(|e| bad(&e))?,
            "--authority-pid" => {
                a.authority_pid = value
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad(&e))?
            }
            "--flotilla" => a.flotilla = Some(PathBuf::from(value)),
            "--work-dir" => a.work_dir = PathBuf::from(value),
            "--period" => a.period = humantime::parse_duration(&value).map_err(|e| bad(&e))?,
            "--join-concurrency" => a.join_concurrency = value.parse().map_err(|e| bad(&e))?,
            "--connect-concurrency" => {
                a.connect_concurrency = value.parse().map_err(|e| bad(&e))?
            }
            "--time-limit" => {
                a.time_limit = humantime::parse_duration(&value).map_err(|e| bad(&e))?
            }
            _ => return Err(format!("unknown argument {flag}\n{USAGE}").into()),
        }
    }
    a.url = url.ok_or_else(|| format!("--url is required\n{USAGE}"))?;
    a.operator_file =
        operator_file.ok_or_else(|| format!("--operator-file is required\n{USAGE}"))?;
    if a.agents == 0 || a.join_concurrency == 0 || a.connect_concurrency == 0 {
        return Err("--agents and the concurrencies must be at least 1".into());
    }
    if a.period.is_zero() {
        return Err("--period must be more than 0".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleet_load: {e}");
            return ExitCode::from(2);
        }
    };
    // Two workers: the benchmark's machine has two cores, shared with the authority.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fleet_load: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let limit = args.time_limit;
    let outcome = rt.block_on(async move {
        match tokio::time::timeout(limit, run(args)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "gave up after {} (--time-limit)",
                humantime::format_duration(limit)
            )
            .into()),
        }
    });
    // Parked tasks and connections are dropped with the runtime, at once.
    rt.shutdown_background();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet_load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A small deterministic generator (SplitMix64) seeded from the OS: phases and the
/// publish moment of the heartbeat baseline.
struct Rng(u64);

impl Rng {
    fn from_os() -> Rng {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).ok();
        Rng(u64::from_le_bytes(b))
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS`, `VmHWM`).
fn proc_kib(pid: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted `v` (`q` in (0, 1]).
fn percentile(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Host `i` (1-based) of a fleet whose names are `width` digits wide.
fn host_name(i: usize, width: usize) -> String {
    format!("h{i:0width$}")
}

/// The benchmark's inventory: `n` agent hosts with one tiny component each
/// (`command = ["true"]`); the first component's command carries `generation`, so
/// each generation is a new revision (a one-component change: the selection index
/// moves, so every agent's poll wakes and gets its snapshot again).
fn inventory(n: usize, width: usize, generation: u32) -> String {
    let mut s = String::with_capacity(n * 100);
    s.push_str("project = \"bench-fleet\"\n");
    for i in 1..=n {
        let _ = writeln!(s, "[hosts.{}]\ntransport = \"agent\"", host_name(i, width));
    }
    for i in 1..=n {
        let command = if i == 1 {
            format!("[\"sleep\", \"{generation}\"]")
        } else {
            "[\"true\"]".to_string()
        };
        let _ = writeln!(
            s,
            "[components.c{i:0width$}]\nhost = \"{}\"\ncommand = {command}",
            host_name(i, width)
        );
    }
    s
}

fn validated(text: &str) -> Res<Topology> {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("fleet.toml", Format::Toml, text));
    validate(&sources, id, &[])
        .map(|v| v.topology)
        .map_err(|d| format!("the generated inventory is invalid: {:?}", d.first()).into())
}

fn publish_request(t: &Topology) -> Res<PublishRequest> {
    Ok(PublishRequest {
        topology: serde_json::from_str(&t.revision_json())?,
        expect: None,
    })
}

/// The sum of every authority's `flotilla_longpoll_waiters` gauge.
async fn waiters(authorities: &[Client]) -> Res<i64> {
    let mut sum = 0;
    for a in authorities {
        let text = a.get_text("/metrics").await?;
        let n: i64 = text
            .lines()
            .find_map(|l| l.strip_prefix("flotilla_longpoll_waiters "))
            .ok_or("/metrics has no flotilla_longpoll_waiters")?
            .trim()
            .parse()
            .map_err(|e| format!("flotilla_longpoll_waiters: {e}"))?;
        sum += n;
    }
    Ok(sum)
}

/// The RSS figures of the authorities, summed, when their pids are known.
struct Rss {
    pids: Vec<String>,
}

impl Rss {
    fn get(&self, key: &str) -> Option<u64> {
        if self.pids.is_empty() {
            return None;
        }
        self.pids.iter().map(|p| proc_kib(p, key)).sum()
    }
    fn show(&self, key: &str) -> String {
        self.get(key)
            .map_or_else(|| "?".into(), |k| format!("{:.1} MiB", mib(k)))
    }
}

/// Collects `n` results of `set` until `deadline`; on a task error or the deadline,
/// says which phase, how many arrived and the first error.
async fn collect<T: 'static>(
    phase: &str,
    set: &mut JoinSet<Res<T>>,
    n: usize,
    deadline: tokio::time::Instant,
) -> Res<Vec<T>> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout_at(deadline, set.join_next()).await {
            Err(_) => {
                return Err(format!(
                    "{phase}: only {} of {n} agents done by the deadline",
                    out.len()
                )
                .into())
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(format!("{phase}: a task failed: {e}").into()),
            Ok(Some(Ok(Err(e)))) => {
                return Err(format!("{phase}: agent failed after {} done: {e}", out.len()).into())
            }
            Ok(Some(Ok(Ok(v)))) => out.push(v),
        }
    }
    Ok(out)
}

async fn run(args: Args) -> Res<()> {
    let n = args.agents;
    let width = n.to_string().len().max(5);
    let hosts: Arc<Vec<String>> = Arc::new((1..=n).map(|i| host_name(i, width)).collect());
    let rss = Rss {
        pids: args.authority_pid.iter().map(u32::to_string).collect(),
    };
    let op = OperatorFile::read(&args.operator_file)?;
    let urls = flotilla_server::client::server_addresses(&args.url)?;
    // The operator's client of each authority; publishes go through the first.
    let authorities = urls
        .iter()
        .map(|u| Client::new(u, &op.ca_pem, Some(op.credential.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let operator = authorities[0].clone();
    println!(
        "fleet_load: {n} agents against {} (authority pid {})",
        args.url,
        if rss.pids.is_empty() {
            "unknown".to_string()
        } else {
            rss.pids.join(", ")
        }
    );

    // --- 1. Revisions 1-3 (made now, so no validation runs while measuring).
    let texts: Vec<String> = (1..=3).map(|g| inventory(n, width, g)).collect();
    let made = Instant::now();
    let topologies = texts
        .iter()
        .map(|t| validated(t))
        .collect::<Res<Vec<_>>>()?;
    let requests = topologies
        .iter()
        .map(publish_request)
        .collect::<Res<Vec<_>>>()?;
    let body = serde_json::to_string(&requests[0])?.len();
    println!(
        "inventory: {n} hosts, {n} components; TOML {:.2} MB, publish request body {:.2} MB \
         (axum's default body limit is {:.2} MB); 3 generations validated in {:.0} ms",
        texts[0].len() as f64 / 1e6,
        body as f64 / 1e6,
        AXUM_BODY_LIMIT as f64 / 1e6,
        ms(made.elapsed())
    );
    if body > AXUM_BODY_LIMIT {
        println!(
            "warning: the publish request is larger than axum's default request body limit: \
             the authority will refuse it with 413 unless its limit was raised"
        );
    }
    let started = Instant::now();
    let first: SelectResponse = match &args.flotilla {
        Some(flotilla) => {
            let file = args.work_dir.join("fleet.toml");
            std::fs::write(&file, &texts[0]).map_err(|e| format!("{}: {e}", file.display()))?;
            publish_with_cli(flotilla, &file, &urls[0], &args.operator_file).await?
        }
        None => operator.publish(&requests[0]).await?,
    };
    println!(
        "revision 1 {} (index {}) published with {} in {:.0} ms",
        short(&first.revision),
        first.selection.index,
        if args.flotilla.is_some() {
            "`flotilla config publish`"
        } else {
            "the client API"
        },
        ms(started.elapsed())
    );
    let i1 = first.selection.index;

    // --- 2. Join every agent: token (operator) then join (agent), J at a time.
    let started = Instant::now();
    let credentials = join_all(&args, &op.ca_pem, &operator, &hosts).await?;
    let took = started.elapsed();
    println!(
        "joined {n} agents (POST /v1/tokens + POST /v1/join each, {} at a time) in {:.1} s: \
         {:.0} joins/s",
        args.join_concurrency,
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );

    // --- 3. One client (one connection) per agent; a first poll opens it.
    let rss_before = rss.get("VmRSS");
    println!(
        "authority RSS before the agents connect: {}",
        rss.show("VmRSS")
    );
    let mut agents = Vec::with_capacity(n);
    for (k, (host, credential)) in hosts.iter().zip(credentials).enumerate() {
        agents.push((
            host.clone(),
            Client::new(&urls[k % urls.len()], &op.ca_pem, Some(credential))?,
        ));
    }
    let agents = Arc::new(agents);
    let started = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(args.connect_concurrency));
    let retries = Arc::new(Retries::default());
    let mut set = JoinSet::new();
    for k in 0..n {
        let (agents, gate, retries) = (agents.clone(), gate.clone(), retries.clone());
        set.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let (host, client) = &agents[k];
            let r = retries.poll(client, host, 0, Duration::ZERO).await?;
            Res::Ok(r.index)
        });
    }
    let indexes = collect(
        "first polls",
        &mut set,
        n,
        tokio::time::Instant::now() + Duration::from_secs(120),
    )
    .await?;
    if let Some(bad) = indexes.iter().find(|&&i| i != i1) {
        return Err(format!("first polls: an agent saw index {bad}, not {i1}").into());
    }
    println!(
        "{n} agents connected (TLS + first poll, {} at a time) in {:.1} s{}",
        args.connect_concurrency,
        started.elapsed().as_secs_f64(),
        retries.note()
    );

    // --- 4. N long polls parked; publish; time until each returns with it.
    let started = Instant::now();
    let retries = Arc::new(Retries::default());
    let mut set = JoinSet::new();
    for k in 0..n {
        let (agents, retries) = (agents.clone(), retries.clone());
        set.spawn(async move {
            let (host, client) = &agents[k];
            let mut index = i1;
            loop {
                let r = retries.poll(client, host, index, LONG_WAIT).await?;
                if r.index > i1 {
                    return Res::Ok((Instant::now(), r.revision));
                }
                index = r.index;
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = loop {
        if let Some(done) = set.try_join_next() {
            return Err(format!("long polls: a poll ended before the publish: {done:?}").into());
        }
        let seen = waiters(&authorities).await?;
        if seen >= n as i64 {
            break seen;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "long polls: the authority shows {seen} waiters of {n} after 60 s"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let rss_held = rss.get("VmRSS");
    println!(
        "authority shows flotilla_longpoll_waiters {seen} after {:.1} s; RSS holding them {}",
        started.elapsed().as_secs_f64(),
        rss.show("VmRSS")
    );
    let t0 = Instant::now();
    let second = operator.publish(&requests[1]).await?;
    let answered = t0.elapsed();
    let got = collect(
        "long-poll propagation",
        &mut set,
        n,
        tokio::time::Instant::now() + Duration::from_secs(60),
    )
    .await?;
    let mut long: Vec<Duration> = Vec::with_capacity(n);
    for (at, rev) in got {
        if rev.as_deref() != Some(second.revision.as_str()) {
            return Err(format!(
                "long-poll propagation: an agent got {rev:?}, not {}",
                second.revision
            )
            .into());
        }
        long.push(at.duration_since(t0));
    }
    long.sort();
    println!(
        "revision 2 {} (index {}): publish answered in {:.0} ms; first agent had it at {:.0} ms, \
         p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, last at {:.0} ms{}",
        short(&second.revision),
        second.selection.index,
        ms(answered),
        ms(long[0]),
        ms(percentile(&long, 0.5)),
        ms(percentile(&long, 0.9)),
        ms(percentile(&long, 0.99)),
        ms(long[n - 1]),
        retries.note()
    );
    let rss_peak_after_longpoll = rss.get("VmHWM");
    println!(
        "authority RSS after the wake-up {}, peak so far {}",
        rss.show("VmRSS"),
        rss.show("VmHWM")
    );

    // --- 5. Baseline: a non-blocking poll every period at a random phase.
    let i2 = second.selection.index;
    let period = args.period;
    let mut rng = Rng::from_os();
    let t_start = tokio::time::Instant::now();
    let polls = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(Retries::default());
    let mut set = JoinSet::new();
    for k in 0..n {
        let (agents, polls, retries) = (agents.clone(), polls.clone(), retries.clone());
        let phase = period.mul_f64(rng.unit());
        set.spawn(async move {
            let (host, client) = &agents[k];
            let mut at = t_start + phase;
            loop {
                tokio::time::sleep_until(at).await;
                let r = retries.poll(client, host, i2, Duration::ZERO).await?;
                polls.fetch_add(1, Ordering::Relaxed);
                if r.index > i2 {
                    return Res::Ok((Instant::now(), r.revision));
                }
                at += period;
            }
        });
    }
    let moment = period.mul_f64(rng.unit());
    tokio::time::sleep_until(t_start + moment).await;
    let t1 = Instant::now();
    let third = operator.publish(&requests[2]).await?;
    let got = collect(
        "heartbeat propagation",
        &mut set,
        n,
        tokio::time::Instant::now() + period + Duration::from_secs(30),
    )
    .await?;
    let mut beat: Vec<Duration> = Vec::with_capacity(n);
    for (at, rev) in got {
        if rev.as_deref() != Some(third.revision.as_str()) {
            return Err(format!(
                "heartbeat propagation: an agent got {rev:?}, not {}",
                third.revision
            )
            .into());
        }
        beat.push(at.duration_since(t1));
    }
    beat.sort();
    println!(
        "heartbeat every {}: revision 3 published {:.1} s into the period; {} polls in all; \
         propagation p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms{}",
        humantime::format_duration(period),
        moment.as_secs_f64(),
        polls.load(Ordering::Relaxed),
        ms(percentile(&beat, 0.5)),
        ms(percentile(&beat, 0.99)),
        ms(beat[n - 1]),
        retries.note()
    );

    // --- 6. Diagnostic (after the measurements): the role filter's cost, which
    // every woken poll pays (the authority computes each host's view per request).
    let t = &topologies[1];
    let started = Instant::now();
    let views: Vec<_> = hosts.iter().map(|h| t.host_view(h)).collect();
    let filter = started.elapsed();
    let started = Instant::now();
    let bytes: usize = views
        .iter()
        .map(|v| serde_json::to_vec(&v.snapshot).map_or(0, |b| b.len()))
        .sum();
    println!(
        "diagnostic: Topology::host_view for all {n} hosts takes {:.0} ms on one core here \
         (each call scans all {n} components), their JSON {:.0} ms; a snapshot is ~{} bytes",
        ms(filter),
        ms(started.elapsed()),
        bytes / n
    );
    println!(
        "load generator peak RSS {:.1} MiB",
        mib(proc_kib("self", "VmHWM").unwrap_or(0))
    );

    let peak = rss.get("VmHWM");
    let per_agent = |from: Option<u64>, to: Option<u64>| match (from, to) {
        (Some(a), Some(b)) => format!("{:.1} KiB", b.saturating_sub(a) as f64 / n as f64),
        _ => "?".into(),
    };
    let p50l = percentile(&long, 0.5);
    let p50b = percentile(&beat, 0.5);
    println!();
    println!(
        "agents {n}  long-poll propagation p50 {:.0} ms p99 {:.0} ms max {:.0} ms  (goal p99 < 2000 ms)",
        ms(p50l),
        ms(percentile(&long, 0.99)),
        ms(long[n - 1])
    );
    println!(
        "authority peak RSS {} (goal < 1024 MiB), per agent {} (peak - RSS before the agents \
         connected; holding the polls: {} per agent; peak through the long-poll wake-up {})",
        peak.map_or_else(|| "?".into(), |k| format!("{:.0} MiB", mib(k))),
        per_agent(rss_before, peak),
        per_agent(rss_before, rss_held),
        rss_peak_after_longpoll.map_or_else(|| "?".into(), |k| format!("{:.0} MiB", mib(k))),
    );
    println!(
        "{} heartbeat propagation p50 {:.0} ms; ratio heartbeat/long-poll median {:.0}×",
        humantime::format_duration(period),
        ms(p50b),
        p50b.as_secs_f64() / p50l.as_secs_f64().max(1e-6)
    );
    Ok(())
}

fn short(rev: &str) -> &str {
    &rev[..rev.len().min(19)]
}

/// An error and its causes, one after the other.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let _ = write!(s, ": {c}");
        cause = c.source();
    }
    s
}

/// Failed polls of a phase: like a real agent, a poll that fails in transport is
/// sent again at once (on a new connection); they are counted and the first is kept.
#[derive(Default)]
struct Retries {
    count: AtomicUsize,
    first: Mutex<Option<String>>,
}

impl Retries {
    /// At most this many failures in a row for one agent before the phase fails.
    const LIMIT: usize = 3;

    /// `client.snapshot(host, index, wait)`, sent again after a transport error.
    async fn poll(
        &self,
        client: &Client,
        host: &str,
        index: u64,
        wait: Duration,
    ) -> Res<SnapshotResponse> {
        let mut failed = 0;
        loop {
            match client.snapshot(host, index, wait).await {
                Ok(r) => return Ok(r),
                Err(e) if e.status().is_none() && failed < Self::LIMIT => {
                    failed += 1;
                    self.count.fetch_add(1, Ordering::Relaxed);
                    self.first
                        .lock()
                        .expect("not poisoned")
                        .get_or_insert_with(|| chain(&e));
                }
                Err(e) => return Err(chain(&e).into()),
            }
        }
    }

    /// ` (N polls failed in transport and were sent again; the first: …)`, or nothing.
    fn note(&self) -> String {
        match self.count.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(
                " ({n} polls failed in transport and were sent again; the first: {})",
                self.first
                    .lock()
                    .expect("not poisoned")
                    .as_deref()
                    .unwrap_or("?")
            ),
        }
    }
}

/// `flotilla -f FILE config --server URL --operator-file F publish --json`.
async fn publish_with_cli(
    flotilla: &Path,
    file: &Path,
    url: &str,
    operator_file: &Path,
) -> Res<SelectResponse> {
    let out = tokio::process::Command::new(flotilla)
        .arg("-f")
        .arg(file)
        .args(["config", "--server", url, "--operator-file"])
        .arg(operator_file)
        .args(["publish", "--json"])
        .output()
        .await
        .map_err(|e| format!("{}: {e}", flotilla.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`flotilla config publish` failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("`flotilla config publish --json` printed no answer: {e}"))?)
}

/// Makes one credential per host with the real join flow, `join_concurrency` hosts
/// at a time: a join token from the operator (`POST /v1/tokens`), exchanged by the
/// agent (`POST /v1/join`, a client without credential). Credentials in host order.
async fn join_all(
    args: &Args,
    ca_pem: &str,
    operator: &Client,
    hosts: &Arc<Vec<String>>,
) -> Res<Vec<String>> {
    let n = hosts.len();
    let joiner = Client::new(operator.url(), ca_pem, None)?;
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let out: Arc<Mutex<Vec<Option<String>>>> = Arc::new(Mutex::new(vec![None; n]));
    let mut set = JoinSet::new();
    for _ in 0..args.join_concurrency.min(n) {
        let (operator, joiner) = (operator.clone(), joiner.clone());
        let (hosts, next, done, out) = (hosts.clone(), next.clone(), done.clone(), out.clone());
        set.spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(host) = hosts.get(k) else {
                    return Res::Ok(());
                };
                let t = operator
                    .create_token(&TokenRequest {
                        host: host.clone(),
                        ttl_secs: Some(3600),
                        keep_credentials: false,
                    })
                    .await?;
                let j = joiner
                    .join(&JoinRequest {
                        token: t.token,
                        agent_version: env!("CARGO_PKG_VERSION").into(),
                        platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
                    })
                    .await?;
                if &j.host != host {
                    return Err(format!("joined as {}, not {host}", j.host).into());
                }
                out.lock().expect("not poisoned")[k] = Some(j.credential);
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(150);
    while let Some(r) = tokio::time::timeout_at(deadline, set.join_next())
        .await
        .map_err(|_| {
            format!(
                "joins: only {} of {n} agents joined in 150 s",
                done.load(Ordering::Relaxed)
            )
        })?
    {
        r.map_err(|e| format!("joins: {e}"))?.map_err(|e| {
            format!(
                "joins: failed after {} joined: {e}",
                done.load(Ordering::Relaxed)
            )
        })?;
    }
    let v = std::mem::take(&mut *out.lock().expect("not poisoned"));
    v.into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| "joins: some hosts have no credential".into())
}
