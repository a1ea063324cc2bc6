//! `gate_latency`: the measuring half of `scripts/bench-gate` (the permission
//! gate's decision latency). The script sets up a real
//! `flotilla serve` with a session whose runtime is running (so a session
//! credential exists) and a `[gate] allow` rule `Bash(ls *)`; this program measures
//! and prints figures (it never asserts a timing):
//!
//! 1. HTTP hook: `--requests` rounds over one keep-alive TLS connection (one
//!    [`Client`], requests strictly sequential), each round one request of each kind,
//!    in an order that rotates every round:
//!    - `GET /healthz`: the baseline (TLS, HTTP, routing: everything but the gate);
//!    - `POST /v1/gate/hook`, an allowed call: Claude Code's `PreToolUse` JSON for
//!      Bash `ls -la src` (parsed by the real shell parser, allowed by the rule);
//!    - `POST /v1/gate/hook`, an always-ask call: Bash `git push origin main` (the
//!      first call opens a question; every later one finds it and defers again).
//!
//!    Each time is from just before the request is sent until its whole answer is
//!    read (and, for the gate, parsed: [`Client::post_bytes`]). Every answer's
//!    decision is checked (`allow`, `defer`). Printed: p50 / p99 / max, the ratio of
//!    each gate p50 to the healthz p50, and the goal check p99 <= 5 ms.
//! 2. Command hook: `--runs` rounds of, in a rotating order, `flotilla gate hook`
//!    with the allowed call on stdin (`FLOTILLA_SERVER`, `FLOTILLA_CA`,
//!    `FLOTILLA_SESSION_TOKEN` set), the baseline `flotilla --version`, and
//!    `/bin/true` for scale, each spawned the same way (stdin, stdout and stderr
//!    piped, the same environment). Each time is from just before the spawn until
//!    the process exited and its output was read: process start to answer. The
//!    hook's answer is checked (exit 0, `allow`). Printed: p50 / p99 / max and the
//!    ratio of the hook's p50 to `flotilla --version`'s.
//!
//! Warm-up first (`--warmup` HTTP rounds, 5 process rounds), not counted.
//!
//! Usage: `gate_latency --url https://127.0.0.1:PORT --ca CA.pem --token TOKEN
//! --flotilla PATH [--requests 2000] [--runs 200] [--warmup 50]`

use flotilla_server::Client;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, Error>;

const USAGE: &str = "usage: gate_latency --url https://127.0.0.1:PORT --ca CA.pem --token TOKEN \
--flotilla PATH [--requests 2000] [--runs 200] [--warmup 50]";

/// The allowed call (the script's `[gate] allow = ["Bash(ls *)"]`).
const ALLOWED: &str = "ls -la src";
/// The always-ask call (on the gate's default always-ask list).
const ASK: &str = "git push origin main";
/// The goal for the HTTP path's p99.
const GOAL_P99: Duration = Duration::from_millis(5);

struct Args {
    url: String,
    ca: PathBuf,
    token: String,
    flotilla: PathBuf,
    requests: usize,
    runs: usize,
    warmup: usize,
}

fn parse_args() -> Res<Args> {
    let (mut url, mut ca, mut token, mut flotilla) = (None, None, None, None);
    let (mut requests, mut runs, mut warmup) = (2000, 200, 50);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--url" => url = Some(val()?),
            "--ca" => ca = Some(val()?),
            "--token" => token = Some(val()?),
            "--flotilla" => flotilla = Some(val()?),
            "--requests" => requests = val()?.parse()?,
            "--runs" => runs = val()?.parse()?,
            "--warmup" => warmup = val()?.parse()?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}\n{USAGE}").into()),
        }
    }
    let need = |v: Option<_>, k: &str| v.ok_or_else(|| format!("{k} is required\n{USAGE}"));
    let args = Args {
        url: need(url, "--url")?,
        ca: need(ca, "--ca")?.into(),
        token: need(token, "--token")?,
        flotilla: need(flotilla, "--flotilla")?.into(),
        requests,
        runs,
        warmup,
    };
    if args.requests == 0 || args.runs == 0 {
        return Err("--requests and --runs must be at least 1".into());
    }
    Ok(args)
}

