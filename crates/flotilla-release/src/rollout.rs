//! The authority's rollout state machine (pure: no IO, no clock; `now_ms` arguments are
//! milliseconds since the Unix epoch on the authority's clock).
//!
//! A [`Rollout`] applies one release to a host set frozen at creation:
//!
//! - created [`Phase::AwaitingApproval`]; [`Rollout::approve`] makes it
//!   [`Phase::InProgress`] and fails (at once) every host whose platform has no artifact;
//! - canaries (the first `canary` hosts, in the order given) go first: no other host
//!   starts before every canary is [`HostPhase::Updated`]; at most `max_in_flight` hosts
//!   are [`HostPhase::Updating`] at once, canaries included;
//! - an Updating host becomes Updated when its latest [`HostUpdate`] shows the artifact's
//!   digest as the **measured** running identity and has for `min_healthy_ms` (the soak
//!   clock starts at the first report carrying that identity, not when the step was
//!   sent), and its update report for this artifact, sent since the step was sent, says
//!   [`UpdateState::Updated`] — the agent's word that it verified the release (signature
//!   by a pinned key, expiry, serial, skip list): a host that already runs the
//!   artifact's digest still needs it (it soaks from the report that showed the digest);
//! - RolledBack / Failed come from the agent's report ([`UpdateState::RolledBack`],
//!   [`UpdateState::Refused`]) or from the timeout ([`Reason::HealthTimeout`]: no
//!   measured identity `2 × timeout_ms + min_healthy_ms` after the host's first report
//!   since the step was sent — the agent holds `timeout_ms` itself and rolls back on
//!   its own, this is the backstop for an agent that reports but never proves — or the
//!   soak not confirmed `timeout_ms` after it should have ended). The backstop fires
//!   only on a report received after its deadline: a host that says nothing (asleep,
//!   partitioned, or the authority itself frozen) stays Updating, with the time it was
//!   last heard from, and is judged when it speaks again — its silence cannot be told
//!   from the authority's own, and a good build must not fail for it;
//! - the first failure or rollback halts the rollout ([`Phase::Failed`], `halted` = the
//!   reason): nothing more starts, hosts already Updating go on to their end
//!   ([`Rollout::is_settled`] tells when they all have); [`Rollout::abort`] halts with
//!   `Aborted`; [`Phase::Paused`] starts nothing; all hosts Updated is
//!   [`Phase::Succeeded`].
//!
//! Component releases: a release whose name is not [`AGENT_RELEASE`] updates the
//! components of each host that declare it (`release = { name, root }`); the measured
//! identity is then [`HostUpdate::releases`]`[name]` and the agent's report of it is in
//! [`HostUpdate::updates`] (one per install root: the worst one decides).
//!
//! Rollbacks: [`Rollout::rollback_hosts`] names the hosts a settled rollout changed
//! (it measured them on its artifact, and they ran another digest when they were
//! started: [`HostRollout::before_sha256`]) with the digest each ran before; the
//! authority finds the release of each of those digests and makes a new rollout
//! ([`Rollout::new_rollback`]) whose hosts each carry their own [`HostTarget`] and
//! which records the rollout it reverses ([`Rollout::rollback_of`]). It goes through
//! the same approval, canaries, concurrency and health gate as any rollout.
//!
//! Digests: artifact digests are 64 lowercase hex (the manifest's form); measured
//! identities are `sha256:<hex>`. Comparisons ignore the prefix and case.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::install::SkipEntry;
use crate::reason::Reason;

/// What to roll out, where and how fast (the operator's request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutSpec {
    /// Release name (the manifest's `name`).
    pub name: String,
    /// Release version (the manifest's `version`).
    pub version: String,
    /// The release's serial (from its manifest).
    pub serial: u64,
    /// Host label selector (`key = value`, all must match) that chose the frozen host set.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    /// Most hosts Updating at once, canaries included; 0 is treated as 1.
    pub max_in_flight: u32,
    /// How many hosts (the first ones, in host order) are canaries.
    pub canary: u32,
    /// Soak: how long a host must run the measured new identity, in ms.
    pub min_healthy_ms: u64,
    /// How long a host may take to show the measured new identity after the step was sent, in ms.
    pub timeout_ms: u64,
}

