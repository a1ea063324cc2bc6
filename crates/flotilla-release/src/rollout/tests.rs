//! Table tests and properties of the rollout state machine.

use super::*;
use proptest::prelude::*;

const NEW: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const MAC: &str = "2222222222222222222222222222222222222222222222222222222222222222";
const OLD: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
const SOAK: u64 = 60_000;
const TIMEOUT: u64 = 600_000;

fn spec(max_in_flight: u32, canary: u32) -> RolloutSpec {
    RolloutSpec {
        name: "flotilla-agent".into(),
        version: "2.0.0".into(),
        serial: 9,
        selector: BTreeMap::from([("role".into(), "gpu".into())]),
        max_in_flight,
        canary,
        min_healthy_ms: SOAK,
        timeout_ms: TIMEOUT,
    }
}

fn artifacts() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("linux-x86_64".to_string(), NEW.to_string()),
        ("darwin-aarch64".to_string(), MAC.to_string()),
    ])
}

fn rollout(n: usize, max_in_flight: u32, canary: u32) -> Rollout {
    let hosts = (0..n)
        .map(|i| (format!("h{i}"), "linux-x86_64".to_string()))
        .collect();
    Rollout::new(1, spec(max_in_flight, canary), artifacts(), hosts, 0)
}

/// A report from `host` received at `at`: measured `running`, update `state` for NEW.
fn report(host: &str, at: i64, running: &str, state: Option<UpdateState>) -> HostUpdate {
    HostUpdate {
        host: host.into(),
        platform: "linux-x86_64".into(),
        running_sha256: Some(running.into()),
        pid: Some(100),
        update: state.map(|state| UpdateReport {
            name: "flotilla-agent".into(),
            version: "2.0.0".into(),
            sha256: NEW.into(),
            state,
            reason: None,
            detail: String::new(),
            evidence: vec![],
            since_ms: at,
        }),
        releases: BTreeMap::new(),
        updates: Vec::new(),
        skipped: Vec::new(),
        unskipped: Vec::new(),
        received_ms: at,
    }
}

fn new_running() -> String {
    format!("sha256:{NEW}")
}

fn phases(r: &Rollout) -> Vec<HostPhase> {
    r.hosts.iter().map(|h| h.phase).collect()
}

fn updates(list: Vec<HostUpdate>) -> BTreeMap<String, HostUpdate> {
    list.into_iter().map(|u| (u.host.clone(), u)).collect()
}

use HostPhase::{Pending as P, RolledBack as RB, Updated as OK, Updating as U};

#[test]
fn canary_first_then_max_in_flight_then_success() {
    let mut r = rollout(4, 2, 1);
    assert_eq!(r.phase, Phase::AwaitingApproval);
    assert!(
        !r.advance(&BTreeMap::new(), 10),
        "nothing happens before approval"
    );
    assert_eq!(phases(&r), [P, P, P, P]);
    r.approve(100).unwrap();
    assert_eq!(r.phase, Phase::InProgress);
    assert_eq!(
        phases(&r),
        [U, P, P, P],
        "only the canary starts, even with max 2"
    );
    assert!(r.assigned("h0") && !r.assigned("h1"));

    // The canary restarts into the new identity at 1000 and reports Updated later.
    let rep = |at, st| updates(vec![report("h0", at, &new_running(), Some(st))]);
    assert!(r.advance(&rep(1_000, UpdateState::Soaking), 1_000));
    assert_eq!(r.hosts[0].measured_ms, Some(1_000));
    // The agent says Updated, but the authority's soak (from 1000) is not over.
    r.advance(&rep(1_000, UpdateState::Updated), 1_000 + SOAK as i64 - 1);
    assert_eq!(phases(&r), [U, P, P, P]);
    r.advance(&rep(1_000, UpdateState::Updated), 1_000 + SOAK as i64);
    assert_eq!(phases(&r), [OK, U, U, P]);

    let t = 100_000;
    let some = |hosts: std::ops::Range<usize>, at, st| {
        updates(
            hosts
                .map(|i| report(&format!("h{i}"), at, &new_running(), Some(st)))
                .collect(),
        )
    };
    r.advance(&some(1..3, t, UpdateState::Updated), t + SOAK as i64);
    assert_eq!(phases(&r), [OK, OK, OK, U]);
    assert_eq!(r.hosts[3].sent_ms, Some(t + SOAK as i64));
    // h3 restarts into the new identity and soaks from there.
    let t3 = t + SOAK as i64 + 5;
    r.advance(&some(3..4, t3, UpdateState::Soaking), t3);
    assert_eq!(r.hosts[3].measured_ms, Some(t3));
    r.advance(&some(3..4, t3, UpdateState::Updated), t3 + SOAK as i64);
    assert_eq!(phases(&r), [OK, OK, OK, OK]);
    assert_eq!(r.phase, Phase::Succeeded);
    assert!(r.is_settled());
    assert!(!r.advance(&BTreeMap::new(), t + 10 * SOAK as i64));
    assert!(
        r.events.contains(&"h0: Updating (canary)".to_string()),
        "{:?}",
        r.events
    );
    assert_eq!(r.events.last().unwrap(), "succeeded");
    assert!(r.pause(0).is_err() && r.abort(0).is_err());
}

