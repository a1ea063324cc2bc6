//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: a container's log, `text/plain`.
//!
//! Copied behaviour (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#read-log-of-the-specified-pod,
//! the API server's `validateContainer` and the kubelet's
//! `validateContainerLogStatus`):
//! - `container`: may be left out when the pod has exactly one container (init
//!   containers not counted); else 400 `a container name must be specified for pod
//!   P, choose one of: [init… main…]`; a name the pod lacks: 400 `container C is
//!   not valid for pod P`;
//! - a container that has not started: 400 `container "C" in pod "P" is waiting to
//!   start: REASON` (`PodInitializing`, `ContainerCreating`,
//!   `CreateContainerConfigError`);
//! - `follow=true`: the log so far, then what the container writes, as a chunked
//!   body that ends when the container has ended (or the pod is gone);
//! - `tailLines=N`: from the N-th line from the end; `limitBytes=N`: at most N
//!   bytes in all;
//! - `timestamps=true`: each line after the time the runtime read it (RFC 3339,
//!   nanoseconds) and a space; `sinceTime` (RFC 3339) or `sinceSeconds`: only the
//!   lines read at or after it (both: 400);
//! - stdout and stderr are one stream, as the container runtime writes them;
//! - `previous=true`: 400 `previous terminated container "C" in pod "P" not found`
//!   (containers never restart here).
//!
//! The log is read from the runtime's file in the CRI logging format
//! ([`super::cri_log`]): the process kubelet's, or for a pod of the simulated
//! kubelet the lines a test wrote ([`super::FakeKube::write_pod_log`]; none: empty).

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::response::Response;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::cri_log;
use super::paths::Query;
use super::status::{bad_request, Reply};
use super::store::{Key, PODS};
use super::Shared;

/// How often a followed log is read again at its end.
pub const FOLLOW_POLL: Duration = Duration::from_millis(20);

fn names(pod: &Value, field: &str) -> Vec<String> {
    pod["spec"][field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// The container's status in the pod, if any.
fn status_of<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|f| pod["status"][*f].as_array().into_iter().flatten())
        .find(|s| s["name"] == container)
}

/// Whether the log will grow no more: the container ended or the pod is gone.
fn finished(shared: &Shared, key: &Key, uid: &str, container: &str) -> bool {
    let s = shared.lock();
    match s.objects.get(key) {
        Some(p) if p["metadata"]["uid"] == uid => {
            status_of(p, container).is_some_and(|st| st["state"]["terminated"].is_object())
        }
        _ => true,
    }
}

fn text(body: Body) -> Response {
    Response::builder()
        .status(200)
        .header("content-type", "text/plain")
        .body(body)
        .unwrap_or_default()
}

