//! Checking a release on the host: the signature against pinned keys, then the
//! manifest against what this host accepted before.
//!
//! Order matters: [`TrustedKeys::verify`] runs before anything is downloaded, then
//! [`Acceptance::check`] (expiry, serial, platform); the artifact's digest and size are
//! checked after the download ([`crate::artifact`]). Signatures are minisign
//! (<https://jedisct1.github.io/minisign/>), pre-hashed (`ED`) only: legacy (`Ed`)
//! signatures are refused.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manifest::{format_rfc3339_ms, Artifact, Manifest, Platform};
use crate::reason::{Reason, Refusal};
use crate::sign::{key_id_hex, public_key_line, SignError};

/// The one or two minisign public keys a host trusts (current and next, for rotation).
#[derive(Debug, Clone)]
pub struct TrustedKeys {
    keys: Vec<(String, minisign_verify::PublicKey)>,
}

/// Trusted keys that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not one or two keys.
    #[error("trust one or two public keys (current and next), not {0}")]
    Count(usize),
    /// A text is not a minisign public key.
    #[error("trusted key #{index}: not a minisign public key: {message}")]
    Invalid {
        /// 1-based position in the list.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The same key id twice.
    #[error("trusted key {0} is listed twice")]
    Duplicate(String),
}

impl TrustedKeys {
    /// Reads 1 or 2 minisign public keys, each the text of a `.pub` file or its bare
    /// base64 line.
    ///
    /// # Errors
    /// [`KeyError::Count`] for 0 or more than 2 keys, [`KeyError::Invalid`] for text that
    /// is not a minisign Ed25519 public key, [`KeyError::Duplicate`].
    pub fn from_texts(texts: &[&str]) -> Result<TrustedKeys, KeyError> {
        if texts.is_empty() || texts.len() > 2 {
            return Err(KeyError::Count(texts.len()));
        }
        let mut keys: Vec<(String, minisign_verify::PublicKey)> = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            let invalid = |message: String| KeyError::Invalid {
                index: i + 1,
                message,
            };
            let line = public_key_line(text).ok_or_else(|| {
                invalid("expected an `untrusted comment:` line and a base64 key line".into())
            })?;
            let id = crate::sign::public_key_id(line).map_err(|e| invalid(e.to_string()))?;
            let pk = minisign_verify::PublicKey::from_base64(line)
                .map_err(|e| invalid(e.to_string()))?;
            if keys.iter().any(|(k, _)| *k == id) {
                return Err(KeyError::Duplicate(id));
            }
            keys.push((id, pk));
        }
        Ok(TrustedKeys { keys })
    }

    /// The trusted key ids (16 uppercase hex each), in the order given.
    pub fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Verifies a minisign signature (`.minisig` text) over the exact manifest bytes with
    /// the trusted key it names, then parses the manifest. Returns the signing key's id
    /// and the manifest.
    ///
    /// # Errors
    /// [`Reason::SignatureInvalid`] when the signature is empty (unsigned), not minisign,
    /// legacy, made by a key not trusted here (detail `signed by key X, trusted: Y, Z`),
    /// or does not match the bytes; also when the signed bytes are not a valid manifest
    /// (detail `signed manifest is invalid: …`).
    pub fn verify(
        &self,
        manifest_bytes: &[u8],
        signature_text: &str,
    ) -> Result<(String, Manifest), Refusal> {
        let invalid = |detail: String| Refusal::new(Reason::SignatureInvalid, detail);
        if signature_text.trim().is_empty() {
            return Err(invalid("the manifest is unsigned (empty signature)".into()));
        }
        let sig = minisign_verify::Signature::decode(signature_text)
            .map_err(|e| invalid(format!("the signature is not in minisign format: {e}")))?;
        let sig_key = signature_key_id(signature_text)
            .map_err(|e| invalid(format!("the signature is not in minisign format: {e}")))?;
        let Some((id, pk)) = self.keys.iter().find(|(id, _)| *id == sig_key) else {
            return Err(invalid(format!(
                "signed by key {sig_key}, trusted: {}",
                self.key_ids().join(", ")
            )));
        };
        pk.verify(manifest_bytes, &sig, false).map_err(|e| {
            invalid(format!(
                "the signature by key {id} does not match the manifest: {e}"
            ))
        })?;
        let manifest = Manifest::parse(manifest_bytes)
            .map_err(|e| invalid(format!("signed manifest is invalid: {e}")))?;
        Ok((id.clone(), manifest))
    }
}

