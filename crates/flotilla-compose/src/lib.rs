//! `flotilla import compose`'s converter: a Compose Specification file
//! (<https://github.com/compose-spec/compose-spec/blob/main/spec.md>) to an equivalent
//! Flotilla inventory — one `container` component per service, one stack per compose
//! project (and one per compose profile) — as typed specs and as TOML text whose `#`
//! comments name every key that was not carried over, with its line and why.
//!
//! Pure: text in, text out; no IO and no clock. The caller reads the file and passes
//! what compose would take from the machine ([`Options`]: the directory's name, the
//! interpolation variables, the home directory). Nothing is ever run.
//!
//! Code map:
//! - [`convert`]: the entry point; [`Options`], [`Conversion`].
//! - [`error`]: [`ComposeError`] with the line and column of the node at fault.
//! - [`yaml`]: the YAML document as a tree with positions; anchors, aliases and merge
//!   keys resolved.
//! - [`interp`]: compose's `${VAR}` interpolation, resolved now or turned into
//!   Flotilla's `${env.VAR}`.
//! - `ctx`: what a conversion shares (options, declarations, errors) and the readers
//!   of typed values.
//! - `project`: the top level, dependencies, stacks; `service`: one service as a
//!   component; `ports`, `volumes`, `health`, `env`: the keys that need more than a
//!   line.
//! - `secret`: what looks like a secret, never written into the inventory.
//! - `notes`: what becomes a comment; `emit`: the TOML text.

mod ctx;
mod emit;
mod env;
pub mod error;
mod health;
pub mod interp;
mod notes;
mod ports;
mod project;
mod secret;
mod service;
mod volumes;
pub mod yaml;

pub use error::{ComposeError, Pos};
pub use notes::Note;

use flotilla_model::inventory::Inventory;
use std::collections::BTreeMap;

/// What compose would take from the machine, and where the inventory goes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The project's name when given on the command line (`-p`); it wins over the
    /// file's `name`.
    pub project: Option<String>,
    /// The name of the compose file's directory: the project's name when neither
    /// `project` nor the file's `name` gives one (made lowercase, as compose does).
    pub dir_name: String,
    /// The compose file's name as the user gave it, for the header comment.
    pub file_name: String,
    /// The compose file's directory as seen from the inventory's, when the inventory
    /// is written elsewhere: put before relative host paths (bind mounts,
    /// `env_file`), which compose reads relative to the compose file.
    pub base_dir: Option<String>,
    /// The home directory, for `~` in host paths.
    pub home: Option<String>,
    /// Interpolation variables for the fields resolved now (image, ports, volumes,
    /// user…): the environment, and the `.env` file beside the compose file, as compose
    /// takes them. `environment` values and `command` arguments never read these: their
    /// `${VAR}` become `${env.VAR}`.
    pub variables: BTreeMap<String, String>,
    /// Where `variables` came from, for notes ("the environment and .env").
    pub variables_source: String,
}

/// A compose file converted.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The inventory, typed.
    pub inventory: Inventory,
    /// The inventory as TOML, with its comments.
    pub toml: String,
    /// How many keys were not carried over, or were carried over differently (the
    /// comments' count).
    pub notes: usize,
    /// The compose project's name (the inventory's `project` and main stack).
    pub project: String,
}

/// Converts the compose file `text`.
///
/// # Errors
/// Every problem found (a YAML syntax error stops at the first), each with its line
/// and column; nothing is converted then.
pub fn convert(text: &str, options: &Options) -> Result<Conversion, Vec<ComposeError>> {
    let doc = yaml::parse(text).map_err(|e| vec![e])?;
    let converted = project::convert(&doc, options)?;
    let toml = emit::emit(
        &converted,
        &emit::Header {
            file: &options.file_name,
        },
    );
    let notes = converted.notes.len()
        + converted
            .components
            .iter()
            .map(|(_, _, n)| n.len())
            .sum::<usize>();
    Ok(Conversion {
        inventory: converted.inventory,
        toml,
        notes,
        project: converted.project,
    })
}

/// A host path the compose file wrote relative to itself, as the inventory's
/// directory sees it.
fn rebase(options: &Options, path: &str) -> String {
    match &options.base_dir {
        Some(base) if !path.starts_with('/') => {
            let mut rest = path;
            while let Some(r) = rest.strip_prefix("./") {
                rest = r;
            }
            if rest == "." || rest.is_empty() {
                base.clone()
            } else {
                format!("{}/{rest}", base.trim_end_matches('/'))
            }
        }
        _ => path.to_string(),
    }
}

/// Whether `name` is a Flotilla name (letters, digits, `-`, `_`).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
