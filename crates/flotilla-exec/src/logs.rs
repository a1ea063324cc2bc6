//! Component log files: size-capped rotation, tailing, and scanning for the `log` probe.
//!
//! A managed component's stdout and stderr go to one file opened with `O_APPEND`
//! (`logs/<component>.log`). Rotation is **copy-truncate**: `X.log` is copied to
//! `X.log.1` (older copies shift to `.2` … `.keep`, the oldest is deleted) and `X.log`
//! is truncated to zero. The running component keeps its file descriptor, and since
//! it writes with `O_APPEND`, its next write lands at the new end of the file (offset
//! 0) instead of leaving a hole. The price: lines written between the copy and the
//! truncation are lost (a window of microseconds to milliseconds for large files).
//! Rotation happens when a component starts and whenever a caller (e.g. each CLI
//! invocation) calls [`rotate_if_needed`]; nothing rotates in the background.
//!
//! **Markers.** Flotilla appends one line of its own at every start and stop of a
//! component ([`append_marker`]):
//! `--- flotilla 2026-12-01T10:41:03.120Z: started pid 4242 (op-12) ---`. The `log`
//! probe never matches them.
//!
//! **When a line was written.** A process component's output goes through its log
//! writer ([`crate::log_writer`]), which stamps every line as it reads it, in the
//! Kubernetes CRI log format: `2026-12-01T10:41:03.120Z stdout F text`
//! ([`parse_stamped`]); readers show the text and use the time (exact to the
//! millisecond). Lines written without a writer (a log from an older version, a
//! component started by a library without one) have no time of their own, so it is
//! known as an upper bound ([`TimedLine::at_ms`], "written at or before"):
//! - a marker line: the time in it (exact);
//! - a line already in the file: the time of the first stamped or marker line after
//!   it, else the file's modification time (when its last line was written) — for
//!   lines in a rotated copy (`X.log.1`), that copy's modification time at most;
//! - a line read while following ([`Follower`]): the file's modification time just
//!   after it was read, which is within one poll (100 ms) of when it was written.
//!
//! Lines of one file keep their order; [`merge`] interleaves several files by these
//! times.

use crate::ExecError;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How a marker line begins.
const MARKER_START: &str = "--- flotilla ";
/// How a marker line ends.
const MARKER_END: &str = " ---";

fn io_err(path: &Path, source: io::Error) -> ExecError {
    ExecError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `X.log` → `X.log.<n>` (the n-th rotated copy; 1 is the newest).
pub fn rotated_path(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// The size of a file in bytes, 0 when it does not exist.
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Rotates `path` (copy-truncate, see the module docs) if it is larger than
/// `max_bytes`, keeping `keep` rotated copies (`keep == 0`: just truncate).
/// `max_bytes == 0` means "no cap": never rotates. Returns whether it rotated.
///
/// # Errors
/// [`ExecError::Io`] naming the file that could not be renamed, copied or truncated.
pub fn rotate_if_needed(path: &Path, max_bytes: u64, keep: u32) -> Result<bool, ExecError> {
    if max_bytes == 0 {
        return Ok(false);
    }
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err(path, e)),
    };
    if len <= max_bytes {
        return Ok(false);
    }
    if keep > 0 {
        let oldest = rotated_path(path, keep);
        match std::fs::remove_file(&oldest) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&oldest, e)),
        }
        for n in (1..keep).rev() {
            let from = rotated_path(path, n);
            match std::fs::rename(&from, rotated_path(path, n + 1)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&from, e)),
            }
        }
        let first = rotated_path(path, 1);
        std::fs::copy(path, &first).map_err(|e| io_err(&first, e))?;
    }
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(0))
        .map_err(|e| io_err(path, e))?;
    Ok(true)
}

/// Opens (creating it and its directory) a log file for appending (`O_APPEND`: each
/// write lands whole at the end, after whatever another writer added).
///
/// # Errors
/// Making the directory or opening the file.
pub fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// The last `n` lines of one file (lossy UTF-8), reading backwards from its end.
fn last_lines(path: &Path, n: usize) -> io::Result<Vec<String>> {
    Ok(last_lines_of(&mut File::open(path)?, n)?.0)
}

/// The last `n` lines of an open file, and its length when read. A file truncated
/// while it was read (a copy-truncate rotation) is read again, up to 5 times.
fn last_lines_of(f: &mut File, n: usize) -> io::Result<(Vec<String>, u64)> {
    let mut tries = 0;
    loop {
        match last_lines_once(f, n) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && tries < 5 => tries += 1,
            other => return other,
        }
    }
}