/// Serves a log request: the response, or the Status of failure.
pub(crate) fn serve(
    shared: &Arc<Shared>,
    namespace: &str,
    name: &str,
    q: &Query,
) -> Result<Response, Reply> {
    let key = Key {
        res: PODS,
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let pod = shared.lock().get(PODS, namespace, name)?;
    let mains = names(&pod, "containers");
    let mut all = names(&pod, "initContainers");
    all.extend(mains.iter().cloned());
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if all.iter().any(|n| n == c) => c.to_string(),
        Some(c) => {
            return Err(bad_request(&format!(
                "container {c} is not valid for pod {name}"
            )))
        }
        None if mains.len() == 1 => mains[0].clone(),
        None if mains.is_empty() => {
            return Err(bad_request(&format!(
                "a container name must be specified for pod {name}"
            )))
        }
        None => {
            return Err(bad_request(&format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all.join(" ")
            )))
        }
    };
    if q.get("previous") == Some("true") {
        return Err(bad_request(&format!(
            "previous terminated container \"{container}\" in pod \"{name}\" not found"
        )));
    }
    let state = status_of(&pod, &container).map(|s| s["state"].clone());
    let waiting = match &state {
        None => Some("ContainerCreating".to_string()),
        Some(st) if st["waiting"].is_object() => Some(
            st["waiting"]["reason"]
                .as_str()
                .unwrap_or("ContainerCreating")
                .to_string(),
        ),
        _ => None,
    };
    if let Some(reason) = waiting {
        return Err(bad_request(&format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
        )));
    }
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let source = match shared
        .process_kubelet()
        .map(|pk| pk.log_path(&uid, &container))
        .filter(|p| p.is_file())
    {
        Some(path) => Source::File(path),
        None => Source::Memory(uid.clone(), container.clone()),
    };
    let shape = Shape::of(q)?;
    let follow = q.get("follow") == Some("true");
    let tail = q.get("tailLines").and_then(|t| t.parse::<usize>().ok());
    let mut limit = q
        .get("limitBytes")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let content = source.read_from(shared, 0);
    let (mut entries, used) = cri_log::parse_all(&content);
    if let Some(n) = tail {
        entries.drain(..entries.len().saturating_sub(n));
    }
    let mut first = shape.render(&entries);
    first.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    if !follow {
        return Ok(text(Body::from(first)));
    }
    limit -= first.len() as u64;
    let mut offset = used as u64;
    let (mut writer, reader) = tokio::io::duplex(64 * 1024);
    let shared = shared.clone();
    tokio::spawn(async move {
        if writer.write_all(&first).await.is_err() {
            return;
        }
        while limit > 0 {
            // Whether it had ended before this read: then this read has all.
            let ended = finished(&shared, &key, &uid, &container);
            let got = source.read_from(&shared, offset);
            let (entries, used) = cri_log::parse_all(&got);
            offset += used as u64;
            let mut got = shape.render(&entries);
            got.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            limit -= got.len() as u64;
            if !got.is_empty() && writer.write_all(&got).await.is_err() {
                return;
            }
            if ended {
                break;
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
        let _ = writer.shutdown().await;
    });
    Ok(text(Body::from_stream(tokio_util::io::ReaderStream::new(
        reader,
    ))))
}

/// Where a container's log is kept: the process kubelet's file, or the simulated
/// kubelet's lines in the fake's state ([`super::FakeKube::write_pod_log`]).
enum Source {
    File(PathBuf),
    /// (pod uid, container)
    Memory(String, String),
}

impl Source {
    /// The log's bytes from `offset` on (none when it cannot be read).
    fn read_from(&self, shared: &Shared, offset: u64) -> Vec<u8> {
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        match self {
            Source::File(path) => {
                let mut got = Vec::new();
                if let Ok(mut f) = std::fs::File::open(path) {
                    if f.seek(SeekFrom::Start(offset)).is_ok() {
                        let _ = f.read_to_end(&mut got);
                    }
                }
                got
            }
            Source::Memory(uid, container) => shared
                .lock()
                .pod_logs
                .get(&(uid.clone(), container.clone()))
                .and_then(|b| b.get(at..))
                .map(<[u8]>::to_vec)
                .unwrap_or_default(),
        }
    }
}

/// How lines are shown: `timestamps`, and which are left out (`sinceTime`,
/// `sinceSeconds`: lines written before it).
struct Shape {
    timestamps: bool,
    since_ns: Option<u128>,
}

impl Shape {
    /// The query's; a `sinceTime` that is not RFC 3339, or both `since…` given, is
    /// a 400 as the API server's validation answers it.
    fn of(q: &Query) -> Result<Shape, Reply> {
        let epoch_ns = |t: SystemTime| {
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        };
        let since_ns = match (q.get("sinceTime"), q.get("sinceSeconds")) {
            (Some(_), Some(_)) => {
                return Err(bad_request(
                    "at most one of sinceTime or sinceSeconds may be specified",
                ))
            }
            (Some(t), None) => Some(epoch_ns(
                humantime::parse_rfc3339_weak(t)
                    .map_err(|_| bad_request(&format!("sinceTime: invalid RFC 3339 time: {t}")))?,
            )),
            (None, Some(s)) => {
                let s: u64 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| bad_request("sinceSeconds: must be greater than 0"))?;
                Some(epoch_ns(
                    SystemTime::now()
                        .checked_sub(Duration::from_secs(s))
                        .unwrap_or(UNIX_EPOCH),
                ))
            }
            (None, None) => None,
        };
        Ok(Shape {
            timestamps: q.get("timestamps") == Some("true"),
            since_ns,
        })
    }

    /// The response's bytes for `entries`: each line's text (after its stamp and a
    /// space with `timestamps`), the ones before `since` left out.
    fn render(&self, entries: &[cri_log::Entry]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            if self.since_ns.is_some_and(|s| e.at_ns < s) {
                continue;
            }
            if self.timestamps {
                out.extend_from_slice(e.stamp.as_bytes());
                out.push(b' ');
            }
            out.extend_from_slice(&e.text);
            out.push(b'\n');
        }
        out
    }
}
