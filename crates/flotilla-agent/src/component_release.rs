//! Component releases: a release whose name is not `flotilla-agent` updates the
//! program of every component of this host that declares it (`release = { name, root }`
//! in the inventory; its command runs `<root>/current/<name>`).
//!
//! The path is the agent's self-update's ([`crate::update`], [`crate::watch`]), run by
//! the agent itself (a component's restart does not restart the agent, so no watchdog
//! process is needed), one install root at a time, holding `<root>/update.lock`:
//!
//! 1. The same checks before anything is downloaded
//!    ([`crate::update::Updater`]'s `verify_assignment`): the signature FIRST, expiry,
//!    serial (the highest accepted per key is kept per install root, in
//!    `<root>/acceptance.json`: releases of different programs count their serials
//!    apart), this platform's artifact. Components that already run the artifact
//!    (measured) are `Updated` at once; a version in `<root>/skip.json` is `Skipped`.
//! 2. Download into `<root>/downloads/`, size and SHA-256 checked, staged as
//!    `<root>/versions/<version>-<sha12>/<name>`; `<root>/update.json` (an
//!    [`UpdateRecord`]) written `Staged`; every later step is written before the next.
//! 3. Flip (`previous` := `current`, `current` := the new version), then restart each
//!    component of the root through its adapter: one journaled `restart` operation each
//!    (`flotilla agent: release NAME VERSION: restart C`), under the lifecycle lock,
//!    exactly like the agent's other operations.
//! 4. Prove, within the assignment's `timeout`: each component runs (lifecycle
//!    `running`), its main process's executable, measured through `/proc/<pid>/exe` as
//!    `flotilla status` measures it, is the artifact, its readiness probe passes, the
//!    same process over [`STABLE_POLLS`] looks. The previous digest still running after
//!    the restart is `RestartHadNoEffect` (a command that does not run
//!    `<root>/current/<name>`); a component that is not running is `CrashLoop`; no proof
//!    in time is `HealthTimeout`.
//! 5. Soak `min_healthy`: the same processes, still on the artifact, readiness passing;
//!    another process or none is `CrashLoop`, a failing probe `HealthTimeout`.
//!    Then `Updated`, and old versions pruned (three kept besides current and previous).
//! 6. Any failure: `current` := the previous version, each component restarted, the
//!    previous digest proven back (healthy), the bad version added to `skip.json`,
//!    `RolledBack` with the reason and evidence.
//!
//! While a root's update is between `Staged` and its end, the agent's supervision and
//! convergence leave its components alone ([`in_progress`]). An agent killed mid-way
//! finishes or rolls back what it left at its next start ([`Updater::resume_components`]):
//! before the flip nothing changed (the update is taken up again while assigned);
//! after it, a restart interrupted is done again, a soak goes on with the processes it
//! proved, a rollback is finished; so the components end on exactly one of the two
//! versions.
//!
//! Reported in the agent's `HostUpdate`: `releases` (each release name → the measured
//! digest its components run, when they all run the same) and `updates` (each install
//! root's record).

use crate::agent::{observe_components, project, run_operation, OperationSettings};
use crate::drift::AGENT_COMMAND;
use crate::proof::{
    end_rolled_back, rollback_not_proven, set_rolling_back, stamp, AwakeClock, AWAKE_STEP, POLL,
    ROLLBACK_MIN_TIMEOUT_MS, STABLE_POLLS,
};
use crate::record::{chain, now_ms, try_lock, SeenPid, Side, Step, UpdateRecord, KEEP_OLD};
pub use crate::record::{in_progress, install_root};
pub use crate::update::ComponentSettings;
use crate::update::{ReleaseSource, Updater, Verified};
use flotilla_api::wire::Assignment;
use flotilla_exec::statedir::StateDir;
use flotilla_model::status::{ComponentStatus, Health, Lifecycle};
use flotilla_model::Topology;
use flotilla_plan::{Operation, Verb};
use flotilla_release::{InstallRoot, Reason, Refusal, UpdateReport, UpdateState};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long reported component digests are reused before they are measured again.
pub const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// The desired state the agent applied last, ready to operate on.
struct Ctx {
    topology: Arc<Topology>,
    state: StateDir,
    base_dir: PathBuf,
    host: String,
}

