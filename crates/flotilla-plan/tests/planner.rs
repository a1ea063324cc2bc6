//! Planner semantics: table-driven cases on a small realistic stack, and properties
//! over random DAGs and random observed states.

use flotilla_model::status::{
    Health, Lifecycle, Observability, Observed, ObservedComponent, StackRecord, StartedBy,
};
use flotilla_model::{validate, Format, SourceFile, Sources, Topology};
use flotilla_plan::{Action, Operation, Plan, Reason, Refusal, Verb};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

/// [`flotilla_plan::plan`] with the tables' convention made explicit: a component the
/// case does not mention was observed stopped (the planner itself takes an absent
/// component for unknown).
fn plan(t: &Topology, o: &Observed, op: &Operation) -> Result<Plan, Refusal> {
    let mut full = o.clone();
    for c in &t.components {
        full.components
            .entry(c.name.clone())
            .or_insert(ObservedComponent::STOPPED);
    }
    flotilla_plan::plan(t, &full, op)
}

fn topology(toml: &str) -> Topology {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("t.toml", Format::Toml, toml));
    match validate(&sources, id, &[]) {
        Ok(v) => v.topology,
        Err(d) => panic!("invalid test inventory: {d:#?}"),
    }
}

/// llm and embed feed proxy; gateway uses proxy; vectors is external and used by proxy.
const STACK: &str = r#"
[components.llm]
command = ["llama-server"]
[components.embed]
command = ["llama-server", "--embeddings"]
[components.vectors]
owner = "external"
[components.proxy]
command = ["litellm"]
depends_on = ["llm", "embed", "vectors"]
[components.gateway]
command = ["nginx"]
depends_on = ["proxy"]
[stacks.chat]
components = ["proxy"]
"#;

fn state(entries: &[(&str, Lifecycle, Health)]) -> Observed {
    let mut o = Observed::default();
    for (name, lifecycle, health) in entries {
        o.components.insert(
            name.to_string(),
            ObservedComponent {
                lifecycle: *lifecycle,
                health: *health,
                observability: Observability::Observed,
                config_changes: Vec::new(),
                started_by: StartedBy::Nobody,
                owner_error: None,
                unobserved_why: None,
            },
        );
    }
    o
}

fn ready(names: &[&str]) -> Observed {
    state(
        &names
            .iter()
            .map(|n| (*n, Lifecycle::Running, Health::Healthy))
            .collect::<Vec<_>>(),
    )
}

/// The plan as `[[(action, component)]]` per wave.
fn shape(p: &Plan) -> Vec<Vec<(&'static str, String)>> {
    p.waves
        .iter()
        .map(|w| {
            w.steps
                .iter()
                .map(|s| (s.action.as_str(), s.component.clone()))
                .collect()
        })
        .collect()
}

fn op(verb: Verb, target: &str, force: bool, cascade: bool) -> Operation {
    Operation {
        verb,
        target: target.into(),
        force,
        cascade,
        no_recreate: false,
    }
}

fn s(a: &'static str, c: &str) -> (&'static str, String) {
    (a, c.to_string())
}

#[test]
fn start_brings_up_missing_upstream_in_dependency_order() {
    let t = topology(STACK);
    let p = plan(
        &t,
        &Observed::default(),
        &Operation::new(Verb::Start, "gateway"),
    )
    .unwrap();
    assert_eq!(
        shape(&p),
        vec![
            vec![
                s("start", "embed"),
                s("start", "llm"),
                s("await-ready", "vectors")
            ],
            vec![s("start", "proxy")],
            vec![s("start", "gateway")],
        ]
    );
    assert_eq!(p.cleanup, vec!["gateway", "proxy", "llm", "embed"]);
    assert_eq!(p.topology_digest, t.digest());
}

