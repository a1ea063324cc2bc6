//! What a wrapper does with the rest of the words: the answer every family of programs
//! gives the walker (see `commands.rs`).

use super::Arg;

/// What a wrapper does with the rest of the words.
pub(super) enum Step {
    /// The wrapper runs this command (the remaining words); `open_ended` when more
    /// arguments are appended at run time.
    Runs { rest: Vec<Arg>, open_ended: bool },
    /// The words are themselves the command (no inner command, or not a wrapper).
    Itself,
    /// Emit the current words as a command *and* go on with the inner command.
    Visible { rest: Vec<Arg>, open_ended: bool },
    /// Nothing more to emit: the wrapper's commands were already produced
    /// (`sh -c '…'`).
    Consumed,
}
