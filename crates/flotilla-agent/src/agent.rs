//! The agent's loop: take desired states from a [`Source`], converge the host to each
//! with the same planner and executor as the CLI (`flotilla_exec::operate::Invocation`:
//! lifecycle lock, reconcile, observe, plan, journaled apply), supervise, find drift,
//! report through a [`Reporter`]. It only ever connects out (its source, its
//! reporter); it never listens on a port.
//!
//! # Converging to a desired state
//!
//! Given a new snapshot and the previous one applied (kept in
//! `<state>/agent/snapshot.json`):
//!
//! 1. Managed components the previous snapshot had and the new one does not (or all
//!    of them, when the project changed) are stopped if they run, dependents first:
//!    one `stop --force` operation each, planned against the previous snapshot.
//! 2. Then, in dependency order, one `start` operation for each managed component of
//!    the new snapshot that does not run with its selected config: stopped ones start
//!    (with what they depend on), running ones whose effective config changed are
//!    restarted (the planner's recreate). A component running its selected config gets
//!    no operation at all: converging an unchanged snapshot, after an agent restart
//!    too, changes nothing and writes nothing to the journal.
//! 3. A component someone stopped on purpose (`flotilla stop`: desired `stopped` in the
//!    journal) is left stopped, unless the new snapshot changes its config; so is a
//!    component whose dependency was stopped that way. It is reported as drift. A
//!    crash loop supervision gave up on is left alone too, unless its config changes.
//!
//! When every operation succeeded the snapshot becomes the applied one; otherwise the
//! agent tries again with backoff (1 s doubling to 5 min), what already converged being
//! a no-op for the planner.
//!
//! At start the agent waits for its source's first answer; if the source cannot say
//! (an authority out of reach), it converges to the snapshot it applied last, so a
//! machine that boots without its authority brings its components back.

use crate::authority::Backoff;
use crate::drift::{self, JournalFacts, AGENT_COMMAND};
use crate::report::{AgentReport, Reporter};
use crate::source::{self, Desired, Next, Source, SourceError};
use crate::state::{AgentDir, Applied, StateError, APPLIED_FORMAT};
use crate::supervise::{self, Decision, State, Supervisor};
use crate::Log;
use flotilla_exec::error::chain as error_chain;
use flotilla_exec::executor::{now_ms, Event};
use flotilla_exec::observe::StatusReport;
use flotilla_exec::operate::{
    self, Invocation, InvocationOutcome, OperateError, RemoteObservation,
};
use flotilla_exec::statedir::StateDir;
use flotilla_model::status::{ComponentStatus, Condition, DesiredLifecycle, Lifecycle};
use flotilla_model::Topology;
use flotilla_plan::{Operation, Verb};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the agent waits at start for its source's first answer before converging
/// to the snapshot it applied last.
pub const STARTUP_WAIT: Duration = Duration::from_secs(10);

/// How many recent events a report carries.
pub const EVENTS_KEPT: usize = 50;

