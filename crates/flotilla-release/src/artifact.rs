//! Artifact verification: SHA-256 and size, measured while the bytes are copied.
//!
//! Used on the download path (verify while writing the temp file, so the bytes are read
//! once) and by `flotilla release verify`. Sizes are bytes; digests are 64 lowercase hex
//! (the manifest's form).

use std::io::{ErrorKind, Read, Write};
use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::reason::{Reason, Refusal};

/// Copy buffer: 1 MiB.
const BUF: usize = 1 << 20;

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Copies `r` to `w` while hashing, and checks the bytes against `sha256_hex` (64 hex,
/// an optional `sha256:` prefix and upper case are tolerated) and `size` (bytes).
/// Returns the number of bytes copied (= `size`).
///
/// Stops with [`Reason::SizeMismatch`] as soon as more than `size` bytes arrive (the
/// excess is not written), or at EOF when fewer did; [`Reason::DigestMismatch`] at the
/// end when the digest differs. `w` may hold a prefix of the data after a refusal: the
/// caller discards it.
///
/// # Errors
/// Those refusals, [`Reason::DownloadFailed`] when reading fails, [`Reason::InstallFailed`]
/// when writing fails.
pub fn verify_stream<R: Read, W: Write>(
    mut r: R,
    mut w: W,
    sha256_hex: &str,
    size: u64,
) -> Result<u64, Refusal> {
    let want = normalise(sha256_hex);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    let mut total: u64 = 0;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Refusal::new(
                    Reason::DownloadFailed,
                    format!("reading the artifact after {total} bytes: {e}"),
                ))
            }
        };
        total += n as u64;
        if total > size {
            return Err(Refusal::new(
                Reason::SizeMismatch,
                format!("more than the expected {size} bytes arrived ({total} so far)"),
            ));
        }
        hasher.update(&buf[..n]);
        w.write_all(&buf[..n]).map_err(|e| {
            Refusal::new(
                Reason::InstallFailed,
                format!("writing the artifact after {total} bytes: {e}"),
            )
        })?;
    }
    w.flush()
        .map_err(|e| Refusal::new(Reason::InstallFailed, format!("writing the artifact: {e}")))?;
    if total != size {
        return Err(Refusal::new(
            Reason::SizeMismatch,
            format!("expected {size} bytes, got {total}"),
        ));
    }
    let got = hex(&hasher.finalize());
    if got != want {
        return Err(Refusal::new(
            Reason::DigestMismatch,
            format!("expected sha256 {want}, got {got}"),
        ));
    }
    Ok(total)
}

/// Verifies a file's SHA-256 and size (see [`verify_stream`]); returns its size.
///
/// # Errors
/// [`Reason::SizeMismatch`] (checked against the file's length before hashing too),
/// [`Reason::DigestMismatch`], [`Reason::DownloadFailed`] when the file cannot be read.
pub fn verify_file(path: &Path, sha256_hex: &str, size: u64) -> Result<u64, Refusal> {
    let f = std::fs::File::open(path)
        .map_err(|e| Refusal::new(Reason::DownloadFailed, format!("{}: {e}", path.display())))?;
    if let Ok(meta) = f.metadata() {
        if meta.is_file() && meta.len() != size {
            return Err(Refusal::new(
                Reason::SizeMismatch,
                format!(
                    "expected {size} bytes, {} has {}",
                    path.display(),
                    meta.len()
                ),
            ));
        }
    }
    verify_stream(f, std::io::sink(), sha256_hex, size)
}

/// SHA-256 of a file, 64 lowercase hex (the manifest's form).
///
/// # Errors
/// Reading the file.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    sha256_and_size(path).map(|(sha, _)| sha)
}

/// SHA-256 (64 lowercase hex) and size in bytes of a file, measured in one read.
///
/// # Errors
/// Reading the file.
pub fn sha256_and_size(path: &Path) -> std::io::Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((hex(&hasher.finalize()), total))
}

fn normalise(sha: &str) -> String {
    sha.trim()
        .strip_prefix("sha256:")
        .unwrap_or(sha.trim())
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    #[test]
    fn copies_and_verifies() {
        let data: Vec<u8> = (0..3 * BUF + 17).map(|i| (i % 251) as u8).collect();
        let sha = digest(&data);
        let mut out = Vec::new();
        assert_eq!(
            verify_stream(&data[..], &mut out, &sha, data.len() as u64).unwrap(),
            data.len() as u64
        );
        assert_eq!(out, data);
        // The measured form is tolerated.
        verify_stream(
            &data[..],
            std::io::sink(),
            &format!("sha256:{}", sha.to_uppercase()),
            data.len() as u64,
        )
        .unwrap();
    }

    #[test]
    fn corrupt_artifact_is_a_digest_mismatch() {
        let mut data = vec![7u8; 1000];
        let sha = digest(&data);
        data[500] ^= 1;
        let r = verify_stream(&data[..], std::io::sink(), &sha, 1000).unwrap_err();
        assert_eq!(r.reason, Reason::DigestMismatch);
        assert!(r.detail.contains(&sha), "{r}");
    }

    #[test]
    fn wrong_size_is_a_size_mismatch() {
        let data = vec![7u8; 1000];
        let sha = digest(&data);
        let r = verify_stream(&data[..], std::io::sink(), &sha, 1001).unwrap_err();
        assert_eq!(r.reason, Reason::SizeMismatch);
        assert_eq!(r.detail, "expected 1001 bytes, got 1000");

        // Too long: stops as soon as the excess arrives, writing none of it.
        let big = vec![1u8; 2 * BUF];
        let mut out = Vec::new();
        let r = verify_stream(&big[..], &mut out, &sha, 10).unwrap_err();
        assert_eq!(r.reason, Reason::SizeMismatch);
        assert!(out.is_empty());
        // An endless source is cut off too.
        let r = verify_stream(
            std::io::repeat(0),
            std::io::sink(),
            &sha,
            3 * BUF as u64 + 1,
        )
        .unwrap_err();
        assert_eq!(r.reason, Reason::SizeMismatch);
    }

    #[test]
    fn read_and_write_errors() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("connection reset"))
            }
        }
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sha = digest(b"abc");
        assert_eq!(
            verify_stream(Broken, std::io::sink(), &sha, 3)
                .unwrap_err()
                .reason,
            Reason::DownloadFailed
        );
        assert_eq!(
            verify_stream(&b"abc"[..], Broken, &sha, 3)
                .unwrap_err()
                .reason,
            Reason::InstallFailed
        );
    }

    #[test]
    fn files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"hello").unwrap();
        let (sha, size) = sha256_and_size(&p).unwrap();
        assert_eq!(sha256_file(&p).unwrap(), sha);
        assert_eq!(
            sha,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(size, 5);
        assert_eq!(verify_file(&p, &sha, 5).unwrap(), 5);
        assert_eq!(
            verify_file(&p, &sha, 6).unwrap_err().reason,
            Reason::SizeMismatch
        );
        std::fs::write(&p, b"hellO").unwrap();
        assert_eq!(
            verify_file(&p, &sha, 5).unwrap_err().reason,
            Reason::DigestMismatch
        );
        assert_eq!(
            verify_file(&dir.path().join("missing"), &sha, 5)
                .unwrap_err()
                .reason,
            Reason::DownloadFailed
        );
    }
}
