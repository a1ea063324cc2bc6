//! HTTP routes of the API: discovery, and per resource collection and object
//! (`GET`, `POST`, `PUT`, `PATCH`, `DELETE`, `?watch`), with `/status` and `/scale`.
//!
//! Copied behaviour (https://kubernetes.io/docs/reference/using-api/api-concepts/):
//! - paths `/api/v1/…` (core) and `/apis/apps/v1/…`, namespaced
//!   `…/namespaces/{ns}/{resource}[/{name}[/{subresource}]]`, cluster-wide lists
//!   `…/{resource}`;
//! - discovery documents `APIVersions`, `APIGroupList`, `APIGroup`,
//!   `APIResourceList` (https://kubernetes.io/docs/reference/using-api/#api-discovery);
//! - lists `{kind: <Kind>List, apiVersion, metadata: {resourceVersion}, items}` whose
//!   items carry no `kind`/`apiVersion`; `limit` is ignored (one page, no
//!   `continue`), which the API allows;
//! - PATCH content types `application/apply-patch+yaml` (the fake reads JSON only:
//!   another body is 415), `application/merge-patch+json`,
//!   `application/strategic-merge-patch+json`; `application/json-patch+json` (RFC
//!   6902) is answered 415 by the fake;
//! - a write's manager is `fieldManager`, else the User-Agent up to its first `/`
//!   (the API's default); apply without `fieldManager` is 400;
//! - POST and create-by-apply answer 201, other writes 200; DELETE answers a
//!   `Status` of success (a pod: the pod).
//!
//! The token in an `Authorization` header is not checked (its presence is logged).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::apply::{PatchKind, Writer};
use super::faults::{json_body, take_fault, RecordedRequest};
use super::paths::{route, Query, Route, Target};
use super::selector::{Filter, Selector};
use super::store::{bad_request, status_failure, typed, Reply, Res, State, PODS, RESOURCES};
use super::{control, pod_logs, process_kubelet, watch, Shared};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_list(group: &str, version: &str) -> Option<Value> {
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut e = json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            e["shortNames"] = json!(r.short_names);
        }
        resources.push(e);
        if r.status {
            resources.push(
                json!({"name": format!("{}/status", r.plural), "singularName": "",
                "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
        if r.scale {
            resources.push(json!({"name": format!("{}/scale", r.plural), "singularName": "",
                "namespaced": r.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"]}));
        }
    }
    if resources.is_empty() {
        return None;
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn apps_group() -> Value {
    json!({"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}})
}

fn discovery(route: &Route, addr: &str) -> Reply {
    match route {
        Route::Version => Reply::ok(json!({
            "major": "1", "minor": "33", "emulationMajor": "1", "emulationMinor": "33",
            "gitVersion": "v1.33.0", "gitCommit": "flotilla-fake", "gitTreeState": "clean",
            "buildDate": "2025-04-23T00:00:00Z", "goVersion": "go1.24.2", "compiler": "gc",
            "platform": "linux/amd64",
        })),
        Route::Api => Reply::ok(json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})),
        Route::Apis => {
            Reply::ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [apps_group()]}))
        }
        Route::Group(g) if g == "apps" => {
            let mut v = apps_group();
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            Reply::ok(v)
        }
        Route::Resources(g, v) => resource_list(g, v)
            .map(Reply::ok)
            .unwrap_or_else(page_not_found),
        _ => page_not_found(),
    }
}

fn page_not_found() -> Reply {
    status_failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

fn method_not_allowed() -> Reply {
    status_failure(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        Some(json!({})),
    )
}

/// The manager of a write: `fieldManager`, else the User-Agent's first word.
fn manager_of(q: &Query, user_agent: &str) -> String {
    match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => user_agent
            .split('/')
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    }
}

fn filter_of(q: &Query) -> Result<Filter, Reply> {
    let labels =
        Selector::parse(q.get("labelSelector").unwrap_or("")).map_err(|e| bad_request(&e))?;
    let fields =
        Selector::parse(q.get("fieldSelector").unwrap_or("")).map_err(|e| bad_request(&e))?;
    Ok(Filter { labels, fields })
}

/// The `autoscaling/v1` Scale of a workload.
fn scale_of(res: Res, obj: &Value) -> Value {
    let selector: Vec<String> = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let _ = res;
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
            "uid": obj["metadata"]["uid"], "resourceVersion": obj["metadata"]["resourceVersion"],
            "creationTimestamp": obj["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"]},
        "status": {"replicas": obj["status"]["replicas"].as_u64().unwrap_or(0), "selector": selector.join(",")},
    })
}

/// One parsed API request.
pub(crate) struct ApiRequest<'a> {
    pub method: &'a str,
    pub target: Target,
    pub query: &'a Query,
    pub content_type: &'a str,
    pub user_agent: &'a str,
    pub body: &'a [u8],
}

