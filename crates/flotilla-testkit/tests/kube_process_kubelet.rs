//! The fake Kubernetes API's process kubelet (`FakeKube::run_pods`): bare pods run
//! as real processes through bwrap, driven with kube-rs as a client would: exit codes
//! and merged logs, init containers and emptyDir, Secret and PVC volumes, users,
//! termination messages, followed logs, graceful and forced deletion, and no process
//! left behind.

use std::time::Duration;

use flotilla_testkit::{wait_until, wait_until_async, FakeKube};
use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams, LogParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};
use tempfile::TempDir;

const WAIT: Duration = Duration::from_secs(20);

struct Env {
    fake: FakeKube,
    dir: TempDir,
    pods: Api<Pod>,
    client: Client,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeKube::start();
    fake.run_pods(&dir.path().join("data")).unwrap();
    let path = dir.path().join("kubeconfig");
    fake.write_kubeconfig(&path, "fake", Some("default"))
        .unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let opts = KubeConfigOptions {
        context: Some("fake".into()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kc, &opts).await.unwrap();
    let client = Client::try_from(config).unwrap();
    Env {
        fake,
        dir,
        pods: Api::default_namespaced(client.clone()),
        client,
    }
}

/// A bare pod, `restartPolicy: Never`, with `spec` merged over its defaults.
fn pod(name: &str, spec: Value) -> Pod {
    let mut s = json!({"restartPolicy": "Never", "terminationGracePeriodSeconds": 30});
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name}, "spec": s,
    }))
    .unwrap()
}

/// One container `main` running `sh -c script`.
fn sh(name: &str, script: &str) -> Pod {
    pod(
        name,
        json!({"containers": [{"name": "main", "image": "busybox", "command": ["/bin/sh", "-c", script]}]}),
    )
}

async fn create(e: &Env, p: &Pod) -> Pod {
    e.pods.create(&PostParams::default(), p).await.unwrap()
}

/// Why the pod's first container waits, if it does.
fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Waits until the pod's phase is one of `phases`; the pod then.
async fn wait_phase(e: &Env, name: &str, phases: &[&str]) -> Pod {
    let ok = wait_until_async(WAIT, || async {
        match e.pods.get(name).await {
            Ok(p) => phases.contains(&phase(&p).as_str()),
            Err(_) => false,
        }
    })
    .await;
    let p = e.pods.get(name).await.expect("the pod exists");
    assert!(ok, "{name} reached none of {phases:?}: {:#?}", p.status);
    p
}

async fn logs(e: &Env, name: &str, container: Option<&str>) -> String {
    let lp = LogParams {
        container: container.map(str::to_string),
        ..Default::default()
    };
    e.pods.logs(name, &lp).await.unwrap()
}

fn main_status(p: &Pod) -> Value {
    serde_json::to_value(p.status.as_ref().unwrap()).unwrap()["containerStatuses"][0].clone()
}

/// Whether a process whose command line holds `marker` is alive.
fn running_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            return false;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmd).contains(marker) && flotilla_testkit::alive(pid)
    })
}

/// A `sleep` argument no other process has: `1000.<digits>`.
fn marker() -> String {
    let n = uuid_digits();
    format!("1000.{n}")
}