/// Settings of one agent.
#[derive(Clone)]
pub struct AgentConfig {
    /// The host it runs for (its snapshot's `host`).
    pub host: String,
    /// The base state directory given (`--state-dir`), else the environment's
    /// default (`flotilla_exec::statedir`).
    pub state_dir: Option<PathBuf>,
    /// Readiness deadline of each started component.
    pub ready_timeout: Duration,
    /// How often it observes its components (supervision and drift look then).
    pub check_every: Duration,
    /// How often it reports even when nothing changed.
    pub report_every: Duration,
    /// Time allowed to a remote host to answer an observation (only the hosts its
    /// tunnels go through are remote).
    pub host_timeout: Duration,
    /// Where its log lines go (the CLI prints them on standard error).
    pub log: Log,
}

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Its state directory cannot be used.
    #[error("state directory")]
    StateDir(#[source] std::io::Error),
    /// Its own state cannot be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// It has no desired state at all: its source needs a fix and it never applied
    /// one before.
    #[error("no desired state")]
    NoDesiredState(#[source] SourceError),
}

/// The agent: a source of desired states, a reporter, settings.
pub struct Agent<S, R> {
    cfg: AgentConfig,
    source: S,
    reporter: R,
}

/// What converging did.
#[derive(Debug, Default)]
struct Converged {
    failures: Vec<String>,
}

/// Why an operation did not succeed.
#[derive(Debug)]
pub(crate) struct OpFailure {
    /// One line: the operation, where and why.
    pub(crate) message: String,
    /// It did not run: another invocation holds the lifecycle lock.
    pub(crate) locked: bool,
}

/// The desired state being converged to, ready to plan against.
struct Target {
    desired: Desired,
    topology: Arc<Topology>,
    state: StateDir,
}

struct Runner<R> {
    cfg: AgentConfig,
    dir: AgentDir,
    reporter: R,
    applied: Option<Applied>,
    target: Option<Target>,
    supervisor: Supervisor,
    /// What `supervision.json` says now, as this agent last wrote it (or read it
    /// back at its first converge, when what an earlier run recorded is restored).
    shared: Option<BTreeMap<String, flotilla_exec::supervision::Supervision>>,
    events: VecDeque<String>,
    retry: Backoff,
    retry_at: Option<Instant>,
    last_report: Option<(String, Instant)>,
    /// The last line logged, so that a repeated one is not logged again.
    last_logged: Option<String>,
}

impl<S: Source, R: Reporter> Agent<S, R> {
    /// An agent taking desired states from `source`, reporting to `reporter`.
    pub fn new(cfg: AgentConfig, source: S, reporter: R) -> Self {
        Agent {
            cfg,
            source,
            reporter,
        }
    }

    /// Runs until `shutdown` completes (components keep running after it).
    ///
    /// # Errors
    /// [`AgentError`]: no usable state directory, or no desired state at all at start
    /// (an invalid inventory and nothing applied before).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        let Agent {
            cfg,
            mut source,
            reporter,
        } = self;
        let dir = AgentDir::resolve(cfg.state_dir.as_deref()).map_err(AgentError::StateDir)?;
        let log = Arc::clone(&cfg.log);
        let applied = match dir.load_applied() {
            Ok(a) => a,
            Err(e) => {
                log(&format!(
                    "warning: {}; starting as if nothing was applied (components it removed cannot be stopped)",
                    error_chain(&e)
                ));
                None
            }
        };
        log(&format!(
            "agent for host `{}`: desired state from {}; state in {}; checks every {}, reports every {}; never listens on a port",
            cfg.host,
            source.describe(),
            dir.path().display(),
            humantime::format_duration(cfg.check_every),
            humantime::format_duration(cfg.report_every),
        ));
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let poller = tokio::spawn(async move {
            loop {
                let r = source.next().await;
                if tx.send(r).await.is_err() {
                    break;
                }
            }
        });
        let mut runner = Runner {
            cfg,
            dir,
            reporter,
            applied,
            target: None,
            supervisor: Supervisor::new(),
            shared: None,
            events: VecDeque::new(),
            retry: Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            retry_at: None,
            last_report: None,
            last_logged: None,
        };
        let result = runner.main(&mut rx, shutdown).await;
        poller.abort();
        result
    }
}

impl<R: Reporter> Runner<R> {
    /// Logs `text` unless it repeats the line logged just before (an authority that
    /// stays away, a secrets file left unreadable: said once, not every check).
    fn log_once(&mut self, text: &str) -> bool {
        if self.last_logged.as_deref() == Some(text) {
            return false;
        }
        self.last_logged = Some(text.to_string());
        (self.cfg.log)(text);
        true
    }

    fn event(&mut self, text: String) {
        if !self.log_once(&text) {
            return;
        }
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events
            .push_back(format!("{} {text}", drift::rfc3339(now_ms())));
    }

    fn applied_as_desired(&self) -> Option<Desired> {
        self.applied.as_ref().map(|a| Desired {
            revision: a.revision.clone(),
            index: a.index,
            snapshot: a.snapshot.clone(),
            base_dir: a.base_dir.clone(),
        })
    }

