//! Runs the real `flotilla-testkit` binary and checks what each of its flags promises.
//!
//! Every wait is on a condition with a deadline: a stdout line (read from a channel with
//! a timeout) or a state polled by `wait_until`. Every process a test starts runs in its
//! own process group, which `Service`'s `Drop` kills, so nothing outlives a failed test.

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flotilla_testkit::wait_until;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_flotilla-testkit");
/// How long any one condition may take. Generous for busy machines; tests move on as
/// soon as the condition holds.
const DEADLINE: Duration = Duration::from_secs(10);
/// A running `flotilla-testkit`, leader of its own process group. Dropping it SIGKILLs
/// the whole group (the service and any child it spawned) and reaps the service.
struct Service {
    child: Child,
    pid: i32,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    /// Lines read but not yet matched by `expect_line`.
    pending: Vec<String>,
    /// Every stdout line read so far, for failure messages.
    seen: Vec<String>,
}

impl Service {
    fn start(args: &[&str]) -> Service {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("start flotilla-testkit");
        let stdout = forward_lines(child.stdout.take().expect("piped stdout"), false);
        let stderr = forward_lines(child.stderr.take().expect("piped stderr"), true);
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        Service {
            child,
            pid,
            stdout,
            stderr,
            pending: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// Waits for a stdout line starting with `prefix` that no earlier call matched, and
    /// returns the rest of it. Lines with other prefixes stay available to later calls,
    /// so lines from two processes sharing stdout may be expected in either order.
    fn expect_line(&mut self, prefix: &str) -> String {
        if let Some(at) = self
            .pending
            .iter()
            .position(|line| line.starts_with(prefix))
        {
            return self.pending.remove(at)[prefix.len()..].to_owned();
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            match self
                .stdout
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_owned();
                    }
                    self.pending.push(line);
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no line starting with {prefix:?} within {DEADLINE:?}; stdout so far: {:?}",
                        self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "stdout closed before a line starting with {prefix:?}; stdout: {:?}",
                        self.seen
                    )
                }
            }
        }
    }

    /// Waits (with the deadline) for the service to exit and returns how it ended.
    fn wait_for_exit(&mut self) -> ExitStatus {
        let mut status = None;
        let exited = wait_until(DEADLINE, || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        assert!(
            exited,
            "pid {} still running after {DEADLINE:?}; stdout: {:?}",
            self.pid, self.seen
        );
        status.expect("exited")
    }

    /// Every stderr line, once the service has exited and stderr is closed.
    fn stderr_after_exit(&mut self) -> String {
        let deadline = Instant::now() + DEADLINE;
        let mut text = String::new();
        loop {
            match self
                .stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    text.push_str(&line);
                    text.push('\n');
                }
                Err(RecvTimeoutError::Disconnected) => return text,
                Err(RecvTimeoutError::Timeout) => panic!("stderr still open after {DEADLINE:?}"),
            }
        }
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid), signal).expect("send signal");
    }

    fn signal_group(&self, signal: Signal) {
        killpg(Pid::from_raw(self.pid), signal).expect("send signal to process group");
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // The group outlives its leader while a spawned child is in it; ESRCH is fine.
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Sends each line of `stream` to the returned channel from a thread, echoing it to the
/// test's stderr when `echo` (the harness shows captured output of a failed test).
fn forward_lines(stream: impl Read + Send + 'static, echo: bool) -> Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if echo {
                eprintln!("[flotilla-testkit stderr] {line}");
            }
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// A port that was free a moment ago: bind port 0, read the port, let it go.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// A file path in the temporary directory, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> TempPath {
        TempPath(std::env::temp_dir().join(format!(
            "flotilla-testkit-{}-{}-{name}",
            std::process::id(),
            unix_nanos()
        )))
    }

    fn as_str(&self) -> &str {
        self.0.to_str().expect("temporary path is UTF-8")
    }

    /// The file's contents once it exists.
    fn read_when_written(&self) -> String {
        let mut contents = None;
        let written = wait_until(DEADLINE, || {
            contents = fs::read_to_string(&self.0).ok();
            contents.is_some()
        });
        assert!(
            written,
            "{} not written within {DEADLINE:?}",
            self.0.display()
        );
        contents.expect("read")
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// One HTTP answer, as the tests look at it.
#[derive(Debug)]
struct Response {
    status: u16,
    content_type: Option<String>,
    body: String,
}

/// Sends `method path` with `body` (and its Content-Type) and reads the answer to the end.
fn http(port: u16, method: &str, path: &str, body: Option<(&str, &str)>) -> io::Result<Response> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(DEADLINE))?;
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    if let Some((content_type, body)) = body {
        request.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        request.push_str("\r\n");
    }
    stream.write_all(request.as_bytes())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .expect("a blank line after the head");
    let mut head = head.lines();
    let status = head
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|status| status.parse().ok())
        .expect("a status line");
    let content_type = head.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_owned())
    });
    Ok(Response {
        status,
        content_type,
        body: body.to_owned(),
    })
}

