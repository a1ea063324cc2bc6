//! An assignment of the agent's own release taken as far as this process goes:
//! verified, already running (nothing to restart) or skipped, downloaded and staged as
//! a version directory, `update.json` written `Staged`, and the watchdog started.

use super::verify::Verified;
use super::{ReleaseSource, Updater};
use crate::record::{chain, OldAgent, Side, Step, UpdateRecord};
use flotilla_api::wire::Assignment;
use flotilla_release::{InstallRoot, Reason, Refusal, UpdateState, VersionDir};
use std::path::PathBuf;

impl<S: ReleaseSource> Updater<S> {
    /// Verifies, downloads, stages and hands over to the watchdog; the refusal record
    /// otherwise.
    pub(super) async fn apply(&self, a: &Assignment) -> Result<(), Box<UpdateRecord>> {
        let Verified {
            key_id,
            manifest,
            artifact,
        } = self.verify_assignment(a, &self.cfg.dir.acceptance_file(), self.cfg.root.as_ref())?;
        let with_manifest = |r: Refusal| {
            let mut rec = UpdateRecord::refused(a, &r);
            rec.serial = manifest.serial;
            rec.key_id = key_id.clone();
            Box::new(rec)
        };
        let sha = artifact.sha256.clone();
        let with_sha = |r: Refusal| {
            let mut rec = with_manifest(r);
            rec.sha256 = sha.clone();
            rec
        };
        let mut rec = UpdateRecord::downloading(a, &manifest, &key_id, &sha);
        rec.supervisor = self.cfg.supervisor.to_string();
        // 2. Already running it: nothing to restart.
        if self.running.exe_sha256 == format!("sha256:{sha}") {
            rec.state = UpdateState::Updated;
            rec.step = Step::Done;
            rec.evidence.push(format!(
                "pid {} already runs sha256:{sha} (measured): nothing to restart",
                self.running.pid
            ));
            (self.cfg.log)(&format!(
                "release {} {}: this agent already runs it",
                a.name, a.version
            ));
            match &self.cfg.root {
                Some(root) => {
                    if let Err(e) = rec.save(root) {
                        self.log_once(&format!("update: {}", chain(&e)));
                    }
                }
                None => *self.refusal.lock().expect("not poisoned") = Some(rec),
            }
            return Ok(());
        }
        let Some(root) = &self.cfg.root else {
            return Err(with_sha(Refusal::new(
                Reason::InstallFailed,
                "this agent does not run from an install root (flotilla agent install --root DIR, or agent run --install-root DIR)",
            )));
        };
        match root.skipped(&sha) {
            Ok(Some(skip)) => {
                return Err(with_sha(Refusal::new(
                    Reason::Skipped,
                    format!(
                        "{} {} (sha256:{sha}) was rolled back here ({}): never applied again",
                        skip.name, skip.version, skip.reason
                    ),
                )))
            }
            Ok(None) => {}
            Err(e) => {
                return Err(with_sha(Refusal::new(
                    Reason::InstallFailed,
                    format!("skip list: {e}"),
                )))
            }
        }
        let Some(from) = self.running_side(root) else {
            return Err(with_sha(Refusal::new(
                Reason::InstallFailed,
                format!(
                    "this agent's binary is not one of {}'s versions: it cannot be rolled back to",
                    root.root().display()
                ),
            )));
        };
        rec.from = Some(from);
        if let Err(e) = rec.save(root) {
            return Err(with_sha(Refusal::new(Reason::InstallFailed, chain(&e))));
        }
        self.changed.notify_one();
        (self.cfg.log)(&format!(
            "release {} {} (rollout {}, serial {}, signed by {key_id}): downloading sha256:{sha}",
            a.name, a.version, a.rollout, manifest.serial
        ));
        // 3. Download, verify, back the host's state up, stage.
        let tmp = self.download(root, &artifact).await.map_err(&with_sha)?;
        if let Err(why) = self.backup_before_update().await {
            let _ = std::fs::remove_file(&tmp);
            return Err(with_sha(Refusal::new(
                Reason::InstallFailed,
                format!("the backup before the update failed, so nothing was changed: {why}"),
            )));
        }
        let staged = root.stage(&a.version, &sha, &tmp);
        let _ = std::fs::remove_file(&tmp);
        let staged = staged
            .map_err(|e| with_sha(Refusal::new(Reason::InstallFailed, format!("staging: {e}"))))?;
        rec.to = Some(Side::of(&staged, &sha));
        rec.agent = Some(self.old_agent());
        rec.state = UpdateState::Staged;
        rec.step = Step::Staged;
        rec.attempt(format!("staged {}", staged.dir.display()));
        rec.save(root)
            .map_err(|e| with_sha(Refusal::new(Reason::InstallFailed, chain(&e))))?;
        // 4. The watchdog takes over.
        if let Err(e) = self.spawn_watchdog(&rec) {
            return Err(with_sha(Refusal::new(
                Reason::InstallFailed,
                format!("the update watchdog cannot be started: {e}"),
            )));
        }
        (self.cfg.log)(&format!(
            "release {} {} staged in {}; the watchdog runs it on trial through {}",
            a.name,
            a.version,
            staged.dir.display(),
            self.cfg.supervisor
        ));
        Ok(())
    }

    /// Backs up every project's state directory on this host (a new version may
    /// migrate their journals), when [`UpdaterConfig::backups`] says so.
    async fn backup_before_update(&self) -> Result<(), String> {
        let Some(policy) = self.cfg.backups.clone() else {
            return Ok(());
        };
        let base = self.cfg.state_dir.clone();
        let taken = tokio::task::spawn_blocking(move || {
            flotilla_exec::backup::backup_projects_before("self-update", &base, &policy)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| chain(&e))?;
        for w in taken {
            (self.cfg.log)(&format!(
                "backed up project `{}` before the update: {}",
                w.manifest.name,
                w.archive.display()
            ));
        }
        Ok(())
    }

    /// The version directory this process runs from, with its measured digest.
    fn running_side(&self, root: &InstallRoot) -> Option<Side> {
        let exe = flotilla_exec::sys::self_exe()?;
        let exe = flotilla_exec::identity::strip_deleted(&exe).to_path_buf();
        let sha = self.running.exe_sha256.strip_prefix("sha256:")?.to_string();
        for v in [root.current(), root.previous()].into_iter().flatten() {
            if v.binary.canonicalize().ok().as_deref() == Some(exe.as_path()) {
                return Some(Side::of(&v, &sha));
            }
        }
        let versions = root.root().join("versions").canonicalize().ok()?;
        let dir = exe.parent()?;
        if dir.parent()? != versions || exe.file_name()? != root.binary_name() {
            return None;
        }
        let name = dir.file_name()?.to_string_lossy().into_owned();
        let (version, sha12) = name.rsplit_once('-')?;
        Some(Side::of(
            &VersionDir {
                version: version.to_string(),
                sha12: sha12.to_string(),
                dir: dir.to_path_buf(),
                binary: exe.clone(),
            },
            &sha,
        ))
    }

    fn old_agent(&self) -> OldAgent {
        let r = &self.running;
        OldAgent::of(r.pid, r.start_time_ticks, r.exe_sha256.clone()).unwrap_or_else(|| OldAgent {
            pid: r.pid,
            start_time_ticks: r.start_time_ticks,
            exe_sha256: r.exe_sha256.clone(),
            argv: std::env::args().collect(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        })
    }
}