    async fn main(
        &mut self,
        rx: &mut tokio::sync::mpsc::Receiver<Result<Next, SourceError>>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), AgentError> {
        tokio::pin!(shutdown);
        // The first desired state: the source's, else the one applied last.
        let first = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = tokio::time::timeout(STARTUP_WAIT, rx.recv()) => r.ok().flatten(),
        };
        match first {
            Some(Ok(Next::Changed(d))) => self.apply(d).await,
            Some(Err(e)) if e.needs_a_fix() && self.applied.is_none() => {
                return Err(AgentError::NoDesiredState(e));
            }
            other => {
                if let Some(Err(e)) = other {
                    self.event(format!("desired state: {}", error_chain(&e)));
                }
                match self.applied_as_desired() {
                    Some(d) => {
                        self.event(format!(
                            "converging to the revision applied last ({}) until the source answers",
                            d.revision
                        ));
                        self.apply(d).await;
                    }
                    None => self.event("waiting for a desired state".into()),
                }
            }
        }
        let mut next_check = Instant::now() + self.cfg.check_every;
        loop {
            let mut wake = next_check;
            if let Some(t) = self.supervisor.next_due() {
                wake = wake.min(t);
            }
            if let Some(t) = self.retry_at {
                wake = wake.min(t);
            }
            tokio::select! {
                _ = &mut shutdown => {
                    (self.cfg.log)("stopping; the components keep running");
                    return Ok(());
                }
                msg = rx.recv() => match msg {
                    Some(Ok(Next::Changed(d))) => {
                        self.apply(d).await;
                        next_check = Instant::now() + self.cfg.check_every;
                    }
                    Some(Ok(Next::Unchanged)) => {}
                    Some(Err(e)) => self.event(format!(
                        "desired state: {}; keeping {}",
                        error_chain(&e),
                        self.applied.as_ref().map(|a| a.revision.as_str()).unwrap_or("nothing (none applied yet)")
                    )),
                    None => {
                        (self.cfg.log)("the desired-state source ended; stopping");
                        return Ok(());
                    }
                },
                _ = tokio::time::sleep_until(wake.into()) => {
                    let retry = self.retry_at.is_some_and(|t| t <= Instant::now());
                    match self.target.as_ref().map(|t| t.desired.clone()) {
                        // Applying checks and reports too.
                        Some(d) if retry => {
                            self.retry_at = None;
                            self.apply(d).await;
                        }
                        _ => self.check(false).await,
                    }
                    next_check = Instant::now() + self.cfg.check_every;
                }
            }
        }
    }

    /// Converges to `desired`, keeps it as applied when that worked, reports.
    async fn apply(&mut self, desired: Desired) {
        let topology = match source::topology_of(&desired.snapshot) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                self.event(format!(
                    "revision {} is unusable here: {e}; keeping the one applied",
                    desired.revision
                ));
                return;
            }
        };
        let state = match StateDir::prepare(self.cfg.state_dir.as_deref(), project(&topology)) {
            Ok(s) => s,
            Err(e) => {
                self.event(format!("state directory: {e}"));
                return;
            }
        };
        let fresh = self
            .applied
            .as_ref()
            .is_none_or(|a| a.revision != desired.revision);
        if fresh {
            self.event(format!("applying revision {}", desired.revision));
        }
        self.target = Some(Target {
            desired: desired.clone(),
            topology: Arc::clone(&topology),
            state: state.clone(),
        });
        let outcome = self.converge(&desired, &topology, &state).await;
        if outcome.failures.is_empty() {
            self.retry.reset();
            self.retry_at = None;
            let same = self.applied.as_ref().filter(|a| {
                a.revision == desired.revision
                    && a.snapshot == desired.snapshot
                    && a.base_dir == desired.base_dir
            });
            if same.is_none() {
                let applied = Applied {
                    format: APPLIED_FORMAT,
                    revision: desired.revision.clone(),
                    index: desired.index,
                    base_dir: desired.base_dir.clone(),
                    applied_at_ms: now_ms(),
                    snapshot: desired.snapshot.clone(),
                };
                if let Err(e) = self.dir.save_applied(&applied) {
                    self.event(format!(
                        "cannot keep the applied revision: {}",
                        error_chain(&e)
                    ));
                }
                self.applied = Some(applied);
                self.event(format!("revision {} applied", desired.revision));
            }
        } else {
            let delay = self.retry.next_delay();
            self.retry_at = Some(Instant::now() + delay);
            self.event(format!(
                "revision {} not fully applied ({}); trying again in {}",
                desired.revision,
                outcome.failures.join("; "),
                humantime::format_duration(delay)
            ));
        }
        self.check(true).await;
    }

    /// Observes `names` (all when empty) of `topology`.
    async fn observe(
        &self,
        topology: &Topology,
        state: &StateDir,
        names: &[String],
    ) -> Result<(StatusReport, flotilla_store::Store), String> {
        observe_components(self.cfg.host_timeout, topology, state, names).await
    }

    /// Runs one journaled operation; its id when it succeeded.
    async fn operate(
        &self,
        topology: &Arc<Topology>,
        state: &StateDir,
        base_dir: &std::path::Path,
        op: Operation,
        command_line: String,
    ) -> Result<String, OpFailure> {
        run_operation(
            &self.settings(),
            topology,
            state,
            base_dir,
            op,
            command_line,
        )
        .await
    }

    fn settings(&self) -> OperationSettings {
        OperationSettings {
            ready_timeout: self.cfg.ready_timeout,
            host_timeout: self.cfg.host_timeout,
            log: Arc::clone(&self.cfg.log),
        }
    }

    async fn converge(
        &mut self,
        desired: &Desired,
        topology: &Arc<Topology>,
        state: &StateDir,
    ) -> Converged {
        let mut out = Converged::default();
        let short = short_revision(&desired.revision);
        if self.shared.is_none() {
            // A crash loop given up on, or a clean exit, before this agent started
            // stays so: not started again by converging.
            let file = flotilla_exec::supervision::read(state.root());
            self.supervisor.restore(&file, Instant::now());
            self.shared = Some(file.components);
        }
        // 1. What the previous snapshot had and this one removed, dependents first.
        if let Some(prev) = self.applied.clone() {
            match self.stop_removed(&prev, desired, topology, &short).await {
                Ok(mut f) => out.failures.append(&mut f),
                Err(e) => out.failures.push(e),
            }
        }
        // 2. Start what does not run its selected config, in dependency order.
        let (status, store) = match self.observe(topology, state, &[]).await {
            Ok(x) => x,
            Err(e) => {
                out.failures.push(format!("cannot observe: {e}"));
                return out;
            }
        };
        let journal = match JournalFacts::read(&store) {
            Ok(j) => j,
            Err(e) => {
                out.failures.push(format!("journal: {e}"));
                return out;
            }
        };
        drop(store);
        let prev = self
            .applied
            .as_ref()
            .filter(|a| a.snapshot.project == desired.snapshot.project)
            .map(|a| &a.snapshot);
        let mut held: BTreeSet<String> = BTreeSet::new();
        let mut todo: Vec<(String, bool)> = Vec::new();
        for &id in topology.order() {
            let c = topology.component(id);
            if !c.is_managed() {
                continue;
            }
            let Some(s) = status.components.iter().find(|s| s.name == c.name) else {
                continue;
            };
            let changed = prev.is_none_or(|p| {
                p.components
                    .iter()
                    .find(|pc| pc.name == c.name)
                    .is_none_or(|pc| pc.config_digest() != c.config_digest())
            });
            let depends_on_held = topology
                .upstream(id)
                .iter()
                .any(|u| held.contains(&topology.component(*u).name));
            if !changed && (journal.stopped_on_purpose(&c.name, s.desired) || depends_on_held) {
                held.insert(c.name.clone());
                continue;
            }
            if runs_selected(s) {
                continue;
            }
            if crate::record::in_progress(c) {
                continue; // a release update owns it until it ends
            }
            if !changed
                && (self.supervisor.gave_up(&c.name).is_some()
                    || self.supervisor.exited_cleanly(&c.name).is_some())
            {
                // A crash loop supervision gave up on waits for a person or a new
                // config, not for the next retry; a clean exit its policy leaves
                // stopped stays so. What depends on it is held with it (starting
                // that would start it).
                held.insert(c.name.clone());
                continue;
            }
            todo.push((c.name.clone(), changed));
        }
        for (name, changed) in todo {
            if changed {
                self.supervisor.forget(&name);
            }
            let line = format!("{AGENT_COMMAND}: apply {short}: start {name}");
            match self
                .operate(
                    topology,
                    state,
                    &desired.base_dir,
                    Operation::new(Verb::Start, name.clone()),
                    line,
                )
                .await
            {
                Ok(op) => self.event(format!("{op}: started `{name}` (revision {short})")),
                Err(e) => out.failures.push(e.message),
            }
        }
        out
    }

    /// Stops what `prev` had and `desired` does not (all of it when the project
    /// changed), dependents first; the failures.
    async fn stop_removed(
        &mut self,
        prev: &Applied,
        desired: &Desired,
        topology: &Topology,
        short: &str,
    ) -> Result<Vec<String>, String> {
        let same_project = prev.snapshot.project == desired.snapshot.project;
        let removed: Vec<String> = prev
            .snapshot
            .components
            .iter()
            .filter(|c| c.is_managed())
            .filter(|c| !same_project || topology.id(&c.name).is_none())
            .map(|c| c.name.clone())
            .collect();
        if removed.is_empty() {
            return Ok(Vec::new());
        }
        let before = Arc::new(
            source::topology_of(&prev.snapshot)
                .map_err(|e| format!("the applied revision {} is unusable: {e}", prev.revision))?,
        );
        let pstate = StateDir::prepare(self.cfg.state_dir.as_deref(), project(&before))
            .map_err(|e| format!("state directory: {e}"))?;
        let (status, _) = self.observe(&before, &pstate, &removed).await?;
        let up: BTreeSet<&str> = status
            .components
            .iter()
            .filter(|s| {
                matches!(
                    s.lifecycle,
                    Lifecycle::Running | Lifecycle::Starting | Lifecycle::Stopping
                )
            })
            .map(|s| s.name.as_str())
            .collect();
        let mut failures = Vec::new();
        for &id in before.order().iter().rev() {
            let name = before.component(id).name.clone();
            // A removed component's streak goes with it (a changed one's is
            // forgotten when it is started again with its new config).
            if removed.contains(&name) {
                self.supervisor.forget(&name);
            }
            if !removed.contains(&name) || !up.contains(name.as_str()) {
                continue;
            }
            let op = Operation {
                force: true,
                ..Operation::new(Verb::Stop, name.clone())
            };
            let line = format!("{AGENT_COMMAND}: apply {short}: stop {name} (removed)");
            match self
                .operate(&before, &pstate, &prev.base_dir, op, line)
                .await
            {
                Ok(op) => self.event(format!(
                    "{op}: stopped `{name}`: revision {short} does not have it"
                )),
                Err(e) => failures.push(e.message),
            }
        }
        Ok(failures)
    }

    /// Observes the target, supervises, finds drift, reports when something changed
    /// (or `force`, or the report interval passed).
    async fn check(&mut self, force: bool) {
        let Some(t) = &self.target else {
            return;
        };
        let (topology, state, base_dir) = (
            Arc::clone(&t.topology),
            t.state.clone(),
            t.desired.base_dir.clone(),
        );
        let mut observed = self.observe(&topology, &state, &[]).await;
        // Supervision: restarts due now run before the report, which then shows them.
        if let Ok((status, store)) = &observed {
            let decisions = self.supervise(&topology, status, store);
            let mut restarted = false;
            for d in decisions {
                match d {
                    Decision::Scheduled {
                        component,
                        attempt,
                        delay,
                        how,
                    } => self.event(format!(
                        "`{component}` went down ({how}): restart {attempt} in {}",
                        humantime::format_duration(delay)
                    )),
                    Decision::Restart {
                        component,
                        attempt,
                        max,
                        how,
                    } => {
                        let line = format!(
                            "{}{component} after {how} (restart {attempt} of {max})",
                            flotilla_store::SUPERVISED_RESTART
                        );
                        // Each component's own policy decides: a restart that would
                        // also start a stopped dependency is not carried out.
                        let stopped = stopped_upstream(&topology, status, &component);
                        if !stopped.is_empty() {
                            let n = stopped.len();
                            let newly = self.supervisor.block(
                                &component,
                                format!(
                                    "it would also start {}, stopped; start {} to bring `{component}` back",
                                    stopped.join(", "),
                                    if n == 1 { "it" } else { "them" }
                                ),
                            );
                            if newly {
                            self.event(format!(
                                "restart {attempt} of {max} of `{component}` not carried out: it would also start {}, stopped (its own restart policy, or an operator, left {} so); supervision never starts a component as a side effect: start {} to bring `{component}` back",
                                stopped.join(", "),
                                if n == 1 { "it" } else { "them" },
                                if n == 1 { "it" } else { "them" },
                            ));
                            }
                            continue;
                        }
                        let op = Operation::new(Verb::Start, component.clone());
                        match self
                            .operate(&topology, &state, &base_dir, op, line)
                            .await
                        {
                            Ok(op) => self.event(format!(
                                "{op}: restarted `{component}` (restart {attempt} of {max})"
                            )),
                            Err(e) if e.locked => {
                                // Not an attempt: someone else is changing the host.
                                self.supervisor.not_attempted(&component);
                                self.event(format!(
                                    "restart of `{component}` postponed: {}",
                                    e.message
                                ));
                            }
                            Err(e) => self.event(format!(
                                "restart {attempt} of {max} of `{component}` failed: {}",
                                e.message
                            )),
                        }
                        restarted = true;
                    }
                    Decision::CleanExit { component, how } => self.event(format!(
                        "`{component}` exited cleanly ({how}); its restart policy is on-failure: left stopped"
                    )),
                    Decision::GaveUp {
                        component,
                        evidence,
                    } => self.event(format!("`{component}`: {evidence}")),
                }
            }
            if restarted {
                observed = self.observe(&topology, &state, &[]).await;
            }
        }
        let (mut status, store) = match observed {
            Ok(x) => x,
            Err(e) => {
                self.event(format!("cannot observe: {e}"));
                return;
            }
        };
        // A restart pending or a crash loop given up on (which needs a person): in
        // this report, and for every `status` on this host.
        let now = now_ms();
        let supervision = flotilla_exec::supervision::SupervisionFile {
            written_at_ms: now,
            components: self.supervisor.view(Instant::now(), now),
        };
        flotilla_exec::supervision::annotate(&mut status, &supervision, now);
        // Written when what it says changed (not read back at every check).
        if self.shared.as_ref() != Some(&supervision.components) {
            match flotilla_exec::supervision::write(state.root(), &supervision) {
                Ok(()) => self.shared = Some(supervision.components),
                Err(e) => self.event(format!(
                    "cannot write {}: {e}",
                    flotilla_exec::supervision::path(state.root()).display()
                )),
            }
        }
        let journal = JournalFacts::read(&store).unwrap_or_default();
        drop(store);
        let drift = drift::find(&topology, &status, &journal, now_ms());
        let fingerprint = fingerprint(&status, &drift, self.applied.as_ref(), self.events.back());
        let due = match &self.last_report {
            None => true,
            Some((fp, at)) => force || *fp != fingerprint || at.elapsed() >= self.cfg.report_every,
        };
        if !due {
            return;
        }
        let report = AgentReport {
            host: self.cfg.host.clone(),
            revision: self.applied.as_ref().map(|a| a.revision.clone()),
            agent_version: flotilla_exec::remote::VERSION.to_string(),
            platform: flotilla_exec::remote::this_platform(),
            status,
            drift,
            events: self.events.iter().cloned().collect(),
        };
        match self.reporter.report(&report).await {
            Ok(()) => self.last_report = Some((fingerprint, Instant::now())),
            Err(e) => {
                self.log_once(&format!("report: {}", error_chain(&e)));
            }
        }
    }

    /// Supervision's decisions for the components it supervises.
    fn supervise(
        &mut self,
        topology: &Topology,
        status: &StatusReport,
        store: &flotilla_store::Store,
    ) -> Vec<Decision> {
        let journal = JournalFacts::read(store).unwrap_or_default();
        let now = Instant::now();
        let mut out = Vec::new();
        for &id in topology.order() {
            let c = topology.component(id);
            let Some(restart) = supervise::restart_of(c).filter(|_| supervise::supervised(c))
            else {
                continue;
            };
            if crate::record::in_progress(c) {
                // Its release update restarts, proves and rolls it back itself.
                continue;
            }
            let Some(s) = status.components.iter().find(|s| s.name == c.name) else {
                continue;
            };
            let state = classify(topology.project_name(), c, s, &journal, store);
            if self.supervisor.is_blocked(&c.name) {
                // Held until the dependency it would start runs again.
                if matches!(state, supervise::State::Down { .. })
                    && !stopped_upstream(topology, status, &c.name).is_empty()
                {
                    continue;
                }
                self.supervisor.unblock(&c.name);
            }
            if let Some(d) = self.supervisor.decide(&c.name, &restart, &state, now) {
                out.push(d);
            }
        }
        out
    }
}

