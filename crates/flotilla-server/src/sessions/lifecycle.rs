//! A session runtime's lifecycle: creating a session, delivering a message (which
//! boots a runtime through the launcher), reaping its end, reconciling what runs
//! against the records, and booting sessions that waited for capacity.

use super::records::{event, load_session, save_session, sessions_of};
use super::state::{Live, Sessions};
use crate::failure::invalid;
use flotilla_api::sessions::{CreateSessionRequest, RuntimeEnd, RuntimeRecord, SessionDoc};

use crate::failure::Failure;
use crate::sessions_config::*;
use crate::state::AppState;
use axum::http::StatusCode;
use flotilla_exec::this_process::now_ms;
use flotilla_sessions::clone_cache::SessionTree;
use flotilla_sessions::hook::HookHandler;
use flotilla_sessions::runtime::{HomeReset, Network, Runtime, RuntimeKind, StartSpec, Started};
use flotilla_store::authority::{AuthorityStore, Principal};
use std::path::PathBuf;
use std::sync::Arc;

/// Reconciles session `id` against its runtime's process (under its lock): a
/// runtime that no longer runs is cleared (`gone`), one idle too long is torn
/// down. Returns the document and whether a runtime runs.
pub(crate) async fn reconcile<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<(SessionDoc, i64, bool), Failure> {
    let sessions = sessions_of(state)?;
    let lock = sessions.lock_of(id);
    // A session whose lock is held is being booted or ended: read it as it is
    // (liveness measured now) rather than wait behind that (a slow clone).
    let Ok(_held) = lock.try_lock() else {
        let (doc, created_ms) = load_session(state, id).await?;
        let running = doc.runtime.as_ref().is_some_and(|r| sessions.alive(r));
        return Ok((doc, created_ms, running));
    };
    let (mut doc, created_ms) = load_session(state, id).await?;
    let Some(rt) = doc.runtime.clone() else {
        return Ok((doc, created_ms, false));
    };
    if !sessions.alive(&rt) {
        // Ended, and its end is still to be read: by this process's reaper (a
        // pod's last log lines, its termination message), or from a pod an earlier
        // authority started (the reconciler follows it). Shown as running until
        // that end is recorded, never as the previous runtime's end or as gone.
        let reaping = sessions
            .live
            .lock()
            .expect("not poisoned")
            .get(&id)
            .is_some_and(|l| l.boot == rt.boot);
        if reaping || !sessions.runtime.settled(&super::docs::running_of(&rt)) {
            return Ok((doc, created_ms, true));
        }
        let ev = serde_json::json!({"kind": "runtime-gone", "pid": rt.pid, "boot": rt.boot});
        end_runtime(state, id, &mut doc, "gone", ev).await?;
        return Ok((doc, created_ms, false));
    }
    // Its last activity: its last gate call, or the last time it wrote output.
    let asked = sessions
        .live
        .lock()
        .expect("not poisoned")
        .get(&id)
        .map(|l| l.activity_ms)
        .unwrap_or(rt.booted_ms);
    let wrote = std::fs::metadata(
        sessions
            .session_dir(id)
            .join(format!("runtime-{}.jsonl", rt.boot)),
    )
    .and_then(|m| m.modified())
    .ok()
    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    .map_or(0, |d| d.as_millis() as i64);
    let activity = asked.max(wrote).max(rt.booted_ms);
    let idle = sessions.config.runtime.idle_timeout.as_millis() as i64;
    if now_ms() - activity > idle {
        if kill_runtime(sessions, &rt).await.is_err() {
            // Still running: torn down at the next pass (its credential holds
            // until then, as the runtime does).
            return Ok((doc, created_ms, true));
        }
        let ev = serde_json::json!({"kind": "runtime-torn-down", "why": "idle", "pid": rt.pid});
        end_runtime(state, id, &mut doc, "idle", ev).await?;
        return Ok((doc, created_ms, false));
    }
    Ok((doc, created_ms, true))
}

/// Records that session `id`'s runtime is over (`how`: `gone`, `idle`,
/// `stopped`), its credential with it, and logs `ev`. The session's lock is held.
pub(crate) async fn end_runtime<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    doc: &mut SessionDoc,
    how: &str,
    ev: serde_json::Value,
) -> Result<(), Failure> {
    doc.runtime = None;
    doc.token_hash = None;
    doc.last_end = Some(RuntimeEnd {
        at_ms: now_ms(),
        code: None,
        how: how.into(),
        detail: None,
    });
    if let Some(sessions) = state.sessions.as_ref() {
        sessions.live.lock().expect("not poisoned").remove(&id);
    }
    save_session(state, id, doc).await?;
    event(state, id, ev).await
}

