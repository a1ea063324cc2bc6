//! The fake Kubernetes API (`flotilla_testkit::kube_api`) over real HTTP with a
//! plain HTTP/1.1 client, and a parity check against kmock (an independent emulator,
//! PyPI) where the two overlap.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_testkit::kube_api::{Fault, Misbehaviour};
use flotilla_testkit::{wait_until, FakeKube};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

struct Resp {
    status: u16,
    body: Value,
}

fn host_of(base: &str) -> String {
    base.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

fn read_chunked(r: &mut impl BufRead) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return out;
        }
        let size =
            usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        let mut buf = vec![0; size + 2];
        if r.read_exact(&mut buf).is_err() {
            return out;
        }
        out.extend_from_slice(&buf[..size]);
    }
}

fn send(
    stream: &mut TcpStream,
    base: &str,
    method: &str,
    path: &str,
    ct: Option<&str>,
    body: &str,
) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: plain-test/1.0\r\nConnection: close\r\n", host_of(base));
    if let Some(ct) = ct {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).expect("send");
}

fn read_head(r: &mut impl BufRead) -> (u16, bool, Option<usize>) {
    let mut status_line = String::new();
    r.read_line(&mut status_line).expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (mut chunked, mut len) = (false, None);
    loop {
        let mut h = String::new();
        r.read_line(&mut h).expect("header");
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().ok();
        }
    }
    (status, chunked, len)
}

fn call(base: &str, method: &str, path: &str, ct: Option<&str>, body: &str) -> Resp {
    let mut stream = TcpStream::connect(host_of(base)).expect("connect");
    send(&mut stream, base, method, path, ct, body);
    let mut r = BufReader::new(stream);
    let (status, chunked, len) = read_head(&mut r);
    let bytes = if chunked {
        read_chunked(&mut r)
    } else {
        let mut b = vec![0; len.unwrap_or(0)];
        r.read_exact(&mut b).expect("body");
        b
    };
    Resp {
        status,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn get(base: &str, path: &str) -> Resp {
    call(base, "GET", path, None, "")
}

fn post(base: &str, path: &str, body: &Value) -> Resp {
    call(
        base,
        "POST",
        path,
        Some("application/json"),
        &body.to_string(),
    )
}

fn patch(base: &str, path: &str, ct: &str, body: &Value) -> Resp {
    call(base, "PATCH", path, Some(ct), &body.to_string())
}

const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";

/// A watch: its events, collected by a reader thread; `ended` when the stream ended.
struct Watch {
    events: Arc<Mutex<Vec<Value>>>,
    ended: Arc<Mutex<bool>>,
}

impl Watch {
    fn open(base: &str, path: &str) -> Watch {
        let mut stream = TcpStream::connect(host_of(base)).expect("connect");
        send(&mut stream, base, "GET", path, None, "");
        let events = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(Mutex::new(false));
        let (e, d) = (events.clone(), ended.clone());
        std::thread::spawn(move || {
            let mut r = BufReader::new(stream);
            let (_, chunked, _) = read_head(&mut r);
            let mut pending = Vec::new();
            loop {
                let mut chunk = Vec::new();
                if chunked {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let size = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
                    if size == 0 {
                        break;
                    }
                    let mut buf = vec![0; size + 2];
                    if r.read_exact(&mut buf).is_err() {
                        break;
                    }
                    chunk.extend_from_slice(&buf[..size]);
                } else {
                    let mut buf = [0u8; 4096];
                    match r.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => chunk.extend_from_slice(&buf[..n]),
                    }
                }
                pending.extend_from_slice(&chunk);
                while let Some(i) = pending.iter().position(|b| *b == b'\n') {
                    let l: Vec<u8> = pending.drain(..=i).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&l) {
                        e.lock().unwrap().push(v);
                    }
                }
            }
            *d.lock().unwrap() = true;
        });
        Watch { events, ended }
    }

    fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    /// (type, name) of each event.
    fn summary(&self) -> Vec<(String, String)> {
        self.events()
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or("").to_string(),
                    e["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect()
    }

    fn has(&self, typ: &str, name: &str) -> bool {
        self.summary().iter().any(|(t, n)| t == typ && n == name)
    }

    fn ended(&self) -> bool {
        *self.ended.lock().unwrap()
    }
}

fn deployment(name: &str, replicas: u32, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image, "ports": [{"name": "http", "containerPort": 8080}]}]}}},
    })
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const CMS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";

