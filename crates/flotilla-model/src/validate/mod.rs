//! Validation: source files in, a [`Topology`] (plus warnings) or every problem found
//! out, each located at `file:line:column`.
//!
//! Phases: parse each file; decode hosts, components and stacks one entry at a time
//! (one broken entry does not hide the others, and a broken key of an entry hides only
//! the checks that depend on it); load user templates; resolve each
//! component (profile, template, owner/adapter rules); resolve cross references
//! (dependencies, connections, tunnels, `${...}`, probes); check ports, stacks, names
//! and cycles; build the indexed topology.
//!
//! One file per phase, all methods of one `Validator` that collects diagnostics:
//! - this file: the entry point [`validate`], the phase order (`Validator::run`) and
//!   shared plumbing (locations, decoding with retry, name checks, key paths);
//! - `hosts`: hosts and their transport/SSH settings;
//! - `draft`: component and stack entries decoded into drafts (owner/adapter rules);
//! - `hints`: type errors in a component explained with the expected form and an
//!   example built from what was written (`depends_on`, `command`, `env`, `endpoints`,
//!   docker compose's `ports`/`environment`);
//! - `references`: user templates, profiles, template expansion, endpoints, tunnels,
//!   `depends_on`, connections and `${...}` substitution;
//! - `container`: the `container` table of container components (image reference,
//!   ports, volumes, secrets, one restart owner) and the defaults the topology carries;
//! - `probes`: component and stack probes;
//! - `graph`: ports, stacks and their names, dependency cycles (the DAG checks).

mod container;
mod draft;
mod graph;
mod hints;
mod hosts;
mod kubernetes;
mod probes;
mod references;

use crate::diag::{did_you_mean, Code, Diagnostic, Location, Severity};
use crate::inventory::ProbeSpec;
use crate::inventory::INVENTORY_VERSION;
use crate::node::{self, from_node, DecodeError, Entry, Node, Value};
use crate::source::{FileId, Sources, Span};
use crate::topology::Topology;
use crate::values::Endpoint;
use draft::Draft;
use references::LoadedTemplate;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

fn refs_names(templates: &[TemplateRef]) -> HashSet<String> {
    templates.iter().map(|t| t.name.clone()).collect()
}

/// A user template file to load: its name (what `template = "..."` refers to) and file.
#[derive(Debug, Clone)]
pub struct TemplateRef {
    /// Template name.
    pub name: String,
    /// The file in the [`Sources`] set.
    pub file: FileId,
}

/// A valid inventory: the topology and any warnings.
#[derive(Debug, Clone)]
pub struct Validated {
    /// The topology.
    pub topology: Topology,
    /// Problems that do not make the inventory invalid.
    pub warnings: Vec<Diagnostic>,
}

/// Validates the inventory in `inventory` (and the user templates in `templates`).
///
/// # Errors
/// Every problem found (errors and warnings, in file order), when at least one is an
/// error.
pub fn validate(
    sources: &Sources,
    inventory: FileId,
    templates: &[TemplateRef],
) -> Result<Validated, Vec<Diagnostic>> {
    let mut v = Validator {
        file: inventory,
        diags: Vec::new(),
        broken_templates: refs_names(templates),
        text: sources.get(inventory).text.to_string(),
        json: sources.get(inventory).format == crate::source::Format::Json,
        project: None,
        kube_objects: Default::default(),
    };
    if let Some(d) = not_utf8(sources, inventory) {
        v.push(d);
        return Err(v.diags);
    }
    let text = &sources.get(inventory).text;
    let root = match node::parse(text, sources.get(inventory).format) {
        Ok(root) => root,
        Err(errors) => {
            for e in errors {
                let code = if e.message.contains("duplicate key") {
                    Code::DuplicateKey
                } else {
                    Code::Syntax
                };
                v.error_at(inventory, code, e.message, e.span);
            }
            return Err(v.diags);
        }
    };
    // A newer format is read no further: its other keys may mean what this build
    // cannot know.
    let Some(version) = v.version(&root) else {
        return Err(v.diags);
    };
    let templates = v.load_templates(sources, templates);
    v.broken_templates.retain(|n| !templates.contains_key(n));
    let result = v.run(&root, &templates).map(|mut t| {
        t.inventory_version = version;
        t
    });
    let mut diags = v.diags;
    diags.sort_by_key(|d| {
        d.location
            .map(|l| (l.file, l.span.start))
            .unwrap_or((FileId(u32::MAX), 0))
    });
    match result {
        Some(topology) if !diags.iter().any(|d| d.severity == Severity::Error) => Ok(Validated {
            topology,
            warnings: diags,
        }),
        _ => Err(diags),
    }
}