/// Stops runtime `rt` through the runtime that started it: for a local one the
/// launcher, the only piece that may signal it (the sandbox dies with bwrap,
/// `--die-with-parent`, and with it every process inside, `--unshare-pid`); for a
/// pod, its deletion. Why it could not, as a sentence (it still runs).
pub(crate) async fn kill_runtime(sessions: &Sessions, rt: &RuntimeRecord) -> Result<(), String> {
    if !sessions.alive(rt) {
        return Ok(());
    }
    let running = super::docs::running_of(rt);
    on_runtime(sessions, move |r| r.stop(&running))
        .await
        .map_err(|e| {
            tracing::warn!("stopping runtime {}: {e}", rt.describe());
            format!("stopping its runtime ({}): {e}", rt.describe())
        })
}

/// A random UUID (version 4, RFC 9562) for Claude Code's `--session-id`.
fn new_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

pub(crate) async fn create<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    req: CreateSessionRequest,
    by: String,
    alert: Option<String>,
) -> Result<(u64, bool), Failure> {
    let sessions = sessions_of(state)?;
    if !sessions.config.repos.contains_key(&req.repo) {
        return Err(invalid(format!(
            "no repository `{}` in {SESSIONS_CONFIG_FILE} (known: {})",
            req.repo,
            sessions
                .config
                .repos
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let host = req.host.unwrap_or_else(|| "local".into());
    if host != "local" {
        return Err(invalid(format!(
            "runtimes run on the authority's host only (`--host local`), not `{host}`"
        )));
    }
    let doc = SessionDoc {
        repo: req.repo,
        host,
        mode: req.mode.unwrap_or_default(),
        created_by: by.clone(),
        agent_session: new_uuid(),
        prompt: req.prompt.clone(),
        tree: None,
        base_commit: None,
        tree_branch: None,
        runtime: None,
        boots: 0,
        last_end: None,
        pending: Vec::new(),
        observed_mode: None,
        alert: alert.clone(),
        token_hash: None,
        uid: None,
        waiting_for_capacity: false,
        resume_after: false,
    };
    let created = state
        .store
        .create_session(
            serde_json::to_string(&doc).expect("serialises"),
            alert,
            now_ms(),
        )
        .await?;
    if !created.created {
        return Ok((created.id, false));
    }
    event(
        state,
        created.id,
        serde_json::json!({"kind": "created", "by": by, "mode": doc.mode, "repo": doc.repo}),
    )
    .await?;
    if let Some(p) = req.prompt {
        deliver_detached(state, created.id, Some(p), false)
            .await
            .map_err(|mut e| {
                // The session is there: say so, and which one.
                e.1.message = format!(
                    "session {} was created, but its first runtime did not start (the message waits for the next): {}",
                    created.id, e.1.message
                );
                e
            })?;
    }
    Ok((created.id, true))
}

/// Gives session `id` a message (or, with `None`, resumes it after an answer):
/// boots a runtime when none runs, else keeps the message for the next turn.
pub(crate) async fn deliver<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    text: Option<String>,
    resume: bool,
) -> Result<(), Failure> {
    // Reconciled first (a dead runtime cleared), then decided under the
    // session's lock on the runtime's liveness now.
    reconcile(state, id).await?;
    let sessions = sessions_of(state)?;
    let lock = sessions.lock_of(id);
    let _held = lock.lock().await;
    let (mut doc, _) = load_session(state, id).await?;
    if let Some(t) = &text {
        event(state, id, serde_json::json!({"kind": "message", "text": t})).await?;
    }
    if doc.runtime.as_ref().is_some_and(|r| sessions.alive(r)) {
        match text {
            Some(t) => doc.pending.push(t),
            // An answer while the turn that asked is still ending: resume after.
            None if resume => doc.resume_after = true,
            None => return Ok(()),
        }
        save_session(state, id, &doc).await?;
        return Ok(());
    }
    if text.is_none() && doc.pending.is_empty() && !resume && !doc.resume_after {
        // Nothing to give a runtime (the messages were taken meanwhile).
        return Ok(());
    }
    let resume = resume || doc.resume_after;
    let mut messages = std::mem::take(&mut doc.pending);
    messages.extend(text);
    // Capacity is decided and reserved in one step (runtimes running plus boots
    // in progress), so concurrent boots cannot all pass the check; a slow boot
    // holds its reservation, not a lock the others wait on.
    let reserved = {
        let live = sessions.live.lock().expect("not poisoned").len();
        let mut booting = sessions.booting.lock().expect("not poisoned");
        if live + *booting < sessions.config.runtime.max_runtimes {
            *booting += 1;
            true
        } else {
            false
        }
    };
    if !reserved {
        // At capacity: the messages wait; the reconciler boots this session when
        // a runtime ends.
        doc.pending = messages;
        doc.waiting_for_capacity = true;
        doc.resume_after |= resume;
        save_session(state, id, &doc).await?;
        event(
            state,
            id,
            serde_json::json!({"kind": "waiting-for-capacity", "max_runtimes": sessions.config.runtime.max_runtimes}),
        )
        .await?;
        return Ok(());
    }
    doc.waiting_for_capacity = false;
    let kept = messages.clone();
    let booted = boot(state, id, &mut doc, messages).await;
    *sessions.booting.lock().expect("not poisoned") -= 1;
    match booted {
        Ok(()) => Ok(()),
        Err(e) => {
            // Nothing is lost: the messages wait for the next boot.
            let (mut fresh, _) = load_session(state, id).await?;
            fresh.pending = kept;
            fresh.pending.append(&mut doc.pending);
            // Its state says so (`failed`), not the last runtime's end.
            fresh.last_end = Some(RuntimeEnd {
                at_ms: now_ms(),
                code: None,
                how: "boot-failed".into(),
                detail: Some(e.message().to_string()),
            });
            save_session(state, id, &fresh).await?;
            event(
                state,
                id,
                serde_json::json!({"kind": "boot-failed", "error": e.message()}),
            )
            .await?;
            Err(e)
        }
    }
}

/// [`deliver`] in a task of its own, awaited: a client that goes away mid-way
/// (its request dropped) does not cut a delivery in half and lose a message.
pub(crate) async fn deliver_detached<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    text: Option<String>,
    resume: bool,
) -> Result<(), Failure> {
    let state = state.clone();
    tokio::spawn(async move { deliver(&state, id, text, resume).await })
        .await
        .map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "runtime",
                format!("session {id}: delivering a message: {e}"),
            )
        })?
}

