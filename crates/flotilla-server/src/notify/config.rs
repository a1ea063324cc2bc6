//! `notifications.toml` in the authority directory: the webhooks the authority posts
//! its notifications to. Absent file: no notifications. Read and checked at start;
//! every error names the file and line:column.
//!
//! ```toml
//! [[webhook]]
//! name = "phone"                       # optional; default `webhook-N` (1-based)
//! url = "https://ntfy.example/flotilla" # http or https
//! shape = "ntfy"                        # "json" (default), "ntfy" or "slack"
//! kinds = ["question-opened", "rollout-halted"]  # optional; default every kind
//! token_file = "/etc/flotilla/ntfy.token"        # optional: `Authorization: Bearer <token>`
//! # token_env = "NTFY_TOKEN"                     # or from the environment
//! headers = { "X-Team" = "inference" }           # optional extra headers
//! max_attempts = 6                               # optional; 1..=20, default 6
//! ```

use super::event::Kind;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The file's name in the authority directory.
pub const NOTIFICATIONS_FILE: &str = "notifications.toml";

/// Attempts per message and webhook unless `max_attempts` says otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 6;

/// How a message is laid out for its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Flotilla's own JSON document ([`super::shapes::JsonMessage`]).
    Json,
    /// ntfy's HTTP publish: the body is the message, `Title`, `Priority`, `Tags` and
    /// `Click` headers (<https://docs.ntfy.sh/publish/>).
    Ntfy,
    /// A Slack incoming webhook: `{"text": …}` with the link as `<url|label>`
    /// (<https://docs.slack.dev/messaging/sending-messages-using-incoming-webhooks/>).
    Slack,
}

impl Shape {
    /// Its name in `notifications.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Json => "json",
            Shape::Ntfy => "ntfy",
            Shape::Slack => "slack",
        }
    }
}

/// One checked `[[webhook]]`.
#[derive(Clone)]
pub struct Webhook {
    /// Its name (in records, metrics and logs).
    pub name: String,
    /// Where to POST.
    pub url: reqwest::Url,
    /// The layout.
    pub shape: Shape,
    /// The kinds it gets (never empty).
    pub kinds: Vec<Kind>,
    /// Extra headers, the bearer token's `Authorization` among them.
    pub headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    /// Attempts per message (≥ 1).
    pub max_attempts: u32,
}

impl std::fmt::Debug for Webhook {
    // Headers may hold secrets: only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("name", &self.name)
            .field("url", &self.url.as_str())
            .field("shape", &self.shape)
            .field("kinds", &self.kinds)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

/// `notifications.toml`, checked.
#[derive(Debug, Clone, Default)]
pub struct NotifyConfig {
    /// The webhooks, in file order.
    pub webhooks: Vec<Webhook>,
}

/// Why `notifications.toml` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    /// It cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not valid.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    webhook: Vec<Spanned<RawWebhook>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    name: Option<Spanned<String>>,
    url: Spanned<String>,
    shape: Option<Spanned<String>>,
    kinds: Option<Vec<Spanned<String>>>,
    token_file: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    max_attempts: Option<Spanned<i64>>,
}