fn uuid_digits() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{}{t}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_pod_ends_failed_with_its_exit_code_and_both_streams_in_its_log() {
    let e = env().await;
    let created = create(&e, &sh("fails", "echo out; echo err >&2; exit 3")).await;
    let p = wait_phase(&e, "fails", &["Failed"]).await;
    assert_eq!(p.metadata.uid, created.metadata.uid);
    let st = main_status(&p);
    assert_eq!(st["state"]["terminated"]["exitCode"], 3, "{st}");
    assert_eq!(st["state"]["terminated"]["reason"], "Error");
    assert!(st["state"]["terminated"]["finishedAt"].is_string());
    assert!(st["containerID"].is_string());
    let status = p.status.as_ref().unwrap();
    assert_eq!(status.pod_ip.as_deref(), Some("127.0.0.1"));
    assert!(status.start_time.is_some());
    let log = logs(&e, "fails", None).await;
    assert!(log.contains("out\n") && log.contains("err\n"), "{log:?}");
    assert_eq!(
        e.pods
            .logs(
                "fails",
                &LogParams {
                    tail_lines: Some(1),
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .lines()
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_container_fills_an_empty_dir_the_container_reads() {
    let e = env().await;
    let p = pod(
        "init",
        json!({
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [{"name": "fill", "image": "busybox",
                "command": ["/bin/sh", "-c", "echo hello > /shared/data"],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
            "containers": [{"name": "main", "image": "busybox",
                "command": ["/bin/cat", "/shared/data"],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
        }),
    );
    create(&e, &p).await;
    let p = wait_phase(&e, "init", &["Succeeded", "Failed"]).await;
    assert_eq!(phase(&p), "Succeeded", "{:#?}", p.status);
    let status = serde_json::to_value(p.status.unwrap()).unwrap();
    assert_eq!(
        status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(logs(&e, "init", Some("main")).await, "hello\n");
    assert_eq!(logs(&e, "init", None).await, "hello\n");

    // A failing init container fails the pod; the container never starts.
    let bad = pod(
        "bad-init",
        json!({
            "initContainers": [{"name": "fill", "image": "busybox", "command": ["/bin/sh", "-c", "echo no; exit 4"]}],
            "containers": [{"name": "main", "image": "busybox", "command": ["/bin/true"]}],
        }),
    );
    create(&e, &bad).await;
    let p = wait_phase(&e, "bad-init", &["Failed"]).await;
    let status = serde_json::to_value(p.status.unwrap()).unwrap();
    let init = &status["initContainerStatuses"][0]["state"]["terminated"];
    assert_eq!(init["exitCode"], 4);
    assert_eq!(init["reason"], "Error");
    assert_eq!(
        status["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let err = e
        .pods
        .logs(
            "bad-init",
            &LogParams {
                container: Some("main".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "container \"main\" in pod \"bad-init\" is waiting to start: PodInitializing"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_mounted_read_only_once_it_exists() {
    let e = env().await;
    let p = pod(
        "secret",
        json!({
            "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}],
            "containers": [{"name": "main", "image": "busybox",
                "command": ["/bin/sh", "-c", "cat /etc/creds/token; echo; cat /etc/creds/plain; echo; if echo x > /etc/creds/token; then echo WRITABLE; else echo READONLY; fi"],
                "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]}],
        }),
    );
    create(&e, &p).await;
    // Without its Secret the pod waits, creating its container.
    let ok = wait_until_async(WAIT, || async {
        let p = e.pods.get("secret").await.unwrap();
        waiting_reason(&p).as_deref() == Some("ContainerCreating")
    })
    .await;
    assert!(ok, "the pod waits for its Secret");
    assert_eq!(phase(&e.pods.get("secret").await.unwrap()), "Pending");
    let secrets: Api<Secret> = Api::default_namespaced(e.client.clone());
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
        "data": {"token": "czNjcmV0"}, "stringData": {"plain": "text"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let p = wait_phase(&e, "secret", &["Succeeded", "Failed"]).await;
    let log = logs(&e, "secret", None).await;
    assert!(log.starts_with("s3cret\ntext\n"), "{log:?}");
    assert!(log.contains("READONLY"), "{log:?}");
    assert!(!log.contains("WRITABLE"), "{log:?}");
    assert_eq!(phase(&p), "Succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_keeps_its_data_across_pods_until_it_is_deleted() {
    let e = env().await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(e.client.clone());
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "home"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let bound = wait_until_async(WAIT, || async {
        claims
            .get("home")
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase)
            == Some("Bound".into())
    })
    .await;
    assert!(bound, "the claim is bound");
    let with_claim = |name: &str, script: &str| {
        pod(
            name,
            json!({
                "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}],
                "containers": [{"name": "main", "image": "busybox",
                    "command": ["/bin/sh", "-c", script],
                    "volumeMounts": [
                        {"name": "home", "mountPath": "/home/agent"},
                        {"name": "home", "mountPath": "/tree", "subPath": "src/tree"},
                    ]}],
            }),
        )
    };
    create(
        &e,
        &with_claim("first", "echo kept > /home/agent/note; echo t > /tree/f"),
    )
    .await;
    assert_eq!(
        phase(&wait_phase(&e, "first", &["Succeeded", "Failed"]).await),
        "Succeeded"
    );
    create(
        &e,
        &with_claim("second", "cat /home/agent/note /home/agent/src/tree/f"),
    )
    .await;
    wait_phase(&e, "second", &["Succeeded", "Failed"]).await;
    assert_eq!(logs(&e, "second", None).await, "kept\nt\n");
    let dir = e.dir.path().join("data/pvc/default/home");
    assert!(dir.join("note").is_file());
    claims
        .delete("home", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        wait_until(WAIT, || !dir.exists()),
        "the claim's directory is removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_as_its_user_with_its_fs_group_and_refuses_root_when_told() {
    let e = env().await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(e.client.clone());
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let p = pod(
        "user",
        json!({
            "securityContext": {"runAsUser": 12345, "runAsGroup": 12345, "fsGroup": 12345, "runAsNonRoot": true},
            "volumes": [{"name": "scratch", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [{"name": "main", "image": "busybox",
                "command": ["/bin/sh", "-c", "id -u; echo a > /scratch/f && echo wrote-scratch; echo b > /data/f && echo wrote-data; printf me > /dev/termination-log"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}, {"name": "data", "mountPath": "/data"}]}],
        }),
    );
    create(&e, &p).await;
    let p = wait_phase(&e, "user", &["Succeeded", "Failed"]).await;
    let log = logs(&e, "user", None).await;
    assert_eq!(log, "12345\nwrote-scratch\nwrote-data\n");
    assert_eq!(phase(&p), "Succeeded");
    assert_eq!(main_status(&p)["state"]["terminated"]["message"], "me");
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::metadata(e.dir.path().join("data/pvc/default/data/f")).unwrap();
    assert_eq!(f.uid(), 12345);

    // runAsNonRoot without a user: the container does not start.
    let root = pod(
        "root",
        json!({
            "securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "main", "image": "busybox", "command": ["/bin/true"]}],
        }),
    );
    create(&e, &root).await;
    let ok = wait_until_async(WAIT, || async {
        let p = e.pods.get("root").await.unwrap();
        waiting_reason(&p).as_deref() == Some("CreateContainerConfigError")
    })
    .await;
    assert!(ok, "runAsNonRoot refuses root");
    assert_eq!(phase(&e.pods.get("root").await.unwrap()), "Pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_termination_message_comes_from_its_file_or_the_log_on_error() {
    let e = env().await;
    create(
        &e,
        &sh("message", "printf 'all done' > /dev/termination-log"),
    )
    .await;
    let p = wait_phase(&e, "message", &["Succeeded", "Failed"]).await;
    let t = &main_status(&p)["state"]["terminated"];
    assert_eq!(t["message"], "all done");
    assert_eq!(t["reason"], "Completed");
    let mut fallback = sh("fallback", "echo first; echo oops; exit 2");
    let c = &mut fallback.spec.as_mut().unwrap().containers[0];
    c.termination_message_policy = Some("FallbackToLogsOnError".into());
    create(&e, &fallback).await;
    let p = wait_phase(&e, "fallback", &["Failed"]).await;
    assert_eq!(
        main_status(&p)["state"]["terminated"]["message"],
        "first\noops\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_streams_lines_as_they_are_written_and_ends_with_the_container() {
    let e = env().await;
    let gate = e.dir.path().join("gate");
    std::fs::create_dir(&gate).unwrap();
    let p = pod(
        "follow",
        json!({
            "volumes": [{"name": "gate", "hostPath": {"path": gate.display().to_string()}}],
            "containers": [
                {"name": "main", "image": "busybox",
                 "command": ["/bin/sh", "-c", "echo first; while [ ! -e /gate/go ]; do sleep 0.05; done; echo second"],
                 "volumeMounts": [{"name": "gate", "mountPath": "/gate"}]},
                {"name": "side", "image": "busybox", "command": ["/bin/true"]},
            ],
        }),
    );
    create(&e, &p).await;
    wait_phase(&e, "follow", &["Running"]).await;
    // Two containers: the name is required.
    let err = e
        .pods
        .logs("follow", &LogParams::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "a container name must be specified for pod follow, choose one of: [main side]"
        ),
        "{err}"
    );
    let stream = e
        .pods
        .log_stream(
            "follow",
            &LogParams {
                container: Some("main".into()),
                follow: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut lines = stream.lines();
    let first = tokio::time::timeout(WAIT, lines.next()).await.unwrap();
    assert_eq!(first.unwrap().unwrap(), "first");
    std::fs::write(gate.join("go"), b"").unwrap();
    let second = tokio::time::timeout(WAIT, lines.next()).await.unwrap();
    assert_eq!(second.unwrap().unwrap(), "second");
    let end = tokio::time::timeout(WAIT, lines.next()).await.unwrap();
    assert!(end.is_none(), "the stream ends with the container");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_with_grace_zero_kills_the_pod_and_leaves_no_process() {
    let e = env().await;
    let m = marker();
    create(&e, &sh("sleeper", &format!("exec sleep {m}"))).await;
    wait_phase(&e, "sleeper", &["Running"]).await;
    assert!(wait_until(WAIT, || running_with(&m)), "the sleep runs");
    e.pods
        .delete(
            "sleeper",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let gone = wait_until_async(WAIT, || async { e.pods.get("sleeper").await.is_err() }).await;
    assert!(gone, "the pod is removed");
    assert!(!running_with(&m), "no process is left once the pod is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_delete_sends_sigterm_and_removes_the_pod_once_it_exits() {
    let e = env().await;
    let m = marker();
    create(
        &e,
        &sh(
            "trapper",
            &format!("trap 'echo bye; exit 0' TERM; echo ready; sleep {m} & wait"),
        ),
    )
    .await;
    wait_phase(&e, "trapper", &["Running"]).await;
    let ready = wait_until_async(WAIT, || async {
        logs(&e, "trapper", None).await.contains("ready")
    })
    .await;
    assert!(ready, "the trap is set");
    let rv = e
        .pods
        .get("trapper")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = e
        .pods
        .watch(&WatchParams::default().fields("metadata.name=trapper"), &rv)
        .await
        .unwrap()
        .boxed();
    let answer = e
        .pods
        .delete("trapper", &DeleteParams::default())
        .await
        .unwrap();
    let pod = answer.left().expect("the pod, still there");
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(30));
    let mut last_status = None;
    let mut marked = false;
    let deleted = tokio::time::timeout(WAIT, async {
        while let Some(ev) = events.next().await {
            match ev.unwrap() {
                WatchEvent::Modified(p) => {
                    marked |= p.metadata.deletion_timestamp.is_some();
                    last_status = Some(main_status(&p));
                }
                WatchEvent::Deleted(_) => return true,
                _ => {}
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(deleted, "the pod is deleted well before its 30 s");
    assert!(marked, "a watch saw the deletion mark");
    let last = last_status.unwrap();
    assert_eq!(last["state"]["terminated"]["exitCode"], 0, "{last}");
    assert!(!running_with(&m));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_fake_kills_its_pods() {
    let e = env().await;
    let m = marker();
    create(&e, &sh("left", &format!("sleep {m}; echo never"))).await;
    wait_phase(&e, "left", &["Running"]).await;
    assert!(wait_until(WAIT, || running_with(&m)), "the sleep runs");
    let Env { fake, dir, .. } = e;
    drop(fake);
    assert!(!running_with(&m), "no process outlives the fake");
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_read_with_timestamps_gives_each_lines_time_and_since_time_leaves_older_out() {
    let e = env().await;
    // Two lines a second apart (the second waits for the clock, not a fixed time).
    create(
        &e,
        &sh(
            "stamped",
            "echo first; s=$(date +%s); while [ \"$(date +%s)\" = \"$s\" ]; do :; done; echo second >&2",
        ),
    )
    .await;
    wait_phase(&e, "stamped", &["Succeeded"]).await;
    let read = |lp: LogParams| {
        let pods = e.pods.clone();
        async move { pods.logs("stamped", &lp).await.unwrap() }
    };
    let plain = read(LogParams::default()).await;
    assert_eq!(plain, "first\nsecond\n");
    let stamped = read(LogParams {
        timestamps: true,
        ..Default::default()
    })
    .await;
    let lines: Vec<(&str, &str)> = stamped
        .lines()
        .map(|l| l.split_once(' ').unwrap())
        .collect();
    assert_eq!(
        lines.iter().map(|l| l.1).collect::<Vec<_>>(),
        ["first", "second"]
    );
    let at: Vec<std::time::SystemTime> = lines
        .iter()
        .map(|l| humantime::parse_rfc3339(l.0).unwrap_or_else(|e| panic!("{}: {e}", l.0)))
        .collect();
    assert!(at[0] < at[1], "{stamped}");
    // sinceTime: the second's whole second (the API's unit) keeps only the second.
    let second = at[1]
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let since = read(LogParams {
        since_time: Some(k8s_openapi::jiff::Timestamp::from_second(second).unwrap()),
        ..Default::default()
    })
    .await;
    assert_eq!(since, "second\n");
}
