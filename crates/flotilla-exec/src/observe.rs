//! Observation: what every component really is, measured now, with evidence — the
//! status that cannot lie (DESIGN.md, "Status model").
//!
//! For a managed component, the instance recorded at start is re-measured (identity
//! before anything else: a live pid with another start time is not ours), its
//! readiness and liveness probes run once, its running executable is compared with
//! the file on disk (`stale-runtime`) and its config digest with the selected one
//! (`drift`). A component that should run but whose process is gone is
//! `down-unexpectedly`, never `stopped`. A port held by a process Flotilla did not
//! start is reported (`attention`), never adopted. External components are probed only.
//! An interpreter's script or module edited since it started is `stale-runtime` too.
//!
//! The journal's last step on each component (one query) adds what operations did:
//! while an operation in progress is starting (stopping) it, it is `starting`
//! (`stopping`), and a readiness probe that has not passed yet leaves health
//! `unknown`, not `unhealthy`; when the last operation on it failed or was
//! interrupted, its condition is `attention` with that evidence until an operation
//! on it succeeds.
//!
//! Cost: one `/proc` measurement per recorded instance (in a few blocking lanes),
//! instance markers read from every process's environment only when some component
//! has no matching recorded instance, executables' digests seeded from the state
//! database.
//!
//! Read-only: nothing here writes the journal or signals anything.

use crate::adapter::Seen;
use crate::identity::{self, IdentityMatch, RuntimeIdentity, Staleness};
use crate::probe::{self, ProbeContext, ProbeOutcome};
use crate::process;
use crate::secrets::SecretResolver;
use crate::statedir::StateDir;
use flotilla_model::inventory::Owner;
pub use flotilla_model::status::{
    ComponentStatus, ConfigIdentity, Evidence, LastKnown, Ownership, RuntimeStatus, Signal,
    StackStatus, StatusReport, UnfinishedOperation,
};
use flotilla_model::status::{
    Condition, DesiredLifecycle, Health, Lifecycle, Observability, StartedBy,
};
use flotilla_model::topology::Component;
use flotilla_model::Topology;
use flotilla_store::{InstanceRecord, LastStep, Outcome, Store};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Runs the readiness probes of every stack all of whose members are in `report`,
/// once each (timeout: the probe's own), and returns their route health.
pub async fn stack_routes(
    topology: &Topology,
    secrets: &SecretResolver,
    report: &StatusReport,
) -> Vec<StackStatus> {
    let mut out = Vec::new();
    for stack in topology.stacks.values() {
        let members: Vec<&ComponentStatus> = stack
            .components
            .iter()
            .filter_map(|m| report.components.iter().find(|c| &c.name == m))
            .collect();
        if members.len() != stack.components.len() {
            continue;
        }
        let ev = |source: String, saw: String| Evidence {
            signal: Signal::Health,
            source,
            at_ms: crate::this_process::now_ms(),
            saw,
        };
        if stack.readiness.is_empty() {
            out.push(StackStatus {
                name: stack.name.clone(),
                health: Health::NotApplicable,
                evidence: vec![ev(
                    "inventory".into(),
                    "no readiness probes declared".into(),
                )],
            });
            continue;
        }
        let idle: Vec<&str> = members
            .iter()
            .filter(|c| c.lifecycle != Lifecycle::Running)
            .map(|c| c.name.as_str())
            .collect();
        if !idle.is_empty() {
            out.push(StackStatus {
                name: stack.name.clone(),
                health: Health::NotApplicable,
                evidence: vec![ev(
                    "status".into(),
                    format!("not probed: {} not running", idle.join(", ")),
                )],
            });
            continue;
        }
        // A member whose own route is already known broken (unhealthy, or a dependency
        // down, unhealthy or unseen: `attention`) makes the stack's route unhealthy
        // without sending requests that can only wait for their timeouts.
        let broken: Vec<String> = members
            .iter()
            .filter(|c| {
                c.health == Health::Unhealthy
                    || c.condition == Condition::Attention
                    || c.observability != Observability::Observed
            })
            .map(|c| {
                let why = c
                    .evidence
                    .iter()
                    .rev()
                    .find(|e| e.signal == Signal::Condition || e.signal == Signal::Health)
                    .map(|e| format!(": {}", e.saw))
                    .unwrap_or_default();
                format!("{}{why}", c.name)
            })
            .collect();
        if !broken.is_empty() {
            out.push(StackStatus {
                name: stack.name.clone(),
                health: Health::Unhealthy,
                evidence: vec![ev(
                    "status".into(),
                    format!("not probed: the route is broken at {}", broken.join("; ")),
                )],
            });
            continue;
        }
        let lookup = |n: &str| secrets.get(n);
        let mut evidence = Vec::new();
        let mut healthy = true;
        for (i, p) in stack.readiness.iter().enumerate() {
            let ctx = ProbeContext {
                component: format!("stack:{} probe {}", stack.name, i + 1),
                identity: None,
                log_path: None,
                log_start_offset: 0,
                secrets: &lookup,
                owner: None,
            };
            let o = probe::check(&p.check, &ctx, p.timeout.0).await;
            healthy &= o.passed;
            evidence.push(ev(
                format!("stack readiness probe {}", i + 1),
                format!(
                    "{} {}",
                    if o.passed { "passed:" } else { "failed:" },
                    o.evidence
                ),
            ));
        }
        out.push(StackStatus {
            name: stack.name.clone(),
            health: if healthy {
                Health::Healthy
            } else {
                Health::Unhealthy
            },
            evidence,
        });
    }
    out
}

