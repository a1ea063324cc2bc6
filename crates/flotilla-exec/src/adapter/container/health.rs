//! A container's health check on an engine that does not run it by itself.
//!
//! Docker Engine runs a container's health check (its image's `HEALTHCHECK`, or
//! `container.healthcheck`) every interval from its daemon. Podman has no daemon: it
//! runs each check from a transient systemd timer (`podman healthcheck run <id>`), so
//! where systemd is not PID 1 — a container, WSL, a minimal host, this project's test
//! machine — no check ever runs and the engine reports `starting` for ever (Podman
//! 4.3 logs "unable to get systemd connection to add healthchecks"; the maintainers'
//! account: podman issues #19326 and #28192; since 4.4 Podman disables such checks
//! there instead, pull request #16749).
//!
//! So when the engine is Podman and a running container's check is due — none has run
//! since the container started, or the last one ended an interval ago or more — it is
//! run once through Podman's own API, `GET /v4.0.0/libpod/containers/{id}/healthcheck`
//! (what `podman healthcheck run` does): the engine runs the test in the container
//! and records the result, failing streak and `unhealthy` after the retries, in its
//! state, exactly as a timer's run would, and `inspect` (here, `podman inspect`,
//! `docker inspect` through the compatible API) shows it. Where the timers run, a
//! check is rarely due when looked at, and one run more changes nothing.

use super::engine::{Engine, EngineError};
use bollard::models::{ContainerInspectResponse, HealthStatusEnum};
use std::time::{Duration, SystemTime};

/// The interval of a health check that does not set one (Docker's and Podman's).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// The time of an engine timestamp (RFC 3339; `0001-01-01…` for never), if it is one.
fn time_of(t: Option<&str>) -> Option<SystemTime> {
    t.filter(|t| !t.starts_with("0001-"))
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

/// When the container's next health check is due: an interval after the end of its
/// last one, or after its start when none has run. `None` when it has no health
/// check, does not run, or the engine says neither.
pub fn due_at(info: &ContainerInspectResponse) -> Option<SystemTime> {
    let state = info.state.as_ref()?;
    if state.running != Some(true) {
        return None;
    }
    let health = state.health.as_ref()?;
    if matches!(
        health.status,
        None | Some(HealthStatusEnum::EMPTY | HealthStatusEnum::NONE)
    ) {
        return None;
    }
    let interval = info
        .config
        .as_ref()
        .and_then(|c| c.healthcheck.as_ref())
        .and_then(|h| h.interval)
        .and_then(|ns| u64::try_from(ns).ok())
        .filter(|&ns| ns > 0)
        .map_or(DEFAULT_INTERVAL, Duration::from_nanos);
    let last = health
        .log
        .as_ref()
        .and_then(|l| l.last())
        .and_then(|r| time_of(r.end.as_deref()));
    let since = last.or_else(|| time_of(state.started_at.as_deref()))?;
    Some(since + interval)
}

/// Runs the container's health check through Podman's API when the engine is Podman
/// and the check is due (see the module docs), then inspects it again. `Ok(None)`
/// when nothing was run (not Podman, no check, not due).
///
/// # Errors
/// [`EngineError`] of the version, health check or inspect call; an answer other
/// than 200 as [`EngineError::Api`] with Podman's message.
pub fn run_if_due(
    engine: &Engine,
    info: &ContainerInspectResponse,
) -> Result<Option<ContainerInspectResponse>, EngineError> {
    let Some(due) = due_at(info) else {
        return Ok(None);
    };
    if SystemTime::now() < due || !engine.is_podman()? {
        return Ok(None);
    }
    let id = info.id.clone().unwrap_or_default();
    let what = format!("run the health check of container {id}");
    let answer = engine.raw_get(
        &what,
        &format!("/v4.0.0/libpod/containers/{id}/healthcheck"),
    )?;
    if answer.status != 200 {
        let message = serde_json::from_str::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| answer.body.trim().to_string());
        return Err(EngineError::Api {
            what,
            status: answer.status,
            message,
        });
    }
    super::inspect(engine, &id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{
        ContainerConfig, ContainerState, Health, HealthConfig, HealthcheckResult,
    };

    fn info(interval_ns: Option<i64>, last_end: Option<&str>) -> ContainerInspectResponse {
        ContainerInspectResponse {
            id: Some("abc".into()),
            state: Some(ContainerState {
                running: Some(true),
                started_at: Some("2026-01-01T00:00:00Z".into()),
                health: Some(Health {
                    status: Some(HealthStatusEnum::STARTING),
                    failing_streak: Some(0),
                    log: last_end.map(|e| {
                        vec![HealthcheckResult {
                            end: Some(e.into()),
                            exit_code: Some(0),
                            ..HealthcheckResult::default()
                        }]
                    }),
                }),
                ..ContainerState::default()
            }),
            config: Some(ContainerConfig {
                healthcheck: Some(HealthConfig {
                    interval: interval_ns,
                    ..HealthConfig::default()
                }),
                ..ContainerConfig::default()
            }),
            ..ContainerInspectResponse::default()
        }
    }

    fn at(t: &str) -> SystemTime {
        humantime::parse_rfc3339_weak(t).unwrap()
    }

    #[test]
    fn a_check_is_due_an_interval_after_the_last_one_or_the_start() {
        // None yet: an interval (default 30 s) after the start.
        assert_eq!(due_at(&info(None, None)), Some(at("2026-01-01T00:00:30Z")));
        assert_eq!(
            due_at(&info(Some(2_000_000_000), None)),
            Some(at("2026-01-01T00:00:02Z"))
        );
        // After the last one's end (Podman writes nanoseconds).
        assert_eq!(
            due_at(&info(
                Some(1_000_000_000),
                Some("2026-01-01T00:05:00.500000000Z")
            )),
            Some(at("2026-01-01T00:05:01.5Z"))
        );
        // No check, or not running: never.
        let mut none = info(None, None);
        none.state.as_mut().unwrap().health = None;
        assert_eq!(due_at(&none), None);
        let mut off = info(None, None);
        off.state.as_mut().unwrap().health.as_mut().unwrap().status = Some(HealthStatusEnum::NONE);
        assert_eq!(due_at(&off), None);
        let mut stopped = info(None, None);
        stopped.state.as_mut().unwrap().running = Some(false);
        assert_eq!(due_at(&stopped), None);
    }
}
