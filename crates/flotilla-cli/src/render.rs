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
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < r.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A plan as plain aligned text: header, waves of steps, impact, cleanup set.
pub fn plan(p: &flotilla_plan::Plan) -> String {
    use flotilla_model::inventory::Owner;
    let short = |d: &str| d.get(..19).unwrap_or(d).to_string();
    let mut out = format!(
        "plan: {}\n  topology {}  observed {}\n",
        p.operation,
        short(&p.topology_digest),
        short(&p.observed_digest)
    );
    if p.is_noop() {
        out.push_str("  nothing to do: everything is already in the requested state\n");
    }
    // One table for all waves so columns line up across them.
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut wave_of_row = Vec::new();
    for (i, w) in p.waves.iter().enumerate() {
        for s in &w.steps {
            let owner = match (s.owner, s.adapter) {
                (Owner::External, _) => "external".to_string(),
                (_, Some(a)) => a.as_str().to_string(),
                _ => "managed".to_string(),
            };
            rows.push(vec![
                format!("  {}", s.action.as_str()),
                s.component.clone(),
                format!("on {}", s.host),
                owner,
                s.reason.clone(),
            ]);
            wave_of_row.push(i);
        }
    }
    let text = table(&rows);
    let mut last = None;
    for (line, &wave) in text.lines().zip(&wave_of_row) {
        if last != Some(wave) {
            out.push_str(&format!("wave {}\n", wave + 1));
            last = Some(wave);
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some(stack) = &p.verify_stack {
        out.push_str(&format!(
            "then: check stack `{stack}`'s readiness probes (its routes, end to end)\n"
        ));
    }
    if !p.impact.is_empty() {
        out.push_str("impact\n");
        let rows: Vec<Vec<String>> = p
            .impact
            .iter()
            .map(|i| vec![format!("  {}", i.component), i.effect.clone()])
            .collect();
        out.push_str(&table(&rows));
    }
    if !p.cleanup.is_empty() {
        out.push_str(&format!(
            "if it fails part-way: stop {} (in this order)\n",
            p.cleanup.join(", ")
        ));
    }
    out
}

/// A refusal as the mutating verbs print it: `flotilla stop llm: refused`, then one
/// `  - reason` line per reason (`verb` is the word typed: `start`, `up`…).
pub fn refusal(r: &flotilla_plan::Refusal, verb: &str) -> String {
    let mut out = format!("{}: refused\n", r.operation.typed_as(verb));
    for reason in &r.reasons {
        out.push_str(&format!("  - {reason}\n"));
    }
    out
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
