//! The object store: the resource types served, objects keyed by (resource,
//! namespace, name), the one global resourceVersion counter, the bounded watch
//! history, garbage collection by ownerReferences, and the API's `Status` bodies.
//!
//! Copied behaviour: resourceVersions are opaque strings from one etcd revision
//! counter shared by every resource
//! (https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions);
//! `Status` bodies as in the API conventions
//! (https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#response-status-kind);
//! background cascading deletion (https://kubernetes.io/docs/concepts/architecture/garbage-collection/).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use super::faults::{Fault, Misbehaviour, RecordedRequest};
use super::fields::{value_at, FieldPath, ManagerEntry};
pub(crate) use super::status::{bad_request, status_failure, Reply};

/// One resource type the fake serves.
#[derive(Debug)]
pub(crate) struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Has a `/status` subresource: writes to the main resource keep `.status`.
    pub status: bool,
    /// Has a `/scale` subresource (`autoscaling/v1` `Scale`).
    pub scale: bool,
    /// `metadata.generation` is kept (bumped when `.spec` changes).
    pub generation: bool,
    pub short_names: &'static [&'static str],
}

macro_rules! rt {
    ($g:expr, $p:expr, $s:expr, $k:expr, $ns:expr, $st:expr, $sc:expr, $gen:expr, $short:expr) => {
        ResourceType {
            group: $g,
            version: "v1",
            plural: $p,
            singular: $s,
            kind: $k,
            namespaced: $ns,
            status: $st,
            scale: $sc,
            generation: $gen,
            short_names: $short,
        }
    };
}

/// Every resource type served: core/v1 and apps/v1.
pub(crate) static RESOURCES: &[ResourceType] = &[
    rt!(
        "",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        true,
        false,
        false,
        &["ns"]
    ),
    rt!("", "pods", "pod", "Pod", true, true, false, true, &["po"]),
    rt!(
        "",
        "services",
        "service",
        "Service",
        true,
        true,
        false,
        false,
        &["svc"]
    ),
    rt!(
        "",
        "events",
        "event",
        "Event",
        true,
        false,
        false,
        false,
        &["ev"]
    ),
    rt!(
        "",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        false,
        false,
        false,
        &["cm"]
    ),
    rt!(
        "",
        "secrets",
        "secret",
        "Secret",
        true,
        false,
        false,
        false,
        &[]
    ),
    rt!(
        "",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        true,
        true,
        false,
        false,
        &["pvc"]
    ),
    rt!(
        "apps",
        "deployments",
        "deployment",
        "Deployment",
        true,
        true,
        true,
        true,
        &["deploy"]
    ),
    rt!(
        "apps",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        true,
        true,
        true,
        true,
        &["sts"]
    ),
    rt!(
        "apps",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        true,
        true,
        true,
        true,
        &["rs"]
    ),
];

/// Index of a resource type in [`RESOURCES`].
pub(crate) type Res = usize;

pub(crate) const NAMESPACES: Res = 0;
pub(crate) const PODS: Res = 1;
pub(crate) const CONFIGMAPS: Res = 4;
pub(crate) const SECRETS: Res = 5;
pub(crate) const PERSISTENT_VOLUME_CLAIMS: Res = 6;
pub(crate) const DEPLOYMENTS: Res = 7;
pub(crate) const STATEFULSETS: Res = 8;
pub(crate) const REPLICASETS: Res = 9;

impl ResourceType {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `deployments.apps`, as in the API's messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `details` of a Status naming an object of this type.
    pub fn details(&self, name: &str) -> Value {
        let mut d = json!({"name": name});
        if !self.group.is_empty() {
            d["group"] = json!(self.group);
        }
        d["kind"] = json!(self.plural);
        d
    }
}

/// The resource type served at this group, version and plural.
pub(crate) fn find_resource(group: &str, version: &str, plural: &str) -> Option<Res> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// An object's key: resource type, namespace (empty when cluster-scoped), name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Key {
    pub res: Res,
    pub namespace: String,
    pub name: String,
}

/// `ADDED`, `MODIFIED` or `DELETED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as kept in the watch history and sent to open watches.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub kind: EventType,
    pub key: Key,
    pub object: Value,
    /// The object before a modification (label selectors turn a MODIFIED that stops
    /// matching into a DELETED).
    pub old: Option<Value>,
}

/// How many changes the watch history keeps before the oldest are forgotten.
pub(crate) const HISTORY: usize = 10_000;

/// `404 NotFound`: `deployments.apps "web" not found`.
pub(crate) fn not_found(res: Res, name: &str) -> Reply {
    let rt = &RESOURCES[res];
    status_failure(
        404,
        "NotFound",
        &format!("{} \"{}\" not found", rt.group_resource(), name),
        Some(rt.details(name)),
    )
}

