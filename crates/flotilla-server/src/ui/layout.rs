//! The page shell every dashboard page is drawn in ([`page`]), the pages without a
//! session (sign-in, errors: [`bare`], [`message`]), and small shared pieces: the
//! equivalent command ([`command`]), a status mark ([`mark`]), an age ([`age`]).
//! maud escapes every value it interpolates; nothing here uses `PreEscaped` on
//! data.

use super::assets::ASSETS;
use super::session::Session;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use flotilla_api::links::Link;
use maud::{html, Markup, DOCTYPE};

/// The sections of the navigation bar (and which one a page belongs to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The fleet overview (and host pages).
    Overview,
    /// Stacks (and components).
    Stacks,
    /// Revisions.
    Revisions,
    /// Releases and rollouts.
    Releases,
    /// Agent sessions.
    Sessions,
    /// Questions.
    Questions,
    /// Alerts.
    Alerts,
    /// None of them.
    None,
}

const SECTIONS: [(Nav, &str, Link); 7] = [
    (Nav::Overview, "Overview", Link::Overview),
    (Nav::Stacks, "Stacks", Link::Stacks),
    (Nav::Revisions, "Revisions", Link::Revisions),
    (Nav::Releases, "Releases", Link::Releases),
    (Nav::Sessions, "Sessions", Link::Sessions),
    (Nav::Questions, "Questions", Link::Questions),
    (Nav::Alerts, "Alerts", Link::Alerts),
];

/// The keys the help overlay lists (and `flotilla.js` implements).
const KEYS: [(&str, &str); 11] = [
    ("?", "this help"),
    ("g o", "overview"),
    ("g s", "sessions"),
    ("g q", "questions"),
    ("g r", "releases"),
    ("g v", "revisions"),
    ("g a", "alerts"),
    ("g k", "stacks"),
    ("/", "the page's filter"),
    ("[ ]", "previous / next page"),
    ("Esc", "close this help"),
];

fn head(title: &str) -> Markup {
    let a = &*ASSETS;
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}"#;
            title { (title) " · Flotilla" }
            link rel="stylesheet" href=(a.css.path);
            // Not deferred: applies the remembered theme before the first paint.
            script src=(a.js.path) {}
            script src=(a.htmx.path) defer {}
            script src=(a.sse.path) defer {}
        }
    }
}

/// A full page for a signed-in session: navigation (`nav` marked current), who is
/// signed in with which role, the theme and shortcut switches, sign-out, the help
/// overlay, and `body` in `<main>`. With `live` (an event stream's URL from
/// [`super::live::stream_url`]), `<main>` connects to it: elements inside with
/// `sse-swap="<event>"` are replaced by the fragments of that name.
pub fn page(session: &Session, nav: Nav, title: &str, live: Option<&str>, body: Markup) -> Markup {
    let csrf_headers = format!(r#"{{"X-CSRF-Token":"{}"}}"#, session.csrf);
    html! {
        (DOCTYPE)
        html lang="en" data-theme="system" data-now=(flotilla_exec::this_process::now_ms()) {
            (head(title))
            body hx-headers=(csrf_headers) {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href=(Link::Overview.path()) { "Flotilla" }
                    nav aria-label="Sections" {
                        ul {
                            @for (n, label, link) in &SECTIONS {
                                li {
                                    a href=(link.path()) aria-current=[(*n == nav).then_some("page")] { (label) }
                                }
                            }
                        }
                    }
                    div.me {
                        span data-who { "Signed in: " b { (session.who) } " (" (session.role.as_str()) ")" }
                        label { "Theme " select #theme {
                            option value="system" { "system" }
                            option value="light" { "light" }
                            option value="dark" { "dark" }
                        } }
                        label { input #keys type="checkbox" checked; " Shortcuts" }
                        button #help-open type="button" aria-haspopup="dialog" { "? Keys" }
                        form method="post" action="/ui/logout" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                @if let Some(url) = live {
                    main #main tabindex="-1" hx-ext="sse" sse-connect=(url) { (body) }
                } @else {
                    main #main tabindex="-1" { (body) }
                }
                dialog #help aria-labelledby="help-title" {
                    h2 #help-title { "Keyboard shortcuts" }
                    p.muted { "Shortcuts can be turned off with the switch in the header." }
                    dl {
                        @for (k, what) in &KEYS {
                            dt { @for (i, part) in k.split(' ').enumerate() { @if i > 0 { " " } kbd { (part) } } }
                            dd { (what) }
                        }
                    }
                    form method="dialog" { button type="submit" { "Close" } }
                }
            }
        }
    }
}

/// A page without a session (sign-in, errors before signing in).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" data-theme="system" {
            (head(title))
            body { main #main { (body) } }
        }
    }
}

