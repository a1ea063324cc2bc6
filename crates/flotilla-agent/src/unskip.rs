//! Unskip requests, the agent's side (`flotilla release unskip VERSION --host H`).
//!
//! A version that rolled back on this host is kept in its install root's `skip.json`
//! and refused `Skipped` from then on ([`flotilla_release::InstallRoot::add_skip`]).
//! An operator allows it again through the authority: the request comes in the
//! release long poll's answer (`ReleaseAssignment::unskip`), and in every answer
//! after until the authority sees it done. For each request the updater
//! ([`Updater::unskip`]):
//!
//! 1. removes every entry of that release name and version from the skip lists it
//!    concerns — the agent's own install root's for `flotilla-agent`, else those of the
//!    component install roots that keep that release — each under `<root>/update.lock`
//!    (a root whose update is in progress, lock held, is left for a later answer: the
//!    update may still add to the list);
//! 2. logs what it removed, and keeps the outcome ([`UnskipOutcome`]: the entries
//!    removed, or why a list could not be changed) for as long as the authority sends
//!    the request;
//! 3. reports: the `HostUpdate` it posts carries every entry of this host's skip lists
//!    (`skipped`) and those outcomes (`unskipped`); the authority marks the request done
//!    from a report that has its outcome without error and no such entry left.
//!
//! A request is carried out once per agent process; one that failed is tried again at
//! every answer.

use crate::record::{try_lock, AGENT_RELEASE};
use crate::update::{ReleaseSource, Updater};
use flotilla_api::wire::UnskipRequest;
use flotilla_release::{InstallRoot, SkipEntry, UnskipOutcome};

impl<S: ReleaseSource> Updater<S> {
    /// Carries out the unskip requests of the authority's latest release answer (see
    /// the module docs) and forgets the outcomes of requests it no longer sends;
    /// whether what this agent reports changed.
    pub(crate) fn unskip(&self, requests: &[UnskipRequest]) -> bool {
        let mut outcomes = self.unskipped.lock().expect("not poisoned");
        let before = outcomes.len();
        outcomes.retain(|id, _| requests.iter().any(|r| r.id == *id));
        let mut changed = outcomes.len() != before;
        for r in requests {
            if outcomes.get(&r.id).is_some_and(|o| o.error.is_none()) {
                continue; // done by this process already
            }
            let Some(outcome) = self.clear_skips(r) else {
                continue;
            };
            if outcomes.get(&r.id) != Some(&outcome) {
                changed = true;
            }
            outcomes.insert(r.id, outcome);
        }
        changed
    }

    /// Removes release `r.name` at `r.version` from every skip list it concerns; `None`
    /// when one of them is locked by an update in progress (tried again later).
    fn clear_skips(&self, r: &UnskipRequest) -> Option<UnskipOutcome> {
        let mut cleared = Vec::new();
        let mut errors = Vec::new();
        for root in self.skip_roots(Some(&r.name)) {
            if !root.root().is_dir() {
                continue; // never installed: no skip list
            }
            let lock = match try_lock(&root) {
                Ok(Some(lock)) => lock,
                Ok(None) => {
                    self.log_once(&format!(
                        "unskip {}: {} {} waits: an update holds {}",
                        r.id,
                        r.name,
                        r.version,
                        root.lock_path().display()
                    ));
                    return None;
                }
                Err(e) => {
                    errors.push(format!("{}: {e}", root.lock_path().display()));
                    continue;
                }
            };
            match root.remove_skip(&r.name, &r.version) {
                Ok(removed) => cleared.extend(removed),
                Err(e) => errors.push(e.to_string()),
            }
            drop(lock);
        }
        let error = (!errors.is_empty()).then(|| errors.join("; "));
        match &error {
            Some(e) => self.log_once(&format!(
                "unskip {}: {} {} could not be cleared: {e}",
                r.id, r.name, r.version
            )),
            None if cleared.is_empty() => (self.cfg.log)(&format!(
                "unskip {}: no skip list of this host holds {} {}: nothing to clear",
                r.id, r.name, r.version
            )),
            None => (self.cfg.log)(&format!(
                "unskip {}: {} {} allowed again: removed {} from the skip list{}",
                r.id,
                r.name,
                r.version,
                cleared
                    .iter()
                    .map(|e| format!("sha256:{} ({})", e.sha256, e.reason))
                    .collect::<Vec<_>>()
                    .join(", "),
                if cleared.len() == 1 { "" } else { "s" }
            )),
        }
        Some(UnskipOutcome {
            id: r.id,
            name: r.name.clone(),
            version: r.version.clone(),
            cleared,
            error,
        })
    }

    /// The install roots whose skip lists may hold release `name` (all of this host's
    /// when `None`): the agent's own root for `flotilla-agent`, else the component
    /// install roots that keep it.
    fn skip_roots(&self, name: Option<&str>) -> Vec<InstallRoot> {
        let mut roots = Vec::new();
        if name.is_none_or(|n| n == AGENT_RELEASE) {
            roots.extend(self.cfg.root.clone());
        }
        if name != Some(AGENT_RELEASE) {
            roots.extend(self.component_roots(name));
        }
        roots
    }

    /// Every entry of this host's skip lists, as reported (`HostUpdate::skipped`): the
    /// agent's install root's, then each component install root's. A list that cannot
    /// be read is left out (and logged once).
    pub(crate) fn skip_entries(&self) -> Vec<SkipEntry> {
        let mut out = Vec::new();
        for root in self.skip_roots(None) {
            match root.skip_list() {
                Ok(list) => out.extend(list),
                Err(e) => self.log_once(&format!("skip list: {e}")),
            }
        }
        out
    }