/// A rollout's phase (serialised PascalCase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Not produced by this state machine (kept for the wire vocabulary).
    Pending,
    /// Created, waiting for [`Rollout::approve`].
    AwaitingApproval,
    /// Approved: hosts are being updated.
    InProgress,
    /// Paused: no host starts; hosts already Updating go on.
    Paused,
    /// Every host is Updated.
    Succeeded,
    /// Halted by a failure, a rollback or an abort (see `halted`).
    Failed,
}

/// One host's phase in a rollout (serialised PascalCase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostPhase {
    /// Not started.
    Pending,
    /// Assigned: the agent should be applying the release.
    Updating,
    /// Runs the artifact (measured) and soaked.
    Updated,
    /// Refused, timed out, or no artifact for its platform (`reason`).
    Failed,
    /// The agent rolled back to its previous version (`reason`).
    RolledBack,
}

macro_rules! display_as_debug {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(self, f)
            }
        }
    )*};
}
display_as_debug!(Phase, HostPhase, UpdateState);

/// One host of a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRollout {
    /// Host name.
    pub host: String,
    /// The host's platform word when the rollout was created (`linux-x86_64`).
    pub platform: String,
    /// Whether it is a canary.
    pub canary: bool,
    /// Its phase.
    pub phase: HostPhase,
    /// Why it Failed or RolledBack.
    pub reason: Option<Reason>,
    /// What was seen (the agent's detail, or what the timeout saw).
    pub detail: String,
    /// When it was started (became Updating), ms.
    pub sent_ms: Option<i64>,
    /// Soak clock: `received_ms` of the first report whose measured identity is the
    /// artifact's (reset when a later report shows another identity), ms.
    pub measured_ms: Option<i64>,
    /// `received_ms` of the host's first report since it was started: the backstop's
    /// clock starts there, ms.
    #[serde(default)]
    pub contact_ms: Option<i64>,
    /// `received_ms` of the host's latest report, ms.
    #[serde(default)]
    pub heard_ms: Option<i64>,
    /// When it reached Updated, Failed or RolledBack, ms.
    pub finished_ms: Option<i64>,
    /// The last measured running digest reported, `sha256:<hex>`.
    pub running_sha256: Option<String>,
    /// The measured running digest (`sha256:<hex>`) the host reported last before it
    /// was started: what a rollback of this rollout takes it back to. `None` before
    /// the host started (or when it had reported nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_sha256: Option<String>,
    /// This host's own release (a rollback's hosts each go back to what they ran);
    /// `None`: the rollout's release, [`Rollout::artifact_sha256`] for its platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<HostTarget>,
}

/// One host's own release in a rollout (a rollback): the version whose signed
/// manifest the host is sent and the digest it must then be measured running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTarget {
    /// The release version.
    pub version: String,
    /// Its artifact's digest for the host's platform, 64 lowercase hex.
    pub sha256: String,
}

/// A host that a rollback of a rollout takes back ([`Rollout::rollback_hosts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackHost {
    /// Host name.
    pub host: String,
    /// Its platform word.
    pub platform: String,
    /// The digest the rollout gave it, 64 lowercase hex.
    pub from_sha256: String,
    /// The digest it ran before the rollout changed it, 64 lowercase hex.
    pub to_sha256: String,
}

/// Why a rollout cannot be rolled back ([`Rollout::rollback_hosts`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollbackError {
    /// The rollout is still active (awaiting approval, in progress or paused).
    #[error("rollout {id} is still {phase}: halt it first (`flotilla release abort {id}`), then roll it back")]
    Active {
        /// The rollout.
        id: u64,
        /// Its phase.
        phase: Phase,
    },
    /// Halted, but hosts are still updating (they go on to their end).
    #[error(
        "rollout {id} is halted but {hosts} still updating: wait until they end, then roll it back"
    )]
    Settling {
        /// The rollout.
        id: u64,
        /// The hosts still Updating, comma-separated.
        hosts: String,
    },
    /// No host runs what the rollout gave it, having run something else before.
    #[error("rollout {id} changed no host (none runs its release after running another): nothing to roll back")]
    NothingChanged {
        /// The rollout.
        id: u64,
    },
    /// The rollout did not record what a host it changed ran before.
    #[error("rollout {id} did not record what `{host}` ran before it changed it: there is no previous release to go back to")]
    NoPrevious {
        /// The rollout.
        id: u64,
        /// The host.
        host: String,
    },
    /// A host the rollout changed runs a third digest now (changed since).
    #[error("`{host}` was changed by rollout {id} but runs {running} now, neither its release nor what it ran before: roll back the newer change first")]
    ChangedSince {
        /// The rollout.
        id: u64,
        /// The host.
        host: String,
        /// What it runs now, `sha256:<hex>`.
        running: String,
    },
}

