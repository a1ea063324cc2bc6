//! What every part of a conversion shares: the options, the project's name and
//! declarations, the errors found so far, and the readers of typed values (strings
//! interpolated the way each field is, lists, durations).

use crate::error::ComposeError;
use crate::interp;
use crate::notes::Note;
use crate::yaml::{Node, Value};
use crate::Options;
use std::collections::BTreeMap;
use std::time::Duration;

/// A top-level named volume, network or secret, as declared.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    /// Its declaration (a mapping, or null for `name:` alone).
    pub node: Option<Node>,
    /// `external: true`: it exists outside the project, under its own name.
    pub external: bool,
    /// `name:`: its real name in the engine.
    pub name: Option<String>,
    /// Where compose takes a secret's value from, said for a note.
    pub from: Option<String>,
}

/// The shared state of one conversion.
pub struct Ctx<'a> {
    /// What the caller gave.
    pub options: &'a Options,
    /// The compose project's name.
    pub project: String,
    /// Every service, by compose name, with the component name it becomes.
    pub services: BTreeMap<String, String>,
    /// Top-level `volumes`.
    pub volumes: BTreeMap<String, Declared>,
    /// Top-level `networks`.
    pub networks: BTreeMap<String, Declared>,
    /// Top-level `secrets`.
    pub secrets: BTreeMap<String, Declared>,
    /// Errors so far (the conversion fails with all of them).
    pub errors: Vec<ComposeError>,
}

