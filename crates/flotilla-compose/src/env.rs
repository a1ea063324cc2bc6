//! A service's `environment` (a mapping, or a list of `NAME=value`) and `env_file`.
//!
//! Values keep compose's meaning in Flotilla's words: `${NAME}` becomes
//! `${env.NAME}` (taken from the environment Flotilla runs in when the component
//! starts, as compose takes it from the shell at `up`), and a variable listed without
//! a value (`- HF_TOKEN`, `HF_TOKEN:`) — compose's "from the shell" — too.
//!
//! A value that looks like a secret ([`crate::secret`]) is never written into the
//! inventory, even when the compose file holds it literally: it becomes the secret
//! `{ secret = "NAME" }` with a note (resolved where Flotilla runs, from its
//! environment or `secrets.env`, and given to the container as a file, so the value
//! is never in the engine's `inspect` output). So does a reference to, or a variable
//! listed without a value that is named like, a secret (`${OPENAI_API_KEY}`).

use crate::ctx::Ctx;
use crate::notes::Note;
use crate::secret::{looks_secret, referenced, secret_name};
use crate::yaml::{Node, Value};
use flotilla_model::values::EnvValue;
use std::collections::BTreeMap;

/// Reads `environment`: the variables, and the line each is written on.
pub fn read(
    ctx: &mut Ctx,
    node: &Node,
    notes: &mut Vec<Note>,
) -> (BTreeMap<String, EnvValue>, BTreeMap<String, u32>) {
    let mut out = BTreeMap::new();
    let mut lines = BTreeMap::new();
    let mut put =
        |ctx: &mut Ctx, name: &str, value: Option<&Node>, at: &Node, notes: &mut Vec<Note>| {
            let key = format!("environment.{name}");
            let value = match value {
                // Listed without a value: compose takes it from the shell.
                None if secret_name(name) => secret(
                    name,
                    at,
                    &key,
                    notes,
                    "is listed without a value (compose takes it from the shell)",
                ),
                Some(v) if v.is_null() && secret_name(name) => secret(
                    name,
                    at,
                    &key,
                    notes,
                    "is listed without a value (compose takes it from the shell)",
                ),
                None => EnvValue::Literal(from_shell(name, at, &key, notes)),
                Some(v) if v.is_null() => EnvValue::Literal(from_shell(name, at, &key, notes)),
                Some(v) => {
                    let Some(text) = ctx.scalar(v, &key) else {
                        return;
                    };
                    match referenced(&text) {
                        Some(var) if secret_name(name) || secret_name(&var) => secret(
                            &var,
                            at,
                            &key,
                            notes,
                            &format!("refers to `{var}`, named like a secret"),
                        ),
                        None if looks_secret(name, &text) => secret(
                            name,
                            at,
                            &key,
                            notes,
                            "looks like a secret and is not copied here",
                        ),
                        _ => {
                            let Some(v) = ctx.flotilla(&text, v, &key, notes) else {
                                return;
                            };
                            EnvValue::Literal(v)
                        }
                    }
                }
            };
            out.insert(name.to_string(), value);
            lines.insert(name.to_string(), at.at.line);
        };
    match &node.value {
        Value::Map(entries) => {
            for (k, v) in entries {
                put(ctx, k.key_text(), Some(v), k, notes);
            }
        }
        Value::Seq(items) => {
            for item in items {
                let Some(text) = ctx.scalar(item, "environment") else {
                    continue;
                };
                match text.split_once('=') {
                    Some((name, value)) => {
                        let v = Node {
                            value: Value::Scalar {
                                text: value.to_string(),
                                plain: false,
                            },
                            at: item.at,
                        };
                        put(ctx, name, Some(&v), item, notes);
                    }
                    None => put(ctx, &text, None, item, notes),
                }
            }
        }
        Value::Scalar { .. } => ctx.error(
            node,
            format!(
                "`environment` must be a mapping or a list of NAME=value, not {}",
                node.kind()
            ),
        ),
    }
    (out, lines)
}

/// `{ secret = "<secret>" }`, noted (on `key`) with `why` the value is not written.
fn secret(secret: &str, at: &Node, key: &str, notes: &mut Vec<Note>, why: &str) -> EnvValue {
    notes.push(Note::new(
        at.at.line,
        key,
        format!("the value {why}: it is the secret `{secret}` (`{{ secret = \"{secret}\" }}`), given to the container as a file, never in its inspect output: put {secret}=… in the state directory's secrets.env (mode 0600) or in the environment flotilla runs in"),
    ));
    EnvValue::Secret(secret.to_string())
}

/// A variable listed without a value: `${env.NAME}`, noted (compose leaves it out
/// when the shell does not set it; Flotilla refuses to start without it).
fn from_shell(name: &str, at: &Node, key: &str, notes: &mut Vec<Note>) -> String {
    notes.push(Note::new(
        at.at.line,
        key,
        format!("listed without a value: taken from the environment flotilla runs in (`${{env.{name}}}`); compose leaves it out when unset, flotilla refuses to start the component then"),
    ));
    format!("${{env.{name}}}")
}

/// Reads `env_file`: a path, a list of paths, or a list of `{ path, required, format }`.
/// The component takes one file; the first is kept, the others are noted.
pub fn read_file(ctx: &mut Ctx, node: &Node, notes: &mut Vec<Note>) -> Option<String> {
    let items: Vec<&Node> = match &node.value {
        Value::Seq(items) => items.iter().collect(),
        _ => vec![node],
    };
    let mut kept = None;
    for (i, item) in items.into_iter().enumerate() {
        let key = format!("env_file[{i}]");
        let path = match &item.value {
            Value::Map(_) => {
                for (k, v) in item.as_map().unwrap_or_default() {
                    match k.key_text() {
                        "path" => {}
                        "required" if v.as_bool() == Some(false) => notes.push(Note::new(
                            k.at.line,
                            format!("{key}.required"),
                            "not carried over: flotilla reads the env_file at start and fails when it is missing",
                        )),
                        "required" => {}
                        other => notes.push(Note::new(
                            k.at.line,
                            format!("{key}.{other}"),
                            "not carried over: flotilla reads env_files as dotenv (NAME=value lines)",
                        )),
                    }
                }
                match item.get("path") {
                    Some(p) => ctx.string(p, &key, notes),
                    None => {
                        ctx.error(item, format!("`{key}` needs `path`"));
                        None
                    }
                }
            }
            _ => ctx.string(item, &key, notes),
        };
        let Some(path) = path else { continue };
        if kept.is_none() {
            kept = Some(crate::rebase(ctx.options, &path));
        } else {
            notes.push(Note::new(
                item.at.line,
                key,
                format!("`{path}` not carried over: a component reads one env_file; merge its lines into the first, or move them to `env`"),
            ));
        }
    }
    kept
}
