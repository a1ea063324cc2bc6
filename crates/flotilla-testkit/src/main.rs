//! `flotilla-testkit` is the small service that Flotilla's process-supervisor tests start
//! in place of a real one: its flags say when it listens, what HTTP status it answers,
//! when it crashes, whether it ignores SIGTERM and whether it forks a child, and its
//! stdout says what it did and when (one flushed line per event), so a test can wait on
//! those lines instead of on the clock. It uses std and `nix` only.
//!
//! The text below is its `--help` output (`src/usage.txt`, the one place the flags are
//! described).
#![doc = concat!("```text\n", include_str!("usage.txt"), "```")]

mod http;

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{self, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{self, SigHandler, SigSet, Signal};

/// The `--help` text; also the crate documentation.
const USAGE: &str = include_str!("usage.txt");

/// Exit status for bad arguments.
const EXIT_USAGE: i32 = 2;
/// Exit status for a runtime failure (cannot bind, cannot write a file).
const EXIT_FAILURE: i32 = 1;
/// Exit status for `--crash-after` when `--exit-code` is not given.
const DEFAULT_CRASH_EXIT_CODE: i32 = 3;

/// The command line, parsed and checked.
#[derive(Debug, Default, PartialEq)]
struct Config {
    listen: Option<SocketAddr>,
    listen_after: Option<Duration>,
    ready_file: Option<PathBuf>,
    http_status: Option<u16>,
    status_before_ready: Option<u16>,
    ready_after: Option<Duration>,
    body: Option<String>,
    crash_after: Option<Duration>,
    exit_code: Option<i32>,
    ignore_sigterm: bool,
    spawn_child: bool,
    child_ignores_sigterm: bool,
    child: bool,
    log_lines: Vec<String>,
    log_every: Option<Duration>,
    pid_file: Option<PathBuf>,
    count_requests: Option<PathBuf>,
    path_status: Vec<(String, u16)>,
    no_http: bool,
}

fn main() {
    let start = Instant::now();
    let args = match collect_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(msg) => usage_error(&msg),
    };
    let config = match parse_args(&args) {
        Ok(Some(config)) => config,
        Ok(None) => {
            print!("{USAGE}");
            process::exit(0);
        }
        Err(msg) => usage_error(&msg),
    };

    // Before the first line: once a test has seen STARTED, SIGTERM is handled as asked.
    if let Err(err) = install_signal_handling(&config) {
        fail(&format!("cannot set up signal handling: {err}"));
    }
    let pid = process::id();
    say(&format!("STARTED pid={pid} args={}", args.join(" ")));
    if let Some(path) = &config.pid_file {
        write_atomically(path, &format!("{pid}\n"));
    }
    if config.child {
        say(&format!("CHILD {pid}"));
    }
    if config.spawn_child {
        spawn_child(config.child_ignores_sigterm);
    }
    if let Some(after) = config.crash_after {
        let code = config.exit_code.unwrap_or(DEFAULT_CRASH_EXIT_CODE);
        thread::spawn(move || {
            sleep_until(start + after);
            say(&format!("CRASH exit={code}"));
            process::exit(code);
        });
    }
    if let Some(every) = config.log_every {
        thread::spawn(move || {
            // Deadlines counted from the start, so the ticks do not drift.
            let mut next = start;
            for n in 1u64.. {
                next += every;
                sleep_until(next);
                say(&format!("TICK {n}"));
            }
        });
    }

    match config.listen {
        Some(addr) => listen_and_serve(addr, &config, start),
        None => {
            for line in &config.log_lines {
                say(line);
            }
            loop {
                thread::park();
            }
        }
    }
}

