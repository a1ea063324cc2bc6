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

use crate::ExecError;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

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

/// Opens (creating it and its directory) a log file for appending.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// The last `n` lines of one file (lossy UTF-8), reading backwards from its end.
fn last_lines(path: &Path, n: usize) -> io::Result<Vec<String>> {
    let mut f = File::open(path)?;
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
        return Ok(Vec::new());
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
    Ok(lines.split_off(skip))
}

/// The last `lines` lines of a component's log (lossy UTF-8, without newlines), oldest
/// first. When the current file holds fewer lines (it was just rotated), the rest come
/// from `X.log.1`. A missing file reads as empty.
///
/// # Errors
/// [`ExecError::Io`] naming the file when it exists but cannot be read.
pub fn tail_log(path: &Path, lines: usize) -> Result<Vec<String>, ExecError> {
    let read = |p: &Path, n: usize| match last_lines(p, n) {
        Ok(v) => Ok(v),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err(p, e)),
    };
    let mut current = read(path, lines)?;
    if current.len() < lines {
        let mut older = read(&rotated_path(path, 1), lines - current.len())?;
        older.append(&mut current);
        current = older;
    }
    Ok(current)
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
/// `pattern`. If the file is now shorter than `offset` it was rotated since: the
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
            scanned += 1;
            let line = String::from_utf8_lossy(raw);
            if pattern.is_match(&line) {
                let before = count_newlines(&file, from)?;
                return Ok(LogScan {
                    hit: Some(LogHit {
                        file,
                        line_no: before + i as u64 + 1,
                        line: line.into_owned(),
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

/// Writes what is appended to the log at `path` from byte `from` on, forever
/// (`flotilla logs -f`): polls its size every 200 ms, starts again from the top when
/// it shrank (copy-truncate rotation), and waits for a log that does not exist yet.
///
/// # Errors
/// Reading the log or writing `out` (e.g. a closed pipe).
pub fn follow(path: &Path, from: u64, out: &mut impl std::io::Write) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut pos = from;
    loop {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if len < pos {
            pos = 0;
        }
        if len > pos {
            let mut f = std::fs::File::open(path)?;
            f.seek(SeekFrom::Start(pos))?;
            let mut buf = Vec::new();
            f.take(len - pos).read_to_end(&mut buf)?;
            out.write_all(&buf)?;
            out.flush()?;
            pos += buf.len() as u64;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
}
