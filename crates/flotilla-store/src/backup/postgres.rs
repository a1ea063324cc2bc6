//! The authority's PostgreSQL database in a backup: dumped with `pg_dump
//! --format=custom` from a snapshot exported by a repeatable-read transaction that
//! also counts every table's rows (`pg_dump --snapshot`: the dump holds exactly the
//! rows counted, whatever the authority writes meanwhile); verified by `pg_restore`
//! into a scratch database (made and dropped here) whose row counts must match;
//! restored into a new database that is then swapped in by renaming (the previous
//! one kept as `<name>_before_restore_<ms>`).
//!
//! `pg_dump` and `pg_restore` are run by the caller's [`PgTools`] (this crate
//! starts no process), with the connection given to them in libpq's environment
//! variables (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`), never
//! on a command line others can read. Their version must be at least the server's
//! (Debian: `postgresql-client`).

use super::error::BackupError;
use super::manifest::{DatabaseEntry, Engine, POSTGRES_DUMP};
use super::sqlite::compare_counts;
use crate::authority::POSTGRES_SCHEMA_TABLE;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, IsolationLevel, NoTls};

/// Runs PostgreSQL's client programs for a backup: the workspace's process
/// boundary (`flotilla_exec`) implements it.
pub trait PgTools: Send + Sync {
    /// Runs `program` (`pg_dump` or `pg_restore`, found on `PATH`) with `args` and,
    /// added to its environment, `env` (libpq's `PG*` variables, the password among
    /// them), standard input `/dev/null`, to its end.
    ///
    /// # Errors
    /// Why it could not be started, or its exit status and standard error.
    fn run(&self, program: &str, args: &[String], env: &[(String, String)]) -> Result<(), String>;
}

/// Where the database is.
struct Target {
    config: Config,
    dbname: String,
}

fn pg(context: &'static str) -> impl Fn(tokio_postgres::Error) -> BackupError + Copy {
    move |source| BackupError::Postgres { context, source }
}

impl Target {
    fn parse(url: &str) -> Result<Target, BackupError> {
        let config: Config = url.parse().map_err(pg("read the database URL"))?;
        let dbname = config
            .get_dbname()
            .map(str::to_string)
            .or_else(|| config.get_user().map(str::to_string))
            .ok_or_else(|| BackupError::Database {
                why: "the database URL names no database (and no user to default it to)".into(),
            })?;
        Ok(Target { config, dbname })
    }

    /// libpq's environment for the client programs, on database `db`.
    fn env(&self, db: &str) -> Vec<(String, String)> {
        let mut env = vec![
            ("PGDATABASE".to_string(), db.to_string()),
            ("PGAPPNAME".to_string(), "flotilla-backup".to_string()),
            ("PGCONNECT_TIMEOUT".to_string(), "10".to_string()),
        ];
        match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => env.push(("PGHOST".into(), h.clone())),
            Some(Host::Unix(p)) => env.push(("PGHOST".into(), p.display().to_string())),
            None => {}
        }
        if let Some(port) = self.config.get_ports().first() {
            env.push(("PGPORT".into(), port.to_string()));
        }
        if let Some(user) = self.config.get_user() {
            env.push(("PGUSER".into(), user.to_string()));
        }
        if let Some(pw) = self.config.get_password() {
            env.push((
                "PGPASSWORD".into(),
                String::from_utf8_lossy(pw).into_owned(),
            ));
        }
        env
    }

    /// A connection to database `db` on the same server, as the same user.
    async fn connect(&self, db: &str) -> Result<Client, BackupError> {
        let mut config = self.config.clone();
        config.dbname(db);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(pg("connect to the database"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// A connection to another database than the authority's (`postgres`, else
    /// `template1`), to rename the authority's.
    async fn maintenance(&self) -> Result<Client, BackupError> {
        match self.connect("postgres").await {
            Ok(c) if self.dbname != "postgres" => Ok(c),
            _ => self.connect("template1").await,
        }
    }
}

/// A quoted identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `<base><suffix>`, `base` cut (at a character boundary) so that the name fits
/// PostgreSQL's 63 bytes.
fn derived(base: &str, suffix: &str) -> String {
    let mut cut = 63usize.saturating_sub(suffix.len()).min(base.len());
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &base[..cut])
}

/// The schema version (`None` when the database has no Flotilla schema table) and
/// every table of the current schema with its row count, read by `client` (in its
/// current transaction, if any).
async fn facts(
    client: &impl tokio_postgres::GenericClient,
) -> Result<(Option<i64>, BTreeMap<String, i64>), BackupError> {
    let e = pg("count the rows of its tables");
    let names: Vec<String> = client
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1",
            &[],
        )
        .await
        .map_err(e)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut tables = BTreeMap::new();
    for name in &names {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {}", ident(name)), &[])
            .await
            .map_err(e)?
            .get(0);
        tables.insert(name.clone(), n);
    }
    let version = if names.iter().any(|n| n == POSTGRES_SCHEMA_TABLE) {
        Some(
            client
                .query_one(
                    &format!("SELECT COALESCE(MAX(version), 0) FROM {POSTGRES_SCHEMA_TABLE}"),
                    &[],
                )
                .await
                .map_err(pg("read the schema version"))?
                .get(0),
        )
    } else {
        None
    };
    Ok((version, tables))
}