/// One validation run: the inventory's file and every diagnostic found so far. Each
/// phase is a set of methods on it, in the file named after the phase.
struct Validator {
    file: FileId,
    diags: Vec<Diagnostic>,
    /// Template files that exist but failed to load (their errors are reported).
    broken_templates: HashSet<String>,
    /// The inventory's text: diagnostics point inside its strings (a port in a URL).
    text: String,
    /// Whether the inventory is JSON (examples in help are written in its syntax).
    json: bool,
    /// The inventory's `project`, when it declares one.
    project: Option<String>,
    /// Each Kubernetes object a component owns, `(host, namespace, name)`: the
    /// component that claimed it first (two components never share a workload).
    kube_objects: std::collections::HashMap<(String, String, String), String>,
}

/// The `not-utf8` error for `file`, when its bytes were not UTF-8: at the first bad
/// byte, with its byte offset (the location's column counts characters before it, as
/// every column does). Such a file is not parsed.
fn not_utf8(sources: &Sources, file: FileId) -> Option<Diagnostic> {
    let f = sources.get(file);
    let bad = f.invalid_utf8()?;
    let at = f.line_column(bad.offset);
    let hex = bad
        .bytes
        .iter()
        .map(|b| format!("0x{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ");
    let what = if bad.truncated {
        format!("the file ends inside a character ({hex})")
    } else if bad.bytes.len() == 1 {
        format!("byte {hex} is not part of a valid character")
    } else {
        format!("bytes {hex} are not a valid character")
    };
    // The text holds U+FFFD where the bad bytes were: point at it.
    let span = Span::new(
        bad.offset,
        bad.offset + char::REPLACEMENT_CHARACTER.len_utf8(),
    );
    Some(
        Diagnostic::error(
            Code::NotUtf8,
            format!(
                "not valid UTF-8 at byte offset {} (line {}, column {}): {what}",
                bad.offset, at.line, at.column
            ),
            Location { file, span },
        )
        .with_help(
            "inventories and templates are UTF-8 text: save the file as UTF-8 \
             (the byte offset counts bytes from the start of the file, the column counts \
             characters from the start of the line)",
        ),
    )
}

/// Keys whose breakage makes "how does it start" unanswerable.
const START_KEYS: &[&str] = &[
    "command",
    "template",
    "params",
    "adapter",
    "tunnel",
    "launchd",
    "systemd",
    "container",
    "profiles",
    "owner",
];
/// A component's parsed endpoints and the key paths set aside when it was decoded.
type EndpointsOf<'a> = (&'a BTreeMap<String, Endpoint>, &'a [Vec<String>]);

fn any_broken(broken: &[Vec<String>], keys: &[&str]) -> bool {
    broken
        .iter()
        .any(|p| p.first().is_some_and(|k| keys.contains(&k.as_str())))
}

/// Whether a component's endpoint `name` may be missing or different because part of
/// the component was set aside (`broken`): its template, parameters, profile
/// selection or profiles, tunnel, its `endpoints` table, or that endpoint itself. A
/// broken endpoint hides only itself, so a reference to another, missing endpoint of
/// the same component is still reported.
fn endpoint_uncertain(broken: &[Vec<String>], name: &str) -> bool {
    broken.iter().any(|p| {
        let p: Vec<&str> = p.iter().map(String::as_str).collect();
        match p.as_slice() {
            ["template" | "params" | "profile" | "tunnel", ..] => true,
            ["endpoints"] | ["profiles"] | ["profiles", _] => true,
            ["endpoints", e, ..] => *e == name,
            ["profiles", _, "params", ..] | ["profiles", _, "endpoints"] => true,
            ["profiles", _, "endpoints", e, ..] => *e == name,
            _ => false,
        }
    })
}

/// Whether the `${...}` reference `r` of a component may fail only because part of the
/// component was set aside: an endpoint that is [`endpoint_uncertain`], or a connection
/// whose entry (or the whole `connections` table) failed to decode.
fn reference_uncertain(broken: &[Vec<String>], r: &str) -> bool {
    let parts: Vec<&str> = r.split('.').collect();
    match parts.as_slice() {
        ["endpoints", e, ..] => endpoint_uncertain(broken, e),
        ["connections", c, ..] => broken.iter().any(|p| {
            p.first().is_some_and(|k| k == "connections") && p.get(1).is_none_or(|k| k == c)
        }),
        _ => false,
    }
}

/// A string and where it was written.
#[derive(Debug, Clone)]
struct Located<T> {
    value: T,
    loc: Location,
}

const TOP_KEYS: &[&str] = &[
    "$schema",
    "version",
    "project",
    "hosts",
    "components",
    "stacks",
];

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn help_for(word: &str, candidates: impl IntoIterator<Item = impl AsRef<str>>) -> Option<String> {
    let owned: Vec<String> = candidates
        .into_iter()
        .map(|c| c.as_ref().to_string())
        .collect();
    did_you_mean(word, owned.iter().map(String::as_str)).map(|s| format!("did you mean `{s}`?"))
}

impl Validator {
    /// The inventory's format version (`version`, absent: 1), or `None` after an
    /// error when it is newer than [`INVENTORY_VERSION`] (nothing else is read then).
    /// One that is not a positive integer is an error, and read as 1.
    fn version(&mut self, root: &Node) -> Option<u32> {
        let Some(e) = root.entries().iter().find(|e| e.key == "version") else {
            return Some(1);
        };
        match e.value.value {
            Value::Integer(n) if n > i64::from(INVENTORY_VERSION) => {
                let d = Diagnostic::error(
                    Code::UnsupportedVersion,
                    format!(
                        "this inventory is format version {n}, newer than this flotilla reads (up to {INVENTORY_VERSION})"
                    ),
                    self.loc(e.value.span),
                )
                .with_help("upgrade flotilla (`flotilla --version` shows this one) on every machine that reads this inventory");
                self.push(d);
                None
            }
            Value::Integer(n) if n >= 1 => Some(n as u32),
            _ => {
                let d = Diagnostic::error(
                    Code::InvalidValue,
                    format!("`version` must be an integer from 1 to {INVENTORY_VERSION}"),
                    self.loc(e.value.span),
                )
                .with_help(format!("e.g. version = {INVENTORY_VERSION}"));
                self.push(d);
                Some(1)
            }
        }
    }

    fn loc(&self, span: Span) -> Location {
        Location {
            file: self.file,
            span,
        }
    }

    fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn error_at(&mut self, file: FileId, code: Code, msg: impl Into<String>, span: Span) {
        self.diags
            .push(Diagnostic::error(code, msg, Location { file, span }));
    }

    fn decode_error(&mut self, file: FileId, what: &str, e: DecodeError, fallback: Span) {
        let mut d = Diagnostic::error(
            e.code,
            format!("{what}: {}", e.message),
            Location {
                file,
                span: e.span.unwrap_or(fallback),
            },
        );
        d.help = e.help;
        self.push(d);
    }

    /// Decodes `node` as `T`, reporting every decoding error it can: after each error
    /// the offending key is set aside and decoding is tried again. Returns the value
    /// decoded from what remains (the errors already make validation fail), or `None`
    /// when a required part is missing or broken.
    fn decode_all<T: serde::de::DeserializeOwned>(
        &mut self,
        file: FileId,
        what: &dyn Fn() -> String,
        node: &Node,
    ) -> Option<(T, Vec<Vec<String>>)> {
        self.retry_decode(file, what, node, |n| from_node::<T>(n), |e, _| e)
    }

    /// Runs `decode` on `node`; after each error (reported, after `adjust`, which also
    /// sees the node being decoded), the offending key is set aside and decoding is
    /// tried again. A required key missing inside a nested table sets that table aside
    /// (silently when its key was set aside here already). Returns the value and the key
    /// paths set aside, or `None` when a required key of `node` itself is missing or
    /// `node` itself is broken.
    fn retry_decode<T>(
        &mut self,
        file: FileId,
        what: &dyn Fn() -> String,
        node: &Node,
        decode: impl Fn(&Node) -> Result<T, DecodeError>,
        adjust: impl Fn(DecodeError, &Node) -> DecodeError,
    ) -> Option<(T, Vec<Vec<String>>)> {
        let mut pruned: Option<Node> = None;
        let mut removed: Vec<Vec<String>> = Vec::new();
        for _ in 0..64 {
            let current = pruned.as_ref().unwrap_or(node);
            match decode(current) {
                Ok(v) => return Some((v, removed)),
                Err(err) => {
                    // A key we set aside ourselves is now missing: its error is
                    // already reported.
                    let ours = err
                        .missing
                        .as_ref()
                        .is_some_and(|k| removed.iter().any(|p| p.last() == Some(k)));
                    let span = err.span.unwrap_or(node.span);
                    if !ours {
                        self.decode_error(file, &what(), adjust(err, current), node.span);
                    }
                    if span == node.span || span == current.span {
                        return None;
                    }
                    let path = key_path_at(current, span);
                    let mut next = current.clone();
                    if !next.remove_span(span) {
                        return None;
                    }
                    removed.extend(path);
                    pruned = Some(next);
                }
            }
        }
        None
    }

    fn run(
        &mut self,
        root: &Node,
        templates: &HashMap<String, LoadedTemplate>,
    ) -> Option<Topology> {
        let mut hosts_node = None;
        let mut components_node = None;
        let mut stacks_node = None;
        for e in root.entries() {
            let slot = match e.key.as_ref() {
                "hosts" => &mut hosts_node,
                "components" => &mut components_node,
                "stacks" => &mut stacks_node,
                "project" => {
                    match &e.value.value {
                        Value::String(p) if crate::topology::valid_project_name(p) => {
                            self.project = Some(p.to_string());
                        }
                        _ => self.push(
                            Diagnostic::error(
                                Code::InvalidValue,
                                "`project` must be a name of lowercase letters, digits, `-` and `_` (at most 63, starting with a letter or digit)",
                                self.loc(e.value.span),
                            )
                            .with_help("e.g. project = \"local-ai\""),
                        ),
                    }
                    continue;
                }
                // Read by `version` before.
                "version" => continue,
                "$schema" => {
                    if !matches!(e.value.value, Value::String(_)) {
                        self.push(Diagnostic::error(
                            Code::InvalidValue,
                            "`$schema` must be a string",
                            self.loc(e.value.span),
                        ));
                    }
                    continue;
                }
                other => {
                    let mut d = Diagnostic::error(
                        Code::UnknownKey,
                        format!("unknown top-level key `{other}`"),
                        self.loc(e.key_span),
                    );
                    d.help = help_for(other, TOP_KEYS)
                        .or_else(|| Some("expected one of: hosts, components, stacks".into()));
                    self.push(d);
                    continue;
                }
            };
            if !matches!(e.value.value, Value::Table(_)) {
                self.push(Diagnostic::error(
                    Code::InvalidValue,
                    format!(
                        "`{}` must be a table, found {}",
                        e.key,
                        e.value.value.kind()
                    ),
                    self.loc(e.value.span),
                ));
                continue;
            }
            *slot = Some(&e.value);
        }

        // Names declared (even if their bodies are broken), so references to a broken
        // entry do not produce a second, misleading error.
        let mut declared_hosts: BTreeSet<&str> = BTreeSet::new();
        let mut declared_components: BTreeSet<&str> = BTreeSet::new();

        let hosts = self.hosts(hosts_node, &mut declared_hosts);
        let mut stacks = self.decode_stacks(stacks_node);
        let comp_entries = components_node.map(Node::entries).unwrap_or(&[]);
        let mut drafts = self.decode_components(
            comp_entries,
            &mut declared_components,
            &declared_hosts,
            &hosts,
            templates,
        );
        drafts.sort_by(|a, b| a.name.cmp(b.name));
        let index: HashMap<&str, usize> = drafts
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name, i))
            .collect();

        self.parse_endpoints(&mut drafts, &hosts);

        self.resolve_references(
            &mut drafts,
            &index,
            &declared_components,
            &declared_hosts,
            &hosts,
        );
        self.check_ports(&drafts, &hosts, templates);
        let endpoints: Vec<EndpointsOf> = drafts
            .iter()
            .map(|d| (&d.parsed_endpoints, d.broken.as_slice()))
            .collect();
        // The stacks' readiness probes, decoded once with the stacks, resolved below.
        let stack_probes: Vec<(&Entry, Vec<ProbeSpec>)> = stacks
            .iter_mut()
            .map(|(e, s)| (*e, std::mem::take(&mut s.readiness)))
            .collect();
        let mut stacks = self.check_stacks(stacks, &index, &declared_components, comp_entries);
        self.stack_readiness(
            &mut stacks,
            &stack_probes,
            &index,
            &declared_components,
            &endpoints,
        );
        // A cycle or a component that cannot be finished stops the topology, not the
        // checks: every component is still finished, so each reports its own problems.
        let order = self.check_cycles(&drafts);

        let mut components = Vec::with_capacity(drafts.len());
        let mut complete = true;
        let names: Vec<String> = drafts.iter().map(|d| d.name.to_string()).collect();
        for d in drafts {
            match self.finish(d, &names) {
                Some(c) => components.push(c),
                None => complete = false,
            }
        }
        let order = order?;
        if !complete || self.diags.iter().any(|d| d.severity == Severity::Error) {
            return None;
        }
        let mut topology = Topology::build(hosts, components, stacks, order);
        topology.project = self.project.take();
        Some(topology)
    }

    fn check_name(&mut self, kind: &str, e: &Entry) -> bool {
        if valid_name(&e.key) {
            return true;
        }
        self.push(
            Diagnostic::error(
                Code::InvalidValue,
                format!("{kind} name `{}` is not allowed", e.key),
                self.loc(e.key_span),
            )
            .with_help("names use letters, digits, `-` and `_` (a `.` would be ambiguous in `component.endpoint`)"),
        );
        false
    }
}

/// The key path (array indices as decimal strings) of the entry or element whose key
/// or value has `span`, anywhere in `node`.
fn key_path_at(node: &Node, span: Span) -> Option<Vec<String>> {
    for e in node.entries() {
        if e.key_span == span || e.value.span == span {
            return Some(vec![e.key.to_string()]);
        }
        if let Some(mut p) = key_path_at(&e.value, span) {
            p.insert(0, e.key.to_string());
            return Some(p);
        }
    }
    if let Value::Array(items) = &node.value {
        for (i, n) in items.iter().enumerate() {
            if n.span == span {
                return Some(vec![i.to_string()]);
            }
            if let Some(mut p) = key_path_at(n, span) {
                p.insert(0, i.to_string());
                return Some(p);
            }
        }
    }
    None
}

/// Array index `i` as a path step, without allocating for the usual small indices.
fn index_str(i: usize) -> Cow<'static, str> {
    const SMALL: [&str; 16] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
    ];
    match SMALL.get(i) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(i.to_string()),
    }
}

impl Location {
    fn or(self, other: Location) -> Location {
        if self.span == Span::default() {
            other
        } else {
            self
        }
    }
}