/// What observation needs.
pub struct Observer<'a> {
    /// The topology.
    pub topology: &'a Topology,
    /// The journal (read only).
    pub store: &'a Store,
    /// Where logs live.
    pub state: &'a StateDir,
    /// Secrets for request-probe headers.
    pub secrets: &'a SecretResolver,
    /// Which host this runs on: `None` on the controller (components on `local`
    /// hosts are observed here, those on `ssh` hosts are left to
    /// [`crate::operate::observe`]); `Some(host)` inside `flotilla host serve`.
    pub here: Option<&'a str>,
    /// The adapters that own components' lifecycles here.
    pub adapters: crate::adapter::Adapters,
    /// When set, no probe runs past this moment (a host answering its controller
    /// within `--host-timeout`); a probe cut short leaves health `unknown`.
    pub probe_deadline: Option<std::time::Instant>,
}

impl Observer<'_> {
    /// Observes `names` (all components when empty), probing them concurrently.
    ///
    /// # Errors
    /// Only journal read errors; everything about components is reported as status.
    pub async fn observe(
        &self,
        names: &[String],
    ) -> Result<StatusReport, flotilla_store::StoreError> {
        let observed_at_ms = crate::this_process::now_ms();
        // Executables hashed by earlier invocations need not be hashed again.
        identity::seed_digests_from(self.store);
        let desired = self.store.desired()?;
        let instances: BTreeMap<String, InstanceRecord> = self
            .store
            .instances()?
            .into_iter()
            .map(|i| (i.component.clone(), i))
            .collect();
        let mut interrupted = Vec::new();
        let mut in_progress = Vec::new();
        for op in self.store.unfinished_operations()? {
            if identity::alive(op.pid) {
                in_progress.push(op.unfinished());
            } else {
                interrupted.push(op.unfinished());
            }
        }
        let live_ops: std::collections::BTreeSet<String> =
            in_progress.iter().map(|o| o.id.clone()).collect();
        let last_steps: BTreeMap<String, LastStep> = self
            .store
            .last_steps()?
            .into_iter()
            .map(|l| (l.component.clone(), l))
            .collect();
        let selected: Vec<&Component> = self
            .topology
            .order()
            .iter()
            .map(|&id| self.topology.component(id))
            .filter(|c| names.is_empty() || names.contains(&c.name))
            .filter(|c| self.is_here(c))
            .collect();
        // Each component's owner asked and each recorded instance (for a full
        // observation, also those of components no longer in the inventory) measured
        // once, off the async threads, in a few lanes (not a thread per component).
        type Ask = (
            std::sync::Arc<dyn crate::adapter::Adapter>,
            Component,
            Option<InstanceRecord>,
        );
        let project = self.topology.project_name().to_string();
        let mut jobs: Vec<(String, Option<u32>, Option<Ask>)> = selected
            .iter()
            .map(|c| {
                let rec = instances.get(&c.name);
                let ask = (c.owner == Owner::Managed).then(|| {
                    (
                        std::sync::Arc::clone(self.adapters.for_component(c)),
                        (*c).clone(),
                        rec.cloned(),
                    )
                });
                (c.name.clone(), rec.map(|r| r.pid), ask)
            })
            .collect();
        if names.is_empty() {
            jobs.extend(
                instances
                    .values()
                    .filter(|r| self.topology.id(&r.component).is_none())
                    .map(|r| (r.component.clone(), Some(r.pid), None)),
            );
        }
        let lanes = std::thread::available_parallelism()
            .map_or(4, |n| n.get() * 2)
            .clamp(1, 16);
        let per_lane = jobs.len().div_ceil(lanes).max(1);
        let mut pending = Vec::new();
        let mut jobs = jobs.into_iter();
        loop {
            let lane: Vec<_> = jobs.by_ref().take(per_lane).collect();
            if lane.is_empty() {
                break;
            }
            let project = project.clone();
            pending.push(tokio::task::spawn_blocking(move || {
                lane.into_iter()
                    .map(|(name, pid, ask)| {
                        let seen = match ask {
                            Some((adapter, c, rec)) => adapter.observe(&project, &c, rec.as_ref()),
                            None => Ok(None),
                        };
                        // An owner that answers for itself (a unit, a container) is
                        // asked, not `/proc` for the pid it recorded.
                        let now = match &seen {
                            Ok(None) => pid.and_then(|p| identity::measure(p).ok().flatten()),
                            _ => None,
                        };
                        (name, now, seen)
                    })
                    .collect::<Vec<_>>()
            }));
        }
        let mut measured: BTreeMap<String, Option<RuntimeIdentity>> = BTreeMap::new();
        let mut seen_by: BTreeMap<String, Result<Option<Seen>, crate::ExecError>> = BTreeMap::new();
        for lane in futures_util::future::join_all(pending).await {
            for (name, now, seen) in lane.unwrap_or_default() {
                measured.insert(name.clone(), now);
                seen_by.insert(name, seen);
            }
        }
        let measured_same = |name: &str| {
            instances.get(name).is_some_and(|r| {
                identity::matches(
                    &RuntimeIdentity::from(r),
                    measured.get(name).and_then(Option::as_ref),
                ) == IdentityMatch::Same
            })
        };
        // Instance markers are read from every process's environment: only worth it
        // when a managed component here has no recorded instance, or its recorded
        // process is not the one running (the only cases that consult them).
        let need_marks = selected.iter().any(|c| {
            c.owner == Owner::Managed
                && matches!(seen_by.get(&c.name), Some(Ok(None)))
                && !measured_same(&c.name)
        });
        let marked: BTreeMap<String, (u32, String)> = if need_marks {
            marked_instances(self.store, self.state)?
                .into_iter()
                .map(|(pid, op, comp)| (comp, (pid, op.to_string())))
                .collect()
        } else {
            BTreeMap::new()
        };
        // Who listens on the local ports of components Flotilla does not run: one scan.
        let ports: Vec<u16> = selected
            .iter()
            .filter(|c| c.owner == Owner::Managed && !instances.contains_key(&c.name))
            .flat_map(|c| {
                c.endpoints
                    .values()
                    .filter(|e| e.is_local_bind())
                    .map(|e| e.port)
            })
            .collect();
        let listening =
            tokio::task::spawn_blocking(move || process::listeners_on(&ports).unwrap_or_default())
                .await
                .unwrap_or_default();
        let futures = selected.iter().map(|c| {
            let rec = instances.get(&c.name).cloned();
            let want = desired.get(&c.name).copied();
            let last = last_steps.get(&c.name).map(|l| LastOp::of(l, &live_ops));
            let now = measured.get(&c.name).cloned().flatten();
            let mark = marked.get(&c.name).cloned();
            let seen = seen_by.remove(&c.name).unwrap_or(Ok(None));
            self.observe_one(c, (rec, now, seen), want, mark, &listening, last)
        });
        let mut components = futures_util::future::join_all(futures).await;
        // The agent's supervised restarts, for what no native owner counts.
        let supervised = self.store.supervised_restarts()?;
        for c in components.iter_mut().filter(|c| c.restarts.is_none()) {
            c.restarts = supervised.get(&c.name).copied();
        }
        mark_dependency_down(self.topology, &mut components);
        // Instances the journal holds for components no longer in the inventory.
        if names.is_empty() {
            for (name, r) in &instances {
                if self.topology.id(name).is_some() {
                    continue;
                }
                if !measured_same(name) {
                    continue;
                }
                components.push(ComponentStatus {
                    name: name.clone(),
                    host: r.host.clone(),
                    lifecycle: Lifecycle::Running,
                    desired: None,
                    health: Health::Unknown,
                    condition: Condition::Attention,
                    observability: Observability::Observed,
                    ownership: Ownership::Orphaned,
                    started_by: StartedBy::Flotilla { operation: r.operation.to_string() },
                    config_identity: ConfigIdentity { selected: String::new(), running: Some(r.config_digest.clone()) },
                    runtime_identity: None,
                    config_changes: Vec::new(),
                    evidence: vec![Evidence {
                        signal: Signal::Condition,
                        source: "journal".into(),
                        at_ms: crate::this_process::now_ms(),
                        saw: format!(
                            "pid {} (process group {}) was started by {} for `{name}`, which is no longer in the inventory: put it back and stop it, or `kill -TERM -{}`",
                            r.pid, r.pgid, r.operation, r.pgid
                        ),
                    }],
                    last_known: None,
                    owner_error: None,
                    restarts: None,
                    running_ports: None,
                });
            }
        }
        Ok(StatusReport {
            observed_at_ms,
            components,
            interrupted,
            in_progress,
            stacks: Vec::new(),
        })
    }

    async fn observe_one(
        &self,
        c: &Component,
        (rec, measured_now, seen): (
            Option<InstanceRecord>,
            Option<RuntimeIdentity>,
            Result<Option<Seen>, crate::ExecError>,
        ),
        desired: Option<DesiredLifecycle>,
        marked: Option<(u32, String)>,
        listening: &std::collections::HashMap<u16, Vec<process::Listener>>,
        last: Option<LastOp<'_>>,
    ) -> ComponentStatus {
        let mut ev = Vec::new();
        let mut push = |signal: Signal, source: String, saw: String| {
            ev.push(Evidence {
                signal,
                source,
                at_ms: crate::this_process::now_ms(),
                saw,
            })
        };
        let mut s = ComponentStatus {
            name: c.name.clone(),
            host: c.host.clone(),
            lifecycle: Lifecycle::Unknown,
            desired: if c.owner == Owner::External {
                None
            } else {
                Some(desired.unwrap_or(DesiredLifecycle::Stopped))
            },
            health: Health::Unknown,
            condition: Condition::Ok,
            observability: Observability::Observed,
            ownership: ownership(c),
            started_by: StartedBy::Nobody,
            config_identity: ConfigIdentity {
                selected: c.config_digest(),
                running: None,
            },
            runtime_identity: None,
            config_changes: Vec::new(),
            evidence: Vec::new(),
            last_known: None,
            owner_error: None,
            restarts: None,
            running_ports: None,
        };
        let mut identity = None;
        if let Err(e) = &seen {
            s.lifecycle = Lifecycle::Unknown;
            s.condition = Condition::Error;
            // Its own words: the component is named by the status already.
            s.owner_error = Some(match e {
                crate::ExecError::Adapter { message, .. } => message.clone(),
                other => other.to_string(),
            });
            push(
                Signal::Lifecycle,
                ownership(c).to_string(),
                format!("its owner could not be asked: {e}"),
            );
        }
        if let Ok(Some(seen)) = seen {
            s.lifecycle = seen.lifecycle;
            s.restarts = seen.owner_restarts;
            for (source, saw) in seen.evidence {
                push(Signal::Lifecycle, source, saw);
            }
            match (seen.main, &rec) {
                (Some(m), Some(r)) => {
                    match &seen.fresh {
                        Some(fresh) => owner_measured_instance(c, &mut s, &mut push, &m, r, fresh),
                        None => running_instance(c, &mut s, &mut push, &m, r),
                    }
                    identity = Some(m);
                }
                (Some(m), None) => {
                    push(
                        Signal::Lifecycle,
                        source_of(m.pid),
                        format!(
                            "{} runs under {}, started outside Flotilla (no instance recorded)",
                            m.instance(),
                            ownership(c)
                        ),
                    );
                    identity = Some(m);
                }
                (None, Some(r)) => push(
                    Signal::Lifecycle,
                    source_of(r.pid),
                    format!(
                        "{} that {} started is gone; {} has no main process now",
                        RuntimeIdentity::from(r).instance(),
                        r.operation,
                        ownership(c)
                    ),
                ),
                (None, None) => {}
            }
            if matches!(s.lifecycle, Lifecycle::Stopped | Lifecycle::Failed)
                && desired == Some(DesiredLifecycle::Running)
            {
                s.condition = Condition::DownUnexpectedly;
                push(
                    Signal::Condition,
                    "journal".into(),
                    "desired running, but it is not running and Flotilla did not stop it".into(),
                );
            }
            // Its place is held by something not its own: reported, never taken, and
            // a plan refuses to start it (not a start that fails on the spot).
            if let Some(what) = seen.foreign {
                s.condition = Condition::Attention;
                s.started_by = StartedBy::Foreign { evidence: what };
            }
        } else if c.owner == Owner::Managed && seen.is_ok() {
            match &rec {
                Some(r) => {
                    let expected = RuntimeIdentity::from(r);
                    let measured = measured_now;
                    match identity::matches(&expected, measured.as_ref()) {
                        IdentityMatch::Same => {
                            let m = measured.expect("same implies measured");
                            s.lifecycle = Lifecycle::Running;
                            push(Signal::Lifecycle,
                                format!("/proc/{}", r.pid),
                                format!("pid {} alive, start time and executable match the instance recorded by {}", r.pid, r.operation),
                            );
                            running_instance(c, &mut s, &mut push, &m, r);
                            identity = Some(m);
                        }
                        IdentityMatch::Gone if !surviving_group(r).is_empty() => {
                            // The process Flotilla started led its own session and
                            // process group; the group outlives it (a supervisor-style
                            // or daemonising command). A group id is not reused while
                            // it has members, so they are this component's.
                            let members = surviving_group(r);
                            s.lifecycle = Lifecycle::Running;
                            push(
                                Signal::Lifecycle,
                                format!("/proc (process group {})", r.pgid),
                                format!(
                                    "pid {} that {} started has exited, but its process group {} lives on: pid {} — they belong to `{}` (stop stops them)",
                                    r.pid,
                                    r.operation,
                                    r.pgid,
                                    members.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
                                    c.name
                                ),
                            );
                            if let Some(m) = members
                                .iter()
                                .find_map(|&pid| identity::measure(pid).ok().flatten())
                            {
                                running_instance(c, &mut s, &mut push, &m, r);
                                identity = Some(m);
                            }
                        }
                        IdentityMatch::Gone | IdentityMatch::Reused { .. } if marked.is_some() => {
                            let (pid, op) = marked.clone().expect("checked");
                            identity = recognise_marked(&mut s, pid, &op);
                            push(Signal::Lifecycle,
                                format!("/proc/{pid}/environ"),
                                format!("the journal's pid {} is not the process it started; pid {pid} carries the marker of {op}; the next change records it", r.pid),
                            );
                        }
                        verdict @ (IdentityMatch::Gone | IdentityMatch::Reused { .. }) => {
                            s.lifecycle = Lifecycle::Failed;
                            let how = match verdict {
                                IdentityMatch::Reused { why } => {
                                    format!("pid {} now belongs to another process ({why})", r.pid)
                                }
                                _ => match crate::logs::ended(Path::new(&r.log_path), r.pid) {
                                    Some((at, how)) => format!(
                                        "pid {} is gone ({how} at {}, its log says)",
                                        r.pid,
                                        crate::logs::rfc3339_ms(at)
                                    ),
                                    None => format!("pid {} is gone", r.pid),
                                },
                            };
                            push(
                                Signal::Lifecycle,
                                format!("/proc/{}", r.pid),
                                format!(
                                    "{how}; it was started by {} and not stopped by Flotilla",
                                    r.operation
                                ),
                            );
                            if desired == Some(DesiredLifecycle::Running) {
                                s.condition = Condition::DownUnexpectedly;
                            }
                        }
                    }
                }
                None if marked.is_some() => {
                    let (pid, op) = marked.clone().expect("checked");
                    identity = recognise_marked(&mut s, pid, &op);
                    push(Signal::Lifecycle,
                        format!("/proc/{pid}/environ"),
                        format!("pid {pid} was started by {op}, which was interrupted before journaling it; the next change records it"),
                    );
                }
                None => {
                    s.lifecycle = Lifecycle::Stopped;
                    push(
                        Signal::Lifecycle,
                        "journal".into(),
                        "no running instance recorded".into(),
                    );
                    if desired == Some(DesiredLifecycle::Running) {
                        s.condition = Condition::DownUnexpectedly;
                        push(
                            Signal::Condition,
                            "journal".into(),
                            "desired running, but its process went away".into(),
                        );
                    }
                    // A process Flotilla did not start, on one of its ports: report, never adopt.
                    for (name, ep) in &c.endpoints {
                        if !ep.is_local_bind() {
                            continue;
                        }
                        if let Some(ls) = listening.get(&ep.port) {
                            if let Some(l) = ls.first() {
                                // Its own process is not running: whatever holds
                                // the port is someone else's, never adopted.
                                let who = l.describe();
                                s.condition = Condition::Attention;
                                s.started_by = StartedBy::Foreign {
                                    evidence: format!("{who} on port {}", ep.port),
                                };
                                push(Signal::Condition, format!("/proc/net/tcp port {}", ep.port), format!("port {} is held by {who}, not by this component (endpoint `{name}`, {}): not adopted", ep.port, l.address));
                                break;
                            }
                        }
                    }
                }
            }
        }
        // An operation in progress is starting or stopping it right now.
        let busy = last
            .as_ref()
            .and_then(|l| l.busy())
            .filter(|_| c.owner == Owner::Managed);
        if busy.is_some() && s.condition == Condition::DownUnexpectedly {
            // Not unexpected: the operation in progress has it on its hands.
            s.condition = Condition::Ok;
        }
        // Edited since it started: its endpoints as it runs them, for the probes and
        // for what `ps` shows, until it is restarted.
        let running_endpoints = if s.condition == Condition::Drift {
            rec.as_ref()
                .and_then(running_endpoints)
                .filter(|old| old != &c.endpoints)
        } else {
            None
        };
        if let Some(old) = &running_endpoints {
            for (name, ep) in &c.endpoints {
                if let Some(was) = old.get(name).filter(|was| was.port != ep.port) {
                    push(
                        Signal::Condition,
                        "inventory vs journal".into(),
                        format!(
                            "drift: restart pending (port {} → {}): endpoint `{name}` still listens on {} until it is restarted",
                            was.port, ep.port, was.port
                        ),
                    );
                }
            }
            let mut ports: Vec<u16> = old.values().map(|e| e.port).collect();
            ports.sort_unstable();
            ports.dedup();
            s.running_ports = Some(ports);
        }
        let probes = |p: &Option<flotilla_model::topology::Probe>| {
            p.as_ref().map(|p| match &running_endpoints {
                Some(old) => at_endpoints(p, &c.endpoints, old),
                None => p.clone(),
            })
        };
        let (readiness, liveness) = (probes(&c.readiness), probes(&c.liveness));
        // Health: the readiness contract, and liveness when declared.
        let probing = c.owner == Owner::External || s.lifecycle == Lifecycle::Running;
        if !probing {
            s.health = Health::NotApplicable;
        } else if c.readiness.is_none() && c.liveness.is_none() {
            s.health = if c.owner == Owner::External {
                Health::Unknown
            } else {
                Health::NotApplicable
            };
            if c.owner == Owner::External {
                push(
                    Signal::Health,
                    "inventory".into(),
                    "no probe declared: cannot tell".into(),
                );
            }
        } else {
            let lookup = |n: &str| self.secrets.get(n);
            let ctx = ProbeContext {
                component: c.name.clone(),
                identity: identity.clone(),
                log_path: Some(self.state.log(&c.name)),
                log_start_offset: 0,
                secrets: &lookup,
                owner: (c.owner == Owner::Managed)
                    .then(|| {
                        self.adapters
                            .for_component(c)
                            .owner_checks(self.topology.project_name(), c)
                    })
                    .flatten(),
            };
            let mut healthy = true;
            let mut cut_short = false;
            for (which, p) in [("readiness", &readiness), ("liveness", &liveness)] {
                let Some(p) = p else { continue };
                let allowed = match self.probe_deadline {
                    Some(d) => p
                        .timeout
                        .0
                        .min(d.saturating_duration_since(std::time::Instant::now())),
                    None => p.timeout.0,
                };
                let o: ProbeOutcome = probe::check(&p.check, &ctx, allowed).await;
                if !o.passed && allowed < p.timeout.0 {
                    cut_short = true;
                    push(Signal::Health,
                        format!("{which} probe"),
                        format!(
                            "did not finish within the {} ms its host had left to answer (--host-timeout; the probe's own timeout is {} ms): {}",
                            allowed.as_millis(),
                            p.timeout.0.as_millis(),
                            o.evidence
                        ),
                    );
                    continue;
                }
                healthy &= o.passed;
                push(
                    Signal::Health,
                    format!("{which} probe"),
                    format!(
                        "{} {}",
                        if o.passed { "passed:" } else { "failed:" },
                        o.evidence
                    ),
                );
            }
            s.health = if !healthy && matches!(busy, Some((Lifecycle::Starting, _))) {
                // Still starting: a readiness probe that has not passed yet says
                // nothing about health.
                push(
                    Signal::Health,
                    "journal".into(),
                    format!(
                        "readiness not passed yet; {} is starting it",
                        last.as_ref()
                            .map(|l| l.step.operation.to_string())
                            .unwrap_or_default()
                    ),
                );
                Health::Unknown
            } else if !healthy {
                Health::Unhealthy
            } else if cut_short {
                Health::Unknown
            } else {
                Health::Healthy
            };
            if c.owner == Owner::External {
                s.lifecycle = if healthy {
                    Lifecycle::Running
                } else {
                    Lifecycle::Unknown
                };
            }
        }
        if let (Some((lifecycle, saw)), Some(l)) = (busy, &last) {
            if matches!(
                (lifecycle, s.lifecycle),
                (
                    Lifecycle::Starting,
                    Lifecycle::Running | Lifecycle::Stopped | Lifecycle::Failed
                ) | (Lifecycle::Stopping, Lifecycle::Running)
            ) {
                if s.lifecycle != Lifecycle::Running {
                    s.health = Health::Unknown;
                }
                s.lifecycle = lifecycle;
                push(Signal::Lifecycle, l.source(), saw);
            }
        }
        if let Some(saw) = last.as_ref().and_then(LastOp::went_wrong) {
            if s.condition == Condition::Ok {
                s.condition = Condition::Attention;
            }
            push(
                Signal::Condition,
                last.as_ref().map(LastOp::source).unwrap_or_default(),
                saw,
            );
        }
        s.evidence = ev;
        s
    }
}

