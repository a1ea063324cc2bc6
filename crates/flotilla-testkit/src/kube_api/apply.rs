//! Writes: create, replace, JSON merge patch, strategic merge patch and server-side
//! apply, with field ownership (`metadata.managedFields`).
//!
//! Copied behaviour:
//! - server-side apply (https://kubernetes.io/docs/reference/using-api/server-side-apply/):
//!   a manager owns the leaf fields it applied; applying a field another manager owns
//!   with a different value is a conflict (409, reason `Conflict`, one
//!   `FieldManagerConflict` cause per field) unless `force=true`, which moves
//!   ownership; a field a manager stops applying is removed when no one else owns it;
//!   an apply to a missing object creates it (201); `fieldManager` is required;
//!   `Update` operations (create, replace, merge patches) take ownership of the
//!   fields they change. Lists of maps whose entries all have a `name` and whose field
//!   is one of [`NAMED_LISTS`] merge by name (the API's `x-kubernetes-list-map-keys`
//!   for containers, ports, env, volumes…); every other list is atomic;
//! - JSON merge patch (RFC 7386, https://www.rfc-editor.org/rfc/rfc7386);
//! - strategic merge patch
//!   (https://github.com/kubernetes/community/blob/master/contributors/devel/sig-api-machinery/strategic-merge-patch.md):
//!   merge patch whose named lists merge by name, `$patch: delete` entries removing;
//!   other `$` directives dropped;
//! - `metadata.generation` bumps only when `.spec` changes, writes to a resource with
//!   a `status` subresource keep `.status`, writes to `/status` change only `.status`
//!   (API conventions, "Spec and Status");
//! - optimistic concurrency: a replace or patch carrying a stale
//!   `metadata.resourceVersion` is 409 Conflict.
//!
//! `fieldsV1` is rendered as the API does (`f:<field>`, `k:{"name":…}` for list-map
//! entries with a `.` member for the entry itself).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::fields::{
    leaf_paths, merge_applied, merge_patch, path_string, remove_at, strategic_merge, value_at,
    FieldPath, ManagerEntry, Step,
};

use super::store::{
    bad_request, not_found, now_rfc3339, random_suffix, status_failure, typed, Key, Reply, Res,
    State, NAMESPACES, PODS, RESOURCES,
};

/// The fields of a whole object a manager can own: all but type, identity and
/// server-set metadata, and `.status` when `scope` is the main resource of a type
/// with a status subresource (or only `.status` when `scope` is `status`).
pub(crate) fn owned_paths(res: Res, obj: &Value, status_scope: bool) -> BTreeSet<FieldPath> {
    let mut all = BTreeSet::new();
    leaf_paths(obj, &Vec::new(), &mut all);
    let rt = &RESOURCES[res];
    all.into_iter()
        .filter(|p| {
            let first = match p.first() {
                Some(Step::Field(f)) => f.as_str(),
                _ => return false,
            };
            if first == "kind" || first == "apiVersion" {
                return false;
            }
            if first == "metadata" {
                if status_scope {
                    return false;
                }
                return match p.get(1) {
                    Some(Step::Field(f)) => matches!(
                        f.as_str(),
                        "labels"
                            | "annotations"
                            | "ownerReferences"
                            | "finalizers"
                            | "generateName"
                    ),
                    _ => false,
                };
            }
            if rt.status {
                (first == "status") == status_scope
            } else {
                !status_scope
            }
        })
        .collect()
}

/// A patch's kind, from its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Strategic,
    Apply,
}

/// Who writes, and how.
pub(crate) struct Writer<'a> {
    pub manager: &'a str,
    pub force: bool,
    /// Writing to `/status`.
    pub status: bool,
}

fn conflict_reply(conflicts: &[(String, String, String)]) -> Reply {
    let n = conflicts.len();
    let message = if n == 1 {
        let (m, v, f) = &conflicts[0];
        format!("Apply failed with 1 conflict: conflict with \"{m}\" using {v}: {f}")
    } else {
        let mut groups: Vec<(String, String, Vec<String>)> = Vec::new();
        for (m, v, f) in conflicts {
            match groups.iter_mut().find(|g| &g.0 == m && &g.1 == v) {
                Some(g) => g.2.push(f.clone()),
                None => groups.push((m.clone(), v.clone(), vec![f.clone()])),
            }
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(m, v, fs)| {
                let list: Vec<String> = fs.iter().map(|f| format!("- {f}")).collect();
                format!("conflicts with \"{m}\" using {v}:\n{}", list.join("\n"))
            })
            .collect();
        format!("Apply failed with {n} conflicts: {}", parts.join("\n"))
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, v, f)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\" using {v}"), "field": f})
        })
        .collect();
    status_failure(409, "Conflict", &message, Some(json!({ "causes": causes })))
}

