//! The small enums the store keeps as kebab-case text: how an operation or step ended
//! ([`Outcome`]) and why an instance record was removed ([`RemovalReason`]), with
//! their parsing ([`ParseEnumError`]) and SQLite conversions.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How an operation or a step ended (or that it has not yet). Stored and
/// serialised as kebab-case text (`running`, `succeeded`, `failed`, `refused`,
/// `interrupted`, `rolled-back`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Begun, not finished (the only non-final outcome).
    Running,
    /// Done, everything as planned.
    Succeeded,
    /// Failed (see the operation's `error` or the step's evidence).
    Failed,
    /// Not attempted: the plan was refused (or a step was skipped because of it).
    Refused,
    /// Its process went away before finishing it (set by
    /// [`Store::mark_interrupted`](crate::Store::mark_interrupted)).
    Interrupted,
    /// Failed part-way, and what this operation started was stopped again.
    RolledBack,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 6] = [
        Outcome::Running,
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Refused,
        Outcome::Interrupted,
        Outcome::RolledBack,
    ];

    /// The kebab-case name (as stored and serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Refused => "refused",
            Outcome::Interrupted => "interrupted",
            Outcome::RolledBack => "rolled-back",
        }
    }

    /// Whether this is a final outcome (anything but [`Outcome::Running`]).
    pub fn is_final(self) -> bool {
        self != Outcome::Running
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`Outcome`] or [`RemovalReason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not {expected}")]
pub struct ParseEnumError {
    /// The rejected input.
    pub input: String,
    /// What was expected, e.g. `an outcome (running, succeeded, ...)`.
    pub expected: &'static str,
}

impl FromStr for Outcome {
    type Err = ParseEnumError;

    /// Parses the kebab-case name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| ParseEnumError {
                input: s.to_owned(),
                expected:
                    "an outcome (running, succeeded, failed, refused, interrupted, rolled-back)",
            })
    }
}

/// Why an instance record was removed. Stored and serialised as kebab-case text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemovalReason {
    /// Flotilla stopped it.
    Stopped,
    /// It was found gone (exited, crashed, or its pid now belongs to something else).
    Vanished,
}

impl RemovalReason {
    /// The kebab-case name (as stored and serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::Stopped => "stopped",
            RemovalReason::Vanished => "vanished",
        }
    }
}

impl fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RemovalReason {
    type Err = ParseEnumError;

    /// Parses the kebab-case name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stopped" => Ok(RemovalReason::Stopped),
            "vanished" => Ok(RemovalReason::Vanished),
            _ => Err(ParseEnumError {
                input: s.to_owned(),
                expected: "a removal reason (stopped, vanished)",
            }),
        }
    }
}

macro_rules! text_enum_sql {
    ($t:ty) => {
        impl ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $t {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                value
                    .as_str()?
                    .parse()
                    .map_err(|e: ParseEnumError| FromSqlError::Other(Box::new(e)))
            }
        }
    };
}

text_enum_sql!(Outcome);
text_enum_sql!(RemovalReason);
