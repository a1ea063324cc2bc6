//! The proposed inventory entry of each finding, and the report as TOML to paste.
//!
//! - Endpoints: one per listening port, in port order, `http://HOST:PORT` when the
//!   port answered HTTP (any status), else `HOST:PORT`; HOST is `127.0.0.1` for a
//!   wildcard address, else the bound address. The first is named `http` (or `tcp`),
//!   the others `http-PORT` (or `tcp-PORT`).
//! - Readiness: an `http` probe on the first port whose path answered 200, with that
//!   path; else a `tcp` probe on the first endpoint; none without a port.
//! - A process: its command line as it runs (a relative program path made absolute
//!   against its working directory), its working directory; an option whose name says
//!   it holds a secret (`--api-key`, `--token`…) has its value replaced by
//!   `<redacted>`, said in a note. Its environment is not proposed.
//! - A unit: `adapter = "systemd"` driving it by name. A container: its image, name,
//!   published ports, and its command (the container's `Cmd`) and entrypoint where they
//!   are not its image's.
//!
//! Names come from the program (an interpreter's script or `-m` module), the unit or
//! the container, made valid (`[a-z0-9_-]`) and unique among the inventory's and the
//! other proposals' (`-2`, `-3`…).

use super::guess::Answer;
use super::{Discovery, Draft, Finding, ProcessFacts};
use flotilla_model::inventory::{
    AdapterKind, ComponentSpec, ContainerPort, ContainerSpec, HttpCheck, PortProtocol, ProbeSpec,
    SystemdSpec, TcpCheck,
};
use flotilla_model::inventory_text::{comment, component};
use flotilla_model::values::Port;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;

/// What stands for a value left out of a proposed command line.
pub const REDACTED: &str = "<redacted>";

/// Words that make an option's value a secret (in its name, any case).
const SECRET_WORDS: &[&str] = &["key", "token", "secret", "password", "passwd", "credential"];

/// Endings of an option's name that say its value is where a secret is kept, not
/// the secret.
const NOT_SECRET_ENDINGS: &[&str] = &[
    "file", "path", "dir", "store", "env", "-id", "_id", "-name", "_name",
];

/// The finding of `d`, with what its ports answered, named uniquely among `taken`
/// (which gains its name), on `host` (`local` is left implicit).
pub fn finding(
    d: Draft,
    answers: Vec<Answer>,
    host: &str,
    taken: &mut BTreeSet<String>,
) -> Finding {
    let mut notes = Vec::new();
    let (endpoints, readiness) = endpoints(&d.listening, &answers, &mut notes);
    let mut spec = ComponentSpec {
        host: (host != "local").then(|| host.to_string()),
        endpoints,
        readiness,
        ..ComponentSpec::default()
    };
    let base = match d.adapter {
        AdapterKind::Systemd => {
            let unit = d.unit.as_ref().map(|u| u.unit.clone()).unwrap_or_default();
            spec.adapter = Some(AdapterKind::Systemd);
            spec.systemd = Some(SystemdSpec {
                unit: Some(unit.clone()),
                user: false,
            });
            unit.strip_suffix(".service").unwrap_or(&unit).to_string()
        }
        AdapterKind::Container => {
            let c = d.container.as_ref();
            spec.adapter = Some(AdapterKind::Container);
            spec.command = c.and_then(|c| c.cmd.clone()).map(|mut cmd| {
                redact(&mut cmd, &mut notes);
                cmd
            });
            spec.container = c.map(|c| ContainerSpec {
                image: c.image.clone(),
                name: Some(c.name.clone()),
                entrypoint: c.entrypoint.clone().map(|mut e| {
                    redact(&mut e, &mut notes);
                    e
                }),
                ports: c
                    .ports
                    .iter()
                    .map(|p| ContainerPort {
                        target: Port(p.target),
                        published: Port(p.published),
                        host_ip: match p.host_ip.as_deref() {
                            Some("127.0.0.1") => None,
                            None | Some("") => Some("0.0.0.0".into()),
                            Some(ip) => Some(ip.to_string()),
                        },
                        protocol: (p.protocol == "udp").then_some(PortProtocol::Udp),
                    })
                    .collect(),
                ..ContainerSpec::default()
            });
            c.map(|c| c.name.clone()).unwrap_or_default()
        }
        _ => {
            let p = d.process.as_ref();
            if let Some(p) = p {
                let (command, why) = command(p);
                notes.extend(why);
                let me = nix::unistd::getuid().as_raw();
                if p.uid.is_some_and(|u| u != me) {
                    notes.push(format!(
                        "it runs as user {}; flotilla starts a process component as the user that runs it",
                        p.user.clone().unwrap_or_else(|| format!("uid {}", p.uid.unwrap_or_default()))
                    ));
                }
                spec.command = Some(command);
                spec.cwd = p.cwd.clone();
            }
            p.map(program_name).unwrap_or_default()
        }
    };
    let name = unique(&base, taken);
    // The report never holds a secret it saw: not in the proposal, and not in what
    // it says it found (a comment, or `--json`) either.
    let process = d.process.map(|mut p| {
        redact(&mut p.argv, &mut Vec::new());
        p
    });
    let container = d.container.map(|mut c| {
        for argv in [c.cmd.as_mut(), c.entrypoint.as_mut()]
            .into_iter()
            .flatten()
        {
            redact(argv, &mut Vec::new());
        }
        c
    });
    Finding {
        name,
        adapter: d.adapter,
        process,
        unit: d.unit,
        container,
        listening: d.listening,
        answers,
        notes,
        proposal: spec,
    }
}