fn stale(res: Res, name: &str) -> Reply {
    let rt = &RESOURCES[res];
    status_failure(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            rt.group_resource()
        ),
        Some(rt.details(name)),
    )
}

impl State {
    fn check_namespace(&self, res: Res, namespace: &str) -> Result<(), Reply> {
        if RESOURCES[res].namespaced && !self.namespace_exists(namespace) {
            return Err(not_found(NAMESPACES, namespace));
        }
        Ok(())
    }

    /// Records `me`'s fields; other managers lose the paths in `steal`.
    fn take_ownership(&mut self, key: &Key, me: ManagerEntry, steal: &BTreeSet<FieldPath>) {
        let entries = self.managers.entry(key.clone()).or_default();
        for e in entries.iter_mut() {
            if !e.same_identity(&me) {
                e.fields.retain(|p| !steal.contains(p));
            }
        }
        match entries.iter_mut().find(|e| e.same_identity(&me)) {
            Some(e) => {
                if me.operation == "Apply" {
                    *e = me;
                } else {
                    e.fields.extend(me.fields);
                    e.time = me.time;
                }
            }
            None => entries.push(me),
        }
        entries.retain(|e| !e.fields.is_empty());
    }

    fn entry(
        &self,
        res: Res,
        manager: &str,
        operation: &'static str,
        status: bool,
        fields: BTreeSet<FieldPath>,
    ) -> ManagerEntry {
        ManagerEntry {
            manager: manager.to_string(),
            operation,
            api_version: RESOURCES[res].api_version(),
            time: now_rfc3339(),
            subresource: status.then(|| "status".to_string()),
            fields,
        }
    }