/// The newest step that acted on a component, and whether its operation's process
/// still lives (the journal alone cannot tell a running operation from one whose
/// process was killed).
struct LastOp<'a> {
    step: &'a LastStep,
    /// Its operation is unfinished and its invocation's process lives.
    live: bool,
}

impl<'a> LastOp<'a> {
    fn of(step: &'a LastStep, live_ops: &std::collections::BTreeSet<String>) -> LastOp<'a> {
        LastOp {
            step,
            live: step.operation_outcome == Outcome::Running
                && live_ops.contains(&step.operation.to_string()),
        }
    }

    /// Where the evidence comes from.
    fn source(&self) -> String {
        format!("journal ({}, {})", self.step.operation, self.step.step)
    }

    /// The operation as people typed it: `op-12 `flotilla up chat``.
    fn named(&self) -> String {
        format!("{} `{}`", self.step.operation, self.step.command_line)
    }

    /// When an operation in progress is acting on it now: the lifecycle that makes
    /// it (`starting` or `stopping`) and the evidence.
    fn busy(&self) -> Option<(Lifecycle, String)> {
        if !self.live || self.step.step_outcome != Outcome::Running {
            return None;
        }
        let lifecycle = match self.step.action.as_str() {
            "start" | "restart" | "await-ready" => Lifecycle::Starting,
            "stop" => Lifecycle::Stopping,
            _ => return None,
        };
        Some((
            lifecycle,
            format!(
                "{} is {} it (its `{}` step is in progress)",
                self.named(),
                if lifecycle == Lifecycle::Starting {
                    "starting"
                } else {
                    "stopping"
                },
                self.step.action
            ),
        ))
    }

    /// When the last operation on it failed or was interrupted: what to say (shown
    /// until an operation on it succeeds).
    fn went_wrong(&self) -> Option<String> {
        let l = self.step;
        let until = "shown until an operation on it succeeds";
        let interrupted = matches!(l.operation_outcome, Outcome::Interrupted)
            || (l.operation_outcome == Outcome::Running && !self.live);
        if interrupted && l.step_outcome == Outcome::Succeeded {
            // Its own step completed: the interruption is the others' to answer for.
            return None;
        }
        match l.operation_outcome {
            Outcome::Running if !self.live => Some(format!(
                "{} was interrupted (its process {} is gone) during its `{}` step on this component; {until}",
                self.named(),
                l.operation_pid,
                l.action
            )),
            Outcome::Interrupted => Some(format!(
                "{} was interrupted during its `{}` step on this component; {until}",
                self.named(),
                l.action
            )),
            Outcome::Failed | Outcome::RolledBack => {
                let summary = l
                    .failed_summary
                    .clone()
                    .or_else(|| l.operation_error.clone())
                    .unwrap_or_else(|| "no reason recorded".into());
                let at = match l.failed_component.as_deref() {
                    Some(f) if f == l.component => "at this component".to_string(),
                    Some(f) => format!("at {f}"),
                    None => String::new(),
                };
                let then = if l.operation_outcome == Outcome::RolledBack {
                    "; what it had started was stopped again"
                } else {
                    ""
                };
                Some(format!(
                    "{} failed{}{}: {summary}{then}; {until}",
                    self.named(),
                    if at.is_empty() { "" } else { " " },
                    at
                ))
            }
            _ => None,
        }
    }
}

impl Observer<'_> {
    /// Whether `c` is observed by this observer (see [`Observer::here`]).
    fn is_here(&self, c: &Component) -> bool {
        match self.here {
            Some(h) => c.host == h,
            None => self
                .topology
                .hosts
                .get(&c.host)
                .is_none_or(|h| !h.is_remote()),
        }
    }
}