#[test]
fn start_leaves_ready_components_alone_and_waits_for_starting_ones() {
    let t = topology(STACK);
    let mut o = ready(&["llm", "vectors"]);
    o.components
        .extend(state(&[("embed", Lifecycle::Running, Health::Unhealthy)]).components);
    let p = plan(&t, &o, &Operation::new(Verb::Start, "proxy")).unwrap();
    assert_eq!(
        shape(&p),
        vec![
            vec![
                s("await-ready", "embed"),
                s("no-op", "llm"),
                s("no-op", "vectors")
            ],
            vec![s("start", "proxy")],
        ]
    );
    // Only what this plan starts is cleaned up: not llm, not embed.
    assert_eq!(p.cleanup, vec!["proxy"]);
}

#[test]
fn start_of_what_runs_is_all_no_ops() {
    let t = topology(STACK);
    let o = ready(&["llm", "embed", "vectors", "proxy", "gateway"]);
    let p = plan(&t, &o, &Operation::new(Verb::Start, "gateway")).unwrap();
    assert!(p.is_noop());
    assert!(p.cleanup.is_empty());
}

#[test]
fn stop_is_refused_while_dependents_run_and_names_them() {
    let t = topology(STACK);
    let o = ready(&["llm", "embed", "vectors", "proxy", "gateway"]);
    let r = plan(&t, &o, &Operation::new(Verb::Stop, "llm")).unwrap_err();
    assert_eq!(
        r.reasons,
        vec![Reason::DependentsRunning {
            component: "llm".into(),
            dependents: vec!["gateway".into(), "proxy".into()]
        }]
    );
    assert!(r.to_string().contains("--cascade"));
}

#[test]
fn stop_force_stops_alone_and_reports_impact() {
    let t = topology(STACK);
    let o = ready(&["llm", "embed", "vectors", "proxy", "gateway"]);
    let p = plan(&t, &o, &op(Verb::Stop, "llm", true, false)).unwrap();
    assert_eq!(shape(&p), vec![vec![s("stop", "llm")]]);
    let affected: Vec<&str> = p.impact.iter().map(|i| i.component.as_str()).collect();
    assert_eq!(affected, vec!["gateway", "proxy"]);
}

#[test]
fn stop_cascade_stops_dependents_first_in_reverse_order() {
    let t = topology(STACK);
    let o = ready(&["llm", "embed", "vectors", "proxy", "gateway"]);
    let p = plan(&t, &o, &op(Verb::Stop, "llm", false, true)).unwrap();
    assert_eq!(
        shape(&p),
        vec![
            vec![s("stop", "gateway")],
            vec![s("stop", "proxy")],
            vec![s("stop", "llm")]
        ]
    );
    assert!(p.cleanup.is_empty());
}

#[test]
fn stop_of_what_is_stopped_only_records_the_intent() {
    let t = topology(STACK);
    let p = plan(
        &t,
        &Observed::default(),
        &Operation::new(Verb::Stop, "proxy"),
    )
    .unwrap();
    // No process is touched, but the intent is an explicit step: it should stay
    // stopped (so it is not `down-unexpectedly` later).
    assert_eq!(shape(&p), vec![vec![s("record-stopped", "proxy")]]);
    assert!(p.is_noop());
}

#[test]
fn external_components_are_never_mutated() {
    let t = topology(STACK);
    let o = ready(&["llm", "embed", "vectors", "proxy"]);
    for verb in [Verb::Stop, Verb::Restart] {
        let r = plan(&t, &o, &Operation::new(verb, "vectors")).unwrap_err();
        assert!(
            matches!(&r.reasons[0], Reason::ExternalNotMutable { component, .. } if component == "vectors"),
            "{r}"
        );
    }
    // A cascade that would have to stop an external dependent says so.
    let t2 = topology(
        r#"
[components.db]
command = ["postgres"]
[components.reports]
owner = "external"
depends_on = ["db"]
"#,
    );
    let o2 = ready(&["db", "reports"]);
    let r = plan(&t2, &o2, &op(Verb::Stop, "db", false, true)).unwrap_err();
    assert!(
        matches!(&r.reasons[0], Reason::ExternalNotMutable { component, why } if component == "reports" && why.contains("--cascade")),
        "{r}"
    );
}

