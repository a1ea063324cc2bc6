//! Releases and rollouts on the authority.
//!
//! The authority *relays* releases: it stores each manifest and its minisign signature
//! exactly as the operator published them (signed offline), keeps the artifacts in its
//! blob store (`crate::blobs`), and never signs anything, so whoever takes it over still cannot make an
//! agent run an unsigned binary: every agent verifies the signature against the keys
//! it pinned, before it downloads, and the digest and size after.
//!
//! A rollout (`flotilla_release::rollout::Rollout`, a pure state machine) is advanced
//! here: after every agent's update report, every action (`approve`, `pause`,
//! `resume`, `abort`) and every second (timeouts, soaks). Each change is persisted
//! before it is acted on, and the assignments' index is bumped so that the long polls
//! of the hosts concerned (`GET /v1/hosts/{host}/release`) answer at once.
//!
//! A rollback (`POST /v1/rollbacks`, an operator's `flotilla release rollback ID`)
//! is a rollout too: of a halted or finished rollout's changed hosts, each back to the
//! release it ran before, its assignment marked `rollback_of` so that the agent
//! accepts the lower serial — only to a digest it ran before and still keeps.
//!
//! Unskip requests (`POST /v1/hosts/{host}/unskip`, an operator's `flotilla release
//! unskip`) travel the same way: stored pending, sent to the host's agent in every
//! release answer (the index bumped so it hears at once), done when a report of that
//! agent says it removed the release version from its skip lists and lists none of it
//! left (`HostUpdate::unskipped`, `HostUpdate::skipped`).

pub mod state;
mod versioned;

use state::PIDS_KEPT;
pub use state::{two_agents, Releases};

use crate::api::{self, ApiError};
use crate::failure::{conflict, internal, invalid, not_found, Answer, Failure};
use crate::longpoll::{park, wait_of, PollQuery};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_model::inventory::TransportKind;
use flotilla_release::rollout::{HostUpdate, Rollout, RolloutSpec};
use flotilla_release::Manifest;
use flotilla_store::authority::{AuthorityStore, NewRelease, ReleasePut, ReleaseRecord};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The shortest rollout timeout accepted (10 s).
pub const MIN_TIMEOUT_MS: u64 = 10_000;

/// How often the authority advances its active rollouts on its own (timeouts, soaks).
pub const TICK: Duration = Duration::from_secs(1);

fn release_dto(r: &ReleaseRecord) -> Result<api::ReleaseDto, Failure> {
    let manifest = Manifest::parse(&r.manifest).map_err(internal)?;
    Ok(api::ReleaseDto {
        name: manifest.name.clone(),
        version: manifest.version.clone(),
        serial: manifest.serial,
        expires: manifest.expires.clone(),
        artifacts: manifest
            .artifacts
            .iter()
            .map(|a| api::ArtifactDto {
                platform: format!("{}-{}", a.os, a.arch),
                sha256: a.sha256.clone(),
                size: a.size,
                source: a.url.clone().unwrap_or_else(|| "blob".into()),
            })
            .collect(),
        created_ms: r.created_ms,
        published_by: r.published_by.clone(),
        key_id: flotilla_release::verify::signature_key_id(&r.signature).unwrap_or_default(),
        manifest: String::from_utf8_lossy(&r.manifest).into_owned(),
        signature: r.signature.clone(),
    })
}

/// `POST /v1/releases` (operator): relay a release signed offline. The manifest must
/// parse, the signature file must be a minisign signature, and every artifact kept in
/// the blob store must have been uploaded first. The authority does not verify the
/// signature (it holds no trusted key): agents do.
#[utoipa::path(post, path = "/v1/releases", request_body = api::PublishReleaseRequest,
    responses((status = 200, body = api::ReleaseDto), (status = 400, body = ApiError), (status = 409, body = ApiError)))]
pub async fn publish_release<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<api::PublishReleaseRequest>,
) -> Answer<api::ReleaseDto> {
    let by = state.operator(&headers).await?;
    let manifest =
        Manifest::parse(req.manifest.as_bytes()).map_err(|e| invalid(format!("manifest: {e}")))?;
    flotilla_release::verify::signature_key_id(&req.signature)
        .map_err(|e| invalid(format!("signature: {e}")))?;
    // The authority trusts no key, but it can tell an expired manifest: agents would
    // refuse it.
    if manifest.expires_ms().is_ok_and(|e| e <= now_ms()) {
        return Err(invalid(format!(
            "manifest: {} {} expired at {}: agents refuse it (sign it again with a later --expires)",
            manifest.name, manifest.version, manifest.expires
        )));
    }
    for a in &manifest.artifacts {
        if let Some(blob) = &a.blob {
            if !state.store.has_blob(blob.clone()).await? {
                return Err(invalid(format!(
                    "artifact {}-{}: blob {blob} was not uploaded (`flotilla release publish --artifact FILE` uploads it)",
                    a.os, a.arch
                )));
            }
        }
    }
    let created_ms = now_ms();
    let put = state
        .store
        .put_release(NewRelease {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            serial: manifest.serial,
            manifest: req.manifest.clone().into_bytes(),
            signature: req.signature.clone(),
            published_by: by,
            created_ms,
        })
        .await?;
    if let ReleasePut::Conflict = put {
        return Err(conflict(format!(
            "release {} {} was published before with another manifest or signature: releases are immutable (publish a new version)",
            manifest.name, manifest.version
        )));
    }
    let record = state
        .store
        .release(manifest.name.clone(), manifest.version.clone())
        .await?
        .ok_or_else(|| internal("the release just stored is gone"))?;
    Ok(Json(release_dto(&record)?))
}

