//! `flotilla agent`: keeps its host converged to a desired state, with the same
//! planner and executor as the CLI, supervises `process` components, and reports
//! measured status and drift. Outbound only: it never listens on a port.
//!
//! Code map:
//! - [`source`]: the [`Source`] trait (the host's next desired state: a snapshot and
//!   its revision, or "unchanged"), and how a snapshot becomes the topology the agent
//!   plans against (its own host made `local`, as `flotilla host serve` runs it).
//! - [`local`]: [`LocalInventory`], the source of `flotilla agent run --inventory
//!   FILE` (the CLI's loader handed in as an [`InventoryLoader`]; polled by mtime,
//!   size and digest; an invalid edit keeps the last good state).
//! - [`authority`]: the [`authority::AuthorityClient`] trait (what
//!   `flotilla_api::client::Client` provides), [`authority::AuthoritySource`]
//!   (long-poll with jitter, backoff while unreachable) and
//!   [`authority::AuthorityReporter`].
//! - [`agent`]: [`Agent`], the loop: converge each new desired state (stop what it
//!   removed, start what should run, restart what changed: one journaled operation
//!   each, under the lifecycle lock), supervise, find drift, report.
//! - [`supervise`]: restart decisions by a component's `restart` policy (backoff,
//!   crash-loop give-up); pure.
//! - [`drift`]: local changes to what the agent manages (stopped or started by hand,
//!   config or identity files edited), with evidence; never reverted.
//! - [`report`]: [`AgentReport`], [`Reporter`], [`LocalReporter`] (`status.json`).
//! - [`state`]: the agent's files in `<state>/agent/` (`snapshot.json`: the last
//!   applied desired state; `status.json`; `agent.json`), written atomically.
//! - [`unit`]: `flotilla agent unit`: the systemd user unit / launchd plist that
//!   starts the agent at boot.
//! - [`unskip`]: operators' unskip requests (from the release long poll): release
//!   versions removed from this host's skip lists, the lists and outcomes reported.
//! - [`update`]: self-update, the agent's side: what every start does (`running.json`,
//!   the measured identity reported, `reported.json`, an orphaned update resumed), the
//!   updater (assignment → signature → download → digest and size → stage → watchdog),
//!   the update record (`<root>/update.json`) and the [`update::ReleaseSource`] trait.
//! - [`component_release`]: component releases (a release other than the agent's,
//!   for the components that declare `release = { name, root }`): the same checks,
//!   download and staging as self-update, then flip, restart each component through
//!   its adapter as a journaled operation, prove its measured identity and readiness,
//!   soak, roll back on failure; resumed at start after a `kill -9`.
//! - [`launch`]: the known-good launcher: every `agent run` reads the update record
//!   first and runs the new version on trial (a counted `exec`) or itself, so that a
//!   crash at any step leaves a start that can finish or undo the update.
//! - [`record`]: the update record (`update.json`, its steps), `trial.json`,
//!   `update.lock`, `running.json`/`reported.json`, and the helpers every update
//!   module shares (clock, JSON files, error chains).
//! - [`proof`]: how an update is proven and ended, shared by the watchdog and
//!   component releases (poll period, stable looks, [`proof::AwakeClock`], the
//!   rollback's bookkeeping).
//! - [`watch`]: the self-update watchdog (`flotilla agent update-watch`): arm the trial,
//!   restart through the supervisor, prove by measured identity, soak, flip `current`,
//!   automatic rollback; deadlines on [`watch::AwakeClock`].
//! - [`supervisor`]: what supervises the agent (systemd, launchd, none), detected or
//!   named, and its restart verbs.

#![warn(missing_docs)]

pub mod agent;
pub mod authority;
pub mod component_release;
pub mod drift;
pub mod launch;
pub mod local;
pub mod proof;
pub mod record;
pub mod report;
pub mod source;
pub mod state;
pub mod supervise;
pub mod supervisor;
pub mod unit;
pub mod unskip;
pub mod update;
pub mod watch;

pub use agent::{Agent, AgentConfig, AgentError};
pub use local::{InventoryLoader, LoadError, LoadedInventory, LocalInventory};
pub use report::{AgentReport, Drift, DriftKind, LocalReporter, Reporter};
pub use source::{Desired, Next, Source, SourceError};

/// Where the agent's log lines go (one line per call, no trailing newline).
pub type Log = std::sync::Arc<dyn Fn(&str) + Send + Sync>;