/// A step that waits on a readiness probe says what the probe looks at, an inline
/// target (`url`, `address`) as much as a named endpoint.
#[test]
fn waiting_on_readiness_shows_the_probe_target() {
    let t = topology(
        r#"
[components.vectors]
owner = "external"
readiness = { http = { url = "http://127.0.0.1:6333/readyz" } }
[components.db]
owner = "external"
readiness = { tcp = { address = "127.0.0.1:5432" } }
[components.api]
command = ["api"]
depends_on = ["vectors", "db"]
"#,
    );
    let p = plan(
        &t,
        &Observed::default(),
        &Operation::new(Verb::Start, "api"),
    )
    .unwrap();
    let reason = |name: &str| {
        p.waves
            .iter()
            .flat_map(|w| &w.steps)
            .find(|s| s.component == name)
            .map(|s| (s.action, s.reason.clone()))
            .unwrap_or_else(|| panic!("{name}"))
    };
    assert_eq!(
        reason("vectors"),
        (
            Action::AwaitReady,
            "external (observed only): wait for readiness (GET http://127.0.0.1:6333/readyz)"
                .into()
        )
    );
    assert_eq!(
        reason("db"),
        (
            Action::AwaitReady,
            "external (observed only): wait for readiness (connect 127.0.0.1:5432)".into()
        )
    );
}

#[test]
fn restart_is_alone_unless_cascade() {
    let t = topology(STACK);
    let o = ready(&["llm", "embed", "vectors", "proxy", "gateway"]);
    let p = plan(&t, &o, &Operation::new(Verb::Restart, "llm")).unwrap();
    assert_eq!(shape(&p), vec![vec![s("restart", "llm")]]);
    assert_eq!(p.impact.len(), 2);
    let p = plan(&t, &o, &op(Verb::Restart, "llm", false, true)).unwrap();
    assert_eq!(
        shape(&p),
        vec![
            vec![s("stop", "gateway")],
            vec![s("stop", "proxy")],
            vec![s("stop", "llm")],
            vec![s("start", "llm")],
            vec![s("start", "proxy")],
            vec![s("start", "gateway")],
        ]
    );
}

#[test]
fn stack_down_reverses_the_recorded_start_order() {
    let t = topology(STACK);
    let mut o = ready(&["llm", "embed", "vectors", "proxy"]);
    // The stack started embed before llm; down stops llm before embed.
    o.stacks.insert(
        "chat".into(),
        StackRecord {
            start_order: vec!["embed".into(), "llm".into(), "proxy".into()],
        },
    );
    let p = plan(&t, &o, &Operation::new(Verb::Stop, "chat")).unwrap();
    assert_eq!(
        shape(&p),
        vec![
            vec![s("stop", "proxy")],
            vec![s("stop", "llm"), s("stop", "embed")]
        ]
    );
    // The external member it uses is never stopped, even by a stack operation.
    assert!(p.steps().all(|s| s.component != "vectors"));
}

#[test]
fn stack_up_includes_member_dependencies() {
    let t = topology(STACK);
    let p = plan(
        &t,
        &Observed::default(),
        &Operation::new(Verb::Start, "chat"),
    )
    .unwrap();
    let started: Vec<&str> = p
        .steps()
        .filter(|s| s.action == Action::Start)
        .map(|s| s.component.as_str())
        .collect();
    assert_eq!(started, vec!["embed", "llm", "proxy"]);
}

#[test]
fn unreachable_and_foreign_components_are_refused() {
    let t = topology(STACK);
    let mut o = Observed::default();
    o.components.insert(
        "llm".into(),
        ObservedComponent {
            observability: Observability::Unreachable,
            config_changes: Vec::new(),
            lifecycle: Lifecycle::Unknown,
            ..Default::default()
        },
    );
    o.components.insert(
        "embed".into(),
        ObservedComponent {
            lifecycle: Lifecycle::Running,
            health: Health::Healthy,
            observability: Observability::Observed,
            config_changes: Vec::new(),
            started_by: StartedBy::Foreign {
                evidence: "pid 4242 (llama-server)".into(),
            },
            owner_error: None,
            unobserved_why: None,
        },
    );
    let r = plan(&t, &o, &Operation::new(Verb::Start, "proxy")).unwrap_err();
    assert_eq!(r.reasons.len(), 2, "{r}");
    assert!(r
        .reasons
        .iter()
        .any(|x| matches!(x, Reason::Unobservable { component, .. } if component == "llm")));
    assert!(r
        .reasons
        .iter()
        .any(|x| matches!(x, Reason::ForeignOwner { component, .. } if component == "embed")));
}

