//! One mutating invocation, end to end: take the lifecycle lock, open the journal,
//! reconcile it with what really runs (so a re-run after `kill -9` starts no
//! duplicates), observe, plan, show the plan, journal the operation, apply it, record
//! a stack's start order, and finish the journal entry.
//!
//! The CLI's `up`, `down`, `start`, `stop`, `restart` and `apply` are thin calls into
//! [`Invocation::run`].

use crate::executor::{ApplyReport, Event, Executor};
use crate::identity::{self, IdentityMatch, RuntimeIdentity};
use crate::lock::{LifecycleLock, LockError, LockHolder};
use crate::observe::{Observer, StatusReport};
use crate::secrets::SecretResolver;
use crate::statedir::StateDir;
use crate::this_process::{now_ms, who};
use flotilla_model::status::Observed;
use flotilla_model::{Target, Topology};
use flotilla_plan::{Operation, Plan, Refusal, Verb};
use flotilla_store::{NewOperation, Outcome, RemovalReason, Store};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why an invocation could not run (as opposed to a plan that failed part-way).
#[derive(Debug, thiserror::Error)]
pub enum OperateError {
    /// Another invocation holds the lifecycle lock.
    #[error(transparent)]
    Locked(#[from] LockError),
    /// The journal could not be used.
    #[error("state database {path}")]
    Store {
        /// `state.db`.
        path: PathBuf,
        /// Cause.
        #[source]
        source: Box<flotilla_store::StoreError>,
    },
    /// Secrets could not be read.
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretError),
    /// The state directory could not be created or read.
    #[error("cannot use state directory {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The state directory could not be resolved (no home directory, or a file
    /// where it should be).
    #[error("cannot use the state directory")]
    StateDirUnresolved(#[source] std::io::Error),
    /// A plan given to `apply` no longer matches what it was computed from.
    #[error("stale plan: {0}; plan again")]
    StalePlan(String),
}

/// What came of an invocation.
#[derive(Debug)]
pub enum InvocationOutcome {
    /// The planner refused.
    Refused(Refusal),
    /// `--dry-run`: the plan, not applied.
    Planned(Plan),
    /// Applied (successfully or not; see the report).
    Applied {
        /// The plan.
        plan: Plan,
        /// What happened.
        report: ApplyReport,
        /// The journal's id for it.
        operation: String,
    },
}

/// Everything one invocation needs.
pub struct Invocation {
    /// The topology.
    pub topology: Arc<Topology>,
    /// State directory.
    pub state: StateDir,
    /// Base directory for relative paths (the inventory's directory).
    pub base_dir: PathBuf,
    /// Readiness deadline per started component.
    pub ready_timeout: Duration,
    /// The command line, for the journal and the lock.
    pub command_line: String,
    /// Progress callback.
    pub events: Arc<dyn Fn(Event) + Send + Sync>,
    /// Called with the plan before anything changes (every mutating verb prints it).
    pub show_plan: Box<dyn Fn(&Plan) + Send + Sync>,
    /// How calls reach the topology's remote hosts: SSH, and for `agent` hosts the
    /// authority ([`crate::transport::agent::AgentTransport`]).
    pub fleet: Arc<dyn crate::transport::Transport>,
    /// Time allowed per remote host to answer an observation.
    pub host_timeout: Duration,
    /// Cancelled by the caller (the binary, on Ctrl-C) to stop the run: no further
    /// step starts, waits stop, and what this run started is stopped and journaled.
    /// How a process ends when asked twice is the caller's business.
    pub cancel: tokio_util::sync::CancellationToken,
}

/// Opens the journal at the state directory (creating the directory).
///
/// # Errors
/// [`OperateError::StateDir`] or [`OperateError::Store`].
pub fn open_store(state: &StateDir) -> Result<Store, OperateError> {
    if !state.root().exists() {
        // The journal and logs may hold what components print: owner-only.
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state.root())
            .map_err(|source| OperateError::StateDir {
                path: state.root().to_path_buf(),
                source,
            })?;
    }
    std::fs::create_dir_all(state.root()).map_err(|source| OperateError::StateDir {
        path: state.root().to_path_buf(),
        source,
    })?;
    Store::open(&state.database()).map_err(|source| OperateError::Store {
        path: state.database(),
        source: Box::new(source),
    })
}

