//! The one rule for showing untrusted text in the dashboard: which characters are
//! shown as an escape instead of themselves ([`escape_of`]), applied to a plain
//! string ([`visible`], for attributes and short names) and, with a size limit and
//! marked spans, by `pages::text::visible`. maud escapes the HTML either way.

/// The escape a character is shown as when it must not be shown as itself: C0
/// control characters (but newline and tab) and DEL in caret notation (ESC is
/// `^[`), C1 control characters as `\u{9b}`, and the Unicode format
/// characters that reorder or hide text (bidirectional overrides and isolates,
/// zero-width characters, the byte-order mark). `None`: shown as itself.
pub fn escape_of(c: char) -> Option<String> {
    match c {
        '\n' | '\t' => None,
        '\u{7f}' => Some("^?".into()),
        c if (c as u32) < 0x20 => Some(format!("^{}", char::from(c as u8 + 64))),
        c if ('\u{80}'..='\u{9f}').contains(&c) => Some(format!("\\u{{{:x}}}", c as u32)),
        '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}' => Some(format!("\\u{{{:x}}}", c as u32)),
        _ => None,
    }
}

/// The longest prefix of `s` of at most `limit` bytes that ends on a character
/// boundary.
pub fn prefix(s: &str, limit: usize) -> &str {
    if s.len() <= limit {
        return s;
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` with every character [`escape_of`] names replaced by its escape (ESC is `^[`),
/// so a terminal escape or a direction override in a name, a log line or a tool
/// input shows as text in any font.
pub fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| escape_of(c).is_some()) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match escape_of(c) {
            Some(e) => out.push_str(&e),
            None => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_direction_overrides_are_shown_escaped() {
        assert_eq!(visible("a\u{1b}[31mb\u{7f}"), "a^[[31mb^?");
        assert_eq!(visible("x\u{202e}y\u{9b}"), "x\\u{202e}y\\u{9b}");
        assert_eq!(visible("tab\tnew\nline"), "tab\tnew\nline");
        assert!(matches!(visible("plain"), std::borrow::Cow::Borrowed(_)));
    }
}