/// A rollout of one release to a frozen host set (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// The authority's id.
    pub id: u64,
    /// What was asked.
    pub spec: RolloutSpec,
    /// The release's artifact digests by platform word (`linux-x86_64` → 64 hex).
    pub artifact_sha256: BTreeMap<String, String>,
    /// The phase.
    pub phase: Phase,
    /// Why it halted: a [`Reason`] word (`CrashLoop`, `Aborted`, …).
    pub halted: Option<String>,
    /// The frozen host set, in order (canaries first).
    pub hosts: Vec<HostRollout>,
    /// Created, ms.
    pub created_ms: i64,
    /// Approved, ms.
    pub approved_ms: Option<i64>,
    /// Reached Succeeded or Failed, ms.
    pub finished_ms: Option<i64>,
    /// What happened, one short line each, oldest first (`web-1: Updating`,
    /// `web-1: RolledBack (CrashLoop: …)`).
    pub events: Vec<String>,
    /// The rollout this one rolls back (its hosts go back to what they ran before
    /// it), for a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u64>,
}

/// What an agent last said about its release state (`POST /v1/hosts/{host}/release`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostUpdate {
    /// Host name.
    pub host: String,
    /// Its platform word (`linux-x86_64`).
    pub platform: String,
    /// The agent's measured executable digest, `sha256:<hex>`.
    #[serde(default)]
    pub running_sha256: Option<String>,
    /// The agent's pid.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The agent's current or last update of its own binary, if any.
    #[serde(default)]
    pub update: Option<UpdateReport>,
    /// The measured executable digest (`sha256:<hex>`) of the components of this host
    /// that run each release (by release name), for component releases. A release whose
    /// components run different digests, or that none runs, is left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub releases: BTreeMap<String, String>,
    /// The current or last update of each component install root of this host (one
    /// per root; several may name the same release).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updates: Vec<UpdateReport>,
    /// Every entry of this host's skip lists: the agent's install root's `skip.json`
    /// (release [`AGENT_RELEASE`]) and each component install root's (releases this
    /// host refuses `Skipped`). Empty from an agent that predates it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkipEntry>,
    /// What this agent process did with the unskip requests the authority still sends
    /// it (`flotilla release unskip`), one per request id; dropped once the authority
    /// stops sending the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unskipped: Vec<UnskipOutcome>,
    /// When the authority received it, ms (set by the authority; ignored from agents).
    #[serde(default)]
    pub received_ms: i64,
}

/// An agent's answer to one unskip request: the skip entries of release `name` at
/// `version` it removed from its host's skip lists, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnskipOutcome {
    /// The request's id (given by the authority).
    pub id: u64,
    /// Release name.
    pub name: String,
    /// Release version.
    pub version: String,
    /// The entries removed (empty: none was there, or an earlier run of this request
    /// removed them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleared: Vec<SkipEntry>,
    /// Why a skip list could not be changed (unreadable, not writable); the agent tries
    /// again at the authority's next answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The release name of the agent's own binary: its running digest is
/// [`HostUpdate::running_sha256`] and its update [`HostUpdate::update`]; any other name
/// is a component release ([`HostUpdate::releases`], [`HostUpdate::updates`]).
pub const AGENT_RELEASE: &str = "flotilla-agent";

impl HostUpdate {
    /// The measured running digest (`sha256:<hex>`) of release `name` on this host.
    pub fn running_of(&self, name: &str) -> Option<&str> {
        if name == AGENT_RELEASE {
            self.running_sha256.as_deref()
        } else {
            self.releases.get(name).map(String::as_str)
        }
    }

    /// The update reports of release `name`: the agent's own for [`AGENT_RELEASE`],
    /// else the component install roots' that name it.
    pub fn reports_of<'a>(
        &'a self,
        name: &'a str,
    ) -> Box<dyn Iterator<Item = &'a UpdateReport> + 'a> {
        if name == AGENT_RELEASE {
            Box::new(self.update.iter())
        } else {
            Box::new(self.updates.iter().filter(move |r| r.name == name))
        }
    }
}

