//! What makes a release trustworthy before a byte of it is downloaded: the pinned
//! public keys ([`load_trusted_keys`]) and the checks of an assignment, in order
//! (signature first, expiry, serial, this platform's artifact).

use super::{ReleaseSource, Updater};
use crate::record::{chain, now_ms, read_json, write_json, UpdateRecord};
use crate::state::AgentDir;
use flotilla_api::wire::Assignment;
use flotilla_release::{Acceptance, InstallRoot, Reason, Refusal, TrustedKeys};
use std::path::{Path, PathBuf};

/// Reads the trusted public keys: `files` when given (1 or 2), else every `*.pub` in
/// `<state>/agent/trusted-keys/` (by name). `Ok(None)` when none is pinned.
///
/// # Errors
/// A file that cannot be read, more than two keys, a text that is not a minisign public
/// key: one line.
pub fn load_trusted_keys(files: &[PathBuf], dir: &AgentDir) -> Result<Option<TrustedKeys>, String> {
    let paths: Vec<PathBuf> = if files.is_empty() {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir.trusted_keys_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pub"))
            .collect();
        found.sort();
        found
    } else {
        files.to_vec()
    };
    if paths.is_empty() {
        return Ok(None);
    }
    let texts = paths
        .iter()
        .map(|p| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display())))
        .collect::<Result<Vec<String>, String>>()?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    TrustedKeys::from_texts(&refs).map(Some).map_err(|e| {
        format!(
            "{e} ({})",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// A release assignment that passed every check made before downloading.
pub(crate) struct Verified {
    /// The minisign key id that signed it.
    pub(crate) key_id: String,
    /// The signed manifest.
    pub(crate) manifest: flotilla_release::Manifest,
    /// Its artifact for this platform.
    pub(crate) artifact: flotilla_release::Artifact,
}

impl<S: ReleaseSource> Updater<S> {
    /// The checks before anything is downloaded, in order: the signature FIRST (against
    /// the pinned keys; the signed manifest must be the assignment's release), expiry,
    /// serial (not lower than the highest accepted from that key, kept in
    /// `acceptance_path`, updated here) and this platform's artifact. The refusal
    /// record otherwise.
    ///
    /// An operator-approved rollback (`rollback_of`) may have a lower serial, but only
    /// when its artifact is a digest `root` ran before and still keeps
    /// ([`InstallRoot::ran_before`]: `previous`, or a kept version that never failed);
    /// any other older release is refused `SerialRollback` as ever.
    pub(crate) fn verify_assignment(
        &self,
        a: &Assignment,
        acceptance_path: &Path,
        root: Option<&InstallRoot>,
    ) -> Result<Verified, Box<UpdateRecord>> {
        let refuse = |r: Refusal| Box::new(UpdateRecord::refused(a, &r));
        let Some(keys) = &self.cfg.keys else {
            return Err(refuse(Refusal::new(
                Reason::SignatureInvalid,
                format!(
                    "no trusted key is pinned (agent run --trusted-key FILE, or {}/*.pub)",
                    self.cfg.dir.trusted_keys_dir().display()
                ),
            )));
        };
        let (key_id, manifest) = keys
            .verify(a.manifest.as_bytes(), &a.signature)
            .map_err(&refuse)?;
        if manifest.name != a.name || manifest.version != a.version {
            return Err(refuse(Refusal::new(
                Reason::SignatureInvalid,
                format!(
                    "the assignment names {} {} but the signed manifest is {} {}",
                    a.name, a.version, manifest.name, manifest.version
                ),
            )));
        }
        let mut acceptance: Acceptance = read_json(acceptance_path).unwrap_or_default();
        let (os, arch) = flotilla_release::Platform::current();
        let checked = match a.rollback_of {
            Some(_) => {
                let kept = root
                    .map(|r| r.ran_before())
                    .transpose()
                    .map_err(|e| {
                        refuse(Refusal::new(
                            Reason::InstallFailed,
                            format!("the versions kept here cannot be read: {e}"),
                        ))
                    })?
                    .unwrap_or_default();
                acceptance.check_rollback(&key_id, &manifest, os, arch, now_ms(), &kept)
            }
            None => acceptance.check(&key_id, &manifest, os, arch, now_ms()),
        };
        let artifact = match checked {
            Ok(artifact) => artifact.clone(),
            Err(r) => {
                let mut rec = UpdateRecord::refused(a, &r);
                rec.serial = manifest.serial;
                rec.key_id = key_id.clone();
                return Err(Box::new(rec));
            }
        };
        acceptance.accept_manifest(&key_id, &manifest);
        if let Err(e) = write_json(acceptance_path, &acceptance) {
            self.log_once(&format!("update: {}", chain(&e)));
        }
        Ok(Verified {
            key_id,
            manifest,
            artifact,
        })
    }
}