#[test]
fn soak_starts_at_the_measured_identity_not_at_sending() {
    let mut r = rollout(1, 1, 0);
    r.approve(0).unwrap();
    // Still the old binary at 50_000 (downloading).
    r.advance(
        &updates(vec![report(
            "h0",
            50_000,
            OLD,
            Some(UpdateState::Downloading),
        )]),
        50_000,
    );
    assert_eq!(r.hosts[0].measured_ms, None);
    // The new identity is measured at 70_000 (the authority keeps the latest report).
    let latest = updates(vec![report(
        "h0",
        70_000,
        &new_running(),
        Some(UpdateState::Updated),
    )]);
    r.advance(&latest, 70_000);
    assert_eq!(r.hosts[0].measured_ms, Some(70_000));
    r.advance(&latest, 70_000 + SOAK as i64 - 1);
    assert_eq!(phases(&r), [U]);
    r.advance(&latest, 70_000 + SOAK as i64);
    assert_eq!(phases(&r), [OK]);
    assert_eq!(r.phase, Phase::Succeeded);
}

#[test]
fn a_claim_without_measured_identity_times_out() {
    let mut r = rollout(1, 1, 0);
    r.approve(0).unwrap();
    // The agent says Updated but its measured identity is still the old one.
    // The backstop: a timeout for the proof, one more for a rollback, and the soak,
    // from the host's first report since the step.
    let backstop = 10 + (2 * TIMEOUT + SOAK) as i64;
    let u = updates(vec![report("h0", 10, OLD, Some(UpdateState::Updated))]);
    r.advance(&u, backstop);
    assert_eq!(phases(&r), [U]);
    // Judged on a report received after the deadline, not on the authority's clock.
    r.advance(&u, backstop + 1);
    assert_eq!(phases(&r), [U], "no report since the deadline: not judged");
    let u = updates(vec![report(
        "h0",
        backstop + 5,
        OLD,
        Some(UpdateState::Updated),
    )]);
    r.advance(&u, backstop + 5);
    assert_eq!(phases(&r), [HostPhase::Failed]);
    assert_eq!(r.hosts[0].reason, Some(Reason::HealthTimeout));
    assert!(
        r.hosts[0].detail.contains(&format!("still measured {OLD}")),
        "{}",
        r.hosts[0].detail
    );
    assert_eq!(r.phase, Phase::Failed);
    assert_eq!(r.halted.as_deref(), Some("HealthTimeout"));
}

#[test]
fn a_silent_host_waits_and_is_judged_from_when_it_speaks() {
    let mut r = rollout(2, 1, 1);
    r.approve(0).unwrap();
    // Asleep, partitioned, or the authority frozen: silence is not a failure.
    let long = (10 * TIMEOUT + SOAK) as i64;
    r.advance(&BTreeMap::new(), long);
    assert_eq!(phases(&r), [U, P], "a silent host stays Updating");
    assert_eq!(r.hosts[0].contact_ms, None);
    // It speaks (still the old identity): the backstop counts from there.
    let u = updates(vec![report("h0", long, OLD, None)]);
    r.advance(&u, long);
    assert_eq!(r.hosts[0].contact_ms, Some(long));
    let deadline = long + (2 * TIMEOUT + SOAK) as i64;
    let u = updates(vec![report("h0", deadline, OLD, None)]);
    r.advance(&u, deadline);
    assert_eq!(phases(&r), [U, P]);
    let u = updates(vec![report("h0", deadline + 1, OLD, None)]);
    r.advance(&u, deadline + 1);
    assert_eq!(phases(&r), [HostPhase::Failed, P]);
    assert!(
        r.hosts[0].detail.contains(&format!("still measured {OLD}")),
        "{}",
        r.hosts[0].detail
    );
    assert!(r.is_settled());
}