/// The secrets a host resolves: the environment, then `secrets.env` in the state
/// directory when it exists.
///
/// # Errors
/// A secrets file readable by others, or unreadable.
pub fn secrets(state: &StateDir) -> Result<SecretResolver, OperateError> {
    let file = state.secrets_file();
    if file.exists() {
        Ok(SecretResolver::new(true, Some(file))?)
    } else {
        Ok(SecretResolver::new(true, None)?.also_looked_for(file))
    }
}

/// The arguments of `flotilla plan` that compute `op` again (`start chat --cascade`).
fn plan_args(op: &flotilla_plan::Operation) -> String {
    op.to_string()
        .strip_prefix("flotilla ")
        .unwrap_or_default()
        .to_string()
}

/// `; it would now: start llm (was: no-op), …` — the steps whose action differs
/// between a saved plan and the one computed now.
fn changed_steps(saved: &flotilla_plan::Plan, fresh: &flotilla_plan::Plan) -> String {
    let was: std::collections::BTreeMap<&str, flotilla_plan::Action> = saved
        .steps()
        .map(|s| (s.component.as_str(), s.action))
        .collect();
    let now: std::collections::BTreeMap<&str, flotilla_plan::Action> = fresh
        .steps()
        .map(|s| (s.component.as_str(), s.action))
        .collect();
    let names: std::collections::BTreeSet<&str> = was.keys().chain(now.keys()).copied().collect();
    let diffs: Vec<String> = names
        .into_iter()
        .filter(|n| was.get(n) != now.get(n))
        .map(|n| {
            let show =
                |a: Option<&flotilla_plan::Action>| a.map(|a| a.as_str()).unwrap_or("nothing");
            format!("{} {n} (was: {})", show(now.get(n)), show(was.get(n)))
        })
        .collect();
    if diffs.is_empty() {
        String::new()
    } else {
        format!("; it would now: {}", diffs.join(", "))
    }
}

/// A component's log is rotated when it grows past this many bytes (10 MiB).
pub const LOG_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated copies kept (`X.log.1` … `X.log.3`).
pub const LOG_KEEP: u32 = 3;

/// Where and how long to observe remote hosts.
#[derive(Clone, Copy)]
pub struct RemoteObservation<'a> {
    /// How remote hosts are asked.
    pub transport: &'a dyn crate::transport::Transport,
    /// Time allowed per host (connecting included); a host that does not answer
    /// within it is `unreachable`.
    pub host_timeout: Duration,
}

