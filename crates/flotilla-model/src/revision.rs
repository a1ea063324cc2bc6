//! Revisions: a topology as an immutable, content-named document, the role-filtered
//! view of it each host receives, and what changed between two of them.
//!
//! A revision's content is the canonical JSON (RFC 8785, see [`crate::digest`]) of a
//! [`Topology`], [`Topology::revision_json`]; its name is [`Topology::digest`], the
//! SHA-256 of exactly those bytes. A topology only ever holds secret *names*, so a
//! revision is secret-free. [`Topology::from_revision`] rebuilds the topology from
//! the content and checks the invariants validation guarantees (names in order,
//! every reference resolvable, no cycle), so a corrupted or hand-made document is
//! refused with a [`RevisionError`] instead of panicking later.
//!
//! [`Topology::host_view`] is the role filter: a `component` host
//! ([`HostRole::Component`]) gets only its [`Snapshot`]; a `control` host also gets
//! the whole revision. [`revision_diff`] lists, per component, host and stack, what
//! differs between two revisions.

use crate::digest::canonical_json;
use crate::inventory::HostRole;
use crate::topology::{config_changes, Component, ComponentId, Host, Snapshot, Stack, Topology};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// A revision's content as a value: the serialised fields of a [`Topology`] (no
/// indices), in canonical order. `canonical_json(&t.revision_doc())` is
/// [`Topology::revision_json`], byte for byte.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevisionDoc {
    /// Components in strict name order.
    pub components: Vec<Component>,
    /// Hosts by name.
    pub hosts: BTreeMap<String, Host>,
    /// The inventory format version it was validated from (absent: 1).
    #[serde(
        default = "crate::inventory::first_version",
        skip_serializing_if = "crate::inventory::is_first_version"
    )]
    pub inventory_version: u32,
    /// The project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Stacks by name.
    #[serde(default)]
    pub stacks: BTreeMap<String, Stack>,
}

/// Why a revision's content is not a valid topology.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// The revision was made from an inventory of a format newer than this build
    /// reads.
    #[error("the revision is of inventory format version {0}; this flotilla reads up to version {max}: upgrade it", max = crate::inventory::INVENTORY_VERSION)]
    NewerVersion(u32),
    /// The content is not JSON of a topology's shape.
    #[error("the revision is not a topology document: {0}")]
    Json(#[from] serde_json::Error),
    /// Components are not in strict name order (or a name repeats).
    #[error("revision components are not in strict name order at `{0}`")]
    Order(String),
    /// A host or stack is filed under another key than its own name.
    #[error("revision {kind} `{key}` carries the name `{name}`")]
    NameMismatch {
        /// `host` or `stack`.
        kind: &'static str,
        /// The map key.
        key: String,
        /// The entry's `name`.
        name: String,
    },
    /// Something refers to a host or component the revision does not have.
    #[error("revision {owner} refers to {what} `{missing}`, which it does not have")]
    Missing {
        /// Who refers: `component \`x\`` or `stack \`y\``.
        owner: String,
        /// `host` or `component`.
        what: &'static str,
        /// The name referred to.
        missing: String,
    },
    /// A stack has the name of a component (validation forbids it: targets are
    /// looked up by name).
    #[error("revision stack `{0}` has the name of a component")]
    Ambiguous(String),
    /// The project name is not one [`crate::topology::valid_project_name`] accepts.
    #[error("revision project `{0}` is not a valid project name")]
    Project(String),
    /// The dependencies form a cycle.
    #[error("revision dependencies form a cycle through `{0}`")]
    Cycle(String),
}

impl Topology {
    /// The revision's content: this topology's canonical JSON, whose SHA-256 is
    /// [`Topology::digest`].
    pub fn revision_json(&self) -> String {
        canonical_json(self)
    }

    /// This topology as a [`RevisionDoc`] value (same JSON as [`Topology::revision_json`]).
    pub fn revision_doc(&self) -> RevisionDoc {
        RevisionDoc {
            components: self.components.clone(),
            hosts: self.hosts.clone(),
            project: self.project.clone(),
            inventory_version: self.inventory_version,
            stacks: self.stacks.clone(),
        }
    }

