//! [`OperationId`] and [`StepId`]: journal row ids with a printable form.

use rusqlite::types::{FromSql, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A string that is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not {expected} (expected `{prefix}-<n>` or `<n>`, n a positive integer)")]
pub struct ParseIdError {
    /// The rejected input.
    pub input: String,
    /// `an operation id` or `a step id`.
    pub expected: &'static str,
    /// `op` or `step`.
    pub prefix: &'static str,
}

macro_rules! row_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $expected:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "-{}"), self.0)
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;

            /// Accepts `<prefix>-<n>` and `<n>`, `n` a positive decimal integer.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let digits = s
                    .strip_prefix(concat!($prefix, "-"))
                    .unwrap_or(s);
                match digits.parse::<i64>() {
                    Ok(n) if n > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => Ok($name(n)),
                    _ => Err(ParseIdError {
                        input: s.to_owned(),
                        expected: $expected,
                        prefix: $prefix,
                    }),
                }
            }
        }

        impl Serialize for $name {
            /// Serialised as its printed form, e.g. `"op-12"`.
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            /// Accepts the printed form (`"op-12"`), a bare number as a string (`"12"`)
            /// or a JSON integer (`12`).
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Repr {
                    Int(i64),
                    Text(String),
                }
                match Repr::deserialize(deserializer)? {
                    Repr::Int(n) if n > 0 => Ok($name(n)),
                    Repr::Int(n) => Err(serde::de::Error::custom(format!(
                        concat!("{} is not ", $expected),
                        n
                    ))),
                    Repr::Text(s) => s.parse().map_err(serde::de::Error::custom),
                }
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.0))
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                i64::column_result(value).map($name)
            }
        }
    };
}

row_id!(
    /// An operation in the journal (one per mutating CLI invocation). Printed
    /// `op-<n>`; parsed from `op-<n>` or `<n>`.
    OperationId,
    "op",
    "an operation id"
);

row_id!(
    /// A step of an operation in the journal. Printed `step-<n>`; parsed from
    /// `step-<n>` or `<n>`.
    StepId,
    "step",
    "a step id"
);