/// The endpoints of `listening` (one per port) and the readiness probe, from what the
/// ports answered; notes for ports not asked.
fn endpoints(
    listening: &[SocketAddr],
    answers: &[Answer],
    notes: &mut Vec<String>,
) -> (BTreeMap<String, String>, Option<ProbeSpec>) {
    let mut ports: Vec<u16> = listening.iter().map(SocketAddr::port).collect();
    ports.sort_unstable();
    ports.dedup();
    let mut out = BTreeMap::new();
    let mut http_probe = None;
    let mut first = None;
    for port in ports {
        let at: Vec<&SocketAddr> = listening.iter().filter(|a| a.port() == port).collect();
        // A wildcard or loopback address is reached at loopback; else the bound one.
        let addr = at
            .iter()
            .find_map(|a| super::loopback_target(a))
            .unwrap_or(*at[0]);
        let answer = answers.iter().find(|a| {
            a.address
                .parse::<SocketAddr>()
                .is_ok_and(|x| x.port() == port)
        });
        if answer.is_none() {
            notes.push(format!(
                "port {port} is bound to {} only: not asked (only loopback is), so it gets a tcp probe",
                at[0].ip()
            ));
        }
        let http = answer.is_some_and(|a| a.http);
        let scheme = if http { "http" } else { "tcp" };
        let name = if out.contains_key(scheme) {
            format!("{scheme}-{port}")
        } else {
            scheme.to_string()
        };
        let url = if http {
            format!("http://{addr}")
        } else {
            addr.to_string()
        };
        if let (None, Some(path)) = (&http_probe, answer.and_then(|a| a.path.clone())) {
            http_probe = Some((name.clone(), path));
        }
        first.get_or_insert_with(|| name.clone());
        out.insert(name, url);
    }
    let readiness = match (http_probe, first) {
        (Some((endpoint, path)), _) => Some(ProbeSpec {
            http: Some(HttpCheck {
                endpoint: Some(endpoint),
                url: None,
                path: Some(path),
                status: None,
                body_contains: None,
                json_pointer: None,
                json_equals: None,
            }),
            ..ProbeSpec::default()
        }),
        (None, Some(endpoint)) => Some(ProbeSpec {
            tcp: Some(TcpCheck {
                endpoint: Some(endpoint),
                address: None,
                stays_open: None,
            }),
            ..ProbeSpec::default()
        }),
        (None, None) => None,
    };
    (out, readiness)
}

