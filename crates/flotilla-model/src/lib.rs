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
//! - [`template`]: built-in and user templates.
//! - [`interp`]: `${...}` substitution.
//! - [`validate`]: sources → [`Topology`] or diagnostics.
//! - [`topology`]: the validated, indexed dependency graph.
//! - [`status`]: lifecycle, health, observability and the [`Observed`] snapshot.
//! - [`digest`]: canonical JSON and SHA-256.

pub mod diag;
pub mod digest;
pub mod interp;
pub mod inventory;
pub mod node;
pub mod source;
pub mod status;
pub mod template;
pub mod topology;
pub mod validate;
pub mod values;

pub use diag::{Code, Diagnostic, LocatedDiagnostic, Severity};
pub use source::{FileId, Format, SourceFile, Sources, Span};
pub use status::{Health, Lifecycle, Observability, Observed, ObservedComponent, StartedBy};
pub use topology::{Component, ComponentId, Target, Topology};
pub use validate::{validate, TemplateRef, Validated};
