//! Integration tests: real SQLite files in temporary directories.

use flotilla_store::{
    DesiredLifecycle, InstanceRecord, NewOperation, NewStep, OperationId, OperationRecord, Outcome,
    RemovalReason, StackRecord, StepId, Store, StoreError, SCHEMA_VERSION, STATE_DB_FILE,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

const T0: i64 = 1_700_000_000_000;

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STATE_DB_FILE);
    (dir, path)
}

fn new_op(verb: &str, target: &str, started_at_ms: i64) -> NewOperation {
    NewOperation {
        verb: verb.into(),
        target: target.into(),
        flags: vec!["--cascade".into()],
        plan_digest: "sha256:plan".into(),
        topology_digest: "sha256:topo".into(),
        plan_json: r#"{"waves":[]}"#.into(),
        who: "ada@lovelace".into(),
        pid: 4242,
        command_line: format!("flotilla {verb} {target} --cascade"),
        started_at_ms,
    }
}

fn step(wave: u32, component: &str, started_at_ms: i64) -> NewStep {
    NewStep {
        wave,
        component: component.into(),
        action: "start".into(),
        started_at_ms,
    }
}

fn instance(component: &str, operation: OperationId, pid: u32) -> InstanceRecord {
    InstanceRecord {
        component: component.into(),
        host: "local".into(),
        pid,
        pgid: pid as i32,
        start_time_ticks: 123_456,
        exe: "/usr/bin/llama-server".into(),
        exe_sha256: "sha256:exe".into(),
        argv_digest: "sha256:argv".into(),
        config_digest: "sha256:config".into(),
        operation,
        started_at_ms: T0 + 5,
        log_path: format!("/state/logs/{component}.log"),
        config_json: None,
        program_files: Vec::new(),
    }
}

fn raw(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(flotilla_store::BUSY_TIMEOUT).unwrap();
    conn
}

// ---------------------------------------------------------------- journal

#[test]
fn operation_round_trip() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let new = new_op("start", "proxy", T0);
    let id = store.begin_operation(&new).unwrap();

    let expected = OperationRecord {
        id,
        verb: "start".into(),
        target: "proxy".into(),
        flags: vec!["--cascade".into()],
        plan_digest: "sha256:plan".into(),
        topology_digest: "sha256:topo".into(),
        who: "ada@lovelace".into(),
        pid: 4242,
        command_line: "flotilla start proxy --cascade".into(),
        started_at_ms: T0,
        ended_at_ms: None,
        outcome: Outcome::Running,
        error: None,
    };
    assert_eq!(
        store.operation(id).unwrap(),
        Some((expected.clone(), vec![]))
    );
    assert_eq!(store.operations(10).unwrap(), vec![expected.clone()]);
    assert_eq!(
        store.operation_plan(id).unwrap().as_deref(),
        Some(r#"{"waves":[]}"#)
    );

    store
        .finish_operation(
            id,
            Outcome::Failed,
            T0 + 900,
            Some("llm: readiness probe timed out"),
        )
        .unwrap();
    let (op, steps) = store.operation(id).unwrap().unwrap();
    assert!(steps.is_empty());
    assert_eq!(
        op,
        OperationRecord {
            ended_at_ms: Some(T0 + 900),
            outcome: Outcome::Failed,
            error: Some("llm: readiness probe timed out".into()),
            ..expected
        }
    );
    assert_eq!(store.operation(OperationId(999)).unwrap(), None);
    assert_eq!(store.operation_plan(OperationId(999)).unwrap(), None);
}