fn pods_of(base: &str, app: &str) -> Vec<Value> {
    get(base, &format!("{PODS}?labelSelector=app%3D{app}")).body["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn discovery_documents() {
    let k = FakeKube::start();
    let u = k.url();
    assert_eq!(get(&u, "/version").body["major"], "1");
    assert_eq!(get(&u, "/api").body["versions"], json!(["v1"]));
    assert_eq!(
        get(&u, "/apis").body["groups"][0]["preferredVersion"]["groupVersion"],
        "apps/v1"
    );
    let core = get(&u, "/api/v1").body;
    assert_eq!(core["groupVersion"], "v1");
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for n in ["pods", "pods/status", "services", "namespaces", "events"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let apps = get(&u, "/apis/apps/v1").body;
    assert_eq!(apps["groupVersion"], "apps/v1");
    let find = |n: &str| {
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(find("deployments")["kind"], "Deployment");
    assert_eq!(find("deployments")["namespaced"], true);
    assert!(find("deployments")["verbs"]
        .as_array()
        .unwrap()
        .contains(&json!("watch")));
    assert_eq!(find("deployments/scale")["kind"], "Scale");
    find("statefulsets/status");
    find("deployments/status");
}

#[test]
fn create_get_and_the_status_bodies_of_failure() {
    let k = FakeKube::start();
    let u = k.url();
    let r = post(&u, DEPLOYS, &deployment("web", 2, "nginx:1.27"));
    assert_eq!(r.status, 201);
    let m = &r.body["metadata"];
    assert!(m["uid"].as_str().unwrap().len() >= 32);
    assert!(m["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(m["generation"], 1);
    let rv1: u64 = m["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert_eq!(r.body["status"], json!({}));
    let again = post(&u, DEPLOYS, &deployment("web", 2, "nginx:1.27"));
    assert_eq!(again.status, 409);
    assert_eq!(again.body["reason"], "AlreadyExists");
    assert_eq!(
        again.body["message"],
        "deployments.apps \"web\" already exists"
    );
    let c = post(&u, CMS, &cm("a", json!({})));
    let rv2: u64 = c.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1, "one counter for every resource");
    let missing = get(&u, &format!("{DEPLOYS}/nope"));
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "deployments.apps \"nope\" not found", "reason": "NotFound",
            "details": {"name": "nope", "group": "apps", "kind": "deployments"}, "code": 404})
    );
    let nons = post(
        &u,
        "/api/v1/namespaces/ghost/configmaps",
        &cm("a", json!({})),
    );
    assert_eq!(nons.status, 404);
    assert_eq!(nons.body["message"], "namespaces \"ghost\" not found");
    assert_eq!(
        nons.body["details"],
        json!({"name": "ghost", "kind": "namespaces"})
    );
    let ssa_nons = patch(
        &u,
        "/api/v1/namespaces/ghost/configmaps/a?fieldManager=t",
        APPLY,
        &cm("a", json!({})),
    );
    assert_eq!(ssa_nons.status, 404);
    k.create_namespace("ghost");
    assert_eq!(
        post(
            &u,
            "/api/v1/namespaces/ghost/configmaps",
            &cm("a", json!({}))
        )
        .status,
        201
    );
    assert_eq!(get(&u, "/api/v1/namespaces/kube-system").status, 200);
}

#[test]
fn server_side_apply_ownership_conflicts_and_force() {
    let k = FakeKube::start();
    k.set_kubelet(false);
    let u = k.url();
    let path = format!("{DEPLOYS}/web");
    let no_manager = patch(&u, &path, APPLY, &deployment("web", 2, "nginx:1"));
    assert_eq!(no_manager.status, 400);
    let yaml = call(
        &u,
        "PATCH",
        &format!("{path}?fieldManager=m"),
        Some(APPLY),
        "kind: Deployment\n",
    );
    assert_eq!(yaml.status, 415);
    let created = patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &deployment("web", 2, "nginx:1"),
    );
    assert_eq!(created.status, 201);
    let mf = &created.body["metadata"]["managedFields"][0];
    assert_eq!(mf["manager"], "flotilla");
    assert_eq!(mf["operation"], "Apply");
    assert_eq!(mf["fieldsType"], "FieldsV1");
    assert_eq!(mf["apiVersion"], "apps/v1");
    assert_eq!(mf["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
    assert_eq!(
        mf["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]
            ["."],
        json!({})
    );
    // Another manager takes replicas by force (kubectl scale style), then flotilla conflicts.
    let mut scale = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}});
    let err = k.apply_as("kubectl", &path, &scale).unwrap_err();
    assert_eq!(err["code"], 409);
    assert_eq!(
        err["message"],
        "Apply failed with 1 conflict: conflict with \"flotilla\" using apps/v1: .spec.replicas"
    );
    assert_eq!(
        err["details"]["causes"][0],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"flotilla\" using apps/v1", "field": ".spec.replicas"})
    );
    let forced = patch(
        &u,
        &format!("{path}?fieldManager=kubectl&force=true"),
        APPLY,
        &scale,
    );
    assert_eq!(forced.status, 200);
    assert_eq!(forced.body["spec"]["replicas"], 5);
    assert_eq!(forced.body["metadata"]["generation"], 2);
    let back = patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &deployment("web", 2, "nginx:1"),
    );
    assert_eq!(back.status, 409);
    assert_eq!(back.body["reason"], "Conflict");
    assert_eq!(
        back.body["message"],
        "Apply failed with 1 conflict: conflict with \"kubectl\" using apps/v1: .spec.replicas"
    );
    // The same value is shared ownership, not a conflict.
    scale["spec"]["replicas"] = json!(5);
    let same = patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &deployment("web", 5, "nginx:1"),
    );
    assert_eq!(same.status, 200, "{}", same.body);
    // A label flotilla stops applying goes; one another manager also set stays.
    let mut with_labels = deployment("web", 5, "nginx:1");
    with_labels["metadata"]["labels"]["tier"] = json!("front");
    with_labels["metadata"]["labels"]["shared"] = json!("x");
    patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &with_labels,
    );
    let other = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"shared": "x"}}});
    k.apply_as("other", &path, &other).unwrap();
    let dropped = patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &deployment("web", 5, "nginx:1"),
    );
    let labels = &dropped.body["metadata"]["labels"];
    assert!(labels.get("tier").is_none(), "{labels}");
    assert_eq!(labels["shared"], "x");
    // An unchanged apply writes nothing.
    let rv = dropped.body["metadata"]["resourceVersion"].clone();
    let noop = patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &deployment("web", 5, "nginx:1"),
    );
    assert_eq!(noop.body["metadata"]["resourceVersion"], rv);
    // Apply to the main resource never sets status.
    let mut with_status = deployment("web", 5, "nginx:1");
    with_status["status"] = json!({"replicas": 99});
    let st = patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &with_status,
    );
    assert!(st.body["status"].get("replicas").is_none());
}

