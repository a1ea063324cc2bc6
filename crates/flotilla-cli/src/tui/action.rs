//! What flows through the terminal UI's channel: [`Action`]s (a key, a resize, data
//! that arrived, an operation's progress) into the update function, and the
//! [`Effect`]s it asks the runtime to carry out (plan, apply, follow logs, answer).

use crate::tui::model::Snapshot;
use flotilla_api::sessions::QuestionDto;
use flotilla_plan::{Operation, Plan};
use ratatui::crossterm::event::KeyEvent;

/// Something that happened.
#[derive(Debug, Clone)]
pub enum Action {
    /// A key was pressed.
    Key(KeyEvent),
    /// The terminal was resized.
    Resize,
    /// A new observation, or why it failed.
    Observed(Result<Snapshot, String>),
    /// New lines of the followed logs (already prefixed and printable).
    Log {
        /// The follower's generation ([`crate::tui::model::LogPane::generation`]).
        generation: u64,
        /// The lines, oldest first.
        lines: Vec<String>,
    },
    /// A followed log cannot be read.
    LogError {
        /// The follower's generation.
        generation: u64,
        /// Why.
        error: String,
    },
    /// The open questions (`--server`), or why they could not be read.
    Questions(Result<Vec<QuestionDto>, String>),
    /// A dry run finished.
    Planned {
        /// What was planned.
        op: Operation,
        /// The plan, or the refusal's text (`Err(Ok(..))`), or an error's text
        /// (`Err(Err(..))`).
        result: Result<Plan, Result<String, String>>,
    },
    /// A line of the applying operation's progress.
    Progress(String),
    /// The operation finished: its outcome's text and whether it succeeded, or an
    /// error's text (lock held, stale plan).
    Applied(Result<(String, bool), String>),
    /// A question's answer was sent: the authority's word, or why it failed.
    Answered(Result<String, String>),
}

/// Something the update function asks the runtime to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Follow these components' logs (replacing what was followed), as `generation`.
    Follow {
        /// Component names.
        names: Vec<String>,
        /// The new generation.
        generation: u64,
    },
    /// Compute the plan of `op` (a dry run).
    Plan(Operation),
    /// Apply exactly this plan.
    Apply(Plan),
    /// Cancel the operation being applied (what it started is stopped).
    Cancel,
    /// Answer a question.
    Answer {
        /// The question.
        id: u64,
        /// `allow` or `deny`.
        decision: String,
        /// A note for the agent.
        note: Option<String>,
    },
    /// Observe again now.
    Refresh,
}