    /// Rebuilds a topology from a revision's content ([`Topology::revision_json`]).
    /// For canonical input, `from_revision(&t.revision_json())?.digest() == t.digest()`.
    ///
    /// # Errors
    /// [`RevisionError`]: not JSON of a topology, or an invariant broken (see
    /// [`Topology::from_revision_doc`]).
    pub fn from_revision(json: &str) -> Result<Topology, RevisionError> {
        Topology::from_revision_doc(serde_json::from_str(json)?)
    }

    /// Rebuilds a topology from a [`RevisionDoc`], checking what validation
    /// guarantees: components in strict name order; hosts and stacks filed under
    /// their own names; every component's host, dependencies, connections' and
    /// tunnel's components and `via` host present; stack members present and no
    /// stack named like a component; a valid project name; no dependency cycle.
    ///
    /// # Errors
    /// [`RevisionError`] naming the first broken invariant.
    pub fn from_revision_doc(doc: RevisionDoc) -> Result<Topology, RevisionError> {
        if doc.inventory_version > crate::inventory::INVENTORY_VERSION || doc.inventory_version == 0
        {
            return Err(RevisionError::NewerVersion(doc.inventory_version));
        }
        for w in doc.components.windows(2) {
            if w[0].name >= w[1].name {
                return Err(RevisionError::Order(w[1].name.clone()));
            }
        }
        for (key, h) in &doc.hosts {
            if *key != h.name {
                return Err(RevisionError::NameMismatch {
                    kind: "host",
                    key: key.clone(),
                    name: h.name.clone(),
                });
            }
        }
        if let Some(p) = &doc.project {
            if !crate::topology::valid_project_name(p) {
                return Err(RevisionError::Project(p.clone()));
            }
        }
        let index: HashMap<&str, usize> = doc
            .components
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect();
        let missing = |owner: String, what: &'static str, name: &str| RevisionError::Missing {
            owner,
            what,
            missing: name.to_string(),
        };
        let mut edges = Vec::new();
        for (i, c) in doc.components.iter().enumerate() {
            let owner = || format!("component `{}`", c.name);
            if !doc.hosts.contains_key(&c.host) {
                return Err(missing(owner(), "host", &c.host));
            }
            for d in &c.depends_on {
                let &j = index
                    .get(d.as_str())
                    .ok_or_else(|| missing(owner(), "component", d))?;
                edges.push((j, i));
            }
            for conn in c.connections.values() {
                if !index.contains_key(conn.component.as_str()) {
                    return Err(missing(owner(), "component", &conn.component));
                }
            }
            if let Some(t) = &c.tunnel {
                if !doc.hosts.contains_key(&t.via) {
                    return Err(missing(owner(), "host", &t.via));
                }
                if !index.contains_key(t.target_component.as_str()) {
                    return Err(missing(owner(), "component", &t.target_component));
                }
            }
        }
        for (key, s) in &doc.stacks {
            if *key != s.name {
                return Err(RevisionError::NameMismatch {
                    kind: "stack",
                    key: key.clone(),
                    name: s.name.clone(),
                });
            }
            if index.contains_key(key.as_str()) {
                return Err(RevisionError::Ambiguous(key.clone()));
            }
            for m in &s.components {
                if !index.contains_key(m.as_str()) {
                    return Err(missing(format!("stack `{key}`"), "component", m));
                }
            }
        }
        let order = match crate::toposort::topo_order(doc.components.len(), edges) {
            Ok(order) => order.into_iter().map(|i| ComponentId(i as u32)).collect(),
            Err(left) => {
                let stuck = left
                    .first()
                    .map(|&i| doc.components[i].name.clone())
                    .unwrap_or_default();
                return Err(RevisionError::Cycle(stuck));
            }
        };
        let mut t = Topology::build(doc.hosts, doc.components, doc.stacks, order);
        t.project = doc.project;
        t.inventory_version = doc.inventory_version;
        Ok(t)
    }

    /// What `host` receives of this revision (see [`HostView`]). An unknown host gets
    /// an empty snapshot and the `component` role.
    pub fn host_view(&self, host: &str) -> HostView {
        let role = self.hosts.get(host).map(|h| h.role).unwrap_or_default();
        HostView {
            role,
            snapshot: self.snapshot(host),
            topology: (role == HostRole::Control).then(|| self.revision_doc()),
        }
    }
}