/// A running component whose route is broken is not fine, whatever its own probes
/// say: when a dependency (direct, declared or through a connection or tunnel) is
/// not running, cannot be seen, or runs but is unhealthy or of unknown health, its
/// condition becomes `attention`, with evidence naming that dependency. Components
/// whose condition is already not `ok` are left as they are.
pub fn mark_dependency_down(topology: &Topology, components: &mut [ComponentStatus]) {
    let seen: BTreeMap<String, (Lifecycle, Health, Observability)> = components
        .iter()
        .map(|c| (c.name.clone(), (c.lifecycle, c.health, c.observability)))
        .collect();
    for c in components.iter_mut() {
        if c.lifecycle != Lifecycle::Running || c.condition != Condition::Ok {
            continue;
        }
        let Some(id) = topology.id(&c.name) else {
            continue;
        };
        let (mut down, mut unseen, mut unhealthy) = (Vec::new(), Vec::new(), Vec::new());
        for u in topology.upstream(id) {
            let name = topology.component(*u).name.as_str();
            let Some(&(lifecycle, health, observability)) = seen.get(name) else {
                continue;
            };
            if lifecycle == Lifecycle::Unknown || observability != Observability::Observed {
                unseen.push(name);
            } else if lifecycle != Lifecycle::Running {
                down.push(name);
            } else if matches!(health, Health::Unhealthy | Health::Unknown) {
                unhealthy.push(format!("{name} ({})", value_name(&health)));
            }
        }
        let are = |n: usize| if n == 1 { "is" } else { "are" };
        let mut saw = Vec::new();
        if !down.is_empty() {
            saw.push(format!(
                "it depends on {}, which {} not running",
                down.join(", "),
                are(down.len())
            ));
        }
        if !unseen.is_empty() {
            saw.push(format!(
                "it depends on {}, whose state cannot be seen",
                unseen.join(", ")
            ));
        }
        if !unhealthy.is_empty() {
            saw.push(format!(
                "its route is broken: it depends on {}, which {} running but not healthy",
                unhealthy.join(", "),
                are(unhealthy.len())
            ));
        }
        if !saw.is_empty() {
            c.condition = Condition::Attention;
            c.evidence.push(Evidence {
                signal: Signal::Condition,
                source: "topology".into(),
                at_ms: crate::this_process::now_ms(),
                saw: saw.join("; "),
            });
        }
    }
}

