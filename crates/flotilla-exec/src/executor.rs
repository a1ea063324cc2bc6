//! The executor: applies a [`Plan`], each step as soon as the steps it depends on
//! have succeeded (so a wave's steps run in parallel and nothing waits on an
//! unrelated slow branch),
//! journaling every step before and after it runs, proving readiness with each
//! component's readiness probe, and on failure stopping exactly what this invocation
//! started, in reverse.
//!
//! Only the local host and the `process` adapter (plus `external`, observe-only) run
//! here; other adapters and remote hosts fail their step with a clear message.

use crate::identity::RuntimeIdentity;
use crate::probe::{self, ProbeContext, ProbeOutcome};
use crate::process::{self, ProcessSpec, StopOutcome};
use crate::secrets::SecretResolver;
use crate::statedir::StateDir;
use flotilla_model::inventory::{AdapterKind, TransportKind};
use flotilla_model::topology::{Check, Component, Probe};
use flotilla_model::Topology;
use flotilla_plan::{Action, Plan, Step};
use flotilla_store::{NewStep, OperationId, Outcome, RemovalReason, StepId, Store};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

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
    pub cancelled: Arc<std::sync::atomic::AtomicBool>,
    /// SSH connections for steps of components on remote hosts (`None`: this
    /// executor runs on the component's own host, e.g. `flotilla host serve`).
    pub fleet: Option<Arc<crate::ssh::Fleet>>,
}

