//! `flotilla session`: agent sessions on the authority (`--server`): create, list,
//! show, send a message, ask for a mode switch (always refused: modes are launch
//! profiles), tear the runtime down, read the event log, delete a session (its
//! files, refs and rows, with what was freed measured).

use crate::{Cli, EXIT_OK, EXIT_REFUSED};
use flotilla_api::sessions::CleanupReport;
use flotilla_api::sessions::{
    CreateSessionRequest, MessageRequest, ModeRequest, SessionDto, SessionEventsResponse,
    SessionsResponse,
};
use flotilla_sessions::Mode;

/// Arguments of `flotilla session`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: SessionCommand,
}

/// `flotilla session` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum SessionCommand {
    /// Create a session (a row; `--prompt` boots its runtime at once).
    Create {
        /// The repository (a name in the authority's sessions.toml).
        #[arg(long)]
        repo: String,
        /// Where its runtime runs (`local`: the authority's host).
        #[arg(long)]
        host: Option<String>,
        /// The launch mode: default, acceptEdits, plan or bypassPermissions (never
        /// switched later).
        #[arg(long, value_parser = parse_mode, default_value = "default")]
        mode: Mode,
        /// The first message.
        #[arg(long)]
        prompt: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every session, its derived state and runtime (reconciled now).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One session.
    Show {
        /// The session's id.
        id: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send a message (boots a runtime if none runs; else it starts the next turn).
    Send {
        /// The session's id.
        id: u64,
        /// The message (`-`: read it from standard input).
        text: String,
    },
    /// Ask to switch the session's mode: always refused and recorded (modes are
    /// chosen at creation); exits 1.
    Mode {
        /// The session's id.
        id: u64,
        /// The mode asked for.
        mode: String,
    },
    /// Tear the session's runtime down (the next message boots a new one).
    Stop {
        /// The session's id.
        id: u64,
    },
    /// Delete the session: its tree, home, run directory and transcripts, its pin
    /// in the mirror, its events, questions and credentials; prints what was freed,
    /// measured. Exit 0 deleted; 1 refused (its runtime runs: `--force` kills it
    /// first) or not everything could be removed (what remains is named, and the
    /// session is kept); 2 no such session.
    Delete {
        /// The session's id.
        id: u64,
        /// Kill a running runtime first.
        #[arg(long)]
        force: bool,
        /// Print JSON (the authority's report; a failure is one `{"error": …}` object).
        #[arg(long)]
        json: bool,
    },
    /// The session's event log, oldest first.
    Events {
        /// The session's id.
        id: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| {
        format!("`{s}` is not a mode: default, acceptEdits, plan or bypassPermissions")
    })
}

/// One row per session: id, state, repo, runtime (its pid or pod), open questions,
/// mode (and what the runtime reported).
fn row(s: &SessionDto) -> Vec<String> {
    let mode = match (&s.doc.observed_mode, s.mode_mismatch) {
        (Some(o), true) => format!("{} (runtime reports {o}: MISMATCH)", s.doc.mode),
        _ => s.doc.mode.to_string(),
    };
    let runtime = match (&s.doc.runtime, s.runtime_alive) {
        (Some(r), true) => r.describe(),
        _ => "-".into(),
    };
    let state = serde_json::to_value(s.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    vec![
        s.id.to_string(),
        state,
        s.doc.repo.clone(),
        runtime,
        s.open_questions.to_string(),
        mode,
    ]
}

/// `sessions` as a table under its header, columns as wide as their widest cell.
fn table<'a>(sessions: impl IntoIterator<Item = &'a SessionDto>) -> String {
    let mut rows = vec![HEADER.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    rows.extend(sessions.into_iter().map(row));
    crate::render::table(&rows)
}

/// `n` bytes for a human: `512 B`, `12.4 KiB`, `3.0 MiB`, `1.2 GiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// `n` with thousands separated by commas (`1,204`).
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One line saying what a delete freed: `session 3 deleted: freed 12.4 MiB in
/// 1,204 files (tree, home, run, 2 transcripts); pin dropped`.
fn deleted_line(r: &CleanupReport) -> String {
    let names: Vec<String> = r
        .removed
        .iter()
        .filter_map(|p| {
            std::path::Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .collect();
    let mut parts: Vec<String> = ["tree", "home", "run"]
        .iter()
        .filter(|w| names.iter().any(|n| n == *w))
        .map(|w| w.to_string())
        .collect();
    let count = |suffix: &str| names.iter().filter(|n| n.ends_with(suffix)).count();
    let plural = |n: usize, one: &str, many: &str| match n {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    };
    parts.extend(plural(count(".jsonl"), "transcript", "transcripts"));
    parts.extend(plural(count(".stderr"), "stderr log", "stderr logs"));
    // Objects on a cluster (`Kind namespace/name`), as they are.
    parts.extend(r.removed.iter().filter(|p| !p.starts_with('/')).cloned());
    let mut line = format!(
        "session {} deleted: freed {} in {} file{}",
        r.id,
        human_bytes(r.freed_bytes),
        grouped(r.freed_files),
        if r.freed_files == 1 { "" } else { "s" }
    );
    if !parts.is_empty() {
        line.push_str(&format!(" ({})", parts.join(", ")));
    }
    if r.pin_dropped {
        line.push_str("; pin dropped");
    }
    match r.runtime_killed {
        Some(0) => line.push_str("; its runtime's pod deleted first"),
        Some(pid) => line.push_str(&format!("; runtime {pid} killed first")),
        None => {}
    }
    for m in &r.mirrors_removed {
        line.push_str(&format!(
            "\nmirror of {} removed (no session uses it): freed {} in {} files",
            m.repo,
            human_bytes(m.freed_bytes),
            grouped(m.freed_files)
        ));
    }
    line
}

/// The columns of [`table`].
const HEADER: [&str; 6] = ["ID", "STATE", "REPO", "RUNTIME", "Q", "MODE"];

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let client = super::authority::client(cli)?;
    let rt = super::runtime()?;
    match &args.command {
        SessionCommand::Create {
            repo,
            host,
            mode,
            prompt,
            json,
        } => {
            let s: SessionDto = rt.block_on(client.post(
                "/v1/sessions",
                &CreateSessionRequest {
                    repo: repo.clone(),
                    host: host.clone(),
                    mode: Some(*mode),
                    prompt: prompt.clone(),
                },
            ))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!(
                    "session {} created ({} on {})",
                    s.id, s.doc.mode, s.doc.repo
                );
            }
            Ok(EXIT_OK)
        }
        SessionCommand::List { json } => {
            let all: SessionsResponse = rt.block_on(client.get("/v1/sessions"))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                print!("{}", table(&all.sessions));
            }
            Ok(EXIT_OK)
        }
        SessionCommand::Show { id, json } => {
            let s: SessionDto = rt.block_on(client.get(&format!("/v1/sessions/{id}")))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", table([&s]));
                if let Some(t) = &s.doc.tree {
                    println!(
                        "tree: {t} (base {})",
                        s.doc.base_commit.as_deref().unwrap_or("-")
                    );
                }
                if let Some(e) = &s.doc.last_end {
                    println!(
                        "last runtime: {} (exit {})",
                        e.how,
                        e.code.map_or("-".into(), |c| c.to_string())
                    );
                    if let Some(d) = &e.detail {
                        let d = crate::render::printable(d, true);
                        println!("  {}", d.replace('\n', "\n  "));
                    }
                }
                if s.doc.waiting_for_capacity {
                    println!("waiting: as many runtimes run as [runtime] max_runtimes allows");
                }
            }
            Ok(EXIT_OK)
        }
        SessionCommand::Send { id, text } => {
            let text = if text == "-" {
                let mut t = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut t)?;
                t
            } else {
                text.clone()
            };
            let s: SessionDto = rt.block_on(client.post(
                &format!("/v1/sessions/{id}/messages"),
                &MessageRequest { text },
            ))?;
            print!("{}", table([&s]));
            Ok(EXIT_OK)
        }
        SessionCommand::Mode { id, mode } => {
            let r: Result<serde_json::Value, _> = rt.block_on(client.post(
                &format!("/v1/sessions/{id}/mode"),
                &ModeRequest { mode: mode.clone() },
            ));
            match r {
                Err(flotilla_api::ClientError::Api {
                    status: 409, error, ..
                }) => {
                    eprintln!("refused: {}", error.message);
                    Ok(EXIT_REFUSED)
                }
                Err(e) => Err(e.into()),
                Ok(_) => anyhow::bail!("the authority accepted a mode switch: it never should"),
            }
        }
        SessionCommand::Stop { id } => {
            let s: SessionDto =
                rt.block_on(client.delete(&format!("/v1/sessions/{id}/runtime")))?;
            print!("{}", table([&s]));
            Ok(EXIT_OK)
        }
        SessionCommand::Delete { id, force, json } => {
            let path = if *force {
                format!("/v1/sessions/{id}?force=true")
            } else {
                format!("/v1/sessions/{id}")
            };
            let r: Result<CleanupReport, _> = rt.block_on(client.delete(&path));
            match r {
                Ok(report) => {
                    if *json {
                        println!("{}", serde_json::to_string_pretty(&report)?);
                    } else {
                        println!("{}", deleted_line(&report));
                    }
                    Ok(EXIT_OK)
                }
                // Refused (its runtime runs), or not everything could be removed: the
                // authority's message names what remains.
                Err(flotilla_api::ClientError::Api {
                    status: status @ (409 | 500),
                    error,
                    ..
                }) => {
                    if *json {
                        println!("{}", serde_json::json!({ "error": error }));
                    } else if status == 409 {
                        eprintln!("refused: {}", error.message);
                    } else {
                        eprintln!("not deleted: {}", error.message);
                    }
                    Ok(EXIT_REFUSED)
                }
                Err(e) => Err(e.into()),
            }
        }
        SessionCommand::Events { id, json } => {
            let ev: SessionEventsResponse =
                rt.block_on(client.get(&format!("/v1/sessions/{id}/events")))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&ev)?);
            } else {
                for e in &ev.events {
                    let kind = e.event.get("kind").and_then(|k| k.as_str()).unwrap_or("?");
                    let mut rest = e.event.clone();
                    if let Some(o) = rest.as_object_mut() {
                        o.remove("kind");
                    }
                    println!(
                        "{:<6} {:<20} {}",
                        e.seq,
                        crate::render::printable(kind, false),
                        crate::render::printable(&rest.to_string(), false)
                    );
                }
            }
            Ok(EXIT_OK)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_sizes_read_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(12_700), "12.4 KiB");
        assert_eq!(human_bytes(13_002_342), "12.4 MiB");
        assert_eq!(grouped(1204), "1,204");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000_000), "1,000,000");
        let r = CleanupReport {
            id: 3,
            freed_bytes: 13_002_342,
            freed_files: 1204,
            removed: [
                "/s/3/home",
                "/s/3/run",
                "/s/3/runtime-1.jsonl",
                "/s/3/runtime-1.stderr",
                "/s/3/runtime-2.jsonl",
                "/s/3/runtime-2.stderr",
                "/s/3/tree",
                "/s/3",
            ]
            .map(String::from)
            .to_vec(),
            pin_dropped: true,
            ..CleanupReport::default()
        };
        assert_eq!(
            deleted_line(&r),
            "session 3 deleted: freed 12.4 MiB in 1,204 files (tree, home, run, 2 transcripts, 2 stderr logs); pin dropped"
        );
    }
}