#[test]
fn every_outcome_round_trips() {
    let mut store = Store::open_in_memory().unwrap();
    for outcome in Outcome::ALL.into_iter().filter(|o| o.is_final()) {
        let id = store.begin_operation(&new_op("stop", "x", T0)).unwrap();
        let s = store.begin_step(id, &step(0, "x", T0)).unwrap();
        store.finish_step(s, outcome, T0 + 1, &json!(null)).unwrap();
        store.finish_operation(id, outcome, T0 + 2, None).unwrap();
        let (op, steps) = store.operation(id).unwrap().unwrap();
        assert_eq!(op.outcome, outcome);
        assert_eq!(steps[0].outcome, outcome);
        assert_eq!(outcome.as_str().parse::<Outcome>().unwrap(), outcome);
        assert_eq!(
            serde_json::to_value(outcome).unwrap(),
            json!(outcome.as_str())
        );
    }
    assert_eq!(Outcome::RolledBack.to_string(), "rolled-back");
    assert!("done".parse::<Outcome>().is_err());
}

#[test]
fn operations_newest_first_and_limited() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    // Timestamps deliberately not monotonic: order is the order begun.
    let ids: Vec<OperationId> = (0..5)
        .map(|i| {
            store
                .begin_operation(&new_op("start", &format!("c{i}"), T0 - i))
                .unwrap()
        })
        .collect();
    let ids_of = |ops: Vec<OperationRecord>| ops.into_iter().map(|o| o.id).collect::<Vec<_>>();
    assert_eq!(
        ids_of(store.operations(3).unwrap()),
        vec![ids[4], ids[3], ids[2]]
    );
    assert_eq!(
        ids_of(store.operations(usize::MAX).unwrap()),
        ids.iter().rev().copied().collect::<Vec<_>>()
    );
    assert!(store.operations(0).unwrap().is_empty());
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn steps_round_trip_in_wave_then_begin_order() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let op = store
        .begin_operation(&new_op("start", "proxy", T0))
        .unwrap();
    let other = store
        .begin_operation(&new_op("start", "other", T0))
        .unwrap();

    let a = store.begin_step(op, &step(0, "llm", T0 + 1)).unwrap();
    let b = store.begin_step(op, &step(0, "embed", T0 + 2)).unwrap();
    let _foreign = store.begin_step(other, &step(0, "other", T0 + 2)).unwrap();
    // Journaled out of wave order on purpose (e.g. a cleanup step).
    let c = store.begin_step(op, &step(1, "proxy", T0 + 3)).unwrap();
    let z = store
        .begin_step(
            op,
            &NewStep {
                action: "await-ready".into(),
                ..step(0, "external-db", T0 + 4)
            },
        )
        .unwrap();

    let evidence = json!({"probe": "http", "url": "http://127.0.0.1:8080/health", "status": 200,
                          "identity": {"pid": 17, "exe_sha256": "sha256:abc"}});
    store
        .finish_step(a, Outcome::Succeeded, T0 + 10, &evidence)
        .unwrap();
    store
        .finish_step(b, Outcome::Failed, T0 + 11, &json!(["timeout", 30000]))
        .unwrap();

    let (_, steps) = store.operation(op).unwrap().unwrap();
    assert_eq!(
        steps.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![a, b, z, c]
    );
    assert!(steps.iter().all(|s| s.operation == op));
    let first = &steps[0];
    assert_eq!(
        (first.wave, first.component.as_str(), first.action.as_str()),
        (0, "llm", "start")
    );
    assert_eq!(
        (first.started_at_ms, first.ended_at_ms, first.outcome),
        (T0 + 1, Some(T0 + 10), Outcome::Succeeded)
    );
    assert_eq!(first.evidence, evidence);
    assert_eq!(steps[1].evidence, json!(["timeout", 30000]));
    assert_eq!(steps[2].action, "await-ready");
    assert_eq!(
        (steps[3].outcome, steps[3].ended_at_ms, &steps[3].evidence),
        (Outcome::Running, None, &json!(null))
    );
}

