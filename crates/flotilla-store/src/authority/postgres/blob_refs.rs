//! [`BlobRefs`] on PostgreSQL.

use super::{pg, PostgresAuthority};
use crate::authority::blob_refs::{BlobRef, BlobRefs};
use crate::error::StoreError;

/// A size as stored (a blob of 8 EiB or more cannot exist).
fn size_of(size: u64) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

impl BlobRefs for PostgresAuthority {
    async fn put_blob(
        &self,
        sha256: String,
        size: u64,
        stored_ms: i64,
    ) -> Result<bool, StoreError> {
        let size = size_of(size);
        let conn = self.conn().await?;
        // xmax = 0: the row was inserted by this statement, not updated.
        let row = conn
            .query_one(
                "INSERT INTO blobs (sha256, size, on_disk, stored_ms) VALUES ($1, $2, TRUE, $3)
                 ON CONFLICT (sha256) DO UPDATE SET size = EXCLUDED.size, on_disk = TRUE,
                     stored_ms = GREATEST(blobs.stored_ms, EXCLUDED.stored_ms)
                 RETURNING (xmax = 0)",
                &[&sha256, &size, &stored_ms],
            )
            .await
            .map_err(pg("record a blob"))?;
        Ok(row.get(0))
    }

    async fn has_blob(&self, sha256: String) -> Result<bool, StoreError> {
        let conn = self.conn().await?;
        Ok(conn
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM blobs WHERE sha256 = $1)",
                &[&sha256],
            )
            .await
            .map_err(pg("look up a blob"))?
            .get(0))
    }

    async fn blob_refs(&self) -> Result<Vec<BlobRef>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .query(
                "SELECT sha256, size, stored_ms, on_disk FROM blobs ORDER BY sha256",
                &[],
            )
            .await
            .map_err(pg("list blobs"))?;
        Ok(rows
            .iter()
            .map(|row| BlobRef {
                sha256: row.get(0),
                size: row.get::<_, i64>(1) as u64,
                stored_ms: row.get(2),
                on_disk: row.get(3),
            })
            .collect())
    }

    async fn delete_blob(&self, sha256: String, stored_before_ms: i64) -> Result<bool, StoreError> {
        const CX: &str = "delete a blob";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        // The row locked first: a concurrent upload of it waits, then inserts anew.
        let old = tx
            .query_opt(
                "SELECT 1 FROM blobs WHERE sha256 = $1 AND stored_ms < $2 FOR UPDATE",
                &[&sha256, &stored_before_ms],
            )
            .await
            .map_err(pg(CX))?
            .is_some();
        if !old {
            return Ok(false);
        }
        tx.execute("DELETE FROM blob_chunks WHERE sha256 = $1", &[&sha256])
            .await
            .map_err(pg(CX))?;
        tx.execute("DELETE FROM blobs WHERE sha256 = $1", &[&sha256])
            .await
            .map_err(pg(CX))?;
        tx.commit().await.map_err(pg(CX))?;
        Ok(true)
    }

    async fn legacy_blob_chunk(
        &self,
        sha256: String,
        n: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let conn = self.conn().await?;
        Ok(conn
            .query_opt(
                "SELECT bytes FROM blob_chunks WHERE sha256 = $1 AND n = $2",
                &[&sha256, &(n as i64)],
            )
            .await
            .map_err(pg("read a blob's chunk"))?
            .map(|row| row.get(0)))
    }

    async fn blob_moved(&self, sha256: String, stored_ms: i64) -> Result<(), StoreError> {
        const CX: &str = "mark a blob moved to disk";
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await.map_err(pg(CX))?;
        tx.execute("DELETE FROM blob_chunks WHERE sha256 = $1", &[&sha256])
            .await
            .map_err(pg(CX))?;
        tx.execute(
            "UPDATE blobs SET on_disk = TRUE, stored_ms = GREATEST(stored_ms, $2) WHERE sha256 = $1",
            &[&sha256, &stored_ms],
        )
        .await
        .map_err(pg(CX))?;
        tx.commit().await.map_err(pg(CX))?;
        Ok(())
    }
}
