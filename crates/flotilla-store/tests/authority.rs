//! The authority store's test suite, run against both backends: every case in
//! `cases` is a generic async fn over a [`Fixture`], and `suite!` makes one test of
//! it per backend (`sqlite::<case>`, `postgres::<case>`).
//!
//! - SQLite: a fresh `authority.db` in a temporary directory per test.
//! - PostgreSQL: a fresh database `flt_test_<pid>_<random>` per test, made through the
//!   superuser URL in `FLOTILLA_TEST_POSTGRES_URL` and dropped at the end (so tests
//!   run in parallel). When the variable is unset these tests FAIL: start the
//!   server with `eval "$(scripts/postgres)"` (scripts/test does).

use flotilla_store::authority::testing;
use flotilla_store::authority::{
    credential_id, ByPrefix, CredentialRecord, JoinTokenRecord, LAST_USED_GRANULARITY_MS,
};
use flotilla_store::authority::{
    AnyAuthority, AuthorityStore, BlobRef, BlobRefs, HostReportRecord, HostUpdateRecord,
    NewJoinToken, NewRelease, NewRevision, PostgresAuthority, Principal, QuestionRecord,
    QueuedCall, Redeem, ReleasePut, ReleaseRecord, RevisionRecord, RevisionSummary, RolloutRecord,
    SelectOutcome, Selection, SessionCreated, SessionDeleted, SessionRecord, SqliteAuthority,
    UnskipRecord, AUTHORITY_DB_FILE, AUTHORITY_SCHEMA_VERSION, BLOB_CHUNK_BYTES,
};
use flotilla_store::authority::{NewUiLink, UiLinkRedeem, UiRole};
use flotilla_store::StoreError;
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Barrier;

const T0: i64 = 1_700_000_000_000;

/// One backend's database for one test.
trait Fixture: Send + Sync {
    type Store: AuthorityStore + Clone;
    /// A new handle on the test's database, with its own connection(s), as
    /// another authority process would have.
    fn open(&self) -> impl Future<Output = Self::Store> + Send;
    /// How a child process opens the same database (see `kill_9_loses_nothing`).
    fn spec(&self) -> String;
}

struct SqliteFixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl SqliteFixture {
    async fn new() -> SqliteFixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AUTHORITY_DB_FILE);
        SqliteFixture { _dir: dir, path }
    }
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
    fn spec(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }
}

/// A fresh database per test (`flotilla_store::authority::testing`), dropped at
/// the end.
struct PostgresFixture {
    admin_url: String,
    db: testing::TestDatabase,
}

impl PostgresFixture {
    async fn new() -> PostgresFixture {
        // Panics, naming scripts/postgres, when FLOTILLA_TEST_POSTGRES_URL is unset.
        let admin_url = testing::admin_url();
        let db = testing::create_database(&admin_url)
            .await
            .unwrap_or_else(|e| {
                panic!("cannot make a test database (is scripts/postgres running?): {e}")
            });
        PostgresFixture { admin_url, db }
    }
}

impl Drop for PostgresFixture {
    fn drop(&mut self) {
        // Drop's caller may be inside the test's runtime: drop the database from
        // a thread of its own.
        let admin_url = self.admin_url.clone();
        let name = self.db.name.clone();
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(testing::drop_database(&admin_url, &name))
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!(
                "warning: could not drop the test database {}: {e}",
                self.db.name
            );
        }
    }
}

impl Fixture for PostgresFixture {
    type Store = PostgresAuthority;
    async fn open(&self) -> PostgresAuthority {
        PostgresAuthority::connect(&self.db.url).await.unwrap()
    }
    fn spec(&self) -> String {
        format!("postgres:{}", self.db.url)
    }
}

/// Opens the database named by a [`Fixture::spec`].
async fn open_spec(spec: &str) -> AnyAuthority {
    if let Some(path) = spec.strip_prefix("sqlite:") {
        let path = PathBuf::from(path);
        tokio::task::spawn_blocking(move || SqliteAuthority::open(&path))
            .await
            .unwrap()
            .unwrap()
            .into()
    } else if let Some(url) = spec.strip_prefix("postgres:") {
        PostgresAuthority::connect(url).await.unwrap().into()
    } else {
        panic!("unknown spec {spec}")
    }
}

/// A revision whose content is `name`'s (the digest is a stand-in: the store does
/// not compute it).
fn rev(name: &str, created_ms: i64, by: &str) -> NewRevision {
    NewRevision {
        digest: digest(name),
        content: content(name),
        created_ms,
        published_by: by.into(),
    }
}

fn digest(name: &str) -> String {
    format!("sha256:{name}")
}

