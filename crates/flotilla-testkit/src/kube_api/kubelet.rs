//! A simulated kubelet, scheduler and workload controllers (Deployment, ReplicaSet,
//! StatefulSet), level-triggered: each pass makes the pods and statuses the real
//! ones would reach for the objects as they are now.
//!
//! Copied behaviour:
//! - Deployment controller
//!   (https://kubernetes.io/docs/concepts/workloads/controllers/deployment/): one
//!   ReplicaSet `<name>-<pod-template-hash>` per pod template, owned by the
//!   Deployment; pods `<replicaset>-<5 chars>` labelled `pod-template-hash`, owned by
//!   the ReplicaSet; a new template scales the new ReplicaSet up and the old ones to
//!   0. The fake's rollout makes all new pods first, then deletes the old ones, in one
//!   pass (no maxSurge/maxUnavailable pacing). Status `observedGeneration`,
//!   `replicas`, `updatedReplicas`, `readyReplicas`, `availableReplicas`,
//!   `unavailableReplicas` (zeros omitted, as the API's `omitempty`), conditions
//!   `Available` (`MinimumReplicasAvailable` when ready ≥ replicas − 25 % rounded
//!   down, the default maxUnavailable) and `Progressing` (`NewReplicaSetAvailable`
//!   when done, else `ReplicaSetUpdated`);
//! - StatefulSet controller
//!   (https://kubernetes.io/docs/concepts/workloads/controllers/statefulset/): pods
//!   `<name>-0..N-1` labelled `controller-revision-hash` (`<name>-<hash>`),
//!   `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`; a pod
//!   of an older revision is replaced (all at once, not one ordinal at a time);
//!   status with `currentRevision`/`updateRevision`;
//! - kubelet pod status (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/):
//!   phase `Running`, conditions `PodReadyToStartContainers`, `Initialized`,
//!   `Ready`, `ContainersReady`, `PodScheduled`, `containerStatuses` with `imageID`
//!   `<repository>@sha256:<digest>` from the fake registry; the failures of
//!   [`Misbehaviour`];
//! - PersistentVolumeClaims are `Bound` at once (a default StorageClass binding
//!   `Immediate`).
//!
//! Once [`super::FakeKube::run_pods`] is on, bare pods (no `ownerReferences`) are
//! left to [`super::process_kubelet`].
//!
//! Garbage collection of pods whose owner is gone is the store's (background
//! deletion). Events (`core/v1` Event) are not written.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::faults::Misbehaviour;
use super::store::{
    now_rfc3339, random_suffix, Key, Res, State, DEPLOYMENTS, PERSISTENT_VOLUME_CLAIMS, PODS,
    REPLICASETS, STATEFULSETS,
};