fn last_lines_once(f: &mut File, n: usize) -> io::Result<(Vec<String>, u64)> {
    let len = f.metadata()?.len();
    let mut start = len;
    let mut buf: Vec<u8> = Vec::new();
    const CHUNK: u64 = 64 * 1024;
    loop {
        // Newlines in buf, not counting a final one that ends the last line.
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let newlines = body.iter().filter(|&&b| b == b'\n').count();
        if newlines >= n || start == 0 {
            break;
        }
        let step = CHUNK.min(start);
        start -= step;
        f.seek(SeekFrom::Start(start))?;
        let mut chunk = vec![0u8; step as usize];
        f.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
    }
    let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
    if body.is_empty() {
        return Ok((Vec::new(), len));
    }
    let mut lines: Vec<String> = body
        .split(|&b| b == b'\n')
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    if start > 0 {
        // The first piece may be the tail of a longer line; we only keep whole ones.
        lines.remove(0);
    }
    let skip = lines.len().saturating_sub(n);
    Ok((lines.split_off(skip), len))
}

/// The last `lines` lines of a component's log (lossy UTF-8, without newlines), oldest
/// first. When the current file holds fewer lines (it was just rotated), the rest come
/// from `X.log.1`. A missing file reads as empty.
///
/// # Errors
/// [`ExecError::Io`] naming the file when it exists but cannot be read.
pub fn tail_log(path: &Path, lines: usize) -> Result<Vec<String>, ExecError> {
    Ok(tail_with_end(path, lines)?.0)
}

/// [`tail_log`] and where the current file ended when its lines were read (the
/// cursor for [`read_since`]).
///
/// # Errors
/// [`ExecError::Io`] naming the file when it exists but cannot be read.
pub fn tail_with_end(path: &Path, lines: usize) -> Result<(Vec<String>, u64), ExecError> {
    let (mut current, end) = match File::open(path) {
        Ok(mut f) => last_lines_of(&mut f, lines).map_err(|e| io_err(path, e))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), 0),
        Err(e) => return Err(io_err(path, e)),
    };
    if current.len() < lines {
        let old = rotated_path(path, 1);
        let mut older = match last_lines(&old, lines - current.len()) {
            Ok(v) => v,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&old, e)),
        };
        older.append(&mut current);
        current = older;
    }
    Ok((current, end))
}

/// The whole lines appended to the log at `path` since byte `from` (a cursor from
/// [`tail_with_end`] or an earlier call), at most about `max_bytes` of them, and the
/// cursor after them (`flotilla logs -f` of a component on another host, polled
/// there). A log shorter than `from` was rotated (copy-truncate) since: the rest of
/// `X.log.1` from `from` comes first, then the new file from its start. An
/// unfinished last line is left for the next call.
///
/// # Errors
/// [`ExecError::Io`] naming the file when it exists but cannot be read.
pub fn read_since(path: &Path, from: u64, max_bytes: u64) -> Result<(Vec<String>, u64), ExecError> {
    let read = |p: &Path, at: u64, buf: &mut Vec<u8>| -> Result<u64, ExecError> {
        let mut f = match File::open(p) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_err(p, e)),
        };
        let len = f.metadata().map_err(|e| io_err(p, e))?.len();
        if len > at {
            f.seek(SeekFrom::Start(at)).map_err(|e| io_err(p, e))?;
            f.take(max_bytes)
                .read_to_end(buf)
                .map_err(|e| io_err(p, e))?;
        }
        Ok(len)
    };
    let mut buf = Vec::new();
    let len = file_len(path);
    let mut cursor = if len < from {
        let old = rotated_path(path, 1);
        read(&old, from, &mut buf)?;
        // Whatever the old copy held after `from` is read whole (it no longer
        // grows), so the new file is read from its start.
        if let Some(nl) = buf.iter().rposition(|&b| b == b'\n') {
            buf.truncate(nl + 1);
        } else {
            buf.clear();
        }
        0
    } else {
        from
    };
    let before = buf.len();
    read(path, cursor, &mut buf)?;
    // Only whole lines: the cursor stops after the last newline read here.
    let tail = &buf[before..];
    let kept = tail.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    buf.truncate(before + kept);
    cursor += kept as u64;
    let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
    let lines = if body.is_empty() {
        Vec::new()
    } else {
        body.split(|&b| b == b'\n')
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect()
    };
    Ok((lines, cursor))
}

