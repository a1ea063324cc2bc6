//! Notifications end to end: a real authority on 127.0.0.1 (HTTPS, SQLite) posts to
//! a receiver on 127.0.0.1 that records every request and answers as each test
//! scripts it. The events are the real ones: an agent's report through the API, a
//! host's agent going silent past a short report deadline, a rollout that rolls
//! back.

mod common;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use common::now_ms;
use flotilla_api::notifications::{NotificationDto, NotificationList};
use flotilla_api::wire::{AgentReport, JoinRequest, PublishRequest, TokenRequest};
use flotilla_model::status::{
    ComponentStatus, Condition, ConfigIdentity, Evidence, Health, Lifecycle, Observability,
    Ownership, Signal, StatusReport,
};
use flotilla_server::notify::NotifyConfig;
use flotilla_server::Client;
use flotilla_store::authority::SqliteAuthority;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PUBLIC_URL: &str = "https://flotilla.test:7443";

/// How the receiver answers one request.
#[derive(Clone, Copy)]
enum Reply {
    Status(u16),
    /// 429 with `Retry-After: N` seconds.
    TooMany(u64),
    /// 429 with `Retry-After:` the HTTP-date N seconds from now.
    TooManyUntil(u64),
    /// Never answers.
    Hang,
}

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
    at: Instant,
}

#[derive(Default)]
struct Book {
    got: Vec<Got>,
    script: HashMap<String, VecDeque<Reply>>,
    /// What a path answers once its script is used up (default 200).
    always: HashMap<String, Reply>,
}

/// A webhook receiver on 127.0.0.1.
#[derive(Clone)]
struct Receiver {
    base: String,
    book: Arc<Mutex<Book>>,
}

async fn receive(
    State(book): State<Arc<Mutex<Book>>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let reply = {
        let mut b = book.lock().unwrap();
        b.got.push(Got {
            path: path.clone(),
            headers,
            body: body.to_vec(),
            at: Instant::now(),
        });
        let scripted = b.script.get_mut(&path).and_then(VecDeque::pop_front);
        scripted
            .or_else(|| b.always.get(&path).copied())
            .unwrap_or(Reply::Status(200))
    };
    match reply {
        Reply::Status(s) => StatusCode::from_u16(s).unwrap().into_response(),
        Reply::TooMany(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
        )
            .into_response(),
        Reply::TooManyUntil(secs) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(
                "retry-after",
                httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(secs)),
            )],
        )
            .into_response(),
        Reply::Hang => std::future::pending().await,
    }
}

impl Receiver {
    async fn start() -> Receiver {
        let book = Arc::new(Mutex::new(Book::default()));
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::post(receive))
            .with_state(book.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { base, book }
    }

    fn script(&self, path: &str, replies: &[Reply]) {
        self.book
            .lock()
            .unwrap()
            .script
            .insert(path.into(), replies.iter().copied().collect());
    }

    fn always(&self, path: &str, reply: Reply) {
        self.book.lock().unwrap().always.insert(path.into(), reply);
    }

    fn got(&self, path: &str) -> Vec<Got> {
        let b = self.book.lock().unwrap();
        b.got.iter().filter(|g| g.path == path).cloned().collect()
    }

    /// The requests to `path` once there are `n`, within 30 s.
    async fn wait_for(&self, path: &str, n: usize) -> Vec<Got> {
        let mut got = Vec::new();
        let arrived = flotilla_testkit::wait_until_async(Duration::from_secs(30), || {
            got = self.got(path);
            std::future::ready(got.len() >= n)
        })
        .await;
        assert!(
            arrived,
            "{path} got {} requests, not {n}: {got:#?}",
            got.len()
        );
        got
    }
}

/// An authority with `notifications.toml` = `toml` (`{base}` is the receiver's
/// URL), its report deadline `deadline`.
struct Running {
    served: common::Running<SqliteAuthority>,
    _db: tempfile::TempDir,
}

impl std::ops::Deref for Running {
    type Target = common::Running<SqliteAuthority>;
    fn deref(&self) -> &Self::Target {
        &self.served
    }
}

async fn authority(receiver: &Receiver, toml: &str, deadline: Duration) -> Running {
    let db = tempfile::tempdir().unwrap();
    let store = SqliteAuthority::open(&db.path().join("authority.db")).unwrap();
    let file = db.path().join(flotilla_server::notify::NOTIFICATIONS_FILE);
    std::fs::write(&file, toml.replace("{base}", &receiver.base)).unwrap();
    let config = NotifyConfig::load(&file).unwrap();
    let served = common::start_with(store, deadline, PUBLIC_URL, |state| {
        assert!(state.notifier.configure(config));
    })
    .await;
    Running { served, _db: db }
}