/// `sha256:<hex>`: the digest the fake registry gives an image reference (set ones
/// first; a reference pinned `@sha256:…` is its own; else the sha256 of the
/// reference string).
pub(crate) fn digest_of(state: &State, image: &str) -> String {
    if let Some(d) = state.digests.get(image) {
        return d.clone();
    }
    if let Some((_, d)) = image.split_once('@') {
        return d.to_string();
    }
    format!("sha256:{}", hex(&Sha256::digest(image.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The repository of an image reference: without its tag and digest.
pub(crate) fn repository(image: &str) -> &str {
    let base = image.split('@').next().unwrap_or(image);
    match (base.rfind(':'), base.rfind('/')) {
        (Some(c), Some(s)) if c > s => &base[..c],
        (Some(c), None) => &base[..c],
        _ => base,
    }
}

/// A pod-template-hash: 10 characters of the API's name alphabet from the template.
fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let d = Sha256::digest(template.to_string().as_bytes());
    d[..10]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

fn owner_ref(kind: &str, obj: &Value) -> Value {
    json!([{
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

fn owned_by<'a>(state: &'a State, res: Res, namespace: &str, uid: &Value) -> Vec<(Key, &'a Value)> {
    state
        .list(res, Some(namespace))
        .into_iter()
        .filter(|(_, o)| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| &r["uid"] == uid))
        })
        .map(|(k, o)| (k.clone(), o))
        .collect()
}

fn replicas(obj: &Value) -> usize {
    obj["spec"]["replicas"].as_u64().unwrap_or(1) as usize
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Writes `status` as `manager` on the status subresource when it differs.
fn write_status(state: &mut State, key: &Key, status: Value, manager: &str) {
    let Some(obj) = state.objects.get(key) else {
        return;
    };
    if obj["status"] == status {
        return;
    }
    let mut new = obj.clone();
    new["status"] = status;
    let w = super::apply::Writer {
        manager,
        force: true,
        status: true,
    };
    let _ = state.replace(key.res, &key.namespace, &key.name, strip_rv(new), &w);
}

fn strip_rv(mut v: Value) -> Value {
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    v
}

fn set_spec_replicas(state: &mut State, key: &Key, n: usize) {
    let Some(obj) = state.objects.get(key) else {
        return;
    };
    if replicas(obj) == n {
        return;
    }
    let mut new = obj.clone();
    new["spec"]["replicas"] = json!(n);
    let w = super::apply::Writer {
        manager: "kube-controller-manager",
        force: true,
        status: false,
    };
    let _ = state.replace(key.res, &key.namespace, &key.name, strip_rv(new), &w);
}

/// Creates a pod from a template.
fn make_pod(
    state: &mut State,
    namespace: &str,
    name: &str,
    template: &Value,
    labels: Value,
    owner: Value,
    extra_spec: Value,
) {
    let mut meta = template["metadata"].clone();
    if !meta.is_object() {
        meta = json!({});
    }
    let mut all_labels = meta["labels"].clone();
    if !all_labels.is_object() {
        all_labels = json!({});
    }
    for (k, v) in labels.as_object().into_iter().flatten() {
        all_labels[k] = v.clone();
    }
    meta["labels"] = all_labels;
    meta["name"] = json!(name);
    meta["ownerReferences"] = owner;
    let mut spec = template["spec"].clone();
    for (k, v) in extra_spec.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec});
    let _ = state.create(
        PODS,
        namespace,
        pod,
        "kube-controller-manager",
        "Update",
        None,
    );
}

fn sum_status(pods: &[&Value]) -> (usize, usize) {
    (pods.len(), pods.iter().filter(|p| is_ready(p)).count())
}

fn put_nonzero(status: &mut Value, field: &str, n: usize) {
    if n > 0 {
        status[field] = json!(n);
    }
}

/// Keeps a condition's timestamps when its status and reason did not change.
fn condition(
    old: &Value,
    typ: &str,
    status: &str,
    reason: &str,
    message: &str,
    update_time: bool,
) -> Value {
    let prev = old["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == typ))
        .cloned()
        .unwrap_or(Value::Null);
    let now = now_rfc3339();
    // A pod's conditions are stored without an empty `reason` (the kubelet omits
    // it): absent and empty are the same reason, or every pass would look like a
    // transition and rewrite every pod.
    let same = prev["status"] == status && prev["reason"].as_str().unwrap_or("") == reason;
    let transition = if same {
        prev["lastTransitionTime"].clone()
    } else {
        json!(now)
    };
    let mut c = json!({"type": typ, "status": status});
    if update_time {
        c["lastUpdateTime"] = if same {
            prev["lastUpdateTime"].clone()
        } else {
            json!(now)
        };
    }
    c["lastTransitionTime"] = transition;
    c["reason"] = json!(reason);
    c["message"] = json!(message);
    c
}

fn reconcile_deployment(state: &mut State, key: &Key) {
    let Some(d) = state.objects.get(key).cloned() else {
        return;
    };
    let ns = key.namespace.clone();
    let desired = replicas(&d);
    let template = d["spec"]["template"].clone();
    let hash = template_hash(&template);
    let rs_name = format!("{}-{hash}", key.name);
    let rs_key = Key {
        res: REPLICASETS,
        namespace: ns.clone(),
        name: rs_name.clone(),
    };
    if !state.objects.contains_key(&rs_key) {
        let mut rs_template = template.clone();
        rs_template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        let mut selector = d["spec"]["selector"].clone();
        if !selector.is_object() {
            selector = json!({});
        }
        selector["matchLabels"]["pod-template-hash"] = json!(hash);
        let mut labels = template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        labels["pod-template-hash"] = json!(hash);
        let rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "labels": labels, "ownerReferences": owner_ref("Deployment", &d)},
            "spec": {"replicas": desired, "selector": selector, "template": rs_template},
        });
        let _ = state.create(
            REPLICASETS,
            &ns,
            rs,
            "kube-controller-manager",
            "Update",
            None,
        );
    }
    set_spec_replicas(state, &rs_key, desired);
    let Some(rs) = state.objects.get(&rs_key).cloned() else {
        return;
    };
    // The new ReplicaSet's pods first.
    let mut current: Vec<Key> = owned_by(state, PODS, &ns, &rs["metadata"]["uid"])
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    while current.len() < desired {
        let name = format!("{rs_name}-{}", random_suffix(5));
        make_pod(
            state,
            &ns,
            &name,
            &template,
            json!({"pod-template-hash": hash}),
            owner_ref("ReplicaSet", &rs),
            json!({}),
        );
        current.push(Key {
            res: PODS,
            namespace: ns.clone(),
            name,
        });
    }
    current.sort();
    while current.len() > desired {
        if let Some(k) = current.pop() {
            state.remove(&k);
        }
    }
    // Then the old ReplicaSets go to 0 and their pods away.
    let old_sets: Vec<Key> = owned_by(state, REPLICASETS, &ns, &d["metadata"]["uid"])
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k != &rs_key)
        .collect();
    for k in &old_sets {
        set_spec_replicas(state, k, 0);
        let uid = state
            .objects
            .get(k)
            .map(|o| o["metadata"]["uid"].clone())
            .unwrap_or(Value::Null);
        let pods: Vec<Key> = owned_by(state, PODS, &ns, &uid)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for pk in pods {
            state.remove(&pk);
        }
    }
    // ReplicaSet statuses.
    for k in old_sets.iter().chain(std::iter::once(&rs_key)) {
        let Some(set) = state.objects.get(k).cloned() else {
            continue;
        };
        let pods = owned_by(state, PODS, &ns, &set["metadata"]["uid"]);
        let pods: Vec<&Value> = pods.iter().map(|(_, p)| *p).collect();
        let (n, ready) = sum_status(&pods);
        let mut st = json!({"replicas": n});
        put_nonzero(&mut st, "fullyLabeledReplicas", n);
        put_nonzero(&mut st, "readyReplicas", ready);
        put_nonzero(&mut st, "availableReplicas", ready);
        st["observedGeneration"] = set["metadata"]["generation"].clone();
        write_status(state, k, st, "kube-controller-manager");
    }
    let pods = owned_by(state, PODS, &ns, &rs["metadata"]["uid"]);
    let pods: Vec<&Value> = pods.iter().map(|(_, p)| *p).collect();
    let (updated, ready) = sum_status(&pods);
    let old = d["status"].clone();
    let mut st = json!({"observedGeneration": d["metadata"]["generation"]});
    put_nonzero(&mut st, "replicas", updated);
    put_nonzero(&mut st, "updatedReplicas", updated);
    put_nonzero(&mut st, "readyReplicas", ready);
    put_nonzero(&mut st, "availableReplicas", ready);
    put_nonzero(
        &mut st,
        "unavailableReplicas",
        desired.saturating_sub(ready),
    );
    let min_available = desired - desired * 25 / 100;
    let available = if ready >= min_available {
        condition(
            &old,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            true,
        )
    } else {
        condition(
            &old,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            true,
        )
    };
    let progressing = if updated == desired && ready == desired {
        condition(
            &old,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            &format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            true,
        )
    } else {
        condition(
            &old,
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            &format!("ReplicaSet \"{rs_name}\" is progressing."),
            true,
        )
    };
    st["conditions"] = json!([available, progressing]);
    write_status(state, key, st, "kube-controller-manager");
}