/// What this run of a component wrote: the texts of the last `n` lines written at
/// or after byte `offset` of its log (markers included, e.g. how it ended; at most
/// the last 64 KiB are read). Empty when the log cannot be read, or was rotated
/// since (shorter than `offset`).
pub fn tail_since(path: &Path, offset: u64, n: usize) -> Vec<String> {
    const MAX_READ: u64 = 64 * 1024;
    let read = || -> io::Result<Vec<String>> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len();
        if len < offset {
            return Ok(Vec::new());
        }
        let from = offset.max(len.saturating_sub(MAX_READ));
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let mut body: &[u8] = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if from > offset {
            // Started mid-line: drop the piece.
            body = body
                .iter()
                .position(|&b| b == b'\n')
                .map_or(&[][..], |i| &body[i + 1..]);
        }
        if body.is_empty() {
            return Ok(Vec::new());
        }
        let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
        Ok(lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|raw| text_of(&String::from_utf8_lossy(raw)).to_string())
            .collect())
    };
    read().unwrap_or_default()
}

/// How `pid` ended, as its log writer recorded it in the log at `path`
/// (`--- flotilla <time>: pid 4242 ended: killed by SIGKILL ---`): `(time in ms
/// since the epoch, "killed by SIGKILL")`. Only the last 16 KiB of the file are
/// read; `None` when no such marker is there.
pub fn ended(path: &Path, pid: u32) -> Option<(u64, String)> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)))
        .ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let needle = format!(": pid {pid} ended: ");
    String::from_utf8_lossy(&buf)
        .lines()
        .rev()
        .find_map(|line| {
            let at = marker_time_ms(line)?;
            let (_, how) = line.split_once(&needle)?;
            Some((at, how.strip_suffix(MARKER_END)?.to_string()))
        })
}

/// A line found by [`scan_log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogHit {
    /// The file it is in (`X.log`, or `X.log.1` after a rotation).
    pub file: PathBuf,
    /// 1-based line number in that file.
    pub line_no: u64,
    /// The line (lossy UTF-8).
    pub line: String,
}

/// What [`scan_log`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogScan {
    /// The first matching line, if any.
    pub hit: Option<LogHit>,
    /// Lines examined.
    pub scanned: u64,
}

/// Finds the first line written at or after byte `offset` of `path` that matches
/// `pattern` (Flotilla's marker lines never match). If the file is now shorter than `offset` it was rotated since: the
/// rest of the old file (in `X.log.1`, from `offset`) is scanned first, then the
/// whole current file. The final line counts even before its newline is written.
pub(crate) fn scan_log(path: &Path, offset: u64, pattern: &regex::Regex) -> io::Result<LogScan> {
    let mut scanned = 0;
    let len = std::fs::metadata(path)?.len();
    let mut parts: Vec<(PathBuf, u64)> = Vec::new();
    if len < offset {
        let old = rotated_path(path, 1);
        if file_len(&old) > offset {
            parts.push((old, offset));
        }
        parts.push((path.to_path_buf(), 0));
    } else {
        parts.push((path.to_path_buf(), offset));
    }
    for (file, from) in parts {
        let mut f = File::open(&file)?;
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if body.is_empty() {
            continue;
        }
        for (i, raw) in body.split(|&b| b == b'\n').enumerate() {
            let raw = String::from_utf8_lossy(raw);
            if is_marker(&raw) {
                continue;
            }
            let line = text_of(&raw);
            scanned += 1;
            if pattern.is_match(line) {
                let before = count_newlines(&file, from)?;
                return Ok(LogScan {
                    hit: Some(LogHit {
                        file,
                        line_no: before + i as u64 + 1,
                        line: line.to_string(),
                    }),
                    scanned,
                });
            }
        }
    }
    Ok(LogScan { hit: None, scanned })
}

/// Newlines in the first `upto` bytes of a file.
fn count_newlines(path: &Path, upto: u64) -> io::Result<u64> {
    let mut f = File::open(path)?.take(upto);
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0;
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Ok(n);
        }
        n += buf[..got].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// Milliseconds since the Unix epoch of `t` (0 before it).
fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `t` as RFC 3339 in UTC with milliseconds: `2026-12-01T10:41:03.120Z`.
pub fn rfc3339_ms(at_ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(at_ms)).to_string()
}

/// The marker line for `text` at `at`:
/// `--- flotilla 2026-12-01T10:41:03.120Z: started pid 4242 (op-12) ---` (line breaks
/// in `text` become spaces; no newline at the end).
pub fn marker_line(at: SystemTime, text: &str) -> String {
    let text: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    format!(
        "{MARKER_START}{}: {text}{MARKER_END}",
        humantime::format_rfc3339_millis(at)
    )
}

