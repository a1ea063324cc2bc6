//! What a notification says: its [`Kind`], [`Severity`] and the [`Event`] itself
//! (pure values; no IO).

use flotilla_api::links::Link;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The gate asked a human about a session's tool call.
    QuestionOpened,
    /// A rollout halted (a host failed or rolled back, a timeout); not an
    /// operator's abort.
    RolloutHalted,
    /// A host of a rollout rolled back to its previous version.
    RolloutRolledBack,
    /// A host's agent has not reported within the report deadline.
    HostUnreachable,
    /// An unreachable host's agent reports again.
    HostReachable,
    /// A component stopped without being asked to.
    ComponentDown,
}

impl Kind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Kind; 6] = [
        Kind::QuestionOpened,
        Kind::RolloutHalted,
        Kind::RolloutRolledBack,
        Kind::HostUnreachable,
        Kind::HostReachable,
        Kind::ComponentDown,
    ];

    /// Its kebab-case name (`notifications.toml`'s `kinds`, the JSON shape's `kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::QuestionOpened => "question-opened",
            Kind::RolloutHalted => "rollout-halted",
            Kind::RolloutRolledBack => "rollout-rolled-back",
            Kind::HostUnreachable => "host-unreachable",
            Kind::HostReachable => "host-reachable",
            Kind::ComponentDown => "component-down",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// How urgent it is.
    pub fn severity(self) -> Severity {
        match self {
            Kind::QuestionOpened => Severity::Warning,
            Kind::RolloutHalted | Kind::RolloutRolledBack => Severity::Critical,
            Kind::HostUnreachable | Kind::ComponentDown => Severity::Critical,
            Kind::HostReachable => Severity::Info,
        }
    }
}

/// How urgent a notification is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// For the record.
    Info,
    /// Someone should look soon (a question waits).
    Warning,
    /// Something is broken.
    Critical,
}

impl Severity {
    /// Its name in the JSON shape.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// ntfy's priority (1 min … 5 max, <https://docs.ntfy.sh/publish/#message-priority>).
    pub fn ntfy_priority(self) -> u8 {
        match self {
            Severity::Info => 2,
            Severity::Warning => 4,
            Severity::Critical => 5,
        }
    }
}

/// One thing worth telling people about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: Kind,
    /// One short line (`question 12 waits: Bash in session 3`).
    pub title: String,
    /// The details, plain text.
    pub text: String,
    /// The dashboard page of the object it is about.
    pub object: Link,
    /// When it happened, ms since the Unix epoch.
    pub at_ms: i64,
    /// The same event has the same key (a question's id; a host's unreachable
    /// episode named by its last report's time): it is sent once.
    pub dedup_key: String,
}
