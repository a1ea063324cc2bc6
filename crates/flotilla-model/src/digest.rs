//! Canonical JSON and SHA-256 digests.
//!
//! Canonical JSON is the JSON Canonicalization Scheme (RFC 8785, JCS): object keys
//! sorted, no insignificant whitespace. Every type Flotilla digests is declared so that
//! `serde_json`'s compact output already is its canonical form: struct fields in
//! alphabetical order, maps as `BTreeMap`, enums externally tagged, no floats. That
//! lets digests stream straight into SHA-256 without building a JSON tree; a test
//! (`flotilla-plan/tests/canonical.rs`) checks the output against an independent JCS
//! implementation. A digest is written `sha256:<64 lowercase hex digits>`.

use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// Serialises `value` as canonical JSON (see the module docs for the types this holds for).
///
/// # Panics
/// Only if `value`'s `Serialize` implementation fails, which the model's types never do.
pub fn canonical_json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("model types serialise to JSON")
}

/// Feeds written bytes to a SHA-256 hasher.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Formats a finished SHA-256 hash as `sha256:<64 lowercase hex digits>`.
pub fn format_sha256(hash: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(7 + 2 * hash.len());
    s.push_str("sha256:");
    for b in hash {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// `sha256:<hex>` of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format_sha256(&Sha256::digest(bytes))
}

/// `sha256:<hex>` of the canonical JSON of `value`, streamed into the hash.
///
/// # Panics
/// Only if `value`'s `Serialize` implementation fails, which the model's types never do.
pub fn digest_of<T: Serialize + ?Sized>(value: &T) -> String {
    let mut w = HashWriter(Sha256::new());
    serde_json::to_writer(&mut w, value).expect("model types serialise to JSON");
    format_sha256(&w.0.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_change_the_digest() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":{"d":[1,2],"c":"x"}}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"c":"x","d":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"c":"x","d":[1,2]},"b":1}"#);
        assert_eq!(digest_of(&a), digest_of(&b));
        assert_eq!(
            sha256_hex(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