/// Observes (read-only as far as the fleet goes) and returns the status report and
/// the planner's view. Components on `ssh` hosts are observed by their host, all
/// hosts at once, each within `remote.host_timeout`; what a host answers is
/// remembered in the journal, and shown with its age while the host cannot be
/// reached (observability `unreachable`, never `stopped`).
///
/// # Errors
/// Journal read errors.
pub async fn observe(
    topology: &Topology,
    store: &mut Store,
    state: &StateDir,
    secrets: &SecretResolver,
    names: &[String],
    remote: RemoteObservation<'_>,
) -> Result<(StatusReport, Observed), OperateError> {
    let map = |source| OperateError::Store {
        path: state.database(),
        source: Box::new(source),
    };
    let wanted =
        |c: &&flotilla_model::topology::Component| names.is_empty() || names.contains(&c.name);
    // Remote hosts with selected components, each asked once, all at once.
    let mut by_host: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for c in topology.components.iter().filter(wanted) {
        if topology.hosts.get(&c.host).is_some_and(|h| h.is_remote()) {
            by_host
                .entry(c.host.as_str())
                .or_default()
                .push(c.name.clone());
        }
    }
    let remote_calls = by_host.iter().map(|(host, comps)| async move {
        // The host answers in time even when a probe there is slow: it gets the
        // host timeout less what connecting and the exchange may take.
        let budget = remote.host_timeout.saturating_sub(
            (remote.host_timeout / 4).clamp(Duration::from_millis(300), Duration::from_secs(3)),
        );
        let call = crate::remote::Call::Observe {
            snapshot: topology.snapshot(host),
            names: if names.is_empty() {
                Vec::new()
            } else {
                comps.clone()
            },
            budget_ms: Some(budget.as_millis() as u64),
        };
        let answer = remote
            .transport
            .call(host, call, remote.host_timeout, None)
            .await;
        (*host, answer)
    });
    let report_fut = async {
        Observer {
            adapters: crate::adapter::Adapters::native(),
            topology,
            store,
            state,
            secrets,
            here: None,
            probe_deadline: None,
        }
        .observe(names)
        .await
    };
    let (report, answers) = tokio::join!(report_fut, futures_util::future::join_all(remote_calls));
    let mut report = report.map_err(map)?;
    let mut remote_statuses: Vec<crate::observe::ComponentStatus> = Vec::new();
    for (host, answer) in answers {
        match answer {
            Ok(crate::remote::Reply::Observed { report: r }) => {
                let rows: Vec<(String, String)> = r
                    .components
                    .iter()
                    .map(|c| (c.name.clone(), serde_json::to_string(c).unwrap_or_default()))
                    .collect();
                store
                    .record_host_observations(host, &rows, r.observed_at_ms)
                    .map_err(map)?;
                // The host's operation ids are its own journal's: say whose.
                remote_statuses.extend(r.components.into_iter().map(|mut c| {
                    if let flotilla_model::status::StartedBy::Flotilla { operation } =
                        &mut c.started_by
                    {
                        *operation = format!("{host}:{operation}");
                    }
                    if let Some(rt) = c.runtime_identity.as_mut() {
                        rt.started_by_operation = format!("{host}:{}", rt.started_by_operation);
                    }
                    for e in c.evidence.iter_mut() {
                        if !e.source.starts_with(host) {
                            e.source = format!("{host}: {}", e.source);
                        }
                    }
                    c
                }));
            }
            Ok(other) => {
                let e = crate::ssh::TransportError::Failed {
                    host: host.to_string(),
                    detail: format!("answered an observation with {other:?}"),
                };
                remote_statuses
                    .extend(unseen(topology, store, host, &by_host[host], &e).map_err(map)?);
            }
            Err(e) => {
                remote_statuses
                    .extend(unseen(topology, store, host, &by_host[host], &e).map_err(map)?);
            }
        }
    }
    if !remote_statuses.is_empty() {
        let mut all: std::collections::HashMap<String, crate::observe::ComponentStatus> = report
            .components
            .drain(..)
            .chain(remote_statuses)
            .map(|c| (c.name.clone(), c))
            .collect();
        let mut merged: Vec<crate::observe::ComponentStatus> = topology
            .order()
            .iter()
            .filter_map(|&id| all.remove(&topology.component(id).name))
            .collect();
        // Orphans (not in the inventory) last, by name.
        let mut rest: Vec<_> = all.into_values().collect();
        rest.sort_by(|a, b| a.name.cmp(&b.name));
        merged.extend(rest);
        crate::observe::mark_dependency_down(topology, &mut merged);
        report.components = merged;
    }
    let observed = report.observed(store.stack_records().map_err(map)?);
    Ok((report, observed))
}

