//! Why a release was refused, rolled back or failed on a host.

use serde::{Deserialize, Serialize};

/// The reason a host did not end up running a release (or skipped it).
///
/// Serialised in PascalCase (`"SignatureInvalid"`); [`Reason::as_str`] gives the same word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// The manifest has no artifact for the host's platform (`os`/`arch`).
    NoMatchingArtifact,
    /// The signature is missing, garbled, invalid, or made by a key the host does not trust.
    SignatureInvalid,
    /// The downloaded artifact's SHA-256 differs from the manifest's.
    DigestMismatch,
    /// The downloaded artifact's size differs from the manifest's.
    SizeMismatch,
    /// The manifest's `expires` instant has passed (freeze attack).
    Expired,
    /// The manifest's `serial` is lower than the highest accepted from its key (rollback attack).
    SerialRollback,
    /// The release is on the host's skip list (it was rolled back there before).
    Skipped,
    /// The artifact could not be fetched (network, authority or reading error).
    DownloadFailed,
    /// The artifact could not be staged or switched to (filesystem error).
    InstallFailed,
    /// The new process did not prove its identity (or report) within the timeout.
    HealthTimeout,
    /// The new process restarted more than twice during the soak.
    CrashLoop,
    /// The supervisor restart left the old binary running (same pid or same digest).
    RestartHadNoEffect,
    /// An operator aborted the rollout.
    Aborted,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 13] = [
        Reason::NoMatchingArtifact,
        Reason::SignatureInvalid,
        Reason::DigestMismatch,
        Reason::SizeMismatch,
        Reason::Expired,
        Reason::SerialRollback,
        Reason::Skipped,
        Reason::DownloadFailed,
        Reason::InstallFailed,
        Reason::HealthTimeout,
        Reason::CrashLoop,
        Reason::RestartHadNoEffect,
        Reason::Aborted,
    ];

    /// The PascalCase word, the same as the serialised form.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NoMatchingArtifact => "NoMatchingArtifact",
            Reason::SignatureInvalid => "SignatureInvalid",
            Reason::DigestMismatch => "DigestMismatch",
            Reason::SizeMismatch => "SizeMismatch",
            Reason::Expired => "Expired",
            Reason::SerialRollback => "SerialRollback",
            Reason::Skipped => "Skipped",
            Reason::DownloadFailed => "DownloadFailed",
            Reason::InstallFailed => "InstallFailed",
            Reason::HealthTimeout => "HealthTimeout",
            Reason::CrashLoop => "CrashLoop",
            Reason::RestartHadNoEffect => "RestartHadNoEffect",
            Reason::Aborted => "Aborted",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A release refused (or failed) on a host: the [`Reason`] and a human-readable detail
/// (what was expected and what was seen). Displays as `Reason: detail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct Refusal {
    /// The machine-readable reason.
    pub reason: Reason,
    /// What was expected and what was seen, for people.
    pub detail: String,
}

impl Refusal {
    /// A refusal for `reason` with `detail`.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Refusal {
        Refusal {
            reason,
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_as_its_word() {
        for r in Reason::ALL {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
            let back: Reason = serde_json::from_str(&format!("\"{r}\"")).unwrap();
            assert_eq!(back, r);
        }
        let refusal = Refusal::new(Reason::Expired, "expired at 2020-01-01T00:00:00Z");
        assert_eq!(
            refusal.to_string(),
            "Expired: expired at 2020-01-01T00:00:00Z"
        );
    }
}
