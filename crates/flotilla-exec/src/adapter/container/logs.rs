//! A container's output, as the engine keeps it, copied into the component's log file
//! (`logs/<component>.log`) as stamped lines with the engine's own timestamps
//! (`<RFC 3339 time> <stdout|stderr> F <text>`, see [`crate::logs::parse_stamped`]),
//! so `flotilla logs` shows, orders, follows and filters them like a process's.
//!
//! What was copied is remembered in `<log>.engine` (`<container id> <last stamp>
//! <lines with that stamp>`): each copy asks the engine for the lines since the last
//! one (whole seconds, the API's unit) and skips those already copied.

use super::engine::{Engine, EngineError};
use crate::adapter::container::{container_name, engine_for, inspect};
use crate::logs::rfc3339_ns as stamp_ns;
use flotilla_model::topology::Component;
use std::io::Write;
use std::path::{Path, PathBuf};

fn state_path(log: &Path) -> PathBuf {
    crate::logs::beside(log, "engine")
}

/// Copies the lines `c`'s container (of `project`) wrote since the last copy into
/// `log`; returns how many. Nothing when the engine has no such container, or when
/// the container of that name is not this component's (another project's, or one
/// without Flotilla's labels): its output is never read.
///
/// # Errors
/// The engine could not be asked, or the log file could not be written.
pub fn sync(project: &str, c: &Component, log: &Path) -> Result<usize, EngineError> {
    let engine = engine_for(c)?;
    let Some(info) = inspect(&engine, &container_name(project, c))? else {
        return Ok(0);
    };
    if super::foreign(&info, project, &c.name).is_some() {
        return Ok(0);
    }
    let id = info.id.clone().unwrap_or_default();
    sync_container(&engine, &id, log)
}

/// [`sync`] of the container `id` of `engine`.
///
/// # Errors
/// As [`sync`].
pub fn sync_container(engine: &Engine, id: &str, log: &Path) -> Result<usize, EngineError> {
    let state = state_path(log);
    // `<id> <last stamp> <lines with that stamp copied>`: stamps may be whole
    // seconds (Podman's), so lines sharing the last one are counted, not compared.
    let (last_id, last, copied) = std::fs::read_to_string(&state)
        .ok()
        .and_then(|s| {
            let mut w = s.split_whitespace();
            let id = w.next()?.to_string();
            let stamp = w.next()?.to_string();
            let n = w.next().and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
            Some((id, stamp, n))
        })
        .unwrap_or_default();
    let after_ns = if last_id == id { stamp_ns(&last) } else { None };
    let since = after_ns.map_or(0, |ns| {
        i32::try_from(ns / 1_000_000_000).unwrap_or(i32::MAX)
    });
    let i = id.to_string();
    let chunks = engine.call(
        &format!("read the logs of container {id}"),
        move |d| async move {
            use futures_util::StreamExt;
            let opts = bollard::query_parameters::LogsOptionsBuilder::new()
                .stdout(true)
                .stderr(true)
                .timestamps(true)
                .since(since)
                .build();
            let mut s = d.logs(&i, Some(opts));
            let mut out = Vec::new();
            while let Some(item) = s.next().await {
                out.push(item?);
            }
            Ok(out)
        },
    )?;
    let mut pending: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut lines: Vec<(usize, Vec<u8>)> = Vec::new();
    for chunk in chunks {
        let (which, bytes) = match chunk {
            bollard::container::LogOutput::StdErr { message } => (1, message),
            bollard::container::LogOutput::StdOut { message }
            | bollard::container::LogOutput::Console { message } => (0, message),
            bollard::container::LogOutput::StdIn { .. } => continue,
        };
        pending[which].extend_from_slice(&bytes);
        while let Some(at) = pending[which].iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending[which].drain(..=at).collect();
            lines.push((which, line[..line.len() - 1].to_vec()));
        }
    }
    // A stamp of whole seconds (Podman's) in the second the container started, but
    // before the instant it started, is raised to that instant: the line cannot be
    // older, and `flotilla logs` then orders it after the start's marker.
    let started = inspect(engine, id)
        .ok()
        .flatten()
        .and_then(|i| i.state?.started_at)
        .and_then(|t| stamp_ns(&t).map(|ns| (t, ns)));
    let mut out = Vec::new();
    let (mut newest, mut same) = if last_id == id {
        (last.clone(), copied)
    } else {
        (String::new(), 0)
    };
    let mut skip_same = same;
    let mut n = 0;
    for (which, line) in lines {
        let text = String::from_utf8_lossy(&line);
        let Some((stamp, rest)) = text.split_once(' ') else {
            continue;
        };
        let Some(ns) = stamp_ns(stamp) else { continue };
        match after_ns {
            Some(a) if ns < a => continue,
            Some(a) if ns == a && skip_same > 0 => {
                skip_same -= 1;
                continue;
            }
            _ => {}
        }
        let stream = if which == 1 { "stderr" } else { "stdout" };
        let shown = match &started {
            Some((at, start_ns))
                if ns % 1_000_000_000 == 0
                    && ns < *start_ns
                    && ns / 1_000_000_000 == start_ns / 1_000_000_000 =>
            {
                at.as_str()
            }
            _ => stamp,
        };
        crate::logs::push_stamped(&mut out, shown, stream, true, rest.as_bytes());
        if stamp == newest {
            same += 1;
        } else {
            newest = stamp.to_string();
            same = 1;
        }
        n += 1;
    }
    if n > 0 {
        let io = |e: std::io::Error| EngineError::Other {
            what: format!("copy the logs of container {id}"),
            why: format!("{}: {e}", log.display()),
        };
        crate::logs::open_append(log)
            .and_then(|mut f| f.write_all(&out))
            .map_err(io)?;
        std::fs::write(&state, format!("{id} {newest} {same}\n")).map_err(io)?;
    }
    Ok(n)
}