#[test]
fn a_good_build_reported_after_a_long_outage_succeeds() {
    let mut r = rollout(1, 1, 0);
    r.approve(0).unwrap();
    // One report as the update starts, then nothing for far longer than the backstop.
    let u = updates(vec![report("h0", 10, OLD, Some(UpdateState::Downloading))]);
    r.advance(&u, 10);
    let back = 10 + (20 * TIMEOUT) as i64;
    r.advance(&u, back);
    assert_eq!(
        phases(&r),
        [U],
        "silence after contact is not judged either"
    );
    // Back: the new build proven and soaked while the authority could not hear it.
    let u = updates(vec![report(
        "h0",
        back,
        &new_running(),
        Some(UpdateState::Updated),
    )]);
    r.advance(&u, back);
    let u = updates(vec![report(
        "h0",
        back + SOAK as i64,
        &new_running(),
        Some(UpdateState::Updated),
    )]);
    r.advance(&u, back + SOAK as i64);
    assert_eq!(phases(&r), [OK]);
    assert_eq!(r.phase, Phase::Succeeded);
}

#[test]
fn a_canary_rollback_halts_and_nothing_else_starts() {
    let mut r = rollout(3, 3, 1);
    r.approve(0).unwrap();
    let mut rep = report("h0", 5_000, OLD, Some(UpdateState::RolledBack));
    let upd = rep.update.as_mut().unwrap();
    upd.reason = Some(Reason::CrashLoop);
    upd.detail = "3 pids in 20s".into();
    assert!(r.advance(&updates(vec![rep]), 5_000));
    assert_eq!(phases(&r), [RB, P, P]);
    assert_eq!(r.hosts[0].reason, Some(Reason::CrashLoop));
    assert_eq!(r.phase, Phase::Failed);
    assert_eq!(r.halted.as_deref(), Some("CrashLoop"));
    assert!(
        r.events
            .contains(&"h0: RolledBack (CrashLoop: 3 pids in 20s)".to_string()),
        "{:?}",
        r.events
    );
    r.advance(&BTreeMap::new(), 10 * TIMEOUT as i64);
    assert_eq!(phases(&r), [RB, P, P], "the other hosts are never touched");
    assert!(r.resume(1).is_err());
}

#[test]
fn a_refusal_fails_the_host_with_its_reason() {
    let mut r = rollout(2, 2, 0);
    r.approve(0).unwrap();
    assert_eq!(phases(&r), [U, U]);
    let mut rep = report("h1", 10, OLD, Some(UpdateState::Refused));
    rep.update.as_mut().unwrap().reason = Some(Reason::DigestMismatch);
    r.advance(&updates(vec![rep]), 10);
    assert_eq!(phases(&r), [U, HostPhase::Failed]);
    assert_eq!(r.hosts[1].reason, Some(Reason::DigestMismatch));
    assert_eq!(r.phase, Phase::Failed);
    // h0 was already Updating: it goes on to its end.
    assert!(r.assigned("h0") && !r.is_settled());
    r.advance(
        &updates(vec![report(
            "h0",
            20,
            &new_running(),
            Some(UpdateState::Updated),
        )]),
        20 + SOAK as i64,
    );
    assert_eq!(phases(&r), [OK, HostPhase::Failed]);
    assert_eq!(r.phase, Phase::Failed);
    assert!(r.is_settled());
}