/// A log line as the log writer stamped it (the Kubernetes CRI container log
/// format): `<RFC 3339 time> <stdout|stderr> <F|P> <text>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamped<'a> {
    /// When the writer read it, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `stdout` or `stderr`.
    pub stream: &'a str,
    /// `P`: a piece of a longer line (or an unfinished last one); `F`: a whole line
    /// or the last piece of one.
    pub partial: bool,
    /// What the component wrote (no newline).
    pub text: &'a str,
}

/// Appends `text` to `out` as one stamped line, as the log writer writes it and
/// [`parse_stamped`] reads it back: `<stamp> <stdout|stderr> <F|P> <text>\n`, where
/// `stamp` is an RFC 3339 time (`2026-12-01T10:41:03.120Z`) and `P` marks a piece
/// (`whole` false).
pub fn push_stamped(out: &mut Vec<u8>, stamp: &str, stream: &str, whole: bool, text: &[u8]) {
    out.extend_from_slice(stamp.as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_bytes());
    out.extend_from_slice(if whole { b" F " } else { b" P " });
    out.extend_from_slice(text);
    out.push(b'\n');
}

/// `log` with `.suffix` added to its file name (`logs/llm.log` → `logs/llm.log.pods`):
/// where what was copied into a log from its owner is remembered.
pub fn beside(log: &Path, suffix: &str) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".");
    s.push(suffix);
    PathBuf::from(s)
}

/// An RFC 3339 time (`2026-12-01T10:41:03.120000001Z`, any offset) in nanoseconds
/// since the Unix epoch; `None` when it is not one or is before the epoch.
pub fn rfc3339_ns(stamp: &str) -> Option<u128> {
    humantime::parse_rfc3339_weak(stamp)
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_nanos())
}

/// Parses a stamped line; `None` for a marker or a line written without a log writer.
pub fn parse_stamped(line: &str) -> Option<Stamped<'_>> {
    let (stamp, rest) = line.split_once(' ')?;
    let (stream, rest) = rest.split_once(' ')?;
    if stream != "stdout" && stream != "stderr" {
        return None;
    }
    let (tag, text) = match rest.split_once(' ') {
        Some((tag, text)) => (tag, text),
        None => (rest, ""),
    };
    let partial = match tag {
        "F" => false,
        "P" => true,
        _ => return None,
    };
    if !stamp.ends_with('Z') || !stamp.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let at_ms = epoch_ms(humantime::parse_rfc3339(stamp).ok()?);
    Some(Stamped {
        at_ms,
        stream,
        partial,
        text,
    })
}

/// What a component wrote on a log line: the text of a stamped line, else the line.
pub fn text_of(line: &str) -> &str {
    parse_stamped(line).map_or(line, |s| s.text)
}

/// Whether `line` is one of Flotilla's marker lines.
pub fn is_marker(line: &str) -> bool {
    marker_time_ms(line).is_some()
}

/// The time in a marker line, in milliseconds since the epoch; `None` for any other
/// line.
pub fn marker_time_ms(line: &str) -> Option<u64> {
    let rest = line.strip_prefix(MARKER_START)?;
    if !rest.ends_with(MARKER_END) {
        return None;
    }
    let (stamp, _) = rest.split_once(": ")?;
    humantime::parse_rfc3339(stamp).ok().map(epoch_ms)
}

/// [`append_marker_at`] now.
pub fn append_marker(path: &Path, text: &str) {
    append_marker_at(path, SystemTime::now(), text)
}

/// Appends a marker line saying `text` (e.g. `started pid 4242 (op-12)`), stamped
/// `at`, to the log at `path` (created with its directory if missing), on a line of
/// its own even if the component left its last line unfinished. Never fails: a
/// marker that cannot be written is a warning in Flotilla's own log, not a failed
/// step. `text` must never carry a secret.
pub fn append_marker_at(path: &Path, at: SystemTime, text: &str) {
    let line = marker_line(at, text);
    let write = || -> io::Result<()> {
        let mut f = open_append(path)?;
        let len = f.metadata()?.len();
        let mut buf = Vec::with_capacity(line.len() + 2);
        if len > 0 {
            let mut last = [0u8; 1];
            let mut r = File::open(path)?;
            r.seek(SeekFrom::Start(len - 1))?;
            if r.read(&mut last)? == 1 && last[0] != b'\n' {
                buf.push(b'\n');
            }
        }
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        // One write: with O_APPEND it lands whole after whatever was written before.
        f.write_all(&buf)
    };
    if let Err(e) = write() {
        tracing::warn!(log = %path.display(), error = %e, "cannot write a marker line");
    }
}

