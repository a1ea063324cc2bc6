//! The install root: where a host keeps the versions of one binary and which one runs.
//!
//! ```text
//! <root>/versions/<version>-<sha12>/<binary>   0755; sha12 = first 12 hex of the SHA-256
//! <root>/current  -> versions/<version>-<sha12>   relative symlinks, each replaced
//! <root>/previous -> versions/<version>-<sha12>   atomically (temp link + rename + dir fsync)
//! <root>/downloads/                             temp files of downloads in progress
//! <root>/skip.json                              [{name, version, sha256, reason, at_ms}]
//! <root>/update.json                            the agent's update record (see flotilla-agent)
//! <root>/update.lock                            held by the update watchdog
//! ```
//!
//! Every change is a rename within the root, so a crash at any moment leaves `current`
//! naming one complete version. A version directory is built under a hidden name
//! (`versions/.staging-…`) and renamed into place.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::artifact::{hex, sha256_file};
use crate::manifest::{is_release_word, is_sha256_hex};
use crate::reason::Reason;

/// The versions of one binary on one host (layout in the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallRoot {
    root: PathBuf,
    binary: String,
}

/// One staged version: `<root>/versions/<version>-<sha12>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionDir {
    /// The release version (a release word, may contain `-`).
    pub version: String,
    /// The first 12 lowercase hex digits of the binary's SHA-256.
    pub sha12: String,
    /// `<root>/versions/<version>-<sha12>`.
    pub dir: PathBuf,
    /// `<dir>/<binary>`.
    pub binary: PathBuf,
}

impl VersionDir {
    /// The directory name, `<version>-<sha12>`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.version, self.sha12)
    }

    /// Whether `sha256` (64 hex, optional `sha256:` prefix) starts with this `sha12`.
    pub fn matches_sha256(&self, sha256: &str) -> bool {
        normalise_sha(sha256).starts_with(&self.sha12)
    }

    fn parse(versions: &Path, name: &str, binary: &str) -> Option<VersionDir> {
        let (version, sha12) = name.rsplit_once('-')?;
        let hex12 = sha12.len() == 12
            && sha12
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex12 || !is_release_word(version) {
            return None;
        }
        let dir = versions.join(name);
        Some(VersionDir {
            version: version.to_string(),
            sha12: sha12.to_string(),
            binary: dir.join(binary),
            dir,
        })
    }
}

/// A version that was rolled back on this host and must never be applied again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipEntry {
    /// Release name.
    pub name: String,
    /// Release version.
    pub version: String,
    /// The artifact's SHA-256, 64 lowercase hex.
    pub sha256: String,
    /// Why it was rolled back.
    pub reason: Reason,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
}

