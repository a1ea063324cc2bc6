//! Showing untrusted text in a page: what an agent, a tool input, a label or a log
//! wrote reaches the page only through maud's escaping, with its control
//! characters made visible (ESC as `^[`, never a raw escape sequence), invisible
//! direction overrides named, and anything big cut at a limit with its size; times
//! as an RFC 3339 instant with its age; words quoted for a command line.

use maud::{html, Markup};
use std::time::{Duration, UNIX_EPOCH};

/// How much of one untrusted text a page shows (bytes of UTF-8).
pub const SHOWN_LIMIT: usize = 64 * 1024;

/// How much of one untrusted text a line of a list shows (bytes of UTF-8).
pub const LINE_LIMIT: usize = 200;

pub use super::super::escape::{escape_of, prefix};

/// `s` as text, at most `limit` bytes of it, each character [`escape_of`] names
/// shown as its escape in a `<span class="ctl">` (titled, so that it reads as an
/// escape and not as what the agent typed); past the limit, a note with the size.
pub fn visible(s: &str, limit: usize) -> Markup {
    let shown = prefix(s, limit);
    let mut runs: Vec<(bool, String)> = Vec::new();
    for c in shown.chars() {
        match escape_of(c) {
            Some(e) => runs.push((true, e)),
            None => match runs.last_mut() {
                Some((false, run)) => run.push(c),
                _ => runs.push((false, c.to_string())),
            },
        }
    }
    html! {
        @for (escaped, run) in &runs {
            @if *escaped {
                span.ctl title="a control or invisible character, shown escaped" { (run) }
            } @else {
                (run)
            }
        }
        @if shown.len() < s.len() {
            span.cut { " … (showing " (size(shown.len())) " of " (size(s.len())) ")" }
        }
    }
}

/// The first line of `s`, at most [`LINE_LIMIT`] bytes, shown [`visible`]; `…`
/// when anything was left out.
pub fn one_line(s: &str) -> Markup {
    let first = s.lines().next().unwrap_or("");
    let line = prefix(first, LINE_LIMIT);
    html! {
        (visible(line, LINE_LIMIT))
        @if line.len() < s.trim_end().len() { "…" }
    }
}

/// A JSON value as pretty JSON (string escapes as JSON writes them: `\u001b`),
/// shown [`visible`] up to `limit` bytes.
pub fn json(v: &serde_json::Value, limit: usize) -> Markup {
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    visible(&text, limit)
}

/// A size in bytes for people: `512 B`, `1.5 KiB`, `1.0 MiB`.
pub fn size(bytes: usize) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// An instant (ms since the Unix epoch) as a `<time>` element: the RFC 3339 instant
/// (UTC, seconds) with its age relative to `now_ms` (`3m 2s ago`).
pub fn when(at_ms: i64, now_ms: i64) -> Markup {
    let t = UNIX_EPOCH + Duration::from_millis(at_ms.max(0) as u64);
    let iso = humantime::format_rfc3339_seconds(t).to_string();
    html! {
        time datetime=(iso) title=(iso) {
            (super::super::layout::age(now_ms - at_ms)) " ago"
        }
    }
}

/// `word` quoted for a POSIX shell when it needs it (single quotes; a `'` inside
/// as `'\''`).
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"@%+=:,./_-".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_markup_are_text() {
        let shown = visible("<script>alert(1)</script>\x1b[2J\u{202e}ok\n", 1000).into_string();
        assert!(shown.contains("&lt;script&gt;"), "{shown}");
        assert!(!shown.contains('\x1b'), "{shown}");
        assert!(shown.contains("^[</span>[2J"), "{shown}");
        assert!(shown.contains(r"\u{202e}"), "{shown}");
        assert!(shown.contains("[2J"), "{shown}");
    }

    #[test]
    fn big_text_is_cut_on_a_character_boundary_with_its_size() {
        let big = "é".repeat(600_000);
        let shown = visible(&big, SHOWN_LIMIT).into_string();
        assert!(shown.len() < SHOWN_LIMIT + 500, "{}", shown.len());
        assert!(
            shown.contains("of 1.1 MiB"),
            "{}",
            &shown[shown.len() - 80..]
        );
        assert_eq!(prefix("aé", 2), "a");
    }

    #[test]
    fn commands_are_quoted_for_a_shell() {
        assert_eq!(shell_quote("allow"), "allow");
        assert_eq!(shell_quote("it's ok"), r"'it'\''s ok'");
        assert_eq!(shell_quote(""), "''");
    }
}