/// A log line and the time Flotilla knows it had been written by (see the module
/// docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedLine {
    /// The line was written at or before this instant (ms since the Unix epoch):
    /// exact for marker lines, an upper bound for the others.
    pub at_ms: u64,
    /// The line (lossy UTF-8, no newline).
    pub text: String,
}

/// Times lines read from the end of one file whose last line was written at or
/// before `end_ms` (its modification time): a stamped line ([`parse_stamped`]) gets
/// its own time and is shown by its text, the pieces of a line written in several
/// (`P` … then `F`, one stream) joined into one, as CRI log readers do; a marker
/// line its own time; any other line the time of the first stamped or marker line
/// after it, else `end_ms`. Lines stay in file order (a marker written late, such
/// as a death noticed after its process's last lines were read, may carry an
/// earlier time than the lines before it).
pub fn bound_times(lines: Vec<String>, end_ms: u64) -> Vec<TimedLine> {
    // Forward: join pieces, per stream, at the place of their first piece.
    // (time, text, exact)
    let mut joined: Vec<(u64, String, bool)> = Vec::with_capacity(lines.len());
    let mut open: Vec<(String, usize)> = Vec::new(); // (stream, index in joined)
    for line in lines {
        match parse_stamped(&line) {
            Some(st) => {
                let at = open.iter().position(|(s, _)| s == st.stream);
                let index = match at {
                    Some(k) => {
                        let index = open[k].1;
                        if !st.partial {
                            open.remove(k);
                        }
                        index
                    }
                    None => {
                        joined.push((st.at_ms, String::new(), true));
                        if st.partial {
                            open.push((st.stream.to_string(), joined.len() - 1));
                        }
                        joined.len() - 1
                    }
                };
                joined[index].1.push_str(st.text);
            }
            None => match marker_time_ms(&line) {
                Some(t) => joined.push((t, line, true)),
                None => joined.push((0, line, false)),
            },
        }
    }
    // Backward: bound the unstamped lines.
    let mut bound = end_ms;
    let mut out: Vec<TimedLine> = joined
        .into_iter()
        .rev()
        .map(|(at, text, exact)| {
            if exact {
                bound = bound.min(at);
                TimedLine { at_ms: at, text }
            } else {
                TimedLine { at_ms: bound, text }
            }
        })
        .collect();
    out.reverse();
    out
}

/// The last lines of a component's log and where the current file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    /// Oldest first, timed as [`bound_times`] says.
    pub lines: Vec<TimedLine>,
    /// The current file's length when read: where [`Follower`] goes on from.
    pub end: u64,
}

/// [`tail_log`] with times: the last `lines` lines of a component's log (taking
/// the rest from `X.log.1` when the current file holds fewer), each with the time it
/// was written by.
///
/// # Errors
/// [`ExecError::Io`] naming the file when it exists but cannot be read.
pub fn tail_timed(path: &Path, lines: usize) -> Result<Tail, ExecError> {
    // (lines, length, modification time in ms), read before the time is taken so the
    // time bounds every line read.
    let read = |p: &Path, n: usize| -> Result<(Vec<String>, u64, u64), ExecError> {
        let mut f = match File::open(p) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), 0, 0)),
            Err(e) => return Err(io_err(p, e)),
        };
        let (got, len) = last_lines_of(&mut f, n).map_err(|e| io_err(p, e))?;
        let mtime = f
            .metadata()
            .and_then(|m| m.modified())
            .map(epoch_ms)
            .unwrap_or_else(|_| epoch_ms(SystemTime::now()));
        Ok((got, len, mtime))
    };
    let (current, end, mtime) = read(path, lines)?;
    let mut timed = bound_times(current, mtime);
    if timed.len() < lines {
        let (older, _, older_mtime) = read(&rotated_path(path, 1), lines - timed.len())?;
        let cap = timed.first().map(|l| l.at_ms).unwrap_or(mtime);
        let mut all = bound_times(older, older_mtime.min(cap));
        all.append(&mut timed);
        timed = all;
    }
    Ok(Tail { lines: timed, end })
}

/// Interleaves several components' timed lines by time (a stable merge: lines of
/// one source keep their order, and at equal times the earlier source comes first).
/// Returns (source index, line) pairs.
pub fn merge(sources: Vec<Vec<TimedLine>>) -> Vec<(usize, TimedLine)> {
    let mut all: Vec<(usize, usize, TimedLine)> = sources
        .into_iter()
        .enumerate()
        .flat_map(|(i, lines)| lines.into_iter().enumerate().map(move |(k, l)| (i, k, l)))
        .collect();
    // Times never decrease within a source, so sorting by (time, source, position)
    // keeps each source's order.
    all.sort_by_key(|(i, k, l)| (l.at_ms, *i, *k));
    all.into_iter().map(|(i, _, l)| (i, l)).collect()
}