fn reconcile_statefulset(state: &mut State, key: &Key) {
    let Some(s) = state.objects.get(key).cloned() else {
        return;
    };
    let ns = key.namespace.clone();
    let desired = replicas(&s);
    let template = s["spec"]["template"].clone();
    let revision = format!("{}-{}", key.name, template_hash(&template));
    let owned: BTreeMap<String, Value> = owned_by(state, PODS, &ns, &s["metadata"]["uid"])
        .into_iter()
        .map(|(k, p)| (k.name.clone(), p.clone()))
        .collect();
    for i in 0..desired {
        let name = format!("{}-{i}", key.name);
        let pod_key = Key {
            res: PODS,
            namespace: ns.clone(),
            name: name.clone(),
        };
        match owned.get(&name) {
            Some(p) if p["metadata"]["labels"]["controller-revision-hash"] == revision.as_str() => {
                continue
            }
            Some(_) => {
                state.remove(&pod_key);
            }
            None => {
                if state.objects.contains_key(&pod_key) {
                    continue;
                }
            }
        }
        let mut extra = json!({"hostname": name});
        if let Some(svc) = s["spec"]["serviceName"].as_str() {
            extra["subdomain"] = json!(svc);
        }
        make_pod(
            state,
            &ns,
            &name,
            &template,
            json!({
                "controller-revision-hash": revision,
                "statefulset.kubernetes.io/pod-name": name,
                "apps.kubernetes.io/pod-index": i.to_string(),
            }),
            owner_ref("StatefulSet", &s),
            extra,
        );
    }
    for name in owned.keys() {
        let index = name
            .rsplit('-')
            .next()
            .and_then(|i| i.parse::<usize>().ok());
        if index.is_none_or(|i| i >= desired) {
            state.remove(&Key {
                res: PODS,
                namespace: ns.clone(),
                name: name.clone(),
            });
        }
    }
    let pods = owned_by(state, PODS, &ns, &s["metadata"]["uid"]);
    let pods: Vec<&Value> = pods.iter().map(|(_, p)| *p).collect();
    let (n, ready) = sum_status(&pods);
    let updated = pods
        .iter()
        .filter(|p| p["metadata"]["labels"]["controller-revision-hash"] == revision.as_str())
        .count();
    let current_revision = if updated == n {
        revision.clone()
    } else {
        s["status"]["currentRevision"]
            .as_str()
            .unwrap_or(&revision)
            .to_string()
    };
    let mut st = json!({"observedGeneration": s["metadata"]["generation"], "replicas": n});
    put_nonzero(&mut st, "readyReplicas", ready);
    put_nonzero(&mut st, "currentReplicas", updated);
    put_nonzero(&mut st, "updatedReplicas", updated);
    put_nonzero(&mut st, "availableReplicas", ready);
    st["currentRevision"] = json!(current_revision);
    st["updateRevision"] = json!(revision);
    st["collisionCount"] = json!(0);
    write_status(state, key, st, "kube-controller-manager");
}

