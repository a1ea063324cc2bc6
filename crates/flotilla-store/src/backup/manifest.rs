//! The manifest of an archive (`manifest.json`, with its own SHA-256 in
//! `manifest.sha256`): what was backed up, when, by which Flotilla, every file with
//! its size, mode and SHA-256, and every database with its schema version and the
//! row count of each table at backup time. Also the archive's name
//! (`<what>-<UTC time>`), and the checks a reader makes before trusting one.

use super::error::BackupError;
use super::{Kind, ARCHIVE_FORMAT, FLOTILLA_VERSION};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The manifest's file name in an archive.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The file holding the SHA-256 of [`MANIFEST_FILE`] (`sha256:<hex>` and a newline).
pub const MANIFEST_DIGEST_FILE: &str = "manifest.sha256";
/// The directory of an archive holding the backed-up directory's files, as they
/// were (databases as consistent copies).
pub const FILES_DIR: &str = "files";
/// The PostgreSQL dump in an archive of an authority on PostgreSQL
/// (`pg_dump --format=custom`).
pub const POSTGRES_DUMP: &str = "postgres.dump";

/// An archive's manifest (`manifest.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The archive format ([`ARCHIVE_FORMAT`]); a reader refuses a higher one.
    pub format: u32,
    /// What was backed up.
    pub kind: Kind,
    /// The project's name (`authority` for the authority).
    pub name: String,
    /// The directory that was backed up (absolute).
    pub source: PathBuf,
    /// When, in milliseconds since the Unix epoch (given by the caller).
    pub created_ms: i64,
    /// Why: `manual`, `before-migration`, `before-self-update`, `before-adopt`.
    pub reason: String,
    /// The Flotilla that wrote it ([`FLOTILLA_VERSION`]); a reader refuses a newer
    /// one.
    pub flotilla_version: String,
    /// Every file, directory and symbolic link, paths relative to the archive, in
    /// the order written.
    pub files: Vec<FileEntry>,
    /// Every database, with its schema version and row counts at backup time.
    pub databases: Vec<DatabaseEntry>,
    /// What was left out, and why (lock files, sockets, the companions of an
    /// SQLite database copied whole).
    #[serde(default)]
    pub skipped: Vec<String>,
}

/// One entry of an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the archive, `/`-separated (`files/state.db`, `postgres.dump`).
    pub path: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// Size in bytes (0 for a directory; a link's target's length).
    pub size: u64,
    /// `sha256:<hex>` of its bytes (of a link's target path; empty for a
    /// directory).
    pub sha256: String,
    /// Its permission bits (e.g. `0o600`), restored with it.
    pub mode: u32,
    /// A symbolic link's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
}

/// A database in the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseEntry {
    /// Its file in the archive (`files/state.db`, `postgres.dump`).
    pub path: String,
    /// SQLite or PostgreSQL.
    pub engine: Engine,
    /// Whose schema it has: `state` (a project's `state.db`), `authority`, or
    /// `None` for an SQLite file of no known Flotilla schema.
    pub schema: Option<String>,
    /// Its schema version at backup time (`None`: unknown schema).
    pub schema_version: Option<i64>,
    /// Every table and its row count, read in the same snapshot as the copy.
    pub tables: BTreeMap<String, i64>,
}

/// A database engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// A file copied through SQLite's online backup API.
    Sqlite,
    /// A `pg_dump --format=custom` of the authority's database.
    Postgres,
}

impl Manifest {
    /// The manifest's JSON (pretty, a newline at the end) and its digest.
    pub(crate) fn encode(&self) -> (String, String) {
        let json = serde_json::to_string_pretty(self).expect("a manifest serialises") + "\n";
        let digest = flotilla_model::digest::sha256_hex(json.as_bytes());
        (json, digest)
    }

    /// Reads `archive`'s manifest, checks it against `manifest.sha256`, and refuses
    /// one this build cannot restore: a newer archive format, a newer Flotilla, a
    /// database of a newer schema than this build knows (`supported`: the highest
    /// version this build knows of schema `state` or `authority`).
    ///
    /// # Errors
    /// [`BackupError::Incomplete`] (no manifest), [`BackupError::Corrupt`] (not a
    /// manifest, or not matching its digest), [`BackupError::TooNew`],
    /// [`BackupError::Io`].
    pub fn read(
        archive: &Path,
        supported: impl Fn(&str) -> Option<i64>,
    ) -> Result<Manifest, BackupError> {
        let path = archive.join(MANIFEST_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(if archive.is_dir() {
                    BackupError::Incomplete {
                        archive: archive.to_owned(),
                        what: MANIFEST_FILE.into(),
                    }
                } else {
                    BackupError::Io {
                        path: archive.to_owned(),
                        source: e,
                    }
                })
            }
            Err(e) => return Err(BackupError::io(&path)(e)),
        };
        let corrupt = |why: String| BackupError::Corrupt {
            archive: archive.to_owned(),
            why,
        };
        let recorded = match std::fs::read_to_string(archive.join(MANIFEST_DIGEST_FILE)) {
            Ok(t) => t.trim().to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BackupError::Incomplete {
                    archive: archive.to_owned(),
                    what: MANIFEST_DIGEST_FILE.into(),
                })
            }
            Err(e) => return Err(BackupError::io(archive.join(MANIFEST_DIGEST_FILE))(e)),
        };
        let found = flotilla_model::digest::sha256_hex(&bytes);
        if found != recorded {
            return Err(corrupt(format!(
                "{MANIFEST_FILE} has SHA-256 {found}, {MANIFEST_DIGEST_FILE} says {recorded}"
            )));
        }
        let m: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| corrupt(format!("{MANIFEST_FILE} is not a manifest: {e}")))?;
        let too_new = |what: String| BackupError::TooNew {
            archive: archive.to_owned(),
            what,
        };
        if m.format > ARCHIVE_FORMAT {
            return Err(too_new(format!(
                "archive format {} (this flotilla reads {ARCHIVE_FORMAT})",
                m.format
            )));
        }
        if newer(&m.flotilla_version, FLOTILLA_VERSION) {
            return Err(too_new(format!(
                "flotilla {} (this is {FLOTILLA_VERSION})",
                m.flotilla_version
            )));
        }
        for db in &m.databases {
            let (Some(schema), Some(found)) = (&db.schema, db.schema_version) else {
                continue;
            };
            if let Some(max) = supported(schema).filter(|max| found > *max) {
                return Err(too_new(format!(
                    "{} has {schema} schema version {found} (this flotilla understands {max})",
                    db.path
                )));
            }
        }
        for f in &m.files {
            if !safe_relative(&f.path) {
                return Err(corrupt(format!("it lists the path `{}`", f.path)));
            }
        }
        Ok(m)
    }

    /// The entry of `path`, if listed.
    pub fn file(&self, path: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.path == path)
    }

    /// The PostgreSQL dump's entry, if the archive has one.
    pub fn postgres(&self) -> Option<&DatabaseEntry> {
        self.databases.iter().find(|d| d.engine == Engine::Postgres)
    }

    /// Refuses (as [`BackupError::Database`]) an archive of `archive`'s holding a
    /// PostgreSQL dump, where `what` (`it is verified against…`) says what it needs.
    pub(crate) fn without_postgres(&self, archive: &Path, what: &str) -> Result<(), BackupError> {
        match self.postgres() {
            None => Ok(()),
            Some(_) => Err(holds_a_dump(archive, what)),
        }
    }
}

