//! Deleting sessions, verified: `DELETE /v1/sessions/{id}` (`flotilla session
//! delete`), the retention pass (`[retention] after` of `sessions.toml`) and the
//! removal of mirrors no session uses any more (`[retention] mirror_grace`).
//!
//! A cleanup nobody measured may have removed nothing, so every one is measured:
//! the bytes and files under the session's directory before, then whether anything
//! is left after. Only when nothing is left are the store's rows deleted and
//! success answered ([`CleanupReport`]); otherwise the answer is a failure naming
//! what remains (500 `cleanup-incomplete`), and the rows stay so that the delete
//! can be tried again.
//!
//! What one session leaves, and what a delete does with it:
//! - its pin and push request in the repository's mirror (the API's): dropped.
//! - `<sessions dir>/<id>` (the tree and home, the session uid's; `run/` and the
//!   transcripts `runtime-N.jsonl`/`.stderr`, the API's): removed by the launcher
//!   (the only piece that may, [`crate::privsep::launcher`]), which measures it
//!   first and what is left after, and never follows a link: it walks from
//!   directory descriptors (`openat(O_NOFOLLOW)`, `unlinkat`), so a link the agent
//!   planted in its home or tree is removed, never what it points at, and entry by
//!   entry where a whole removal fails, so only what cannot go remains.
//! - the store's rows: the session, its events, its questions, its alert key and
//!   every credential its runtimes were given
//!   ([`AuthorityStore::delete_session`]).
//! - executor outputs are blobs named by their SHA-256, shared by every session
//!   (and by release artifacts) that produced the same bytes: they are not deleted;
//!   the report lists the ones this session referenced (`outputs_kept`).
//!
//! A session whose runtime runs is refused (409 `running`) unless `force`, which
//! kills the runtime first (the same kill as `DELETE /v1/sessions/{id}/runtime`)
//! and waits until its process is gone.

use super::lifecycle::{every_reconcile, kill_runtime};
use super::records::{load_session, sessions_of};
use crate::failure::{Answer, Failure};
use crate::sessions_config::SESSIONS_CONFIG_FILE;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use flotilla_api::sessions::{CleanupReport, MirrorReport, SessionDoc};
use flotilla_exec::this_process::now_ms;
use flotilla_sessions::clone_cache::{CloneCache, PIN_PREFIX};
use flotilla_sessions::runtime::Runtime;
use flotilla_store::authority::AuthorityStore;
use serde::Deserialize;
use std::collections::{BTreeSet, HashSet};
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long a forced delete waits for a killed runtime's process to be gone.
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// What is under a directory, measured without following symbolic links.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Sizes of the regular files and symbolic links (hard links counted once).
    pub bytes: u64,
    /// Entries that are not directories.
    pub files: u64,
}

/// Measures `root` (a file or a directory tree), never following a symbolic link;
/// `Usage::default()` when it does not exist.
///
/// # Errors
/// The first entry that cannot be read.
pub fn measure(root: &FsPath) -> std::io::Result<Usage> {
    use std::os::unix::fs::MetadataExt;
    let mut usage = Usage::default();
    let mut seen = HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.is_dir() {
            for e in std::fs::read_dir(&p)? {
                stack.push(e?.path());
            }
            continue;
        }
        usage.files += 1;
        if seen.insert((meta.dev(), meta.ino())) {
            usage.bytes += meta.len();
        }
    }
    Ok(usage)
}

/// Up to `max` paths under `root` (itself included), never following a link.
fn list(root: &FsPath, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if out.len() >= max {
            out.push("…".into());
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        out.push(p.display().to_string());
        if meta.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    out
}

/// One line of the cleanup's record, through `tracing` at `level` (`flotilla serve`
/// logs from `info` by default), prefixed `cleanup:`.
fn audit(level: tracing::Level, line: &str) {
    match level {
        tracing::Level::ERROR => tracing::error!("cleanup: {line}"),
        tracing::Level::WARN => tracing::warn!("cleanup: {line}"),
        _ => tracing::info!("cleanup: {line}"),
    }
}

fn internal(code: &str, message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::INTERNAL_SERVER_ERROR, code, message)
}

/// What removing one session's files did (blocking work).
struct Removed {
    removed: Vec<String>,
    pin_dropped: bool,
    refs_dropped: Vec<String>,
    /// Problems met on the way (the measurement after decides).
    problems: Vec<String>,
}

