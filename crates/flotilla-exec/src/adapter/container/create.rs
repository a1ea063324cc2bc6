//! The engine's container create body (Docker Engine API `POST /containers/create`)
//! from a component: its command (`Cmd`), entrypoint, environment (declared only),
//! labels, user, published ports (loopback unless asked), mounts (bind sources
//! relative to the inventory's directory, which must exist), secrets as read-only
//! files at `/run/secrets/<NAME>`, devices, GPU requests, health check, network,
//! restart policy and stop signal.
//!
//! Secret values go into files under the project's state directory
//! (`run/secrets/<component>/<NAME>`, directory 0700; the file 0400 owned by a
//! numeric `user`, else 0444 so that the image's own user reads it, as Docker's
//! secrets default to), bind-mounted read-only: the container's `inspect` shows
//! the file's path, never its value.
//!
//! An environment variable that takes a secret (`env = { KEY = { secret = "S" } }`,
//! e.g. LiteLLM's `LITELLM_MASTER_KEY`, which no `*_FILE` replaces) is not put in the
//! container's environment, which `inspect` shows: its secret is a file like the
//! others, and the container runs `/bin/sh -c '<export KEY from /run/secrets/S>; exec
//! "$@"' flotilla-env <its command>`, where its command is the image's entrypoint
//! and command as the engine would merge them with the declared ones (Docker Engine
//! API: a declared `Entrypoint` drops the image's `Cmd`). The image needs a
//! `/bin/sh`.

use super::{LABEL_COMPONENT, LABEL_CONFIG_DIGEST, LABEL_INSTANCE, LABEL_PROJECT};
use crate::adapter::Launch;
use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, HealthConfig, HostConfig, Mount, MountType,
    PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use flotilla_model::inventory::{ContainerSpec, EngineRestart, GpuCount, VolumeType};
use flotilla_model::topology::Component;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where a container component's secret files are kept: `<state root>/run/secrets/<component>`.
pub fn secrets_dir(state_root: &Path, component: &str) -> PathBuf {
    state_root.join("run").join("secrets").join(component)
}

/// Removes the secret files written for `launch`'s component.
pub fn forget_secrets(launch: &Launch) {
    let _ = std::fs::remove_dir_all(secrets_dir(&launch.state_root, &launch.component.name));
}

/// Removes the secret files of `c`, whose log is at `log_path` (`<root>/logs/<c>.log`).
pub fn forget_secrets_of(c: &Component, log_path: &Path) {
    if let Some(root) = log_path.parent().and_then(Path::parent) {
        let _ = std::fs::remove_dir_all(secrets_dir(root, &c.name));
    }
}

/// Writes `launch`'s secret files (see the module docs), owned by the container's
/// user when it is given as a number; returns `(file on the host, name)`.
fn write_secrets(launch: &Launch, user: Option<&str>) -> Result<Vec<(PathBuf, String)>, String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if launch.secret_files.is_empty() {
        return Ok(Vec::new());
    }
    let dir = secrets_dir(&launch.state_root, &launch.component.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    // The engine reads the files as this user; the container's user must too. A
    // numeric user owns them (0400); any other (a name, or the image's own USER,
    // which may not be root) reads them as everyone in the container may (0444, as
    // Docker's own secrets default to): the directory here stays this user's alone.
    let owner = user
        .and_then(|u| u.split(':').next())
        .and_then(|u| u.parse::<u32>().ok());
    let mode = if owner.is_some() { 0o400 } else { 0o444 };
    let mut out = Vec::new();
    for (name, value) in &launch.secret_files {
        let path = dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        f.write_all(value.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // Exactly `mode`, whatever the umask.
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&path, Some(uid), None)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        out.push((path, name.clone()));
    }
    Ok(out)
}

/// The image's own `Entrypoint` and `Cmd` (Docker Engine API image `Config`), what a
/// container runs when the component declares neither; empty when not asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageCommand {
    /// The image's `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// The image's `Cmd`.
    pub cmd: Vec<String>,
}