/// The real uids of every process of this host (`/proc/*/status`).
fn uids_in_use() -> std::collections::HashSet<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// One call of the sessions' runtime (blocking: a socket round trip to the root
/// launcher for the local one), off the async runtime's workers.
pub(crate) async fn on_runtime<T: Send + 'static>(
    sessions: &Sessions,
    call: impl FnOnce(&dyn Runtime) -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let runtime = sessions.runtime.clone();
    tokio::task::spawn_blocking(move || call(runtime.as_ref()))
        .await
        .map_err(std::io::Error::other)?
}

/// Session `id`'s uid: the one it has, else the lowest of `[runtime] uids` that no
/// other session holds and no account of this host has (saved in its document).
async fn session_uid<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    doc: &mut SessionDoc,
) -> Result<u32, Failure> {
    if let Some(u) = doc.uid {
        return Ok(u);
    }
    let sessions = sessions_of(state)?;
    let _held = sessions.uid_allocation.lock().await;
    let taken: std::collections::HashSet<u32> = state
        .store
        .sessions()
        .await?
        .iter()
        .filter(|r| r.id != id)
        .filter_map(|r| serde_json::from_str::<SessionDoc>(&r.doc).ok()?.uid)
        .collect();
    let (first, last) = sessions.uids;
    // Also skipped: a uid any process runs as (another authority on this host, or
    // a runtime of a session this one forgot).
    let running = uids_in_use();
    let free = (first..=last).find(|u| {
        !taken.contains(u)
            && !running.contains(u)
            && nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*u))
                .ok()
                .flatten()
                .is_none()
    });
    let Some(uid) = free else {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "no-uid",
            format!(
                "every uid of [runtime] uids ({first}-{last}) belongs to a session or an account: delete old sessions or widen the range"
            ),
        ));
    };
    doc.uid = Some(uid);
    save_session(state, id, doc).await?;
    event(state, id, serde_json::json!({"kind": "uid", "uid": uid})).await?;
    Ok(uid)
}