/// The components of one install root (in dependency order).
struct Group {
    root: InstallRoot,
    components: Vec<String>,
}

impl Ctx {
    /// The install roots of this host's managed components that declare release `name`
    /// (every release when `None`).
    fn groups(&self, name: Option<&str>) -> Vec<Group> {
        let mut by_root: BTreeMap<PathBuf, Group> = BTreeMap::new();
        for &id in self.topology.order() {
            let c = self.topology.component(id);
            let Some(r) = &c.release else { continue };
            if c.host != self.host || !c.is_managed() || name.is_some_and(|n| n != r.name) {
                continue;
            }
            let root = install_root(c).expect("declares a release");
            by_root
                .entry(root.root().to_path_buf())
                .or_insert_with(|| Group {
                    root,
                    components: Vec::new(),
                })
                .components
                .push(c.name.clone());
        }
        by_root.into_values().collect()
    }
}

/// A failure to roll back from.
struct Failure {
    reason: Reason,
    detail: String,
}

/// What one look at a root's components found.
enum Look {
    /// Every component runs `want`, healthy: the processes.
    Proven(Vec<SeenPid>),
    /// Not yet: why.
    Wait(String),
    /// Failed.
    Fail(Failure),
}

fn fail(reason: Reason, detail: String) -> Look {
    Look::Fail(Failure { reason, detail })
}

/// Judges the components' statuses against digest `want` (`sha256:<hex>`); `old` is the
/// digest whose presence means the restart did nothing (`None` when proving a rollback).
fn judge(statuses: &[ComponentStatus], want: &str, old: Option<&str>) -> Look {
    let mut seen = Vec::new();
    for s in statuses {
        match s.lifecycle {
            Lifecycle::Running => {}
            Lifecycle::Stopped | Lifecycle::Failed => {
                return fail(
                    Reason::CrashLoop,
                    format!("`{}` is {:?} after its restart", s.name, s.lifecycle),
                )
            }
            other => return Look::Wait(format!("`{}` is {other:?}", s.name)),
        }
        let Some(rt) = &s.runtime_identity else {
            return Look::Wait(format!("`{}`: no measured identity yet", s.name));
        };
        let m = &rt.measured;
        if Some(m.exe_sha256.as_str()) == old {
            return fail(
                Reason::RestartHadNoEffect,
                format!(
                    "`{}` was restarted but pid {} still runs the previous version {} (measured {}): does its command run <root>/current/<name>?",
                    s.name,
                    m.pid,
                    m.exe_sha256,
                    m.exe.display()
                ),
            );
        }
        if m.exe_sha256 != want {
            return Look::Wait(format!(
                "`{}`: pid {} runs {}, not {want}",
                s.name, m.pid, m.exe_sha256
            ));
        }
        match s.health {
            Health::Healthy | Health::NotApplicable => {}
            h => {
                return Look::Wait(format!(
                    "`{}`: pid {} runs {want}, health {h:?}",
                    s.name, m.pid
                ))
            }
        }
        seen.push(SeenPid {
            pid: m.pid,
            start_time_ticks: m.start_time_ticks,
            exe_sha256: m.exe_sha256.clone(),
            first_ms: now_ms(),
            ended: None,
        });
    }
    Look::Proven(seen)
}

/// The measured digest of `component`'s recorded process, when it runs.
fn measured_digest(store: &flotilla_store::Store, component: &str) -> Option<String> {
    let rec = store.instance(component).ok().flatten()?;
    let id = flotilla_exec::identity::measure(rec.pid).ok().flatten()?;
    (id.start_time_ticks == rec.start_time_ticks).then_some(id.exe_sha256)
}

impl<S: ReleaseSource> Updater<S> {
    fn settings(&self) -> Option<&ComponentSettings> {
        self.cfg.components.as_ref()
    }