/// How often `flotilla logs -f` polls the logs it follows here ([`Follower::poll`]).
pub const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// Polls an unfinished last line waits for its end before it is shown anyway.
const PARTIAL_POLLS: u32 = 10;

/// One log followed by a [`Follower`].
#[derive(Debug)]
struct Followed {
    path: PathBuf,
    /// Bytes of the current file already read.
    pos: u64,
    /// The end of a line not yet finished, and for how many polls it has waited.
    partial: Vec<u8>,
    waited: u32,
    /// The first bytes of the file (up to [`HEAD_BYTES`]) as read: when they change,
    /// the file was rotated even if it has outgrown `pos` again since.
    head: Vec<u8>,
}

/// How many of a followed file's first bytes tell a rotation.
const HEAD_BYTES: u64 = 64;

/// The first `n` bytes of a file (fewer if it is shorter).
fn head_of(file: &mut File, n: u64) -> io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(0))?;
    let mut head = Vec::new();
    file.take(n).read_to_end(&mut head)?;
    Ok(head)
}

/// Follows several logs at once (`flotilla logs -f`): each [`Follower::poll`] returns
/// the whole lines appended since the last one, timed by the file's modification
/// time just after reading them, in time order. Copy-truncate rotation is followed:
/// the unread rest of the old file is read from `X.log.1`, then the new file from
/// its start. A log that does not exist yet is waited for. An unfinished last line
/// is held back until its newline arrives, or shown as it is after about a second.
#[derive(Debug)]
pub struct Follower {
    logs: Vec<Followed>,
}

impl Follower {
    /// Follows `logs`, each from a byte offset (e.g. [`Tail::end`]).
    pub fn new(logs: impl IntoIterator<Item = (PathBuf, u64)>) -> Follower {
        Follower {
            logs: logs
                .into_iter()
                .map(|(path, pos)| {
                    let head = File::open(&path)
                        .and_then(|mut f| head_of(&mut f, pos.min(HEAD_BYTES)))
                        .unwrap_or_default();
                    Followed {
                        path,
                        pos,
                        partial: Vec::new(),
                        waited: 0,
                        head,
                    }
                })
                .collect(),
        }
    }

    /// The lines appended since the last poll, as (log index, line), in time order.
    ///
    /// # Errors
    /// Reading a log that exists.
    pub fn poll(&mut self) -> io::Result<Vec<(usize, TimedLine)>> {
        let mut sources = Vec::with_capacity(self.logs.len());
        for f in &mut self.logs {
            sources.push(Self::poll_one(f)?);
        }
        Ok(merge(sources))
    }