/// Install-root failures.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A filesystem operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file of the install root cannot be read (e.g. `skip.json` is not JSON).
    #[error("{path}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An argument is not usable (bad version or digest, missing binary).
    #[error("{0}")]
    Invalid(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn normalise_sha(sha: &str) -> String {
    let s = sha.trim();
    s.strip_prefix("sha256:").unwrap_or(s).to_ascii_lowercase()
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name unique within this process and among processes: `<pid>-<n>`.
fn unique() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces `path` with `bytes` atomically: writes `.<name>.tmp-<pid>-<n>` beside it with
/// permission bits `mode` (e.g. `0o644`), fsyncs it, renames it over `path` and fsyncs the
/// directory. Readers see the old or the new content, never a mix.
///
/// # Errors
/// Any filesystem error (the temp file is removed).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "no file name"))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), unique()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl InstallRoot {
    /// The install root at `root` for the binary named `binary_name` (e.g. `flotilla`).
    /// Nothing is created until something is staged or downloaded.
    pub fn new(root: impl Into<PathBuf>, binary_name: impl Into<String>) -> InstallRoot {
        InstallRoot {
            root: root.into(),
            binary: binary_name.into(),
        }
    }

    /// The install root `exe` runs from: `Some` when `exe` (symlinks resolved, e.g.
    /// `/proc/self/exe` or `<root>/current/<binary>`) is `<root>/versions/<version>-<sha12>/<binary>`.
    pub fn of_exe(exe: &Path, binary: &str) -> Option<InstallRoot> {
        let exe = std::fs::canonicalize(exe).ok()?;
        if exe.file_name()? != binary {
            return None;
        }
        let dir = exe.parent()?;
        let versions = dir.parent()?;
        if versions.file_name()? != "versions" {
            return None;
        }
        VersionDir::parse(versions, dir.file_name()?.to_str()?, binary)?;
        Some(InstallRoot::new(versions.parent()?, binary))
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The binary's file name inside each version directory.
    pub fn binary_name(&self) -> &str {
        &self.binary
    }

    /// `<root>/versions`.
    pub fn versions_dir(&self) -> PathBuf {
        self.root.join("versions")
    }

    /// `<root>/downloads`.
    pub fn downloads_dir(&self) -> PathBuf {
        self.root.join("downloads")
    }

    /// `<root>/skip.json`.
    pub fn skip_path(&self) -> PathBuf {
        self.root.join("skip.json")
    }

    /// `<root>/update.json` (written with [`write_atomic`] by the agent).
    pub fn update_path(&self) -> PathBuf {
        self.root.join("update.json")
    }

    /// `<root>/update.lock` (held by the update watchdog).
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("update.lock")
    }

    /// `<root>/current` (the symlink).
    pub fn current_link(&self) -> PathBuf {
        self.root.join("current")
    }

    /// `<root>/previous` (the symlink).
    pub fn previous_link(&self) -> PathBuf {
        self.root.join("previous")
    }

    /// Where version `version` of a binary with SHA-256 `sha256` (64 hex) is (or would be) staged.
    ///
    /// # Errors
    /// [`InstallError::Invalid`] for a version that is not a release word or a digest that
    /// is not 64 hex.
    pub fn version_dir(&self, version: &str, sha256: &str) -> Result<VersionDir, InstallError> {
        let sha = normalise_sha(sha256);
        if !is_sha256_hex(&sha) {
            return Err(InstallError::Invalid(format!(
                "{sha256:?} is not a SHA-256 (64 hex digits)"
            )));
        }
        let name = format!("{version}-{}", &sha[..12]);
        VersionDir::parse(&self.versions_dir(), &name, &self.binary).ok_or_else(|| {
            InstallError::Invalid(format!(
                "version {version:?} must be letters, digits and `._+-`, starting with a letter or digit"
            ))
        })
    }

    fn link_target(&self, link: &Path) -> Option<VersionDir> {
        let target = std::fs::read_link(link).ok()?;
        let name = target.file_name()?.to_str()?;
        VersionDir::parse(&self.versions_dir(), name, &self.binary)
    }

    /// The version `current` points at (`None` when there is no such link, or it does not
    /// name a version directory; whether the directory exists is not checked).
    pub fn current(&self) -> Option<VersionDir> {
        self.link_target(&self.current_link())
    }

    /// The version `previous` points at (as [`InstallRoot::current`]).
    pub fn previous(&self) -> Option<VersionDir> {
        self.link_target(&self.previous_link())
    }

    /// Every staged version (hidden build directories excluded), by name.
    ///
    /// # Errors
    /// Reading `versions/` (a missing directory is an empty list).
    pub fn versions(&self) -> Result<Vec<VersionDir>, InstallError> {
        let dir = self.versions_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err(&dir))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if let Some(v) = VersionDir::parse(&dir, &name, &self.binary) {
                out.push(v);
            }
        }
        out.sort_by(|a, b| a.dir.cmp(&b.dir));
        Ok(out)
    }

    /// A new empty temp file `<root>/downloads/<pid>-<n>.part` (mode 0600), created
    /// exclusively, for a download to be verified into and then [`InstallRoot::stage`]d.
    ///
    /// # Errors
    /// Creating `downloads/` or the file.
    pub fn temp_download(&self) -> Result<(File, PathBuf), InstallError> {
        let dir = self.downloads_dir();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        loop {
            let path = dir.join(format!("{}.part", unique()));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(f) => return Ok((f, path)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err(&path)(e)),
            }
        }
    }

    /// Moves a verified binary (`tmp_path`, normally from [`InstallRoot::temp_download`],
    /// on the same filesystem) into `versions/<version>-<sha12>/<binary>` with mode 0755,
    /// building the directory under a hidden name and renaming it into place.
    ///
    /// `sha256` (64 hex) is the digest the caller verified; it is not re-measured. When
    /// the version is already staged and its binary has that digest, `tmp_path` is removed
    /// and the existing directory returned (idempotent); a staged binary with another
    /// digest is replaced.
    ///
    /// # Errors
    /// [`InstallError::Invalid`] for a bad version or digest; [`InstallError::Io`].
    pub fn stage(
        &self,
        version: &str,
        sha256: &str,
        tmp_path: &Path,
    ) -> Result<VersionDir, InstallError> {
        let v = self.version_dir(version, sha256)?;
        let sha = normalise_sha(sha256);
        let versions = self.versions_dir();
        std::fs::create_dir_all(&versions).map_err(io_err(&versions))?;
        let existing = v.dir.symlink_metadata().is_ok();
        if existing && sha256_file(&v.binary).is_ok_and(|have| have == sha) {
            match std::fs::remove_file(tmp_path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(tmp_path)(e)),
            }
            return Ok(v);
        }
        let staging = versions.join(format!(".staging-{}", unique()));
        std::fs::create_dir(&staging).map_err(io_err(&staging))?;
        let result = (|| {
            let bin = staging.join(&self.binary);
            if let Err(e) = std::fs::rename(tmp_path, &bin) {
                if e.kind() != ErrorKind::CrossesDevices {
                    return Err(io_err(tmp_path)(e));
                }
                std::fs::copy(tmp_path, &bin).map_err(io_err(&bin))?;
                std::fs::remove_file(tmp_path).map_err(io_err(tmp_path))?;
            }
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
                .map_err(io_err(&bin))?;
            File::open(&bin)
                .and_then(|f| f.sync_all())
                .map_err(io_err(&bin))?;
            fsync_dir(&staging).map_err(io_err(&staging))?;
            if existing {
                // A staged directory whose binary has another digest: replace it.
                let trash = versions.join(format!(".trash-{}", unique()));
                std::fs::rename(&v.dir, &trash).map_err(io_err(&v.dir))?;
                std::fs::rename(&staging, &v.dir).map_err(io_err(&v.dir))?;
                let _ = std::fs::remove_dir_all(&trash);
            } else {
                std::fs::rename(&staging, &v.dir).map_err(io_err(&v.dir))?;
            }
            fsync_dir(&versions).map_err(io_err(&versions))
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        result.map(|()| v)
    }

    /// Points `<root>/<name>` at `to`: a relative symlink made beside it, renamed over it,
    /// then the root fsynced.
    fn point(&self, name: &str, to: &VersionDir) -> Result<(), InstallError> {
        let link = self.root.join(name);
        let tmp = self.root.join(format!("{name}.tmp-{}", unique()));
        let target = Path::new("versions").join(to.name());
        std::os::unix::fs::symlink(&target, &tmp).map_err(io_err(&tmp))?;
        if let Err(e) = std::fs::rename(&tmp, &link) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(&link)(e));
        }
        fsync_dir(&self.root).map_err(io_err(&self.root))
    }

    /// Checks that `to` names a staged version of this root (by its name
    /// `<version>-<sha12>`; `to.dir` may be spelt differently, e.g. canonicalised).
    fn check_staged(&self, to: &VersionDir) -> Result<(), InstallError> {
        let staged = VersionDir::parse(&self.versions_dir(), &to.name(), &self.binary);
        match staged {
            Some(v) if v.binary.is_file() => Ok(()),
            Some(v) => Err(InstallError::Invalid(format!(
                "{} is not staged (no binary)",
                v.binary.display()
            ))),
            None => Err(InstallError::Invalid(format!(
                "{:?} is not a version directory name (<version>-<sha12>)",
                to.name()
            ))),
        }
    }

    /// Makes `to` current: `previous` := the current version, then `current` := `to`,
    /// each an atomic rename. Nothing changes when `to` already is current (so a repeated
    /// flip after a crash keeps `previous` right).
    ///
    /// # Errors
    /// [`InstallError::Invalid`] when `to` is not a staged version of this root;
    /// [`InstallError::Io`].
    pub fn flip(&self, to: &VersionDir) -> Result<(), InstallError> {
        self.check_staged(to)?;
        match self.current() {
            Some(cur) if cur.name() == to.name() => return Ok(()),
            Some(cur) => self.point("previous", &cur)?,
            None => {}
        }
        self.point("current", to)
    }

    /// Points `current` at `to` and leaves `previous` alone (the rollback step).
    ///
    /// # Errors
    /// As [`InstallRoot::flip`].
    pub fn set_current(&self, to: &VersionDir) -> Result<(), InstallError> {
        self.check_staged(to)?;
        self.point("current", to)
    }

    /// Removes old versions: keeps the `keep_old` newest (by directory mtime) other than
    /// `current` and `previous`, which are never removed. Returns the removed directories.
    ///
    /// # Errors
    /// Listing or removing.
    pub fn prune(&self, keep_old: usize) -> Result<Vec<PathBuf>, InstallError> {
        let keep: Vec<String> = [self.current(), self.previous()]
            .into_iter()
            .flatten()
            .map(|v| v.name())
            .collect();
        let mut old: Vec<(std::time::SystemTime, VersionDir)> = Vec::new();
        for v in self.versions()? {
            if keep.contains(&v.name()) {
                continue;
            }
            let mtime = std::fs::metadata(&v.dir)
                .and_then(|m| m.modified())
                .map_err(io_err(&v.dir))?;
            old.push((mtime, v));
        }
        old.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.dir.cmp(&a.1.dir)));
        let mut removed = Vec::new();
        for (_, v) in old.into_iter().skip(keep_old) {
            std::fs::remove_dir_all(&v.dir).map_err(io_err(&v.dir))?;
            removed.push(v.dir);
        }
        Ok(removed)
    }

    /// The digests (64 lowercase hex, measured from the binaries now) of the versions
    /// this host ran before and still keeps: `current`, `previous`, and every other
    /// version directory whose digest is not on the skip list (a version is staged only
    /// to be run; one that failed its trial is on the skip list). What an
    /// operator-approved rollback may go back to
    /// ([`crate::Acceptance::check_rollback`]). A version whose binary cannot be read
    /// is left out.
    ///
    /// # Errors
    /// Listing `versions/`; [`InstallRoot::skip_list`].
    pub fn ran_before(&self) -> Result<Vec<String>, InstallError> {
        let skipped: Vec<String> = self
            .skip_list()?
            .iter()
            .map(|e| normalise_sha(&e.sha256))
            .collect();
        let linked: Vec<String> = [self.current(), self.previous()]
            .into_iter()
            .flatten()
            .map(|v| v.name())
            .collect();
        let mut out = Vec::new();
        for v in self.versions()? {
            let Ok(sha) = sha256_file(&v.binary) else {
                continue;
            };
            if (linked.contains(&v.name()) || !skipped.contains(&sha)) && !out.contains(&sha) {
                out.push(sha);
            }
        }
        Ok(out)
    }

    /// The skip list (`skip.json`; missing = empty).
    ///
    /// # Errors
    /// [`InstallError::Corrupt`] when it is not a JSON list of [`SkipEntry`]; reading errors.
    pub fn skip_list(&self) -> Result<Vec<SkipEntry>, InstallError> {
        let path = self.skip_path();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| InstallError::Corrupt {
                path,
                message: e.to_string(),
            }),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// The skip entry for an artifact digest (64 hex, `sha256:` prefix tolerated), if any.
    ///
    /// # Errors
    /// As [`InstallRoot::skip_list`]: an unreadable skip list is an error, never "not skipped".
    pub fn skipped(&self, sha256: &str) -> Result<Option<SkipEntry>, InstallError> {
        let sha = normalise_sha(sha256);
        Ok(self
            .skip_list()?
            .into_iter()
            .find(|e| normalise_sha(&e.sha256) == sha))
    }

    /// Adds (or replaces, by digest) a skip entry; `skip.json` is rewritten atomically.
    ///
    /// # Errors
    /// As [`InstallRoot::skip_list`], and writing.
    pub fn add_skip(&self, mut entry: SkipEntry) -> Result<(), InstallError> {
        entry.sha256 = normalise_sha(&entry.sha256);
        let mut list = self.skip_list()?;
        list.retain(|e| normalise_sha(&e.sha256) != entry.sha256);
        list.push(entry);
        std::fs::create_dir_all(&self.root).map_err(io_err(&self.root))?;
        let mut bytes = serde_json::to_vec_pretty(&list).expect("skip entries serialise");
        bytes.push(b'\n');
        let path = self.skip_path();
        write_atomic(&path, &bytes, 0o644).map_err(io_err(&path))
    }

    /// Removes every skip entry of release `name` at `version` (both matched exactly,
    /// case-sensitively): the versions allowed again, e.g. after an operator fixed what
    /// made them roll back (`flotilla release unskip`). `skip.json` is rewritten
    /// atomically, as by [`InstallRoot::add_skip`], and only when an entry is removed (a
    /// missing `skip.json` stays missing). Returns the entries removed, in file order
    /// (empty: none matched).
    ///
    /// # Errors
    /// As [`InstallRoot::skip_list`] ([`InstallError::Corrupt`] for a `skip.json` that is
    /// not a list of [`SkipEntry`]: nothing is removed), and writing
    /// ([`InstallError::Io`]).
    pub fn remove_skip(&self, name: &str, version: &str) -> Result<Vec<SkipEntry>, InstallError> {
        let (removed, kept): (Vec<SkipEntry>, Vec<SkipEntry>) = self
            .skip_list()?
            .into_iter()
            .partition(|e| e.name == name && e.version == version);
        if removed.is_empty() {
            return Ok(removed);
        }
        let mut bytes = serde_json::to_vec_pretty(&kept).expect("skip entries serialise");
        bytes.push(b'\n');
        let path = self.skip_path();
        write_atomic(&path, &bytes, 0o644).map_err(io_err(&path))?;
        Ok(removed)
    }

    /// Copies the binary at `src` in as version `version` and makes it current (as
    /// [`InstallRoot::flip`]): what `flotilla agent install` does.
    ///
    /// # Errors
    /// Reading `src`, [`InstallRoot::stage`], [`InstallRoot::flip`].
    pub fn install_binary(&self, src: &Path, version: &str) -> Result<VersionDir, InstallError> {
        // Refuse a bad version before copying anything.
        self.version_dir(version, &"0".repeat(64))?;
        let (mut file, tmp) = self.temp_download()?;
        let result = (|| {
            let mut input = File::open(src).map_err(io_err(src))?;
            let mut hashing = HashingWriter(&mut file, Sha256::new());
            std::io::copy(&mut input, &mut hashing).map_err(io_err(&tmp))?;
            let sha = hex(&hashing.1.finalize());
            file.sync_all().map_err(io_err(&tmp))?;
            let v = self.stage(version, &sha, &tmp)?;
            self.flip(&v)?;
            Ok(v)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

struct HashingWriter<'a>(&'a mut File, Sha256);

impl std::io::Write for HashingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        self.1.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn root() -> (tempfile::TempDir, InstallRoot) {
        let dir = tempfile::tempdir().unwrap();
        let r = InstallRoot::new(dir.path().join("install"), "flotilla");
        (dir, r)
    }

    /// Stages `content` as `version` through a temp download, as the agent does.
    fn stage(r: &InstallRoot, version: &str, content: &[u8]) -> VersionDir {
        let (mut f, tmp) = r.temp_download().unwrap();
        f.write_all(content).unwrap();
        drop(f);
        let sha = hex(&Sha256::digest(content));
        r.stage(version, &sha, &tmp).unwrap()
    }

    fn link(r: &InstallRoot, name: &str) -> PathBuf {
        std::fs::read_link(r.root().join(name)).unwrap()
    }

    #[test]
    fn ran_before_is_current_previous_and_kept_versions_not_skipped() {
        let (_d, r) = root();
        assert!(r.ran_before().unwrap().is_empty());
        let sha = |b: &[u8]| hex(&Sha256::digest(b));
        let one = stage(&r, "1.0.0", b"one");
        r.flip(&one).unwrap();
        let two = stage(&r, "2.0.0", b"two");
        r.flip(&two).unwrap();
        stage(&r, "3.0.0", b"three");
        let mut got = r.ran_before().unwrap();
        got.sort();
        let mut want = vec![sha(b"one"), sha(b"two"), sha(b"three")];
        want.sort();
        assert_eq!(got, want);
        // A version that failed its trial (on the skip list) was never run.
        r.add_skip(SkipEntry {
            name: "flotilla-agent".into(),
            version: "3.0.0".into(),
            sha256: sha(b"three"),
            reason: Reason::CrashLoop,
            at_ms: 0,
        })
        .unwrap();
        let got = r.ran_before().unwrap();
        assert!(!got.contains(&sha(b"three")), "{got:?}");
        assert!(got.contains(&sha(b"one")) && got.contains(&sha(b"two")));
        // A version removed (pruned) is no longer kept.
        std::fs::remove_dir_all(&one.dir).unwrap();
        assert_eq!(r.ran_before().unwrap(), vec![sha(b"two")]);
    }

    #[test]
    fn stage_builds_the_version_directory() {
        let (_d, r) = root();
        let v = stage(&r, "1.0.0-rc.1", b"one");
        let sha = hex(&Sha256::digest(b"one"));
        assert_eq!(v.version, "1.0.0-rc.1");
        assert_eq!(v.sha12, &sha[..12]);
        assert_eq!(
            v.dir,
            r.versions_dir().join(format!("1.0.0-rc.1-{}", &sha[..12]))
        );
        assert_eq!(std::fs::read(&v.binary).unwrap(), b"one");
        let mode = std::fs::metadata(&v.binary).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert!(v.matches_sha256(&format!("sha256:{sha}")));
        // Nothing left behind: no temp file, no hidden directory.
        assert_eq!(std::fs::read_dir(r.downloads_dir()).unwrap().count(), 0);
        let names: Vec<_> = std::fs::read_dir(r.versions_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(v.name())]);
        assert_eq!(r.versions().unwrap(), vec![v.clone()]);

        // Idempotent: staging the same digest again keeps the directory, drops the temp file.
        let again = stage(&r, "1.0.0-rc.1", b"one");
        assert_eq!(again, v);
        assert_eq!(std::fs::read_dir(r.downloads_dir()).unwrap().count(), 0);

        // A tampered staged binary is replaced by a fresh stage.
        std::fs::write(&v.binary, b"evil").unwrap();
        let fixed = stage(&r, "1.0.0-rc.1", b"one");
        assert_eq!(std::fs::read(&fixed.binary).unwrap(), b"one");
        assert_eq!(r.versions().unwrap().len(), 1);

        let (_f, tmp) = r.temp_download().unwrap();
        assert!(matches!(
            r.stage("../x", &sha, &tmp),
            Err(InstallError::Invalid(_))
        ));
        assert!(matches!(
            r.stage("1", "abc", &tmp),
            Err(InstallError::Invalid(_))
        ));
    }

    #[test]
    fn flip_moves_current_to_previous() {
        let (_d, r) = root();
        assert!(r.current().is_none() && r.previous().is_none());
        let a = stage(&r, "1", b"a");
        let b = stage(&r, "2", b"b");
        let c = stage(&r, "3", b"c");

        r.flip(&a).unwrap();
        assert_eq!(r.current(), Some(a.clone()));
        assert_eq!(r.previous(), None);
        assert_eq!(link(&r, "current"), Path::new("versions").join(a.name()));

        r.flip(&b).unwrap();
        assert_eq!(
            (r.current(), r.previous()),
            (Some(b.clone()), Some(a.clone()))
        );
        assert_eq!(link(&r, "previous"), Path::new("versions").join(a.name()));
        // The symlink resolves to the binary.
        assert_eq!(
            std::fs::read(r.current_link().join("flotilla")).unwrap(),
            b"b"
        );

        // Flipping to the current version changes nothing (previous stays right).
        r.flip(&b).unwrap();
        assert_eq!(
            (r.current(), r.previous()),
            (Some(b.clone()), Some(a.clone()))
        );

        r.flip(&c).unwrap();
        assert_eq!(
            (r.current(), r.previous()),
            (Some(c.clone()), Some(b.clone()))
        );

        // Rollback: current only.
        r.set_current(&b).unwrap();
        assert_eq!(
            (r.current(), r.previous()),
            (Some(b.clone()), Some(b.clone()))
        );

        // No temp links left behind.
        let mut names: Vec<String> = std::fs::read_dir(r.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["current", "downloads", "previous", "versions"]);

        // Not staged: refused.
        let ghost = r.version_dir("9", &"a".repeat(64)).unwrap();
        assert!(matches!(r.flip(&ghost), Err(InstallError::Invalid(_))));
        assert!(matches!(
            r.set_current(&ghost),
            Err(InstallError::Invalid(_))
        ));
    }

    #[test]
    fn prune_keeps_three_old_and_never_current_or_previous() {
        let (_d, r) = root();
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut vs = Vec::new();
        for i in 0..8u64 {
            let v = stage(&r, &format!("1.{i}"), format!("bin {i}").as_bytes());
            vs.push(v);
        }
        // The oldest two are current and previous; mtimes: version i is i minutes old-ordered.
        for (i, v) in vs.iter().enumerate() {
            File::open(&v.dir)
                .unwrap()
                .set_modified(base + Duration::from_secs(60 * i as u64))
                .unwrap();
        }
        r.flip(&vs[0]).unwrap();
        r.flip(&vs[1]).unwrap();
        // Touching links must not change the versions' mtimes (they are in the root).
        let removed = r.prune(3).unwrap();
        let expect: Vec<PathBuf> = vs[2..5].iter().rev().map(|v| v.dir.clone()).collect();
        assert_eq!(removed, expect);
        let left: Vec<String> = r
            .versions()
            .unwrap()
            .iter()
            .map(|v| v.version.clone())
            .collect();
        assert_eq!(left, ["1.0", "1.1", "1.5", "1.6", "1.7"]);
        assert_eq!(r.current(), Some(vs[1].clone()));
        assert_eq!(r.previous(), Some(vs[0].clone()));
        // Nothing more to do.
        assert!(r.prune(3).unwrap().is_empty());
        assert_eq!(r.prune(0).unwrap().len(), 3);
        assert_eq!(r.versions().unwrap().len(), 2);
    }

    #[test]
    fn skip_list() {
        let (_d, r) = root();
        let sha = "ab".repeat(32);
        assert_eq!(r.skipped(&sha).unwrap(), None);
        let entry = SkipEntry {
            name: "flotilla-agent".into(),
            version: "2.0".into(),
            sha256: format!("sha256:{sha}"),
            reason: Reason::CrashLoop,
            at_ms: 5,
        };
        r.add_skip(entry.clone()).unwrap();
        let got = r.skipped(&sha).unwrap().unwrap();
        assert_eq!(got.sha256, sha);
        assert_eq!(got.reason, Reason::CrashLoop);
        assert_eq!(
            r.skipped(&format!("sha256:{}", sha.to_uppercase()))
                .unwrap()
                .unwrap(),
            got
        );
        r.add_skip(SkipEntry {
            reason: Reason::HealthTimeout,
            ..entry.clone()
        })
        .unwrap();
        r.add_skip(SkipEntry {
            sha256: "cd".repeat(32),
            ..entry
        })
        .unwrap();
        let list = r.skip_list().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(
            r.skipped(&sha).unwrap().unwrap().reason,
            Reason::HealthTimeout
        );
        let text = std::fs::read_to_string(r.skip_path()).unwrap();
        assert!(text.contains("\"reason\": \"HealthTimeout\""), "{text}");

        std::fs::write(r.skip_path(), "not json").unwrap();
        assert!(matches!(r.skipped(&sha), Err(InstallError::Corrupt { .. })));
    }

    #[test]
    fn remove_skip_clears_one_release_version() {
        let (_d, r) = root();
        // Nothing to remove: no skip.json is made.
        assert_eq!(r.remove_skip("flotilla-agent", "2.0").unwrap(), vec![]);
        assert!(!r.skip_path().exists());
        let entry = |name: &str, version: &str, sha: &str| SkipEntry {
            name: name.into(),
            version: version.into(),
            sha256: sha.repeat(32),
            reason: Reason::CrashLoop,
            at_ms: 5,
        };
        let a = entry("flotilla-agent", "2.0", "ab");
        // The same version built twice (two digests), another version, another release.
        let a2 = entry("flotilla-agent", "2.0", "cd");
        let b = entry("flotilla-agent", "2.1", "ef");
        let c = entry("llama-server", "2.0", "01");
        for e in [&a, &b, &a2, &c] {
            r.add_skip(e.clone()).unwrap();
        }
        // Matched exactly: another version or case is not it.
        assert_eq!(r.remove_skip("flotilla-agent", "2").unwrap(), vec![]);
        assert_eq!(r.remove_skip("Flotilla-Agent", "2.0").unwrap(), vec![]);
        assert_eq!(
            r.remove_skip("flotilla-agent", "2.0").unwrap(),
            vec![a.clone(), a2.clone()]
        );
        assert_eq!(r.skip_list().unwrap(), vec![b.clone(), c.clone()]);
        assert_eq!(r.skipped(&a.sha256).unwrap(), None);
        // Done already: nothing more, the file untouched.
        assert_eq!(r.remove_skip("flotilla-agent", "2.0").unwrap(), vec![]);
        assert_eq!(r.remove_skip("llama-server", "2.0").unwrap(), vec![c]);
        assert_eq!(r.skip_list().unwrap(), vec![b]);
        // Written atomically: no temp file left beside it, mode 0644.
        let names: Vec<String> = std::fs::read_dir(r.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["skip.json"]);
        assert_eq!(
            std::fs::metadata(r.skip_path())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o644
        );
        // A corrupt list is an error, never "nothing to remove"; it is left as it was.
        std::fs::write(r.skip_path(), "not json").unwrap();
        assert!(matches!(
            r.remove_skip("flotilla-agent", "2.1"),
            Err(InstallError::Corrupt { .. })
        ));
        assert_eq!(std::fs::read_to_string(r.skip_path()).unwrap(), "not json");
    }

    #[test]
    fn of_exe_finds_the_root() {
        let (_d, r) = root();
        let v = stage(&r, "1.2.3", b"x");
        r.flip(&v).unwrap();
        let found = InstallRoot::of_exe(&v.binary, "flotilla").unwrap();
        assert_eq!(found.root(), std::fs::canonicalize(r.root()).unwrap());
        // Through the `current` symlink too.
        let via = InstallRoot::of_exe(&r.current_link().join("flotilla"), "flotilla").unwrap();
        assert_eq!(via, found);
        assert!(InstallRoot::of_exe(&v.binary, "other").is_none());
        let stray = r.root().join("flotilla");
        std::fs::write(&stray, b"x").unwrap();
        assert!(InstallRoot::of_exe(&stray, "flotilla").is_none());
        assert!(InstallRoot::of_exe(Path::new("/nonexistent/flotilla"), "flotilla").is_none());
    }

    #[test]
    fn install_binary_copies_and_makes_current() {
        let (d, r) = root();
        let src = d.path().join("flotilla-build");
        std::fs::write(&src, b"build 1").unwrap();
        let v1 = r.install_binary(&src, "0.1.0").unwrap();
        assert_eq!(r.current(), Some(v1.clone()));
        assert_eq!(std::fs::read(&v1.binary).unwrap(), b"build 1");
        assert!(v1.matches_sha256(&hex(&Sha256::digest(b"build 1"))));
        std::fs::write(&src, b"build 2").unwrap();
        let v2 = r.install_binary(&src, "0.1.0").unwrap();
        assert_ne!(v1, v2);
        assert_eq!((r.current(), r.previous()), (Some(v2), Some(v1)));
        assert!(r
            .install_binary(&d.path().join("missing"), "0.1.0")
            .is_err());
        assert!(r.install_binary(&src, "bad/version").is_err());
        assert_eq!(std::fs::read_dir(r.downloads_dir()).unwrap().count(), 0);
    }

    #[test]
    fn write_atomic_replaces_with_mode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("update.json");
        write_atomic(&p, b"{}", 0o600).unwrap();
        write_atomic(&p, b"{\"a\":1}", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{\"a\":1}");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}