/// The components `component` depends on (directly or not) that are not running
/// now, named as `` `llm` ``: what starting it would start too.
fn stopped_upstream(topology: &Topology, status: &StatusReport, component: &str) -> Vec<String> {
    let Some(id) = topology.id(component) else {
        return Vec::new();
    };
    topology
        .with_upstream(&flotilla_model::Target::Component(id))
        .into_iter()
        .filter(|n| n != component)
        .filter(|n| {
            let c = topology.component(topology.id(n).expect("upstream names exist"));
            c.is_managed()
                && status
                    .components
                    .iter()
                    .find(|s| &s.name == n)
                    .is_some_and(|s| matches!(s.lifecycle, Lifecycle::Stopped | Lifecycle::Failed))
        })
        .map(|n| format!("`{n}`"))
        .collect()
}

/// What supervision sees of `s`.
fn classify(
    project: &str,
    c: &flotilla_model::Component,
    s: &ComponentStatus,
    journal: &JournalFacts,
    store: &flotilla_store::Store,
) -> State {
    match s.lifecycle {
        Lifecycle::Running => State::Up,
        Lifecycle::Starting | Lifecycle::Stopping | Lifecycle::Unknown => State::Unsettled,
        Lifecycle::Stopped | Lifecycle::Failed => {
            if matches!(
                s.started_by,
                flotilla_model::status::StartedBy::Foreign { .. }
            ) {
                // Another process holds its port: no restart can succeed, and that
                // process is never touched. `status` says so (attention).
                return State::Unsettled;
            }
            if journal.stopped_on_purpose(&s.name, s.desired) {
                return State::StoppedOnPurpose;
            }
            let ours_failed = s.desired == Some(DesiredLifecycle::Stopped);
            if s.desired != Some(DesiredLifecycle::Running) && !ours_failed {
                return State::Unsettled;
            }
            // A container's exit status is kept by its engine.
            let container = (c.adapter == Some(flotilla_model::inventory::AdapterKind::Container))
                .then(|| flotilla_exec::adapter::container::last_exit(project, c))
                .flatten();
            let (clean_exit, how) = match container {
                Some((clean, how)) => (Some(clean), how),
                None => how_it_ended(&s.name, store),
            };
            State::Down { clean_exit, how }
        }
    }
}

