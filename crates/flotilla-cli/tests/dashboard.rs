//! The web dashboard in a real browser (Debian's headless Chromium through
//! chromedriver) against a real `flotilla serve` with a real `flotilla agent`:
//! signing in (no cookie → the sign-in page; the operator credential; a one-time
//! `serve ui-link` URL; an agent's credential refused), deep links, the overview
//! changing without a reload when an agent reports (SSE), names and evidence with
//! HTML and terminal escapes shown as text, the CSRF check, the viewer role, the
//! theme remembered, shortcuts, no horizontal scroll at 375 px; screenshots at
//! 1280 and 375 px under `$CARGO_TARGET_TMPDIR/screenshots/`.

mod common;

use common::agent::AgentProc;
use common::authority::{free_port, Authority};
use common::browser::Browser;
use std::time::Duration;

/// A component name no inventory allows, sent in a report: it must show as text.
const XSS: &str = "<img src=x onerror=\"window.__xss=1\"><script>window.__xss=2</script>\u{1b}[31m";

fn inventory(port: u16) -> String {
    let kit = flotilla_testkit::binary();
    format!(
        r#"
[hosts.h1]
transport = "agent"

[hosts.h2]
transport = "agent"

[components.web]
host = "h1"
command = [{kit:?}, "--pid-file", "web.pid", "--listen", "127.0.0.1:{port}"]
endpoints = {{ api = "127.0.0.1:{port}" }}
readiness = {{ tcp = {{ endpoint = "api" }}, period = "50ms" }}
stop = {{ grace_period = "2s" }}

[components.api]
host = "h2"
command = ["sleep", "600"]
"#
    )
}

/// An authority with a published revision of two agent hosts, `h1` (a real agent,
/// joined, not started) and `h2` (a credential a test reports with by hand).
struct Fleet {
    a: Authority,
    agent: AgentProc,
    operator: String,
    ca_pem: String,
    h2_credential: String,
    rt: tokio::runtime::Runtime,
}

impl Fleet {
    fn start() -> Fleet {
        let a = Authority::new(&inventory(free_port()));
        let p = a.publish(&[]);
        assert_eq!(p.code, 0, "{p:?}");
        let op: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(a.dir.join("operator.json")).unwrap())
                .unwrap();
        let operator = op["credential"].as_str().unwrap().to_string();
        let ca_pem = op["ca_pem"].as_str().unwrap().to_string();
        let agent = AgentProc::joined(&a, "h1");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let t = a
            .run(&["serve", "token", "create", "--host", "h2", "--json"])
            .json();
        let anonymous = flotilla_api::Client::new(&a.url, &ca_pem, None).unwrap();
        let joined = rt
            .block_on(anonymous.join(&flotilla_api::wire::JoinRequest {
                token: t["token"].as_str().unwrap().into(),
                agent_version: "0.0.0".into(),
                platform: "linux-x86_64".into(),
            }))
            .unwrap();
        Fleet {
            a,
            agent,
            operator,
            ca_pem,
            h2_credential: joined.credential,
            rt,
        }
    }

    fn client(&self, credential: &str) -> flotilla_api::Client {
        flotilla_api::Client::new(&self.a.url, &self.ca_pem, Some(credential.into())).unwrap()
    }

    /// `GET /v1/status` as the operator.
    fn status(&self) -> serde_json::Value {
        self.rt
            .block_on(self.client(&self.operator).get("/v1/status"))
            .unwrap()
    }
}

/// The text of the overview's row for component `name` (empty when absent).
fn row(b: &Browser, name: &str) -> String {
    b.js(&format!(
        "const r = Array.from(document.querySelectorAll('#components tr[data-row]'))
           .find(r => r.querySelector('th').textContent === {});
         return r ? r.textContent : '';",
        serde_json::to_string(name).unwrap()
    ))
    .as_str()
    .unwrap_or_default()
    .to_string()
}

/// A POST from the page itself (its cookie), with `token` as `X-CSRF-Token` if
/// given: the answer's status.
fn post_from_page(b: &Browser, path: &str, token: Option<&str>) -> u64 {
    let headers = match token {
        Some(t) => format!("{{'X-CSRF-Token': {}}}", serde_json::to_string(t).unwrap()),
        None => "{}".into(),
    };
    b.js_async(&format!(
        "const done = arguments[arguments.length - 1];
         fetch({}, {{method: 'POST', headers: {headers}}}).then(r => done(r.status), e => done(String(e)));",
        serde_json::to_string(path).unwrap()
    ))
    .as_u64()
    .unwrap_or(0)
}

