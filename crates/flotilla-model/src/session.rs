//! A coding-agent session's vocabulary shared by the gate, the authority and the wire
//! (DESIGN.md: session / gate / question).

use serde::{Deserialize, Serialize};

/// A session's permission mode: Claude Code's launch profiles
/// (`--permission-mode`, <https://code.claude.com/docs/en/iam#permission-modes>),
/// spelled as Claude Code spells them (`default`, `acceptEdits`, `plan`,
/// `bypassPermissions`).
///
/// Chosen when a session is created and never switched at runtime: a request to
/// switch is refused and recorded. The always-ask list outranks every mode,
/// `BypassPermissions` included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    /// Asks for anything the rules do not allow.
    #[default]
    Default,
    /// File edits (`Edit`, `Write`, `MultiEdit`, `NotebookEdit`) inside the session
    /// tree are allowed; everything else as `Default`.
    AcceptEdits,
    /// Read-only: reads are allowed, anything that changes something is denied.
    Plan,
    /// Everything not denied and not on the always-ask list is allowed.
    BypassPermissions,
}

impl Mode {
    /// Every mode, in the order above.
    pub const ALL: [Mode; 4] = [
        Mode::Default,
        Mode::AcceptEdits,
        Mode::Plan,
        Mode::BypassPermissions,
    ];

    /// Claude Code's spelling (`bypassPermissions`…).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::AcceptEdits => "acceptEdits",
            Mode::Plan => "plan",
            Mode::BypassPermissions => "bypassPermissions",
        }
    }

    /// Parses Claude Code's spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