/// The key id (16 uppercase hex) named by a minisign signature (`.minisig` text), without
/// verifying anything: for display, and for the authority to check that a published
/// signature is well-formed.
///
/// # Errors
/// [`SignError::BadKey`] (kind `signature`) when the text is not a minisign signature.
pub fn signature_key_id(signature_text: &str) -> Result<String, SignError> {
    let bad = |message: String| SignError::BadKey {
        kind: "signature",
        message,
    };
    if signature_text.trim().is_empty() {
        return Err(bad("empty".into()));
    }
    minisign_verify::Signature::decode(signature_text).map_err(|e| bad(e.to_string()))?;
    minisign::SignatureBox::from_string(signature_text)
        .map(|b| key_id_hex(b.keynum()))
        .map_err(|e| bad(e.to_string()))
}

/// What a host accepted before: the highest release serial per signing key id.
/// Stored by the agent as JSON (`{"highest": {"<KEY ID>": 42}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acceptance {
    /// Highest accepted serial per key id (16 uppercase hex).
    #[serde(default)]
    pub highest: BTreeMap<String, u64>,
    /// The version accepted with that serial, per key id: the same serial again is
    /// fine for the same release, refused for another version (a downgrade signed
    /// with a reused serial).
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
}

impl Acceptance {
    /// Checks a verified manifest for this host: not expired at `now_ms` (ms since the
    /// Unix epoch; expired when `now_ms >= expires`), `serial` not lower than the highest
    /// accepted from `key_id` (equal is fine: the same release again), and an artifact for
    /// `os`/`arch`. Returns that artifact. Changes nothing: call [`Acceptance::accept`]
    /// once the release is taken.
    ///
    /// # Errors
    /// [`Reason::Expired`], [`Reason::SerialRollback`], [`Reason::NoMatchingArtifact`],
    /// checked in that order.
    pub fn check<'m>(
        &self,
        key_id: &str,
        manifest: &'m Manifest,
        os: &str,
        arch: &str,
        now_ms: i64,
    ) -> Result<&'m Artifact, Refusal> {
        self.check_inner(key_id, manifest, os, arch, now_ms, None)
    }

    /// [`Acceptance::check`] of an operator-approved rollback: a serial lower than the
    /// highest accepted (or the highest serial with another version) is accepted when,
    /// and only when, this platform's artifact is one of `kept` — the digests (64 hex,
    /// optional `sha256:` prefix) this host ran before and still keeps installed (its
    /// `previous` version, say). Any other older release is still refused
    /// [`Reason::SerialRollback`]: a rollback goes back, never to an arbitrary old
    /// release. Expiry and platform are checked as ever.
    ///
    /// # Errors
    /// As [`Acceptance::check`].
    pub fn check_rollback<'m>(
        &self,
        key_id: &str,
        manifest: &'m Manifest,
        os: &str,
        arch: &str,
        now_ms: i64,
        kept: &[String],
    ) -> Result<&'m Artifact, Refusal> {
        self.check_inner(key_id, manifest, os, arch, now_ms, Some(kept))
    }

    fn check_inner<'m>(
        &self,
        key_id: &str,
        manifest: &'m Manifest,
        os: &str,
        arch: &str,
        now_ms: i64,
        kept: Option<&[String]>,
    ) -> Result<&'m Artifact, Refusal> {
        let going_back = kept.is_some_and(|kept| {
            manifest.artifact_for(os, arch).is_some_and(|a| {
                kept.iter().any(|k| {
                    let k = k.trim();
                    k.strip_prefix("sha256:")
                        .unwrap_or(k)
                        .eq_ignore_ascii_case(&a.sha256)
                })
            })
        });
        let rollback_note = match kept {
            Some(kept) if !going_back => format!(
                "; a rollback goes back only to a release this host ran before and still keeps ({})",
                if kept.is_empty() {
                    "it keeps none".to_string()
                } else {
                    kept.iter()
                        .map(|k| format!("sha256:{}", k.strip_prefix("sha256:").unwrap_or(k)))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            _ => String::new(),
        };
        let expires = manifest
            .expires_ms()
            .map_err(|e| Refusal::new(Reason::Expired, e.to_string()))?;
        if now_ms >= expires {
            return Err(Refusal::new(
                Reason::Expired,
                format!(
                    "{} {} expired at {} (now {})",
                    manifest.name,
                    manifest.version,
                    manifest.expires,
                    format_rfc3339_ms(now_ms)
                ),
            ));
        }
        if let Some(&highest) = self.highest.get(key_id).filter(|_| !going_back) {
            if manifest.serial == highest {
                if let Some(v) = self.versions.get(key_id) {
                    if v != &manifest.version {
                        return Err(Refusal::new(
                            Reason::SerialRollback,
                            format!(
                                "{} {} has serial {}, which key {key_id} already gave {} {v}: a new release needs a higher serial{rollback_note}",
                                manifest.name, manifest.version, manifest.serial, manifest.name
                            ),
                        ));
                    }
                }
            }
            if manifest.serial < highest {
                return Err(Refusal::new(
                    Reason::SerialRollback,
                    format!(
                        "{} {} has serial {}, lower than {highest} already accepted from key {key_id}{rollback_note}",
                        manifest.name, manifest.version, manifest.serial
                    ),
                ));
            }
        }
        manifest.artifact_for(os, arch).ok_or_else(|| {
            let have: Vec<String> = manifest.artifacts.iter().map(Artifact::platform).collect();
            Refusal::new(
                Reason::NoMatchingArtifact,
                format!(
                    "{} {} has no artifact for {}; it has {}",
                    manifest.name,
                    manifest.version,
                    Platform::name(os, arch),
                    have.join(", ")
                ),
            )
        })
    }

    /// Records that a release with `serial` from `key_id` was accepted (keeps the maximum).
    pub fn accept(&mut self, key_id: &str, serial: u64) {
        let e = self.highest.entry(key_id.to_string()).or_insert(serial);
        *e = (*e).max(serial);
    }

    /// [`Acceptance::accept`] of `manifest`, remembering its version with its serial
    /// when that is the highest.
    pub fn accept_manifest(&mut self, key_id: &str, manifest: &Manifest) {
        let before = self.highest.get(key_id).copied();
        self.accept(key_id, manifest.serial);
        if before.is_none_or(|h| manifest.serial >= h) {
            self.versions
                .insert(key_id.to_string(), manifest.version.clone());
        }
    }
}