fn get(port: u16, path: &str) -> Response {
    http(port, "GET", path, None).expect("GET")
}

/// State, parent pid and process group from `/proc/<pid>/stat`; `None` once it is gone.
fn proc_stat(pid: i32) -> Option<(char, i32, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Whether `pid` is a live process (a zombie waiting to be reaped is not).
fn is_alive(pid: i32) -> bool {
    flotilla_testkit::alive(pid as u32)
}

#[test]
fn listen_after_delays_listening_and_the_timestamp_says_when() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let ready_file = TempPath::new("ready");
    let delay = Duration::from_millis(300);
    let before_start = unix_nanos();
    let mut service = Service::start(&[
        "--listen",
        &addr,
        "--listen-after",
        "300",
        "--ready-file",
        ready_file.as_str(),
    ]);
    service.expect_line("STARTED pid=");
    let tried_at = unix_nanos();
    let refused = TcpStream::connect(&addr).is_err();

    let stamp: u128 = service
        .expect_line("LISTENING ")
        .parse()
        .expect("nanoseconds");
    assert!(
        stamp >= before_start + delay.as_nanos(),
        "listening at {stamp}, less than {delay:?} after the start at {before_start}"
    );
    if refused {
        assert!(
            stamp > tried_at,
            "a connection was refused after the LISTENING timestamp"
        );
    }
    TcpStream::connect(&addr).expect("connect once LISTENING is printed");
    assert_eq!(ready_file.read_when_written(), format!("{stamp}\n"));
}

#[test]
fn status_before_ready_switches_to_http_status_after_ready_after() {
    let port = free_port();
    let ready_after = Duration::from_millis(1000);
    let mut service = Service::start(&[
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--status-before-ready",
        "503",
        "--ready-after",
        "1000",
    ]);
    let stamp: u128 = service
        .expect_line("LISTENING ")
        .parse()
        .expect("nanoseconds");
    let ready_at = stamp + ready_after.as_nanos();

    let mut statuses = Vec::new();
    let became_ready = wait_until(DEADLINE, || {
        let sent = unix_nanos();
        let response = get(port, "/health");
        let received = unix_nanos();
        match response.status {
            503 => {
                // Slack: the service notes "listening" a few microseconds after the stamp.
                assert!(
                    sent < ready_at + 50_000_000,
                    "503 sent {}ms after ready",
                    (sent - ready_at) / 1_000_000
                );
                let expected = format!(
                    r#"{{"status":"loading","path":"/health","pid":{}}}"#,
                    service.pid
                );
                assert_eq!(response.body, expected);
            }
            200 => {
                assert!(
                    received >= ready_at,
                    "200 answered {}ms early",
                    (ready_at - received) / 1_000_000
                );
                let expected = format!(
                    r#"{{"status":"ok","path":"/health","pid":{}}}"#,
                    service.pid
                );
                assert_eq!(response.body, expected);
            }
            other => panic!("unexpected status {other}"),
        }
        assert_eq!(response.content_type.as_deref(), Some("application/json"));
        statuses.push(response.status);
        response.status == 200
    });
    assert!(
        became_ready,
        "no 200 within {DEADLINE:?}; statuses {statuses:?}"
    );
    assert_eq!(
        statuses[0], 503,
        "the first request, sent right after LISTENING, is answered 503"
    );
    for path in ["/health", "/v1/models?x=1", "/"] {
        assert_eq!(get(port, path).status, 200, "{path} stays ready");
    }
}

