//! A service's `ports`, short syntax (`[HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL]`) and
//! long syntax (`{ target, published, host_ip, protocol, name, app_protocol, mode }`),
//! as `container.ports`.
//!
//! Every port is published on one host port: a range (`8000-8010:8000-8010`) and a
//! port without a published one (compose picks a random host port) are not carried
//! over, each with a note saying why. A port compose publishes on every address
//! (no host IP written) is published on 127.0.0.1, Flotilla's default, with a note.

use crate::ctx::Ctx;
use crate::notes::Note;
use crate::yaml::{Node, Value};
use flotilla_model::inventory::{ContainerPort, PortProtocol};
use flotilla_model::values::Port;

/// A published port and what the compose file said of it beyond the container table.
#[derive(Debug, Clone)]
pub struct Published {
    /// The port, as the container table takes it.
    pub port: ContainerPort,
    /// The long syntax's `name` (the endpoint's name, when given).
    pub name: Option<String>,
    /// The long syntax's `app_protocol` (`http`, `https`…).
    pub app_protocol: Option<String>,
}

/// Reads `ports` (a list).
pub fn read(ctx: &mut Ctx, node: &Node, notes: &mut Vec<Note>) -> Vec<Published> {
    let Some(items) = node.as_seq() else {
        ctx.error(node, format!("`ports` must be a list, not {}", node.kind()));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("ports[{i}]");
        let p = match &item.value {
            Value::Map(_) => long(ctx, item, &key, notes),
            _ => short(ctx, item, &key, notes),
        };
        out.extend(p);
    }
    out
}

fn port_number(ctx: &mut Ctx, node: &Node, text: &str, key: &str) -> Option<Port> {
    match text.trim().parse::<u16>() {
        Ok(p) if p > 0 => Some(Port(p)),
        _ => {
            ctx.error(node, format!("`{key}`: `{text}` is not a port (1-65535)"));
            None
        }
    }
}

fn protocol(
    ctx: &mut Ctx,
    node: &Node,
    text: &str,
    key: &str,
    notes: &mut Vec<Note>,
) -> Option<Option<PortProtocol>> {
    match text {
        "" | "tcp" => Some(None),
        "udp" => Some(Some(PortProtocol::Udp)),
        "sctp" => {
            notes.push(Note::new(
                node.at.line,
                key,
                "not carried over: an SCTP port (flotilla publishes tcp and udp)",
            ));
            None
        }
        other => {
            ctx.error(
                node,
                format!("`{key}`: unknown protocol `{other}` (tcp, udp)"),
            );
            None
        }
    }
}

/// Why a written port is not carried over as it is.
enum Why {
    Range,
    NoPublished,
    AllAddresses,
}

fn note(node: &Node, key: &str, written: &str, why: Why, notes: &mut Vec<Note>) {
    let text = match why {
        Why::Range => "not carried over: a port range; flotilla publishes ports one by one (each is an endpoint clients reach): write each as { target = …, published = … }",
        Why::NoPublished => "not carried over: no published port (compose picks a random host port; flotilla publishes on a port you choose): write { target = …, published = … }",
        Why::AllAddresses => "is published on 127.0.0.1 (flotilla's default), where compose publishes on every address: write host_ip = \"0.0.0.0\" to reach it from other machines",
    };
    notes.push(Note::new(node.at.line, key, format!("`{written}` {text}")));
}

