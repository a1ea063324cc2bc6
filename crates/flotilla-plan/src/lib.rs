//! Flotilla's planner: [`plan`] turns a validated [`Topology`], an [`Observed`]
//! snapshot and an [`Operation`] into a [`Plan`] (steps in waves, impact, cleanup set,
//! digests) or a [`Refusal`] that names what stands in the way.
//!
//! Pure: no IO, no clock; everything it needs is an argument, so the same inputs
//! always give the same plan (and the same JSON, byte for byte).
//!
//! Code map:
//! - [`Operation`], [`Verb`]: what is asked.
//! - [`Plan`], [`Wave`], [`Step`], [`Action`], [`Impact`]: the answer.
//! - [`Refusal`], [`Reason`]: why not.
//! - [`plan`]: the semantics (DESIGN.md, "Operation semantics").
//! - [`render`]: a plan and a refusal as the lines every face shows.

use flotilla_model::inventory::{AdapterKind, Owner};
use flotilla_model::status::{Lifecycle, Observability, Observed, ObservedComponent, StartedBy};
use flotilla_model::topology::{ComponentId, Target, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

pub mod render;

/// Version of the plan's JSON shape; bumped on any incompatible change.
pub const PLAN_FORMAT: u32 = 1;

/// A lifecycle verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    /// Bring up the target and its upstream dependencies.
    Start,
    /// Take down the target.
    Stop,
    /// Stop then start the target.
    Restart,
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verb::Start => "start",
            Verb::Stop => "stop",
            Verb::Restart => "restart",
        })
    }
}

/// An operation on a component or a stack (`up`/`down` are start/stop of a stack).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    /// `stop`: stop running dependents first; `restart`: restart them too.
    #[serde(default)]
    pub cascade: bool,
    /// `stop`: stop the target even though dependents run.
    #[serde(default)]
    pub force: bool,
    /// `start`: leave running components whose effective config changed as they are
    /// (by default they are restarted, dependency order kept, the plan saying what
    /// changed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_recreate: bool,
    /// A component or stack name.
    pub target: String,
    /// The verb.
    pub verb: Verb,
}

impl Operation {
    /// An operation without flags.
    pub fn new(verb: Verb, target: impl Into<String>) -> Self {
        Operation {
            verb,
            target: target.into(),
            force: false,
            cascade: false,
            no_recreate: false,
        }
    }
}

impl Operation {
    /// The command line typed as `verb`, e.g. `flotilla up chat --force` for the
    /// `start` that `up` stands for.
    pub fn typed_as(&self, verb: &str) -> String {
        let mut out = format!("flotilla {verb} {}", self.target);
        for (set, flag) in [
            (self.force, " --force"),
            (self.cascade, " --cascade"),
            (self.no_recreate, " --no-recreate"),
        ] {
            if set {
                out.push_str(flag);
            }
        }
        out
    }
}

impl fmt::Display for Operation {
    /// The equivalent command line, e.g. `flotilla stop llm --cascade`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.typed_as(&self.verb.to_string()))
    }
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Start it, then wait for its readiness probe.
    Start,
    /// Stop it.
    Stop,
    /// Stop it, start it, wait for readiness.
    Restart,
    /// Do not touch it; wait (with a deadline) until its readiness probe passes.
    /// Used for components already starting and for external components.
    AwaitReady,
    /// Already in the requested state: nothing to do.
    #[serde(rename = "no-op")]
    Noop,
    /// Already stopped: only record that it is meant to stay stopped (its desired
    /// lifecycle, kept by its own host), so it is not `down-unexpectedly`. Touches no
    /// process.
    RecordStopped,
}

impl Action {
    /// Whether the step changes anything (start, stop, restart).
    pub fn is_mutating(self) -> bool {
        matches!(self, Action::Start | Action::Stop | Action::Restart)
    }

    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Restart => "restart",
            Action::AwaitReady => "await-ready",
            Action::Noop => "no-op",
            Action::RecordStopped => "record-stopped",
        }
    }

    /// Whether the step leaves every process as it is (no-op, record-stopped).
    pub fn leaves_processes(self) -> bool {
        matches!(self, Action::Noop | Action::RecordStopped)
    }
}

