//! The compose project as a whole: its name, its top-level declarations (`volumes`,
//! `networks`, `secrets`), its services as components with their dependencies
//! resolved, and its stacks — one for the project (the services a plain
//! `docker compose up` starts) and one per compose profile (those plus the profile's).

use crate::ctx::{Ctx, Declared};
use crate::notes::Note;
use crate::service::{self, Condition, Service};
use crate::yaml::Node;
use crate::Options;
use flotilla_model::inventory::{Inventory, StackSpec};
use flotilla_model::values::EnvValue;
use std::collections::BTreeMap;

/// The project converted: the inventory, and the notes for its comments.
pub struct Converted {
    /// The inventory.
    pub inventory: Inventory,
    /// The components in the compose file's order, each with its notes and the line
    /// its service starts on.
    pub components: Vec<(String, u32, Vec<Note>)>,
    /// Notes on the top level (and on things of the whole project).
    pub notes: Vec<Note>,
    /// The compose project's name.
    pub project: String,
}

const TOP_LEVEL: &[&str] = &[
    "version", "name", "services", "networks", "volumes", "secrets", "configs", "include", "models",
];

/// A compose project name made from a directory name, as compose makes it:
/// lowercase, only `a-z`, `0-9`, `-` and `_`, starting with a letter or digit.
pub fn normalise_project(name: &str) -> String {
    let lower: String = name
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_')
        .collect();
    lower.trim_start_matches(['-', '_']).to_string()
}

