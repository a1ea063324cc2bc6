//! How an [`Event`] is laid out for each receiver ([`Shape`]): the body and the
//! headers of one POST (pure).

use super::config::Shape;
use super::event::Event;
use reqwest::header::{HeaderName, HeaderValue, CONTENT_TYPE};

/// The generic JSON shape's document (`shape = "json"`), `Content-Type:
/// application/json`:
///
/// ```json
/// {"id": 7, "kind": "question-opened", "severity": "warning",
///  "title": "question 12 waits …", "text": "…",
///  "object": "/ui/questions/12", "link": "https://authority:7443/ui/questions/12",
///  "at_ms": 1767225600000, "dedup_key": "question/12"}
/// ```
///
/// `id` is the authority's record of this notification (`GET /v1/notifications`);
/// `dedup_key` is the same for the same event; `object` is the dashboard path and
/// `link` its absolute URL under the authority's public URL; `at_ms` is
/// milliseconds since the Unix epoch; `kind` is one of
/// [`super::event::Kind::ALL`]'s names; `severity` is `info`, `warning` or
/// `critical`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JsonMessage {
    /// The record's id.
    pub id: u64,
    /// What happened.
    pub kind: String,
    /// How urgent.
    pub severity: String,
    /// One line.
    pub title: String,
    /// The details.
    pub text: String,
    /// The dashboard path (`/ui/…`).
    pub object: String,
    /// The dashboard URL.
    pub link: String,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// The same event's key.
    pub dedup_key: String,
}

/// One POST's body and headers.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The headers (besides the webhook's own).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body.
    pub body: Vec<u8>,
}

/// A header value from text: as is when it is visible ASCII, else RFC 2047's
/// encoded-word (`=?UTF-8?B?…?=`), which ntfy decodes.
fn header_text(s: &str) -> HeaderValue {
    use ct_codecs::Encoder as _;
    let plain = s.bytes().all(|b| (0x20..0x7f).contains(&b));
    let text = if plain {
        s.to_string()
    } else {
        let b64 = ct_codecs::Base64::encode_to_string(s.as_bytes()).unwrap_or_default();
        format!("=?UTF-8?B?{b64}?=")
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Slack's escaping of `&`, `<` and `>` in message text (its control characters).
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `event` (record `id`) for `shape`, its link under `public_url`.
pub fn render(shape: Shape, id: u64, event: &Event, public_url: &str) -> Rendered {
    let link = event.object.url(public_url);
    let severity = event.kind.severity();
    match shape {
        Shape::Json => Rendered {
            headers: vec![(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body: serde_json::to_vec(&JsonMessage {
                id,
                kind: event.kind.as_str().into(),
                severity: severity.as_str().into(),
                title: event.title.clone(),
                text: event.text.clone(),
                object: event.object.path(),
                link,
                at_ms: event.at_ms,
                dedup_key: event.dedup_key.clone(),
            })
            .expect("serialises"),
        },
        Shape::Ntfy => Rendered {
            headers: vec![
                (
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                ),
                (HeaderName::from_static("title"), header_text(&event.title)),
                (
                    HeaderName::from_static("priority"),
                    HeaderValue::from(u16::from(severity.ntfy_priority())),
                ),
                (
                    HeaderName::from_static("tags"),
                    header_text(&format!("{},{}", severity.as_str(), event.kind.as_str())),
                ),
                (HeaderName::from_static("click"), header_text(&link)),
            ],
            body: event.text.clone().into_bytes(),
        },
        Shape::Slack => Rendered {
            headers: vec![(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body: serde_json::to_vec(&serde_json::json!({
                "text": format!(
                    "*{}*\n{}\n<{}|{}>",
                    slack_escape(&event.title),
                    slack_escape(&event.text),
                    link,
                    slack_escape(&event.object.path()),
                )
            }))
            .expect("serialises"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::event::Kind;
    use flotilla_api::links::Link;

    fn event() -> Event {
        Event {
            kind: Kind::QuestionOpened,
            title: "question 12 waits: Bash <x> & y".into(),
            text: "rm -rf ./build".into(),
            object: Link::Question(12),
            at_ms: 5,
            dedup_key: "question/12".into(),
        }
    }

    #[test]
    fn slack_escapes_its_control_characters_and_links_the_object() {
        let r = render(Shape::Slack, 1, &event(), "https://a:1");
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v["text"],
            "*question 12 waits: Bash &lt;x&gt; &amp; y*\nrm -rf ./build\n<https://a:1/ui/questions/12|/ui/questions/12>"
        );
    }

    #[test]
    fn ntfy_headers_stay_valid_for_any_text() {
        let mut e = event();
        e.title = "modèle ☃ down\r\nX-Evil: 1".into();
        let r = render(Shape::Ntfy, 1, &e, "https://a:1");
        let title = r.headers.iter().find(|(n, _)| n == "title").unwrap();
        let t = title.1.to_str().unwrap();
        assert!(t.starts_with("=?UTF-8?B?") && t.ends_with("?="), "{t}");
        assert!(!t.contains('\n'));
    }
}