#[test]
fn journal_refuses_inconsistent_updates() {
    let mut store = Store::open_in_memory().unwrap();
    let op = store.begin_operation(&new_op("start", "x", T0)).unwrap();
    let s = store.begin_step(op, &step(0, "x", T0)).unwrap();

    assert!(matches!(
        store.finish_operation(op, Outcome::Running, T0, None),
        Err(StoreError::NotAFinalOutcome(Outcome::Running))
    ));
    assert!(matches!(
        store.finish_step(s, Outcome::Running, T0, &json!(null)),
        Err(StoreError::NotAFinalOutcome(Outcome::Running))
    ));
    let missing = OperationId(77);
    assert!(matches!(
        store.finish_operation(missing, Outcome::Succeeded, T0, None),
        Err(StoreError::UnknownOperation(id)) if id == missing
    ));
    assert!(matches!(
        store.begin_step(missing, &step(0, "x", T0)),
        Err(StoreError::UnknownOperation(id)) if id == missing
    ));
    assert!(matches!(
        store.finish_step(StepId(77), Outcome::Succeeded, T0, &json!(null)),
        Err(StoreError::UnknownStep(StepId(77)))
    ));

    store
        .finish_step(s, Outcome::Succeeded, T0 + 1, &json!({}))
        .unwrap();
    let err = store
        .finish_step(s, Outcome::Failed, T0 + 2, &json!({}))
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::StepAlreadyFinished { id, outcome: Outcome::Succeeded } if id == s
    ));
    assert_eq!(
        err.to_string(),
        format!("step {s} already finished (succeeded)")
    );

    store
        .finish_operation(op, Outcome::Succeeded, T0 + 3, None)
        .unwrap();
    assert!(matches!(
        store.finish_operation(op, Outcome::Failed, T0 + 4, Some("late")),
        Err(StoreError::OperationAlreadyFinished {
            outcome: Outcome::Succeeded,
            ..
        })
    ));
    assert!(matches!(
        store.begin_step(op, &step(1, "y", T0 + 5)),
        Err(StoreError::OperationAlreadyFinished {
            outcome: Outcome::Succeeded,
            ..
        })
    ));
    // Nothing was rewritten.
    let (rec, steps) = store.operation(op).unwrap().unwrap();
    assert_eq!(
        (rec.outcome, rec.ended_at_ms, rec.error),
        (Outcome::Succeeded, Some(T0 + 3), None)
    );
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].outcome, Outcome::Succeeded);
}

#[test]
fn unfinished_operations_then_mark_interrupted() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let done = store.begin_operation(&new_op("start", "a", T0)).unwrap();
    store
        .finish_operation(done, Outcome::Succeeded, T0 + 1, None)
        .unwrap();
    let crashed = store
        .begin_operation(&new_op("start", "b", T0 + 2))
        .unwrap();
    let finished_step = store
        .begin_step(crashed, &step(0, "b-dep", T0 + 3))
        .unwrap();
    store
        .finish_step(
            finished_step,
            Outcome::Succeeded,
            T0 + 4,
            &json!({"ok": true}),
        )
        .unwrap();
    let running_step = store.begin_step(crashed, &step(1, "b", T0 + 5)).unwrap();
    let live = store.begin_operation(&new_op("stop", "c", T0 + 6)).unwrap();

    let unfinished = store.unfinished_operations().unwrap();
    assert_eq!(
        unfinished.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![crashed, live],
        "oldest first"
    );
    assert!(unfinished
        .iter()
        .all(|o| o.outcome == Outcome::Running && o.pid == 4242));

    store.mark_interrupted(crashed, T0 + 100).unwrap();
    let (op, steps) = store.operation(crashed).unwrap().unwrap();
    assert_eq!(
        (op.outcome, op.ended_at_ms, op.error),
        (Outcome::Interrupted, Some(T0 + 100), None)
    );
    assert_eq!(steps[0].id, finished_step);
    assert_eq!(
        (steps[0].outcome, steps[0].ended_at_ms, &steps[0].evidence),
        (Outcome::Succeeded, Some(T0 + 4), &json!({"ok": true})),
        "finished steps are left alone"
    );
    assert_eq!(steps[1].id, running_step);
    assert_eq!(
        (steps[1].outcome, steps[1].ended_at_ms),
        (Outcome::Interrupted, Some(T0 + 100))
    );
    assert_eq!(
        store
            .unfinished_operations()
            .unwrap()
            .into_iter()
            .map(|o| o.id)
            .collect::<Vec<_>>(),
        vec![live]
    );

    // Marking again (a racing process) or marking a finished one is a no-op.
    store.mark_interrupted(crashed, T0 + 200).unwrap();
    store.mark_interrupted(done, T0 + 200).unwrap();
    assert_eq!(
        store.operation(crashed).unwrap().unwrap().0.ended_at_ms,
        Some(T0 + 100)
    );
    assert_eq!(
        store.operation(done).unwrap().unwrap().0.outcome,
        Outcome::Succeeded
    );
    assert!(matches!(
        store.mark_interrupted(OperationId(999), T0),
        Err(StoreError::UnknownOperation(OperationId(999)))
    ));
    // The original process cannot overwrite the verdict afterwards.
    assert!(matches!(
        store.finish_operation(crashed, Outcome::Succeeded, T0 + 300, None),
        Err(StoreError::OperationAlreadyFinished {
            outcome: Outcome::Interrupted,
            ..
        })
    ));
}