/// What one host receives of a revision: the role filter. Every host gets its
/// [`Snapshot`] (its own components, with what they connect to already resolved to
/// addresses; its own host entry and the hosts its tunnels go through); a `control`
/// host also gets the whole revision, to plan from. Never another host's commands,
/// environment, working directory or probes for a `component` host; never a secret
/// value for anyone (a revision holds secret names only). Fields in canonical order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostView {
    /// The host's role, which decided what is in here.
    pub role: HostRole,
    /// The host's own snapshot.
    pub snapshot: Snapshot,
    /// The whole revision, for `control` hosts only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<RevisionDoc>,
}

/// What a [`ComponentChange`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Subject {
    /// The revision's project.
    Project,
    /// A host.
    Host,
    /// A component.
    Component,
    /// A stack.
    Stack,
}

impl Subject {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Subject::Project => "project",
            Subject::Host => "host",
            Subject::Component => "component",
            Subject::Stack => "stack",
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one subject differs between two revisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Only in the later revision.
    Added,
    /// Only in the earlier revision.
    Removed,
    /// In both, different.
    Changed,
}

impl Change {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Changed => "changed",
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of [`revision_diff`]: a project, host, component or stack that was
/// added, removed or changed. Fields in canonical order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentChange {
    /// How.
    pub change: Change,
    /// For [`Change::Changed`]: what differs, key by key, in key order
    /// (`command[2] "18752" → "18755"`, `env.MODEL (none) → "small"`: the format of
    /// [`config_changes`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// What kind of thing changed.
    pub kind: Subject,
    /// Its name (for the project: the later revision's project, else the earlier's).
    pub name: String,
    /// Whether a component's runtime config changed ([`Component::config_digest`]),
    /// so a running instance must be restarted to apply it; always `false` for
    /// additions, removals, hosts, stacks and the project (what a host change does to
    /// its components shows as their own changes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restarts: bool,
}

impl fmt::Display for ComponentChange {
    /// `component `llm`: changed (restarts): command[2] "1" → "2"; …`,
    /// `host `studio`: added`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}`: {}", self.kind, self.name, self.change)?;
        if self.restarts {
            f.write_str(" (restarts)")?;
        }
        if !self.details.is_empty() {
            write!(f, ": {}", self.details.join("; "))?;
        }
        Ok(())
    }
}

/// What differs from `before` to `after`: the project, then hosts, components and
/// stacks, each in name order; an entry per thing added, removed or changed (nothing
/// for what is equal). A component's changes cover everything about it (its runtime
/// config, probes, labels, description, dependencies), with `restarts` saying whether
/// its runtime config changed. Pure.
pub fn revision_diff(before: &Topology, after: &Topology) -> Vec<ComponentChange> {
    let mut out = Vec::new();
    if before.project != after.project {
        let show = |p: &Option<String>| match p {
            Some(p) => format!("\"{p}\""),
            None => "(none)".into(),
        };
        out.push(ComponentChange {
            change: Change::Changed,
            details: vec![format!(
                "project {} → {}",
                show(&before.project),
                show(&after.project)
            )],
            kind: Subject::Project,
            name: after
                .project
                .clone()
                .or_else(|| before.project.clone())
                .unwrap_or_default(),
            restarts: false,
        });
    }
    diff_maps(
        &mut out,
        Subject::Host,
        &before.hosts,
        &after.hosts,
        |_, _| false,
    );
    let by_name = |t: &Topology| -> BTreeMap<String, Component> {
        t.components
            .iter()
            .map(|c| (c.name.clone(), c.clone()))
            .collect()
    };
    diff_maps(
        &mut out,
        Subject::Component,
        &by_name(before),
        &by_name(after),
        |b: &Component, a: &Component| b.config_digest() != a.config_digest(),
    );
    diff_maps(
        &mut out,
        Subject::Stack,
        &before.stacks,
        &after.stacks,
        |_, _| false,
    );
    out
}