#[test]
fn unknown_target_suggests_a_name() {
    let t = topology(STACK);
    let r = plan(
        &t,
        &Observed::default(),
        &Operation::new(Verb::Start, "proxx"),
    )
    .unwrap_err();
    assert!(r.is_unknown_target());
    assert_eq!(
        r.reasons[0],
        Reason::UnknownTarget {
            target: "proxx".into(),
            suggestion: Some("proxy".into())
        }
    );
}

#[test]
fn plans_are_deterministic_and_name_their_inputs() {
    let t = topology(STACK);
    let o = ready(&["llm"]);
    let a = plan(&t, &o, &Operation::new(Verb::Start, "gateway")).unwrap();
    let b = plan(&t, &o, &Operation::new(Verb::Start, "gateway")).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    assert_eq!(a.digest(), b.digest());
    let c = plan(
        &t,
        &Observed::default(),
        &Operation::new(Verb::Start, "gateway"),
    )
    .unwrap();
    assert_ne!(a.observed_digest, c.observed_digest);
    assert_eq!(a.topology_digest, c.topology_digest);
    // The JSON round-trips.
    let back: Plan = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(back, a);
}

// ---------------------------------------------------------------- properties

#[derive(Debug, Clone)]
struct Case {
    /// deps[i] ⊆ 0..i, so the graph is acyclic.
    deps: Vec<Vec<usize>>,
    external: Vec<bool>,
    states: Vec<u8>,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..24).prop_flat_map(|n| {
        let deps = (0..n)
            .map(|i| proptest::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i.min(3)))
            .collect::<Vec<_>>();
        (
            deps,
            proptest::collection::vec(proptest::bool::weighted(0.15), n),
            proptest::collection::vec(0u8..5, n),
        )
            .prop_map(|(deps, external, states)| Case {
                deps,
                external,
                states,
            })
    })
}

fn build(c: &Case) -> (Topology, Observed) {
    let mut toml = String::new();
    for (i, deps) in c.deps.iter().enumerate() {
        toml.push_str(&format!("[components.c{i:02}]\n"));
        if c.external[i] {
            toml.push_str("owner = \"external\"\n");
        } else {
            toml.push_str("command = [\"svc\"]\n");
        }
        let names: Vec<String> = deps.iter().map(|d| format!("\"c{d:02}\"")).collect();
        toml.push_str(&format!("depends_on = [{}]\n", names.join(", ")));
    }
    let t = topology(&toml);
    let mut o = Observed::default();
    for (i, st) in c.states.iter().enumerate() {
        let (lifecycle, health) = match st {
            0 => (Lifecycle::Stopped, Health::NotApplicable),
            1 => (Lifecycle::Running, Health::Healthy),
            2 => (Lifecycle::Running, Health::Unhealthy),
            3 => (Lifecycle::Starting, Health::Unknown),
            _ => (Lifecycle::Failed, Health::NotApplicable),
        };
        o.components.insert(
            format!("c{i:02}"),
            ObservedComponent {
                lifecycle,
                health,
                observability: Observability::Observed,
                config_changes: Vec::new(),
                started_by: StartedBy::Nobody,
                owner_error: None,
                unobserved_why: None,
            },
        );
    }
    (t, o)
}

fn wave_of(p: &Plan) -> HashMap<String, usize> {
    p.waves
        .iter()
        .enumerate()
        .flat_map(|(i, w)| w.steps.iter().map(move |s| (s.component.clone(), i)))
        .collect()
}