impl NotifyConfig {
    /// Reads and checks `path`. Tokens are read now (`token_file`, `token_env`).
    ///
    /// # Errors
    /// [`NotifyConfigError`]: unreadable, bad TOML, an unknown key, shape or kind,
    /// a URL that is not `http(s)`, a token file that cannot be read, an unset
    /// `token_env`, a header that is not valid, two webhooks with one name.
    pub fn load(path: &Path) -> Result<NotifyConfig, NotifyConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| NotifyConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text, &|name| std::env::var(name).ok())
    }

    /// Checks `text` (the contents of `path`); `env` looks up `token_env`.
    ///
    /// # Errors
    /// As [`NotifyConfig::load`].
    pub fn parse(
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<NotifyConfig, NotifyConfigError> {
        let at = |offset: usize, message: String| {
            let before = &text[..offset.min(text.len())];
            NotifyConfigError::Invalid {
                path: path.to_owned(),
                line: before.matches('\n').count() + 1,
                column: before.chars().count()
                    - before
                        .rfind('\n')
                        .map_or(0, |i| before[..=i].chars().count())
                    + 1,
                message,
            }
        };
        let file: File = toml::from_str(text)
            .map_err(|e| at(e.span().map_or(0, |s| s.start), e.message().to_string()))?;
        let mut webhooks: Vec<Webhook> = Vec::new();
        for (i, w) in file.webhook.iter().enumerate() {
            let start = w.span().start;
            let w = w.get_ref();
            let name = match &w.name {
                Some(n) if n.get_ref().trim().is_empty() => {
                    return Err(at(n.span().start, "a webhook's `name` is empty".into()))
                }
                Some(n) => n.get_ref().clone(),
                None => format!("webhook-{}", i + 1),
            };
            if webhooks.iter().any(|o| o.name == name) {
                return Err(at(
                    w.name.as_ref().map_or(start, |n| n.span().start),
                    format!("two webhooks are named `{name}`"),
                ));
            }
            let url = reqwest::Url::parse(w.url.get_ref())
                .map_err(|e| at(w.url.span().start, format!("`url` is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(at(
                    w.url.span().start,
                    format!("`url` must be http:// or https:// with a host, not `{url}`"),
                ));
            }
            let shape = match w.shape.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
                None | Some(("json", _)) => Shape::Json,
                Some(("ntfy", _)) => Shape::Ntfy,
                Some(("slack", _)) => Shape::Slack,
                Some((other, span)) => {
                    return Err(at(
                        span.start,
                        format!("unknown shape `{other}`: json, ntfy or slack"),
                    ))
                }
            };
            let kinds = match &w.kinds {
                None => Kind::ALL.to_vec(),
                Some(list) if list.is_empty() => {
                    return Err(at(
                        start,
                        "`kinds` is empty: leave it out for every kind".into(),
                    ))
                }
                Some(list) => {
                    let mut kinds = Vec::new();
                    for k in list {
                        let kind = Kind::parse(k.get_ref()).ok_or_else(|| {
                            at(
                                k.span().start,
                                format!(
                                    "unknown kind `{}`: {}",
                                    k.get_ref(),
                                    Kind::ALL.map(Kind::as_str).join(", ")
                                ),
                            )
                        })?;
                        if !kinds.contains(&kind) {
                            kinds.push(kind);
                        }
                    }
                    kinds
                }
            };
            let mut headers = Vec::new();
            for (k, v) in &w.headers {
                let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| at(v.span().start, format!("`{k}` is not a header name")))?;
                let value = reqwest::header::HeaderValue::from_str(v.get_ref()).map_err(|_| {
                    at(
                        v.span().start,
                        format!("the value of header `{k}` is not valid"),
                    )
                })?;
                headers.push((name, value));
            }
            let token = match (&w.token_file, &w.token_env) {
                (Some(f), Some(_)) => {
                    return Err(at(
                        f.span().start,
                        "`token_file` and `token_env` both given: one of them".into(),
                    ))
                }
                (Some(f), None) => Some((
                    std::fs::read_to_string(f.get_ref())
                        .map_err(|e| {
                            at(
                                f.span().start,
                                format!("cannot read token file {}: {e}", f.get_ref()),
                            )
                        })?
                        .trim()
                        .to_string(),
                    f.span().start,
                )),
                (None, Some(e)) => Some((
                    env(e.get_ref()).ok_or_else(|| {
                        at(
                            e.span().start,
                            format!("environment variable {} is not set", e.get_ref()),
                        )
                    })?,
                    e.span().start,
                )),
                (None, None) => None,
            };
            if let Some((token, offset)) = token {
                let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                    .ok()
                    .filter(|_| !token.is_empty())
                    .ok_or_else(|| {
                        at(offset, "the token is empty or not valid in a header".into())
                    })?;
                value.set_sensitive(true);
                headers.push((reqwest::header::AUTHORIZATION, value));
            }
            let max_attempts = match &w.max_attempts {
                None => DEFAULT_MAX_ATTEMPTS,
                Some(m) if (1..=20).contains(m.get_ref()) => *m.get_ref() as u32,
                Some(m) => {
                    return Err(at(
                        m.span().start,
                        format!("`max_attempts` must be 1 to 20, not {}", m.get_ref()),
                    ))
                }
            };
            webhooks.push(Webhook {
                name,
                url,
                shape,
                kinds,
                headers,
                max_attempts,
            });
        }
        Ok(NotifyConfig { webhooks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<NotifyConfig, NotifyConfigError> {
        NotifyConfig::parse(Path::new("notifications.toml"), text, &|n| {
            (n == "TOKEN").then(|| "s3cret".to_string())
        })
    }

    #[test]
    fn webhooks_parse_with_their_defaults() {
        let c = parse(
            "[[webhook]]\nurl = \"http://127.0.0.1:9/x\"\n\n[[webhook]]\nname = \"phone\"\nurl = \"https://ntfy.example/t\"\nshape = \"ntfy\"\nkinds = [\"question-opened\"]\ntoken_env = \"TOKEN\"\nheaders = { \"X-Team\" = \"a\" }\nmax_attempts = 2\n",
        )
        .unwrap();
        assert_eq!(c.webhooks.len(), 2);
        let a = &c.webhooks[0];
        assert_eq!((a.name.as_str(), a.shape), ("webhook-1", Shape::Json));
        assert_eq!(a.kinds, Kind::ALL.to_vec());
        assert_eq!(a.max_attempts, DEFAULT_MAX_ATTEMPTS);
        let b = &c.webhooks[1];
        assert_eq!((b.name.as_str(), b.shape), ("phone", Shape::Ntfy));
        assert_eq!(b.kinds, vec![Kind::QuestionOpened]);
        assert_eq!(b.max_attempts, 2);
        let h: Vec<(String, String)> = b
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        assert!(h.contains(&("x-team".into(), "a".into())), "{h:?}");
        assert!(
            h.contains(&("authorization".into(), "Bearer s3cret".into())),
            "{h:?}"
        );
        assert!(!format!("{b:?}").contains("s3cret"));
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let cases = [
            ("[[webhook]]\nurl = \"ftp://x/\"\n", "notifications.toml:2:7: `url` must be http"),
            ("[[webhook]]\nurl = \"http://x/\"\nshape = \"teams\"\n", "notifications.toml:3:9: unknown shape `teams`"),
            ("[[webhook]]\nurl = \"http://x/\"\nkinds = [\"question-opened\", \"nope\"]\n", "notifications.toml:3:29: unknown kind `nope`: question-opened, "),
            ("[[webhook]]\nurl = \"http://x/\"\ntoken_env = \"UNSET\"\n", "notifications.toml:3:13: environment variable UNSET is not set"),
            ("[[webhook]]\nurl = \"http://x/\"\nmax_attempts = 0\n", "notifications.toml:3:16: `max_attempts` must be 1 to 20"),
            ("[[webhook]]\nurl = \"http://x/\"\nsecret = 1\n", "notifications.toml:3:1: unknown field `secret`"),
            ("[[webhook]]\nname = \"a\"\nurl = \"http://x/\"\n[[webhook]]\nname = \"a\"\nurl = \"http://y/\"\n", "notifications.toml:5:8: two webhooks are named `a`"),
            ("[[webhook]]\nurl = \"http://x/\"\ntoken_file = \"/nonexistent/t\"\n", "notifications.toml:3:14: cannot read token file /nonexistent/t"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }
}
