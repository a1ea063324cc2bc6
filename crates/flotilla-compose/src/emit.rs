//! The inventory as TOML text, in the compose file's order, with the notes as `#`
//! comments: the whole-file notes at the top, each component's above its table.
//!
//! Each component's table is written by [`flotilla_model::inventory_text`] (small
//! tables inline, keys in a reading order), so the text parses back into exactly the
//! typed specs.

use crate::notes::Note;
use crate::project::Converted;
use flotilla_model::inventory_text::{self, comment, key, string, write_keys};
use std::fmt::Write;

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
    if let Some(v) = c.inventory.version {
        let _ = writeln!(out, "version = {v}");
    }
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
        inventory_text::component(&mut out, name, spec);
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

fn note(out: &mut String, n: &Note) {
    comment(
        out,
        "  ",
        &format!("line {}, `{}`: {}", n.line, n.key, n.text),
    );
}
