//! A component's start environment: declared, never whatever shell ran `flotilla`.
//!
//! In order, later ones winning: the [`BASE`] variables of the environment Flotilla
//! runs in (those that are set; none for a container), the component's `inherit_env` names (those that are
//! set), its `env_file` (dotenv, relative to the inventory's directory, read now), and
//! its declared `env` (secrets resolved, `${env.NAME}` taken from the environment
//! Flotilla runs in). Nothing else reaches the program. Values are secret-bearing:
//! never log them.

use crate::secrets::SecretResolver;
use flotilla_model::inventory::AdapterKind;
use flotilla_model::topology::Component;
use std::collections::BTreeMap;
use std::path::Path;

/// Variables every component gets from the environment Flotilla runs in, when set.
pub const BASE: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR",
];

/// `c`'s start environment, as `(name, value)` pairs in name order.
///
/// # Errors
/// One line naming the component and what is wrong: a secret no source has (naming
/// where it looked), an unreadable or malformed `env_file` (path and line), a
/// `${env.NAME}` whose variable is not set.
pub fn effective(
    c: &Component,
    secrets: &SecretResolver,
    base_dir: &Path,
) -> Result<Vec<(String, String)>, String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    // A container gets only what it declares: this machine's PATH or HOME would
    // replace its image's.
    let inherited: &[&str] = if c.adapter == Some(AdapterKind::Container) {
        &[]
    } else {
        BASE
    };
    for name in inherited
        .iter()
        .copied()
        .chain(c.inherit_env.iter().map(String::as_str))
    {
        if let Ok(v) = std::env::var(name) {
            env.insert(name.to_string(), v);
        }
    }
    if let Some(pairs) = env_file(c, base_dir) {
        env.extend(pairs?);
    }
    for (k, v) in secrets
        .resolve_env(&c.name, &c.env)
        .map_err(|e| e.to_string())?
    {
        env.insert(k, from_environment(&c.name, &v)?);
    }
    Ok(env.into_iter().collect())
}

/// `c`'s `env_file` (relative to `base_dir`) read and parsed, `None` when it has
/// none; an unreadable or malformed one is said with its path (and line).
fn env_file(c: &Component, base_dir: &Path) -> Option<Result<Vec<(String, String)>, String>> {
    let path = base_dir.join(c.env_file.as_ref()?);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            return Some(Err(format!(
                "component `{}`: env_file {}: {e}",
                c.name,
                path.display()
            )))
        }
    };
    Some(crate::secrets::parse_dotenv(&text).map_err(|line| {
        format!(
            "component `{}`: env_file {}:{line}: expected NAME=value",
            c.name,
            path.display()
        )
    }))
}

/// Every reason `c`'s start environment cannot be built, each said once: an
/// unreadable or malformed `env_file`, each missing secret, each `${env.NAME}` that
/// is not set — one problem never hides the next (what [`effective`] stops at).
pub fn problems(c: &Component, secrets: &SecretResolver, base_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(Err(e)) = env_file(c, base_dir) {
        out.push(e);
    }
    for (k, v) in &c.env {
        let one = BTreeMap::from([(k.clone(), v.clone())]);
        match secrets.resolve_env(&c.name, &one) {
            Err(e) => out.push(e.to_string()),
            Ok(pairs) => {
                for (_, value) in pairs {
                    if let Err(e) = from_environment(&c.name, &value) {
                        out.push(e);
                    }
                }
            }
        }
    }
    out
}

/// `text` with every `${env.NAME}` replaced by `NAME`'s value in the environment
/// Flotilla runs in.
///
/// # Errors
/// The first variable that is not set, naming the component.
pub fn from_environment(component: &str, text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${env.") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + "${env.".len()..];
        let Some(end) = tail.find('}') else {
            out.push_str(&rest[i..]);
            return Ok(out);
        };
        let name = &tail[..end];
        let value = std::env::var(name).map_err(|_| {
            format!(
                "component `{component}`: `${{env.{name}}}`: {name} is not set in the environment flotilla runs in"
            )
        })?;
        out.push_str(&value);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_references_are_taken_from_the_environment() {
        std::env::set_var("FLOTILLA_TEST_ENV_REF", "/models");
        assert_eq!(
            from_environment("x", "${env.FLOTILLA_TEST_ENV_REF}/small.gguf").unwrap(),
            "/models/small.gguf"
        );
        let e = from_environment("x", "${env.FLOTILLA_TEST_SURELY_UNSET}").unwrap_err();
        assert!(e.contains("FLOTILLA_TEST_SURELY_UNSET is not set"), "{e}");
        assert_eq!(from_environment("x", "plain $HOME").unwrap(), "plain $HOME");
    }
}
