//! A `kubernetes` component's output, as its pods' containers wrote it, copied into
//! the component's log file (`logs/<component>.log`) as stamped lines with the
//! container runtime's own times (`<RFC 3339 time> stdout F [pod/<pod>] <text>`, see
//! `flotilla_exec::logs::parse_stamped`), so `flotilla logs` shows, orders, follows
//! and filters them like a process's, each line naming its pod (as `kubectl logs
//! --prefix` does).
//!
//! Each copy takes the component's pods from the namespace's pod watch (shared
//! with status, [`crate::watch`]: nothing is listed per copy) and reads each
//! started one's log through
//! `pods/{name}/log` with `timestamps=true`: the first time a pod is seen, its last
//! [`FIRST_LINES`] lines; after that, the lines since the last one copied (from its
//! whole second, `sinceTime`'s unit, skipping those already copied). What was copied
//! is remembered in `<log>.pods`, one line per pod: `<uid> <last stamp> <lines with
//! that stamp copied>`. stdout and stderr are one stream in the API
//! (<https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#read-log-of-the-specified-pod>),
//! written here as `stdout`. A pod removed between two copies loses the lines it
//! wrote after the first: the API keeps no log of a pod that is gone.

use crate::cluster::{self, Connection};
use crate::error::KubeError;
use flotilla_exec::logs::rfc3339_ns as stamp_ns;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How many of a pod's last lines are copied the first time it is seen.
pub const FIRST_LINES: i64 = 10_000;

/// Where a component's pods run and what their container is called.
#[derive(Debug, Clone)]
pub struct PodsOf<'a> {
    /// The cluster.
    pub conn: &'a Connection,
    /// The namespace of the component's objects.
    pub namespace: &'a str,
    /// The component's name.
    pub component: &'a str,
    /// The container to read (the component's objects' name).
    pub container: &'a str,
}

/// What was copied of one pod: the last line's stamp, its time in nanoseconds since
/// the epoch, and how many lines with that stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Copied {
    stamp: String,
    at_ns: u128,
    same: usize,
}

fn state_path(log: &Path) -> PathBuf {
    flotilla_exec::logs::beside(log, "pods")
}

fn read_state(log: &Path) -> HashMap<String, Copied> {
    let text = std::fs::read_to_string(state_path(log)).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let uid = w.next()?.to_string();
            let stamp = w.next()?.to_string();
            let same = w.next()?.parse().ok()?;
            let at_ns = stamp_ns(&stamp)?;
            Some((uid, Copied { stamp, at_ns, same }))
        })
        .collect()
}

/// One pod's new lines, from the answer of a `timestamps=true` log read (`<stamp>
/// <text>` per line): the lines after `before` (those at its stamp beyond the
/// `same` already copied), as (time ns, stamp, text), and what is copied after them.
fn new_lines(body: &str, before: Option<&Copied>) -> (Vec<(u128, String, String)>, Option<Copied>) {
    let mut out = Vec::new();
    let mut last = before.cloned();
    let mut skip_same = before.map_or(0, |c| c.same);
    for line in body.lines() {
        let (stamp, text) = line.split_once(' ').unwrap_or((line, ""));
        let Some(ns) = stamp_ns(stamp) else { continue };
        if let Some(b) = before {
            if ns < b.at_ns {
                continue;
            }
            if ns == b.at_ns && skip_same > 0 {
                skip_same -= 1;
                continue;
            }
        }
        last = Some(match last {
            Some(c) if c.at_ns == ns => Copied {
                same: c.same + 1,
                ..c
            },
            _ => Copied {
                stamp: stamp.to_string(),
                at_ns: ns,
                same: 1,
            },
        });
        out.push((ns, stamp.to_string(), text.to_string()));
    }
    (out, last)
}

/// Whether the pod's container has started (a log can be read): running or ended.
fn started(pod: &Pod, container: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter(|s| s.name == container)
        .any(|s| {
            s.state
                .as_ref()
                .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
                || s.last_state
                    .as_ref()
                    .is_some_and(|st| st.terminated.is_some())
        })
}