/// Applies a plan's effect: started/restarted/awaited components become ready,
/// stopped ones stopped. (Awaited external components are assumed to come up.)
fn apply(o: &Observed, p: &Plan) -> Observed {
    let mut o = o.clone();
    for s in p.steps() {
        let e = o.components.entry(s.component.clone()).or_default();
        match s.action {
            Action::Start | Action::Restart | Action::AwaitReady => {
                e.lifecycle = Lifecycle::Running;
                e.health = Health::Healthy;
            }
            Action::Stop => {
                e.lifecycle = Lifecycle::Stopped;
                e.health = Health::NotApplicable;
            }
            Action::Noop | Action::RecordStopped => {}
        }
    }
    o
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The plan carries its own step edges: each points to an earlier step, a start
    /// waits for the step of every upstream dependency in the plan, and a stop for
    /// every downstream dependent's.
    #[test]
    fn steps_wait_for_their_dependencies_steps(c in case(), target in 0usize..24, stop in any::<bool>()) {
        let (t, o) = build(&c);
        let name = format!("c{:02}", target % c.deps.len());
        let op = Operation { cascade: stop, ..Operation::new(if stop { Verb::Stop } else { Verb::Start }, &name) };
        let Ok(p) = plan(&t, &o, &op) else { return Ok(()) };
        let steps: Vec<&flotilla_plan::Step> = p.steps().collect();
        for (k, step) in steps.iter().enumerate() {
            prop_assert!(step.after.iter().all(|&a| a < k), "{k} waits for a later step: {:?}", step.after);
            let id = t.id(&step.component).unwrap();
            for (n, other) in steps.iter().enumerate().take(k) {
                let oid = t.id(&other.component).unwrap();
                let needed = match step.action {
                    Action::Start => t.upstream(id).contains(&oid),
                    Action::Stop => t.downstream(id).contains(&oid),
                    _ => false,
                };
                if needed && wave_of(&p)[&other.component] < wave_of(&p)[&step.component] {
                    prop_assert!(step.after.contains(&n), "{} does not wait for {}", step.component, other.component);
                }
            }
        }
    }

    /// The edges are exactly those the rule names, found here by comparing every pair
    /// of steps: an earlier wave's step of the same component, of the other kind
    /// (stop or start), or of an upstream dependency (for a start) or a downstream
    /// dependent (for a stop).
    #[test]
    fn step_edges_are_exactly_the_rule(c in case(), target in 0usize..24, verb in 0usize..3, cascade in any::<bool>()) {
        let (t, o) = build(&c);
        let name = format!("c{:02}", target % c.deps.len());
        let verb = [Verb::Start, Verb::Stop, Verb::Restart][verb];
        let Ok(p) = plan(&t, &o, &Operation { cascade, ..Operation::new(verb, &name) }) else { return Ok(()) };
        let flat: Vec<(usize, flotilla_model::topology::ComponentId, bool)> = p
            .waves
            .iter()
            .enumerate()
            .flat_map(|(w, wave)| wave.steps.iter().map(move |s| (w, s, matches!(s.action, Action::Stop | Action::RecordStopped))))
            .map(|(w, s, stopping)| (w, t.id(&s.component).unwrap(), stopping))
            .collect();
        for (k, step) in p.steps().enumerate() {
            let (w, j, stop_j) = flat[k];
            let expected: Vec<usize> = flat
                .iter()
                .enumerate()
                .filter(|(_, &(wi, i, stop_i))| {
                    wi < w
                        && (i == j
                            || stop_i != stop_j
                            || (!stop_j && t.upstream(j).contains(&i))
                            || (stop_j && t.downstream(j).contains(&i)))
                })
                .map(|(n, _)| n)
                .collect();
            prop_assert_eq!(&step.after, &expected, "step {} ({})", k, step.component);
        }
    }

    #[test]
    fn start_respects_dependency_order(c in case(), target in 0usize..24) {
        let (t, o) = build(&c);
        let name = format!("c{:02}", target % c.deps.len());
        let p = plan(&t, &o, &Operation::new(Verb::Start, &name)).unwrap();
        let wave = wave_of(&p);
        for step in p.steps() {
            let id = t.id(&step.component).unwrap();
            for up in t.upstream(id) {
                let up = &t.component(*up).name;
                prop_assert!(wave.contains_key(up), "upstream {} of {} missing from the plan", up, step.component);
                prop_assert!(wave[up] < wave[&step.component], "{} not before {}", up, step.component);
            }
            prop_assert!(!(step.action.is_mutating() && t.component(id).owner == flotilla_model::inventory::Owner::External));
        }
        // The cleanup set is exactly what the plan starts, dependents first.
        let mut started: Vec<&str> = p.steps().filter(|s| s.action == Action::Start).map(|s| s.component.as_str()).collect();
        let mut cleanup: Vec<&str> = p.cleanup.iter().map(String::as_str).collect();
        for (i, a) in p.cleanup.iter().enumerate() {
            for b in &p.cleanup[i + 1..] {
                prop_assert!(wave[a] >= wave[b], "cleanup stops {} before its dependent {}", b, a);
            }
        }
        started.sort();
        cleanup.sort();
        prop_assert_eq!(started, cleanup);
        // Replanning after the plan's effect yields only no-ops.
        let again = plan(&t, &apply(&o, &p), &Operation::new(Verb::Start, &name)).unwrap();
        prop_assert!(again.is_noop(), "replan not a no-op: {:?}", shape(&again));
    }

    #[test]
    fn stop_respects_reverse_order_and_refuses_honestly(c in case(), target in 0usize..24, force in any::<bool>(), cascade in any::<bool>()) {
        let (t, o) = build(&c);
        let name = format!("c{:02}", target % c.deps.len());
        let id = t.id(&name).unwrap();
        let operation = op(Verb::Stop, &name, force, cascade);
        match plan(&t, &o, &operation) {
            Ok(p) => {
                let wave = wave_of(&p);
                for step in p.steps() {
                    let sid = t.id(&step.component).unwrap();
                    prop_assert!(!step.action.is_mutating() || t.component(sid).is_managed());
                    if step.action == Action::Stop {
                        for down in t.downstream(sid) {
                            let dn = &t.component(*down).name;
                            if let Some(w) = wave.get(dn) {
                                prop_assert!(*w < wave[&step.component], "{} stopped before its dependent {}", step.component, dn);
                            }
                        }
                    }
                }
                prop_assert!(p.cleanup.is_empty());
                let again = plan(&t, &apply(&o, &p), &operation).unwrap();
                prop_assert!(again.is_noop(), "replan not a no-op: {:?}", shape(&again));
            }
            Err(r) => {
                for reason in &r.reasons {
                    match reason {
                        Reason::DependentsRunning { dependents, .. } => {
                            prop_assert!(!force && !cascade);
                            prop_assert!(!dependents.is_empty());
                            for d in dependents {
                                prop_assert!(o.component(d).is_up());
                            }
                        }
                        Reason::ExternalNotMutable { component, .. } => {
                            prop_assert!(!t.component(t.id(component).unwrap()).is_managed());
                            prop_assert!(component == &name || cascade);
                        }
                        other => prop_assert!(false, "unexpected refusal {other}"),
                    }
                }
                prop_assert!(o.component(&name).is_up() || !t.component(id).is_managed());
            }
        }
    }

    #[test]
    fn nothing_external_is_ever_mutated(c in case(), target in 0usize..24, verb in 0u8..3, cascade in any::<bool>()) {
        let (t, o) = build(&c);
        let name = format!("c{:02}", target % c.deps.len());
        let verb = [Verb::Start, Verb::Stop, Verb::Restart][verb as usize];
        if let Ok(p) = plan(&t, &o, &op(verb, &name, false, cascade)) {
            for step in p.steps() {
                let managed = t.component(t.id(&step.component).unwrap()).is_managed();
                prop_assert!(managed || !step.action.is_mutating(), "{:?} mutates external {}", step.action, step.component);
            }
        }
    }
}