/// Boots a runtime for session `id` (its lock held, none running): makes the tree
/// and home on the first boot, writes the runtime's files, starts the sandbox and a
/// task that reaps it.
///
/// What the authority writes for a runtime lives in `<session>/run/`, a directory
/// of root's the agent can read but not change (never in the agent's writable
/// home, where a symlink could redirect a write of root's): the gate's hook
/// settings, the CA, the session's credential (readable by the runtime user only)
/// and the turn's prompt (given on stdin, never on a command line that `ps` shows).
pub(crate) async fn boot<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    doc: &mut SessionDoc,
    messages: Vec<String>,
) -> Result<(), Failure> {
    let sessions = sessions_of(state)?;
    let sdir = sessions.session_dir(id);
    let home = sdir.join("home");
    let tree = sdir.join("tree");
    let run = sdir.join("run");
    let internal = |what: &str, e: &dyn std::fmt::Display| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "runtime",
            format!("session {id}: {what}: {e}"),
        )
    };
    let legacy = doc.uid.is_none() && doc.tree.is_some();
    let uid = session_uid(state, id, doc).await?;
    // Made here (as the API user), then given to the session's uid by the launcher
    // (the only root piece): when made, and for a session from before uids.
    let mut give = legacy;
    let on_cluster = sessions.runtime.kind() == RuntimeKind::Kubernetes;
    if doc.tree.is_none() {
        let repo = sessions.config.repos[&doc.repo].clone();
        let clones = sessions.clones.clone();
        let name = doc.repo.clone();
        let dest = tree.clone();
        let sid = id.to_string();
        let made = tokio::task::spawn_blocking(move || {
            let base = repo.base.as_deref();
            if on_cluster {
                // The pod's init container makes the tree from a bundle of this
                // pin (`GET /v1/session/tree`): only the pin is made here.
                clones
                    .pin_session(&name, &repo.url, &sid, base)
                    .map(|(base_commit, branch)| SessionTree {
                        path: dest,
                        base_commit,
                        branch,
                    })
            } else {
                clones.session_tree(&name, &repo.url, &sid, &dest, base)
            }
        })
        .await
        .map_err(|e| internal("making its tree", &e))?
        .map_err(|e| internal("making its tree", &e))?;
        give = true;
        doc.tree = Some(made.path.display().to_string());
        doc.base_commit = Some(made.base_commit.clone());
        doc.tree_branch = made.branch;
        save_session(state, id, doc).await?;
        let by = if on_cluster { "runtime" } else { "authority" };
        event(
            state,
            id,
            serde_json::json!({"kind": "tree", "path": made.path, "base": made.base_commit, "made_by": by}),
        )
        .await?;
    }
    if !home.exists() && !on_cluster {
        std::fs::create_dir_all(&home).map_err(|e| internal("making its home", &e))?;
        give = true;
    }
    if on_cluster && !sdir.exists() {
        // The authority's own copies (outputs, run files) of a pod's session.
        std::fs::create_dir_all(&sdir).map_err(|e| internal("making its directory", &e))?;
    }
    if give {
        // Its own only (0700); the session's directory is traversed, not listed.
        on_runtime(sessions, move |r| r.own(id, uid))
            .await
            .map_err(|e| internal("giving its tree and home to its uid", &e))?;
    }
    close_to_others(&sdir, 0o711).map_err(|e| internal("closing the session's directory", &e))?;
    // Nothing the last runtime left in its home's start-up files runs in this one
    // unless a tool call the gate saw puts it there again.
    let agent_session = doc.agent_session.clone();
    let HomeReset {
        removed,
        transcript,
    } = on_runtime(sessions, move |r| r.reset_home(id, &agent_session))
        .await
        .map_err(|e| internal("resetting its home", &e))?;
    if !removed.is_empty() {
        event(
            state,
            id,
            serde_json::json!({"kind": "home-reset", "removed": removed}),
        )
        .await?;
    }
    let boot_no = doc.boots + 1;
    // The runtime's files, the API's (the credential the launcher's): replaced
    // whole at every boot.
    let _ = std::fs::remove_dir_all(&run);
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(&run)
            .map_err(|e| internal("making its run directory", &e))?;
        let write = |name: &str, mode: u32, bytes: &[u8]| -> std::io::Result<PathBuf> {
            let p = run.join(name);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&p)?;
            std::io::Write::write_all(&mut f, bytes)?;
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            Ok(p)
        };
        write("ca.pem", 0o644, sessions.ca_pem.as_bytes())
            .map_err(|e| internal("writing the CA", &e))?;
        let settings = flotilla_sessions::hook::gate_settings(&HookHandler::Command {
            program: sessions.flotilla_exe.display().to_string(),
            args: vec!["gate".into(), "hook".into()],
            timeout_secs: 120,
        });
        write("settings.json", 0o644, settings.to_string().as_bytes())
            .map_err(|e| internal("writing the hook settings", &e))?;
        if !messages.is_empty() {
            write("prompt", 0o600, messages.join("\n\n").as_bytes())
                .map_err(|e| internal("writing the prompt", &e))?;
        }
    }
    // The session's credential: one per boot, valid while this runtime runs
    // (checked against `token_hash` and the runtime's liveness at every call).
    let token = crate::auth::new_secret("flt-session-");
    let token_hash = crate::auth::hash_secret(&token);
    state
        .store
        .create_credential(token_hash.clone(), Principal::Session { id }, now_ms())
        .await?;
    let credential = token.clone();
    on_runtime(sessions, move |r| r.give_credential(id, uid, &credential))
        .await
        .map_err(|e| internal("giving its credential to its uid", &e))?;

    // Claude Code's headless command line (measured against 2.1.328): the first
    // runtime names the conversation (`--session-id`), later ones `--resume` it
    // (once its transcript exists: a first runtime that never started leaves
    // none); a resume with no message settles the call a question deferred (the
    // hook fires again for it). The prompt comes on stdin. `--setting-sources ""`
    // ignores the tree's and the home's settings files (a `.claude/settings.json`
    // with `disableAllHooks` would turn the gate off) and keeps `--settings`; the
    // mode is given on every launch (a resume does not remember it).
    let first = !transcript;
    let mut args = vec!["-p".to_string()];
    if first {
        args.extend(["--session-id".into(), doc.agent_session.clone()]);
    } else {
        args.extend(["--resume".into(), doc.agent_session.clone()]);
    }
    args.extend([
        "--permission-mode".into(),
        doc.mode.as_str().into(),
        "--setting-sources".into(),
        String::new(),
        "--settings".into(),
        run.join("settings.json").display().to_string(),
        "--output-format".into(),
        "stream-json".into(),
        "--verbose".into(),
    ]);
    args.extend(sessions.config.runtime.args.iter().cloned());
    let messages_given = if messages.is_empty() && first {
        // A first runtime needs a prompt: the session's, or a neutral one.
        let p = doc.prompt.clone().unwrap_or_else(|| "Begin.".into());
        std::fs::write(run.join("prompt"), p).map_err(|e| internal("writing the prompt", &e))?;
        1
    } else {
        messages.len()
    };
    // No traffic but to the model API (measured: without this, Claude Code looks
    // up its vendor's hosts); the configured environment may override it.
    let mut env: Vec<(String, String)> = vec![(
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
        "1".into(),
    )];
    // With `network = "proxy"` the sandbox has no network of its own: the model
    // API, the CONNECT allowlist and the authority are loopback ports inside,
    // bridged to this runtime's sockets (served until its process is reaped).
    let proxied = sessions.config.runtime.network == Network::Proxy;
    let egress = if proxied {
        let weak = Arc::downgrade(state);
        let sink: crate::egress::EventSink = Arc::new(move |e: crate::egress::EgressEvent| {
            let Some(state) = weak.upgrade() else { return };
            tokio::spawn(async move {
                let mut v = serde_json::to_value(&e).unwrap_or_default();
                v["kind"] = "egress".into();
                v["via"] = e.kind.into();
                let _ = event(&state, id, v).await;
            });
        });
        let egress = crate::egress::start(&run, sessions.egress.clone(), sink)
            .map_err(|e| internal("opening its network sockets", &e))?;
        on_runtime(sessions, move |r| r.give_sockets(id, uid))
            .await
            .map_err(|e| internal("giving its network sockets to its uid", &e))?;
        Some(egress)
    } else {
        None
    };
    let server_url = if proxied {
        format!("https://127.0.0.1:{}", crate::egress::API_PORT)
    } else {
        sessions
            .config
            .runtime
            .kubernetes
            .as_ref()
            .and_then(|k| k.authority_url.clone())
            .unwrap_or_else(|| sessions.url.clone())
    };
    env.extend(
        sessions
            .config
            .runtime
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    env.extend([
        // `flotilla` (the gate's hook, `flotilla exec`) first on PATH.
        (
            "PATH".into(),
            format!(
                "{}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                sessions
                    .flotilla_exe
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ),
        ),
        ("FLOTILLA_SERVER".into(), server_url),
        (
            "FLOTILLA_CA".into(),
            run.join("ca.pem").display().to_string(),
        ),
        (
            "FLOTILLA_SESSION_TOKEN_FILE".into(),
            run.join("token").display().to_string(),
        ),
        ("FLOTILLA_SESSION".into(), id.to_string()),
    ]);
    if on_cluster {
        // What the pod's init container makes the tree from (with the bundle).
        let repo = &sessions.config.repos[&doc.repo];
        env.extend([
            ("FLOTILLA_TREE".to_string(), tree.display().to_string()),
            ("FLOTILLA_TREE_ORIGIN".into(), repo.url.clone()),
            (
                "FLOTILLA_TREE_BASE".into(),
                doc.base_commit.clone().unwrap_or_default(),
            ),
            (
                "FLOTILLA_TREE_BRANCH".into(),
                doc.tree_branch.clone().unwrap_or_default(),
            ),
        ]);
    }
    if proxied {
        let proxy = format!("http://127.0.0.1:{}", crate::egress::PROXY_PORT);
        env.extend([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                format!("http://127.0.0.1:{}", crate::egress::MODEL_PORT),
            ),
            (
                "ANTHROPIC_API_KEY".into(),
                crate::egress::PLACEHOLDER_KEY.into(),
            ),
            ("HTTPS_PROXY".into(), proxy.clone()),
            ("https_proxy".into(), proxy.clone()),
            ("HTTP_PROXY".into(), proxy.clone()),
            ("http_proxy".into(), proxy),
            ("NO_PROXY".into(), "127.0.0.1,localhost,::1".into()),
            ("no_proxy".into(), "127.0.0.1,localhost,::1".into()),
        ]);
    }
    // Later entries win (the configured environment cannot undo the above).
    let env: Vec<(String, String)> = {
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<(String, String)> = env
            .into_iter()
            .rev()
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect();
        out.reverse();
        out
    };
    // The launcher builds the sandbox from its own configuration (this
    // session's tree, home, run directory and mirror visible; every other
    // session's files, the authority's directory and root's home hidden) and
    // starts it as the session's uid. The environment reaches the agent through
    // bwrap's own, never `--setenv` on a command line `ps` shows.
    let (program, args) = if proxied {
        // The bridge first: it listens inside, then runs the agent as its child.
        let (model, proxy, api) = crate::egress::socket_paths(&run);
        let mut bridged = vec!["sandbox-bridge".to_string()];
        for (port, sock) in [
            (crate::egress::MODEL_PORT, model),
            (crate::egress::PROXY_PORT, proxy),
            (crate::egress::API_PORT, api),
        ] {
            bridged.push("--forward".into());
            bridged.push(flotilla_sessions::bridge::Forward { port, socket: sock }.to_arg());
        }
        bridged.push("--".into());
        bridged.push(sessions.claude.display().to_string());
        bridged.extend(args);
        ("bridge", bridged)
    } else {
        ("claude", args)
    };
    let [out, err] =
        runtime_outputs(&sdir, boot_no, true).map_err(|e| internal("opening its output", &e))?;
    let stdin = match std::fs::File::open(run.join("prompt")) {
        Ok(f) => f,
        Err(_) => {
            std::fs::File::open("/dev/null").map_err(|e| internal("opening /dev/null", &e))?
        }
    };
    let spec = StartSpec {
        id,
        boot: boot_no,
        uid,
        repo: doc.repo.clone(),
        program: program.into(),
        args,
        env,
        stdio: [stdin, out, err],
    };
    let Started {
        pid,
        start_ticks,
        pod,
        exit,
    } = on_runtime(sessions, move |r| r.start(spec))
        .await
        .map_err(|e| {
            if on_cluster {
                internal("starting its pod", &e)
            } else {
                internal("starting its sandbox (is bubblewrap installed?)", &e)
            }
        })?;
    let rt = RuntimeRecord {
        pid,
        start_ticks,
        pod: pod.map(|p| flotilla_api::sessions::RuntimePod {
            namespace: p.namespace,
            name: p.name,
            uid: p.uid,
        }),
        booted_ms: now_ms(),
        boot: boot_no,
    };
    doc.runtime = Some(rt.clone());
    doc.boots = boot_no;
    doc.resume_after = false;
    doc.token_hash = Some(token_hash);
    save_session(state, id, doc).await?;
    sessions.live.lock().expect("not poisoned").insert(
        id,
        Live {
            boot: boot_no,
            activity_ms: now_ms(),
        },
    );
    event(
        state,
        id,
        serde_json::json!({"kind": "runtime-booted", "pid": pid, "pod": rt.pod, "boot": boot_no, "resume": !first, "messages": messages_given}),
    )
    .await?;
    // Its network goes with it.
    reap(state, id, rt, exit, egress);
    Ok(())
}

