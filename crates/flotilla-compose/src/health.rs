//! A service's `healthcheck`, as `container.healthcheck` (Docker's `HealthConfig`,
//! which the engine runs inside the container) and, where the test is a plain HTTP
//! GET of the container's own port, as the address of an `http` readiness probe that
//! Flotilla can run from the host on the published port instead.
//!
//! A test counts as such a GET when it is one `curl` (with `-f`/`--fail`, so that an
//! error status fails it) or `wget` of `http://localhost|127.0.0.1|0.0.0.0|[::1]:PORT/PATH`,
//! with only flags that change nothing of the request (`-s`, `-S`, `-L`, `-o /dev/null`,
//! `--spider`, `-q`, `-O-`, timeouts and tries), optionally followed by `|| exit 1`.

use crate::ctx::Ctx;
use crate::notes::Note;
use crate::yaml::{Node, Value};
use flotilla_model::inventory::ContainerHealthcheck;
use flotilla_model::values::HumanDuration;

/// What a healthcheck became.
#[derive(Debug, Clone, Default)]
pub struct Health {
    /// The engine's health check (test and timings), when one was declared or disabled.
    pub check: Option<ContainerHealthcheck>,
    /// The HTTP GET the test makes, when it is one.
    pub http: Option<HttpGet>,
}

/// An HTTP GET of the container's own port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGet {
    /// The port inside the container.
    pub port: u16,
    /// Path and query, from `/`.
    pub path: String,
    /// `https` rather than `http`.
    pub https: bool,
}

/// Reads `healthcheck` (a mapping).
pub fn read(ctx: &mut Ctx, node: &Node, notes: &mut Vec<Note>) -> Health {
    let Some(entries) = node.as_map() else {
        ctx.error(
            node,
            format!("`healthcheck` must be a mapping, not {}", node.kind()),
        );
        return Health::default();
    };
    let mut check = ContainerHealthcheck::default();
    let mut disabled = false;
    let mut test_node = None;
    for (k, v) in entries {
        let key = format!("healthcheck.{}", k.key_text());
        let dur =
            |ctx: &mut Ctx, notes: &mut Vec<Note>| ctx.duration(v, &key, notes).map(HumanDuration);
        match k.key_text() {
            "test" => {
                check.test = test(ctx, v, &key, notes);
                test_node = Some(v);
            }
            "interval" => check.interval = dur(ctx, notes),
            "timeout" => check.timeout = dur(ctx, notes),
            "start_period" => check.start_period = dur(ctx, notes),
            "retries" => match v.as_int().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => check.retries = Some(n),
                None => ctx.error(v, format!("`{key}` must be a number, not {}", v.kind())),
            },
            "disable" => disabled = v.as_bool().unwrap_or(false),
            "start_interval" => notes.push(Note::new(
                k.at.line,
                key,
                "not carried over: the engine's health check has no start interval here (interval applies throughout)",
            )),
            other => notes.push(Note::new(
                k.at.line,
                key,
                format!("not carried over: `{other}` is not a healthcheck key"),
            )),
        }
    }
    if disabled || check.test.first().is_some_and(|t| t == "NONE") {
        return Health {
            check: Some(ContainerHealthcheck {
                test: vec!["NONE".into()],
                ..ContainerHealthcheck::default()
            }),
            http: None,
        };
    }
    if check.test.is_empty() {
        if test_node.is_none() {
            notes.push(Note::new(
                node.at.line,
                "healthcheck",
                "not carried over: timings without a `test` (they change the image's own HEALTHCHECK, which the container table cannot do without its test)",
            ));
        }
        return Health::default();
    }
    let http = http_get(&check.test);
    Health {
        check: Some(check),
        http,
    }
}

/// `test`: a string (run by the container's shell, like `CMD-SHELL`) or a list
/// starting with `CMD`, `CMD-SHELL` or `NONE`.
fn test(ctx: &mut Ctx, node: &Node, key: &str, notes: &mut Vec<Note>) -> Vec<String> {
    match &node.value {
        Value::Seq(_) => {
            let argv = ctx.strings(node, key, notes);
            match argv.first().map(String::as_str) {
                Some("CMD" | "CMD-SHELL" | "NONE") => argv,
                _ => {
                    ctx.error(
                        node,
                        format!(
                            "`{key}`: a list test starts with \"CMD\", \"CMD-SHELL\" or \"NONE\""
                        ),
                    );
                    Vec::new()
                }
            }
        }
        _ => match ctx.string(node, key, notes) {
            Some(script) => vec!["CMD-SHELL".into(), script],
            None => Vec::new(),
        },
    }
}

/// The HTTP GET a test makes, if it is nothing else.
pub fn http_get(test: &[String]) -> Option<HttpGet> {
    let argv: Vec<String> = match test.first().map(String::as_str)? {
        "CMD" => test[1..].to_vec(),
        "CMD-SHELL" if test.len() == 2 => {
            let mut script = test[1].trim();
            for tail in ["|| exit 1", "||exit 1", "|| exit", "|| false"] {
                if let Some(s) = script.strip_suffix(tail) {
                    script = s.trim_end();
                }
            }
            if script.contains(['|', '&', ';', '<', '>', '(', ')', '$', '`', '\n']) {
                return None;
            }
            shlex::split(script)?
        }
        _ => return None,
    };
    let program = argv.first()?.rsplit('/').next()?;
    let url = match program {
        "curl" => curl_url(&argv[1..])?,
        "wget" => wget_url(&argv[1..])?,
        _ => return None,
    };
    parse_local_url(&url)
}