/// `GET /v1/releases` (operator): every release, newest first.
#[utoipa::path(get, path = "/v1/releases", responses((status = 200, body = Vec<api::ReleaseDto>), (status = 403, body = ApiError)))]
pub async fn list_releases<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<Vec<api::ReleaseDto>> {
    state.operator(&headers).await?;
    Ok(Json(releases_of(&state).await?))
}

/// Every release, newest first (`GET /v1/releases` and the dashboard).
pub(crate) async fn releases_of<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<Vec<api::ReleaseDto>, Failure> {
    let records = state.store.releases().await?;
    records.iter().map(release_dto).collect()
}

fn rollout_dto(r: &Rollout) -> Result<api::RolloutDto, Failure> {
    Ok(api::RolloutDto {
        rollout: serde_json::to_value(r).map_err(internal)?,
    })
}

/// `POST /v1/rollouts` (operator): a rollout of a published release to the agent
/// hosts of the selected revision whose labels match the selector (for a component
/// release, a release not named `flotilla-agent`: those of them that run a component
/// declaring `release = { name = NAME, … }`), created
/// `AwaitingApproval` with its host set frozen (in host-name order; the first
/// `canary` are the canaries).
#[utoipa::path(post, path = "/v1/rollouts", request_body = api::CreateRolloutRequest,
    responses((status = 200, body = api::RolloutDto), (status = 400, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
pub async fn create_rollout<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<api::CreateRolloutRequest>,
) -> Answer<api::RolloutDto> {
    state.operator(&headers).await?;
    if req.max_in_flight == 0 {
        return Err(invalid("max_in_flight must be at least 1"));
    }
    // A timeout a host cannot meet would roll a good build back and keep it off that
    // host for good (its agent records a rolled-back version as skipped).
    if req.timeout_ms < MIN_TIMEOUT_MS {
        return Err(invalid(format!(
            "timeout {} ms is too short: at least {} s (a host needs it to download, restart and prove the new version)",
            req.timeout_ms,
            MIN_TIMEOUT_MS / 1000
        )));
    }
    let record = state
        .store
        .release(req.name.clone(), req.version.clone())
        .await?
        .ok_or_else(|| {
            not_found(format!(
                "no release {} {} (`flotilla release list`)",
                req.name, req.version
            ))
        })?;
    let manifest = Manifest::parse(&record.manifest).map_err(internal)?;
    if manifest.expires_ms().is_ok_and(|e| e <= now_ms()) {
        return Err(invalid(format!(
            "release {} {} expired at {}: every agent would refuse it (sign a new one)",
            req.name, req.version, manifest.expires
        )));
    }
    let Some(current) = state.current_topology() else {
        return Err(invalid(
            "no revision is selected: there are no agent hosts to roll out to",
        ));
    };
    let reported: BTreeMap<String, String> = state
        .releases
        .updates
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|(h, u)| (h.clone(), u.platform.clone()))
        .collect();
    // A component release goes to the hosts that run a component declaring it.
    let component_release = req.name != flotilla_release::AGENT_RELEASE;
    let runs_it = |host: &str| {
        !component_release
            || current
                .components
                .iter()
                .any(|c| c.host == host && c.release.as_ref().is_some_and(|r| r.name == req.name))
    };
    let hosts: Vec<(String, String)> = current
        .hosts
        .iter()
        .filter(|(_, h)| h.transport == TransportKind::Agent)
        .filter(|(_, h)| req.selector.iter().all(|(k, v)| h.labels.get(k) == Some(v)))
        .filter(|(name, _)| runs_it(name))
        .map(|(name, h)| {
            let platform = reported
                .get(name)
                .cloned()
                .or_else(|| h.platform.clone())
                .unwrap_or_else(|| "unknown".into());
            (name.clone(), platform)
        })
        .collect();
    if hosts.is_empty() {
        return Err(invalid(if component_release {
            format!(
                "no agent host of the selected revision that matches the selector {:?} runs a component of release {} (a component declares it with release = {{ name = \"{}\", root = \"…\" }})",
                req.selector, req.name, req.name
            )
        } else {
            format!(
                "no agent host of the selected revision matches the selector {:?}",
                req.selector
            )
        }));
    }
    let artifacts: BTreeMap<String, String> = manifest
        .artifacts
        .iter()
        .map(|a| (format!("{}-{}", a.os, a.arch), a.sha256.clone()))
        .collect();
    let mut rollouts = state.releases.rollouts.lock().await;
    if let Some((id, _)) = rollouts
        .iter()
        .find(|(_, r)| r.spec.name == req.name && r.is_active())
    {
        return Err(conflict(format!(
            "rollout {id} of {} is still active: abort it or let it finish first",
            req.name
        )));
    }
    let now = now_ms();
    let id = state
        .store
        .create_rollout("{}".into(), req.name.clone(), now)
        .await?;
    let mut rollout = Rollout::new(
        id,
        RolloutSpec {
            name: req.name,
            version: req.version,
            serial: manifest.serial,
            selector: req.selector,
            max_in_flight: req.max_in_flight,
            canary: req.canary,
            min_healthy_ms: req.min_healthy_ms,
            timeout_ms: req.timeout_ms,
        },
        artifacts,
        hosts,
        now,
    );
    // What each host runs now, measured, as its agent last said: shown from the start.
    {
        let updates = state.releases.updates.lock().expect("not poisoned");
        for h in &mut rollout.hosts {
            h.running_sha256 = updates
                .get(&h.host)
                .and_then(|u| u.running_of(&rollout.spec.name))
                .map(str::to_string);
        }
    }
    versioned::write_new(&state, &mut rollouts, id, &rollout, now).await?;
    let dto = rollout_dto(&rollout)?;
    rollouts.insert(id, rollout);
    drop(rollouts);
    crate::cluster::announce(&state, crate::cluster::Wake::Releases).await;
    Ok(Json(dto))
}