/// Runtime `boot`'s transcript (`runtime-<boot>.jsonl`) and stderr
/// (`runtime-<boot>.stderr`) in the session's directory `sdir`, made empty when
/// `empty` (else as they are, for the runtime to empty): the API's, 0600.
fn runtime_outputs(
    sdir: &std::path::Path,
    boot: u64,
    empty: bool,
) -> std::io::Result<[std::fs::File; 2]> {
    let private = |name: String| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(empty)
            .mode(0o600)
            .open(sdir.join(name))
    };
    Ok([
        private(format!("runtime-{boot}.jsonl"))?,
        private(format!("runtime-{boot}.stderr"))?,
    ])
}

/// Waits, in a task of its own, for runtime `rt` of session `id` to end (`exit`),
/// then records its end ([`ended`]); `keep` (its network) lives until then.
fn reap<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    rt: RuntimeRecord,
    exit: flotilla_sessions::runtime::Exit,
    keep: impl Send + 'static,
) {
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let code = tokio::task::spawn_blocking(exit).await.ok().flatten();
        drop(keep);
        let Some(state) = weak.upgrade() else { return };
        if let Err(e) = ended(&state, id, rt, code).await {
            tracing::error!("session {id}: recording its runtime's end: {}", e.message());
        }
    });
}

