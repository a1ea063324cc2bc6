//! The fake's controls, for [`super::FakeKube`]'s methods and over HTTP under
//! `/_fake/` (for tests and benchmarks in another process). JSON bodies; an error is
//! a 400 `{"error": "..."}`.
//!
//! | method and path            | body                                             | answer |
//! |----------------------------|--------------------------------------------------|--------|
//! | `POST /_fake/namespaces`   | `{"name": "team-a"}`                             | 204 |
//! | `PUT /_fake/image-digests` | `{"reference": "nginx:1.27", "digest": "sha256:…"}` | 204 |
//! | `PUT /_fake/kubelet`       | `{"enabled": false}`                             | 204 |
//! | `PUT /_fake/misbehaviour`  | `{"namespace", "workload", "misbehaviour": {"kind": "crashLoop", "reason": "OOMKilled", "exitCode": 137}}` (kinds `healthy`, `crashLoop`, `imagePullFailure`, `neverReady`) | 204 |
//! | `POST /_fake/faults`       | a [`super::Fault`] (`method`, `path`, `status`, `reason`, `message`, `times`) | 204 |
//! | `DELETE /_fake/faults`     |                                                  | 204 |
//! | `GET /_fake/requests`      |                                                  | `[`[`super::RecordedRequest`]`]` |
//! | `DELETE /_fake/requests`   |                                                  | 204 |
//! | `POST /_fake/compact`      |                                                  | 204 |
//! | `POST /_fake/apply`        | `{"manager", "path", "object", "force"?}`        | the object (200/201) or a Status |
//! | `GET /_fake/watches`       |                                                  | `{"opened": {"deployments.apps": 1}, "open": {…}}` |
//! | `POST /_fake/seed`         | `{"namespaces": 10}`                             | 204 |
//! | `PUT /_fake/run-pods`      | `{"dataDir": "/tmp/pods"}`: run bare pods as processes ([`super::FakeKube::run_pods`]) | 204 |
//! | `POST /_fake/pod-log`      | `{"namespace", "pod", "container"?, "text"}`: a line the pod's container wrote ([`super::FakeKube::write_pod_log`]) | 204 |

use axum::body::Body;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::apply::Writer;
use super::cri_log;
use super::faults::Misbehaviour;
use super::faults::{Fault, RecordedRequest};
use super::paths::{route, Route};
use super::status::{bad_request, Reply};
use super::store::RESOURCES;
use super::Shared;

impl Shared {
    pub(crate) fn kicked<T>(&self, f: impl FnOnce(&mut super::store::State) -> T) -> T {
        let out = {
            let mut s = self.lock();
            f(&mut s)
        };
        self.kick.notify_one();
        out
    }

    pub(crate) fn apply_as(&self, manager: &str, path: &str, obj: &Value, force: bool) -> Reply {
        let Some(Route::Object(t)) = route(path) else {
            return bad_request(&format!("{path} is not an object's path"));
        };
        let Some(name) = t.name.clone() else {
            return bad_request(&format!("{path} is not an object's path"));
        };
        let status = t.sub.as_deref() == Some("status") && RESOURCES[t.res].status;
        self.kicked(|s| {
            let w = Writer {
                manager,
                force,
                status,
            };
            match s.apply(t.res, t.namespace.as_deref().unwrap_or(""), &name, obj, &w) {
                Ok((o, created)) => Reply {
                    code: if created { 201 } else { 200 },
                    body: o,
                },
                Err(e) => e,
            }
        })
    }

    /// See [`super::FakeKube::write_pod_log`].
    pub(crate) fn write_pod_log(
        &self,
        namespace: &str,
        name: &str,
        container: Option<&str>,
        text: &str,
    ) -> Result<(), String> {
        let mut s = self.lock();
        let pod = s
            .get(super::store::PODS, namespace, name)
            .map_err(|_| format!("no pod {namespace}/{name}"))?;
        let containers: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        let container = match container {
            Some(c) if containers.contains(&c) => c,
            Some(c) => return Err(format!("pod {namespace}/{name} has no container {c}")),
            None => containers
                .first()
                .copied()
                .ok_or_else(|| format!("pod {namespace}/{name} has no container"))?,
        };
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let line = cri_log::line(&cri_log::now_stamp(), "stdout", text.as_bytes());
        s.pod_logs
            .entry((uid.to_string(), container.to_string()))
            .or_default()
            .extend_from_slice(&line);
        Ok(())
    }