/// [`BackupError::Database`]: `archive` holds a PostgreSQL dump, and `what` it
/// needs.
pub(crate) fn holds_a_dump(archive: &Path, what: &str) -> BackupError {
    BackupError::Database {
        why: format!("{} holds a PostgreSQL dump: {what}", archive.display()),
    }
}

/// A relative path that stays inside the archive: no `..`, not absolute, no empty
/// or `.` components.
fn safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Whether version `a` (`major.minor.patch`, a pre-release or build suffix
/// ignored) is newer than `b`. Parts that are not numbers count as 0.
pub fn newer(a: &str, b: &str) -> bool {
    fn parts(v: &str) -> Vec<u64> {
        let core = v.split(['-', '+']).next().unwrap_or(v);
        core.split('.').map(|p| p.parse().unwrap_or(0)).collect()
    }
    let (a, b) = (parts(a), parts(b));
    let n = a.len().max(b.len());
    let at = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
    for i in 0..n {
        match at(&a, i).cmp(&at(&b, i)) {
            std::cmp::Ordering::Greater => return true,
            std::cmp::Ordering::Less => return false,
            std::cmp::Ordering::Equal => {}
        }
    }
    false
}

/// `ms` (since the Unix epoch) as a UTC time for names: `20261201T104103.120Z`
/// (fixed width, so names sort by time).
pub fn stamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{milli:03}Z",
        tod / 3600,
        tod % 3600 / 60,
        tod % 60
    )
}

/// Whether `s` is a [`stamp`], optionally followed by `-N` (a second archive in
/// the same millisecond).
pub(crate) fn is_stamp(s: &str) -> bool {
    let (core, suffix) = match s.get(20..) {
        Some(rest) => (&s[..20], rest),
        None => return false,
    };
    let b = core.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let core_ok = digits(0..8)
        && b[8] == b'T'
        && digits(9..15)
        && b[15] == b'.'
        && digits(16..19)
        && b[19] == b'Z';
    core_ok
        && (suffix.is_empty()
            || suffix
                .strip_prefix('-')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit())))
}

/// The name prefix of every archive of one thing: `project-<name>-` or
/// `authority-`.
pub fn prefix(kind: Kind, name: &str) -> String {
    match kind {
        Kind::Project => format!("project-{name}-"),
        Kind::Authority => "authority-".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_and_fixed_width() {
        assert_eq!(stamp(0), "19700101T000000.000Z");
        // 2026-12-01T10:41:03.120Z
        assert_eq!(stamp(1_796_121_663_120), "20261201T104103.120Z");
        // 2024-02-29T23:59:59.999Z (a leap day)
        assert_eq!(stamp(1_709_251_199_999), "20240229T235959.999Z");
        assert!(is_stamp("20261201T104103.120Z"));
        assert!(is_stamp("20261201T104103.120Z-2"));
        assert!(!is_stamp("20261201T104103.120Z-"));
        assert!(!is_stamp("b-20261201T104103.120Z"));
        assert!(!is_stamp("20261201T104103.120"));
    }

    #[test]
    fn versions_compare_by_number() {
        assert!(newer("0.2.0", "0.1.9"));
        assert!(newer("0.10.0", "0.9.0"));
        assert!(newer("1.0.0-rc.1", "0.9.9"));
        assert!(!newer("0.1.0", "0.1.0"));
        assert!(!newer("0.1.0-rc.1", "0.1.0"));
        assert!(!newer("0.1", "0.1.0"));
        assert!(newer("0.1.0.1", "0.1.0"));
    }

    #[test]
    fn paths_stay_inside() {
        assert!(safe_relative("files/state.db"));
        assert!(!safe_relative("files/../../etc/passwd"));
        assert!(!safe_relative("/etc/passwd"));
        assert!(!safe_relative("files//x"));
        assert!(!safe_relative(""));
    }
}
