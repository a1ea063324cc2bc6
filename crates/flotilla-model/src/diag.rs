//! Diagnostics: what is wrong with an inventory, where, and how to fix it.
//!
//! Every diagnostic has a stable [`Code`] (its kebab-case name never changes once
//! released, so scripts may match on it), a message, and a primary location given as a
//! byte span in one source file. [`Diagnostic::locate`] turns that into the
//! `file:line:column` form with the offending source line, for printing or JSON.

use crate::source::{FileId, LineColumn, Sources, Span};
use serde::Serialize;
use std::fmt;

/// Stable identifiers of every problem validation can report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Code {
    /// The file's bytes are not UTF-8 (inventories and templates are UTF-8 text).
    NotUtf8,
    /// The file is not well-formed TOML or JSON.
    Syntax,
    /// A value has the wrong type or an invalid form (not a duration, port, signal…).
    InvalidValue,
    /// A key that the format does not define.
    UnknownKey,
    /// A required key is absent.
    MissingKey,
    /// The same key appears twice in one JSON object.
    DuplicateKey,
    /// A component names a host that is not declared.
    UnknownHost,
    /// `depends_on` or a connection names a component that is not declared.
    UnknownDependency,
    /// A stack lists a component that is not declared.
    UnknownStackMember,
    /// `profile` names a profile the component does not declare.
    UnknownProfile,
    /// `template` names no built-in template and no template file.
    UnknownTemplate,
    /// A template parameter is missing, unknown or of the wrong type.
    InvalidTemplateParam,
    /// A `${...}` reference that resolves to nothing.
    UnknownReference,
    /// A probe or connection names an endpoint the component does not declare.
    UnknownEndpoint,
    /// A stack and a component share a name, so a target naming it is ambiguous.
    AmbiguousName,
    /// The dependency graph has a cycle.
    DependencyCycle,
    /// Two components on one host listen on the same port in their active profiles.
    PortConflict,
    /// An `external` component declares how to start or stop it.
    ExternalLifecycle,
    /// A managed component has no command, unit or label to start it with.
    NoStartMethod,
    /// An `ssh-tunnel` whose host, target or listening port does not resolve.
    TunnelUnresolved,
    /// A probe does not set exactly one check kind.
    InvalidProbe,
    /// The inventory's `version` is newer than this build reads
    /// ([`crate::inventory::INVENTORY_VERSION`]).
    UnsupportedVersion,
    /// Something legal but probably unintended.
    Suspicious,
}

impl Code {
    /// The stable kebab-case name, e.g. `dependency-cycle`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::NotUtf8 => "not-utf8",
            Code::Syntax => "syntax",
            Code::InvalidValue => "invalid-value",
            Code::UnknownKey => "unknown-key",
            Code::MissingKey => "missing-key",
            Code::DuplicateKey => "duplicate-key",
            Code::UnknownHost => "unknown-host",
            Code::UnknownDependency => "unknown-dependency",
            Code::UnknownStackMember => "unknown-stack-member",
            Code::UnknownProfile => "unknown-profile",
            Code::UnknownTemplate => "unknown-template",
            Code::InvalidTemplateParam => "invalid-template-param",
            Code::UnknownReference => "unknown-reference",
            Code::UnknownEndpoint => "unknown-endpoint",
            Code::AmbiguousName => "ambiguous-name",
            Code::DependencyCycle => "dependency-cycle",
            Code::PortConflict => "port-conflict",
            Code::ExternalLifecycle => "external-lifecycle",
            Code::NoStartMethod => "no-start-method",
            Code::TunnelUnresolved => "tunnel-unresolved",
            Code::InvalidProbe => "invalid-probe",
            Code::UnsupportedVersion => "unsupported-version",
            Code::Suspicious => "suspicious",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How bad a diagnostic is: errors make the inventory invalid, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The inventory is rejected.
    Error,
    /// The inventory is accepted; the user should look.
    Warning,
}

/// A place in a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Which file.
    pub file: FileId,
    /// Which bytes.
    pub span: Span,
}