/// `POST /v1/rollbacks` (operator): a rollback of a halted or finished rollout, as a
/// new rollout created `AwaitingApproval` with the same approval, canaries,
/// concurrency and health gate (its settings unless the request gives others). Its
/// hosts are those the rollout changed (`Rollout::rollback_hosts`: measured on its
/// release after running another digest), in the same order; each goes back to the
/// release whose artifact for its platform is the digest it ran before (the highest
/// serial of that name that has not expired, when several have it). Agents accept
/// the lower serial only as a rollback to a digest they ran before and still keep.
///
/// 404: no such rollout; 409: it is still running (halt it first), hosts of it are
/// still updating, a host it changed runs a third release now, or another rollout of
/// the release is active; 400: it changed no host, or what a host ran before is no
/// longer published (or has expired).
#[utoipa::path(post, path = "/v1/rollbacks", request_body = api::CreateRollbackRequest,
    responses((status = 200, body = api::RolloutDto), (status = 400, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
pub async fn create_rollback<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<api::CreateRollbackRequest>,
) -> Answer<api::RolloutDto> {
    use flotilla_release::RollbackError;
    state.operator(&headers).await?;
    let updates = state.releases.updates.lock().expect("not poisoned").clone();
    let mut rollouts = state.releases.rollouts.lock().await;
    let of = rollouts
        .get(&req.rollout)
        .cloned()
        .ok_or_else(|| not_found(format!("no rollout {}", req.rollout)))?;
    let back = of.rollback_hosts(&updates).map_err(|e| match e {
        RollbackError::NothingChanged { .. } | RollbackError::NoPrevious { .. } => {
            invalid(e.to_string())
        }
        _ => conflict(e.to_string()),
    })?;
    let name = of.spec.name.clone();
    if let Some((id, _)) = rollouts
        .iter()
        .find(|(_, r)| r.spec.name == name && r.is_active())
    {
        return Err(conflict(format!(
            "rollout {id} of {name} is still active: abort it or let it finish first"
        )));
    }
    let now = now_ms();
    // Every unexpired published release of this name: (version, serial, platform → digest).
    let mut published: Vec<(String, u64, BTreeMap<String, String>)> = Vec::new();
    for record in state.store.releases().await? {
        let Ok(m) = Manifest::parse(&record.manifest) else {
            continue;
        };
        if m.name != name || m.expires_ms().map_or(true, |e| e <= now) {
            continue;
        }
        let artifacts = m
            .artifacts
            .iter()
            .map(|a| {
                (
                    format!("{}-{}", a.os, a.arch),
                    a.sha256.to_ascii_lowercase(),
                )
            })
            .collect();
        published.push((m.version, m.serial, artifacts));
    }
    let mut hosts = Vec::new();
    let mut serial = 0;
    let mut versions: Vec<String> = Vec::new();
    for h in &back {
        let found = published
            .iter()
            .filter(|(_, _, a)| a.get(&h.platform) == Some(&h.to_sha256))
            .max_by_key(|(_, s, _)| *s);
        let Some((version, s, _)) = found else {
            return Err(invalid(format!(
                "`{}` ran sha256:{} before rollout {} changed it, and no published release of {name} that has not expired has that artifact for {}: the previous release is no longer available (publish it again, signed with a later --expires)",
                h.host, h.to_sha256, of.id, h.platform
            )));
        };
        serial = serial.max(*s);
        if !versions.contains(version) {
            versions.push(version.clone());
        }
        hosts.push((
            h.host.clone(),
            h.platform.clone(),
            flotilla_release::HostTarget {
                version: version.clone(),
                sha256: h.to_sha256.clone(),
            },
        ));
    }
    let timeout_ms = req.timeout_ms.unwrap_or(of.spec.timeout_ms);
    if timeout_ms < MIN_TIMEOUT_MS {
        return Err(invalid(format!(
            "timeout {timeout_ms} ms is too short: at least {} s",
            MIN_TIMEOUT_MS / 1000
        )));
    }
    let max_in_flight = req.max_in_flight.unwrap_or(of.spec.max_in_flight);
    if max_in_flight == 0 {
        return Err(invalid("max_in_flight must be at least 1"));
    }
    let id = state
        .store
        .create_rollout("{}".into(), name.clone(), now)
        .await?;
    let mut rollout = Rollout::new_rollback(
        id,
        RolloutSpec {
            name,
            version: versions.join(", "),
            serial,
            selector: of.spec.selector.clone(),
            max_in_flight,
            canary: req.canary.unwrap_or(of.spec.canary),
            min_healthy_ms: req.min_healthy_ms.unwrap_or(of.spec.min_healthy_ms),
            timeout_ms,
        },
        of.id,
        hosts,
        now,
    );
    for h in &mut rollout.hosts {
        h.running_sha256 = updates
            .get(&h.host)
            .and_then(|u| u.running_of(&rollout.spec.name))
            .map(str::to_string);
    }
    tracing::info!(
        rollout = id,
        "rollout {id}: rollback of rollout {} created: {} back to {} on {} host(s)",
        of.id,
        rollout.spec.name,
        rollout.spec.version,
        rollout.hosts.len()
    );
    versioned::write_new(&state, &mut rollouts, id, &rollout, now).await?;
    let dto = rollout_dto(&rollout)?;
    rollouts.insert(id, rollout);
    drop(rollouts);
    state.releases.bump();
    crate::cluster::announce(&state, crate::cluster::Wake::Releases).await;
    Ok(Json(dto))
}

/// `GET /v1/rollouts` (operator): every rollout, newest first.
#[utoipa::path(get, path = "/v1/rollouts", responses((status = 200, body = api::RolloutsResponse), (status = 403, body = ApiError)))]
pub async fn list_rollouts<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<api::RolloutsResponse> {
    state.operator(&headers).await?;
    let rollouts = state.releases.rollouts.lock().await;
    Ok(Json(api::RolloutsResponse {
        rollouts: rollouts
            .values()
            .rev()
            .map(|r| serde_json::to_value(r).map_err(internal))
            .collect::<Result<_, _>>()?,
    }))
}

/// `GET /v1/rollouts/{id}` (operator).
#[utoipa::path(get, path = "/v1/rollouts/{id}", params(("id" = u64, Path, description = "the rollout")),
    responses((status = 200, body = api::RolloutDto), (status = 404, body = ApiError)))]
