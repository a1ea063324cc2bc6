//! Stacks: the order a stack's components actually started in, so that `down`
//! can stop them in reverse.
//!
//! Tables `stacks` and `stack_members`.

use crate::error::StoreError;
use crate::store::Store;
use flotilla_model::status::StackRecord;
use rusqlite::params;
use std::collections::BTreeMap;

impl Store {
    /// Records that `stack` was brought up at `at_ms` (ms since the Unix epoch),
    /// its components having started in `order` (dependencies included),
    /// replacing any previous record of that stack, in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn record_stack_start(
        &mut self,
        stack: &str,
        order: &[String],
        at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write("record a stack start", |tx| {
            tx.execute(
                "INSERT INTO stacks (stack, started_at_ms) VALUES (?1, ?2) \
                 ON CONFLICT (stack) DO UPDATE SET started_at_ms = excluded.started_at_ms",
                params![stack, at_ms],
            )?;
            tx.execute("DELETE FROM stack_members WHERE stack = ?1", [stack])?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO stack_members (stack, position, component) VALUES (?1, ?2, ?3)",
            )?;
            for (position, component) in order.iter().enumerate() {
                insert.execute(params![stack, position as i64, component])?;
            }
            Ok(())
        })
    }

    /// Every stack recorded as brought up, with its start order.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn stack_records(&self) -> Result<BTreeMap<String, StackRecord>, StoreError> {
        self.read("read stack records", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT s.stack, m.component FROM stacks s \
                 LEFT JOIN stack_members m ON m.stack = s.stack \
                 ORDER BY s.stack, m.position",
            )?;
            let mut rows = stmt.query([])?;
            let mut out: BTreeMap<String, StackRecord> = BTreeMap::new();
            while let Some(row) = rows.next()? {
                let stack: String = row.get(0)?;
                let component: Option<String> = row.get(1)?;
                let record = out.entry(stack).or_default();
                record.start_order.extend(component);
            }
            Ok(out)
        })
    }

    /// Forgets the start order of `stack` (after it was brought down). A no-op if
    /// there is none.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn clear_stack(&mut self, stack: &str) -> Result<(), StoreError> {
        self.write("clear a stack record", |tx| {
            tx.execute("DELETE FROM stacks WHERE stack = ?1", [stack])?;
            Ok(())
        })
    }
}
