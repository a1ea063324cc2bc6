//! An archive on disk: a directory `<what>-<UTC time>` holding `manifest.json`,
//! `manifest.sha256`, `files/` (the backed-up directory) and, for an authority on
//! PostgreSQL, `postgres.dump`. Written under a hidden temporary name in the backup
//! directory (`.<name>.partial`), every file and directory fsynced, then renamed to
//! its name: there is never half an archive under an archive's name. Also: checking
//! every file of an archive against its manifest, and copying `files/` out into a
//! directory (a scratch place, or the directory a restore builds).

use super::error::BackupError;
use super::manifest::{
    DatabaseEntry, EntryKind, FileEntry, Manifest, FILES_DIR, MANIFEST_DIGEST_FILE, MANIFEST_FILE,
};
use super::sqlite;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// An archive being written.
#[derive(Debug)]
pub(crate) struct Writer {
    /// Its final path.
    pub(crate) path: PathBuf,
    /// Where it is written until it is complete.
    pub(crate) partial: PathBuf,
    pub(crate) files: Vec<FileEntry>,
    pub(crate) databases: Vec<DatabaseEntry>,
    pub(crate) skipped: Vec<String>,
    done: bool,
}

impl Drop for Writer {
    /// An archive not finished is removed (an error, a panic).
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.partial);
        }
    }
}

/// Opens (creating, 0600) a new file for writing, failing if it exists.
fn create_new(path: &Path, mode: u32) -> Result<std::fs::File, BackupError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(BackupError::io(path))
}

/// Flushes a directory's entries to disk.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), BackupError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(BackupError::io(dir))
}

/// Gives the owner write and search permission on every directory under `dir`, so
/// that it can be removed whatever modes were restored.
pub(crate) fn make_removable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            make_removable(&e.path());
        }
    }
}

/// Creates `dir` (0700), failing if it exists.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), BackupError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(BackupError::io(dir))
}

/// Reads `path` to its end, writing what it reads to `sink` (if any): the SHA-256
/// (`sha256:<hex>`) and size of the bytes read.
fn stream(
    path: &Path,
    mut f: std::fs::File,
    mut sink: Option<(&Path, &mut std::fs::File)>,
) -> Result<(String, u64), BackupError> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(BackupError::io(path))?;
        if n == 0 {
            break;
        }
        if let Some((to, out)) = sink.as_mut() {
            out.write_all(&buf[..n]).map_err(BackupError::io(*to))?;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((flotilla_model::digest::format_sha256(&h.finalize()), size))
}

/// SHA-256 (`sha256:<hex>`) and size of the file at `path`, read from disk.
pub(crate) fn digest_file(path: &Path) -> Result<(String, u64), BackupError> {
    let f = std::fs::File::open(path).map_err(BackupError::io(path))?;
    stream(path, f, None)
}

/// Copies the file `from` to the new file `to` (mode `mode`), fsynced: its SHA-256
/// and size, of the bytes written; `None` (and nothing written) when `from` was
/// removed before it could be opened.
fn copy_file(from: &Path, to: &Path, mode: u32) -> Result<Option<(String, u64)>, BackupError> {
    let src = match std::fs::File::open(from) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BackupError::io(from)(e)),
    };
    let mut dst = create_new(to, mode)?;
    let done = stream(from, src, Some((to, &mut dst)))?;
    dst.sync_all().map_err(BackupError::io(to))?;
    // `mode` may have been narrowed by the umask on create.
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
        .map_err(BackupError::io(to))?;
    Ok(Some(done))
}

/// What the manifest says of a path listed in its directory but removed before it
/// was read (a program still running there, e.g. SQLite removing a `-shm` as its
/// last connection closes): the archive holds the directory as it was afterwards.
fn removed_while_copying(shown: &str) -> String {
    format!("{shown} (removed while the backup ran)")
}

