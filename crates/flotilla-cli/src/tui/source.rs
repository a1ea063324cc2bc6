//! Where the terminal UI's data comes from and where its effects go: the same
//! library calls as the CLI. Local mode observes with
//! [`flotilla_exec::world::World::observe`] (what `flotilla ps` calls); `--server`
//! reads `GET /v1/status` and `GET /v1/questions` through [`flotilla_api::Client`]
//! (what `status --server` and `questions` call). Plans and applies are
//! [`flotilla_exec::operate::Invocation::run`] (a dry run, as `start --dry-run`; then
//! exactly that plan, as `apply`); logs are read like `logs -f` (local files through
//! [`flotilla_exec::logs::Follower`], other hosts through their transport).

use crate::tui::action::{Action, Effect};
use crate::tui::model::Snapshot;
use flotilla_exec::logs::{self, TimedLine};
use flotilla_exec::operate::{Invocation, InvocationOutcome, OperateError};
use flotilla_exec::world::World;
use flotilla_exec::CancellationToken;
use flotilla_plan::{Operation, Plan};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How many lines of each log are shown when it starts being followed.
const LOG_TAIL: usize = 200;
/// Longer log lines are cut here (a 1 MiB line must not slow the screen).
const LOG_LINE_MAX: usize = 2000;
/// How often logs on other hosts are asked for their new lines (as `logs -f`).
const REMOTE_POLL: Duration = Duration::from_secs(1);

/// What operating on the inventory needs beyond the world.
pub struct Operate {
    /// `--state-dir`, if given.
    pub explicit_state: Option<PathBuf>,
    /// The inventory's directory.
    pub base_dir: PathBuf,
    /// Readiness deadline per started component.
    pub ready_timeout: Duration,
}

/// The UI's side of the library: observations, logs, plans, answers.
pub struct Source {
    /// Where actions go.
    pub tx: UnboundedSender<Action>,
    /// The project opened (local mode; `--server` with an inventory).
    pub world: Option<Arc<World>>,
    /// What operating needs (with `world`).
    pub operate: Option<Operate>,
    /// The authority (`--server`).
    pub client: Option<flotilla_api::Client>,
    /// How often to observe again.
    pub interval: Duration,
    refresh: Notify,
    follower: Mutex<Option<JoinHandle<()>>>,
    cancel: Mutex<Option<CancellationToken>>,
    stop: CancellationToken,
}

/// An error with its causes, on one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}

impl Source {
    /// A source sending its actions to `tx`.
    pub fn new(
        tx: UnboundedSender<Action>,
        world: Option<Arc<World>>,
        operate: Option<Operate>,
        client: Option<flotilla_api::Client>,
        interval: Duration,
    ) -> Source {
        Source {
            tx,
            world,
            operate,
            client,
            interval,
            refresh: Notify::new(),
            follower: Mutex::new(None),
            cancel: Mutex::new(None),
            stop: CancellationToken::new(),
        }
    }

