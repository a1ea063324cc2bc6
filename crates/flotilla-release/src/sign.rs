//! Offline keys and signatures: minisign key pairs and `.minisig` signatures.
//!
//! Everything here reads and writes the minisign formats
//! (<https://jedisct1.github.io/minisign/>), so the `minisign` tool works on the same
//! files: `minisign -Vm manifest.json -p NAME.pub` verifies a signature made by
//! [`sign`], and `minisign -Sm manifest.json -s NAME.key` signs with a key made by
//! [`keygen`] without asking for a password.
//!
//! - public key (`NAME.pub`): `untrusted comment: minisign public key: <KEY ID>` and a
//!   base64 line (`Ed` ‖ 8-byte key id ‖ 32-byte Ed25519 public key);
//! - secret key (`NAME.key`): an untrusted comment and a base64 line; the keys made
//!   here are unencrypted (KDF `\0\0`, like `minisign -G -W`), so keep the file 0600 and
//!   offline;
//! - signature (`.minisig`): untrusted comment, base64 (`ED` ‖ key id ‖ Ed25519 over
//!   the BLAKE2b-512 of the data), `trusted comment: …`, base64 global signature over
//!   the signature and the trusted comment.
//!
//! A key id is written as minisign prints it: 16 uppercase hex digits of the 8 key-id
//! bytes read as a little-endian u64.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::manifest::is_release_word;

/// The files [`keygen`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFiles {
    /// `DIR/NAME.pub` (mode 0644): give it to agents (`--trusted-key`).
    pub public_path: PathBuf,
    /// `DIR/NAME.key` (mode 0600, unencrypted): keep it offline.
    pub secret_path: PathBuf,
    /// The key id, 16 uppercase hex digits (as minisign prints it).
    pub key_id: String,
}

/// Key generation, signing or key-reading failures.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// [`keygen`] would overwrite a file and `force` was not given.
    #[error("{0} already exists (`--force` overwrites it)")]
    Exists(PathBuf),
    /// The key name is not usable as a file name.
    #[error("key name {0:?} must be non-empty letters, digits and `._+-`, starting with a letter or digit")]
    BadName(String),
    /// Reading or writing a key file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The secret key is password-protected; only unencrypted keys can sign here.
    #[error("the secret key is password-protected; use a key made by `flotilla release keygen` (or `minisign -G -W`)")]
    EncryptedKey,
    /// The text is not a minisign key of the expected kind.
    #[error("not a minisign {kind}: {message}")]
    BadKey {
        /// `public key` or `secret key`.
        kind: &'static str,
        /// What the minisign crate said.
        message: String,
    },
    /// The trusted comment contains a line break (it is one line of the signature).
    #[error("the trusted comment must be one line")]
    BadComment,
    /// Signing failed (the minisign crate's error).
    #[error("signing failed: {0}")]
    Sign(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SignError + '_ {
    move |source| SignError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Formats 8 key-id bytes the way minisign prints a key id.
pub(crate) fn key_id_hex(keynum: &[u8]) -> String {
    let mut b = [0u8; 8];
    b.copy_from_slice(&keynum[..8]);
    format!("{:016X}", u64::from_le_bytes(b))
}

/// The base64 key line of a public key text: either a `.pub` file (an `untrusted
/// comment:` line, then the key) or the bare base64 line (`minisign -P` style).
pub(crate) fn public_key_line(text: &str) -> Option<&str> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next()?;
    let key = if first.starts_with("untrusted comment:") {
        lines.next()?
    } else {
        first
    };
    lines.next().is_none().then_some(key)
}