    fn poll_one(f: &mut Followed) -> io::Result<Vec<TimedLine>> {
        let mut data = std::mem::take(&mut f.partial);
        let had_partial = !data.is_empty();
        let mut file = match File::open(&f.path) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let len = match &file {
            Some(file) => file.metadata()?.len(),
            None => 0,
        };
        let replaced = match file.as_mut() {
            Some(file) if len >= f.pos && !f.head.is_empty() => {
                head_of(file, f.head.len() as u64)? != f.head
            }
            _ => false,
        };
        if len < f.pos || replaced {
            // Rotated (copy-truncate) since: the rest of the old file is in `X.log.1`.
            if let Ok(mut old) = File::open(rotated_path(&f.path, 1)) {
                if old.metadata()?.len() > f.pos {
                    old.seek(SeekFrom::Start(f.pos))?;
                    old.read_to_end(&mut data)?;
                }
            }
            f.pos = 0;
            f.head.clear();
        }
        let mut grew = false;
        if let Some(file) = file.as_mut() {
            if len > f.pos {
                file.seek(SeekFrom::Start(f.pos))?;
                let before = data.len();
                file.take(len - f.pos).read_to_end(&mut data)?;
                f.pos += (data.len() - before) as u64;
                grew = data.len() > before;
                if (f.head.len() as u64) < HEAD_BYTES.min(f.pos) {
                    f.head = head_of(file, HEAD_BYTES.min(f.pos))?;
                }
            }
        }
        let at_ms = file
            .as_ref()
            .and_then(|file| file.metadata().and_then(|m| m.modified()).ok())
            .map(epoch_ms)
            .unwrap_or_else(|| epoch_ms(SystemTime::now()))
            .min(epoch_ms(SystemTime::now()));
        let mut out = Vec::new();
        let mut rest: &[u8] = &data;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            out.push(String::from_utf8_lossy(&rest[..nl]).into_owned());
            rest = &rest[nl + 1..];
        }
        if !rest.is_empty() {
            f.waited = if grew || !had_partial {
                0
            } else {
                f.waited + 1
            };
            if f.waited >= PARTIAL_POLLS {
                out.push(String::from_utf8_lossy(rest).into_owned());
                f.waited = 0;
            } else {
                f.partial = rest.to_vec();
            }
        }
        // Marker lines carry their own time, which bounds the lines before them.
        Ok(bound_times(out, at_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_are_stamped_in_the_cri_format() {
        let stamp = rfc3339_ms(1_796_121_663_120);
        let mut out = Vec::new();
        push_stamped(&mut out, &stamp, "stderr", true, b"hello");
        push_stamped(&mut out, &stamp, "stdout", false, b"par");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2026-12-01T10:41:03.120Z stderr F hello\n2026-12-01T10:41:03.120Z stdout P par\n"
        );
    }

    #[test]
    fn stamped_lines_keep_their_own_time_and_pieces_are_joined() {
        let stamp = |ms: u64, rest: &str| format!("{} {rest}", rfc3339_ms(ms));
        let lines = vec![
            "unstamped".to_string(),
            stamp(1_000_005, "stdout P no new"),
            stamp(1_000_007, "stderr F err"),
            stamp(1_000_009, "stdout F line here"),
            stamp(1_000_010, "stdout F next"),
        ];
        // The file's modification time reads earlier than the last stamp.
        let timed = bound_times(lines, 1_000_008);
        let got: Vec<(u64, &str)> = timed.iter().map(|l| (l.at_ms, l.text.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (1_000_005, "unstamped"),
                (1_000_005, "no newline here"),
                (1_000_007, "err"),
                (1_000_010, "next"),
            ]
        );
    }

    #[test]
    fn rotate_tail_and_scan() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/c.log");
        let mut f = open_append(&log).unwrap();
        for i in 0..10 {
            writeln!(f, "line {i}").unwrap();
        }
        assert_eq!(tail_log(&log, 3).unwrap(), ["line 7", "line 8", "line 9"]);
        assert_eq!(tail_log(&log, 100).unwrap().len(), 10);
        let offset = file_len(&log);
        assert!(!rotate_if_needed(&log, 1000, 2).unwrap());
        assert!(rotate_if_needed(&log, 10, 2).unwrap());
        assert_eq!(file_len(&log), 0);
        // The writer keeps appending at the new end.
        writeln!(f, "after").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "after\n");
        assert_eq!(tail_log(&log, 2).unwrap(), ["line 9", "after"]);
        let re = regex::Regex::new("after").unwrap();
        let hit = scan_log(&log, offset, &re).unwrap().hit.unwrap();
        assert_eq!((hit.line_no, hit.file), (1, log.clone()));
        let re = regex::Regex::new("line 3").unwrap();
        assert_eq!(scan_log(&log, offset, &re).unwrap().hit, None);
        assert!(rotate_if_needed(&log, 1, 2).unwrap());
        assert!(rotate_if_needed(&log, 0, 2).is_ok());
        assert!(rotated_path(&log, 2).exists());
        assert!(!rotated_path(&log, 3).exists());
        assert!(tail_log(&dir.path().join("none.log"), 5)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn tail_of_long_file_keeps_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("big.log");
        let mut f = open_append(&log).unwrap();
        for i in 0..20_000 {
            writeln!(f, "entry number {i}").unwrap();
        }
        write!(f, "partial").unwrap();
        assert_eq!(
            tail_log(&log, 2).unwrap(),
            ["entry number 19999", "partial"]
        );
        assert_eq!(tail_log(&log, 5000).unwrap().len(), 5000);
    }

