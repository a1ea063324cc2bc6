//! Agent sessions on the authority: sessions, their runtimes, the gate's HTTP
//! front door, durable questions, Alertmanager's webhook, the executor and capped
//! outputs (DESIGN.md: session / gate / question).
//!
//! - A session is a row; **the first message boots its runtime** (the agent's
//!   process, `claude -p`, in a bubblewrap sandbox, see
//!   [`flotilla_sessions::runtime`]). There is no queue, no lease and no
//!   heartbeat: whether a runtime runs is **reconciled** against the process
//!   itself (pid and start time) on every read and every
//!   [`SessionsConfig::reconcile_every`]; the child's exit is also seen at once by
//!   the task that reaps it. One lock per session makes concurrent messages boot
//!   at most one runtime; a message that arrives while one runs waits in the
//!   session's `pending` list and starts the next turn when this one ends.
//! - Session states are derived from facts ([`derive_state`]): a runtime alive,
//!   an open question, the last turn's end. Nothing writes a state.
//! - Every tool call of the agent reaches [`gate_hook`] (through `flotilla gate
//!   hook`, the command hook, or directly as Claude Code's HTTP hook). `Ask`
//!   becomes a question and the turn parks (`defer`); the answer boots a runtime
//!   that resumes the conversation, and applies to that exact input, once.
//! - The mode is a launch profile: a switch is refused and recorded; the mode
//!   every hook payload reports is compared with the launch mode.
//! - Deleting a session (its files, mirror refs and rows, measured) and
//!   `[retention]` live in [`cleanup`].
//!
//! Files: [`state`] (the sessions' state), [`docs`] (stored documents, derived
//! state), [`records`] (reading and writing a
//! session's rows), [`lifecycle`] (create, deliver, boot, reap, reconcile),
//! [`handlers`] (the sessions' and questions' routes), [`questions`], [`gate`],
//! [`push`](mod@push), [`exec`](mod@exec), [`tree`](mod@tree) (a runtime's tree as a
//! git bundle), [`alerts`], [`cleanup`].

pub mod alerts;
pub mod cleanup;
pub mod docs;
pub mod exec;
pub mod gate;
pub mod handlers;
pub mod lifecycle;
pub mod push;
pub mod questions;
pub mod records;
pub mod state;
pub mod tree;

pub use crate::sessions_config::*;
pub use alerts::*;
pub use cleanup::*;
pub use docs::*;
pub use exec::*;
pub use flotilla_api::sessions::*;
pub use gate::*;
pub use handlers::*;
pub use lifecycle::spawn_reconciler;
pub use push::*;
pub use state::{Sessions, SessionsSetup};
pub use tree::session_tree;