/// Whole state of the fake, behind one lock.
pub(crate) struct State {
    pub objects: BTreeMap<Key, Value>,
    /// Field ownership per object (rendered into `metadata.managedFields`).
    pub managers: HashMap<Key, Vec<ManagerEntry>>,
    /// The last resourceVersion given out.
    pub rv: u64,
    pub history: VecDeque<Arc<Change>>,
    /// Changes up to and including this resourceVersion are forgotten: a watch from
    /// an older one gets 410 Expired.
    pub history_floor: u64,
    pub changes: broadcast::Sender<Arc<Change>>,
    pub faults: Vec<Fault>,
    pub requests: Vec<RecordedRequest>,
    pub kubelet: bool,
    /// Bare pods are run as processes ([`super::process_kubelet`]): the simulated
    /// kubelet leaves them alone.
    pub run_pods: bool,
    pub digests: HashMap<String, String>,
    pub misbehaviour: HashMap<(String, String), Misbehaviour>,
    /// Watch connections opened so far per resource (`deployments.apps`, `pods`).
    pub watches_opened: BTreeMap<String, u64>,
    /// Watch connections open now per resource.
    pub watches_open: BTreeMap<String, u64>,
    pub next_ip: u32,
    /// The logs of the simulated kubelet's containers, by (pod uid, container), in
    /// the CRI logging format ([`super::cri_log`]).
    pub pod_logs: HashMap<(String, String), Vec<u8>>,
    /// Bumped on each change: the controllers' loop runs when it moved.
    pub dirty: bool,
}

impl State {
    pub fn new() -> State {
        let (changes, _) = broadcast::channel(65_536);
        let mut s = State {
            objects: BTreeMap::new(),
            managers: HashMap::new(),
            rv: 0,
            history: VecDeque::new(),
            history_floor: 0,
            changes,
            faults: Vec::new(),
            requests: Vec::new(),
            kubelet: true,
            run_pods: false,
            digests: HashMap::new(),
            misbehaviour: HashMap::new(),
            watches_opened: BTreeMap::new(),
            watches_open: BTreeMap::new(),
            pod_logs: HashMap::new(),
            next_ip: 0,
            dirty: false,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            s.ensure_namespace(ns);
        }
        s
    }

    /// What an API server restart after an etcd compaction does to its watchers:
    /// every open watch ends, and the resourceVersions given out so far are too old
    /// to watch from (`410 Expired`; the history is gone and one revision passed), so
    /// a client must list again.
    pub fn expire_watches(&mut self) {
        self.rv += 1;
        self.history.clear();
        self.history_floor = self.rv;
        // Dropping the only sender ends every open stream (their `recv` is `Closed`).
        self.changes = broadcast::channel(65_536).0;
    }

    /// A copy of the objects and their field owners for a dry run: what a request
    /// does there is answered and then thrown away (no watch hears of it, no
    /// resourceVersion is used up).
    pub fn scratch(&self) -> State {
        let (changes, _) = broadcast::channel(16);
        State {
            objects: self.objects.clone(),
            managers: self.managers.clone(),
            rv: self.rv,
            history: VecDeque::new(),
            history_floor: self.rv,
            changes,
            faults: Vec::new(),
            requests: Vec::new(),
            kubelet: false,
            run_pods: false,
            digests: self.digests.clone(),
            misbehaviour: HashMap::new(),
            watches_opened: BTreeMap::new(),
            watches_open: BTreeMap::new(),
            next_ip: self.next_ip,
            pod_logs: HashMap::new(),
            dirty: false,
        }
    }

    /// Creates namespace `name` (phase Active) unless it exists.
    pub fn ensure_namespace(&mut self, name: &str) {
        let key = Key {
            res: NAMESPACES,
            namespace: String::new(),
            name: name.to_string(),
        };
        if !self.objects.contains_key(&key) {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            let _ = self.create(NAMESPACES, "", obj, "flotilla-fake", "Update", None);
        }
    }

    pub fn namespace_exists(&self, name: &str) -> bool {
        self.objects.contains_key(&Key {
            res: NAMESPACES,
            namespace: String::new(),
            name: name.to_string(),
        })
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, kind: EventType, key: Key, object: Value, old: Option<Value>) {
        let change = Arc::new(Change {
            rv: self.rv,
            kind,
            key,
            object,
            old,
        });
        self.history.push_back(change.clone());
        while self.history.len() > HISTORY {
            if let Some(c) = self.history.pop_front() {
                self.history_floor = c.rv;
            }
        }
        let _ = self.changes.send(change);
        self.dirty = true;
    }

    /// Forgets the watch history: a watch from any resourceVersion before now gets
    /// 410 Expired.
    pub fn compact(&mut self) {
        self.history.clear();
        self.history_floor = self.rv;
    }

