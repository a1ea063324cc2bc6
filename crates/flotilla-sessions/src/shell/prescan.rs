//! A linear scan of a command line before it reaches the parser: lines that are too
//! long, nested too deeply, or shaped to make the parser backtrack exponentially are
//! refused without parsing.
//!
//! The parser recurses once per level of nesting (a few thousand levels overflow a
//! thread's stack), and on a syntax error it retries every reading of nested bare
//! parentheses (`((` is a subshell in a subshell or arithmetic) and `case` patterns, so
//! its time doubles with each such level: 32 unclosed `(` take minutes. The scan is a
//! small lexer that knows bash's quoting (`'…'`, `"…"`, `$'…'`, backslashes,
//! comments, here-document bodies) so that a closer inside quotes (`$( ')'`) closes
//! nothing, and keeps a stack of what is open: parentheses (`(`, `$(`, `$((`, `<(`),
//! braces (`{`, `${`), double quotes, backticks and keyword blocks (`if`…`fi`,
//! `case`…`esac`, `do`…`done`). A `)` ends a `case` pattern, not a parenthesis, while a
//! `case` is the innermost block. Two measures are taken at their highest:
//!
//! - the **nesting**: everything open ([`MAX_NESTING`]);
//! - the **ambiguous nesting**: bare parentheses (`(` not after `$`, `<` or `>`) plus
//!   two per open `case` ([`MAX_AMBIGUOUS_NESTING`]).
//!
//! Where the lexer is unsure it opens rather than closes (an unterminated quote runs to
//! the end), so both measures are at least what the parser meets.

/// The longest command line the gate parses, in bytes. Longer lines are unparsed (the
/// gate asks).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The deepest nesting the gate parses (see the module docs for how it is counted).
/// Deeper lines are unparsed (the gate asks) without being parsed.
pub const MAX_NESTING: usize = 64;

/// The deepest nesting of bare parentheses and `case` blocks (a `case` counts two) the
/// gate parses: the parser's time on a syntax error doubles with each level. Deeper
/// lines are unparsed without being parsed.
pub const MAX_AMBIGUOUS_NESTING: usize = 16;

/// Why `line` must not be parsed, if it must not.
pub(super) fn refuse(line: &str) -> Option<String> {
    if line.len() > MAX_LINE_BYTES {
        return Some(format!(
            "the command line is {} bytes; at most {MAX_LINE_BYTES} are parsed",
            line.len()
        ));
    }
    let (depth, ambiguous) = measure(line);
    if depth > MAX_NESTING {
        return Some(format!(
            "the command line nests {depth} levels deep; at most {MAX_NESTING} are parsed"
        ));
    }
    if ambiguous > MAX_AMBIGUOUS_NESTING {
        return Some(format!(
            "the command line nests {ambiguous} levels of parentheses and `case` blocks; \
             at most {MAX_AMBIGUOUS_NESTING} are parsed"
        ));
    }
    None
}

/// The line's nesting (module docs).
pub fn nesting(line: &str) -> usize {
    measure(line).0
}

/// What is open at a point of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// A bare `(`: a subshell, a function body, an arithmetic command's `((`, a case
    /// pattern's `(`, an array's `(`, extglob.
    Paren,
    /// A bare `(` right after another (`((`): an arithmetic command, or two subshells.
    Paren2,
    /// `$(`, `<(`, `>(`.
    Subst,
    /// `$((`.
    Arith,
    /// `${`.
    Param,
    /// `{`.
    Brace,
    /// `"`.
    Quote,
    /// `` ` ``.
    Tick,
    /// `case` … `esac`.
    Case,
    /// `if` … `fi`, `do` … `done`.
    Block,
}

/// A here-document waiting for its body (after the next newline).
struct HereDoc {
    delimiter: Vec<u8>,
    /// `<<-`: leading tabs are stripped from body lines.
    strip_tabs: bool,
    /// The delimiter was quoted: the body is plain text.
    quoted: bool,
}

