//! A linear scan of a command line before it reaches the parser: lines that are too
//! long or nested too deeply are refused without parsing (the parser recurses once per
//! level and would run out of stack on a few thousand levels).
//!
//! The nesting measure over-approximates: it ignores quoting and comments, and keeps
//! separate counters for parentheses (`(`, `$(`, `$((`, `<(`), braces (`{`, `${`),
//! brackets (`[`, `[[`), keyword pairs (`if`/`fi`, `case`/`esac`, `do`/`done`) and
//! escaped backticks; each closer lowers only its own counter, never below zero. The
//! sum of the counters at its highest is the line's nesting.

/// The longest command line the gate parses, in bytes. Longer lines are unparsed (the
/// gate asks).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The deepest nesting the gate parses (see the module docs for how it is counted).
/// Deeper lines are unparsed (the gate asks) without being parsed.
pub const MAX_NESTING: usize = 64;

/// Why `line` must not be parsed, if it must not.
pub(super) fn refuse(line: &str) -> Option<String> {
    if line.len() > MAX_LINE_BYTES {
        return Some(format!(
            "the command line is {} bytes; at most {MAX_LINE_BYTES} are parsed",
            line.len()
        ));
    }
    let depth = nesting(line);
    if depth > MAX_NESTING {
        return Some(format!(
            "the command line nests {depth} levels deep; at most {MAX_NESTING} are parsed"
        ));
    }
    None
}

/// The line's nesting, over-approximated (module docs).
pub fn nesting(line: &str) -> usize {
    let bytes = line.as_bytes();
    let (mut paren, mut brace, mut bracket, mut keyword, mut tick) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut max = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'(' => paren += 1,
            b')' => paren = paren.saturating_sub(1),
            b'{' => brace += 1,
            b'}' => brace = brace.saturating_sub(1),
            b'[' => bracket += 1,
            b']' => bracket = bracket.saturating_sub(1),
            b'`' => {
                // Nested backticks are escaped: `\`` one level down, `\\\`` two…
                let mut slashes = 0;
                while slashes < i && bytes[i - 1 - slashes] == b'\\' {
                    slashes += 1;
                }
                tick = tick.max(slashes + 1);
            }
            _ if b.is_ascii_alphabetic() => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let boundary = start == 0 || !is_word_byte(bytes[start - 1]);
                if boundary {
                    match &line[start..i] {
                        "if" | "case" | "do" | "select" | "function" => keyword += 1,
                        "fi" | "esac" | "done" => keyword = keyword.saturating_sub(1),
                        _ => {}
                    }
                }
                max = max.max(paren + brace + bracket + keyword + tick);
                continue;
            }
            _ => {}
        }
        max = max.max(paren + brace + bracket + keyword + tick);
        i += 1;
    }
    max
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_kind_of_nesting() {
        assert_eq!(nesting("ls -la"), 0);
        assert_eq!(nesting("echo $(echo $(ls))"), 2);
        assert_eq!(nesting("echo ${x:-${y:-z}}"), 2);
        assert_eq!(nesting("if a; then if b; then c; fi; fi"), 2);
        assert_eq!(nesting("case x in x) case y in y) z;; esac;; esac"), 2);
        assert_eq!(nesting("for a in b; do while c; do d; done; done"), 2);
        assert_eq!(nesting("[[ ( a ) ]]"), 3);
        assert_eq!(nesting("echo `a \\`b\\``"), 2);
        assert_eq!(nesting("(a) (b) (c) (d)"), 1);
        assert_eq!(nesting("echo ifx xfi"), 0);
    }

    #[test]
    fn refuses_long_and_deep_lines() {
        assert!(refuse("ls").is_none());
        assert!(refuse(&"x".repeat(MAX_LINE_BYTES + 1))
            .unwrap()
            .contains("bytes"));
        let deep = format!("{}ls{}", "$(".repeat(MAX_NESTING + 1), ")".repeat(65));
        assert!(refuse(&deep).unwrap().contains("levels deep"));
        let ok = format!("{}ls{}", "$(".repeat(8), ")".repeat(8));
        assert!(refuse(&ok).is_none());
    }
}