/// Runs a client program on the blocking pool.
async fn run_tool(
    tools: &Arc<dyn PgTools>,
    program: &'static str,
    args: Vec<String>,
    env: Vec<(String, String)>,
) -> Result<(), BackupError> {
    let tools = tools.clone();
    tokio::task::spawn_blocking(move || tools.run(program, &args, &env))
        .await
        .map_err(|e| BackupError::PgTool {
            program: program.into(),
            why: format!("did not finish: {e}"),
        })?
        .map_err(|why| BackupError::PgTool {
            program: program.into(),
            why,
        })
}

/// Dumps the database at `url` into `out` (`pg_dump --format=custom`) from one
/// exported snapshot, in which the rows of every table are counted too.
///
/// # Errors
/// [`BackupError::Postgres`], [`BackupError::PgTool`], [`BackupError::Database`].
pub(crate) async fn dump(
    url: &str,
    tools: &Arc<dyn PgTools>,
    out: &Path,
) -> Result<DatabaseEntry, BackupError> {
    let target = Target::parse(url)?;
    let mut client = target.connect(&target.dbname).await?;
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg("begin a snapshot"))?;
    let snapshot: String = tx
        .query_one("SELECT pg_export_snapshot()", &[])
        .await
        .map_err(pg("export a snapshot"))?
        .get(0);
    let (schema_version, tables) = facts(&tx).await?;
    run_tool(
        tools,
        "pg_dump",
        vec![
            "--format=custom".into(),
            format!("--snapshot={snapshot}"),
            "--no-password".into(),
            format!("--file={}", out.display()),
        ],
        target.env(&target.dbname),
    )
    .await?;
    tx.commit().await.map_err(pg("end the snapshot"))?;
    Ok(DatabaseEntry {
        path: POSTGRES_DUMP.into(),
        engine: Engine::Postgres,
        schema: schema_version.map(|_| "authority".to_string()),
        schema_version,
        tables,
    })
}

/// Restores `dump` into the new database `db` (made from `template0`) and checks
/// its schema version and row counts against `entry`; the database is dropped
/// again if anything fails.
async fn restore_into(
    target: &Target,
    admin: &Client,
    tools: &Arc<dyn PgTools>,
    dump: &Path,
    entry: &DatabaseEntry,
    db: &str,
) -> Result<(), BackupError> {
    admin
        .batch_execute(&format!("CREATE DATABASE {} TEMPLATE template0", ident(db)))
        .await
        .map_err(pg(
            "create a database to restore into (the user needs CREATEDB)",
        ))?;
    let done = async {
        run_tool(
            tools,
            "pg_restore",
            vec![
                "--no-owner".into(),
                "--no-privileges".into(),
                "--exit-on-error".into(),
                "--single-transaction".into(),
                "--no-password".into(),
                format!("--dbname={db}"),
                dump.display().to_string(),
            ],
            target.env(db),
        )
        .await?;
        let restored = target.connect(db).await?;
        let (version, tables) = facts(&restored).await?;
        drop(restored);
        let bad = |why: String| BackupError::Check {
            database: "the PostgreSQL dump".into(),
            why,
        };
        if version != entry.schema_version {
            return Err(bad(format!(
                "schema version {}, the manifest says {}",
                version.map_or("-".into(), |v| v.to_string()),
                entry.schema_version.map_or("-".into(), |v| v.to_string())
            )));
        }
        compare_counts(&entry.tables, &tables).map_err(bad)
    }
    .await;
    if done.is_err() {
        let _ = drop_database(admin, db).await;
    }
    done
}

async fn drop_database(client: &Client, db: &str) -> Result<(), BackupError> {
    client
        .batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            ident(db)
        ))
        .await
        .map_err(pg("drop a scratch database"))
}

/// Verifies `dump`: restored into a scratch database on the server of `url`
/// (`flotilla_verify_<ms>_<pid>`, dropped afterwards), with the schema version and
/// row counts `entry` recorded.
///
/// # Errors
/// [`BackupError::Check`], [`BackupError::Postgres`], [`BackupError::PgTool`].
pub(crate) async fn verify(
    url: &str,
    tools: &Arc<dyn PgTools>,
    dump: &Path,
    entry: &DatabaseEntry,
    now_ms: i64,
) -> Result<(), BackupError> {
    let target = Target::parse(url)?;
    let admin = target.connect(&target.dbname).await?;
    let scratch = format!("flotilla_verify_{now_ms}_{}", std::process::id());
    restore_into(&target, &admin, tools, dump, entry, &scratch).await?;
    drop_database(&admin, &scratch).await
}

/// A PostgreSQL database restored under a temporary name, ready to be swapped in.
pub(crate) struct Prepared {
    target: Target,
    admin: Client,
    temp: String,
    previous: String,
}

