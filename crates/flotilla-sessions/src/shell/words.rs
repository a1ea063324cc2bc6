//! One word as bash expands it: quote removal gives its static value, anything known
//! only at run time makes it an [`Arg::Dynamic`]; every substitution in it is walked;
//! text bash would run as a command substitution if it reached arithmetic (`$(` or a
//! backtick, quoted, escaped or decoded from `$'…'`) is marked; arithmetic is checked;
//! `"$(cat <<'EOF' … EOF)"` is the here-document's text.

use brush_parser::word::{self, ParameterExpr, ParameterTransformOp, WordPiece};

use super::variables::{dangerous_var, COMMAND_VARS, MAKE_VARS};
use super::walker::Walker;
use super::Arg;

impl Walker {
    /// An arithmetic expression: must be one (bash runs a failed `$((…) )` as a
    /// command substitution) and must not hide a command substitution.
    pub(super) fn arithmetic(&mut self, expr: &str) {
        let assigns_dangerous = expr
            .split(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
            .find(|w| dangerous_var(w) || COMMAND_VARS.contains(w));
        if expr.contains("$(") || expr.contains('`') || expr.contains("<(") {
            self.unparsed(format!("command substitution inside arithmetic `{expr}`"));
        } else if let Some(name) = assigns_dangerous {
            self.unparsed(format!(
                "arithmetic `{expr}` names `{name}`, which changes what runs"
            ));
        } else if !is_arithmetic(expr) {
            self.unparsed(format!(
                "`{expr}` is not an arithmetic expression (bash may run it as commands)"
            ));
        }
    }

    /// Evaluates one word: its static value, or dynamic; walks every substitution in
    /// it. A `$(` or backtick in its quoted or escaped text is unparsed (see
    /// [`Walker::word_marked`]).
    pub(super) fn word(&mut self, raw: &str, depth: usize) -> Arg {
        let (arg, marked) = self.word_marked(raw, depth);
        if let Some(text) = marked {
            self.unparsed(marked_reason(&text));
        }
        arg
    }

    /// [`Walker::word`], but a word whose literal text (quoted, escaped, or decoded from
    /// `$'…'`) holds `$(` or a backtick is returned as marked instead of unparsed: bash
    /// runs such text as a command substitution wherever a value reaches arithmetic
    /// evaluation (`test -v 'a[$(…)]'`, `let`, `[[ … -eq … ]]`, `declare -i`,
    /// `$((x))` of a variable holding it). The caller decides (an argument consumed as
    /// code that the gate parses, `sh -c '… $(…)'`, is fine).
    pub(super) fn word_marked(&mut self, raw: &str, depth: usize) -> (Arg, Option<String>) {
        let opts = &self.opts;
        let parsed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| word::parse(raw, opts)));
        let Ok(parsed) = parsed else {
            self.unparsed(format!("the word parser failed on `{raw}`"));
            return (Arg::Dynamic(raw.to_string()), None);
        };
        match parsed {
            Ok(pieces) => {
                let mut value = String::new();
                let mut dynamic = false;
                self.pieces(&pieces, raw, false, depth, &mut value, &mut dynamic);
                if !dynamic && has_brace_expansion(&pieces, raw) {
                    dynamic = true;
                }
                let mut checked = value.clone();
                for body in std::mem::take(&mut self.static_bodies) {
                    checked = checked.replace(&body, "");
                }
                let marked = has_substitution_text(&value).then(|| value.clone());
                if marked.is_some() && !has_substitution_text(&checked) {
                    self.body_marked.push(value.clone());
                }
                if dynamic {
                    (Arg::Dynamic(raw.to_string()), marked)
                } else {
                    (Arg::Literal(value), marked)
                }
            }
            Err(e) => {
                self.unparsed(format!("word `{raw}`: {e}"));
                (Arg::Dynamic(raw.to_string()), None)
            }
        }
    }

    /// Appends what `pieces` expand to onto `value` (`dynamic` once any is known only at
    /// run time), walking every substitution.
    pub(super) fn pieces(
        &mut self,
        pieces: &[word::WordPieceWithSource],
        raw: &str,
        quoted: bool,
        depth: usize,
        value: &mut String,
        dynamic: &mut bool,
    ) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => {
                    if !quoted && t.contains(['*', '?', '[', '(']) {
                        *dynamic = true;
                    }
                    value.push_str(t);
                }
                WordPiece::SingleQuotedText(t) => value.push_str(t),
                WordPiece::AnsiCQuotedText(t) => {
                    if t.contains('\\') {
                        // Kept dynamic; the decoded text is what a substitution check
                        // must see (`$'\x24(rm x)'` is `$(rm x)`).
                        *dynamic = true;
                        value.push_str(&decode_ansi_c(t));
                    } else {
                        value.push_str(t);
                    }
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, raw, true, depth, value, dynamic);
                }
                WordPiece::TildeExpansion(t) => match t {
                    word::TildeExpr::Home => value.push('~'),
                    word::TildeExpr::UserHome(u) => {
                        value.push('~');
                        value.push_str(u);
                    }
                    _ => *dynamic = true,
                },
                WordPiece::ParameterExpansion(expr) => {
                    *dynamic = true;
                    let source = raw.get(p.start_index..p.end_index).unwrap_or(raw);
                    if let ParameterExpr::AssignDefaultValues {
                        parameter,
                        indirect,
                        ..
                    } = expr
                    {
                        let name = match parameter {
                            word::Parameter::Named(n) => Some(n.as_str()),
                            word::Parameter::NamedWithIndex { name, .. }
                            | word::Parameter::NamedWithAllIndices { name, .. } => {
                                Some(name.as_str())
                            }
                            _ => None,
                        };
                        match name {
                            _ if *indirect => self.unparsed(format!(
                                "`{source}` assigns to a variable named at run time"
                            )),
                            Some(n)
                                if dangerous_var(n)
                                    || COMMAND_VARS.contains(&n)
                                    || MAKE_VARS.contains(&n) =>
                            {
                                self.unparsed(format!(
                                    "`{source}` assigns to `{n}`, which changes what runs"
                                ))
                            }
                            _ => {}
                        }
                    }
                    if source.contains("$(")
                        || source.contains('`')
                        || source.contains("<(")
                        || source.contains(">(")
                    {
                        self.unparsed(format!(
                            "command substitution inside a parameter expansion `{source}`"
                        ));
                    }
                    if matches!(
                        expr,
                        ParameterExpr::Transform {
                            op: ParameterTransformOp::PromptExpand,
                            ..
                        }
                    ) {
                        self.unparsed(format!(
                            "prompt expansion `{source}` can run command substitutions"
                        ));
                    }
                }
                WordPiece::CommandSubstitution(src)
                | WordPiece::BackquotedCommandSubstitution(src) => {
                    self.program(src, depth + 1);
                    // `"$(cat <<'EOF' … EOF)"` (a commit message): its output is the
                    // here-document's text, known statically.
                    match static_heredoc_cat(src).filter(|_| quoted) {
                        Some(body) => {
                            value.push_str(&body);
                            self.static_bodies.push(body);
                        }
                        None => *dynamic = true,
                    }
                }
                WordPiece::EscapeSequence(s) => {
                    let rest = s.strip_prefix('\\').unwrap_or(s);
                    if rest != "\n" {
                        value.push_str(rest);
                    }
                }
                WordPiece::ArithmeticExpression(e) => {
                    *dynamic = true;
                    self.arithmetic(&e.value);
                }
            }
        }
    }
}

