//! [`Cluster`] on PostgreSQL: `NOTIFY`/`LISTEN` on [`WAKE_CHANNEL`], conditional
//! `UPDATE`s on a document's version, leases timed by the server's `now()`, the
//! CA's pin in `authority_identity`.

use super::cluster::{check_ca, stale, Cluster, Doc, Heard, Watermarks, CA_PIN_KEY};
use super::cluster::{MAX_PAYLOAD_BYTES, WAKE_CHANNEL};
use super::postgres::{pg, PostgresAuthority};
use super::stored_id;
use crate::error::StoreError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Config, NoTls};

/// How long the listener waits before opening its connection again after a loss.
const RELISTEN_DELAY: Duration = Duration::from_millis(500);

/// How many heard payloads wait for the reader before the listener waits too.
const HEARD_BUFFER: usize = 1024;

/// What the listening connection's driver passes on: a payload, or why the
/// connection ended.
type Message = Result<String, String>;

/// Opens a connection and listens on [`WAKE_CHANNEL`]; the connection (kept
/// open by the client returned) and what it hears.
async fn open(
    config: &Config,
) -> Result<(tokio_postgres::Client, mpsc::UnboundedReceiver<Message>), StoreError> {
    let (client, mut connection) = config
        .connect(NoTls)
        .await
        .map_err(|source| StoreError::PostgresConnect { source })?;
    let (msgs_tx, msgs) = mpsc::unbounded_channel();
    // The connection yields notifications only when polled as a stream of
    // messages: driven here, forwarded to the reader.
    tokio::spawn(async move {
        loop {
            let sent = match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    msgs_tx.send(Ok(n.payload().to_string()))
                }
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => {
                    let _ = msgs_tx.send(Err(e.to_string()));
                    return;
                }
                None => {
                    let _ = msgs_tx.send(Err("the server closed it".into()));
                    return;
                }
            };
            if sent.is_err() {
                return;
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {WAKE_CHANNEL}"))
        .await
        .map_err(pg("listen for wake-ups"))?;
    Ok((client, msgs))
}

/// Forwards what `msgs` brings to `tx` until the connection ends (`true`: open
/// another) or `tx` is closed (`false`: stop).
async fn forward(
    client: tokio_postgres::Client,
    mut msgs: mpsc::UnboundedReceiver<Message>,
    tx: &mpsc::Sender<Heard>,
) -> bool {
    while let Some(m) = msgs.recv().await {
        let heard = match m {
            Ok(payload) => Heard::Payload(payload),
            Err(why) => Heard::Lost(why),
        };
        let lost = matches!(heard, Heard::Lost(_));
        if tx.send(heard).await.is_err() {
            return false;
        }
        if lost {
            break;
        }
    }
    drop(client);
    !tx.is_closed()
}

impl Cluster for PostgresAuthority {
    fn shared(&self) -> bool {
        true
    }

    async fn notify(&self, payload: String) -> Result<bool, StoreError> {
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Ok(false);
        }
        let conn = self.conn().await?;
        conn.execute("SELECT pg_notify($1, $2)", &[&WAKE_CHANNEL, &payload])
            .await
            .map_err(pg("send a wake-up"))?;
        Ok(true)
    }

    async fn listen(&self) -> Result<Option<mpsc::Receiver<Heard>>, StoreError> {
        let (tx, rx) = mpsc::channel(HEARD_BUFFER);
        let config: Arc<Config> = self.config.clone();
        let (client, msgs) = open(&config).await?;
        tokio::spawn(async move {
            let (mut client, mut msgs) = (client, msgs);
            loop {
                if !forward(client, msgs, &tx).await {
                    return;
                }
                loop {
                    tokio::time::sleep(RELISTEN_DELAY).await;
                    match open(&config).await {
                        Ok(opened) => {
                            (client, msgs) = opened;
                            break;
                        }
                        Err(e) => {
                            if tx.send(Heard::Lost(e.to_string())).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                if tx.send(Heard::Resync).await.is_err() {
                    return;
                }
            }
        });
        Ok(Some(rx))
    }

    async fn put_doc_if(
        &self,
        kind: Doc,
        id: u64,
        doc: String,
        updated_ms: i64,
        version: u64,
    ) -> Result<u64, StoreError> {
        let Some(stored) = stored_id(id) else {
            return Err(kind.unknown(id));
        };
        let expected = version as i64;
        let table = kind.table();
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                &format!(
                    "UPDATE {table} SET doc = $2, updated_ms = $3, version = version + 1 \
                     WHERE id = $1 AND version = $4 RETURNING version"
                ),
                &[&stored, &doc, &updated_ms, &expected],
            )
            .await
            .map_err(pg("write a document if unchanged"))?;
        if let Some(row) = row {
            return Ok(row.get::<_, i64>(0) as u64);
        }
        let found = conn
            .query_opt(
                &format!("SELECT version FROM {table} WHERE id = $1"),
                &[&stored],
            )
            .await
            .map_err(pg("read a document's version"))?
            .map(|r| r.get::<_, i64>(0));
        Err(stale(kind, id, version, found))
    }

    async fn take_lease(
        &self,
        name: String,
        holder: String,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let conn = self.conn().await?;
        // Free, expired, ours, or expiring further ahead than a lease can (a row
        // from a clock in the future): taken. Times are the server's only.
        let row = conn
            .query_opt(
                "INSERT INTO leases (name, holder, expires_at) \
                 VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond') \
                 ON CONFLICT (name) DO UPDATE \
                   SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at \
                   WHERE leases.holder = EXCLUDED.holder \
                      OR leases.expires_at <= now() \
                      OR leases.expires_at > EXCLUDED.expires_at \
                 RETURNING holder",
                &[&name, &holder, &ttl_ms],
            )
            .await
            .map_err(pg("take a lease"))?;
        Ok(row.is_some())
    }

    async fn drop_lease(&self, name: String, holder: String) -> Result<(), StoreError> {
        let conn = self.conn().await?;
        conn.execute(
            "DELETE FROM leases WHERE name = $1 AND holder = $2",
            &[&name, &holder],
        )
        .await
        .map_err(pg("give a lease up"))?;
        Ok(())
    }

    async fn claim_ca(&self, ca_pin: String) -> Result<(), StoreError> {
        let conn = self.conn().await?;
        conn.execute(
            "INSERT INTO authority_identity (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO NOTHING",
            &[&CA_PIN_KEY, &ca_pin],
        )
        .await
        .map_err(pg("record the CA's pin"))?;
        let stored: String = conn
            .query_one(
                "SELECT value FROM authority_identity WHERE key = $1",
                &[&CA_PIN_KEY],
            )
            .await
            .map_err(pg("read the CA's pin"))?
            .get(0);
        check_ca(stored, ca_pin)
    }

    async fn watermarks(&self) -> Result<Watermarks, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .query_one(
                "SELECT \
                   (SELECT COALESCE(MAX(idx), 0) FROM selections), \
                   (SELECT COALESCE(MAX(id), 0) FROM agent_calls), \
                   (SELECT COALESCE(SUM(version), 0)::bigint + COUNT(*) FROM rollouts) \
                   + (SELECT COALESCE(SUM(updated_ms), 0)::bigint + COUNT(*) FROM unskips), \
                   (SELECT COALESCE(MAX(received_ms), 0) + COUNT(*) FROM host_updates), \
                   (SELECT COALESCE(SUM(revoked_ms), 0)::bigint + COUNT(revoked_ms) FROM credentials)",
                &[],
            )
            .await
            .map_err(pg("read the watermarks"))?;
        Ok(Watermarks {
            selection: row.get::<_, i64>(0) as u64,
            last_call: row.get::<_, i64>(1) as u64,
            releases: row.get(2),
            updates: row.get(3),
            revocations: row.get(4),
        })
    }
}