    /// The outcomes of the unskip requests the authority still sends, by id
    /// (`HostUpdate::unskipped`).
    pub(crate) fn unskip_outcomes(&self) -> Vec<UnskipOutcome> {
        self.unskipped
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::AgentDir;
    use crate::supervisor::Supervisor;
    use crate::update::{NoAuthority, UpdaterConfig};
    use flotilla_release::Reason;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    fn entry(version: &str, sha: &str) -> SkipEntry {
        SkipEntry {
            name: AGENT_RELEASE.into(),
            version: version.into(),
            sha256: sha.repeat(32),
            reason: Reason::CrashLoop,
            at_ms: 1,
        }
    }

    fn request(id: u64, version: &str) -> UnskipRequest {
        UnskipRequest {
            id,
            name: AGENT_RELEASE.into(),
            version: version.into(),
        }
    }

    /// An updater of an agent that runs from `root` (no authority, no components);
    /// what it logs.
    fn updater(
        t: &tempfile::TempDir,
        root: &InstallRoot,
    ) -> (Updater<NoAuthority>, Arc<Mutex<Vec<String>>>) {
        let logged = Arc::new(Mutex::new(Vec::new()));
        let to = Arc::clone(&logged);
        let cfg = UpdaterConfig {
            host: "edge".into(),
            dir: AgentDir::new(&t.path().join("state")),
            state_dir: t.path().join("state"),
            root: Some(root.clone()),
            keys: None,
            supervisor: Supervisor::None,
            wait: Duration::from_secs(30),
            report_every: Duration::from_secs(30),
            log: Arc::new(move |l| to.lock().unwrap().push(l.to_string())),
            watchdog_program: Some("/bin/true".into()),
            backups: None,
            components: None,
        };
        (Updater::start(cfg, Arc::new(NoAuthority)).unwrap(), logged)
    }

    #[test]
    fn a_request_clears_the_skip_list_once_and_is_reported_while_sent() {
        let t = tempfile::tempdir().unwrap();
        let root = InstallRoot::new(t.path().join("root"), "flotilla");
        let (a, b) = (entry("2.0.0", "aa"), entry("2.1.0", "bb"));
        root.add_skip(a.clone()).unwrap();
        root.add_skip(b.clone()).unwrap();
        let (u, logged) = updater(&t, &root);
        assert_eq!(u.host_update().skipped, vec![a.clone(), b.clone()]);
        assert!(u.host_update().unskipped.is_empty());

        assert!(u.unskip(&[request(3, "2.0.0")]));
        assert_eq!(root.skip_list().unwrap(), vec![b.clone()]);
        let reported = u.host_update();
        assert_eq!(reported.skipped, vec![b.clone()]);
        let done = UnskipOutcome {
            id: 3,
            name: AGENT_RELEASE.into(),
            version: "2.0.0".into(),
            cleared: vec![a.clone()],
            error: None,
        };
        assert_eq!(reported.unskipped, vec![done.clone()]);
        assert!(
            logged
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("unskip 3: flotilla-agent 2.0.0 allowed again")),
            "{logged:?}"
        );
        // Sent again (the authority has not seen the report yet): carried out once, so
        // a rollback that added it again since is not undone.
        root.add_skip(a.clone()).unwrap();
        assert!(!u.unskip(&[request(3, "2.0.0")]));
        assert_eq!(root.skip_list().unwrap(), vec![b.clone(), a.clone()]);
        assert_eq!(u.host_update().unskipped, vec![done]);
        // No longer sent (done at the authority): forgotten.
        assert!(u.unskip(&[]));
        assert!(u.host_update().unskipped.is_empty());
        // A version on no list: nothing cleared, still an answer.
        assert!(u.unskip(&[request(4, "9.9.9")]));
        assert_eq!(u.host_update().unskipped[0].cleared, vec![]);
        assert_eq!(u.host_update().unskipped[0].error, None);
    }

    #[test]
    fn a_locked_root_waits_and_an_unreadable_list_is_an_error_tried_again() {
        let t = tempfile::tempdir().unwrap();
        let root = InstallRoot::new(t.path().join("root"), "flotilla");
        let b = entry("2.1.0", "bb");
        root.add_skip(b.clone()).unwrap();
        let (u, _) = updater(&t, &root);
        // An update holds the root's lock: nothing is done or answered yet.
        let lock = try_lock(&root).unwrap().expect("free");
        assert!(!u.unskip(&[request(5, "2.1.0")]));
        assert_eq!(root.skip_list().unwrap(), vec![b.clone()]);
        assert!(u.host_update().unskipped.is_empty());
        drop(lock);
        assert!(u.unskip(&[request(5, "2.1.0")]));
        assert!(root.skip_list().unwrap().is_empty());

        std::fs::write(root.skip_path(), "not json").unwrap();
        assert!(u.unskip(&[request(6, "2.1.0")]));
        let failed = u.host_update().unskipped;
        let error = failed
            .iter()
            .find(|o| o.id == 6)
            .and_then(|o| o.error.clone())
            .expect("an error");
        assert!(error.contains("skip.json"), "{error}");
        // Tried again at every answer: the same error changes nothing reported…
        assert!(!u.unskip(&[request(6, "2.1.0")]));
        // …and once the list is readable again, it is carried out.
        root.add_skip(b.clone()).unwrap_err();
        std::fs::write(root.skip_path(), "[]").unwrap();
        root.add_skip(b.clone()).unwrap();
        assert!(u.unskip(&[request(6, "2.1.0")]));
        assert!(root.skip_list().unwrap().is_empty());
        assert_eq!(u.host_update().unskipped[0].cleared, vec![b]);
    }
}