/// Removes session `id`'s mirror refs (the API's), then its whole directory
/// through the launcher (the tree and home are the session uid's: only root
/// removes them; the launcher measures before and after, never following a link).
fn remove_files(
    clones: &CloneCache,
    runtime: &dyn Runtime,
    repo: &str,
    id: u64,
    sdir: &FsPath,
) -> (Usage, Removed, Usage) {
    let sid = id.to_string();
    let mut problems = Vec::new();
    let mut removed: Vec<String> = std::fs::read_dir(sdir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect();
    removed.sort();
    let refs_dropped = match clones.drop_session_refs(repo, &sid) {
        Ok(r) => r,
        Err(e) => {
            problems.push(format!("dropping the mirror's refs: {e}"));
            Vec::new()
        }
    };
    let pin_dropped = refs_dropped.contains(&format!("{PIN_PREFIX}{sid}"));
    let (mut before, mut left) = (Usage::default(), Usage::default());
    if std::fs::symlink_metadata(sdir).is_ok() {
        match runtime.remove(id) {
            Ok(r) => {
                before = Usage {
                    bytes: r.bytes,
                    files: r.files,
                };
                left = Usage {
                    bytes: r.left_bytes,
                    files: r.left_files,
                };
                problems.extend(r.problem);
                removed.extend(r.elsewhere);
            }
            Err(e) => problems.push(format!("the runtime: {e}")),
        }
        if std::fs::symlink_metadata(sdir).is_err() {
            removed.push(sdir.display().to_string());
        }
    }
    (
        before,
        Removed {
            removed,
            pin_dropped,
            refs_dropped,
            problems,
        },
        left,
    )
}

/// Deletes session `id` with its files and rows, measured (see the module docs).
/// `force` kills a running runtime first; without it a running one is refused.
/// `why` is logged (`operator <name>`, `retention`).
///
/// # Errors
/// 404 `not-found`; 409 `running`; 409 `sessions-off`; 500 `runtime` (a killed
/// runtime would not go); 500 `cleanup-incomplete` naming what remains (the
/// session's rows are kept); 503 when the store fails.
pub(crate) async fn delete<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    force: bool,
    why: &str,
) -> Result<CleanupReport, Failure> {
    let sessions = sessions_of(state)?;
    let lock = sessions.lock_of(id);
    // Boots and turn ends of this session wait (or are waited for): nothing
    // boots a runtime in the directory while it is removed.
    let _held = lock.lock().await;
    let (doc, _) = load_session(state, id).await?;
    let mut report = CleanupReport {
        id,
        ..CleanupReport::default()
    };
    if let Some(rt) = doc.runtime.filter(|r| sessions.alive(r)) {
        if !force {
            return Err(Failure::new(
                StatusCode::CONFLICT,
                "running",
                format!(
                    "session {id}'s runtime runs ({}): stop it first (`flotilla session stop {id}`) or delete with --force",
                    rt.describe()
                ),
            ));
        }
        // A failure shows as the runtime still there below.
        let _ = kill_runtime(sessions, &rt).await;
        let deadline = tokio::time::Instant::now() + KILL_WAIT;
        while sessions.alive(&rt) {
            if tokio::time::Instant::now() >= deadline {
                return Err(internal(
                    "runtime",
                    format!(
                        "session {id}'s runtime ({}) is still there {} s after it was stopped: nothing was deleted",
                        rt.describe(),
                        KILL_WAIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        report.runtime_killed = Some(rt.pid);
    }
    sessions.live.lock().expect("not poisoned").remove(&id);
    let sdir = sessions.session_dir(id);
    let clones = sessions.clones.clone();
    let repo = doc.repo.clone();
    let dir = sdir.clone();
    let runtime = sessions.runtime.clone();
    // Measured by the launcher before anything goes: a cleanup must be able to
    // say what it freed, and what is left.
    let (before, removed, left) = tokio::task::spawn_blocking(move || {
        remove_files(&clones, runtime.as_ref(), &repo, id, &dir)
    })
    .await
    .map_err(|e| internal("cleanup-incomplete", format!("session {id}: {e}")))?;
    let problems = if removed.problems.is_empty() {
        String::new()
    } else {
        format!("; {}", removed.problems.join("; "))
    };
    if std::fs::symlink_metadata(&sdir).is_ok() {
        let paths = list(&sdir, 20);
        let message = format!(
            "session {id} is not deleted: {} byte(s) in {} file(s) remain under {} ({}){problems}; its rows are kept: delete it again once fixed",
            left.bytes,
            left.files,
            sdir.display(),
            paths.join(", "),
        );
        audit(tracing::Level::ERROR, &message);
        return Err(internal("cleanup-incomplete", message));
    }
    if !problems.is_empty() {
        // Its files are gone, but a mirror ref could not be dropped or listed:
        // said, and the delete goes on (the ref holds no file of the session's).
        audit(
            tracing::Level::WARN,
            &format!("session {id}: its files are gone, but{}", &problems[1..]),
        );
    }
    report.freed_bytes = before.bytes;
    report.freed_files = before.files;
    report.removed = removed.removed;
    report.pin_dropped = removed.pin_dropped;
    report.refs_dropped = removed.refs_dropped;
    report.outputs_kept = outputs_of(state, id).await?;
    let rows = state.store.delete_session(id).await?;
    report.events = rows.events;
    report.questions = rows.questions;
    report.credentials = rows.credentials;
    audit(
        tracing::Level::INFO,
        &format!(
            "session {id} deleted ({why}): {}",
            serde_json::to_string(&report).expect("serialises")
        ),
    );
    Ok(report)
}

/// The executor outputs session `id`'s events name.
async fn outputs_of<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<Vec<String>, Failure> {
    let mut out = BTreeSet::new();
    for e in state.store.session_events(id, 0).await? {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&e.doc) else {
            continue;
        };
        if v["kind"] == "exec" {
            for o in v["outputs"].as_array().into_iter().flatten() {
                if let Some(s) = o.as_str() {
                    out.insert(s.to_string());
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Removes the mirrors no remaining session uses and that have not been used for
/// `[retention] mirror_grace` (the clone cache decides under the repository's
/// lock), measured. Failures are logged and skipped.
pub(crate) async fn prune_mirrors<S: AuthorityStore>(state: &AppState<S>) -> Vec<MirrorReport> {
    let Some(sessions) = state.sessions.as_ref() else {
        return Vec::new();
    };
    // Repositories a remaining session has a tree of: never touched, pin or not.
    let Ok(all) = state.store.sessions().await else {
        return Vec::new();
    };
    let used: HashSet<String> = all
        .iter()
        .filter_map(|r| serde_json::from_str::<SessionDoc>(&r.doc).ok())
        .map(|d| d.repo)
        .collect();
    let grace = sessions.config.retention.mirror_grace;
    let clones = sessions.clones.clone();
    tokio::task::spawn_blocking(move || {
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(clones.root()) else {
            return out;
        };
        let mut repos: Vec<String> = rd
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".git"))
                    .map(str::to_owned)
            })
            .filter(|r| !used.contains(r))
            .collect();
        repos.sort();
        for repo in repos {
            // Cheap checks first; the clone cache checks again under the lock.
            match clones.mirror_last_used(&repo) {
                Ok(Some(t)) if t < cutoff => {}
                _ => continue,
            }
            let Ok(path) = clones.mirror_path(&repo) else {
                continue;
            };
            let Ok(before) = measure(&path) else { continue };
            let not_removed = |why: String| {
                let left = measure(&path).unwrap_or_default();
                audit(
                    tracing::Level::ERROR,
                    &format!(
                        "mirror {} not removed: {} byte(s) in {} file(s) remain: {why}",
                        path.display(),
                        left.bytes,
                        left.files
                    ),
                );
            };
            match clones.remove_mirror(&repo, cutoff) {
                Ok(Some(p)) if std::fs::symlink_metadata(&p).is_ok() => {
                    not_removed("still there after removal".into());
                }
                Ok(Some(p)) => {
                    let r = MirrorReport {
                        repo: repo.clone(),
                        path: p.display().to_string(),
                        freed_bytes: before.bytes,
                        freed_files: before.files,
                    };
                    audit(
                        tracing::Level::INFO,
                        &format!(
                            "mirror of {repo} removed (no session uses it): {}",
                            serde_json::to_string(&r).expect("serialises")
                        ),
                    );
                    out.push(r);
                }
                Ok(None) => {}
                Err(e) => not_removed(e.to_string()),
            }
        }
        out
    })
    .await
    .unwrap_or_default()
}

/// One retention pass: deletes every session idle for `[retention] after` whose
/// runtime does not run (never forced), then prunes mirrors; the reports.
pub(crate) async fn retention_pass<S: AuthorityStore>(state: &AppState<S>) -> Vec<CleanupReport> {
    let Some(sessions) = state.sessions.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(after) = sessions.config.retention.after {
        let cutoff = now_ms() - after.as_millis() as i64;
        let all = match state.store.sessions().await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!("retention: listing sessions: {e}");
                return out;
            }
        };
        for rec in all {
            if rec.updated_ms.max(rec.created_ms) > cutoff {
                continue;
            }
            let Ok(doc) = serde_json::from_str::<SessionDoc>(&rec.doc) else {
                continue;
            };
            if doc.runtime.as_ref().is_some_and(|r| sessions.alive(r)) {
                continue;
            }
            // Its last event counts as activity too (a gate call, an answer).
            let last_event = match state.store.session_events(rec.id, 0).await {
                Ok(ev) => ev.last().map_or(0, |e| e.at_ms),
                Err(e) => {
                    tracing::error!("retention: session {}: {e}", rec.id);
                    continue;
                }
            };
            if last_event > cutoff {
                continue;
            }
            match delete(state, rec.id, false, "retention").await {
                Ok(r) => out.push(r),
                Err(e) => tracing::error!("retention: session {}: {}", rec.id, e.message()),
            }
        }
    }
    let mirrors = prune_mirrors(state).await;
    if let Some(last) = out.last_mut() {
        last.mirrors_removed = mirrors;
    }
    out
}

/// Runs `retention_pass` every [`crate::sessions::SessionsConfig::reconcile_every`],
/// beside the sessions' reconciler (`flotilla serve`).
pub fn spawn_retention<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    every_reconcile(state, |state| async move {
        retention_pass(&state).await;
    });
}

/// Query of `DELETE /v1/sessions/{id}`.
#[derive(Debug, Default, Deserialize)]
pub struct DeleteQuery {
    /// Kill a running runtime first (else a running session is refused).
    #[serde(default)]
    pub force: bool,
}

/// `DELETE /v1/sessions/{id}`: deletes the session, its files (tree, home, run
/// directory, transcripts), its mirror refs, its rows and credentials, measured;
/// then mirrors no session uses any more. Operators only.
#[utoipa::path(delete, path = "/v1/sessions/{id}",
    params(("id" = u64, Path, description = "the session"),
           ("force" = Option<bool>, Query, description = "kill a running runtime first")),
    responses((status = 200, body = CleanupReport), (status = 404, body = crate::api::ApiError),
              (status = 409, body = crate::api::ApiError, description = "its runtime runs (without force), or sessions are off"),
              (status = 500, body = crate::api::ApiError, description = "`cleanup-incomplete`: something remains (named); the session is kept")))]