#[test]
fn merge_patches_status_subresource_generation_and_stale_versions() {
    let k = FakeKube::start();
    k.set_kubelet(false);
    let u = k.url();
    let path = format!("{DEPLOYS}/web");
    post(&u, DEPLOYS, &deployment("web", 1, "nginx:1"));
    let r = patch(
        &u,
        &path,
        MERGE,
        &json!({"metadata": {"annotations": {"a": "b"}}, "status": {"replicas": 3}}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["metadata"]["generation"], 1,
        "metadata-only change keeps generation"
    );
    assert!(
        r.body["status"].get("replicas").is_none(),
        "main resource never writes status"
    );
    let s = patch(
        &u,
        &format!("{path}/status"),
        MERGE,
        &json!({"spec": {"replicas": 7}, "status": {"replicas": 3}}),
    );
    assert_eq!(s.body["status"]["replicas"], 3);
    assert_eq!(
        s.body["spec"]["replicas"], 1,
        "status writes never write spec"
    );
    let g = patch(&u, &path, MERGE, &json!({"spec": {"replicas": 4}}));
    assert_eq!(g.body["metadata"]["generation"], 2);
    let mf: Vec<Value> = g.body["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        mf.iter()
            .any(|e| e["manager"] == "plain-test" && e["operation"] == "Update"),
        "{mf:?}"
    );
    assert!(mf.iter().any(|e| e["subresource"] == "status"));
    let smp = patch(
        &u,
        &path,
        "application/strategic-merge-patch+json",
        &json!({"spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox"}]}}}}),
    );
    let names: Vec<&str> = smp.body["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["main", "side"],
        "strategic merge merges containers by name"
    );
    let stale = patch(
        &u,
        &path,
        MERGE,
        &json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 1}}),
    );
    assert_eq!(stale.status, 409);
    assert_eq!(stale.body["reason"], "Conflict");
    assert_eq!(
        call(
            &u,
            "PATCH",
            &path,
            Some("application/json-patch+json"),
            "[]"
        )
        .status,
        415
    );
}

