//! The `exec` check: a command (stdin `/dev/null`, its own process group) exits 0
//! within the timeout; on timeout its whole group is SIGKILLed.

use super::outcome::{ellipsize, excerpt, human, ms, ProbeOutcome, Recorder};
use serde_json::json;
use std::time::Duration;

/// The first non-blank line of `bytes`, trimmed, at most 160 bytes.
fn first_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut end = line.len().min(160);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(line[..end].to_string())
}

/// `exec`: runs `command`; exit 0 passes.
pub(super) async fn check_exec(command: &[String], timeout: Duration) -> ProbeOutcome {
    let rec = Recorder::new();
    let Some((program, args)) = command.split_first() else {
        return rec.misconfigured("exec: empty command".into(), json!({"kind": "exec"}));
    };
    let shown = ellipsize(command.join(" "));
    let what = format!("exec `{shown}`");
    let detail = json!({"kind": "exec", "command": command});
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let fatal = matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            );
            let out = rec.done(false, format!("{what}: cannot run: {e}"), detail);
            return ProbeOutcome {
                misconfigured: fatal,
                ..out
            };
        }
    };
    let pid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let took = ms(rec.t0.elapsed());
            let status = crate::process::describe_exit(&out.status);
            let line = if out.status.success() {
                first_line(&out.stdout).or_else(|| first_line(&out.stderr))
            } else {
                first_line(&out.stderr).or_else(|| first_line(&out.stdout))
            };
            let mut detail = detail;
            detail["exit_code"] = json!(out.status.code());
            detail["stdout_excerpt"] = json!(excerpt(&out.stdout));
            detail["stderr_excerpt"] = json!(excerpt(&out.stderr));
            let tail = line.map(|l| format!(": {l}")).unwrap_or_default();
            rec.done(
                out.status.success(),
                format!("{what} → {status} ({took}){tail}"),
                detail,
            )
        }
        Ok(Err(e)) => rec.done(false, format!("{what}: waiting failed: {e}"), detail),
        Err(_) => {
            if let Some(pid) = pid {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            rec.done(
                false,
                format!("{what}: no exit within {}: killed", human(timeout)),
                detail,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_skips_blank_lines() {
        assert_eq!(first_line(b"\n\n  hello \nworld"), Some("hello".into()));
    }
}