/// Converts the compose document `doc`.
pub fn convert(doc: &Node, options: &Options) -> Result<Converted, Vec<crate::ComposeError>> {
    let Some(entries) = doc.as_map() else {
        return Err(vec![crate::ComposeError::invalid(
            doc.at,
            format!(
                "a compose file is a mapping with `services`, not {}",
                doc.kind()
            ),
        )]);
    };
    let mut notes = Vec::new();
    let mut ctx = Ctx {
        options,
        project: String::new(),
        services: BTreeMap::new(),
        volumes: BTreeMap::new(),
        networks: BTreeMap::new(),
        secrets: BTreeMap::new(),
        errors: Vec::new(),
    };
    // The name first: volume names depend on it.
    let declared_name = doc
        .entry("name")
        .and_then(|(_, v)| ctx.string(v, "name", &mut notes));
    ctx.project = match (&options.project, declared_name) {
        (Some(p), _) => p.clone(),
        (None, Some(n)) => n,
        (None, None) => normalise_project(&options.dir_name),
    };
    if !flotilla_model::topology::valid_project_name(&ctx.project) {
        let at = doc.entry("name").map(|(k, _)| k).unwrap_or(doc);
        ctx.error(
            at,
            format!(
                "`{}` is not a project name (lowercase letters, digits, `-` and `_`, starting with a letter or digit): write `name:` in the compose file, or pass -p NAME",
                ctx.project
            ),
        );
    }
    let mut services_node = None;
    for (k, v) in entries {
        let kt = k.key_text();
        match kt {
            "name" => {}
            "services" => services_node = Some((k, v)),
            "version" => notes.push(Note::new(k.at.line, kt, "ignored: obsolete, compose ignores it too")),
            "volumes" => ctx.volumes = declarations(&mut ctx, v, kt, &mut notes),
            "networks" => ctx.networks = declarations(&mut ctx, v, kt, &mut notes),
            "secrets" => ctx.secrets = declarations(&mut ctx, v, kt, &mut notes),
            "configs" => notes.push(Note::new(
                k.at.line,
                kt,
                "not carried over: compose configs: mount each file with a bind volume",
            )),
            "include" => notes.push(Note::new(
                k.at.line,
                kt,
                "not carried over: included compose files are not read: import each with `flotilla import compose FILE`, or import the output of `docker compose config`",
            )),
            "models" => notes.push(Note::new(
                k.at.line,
                kt,
                "not carried over: compose's model runner has no counterpart: declare the model server as a component (the llama-server, vllm or ollama templates)",
            )),
            other if other.starts_with("x-") => notes.push(Note::new(
                k.at.line,
                other,
                "not carried over: an extension field (compose ignores it too; its anchors were resolved where they are used)",
            )),
            other => {
                let hint = flotilla_model::diag::did_you_mean(other, TOP_LEVEL.iter().copied())
                    .map(|h| format!(" (did you mean `{h}`?)"))
                    .unwrap_or_default();
                notes.push(Note::new(
                    k.at.line,
                    other,
                    format!("not carried over: not a top-level key of a compose file{hint}"),
                ));
            }
        }
    }
    let Some((services_key, services_node)) = services_node else {
        ctx.error(
            doc,
            "no `services`: a compose file declares its services under `services:`",
        );
        return Err(ctx.errors);
    };
    let Some(service_entries) = services_node.as_map() else {
        ctx.error(
            services_node,
            format!(
                "`services` must be a mapping of services, not {}",
                services_node.kind()
            ),
        );
        return Err(ctx.errors);
    };
    if service_entries.is_empty() {
        ctx.error(services_key, "`services` is empty: nothing to import");
        return Err(ctx.errors);
    }
    for (k, _) in service_entries {
        ctx.services.insert(
            k.key_text().to_string(),
            service::component_name(k.key_text()),
        );
    }
    let mut services: Vec<Service> = Vec::new();
    for (k, v) in service_entries {
        if let Some(s) = service::convert(&mut ctx, k.key_text(), k, v) {
            services.push(s);
        }
    }
    resolve_dependencies(&mut ctx, &mut services);
    service_names_as_hosts(&ctx, &mut services);
    declared_notes(&ctx, &services, &mut notes);
    if !ctx.errors.is_empty() {
        ctx.errors.sort_by_key(|e| e.at());
        return Err(ctx.errors);
    }
    let project = ctx.project.clone();
    let mut inventory = Inventory {
        // Written in the current format (what `flotilla config migrate` expects).
        version: Some(flotilla_model::inventory::INVENTORY_VERSION),
        project: Some(project.clone()),
        ..Inventory::default()
    };
    // Stacks: the project's default services, then one per profile.
    let default: Vec<String> = services
        .iter()
        .filter(|s| s.profiles.is_empty())
        .map(|s| s.name.clone())
        .collect();
    let mut profiles: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &services {
        for p in &s.profiles {
            profiles.entry(p.clone()).or_default().push(s.name.clone());
        }
    }
    // A stack may not share a component's name (`flotilla start NAME` would be ambiguous).
    let taken: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
    let stack_name = |wanted: String, notes: &mut Vec<Note>| {
        if !taken.contains(&wanted) {
            return wanted;
        }
        let renamed = format!("{wanted}-stack");
        notes.push(Note::new(
            doc.at.line,
            format!("stacks.{wanted}"),
            format!("the stack is named `{renamed}`: `{wanted}` names a component"),
        ));
        renamed
    };
    let main_stack = stack_name(project.clone(), &mut notes);
    if !default.is_empty() {
        inventory.stacks.insert(
            main_stack,
            StackSpec {
                description: Some(format!(
                    "compose project `{project}`: what `docker compose up` starts"
                )),
                components: default.clone(),
                readiness: Vec::new(),
            },
        );
    }
    for (p, members) in &profiles {
        let name = stack_name(
            format!("{project}-{}", service::component_name(p)),
            &mut notes,
        );
        let mut components = default.clone();
        components.extend(members.iter().cloned());
        inventory.stacks.insert(
            name,
            StackSpec {
                description: Some(format!(
                    "compose project `{project}` with profile `{p}`: what `docker compose --profile {p} up` starts"
                )),
                components,
                readiness: Vec::new(),
            },
        );
    }
    let mut components = Vec::new();
    for s in services {
        let mut notes = s.notes;
        if !s.profiles.is_empty() {
            notes.push(Note::new(
                s.line,
                "profiles",
                format!(
                    "in stack{} {} only (compose starts it only with its profile)",
                    if s.profiles.len() == 1 { "" } else { "s" },
                    s.profiles
                        .iter()
                        .map(|p| format!("`{project}-{}`", service::component_name(p)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        notes.sort_by_key(|n| n.line);
        components.push((s.name.clone(), s.line, notes));
        inventory.components.insert(s.name, s.spec);
    }
    notes.sort_by_key(|n| n.line);
    Ok(Converted {
        inventory,
        components,
        notes,
        project,
    })
}

/// Top-level `volumes`, `networks` or `secrets`: each name with `external` and `name`.
fn declarations(
    ctx: &mut Ctx,
    v: &Node,
    key: &str,
    notes: &mut Vec<Note>,
) -> BTreeMap<String, Declared> {
    let mut out = BTreeMap::new();
    let Some(entries) = v.as_map() else {
        if !v.is_null() {
            ctx.error(
                v,
                format!("top-level `{key}` must be a mapping, not {}", v.kind()),
            );
        }
        return out;
    };
    for (k, d) in entries {
        let mut decl = Declared {
            node: Some(k.clone()),
            ..Declared::default()
        };
        for (dk, dv) in d.as_map().unwrap_or_default() {
            let dkey = format!("{key}.{}.{}", k.key_text(), dk.key_text());
            match dk.key_text() {
                "external" => decl.external = dv.as_bool().unwrap_or(false),
                "name" => decl.name = ctx.string(dv, &dkey, notes),
                // A secret's source: said by the note on where its value comes from.
                "file" if key == "secrets" => {
                    decl.from = dv.as_str().map(|f| format!("compose reads it from the file {f}"));
                }
                "environment" if key == "secrets" => {
                    decl.from = dv
                        .as_str()
                        .map(|e| format!("compose reads it from the environment variable {e}"));
                }
                other => notes.push(Note::new(
                    dk.at.line,
                    dkey,
                    match key {
                        "volumes" => format!("`{other}` not carried over: the engine creates a missing volume itself, with its default driver"),
                        "networks" => format!("`{other}` not carried over: flotilla creates no networks"),
                        _ => format!("`{other}` not carried over"),
                    },
                )),
            }
        }
        if key == "networks" && !decl.external && k.key_text() != "default" {
            let engine = decl
                .name
                .clone()
                .unwrap_or_else(|| format!("{}_{}", ctx.project, k.key_text()));
            notes.push(Note::new(
                k.at.line,
                format!("{key}.{}", k.key_text()),
                format!("not carried over: compose creates network `{engine}` at `up`; flotilla creates no networks (containers join `bridge` unless container.network names an existing one)"),
            ));
        }
        out.insert(k.key_text().to_string(), decl);
    }
    out
}

/// Notes on the top-level secrets: where their values come from, or that no service
/// uses them.
fn declared_notes(ctx: &Ctx, services: &[Service], notes: &mut Vec<Note>) {
    let doc_line = |d: &Declared| d.node.as_ref().map(|n| n.at.line).unwrap_or(1);
    for (name, d) in &ctx.secrets {
        let used: Vec<&str> = services
            .iter()
            .filter(|s| {
                s.spec
                    .container
                    .as_ref()
                    .is_some_and(|c| c.secrets.contains(name))
            })
            .map(|s| s.name.as_str())
            .collect();
        if used.is_empty() {
            notes.push(Note::new(
                doc_line(d),
                format!("secrets.{name}"),
                "not carried over: no service uses it",
            ));
            continue;
        }
        notes.push(Note::new(
            doc_line(d),
            format!("secrets.{name}"),
            format!(
                "{}; its value is not read here: flotilla resolves secret `{name}` where the container starts, from the environment variable `{name}` or the state directory's secrets.env (put the value there), and mounts it at /run/secrets/{name}",
                d.from.as_deref().unwrap_or("an external secret")
            ),
        ));
    }
}

/// Resolves every `depends_on`: a dependency on readiness for `service_started` and
/// `service_healthy` (noting where Flotilla waits for more than compose), none for
/// `service_completed_successfully` (noted).
fn resolve_dependencies(ctx: &mut Ctx, services: &mut [Service]) {
    let healthy: BTreeMap<String, bool> = services
        .iter()
        .map(|s| (s.compose_name.clone(), s.spec.readiness.is_some()))
        .collect();
    for s in services.iter_mut() {
        let deps = std::mem::take(&mut s.depends_on);
        for d in deps {
            let key = format!("depends_on.{}", d.service);
            let Some(component) = ctx.services.get(&d.service).cloned() else {
                ctx.error(
                    &d.node,
                    format!(
                        "service `{}` depends on `{}`, which is not a service of this file",
                        s.compose_name, d.service
                    ),
                );
                continue;
            };
            if d.service == s.compose_name {
                ctx.error(
                    &d.node,
                    format!("service `{}` depends on itself", s.compose_name),
                );
                continue;
            }
            let ready = healthy.get(&d.service).copied().unwrap_or(false);
            if d.optional {
                s.notes.push(Note::new(
                    d.node.at.line,
                    key,
                    format!("not carried over: an optional dependency (`required: false`); a dependency is always started first, and compose starts this one without `{}`: start `{component}` yourself when you want it", d.service),
                ));
                continue;
            }
            match d.condition {
                Condition::Completed => {
                    s.notes.push(Note::new(
                        d.node.at.line,
                        key,
                        format!("`service_completed_successfully` not carried over: a component is a service that stays up, so this one does not wait for `{}` to finish: run it first (`flotilla start {component}`)", d.service),
                    ));
                    continue;
                }
                Condition::Started if ready => s.notes.push(Note::new(
                    d.node.at.line,
                    key,
                    format!("`{}` must be ready (its health check passes) before this one starts, where compose waits only for its start: flotilla gates every dependency on readiness", d.service),
                )),
                Condition::Healthy if !ready => s.notes.push(Note::new(
                    d.node.at.line,
                    key,
                    format!("`service_healthy`: `{}` has no healthcheck here, so it counts as ready once started", d.service),
                )),
                _ => {}
            }
            if !s.spec.depends_on.contains(&component) {
                s.spec.depends_on.push(component);
            }
        }
    }
}

/// Notes each `environment` value and `command` argument that reaches another
/// service by its compose name (`http://ollama:11434`): compose's project network
/// resolves service names, the engine's default `bridge` network does not.
fn service_names_as_hosts(ctx: &Ctx, services: &mut [Service]) {
    let names: Vec<(String, Option<String>)> = services
        .iter()
        .map(|s| {
            (
                s.compose_name.clone(),
                s.spec.container.as_ref().and_then(|c| c.name.clone()),
            )
        })
        .collect();
    for s in services.iter_mut() {
        if s.spec.container.as_ref().and_then(|c| c.network.as_deref()) == Some("host") {
            continue;
        }
        let mut found: Vec<(String, String)> = Vec::new();
        let texts = s
            .spec
            .env
            .iter()
            .filter_map(|(k, v)| match v {
                EnvValue::Literal(t) => Some((format!("environment.{k}"), t.clone())),
                EnvValue::Secret(_) => None,
            })
            .chain(
                s.spec
                    .command
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, a)| (format!("command[{i}]"), a.clone())),
            );
        for (key, text) in texts {
            for (other, container_name) in &names {
                if *other == s.compose_name {
                    continue;
                }
                let hit = mentions_host(&text, other)
                    || container_name
                        .as_deref()
                        .is_some_and(|c| mentions_host(&text, c));
                if hit {
                    found.push((key.clone(), other.clone()));
                }
            }
        }
        for (key, other) in found {
            let component = ctx.services.get(&other).cloned().unwrap_or_default();
            let named = names
                .iter()
                .any(|(n, c)| *n == other && c.as_deref() == Some(other.as_str()));
            let line = s
                .lines
                .get(&key)
                .or_else(|| {
                    key.starts_with("command")
                        .then(|| s.lines.get("command"))
                        .flatten()
                })
                .copied()
                .unwrap_or(s.line);
            s.notes.push(Note::new(
                line,
                key,
                format!(
                    "reaches `{other}` by its compose service name, which compose's project network resolves and the engine's default `bridge` network does not: put both containers on a network you create (container.network){}, or reach `{other}` through its published port on the host",
                    if named {
                        String::new()
                    } else {
                        format!(" and name `{component}`'s container `{other}` (container.name)")
                    }
                ),
            ));
        }
    }
}

/// Whether `text` names `host` as a host: `//host:`, `//host/`, `//host` at the end,
/// `@host:`, or `host:PORT` at the start of a word.
fn mentions_host(text: &str, host: &str) -> bool {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find(host) {
        let at = from + i;
        let end = at + host.len();
        let before = if at == 0 { None } else { Some(bytes[at - 1]) };
        let after = bytes.get(end).copied();
        let starts_word = before
            .is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'));
        let ends_host = match after {
            None => before.is_some_and(|b| b == b'/'),
            Some(b':') => bytes.get(end + 1).is_some_and(u8::is_ascii_digit),
            Some(b'/') => before.is_some_and(|b| b == b'/' || b == b'@'),
            _ => false,
        };
        if starts_word && ends_host {
            return true;
        }
        from = at + 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{mentions_host, normalise_project};

    #[test]
    fn hosts_in_urls() {
        assert!(mentions_host("http://ollama:11434", "ollama"));
        assert!(mentions_host("postgresql://u@db:5432/x", "db"));
        assert!(mentions_host("redis:6379", "redis"));
        assert!(mentions_host("http://webui/", "webui"));
        assert!(!mentions_host("http://ollama-proxy:11434", "ollama"));
        assert!(!mentions_host("use ollama for this", "ollama"));
        assert!(!mentions_host("mydb:5432", "db"));
    }

    #[test]
    fn project_names_from_directories() {
        assert_eq!(normalise_project("My Stack.v2"), "mystackv2");
        assert_eq!(normalise_project("_x"), "x");
    }
}
