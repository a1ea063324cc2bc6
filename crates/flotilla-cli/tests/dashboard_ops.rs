//! The dashboard's component page and its lifecycle actions in a real browser
//! (Debian's headless Chromium) against a real `flotilla serve` and a real `flotilla
//! agent` running real process components: every status signal with its evidence;
//! the log following live, pausing when scrolled up; stop and start from the page,
//! each showing its plan and command first, the plan shown being the plan applied
//! (the process really ends / runs: `/proc`) and the page following without a
//! reload; a plan gone stale refused with the CLI's words and nothing run twice; a 1
//! MiB line and terminal escapes in a log shown escaped; a viewer offered no action
//! and refused one; a stack's members, route health and its down plan. Screenshots of the component page at 1280 and 375 px.

mod common;

use common::agent::AgentProc;
use common::authority::{free_port, Authority};
use common::browser::{Browser, WAIT};
use flotilla_testkit::{alive, wait_until};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(40);

fn inventory(port: u16) -> String {
    let kit = flotilla_testkit::binary();
    format!(
        r#"
[hosts.h1]
transport = "agent"

[components.web]
host = "h1"
command = [{kit:?}, "--pid-file", "web.pid", "--listen", "127.0.0.1:{port}", "--log-every", "100"]
endpoints = {{ api = "127.0.0.1:{port}" }}
readiness = {{ tcp = {{ endpoint = "api" }}, period = "50ms" }}
stop = {{ grace_period = "2s" }}

[stacks.site]
components = ["web"]

[components.noisy]
host = "h1"
command = ["sh", "-c", "echo $$ > noisy.pid; head -c 1048576 /dev/zero | tr '\\000' x; echo; printf 'bin \\001\\033[31m<script>window.__xss=1</script>\\n'; exec sleep 600"]
stop = {{ grace_period = "1s" }}
"#
    )
}

/// An authority with the inventory published and an agent for `h1` running it.
struct Fleet {
    a: Authority,
    agent: AgentProc,
    operator: String,
}

