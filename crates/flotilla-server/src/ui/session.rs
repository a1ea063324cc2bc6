//! Dashboard sessions: who signed in, with which role, until when, and the CSRF
//! token every state-changing request of the session carries. Held in memory
//! (a restart of the authority signs everyone out); the session cookie names one.
//!
//! The cookie ([`COOKIE`]) is `HttpOnly; Secure; SameSite=Strict; Path=/ui`
//! (RFC 6265bis) and expires with the session ([`LIFETIME`]).

use flotilla_store::authority::UiRole;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The session cookie's name.
pub const COOKIE: &str = "flotilla_ui";

/// How long a session lasts after sign-in (12 h).
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// At most this many live sessions; signing in beyond it ends the oldest.
const MAX_SESSIONS: usize = 10_000;

/// One signed-in browser.
#[derive(Debug)]
pub struct Session {
    /// Its id (the cookie's value): 256 random bits, hex.
    pub id: String,
    /// Who signed in, for the page header (`operator`, `ui-link 3`).
    pub who: String,
    /// What it may do.
    pub role: UiRole,
    /// The token state-changing requests carry (`X-CSRF-Token` or a `csrf` form
    /// field): 256 random bits, hex.
    pub csrf: String,
    /// The hash of the credential it signed in with: the session lasts only while
    /// the store still knows that credential (a revoked link ends it).
    pub credential_hash: String,
    /// The sign-in link it came from, if any.
    pub link: Option<u64>,
    /// When it ends.
    pub expires: Instant,
}

impl Session {
    /// Whether it may act (start, stop, answer…): the operator role.
    pub fn may_act(&self) -> bool {
        self.role == UiRole::Operator
    }
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the operating system's random source");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The live sessions.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    /// Starts a session for `who` with `role`, signed in with the credential whose
    /// hash is `credential_hash` (from link `link`, if one).
    pub fn start(
        &self,
        who: String,
        role: UiRole,
        credential_hash: String,
        link: Option<u64>,
    ) -> Arc<Session> {
        let now = Instant::now();
        let s = Arc::new(Session {
            id: random_hex(),
            who,
            role,
            csrf: random_hex(),
            credential_hash,
            link,
            expires: now + LIFETIME,
        });
        let mut map = self.map.lock().expect("not poisoned");
        map.retain(|_, v| v.expires > now);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map.values().min_by_key(|v| v.expires).map(|v| v.id.clone()) {
                map.remove(&oldest);
            }
        }
        map.insert(s.id.clone(), s.clone());
        s
    }

    /// The live session with this id.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let mut map = self.map.lock().expect("not poisoned");
        match map.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id`.
    pub fn end(&self, id: &str) {
        self.map.lock().expect("not poisoned").remove(id);
    }

    /// Ends every session opened with sign-in link `link`; how many.
    pub fn end_link(&self, link: u64) -> usize {
        let mut map = self.map.lock().expect("not poisoned");
        let before = map.len();
        map.retain(|_, v| v.link != Some(link));
        before - map.len()
    }
}

/// The session id in a `Cookie` header value (RFC 6265 §4.2: `name=value` pairs
/// separated by `; `).
pub fn from_cookie_header(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim_matches('"'))
        .filter(|v| !v.is_empty())
}

/// The `Set-Cookie` value that carries session `id`.
pub fn set_cookie(id: &str) -> String {
    format!(
        "{COOKIE}={id}; HttpOnly; Secure; SameSite=Strict; Path=/ui; Max-Age={}",
        LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; Secure; SameSite=Strict; Path=/ui; Max-Age=0")
}

/// Whether `given` is `expected`, in time independent of where they differ.
pub fn same_token(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_start_end_and_end_with_their_link() {
        let s = Sessions::default();
        let a = s.start("operator".into(), UiRole::Operator, "h1".into(), None);
        let b = s.start("ui-link 3".into(), UiRole::Viewer, "h2".into(), Some(3));
        assert_ne!(a.id, b.id);
        assert_ne!(a.csrf, a.id);
        assert!(s.get(&a.id).is_some() && s.get(&b.id).is_some());
        assert_eq!(s.end_link(3), 1);
        assert!(s.get(&b.id).is_none());
        s.end(&a.id);
        assert!(s.get(&a.id).is_none());
    }

    #[test]
    fn the_cookie_is_found_among_others_and_tokens_compare() {
        assert_eq!(from_cookie_header("a=1; flotilla_ui=abc; b=2"), Some("abc"));
        assert_eq!(from_cookie_header("flotilla_uix=abc"), None);
        assert_eq!(from_cookie_header("flotilla_ui="), None);
        let c = set_cookie("abc");
        for part in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Path=/ui",
            "Max-Age=43200",
        ] {
            assert!(c.contains(part), "{c}");
        }
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abd", "abc"));
        assert!(!same_token("ab", "abc"));
    }
}
