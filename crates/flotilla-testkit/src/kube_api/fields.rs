//! Field paths, field ownership entries (`metadata.managedFields`) and the merges
//! of patches and applied configurations; see [`super::apply`] for the behaviour
//! copied and its sources.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

/// List fields whose entries, when all are maps with a `name`, merge by name.
pub(crate) const NAMED_LISTS: &[&str] = &[
    "containers",
    "initContainers",
    "ephemeralContainers",
    "ports",
    "env",
    "volumes",
    "volumeMounts",
    "volumeDevices",
    "imagePullSecrets",
    "volumeClaimTemplates",
];

/// One step of a field path: a map field, or the entry of a named list.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Step {
    Field(String),
    Named(String),
}

/// A field path from the object's root.
pub(crate) type FieldPath = Vec<Step>;

/// One `metadata.managedFields` entry: a manager's fields for one operation.
#[derive(Clone, Debug)]
pub(crate) struct ManagerEntry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: &'static str,
    pub api_version: String,
    pub time: String,
    /// `Some("status")` for writes to `/status`.
    pub subresource: Option<String>,
    pub fields: BTreeSet<FieldPath>,
}

impl ManagerEntry {
    pub fn same_identity(&self, other: &ManagerEntry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
    }

    /// The entry as the API shows it.
    pub fn render(&self) -> Value {
        let mut root = Map::new();
        for p in &self.fields {
            let mut node = &mut root;
            for (i, step) in p.iter().enumerate() {
                let k = match step {
                    Step::Field(f) => format!("f:{f}"),
                    Step::Named(n) => format!("k:{}", json!({ "name": n })),
                };
                let child = node.entry(k).or_insert_with(|| json!({}));
                if i + 1 == p.len() && matches!(step, Step::Named(_)) {
                    child
                        .as_object_mut()
                        .expect("map")
                        .insert(".".into(), json!({}));
                }
                node = child.as_object_mut().expect("map");
            }
        }
        let mut e = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": Value::Object(root),
        });
        if let Some(s) = &self.subresource {
            e["subresource"] = json!(s);
        }
        e
    }
}

/// `.spec.template.spec.containers[name="web"].image`, as conflicts name fields.
pub(crate) fn path_string(p: &FieldPath) -> String {
    let mut s = String::new();
    for step in p {
        match step {
            Step::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Step::Named(n) => s.push_str(&format!("[name=\"{n}\"]")),
        }
    }
    s
}

pub(crate) fn is_named_list(field: &str, items: &[Value]) -> bool {
    NAMED_LISTS.contains(&field) && !items.is_empty() && items.iter().all(|i| i["name"].is_string())
}

/// Leaf field paths set in `v` (a map), below `prefix`.
pub(crate) fn leaf_paths(v: &Value, prefix: &FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Some(m) = v.as_object() else {
        out.insert(prefix.clone());
        return;
    };
    if m.is_empty() && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
    for (k, child) in m {
        let mut p = prefix.clone();
        p.push(Step::Field(k.clone()));
        match child {
            Value::Object(_) => leaf_paths(child, &p, out),
            Value::Array(items) if is_named_list(k, items) => {
                for item in items {
                    let mut ip = p.clone();
                    ip.push(Step::Named(
                        item["name"].as_str().unwrap_or_default().to_string(),
                    ));
                    out.insert(ip.clone());
                    leaf_paths(item, &ip, out);
                }
            }
            _ => {
                out.insert(p);
            }
        }
    }
}

/// The value at `p` in `v`, if set.
pub(crate) fn value_at<'a>(v: &'a Value, p: &FieldPath) -> Option<&'a Value> {
    let mut cur = v;
    for step in p {
        cur = match step {
            Step::Field(f) => cur.as_object()?.get(f)?,
            Step::Named(n) => cur
                .as_array()?
                .iter()
                .find(|i| i["name"].as_str() == Some(n))?,
        };
    }
    Some(cur)
}

pub(crate) fn remove_at(v: &mut Value, p: &FieldPath) {
    let Some((last, parent)) = p.split_last() else {
        return;
    };
    let mut cur = v;
    for step in parent {
        let next = match step {
            Step::Field(f) => cur.as_object_mut().and_then(|m| m.get_mut(f)),
            Step::Named(n) => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| i["name"].as_str() == Some(n))),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        Step::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        Step::Named(n) => {
            if let Some(a) = cur.as_array_mut() {
                a.retain(|i| i["name"].as_str() != Some(n));
            }
        }
    }
}

/// Merges an applied configuration into the live object: maps recursively, named
/// lists by name, everything else replaced.
pub(crate) fn merge_applied(live: &mut Value, applied: &Value) {
    let (Some(l), Some(a)) = (live.as_object_mut(), applied.as_object()) else {
        *live = applied.clone();
        return;
    };
    for (k, av) in a {
        match (l.get_mut(k), av) {
            (Some(lv @ Value::Object(_)), Value::Object(_)) => merge_applied(lv, av),
            (Some(Value::Array(litems)), Value::Array(aitems))
                if is_named_list(k, aitems) && litems.iter().all(|i| i["name"].is_string()) =>
            {
                for ai in aitems {
                    match litems.iter_mut().find(|li| li["name"] == ai["name"]) {
                        Some(li) => merge_applied(li, ai),
                        None => litems.push(ai.clone()),
                    }
                }
            }
            _ => {
                l.insert(k.clone(), av.clone());
            }
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("map");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Strategic merge patch: a merge patch whose named lists merge by name (an entry
/// `{"name": n, "$patch": "delete"}` removes `n`); other `$` directives are dropped.
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("map");
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(Value::Array(litems)), Value::Array(pitems)) if is_named_list(k, pitems) => {
                for pi in pitems {
                    if pi["$patch"] == "delete" {
                        litems.retain(|li| li["name"] != pi["name"]);
                        continue;
                    }
                    match litems.iter_mut().find(|li| li["name"] == pi["name"]) {
                        Some(li) => strategic_merge(li, pi),
                        None => {
                            let mut fresh = Value::Null;
                            strategic_merge(&mut fresh, pi);
                            litems.push(fresh);
                        }
                    }
                }
            }
            (Some(tv @ Value::Object(_)), Value::Object(_)) => strategic_merge(tv, v),
            _ => {
                let mut fresh = Value::Null;
                strategic_merge(&mut fresh, v);
                t.insert(k.clone(), fresh);
            }
        }
    }
}
