//! One adopt, end to end: the survey (who runs it, what differs, the baseline), the
//! steps (back up, stop the prior owner, start Flotilla's instance, accept), and
//! the ways back (roll back, resume), each step written to the record before it
//! runs. The lifecycle lock is the caller's to hold for the whole of it
//! ([`crate::operate::Invocation::lock`]).

use super::checks;
use super::host::{self, Answer, Ask, Done, Here, HostError};
use super::prior::{self, Holder};
use super::record::{self, AdoptRecord, CheckResult, Phase, Prior, RecordError};
use crate::discover::ports_text;
use crate::operate::{Invocation, InvocationOutcome, OperateError, RemoteObservation};
use crate::this_process::now_ms;
use flotilla_model::inventory::Owner;
use flotilla_model::topology::Component;
use flotilla_plan::{Operation, Verb};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an adopt could not go on (as opposed to a refusal, see [`Survey::refusal`]).
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// The journal, lock or state directory.
    #[error(transparent)]
    Operate(#[from] OperateError),
    /// The adopt record.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The component's host could not answer (`/proc`, `systemctl`, its journal).
    #[error(transparent)]
    Host(#[from] HostError),
    /// The component's remote host could not be asked, or refused.
    #[error(transparent)]
    Remote(#[from] crate::ssh::TransportError),
    /// The automatic backup failed: nothing was changed.
    #[error("the backup before the adopt failed: nothing was changed")]
    Backup(#[source] flotilla_store::backup::BackupError),
    /// The component is not one this host can adopt here.
    #[error("{0}")]
    Unsupported(String),
}

/// What is seen before anything changes: who holds the component's ports, how that
/// differs from the declaration, and the baseline's checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Survey {
    /// The component.
    pub component: String,
    /// Its host.
    pub host: String,
    /// The adapter it moves to.
    pub adapter: String,
    /// Who holds its ports.
    pub holder: Holder,
    /// What differs from the declaration (refused while any).
    pub differences: Vec<String>,
    /// What may matter but is not compared.
    pub notes: Vec<String>,
    /// The baseline: each check and what it saw.
    pub baseline: Vec<CheckResult>,
    /// Its dependents (their readiness is checked at baseline and acceptance).
    pub dependents: Vec<String>,
    /// The steps, as the plan shows them.
    pub steps: Vec<String>,
}

impl Survey {
    /// Why the adopt cannot go on, when it cannot: `(kind, message)` with kind
    /// `differs`, `nothing`, `unseen`, `other-flotilla`; `None` when it can (or
    /// when Flotilla already runs it: see [`Survey::already_ours`]).
    pub fn refusal(&self) -> Option<(&'static str, String)> {
        match &self.holder {
            Holder::Nothing => Some((
                "nothing",
                format!(
                    "nothing runs `{0}` on its host: nothing to adopt (`flotilla start {0}` starts it)",
                    self.component
                ),
            )),
            Holder::Unseen { addresses } => Some((
                "unseen",
                format!(
                    "its port(s) are held by a process this user cannot see ({}): run as its user, or as root",
                    addresses
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
            Holder::Flotilla { owner, ours: false } => Some((
                "other-flotilla",
                format!("its port is held by {owner}: not this project's to adopt"),
            )),
            Holder::Flotilla { ours: true, .. } => None,
            Holder::Prior { .. } if !self.differences.is_empty() => Some((
                "differs",
                format!(
                    "what runs does not match the declaration of `{}`:\n{}",
                    self.component,
                    self.differences
                        .iter()
                        .map(|d| format!("  - {d}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
            )),
            Holder::Prior { .. } => None,
        }
    }

    /// A copy to show (print, JSON): the prior owner's environment values hidden.
    pub fn redacted(&self) -> Survey {
        let mut s = self.clone();
        if let Holder::Prior { prior, .. } = &mut s.holder {
            **prior = prior.redacted();
        }
        s
    }

    /// Whether this project's Flotilla already runs it.
    pub fn already_ours(&self) -> bool {
        matches!(self.holder, Holder::Flotilla { ours: true, .. })
    }

    /// The prior owner, when there is one.
    pub fn prior(&self) -> Option<&Prior> {
        match &self.holder {
            Holder::Prior { prior, .. } => Some(prior.as_ref()),
            _ => None,
        }
    }

    /// The plan as text: what runs, the baseline, the steps, the notes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let from = self
            .prior()
            .map(Prior::describe)
            .unwrap_or_else(|| "nothing".into());
        out.push_str(&format!(
            "adopt `{}` on {}: from {from} to flotilla ({})\n",
            self.component, self.host, self.adapter
        ));
        if let Holder::Prior { listening, .. } = &self.holder {
            if !listening.is_empty() {
                out.push_str(&format!(
                    "  listening on {}\n",
                    listening
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        if let Some(Prior::Process(p)) = self.prior() {
            out.push_str(&format!(
                "  identity: pid {}, start time {} ticks, {} ({})\n  command line: {}\n",
                p.pid,
                p.start_time_ticks,
                p.exe,
                p.exe_sha256,
                p.argv
                    .iter()
                    .map(|w| crate::remote::shell_quote(w))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        if !self.differences.is_empty() {
            out.push_str("differences from the declaration:\n");
            for d in &self.differences {
                out.push_str(&format!("  - {d}\n"));
            }
        }
        out.push_str("baseline (measured now):\n");
        for c in &self.baseline {
            out.push_str(&format!(
                "  {} {}: {}\n",
                if c.passed { "ok  " } else { "FAIL" },
                c.what,
                c.saw
            ));
        }
        if !self.steps.is_empty() {
            out.push_str("steps:\n");
            for (i, s) in self.steps.iter().enumerate() {
                out.push_str(&format!("  {}. {s}\n", i + 1));
            }
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }
}

/// How an adopt (or a rollback, or a resume) ended.
#[derive(Debug, Clone)]
pub enum Ended {
    /// Flotilla owns it; the record is kept for a later `--rollback`.
    Adopted(AdoptRecord),
    /// The prior owner runs again, proven by the baseline's checks (the record
    /// says why it went back).
    RolledBack(AdoptRecord),
    /// Neither could be made to run, or Flotilla's instance could not be stopped:
    /// the record stays unfinished and the message says what runs and what to do.
    Stuck(AdoptRecord, String),
}

impl Ended {
    /// The record as it ended.
    pub fn record(&self) -> &AdoptRecord {
        match self {
            Ended::Adopted(r) | Ended::RolledBack(r) | Ended::Stuck(r, _) => r,
        }
    }
}

/// One adopt of one component, within one invocation's world.
pub struct Adopt {
    /// The invocation (topology, state directory, journal, readiness timeout,
    /// progress): its start and stop run through it.
    pub invocation: Invocation,
    /// The component.
    pub component: String,
    /// How long the acceptance (and a rollback's proof) may take to pass.
    pub accept_within: Duration,
    /// Each step's progress line, as it happens.
    pub say: Arc<dyn Fn(String) + Send + Sync>,
}

impl Adopt {
    fn topology(&self) -> &flotilla_model::Topology {
        &self.invocation.topology
    }

    /// The component (checked by [`Adopt::survey`]).
    fn component(&self) -> Result<&Component, AdoptError> {
        let t = self.topology();
        t.id(&self.component)
            .map(|id| t.component(id))
            .ok_or_else(|| AdoptError::Unsupported(format!("no component `{}`", self.component)))
    }

    /// Refuses what adopt cannot move: an external component (observed only, it has
    /// no owner here to move to).
    fn adoptable(&self, c: &Component) -> Result<(), AdoptError> {
        if c.owner == Owner::External {
            return Err(AdoptError::Unsupported(format!(
                "`{}` is declared `owner = \"external\"`: flotilla only observes it; declare it managed to adopt it",
                c.name
            )));
        }
        Ok(())
    }

    /// Asks `question` about `c` of its host: answered here for a local component,
    /// by `flotilla host serve` there for a remote one ([`host`]).
    async fn ask(&self, c: &Component, question: Ask) -> Result<Answer, AdoptError> {
        let remote = self
            .topology()
            .hosts
            .get(&c.host)
            .is_some_and(|h| h.is_remote());
        if !remote {
            let here = Here {
                component: c,
                state: &self.invocation.state,
                base_dir: &self.invocation.base_dir,
            };
            return Ok(host::answer(question, &here).await?);
        }
        let timeout = self.invocation.host_timeout + question.takes(c);
        let failed = |detail: String| {
            AdoptError::Remote(crate::ssh::TransportError::Failed {
                host: c.host.clone(),
                detail,
            })
        };
        let call = crate::remote::Call::Adopt {
            snapshot: self.topology().snapshot(&c.host),
            component: c.name.clone(),
            question: serde_json::to_value(&question).map_err(|e| failed(e.to_string()))?,
        };
        match self.invocation.fleet.call(&c.host, call, timeout, None).await {
            Ok(crate::remote::Reply::Adopt { answer }) => serde_json::from_value(answer)
                .map_err(|e| failed(format!("unreadable answer to adopt: {e}"))),
            Ok(other) => Err(AdoptError::Remote(crate::ssh::TransportError::Failed {
                host: c.host.clone(),
                detail: format!("unexpected answer to adopt: {other:?}"),
            })),
            Err(crate::ssh::TransportError::Failed { host, detail })
                if detail.contains("unknown variant `adopt`") =>
            {
                Err(AdoptError::Remote(crate::ssh::TransportError::Failed {
                    detail: format!(
                        "the flotilla installed there predates `adopt`: run `flotilla host install {host}`"
                    ),
                    host,
                }))
            }
            Err(e) => Err(AdoptError::Remote(e)),
        }
    }

    /// Who holds `c`'s ports on its host, and how that differs from its declaration.
    async fn look(
        &self,
        c: &Component,
    ) -> Result<(Holder, super::compare::Comparison), AdoptError> {
        match self.ask(c, Ask::Look).await? {
            Answer::Looked { holder, comparison } => Ok((holder, comparison)),
            other => Err(unexpected(c, &other)),
        }
    }

    /// The host's checks of `c` (listening, readiness answered by `prior`'s process
    /// or Flotilla's instance).
    async fn host_checks(
        &self,
        c: &Component,
        prior: Option<Prior>,
    ) -> Result<Vec<CheckResult>, AdoptError> {
        match self.ask(c, Ask::Checks { prior }).await? {
            Answer::Checked { checks } => Ok(checks),
            other => Err(unexpected(c, &other)),
        }
    }

    /// Stops (`restore` false) or restores the prior owner; the prior as it runs now.
    async fn act(&self, c: &Component, ask: Ask) -> Result<(Option<Prior>, Done), AdoptError> {
        match self.ask(c, ask).await? {
            Answer::Stopped { done } => Ok((None, done)),
            Answer::Restored { prior, done } => Ok((Some(prior), done)),
            other => Err(unexpected(c, &other)),
        }
    }

    /// Whether the prior owner (or, for `None`, Flotilla's instance) runs.
    async fn runs(&self, c: &Component, prior: Option<&Prior>) -> Result<bool, AdoptError> {
        let ask = match prior {
            Some(p) => Ask::StillRuns { prior: p.clone() },
            None => Ask::Marked,
        };
        match self.ask(c, ask).await? {
            Answer::Runs { runs } => Ok(runs),
            other => Err(unexpected(c, &other)),
        }
    }

    /// Waits up to 10 s until nothing listens on `c`'s ports; else who still does.
    async fn free_soon(&self, c: &Component) -> Result<Result<(), String>, AdoptError> {
        match self.ask(c, Ask::WaitFree { within_ms: 10_000 }).await? {
            Answer::Free { held_by: None } => Ok(Ok(())),
            Answer::Free { held_by: Some(who) } => Ok(Err(who)),
            other => Err(unexpected(c, &other)),
        }
    }

    /// The statuses of `c`'s dependents, observed now.
    async fn dependent_checks(&self, names: &[String]) -> Result<Vec<CheckResult>, AdoptError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut store = crate::operate::open_store(&self.invocation.state)?;
        let secrets = crate::operate::secrets(&self.invocation.state)?;
        let remote = RemoteObservation {
            transport: self.invocation.fleet.as_ref(),
            host_timeout: self.invocation.host_timeout,
        };
        let (report, _) = crate::operate::observe(
            self.topology(),
            &mut store,
            &self.invocation.state,
            &secrets,
            names,
            remote,
        )
        .await?;
        let statuses: Vec<_> = report
            .components
            .into_iter()
            .filter(|s| names.contains(&s.name))
            .collect();
        Ok(checks::of_dependents(&self.component, &statuses))
    }

    /// Every check, as the baseline and the acceptance run them: the host's (its
    /// readiness answered by `prior`'s process, else by Flotilla's instance) and
    /// the dependents'.
    async fn checks(
        &self,
        c: &Component,
        prior: Option<Prior>,
        dependents: &[String],
    ) -> Result<Vec<CheckResult>, AdoptError> {
        let mut out = self.host_checks(c, prior).await?;
        out.extend(self.dependent_checks(dependents).await?);
        Ok(out)
    }

    /// Looks, changing nothing: who holds the component's ports, what differs from
    /// the declaration, the baseline's checks, and the steps an adopt would take.
    ///
    /// # Errors
    /// [`AdoptError`]: not adoptable here, `/proc` or the journal unreadable.
    pub async fn survey(&self) -> Result<Survey, AdoptError> {
        let c = self.component()?.clone();
        self.adoptable(&c)?;
        let (holder, comparison) = self.look(&c).await?;
        let dependents = checks::dependents(self.topology(), &c.name);
        let baseline = match &holder {
            Holder::Prior { prior, .. } => {
                self.checks(&c, Some(prior.as_ref().clone()), &dependents)
                    .await?
            }
            _ => Vec::new(),
        };
        let adapter = crate::observe::value_name(&c.adapter.unwrap_or_default());
        let steps = match &holder {
            Holder::Prior { prior, .. } => steps(&c, prior, &adapter, &dependents),
            _ => Vec::new(),
        };
        Ok(Survey {
            component: c.name.clone(),
            host: c.host.clone(),
            adapter,
            holder,
            differences: comparison.differences,
            notes: comparison.notes,
            baseline,
            dependents,
            steps,
        })
    }

    fn save(&self, r: &AdoptRecord) -> Result<(), AdoptError> {
        Ok(record::save(&self.invocation.state, r)?)
    }

    /// Moves `r` to `phase` and writes it, before the step runs.
    fn enter(&self, r: &mut AdoptRecord, phase: Phase, note: String) -> Result<(), AdoptError> {
        (self.say)(format!("{}: {note}", phase.as_str()));
        r.enter(phase, note, now_ms());
        self.save(r)
    }

    /// Notes what happened in the current phase and writes it.
    fn note(&self, r: &mut AdoptRecord, note: String) -> Result<(), AdoptError> {
        (self.say)(format!("  {note}"));
        r.history.push(record::Event {
            at_ms: now_ms(),
            phase: r.phase,
            note,
        });
        self.save(r)
    }

    /// Adopts what `survey` found (it must have no [`Survey::refusal`]): backs up the
    /// project's state, then the steps, each written to the record first. A failed
    /// step or acceptance rolls back.
    ///
    /// # Errors
    /// [`AdoptError`]: the backup failed (nothing changed), the record could not
    /// be written, the journal could not be used.
    pub async fn adopt(&self, survey: &Survey) -> Result<Ended, AdoptError> {
        let Some(prior) = survey.prior().cloned() else {
            return Err(AdoptError::Unsupported(
                "nothing to adopt: no prior owner".into(),
            ));
        };
        let backup = crate::backup::backup_before(
            "adopt",
            &self.invocation.state,
            &crate::backup::BackupPolicy::default(),
        )
        .map_err(AdoptError::Backup)?;
        if let Some(b) = &backup {
            (self.say)(format!("backup: {}", b.archive.display()));
        }
        let mut r = AdoptRecord {
            version: record::RECORD_VERSION,
            component: survey.component.clone(),
            host: survey.host.clone(),
            adapter: survey.adapter.clone(),
            phase: Phase::StopPrior,
            prior,
            baseline: survey.baseline.clone(),
            acceptance: Vec::new(),
            rollback_reason: None,
            operation: None,
            backup: backup.map(|b| b.archive.display().to_string()),
            command_line: self.invocation.command_line.clone(),
            pid: std::process::id(),
            pid_start_ticks: crate::process_start_ticks(std::process::id()).unwrap_or_default(),
            started_at_ms: now_ms(),
            history: Vec::new(),
        };
        self.steps_from(&mut r, Phase::StopPrior).await
    }

    /// Finishes an unfinished adopt from the phase its record is at (the steps are
    /// idempotent: a step under way when it was interrupted runs again).
    ///
    /// # Errors
    /// As [`Adopt::adopt`].
    pub async fn resume(&self, mut r: AdoptRecord) -> Result<Ended, AdoptError> {
        r.command_line = self.invocation.command_line.clone();
        let phase = r.phase;
        self.steps_from(&mut r, phase).await
    }

    async fn steps_from(&self, r: &mut AdoptRecord, phase: Phase) -> Result<Ended, AdoptError> {
        let c = self.component()?.clone();
        let ports = prior::declared_ports(&c);
        if phase == Phase::StopPrior {
            self.enter(
                r,
                Phase::StopPrior,
                format!("stopping {}", r.prior.describe()),
            )?;
            let (_, stopped) = self
                .act(
                    &c,
                    Ask::Stop {
                        prior: r.prior.clone(),
                    },
                )
                .await?;
            if stopped.ok {
                self.note(r, stopped.says)?;
            } else {
                return self
                    .rollback_now(r, format!("the prior owner did not stop: {}", stopped.says))
                    .await;
            }
            // Never two owners: its ports free and it gone before ours starts.
            let free = self.free_soon(&c).await?;
            if let Err(who) = free {
                return self
                    .rollback_now(
                        r,
                        format!("its port(s) are still held after the stop: {who}"),
                    )
                    .await;
            }
            if self.runs(&c, Some(&r.prior)).await? {
                return self
                    .rollback_now(r, "the prior owner still runs after the stop".into())
                    .await;
            }
            self.note(
                r,
                format!("proven stopped: port(s) {} free", ports_text(&ports)),
            )?;
        }
        if matches!(phase, Phase::StopPrior | Phase::Start) {
            self.enter(
                r,
                Phase::Start,
                format!("starting `{}` through flotilla", c.name),
            )?;
            let op = Operation {
                verb: Verb::Start,
                target: c.name.clone(),
                force: false,
                cascade: false,
                no_recreate: false,
            };
            match self.invocation.run_locked(Some(&op), None, false).await? {
                InvocationOutcome::Applied {
                    report, operation, ..
                } if report.succeeded() => {
                    r.operation = Some(operation.clone());
                    self.note(r, format!("started by {operation}, ready"))?;
                }
                InvocationOutcome::Applied {
                    report, operation, ..
                } => {
                    r.operation = Some(operation.clone());
                    let why = report
                        .failed
                        .as_ref()
                        .map(|f| format!("{}: {}", f.component, f.summary))
                        .unwrap_or_else(|| "it failed".into());
                    return self
                        .rollback_now(r, format!("the start failed ({operation}): {why}"))
                        .await;
                }
                InvocationOutcome::Refused(refusal) => {
                    return self
                        .rollback_now(r, format!("the start was refused: {refusal}"))
                        .await
                }
                InvocationOutcome::Planned(_) => unreachable!("not a dry run"),
            }
        }
        if matches!(phase, Phase::StopPrior | Phase::Start | Phase::Accept) {
            self.enter(
                r,
                Phase::Accept,
                "the baseline's checks again, on flotilla's instance".into(),
            )?;
            let failures = self.accept(r, &c).await?;
            if !failures.is_empty() {
                return self
                    .rollback_now(r, format!("the acceptance failed: {}", failures.join("; ")))
                    .await;
            }
            self.enter(
                r,
                Phase::Adopted,
                format!(
                    "flotilla ({}) owns `{}`; `flotilla adopt {} --rollback` goes back",
                    r.adapter, c.name, c.name
                ),
            )?;
            return Ok(Ended::Adopted(r.clone()));
        }
        match phase {
            Phase::Rollback => {
                let reason = r.rollback_reason.clone().unwrap_or_else(|| "asked".into());
                self.rollback_now(r, reason).await
            }
            Phase::Adopted => Ok(Ended::Adopted(r.clone())),
            _ => Ok(Ended::RolledBack(r.clone())),
        }
    }

    /// The acceptance: the baseline's checks on Flotilla's instance (what holds
    /// the ports is this project's), again until they pass or
    /// [`Adopt::accept_within`]; the failures.
    async fn accept(&self, r: &mut AdoptRecord, c: &Component) -> Result<Vec<String>, AdoptError> {
        let deadline = Instant::now() + self.accept_within;
        let dependents = checks::dependents(self.topology(), &c.name);
        loop {
            let now = self.checks(c, None, &dependents).await?;
            let mut failures = checks::failures(&c.name, &r.baseline, &now);
            let (holder, _) = self.look(c).await?;
            match &holder {
                Holder::Flotilla { ours: true, .. } => {}
                other => failures.push(format!(
                    "its port(s) are not held by flotilla's instance: {}",
                    serde_json::to_string(other).unwrap_or_default()
                )),
            }
            r.acceptance = now;
            if failures.is_empty() || Instant::now() >= deadline {
                for c in &r.acceptance {
                    (self.say)(format!(
                        "  {} {}: {}",
                        if c.passed { "ok  " } else { "FAIL" },
                        c.what,
                        c.saw
                    ));
                }
                self.save(r)?;
                return Ok(failures);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Goes back now, for `reason`: stops Flotilla's instance, proves it gone,
    /// restores the prior owner and proves it back with the baseline's checks.
    ///
    /// # Errors
    /// As [`Adopt::adopt`].
    pub async fn rollback(&self, mut r: AdoptRecord, reason: String) -> Result<Ended, AdoptError> {
        r.command_line = self.invocation.command_line.clone();
        self.rollback_now(&mut r, reason).await
    }

    async fn rollback_now(&self, r: &mut AdoptRecord, reason: String) -> Result<Ended, AdoptError> {
        let c = self.component()?.clone();
        let ports = prior::declared_ports(&c);
        r.rollback_reason = Some(reason.clone());
        self.enter(r, Phase::Rollback, reason)?;
        // Flotilla's instance first, when one runs or is recorded (one started by an
        // invocation killed before journaling it carries its marker).
        let marked = self.runs(&c, None).await?;
        let recorded = crate::operate::open_store(&self.invocation.state)?
            .instance(&c.name)
            .map_err(|source| OperateError::Store {
                path: self.invocation.state.database(),
                source: Box::new(source),
            })?
            .is_some();
        let op = Operation {
            verb: Verb::Stop,
            target: c.name.clone(),
            force: true,
            cascade: false,
            no_recreate: false,
        };
        let stopped = if !marked && !recorded {
            self.note(
                r,
                "flotilla's instance does not run: nothing to stop".into(),
            )?;
            Ok(())
        } else {
            match self.invocation.run_locked(Some(&op), None, false).await? {
                InvocationOutcome::Applied { report, .. } if report.succeeded() => Ok(()),
                InvocationOutcome::Applied { report, .. } => Err(report
                    .failed
                    .map(|f| f.summary)
                    .unwrap_or_else(|| "the stop failed".into())),
                InvocationOutcome::Refused(refusal) => Err(refusal.to_string()),
                InvocationOutcome::Planned(_) => unreachable!("not a dry run"),
            }
        };
        if let Err(why) = stopped {
            let msg = format!(
                "flotilla's instance of `{}` could not be stopped ({why}): the prior owner was not restored, so that two never run at once. Stop it (`flotilla stop {} --force`), then `flotilla adopt {} --rollback`",
                c.name, c.name, c.name
            );
            self.note(r, msg.clone())?;
            return Ok(Ended::Stuck(r.clone(), msg));
        }
        // Its ports: free, or still the prior owner's (it was never stopped).
        let still = self.runs(&c, Some(&r.prior)).await?;
        if !still {
            let free = self.free_soon(&c).await?;
            if let Err(who) = free {
                let msg = format!(
                    "the port(s) of `{}` are still held after flotilla's instance stopped ({who}): the prior owner was not restored, so that two never run at once. Nothing of `{}` is known to run as it should: free the port(s), then `flotilla adopt {} --rollback`",
                    c.name, c.name, c.name
                );
                self.note(r, msg.clone())?;
                return Ok(Ended::Stuck(r.clone(), msg));
            }
            self.note(
                r,
                format!(
                    "flotilla's instance stopped: port(s) {} free",
                    ports_text(&ports)
                ),
            )?;
        }
        let (now, done) = self
            .act(
                &c,
                Ask::Restore {
                    prior: r.prior.clone(),
                },
            )
            .await?;
        if let Some(now) = now {
            r.prior = now;
        }
        match done {
            Done { ok: true, says } => self.note(r, says)?,
            Done { ok: false, says: e } => {
                let msg = format!(
                    "NOTHING RUNS `{}` NOW: flotilla's instance is stopped and the prior owner ({}) could not be restored: {e}. {}",
                    c.name,
                    r.prior.describe(),
                    restore_by_hand(&r.prior)
                );
                self.note(r, msg.clone())?;
                return Ok(Ended::Stuck(r.clone(), msg));
            }
        }
        // Proven back: its ports listened on, and what passed at baseline passes.
        let deadline = Instant::now() + self.accept_within;
        let within_ms = self.accept_within.as_millis() as u64;
        self.ask(&c, Ask::WaitListening { within_ms }).await?;
        let dependents = checks::dependents(self.topology(), &c.name);
        let failures = loop {
            let now = self.checks(&c, Some(r.prior.clone()), &dependents).await?;
            let mut failures = checks::failures(&c.name, &r.baseline, &now);
            // Its own readiness is required only as at baseline.
            let own = format!("readiness of {}", c.name);
            if r.baseline.iter().any(|b| b.what == own && !b.passed) {
                failures.retain(|f| !f.starts_with(&own));
            }
            if !self.runs(&c, Some(&r.prior)).await? {
                failures.push(format!("{} is not running", r.prior.describe()));
            }
            if failures.is_empty() || Instant::now() >= deadline {
                r.acceptance = now;
                break failures;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        if !failures.is_empty() {
            let msg = format!(
                "the prior owner ({}) was restored but is not as it was: {}",
                r.prior.describe(),
                failures.join("; ")
            );
            self.note(r, msg.clone())?;
            return Ok(Ended::Stuck(r.clone(), msg));
        }
        self.enter(
            r,
            Phase::RolledBack,
            format!(
                "{} runs `{}` again, the baseline's checks pass",
                r.prior.describe(),
                c.name
            ),
        )?;
        Ok(Ended::RolledBack(r.clone()))
    }
}

/// A host's answer that does not fit its question.
fn unexpected(c: &Component, answer: &Answer) -> AdoptError {
    AdoptError::Remote(crate::ssh::TransportError::Failed {
        host: c.host.clone(),
        detail: format!("unexpected answer to adopt: {answer:?}"),
    })
}

/// What the user can run to bring the prior owner back by hand.
fn restore_by_hand(prior: &Prior) -> String {
    match prior {
        Prior::Process(p) => format!(
            "To run it by hand: cd {} && {}",
            crate::remote::shell_quote(p.cwd.as_deref().unwrap_or("/")),
            p.argv
                .iter()
                .map(|w| crate::remote::shell_quote(w))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Prior::Unit(u) => format!("To start it by hand: systemctl enable --now {}", u.unit),
        Prior::Container(k) => format!(
            "To start it by hand: podman start {} (its id; while flotilla's container holds its name it may be called {})",
            k.id,
            super::container::kept_name(k)
        ),
        Prior::Job(j) => format!(
            "To load it by hand: launchctl bootstrap {} {}",
            j.domain, j.plist
        ),
    }
}

/// The steps an adopt of `c` from `prior` takes, as the plan shows them.
fn steps(c: &Component, prior: &Prior, adapter: &str, dependents: &[String]) -> Vec<String> {
    let ports = ports_text(&prior::declared_ports(c));
    let (signal, grace) = crate::adapter::stop_settings(c);
    let stop = match prior {
        Prior::Process(p) => format!(
            "stop pid {}{} with {signal} (SIGKILL after {}), only while it is the process measured now (pid and start time); prove port(s) {ports} free",
            p.pid,
            if p.pgid == p.pid as i32 { " and its process group" } else { "" },
            humantime::format_duration(grace)
        ),
        Prior::Unit(u) if u.unit_file_state.as_deref() == Some("enabled") => format!(
            "`systemctl disable --now {}` (so it does not come back at boot); prove it inactive and port(s) {ports} free",
            u.unit
        ),
        Prior::Unit(u) => format!(
            "`systemctl stop {}`; prove it inactive and port(s) {ports} free",
            u.unit
        ),
        Prior::Container(k)
            if c.container.as_ref().and_then(|d| d.name.as_deref()) == Some(k.name.as_str()) =>
        {
            format!(
                "stop container {} (kept, not removed, as {}: flotilla's container takes its name); prove port(s) {ports} free",
                k.name,
                super::container::kept_name(k)
            )
        }
        Prior::Container(k) => format!("stop container {} (kept, not removed); prove port(s) {ports} free", k.name),
        Prior::Job(j) => format!(
            "`launchctl bootout {}/{}` (its plist {} kept); prove it unloaded and port(s) {ports} free",
            j.domain, j.label, j.plist
        ),
    };
    let restore = match prior {
        Prior::Process(p) => format!(
            "run its command line again (in {}, with its environment of {} variables)",
            p.cwd.as_deref().unwrap_or("/"),
            p.env.len()
        ),
        Prior::Unit(u) if u.unit_file_state.as_deref() == Some("enabled") => {
            format!("`systemctl enable --now {}`", u.unit)
        }
        Prior::Unit(u) => format!("`systemctl start {}`", u.unit),
        Prior::Container(k) => format!("start container {} (by its id, {})", k.name, k.id),
        Prior::Job(j) => format!("bootstrap {} again", j.plist),
    };
    let deps = if dependents.is_empty() {
        String::new()
    } else {
        format!(", and the readiness of {}", dependents.join(", "))
    };
    vec![
        "back up the project's state (`flotilla restore` can take it back)".into(),
        stop,
        format!("start `{}` through flotilla ({adapter}), ready by its readiness probe", c.name),
        format!("acceptance: the baseline's checks again on flotilla's instance (its ports held by it, its readiness{deps})"),
        format!(
            "keep; if a step or the acceptance fails, roll back: stop flotilla's instance, prove port(s) {ports} free, {restore}, and prove it back with the baseline's checks"
        ),
    ]
}