const FLEET: &str = "[hosts.gpu]\ntransport = \"agent\"\n";

impl Running {
    /// Publishes a fleet with the agent host `gpu` and joins its agent.
    async fn gpu_agent(&self) -> Client {
        let mut sources = flotilla_model::Sources::new();
        let id = sources.add(flotilla_model::SourceFile::new(
            "fleet.toml",
            flotilla_model::Format::Toml,
            FLEET,
        ));
        let t = flotilla_model::validate(&sources, id, &[])
            .unwrap()
            .topology;
        self.operator
            .publish(&PublishRequest {
                topology: serde_json::from_str(&t.revision_json()).unwrap(),
                expect: None,
            })
            .await
            .unwrap();
        let token = self
            .operator
            .create_token(&TokenRequest {
                host: "gpu".into(),
                ttl_secs: None,
                keep_credentials: false,
            })
            .await
            .unwrap();
        let j = Client::new(&self.url, &self.ca_pem, None)
            .unwrap()
            .join(&JoinRequest {
                token: token.token,
                agent_version: "test".into(),
                platform: "linux-x86_64".into(),
            })
            .await
            .unwrap();
        Client::new(&self.url, &self.ca_pem, Some(j.credential)).unwrap()
    }

    /// The recorded notifications, once `done` holds for them, within 30 s.
    async fn records_until(
        &self,
        done: impl Fn(&[NotificationDto]) -> bool,
    ) -> Vec<NotificationDto> {
        let last = std::sync::Mutex::new(Vec::new());
        let (this, last_ref, done) = (self, &last, &done);
        let held =
            flotilla_testkit::wait_until_async(Duration::from_secs(30), move || async move {
                let l: NotificationList = this.operator.get("/v1/notifications").await.unwrap();
                let held = done(&l.notifications);
                *last_ref.lock().unwrap() = l.notifications;
                held
            })
            .await;
        let last = last.into_inner().unwrap();
        assert!(held, "{last:#?}");
        last
    }
}

/// A report of `gpu` whose components named in `down` are down unexpectedly and
/// the others running.
fn report(components: &[(&str, bool)]) -> AgentReport {
    let now = now_ms();
    AgentReport {
        revision: None,
        agent_version: "test".into(),
        platform: "linux-x86_64".into(),
        status: StatusReport {
            observed_at_ms: now,
            components: components
                .iter()
                .map(|(name, down)| ComponentStatus {
                    name: name.to_string(),
                    host: "gpu".into(),
                    lifecycle: if *down {
                        Lifecycle::Failed
                    } else {
                        Lifecycle::Running
                    },
                    desired: None,
                    health: Health::NotApplicable,
                    condition: if *down {
                        Condition::DownUnexpectedly
                    } else {
                        Condition::Ok
                    },
                    observability: Observability::Observed,
                    ownership: Ownership::External,
                    started_by: Default::default(),
                    config_identity: ConfigIdentity {
                        selected: "sha256:0".into(),
                        running: None,
                    },
                    runtime_identity: None,
                    config_changes: Vec::new(),
                    owner_error: None,
                    restarts: None,
                    running_ports: None,
                    evidence: vec![Evidence {
                        signal: Signal::Condition,
                        source: "journal".into(),
                        at_ms: now,
                        saw: format!("{name} exited with status 137 <not asked>"),
                    }],
                    last_known: None,
                })
                .collect(),
            interrupted: Vec::new(),
            in_progress: Vec::new(),
            stacks: Vec::new(),
        },
        drift: Vec::new(),
        events: Vec::new(),
    }
}