/// One step: an action on one component.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Step {
    /// What to do.
    pub action: Action,
    /// Its adapter (managed components).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub adapter: Option<AdapterKind>,
    /// The steps this one waits for, as positions in [`Plan::steps`] order (all
    /// earlier): it runs once every one of them has succeeded. Set by [`plan`]; the
    /// executor follows these edges and derives none of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<usize>,
    /// Component name.
    pub component: String,
    /// Its host.
    pub host: String,
    /// `managed` or `external`.
    pub owner: Owner,
    /// Why this step, in a few words ("dependency of proxy", "already running and ready").
    pub reason: String,
}

/// Steps that do not depend on each other and may run in parallel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Wave {
    /// Steps, by name.
    pub steps: Vec<Step>,
}

/// A running component that an operation affects without operating on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Impact {
    /// The affected component.
    pub component: String,
    /// How.
    pub effect: String,
}

/// A plan: steps in waves, the cleanup set, impact, and the digests of the inputs it
/// was computed from.
///
/// Waves say which steps may run together; they are not barriers. Each step names
/// the earlier steps it waits for ([`Step::after`]): the same component's earlier
/// step, every stop before any start, a start after its upstream dependencies'
/// starts, a stop after its dependents' stops. The executor runs each step as soon as
/// those have succeeded, journals it before and after, stops starting new steps at
/// the first failure, and then stops exactly the components this plan started
/// ([`Plan::cleanup`]), in that order. A stack's own readiness probes
/// ([`Plan::verify_stack`]) run after every step has succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// If execution fails part-way: stop these (exactly what this plan starts), in this order.
    pub cleanup: Vec<String>,
    /// [`PLAN_FORMAT`].
    pub format: u32,
    /// Components affected without being operated on.
    pub impact: Vec<Impact>,
    /// The format version of the inventory planned against
    /// (`flotilla_model::inventory::INVENTORY_VERSION` at most; absent: 1).
    #[serde(default = "flotilla_model::inventory::first_version")]
    pub inventory_version: u32,
    /// `sha256:` digest of the observed state planned against.
    pub observed_digest: String,
    /// What was asked.
    pub operation: Operation,
    /// `sha256:` digest of the topology planned against.
    pub topology_digest: String,
    /// After the waves, this stack's readiness probes (end-to-end route checks) must
    /// pass: set for `up` of a stack that declares them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_stack: Option<String>,
    /// Ordered waves.
    pub waves: Vec<Wave>,
}

impl Plan {
    /// All steps, wave by wave.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.waves.iter().flat_map(|w| w.steps.iter())
    }

    /// Whether no step changes any process (every step is a no-op or only records
    /// that a stopped component should stay stopped).
    pub fn is_noop(&self) -> bool {
        self.steps().all(|s| s.action.leaves_processes())
    }

    /// `sha256:` digest of this plan's canonical JSON.
    pub fn digest(&self) -> String {
        flotilla_model::digest::digest_of(self)
    }
}

/// One reason an operation is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Reason {
    /// The target names no component or stack.
    #[error("`{target}` is neither a component nor a stack{}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownTarget {
        /// What was asked for.
        target: String,
        /// The closest name, if any.
        suggestion: Option<String>,
    },
    /// Stopping would leave running dependents without their dependency.
    #[error("`{component}` has running dependents: {}; use --cascade to stop them first, or --force to stop `{component}` anyway", dependents.join(", "))]
    DependentsRunning {
        /// What would be stopped.
        component: String,
        /// Its running dependents.
        dependents: Vec<String>,
    },
    /// The operation would have to start, stop or restart an external component.
    #[error("`{component}` is external (observed only, never mutated): {why}")]
    ExternalNotMutable {
        /// The external component.
        component: String,
        /// Why the operation would need to mutate it.
        why: String,
    },
    /// The component's state cannot be seen, so acting on it would be a guess.
    #[error("`{component}` on host `{host}` is {observability}: its state cannot be seen, so it cannot be planned for")]
    Unobservable {
        /// The component.
        component: String,
        /// Its host.
        host: String,
        /// `unreachable` or `not-permitted`.
        observability: String,
    },
    /// Something else is running the component; it is reported, never adopted.
    #[error("`{component}`: {evidence}, which Flotilla did not start: stop that process first, or declare the component `owner = \"external\"` to observe it")]
    ForeignOwner {
        /// The component.
        component: String,
        /// What was seen.
        evidence: String,
    },
    /// The owner of the component's lifecycle (systemd, launchd…) cannot be asked
    /// on its host, so its state is unknown and no wait makes it known.
    #[error("`{component}`: its owner cannot be asked ({why}); fix that, or change its adapter")]
    OwnerUnavailable {
        /// The component.
        component: String,
        /// Why (the owner's own error).
        why: String,
    },
    /// The component is between states, or its lifecycle is unknown.
    #[error("`{component}` is {lifecycle}; wait until it settles, then plan again")]
    Unsettled {
        /// The component.
        component: String,
        /// Its lifecycle.
        lifecycle: String,
    },
}

