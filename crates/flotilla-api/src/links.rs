//! The web dashboard's stable URLs (`/ui/…` on the authority's listener): one path per
//! object, shared by the dashboard's pages, the notifications' deep links, the TUI
//! and `flotilla ui OBJECT`, so that a link made by one face opens in another.
//!
//! Path segments are percent-encoded (RFC 3986 §3.3, via [`url`]) so that any name
//! the inventory allows stays one segment.

use std::fmt;

/// The dashboard's mount point on the authority's listener.
pub const UI_PREFIX: &str = "/ui";

/// An object of the dashboard with its own page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// The fleet overview: `/ui/`.
    Overview,
    /// A host: `/ui/hosts/{host}`.
    Host(String),
    /// A component (names are unique in an inventory): `/ui/components/{name}`.
    Component(String),
    /// Every stack: `/ui/stacks`.
    Stacks,
    /// A stack: `/ui/stacks/{name}`.
    Stack(String),
    /// The revision history: `/ui/revisions`.
    Revisions,
    /// A revision (digest or unique prefix): `/ui/revisions/{digest}`.
    Revision(String),
    /// Releases and rollouts: `/ui/releases`.
    Releases,
    /// A rollout: `/ui/rollouts/{id}`.
    Rollout(String),
    /// Every session: `/ui/sessions`.
    Sessions,
    /// A session: `/ui/sessions/{id}`.
    Session(u64),
    /// Open and answered questions: `/ui/questions`.
    Questions,
    /// A question: `/ui/questions/{id}`.
    Question(u64),
    /// Alerts received: `/ui/alerts`.
    Alerts,
    /// The sign-in page: `/ui/login`.
    Login,
}

/// Why `flotilla ui`'s OBJECT argument names no page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` names no dashboard page: expected one of {KINDS} (e.g. `component/llama`, `question/12`)")]
pub struct UnknownObject {
    /// What was given.
    pub given: String,
}

/// The object kinds [`Link::parse`] takes, for messages.
pub const KINDS: &str = "overview, host/NAME, component/NAME, stacks, stack/NAME, revisions, revision/DIGEST, releases, rollout/ID, sessions, session/ID, questions, question/ID, alerts";

fn seg(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

impl Link {
    /// The path on the authority, starting with [`UI_PREFIX`].
    pub fn path(&self) -> String {
        let rest = match self {
            Link::Overview => String::new(),
            Link::Host(h) => format!("hosts/{}", seg(h)),
            Link::Component(c) => format!("components/{}", seg(c)),
            Link::Stacks => "stacks".into(),
            Link::Stack(s) => format!("stacks/{}", seg(s)),
            Link::Revisions => "revisions".into(),
            Link::Revision(d) => format!("revisions/{}", seg(d)),
            Link::Releases => "releases".into(),
            Link::Rollout(id) => format!("rollouts/{}", seg(id)),
            Link::Sessions => "sessions".into(),
            Link::Session(id) => format!("sessions/{id}"),
            Link::Questions => "questions".into(),
            Link::Question(id) => format!("questions/{id}"),
            Link::Alerts => "alerts".into(),
            Link::Login => "login".into(),
        };
        format!("{UI_PREFIX}/{rest}")
    }

    /// The absolute URL under `base` (the authority's public URL, e.g.
    /// `https://flotilla.example:7443`; a trailing `/` is ignored).
    pub fn url(&self, base: &str) -> String {
        format!("{}{}", base.trim_end_matches('/'), self.path())
    }

    /// Parses `flotilla ui`'s OBJECT: `KIND/NAME` or a bare list kind (see
    /// [`KINDS`]); singular and plural kinds are both taken (`hosts/a` = `host/a`).
    ///
    /// # Errors
    /// [`UnknownObject`] for an unknown kind, a missing or extra name, or an id that
    /// is not a number where one is needed.
    pub fn parse(object: &str) -> Result<Link, UnknownObject> {
        let bad = || UnknownObject {
            given: object.to_string(),
        };
        let (kind, name) = match object.split_once('/') {
            Some((k, n)) if !n.is_empty() => (k, Some(n)),
            Some(_) => return Err(bad()),
            None => (object, None),
        };
        let number = |n: &str| n.parse::<u64>().map_err(|_| bad());
        Ok(match (kind, name) {
            ("" | "overview", None) => Link::Overview,
            ("host" | "hosts", Some(n)) => Link::Host(n.into()),
            ("component" | "components", Some(n)) => Link::Component(n.into()),
            ("stack" | "stacks", Some(n)) => Link::Stack(n.into()),
            ("stacks", None) => Link::Stacks,
            ("revision" | "revisions", Some(n)) => Link::Revision(n.into()),
            ("revisions", None) => Link::Revisions,
            ("releases" | "release", None) => Link::Releases,
            ("rollout" | "rollouts", Some(n)) => Link::Rollout(n.into()),
            ("session" | "sessions", Some(n)) => Link::Session(number(n)?),
            ("sessions", None) => Link::Sessions,
            ("question" | "questions", Some(n)) => Link::Question(number(n)?),
            ("questions", None) => Link::Questions,
            ("alerts", None) => Link::Alerts,
            _ => return Err(bad()),
        })
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_stable_and_one_segment_per_name() {
        assert_eq!(Link::Overview.path(), "/ui/");
        assert_eq!(
            Link::Component("llama".into()).path(),
            "/ui/components/llama"
        );
        assert_eq!(Link::Host("a b/c".into()).path(), "/ui/hosts/a%20b%2Fc");
        assert_eq!(
            Link::Question(12).url("https://x:7443/"),
            "https://x:7443/ui/questions/12"
        );
    }

    #[test]
    fn objects_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(
            Link::parse("component/llama").unwrap(),
            Link::Component("llama".into())
        );
        assert_eq!(Link::parse("questions/3").unwrap(), Link::Question(3));
        assert_eq!(Link::parse("questions").unwrap(), Link::Questions);
        assert_eq!(Link::parse("overview").unwrap(), Link::Overview);
        let e = Link::parse("question/x").unwrap_err();
        assert!(e.to_string().contains("question/ID"), "{e}");
        assert!(Link::parse("host").is_err());
        assert!(Link::parse("host/").is_err());
        assert!(Link::parse("nope/1").is_err());
    }
}