pub async fn delete_session<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    Query(q): Query<DeleteQuery>,
    headers: HeaderMap,
) -> Answer<CleanupReport> {
    let by = state.operator(&headers).await?;
    if state.sessions.is_none() {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "sessions-off",
            format!("agent sessions are off: the authority has no {SESSIONS_CONFIG_FILE}"),
        ));
    }
    // In a task of its own, awaited: a client that goes away mid-way does not cut
    // a delete in half (files gone, rows kept).
    let task_state = state.clone();
    let report = tokio::spawn(async move {
        let mut report = delete(&task_state, id, q.force, &format!("operator {by}")).await?;
        report.mirrors_removed = prune_mirrors(&task_state).await;
        Ok::<_, Failure>(report)
    })
    .await
    .map_err(|e| internal("cleanup-incomplete", format!("session {id}: {e}")))??;
    Ok(Json(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_counts_files_and_links_never_what_a_link_points_at() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![0u8; 100_000]).unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/b/f"), b"12345").unwrap();
        std::fs::hard_link(d.path().join("a/b/f"), d.path().join("a/g")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("a/dir-link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("big"), d.path().join("file-link")).unwrap();
        let u = measure(d.path()).unwrap();
        assert_eq!(u.files, 4, "{u:?}");
        let links = outside.path().as_os_str().len() as u64
            + outside.path().join("big").as_os_str().len() as u64;
        assert_eq!(u.bytes, 5 + links, "{u:?}");
        assert_eq!(measure(&d.path().join("none")).unwrap(), Usage::default());
    }
}