    /// The desired state applied last, with its state directory.
    fn component_context(&self) -> Result<Ctx, String> {
        let settings = self
            .settings()
            .ok_or("this agent does not run component releases")?;
        let applied = self
            .cfg
            .dir
            .load_applied()
            .map_err(|e| chain(&e))?
            .ok_or("no desired state was applied on this host yet")?;
        let topology = crate::source::topology_of(&applied.snapshot).map_err(|e| e.to_string())?;
        let state = StateDir::prepare(settings.state_dir.as_deref(), project(&topology))
            .map_err(|e| format!("state directory: {e}"))?;
        Ok(Ctx {
            host: applied.snapshot.host.clone(),
            topology: Arc::new(topology),
            state,
            base_dir: applied.base_dir,
        })
    }

    /// Each release name's measured digest on this host (`sha256:<hex>`), when all its
    /// components run the same; measured at most every [`MEASURE_EVERY`].
    pub(crate) fn component_digests(&self) -> BTreeMap<String, String> {
        let mut cached = self.component_measured.lock().expect("not poisoned");
        if let Some((at, digests)) = cached.as_ref() {
            if at.elapsed() < MEASURE_EVERY {
                return digests.clone();
            }
        }
        let mut out = BTreeMap::new();
        if let Ok(ctx) = self.component_context() {
            let groups = ctx.groups(None);
            if !groups.is_empty() {
                if let Ok(store) = flotilla_exec::operate::open_store(&ctx.state) {
                    let mut by_name: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
                    for g in &groups {
                        for c in &g.components {
                            by_name
                                .entry(g.root.binary_name().to_string())
                                .or_default()
                                .push(measured_digest(&store, c));
                        }
                    }
                    for (name, digests) in by_name {
                        if let Some(Some(first)) = digests.first() {
                            if digests.iter().all(|d| d.as_ref() == Some(first)) {
                                out.insert(name, first.clone());
                            }
                        }
                    }
                }
            }
        }
        *cached = Some((Instant::now(), out.clone()));
        out
    }

    /// Each component install root's update record, and component refusals kept in
    /// memory (no install root could hold them).
    pub(crate) fn component_reports(&self) -> Vec<UpdateReport> {
        let mut out: Vec<UpdateReport> = self
            .component_refusals
            .lock()
            .expect("not poisoned")
            .values()
            .map(UpdateRecord::report)
            .collect();
        if let Ok(ctx) = self.component_context() {
            for g in ctx.groups(None) {
                if let Ok(Some(rec)) = UpdateRecord::load(&g.root) {
                    out.push(rec.report());
                }
            }
        }
        out
    }