// ---------------------------------------------------------------- instances, desired

#[test]
fn instance_upsert_read_and_remove() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let op1 = store.begin_operation(&new_op("start", "llm", T0)).unwrap();
    let op2 = store
        .begin_operation(&new_op("restart", "llm", T0 + 1))
        .unwrap();

    assert_eq!(store.instance("llm").unwrap(), None);
    let first = instance("llm", op1, 100);
    store.record_instance(&first).unwrap();
    store.record_instance(&instance("proxy", op1, 200)).unwrap();
    assert_eq!(store.instance("llm").unwrap(), Some(first.clone()));

    // Upsert: same component, new identity.
    let second = InstanceRecord {
        pid: 101,
        start_time_ticks: u64::try_from(i64::MAX).unwrap(),
        exe_sha256: "sha256:new".into(),
        operation: op2,
        ..first.clone()
    };
    store.record_instance(&second).unwrap();
    assert_eq!(store.instance("llm").unwrap(), Some(second.clone()));
    assert_eq!(
        store.instances().unwrap(),
        vec![second.clone(), instance("proxy", op1, 200)]
    );

    store
        .remove_instance("llm", RemovalReason::Vanished, T0 + 50)
        .unwrap();
    assert_eq!(store.instance("llm").unwrap(), None);
    assert_eq!(store.instances().unwrap().len(), 1);
    // Idempotent.
    store
        .remove_instance("llm", RemovalReason::Stopped, T0 + 60)
        .unwrap();
    store
        .remove_instance("proxy", RemovalReason::Stopped, T0 + 70)
        .unwrap();
    assert!(store.instances().unwrap().is_empty());

    let removed = store.removed_instances(10).unwrap();
    assert_eq!(removed.len(), 2, "the no-op removal left no history");
    assert_eq!(removed[0].instance.component, "proxy");
    assert_eq!(
        (removed[0].reason, removed[0].removed_at_ms),
        (RemovalReason::Stopped, T0 + 70)
    );
    assert_eq!(removed[1].instance, second);
    assert_eq!(
        (removed[1].reason, removed[1].removed_at_ms),
        (RemovalReason::Vanished, T0 + 50)
    );
    assert_eq!(store.removed_instances(1).unwrap().len(), 1);
    let as_json = serde_json::to_value(&removed[1]).unwrap();
    assert_eq!(as_json["component"], "llm");
    assert_eq!(as_json["reason"], "vanished");
    assert_eq!(as_json["operation"], json!(op2.to_string()));
}

#[test]
fn instance_errors() {
    let mut store = Store::open_in_memory().unwrap();
    let op = store.begin_operation(&new_op("start", "llm", T0)).unwrap();
    let too_big = InstanceRecord {
        start_time_ticks: u64::MAX,
        ..instance("llm", op, 1)
    };
    assert!(matches!(
        store.record_instance(&too_big),
        Err(StoreError::OutOfRange {
            field: "start_time_ticks",
            value: u64::MAX
        })
    ));
    assert!(matches!(
        store.record_instance(&instance("llm", OperationId(42), 1)),
        Err(StoreError::UnknownOperation(OperationId(42)))
    ));
    assert!(store.instances().unwrap().is_empty());
}

