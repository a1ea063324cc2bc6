//! What several authorities sharing one database need of it
//! (`flotilla_store::authority::Cluster`), on both backends: compare-and-swap
//! writes of documents, leases timed by the database's clock, the CA's pin; and on
//! PostgreSQL, wake-ups that cross connections (`NOTIFY`/`LISTEN`).
//!
//! PostgreSQL tests need `FLOTILLA_TEST_POSTGRES_URL` (`eval "$(scripts/postgres)"`).

use flotilla_store::authority::testing;
use flotilla_store::authority::{
    AuthorityStore, Cluster, Doc, Heard, PostgresAuthority, SqliteAuthority, AUTHORITY_DB_FILE,
};
use flotilla_store::StoreError;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

const T0: i64 = 1_700_000_000_000;

/// One backend's database for one test, opened as several authorities would.
trait Fixture: Send + Sync {
    type Store: AuthorityStore + Clone;
    /// A new handle on the database, with its own connection(s).
    fn open(&self) -> impl Future<Output = Self::Store> + Send;
    /// Runs `sql` on the database directly (what another program could write).
    fn exec(&self, sql: &str) -> impl Future<Output = ()> + Send;
    /// SQL for "now plus this many days" in the backend's lease column.
    fn days_ahead(&self, days: i64) -> String;
    /// The lease table's expiry column.
    fn expiry_column(&self) -> &'static str;
}

struct SqliteFixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Fixture for SqliteFixture {
    type Store = SqliteAuthority;
    async fn open(&self) -> SqliteAuthority {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || SqliteAuthority::open(&path))
            .await
            .unwrap()
            .unwrap()
    }
    async fn exec(&self, sql: &str) {
        let path = self.path.clone();
        let sql = sql.to_string();
        tokio::task::spawn_blocking(move || {
            rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(&sql)
                .unwrap()
        })
        .await
        .unwrap();
    }
    fn days_ahead(&self, days: i64) -> String {
        format!("CAST((julianday('now') - 2440587.5 + {days}) * 86400000 AS INTEGER)")
    }
    fn expiry_column(&self) -> &'static str {
        "expires_ms"
    }
}

struct PostgresFixture {
    admin_url: String,
    db: testing::TestDatabase,
}

impl Drop for PostgresFixture {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.db.name.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(testing::drop_database(&admin_url, &name))
        })
        .join();
    }
}

impl Fixture for PostgresFixture {
    type Store = PostgresAuthority;
    async fn open(&self) -> PostgresAuthority {
        PostgresAuthority::connect(&self.db.url).await.unwrap()
    }
    async fn exec(&self, sql: &str) {
        let config: tokio_postgres::Config = self.db.url.parse().unwrap();
        let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
        let driver = tokio::spawn(conn);
        client.batch_execute(sql).await.unwrap();
        drop(client);
        let _ = driver.await;
    }
    fn days_ahead(&self, days: i64) -> String {
        format!("now() + interval '{days} days'")
    }
    fn expiry_column(&self) -> &'static str {
        "expires_at"
    }
}

async fn sqlite() -> SqliteFixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(AUTHORITY_DB_FILE);
    SqliteFixture { _dir: dir, path }
}

async fn postgres() -> PostgresFixture {
    let admin_url = testing::admin_url();
    let db = testing::create_database(&admin_url).await.unwrap();
    PostgresFixture { admin_url, db }
}