/// Live processes carrying the instance marker of an operation in this journal:
/// `(pid, operation, component)`. The journal is asked only about the few marked
/// processes found.
///
/// # Errors
/// Journal read errors.
pub fn marked_instances(
    store: &Store,
    state: &StateDir,
) -> Result<Vec<(u32, flotilla_store::OperationId, String)>, flotilla_store::StoreError> {
    let mut out = Vec::new();
    // Many processes carry the marker of one operation (an `up` of a stack): ask once.
    let mut known: BTreeMap<flotilla_store::OperationId, bool> = BTreeMap::new();
    for (pid, op, component) in process::marked_processes(state.root()).unwrap_or_default() {
        let Ok(id) = op.parse::<flotilla_store::OperationId>() else {
            continue;
        };
        let ours = match known.get(&id) {
            Some(&k) => k,
            None => *known.entry(id).or_insert(store.has_operation(id)?),
        };
        if ours {
            out.push((pid, id, component));
        }
    }
    Ok(out)
}

/// The endpoints the instance `r` was started with, from its recorded config (`None`
/// when it was recorded without one, or it does not parse).
fn running_endpoints(
    r: &InstanceRecord,
) -> Option<BTreeMap<String, flotilla_model::values::Endpoint>> {
    let config: serde_json::Value = serde_json::from_str(r.config_json.as_deref()?).ok()?;
    serde_json::from_value(config.get("endpoints")?.clone()).ok()
}