    /// The install roots of this host's components that keep release `name` (every
    /// release when `None`), from the desired state applied last: none before one
    /// was applied.
    pub(crate) fn component_roots(&self, name: Option<&str>) -> Vec<InstallRoot> {
        match self.component_context() {
            Ok(ctx) => ctx.groups(name).into_iter().map(|g| g.root).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn refuse_in_memory(&self, a: &Assignment, refusal: Refusal) -> bool {
        let mut kept = self.component_refusals.lock().expect("not poisoned");
        if kept.get(&a.name).is_some_and(|r| r.is_for(a)) {
            return false;
        }
        (self.cfg.log)(&format!(
            "release {} {} (rollout {}) refused: {refusal}",
            a.name, a.version, a.rollout
        ));
        kept.insert(a.name.clone(), UpdateRecord::refused(a, &refusal));
        true
    }

    fn save_component(&self, root: &InstallRoot, rec: &mut UpdateRecord) {
        if let Err(e) = rec.save(root) {
            self.log_once(&format!("release {}: {}", rec.name, chain(&e)));
        }
        self.changed.notify_one();
    }

    /// Takes component release assignment `a` as far as it goes on every install root of
    /// this host that keeps it (see the module docs); whether a record changed.
    pub(crate) async fn consider_component(&self, a: &Assignment) -> bool {
        let ctx = match self.component_context() {
            Ok(c) => c,
            Err(e) => return self.refuse_in_memory(a, Refusal::new(Reason::InstallFailed, e)),
        };
        let groups = ctx.groups(Some(&a.name));
        if groups.is_empty() {
            return self.refuse_in_memory(
                a,
                Refusal::new(
                    Reason::InstallFailed,
                    format!(
                        "no component of host `{}` declares release `{}` (release = {{ name = \"{}\", root = \"…\" }})",
                        ctx.host, a.name, a.name
                    ),
                ),
            );
        }
        self.component_refusals
            .lock()
            .expect("not poisoned")
            .remove(&a.name);
        let mut changed = false;
        for g in &groups {
            changed |= self.apply_to_root(a, &ctx, g).await;
        }
        changed
    }

    async fn apply_to_root(&self, a: &Assignment, ctx: &Ctx, g: &Group) -> bool {
        if let Ok(Some(rec)) = UpdateRecord::load(&g.root) {
            if rec.is_for(a) && rec.step != Step::Downloading {
                return false; // handled (a replay changes nothing)
            }
            if rec.needs_watchdog() {
                self.log_once(&format!(
                    "release {} {} waits: the update to {} {} in {} is still in progress",
                    a.name,
                    a.version,
                    rec.name,
                    rec.version,
                    g.root.root().display()
                ));
                return false;
            }
        }
        let lock = match try_lock(&g.root) {
            Ok(Some(l)) => l,
            Ok(None) => return false,
            Err(e) => {
                let mut rec = UpdateRecord::refused(
                    a,
                    &Refusal::new(
                        Reason::InstallFailed,
                        format!("{}: {e}", g.root.lock_path().display()),
                    ),
                );
                self.save_component(&g.root, &mut rec);
                return true;
            }
        };
        match self.stage_component(a, ctx, g).await {
            Err(mut rec) => {
                (self.cfg.log)(&format!(
                    "release {} {} (rollout {}) refused for {}: {}: {}",
                    a.name,
                    a.version,
                    a.rollout,
                    g.root.root().display(),
                    rec.reason.map(|r| r.as_str()).unwrap_or("?"),
                    rec.detail
                ));
                self.save_component(&g.root, &mut rec);
            }
            Ok(None) => {}
            Ok(Some(rec)) => self.drive(rec, ctx, g).await,
        }
        drop(lock);
        true
    }

    /// Checks, downloads and stages; `Ok(None)` when the components already run it
    /// (recorded `Updated`), the `Staged` record otherwise.
    async fn stage_component(
        &self,
        a: &Assignment,
        ctx: &Ctx,
        g: &Group,
    ) -> Result<Option<UpdateRecord>, Box<UpdateRecord>> {
        let root = &g.root;
        let Verified {
            key_id,
            manifest,
            artifact,
        } = self.verify_assignment(a, &root.root().join("acceptance.json"), Some(root))?;
        let sha = artifact.sha256.clone();
        let mut rec = UpdateRecord::downloading(a, &manifest, &key_id, &sha);
        let refuse = |rec: &UpdateRecord, r: Refusal| {
            let mut rec = rec.clone();
            rec.state = UpdateState::Refused;
            rec.step = Step::Done;
            rec.reason = Some(r.reason);
            rec.detail = r.detail;
            Box::new(rec)
        };
        let want = format!("sha256:{sha}");
        let statuses = self.look_at(ctx, g).await.unwrap_or_default();
        if !statuses.is_empty() && matches!(judge(&statuses, &want, None), Look::Proven(_)) {
            rec.state = UpdateState::Updated;
            rec.step = Step::Done;
            rec.evidence.push(format!(
                "{}: {} already run {want} (measured), healthy: nothing to restart",
                stamp(),
                g.components.join(", ")
            ));
            self.save_component(root, &mut rec);
            return Ok(None);
        }
        match root.skipped(&sha) {
            Ok(Some(skip)) => {
                return Err(refuse(
                    &rec,
                    Refusal::new(
                        Reason::Skipped,
                        format!(
                            "{} {} ({want}) was rolled back here ({}): never applied again",
                            skip.name, skip.version, skip.reason
                        ),
                    ),
                ))
            }
            Ok(None) => {}
            Err(e) => {
                return Err(refuse(
                    &rec,
                    Refusal::new(Reason::InstallFailed, format!("skip list: {e}")),
                ))
            }
        }
        let Some(current) = root.current() else {
            return Err(refuse(
                &rec,
                Refusal::new(
                    Reason::InstallFailed,
                    format!(
                        "{} has no current version to roll back to",
                        root.current_link().display()
                    ),
                ),
            ));
        };
        let from_sha = flotilla_release::artifact::sha256_file(&current.binary).map_err(|e| {
            refuse(
                &rec,
                Refusal::new(
                    Reason::InstallFailed,
                    format!("{}: {e}", current.binary.display()),
                ),
            )
        })?;
        rec.from = Some(Side::of(&current, &from_sha));
        self.save_component(root, &mut rec);
        (self.cfg.log)(&format!(
            "release {} {} (rollout {}, serial {}, signed by {key_id}) for {}: downloading {want}",
            a.name,
            a.version,
            a.rollout,
            manifest.serial,
            g.components.join(", ")
        ));
        let tmp = self
            .download(root, &artifact)
            .await
            .map_err(|r| refuse(&rec, r))?;
        let staged = root.stage(&a.version, &sha, &tmp);
        let _ = std::fs::remove_file(&tmp);
        let staged = staged.map_err(|e| {
            refuse(
                &rec,
                Refusal::new(Reason::InstallFailed, format!("staging: {e}")),
            )
        })?;
        rec.to = Some(Side::of(&staged, &sha));
        rec.state = UpdateState::Staged;
        rec.step = Step::Staged;
        rec.attempt(format!("staged {}", staged.dir.display()));
        rec.save(root)
            .map_err(|e| refuse(&rec, Refusal::new(Reason::InstallFailed, chain(&e))))?;
        self.changed.notify_one();
        Ok(Some(rec))
    }

    /// Observes the root's components (probes run, identities measured).
    async fn look_at(&self, ctx: &Ctx, g: &Group) -> Result<Vec<ComponentStatus>, String> {
        let host_timeout = self
            .settings()
            .map_or(Duration::from_secs(5), |s| s.host_timeout);
        let (status, _) =
            observe_components(host_timeout, &ctx.topology, &ctx.state, &g.components).await?;
        Ok(status
            .components
            .into_iter()
            .filter(|s| g.components.contains(&s.name))
            .collect())
    }

    /// Restarts each component of the root, one journaled operation each (waiting while
    /// another invocation holds the lifecycle lock, up to `timeout`).
    async fn restart_all(
        &self,
        rec: &mut UpdateRecord,
        ctx: &Ctx,
        g: &Group,
        why: &str,
    ) -> Result<(), String> {
        let Some(settings) = self.settings() else {
            return Err("this agent does not run component releases".into());
        };
        let op_settings = OperationSettings {
            ready_timeout: settings.ready_timeout,
            host_timeout: settings.host_timeout,
            log: Arc::clone(&self.cfg.log),
        };
        let deadline = Instant::now() + Duration::from_millis(rec.timeout_ms.max(1_000));
        for c in &g.components {
            let line = format!(
                "{AGENT_COMMAND}: release {} {}: {why}: restart {c}",
                rec.name, rec.version
            );
            loop {
                let op = Operation::new(Verb::Restart, c.clone());
                match run_operation(
                    &op_settings,
                    &ctx.topology,
                    &ctx.state,
                    &ctx.base_dir,
                    op,
                    line.clone(),
                )
                .await
                {
                    Ok(id) => {
                        rec.attempt(format!("{id}: restart {c} ({why})"));
                        break;
                    }
                    Err(e) if e.locked && Instant::now() < deadline => {
                        self.log_once(&format!("release {}: {}; waiting", rec.name, e.message));
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => {
                        rec.attempt(format!("restart {c} ({why}) failed: {}", e.message));
                        return Err(e.message);
                    }
                }
            }
        }
        Ok(())
    }

    fn fail_component(&self, rec: &mut UpdateRecord, f: Failure) {
        (self.cfg.log)(&format!(
            "release {} {} failed: {}: {}; rolling back",
            rec.name, rec.version, f.reason, f.detail
        ));
        set_rolling_back(rec, f.reason, f.detail);
    }

    /// Runs a staged (or resumed) update of one root to its end, saving every step.
    async fn drive(&self, mut rec: UpdateRecord, ctx: &Ctx, g: &Group) {
        let (Some(from), Some(to)) = (rec.from.clone(), rec.to.clone()) else {
            rec.state = UpdateState::Refused;
            rec.step = Step::Done;
            rec.reason = Some(Reason::InstallFailed);
            rec.detail = "the update record names no previous or new version".into();
            self.save_component(&g.root, &mut rec);
            return;
        };
        loop {
            let before = rec.clone();
            match rec.step.clone() {
                Step::Done | Step::Downloading => return,
                Step::Staged => match g.root.flip(&to.version_dir()) {
                    Ok(()) => {
                        rec.attempt(format!("flip: current → {}", to.dir.display()));
                        rec.state = UpdateState::Restarting;
                        rec.step = Step::Flipped;
                    }
                    Err(e) => self.fail_component(
                        &mut rec,
                        Failure {
                            reason: Reason::InstallFailed,
                            detail: format!("flipping current: {e}"),
                        },
                    ),
                },
                Step::Flipped => {
                    let since = now_ms();
                    match self.restart_all(&mut rec, ctx, g, "update").await {
                        Ok(()) => {
                            rec.step = Step::Proving {
                                since_ms: since,
                                starts_before: None,
                            }
                        }
                        Err(message) => {
                            let reason = match self.look_at(ctx, g).await {
                                Ok(s) if s.iter().any(|s| s.lifecycle != Lifecycle::Running) => {
                                    Reason::CrashLoop
                                }
                                _ => Reason::HealthTimeout,
                            };
                            self.fail_component(
                                &mut rec,
                                Failure {
                                    reason,
                                    detail: format!(
                                        "the restart on the new version failed: {message}"
                                    ),
                                },
                            );
                        }
                    }
                }
                Step::Proving { .. } => self.prove(&mut rec, ctx, g, &to, Some(&from)).await,
                Step::Soaking { .. } => self.soak(&mut rec, ctx, g, &to).await,
                Step::RollBack => {
                    rec.rollbacks += 1;
                    match g.root.set_current(&from.version_dir()) {
                        Ok(()) => {
                            rec.attempt(format!("rollback: current → {}", from.dir.display()))
                        }
                        Err(e) => rec.evidence.push(format!(
                            "{}: pointing current back to {}: {e}",
                            stamp(),
                            from.dir.display()
                        )),
                    }
                    let since = now_ms();
                    if let Err(e) = self.restart_all(&mut rec, ctx, g, "rollback").await {
                        rec.evidence
                            .push(format!("{}: rollback restart: {e}", stamp()));
                    }
                    rec.step = Step::ProvingRollback { since_ms: since };
                }
                Step::ProvingRollback { .. } => self.prove(&mut rec, ctx, g, &from, None).await,
                step @ (Step::Armed | Step::Committing) => self.fail_component(
                    &mut rec,
                    Failure {
                        reason: Reason::InstallFailed,
                        detail: format!(
                            "{step:?} is a step of the agent's own update, not a component's"
                        ),
                    },
                ),
            }
            if rec != before {
                rec.state = match (&rec.step, rec.state) {
                    (Step::Soaking { .. }, _) => UpdateState::Soaking,
                    (_, s) => s,
                };
                self.save_component(&g.root, &mut rec);
            }
        }
    }

    /// Proves `side` runs (the new version when `old` is given, else the previous one
    /// after a rollback), within the timeout from now on an awake clock; moves `rec` on.
    async fn prove(
        &self,
        rec: &mut UpdateRecord,
        ctx: &Ctx,
        g: &Group,
        side: &Side,
        old: Option<&Side>,
    ) {
        let rollback = old.is_none();
        let timeout = if rollback {
            rec.timeout_ms.max(ROLLBACK_MIN_TIMEOUT_MS)
        } else {
            rec.timeout_ms
        };
        let mut clock = AwakeClock::start(AWAKE_STEP);
        let budget = Duration::from_millis(timeout);
        let want = side.measured();
        let old = old.map(Side::measured);
        let mut stable: Option<(Vec<(u32, u64)>, u32)> = None;
        let mut last = String::from("nothing observed");
        loop {
            let look = match self.look_at(ctx, g).await {
                Ok(s) => judge(&s, &want, old.as_deref()),
                Err(e) => Look::Wait(format!("cannot observe: {e}")),
            };
            match look {
                Look::Proven(seen) => {
                    let pids: Vec<(u32, u64)> =
                        seen.iter().map(|s| (s.pid, s.start_time_ticks)).collect();
                    let count = match &mut stable {
                        Some((p, n)) if *p == pids => {
                            *n += 1;
                            *n
                        }
                        _ => {
                            stable = Some((pids, 1));
                            1
                        }
                    };
                    if count >= STABLE_POLLS {
                        let procs: Vec<String> = seen
                            .iter()
                            .zip(&g.components)
                            .map(|(s, c)| {
                                format!("`{c}` pid {} (start {})", s.pid, s.start_time_ticks)
                            })
                            .collect();
                        if rollback {
                            rec.evidence.push(format!(
                                "{}: rolled back: {} run {want}, the previous version {} (measured over {count} looks), readiness passing",
                                stamp(),
                                procs.join(", "),
                                side.version
                            ));
                            end_rolled_back(&g.root, rec);
                            (self.cfg.log)(&format!(
                                "rolled back {} to {}; {} {} is skipped from now on",
                                g.components.join(", "),
                                side.version,
                                rec.name,
                                rec.version
                            ));
                        } else {
                            rec.evidence.push(format!(
                                "{}: proven: {} run {want} (measured over {count} looks), readiness passing",
                                stamp(),
                                procs.join(", ")
                            ));
                            let first = &seen[0];
                            rec.step = Step::Soaking {
                                pid: first.pid,
                                start_time_ticks: first.start_time_ticks,
                                since_ms: now_ms(),
                            };
                            rec.seen = seen;
                        }
                        return;
                    }
                }
                Look::Fail(f) if !rollback => return self.fail_component(rec, f),
                Look::Fail(f) => {
                    stable = None;
                    last = f.detail;
                }
                Look::Wait(why) => {
                    stable = None;
                    last = why;
                }
            }
            if clock.tick() > budget {
                if rollback {
                    if !rollback_not_proven(rec, &want, &last) {
                        end_rolled_back(&g.root, rec);
                    }
                    return;
                }
                return self.fail_component(
                    rec,
                    Failure {
                        reason: Reason::HealthTimeout,
                        detail: format!(
                            "no proof of {want} within {} ms of the restart: {last}",
                            rec.timeout_ms
                        ),
                    },
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Soaks the processes proven (`rec.seen`) for `min_healthy_ms` from now, on an
    /// awake clock.
    async fn soak(&self, rec: &mut UpdateRecord, ctx: &Ctx, g: &Group, to: &Side) {
        let want = to.measured();
        let mut clock = AwakeClock::start(AWAKE_STEP);
        let soak = Duration::from_millis(rec.min_healthy_ms);
        let proven: Vec<(u32, u64)> = rec
            .seen
            .iter()
            .map(|s| (s.pid, s.start_time_ticks))
            .collect();
        loop {
            let awake = clock.tick();
            let statuses = match self.look_at(ctx, g).await {
                Ok(s) => s,
                Err(e) => {
                    rec.evidence
                        .push(format!("{}: soak: cannot observe: {e}", stamp()));
                    Vec::new()
                }
            };
            for (s, &(pid, ticks)) in statuses.iter().zip(&proven) {
                let now_pid = s
                    .runtime_identity
                    .as_ref()
                    .filter(|_| s.lifecycle == Lifecycle::Running)
                    .map(|r| {
                        (
                            r.measured.pid,
                            r.measured.start_time_ticks,
                            r.measured.exe_sha256.clone(),
                        )
                    });
                match now_pid {
                    Some((p, t, d)) if p == pid && t == ticks && d == want => {}
                    Some((p, _, d)) => {
                        return self.fail_component(
                            rec,
                            Failure {
                                reason: Reason::CrashLoop,
                                detail: format!(
                                    "`{}` pid {pid} (proven) was replaced by pid {p} ({d}) during the soak",
                                    s.name
                                ),
                            },
                        )
                    }
                    None => {
                        return self.fail_component(
                            rec,
                            Failure {
                                reason: Reason::CrashLoop,
                                detail: format!(
                                    "`{}` pid {pid} ended during the soak ({:?} after {} ms)",
                                    s.name,
                                    s.lifecycle,
                                    awake.as_millis()
                                ),
                            },
                        )
                    }
                }
                if s.health == Health::Unhealthy {
                    let saw = s
                        .evidence
                        .iter()
                        .rev()
                        .find(|e| e.signal == flotilla_model::status::Signal::Health)
                        .map(|e| e.saw.clone())
                        .unwrap_or_default();
                    return self.fail_component(
                        rec,
                        Failure {
                            reason: Reason::HealthTimeout,
                            detail: format!(
                                "`{}` pid {pid} became unhealthy during the soak: {saw}",
                                s.name
                            ),
                        },
                    );
                }
            }
            if awake >= soak {
                rec.evidence.push(format!(
                    "{}: soaked {} ms: {} still run {want}, healthy",
                    stamp(),
                    rec.min_healthy_ms,
                    g.components.join(", ")
                ));
                rec.state = UpdateState::Updated;
                rec.step = Step::Done;
                rec.attempt("updated");
                if let Err(e) = g.root.prune(KEEP_OLD) {
                    rec.evidence.push(format!("{}: prune: {e}", stamp()));
                }
                (self.cfg.log)(&format!(
                    "release {} {}: {} updated",
                    rec.name,
                    rec.version,
                    g.components.join(", ")
                ));
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// At start: finishes or rolls back the component updates a killed agent left
    /// (see the module docs); whether anything was resumed.
    pub(crate) async fn resume_components(&self) -> bool {
        let Ok(ctx) = self.component_context() else {
            return false;
        };
        let mut resumed = false;
        for g in ctx.groups(None) {
            let Ok(Some(mut rec)) = UpdateRecord::load(&g.root) else {
                continue;
            };
            if !rec.needs_watchdog() && rec.step != Step::Downloading {
                continue;
            }
            let Ok(Some(lock)) = try_lock(&g.root) else {
                continue;
            };
            (self.cfg.log)(&format!(
                "release {} {} in {} stopped at {:?}: taking it up again",
                rec.name,
                rec.version,
                g.root.root().display(),
                rec.step
            ));
            rec.evidence.push(format!(
                "{}: the agent restarted during {:?}",
                stamp(),
                rec.step
            ));
            rec.step = match rec.step.clone() {
                // Nothing switched yet: taken up again while it is assigned.
                Step::Downloading | Step::Staged => {
                    rec.state = UpdateState::Downloading;
                    self.save_component(&g.root, &mut rec);
                    drop(lock);
                    resumed = true;
                    continue;
                }
                // A restart that may not have happened: done again.
                Step::Proving { .. } => Step::Flipped,
                Step::ProvingRollback { .. } => Step::RollBack,
                other => other,
            };
            self.save_component(&g.root, &mut rec);
            self.drive(rec, &ctx, &g).await;
            drop(lock);
            resumed = true;
        }
        resumed
    }
}
