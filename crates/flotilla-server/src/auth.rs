//! Credentials: random secrets shown once, stored only as their SHA-256.
//!
//! A secret is `<prefix><64 lowercase hex digits>` (256 random bits from the
//! operating system): `flt-join-…` (one-time join token), `flt-agent-…` (an agent's
//! credential), `flt-op-…` (an operator's credential), `flt-ui-…` (a dashboard sign-in
//! link's, one use), `flt-metrics-…` (a metrics scraper's: `/metrics` only). Requests carry them as
//! `Authorization: Bearer <secret>` (RFC 6750).

use flotilla_model::digest::sha256_hex;

/// Prefix of a join token.
pub const JOIN_PREFIX: &str = "flt-join-";
/// Prefix of an agent credential.
pub const AGENT_PREFIX: &str = "flt-agent-";
/// Prefix of an operator credential.
pub const OPERATOR_PREFIX: &str = "flt-op-";
/// Prefix of a metrics scraper's credential (`flotilla serve credentials create
/// --kind metrics`).
pub const METRICS_PREFIX: &str = "flt-metrics-";
/// Prefix of a dashboard sign-in link's credential (`flotilla serve ui-link`).
pub const UI_LINK_PREFIX: &str = "flt-ui-";

/// A new random secret with `prefix`.
///
/// # Panics
/// If the operating system has no randomness to give (`getrandom` fails), which
/// makes any credential unsafe to issue.
pub fn new_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    let mut s = String::with_capacity(prefix.len() + 64);
    s.push_str(prefix);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// What the authority stores of a secret: `sha256:<hex>` of its text.
pub fn hash_secret(secret: &str) -> String {
    sha256_hex(secret.trim().as_bytes())
}

/// The bearer token of an `Authorization` header value, if it is one.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_hashed() {
        let a = new_secret(JOIN_PREFIX);
        let b = new_secret(JOIN_PREFIX);
        assert_ne!(a, b);
        assert_eq!(a.len(), JOIN_PREFIX.len() + 64);
        assert!(hash_secret(&a).starts_with("sha256:"));
        assert!(!hash_secret(&a).contains(&a[JOIN_PREFIX.len()..]));
        assert_eq!(bearer("Bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }
}
