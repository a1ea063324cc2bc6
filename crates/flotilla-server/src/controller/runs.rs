//! What the authority's controller holds in memory: plans shown and awaiting
//! confirmation ([`Proposal`], each under a random id for [`PROPOSAL_TTL`]), and the
//! operations applied from them ([`Run`]: progress lines as they happen, then the
//! outcome), the newest [`KEPT_RUNS`] of them.

use flotilla_plan::Plan;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a shown plan may be confirmed (5 minutes); after that, plan again.
pub const PROPOSAL_TTL: Duration = Duration::from_secs(300);
/// How many applied operations are kept in memory for their pages (the journal
/// keeps every one).
pub const KEPT_RUNS: usize = 64;
/// At most this many progress lines are kept per operation (the journal has all).
const KEPT_LINES: usize = 2000;

/// A plan computed for someone and not applied yet.
#[derive(Debug, Clone)]
pub struct Proposal {
    /// Random id (64 hex digits): confirming it applies exactly [`Proposal::plan`].
    pub id: String,
    /// The plan.
    pub plan: Plan,
    /// The verb as typed (`start`, `up`, `down`…), for command lines and messages.
    pub typed: String,
    /// The revision it was planned against (`sha256:…`).
    pub revision: String,
    /// Who asked (the operator's name).
    pub by: String,
    /// When (ms since the Unix epoch).
    pub made_ms: i64,
    made: Instant,
}

impl Proposal {
    /// A new proposal of `plan`, with a fresh random id.
    pub fn new(plan: Plan, typed: &str, revision: &str, by: &str, made_ms: i64) -> Proposal {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        Proposal {
            id: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            plan,
            typed: typed.to_string(),
            revision: revision.to_string(),
            by: by.to_string(),
            made_ms,
            made: Instant::now(),
        }
    }
}

/// How an applied operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The plan ran: `operation` is the journal's id, `succeeded` whether every step
    /// did, `summary` one line per failure and cleanup (empty when it succeeded).
    Applied {
        /// The journal's operation id (`op-…`).
        operation: String,
        /// Whether every step succeeded.
        succeeded: bool,
        /// What went wrong and what was cleaned up, one line each.
        summary: Vec<String>,
    },
    /// Refused before anything changed: a stale plan (the CLI's words), or the
    /// lifecycle lock held by another operation.
    Refused(String),
    /// Could not run (journal, state directory…): the error and its causes.
    Failed(String),
}

/// One operation applied by the controller.
#[derive(Debug)]
pub struct Run {
    /// Random id of the run (the proposal's id: one plan is applied at most once).
    pub id: String,
    /// What was applied.
    pub proposal: Proposal,
    /// Who confirmed it.
    pub by: String,
    /// When it began (ms since the Unix epoch).
    pub started_ms: i64,
    lines: Mutex<Vec<String>>,
    outcome: Mutex<Option<RunOutcome>>,
    /// Bumped at every new line and at the end: what a live page waits on.
    pub changed: watch::Sender<u64>,
}

