//! What `flotilla check` finds of a container component before anything starts
//! ([`preflight`]); apart from the adapter's module because it names who holds a
//! busy port through [`crate::discover::containers`], which reads the adapter.

use super::*;

/// What `flotilla check` finds of a container component of `project` before anything
/// starts (its secrets from `secrets`, its published ports, that its endpoints are
/// among them, its devices, its network, a GPU request the engine would drop, and):
/// `(what, ok, saw)` for the engine (reachable, and which), the image (present, or
/// pulled on start by its policy), each bind mount's source (relative to
/// `base_dir`), and a container of its name that is not its own. Published ports are
/// checked only while its own container does not run (they are then its own).
pub fn preflight(
    project: &str,
    c: &Component,
    base_dir: &std::path::Path,
    secrets: &crate::secrets::SecretResolver,
) -> Vec<(String, bool, String)> {
    let mut out = Vec::new();
    let Some(k) = c.container.as_ref() else {
        return out;
    };
    for name in &k.secrets {
        out.push(match secrets.require(&c.name, name) {
            Ok(_) => (
                format!("secret {name}"),
                true,
                format!("resolves (mounted at /run/secrets/{name})"),
            ),
            Err(e) => (format!("secret {name}"), false, e.to_string()),
        });
    }
    let published: Vec<u16> = k.ports.iter().map(|p| p.published.0).collect();
    for (ep, e) in c.endpoints.iter().filter(|(_, e)| e.is_local_bind()) {
        if !published.contains(&e.port) {
            let listed = if published.is_empty() {
                "it publishes none".to_string()
            } else {
                published
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            out.push((
                format!("endpoint {ep}"),
                false,
                format!(
                    "port {} is not one the container publishes ({listed}): probes and clients would miss it",
                    e.port
                ),
            ));
        }
    }
    for d in &k.devices {
        let host = d.split(':').next().unwrap_or_default();
        let there = std::path::Path::new(host).exists();
        out.push((
            format!("device {host}"),
            there,
            if there {
                "exists on this host".into()
            } else {
                "does not exist on this host".into()
            },
        ));
    }
    for v in k
        .volumes
        .iter()
        .filter(|v| v.kind == flotilla_model::inventory::VolumeType::Bind)
    {
        let p = base_dir.join(&v.source);
        out.push((
            "volume".into(),
            p.exists(),
            if p.exists() {
                format!("{} exists (mounted at {})", p.display(), v.target)
            } else {
                format!(
                    "{} does not exist (bind source of {})",
                    p.display(),
                    v.target
                )
            },
        ));
    }
    let engine = match engine_for(c) {
        Ok(e) => e,
        Err(e) => {
            out.push(("engine".into(), false, e.to_string()));
            return out;
        }
    };
    let version = engine.call(
        "ask the engine's version",
        |d| async move { d.version().await },
    );
    let podman = match version {
        Ok(v) => {
            out.push((
                "engine".into(),
                true,
                format!(
                    "{} answers (API {}, version {})",
                    engine.socket,
                    v.api_version.unwrap_or_default(),
                    v.version.unwrap_or_default()
                ),
            ));
            v.components
                .iter()
                .flatten()
                .any(|p| p.name.to_lowercase().contains("podman"))
        }
        Err(e) => {
            out.push(("engine".into(), false, e.to_string()));
            return out;
        }
    };
    if k.gpus.is_some() && podman {
        out.push((
            "gpus".into(),
            false,
            format!("{} is Podman, whose Docker API ignores GPU requests: a start is refused; pass the GPU's device files in container.devices instead", engine.socket),
        ));
    }
    if let Some(net) = k
        .network
        .as_deref()
        .filter(|n| !BUILTIN_NETWORKS.contains(n) && !n.contains(':'))
    {
        let n = net.to_string();
        match engine.call(&format!("inspect network {net}"), move |d| async move {
            d.inspect_network(&n, None::<bollard::query_parameters::InspectNetworkOptions>)
                .await
        }) {
            Ok(_) => out.push(("network".into(), true, format!("{net} exists"))),
            Err(e) if e.is_not_found() => out.push((
                "network".into(),
                false,
                format!("{net} does not exist in the engine: create it (podman network create {net}), or fix container.network"),
            )),
            Err(e) => out.push(("network".into(), false, e.to_string())),
        }
    }
    match image_id(&engine, &k.image) {
        Ok(Some(id)) => out.push((
            "image".into(),
            true,
            format!("{} is there ({})", k.image, short(&id)),
        )),
        Ok(None) => {
            let policy = k.pull.unwrap_or_default();
            out.push((
                "image".into(),
                policy != PullPolicy::Never,
                if policy == PullPolicy::Never {
                    format!("{} is not in the engine (pull = \"never\"): pull it there, or set container.pull = \"missing\"", k.image)
                } else {
                    format!("{} is not in the engine yet: a start pulls it (pull = \"{}\")", k.image, policy.as_str())
                },
            ))
        }
        Err(e) => out.push(("image".into(), false, e.to_string())),
    }
    let mut running = false;
    match inspect(&engine, &container_name(project, c)) {
        Ok(Some(info)) => match foreign(&info, project, &c.name) {
            Some(why) => out.push((
                "container".into(),
                false,
                format!("a container named {} exists and is not this component's ({why}): a start would refuse to touch it", container_name(project, c)),
            )),
            None => running = is_running(&info),
        },
        Ok(None) => {}
        Err(e) => out.push(("container".into(), false, e.to_string())),
    }
    if !running {
        let listening = crate::process::listeners_on(&published).unwrap_or_default();
        for p in &k.ports {
            let port = p.published.0;
            out.push(match listening.get(&port).and_then(|l| l.first()) {
                None => (
                    format!("port {port}"),
                    true,
                    format!("free (published → {})", p.target.0),
                ),
                Some(l) => (
                    format!("port {port}"),
                    false,
                    format!(
                        "busy: {} listens on it (published → {})",
                        crate::discover::containers::describe_holder(l, &engine.socket),
                        p.target.0
                    ),
                ),
            });
        }
    }
    out
}
