//! Type errors in a component entry explained with the expected form, shown as an
//! example built from what was written: `depends_on = "llm"` → `depends_on = ["llm"]`,
//! `command = "llama-server --port 8080"` → the argv list, split as a shell would,
//! `env = ["A=1"]` (docker compose's list form) → the table, `endpoints` or compose's
//! `ports` as a list → named endpoints. Examples are written in the inventory's own
//! syntax (TOML or JSON).

use super::key_path_at;
use crate::diag::Code;
use crate::node::{DecodeError, Node, Value};

/// Rewrites a decoding error of a component entry (`current` is the entry's table as
/// it was being decoded) into one that says what form the key takes, with an example
/// built from what was written. Errors it has nothing to add to are returned as they are.
pub(super) fn component_error(err: DecodeError, current: &Node, json: bool) -> DecodeError {
    let Some(span) = err.span else { return err };
    let Some(path) = key_path_at(current, span) else {
        return err;
    };
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    // A key of the component, or of one of its profiles.
    let (key, rest) = match path.as_slice() {
        ["profiles", _, key, rest @ ..] => (*key, rest),
        [key, rest @ ..] => (*key, rest),
        [] => return err,
    };
    let s = Syntax { json };
    let hint = match (err.code, rest) {
        (Code::UnknownKey, []) if path.len() == 1 => {
            let value = current.get(key);
            compose_key(key, value, s)
        }
        (Code::InvalidValue, []) => {
            let Some(value) = node_at(current, &path) else {
                return err;
            };
            match key {
                "depends_on" if path.len() == 1 => depends_on(value, s),
                "command" => command(value, s),
                "env" => env(value, s),
                "endpoints" => endpoints("endpoints", value, s),
                _ => shaped(&path, value, s),
            }
        }
        (Code::InvalidValue, [name]) if key == "endpoints" => {
            let value = node_at(current, &path).filter(|v| !matches!(v.value, Value::Array(_)));
            value.and_then(|v| endpoint(name, v, s))
        }
        (Code::InvalidValue, _) => node_at(current, &path).and_then(|v| shaped(&path, v, s)),
        _ => None,
    };
    with_hint(err, hint)
}

/// [`component_error`] for a host entry (`port`, `labels`, `address`, `user`…).
pub(super) fn host_error(err: DecodeError, current: &Node, json: bool) -> DecodeError {
    let Some(span) = err.span else { return err };
    if err.code != Code::InvalidValue {
        return err;
    }
    let Some(path) = key_path_at(current, span) else {
        return err;
    };
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    let hint = node_at(current, &path).and_then(|v| shaped(&path, v, Syntax { json }));
    with_hint(err, hint)
}

/// `err` said with `hint`'s message (when it has a better one) and help.
fn with_hint(err: DecodeError, hint: Option<Hint>) -> DecodeError {
    match hint {
        Some(Hint { message, help }) => DecodeError {
            code: err.code,
            message: message.unwrap_or(err.message),
            span: err.span,
            help: Some(help),
            missing: err.missing,
        },
        None => err,
    }
}

/// A better message (when the original should be replaced) and the help.
struct Hint {
    message: Option<String>,
    help: String,
}