#[test]
fn observed_json_accepts_the_documented_shape() {
    let o: Observed = serde_json::from_str(
        r#"{"components": {"llm": {"lifecycle": "running", "health": "healthy"},
            "embed": {"lifecycle": "running", "health": "n/a", "started_by": {"foreign": {"evidence": "pid 7"}}}},
           "stacks": {"chat": {"start_order": ["llm", "embed"]}}}"#,
    )
    .unwrap();
    assert!(o.component("llm").is_ready());
    assert_eq!(o.component("nothing").lifecycle, Lifecycle::Unknown);
    let _: BTreeMap<String, StackRecord> = o.stacks;
}

#[test]
fn a_component_absent_from_the_observation_is_unknown_never_stopped() {
    let t = topology(STACK);
    let o = state(&[("proxy", Lifecycle::Stopped, Health::NotApplicable)]);
    // `llm` and the others are not in the observation at all.
    assert_eq!(o.component("llm").lifecycle, Lifecycle::Unknown);
    let r = flotilla_plan::plan(&t, &o, &Operation::new(Verb::Start, "proxy")).unwrap_err();
    assert!(
        r.reasons
            .iter()
            .any(|x| matches!(x, Reason::Unobservable { component, .. } if component == "llm")),
        "{r:?}"
    );
}

