//! `flotilla serve credentials` and `flotilla serve token list|revoke` against a real
//! authority and a real agent running a component: the listing (kind, host,
//! created, last used, address), re-joining with and without
//! `--keep-credentials`, revoking by id (the running agent is refused within a
//! second, says why and keeps its component running) and by host, a metrics
//! scraper's credential (reads `/metrics`, refused elsewhere), and join tokens
//! listed and revoked (a revoked one cannot be redeemed).

mod common;

use common::agent::AgentProc;
use common::authority::{free_port, Authority};
use flotilla_testkit::wait_until;
use std::path::{Path, PathBuf};
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

/// The agent's enrollment (`agent.json` under its state directory): its
/// credential and the CA it pinned.
fn enrollment(agent: &AgentProc) -> (String, String) {
    fn find(dir: &Path) -> Option<PathBuf> {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == "agent.json") {
                return Some(p);
            }
            if p.is_dir() {
                if let Some(found) = find(&p) {
                    return Some(found);
                }
            }
        }
        None
    }
    let path = find(&agent.state).expect("the agent's agent.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    (
        v["credential"].as_str().unwrap().to_string(),
        v["ca_pem"].as_str().unwrap().to_string(),
    )
}

/// `serve credentials list --json`.
fn credentials(a: &Authority) -> Vec<serde_json::Value> {
    let r = a.run(&["serve", "credentials", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["credentials"].as_array().unwrap().clone()
}

/// The listed credential with this secret's id.
fn listed(a: &Authority, secret: &str) -> serde_json::Value {
    let hash = flotilla_model::digest::sha256_hex(secret.as_bytes());
    let id = &hash["sha256:".len().."sha256:".len() + 12];
    credentials(a)
        .into_iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("credential {id} not listed"))
}

fn id_of(secret: &str) -> String {
    let hash = flotilla_model::digest::sha256_hex(secret.as_bytes());
    hash["sha256:".len().."sha256:".len() + 12].to_string()
}

/// What the authority answers `credential` on an agent's own route: `None` when it
/// serves it, else the HTTP status.
fn snapshot_status(
    rt: &tokio::runtime::Runtime,
    a: &Authority,
    ca_pem: &str,
    credential: &str,
) -> Option<u16> {
    let client = flotilla_api::Client::new(&a.url, ca_pem, Some(credential.to_string())).unwrap();
    match rt.block_on(client.snapshot("studio", 0, Duration::ZERO)) {
        Ok(_) => None,
        Err(e) => Some(e.status().unwrap_or_else(|| panic!("no answer: {e}"))),
    }
}

#[test]
fn credentials_are_listed_revoked_within_a_second_and_rejoining_revokes_older_ones() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let port = free_port();
    let a = Authority::with(&inventory(port), &["--report-deadline", "3s"]);
    let mut agent = AgentProc::joined(&a, "studio");
    assert_eq!(a.publish(&[]).code, 0);
    agent.start();
    let (cred1, ca_pem) = enrollment(&agent);
    assert!(
        wait_until(DEADLINE, || agent.pid("a").is_some()
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "the component never ran:\n{}",
        agent.log()
    );
    let component = agent.pid("a").unwrap();

    // The listing: kind, host, created, last used and from which address.
    let mut last = serde_json::Value::Null;
    assert!(
        wait_until(DEADLINE, || {
            last = listed(&a, &cred1);
            last["last_address"]
                .as_str()
                .is_some_and(|s| s.starts_with("127.0.0.1:"))
        }),
        "the agent's use is never recorded: {last:#}"
    );
    assert_eq!(last["kind"], "agent");
    assert_eq!(last["host"], "studio");
    assert!(last["created_ms"].as_i64().unwrap() > 0);
    assert!(last["last_used_ms"].as_i64().unwrap() >= last["created_ms"].as_i64().unwrap());
    assert!(last.get("revoked_ms").is_none(), "{last:#}");
    assert!(
        credentials(&a).iter().any(|c| c["kind"] == "operator"),
        "the operator's credential is listed"
    );
    let table = a.run(&["serve", "credentials", "list"]);
    assert_eq!(table.code, 0, "{table:?}");
    let row = table
        .stdout
        .lines()
        .find(|l| l.starts_with(&id_of(&cred1)))
        .unwrap_or_else(|| panic!("no row for the agent:\n{}", table.stdout));
    assert!(
        row.contains("agent") && row.contains("studio") && row.contains("127.0.0.1:"),
        "{row}"
    );
    assert!(
        table.stdout.contains("LAST USED") && table.stdout.contains("ADDRESS"),
        "{}",
        table.stdout
    );

    // Joining again with --keep-credentials leaves the running agent's credential
    // valid.
    let second = AgentProc::new(&a.ws.path().join("second"));
    second.join_with_token(&a, "studio", &["--keep-credentials"]);
    let (cred2, _) = enrollment(&second);
    assert_eq!(snapshot_status(&rt, &a, &ca_pem, &cred1), None);
    assert_eq!(snapshot_status(&rt, &a, &ca_pem, &cred2), None);

    // Ids: malformed or unknown are usage errors (exit 2), nothing revoked.
    let bad = a.run(&["serve", "credentials", "revoke", "xyz!"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    let ids: Vec<String> = credentials(&a)
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let unknown = ["ffffffff", "eeeeeeee", "dddddddd"]
        .into_iter()
        .find(|p| !ids.iter().any(|i| i.starts_with(p)))
        .unwrap();
    let r = a.run(&["serve", "credentials", "revoke", unknown]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("no credential has an id starting"),
        "{r:?}"
    );

    // Revoking the running agent's credential by a prefix of its id: refused at
    // once on its own route, and the agent says why and keeps its component.
    let prefix = &id_of(&cred1)[..8];
    let r = a.run(&["serve", "credentials", "revoke", prefix]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&id_of(&cred1)), "{}", r.stdout);
    let revoked_at = std::time::Instant::now();
    let mut status = None;
    assert!(
        wait_until(Duration::from_secs(1), || {
            status = snapshot_status(&rt, &a, &ca_pem, &cred1);
            status == Some(401)
        }),
        "the revoked credential was still served after 1 s: {status:?}"
    );
    assert!(revoked_at.elapsed() < Duration::from_secs(1));
    assert_eq!(snapshot_status(&rt, &a, &ca_pem, &cred2), None);
    assert!(
        wait_until(DEADLINE, || {
            let log = agent.log();
            log.contains("the authority refused this agent's credential (credential-revoked)")
                && log.contains("this credential was revoked at")
        }),
        "the agent never said its credential was revoked:\n{}",
        agent.log()
    );
    assert_eq!(agent.pid("a"), Some(component), "{}", agent.log());
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(component as i32), None).is_ok(),
        "the component keeps running"
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(listed(&a, &cred1)["revoked_ms"].as_i64().is_some());

    // Joining again without --keep-credentials revokes the older one (cred2).
    let third = AgentProc::new(&a.ws.path().join("third"));
    third.join_with_token(&a, "studio", &[]);
    let (cred3, _) = enrollment(&third);
    assert_eq!(snapshot_status(&rt, &a, &ca_pem, &cred2), Some(401));
    assert!(listed(&a, &cred2)["revoked_ms"].as_i64().is_some());
    assert_eq!(snapshot_status(&rt, &a, &ca_pem, &cred3), None);

    // By host: every agent credential of it; then there is none left (exit 2).
    let r = a.run(&[
        "serve",
        "credentials",
        "revoke",
        "--host",
        "studio",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let gone = r.json()["credentials"].as_array().unwrap().clone();
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0]["id"], id_of(&cred3).as_str());
    assert_eq!(snapshot_status(&rt, &a, &ca_pem, &cred3), Some(401));
    let r = a.run(&["serve", "credentials", "revoke", "--host", "studio"]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn a_metrics_credential_reads_metrics_only_and_join_tokens_are_listed_and_revoked() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = Authority::new(&inventory(free_port()));
    // The CA `serve init` made, as the CLI and agents pin it.
    let ca_pem = std::fs::read_to_string(a.dir.join("ca.pem")).unwrap();

    // A metrics scraper's credential: /metrics, nothing else.
    let r = a.run(&[
        "serve",
        "credentials",
        "create",
        "--kind",
        "metrics",
        "prometheus",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let secret = r.json()["credential"].as_str().unwrap().to_string();
    assert!(secret.starts_with("flt-metrics-"), "{secret}");
    let scraper = flotilla_api::Client::new(&a.url, &ca_pem, Some(secret.clone())).unwrap();
    let text = rt.block_on(scraper.get_text("/metrics")).unwrap();
    assert!(text.contains("# TYPE"), "{text}");
    for path in ["/v1/status", "/v1/credentials", "/v1/tokens"] {
        let e = rt
            .block_on(scraper.get::<serde_json::Value>(path))
            .unwrap_err();
        assert_eq!(e.status(), Some(403), "{path}: {e}");
    }
    let e = rt
        .block_on(scraper.snapshot("studio", 0, Duration::ZERO))
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    let c = credentials(&a)
        .into_iter()
        .find(|c| c["kind"] == "metrics")
        .unwrap();
    assert_eq!(c["name"], "prometheus");
    assert!(c["last_used_ms"].as_i64().is_some(), "{c:#}");
    // Revoked: refused at once.
    let r = a.run(&["serve", "credentials", "revoke", &id_of(&secret)]);
    assert_eq!(r.code, 0, "{r:?}");
    let e = rt.block_on(scraper.get_text("/metrics")).unwrap_err();
    assert_eq!(e.status(), Some(401), "{e}");

    // Join tokens: listed (host, created, expires, used), revoked, not redeemable.
    let t = a.run(&["serve", "token", "create", "--host", "studio", "--json"]);
    assert_eq!(t.code, 0, "{t:?}");
    let t = t.json();
    let token = t["token"].as_str().unwrap().to_string();
    let r = a.run(&["serve", "token", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let tokens = r.json()["tokens"].as_array().unwrap().clone();
    assert_eq!(tokens.len(), 1, "{tokens:?}");
    assert_eq!(tokens[0]["id"], id_of(&token).as_str());
    assert_eq!(tokens[0]["host"], "studio");
    assert_eq!(tokens[0]["state"], "unused");
    assert!(tokens[0]["expires_ms"].as_i64() > tokens[0]["created_ms"].as_i64());
    let table = a.run(&["serve", "token", "list"]);
    assert!(
        table.stdout.contains(&id_of(&token)) && table.stdout.contains("EXPIRES"),
        "{table:?}"
    );
    let r = a.run(&["serve", "token", "revoke", &id_of(&token)[..6]]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = a.run(&["serve", "token", "list", "--json"]);
    assert_eq!(r.json()["tokens"][0]["state"], "revoked");
    let agent = AgentProc::new(a.ws.path());
    let out = agent.join(&a.url, &token, t["ca_hash"].as_str().unwrap());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("revoked"), "{stderr}");
    let r = a.run(&["serve", "token", "revoke", "zz"]);
    assert_eq!(r.code, 2, "{r:?}");
}