/// The environment variables of `c` that take a secret, `(variable, secret)`, in
/// the variables' order: read from files in the container (see the module docs).
pub fn env_secrets(c: &Component) -> Vec<(String, String)> {
    c.env
        .iter()
        .filter_map(|(k, v)| match v {
            flotilla_model::values::EnvValue::Secret(s) => Some((k.clone(), s.clone())),
            flotilla_model::values::EnvValue::Literal(_) => None,
        })
        .collect()
}

/// The secrets a container component gets as files in `/run/secrets`: its
/// `container.secrets`, then those its environment takes ([`env_secrets`]), each
/// once; none for a component that is not a container.
pub fn secret_files(c: &Component) -> Vec<String> {
    let Some(k) = &c.container else {
        return Vec::new();
    };
    let mut names = k.secrets.clone();
    for (_, s) in env_secrets(c) {
        if !names.contains(&s) {
            names.push(s);
        }
    }
    names
}

/// `/bin/sh -c SCRIPT flotilla-env`: SCRIPT exports each variable from its secret's
/// file, keeping trailing newlines (`$(cat F; printf x)`, then `${V%x}`), and
/// `exec "$@"` runs the command given after it.
pub fn secret_entrypoint(vars: &[(String, String)]) -> Vec<String> {
    let mut script = String::new();
    for (var, secret) in vars {
        // `var` is a shell name (validation); the path is single-quoted.
        let path = format!("'/run/secrets/{}'", secret.replace('\'', "'\\''"));
        script.push_str(&format!(
            "{var}=\"$(cat {path}; printf x)\" && {var}=\"${{{var}%x}}\" && export {var} && "
        ));
    }
    script.push_str("exec \"$@\"");
    vec!["/bin/sh".into(), "-c".into(), script, "flotilla-env".into()]
}

fn nanos(d: Option<flotilla_model::values::HumanDuration>) -> Option<i64> {
    d.map(|d| i64::try_from(d.0.as_nanos()).unwrap_or(i64::MAX))
}