#[test]
fn http_status_body_and_echo() {
    let port = free_port();
    let mut service = Service::start(&[
        "--listen",
        &format!("localhost:{port}"),
        "--http-status",
        "500",
        "--body",
        "custom body",
    ]);
    service.expect_line("LISTENING ");
    let response = get(port, "/anything");
    assert_eq!(
        (response.status, response.body.as_str()),
        (500, "custom body")
    );
    assert_eq!(response.content_type.as_deref(), Some("application/json"));

    let response = http(
        port,
        "POST",
        "/echo",
        Some(("text/plain; charset=utf-8", "hello\r\n\r\nworld")),
    )
    .expect("POST");
    assert_eq!(response.status, 500);
    assert_eq!(
        response.content_type.as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(response.body, "hello\r\n\r\nworld");

    // A connection closed without a request (a TCP probe) does not disturb the service.
    drop(TcpStream::connect(("127.0.0.1", port)).expect("connect"));
    let response = http(
        port,
        "POST",
        "/echo?q",
        Some(("application/json", r#"{"a":1}"#)),
    )
    .expect("POST");
    assert_eq!(response.body, r#"{"a":1}"#);
}

#[test]
fn path_status_answers_one_path_otherwise_and_no_http_says_nothing() {
    let port = free_port();
    let mut service = Service::start(&[
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--path-status",
        "/health=404",
    ]);
    service.expect_line("LISTENING ");
    assert_eq!(get(port, "/health").status, 404);
    assert_eq!(get(port, "/health?x=1").status, 404);
    assert_eq!(get(port, "/v1/models").status, 200);

    let quiet = free_port();
    let mut service = Service::start(&["--listen", &format!("127.0.0.1:{quiet}"), "--no-http"]);
    service.expect_line("LISTENING ");
    let mut stream = TcpStream::connect(("127.0.0.1", quiet)).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let _ = stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut raw = Vec::new();
    // Closed without a byte (a reset counts as closed too).
    let _ = stream.read_to_end(&mut raw);
    assert!(raw.is_empty(), "{}", String::from_utf8_lossy(&raw));
}

#[test]
fn crash_after_exits_with_status_3_or_the_chosen_code() {
    let mut default_code = Service::start(&["--crash-after", "50"]);
    let port = free_port();
    let mut chosen_code = Service::start(&[
        "--crash-after",
        "100",
        "--exit-code",
        "7",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);

    default_code.expect_line("CRASH exit=3");
    assert_eq!(default_code.wait_for_exit().code(), Some(3));
    chosen_code.expect_line("LISTENING ");
    chosen_code.expect_line("CRASH exit=7");
    assert_eq!(
        chosen_code.wait_for_exit().code(),
        Some(7),
        "exits though blocked in accept()"
    );
}

#[test]
fn sigterm_prints_and_exits_zero() {
    let mut service = Service::start(&[]);
    service.expect_line("STARTED pid=");
    service.signal(Signal::SIGTERM);
    assert_eq!(service.expect_line("SIGTERM"), "");
    assert_eq!(service.wait_for_exit().code(), Some(0));
}

#[test]
fn ignore_sigterm_survives_sigterm_and_dies_on_sigkill() {
    let port = free_port();
    let mut service =
        Service::start(&["--ignore-sigterm", "--listen", &format!("127.0.0.1:{port}")]);
    service.expect_line("LISTENING ");
    for _ in 0..2 {
        service.signal(Signal::SIGTERM);
        service.expect_line("IGNORED SIGTERM");
    }
    assert!(service.is_running(), "still running after SIGTERM");
    assert_eq!(
        get(port, "/health").status,
        200,
        "still serving after SIGTERM"
    );

    service.signal(Signal::SIGKILL);
    assert_eq!(
        service.wait_for_exit().signal(),
        Some(Signal::SIGKILL as i32)
    );
}

#[test]
fn spawned_child_is_alive_in_the_parents_process_group_and_dies_with_it() {
    let mut service = Service::start(&["--spawn-child"]);
    let child: i32 = service.expect_line("SPAWNED ").parse().expect("child pid");
    assert_eq!(
        service.expect_line("CHILD ").parse::<i32>().expect("pid"),
        child
    );

    let (_, ppid, pgrp) = proc_stat(child).expect("child in /proc");
    assert!(is_alive(child), "child {child} is running");
    assert_eq!(ppid, service.pid, "child's parent");
    assert_eq!(pgrp, service.pid, "child in the parent's process group");

    // Stopping the group stops both.
    service.signal_group(Signal::SIGTERM);
    assert_eq!(service.wait_for_exit().code(), Some(0));
    assert!(
        wait_until(DEADLINE, || !is_alive(child)),
        "child {child} survived SIGTERM to its group"
    );
}

#[test]
fn child_ignoring_sigterm_outlives_the_group_sigterm_until_sigkill() {
    let mut service = Service::start(&["--spawn-child", "--child-ignores-sigterm"]);
    let child: i32 = service.expect_line("SPAWNED ").parse().expect("child pid");
    service.expect_line("CHILD ");

    service.signal_group(Signal::SIGTERM);
    service.expect_line("IGNORED SIGTERM");
    assert_eq!(
        service.wait_for_exit().code(),
        Some(0),
        "the parent still exits on SIGTERM"
    );
    assert!(is_alive(child), "child {child} ignored SIGTERM");
    assert_eq!(
        proc_stat(child).map(|(_, _, pgrp)| pgrp),
        Some(service.pid),
        "orphan still in the group"
    );

    service.signal_group(Signal::SIGKILL);
    assert!(
        wait_until(DEADLINE, || !is_alive(child)),
        "child {child} survived SIGKILL to its group"
    );
}

#[test]
fn child_ignores_sighup() {
    let mut service = Service::start(&["--spawn-child"]);
    let child: i32 = service.expect_line("SPAWNED ").parse().expect("child pid");
    service.expect_line("CHILD ");
    // Pending signals are delivered lowest number first: had SIGHUP not been ignored, it
    // would kill the child before SIGTERM made it log and exit 0.
    kill(Pid::from_raw(child), Signal::SIGHUP).expect("SIGHUP");
    kill(Pid::from_raw(child), Signal::SIGTERM).expect("SIGTERM");
    assert_eq!(
        service.expect_line(&format!("REAPED {child} ")),
        "exit status: 0"
    );
    assert!(service.is_running(), "the parent is untouched");
}

#[test]
fn log_lines_ticks_pid_file_and_started_line() {
    let pid_file = TempPath::new("pid");
    let args = [
        "--exec-name",
        "model-a",
        "--log-line",
        "hello world",
        "--log-line",
        "second",
        "--log-every",
        "20",
        "--pid-file",
        pid_file.as_str(),
    ];
    let mut service = Service::start(&args);
    let started = service.expect_line("STARTED ");
    assert_eq!(
        started,
        format!("pid={} args={}", service.pid, args.join(" "))
    );
    assert_eq!(service.seen.len(), 1, "STARTED is the first line");
    service.expect_line("hello world");
    service.expect_line("second");
    service.expect_line("TICK 1");
    service.expect_line("TICK 2");
    assert_eq!(pid_file.read_when_written(), format!("{}\n", service.pid));
}

#[test]
fn refuses_non_loopback_listen_addresses_with_status_2() {
    for addr in [
        "0.0.0.0:8080",
        "192.0.2.1:80",
        "[::]:8080",
        "example.com:80",
    ] {
        let mut service = Service::start(&["--listen", addr]);
        assert_eq!(service.wait_for_exit().code(), Some(2), "--listen {addr}");
        let stderr = service.stderr_after_exit();
        assert!(stderr.contains(&format!("--listen {addr}")), "{stderr}");
        assert!(
            service.stdout.recv().is_err(),
            "nothing on stdout for --listen {addr}"
        );
    }
    // Loopback is fine, IPv6 included.
    let port = free_port();
    let mut service = Service::start(&["--listen", &format!("[::1]:{port}")]);
    service.expect_line("LISTENING ");
    assert!(TcpStream::connect(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))).is_ok());
}

#[test]
fn bad_arguments_print_usage_and_exit_2_and_help_lists_every_flag() {
    for args in [
        &["--bogus"][..],
        &["--listen"],
        &["--exit-code", "4"],
        &["--body", "x"],
    ] {
        let mut service = Service::start(args);
        assert_eq!(service.wait_for_exit().code(), Some(2), "{args:?}");
        assert!(
            service
                .stderr_after_exit()
                .contains("Usage: flotilla-testkit"),
            "{args:?}"
        );
    }

    let mut service = Service::start(&["--help"]);
    assert_eq!(service.wait_for_exit().code(), Some(0));
    let help = service.expect_line("Usage: ");
    assert_eq!(help, "flotilla-testkit [FLAGS]");
    let mut help = String::new();
    while let Ok(line) = service.stdout.recv() {
        help.push_str(&line);
        help.push('\n');
    }
    for flag in [
        "--listen ",
        "--listen-after",
        "--ready-file",
        "--http-status",
        "--status-before-ready",
        "--ready-after",
        "--body",
        "--crash-after",
        "--exit-code",
        "--ignore-sigterm",
        "--spawn-child",
        "--child-ignores-sigterm",
        "--child ",
        "--log-line",
        "--log-every",
        "--pid-file",
        "--exec-name",
    ] {
        assert!(help.contains(flag), "--help mentions {flag}");
    }
}