fn node_at<'n, 'a>(node: &'n Node<'a>, path: &[&str]) -> Option<&'n Node<'a>> {
    let mut n = node;
    for step in path {
        n = match &n.value {
            Value::Table(_) => n.get(step)?,
            Value::Array(items) => items.get(step.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(n)
}

/// How examples are written: TOML (`key = value`) or JSON (`"key": value`).
#[derive(Clone, Copy)]
struct Syntax {
    json: bool,
}

impl Syntax {
    fn string(self, s: &str) -> String {
        // JSON string escapes are TOML basic-string escapes too.
        serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
    }

    fn key(self, k: &str) -> String {
        let bare = !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if bare && !self.json {
            k.to_string()
        } else {
            self.string(k)
        }
    }

    fn assign(self, k: &str, value: &str) -> String {
        if self.json {
            format!("{}: {value}", self.string(k))
        } else {
            format!("{} = {value}", self.key(k))
        }
    }

    fn list<S: AsRef<str>>(self, items: &[S]) -> String {
        let items: Vec<String> = items.iter().map(|i| self.string(i.as_ref())).collect();
        format!("[{}]", items.join(", "))
    }

    fn table(self, pairs: &[(String, String)]) -> String {
        if pairs.is_empty() {
            return "{}".into();
        }
        let items: Vec<String> = pairs
            .iter()
            .map(|(k, v)| self.assign(k, &self.string(v)))
            .collect();
        format!("{{ {} }}", items.join(", "))
    }
}

/// What Flotilla always does that compose's `depends_on` conditions ask for.
const WAITS: &str = "Flotilla always starts a dependency first and waits until it is ready \
(its readiness probe passes) before it starts what depends on it, so there is no \
`condition` to set: docker compose's `condition: service_healthy` is what Flotilla always does";

fn depends_on(value: &Node, s: Syntax) -> Option<Hint> {
    let (found, names): (&str, Vec<String>) = match &value.value {
        Value::String(text) => (
            "a string",
            text.split(|c: char| c == ',' || c.is_whitespace())
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect(),
        ),
        Value::Table(entries) => (
            "a table (docker compose's long form)",
            entries.iter().map(|e| e.key.to_string()).collect(),
        ),
        other => (kind_with_article(other.kind()), Vec::new()),
    };
    let names = if names.is_empty() {
        vec!["NAME".to_string()]
    } else {
        names
    };
    Some(Hint {
        message: Some(format!(
            "`depends_on` is a list of component names, not {found}"
        )),
        help: format!(
            "write `{}`. {WAITS}",
            s.assign("depends_on", &s.list(&names))
        ),
    })
}

fn command(value: &Node, s: Syntax) -> Option<Hint> {
    let Value::String(line) = &value.value else {
        return Some(Hint {
            message: Some(format!(
                "`command` is a list of arguments (argv), not {}",
                kind_with_article(value.value.kind())
            )),
            help: format!(
                "write `{}`",
                s.assign("command", &s.list(&["program", "--flag", "value"]))
            ),
        });
    };
    let split = shell_split(line);
    let mut help = format!(
        "write `{}`: that is the string split as a shell would split it; check the split, \
         since Flotilla starts the program directly, with no shell",
        s.assign("command", &s.list(&split.words))
    );
    if !split.balanced {
        help.push_str(" (its quotes do not pair up, so it was split at spaces)");
    }
    if let Some(c) = split.shell_syntax {
        help.push_str(&format!(
            ". It uses shell syntax (`{c}`), which only a shell understands: to run it \
             through one, write `{}`",
            s.assign("command", &s.list(&["sh", "-c", line.as_ref()]))
        ));
    }
    Some(Hint {
        message: Some(
            "`command` is a list of arguments (argv), not a string (a shell command line)".into(),
        ),
        help,
    })
}

fn env(value: &Node, s: Syntax) -> Option<Hint> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut bare: Vec<String> = Vec::new();
    let found = match &value.value {
        Value::Array(items) => {
            for item in items {
                if let Value::String(text) = &item.value {
                    match text.split_once('=') {
                        Some((k, v)) if !k.is_empty() => pairs.push((k.to_string(), v.to_string())),
                        _ if !text.is_empty() => bare.push(text.to_string()),
                        _ => {}
                    }
                }
            }
            "a list (docker compose's list form)"
        }
        other => kind_with_article(other.kind()),
    };
    if pairs.is_empty() && bare.is_empty() {
        pairs.push(("NAME".into(), "value".into()));
    }
    let mut help = format!("write `{}`", s.assign("env", &s.table(&pairs)));
    if !bare.is_empty() {
        let names = bare
            .iter()
            .map(|b| format!("`{b}`"))
            .collect::<Vec<_>>()
            .join(", ");
        help.push_str(&format!(
            "; {names} {} no value: to take {} from the environment Flotilla runs in (as \
             docker compose does), write `{}`; for a secret, `{}`",
            if bare.len() == 1 { "has" } else { "have" },
            if bare.len() == 1 { "it" } else { "them" },
            s.assign("inherit_env", &s.list(&bare)),
            s.assign(&bare[0], &secret(&bare[0], s)),
        ));
    }
    Some(Hint {
        message: Some(format!("`env` is a table of NAME = value, not {found}")),
        help,
    })
}

fn secret(name: &str, s: Syntax) -> String {
    format!("{{ {} }}", s.assign("secret", &s.string(name)))
}

/// `endpoints` (or compose's `ports`, as `key`) written as something other than a table.
fn endpoints(key: &str, value: &Node, s: Syntax) -> Option<Hint> {
    let written: Vec<&Node> = match &value.value {
        Value::Array(items) => items.iter().collect(),
        Value::Table(_) => return None,
        _ => vec![value],
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for n in written {
        let Some((scheme, url)) = endpoint_url(n) else {
            continue;
        };
        let mut name = scheme.clone();
        let mut i = 2;
        while pairs.iter().any(|(k, _)| *k == name) {
            name = format!("{scheme}-{i}");
            i += 1;
        }
        pairs.push((name, url));
    }
    if pairs.is_empty() {
        pairs.push(("http".into(), "http://127.0.0.1:8080".into()));
    }
    let example = s.assign("endpoints", &s.table(&pairs));
    let message = (key == "endpoints").then(|| {
        format!(
            "`endpoints` is a table of named addresses, not {}",
            kind_with_article(value.value.kind())
        )
    });
    let help = if key == "endpoints" {
        format!(
            "write `{example}`: connections, probes and `${{endpoints.NAME}}` refer to an \
             endpoint by its name"
        )
    } else {
        format!(
            "Flotilla has no `{key}`: a component declares the addresses it listens on as \
             named endpoints, e.g. `{example}` (connections, probes and \
             `${{endpoints.NAME}}` refer to them by name)"
        )
    };
    Some(Hint { message, help })
}

/// One endpoint's value written as something other than a string (`http = 8080`).
fn endpoint(name: &str, value: &Node, s: Syntax) -> Option<Hint> {
    let url = endpoint_url(value).map_or_else(|| "http://127.0.0.1:8080".into(), |(_, u)| u);
    Some(Hint {
        message: Some(format!(
            "endpoint `{name}` is an address (a URL or host:port string), not {}",
            kind_with_article(value.value.kind())
        )),
        help: format!("write `{}`", s.assign(name, &s.string(&url))),
    })
}

/// The URL an endpoint-like value stands for, and a name for it (its scheme): a URL as
/// it is; a port, `HOST_PORT:CONTAINER_PORT` or `IP:HOST_PORT[:CONTAINER_PORT]` (docker
/// compose's `ports`) as `http://IP:HOST_PORT`.
fn endpoint_url(n: &Node) -> Option<(String, String)> {
    let text = match &n.value {
        Value::Integer(p) => p.to_string(),
        Value::String(t) => t.to_string(),
        _ => return None,
    };
    let text = text.trim();
    if let Some((scheme, _)) = text.split_once("://") {
        return Some((scheme.to_string(), text.to_string()));
    }
    let text = text.split('/').next().unwrap_or(text); // compose's "8080:80/tcp"
    let parts: Vec<&str> = text.split(':').collect();
    let digits = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit());
    let (ip, port) = match parts.as_slice() {
        [p] if digits(p) => ("127.0.0.1", *p),
        [host, _] if digits(host) => ("127.0.0.1", *host),
        [ip, p] if digits(p) => (*ip, *p),
        [ip, p, _] if digits(p) => (*ip, *p),
        _ => return None,
    };
    Some(("http".into(), format!("http://{ip}:{port}")))
}

/// Keys whose value is a duration (humantime: `"500ms"`, `"5s"`, `"2m"`).
const DURATIONS: &[&str] = &[
    "grace_period",
    "period",
    "timeout",
    "initial_delay",
    "backoff",
    "max_backoff",
    "stays_open",
];

/// The probe kinds a readiness or liveness probe takes, each with its form.
const CHECKS: &[(&str, &str, &str)] = &[
    (
        "http",
        r#"{ endpoint = "http", path = "/health" }"#,
        r#"{"endpoint": "http", "path": "/health"}"#,
    ),
    ("tcp", r#"{ endpoint = "http" }"#, r#"{"endpoint": "http"}"#),
    (
        "exec",
        r#"{ command = ["pg_isready"] }"#,
        r#"{"command": ["pg_isready"]}"#,
    ),
    ("process", "{}", "{}"),
    (
        "log",
        r#"{ pattern = "listening on" }"#,
        r#"{"pattern": "listening on"}"#,
    ),
    (
        "request",
        r#"{ endpoint = "http", path = "/v1/models" }"#,
        r#"{"endpoint": "http", "path": "/v1/models"}"#,
    ),
];

/// A value of the wrong type for a table-shaped key (`restart`, `stop`, a probe, a
/// probe's check) or a duration, explained with the key's form and an example built
/// from what was written where it can be (`restart = "always"` →
/// `restart = { policy = "always" }`).
fn shaped(path: &[&str], value: &Node, s: Syntax) -> Option<Hint> {
    let key = *path.last()?;
    let parent = path.len().checked_sub(2).map(|i| path[i]);
    let written = kind_with_article(value.value.kind());
    let text = match &value.value {
        Value::String(t) => Some(t.to_string()),
        _ => None,
    };
    let ex = |toml: &str, json: &str| {
        if s.json {
            format!("\"{key}\": {json}")
        } else {
            format!("{key} = {toml}")
        }
    };
    let table = |help: String| Hint {
        message: Some(format!("`{key}` is a table, not {written}")),
        help,
    };
    if DURATIONS.contains(&key) {
        if let Some(text) = &text {
            return Some(Hint {
                message: Some(format!(
                    "`{key}` is a duration with its unit (`500ms`, `5s`, `2m`, `1h`); `{text}` is not one"
                )),
                help: format!("write e.g. `{}`", s.assign(key, &s.string("5s"))),
            });
        }
        let example = match &value.value {
            Value::Integer(n) => format!("{n}s"),
            Value::Float(f) => format!("{}ms", (f * 1000.0).round() as i64),
            _ => "5s".into(),
        };
        return Some(Hint {
            message: Some(format!(
                "`{key}` is a duration: a string with its unit, not {written}"
            )),
            help: format!(
                "write `{}` (units: ms, s, m, h)",
                s.assign(key, &s.string(&example))
            ),
        });
    }
    match key {
        "restart" => {
            let policy = text
                .as_deref()
                .filter(|t| ["on-failure", "always", "never"].contains(t))
                .unwrap_or("on-failure");
            Some(table(format!(
                "write `{}` (policy: on-failure (the default), always or never; optional: backoff, max_backoff, max_restarts)",
                ex(
                    &format!(r#"{{ policy = "{policy}" }}"#),
                    &format!(r#"{{"policy": "{policy}"}}"#)
                )
            )))
        }
        "stop" => Some(table(format!(
            "write `{}`",
            ex(
                r#"{ signal = "SIGTERM", grace_period = "10s" }"#,
                r#"{"signal": "SIGTERM", "grace_period": "10s"}"#
            )
        ))),
        "readiness" | "liveness" => {
            let kinds = CHECKS
                .iter()
                .map(|(k, _, _)| *k)
                .collect::<Vec<_>>()
                .join(", ");
            // A URL or `host:port` as the probe: the same check, with its target inline.
            if let Some((check, inline)) = text.as_deref().and_then(inline_target) {
                let period = s.assign("period", &s.string("1s"));
                let check = s.assign(
                    check,
                    &format!("{{ {} }}", s.assign(inline.0, &s.string(inline.1))),
                );
                return Some(table(format!(
                    "write `{}`: one check ({kinds}) with optional period, timeout, initial_delay",
                    s.assign(key, &format!("{{ {check}, {period} }}"))
                )));
            }
            let (_, toml, json) = CHECKS.iter().find(|(k, _, _)| *k == "tcp")?;
            Some(table(format!(
                "write `{}`: one check ({kinds}) naming one of the component's endpoints (or, for http and tcp, an inline `url` or `address`), with optional period, timeout, initial_delay",
                ex(
                    &format!("{{ tcp = {toml}, period = \"1s\" }}"),
                    &format!("{{\"tcp\": {json}, \"period\": \"1s\"}}")
                ),
            )))
        }
        check if matches!(parent, Some("readiness" | "liveness")) => {
            let (_, toml, json) = CHECKS.iter().find(|(k, _, _)| *k == check)?;
            if let Some((kind, (field, target))) = text.as_deref().and_then(inline_target) {
                if kind == check {
                    return Some(table(format!(
                        "write `{}` (or name one of the component's endpoints: `{}`)",
                        s.assign(
                            check,
                            &format!("{{ {} }}", s.assign(field, &s.string(target)))
                        ),
                        ex(toml, json)
                    )));
                }
            }
            let endpoint = match check {
                "http" => " (`endpoint` names one of the component's endpoints; or give the URL inline: `url = \"http://127.0.0.1:8080/health\"`)",
                "tcp" => " (`endpoint` names one of the component's endpoints; or give the address inline: `address = \"127.0.0.1:8080\"`)",
                "request" => " (`endpoint` names one of the component's endpoints; declare an address under `endpoints` first)",
                _ => "",
            };
            Some(table(format!("write `{}`{endpoint}", ex(toml, json))))
        }
        "max_restarts" if parent == Some("restart") => {
            let n = match &value.value {
                Value::String(t) => t.trim().parse::<u32>().ok(),
                Value::Float(f) if *f >= 0.0 => Some(f.round() as u32),
                _ => None,
            }
            .unwrap_or(5);
            let not = match &value.value {
                Value::Integer(i) if *i < 0 => format!("not {i}"),
                Value::Integer(i) => format!("at most {}, not {i}", u32::MAX),
                _ => format!("not {written}"),
            };
            Some(Hint {
                message: Some(format!(
                    "`max_restarts` is a whole number of restarts in a row (0 or more), {not}"
                )),
                help: format!("write `{}`", s.assign(key, &n.to_string())),
            })
        }
        "port" if parent.is_none() => {
            let n = match &value.value {
                Value::String(t) => t.trim().parse::<u16>().ok(),
                _ => None,
            }
            .unwrap_or(22);
            Some(Hint {
                message: Some(format!(
                    "`port` is a whole number from 1 to 65535, not {written}"
                )),
                help: format!("write `{}`", s.assign(key, &n.to_string())),
            })
        }
        "inherit_env" => {
            let names: Vec<String> = match &value.value {
                Value::String(t) => t
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
                _ => Vec::new(),
            };
            let names = if names.is_empty() {
                vec!["PATH".to_string(), "HOME".to_string()]
            } else {
                names
            };
            Some(Hint {
                message: Some(format!(
                    "`inherit_env` is a list of variable names, not {written}"
                )),
                help: format!(
                    "write `{}` (taken from the environment Flotilla runs in)",
                    s.assign(key, &s.list(&names))
                ),
            })
        }
        "host" | "cwd" | "template" | "env_file" | "profile" | "description" | "address"
        | "user"
            if parent.is_none() || path.first() == Some(&"profiles") =>
        {
            let (example, what) = match key {
                "host" => ("gpu1", "the name of a host declared under `hosts`"),
                "cwd" => ("/srv/llm", "a directory, relative to the inventory's"),
                "template" => ("llama-server", "the name of a built-in or user template"),
                "env_file" => (".env", "a file of NAME=value lines"),
                "profile" => ("fast", "the name of one of the component's profiles"),
                "address" => ("10.0.0.5", "a host name or IP address"),
                "user" => ("root", "the user to log in as"),
                _ => ("what it is for", "free text"),
            };
            Some(Hint {
                message: Some(format!("`{key}` is a string, not {written}")),
                help: format!("write `{}` ({what})", s.assign(key, &s.string(example))),
            })
        }
        "labels" => {
            // docker compose's list form (`["team=ml"]`) becomes the table.
            let pairs: Vec<(String, String)> = match &value.value {
                Value::Array(items) => items
                    .iter()
                    .filter_map(|i| match &i.value {
                        Value::String(t) => {
                            let (k, v) = t.split_once('=').unwrap_or((t, ""));
                            Some((k.to_string(), v.to_string()))
                        }
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let pairs = if pairs.is_empty() {
                vec![("team".to_string(), "ml".to_string())]
            } else {
                pairs
            };
            Some(table(format!(
                "write `{}` (NAME = \"value\", values are strings)",
                s.assign(key, &s.table(&pairs))
            )))
        }
        label if parent == Some("labels") => {
            let v = match &value.value {
                Value::Integer(n) => n.to_string(),
                Value::Float(f) => f.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => "value".into(),
            };
            Some(Hint {
                message: Some(format!("label `{label}` is a string, not {written}")),
                help: format!(
                    "write `{}` (label values are strings)",
                    s.assign(label, &s.string(&v))
                ),
            })
        }
        _ => None,
    }
}

/// The check a probe written as one string stands for, with its inline target: an
/// `http://`/`https://` URL → (`http`, (`url`, it)); `host:port` → (`tcp`,
/// (`address`, it)).
fn inline_target(text: &str) -> Option<(&'static str, (&'static str, &str))> {
    if text.starts_with("http://") || text.starts_with("https://") {
        Some(("http", ("url", text)))
    } else if !text.contains("://")
        && text
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
    {
        Some(("tcp", ("address", text)))
    } else {
        None
    }
}

/// An unknown key docker compose users write, with what Flotilla calls it.
fn compose_key(key: &str, value: Option<&Node>, s: Syntax) -> Option<Hint> {
    let help = match key {
        "ports" | "expose" => return value.and_then(|v| endpoints(key, v, s)),
        "environment" => {
            let example = match value.map(|v| &v.value) {
                Some(Value::Table(entries)) => {
                    let pairs: Vec<(String, String)> = entries
                        .iter()
                        .map(|e| {
                            let v = match &e.value.value {
                                Value::String(t) => t.to_string(),
                                Value::Integer(i) => i.to_string(),
                                Value::Bool(b) => b.to_string(),
                                _ => "value".into(),
                            };
                            (e.key.to_string(), v)
                        })
                        .collect();
                    s.assign("env", &s.table(&pairs))
                }
                Some(_) => {
                    let hint = value.and_then(|v| env(v, s))?;
                    return Some(Hint {
                        message: None,
                        help: format!("Flotilla calls it `env`: {}", hint.help),
                    });
                }
                None => return None,
            };
            format!("Flotilla calls it `env`: write `{example}`")
        }
        "working_dir" => "Flotilla calls it `cwd`".into(),
        "healthcheck" => format!(
            "Flotilla calls it `readiness` (and `liveness`): a probe, e.g. `{}`",
            s.assign(
                "readiness",
                &format!(
                    "{{ {} }}",
                    s.assign(
                        "http",
                        &format!(
                            "{{ {}, {} }}",
                            s.assign("endpoint", &s.string("http")),
                            s.assign("path", &s.string("/health"))
                        )
                    )
                )
            )
        ),
        "entrypoint" => {
            "Flotilla has one `command`: the program and its arguments, as a list".into()
        }
        _ => return None,
    };
    Some(Hint {
        message: None,
        help,
    })
}

fn kind_with_article(kind: &'static str) -> &'static str {
    match kind {
        "table" => "a table",
        "array" => "a list",
        "string" => "a string",
        "integer" => "an integer",
        "float" => "a number",
        "boolean" => "a boolean",
        "datetime" => "a date",
        "null" => "null",
        _ => "that",
    }
}

/// A command line split into words the way a POSIX shell would for simple cases:
/// blanks separate words, single quotes keep everything, double quotes keep all but
/// `\"`, `\\`, `\$` and `` \` `` escapes, a backslash outside quotes escapes the next
/// character.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Split {
    pub(super) words: Vec<String>,
    /// False when a quote is not closed (the words are then split at blanks).
    pub(super) balanced: bool,
    /// The first unquoted character only a shell interprets (`|`, `&`, `;`, `<`,
    /// `>`, `(`, `)`, `$`, `` ` ``, `*`, `?`), if any.
    pub(super) shell_syntax: Option<char>,
}

pub(super) fn shell_split(line: &str) -> Split {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut shell_syntax = None;
    let mut chars = line.chars();
    let mut balanced = true;
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => {
                            balanced = false;
                            break;
                        }
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => {
                                balanced = false;
                                break;
                            }
                        },
                        Some(c) => {
                            if matches!(c, '$' | '`') && shell_syntax.is_none() {
                                shell_syntax = Some(c);
                            }
                            word.push(c);
                        }
                        None => {
                            balanced = false;
                            break;
                        }
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            c => {
                if "|&;<>()$`*?".contains(c) && shell_syntax.is_none() {
                    shell_syntax = Some(c);
                }
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if !balanced {
        words = line.split_whitespace().map(str::to_string).collect();
    }
    Split {
        words,
        balanced,
        shell_syntax,
    }
}

#[cfg(test)]
mod tests {
    use super::shell_split;

    #[test]
    fn splits_like_a_shell_for_simple_cases() {
        let w = |l: &str| shell_split(l).words;
        assert_eq!(
            w("llama-server --port 8080"),
            ["llama-server", "--port", "8080"]
        );
        assert_eq!(
            w(r#"server -m "/models/my model.gguf" --alias 'a b'"#),
            ["server", "-m", "/models/my model.gguf", "--alias", "a b"]
        );
        assert_eq!(w(r#"echo "a \"q\"" b\ c"#), ["echo", "a \"q\"", "b c"]);
        assert_eq!(w("  x   y  "), ["x", "y"]);
        assert_eq!(w("a ''"), ["a", ""]);
        let unclosed = shell_split("run 'oops here");
        assert!(!unclosed.balanced);
        assert_eq!(unclosed.words, ["run", "'oops", "here"]);
        assert_eq!(shell_split("a | b").shell_syntax, Some('|'));
        assert_eq!(shell_split("a '|' b").shell_syntax, None);
        assert_eq!(shell_split("echo \"$HOME\"").shell_syntax, Some('$'));
    }
}