    /// Seeds `n` namespaces `seed-<i>`, each with a one-replica Deployment `app`.
    pub(crate) fn seed(&self, n: usize) {
        for i in 0..n {
            let ns = format!("seed-{i}");
            self.kicked(|s| s.ensure_namespace(&ns));
            let d = json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "app", "namespace": ns, "labels": {"app": "app"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
                    "template": {"metadata": {"labels": {"app": "app"}},
                        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}},
            });
            let _ = self.apply_as(
                "seed",
                &format!("/apis/apps/v1/namespaces/{ns}/deployments/app"),
                &d,
                true,
            );
        }
    }
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

#[derive(Deserialize)]
struct DigestBody {
    reference: String,
    digest: String,
}

#[derive(Deserialize)]
struct Enabled {
    enabled: bool,
}

#[derive(Deserialize)]
struct MisbehaveBody {
    namespace: String,
    workload: String,
    misbehaviour: Misbehaviour,
}

#[derive(Deserialize)]
struct ApplyBody {
    manager: String,
    path: String,
    object: Value,
    #[serde(default)]
    force: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunPodsBody {
    data_dir: std::path::PathBuf,
}

#[derive(Deserialize)]
struct PodLogBody {
    namespace: String,
    pod: String,
    #[serde(default)]
    container: Option<String>,
    text: String,
}

#[derive(Deserialize)]
struct SeedBody {
    namespaces: usize,
}

fn json_response(code: u16, body: &Value) -> Response {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap_or_default()))
        .unwrap_or_default()
}

fn done() -> Response {
    Response::builder()
        .status(204)
        .body(Body::empty())
        .unwrap_or_default()
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// Serves one control request.
pub(crate) fn serve(shared: &Shared, method: &str, path: &str, body: &[u8]) -> Response {
    let r = (|| -> Result<Response, String> {
        Ok(match (method, path) {
            ("POST", "/_fake/namespaces") => {
                let b: Named = parse(body)?;
                shared.kicked(|s| s.ensure_namespace(&b.name));
                done()
            }
            ("PUT", "/_fake/image-digests") => {
                let b: DigestBody = parse(body)?;
                shared.kicked(|s| s.digests.insert(b.reference, b.digest));
                done()
            }
            ("PUT", "/_fake/kubelet") => {
                let b: Enabled = parse(body)?;
                shared.kicked(|s| s.kubelet = b.enabled);
                done()
            }
            ("PUT", "/_fake/misbehaviour") => {
                let b: MisbehaveBody = parse(body)?;
                shared.kicked(|s| {
                    s.misbehaviour
                        .insert((b.namespace, b.workload), b.misbehaviour)
                });
                done()
            }
            ("POST", "/_fake/faults") => {
                let f: Fault = parse(body)?;
                shared.lock().faults.push(f);
                done()
            }
            ("DELETE", "/_fake/faults") => {
                shared.lock().faults.clear();
                done()
            }
            ("GET", "/_fake/requests") => {
                let r: Vec<RecordedRequest> = shared.lock().requests.clone();
                json_response(200, &serde_json::to_value(r).unwrap_or_default())
            }
            ("DELETE", "/_fake/requests") => {
                shared.lock().requests.clear();
                done()
            }
            ("POST", "/_fake/compact") => {
                shared.lock().compact();
                done()
            }
            ("POST", "/_fake/apply") => {
                let b: ApplyBody = parse(body)?;
                let r = shared.apply_as(&b.manager, &b.path, &b.object, b.force);
                json_response(r.code, &r.body)
            }
            ("GET", "/_fake/watches") => {
                let s = shared.lock();
                json_response(
                    200,
                    &json!({"opened": s.watches_opened, "open": s.watches_open}),
                )
            }
            ("PUT", "/_fake/run-pods") => {
                let b: RunPodsBody = parse(body)?;
                shared.run_pods(&b.data_dir).map_err(|e| e.to_string())?;
                done()
            }
            ("POST", "/_fake/pod-log") => {
                let b: PodLogBody = parse(body)?;
                shared.write_pod_log(&b.namespace, &b.pod, b.container.as_deref(), &b.text)?;
                done()
            }
            ("POST", "/_fake/seed") => {
                let b: SeedBody = parse(body)?;
                shared.seed(b.namespaces);
                done()
            }
            _ => json_response(
                404,
                &json!({"error": format!("no control endpoint {method} {path}")}),
            ),
        })
    })();
    r.unwrap_or_else(|e| json_response(400, &json!({ "error": e })))
}