    /// Stores `obj` (new or replacing) under `key` with a new resourceVersion,
    /// renders its managedFields and records the change.
    pub fn put(&mut self, key: Key, mut obj: Value) -> Value {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.render_managed(&key, &mut obj);
        let old = self.objects.insert(key.clone(), obj.clone());
        let kind = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        let typed_obj = typed(key.res, &obj);
        self.record(kind, key, typed_obj, old);
        obj
    }

    /// Removes the object (and, by background garbage collection, what it owns).
    pub fn remove(&mut self, key: &Key) -> Option<Value> {
        let mut obj = self.objects.remove(key)?;
        self.managers.remove(key);
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record(EventType::Deleted, key.clone(), typed(key.res, &obj), None);
        if key.res == NAMESPACES {
            let inside: Vec<Key> = self
                .objects
                .keys()
                .filter(|k| k.namespace == key.name)
                .cloned()
                .collect();
            for k in inside {
                self.remove(&k);
            }
        }
        self.collect_garbage();
        Some(obj)
    }

    /// Deletes every object whose ownerReferences all name objects that no longer
    /// exist, until none is left (the garbage collector's background deletion).
    pub fn collect_garbage(&mut self) {
        loop {
            let uids: HashSet<String> = self
                .objects
                .values()
                .filter_map(|o| o["metadata"]["uid"].as_str().map(str::to_string))
                .collect();
            let orphans: Vec<Key> = self
                .objects
                .iter()
                .filter(|(_, o)| match o["metadata"]["ownerReferences"].as_array() {
                    Some(refs) if !refs.is_empty() => refs
                        .iter()
                        .all(|r| !uids.contains(r["uid"].as_str().unwrap_or(""))),
                    _ => false,
                })
                .map(|(k, _)| k.clone())
                .collect();
            if orphans.is_empty() {
                return;
            }
            for k in orphans {
                self.remove(&k);
            }
        }
    }

    /// Writes `metadata.managedFields` from the ownership table.
    fn render_managed(&self, key: &Key, obj: &mut Value) {
        let entries = self.managers.get(key).map(Vec::as_slice).unwrap_or(&[]);
        if entries.is_empty() {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            return;
        }
        obj["metadata"]["managedFields"] =
            Value::Array(entries.iter().map(ManagerEntry::render).collect());
    }

    /// Objects of this resource in `namespace` (all namespaces when `None`).
    pub fn list(&self, res: Res, namespace: Option<&str>) -> Vec<(&Key, &Value)> {
        self.objects
            .iter()
            .filter(|(k, _)| k.res == res && namespace.is_none_or(|ns| k.namespace == ns))
            .collect()
    }

    /// A fresh Service cluster IP from 10.96.0.0/12.
    pub fn allocate_ip(&mut self) -> String {
        self.next_ip += 1;
        let n = self.next_ip;
        format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
    }

    /// Removes ownership of paths that no longer exist in `obj`, and empty entries.
    pub fn prune_managers(&mut self, key: &Key, obj: &Value) {
        if let Some(entries) = self.managers.get_mut(key) {
            for e in entries.iter_mut() {
                e.fields.retain(|p| value_at(obj, p).is_some());
            }
            entries.retain(|e| !e.fields.is_empty());
        }
    }

    /// The paths other managers than `(manager, operation, subresource)` own.
    pub fn others_own(&self, key: &Key, me: &ManagerEntry) -> BTreeSet<FieldPath> {
        self.managers
            .get(key)
            .map(|es| {
                es.iter()
                    .filter(|e| !e.same_identity(me))
                    .flat_map(|e| e.fields.iter().cloned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Sets `kind` and `apiVersion` first in the object's map.
pub(crate) fn typed(res: Res, obj: &Value) -> Value {
    let rt = &RESOURCES[res];
    let mut m = Map::new();
    m.insert("kind".into(), json!(rt.kind));
    m.insert("apiVersion".into(), json!(rt.api_version()));
    if let Some(o) = obj.as_object() {
        for (k, v) in o {
            if k != "kind" && k != "apiVersion" {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(m)
}

/// Now as RFC 3339 in UTC with seconds (`2024-05-01T12:00:00Z`), as the API writes
/// timestamps.
pub(crate) fn now_rfc3339() -> String {
    rfc3339_in(0)
}

/// [`now_rfc3339`] `later` seconds from now.
pub(crate) fn rfc3339_in(later: u64) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        + later;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// `n` random characters from the alphabet the API uses for generated names
/// (`bcdfghjklmnpqrstvwxz2456789`, k8s.io/apimachinery/pkg/util/rand).
pub(crate) fn random_suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4();
    bytes.as_bytes()[..n.min(16)]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}
