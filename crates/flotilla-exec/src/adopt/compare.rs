//! What runs against what the inventory declares: any difference refuses the adopt
//! (the service would change under its clients), and each one is said; what cannot
//! be compared but may matter is a note.
//!
//! Compared: the ports (every declared local endpoint port is listened on by the
//! prior owner, and it listens on no other), the program (the declared
//! `command[0]`, resolved as a start resolves it, is the executable that runs, and
//! its file on disk is the image that runs), the arguments, the user (Flotilla
//! starts it as the user it runs as), and the working directory when the component
//! declares one. A unit's `ExecStart` stands for its command line. A container's
//! image, command and entrypoint (each absent meaning the image's own) and the
//! port in the container each published port leads to are compared instead.

use super::record::{Prior, PriorProcess};
use flotilla_model::topology::Component;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;

/// The differences (each one line) and the notes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    /// What differs: the adopt is refused while there is any.
    pub differences: Vec<String>,
    /// What was not compared, or is compared loosely, but may matter.
    pub notes: Vec<String>,
}

/// `words` as one shell-quoted line.
fn line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| crate::remote::shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Compares `prior`, listening on `listening`, with `c` as declared (`cwd`: the
/// working directory a start gives it; `me`: the user id Flotilla runs as).
pub fn compare(
    c: &Component,
    prior: &Prior,
    listening: &[SocketAddr],
    cwd: &Path,
    me: u32,
) -> Comparison {
    let mut out = Comparison::default();
    ports(c, listening, &mut out);
    match prior {
        Prior::Process(p) => {
            command(c, &p.argv, &mut out);
            program(c, p, cwd, &mut out);
            if p.uid != me {
                out.differences.push(format!(
                    "user: it runs as {} (uid {}); flotilla runs as uid {me} and would start it as that user",
                    p.user.as_deref().unwrap_or("?"),
                    p.uid
                ));
            }
            if let (Some(_), Some(running)) = (&c.cwd, &p.cwd) {
                let declared = std::fs::canonicalize(cwd).unwrap_or(cwd.to_path_buf());
                let running_path =
                    std::fs::canonicalize(running).unwrap_or(Path::new(running).to_path_buf());
                if declared != running_path {
                    out.differences.push(format!(
                        "working directory: declared {} ({}), it runs in {running}",
                        c.cwd.as_deref().unwrap_or_default(),
                        declared.display()
                    ));
                }
            } else if let Some(running) = &p.cwd {
                let start = std::fs::canonicalize(cwd).unwrap_or(cwd.to_path_buf());
                if Path::new(running) != start {
                    out.notes.push(format!(
                        "it runs in {running}; flotilla will start it in {} (declare `cwd` to keep it)",
                        start.display()
                    ));
                }
            }
            out.notes.push(format!(
                "its environment ({} variables) is not compared: flotilla starts it with the declared `env` only",
                p.env.len()
            ));
        }
        Prior::Unit(u) => {
            if !c.command.is_empty() {
                command(c, &u.exec_start, &mut out);
            }
            if let Some(main) = &u.main {
                program(c, main, cwd, &mut out);
            }
        }
        Prior::Container(k) => {
            if let Some(spec) = &c.container {
                if spec.image != k.image {
                    out.differences.push(format!(
                        "image: declared {}, it runs {}",
                        spec.image, k.image
                    ));
                }
                // Absent on both sides: the image's own.
                let said = |v: &Option<Vec<String>>| match v {
                    Some(v) => format!("`{}`", line(v)),
                    None => "the image's".to_string(),
                };
                let declared_cmd = (!c.command.is_empty()).then(|| c.command.clone());
                if declared_cmd != k.cmd {
                    out.differences.push(format!(
                        "command: declared {}, it runs {}",
                        said(&declared_cmd),
                        said(&k.cmd)
                    ));
                }
                if spec.entrypoint != k.entrypoint {
                    out.differences.push(format!(
                        "entrypoint: declared {}, it runs {}",
                        said(&spec.entrypoint),
                        said(&k.entrypoint)
                    ));
                }
                for p in &spec.ports {
                    let (published, target) = (p.published.0, p.target.0);
                    match k.port_map.iter().find(|(h, _)| *h == published) {
                        Some((_, t)) if *t != target => out.differences.push(format!(
                            "port: {published} declared to lead to {target} in the container; it leads to {t}"
                        )),
                        _ => {}
                    }
                }
            }
        }
        Prior::Job(j) => {
            if !c.command.is_empty() {
                command(c, &j.program_arguments, &mut out);
            }
            if let Some(main) = &j.main {
                program(c, main, cwd, &mut out);
            }
        }
    }
    out
}

/// Every declared local port is listened on, and nothing else is.
fn ports(c: &Component, listening: &[SocketAddr], out: &mut Comparison) {
    let mut theirs: Vec<u16> = listening.iter().map(SocketAddr::port).collect();
    theirs.sort_unstable();
    theirs.dedup();
    let shown = if theirs.is_empty() {
        "none".to_string()
    } else {
        theirs
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let declared = super::prior::declared_ports(c);
    for (name, ep) in c.endpoints.iter().filter(|(_, e)| e.is_local_bind()) {
        if !theirs.contains(&ep.port) {
            out.differences.push(format!(
                "port: endpoint `{name}` declares port {}; it does not listen there (it listens on {shown})",
                ep.port
            ));
        }
    }
    for p in theirs.iter().filter(|p| !declared.contains(p)) {
        out.differences.push(format!(
            "port: it also listens on {p}, which no endpoint of `{}` declares",
            c.name
        ));
    }
}

/// The declared command line against `argv` (what runs): the program compared by
/// its resolved file (see [`program`]), the arguments word for word.
fn command(c: &Component, argv: &[String], out: &mut Comparison) {
    if c.command.is_empty() {
        return;
    }
    let declared_args = &c.command[1..];
    let running_args = argv.get(1..).unwrap_or_default();
    if declared_args != running_args {
        out.differences.push(format!(
            "arguments: declared `{}`, it runs `{}`",
            line(&c.command),
            line(argv)
        ));
    }
}

/// The declared program is the executable that runs, and its file is the image
/// that runs.
fn program(c: &Component, p: &PriorProcess, cwd: &Path, out: &mut Comparison) {
    let Some(declared) = c.command.first() else {
        return;
    };
    let running = crate::identity::strip_deleted(Path::new(&p.exe)).to_path_buf();
    let running = std::fs::canonicalize(&running).unwrap_or(running);
    match super::prior::declared_program(c, cwd) {
        None => out.differences.push(format!(
            "binary: the declared program `{declared}` is not found here; it runs {}",
            running.display()
        )),
        Some(path) if path != running => out.differences.push(format!(
            "binary: declared `{declared}` ({}), it runs {}",
            path.display(),
            running.display()
        )),
        Some(path) => {
            if p.exe.ends_with(crate::identity::DELETED_SUFFIX) {
                out.differences.push(format!(
                    "binary: {} was replaced on disk since it started (it runs the old one)",
                    path.display()
                ));
            } else if let Ok(Some(on_disk)) = crate::identity::exe_on_disk_sha256(&path) {
                if on_disk != p.exe_sha256 {
                    out.differences.push(format!(
                        "binary: {} on disk is {on_disk}; it runs {}",
                        path.display(),
                        p.exe_sha256
                    ));
                }
            }
        }
    }
}
