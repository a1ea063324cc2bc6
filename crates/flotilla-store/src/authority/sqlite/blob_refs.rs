//! [`BlobRefs`] on SQLite.

use super::SqliteAuthority;
use crate::authority::blob_refs::{BlobRef, BlobRefs};
use crate::error::StoreError;
use rusqlite::OptionalExtension;
use std::future::Future;

/// A size as stored (a blob of 8 EiB or more cannot exist).
fn size_of(size: u64) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

impl BlobRefs for SqliteAuthority {
    fn put_blob(
        &self,
        sha256: String,
        size: u64,
        stored_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.run("record a blob", true, move |tx| {
            let size = size_of(size);
            // BEGIN IMMEDIATE holds the write lock: nobody records it in between.
            let known: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM blobs WHERE sha256 = ?1)",
                [&sha256],
                |row| row.get(0),
            )?;
            tx.execute(
                "INSERT INTO blobs (sha256, size, on_disk, stored_ms) VALUES (?1, ?2, 1, ?3)
                 ON CONFLICT (sha256) DO UPDATE SET size = excluded.size, on_disk = 1,
                     stored_ms = MAX(stored_ms, excluded.stored_ms)",
                (&sha256, size, stored_ms),
            )?;
            Ok(!known)
        })
    }

    fn has_blob(&self, sha256: String) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.run("look up a blob", false, move |tx| {
            Ok(tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM blobs WHERE sha256 = ?1)",
                [&sha256],
                |row| row.get(0),
            )?)
        })
    }

    fn blob_refs(&self) -> impl Future<Output = Result<Vec<BlobRef>, StoreError>> + Send {
        self.run("list blobs", false, move |tx| {
            let mut stmt =
                tx.prepare("SELECT sha256, size, stored_ms, on_disk FROM blobs ORDER BY sha256")?;
            let rows = stmt.query_map([], |row| {
                Ok(BlobRef {
                    sha256: row.get(0)?,
                    size: row.get::<_, i64>(1)? as u64,
                    stored_ms: row.get(2)?,
                    on_disk: row.get::<_, i64>(3)? == 1,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn delete_blob(
        &self,
        sha256: String,
        stored_before_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.run("delete a blob", true, move |tx| {
            let old: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM blobs WHERE sha256 = ?1 AND stored_ms < ?2)",
                (&sha256, stored_before_ms),
                |row| row.get(0),
            )?;
            if !old {
                return Ok(false);
            }
            tx.execute("DELETE FROM blob_chunks WHERE sha256 = ?1", [&sha256])?;
            tx.execute("DELETE FROM blobs WHERE sha256 = ?1", [&sha256])?;
            Ok(true)
        })
    }

    fn legacy_blob_chunk(
        &self,
        sha256: String,
        n: u64,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send {
        self.run("read a blob's chunk", false, move |tx| {
            Ok(tx
                .query_row(
                    "SELECT bytes FROM blob_chunks WHERE sha256 = ?1 AND n = ?2",
                    (&sha256, n as i64),
                    |row| row.get::<_, Vec<u8>>(0),
                )
                .optional()?)
        })
    }

    fn blob_moved(
        &self,
        sha256: String,
        stored_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.run("mark a blob moved to disk", true, move |tx| {
            tx.execute("DELETE FROM blob_chunks WHERE sha256 = ?1", [&sha256])?;
            tx.execute(
                "UPDATE blobs SET on_disk = 1, stored_ms = MAX(stored_ms, ?2) WHERE sha256 = ?1",
                (&sha256, stored_ms),
            )?;
            Ok(())
        })
    }
}
