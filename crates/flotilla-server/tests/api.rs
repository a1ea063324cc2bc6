//! The authority's API over real HTTPS on loopback, with its own CA, against both
//! storage backends: SQLite (a temporary directory) and PostgreSQL (the server that
//! `scripts/postgres` starts; `FLOTILLA_TEST_POSTGRES_URL`).

mod common;

use common::{agent_manifest, both, now_ms, sqlite, start_with, update, Running};
use flotilla_api::wire::{AgentReport, JoinRequest, PublishRequest, SelectRequest, TokenRequest};
use flotilla_api::wire::{CreateRolloutRequest, PublishReleaseRequest};
use flotilla_api::wire::{CreateUnskipRequest, UnskipRequest, UnskipState};
use flotilla_model::{validate, Format, SourceFile, Sources, Topology};
use flotilla_release::rollout::{HostPhase, HostUpdate, Phase, Rollout, UpdateState};
use flotilla_release::{Reason, SkipEntry, UnskipOutcome};
use flotilla_server::{Client, ClientError};
use flotilla_store::authority::{AuthorityStore, NewJoinToken, PostgresAuthority};
use sha2::{Digest, Sha256};
use std::time::Duration;

const FLEET: &str = r#"
[hosts.studio]
transport = "agent"
[hosts.gpu]
transport = "agent"
[hosts.ops]
transport = "agent"
role = "control"

[components.model]
host = "studio"
command = ["llama-server", "--port", "18080", "--canary-studio-only"]
endpoints = { api = "http://127.0.0.1:18080" }
env = { API_KEY = { secret = "MODEL_KEY" } }

[components.embed]
host = "gpu"
command = ["embedder", "--gpu-only-flag"]
endpoints = { api = "http://127.0.0.1:18081" }
env = { GPU_ONLY = "gpu-env-canary" }

[components.proxy]
host = "studio"
command = ["proxy", "--upstream", "${connections.embed}"]
connections = { embed = "embed.api" }
"#;

fn topology(text: &str) -> Topology {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("fleet.toml", Format::Toml, text));
    match validate(&sources, id, &[]) {
        Ok(v) => v.topology,
        Err(d) => panic!("invalid test inventory: {d:#?}"),
    }
}

/// A running authority with the defaults of these tests.
async fn start<S: AuthorityStore + Clone>(store: S) -> Running<S> {
    start_with(
        store,
        Duration::from_secs(45),
        "https://127.0.0.1:7443",
        |_| {},
    )
    .await
}

impl<S: AuthorityStore + Clone> Running<S> {
    /// Joins an agent for `host` the way `flotilla agent join` does.
    async fn agent(&self, host: &str) -> Client {
        let t = self
            .operator
            .create_token(&TokenRequest {
                host: host.into(),
                ttl_secs: None,
                keep_credentials: false,
            })
            .await
            .unwrap();
        assert_eq!(t.ca_hash, self.ca_hash);
        let pem = Client::discover_ca(&self.url, &t.ca_hash).await.unwrap();
        assert_eq!(pem, self.ca_pem);
        let j = Client::new(&self.url, &pem, None)
            .unwrap()
            .join(&JoinRequest {
                token: t.token,
                agent_version: "test".into(),
                platform: "linux-x86_64".into(),
            })
            .await
            .unwrap();
        assert_eq!(j.host, host);
        Client::new(&self.url, &pem, Some(j.credential)).unwrap()
    }

    async fn publish(
        &self,
        t: &Topology,
        expect: Option<String>,
    ) -> Result<flotilla_api::wire::SelectResponse, ClientError> {
        self.operator
            .publish(&PublishRequest {
                topology: serde_json::from_str(&t.revision_json()).unwrap(),
                expect,
            })
            .await
    }
}

fn report(revision: Option<String>) -> AgentReport {
    AgentReport {
        revision,
        agent_version: "test".into(),
        platform: "linux-x86_64".into(),
        status: flotilla_model::status::StatusReport {
            observed_at_ms: now_ms(),
            components: Vec::new(),
            interrupted: Vec::new(),
            in_progress: Vec::new(),
            stacks: Vec::new(),
        },
        drift: Vec::new(),
        events: Vec::new(),
    }
}

async fn a_report_from_before_an_operation_says_so<S: AuthorityStore + Clone>(store: S) {
    let a = start(store).await;
    let gpu = a.agent("gpu").await;
    // A report measured before a step its host answered since is shown as such,
    // until a newer report arrives.
    gpu.report("gpu", &report(None)).await.unwrap();
    let step = a
        .operator
        .enqueue_call(
            "gpu",
            &flotilla_api::wire::EnqueueRequest {
                request: serde_json::json!({"protocol": 2, "call": {"step": {"operation": "op-7"}}}),
                deadline_ms: now_ms() + 60_000,
            },
        )
        .await
        .unwrap();
    gpu.reply_call(step, serde_json::json!({"reply": "step"}))
        .await
        .unwrap();
    let host = |s: &flotilla_api::wire::FleetStatus| {
        s.hosts.iter().find(|h| h.host == "gpu").cloned().unwrap()
    };
    let status = a.operator.status().await.unwrap();
    assert_eq!(host(&status).report_before.as_deref(), Some("op-7"));
    let mut newer = report(None);
    newer.status.observed_at_ms = now_ms() + 1_000; // measured after the step
    gpu.report("gpu", &newer).await.unwrap();
    let status = a.operator.status().await.unwrap();
    assert_eq!(host(&status).report_before, None);
}

