//! Flotilla's model: the inventory format, its validation into a [`Topology`], the
//! status types, diagnostics, and canonical digests.
//!
//! This crate does no IO and reads no clock: files arrive as text in a [`Sources`]
//! set, observations arrive as values.
//!
//! Code map:
//! - [`source`]: source files, spans, line/column mapping.
//! - [`node`]: the spanned document tree (TOML and JSON) and serde decoding from it.
//! - [`diag`]: diagnostics with stable codes and located rendering.
//! - [`values`]: durations, ports, signals, env values, endpoints, status ranges.
//! - [`inventory`]: the inventory format's types (and its JSON Schema).
//! - [`kube_names`]: Kubernetes' syntax of names, label keys and values, quantities.
//! - [`inventory_text`]: inventory entries written as TOML for people (what `import
//!   compose` and `discover` print), with `#` comments.
//! - [`image_ref`]: container image references (`name[:tag][@sha256:…]`).
//! - [`template`]: built-in and user templates.
//! - [`interp`]: `${...}` substitution.
//! - [`validate`](mod@validate): sources → [`Topology`] or diagnostics; one file per
//!   phase under `validate/`: `hosts`, `draft` (entries into drafts), `references`
//!   (templates, profiles, connections, tunnels, `${...}`), `probes`, `graph` (ports,
//!   stacks, names, cycles), with the entry point and shared plumbing in `mod.rs`.
//! - [`topology`]: the validated, indexed dependency graph, its resolved parts
//!   (hosts and their roles, components, probes, restart policies) and per-host
//!   [`topology::Snapshot`]s.
//! - [`revision`]: a topology as an immutable revision (canonical JSON named by its
//!   digest) and back ([`Topology::from_revision`], checked), the role filter
//!   ([`Topology::host_view`]: control hosts get the whole revision, component hosts
//!   their snapshot only) and [`revision_diff`].
//! - `toposort` (crate-private): Kahn's algorithm, the one topological sort, used by
//!   validation's cycle check and [`Topology::from_snapshot`].
//! - [`status`]: lifecycle, health, observability and the [`Observed`] snapshot.
//! - [`digest`]: canonical JSON and SHA-256.
//! - [`session`]: a coding-agent session's permission [`session::Mode`].

pub mod diag;
pub mod digest;
pub mod image_ref;
pub mod interp;
pub mod inventory;
pub mod inventory_text;
pub mod kube_names;
pub mod migrate;
pub mod node;
pub mod revision;
pub mod session;
pub mod source;
pub mod status;
pub mod template;
pub mod topology;
mod toposort;
pub mod validate;
pub mod values;

pub use diag::{Code, Diagnostic, LocatedDiagnostic, Severity};
pub use revision::{revision_diff, ComponentChange, HostView, RevisionDoc, RevisionError};
pub use source::{FileId, Format, SourceFile, Sources, Span};
pub use status::{Health, Lifecycle, Observability, Observed, ObservedComponent, StartedBy};
pub use topology::{Component, ComponentId, Target, Topology};
pub use validate::{validate, TemplateRef, Validated};
