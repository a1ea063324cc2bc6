//! The executor: applies a [`Plan`], each step as soon as the steps it depends on
//! have succeeded (so a wave's steps run in parallel and nothing waits on an
//! unrelated slow branch),
//! journaling every step before and after it runs, proving readiness with each
//! component's readiness probe, and on failure stopping exactly what this invocation
//! started, in reverse.
//!
//! Only the local host and the `process` adapter (plus `external`, observe-only) run
//! here; other adapters and remote hosts fail their step with a clear message.

use crate::adapter::{Adapter, Adapters, Launch, Launched, Stopped};
use crate::identity::{self, RuntimeIdentity};
use crate::probe::{self, ProbeContext, ProbeOutcome};
use crate::process;
use crate::secrets::SecretResolver;
use crate::statedir::StateDir;
pub use crate::step_report::StepReport;
pub use crate::this_process::now_ms;
use crate::transport::Transport;
use flotilla_model::topology::{Check, Component, Probe};
use flotilla_model::Topology;
use flotilla_plan::{Action, Plan, Step};
use flotilla_store::{NewStep, OperationId, Outcome, RemovalReason, StepId, Store};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Progress reported while a plan runs (for a progress bar or plain lines).
#[derive(Debug, Clone)]
pub enum Event {
    /// A step began.
    StepStarted {
        /// Wave number, from 1.
        wave: usize,
        /// The step.
        step: Step,
    },
    /// A readiness probe was tried.
    Probe {
        /// Component.
        component: String,
        /// What it saw.
        outcome: ProbeOutcome,
    },
    /// A step ended.
    StepFinished(StepReport),
    /// Something the user should know before or while the plan runs.
    Note(String),
    /// Cleanup began after a failure.
    CleanupStarted {
        /// What will be stopped, in order.
        components: Vec<String>,
    },
}

/// What applying a plan did.
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    /// Every step that ran, in the order they finished.
    pub steps: Vec<StepReport>,
    /// The first failed step, if any.
    pub failed: Option<StepReport>,
    /// Stops performed by the cleanup after a failure.
    pub cleanup: Vec<StepReport>,
    /// Components this invocation started (and left running unless cleaned up).
    pub started: Vec<String>,
}

impl ApplyReport {
    /// Whether every step succeeded.
    pub fn succeeded(&self) -> bool {
        self.failed.is_none()
    }
}

/// Settings and collaborators for [`apply`].
pub struct Executor {
    /// The topology the plan was computed from.
    pub topology: Arc<Topology>,
    /// Where logs live.
    pub state: StateDir,
    /// The journal.
    pub store: Arc<Mutex<Store>>,
    /// Secret values, resolved when a step runs.
    pub secrets: Arc<SecretResolver>,
    /// Working directory for components without `cwd`, and base of relative ones
    /// (the inventory's directory).
    pub base_dir: PathBuf,
    /// How long a started component may take to become ready.
    pub ready_timeout: Duration,
    /// Log size cap before rotation, in bytes.
    pub log_max_bytes: u64,
    /// Rotated log copies kept.
    pub log_keep: u32,
    /// The journal's operation id for this invocation.
    pub operation: OperationId,
    /// Progress callback.
    pub events: Arc<dyn Fn(Event) + Send + Sync>,
    /// Set (e.g. on Ctrl-C) to stop waiting, skip the remaining waves and clean up
    /// what this invocation started.
    pub cancelled: tokio_util::sync::CancellationToken,
    /// How steps reach components on remote hosts (`None`: this executor runs on
    /// the component's own host, e.g. inside `flotilla host serve`).
    pub transport: Option<Arc<dyn Transport>>,
    /// The adapters that own components' lifecycles here.
    pub adapters: Adapters,
}

/// What one step did: a one-line summary, evidence, and whether it launched a
/// process (what a cleanup must stop, even if the step then failed).
#[derive(Debug, Clone)]
pub struct Done {
    /// One line.
    pub summary: String,
    /// Evidence (probe outcomes, identities, the adapter's facts…).
    pub evidence: serde_json::Value,
    /// Whether a process was launched.
    pub launched: bool,
}

impl Done {
    fn new(summary: impl Into<String>, evidence: serde_json::Value) -> Done {
        Done {
            summary: summary.into(),
            evidence,
            launched: false,
        }
    }

    fn launched(mut self) -> Done {
        self.launched = true;
        self
    }
}