/// Binds the listener (after `--listen-after`), announces it, and serves HTTP forever.
fn listen_and_serve(addr: SocketAddr, config: &Config, start: Instant) -> ! {
    sleep_until(start + config.listen_after.unwrap_or_default());
    // `TcpListener::bind` is socket() + bind() + listen(); connections queue from here on.
    let listener = TcpListener::bind(addr)
        .unwrap_or_else(|err| fail(&format!("cannot listen on {addr}: {err}")));
    let timestamp = unix_nanos();
    // Taken after the timestamp, so "ready" never comes before timestamp + ready-after.
    let listening = Instant::now();
    say(&format!("LISTENING {timestamp}"));
    if let Some(path) = &config.ready_file {
        write_atomically(path, &format!("{timestamp}\n"));
    }
    for line in &config.log_lines {
        say(line);
    }

    let settings = Arc::new(http::Settings {
        status: config.http_status.unwrap_or(200),
        before_ready: config
            .status_before_ready
            .zip(config.ready_after)
            .map(|(status, after)| (status, listening + after)),
        body: config.body.clone(),
        pid: process::id(),
        path_status: config.path_status.clone(),
    });
    let counter = config.count_requests.clone().map(|path| {
        write_atomically(&path, "0\n");
        Arc::new(RequestCounter {
            path,
            count: Mutex::new(0),
        })
    });
    for stream in listener.incoming() {
        match stream {
            // Not HTTP: closed at once, not a byte said.
            Ok(stream) if config.no_http => drop(stream),
            Ok(stream) => {
                let settings = Arc::clone(&settings);
                let counter = counter.clone();
                thread::spawn(move || {
                    if let Some(counter) = counter {
                        counter.count_if_request(&stream);
                    }
                    http::serve_connection(stream, &settings)
                });
            }
            // For instance ECONNABORTED or EMFILE: report it and keep accepting.
            Err(err) => eprintln!("flotilla-testkit: accept failed: {err}"),
        }
    }
    unreachable!("TcpListener::incoming never ends")
}

/// `--count-requests`: how many connections sent a request, written to a file.
struct RequestCounter {
    path: PathBuf,
    count: Mutex<u64>,
}

impl RequestCounter {
    /// Counts the connection once it has sent its first byte (a connection closed
    /// without sending anything, such as a TCP probe, is no request), and rewrites
    /// the file before the request is answered.
    fn count_if_request(&self, stream: &std::net::TcpStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut first = [0u8; 1];
        if matches!(stream.peek(&mut first), Ok(n) if n > 0) {
            let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
            *count += 1;
            write_atomically(&self.path, &format!("{count}\n"));
        }
    }
}

/// Blocks SIGTERM in every thread and answers it from one thread with `sigwait`, so the
/// answer (a log line, maybe an exit) runs as ordinary code, not in a signal handler.
/// Must run before any other thread starts, as threads inherit the signal mask.
fn install_signal_handling(config: &Config) -> nix::Result<()> {
    if config.child {
        // SAFETY: SIG_IGN installs no handler code, so nothing unsafe can run on SIGHUP.
        unsafe { signal::signal(Signal::SIGHUP, SigHandler::SigIgn) }?;
    }
    let mut sigterm = SigSet::empty();
    sigterm.add(Signal::SIGTERM);
    sigterm.thread_block()?;
    let ignore = config.ignore_sigterm;
    thread::spawn(move || loop {
        match sigterm.wait() {
            Ok(_) if ignore => say("IGNORED SIGTERM"),
            Ok(_) => {
                say("SIGTERM");
                process::exit(0);
            }
            Err(err) => fail(&format!("sigwait failed: {err}")),
        }
    });
    Ok(())
}

/// Starts a copy of this binary as `--child` in this process group (the default for a
/// spawned process), logs `SPAWNED <pid>`, and reaps it from a thread when it exits.
/// std resets the signal mask in the child, so the blocked SIGTERM is not inherited.
fn spawn_child(ignores_sigterm: bool) {
    let exe = std::env::current_exe()
        .unwrap_or_else(|err| fail(&format!("cannot find own executable: {err}")));
    let mut command = Command::new(&exe);
    command.arg("--child").stdin(Stdio::null());
    if ignores_sigterm {
        command.arg("--ignore-sigterm");
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|err| fail(&format!("cannot spawn {}: {err}", exe.display())));
    let child_pid = child.id();
    say(&format!("SPAWNED {child_pid}"));
    thread::spawn(move || match child.wait() {
        Ok(status) => say(&format!("REAPED {child_pid} {status}")),
        Err(err) => eprintln!("flotilla-testkit: cannot wait for child {child_pid}: {err}"),
    });
}

