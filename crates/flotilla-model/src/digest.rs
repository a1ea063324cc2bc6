//! Canonical JSON and SHA-256 digests.
//!
//! Canonical JSON here is: object keys sorted by their UTF-8 bytes, no insignificant
//! whitespace, strings and numbers as `serde_json` writes them. For the values Flotilla
//! hashes (no floats that need re-formatting) this matches RFC 8785 (JCS). A digest is
//! written `sha256:<64 lowercase hex digits>`.

use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// Serialises `value` as canonical JSON.
///
/// # Panics
/// Only if `value`'s `Serialize` implementation fails, which the model's types never do.
pub fn canonical_json<T: Serialize + ?Sized>(value: &T) -> String {
    let v = serde_json::to_value(value).expect("model types serialise to JSON");
    let mut out = String::new();
    write_canonical(&v, &mut out);
    out
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("string serialises"));
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// `sha256:<hex>` of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in hash.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// `sha256:<hex>` of the canonical JSON of `value`.
pub fn digest_of<T: Serialize + ?Sized>(value: &T) -> String {
    sha256_hex(canonical_json(value).as_bytes())
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
