//! Signed releases: manifests, minisign keys and signatures, artifact verification, the
//! agent's install root and the authority's rollout state machine.
//!
//! Code map:
//! - [`manifest`]: the release manifest (JSON) and its validation; [`Platform`] words.
//! - [`sign`]: minisign key generation and signing (offline, operator side).
//! - [`verify`]: [`TrustedKeys`] (signature check, before download) and [`Acceptance`]
//!   (expiry, serial rollback, platform), host side.
//! - [`artifact`]: SHA-256 + size verification while copying (after download).
//! - [`install`]: the install root (`versions/`, `current`, `previous`, skip list).
//! - [`rollout`]: the authority's pure rollout state machine (no clock: `now_ms` arguments).
//! - [`reason`]: [`Reason`] and [`Refusal`], shared by all of the above.
//!
//! No tokio and no clock here: every time is an argument (`now_ms`, milliseconds since
//! the Unix epoch). Formats: minisign (<https://jedisct1.github.io/minisign/>).

pub mod artifact;
pub mod install;
pub mod manifest;
pub mod reason;
pub mod rollout;
pub mod sign;
pub mod verify;

pub use install::{InstallError, InstallRoot, SkipEntry, VersionDir};
pub use manifest::{Artifact, Manifest, ManifestError, Platform};
pub use reason::{Reason, Refusal};
pub use rollout::{
    HostPhase, HostRollout, HostTarget, HostUpdate, Phase, RollbackError, RollbackHost, Rollout,
    RolloutError, RolloutSpec, UnskipOutcome, UpdateReport, UpdateState, AGENT_RELEASE,
};
pub use sign::{keygen, public_key_id, sign, KeyFiles, SignError};
pub use verify::{
    manifest_and_signature, signature_key_id, verify_offline, Acceptance, KeyError, OfflineError,
    TrustedKeys,
};
