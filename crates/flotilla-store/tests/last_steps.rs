//! Each component's last step (what status says about the last operation on it) and
//! the file digest cache.

use flotilla_store::{FileDigest, NewOperation, NewStep, Outcome, Store};
use serde_json::json;

const T0: i64 = 1_700_000_000_000;

fn op(store: &mut Store, command: &str) -> flotilla_store::OperationId {
    op_on(store, "chat", command)
}

/// A `start` of `target` run as `command`.
fn op_on(store: &mut Store, target: &str, command: &str) -> flotilla_store::OperationId {
    store
        .begin_operation(&NewOperation {
            verb: "start".into(),
            target: target.into(),
            flags: vec![],
            plan_digest: "sha256:plan".into(),
            topology_digest: "sha256:topo".into(),
            plan_json: "{}".into(),
            who: "ada@lovelace".into(),
            pid: 4242,
            command_line: command.into(),
            started_at_ms: T0,
        })
        .unwrap()
}

fn step(
    store: &mut Store,
    op: flotilla_store::OperationId,
    component: &str,
    action: &str,
    outcome: Option<(Outcome, &str)>,
) {
    let id = store
        .begin_step(
            op,
            &NewStep {
                wave: 0,
                component: component.into(),
                action: action.into(),
                started_at_ms: T0,
            },
        )
        .unwrap();
    if let Some((o, summary)) = outcome {
        store
            .finish_step(id, o, T0 + 1, &json!({ "summary": summary }))
            .unwrap();
    }
}

#[test]
fn last_step_per_component_with_where_its_operation_failed() {
    let mut s = Store::open_in_memory().unwrap();
    assert!(s.last_steps().unwrap().is_empty());

    // op-1 succeeds for db and api.
    let op1 = op(&mut s, "flotilla up chat");
    step(&mut s, op1, "db", "start", Some((Outcome::Succeeded, "ok")));
    step(
        &mut s,
        op1,
        "api",
        "start",
        Some((Outcome::Succeeded, "ok")),
    );
    s.finish_operation(op1, Outcome::Succeeded, T0 + 2, None)
        .unwrap();

    // op-2 fails at api; db was a no-op (not counted), web was started then cleaned up.
    let op2 = op(&mut s, "flotilla up all");
    step(
        &mut s,
        op2,
        "db",
        "no-op",
        Some((Outcome::Succeeded, "runs")),
    );
    step(
        &mut s,
        op2,
        "web",
        "start",
        Some((Outcome::Succeeded, "ok")),
    );
    step(
        &mut s,
        op2,
        "api",
        "restart",
        Some((Outcome::Failed, "never ready")),
    );
    step(
        &mut s,
        op2,
        "web",
        "stop",
        Some((Outcome::Succeeded, "cleanup")),
    );
    s.finish_operation(op2, Outcome::RolledBack, T0 + 3, Some("api: never ready"))
        .unwrap();

    // op-3 is still running its step on `cache`.
    let op3 = op(&mut s, "flotilla start cache");
    step(&mut s, op3, "cache", "start", None);

    let last = s.last_steps().unwrap();
    let names: Vec<&str> = last.iter().map(|l| l.component.as_str()).collect();
    assert_eq!(names, ["api", "cache", "db", "web"]);

    let db = &last[2];
    assert_eq!(db.operation, op1, "a no-op does not count");
    assert_eq!(db.operation_outcome, Outcome::Succeeded);
    assert_eq!(db.failed_component, None);

    let api = &last[0];
    assert_eq!(api.operation, op2);
    assert_eq!(api.action, "restart");
    assert_eq!(api.step_outcome, Outcome::Failed);
    assert_eq!(api.operation_outcome, Outcome::RolledBack);
    assert_eq!(api.failed_component.as_deref(), Some("api"));
    assert_eq!(api.failed_summary.as_deref(), Some("never ready"));
    assert_eq!(api.command_line, "flotilla up all");

    let web = &last[3];
    assert_eq!(web.action, "stop", "the cleanup is its last step");
    assert_eq!(web.step_summary.as_deref(), Some("cleanup"));
    assert_eq!(web.failed_component.as_deref(), Some("api"));

    let cache = &last[1];
    assert_eq!(cache.step_outcome, Outcome::Running);
    assert_eq!(cache.operation_outcome, Outcome::Running);
    assert_eq!(cache.operation_pid, 4242);
    assert_eq!(cache.step_summary, None);

    // Interrupted: its running step is marked, and so is where it stopped.
    s.mark_interrupted(op3, T0 + 9).unwrap();
    let cache = s
        .last_steps()
        .unwrap()
        .into_iter()
        .find(|l| l.component == "cache")
        .unwrap();
    assert_eq!(cache.operation_outcome, Outcome::Interrupted);
    assert_eq!(cache.failed_component.as_deref(), Some("cache"));
}

#[test]
fn file_digests_are_kept_and_bounded() {
    let mut s = Store::open_in_memory().unwrap();
    let d = |ino: u64| FileDigest {
        dev: u64::MAX,
        ino,
        size: 10,
        mtime_ns: 1,
        ctime_ns: 2,
        sha256: format!("sha256:{ino}"),
    };
    s.record_file_digests(&[d(1), d(2)], T0).unwrap();
    let mut again = d(2);
    again.sha256 = "sha256:new".into();
    s.record_file_digests(&[again.clone()], T0 + 1).unwrap();
    let mut kept = s.file_digests().unwrap();
    kept.sort_by_key(|f| f.ino);
    assert_eq!(
        kept,
        vec![d(1), again],
        "u64 values survive; a key is updated"
    );

    let many: Vec<FileDigest> = (10..1100).map(d).collect();
    s.record_file_digests(&many, T0 + 2).unwrap();
    let kept = s.file_digests().unwrap();
    assert_eq!(kept.len() as i64, flotilla_store::digests::MAX_FILE_DIGESTS);
}

/// An operation on `target` with one step on each of `components`, succeeded.
fn done(store: &mut Store, target: &str, command: &str, components: &[&str]) {
    let id = op_on(store, target, command);
    for c in components {
        step(store, id, c, "start", Some((Outcome::Succeeded, "ok")));
    }
    store
        .finish_operation(id, Outcome::Succeeded, T0 + 1, None)
        .unwrap();
}

/// The agent's restarts of a component count since the last other operation that
/// acted on it: one targeting it, or one on something else that reached it (a
/// cascade, a stack).
#[test]
fn supervised_restarts_count_since_the_last_other_operation_that_touched_it() {
    let mut s = Store::open_in_memory().unwrap();
    let restart = |s: &mut Store, c: &str| {
        let line = format!(
            "{}{c} after pid 4 killed by SIGKILL",
            flotilla_store::SUPERVISED_RESTART
        );
        done(s, c, &line, &[c]);
    };
    done(&mut s, "chat", "flotilla up chat", &["dep", "app"]);
    restart(&mut s, "app");
    restart(&mut s, "app");
    assert_eq!(s.supervised_restarts().unwrap().get("app"), Some(&2));
    // `stop dep --cascade` stopped app too: its count starts again.
    done(
        &mut s,
        "dep",
        "flotilla stop dep --cascade",
        &["app", "dep"],
    );
    assert_eq!(s.supervised_restarts().unwrap().get("app"), None);
    restart(&mut s, "app");
    assert_eq!(s.supervised_restarts().unwrap().get("app"), Some(&1));
    // An operation on something else that did not reach app changes nothing.
    done(&mut s, "dep", "flotilla restart dep", &["dep"]);
    assert_eq!(s.supervised_restarts().unwrap().get("app"), Some(&1));
}
