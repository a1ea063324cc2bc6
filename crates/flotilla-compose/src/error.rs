//! Why a compose file cannot be imported, with the line and column to look at.

use std::fmt;

/// A place in the compose file: 1-based line, 1-based column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1, in characters.
    pub column: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// An error in a compose file. Displayed as `LINE:COLUMN: message`; prefix the file's
/// name for the usual `FILE:LINE:COLUMN: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    /// The text is not YAML (saphyr-parser's words for what broke, where it broke).
    #[error("{at}: YAML syntax error: {message}")]
    Syntax {
        /// Where the YAML grammar broke.
        at: Pos,
        /// What broke.
        message: String,
    },
    /// The YAML is not a compose file Flotilla can import (a duplicate key, a value of
    /// the wrong type, a reference to a service that does not exist…).
    #[error("{at}: {message}")]
    Invalid {
        /// The node at fault.
        at: Pos,
        /// What is wrong, and what to write instead.
        message: String,
    },
}

impl ComposeError {
    /// An [`ComposeError::Invalid`] at `at`.
    pub fn invalid(at: Pos, message: impl Into<String>) -> Self {
        ComposeError::Invalid {
            at,
            message: message.into(),
        }
    }

    /// Where it is.
    pub fn at(&self) -> Pos {
        match self {
            ComposeError::Syntax { at, .. } | ComposeError::Invalid { at, .. } => *at,
        }
    }
}