    #[test]
    fn markers_are_one_line_stamped_and_never_matched_by_the_log_probe() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/m.log");
        append_marker(&log, "started pid 4242 (op-12)");
        let mut f = open_append(&log).unwrap();
        write!(f, "unfinished").unwrap();
        append_marker(&log, "stopped pid 4242\nwith SIGTERM (op-13)");
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("--- flotilla 20"), "{text}");
        assert!(
            lines[0].ends_with("Z: started pid 4242 (op-12) ---"),
            "{text}"
        );
        assert_eq!(lines[1], "unfinished");
        assert!(lines[2].ends_with(": stopped pid 4242 with SIGTERM (op-13) ---"));
        let t = marker_time_ms(lines[0]).unwrap();
        let now = epoch_ms(SystemTime::now());
        assert!(now >= t && now - t < 10_000);
        assert!(!is_marker("--- flotilla yesterday: hi ---"));
        assert!(!is_marker("started"));
        let re = regex::Regex::new("started|stopped").unwrap();
        assert_eq!(scan_log(&log, 0, &re).unwrap().hit, None);
        // Unwritable: a warning, not a failure.
        append_marker(&dir.path().join("logs/m.log/x.log"), "nothing");
        assert_eq!(
            marker_line(UNIX_EPOCH + Duration::from_millis(1_796_121_663_120), "x"),
            "--- flotilla 2026-12-01T10:41:03.120Z: x ---"
        );
    }

    #[test]
    fn lines_are_timed_by_the_next_marker_or_the_files_mtime_and_merged() {
        let m = |ms: u64, t: &str| marker_line(UNIX_EPOCH + Duration::from_millis(ms), t);
        let a = bound_times(
            vec![
                "a0".into(),
                m(1_000, "started"),
                "a1".into(),
                m(3_000, "stopped"),
                "a2".into(),
            ],
            9_000,
        );
        let at: Vec<u64> = a.iter().map(|l| l.at_ms).collect();
        assert_eq!(at, [1_000, 1_000, 3_000, 3_000, 9_000]);
        let b = bound_times(vec![m(2_000, "started"), "b1".into()], 5_000);
        let merged: Vec<String> = merge(vec![a, b])
            .into_iter()
            .map(|(i, l)| format!("{i}:{}", l.text.split(':').next_back().unwrap()))
            .collect();
        assert_eq!(
            merged,
            [
                "0:a0",
                "0: started ---",
                "1: started ---",
                "0:a1",
                "0: stopped ---",
                "1:b1",
                "0:a2"
            ]
        );

        // From a file: its modification time bounds what follows the last marker,
        // and lines from the rotated copy come first.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("t.log");
        std::fs::write(rotated_path(&log, 1), "old\n").unwrap();
        std::fs::write(&log, format!("{}\nnew\n", m(5_000, "started"))).unwrap();
        let tail = tail_timed(&log, 10).unwrap();
        assert_eq!(tail.end, file_len(&log));
        let texts: Vec<&str> = tail.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts[0], "old");
        assert_eq!(texts[2], "new");
        assert_eq!(tail.lines[0].at_ms, 5_000, "capped by the marker after it");
        assert_eq!(tail.lines[1].at_ms, 5_000);
        let mtime = epoch_ms(std::fs::metadata(&log).unwrap().modified().unwrap());
        assert_eq!(tail.lines[2].at_ms, mtime);
        assert_eq!(tail_timed(&log, 1).unwrap().lines.len(), 1);
        assert!(tail_timed(&dir.path().join("none.log"), 5)
            .unwrap()
            .lines
            .is_empty());
    }

    #[test]
    fn follower_reads_several_logs_across_rotation_and_waits_for_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        let b = dir.path().join("b.log");
        let mut fa = open_append(&a).unwrap();
        writeln!(fa, "before").unwrap();
        let mut follower = Follower::new([(a.clone(), file_len(&a)), (b.clone(), 0)]);
        assert!(follower.poll().unwrap().is_empty());
        writeln!(fa, "a1").unwrap();
        write!(fa, "a2 part").unwrap();
        let mut fb = open_append(&b).unwrap();
        writeln!(fb, "b1").unwrap();
        let got: Vec<(usize, String)> = follower
            .poll()
            .unwrap()
            .into_iter()
            .map(|(i, l)| (i, l.text))
            .collect();
        assert!(got.contains(&(0, "a1".into())) && got.contains(&(1, "b1".into())));
        assert_eq!(got.len(), 2, "{got:?}");
        writeln!(fa, "ial").unwrap();
        // Rotation with the file grown past the old position again before the poll:
        // the rest is read from the copy, then the new file from its start.
        writeln!(fa, "last before rotation").unwrap();
        assert!(rotate_if_needed(&a, 1, 1).unwrap());
        writeln!(
            fa,
            "after rotation, long enough to pass the old read position"
        )
        .unwrap();
        let got: Vec<String> = follower
            .poll()
            .unwrap()
            .into_iter()
            .map(|(_, l)| l.text)
            .collect();
        assert_eq!(
            got,
            [
                "a2 partial",
                "last before rotation",
                "after rotation, long enough to pass the old read position"
            ]
        );
        // An unfinished line is shown after about a second without growth.
        write!(fb, "no newline").unwrap();
        let mut shown = Vec::new();
        for _ in 0..=PARTIAL_POLLS {
            shown.extend(follower.poll().unwrap());
        }
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].1.text, "no newline");
    }
}