/// Follows session `id`'s pod when this process did not start it (the authority
/// restarted while it ran) and it is still there, running or ended: its transcript
/// is copied again from the pod's log and its end recorded as if this process had
/// started it.
async fn reattach<S: AuthorityStore>(state: &Arc<AppState<S>>, id: u64) -> Result<(), Failure> {
    let sessions = sessions_of(state)?;
    let lock = sessions.lock_of(id);
    let Ok(_held) = lock.try_lock() else {
        return Ok(());
    };
    let (doc, _) = load_session(state, id).await?;
    let Some(rt) = doc.runtime.clone().filter(|r| r.pod.is_some()) else {
        return Ok(());
    };
    // Running, or ended while no authority watched it: its end is read from the
    // pod, which stays until then.
    if sessions
        .live
        .lock()
        .expect("not poisoned")
        .contains_key(&id)
    {
        return Ok(());
    }
    let outputs = runtime_outputs(&sessions.session_dir(id), rt.boot, false).map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "runtime",
            format!("session {id}: opening its output: {e}"),
        )
    })?;
    let running = super::docs::running_of(&rt);
    let Some(exit) = on_runtime(sessions, move |r| Ok(r.reattach(&running, outputs)))
        .await
        .unwrap_or(None)
    else {
        return Ok(());
    };
    sessions.live.lock().expect("not poisoned").insert(
        id,
        Live {
            boot: rt.boot,
            activity_ms: now_ms(),
        },
    );
    event(
        state,
        id,
        serde_json::json!({"kind": "runtime-reattached", "boot": rt.boot, "pod": rt.pod}),
    )
    .await?;
    reap(state, id, rt, exit, ());
    Ok(())
}