/// How `component`'s last recorded process ended, as far as this process knows: its
/// exit status when it was this agent's child, else as its log writer recorded it
/// in its log (a process started by another invocation).
fn how_it_ended(component: &str, store: &flotilla_store::Store) -> (Option<bool>, String) {
    let last = store
        .instance(component)
        .ok()
        .flatten()
        .map(|r| (r.pid, r.log_path))
        .or_else(|| {
            store
                .removed_instances(64)
                .ok()?
                .into_iter()
                .find(|r| r.instance.component == component)
                .map(|r| (r.instance.pid, r.instance.log_path))
        });
    let Some((pid, log)) = last else {
        return (None, "no process recorded".into());
    };
    match flotilla_exec::process::reaped_exit(pid) {
        Some(status) => (
            Some(status.success()),
            format!(
                "pid {pid} {}",
                flotilla_exec::process::describe_exit(&status)
            ),
        ),
        None => match flotilla_exec::logs::ended(std::path::Path::new(&log), pid) {
            Some((_, how)) => (Some(how == "exit status 0"), format!("pid {pid} {how}")),
            None => (None, format!("pid {pid} is gone, exit status unknown")),
        },
    }
}

/// Running the config selected now (nothing for converging to do).
fn runs_selected(s: &ComponentStatus) -> bool {
    s.lifecycle == Lifecycle::Running
        && s.condition != Condition::Drift
        && s.config_identity.running.as_deref() == Some(s.config_identity.selected.as_str())
}

