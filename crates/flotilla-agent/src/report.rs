//! What the agent reports: the measured status of its host's components (the model's
//! [`StatusReport`], observed with `flotilla_exec::operate::observe`), the drift it
//! found, and what it did recently; sent through a [`Reporter`] on every change and
//! periodically.

use crate::state::write_atomic;
use flotilla_model::status::{Evidence, StatusReport};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::PathBuf;

/// One report of an agent (the JSON body of `POST /v1/hosts/{host}/report`, and of
/// `<state>/agent/status.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The host it reports for.
    pub host: String,
    /// The revision it has applied (`None`: none yet).
    pub revision: Option<String>,
    /// The agent's version (`flotilla --version`).
    pub agent_version: String,
    /// `<os>-<arch>` it runs on.
    pub platform: String,
    /// Its components, measured now (supervision's verdicts included: a component
    /// given up on is `attention` with the crash loop as evidence).
    pub status: StatusReport,
    /// Local changes to what it manages, never merged back into the desired state.
    pub drift: Vec<Drift>,
    /// What it did and saw recently (the last 50 events, oldest first, each
    /// `<RFC 3339 time> <what>`).
    pub events: Vec<String>,
}

/// A local change to a component the agent manages. The agent reports it and leaves
/// it as it is (only supervision restarts what died; nothing else reverts a change
/// made by hand, and nothing is merged back into the desired state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// The component.
    pub component: String,
    /// What kind of change.
    pub kind: DriftKind,
    /// What shows it: journal entries, measured files, probes.
    pub evidence: Vec<Evidence>,
}

/// Kinds of [`Drift`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriftKind {
    /// The desired state says it runs; someone stopped it (`flotilla stop`): it stays
    /// stopped.
    StoppedByHand,
    /// A process Flotilla did not start holds one of its ports.
    Foreign,
    /// It runs another effective config than the desired one (started by hand from
    /// another inventory).
    Config,
    /// What runs is not what is on disk any more: its executable, script or a
    /// declared `identity_files` file (a config file) was edited since it started
    /// (condition `stale-runtime`).
    Runtime,
    /// A process Flotilla started runs for a component the desired state does not
    /// have.
    Undesired,
}

impl DriftKind {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftKind::StoppedByHand => "stopped-by-hand",
            DriftKind::Foreign => "foreign",
            DriftKind::Config => "config",
            DriftKind::Runtime => "runtime",
            DriftKind::Undesired => "undesired",
        }
    }
}

/// Why a report could not be delivered (the agent logs it and reports again later).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The local status file could not be written.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// The authority could not be told.
    #[error("authority: {0}")]
    Authority(String),
}

/// Where reports go.
pub trait Reporter: Send + 'static {
    /// Delivers `report`.
    ///
    /// # Errors
    /// [`ReportError`].
    fn report(
        &mut self,
        report: &AgentReport,
    ) -> impl Future<Output = Result<(), ReportError>> + Send;
}

/// Local mode: each report replaces `<state>/agent/status.json` (atomically) and a
/// one-line summary is logged.
pub struct LocalReporter {
    file: PathBuf,
    log: crate::Log,
}

impl LocalReporter {
    /// Reports into `file`, summaries to `log`.
    pub fn new(file: PathBuf, log: crate::Log) -> Self {
        LocalReporter { file, log }
    }
}

/// One line about a report: `revision sha256:1234abcd…: 3 components (2 running,
/// 1 down-unexpectedly); drift: web stopped-by-hand`.
pub fn summary(r: &AgentReport) -> String {
    use std::collections::BTreeMap;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for c in &r.status.components {
        let word = if c.condition == flotilla_model::status::Condition::Ok {
            flotilla_exec::observe::value_name(&c.lifecycle)
        } else {
            c.condition.as_str().to_string()
        };
        *counts.entry(word).or_default() += 1;
    }
    let n = r.status.components.len();
    let mut line = format!(
        "revision {}: {n} component{}",
        r.revision
            .as_deref()
            .map(|x| x.get(..19).unwrap_or(x))
            .unwrap_or("none"),
        if n == 1 { "" } else { "s" }
    );
    if !counts.is_empty() {
        line.push_str(&format!(
            " ({})",
            counts
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !r.drift.is_empty() {
        line.push_str(&format!(
            "; drift: {}",
            r.drift
                .iter()
                .map(|d| format!("{} {}", d.component, d.kind.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    line
}

impl Reporter for LocalReporter {
    async fn report(&mut self, report: &AgentReport) -> Result<(), ReportError> {
        let mut bytes = serde_json::to_vec_pretty(report).expect("serialisable");
        bytes.push(b'\n');
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || write_atomic(&file, &bytes, 0o600))
            .await
            .expect("status writer")?;
        (self.log)(&format!("status: {}", summary(report)));
        Ok(())
    }
}
