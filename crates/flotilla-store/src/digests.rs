//! Digests of files (executables) computed earlier, keyed by what names a file's
//! content without reading it: device, inode, size, mtime and ctime (ns). A new
//! process asks here before hashing a large executable again. Table `file_digests`;
//! at most [`MAX_FILE_DIGESTS`] rows are kept (the most recently recorded).

use crate::error::StoreError;
use crate::store::{Store, TxError};
use rusqlite::params;
use serde::{Deserialize, Serialize};

/// How many digests are kept.
pub const MAX_FILE_DIGESTS: i64 = 1024;

/// One file's digest and the key it was computed for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileDigest {
    /// Device id (`st_dev`).
    pub dev: u64,
    /// Inode number (`st_ino`).
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the Unix epoch.
    pub mtime_ns: i64,
    /// Status-change time, ns since the Unix epoch.
    pub ctime_ns: i64,
    /// `sha256:<64 hex>` of the content.
    pub sha256: String,
}

/// SQLite integers are signed: u64 values are stored bit for bit.
fn to_sql(v: u64) -> i64 {
    v as i64
}

fn from_sql(v: i64) -> u64 {
    v as u64
}

impl Store {
    /// Every digest kept.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn file_digests(&self) -> Result<Vec<FileDigest>, StoreError> {
        self.read("read file digests", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT dev, ino, size, mtime_ns, ctime_ns, sha256 FROM file_digests",
            )?;
            let rows = stmt.query_map([], |row| {
                Ok(FileDigest {
                    dev: from_sql(row.get(0)?),
                    ino: from_sql(row.get(1)?),
                    size: from_sql(row.get(2)?),
                    mtime_ns: row.get(3)?,
                    ctime_ns: row.get(4)?,
                    sha256: row.get(5)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// Keeps `digests` (recorded at `at_ms`, ms since the Unix epoch; a key already
    /// kept gets the new digest and time), then forgets all but the
    /// [`MAX_FILE_DIGESTS`] most recent.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn record_file_digests(
        &mut self,
        digests: &[FileDigest],
        at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write("record file digests", |tx| {
            let mut insert = tx.prepare_cached(
                "INSERT INTO file_digests (dev, ino, size, mtime_ns, ctime_ns, sha256, recorded_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (dev, ino, size, mtime_ns, ctime_ns) \
                 DO UPDATE SET sha256 = excluded.sha256, recorded_at_ms = excluded.recorded_at_ms",
            )?;
            for d in digests {
                insert.execute(params![
                    to_sql(d.dev),
                    to_sql(d.ino),
                    to_sql(d.size),
                    d.mtime_ns,
                    d.ctime_ns,
                    d.sha256,
                    at_ms
                ])?;
            }
            tx.execute(
                "DELETE FROM file_digests WHERE rowid NOT IN \
                 (SELECT rowid FROM file_digests ORDER BY recorded_at_ms DESC, rowid DESC LIMIT ?1)",
                [MAX_FILE_DIGESTS],
            )?;
            Ok::<_, TxError>(())
        })
    }
}