/// What makes a report worth sending again: the revision, each component's signals
/// and pid, the drift, the newest event.
fn fingerprint(
    status: &StatusReport,
    drift: &[crate::report::Drift],
    applied: Option<&Applied>,
    last_event: Option<&String>,
) -> String {
    let components: Vec<serde_json::Value> = status
        .components
        .iter()
        .map(|c| {
            serde_json::json!([
                c.name,
                c.lifecycle,
                c.desired,
                c.health,
                c.condition,
                c.observability,
                c.runtime_identity.as_ref().map(|r| r.measured.pid),
            ])
        })
        .collect();
    let drift: Vec<(&str, &str)> = drift
        .iter()
        .map(|d| (d.component.as_str(), d.kind.as_str()))
        .collect();
    serde_json::json!([applied.map(|a| &a.revision), components, drift, last_event]).to_string()
}

/// The project of a topology rebuilt from a snapshot.
pub(crate) fn project(t: &Topology) -> &str {
    t.project
        .as_deref()
        .unwrap_or(flotilla_exec::remote::DEFAULT_PROJECT)
}

/// `sha256:1234abcd5678` (the first 12 hex digits).
fn short_revision(r: &str) -> String {
    r.get(..19).unwrap_or(r).to_string()
}

/// What a journaled operation of the agent needs besides its topology.
#[derive(Clone)]
pub struct OperationSettings {
    /// Readiness deadline of each started component.
    pub ready_timeout: Duration,
    /// Time allowed to a remote host to answer an observation.
    pub host_timeout: Duration,
    /// Where step lines go.
    pub log: crate::Log,
}