/// `[HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL]`.
fn short(ctx: &mut Ctx, node: &Node, key: &str, notes: &mut Vec<Note>) -> Option<Published> {
    let written = ctx.string(node, key, notes)?;
    let (spec, proto) = match written.rsplit_once('/') {
        Some((s, p)) => (s, p),
        None => (written.as_str(), ""),
    };
    let protocol = protocol(ctx, node, proto, key, notes)?;
    // An IPv6 host address is written in brackets: `[::1]:8080:80`.
    let (host_ip, rest) = match spec.strip_prefix('[') {
        Some(after) => match after.split_once("]:") {
            Some((ip, rest)) => (Some(ip.to_string()), rest.to_string()),
            None => {
                ctx.error(
                    node,
                    format!("`{key}`: `{written}`: an IPv6 address needs `]:` after it"),
                );
                return None;
            }
        },
        None => (None, spec.to_string()),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let (host_ip, published, target) = match (host_ip, parts.as_slice()) {
        (None, [t]) => (None, None, *t),
        (None, [p, t]) => (None, Some(*p), *t),
        (None, [ip, p, t]) => (Some(ip.to_string()), Some(*p), *t),
        (Some(ip), [p, t]) => (Some(ip), Some(*p), *t),
        _ => {
            ctx.error(
                node,
                format!("`{key}`: `{written}` is not `[HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL]`"),
            );
            return None;
        }
    };
    let published = published.filter(|p| !p.is_empty());
    if target.contains('-') || published.is_some_and(|p| p.contains('-')) {
        note(node, key, &written, Why::Range, notes);
        return None;
    }
    let target = port_number(ctx, node, target, key)?;
    let port = on_host(
        ctx,
        (node, key, &written),
        target,
        published.map(|p| (p, node)),
        host_ip,
        protocol,
        notes,
    )?;
    Some(Published {
        port,
        name: None,
        app_protocol: None,
    })
}

/// The port of `target` published as `published` (its text and node) on `host_ip`:
/// `None`, noted as not carried over, when nothing is published; noted when it is
/// published on every address. `at` is the port's node, key and text as written.
fn on_host(
    ctx: &mut Ctx,
    (node, key, written): (&Node, &str, &str),
    target: Port,
    published: Option<(&str, &Node)>,
    host_ip: Option<String>,
    protocol: Option<PortProtocol>,
    notes: &mut Vec<Note>,
) -> Option<ContainerPort> {
    let Some((published, pnode)) = published else {
        note(node, key, written, Why::NoPublished, notes);
        return None;
    };
    let published = port_number(ctx, pnode, published, key)?;
    if host_ip.is_none() {
        note(node, key, written, Why::AllAddresses, notes);
    }
    Some(ContainerPort {
        target,
        published,
        host_ip,
        protocol,
    })
}

/// `{ target, published, host_ip, protocol, mode, name, app_protocol }`.
fn long(ctx: &mut Ctx, node: &Node, key: &str, notes: &mut Vec<Note>) -> Option<Published> {
    let mut target = None;
    let mut published = None;
    let mut host_ip = None;
    let mut proto = None;
    let mut name = None;
    let mut app_protocol = None;
    for (k, v) in node.as_map().unwrap_or_default() {
        let sub = format!("{key}.{}", k.key_text());
        match k.key_text() {
            "target" => target = Some((ctx.string(v, &sub, notes)?, v)),
            "published" => published = Some((ctx.string(v, &sub, notes)?, v)),
            "host_ip" => host_ip = ctx.string(v, &sub, notes),
            "protocol" => proto = Some((ctx.string(v, &sub, notes)?, v)),
            "name" => name = ctx.string(v, &sub, notes),
            "app_protocol" => app_protocol = ctx.string(v, &sub, notes),
            "mode" => {
                if v.as_str() != Some("host") {
                    notes.push(Note::new(
                        k.at.line,
                        sub,
                        "not carried over: swarm's ingress mode (flotilla publishes on the host)",
                    ));
                }
            }
            other => notes.push(Note::new(
                k.at.line,
                sub,
                format!("not carried over: `{other}` is not a key of compose's long port syntax"),
            )),
        }
    }
    let Some((target, tnode)) = target else {
        ctx.error(node, format!("`{key}`: the long syntax needs `target`"));
        return None;
    };
    let written = format!(
        "{}{}",
        published
            .as_ref()
            .map(|(p, _)| format!("{p}:"))
            .unwrap_or_default(),
        target
    );
    if target.contains('-') || published.as_ref().is_some_and(|(p, _)| p.contains('-')) {
        note(node, key, &written, Why::Range, notes);
        return None;
    }
    let target = port_number(ctx, tnode, &target, key)?;
    let protocol = match &proto {
        Some((p, pnode)) => protocol(ctx, pnode, p, key, notes)?,
        None => None,
    };
    let published = published.filter(|(p, _)| !p.is_empty());
    let port = on_host(
        ctx,
        (node, key, &written),
        target,
        published.as_ref().map(|(p, n)| (p.as_str(), *n)),
        host_ip,
        protocol,
        notes,
    )?;
    Some(Published {
        port,
        name,
        app_protocol,
    })
}