#[test]
fn desired_lifecycle_per_component() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    assert!(store.desired().unwrap().is_empty());
    store
        .set_desired("llm", DesiredLifecycle::Running, T0)
        .unwrap();
    store
        .set_desired("proxy", DesiredLifecycle::Running, T0)
        .unwrap();
    store
        .set_desired("old", DesiredLifecycle::Disabled, T0)
        .unwrap();
    store
        .set_desired("proxy", DesiredLifecycle::Stopped, T0 + 1)
        .unwrap();
    let expected = BTreeMap::from([
        ("llm".to_owned(), DesiredLifecycle::Running),
        ("old".to_owned(), DesiredLifecycle::Disabled),
        ("proxy".to_owned(), DesiredLifecycle::Stopped),
    ]);
    assert_eq!(store.desired().unwrap(), expected);
}

// ---------------------------------------------------------------- stacks

#[test]
fn stack_records_round_trip_replace_and_clear() {
    let (_dir, path) = temp_db();
    let mut store = Store::open(&path).unwrap();
    let order = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    store
        .record_stack_start("ai", &order(&["llm", "embed", "proxy"]), T0)
        .unwrap();
    store.record_stack_start("empty", &[], T0).unwrap();
    store
        .record_stack_start("tools", &order(&["b", "a"]), T0)
        .unwrap();
    // Replaced, not appended.
    store
        .record_stack_start("ai", &order(&["embed", "llm", "proxy", "ui"]), T0 + 1)
        .unwrap();

    let expected = BTreeMap::from([
        (
            "ai".to_owned(),
            StackRecord {
                start_order: order(&["embed", "llm", "proxy", "ui"]),
            },
        ),
        ("empty".to_owned(), StackRecord::default()),
        (
            "tools".to_owned(),
            StackRecord {
                start_order: order(&["b", "a"]),
            },
        ),
    ]);
    assert_eq!(store.stack_records().unwrap(), expected);

    store.clear_stack("ai").unwrap();
    store.clear_stack("never-started").unwrap();
    let left = store.stack_records().unwrap();
    assert_eq!(left.keys().collect::<Vec<_>>(), vec!["empty", "tools"]);
    // Members went with their stack (ON DELETE CASCADE: proves foreign keys are on).
    let members: i64 = raw(&path)
        .query_row("SELECT COUNT(*) FROM stack_members", [], |r| r.get(0))
        .unwrap();
    assert_eq!(members, 2);
}

// ---------------------------------------------------------------- opening, migrations, errors

#[test]
fn reopen_keeps_data_and_migrations_are_idempotent() {
    let (_dir, path) = temp_db();
    let op = {
        let mut store = Store::open(&path).unwrap();
        let op = store.begin_operation(&new_op("start", "llm", T0)).unwrap();
        store.record_instance(&instance("llm", op, 7)).unwrap();
        store
            .set_desired("llm", DesiredLifecycle::Running, T0)
            .unwrap();
        store
            .record_stack_start("ai", &["llm".to_owned()], T0)
            .unwrap();
        op
    };
    for _ in 0..3 {
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(store.path(), path.as_path());
        assert_eq!(store.operations(10).unwrap().len(), 1);
        assert_eq!(store.operation(op).unwrap().unwrap().0.target, "llm");
        assert_eq!(store.instance("llm").unwrap().unwrap().pid, 7);
        assert_eq!(store.desired().unwrap()["llm"], DesiredLifecycle::Running);
        assert_eq!(store.stack_records().unwrap()["ai"].start_order, ["llm"]);
    }
    let conn = raw(&path);
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM schema_version ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let app_id: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(app_id, flotilla_store::APPLICATION_ID);
}