/// Why an operation cannot be planned: every reason found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("refused: {}", reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct Refusal {
    /// What was asked.
    pub operation: Operation,
    /// Why not (at least one).
    pub reasons: Vec<Reason>,
}

impl Refusal {
    /// Whether the refusal is because the target does not exist (a usage error rather
    /// than a refusal of a valid request).
    pub fn is_unknown_target(&self) -> bool {
        matches!(self.reasons.as_slice(), [Reason::UnknownTarget { .. }])
    }
}

/// Plans `op` against `topology` as `observed`.
///
/// # Errors
/// A [`Refusal`] listing every reason the operation cannot proceed.
pub fn plan(topology: &Topology, observed: &Observed, op: &Operation) -> Result<Plan, Refusal> {
    let mut p = Planner {
        topo: topology,
        observed,
        reasons: Vec::new(),
        recreate: op.verb == Verb::Start && !op.no_recreate,
    };
    let (waves, impact) = match topology.target(&op.target) {
        None => {
            let names = topology
                .components
                .iter()
                .map(|c| c.name.as_str())
                .chain(topology.stacks.keys().map(String::as_str));
            return Err(Refusal {
                operation: op.clone(),
                reasons: vec![Reason::UnknownTarget {
                    target: op.target.clone(),
                    suggestion: flotilla_model::diag::did_you_mean(&op.target, names)
                        .map(str::to_string),
                }],
            });
        }
        Some(Target::Component(id)) => match op.verb {
            Verb::Start => (p.start(&[id], "requested"), Vec::new()),
            Verb::Stop => p.stop(&[id], op, None),
            Verb::Restart => p.restart(id, op.cascade),
        },
        Some(Target::Stack(stack)) => {
            let members: Vec<ComponentId> = stack
                .components
                .iter()
                .filter_map(|n| topology.id(n))
                .collect();
            match op.verb {
                Verb::Start => (p.start(&members, "stack member"), Vec::new()),
                Verb::Stop => {
                    let record = observed.stacks.get(&stack.name);
                    p.stop(&members, op, record.map(|r| r.start_order.as_slice()))
                }
                Verb::Restart => {
                    let (mut stop_waves, _) = p.stop(
                        &members,
                        &Operation {
                            cascade: op.cascade,
                            force: op.force,
                            ..op.clone()
                        },
                        observed
                            .stacks
                            .get(&stack.name)
                            .map(|r| r.start_order.as_slice()),
                    );
                    let start_waves = p.start_after_stop(&members, &stop_waves);
                    stop_waves.extend(start_waves);
                    (stop_waves, Vec::new())
                }
            }
        }
    };
    if !p.reasons.is_empty() {
        let mut reasons = p.reasons;
        let mut seen = std::collections::HashSet::new();
        reasons.retain(|r| seen.insert(r.clone()));
        return Err(Refusal {
            operation: op.clone(),
            reasons,
        });
    }
    let cleanup = waves
        .iter()
        .rev()
        .flat_map(|w| w.steps.iter().rev())
        .filter(|s| s.action == Action::Start)
        .map(|s| s.component.clone())
        .collect();
    let verify_stack = match (op.verb, topology.target(&op.target)) {
        (Verb::Start | Verb::Restart, Some(Target::Stack(s))) if !s.readiness.is_empty() => {
            Some(s.name.clone())
        }
        _ => None,
    };
    let mut waves = waves;
    link(topology, &mut waves);
    Ok(Plan {
        format: PLAN_FORMAT,
        inventory_version: topology.inventory_version,
        operation: op.clone(),
        verify_stack,
        topology_digest: topology.digest().to_string(),
        observed_digest: observed.digest(),
        waves,
        cleanup,
        impact,
    })
}