async fn joins_and_tokens<S: AuthorityStore + Clone>(store: S) {
    let a = start(store).await;
    let agent = a.agent("studio").await;
    agent.snapshot("studio", 0, Duration::ZERO).await.unwrap();

    // A used token, an expired one, an unknown one, a wrong CA pin: all refused.
    let t = a
        .operator
        .create_token(&TokenRequest {
            host: "gpu".into(),
            ttl_secs: Some(60),
            keep_credentials: false,
        })
        .await
        .unwrap();
    let anon = Client::new(&a.url, &a.ca_pem, None).unwrap();
    let join = |token: &str| JoinRequest {
        token: token.into(),
        agent_version: "test".into(),
        platform: "linux-x86_64".into(),
    };
    anon.join(&join(&t.token)).await.unwrap();
    let e = anon.join(&join(&t.token)).await.unwrap_err();
    assert_eq!(e.status(), Some(401), "{e}");
    assert!(
        matches!(&e, ClientError::Api { error, .. } if error.code == "token-used"),
        "{e}"
    );

    let expired = flotilla_server::auth::new_secret(flotilla_server::auth::JOIN_PREFIX);
    a.store
        .create_join_token(NewJoinToken {
            token_hash: flotilla_server::auth::hash_secret(&expired),
            host: "gpu".into(),
            created_ms: now_ms() - 10_000,
            expires_ms: now_ms() - 1,
            keep_credentials: false,
        })
        .await
        .unwrap();
    let e = anon.join(&join(&expired)).await.unwrap_err();
    assert!(
        matches!(&e, ClientError::Api { error, .. } if error.code == "token-expired"),
        "{e}"
    );
    let e = anon.join(&join("flt-join-nonsense")).await.unwrap_err();
    assert_eq!(e.status(), Some(401));

    let wrong = format!("sha256:{}", "0".repeat(64));
    let e = Client::discover_ca(&a.url, &wrong).await.unwrap_err();
    assert!(matches!(e, ClientError::CaMismatch { .. }), "{e}");
    // A client pinned to another CA cannot even connect.
    let other = tempfile::tempdir().unwrap();
    let other_ca = flotilla_server::tls::init(other.path(), &[]).unwrap();
    let e = Client::new(&a.url, &other_ca.ca_pem, None)
        .unwrap()
        .get_text("/healthz")
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Http { .. }), "{e}");
}

async fn agents_reach_only_their_own_host<S: AuthorityStore + Clone>(store: S) {
    let a = start(store).await;
    let t = topology(FLEET);
    let published = a.publish(&t, None).await.unwrap();
    let studio = a.agent("studio").await;
    let forbidden = |r: Result<_, ClientError>| match r {
        Err(e) => assert_eq!(e.status(), Some(403), "{e}"),
        Ok(_) => panic!("allowed"),
    };
    forbidden(studio.snapshot("gpu", 0, Duration::ZERO).await.map(|_| ()));
    forbidden(studio.report("gpu", &report(None)).await);
    forbidden(studio.revision(&published.revision).await.map(|_| ()));
    forbidden(studio.history().await.map(|_| ()));
    forbidden(studio.status().await.map(|_| ()));
    forbidden(
        studio
            .create_token(&TokenRequest {
                host: "gpu".into(),
                ttl_secs: None,
                keep_credentials: false,
            })
            .await
            .map(|_| ()),
    );
    forbidden(
        studio
            .publish(&PublishRequest {
                topology: serde_json::from_str(&t.revision_json()).unwrap(),
                expect: None,
            })
            .await
            .map(|_| ()),
    );
    forbidden(studio.get_text("/metrics").await.map(|_| ()));
    forbidden(
        studio
            .pending_calls("gpu", 0, Duration::ZERO)
            .await
            .map(|_| ()),
    );
    forbidden(
        studio
            .enqueue_call(
                "studio",
                &flotilla_api::wire::EnqueueRequest {
                    request: serde_json::json!({}),
                    deadline_ms: now_ms() + 60_000,
                },
            )
            .await
            .map(|_| ()),
    );
    // A call queued for gpu: studio's agent neither sees it nor answers it; gpu's does.
    let id = a
        .operator
        .enqueue_call(
            "gpu",
            &flotilla_api::wire::EnqueueRequest {
                request: serde_json::json!({"protocol": 2, "call": "hello"}),
                deadline_ms: now_ms() + 60_000,
            },
        )
        .await
        .unwrap();
    assert!(studio
        .pending_calls("studio", 0, Duration::ZERO)
        .await
        .unwrap()
        .calls
        .is_empty());
    let e = studio
        .reply_call(id, serde_json::json!({"reply": "hello"}))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "another host's call: forbidden: {e}");
    let e = studio
        .reply_call(id + 1000, serde_json::json!({"reply": "hello"}))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "no such call: forbidden too: {e}");
    let gpu = a.agent("gpu").await;
    let waiting = {
        let op = a.operator.clone();
        tokio::spawn(async move { op.call_status(id, Duration::from_secs(120)).await })
    };
    let pending = gpu
        .pending_calls("gpu", 0, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(pending.calls.len(), 1);
    assert_eq!(pending.calls[0].id, id);
    gpu.reply_call(id, serde_json::json!({"reply": "hello"}))
        .await
        .unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the reply woke the waiting caller")
        .unwrap()
        .unwrap();
    assert_eq!(
        answered.response,
        Some(serde_json::json!({"reply": "hello"}))
    );
    let e = gpu
        .reply_call(id, serde_json::json!({"reply": "again"}))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "answered once");
    // No credential at all: 401.
    let anon = Client::new(&a.url, &a.ca_pem, None).unwrap();
    assert_eq!(
        anon.snapshot("studio", 0, Duration::ZERO)
            .await
            .unwrap_err()
            .status(),
        Some(401)
    );
    // Nor does it learn a route's body shape without one.
    assert_eq!(
        anon.report("studio", &report(None))
            .await
            .unwrap_err()
            .status(),
        Some(401)
    );
    // Tokens only for fleet hosts: not `local`.
    let e = a
        .operator
        .create_token(&TokenRequest {
            host: "local".into(),
            ttl_secs: None,
            keep_credentials: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    // Its own: allowed, filtered.
    let s = studio.snapshot("studio", 0, Duration::ZERO).await.unwrap();
    assert_eq!(s.revision.as_deref(), Some(published.revision.as_str()));
    assert_eq!(s.role.as_deref(), Some("component"));
    assert!(
        s.topology.is_none(),
        "a component host never gets the whole revision"
    );
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains("--canary-studio-only"));
    assert!(!text.contains("--gpu-only-flag"), "{text}");
    assert!(!text.contains("gpu-env-canary"), "{text}");
    assert!(
        text.contains("http://127.0.0.1:18081"),
        "the proxy's connection is resolved"
    );
    studio
        .report("studio", &report(s.revision.clone()))
        .await
        .unwrap();
    // A control host gets the whole (secret-free) revision.
    let ops = a.agent("ops").await;
    let s = ops.snapshot("ops", 0, Duration::ZERO).await.unwrap();
    assert_eq!(s.role.as_deref(), Some("control"));
    let whole = serde_json::to_string(&s.topology.unwrap()).unwrap();
    assert!(whole.contains("--gpu-only-flag") && whole.contains("MODEL_KEY"));
    // Status and metrics show the report.
    let st = a.operator.status().await.unwrap();
    let by = |h: &str| st.hosts.iter().find(|x| x.host == h).unwrap().clone();
    assert_eq!(by("studio").observability, "observed");
    assert_eq!(by("gpu").observability, "never-reported");
    let m = a.operator.get_text("/metrics").await.unwrap();
    assert!(m.contains("flotilla_agents_connected 1"), "{m}");
    assert!(
        m.contains(&format!(
            "flotilla_agent_revision{{host=\"studio\",revision=\"{}\"}} 1",
            published.revision
        )),
        "{m}"
    );
    assert!(
        m.contains("flotilla_http_request_duration_seconds_bucket"),
        "{m}"
    );
}