#[test]
fn a_host_already_running_the_artifact_still_needs_its_agents_word() {
    let mut r = rollout(2, 1, 0);
    // h0 was installed by hand with the new binary long ago; no update report.
    let before = updates(vec![report("h0", -1_000_000, &new_running(), None)]);
    r.advance(&before, 0);
    r.approve(1).unwrap();
    r.advance(&before, 2);
    assert_eq!(r.hosts[0].measured_ms, Some(-1_000_000));
    assert_eq!(
        phases(&r),
        [U, P],
        "a digest alone proves nothing about the release: the agent must have verified it"
    );
    // The agent verified the release and found it already running: soaked already.
    let said = updates(vec![report(
        "h0",
        3,
        &new_running(),
        Some(UpdateState::Updated),
    )]);
    assert!(r.advance(&said, 4));
    assert_eq!(
        phases(&r),
        [OK, U],
        "soaked from the first report; the next host starts"
    );
    assert_eq!(
        r.hosts[0].running_sha256.as_deref(),
        Some(new_running().as_str())
    );
}

#[test]
fn reports_older_than_the_step_are_ignored() {
    let mut r = rollout(1, 1, 0);
    // From an earlier rollout of the same artifact: rolled back.
    let old = updates(vec![report("h0", 5, OLD, Some(UpdateState::RolledBack))]);
    r.approve(10).unwrap();
    r.advance(&old, 11);
    assert_eq!(phases(&r), [U]);
}

#[test]
fn no_matching_artifact_fails_at_approval() {
    let hosts = vec![
        ("a".to_string(), "linux-x86_64".to_string()),
        ("b".to_string(), "linux-riscv64".to_string()),
    ];
    let mut r = Rollout::new(2, spec(2, 0), artifacts(), hosts, 0);
    r.approve(5).unwrap();
    assert_eq!(phases(&r), [P, HostPhase::Failed]);
    assert_eq!(r.hosts[1].reason, Some(Reason::NoMatchingArtifact));
    assert!(
        r.hosts[1].detail.contains("no artifact for linux-riscv64"),
        "{}",
        r.hosts[1].detail
    );
    assert_eq!(r.phase, Phase::Failed);
    assert!(r.is_settled());
}

#[test]
fn pause_resume_abort() {
    let mut r = rollout(3, 1, 0);
    assert_eq!(
        r.pause(0).unwrap_err().to_string(),
        "cannot pause a rollout that is AwaitingApproval"
    );
    assert!(r.resume(0).is_err());
    r.approve(0).unwrap();
    assert!(r.approve(0).is_err());
    r.pause(1).unwrap();
    assert_eq!(r.phase, Phase::Paused);
    // h0 finishes while paused; nothing new starts.
    let ok = updates(vec![report(
        "h0",
        2,
        &new_running(),
        Some(UpdateState::Updated),
    )]);
    r.advance(&ok, 2 + SOAK as i64);
    assert_eq!(phases(&r), [OK, P, P]);
    r.resume(3 + SOAK as i64).unwrap();
    assert_eq!(phases(&r), [OK, U, P]);
    r.abort(4 + SOAK as i64).unwrap();
    assert_eq!(r.phase, Phase::Failed);
    assert_eq!(r.halted.as_deref(), Some("Aborted"));
    assert_eq!(phases(&r), [OK, U, P], "Updating hosts stay as reported");
    assert!(r.assigned("h1"));
    assert!(r.abort(5).is_err());
}

#[test]
fn empty_host_set_succeeds_on_approval() {
    let mut r = Rollout::new(3, spec(1, 1), artifacts(), vec![], 0);
    r.approve(1).unwrap();
    assert_eq!(r.phase, Phase::Succeeded);
}

#[test]
fn serialises_with_pascal_case_phases() {
    let mut r = rollout(2, 1, 1);
    r.approve(1).unwrap();
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"phase\":\"InProgress\""), "{json}");
    assert!(json.contains("\"phase\":\"Updating\""), "{json}");
    assert_eq!(serde_json::from_str::<Rollout>(&json).unwrap(), r);
    let u = report("h0", 1, OLD, Some(UpdateState::Soaking));
    let json = serde_json::to_string(&u).unwrap();
    assert!(json.contains("\"state\":\"Soaking\""), "{json}");
    assert_eq!(serde_json::from_str::<HostUpdate>(&json).unwrap(), u);
    // An agent's body without received_ms parses (the authority sets it).
    let minimal = r#"{"host":"h0","platform":"linux-x86_64"}"#;
    assert_eq!(
        serde_json::from_str::<HostUpdate>(minimal)
            .unwrap()
            .received_ms,
        0
    );
}

// ---- component releases --------------------------------------------------------