/// The open constructs, and the measures at their highest.
#[derive(Default)]
struct State {
    stack: Vec<Open>,
    ambiguous: usize,
    max: usize,
    max_ambiguous: usize,
}

impl State {
    fn push(&mut self, o: Open) {
        self.stack.push(o);
        self.ambiguous += weight(o);
        self.max = self.max.max(self.stack.len());
        self.max_ambiguous = self.max_ambiguous.max(self.ambiguous);
    }

    fn pop(&mut self) {
        if let Some(o) = self.stack.pop() {
            self.ambiguous -= weight(o);
        }
    }

    fn top(&self) -> Option<Open> {
        self.stack.last().copied()
    }
}

/// (nesting, ambiguous nesting) at their highest.
fn measure(line: &str) -> (usize, usize) {
    let b = line.as_bytes();
    let n = b.len();
    let mut st = State::default();
    let mut pending: Vec<HereDoc> = Vec::new();
    let mut i = 0;
    let word_start = |i: usize| i == 0 || b" \t\n;&|()<>".contains(&b[i - 1]);
    let word_end = |j: usize| j >= n || b" \t\n;&|()<>".contains(&b[j]);
    while i < n {
        let top = st.top();
        let c = b[i];
        // Inside double quotes only `\`, `$`, `` ` `` and the closing quote matter.
        if top == Some(Open::Quote) {
            match c {
                b'\\' => i += 2,
                b'"' => {
                    st.pop();
                    i += 1;
                }
                b'`' => {
                    st.push(Open::Tick);
                    i += 1;
                }
                b'$' => i = dollar(b, i, &mut st),
                _ => i += 1,
            }
            continue;
        }
        match c {
            b'\\' => i += 2,
            b'\'' => i = skip_single(b, i + 1),
            b'"' => {
                st.push(Open::Quote);
                i += 1;
            }
            b'`' => {
                if top == Some(Open::Tick) {
                    st.pop();
                } else {
                    st.push(Open::Tick);
                }
                i += 1;
            }
            b'#' if word_start(i) && top != Some(Open::Param) => {
                while i < n && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'$' if i + 1 < n && b[i + 1] == b'\'' => i = skip_ansi_c(b, i + 2),
            b'$' => i = dollar(b, i, &mut st),
            b'<' | b'>' if i + 1 < n && b[i + 1] == b'(' => {
                st.push(Open::Subst);
                i += 2;
            }
            // `<<` is a shift inside arithmetic (`$((1<<2))`, `((x<<=1))`).
            b'<' if i + 2 < n
                && b[i + 1] == b'<'
                && b[i + 2] != b'<'
                && !matches!(top, Some(Open::Arith | Open::Paren2)) =>
            {
                i = heredoc_operator(b, i + 2, &mut pending);
            }
            b'(' => {
                st.push(if i > 0 && b[i - 1] == b'(' {
                    Open::Paren2
                } else {
                    Open::Paren
                });
                i += 1;
            }
            b')' => {
                match top {
                    // A case pattern's `)`.
                    Some(Open::Case) => {}
                    Some(Open::Arith) if i + 1 < n && b[i + 1] == b')' => {
                        st.pop();
                        i += 1;
                    }
                    Some(Open::Paren | Open::Paren2 | Open::Subst | Open::Arith) => st.pop(),
                    _ => {}
                }
                i += 1;
            }
            b'{' => {
                st.push(Open::Brace);
                i += 1;
            }
            b'}' => {
                if matches!(top, Some(Open::Brace | Open::Param)) {
                    st.pop();
                }
                i += 1;
            }
            b'\n' => {
                i += 1;
                for doc in std::mem::take(&mut pending) {
                    i = heredoc_body(b, i, &doc, &mut st);
                }
            }
            _ if c.is_ascii_alphabetic() && word_start(i) => {
                let start = i;
                while i < n && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if top != Some(Open::Param) && word_end(i) {
                    match &b[start..i] {
                        b"case" => st.push(Open::Case),
                        b"if" | b"do" => st.push(Open::Block),
                        b"esac" if st.stack.contains(&Open::Case) => {
                            while let Some(o) = st.top() {
                                st.pop();
                                if o == Open::Case {
                                    break;
                                }
                            }
                        }
                        b"fi" | b"done" if top == Some(Open::Block) => st.pop(),
                        _ => {}
                    }
                }
            }
            _ => i += 1,
        }
    }
    (st.max, st.max_ambiguous.max(adjacent_run(line)))
}

/// The longest run of bare `(` and `case` (two each) with nothing but blanks, `in`,
/// a case's subject and case patterns between them, read without regard to quoting or
/// here-documents: what makes the parser backtrack, counted even where the lexer above
/// could be misled.
fn adjacent_run(line: &str) -> usize {
    let (mut run, mut max) = (0usize, 0usize);
    let mut after_case = false;
    for token in line.split(|c: char| c.is_whitespace()) {
        if token.is_empty() {
            continue;
        }
        let opens = token.bytes().take_while(|&c| c == b'(').count();
        if token == "case" {
            run += 2;
            after_case = true;
        } else if opens > 0 {
            let closes = token.bytes().filter(|&c| c == b')').count();
            run += opens.saturating_sub(closes);
            if opens < token.len() {
                // `((((x`: the run ends inside the innermost group; `(a)`: a closed
                // group separates what is around it.
                max = max.max(run);
                run = 0;
            }
        } else if after_case || token == "in" || (token.ends_with(')') && !token.contains('(')) {
            after_case = false;
        } else {
            run = 0;
        }
        max = max.max(run);
    }
    max
}

/// How much an open construct adds to the ambiguous nesting.
fn weight(o: Open) -> usize {
    match o {
        Open::Paren | Open::Paren2 => 1,
        Open::Case => 2,
        _ => 0,
    }
}

/// `$…` at `i`: opens `$((`, `$(` or `${`; returns where scanning goes on.
fn dollar(b: &[u8], i: usize, st: &mut State) -> usize {
    match (b.get(i + 1), b.get(i + 2)) {
        (Some(b'('), Some(b'(')) => {
            st.push(Open::Arith);
            i + 3
        }
        (Some(b'('), _) => {
            st.push(Open::Subst);
            i + 2
        }
        (Some(b'{'), _) => {
            st.push(Open::Param);
            i + 2
        }
        _ => i + 1,
    }
}

/// Past a single-quoted string whose body starts at `i`.
fn skip_single(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\'' {
        i += 1;
    }
    i + 1
}

/// Past a `$'…'` string whose body starts at `i` (backslash escapes).
fn skip_ansi_c(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\'' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    i + 1
}

/// A here-document operator whose `<<` ends before `i`: records the delimiter.
fn heredoc_operator(b: &[u8], mut i: usize, pending: &mut Vec<HereDoc>) -> usize {
    let strip_tabs = b.get(i) == Some(&b'-');
    if strip_tabs {
        i += 1;
    }
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    let mut delimiter = Vec::new();
    let mut quoted = false;
    while i < b.len() && !b" \t\n;&|()<>".contains(&b[i]) {
        match b[i] {
            q @ (b'\'' | b'"') => {
                quoted = true;
                i += 1;
                while i < b.len() && b[i] != q {
                    delimiter.push(b[i]);
                    i += 1;
                }
                i += 1;
            }
            b'\\' => {
                quoted = true;
                if let Some(&c) = b.get(i + 1) {
                    delimiter.push(c);
                }
                i += 2;
            }
            c => {
                delimiter.push(c);
                i += 1;
            }
        }
    }
    if !delimiter.is_empty() {
        pending.push(HereDoc {
            delimiter,
            strip_tabs,
            quoted,
        });
    }
    i
}

/// A here-document's body starting at `i` (a line start): up to and past its
/// delimiter line. An unquoted body's `$(`, `${` and backticks open as in double
/// quotes (and stay open until closed: the stricter reading).
fn heredoc_body(b: &[u8], mut i: usize, doc: &HereDoc, st: &mut State) -> usize {
    let base = st.stack.len();
    while i < b.len() {
        let end = b[i..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |p| i + p);
        let mut text = &b[i..end];
        if doc.strip_tabs {
            while let [b'\t', rest @ ..] = text {
                text = rest;
            }
        }
        if text == doc.delimiter.as_slice() {
            while st.stack.len() > base {
                st.pop();
            }
            return (end + 1).min(b.len());
        }
        if !doc.quoted {
            let mut j = i;
            while j < end {
                match b[j] {
                    b'\\' => j += 2,
                    b'$' => j = dollar(b, j, st),
                    b'`' => {
                        st.push(Open::Tick);
                        j += 1;
                    }
                    _ => j += 1,
                }
            }
        }
        i = end + 1;
    }
    b.len()
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
        assert_eq!(nesting("[[ ( a ) ]]"), 1);
        assert_eq!(nesting("echo `a`"), 1);
        assert_eq!(nesting("(a) (b) (c) (d)"), 1);
        assert_eq!(nesting("echo ifx xfi"), 0);
        assert_eq!(nesting("echo \"$(ls \")\")\""), 3);
    }

    #[test]
    fn quoted_closers_close_nothing() {
        // `$( ')'` opens a substitution and leaves it open.
        let line = "echo $( ')' ".repeat(100);
        assert!(nesting(&line) >= 100);
        let line = "echo $( \")\" ".repeat(100);
        assert!(nesting(&line) >= 100);
        let line = "echo $( \\) ".repeat(100);
        assert!(nesting(&line) >= 100);
        let line = "echo $( $')' ".repeat(100);
        assert!(nesting(&line) >= 100);
        let line = "echo $( # )\n".repeat(100);
        assert!(nesting(&line) >= 100);
        let line = "cat <<'E' $(\n)\nE\n".repeat(100);
        assert!(nesting(&line) >= 100);
    }

    #[test]
    fn quoted_text_opens_nothing() {
        assert_eq!(nesting("echo '((((((((' \"{{{{{{\""), 1);
        assert_eq!(
            nesting("git commit -m \"$(cat <<'EOF'\nfix (a) ((b)) {c}\nEOF\n)\""),
            2
        );
        assert_eq!(nesting("awk '{ print (a+(b*(c))) }' f"), 0);
    }

    #[test]
    fn ambiguous_nesting() {
        let m = |l: &str| measure(l).1;
        assert_eq!(m("((((x))))"), 4);
        assert_eq!(m("echo $(( (1+2) ))"), 1);
        assert_eq!(m("case x in x) case y in (y) z;; esac;; esac"), 5);
        assert_eq!(m("( case x in x) ( case y in y) z;; esac );; esac )"), 6);
        assert_eq!(m("$( $( $( ls ) ) )"), 0);
        assert_eq!(adjacent_run("echo '((((' x"), 0);
        assert_eq!(adjacent_run("((((( ( (x"), 7);
        assert_eq!(adjacent_run("case x in x) case y in y) z"), 4);
        assert_eq!(adjacent_run("(a) (b) (c)"), 0);
        // Misread as a here-document by the lexer, still counted.
        assert!(m(&format!("echo $((1<<2))\n{}", "(".repeat(20))) > MAX_AMBIGUOUS_NESTING);
        assert!(m(&format!("cat <<'E'\n{}\nE", "( ".repeat(20))) > MAX_AMBIGUOUS_NESTING);
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
        assert!(refuse(&"(".repeat(MAX_AMBIGUOUS_NESTING + 1))
            .unwrap()
            .contains("parentheses"));
        assert!(refuse(&"case x in x) ".repeat(9)).is_some());
    }
}
