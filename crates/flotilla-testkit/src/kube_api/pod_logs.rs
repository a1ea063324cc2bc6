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
//! - stdout and stderr are one stream, as the container runtime writes them;
//! - `previous=true`: 400 `previous terminated container "C" in pod "P" not found`
//!   (containers never restart here); `timestamps` is ignored.
//!
//! A pod of the simulated kubelet (not run as processes) has an empty log.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

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

/// Where the last `n` lines of `text` start.
fn tail_start(text: &[u8], n: usize) -> usize {
    if n == 0 {
        return text.len();
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    0
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
    let path = shared
        .process_kubelet()
        .map(|pk| pk.log_path(&uid, &container))
        .filter(|p| p.is_file());
    let Some(path) = path else {
        return Ok(text(Body::empty()));
    };
    let follow = q.get("follow") == Some("true");
    let tail = q.get("tailLines").and_then(|t| t.parse::<usize>().ok());
    let mut limit = q
        .get("limitBytes")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let content = std::fs::read(&path).map_err(|e| bad_request(&e.to_string()))?;
    let start = tail.map_or(0, |n| tail_start(&content, n));
    let first = &content[start..];
    let first = &first[..first
        .len()
        .min(usize::try_from(limit).unwrap_or(usize::MAX))];
    if !follow {
        return Ok(text(Body::from(first.to_vec())));
    }
    limit -= first.len() as u64;
    let first = first.to_vec();
    let mut offset = content.len() as u64;
    let (mut writer, reader) = tokio::io::duplex(64 * 1024);
    let shared = shared.clone();
    tokio::spawn(async move {
        if writer.write_all(&first).await.is_err() {
            return;
        }
        let Ok(mut file) = std::fs::File::open(&path) else {
            return;
        };
        let mut buf = vec![0u8; 64 * 1024];
        while limit > 0 {
            // Whether it had ended before this read: then this read has all.
            let ended = finished(&shared, &key, &uid, &container);
            let mut got = Vec::new();
            if file.seek(SeekFrom::Start(offset)).is_ok() {
                while let Ok(n) = file.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
            }
            offset += got.len() as u64;
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