fn component_rollout(n: usize) -> Rollout {
    let hosts = (0..n)
        .map(|i| (format!("h{i}"), "linux-x86_64".to_string()))
        .collect();
    let spec = RolloutSpec {
        name: "llama-server".into(),
        ..spec(1, 1)
    };
    Rollout::new(1, spec, artifacts(), hosts, 0)
}

/// A report from `host` at `at`: its agent measured `agent`, its `llama-server`
/// components `component` (absent: `None`), and the component updates `states` (one per
/// install root) for NEW.
fn component_report(
    host: &str,
    at: i64,
    agent: &str,
    component: Option<&str>,
    states: &[UpdateState],
) -> HostUpdate {
    let mut u = report(host, at, agent, None);
    if let Some(c) = component {
        u.releases.insert("llama-server".into(), c.into());
    }
    u.updates = states
        .iter()
        .map(|&state| UpdateReport {
            name: "llama-server".into(),
            version: "2.0.0".into(),
            sha256: NEW.into(),
            state,
            reason: (state == UpdateState::RolledBack).then_some(Reason::CrashLoop),
            detail: String::new(),
            evidence: vec![],
            since_ms: at,
        })
        .collect();
    u
}

/// One row: the reports of h0 (at 10, then at `10 + SOAK`) → h0's phase and reason.
struct ComponentCase {
    what: &'static str,
    first: HostUpdate,
    later: HostUpdate,
    phase: HostPhase,
    reason: Option<Reason>,
}

#[test]
fn component_releases_are_judged_by_the_components_measured_digest_and_reports() {
    use UpdateState::{RolledBack as RBS, Soaking, Updated as Done};
    let new = new_running();
    let cases = [
        ComponentCase {
            what: "component measured on the artifact and Updated: soaked",
            first: component_report("h0", 10, OLD, Some(&new), &[Soaking]),
            later: component_report("h0", 10 + SOAK as i64, OLD, Some(&new), &[Done]),
            phase: OK,
            reason: None,
        },
        ComponentCase {
            what: "the agent's own digest is not the component's",
            first: component_report("h0", 10, &new, Some(OLD), &[Soaking]),
            later: component_report("h0", 10 + SOAK as i64, &new, Some(OLD), &[Done]),
            phase: U,
            reason: None,
        },
        ComponentCase {
            what: "no measured component digest (mixed or not running): not Updated",
            first: component_report("h0", 10, OLD, None, &[Soaking]),
            later: component_report("h0", 10 + SOAK as i64, OLD, None, &[Done]),
            phase: U,
            reason: None,
        },
        ComponentCase {
            what: "a component rollback halts with its reason",
            first: component_report("h0", 10, OLD, Some(OLD), &[Soaking]),
            later: component_report("h0", 20, OLD, Some(OLD), &[RBS]),
            phase: RB,
            reason: Some(Reason::CrashLoop),
        },
        ComponentCase {
            what: "of two install roots, one rolled back: RolledBack",
            first: component_report("h0", 10, OLD, Some(&new), &[Soaking, Soaking]),
            later: component_report("h0", 10 + SOAK as i64, OLD, Some(&new), &[Done, RBS]),
            phase: RB,
            reason: Some(Reason::CrashLoop),
        },
        ComponentCase {
            what: "of two install roots, one still soaking: not Updated yet",
            first: component_report("h0", 10, OLD, Some(&new), &[Soaking, Soaking]),
            later: component_report("h0", 10 + SOAK as i64, OLD, Some(&new), &[Done, Soaking]),
            phase: U,
            reason: None,
        },
        ComponentCase {
            what: "the agent's own update report does not count for a component (nor make it Updated without the component's)",
            first: {
                let mut u = report("h0", 10, OLD, Some(UpdateState::RolledBack));
                u.releases.insert("llama-server".into(), new.clone());
                u
            },
            later: {
                let mut u = report("h0", 10 + SOAK as i64, OLD, Some(UpdateState::RolledBack));
                u.releases.insert("llama-server".into(), new.clone());
                u
            },
            phase: U,
            reason: None,
        },
    ];
    for c in cases {
        let mut r = component_rollout(2);
        r.approve(1).unwrap();
        assert_eq!(phases(&r), [U, P], "{}", c.what);
        r.advance(&updates(vec![c.first]), 10);
        r.advance(&updates(vec![c.later]), 10 + SOAK as i64);
        let h = r.host("h0").unwrap();
        assert_eq!(
            (h.phase, h.reason),
            (c.phase, c.reason),
            "{}: {r:#?}",
            c.what
        );
    }
}