#[test]
fn lists_with_selectors_and_cluster_wide() {
    let k = FakeKube::start();
    let u = k.url();
    k.create_namespace("other");
    post(&u, CMS, &cm("a", json!({"app": "x", "tier": "web"})));
    post(&u, CMS, &cm("b", json!({"app": "y"})));
    post(&u, CMS, &cm("c", json!({})));
    post(
        &u,
        "/api/v1/namespaces/other/configmaps",
        &cm("d", json!({"app": "x"})),
    );
    let names = |q: &str| -> Vec<String> {
        let r = get(&u, &format!("{CMS}?{q}"));
        assert_eq!(r.status, 200, "{q}: {}", r.body);
        assert_eq!(r.body["kind"], "ConfigMapList");
        assert_eq!(r.body["apiVersion"], "v1");
        assert!(r.body["metadata"]["resourceVersion"].as_str().is_some());
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("labelSelector=app%3Dx"), ["a"]);
    assert_eq!(names("labelSelector=app%3D%3Dx"), ["a"]);
    assert_eq!(names("labelSelector=app!%3Dx"), ["b", "c"]);
    assert_eq!(names("labelSelector=app%20in%20(x%2Cy)"), ["a", "b"]);
    assert_eq!(names("labelSelector=app%20notin%20(x)"), ["b", "c"]);
    assert_eq!(names("labelSelector=app"), ["a", "b"]);
    assert_eq!(names("labelSelector=!app"), ["c"]);
    assert_eq!(names("labelSelector=app%3Dx,tier%3Dweb"), ["a"]);
    assert_eq!(names("fieldSelector=metadata.name%3Db"), ["b"]);
    let all = get(&u, "/api/v1/configmaps?labelSelector=app%3Dx").body;
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
}

#[test]
fn delete_takes_the_pods_along() {
    let k = FakeKube::start();
    let u = k.url();
    post(&u, DEPLOYS, &deployment("web", 2, "nginx:1"));
    assert!(wait_until(WAIT, || pods_of(&u, "web").len() == 2));
    let d = call(&u, "DELETE", &format!("{DEPLOYS}/web"), None, "");
    assert_eq!(d.status, 200);
    assert_eq!(d.body["status"], "Success");
    assert_eq!(get(&u, &format!("{DEPLOYS}/web")).status, 404);
    assert!(wait_until(WAIT, || pods_of(&u, "web").is_empty()));
    assert_eq!(
        call(&u, "DELETE", &format!("{DEPLOYS}/web"), None, "").status,
        404
    );
}

