//! `POST /v1/push`: a session's push, asked as a question and carried out by the
//! authority with the real credential.

use super::gate::session_caller;
use super::lifecycle::deliver_detached;
use super::questions::{find_question, open_count, open_question, MAX_OPEN_QUESTIONS};
use super::records::{event, load_session, sessions_of};
use crate::failure::invalid;
use flotilla_api::sessions::{PushRequest, PushResponse, QuestionDoc};

use crate::api::ApiError;
use crate::failure::{Answer, Failure};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// The tool name of push questions.
pub const PUSH_TOOL: &str = "Push";

/// What a push request names: the source in the session's tree (`HEAD` or a
/// branch) and the remote's branch (without `refs/heads/`).
fn push_target(
    id: u64,
    remote: Option<&str>,
    refspec: Option<&str>,
) -> Result<(String, String), String> {
    if let Some(r) = remote {
        if r != "origin" {
            return Err(format!(
                "a session pushes only to its repository (`origin`), not to `{r}`"
            ));
        }
    }
    let spec = refspec.unwrap_or("HEAD");
    if spec.starts_with('+') {
        return Err(format!(
            "`{spec}`: force pushes are not offered; push a branch that fast-forwards"
        ));
    }
    let (src, dst) = match spec.split_once(':') {
        Some((s, d)) => (s, Some(d)),
        None => (spec, None),
    };
    let src = if src.is_empty() { "HEAD" } else { src };
    if src != "HEAD" {
        flotilla_sessions::clone_cache::check_ref_name(src)?;
    }
    let dst = match dst {
        Some(d) => d.strip_prefix("refs/heads/").unwrap_or(d).to_string(),
        None if src == "HEAD" => format!("flotilla/session-{id}"),
        None => src.to_string(),
    };
    if dst.starts_with("refs/") {
        return Err(format!("`{dst}`: only branches (refs/heads/…) are pushed"));
    }
    flotilla_sessions::clone_cache::check_ref_name(&dst)?;
    Ok((src.to_string(), dst))
}

/// A push of session `id`: the commits are taken from its tree into the mirror
/// (read as the tree's owner), described, and a question opened (or the open one
/// for exactly this commit and branch reused). Nothing is pushed here: the
/// authority pushes when a human answers allow ([`answer_question`]).
pub(crate) async fn push_request<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    remote: Option<&str>,
    refspec: Option<&str>,
) -> Result<PushResponse, Failure> {
    let sessions = sessions_of(state)?;
    if sessions.runtime.kind() == flotilla_sessions::runtime::RuntimeKind::Kubernetes {
        return Err(invalid(
            "`flotilla push` takes the commits from the session's tree on the authority's host; a pod's tree is on its claim, which the authority cannot read",
        ));
    }
    let (src, branch) = push_target(id, remote, refspec).map_err(invalid)?;
    let (doc, _) = load_session(state, id).await?;
    let (Some(tree), Some(base)) = (doc.tree.clone(), doc.base_commit.clone()) else {
        return Err(invalid(format!("session {id} has no tree yet")));
    };
    let url = sessions
        .config
        .repos
        .get(&doc.repo)
        .map(|r| r.url.clone())
        .ok_or_else(|| invalid(format!("repository `{}` is no longer configured", doc.repo)))?;
    let clones = sessions.clones.clone();
    let uid = doc
        .uid
        .ok_or_else(|| invalid(format!("session {id} has no uid yet")))?;
    // The tree's side of the fetch (`git upload-pack`) is run by the launcher as
    // the tree's owner; git reaches it through this relay.
    let quote =
        |p: &std::path::Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let upload_pack = format!(
        "{} serve upload-pack-relay --authority-dir {} --session {id} --uid {uid}",
        quote(&sessions.flotilla_exe),
        quote(&sessions.privileged.authority_dir)
    );
    let (repo, sid) = (doc.repo.clone(), id.to_string());
    let (src2, base2) = (src.clone(), base.clone());
    let candidate = tokio::task::spawn_blocking(move || {
        clones.take_commits(
            &repo,
            &sid,
            std::path::Path::new(&tree),
            &src2,
            &base2,
            &upload_pack,
        )
    })
    .await
    .map_err(|e| invalid(e.to_string()))?
    .map_err(|e| invalid(format!("cannot take `{src}` from the session's tree: {e}")))?;
    if candidate.log.is_empty() {
        return Err(invalid(format!(
            "nothing to push: `{src}` ({}) has no commit beyond the session's base {}",
            &candidate.commit[..12.min(candidate.commit.len())],
            &base[..12.min(base.len())]
        )));
    }
    let input = serde_json::json!({
        "remote": "origin",
        "url": url,
        "branch": branch,
        "commit": candidate.commit,
        "base": base,
        "commits": candidate.log,
        "diffstat": candidate.diffstat,
    });
    let answering = sessions.answers.lock().await;
    let (_, open) = find_question(state, id, PUSH_TOOL, &input).await?;
    let qid = match open {
        Some(q) => q,
        None if open_count(state, id).await? >= MAX_OPEN_QUESTIONS => {
            return Err(Failure::new(
                StatusCode::FORBIDDEN,
                "denied",
                format!(
                    "session {id} already has {MAX_OPEN_QUESTIONS} open questions: denied until a human answers them"
                ),
            ));
        }
        None => {
            open_question(
                state,
                id,
                PUSH_TOOL,
                &input,
                &format!(
                    "push {} commit(s) to origin {branch}: a push leaves the session, a human allows it",
                    candidate.log.len()
                ),
            )
            .await?
        }
    };
    drop(answering);
    event(
        state,
        id,
        serde_json::json!({"kind": "push", "outcome": "asked", "question": qid, "commit": candidate.commit, "branch": branch}),
    )
    .await?;
    Ok(PushResponse {
        outcome: "asked".into(),
        question: qid,
        commit: candidate.commit,
        branch,
        commits: candidate.log,
    })
}