/// The workload a pod belongs to: its Deployment (through the ReplicaSet's name),
/// its StatefulSet, or itself.
fn workload_of(pod: &Value) -> String {
    let owner = pod["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|rs| rs.first())
        .cloned();
    match owner {
        Some(o) if o["kind"] == "ReplicaSet" => {
            let rs = o["name"].as_str().unwrap_or_default();
            match pod["metadata"]["labels"]["pod-template-hash"].as_str() {
                Some(h) => rs.strip_suffix(&format!("-{h}")).unwrap_or(rs).to_string(),
                None => rs.to_string(),
            }
        }
        Some(o) => o["name"].as_str().unwrap_or_default().to_string(),
        None => pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

fn pod_ip(pod: &Value) -> String {
    let d = Sha256::digest(
        pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .as_bytes(),
    );
    format!("10.244.{}.{}", d[0], d[1].max(2))
}

/// The status the kubelet (and scheduler) would write for this pod now.
fn pod_status(state: &State, pod: &Value, how: &Misbehaviour, tick: bool) -> Value {
    let old = &pod["status"];
    let now = now_rfc3339();
    let start = old["startTime"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| now.clone());
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<String> = containers
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    let cond = |typ: &str, status: &str, reason: Option<&str>, message: Option<String>| {
        let mut c = condition(old, typ, status, reason.unwrap_or(""), "", false);
        c["lastProbeTime"] = Value::Null;
        let m = c.as_object_mut().expect("map");
        match reason {
            Some(_) => {}
            None => {
                m.remove("reason");
            }
        }
        match message {
            Some(msg) => {
                m.insert("message".into(), json!(msg));
            }
            None => {
                m.remove("message");
            }
        }
        c
    };
    if *how == Misbehaviour::NeverReady {
        return json!({
            "phase": "Pending",
            "qosClass": "BestEffort",
            "conditions": [cond("PodScheduled", "False", Some("Unschedulable"),
                Some("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.".into()))],
        });
    }
    let ip = pod_ip(pod);
    let old_statuses = old["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut statuses = Vec::new();
    for c in &containers {
        let name = c["name"].as_str().unwrap_or_default();
        let image = c["image"].as_str().unwrap_or_default();
        let prev = old_statuses
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or(Value::Null);
        let restarts = prev["restartCount"].as_u64().unwrap_or(0);
        let cid = format!(
            "containerd://{}",
            hex(&Sha256::digest(
                format!("{}/{name}/{restarts}", pod["metadata"]["uid"]).as_bytes()
            ))
        );
        // A running container keeps the image it was started from (the kubelet
        // reports what the container runtime pulled then): only a container that
        // (re)starts resolves the reference again.
        let image_id = match prev["imageID"].as_str() {
            Some(id) if prev["image"] == image && !id.is_empty() => id.to_string(),
            _ => format!("{}@{}", repository(image), digest_of(state, image)),
        };
        let mut s = json!({"name": name, "image": image, "imageID": image_id});
        match how {
            Misbehaviour::Healthy | Misbehaviour::NeverReady => {
                let started = prev["state"]["running"]["startedAt"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| now.clone());
                s["containerID"] = json!(cid);
                s["ready"] = json!(true);
                s["started"] = json!(true);
                s["restartCount"] = json!(restarts);
                s["state"] = json!({"running": {"startedAt": started}});
                s["lastState"] = if prev["lastState"].is_object() {
                    prev["lastState"].clone()
                } else {
                    json!({})
                };
            }
            Misbehaviour::CrashLoop { reason, exit_code } => {
                let was = prev["state"]["waiting"]["reason"] == "CrashLoopBackOff";
                let restarts = if !was || tick { restarts + 1 } else { restarts };
                s["containerID"] = json!(cid);
                s["ready"] = json!(false);
                s["started"] = json!(false);
                s["restartCount"] = json!(restarts);
                s["state"] = json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off 10s restarting failed container={name} pod={}_{}({})",
                        pod["metadata"]["name"].as_str().unwrap_or_default(),
                        pod["metadata"]["namespace"].as_str().unwrap_or_default(),
                        pod["metadata"]["uid"].as_str().unwrap_or_default())}});
                let finished = if was && !tick {
                    prev["lastState"]["terminated"]["finishedAt"].clone()
                } else {
                    json!(now)
                };
                s["lastState"] = json!({"terminated": {"exitCode": exit_code, "reason": reason,
                    "startedAt": start, "finishedAt": finished, "containerID": cid}});
            }
            Misbehaviour::ImagePullFailure => {
                let was = prev["state"]["waiting"]["reason"].as_str();
                let (reason, message) =
                    if was == Some("ImagePullBackOff") || (was == Some("ErrImagePull") && tick) {
                        (
                            "ImagePullBackOff",
                            format!("Back-off pulling image \"{image}\""),
                        )
                    } else {
                        (
                            "ErrImagePull",
                            format!("failed to pull and unpack image \"{image}\": not found"),
                        )
                    };
                s["imageID"] = json!("");
                s["ready"] = json!(false);
                s["started"] = json!(false);
                s["restartCount"] = json!(0);
                s["state"] = json!({"waiting": {"reason": reason, "message": message}});
                s["lastState"] = json!({});
            }
        }
        statuses.push(s);
    }
    let ready = *how == Misbehaviour::Healthy;
    let unready = Some(format!(
        "containers with unready status: [{}]",
        names.join(" ")
    ));
    let (r, rr) = if ready {
        ("True", None)
    } else {
        ("False", Some("ContainersNotReady"))
    };
    let phase = if *how == Misbehaviour::ImagePullFailure {
        "Pending"
    } else {
        "Running"
    };
    json!({
        "phase": phase,
        "conditions": [
            cond("PodReadyToStartContainers", "True", None, None),
            cond("Initialized", "True", None, None),
            cond("Ready", r, rr, if ready { None } else { unready.clone() }),
            cond("ContainersReady", r, rr, if ready { None } else { unready }),
            cond("PodScheduled", "True", None, None),
        ],
        "hostIP": "172.18.0.2",
        "hostIPs": [{"ip": "172.18.0.2"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": start,
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
    })
}

/// Whether a pod is bare: no `ownerReferences` (made by a client, not a controller).
pub(crate) fn is_bare(pod: &Value) -> bool {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .is_none_or(|r| r.is_empty())
}

/// Binds every PersistentVolumeClaim at once (the volume controller with a default
/// StorageClass of binding mode `Immediate`,
/// https://kubernetes.io/docs/concepts/storage/persistent-volumes/#binding): status
/// `phase: Bound`, the requested `accessModes` and `capacity`.
fn bind_claims(state: &mut State) {
    let claims: Vec<(Key, Value)> = state
        .list(PERSISTENT_VOLUME_CLAIMS, None)
        .into_iter()
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect();
    for (k, c) in claims {
        let mut st = json!({"phase": "Bound"});
        if let Some(modes) = c["spec"]["accessModes"].as_array() {
            st["accessModes"] = json!(modes);
        }
        if let Some(size) = c["spec"]["resources"]["requests"]["storage"].as_str() {
            st["capacity"] = json!({"storage": size});
        }
        write_status(state, &k, st, "kube-controller-manager");
    }
}

/// The keys of every object of `res`, in every namespace.
fn keys(state: &State, res: Res) -> Vec<Key> {
    state
        .list(res, None)
        .into_iter()
        .map(|(k, _)| k.clone())
        .collect()
}

/// One pass of the Deployment and StatefulSet controllers.
fn reconcile_workloads(state: &mut State) {
    for k in keys(state, DEPLOYMENTS) {
        reconcile_deployment(state, &k);
    }
    for k in keys(state, STATEFULSETS) {
        reconcile_statefulset(state, &k);
    }
}

/// One pass of the controllers and the kubelet. `tick`: a second went by (crash
/// loops restart again, pull errors turn into back-offs).
pub(crate) fn reconcile(state: &mut State, tick: bool) {
    if !state.kubelet {
        return;
    }
    bind_claims(state);
    reconcile_workloads(state);
    for k in keys(state, PODS) {
        let Some(pod) = state.objects.get(&k).cloned() else {
            continue;
        };
        if state.run_pods && is_bare(&pod) {
            // The process kubelet's.
            continue;
        }
        let how = state
            .misbehaviour
            .get(&(k.namespace.clone(), workload_of(&pod)))
            .cloned()
            .unwrap_or_default();
        let status = pod_status(state, &pod, &how, tick);
        if how != Misbehaviour::NeverReady && pod["spec"]["nodeName"].is_null() {
            let mut new = pod.clone();
            new["spec"]["nodeName"] = json!("flotilla-fake-node");
            let w = super::apply::Writer {
                manager: "kube-scheduler",
                force: true,
                status: false,
            };
            let _ = state.replace(PODS, &k.namespace, &k.name, strip_rv(new), &w);
        }
        write_status(state, &k, status, "kubelet");
    }
    // Workload statuses follow the pods' new readiness on the next pass.
    reconcile_workloads(state);
}