impl Ctx<'_> {
    /// Records an error at `node`.
    pub fn error(&mut self, node: &Node, message: impl Into<String>) {
        self.errors.push(ComposeError::invalid(node.at, message));
    }

    /// A scalar's text with compose's interpolation done now, from the variables the
    /// caller gave (for the fields Flotilla takes as they are: image, ports, volumes,
    /// user…). A variable taken from them, or unset, is noted under `key`. `None`
    /// (with an error) for a list or mapping, or a `${NAME:?…}` that is unset.
    pub fn string(&mut self, node: &Node, key: &str, notes: &mut Vec<Note>) -> Option<String> {
        let text = self.scalar(node, key)?;
        self.resolve(&text, node, key, notes)
    }

    /// [`Ctx::string`] of a text taken from `node` (a part of its scalar).
    pub fn resolve(
        &mut self,
        text: &str,
        node: &Node,
        key: &str,
        notes: &mut Vec<Note>,
    ) -> Option<String> {
        let pieces = match interp::parse(text) {
            Ok(p) => p,
            Err(e) => {
                self.error(node, format!("`{key}`: {e}"));
                return None;
            }
        };
        if !interp::has_vars(&pieces) {
            return Some(text_of(&pieces));
        }
        match interp::resolve(&pieces, &self.options.variables) {
            Ok(r)
                if r.from_variables
                    .iter()
                    .any(|n| crate::secret::secret_name(n)) =>
            {
                let name = r
                    .from_variables
                    .iter()
                    .find(|n| crate::secret::secret_name(n))
                    .cloned()
                    .unwrap_or_default();
                self.error(
                    node,
                    format!(
                        "`{key}`: `${{{name}}}` looks like a secret, and this field's references are resolved at import: its value is not written into the inventory: in a healthcheck's CMD-SHELL write `$${{{name}}}` (the container's shell expands it), elsewhere take it out"
                    ),
                );
                None
            }
            Ok(r) => {
                let mut how = Vec::new();
                if !r.from_variables.is_empty() {
                    how.push(format!(
                        "{} from {}",
                        list(&r.from_variables),
                        self.options.variables_source
                    ));
                }
                if !r.defaulted.is_empty() {
                    how.push(format!("the default of {}", list(&r.defaulted)));
                }
                if !r.unset.is_empty() {
                    how.push(format!(
                        "{} unset, so empty (as compose does)",
                        list(&r.unset)
                    ));
                }
                notes.push(Note::new(
                    node.at.line,
                    key,
                    format!(
                        "`{}` was resolved now, to `{}` ({}): flotilla does not interpolate this field",
                        interp::source(&pieces),
                        r.value,
                        how.join("; ")
                    ),
                ));
                Some(r.value)
            }
            Err(e) => {
                self.error(
                    node,
                    format!("`{key}`: {e} (in {})", self.options.variables_source),
                );
                None
            }
        }
    }

    /// A text (taken from `node`'s scalar) with compose's references turned into
    /// Flotilla's (`${NAME}` → `${env.NAME}`, resolved when the component starts), for
    /// `environment` values and `command` arguments. What could not be kept is noted.
    pub fn flotilla(
        &mut self,
        text: &str,
        node: &Node,
        key: &str,
        notes: &mut Vec<Note>,
    ) -> Option<String> {
        match interp::parse(text) {
            Ok(pieces) => {
                let r = interp::to_flotilla(&pieces);
                for c in r.changed {
                    notes.push(Note::new(node.at.line, key, c));
                }
                Some(r.value)
            }
            Err(e) => {
                self.error(node, format!("`{key}`: {e}"));
                None
            }
        }
    }

    /// A scalar's raw text (numbers and booleans as written); an error for anything else.
    pub fn scalar(&mut self, node: &Node, key: &str) -> Option<String> {
        match &node.value {
            Value::Scalar { text, .. } if !node.is_null() => Some(text.clone()),
            _ => {
                self.error(
                    node,
                    format!("`{key}` must be a string, not {}", node.kind()),
                );
                None
            }
        }
    }

    /// A list of strings (each interpolated now), or one string as a list of one.
    pub fn strings(&mut self, node: &Node, key: &str, notes: &mut Vec<Note>) -> Vec<String> {
        match node.as_seq() {
            Some(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, n)| self.string(n, &format!("{key}[{i}]"), notes))
                .collect(),
            None => self.string(node, key, notes).into_iter().collect(),
        }
    }

    /// A duration in compose's (Go's) form: `1m30s`, `10s`, `500ms`, `1.5h`.
    pub fn duration(&mut self, node: &Node, key: &str, notes: &mut Vec<Note>) -> Option<Duration> {
        let text = self.string(node, key, notes)?;
        let d = go_duration(&text);
        if d.is_none() {
            self.error(
                node,
                format!(
                    "`{key}`: `{text}` is not a duration (compose writes `10s`, `1m30s`, `500ms`)"
                ),
            );
        }
        d
    }

    /// The names of a list, or the keys of a mapping (compose's two ways of writing
    /// `profiles`, `networks`, `depends_on`…), with their nodes.
    pub fn names<'n>(
        &mut self,
        node: &'n Node,
        key: &str,
    ) -> Vec<(String, &'n Node, Option<&'n Node>)> {
        match &node.value {
            Value::Seq(items) => items
                .iter()
                .filter_map(|n| self.scalar(n, key).map(|s| (s, n, None)))
                .collect(),
            Value::Map(entries) => entries
                .iter()
                .map(|(k, v)| (k.key_text().to_string(), k, Some(v)))
                .collect(),
            Value::Scalar { .. } => {
                self.error(
                    node,
                    format!("`{key}` must be a list or a mapping, not {}", node.kind()),
                );
                Vec::new()
            }
        }
    }
}

fn list(names: &[String]) -> String {
    let mut names: Vec<&String> = names.iter().collect();
    names.dedup();
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn text_of(pieces: &[interp::Piece]) -> String {
    pieces
        .iter()
        .map(|p| match p {
            interp::Piece::Text(t) => t.as_str(),
            interp::Piece::Var { .. } => "",
        })
        .collect()
}

/// Parses a Go duration (`time.ParseDuration`: a sequence of decimal numbers, each
/// with a unit `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), as compose writes them.
pub fn go_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    if t == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = t;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_nanos((total * 1e9).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::go_duration;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        assert_eq!(go_duration("10"), None);
        assert_eq!(go_duration("ten seconds"), None);
    }
}
