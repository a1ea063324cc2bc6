//! The inventory as TOML text, in the compose file's order, with the notes as `#`
//! comments: the whole-file notes at the top, each component's above its table.
//!
//! Written by hand rather than by a serializer so that small tables are inline
//! (`readiness = { http = { endpoint = "http", path = "/health" } }`), lists of tables
//! are one line per item, keys come in a reading order, and comments sit where they
//! belong. The values come from the typed specs through serde, so the text parses
//! back into exactly them.

use crate::notes::Note;
use crate::project::Converted;
use serde_json::{Map, Value};
use std::fmt::Write;

/// Keys of a component, in the order written (others follow, sorted).
const COMPONENT_ORDER: &[&str] = &[
    "description",
    "host",
    "owner",
    "adapter",
    "template",
    "params",
    "command",
    "env_file",
    "inherit_env",
    "cwd",
    "endpoints",
    "depends_on",
    "connections",
    "readiness",
    "liveness",
    "stop",
    "restart",
];

/// Keys of a component written as tables of their own, after the others.
const COMPONENT_TABLES: &[&str] = &["env", "labels", "container"];

/// Keys of the container table, in the order written.
const CONTAINER_ORDER: &[&str] = &[
    "image",
    "pull",
    "name",
    "entrypoint",
    "user",
    "ports",
    "volumes",
    "devices",
    "gpus",
    "network",
    "restart",
    "secrets",
    "healthcheck",
    "stop_signal",
];

/// Keys of inline tables that read best first.
const INLINE_ORDER: &[&str] = &[
    "type",
    "source",
    "target",
    "published",
    "host_ip",
    "protocol",
    "read_only",
    "process",
    "tcp",
    "http",
    "exec",
    "request",
    "log",
    "container_health",
    "endpoint",
    "url",
    "path",
    "test",
    "interval",
    "period",
    "timeout",
    "retries",
    "start_period",
    "count",
    "driver",
    "capabilities",
    "device_ids",
    "policy",
    "signal",
    "grace_period",
];

/// Comment lines are wrapped before this column.
const WIDTH: usize = 96;

/// What the header says of where the inventory came from.
pub struct Header<'a> {
    /// The compose file's name as given.
    pub file: &'a str,
}

/// Writes the whole inventory.
pub fn emit(c: &Converted, header: &Header) -> String {
    let mut out = String::new();
    let project = &c.project;
    comment(
        &mut out,
        "",
        &format!(
            "Imported from {} (compose project `{project}`) by `flotilla import compose`. Nothing was run or pulled. Each compose key that was not carried over, or was carried over differently, is a comment naming its line and why.",
            header.file
        ),
    );
    let unpulled = c
        .inventory
        .components
        .values()
        .any(|s| s.container.as_ref().is_some_and(|c| c.pull.is_none()));
    if unpulled {
        comment(
            &mut out,
            "",
            "Images are not pulled (container.pull is \"never\" unless set): pull them first (`docker compose pull`, `podman pull`), or set container.pull = \"missing\".",
        );
    }
    comment(
        &mut out,
        "",
        &format!(
            "Containers keep the names compose gives them (`{}-<service>-1`, or their container_name): take compose's down first (`docker compose down`); flotilla never touches a container it did not create.",
            c.project
        ),
    );
    if !c.notes.is_empty() {
        out.push_str("#\n");
        comment(&mut out, "", &format!("{} (top level):", header.file));
        for n in &c.notes {
            note(&mut out, n);
        }
    }
    out.push('\n');
    let _ = writeln!(out, "project = {}", string(project));
    for (name, line, notes) in &c.components {
        let Some(spec) = c.inventory.components.get(name) else {
            continue;
        };
        out.push('\n');
        comment(&mut out, "", &format!("services.{name} (line {line})"));
        for n in notes {
            note(&mut out, n);
        }
        let value = serde_json::to_value(spec).expect("a component serialises");
        let table = value.as_object().cloned().unwrap_or_default();
        let path = format!("components.{}", key(name));
        let _ = writeln!(out, "[{path}]");
        write_keys(&mut out, &table, COMPONENT_ORDER, COMPONENT_TABLES);
        for t in COMPONENT_TABLES {
            let Some(Value::Object(sub)) = table.get(*t) else {
                continue;
            };
            if sub.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\n[{path}.{t}]");
            let order: &[&str] = if *t == "container" {
                CONTAINER_ORDER
            } else {
                &[]
            };
            write_keys(&mut out, sub, order, &[]);
        }
    }
    for (name, stack) in &c.inventory.stacks {
        let value = serde_json::to_value(stack).expect("a stack serialises");
        let _ = writeln!(out, "\n[stacks.{}]", key(name));
        write_keys(
            &mut out,
            value.as_object().expect("a table"),
            &["description", "components"],
            &[],
        );
    }
    out
}