/// `p` aimed at the endpoints `old` instead of `now` (a check's URL or address
/// whose endpoint moved is rewritten to where it was).
fn at_endpoints(
    p: &flotilla_model::topology::Probe,
    now: &BTreeMap<String, flotilla_model::values::Endpoint>,
    old: &BTreeMap<String, flotilla_model::values::Endpoint>,
) -> flotilla_model::topology::Probe {
    use flotilla_model::topology::Check;
    let moved = |name: &str| Some((now.get(name)?, old.get(name)?)).filter(|(n, o)| n != o);
    let mut p = p.clone();
    match &mut p.check {
        Check::Http {
            url,
            endpoint: Some(endpoint),
            ..
        }
        | Check::Request { url, endpoint, .. } => {
            if let Some((n, o)) = moved(endpoint) {
                if let Some(rest) = url.strip_prefix(n.url.trim_end_matches('/')) {
                    *url = format!("{}{rest}", o.url.trim_end_matches('/'));
                }
            }
        }
        // An inline target (no endpoint) does not move with the endpoints.
        Check::Tcp {
            address,
            endpoint: Some(endpoint),
            ..
        } => {
            if let Some((_, o)) = moved(endpoint) {
                *address = if o.dial_host().contains(':') {
                    format!("[{}]:{}", o.dial_host(), o.port)
                } else {
                    format!("{}:{}", o.dial_host(), o.port)
                };
            }
        }
        _ => {}
    }
    p
}