/// Two writers that read one version: exactly one write lands, the other is told
/// the version moved, and a write of an unknown document says so.
async fn concurrent_writes_of_one_version_one_wins(fx: &impl Fixture) {
    let (a, b) = (fx.open().await, fx.open().await);
    let id = a.create_rollout("{}".into(), "r".into(), T0).await.unwrap();
    let v = a.rollout(id).await.unwrap().unwrap().version;
    assert_eq!(v, 1);
    let (ra, rb) = tokio::join!(
        a.put_doc_if(Doc::Rollout, id, "\"a\"".into(), T0 + 1, v),
        b.put_doc_if(Doc::Rollout, id, "\"b\"".into(), T0 + 1, v),
    );
    let (won, lost) = match (ra, rb) {
        (Ok(n), Err(e)) => (("\"a\"", n), e),
        (Err(e), Ok(n)) => (("\"b\"", n), e),
        other => panic!("exactly one must win: {other:?}"),
    };
    assert_eq!(won.1, 2);
    assert!(
        matches!(
            lost,
            StoreError::StaleVersion {
                kind: "rollout",
                expected: 1,
                found: 2,
                ..
            }
        ),
        "{lost:?}"
    );
    let stored = a.rollout(id).await.unwrap().unwrap();
    assert_eq!((stored.doc.as_str(), stored.version), (won.0, 2));
    // The loser reads again and writes on the version it read.
    let n = b
        .put_doc_if(Doc::Rollout, id, "\"b2\"".into(), T0 + 2, stored.version)
        .await
        .unwrap();
    assert_eq!(n, 3);
    // An unconditional write moves the version too.
    a.put_rollout(id, "\"c\"".into(), T0 + 3).await.unwrap();
    assert_eq!(a.rollout(id).await.unwrap().unwrap().version, 4);
    let err = a
        .put_doc_if(Doc::Rollout, 99, "{}".into(), T0, 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownRollout(99)), "{err:?}");

    // Sessions and questions alike.
    let s = a.create_session("{}".into(), None, T0).await.unwrap().id;
    let q = a.create_question(s, "{}".into(), T0).await.unwrap();
    assert_eq!(a.session(s).await.unwrap().unwrap().version, 1);
    a.put_doc_if(Doc::Session, s, "{\"x\":1}".into(), T0 + 1, 1)
        .await
        .unwrap();
    let err = b
        .put_doc_if(Doc::Session, s, "{\"x\":2}".into(), T0 + 1, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::StaleVersion {
                kind: "session",
                ..
            }
        ),
        "{err:?}"
    );
    a.put_doc_if(Doc::Question, q, "\"answered\"".into(), T0 + 1, 1)
        .await
        .unwrap();
    let err = b
        .put_doc_if(Doc::Question, q, "\"answered too\"".into(), T0 + 1, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::StaleVersion {
                kind: "question",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(a.question(q).await.unwrap().unwrap().doc, "\"answered\"");
}

/// A lease is held by one holder, renewed by it, taken over once it expires, and
/// a row expiring further ahead than a lease can (a clock far in the future) is
/// not honoured.
async fn leases_are_held_once_and_taken_over_after_expiry(fx: &impl Fixture) {
    let (a, b) = (fx.open().await, fx.open().await);
    let lease = || "rollouts".to_string();
    assert!(a.take_lease(lease(), "a".into(), 60_000).await.unwrap());
    assert!(!b.take_lease(lease(), "b".into(), 60_000).await.unwrap());
    assert!(
        a.take_lease(lease(), "a".into(), 60_000).await.unwrap(),
        "renewed"
    );
    // Another lease is another row.
    assert!(b
        .take_lease("reconciler".into(), "b".into(), 60_000)
        .await
        .unwrap());
    // Renewed for a short time, then not renewed: b takes it over once it lapsed.
    assert!(a.take_lease(lease(), "a".into(), 300).await.unwrap());
    assert!(!b.take_lease(lease(), "b".into(), 300).await.unwrap());
    let took = flotilla_testkit::wait_until_async(Duration::from_secs(10), || async {
        b.take_lease(lease(), "b".into(), 60_000).await.unwrap()
    })
    .await;
    assert!(took, "b never took the lapsed lease over");
    assert!(!a.take_lease(lease(), "a".into(), 60_000).await.unwrap());
    // Given up: taken at once.
    b.drop_lease(lease(), "b".into()).await.unwrap();
    assert!(a.take_lease(lease(), "a".into(), 60_000).await.unwrap());
    // A row written under a clock ten years ahead is not honoured.
    fx.exec(&format!(
        "UPDATE leases SET holder = 'future', {} = {} WHERE name = 'rollouts'",
        fx.expiry_column(),
        fx.days_ahead(3650)
    ))
    .await;
    assert!(b.take_lease(lease(), "b".into(), 60_000).await.unwrap());
}

/// The first CA recorded is the only one accepted.
async fn the_first_ca_pin_is_kept_and_another_refused(fx: &impl Fixture) {
    let (a, b) = (fx.open().await, fx.open().await);
    a.claim_ca("sha256:aa".into()).await.unwrap();
    a.claim_ca("sha256:aa".into()).await.unwrap();
    b.claim_ca("sha256:aa".into()).await.unwrap();
    let err = b.claim_ca("sha256:bb".into()).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::CaMismatch { stored, ours } if stored == "sha256:aa" && ours == "sha256:bb"),
        "{err:?}"
    );
    assert!(err.to_string().contains("same CA"), "{err}");
}

