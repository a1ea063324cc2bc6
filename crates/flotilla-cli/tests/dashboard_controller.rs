//! The authority as a controller, without a browser: an authority served in this
//! process (so the test can call `flotilla_server::controller` directly) with a real
//! `flotilla agent` and a real process component. A plan is computed on the
//! selected revision and kept; confirming it applies exactly that plan through the
//! authority's own call queue to the agent; a plan gone stale gets the CLI's
//! refusal and changes nothing; a held lifecycle lock refuses a second operation; a
//! plan applies at most once.

mod common;

use common::agent::AgentProc;
use common::authority::{free_port, Authority};
use flotilla_plan::{Action, Operation, Verb};
use flotilla_server::controller::{self, runs::RunOutcome, Proposed};
use flotilla_server::server::{AppState, Settings};
use flotilla_store::authority::SqliteAuthority;
use flotilla_testkit::{alive, wait_until};
use std::sync::Arc;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(40);

fn inventory(port: u16) -> String {
    let kit = flotilla_testkit::binary();
    format!(
        r#"
[hosts.studio]
transport = "agent"

[components.a]
host = "studio"
command = [{kit:?}, "--pid-file", "a.pid", "--listen", "127.0.0.1:{port}"]
endpoints = {{ api = "127.0.0.1:{port}" }}
readiness = {{ tcp = {{ endpoint = "api" }}, period = "50ms" }}
stop = {{ grace_period = "2s" }}
"#
    )
}