/// Claude Code's `PreToolUse` input for Bash `command` (the shape of
/// crates/flotilla-sessions/tests/fixtures/hooks/pretooluse-bash-default.json).
fn payload(command: &str) -> Vec<u8> {
    serde_json::json!({
        "session_id": "181341e8-86a1-4044-bf52-9d9e19812736",
        "transcript_path": "/tmp/bench/home/.claude/projects/-tmp-bench-work/181341e8-86a1-4044-bf52-9d9e19812736.jsonl",
        "cwd": "/tmp/bench/work",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "benchmark"},
        "tool_use_id": "toolu_bench"
    })
    .to_string()
    .into_bytes()
}

/// The decision of a hook answer (`hookSpecificOutput.permissionDecision`).
fn decision(answer: &[u8]) -> Res<String> {
    let v: serde_json::Value = serde_json::from_slice(answer)?;
    Ok(v["hookSpecificOutput"]["permissionDecision"]
        .as_str()
        .ok_or_else(|| format!("an answer without a decision: {v}"))?
        .to_string())
}

fn expect(what: &str, answer: &[u8], want: &str) -> Res<()> {
    let got = decision(answer)?;
    if got != want {
        return Err(format!(
            "{what}: the gate answered `{got}`, not `{want}`: {}",
            String::from_utf8_lossy(answer)
        )
        .into());
    }
    Ok(())
}

/// Sorted samples and their summary.
struct Figures(Vec<Duration>);