/// An agent's update record, as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateReport {
    /// Release name.
    pub name: String,
    /// Release version.
    pub version: String,
    /// The target artifact's digest, 64 lowercase hex.
    pub sha256: String,
    /// Where the update is.
    pub state: UpdateState,
    /// Why it was refused or rolled back.
    #[serde(default)]
    pub reason: Option<Reason>,
    /// What was seen.
    #[serde(default)]
    pub detail: String,
    /// Evidence lines (measured pids, digests, timings).
    #[serde(default)]
    pub evidence: Vec<String>,
    /// When the agent entered `state`, ms on the agent's clock.
    pub since_ms: i64,
}

/// An agent's update state (serialised PascalCase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpdateState {
    /// Fetching the artifact (signature already verified).
    Downloading,
    /// Verified and staged in `versions/`.
    Staged,
    /// Flipped; restarting through the supervisor.
    Restarting,
    /// The new process proved its identity; soaking.
    Soaking,
    /// Soaked: the new version runs.
    Updated,
    /// Rolled back to the previous version (`reason`).
    RolledBack,
    /// Refused before anything was applied (`reason`).
    Refused,
}

/// An operator action that the rollout's phase does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    /// `action` (approve, pause, resume, abort) is not allowed in `phase`.
    #[error("cannot {action} a rollout that is {phase}")]
    NotAllowed {
        /// The action.
        action: &'static str,
        /// The rollout's phase.
        phase: Phase,
    },
}

fn bare_sha(s: &str) -> String {
    let s = s.trim();
    s.strip_prefix("sha256:").unwrap_or(s).to_ascii_lowercase()
}

/// Of several reports of one release (one per install root), the one that decides: a
/// rollback, else a refusal, else one still in progress, else (all Updated) the first.
fn worst<'a>(reports: &[&'a UpdateReport]) -> Option<&'a UpdateReport> {
    let rank = |r: &UpdateReport| match r.state {
        UpdateState::RolledBack => 0,
        UpdateState::Refused => 1,
        UpdateState::Updated => 3,
        _ => 2,
    };
    reports.iter().copied().min_by_key(|r| rank(r))
}