impl Run {
    /// The progress lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("not poisoned").clone()
    }

    /// The outcome, once it ended.
    pub fn outcome(&self) -> Option<RunOutcome> {
        self.outcome.lock().expect("not poisoned").clone()
    }

    /// Adds a progress line (wakes whoever watches).
    pub fn push(&self, line: String) {
        {
            let mut lines = self.lines.lock().expect("not poisoned");
            if lines.len() < KEPT_LINES {
                lines.push(line);
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Records how it ended (wakes whoever watches).
    pub fn finish(&self, outcome: RunOutcome) {
        *self.outcome.lock().expect("not poisoned") = Some(outcome);
        self.changed.send_modify(|n| *n += 1);
    }
}

/// The authority's controller: where its operations keep their journal and
/// lifecycle lock, the plans awaiting confirmation, the operations applied.
#[derive(Debug)]
pub struct Controller {
    /// The base state directory of its projects (`<authority dir>/controller`; each
    /// project's journal, lock and logs under `projects/<name>/`).
    pub dir: PathBuf,
    /// Readiness deadline per started component.
    pub ready_timeout: Duration,
    /// Time allowed per host to answer an observation.
    pub host_timeout: Duration,
    proposals: Mutex<HashMap<String, Proposal>>,
    runs: Mutex<VecDeque<Arc<Run>>>,
    /// Bumped whenever a run begins or ends.
    pub changed: watch::Sender<u64>,
}

impl Controller {
    /// A controller keeping its state under `dir`.
    pub fn new(dir: PathBuf) -> Controller {
        Controller {
            dir,
            ready_timeout: Duration::from_secs(120),
            host_timeout: Duration::from_secs(10),
            proposals: Mutex::new(HashMap::new()),
            runs: Mutex::new(VecDeque::new()),
            changed: watch::Sender::new(0),
        }
    }

    /// Keeps `p` for [`PROPOSAL_TTL`] (and forgets expired ones).
    pub fn keep(&self, p: Proposal) {
        let mut all = self.proposals.lock().expect("not poisoned");
        all.retain(|_, q| q.made.elapsed() < PROPOSAL_TTL);
        all.insert(p.id.clone(), p);
    }

    /// The proposal `id` if it is still there and not expired (it stays).
    pub fn proposal(&self, id: &str) -> Option<Proposal> {
        let all = self.proposals.lock().expect("not poisoned");
        all.get(id)
            .filter(|p| p.made.elapsed() < PROPOSAL_TTL)
            .cloned()
    }

    /// Takes the proposal `id` out (it can be applied once), if not expired.
    pub fn take(&self, id: &str) -> Option<Proposal> {
        let mut all = self.proposals.lock().expect("not poisoned");
        all.remove(id).filter(|p| p.made.elapsed() < PROPOSAL_TTL)
    }

    /// Starts recording the run of `proposal`, confirmed by `by`.
    pub fn begin(&self, proposal: Proposal, by: &str, now_ms: i64) -> Arc<Run> {
        let run = Arc::new(Run {
            id: proposal.id.clone(),
            proposal,
            by: by.to_string(),
            started_ms: now_ms,
            lines: Mutex::new(Vec::new()),
            outcome: Mutex::new(None),
            changed: watch::Sender::new(0),
        });
        let mut runs = self.runs.lock().expect("not poisoned");
        runs.push_front(Arc::clone(&run));
        runs.truncate(KEPT_RUNS);
        drop(runs);
        self.changed.send_modify(|n| *n += 1);
        run
    }

    /// The run `id`, if kept.
    pub fn run(&self, id: &str) -> Option<Arc<Run>> {
        let runs = self.runs.lock().expect("not poisoned");
        runs.iter().find(|r| r.id == id).cloned()
    }

    /// The kept runs, newest first.
    pub fn runs(&self) -> Vec<Arc<Run>> {
        self.runs
            .lock()
            .expect("not poisoned")
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_plan::{Operation, Verb};

    fn plan() -> Plan {
        Plan {
            cleanup: Vec::new(),
            format: flotilla_plan::PLAN_FORMAT,
            inventory_version: 1,
            impact: Vec::new(),
            observed_digest: "sha256:0".into(),
            operation: Operation::new(Verb::Start, "a"),
            topology_digest: "sha256:1".into(),
            verify_stack: None,
            waves: Vec::new(),
        }
    }

    #[test]
    fn a_proposal_is_applied_at_most_once_and_runs_are_bounded() {
        let c = Controller::new(PathBuf::from("/nonexistent"));
        let p = Proposal::new(plan(), "start", "sha256:1", "operator", 0);
        assert_eq!(p.id.len(), 64);
        let id = p.id.clone();
        c.keep(p);
        assert!(c.proposal(&id).is_some());
        let taken = c.take(&id).expect("kept");
        assert!(c.take(&id).is_none(), "taken once");
        let run = c.begin(taken, "operator", 1);
        run.push("wave 1: start a …".into());
        run.finish(RunOutcome::Refused("stale plan".into()));
        assert_eq!(c.run(&id).unwrap().lines().len(), 1);
        for _ in 0..KEPT_RUNS + 3 {
            c.begin(Proposal::new(plan(), "start", "r", "o", 0), "o", 0);
        }
        assert_eq!(c.runs().len(), KEPT_RUNS);
        assert!(c.run(&id).is_none(), "the oldest went");
    }
}
