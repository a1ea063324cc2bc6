//! Snapshot tests of the terminal UI's screens: the state built from fixture data
//! (no live system), driven through the update function with keys, drawn on
//! ratatui's `TestBackend`, compared with the committed snapshots (insta).

use crate::tui::action::{Action, Effect};
use crate::tui::model::{App, Graph, Mode, Snapshot};
use crate::tui::update::update;
use flotilla_model::status::StatusReport;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

/// 2026-12-01T10:41:03Z.
const NOW: i64 = 1_796_121_663_000;

/// One component's status as the wire carries it.
fn component(
    name: &str,
    host: &str,
    lifecycle: &str,
    health: &str,
    condition: &str,
    pid: Option<u32>,
) -> serde_json::Value {
    let runtime = pid.map(|pid| {
        serde_json::json!({
            "measured": {
                "pid": pid, "pgid": pid, "start_time_ticks": 1000,
                "exe": "/usr/bin/llama-server",
                "exe_sha256": "sha256:4add4bb89d8c0123456789abcdef0123456789abcdef0123456789abcdef0123",
                "argv_digest": "sha256:00",
            },
            "on_disk_sha256": null,
            "started_at_ms": NOW - 3_725_000,
            "started_by_operation": "op-7",
        })
    });
    serde_json::json!({
        "name": name, "host": host, "lifecycle": lifecycle,
        "desired": if lifecycle == "unknown" { serde_json::Value::Null } else { "running".into() },
        "health": health, "condition": condition, "observability": "observed",
        "ownership": "managed (process)",
        "started_by": if pid.is_some() { serde_json::json!({"flotilla": {"operation": "op-7"}}) } else { "nobody".into() },
        "config_identity": {"selected": "sha256:0b95445f8781bfd696b3", "running": pid.map(|_| "sha256:0b95445f8781bfd696b3")},
        "runtime_identity": runtime,
        "restarts": if name == "proxy" { serde_json::json!(2) } else { serde_json::Value::Null },
        "evidence": [
            {"signal": "lifecycle", "source": pid.map_or("journal".to_string(), |p| format!("/proc/{p}")),
             "at_ms": NOW - 120, "saw": pid.map_or("no instance recorded".to_string(), |p| format!("pid {p} alive, start time and executable match the instance recorded by op-7"))},
            {"signal": "health", "source": "readiness probe http://127.0.0.1:8080/health",
             "at_ms": NOW - 80, "saw": format!("{health}: HTTP 200 in 3 ms")},
        ],
    })
}

/// A fleet of several states: running and healthy, failed, degraded with restarts,
/// stopped, external and unknown.
fn report() -> StatusReport {
    serde_json::from_value(serde_json::json!({
        "observed_at_ms": NOW,
        "components": [
            component("llm", "gpu-1", "running", "healthy", "ok", Some(4242)),
            component("embedder", "gpu-1", "failed", "unhealthy", "down-unexpectedly", None),
            component("proxy", "local", "running", "degraded", "drift", Some(5151)),
            component("web", "local", "stopped", "n/a", "ok", None),
            component("vectors", "local", "unknown", "unknown", "ok", None),
        ],
        "interrupted": [], "in_progress": [],
    }))
    .expect("fixture")
}

fn graph() -> Graph {
    let mut g = Graph::default();
    let edges: &[(&str, &[&str])] = &[
        ("llm", &[]),
        ("embedder", &[]),
        ("proxy", &["llm", "embedder"]),
        ("web", &["proxy"]),
        ("vectors", &[]),
    ];
    for (n, ups) in edges {
        g.upstream
            .insert(n.to_string(), ups.iter().map(|u| u.to_string()).collect());
        for u in *ups {
            g.downstream
                .entry(u.to_string())
                .or_default()
                .push(n.to_string());
        }
        g.downstream.entry(n.to_string()).or_default();
    }
    g
}

