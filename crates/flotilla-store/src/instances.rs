//! Instances (what Flotilla started and believes runs, per component, with the
//! runtime identity measured at start), their removal history, and the desired
//! lifecycle per component.
//!
//! Tables `instances`, `removed_instances`, `desired`.

use crate::error::StoreError;
use crate::journal::sql_limit;
use crate::records::{InstanceRecord, RemovalReason, RemovedInstance};
use crate::store::Store;
use flotilla_model::status::DesiredLifecycle;
use rusqlite::types::Type;
use rusqlite::{params, OptionalExtension, Row};
use std::collections::BTreeMap;

const INSTANCE_COLUMNS: &str = "component, host, pid, pgid, start_time_ticks, exe, exe_sha256, \
     argv_digest, config_digest, operation, started_at_ms, log_path, config_json, program_files";

fn instance_from_row(row: &Row<'_>) -> rusqlite::Result<InstanceRecord> {
    let ticks: i64 = row.get("start_time_ticks")?;
    Ok(InstanceRecord {
        component: row.get("component")?,
        host: row.get("host")?,
        pid: row.get("pid")?,
        pgid: row.get("pgid")?,
        start_time_ticks: u64::try_from(ticks).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(4, Type::Integer, Box::new(e))
        })?,
        exe: row.get("exe")?,
        exe_sha256: row.get("exe_sha256")?,
        argv_digest: row.get("argv_digest")?,
        config_digest: row.get("config_digest")?,
        operation: row.get("operation")?,
        started_at_ms: row.get("started_at_ms")?,
        log_path: row.get("log_path")?,
        config_json: row.get("config_json")?,
        program_files: match row.get::<_, Option<String>>("program_files")? {
            None => Vec::new(),
            Some(text) => serde_json::from_str(&text).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(13, Type::Text, Box::new(e))
            })?,
        },
    })
}

fn desired_to_str(d: DesiredLifecycle) -> &'static str {
    match d {
        DesiredLifecycle::Running => "running",
        DesiredLifecycle::Stopped => "stopped",
        DesiredLifecycle::Disabled => "disabled",
    }
}

fn desired_from_str(s: &str) -> Option<DesiredLifecycle> {
    [
        DesiredLifecycle::Running,
        DesiredLifecycle::Stopped,
        DesiredLifecycle::Disabled,
    ]
    .into_iter()
    .find(|d| desired_to_str(*d) == s)
}