/// Sets every step's [`Step::after`]: a step waits for an earlier-wave step of the
/// same component; a start waits for every stop and a stop for every start (a
/// restart's stops precede its starts); a start waits for its upstream
/// dependencies' steps, a stop for its downstream dependents' steps.
fn link(topology: &Topology, waves: &mut [Wave]) {
    let flat: Vec<(usize, ComponentId, bool)> = waves
        .iter()
        .enumerate()
        .flat_map(|(w, wave)| {
            wave.steps.iter().filter_map(move |s| {
                let stopping = matches!(s.action, Action::Stop | Action::RecordStopped);
                topology.id(&s.component).map(|id| (w, id, stopping))
            })
        })
        .collect();
    // Where each step's edges come from, so that finding them does not compare every
    // pair of steps (10,000 steps would be 10^8 comparisons): the steps of each
    // component, and the stops and the starts, each in plan order.
    let mut of_component: Vec<Vec<usize>> = vec![Vec::new(); topology.len()];
    let mut of_kind: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    for (n, &(_, id, stopping)) in flat.iter().enumerate() {
        of_component[id.index()].push(n);
        of_kind[usize::from(stopping)].push(n);
    }
    let mut k = 0;
    for (w, wave) in waves.iter_mut().enumerate() {
        // `flat` is in wave order: the steps of earlier waves are a prefix of it.
        let before = flat.partition_point(|&(wi, _, _)| wi < w);
        let earlier = |steps: &[usize]| -> std::ops::Range<usize> {
            0..steps.partition_point(|&n| n < before)
        };
        for step in wave.steps.iter_mut() {
            let Some(&(_, j, stop_j)) = flat.get(k) else {
                break;
            };
            // The same component's earlier steps, every earlier step of the other
            // kind (stop/start), and the earlier steps of the components a start
            // needs (upstream) or a stop waits for (downstream).
            let mut after = Vec::new();
            let same = &of_component[j.index()];
            after.extend_from_slice(&same[earlier(same)]);
            let other = &of_kind[usize::from(!stop_j)];
            after.extend_from_slice(&other[earlier(other)]);
            let related = if stop_j {
                topology.downstream(j)
            } else {
                topology.upstream(j)
            };
            for &i in related {
                let steps = &of_component[i.index()];
                after.extend_from_slice(&steps[earlier(steps)]);
            }
            after.sort_unstable();
            after.dedup();
            step.after = after;
            k += 1;
        }
    }
}

struct Planner<'a> {
    topo: &'a Topology,
    observed: &'a Observed,
    reasons: Vec<Reason>,
    /// Restart running components whose effective config changed.
    recreate: bool,
}