#[test]
fn watches_from_a_version_from_now_expired_and_filtered() {
    let k = FakeKube::start();
    let u = k.url();
    let a = post(&u, CMS, &cm("a", json!({"app": "x"})));
    let rv_a = a.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    post(&u, CMS, &cm("b", json!({"app": "x"})));
    // From rv_a: only what came after.
    let w = Watch::open(&u, &format!("{CMS}?watch=true&resourceVersion={rv_a}"));
    assert!(wait_until(WAIT, || w.has("ADDED", "b")));
    assert!(!w.has("ADDED", "a"));
    // From nothing: synthetic ADDED for both, then live events.
    let w0 = Watch::open(&u, &format!("{CMS}?watch=1&labelSelector=app%3Dx"));
    assert!(wait_until(WAIT, || w0.has("ADDED", "a") && w0.has("ADDED", "b")));
    patch(&u, &format!("{CMS}/a"), MERGE, &json!({"data": {"k": "2"}}));
    assert!(wait_until(WAIT, || w0.has("MODIFIED", "a") && w.has("MODIFIED", "a")));
    // A change that stops matching is a DELETED for the filtered watch.
    patch(
        &u,
        &format!("{CMS}/b"),
        MERGE,
        &json!({"metadata": {"labels": {"app": "y"}}}),
    );
    assert!(wait_until(WAIT, || w0.has("DELETED", "b") && w.has("MODIFIED", "b")));
    call(&u, "DELETE", &format!("{CMS}/a"), None, "");
    assert!(wait_until(WAIT, || w0.has("DELETED", "a")));
    for e in w0.events() {
        assert_eq!(e["object"]["kind"], "ConfigMap");
    }
    // After compaction an old version is 410 Expired, then the stream ends.
    k.compact();
    let old = Watch::open(&u, &format!("{CMS}?watch=true&resourceVersion={rv_a}"));
    assert!(wait_until(WAIT, || old.ended()));
    let ev = old.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["type"], "ERROR");
    assert_eq!(ev[0]["object"]["code"], 410);
    assert_eq!(ev[0]["object"]["reason"], "Expired");
    assert!(ev[0]["object"]["message"]
        .as_str()
        .unwrap()
        .starts_with(&format!("too old resource version: {rv_a} (")));
    // Bookmarks and timeoutSeconds.
    let rv_now = k.resource_version();
    let bm = Watch::open(
        &u,
        &format!(
            "{CMS}?watch=true&resourceVersion={rv_now}&allowWatchBookmarks=true&timeoutSeconds=3"
        ),
    );
    assert!(wait_until(WAIT, || bm
        .summary()
        .iter()
        .any(|(t, _)| t == "BOOKMARK")));
    let b = bm
        .events()
        .into_iter()
        .find(|e| e["type"] == "BOOKMARK")
        .unwrap();
    assert_eq!(b["object"]["kind"], "ConfigMap");
    assert_eq!(
        b["object"]["metadata"]["resourceVersion"],
        rv_now.to_string()
    );
    assert!(
        wait_until(WAIT, || bm.ended()),
        "timeoutSeconds ends the stream"
    );
    // A streaming list ends its initial events with an annotated bookmark.
    let sl = Watch::open(
        &u,
        &format!("{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
    );
    assert!(wait_until(WAIT, || sl
        .events()
        .iter()
        .any(|e| e["type"] == "BOOKMARK")));
    let ev = sl.events();
    assert_eq!(ev[0]["type"], "ADDED");
    let end = ev.iter().find(|e| e["type"] == "BOOKMARK").unwrap();
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert!(k.watches_opened()["configmaps"] >= 5);
}

fn ready_replicas(k: &FakeKube, path: &str) -> u64 {
    k.object(path)
        .map(|d| d["status"]["readyReplicas"].as_u64().unwrap_or(0))
        .unwrap_or(0)
}