impl Executor {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
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
        let mut report = ApplyReport {
            steps: Vec::new(),
            failed: None,
            cleanup: Vec::new(),
            started: Vec::new(),
        };
        // Steps run as soon as the steps they depend on have succeeded, not wave by
        // wave: a wave only says which steps may run together. A step depends on an
        // earlier-wave step for the same component, on its upstream's start (for
        // starts) or its downstream's stop (for stops), and every start waits for
        // every stop.
        let steps: Vec<(usize, Step)> = plan
            .waves
            .iter()
            .enumerate()
            .flat_map(|(i, w)| w.steps.iter().cloned().map(move |s| (i + 1, s)))
            .collect();
        let stopping = |s: &Step| {
            s.action == Action::Stop
                || (s.action == Action::Noop && plan.operation.verb == flotilla_plan::Verb::Stop)
        };
        let id = |s: &Step| self.topology.id(&s.component);
        let deps: Vec<Vec<usize>> = steps
            .iter()
            .map(|(wj, sj)| {
                steps
                    .iter()
                    .enumerate()
                    .filter(|(_, (wi, si))| {
                        if wi >= wj {
                            return false;
                        }
                        let (Some(i), Some(j)) = (id(si), id(sj)) else {
                            return true;
                        };
                        i == j
                            || stopping(si) != stopping(sj)
                            || (!stopping(sj) && self.topology.upstream(j).contains(&i))
                            || (stopping(sj) && self.topology.downstream(j).contains(&i))
                    })
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect();
        // Stopping what is already stopped changes nothing but intent: it is no
        // longer meant to run (so it is not `down-unexpectedly` any more).
        if plan.operation.verb == flotilla_plan::Verb::Stop {
            for (_, step) in steps.iter().filter(|(_, s)| s.action == Action::Noop) {
                let managed = self
                    .topology
                    .id(&step.component)
                    .is_some_and(|id| self.topology.component(id).is_managed());
                if !managed {
                    continue;
                }
                let remote = self
                    .topology
                    .hosts
                    .get(&step.host)
                    .is_some_and(|h| h.transport == TransportKind::Ssh);
                if let (Some(fleet), true) = (&self.fleet, remote) {
                    // The host keeps its components' intent: a stop there of what is
                    // not running records it (and changes nothing else).
                    let stop = Step {
                        action: Action::Stop,
                        ..step.clone()
                    };
                    if let Err((why, _)) = self.remote_step(fleet, &stop).await {
                        self.emit(Event::Note(format!(
                            "`{}` on {}: could not record that it should stay stopped: {why}",
                            step.component, step.host
                        )));
                    }
                } else {
                    let _ = self.journal(|s| {
                        s.set_desired(
                            &step.component,
                            flotilla_model::status::DesiredLifecycle::Stopped,
                            now_ms(),
                        )
                    });
                }
            }
        }
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
                        tasks.spawn(async move { (k, me.run_step(wave, step).await) });
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
    /// report with outcome `failed`).
    pub async fn run_step(&self, wave: usize, step: Step) -> StepReport {
        let began = Instant::now();
        let step_id = self.begin(wave, &step, step.action.as_str());
        let (outcome, summary, evidence) = match self.perform(&step).await {
            Ok((summary, evidence)) => (Outcome::Succeeded, summary, evidence),
            Err((summary, evidence)) => (Outcome::Failed, summary, evidence),
        };
        // A start that got as far as launching a process recorded its identity.
        let launched = matches!(step.action, Action::Start | Action::Restart)
            && evidence.get("identity").is_some_and(|i| !i.is_null())
            || evidence
                .get("start")
                .and_then(|s| s.get("identity"))
                .is_some_and(|i| !i.is_null());
        self.finish(step_id, step, began, outcome, summary, evidence, launched)
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

    /// Does one step; `Ok((summary, evidence))` or `Err((summary, evidence))`.
    async fn perform(
        &self,
        step: &Step,
    ) -> Result<(String, serde_json::Value), (String, serde_json::Value)> {
        let c = self.component(&step.component).clone();
        let fail = |msg: String| (msg, serde_json::json!({}));
        if step.action == Action::Noop {
            return Ok((step.reason.clone(), serde_json::json!({ "no_op": true })));
        }
        let host = &self.topology.hosts[&c.host];
        // On the controller, a step of a component on an ssh host runs there.
        if let (Some(fleet), TransportKind::Ssh) = (&self.fleet, host.transport) {
            return self.remote_step(fleet, step).await;
        }
        if step.action.is_mutating() {
            match c.adapter {
                Some(AdapterKind::Process | AdapterKind::SshTunnel) => {}
                Some(other) => {
                    return Err(fail(format!(
                        "`{}` uses the `{}` adapter, which this version cannot run yet",
                        c.name,
                        other.as_str()
                    )))
                }
                None => {
                    return Err(fail(format!(
                        "`{}` is external: never started or stopped",
                        c.name
                    )))
                }
            }
        }
        match step.action {
            Action::Start => self.start(&c).await,
            Action::Stop => self.stop(&c).await,
            Action::Restart => {
                let (stopped, ev1) = self.stop(&c).await?;
                let (started, ev2) = self.start(&c).await?;
                Ok((
                    format!("{stopped}; {started}"),
                    serde_json::json!({ "stop": ev1, "start": ev2 }),
                ))
            }
            Action::AwaitReady => self.await_ready(&c).await,
            Action::Noop => unreachable!("handled above"),
        }
    }

    /// Runs `step` on its component's host through `flotilla host serve` there.
    async fn remote_step(
        &self,
        fleet: &crate::ssh::Fleet,
        step: &Step,
    ) -> Result<(String, serde_json::Value), (String, serde_json::Value)> {
        let c = self.component(&step.component);
        let call = crate::remote::Call::Step {
            snapshot: self.topology.snapshot(&c.host),
            step: step.clone(),
            wave: 0,
            operation: format!("{} on {}", self.operation, crate::operate::who()),
            ready_timeout_ms: self.ready_timeout.as_millis() as u64,
        };
        let grace = c
            .stop
            .as_ref()
            .map(|s| s.grace_period.0)
            .unwrap_or_default();
        // Readiness, then a stop's grace period and SIGKILL wait, plus the exchange.
        let allowed = self.ready_timeout + grace + Duration::from_secs(30);
        let cancelled = Arc::clone(&self.cancelled);
        let give_up = Box::pin(async move {
            while !cancelled.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        match crate::remote::call_until(fleet, &c.host, call, allowed, Some(give_up)).await {
            Ok(crate::remote::Reply::Step { report }) => {
                let mut evidence = report.evidence;
                if let serde_json::Value::Object(map) = &mut evidence {
                    map.insert("host".into(), c.host.clone().into());
                }
                if report.outcome == Outcome::Succeeded {
                    Ok((format!("on {}: {}", c.host, report.summary), evidence))
                } else {
                    Err((format!("on {}: {}", c.host, report.summary), evidence))
                }
            }
            Ok(other) => Err((
                format!("host `{}` answered a step with {other:?}", c.host),
                serde_json::json!({ "host": c.host }),
            )),
            Err(e) => {
                let summary = if self.is_cancelled() {
                    format!("interrupted (Ctrl-C); host `{}` was told to stop what this step launched there ({e})", c.host)
                } else {
                    e.to_string()
                };
                Err((
                    summary,
                    serde_json::json!({ "host": c.host, "transport_error": e.to_string() }),
                ))
            }
        }
    }

    /// The argv of `c`: its command, or for an `ssh-tunnel` the `ssh` forward.
    fn argv(&self, c: &Component) -> Result<Vec<String>, String> {
        match (&c.adapter, &c.tunnel) {
            (Some(AdapterKind::SshTunnel), Some(t)) => {
                let via = self.topology.hosts.get(&t.via).ok_or_else(|| {
                    format!(
                        "tunnel `{}` goes through host `{}`, which this host does not know",
                        c.name, t.via
                    )
                })?;
                Ok(crate::ssh::tunnel_argv(t, via))
            }
            (Some(AdapterKind::SshTunnel), None) => Err(format!("`{}` has no tunnel", c.name)),
            _ => Ok(c.command.clone()),
        }
    }

    /// Waits for `probe` to pass, within the readiness timeout: polling every few
    /// milliseconds during the first seconds (so a component that becomes ready is
    /// noticed within tens of milliseconds), then backing off to the probe's period.
    async fn wait_for(
        &self,
        probe: &Probe,
        ctx: &ProbeContext<'_>,
        exited: Option<probe::ExitedFn<'_>>,
    ) -> Result<ProbeOutcome, probe::WaitError> {
        const FAST_PHASE: Duration = Duration::from_secs(10);
        const FAST_INTERVAL: Duration = Duration::from_millis(10);
        let deadline = Instant::now() + self.ready_timeout;
        let cancelled = Arc::clone(&self.cancelled);
        let stop_waiting = move || -> Option<String> {
            if cancelled.load(std::sync::atomic::Ordering::SeqCst) {
                return Some("interrupted (Ctrl-C)".into());
            }
            exited.and_then(|f| f())
        };
        let exited: Option<probe::ExitedFn<'_>> = Some(&stop_waiting);
        let report = |o: &ProbeOutcome| {
            (self.events)(Event::Probe {
                component: ctx.component.clone(),
                outcome: o.clone(),
            })
        };
        let fast = probe::WaitOptions {
            deadline: (Instant::now() + FAST_PHASE).min(deadline),
            exited,
            first_retry: Duration::from_millis(5),
            max_interval: Some(probe.period.0.min(FAST_INTERVAL)),
        };
        match probe::wait_ready_with(probe, ctx, &fast, report).await {
            Err(e) if e.reason == probe::WaitFailure::Deadline && Instant::now() < deadline => {
                let mut slow = probe.clone();
                slow.initial_delay = flotilla_model::values::HumanDuration(Duration::ZERO);
                let opts = probe::WaitOptions {
                    deadline,
                    exited,
                    first_retry: FAST_INTERVAL,
                    max_interval: None,
                };
                probe::wait_ready_with(&slow, ctx, &opts, report).await
            }
            other => other,
        }
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

    async fn start(
        &self,
        c: &Component,
    ) -> Result<(String, serde_json::Value), (String, serde_json::Value)> {
        // A foreign process on one of its ports is a conflict, never adopted. A
        // connection attempt tells cheaply whether anything listens; only then is
        // /proc read to name it.
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
        let listening =
            tokio::task::spawn_blocking(move || process::listeners_on(&ports).unwrap_or_default())
                .await
                .unwrap_or_default();
        for (name, ep) in &c.endpoints {
            if !ep.is_local_bind() {
                continue;
            }
            if let Some(ls) = listening.get(&ep.port).cloned() {
                if let Some(l) = ls.first() {
                    let who = l.describe();
                    return Err((
                        format!(
                            "port {} (endpoint `{name}`) is already in use by {who}: not starting `{}` and not adopting that process",
                            ep.port, c.name
                        ),
                        serde_json::json!({ "conflict": { "port": ep.port, "listeners": ls } }),
                    ));
                }
            }
        }
        let mut env = self
            .secrets
            .resolve_env(&c.name, &c.env)
            .map_err(|e| (e.to_string(), serde_json::json!({})))?;
        env.push((
            process::INSTANCE_MARKER.to_string(),
            process::instance_marker(&self.operation.to_string(), &c.name, self.state.root()),
        ));
        let argv = self.argv(c).map_err(|e| (e, serde_json::json!({})))?;
        let (program, args) = argv.split_first().ok_or_else(|| {
            (
                format!("`{}` has no command", c.name),
                serde_json::json!({}),
            )
        })?;
        let spec = ProcessSpec {
            component: c.name.clone(),
            program: program.clone(),
            args: args.to_vec(),
            env,
            cwd: self.cwd(c),
            log_path: self.log_path(c),
            log_max_bytes: self.log_max_bytes,
            log_keep: self.log_keep,
        };
        let started = tokio::task::spawn_blocking(move || process::start(&spec))
            .await
            .expect("start task")
            .map_err(|e| (e.to_string(), serde_json::json!({})))?;
        let identity = started.identity.clone();
        let record = identity.instance_record(
            c,
            self.operation,
            now_ms(),
            self.log_path(c).display().to_string(),
        );
        self.journal(|s| {
            s.record_instance(&record)?;
            s.set_desired(
                &c.name,
                flotilla_model::status::DesiredLifecycle::Running,
                now_ms(),
            )
        })
        .map_err(|e| (e, serde_json::json!({})))?;
        let ident_json = serde_json::to_value(&identity).unwrap_or_default();
        let probe = c.readiness.clone().unwrap_or_else(default_readiness);
        let watch = started.child;
        let secrets = Arc::clone(&self.secrets);
        let lookup = move |n: &str| secrets.get(n);
        let ctx = ProbeContext {
            component: c.name.clone(),
            identity: Some(identity.clone()),
            log_path: Some(self.log_path(c)),
            log_start_offset: started.log_start_offset,
            secrets: &lookup,
        };
        let alive = || watch.exit_description();
        match self.wait_for(&probe, &ctx, Some(&alive)).await {
            Ok(o) => {
                // Wrappers (env, shims, scripts ending in exec) may have exec'd the real
                // program since the first measurement: record what runs now.
                let ident_json = match crate::identity::measure(identity.pid) {
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
                Ok((
                    format!("started pid {} and ready: {}", identity.pid, o.evidence),
                    serde_json::json!({ "identity": ident_json, "probe": o }),
                ))
            }
            Err(w) => {
                let tail = crate::logs::tail_log(&self.log_path(c), 10).unwrap_or_default();
                let last = w
                    .last
                    .as_ref()
                    .map(|o| o.evidence.clone())
                    .unwrap_or_else(|| "no probe attempt".into());
                Err((
                    format!(
                        "`{}` did not become ready: {} (last probe: {last})",
                        c.name, w.reason
                    ),
                    serde_json::json!({ "identity": ident_json, "last_probe": w.last, "attempts": w.attempts, "log_tail": tail }),
                ))
            }
        }
    }

    async fn stop(
        &self,
        c: &Component,
    ) -> Result<(String, serde_json::Value), (String, serde_json::Value)> {
        let rec = self
            .journal(|s| s.instance(&c.name))
            .map_err(|e| (e, serde_json::json!({})))?;
        let Some(rec) = rec else {
            self.journal(|s| {
                s.set_desired(
                    &c.name,
                    flotilla_model::status::DesiredLifecycle::Stopped,
                    now_ms(),
                )
            })
            .map_err(|e| (e, serde_json::json!({})))?;
            return Ok((
                format!("`{}` was not running (no instance recorded)", c.name),
                serde_json::json!({}),
            ));
        };
        let identity = RuntimeIdentity::from(&rec);
        let stop = c
            .stop
            .clone()
            .expect("managed components have stop settings");
        let signal = stop.signal.as_str().to_string();
        let grace = stop.grace_period.0;
        let ident = identity.clone();
        let outcome = tokio::task::spawn_blocking(move || process::stop(&ident, &signal, grace))
            .await
            .expect("stop task")
            .map_err(|e| (e.to_string(), serde_json::json!({ "pid": rec.pid })))?;
        let ev = serde_json::to_value(&outcome).unwrap_or_default();
        let (summary, reason) = match &outcome {
            StopOutcome::Stopped {
                signal,
                escalated_to_kill,
                took,
            } => (
                format!(
                    "stopped pid {} with {signal}{} in {} ms",
                    rec.pid,
                    if *escalated_to_kill {
                        ", then SIGKILL after the grace period"
                    } else {
                        ""
                    },
                    took.as_millis()
                ),
                RemovalReason::Stopped,
            ),
            StopOutcome::AlreadyGone { .. } => (
                format!("pid {} had already exited", rec.pid),
                RemovalReason::Vanished,
            ),
            StopOutcome::IdentityMismatch { why, .. } => {
                let _ =
                    self.journal(|s| s.remove_instance(&c.name, RemovalReason::Vanished, now_ms()));
                return Err((
                    format!(
                        "pid {} now belongs to another process ({why}): not signalled",
                        rec.pid
                    ),
                    ev,
                ));
            }
        };
        self.journal(|s| {
            s.remove_instance(&c.name, reason, now_ms())?;
            s.set_desired(
                &c.name,
                flotilla_model::status::DesiredLifecycle::Stopped,
                now_ms(),
            )
        })
        .map_err(|e| (e, ev.clone()))?;
        Ok((summary, ev))
    }

    async fn await_ready(
        &self,
        c: &Component,
    ) -> Result<(String, serde_json::Value), (String, serde_json::Value)> {
        let Some(probe) = c.readiness.clone() else {
            return Ok((
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
        };
        match self.wait_for(&probe, &ctx, None).await {
            Ok(o) => Ok((
                format!("ready: {}", o.evidence),
                serde_json::json!({ "probe": o }),
            )),
            Err(w) => Err((
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