/// What a swap did: the database's previous content, kept under another name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swapped {
    /// The database restored.
    pub database: String,
    /// Where its previous content is (`None`: there was no such database).
    pub previous: Option<String>,
}

/// Restores `dump` into a new database `<name>_restoring_<ms>` on the server of
/// `url` and checks it (schema version, row counts), after refusing a database in
/// use (sessions connected to it).
///
/// # Errors
/// [`BackupError::InUse`], [`BackupError::Check`], [`BackupError::Postgres`],
/// [`BackupError::PgTool`].
pub(crate) async fn prepare(
    url: &str,
    tools: &Arc<dyn PgTools>,
    dump: &Path,
    entry: &DatabaseEntry,
    now_ms: i64,
) -> Result<Prepared, BackupError> {
    let target = Target::parse(url)?;
    let admin = target.maintenance().await?;
    in_use(&admin, &target.dbname).await?;
    let temp = derived(&target.dbname, &format!("_restoring_{now_ms}"));
    let previous = derived(&target.dbname, &format!("_before_restore_{now_ms}"));
    restore_into(&target, &admin, tools, dump, entry, &temp).await?;
    Ok(Prepared {
        target,
        admin,
        temp,
        previous,
    })
}

/// Refuses a database others are connected to.
async fn in_use(admin: &Client, db: &str) -> Result<(), BackupError> {
    let rows = admin
        .query(
            "SELECT pid, COALESCE(application_name, ''), COALESCE(client_addr::text, 'local')
               FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .await
        .map_err(pg("list the sessions on the database"))?;
    if rows.is_empty() {
        return Ok(());
    }
    let who: Vec<String> = rows
        .iter()
        .map(|r| {
            let (pid, app, addr): (i32, String, String) = (r.get(0), r.get(1), r.get(2));
            format!(
                "pid {pid} ({}, from {addr})",
                if app.is_empty() { "?" } else { &app }
            )
        })
        .collect();
    Err(BackupError::InUse {
        target: format!("PostgreSQL database {db}"),
        holder: format!("{} session(s): {}", rows.len(), who.join(", ")),
    })
}

impl Prepared {
    /// Swaps the restored database in: the database (if it exists) renamed to
    /// `<name>_before_restore_<ms>`, the restored one renamed to its name. A rename
    /// that fails is undone; the restored database is dropped then.
    ///
    /// # Errors
    /// [`BackupError::InUse`] (someone connected meanwhile), [`BackupError::Postgres`].
    pub(crate) async fn swap(self) -> Result<Swapped, BackupError> {
        let db = self.target.dbname.clone();
        let exists = !self
            .admin
            .query("SELECT 1 FROM pg_database WHERE datname = $1", &[&db])
            .await
            .map_err(pg("look the database up"))?
            .is_empty();
        let rename = |from: &str, to: &str| {
            format!("ALTER DATABASE {} RENAME TO {}", ident(from), ident(to))
        };
        if exists {
            if let Err(e) = self.admin.batch_execute(&rename(&db, &self.previous)).await {
                let _ = drop_database(&self.admin, &self.temp).await;
                in_use(&self.admin, &db).await?;
                return Err(pg("rename the database out of the way")(e));
            }
        }
        if let Err(e) = self.admin.batch_execute(&rename(&self.temp, &db)).await {
            if exists {
                let _ = self.admin.batch_execute(&rename(&self.previous, &db)).await;
            }
            let _ = drop_database(&self.admin, &self.temp).await;
            return Err(pg("rename the restored database into place")(e));
        }
        Ok(Swapped {
            database: db,
            previous: exists.then_some(self.previous),
        })
    }

    /// Drops the restored database (a restore given up before its swap).
    pub(crate) async fn abandon(self) {
        let _ = drop_database(&self.admin, &self.temp).await;
    }
}

/// The dump's path in `archive`.
pub(crate) fn dump_path(archive: &Path) -> PathBuf {
    archive.join(POSTGRES_DUMP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_fit_63_bytes() {
        let long = "x".repeat(80);
        let n = derived(&long, "_before_restore_1796121663120");
        assert_eq!(n.len(), 63);
        assert!(n.ends_with("_before_restore_1796121663120"));
        assert_eq!(derived("flotilla", "_restoring_1"), "flotilla_restoring_1");
        let wide = "é".repeat(40);
        assert!(derived(&wide, "_restoring_1796121663120").len() <= 63);
    }

    #[test]
    fn the_password_goes_to_the_environment_only() {
        let t = Target::parse("postgres://flo:s3cret@127.0.0.1:5433/auth").unwrap();
        let env = t.env("auth");
        assert!(env.contains(&("PGPASSWORD".into(), "s3cret".into())));
        assert!(env.contains(&("PGHOST".into(), "127.0.0.1".into())));
        assert!(env.contains(&("PGPORT".into(), "5433".into())));
        assert!(env.contains(&("PGUSER".into(), "flo".into())));
        assert_eq!(t.dbname, "auth");
    }
}
