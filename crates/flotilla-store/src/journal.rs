//! The journal: operations (one per mutating CLI invocation) and their steps,
//! each written before it runs and updated after (DESIGN.md invariant 2).
//!
//! Tables `operations` and `steps`. An operation or step is [`Outcome::Running`]
//! with no `ended_at_ms` until it is finished; a finished one is never rewritten.

use crate::error::StoreError;
use crate::ids::{OperationId, StepId};
use crate::records::{LastStep, NewOperation, NewStep, OperationRecord, Outcome, StepRecord};
use crate::store::{Store, TxError};
use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::collections::BTreeMap;

const OPERATION_COLUMNS: &str = "id, verb, target, flags, plan_digest, topology_digest, who, pid, \
     command_line, started_at_ms, ended_at_ms, outcome, error";

const STEP_COLUMNS: &str =
    "id, operation, wave, component, action, started_at_ms, ended_at_ms, outcome, evidence";

fn operation_from_row(row: &Row<'_>) -> rusqlite::Result<OperationRecord> {
    Ok(OperationRecord {
        id: row.get("id")?,
        verb: row.get("verb")?,
        target: row.get("target")?,
        flags: json_column(row, 3)?,
        plan_digest: row.get("plan_digest")?,
        topology_digest: row.get("topology_digest")?,
        who: row.get("who")?,
        pid: row.get("pid")?,
        command_line: row.get("command_line")?,
        started_at_ms: row.get("started_at_ms")?,
        ended_at_ms: row.get("ended_at_ms")?,
        outcome: row.get("outcome")?,
        error: row.get("error")?,
    })
}

fn step_from_row(row: &Row<'_>) -> rusqlite::Result<StepRecord> {
    Ok(StepRecord {
        id: row.get("id")?,
        operation: row.get("operation")?,
        wave: row.get("wave")?,
        component: row.get("component")?,
        action: row.get("action")?,
        started_at_ms: row.get("started_at_ms")?,
        ended_at_ms: row.get("ended_at_ms")?,
        outcome: row.get("outcome")?,
        evidence: json_column(row, 8)?,
    })
}

/// Decodes the JSON text in column `idx`.
fn json_column<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
}

/// Encodes `value` as JSON text.
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(
    value: &T,
    what: &'static str,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|source| StoreError::Json { what, source })
}

/// The outcome of operation `id`, if it exists.
fn operation_outcome(conn: &Connection, id: OperationId) -> rusqlite::Result<Option<Outcome>> {
    conn.query_row(
        "SELECT outcome FROM operations WHERE id = ?1",
        [id],
        |row| row.get(0),
    )
    .optional()
}

/// Ok when operation `id` exists and has not finished yet.
fn require_running(conn: &Connection, id: OperationId) -> Result<(), TxError> {
    match operation_outcome(conn, id)? {
        None => Err(StoreError::UnknownOperation(id).into()),
        Some(o) if o.is_final() => {
            Err(StoreError::OperationAlreadyFinished { id, outcome: o }.into())
        }
        Some(_) => Ok(()),
    }
}

/// A limit as SQLite wants it (`usize::MAX` and the like mean "no limit").
pub(crate) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// How the command line of an agent's supervised restart begins (`flotilla agent:
/// supervise: restart llm after pid 4242 killed by SIGKILL (restart 1 of 10)`).
pub const SUPERVISED_RESTART: &str = "flotilla agent: supervise: restart ";

impl Store {
    /// Journals an operation before its first step runs, as [`Outcome::Running`].
    /// Returns its id (ids increase and are never reused).
    ///
    /// `op` must hold no secrets (see [`NewOperation`]).
    ///
    /// # Errors
    /// [`StoreError::Busy`] on lock contention, [`StoreError::Sqlite`] otherwise.
    pub fn begin_operation(&mut self, op: &NewOperation) -> Result<OperationId, StoreError> {
        let flags = to_json(&op.flags, "operation flags")?;
        self.write("begin an operation", |tx| {
            tx.execute(
                "INSERT INTO operations (verb, target, flags, plan_digest, topology_digest, \
                 plan_json, who, pid, command_line, started_at_ms, outcome) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'running')",
                params![
                    op.verb,
                    op.target,
                    flags,
                    op.plan_digest,
                    op.topology_digest,
                    op.plan_json,
                    op.who,
                    op.pid,
                    op.command_line,
                    op.started_at_ms,
                ],
            )?;
            Ok(OperationId(tx.last_insert_rowid()))
        })
    }

