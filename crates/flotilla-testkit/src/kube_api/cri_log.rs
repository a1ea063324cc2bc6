//! Container logs as the container runtime keeps them, in the CRI logging format
//! (the kubelet's `pkg/kubelet/kuberuntime/logs/logs.go`, and the CRI API's
//! `cri-api/pkg/apis/runtime/v1/constants.go`): one line per line written,
//! `<RFC 3339 time, nanoseconds, UTC> <stdout|stderr> <F|P> <text>\n`, `F` a whole
//! line, `P` a piece of a longer one (a last line without its newline is written
//! whole here). The kubelet reads these files back for `pods/log`
//! ([`super::pod_logs`]): the text alone, or with `timestamps=true` the time, a space
//! and the text.

use std::io::{self, BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Now as the runtime stamps a line: RFC 3339 in UTC with nanoseconds
/// (`2026-12-03T10:41:03.120000000Z`).
pub fn now_stamp() -> String {
    humantime::format_rfc3339_nanos(SystemTime::now()).to_string()
}

/// `text` (one line, no newline) written to `stream` at `stamp`, as a CRI log line.
pub fn line(stamp: &str, stream: &str, text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(stamp.len() + stream.len() + text.len() + 5);
    out.extend_from_slice(stamp.as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_bytes());
    out.extend_from_slice(b" F ");
    out.extend_from_slice(text);
    out.push(b'\n');
    out
}

/// One line of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// When the runtime read it, as written (RFC 3339, nanoseconds).
    pub stamp: String,
    /// `stamp` in nanoseconds since the Unix epoch.
    pub at_ns: u128,
    /// What the container wrote (no newline).
    pub text: Vec<u8>,
}

/// Parses one CRI log line (without its newline); `None` when it is not one.
pub fn parse(line: &[u8]) -> Option<Entry> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let stamp = std::str::from_utf8(parts.next()?).ok()?;
    let _stream = parts.next()?;
    let _tag = parts.next()?;
    let text = parts.next().unwrap_or_default().to_vec();
    let at_ns = humantime::parse_rfc3339_weak(stamp)
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(Entry {
        stamp: stamp.to_string(),
        at_ns,
        text,
    })
}

/// The whole lines of `bytes` parsed, and how many bytes they took (a last line
/// without its newline is left for later).
pub fn parse_all(bytes: &[u8]) -> (Vec<Entry>, usize) {
    let mut out = Vec::new();
    let mut used = 0;
    while let Some(n) = bytes[used..].iter().position(|b| *b == b'\n') {
        if let Some(e) = parse(&bytes[used..used + n]) {
            out.push(e);
        }
        used += n + 1;
    }
    (out, used)
}

/// Copies what `from` writes into `to` as CRI lines of `stream`, each stamped when
/// it was read, until `from` ends (the process and everything holding the pipe
/// gone). Each line is one `write` to `to`, so two streams sharing it never
/// interleave within a line.
pub fn copy(from: impl io::Read, stream: &'static str, to: Arc<Mutex<std::fs::File>>) {
    let mut reader = io::BufReader::new(from);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
                let out = line(&now_stamp(), stream, text);
                let mut f = to.lock().unwrap_or_else(|e| e.into_inner());
                let _ = f.write_all(&out);
            }
        }
    }
}
