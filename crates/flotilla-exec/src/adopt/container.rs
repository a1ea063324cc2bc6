//! A container not created by Flotilla as the prior owner of a container
//! component: found through its engine (the container whose published ports are
//! the component's, from the engine's port map: the process holding such a port is
//! the engine's port forwarder, not the service), stopped with the engine's stop
//! (kept, not removed, so that a rollback starts the very same container) and
//! restored by starting it again, proven running by `inspect`. Blocking: every
//! engine call is time-limited ([`crate::adapter::container::engine`]).

use super::prior::{declared_ports, Holder, PriorError};
use super::record::{Prior, PriorContainer};
use crate::adapter::container::engine::{self, Engine};
use crate::adapter::container::{inspect, is_running, stop_container};
use flotilla_model::topology::Component;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Who holds `c`'s declared ports among the running containers of its engine, when
/// one does: Flotilla's own (labelled with `project` and `c`'s name) or another,
/// the prior owner, with the addresses its ports are published on.
///
/// # Errors
/// [`PriorError::Engine`]: the engine could not be asked.
pub fn find(c: &Component, project: &str) -> Result<Option<Holder>, PriorError> {
    let ports = declared_ports(c);
    let socket = engine::socket_for(c.container_api.as_deref());
    let running = crate::discover::containers::running(&socket).map_err(|e| match e {
        crate::discover::DiscoverError::Engine(e) => PriorError::Engine(e),
        other => PriorError::Unsupported(crate::error::chain(&other)),
    })?;
    let Some(k) = running
        .into_iter()
        .find(|k| k.ports.iter().any(|p| ports.contains(&p.published)))
    else {
        return Ok(None);
    };
    if let Some(theirs) = &k.flotilla_project {
        let comp = k.flotilla_component.clone().unwrap_or_default();
        return Ok(Some(Holder::Flotilla {
            owner: format!(
                "container {} of component `{comp}` of flotilla project `{theirs}`",
                k.name
            ),
            ours: theirs == project && comp == c.name,
        }));
    }
    let mut listening: Vec<SocketAddr> = k
        .ports
        .iter()
        .filter(|p| p.protocol == "tcp")
        .map(|p| {
            let ip = p
                .host_ip
                .as_deref()
                .and_then(|ip| ip.parse::<IpAddr>().ok())
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
            SocketAddr::new(ip, p.published)
        })
        .collect();
    listening.sort();
    listening.dedup();
    Ok(Some(Holder::Prior {
        prior: Box::new(Prior::Container(PriorContainer {
            id: k.id,
            name: k.name,
            image: k.image,
            ports: k.ports.iter().map(|p| p.published).collect(),
            port_map: k.ports.iter().map(|p| (p.published, p.target)).collect(),
            cmd: k.cmd,
            entrypoint: k.entrypoint,
            engine: socket,
        })),
        listening,
    }))
}

fn engine_of(k: &PriorContainer) -> Result<Engine, PriorError> {
    Ok(Engine::connect(&k.engine)?)
}

/// Whether container `k` runs, as its engine says.
///
/// # Errors
/// [`PriorError::Engine`].
pub fn runs(k: &PriorContainer) -> Result<bool, PriorError> {
    let engine = engine_of(k)?;
    Ok(inspect(&engine, &k.id)?.is_some_and(|i| is_running(&i)))
}

/// The name container `k` is kept under while Flotilla's container, declared with
/// its very name, runs: `<name>-before-flotilla`.
pub fn kept_name(k: &PriorContainer) -> String {
    format!("{}-before-flotilla", k.name)
}

/// Renames container `id` to `name` with the engine (`POST /containers/{id}/rename`).
fn rename(engine: &Engine, id: &str, name: &str) -> Result<(), PriorError> {
    let (id, name2) = (id.to_string(), name.to_string());
    engine.call(
        &format!("rename container {id} to {name}"),
        move |d| async move {
            d.rename_container(
                &id,
                bollard::query_parameters::RenameContainerOptions { name: name2 },
            )
            .await
        },
    )?;
    Ok(())
}

/// Stops container `k` with the engine (its stop signal, then `SIGKILL` after
/// `grace`), keeping it; one line saying what it did. When `declared` (the name
/// Flotilla's container takes) is `k`'s own name, `k` is kept under
/// [`kept_name`] so that Flotilla's can be created; [`start`] gives it its name back.
///
/// # Errors
/// [`PriorError`]: the engine refused, or it still runs after.
pub fn stop(k: &PriorContainer, grace: Duration, declared: &str) -> Result<String, PriorError> {
    let engine = engine_of(k)?;
    stop_container(&engine, &k.id, &k.name, grace)?;
    if runs(k)? {
        return Err(PriorError::NotAsExpected(format!(
            "container {} still runs after the engine's stop",
            k.name
        )));
    }
    if declared == k.name {
        rename(&engine, &k.id, &kept_name(k))?;
        return Ok(format!(
            "stopped container {} ({}) with the engine, kept (not removed) as {} so that flotilla's container can take its name",
            k.name,
            k.id,
            kept_name(k)
        ));
    }
    Ok(format!(
        "stopped container {} ({}) with the engine, kept (not removed)",
        k.name, k.id
    ))
}

/// Starts container `k` again and proves it running; one line saying what it did.
///
/// # Errors
/// [`PriorError`]: the engine refused (the container is gone…), or it does not run
/// after.
pub fn start(k: &PriorContainer) -> Result<String, PriorError> {
    let engine = engine_of(k)?;
    // Its own name back, when it was kept under another (see [`stop`]).
    let named = inspect(&engine, &k.id)?
        .and_then(|i| i.name)
        .map(|n| n.trim_start_matches('/').to_string());
    if named.as_deref().is_some_and(|n| n != k.name) {
        rename(&engine, &k.id, &k.name).map_err(|e| {
            PriorError::NotAsExpected(format!(
                "container {} cannot take its name {} back ({e}): is another container of that name there?",
                named.clone().unwrap_or_default(),
                k.name
            ))
        })?;
    }
    let id = k.id.clone();
    match engine.call(
        &format!("start container {}", k.name),
        move |d| async move { d.start_container(&id, None).await },
    ) {
        Ok(()) | Err(engine::EngineError::Api { status: 304, .. }) => {}
        Err(e) => return Err(e.into()),
    }
    if !runs(k)? {
        return Err(PriorError::NotAsExpected(format!(
            "container {} does not run after the engine's start",
            k.name
        )));
    }
    Ok(format!("started container {} ({}) again", k.name, k.id))
}