impl Figures {
    fn new(mut v: Vec<Duration>) -> Figures {
        v.sort();
        Figures(v)
    }
    /// Nearest-rank percentile (`q` in (0, 1]).
    fn pct(&self, q: f64) -> Duration {
        let rank = ((q * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len());
        self.0[rank - 1]
    }
    fn line(&self) -> String {
        format!(
            "n {:>4}  p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
            self.0.len(),
            ms(self.pct(0.50)),
            ms(self.pct(0.99)),
            ms(*self.0.last().expect("samples"))
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// The sockets this process holds (its TCP connections to the authority).
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[derive(Clone, Copy)]
enum Http {
    Healthz,
    Allowed,
    Ask,
}

async fn http_once(c: &Client, kind: Http, allowed: &[u8], ask: &[u8]) -> Res<Duration> {
    const PATH: &str = "/v1/gate/hook";
    const LIMIT: Duration = Duration::from_secs(30);
    let t = Instant::now();
    let (answer, want) = match kind {
        Http::Healthz => {
            c.get_text("/healthz").await?;
            return Ok(t.elapsed());
        }
        Http::Allowed => (c.post_bytes(PATH, allowed.to_vec(), LIMIT).await?, "allow"),
        Http::Ask => (c.post_bytes(PATH, ask.to_vec(), LIMIT).await?, "defer"),
    };
    let took = t.elapsed();
    expect(PATH, &answer, want)?;
    Ok(took)
}

/// Part 1: the HTTP hook against `GET /healthz`, one connection.
async fn http(args: &Args, ca_pem: &str) -> Res<()> {
    let c = Client::new(&args.url, ca_pem, Some(args.token.clone()))?;
    let (allowed, ask) = (payload(ALLOWED), payload(ASK));
    let before = sockets();
    let kinds = [Http::Healthz, Http::Allowed, Http::Ask];
    for _ in 0..args.warmup {
        for k in kinds {
            http_once(&c, k, &allowed, &ask).await?;
        }
    }
    let mut times: [Vec<Duration>; 3] = Default::default();
    let started = Instant::now();
    for round in 0..args.requests {
        for j in 0..3 {
            let i = (round + j) % 3;
            times[i].push(http_once(&c, kinds[i], &allowed, &ask).await?);
        }
    }
    let elapsed = started.elapsed();
    let conns = sockets().saturating_sub(before);
    let [healthz, allow, ask] = times.map(Figures::new);
    let base = healthz.pct(0.5);
    let goal = |f: &Figures| {
        if f.pct(0.99) <= GOAL_P99 {
            "met"
        } else {
            "MISSED"
        }
    };
    println!(
        "HTTP hook: {} rounds of 3 sequential requests in {:.1} s over {conns} TLS connection(s) (keep-alive)",
        args.requests,
        elapsed.as_secs_f64()
    );
    println!("  {:<42} {}", "GET /healthz (baseline)", healthz.line());
    println!(
        "  {:<42} {}  p50 ratio {:.2} vs healthz  (goal p99 <= 5 ms: {})",
        format!("gate, allowed (Bash `{ALLOWED}`)"),
        allow.line(),
        ratio(allow.pct(0.5), base),
        goal(&allow)
    );
    println!(
        "  {:<42} {}  p50 ratio {:.2} vs healthz  (goal p99 <= 5 ms: {})",
        format!("gate, always-ask (`{ASK}`)"),
        ask.line(),
        ratio(ask.pct(0.5), base),
        goal(&ask)
    );
    Ok(())
}

/// Runs `cmd` with `stdin` written to it; the time from just before the spawn until
/// it exited with its output read, and that output.
fn spawn_once(mut cmd: Command, stdin: &[u8]) -> Res<(Duration, std::process::Output)> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let mut child = cmd.spawn()?;
    {
        let mut input = child.stdin.take().expect("piped");
        input.write_all(stdin)?;
    }
    let out = child.wait_with_output()?;
    Ok((t.elapsed(), out))
}

/// Part 2: `flotilla gate hook` end to end against `flotilla --version`.
fn command_hook(args: &Args) -> Res<()> {
    let allowed = payload(ALLOWED);
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let make = |program: &std::path::Path, argv: &[&str]| {
        let mut c = Command::new(program);
        c.args(argv)
            .env_clear()
            .env("PATH", &path)
            .env("FLOTILLA_SERVER", &args.url)
            .env("FLOTILLA_CA", &args.ca)
            .env("FLOTILLA_SESSION_TOKEN", &args.token);
        c
    };
    let hook = || -> Res<Duration> {
        let (took, out) = spawn_once(make(&args.flotilla, &["gate", "hook"]), &allowed)?;
        if !out.status.success() {
            return Err(format!(
                "flotilla gate hook: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        expect("flotilla gate hook", &out.stdout, "allow")?;
        Ok(took)
    };
    let plain = |program: &std::path::Path, argv: &[&str]| -> Res<Duration> {
        let (took, out) = spawn_once(make(program, argv), b"")?;
        if !out.status.success() {
            return Err(format!("{} {argv:?}: {}", program.display(), out.status).into());
        }
        Ok(took)
    };
    let version = || plain(&args.flotilla, &["--version"]);
    let truth = || plain(std::path::Path::new("/bin/true"), &[]);
    for _ in 0..5 {
        hook()?;
        version()?;
        truth()?;
    }
    let mut times: [Vec<Duration>; 3] = Default::default();
    for round in 0..args.runs {
        for j in 0..3 {
            let i = (round + j) % 3;
            times[i].push(match i {
                0 => hook()?,
                1 => version()?,
                _ => truth()?,
            });
        }
    }
    let [hook, version, truth] = times.map(Figures::new);
    println!(
        "command hook: {} rounds, each process spawned, fed stdin and waited for (start to answer)",
        args.runs
    );
    println!("  {:<42} {}", "/bin/true (scale)", truth.line());
    println!(
        "  {:<42} {}",
        "flotilla --version (baseline)",
        version.line()
    );
    println!(
        "  {:<42} {}  p50 ratio {:.2} vs --version  (+{:.3} ms)",
        "flotilla gate hook, allowed",
        hook.line(),
        ratio(hook.pct(0.5), version.pct(0.5)),
        ms(hook.pct(0.5).saturating_sub(version.pct(0.5)))
    );
    Ok(())
}

fn main() -> ExitCode {
    let run = || -> Res<()> {
        let args = parse_args()?;
        let ca_pem =
            std::fs::read_to_string(&args.ca).map_err(|e| format!("{}: {e}", args.ca.display()))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(http(&args, &ca_pem))?;
        command_hook(&args)
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gate_latency: {e}");
            ExitCode::FAILURE
        }
    }
}