/// A secondary location with its own short message ("first claimed here").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub location: Location,
    /// What is there.
    pub message: String,
}

/// One problem found in an inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable identifier.
    pub code: Code,
    /// Error or warning.
    pub severity: Severity,
    /// One sentence saying what is wrong, naming the things involved.
    pub message: String,
    /// Where it is wrong; `None` only for problems with no place (e.g. an empty set of sources).
    pub location: Option<Location>,
    /// Related places.
    pub labels: Vec<Label>,
    /// How to fix it, when that can be said ("did you mean `llm`?").
    pub help: Option<String>,
}

impl Diagnostic {
    /// An error with a location.
    pub fn error(code: Code, message: impl Into<String>, location: Location) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            location: Some(location),
            labels: Vec::new(),
            help: None,
        }
    }

    /// A warning with a location.
    pub fn warning(code: Code, message: impl Into<String>, location: Location) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message, location)
        }
    }

    /// Adds a fix-it hint.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds a secondary location.
    pub fn with_label(mut self, location: Location, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            location,
            message: message.into(),
        });
        self
    }

    /// Resolves byte spans into file names, lines, columns and the source line, for
    /// printing or JSON output.
    pub fn locate(&self, sources: &Sources) -> LocatedDiagnostic {
        let place = |loc: &Location| {
            let file = sources.get(loc.file);
            let start = file.line_column(loc.span.start);
            let end = file.line_column(loc.span.end);
            Place {
                file: file.name.clone(),
                start,
                end,
                source_line: file.line_text(start.line).to_string(),
            }
        };
        LocatedDiagnostic {
            code: self.code,
            severity: self.severity,
            message: self.message.clone(),
            location: self.location.as_ref().map(place),
            labels: self
                .labels
                .iter()
                .map(|l| LocatedLabel {
                    location: place(&l.location),
                    message: l.message.clone(),
                })
                .collect(),
            help: self.help.clone(),
        }
    }
}

/// A resolved place: `file:line:column`, and the line's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Place {
    /// File name as given to [`crate::SourceFile::new`].
    pub file: String,
    /// Start of the span.
    pub start: LineColumn,
    /// End of the span (exclusive).
    pub end: LineColumn,
    /// The text of the start line.
    pub source_line: String,
}

/// A [`Label`] with its place resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocatedLabel {
    /// Where.
    pub location: Place,
    /// What is there.
    pub message: String,
}

/// A [`Diagnostic`] with its places resolved: the JSON shape `flotilla validate --json`
/// prints, one per problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocatedDiagnostic {
    /// Stable identifier.
    pub code: Code,
    /// `error` or `warning`.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
    /// Primary place.
    pub location: Option<Place>,
    /// Related places.
    pub labels: Vec<LocatedLabel>,
    /// How to fix it.
    pub help: Option<String>,
}

/// The closest of `candidates` to `word`, if any is close enough to be a likely typo:
/// within an edit distance (Damerau–Levenshtein) of a third of its length (at least
/// one), or with a Jaro–Winkler similarity above 0.85.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            (
                strsim::damerau_levenshtein(word, c),
                strsim::jaro_winkler(word, c),
                c,
            )
        })
        .filter(|(d, jw, _)| *d <= limit || *jw > 0.85)
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)))
        .map(|(_, _, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_names_match_the_serialised_ones() {
        for code in [
            Code::NotUtf8,
            Code::Syntax,
            Code::DependencyCycle,
            Code::Suspicious,
        ] {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::from(code.as_str())
            );
        }
        assert_eq!(Code::NotUtf8.as_str(), "not-utf8");
    }

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(did_you_mean("stuido", ["studio", "gpu"]), Some("studio"));
        assert_eq!(did_you_mean("zzz", ["studio", "gpu"]), None);
        assert_eq!(did_you_mean("lmm", ["llm", "embed", "proxy"]), Some("llm"));
        assert_eq!(
            did_you_mean("comand", ["command", "cwd", "env"]),
            Some("command")
        );
    }
}