/// Where a process's facts were read: `/proc/<pid>`, or the journal for an instance
/// that is no process here (pid 0: a cluster's pods).
fn source_of(pid: u32) -> String {
    if pid > 0 {
        format!("/proc/{pid}")
    } else {
        "journal".into()
    }
}

/// `s` runs as `m`, the instance recorded as `r` (or its owner's replacement of it):
/// who started it, config drift against the journal, and whether the executable on
/// disk is still the one running (`stale-runtime`).
fn running_instance(
    c: &Component,
    s: &mut ComponentStatus,
    push: &mut impl FnMut(Signal, String, String),
    m: &RuntimeIdentity,
    r: &InstanceRecord,
) {
    config_drift(c, s, push, r);
    // Where the running image cannot be read (macOS), what ran at start is what the
    // recorded measurement of this very process says.
    let same_process = r.pid == m.pid && r.start_time_ticks == m.start_time_ticks;
    let at_start;
    let m = if !crate::sys::RUNNING_IMAGE_READABLE && same_process {
        at_start = RuntimeIdentity {
            exe_sha256: r.exe_sha256.clone(),
            ..m.clone()
        };
        &at_start
    } else {
        m
    };
    let on_disk = match identity::staleness(m) {
        Ok(Staleness::Current) => Some(m.exe_sha256.clone()),
        Ok(Staleness::Replaced {
            path,
            on_disk,
            running,
        }) => {
            s.condition = Condition::StaleRuntime;
            push(
                Signal::Condition,
                path.display().to_string(),
                format!(
                    "the executable on disk ({}) is not the one running ({})",
                    on_disk.as_deref().map(short).unwrap_or("gone"),
                    short(&running)
                ),
            );
            on_disk
        }
        Err(e) => {
            push(
                Signal::RuntimeIdentity,
                m.exe.display().to_string(),
                format!("cannot read executable: {e}"),
            );
            None
        }
    };
    // An interpreter runs a program from a file: that file is part of what runs.
    // (Only interpreters have any: nothing is read for other executables.)
    for (path, role) in identity::program_paths(m.pid, &m.exe) {
        let recorded = r
            .program_files
            .iter()
            .find(|f| f.path == path)
            .and_then(|f| f.sha256.as_deref());
        if let Some(saw) = identity::program_file_change(&path, &role, recorded, m.start_time_ticks)
        {
            s.condition = Condition::StaleRuntime;
            push(
                Signal::Condition,
                path.display().to_string(),
                format!("{saw}: `restart` runs the new one"),
            );
        }
    }
    // Files the component declares part of what runs (`identity_files`).
    for f in r
        .program_files
        .iter()
        .filter(|f| f.role == identity::DECLARED_ROLE)
    {
        let now = identity::file_sha256(&f.path).ok();
        if now != f.sha256 {
            s.condition = Condition::StaleRuntime;
            push(
                Signal::Condition,
                f.path.display().to_string(),
                format!(
                    "identity file changed since it started ({} → {}): `restart` runs the new one",
                    f.sha256.as_deref().map(short).unwrap_or("unreadable"),
                    now.as_deref().map(short).unwrap_or("gone")
                ),
            );
        }
    }
    s.runtime_identity = Some(RuntimeStatus {
        measured: m.clone(),
        on_disk_sha256: on_disk,
        started_at_ms: r.started_at_ms,
        started_by_operation: r.operation.to_string(),
        release: None,
    });
}

