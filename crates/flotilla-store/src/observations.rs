//! The last observation of each component on a remote host: what `status` shows,
//! with its age, while that host cannot be reached.
//!
//! Table `host_observations`. The status itself is opaque JSON to the store.

use crate::error::StoreError;
use crate::store::Store;
use rusqlite::params;

/// One component as last observed on a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostObservation {
    /// The component.
    pub component: String,
    /// Its status then, as JSON.
    pub status_json: String,
    /// When, ms since the Unix epoch.
    pub observed_at_ms: i64,
}

impl Store {
    /// Records what `host` showed at `at_ms` for each `(component, status JSON)`,
    /// replacing earlier rows of those components (others are kept: an observation
    /// of some components does not forget the rest), in one transaction.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn record_host_observations(
        &mut self,
        host: &str,
        statuses: &[(String, String)],
        at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write("record host observations", |tx| {
            let mut upsert = tx.prepare_cached(
                "INSERT INTO host_observations (host, component, status, observed_at_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (host, component) DO UPDATE SET \
                 status = excluded.status, observed_at_ms = excluded.observed_at_ms",
            )?;
            for (component, status) in statuses {
                upsert.execute(params![host, component, status, at_ms])?;
            }
            Ok(())
        })
    }

    /// What `host` last showed, per component, in name order.
    ///
    /// # Errors
    /// [`StoreError::Busy`] / [`StoreError::Sqlite`].
    pub fn host_observations(&self, host: &str) -> Result<Vec<HostObservation>, StoreError> {
        self.read("read host observations", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT component, status, observed_at_ms FROM host_observations \
                 WHERE host = ?1 ORDER BY component",
            )?;
            let rows = stmt.query_map([host], |row| {
                Ok(HostObservation {
                    component: row.get(0)?,
                    status_json: row.get(1)?,
                    observed_at_ms: row.get(2)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_replace_per_component_and_keep_the_rest() {
        let mut s = Store::open_in_memory().unwrap();
        s.record_host_observations(
            "h1",
            &[("a".into(), "{\"x\":1}".into()), ("b".into(), "{}".into())],
            10,
        )
        .unwrap();
        s.record_host_observations("h1", &[("a".into(), "{\"x\":2}".into())], 20)
            .unwrap();
        let got = s.host_observations("h1").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].status_json, "{\"x\":2}");
        assert_eq!(got[0].observed_at_ms, 20);
        assert_eq!(got[1].observed_at_ms, 10);
        assert!(s.host_observations("h2").unwrap().is_empty());
    }
}