/// Why a manifest could not be checked offline at all (as opposed to a
/// [`Refusal`](crate::Refusal): checked, and an agent would refuse it).
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// A file (the manifest or a key) could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A trusted key file is not a minisign public key.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// `(manifest, signature)` paths from either of them: the signature is the
/// manifest's path with `.minisig` appended (minisign's convention).
pub fn manifest_and_signature(path: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    match path.to_str().and_then(|s| s.strip_suffix(".minisig")) {
        Some(m) => (std::path::PathBuf::from(m), path.to_path_buf()),
        None => {
            let mut sig = path.as_os_str().to_owned();
            sig.push(".minisig");
            (path.to_path_buf(), std::path::PathBuf::from(sig))
        }
    }
}

/// Checks a signed manifest (`manifest` or its `.minisig`) as an agent would, offline:
/// the signature by one of `trusted_keys` (public key files), expiry at `now_ms`
/// (ms since the Unix epoch), and an artifact for `os`-`arch` (no serial history
/// here). `Ok(Err(refusal))` when an agent would refuse it — a missing signature
/// file is an unsigned manifest, refused like any other; `Ok(Ok((key id, manifest,
/// artifact)))` when it would take it.
///
/// # Errors
/// [`OfflineError`] when the manifest or a key file cannot be read, or a key is
/// not one.
pub fn verify_offline(
    manifest: &std::path::Path,
    trusted_keys: &[std::path::PathBuf],
    os: &str,
    arch: &str,
    now_ms: i64,
) -> Result<Result<(String, crate::Manifest, crate::Artifact), crate::Refusal>, OfflineError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| OfflineError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let (mpath, spath) = manifest_and_signature(manifest);
    let bytes = read(&mpath)?;
    let Ok(sig) = std::fs::read_to_string(&spath) else {
        return Ok(Err(crate::Refusal::new(
            crate::Reason::SignatureInvalid,
            format!(
                "unsigned: no signature file {} (`flotilla release sign {}`)",
                spath.display(),
                mpath.display()
            ),
        )));
    };
    let texts = trusted_keys
        .iter()
        .map(|p| read(p).map(|b| String::from_utf8_lossy(&b).into_owned()))
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let keys = TrustedKeys::from_texts(&refs)?;
    Ok(keys.verify(&bytes, &sig).and_then(|(key_id, m)| {
        let a = Acceptance::default()
            .check(&key_id, &m, os, arch, now_ms)?
            .clone();
        Ok((key_id, m, a))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::{keygen, sign};

    const SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const NOW: i64 = 1_800_000_000_000; // 2027-01-15

    struct Key {
        id: String,
        public: String,
        secret: String,
    }

    fn key(dir: &std::path::Path, name: &str) -> Key {
        let k = keygen(dir, name, false).unwrap();
        Key {
            id: k.key_id,
            public: std::fs::read_to_string(k.public_path).unwrap(),
            secret: std::fs::read_to_string(k.secret_path).unwrap(),
        }
    }

    fn manifest(serial: u64, expires: &str) -> Vec<u8> {
        Manifest {
            name: "flotilla-agent".into(),
            version: "2.0.0".into(),
            serial,
            expires: expires.into(),
            artifacts: vec![Artifact {
                os: "linux".into(),
                arch: "x86_64".into(),
                url: None,
                blob: Some(SHA.into()),
                sha256: SHA.into(),
                size: 0,
            }],
        }
        .to_bytes()
    }

    #[test]
    fn accepts_a_release_signed_by_either_trusted_key() {
        let dir = tempfile::tempdir().unwrap();
        let (cur, next) = (key(dir.path(), "current"), key(dir.path(), "next"));
        let trusted = TrustedKeys::from_texts(&[&cur.public, &next.public]).unwrap();
        assert_eq!(trusted.key_ids(), vec![cur.id.clone(), next.id.clone()]);
        let bytes = manifest(3, "2030-01-01T00:00:00Z");
        for k in [&cur, &next] {
            let sig = sign(&k.secret, &bytes, "file:manifest.json").unwrap();
            let (id, m) = trusted.verify(&bytes, &sig).unwrap();
            assert_eq!(id, k.id);
            assert_eq!(signature_key_id(&sig).unwrap(), k.id);
            assert_eq!(m.serial, 3);
            let mut acc = Acceptance::default();
            let a = acc.check(&id, &m, "linux", "x86_64", NOW).unwrap();
            assert_eq!(a.sha256, SHA);
            acc.accept(&id, m.serial);
            acc.accept(&id, 1);
            assert_eq!(acc.highest[&id], 3);
            // Same serial again is fine.
            acc.check(&id, &m, "linux", "x86_64", NOW).unwrap();
            let json = serde_json::to_string(&acc).unwrap();
            assert_eq!(serde_json::from_str::<Acceptance>(&json).unwrap(), acc);
        }
    }

    #[test]
    fn refuses_unsigned_garbled_and_bad_signatures() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "k");
        let trusted = TrustedKeys::from_texts(&[&k.public]).unwrap();
        let bytes = manifest(1, "2030-01-01T00:00:00Z");
        let sig = sign(&k.secret, &bytes, "t").unwrap();

        assert!(signature_key_id("").is_err());
        assert!(signature_key_id("untrusted comment: x\nAAAA\n").is_err());
        let r = trusted.verify(&bytes, "").unwrap_err();
        assert_eq!(r.reason, Reason::SignatureInvalid);
        assert!(r.detail.contains("unsigned"), "{r}");

        let garbled = sig.replacen(|c: char| c.is_ascii_alphabetic() && c != 'u', "#", 40);
        let r = trusted.verify(&bytes, &garbled).unwrap_err();
        assert_eq!(r.reason, Reason::SignatureInvalid, "{r}");

        // The manifest changed after signing (one byte).
        let mut tampered = bytes.clone();
        let pos = tampered.iter().position(|&b| b == b'2').unwrap();
        tampered[pos] = b'3';
        let r = trusted.verify(&tampered, &sig).unwrap_err();
        assert_eq!(r.reason, Reason::SignatureInvalid);
        assert!(r.detail.contains("does not match"), "{r}");

        // The trusted comment changed after signing.
        let r = trusted
            .verify(
                &bytes,
                &sig.replace("trusted comment: t", "trusted comment: u"),
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::SignatureInvalid);

        // Validly signed but not a manifest.
        let junk = b"{\"name\": 1}";
        let r = trusted
            .verify(junk, &sign(&k.secret, junk, "t").unwrap())
            .unwrap_err();
        assert_eq!(r.reason, Reason::SignatureInvalid);
        assert!(r.detail.starts_with("signed manifest is invalid: "), "{r}");
    }

    #[test]
    fn refuses_a_signature_by_an_unknown_key() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, other) = (
            key(dir.path(), "a"),
            key(dir.path(), "b"),
            key(dir.path(), "other"),
        );
        let trusted = TrustedKeys::from_texts(&[&a.public, &b.public]).unwrap();
        let bytes = manifest(1, "2030-01-01T00:00:00Z");
        let r = trusted
            .verify(&bytes, &sign(&other.secret, &bytes, "t").unwrap())
            .unwrap_err();
        assert_eq!(r.reason, Reason::SignatureInvalid);
        assert_eq!(
            r.detail,
            format!("signed by key {}, trusted: {}, {}", other.id, a.id, b.id)
        );
    }

    #[test]
    fn a_rollback_goes_back_only_to_a_digest_the_host_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "k");
        let trusted = TrustedKeys::from_texts(&[&k.public]).unwrap();
        let bytes = manifest(2, "2030-01-01T00:00:00Z");
        let (id, old) = trusted
            .verify(&bytes, &sign(&k.secret, &bytes, "t").unwrap())
            .unwrap();
        let mut acc = Acceptance::default();
        acc.accept(&id, 7);
        // Not a rollback: the lower serial is a rollback attack.
        let r = acc.check(&id, &old, "linux", "x86_64", NOW).unwrap_err();
        assert_eq!(r.reason, Reason::SerialRollback);
        // A rollback to a digest the host does not keep: still refused, and said so.
        let other = "ab".repeat(32);
        let r = acc
            .check_rollback(
                &id,
                &old,
                "linux",
                "x86_64",
                NOW,
                std::slice::from_ref(&other),
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::SerialRollback);
        assert!(r.detail.contains("ran before and still keeps"), "{r}");
        assert!(r.detail.contains(&other), "{r}");
        let r = acc
            .check_rollback(&id, &old, "linux", "x86_64", NOW, &[])
            .unwrap_err();
        assert!(r.detail.contains("it keeps none"), "{r}");
        // Back to the digest it keeps (either spelling): accepted.
        for kept in [SHA.to_string(), format!("sha256:{}", SHA.to_uppercase())] {
            let a = acc
                .check_rollback(&id, &old, "linux", "x86_64", NOW, &[other.clone(), kept])
                .unwrap();
            assert_eq!(a.sha256, SHA);
        }
        // Expiry still holds for a rollback.
        let expired = manifest(2, "2020-01-01T00:00:00Z");
        let (_, m) = trusted
            .verify(&expired, &sign(&k.secret, &expired, "t").unwrap())
            .unwrap();
        let r = acc
            .check_rollback(&id, &m, "linux", "x86_64", NOW, &[SHA.to_string()])
            .unwrap_err();
        assert_eq!(r.reason, Reason::Expired);
        // Accepting the rollback keeps the highest serial.
        acc.accept_manifest(&id, &old);
        assert_eq!(acc.highest[&id], 7);
    }

    #[test]
    fn refuses_expired_lower_serial_and_other_platform() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "k");
        let trusted = TrustedKeys::from_texts(&[&k.public]).unwrap();

        let bytes = manifest(5, "2020-01-01T00:00:00Z");
        let (id, m) = trusted
            .verify(&bytes, &sign(&k.secret, &bytes, "t").unwrap())
            .unwrap();
        let r = Acceptance::default()
            .check(&id, &m, "linux", "x86_64", NOW)
            .unwrap_err();
        assert_eq!(r.reason, Reason::Expired);
        assert!(r.detail.contains("expired at 2020-01-01T00:00:00Z"), "{r}");
        // Exactly at the instant counts as expired.
        let at = m.expires_ms().unwrap();
        assert_eq!(
            Acceptance::default()
                .check(&id, &m, "linux", "x86_64", at)
                .unwrap_err()
                .reason,
            Reason::Expired
        );
        assert!(Acceptance::default()
            .check(&id, &m, "linux", "x86_64", at - 1)
            .is_ok());

        let bytes = manifest(4, "2030-01-01T00:00:00Z");
        let (id, m) = trusted
            .verify(&bytes, &sign(&k.secret, &bytes, "t").unwrap())
            .unwrap();
        let mut acc = Acceptance::default();
        acc.accept(&id, 5);
        let r = acc.check(&id, &m, "linux", "x86_64", NOW).unwrap_err();
        assert_eq!(r.reason, Reason::SerialRollback);
        assert!(r.detail.contains("serial 4, lower than 5"), "{r}");
        // The same serial again: fine for the same version, refused for another one.
        let mut acc = Acceptance::default();
        acc.accept_manifest(&id, &m);
        assert!(acc.check(&id, &m, "linux", "x86_64", NOW).is_ok());
        let mut other_version = m.clone();
        other_version.version = "0.9.0".into();
        let r = acc
            .check(&id, &other_version, "linux", "x86_64", NOW)
            .unwrap_err();
        assert_eq!(r.reason, Reason::SerialRollback);
        assert!(
            r.detail.contains("a new release needs a higher serial"),
            "{r}"
        );
        // The serial is per key: another key's history does not matter.
        let mut other = Acceptance::default();
        other.accept("0000000000000000", 99);
        assert!(other.check(&id, &m, "linux", "x86_64", NOW).is_ok());

        let r = Acceptance::default()
            .check(&id, &m, "darwin", "aarch64", NOW)
            .unwrap_err();
        assert_eq!(r.reason, Reason::NoMatchingArtifact);
        assert!(
            r.detail
                .contains("no artifact for darwin-aarch64; it has linux-x86_64"),
            "{r}"
        );
    }

    #[test]
    fn key_list_errors() {
        let dir = tempfile::tempdir().unwrap();
        let k = key(dir.path(), "k");
        assert_eq!(
            TrustedKeys::from_texts(&[]).unwrap_err(),
            KeyError::Count(0)
        );
        assert_eq!(
            TrustedKeys::from_texts(&[&k.public, &k.public, &k.public]).unwrap_err(),
            KeyError::Count(3)
        );
        assert_eq!(
            TrustedKeys::from_texts(&[&k.public, &k.public]).unwrap_err(),
            KeyError::Duplicate(k.id.clone())
        );
        assert!(matches!(
            TrustedKeys::from_texts(&[&k.secret]),
            Err(KeyError::Invalid { index: 1, .. })
        ));
        let bare = k.public.lines().nth(1).unwrap();
        assert_eq!(
            TrustedKeys::from_texts(&[bare]).unwrap().key_ids(),
            vec![k.id]
        );
    }
}