/// The status of `names` on `host`, which could not be observed (`error`): their
/// last-known state from the journal, with its age in the evidence.
fn unseen(
    topology: &Topology,
    store: &Store,
    host: &str,
    names: &[String],
    error: &crate::ssh::TransportError,
) -> Result<Vec<crate::observe::ComponentStatus>, flotilla_store::StoreError> {
    use flotilla_model::status::{Condition, Health, Lifecycle, Observability};
    let last: std::collections::HashMap<String, (crate::observe::ComponentStatus, i64)> = store
        .host_observations(host)?
        .into_iter()
        .filter_map(|o| {
            serde_json::from_str::<crate::observe::ComponentStatus>(&o.status_json)
                .ok()
                .map(|s| (o.component, (s, o.observed_at_ms)))
        })
        .collect();
    let observability = match error {
        e if e.is_unreachable() => Observability::Unreachable,
        crate::ssh::TransportError::UnknownHostKey { .. }
        | crate::ssh::TransportError::ChangedHostKey { .. }
        | crate::ssh::TransportError::Authentication { .. } => Observability::NotPermitted,
        _ => Observability::Unsupported,
    };
    let now = now_ms();
    Ok(names
        .iter()
        .filter_map(|n| topology.id(n).map(|id| topology.component(id)))
        .map(|c| {
            let before = last.get(&c.name);
            let mut evidence = vec![crate::observe::Evidence {
                signal: flotilla_model::status::Signal::Observability,
                source: format!(
                    "{} {host}",
                    topology
                        .hosts
                        .get(host)
                        .map_or("ssh", |h| h.transport.as_str())
                ),
                at_ms: now,
                saw: error.to_string(),
            }];
            let last_known = before.map(|(s, at)| crate::observe::LastKnown {
                lifecycle: s.lifecycle,
                health: s.health,
                condition: s.condition,
                observed_at_ms: *at,
            });
            evidence.push(crate::observe::Evidence {
                signal: flotilla_model::status::Signal::Lifecycle,
                source: "journal (last observation)".into(),
                at_ms: now,
                saw: match &last_known {
                    Some(l) => format!(
                        "last seen {} ({}) {} ago",
                        crate::observe::value_name(&l.lifecycle),
                        crate::observe::value_name(&l.health),
                        crate::observe::age(now - l.observed_at_ms)
                    ),
                    None => "never observed from here".into(),
                },
            });
            crate::observe::ComponentStatus {
                name: c.name.clone(),
                host: c.host.clone(),
                lifecycle: Lifecycle::Unknown,
                // Intent lives in the host's journal: unknown until it answers once.
                desired: before.and_then(|(s, _)| s.desired),
                health: Health::Unknown,
                condition: Condition::Attention,
                observability,
                ownership: before
                    .map(|(s, _)| s.ownership)
                    .unwrap_or_else(|| crate::observe::ownership(c)),
                started_by: before
                    .map(|(s, _)| s.started_by.clone())
                    .unwrap_or_default(),
                config_identity: crate::observe::ConfigIdentity {
                    selected: c.config_digest(),
                    running: before.and_then(|(s, _)| s.config_identity.running.clone()),
                },
                runtime_identity: before.and_then(|(s, _)| s.runtime_identity.clone()),
                config_changes: Vec::new(),
                evidence,
                last_known,
                owner_error: None,
                restarts: None,
                running_ports: None,
            }
        })
        .collect())
}

/// Brings the journal in line with reality: unfinished operations whose process is
/// gone are marked interrupted; recorded instances whose process is gone (or whose
/// pid was reused) are removed as vanished — their desired lifecycle stays, so status
/// shows them `down-unexpectedly`.
pub(crate) fn reconcile(
    topology: &Topology,
    state: &StateDir,
    store: &mut Store,
) -> Result<Vec<String>, flotilla_store::StoreError> {
    let mut notes = Vec::new();
    for op in store.unfinished_operations()? {
        if identity::measure(op.pid).ok().flatten().is_none() {
            store.mark_interrupted(op.id, now_ms())?;
            notes.push(format!(
                "{} (`{}`) was interrupted; reconciled with what runs",
                op.id, op.command_line
            ));
        }
    }
    for rec in store.instances()? {
        // A container's instance is the engine's to tell about (its adapter
        // observes it, by container id): no process of this machine measures it.
        // Nor is an instance that is no process here at all (pid 0: a cluster's pods).
        if crate::adapter::container::is_container_record(&rec.exe) || rec.pid == 0 {
            continue;
        }
        let expected = RuntimeIdentity::from(&rec);
        let measured = identity::measure(rec.pid).ok().flatten();
        let verdict = identity::matches(&expected, measured.as_ref());
        // A leader that exited while its process group lives on is still this
        // component's instance: its group is what a stop stops.
        let group_lives =
            verdict == IdentityMatch::Gone && !crate::observe::surviving_group(&rec).is_empty();
        if verdict != IdentityMatch::Same && !group_lives {
            store.remove_instance(&rec.component, RemovalReason::Vanished, now_ms())?;
            notes.push(format!(
                "`{}` (pid {}) is no longer running",
                rec.component, rec.pid
            ));
        }
    }
    // A process launched by an invocation killed before it journaled the instance
    // carries that invocation's marker: it is ours, so record it (never a duplicate).
    let known: std::collections::BTreeSet<String> = store
        .instances()?
        .into_iter()
        .map(|i| i.component)
        .collect();
    for (pid, op_id, component) in crate::observe::marked_instances(store, state)? {
        let Some(id) = topology.id(&component) else {
            continue;
        };
        if known.contains(&component) {
            continue;
        }
        let Ok(Some(identity)) = identity::measure(pid) else {
            continue;
        };
        let c = topology.component(id);
        store.record_instance(&crate::identity::instance_record(
            &identity,
            c,
            op_id,
            now_ms(),
            String::new(),
        ))?;
        store.set_desired(
            &component,
            flotilla_model::status::DesiredLifecycle::Running,
            now_ms(),
        )?;
        notes.push(format!(
            "`{component}` (pid {pid}) was started by {op_id} before it was interrupted; recorded"
        ));
    }
    Ok(notes)
}