#[test]
fn in_memory_store_has_the_schema() {
    let mut store = Store::open_in_memory().unwrap();
    let op = store.begin_operation(&new_op("start", "x", T0)).unwrap();
    store.begin_step(op, &step(0, "x", T0)).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(store.path(), Path::new(":memory:"));
}

fn assert_names_path(err: &StoreError, path: &Path) {
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "`{message}` does not name {}",
        path.display()
    );
}

#[test]
fn non_sqlite_file_is_a_clear_error() {
    let (_dir, path) = temp_db();
    std::fs::write(&path, "name = \"not a database\"\n".repeat(200)).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(&err, StoreError::NotADatabase { path: p, .. } if p == &path),
        "{err:?}"
    );
    assert_names_path(&err, &path);
    assert!(err
        .to_string()
        .contains("not a usable Flotilla state database"));
    // Left untouched.
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "name = \"not a database\"\n".repeat(200)
    );
}

#[test]
fn corrupted_database_is_a_clear_error() {
    let (_dir, path) = temp_db();
    {
        let mut store = Store::open(&path).unwrap();
        store.begin_operation(&new_op("start", "x", T0)).unwrap();
    }
    // Checkpointed on close; overwrite the schema page after the 100-byte header.
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[100..4096] {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(&err, StoreError::NotADatabase { path: p, .. } if p == &path),
        "{err:?}"
    );
    assert_names_path(&err, &path);
}

#[test]
fn another_applications_database_is_refused() {
    let (_dir, path) = temp_db();
    raw(&path)
        .execute_batch("PRAGMA application_id = 42; CREATE TABLE t (x);")
        .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::ForeignDatabase {
                application_id: 42,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names_path(&err, &path);
}

#[test]
fn newer_schema_is_refused() {
    let (_dir, path) = temp_db();
    drop(Store::open(&path).unwrap());
    raw(&path)
        .execute(
            "INSERT INTO schema_version (version, description) VALUES (?1, 'from the future')",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(&err, StoreError::SchemaTooNew { found, supported, .. }
            if *found == SCHEMA_VERSION + 1 && *supported == SCHEMA_VERSION),
        "{err:?}"
    );
    assert_names_path(&err, &path);
}

#[test]
fn missing_directory_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir").join(STATE_DB_FILE);
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(&err, StoreError::Open { .. }), "{err:?}");
    assert_names_path(&err, &path);
}

// ---------------------------------------------------------------- concurrency

#[test]
fn second_store_sees_first_stores_writes() {
    let (_dir, path) = temp_db();
    let mut writer = Store::open(&path).unwrap();
    let reader = Store::open(&path).unwrap();
    let op = writer.begin_operation(&new_op("start", "llm", T0)).unwrap();
    assert_eq!(reader.unfinished_operations().unwrap()[0].id, op);
    writer
        .finish_operation(op, Outcome::Succeeded, T0 + 1, None)
        .unwrap();
    assert!(reader.unfinished_operations().unwrap().is_empty());
}

#[test]
fn readers_and_a_waiting_writer_while_a_write_transaction_is_open() {
    let (_dir, path) = temp_db();
    let mut a = Store::open(&path).unwrap();
    let op = a.begin_operation(&new_op("start", "llm", T0)).unwrap();

    // Another process in the middle of a write transaction.
    let mut holder = raw(&path);
    let tx = holder
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    tx.execute(
        "INSERT INTO desired (component, lifecycle, set_at_ms) VALUES ('held', 'running', 1)",
        [],
    )
    .unwrap();

    // Readers neither fail nor see uncommitted rows; opening needs no write lock.
    let b = Store::open(&path).unwrap();
    assert!(b.desired().unwrap().is_empty());
    assert_eq!(b.operation(op).unwrap().unwrap().0.id, op);
    assert_eq!(a.operations(5).unwrap().len(), 1);
    assert_eq!(b.unfinished_operations().unwrap().len(), 1);

    // A writer waits (busy timeout) for the transaction instead of failing.
    let (started_tx, started_rx) = mpsc::channel();
    let writer = thread::spawn(move || {
        started_tx.send(()).unwrap();
        a.set_desired("llm", DesiredLifecycle::Running, T0 + 1)
            .map(|()| a)
    });
    started_rx.recv().unwrap();
    tx.commit().unwrap();
    let a = writer.join().unwrap().unwrap();

    let desired = b.desired().unwrap();
    assert_eq!(desired.len(), 2);
    assert_eq!(desired["held"], DesiredLifecycle::Running);
    assert_eq!(a.desired().unwrap(), desired);
}