#[test]
fn a_component_rollout_records_the_components_digest_not_the_agents() {
    let mut r = component_rollout(1);
    r.approve(1).unwrap();
    let u = component_report("h0", 5, OLD, Some("sha256:abc"), &[]);
    r.advance(&updates(vec![u]), 5);
    assert_eq!(r.hosts[0].running_sha256.as_deref(), Some("sha256:abc"));
}

#[test]
fn an_old_agents_report_without_component_fields_parses() {
    let old = r#"{"host":"h0","platform":"linux-x86_64","running_sha256":"sha256:00","pid":1,"update":null,"received_ms":3}"#;
    let u: HostUpdate = serde_json::from_str(old).unwrap();
    assert!(u.releases.is_empty() && u.updates.is_empty());
    assert_eq!(u.running_of("flotilla-agent"), Some("sha256:00"));
    assert_eq!(u.running_of("llama-server"), None);
}

// ---- properties ----------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Approve,
    Pause,
    Resume,
    Abort,
    /// Time passes by `dt` ms, then these reports (host index, running, update state).
    Advance(u32, Vec<(usize, u8, Option<UpdateState>)>),
    /// Time passes by `dt` ms, then every assigned host reports the new identity, Updated.
    Healthy(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let state = prop_oneof![
        Just(None),
        Just(Some(UpdateState::Downloading)),
        Just(Some(UpdateState::Soaking)),
        Just(Some(UpdateState::Updated)),
        Just(Some(UpdateState::Updated)),
        Just(Some(UpdateState::RolledBack)),
        Just(Some(UpdateState::Refused)),
    ];
    prop_oneof![
        1 => Just(Op::Approve),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        1 => Just(Op::Abort),
        12 => (0u32..40_000, prop::collection::vec((0usize..8, 0u8..3, state), 0..4))
            .prop_map(|(dt, reps)| Op::Advance(dt, reps)),
        6 => (0u32..30_000).prop_map(Op::Healthy),
    ]
}