/// Who started the running instance `r`, and `drift` when the config it was started
/// with is not the one selected now (key by key).
fn config_drift(
    c: &Component,
    s: &mut ComponentStatus,
    push: &mut impl FnMut(Signal, String, String),
    r: &InstanceRecord,
) {
    s.started_by = StartedBy::Flotilla {
        operation: r.operation.to_string(),
    };
    s.config_identity.running = Some(r.config_digest.clone());
    if r.config_digest != s.config_identity.selected {
        s.condition = Condition::Drift;
        s.config_changes = match &r.config_json {
            Some(before) => flotilla_model::topology::config_changes(before, &c.runtime_config()),
            None => vec![format!(
                "effective config {} → {} (recorded before configs were kept key by key)",
                short(&r.config_digest),
                short(&s.config_identity.selected)
            )],
        };
        push(
            Signal::Condition,
            "inventory vs journal".into(),
            format!(
                "effective config changed since it started: {} (`up` restarts it)",
                s.config_changes.join("; ")
            ),
        );
    }
}

/// A running instance whose owner measured what it runs (a container: the image it
/// runs and the one its reference names now): config drift as for any instance, and
/// `stale-runtime` when the owner says what runs is no longer what its source names.
fn owner_measured_instance(
    c: &Component,
    s: &mut ComponentStatus,
    push: &mut impl FnMut(Signal, String, String),
    m: &RuntimeIdentity,
    r: &InstanceRecord,
    fresh: &crate::adapter::Freshness,
) {
    config_drift(c, s, push, r);
    if let Some((source, saw)) = &fresh.stale {
        s.condition = Condition::StaleRuntime;
        push(Signal::Condition, source.clone(), saw.clone());
    }
    s.runtime_identity = Some(RuntimeStatus {
        measured: m.clone(),
        on_disk_sha256: fresh.current.clone(),
        started_at_ms: r.started_at_ms,
        started_by_operation: r.operation.to_string(),
        release: None,
    });
}

/// Live members of the process group the recorded process led (empty when it did
/// not lead one, or nothing is left in it).
pub fn surviving_group(r: &InstanceRecord) -> Vec<u32> {
    if r.pgid <= 0 || r.pgid != r.pid as i32 {
        return Vec::new();
    }
    process::group_members(r.pgid).unwrap_or_default()
}

/// A process carrying the marker of operation `op` (started by Flotilla, not yet
/// journaled as this instance) is this component, running: record that in `s` and
/// return its measured identity.
fn recognise_marked(s: &mut ComponentStatus, pid: u32, op: &str) -> Option<RuntimeIdentity> {
    s.lifecycle = Lifecycle::Running;
    s.started_by = StartedBy::Flotilla {
        operation: op.to_string(),
    };
    identity::measure(pid).ok().flatten()
}

fn short(d: &str) -> &str {
    d.get(..19).unwrap_or(d)
}

/// A duration in milliseconds as a short age: `850ms`, `42s`, `3m 5s`, `2h 10m`.
pub fn age(ms: i64) -> String {
    let ms = ms.max(0) as u64;
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// The kebab-case name a status value serialises to (`running`, `n/a`…).
pub fn value_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Who owns `c`'s lifecycle.
pub fn ownership(c: &Component) -> Ownership {
    Ownership::of(c.owner, c.adapter)
}