/// `flotilla serve` as a library, on the initialised authority `a`'s address.
struct InProcess {
    state: Arc<AppState<SqliteAuthority>>,
    rt: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl InProcess {
    fn serve(a: &Authority) -> InProcess {
        use flotilla_server::tls;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let cert = a.dir.join(tls::SERVER_CERT);
        let (ca_hash, ca_pem) = tls::chain_pin(&cert).unwrap();
        let settings = Settings {
            ca_pem,
            ca_hash,
            report_deadline: Duration::from_secs(10),
            sessions: None,
            public_url: a.url.clone(),
            controller_dir: Some(a.dir.join("controller")),
            blobs: flotilla_server::blobs::BlobSettings::in_authority_dir(&a.dir),
        };
        let state = rt
            .block_on(AppState::new(
                SqliteAuthority::open(&a.db()).unwrap(),
                settings,
            ))
            .unwrap();
        let listener = std::net::TcpListener::bind(a.url.trim_start_matches("https://")).unwrap();
        let config = tls::server_config(&cert, &a.dir.join(tls::SERVER_KEY)).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        rt.spawn(flotilla_server::server::run(
            Arc::clone(&state),
            listener,
            config,
            async {
                let _ = rx.await;
            },
        ));
        InProcess {
            state,
            rt,
            stop: Some(tx),
        }
    }

    fn propose(&self, verb: Verb, target: &str, typed: &str) -> Proposed {
        self.rt
            .block_on(controller::propose(
                &self.state,
                &Operation::new(verb, target),
                typed,
                "operator",
            ))
            .unwrap()
    }

    /// Confirms `id` and waits for the run's outcome.
    fn apply(&self, id: &str) -> (RunOutcome, Vec<String>) {
        let run = {
            let _guard = self.rt.enter();
            controller::confirm(&self.state, id, "operator").unwrap()
        };
        assert!(
            wait_until(DEADLINE, || run.outcome().is_some()),
            "the operation never ended: {:?}",
            run.lines()
        );
        (run.outcome().unwrap(), run.lines())
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

fn plan_of(p: Proposed) -> controller::runs::Proposal {
    match p {
        Proposed::Plan(p) => p,
        other => panic!("expected a plan, got {other:?}"),
    }
}

fn lifecycle(a: &Authority, name: &str) -> String {
    let r = a.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_default();
    v["components"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .map(|c| c["lifecycle"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[test]
fn a_plan_shown_is_the_plan_applied_and_a_stale_one_is_refused() {
    let port = free_port();
    let a = Authority::initialised(&inventory(port), &[]);
    let server = InProcess::serve(&a);
    let mut agent = AgentProc::new(a.ws.path());
    let t = a.run(&["serve", "token", "create", "--host", "studio", "--json"]);
    assert_eq!(t.code, 0, "{t:?}");
    let t = t.json();
    let out = agent.join(
        &a.url,
        t["token"].as_str().unwrap(),
        t["ca_hash"].as_str().unwrap(),
    );
    assert!(out.status.success(), "{out:?}");

    // Before any revision: nothing to operate on.
    let none = server.rt.block_on(controller::propose(
        &server.state,
        &Operation::new(Verb::Start, "a"),
        "start",
        "operator",
    ));
    assert!(
        matches!(none, Err(controller::ControllerError::NoRevision)),
        "{none:?}"
    );

    let p = a.publish(&["--json"]);
    assert_eq!(p.code, 0, "{p:?}");
    let revision = p.json()["revision"].as_str().unwrap().to_string();
    agent.start();
    assert!(
        wait_until(DEADLINE, || lifecycle(&a, "a") == "running"),
        "a never ran: {}",
        agent.log()
    );
    let first = agent.pid("a").unwrap();

    // Stop from the controller: the plan names the step; applied, the process ends.
    let stop = plan_of(server.propose(Verb::Stop, "a", "stop"));
    assert_eq!(stop.revision, revision);
    let steps: Vec<_> = stop
        .plan
        .steps()
        .map(|s| (s.action, s.component.as_str()))
        .collect();
    assert_eq!(steps, [(Action::Stop, "a")]);
    let (outcome, lines) = server.apply(&stop.id);
    assert!(
        matches!(
            &outcome,
            RunOutcome::Applied {
                succeeded: true,
                ..
            }
        ),
        "{outcome:?} {lines:?}\n{}",
        agent.log()
    );
    assert!(
        lines.iter().any(|l| l.starts_with("  stop a: ok")),
        "{lines:?}"
    );
    assert!(!alive(first), "a was stopped by its agent");
    // Applied once: the same id again is gone.
    let again = {
        let _g = server.rt.enter();
        controller::confirm(&server.state, &stop.id, "operator")
    };
    assert!(
        matches!(again, Err(controller::ControllerError::UnknownPlan)),
        "{again:?}"
    );

    // Start: shown, then applied; the new process runs.
    let start = plan_of(server.propose(Verb::Start, "a", "start"));
    let steps: Vec<_> = start
        .plan
        .steps()
        .map(|s| (s.action, s.component.as_str()))
        .collect();
    assert_eq!(steps, [(Action::Start, "a")]);
    let (outcome, lines) = server.apply(&start.id);
    assert!(
        matches!(
            &outcome,
            RunOutcome::Applied {
                succeeded: true,
                ..
            }
        ),
        "{outcome:?} {lines:?}"
    );
    let second = agent.pid("a").unwrap();
    assert!(second != first && alive(second));

    // A plan gone stale: `a` stopped from a terminal between showing and confirming.
    let stale = plan_of(server.propose(Verb::Stop, "a", "stop"));
    let cli = a.run(&["-f", "fleet/flotilla.toml", "stop", "a"]);
    assert_eq!(cli.code, 0, "{cli:?}");
    assert!(!alive(second));
    let (outcome, lines) = server.apply(&stale.id);
    match &outcome {
        RunOutcome::Refused(why) => {
            assert!(why.starts_with("stale plan: what runs changed"), "{why}");
            assert!(
                why.contains("it would now: record-stopped a (was: stop)"),
                "{why}"
            );
        }
        other => panic!("expected the stale plan's refusal, got {other:?} {lines:?}"),
    }
    assert!(lines.is_empty(), "nothing ran: {lines:?}");

    // One operation at a time: the controller's lock held refuses another (the
    // project is named after the inventory's directory, `fleet`; every component is
    // on an agent host, so it is the lock of a controller that runs nothing here).
    let start = plan_of(server.propose(Verb::Start, "a", "start"));
    let project = a.dir.join("controller/projects/fleet");
    let _held = flotilla_exec::lock::LifecycleLock::acquire_controller(
        &project,
        &flotilla_exec::lock::LockHolder {
            pid: std::process::id(),
            command: "a test holding the lock".into(),
            since_ms: 0,
        },
    )
    .unwrap();
    let (outcome, _) = server.apply(&start.id);
    match &outcome {
        RunOutcome::Refused(why) => assert!(why.contains("a test holding the lock"), "{why}"),
        other => panic!("expected the lock's refusal, got {other:?}"),
    }
    assert!(agent.pid("a") == Some(second), "nothing started");
}