/// The create body for `launch`'s component with container `k`.
///
/// # Errors
/// A bind mount whose source does not exist, or a secret file that cannot be written.
pub fn body(
    launch: &Launch,
    k: &ContainerSpec,
    image: &ImageCommand,
) -> Result<ContainerCreateBody, String> {
    let c = &launch.component;
    let from_files = env_secrets(c);
    let mut mounts = Vec::new();
    for v in &k.volumes {
        let source = match v.kind {
            VolumeType::Bind => {
                let p = launch.cwd.join(&v.source);
                if !p.exists() {
                    return Err(format!(
                        "volume source {} ({}) does not exist: create it, or fix container.volumes",
                        v.source,
                        p.display()
                    ));
                }
                p.display().to_string()
            }
            VolumeType::Volume => v.source.clone(),
        };
        mounts.push(Mount {
            target: Some(v.target.clone()),
            source: Some(source),
            typ: Some(match v.kind {
                VolumeType::Bind => MountType::BIND,
                VolumeType::Volume => MountType::VOLUME,
            }),
            read_only: Some(v.read_only),
            ..Default::default()
        });
    }
    for (path, name) in write_secrets(launch, k.user.as_deref())? {
        mounts.push(Mount {
            target: Some(format!("/run/secrets/{name}")),
            source: Some(path.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    let mut port_bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    let mut exposed = Vec::new();
    for p in &k.ports {
        let key = format!("{}/{}", p.target.0, p.protocol.unwrap_or_default().as_str());
        exposed.push(key.clone());
        port_bindings
            .entry(key)
            .or_insert_with(|| Some(Vec::new()))
            .get_or_insert_with(Vec::new)
            .push(PortBinding {
                host_ip: Some(p.host_ip.clone().unwrap_or_else(|| "127.0.0.1".into())),
                host_port: Some(p.published.0.to_string()),
            });
    }
    let devices: Vec<DeviceMapping> = k
        .devices
        .iter()
        .map(|d| {
            let mut parts = d.splitn(3, ':');
            let host = parts.next().unwrap_or_default().to_string();
            let inside = parts.next().map_or_else(|| host.clone(), str::to_string);
            DeviceMapping {
                path_on_host: Some(host),
                path_in_container: Some(inside),
                cgroup_permissions: Some(parts.next().unwrap_or("rwm").to_string()),
            }
        })
        .collect();
    let device_requests = k.gpus.as_ref().map(|g| {
        vec![DeviceRequest {
            driver: g.driver.clone(),
            count: match (g.count, g.device_ids.is_empty()) {
                (Some(GpuCount::Count(n)), _) => Some(i64::from(n)),
                (Some(GpuCount::All), _) | (None, true) => Some(-1),
                (None, false) => None,
            },
            device_ids: (!g.device_ids.is_empty()).then(|| g.device_ids.clone()),
            capabilities: Some(vec![if g.capabilities.is_empty() {
                vec!["gpu".to_string()]
            } else {
                g.capabilities.clone()
            }]),
            options: None,
        }]
    });
    let restart = match k.restart.unwrap_or_default() {
        EngineRestart::No => RestartPolicyNameEnum::NO,
        EngineRestart::OnFailure => RestartPolicyNameEnum::ON_FAILURE,
        EngineRestart::Always => RestartPolicyNameEnum::ALWAYS,
        EngineRestart::UnlessStopped => RestartPolicyNameEnum::UNLESS_STOPPED,
    };
    let grace = c.stop.as_ref().map_or(10, |s| s.grace_period.0.as_secs());
    let labels: HashMap<String, String> = [
        (LABEL_PROJECT, launch.project.clone()),
        (LABEL_COMPONENT, c.name.clone()),
        (LABEL_INSTANCE, launch.operation.clone()),
        (LABEL_CONFIG_DIGEST, c.config_digest()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let env: Vec<String> = launch
        .env
        .iter()
        .filter(|(k, _)| k != crate::process::INSTANCE_MARKER)
        .filter(|(k, _)| !from_files.iter().any(|(var, _)| var == k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let (entrypoint, cmd) = if from_files.is_empty() {
        (
            k.entrypoint.clone(),
            (!launch.argv.is_empty()).then(|| launch.argv.clone()),
        )
    } else {
        let run = match (&k.entrypoint, launch.argv.is_empty()) {
            (Some(ep), _) => [ep.clone(), launch.argv.clone()].concat(),
            (None, false) => [image.entrypoint.clone(), launch.argv.clone()].concat(),
            (None, true) => [image.entrypoint.clone(), image.cmd.clone()].concat(),
        };
        if run.is_empty() {
            return Err(format!(
                "env {} takes a secret, which the container exports before it runs its command, but neither the component nor the image {} names a command",
                from_files[0].0, k.image
            ));
        }
        (Some(secret_entrypoint(&from_files)), Some(run))
    };
    Ok(ContainerCreateBody {
        image: Some(k.image.clone()),
        cmd,
        entrypoint,
        env: Some(env),
        labels: Some(labels),
        user: k.user.clone(),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        stop_signal: k.stop_signal.as_ref().map(|s| s.as_str().to_string()),
        stop_timeout: Some(i64::try_from(grace).unwrap_or(i64::MAX)),
        healthcheck: k.healthcheck.as_ref().map(|h| HealthConfig {
            test: Some(h.test.clone()),
            interval: nanos(h.interval),
            timeout: nanos(h.timeout),
            retries: h.retries.map(i64::from),
            start_period: nanos(h.start_period),
            start_interval: None,
        }),
        host_config: Some(HostConfig {
            port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
            mounts: (!mounts.is_empty()).then_some(mounts),
            devices: (!devices.is_empty()).then_some(devices),
            device_requests,
            network_mode: k.network.clone(),
            restart_policy: Some(RestartPolicy {
                name: Some(restart),
                maximum_retry_count: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}