pub async fn get_rollout<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Answer<api::RolloutDto> {
    state.operator(&headers).await?;
    let rollouts = state.releases.rollouts.lock().await;
    let r = rollouts
        .get(&id)
        .ok_or_else(|| not_found(format!("no rollout {id}")))?;
    Ok(Json(rollout_dto(r)?))
}

/// `POST /v1/rollouts/{id}/{action}` (operator): `approve`, `pause`, `resume` or
/// `abort`. 409 when the rollout's phase does not allow it.
#[utoipa::path(post, path = "/v1/rollouts/{id}/{action}", params(("id" = u64, Path, description = "the rollout"), ("action" = String, Path, description = "approve, pause, resume or abort")),
    responses((status = 200, body = api::RolloutDto), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
pub async fn rollout_action<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path((id, action)): Path<(u64, String)>,
    headers: HeaderMap,
) -> Answer<api::RolloutDto> {
    state.operator(&headers).await?;
    Ok(Json(rollout_dto(
        &act_on_rollout(&state, id, &action).await?,
    )?))
}

/// Applies `action` (`approve`, `pause`, `resume` or `abort`) to rollout `id`,
/// advances it, persists it and wakes the hosts' polls; the rollout after. 404 for
/// an unknown rollout or action, 409 when its phase does not allow it.
pub(crate) async fn act_on_rollout<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    action: &str,
) -> Result<Rollout, Failure> {
    for _ in 0..versioned::ATTEMPTS {
        let mut rollouts = state.releases.rollouts.lock().await;
        let mut r = rollouts
            .get(&id)
            .cloned()
            .ok_or_else(|| not_found(format!("no rollout {id}")))?;
        let now = now_ms();
        let before_action = r.events.len();
        let done = match action {
            "approve" => r.approve(now),
            "pause" => r.pause(now),
            "resume" => r.resume(now),
            "abort" => r.abort(now),
            other => {
                return Err(not_found(format!(
                    "no action `{other}`: approve, pause, resume or abort"
                )))
            }
        };
        done.map_err(|e| {
            let hint = if r.phase == flotilla_release::rollout::Phase::Failed {
                " (it has ended: roll the corrected release out again with a new rollout)"
            } else {
                ""
            };
            conflict(format!("rollout {id}: {e}{hint}"))
        })?;
        let updates = state.releases.updates.lock().expect("not poisoned").clone();
        r.advance(&updates, now);
        if versioned::write(state, &mut rollouts, id, &r, now).await? == versioned::Written::Stale {
            // Another authority changed it meanwhile: the action is decided
            // again on what it wrote.
            continue;
        }
        tracing::info!(rollout = id, "rollout {id}: {action} (operator)");
        log_events(id, &r, before_action);
        if let Some(before) = rollouts.get(&id) {
            crate::notify::triggers::rollout_changed(state, before, &r);
        }
        rollouts.insert(id, r.clone());
        drop(rollouts);
        state.releases.bump();
        crate::cluster::announce(state, crate::cluster::Wake::Releases).await;
        return Ok(r);
    }
    Err(conflict(format!(
        "rollout {id} kept changing under other writers: try again"
    )))
}