fn ms_text(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl Rollout {
    /// A rollout [`Phase::AwaitingApproval`] of `spec` to `hosts` (`(host, platform word)`,
    /// frozen here, in order); the first `spec.canary` hosts are canaries.
    /// `artifact_sha256` maps platform words to the release's artifact digests (64 hex).
    pub fn new(
        id: u64,
        spec: RolloutSpec,
        artifact_sha256: BTreeMap<String, String>,
        hosts: Vec<(String, String)>,
        now_ms: i64,
    ) -> Rollout {
        let canaries = spec.canary as usize;
        let hosts: Vec<HostRollout> = hosts
            .into_iter()
            .enumerate()
            .map(|(i, (host, platform))| HostRollout {
                host,
                platform,
                canary: i < canaries,
                phase: HostPhase::Pending,
                reason: None,
                detail: String::new(),
                sent_ms: None,
                measured_ms: None,
                contact_ms: None,
                heard_ms: None,
                finished_ms: None,
                running_sha256: None,
                before_sha256: None,
                target: None,
            })
            .collect();
        let events = vec![format!(
            "created: {} {} to {} hosts ({} canaries), awaiting approval",
            spec.name,
            spec.version,
            hosts.len(),
            hosts.iter().filter(|h| h.canary).count()
        )];
        Rollout {
            id,
            spec,
            artifact_sha256,
            phase: Phase::AwaitingApproval,
            halted: None,
            hosts,
            created_ms: now_ms,
            approved_ms: None,
            finished_ms: None,
            events,
            rollback_of: None,
        }
    }

    /// A rollback of rollout `of` (created [`Phase::AwaitingApproval`], like any
    /// rollout): `hosts` (name, platform, its own release), in the order given, the
    /// first `spec.canary` the canaries. `spec.version` names the versions gone back to
    /// (for people); each host is sent and proven on its own [`HostTarget`].
    pub fn new_rollback(
        id: u64,
        spec: RolloutSpec,
        of: u64,
        hosts: Vec<(String, String, HostTarget)>,
        now_ms: i64,
    ) -> Rollout {
        let (names, targets): (Vec<(String, String)>, Vec<HostTarget>) =
            hosts.into_iter().map(|(h, p, t)| ((h, p), t)).unzip();
        let mut r = Rollout::new(id, spec, BTreeMap::new(), names, now_ms);
        for (h, t) in r.hosts.iter_mut().zip(targets) {
            h.target = Some(HostTarget {
                version: t.version,
                sha256: bare_sha(&t.sha256),
            });
        }
        r.rollback_of = Some(of);
        r.events = vec![format!(
            "created: rollback of rollout {of}: {} back to {} on {} hosts ({} canaries), awaiting approval",
            r.spec.name,
            r.spec.version,
            r.hosts.len(),
            r.hosts.iter().filter(|h| h.canary).count()
        )];
        r
    }

    /// The release `h` (one of this rollout's hosts) is taken to: its version and its
    /// artifact's digest (64 lowercase hex); `None` when the release has no artifact
    /// for its platform.
    pub fn target_of<'a>(&'a self, h: &'a HostRollout) -> Option<(&'a str, String)> {
        match &h.target {
            Some(t) => Some((t.version.as_str(), bare_sha(&t.sha256))),
            None => self
                .artifact_sha256
                .get(&h.platform)
                .map(|s| (self.spec.version.as_str(), bare_sha(s))),
        }
    }

    /// The hosts a rollback of this rollout takes back, in host order: those it
    /// changed — measured on its release (by `updates`, each host's latest report, else
    /// the last digest this rollout recorded) after running another digest when they
    /// were started. A host back on what it ran before (its agent rolled back by
    /// itself) is left alone, like the hosts never started.
    ///
    /// # Errors
    /// [`RollbackError`]: still active or settling, nothing changed, a changed host
    /// whose previous digest was not recorded, or one that runs a third digest now.
    pub fn rollback_hosts(
        &self,
        updates: &BTreeMap<String, HostUpdate>,
    ) -> Result<Vec<RollbackHost>, RollbackError> {
        if self.is_active() {
            return Err(RollbackError::Active {
                id: self.id,
                phase: self.phase,
            });
        }
        let updating: Vec<&str> = self
            .hosts
            .iter()
            .filter(|h| h.phase == HostPhase::Updating)
            .map(|h| h.host.as_str())
            .collect();
        if !updating.is_empty() {
            return Err(RollbackError::Settling {
                id: self.id,
                hosts: updating.join(", "),
            });
        }
        let mut out = Vec::new();
        for h in &self.hosts {
            if !matches!(h.phase, HostPhase::Updated | HostPhase::Failed) {
                continue;
            }
            let Some((_, target)) = self.target_of(h) else {
                continue;
            };
            let running = updates
                .get(&h.host)
                .and_then(|u| u.running_of(&self.spec.name))
                .or(h.running_sha256.as_deref())
                .map(bare_sha);
            let before = h.before_sha256.as_deref().map(bare_sha);
            if before.as_deref() == Some(target.as_str()) {
                continue; // it ran the release already: not changed
            }
            match running {
                Some(r) if r == target => {}
                Some(r) if h.phase == HostPhase::Updated && Some(&r) != before.as_ref() => {
                    return Err(RollbackError::ChangedSince {
                        id: self.id,
                        host: h.host.clone(),
                        running: format!("sha256:{r}"),
                    })
                }
                _ => continue,
            }
            let Some(before) = before else {
                return Err(RollbackError::NoPrevious {
                    id: self.id,
                    host: h.host.clone(),
                });
            };
            out.push(RollbackHost {
                host: h.host.clone(),
                platform: h.platform.clone(),
                from_sha256: target,
                to_sha256: before,
            });
        }
        if out.is_empty() {
            return Err(RollbackError::NothingChanged { id: self.id });
        }
        Ok(out)
    }

    /// Approves: [`Phase::InProgress`]; hosts without an artifact for their platform fail
    /// ([`Reason::NoMatchingArtifact`], which halts the rollout); the first hosts start.
    ///
    /// # Errors
    /// [`RolloutError::NotAllowed`] unless [`Phase::AwaitingApproval`].
    pub fn approve(&mut self, now_ms: i64) -> Result<(), RolloutError> {
        self.require("approve", &[Phase::AwaitingApproval])?;
        self.approved_ms = Some(now_ms);
        self.phase = Phase::InProgress;
        self.events.push("approved".into());
        for i in 0..self.hosts.len() {
            let h = &self.hosts[i];
            if self.target_of(h).is_none() {
                let have: Vec<&str> = self.artifact_sha256.keys().map(String::as_str).collect();
                let detail = format!(
                    "{} {} has no artifact for {}; it has {}",
                    self.spec.name,
                    self.spec.version,
                    h.platform,
                    have.join(", ")
                );
                self.finish_host(
                    i,
                    HostPhase::Failed,
                    Some(Reason::NoMatchingArtifact),
                    detail,
                    now_ms,
                );
            }
        }
        self.step(&BTreeMap::new(), now_ms);
        Ok(())
    }

    /// Pauses: no more hosts start; hosts Updating go on.
    ///
    /// # Errors
    /// [`RolloutError::NotAllowed`] unless [`Phase::InProgress`].
    pub fn pause(&mut self, now_ms: i64) -> Result<(), RolloutError> {
        let _ = now_ms;
        self.require("pause", &[Phase::InProgress])?;
        self.phase = Phase::Paused;
        self.events.push("paused".into());
        Ok(())
    }

    /// Resumes a paused rollout and starts hosts as allowed.
    ///
    /// # Errors
    /// [`RolloutError::NotAllowed`] unless [`Phase::Paused`].
    pub fn resume(&mut self, now_ms: i64) -> Result<(), RolloutError> {
        self.require("resume", &[Phase::Paused])?;
        self.phase = Phase::InProgress;
        self.events.push("resumed".into());
        self.step(&BTreeMap::new(), now_ms);
        Ok(())
    }

    /// Aborts: [`Phase::Failed`], halted `Aborted`; nothing more starts. Hosts already
    /// Updating stay as reported (the agent finishes or rolls back; [`Rollout::advance`]
    /// keeps recording them).
    ///
    /// # Errors
    /// [`RolloutError::NotAllowed`] when already Succeeded or Failed.
    pub fn abort(&mut self, now_ms: i64) -> Result<(), RolloutError> {
        self.require(
            "abort",
            &[
                Phase::Pending,
                Phase::AwaitingApproval,
                Phase::InProgress,
                Phase::Paused,
            ],
        )?;
        self.events.push("aborted".into());
        self.halt(Reason::Aborted, now_ms);
        Ok(())
    }

    /// Applies the latest [`HostUpdate`] per host (keyed by host name) at `now_ms`:
    /// records measured identities, finishes Updating hosts (Updated, Failed, RolledBack,
    /// timeouts), halts on the first failure, starts hosts as the rules allow, and
    /// detects success. Call it whenever a report arrives and periodically (timeouts).
    /// Returns whether anything changed.
    pub fn advance(&mut self, updates: &BTreeMap<String, HostUpdate>, now_ms: i64) -> bool {
        let before = self.clone();
        self.step(updates, now_ms);
        *self != before
    }

    /// Whether `host` is Updating in this rollout (its agent should be applying the
    /// release). True even after a halt while the host has not reached its end.
    pub fn assigned(&self, host: &str) -> bool {
        self.hosts
            .iter()
            .any(|h| h.host == host && h.phase == HostPhase::Updating)
    }

    /// Whether the rollout is neither Succeeded nor Failed.
    pub fn is_active(&self) -> bool {
        !matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }

    /// Whether nothing can change any more: not active and no host Updating. Keep calling
    /// [`Rollout::advance`] until this holds.
    pub fn is_settled(&self) -> bool {
        !self.is_active() && !self.hosts.iter().any(|h| h.phase == HostPhase::Updating)
    }

    /// The host named `host`.
    pub fn host(&self, host: &str) -> Option<&HostRollout> {
        self.hosts.iter().find(|h| h.host == host)
    }

    fn require(&self, action: &'static str, allowed: &[Phase]) -> Result<(), RolloutError> {
        if allowed.contains(&self.phase) {
            Ok(())
        } else {
            Err(RolloutError::NotAllowed {
                action,
                phase: self.phase,
            })
        }
    }

    fn halt(&mut self, reason: Reason, now_ms: i64) {
        if self.halted.is_none() {
            self.halted = Some(reason.as_str().to_string());
            self.events.push(format!("halted: {reason}"));
        }
        if self.is_active() {
            self.phase = Phase::Failed;
            self.finished_ms = Some(now_ms);
        }
    }

    fn finish_host(
        &mut self,
        i: usize,
        phase: HostPhase,
        reason: Option<Reason>,
        detail: String,
        now_ms: i64,
    ) {
        let h = &mut self.hosts[i];
        h.phase = phase;
        h.reason = reason;
        h.finished_ms = Some(now_ms);
        let event = match reason {
            Some(r) if detail.is_empty() => format!("{}: {phase} ({r})", h.host),
            Some(r) => format!("{}: {phase} ({r}: {detail})", h.host),
            None => format!("{}: {phase}", h.host),
        };
        h.detail = detail;
        self.events.push(event);
        if let Some(r) = reason {
            if phase != HostPhase::Updated {
                self.halt(r, now_ms);
            }
        }
    }

    /// One full step: record, finish, start, repeated until no host changes phase (a
    /// host started here may already run the artifact and be done at once).
    fn step(&mut self, updates: &BTreeMap<String, HostUpdate>, now_ms: i64) {
        for h in &mut self.hosts {
            if let Some(running) = updates
                .get(&h.host)
                .and_then(|u| u.running_of(&self.spec.name))
            {
                h.running_sha256 = Some(running.to_string());
            }
        }
        loop {
            let mut moved = false;
            for i in 0..self.hosts.len() {
                if self.hosts[i].phase == HostPhase::Updating {
                    let u = updates.get(&self.hosts[i].host);
                    moved |= self.evaluate(i, u, now_ms);
                }
            }
            moved |= self.start(now_ms);
            if !moved {
                break;
            }
        }
        if matches!(self.phase, Phase::InProgress | Phase::Paused)
            && self.hosts.iter().all(|h| h.phase == HostPhase::Updated)
        {
            self.phase = Phase::Succeeded;
            self.finished_ms = Some(now_ms);
            self.events.push("succeeded".into());
        }
    }

    /// Starts hosts as the rules allow; returns whether any started.
    fn start(&mut self, now_ms: i64) -> bool {
        if self.phase != Phase::InProgress || self.halted.is_some() {
            return false;
        }
        let max = self.spec.max_in_flight.max(1) as usize;
        let mut in_flight = self
            .hosts
            .iter()
            .filter(|h| h.phase == HostPhase::Updating)
            .count();
        let canaries_done = self
            .hosts
            .iter()
            .filter(|h| h.canary)
            .all(|h| h.phase == HostPhase::Updated);
        let mut started = false;
        for h in &mut self.hosts {
            if in_flight >= max {
                break;
            }
            if h.phase == HostPhase::Pending && (h.canary || canaries_done) {
                h.phase = HostPhase::Updating;
                h.sent_ms = Some(now_ms);
                h.before_sha256 = h.running_sha256.clone();
                in_flight += 1;
                started = true;
                self.events.push(format!(
                    "{}: Updating{}",
                    h.host,
                    if h.canary { " (canary)" } else { "" }
                ));
            }
        }
        started
    }

    /// Evaluates one Updating host against its latest report; returns whether it finished.
    fn evaluate(&mut self, i: usize, update: Option<&HostUpdate>, now_ms: i64) -> bool {
        let Some((version, target)) = self
            .target_of(&self.hosts[i])
            .map(|(v, t)| (v.to_string(), t))
        else {
            return false; // cannot happen: hosts without an artifact never start
        };
        let spec = &self.spec;
        let h = &mut self.hosts[i];
        let sent = h.sent_ms.unwrap_or(now_ms);
        let mut report = None;
        if let Some(u) = update.filter(|u| u.received_ms >= sent) {
            h.heard_ms = Some(u.received_ms);
            h.contact_ms.get_or_insert(u.received_ms);
        }
        if let Some(u) = update {
            let runs_target = u
                .running_of(&spec.name)
                .is_some_and(|s| bare_sha(s) == target);
            if !runs_target {
                h.measured_ms = None;
            } else if h.measured_ms.is_none() {
                h.measured_ms = Some(u.received_ms);
            }
            // A refusal before the signature was checked names no trusted digest: it
            // is matched by the release's name and version.
            let mine: Vec<&UpdateReport> = u
                .reports_of(&spec.name)
                .filter(|r| {
                    let this = if r.sha256.is_empty() {
                        r.name == spec.name && r.version == version
                    } else {
                        bare_sha(&r.sha256) == target
                    };
                    this && u.received_ms >= sent
                })
                .collect();
            report = worst(&mine);
        }
        if let Some(r) = report {
            let (phase, default) = match r.state {
                UpdateState::RolledBack => (HostPhase::RolledBack, Reason::InstallFailed),
                UpdateState::Refused => (HostPhase::Failed, Reason::InstallFailed),
                _ => (HostPhase::Updating, Reason::InstallFailed),
            };
            if phase != HostPhase::Updating {
                let detail = r.detail.clone();
                self.finish_host(i, phase, Some(r.reason.unwrap_or(default)), detail, now_ms);
                return true;
            }
        }
        let soak = spec.min_healthy_ms as i64;
        let timeout = spec.timeout_ms as i64;
        let h = &self.hosts[i];
        let soaked = h.measured_ms.is_some_and(|m| now_ms - m >= soak);
        // The agent's own word is required: it says `Updated` only after it verified the
        // release (signature by a pinned key, expiry, serial, skip list) — a host that
        // happens to run the artifact's digest already proves nothing about the release.
        let agent_agrees = report.is_some_and(|r| r.state == UpdateState::Updated);
        if soaked && agent_agrees {
            let detail = format!(
                "running sha256:{target} (measured), soaked {}",
                ms_text(spec.min_healthy_ms)
            );
            self.finish_host(i, HostPhase::Updated, None, String::new(), now_ms);
            self.hosts[i].detail = detail;
            return true;
        }
        // The agent holds its own `timeout` for the proof and rolls back by itself
        // when it fails; the authority's deadline is the backstop for an agent that
        // says nothing at all: a timeout for the proof, one more for a rollback.
        let Some(contact) = h.contact_ms else {
            // Not heard from since the step: nothing to judge yet.
            return false;
        };
        let deadline = match h.measured_ms {
            None => contact + 2 * timeout + soak,
            Some(m) => (contact + timeout).max(m + soak + timeout),
        };
        let heard_since = h.heard_ms.is_some_and(|t| t > deadline);
        if now_ms > deadline && heard_since {
            let seen = match (&h.running_sha256, h.measured_ms) {
                (_, Some(m)) => format!(
                    "measured sha256:{target} since {}ms after the step, but the agent never reported Updated",
                    m - sent
                ),
                (Some(running), None) => format!("still measured {running}"),
                (None, None) => "no measured identity reported".into(),
            };
            let state = report
                .map(|r| format!(", agent state {}", r.state))
                .unwrap_or_default();
            let detail = format!(
                "no proof of sha256:{target} within {}: {seen}{state}",
                ms_text(spec.timeout_ms)
            );
            self.finish_host(
                i,
                HostPhase::Failed,
                Some(Reason::HealthTimeout),
                detail,
                now_ms,
            );
            return true;
        }
        false
    }
}