async fn revisions_and_long_poll<S: AuthorityStore + Clone>(store: S) {
    let a = start(store).await;
    let studio = a.agent("studio").await;
    let first = studio.snapshot("studio", 0, Duration::ZERO).await.unwrap();
    assert_eq!(first.index, 0);
    assert!(first.revision.is_none());

    // A poll at the current index waits; a publish wakes it (the wait is long
    // enough that only the wake-up can end it within the test's deadline).
    let waiting = {
        let c = studio.clone();
        tokio::spawn(async move { c.snapshot("studio", 0, Duration::from_secs(290)).await })
    };
    // Wait until the poll is parked (the waiters gauge), then publish: each look is
    // one request to the authority, paced by its own round trip.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = a.operator.get_text("/metrics").await.unwrap();
        if m.contains("flotilla_longpoll_waiters 1") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the poll never parked: {m}"
        );
    }
    let t1 = topology(FLEET);
    let p1 = a.publish(&t1, None).await.unwrap();
    assert!(p1.changed);
    let woke = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the publish woke the poll")
        .unwrap()
        .unwrap();
    assert_eq!(woke.index, p1.selection.index);
    assert_eq!(woke.revision.as_deref(), Some(p1.revision.as_str()));
    assert_eq!(p1.revision, t1.digest());
    // A unique prefix names it; one nothing starts with is said so.
    let hex = &p1.revision["sha256:".len()..];
    assert_eq!(
        a.operator.resolve_revision(&hex[..8]).await.unwrap(),
        p1.revision
    );
    assert_eq!(a.operator.resolve_revision(hex).await.unwrap(), p1.revision);
    let other = if hex.starts_with('0') { "f" } else { "0" };
    assert!(matches!(
        a.operator.resolve_revision(other).await,
        Err(flotilla_api::RevisionPrefixError::NotFound(_))
    ));

    // Same content: same revision, nothing changes.
    let again = a.publish(&t1, None).await.unwrap();
    assert!(!again.changed);
    assert_eq!(again.revision, p1.revision);
    assert_eq!(again.selection.index, p1.selection.index);

    // A new revision; a stale --expect is refused naming the current one.
    let t2 = topology(&FLEET.replace("18080\", \"--canary", "18090\", \"--canary"));
    let p2 = a.publish(&t2, Some(p1.revision.clone())).await.unwrap();
    assert!(p2.changed && p2.selection.index > p1.selection.index);
    let stale = a
        .publish(
            &topology(&FLEET.replace("proxy\"", "proxy2\"")),
            Some(p1.revision.clone()),
        )
        .await
        .unwrap_err();
    match &stale {
        ClientError::Api {
            status: 409, error, ..
        } => {
            assert_eq!(error.current.as_deref(), Some(p2.revision.as_str()))
        }
        other => panic!("{other}"),
    }
    let h = a.operator.history().await.unwrap();
    assert_eq!(h.revisions.len(), 2, "the refused publish stored nothing");
    assert_eq!(h.revisions[0].revision, p2.revision);
    assert!(h.revisions[0].selected);

    // Diff names the component and the change.
    let d = a.operator.diff(&p1.revision, &p2.revision).await.unwrap();
    let model = d
        .changes
        .iter()
        .find(|c| c.name == "model")
        .expect("model changed");
    assert_eq!(model.change, "changed");
    assert!(
        model
            .details
            .iter()
            .any(|l| l.contains("18080") && l.contains("18090")),
        "{:?}",
        model.details
    );

    // Roll back with compare-and-swap.
    let e = a
        .operator
        .select(&SelectRequest {
            revision: p1.revision.clone(),
            expect: Some(p1.revision.clone()),
        })
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409));
    let back = a
        .operator
        .select(&SelectRequest {
            revision: p1.revision.clone(),
            expect: Some(p2.revision.clone()),
        })
        .await
        .unwrap();
    assert!(back.changed && back.selection.index > p2.selection.index);
    let s = studio
        .snapshot("studio", p2.selection.index, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(s.revision.as_deref(), Some(p1.revision.as_str()));
    let unknown = format!("sha256:{}", "a".repeat(64));
    let e = a
        .operator
        .select(&SelectRequest {
            revision: unknown,
            expect: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404));
    // A topology that is not one is refused.
    let e = a
        .operator
        .publish(&PublishRequest {
            topology: serde_json::json!({"components": "nope"}),
            expect: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");

    // A restarted authority (same store) serves the same selection.
    let store = a.store.clone();
    drop(a);
    let b = start(store).await;
    let h = b.operator.history().await.unwrap();
    assert_eq!(h.selections[0].revision, p1.revision);
}

fn rollout_of(dto: flotilla_api::wire::RolloutDto) -> Rollout {
    serde_json::from_value(dto.rollout).unwrap()
}

/// Releases are relayed as signed, blobs checked by digest, rollouts advanced from
/// agents' reports: canary first, approval honoured, the first failure halts.
async fn releases_and_rollouts<S: AuthorityStore + Clone>(store: S) {
    let b = start(store).await;
    b.publish(&topology(FLEET), None).await.unwrap();
    let keys = tempfile::tempdir().unwrap();
    let k = flotilla_release::sign::keygen(keys.path(), "test", false).unwrap();
    let secret = std::fs::read_to_string(&k.secret_path).unwrap();
    let artifact = b"a new agent build".repeat(1000);
    let sha = flotilla_release::artifact::hex(&Sha256::digest(&artifact));
    let manifest = |version: &str| agent_manifest(version, &sha, artifact.len() as u64);
    let text = manifest("2.0.0");
    let sig = flotilla_release::sign::sign(&secret, text.as_bytes(), "test").unwrap();
    let studio = b.agent("studio").await;
    let gpu = b.agent("gpu").await;
    let ops = b.agent("ops").await;

    // Blobs: operators upload (digest checked), agents may only read.
    let e = studio.put_blob(&sha, artifact.clone()).await.unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    let e = b
        .operator
        .put_blob(&"0".repeat(64), artifact.clone())
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    let publish = |manifest: String, signature: String| {
        let op = b.operator.clone();
        async move {
            op.publish_release(&PublishReleaseRequest {
                manifest,
                signature,
            })
            .await
        }
    };
    let e = publish(text.clone(), sig.clone()).await.unwrap_err();
    assert!(e.to_string().contains("was not uploaded"), "{e}");
    assert!(b.operator.put_blob(&sha, artifact.clone()).await.unwrap());
    assert!(!b.operator.put_blob(&sha, artifact.clone()).await.unwrap());
    let e = publish(text.clone(), "not a signature".into())
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    let r = publish(text.clone(), sig.clone()).await.unwrap();
    assert_eq!(
        (r.name.as_str(), r.version.as_str(), r.serial),
        ("flotilla-agent", "2.0.0", 7)
    );
    assert_eq!(r.key_id, k.key_id);
    assert_eq!(r.manifest, text, "relayed byte for byte");
    // Publishing again is a no-op; other bytes under the same version are refused.
    publish(text.clone(), sig.clone()).await.unwrap();
    let other = text.replace("\"serial\": 7", "\"serial\": 8");
    assert_ne!(other, text);
    let other_sig = flotilla_release::sign::sign(&secret, other.as_bytes(), "test").unwrap();
    let e = publish(other, other_sig).await.unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    assert_eq!(b.operator.releases().await.unwrap().len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("artifact");
    let n = gpu
        .download_blob(&sha, &dest, artifact.len() as u64)
        .await
        .unwrap();
    assert_eq!(n, artifact.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), artifact);
    // A blob longer than the caller expects (a manifest's size): reading stops past
    // the limit and nothing beyond it is written.
    let limit = artifact.len() as u64 / 2;
    let n = gpu.download_blob(&sha, &dest, limit).await.unwrap();
    assert!(n > limit, "{n} bytes received for a limit of {limit}");
    assert!(std::fs::metadata(&dest).unwrap().len() <= limit);

    // Agents say what they run when they start (their platform comes from there).
    for (host, agent) in [("studio", &studio), ("gpu", &gpu), ("ops", &ops)] {
        let mut u = update(host, &"1".repeat(64), UpdateState::Updated, None);
        u.update = None;
        agent.report_update(host, &u).await.unwrap();
    }
    // Two agents on one credential (one host) report alternately: the status says so.
    for pid in [4242, 5555, 4242] {
        let mut u = update("ops", &"1".repeat(64), UpdateState::Updated, None);
        u.update = None;
        u.pid = Some(pid);
        ops.report_update("ops", &u).await.unwrap();
    }
    let st = b.operator.status().await.unwrap();
    let conflict = |st: &flotilla_api::wire::FleetStatus, host: &str| {
        st.hosts
            .iter()
            .find(|h| h.host == host)
            .and_then(|h| h.agent_identity.as_ref())
            .and_then(|a| a.conflict.clone())
    };
    let c = conflict(&st, "ops").expect("two agents for ops are seen");
    assert!(c.contains("pids 4242 and 5555"), "{c}");
    assert_eq!(conflict(&st, "gpu"), None);
    // A rollout waits for approval; its host set is frozen in name order.
    let create = CreateRolloutRequest {
        name: "flotilla-agent".into(),
        version: "2.0.0".into(),
        selector: Default::default(),
        max_in_flight: 2,
        canary: 1,
        min_healthy_ms: 0,
        timeout_ms: 600_000,
    };
    let e = b
        .operator
        .create_rollout(&CreateRolloutRequest {
            version: "9.9.9".into(),
            ..create.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");
    let r = rollout_of(b.operator.create_rollout(&create).await.unwrap());
    assert_eq!(r.phase, Phase::AwaitingApproval);
    let hosts: Vec<_> = r
        .hosts
        .iter()
        .map(|h| (h.host.as_str(), h.canary))
        .collect();
    assert_eq!(hosts, [("gpu", true), ("ops", false), ("studio", false)]);
    let measured = format!("sha256:{}", "1".repeat(64));
    assert!(
        r.hosts
            .iter()
            .all(|h| h.running_sha256.as_deref() == Some(measured.as_str())),
        "what each host runs is shown from the start: {r:#?}"
    );
    let e = b.operator.create_rollout(&create).await.unwrap_err();
    assert_eq!(
        e.status(),
        Some(409),
        "one active rollout per release name: {e}"
    );
    let first = gpu
        .release_assignment("gpu", 0, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(first.assignment, None, "nothing before approval");
    let e = studio
        .release_assignment("gpu", 0, Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    let e = studio
        .report_update("gpu", &update("gpu", &sha, UpdateState::Updated, None))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");

    // The canary's long poll is woken by the approval.
    let poll = {
        let gpu = gpu.clone();
        let index = first.index;
        tokio::spawn(async move {
            gpu.release_assignment("gpu", index, Duration::from_secs(60))
                .await
        })
    };
    b.operator.rollout_action(r.id, "approve").await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(30), poll)
        .await
        .expect("the approval wakes the canary's poll")
        .unwrap()
        .unwrap();
    let a = woken
        .assignment
        .expect("the canary is assigned the release");
    assert_eq!(
        (a.rollout, a.manifest.as_str(), a.signature.as_str()),
        (r.id, text.as_str(), sig.as_str())
    );
    assert_eq!(
        studio
            .release_assignment("studio", 0, Duration::ZERO)
            .await
            .unwrap()
            .assignment,
        None,
        "the others wait for the canary"
    );
    let e = b
        .operator
        .rollout_action(r.id, "approve")
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");

    // The canary proves the new identity: the rest start, two at a time.
    gpu.report_update("gpu", &update("gpu", &sha, UpdateState::Updated, None))
        .await
        .unwrap();
    let r = rollout_of(b.operator.rollout(r.id).await.unwrap());
    let phases: Vec<_> = r.hosts.iter().map(|h| h.phase).collect();
    assert_eq!(
        phases,
        [HostPhase::Updated, HostPhase::Updating, HostPhase::Updating],
        "{r:#?}"
    );
    assert!(studio
        .release_assignment("studio", 0, Duration::ZERO)
        .await
        .unwrap()
        .assignment
        .is_some());

    // The first rollback halts the rollout.
    ops.report_update(
        "ops",
        &update(
            "ops",
            &sha,
            UpdateState::RolledBack,
            Some(Reason::CrashLoop),
        ),
    )
    .await
    .unwrap();
    let r = rollout_of(b.operator.rollout(r.id).await.unwrap());
    assert_eq!(r.phase, Phase::Failed, "{r:#?}");
    assert!(r.halted.is_some(), "{r:#?}");
    assert_eq!(r.hosts[1].phase, HostPhase::RolledBack);
    assert_eq!(r.hosts[1].reason, Some(Reason::CrashLoop));
    let e = b.operator.rollout_action(r.id, "resume").await.unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    let listed = b.operator.rollouts().await.unwrap();
    assert_eq!(listed.rollouts.len(), 1);
    // A finished rollout leaves room for the next one.
    let again = rollout_of(b.operator.create_rollout(&create).await.unwrap());
    assert_ne!(again.id, r.id);
    assert_eq!(again.phase, Phase::AwaitingApproval);
}

fn skip(name: &str, version: &str, sha: &str) -> SkipEntry {
    SkipEntry {
        name: name.into(),
        version: version.into(),
        sha256: sha.into(),
        reason: Reason::CrashLoop,
        at_ms: now_ms(),
    }
}

/// What `host`'s agent says of its skip lists and of unskip requests.
fn skip_report(host: &str, skipped: Vec<SkipEntry>, unskipped: Vec<UnskipOutcome>) -> HostUpdate {
    let mut u = update(host, &"1".repeat(64), UpdateState::Updated, None);
    u.update = None;
    u.skipped = skipped;
    u.unskipped = unskipped;
    u
}

/// Unskip requests: operators only; an unknown host, a host that is not an agent
/// host, a bad version and a component release the host does not run are refused. A
/// request wakes the host's release poll, which carries it until a report of that
/// host's agent shows it carried out and the entry gone; then it is done (a waiting
/// `GET /v1/unskips/{id}` answers) and no longer sent. An agent's error is kept on it.
/// A pending request survives a restart of the authority.
async fn unskips<S: AuthorityStore + Clone>(store: S) {
    let fleet = format!("{FLEET}\n[hosts.box]\ntransport = \"ssh\"\n");
    let b = start(store).await;
    b.publish(&topology(&fleet), None).await.unwrap();
    let studio = b.agent("studio").await;
    let gpu = b.agent("gpu").await;
    let bad = skip("flotilla-agent", "2.0.0", &"a".repeat(64));
    let other = skip("flotilla-agent", "2.1.0", &"b".repeat(64));
    studio
        .report_update(
            "studio",
            &skip_report("studio", vec![bad.clone(), other.clone()], vec![]),
        )
        .await
        .unwrap();
    let st = b.operator.status().await.unwrap();
    let shown = st
        .hosts
        .iter()
        .find(|h| h.host == "studio")
        .and_then(|h| h.agent_identity.as_ref())
        .map(|a| a.skipped.clone());
    assert_eq!(
        shown,
        Some(vec![bad.clone(), other.clone()]),
        "the status shows what a host refuses"
    );

    let ask = |host: &str, name: &str, version: &str| {
        let op = b.operator.clone();
        let (host, req) = (
            host.to_string(),
            CreateUnskipRequest {
                name: name.into(),
                version: version.into(),
            },
        );
        async move { op.request_unskip(&host, &req).await }
    };
    // Refusals.
    let e = studio
        .request_unskip(
            "studio",
            &CreateUnskipRequest {
                name: "flotilla-agent".into(),
                version: "2.0.0".into(),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "operators only: {e}");
    let e = ask("nowhere", "flotilla-agent", "2.0.0").await.unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");
    assert!(e.to_string().contains("no host `nowhere`"), "{e}");
    let e = ask("box", "flotilla-agent", "2.0.0").await.unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    assert!(e.to_string().contains("not an agent host"), "{e}");
    let e = ask("studio", "flotilla-agent", "../2.0.0")
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    let e = ask("studio", "llama-server", "2.0.0").await.unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    assert!(
        e.to_string().contains("declares release `llama-server`"),
        "{e}"
    );

    // A request wakes the host's release poll and rides every answer.
    let first = studio
        .release_assignment("studio", 0, Duration::ZERO)
        .await
        .unwrap();
    assert!(first.unskip.is_empty());
    let poll = {
        let studio = studio.clone();
        let index = first.index;
        tokio::spawn(async move {
            studio
                .release_assignment("studio", index, Duration::from_secs(60))
                .await
        })
    };
    let u = ask("studio", "flotilla-agent", "2.0.0").await.unwrap();
    assert_eq!(u.state, UnskipState::Pending);
    assert_eq!(
        (u.host.as_str(), u.requested_by.as_str()),
        ("studio", "tester")
    );
    assert_eq!(
        u.found,
        vec![bad.clone()],
        "what the host's last report showed"
    );
    let woken = tokio::time::timeout(Duration::from_secs(30), poll)
        .await
        .expect("the request wakes the host's poll")
        .unwrap()
        .unwrap();
    let sent = vec![UnskipRequest {
        id: u.id,
        name: "flotilla-agent".into(),
        version: "2.0.0".into(),
    }];
    assert_eq!(woken.unskip, sent);
    let e = gpu
        .release_assignment("studio", 0, Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    assert!(gpu
        .release_assignment("gpu", 0, Duration::ZERO)
        .await
        .unwrap()
        .unskip
        .is_empty());
    // Asked again: the same request.
    assert_eq!(
        ask("studio", "flotilla-agent", "2.0.0").await.unwrap().id,
        u.id
    );
    assert_eq!(
        b.operator.unskip(u.id, Duration::ZERO).await.unwrap().state,
        UnskipState::Pending
    );
    let e = b
        .operator
        .unskip(u.id + 100, Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");

    // Done only by a report with the outcome and without the entry.
    let waiter = {
        let op = b.operator.clone();
        tokio::spawn(async move { op.unskip(u.id, Duration::from_secs(60)).await })
    };
    let outcome = UnskipOutcome {
        id: u.id,
        name: "flotilla-agent".into(),
        version: "2.0.0".into(),
        cleared: vec![bad.clone()],
        error: None,
    };
    // A report made before the agent heard of it: no outcome, the entry still there.
    studio
        .report_update(
            "studio",
            &skip_report("studio", vec![bad.clone(), other.clone()], vec![]),
        )
        .await
        .unwrap();
    studio
        .report_update(
            "studio",
            &skip_report("studio", vec![other.clone()], vec![outcome.clone()]),
        )
        .await
        .unwrap();
    let done = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the report wakes the waiter")
        .unwrap()
        .unwrap();
    assert_eq!(done.state, UnskipState::Done, "{done:#?}");
    assert_eq!(done.cleared, vec![bad.clone()]);
    assert!(done.done_ms.is_some());
    assert!(
        studio
            .release_assignment("studio", 0, Duration::ZERO)
            .await
            .unwrap()
            .unskip
            .is_empty(),
        "no longer sent once done"
    );
    // Asking again makes a new request; its version is no longer in the host's list.
    let again = ask("studio", "flotilla-agent", "2.0.0").await.unwrap();
    assert_ne!(again.id, u.id);
    assert!(again.found.is_empty());

    // An agent that cannot change its list: the error is kept, the request pending.
    let failing = ask("studio", "flotilla-agent", "2.1.0").await.unwrap();
    studio
        .report_update(
            "studio",
            &skip_report(
                "studio",
                vec![other.clone()],
                vec![UnskipOutcome {
                    id: failing.id,
                    name: "flotilla-agent".into(),
                    version: "2.1.0".into(),
                    cleared: vec![],
                    error: Some("skip.json: Permission denied".into()),
                }],
            ),
        )
        .await
        .unwrap();
    let f = b
        .operator
        .unskip(failing.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(f.state, UnskipState::Pending);
    assert_eq!(f.error.as_deref(), Some("skip.json: Permission denied"));
    let e = b
        .operator
        .unskip_and_wait(
            "studio",
            "flotilla-agent",
            "2.1.0",
            Some(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, flotilla_api::UnskipError::NotConfirmed { unskip, .. } if unskip.id == failing.id && unskip.error.is_none()),
        "asked again, the old error is forgotten and the agent's next outcome awaited: {e}"
    );

    // Pending requests survive a restart of the authority.
    let store = b.store.clone();
    drop(b);
    let c = start(store).await;
    let studio = c.agent("studio").await;
    let sent = studio
        .release_assignment("studio", 0, Duration::ZERO)
        .await
        .unwrap()
        .unskip;
    let ids: Vec<u64> = sent.iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![again.id, failing.id]);
    assert_eq!(
        c.operator.unskip(u.id, Duration::ZERO).await.unwrap().state,
        UnskipState::Done,
        "a done request is read from the store"
    );
}

/// The next SSE event of `resp` (its `event:` and `id:` lines, and its data), within
/// a deadline.
async fn next_event(resp: &mut reqwest::Response, buf: &mut String) -> (String, String, String) {
    loop {
        if let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .filter_map(|l| l.strip_prefix(name))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if block.lines().all(|l| l.starts_with(':') || l.is_empty()) {
                continue;
            }
            return (field("event: "), field("id: "), field("data: "));
        }
        let chunk = tokio::time::timeout(Duration::from_secs(20), resp.chunk())
            .await
            .expect("an event within 20 s")
            .unwrap()
            .expect("the stream goes on");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

async fn dashboard_event_streams_send_changed_fragments_and_resume<S: AuthorityStore + Clone>(
    store: S,
) {
    let a = start(store).await;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(flotilla_api::tls::client_config(&a.ca_pem).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let stream = format!("{}/ui/events?view=overview", a.url);
    // Without a session: 401, and a page is sent to the sign-in form.
    let r = http
        .get(&stream)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http.get(format!("{}/ui/", a.url)).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/ui/login?next=%2Fui%2F");
    // Signing in sets the session cookie.
    let r = http
        .post(format!("{}/ui/login", a.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "credential={}&next=%2Fui%2F",
            a.operator_credential
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    for part in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(part), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_string();
    // Pages and assets come gzip-compressed to a client that accepts it.
    let htmx = &flotilla_server::ui::assets::ASSETS.htmx.path;
    for page in ["/ui/", htmx.as_str()] {
        let r = http
            .get(format!("{}{page}", a.url))
            .header("cookie", &cookie)
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{page}");
        assert_eq!(r.headers()["content-encoding"], "gzip", "{page}");
        let body = r.bytes().await.unwrap();
        assert_eq!(body[..2], [0x1f, 0x8b], "{page}: a gzip member");
    }
    // A first connection without `since`: every fragment, with an id; never
    // compressed (an encoder would hold events back).
    let mut s = http
        .get(&stream)
        .header("cookie", &cookie)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(s.status(), 200);
    assert!(s.headers().get("content-encoding").is_none());
    assert_eq!(s.headers()["x-accel-buffering"], "no");
    assert_eq!(s.headers()["cache-control"], "no-cache");
    let mut buf = String::new();
    let (event, first, data) = next_event(&mut s, &mut buf).await;
    assert_eq!(event, "overview");
    assert!(data.contains("data-count=\"hosts\">0<"), "{data}");
    // An agent's report: with the table's layout unchanged, only the parts that
    // changed (the counts, the hosts without components), out of band, with a later id.
    let gpu = a.agent("gpu").await;
    gpu.report("gpu", &report(None)).await.unwrap();
    let (event, second, data) = loop {
        let e = next_event(&mut s, &mut buf).await;
        if e.2.contains("data-count=\"hosts\">1<") {
            break e;
        }
    };
    assert_eq!(event, "overview-parts");
    assert_ne!(first, second);
    assert!(data.contains("/ui/hosts/gpu"), "{data}");
    assert!(
        data.contains("<ul hx-swap-oob=\"true\" class=\"counts\" id=\"ov-counts\"")
            && !data.contains("ov-selection"),
        "only what changed, each replacing its element by id: {data}"
    );
    // Reconnecting with an older Last-Event-ID (or another process's): what changed
    // since, at once.
    for last in [first.as_str(), "1-1"] {
        let mut again = http
            .get(&stream)
            .header("cookie", &cookie)
            .header("last-event-id", last)
            .send()
            .await
            .unwrap();
        let mut b = String::new();
        let (event, _, data) = next_event(&mut again, &mut b).await;
        assert_eq!(event, "overview");
        assert!(data.contains("/ui/hosts/gpu"), "{data}");
    }
    // An unknown view: 404.
    let r = http
        .get(format!("{}/ui/events?view=nope", a.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// Signs in to the dashboard with the operator credential: the session cookie.
async fn dashboard_cookie<S: AuthorityStore + Clone>(a: &Running<S>) -> String {
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(flotilla_api::tls::client_config(&a.ca_pem).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http
        .post(format!("{}/ui/login", a.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "credential={}&next=%2Fui%2F",
            a.operator_credential
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r.headers()["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_string()
}

/// A client of `/ui/events?view=overview` over HTTP/1.1 that reads the answer's
/// head and then nothing, on a socket whose receive buffer is as small as the
/// kernel allows (set before connecting, so the TCP window stays small).
async fn unread_stream(
    url: &str,
    ca_pem: &str,
    cookie: &str,
) -> rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = url.trim_start_matches("https://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    let tcp = socket.connect(addr).await.unwrap().into_std().unwrap();
    tcp.set_nonblocking(false).unwrap();
    let (ca_pem, cookie) = (ca_pem.to_owned(), cookie.to_owned());
    tokio::task::spawn_blocking(move || {
    let conn = rustls::ClientConnection::new(
        std::sync::Arc::new(flotilla_api::tls::client_config(&ca_pem).unwrap()),
        "127.0.0.1".try_into().unwrap(),
    )
    .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET /ui/events?view=overview HTTP/1.1\r\nhost: {addr}\r\ncookie: {cookie}\r\naccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tls
    })
    .await
    .unwrap()
}

async fn a_dashboard_stream_that_is_not_read_is_dropped<S: AuthorityStore + Clone>(store: S) {
    let (mut open, mut dropped) = (None, None);
    let a = start_with(
        store,
        Duration::from_secs(45),
        "https://127.0.0.1:7443",
        |s| {
            open = Some(s.metrics.ui_streams.clone());
            dropped = Some(s.metrics.ui_streams_dropped.clone());
        },
    )
    .await;
    let (open, dropped) = (open.unwrap(), dropped.unwrap());
    let cookie = dashboard_cookie(&a).await;
    let client = unread_stream(&a.url, &a.ca_pem, &cookie).await;
    assert!(
        flotilla_testkit::wait_until_async(Duration::from_secs(10), || async { open.get() == 1 })
            .await,
        "the stream is open"
    );
    // The fleet changes, again and again, each time so that the whole overview is
    // sent (another set of components: another layout), while the client reads
    // nothing: its stream is dropped once the kernel's buffers and the stream's own
    // (32 events) are full, instead of the authority holding what it cannot send.
    let agent = a.agent("gpu").await;
    let mut round = 0u32;
    let gone = flotilla_testkit::wait_until_async(Duration::from_secs(120), || {
        round += 1;
        let mut r = report(None);
        r.status.components = (0..400)
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "name": format!("r{round}-component-{i:03}"), "host": "gpu",
                    "lifecycle": "running", "desired": "running", "health": "healthy",
                    "condition": "ok", "observability": "observed",
                    "ownership": "managed (process)", "started_by": "nobody",
                    "config_identity": { "selected": "0".repeat(64), "running": null },
                    "runtime_identity": null, "evidence": [],
                }))
                .unwrap()
            })
            .collect();
        let (agent, open) = (&agent, &open);
        async move {
            agent.report("gpu", &r).await.unwrap();
            open.get() == 0
        }
    })
    .await;
    assert!(
        gone,
        "a stream never read is still open after {round} changes"
    );
    assert_eq!(dropped.get(), 1);
    drop(client);
}

async fn a_flood_of_sign_in_attempts_is_refused_with_a_time_to_wait<S: AuthorityStore + Clone>(
    store: S,
) {
    let a = start(store).await;
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(flotilla_api::tls::client_config(&a.ca_pem).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let attempt = |credential: String| {
        http.post(format!("{}/ui/login", a.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("credential={credential}&next=%2Fui%2F"))
            .send()
    };
    // Wrong credentials, as fast as they come: refused, then limited (the burst is
    // ratelimit::BURST attempts per address).
    let mut statuses = Vec::new();
    for i in 0..15 {
        statuses.push(
            attempt(format!("flt-op-wrong-{i}"))
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    let first_limited = statuses.iter().position(|s| *s == 429);
    assert_eq!(first_limited, Some(10), "{statuses:?}");
    assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
    // Even the right credential waits its turn, told how long and why.
    let r = attempt(a.operator_credential.clone()).await.unwrap();
    assert_eq!(r.status(), 429);
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=6).contains(&wait), "{wait}");
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("Too many sign-in attempts from this address"));
}

both!(joins_and_tokens);
both!(a_report_from_before_an_operation_says_so);
both!(agents_reach_only_their_own_host);
both!(revisions_and_long_poll);
both!(releases_and_rollouts);
both!(unskips);
both!(dashboard_event_streams_send_changed_fragments_and_resume);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sign_in_attempts_is_refused_with_a_time_to_wait_sqlite() {
    let (s, _d) = sqlite();
    a_flood_of_sign_in_attempts_is_refused_with_a_time_to_wait(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_stream_that_is_not_read_is_dropped_sqlite() {
    let (s, _d) = sqlite();
    a_dashboard_stream_that_is_not_read_is_dropped(s).await;
}

#[test]
fn the_committed_openapi_document_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let now = flotilla_server::openapi::document();
    assert!(
        committed == now,
        "{} is out of date: run scripts/update-schemas",
        path.display()
    );
}

/// A figure of the authority's `/metrics` (0 when absent).
async fn metric<S: AuthorityStore + Clone>(a: &Running<S>, name: &str) -> i64 {
    let text = a.operator.get_text("/metrics").await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap() as i64)
}

/// Reports that arrive while a commit runs are stored together by the next one
/// (group commit): held back by a lock on the reports' table, 40 agents' reports
/// queue, and once it is released they take at most two transactions, every
/// agent's request answered only once its report is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_arriving_together_are_stored_in_one_transaction() {
    let admin = flotilla_store::authority::testing::admin_url();
    let db = flotilla_store::authority::testing::create_database(&admin)
        .await
        .unwrap();
    let store = PostgresAuthority::connect(&db.url).await.unwrap();
    let a = start(store.clone()).await;
    const N: usize = 40;
    let mut agents = Vec::new();
    for i in 0..N {
        let host = format!("h{i:02}");
        agents.push((host.clone(), a.agent(&host).await));
    }
    let lock = flotilla_store::authority::testing::lock_table(&db.url, "host_reports")
        .await
        .unwrap();
    let mut sent = tokio::task::JoinSet::new();
    for (host, agent) in agents {
        sent.spawn(async move { agent.report(&host, &report(None)).await });
    }
    let queued = flotilla_testkit::wait_until_async(Duration::from_secs(30), || async {
        metric(&a, "flotilla_reports_waiting").await == N as i64
    })
    .await;
    assert!(
        queued,
        "{} reports waiting",
        metric(&a, "flotilla_reports_waiting").await
    );
    assert!(store.reports().await.unwrap().is_empty());
    assert!(
        sent.try_join_next().is_none(),
        "a report was answered before it was stored"
    );
    lock.release().await.unwrap();
    while let Some(r) = sent.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(store.reports().await.unwrap().len(), N);
    assert_eq!(
        metric(&a, "flotilla_reports_committed_total").await,
        N as i64
    );
    let commits = metric(&a, "flotilla_report_commits_total").await;
    assert!(
        (1..=2).contains(&commits),
        "{commits} transactions for {N} reports"
    );
    assert_eq!(metric(&a, "flotilla_reports_waiting").await, 0);
}