/// Logs the events of rollout `id` from the `seen`-th on (`web-1: RolledBack (CrashLoop:
/// …)`, `halted: CrashLoop`), at `info` (`warn` for a failure or rollback).
fn log_events(id: u64, r: &flotilla_release::rollout::Rollout, seen: usize) {
    for e in r.events.iter().skip(seen) {
        let bad = ["Failed", "RolledBack", "halted", "Aborted"]
            .iter()
            .any(|w| e.contains(w));
        if bad {
            tracing::warn!(rollout = id, release = %r.spec.name, version = %r.spec.version, "rollout {id}: {e}");
        } else {
            tracing::info!(rollout = id, release = %r.spec.name, version = %r.spec.version, "rollout {id}: {e}");
        }
    }
}

/// Advances every active rollout against the latest updates; persists and bumps the
/// assignments' index when anything changed.
///
/// Only on the authority holding the rollouts' lease ([`crate::cluster::ROLLOUTS`];
/// always on one that shares its store with none): with several, exactly one
/// advances, and a write that meets another's (a stale version) is dropped, the
/// rollout read again and advanced at the next tick.
pub async fn advance_all<S: AuthorityStore>(state: &AppState<S>) -> Result<(), Failure> {
    if !state.cluster.holds(crate::cluster::ROLLOUTS) {
        return Ok(());
    }
    crate::cluster::refresh_updates(state).await;
    let now = now_ms();
    let updates = state.releases.updates.lock().expect("not poisoned").clone();
    let mut rollouts = state.releases.rollouts.lock().await;
    let mut changed = false;
    let ids: Vec<u64> = rollouts
        .iter()
        // Hosts already updating when a rollout halts or is aborted are still followed
        // to their end.
        .filter(|(_, r)| !r.is_settled())
        .map(|(id, _)| *id)
        .collect();
    for id in ids {
        let mut r = rollouts[&id].clone();
        let seen = r.events.len();
        if r.advance(&updates, now) {
            if versioned::write(state, &mut rollouts, id, &r, now).await?
                == versioned::Written::Stale
            {
                changed = true;
                continue;
            }
            log_events(id, &r, seen);
            crate::notify::triggers::rollout_changed(state, &rollouts[&id], &r);
            rollouts.insert(id, r);
            changed = true;
        }
    }
    drop(rollouts);
    if changed {
        state.releases.bump();
        crate::cluster::announce(state, crate::cluster::Wake::Releases).await;
    }
    Ok(())
}

/// Runs [`advance_all`] every [`TICK`] for as long as `state` lives elsewhere.
pub fn spawn_ticker<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let Some(strong) = weak.upgrade() else { return };
            // Every tick, or at once when another authority's agent reported.
            tokio::select! {
                _ = tick.tick() => {}
                _ = strong.cluster.kick.notified() => {}
            }
            drop(strong);
            let Some(state) = weak.upgrade() else { return };
            if let Err(e) = advance_all(&state).await {
                tracing::error!("advancing rollouts: {}", e.message());
            }
        }
    });
}

async fn assignment_of<S: AuthorityStore>(
    state: &AppState<S>,
    host: &str,
) -> Result<Option<api::Assignment>, Failure> {
    let found = {
        let rollouts = state.releases.rollouts.lock().await;
        rollouts.values().find(|r| r.assigned(host)).map(|r| {
            // A rollback's hosts each go back to their own version.
            let version = r
                .host(host)
                .and_then(|h| r.target_of(h))
                .map_or_else(|| r.spec.version.clone(), |(v, _)| v.to_string());
            (r.id, r.spec.clone(), version, r.rollback_of)
        })
    };
    let Some((id, spec, version, rollback_of)) = found else {
        return Ok(None);
    };
    let Some(record) = state
        .store
        .release(spec.name.clone(), version.clone())
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(api::Assignment {
        rollout: id,
        name: spec.name,
        version,
        rollback_of,
        manifest: String::from_utf8_lossy(&record.manifest).into_owned(),
        signature: record.signature,
        min_healthy_ms: spec.min_healthy_ms,
        timeout_ms: spec.timeout_ms,
    }))
}

/// `GET /v1/hosts/{host}/release` (the host's agent, or an operator): the release the
/// host should run now, long-polled: answers when the assignments' index passes
/// `index`, else after about `wait`.
#[utoipa::path(get, path = "/v1/hosts/{host}/release", params(("host" = String, Path, description = "the host"), PollQuery),
    responses((status = 200, body = api::ReleaseAssignment), (status = 403, body = ApiError)))]
pub async fn assignment<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    Query(q): Query<PollQuery>,
    headers: HeaderMap,
) -> Answer<api::ReleaseAssignment> {
    state
        .for_host(&headers, &host, true, "read only its own host's release")
        .await?;
    let wait = wait_of(&q.wait)?;
    park(&state.releases.index, q.index, wait, &state.metrics).await;
    let index = *state.releases.index.borrow();
    let unskip = state
        .releases
        .unskips
        .lock()
        .await
        .values()
        .filter(|u| u.host == host)
        .map(|u| api::UnskipRequest {
            id: u.id,
            name: u.name.clone(),
            version: u.version.clone(),
        })
        .collect();
    Ok(Json(api::ReleaseAssignment {
        index,
        assignment: assignment_of(&state, &host).await?,
        unskip,
    }))
}

