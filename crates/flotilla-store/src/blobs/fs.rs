//! [`FsBlobStore`]: blobs as files, `<dir>/sha256/ab/cdef…`.
//!
//! Writing: a temporary file `.tmp-<digest>-<pid>-<n>` in the blob's own
//! directory (so that the final `rename` stays within one directory), hashed as it
//! is written, `fsync`ed, renamed to its name when the digest matched, and the
//! directory `fsync`ed so that the rename survives a power cut. Reading: the file
//! is hashed whole on every read, the last piece held back until the digest
//! matched; a corrupt file is renamed aside to `.corrupt-<digest>-<ms>` (only
//! when it still is the one at the name: a replacement uploaded meanwhile stays).
//! Names starting with `.` are never blobs; [`BlobStore::sweep`] removes old ones.

use super::{
    hex, is_sha256_hex, BlobError, BlobReader, BlobStore, BlobWriter, BoxFuture, StoredBlob,
    READ_PIECE,
};
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The subdirectory of the store's directory that holds SHA-256-named blobs.
pub const SHA256_DIR: &str = "sha256";

const TMP_PREFIX: &str = ".tmp-";
const CORRUPT_PREFIX: &str = ".corrupt-";

/// Blobs as files under one directory (see the [module docs](self)). Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    dir: PathBuf,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> BlobError + '_ {
    move |source| BlobError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn checked(sha256: &str) -> Result<(), BlobError> {
    if is_sha256_hex(sha256) {
        Ok(())
    } else {
        Err(BlobError::NotSha256(sha256.to_string()))
    }
}

/// `fsync` of a directory (a rename or unlink in it made durable).
async fn sync_dir(dir: &Path) -> Result<(), BlobError> {
    let d = dir.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::File::open(&d).and_then(|f| f.sync_all()))
        .await
        .map_err(|e| io(dir)(std::io::Error::other(e)))?
        .map_err(io(dir))
}

impl FsBlobStore {
    /// The store in `dir` (created when the first blob is written).
    pub fn new(dir: impl Into<PathBuf>) -> FsBlobStore {
        FsBlobStore { dir: dir.into() }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob `sha256` (64 lowercase hex) is: `<dir>/sha256/ab/cdef…`.
    pub fn path_of(&self, sha256: &str) -> PathBuf {
        let (head, rest) = sha256.split_at(2.min(sha256.len()));
        self.dir.join(SHA256_DIR).join(head).join(rest)
    }

    async fn entries(&self) -> Result<Vec<(PathBuf, String, std::fs::Metadata)>, BlobError> {
        let top = self.dir.join(SHA256_DIR);
        let mut out = Vec::new();
        let mut heads = match tokio::fs::read_dir(&top).await {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io(&top)(e)),
        };
        while let Some(head) = heads.next_entry().await.map_err(io(&top))? {
            let head_path = head.path();
            let Some(head_name) = head.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if head_name.len() != 2 || !head_path.is_dir() {
                continue;
            }
            let mut files = tokio::fs::read_dir(&head_path)
                .await
                .map_err(io(&head_path))?;
            while let Some(f) = files.next_entry().await.map_err(io(&head_path))? {
                let Some(name) = f.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                // Gone meanwhile (another authority's rename or removal): skipped.
                let Ok(meta) = f.metadata().await else {
                    continue;
                };
                if meta.is_file() {
                    out.push((f.path(), format!("{head_name}/{name}"), meta));
                }
            }
        }
        Ok(out)
    }
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl BlobStore for FsBlobStore {
    fn writer<'a>(
        &'a self,
        sha256: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn BlobWriter>, BlobError>> {
        Box::pin(async move {
            checked(sha256)?;
            let dest = self.path_of(sha256);
            let dir = dest
                .parent()
                .expect("a blob's path has a parent")
                .to_path_buf();
            if tokio::fs::metadata(&dir).await.is_err() {
                tokio::fs::create_dir_all(&dir).await.map_err(io(&dir))?;
                // The new directories made durable too.
                if let Some(top) = dir.parent() {
                    sync_dir(top).await?;
                }
            }
            let tmp = dir.join(format!(
                "{TMP_PREFIX}{sha256}-{}-{}",
                std::process::id(),
                TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            let file = tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .await
                .map_err(io(&tmp))?;
            Ok(Box::new(FsWriter {
                file: Some(file),
                tmp,
                dest,
                dir,
                expected: sha256.to_string(),
                hasher: Sha256::new(),
                written: 0,
                done: false,
            }) as Box<dyn BlobWriter>)
        })
    }

    fn open<'a>(
        &'a self,
        sha256: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn BlobReader>>, BlobError>> {
        Box::pin(async move {
            checked(sha256)?;
            let path = self.path_of(sha256);
            let file = match tokio::fs::File::open(&path).await {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io(&path)(e)),
            };
            let meta = file.metadata().await.map_err(io(&path))?;
            Ok(Some(Box::new(FsReader {
                file,
                identity: (meta.dev(), meta.ino()),
                path,
                sha256: sha256.to_string(),
                size: meta.len(),
                start: 0,
                end: meta.len(),
                pos: 0,
                hasher: Sha256::new(),
                held: None,
                finished: false,
            }) as Box<dyn BlobReader>))
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<StoredBlob>, BlobError>> {
        Box::pin(async move {
            Ok(self
                .entries()
                .await?
                .into_iter()
                .filter_map(|(_, name, meta)| {
                    let sha256 = name.replace('/', "");
                    is_sha256_hex(&sha256).then(|| StoredBlob {
                        sha256,
                        size: meta.len(),
                        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    })
                })
                .collect())
        })
    }

    fn remove<'a>(
        &'a self,
        sha256: &'a str,
        before: SystemTime,
    ) -> BoxFuture<'a, Result<bool, BlobError>> {
        Box::pin(async move {
            checked(sha256)?;
            let path = self.path_of(sha256);
            match tokio::fs::metadata(&path).await {
                Ok(m) if m.modified().unwrap_or(SystemTime::UNIX_EPOCH) < before => {}
                Ok(_) => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(io(&path)(e)),
            }
            match tokio::fs::remove_file(&path).await {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(io(&path)(e)),
            }
        })
    }

    fn sweep(&self, before: SystemTime) -> BoxFuture<'_, Result<usize, BlobError>> {
        Box::pin(async move {
            let mut removed = 0;
            for (path, name, meta) in self.entries().await? {
                let file = name.rsplit('/').next().unwrap_or_default();
                let leftover = file.starts_with(TMP_PREFIX) || file.starts_with(CORRUPT_PREFIX);
                if leftover && meta.modified().unwrap_or(SystemTime::UNIX_EPOCH) < before {
                    match tokio::fs::remove_file(&path).await {
                        Ok(()) => removed += 1,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io(&path)(e)),
                    }
                }
            }
            Ok(removed)
        })
    }
}

struct FsWriter {
    file: Option<tokio::fs::File>,
    tmp: PathBuf,
    dest: PathBuf,
    dir: PathBuf,
    expected: String,
    hasher: Sha256,
    written: u64,
    done: bool,
}

impl BlobWriter for FsWriter {
    fn write<'a>(&'a mut self, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), BlobError>> {
        Box::pin(async move {
            self.hasher.update(bytes);
            let file = self.file.as_mut().expect("written before commit");
            file.write_all(bytes).await.map_err(io(&self.tmp))?;
            self.written += bytes.len() as u64;
            Ok(())
        })
    }