/// The watermarks move with a selection, a call, a rollout's write and an update.
async fn watermarks_move_with_what_wakes_polls(fx: &impl Fixture) {
    let a = fx.open().await;
    let w0 = a.watermarks().await.unwrap();
    assert_eq!((w0.selection, w0.last_call), (0, 0));
    let id = a.create_rollout("{}".into(), "r".into(), T0).await.unwrap();
    let w1 = a.watermarks().await.unwrap();
    assert_ne!(w1.releases, w0.releases);
    a.put_rollout(id, "[]".into(), T0 + 1).await.unwrap();
    let w2 = a.watermarks().await.unwrap();
    assert_ne!(w2.releases, w1.releases);
    a.enqueue_call("h".into(), "{}".into(), T0).await.unwrap();
    assert_eq!(a.watermarks().await.unwrap().last_call, 1);
    a.put_host_update("h".into(), "{}".into(), T0)
        .await
        .unwrap();
    assert_ne!(a.watermarks().await.unwrap().updates, w2.updates);
}

macro_rules! both {
    ($($case:ident),* $(,)?) => {
        mod on_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&super::sqlite().await).await;
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&super::postgres().await).await;
                }
            )*
        }
    };
}

both!(
    concurrent_writes_of_one_version_one_wins,
    leases_are_held_once_and_taken_over_after_expiry,
    the_first_ca_pin_is_kept_and_another_refused,
    watermarks_move_with_what_wakes_polls,
);

/// A payload sent through one handle is heard by a listener on another (and by
/// one on the sender's own); an over-long payload is not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wake_ups_cross_connections() {
    let fx = postgres().await;
    let (a, b) = (fx.open().await, fx.open().await);
    let mut heard_b = b.listen().await.unwrap().expect("PostgreSQL listens");
    let mut heard_a = a.listen().await.unwrap().expect("PostgreSQL listens");
    assert!(a
        .notify("{\"kind\":\"selection\",\"index\":7}".into())
        .await
        .unwrap());
    for rx in [&mut heard_b, &mut heard_a] {
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("heard within 10 s");
        assert_eq!(
            got,
            Some(Heard::Payload(
                "{\"kind\":\"selection\",\"index\":7}".into()
            ))
        );
    }
    let long = "x".repeat(flotilla_store::authority::cluster::MAX_PAYLOAD_BYTES + 1);
    assert!(!a.notify(long).await.unwrap());
    assert!(b.notify("after".into()).await.unwrap());
    let got = tokio::time::timeout(Duration::from_secs(10), heard_b.recv())
        .await
        .unwrap();
    assert_eq!(
        got,
        Some(Heard::Payload("after".into())),
        "the long one was not sent"
    );
}

/// One authority per SQLite file: nothing is sent, nobody listens.
#[tokio::test]
async fn sqlite_wake_ups_stay_in_the_process() {
    let fx = sqlite().await;
    let s = fx.open().await;
    assert!(!s.shared());
    assert!(!s.notify("x".into()).await.unwrap());
    assert!(s.listen().await.unwrap().is_none());
}