/// The command to propose for `p`, and notes on what was changed in it.
fn command(p: &ProcessFacts) -> (Vec<String>, Vec<String>) {
    let mut notes = Vec::new();
    let exe = p.exe.as_deref().map(|e| {
        flotilla_model::status::strip_deleted(Path::new(e))
            .display()
            .to_string()
    });
    let mut argv = p.argv.clone();
    // A program that rewrote its command line (`nginx: master process …`): one word
    // with spaces that names no file.
    let rewritten = argv.len() == 1 && argv[0].contains(' ') && !Path::new(&argv[0]).exists();
    if argv.is_empty() || rewritten {
        if rewritten {
            notes.push(format!(
                "its command line reads `{}` (the program rewrote it): the command proposed is its executable alone; add its arguments",
                argv[0]
            ));
        }
        argv = exe.clone().into_iter().collect();
    } else if argv[0].contains('/') && !argv[0].starts_with('/') {
        if let Some(cwd) = &p.cwd {
            let rel = argv[0].trim_start_matches("./").to_string();
            argv[0] = Path::new(cwd).join(rel).display().to_string();
        }
    }
    redact(&mut argv, &mut notes);
    (argv, notes)
}

/// Replaces in `argv` the value of each option that names a secret (`--api-key V`,
/// `--token=V`; not `--api-key-file`, which names where one is) by [`REDACTED`],
/// with a note for each in `notes`.
fn redact(argv: &mut [String], notes: &mut Vec<String>) {
    // `--api-key`, `--token`; not `--api-key-file`, `--password-store`: those
    // name where a secret is, not the secret.
    let secret = |name: &str| {
        let n = name.to_ascii_lowercase();
        name.starts_with('-')
            && SECRET_WORDS.iter().any(|w| n.contains(w))
            && !NOT_SECRET_ENDINGS.iter().any(|e| n.ends_with(e))
    };
    let mut i = 0;
    while i < argv.len() {
        let a = argv[i].clone();
        if let Some((name, _)) = a.split_once('=').filter(|(n, _)| secret(n)) {
            argv[i] = format!("{name}={REDACTED}");
            notes.push(format!(
                "the value of `{name}` looked like a secret and is not shown: put it back (or take it from a secret)"
            ));
        } else if secret(&a) && argv.get(i + 1).is_some_and(|v| !v.starts_with('-')) {
            argv[i + 1] = REDACTED.to_string();
            notes.push(format!(
                "the value of `{a}` looked like a secret and is not shown: put it back (or take it from a secret)"
            ));
            i += 1;
        }
        i += 1;
    }
}

/// A name for a process: an interpreter's `-m` module or script, else its program.
fn program_name(p: &ProcessFacts) -> String {
    let program = p.program();
    let interpreter = p
        .exe
        .as_deref()
        .is_some_and(|e| crate::identity::is_interpreter(Path::new(e)));
    if interpreter {
        let mut args = p.argv.iter().skip(1);
        while let Some(a) = args.next() {
            if a == "-m" {
                if let Some(m) = args.next() {
                    return m.clone();
                }
            } else if a == "-c" || a == "-e" {
                // A program given inline (`python3 -c '…'`, `node -e '…'`): no name
                // in it worth taking; the interpreter's.
                return program;
            } else if !a.starts_with('-') {
                return Path::new(a)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or(program);
            }
        }
    }
    program
}

/// `base` made a valid component name (lowercase letters, digits, `-`, `_`), unique
/// among `taken`, which gains it.
pub fn unique(base: &str, taken: &mut BTreeSet<String>) -> String {
    let mut clean = String::new();
    for c in base.to_ascii_lowercase().chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '-'
        };
        if !(c == '-' && (clean.is_empty() || clean.ends_with('-'))) {
            clean.push(c);
        }
    }
    let clean = clean.trim_end_matches('-');
    let base = if clean.is_empty() { "service" } else { clean };
    let mut name = base.to_string();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// One line saying what a finding is: `pid 4242 (python3 -m http.server 8080), user
