//! Retention: the archives of one thing (a project, or the authority) in a backup
//! directory, oldest first by the time in their names, and pruning them to the
//! newest N. Other entries of the directory (other projects' archives, archives
//! being written, anything else) are never touched.

use super::error::BackupError;
use super::manifest::{is_stamp, prefix};
use super::Kind;
use std::path::{Path, PathBuf};

/// The archives of `kind`/`name` in `dir`, oldest first (none when `dir` does not
/// exist): directories named `<prefix><UTC time>` (see
/// [`super::manifest::prefix`]).
///
/// # Errors
/// [`BackupError::Io`] when `dir` cannot be read.
pub fn archives(dir: &Path, kind: Kind, name: &str) -> Result<Vec<PathBuf>, BackupError> {
    let prefix = prefix(kind, name);
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(BackupError::io(dir)(e)),
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let stamp = n.strip_prefix(&prefix)?;
            is_stamp(stamp).then(|| (sort_key(stamp), e.path()))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// A stamp's sort key: its time, then its `-N` suffix as a number.
fn sort_key(stamp: &str) -> String {
    let (time, n) = stamp.split_at(20);
    let n: u64 = n.trim_start_matches('-').parse().unwrap_or(1);
    format!("{time}{n:010}")
}

/// Removes the oldest archives of `kind`/`name` in `dir` beyond the newest `keep`
/// (`0`: keep them all): the archives removed.
///
/// # Errors
/// [`BackupError::Io`].
pub fn prune(dir: &Path, kind: Kind, name: &str, keep: usize) -> Result<Vec<PathBuf>, BackupError> {
    if keep == 0 {
        return Ok(Vec::new());
    }
    let all = archives(dir, kind, name)?;
    let excess = all.len().saturating_sub(keep);
    let mut removed = Vec::new();
    for old in all.into_iter().take(excess) {
        super::archive::make_removable(&old);
        std::fs::remove_dir_all(&old).map_err(BackupError::io(&old))?;
        removed.push(old);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_of_one_thing_only() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |n: &str| std::fs::create_dir(dir.path().join(n)).unwrap();
        for n in [
            "project-chat-20260101T000000.000Z",
            "project-chat-20260102T000000.000Z",
            "project-chat-20260102T000000.000Z-2",
            "project-chat-20260103T000000.000Z",
            "project-chat-x-20260101T000000.000Z",
            "authority-20250101T000000.000Z",
            ".project-chat-20260104T000000.000Z.partial",
            "project-chat-notes",
        ] {
            mk(n);
        }
        let removed = prune(dir.path(), Kind::Project, "chat", 2).unwrap();
        let names = |v: &[PathBuf]| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            names(&removed),
            [
                "project-chat-20260101T000000.000Z",
                "project-chat-20260102T000000.000Z"
            ]
        );
        assert_eq!(
            names(&archives(dir.path(), Kind::Project, "chat").unwrap()),
            [
                "project-chat-20260102T000000.000Z-2",
                "project-chat-20260103T000000.000Z"
            ]
        );
        for kept in [
            "project-chat-x-20260101T000000.000Z",
            "authority-20250101T000000.000Z",
            ".project-chat-20260104T000000.000Z.partial",
            "project-chat-notes",
        ] {
            assert!(dir.path().join(kept).exists(), "{kept}");
        }
        assert!(prune(dir.path(), Kind::Project, "chat", 0)
            .unwrap()
            .is_empty());
    }
}