/// `POST /v1/hosts/{host}/release` (the host's agent): what it measured (its running
/// executable's digest, pid) and where its update stands
/// (`flotilla_release::rollout::HostUpdate`). The authority stamps the time it
/// received it; the rollouts are advanced at once.
#[utoipa::path(post, path = "/v1/hosts/{host}/release", params(("host" = String, Path, description = "the host")),
    request_body = Object, responses((status = 200, body = Object), (status = 403, body = ApiError)))]
pub async fn report_update<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    headers: HeaderMap,
    Json(mut update): Json<HostUpdate>,
) -> Answer<serde_json::Value> {
    state
        .for_host(
            &headers,
            &host,
            false,
            "write only its own host's release reports",
        )
        .await?;
    let received_ms = now_ms();
    update.host = host.clone();
    update.received_ms = received_ms;
    let doc = serde_json::to_string(&update).map_err(internal)?;
    state
        .store
        .put_host_update(host.clone(), doc, received_ms)
        .await?;
    if let Some(pid) = update.pid {
        let mut pids = state.releases.pids.lock().expect("not poisoned");
        let seen = pids.entry(host.clone()).or_default();
        seen.push_back((pid, received_ms));
        while seen.len() > PIDS_KEPT {
            seen.pop_front();
        }
    }
    // Kept before unskip requests are settled: whoever a done request wakes sees
    // this report in the status.
    let unskipped = (!update.unskipped.is_empty()).then(|| update.clone());
    state
        .releases
        .updates
        .lock()
        .expect("not poisoned")
        .insert(host.clone(), update);
    if let Some(update) = unskipped {
        settle_unskips(&state, &host, &update).await?;
    }
    // The authority holding the rollouts' lease advances them: at once here,
    // or, on another, when it hears of this report.
    crate::cluster::announce(&state, crate::cluster::Wake::Update { host: host.clone() }).await;
    advance_all(&state).await?;
    Ok(Json(serde_json::json!({ "received_ms": received_ms })))
}

/// Whether skip entry `e` is of release `name` at `version` (what an unskip removes).
fn is_of(e: &flotilla_release::SkipEntry, name: &str, version: &str) -> bool {
    e.name == name && e.version == version
}

/// `POST /v1/hosts/{host}/unskip` (operator): allow release `name` at `version` on
/// `host` again. The request is stored pending and sent to the host's agent with
/// every release answer (its long poll is woken now) until a report of that agent
/// says it removed the entries and shows none of them left; then it is `done`.
/// Requesting what is already pending for the host answers that request.
///
/// 404 when the host is neither in the selected revision nor reported by an agent;
/// 400 for a host that is not an agent host, a name or version that is not a
/// release word, or a component release no component of the host declares.
#[utoipa::path(post, path = "/v1/hosts/{host}/unskip", params(("host" = String, Path, description = "the host")),
    request_body = api::CreateUnskipRequest,
    responses((status = 200, body = api::UnskipDto), (status = 400, body = ApiError), (status = 403, body = ApiError), (status = 404, body = ApiError)))]