/// The output of a command substitution that is only `cat` of a quoted here-document
/// (`cat <<'EOF'` … `EOF`, also `"EOF"` or `\EOF`): the body, trailing newlines
/// removed as bash does. `None` for anything else (a `<<-` here-document, other
/// commands or words, an unquoted delimiter whose body would be expanded).
pub(super) fn static_heredoc_cat(src: &str) -> Option<String> {
    let s = src.trim_start_matches([' ', '\t', '\n']);
    let s = s.strip_prefix("cat")?;
    let s = s.trim_start_matches([' ', '\t']).strip_prefix("<<")?;
    let s = s.trim_start_matches([' ', '\t']);
    let (delim, s) = if let Some(r) = s.strip_prefix('\'') {
        r.split_once('\'')?
    } else if let Some(r) = s.strip_prefix('"') {
        r.split_once('"')?
    } else {
        let r = s.strip_prefix('\\')?;
        let end = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(r.len());
        r.split_at(end)
    };
    if delim.is_empty() || !delim.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let s = s.trim_start_matches([' ', '\t']).strip_prefix('\n')?;
    let mut body = String::new();
    let mut lines = s.split('\n');
    loop {
        let line = lines.next()?;
        if line == delim {
            break;
        }
        body.push_str(line);
        body.push('\n');
    }
    let rest: String = lines.collect::<Vec<_>>().join("\n");
    if !rest.trim().is_empty() {
        return None;
    }
    Some(body.trim_end_matches('\n').to_string())
}

