//! Every probe kind against real sockets and processes on 127.0.0.1, and the
//! readiness wait.

mod common;

use common::*;
use flotilla_exec::probe::{self, ProbeContext, WaitFailure, WaitOptions};
use flotilla_model::topology::Check;
use flotilla_model::values::{EnvValue, HumanDuration, StatusRange};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const T: Duration = Duration::from_secs(2);

fn http(url: &str) -> Check {
    Check::Http {
        body_contains: None,
        endpoint: Some("api".into()),
        json_equals: None,
        json_pointer: None,
        status: StatusRange::default(),
        url: url.into(),
    }
}

fn tcp(address: &str) -> Check {
    Check::Tcp {
        address: address.into(),
        endpoint: Some("api".into()),
        stays_open: None,
    }
}

fn listening_testkit(dir: &std::path::Path, extra: &[&str]) -> (Running, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut args = vec!["--listen", addr.as_str()];
    args.extend_from_slice(extra);
    let run = start_testkit(dir, "kit", &args);
    wait_for_line(&run.log, "LISTENING");
    (run, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_check_follows_identity() {
    let dir = tempfile::tempdir().unwrap();
    let run = start_testkit(dir.path(), "kit", &[]);
    let mut ctx = ProbeContext::new("kit");
    ctx.identity = Some(run.started.identity.clone());
    let out = probe::check(&Check::Process, &ctx, T).await;
    assert!(out.passed, "{out:?}");
    assert_eq!(
        out.evidence,
        format!("pid {} alive (identity matches)", run.pid())
    );

    let mut forged = run.started.identity.clone();
    forged.start_time_ticks += 1;
    ctx.identity = Some(forged);
    let out = probe::check(&Check::Process, &ctx, T).await;
    assert!(
        !out.passed && out.evidence.contains("another process"),
        "{out:?}"
    );

    flotilla_exec::process::stop(&run.started.identity, "SIGTERM", T).unwrap();
    ctx.identity = Some(run.started.identity.clone());
    let out = probe::check(&Check::Process, &ctx, T).await;
    assert!(!out.passed && out.evidence.ends_with("is gone"), "{out:?}");

    let out = probe::check(&Check::Process, &ProbeContext::new("ext"), T).await;
    assert!(!out.passed && out.misconfigured, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_check_accepts_and_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (_run, addr) = listening_testkit(dir.path(), &[]);
    let ctx = ProbeContext::new("kit");
    let out = probe::check(&tcp(&addr), &ctx, T).await;
    assert!(out.passed, "{out:?}");
    assert!(out
        .evidence
        .starts_with(&format!("connect {addr}: accepted")));

    let closed = format!("127.0.0.1:{}", free_port());
    let out = probe::check(&tcp(&closed), &ctx, T).await;
    assert!(!out.passed, "{out:?}");
    assert!(
        out.evidence
            .starts_with(&format!("connect {closed}: connection refused")),
        "{}",
        out.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_check_sees_503_then_200() {
    let dir = tempfile::tempdir().unwrap();
    let (_run, addr) = listening_testkit(
        dir.path(),
        &["--status-before-ready", "503", "--ready-after", "300"],
    );
    let url = format!("http://{addr}/health");
    let ctx = ProbeContext::new("kit");
    let out = probe::check(&http(&url), &ctx, T).await;
    assert!(!out.passed, "{out:?}");
    assert!(
        out.evidence
            .starts_with(&format!("GET {url} → 503 Service Unavailable (")),
        "{}",
        out.evidence
    );
    assert_eq!(out.detail["status"], 503);
    assert!(out.detail["body_excerpt"]
        .as_str()
        .unwrap()
        .contains("loading"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let ready = probe::wait_ready_with(
        &probe(http(&url)),
        &ctx,
        &WaitOptions::until(deadline),
        |_| {},
    )
    .await
    .unwrap();
    assert!(
        ready.evidence.starts_with(&format!("GET {url} → 200 OK (")),
        "{}",
        ready.evidence
    );

    let closed = format!("http://127.0.0.1:{}/health", free_port());
    let out = probe::check(&http(&closed), &ctx, T).await;
    assert!(!out.passed);
    assert!(
        out.evidence
            .starts_with(&format!("GET {closed}: connection refused")),
        "{}",
        out.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_check_body_and_json_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let (_run, addr) = listening_testkit(dir.path(), &[]);
    let url = format!("http://{addr}/health");
    let ctx = ProbeContext::new("kit");
    let with =
        |contains: Option<&str>, pointer: Option<&str>, equals: Option<serde_json::Value>| {
            Check::Http {
                body_contains: contains.map(str::to_string),
                endpoint: Some("api".into()),
                json_equals: equals,
                json_pointer: pointer.map(str::to_string),
                status: StatusRange::default(),
                url: url.clone(),
            }
        };
    let out = probe::check(
        &with(Some("\"ok\""), Some("/status"), Some(json!("ok"))),
        &ctx,
        T,
    )
    .await;
    assert!(out.passed, "{out:?}");
    assert!(
        out.evidence.ends_with("json /status = \"ok\""),
        "{}",
        out.evidence
    );
    assert_eq!(out.detail["json_value"], "ok");

    let out = probe::check(
        &with(None, Some("/status"), Some(json!("loading"))),
        &ctx,
        T,
    )
    .await;
    assert!(!out.passed);
    assert!(
        out.evidence
            .ends_with("json /status = \"ok\", expected \"loading\""),
        "{}",
        out.evidence
    );
    let out = probe::check(&with(None, Some("/nope"), None), &ctx, T).await;
    assert!(
        !out.passed && out.evidence.ends_with("json /nope missing"),
        "{}",
        out.evidence
    );
    let out = probe::check(&with(Some("zzz"), None, None), &ctx, T).await;
    assert!(
        !out.passed && out.evidence.ends_with("body lacks \"zzz\""),
        "{}",
        out.evidence
    );

    let strict = Check::Http {
        body_contains: None,
        endpoint: Some("api".into()),
        json_equals: None,
        json_pointer: None,
        status: StatusRange { min: 204, max: 204 },
        url: url.clone(),
    };
    let out = probe::check(&strict, &ctx, T).await;
    assert!(
        !out.passed
            && out.evidence.contains("→ 200 OK (")
            && out.evidence.ends_with("; expected 204"),
        "{}",
        out.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_posts_json_to_an_echo_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (_run, addr) = listening_testkit(dir.path(), &[]);
    let ctx = ProbeContext::new("kit");
    let request = |json_equals: serde_json::Value| Check::Request {
        body: None,
        body_contains: Some("\"messages\"".into()),
        endpoint: "api".into(),
        headers: BTreeMap::new(),
        json: Some(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2})),
        json_equals: Some(json_equals),
        json_pointer: Some("/messages/0/content".into()),
        method: "post".into(),
        status: StatusRange::default(),
        url: format!("http://{addr}/echo"),
    };
    let out = probe::check(&request(json!("hi")), &ctx, T).await;
    assert!(out.passed, "{out:?}");
    assert!(out
        .evidence
        .starts_with(&format!("POST http://{addr}/echo → 200 OK")));
    let out = probe::check(&request(json!("bye")), &ctx, T).await;
    assert!(
        !out.passed && out.evidence.contains("expected \"bye\""),
        "{out:?}"
    );

    let raw = Check::Request {
        body: Some("plain text".into()),
        body_contains: Some("plain".into()),
        endpoint: "api".into(),
        headers: BTreeMap::new(),
        json: None,
        json_equals: None,
        json_pointer: None,
        method: "PUT".into(),
        status: StatusRange::default(),
        url: format!("http://{addr}/echo"),
    };
    let out = probe::check(&raw, &ctx, T).await;
    assert!(out.passed, "{out:?}");
}

/// A one-shot HTTP server on 127.0.0.1 that answers with the request's headers.
fn header_echo_server() -> (String, std::thread::JoinHandle<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        let reply = serde_json::to_string(&json!({"headers": head})).unwrap();
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
            reply.len()
        )
        .unwrap();
        head
    });
    (addr, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_headers_resolve_secrets_and_never_show_them() {
    let (addr, server) = header_echo_server();
    let secrets = |name: &str| (name == "API_KEY").then(|| "sk-very-secret".to_string());
    let mut ctx = ProbeContext::new("proxy");
    ctx.secrets = &secrets;
    let mut headers = BTreeMap::new();
    headers.insert(
        "Authorization".to_string(),
        EnvValue::Secret("API_KEY".into()),
    );
    headers.insert("X-Plain".to_string(), EnvValue::Literal("yes".into()));
    let check = Check::Request {
        body: None,
        body_contains: Some("sk-very-secret".into()),
        endpoint: "api".into(),
        headers: headers.clone(),
        json: Some(json!({"q": 1})),
        json_equals: None,
        json_pointer: Some("/headers".into()),
        method: "POST".into(),
        status: StatusRange::default(),
        url: format!("http://{addr}/v1/echo-headers"),
    };
    let out = probe::check(&check, &ctx, T).await;
    let seen = server.join().unwrap().to_ascii_lowercase();
    assert!(seen.contains("authorization: sk-very-secret"), "{seen}");
    assert!(seen.contains("x-plain: yes"), "{seen}");
    assert!(seen.contains("content-type: application/json"), "{seen}");
    assert!(out.passed, "{out:?}");
    let shown = serde_json::to_string(&out).unwrap();
    assert!(!shown.contains("sk-very-secret"), "{shown}");
    assert!(shown.contains("[secret API_KEY]"), "{shown}");

    // An unknown secret is a configuration error, not a transient failure.
    headers.insert("X-Other".into(), EnvValue::Secret("MISSING".into()));
    let check = Check::Request {
        body: None,
        body_contains: None,
        endpoint: "api".into(),
        headers,
        json: None,
        json_equals: None,
        json_pointer: None,
        method: "GET".into(),
        status: StatusRange::default(),
        url: format!("http://{addr}/"),
    };
    let out = probe::check(&check, &ctx, T).await;
    assert!(
        out.misconfigured && out.evidence.contains("`MISSING`"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_check_reports_exit_codes_and_output() {
    let ctx = ProbeContext::new("x");
    let exec = |script: &str| Check::Exec {
        command: vec!["sh".into(), "-c".into(), script.into()],
    };
    let out = probe::check(&exec("echo hello; exit 0"), &ctx, T).await;
    assert!(out.passed, "{out:?}");
    assert!(
        out.evidence.contains("exit status 0") && out.evidence.ends_with(": hello"),
        "{}",
        out.evidence
    );

    let out = probe::check(
        &exec("echo partial; echo 'model not loaded' >&2; exit 3"),
        &ctx,
        T,
    )
    .await;
    assert!(!out.passed);
    assert!(
        out.evidence.contains("exit status 3") && out.evidence.ends_with(": model not loaded"),
        "{}",
        out.evidence
    );
    assert_eq!(out.detail["exit_code"], 3);

    let t0 = Instant::now();
    let out = probe::check(&exec("sleep 30"), &ctx, Duration::from_millis(200)).await;
    assert!(
        !out.passed && out.evidence.contains("killed"),
        "{}",
        out.evidence
    );
    assert!(t0.elapsed() < Duration::from_secs(5));

    let out = probe::check(
        &Check::Exec {
            command: vec!["/nonexistent/flotilla-check".into()],
        },
        &ctx,
        T,
    )
    .await;
    assert!(!out.passed && out.misconfigured, "{out:?}");
    let out = probe::check(&Check::Exec { command: vec![] }, &ctx, T).await;
    assert!(out.misconfigured);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_check_honours_the_start_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("c.log");
    std::fs::write(&log, "booting\nserver ready (old run)\n").unwrap();
    let mut ctx = ProbeContext::new("c");
    ctx.log_path = Some(log.clone());
    ctx.log_start_offset = std::fs::metadata(&log).unwrap().len();
    let check = Check::Log {
        pattern: r"ready\b".into(),
    };
    let out = probe::check(&check, &ctx, T).await;
    assert!(!out.passed, "an old line must not count: {out:?}");
    assert!(out.evidence.contains("after byte 31"), "{}", out.evidence);
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(f, "loading model").unwrap();
    writeln!(f, "server ready").unwrap();
    let out = probe::check(&check, &ctx, T).await;
    assert!(out.passed, "{out:?}");
    assert_eq!(out.evidence, r"log line 4 matched /ready\b/");
    assert_eq!(out.detail["line"], "server ready");

    let out = probe::check(
        &Check::Log {
            pattern: "(".into(),
        },
        &ctx,
        T,
    )
    .await;
    assert!(out.misconfigured, "{out:?}");
    ctx.log_path = Some(dir.path().join("absent.log"));
    let out = probe::check(&check, &ctx, T).await;
    assert!(!out.passed && !out.misconfigured && out.evidence.contains("does not exist yet"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_probe_on_a_started_component() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let run = start_testkit(
        dir.path(),
        "kit",
        &[
            "--listen",
            &addr,
            "--listen-after",
            "100",
            "--log-line",
            "model loaded",
        ],
    );
    let mut ctx = ProbeContext::new("kit");
    ctx.log_path = Some(run.log.clone());
    ctx.log_start_offset = run.started.log_start_offset;
    let p = probe(Check::Log {
        pattern: "^model loaded$".into(),
    });
    let exited = || run.started.child.exit_description();
    let opts = WaitOptions::until(Instant::now() + Duration::from_secs(10)).exited(&exited);
    let out = probe::wait_ready_with(&p, &ctx, &opts, |_| {})
        .await
        .unwrap();
    assert!(out.evidence.starts_with("log line "), "{}", out.evidence);
}

fn listening_nanos(line: &str) -> u128 {
    line["LISTENING ".len()..].trim().parse().unwrap()
}

/// Starts a service that listens after 250 ms (ready at once), waits for its `http`
/// probe with the default pace, and returns (ms from LISTENING to ready, attempts,
/// requests the service received).
async fn readiness_latency() -> (f64, u32, u64) {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let count = dir.path().join("requests");
    let run = start_testkit(
        dir.path(),
        "kit",
        &[
            "--listen",
            &addr,
            "--listen-after",
            "250",
            "--count-requests",
            count.to_str().unwrap(),
        ],
    );
    let ctx = ProbeContext::new("kit");
    let p = probe(http(&format!("http://{addr}/health")));
    let exited = || run.started.child.exit_description();
    let opts = WaitOptions::until(Instant::now() + Duration::from_secs(20)).exited(&exited);
    let mut attempts = 0;
    let out = probe::wait_ready_with(&p, &ctx, &opts, |_| attempts += 1)
        .await
        .unwrap();
    let ready_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    assert!(out.passed);
    let listening = listening_nanos(&wait_for_line(&run.log, "LISTENING"));
    let requests = std::fs::read_to_string(&count)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    ((ready_at - listening) as f64 / 1e6, attempts, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_notices_a_late_listener_quickly() {
    // Loose bounds only: the precise figure belongs to the benchmark script.
    let mut latencies = Vec::new();
    for _ in 0..3 {
        let (latency_ms, attempts, requests) = readiness_latency().await;
        eprintln!(
            "ready {latency_ms:.1} ms after listening ({attempts} attempts, {requests} reached the service)"
        );
        assert!(
            attempts >= 2,
            "it was not ready at first ({attempts} attempts)"
        );
        // The port is polled, not the service: only the passing request reaches it.
        assert_eq!(requests, 1, "requests before it listened cannot reach it");
        latencies.push(latency_ms);
    }
    latencies.sort_by(f64::total_cmp);
    assert!(
        latencies[1] < 150.0,
        "median: noticed {:.1} ms after listening",
        latencies[1]
    );
}

/// A model server that answers 503 for 1.5 s after it starts listening gets few
/// requests (5, 10, 20, 50, 100 ms apart, then 100 ms), and the 200 is seen promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_readiness_backs_off_while_loading_and_notices_the_200() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let count = dir.path().join("requests");
    let run = start_testkit(
        dir.path(),
        "llm",
        &[
            "--listen",
            &addr,
            "--status-before-ready",
            "503",
            "--ready-after",
            "1500",
            "--count-requests",
            count.to_str().unwrap(),
        ],
    );
    let ctx = ProbeContext::new("llm");
    let p = probe(http(&format!("http://{addr}/health")));
    let exited = || run.started.child.exit_description();
    let opts = WaitOptions::until(Instant::now() + Duration::from_secs(20)).exited(&exited);
    let mut outcomes = Vec::new();
    let out = probe::wait_ready_with(&p, &ctx, &opts, |o| outcomes.push(o.clone()))
        .await
        .unwrap();
    let seen_ms = out.checked_at_ms as f64 + out.latency.as_secs_f64() * 1e3;
    let listening_ms = listening_nanos(&wait_for_line(&run.log, "LISTENING")) as f64 / 1e6;
    let late = seen_ms - (listening_ms + 1500.0);
    let requests: u64 = std::fs::read_to_string(&count)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let answered = outcomes
        .iter()
        .filter(|o| o.detail.get("status").is_some())
        .count() as u64;
    eprintln!("{requests} requests in 1.5 s of loading; 200 seen {late:.1} ms after it turned");
    assert_eq!(
        requests, answered,
        "every request the service got was a probe"
    );
    // ≈ 14 in the first second after listening, then ≤ 10 per second.
    assert!((8..=22).contains(&requests), "{requests} requests");
    assert!(late < 300.0, "200 seen {late:.1} ms after it turned");
    // After the first second, requests are ≥ 100 ms apart.
    let answered: Vec<u64> = outcomes
        .iter()
        .filter(|o| o.detail.get("status").is_some())
        .map(|o| o.checked_at_ms)
        .collect();
    let first = answered[0];
    for w in answered.windows(2).filter(|w| w[0] >= first + 1000) {
        assert!(
            w[1] - w[0] >= 99,
            "{} ms apart after the first second",
            w[1] - w[0]
        );
    }
}

/// An `exec` probe (no endpoint to poll) is paced by the backoff too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_readiness_backs_off() {
    let ctx = ProbeContext::new("job");
    let p = probe(Check::Exec {
        command: vec!["false".into()],
    });
    let t0 = Instant::now();
    let err = probe::wait_ready_with(
        &p,
        &ctx,
        &WaitOptions::until(t0 + Duration::from_millis(2000)),
        |_| {},
    )
    .await
    .unwrap_err();
    assert_eq!(err.reason, WaitFailure::Deadline);
    // 1 + ≈ 13 in the first second, then ≤ 10 in the next.
    assert!(
        (8..=26).contains(&err.attempts),
        "{} attempts",
        err.attempts
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_fails_fast_when_the_process_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let run = start_testkit(
        dir.path(),
        "crashy",
        &[
            "--listen",
            &addr,
            "--listen-after",
            "60000",
            "--crash-after",
            "200",
            "--exit-code",
            "4",
        ],
    );
    let ctx = ProbeContext::new("crashy");
    let p = probe(tcp(&addr));
    let exited = || run.started.child.exit_description();
    let t0 = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = probe::wait_ready(&p, &ctx, deadline, Some(&exited), |_| {})
        .await
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(
        err.reason,
        WaitFailure::Exited {
            status: format!("pid {} exit status 4", run.pid())
        }
    );
    assert!(err.attempts >= 1);
    let msg = err.to_string();
    assert!(
        msg.contains("crashy")
            && msg.contains("exit status 4")
            && msg.contains("connection refused"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_gives_up_at_the_deadline_with_evidence() {
    let ctx = ProbeContext::new("nobody");
    let addr = format!("127.0.0.1:{}", free_port());
    let t0 = Instant::now();
    let opts = WaitOptions::until(t0 + Duration::from_millis(300));
    let err = probe::wait_ready_with(&probe(tcp(&addr)), &ctx, &opts, |_| {})
        .await
        .unwrap_err();
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(err.reason, WaitFailure::Deadline);
    assert!(err.attempts >= 4, "fast polling at first: {}", err.attempts);
    assert!(err.last.unwrap().evidence.contains("connection refused"));

    // Misconfigured probes fail at once.
    let t0 = Instant::now();
    let opts = WaitOptions::until(t0 + Duration::from_secs(10));
    let err = probe::wait_ready_with(&probe(Check::Process), &ctx, &opts, |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.reason, WaitFailure::Misconfigured);
    assert_eq!(err.attempts, 1);
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_ready_honours_initial_delay_and_success_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let (_run, addr) = listening_testkit(dir.path(), &[]);
    let ctx = ProbeContext::new("kit");
    let mut p = probe(tcp(&addr));
    p.initial_delay = HumanDuration(Duration::from_millis(100));
    p.success_threshold = 3;
    let t0 = Instant::now();
    let mut seen = Vec::new();
    let out = probe::wait_ready_with(
        &p,
        &ctx,
        &WaitOptions::until(t0 + Duration::from_secs(10)),
        |o| seen.push(o.passed),
    )
    .await
    .unwrap();
    assert!(out.passed);
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert_eq!(seen, vec![true, true, true]);
    let once = probe::observe(&p, &ctx).await;
    assert!(once.passed && once.latency < Duration::from_secs(1));
}

/// `stays_open`: a listener that accepts and closes at once (what `ssh -L` does when
/// the far end refuses) fails; one that keeps the connection open passes; without
/// `stays_open` both pass.
#[tokio::test]
async fn tcp_stays_open_tells_a_dead_forward_from_a_live_one() {
    let closing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closing_addr = closing.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in closing.incoming() {
            drop(conn);
        }
    });
    let holding = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let holding_addr = holding.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for conn in holding.incoming() {
            kept.push(conn);
        }
    });
    let lookup = |_: &str| None;
    let ctx = ProbeContext {
        component: "fwd".into(),
        identity: None,
        log_path: None,
        log_start_offset: 0,
        secrets: &lookup,
        owner: None,
    };
    let with = |address: &str| Check::Tcp {
        address: address.into(),
        endpoint: Some("fwd".into()),
        stays_open: Some(HumanDuration(Duration::from_millis(300))),
    };
    let dead = probe::check(&with(&closing_addr), &ctx, Duration::from_secs(2)).await;
    assert!(!dead.passed, "{}", dead.evidence);
    assert!(
        dead.evidence.contains("closed by the other end"),
        "{}",
        dead.evidence
    );
    let live = probe::check(&with(&holding_addr), &ctx, Duration::from_secs(2)).await;
    assert!(live.passed, "{}", live.evidence);
    let plain = probe::check(&tcp(&closing_addr), &ctx, Duration::from_secs(2)).await;
    assert!(plain.passed, "{}", plain.evidence);
}