/// Copies the lines the component's `pods` (as its namespace's pod watch holds
/// them) wrote since the last copy into `log`; returns how many. Pods are read
/// oldest first; the lines appended are in the order they were written (by their
/// stamps).
///
/// # Errors
/// The API server could not be reached, or refused to read a log (a pod that went
/// away or whose container is not running meanwhile is passed over); the log or
/// its state file could not be written.
pub fn sync(of: &PodsOf<'_>, pods: Vec<Arc<Pod>>, log: &Path) -> Result<usize, KubeError> {
    let known = read_state(log);
    let state = known.clone();
    let client = of.conn.client.clone();
    let server = of.conn.server.clone();
    let namespace = of.namespace.to_string();
    let container = of.container.to_string();
    let what = format!("pods of {}/{}", of.namespace, of.component);
    let mut pods = pods;
    pods.sort_by(|a, b| {
        let key = |p: &Pod| {
            (
                p.metadata.creation_timestamp.clone().map(|t| t.0),
                p.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let (lines, state) = cluster::call(&format!("read the logs of the {what}"), async move {
        let api: Api<Pod> = Api::namespaced(client, &namespace);
        let mut lines = Vec::new();
        let mut next = HashMap::new();
        for pod in &pods {
            let (Some(name), Some(uid)) = (pod.metadata.name.clone(), pod.metadata.uid.clone())
            else {
                continue;
            };
            let before = state.get(&uid);
            if let Some(b) = before {
                next.insert(uid.clone(), b.clone());
            }
            if !started(pod, &container) {
                continue;
            }
            let lp = LogParams {
                container: Some(container.clone()),
                timestamps: true,
                // From the last line's whole second (sinceTime's unit), rounded down.
                since_time: before.and_then(|b| {
                    let secs = i64::try_from(b.at_ns / 1_000_000_000).ok()?;
                    k8s_openapi::jiff::Timestamp::from_second(secs).ok()
                }),
                tail_lines: before.is_none().then_some(FIRST_LINES),
                ..LogParams::default()
            };
            let body = match api.logs(&name, &lp).await {
                Ok(b) => b,
                // Gone, or its container not running, since the list: passed over.
                Err(kube::Error::Api(s)) if s.code == 400 || s.code == 404 => continue,
                Err(e) => {
                    return Err(KubeError::from_kube(
                        "read the log of",
                        &format!("pod {namespace}/{name}"),
                        &server,
                        e,
                    ))
                }
            };
            let (new, last) = new_lines(&body, before);
            if let Some(last) = last {
                next.insert(uid, last);
            }
            lines.extend(
                new.into_iter()
                    .map(|(ns, stamp, text)| (ns, stamp, name.clone(), text)),
            );
        }
        // In the order written, a pod's own lines kept in theirs.
        lines.sort_by_key(|l| l.0);
        Ok((lines, next))
    })?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| KubeError::File {
            what: "copy the pods' lines into".into(),
            path,
            source,
        }
    };
    if !lines.is_empty() {
        let mut out = Vec::new();
        for (_, stamp, pod, text) in &lines {
            let text = format!("[pod/{pod}] {text}");
            flotilla_exec::logs::push_stamped(&mut out, stamp, "stdout", true, text.as_bytes());
        }
        // One write: with O_APPEND it lands whole after what was written before.
        flotilla_exec::logs::open_append(log)
            .and_then(|mut f| f.write_all(&out))
            .map_err(io(log))?;
    }
    // Unchanged (nothing new; or nothing seen and nothing remembered, when a
    // component never started may have no log directory yet): nothing to write.
    if state == known {
        return Ok(lines.len());
    }
    let mut text = String::new();
    let mut uids: Vec<_> = state.iter().collect();
    uids.sort_by(|a, b| a.0.cmp(b.0));
    for (uid, c) in uids {
        text.push_str(&format!("{uid} {} {}\n", c.stamp, c.same));
    }
    let at = state_path(log);
    std::fs::write(&at, text).map_err(io(&at))?;
    Ok(lines.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_after_the_last_copied_skip_those_with_its_stamp_already_copied() {
        let body = "2026-12-03T10:00:01.5Z a\n2026-12-03T10:00:02Z b\n2026-12-03T10:00:02Z c\n2026-12-03T10:00:03.25Z d e\n";
        let (all, last) = new_lines(body, None);
        assert_eq!(
            all.iter().map(|l| l.2.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c", "d e"]
        );
        let last = last.unwrap();
        assert_eq!(
            (last.stamp.as_str(), last.same),
            ("2026-12-03T10:00:03.25Z", 1)
        );
        // One of the two lines stamped 10:00:02 was copied: the other is new.
        let before = Copied {
            stamp: "2026-12-03T10:00:02Z".into(),
            at_ns: stamp_ns("2026-12-03T10:00:02Z").unwrap(),
            same: 1,
        };
        let (new, last) = new_lines(body, Some(&before));
        assert_eq!(
            new.iter().map(|l| l.2.as_str()).collect::<Vec<_>>(),
            ["c", "d e"]
        );
        assert_eq!(last.unwrap().same, 1);
        // Nothing new: what was copied stays.
        let (none, last) = new_lines("2026-12-03T10:00:02Z b\n", Some(&before));
        assert!(none.is_empty());
        assert_eq!(last, Some(before));
    }
}