fn header<'a>(g: &'a Got, name: &str) -> &'a str {
    g.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header: {g:#?}"))
        .to_str()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shape_carries_the_event_and_its_deep_link_once() {
    let rx = Receiver::start().await;
    let a = authority(
        &rx,
        r#"
[[webhook]]
name = "json"
url = "{base}/json"

[[webhook]]
name = "ntfy"
url = "{base}/ntfy"
shape = "ntfy"
headers = { "X-Team" = "ml" }
"#,
        Duration::from_secs(60),
    )
    .await;
    let gpu = a.gpu_agent().await;
    let started = Instant::now();
    gpu.report("gpu", &report(&[("llama", true), ("embed", false)]))
        .await
        .unwrap();
    let json = rx.wait_for("json", 1).await;
    let ntfy = rx.wait_for("ntfy", 1).await;
    assert!(started.elapsed() < Duration::from_secs(10));

    // Generic JSON: the documented fields, the deep link under the public URL.
    let g = &json[0];
    assert_eq!(header(g, "content-type"), "application/json");
    let v: serde_json::Value = serde_json::from_slice(&g.body).unwrap();
    let records = a.records_until(|n| n.len() == 1).await;
    let id = records[0].id;
    let at_ms = v["at_ms"].as_i64().unwrap();
    let key = v["dedup_key"].as_str().unwrap().to_string();
    assert!(key.starts_with("component/gpu/llama/down/"), "{key}");
    assert_eq!(
        v,
        serde_json::json!({
            "id": id,
            "kind": "component-down",
            "severity": "critical",
            "title": "llama on gpu is down unexpectedly",
            "text": "journal: llama exited with status 137 <not asked>",
            "object": "/ui/components/llama",
            "link": "https://flotilla.test:7443/ui/components/llama",
            "at_ms": at_ms,
            "dedup_key": key,
        })
    );

    // ntfy: the message is the body; title, priority, tags and the click-through
    // link are headers; the webhook's own header rides along.
    let n = &ntfy[0];
    assert_eq!(
        String::from_utf8(n.body.clone()).unwrap(),
        "journal: llama exited with status 137 <not asked>"
    );
    assert_eq!(header(n, "title"), "llama on gpu is down unexpectedly");
    assert_eq!(header(n, "priority"), "5");
    assert_eq!(header(n, "tags"), "critical,component-down");
    assert_eq!(
        header(n, "click"),
        "https://flotilla.test:7443/ui/components/llama"
    );
    assert_eq!(header(n, "x-team"), "ml");
    assert_eq!(header(n, "content-type"), "text/plain; charset=utf-8");

    // The same component still down in the next reports: not sent again. Another
    // going down is; so is the first again once it came back up in between.
    gpu.report("gpu", &report(&[("llama", true), ("embed", false)]))
        .await
        .unwrap();
    gpu.report("gpu", &report(&[("llama", true), ("embed", true)]))
        .await
        .unwrap();
    let json = rx.wait_for("json", 2).await;
    let second: serde_json::Value = serde_json::from_slice(&json[1].body).unwrap();
    assert_eq!(second["title"], "embed on gpu is down unexpectedly");
    gpu.report("gpu", &report(&[("llama", false), ("embed", true)]))
        .await
        .unwrap();
    gpu.report("gpu", &report(&[("llama", true), ("embed", true)]))
        .await
        .unwrap();
    let json = rx.wait_for("json", 3).await;
    let third: serde_json::Value = serde_json::from_slice(&json[2].body).unwrap();
    assert_eq!(third["title"], "llama on gpu is down unexpectedly");
    assert_ne!(third["dedup_key"], v["dedup_key"], "a new episode");

    // Recorded, with each delivery; counted.
    let records = a
        .records_until(|n| {
            n.len() == 3
                && n.iter()
                    .all(|r| r.deliveries.iter().all(|d| d.state == "delivered"))
        })
        .await;
    assert_eq!(records[2].deliveries.len(), 2);
    assert_eq!(
        (
            records[2].deliveries[1].webhook.as_str(),
            records[2].deliveries[1].shape.as_str()
        ),
        ("ntfy", "ntfy")
    );
    assert_eq!(records[2].deliveries[0].attempts, 1);
    assert_eq!(rx.got("json").len(), 3, "each event once");
    assert_eq!(rx.got("ntfy").len(), 3, "each event once");
    let metrics = a.operator.get_text("/metrics").await.unwrap();
    assert!(
        metrics.contains("flotilla_notifications_sent_total{webhook=\"json\"} 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_gets_text_with_an_escaped_title_and_a_labelled_link() {
    let rx = Receiver::start().await;
    let a = authority(
        &rx,
        "[[webhook]]\nname = \"slack\"\nurl = \"{base}/slack\"\nshape = \"slack\"\n",
        Duration::from_secs(60),
    )
    .await;
    let gpu = a.gpu_agent().await;
    gpu.report("gpu", &report(&[("a<b>&c", true)]))
        .await
        .unwrap();
    let got = rx.wait_for("slack", 1).await;
    assert_eq!(header(&got[0], "content-type"), "application/json");
    let v: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "text": "*a&lt;b&gt;&amp;c on gpu is down unexpectedly*\njournal: a&lt;b&gt;&amp;c exited with status 137 &lt;not asked&gt;\n<https://flotilla.test:7443/ui/components/a%3Cb%3E%26c|/ui/components/a%3Cb%3E%26c>"
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_with_backoff_and_retry_after_is_honoured() {
    let rx = Receiver::start().await;
    rx.script("flaky", &[Reply::Status(503), Reply::Status(503)]);
    rx.script("limited", &[Reply::TooMany(1)]);
    rx.script("dated", &[Reply::TooManyUntil(3)]);
    rx.always("refused", Reply::Status(400));
    let a = authority(
        &rx,
        r#"
[[webhook]]
name = "flaky"
url = "{base}/flaky"
[[webhook]]
name = "limited"
url = "{base}/limited"
[[webhook]]
name = "dated"
url = "{base}/dated"
[[webhook]]
name = "refused"
url = "{base}/refused"
[[webhook]]
name = "closed"
url = "http://127.0.0.1:9/"
max_attempts = 2
"#,
        Duration::from_secs(60),
    )
    .await;
    let gpu = a.gpu_agent().await;
    gpu.report("gpu", &report(&[("llama", true)]))
        .await
        .unwrap();
    let records = a
        .records_until(|n| n.len() == 1 && n[0].deliveries.iter().all(|d| d.state != "pending"))
        .await;
    let by_name: HashMap<&str, &flotilla_api::notifications::DeliveryDto> = records[0]
        .deliveries
        .iter()
        .map(|d| (d.webhook.as_str(), d))
        .collect();
    // 503, 503, 200: delivered once, on the third attempt.
    let flaky = by_name["flaky"];
    assert_eq!(
        (flaky.state.as_str(), flaky.attempts, flaky.status),
        ("delivered", 3, Some(200))
    );
    let f = rx.got("flaky");
    assert_eq!(f.len(), 3);
    assert!(
        f.iter().all(|g| g.body == f[0].body),
        "the same message each time"
    );
    // 429 with Retry-After: 1 s: the second attempt waited for it.
    let l = rx.got("limited");
    assert_eq!(l.len(), 2);
    assert!(
        l[1].at - l[0].at >= Duration::from_millis(990),
        "{:?}",
        l[1].at - l[0].at
    );
    assert_eq!(by_name["limited"].attempts, 2);
    // 429 with Retry-After: an HTTP-date 3 s ahead (whole seconds): waited until it.
    let d = rx.got("dated");
    assert_eq!(d.len(), 2);
    assert!(
        d[1].at - d[0].at >= Duration::from_millis(1990),
        "{:?}",
        d[1].at - d[0].at
    );
    // A 400 is not retried; a closed port is, up to max_attempts.
    let refused = by_name["refused"];
    assert_eq!(
        (refused.state.as_str(), refused.attempts, refused.status),
        ("failed", 1, Some(400))
    );
    assert_eq!(rx.got("refused").len(), 1);
    let closed = by_name["closed"];
    assert_eq!((closed.state.as_str(), closed.attempts), ("failed", 2));
    assert!(
        closed.error.as_deref().unwrap_or("").contains("connect"),
        "{closed:?}"
    );
    let metrics = a.operator.get_text("/metrics").await.unwrap();
    for line in [
        "flotilla_notifications_sent_total{webhook=\"flaky\"} 1",
        "flotilla_notifications_failed_total{webhook=\"refused\"} 1",
        "flotilla_notifications_failed_total{webhook=\"closed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_receiver_delays_no_report() {
    let rx = Receiver::start().await;
    rx.always("hang", Reply::Hang);
    let a = authority(
        &rx,
        "[[webhook]]\nurl = \"{base}/hang\"\nmax_attempts = 1\n",
        Duration::from_secs(60),
    )
    .await;
    let gpu = a.gpu_agent().await;
    gpu.report("gpu", &report(&[("a", true)])).await.unwrap();
    rx.wait_for("hang", 1).await;
    // The receiver holds that delivery; every report still answers at once, and
    // each new event still reaches the receiver.
    for (i, name) in ["b", "c", "d"].iter().enumerate() {
        let t = Instant::now();
        gpu.report("gpu", &report(&[("a", true), (name, true)]))
            .await
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        rx.wait_for("hang", i + 2).await;
    }
    let pending = a.records_until(|n| n.len() == 4).await;
    assert!(pending.iter().all(|n| n.deliveries[0].state == "pending"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_host_is_unreachable_once_and_its_return_is_said() {
    let rx = Receiver::start().await;
    let a = authority(
        &rx,
        "[[webhook]]\nurl = \"{base}/hook\"\nkinds = [\"host-unreachable\", \"host-reachable\"]\n",
        Duration::from_secs(1),
    )
    .await;
    let gpu = a.gpu_agent().await;
    gpu.report("gpu", &report(&[])).await.unwrap();
    let silent_from = Instant::now();
    let got = rx.wait_for("hook", 1).await;
    assert!(silent_from.elapsed() >= Duration::from_millis(900));
    let v: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(v["kind"], "host-unreachable");
    assert_eq!(v["title"], "gpu is unreachable");
    assert_eq!(v["link"], "https://flotilla.test:7443/ui/hosts/gpu");
    // Back: said once.
    gpu.report("gpu", &report(&[])).await.unwrap();
    let got = rx.wait_for("hook", 2).await;
    let v: serde_json::Value = serde_json::from_slice(&got[1].body).unwrap();
    assert_eq!(v["kind"], "host-reachable");
    assert_eq!(got.len(), 2, "{got:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_that_rolls_back_says_so_and_that_it_halted() {
    use flotilla_api::wire::{CreateRolloutRequest, PublishReleaseRequest};
    use flotilla_release::rollout::UpdateState;
    use flotilla_release::Reason;
    use sha2::Digest as _;
    let rx = Receiver::start().await;
    let a = authority(
        &rx,
        "[[webhook]]\nurl = \"{base}/hook\"\nkinds = [\"rollout-halted\", \"rollout-rolled-back\"]\n",
        Duration::from_secs(60),
    )
    .await;
    let gpu = a.gpu_agent().await;
    let keys = tempfile::tempdir().unwrap();
    let k = flotilla_release::sign::keygen(keys.path(), "test", false).unwrap();
    let secret = std::fs::read_to_string(&k.secret_path).unwrap();
    let artifact = b"a new agent build".repeat(100);
    let sha = flotilla_release::artifact::hex(&sha2::Sha256::digest(&artifact));
    let manifest = common::agent_manifest("2.0.0", &sha, artifact.len() as u64);
    let signature = flotilla_release::sign::sign(&secret, manifest.as_bytes(), "test").unwrap();
    a.operator.put_blob(&sha, artifact).await.unwrap();
    a.operator
        .publish_release(&PublishReleaseRequest {
            manifest,
            signature,
        })
        .await
        .unwrap();
    let mut started = common::update("gpu", &"1".repeat(64), UpdateState::Updated, None);
    started.update = None;
    gpu.report_update("gpu", &started).await.unwrap();
    let r = a
        .operator
        .create_rollout(&CreateRolloutRequest {
            name: "flotilla-agent".into(),
            version: "2.0.0".into(),
            selector: Default::default(),
            max_in_flight: 1,
            canary: 0,
            min_healthy_ms: 0,
            timeout_ms: 600_000,
        })
        .await
        .unwrap();
    let id = r.rollout["id"].as_u64().unwrap();
    a.operator.rollout_action(id, "approve").await.unwrap();
    gpu.report_update(
        "gpu",
        &common::update(
            "gpu",
            &sha,
            UpdateState::RolledBack,
            Some(Reason::CrashLoop),
        ),
    )
    .await
    .unwrap();
    let got = rx.wait_for("hook", 2).await;
    let mut kinds: Vec<(String, String, String)> = got
        .iter()
        .map(|g| {
            let v: serde_json::Value = serde_json::from_slice(&g.body).unwrap();
            (
                v["kind"].as_str().unwrap().to_string(),
                v["title"].as_str().unwrap().to_string(),
                v["link"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    kinds.sort();
    let link = format!("https://flotilla.test:7443/ui/rollouts/{id}");
    assert_eq!(
        kinds,
        vec![
            (
                "rollout-halted".to_string(),
                format!("rollout {id} of flotilla-agent 2.0.0 halted: CrashLoop"),
                link.clone()
            ),
            (
                "rollout-rolled-back".to_string(),
                format!("rollout {id} of flotilla-agent 2.0.0: gpu rolled back (CrashLoop)"),
                link
            ),
        ]
    );
}