/// Observes `names` (all when empty) of `topology`, as `flotilla status` does (probes
/// run, runtime identities measured through `/proc`); the report and the store it read.
///
/// # Errors
/// One line: the journal, the secrets or an observation failed.
pub(crate) async fn observe_components(
    host_timeout: Duration,
    topology: &Topology,
    state: &StateDir,
    names: &[String],
) -> Result<(StatusReport, flotilla_store::Store), String> {
    let mut store = operate::open_store(state).map_err(|e| error_chain(&e))?;
    let secrets = operate::secrets(state).map_err(|e| error_chain(&e))?;
    let pool = flotilla_exec::ssh::Pool::new(topology.hosts.clone(), host_timeout);
    let remote = RemoteObservation {
        transport: &pool,
        host_timeout,
    };
    let (status, _) = operate::observe(topology, &mut store, state, &secrets, names, remote)
        .await
        .map_err(|e| error_chain(&e))?;
    Ok((status, store))
}

/// Runs one journaled operation (`flotilla_exec::operate::Invocation`: lifecycle lock,
/// reconcile, observe, plan, journaled apply) with `command_line` in the journal; its
/// id when it succeeded.
pub(crate) async fn run_operation(
    settings: &OperationSettings,
    topology: &Arc<Topology>,
    state: &StateDir,
    base_dir: &std::path::Path,
    op: Operation,
    command_line: String,
) -> Result<String, OpFailure> {
    let invocation = invocation(settings, topology, state, base_dir, command_line);
    let what = op.to_string();
    finish(&what, invocation.run(Some(&op), None, false).await)
}