#[test]
fn start_restarts_a_running_component_whose_config_changed_unless_told_not_to() {
    let t = topology(STACK);
    let mut o = ready(&["llm", "embed", "vectors", "proxy", "gateway"]);
    o.components.get_mut("llm").unwrap().config_changes = vec!["env.MODEL \"a\" → \"b\"".into()];
    let p = plan(&t, &o, &Operation::new(Verb::Start, "gateway")).unwrap();
    let llm = p.steps().find(|s| s.component == "llm").unwrap();
    assert_eq!(llm.action, Action::Restart);
    assert!(
        llm.reason.contains("config changed: env.MODEL"),
        "{}",
        llm.reason
    );
    // Its dependents wait for it (the plan's edges).
    let steps: Vec<_> = p.steps().collect();
    let k = steps.iter().position(|s| s.component == "llm").unwrap();
    let proxy = steps.iter().find(|s| s.component == "proxy").unwrap();
    assert!(proxy.after.contains(&k), "{:?}", proxy.after);
    let keep = Operation {
        no_recreate: true,
        ..Operation::new(Verb::Start, "gateway")
    };
    assert!(plan(&t, &o, &keep).unwrap().is_noop());
    // Its probes follow the new config (a new port fails them): still left alone,
    // never awaited.
    o.components.get_mut("llm").unwrap().health = Health::Unhealthy;
    let p = plan(&t, &o, &keep).unwrap();
    let llm = p.steps().find(|s| s.component == "llm").unwrap();
    assert_eq!(llm.action, Action::Noop, "{llm:?}");
    assert!(llm.reason.contains("--no-recreate"), "{}", llm.reason);
}

#[test]
fn down_force_stops_what_it_sees_and_reports_the_rest_as_not_reached() {
    let t = topology(STACK);
    let mut o = ready(&["llm", "embed", "vectors", "proxy"]);
    // llm's host is gone for good.
    o.components.get_mut("llm").unwrap().observability = Observability::Unreachable;
    let record = flotilla_model::status::StackRecord {
        start_order: vec!["llm".into(), "embed".into(), "proxy".into()],
    };
    o.stacks.insert("chat".into(), record);
    // Without --force: refused, naming the host it cannot see.
    let refused = plan(&t, &o, &op(Verb::Stop, "chat", false, false)).unwrap_err();
    assert!(refused.to_string().contains("unreachable"), "{refused}");
    // With --force: what it sees is stopped, in order; llm is reported, not touched.
    let p = plan(&t, &o, &op(Verb::Stop, "chat", true, false)).unwrap();
    let steps: Vec<(&str, String)> = p
        .steps()
        .map(|s| (s.action.as_str(), s.component.clone()))
        .collect();
    assert!(steps.contains(&("stop", "proxy".into())), "{steps:?}");
    assert!(steps.contains(&("stop", "embed".into())), "{steps:?}");
    assert!(steps.contains(&("no-op", "llm".into())), "{steps:?}");
    let llm = p
        .impact
        .iter()
        .find(|i| i.component == "llm")
        .expect("llm's impact");
    assert!(
        llm.effect.contains("not reached") && llm.effect.contains("unreachable"),
        "{llm:?}"
    );
    // A component named alone that cannot be seen is refused, --force or not.
    let alone = plan(&t, &o, &op(Verb::Stop, "llm", true, false)).unwrap_err();
    assert!(alone.to_string().contains("unreachable"), "{alone}");
}