/// Serves a request that is not a watch, on the locked state.
pub(crate) fn serve_locked(s: &mut State, r: ApiRequest) -> Reply {
    let t = &r.target;
    let rt = &RESOURCES[t.res];
    let ns = t.namespace.clone().unwrap_or_default();
    if rt.namespaced && t.name.is_some() && t.namespace.is_none() {
        return page_not_found();
    }
    let status_sub = match t.sub.as_deref() {
        None => false,
        Some("status") if rt.status => true,
        Some("scale") if rt.scale => return scale(s, r),
        Some(_) => return page_not_found(),
    };
    let manager = manager_of(r.query, r.user_agent);
    let body = || {
        json_body(r.body)
            .ok_or_else(|| bad_request("the body of the request could not be decoded as JSON"))
    };
    let result: Result<(u16, Value), Reply> = match (r.method, &t.name) {
        ("GET", None) => filter_of(r.query).map(|f| {
            let items: Vec<Value> = s
                .list(t.res, t.namespace.as_deref())
                .into_iter()
                .filter(|(_, o)| f.matches(o))
                .map(|(_, o)| {
                    let mut o = o.clone();
                    if let Some(m) = o.as_object_mut() {
                        m.remove("kind");
                        m.remove("apiVersion");
                    }
                    o
                })
                .collect();
            (
                200,
                json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
                "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
            )
        }),
        ("GET", Some(name)) => s.get(t.res, &ns, name).map(|o| (200, o)),
        ("POST", None) => {
            if rt.namespaced && t.namespace.is_none() {
                return method_not_allowed();
            }
            body().and_then(|b| {
                s.create(t.res, &ns, b, &manager, "Update", None)
                    .map(|o| (201, o))
            })
        }
        ("PUT", Some(name)) => body().and_then(|b| {
            let w = Writer {
                manager: &manager,
                force: false,
                status: status_sub,
            };
            s.replace(t.res, &ns, name, b, &w).map(|o| (200, o))
        }),
        ("PATCH", Some(name)) => {
            let ct = r.content_type.split(';').next().unwrap_or("").trim();
            let kind = match ct {
                "application/apply-patch+yaml" | "application/apply-patch+json" => PatchKind::Apply,
                "application/merge-patch+json" => PatchKind::Merge,
                "application/strategic-merge-patch+json" => PatchKind::Strategic,
                _ => return unsupported(),
            };
            let Some(patch) = json_body(r.body) else {
                return if kind == PatchKind::Apply {
                    unsupported()
                } else {
                    bad_request("the body of the request could not be decoded as JSON")
                };
            };
            let force = r.query.get("force") == Some("true");
            if kind == PatchKind::Apply {
                if r.query.get("fieldManager").is_none_or(str::is_empty) {
                    return bad_request("PATCH: fieldManager is required for apply requests");
                }
                let w = Writer {
                    manager: &manager,
                    force,
                    status: status_sub,
                };
                s.apply(t.res, &ns, name, &patch, &w)
                    .map(|(o, created)| (if created { 201 } else { 200 }, o))
            } else {
                let w = Writer {
                    manager: &manager,
                    force,
                    status: status_sub,
                };
                s.patch(t.res, &ns, name, kind, &patch, &w)
                    .map(|o| (200, o))
            }
        }
        ("DELETE", Some(name)) => s.delete(t.res, &ns, name).map(|o| (200, o)),
        ("DELETE", None) => filter_of(r.query).map(|f| {
            let keys: Vec<_> = s
                .list(t.res, t.namespace.as_deref())
                .into_iter()
                .filter(|(_, o)| f.matches(o))
                .map(|(k, _)| k.clone())
                .collect();
            let mut items = Vec::new();
            for k in keys {
                if let Some(o) = s.remove(&k) {
                    items.push(o);
                }
            }
            (
                200,
                json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
                "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
            )
        }),
        _ => return method_not_allowed(),
    };
    match result {
        Ok((code, body)) => Reply { code, body },
        Err(e) => e,
    }
}

fn unsupported() -> Reply {
    status_failure(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (JSON bodies only)",
        None,
    )
}

fn scale(s: &mut State, r: ApiRequest) -> Reply {
    let t = &r.target;
    let ns = t.namespace.clone().unwrap_or_default();
    let Some(name) = t.name.clone() else {
        return page_not_found();
    };
    let obj = match s.get(t.res, &ns, &name) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let manager = manager_of(r.query, r.user_agent);
    let mut sc = scale_of(t.res, &obj);
    match r.method {
        "GET" => return Reply::ok(sc),
        "PATCH" | "PUT" => {
            let Some(b) = json_body(r.body) else {
                return bad_request("the body of the request could not be decoded as JSON");
            };
            if r.method == "PUT" {
                sc = b;
            } else {
                super::fields::merge_patch(&mut sc, &b);
            }
        }
        _ => return method_not_allowed(),
    }
    let Some(n) = sc["spec"]["replicas"].as_u64() else {
        return bad_request("spec.replicas must be a number");
    };
    let w = Writer {
        manager: &manager,
        force: true,
        status: false,
    };
    match s.patch(
        t.res,
        &ns,
        &name,
        PatchKind::Merge,
        &json!({"spec": {"replicas": n}}),
        &w,
    ) {
        Ok(o) => Reply::ok(scale_of(t.res, &o)),
        Err(e) => e,
    }
}