/// Why a label selector does not parse ([`parse_selector`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A part is not `key=value`.
    #[error("`{0}` is not key=value (labels: key=value[,key=value])")]
    NotKeyValue(String),
    /// A part has an empty key.
    #[error("`{0}` has no label key")]
    NoKey(String),
    /// A key is given twice.
    #[error(
        "label `{key}` is given twice (`{first}` and `{second}`): a host has one value per label"
    )]
    Twice {
        /// The key.
        key: String,
        /// Its first value.
        first: String,
        /// Its second value.
        second: String,
    },
}

/// Parses a label selector, `key=value[,key=value]` (spaces around keys and values
/// trimmed), into its labels; empty (or only spaces) selects every agent host.
///
/// # Errors
/// [`SelectorError`] naming the part that is wrong.
pub fn parse_selector(s: &str) -> Result<BTreeMap<String, String>, SelectorError> {
    let mut out = BTreeMap::new();
    if s.trim().is_empty() {
        return Ok(out);
    }
    for part in s.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| SelectorError::NotKeyValue(part.to_string()))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(SelectorError::NoKey(part.to_string()));
        }
        if let Some(before) = out.insert(k.to_string(), v.to_string()) {
            return Err(SelectorError::Twice {
                key: k.to_string(),
                first: before,
                second: v.to_string(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