    fn written(&self) -> u64 {
        self.written
    }

    fn commit(mut self: Box<Self>) -> BoxFuture<'static, Result<u64, BlobError>> {
        Box::pin(async move {
            let found = hex(&std::mem::take(&mut self.hasher).finalize());
            if found != self.expected {
                // Dropped: the temporary file is removed.
                return Err(BlobError::DigestMismatch {
                    expected: self.expected.clone(),
                    found,
                    size: self.written,
                });
            }
            let mut file = self.file.take().expect("committed once");
            file.flush().await.map_err(io(&self.tmp))?;
            file.sync_all().await.map_err(io(&self.tmp))?;
            drop(file);
            tokio::fs::rename(&self.tmp, &self.dest)
                .await
                .map_err(io(&self.dest))?;
            self.done = true;
            sync_dir(&self.dir).await?;
            Ok(self.written)
        })
    }
}

impl Drop for FsWriter {
    fn drop(&mut self) {
        if !self.done {
            drop(self.file.take());
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

struct FsReader {
    file: tokio::fs::File,
    identity: (u64, u64),
    path: PathBuf,
    sha256: String,
    size: u64,
    start: u64,
    end: u64,
    pos: u64,
    hasher: Sha256,
    held: Option<Vec<u8>>,
    finished: bool,
}

impl FsReader {
    /// Moves the corrupt file aside (when it still is the one at its name).
    async fn corrupt(&mut self, found: String) -> BlobError {
        let dir = self.path.parent().expect("a blob's path has a parent");
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let aside = dir.join(format!("{CORRUPT_PREFIX}{}-{ms}", self.sha256));
        let same = tokio::fs::metadata(&self.path)
            .await
            .is_ok_and(|m| (m.dev(), m.ino()) == self.identity);
        let moved_to = if same && tokio::fs::rename(&self.path, &aside).await.is_ok() {
            aside
        } else {
            self.path.clone()
        };
        BlobError::Corrupt {
            sha256: self.sha256.clone(),
            found,
            moved_to,
        }
    }
}

impl BlobReader for FsReader {
    fn size(&self) -> u64 {
        self.size
    }

    fn restrict(&mut self, start: u64, end: u64) {
        self.end = end.min(self.size);
        self.start = start.min(self.end);
    }

    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>, BlobError>> {
        Box::pin(async move {
            loop {
                if self.finished {
                    return Ok(None);
                }
                if self.pos >= self.size {
                    self.finished = true;
                    let found = hex(&std::mem::take(&mut self.hasher).finalize());
                    if found != self.sha256 {
                        return Err(self.corrupt(found).await);
                    }
                    return Ok(self.held.take());
                }
                let want = READ_PIECE.min((self.size - self.pos) as usize);
                let mut buf = vec![0u8; want];
                let n = self.file.read(&mut buf).await.map_err(io(&self.path))?;
                if n == 0 {
                    self.finished = true;
                    return Err(self.corrupt("truncated".into()).await);
                }
                buf.truncate(n);
                self.hasher.update(&buf);
                let (lo_file, hi_file) = (self.pos, self.pos + n as u64);
                self.pos = hi_file;
                let lo = self.start.max(lo_file);
                let hi = self.end.min(hi_file);
                if lo < hi {
                    let piece = if lo == lo_file && hi == hi_file {
                        buf
                    } else {
                        buf[(lo - lo_file) as usize..(hi - lo_file) as usize].to_vec()
                    };
                    if let Some(prev) = self.held.replace(piece) {
                        return Ok(Some(prev));
                    }
                }
            }
        })
    }
}