fn reply(r: Reply) -> Response {
    let body = serde_json::to_vec(&r.body).unwrap_or_default();
    Response::builder()
        .status(r.code)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

/// The one handler: control endpoints, discovery, then the API.
pub(crate) async fn entry(AxState(shared): AxState<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return reply(bad_request("the body of the request could not be read"));
    };
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or("").to_string();
    let query = Query::parse(&raw_query);
    let method = parts.method.as_str().to_string();
    let header = |n: &str| {
        parts
            .headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    if path.starts_with("/_fake/") {
        return control::serve(&shared, &method, &path, &bytes).into_response();
    }
    let content_type = header("content-type");
    let user_agent = header("user-agent");
    let mut record = RecordedRequest {
        method: method.clone(),
        path: path.clone(),
        query: raw_query.clone(),
        content_type: content_type.clone(),
        authorization: parts.headers.contains_key("authorization"),
        body: String::from_utf8_lossy(&bytes).into_owned(),
        status: 0,
    };
    let mut s = shared.lock();
    if let Some(f) = take_fault(&mut s.faults, &method, &path) {
        record.status = f.code;
        s.requests.push(record);
        return reply(f);
    }
    let Some(rt) = route(&path) else {
        record.status = 404;
        s.requests.push(record);
        return reply(page_not_found());
    };
    let target = match rt {
        Route::Object(t) => t,
        other => {
            let r = discovery(&other, &shared.addr.to_string());
            record.status = r.code;
            s.requests.push(record);
            return reply(r);
        }
    };
    if target.res == PODS && target.sub.as_deref() == Some("log") && target.name.is_some() {
        if method != "GET" {
            let r = method_not_allowed();
            record.status = r.code;
            s.requests.push(record);
            return reply(r);
        }
        record.status = 200;
        s.requests.push(record);
        drop(s);
        let ns = target.namespace.clone().unwrap_or_default();
        let name = target.name.clone().unwrap_or_default();
        return match pod_logs::serve(&shared, &ns, &name, &query) {
            Ok(resp) => resp,
            Err(r) => {
                if let Some(last) = shared.lock().requests.last_mut() {
                    last.status = r.code;
                }
                reply(r)
            }
        };
    }
    let is_watch = matches!(query.get("watch"), Some("true") | Some("1"));
    if method == "GET" && is_watch && target.name.is_none() {
        let filter = match filter_of(&query) {
            Ok(f) => f,
            Err(e) => {
                record.status = e.code;
                s.requests.push(record);
                return reply(e);
            }
        };
        record.status = 200;
        s.requests.push(record);
        drop(s);
        return watch::serve(
            shared.clone(),
            target.res,
            target.namespace.clone(),
            &query,
            filter,
        );
    }
    // A dry run (`dryRun=All`, the only value the API takes) is served on a scratch
    // copy: answered as the write would be, then forgotten
    // (https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run).
    let dry_run = match query.get("dryRun") {
        None => false,
        Some("All") if method != "GET" => true,
        Some(v) => {
            let r = bad_request(&format!(
                "dryRun: Unsupported value: \"{v}\": supported values: \"All\""
            ));
            record.status = r.code;
            s.requests.push(record);
            return reply(r);
        }
    };
    // A pod whose processes run is deleted gracefully (the process kubelet's).
    if !dry_run && method == "DELETE" && target.res == PODS && target.sub.is_none() {
        if let (Some(ns), Some(name)) = (&target.namespace, &target.name) {
            if let Some(r) = process_kubelet::delete(&shared, &mut s, ns, name, &query, &bytes) {
                record.status = r.code;
                s.requests.push(record);
                drop(s);
                shared.kick.notify_one();
                return reply(r);
            }
        }
    }
    let mut scratch = dry_run.then(|| s.scratch());
    let rv_before = s.rv;
    let r = serve_locked(
        scratch.as_mut().unwrap_or(&mut s),
        ApiRequest {
            method: &method,
            target,
            query: &query,
            content_type: &content_type,
            user_agent: &user_agent,
            body: &bytes,
        },
    );
    record.status = r.code;
    s.requests.push(record);
    let changed = s.rv != rv_before;
    drop(s);
    if changed {
        shared.kick.notify_one();
    }
    reply(r)
}

/// The object at an API path (`/apis/apps/v1/namespaces/default/deployments/web`).
pub(crate) fn object_at(s: &State, path: &str) -> Option<Value> {
    match route(path)? {
        Route::Object(Target {
            res,
            namespace,
            name: Some(name),
            ..
        }) => s
            .get(res, namespace.as_deref().unwrap_or(""), &name)
            .ok()
            .map(|o| typed(res, &o)),
        _ => None,
    }
}