/// Appends the differences between two maps of one subject, in key order.
fn diff_maps<T: Serialize + PartialEq>(
    out: &mut Vec<ComponentChange>,
    subject: Subject,
    before: &BTreeMap<String, T>,
    after: &BTreeMap<String, T>,
    restarts: impl Fn(&T, &T) -> bool,
) {
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for name in names {
        let (change, details, restarts) = match (before.get(name), after.get(name)) {
            (None, Some(_)) => (Change::Added, Vec::new(), false),
            (Some(_), None) => (Change::Removed, Vec::new(), false),
            (Some(b), Some(a)) if b != a => {
                let mut details = config_changes(&canonical_json(b), &canonical_json(a));
                if details.is_empty() {
                    // Equal JSON, unequal values (cannot happen for model types).
                    details.push("changed".into());
                }
                (Change::Changed, details, restarts(b, a))
            }
            _ => continue,
        };
        out.push(ComponentChange {
            change,
            details,
            kind: subject,
            name: name.clone(),
            restarts,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{validate, Format, SourceFile, Sources};

    fn topology(toml: &str) -> Topology {
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, toml));
        match validate(&sources, id, &[]) {
            Ok(v) => v.topology,
            Err(d) => panic!("invalid: {d:?}"),
        }
    }

    #[test]
    fn version_1_is_left_out_of_a_revision_and_a_newer_one_is_refused() {
        let t = topology("version = 1\n[components.a]\ncommand = [\"x\"]\n");
        assert_eq!(t.inventory_version, 1);
        let json = t.revision_json();
        assert!(!json.contains("inventory_version"), "{json}");
        assert_eq!(
            t.digest(),
            topology("[components.a]\ncommand = [\"x\"]\n").digest(),
            "declaring version 1 changes no digest"
        );
        let mut doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        doc["inventory_version"] = 2.into();
        let e = Topology::from_revision(&doc.to_string()).unwrap_err();
        assert!(matches!(e, RevisionError::NewerVersion(2)), "{e}");
        assert!(e.to_string().contains("upgrade"), "{e}");
    }

    const BASE: &str = r#"
        project = "demo"
        [hosts.studio]
        transport = "agent"
        role = "control"
        [components.db]
        host = "studio"
        command = ["db", "--port", "5432"]
        endpoints = { tcp = "${host.address}:5432" }
        [components.api]
        command = ["api"]
        connections = { db = "db.tcp" }
        env = { DB = "${connections.db}" }
        restart = { policy = "always", backoff = "2s" }
        [stacks.all]
        components = ["api"]
    "#;

    #[test]
    fn revision_round_trips_with_its_digest() {
        let t = topology(BASE);
        let json = t.revision_json();
        assert_eq!(json, canonical_json(&t.revision_doc()));
        assert_eq!(crate::digest::sha256_hex(json.as_bytes()), t.digest());
        let back = Topology::from_revision(&json).unwrap();
        assert_eq!(back.digest(), t.digest());
        assert_eq!(back.revision_json(), json);
        assert_eq!(back.project.as_deref(), Some("demo"));
        assert_eq!(back.order(), t.order());
        assert_eq!(
            back.upstream(back.id("api").unwrap()),
            [back.id("db").unwrap()]
        );
        assert_eq!(back.stacks, t.stacks);
    }

    /// With a project, roles, agent hosts and restart policies, a revision is still
    /// canonical JSON (checked against an independent RFC 8785 implementation), so its
    /// name is the SHA-256 of its canonical form.
    #[test]
    fn revisions_are_canonical_json() {
        let t = topology(BASE);
        let json = t.revision_json();
        assert_eq!(json, serde_jcs::to_string(&t).unwrap());
        assert!(json.contains("\"project\":\"demo\""));
        assert!(json.contains("\"role\":\"control\""));
        assert!(json.contains("\"restart\":{"));
        let view = t.host_view("studio");
        assert_eq!(canonical_json(&view), serde_jcs::to_string(&view).unwrap());
    }

    #[test]
    fn broken_revisions_are_refused_with_typed_errors() {
        let t = topology(BASE);
        let doc = t.revision_doc();
        let refuse = |f: &dyn Fn(&mut RevisionDoc)| {
            let mut d = doc.clone();
            f(&mut d);
            Topology::from_revision(&canonical_json(&d)).unwrap_err()
        };
        assert!(matches!(
            Topology::from_revision("{\"components\": 3}"),
            Err(RevisionError::Json(_))
        ));
        assert!(matches!(
            Topology::from_revision("{\"components\":[],\"hosts\":{},\"extra\":1}"),
            Err(RevisionError::Json(_))
        ));
        assert!(matches!(
            refuse(&|d| d.components.reverse()),
            RevisionError::Order(n) if n == "api"
        ));
        assert!(matches!(
            refuse(&|d| { d.hosts.remove("studio"); }),
            RevisionError::Missing { what: "host", missing, .. } if missing == "studio"
        ));
        assert!(matches!(
            refuse(&|d| d.components[0].depends_on.push("ghost".into())),
            RevisionError::Missing { what: "component", missing, .. } if missing == "ghost"
        ));
        assert!(matches!(
            refuse(&|d| d.stacks.get_mut("all").unwrap().components.push("ghost".into())),
            RevisionError::Missing { owner, .. } if owner == "stack `all`"
        ));
        assert!(matches!(
            refuse(&|d| d.components[1].depends_on.push("api".into())),
            RevisionError::Cycle(_)
        ));
        assert!(matches!(
            refuse(&|d| d.stacks.get_mut("all").unwrap().name = "other".into()),
            RevisionError::NameMismatch { kind: "stack", .. }
        ));
        assert!(matches!(
            refuse(&|d| {
                let mut s = d.stacks.remove("all").unwrap();
                s.name = "db".into();
                d.stacks.insert("db".into(), s);
            }),
            RevisionError::Ambiguous(n) if n == "db"
        ));
        assert!(matches!(
            refuse(&|d| d.project = Some("Bad Name".into())),
            RevisionError::Project(_)
        ));
    }

    #[test]
    fn control_hosts_get_the_revision_component_hosts_their_snapshot() {
        let t = topology(BASE);
        let studio = t.host_view("studio");
        assert_eq!(studio.role, HostRole::Control);
        let doc = studio.topology.clone().unwrap();
        assert_eq!(
            Topology::from_revision_doc(doc).unwrap().digest(),
            t.digest()
        );
        let local = t.host_view("local");
        assert_eq!(local.role, HostRole::Component);
        assert!(local.topology.is_none());
        assert_eq!(local.snapshot, t.snapshot("local"));
        let json = canonical_json(&local);
        assert!(!json.contains("5432\"]"), "db's command leaked: {json}");
        let back: HostView = serde_json::from_str(&json).unwrap();
        assert_eq!(back, local);
        assert_eq!(t.host_view("nowhere").snapshot.components.len(), 0);
    }

    #[test]
    fn diff_lists_added_removed_and_changed_per_subject() {
        let before = topology(BASE);
        let after = topology(
            &BASE
                .replace("\"5432\"]", "\"5433\"]")
                .replace("project = \"demo\"", "project = \"demo2\"")
                .replace("role = \"control\"", "")
                .replace(
                    "[stacks.all]",
                    "[components.web]\ncommand = [\"web\"]\nlabels = { tier = \"front\" }\n[stacks.all]",
                )
                .replace("components = [\"api\"]", "components = [\"api\", \"web\"]"),
        );
        let diff = revision_diff(&before, &after);
        let lines: Vec<String> = diff.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "project `demo2`: changed: project \"demo\" → \"demo2\"",
                "host `studio`: changed: role \"control\" → (none)",
                "component `db`: changed (restarts): command[2] \"5432\" → \"5433\"",
                "component `web`: added",
                "stack `all`: changed: components[1] (none) → \"web\"",
            ]
        );
        assert!(revision_diff(&before, &before).is_empty());
        let back = revision_diff(&after, &before);
        assert!(back
            .iter()
            .any(|c| c.name == "web" && c.change == Change::Removed && c.details.is_empty()));
        // Probes and labels are changes too, without a restart.
        let relabelled = topology(&BASE.replace(
            "command = [\"api\"]",
            "command = [\"api\"]\nlabels = { a = \"b\" }\nreadiness = { process = {} }",
        ));
        let d = revision_diff(&before, &relabelled);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].change, Change::Changed);
        let changes = &d[0].details;
        assert!(!d[0].restarts);
        assert!(
            changes.iter().any(|l| l.starts_with("labels.a")),
            "{changes:?}"
        );
        assert!(
            changes.iter().any(|l| l.starts_with("readiness.check")),
            "{changes:?}"
        );
        let json = serde_json::to_value(&d[0]).unwrap();
        assert_eq!(json["change"], "changed");
        assert_eq!(json["kind"], "component");
    }
}
