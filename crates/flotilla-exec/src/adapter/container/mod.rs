//! Container components (adapter `container`): containers run by a container engine
//! through the Docker Engine API (Docker Engine, or Podman's compatible service).
//!
//! - `engine`: the socket (`container_api`, `$DOCKER_HOST`, Docker's default), a time
//!   limit on every call, typed errors.
//! - `create`: the engine's create body from the component (command, entrypoint,
//!   environment, ports on loopback unless asked, mounts, secrets as read-only files,
//!   devices and GPU requests, health check, the engine's restart policy, labels).
//! - `health`: a container's health check run through Podman's API when the engine
//!   would never run it by itself (Podman without systemd).
//! - `logs`: the engine's log lines, with its own timestamps, copied into the
//!   component's log file so `flotilla logs` reads them like any other.
//! - this file: the [`Adapter`] (start, stop, observe), identity and the owner's checks.
//!
//! **Identity.** What a container runs is the image the engine started it from: its
//! [`RuntimeIdentity`] has `exe = "container:<id>"`, `exe_sha256` = the image id
//! (`sha256:…`), `start_time_ticks` = the engine's `StartedAt` in ms since the Unix
//! epoch, `pid` = its main process as the engine reports it (`pgid` 0: Flotilla never
//! signals it, the engine does), `argv_digest` = the digest of the argv the engine
//! runs. A restart is proven by a new container id or start time running the image
//! the reference names now; a tag moved to another image since is `stale-runtime`.
//!
//! **Ownership.** Every container Flotilla creates carries the labels
//! `io.flotilla.project`, `io.flotilla.component`, `io.flotilla.instance` (the
//! operation that created it) and `io.flotilla.config-digest`. A container with the
//! component's container name but without them (or another project's) is foreign:
//! never stopped, removed or replaced.

pub mod create;
pub mod engine;
pub mod health;
pub mod logs;
pub mod preflight;

use super::{Adapter, Freshness, Launch, Launched, Seen, Stopped};
use crate::error::ExecError;
use crate::identity::RuntimeIdentity;
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum, HealthStatusEnum};
use engine::{Engine, EngineError};
use flotilla_model::inventory::{AdapterKind, ContainerSpec, PullPolicy};
use flotilla_model::status::Lifecycle;
use flotilla_model::topology::Component;
use flotilla_store::InstanceRecord;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Label: the project that created the container.
pub const LABEL_PROJECT: &str = "io.flotilla.project";
/// Label: the component it runs.
pub const LABEL_COMPONENT: &str = "io.flotilla.component";
/// Label: the operation that created it.
pub const LABEL_INSTANCE: &str = "io.flotilla.instance";
/// Label: the component's config digest when it was created.
pub const LABEL_CONFIG_DIGEST: &str = "io.flotilla.config-digest";

/// How an instance's `exe` names a container: `container:<id>`.
const EXE_PREFIX: &str = "container:";

/// The container adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Container;

/// Whether an instance record's `exe` names a container (`container:<id>`).
pub fn is_container_record(exe: &str) -> bool {
    exe.starts_with(EXE_PREFIX)
}

/// The id of the container an identity names (`exe = "container:<id>"`), if it does.
pub fn container_id(identity: &RuntimeIdentity) -> Option<&str> {
    identity.exe.to_str()?.strip_prefix(EXE_PREFIX)
}

fn spec(c: &Component) -> Result<&ContainerSpec, ExecError> {
    c.container.as_ref().ok_or_else(|| ExecError::Adapter {
        component: c.name.clone(),
        message: "has no `container` table".into(),
    })
}

/// The engine of `c`'s host.
///
/// # Errors
/// [`EngineError`] when its socket is not a unix socket or does not exist.
pub fn engine_for(c: &Component) -> Result<Engine, EngineError> {
    Engine::connect(&engine::socket_for(c.container_api.as_deref()))
}

/// The name of `c`'s container in `project`: declared, else
/// `flotilla-<project>-<component>` (like compose's `<project>-<service>-1`, so that
/// two projects' components of one name never share a container name).
pub fn container_name(project: &str, c: &Component) -> String {
    c.container
        .as_ref()
        .and_then(|k| k.name.clone())
        .unwrap_or_else(|| format!("flotilla-{project}-{}", c.name))
}

fn adapter_err(c: &Component, e: impl std::fmt::Display) -> ExecError {
    ExecError::Adapter {
        component: c.name.clone(),
        message: e.to_string(),
    }
}

