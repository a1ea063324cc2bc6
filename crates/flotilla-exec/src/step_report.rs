//! [`StepReport`]: how one step ended, as the executor returns it and as host mode
//! sends it back over the wire ([`crate::remote::Reply::Step`]).

use flotilla_plan::Action;
use flotilla_store::Outcome;
use serde::Serialize;
use std::time::Duration;

/// How one step ended.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StepReport {
    /// Component.
    pub component: String,
    /// Action, as in the plan.
    pub action: Action,
    /// `succeeded` or `failed`.
    pub outcome: Outcome,
    /// One line saying what happened.
    pub summary: String,
    /// Evidence: last probe, exit status, log tail, identity…
    pub evidence: serde_json::Value,
    /// How long it took.
    #[serde(with = "duration_ms")]
    pub took: Duration,
    /// Whether this step launched a process (even if it then failed its readiness
    /// probe): what the cleanup must stop.
    pub launched: bool,
}

mod duration_ms {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<std::time::Duration, D::Error> {
        use serde::Deserialize;
        Ok(std::time::Duration::from_millis(u64::deserialize(d)?))
    }
}