    /// Starts observing (and, with an authority, reading its questions) every
    /// `interval`, and at each [`Effect::Refresh`].
    pub fn start(self: &Arc<Self>) {
        let me = Arc::clone(self);
        on_own_thread(move || async move {
            loop {
                let snapshot = tokio::select! {
                    s = me.observe() => s,
                    _ = me.stop.cancelled() => return,
                };
                if me.tx.send(Action::Observed(snapshot)).is_err() {
                    return;
                }
                if let Some(c) = &me.client {
                    let qs: Result<flotilla_api::sessions::QuestionsResponse, _> =
                        c.get("/v1/questions").await;
                    let qs = qs.map(|r| r.questions).map_err(|e| chain(&e));
                    if me.tx.send(Action::Questions(qs)).is_err() {
                        return;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(me.interval) => {}
                    _ = me.refresh.notified() => {}
                    _ = me.stop.cancelled() => return,
                }
            }
        });
    }

    /// Stops observing and following (the UI is ending).
    pub fn stop(&self) {
        self.stop.cancel();
        if let Some(f) = self.follower.lock().unwrap().take() {
            f.abort();
        }
    }

    /// One observation: the authority's status, else this machine's.
    async fn observe(&self) -> Result<Snapshot, String> {
        if let Some(c) = &self.client {
            let fleet = c.status().await.map_err(|e| chain(&e))?;
            return Ok(fleet_snapshot(fleet));
        }
        let world = self.world.as_ref().ok_or("nothing to observe")?;
        let (report, _) = world.observe(&[]).await.map_err(|e| chain(&e))?;
        Ok(Snapshot {
            report,
            notes: Vec::new(),
        })
    }

    /// Carries out an effect (in the background; results come back as actions).
    pub fn dispatch(self: &Arc<Self>, effect: Effect) {
        match effect {
            Effect::Refresh => self.refresh.notify_one(),
            Effect::Follow { names, generation } => {
                let me = Arc::clone(self);
                let task = tokio::spawn(async move { me.follow(names, generation).await });
                if let Some(old) = self.follower.lock().unwrap().replace(task) {
                    old.abort();
                }
            }
            Effect::Plan(op) => {
                let me = Arc::clone(self);
                on_own_thread(move || async move {
                    let result = me.plan(&op).await;
                    let _ = me.tx.send(Action::Planned { op, result });
                });
            }
            Effect::Apply(plan) => {
                let me = Arc::clone(self);
                let cancel = CancellationToken::new();
                *self.cancel.lock().unwrap() = Some(cancel.clone());
                on_own_thread(move || async move {
                    let result = me.apply(plan, cancel).await;
                    let _ = me.tx.send(Action::Applied(result));
                });
            }
            Effect::Cancel => {
                if let Some(c) = self.cancel.lock().unwrap().take() {
                    c.cancel();
                }
            }
            Effect::Answer { id, decision, note } => {
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let result = me.answer(id, &decision, note).await;
                    let _ = me.tx.send(Action::Answered(result));
                    me.refresh.notify_one();
                });
            }
        }
    }

    /// The invocation `flotilla start|stop|restart` would run, reporting progress as
    /// actions.
    fn invocation(
        &self,
        state: flotilla_exec::statedir::StateDir,
        cancel: CancellationToken,
        command: String,
    ) -> Result<Invocation, String> {
        let (Some(world), Some(op)) = (&self.world, &self.operate) else {
            return Err("no inventory loaded: operating needs it (-f FILE)".into());
        };
        let tx = self.tx.clone();
        Ok(Invocation {
            topology: Arc::clone(&world.topology),
            state,
            base_dir: op.base_dir.clone(),
            ready_timeout: op.ready_timeout,
            command_line: format!("{command} (from flotilla tui)"),
            events: Arc::new(move |e| {
                if let Some(line) = crate::cmd::lifecycle::event_line(&e) {
                    let _ = tx.send(Action::Progress(line));
                }
            }),
            show_plan: Box::new(|_| {}),
            fleet: Arc::clone(&world.fleet),
            host_timeout: world.host_timeout,
            cancel,
        })
    }

    /// The dry run of `op`: its plan, or the refusal's text as the CLI prints it.
    async fn plan(&self, op: &Operation) -> Result<Plan, Result<String, String>> {
        let state = self.world.as_ref().map(|w| w.state.clone());
        let state = state
            .ok_or_else(|| Err("no inventory loaded: operating needs it (-f FILE)".to_string()))?;
        let inv = self
            .invocation(state, CancellationToken::new(), op.to_string())
            .map_err(Err)?;
        match inv.run(Some(op), None, true).await {
            Ok(InvocationOutcome::Planned(plan)) => Ok(plan),
            Ok(InvocationOutcome::Refused(r)) => {
                Err(Ok(crate::render::refusal(&r, &op.verb.to_string())))
            }
            Ok(InvocationOutcome::Applied { operation, .. }) => {
                Err(Err(format!("{operation} was applied by a dry run")))
            }
            Err(e) => Err(Err(operate_error(&e))),
        }
    }

    /// Applies exactly `plan` (refused when stale, as `flotilla apply`): the
    /// outcome's text as the CLI prints it and whether it succeeded.
    async fn apply(&self, plan: Plan, cancel: CancellationToken) -> Result<(String, bool), String> {
        let (Some(world), Some(op)) = (&self.world, &self.operate) else {
            return Err("no inventory loaded: operating needs it (-f FILE)".into());
        };
        // A verb that changes something moves a state directory from before
        // projects into this project first, as the CLI's do.
        let state = flotilla_exec::statedir::StateDir::prepare(
            op.explicit_state.as_deref(),
            world.project(),
        )
        .map_err(|e| format!("error: {}", chain(&e)))?;
        let verb = plan.operation.verb.to_string();
        let inv = self.invocation(state, cancel, plan.operation.to_string())?;
        match inv.run(None, Some(plan), false).await {
            Ok(InvocationOutcome::Applied {
                report, operation, ..
            }) => Ok((
                crate::cmd::lifecycle::applied(&operation, &report),
                report.succeeded(),
            )),
            Ok(InvocationOutcome::Refused(r)) => Ok((crate::render::refusal(&r, &verb), false)),
            Ok(InvocationOutcome::Planned(_)) => Err("planned instead of applied".into()),
            Err(e) => Err(operate_error(&e)),
        }
    }

    /// Answers a question (`POST /v1/questions/{id}/answer`, as `flotilla question
    /// answer`).
    async fn answer(
        &self,
        id: u64,
        decision: &str,
        note: Option<String>,
    ) -> Result<String, String> {
        let c = self.client.as_ref().ok_or("no authority (--server)")?;
        let r: Result<flotilla_api::sessions::QuestionDto, _> = c
            .post(
                &format!("/v1/questions/{id}/answer"),
                &flotilla_api::sessions::AnswerRequest {
                    decision: decision.to_string(),
                    note,
                },
            )
            .await;
        match r {
            Ok(q) => Ok(crate::cmd::question::answered(&q, decision).0),
            Err(flotilla_api::ClientError::Api {
                status: 409, error, ..
            }) => Err(format!("refused: {}", error.message)),
            Err(e) => Err(chain(&e)),
        }
    }

    /// Follows `names`' logs (as `logs -f`): the last lines, then what is appended,
    /// sent as [`Action::Log`] only when there is something new.
    async fn follow(&self, names: Vec<String>, generation: u64) {
        let send = |lines: Vec<String>| self.tx.send(Action::Log { generation, lines }).is_ok();
        let fail = |error: String| {
            let _ = self.tx.send(Action::LogError { generation, error });
        };
        if names.is_empty() {
            return;
        }
        let Some(world) = &self.world else {
            fail("no inventory loaded: logs need it (-f FILE)".into());
            return;
        };
        let topology = &world.topology;
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let prefix = |i: usize| -> String {
            if names.len() < 2 {
                String::new()
            } else {
                format!("{:<width$} | ", names[i])
            }
        };
        let show = |batch: Vec<(usize, TimedLine)>| -> Vec<String> {
            batch
                .into_iter()
                .map(|(i, l)| {
                    let text: String = l.text.chars().take(LOG_LINE_MAX).collect();
                    format!("{}{}", prefix(i), crate::render::printable(&text, false))
                })
                .collect()
        };
        let remote_host = |name: &str| -> Option<String> {
            let c = topology.component(topology.id(name)?);
            topology
                .hosts
                .get(&c.host)
                .filter(|h| h.is_remote())
                .map(|_| c.host.clone())
        };
        let mut first: Vec<Vec<TimedLine>> = Vec::new();
        let mut local = Vec::new();
        let mut remote = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if let Some(host) = remote_host(name) {
                let read = crate::cmd::logs::Read::Tail(LOG_TAIL);
                match crate::cmd::logs::read_remote(
                    world.fleet.as_ref(),
                    topology.project.clone(),
                    &host,
                    name,
                    read,
                    world.host_timeout,
                )
                .await
                {
                    Ok(log) => {
                        first.push(log.lines);
                        if let Some(end) = log.end {
                            remote.push((i, host, end));
                        }
                    }
                    Err(e) => {
                        fail(format!("{name}: {e:#}"));
                        first.push(Vec::new());
                    }
                }
                continue;
            }
            let path = world.state.log(name);
            match logs::tail_timed(&path, LOG_TAIL) {
                Ok(t) => {
                    local.push((i, path, t.end));
                    first.push(t.lines);
                }
                Err(e) => {
                    fail(format!("{name}: {}", chain(&e)));
                    first.push(Vec::new());
                }
            }
        }
        let lines = show(logs::merge(first));
        if !lines.is_empty() && !send(lines) {
            return;
        }
        let index: Vec<usize> = local.iter().map(|(i, _, _)| *i).collect();
        let mut follower = logs::Follower::new(local.into_iter().map(|(_, p, end)| (p, end)));
        let mut next_remote = tokio::time::Instant::now() + REMOTE_POLL;
        loop {
            tokio::time::sleep(logs::FOLLOW_POLL).await;
            let mut batch: Vec<Vec<TimedLine>> = vec![Vec::new(); names.len()];
            match follower.poll() {
                Ok(got) => {
                    for (k, line) in got {
                        batch[index[k]].push(line);
                    }
                }
                Err(e) => fail(chain(&e)),
            }
            if !remote.is_empty() && tokio::time::Instant::now() >= next_remote {
                for (i, host, end) in remote.iter_mut() {
                    let read = crate::cmd::logs::Read::Since(*end);
                    match crate::cmd::logs::read_remote(
                        world.fleet.as_ref(),
                        topology.project.clone(),
                        host,
                        &names[*i],
                        read,
                        world.host_timeout,
                    )
                    .await
                    {
                        Ok(log) => {
                            if let Some(next) = log.end {
                                *end = next;
                            }
                            batch[*i].extend(log.lines);
                        }
                        Err(e) => fail(format!("{}: {e:#}", names[*i])),
                    }
                }
                next_remote = tokio::time::Instant::now() + REMOTE_POLL;
            }
            let lines = show(logs::merge(batch));
            if !lines.is_empty() && !send(lines) {
                return;
            }
        }
    }
}

