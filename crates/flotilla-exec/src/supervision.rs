//! What the node agent's supervision is doing about components that went down,
//! shared with every `flotilla status` and `ps` on the host through one file in the
//! project's state directory (`supervision.json`), so that a restart pending after a
//! backoff, or a crash loop given up on, is visible where people look, not only in
//! the agent's own log.
//!
//! The agent writes the file ([`write`], atomically) after each look at its
//! components; readers ([`read`]) tolerate its absence (no agent) and a damaged file
//! (treated as empty). [`annotate`] turns it into evidence on a status report.

use flotilla_model::status::{
    Condition, DesiredLifecycle, Evidence, Lifecycle, Signal, StatusReport,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file, relative to the project's state directory.
pub const FILE: &str = "supervision.json";

/// What supervision is doing about one component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Supervision {
    /// It went down; the agent restarts it at `due_at_ms` (the restart policy's
    /// backoff).
    BackingOff {
        /// Which restart of the current streak comes next (1-based).
        attempt: u32,
        /// `max_restarts` of its policy.
        max: u32,
        /// When the restart is due (ms since the Unix epoch).
        due_at_ms: i64,
        /// How it went down: `pid 42 killed by SIGKILL`.
        after: String,
    },
    /// A crash loop: the agent stopped restarting it until someone starts it or its
    /// config changes.
    GaveUp {
        /// `crash loop: 5 restarts in 60.2s; gave up (max_restarts = 5); last: …`.
        evidence: String,
        /// When it gave up (ms since the Unix epoch).
        at_ms: i64,
    },
    /// Its restart is held: it would also start a dependency that is stopped.
    Blocked {
        /// `it would also start `llm`, stopped; start it to bring `proxy` back`.
        why: String,
    },
    /// It exited cleanly and its `on-failure` policy leaves it stopped.
    Exited {
        /// `pid 42 exit status 0`.
        how: String,
    },
}

impl Supervision {
    /// One line for people at `now_ms`: `restarting in 4s (attempt 3 of 5) after
    /// pid 42 killed by SIGKILL`; `restart 3 of 5 was due 12s ago …; the agent has
    /// not carried it out (is it running?)`; or the give-up evidence.
    pub fn describe(&self, now_ms: i64) -> String {
        match self {
            Supervision::BackingOff {
                attempt,
                max,
                due_at_ms,
                after,
            } => {
                let left = due_at_ms - now_ms;
                // The agent looks every check interval: a restart just due is not
                // overdue yet.
                if (-5_000..0).contains(&left) {
                    format!("restart {attempt} of {max} due now, after {after}")
                } else if left >= 0 {
                    format!(
                        "restarting in {} (attempt {attempt} of {max}) after {after}",
                        crate::observe::age(left)
                    )
                } else {
                    format!(
                        "restart {attempt} of {max} was due {} ago (after {after}); the agent has not carried it out (is it running?)",
                        crate::observe::age(-left)
                    )
                }
            }
            Supervision::GaveUp { evidence, .. } => evidence.clone(),
            Supervision::Blocked { why } => format!("not restarted: {why}"),
            Supervision::Exited { how } => {
                format!("exited cleanly ({how}); its restart policy is on-failure: left stopped")
            }
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisionFile {
    /// When the agent wrote it (ms since the Unix epoch).
    pub written_at_ms: i64,
    /// By component name; components supervision has nothing to say about are absent.
    pub components: BTreeMap<String, Supervision>,
}

/// `<state_root>/supervision.json`.
pub fn path(state_root: &Path) -> PathBuf {
    state_root.join(FILE)
}

/// The file under `state_root`; empty when there is none or it cannot be read.
pub fn read(state_root: &Path) -> SupervisionFile {
    std::fs::read(path(state_root))
        .ok()
        .and_then(|raw| serde_json::from_slice(&raw).ok())
        .unwrap_or_default()
}

/// Writes `file` under `state_root` atomically (a temporary file renamed over it).
///
/// # Errors
/// Creating, writing or renaming the file.
pub fn write(state_root: &Path, file: &SupervisionFile) -> std::io::Result<()> {
    let target = path(state_root);
    let tmp = state_root.join(format!(".{FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(file)?)?;
    std::fs::rename(&tmp, &target)
}

/// Adds what supervision says to the components of `report` that are down while
/// they should run (not running, desired `running`, no operation starting them
/// now): one `condition` evidence line each (source `agent supervision`), and
/// condition `attention` for a component given up on. A component stopped since
/// (desired `stopped`) or being started gets none.
pub fn annotate(report: &mut StatusReport, file: &SupervisionFile, now_ms: i64) {
    for c in report.components.iter_mut() {
        let Some(s) = file.components.get(&c.name) else {
            continue;
        };
        let down = matches!(c.lifecycle, Lifecycle::Stopped | Lifecycle::Failed);
        if !down || c.desired != Some(DesiredLifecycle::Running) {
            continue;
        }
        match s {
            Supervision::GaveUp { .. } | Supervision::Blocked { .. } => {
                c.condition = Condition::Attention;
            }
            // Done, as its policy says: not down unexpectedly.
            Supervision::Exited { .. } if c.condition == Condition::DownUnexpectedly => {
                c.condition = Condition::Ok;
            }
            _ => {}
        }
        c.evidence.push(Evidence {
            signal: Signal::Condition,
            source: "agent supervision".into(),
            at_ms: file.written_at_ms,
            saw: s.describe(now_ms),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_told_as_time_left_or_overdue_and_the_file_round_trips() {
        let s = Supervision::BackingOff {
            attempt: 3,
            max: 5,
            due_at_ms: 10_000,
            after: "pid 42 killed by SIGKILL".into(),
        };
        assert_eq!(
            s.describe(6_000),
            "restarting in 4s (attempt 3 of 5) after pid 42 killed by SIGKILL"
        );
        assert!(s
            .describe(22_000)
            .starts_with("restart 3 of 5 was due 12s ago"));
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), SupervisionFile::default());
        let file = SupervisionFile {
            written_at_ms: 5,
            components: [("llm".to_string(), s)].into_iter().collect(),
        };
        write(dir.path(), &file).unwrap();
        assert_eq!(read(dir.path()), file);
        std::fs::write(path(dir.path()), "{").unwrap();
        assert_eq!(read(dir.path()), SupervisionFile::default());
    }
}