impl Store {
    /// Records the instance of `rec.component`, replacing any previous record for
    /// that component (an upsert: at most one instance per component).
    /// `rec.operation` must be an operation in the journal.
    ///
    /// # Errors
    /// - [`StoreError::OutOfRange`] if `start_time_ticks` exceeds `i64::MAX`.
    /// - [`StoreError::UnknownOperation`] if `rec.operation` is not in the journal.
    /// - [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn record_instance(&mut self, rec: &InstanceRecord) -> Result<(), StoreError> {
        let ticks = i64::try_from(rec.start_time_ticks).map_err(|_| StoreError::OutOfRange {
            field: "start_time_ticks",
            value: rec.start_time_ticks,
        })?;
        let program_files = (!rec.program_files.is_empty())
            .then(|| crate::journal::to_json(&rec.program_files, "program files"))
            .transpose()?;
        self.write("record an instance", |tx| {
            let known: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM operations WHERE id = ?1)",
                [rec.operation],
                |row| row.get(0),
            )?;
            if !known {
                return Err(StoreError::UnknownOperation(rec.operation).into());
            }
            tx.execute(
                &format!(
                    "INSERT INTO instances ({INSTANCE_COLUMNS}) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
                     ON CONFLICT (component) DO UPDATE SET \
                     host = excluded.host, pid = excluded.pid, pgid = excluded.pgid, \
                     start_time_ticks = excluded.start_time_ticks, exe = excluded.exe, \
                     exe_sha256 = excluded.exe_sha256, argv_digest = excluded.argv_digest, \
                     config_digest = excluded.config_digest, operation = excluded.operation, \
                     started_at_ms = excluded.started_at_ms, log_path = excluded.log_path, \
                     config_json = excluded.config_json, \
                     program_files = excluded.program_files"
                ),
                params![
                    rec.component,
                    rec.host,
                    rec.pid,
                    rec.pgid,
                    ticks,
                    rec.exe,
                    rec.exe_sha256,
                    rec.argv_digest,
                    rec.config_digest,
                    rec.operation,
                    rec.started_at_ms,
                    rec.log_path,
                    rec.config_json,
                    program_files,
                ],
            )?;
            Ok(())
        })
    }

    /// The instance recorded for `component`, if any.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn instance(&self, component: &str) -> Result<Option<InstanceRecord>, StoreError> {
        self.read("read an instance", |conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {INSTANCE_COLUMNS} FROM instances WHERE component = ?1"
                ))?
                .query_row([component], instance_from_row)
                .optional()?)
        })
    }

    /// Every recorded instance, by component name.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn instances(&self) -> Result<Vec<InstanceRecord>, StoreError> {
        self.read("list instances", |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {INSTANCE_COLUMNS} FROM instances ORDER BY component"
            ))?;
            let rows = stmt.query_map([], instance_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// Removes the instance record of `component`, keeping a copy in the removal
    /// history with `reason` and `at_ms` (ms since the Unix epoch), in one
    /// transaction. A no-op if there is none (idempotent, like stopping what is
    /// stopped).
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn remove_instance(
        &mut self,
        component: &str,
        reason: RemovalReason,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write("remove an instance", |tx| {
            tx.execute(
                &format!(
                    "INSERT INTO removed_instances ({INSTANCE_COLUMNS}, reason, removed_at_ms) \
                     SELECT {INSTANCE_COLUMNS}, ?2, ?3 FROM instances WHERE component = ?1"
                ),
                params![component, reason, at_ms],
            )?;
            tx.execute("DELETE FROM instances WHERE component = ?1", [component])?;
            Ok(())
        })
    }

    /// The `limit` most recently removed instance records, newest first.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn removed_instances(&self, limit: usize) -> Result<Vec<RemovedInstance>, StoreError> {
        self.read("list removed instances", |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {INSTANCE_COLUMNS}, reason, removed_at_ms FROM removed_instances \
                 ORDER BY id DESC LIMIT ?1"
            ))?;
            let rows = stmt.query_map([sql_limit(limit)], |row| {
                Ok(RemovedInstance {
                    instance: instance_from_row(row)?,
                    reason: row.get("reason")?,
                    removed_at_ms: row.get("removed_at_ms")?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// Sets the desired lifecycle of `component` (`running` after a successful
    /// start, `stopped` after a stop), replacing the previous one; `at_ms` (ms
    /// since the Unix epoch) is when. Lets status tell "down unexpectedly" from
    /// "stopped".
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn set_desired(
        &mut self,
        component: &str,
        desired: DesiredLifecycle,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write("set a desired lifecycle", |tx| {
            tx.execute(
                "INSERT INTO desired (component, lifecycle, set_at_ms) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (component) DO UPDATE SET \
                 lifecycle = excluded.lifecycle, set_at_ms = excluded.set_at_ms",
                params![component, desired_to_str(desired), at_ms],
            )?;
            Ok(())
        })
    }

    /// The desired lifecycle of every component that has one. Components absent
    /// from the map were never operated on.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn desired(&self) -> Result<BTreeMap<String, DesiredLifecycle>, StoreError> {
        self.read("read desired lifecycles", |conn| {
            let mut stmt = conn.prepare_cached("SELECT component, lifecycle FROM desired")?;
            let rows = stmt.query_map([], |row| {
                let text: String = row.get(1)?;
                let desired = desired_from_str(&text).ok_or_else(|| {
                    rusqlite::Error::FromSqlConversionFailure(
                        1,
                        Type::Text,
                        format!("`{text}` is not a desired lifecycle").into(),
                    )
                })?;
                Ok((row.get(0)?, desired))
            })?;
            Ok(rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desired_text_matches_serde() {
        for d in [
            DesiredLifecycle::Running,
            DesiredLifecycle::Stopped,
            DesiredLifecycle::Disabled,
        ] {
            assert_eq!(
                serde_json::to_value(d).unwrap(),
                serde_json::Value::from(desired_to_str(d))
            );
            assert_eq!(desired_from_str(desired_to_str(d)), Some(d));
        }
    }
}
