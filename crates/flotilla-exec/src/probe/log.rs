//! The `log` check: a line of the component's log written after the start offset
//! matches a pattern.

use super::outcome::{ProbeOutcome, Recorder};
use super::ProbeContext;
use crate::logs::scan_log;
use serde_json::json;

/// `log`: a line of `ctx.log_path` after `ctx.log_start_offset` matches `pattern`.
pub(super) async fn check_log(pattern: &str, ctx: &ProbeContext<'_>) -> ProbeOutcome {
    let rec = Recorder::new();
    let base = json!({"kind": "log", "pattern": pattern});
    let re = match regex::Regex::new(pattern) {
        Ok(r) => r,
        Err(e) => return rec.misconfigured(format!("log: invalid pattern /{pattern}/: {e}"), base),
    };
    let Some(path) = ctx.log_path.clone() else {
        return rec.misconfigured(
            format!("log: no log file known for `{}`", ctx.component),
            base,
        );
    };
    let offset = ctx.log_start_offset;
    let scan_path = path.clone();
    let scanned = tokio::task::spawn_blocking(move || scan_log(&scan_path, offset, &re)).await;
    let mut detail = base;
    detail["file"] = json!(path);
    detail["start_offset"] = json!(offset);
    match scanned {
        Ok(Ok(scan)) => match scan.hit {
            Some(hit) => {
                let mut line = hit.line.clone();
                if line.len() > 200 {
                    let mut end = 200;
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    line.truncate(end);
                }
                detail["line_no"] = json!(hit.line_no);
                detail["line"] = json!(line);
                let of = if hit.file != path {
                    format!(" of {}", hit.file.display())
                } else {
                    String::new()
                };
                rec.done(
                    true,
                    format!("log line {}{of} matched /{pattern}/", hit.line_no),
                    detail,
                )
            }
            None => {
                detail["lines_scanned"] = json!(scan.scanned);
                rec.done(
                    false,
                    format!(
                        "no line of {} after byte {offset} matches /{pattern}/ ({} lines)",
                        path.display(),
                        scan.scanned
                    ),
                    detail,
                )
            }
        },
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => rec.done(
            false,
            format!("log {} does not exist yet", path.display()),
            detail,
        ),
        Ok(Err(e)) => rec.done(false, format!("log {}: {e}", path.display()), detail),
        Err(e) => rec.done(false, format!("log: scanning task failed: {e}"), detail),
    }
}