fn started(r: &Rollout) -> Vec<bool> {
    r.hosts.iter().map(|h| h.sent_ms.is_some()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn rollout_invariants(
        n in 0usize..8,
        max_in_flight in 0u32..4,
        canary in 0u32..4,
        mac in prop::collection::vec(prop::bool::weighted(0.15), 8),
        ops in prop::collection::vec(op(), 0..60),
    ) {
        let hosts: Vec<(String, String)> = (0..n)
            .map(|i| (format!("h{i}"), if mac[i] { "darwin-x86_64" } else { "linux-x86_64" }.to_string()))
            .collect();
        let mut spec = spec(max_in_flight, canary);
        spec.min_healthy_ms = 20_000;
        spec.timeout_ms = 100_000;
        let mut r = Rollout::new(7, spec, artifacts(), hosts, 0);
        let mut now = 0i64;
        let mut reports: BTreeMap<String, HostUpdate> = BTreeMap::new();
        let mut started_at_failure: Option<Vec<bool>> = None;
        let mut finished_phase: Option<Phase> = None;
        for op in ops {
            match op {
                Op::Approve => { let _ = r.approve(now); }
                Op::Pause => { let _ = r.pause(now); }
                Op::Resume => { let _ = r.resume(now); }
                Op::Abort => { let _ = r.abort(now); }
                Op::Advance(dt, reps) => {
                    now += i64::from(dt);
                    for (i, running, state) in reps {
                        if i >= n { continue; }
                        let running = if running == 0 { OLD.to_string() } else { new_running() };
                        let mut u = report(&format!("h{i}"), now, &running, state);
                        if let Some(up) = u.update.as_mut() {
                            if matches!(up.state, UpdateState::RolledBack | UpdateState::Refused) {
                                up.reason = Some(Reason::CrashLoop);
                            }
                        }
                        reports.insert(u.host.clone(), u);
                    }
                    r.advance(&reports, now);
                }
                Op::Healthy(dt) => {
                    now += i64::from(dt);
                    for i in 0..n {
                        let host = format!("h{i}");
                        if r.assigned(&host) {
                            let u = report(&host, now, &new_running(), Some(UpdateState::Updated));
                            reports.insert(host, u);
                        }
                    }
                    r.advance(&reports, now);
                }
            }
            let max = r.spec.max_in_flight.max(1) as usize;
            // Never more than max_in_flight Updating.
            let updating = r.hosts.iter().filter(|h| h.phase == HostPhase::Updating).count();
            prop_assert!(updating <= max, "{updating} > {max}: {:?}", phases(&r));
            // No non-canary starts before all canaries are Updated.
            if r.hosts.iter().any(|h| !h.canary && h.sent_ms.is_some()) {
                prop_assert!(r.hosts.iter().filter(|h| h.canary).all(|h| h.phase == HostPhase::Updated),
                    "{:?}", r.hosts);
            }
            // Nothing starts before approval.
            if r.approved_ms.is_none() {
                prop_assert!(r.hosts.iter().all(|h| h.phase == HostPhase::Pending && h.sent_ms.is_none()));
            }
            // Nothing starts after a failure (or an abort).
            let failed = r.halted.is_some()
                || r.hosts.iter().any(|h| matches!(h.phase, HostPhase::Failed | HostPhase::RolledBack));
            match &started_at_failure {
                Some(s) => prop_assert_eq!(s, &started(&r)),
                None if failed => started_at_failure = Some(started(&r)),
                None => {}
            }
            if failed {
                prop_assert_eq!(r.phase, Phase::Failed);
            }
            // Succeeded / Failed are final.
            if let Some(p) = finished_phase {
                prop_assert_eq!(p, r.phase);
            } else if !r.is_active() {
                finished_phase = Some(r.phase);
            }
            if r.phase == Phase::Succeeded {
                prop_assert!(r.hosts.iter().all(|h| h.phase == HostPhase::Updated));
            }
            // Updated always rests on a measured identity held for the soak.
            for h in &r.hosts {
                if h.phase == HostPhase::Updated {
                    prop_assert!(h.measured_ms.is_some_and(|m| h.finished_ms.unwrap() - m >= 20_000));
                }
            }
        }
    }
}

/// Skip lists and unskip outcomes are left out when empty, and a report without them
/// (an older agent's) reads as empty: agents and authorities of both kinds interoperate.
#[test]
fn skip_lists_in_a_host_update_are_optional_on_the_wire() {
    let u = report("a", 5, &new_running(), None);
    let json = serde_json::to_value(&u).unwrap();
    assert!(
        json.get("skipped").is_none() && json.get("unskipped").is_none(),
        "{json}"
    );
    assert_eq!(serde_json::from_value::<HostUpdate>(json).unwrap(), u);
    let mut with = u.clone();
    with.skipped.push(crate::SkipEntry {
        name: "flotilla-agent".into(),
        version: "2.0.0".into(),
        sha256: NEW.into(),
        reason: Reason::CrashLoop,
        at_ms: 3,
    });
    with.unskipped.push(crate::UnskipOutcome {
        id: 7,
        name: "flotilla-agent".into(),
        version: "1.9.0".into(),
        cleared: Vec::new(),
        error: Some("skip.json: not JSON".into()),
    });
    let text = serde_json::to_string(&with).unwrap();
    assert_eq!(serde_json::from_str::<HostUpdate>(&text).unwrap(), with);
}

#[test]
fn selectors_parse_key_value_lists_and_say_which_part_is_wrong() {
    assert!(parse_selector("  ").unwrap().is_empty());
    assert_eq!(
        parse_selector("role = gpu,zone=a").unwrap(),
        BTreeMap::from([("role".into(), "gpu".into()), ("zone".into(), "a".into())])
    );
    assert_eq!(
        parse_selector("role").unwrap_err(),
        SelectorError::NotKeyValue("role".into())
    );
    assert_eq!(
        parse_selector("=gpu").unwrap_err(),
        SelectorError::NoKey("=gpu".into())
    );
    let twice = parse_selector("role=gpu,role=cpu").unwrap_err();
    assert_eq!(
        twice.to_string(),
        "label `role` is given twice (`gpu` and `cpu`): a host has one value per label"
    );
}

#[test]
fn a_rollback_takes_the_changed_hosts_back_to_what_each_ran_before() {
    let mut r = rollout(3, 1, 1);
    // What each host ran when the rollout was created.
    r.advance(
        &updates(
            (0..3)
                .map(|i| report(&format!("h{i}"), 5, OLD, None))
                .collect(),
        ),
        5,
    );
    assert_eq!(
        r.rollback_hosts(&BTreeMap::new()),
        Err(RollbackError::Active {
            id: 1,
            phase: Phase::AwaitingApproval
        })
    );
    r.approve(10).unwrap();
    assert_eq!(r.hosts[0].before_sha256.as_deref(), Some(OLD));
    assert_eq!(
        r.hosts[1].before_sha256, None,
        "not started: nothing recorded"
    );
    let err = r.rollback_hosts(&BTreeMap::new()).unwrap_err();
    assert!(err.to_string().contains("halt it first"), "{err}");
    // Halted while the canary updates: it goes on to its end.
    r.abort(20).unwrap();
    assert!(matches!(
        r.rollback_hosts(&BTreeMap::new()),
        Err(RollbackError::Settling { .. })
    ));
    let canary = |at| {
        updates(vec![report(
            "h0",
            at,
            &new_running(),
            Some(UpdateState::Updated),
        )])
    };
    r.advance(&canary(100), 100);
    r.advance(&canary(100), 100 + SOAK as i64);
    assert_eq!(phases(&r), [OK, P, P]);
    assert!(r.is_settled());
    let back = r.rollback_hosts(&canary(200)).unwrap();
    assert_eq!(
        back,
        vec![RollbackHost {
            host: "h0".into(),
            platform: "linux-x86_64".into(),
            from_sha256: NEW.into(),
            to_sha256: bare_sha(OLD),
        }],
        "only the host it changed"
    );
    // Changed since by something else: refused, naming it.
    let third = format!("sha256:{}", "3".repeat(64));
    let err = r
        .rollback_hosts(&updates(vec![report("h0", 300, &third, None)]))
        .unwrap_err();
    assert!(matches!(err, RollbackError::ChangedSince { .. }), "{err}");
    // Already back on what it ran before: nothing to do.
    assert_eq!(
        r.rollback_hosts(&updates(vec![report("h0", 300, OLD, None)])),
        Err(RollbackError::NothingChanged { id: 1 })
    );

    // The rollback: its own target per host, the same gate.
    let mut spec = spec(1, 1);
    spec.version = "1.0.0".into();
    let target = HostTarget {
        version: "1.0.0".into(),
        sha256: OLD.into(),
    };
    let mut b = Rollout::new_rollback(
        2,
        spec,
        1,
        vec![("h0".into(), "linux-x86_64".into(), target)],
        1_000,
    );
    assert_eq!(b.rollback_of, Some(1));
    assert!(
        b.events[0].contains("rollback of rollout 1"),
        "{:?}",
        b.events
    );
    assert_eq!(b.target_of(&b.hosts[0]), Some(("1.0.0", bare_sha(OLD))));
    // It waits for approval, recording what the host runs meanwhile.
    b.advance(
        &updates(vec![report("h0", 1_001, &new_running(), None)]),
        1_001,
    );
    assert_eq!(phases(&b), [P]);
    b.approve(1_010).unwrap();
    assert_eq!(phases(&b), [U]);
    assert_eq!(b.hosts[0].before_sha256, Some(new_running()));
    let mut back = report("h0", 2_000, OLD, None);
    back.update = Some(UpdateReport {
        name: "flotilla-agent".into(),
        version: "1.0.0".into(),
        sha256: bare_sha(OLD),
        state: UpdateState::Updated,
        reason: None,
        detail: String::new(),
        evidence: vec![],
        since_ms: 2_000,
    });
    let back = updates(vec![back]);
    b.advance(&back, 2_000);
    assert_eq!(phases(&b), [U], "soaking");
    b.advance(&back, 2_000 + SOAK as i64);
    assert_eq!(phases(&b), [OK]);
    assert_eq!(b.phase, Phase::Succeeded);
    // Serialised with what it reverses; an older document reads without it.
    let json = serde_json::to_value(&b).unwrap();
    assert_eq!(json["rollback_of"], 1);
    assert_eq!(json["hosts"][0]["target"]["version"], "1.0.0");
    let old: Rollout =
        serde_json::from_value(serde_json::to_value(rollout(1, 1, 1)).unwrap()).unwrap();
    assert_eq!(old.rollback_of, None);
}