/// One journaled operation's invocation with `command_line`, logging each step.
fn invocation(
    settings: &OperationSettings,
    topology: &Arc<Topology>,
    state: &StateDir,
    base_dir: &std::path::Path,
    command_line: String,
) -> Invocation {
    let log = Arc::clone(&settings.log);
    Invocation {
        // Stopped by its supervisor (SIGTERM), never cancelled mid-run.
        cancel: flotilla_exec::CancellationToken::new(),
        topology: Arc::clone(topology),
        state: state.clone(),
        base_dir: base_dir.to_path_buf(),
        ready_timeout: settings.ready_timeout,
        command_line,
        events: Arc::new(move |e| match e {
            // A step's end as every face says it.
            Event::StepFinished(_) => {
                if let Some(line) = flotilla_exec::progress::line(&e) {
                    log(&line)
                }
            }
            Event::Note(t) => log(&format!("  note: {t}")),
            _ => {}
        }),
        show_plan: Box::new(|_| {}),
        fleet: Arc::new(flotilla_exec::ssh::Pool::new(
            topology.hosts.clone(),
            settings.host_timeout,
        )),
        host_timeout: settings.host_timeout,
    }
}

/// What came of an operation `what`, as the agent reports it.
fn finish(
    what: &str,
    outcome: Result<InvocationOutcome, OperateError>,
) -> Result<String, OpFailure> {
    let failed = |message: String| OpFailure {
        message,
        locked: false,
    };
    match outcome {
        Ok(InvocationOutcome::Applied {
            report, operation, ..
        }) => match &report.failed {
            None => Ok(operation),
            Some(f) => Err(failed(format!(
                "{operation} `{what}` failed at `{}`: {}",
                f.component, f.summary
            ))),
        },
        Ok(InvocationOutcome::Refused(r)) => Err(failed(format!("`{what}` {r}"))),
        Ok(InvocationOutcome::Planned(_)) => Err(failed(format!("`{what}`: planned, not run"))),
        Err(OperateError::Locked(e)) => Err(OpFailure {
            message: format!("`{what}`: {e}"),
            locked: true,
        }),
        Err(e) => Err(failed(format!("`{what}`: {}", error_chain(&e)))),
    }
}
