//! Human rendering shared by subcommands: diagnostics (with codespan-reporting, in
//! colour on a terminal) and aligned tables.

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label, Severity as CsSeverity};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor};
use flotilla_model::{Diagnostic, Severity, Sources};
use std::io::IsTerminal;

/// Prints diagnostics to standard error: `error[code]: message`, the source line
/// with a caret under the span at `file:line:column`, labels and help.
pub fn diagnostics(sources: &Sources, diags: &[Diagnostic]) {
    let mut files = SimpleFiles::new();
    let ids: Vec<usize> = sources
        .iter()
        .map(|(_, f)| files.add(f.name.clone(), f.text.clone()))
        .collect();
    let config = term::Config::default();
    let color = if std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
        termcolor::ColorChoice::Auto
    } else {
        termcolor::ColorChoice::Never
    };
    let stream = termcolor::StandardStream::stderr(color);
    let mut lock = stream.lock();
    for d in diags {
        let mut cs = CsDiagnostic::new(match d.severity {
            Severity::Error => CsSeverity::Error,
            Severity::Warning => CsSeverity::Warning,
        })
        .with_code(d.code.as_str())
        .with_message(&d.message);
        let mut labels = Vec::new();
        if let Some(l) = d.location {
            labels.push(Label::primary(
                ids[l.file.0 as usize],
                l.span.start..l.span.end,
            ));
        }
        for l in &d.labels {
            labels.push(
                Label::secondary(
                    ids[l.location.file.0 as usize],
                    l.location.span.start..l.location.span.end,
                )
                .with_message(&l.message),
            );
        }
        cs = cs.with_labels(labels);
        if let Some(h) = &d.help {
            cs = cs.with_notes(vec![format!("help: {h}")]);
        }
        let _ = term::emit_to_write_style(&mut lock, &config, &files, &cs);
    }
}

/// Formats rows as left-aligned columns separated by two spaces (trailing spaces trimmed).
pub fn table(rows: &[Vec<String>]) -> String {
    flotilla_plan::render::table(rows)
}

/// A plan as plain aligned text: header, waves of steps, impact, cleanup set
/// ([`flotilla_plan::render::PlanLines`], shared with the other faces).
pub fn plan(p: &flotilla_plan::Plan) -> String {
    flotilla_plan::render::PlanLines::of(p).text()
}

/// A refusal as the mutating verbs print it: `flotilla stop llm: refused`, then one
/// `  - reason` line per reason (`verb` is the word typed: `start`, `up`…).
pub fn refusal(r: &flotilla_plan::Refusal, verb: &str) -> String {
    flotilla_plan::render::refusal_lines(r, verb)
        .into_iter()
        .map(|l| l + "\n")
        .collect()
}

/// The first 12 hex digits of a digest given with or without `sha256:`, as
/// `sha256:<12 hex>`.
pub fn short_digest(s: &str) -> String {
    let hex = s.strip_prefix("sha256:").unwrap_or(s);
    format!("sha256:{}", &hex[..hex.len().min(12)])
}

/// `s` safe to print on a terminal: control characters (escape sequences, carriage
/// returns, backspaces… — what another party wrote could redraw what a human reads,
/// e.g. a question's input) are shown escaped (`\u{1b}`); a newline is kept only
/// when `newlines` is true.
pub fn printable(s: &str, newlines: bool) -> String {
    s.chars()
        .map(|c| {
            if (c == '\n' && newlines) || !(c.is_control() || is_bidi_control(c)) {
                c.to_string()
            } else {
                c.escape_unicode().to_string()
            }
        })
        .collect()
}

/// Unicode's bidirectional controls (they can reorder what a terminal shows).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// `ms` since the Unix epoch as RFC 3339 in UTC, to the second
/// (`2026-12-01T10:41:03Z`).
pub fn when(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod printable_tests {
    #[test]
    fn escapes_what_could_redraw_the_terminal() {
        let s = "git push --force # \u{1b}[1A\u{1b}[2K\rcargo test\u{202e}x\ny";
        let shown = super::printable(s, false);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert!(shown.contains("\\u{1b}[1A"), "{shown}");
        assert!(shown.contains("\\u{202e}"), "{shown}");
        assert_eq!(super::printable("a\nb", true), "a\nb");
    }
}