impl Writer {
    /// Starts an archive named `name` in `dir` (created if needed, 0700): written
    /// in `dir/.<name>.partial`, removed if dropped before [`Writer::finish`]. A
    /// name already taken (two archives in one millisecond) gets `-2`, `-3`…
    ///
    /// # Errors
    /// [`BackupError::Io`].
    pub(crate) fn begin(dir: &Path, name: &str) -> Result<Writer, BackupError> {
        if !dir.is_dir() {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(BackupError::io(dir))?;
        }
        let mut n = 1;
        loop {
            let this = if n == 1 {
                name.to_string()
            } else {
                format!("{name}-{n}")
            };
            let path = dir.join(&this);
            let partial = dir.join(format!(".{this}.partial"));
            if !path.exists() {
                match create_private_dir(&partial) {
                    Ok(()) => {
                        create_private_dir(&partial.join(FILES_DIR))?;
                        return Ok(Writer {
                            path,
                            partial,
                            files: vec![FileEntry {
                                path: FILES_DIR.into(),
                                kind: EntryKind::Dir,
                                size: 0,
                                sha256: String::new(),
                                mode: 0o700,
                                link: None,
                            }],
                            databases: Vec::new(),
                            skipped: Vec::new(),
                            done: false,
                        });
                    }
                    Err(BackupError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            n += 1;
        }
    }

    /// Copies the directory `source` into `files/`: SQLite databases through the
    /// online backup API (their `-wal`, `-shm` and `-journal` left out: the copy
    /// holds their content), other regular files byte for byte, directories and
    /// symbolic links as they are; lock files (`*.lock`, whose content only names a
    /// holder), sockets and other special files are left out and listed as
    /// skipped, and so is every path in `exclude` (the backup directory itself, when
    /// it is inside `source`).
    ///
    /// # Errors
    /// [`BackupError::Io`], [`BackupError::Sqlite`].
    pub(crate) fn add_tree(
        &mut self,
        source: &Path,
        exclude: &[PathBuf],
    ) -> Result<(), BackupError> {
        let meta = std::fs::metadata(source).map_err(BackupError::io(source))?;
        self.files[0].mode = meta.permissions().mode() & 0o7777;
        self.add_dir(source, source, FILES_DIR, exclude)
    }

    fn add_dir(
        &mut self,
        root: &Path,
        dir: &Path,
        rel: &str,
        exclude: &[PathBuf],
    ) -> Result<(), BackupError> {
        let mut entries: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
            .map_err(BackupError::io(dir))?
            .map(|e| {
                e.map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                    .map_err(BackupError::io(dir))
            })
            .collect::<Result<_, _>>()?;
        entries.sort();
        let databases: BTreeSet<String> = entries
            .iter()
            .filter(|(_, p)| p.is_file() && sqlite::is_database(p))
            .map(|(n, _)| n.clone())
            .collect();
        for (name, path) in entries {
            let shown = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            let to_rel = format!("{rel}/{name}");
            let to = self.partial.join(&to_rel);
            if exclude.iter().any(|x| x == &path) {
                self.skipped.push(format!("{shown} (the backup directory)"));
                continue;
            }
            // A database's companions are never read (the database is copied
            // through SQLite), so one that goes away while we list does not matter.
            if let Some(db) = sqlite::COMPANIONS
                .iter()
                .find_map(|c| name.strip_suffix(c))
                .filter(|db| databases.contains(*db))
            {
                self.skipped.push(format!(
                    "{shown} (in the copy of {db}, made through SQLite)"
                ));
                continue;
            }
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.skipped.push(removed_while_copying(&shown));
                    continue;
                }
                Err(e) => return Err(BackupError::io(&path)(e)),
            };
            let mode = meta.permissions().mode() & 0o7777;
            let ft = meta.file_type();
            if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(BackupError::io(&path))?;
                let target = target.to_string_lossy().into_owned();
                std::os::unix::fs::symlink(&target, &to).map_err(BackupError::io(&to))?;
                self.files.push(FileEntry {
                    path: to_rel,
                    kind: EntryKind::Link,
                    size: target.len() as u64,
                    sha256: flotilla_model::digest::sha256_hex(target.as_bytes()),
                    mode,
                    link: Some(target),
                });
            } else if ft.is_dir() {
                create_private_dir(&to)?;
                self.files.push(FileEntry {
                    path: to_rel.clone(),
                    kind: EntryKind::Dir,
                    size: 0,
                    sha256: String::new(),
                    mode,
                    link: None,
                });
                self.add_dir(root, &path, &to_rel, exclude)?;
            } else if !ft.is_file() {
                self.skipped
                    .push(format!("{shown} (not a regular file: a socket or device)"));
            } else if name.ends_with(".lock") {
                self.skipped.push(format!("{shown} (a lock file)"));
            } else if databases.contains(&name) {
                let entry = sqlite::copy(&path, &to, &to_rel)?;
                self.add_written(&to_rel, mode)?;
                self.databases.push(entry);
            } else {
                match copy_file(&path, &to, mode)? {
                    Some((sha256, size)) => self.push_file(to_rel, sha256, size, mode),
                    None => self.skipped.push(removed_while_copying(&shown)),
                }
            }
        }
        sync_dir(&self.partial.join(rel))
    }