/// Carries out answered push question `qid` of session `session` (its answer
/// already marked used): on allow, pushes exactly the asked commit to the asked
/// branch from the mirror; records what happened on the question and in the
/// session's events, and tells the session. Returns the outcome line.
pub(crate) async fn carry_out_push<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    session: u64,
    qid: u64,
    doc: &mut QuestionDoc,
) -> Result<String, Failure> {
    let sessions = sessions_of(state)?;
    let answer = doc.answer.clone().expect("answered");
    let field = |k: &str| {
        doc.tool_input
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (url, branch, commit) = (field("url"), field("branch"), field("commit"));
    let short = commit[..12.min(commit.len())].to_string();
    let outcome = if answer.decision == "allow" {
        let (sdoc, _) = load_session(state, session).await?;
        let clones = sessions.clones.clone();
        let (u, b, c) = (url.clone(), branch.clone(), commit.clone());
        let pushed = tokio::task::spawn_blocking(move || clones.push(&sdoc.repo, &u, &c, &b)).await;
        match pushed {
            Ok(Ok(summary)) => {
                format!(
                    "pushed {short} to origin {branch}: {}",
                    summary.replace('\n', " ")
                )
            }
            Ok(Err(e)) => format!("the push of {short} to origin {branch} failed: {e}"),
            Err(e) => format!("the push of {short} to origin {branch} failed: {e}"),
        }
    } else {
        format!("the push of {short} to origin {branch} was denied")
    };
    doc.outcome = Some(outcome.clone());
    super::records::save_question(state, qid, doc).await?;
    event(
        state,
        session,
        serde_json::json!({"kind": "push", "outcome": if outcome.starts_with("pushed") { "pushed" } else if answer.decision == "allow" { "failed" } else { "denied" }, "question": qid, "commit": commit, "branch": branch, "by": answer.by, "result": outcome}),
    )
    .await?;
    let note = answer.note.map(|n| format!(" ({n})")).unwrap_or_default();
    deliver_detached(
        state,
        session,
        Some(format!(
            "Question {qid} was answered {} by {}{note}: {outcome}.",
            answer.decision, answer.by
        )),
        false,
    )
    .await?;
    Ok(outcome)
}

/// `POST /v1/push`: a session's push (`flotilla push`), asked as a question and carried out by the authority with the real credential.
#[utoipa::path(post, path = "/v1/push", request_body = PushRequest,
    responses((status = 200, body = PushResponse), (status = 403, body = ApiError), (status = 422, body = ApiError)))]
pub async fn push<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<PushRequest>,
) -> Answer<PushResponse> {
    let id = session_caller(&state, &headers).await?;
    Ok(Json(
        push_request(&state, id, req.remote.as_deref(), req.refspec.as_deref()).await?,
    ))
}

/// A push's remote and refspec, as given.
type PushWords = (Option<String>, Option<String>);

/// `git push [-q] [-u] [REMOTE [REFSPEC]]` through the executor: the remote and
/// refspec, or why it is not a push the authority makes.
pub(crate) fn git_push_words(argv: &[String]) -> Option<Result<PushWords, String>> {
    let rest = match argv {
        [git, push, rest @ ..] if git == "git" && push == "push" => rest,
        _ => return None,
    };
    let mut words = Vec::new();
    for w in rest {
        match w.as_str() {
            "-q" | "--quiet" | "-u" | "--set-upstream" => {}
            o if o.starts_with('-') => {
                return Some(Err(format!(
                    "`git push {o}` is not offered: the authority pushes one branch, without options (`flotilla push [origin] [SRC[:DST]]`)"
                )))
            }
            _ => words.push(w.clone()),
        }
    }
    if words.len() > 2 {
        return Some(Err(
            "one refspec at most (`flotilla push [origin] [SRC[:DST]]`)".into(),
        ));
    }
    let mut it = words.into_iter();
    Some(Ok((it.next(), it.next())))
}