fn app(mode: Mode) -> App {
    let mut app = App::new(mode, Some(graph()), Ok(()));
    let effects = update(
        &mut app,
        Action::Observed(Ok(Snapshot {
            report: report(),
            notes: Vec::new(),
        })),
    );
    assert_eq!(
        effects,
        vec![Effect::Follow {
            names: vec!["llm".into()],
            generation: 1
        }]
    );
    update(
        &mut app,
        Action::Log {
            generation: 1,
            lines: vec![
                "--- flotilla 2026-12-01T09:38:58.000Z: started pid 4242 (op-7) ---".into(),
                "llama server listening at http://127.0.0.1:8080".into(),
                "slot 0: prompt processed in 12 ms".into(),
            ],
        },
    );
    app
}

fn local() -> App {
    app(Mode::Local {
        project: "demo".into(),
    })
}

fn press(app: &mut App, keys: &str) -> Vec<Effect> {
    let mut effects = Vec::new();
    for c in keys.chars() {
        effects.extend(key(app, KeyCode::Char(c)));
    }
    effects
}

fn key(app: &mut App, code: KeyCode) -> Vec<Effect> {
    update(app, Action::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

fn screen(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
    terminal
        .draw(|f| crate::tui::components::draw(app, f))
        .expect("draw");
    terminal.backend().to_string()
}

#[test]
fn table_with_several_states() {
    let mut app = local();
    press(&mut app, "j");
    insta::assert_snapshot!(screen(&app, 120, 30));
}

#[test]
fn filter_active() {
    let mut app = local();
    press(&mut app, "/gpu");
    assert!(app.editing_filter);
    insta::assert_snapshot!(screen(&app, 120, 24));
    // Enter keeps the filter; Esc clears it.
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.visible().len(), 2);
    key(&mut app, KeyCode::Esc);
    assert_eq!(app.visible().len(), 5);
}

#[test]
fn help_overlay_lists_every_key() {
    let mut app = local();
    press(&mut app, "?");
    let shown = screen(&app, 120, 30);
    for (k, _) in crate::tui::components::help::KEYS {
        assert!(shown.contains(k), "{k} missing from help");
    }
    insta::assert_snapshot!(shown);
}

#[test]
fn plan_dialog_with_a_refusal() {
    let mut app = local();
    let effects = press(&mut app, "x");
    let op = flotilla_plan::Operation::new(flotilla_plan::Verb::Stop, "llm");
    assert_eq!(effects, vec![Effect::Plan(op.clone())]);
    let refusal = flotilla_plan::Refusal {
        operation: op.clone(),
        reasons: vec![flotilla_plan::Reason::DependentsRunning {
            component: "llm".into(),
            dependents: vec!["proxy".into()],
        }],
    };
    update(
        &mut app,
        Action::Planned {
            op,
            result: Err(Ok(crate::render::refusal(&refusal, "stop"))),
        },
    );
    // Nothing to apply: `y` does nothing.
    assert!(press(&mut app, "y").is_empty());
    insta::assert_snapshot!(screen(&app, 120, 30));
}

#[test]
fn evidence_view() {
    let mut app = local();
    press(&mut app, "e");
    insta::assert_snapshot!(screen(&app, 120, 30));
}

#[test]
fn dependency_view() {
    let mut app = local();
    press(&mut app, "jjd");
    insta::assert_snapshot!(screen(&app, 120, 30));
}

#[test]
fn questions_pane_shows_agent_text_escaped() {
    let mut app = app(Mode::Server {
        url: "https://127.0.0.1:7443".into(),
    });
    let q: flotilla_api::sessions::QuestionDto = serde_json::from_value(serde_json::json!({
        "id": 7, "session": 3, "asked_ms": NOW - 5000,
        "doc": {
            "tool_name": "Bash",
            "tool_input": {"command": "printf '\u{1b}[2J' && echo '<script>alert(1)</script>'"},
            "reason": "always-ask: a command that writes outside the tree \u{1b}[31m",
        },
    }))
    .expect("fixture");
    update(&mut app, Action::Questions(Ok(vec![q])));
    let main = screen(&app, 120, 30);
    assert!(!main.contains('\u{1b}'), "a raw escape reached the screen");
    assert!(main.contains("\\u{1b}[2J"), "{main}");
    insta::assert_snapshot!("questions_pane", main);
    // Tab focuses the questions; `n` opens the answer, deny, with a note.
    key(&mut app, KeyCode::Tab);
    press(&mut app, "n");
    press(&mut app, "not now");
    let dialog = screen(&app, 120, 30);
    assert!(!dialog.contains('\u{1b}'));
    assert!(dialog.contains("<script>alert(1)</script>"), "{dialog}");
    insta::assert_snapshot!("answer_dialog", dialog);
    let effects = key(&mut app, KeyCode::Enter);
    assert_eq!(
        effects,
        vec![Effect::Answer {
            id: 7,
            decision: "deny".into(),
            note: Some("not now".into())
        }]
    );
}

#[test]
fn narrow_terminal() {
    let mut app = local();
    press(&mut app, "jj");
    insta::assert_snapshot!(screen(&app, 60, 24));
}

#[test]
fn plan_then_apply_sends_exactly_that_plan() {
    let mut app = local();
    let effects = press(&mut app, "s");
    let op = flotilla_plan::Operation::new(flotilla_plan::Verb::Start, "llm");
    assert_eq!(effects, vec![Effect::Plan(op.clone())]);
    let plan: flotilla_plan::Plan = serde_json::from_value(serde_json::json!({
        "cleanup": ["llm"], "format": 1, "impact": [],
        "observed_digest": "sha256:03a9361aae5d", "topology_digest": "sha256:567aacbc7ab0",
        "operation": op, "waves": [{"steps": [{
            "action": "start", "component": "llm", "host": "gpu-1", "owner": "managed",
            "adapter": "process", "reason": "requested"
        }]}],
    }))
    .expect("plan fixture");
    update(
        &mut app,
        Action::Planned {
            op,
            result: Ok(plan.clone()),
        },
    );
    let shown = screen(&app, 120, 30);
    assert!(
        shown.contains("equivalent command: flotilla start llm"),
        "{shown}"
    );
    assert!(shown.contains("start  llm  on gpu-1"), "{shown}");
    assert_eq!(press(&mut app, "y"), vec![Effect::Apply(plan)]);
    assert!(app.busy);
    update(&mut app, Action::Progress("wave 1: start llm …".into()));
    let effects = update(
        &mut app,
        Action::Applied(Ok(("op-9: done (1 step)\n".into(), true))),
    );
    assert_eq!(effects, vec![Effect::Refresh]);
    assert!(!app.busy);
    assert!(screen(&app, 120, 30).contains("op-9: done (1 step)"));
}

#[test]
fn log_pane_keeps_its_place_when_scrolled_back() {
    let mut app = local();
    press(&mut app, "l");
    key(&mut app, KeyCode::Up);
    update(
        &mut app,
        Action::Log {
            generation: 1,
            lines: vec!["new line".into()],
        },
    );
    assert_eq!(app.logs.unseen, 1);
    let shown = screen(&app, 80, 12);
    assert!(shown.contains("1 new line"), "{shown}");
    assert!(!shown.contains("new line  "), "{shown}");
    press(&mut app, "G");
    assert!(screen(&app, 80, 12).contains("new line"));
    // Lines of a follower that was replaced are dropped.
    update(
        &mut app,
        Action::Log {
            generation: 0,
            lines: vec!["stale".into()],
        },
    );
    assert!(!app.logs.lines.iter().any(|l| l == "stale"));
}

#[test]
fn a_long_table_keeps_the_cursor_in_view() {
    let mut app = local();
    let mut report = report();
    report.components = (1..=200)
        .map(|i| {
            serde_json::from_value(component(
                &format!("c{i:03}"),
                "local",
                "stopped",
                "n/a",
                "ok",
                None,
            ))
            .expect("fixture")
        })
        .collect();
    update(
        &mut app,
        Action::Observed(Ok(Snapshot {
            report,
            notes: Vec::new(),
        })),
    );
    key(&mut app, KeyCode::End);
    let shown = screen(&app, 100, 30);
    let selected = shown
        .lines()
        .find(|l| l.contains("> "))
        .expect("a selected row");
    assert!(selected.contains("c200"), "{shown}");
    assert!(shown.contains("components (200 of 200"), "{shown}");
    key(&mut app, KeyCode::Home);
    let shown = screen(&app, 100, 30);
    let selected = shown
        .lines()
        .find(|l| l.contains("> "))
        .expect("a selected row");
    assert!(selected.contains("c001"), "{shown}");
}