    /// Records the file `rel` (already written in the archive, e.g. by `pg_dump`):
    /// fsyncs it and records its size and SHA-256, read back from disk.
    ///
    /// # Errors
    /// [`BackupError::Io`].
    pub(crate) fn add_written(&mut self, rel: &str, mode: u32) -> Result<(), BackupError> {
        let path = self.partial.join(rel);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(BackupError::io(&path))?;
        std::fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(BackupError::io(&path))?;
        let (sha256, size) = digest_file(&path)?;
        self.push_file(rel.to_string(), sha256, size, mode);
        Ok(())
    }

    fn push_file(&mut self, path: String, sha256: String, size: u64, mode: u32) {
        self.files.push(FileEntry {
            path,
            kind: EntryKind::File,
            size,
            sha256,
            mode,
            link: None,
        });
    }

    /// Writes `manifest` (with this writer's files, databases and skipped entries)
    /// and its digest, fsynced, into the partial archive. The archive keeps its
    /// temporary name until [`Writer::publish`].
    ///
    /// # Errors
    /// [`BackupError::Io`].
    pub(crate) fn write_manifest(
        &mut self,
        mut manifest: Manifest,
    ) -> Result<Manifest, BackupError> {
        manifest.files = std::mem::take(&mut self.files);
        manifest.databases = std::mem::take(&mut self.databases);
        manifest.skipped = std::mem::take(&mut self.skipped);
        let (json, digest) = manifest.encode();
        for (name, text) in [
            (MANIFEST_FILE, json),
            (MANIFEST_DIGEST_FILE, format!("{digest}\n")),
        ] {
            let path = self.partial.join(name);
            let mut f = create_new(&path, 0o600)?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(BackupError::io(&path))?;
        }
        sync_dir(&self.partial)?;
        Ok(manifest)
    }

    /// Renames the complete archive to its name, and flushes the backup
    /// directory: the archive's path.
    ///
    /// # Errors
    /// [`BackupError::Io`].
    pub(crate) fn publish(mut self) -> Result<PathBuf, BackupError> {
        std::fs::rename(&self.partial, &self.path).map_err(BackupError::io(&self.path))?;
        self.done = true;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir)?;
        }
        Ok(self.path.clone())
    }
}

