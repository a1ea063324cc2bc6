//! Rewriting an inventory of an older format version to the current one
//! ([`INVENTORY_VERSION`]), keeping its comments, key order and formatting: what
//! `flotilla config migrate` writes (after showing the difference). Pure: text in,
//! text out.
//!
//! Each format version after the first has a [`Step`] from the one before; an
//! inventory that does not say its version is version 1, and migrating it writes
//! `version = 1` at its top, so that a later format can tell it apart. TOML is
//! edited through `toml_edit` (comments and whitespace are kept); JSON, which has
//! no comments, gets its `"version"` as the first key of the top-level object.

use crate::inventory::INVENTORY_VERSION;
use crate::source::Format;

/// A migration from format version `from` to `from + 1`.
pub struct Step {
    /// The version it starts from.
    pub from: u32,
    /// What it changes, one line (shown before the difference).
    pub describe: &'static str,
    /// The change, on a TOML document (the `version` key is set after it).
    pub apply: fn(&mut toml_edit::DocumentMut),
}

/// Every step, by `from`. Version 1 is the first format: there is none yet.
pub const STEPS: &[Step] = &[];

/// An inventory rewritten to the current format version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The version it declared (1 when it declared none).
    pub from: u32,
    /// Whether it declared its version.
    pub declared: bool,
    /// The version it is now: [`INVENTORY_VERSION`].
    pub to: u32,
    /// What changed, one line each (empty: nothing; `text` is the input).
    pub changes: Vec<String>,
    /// The rewritten inventory.
    pub text: String,
}

/// Why an inventory cannot be migrated. Nothing is rewritten then.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MigrateError {
    /// The text is not well-formed TOML or JSON.
    #[error("{line}:{column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// `version` is not a positive integer.
    #[error("`version` must be an integer from 1 to {INVENTORY_VERSION}, found {0}")]
    BadVersion(String),
    /// `version` is newer than this build knows.
    #[error("the inventory is format version {0}, newer than this flotilla knows (up to {INVENTORY_VERSION}): upgrade flotilla")]
    Newer(u32),
}

/// `text` (an inventory in `format`) rewritten to [`INVENTORY_VERSION`].
///
/// # Errors
/// [`MigrateError`]: a syntax error (with line and column), a `version` that is not
/// a positive integer, or one newer than this build.
pub fn migrate(text: &str, format: Format) -> Result<Migrated, MigrateError> {
    match format {
        Format::Toml => migrate_toml(text),
        Format::Json => migrate_json(text),
    }
}

fn declared_version(v: Option<i64>, shown: impl FnOnce() -> String) -> Result<u32, MigrateError> {
    match v {
        Some(n) if n > i64::from(INVENTORY_VERSION) => Err(MigrateError::Newer(n as u32)),
        Some(n) if n >= 1 => Ok(n as u32),
        _ => Err(MigrateError::BadVersion(shown())),
    }
}

fn migrate_toml(text: &str) -> Result<Migrated, MigrateError> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let at = crate::source::SourceFile::new("", Format::Toml, text)
            .line_column(e.span().map_or(0, |s| s.start));
        MigrateError::Syntax {
            line: at.line,
            column: at.column,
            message: e.message().to_string(),
        }
    })?;
    let found = doc.get("version").cloned();
    let declared = found.is_some();
    let from = match &found {
        None => 1,
        Some(item) => declared_version(item.as_integer(), || item.to_string().trim().to_string())?,
    };
    let mut changes = Vec::new();
    for step in STEPS.iter().filter(|s| s.from >= from) {
        (step.apply)(&mut doc);
        changes.push(format!(
            "{} → {}: {}",
            step.from,
            step.from + 1,
            step.describe
        ));
    }
    if !declared {
        put_version_first(&mut doc);
        changes.push(format!(
            "the format version written: version = {INVENTORY_VERSION}"
        ));
    } else if from != INVENTORY_VERSION {
        doc["version"] = toml_edit::value(i64::from(INVENTORY_VERSION));
    }
    let text = if changes.is_empty() {
        text.to_string()
    } else {
        doc.to_string()
    };
    Ok(Migrated {
        from,
        declared,
        to: INVENTORY_VERSION,
        changes,
        text,
    })
}

/// Inserts `version` as the first top-level key; comments written before the old
/// first key (the file's header) stay above it.
fn put_version_first(doc: &mut toml_edit::DocumentMut) {
    let root = doc.as_table_mut();
    let entries: Vec<(toml_edit::Key, toml_edit::Item)> = root
        .iter()
        .map(|(k, _)| k.to_string())
        .collect::<Vec<_>>()
        .into_iter()
        .filter_map(|k| root.remove_entry(&k))
        .collect();
    let mut version = toml_edit::Key::new("version");
    // The header: whatever precedes the first key-value (tables keep their own).
    if let Some((first, item)) = entries.first() {
        if item.is_value() {
            if let Some(prefix) = first.leaf_decor().prefix().and_then(|p| p.as_str()) {
                version.leaf_decor_mut().set_prefix(prefix.to_string());
            }
        }
    }
    root.insert_formatted(&version, toml_edit::value(i64::from(INVENTORY_VERSION)));
    for (i, (mut key, item)) in entries.into_iter().enumerate() {
        if i == 0 && item.is_value() {
            key.leaf_decor_mut().set_prefix("");
        }
        root.insert_formatted(&key, item);
    }
}