fn curl_url(args: &[String]) -> Option<String> {
    let mut url = None;
    let mut fails = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-f" | "--fail" | "--fail-with-body" => fails = true,
            "-s" | "--silent" | "-S" | "--show-error" | "-L" | "--location" | "-4" | "-6" => {}
            "-o" | "--output" => {
                if it.next()? != "/dev/null" {
                    return None;
                }
            }
            "-m" | "--max-time" | "--connect-timeout" | "--retry" => {
                it.next()?;
            }
            f if f.starts_with("--max-time=") || f.starts_with("--connect-timeout=") => {}
            f if f.starts_with('-') && !f.starts_with("--") => {
                // Combined short flags: `-fsS`, `-sf`, `-fsSL`.
                if !f[1..].chars().all(|c| "fsSL".contains(c)) {
                    return None;
                }
                fails |= f.contains('f');
            }
            f if f.starts_with('-') => return None,
            u => {
                if url.replace(u.to_string()).is_some() {
                    return None;
                }
            }
        }
    }
    url.filter(|_| fails)
}

fn wget_url(args: &[String]) -> Option<String> {
    let mut url = None;
    let mut it = args.iter();
    let ok_output = |o: &str| o == "-" || o == "/dev/null";
    while let Some(a) = it.next() {
        match a.as_str() {
            "-q" | "--quiet" | "--spider" | "-nv" | "--no-verbose" | "-S" | "--server-response" => {
            }
            "-O" | "--output-document" => {
                if !ok_output(it.next()?) {
                    return None;
                }
            }
            "-t" | "--tries" | "-T" | "--timeout" => {
                it.next()?;
            }
            f if f.starts_with("--tries=") || f.starts_with("--timeout=") => {}
            f if f.starts_with("--output-document=") => {
                if !ok_output(&f["--output-document=".len()..]) {
                    return None;
                }
            }
            f if f.starts_with('-') && !f.starts_with("--") => {
                // `-qO-`, `-qO /dev/null`, `-q`: letters, and `O` takes the rest or
                // the next argument.
                let flags = &f[1..];
                match flags.split_once('O') {
                    Some((before, after)) => {
                        if !before.chars().all(|c| c == 'q' || c == 'S') {
                            return None;
                        }
                        let out = if after.is_empty() {
                            it.next()?.as_str()
                        } else {
                            after
                        };
                        if !ok_output(out) {
                            return None;
                        }
                    }
                    None => {
                        if !flags.chars().all(|c| c == 'q' || c == 'S') {
                            return None;
                        }
                    }
                }
            }
            f if f.starts_with('-') => return None,
            u => {
                if url.replace(u.to_string()).is_some() {
                    return None;
                }
            }
        }
    }
    url
}

/// `http(s)://HOST[:PORT][/PATH]` with HOST the container itself.
fn parse_local_url(url: &str) -> Option<HttpGet> {
    let (https, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return None;
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(after) = authority.strip_prefix('[') {
        let (h, p) = after.split_once(']')?;
        (h, p.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if !matches!(host, "localhost" | "127.0.0.1" | "0.0.0.0" | "::1") {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None if https => 443,
        None => 80,
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Some(HttpGet { port, path, https })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn plain_gets_are_recognised() {
        let get = |port, path: &str| {
            Some(HttpGet {
                port,
                path: path.into(),
                https: false,
            })
        };
        assert_eq!(
            http_get(&t(&["CMD", "curl", "-f", "http://localhost:8080/health"])),
            get(8080, "/health")
        );
        assert_eq!(
            http_get(&t(&[
                "CMD-SHELL",
                "curl -fsS http://127.0.0.1:4000/health/liveliness || exit 1"
            ])),
            get(4000, "/health/liveliness")
        );
        assert_eq!(
            http_get(&t(&[
                "CMD-SHELL",
                "wget -qO- http://localhost:11434/api/version"
            ])),
            get(11434, "/api/version")
        );
        assert_eq!(
            http_get(&t(&["CMD", "wget", "--spider", "-q", "http://localhost/"])),
            get(80, "/")
        );
    }

    #[test]
    fn anything_more_is_left_to_the_engine() {
        for test in [
            t(&["CMD", "curl", "http://localhost:8080/health"]),
            t(&[
                "CMD",
                "curl",
                "-f",
                "-H",
                "Authorization: x",
                "http://localhost:8080/",
            ]),
            t(&["CMD", "curl", "-f", "http://db:5432/"]),
            t(&["CMD-SHELL", "curl -f http://localhost:8080/ && echo ok"]),
            t(&["CMD-SHELL", "pg_isready -U postgres"]),
            t(&["CMD", "curl", "-f", "-X", "POST", "http://localhost:8080/"]),
            t(&["NONE"]),
        ] {
            assert_eq!(http_get(&test), None, "{test:?}");
        }
    }
}