/// An HTML answer with `status`: a short page saying `title` and `text`.
pub fn message(status: StatusCode, title: &str, text: &str) -> Response {
    let body = bare(
        title,
        html! {
            div.login role=(if status.is_success() { "status" } else { "alert" }) {
                h1 { (title) }
                p { (text) }
                p { a href=(Link::Overview.path()) { "Go to the overview" } }
            }
        },
    );
    (status, Html(body.into_string())).into_response()
}

/// 403 for a viewer's action.
pub fn viewer_refused() -> Response {
    message(
        StatusCode::FORBIDDEN,
        "Refused: read-only",
        "This session has the viewer role: it can look, not act. Sign in as an operator to act.",
    )
}

/// 404 inside the shell: `what` (e.g. "host `h9`") is not known.
pub fn not_found(session: &Session, nav: Nav, what: &str) -> Response {
    let body = page(
        session,
        nav,
        "Not found",
        None,
        html! {
            h1 { "Not found" }
            p role="alert" { "The authority knows no " (visible(what)) "." }
            p { a href=(Link::Overview.path()) { "Back to the overview" } }
        },
    );
    (StatusCode::NOT_FOUND, Html(body.into_string())).into_response()
}

/// The equivalent `flotilla` command of an action, as copyable text.
pub fn command(cmd: &str) -> Markup {
    html! {
        div.cmd {
            span.label { "Equivalent command" }
            code { (cmd) }
            button type="button" data-copy=(cmd) aria-label="Copy the command" { "Copy" }
        }
    }
}

/// How a status reads: its symbol and colour (the colour only repeats the symbol
/// and the text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// As desired (✓).
    Good,
    /// Needs a look (▲).
    Warn,
    /// Wrong (✗).
    Bad,
    /// Neither: stopped, not applicable, unknown (○).
    Neutral,
}

/// A status as text and symbol: `✓ running`.
pub fn mark(tone: Tone, text: &str) -> Markup {
    html! { span class=(tone_class(tone)) { (text) } }
}

/// The classes of a mark of `tone`; the stylesheet draws its symbol before the
/// text (✓ ▲ ✗ ○), hidden from screen readers, so a 5,000-row table carries
/// it once in the CSS rather than in every cell.
fn tone_class(tone: Tone) -> &'static str {
    match tone {
        Tone::Good => "st st-good",
        Tone::Warn => "st st-warn",
        Tone::Bad => "st st-bad",
        Tone::Neutral => "st st-neutral",
    }
}

/// [`mark`] followed by ` · ` and the age of `at_ms` ([`since`]) when given.
pub fn mark_since(tone: Tone, text: &str, at_ms: Option<i64>) -> Markup {
    match at_ms {
        None => mark(tone, text),
        Some(at) => {
            html! { span class=(tone_class(tone)) { (text) " · " (since(at)) } }
        }
    }
}

/// A moment (`at_ms`, ms since the Unix epoch) shown as its age, `4 s`, that the
/// page's script keeps current: `<time class="ago" datetime="<RFC 3339, ms>">`,
/// holding the UTC time of day until the script runs. Rendered the same whatever
/// the time now, so a live update sends it only when the moment itself changes.
pub fn since(at_ms: i64) -> Markup {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms.max(0) as u64);
    let stamp = humantime::format_rfc3339_millis(t).to_string();
    let clock = stamp.get(11..19).unwrap_or("").to_owned();
    html! { time.ago datetime=(stamp) { (clock) " UTC" } }
}

/// An age in ms, short: `4 s`, `3 min`, `2 h`, `5 d` (the page's script writes the
/// same words for [`since`]).
pub fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

pub use super::escape::visible;

/// The first 12 hex digits of a `sha256:<hex>` digest (or of any text).
pub fn short_digest(d: &str) -> &str {
    let hex = d.strip_prefix("sha256:").unwrap_or(d);
    &hex[..hex.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_digests_read_short() {
        assert_eq!(age(4_200), "4 s");
        assert_eq!(age(180_000), "3 min");
        assert_eq!(age(7_200_000), "2 h");
        assert_eq!(age(-5), "0 s");
        assert_eq!(short_digest("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(short_digest("ab"), "ab");
        assert_eq!(visible("a\u{1b}[31mb\tc\u{7f}\u{0}"), "a^[[31mb\tc^?^@");
        assert!(matches!(visible("plain"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn text_is_escaped_in_marks_and_commands() {
        let m = mark(Tone::Bad, "<script>x</script>").into_string();
        assert!(
            m.contains("&lt;script&gt;") && !m.contains("<script>"),
            "{m}"
        );
        let c = command("flotilla start '<b>'").into_string();
        assert!(!c.contains("<b>"), "{c}");
    }
}
