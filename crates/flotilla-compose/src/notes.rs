//! What an import could not carry over, or carried over differently: each becomes a
//! `#` comment in the inventory, naming the compose key and its line.

/// One comment: a compose key, its line, and what happened to it and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The compose file's line the key is on (1-based).
    pub line: u32,
    /// The key, as a path below the service (`ports[1]`, `deploy.replicas`) or the
    /// top level (`networks.backend`).
    pub key: String,
    /// What was done with it, and why.
    pub text: String,
}

impl Note {
    /// A note on `key` at `line`.
    pub fn new(line: u32, key: impl Into<String>, text: impl Into<String>) -> Self {
        Note {
            line,
            key: key.into(),
            text: text.into(),
        }
    }
}