impl Fleet {
    fn start() -> Fleet {
        let a = Authority::new(&inventory(free_port()));
        let op: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(a.dir.join("operator.json")).unwrap())
                .unwrap();
        let operator = op["credential"].as_str().unwrap().to_string();
        let mut agent = AgentProc::new(a.ws.path());
        let t = a
            .run(&["serve", "token", "create", "--host", "h1", "--json"])
            .json();
        let out = agent.join(
            &a.url,
            t["token"].as_str().unwrap(),
            t["ca_hash"].as_str().unwrap(),
        );
        assert!(out.status.success(), "{out:?}");
        assert_eq!(a.publish(&[]).code, 0);
        agent.start();
        let f = Fleet { a, agent, operator };
        assert!(
            wait_until(DEADLINE, || f.lifecycle("web") == "running"
                && f.lifecycle("noisy") == "running"),
            "the agent never ran them: {}",
            f.agent.log()
        );
        f
    }

    /// A component's lifecycle as `flotilla status --server` reports it.
    fn lifecycle(&self, name: &str) -> String {
        let r = self.a.run(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_default();
        v["components"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == name))
            .map(|c| c["lifecycle"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    }
}

/// The highest `TICK n` in the log box.
fn last_tick(b: &Browser) -> u64 {
    b.js(
        "const m = [...document.querySelector('#log').textContent.matchAll(/TICK (\\d+)/g)];
          return m.length ? Number(m[m.length - 1][1]) : 0;",
    )
    .as_u64()
    .unwrap_or(0)
}

/// The signals table's value cell of `signal` (e.g. "Lifecycle").
fn signal(b: &Browser, signal: &str) -> String {
    b.js(&format!(
        "const r = [...document.querySelectorAll('table.signals tbody tr')]
           .find(r => r.querySelector('th').textContent === {});
         return r ? r.querySelector('td').textContent : '';",
        serde_json::to_string(signal).unwrap()
    ))
    .as_str()
    .unwrap_or_default()
    .to_string()
}

/// Opens `verb`'s plan from the page's button; the plan panel's text.
fn show_plan(b: &Browser, verb: &str) -> String {
    b.click(&format!("button[data-verb={verb}]"));
    b.wait_text(".plan-panel h2", &format!("flotilla {verb} web"));
    b.text(".plan-panel").unwrap_or_default()
}

/// Applies the plan shown; the text of the operation in the page's live
/// "Operations" section once it ended there (no reload).
fn apply(b: &Browser) -> String {
    b.click(".plan-panel button.primary");
    b.wait_css("#action-panel [data-run]");
    let id = b
        .js("return document.querySelector('#action-panel [data-run]').dataset.run")
        .as_str()
        .unwrap()
        .to_string();
    let css = format!("[sse-swap=operations] article.run[data-run='{id}']");
    let mut text = String::new();
    b.wait_for("the operation to end, shown live", DEADLINE, |b| {
        text = b.text(&css).unwrap_or_default();
        ["done (", "failed (", "refused", "could not run"]
            .iter()
            .any(|w| text.contains(w))
    });
    text
}

#[test]
fn a_component_is_stopped_and_started_from_its_page_with_the_plan_shown_first() {
    let f = Fleet::start();
    let base = f.a.url.clone();
    let first = f.agent.pid("web").unwrap();
    let b = Browser::start(1280, 900);
    b.sign_in(&base, &f.operator, "/ui/components/web");
    b.wait_text("h1", "Component web");
    assert!(signal(&b, "Lifecycle").contains("running"));
    // Every signal with its evidence (source, age, what was seen).
    for s in [
        "Lifecycle",
        "Desired lifecycle",
        "Health",
        "Condition",
        "Observability",
        "Ownership",
        "Config identity",
        "Runtime identity",
    ] {
        assert!(!signal(&b, s).is_empty(), "signal {s} shown");
    }
    let evidence = b.text("table.signals").unwrap();
    assert!(evidence.contains(" ago — "), "{evidence}");
    assert!(evidence.contains("runs the selected config"), "{evidence}");
    let identity = b.text("dl.facts").unwrap();
    assert!(identity.contains(&format!("pid {first}")), "{identity}");

    // The log follows: new lines arrive without a reload, on the page's one event
    // stream; scrolled up it pauses.
    assert_eq!(
        b.js("return document.querySelectorAll('[sse-connect]').length"),
        1,
        "one event stream for the whole page"
    );
    b.wait_for("log lines", WAIT, |b| last_tick(b) > 0);
    let seen = last_tick(&b);
    b.wait_for("newer log lines", WAIT, |b| last_tick(b) > seen + 5);
    assert_eq!(b.text("[data-log-state]").unwrap(), "following");
    b.wait_for("the log to overflow its box", WAIT, |b| {
        b.js("const l = document.querySelector('#log'); return l.scrollHeight > l.clientHeight + 50;")
            .as_bool()
            .unwrap_or(false)
    });
    b.js("const l = document.querySelector('#log'); l.scrollTop = 0; l.dispatchEvent(new Event('scroll')); return 0;");
    b.wait_text("[data-log-state]", "paused");
    let seen = last_tick(&b);
    b.wait_for("lines while paused", WAIT, |b| last_tick(b) > seen + 3);
    assert_eq!(
        b.js("return document.querySelector('#log').scrollTop")
            .as_u64(),
        Some(0),
        "a paused log stays where it was scrolled to"
    );
    b.click("[data-log-follow]");
    b.wait_text("[data-log-state]", "following");

    b.js("window.scrollTo(0, 0); return 0;");
    b.screenshot_full("component-1280", 1280);
    b.resize(375, 800);
    let w = b
        .js("return document.scrollingElement.scrollWidth")
        .as_u64()
        .unwrap();
    assert!(
        w <= 375,
        "the component page scrolls sideways at 375 px: {w} px"
    );
    b.js("window.scrollTo(0, 0); return 0;");
    b.screenshot_full("component-375", 375);
    b.resize(1280, 900);

    // Stop: the plan and its command first; applied, the process ends.
    let plan = show_plan(&b, "stop");
    assert!(plan.contains("plan: flotilla stop web"), "{plan}");
    assert!(
        plan.contains("wave 1") && plan.contains("stop  web  on h1"),
        "{plan}"
    );
    assert!(
        plan.contains(&format!("flotilla --server {base} stop web")),
        "{plan}"
    );
    assert!(
        plan.contains(&format!(
            "flotilla --server {base} plan stop web --json > plan.json && flotilla --server {base} apply plan.json"
        )),
        "{plan}"
    );
    assert!(alive(first), "nothing changed before applying");
    b.js("document.querySelector('.plan-panel').scrollIntoView(); return 0;");
    b.screenshot("component-plan-1280");
    let done = apply(&b);
    assert!(done.contains("done (op-"), "{done}");
    assert!(done.contains("stop web: ok"), "{done}");
    assert!(!alive(first), "the process ended (/proc)");
    b.wait_for("the page to show it stopped", DEADLINE, |b| {
        signal(b, "Lifecycle").contains("stopped")
    });

    // Start: the plan shown is the plan applied; the process runs.
    let plan = show_plan(&b, "start");
    assert!(plan.contains("start  web  on h1"), "{plan}");
    let done = apply(&b);
    assert!(
        done.contains("done (op-") && done.contains("start web: ok"),
        "{done}"
    );
    let second = f.agent.pid("web").unwrap();
    assert!(second != first && alive(second), "it runs (/proc)");
    b.wait_for("the page to show it running", DEADLINE, |b| {
        signal(b, "Lifecycle").contains("running")
            && b.text("dl.facts")
                .is_some_and(|t| t.contains(&format!("pid {second}")))
    });

    // A stale plan: stopped from a terminal between showing and applying.
    let plan = show_plan(&b, "stop");
    assert!(plan.contains("stop  web"), "{plan}");
    let cli = f.a.run(&["-f", "fleet/flotilla.toml", "stop", "web"]);
    assert_eq!(cli.code, 0, "{cli:?}");
    assert!(!alive(second));
    let refused = apply(&b);
    assert!(refused.contains("refused"), "{refused}");
    assert!(
        refused.contains("stale plan: what runs changed since it was planned"),
        "{refused}"
    );
    assert!(!refused.contains("stop web: ok"), "nothing ran: {refused}");
    assert_eq!(f.agent.pid("web"), Some(second), "nothing started again");
}

#[test]
fn a_huge_or_binary_log_line_is_shown_escaped_and_a_viewer_cannot_act() {
    let f = Fleet::start();
    let base = f.a.url.clone();
    let b = Browser::start(1280, 900);
    b.sign_in(&base, &f.operator, "/ui/components/noisy");
    b.wait_text("h1", "Component noisy");
    b.wait_text("#log", "more bytes not shown");
    b.wait_text("#log", "bin ^A^[[31m<script>window.__xss=1</script>");
    assert!(b.js("return window.__xss === undefined").as_bool().unwrap());
    let cut = b.text("#log .cut").unwrap();
    assert!(cut.contains("more bytes not shown"), "{cut}");

    // A viewer: no action on the page; a POST with a valid token refused.
    let made = f.a.run(&["serve", "ui-link", "--viewer", "--json"]).json();
    let v = Browser::start(1280, 900);
    v.goto(made["url"].as_str().unwrap());
    v.click("form button[type=submit]");
    v.wait_text("[data-who]", "(viewer)");
    v.goto(&format!("{base}/ui/components/noisy"));
    v.wait_text("h1", "Component noisy");
    assert_eq!(
        v.js("return document.querySelectorAll('[hx-post], button[data-verb]').length")
            .as_u64(),
        Some(0)
    );
    assert!(v.text(".actions-bar").unwrap().contains("Read-only"));
    let token = v
        .js("return JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
        .as_str()
        .unwrap()
        .to_string();
    let status = v
        .js_async(&format!(
            "const done = arguments[arguments.length - 1];
             fetch('/ui/actions/plan', {{method: 'POST', headers: {{'X-CSRF-Token': {}, 'Content-Type': 'application/x-www-form-urlencoded'}}, body: 'verb=stop&target=noisy'}})
               .then(r => done(r.status), e => done(String(e)));",
            serde_json::to_string(&token).unwrap()
        ))
        .as_u64();
    assert_eq!(status, Some(403));
    assert_eq!(f.lifecycle("noisy"), "running");

    // Stacks: the list, a stack's members and route health, down with its plan.
    b.goto(&format!("{base}/ui/stacks"));
    b.wait_text("main", "1 of 1");
    b.click("a[href='/ui/stacks/site']");
    b.wait_text("h1", "Stack site");
    b.wait_text("main table", "web");
    b.wait_text("#routes", "no readiness probes declared");
    b.click("button[data-verb=down]");
    b.wait_text(".plan-panel h2", "flotilla down site");
    let plan = b.text(".plan-panel").unwrap();
    assert!(plan.contains("plan: flotilla stop site"), "{plan}");
    assert!(plan.contains("stop  web  on h1"), "{plan}");
    assert!(
        plan.contains(&format!("flotilla --server {base} down site")),
        "{plan}"
    );
    b.click(".plan-panel button[data-dismiss]");
    b.wait_for("the plan to close", WAIT, |b| {
        b.text(".plan-panel").is_none()
    });
    assert_eq!(
        f.lifecycle("web"),
        "running",
        "a plan shown changes nothing"
    );
}
