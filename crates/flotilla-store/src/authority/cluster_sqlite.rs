//! [`Cluster`] on SQLite: one authority per file, so wake-ups stay in the
//! process (nothing sent, nobody listens); versions and the CA's pin as on
//! PostgreSQL; leases timed by SQLite's own clock (`julianday('now')`).

use super::cluster::{check_ca, stale, Cluster, Doc, Heard, Watermarks, CA_PIN_KEY};
use super::sqlite::SqliteAuthority;
use super::stored_id;
use crate::error::StoreError;
use rusqlite::OptionalExtension;

/// Now in ms since the Unix epoch, by SQLite's clock.
const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

impl Cluster for SqliteAuthority {
    fn shared(&self) -> bool {
        false
    }

    async fn notify(&self, _payload: String) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn listen(&self) -> Result<Option<tokio::sync::mpsc::Receiver<Heard>>, StoreError> {
        Ok(None)
    }

    async fn put_doc_if(
        &self,
        kind: Doc,
        id: u64,
        doc: String,
        updated_ms: i64,
        version: u64,
    ) -> Result<u64, StoreError> {
        self.run("write a document if unchanged", true, move |tx| {
            let Some(stored) = stored_id(id) else {
                return Err(kind.unknown(id).into());
            };
            let table = kind.table();
            let found: Option<i64> = tx
                .query_row(
                    &format!("SELECT version FROM {table} WHERE id = ?1"),
                    [stored],
                    |r| r.get(0),
                )
                .optional()?;
            if found != Some(version as i64) {
                return Err(stale(kind, id, version, found).into());
            }
            tx.execute(
                &format!(
                    "UPDATE {table} SET doc = ?2, updated_ms = ?3, version = version + 1 WHERE id = ?1"
                ),
                (stored, &doc, updated_ms),
            )?;
            Ok(version + 1)
        })
        .await
    }

    async fn take_lease(
        &self,
        name: String,
        holder: String,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        self.run("take a lease", true, move |tx| {
            let taken = tx
                .query_row(
                    &format!(
                        "INSERT INTO leases (name, holder, expires_ms) VALUES (?1, ?2, {NOW_MS} + ?3) \
                         ON CONFLICT (name) DO UPDATE \
                           SET holder = excluded.holder, expires_ms = excluded.expires_ms \
                           WHERE leases.holder = excluded.holder \
                              OR leases.expires_ms <= {NOW_MS} \
                              OR leases.expires_ms > excluded.expires_ms \
                         RETURNING holder"
                    ),
                    (&name, &holder, ttl_ms),
                    |_| Ok(()),
                )
                .optional()?;
            Ok(taken.is_some())
        })
        .await
    }

    async fn drop_lease(&self, name: String, holder: String) -> Result<(), StoreError> {
        self.run("give a lease up", true, move |tx| {
            tx.execute(
                "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
                (&name, &holder),
            )?;
            Ok(())
        })
        .await
    }

    async fn claim_ca(&self, ca_pin: String) -> Result<(), StoreError> {
        self.run("record the CA's pin", true, move |tx| {
            tx.execute(
                "INSERT INTO authority_identity (key, value) VALUES (?1, ?2) \
                 ON CONFLICT (key) DO NOTHING",
                (CA_PIN_KEY, &ca_pin),
            )?;
            let stored: String = tx.query_row(
                "SELECT value FROM authority_identity WHERE key = ?1",
                [CA_PIN_KEY],
                |r| r.get(0),
            )?;
            Ok(check_ca(stored, ca_pin)?)
        })
        .await
    }

    async fn watermarks(&self) -> Result<Watermarks, StoreError> {
        self.run("read the watermarks", false, |tx| {
            Ok(tx.query_row(
                "SELECT \
                   (SELECT COALESCE(MAX(idx), 0) FROM selections), \
                   (SELECT COALESCE(MAX(id), 0) FROM agent_calls), \
                   (SELECT COALESCE(SUM(version), 0) + COUNT(*) FROM rollouts) \
                   + (SELECT COALESCE(SUM(updated_ms), 0) + COUNT(*) FROM unskips), \
                   (SELECT COALESCE(MAX(received_ms), 0) + COUNT(*) FROM host_updates), \
                   (SELECT COALESCE(SUM(revoked_ms), 0) + COUNT(revoked_ms) FROM credentials)",
                [],
                |r| {
                    Ok(Watermarks {
                        selection: r.get::<_, i64>(0)? as u64,
                        last_call: r.get::<_, i64>(1)? as u64,
                        releases: r.get(2)?,
                        updates: r.get(3)?,
                        revocations: r.get(4)?,
                    })
                },
            )?)
        })
        .await
    }
}