fn migrate_json(text: &str) -> Result<Migrated, MigrateError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| MigrateError::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
    let found = value.get("version");
    let declared = found.is_some();
    let from = match found {
        None => 1,
        Some(v) => declared_version(v.as_i64(), || v.to_string())?,
    };
    if declared {
        // No step changes a JSON inventory yet; the version is current.
        return Ok(Migrated {
            from,
            declared,
            to: INVENTORY_VERSION,
            changes: Vec::new(),
            text: text.to_string(),
        });
    }
    let Some(open) = text.find('{') else {
        return Err(MigrateError::Syntax {
            line: 1,
            column: 1,
            message: "the inventory is not a JSON object".into(),
        });
    };
    let rest = &text[open + 1..];
    let empty = rest.trim_start().starts_with('}');
    // The indentation of the first key, or two spaces.
    let indent = rest
        .strip_prefix(['\r', '\n'])
        .or_else(|| rest.strip_prefix("\r\n"))
        .map(|r| r[..r.len() - r.trim_start_matches([' ', '\t']).len()].to_string())
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| "  ".into());
    let sep = if empty { "\n" } else { ",\n" };
    let text = format!(
        "{}\n{indent}\"version\": {INVENTORY_VERSION}{sep}{}",
        &text[..=open],
        rest.trim_start_matches(['\r', '\n'])
            .trim_start_matches(|c| empty && c == ' ')
    );
    Ok(Migrated {
        from,
        declared,
        to: INVENTORY_VERSION,
        changes: vec![format!(
            "the format version written: \"version\": {INVENTORY_VERSION}"
        )],
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undeclared_toml_inventory_gets_its_version_first_keeping_comments_and_order() {
        let before = "# The lab's fleet.\n# Second line.\nproject = \"lab\"  # ours\n\n[hosts.gpu]\naddress = \"10.0.0.2\" # the box\n\n# The model.\n[components.llama]\nhost = \"gpu\"\ncommand = [\"llama-server\"]\n";
        let m = migrate(before, Format::Toml).unwrap();
        assert_eq!((m.from, m.declared, m.to), (1, false, 1));
        assert_eq!(
            m.text,
            "# The lab's fleet.\n# Second line.\nversion = 1\nproject = \"lab\"  # ours\n\n[hosts.gpu]\naddress = \"10.0.0.2\" # the box\n\n# The model.\n[components.llama]\nhost = \"gpu\"\ncommand = [\"llama-server\"]\n"
        );
        // Migrating again changes nothing.
        let again = migrate(&m.text, Format::Toml).unwrap();
        assert!(again.changes.is_empty());
        assert_eq!(again.text, m.text);
    }

    #[test]
    fn a_file_of_tables_only_gets_its_version_above_them() {
        let m = migrate("# Hosts.\n[hosts.a]\ntransport = \"ssh\"\n", Format::Toml).unwrap();
        assert_eq!(
            m.text,
            "version = 1\n# Hosts.\n[hosts.a]\ntransport = \"ssh\"\n"
        );
    }

    #[test]
    fn json_gets_its_version_as_the_first_key() {
        let m = migrate(
            "{\n    \"project\": \"lab\",\n    \"hosts\": {}\n}\n",
            Format::Json,
        )
        .unwrap();
        assert_eq!(
            m.text,
            "{\n    \"version\": 1,\n    \"project\": \"lab\",\n    \"hosts\": {}\n}\n"
        );
        let v: serde_json::Value = serde_json::from_str(&m.text).unwrap();
        assert_eq!(v["version"], 1);
        let empty = migrate("{}", Format::Json).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&empty.text).unwrap(),
            serde_json::json!({"version": 1})
        );
        assert!(migrate("{\"version\": 1}", Format::Json)
            .unwrap()
            .changes
            .is_empty());
    }

    #[test]
    fn newer_broken_and_bad_versions_are_refused() {
        assert_eq!(
            migrate("version = 7\n", Format::Toml),
            Err(MigrateError::Newer(7))
        );
        assert_eq!(
            migrate("version = \"1\"\n", Format::Toml),
            Err(MigrateError::BadVersion("\"1\"".into()))
        );
        assert_eq!(
            migrate("version = 0\n", Format::Toml),
            Err(MigrateError::BadVersion("0".into()))
        );
        match migrate("project = \"a\"\n[hosts\n", Format::Toml) {
            Err(MigrateError::Syntax { line, .. }) => assert_eq!(line, 2),
            other => panic!("{other:?}"),
        }
        match migrate("{\n  \"a\": ,\n}", Format::Json) {
            Err(MigrateError::Syntax { line, column, .. }) => assert_eq!((line, column), (2, 8)),
            other => panic!("{other:?}"),
        }
    }
}