#[test]
fn the_kubelet_runs_deployments_rollouts_and_scale_to_zero() {
    let k = FakeKube::start();
    let u = k.url();
    k.set_image_digest(
        "nginx:1.27",
        "sha256:1111111111111111111111111111111111111111111111111111111111111111",
    );
    let path = format!("{DEPLOYS}/web");
    patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &deployment("web", 2, "nginx:1.27"),
    );
    assert!(wait_until(WAIT, || ready_replicas(&k, &path) == 2));
    let d = k.object(&path).unwrap();
    assert_eq!(d["status"]["observedGeneration"], 1);
    assert_eq!(d["status"]["updatedReplicas"], 2);
    assert_eq!(d["status"]["availableReplicas"], 2);
    let conds = d["status"]["conditions"].as_array().unwrap();
    assert!(conds
        .iter()
        .any(|c| c["type"] == "Available" && c["status"] == "True"));
    assert!(conds
        .iter()
        .any(|c| c["type"] == "Progressing" && c["reason"] == "NewReplicaSetAvailable"));
    let pods = pods_of(&u, "web");
    assert_eq!(pods.len(), 2);
    let p = &pods[0];
    let hash = p["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    let name = p["metadata"]["name"].as_str().unwrap();
    assert!(
        name.starts_with(&format!("web-{hash}-")) && name.len() == format!("web-{hash}-").len() + 5,
        "{name}"
    );
    assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:1.27");
    assert_eq!(p["status"]["phase"], "Running");
    let cs = &p["status"]["containerStatuses"][0];
    assert_eq!(
        cs["imageID"],
        "nginx@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    );
    assert_eq!(cs["ready"], true);
    assert_eq!(cs["started"], true);
    assert_eq!(cs["restartCount"], 0);
    assert!(cs["state"]["running"]["startedAt"].is_string());
    // A rollout restart: new pods under a new hash, old ones gone.
    let mut restarted = deployment("web", 2, "nginx:1.27");
    restarted["spec"]["template"]["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/restartedAt": "2025-01-01T00:00:00Z"});
    patch(
        &u,
        &format!("{path}?fieldManager=flotilla"),
        APPLY,
        &restarted,
    );
    assert!(wait_until(WAIT, || {
        let ps = pods_of(&u, "web");
        ps.len() == 2
            && ps
                .iter()
                .all(|p| p["metadata"]["labels"]["pod-template-hash"] != hash.as_str())
    }));
    assert!(wait_until(WAIT, || k.object(&path).unwrap()["status"]
        ["observedGeneration"]
        == 2
        && ready_replicas(&k, &path) == 2));
    // Scale to zero.
    patch(
        &u,
        &format!("{path}/scale"),
        MERGE,
        &json!({"spec": {"replicas": 0}}),
    );
    assert!(wait_until(WAIT, || pods_of(&u, "web").is_empty()));
    assert!(wait_until(WAIT, || k.object(&path).unwrap()["status"]
        .get("replicas")
        .is_none()));
}

#[test]
fn the_kubelet_runs_statefulsets_and_misbehaves_on_demand() {
    let k = FakeKube::start();
    let u = k.url();
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "pg", "image": "postgres:16"}]}}},
    });
    let path = "/apis/apps/v1/namespaces/default/statefulsets/db";
    patch(&u, &format!("{path}?fieldManager=t"), APPLY, &sts);
    assert!(wait_until(WAIT, || ready_replicas(&k, path) == 2));
    let mut names: Vec<String> = pods_of(&u, "db")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["db-0", "db-1"]);
    let st = k.object(path).unwrap()["status"].clone();
    assert_eq!(st["currentRevision"], st["updateRevision"]);
    let pod0 = "/api/v1/namespaces/default/pods/db-0";
    k.pods_misbehave(
        "default",
        "db",
        Misbehaviour::CrashLoop {
            reason: "OOMKilled".into(),
            exit_code: 137,
        },
    );
    assert!(wait_until(WAIT, || {
        let cs = &k.object(pod0).unwrap()["status"]["containerStatuses"][0];
        cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            && cs["restartCount"].as_u64().unwrap_or(0) >= 2
    }));
    let cs = k.object(pod0).unwrap()["status"]["containerStatuses"][0].clone();
    assert_eq!(cs["ready"], false);
    assert_eq!(cs["lastState"]["terminated"]["reason"], "OOMKilled");
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 137);
    assert!(wait_until(WAIT, || ready_replicas(&k, path) == 0));
    k.pods_misbehave("default", "db", Misbehaviour::ImagePullFailure);
    assert!(wait_until(WAIT, || {
        k.object(pod0).unwrap()["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "ImagePullBackOff"
    }));
    k.pods_misbehave("default", "db", Misbehaviour::NeverReady);
    assert!(wait_until(WAIT, || {
        let s = k.object(pod0).unwrap()["status"].clone();
        s["phase"] == "Pending" && s["conditions"][0]["reason"] == "Unschedulable"
    }));
    k.pods_misbehave("default", "db", Misbehaviour::Healthy);
    assert!(wait_until(WAIT, || ready_replicas(&k, path) == 2));
    k.set_kubelet(false);
    post(&u, DEPLOYS, &deployment("idle", 1, "nginx:1"));
    std::thread::yield_now();
    assert!(
        !wait_until(Duration::from_millis(300), || !pods_of(&u, "idle")
            .is_empty()),
        "no pods with the kubelet off"
    );
}