fn content(name: &str) -> String {
    format!(r#"{{"name":"{name}","hosts":{{}},"components":{{}}}}"#)
}

fn selected(outcome: SelectOutcome) -> Selection {
    match outcome {
        SelectOutcome::Selected(s) => s,
        other => panic!("expected Selected, got {other:?}"),
    }
}

fn token(hash: &str, host: &str, expires_ms: i64) -> NewJoinToken {
    NewJoinToken {
        token_hash: hash.into(),
        host: host.into(),
        created_ms: T0,
        expires_ms,
        keep_credentials: false,
    }
}

fn report(host: &str, revision: Option<&str>, body: &str, received_ms: i64) -> HostReportRecord {
    HostReportRecord {
        host: host.into(),
        revision: revision.map(digest),
        report: body.into(),
        received_ms,
    }
}

/// A stand-in blob digest (64 hex; the store does not hash).
fn blob_name(n: u64) -> String {
    format!("{n:064x}")
}

/// A release whose manifest and signature are derived from `name`, `version` and
/// `body` (bytes that are not UTF-8 included: the store keeps bytes).
fn release(name: &str, version: &str, serial: u64, body: &str) -> NewRelease {
    let mut manifest = format!(
        "{{\"name\":\"{name}\",\"version\":\"{version}\",\"serial\":{serial},\"body\":\"{body}\"}}\r\n"
    )
    .into_bytes();
    manifest.extend_from_slice(&[0, 0xff, 0xfe]);
    NewRelease {
        name: name.into(),
        version: version.into(),
        serial,
        manifest,
        signature: format!("untrusted comment: signature\nRWQ{name}{version}{body}\n"),
        published_by: "ada".into(),
        created_ms: T0 + serial.min(1_000) as i64,
    }
}

fn record(r: &NewRelease) -> ReleaseRecord {
    ReleaseRecord {
        name: r.name.clone(),
        version: r.version.clone(),
        serial: r.serial,
        manifest: r.manifest.clone(),
        signature: r.signature.clone(),
        published_by: r.published_by.clone(),
        created_ms: r.created_ms,
    }
}

fn host_update(host: &str, doc: &str, received_ms: i64) -> HostUpdateRecord {
    HostUpdateRecord {
        host: host.into(),
        doc: doc.into(),
        received_ms,
    }
}

mod cases {
    use super::*;

    pub async fn publish_new_then_same_content_is_unchanged(fx: &impl Fixture) {
        let s = fx.open().await;
        assert_eq!(s.selection().await.unwrap(), None);
        assert!(s.selections().await.unwrap().is_empty());
        assert!(s.revisions().await.unwrap().is_empty());

        let first = selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
        assert_eq!(
            first,
            Selection {
                index: 1,
                digest: digest("a"),
                selected_ms: T0,
                selected_by: "ada".into()
            }
        );
        // Same content again, later and by someone else, even with a stale expect:
        // nothing changes.
        for expect in [None, Some(digest("a")), Some(digest("stale"))] {
            let again = s.publish(rev("a", T0 + 10, "bob"), expect).await.unwrap();
            assert_eq!(again, SelectOutcome::Unchanged(first.clone()));
        }
        assert_eq!(s.selections().await.unwrap(), vec![first.clone()]);
        assert_eq!(s.selection().await.unwrap(), Some(first));
        assert_eq!(
            s.revisions().await.unwrap(),
            vec![RevisionSummary {
                digest: digest("a"),
                created_ms: T0,
                published_by: "ada".into()
            }]
        );
        assert_eq!(
            s.revision(digest("a")).await.unwrap(),
            Some(RevisionRecord {
                digest: digest("a"),
                content: content("a"),
                created_ms: T0,
                published_by: "ada".into()
            })
        );
    }

    pub async fn publish_conflict_names_current_and_writes_nothing(fx: &impl Fixture) {
        let s = fx.open().await;
        // Nothing selected yet: any expect is stale.
        assert_eq!(
            s.publish(rev("a", T0, "ada"), Some(digest("x")))
                .await
                .unwrap(),
            SelectOutcome::Conflict { current: None }
        );
        assert!(s.revisions().await.unwrap().is_empty());
        assert!(s.selections().await.unwrap().is_empty());

        let a = selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
        assert_eq!(
            s.publish(rev("b", T0 + 1, "ada"), Some(digest("x")))
                .await
                .unwrap(),
            SelectOutcome::Conflict {
                current: Some(digest("a"))
            }
        );
        assert_eq!(s.revision(digest("b")).await.unwrap(), None);
        assert_eq!(s.revisions().await.unwrap().len(), 1);
        assert_eq!(s.selections().await.unwrap(), vec![a.clone()]);

        let b = selected(
            s.publish(rev("b", T0 + 2, "ada"), Some(digest("a")))
                .await
                .unwrap(),
        );
        assert_eq!((b.index, b.digest.as_str()), (2, digest("b").as_str()));
        assert_eq!(s.selections().await.unwrap(), vec![b, a]);
    }

    pub async fn publish_of_other_content_under_a_known_digest_is_refused(fx: &impl Fixture) {
        let s = fx.open().await;
        selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
        selected(s.publish(rev("b", T0 + 1, "ada"), None).await.unwrap());
        let mut forged = rev("a", T0 + 2, "eve");
        forged.content = content("evil");
        let err = s.publish(forged, None).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::RevisionContentMismatch { digest: d } if *d == digest("a")),
            "{err:?}"
        );
        assert_eq!(
            s.revision(digest("a")).await.unwrap().unwrap().content,
            content("a")
        );
        assert_eq!(s.selection().await.unwrap().unwrap().digest, digest("b"));
        assert_eq!(s.selections().await.unwrap().len(), 2);
    }

    pub async fn select_unknown_revision_is_an_error(fx: &impl Fixture) {
        let s = fx.open().await;
        let err = s
            .select(digest("nope"), None, T0, "ada".into())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::UnknownRevision(d) if *d == digest("nope")),
            "{err:?}"
        );
        assert!(err.to_string().contains("sha256:nope"), "{err}");
        selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
        let err = s
            .select(digest("nope"), Some(digest("a")), T0, "ada".into())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::UnknownRevision(_)), "{err:?}");
        assert_eq!(s.selections().await.unwrap().len(), 1);
    }

    pub async fn select_older_revision_gets_a_new_index(fx: &impl Fixture) {
        let s = fx.open().await;
        let a = selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
        let b = selected(s.publish(rev("b", T0 + 1, "ada"), None).await.unwrap());
        // Roll back to a.
        let back = selected(
            s.select(digest("a"), Some(digest("b")), T0 + 5, "bob".into())
                .await
                .unwrap(),
        );
        assert_eq!(
            back,
            Selection {
                index: 3,
                digest: digest("a"),
                selected_ms: T0 + 5,
                selected_by: "bob".into()
            }
        );
        assert_eq!(s.selection().await.unwrap(), Some(back.clone()));
        assert_eq!(
            s.selections().await.unwrap(),
            vec![back.clone(), b.clone(), a]
        );
        // Again: unchanged. With a stale expect: a conflict naming a.
        assert_eq!(
            s.select(digest("a"), None, T0 + 6, "bob".into())
                .await
                .unwrap(),
            SelectOutcome::Unchanged(back.clone())
        );
        assert_eq!(
            s.select(digest("b"), Some(digest("b")), T0 + 7, "bob".into())
                .await
                .unwrap(),
            SelectOutcome::Conflict {
                current: Some(digest("a"))
            }
        );
        // Publishing a stored revision that is not current selects it again; the
        // revision keeps its first publication.
        let b2 = selected(s.publish(rev("b", T0 + 8, "cy"), None).await.unwrap());
        assert_eq!(
            (b2.index, b2.selected_ms, b2.selected_by.as_str()),
            (4, T0 + 8, "cy")
        );
        let stored = s.revision(digest("b")).await.unwrap().unwrap();
        assert_eq!(
            (stored.created_ms, stored.published_by.as_str()),
            (T0 + 1, "ada")
        );
        assert_eq!(s.revisions().await.unwrap().len(), 2);
    }

    pub async fn concurrent_selects_with_the_same_expect_one_wins(fx: &impl Fixture) {
        const RACERS: usize = 8;
        let s = fx.open().await;
        for i in 0..RACERS {
            selected(
                s.publish(rev(&format!("r{i}"), T0 + i as i64, "ada"), None)
                    .await
                    .unwrap(),
            );
        }
        let base = selected(s.publish(rev("base", T0 + 100, "ada"), None).await.unwrap());
        // Two handles (as two authority processes sharing the database); the
        // racers start together.
        let handles = [s.clone(), fx.open().await];
        let barrier = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let outcome = store
                        .select(
                            digest(&format!("r{i}")),
                            Some(digest("base")),
                            T0 + 200,
                            format!("racer{i}"),
                        )
                        .await
                        .unwrap();
                    (i, outcome)
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut conflicts = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (i, SelectOutcome::Selected(sel)) => winners.push((i, sel)),
                (_, SelectOutcome::Conflict { current }) => conflicts.push(current),
                (i, other) => panic!("racer {i}: unexpected {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one select wins: {winners:?}");
        let (i, win) = winners.pop().unwrap();
        assert_eq!(
            (win.index, win.digest.clone()),
            (base.index + 1, digest(&format!("r{i}")))
        );
        assert!(
            conflicts.iter().all(|c| *c == Some(win.digest.clone())),
            "every loser is told the winner: {conflicts:?}"
        );
        assert_eq!(s.selection().await.unwrap(), Some(win.clone()));
        assert_eq!(s.selections().await.unwrap().len() as u64, win.index);

        // The same with publishes of new content: one wins, the losers' revisions
        // are not stored.
        let barrier = Arc::new(Barrier::new(RACERS));
        let expect = win.digest.clone();
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                let expect = expect.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    let outcome = store
                        .publish(rev(&format!("p{i}"), T0 + 300, "ada"), Some(expect))
                        .await
                        .unwrap();
                    (i, outcome)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (i, SelectOutcome::Selected(_)) => winners.push(i),
                (_, SelectOutcome::Conflict { current }) => assert!(current.is_some()),
                (i, other) => panic!("publisher {i}: unexpected {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one publish wins: {winners:?}");
        let stored: BTreeSet<String> = s
            .revisions()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.digest)
            .filter(|d| d.starts_with("sha256:p"))
            .collect();
        assert_eq!(
            stored,
            BTreeSet::from([digest(&format!("p{}", winners[0]))])
        );
    }

    pub async fn join_token_redeems_once_then_used(fx: &impl Fixture) {
        let s = fx.open().await;
        s.create_join_token(token("sha256:tok1", "studio", T0 + 3_600_000))
            .await
            .unwrap();
        assert_eq!(
            s.redeem_join_token("sha256:tok1".into(), "sha256:cred1".into(), T0 + 1)
                .await
                .unwrap(),
            Redeem::Joined {
                host: "studio".into(),
                revoked: 0
            }
        );
        assert_eq!(
            s.principal("sha256:cred1".into()).await.unwrap(),
            Some(Principal::Agent {
                host: "studio".into()
            })
        );
        assert_eq!(
            s.redeem_join_token("sha256:tok1".into(), "sha256:cred2".into(), T0 + 2)
                .await
                .unwrap(),
            Redeem::Used
        );
        assert_eq!(s.principal("sha256:cred2".into()).await.unwrap(), None);
        // Used wins over expired.
        assert_eq!(
            s.redeem_join_token("sha256:tok1".into(), "sha256:cred3".into(), T0 + 7_200_000)
                .await
                .unwrap(),
            Redeem::Used
        );

        // Two redeems of one token at once (two handles): exactly one joins.
        s.create_join_token(token("sha256:tok2", "laptop", T0 + 3_600_000))
            .await
            .unwrap();
        let handles = [s.clone(), fx.open().await];
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = (0..2)
            .map(|i| {
                let store = handles[i].clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let r = store
                        .redeem_join_token("sha256:tok2".into(), format!("sha256:race{i}"), T0 + 5)
                        .await
                        .unwrap();
                    (i, r)
                })
            })
            .collect();
        let mut joined = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (i, Redeem::Joined { host, .. }) => {
                    assert_eq!(host, "laptop");
                    joined.push(i)
                }
                (_, Redeem::Used) => {}
                (i, other) => panic!("redeemer {i}: unexpected {other:?}"),
            }
        }
        assert_eq!(joined.len(), 1, "exactly one redeem joins: {joined:?}");
        for i in 0..2 {
            let p = s.principal(format!("sha256:race{i}")).await.unwrap();
            assert_eq!(p.is_some(), joined == [i], "race{i}: {p:?}");
        }
    }

    pub async fn join_token_expired_and_unknown_are_refused(fx: &impl Fixture) {
        let s = fx.open().await;
        s.create_join_token(token("sha256:short", "studio", T0 + 10))
            .await
            .unwrap();
        assert_eq!(
            s.redeem_join_token("sha256:nope".into(), "sha256:c0".into(), T0)
                .await
                .unwrap(),
            Redeem::Unknown
        );
        // Expired at exactly expires_ms, and stays so.
        for now in [T0 + 10, T0 + 11] {
            assert_eq!(
                s.redeem_join_token("sha256:short".into(), "sha256:c1".into(), now)
                    .await
                    .unwrap(),
                Redeem::Expired
            );
        }
        assert_eq!(s.principal("sha256:c0".into()).await.unwrap(), None);
        assert_eq!(s.principal("sha256:c1".into()).await.unwrap(), None);
        // A millisecond before: still good.
        s.create_join_token(token("sha256:edge", "studio", T0 + 10))
            .await
            .unwrap();
        assert_eq!(
            s.redeem_join_token("sha256:edge".into(), "sha256:c2".into(), T0 + 9)
                .await
                .unwrap(),
            Redeem::Joined {
                host: "studio".into(),
                revoked: 0
            }
        );
    }

    pub async fn duplicate_hashes_are_refused(fx: &impl Fixture) {
        let s = fx.open().await;
        s.create_join_token(token("sha256:tok", "studio", T0 + 1000))
            .await
            .unwrap();
        let err = s
            .create_join_token(token("sha256:tok", "laptop", T0 + 1000))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        let op = Principal::Operator { name: "ada".into() };
        s.create_credential("sha256:op".into(), op.clone(), T0)
            .await
            .unwrap();
        let err = s
            .create_credential(
                "sha256:op".into(),
                Principal::Operator { name: "eve".into() },
                T0,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        assert_eq!(s.principal("sha256:op".into()).await.unwrap(), Some(op));
        // Redeeming for a credential hash already taken fails and leaves the token
        // unused.
        let err = s
            .redeem_join_token("sha256:tok".into(), "sha256:op".into(), T0 + 1)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
        assert_eq!(
            s.redeem_join_token("sha256:tok".into(), "sha256:fresh".into(), T0 + 2)
                .await
                .unwrap(),
            Redeem::Joined {
                host: "studio".into(),
                revoked: 0
            }
        );
    }

    pub async fn credentials_are_listed_touched_and_revoked(fx: &impl Fixture) {
        let s = fx.open().await;
        let other = fx.open().await;
        let op = Principal::Operator { name: "ada".into() };
        let metrics = Principal::Metrics {
            name: "prometheus".into(),
        };
        s.create_credential("sha256:aa11".into(), op.clone(), T0)
            .await
            .unwrap();
        s.create_credential("sha256:aa22".into(), metrics.clone(), T0 + 1)
            .await
            .unwrap();
        assert_eq!(credential_id("sha256:aa11"), "aa11");
        // First use: recorded; again within the granularity: not rewritten.
        assert!(s
            .touch_credential("sha256:aa11".into(), T0 + 10, Some("127.0.0.1:5000".into()))
            .await
            .unwrap());
        assert!(!s
            .touch_credential(
                "sha256:aa11".into(),
                T0 + 10 + LAST_USED_GRANULARITY_MS - 1,
                Some("127.0.0.2:6000".into())
            )
            .await
            .unwrap());
        assert!(!s
            .touch_credential("sha256:none".into(), T0, None)
            .await
            .unwrap());
        let listed = other.credentials().await.unwrap();
        assert_eq!(
            listed,
            vec![
                CredentialRecord {
                    credential_hash: "sha256:aa11".into(),
                    principal: op.clone(),
                    created_ms: T0,
                    last_used_ms: Some(T0 + 10),
                    last_address: Some("127.0.0.1:5000".into()),
                    revoked_ms: None,
                },
                CredentialRecord {
                    credential_hash: "sha256:aa22".into(),
                    principal: metrics.clone(),
                    created_ms: T0 + 1,
                    last_used_ms: None,
                    last_address: None,
                    revoked_ms: None,
                },
            ]
        );
        // Older than the granularity: rewritten, with the new address.
        assert!(s
            .touch_credential(
                "sha256:aa11".into(),
                T0 + 10 + LAST_USED_GRANULARITY_MS,
                Some("127.0.0.2:6000".into())
            )
            .await
            .unwrap());
        let c = s.credential("sha256:aa11".into()).await.unwrap().unwrap();
        assert_eq!(c.last_used_ms, Some(T0 + 10 + LAST_USED_GRANULARITY_MS));
        assert_eq!(c.last_address.as_deref(), Some("127.0.0.2:6000"));

        // Prefixes: ambiguous, unknown, not hex; nothing written.
        assert_eq!(
            s.revoke_credential("aa".into(), T0 + 100).await.unwrap(),
            ByPrefix::Ambiguous(vec!["sha256:aa11".into(), "sha256:aa22".into()])
        );
        assert_eq!(
            s.revoke_credential("ff".into(), T0 + 100).await.unwrap(),
            ByPrefix::Unknown
        );
        assert_eq!(
            s.revoke_credential("a%".into(), T0 + 100).await.unwrap(),
            ByPrefix::Unknown
        );
        assert_eq!(s.principal("sha256:aa11".into()).await.unwrap(), Some(op));
        // A unique prefix revokes; another handle (another authority) sees it.
        let ByPrefix::One(revoked) = s.revoke_credential("AA2".into(), T0 + 100).await.unwrap()
        else {
            panic!("one credential expected")
        };
        assert_eq!(revoked.revoked_ms, Some(T0 + 100));
        assert_eq!(other.principal("sha256:aa22".into()).await.unwrap(), None);
        assert_eq!(
            other
                .credential("sha256:aa22".into())
                .await
                .unwrap()
                .unwrap()
                .revoked_ms,
            Some(T0 + 100)
        );
        // Revoking again keeps the first time; a revoked credential's use is not
        // recorded.
        let ByPrefix::One(again) = s.revoke_credential("aa22".into(), T0 + 200).await.unwrap()
        else {
            panic!("one credential expected")
        };
        assert_eq!(again.revoked_ms, Some(T0 + 100));
        assert!(!s
            .touch_credential("sha256:aa22".into(), T0 + 300, None)
            .await
            .unwrap());
    }

    pub async fn rejoining_revokes_the_hosts_older_credentials(fx: &impl Fixture) {
        let s = fx.open().await;
        let agent = Principal::Agent {
            host: "studio".into(),
        };
        s.create_join_token(token("sha256:t1", "studio", T0 + 3_600_000))
            .await
            .unwrap();
        s.create_join_token(token("sha256:t2", "studio", T0 + 3_600_000))
            .await
            .unwrap();
        s.create_join_token(NewJoinToken {
            keep_credentials: true,
            ..token("sha256:t3", "studio", T0 + 3_600_000)
        })
        .await
        .unwrap();
        s.create_join_token(token("sha256:t4", "laptop", T0 + 3_600_000))
            .await
            .unwrap();
        for (tok, cred, at) in [("t1", "c1", 1), ("t4", "c4", 2)] {
            s.redeem_join_token(format!("sha256:{tok}"), format!("sha256:{cred}"), T0 + at)
                .await
                .unwrap();
        }
        // Joining studio again revokes c1 (not laptop's c4).
        assert_eq!(
            s.redeem_join_token("sha256:t2".into(), "sha256:c2".into(), T0 + 10)
                .await
                .unwrap(),
            Redeem::Joined {
                host: "studio".into(),
                revoked: 1
            }
        );
        assert_eq!(s.principal("sha256:c1".into()).await.unwrap(), None);
        assert_eq!(
            s.credential("sha256:c1".into())
                .await
                .unwrap()
                .unwrap()
                .revoked_ms,
            Some(T0 + 10)
        );
        assert_eq!(
            s.principal("sha256:c2".into()).await.unwrap(),
            Some(agent.clone())
        );
        assert!(s.principal("sha256:c4".into()).await.unwrap().is_some());
        // A token made to keep them leaves c2 valid.
        assert_eq!(
            s.redeem_join_token("sha256:t3".into(), "sha256:c3".into(), T0 + 20)
                .await
                .unwrap(),
            Redeem::Joined {
                host: "studio".into(),
                revoked: 0
            }
        );
        assert_eq!(
            s.principal("sha256:c2".into()).await.unwrap(),
            Some(agent.clone())
        );
        // Revoking by host: every agent credential of studio, only them.
        let gone = s
            .revoke_host_credentials("studio".into(), T0 + 30)
            .await
            .unwrap();
        assert_eq!(
            gone.iter()
                .map(|c| c.credential_hash.as_str())
                .collect::<Vec<_>>(),
            ["sha256:c2", "sha256:c3"]
        );
        assert!(s
            .revoke_host_credentials("studio".into(), T0 + 40)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(s.principal("sha256:c3".into()).await.unwrap(), None);
        assert!(s.principal("sha256:c4".into()).await.unwrap().is_some());
    }

    pub async fn join_tokens_are_listed_and_revoked(fx: &impl Fixture) {
        let s = fx.open().await;
        s.create_join_token(token("sha256:ab01", "studio", T0 + 1000))
            .await
            .unwrap();
        s.create_join_token(NewJoinToken {
            created_ms: T0 + 1,
            keep_credentials: true,
            ..token("sha256:ab02", "laptop", T0 + 1000)
        })
        .await
        .unwrap();
        s.redeem_join_token("sha256:ab02".into(), "sha256:c".into(), T0 + 5)
            .await
            .unwrap();
        assert_eq!(
            s.join_tokens().await.unwrap(),
            vec![
                JoinTokenRecord {
                    token_hash: "sha256:ab02".into(),
                    host: "laptop".into(),
                    created_ms: T0 + 1,
                    expires_ms: T0 + 1000,
                    used_ms: Some(T0 + 5),
                    revoked_ms: None,
                    keep_credentials: true,
                },
                JoinTokenRecord {
                    token_hash: "sha256:ab01".into(),
                    host: "studio".into(),
                    created_ms: T0,
                    expires_ms: T0 + 1000,
                    used_ms: None,
                    revoked_ms: None,
                    keep_credentials: false,
                },
            ]
        );
        assert!(matches!(
            s.revoke_join_token("ab0".into(), T0 + 6).await.unwrap(),
            ByPrefix::Ambiguous(h) if h.len() == 2
        ));
        assert_eq!(
            s.revoke_join_token("cd".into(), T0 + 6).await.unwrap(),
            ByPrefix::Unknown
        );
        let ByPrefix::One(t) = s.revoke_join_token("ab01".into(), T0 + 6).await.unwrap() else {
            panic!("one token expected")
        };
        assert_eq!(t.revoked_ms, Some(T0 + 6));
        // A revoked token cannot be redeemed (revoked wins over expired).
        for now in [T0 + 7, T0 + 2000] {
            assert_eq!(
                s.redeem_join_token("sha256:ab01".into(), "sha256:c9".into(), now)
                    .await
                    .unwrap(),
                Redeem::Revoked
            );
        }
        assert_eq!(s.principal("sha256:c9".into()).await.unwrap(), None);
    }

    pub async fn ui_links_sign_in_once_and_revoke(fx: &impl Fixture) {
        let s = fx.open().await;
        let link = |hash: &str, role, expires_ms| NewUiLink {
            credential_hash: hash.into(),
            role,
            created_by: "ada".into(),
            created_ms: T0,
            expires_ms,
        };
        let a = s
            .create_ui_link(link("sha256:ui-a", UiRole::Operator, T0 + 1000))
            .await
            .unwrap();
        let b = s
            .create_ui_link(link("sha256:ui-b", UiRole::Viewer, T0 + 1000))
            .await
            .unwrap();
        assert!(b > a);
        assert!(matches!(
            s.create_ui_link(link("sha256:ui-a", UiRole::Viewer, T0))
                .await,
            Err(StoreError::AlreadyExists { .. })
        ));
        // A plain credential cannot be a sign-in link.
        assert!(matches!(
            s.create_credential(
                "sha256:x".into(),
                Principal::UiLink {
                    id: a,
                    role: UiRole::Viewer
                },
                T0
            )
            .await,
            Err(StoreError::UiLinkNotACredential)
        ));
        assert_eq!(
            s.principal("sha256:ui-b".into()).await.unwrap(),
            Some(Principal::UiLink {
                id: b,
                role: UiRole::Viewer
            })
        );
        // Once, then used; expired; unknown.
        assert_eq!(
            s.redeem_ui_link("sha256:ui-a".into(), T0 + 10)
                .await
                .unwrap(),
            UiLinkRedeem::SignedIn {
                id: a,
                role: UiRole::Operator
            }
        );
        assert_eq!(
            s.redeem_ui_link("sha256:ui-a".into(), T0 + 20)
                .await
                .unwrap(),
            UiLinkRedeem::Used
        );
        assert_eq!(
            s.redeem_ui_link("sha256:ui-b".into(), T0 + 1000)
                .await
                .unwrap(),
            UiLinkRedeem::Expired
        );
        assert_eq!(
            s.redeem_ui_link("sha256:none".into(), T0).await.unwrap(),
            UiLinkRedeem::Unknown
        );
        // Revoked: its principal is gone, a redeem says so, a second revoke is false.
        assert!(s.revoke_ui_link(a, T0 + 30).await.unwrap());
        assert!(!s.revoke_ui_link(a, T0 + 40).await.unwrap());
        assert!(!s.revoke_ui_link(999, T0).await.unwrap());
        assert_eq!(s.principal("sha256:ui-a".into()).await.unwrap(), None);
        assert_eq!(
            s.redeem_ui_link("sha256:ui-a".into(), T0 + 50)
                .await
                .unwrap(),
            UiLinkRedeem::Revoked
        );
        let all = s.ui_links().await.unwrap();
        assert_eq!(all.iter().map(|l| l.id).collect::<Vec<_>>(), vec![b, a]);
        assert_eq!(
            (
                all[1].used_ms,
                all[1].revoked_ms,
                all[1].role,
                all[1].created_by.as_str()
            ),
            (Some(T0 + 10), Some(T0 + 30), UiRole::Operator, "ada")
        );
        assert_eq!((all[0].used_ms, all[0].revoked_ms), (None, None));
    }

    pub async fn principal_lookup(fx: &impl Fixture) {
        let s = fx.open().await;
        assert_eq!(s.principal("sha256:none".into()).await.unwrap(), None);
        s.create_credential(
            "sha256:op".into(),
            Principal::Operator { name: "ada".into() },
            T0,
        )
        .await
        .unwrap();
        s.create_credential(
            "sha256:ag".into(),
            Principal::Agent {
                host: "studio".into(),
            },
            T0,
        )
        .await
        .unwrap();
        assert_eq!(
            s.principal("sha256:op".into()).await.unwrap(),
            Some(Principal::Operator { name: "ada".into() })
        );
        assert_eq!(
            s.principal("sha256:ag".into()).await.unwrap(),
            Some(Principal::Agent {
                host: "studio".into()
            })
        );
        assert_eq!(s.principal("sha256:OP".into()).await.unwrap(), None);
        for p in [
            Principal::Session { id: 7 },
            Principal::Alerts {
                name: "alertmanager".into(),
            },
        ] {
            let hash = format!("sha256:{p:?}");
            s.create_credential(hash.clone(), p.clone(), T0)
                .await
                .unwrap();
            assert_eq!(s.principal(hash).await.unwrap(), Some(p));
        }
    }

    pub async fn reports_replace_the_hosts_last(fx: &impl Fixture) {
        let s = fx.open().await;
        assert!(s.reports().await.unwrap().is_empty());
        s.put_report(report("studio", None, r#"{"n":1}"#, T0))
            .await
            .unwrap();
        s.put_report(report("laptop", Some("a"), r#"{"n":2}"#, T0 + 1))
            .await
            .unwrap();
        s.put_report(report("studio", Some("b"), r#"{"n":3}"#, T0 + 2))
            .await
            .unwrap();
        assert_eq!(
            s.reports().await.unwrap(),
            vec![
                report("laptop", Some("a"), r#"{"n":2}"#, T0 + 1),
                report("studio", Some("b"), r#"{"n":3}"#, T0 + 2),
            ]
        );
        // Back to no revision.
        s.put_report(report("studio", None, r#"{"n":4}"#, T0 + 3))
            .await
            .unwrap();
        assert_eq!(s.reports().await.unwrap()[1].revision, None);
    }

    pub async fn reports_stored_together_keep_the_last_of_each_host(fx: &impl Fixture) {
        let s = fx.open().await;
        s.put_report(report("laptop", None, r#"{"n":0}"#, T0))
            .await
            .unwrap();
        s.put_reports(vec![
            report("studio", None, r#"{"n":1}"#, T0 + 1),
            report("laptop", Some("a"), r#"{"n":2}"#, T0 + 2),
            report("studio", Some("b"), r#"{"n":3}"#, T0 + 3),
        ])
        .await
        .unwrap();
        assert_eq!(
            s.reports().await.unwrap(),
            vec![
                report("laptop", Some("a"), r#"{"n":2}"#, T0 + 2),
                report("studio", Some("b"), r#"{"n":3}"#, T0 + 3),
            ]
        );
        s.put_reports(Vec::new()).await.unwrap();
        assert_eq!(s.reports().await.unwrap().len(), 2);
    }

    pub async fn revisions_newest_first(fx: &impl Fixture) {
        let s = fx.open().await;
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            selected(
                s.publish(rev(name, T0 + i as i64, "ada"), None)
                    .await
                    .unwrap(),
            );
        }
        // A rollback selects, it does not store: the order stays.
        selected(
            s.select(digest("a"), None, T0 + 9, "ada".into())
                .await
                .unwrap(),
        );
        let order: Vec<String> = s
            .revisions()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.digest)
            .collect();
        assert_eq!(order, vec![digest("c"), digest("b"), digest("a")]);
        assert_eq!(
            s.revision(digest("b")).await.unwrap().unwrap().content,
            content("b")
        );
        assert_eq!(s.revision(digest("zzz")).await.unwrap(), None);
        let indexes: Vec<u64> = s
            .selections()
            .await
            .unwrap()
            .iter()
            .map(|s| s.index)
            .collect();
        assert_eq!(indexes, vec![4, 3, 2, 1]);
    }

    pub async fn data_survives_reopen(fx: &impl Fixture) {
        {
            let s = fx.open().await;
            selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
            selected(s.publish(rev("b", T0 + 1, "ada"), None).await.unwrap());
            s.create_join_token(token("sha256:t1", "studio", T0 + 1000))
                .await
                .unwrap();
            s.create_join_token(token("sha256:t2", "laptop", T0 + 1000))
                .await
                .unwrap();
            s.redeem_join_token("sha256:t1".into(), "sha256:c1".into(), T0 + 2)
                .await
                .unwrap();
            s.create_credential(
                "sha256:op".into(),
                Principal::Operator { name: "ada".into() },
                T0,
            )
            .await
            .unwrap();
            s.put_report(report("studio", Some("b"), "{}", T0 + 3))
                .await
                .unwrap();
        }
        let s = fx.open().await;
        s.ping().await.unwrap();
        assert_eq!(s.selection().await.unwrap().unwrap().digest, digest("b"));
        assert_eq!(s.selections().await.unwrap().len(), 2);
        assert_eq!(s.revisions().await.unwrap().len(), 2);
        assert_eq!(
            s.revision(digest("a")).await.unwrap().unwrap().content,
            content("a")
        );
        assert_eq!(
            s.principal("sha256:c1".into()).await.unwrap(),
            Some(Principal::Agent {
                host: "studio".into()
            })
        );
        assert_eq!(
            s.principal("sha256:op".into()).await.unwrap(),
            Some(Principal::Operator { name: "ada".into() })
        );
        assert_eq!(
            s.redeem_join_token("sha256:t1".into(), "sha256:c9".into(), T0 + 4)
                .await
                .unwrap(),
            Redeem::Used
        );
        assert_eq!(
            s.redeem_join_token("sha256:t2".into(), "sha256:c2".into(), T0 + 4)
                .await
                .unwrap(),
            Redeem::Joined {
                host: "laptop".into(),
                revoked: 0
            }
        );
        assert_eq!(
            s.reports().await.unwrap(),
            vec![report("studio", Some("b"), "{}", T0 + 3)]
        );
        // The next publish continues the index.
        let c = selected(s.publish(rev("c", T0 + 5, "ada"), None).await.unwrap());
        assert_eq!(c.index, 3);
    }

    pub async fn agent_calls_queue_per_host_and_answer_once(fx: &impl Fixture) {
        let s = fx.open().await;
        assert_eq!(s.last_call_id().await.unwrap(), 0);
        assert_eq!(
            s.pending_calls("studio".into(), 0, 10).await.unwrap(),
            vec![]
        );
        assert_eq!(s.call(1).await.unwrap(), None);

        // Ids increase across hosts: 1, 2, 3…
        let mut ids = Vec::new();
        for (i, host) in ["studio", "laptop", "studio", "studio", "laptop", "studio"]
            .into_iter()
            .enumerate()
        {
            let id = s
                .enqueue_call(host.into(), format!(r#"{{"n":{i}}}"#), T0 + i as i64)
                .await
                .unwrap();
            ids.push(id);
        }
        assert_eq!(ids, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(s.last_call_id().await.unwrap(), 6);
        let queued = |id: u64, host: &str, n: i64| QueuedCall {
            id,
            host: host.into(),
            call: format!(r#"{{"n":{n}}}"#),
            created_ms: T0 + n,
            reply: None,
            replied_ms: None,
        };

        // Per host, oldest first, after-filtered, limited.
        let ids_of = |calls: Vec<QueuedCall>| calls.into_iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(
            s.pending_calls("studio".into(), 0, 10).await.unwrap(),
            vec![
                queued(1, "studio", 0),
                queued(3, "studio", 2),
                queued(4, "studio", 3),
                queued(6, "studio", 5),
            ]
        );
        assert_eq!(
            ids_of(s.pending_calls("laptop".into(), 0, 10).await.unwrap()),
            vec![2, 5]
        );
        assert_eq!(
            ids_of(s.pending_calls("studio".into(), 3, 10).await.unwrap()),
            vec![4, 6]
        );
        assert_eq!(
            ids_of(s.pending_calls("studio".into(), 0, 2).await.unwrap()),
            vec![1, 3]
        );
        assert_eq!(
            s.pending_calls("studio".into(), 0, 0).await.unwrap(),
            vec![]
        );
        assert_eq!(
            s.pending_calls("studio".into(), 6, 10).await.unwrap(),
            vec![]
        );
        assert_eq!(
            s.pending_calls("studio".into(), u64::MAX, 10)
                .await
                .unwrap(),
            vec![]
        );
        assert_eq!(
            s.pending_calls("nobody".into(), 0, 10).await.unwrap(),
            vec![]
        );

        // Answered once; another host's, unknown and second replies write nothing.
        assert!(!s
            .put_reply(3, "laptop".into(), r#""theirs""#.into(), T0 + 10)
            .await
            .unwrap());
        assert!(!s
            .put_reply(99, "studio".into(), r#""none""#.into(), T0 + 10)
            .await
            .unwrap());
        assert!(!s
            .put_reply(u64::MAX, "studio".into(), r#""none""#.into(), T0 + 10)
            .await
            .unwrap());
        assert_eq!(s.call(3).await.unwrap(), Some(queued(3, "studio", 2)));
        assert!(s
            .put_reply(3, "studio".into(), r#"{"ok":true}"#.into(), T0 + 11)
            .await
            .unwrap());
        assert!(!s
            .put_reply(3, "studio".into(), r#"{"ok":false}"#.into(), T0 + 12)
            .await
            .unwrap());
        let answered = QueuedCall {
            reply: Some(r#"{"ok":true}"#.into()),
            replied_ms: Some(T0 + 11),
            ..queued(3, "studio", 2)
        };
        assert_eq!(s.call(3).await.unwrap(), Some(answered));
        assert_eq!(s.call(u64::MAX).await.unwrap(), None);
        assert_eq!(s.call(7).await.unwrap(), None);

        // Answered calls are no longer pending.
        assert_eq!(
            ids_of(s.pending_calls("studio".into(), 0, 10).await.unwrap()),
            vec![1, 4, 6]
        );
        assert_eq!(
            ids_of(s.pending_calls("studio".into(), 0, 2).await.unwrap()),
            vec![1, 4]
        );
        assert_eq!(
            ids_of(s.pending_calls("laptop".into(), 0, 10).await.unwrap()),
            vec![2, 5]
        );
        // The next id continues after the highest.
        assert_eq!(
            s.enqueue_call("laptop".into(), "{}".into(), T0 + 20)
                .await
                .unwrap(),
            7
        );
        assert_eq!(s.last_call_id().await.unwrap(), 7);
    }

    pub async fn concurrent_agent_calls_and_replies(fx: &impl Fixture) {
        const RACERS: usize = 8;
        let s = fx.open().await;
        // Two handles (as two authority processes sharing the database).
        let handles = [s.clone(), fx.open().await];

        // Concurrent enqueues: distinct ids 1..=RACERS.
        let barrier = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .enqueue_call("studio".into(), format!("{i}"), T0)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut ids = BTreeSet::new();
        for task in tasks {
            ids.insert(task.await.unwrap());
        }
        assert_eq!(ids, (1..=RACERS as u64).collect::<BTreeSet<_>>());
        assert_eq!(s.last_call_id().await.unwrap(), RACERS as u64);

        // Concurrent replies to one call: exactly one is recorded.
        let barrier = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let won = store
                        .put_reply(1, "studio".into(), format!("{i}"), T0 + i as i64)
                        .await
                        .unwrap();
                    (i, won)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            let (i, won) = task.await.unwrap();
            if won {
                winners.push(i);
            }
        }
        assert_eq!(winners.len(), 1, "exactly one reply wins: {winners:?}");
        let call = s.call(1).await.unwrap().unwrap();
        assert_eq!(
            (call.reply, call.replied_ms),
            (
                Some(format!("{}", winners[0])),
                Some(T0 + winners[0] as i64)
            )
        );
    }

    pub async fn agent_calls_survive_reopen(fx: &impl Fixture) {
        {
            let s = fx.open().await;
            assert_eq!(
                s.enqueue_call("studio".into(), "{}".into(), T0)
                    .await
                    .unwrap(),
                1
            );
            assert_eq!(
                s.enqueue_call("studio".into(), "[]".into(), T0 + 1)
                    .await
                    .unwrap(),
                2
            );
            assert!(s
                .put_reply(1, "studio".into(), "true".into(), T0 + 2)
                .await
                .unwrap());
        }
        let s = fx.open().await;
        assert_eq!(s.last_call_id().await.unwrap(), 2);
        assert_eq!(
            s.call(1).await.unwrap(),
            Some(QueuedCall {
                id: 1,
                host: "studio".into(),
                call: "{}".into(),
                created_ms: T0,
                reply: Some("true".into()),
                replied_ms: Some(T0 + 2),
            })
        );
        let pending = s.pending_calls("studio".into(), 0, 10).await.unwrap();
        assert_eq!(pending.iter().map(|c| c.id).collect::<Vec<_>>(), vec![2]);
        assert!(!s
            .put_reply(1, "studio".into(), "false".into(), T0 + 3)
            .await
            .unwrap());
        assert_eq!(
            s.enqueue_call("laptop".into(), "{}".into(), T0 + 4)
                .await
                .unwrap(),
            3
        );
    }

    /// A blob's reference is recorded once (a second put is not new and keeps the
    /// later upload time), listed, seen by another handle, and deleted only when
    /// last uploaded before the given time.
    pub async fn blob_references_are_recorded_once_and_deleted_when_old(fx: &impl Fixture) {
        let s = fx.open().await;
        assert!(!s.has_blob(blob_name(0)).await.unwrap());
        assert!(s.blob_refs().await.unwrap().is_empty());
        assert!(s.put_blob(blob_name(0), 5, T0).await.unwrap());
        assert!(s.put_blob(blob_name(1), 0, T0).await.unwrap());
        assert!(!s.put_blob(blob_name(0), 5, T0 + 10).await.unwrap());
        // An earlier time does not move it back.
        assert!(!s.put_blob(blob_name(0), 5, T0 + 1).await.unwrap());
        assert!(s.has_blob(blob_name(0)).await.unwrap());
        let other = fx.open().await;
        assert_eq!(
            other.blob_refs().await.unwrap(),
            vec![
                BlobRef {
                    sha256: blob_name(0),
                    size: 5,
                    stored_ms: T0 + 10,
                    on_disk: true
                },
                BlobRef {
                    sha256: blob_name(1),
                    size: 0,
                    stored_ms: T0,
                    on_disk: true
                },
            ]
        );
        // Uploaded at T0 + 10: kept when deleting what is older than T0 + 10.
        assert!(!other.delete_blob(blob_name(0), T0 + 10).await.unwrap());
        assert!(other.delete_blob(blob_name(0), T0 + 11).await.unwrap());
        assert!(!other.delete_blob(blob_name(0), T0 + 11).await.unwrap());
        assert!(!s.has_blob(blob_name(0)).await.unwrap());
        assert!(s.has_blob(blob_name(1)).await.unwrap());
        assert_eq!(s.legacy_blob_chunk(blob_name(1), 0).await.unwrap(), None);
        // Recorded again after deletion: new.
        assert!(s.put_blob(blob_name(0), 5, T0 + 20).await.unwrap());
    }

    /// Concurrent puts of one new blob's reference from two handles: exactly one
    /// is new.
    pub async fn concurrent_puts_of_one_blob_one_is_new(fx: &impl Fixture) {
        const RACERS: usize = 4;
        let handles = [fx.open().await, fx.open().await];
        let barrier = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .put_blob(blob_name(42), 17, T0 + i as i64)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut new = 0;
        for task in tasks {
            new += usize::from(task.await.unwrap());
        }
        assert_eq!(new, 1, "exactly one put records the blob");
        let refs = handles[0].blob_refs().await.unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(
            refs[0].stored_ms,
            T0 + RACERS as i64 - 1,
            "the latest upload"
        );
    }

    /// A release is unique by (name, version): the same bytes again exist,
    /// other bytes conflict, and nothing but the first is ever stored.
    pub async fn releases_are_unique_by_name_and_version(fx: &impl Fixture) {
        let s = fx.open().await;
        assert!(s.releases().await.unwrap().is_empty());
        assert_eq!(
            s.release("flotilla".into(), "1.0.0".into()).await.unwrap(),
            None
        );

        let first = release("flotilla", "1.0.0", 1, "a");
        assert_eq!(
            s.put_release(first.clone()).await.unwrap(),
            ReleasePut::Created
        );
        assert_eq!(
            s.release("flotilla".into(), "1.0.0".into()).await.unwrap(),
            Some(record(&first))
        );

        // The same manifest and signature, later and by someone else: exists, and
        // the stored one keeps its own fields.
        let retry = NewRelease {
            published_by: "bob".into(),
            created_ms: T0 + 1000,
            ..first.clone()
        };
        assert_eq!(s.put_release(retry).await.unwrap(), ReleasePut::Exists);
        // Other manifest bytes (one byte more), or the same manifest signed
        // otherwise, under the same name and version: conflict.
        let mut longer = first.clone();
        longer.manifest.push(b' ');
        assert_eq!(s.put_release(longer).await.unwrap(), ReleasePut::Conflict);
        let resigned = NewRelease {
            signature: format!("{}x", first.signature),
            ..first.clone()
        };
        assert_eq!(s.put_release(resigned).await.unwrap(), ReleasePut::Conflict);
        let other = release("flotilla", "1.0.0", 2, "b");
        assert_eq!(s.put_release(other).await.unwrap(), ReleasePut::Conflict);
        assert_eq!(s.releases().await.unwrap(), vec![record(&first)]);

        // Other versions and names are other releases; names are case-sensitive.
        let second = release("flotilla", "1.1.0", 2, "c");
        let third = release("Flotilla", "1.0.0", 3, "d");
        let fourth = release("tool", "1.0.0", 4, "e");
        for r in [&second, &third, &fourth] {
            assert_eq!(s.put_release(r.clone()).await.unwrap(), ReleasePut::Created);
        }
        assert_eq!(
            s.release("Flotilla".into(), "1.0.0".into()).await.unwrap(),
            Some(record(&third))
        );
        assert_eq!(
            s.release("flotilla".into(), "1.1".into()).await.unwrap(),
            None
        );
        // Newest (most recently stored) first.
        assert_eq!(
            s.releases().await.unwrap(),
            vec![
                record(&fourth),
                record(&third),
                record(&second),
                record(&first)
            ]
        );

        // Serials up to i64::MAX are kept; above, refused with nothing written.
        let big = release("flotilla", "9.0.0", i64::MAX as u64, "f");
        assert_eq!(
            s.put_release(big.clone()).await.unwrap(),
            ReleasePut::Created
        );
        assert_eq!(
            s.release("flotilla".into(), "9.0.0".into())
                .await
                .unwrap()
                .unwrap()
                .serial,
            i64::MAX as u64
        );
        let err = s
            .put_release(release("flotilla", "9.1.0", u64::MAX, "g"))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::OutOfRange {
                    field: "serial",
                    value: u64::MAX
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            s.release("flotilla".into(), "9.1.0".into()).await.unwrap(),
            None
        );
        assert_eq!(s.releases().await.unwrap().len(), 5);
    }

    /// Concurrent puts of one release (the same bytes) from two handles: exactly
    /// one creates it, the others find it.
    pub async fn concurrent_puts_of_one_release_one_is_created(fx: &impl Fixture) {
        const RACERS: usize = 8;
        let handles = [fx.open().await, fx.open().await];
        let r = release("flotilla", "2.0.0", 7, "race");
        let barrier = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                let r = r.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.put_release(r).await.unwrap()
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        let created = outcomes
            .iter()
            .filter(|o| **o == ReleasePut::Created)
            .count();
        assert_eq!(created, 1, "{outcomes:?}");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, ReleasePut::Created | ReleasePut::Exists)),
            "{outcomes:?}"
        );
        assert_eq!(handles[1].releases().await.unwrap(), vec![record(&r)]);
    }

    /// Rollouts get ids 1, 2, 3…; a put replaces the document and its
    /// `updated_ms`; an unknown id is an error; lists are newest first.
    pub async fn rollouts_get_ids_and_documents_are_replaced(fx: &impl Fixture) {
        let s = fx.open().await;
        assert!(s.rollouts().await.unwrap().is_empty());
        assert_eq!(s.rollout(1).await.unwrap(), None);

        let rollout = |id: u64, doc: &str, created_ms: i64, updated_ms: i64| RolloutRecord {
            id,
            name: format!("r{id}"),
            doc: doc.into(),
            created_ms,
            updated_ms,
            // Created: 1; one more at every write.
            version: if updated_ms == created_ms { 1 } else { 3 },
        };
        for id in 1..=3u64 {
            let got = s
                .create_rollout(format!(r#"{{"n":{id}}}"#), format!("r{id}"), T0 + id as i64)
                .await
                .unwrap();
            assert_eq!(got, id);
        }
        assert_eq!(
            s.rollout(2).await.unwrap(),
            Some(rollout(2, r#"{"n":2}"#, T0 + 2, T0 + 2))
        );

        s.put_rollout(2, r#"{"n":2,"phase":"InProgress"}"#.into(), T0 + 50)
            .await
            .unwrap();
        s.put_rollout(2, r#"{"n":2,"phase":"Succeeded"}"#.into(), T0 + 60)
            .await
            .unwrap();
        let updated = rollout(2, r#"{"n":2,"phase":"Succeeded"}"#, T0 + 2, T0 + 60);
        assert_eq!(s.rollout(2).await.unwrap(), Some(updated.clone()));

        for id in [0, 4, 99, i64::MAX as u64, u64::MAX] {
            let err = s.put_rollout(id, "{}".into(), T0 + 70).await.unwrap_err();
            assert!(
                matches!(err, StoreError::UnknownRollout(n) if n == id),
                "{err:?}"
            );
            assert_eq!(s.rollout(id).await.unwrap(), None);
        }

        assert_eq!(
            s.rollouts().await.unwrap(),
            vec![
                rollout(3, r#"{"n":3}"#, T0 + 3, T0 + 3),
                updated,
                rollout(1, r#"{"n":1}"#, T0 + 1, T0 + 1),
            ]
        );
        assert_eq!(
            s.create_rollout("{}".into(), "r4".into(), T0 + 80)
                .await
                .unwrap(),
            4
        );
    }

    /// Concurrent creations from two handles get distinct ids, 1..=n.
    pub async fn concurrent_rollout_creations_get_distinct_ids(fx: &impl Fixture) {
        const RACERS: usize = 8;
        let handles = [fx.open().await, fx.open().await];
        let barrier = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let id = store
                        .create_rollout(format!("{i}"), "race".into(), T0)
                        .await
                        .unwrap();
                    (id, i)
                })
            })
            .collect();
        let mut ids = BTreeSet::new();
        for task in tasks {
            let (id, i) = task.await.unwrap();
            ids.insert(id);
            assert_eq!(
                handles[0].rollout(id).await.unwrap().unwrap().doc,
                format!("{i}")
            );
        }
        assert_eq!(ids, (1..=RACERS as u64).collect::<BTreeSet<_>>());
    }

    /// Sessions get ids 1, 2, 3…, documents are replaced, events are appended in
    /// order per session, questions belong to a session; unknown ids are errors.
    pub async fn sessions_events_and_questions(fx: &impl Fixture) {
        let s = fx.open().await;
        assert!(s.sessions().await.unwrap().is_empty());
        assert_eq!(s.session(1).await.unwrap(), None);
        for id in 1..=2u64 {
            let got = s
                .create_session(format!(r#"{{"n":{id}}}"#), None, T0 + id as i64)
                .await
                .unwrap();
            assert_eq!(got, SessionCreated { id, created: true });
        }
        s.put_session(2, r#"{"n":2,"mode":"plan"}"#.into(), T0 + 9)
            .await
            .unwrap();
        assert_eq!(
            s.session(2).await.unwrap(),
            Some(SessionRecord {
                id: 2,
                doc: r#"{"n":2,"mode":"plan"}"#.into(),
                created_ms: T0 + 2,
                updated_ms: T0 + 9,
                version: 2,
            })
        );
        let ids: Vec<u64> = s.sessions().await.unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![2, 1]);
        for id in [0, 3, u64::MAX] {
            assert!(matches!(
                s.put_session(id, "{}".into(), T0).await.unwrap_err(),
                StoreError::UnknownSession(i) if i == id
            ));
            assert!(matches!(
                s.append_session_event(id, "{}".into(), T0).await.unwrap_err(),
                StoreError::UnknownSession(i) if i == id
            ));
            assert!(matches!(
                s.create_question(id, "{}".into(), T0).await.unwrap_err(),
                StoreError::UnknownSession(i) if i == id
            ));
        }

        let a = s
            .append_session_event(1, "a".into(), T0 + 10)
            .await
            .unwrap();
        let b = s
            .append_session_event(2, "b".into(), T0 + 11)
            .await
            .unwrap();
        let c = s
            .append_session_event(1, "c".into(), T0 + 12)
            .await
            .unwrap();
        assert!(a < b && b < c);
        let docs = |v: Vec<flotilla_store::authority::SessionEventRecord>| {
            v.into_iter()
                .map(|e| (e.session, e.doc))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            docs(s.session_events(1, 0).await.unwrap()),
            vec![(1, "a".to_string()), (1, "c".to_string())]
        );
        assert_eq!(
            docs(s.session_events(1, a).await.unwrap()),
            vec![(1, "c".to_string())]
        );
        assert!(s.session_events(1, c).await.unwrap().is_empty());
        assert!(s.session_events(9, 0).await.unwrap().is_empty());

        let q1 = s.create_question(1, "q1".into(), T0 + 20).await.unwrap();
        let q2 = s.create_question(2, "q2".into(), T0 + 21).await.unwrap();
        assert_eq!((q1, q2), (1, 2));
        s.put_question(1, "q1 answered".into(), T0 + 30)
            .await
            .unwrap();
        assert_eq!(
            s.question(1).await.unwrap(),
            Some(QuestionRecord {
                id: 1,
                session: 1,
                doc: "q1 answered".into(),
                created_ms: T0 + 20,
                updated_ms: T0 + 30,
                version: 2,
            })
        );
        let ids: Vec<u64> = s.questions().await.unwrap().iter().map(|q| q.id).collect();
        assert_eq!(ids, vec![2, 1]);
        assert!(matches!(
            s.put_question(3, "x".into(), T0).await.unwrap_err(),
            StoreError::UnknownQuestion(3)
        ));
        assert_eq!(s.question(3).await.unwrap(), None);
    }

    /// Deleting a session removes its row, its events, its questions, its alert
    /// key and its runtimes' credentials in one transaction, and nothing of
    /// another session's; a second delete, or one of an unknown id, is an error
    /// that writes nothing; ids are not reused.
    pub async fn delete_session_removes_its_rows_only(fx: &impl Fixture) {
        let s = fx.open().await;
        let one = s
            .create_session("one".into(), Some("fp:1".into()), T0)
            .await
            .unwrap();
        let two = s.create_session("two".into(), None, T0).await.unwrap();
        for id in [one.id, two.id] {
            for n in 0..3 {
                s.append_session_event(id, format!("e{n}"), T0 + n)
                    .await
                    .unwrap();
            }
            s.create_question(id, "q".into(), T0).await.unwrap();
            for n in 0..2 {
                s.create_credential(
                    format!("sha256:session-{id}-{n}"),
                    Principal::Session { id },
                    T0,
                )
                .await
                .unwrap();
            }
        }
        s.create_credential(
            "sha256:operator".into(),
            Principal::Operator { name: "op".into() },
            T0,
        )
        .await
        .unwrap();

        let deleted = s.delete_session(one.id).await.unwrap();
        assert_eq!(
            deleted,
            SessionDeleted {
                events: 3,
                questions: 1,
                credentials: 2,
                alert_keys: 1,
            }
        );
        assert_eq!(s.session(one.id).await.unwrap(), None);
        assert!(s.session_events(one.id, 0).await.unwrap().is_empty());
        assert!(s
            .questions()
            .await
            .unwrap()
            .iter()
            .all(|q| q.session != one.id));
        for n in 0..2 {
            assert_eq!(
                s.principal(format!("sha256:session-{}-{n}", one.id))
                    .await
                    .unwrap(),
                None
            );
        }
        // The other session, and every other credential, are untouched.
        assert!(s.session(two.id).await.unwrap().is_some());
        assert_eq!(s.session_events(two.id, 0).await.unwrap().len(), 3);
        assert_eq!(
            s.questions()
                .await
                .unwrap()
                .iter()
                .filter(|q| q.session == two.id)
                .count(),
            1
        );
        assert_eq!(
            s.principal(format!("sha256:session-{}-0", two.id))
                .await
                .unwrap(),
            Some(Principal::Session { id: two.id })
        );
        assert_eq!(
            s.principal("sha256:operator".into()).await.unwrap(),
            Some(Principal::Operator { name: "op".into() })
        );
        // Writes to a deleted session fail as to an unknown one.
        assert!(matches!(
            s.append_session_event(one.id, "late".into(), T0).await.unwrap_err(),
            StoreError::UnknownSession(i) if i == one.id
        ));
        for id in [one.id, 0, 99, u64::MAX] {
            assert!(matches!(
                s.delete_session(id).await.unwrap_err(),
                StoreError::UnknownSession(i) if i == id
            ));
        }
        // Its alert key is free again; its id is never given again.
        let again = s
            .create_session("again".into(), Some("fp:1".into()), T0)
            .await
            .unwrap();
        assert!(again.created);
        assert!(again.id > two.id, "{again:?}");
        let ids: Vec<u64> = s.sessions().await.unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![again.id, two.id]);
    }

    /// Concurrent session creations claiming one alert key make one session; the
    /// others get its id with `created: false`; other keys get their own.
    pub async fn concurrent_alert_sessions_are_created_once(fx: &impl Fixture) {
        const RACERS: usize = 8;
        let handles = [fx.open().await, fx.open().await];
        let barrier = Arc::new(Barrier::new(RACERS));
        let tasks: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = handles[i % 2].clone();
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .create_session(format!("{i}"), Some("fp:2026".into()), T0)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut created = Vec::new();
        let mut ids = BTreeSet::new();
        for task in tasks {
            let got = task.await.unwrap();
            ids.insert(got.id);
            if got.created {
                created.push(got.id);
            }
        }
        assert_eq!(created.len(), 1, "{created:?}");
        assert_eq!(ids.len(), 1);
        assert_eq!(handles[0].sessions().await.unwrap().len(), 1);
        let other = handles[1]
            .create_session("x".into(), Some("fp:other".into()), T0)
            .await
            .unwrap();
        assert!(other.created);
        assert_ne!(other.id, created[0]);
    }

    /// One update per host, the last written; most recently received first.
    pub async fn host_updates_keep_the_last_per_host(fx: &impl Fixture) {
        let s = fx.open().await;
        assert!(s.host_updates().await.unwrap().is_empty());
        s.put_host_update("studio".into(), r#"{"v":1}"#.into(), T0)
            .await
            .unwrap();
        s.put_host_update("laptop".into(), r#"{"v":1}"#.into(), T0 + 1)
            .await
            .unwrap();
        s.put_host_update("studio".into(), r#"{"v":2}"#.into(), T0 + 2)
            .await
            .unwrap();
        assert_eq!(
            s.host_updates().await.unwrap(),
            vec![
                host_update("studio", r#"{"v":2}"#, T0 + 2),
                host_update("laptop", r#"{"v":1}"#, T0 + 1),
            ]
        );
        // The last write wins even with an older time; ties by host name.
        s.put_host_update("studio".into(), r#"{"v":3}"#.into(), T0 - 5)
            .await
            .unwrap();
        s.put_host_update("attic".into(), r#"{"v":1}"#.into(), T0 + 1)
            .await
            .unwrap();
        assert_eq!(
            s.host_updates().await.unwrap(),
            vec![
                host_update("attic", r#"{"v":1}"#, T0 + 1),
                host_update("laptop", r#"{"v":1}"#, T0 + 1),
                host_update("studio", r#"{"v":3}"#, T0 - 5),
            ]
        );
    }

    /// Unskip requests get increasing ids, are pending until stored otherwise,
    /// and pending ones of every host are listed oldest first; the document and
    /// the pending flag are replaced together; an unknown id writes nothing.
    pub async fn unskips_are_pending_until_stored_done(fx: &impl Fixture) {
        let s = fx.open().await;
        assert!(s.pending_unskips().await.unwrap().is_empty());
        assert_eq!(s.unskip(1).await.unwrap(), None);
        let a = s
            .create_unskip("edge".into(), "{}".into(), T0)
            .await
            .unwrap();
        let b = s
            .create_unskip("studio".into(), r#"{"b":1}"#.into(), T0 + 1)
            .await
            .unwrap();
        let c = s
            .create_unskip("edge".into(), r#"{"c":1}"#.into(), T0 + 2)
            .await
            .unwrap();
        assert!(a < b && b < c, "{a} {b} {c}");
        s.put_unskip(a, r#"{"a":1}"#.into(), true, T0 + 3)
            .await
            .unwrap();
        let record = |id, host: &str, doc: &str, pending, created_ms, updated_ms| UnskipRecord {
            id,
            host: host.into(),
            doc: doc.into(),
            pending,
            created_ms,
            updated_ms,
        };
        assert_eq!(
            s.pending_unskips().await.unwrap(),
            vec![
                record(a, "edge", r#"{"a":1}"#, true, T0, T0 + 3),
                record(b, "studio", r#"{"b":1}"#, true, T0 + 1, T0 + 1),
                record(c, "edge", r#"{"c":1}"#, true, T0 + 2, T0 + 2),
            ]
        );
        // Done: no longer pending, still readable by id.
        s.put_unskip(b, r#"{"b":2}"#.into(), false, T0 + 4)
            .await
            .unwrap();
        assert_eq!(
            s.unskip(b).await.unwrap(),
            Some(record(b, "studio", r#"{"b":2}"#, false, T0 + 1, T0 + 4))
        );
        let pending: Vec<u64> = s
            .pending_unskips()
            .await
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(pending, vec![a, c]);
        let err = s
            .put_unskip(c + 100, "{}".into(), false, T0)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownUnskip(n) if n == c + 100),
            "{err:?}"
        );
        let err = s
            .put_unskip(u64::MAX, "{}".into(), false, T0)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownUnskip(u64::MAX)),
            "{err:?}"
        );
        assert_eq!(s.unskip(u64::MAX).await.unwrap(), None);
    }

    /// Pending unskip requests survive reopening (an authority restart); ids
    /// continue.
    pub async fn notifications_are_recorded_once_per_key(fx: &impl Fixture) {
        {
            let s = fx.open().await;
            assert!(s.notifications(10).await.unwrap().is_empty());
            let a = s
                .create_notification("question/1".into(), "{}".into(), T0)
                .await
                .unwrap()
                .expect("a new key");
            assert_eq!(
                s.create_notification("question/1".into(), "{\"again\":1}".into(), T0 + 1)
                    .await
                    .unwrap(),
                None
            );
            let b = s
                .create_notification("host/a/unreachable/5".into(), "{}".into(), T0 + 2)
                .await
                .unwrap()
                .expect("a new key");
            assert!(a < b, "{a} {b}");
            s.put_notification(a, "{\"sent\":1}".into(), T0 + 3)
                .await
                .unwrap();
            assert!(matches!(
                s.put_notification(b + 100, "{}".into(), T0).await,
                Err(StoreError::UnknownNotification(_))
            ));
        }
        // Across a reopen: the same key is still taken.
        let s = fx.open().await;
        let all = s.notifications(10).await.unwrap();
        assert_eq!(
            all.iter().map(|n| n.dedup_key.as_str()).collect::<Vec<_>>(),
            vec!["host/a/unreachable/5", "question/1"]
        );
        assert_eq!(
            (all[1].doc.as_str(), all[1].created_ms, all[1].updated_ms),
            ("{\"sent\":1}", T0, T0 + 3)
        );
        assert_eq!(s.notifications(1).await.unwrap().len(), 1);
        assert_eq!(
            s.create_notification("question/1".into(), "{}".into(), T0 + 4)
                .await
                .unwrap(),
            None
        );
    }

    pub async fn unskips_survive_reopen(fx: &impl Fixture) {
        let (a, b) = {
            let s = fx.open().await;
            let a = s
                .create_unskip("edge".into(), "{}".into(), T0)
                .await
                .unwrap();
            let b = s
                .create_unskip("edge".into(), "{}".into(), T0 + 1)
                .await
                .unwrap();
            s.put_unskip(a, "done".into(), false, T0 + 2).await.unwrap();
            (a, b)
        };
        let s = fx.open().await;
        let pending = s.pending_unskips().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!((pending[0].id, pending[0].host.as_str()), (b, "edge"));
        assert_eq!(s.unskip(a).await.unwrap().unwrap().doc, "done");
        let c = s
            .create_unskip("edge".into(), "{}".into(), T0 + 3)
            .await
            .unwrap();
        assert!(c > b, "ids continue: {c} after {b}");
    }

    /// Blobs, releases, rollouts and host updates survive reopening; rollout ids
    /// continue.
    pub async fn release_data_survives_reopen(fx: &impl Fixture) {
        let r = release("flotilla", "1.0.0", 1, "a");
        {
            let s = fx.open().await;
            assert!(s.put_blob(blob_name(5), 3, T0).await.unwrap());
            assert_eq!(s.put_release(r.clone()).await.unwrap(), ReleasePut::Created);
            assert_eq!(
                s.create_rollout("{}".into(), "flotilla".into(), T0)
                    .await
                    .unwrap(),
                1
            );
            assert_eq!(
                s.create_rollout("[]".into(), "flotilla".into(), T0 + 1)
                    .await
                    .unwrap(),
                2
            );
            s.put_rollout(1, r#"{"done":true}"#.into(), T0 + 2)
                .await
                .unwrap();
            s.put_host_update("studio".into(), "{}".into(), T0 + 3)
                .await
                .unwrap();
        }
        let s = fx.open().await;
        assert!(s.has_blob(blob_name(5)).await.unwrap());
        assert!(!s.put_blob(blob_name(5), 3, T0).await.unwrap());
        assert_eq!(s.releases().await.unwrap(), vec![record(&r)]);
        assert_eq!(s.put_release(r).await.unwrap(), ReleasePut::Exists);
        assert_eq!(
            s.rollout(1).await.unwrap(),
            Some(RolloutRecord {
                id: 1,
                name: "flotilla".into(),
                doc: r#"{"done":true}"#.into(),
                created_ms: T0,
                updated_ms: T0 + 2,
                version: 2,
            })
        );
        assert_eq!(s.rollouts().await.unwrap().len(), 2);
        assert_eq!(
            s.host_updates().await.unwrap(),
            vec![host_update("studio", "{}", T0 + 3)]
        );
        assert_eq!(
            s.create_rollout("{}".into(), "flotilla".into(), T0 + 4)
                .await
                .unwrap(),
            3
        );
    }

    /// A child process publishes in a loop, printing each acknowledged digest; it
    /// is killed with SIGKILL mid-stream. Every acknowledged publish is there after
    /// reopening, and the selection log is whole (indexes 1..n, each naming a
    /// stored revision).
    pub async fn kill_9_loses_no_acknowledged_publish(fx: &impl Fixture) {
        use std::io::{BufRead, BufReader};
        const ACKS: usize = 40;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "child_publisher",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_VAR, fx.spec())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let acked = tokio::task::spawn_blocking(move || {
            let mut acked = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                if let Some(d) = line.strip_prefix("ack ") {
                    acked.push(d.to_owned());
                    if acked.len() == ACKS {
                        break;
                    }
                }
            }
            acked
        })
        .await
        .unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert_eq!(acked.len(), ACKS, "the child stopped early");

        let s = fx.open().await;
        let stored: BTreeSet<String> = s
            .revisions()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.digest)
            .collect();
        for d in &acked {
            assert!(stored.contains(d), "acknowledged {d} is lost");
        }
        let log = s.selections().await.unwrap();
        assert!(log.len() >= ACKS);
        for (i, sel) in log.iter().rev().enumerate() {
            assert_eq!(sel.index, i as u64 + 1);
            assert!(stored.contains(&sel.digest), "{sel:?} names no revision");
        }
        // Every stored revision was selected (publish stores and selects at once).
        let selected_digests: BTreeSet<String> = log.into_iter().map(|s| s.digest).collect();
        assert_eq!(selected_digests, stored);
    }
}

/// Set in the child of `kill_9_loses_no_acknowledged_publish`: the database spec.
const CHILD_VAR: &str = "FLOTILLA_TEST_AUTHORITY_CHILD";

/// The child of `kill_9_loses_no_acknowledged_publish`; returns at once unless
/// [`CHILD_VAR`] is set. Publishes until killed, printing `ack <digest>` after each
/// publish returned.
#[tokio::test]
async fn child_publisher() {
    use std::io::Write;
    let Ok(spec) = std::env::var(CHILD_VAR) else {
        return;
    };
    let s = open_spec(&spec).await;
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let name = format!("kill{i}");
        selected(
            s.publish(rev(&name, T0 + i as i64, "child"), None)
                .await
                .unwrap(),
        );
        writeln!(out, "ack {}", digest(&name)).unwrap();
        out.flush().unwrap();
    }
}

/// One test per case and backend.
macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fx = super::SqliteFixture::new().await;
                    super::cases::$case(&fx).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fx = super::PostgresFixture::new().await;
                    super::cases::$case(&fx).await;
                }
            )*
        }
    };
}

suite!(
    publish_new_then_same_content_is_unchanged,
    publish_conflict_names_current_and_writes_nothing,
    publish_of_other_content_under_a_known_digest_is_refused,
    select_unknown_revision_is_an_error,
    select_older_revision_gets_a_new_index,
    concurrent_selects_with_the_same_expect_one_wins,
    join_token_redeems_once_then_used,
    join_token_expired_and_unknown_are_refused,
    duplicate_hashes_are_refused,
    principal_lookup,
    reports_replace_the_hosts_last,
    reports_stored_together_keep_the_last_of_each_host,
    revisions_newest_first,
    data_survives_reopen,
    kill_9_loses_no_acknowledged_publish,
    agent_calls_queue_per_host_and_answer_once,
    concurrent_agent_calls_and_replies,
    agent_calls_survive_reopen,
    blob_references_are_recorded_once_and_deleted_when_old,
    concurrent_puts_of_one_blob_one_is_new,
    releases_are_unique_by_name_and_version,
    concurrent_puts_of_one_release_one_is_created,
    rollouts_get_ids_and_documents_are_replaced,
    concurrent_rollout_creations_get_distinct_ids,
    host_updates_keep_the_last_per_host,
    release_data_survives_reopen,
    unskips_are_pending_until_stored_done,
    unskips_survive_reopen,
    notifications_are_recorded_once_per_key,
    sessions_events_and_questions,
    concurrent_alert_sessions_are_created_once,
    delete_session_removes_its_rows_only,
    ui_links_sign_in_once_and_revoke,
    credentials_are_listed_touched_and_revoked,
    rejoining_revokes_the_hosts_older_credentials,
    join_tokens_are_listed_and_revoked,
);

// Backend-specific checks.

#[test]
fn sqlite_refuses_a_local_state_db_and_vice_versa() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join(flotilla_store::STATE_DB_FILE);
    drop(flotilla_store::Store::open(&state).unwrap());
    let err = SqliteAuthority::open(&state).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err:?}");
    let auth = dir.path().join(AUTHORITY_DB_FILE);
    drop(SqliteAuthority::open(&auth).unwrap());
    let err = flotilla_store::Store::open(&auth).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err:?}");
}

#[tokio::test]
async fn sqlite_in_memory_works() {
    let s = SqliteAuthority::open_in_memory().unwrap();
    selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
    assert_eq!(s.selection().await.unwrap().unwrap().index, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fresh_database_for_other_crates_tests() {
    let s = testing::fresh_postgres(&testing::admin_url()).await;
    assert_eq!(s.selection().await.unwrap(), None);
    selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_first_connects_migrate_once() {
    let fx = PostgresFixture::new().await;
    let (a, b, c) = tokio::join!(fx.open(), fx.open(), fx.open());
    for s in [a, b, c] {
        assert_eq!(s.schema_version().await.unwrap(), AUTHORITY_SCHEMA_VERSION);
        s.ping().await.unwrap();
    }
}

#[tokio::test]
async fn postgres_unreachable_server_is_a_connect_error() {
    // Port 1 on loopback: nothing listens there.
    let err = PostgresAuthority::connect("postgres://postgres@127.0.0.1:1/postgres")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::PostgresConnect { .. }), "{err:?}");
    assert!(!err.to_string().contains("127.0.0.1:1/"), "{err}");
}

#[tokio::test]
async fn any_authority_delegates() {
    let s: AnyAuthority = SqliteAuthority::open_in_memory().unwrap().into();
    selected(s.publish(rev("a", T0, "ada"), None).await.unwrap());
    assert_eq!(s.revisions().await.unwrap().len(), 1);
    assert_eq!(
        s.enqueue_call("studio".into(), "{}".into(), T0)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.pending_calls("studio".into(), 0, 5).await.unwrap().len(),
        1
    );
    assert!(s
        .put_reply(1, "studio".into(), "{}".into(), T0)
        .await
        .unwrap());
    assert!(s.call(1).await.unwrap().unwrap().reply.is_some());
    assert_eq!(s.last_call_id().await.unwrap(), 1);

    assert!(s.put_blob(blob_name(1), 2, T0).await.unwrap());
    assert!(s.has_blob(blob_name(1)).await.unwrap());
    let r = release("flotilla", "1.0.0", 1, "a");
    assert_eq!(s.put_release(r.clone()).await.unwrap(), ReleasePut::Created);
    assert_eq!(
        s.release("flotilla".into(), "1.0.0".into()).await.unwrap(),
        Some(record(&r))
    );
    assert_eq!(s.releases().await.unwrap().len(), 1);
    let id = s
        .create_rollout("{}".into(), "flotilla".into(), T0)
        .await
        .unwrap();
    s.put_rollout(id, "[]".into(), T0 + 1).await.unwrap();
    assert_eq!(s.rollout(id).await.unwrap().unwrap().doc, "[]");
    assert_eq!(s.rollouts().await.unwrap().len(), 1);
    s.put_host_update("studio".into(), "{}".into(), T0)
        .await
        .unwrap();
    assert_eq!(s.host_updates().await.unwrap().len(), 1);
    let id = s
        .create_unskip("studio".into(), "{}".into(), T0)
        .await
        .unwrap();
    s.put_unskip(id, "[]".into(), false, T0 + 1).await.unwrap();
    assert_eq!(s.unskip(id).await.unwrap().unwrap().doc, "[]");
    assert!(s.pending_unskips().await.unwrap().is_empty());
}

/// A blob stored before schema 9 (chunks in the database) is read back chunk by
/// chunk after the upgrade, listed as not on disk, and marked moved.
async fn legacy_blob_is_read_by_chunk_and_marked_moved(s: &impl AuthorityStore) {
    let refs = s.blob_refs().await.unwrap();
    assert_eq!(refs.len(), 1);
    assert!(!refs[0].on_disk, "{refs:?}");
    assert_eq!(refs[0].size, BLOB_CHUNK_BYTES as u64 + 5);
    let first = s.legacy_blob_chunk(blob_name(7), 0).await.unwrap().unwrap();
    assert_eq!(first.len(), BLOB_CHUNK_BYTES);
    assert!(first.iter().all(|&b| b == 7));
    assert_eq!(
        s.legacy_blob_chunk(blob_name(7), 1).await.unwrap(),
        Some(vec![7; 5])
    );
    assert_eq!(s.legacy_blob_chunk(blob_name(7), 2).await.unwrap(), None);
    s.blob_moved(blob_name(7), T0).await.unwrap();
    assert_eq!(s.legacy_blob_chunk(blob_name(7), 0).await.unwrap(), None);
    let refs = s.blob_refs().await.unwrap();
    assert!(refs[0].on_disk);
    assert_eq!(refs[0].stored_ms, T0);
}

#[tokio::test]
async fn sqlite_legacy_blob_is_read_by_chunk_and_marked_moved() {
    let fx = SqliteFixture::new().await;
    testing::sqlite_with_legacy_blob(&fx.path, &blob_name(7), &vec![7; BLOB_CHUNK_BYTES + 5]);
    legacy_blob_is_read_by_chunk_and_marked_moved(&fx.open().await).await;
}

#[tokio::test]
async fn postgres_legacy_blob_is_read_by_chunk_and_marked_moved() {
    let admin_url = testing::admin_url();
    let db = testing::create_database(&admin_url).await.unwrap();
    testing::postgres_with_legacy_blob(&db.url, &blob_name(7), &vec![7; BLOB_CHUNK_BYTES + 5])
        .await;
    let s = PostgresAuthority::connect(&db.url).await.unwrap();
    legacy_blob_is_read_by_chunk_and_marked_moved(&s).await;
    drop(s);
    testing::drop_database(&admin_url, &db.name).await.unwrap();
}