/// Checks every entry of `manifest` in `archive`: present, of its type, with its
/// size and SHA-256 (read from disk); a cut-short or altered file is named.
///
/// # Errors
/// [`BackupError::Incomplete`] (a file missing), [`BackupError::Damaged`],
/// [`BackupError::Io`].
pub(crate) fn check_files(archive: &Path, manifest: &Manifest) -> Result<(), BackupError> {
    for f in &manifest.files {
        let path = archive.join(&f.path);
        let damaged = |why: String| BackupError::Damaged {
            archive: archive.to_owned(),
            path: f.path.clone(),
            why,
        };
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BackupError::Incomplete {
                    archive: archive.to_owned(),
                    what: f.path.clone(),
                })
            }
            Err(e) => return Err(BackupError::io(&path)(e)),
        };
        let ft = meta.file_type();
        match f.kind {
            EntryKind::Dir if ft.is_dir() => {}
            EntryKind::Link if ft.is_symlink() => {
                let target = std::fs::read_link(&path).map_err(BackupError::io(&path))?;
                if Some(target.to_string_lossy().as_ref()) != f.link.as_deref() {
                    return Err(damaged(format!(
                        "points at {}, the manifest says {}",
                        target.display(),
                        f.link.as_deref().unwrap_or("-")
                    )));
                }
            }
            EntryKind::File if ft.is_file() => {
                let (sha256, size) = digest_file(&path)?;
                if size != f.size {
                    return Err(damaged(format!(
                        "has {size} bytes, the manifest says {}{}",
                        f.size,
                        if size < f.size { " (cut short)" } else { "" }
                    )));
                }
                if sha256 != f.sha256 {
                    return Err(damaged(format!(
                        "has SHA-256 {sha256}, the manifest says {}",
                        f.sha256
                    )));
                }
            }
            _ => return Err(damaged(format!("is not a {:?}", f.kind).to_lowercase())),
        }
    }
    Ok(())
}

/// Copies the entries of `manifest` under `files/` out of `archive` into the
/// existing, empty directory `into`, with their modes, each file fsynced and checked
/// against its SHA-256 as it is copied, every directory flushed.
///
/// # Errors
/// [`BackupError::Damaged`] (a file changed since it was checked),
/// [`BackupError::Io`].
pub(crate) fn extract(archive: &Path, manifest: &Manifest, into: &Path) -> Result<(), BackupError> {
    let prefix = format!("{FILES_DIR}/");
    for f in &manifest.files {
        let Some(rel) = f.path.strip_prefix(&prefix) else {
            continue;
        };
        let from = archive.join(&f.path);
        let to = into.join(rel);
        match f.kind {
            EntryKind::Dir => create_private_dir(&to)?,
            EntryKind::Link => {
                let target = f.link.as_deref().unwrap_or_default();
                std::os::unix::fs::symlink(target, &to).map_err(BackupError::io(&to))?;
            }
            EntryKind::File => {
                let damaged = |why: String| BackupError::Damaged {
                    archive: archive.to_owned(),
                    path: f.path.clone(),
                    why,
                };
                let (sha256, size) = copy_file(&from, &to, f.mode)?
                    .ok_or_else(|| damaged("removed while it was restored".into()))?;
                if sha256 != f.sha256 || size != f.size {
                    return Err(damaged(format!(
                        "changed while it was restored ({size} bytes, {sha256})"
                    )));
                }
            }
        }
    }
    // Directories last, deepest first: their modes may forbid writing into them.
    for f in manifest.files.iter().rev() {
        let to = match (f.kind, f.path.strip_prefix(&prefix)) {
            (EntryKind::Dir, Some(rel)) => into.join(rel),
            (EntryKind::Dir, None) if f.path == FILES_DIR => into.to_path_buf(),
            _ => continue,
        };
        sync_dir(&to)?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(f.mode))
            .map_err(BackupError::io(&to))?;
    }
    Ok(())
}

/// The restored path of a database listed at `rel` (`files/…`) in the archive,
/// when it is under `files/`.
pub(crate) fn restored_path(into: &Path, rel: &str) -> Option<PathBuf> {
    rel.strip_prefix(&format!("{FILES_DIR}/"))
        .map(|r| into.join(r))
}