/// Runs the future `f` makes on a blocking thread of the runtime: the library's
/// observations hold the journal (a SQLite connection, not `Sync`) across awaits, so
/// their futures cannot move between worker threads.
fn on_own_thread<F, Fut>(f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || handle.block_on(f()));
}

/// An invocation's error as the CLI prints it.
fn operate_error(e: &OperateError) -> String {
    match e {
        OperateError::StalePlan(why) => format!("error: refused: stale plan: {why}"),
        other => format!("error: {}", chain(other)),
    }
}

/// The authority's status as a snapshot: its report, and notes on the selected
/// revision and its hosts.
fn fleet_snapshot(fleet: flotilla_api::wire::FleetStatus) -> Snapshot {
    let mut notes = vec![match &fleet.selection {
        Some(s) => format!(
            "revision {} (index {})",
            crate::render::short_digest(&s.revision),
            s.index
        ),
        None => "no revision selected (flotilla config publish)".into(),
    }];
    let hosts: Vec<String> = fleet
        .hosts
        .iter()
        .map(|h| {
            let age = h
                .age_ms
                .map(|a| format!(", last report {} ago", flotilla_exec::observe::age(a)))
                .unwrap_or_default();
            format!("{} {}{age}", h.host, h.observability)
        })
        .collect();
    if !hosts.is_empty() {
        notes.push(format!("hosts: {}", hosts.join(" · ")));
    }
    Snapshot {
        report: fleet.report,
        notes,
    }
}