pub async fn request_unskip<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    headers: HeaderMap,
    Json(req): Json<api::CreateUnskipRequest>,
) -> Answer<api::UnskipDto> {
    let by = state.operator(&headers).await?;
    for (what, word) in [("name", &req.name), ("version", &req.version)] {
        if !flotilla_release::manifest::is_release_word(word) {
            return Err(invalid(format!(
                "release {what} `{word}`: letters, digits and `._+-`, starting with a letter or digit"
            )));
        }
    }
    let last = state
        .releases
        .updates
        .lock()
        .expect("not poisoned")
        .get(&host)
        .cloned();
    let found: Vec<flotilla_release::SkipEntry> = last
        .as_ref()
        .map(|u| {
            u.skipped
                .iter()
                .filter(|e| is_of(e, &req.name, &req.version))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let topology = state.current_topology();
    match topology.as_ref().and_then(|t| t.hosts.get(&host)) {
        Some(h) if h.transport != TransportKind::Agent => {
            return Err(invalid(format!(
                "host `{host}` is a `{}` host, not an agent host: only an agent keeps skip lists the authority can clear",
                h.transport.as_str()
            )))
        }
        Some(_) => {
            let t = topology.as_ref().expect("the host came from it");
            let declared = req.name == flotilla_release::AGENT_RELEASE
                || t.components.iter().any(|c| {
                    c.host == host && c.release.as_ref().is_some_and(|r| r.name == req.name)
                });
            if !declared && found.is_empty() {
                return Err(invalid(format!(
                    "no component of host `{host}` declares release `{}` (release = {{ name = \"{}\", root = \"…\" }}), and its skip lists hold none: nothing to clear",
                    req.name, req.name
                )));
            }
        }
        // A host no longer in the selected revision whose agent still reports.
        None if last.is_some() => {}
        None => {
            return Err(not_found(format!(
                "no host `{host}`: it is not in the selected revision and no agent reported for it"
            )))
        }
    }
    let mut unskips = state.releases.unskips.lock().await;
    if let Some(same) = unskips
        .values_mut()
        .find(|u| u.host == host && u.name == req.name && u.version == req.version)
    {
        // Asked again (after fixing what made the agent fail, say): the agent's last
        // error is forgotten and its next outcome awaited afresh.
        if same.error.take().is_some() {
            let doc = serde_json::to_string(&*same).map_err(internal)?;
            state.store.put_unskip(same.id, doc, true, now_ms()).await?;
        }
        let same = same.clone();
        drop(unskips);
        state.releases.bump();
        crate::cluster::announce(&state, crate::cluster::Wake::Releases).await;
        return Ok(Json(same));
    }
    let now = now_ms();
    let mut doc = api::UnskipDto {
        id: 0,
        host: host.clone(),
        name: req.name,
        version: req.version,
        state: api::UnskipState::Pending,
        requested_ms: now,
        requested_by: by,
        done_ms: None,
        found,
        cleared: Vec::new(),
        error: None,
    };
    // The stored document's id is the store's (filled in when it is read back).
    let text = serde_json::to_string(&doc).map_err(internal)?;
    doc.id = state.store.create_unskip(host.clone(), text, now).await?;
    tracing::info!(
        "unskip {}: {} {} on `{host}` requested by {}",
        doc.id,
        doc.name,
        doc.version,
        doc.requested_by
    );
    unskips.insert(doc.id, doc.clone());
    drop(unskips);
    // The host's release long poll answers at once with the request.
    state.releases.bump();
    state.releases.unskip_changes.send_modify(|i| *i += 1);
    crate::cluster::announce(&state, crate::cluster::Wake::Releases).await;
    Ok(Json(doc))
}

/// Unskip request `id`: pending ones from memory, others from the store.
async fn unskip_doc<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<api::UnskipDto, Failure> {
    if let Some(u) = state.releases.unskips.lock().await.get(&id) {
        return Ok(u.clone());
    }
    let r = state
        .store
        .unskip(id)
        .await?
        .ok_or_else(|| not_found(format!("no unskip request {id}")))?;
    let mut doc: api::UnskipDto = serde_json::from_str(&r.doc).map_err(internal)?;
    doc.id = r.id;
    Ok(doc)
}

/// `GET /v1/unskips/{id}?wait=30s` (operator): an unskip request, long-polled: answers
/// once it is `done` or carries an error from the host's agent, else after `wait`
/// (at most 5 min, default 30 s) as it stands.
#[utoipa::path(get, path = "/v1/unskips/{id}", params(("id" = u64, Path, description = "the unskip request"), crate::longpoll::WaitQuery),
    responses((status = 200, body = api::UnskipDto), (status = 403, body = ApiError), (status = 404, body = ApiError)))]
pub async fn get_unskip<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    Query(q): Query<crate::longpoll::WaitQuery>,
    headers: HeaderMap,
) -> Answer<api::UnskipDto> {
    state.operator(&headers).await?;
    let wait = wait_of(&q.wait)?;
    let deadline = tokio::time::Instant::now() + wait;
    let mut rx = state.releases.unskip_changes.subscribe();
    loop {
        rx.borrow_and_update();
        let doc = unskip_doc(&state, id).await?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if doc.state == api::UnskipState::Done || doc.error.is_some() || left.is_zero() {
            return Ok(Json(doc));
        }
        let _waiting = crate::metrics::Held::new(&state.metrics.longpoll_waiters);
        let _ = tokio::time::timeout(left, rx.changed()).await;
    }
}

/// Takes what `host`'s agent said of its pending unskip requests in `update`: one it
/// carried out (an outcome without error) whose release version `update`'s skip lists
/// no longer hold is `done` (stored, then dropped from the pending ones); an outcome
/// with an error is kept on the request, which stays pending. Wakes those waiting on
/// a request that changed.
async fn settle_unskips<S: AuthorityStore>(
    state: &AppState<S>,
    host: &str,
    update: &HostUpdate,
) -> Result<(), Failure> {
    if update.unskipped.is_empty() {
        return Ok(());
    }
    let mut unskips = state.releases.unskips.lock().await;
    let mut changed = false;
    let ids: Vec<u64> = unskips
        .values()
        .filter(|u| u.host == host)
        .map(|u| u.id)
        .collect();
    for id in ids {
        let Some(outcome) = update.unskipped.iter().find(|o| o.id == id) else {
            continue;
        };
        let mut u = unskips[&id].clone();
        let pending = match &outcome.error {
            Some(e) if u.error.as_ref() == Some(e) => continue,
            Some(e) => {
                u.error = Some(e.clone());
                true
            }
            // Removed, but this report still lists some: a rollback added it again
            // since, or the report was made before; wait for the next one.
            None if update.skipped.iter().any(|e| is_of(e, &u.name, &u.version)) => continue,
            None => {
                u.state = api::UnskipState::Done;
                u.done_ms = Some(update.received_ms);
                u.error = None;
                u.cleared = if outcome.cleared.is_empty() {
                    u.found.clone()
                } else {
                    outcome.cleared.clone()
                };
                false
            }
        };
        let doc = serde_json::to_string(&u).map_err(internal)?;
        state
            .store
            .put_unskip(id, doc, pending, update.received_ms)
            .await?;
        match (&u.error, pending) {
            (Some(e), true) => tracing::warn!(
                "unskip {id}: {} {} on `{host}`: the agent could not clear it: {e}",
                u.name,
                u.version
            ),
            _ => tracing::info!(
                "unskip {id}: {} {} on `{host}` done: {} entr{} cleared",
                u.name,
                u.version,
                u.cleared.len(),
                if u.cleared.len() == 1 { "y" } else { "ies" }
            ),
        }
        if pending {
            unskips.insert(id, u);
        } else {
            unskips.remove(&id);
        }
        changed = true;
    }
    drop(unskips);
    if changed {
        state.releases.unskip_changes.send_modify(|i| *i += 1);
        crate::cluster::announce(state, crate::cluster::Wake::Releases).await;
    }
    Ok(())
}