/// An engine id or digest (64 hex digits, maybe `sha256:`-prefixed) shortened to its
/// first 12 digits, as `docker ps` shows it; anything else (a container's name) whole.
fn short(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    if hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        &hex[..12]
    } else {
        id
    }
}

/// Inspects a container by id or name; `None` when the engine has none.
///
/// # Errors
/// Any other engine error.
pub fn inspect(
    engine: &Engine,
    name_or_id: &str,
) -> Result<Option<ContainerInspectResponse>, EngineError> {
    // A state the API does not define (Podman's transient `stopped`) is asked
    // again until it settles, for at most TRANSIENT_STATE_WAIT.
    let deadline = std::time::Instant::now() + TRANSIENT_STATE_WAIT;
    loop {
        let n = name_or_id.to_string();
        match engine.call(
            &format!("inspect container {name_or_id}"),
            move |d| async move { d.inspect_container(&n, None).await },
        ) {
            Ok(i) => return Ok(Some(i)),
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) if e.is_transient_state() && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// How long [`inspect`] asks again while the engine reports a container state the
/// API does not define.
const TRANSIENT_STATE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The id of the image `reference` names in the engine now; `None` when it has none.
///
/// # Errors
/// Any other engine error.
pub fn image_id(engine: &Engine, reference: &str) -> Result<Option<String>, EngineError> {
    let r = reference.to_string();
    match engine.call(&format!("inspect image {reference}"), move |d| async move {
        d.inspect_image(&r).await
    }) {
        Ok(i) => Ok(i.id.map(|id| with_sha256(&id))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The image's own entrypoint and command (its `Config`).
///
/// # Errors
/// [`EngineError`] when the engine cannot be asked or has no such image.
fn image_command(engine: &Engine, reference: &str) -> Result<create::ImageCommand, EngineError> {
    let r = reference.to_string();
    let info = engine.call(&format!("inspect image {reference}"), move |d| async move {
        d.inspect_image(&r).await
    })?;
    let config = info.config.unwrap_or_default();
    Ok(create::ImageCommand {
        entrypoint: config.entrypoint.unwrap_or_default(),
        cmd: config.cmd.unwrap_or_default(),
    })
}

/// [`image_id`], asked once for all the components of one observation: answers
/// younger than half a second are shared within this process (a whole `status` of
/// many containers of one image asks the engine once).
fn image_id_shared(engine: &Engine, reference: &str) -> Result<Option<String>, EngineError> {
    type Seen = std::collections::HashMap<(String, String), (Instant, Option<String>)>;
    static CACHE: std::sync::OnceLock<std::sync::Mutex<Seen>> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (engine.socket.clone(), reference.to_string());
    if let Some((at, id)) = cache.lock().expect("image cache").get(&key) {
        if at.elapsed() < Duration::from_millis(500) {
            return Ok(id.clone());
        }
    }
    let id = image_id(engine, reference)?;
    cache
        .lock()
        .expect("image cache")
        .insert(key, (Instant::now(), id.clone()));
    Ok(id)
}

fn with_sha256(id: &str) -> String {
    if id.starts_with("sha256:") {
        id.to_string()
    } else {
        format!("sha256:{id}")
    }
}

fn labels(info: &ContainerInspectResponse) -> std::collections::HashMap<String, String> {
    info.config
        .as_ref()
        .and_then(|c| c.labels.clone())
        .unwrap_or_default()
}

/// Why a container is not `component`'s of `project`: `None` when it is.
fn foreign(info: &ContainerInspectResponse, project: &str, component: &str) -> Option<String> {
    let l = labels(info);
    match (l.get(LABEL_PROJECT), l.get(LABEL_COMPONENT)) {
        (None, _) | (_, None) => Some("it has no Flotilla labels".into()),
        (Some(_), Some(comp)) if comp != component => {
            Some(format!("its label says it runs component `{comp}`"))
        }
        (Some(p), _) if p != project => Some(format!("it belongs to project `{p}`")),
        _ => None,
    }
}

fn started_ms(info: &ContainerInspectResponse) -> u64 {
    info.state
        .as_ref()
        .and_then(|s| s.started_at.as_deref())
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

/// The identity of a container as the engine reports it (see the module docs).
pub fn identity_of(info: &ContainerInspectResponse) -> RuntimeIdentity {
    let id = info.id.clone().unwrap_or_default();
    let mut argv: Vec<String> = info.path.iter().cloned().collect();
    argv.extend(info.args.clone().unwrap_or_default());
    RuntimeIdentity {
        pid: info
            .state
            .as_ref()
            .and_then(|s| s.pid)
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(0),
        pgid: 0,
        start_time_ticks: started_ms(info),
        exe: PathBuf::from(format!("{EXE_PREFIX}{id}")),
        exe_sha256: info.image.as_deref().map(with_sha256).unwrap_or_default(),
        argv_digest: crate::identity::argv_digest(&argv),
    }
}

fn status_of(info: &ContainerInspectResponse) -> Option<ContainerStateStatusEnum> {
    info.state.as_ref().and_then(|s| s.status)
}

/// Stops container `id` (`name` in errors) with the engine: its stop signal, then
/// `SIGKILL` after `grace` (rounded up to whole seconds, as the API takes it). One
/// that was not running (304) is no error.
///
/// # Errors
/// The engine's error (not found included), or its time limit (`grace` plus the
/// engine's own).
pub fn stop_container(
    engine: &Engine,
    id: &str,
    name: &str,
    grace: std::time::Duration,
) -> Result<(), EngineError> {
    let i = id.to_string();
    let t =
        i32::try_from(grace.as_secs() + u64::from(grace.subsec_nanos() > 0)).unwrap_or(i32::MAX);
    match engine.call_within(
        &format!("stop container {name}"),
        grace + engine.timeout,
        move |d| async move {
            let opts = bollard::query_parameters::StopContainerOptionsBuilder::new()
                .t(t)
                .build();
            d.stop_container(&i, Some(opts)).await
        },
    ) {
        Ok(()) | Err(EngineError::Api { status: 304, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether the engine says the container runs (or is restarting).
pub fn is_running(info: &ContainerInspectResponse) -> bool {
    matches!(
        status_of(info),
        Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::RESTARTING)
    )
}

/// How a container that does not run ended: `exited with code 137 at …`.
fn how_ended(info: &ContainerInspectResponse) -> String {
    let st = info.state.clone().unwrap_or_default();
    let status = st.status.map_or("unknown".to_string(), |s| s.to_string());
    let code = st.exit_code.unwrap_or_default();
    let mut out = match st.status {
        Some(ContainerStateStatusEnum::CREATED) => "created, never started".to_string(),
        _ => format!("{status} with code {code}"),
    };
    if code > 128 && code < 128 + 65 {
        let sig = nix::sys::signal::Signal::try_from((code - 128) as i32)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {}", code - 128));
        out.push_str(&format!(" (killed by {sig})"));
    }
    if st.oom_killed == Some(true) {
        out.push_str(", killed for lack of memory (OOM)");
    }
    if let Some(at) = st.finished_at.filter(|t| !t.starts_with("0001-")) {
        out.push_str(&format!(" at {at}"));
    }
    if let Some(e) = st.error.filter(|e| !e.is_empty()) {
        out.push_str(&format!(": {e}"));
    }
    out
}

/// The engine's health status and its last check's output, when the container has a
/// health check: `healthy (last check: exit 0, "ok")`.
fn health_of(info: &ContainerInspectResponse) -> Option<(HealthStatusEnum, String)> {
    let h = info.state.as_ref()?.health.as_ref()?;
    let status = h.status?;
    if matches!(status, HealthStatusEnum::EMPTY | HealthStatusEnum::NONE) {
        return None;
    }
    let last = h
        .log
        .as_ref()
        .and_then(|l| l.last())
        .map(|r| {
            format!(
                " (last check: exit {}, {:?})",
                r.exit_code.unwrap_or(-1),
                r.output.as_deref().unwrap_or("").trim()
            )
        })
        .unwrap_or_default();
    Some((status, format!("{status}{last}")))
}

/// The container a recorded instance names, else the component's container name.
fn target(project: &str, c: &Component, recorded: Option<&InstanceRecord>) -> String {
    recorded
        .and_then(|r| r.exe.strip_prefix(EXE_PREFIX))
        .map(str::to_string)
        .unwrap_or_else(|| container_name(project, c))
}

impl Container {
    /// Makes sure the image is there, pulling it when the policy says so.
    fn ensure_image(
        &self,
        c: &Component,
        engine: &Engine,
        k: &ContainerSpec,
    ) -> Result<String, ExecError> {
        let policy = k.pull.unwrap_or_default();
        let have = if policy == PullPolicy::Always {
            None
        } else {
            image_id(engine, &k.image).map_err(|e| adapter_err(c, e))?
        };
        if let Some(id) = have {
            return Ok(id);
        }
        if policy == PullPolicy::Never {
            return Err(adapter_err(
                c,
                format!(
                    "image {} is not in the engine at {} (pull = \"never\"): pull it there, or set container.pull = \"missing\"",
                    k.image, engine.socket
                ),
            ));
        }
        let reference = k.image.clone();
        engine
            .call_within(
                &format!("pull image {}", k.image),
                engine::PULL_TIMEOUT,
                move |d| async move {
                    use futures_util::StreamExt;
                    let opts = bollard::query_parameters::CreateImageOptionsBuilder::new()
                        .from_image(&reference)
                        .build();
                    let mut s = d.create_image(Some(opts), None, None);
                    while let Some(item) = s.next().await {
                        item?;
                    }
                    Ok(())
                },
            )
            .map_err(|e| adapter_err(c, e))?;
        image_id(engine, &k.image)
            .map_err(|e| adapter_err(c, e))?
            .ok_or_else(|| {
                adapter_err(
                    c,
                    format!("image {} is still absent after the pull", k.image),
                )
            })
    }

    fn remove(engine: &Engine, id: &str) -> Result<(), EngineError> {
        let i = id.to_string();
        match engine.call(
            &format!("remove container {}", short(id)),
            move |d| async move {
                let opts = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .build();
                d.remove_container(&i, Some(opts)).await
            },
        ) {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }
}

impl Adapter for Container {
    fn kind(&self) -> Option<AdapterKind> {
        Some(AdapterKind::Container)
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        let c = &launch.component;
        let k = spec(c)?;
        let engine = engine_for(c).map_err(|e| adapter_err(c, e))?;
        let name = container_name(&launch.project, c);
        self.ensure_image(c, &engine, k)?;
        // A container of that name: a leftover of ours is replaced, anyone else's is
        // never touched.
        if let Some(old) = inspect(&engine, &name).map_err(|e| adapter_err(c, e))? {
            if let Some(why) = foreign(&old, &launch.project, &c.name) {
                return Err(adapter_err(
                    c,
                    format!(
                        "a container named {name} already exists and is not this component's ({why}): not touched; remove or rename it, or set container.name"
                    ),
                ));
            }
            let id = old.id.clone().unwrap_or_else(|| name.clone());
            Container::remove(&engine, &id).map_err(|e| adapter_err(c, e))?;
        }
        // Secrets in the environment are exported by a wrapper that then runs what
        // the container would have run: the image's own command, when not declared.
        let image_command = if create::env_secrets(c).is_empty() || k.entrypoint.is_some() {
            create::ImageCommand::default()
        } else {
            image_command(&engine, &k.image).map_err(|e| adapter_err(c, e))?
        };
        let body = create::body(launch, k, &image_command).map_err(|e| adapter_err(c, e))?;
        let n = name.clone();
        let created = engine
            .call(&format!("create container {name}"), move |d| async move {
                let opts = bollard::query_parameters::CreateContainerOptionsBuilder::new()
                    .name(&n)
                    .build();
                d.create_container(Some(opts), body).await
            })
            .map_err(|e| adapter_err(c, e))?;
        let id = created.id;
        // An engine may drop a GPU request and run the container without one (Podman's
        // Docker API ignores `DeviceRequests`): refused rather than run without it.
        if k.gpus.is_some() {
            let kept = inspect(&engine, &id)
                .ok()
                .flatten()
                .and_then(|info| info.host_config)
                .and_then(|h| h.device_requests)
                .is_some_and(|r| !r.is_empty());
            if !kept {
                let _ = Container::remove(&engine, &id);
                create::forget_secrets(launch);
                return Err(adapter_err(
                    c,
                    format!(
                        "the engine at {} dropped the GPU request (container.gpus): it would run without a GPU, so it was removed; Podman's Docker API ignores GPU requests: pass the GPU's device files in container.devices instead (e.g. \"/dev/nvidia0\", \"/dev/nvidiactl\", \"/dev/nvidia-uvm\"), or use Docker Engine",
                        engine.socket
                    ),
                ));
            }
        }
        let i = id.clone();
        let started = engine.call(&format!("start container {name}"), move |d| async move {
            d.start_container(&i, None).await
        });
        if let Err(e) = started {
            // Nothing half-made is left behind: the container this start created
            // and could not start is removed.
            let cleanup = match Container::remove(&engine, &id) {
                Ok(()) => format!("the container it created ({}) was removed", short(&id)),
                Err(r) => format!(
                    "removing the container it created ({}) failed too: {r}",
                    short(&id)
                ),
            };
            create::forget_secrets(launch);
            return Err(adapter_err(c, format!("{e}; {cleanup}")));
        }
        let info = inspect(&engine, &id)
            .map_err(|e| adapter_err(c, e))?
            .ok_or_else(|| {
                adapter_err(
                    c,
                    format!("container {} vanished right after it started", short(&id)),
                )
            })?;
        let identity = identity_of(&info);
        let facts = serde_json::json!({
            "container": id,
            "name": name,
            "image": k.image,
            "image_id": identity.exe_sha256,
            "engine": engine.socket,
        });
        Ok(Launched {
            identity,
            log_start_offset: crate::logs::file_len(&launch.log_path),
            child: None,
            facts,
            start_marked: false,
        })
    }

    fn stop(
        &self,
        project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        let engine = engine_for(c).map_err(|e| adapter_err(c, e))?;
        let which = target(project, c, recorded);
        let Some(info) = inspect(&engine, &which).map_err(|e| adapter_err(c, e))? else {
            return Ok(Stopped::AlreadyGone {
                summary: format!("no container {} in the engine", short(&which)),
            });
        };
        let id = info.id.clone().unwrap_or_else(|| which.clone());
        // Identity before signal: the recorded container, or one with this
        // component's labels.
        let recorded_here = recorded.is_some_and(|r| r.exe == format!("{EXE_PREFIX}{id}"));
        if !recorded_here {
            if let Some(why) = foreign(&info, project, &c.name) {
                return Ok(Stopped::NotOurs {
                    why: format!(
                        "container {} is not this component's: {why}",
                        container_name(project, c)
                    ),
                    facts: serde_json::json!({ "container": id }),
                });
            }
        }
        let (signal, grace) = super::stop_settings(c);
        let signal = c
            .container
            .as_ref()
            .and_then(|k| k.stop_signal.as_ref())
            .map_or(signal, |s| s.as_str().to_string());
        let began = Instant::now();
        let summary = if is_running(&info) {
            match stop_container(&engine, &id, short(&id), grace) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(adapter_err(c, e)),
            }
            let after = inspect(&engine, &id).ok().flatten();
            let how = after
                .as_ref()
                .map(how_ended)
                .unwrap_or_else(|| "gone".into());
            let killed = grace > Duration::ZERO && began.elapsed() >= grace;
            format!(
                "stopped container {} ({}) with {signal}{} in {} ms: {how}",
                container_name(project, c),
                short(&id),
                if killed {
                    ", then SIGKILL after the grace period"
                } else {
                    ""
                },
                began.elapsed().as_millis()
            )
        } else {
            format!(
                "removed container {} ({}), which had {}",
                container_name(project, c),
                short(&id),
                how_ended(&info)
            )
        };
        // Its last lines go with the container: copied into its log first.
        if let Some(r) = recorded {
            let _ = logs::sync_container(&engine, &id, std::path::Path::new(&r.log_path));
        }
        Container::remove(&engine, &id).map_err(|e| adapter_err(c, e))?;
        if let Some(r) = recorded {
            create::forget_secrets_of(c, &PathBuf::from(&r.log_path));
        }
        Ok(Stopped::Stopped {
            summary,
            facts: serde_json::json!({ "container": id, "signal": signal, "grace_ms": grace.as_millis() as u64 }),
        })
    }

    fn observe(
        &self,
        project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Option<Seen>, ExecError> {
        let engine = engine_for(c).map_err(|e| adapter_err(c, e))?;
        let source = format!("engine {}", engine.socket);
        let which = target(project, c, recorded);
        let mut info = inspect(&engine, &which).map_err(|e| adapter_err(c, e))?;
        if info.is_none() && recorded.is_some() {
            // The recorded container is gone: is another of that name there?
            info = inspect(&engine, &container_name(project, c)).map_err(|e| adapter_err(c, e))?;
        }
        let Some(info) = info else {
            return Ok(Some(Seen::stopped(
                source,
                format!("no container {} in the engine", short(&which)),
            )));
        };
        let id = info.id.clone().unwrap_or_default();
        if let Some(why) = foreign(&info, project, &c.name) {
            return Ok(Some(Seen::foreign(
                source,
                format!(
                    "container {} ({}) is not this component's ({why}): not adopted, never touched",
                    container_name(project, c),
                    short(&id)
                ),
            )));
        }
        let k = spec(c)?;
        // A health check the engine does not run by itself is run now, when due.
        let (info, health_run) = match health::run_if_due(&engine, &info) {
            Ok(Some(fresh)) => (fresh, None),
            Ok(None) => (info, None),
            Err(e) => (info, Some(e.to_string())),
        };
        let identity = identity_of(&info);
        let mut evidence = Vec::new();
        let lifecycle = match status_of(&info) {
            Some(ContainerStateStatusEnum::RUNNING) => {
                evidence.push((
                    source.clone(),
                    format!(
                        "container {} ({}) running image {} ({}), main process pid {}",
                        container_name(project, c),
                        short(&id),
                        k.image,
                        short(&identity.exe_sha256),
                        identity.pid
                    ),
                ));
                Lifecycle::Running
            }
            Some(ContainerStateStatusEnum::RESTARTING) => Lifecycle::Starting,
            Some(ContainerStateStatusEnum::CREATED) => Lifecycle::Stopped,
            Some(ContainerStateStatusEnum::PAUSED) => Lifecycle::Unknown,
            // Exited with status 0 (and not killed for memory): stopped, not failed.
            Some(ContainerStateStatusEnum::EXITED)
                if info
                    .state
                    .as_ref()
                    .is_some_and(|s| s.exit_code == Some(0) && s.oom_killed != Some(true)) =>
            {
                Lifecycle::Stopped
            }
            _ => Lifecycle::Failed,
        };
        if lifecycle != Lifecycle::Running {
            evidence.push((
                source.clone(),
                format!(
                    "container {} ({}) {}",
                    container_name(project, c),
                    short(&id),
                    how_ended(&info)
                ),
            ));
        }
        if let Some((_, saw)) = health_of(&info) {
            let whose = if k.healthcheck.is_some() {
                "container.healthcheck"
            } else {
                "the image's HEALTHCHECK"
            };
            evidence.push((
                "engine health check".into(),
                format!("{whose} reports {saw}"),
            ));
        }
        if let Some(e) = health_run {
            evidence.push(("engine health check".into(), e));
        }
        let running = lifecycle == Lifecycle::Running;
        let fresh = if running {
            let now = image_id_shared(&engine, &k.image).map_err(|e| adapter_err(c, e))?;
            let stale = match &now {
                Some(now) if *now != identity.exe_sha256 => Some((
                    format!("engine image {}", k.image),
                    format!(
                        "image {} now names {}, not {} that runs: `restart` runs the new one",
                        k.image,
                        short(now),
                        short(&identity.exe_sha256)
                    ),
                )),
                Some(_) => None,
                None => Some((
                    format!("engine image {}", k.image),
                    format!(
                        "image {} is no longer in the engine (it runs {})",
                        k.image,
                        short(&identity.exe_sha256)
                    ),
                )),
            };
            Some(Freshness {
                current: now,
                stale,
            })
        } else {
            None
        };
        let recorded_main = recorded.is_some_and(|r| r.exe == identity.exe.display().to_string());
        Ok(Some(Seen {
            lifecycle,
            main: running.then_some(identity),
            recorded_main,
            owner_restarts: info.restart_count.and_then(|n| u64::try_from(n).ok()),
            evidence,
            fresh,
            foreign: None,
        }))
    }

    fn ended(&self, c: &Component, identity: &RuntimeIdentity) -> Option<String> {
        let engine = engine_for(c).ok()?;
        let id = container_id(identity)?;
        match inspect(&engine, id) {
            Ok(Some(info)) if is_running(&info) => None,
            Ok(Some(info)) => Some(format!("container {} {}", short(id), how_ended(&info))),
            Ok(None) => Some(format!("container {} is gone", short(id))),
            Err(_) => None,
        }
    }

    fn prove_restart(
        &self,
        c: &Component,
        before: Option<&RuntimeIdentity>,
        after: &RuntimeIdentity,
    ) -> Result<(), String> {
        if let Some(b) = before {
            if b.exe == after.exe && b.start_time_ticks == after.start_time_ticks {
                return Err(format!(
                    "restart had no effect: container {} started at the same time is still running",
                    container_id(b).map(short).unwrap_or("?")
                ));
            }
        }
        let k = c.container.as_ref().ok_or("no container table")?;
        let engine = engine_for(c).map_err(|e| e.to_string())?;
        match image_id(&engine, &k.image) {
            Ok(Some(now)) if now != after.exe_sha256 => Err(format!(
                "restart did not run the image {} names now ({}): the new container runs {}",
                k.image,
                short(&now),
                short(&after.exe_sha256)
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn collect_log(
        &self,
        project: &str,
        c: &Component,
        log: &std::path::Path,
    ) -> Option<Result<usize, String>> {
        Some(logs::sync(project, c, log).map_err(|e| e.to_string()))
    }

    fn owner_checks(
        &self,
        project: &str,
        c: &Component,
    ) -> Option<Arc<dyn crate::probe::OwnerChecks>> {
        Some(Arc::new(Checks {
            project: project.to_string(),
            component: c.clone(),
        }))
    }
}

/// The `process` and `container_health` checks of a container component, asked of
/// its engine.
struct Checks {
    project: String,
    component: Component,
}

impl Checks {
    fn inspect(
        &self,
        identity: Option<&RuntimeIdentity>,
    ) -> Result<ContainerInspectResponse, String> {
        let engine = engine_for(&self.component).map_err(|e| e.to_string())?;
        let which = identity.and_then(container_id).map_or_else(
            || container_name(&self.project, &self.component),
            str::to_string,
        );
        inspect(&engine, &which)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no container {} in the engine", short(&which)))
    }
}

impl crate::probe::OwnerChecks for Checks {
    fn alive(&self, identity: Option<&RuntimeIdentity>) -> Result<String, String> {
        let info = self.inspect(identity)?;
        let id = info.id.clone().unwrap_or_default();
        if is_running(&info) {
            Ok(format!(
                "container {} running (pid {})",
                short(&id),
                identity_of(&info).pid
            ))
        } else {
            Err(format!("container {} {}", short(&id), how_ended(&info)))
        }
    }

    fn healthy(&self, identity: Option<&RuntimeIdentity>) -> Result<String, String> {
        let info = self.inspect(identity)?;
        let engine = engine_for(&self.component).map_err(|e| e.to_string())?;
        let info = health::run_if_due(&engine, &info)
            .map_err(|e| e.to_string())?
            .unwrap_or(info);
        match health_of(&info) {
            Some((HealthStatusEnum::HEALTHY, saw)) => Ok(format!("engine reports {saw}")),
            Some((_, saw)) => Err(format!("engine reports {saw}")),
            None => Err(
                "the container has no health check (neither its image's HEALTHCHECK nor container.healthcheck)"
                    .into(),
            ),
        }
    }
}

/// How `c`'s container (of `project`) ended, when the engine still has it and it does not run:
/// `(exit status 0, "container 4f2a… exited with code 137 (killed by SIGKILL) at …")`.
/// What supervision's `on-failure` policy goes by.
pub fn last_exit(project: &str, c: &Component) -> Option<(bool, String)> {
    let engine = engine_for(c).ok()?;
    let info = inspect(&engine, &container_name(project, c)).ok()??;
    if is_running(&info) || foreign(&info, project, &c.name).is_some() {
        return None;
    }
    let code = info.state.as_ref().and_then(|s| s.exit_code).unwrap_or(-1);
    let id = info.id.clone().unwrap_or_default();
    Some((
        code == 0,
        format!("container {} {}", short(&id), how_ended(&info)),
    ))
}

/// Network modes every engine has (Docker's `bridge`, `host`, `none`, `default`;
/// Podman's `podman`, `private`, `slirp4netns`, `pasta`): never asked about.
const BUILTIN_NETWORKS: &[&str] = &[
    "bridge",
    "host",
    "none",
    "default",
    "podman",
    "private",
    "slirp4netns",
    "pasta",
];

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_shortened_and_names_are_not() {
        let id = "0123456789abcdef".repeat(4);
        assert_eq!(super::short(&id), "0123456789ab");
        assert_eq!(super::short(&format!("sha256:{id}")), "0123456789ab");
        assert_eq!(super::short("flotilla-rvg-web-ui"), "flotilla-rvg-web-ui");
        assert_eq!(super::short("deadbeef"), "deadbeef");
    }
}