/// A step's result: `Ok` succeeded, `Err` failed (both with what happened).
type StepResult = Result<Done, Done>;

fn failed(summary: impl Into<String>) -> Done {
    Done::new(summary, serde_json::json!({}))
}

impl Executor {
    /// The project this executor works for (`default` when the topology names none).
    fn project(&self) -> &str {
        self.topology.project_name()
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }

    fn emit(&self, e: Event) {
        (self.events)(e)
    }

    fn component(&self, name: &str) -> &Component {
        let id = self
            .topology
            .id(name)
            .expect("plan steps name topology components");
        self.topology.component(id)
    }

    fn journal<T>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, flotilla_store::StoreError>,
    ) -> Result<T, String> {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut store).map_err(|e| format!("journal: {e}"))
    }

    /// Applies `plan`: every step once the steps it depends on have succeeded. On the
    /// first failure (or cancellation) no further step starts, running ones finish,
    /// and everything this invocation started is stopped, in reverse order of starting.
    pub async fn apply(self: &Arc<Self>, plan: &Plan) -> ApplyReport {
        use tracing::Instrument;
        let span = tracing::info_span!("operation", operation = %self.operation);
        self.apply_plan(plan).instrument(span).await
    }

    async fn apply_plan(self: &Arc<Self>, plan: &Plan) -> ApplyReport {
        let mut report = ApplyReport {
            steps: Vec::new(),
            failed: None,
            cleanup: Vec::new(),
            started: Vec::new(),
        };
        // Each step runs as soon as the steps the plan says it waits for have
        // succeeded (waves only say which steps may run together).
        let steps: Vec<(usize, Step)> = plan
            .waves
            .iter()
            .enumerate()
            .flat_map(|(i, w)| w.steps.iter().cloned().map(move |s| (i + 1, s)))
            .collect();
        let deps: Vec<Vec<usize>> = steps.iter().map(|(_, s)| s.after.clone()).collect();
        let mut done = vec![false; steps.len()];
        let mut launched = vec![false; steps.len()];
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            if report.failed.is_none() && !self.is_cancelled() {
                for (k, (wave, step)) in steps.iter().enumerate() {
                    if !launched[k] && deps[k].iter().all(|&d| done[d]) {
                        launched[k] = true;
                        let me = Arc::clone(self);
                        let (wave, step) = (*wave, step.clone());
                        // Each step's span is a child of the operation's.
                        tasks.spawn(tracing::Instrument::in_current_span(async move {
                            (k, me.run_step(wave, step).await)
                        }));
                    }
                }
            } else if self.is_cancelled() && report.failed.is_none() {
                report.failed = Some(StepReport {
                    component: "(operation)".into(),
                    action: Action::Noop,
                    outcome: Outcome::Failed,
                    summary: "interrupted".into(),
                    evidence: serde_json::json!({}),
                    took: Duration::ZERO,
                    launched: false,
                });
            }
            let Some(joined) = tasks.join_next().await else {
                break;
            };
            let (k, r) = joined.unwrap_or_else(|e| {
                (
                    usize::MAX,
                    StepReport {
                        component: "?".into(),
                        action: Action::Noop,
                        outcome: Outcome::Failed,
                        summary: format!("step panicked: {e}"),
                        evidence: serde_json::Value::Null,
                        took: Duration::ZERO,
                        launched: false,
                    },
                )
            });
            if r.launched {
                report.started.push(r.component.clone());
            }
            if r.outcome == Outcome::Succeeded {
                if let Some(d) = done.get_mut(k) {
                    *d = true;
                }
            } else if report.failed.is_none() {
                report.failed = Some(r.clone());
            }
            self.emit(Event::StepFinished(r.clone()));
            report.steps.push(r);
        }
        if let (None, Some(stack)) = (&report.failed, &plan.verify_stack) {
            let r = self.verify_stack(stack).await;
            if r.outcome != Outcome::Succeeded {
                report.failed = Some(r.clone());
            }
            self.emit(Event::StepFinished(r.clone()));
            report.steps.push(r);
        }
        if report.failed.is_some() && !report.started.is_empty() {
            let order: Vec<String> = report.started.iter().rev().cloned().collect();
            self.emit(Event::CleanupStarted {
                components: order.clone(),
            });
            for name in order {
                let step = Step {
                    component: name.clone(),
                    host: self.component(&name).host.clone(),
                    action: Action::Stop,
                    adapter: self.component(&name).adapter,
                    after: Vec::new(),
                    owner: self.component(&name).owner,
                    reason: "cleanup after a failed step".into(),
                };
                let r = self.run_step(0, step).await;
                self.emit(Event::StepFinished(r.clone()));
                report.cleanup.push(r);
            }
        }
        report
    }

    /// Runs one step, journaled before and after; never fails (a failure is a
    /// report with outcome `failed`). A step whose beginning cannot be journaled
    /// does not run (invariant 2).
    pub async fn run_step(&self, wave: usize, step: Step) -> StepReport {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "step",
            operation = %self.operation,
            wave,
            action = step.action.as_str(),
            component = step.component.as_str(),
            host = step.host.as_str(),
        );
        let began = Instant::now();
        let step_id = span.in_scope(|| self.begin(wave, &step, step.action.as_str()));
        let (outcome, done) = match &step_id {
            Err(e) => (
                Outcome::Failed,
                failed(format!(
                    "not run: its beginning could not be journaled ({e})"
                )),
            ),
            Ok(_) => match self.perform(&step).instrument(span.clone()).await {
                Ok(d) => (Outcome::Succeeded, d),
                Err(d) => (Outcome::Failed, d),
            },
        };
        span.in_scope(|| match outcome {
            Outcome::Succeeded => tracing::info!(summary = %done.summary, "step succeeded"),
            _ => tracing::info!(summary = %done.summary, "step failed"),
        });
        self.finish(
            step_id,
            step,
            began,
            outcome,
            done.summary,
            done.evidence,
            done.launched,
        )
    }

    /// Announces `step` and journals its beginning (as `action`).
    fn begin(&self, wave: usize, step: &Step, action: &str) -> Result<StepId, String> {
        self.emit(Event::StepStarted {
            wave,
            step: step.clone(),
        });
        self.journal(|s| {
            s.begin_step(
                self.operation,
                &NewStep {
                    wave: wave as u32,
                    component: step.component.clone(),
                    action: action.into(),
                    started_at_ms: now_ms(),
                },
            )
        })
    }

    /// Journals how a step begun with [`Executor::begin`] ended (its summary added to
    /// the evidence) and reports it.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        step_id: Result<StepId, String>,
        step: Step,
        began: Instant,
        outcome: Outcome,
        summary: String,
        mut evidence: serde_json::Value,
        launched: bool,
    ) -> StepReport {
        if let serde_json::Value::Object(map) = &mut evidence {
            map.insert("summary".into(), summary.clone().into());
        }
        if let Ok(id) = step_id {
            let _ = self.journal(|s| s.finish_step(id, outcome, now_ms(), &evidence));
        }
        StepReport {
            component: step.component,
            action: step.action,
            outcome,
            summary,
            evidence,
            took: began.elapsed(),
            launched,
        }
    }

    /// Does one step.
    async fn perform(&self, step: &Step) -> StepResult {
        let c = self.component(&step.component).clone();
        if step.action == Action::Noop {
            return Ok(Done::new(
                step.reason.clone(),
                serde_json::json!({ "no_op": true }),
            ));
        }
        let host = &self.topology.hosts[&c.host];
        // On the controller, a step of a component on a remote host runs there.
        if let (Some(transport), true) = (&self.transport, host.is_remote()) {
            return self.remote_step(transport.as_ref(), step).await;
        }
        let adapter = Arc::clone(self.adapters.for_component(&c));
        match step.action {
            Action::Start => self.start(&c, adapter).await,
            Action::Stop => self.stop(&c, adapter).await,
            Action::Restart => self.restart(&c, adapter).await,
            Action::AwaitReady => self.await_ready(&c, adapter).await,
            Action::RecordStopped => self
                .journal(|s| {
                    s.set_desired(
                        &c.name,
                        flotilla_model::status::DesiredLifecycle::Stopped,
                        now_ms(),
                    )
                })
                .map(|()| {
                    Done::new(
                        format!(
                            "`{}` is not running; recorded that it should stay stopped",
                            c.name
                        ),
                        serde_json::json!({}),
                    )
                })
                .map_err(failed),
            Action::Noop => unreachable!("handled above"),
        }
    }

    /// Runs `step` on its component's host, through `transport`.
    async fn remote_step(&self, transport: &dyn Transport, step: &Step) -> StepResult {
        let c = self.component(&step.component);
        let call = crate::remote::Call::Step {
            snapshot: self.topology.snapshot(&c.host),
            step: step.clone(),
            wave: 0,
            operation: format!("{} on {}", self.operation, crate::this_process::who()),
            ready_timeout_ms: self.ready_timeout.as_millis() as u64,
        };
        let grace = c
            .stop
            .as_ref()
            .map(|s| s.grace_period.0)
            .unwrap_or_default();
        // Readiness, then a stop's grace period and SIGKILL wait, plus the exchange.
        let allowed = self.ready_timeout + grace + Duration::from_secs(30);
        let give_up = Box::pin(self.cancelled.clone().cancelled_owned());
        match transport.call(&c.host, call, allowed, Some(give_up)).await {
            Ok(crate::remote::Reply::Step { report }) => {
                let mut evidence = report.evidence;
                if let serde_json::Value::Object(map) = &mut evidence {
                    map.insert("host".into(), c.host.clone().into());
                }
                let done = Done {
                    summary: format!("on {}: {}", c.host, report.summary),
                    evidence,
                    launched: report.launched,
                };
                if report.outcome == Outcome::Succeeded {
                    Ok(done)
                } else {
                    Err(done)
                }
            }
            Ok(other) => Err(Done::new(
                format!("host `{}` answered a step with {other:?}", c.host),
                serde_json::json!({ "host": c.host }),
            )),
            Err(e) => {
                let summary = if self.is_cancelled() {
                    format!("interrupted (Ctrl-C); host `{}` was told to stop what this step launched there ({e})", c.host)
                } else {
                    e.to_string()
                };
                Err(Done::new(
                    summary,
                    serde_json::json!({ "host": c.host, "transport_error": e.to_string() }),
                ))
            }
        }
    }

    /// Waits for `probe` to pass, within the readiness timeout, at the pace of
    /// [`probe::wait_ready_with`]: silent signals (a listening port, `tcp`, `process`)
    /// polled every few milliseconds, requests the component answers backed off to
    /// at most 10 per second after the first second.
    async fn wait_for(
        &self,
        probe: &Probe,
        ctx: &ProbeContext<'_>,
        exited: Option<probe::ExitedFn<'_>>,
    ) -> Result<ProbeOutcome, probe::WaitError> {
        let deadline = Instant::now() + self.ready_timeout;
        let cancelled = self.cancelled.clone();
        let stop_waiting = move || -> Option<String> {
            if cancelled.is_cancelled() {
                return Some(probe::INTERRUPTED.into());
            }
            exited.and_then(|f| f())
        };
        let report = |o: &ProbeOutcome| {
            (self.events)(Event::Probe {
                component: ctx.component.clone(),
                outcome: o.clone(),
            })
        };
        let opts = probe::WaitOptions::until(deadline).exited(&stop_waiting);
        probe::wait_ready_with(probe, ctx, &opts, report).await
    }

    /// Checks a stack's readiness probes (its routes, end to end) after its members
    /// are up; journaled as a step of component `stack:<name>`.
    pub async fn verify_stack(&self, stack: &str) -> StepReport {
        let began = Instant::now();
        let step = Step {
            component: format!("stack:{stack}"),
            host: "local".into(),
            action: Action::AwaitReady,
            adapter: None,
            after: Vec::new(),
            owner: flotilla_model::inventory::Owner::Managed,
            reason: "the stack's readiness probes".into(),
        };
        let step_id = self.begin(0, &step, "verify");
        let probes = self
            .topology
            .stacks
            .get(stack)
            .map(|s| s.readiness.clone())
            .unwrap_or_default();
        let secrets = Arc::clone(&self.secrets);
        let lookup = move |n: &str| secrets.get(n);
        let mut passed = Vec::new();
        let mut failure = None;
        for (i, p) in probes.iter().enumerate() {
            let ctx = ProbeContext {
                component: format!("stack:{stack} probe {}", i + 1),
                identity: None,
                log_path: None,
                log_start_offset: 0,
                secrets: &lookup,
                owner: None,
            };
            match self.wait_for(p, &ctx, None).await {
                Ok(o) => passed.push(o),
                Err(w) => {
                    failure = Some(w);
                    break;
                }
            }
        }
        let (outcome, summary, evidence) = match failure {
            None => (
                Outcome::Succeeded,
                format!(
                    "stack `{stack}` answers end to end: {}",
                    passed
                        .iter()
                        .map(|o| o.evidence.clone())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                serde_json::json!({ "probes": passed }),
            ),
            Some(w) => (
                Outcome::Failed,
                format!("stack `{stack}` does not answer end to end: {w}"),
                serde_json::json!({ "probes": passed, "last_probe": w.last, "attempts": w.attempts }),
            ),
        };
        self.finish(step_id, step, began, outcome, summary, evidence, false)
    }

    fn log_path(&self, c: &Component) -> PathBuf {
        self.state.log(&c.name)
    }

    fn cwd(&self, c: &Component) -> PathBuf {
        match &c.cwd {
            Some(d) => self.base_dir.join(d),
            None => self.base_dir.clone(),
        }
    }

    /// A foreign process on one of `c`'s local ports is a conflict, never adopted. A
    /// connection attempt tells cheaply whether anything listens; only then is
    /// /proc read to name it.
    async fn port_conflict(&self, c: &Component) -> Result<(), Done> {
        let mut ports: Vec<u16> = Vec::new();
        for ep in c.endpoints.values().filter(|e| e.is_local_bind()) {
            let dial = tokio::time::timeout(
                Duration::from_millis(500),
                tokio::net::TcpStream::connect((ep.dial_host(), ep.port)),
            );
            if matches!(dial.await, Ok(Ok(_))) {
                ports.push(ep.port);
            }
        }
        if ports.is_empty() {
            return Ok(());
        }
        let listening =
            tokio::task::spawn_blocking(move || process::listeners_on(&ports).unwrap_or_default())
                .await
                .unwrap_or_default();
        for (name, ep) in c.endpoints.iter().filter(|(_, e)| e.is_local_bind()) {
            if let Some(l) = listening.get(&ep.port).and_then(|ls| ls.first()) {
                let (l2, socket) = (
                    l.clone(),
                    crate::adapter::container::engine::socket_for(c.container_api.as_deref()),
                );
                let who = tokio::task::spawn_blocking(move || {
                    crate::discover::containers::describe_holder(&l2, &socket)
                })
                .await
                .unwrap_or_else(|_| l.describe());
                return Err(Done::new(
                    format!(
                        "port {} (endpoint `{name}`) is already in use by {who}: not starting `{}` and not adopting that process",
                        ep.port,
                        c.name
                    ),
                    serde_json::json!({ "conflict": { "port": ep.port, "listeners": listening.get(&ep.port) } }),
                ));
            }
        }
        Ok(())
    }

    /// What `adapter` needs to start `c`: argv, the resolved environment plus the
    /// instance marker, directories.
    fn launch(
        &self,
        c: &Component,
        adapter: &dyn Adapter,
        replacing: Option<&RuntimeIdentity>,
    ) -> Result<Launch, Done> {
        let mut env =
            crate::environment::effective(c, &self.secrets, &self.base_dir).map_err(failed)?;
        env.push((
            process::INSTANCE_MARKER.to_string(),
            process::instance_marker(&self.operation.to_string(), &c.name, self.state.root()),
        ));
        let argv = adapter
            .argv(c, &self.topology)
            .map_err(failed)?
            .iter()
            .map(|a| crate::environment::from_environment(&c.name, a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed)?;
        let secret_files = crate::adapter::container::create::secret_files(c)
            .into_iter()
            .map(|name| {
                self.secrets
                    .require(&c.name, &name)
                    .map(|v| (name, v))
                    .map_err(|e| failed(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Launch {
            component: c.clone(),
            argv,
            env,
            cwd: self.cwd(c),
            log_path: self.log_path(c),
            log_max_bytes: self.log_max_bytes,
            log_keep: self.log_keep,
            state_root: self.state.root().to_path_buf(),
            start_note: start_note(replacing, &self.operation.to_string()),
            project: self.project().to_string(),
            operation: self.operation.to_string(),
            secret_files,
            cancel: self.cancelled.clone(),
        })
    }

    /// The last 10 lines of `c`'s log from `offset`, after its owner's copy of its
    /// output (a container's engine log) is brought in.
    async fn log_tail(
        &self,
        c: &Component,
        adapter: &Arc<dyn Adapter>,
        offset: u64,
    ) -> Vec<String> {
        let log = self.log_path(c);
        let (a, c2, project, to) = (
            Arc::clone(adapter),
            c.clone(),
            self.project().to_string(),
            log.clone(),
        );
        let copied = tokio::task::spawn_blocking(move || a.collect_log(&project, &c2, &to)).await;
        if let Ok(Some(Err(e))) = copied {
            tracing::debug!(
                "component `{}`: copying its output into its log: {e}",
                c.name
            );
        }
        crate::logs::tail_since(&log, offset, 10)
    }

    /// A start that failed (e.g. the process exited at once): the error, with what
    /// the process wrote (its log from `offset`, where it stood before the start).
    async fn start_failed(
        &self,
        c: &Component,
        adapter: &Arc<dyn Adapter>,
        offset: u64,
        e: crate::ExecError,
    ) -> Done {
        let tail = self.log_tail(c, adapter, offset).await;
        Done::new(e.to_string(), serde_json::json!({ "log_tail": tail }))
    }

    async fn start(&self, c: &Component, adapter: Arc<dyn Adapter>) -> StepResult {
        self.port_conflict(c).await?;
        let launch = self.launch(c, adapter.as_ref(), None)?;
        let offset = crate::logs::file_len(&launch.log_path);
        let a = Arc::clone(&adapter);
        let began = std::time::SystemTime::now();
        let launched = match tokio::task::spawn_blocking(move || a.start(&launch))
            .await
            .expect("start task")
        {
            Ok(l) => l,
            Err(e) => return Err(self.start_failed(c, &adapter, offset, e).await),
        };
        self.became_ready(c, &adapter, launched, None, began).await
    }

    /// Restarts `c` and proves it: a new process (another pid or start time than the
    /// one running before) running the executable now on disk, then ready.
    async fn restart(&self, c: &Component, adapter: Arc<dyn Adapter>) -> StepResult {
        let rec = self.journal(|s| s.instance(&c.name)).map_err(failed)?;
        let before = {
            let (a, c2, r) = (Arc::clone(&adapter), c.clone(), rec.clone());
            let project = self.project().to_string();
            tokio::task::spawn_blocking(move || main_process(a.as_ref(), &project, &c2, r.as_ref()))
                .await
                .expect("observe task")
        };
        // With nothing of ours recorded, a listener on its ports is someone else's.
        if before.is_none() && rec.is_none() {
            self.port_conflict(c).await?;
        }
        let launch = self.launch(c, adapter.as_ref(), before.as_ref())?;
        let offset = crate::logs::file_len(&launch.log_path);
        let a = Arc::clone(&adapter);
        let began = std::time::SystemTime::now();
        let launched = match tokio::task::spawn_blocking(move || a.restart(&launch, rec.as_ref()))
            .await
            .expect("restart task")
        {
            Ok(l) => l,
            Err(e) => return Err(self.start_failed(c, &adapter, offset, e).await),
        };
        if let Err(why) = adapter.prove_restart(c, before.as_ref(), &launched.identity) {
            let evidence = serde_json::json!({
                "before": before,
                "after": launched.identity,
                "adapter": launched.facts,
            });
            return Err(Done::new(why, evidence));
        }
        self.became_ready(c, &adapter, launched, before, began)
            .await
    }

    /// Records what `launched` measured as `c`'s instance, then waits for `c`'s
    /// readiness probe (or its process's exit). The start's marker in its log is
    /// stamped `began` (when the adapter was asked to start it), so that what it
    /// wrote from its first instant follows the marker.
    async fn became_ready(
        &self,
        c: &Component,
        adapter: &Arc<dyn Adapter>,
        launched: Launched,
        replaced: Option<RuntimeIdentity>,
        began: std::time::SystemTime,
    ) -> StepResult {
        let identity = launched.identity.clone();
        let mut record = identity::instance_record(
            &identity,
            c,
            self.operation,
            now_ms(),
            self.log_path(c).display().to_string(),
        );
        record
            .program_files
            .extend(identity::declared_files(&self.cwd(c), &c.identity_files));
        self.journal(|s| {
            s.record_instance(&record)?;
            s.set_desired(
                &c.name,
                flotilla_model::status::DesiredLifecycle::Running,
                now_ms(),
            )
        })
        .map_err(|e| failed(e).launched())?;
        if !launched.start_marked {
            crate::logs::append_marker_at(
                &self.log_path(c),
                began,
                &format!(
                    "started {}{}",
                    identity.instance(),
                    start_note(replaced.as_ref(), &self.operation.to_string())
                ),
            );
        }
        let ident_json = serde_json::to_value(&identity).unwrap_or_default();
        let log_start_offset = launched.log_start_offset;
        let probe = c.readiness.clone().unwrap_or_else(default_readiness);
        let secrets = Arc::clone(&self.secrets);
        let lookup = move |n: &str| secrets.get(n);
        let ctx = ProbeContext {
            component: c.name.clone(),
            identity: Some(identity.clone()),
            log_path: Some(self.log_path(c)),
            log_start_offset: launched.log_start_offset,
            secrets: &lookup,
            owner: adapter.owner_checks(self.project(), c),
        };
        let watch = launched.child.clone();
        let watched = identity.clone();
        let (owner, comp) = (Arc::clone(adapter), c.clone());
        let exited = move || match &watch {
            Some(w) => w.exit_description(),
            None => owner.ended(&comp, &watched),
        };
        let adapter_facts = launched.facts.clone();
        let replaced_json = serde_json::to_value(&replaced).unwrap_or_default();
        match self.wait_for(&probe, &ctx, Some(&exited)).await {
            Ok(o) => {
                // Wrappers (env, shims, scripts ending in exec) may have exec'd the real
                // program since the first measurement: record what runs now.
                let ident_json = match identity::measure(identity.pid) {
                    Ok(Some(now))
                        if now.start_time_ticks == identity.start_time_ticks && now != identity =>
                    {
                        let mut rec = record.clone();
                        rec.exe = now.exe.display().to_string();
                        rec.exe_sha256 = now.exe_sha256.clone();
                        rec.argv_digest = now.argv_digest.clone();
                        let _ = self.journal(|s| s.record_instance(&rec));
                        serde_json::to_value(&now).unwrap_or_default()
                    }
                    _ => ident_json,
                };
                let how = match &replaced {
                    Some(old) => {
                        format!("replaced {} with {}", old.instance(), identity.instance())
                    }
                    None => format!("started {}", identity.instance()),
                };
                Ok(Done::new(
                    format!("{how} and ready: {}", o.evidence),
                    serde_json::json!({ "identity": ident_json, "replaced": replaced_json, "adapter": adapter_facts, "probe": o }),
                )
                .launched())
            }
            Err(w) => {
                let tail = self.log_tail(c, adapter, log_start_offset).await;
                let last = w
                    .last
                    .as_ref()
                    .map(|o| o.evidence.clone())
                    .unwrap_or_else(|| "no probe attempt".into());
                Err(Done::new(
                    format!(
                        "`{}` did not become ready: {} (last probe: {last})",
                        c.name, w.reason
                    ),
                    serde_json::json!({ "identity": ident_json, "adapter": adapter_facts, "last_probe": w.last, "attempts": w.attempts, "log_tail": tail }),
                )
                .launched())
            }
        }
    }

    async fn stop(&self, c: &Component, adapter: Arc<dyn Adapter>) -> StepResult {
        let rec = self.journal(|s| s.instance(&c.name)).map_err(failed)?;
        let (c2, r, project) = (c.clone(), rec.clone(), self.project().to_string());
        let outcome = tokio::task::spawn_blocking(move || adapter.stop(&project, &c2, r.as_ref()))
            .await
            .expect("stop task")
            .map_err(|e| {
                Done::new(
                    e.to_string(),
                    serde_json::json!({ "pid": rec.as_ref().map(|r| r.pid) }),
                )
            })?;
        let stopped = flotilla_model::status::DesiredLifecycle::Stopped;
        let (done, reason) = match outcome {
            Stopped::NotOurs { why, facts } => {
                let _ =
                    self.journal(|s| s.remove_instance(&c.name, RemovalReason::Vanished, now_ms()));
                let pid = rec.as_ref().map(|r| r.pid).unwrap_or_default();
                return Err(Done::new(
                    format!("pid {pid} now belongs to another process ({why}): not signalled"),
                    facts,
                ));
            }
            Stopped::Stopped { summary, facts } => {
                (Done::new(summary, facts), RemovalReason::Stopped)
            }
            Stopped::AlreadyGone { summary } => (
                Done::new(summary, serde_json::json!({})),
                RemovalReason::Vanished,
            ),
        };
        // Processes that left the component's process group (`setsid`) still carry its
        // instance marker for this state directory: they are its own, and stop too.
        let (name, root) = (c.name.clone(), self.state.root().to_path_buf());
        let (signal, grace) = crate::adapter::stop_settings(c);
        let escaped =
            tokio::task::spawn_blocking(move || stop_marked(&root, &name, &signal, grace))
                .await
                .unwrap_or_default();
        let mut done = done;
        if !escaped.is_empty() {
            done.summary = format!(
                "{}; also stopped pid {} that had left its process group (recognised by its instance marker)",
                done.summary,
                escaped.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            );
        }
        if rec.is_some() {
            let text = format!("{} ({})", done.summary, self.operation);
            crate::logs::append_marker(&self.log_path(c), &text);
        }
        let has_record = rec.is_some();
        self.journal(|s| {
            if has_record {
                s.remove_instance(&c.name, reason, now_ms())?;
            }
            s.set_desired(&c.name, stopped, now_ms())
        })
        .map_err(|e| Done::new(e, done.evidence.clone()))?;
        Ok(done)
    }

    async fn await_ready(&self, c: &Component, adapter: Arc<dyn Adapter>) -> StepResult {
        let Some(probe) = c.readiness.clone() else {
            return Ok(Done::new(
                format!("`{}` has no readiness probe: nothing to wait for", c.name),
                serde_json::json!({}),
            ));
        };
        let secrets = Arc::clone(&self.secrets);
        let lookup = move |n: &str| secrets.get(n);
        let identity = self
            .journal(|s| s.instance(&c.name))
            .ok()
            .flatten()
            .map(|r| RuntimeIdentity::from(&r));
        let ctx = ProbeContext {
            component: c.name.clone(),
            identity,
            log_path: Some(self.log_path(c)),
            log_start_offset: 0,
            secrets: &lookup,
            owner: adapter.owner_checks(self.project(), c),
        };
        match self.wait_for(&probe, &ctx, None).await {
            Ok(o) => Ok(Done::new(
                format!("ready: {}", o.evidence),
                serde_json::json!({ "probe": o }),
            )),
            Err(w) => Err(Done::new(
                format!(
                    "`{}` did not become ready: {} (last probe: {})",
                    c.name,
                    w.reason,
                    w.last
                        .as_ref()
                        .map(|o| o.evidence.as_str())
                        .unwrap_or("no probe attempt")
                ),
                serde_json::json!({ "last_probe": w.last, "attempts": w.attempts }),
            )),
        }
    }
}

/// Stops every live process-group leader carrying `component`'s instance marker for
/// the state directory `root` (identity measured first, then its group signalled as a
/// stop does); the pids stopped.
fn stop_marked(root: &std::path::Path, component: &str, signal: &str, grace: Duration) -> Vec<u32> {
    let mut out = Vec::new();
    for (pid, _, comp) in process::marked_processes(root).unwrap_or_default() {
        if comp != component {
            continue;
        }
        if let Ok(Some(id)) = identity::measure(pid) {
            if process::stop(&id, signal, grace).is_ok() {
                out.push(pid);
            }
        }
    }
    out
}

/// What follows `started pid N` in a start marker: `, replacing pid 41 (op-12)`.
fn start_note(replacing: Option<&RuntimeIdentity>, operation: &str) -> String {
    match replacing {
        Some(old) => format!(", replacing {} ({operation})", old.instance()),
        None => format!(" ({operation})"),
    }
}

/// The main process of `c` running now, measured: what its adapter sees, or (for
/// adapters that keep no state) the journal's instance when it still runs.
pub fn main_process(
    adapter: &dyn Adapter,
    project: &str,
    c: &Component,
    recorded: Option<&flotilla_store::InstanceRecord>,
) -> Option<RuntimeIdentity> {
    match adapter.observe(project, c, recorded) {
        Ok(Some(seen)) => seen.main,
        Ok(None) => {
            let expected = RuntimeIdentity::from(recorded?);
            match identity::verify(&expected) {
                Ok((identity::IdentityMatch::Same, m)) => m,
                _ => None,
            }
        }
        Err(_) => None,
    }
}

pub use crate::identity::prove_restart;

/// Without a declared readiness probe, a process counts as ready once it has stayed
/// alive for its first check.
fn default_readiness() -> Probe {
    use flotilla_model::values::HumanDuration;
    Probe {
        check: Check::Process,
        failure_threshold: 1,
        initial_delay: HumanDuration(Duration::from_millis(200)),
        period: HumanDuration(Duration::from_millis(200)),
        success_threshold: 1,
        timeout: HumanDuration(Duration::from_secs(1)),
    }
}