/// Sets `path`'s own mode to `mode` (not following a symlink: `path` is one the
/// authority made).
fn close_to_others(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::symlink_metadata(path)?.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "{} is a symbolic link",
            path.display()
        )));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Records that runtime `rt` of session `id` exited with `code`; boots the next
/// turn when messages arrived meanwhile.
///
/// Boxed with its `Send` bound declared: booting spawns a task that awaits this,
/// and the compiler cannot infer `Send` through that cycle.
pub(crate) fn ended<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    rt: RuntimeRecord,
    code: Option<i32>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Failure>> + Send + '_>> {
    Box::pin(async move {
        let sessions = sessions_of(state)?;
        let lock = sessions.lock_of(id);
        let _held = lock.lock().await;
        if state.store.session(id).await?.is_none() {
            // Deleted (`flotilla session delete --force` stopped it): nothing to record.
            return Ok(());
        }
        let (mut doc, _) = load_session(state, id).await?;
        {
            let mut live = sessions.live.lock().expect("not poisoned");
            if live.get(&id).is_some_and(|l| l.boot == rt.boot) {
                live.remove(&id);
            }
        }
        if doc.runtime.as_ref() != Some(&rt) {
            // A read found it dead first (`gone`) while this task was still reaping
            // it: give that end its exit code. Torn down (idle, stopped) or
            // replaced: nothing to add.
            let found_gone = doc.boots == rt.boot
                && doc.runtime.is_none()
                && doc.last_end.as_ref().is_some_and(|e| e.how == "gone");
            if !found_gone {
                return Ok(());
            }
        }
        doc.runtime = None;
        doc.token_hash = None;
        // A failed runtime says why: the end of what it wrote to stderr (bwrap's
        // own refusals land there too).
        let stderr = if code == Some(0) {
            String::new()
        } else {
            let file = format!("runtime-{}.stderr", rt.boot);
            tail(&sessions.session_dir(id).join(file), 2048)
        };
        doc.last_end = Some(RuntimeEnd {
            at_ms: now_ms(),
            code,
            how: "exited".into(),
            detail: (!stderr.is_empty()).then(|| stderr.clone()),
        });
        save_session(state, id, &doc).await?;
        event(
            state,
            id,
            serde_json::json!({"kind": "runtime-exited", "pid": rt.pid, "boot": rt.boot, "code": code, "stderr": stderr}),
        )
        .await?;
        let agent_session = doc.agent_session.clone();
        let began = on_runtime(sessions, move |r| r.has_transcript(id, &agent_session))
            .await
            .unwrap_or(false);
        if code != Some(0) && !began {
            // It failed before its conversation began: its prompt is given again
            // with the next message.
            if let Ok(p) = std::fs::read_to_string(sessions.session_dir(id).join("run/prompt")) {
                doc.pending.insert(0, p);
                save_session(state, id, &doc).await?;
            }
        } else if !doc.pending.is_empty() || doc.resume_after {
            let resume = doc.resume_after;
            // Messages that came during the turn start the next one (through the
            // same capacity check as every boot, once this lock is released).
            let state2 = state.clone();
            tokio::spawn(async move {
                if let Err(e) = deliver(&state2, id, None, resume).await {
                    tracing::error!("session {id}: the next turn: {}", e.message());
                }
            });
        }
        // A runtime ended: another session's messages may have been waiting.
        let state2 = state.clone();
        tokio::spawn(async move { boot_waiting(&state2).await });
        Ok(())
    })
}