#[test]
fn faults_request_log_kubeconfig_and_control_endpoints() {
    let k = FakeKube::start();
    let u = k.url();
    k.fault(
        Fault::new(
            Some("POST"),
            "/configmaps",
            500,
            "InternalError",
            "etcd is down",
        )
        .times(1),
    );
    let f = post(&u, CMS, &cm("a", json!({})));
    assert_eq!(f.status, 500);
    assert_eq!(f.body["message"], "etcd is down");
    assert_eq!(
        get(&u, &format!("{CMS}/a")).status,
        404,
        "a failed write writes nothing"
    );
    assert_eq!(
        post(&u, CMS, &cm("a", json!({}))).status,
        201,
        "times(1) is used up"
    );
    let log = k.requests();
    let first = &log[0];
    assert_eq!(
        (first.method.as_str(), first.path.as_str(), first.status),
        ("POST", CMS, 500)
    );
    assert_eq!(first.content_type, "application/json");
    assert!(first.body.contains("\"ConfigMap\""));
    patch(
        &u,
        &format!("{CMS}/a?fieldManager=me&force=true"),
        APPLY,
        &cm("a", json!({})),
    );
    assert_eq!(
        k.requests().last().unwrap().query,
        "fieldManager=me&force=true"
    );
    // Over HTTP.
    assert_eq!(
        call(
            &u,
            "POST",
            "/_fake/faults",
            Some("application/json"),
            r#"{"path":"/secrets","status":403,"reason":"Forbidden"}"#
        )
        .status,
        204
    );
    assert_eq!(get(&u, "/api/v1/namespaces/default/secrets").status, 403);
    assert_eq!(call(&u, "DELETE", "/_fake/faults", None, "").status, 204);
    assert_eq!(get(&u, "/api/v1/namespaces/default/secrets").status, 200);
    assert_eq!(
        call(
            &u,
            "POST",
            "/_fake/namespaces",
            Some("application/json"),
            r#"{"name":"team"}"#
        )
        .status,
        204
    );
    assert!(k.object("/api/v1/namespaces/team").is_some());
    let applied = call(&u, "POST", "/_fake/apply", Some("application/json"),
        &json!({"manager": "kubectl", "path": format!("{CMS}/a"), "object": cm("a", json!({"x": "1"}))}).to_string());
    assert_eq!(applied.status, 200, "{}", applied.body);
    let reqs = get(&u, "/_fake/requests").body;
    assert!(reqs.as_array().unwrap().len() >= 5);
    assert!(get(&u, "/_fake/watches").body["opened"].is_object());
    // kubeconfig
    let dir = std::env::temp_dir().join(format!("fake-kube-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("config");
    k.write_kubeconfig(&kc, "fake", Some("team")).unwrap();
    let text = std::fs::read_to_string(&kc).unwrap();
    assert!(text.contains(&format!("server: \"{u}\"")), "{text}");
    assert!(text.contains("current-context: \"fake\""));
    assert!(text.contains("namespace: \"team\""));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The binary prints its URL and serves the same API.
#[test]
fn the_binary_serves_from_another_process() {
    let bin = env!("CARGO_BIN_EXE_fake-kube-apiserver");
    let mut child = std::process::Command::new(bin)
        .args(["--seed", "2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start fake-kube-apiserver");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("the ready line")
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"));
    let d = get(&url, "/apis/apps/v1/namespaces/seed-1/deployments/app");
    assert_eq!(d.status, 200);
    assert!(wait_until(WAIT, || get(
        &url,
        "/apis/apps/v1/namespaces/seed-1/deployments/app"
    )
    .body["status"]["readyReplicas"]
        == 1));
    let _ = child.kill();
    let _ = child.wait();
}

// ---- parity with kmock ----

struct Kmock {
    child: std::process::Child,
    url: String,
}

impl Drop for Kmock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_kmock() -> Result<Kmock, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf();
    let tools = std::process::Command::new(root.join("scripts/kube-tools"))
        .env(
            "FLOTILLA_TOOLS",
            std::env::var("FLOTILLA_TOOLS").unwrap_or_else(|_| "/var/cache/flotilla-tools".into()),
        )
        .output()
        .map_err(|e| format!("scripts/kube-tools: {e}"))?;
    if !tools.status.success() {
        return Err(format!(
            "scripts/kube-tools failed: {}",
            String::from_utf8_lossy(&tools.stderr)
        ));
    }
    let venv = String::from_utf8_lossy(&tools.stdout).trim().to_string();
    let mut child = std::process::Command::new(format!("{venv}/bin/python"))
        .arg(root.join("scripts/kmock-server.py"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("kmock-server.py: {e}"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("kmock said {line:?}"))?
        .to_string();
    Ok(Kmock { child, url })
}

/// The checks both implementations pass: create, get, list, status patch as the
/// kubelet writes it, live watch events, delete, discovery.
fn overlap_checks(u: &str) -> Result<(), String> {
    let ensure = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
    // (kmock 0.8 answers groupVersion "/v1" where the API says "v1": not compared.)
    let api = get(u, "/api/v1").body;
    let core = api["resources"].as_array().cloned().unwrap_or_default();
    ensure(
        core.iter()
            .any(|r| r["name"] == "pods" && r["kind"] == "Pod" && r["namespaced"] == true),
        "/api/v1 lists pods",
    )?;
    ensure(
        core.iter().any(|r| r["name"] == "pods/status"),
        "/api/v1 lists pods/status",
    )?;
    let apps = get(u, "/apis/apps/v1").body;
    ensure(
        apps["resources"].as_array().is_some_and(|rs| {
            rs.iter()
                .any(|r| r["name"] == "deployments" && r["kind"] == "Deployment")
        }),
        "apps/v1 lists deployments",
    )?;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "default", "labels": {"app": "par"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}});
    let w = Watch::open(u, &format!("{PODS}?watch=true"));
    let c = post(u, PODS, &pod);
    ensure(matches!(c.status, 200 | 201), "create answers 2xx")?;
    ensure(
        c.body["metadata"]["name"] == "p1",
        "create returns the object",
    )?;
    let g = get(u, &format!("{PODS}/p1"));
    ensure(
        g.status == 200 && g.body["spec"]["containers"][0]["image"] == "busybox:1",
        "get returns it",
    )?;
    let l = get(u, PODS).body;
    ensure(
        l["items"]
            .as_array()
            .is_some_and(|i| i.iter().any(|p| p["metadata"]["name"] == "p1")),
        "list has it",
    )?;
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "c", "image": "busybox:1", "imageID": "busybox@sha256:00", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2025-01-01T00:00:00Z"}}}]}});
    let s = patch(u, &format!("{PODS}/p1/status"), MERGE, &status);
    ensure(s.status == 200, "status patch answers 200")?;
    ensure(
        get(u, &format!("{PODS}/p1")).body["status"]["phase"] == "Running",
        "status patch is stored",
    )?;
    ensure(
        wait_until(WAIT, || w.has("ADDED", "p1")),
        "watch sees ADDED",
    )?;
    ensure(
        wait_until(WAIT, || w.has("MODIFIED", "p1")),
        "watch sees MODIFIED",
    )?;
    let d = call(u, "DELETE", &format!("{PODS}/p1"), None, "");
    ensure(d.status == 200, "delete answers 200")?;
    ensure(
        get(u, &format!("{PODS}/p1")).status == 404,
        "deleted object is 404",
    )?;
    ensure(
        wait_until(WAIT, || w.has("DELETED", "p1")),
        "watch sees DELETED",
    )?;
    Ok(())
}

#[test]
fn parity_with_kmock_where_they_overlap() {
    let k = FakeKube::start();
    k.set_kubelet(false);
    overlap_checks(&k.url()).unwrap_or_else(|e| panic!("the fake fails {e}"));
    match start_kmock() {
        Ok(km) => overlap_checks(&km.url).unwrap_or_else(|e| panic!("kmock fails {e}")),
        Err(why) if std::env::var("FLOTILLA_REQUIRE_KMOCK").as_deref() == Ok("1") => {
            panic!("kmock is required: {why}")
        }
        Err(why) => eprintln!("kmock parity half skipped: {why}"),
    }
}