/// Creates a new minisign key pair: `DIR/NAME.pub` and `DIR/NAME.key` (unencrypted,
/// 0600), creating `DIR` if needed.
///
/// # Errors
/// [`SignError::BadName`] for a name that is not a plain file-name word;
/// [`SignError::Exists`] when either file exists and `force` is false; [`SignError::Io`].
pub fn keygen(dir: &Path, name: &str, force: bool) -> Result<KeyFiles, SignError> {
    if !is_release_word(name) {
        return Err(SignError::BadName(name.to_string()));
    }
    let public_path = dir.join(format!("{name}.pub"));
    let secret_path = dir.join(format!("{name}.key"));
    if !force {
        for p in [&public_path, &secret_path] {
            if p.symlink_metadata().is_ok() {
                return Err(SignError::Exists(p.clone()));
            }
        }
    }
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let pair = minisign::KeyPair::generate_unencrypted_keypair()
        .map_err(|e| SignError::Sign(e.to_string()))?;
    let key_id = key_id_hex(pair.pk.keynum());
    let pk_text = pair
        .pk
        .to_box()
        .map_err(|e| SignError::Sign(e.to_string()))?
        .into_string();
    let sk_text = pair
        .sk
        .to_box(Some(&format!("minisign unencrypted secret key {key_id}")))
        .map_err(|e| SignError::Sign(e.to_string()))?
        .into_string();
    write_key(&secret_path, sk_text.as_bytes(), 0o600, force)?;
    write_key(&public_path, pk_text.as_bytes(), 0o644, force)?;
    Ok(KeyFiles {
        public_path,
        secret_path,
        key_id,
    })
}

fn write_key(path: &Path, bytes: &[u8], mode: u32, force: bool) -> Result<(), SignError> {
    if force {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(path)(e)),
        }
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                SignError::Exists(path.to_path_buf())
            } else {
                io_err(path)(e)
            }
        })?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

/// Signs `manifest_bytes` with an unencrypted minisign secret key (the text of a `.key`
/// file) and returns the `.minisig` text (four lines, pre-hashed `ED` signature, the
/// default untrusted comment `signature from minisign secret key`).
///
/// `trusted_comment` is signed too and shown by verifiers (e.g. `timestamp:… file:…`).
///
/// # Errors
/// [`SignError::EncryptedKey`] for a password-protected key, [`SignError::BadKey`] for
/// text that is not a minisign secret key, [`SignError::BadComment`] for a multi-line
/// comment, [`SignError::Sign`].
pub fn sign(
    secret_key_text: &str,
    manifest_bytes: &[u8],
    trusted_comment: &str,
) -> Result<String, SignError> {
    if trusted_comment.contains(['\n', '\r']) {
        return Err(SignError::BadComment);
    }
    let sk_box =
        minisign::SecretKeyBox::from_string(secret_key_text.trim_start()).map_err(|e| {
            SignError::BadKey {
                kind: "secret key",
                message: e.to_string(),
            }
        })?;
    let sk = match sk_box.into_unencrypted_secret_key() {
        Ok(sk) => sk,
        Err(e) => {
            let message = e.to_string();
            if message.contains("encrypted") {
                return Err(SignError::EncryptedKey);
            }
            unchecked_secret_key(secret_key_text).ok_or(SignError::BadKey {
                kind: "secret key",
                message,
            })?
        }
    };
    let pk = minisign::PublicKey::from_secret_key(&sk).map_err(|e| SignError::BadKey {
        kind: "secret key",
        message: e.to_string(),
    })?;
    let sig = minisign::sign(
        Some(&pk),
        &sk,
        manifest_bytes,
        Some(trusted_comment),
        Some("signature from minisign secret key"),
    )
    .map_err(|e| SignError::Sign(e.to_string()))?;
    Ok(sig.into_string())
}

/// An unencrypted secret key whose checksum is all zeros, as the reference `minisign`
/// tool (0.11) writes with `-G -W`; the minisign crate calls those "corrupted". The key
/// is still checked: [`sign`] verifies its signature with the public half before
/// returning it.
fn unchecked_secret_key(text: &str) -> Option<minisign::SecretKey> {
    use ct_codecs::Decoder as _;
    // sig_alg 2, kdf_alg 2, chk_alg 2, salt 32, opslimit 8, memlimit 8, keynum 8, sk 64, chk 32
    const LEN: usize = 158;
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .nth(1)?;
    let bytes = ct_codecs::Base64::decode_to_vec(line, None).ok()?;
    let unencrypted = bytes.len() == LEN && bytes[..2] == *b"Ed" && bytes[2..4] == [0, 0];
    if !unencrypted || bytes[LEN - 32..].iter().any(|&b| b != 0) {
        return None;
    }
    minisign::SecretKey::from_bytes(&bytes).ok()
}