impl Invocation {
    /// Refuses a saved plan that no longer holds (`why`), journaling the refusal so
    /// that `operations` shows it like any other.
    fn refuse_stale(
        &self,
        store: &mut Store,
        plan: &Plan,
        why: String,
    ) -> Result<InvocationOutcome, OperateError> {
        self.journal_refusal(
            store,
            &plan.operation,
            serde_json::json!({ "stale_plan": &why }),
            &format!("stale plan: {why}"),
        )?;
        Err(OperateError::StalePlan(why))
    }

    /// Journals a refused operation `op` (`plan_json`: what was refused, `error`:
    /// why): refusals are operations too, and `operations` shows them.
    fn journal_refusal(
        &self,
        store: &mut Store,
        op: &Operation,
        plan_json: serde_json::Value,
        error: &str,
    ) -> Result<(), OperateError> {
        let map = |source| OperateError::Store {
            path: self.state.database(),
            source: Box::new(source),
        };
        let refused = NewOperation {
            verb: op.verb.to_string(),
            target: op.target.clone(),
            flags: Vec::new(),
            plan_digest: String::new(),
            topology_digest: self.topology.digest().to_string(),
            plan_json: plan_json.to_string(),
            who: who(),
            pid: std::process::id(),
            command_line: self.command_line.clone(),
            started_at_ms: now_ms(),
        };
        let id = store.begin_operation(&refused).map_err(map)?;
        store
            .finish_operation(id, Outcome::Refused, now_ms(), Some(error))
            .map_err(map)
    }

    /// Plans `op` (or takes `given`, checking it is not stale), shows the plan, and
    /// unless `dry_run` applies it under the lifecycle lock, journaled.
    ///
    /// # Errors
    /// [`OperateError`]: lock held, journal or secrets unusable, stale plan.
    pub async fn run(
        &self,
        op: Option<&Operation>,
        given: Option<Plan>,
        dry_run: bool,
    ) -> Result<InvocationOutcome, OperateError> {
        let _lock = if dry_run { None } else { Some(self.lock()?) };
        self.run_locked(op, given, dry_run).await
    }

    /// Whether any component of the topology runs on this machine (not every one on
    /// a remote host).
    fn runs_here(&self) -> bool {
        self.topology.components.iter().any(|c| {
            self.topology
                .hosts
                .get(&c.host)
                .is_none_or(|h| !h.is_remote())
        })
    }

    /// Takes the lock a mutating invocation holds: the lifecycle lock, or when
    /// nothing runs here (every component on a remote host) the controller's own
    /// lock, so that this machine's agent (sharing the state directory) can still
    /// run the steps sent to it.
    ///
    /// # Errors
    /// [`OperateError::Locked`] naming the holder.
    pub fn lock(&self) -> Result<LifecycleLock, OperateError> {
        let holder = LockHolder::this_process(self.command_line.clone());
        Ok(if self.runs_here() {
            LifecycleLock::acquire(self.state.root(), &holder)?
        } else {
            LifecycleLock::acquire_controller(self.state.root(), &holder)?
        })
    }