/// Whether brush's arithmetic parser accepts the expression (a panic counts as no).
pub(super) fn is_arithmetic(expr: &str) -> bool {
    std::panic::catch_unwind(|| brush_parser::arithmetic::parse(expr).is_ok()).unwrap_or(false)
}

/// Literal text holding `$(` or a backtick: bash runs it as a command substitution if
/// the value ever reaches arithmetic evaluation (an array subscript: `a[$(…)]`).
pub(super) fn has_substitution_text(text: &str) -> bool {
    text.contains("$(") || text.contains('`')
}

/// Why a word holding substitution text is unparsed.
pub(super) fn marked_reason(text: &str) -> String {
    let shown: String = text.chars().take(60).collect();
    let more = if text.chars().count() > 60 { "…" } else { "" };
    format!(
        "`{shown}{more}` holds `$(` or a backtick as text, which bash runs wherever the value \
         reaches arithmetic (`test -v`, `let`, `[[ -eq ]]`, array subscripts)"
    )
}

/// The value of a `$'…'` body (bash's ANSI-C escapes), for the substitution check only.
/// Unknown escapes are kept as written.
pub(super) fn decode_ansi_c(body: &str) -> String {
    let chars: Vec<char> = body.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let radix = |cs: &[char], start: usize, max: usize, base: u32| -> (u32, usize) {
        let mut v = 0u32;
        let mut n = 0;
        while n < max {
            match cs.get(start + n).and_then(|c| c.to_digit(base)) {
                Some(d) => {
                    v = v.wrapping_mul(base).wrapping_add(d);
                    n += 1;
                }
                None => break,
            }
        }
        (v, n)
    };
    while i < chars.len() {
        let c = chars[i];
        if c != '\\' || i + 1 >= chars.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let e = chars[i + 1];
        i += 2;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (value, used) = match e {
            'x' => radix(&chars, i, 2, 16),
            'u' => radix(&chars, i, 4, 16),
            'U' => radix(&chars, i, 8, 16),
            '0'..='7' => {
                let (v, n) = radix(&chars, i - 1, 3, 8);
                (v, n - 1)
            }
            'c' if i < chars.len() => ((chars[i] as u32) & 0x1f, 1),
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        if used == 0 && matches!(e, 'x' | 'u' | 'U') {
            out.push('\\');
            out.push(e);
            continue;
        }
        i += used;
        out.push(char::from_u32(value).unwrap_or('\u{fffd}'));
    }
    out
}

/// Unquoted `{…,…}` or `{a..b}` anywhere in the word.
fn has_brace_expansion(pieces: &[word::WordPieceWithSource], raw: &str) -> bool {
    let unquoted_brace = pieces
        .iter()
        .any(|p| matches!(&p.piece, WordPiece::Text(t) if t.contains('{')));
    unquoted_brace && raw.contains('}') && (raw.contains(',') || raw.contains(".."))
}