#[test]
fn many_processes_journal_at_once() {
    let (_dir, path) = temp_db();
    drop(Store::open(&path).unwrap());
    let threads = 4;
    let per_thread = 15;
    let writers: Vec<_> = (0..threads)
        .map(|t| {
            let path = path.clone();
            thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                let mut ids = Vec::new();
                for i in 0..per_thread {
                    let at = T0 + i64::from(i);
                    let op = store
                        .begin_operation(&new_op("start", &format!("t{t}-{i}"), at))
                        .unwrap();
                    let s = store.begin_step(op, &step(0, "c", at)).unwrap();
                    store
                        .finish_step(s, Outcome::Succeeded, at + 1, &json!({"t": t}))
                        .unwrap();
                    store
                        .finish_operation(op, Outcome::Succeeded, at + 2, None)
                        .unwrap();
                    ids.push(op);
                }
                ids
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let path = path.clone();
            thread::spawn(move || {
                let store = Store::open(&path).unwrap();
                for _ in 0..50 {
                    for op in store.operations(10).unwrap() {
                        store.operation(op.id).unwrap().unwrap();
                    }
                    store.unfinished_operations().unwrap();
                }
            })
        })
        .collect();
    let mut all: Vec<OperationId> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), (threads * per_thread) as usize);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.operations(usize::MAX).unwrap().len(), all.len());
    assert!(store.unfinished_operations().unwrap().is_empty());
}

// ---------------------------------------------------------------- ids, JSON shapes, plans

#[test]
fn ids_print_and_parse() {
    assert_eq!(OperationId(12).to_string(), "op-12");
    assert_eq!(StepId(3).to_string(), "step-3");
    assert_eq!("op-12".parse::<OperationId>().unwrap(), OperationId(12));
    assert_eq!("12".parse::<OperationId>().unwrap(), OperationId(12));
    assert_eq!("step-3".parse::<StepId>().unwrap(), StepId(3));
    assert_eq!("3".parse::<StepId>().unwrap(), StepId(3));
    for bad in [
        "",
        "op-",
        "op-0",
        "0",
        "op--1",
        "-1",
        "+1",
        "op-1a",
        "step-1",
        "op 1",
        "op-99999999999999999999",
    ] {
        let err = bad.parse::<OperationId>().unwrap_err();
        assert!(err.to_string().contains("op-<n>"), "{bad}: {err}");
    }
    assert!("op-1".parse::<StepId>().is_err());

    assert_eq!(
        serde_json::to_value(OperationId(12)).unwrap(),
        json!("op-12")
    );
    assert_eq!(
        serde_json::from_value::<OperationId>(json!("op-12")).unwrap(),
        OperationId(12)
    );
    assert_eq!(
        serde_json::from_value::<OperationId>(json!(12)).unwrap(),
        OperationId(12)
    );
    assert_eq!(
        serde_json::from_value::<StepId>(json!("step-4")).unwrap(),
        StepId(4)
    );
    assert!(serde_json::from_value::<OperationId>(json!(0)).is_err());
    assert!(serde_json::from_value::<OperationId>(json!("step-1")).is_err());
}