impl Planner<'_> {
    fn obs(&self, id: ComponentId) -> &ObservedComponent {
        self.observed.component(&self.topo.component(id).name)
    }

    fn step(&self, id: ComponentId, action: Action, reason: impl Into<String>) -> Step {
        let c = self.topo.component(id);
        Step {
            component: c.name.clone(),
            host: c.host.clone(),
            action,
            adapter: c.adapter,
            after: Vec::new(),
            owner: c.owner,
            reason: reason.into(),
        }
    }

    /// Refuses if the component's state cannot be seen; returns whether it can.
    fn check_observable(&mut self, id: ComponentId) -> bool {
        let o = self.obs(id);
        if o.observability == Observability::Observed {
            return true;
        }
        // What its host (or the way to it) said, verbatim, rather than a guess.
        let name = match (&o.unobserved_why, o.observability) {
            (Some(why), Observability::Unsupported) => format!("not observable from here ({why})"),
            (Some(why), other) => format!("{} ({why})", observability_name(other)),
            (None, other) => observability_name(other).to_string(),
        };
        let c = self.topo.component(id);
        self.reasons.push(Reason::Unobservable {
            component: c.name.clone(),
            host: c.host.clone(),
            observability: name,
        });
        false
    }

    fn check_foreign(&mut self, id: ComponentId) -> bool {
        if let StartedBy::Foreign { evidence } = &self.obs(id).started_by {
            let reason = Reason::ForeignOwner {
                component: self.topo.component(id).name.clone(),
                evidence: evidence.clone(),
            };
            self.reasons.push(reason);
            return false;
        }
        true
    }

    /// Marks `roots` and everything upstream of them.
    fn upstream_closure(&self, roots: &[ComponentId]) -> Vec<bool> {
        let mut in_set = vec![false; self.topo.len()];
        let mut stack: Vec<ComponentId> = roots.to_vec();
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut in_set[id.index()], true) {
                continue;
            }
            stack.extend(self.topo.upstream(id).iter().copied());
        }
        in_set
    }

    /// Running (or starting/stopping) components downstream of `roots`, transitively, excluding `roots`.
    fn running_dependents(&self, roots: &[ComponentId]) -> Vec<ComponentId> {
        let mut seen = vec![false; self.topo.len()];
        for r in roots {
            seen[r.index()] = true;
        }
        let mut stack: Vec<ComponentId> = roots.to_vec();
        let mut out = Vec::new();
        while let Some(id) = stack.pop() {
            for &d in self.topo.downstream(id) {
                if !std::mem::replace(&mut seen[d.index()], true) {
                    stack.push(d);
                    if self.obs(d).is_up() {
                        out.push(d);
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// Groups the members of `in_set` into waves so that each comes after its upstream
    /// members (`forward`) or after its downstream members (reverse), ordered by `key`
    /// inside a wave.
    fn waves(
        &self,
        in_set: &[bool],
        forward: bool,
        mut make: impl FnMut(ComponentId) -> Step,
    ) -> Vec<Wave> {
        let mut level = vec![0usize; self.topo.len()];
        let mut max_level = 0;
        let mut members: Vec<ComponentId> = Vec::new();
        let order = self.topo.order();
        let iter: Box<dyn Iterator<Item = &ComponentId>> = if forward {
            Box::new(order.iter())
        } else {
            Box::new(order.iter().rev())
        };
        for &id in iter {
            if !in_set[id.index()] {
                continue;
            }
            let before = if forward {
                self.topo.upstream(id)
            } else {
                self.topo.downstream(id)
            };
            let l = before
                .iter()
                .filter(|b| in_set[b.index()])
                .map(|b| level[b.index()] + 1)
                .max()
                .unwrap_or(0);
            level[id.index()] = l;
            max_level = max_level.max(l);
            members.push(id);
        }
        let mut waves: Vec<Vec<ComponentId>> =
            vec![Vec::new(); if members.is_empty() { 0 } else { max_level + 1 }];
        for id in members {
            waves[level[id.index()]].push(id);
        }
        waves
            .into_iter()
            .map(|mut ids| {
                ids.sort();
                Wave {
                    steps: ids.into_iter().map(&mut make).collect(),
                }
            })
            .collect()
    }

    fn start_action(&mut self, id: ComponentId, why: &str) -> (Action, String) {
        let c = self.topo.component(id);
        let o = self.obs(id).clone();
        if c.owner == Owner::External {
            return if o.is_ready() {
                (Action::Noop, "external, ready".into())
            } else {
                (
                    Action::AwaitReady,
                    format!(
                        "external (observed only): wait for readiness{}",
                        readiness_target(c)
                    ),
                )
            };
        }
        // Up, or held by a process that is not it (its port taken): never adopted.
        if o.is_up() || matches!(o.started_by, StartedBy::Foreign { .. }) {
            self.check_foreign(id);
        }
        if o.is_up() && !o.config_changes.is_empty() {
            // Its probes follow the new config, which it does not run: never wait on
            // them for a component left running as it is.
            return if self.recreate {
                (
                    Action::Restart,
                    format!("config changed: {}", o.config_changes.join("; ")),
                )
            } else {
                (
                    Action::Noop,
                    format!(
                        "left running with its older config (--no-recreate): {}",
                        o.config_changes.join("; ")
                    ),
                )
            };
        }
        match o.lifecycle {
            _ if o.is_ready() => (Action::Noop, "already running and ready".into()),
            Lifecycle::Running | Lifecycle::Starting => (
                Action::AwaitReady,
                format!("already running: wait for readiness{}", readiness_target(c)),
            ),
            Lifecycle::Stopped | Lifecycle::Failed => (Action::Start, why.into()),
            Lifecycle::Stopping | Lifecycle::Unknown => {
                self.unsettled(id);
                (Action::Noop, String::new())
            }
        }
    }

    /// Refuses for `id` between states, or unknown: waiting helps, unless the owner
    /// of its lifecycle cannot be asked at all (then no wait does, and it says why).
    fn unsettled(&mut self, id: ComponentId) {
        let c = self.topo.component(id);
        let o = self.obs(id);
        let reason = match &o.owner_error {
            Some(why) => Reason::OwnerUnavailable {
                component: c.name.clone(),
                why: why.clone(),
            },
            None => Reason::Unsettled {
                component: c.name.clone(),
                lifecycle: o.lifecycle.as_str().into(),
            },
        };
        self.reasons.push(reason);
    }

    fn start(&mut self, targets: &[ComponentId], why: &str) -> Vec<Wave> {
        let in_set = self.upstream_closure(targets);
        let is_target: BTreeSet<ComponentId> = targets.iter().copied().collect();
        let mut decided = Vec::new();
        for (i, &member) in in_set.iter().enumerate() {
            if member {
                let id = ComponentId(i as u32);
                if !self.check_observable(id) {
                    continue;
                }
                let reason = if is_target.contains(&id) {
                    why.to_string()
                } else {
                    let dependents: Vec<&str> = self
                        .topo
                        .downstream(id)
                        .iter()
                        .filter(|d| in_set[d.index()])
                        .map(|d| self.topo.component(*d).name.as_str())
                        .collect();
                    format!("dependency of {}", dependents.join(", "))
                };
                decided.push((id, self.start_action(id, &reason)));
            }
        }
        let mut by_id: std::collections::HashMap<ComponentId, (Action, String)> =
            decided.into_iter().collect();
        self.waves(&in_set, true, |id| {
            let (a, r) = by_id
                .remove(&id)
                .unwrap_or((Action::Noop, "not observable".into()));
            self.step(id, a, r)
        })
    }

    /// After a stack stop phase, starts the members again (restart of a stack).
    fn start_after_stop(&mut self, members: &[ComponentId], stop_waves: &[Wave]) -> Vec<Wave> {
        let stopped: BTreeSet<&str> = stop_waves
            .iter()
            .flat_map(|w| &w.steps)
            .filter(|s| s.action == Action::Stop)
            .map(|s| s.component.as_str())
            .collect();
        let in_set = self.upstream_closure(members);
        let mut actions = Vec::new();
        for (i, &m) in in_set.iter().enumerate() {
            if m {
                let id = ComponentId(i as u32);
                let name = self.topo.component(id).name.as_str();
                let a = if stopped.contains(name) {
                    (Action::Start, "restart".to_string())
                } else {
                    self.start_action(id, "stack member")
                };
                actions.push((id, a));
            }
        }
        let mut by_id: std::collections::HashMap<ComponentId, (Action, String)> =
            actions.into_iter().collect();
        self.waves(&in_set, true, |id| {
            let (a, r) = by_id.remove(&id).expect("decided");
            self.step(id, a, r)
        })
    }

    fn stop(
        &mut self,
        targets: &[ComponentId],
        op: &Operation,
        record: Option<&[String]>,
    ) -> (Vec<Wave>, Vec<Impact>) {
        let n = self.topo.len();
        let mut in_set = vec![false; n];
        let stack_op =
            record.is_some() || matches!(self.topo.target(&op.target), Some(Target::Stack(_)));
        let mut set: Vec<ComponentId> = targets.to_vec();
        if let Some(order) = record {
            // The stack's recorded start order includes the dependencies it started.
            set.extend(order.iter().filter_map(|n| self.topo.id(n)));
        }
        for &id in &set {
            in_set[id.index()] = true;
        }
        let mut impact = Vec::new();
        // A stack's stop with --force: what cannot be seen (its host unreachable or
        // not permitted) is reported and left as it is; everything else is stopped.
        // A component named alone that cannot be seen is still refused.
        let mut unreached: BTreeSet<ComponentId> = BTreeSet::new();
        for &id in &set {
            let c = self.topo.component(id);
            if c.owner == Owner::External && !stack_op {
                self.reasons.push(Reason::ExternalNotMutable {
                    component: c.name.clone(),
                    why: "`stop` would stop it".into(),
                });
            }
            let seen = self.obs(id).observability;
            // Whether it runs is not known (its owner cannot be asked): never taken
            // for stopped.
            let unknown = c.is_managed() && self.obs(id).lifecycle == Lifecycle::Unknown;
            if op.force && stack_op && c.is_managed() && seen != Observability::Observed {
                unreached.insert(id);
                impact.push(Impact {
                    component: c.name.clone(),
                    effect: format!(
                        "not reached: its host `{}` is {}; left as it is (--force)",
                        c.host,
                        observability_name(seen)
                    ),
                });
            } else if op.force && stack_op && unknown {
                unreached.insert(id);
                let why = self.obs(id).owner_error.clone().unwrap_or_default();
                impact.push(Impact {
                    component: c.name.clone(),
                    effect: format!(
                        "not reached: its owner cannot be asked ({why}); left as it is (--force)"
                    ),
                });
            } else if self.check_observable(id) && unknown {
                self.unsettled(id);
            }
        }
        // What the stack started only as a dependency stays running while something
        // outside the set (another stack's member) still depends on it: said, not
        // refused; only the stack's own members are refused for their dependents.
        let mut kept: BTreeSet<ComponentId> = BTreeSet::new();
        if stack_op {
            loop {
                let before = kept.len();
                for &id in &set {
                    if targets.contains(&id) || kept.contains(&id) || !self.obs(id).is_up() {
                        continue;
                    }
                    let users: Vec<String> = self
                        .topo
                        .downstream(id)
                        .iter()
                        .copied()
                        .filter(|d| {
                            (!in_set[d.index()] || kept.contains(d)) && self.obs(*d).is_up()
                        })
                        .map(|d| format!("`{}`", self.topo.component(d).name))
                        .collect();
                    if !users.is_empty() {
                        kept.insert(id);
                        impact.push(Impact {
                            component: self.topo.component(id).name.clone(),
                            effect: format!(
                                "left running: {} still depend{} on it",
                                users.join(", "),
                                if users.len() == 1 { "s" } else { "" }
                            ),
                        });
                    }
                }
                if kept.len() == before {
                    break;
                }
            }
            for id in &kept {
                in_set[id.index()] = false;
            }
        }
        let managed_up: Vec<ComponentId> = set
            .iter()
            .copied()
            .filter(|id| !kept.contains(id))
            .filter(|id| !unreached.contains(id))
            .filter(|&id| self.topo.component(id).is_managed() && self.obs(id).is_up())
            .collect();
        for &id in &managed_up {
            self.check_foreign(id);
        }
        let dependents: Vec<ComponentId> = self
            .running_dependents(&managed_up)
            .into_iter()
            .filter(|d| !in_set[d.index()])
            .collect();
        if !dependents.is_empty() {
            if op.cascade {
                for &d in &dependents {
                    let dc = self.topo.component(d);
                    if dc.owner == Owner::External {
                        self.reasons.push(Reason::ExternalNotMutable {
                            component: dc.name.clone(),
                            why: format!(
                                "it depends on {} and --cascade would stop it",
                                self.names_upstream_in(d, &in_set)
                            ),
                        });
                    } else {
                        self.check_observable(d);
                    }
                    in_set[d.index()] = true;
                }
            } else if op.force {
                for &d in &dependents {
                    impact.push(Impact {
                        component: self.topo.component(d).name.clone(),
                        effect: format!(
                            "keeps running without {}",
                            self.names_upstream_in(d, &in_set)
                        ),
                    });
                }
            } else {
                // Name the dependents per stopped component, for a precise refusal: its
                // direct running dependents outside the set (for a single component,
                // every running dependent, since --cascade would stop them all).
                for &id in &managed_up {
                    let deps: Vec<String> = if stack_op {
                        self.topo
                            .downstream(id)
                            .iter()
                            .copied()
                            .filter(|d| !in_set[d.index()] && self.obs(*d).is_up())
                            .map(|d| self.topo.component(d).name.clone())
                            .collect()
                    } else {
                        self.running_dependents(&[id])
                            .into_iter()
                            .filter(|d| !in_set[d.index()])
                            .map(|d| self.topo.component(d).name.clone())
                            .collect()
                    };
                    if !deps.is_empty() {
                        self.reasons.push(Reason::DependentsRunning {
                            component: self.topo.component(id).name.clone(),
                            dependents: deps,
                        });
                    }
                }
            }
        }
        let cascaded: BTreeSet<ComponentId> = if op.cascade {
            dependents.into_iter().collect()
        } else {
            BTreeSet::new()
        };
        let waves = self.waves(&in_set, false, |id| {
            let c = self.topo.component(id);
            let o = self.obs(id);
            let (a, r) = if c.owner == Owner::External {
                (Action::Noop, "external: observed only, never stopped")
            } else if unreached.contains(&id) {
                (
                    Action::Noop,
                    "not reached: its state cannot be seen (--force)",
                )
            } else if !o.is_up() {
                (
                    Action::RecordStopped,
                    "already stopped: record that it should stay stopped",
                )
            } else if cascaded.contains(&id) {
                (Action::Stop, "dependent (--cascade)")
            } else if targets.contains(&id) {
                (
                    Action::Stop,
                    if stack_op {
                        "stack member"
                    } else {
                        "requested"
                    },
                )
            } else {
                (Action::Stop, "started with the stack")
            };
            self.step(id, a, r)
        });
        // A stack's recorded start order decides the order inside each wave.
        let waves = match record {
            Some(order) => waves
                .into_iter()
                .map(|mut w| {
                    let pos = |name: &str| {
                        order
                            .iter()
                            .position(|n| n == name)
                            .map_or(usize::MAX, |p| usize::MAX - 1 - p)
                    };
                    w.steps
                        .sort_by_key(|s| (pos(&s.component), s.component.clone()));
                    w
                })
                .collect(),
            None => waves,
        };
        (waves, impact)
    }

    fn names_upstream_in(&self, id: ComponentId, in_set: &[bool]) -> String {
        let names: Vec<&str> = self
            .topo
            .upstream(id)
            .iter()
            .filter(|u| in_set[u.index()])
            .map(|u| self.topo.component(*u).name.as_str())
            .collect();
        if names.is_empty() {
            "a stopped dependency".into()
        } else {
            names.join(", ")
        }
    }

    fn restart(&mut self, id: ComponentId, cascade: bool) -> (Vec<Wave>, Vec<Impact>) {
        let c = self.topo.component(id);
        if c.owner == Owner::External {
            self.reasons.push(Reason::ExternalNotMutable {
                component: c.name.clone(),
                why: "`restart` would stop and start it".into(),
            });
            return (Vec::new(), Vec::new());
        }
        if !self.check_observable(id) {
            return (Vec::new(), Vec::new());
        }
        let o = self.obs(id).clone();
        if o.lifecycle == Lifecycle::Unknown {
            // Not known to run or not (its owner cannot be asked): never taken for
            // stopped and started.
            self.unsettled(id);
            return (Vec::new(), Vec::new());
        }
        if o.is_up() {
            self.check_foreign(id);
        }
        let dependents = self.running_dependents(&[id]);
        if !cascade {
            let step = if o.is_up() {
                self.step(id, Action::Restart, "requested")
            } else {
                self.step(id, Action::Start, "not running: restart starts it")
            };
            let impact = dependents
                .iter()
                .map(|&d| Impact {
                    component: self.topo.component(d).name.clone(),
                    effect: format!("sees {} restart", c.name),
                })
                .collect();
            return (vec![Wave { steps: vec![step] }], impact);
        }
        let mut in_set = vec![false; self.topo.len()];
        in_set[id.index()] = true;
        let mut impact = Vec::new();
        for &d in &dependents {
            let dc = self.topo.component(d);
            if dc.owner == Owner::External {
                impact.push(Impact {
                    component: dc.name.clone(),
                    effect: format!("external: not restarted, sees {} restart", c.name),
                });
            } else if self.check_observable(d) {
                in_set[d.index()] = true;
            }
        }
        let up = |p: &Planner<'_>, x: ComponentId| p.obs(x).is_up();
        let mut stop_set = in_set.clone();
        for (i, m) in stop_set.iter_mut().enumerate() {
            if *m && !up(self, ComponentId(i as u32)) {
                *m = false;
            }
        }
        let mut waves = self.waves(&stop_set, false, |x| {
            self.step(
                x,
                Action::Stop,
                if x == id {
                    "restart (stop)"
                } else {
                    "dependent (--cascade): restart (stop)"
                },
            )
        });
        waves.extend(self.waves(&in_set, true, |x| {
            self.step(
                x,
                Action::Start,
                if x == id {
                    "restart (start)"
                } else {
                    "dependent (--cascade): restart (start)"
                },
            )
        }));
        (waves, impact)
    }
}

/// How a refusal or an impact says that a component cannot be seen.
fn observability_name(o: Observability) -> &'static str {
    match o {
        Observability::Observed => "observed",
        Observability::Unreachable => "unreachable",
        Observability::NotPermitted => "not-permitted",
        Observability::Unsupported => "not observable from here (no usable flotilla or state directory on its host: see `flotilla status`)",
        Observability::Unobserved => "not observed (absent from the observed state planned against)",
    }
}

/// ` (GET http://127.0.0.1:8080/health)`: what `c`'s readiness probe looks at, for a
/// step that waits on it; empty without one.
fn readiness_target(c: &flotilla_model::topology::Component) -> String {
    c.readiness
        .as_ref()
        .map(|p| format!(" ({})", p.check.target()))
        .unwrap_or_default()
}