#[test]
fn down_leaves_a_dependency_another_stack_still_uses_running_and_says_so() {
    // s = [c], c → b → a; u = [e], e → a: a is shared.
    let t = topology(
        r#"
[components.a]
command = ["a"]
[components.b]
command = ["b"]
depends_on = ["a"]
[components.c]
command = ["c"]
depends_on = ["b"]
[components.e]
command = ["e"]
depends_on = ["a"]
[stacks.s]
components = ["c"]
[stacks.u]
components = ["e"]
"#,
    );
    let mut o = ready(&["a", "b", "c", "e"]);
    o.stacks.insert(
        "s".into(),
        flotilla_model::status::StackRecord {
            start_order: vec!["a".into(), "b".into(), "c".into()],
        },
    );
    let p = plan(&t, &o, &op(Verb::Stop, "s", false, false)).unwrap();
    let stopped: Vec<String> = p
        .steps()
        .filter(|s| s.action == flotilla_plan::Action::Stop)
        .map(|s| s.component.clone())
        .collect();
    assert_eq!(stopped, vec!["c".to_string(), "b".to_string()]);
    let a = p
        .impact
        .iter()
        .find(|i| i.component == "a")
        .expect("a's impact");
    assert!(a.effect.contains("left running: `e`"), "{a:?}");
    // A stack's own member with a running dependent outside it is still refused.
    let refused = plan(&t, &o, &op(Verb::Stop, "b", false, false)).unwrap_err();
    assert!(refused.to_string().contains("dependents"), "{refused}");
}

#[test]
fn a_component_whose_owner_cannot_be_asked_is_never_taken_for_stopped() {
    let t = topology(STACK);
    let mut o = ready(&["embed", "vectors", "proxy", "gateway"]);
    o.components.insert(
        "llm".into(),
        ObservedComponent {
            lifecycle: Lifecycle::Unknown,
            health: Health::Unknown,
            observability: Observability::Observed,
            config_changes: Vec::new(),
            started_by: StartedBy::Nobody,
            owner_error: Some("the API server at https://lab:6443 did not answer".into()),
            unobserved_why: None,
        },
    );
    let why = |r: Refusal| r.to_string();
    // stop and restart refuse, saying why, rather than record it stopped or start it.
    for verb in [Verb::Stop, Verb::Restart] {
        let r = plan(&t, &o, &op(verb, "llm", false, false)).unwrap_err();
        assert!(
            why(r).contains("its owner cannot be asked (the API server at https://lab:6443"),
            "{verb:?}"
        );
    }
    // A stack's down with --force leaves it as it is and says so.
    o.stacks.insert(
        "chat".into(),
        StackRecord {
            start_order: vec!["llm".into(), "embed".into(), "proxy".into()],
        },
    );
    let refused = plan(&t, &o, &op(Verb::Stop, "chat", false, false)).unwrap_err();
    assert!(why(refused).contains("owner cannot be asked"));
    let p = plan(&t, &o, &op(Verb::Stop, "chat", true, false)).unwrap();
    assert!(p
        .steps()
        .any(|s| s.component == "llm" && s.action == Action::Noop));
    assert!(p
        .impact
        .iter()
        .any(|i| i.component == "llm" && i.effect.contains("its owner cannot be asked")));
}