/// The key id (16 uppercase hex digits, as minisign prints it) of a minisign public key:
/// the text of a `.pub` file or its bare base64 line.
///
/// # Errors
/// [`SignError::BadKey`] when the text is not a minisign public key.
pub fn public_key_id(pub_text: &str) -> Result<String, SignError> {
    let bad = |message: String| SignError::BadKey {
        kind: "public key",
        message,
    };
    let line = public_key_line(pub_text)
        .ok_or_else(|| bad("expected an `untrusted comment:` line and a base64 key line".into()))?;
    let pk = minisign::PublicKey::from_base64(line).map_err(|e| bad(e.to_string()))?;
    Ok(key_id_hex(pk.keynum()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn keygen_writes_minisign_files_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let keys = keygen(dir.path(), "release", false).unwrap();
        assert_eq!(keys.key_id.len(), 16);
        let pub_text = std::fs::read_to_string(&keys.public_path).unwrap();
        assert!(pub_text.starts_with(&format!(
            "untrusted comment: minisign public key: {}\n",
            keys.key_id
        )));
        assert_eq!(public_key_id(&pub_text).unwrap(), keys.key_id);
        // The bare base64 line works too.
        assert_eq!(
            public_key_id(pub_text.lines().nth(1).unwrap()).unwrap(),
            keys.key_id
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&keys.secret_path), 0o600);
        assert_eq!(mode(&keys.public_path), 0o644);

        let e = keygen(dir.path(), "release", false).unwrap_err();
        assert!(matches!(e, SignError::Exists(_)), "{e}");
        assert_eq!(
            std::fs::read_to_string(&keys.public_path).unwrap(),
            pub_text
        );
        let again = keygen(dir.path(), "release", true).unwrap();
        assert_ne!(again.key_id, keys.key_id);
        assert!(matches!(
            keygen(dir.path(), "../x", false),
            Err(SignError::BadName(_))
        ));
    }

    #[test]
    fn signatures_verify_with_minisign_verify() {
        let dir = tempfile::tempdir().unwrap();
        let keys = keygen(dir.path(), "k", false).unwrap();
        let sk = std::fs::read_to_string(&keys.secret_path).unwrap();
        let data = b"{\"hello\": 1}\n";
        let sig = sign(&sk, data, "timestamp:1 file:manifest.json").unwrap();
        assert_eq!(sig.lines().count(), 4, "{sig}");
        let pk = minisign_verify::PublicKey::from_file(&keys.public_path).unwrap();
        let s = minisign_verify::Signature::decode(&sig).unwrap();
        assert_eq!(s.trusted_comment(), "timestamp:1 file:manifest.json");
        pk.verify(data, &s, false).unwrap();
        assert!(pk.verify(b"{\"hello\": 2}\n", &s, false).is_err());
        // And with the minisign crate's own verifier.
        let mpk = minisign::PublicKey::from_file(&keys.public_path).unwrap();
        let sbox = minisign::SignatureBox::from_string(&sig).unwrap();
        minisign::verify(
            &mpk,
            &sbox,
            std::io::Cursor::new(&data[..]),
            true,
            false,
            false,
        )
        .unwrap();
    }

    #[test]
    fn sign_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let keys = keygen(dir.path(), "k", false).unwrap();
        let sk = std::fs::read_to_string(&keys.secret_path).unwrap();
        assert!(matches!(
            sign(&sk, b"x", "a\nb"),
            Err(SignError::BadComment)
        ));
        assert!(matches!(
            sign("nonsense", b"x", ""),
            Err(SignError::BadKey { .. })
        ));
        let pub_text = std::fs::read_to_string(&keys.public_path).unwrap();
        assert!(matches!(
            sign(&pub_text, b"x", ""),
            Err(SignError::BadKey { .. })
        ));
        assert!(public_key_id("untrusted comment: x\nnot base64").is_err());
        assert!(public_key_id("").is_err());

        // A password-protected key (minisign's default) is refused with a clear error.
        let pair = minisign::KeyPair::generate_encrypted_keypair(Some("pw".into())).unwrap();
        let enc = pair.sk.to_box(None).unwrap().into_string();
        assert!(matches!(sign(&enc, b"x", ""), Err(SignError::EncryptedKey)));
    }
}