/// `key = value` lines of `table`: `order` first, the rest sorted, `skip` left out.
fn write_keys(out: &mut String, table: &Map<String, Value>, order: &[&str], skip: &[&str]) {
    for k in ordered(table, order) {
        if skip.contains(&k.as_str()) {
            continue;
        }
        let v = &table[&k];
        if v.is_null() {
            continue;
        }
        let _ = writeln!(out, "{} = {}", key(&k), value(v, true));
    }
}

fn ordered(table: &Map<String, Value>, order: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = order
        .iter()
        .filter(|k| table.contains_key(**k))
        .map(|k| k.to_string())
        .collect();
    keys.extend(
        table
            .keys()
            .filter(|k| !order.contains(&k.as_str()))
            .cloned(),
    );
    keys
}

/// A value: inline, except (at the top of a table, `top`) a list of tables or a long
/// list, written one item a line.
fn value(v: &Value, top: bool) -> String {
    match v {
        Value::Null => "\"\"".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            let s = n.to_string();
            if n.is_f64() && !s.contains(['.', 'e', 'E']) {
                format!("{s}.0")
            } else {
                s
            }
        }
        Value::String(s) => string(s),
        Value::Array(items) => {
            let inline: Vec<String> = items.iter().map(|i| value(i, false)).collect();
            let one_line = format!("[{}]", inline.join(", "));
            let tables = items.iter().any(Value::is_object);
            if top && (tables || one_line.len() > 80) && !items.is_empty() {
                let mut s = String::from("[\n");
                for i in inline {
                    let _ = writeln!(s, "  {i},");
                }
                s.push(']');
                s
            } else {
                one_line
            }
        }
        Value::Object(m) => {
            let parts: Vec<String> = ordered(m, INLINE_ORDER)
                .into_iter()
                .filter(|k| !m[k].is_null())
                .map(|k| format!("{} = {}", key(&k), value(&m[&k], false)))
                .collect();
            if parts.is_empty() {
                "{}".into()
            } else {
                format!("{{ {} }}", parts.join(", "))
            }
        }
    }
}

/// A key: bare when it can be, else quoted.
fn key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        string(k)
    }
}

/// A TOML basic string.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn note(out: &mut String, n: &Note) {
    comment(
        out,
        "  ",
        &format!("line {}, `{}`: {}", n.line, n.key, n.text),
    );
}

/// `text` as `#` lines, wrapped at [`WIDTH`], continuation lines indented.
fn comment(out: &mut String, indent: &str, text: &str) {
    let text: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    let mut line = format!("# {indent}");
    let first_len = line.len();
    let cont = format!("# {indent}  ");
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if line.len() + 1 + word.len() > WIDTH && line.len() > first_len.max(cont.len()) {
            out.push_str(line.trim_end());
            out.push('\n');
            line = cont.clone();
        } else if line.len() > first_len && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(line.trim_end());
    out.push('\n');
}