/// The page's CSRF token (from `<body hx-headers>`).
fn csrf(b: &Browser) -> String {
    b.js("return JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
        .as_str()
        .unwrap()
        .to_string()
}

fn no_horizontal_scroll(b: &Browser, what: &str) {
    let w = b
        .js("return document.scrollingElement.scrollWidth")
        .as_u64()
        .unwrap();
    assert!(w <= 375, "{what} scrolls sideways at 375 px: {w} px wide");
}

#[test]
fn an_operator_signs_in_and_sees_the_fleet_change_without_a_reload() {
    let mut f = Fleet::start();
    let base = f.a.url.clone();
    let b = Browser::start(1280, 900);

    // No cookie: a deep link opens the sign-in page, which remembers where it led.
    b.goto(&format!("{base}/ui/hosts/h1"));
    b.wait_css("#credential");
    assert!(
        b.url().contains("/ui/login?next=%2Fui%2Fhosts%2Fh1"),
        "{}",
        b.url()
    );

    // An agent's credential never signs in, and says why.
    b.fill("#credential", &f.h2_credential);
    b.click("form button[type=submit]");
    b.wait_text("[role=alert]", "agents never sign in");
    assert!(b.text("[data-who]").is_none());

    // The operator's does, and the deep link opens the host's page.
    b.fill("#credential", &f.operator);
    b.click("form button[type=submit]");
    b.wait_text("[data-who]", "(operator)");
    assert!(b.url().ends_with("/ui/hosts/h1"), "{}", b.url());
    b.wait_text("h1", "h1");
    b.wait_text("main", "web");

    // A deep link followed from another site (a notification in a chat app): the
    // browser holds back a SameSite=Strict cookie on that navigation, and the
    // sign-in page, reached without it, tries the link again from the dashboard's
    // own site, where the cookie goes: the page opens signed in.
    b.goto("about:blank");
    b.js(&format!("location.href = '{base}/ui/hosts/h2'; return 1"));
    b.wait_for(
        "the deep link followed from another site",
        Duration::from_secs(10),
        |b| b.url().ends_with("/ui/hosts/h2") && b.text("[data-who]").is_some(),
    );

    // The overview, before the agent runs: `web` is not observed.
    b.goto(&format!("{base}/ui/"));
    b.wait_css("#components");
    assert!(row(&b, "web").contains("unobserved"), "{}", row(&b, "web"));
    b.js("window.__samePage = 1; return 1");

    // The agent starts `web` and reports: the row changes in place (SSE).
    f.agent.start();
    b.wait_for(
        "`web` running on the overview",
        Duration::from_secs(60),
        |b| {
            let r = row(b, "web");
            r.contains("running") && r.contains("observed")
        },
    );
    assert_eq!(b.js("return window.__samePage"), 1, "no reload happened");

    // A report naming a component with HTML and a terminal escape: shown as text,
    // never run.
    let status = f.status();
    let h1 = status["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == "h1")
        .unwrap();
    let mut report = h1["report"].clone();
    let comps = report["status"]["components"].as_array_mut().unwrap();
    comps[0]["name"] = XSS.into();
    comps[0]["host"] = "h2".into();
    report["events"] = serde_json::json!([format!("applied {XSS}")]);
    f.rt.block_on(
        f.client(&f.h2_credential)
            .post::<_, serde_json::Value>("/v1/hosts/h2/report", &report),
    )
    .unwrap();
    // The escape character shows in caret notation, `^[`.
    let shown = XSS.replace('\u{1b}', "^[");
    b.wait_for("the odd name as text", Duration::from_secs(20), |b| {
        row(b, &shown).contains("running")
    });
    assert_eq!(
        b.js("return [window.__xss === undefined, document.querySelectorAll('main img, main script').length]"),
        serde_json::json!([true, 0])
    );

    // A report that changes no row's place in the table replaces only the rows it
    // changed (out of band), not the table: the age of h2's rows starts again.
    let at = |b: &Browser| {
        b.js(&format!(
            "const r = Array.from(document.querySelectorAll('#components tr[data-row]'))
               .find(r => r.querySelector('th').textContent === {});
             const t = r && r.querySelector('time.ago');
             return t ? [t.getAttribute('datetime'), t.textContent] : null;",
            serde_json::to_string(&shown).unwrap()
        ))
    };
    let before = at(&b);
    assert!(
        before[1].as_str().is_some_and(|t| t.ends_with(" s")),
        "an age the page keeps: {before}"
    );
    // Count the rows swapped in out of band (a stream that reconnected sends the
    // whole table once first: report again until a row came alone).
    b.js("window.__oobRows = 0;
          document.body.addEventListener('htmx:oobAfterSwap', e => {
            if (e.target.matches && e.target.matches('#components tr[data-row]')) window.__oobRows++;
          });
          return 1");
    let swapped_alone = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        f.rt.block_on(
            f.client(&f.h2_credential)
                .post::<_, serde_json::Value>("/v1/hosts/h2/report", &report),
        )
        .unwrap();
        flotilla_testkit::wait_until(Duration::from_secs(3), || {
            at(&b)[0] != before[0] && b.js("return window.__oobRows") != 0
        })
    });
    assert!(
        swapped_alone,
        "h2's row never came alone (out of band) with the new report's time: {}",
        at(&b)
    );
    b.goto(&format!("{base}/ui/hosts/h2"));
    b.wait_text("main", "applied <img src=x");
    assert_eq!(b.js("return window.__xss === undefined"), true);

    // A state-changing request without the CSRF token: 403; with it, the guard lets
    // it through to the route (which takes no POST: 405).
    assert_eq!(post_from_page(&b, "/ui/", None), 403);
    assert_eq!(post_from_page(&b, "/ui/", Some("0123")), 403);
    let token = csrf(&b);
    assert_eq!(post_from_page(&b, "/ui/", Some(&token)), 405);

    // The theme is remembered across reloads; `?` opens the help.
    b.goto(&format!("{base}/ui/"));
    b.wait_css("#components");
    b.js("const s = document.getElementById('theme'); s.value = 'dark'; s.dispatchEvent(new Event('change')); return 1");
    b.reload();
    b.wait_css("#components");
    assert_eq!(
        b.js("return [document.documentElement.dataset.theme, document.getElementById('theme').value]"),
        serde_json::json!(["dark", "dark"])
    );
    // `/` focuses the filter; text and state filter the rows in place.
    b.keys("/");
    assert_eq!(
        b.js("return document.activeElement.hasAttribute('data-filter')"),
        true
    );
    let shown = |b: &Browser| {
        b.js("return Array.from(document.querySelectorAll('#components tr[data-row]')).filter(r => !r.hidden).map(r => r.querySelector('th').textContent)")
    };
    b.fill("[data-filter]", "WEB");
    assert_eq!(shown(&b), serde_json::json!(["web"]));
    b.fill("[data-filter]", "");
    b.js("const s = document.querySelector('[data-filter-state]'); s.value = 'attention'; s.dispatchEvent(new Event('change')); return 1");
    assert_eq!(
        shown(&b),
        serde_json::json!(["api"]),
        "attention first and only"
    );
    b.js("const s = document.querySelector('[data-filter-state]'); s.value = ''; s.dispatchEvent(new Event('change')); return 1");
    // Submitted, the filter is the authority's, over every page, in the URL.
    b.fill("[data-filter]", "WEB");
    b.js("document.querySelector('form.filters').requestSubmit(); return 1");
    b.wait_for("the filtered overview", Duration::from_secs(10), |b| {
        b.js("return location.search") == "?q=WEB&state="
            && b.js("return document.querySelectorAll('#components tr[data-row]').length") == 1
    });
    assert_eq!(shown(&b), serde_json::json!(["web"]));
    b.wait_text("#ov-pager", "1 component matching the filter");
    b.goto(&format!("{base}/ui/?state=attention"));
    b.wait_css("#components");
    assert_eq!(shown(&b), serde_json::json!(["api"]));
    assert_eq!(
        b.js("return document.querySelector('[data-filter-state]').value"),
        "attention"
    );
    b.goto(&format!("{base}/ui/"));
    b.wait_css("#components");
    b.keys("?");
    b.wait_for("the help overlay", Duration::from_secs(5), |b| {
        b.js("return document.getElementById('help').open") == true
    });
    b.js("document.getElementById('help').close(); return 1");

    // Screenshots, light, at 1280 and 375 px; nothing scrolls sideways at 375.
    b.js("const s = document.getElementById('theme'); s.value = 'light'; s.dispatchEvent(new Event('change')); return 1");
    b.screenshot_full("overview-1280", 1280);
    b.goto(&format!("{base}/ui/hosts/h1"));
    b.wait_text("main", "web");
    b.screenshot_full("host-1280", 1280);
    b.resize(375, 800);
    b.reload();
    b.wait_text("main", "web");
    no_horizontal_scroll(&b, "the host page");
    b.screenshot_full("host-375", 375);
    b.goto(&format!("{base}/ui/"));
    b.wait_css("#components");
    no_horizontal_scroll(&b, "the overview");
    b.screenshot_full("overview-375", 375);
    b.js("const s = document.getElementById('theme'); s.value = 'dark'; s.dispatchEvent(new Event('change')); return 1");
    b.resize(1280, 900);
    b.screenshot_full("overview-1280-dark", 1280);

    // Every page holds an event stream open: over HTTP/2 they share one connection,
    // so a browser's limit of six HTTP/1.1 connections to one origin never stalls
    // the next page (this one waited a minute when it was reached).
    assert_eq!(
        b.js("return performance.getEntriesByType('navigation')[0].nextHopProtocol"),
        "h2"
    );
    // An unknown host: a 404 page that says so.
    b.goto(&format!("{base}/ui/hosts/nope"));
    b.wait_text("main", "knows no host `nope`");
}

#[test]
fn a_sign_in_link_works_once_a_viewer_cannot_act_and_revoking_ends_its_session() {
    let f = Fleet::start();
    let base = f.a.url.clone();
    let made = f.a.run(&["serve", "ui-link", "--viewer", "--json"]);
    assert_eq!(made.code, 0, "{made:?}");
    let made = made.json();
    let url = made["url"].as_str().unwrap().to_string();
    assert!(
        url.starts_with(&format!("{base}/ui/login?token=flt-ui-")),
        "{url}"
    );
    let id = made["id"].as_u64().unwrap().to_string();

    let b = Browser::start(1280, 900);
    b.goto(&url);
    b.wait_text("main", "one-time sign-in link");
    b.click("form button[type=submit]");
    b.wait_text("[data-who]", "(viewer)");
    b.wait_css("#components");

    // No action anywhere on the page, and a POST with a valid token is refused.
    assert_eq!(
        b.js("return document.querySelectorAll('[hx-post], [hx-put], [hx-delete], form[method=post]:not([action=\"/ui/logout\"])').length"),
        0
    );
    let token = csrf(&b);
    assert_eq!(post_from_page(&b, "/ui/", Some(&token)), 403);

    // The link works once.
    b.goto(&url);
    b.click("form button[type=submit]");
    b.wait_text("[role=alert]", "already used");

    // Revoking it ends the session it opened, and the page open in the browser says
    // so once its event stream ends (at its next session check, within 15 s).
    b.goto(&format!("{base}/ui/"));
    b.wait_css("#components");
    let r = f.a.run(&["serve", "ui-link", "--revoke", &id]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("1 dashboard session(s) ended"),
        "{}",
        r.stdout
    );
    b.wait_for(
        "the stale page saying it is signed out",
        Duration::from_secs(40),
        |b| {
            b.text(".stale-banner")
                .is_some_and(|t| t.contains("Signed out: this page no longer updates."))
        },
    );
    b.screenshot("stale-signed-out");
    b.goto(&format!("{base}/ui/"));
    b.wait_css("#credential");
    let list = f.a.run(&["serve", "ui-link", "--list"]);
    assert!(list.stdout.contains("revoked"), "{}", list.stdout);
    // A sign-in link is not an API credential.
    let token = url.split("token=").nth(1).unwrap();
    let refused =
        f.rt.block_on(f.client(token).get::<serde_json::Value>("/v1/status"));
    assert!(refused.is_err());
}
