//! A service's `volumes`, short syntax (`SOURCE:TARGET[:MODE]`) and long syntax
//! (`{ type, source, target, read_only, bind, volume, tmpfs }`), as `container.volumes`.
//!
//! A source that starts with `/`, `.` or `~` is a bind mount (relative paths are the
//! compose file's directory's, as in compose); anything else names a volume. A named
//! volume keeps compose's name for it in the engine — `<project>_<name>`, or its
//! declared `name`, or its own name when `external` — so the imported stack finds the
//! data compose kept there.

use crate::ctx::Ctx;
use crate::notes::Note;
use crate::yaml::{Node, Value};
use flotilla_model::inventory::{ContainerVolume, VolumeType};

/// Reads `volumes` (a list).
pub fn read(ctx: &mut Ctx, node: &Node, notes: &mut Vec<Note>) -> Vec<ContainerVolume> {
    let Some(items) = node.as_seq() else {
        ctx.error(
            node,
            format!("`volumes` must be a list, not {}", node.kind()),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("volumes[{i}]");
        let v = match &item.value {
            Value::Map(_) => long(ctx, item, &key, notes),
            _ => short(ctx, item, &key, notes),
        };
        out.extend(v);
    }
    out
}

fn is_path(source: &str) -> bool {
    source.starts_with('/') || source.starts_with('.') || source.starts_with('~')
}

/// The host path of a bind source: `~` expanded, a relative path made the
/// inventory's (`Options::base_dir` before it when the inventory is written
/// elsewhere).
fn host_path(ctx: &Ctx, source: &str, line: u32, key: &str, notes: &mut Vec<Note>) -> String {
    if let Some(rest) = source.strip_prefix('~') {
        if rest.is_empty() || rest.starts_with('/') {
            if let Some(home) = &ctx.options.home {
                let path = format!("{home}{rest}");
                notes.push(Note::new(
                    line,
                    key,
                    format!("`{source}` is written as {path}: `~` is the home directory of the user importing, as compose expands it; for a component on another host or user, write its path there"),
                ));
                return path;
            }
            notes.push(Note::new(
                line,
                key,
                format!("`{source}`: `~` is kept as written (no home directory was known): write the absolute path"),
            ));
        }
        return source.to_string();
    }
    crate::rebase(ctx.options, source)
}

/// The engine's name of the named volume `name`, noting a volume compose would
/// create under another name, or one not declared.
fn volume_name(ctx: &mut Ctx, node: &Node, name: &str, key: &str, notes: &mut Vec<Note>) -> String {
    match ctx.volumes.get(name) {
        Some(d) if d.name.is_some() => d.name.clone().unwrap_or_default(),
        Some(d) if d.external => name.to_string(),
        Some(_) => {
            let full = format!("{}_{name}", ctx.project);
            notes.push(Note::new(
                node.at.line,
                key,
                format!("volume `{name}` is the engine's `{full}`, as compose names it (project prefix): the data compose kept there"),
            ));
            full
        }
        None => {
            ctx.error(
                node,
                format!("`{key}`: volume `{name}` is not declared in the top-level `volumes` (compose refuses it too)"),
            );
            name.to_string()
        }
    }
}

/// `SOURCE:TARGET[:MODE]`, or `TARGET` alone (an anonymous volume).
fn short(ctx: &mut Ctx, node: &Node, key: &str, notes: &mut Vec<Note>) -> Option<ContainerVolume> {
    let written = ctx.string(node, key, notes)?;
    let parts: Vec<&str> = written.split(':').collect();
    let (source, target, mode) = match parts.as_slice() {
        [t] => {
            notes.push(Note::new(
                node.at.line,
                key,
                format!("`{t}` not carried over: an anonymous volume (flotilla mounts named volumes and host paths): name it, e.g. {{ type = \"volume\", source = \"data\", target = \"{t}\" }}"),
            ));
            return None;
        }
        [s, t] => (*s, *t, ""),
        [s, t, m] => (*s, *t, *m),
        _ => {
            ctx.error(
                node,
                format!("`{key}`: `{written}` is not `SOURCE:TARGET[:MODE]`"),
            );
            return None;
        }
    };
    let mut read_only = false;
    for m in mode.split(',').filter(|m| !m.is_empty()) {
        match m {
            "ro" => read_only = true,
            "rw" => {}
            "z" | "Z" => notes.push(Note::new(
                node.at.line,
                key,
                format!("mode `{m}` not carried over: SELinux relabelling is not in the container table"),
            )),
            "nocopy" => notes.push(Note::new(
                node.at.line,
                key,
                "mode `nocopy` not carried over: the engine copies the image's content into a new volume",
            )),
            "cached" | "delegated" | "consistent" => {}
            other => {
                ctx.error(node, format!("`{key}`: unknown volume mode `{other}` (ro, rw, z, Z, nocopy)"));
                return None;
            }
        }
    }
    Some(if is_path(source) {
        ContainerVolume {
            kind: VolumeType::Bind,
            source: host_path(ctx, source, node.at.line, key, notes),
            target: target.to_string(),
            read_only,
        }
    } else {
        ContainerVolume {
            kind: VolumeType::Volume,
            source: volume_name(ctx, node, source, key, notes),
            target: target.to_string(),
            read_only,
        }
    })
}

/// `{ type, source, target, read_only, bind, volume, tmpfs, consistency }`.
fn long(ctx: &mut Ctx, node: &Node, key: &str, notes: &mut Vec<Note>) -> Option<ContainerVolume> {
    let mut kind = None;
    let mut source = None;
    let mut target = None;
    let mut read_only = false;
    for (k, v) in node.as_map().unwrap_or_default() {
        let sub = format!("{key}.{}", k.key_text());
        match k.key_text() {
            "type" => kind = Some((ctx.string(v, &sub, notes)?, v)),
            "source" => source = ctx.string(v, &sub, notes),
            "target" => target = ctx.string(v, &sub, notes),
            "read_only" => read_only = v.as_bool().unwrap_or(false),
            "consistency" => {}
            "bind" | "volume" | "tmpfs" | "image" => notes.push(Note::new(
                k.at.line,
                sub,
                "not carried over: the mount's options are not in the container table (type, source, target and read_only are)",
            )),
            other => notes.push(Note::new(
                k.at.line,
                sub,
                format!("not carried over: `{other}` is not a key of compose's long volume syntax"),
            )),
        }
    }
    let Some((kind, knode)) = kind else {
        ctx.error(node, format!("`{key}`: the long syntax needs `type`"));
        return None;
    };
    let Some(target) = target else {
        ctx.error(node, format!("`{key}`: the long syntax needs `target`"));
        return None;
    };
    match kind.as_str() {
        "bind" => {
            let Some(source) = source else {
                ctx.error(node, format!("`{key}`: a bind mount needs `source`"));
                return None;
            };
            Some(ContainerVolume {
                kind: VolumeType::Bind,
                source: host_path(ctx, &source, node.at.line, key, notes),
                target,
                read_only,
            })
        }
        "volume" => {
            let Some(source) = source else {
                notes.push(Note::new(
                    node.at.line,
                    key,
                    format!(
                        "`{target}` not carried over: an anonymous volume (no `source`): name it"
                    ),
                ));
                return None;
            };
            Some(ContainerVolume {
                kind: VolumeType::Volume,
                source: volume_name(ctx, node, &source, key, notes),
                target,
                read_only,
            })
        }
        "tmpfs" | "npipe" | "cluster" | "image" => {
            notes.push(Note::new(
                knode.at.line,
                key,
                format!("`{target}` not carried over: a `{kind}` mount (the container table mounts `bind` and `volume`)"),
            ));
            None
        }
        other => {
            ctx.error(
                knode,
                format!("`{key}.type`: unknown mount type `{other}` (bind, volume, tmpfs…)"),
            );
            None
        }
    }
}