    /// Creates an object (POST): 201 with the stored object, 409 AlreadyExists,
    /// 404 when its namespace does not exist.
    pub fn create(
        &mut self,
        res: Res,
        namespace: &str,
        mut obj: Value,
        manager: &str,
        operation: &'static str,
        uid: Option<String>,
    ) -> Result<Value, Reply> {
        let rt = &RESOURCES[res];
        if !obj.is_object() {
            return Err(bad_request("the body of the request must be a JSON object"));
        }
        if let Some(k) = obj["kind"].as_str() {
            if k != rt.kind {
                return Err(bad_request(&format!(
                    "the kind {k} does not match the resource's kind {}",
                    rt.kind
                )));
            }
        }
        self.check_namespace(res, namespace)?;
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        if let Some(ns) = obj["metadata"]["namespace"].as_str() {
            if rt.namespaced && ns != namespace {
                return Err(bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let name = match (obj["metadata"]["name"].as_str(), obj["metadata"]["generateName"].as_str()) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(g)) => format!("{g}{}", random_suffix(5)),
            _ => {
                return Err(status_failure(
                    422,
                    "Invalid",
                    &format!("{} \"\" is invalid: metadata.name: Required value: name or generateName is required", rt.kind),
                    None,
                ))
            }
        };
        let key = Key {
            res,
            namespace: if rt.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.clone(),
        };
        if self.objects.contains_key(&key) {
            return Err(status_failure(
                409,
                "AlreadyExists",
                &format!("{} \"{name}\" already exists", rt.group_resource()),
                Some(rt.details(&name)),
            ));
        }
        let user_fields = owned_paths(res, &obj, false);
        let meta = obj["metadata"].as_object_mut().expect("map");
        meta.insert("name".into(), json!(name));
        if rt.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert(
            "uid".into(),
            json!(uid.unwrap_or_else(|| uuid::Uuid::new_v4().to_string())),
        );
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.remove("managedFields");
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        if rt.generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        self.defaults(res, &name, &mut obj);
        let entry = self.entry(res, manager, operation, false, user_fields);
        self.take_ownership(&key, entry, &BTreeSet::new());
        Ok(self.put(key, typed(res, &obj)))
    }

    /// Fields the API server defaults or resets on create.
    fn defaults(&mut self, res: Res, name: &str, obj: &mut Value) {
        let rt = &RESOURCES[res];
        match rt.plural {
            "namespaces" => {
                obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
            }
            "pods" => obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"}),
            "services" => {
                if !obj["spec"].is_object() {
                    obj["spec"] = json!({});
                }
                if obj["spec"]["type"].is_null() {
                    obj["spec"]["type"] = json!("ClusterIP");
                }
                if obj["spec"]["clusterIP"].is_null() {
                    let ip = self.allocate_ip();
                    obj["spec"]["clusterIP"] = json!(ip);
                    obj["spec"]["clusterIPs"] = json!([ip]);
                }
                if let Some(ports) = obj["spec"]["ports"].as_array_mut() {
                    for p in ports {
                        if p["protocol"].is_null() {
                            p["protocol"] = json!("TCP");
                        }
                        if p["targetPort"].is_null() {
                            p["targetPort"] = p["port"].clone();
                        }
                    }
                }
                obj["status"] = json!({"loadBalancer": {}});
            }
            "deployments" | "statefulsets" | "replicasets" => {
                if !obj["spec"].is_object() {
                    obj["spec"] = json!({});
                }
                if obj["spec"]["replicas"].is_null() {
                    obj["spec"]["replicas"] = json!(1);
                }
                obj["status"] = json!({});
            }
            _ => {}
        }
    }

    /// The stored object.
    pub fn get(&self, res: Res, namespace: &str, name: &str) -> Result<Value, Reply> {
        let key = Key {
            res,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        self.objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(res, name))
    }

    /// Stores `new` as the next version of `key` (whose current version is `old`):
    /// keeps identity, `.status` or everything but `.status` as the writer's scope
    /// says, bumps `generation` when `.spec` changed. No change → `old` as is.
    fn commit(
        &mut self,
        key: &Key,
        old: &Value,
        mut new: Value,
        status: bool,
        managers_before: Option<Vec<ManagerEntry>>,
    ) -> Value {
        let rt = &RESOURCES[key.res];
        if rt.status {
            if status {
                let s = new.get("status").cloned();
                new = old.clone();
                match s {
                    Some(s) => new["status"] = s,
                    None => {
                        new.as_object_mut().expect("map").remove("status");
                    }
                }
            } else {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
        }
        for f in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "resourceVersion",
            "deletionTimestamp",
        ] {
            match old["metadata"].get(f) {
                Some(v) => new["metadata"][f] = v.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(f);
                    }
                }
            }
        }
        if rt.generation && new.get("spec") != old.get("spec") {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            new["metadata"]["generation"] = json!(g);
        }
        new = typed(key.res, &new);
        self.prune_managers(key, &new);
        let mut same_managers = true;
        if let Some(before) = managers_before {
            let now = self.managers.get(key).cloned().unwrap_or_default();
            same_managers = before.len() == now.len()
                && before
                    .iter()
                    .zip(now.iter())
                    .all(|(a, b)| a.same_identity(b) && a.fields == b.fields);
        }
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            v
        };
        if same_managers && strip(&new) == strip(old) {
            return old.clone();
        }
        self.put(key.clone(), new)
    }

    /// PATCH with a merge or strategic merge patch (an `Update` by `manager`).
    pub fn patch(
        &mut self,
        res: Res,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        patch: &Value,
        w: &Writer,
    ) -> Result<Value, Reply> {
        if kind == PatchKind::Apply {
            return self.apply(res, namespace, name, patch, w).map(|(v, _)| v);
        }
        let key = Key {
            res,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(res, name))?;
        if let Some(rv) = patch["metadata"]["resourceVersion"].as_str() {
            if Some(rv) != old["metadata"]["resourceVersion"].as_str() {
                return Err(stale(res, name));
            }
        }
        let mut new = old.clone();
        match kind {
            PatchKind::Merge => merge_patch(&mut new, patch),
            _ => strategic_merge(&mut new, patch),
        }
        if let Some(m) = new["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        Ok(self.update(res, &key, &old, new, w))
    }

    /// Stores `new` over `old` as an update (PATCH, PUT) by `w`'s manager: the
    /// fields it changed become that manager's (operation `Update`).
    fn update(&mut self, res: Res, key: &Key, old: &Value, new: Value, w: &Writer) -> Value {
        let before = self.managers.get(key).cloned();
        let changed = changed_paths(res, old, &new, w.status);
        if !changed.is_empty() {
            let entry = self.entry(res, w.manager, "Update", w.status, changed.clone());
            self.take_ownership(key, entry, &changed);
        }
        self.commit(key, old, new, w.status, before)
    }

    /// PUT: replaces the object (or its status); a stale resourceVersion is 409.
    pub fn replace(
        &mut self,
        res: Res,
        namespace: &str,
        name: &str,
        body: Value,
        w: &Writer,
    ) -> Result<Value, Reply> {
        let key = Key {
            res,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(res, name))?;
        if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
            if Some(rv) != old["metadata"]["resourceVersion"].as_str() {
                return Err(stale(res, name));
            }
        }
        if body["metadata"]["name"].as_str().is_some_and(|n| n != name) {
            return Err(bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        Ok(self.update(res, &key, &old, body, w))
    }

    /// Server-side apply: the object and whether it was created.
    pub fn apply(
        &mut self,
        res: Res,
        namespace: &str,
        name: &str,
        applied: &Value,
        w: &Writer,
    ) -> Result<(Value, bool), Reply> {
        let rt = &RESOURCES[res];
        if !applied.is_object() {
            return Err(bad_request("the applied configuration must be an object"));
        }
        if applied["kind"].as_str() != Some(rt.kind)
            || applied["apiVersion"].as_str() != Some(&rt.api_version())
        {
            return Err(bad_request(&format!(
                "the applied configuration must have apiVersion {} and kind {}",
                rt.api_version(),
                rt.kind
            )));
        }
        if applied["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n != name)
        {
            return Err(bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        self.check_namespace(res, namespace)?;
        let key = Key {
            res,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let fields = owned_paths(res, applied, w.status);
        let Some(old) = self.objects.get(&key).cloned() else {
            if w.status {
                return Err(not_found(res, name));
            }
            let mut obj = applied.clone();
            obj["metadata"]["name"] = json!(name);
            let created = self.create(res, namespace, obj, w.manager, "Apply", None)?;
            return Ok((created, true));
        };
        let me = self.entry(res, w.manager, "Apply", w.status, fields.clone());
        // Conflicts: fields another manager owns whose live value differs.
        let mut conflicts = Vec::new();
        let mut taken = BTreeSet::new();
        for e in self.managers.get(&key).map(Vec::as_slice).unwrap_or(&[]) {
            if e.same_identity(&me) {
                continue;
            }
            for p in e.fields.intersection(&fields) {
                if matches!(p.last(), Some(Step::Named(_))) {
                    continue;
                }
                let live = value_at(&old, p);
                if live.is_some() && live != value_at(applied, p) {
                    conflicts.push((e.manager.clone(), e.api_version.clone(), path_string(p)));
                    taken.insert(p.clone());
                }
            }
        }
        if !conflicts.is_empty() && !w.force {
            return Err(conflict_reply(&conflicts));
        }
        let before = self.managers.get(&key).cloned();
        let previous: BTreeSet<FieldPath> = before
            .as_ref()
            .and_then(|es| es.iter().find(|e| e.same_identity(&me)))
            .map(|e| e.fields.clone())
            .unwrap_or_default();
        let others = self.others_own(&key, &me);
        let mut new = old.clone();
        // Fields this manager stops applying go when no one else owns them (or
        // anything below them); deepest first.
        let mut dropped: Vec<&FieldPath> = previous.difference(&fields).collect();
        dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in dropped {
            if !others.iter().any(|o| o.starts_with(p)) {
                remove_at(&mut new, p);
            }
        }
        let mut body = applied.clone();
        if let Some(m) = body.as_object_mut() {
            m.remove("kind");
            m.remove("apiVersion");
        }
        if let Some(m) = body["metadata"].as_object_mut() {
            m.retain(|k, _| {
                matches!(
                    k.as_str(),
                    "labels" | "annotations" | "ownerReferences" | "finalizers"
                )
            });
        }
        merge_applied(&mut new, &body);
        self.take_ownership(&key, me, &taken);
        Ok((self.commit(&key, &old, new, w.status, before), false))
    }

    /// DELETE: the object goes now; what it owns follows (background).
    pub fn delete(&mut self, res: Res, namespace: &str, name: &str) -> Result<Value, Reply> {
        let key = Key {
            res,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let obj = self.remove(&key).ok_or_else(|| not_found(res, name))?;
        let rt = &RESOURCES[res];
        let mut details = rt.details(name);
        details["uid"] = obj["metadata"]["uid"].clone();
        if res == PODS {
            return Ok(obj);
        }
        Ok(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
        )
    }
}

/// Leaf paths in scope whose value differs between `old` and `new`.
fn changed_paths(res: Res, old: &Value, new: &Value, status: bool) -> BTreeSet<FieldPath> {
    owned_paths(res, new, status)
        .into_iter()
        .filter(|p| {
            value_at(old, p) != value_at(new, p)
                || matches!(p.last(), Some(Step::Named(_))) && value_at(old, p).is_none()
        })
        .collect()
}