    /// [`Invocation::run`] for a caller that already holds [`Invocation::lock`]
    /// (`adopt`, which holds it across several operations).
    ///
    /// # Errors
    /// As [`Invocation::run`].
    pub async fn run_locked(
        &self,
        op: Option<&Operation>,
        given: Option<Plan>,
        dry_run: bool,
    ) -> Result<InvocationOutcome, OperateError> {
        let runs_here = self.runs_here();
        let map = |source| OperateError::Store {
            path: self.state.database(),
            source: Box::new(source),
        };
        let mut store = open_store(&self.state)?;
        // Local instances are reconciled and their logs rotated by whoever runs
        // them here (under the lifecycle lock), not by a controller of remote hosts.
        if !dry_run && runs_here {
            for note in reconcile(&self.topology, &self.state, &mut store).map_err(map)? {
                tracing::info!("{note}");
            }
            // Logs of components that keep running are rotated too, not only at start
            // (copy-truncate: their writers append, so nothing is lost).
            for rec in store.instances().map_err(map)? {
                let log = self.state.log(&rec.component);
                if let Err(e) = crate::logs::rotate_if_needed(&log, LOG_MAX_BYTES, LOG_KEEP) {
                    tracing::warn!(component = %rec.component, "log rotation: {e}");
                }
            }
        }
        let secrets = Arc::new(secrets(&self.state)?);
        let remote = RemoteObservation {
            transport: self.fleet.as_ref(),
            host_timeout: self.host_timeout,
        };
        let (status, observed) = observe(
            &self.topology,
            &mut store,
            &self.state,
            &secrets,
            &[],
            remote,
        )
        .await?;
        let plan = match (given, op) {
            (Some(plan), _) => {
                if plan.topology_digest != self.topology.digest() {
                    let changed =
                        match flotilla_plan::plan(&self.topology, &observed, &plan.operation) {
                            Ok(fresh) => changed_steps(&plan, &fresh),
                            Err(r) => format!("; now it would be refused: {r}"),
                        };
                    return self.refuse_stale(&mut store, &plan, format!(
                        "the inventory changed since it was planned (topology {} now, {} in the plan){changed}; re-plan: `flotilla plan {}`",
                        self.topology.digest(),
                        plan.topology_digest,
                        plan_args(&plan.operation)
                    ));
                }
                let now = observed.digest();
                if plan.observed_digest != now {
                    let mut unseen: Vec<&str> = status
                        .components
                        .iter()
                        .filter(|c| {
                            c.observability != flotilla_model::status::Observability::Observed
                        })
                        .map(|c| c.host.as_str())
                        .collect();
                    unseen.sort();
                    unseen.dedup();
                    let why = if unseen.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; host{} {} cannot be observed now (see `flotilla status`)",
                            if unseen.len() == 1 { "" } else { "s" },
                            unseen.join(", ")
                        )
                    };
                    let changed =
                        match flotilla_plan::plan(&self.topology, &observed, &plan.operation) {
                            Ok(fresh) => changed_steps(&plan, &fresh),
                            Err(r) => format!("; now it would be refused: {r}"),
                        };
                    return self.refuse_stale(&mut store, &plan, format!(
                        "what runs changed since it was planned (observed state {now} now, {} in the plan){why}{changed}; re-plan: `flotilla plan {}`",
                        plan.observed_digest,
                        plan_args(&plan.operation)
                    ));
                }
                // Same inputs must give the same plan: anything else was edited by hand.
                match flotilla_plan::plan(&self.topology, &observed, &plan.operation) {
                    Ok(fresh) if fresh == plan => plan,
                    _ => {
                        return self.refuse_stale(&mut store, &plan, format!(
                            "the plan is not what `{}` computes from the same inventory and state (was it edited?)",
                            plan.operation
                        ))
                    }
                }
            }
            (None, Some(op)) => match flotilla_plan::plan(&self.topology, &observed, op) {
                Ok(p) => p,
                Err(r) => {
                    if !dry_run {
                        self.journal_refusal(
                            &mut store,
                            op,
                            serde_json::json!({ "refusal": &r }),
                            &r.to_string(),
                        )?;
                    }
                    return Ok(InvocationOutcome::Refused(r));
                }
            },
            (None, None) => unreachable!("an operation or a plan"),
        };
        (self.show_plan)(&plan);
        // A running component left alone by this plan whose config changed since it
        // started keeps the old config until it is restarted: say so.
        for step in plan
            .steps()
            .filter(|s| s.action == flotilla_plan::Action::Noop)
        {
            let drifted = status.components.iter().any(|c| {
                c.name == step.component && c.condition == flotilla_model::status::Condition::Drift
            });
            if drifted {
                (self.events)(Event::Note(format!(
                    "`{}` runs an older config (drift): `flotilla restart {}` applies the new one",
                    step.component, step.component
                )));
            }
        }
        if dry_run {
            return Ok(InvocationOutcome::Planned(plan));
        }
        let new_op = NewOperation::from_plan(
            &plan,
            who(),
            std::process::id(),
            self.command_line.clone(),
            now_ms(),
        )
        .map_err(map)?;
        let op_id = store.begin_operation(&new_op).map_err(map)?;
        // What an `up` (a start or restart of a stack) will start is the stack's
        // before anything starts: killed midway, its `down` still stops it.
        if let (Some(Target::Stack(stack)), Verb::Start | Verb::Restart) = (
            self.topology.target(&plan.operation.target),
            plan.operation.verb,
        ) {
            let starting: Vec<String> = plan
                .steps()
                .filter(|s| s.action == flotilla_plan::Action::Start)
                .map(|s| s.component.clone())
                .collect();
            if !starting.is_empty() {
                let mut order: Vec<String> = store
                    .stack_records()
                    .map_err(map)?
                    .get(&stack.name)
                    .map(|r| r.start_order.clone())
                    .unwrap_or_default();
                order.retain(|n| !starting.contains(n));
                order.extend(starting);
                store
                    .record_stack_start(&stack.name, &order, now_ms())
                    .map_err(map)?;
            }
        }
        let store = Arc::new(Mutex::new(store));
        let exec = Arc::new(Executor {
            cancelled: self.cancel.clone(),
            topology: Arc::clone(&self.topology),
            state: self.state.clone(),
            store: Arc::clone(&store),
            secrets,
            base_dir: self.base_dir.clone(),
            ready_timeout: self.ready_timeout,
            log_max_bytes: LOG_MAX_BYTES,
            log_keep: LOG_KEEP,
            operation: op_id,
            events: Arc::clone(&self.events),
            transport: Some(Arc::clone(&self.fleet)),
            adapters: crate::adapter::Adapters::native(),
        });
        let report = exec.apply(&plan).await;
        drop(exec);
        let mut store = match Arc::try_unwrap(store) {
            Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
            Err(_) => unreachable!("the executor, the store's only other holder, is gone"),
        };
        // What this run did on remote hosts, seen from here: refresh their cached
        // observation (shown while a host is unreachable) so it is never older than
        // our own changes.
        let remote: Vec<String> = plan
            .steps()
            .filter(|s| {
                self.topology
                    .hosts
                    .get(&s.host)
                    .is_some_and(|h| h.is_remote())
            })
            .map(|s| s.component.clone())
            .collect();
        if !remote.is_empty() {
            let resolver = crate::operate::secrets(&self.state)?;
            let refresh = RemoteObservation {
                transport: self.fleet.as_ref(),
                host_timeout: self.host_timeout,
            };
            if let Err(e) = observe(
                &self.topology,
                &mut store,
                &self.state,
                &resolver,
                &remote,
                refresh,
            )
            .await
            {
                tracing::warn!("could not refresh what remote hosts show: {e}");
            }
        }
        // A stack's start order, for `down`.
        if let Some(Target::Stack(stack)) = self.topology.target(&plan.operation.target) {
            match plan.operation.verb {
                Verb::Start if report.succeeded() => {
                    let mut order: Vec<String> = store
                        .stack_records()
                        .map_err(map)?
                        .get(&stack.name)
                        .map(|r| r.start_order.clone())
                        .unwrap_or_default();
                    order.retain(|n| !report.started.contains(n));
                    order.extend(report.started.iter().cloned());
                    store
                        .record_stack_start(&stack.name, &order, now_ms())
                        .map_err(map)?;
                }
                Verb::Stop if report.succeeded() => store.clear_stack(&stack.name).map_err(map)?,
                _ => {}
            }
        }
        let (outcome, error) = match (&report.failed, report.cleanup.is_empty()) {
            (None, _) => (Outcome::Succeeded, None),
            (Some(f), true) => (
                Outcome::Failed,
                Some(format!("{}: {}", f.component, f.summary)),
            ),
            (Some(f), false) => (
                Outcome::RolledBack,
                Some(format!("{}: {}", f.component, f.summary)),
            ),
        };
        store
            .finish_operation(op_id, outcome, now_ms(), error.as_deref())
            .map_err(map)?;
        crate::identity::keep_digests_in(&mut store, now_ms());
        Ok(InvocationOutcome::Applied {
            plan,
            report,
            operation: op_id.to_string(),
        })
    }
}