fn keys(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

#[test]
fn json_field_names_are_stable() {
    let mut store = Store::open_in_memory().unwrap();
    let op = store.begin_operation(&new_op("start", "llm", T0)).unwrap();
    let s = store.begin_step(op, &step(0, "llm", T0)).unwrap();
    store.record_instance(&instance("llm", op, 9)).unwrap();
    let (rec, steps) = store.operation(op).unwrap().unwrap();

    let rec = serde_json::to_value(&rec).unwrap();
    let mut k = keys(&rec);
    k.sort();
    assert_eq!(
        k,
        [
            "command_line",
            "ended_at_ms",
            "error",
            "flags",
            "id",
            "outcome",
            "pid",
            "plan_digest",
            "started_at_ms",
            "target",
            "topology_digest",
            "verb",
            "who"
        ]
    );
    assert_eq!(rec["id"], json!(op.to_string()));
    assert_eq!(rec["ended_at_ms"], json!(null));
    assert_eq!(rec["outcome"], json!("running"));

    let step_json = serde_json::to_value(&steps[0]).unwrap();
    let mut k = keys(&step_json);
    k.sort();
    assert_eq!(
        k,
        [
            "action",
            "component",
            "ended_at_ms",
            "evidence",
            "id",
            "operation",
            "outcome",
            "started_at_ms",
            "wave"
        ]
    );
    assert_eq!(step_json["id"], json!(s.to_string()));

    let inst = serde_json::to_value(store.instance("llm").unwrap().unwrap()).unwrap();
    let mut k = keys(&inst);
    k.sort();
    assert_eq!(
        k,
        [
            "argv_digest",
            "component",
            "config_digest",
            "exe",
            "exe_sha256",
            "host",
            "log_path",
            "operation",
            "pgid",
            "pid",
            "start_time_ticks",
            "started_at_ms"
        ]
    );
    // Records deserialise from their own JSON.
    let back: InstanceRecord = serde_json::from_value(inst).unwrap();
    assert_eq!(back, instance("llm", op, 9));
    let back: OperationRecord = serde_json::from_value(rec).unwrap();
    assert_eq!(back.id, op);
}

#[test]
fn new_operation_from_plan() {
    use flotilla_plan::{Operation, Plan, Verb, PLAN_FORMAT};
    let plan = Plan {
        cleanup: vec![],
        format: PLAN_FORMAT,
        inventory_version: 1,
        impact: vec![],
        observed_digest: "sha256:obs".into(),
        operation: Operation {
            cascade: true,
            force: true,
            ..Operation::new(Verb::Stop, "llm")
        },
        topology_digest: "sha256:topo".into(),
        verify_stack: None,
        waves: vec![],
    };
    let new = NewOperation::from_plan(
        &plan,
        "ada@lovelace",
        31,
        "flotilla stop llm --force --cascade",
        T0,
    )
    .unwrap();
    assert_eq!(new.verb, "stop");
    assert_eq!(new.target, "llm");
    assert_eq!(new.flags, ["--force", "--cascade"]);
    assert_eq!(new.plan_digest, plan.digest());
    assert_eq!(new.topology_digest, "sha256:topo");
    assert_eq!(serde_json::from_str::<Plan>(&new.plan_json).unwrap(), plan);
    assert_eq!(
        (new.who.as_str(), new.pid, new.started_at_ms),
        ("ada@lovelace", 31, T0)
    );

    let mut store = Store::open_in_memory().unwrap();
    let id = store.begin_operation(&new).unwrap();
    let json = store.operation_plan(id).unwrap().unwrap();
    assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), plan);
}

#[test]
fn concurrent_first_opens_migrate_once() {
    let (_dir, path) = temp_db();
    let n = 6;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let openers: Vec<_> = (0..n)
        .map(|i| {
            let path = path.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                let mut store = Store::open(&path).unwrap();
                store
                    .set_desired(&format!("c{i}"), DesiredLifecycle::Running, T0)
                    .unwrap();
            })
        })
        .collect();
    for o in openers {
        o.join().unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.desired().unwrap().len(), n);
    let rows: i64 = raw(&path)
        .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, SCHEMA_VERSION);
}

#[test]
fn thread_safety_markers() {
    fn send<T: Send>() {}
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send::<Store>(); // not Sync: share behind a Mutex
    send_sync_static::<StoreError>(); // fits anyhow / Box<dyn Error + Send + Sync>
}