/// The last `max` bytes of the file at `path` (lossy UTF-8; empty when unreadable).
fn tail(path: &std::path::Path, max: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.take(max).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).trim().to_string()
}

/// Reconciles every session with a runtime every [`SessionsConfig::reconcile_every`].
pub fn spawn_reconciler<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    every_reconcile(state, |state| async move {
        let Ok(all) = state.store.sessions().await else {
            return;
        };
        for rec in all {
            if rec.doc.contains("\"runtime\":{") {
                if let Err(e) = reattach(&state, rec.id).await {
                    tracing::error!("following session {}'s pod: {}", rec.id, e.message());
                }
                if let Err(e) = reconcile(&state, rec.id).await {
                    tracing::error!("reconciling session {}: {}", rec.id, e.message());
                }
            }
        }
        boot_waiting(&state).await;
    });
}

/// Runs `pass` every `reconcile_every` (missed ticks delayed, not bunched) for as
/// long as the authority lives, while it holds the sessions' lease
/// ([`crate::cluster::SESSIONS`]: one authority of several sharing a database);
/// nothing when sessions are off.
pub(crate) fn every_reconcile<S, F, Fut>(state: &Arc<AppState<S>>, pass: F)
where
    S: AuthorityStore,
    F: Fn(Arc<AppState<S>>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let Some(sessions) = state.sessions.as_ref() else {
        return;
    };
    let every = sessions.config.reconcile_every;
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(state) = weak.upgrade() else { return };
            if state.cluster.holds(crate::cluster::SESSIONS) {
                pass(state).await;
            }
        }
    });
}

/// Boots the sessions whose messages wait for capacity, oldest first, while
/// fewer than `max_runtimes` runtimes run.
async fn boot_waiting<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let Some(sessions) = state.sessions.as_ref() else {
        return;
    };
    let Ok(mut all) = state.store.sessions().await else {
        return;
    };
    all.reverse();
    for rec in all {
        if sessions.live.lock().expect("not poisoned").len() >= sessions.config.runtime.max_runtimes
        {
            return;
        }
        if rec.doc.contains("\"waiting_for_capacity\":true") {
            if let Err(e) = deliver(state, rec.id, None, false).await {
                tracing::error!("session {}: booting after a wait: {}", rec.id, e.message());
            }
        }
    }
}