/// alice, started 2026-01-05T10:00:00Z, listening on 127.0.0.1:8080`.
pub fn describe(f: &Finding) -> String {
    let listening = if f.listening.is_empty() {
        String::new()
    } else {
        format!(
            ", {} {}",
            if f.container.is_some() {
                "published on"
            } else {
                "listening on"
            },
            f.listening
                .iter()
                .map(SocketAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let process = |p: &ProcessFacts| {
        let mut s = format!("pid {} (`{}`)", p.pid, p.argv.join(" "));
        if let Some(u) = &p.user {
            s.push_str(&format!(", user {u}"));
        }
        if let Some(t) = &p.started {
            s.push_str(&format!(", started {t}"));
        }
        s
    };
    let what = match (&f.unit, &f.container, &f.process) {
        (Some(u), _, p) => {
            let mut s = format!("systemd unit {}", u.unit);
            let about: Vec<String> = [
                u.description.clone(),
                u.fragment_path.clone(),
                u.unit_file_state.clone(),
            ]
            .into_iter()
            .flatten()
            .collect();
            if !about.is_empty() {
                s.push_str(&format!(" ({})", about.join("; ")));
            }
            if let Some(p) = p {
                s.push_str(&format!(", main {}", process(p)));
            }
            s
        }
        (None, Some(c), _) => format!("container {} (id {}, image {})", c.name, c.id, c.image),
        (None, None, Some(p)) => process(p),
        (None, None, None) => String::new(),
    };
    format!("{what}{listening}")
}

/// The report as TOML: a `#` header saying where it looked and what it saw and left
/// out, then each proposal under `# proposal — not in your inventory: …` with what
/// its ports answered and its notes. Pasting it into an inventory adds the proposals.
pub fn render(d: &Discovery) -> String {
    let mut out = String::new();
    let n = d.findings.len();
    let head = match n {
        0 => format!(
            "flotilla discover on host `{}`: nothing runs that the inventory does not cover. Nothing was changed.",
            d.host
        ),
        _ => format!(
            "flotilla discover on host `{}`: {} the inventory does not cover, {}. Nothing was changed: each entry below is a proposal to review and paste into your inventory; while what it describes runs under its present owner, flotilla treats it as foreign (a start refuses to run a second copy on its port). Environments are not proposed: add what each needs under `env`.",
            d.host,
            if n == 1 { "1 service".to_string() } else { format!("{n} services") },
            if n == 1 { "with a proposal" } else { "each with a proposal" }
        ),
    };
    comment(&mut out, "", &head);
    for s in &d.sources {
        comment(&mut out, "", &format!("{}: {}", s.source, s.saw));
    }
    for s in &d.skipped {
        comment(&mut out, "", &format!("skipped {}: {}", s.what, s.reason));
    }
    for f in &d.findings {
        out.push('\n');
        comment(
            &mut out,
            "",
            &format!("proposal — not in your inventory: {}", describe(f)),
        );
        for a in &f.answers {
            for e in &a.evidence {
                comment(&mut out, "  ", &format!("asked: {e}"));
            }
        }
        for note in &f.notes {
            comment(&mut out, "  ", &format!("note: {note}"));
        }
        component(&mut out, &f.name, &f.proposal);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(argv: &[&str], exe: &str) -> ProcessFacts {
        ProcessFacts {
            pid: 42,
            exe: Some(exe.into()),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            comm: "x".into(),
            cwd: Some("/srv/app".into()),
            uid: Some(0),
            user: Some("root".into()),
            started: None,
            start_time_ticks: 1,
            cgroup: None,
        }
    }

    #[test]
    fn names_are_valid_and_unique() {
        let mut taken: BTreeSet<String> = ["llm".to_string()].into();
        assert_eq!(unique("llm", &mut taken), "llm-2");
        assert_eq!(unique("llm", &mut taken), "llm-3");
        assert_eq!(unique("http.server", &mut taken), "http-server");
        assert_eq!(unique("Getty@tty1", &mut taken), "getty-tty1");
        assert_eq!(unique("...", &mut taken), "service");
    }

    #[test]
    fn interpreters_are_named_by_what_they_run() {
        let p = facts(
            &["python3", "-m", "http.server", "8080"],
            "/usr/bin/python3.11",
        );
        assert_eq!(program_name(&p), "http.server");
        let p = facts(&["python3", "-u", "./app.py"], "/usr/bin/python3.11");
        assert_eq!(program_name(&p), "app");
        let p = facts(
            &["python3", "-c", "import http.server as h; h.test(port=8)"],
            "/usr/bin/python3.11",
        );
        assert_eq!(program_name(&p), "python3.11");
        let p = facts(&["/opt/llama-server", "--port", "1"], "/opt/llama-server");
        assert_eq!(program_name(&p), "llama-server");
    }

    #[test]
    fn no_secret_reaches_the_report_text_or_its_json() {
        let p = facts(
            &[
                "/srv/app/bin/server",
                "--api-key",
                "sk-live-1",
                "--token=tok-2",
            ],
            "/srv/app/bin/server",
        );
        let d = Draft {
            adapter: AdapterKind::Process,
            process: Some(p),
            unit: None,
            container: None,
            listening: vec!["127.0.0.1:8080".parse().unwrap()],
        };
        let f = finding(d, Vec::new(), "local", &mut BTreeSet::new());
        let report = Discovery {
            host: "local".into(),
            sources: Vec::new(),
            findings: vec![f],
            skipped: Vec::new(),
        };
        let text = render(&report);
        let json = serde_json::to_string(&report).unwrap();
        for secret in ["sk-live-1", "tok-2"] {
            assert!(!text.contains(secret), "{text}");
            assert!(!json.contains(secret), "{json}");
        }
        assert!(
            text.contains("pid 42 (`/srv/app/bin/server --api-key <redacted>"),
            "{text}"
        );
    }

    #[test]
    fn commands_are_absolute_and_secrets_left_out() {
        let p = facts(
            &[
                "./bin/server",
                "--api-key",
                "sk-1",
                "--token=abc",
                "--api-key-file",
                "/k",
                "--port",
                "8",
            ],
            "/srv/app/bin/server",
        );
        let (argv, notes) = command(&p);
        assert_eq!(
            argv,
            [
                "/srv/app/bin/server",
                "--api-key",
                REDACTED,
                "--token=<redacted>",
                "--api-key-file",
                "/k",
                "--port",
                "8"
            ]
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        let p = facts(
            &["nginx: master process /usr/sbin/nginx"],
            "/usr/sbin/nginx",
        );
        let (argv, notes) = command(&p);
        assert_eq!(argv, ["/usr/sbin/nginx"]);
        assert!(notes[0].contains("rewrote"), "{notes:?}");
    }

    #[test]
    fn endpoints_follow_the_answers() {
        let listening: Vec<SocketAddr> = vec![
            "0.0.0.0:8080".parse().unwrap(),
            "[::]:8080".parse().unwrap(),
            "127.0.0.1:9000".parse().unwrap(),
            "10.0.0.5:7000".parse().unwrap(),
        ];
        let answers = vec![
            Answer {
                address: "127.0.0.1:8080".into(),
                http: true,
                path: None,
                evidence: vec![],
            },
            Answer {
                address: "127.0.0.1:9000".into(),
                http: true,
                path: Some("/v1/models".into()),
                evidence: vec![],
            },
        ];
        let mut notes = Vec::new();
        let (eps, readiness) = endpoints(&listening, &answers, &mut notes);
        assert_eq!(eps["http"], "http://127.0.0.1:8080");
        assert_eq!(eps["http-9000"], "http://127.0.0.1:9000");
        assert_eq!(eps["tcp"], "10.0.0.5:7000");
        let http = readiness.unwrap().http.unwrap();
        assert_eq!(http.endpoint.as_deref(), Some("http-9000"));
        assert_eq!(http.path.as_deref(), Some("/v1/models"));
        assert!(notes[0].contains("10.0.0.5"), "{notes:?}");
    }
}
