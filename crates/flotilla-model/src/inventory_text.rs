//! Inventory entries written as TOML text for people: a component's table in a
//! reading order, small tables inline (`readiness = { http = { endpoint = "http",
//! path = "/health" } }`), lists of tables one item a line, and `#` comments wrapped
//! where they belong. What `flotilla import compose` and `flotilla discover` print.
//!
//! Written by hand rather than by a serializer for that layout; the values come from
//! the typed specs through serde, so the text parses back into exactly them.

use crate::inventory::ComponentSpec;
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
    "unit",
    "label",
];

/// Comment lines are wrapped before this column.
pub const WIDTH: usize = 96;

/// Appends component `name`'s table (`[components.NAME]`, then its `env`, `labels`
/// and `container` tables) to `out`.
pub fn component(out: &mut String, name: &str, spec: &ComponentSpec) {
    let value = serde_json::to_value(spec).unwrap_or_default();
    let table = value.as_object().cloned().unwrap_or_default();
    let path = format!("components.{}", key(name));
    let _ = writeln!(out, "[{path}]");
    write_keys(out, &table, COMPONENT_ORDER, COMPONENT_TABLES);
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
        write_keys(out, sub, order, &[]);
    }
}

/// `key = value` lines of `table`: `order` first, the rest sorted, `skip` left out.
pub fn write_keys(out: &mut String, table: &Map<String, Value>, order: &[&str], skip: &[&str]) {
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
pub fn key(k: &str) -> String {
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
pub fn string(s: &str) -> String {
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

/// `text` as `#` lines after `indent`, wrapped at [`WIDTH`], continuation lines
/// indented two more spaces.
pub fn comment(out: &mut String, indent: &str, text: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{AdapterKind, SystemdSpec};

    #[test]
    fn a_component_reads_in_order_and_parses_back() {
        let spec = ComponentSpec {
            adapter: Some(AdapterKind::Systemd),
            command: None,
            endpoints: [("http".to_string(), "http://127.0.0.1:8080".to_string())].into(),
            systemd: Some(SystemdSpec {
                unit: Some("llama.service".into()),
                user: false,
            }),
            labels: [("from".to_string(), "discover \"x\"".to_string())].into(),
            ..Default::default()
        };
        let mut out = String::new();
        component(&mut out, "llama.cpp", &spec);
        assert!(out.starts_with("[components.\"llama.cpp\"]\nadapter = \"systemd\"\n"));
        assert!(
            out.contains("systemd = { unit = \"llama.service\" }"),
            "{out}"
        );
        assert!(
            out.contains("\n[components.\"llama.cpp\".labels]\nfrom = \"discover \\\"x\\\"\"\n"),
            "{out}"
        );
        let back: crate::inventory::Inventory = toml::from_str(&out).unwrap();
        assert_eq!(back.components["llama.cpp"], spec);
    }

    #[test]
    fn comments_wrap_with_an_indented_continuation() {
        let mut out = String::new();
        comment(&mut out, "", &"word ".repeat(40));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| l.len() <= WIDTH && l.starts_with('#')));
        assert!(lines[1].starts_with("#   word"));
    }
}
