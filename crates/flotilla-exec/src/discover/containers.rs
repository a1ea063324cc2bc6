//! Running containers, asked of the container engine through the adapter's client
//! ([`crate::adapter::container::engine`]: the Docker Engine API on a unix socket,
//! Podman's compatible service too, every call time-limited): `GET
//! /containers/json`, running ones only; then each container's command and entrypoint
//! (`inspect`) against its image's (`inspect` of the image), kept only where they
//! differ — what a proposal must say for the container to run the same.

use super::{ContainerFacts, DiscoverError, Published};
use crate::adapter::container::engine::Engine;
use crate::adapter::container::{LABEL_COMPONENT, LABEL_PROJECT};

/// The programs a container engine listens with on a container's published port:
/// Podman's `conmon` (rootful) and `rootlessport`, Docker's `docker-proxy`.
pub const PORT_FORWARDERS: &[&str] = &["conmon", "rootlessport", "docker-proxy"];

/// Who listens on `l`'s port, for messages: [`crate::process::Listener::describe`],
/// or, when that is an engine's port forwarder ([`PORT_FORWARDERS`]), the running
/// container of the engine at `socket` that publishes the port: `container NAME
/// (IMAGE) through pid N (conmon)`. When the engine cannot say (not reachable, no
/// such container), the plain description. Blocking: one time-limited engine call.
pub fn describe_holder(l: &crate::process::Listener, socket: &str) -> String {
    let plain = l.describe();
    if !l
        .command
        .as_deref()
        .is_some_and(|c| PORT_FORWARDERS.contains(&c))
    {
        return plain;
    }
    let port = l.address.port();
    match running(socket).ok().and_then(|all| {
        all.into_iter()
            .find(|k| k.ports.iter().any(|p| p.published == port))
    }) {
        Some(k) => {
            let whose = match (&k.flotilla_project, &k.flotilla_component) {
                (Some(p), Some(c)) => format!(", component `{c}` of flotilla project `{p}`"),
                _ => String::new(),
            };
            format!("container {} ({}{whose}) through {plain}", k.name, k.image)
        }
        None => plain,
    }
}

/// Every running container of the engine at `socket` (`unix:///PATH`).
///
/// # Errors
/// [`DiscoverError::Engine`]: no engine answers there, or it answered an error.
pub fn running(socket: &str) -> Result<Vec<ContainerFacts>, DiscoverError> {
    let engine = Engine::connect(socket)?;
    let list = engine.call("list the running containers", |d| async move {
        d.list_containers(Some(
            bollard::query_parameters::ListContainersOptionsBuilder::new()
                .all(false)
                .build(),
        ))
        .await
    })?;
    let mut out: Vec<ContainerFacts> = list
        .into_iter()
        .map(|c| {
            let labels = c.labels.unwrap_or_default();
            let mut ports: Vec<Published> = c
                .ports
                .unwrap_or_default()
                .into_iter()
                .filter_map(|p| {
                    Some(Published {
                        published: p.public_port?,
                        target: p.private_port,
                        host_ip: p.ip.filter(|ip| !ip.is_empty()),
                        protocol: p
                            .typ
                            .map(|t| t.to_string())
                            .filter(|t| !t.is_empty())
                            .unwrap_or_else(|| "tcp".into()),
                    })
                })
                .collect();
            ports.sort_by(|a, b| {
                (a.published, a.target, &a.protocol, &a.host_ip).cmp(&(
                    b.published,
                    b.target,
                    &b.protocol,
                    &b.host_ip,
                ))
            });
            // One published port listed for IPv4 and IPv6 is one port.
            ports.dedup_by(|a, b| {
                a.published == b.published && a.target == b.target && a.protocol == b.protocol
            });
            let id = c.id.unwrap_or_default();
            ContainerFacts {
                cmd: None,
                entrypoint: None,
                name: c
                    .names
                    .unwrap_or_default()
                    .first()
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_else(|| id.chars().take(12).collect()),
                id: id.chars().take(12).collect(),
                image: c.image.unwrap_or_default(),
                command: c.command.filter(|c| !c.is_empty()),
                ports,
                flotilla_project: labels.get(LABEL_PROJECT).cloned(),
                flotilla_component: labels.get(LABEL_COMPONENT).cloned(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    for c in &mut out {
        // Not knowing is no reason to leave the container out: its proposal then
        // names the image alone.
        if let Ok((cmd, entrypoint)) = own_command(&engine, &c.id, &c.image) {
            c.cmd = cmd;
            c.entrypoint = entrypoint;
        }
    }
    Ok(out)
}

/// An argv, when there is one to say.
type Argv = Option<Vec<String>>;

/// The command and entrypoint container `id` runs, each where it differs from its
/// image's.
fn own_command(engine: &Engine, id: &str, image: &str) -> Result<(Argv, Argv), DiscoverError> {
    let Some(info) = crate::adapter::container::inspect(engine, id)? else {
        return Ok((None, None));
    };
    let config = info.config.unwrap_or_default();
    let r = image.to_string();
    let image = engine
        .call(&format!("inspect image {image}"), move |d| async move {
            d.inspect_image(&r).await
        })?
        .config
        .unwrap_or_default();
    let differs = |mine: Argv, theirs: Argv| {
        let mine = mine.filter(|v| !v.is_empty());
        (mine != theirs.filter(|v| !v.is_empty()))
            .then_some(mine)
            .flatten()
    };
    Ok((
        differs(config.cmd, image.cmd),
        differs(config.entrypoint, image.entrypoint),
    ))
}