    /// Records how operation `id` ended: `outcome` (final), `ended_at_ms` (ms
    /// since the Unix epoch) and, when it failed, a one-line `error` (no secrets).
    /// Its steps are left as they are: finish them first.
    ///
    /// # Errors
    /// - [`StoreError::NotAFinalOutcome`] for [`Outcome::Running`].
    /// - [`StoreError::UnknownOperation`] if there is no such operation.
    /// - [`StoreError::OperationAlreadyFinished`] if it already has a final outcome
    ///   (e.g. another process marked it interrupted).
    /// - [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn finish_operation(
        &mut self,
        id: OperationId,
        outcome: Outcome,
        ended_at_ms: i64,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        if !outcome.is_final() {
            return Err(StoreError::NotAFinalOutcome(outcome));
        }
        self.write("finish an operation", |tx| {
            require_running(tx, id)?;
            tx.execute(
                "UPDATE operations SET outcome = ?2, ended_at_ms = ?3, error = ?4 WHERE id = ?1",
                params![id, outcome, ended_at_ms, error],
            )?;
            Ok(())
        })
    }

    /// Journals a step of operation `op` before it runs, as [`Outcome::Running`]
    /// with `null` evidence. Returns its id.
    ///
    /// # Errors
    /// - [`StoreError::UnknownOperation`] if there is no such operation.
    /// - [`StoreError::OperationAlreadyFinished`] if `op` already has a final outcome.
    /// - [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn begin_step(&mut self, op: OperationId, step: &NewStep) -> Result<StepId, StoreError> {
        self.write("begin a step", |tx| {
            require_running(tx, op)?;
            tx.execute(
                "INSERT INTO steps (operation, wave, component, action, started_at_ms, outcome) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 'running')",
                params![
                    op,
                    step.wave,
                    step.component,
                    step.action,
                    step.started_at_ms
                ],
            )?;
            Ok(StepId(tx.last_insert_rowid()))
        })
    }

    /// Records how step `id` ended: `outcome` (final), `ended_at_ms` (ms since the
    /// Unix epoch) and its `evidence` (what was observed: probe results, measured
    /// identity…; any JSON value, no secrets).
    ///
    /// # Errors
    /// - [`StoreError::NotAFinalOutcome`] for [`Outcome::Running`].
    /// - [`StoreError::UnknownStep`] if there is no such step.
    /// - [`StoreError::StepAlreadyFinished`] if it already has a final outcome.
    /// - [`StoreError::Json`] if `evidence` cannot be encoded.
    /// - [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn finish_step(
        &mut self,
        id: StepId,
        outcome: Outcome,
        ended_at_ms: i64,
        evidence: &serde_json::Value,
    ) -> Result<(), StoreError> {
        if !outcome.is_final() {
            return Err(StoreError::NotAFinalOutcome(outcome));
        }
        let evidence = to_json(evidence, "step evidence")?;
        self.write("finish a step", |tx| {
            let current: Option<Outcome> = tx
                .query_row("SELECT outcome FROM steps WHERE id = ?1", [id], |row| {
                    row.get(0)
                })
                .optional()?;
            match current {
                None => return Err(StoreError::UnknownStep(id).into()),
                Some(o) if o.is_final() => {
                    return Err(StoreError::StepAlreadyFinished { id, outcome: o }.into())
                }
                Some(_) => {}
            }
            tx.execute(
                "UPDATE steps SET outcome = ?2, ended_at_ms = ?3, evidence = ?4 WHERE id = ?1",
                params![id, outcome, ended_at_ms, evidence],
            )?;
            Ok(())
        })
    }

    /// The `limit` most recent operations, newest first (by id, i.e. the order
    /// they were begun in, whatever their timestamps say).
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`] (including a row that does not
    /// decode).
    pub fn operations(&self, limit: usize) -> Result<Vec<OperationRecord>, StoreError> {
        self.read("list operations", |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {OPERATION_COLUMNS} FROM operations ORDER BY id DESC LIMIT ?1"
            ))?;
            let rows = stmt.query_map([sql_limit(limit)], operation_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// Per component, how many times its supervisor (the agent) restarted it since
    /// the last other operation that acted on it: the succeeded operations whose
    /// command line starts with [`SUPERVISED_RESTART`] and whose target is the
    /// component, counted after the newest operation that is not one and has a step
    /// on the component (one targeting it, or a cascade or a stack that reached it).
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn supervised_restarts(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        self.read("count supervised restarts", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT o.target, COUNT(*) FROM operations o \
                 WHERE o.outcome = 'succeeded' AND substr(o.command_line, 1, ?2) = ?1 \
                 AND o.id > COALESCE((SELECT MAX(s.operation) FROM steps s \
                     JOIN operations p ON p.id = s.operation \
                     WHERE s.component = o.target AND substr(p.command_line, 1, ?2) != ?1), 0) \
                 GROUP BY o.target",
            )?;
            let rows = stmt.query_map(
                rusqlite::params![SUPERVISED_RESTART, SUPERVISED_RESTART.len() as i64],
                |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)? as u64)),
            )?;
            Ok(rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()?)
        })
    }

    /// Operation `id` and its steps (ordered by wave, then by the order they were
    /// begun in), read from one snapshot; `None` if there is no such operation.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn operation(
        &self,
        id: OperationId,
    ) -> Result<Option<(OperationRecord, Vec<StepRecord>)>, StoreError> {
        self.read("read an operation", |conn| {
            let snapshot = conn.unchecked_transaction()?;
            let op = snapshot
                .prepare_cached(&format!(
                    "SELECT {OPERATION_COLUMNS} FROM operations WHERE id = ?1"
                ))?
                .query_row([id], operation_from_row)
                .optional()?;
            let Some(op) = op else { return Ok(None) };
            let steps = snapshot
                .prepare_cached(&format!(
                    "SELECT {STEP_COLUMNS} FROM steps WHERE operation = ?1 ORDER BY wave, id"
                ))?
                .query_map([id], step_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(Some((op, steps)))
        })
    }

    /// Whether operation `id` is in the journal (one indexed lookup; nothing decoded).
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn has_operation(&self, id: OperationId) -> Result<bool, StoreError> {
        self.read("look an operation up", |conn| {
            Ok(conn
                .prepare_cached("SELECT 1 FROM operations WHERE id = ?1")?
                .exists([id])?)
        })
    }

    /// The plan operation `id` applied, as the JSON text given to
    /// [`Store::begin_operation`]; `None` if there is no such operation.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn operation_plan(&self, id: OperationId) -> Result<Option<String>, StoreError> {
        self.read("read an operation's plan", |conn| {
            Ok(conn
                .query_row(
                    "SELECT plan_json FROM operations WHERE id = ?1",
                    [id],
                    |row| row.get(0),
                )
                .optional()?)
        })
    }

    /// Every operation still [`Outcome::Running`], oldest first. Some may really be
    /// running (another process), others were interrupted (their process died):
    /// the store does no IO beyond SQL, so the caller tells them apart (e.g. by
    /// checking whether `pid` is alive) and calls [`Store::mark_interrupted`].
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn unfinished_operations(&self) -> Result<Vec<OperationRecord>, StoreError> {
        self.read("list unfinished operations", |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {OPERATION_COLUMNS} FROM operations WHERE outcome = 'running' ORDER BY id"
            ))?;
            let rows = stmt.query_map([], operation_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// For every component the journal has acted on, its newest step other than a
    /// `no-op` (a no-op leaves a component as it was), with how that step's
    /// operation ended and where the operation failed, in one query. Ordered by
    /// component name.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn last_steps(&self) -> Result<Vec<LastStep>, StoreError> {
        self.read("read each component's last step", |conn| {
            // Each operation's first failed step is looked up once per operation
            // (`first_failed`), not once per component: 200 components started by one
            // operation would otherwise scan its 200 steps 200 times.
            let mut stmt = conn.prepare_cached(
                "WITH last AS (SELECT component, MAX(id) AS id FROM steps \
                               WHERE action <> 'no-op' GROUP BY component), \
                      first_failed AS MATERIALIZED ( \
                          SELECT o.id AS operation, \
                                 (SELECT MIN(id) FROM steps WHERE operation = o.id \
                                  AND outcome IN ('failed', 'interrupted')) AS id \
                          FROM operations AS o \
                          WHERE o.id IN (SELECT s.operation FROM last \
                                         JOIN steps AS s ON s.id = last.id)) \
                 SELECT s.component, s.id, s.action, s.outcome, s.started_at_ms, \
                        CASE WHEN json_valid(s.evidence) \
                             THEN json_extract(s.evidence, '$.summary') END, \
                        o.id, o.command_line, o.pid, o.outcome, o.error, \
                        f.component, \
                        CASE WHEN json_valid(f.evidence) \
                             THEN json_extract(f.evidence, '$.summary') END \
                 FROM last \
                 JOIN steps AS s ON s.id = last.id \
                 JOIN operations AS o ON o.id = s.operation \
                 LEFT JOIN first_failed AS ff ON ff.operation = o.id \
                 LEFT JOIN steps AS f ON f.id = ff.id \
                 ORDER BY s.component",
            )?;
            let text = |row: &Row<'_>, i: usize| -> rusqlite::Result<Option<String>> {
                // A summary that is not a JSON string (never written so) reads as absent.
                Ok(match row.get_ref(i)? {
                    rusqlite::types::ValueRef::Text(t) => {
                        Some(String::from_utf8_lossy(t).into_owned())
                    }
                    _ => None,
                })
            };
            let rows = stmt.query_map([], |row| {
                Ok(LastStep {
                    component: row.get(0)?,
                    step: row.get(1)?,
                    action: row.get(2)?,
                    step_outcome: row.get(3)?,
                    step_started_at_ms: row.get(4)?,
                    step_summary: text(row, 5)?,
                    operation: row.get(6)?,
                    command_line: row.get(7)?,
                    operation_pid: row.get(8)?,
                    operation_outcome: row.get(9)?,
                    operation_error: row.get(10)?,
                    failed_component: row.get(11)?,
                    failed_summary: text(row, 12)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// Marks operation `id`, and each of its steps still running, as
    /// [`Outcome::Interrupted`], ended at `noticed_at_ms` (ms since the Unix epoch,
    /// when the caller noticed), in one transaction. The operation's `error` is
    /// left empty. A no-op if it already has a final outcome (another process may
    /// have marked it first).
    ///
    /// # Errors
    /// [`StoreError::UnknownOperation`] if there is no such operation;
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn mark_interrupted(
        &mut self,
        id: OperationId,
        noticed_at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write("mark an operation interrupted", |tx| {
            match operation_outcome(tx, id)? {
                None => return Err(StoreError::UnknownOperation(id).into()),
                Some(o) if o.is_final() => return Ok(()),
                Some(_) => {}
            }
            tx.execute(
                "UPDATE steps SET outcome = 'interrupted', ended_at_ms = ?2 \
                 WHERE operation = ?1 AND outcome = 'running'",
                params![id, noticed_at_ms],
            )?;
            tx.execute(
                "UPDATE operations SET outcome = 'interrupted', ended_at_ms = ?2 WHERE id = ?1",
                params![id, noticed_at_ms],
            )?;
            Ok::<_, TxError>(())
        })
    }
}