/// Parses the arguments after the program name. `Ok(None)` means `--help` was asked for.
fn parse_args(args: &[String]) -> Result<Option<Config>, String> {
    let mut config = Config::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value)),
            _ => (arg.as_str(), None),
        };
        let mut value = || match inline {
            Some(value) => Ok(value.to_owned()),
            None => rest
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value")),
        };
        let switch = || match inline {
            Some(_) => Err(format!("{flag} takes no value")),
            None => Ok(true),
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "--listen" => config.listen = Some(parse_listen(&value()?)?),
            "--listen-after" => config.listen_after = Some(parse_ms(flag, &value()?)?),
            "--ready-file" => config.ready_file = Some(PathBuf::from(value()?)),
            "--http-status" => config.http_status = Some(parse_status(flag, &value()?)?),
            "--status-before-ready" => {
                config.status_before_ready = Some(parse_status(flag, &value()?)?);
            }
            "--ready-after" => config.ready_after = Some(parse_ms(flag, &value()?)?),
            "--body" => config.body = Some(value()?),
            "--crash-after" => config.crash_after = Some(parse_ms(flag, &value()?)?),
            "--exit-code" => {
                let text = value()?;
                let code = text
                    .parse::<u8>()
                    .map_err(|_| format!("{flag} {text}: expected an exit status from 0 to 255"))?;
                config.exit_code = Some(i32::from(code));
            }
            "--ignore-sigterm" => config.ignore_sigterm = switch()?,
            "--spawn-child" => config.spawn_child = switch()?,
            "--child-ignores-sigterm" => config.child_ignores_sigterm = switch()?,
            "--child" => config.child = switch()?,
            "--log-line" => config.log_lines.push(value()?),
            "--log-every" => {
                let every = parse_ms(flag, &value()?)?;
                if every.is_zero() {
                    return Err(format!("{flag} must be at least 1 ms"));
                }
                config.log_every = Some(every);
            }
            "--pid-file" => config.pid_file = Some(PathBuf::from(value()?)),
            "--count-requests" => config.count_requests = Some(PathBuf::from(value()?)),
            "--path-status" => {
                let text = value()?;
                let (path, status) = text
                    .split_once('=')
                    .filter(|(p, _)| p.starts_with('/'))
                    .ok_or_else(|| {
                        format!("{flag} {text}: expected PATH=STATUS, e.g. /health=404")
                    })?;
                config
                    .path_status
                    .push((path.to_owned(), parse_status(flag, status)?));
            }
            "--no-http" => config.no_http = switch()?,
            "--exec-name" => {
                value()?;
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    check_combinations(&config)?;
    Ok(Some(config))
}

/// Refuses flags that would silently do nothing in this combination.
fn check_combinations(config: &Config) -> Result<(), String> {
    if config.listen.is_none() {
        let needs_listen = [
            ("--listen-after", config.listen_after.is_some()),
            ("--ready-file", config.ready_file.is_some()),
            ("--http-status", config.http_status.is_some()),
            (
                "--status-before-ready",
                config.status_before_ready.is_some(),
            ),
            ("--ready-after", config.ready_after.is_some()),
            ("--body", config.body.is_some()),
            ("--count-requests", config.count_requests.is_some()),
            ("--path-status", !config.path_status.is_empty()),
            ("--no-http", config.no_http),
        ];
        if let Some((flag, _)) = needs_listen.iter().find(|(_, given)| *given) {
            return Err(format!("{flag} needs --listen"));
        }
    }
    if config.no_http {
        let http_only = [
            ("--http-status", config.http_status.is_some()),
            (
                "--status-before-ready",
                config.status_before_ready.is_some(),
            ),
            ("--body", config.body.is_some()),
            ("--count-requests", config.count_requests.is_some()),
            ("--path-status", !config.path_status.is_empty()),
        ];
        if let Some((flag, _)) = http_only.iter().find(|(_, given)| *given) {
            return Err(format!(
                "{flag} says how to answer HTTP: not with --no-http"
            ));
        }
    }
    if config.status_before_ready.is_some() != config.ready_after.is_some() {
        return Err("--status-before-ready and --ready-after go together".to_owned());
    }
    if config.exit_code.is_some() && config.crash_after.is_none() {
        return Err("--exit-code needs --crash-after".to_owned());
    }
    if config.child_ignores_sigterm && !config.spawn_child {
        return Err("--child-ignores-sigterm needs --spawn-child".to_owned());
    }
    Ok(())
}

/// Parses `--listen`: an IP literal or `localhost`, with a port; loopback only.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let addr = match text.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => match text.rsplit_once(':') {
            Some(("localhost", port)) => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("--listen {text}: bad port {port:?}"))?;
                SocketAddr::from((Ipv4Addr::LOCALHOST, port))
            }
            _ => {
                return Err(format!(
                    "--listen {text}: expected HOST:PORT with a loopback IP literal or localhost"
                ))
            }
        },
    };
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--listen {text}: refusing a non-loopback address (allowed: 127.0.0.0/8, [::1], localhost)"
        ));
    }
    Ok(addr)
}

fn parse_ms(flag: &str, text: &str) -> Result<Duration, String> {
    text.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| format!("{flag} {text}: expected whole milliseconds"))
}

