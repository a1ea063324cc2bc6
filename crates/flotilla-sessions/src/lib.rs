//! Flotilla's coding-agent sessions (DESIGN.md: session / gate / question).
//!
//! A **session** is a unit of agent work with at most one **runtime** (the agent's
//! process, in a bubblewrap sandbox locally). Every tool call the agent makes passes
//! the **gate**: [`policy::decide`] maps a launch [`Mode`], the session's permission
//! rules (Claude Code's own rule syntax) and the **always-ask** list to a
//! [`Decision`]. `Ask` becomes a durable **question** a human answers, minutes or
//! days later; the answer applies to that exact tool input only.
//!
//! Code map:
//! - [`policy`], [`rules`], [`shell`]: the gate's pure policy (no IO, no clock).
//! - [`hook`]: Claude Code's hook protocol (`PreToolUse`, `PermissionRequest`): the
//!   JSON a hook reads on stdin and the JSON it answers.
//! - [`clone_cache`]: one bare mirror per repository, session trees borrowing its
//!   objects (`git` as an external program).
//! - [`output`]: output capped at the source (head, tail, a marker, the whole kept).
//! - [`alerts`]: Alertmanager's webhook (version 4), the matcher, the dedup key.
//! - [`executor`]: the executor's read allowlist over argv lists.
//! - [`runtime`]: the `Runtime` trait and the local runtime's bubblewrap sandbox.
//! - [`config`]: `sessions.toml`, read and checked at the authority's start.
//! - [`users`]: the users the authority's pieces run as (`[privileges]`).
//! - [`privsep`]: with sessions, the authority split in three: the root launcher
//!   (starts and kills runtimes, as session uids), the executor, and the
//!   unprivileged API; their Unix-socket protocols.
//! - [`bridge`]: inside that sandbox, loopback ports relayed to the authority's
//!   Unix sockets (its only way out).
//! - [`pod`]: inside a session's pod (the Kubernetes runtime): its tree and home
//!   prepared, the agent run and its end reported.

pub mod alerts;
pub mod bridge;
pub mod clone_cache;
pub mod config;
pub mod executor;
pub mod hook;
pub mod output;
pub mod pod;
pub mod policy;
pub mod privsep;
pub mod rules;
pub mod runtime;
pub mod shell;
pub mod users;

pub use flotilla_model::session::Mode;

use serde::{Deserialize, Serialize};

/// One tool call as Claude Code's hooks describe it: the tool's name (`Bash`,
/// `Read`, `Edit`, `WebFetch`, `mcp__server__tool`…) and its input, exactly as the
/// hook payload's `tool_name` and `tool_input` give them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name.
    pub tool_name: String,
    /// The tool's input (for `Bash`: `{"command": "…", …}`; for file tools:
    /// `{"file_path": "/abs/path", …}`; for `WebFetch`: `{"url": "…", …}`).
    pub tool_input: serde_json::Value,
    /// The agent's working directory (the session tree), against which relative rule
    /// paths (`Read(./secrets/**)`) are resolved. Absolute.
    pub cwd: String,
}

/// The gate's answer on one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum Decision {
    /// The call goes ahead.
    Allow {
        /// Why (the rule or mode that allowed it).
        reason: String,
    },
    /// The call is refused; the reason is shown to the agent.
    Deny {
        /// Why (the rule or mode that denied it).
        reason: String,
    },
    /// A human must decide: the call becomes a question.
    Ask {
        /// Why (the always-ask entry, rule or mode that asks; or what the parser
        /// could not understand).
        reason: String,
    },
}

impl Decision {
    /// The reason, whatever the decision.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow { reason } | Decision::Deny { reason } | Decision::Ask { reason } => {
                reason
            }
        }
    }

    /// `allow`, `deny` or `ask`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::Allow { .. } => "allow",
            Decision::Deny { .. } => "deny",
            Decision::Ask { .. } => "ask",
        }
    }
}
