//! `flotilla adopt COMPONENT`: moves a component whose service runs today under
//! another owner (a process started by hand, a systemd unit, a container, a launchd
//! job) to its declared owner, as a plan shown first (DESIGN.md invariant 8: nothing
//! is adopted silently).
//!
//! 1. Baseline ([`run::Adopt::survey`], read-only): who holds the component's
//!    ports ([`prior::find`]; for a container component, first the container its
//!    engine publishes them for: [`container::find`]), what differs from the declaration
//!    ([`compare::compare`]: port, binary, arguments, user; any difference refuses
//!    the adopt), and the checks ([`checks`]): who listens on each declared port,
//!    the component's readiness probe, and its dependents' readiness.
//! 2. Stop the prior owner its own way ([`prior::stop`]: a process by an
//!    identity-checked signal, a unit by `systemctl disable --now`, a container by
//!    its engine's stop, kept, a launchd job by `launchctl bootout`, its plist
//!    kept), proven stopped
//!    (its ports free) before anything else starts: never two owners at once.
//! 3. Start through Flotilla (the executor, journaled like `flotilla start`).
//! 4. Acceptance: the baseline's checks again, on Flotilla's instance.
//! 5. Keep, or roll back ([`run::Adopt::rollback`]): stop Flotilla's instance,
//!    restore the prior owner exactly as it was ([`prior::restore`]) and prove it
//!    back with the baseline's checks. A failed step or acceptance rolls back by
//!    itself; `flotilla adopt X --rollback` goes back later.
//!
//! Each step is written to the adopt record ([`record`]) before it runs, with the
//! prior owner's restore recipe; a CLI killed at any step leaves a record the next
//! `adopt` and `status` name, and `adopt --resume` / `--rollback` finish or undo it.
//! When neither owner can be made to run, the record stays unfinished and the
//! result ([`run::Ended::Stuck`]) says so, with what to run by hand.
//!
//! Each look at the prior owner, its checks, its stop and its restore run on the
//! component's host ([`host`]): here for a local component, through `flotilla host
//! serve` there for one on a remote host. The record stays here, with the
//! controller.

pub mod checks;
pub mod compare;
pub mod container;
pub mod host;
pub mod launchd;
pub mod prior;
pub mod record;
pub mod run;