fn parse_status(flag: &str, text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(status) if (100..=599).contains(&status) => Ok(status),
        _ => Err(format!(
            "{flag} {text}: expected an HTTP status from 100 to 599"
        )),
    }
}

/// Turns the OS arguments into strings, refusing any that is not UTF-8.
fn collect_args(args: impl Iterator<Item = OsString>) -> Result<Vec<String>, String> {
    args.map(|arg| {
        arg.into_string()
            .map_err(|arg| format!("argument {arg:?} is not UTF-8"))
    })
    .collect()
}

/// Writes one line to stdout and flushes it. Write errors (say, the reader went away)
/// are ignored: a test's stand-in service must not change behaviour over its log.
fn say(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Writes `contents` to a temporary file beside `path`, then renames it onto `path`, so
/// a reader sees either no file or the whole contents. Exits with status 1 on failure.
fn write_atomically(path: &Path, contents: &str) {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".tmp.{}", process::id()));
    let temporary = PathBuf::from(temporary);
    if let Err(err) = fs::write(&temporary, contents).and_then(|()| fs::rename(&temporary, path)) {
        let _ = fs::remove_file(&temporary);
        fail(&format!("cannot write {}: {err}", path.display()));
    }
}

fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        thread::sleep(deadline - now);
    }
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos())
}

fn usage_error(msg: &str) -> ! {
    eprintln!("flotilla-testkit: {msg}\n\n{USAGE}");
    process::exit(EXIT_USAGE);
}

fn fail(msg: &str) -> ! {
    eprintln!("flotilla-testkit: {msg}");
    process::exit(EXIT_FAILURE);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Config>, String> {
        parse_args(&args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_values_after_a_space_or_an_equals_sign() {
        let config = parse(&[
            "--listen",
            "127.0.0.1:8080",
            "--listen-after=250",
            "--log-line",
            "a",
            "--log-line=b",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(config.listen, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(config.listen_after, Some(Duration::from_millis(250)));
        assert_eq!(config.log_lines, ["a", "b"]);
    }

    #[test]
    fn help_wins() {
        assert_eq!(parse(&["--crash-after", "5", "--help"]), Ok(None));
    }

    #[test]
    fn loopback_only() {
        assert!(parse_listen("127.0.0.1:1").is_ok());
        assert!(parse_listen("127.1.2.3:1").is_ok());
        assert!(parse_listen("[::1]:1").is_ok());
        assert_eq!(
            parse_listen("localhost:9").unwrap(),
            SocketAddr::from((Ipv4Addr::LOCALHOST, 9))
        );
        for refused in [
            "0.0.0.0:1",
            "[::]:1",
            "10.0.0.1:1",
            "example.com:80",
            "localhost",
            "127.0.0.1",
        ] {
            assert!(
                parse_listen(refused).is_err(),
                "{refused} should be refused"
            );
        }
    }

    #[test]
    fn refuses_bad_arguments() {
        for args in [
            &["--bogus"][..],
            &["--listen"],
            &["--ignore-sigterm=yes"],
            &["--crash-after", "soon"],
            &["--exit-code", "256", "--crash-after", "1"],
            &["--exit-code", "4"],
            &["--http-status", "200"],
            &["--listen", "127.0.0.1:1", "--http-status", "99"],
            &["--listen", "127.0.0.1:1", "--ready-after", "5"],
            &["--child-ignores-sigterm"],
            &["--log-every", "0"],
            &["--path-status", "/health=404"],
            &["--listen", "127.0.0.1:1", "--path-status", "health=404"],
            &["--listen", "127.0.0.1:1", "--path-status", "/health"],
            &["--no-http"],
            &[
                "--listen",
                "127.0.0.1:1",
                "--no-http",
                "--http-status",
                "200",
            ],
            &[
                "--listen",
                "127.0.0.1:1",
                "--no-http",
                "--path-status",
                "/x=200",
            ],
        ] {
            assert!(parse(args).is_err(), "{args:?} should be refused");
        }
    }

    #[test]
    fn path_statuses_and_no_http() {
        let config = parse(&[
            "--listen",
            "127.0.0.1:1",
            "--path-status",
            "/health=404",
            "--path-status=/v1/models=200",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            config.path_status,
            [("/health".to_owned(), 404), ("/v1/models".to_owned(), 200)]
        );
        let config = parse(&["--listen", "127.0.0.1:1", "--no-http"])
            .unwrap()
            .unwrap();
        assert!(config.no_http);
    }
}