/// The release the newest rollout of `name` gave `host` in `phase` (`Updated`: the one
/// selected for it; `Updating`: the one it is being updated to).
fn selected(
    rollouts: &BTreeMap<u64, Rollout>,
    name: &str,
    host: &str,
    phase: flotilla_release::rollout::HostPhase,
) -> Option<flotilla_model::status::SelectedRelease> {
    rollouts.values().rev().find_map(|r| {
        if r.spec.name != name {
            return None;
        }
        let h = r.host(host).filter(|h| h.phase == phase)?;
        let (version, sha256) = r.target_of(h)?;
        Some(flotilla_model::status::SelectedRelease {
            name: r.spec.name.clone(),
            version: version.to_string(),
            sha256,
            rollout: r.id,
        })
    })
}

/// The release selected for each component of `report` whose program comes from a
/// release's install root: the newest rollout of that release that updated the
/// component's host (its measured digest is then compared with it).
pub async fn annotate_component_releases<S: AuthorityStore>(
    state: &AppState<S>,
    topology: &flotilla_model::Topology,
    report: &mut flotilla_model::status::StatusReport,
) {
    use flotilla_release::rollout::HostPhase;
    let rollouts = state.releases.rollouts.lock().await;
    for c in &mut report.components {
        let Some(spec) = topology
            .components
            .iter()
            .find(|t| t.name == c.name)
            .and_then(|t| t.release.as_ref())
        else {
            continue;
        };
        let Some(rt) = c.runtime_identity.as_mut() else {
            continue;
        };
        rt.release = selected(&rollouts, &spec.name, &c.host, HostPhase::Updated);
    }
}

/// Every reporting agent's runtime identity: the digest it measured of its own
/// executable against the release selected for its host (the newest rollout that
/// updated it) and the one a rollout is updating it to, if any.
pub async fn agent_identities<S: AuthorityStore>(
    state: &AppState<S>,
) -> BTreeMap<String, api::AgentIdentityDto> {
    use flotilla_release::rollout::HostPhase;
    let updates = state.releases.updates.lock().expect("not poisoned").clone();
    let rollouts = state.releases.rollouts.lock().await;
    let mut out = BTreeMap::new();
    for (host, u) in updates {
        let pick = |phase| {
            selected(&rollouts, flotilla_release::AGENT_RELEASE, &host, phase)
                .map(api::SelectedReleaseDto::from)
        };
        let release = pick(HostPhase::Updated);
        let window = state.settings_report_deadline_ms();
        let two = state
            .releases
            .pids
            .lock()
            .expect("not poisoned")
            .get(&host)
            .and_then(|p| two_agents(p, now_ms(), window));
        let updating_to = pick(HostPhase::Updating);
        let runtime_identity = match (&release, &u.running_sha256) {
            (None, _) => "no-release",
            (Some(r), Some(running))
                if running.strip_prefix("sha256:").unwrap_or(running) == r.sha256 =>
            {
                "matches"
            }
            (Some(_), _) => "differs",
        }
        .to_string();
        out.insert(
            host,
            api::AgentIdentityDto {
                running_sha256: u.running_sha256,
                pid: u.pid,
                reported_ms: u.received_ms,
                release,
                updating_to,
                runtime_identity,
                skipped: u.skipped,
                conflict: two.map(|(a, b)| {
                    format!(
                        "two agents report for this host (pids {a} and {b}): one credential used by two agents (two state directories, or copied to another machine); stop one"
                    )
                }),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::two_agents;
    use std::collections::VecDeque;

    fn seen(pids: &[(u32, i64)]) -> VecDeque<(u32, i64)> {
        pids.iter().copied().collect()
    }

    #[test]
    fn two_agents_alternate_a_restart_does_not() {
        // One agent, reporting on: nothing.
        assert_eq!(
            two_agents(&seen(&[(1, 0), (1, 10), (1, 20)]), 30, 45_000),
            None
        );
        // Restarted (a self-update): the old pid falls silent.
        assert_eq!(
            two_agents(&seen(&[(1, 0), (1, 10), (2, 20), (2, 30)]), 40, 45_000),
            None
        );
        // Two agents on one credential: 1, 2, 1.
        assert_eq!(
            two_agents(&seen(&[(1, 0), (2, 10), (1, 20)]), 30, 45_000),
            Some((1, 2))
        );
        // Outside the window it is history, not a conflict.
        assert_eq!(
            two_agents(&seen(&[(1, 0), (2, 10), (1, 20)]), 100_000, 45_000),
            None
        );
        // Rolled back: the old version's agent is back after the new one: 1, 2, 1 too,
        // but spread over a restart each; within the window it reads as two agents
        // only while both report.
        assert_eq!(
            two_agents(&seen(&[(1, 0), (2, 50_000), (3, 100_000)]), 100_001, 45_000),
            None
        );
    }
}
