//! Host mode, the far side of [`crate::remote`]: `flotilla host serve` reads one
//! request from standard input and answers it from this host's own state directory
//! (hello, observe, logs, check, discover, step, adopt), with the host's own executor and
//! probes.

use crate::executor::{Executor, StepReport};
use crate::remote::{
    error, reply, this_platform, Call, HostFacts, Reply, Request, Response, DEFAULT_PROJECT,
    PROTOCOL, VERSION,
};
use crate::statedir::StateDir;
use crate::this_process::now_ms;
use flotilla_model::topology::Snapshot;
use flotilla_model::Topology;
use flotilla_plan::Step;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `flotilla host serve` on standard input and output: reads the request (the first
/// line), watches the rest of standard input in a thread (its end means the
/// controller gave up), serves it on a new runtime and writes the response as one
/// line of JSON.
///
/// # Errors
/// Reading standard input, starting the runtime, or writing standard output.
pub fn serve_stdio(state_dir: Option<&Path>) -> std::io::Result<()> {
    use std::io::{BufRead, Read, Write};
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    let mut input = Vec::new();
    stdin.read_until(b'\n', &mut input)?;
    let cancelled = tokio_util::sync::CancellationToken::new();
    let flag = cancelled.clone();
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let _ = stdin.read_to_end(&mut rest);
        flag.cancel();
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let response = rt.block_on(serve(&input, state_dir, cancelled));
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &response)?;
    writeln!(out)?;
    out.flush()
}

/// Serves one request on the host (what `flotilla host serve` runs): `input` is
/// the request's JSON, `state_dir` the `--state-dir` given (else the default).
/// `cancelled` is cancelled when the controller gives up (its end of standard input
/// closes): a step then stops waiting and stops what it launched. Never fails:
/// problems are [`Reply::Error`] answers.
pub async fn serve(
    input: &[u8],
    state_dir: Option<&Path>,
    cancelled: tokio_util::sync::CancellationToken,
) -> Response {
    let value: serde_json::Value = match serde_json::from_slice(input) {
        Ok(v) => v,
        Err(e) => return error("request", format!("not a JSON request: {e}")),
    };
    let theirs = value.get("protocol").and_then(|p| p.as_u64());
    if theirs != Some(u64::from(PROTOCOL)) {
        let version = value
            .get("version")
            .and_then(|v| v.as_str())
            .unwrap_or("unknown");
        return error(
            "protocol",
            format!(
                "this host runs flotilla {VERSION} (protocol {PROTOCOL}); the controller runs flotilla {version} (protocol {}): run `flotilla host install` for this host from the controller",
                theirs.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into())
            ),
        );
    }
    let request: Request = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => return error("request", format!("malformed request: {e}")),
    };
    // Each call's project has its own state below the host's state directory; a step
    // (which changes something) first moves a state directory from before projects.
    let state_of = |project: &Option<String>, prepare: bool| {
        let project = project.as_deref().unwrap_or(DEFAULT_PROJECT);
        let r = if prepare {
            StateDir::prepare(state_dir, project)
        } else {
            StateDir::resolve(state_dir, project)
        };
        r.map_err(|e| format!("state directory: {e}"))
    };
    match request.call {
        Call::Hello => {
            let state = match state_of(&None, false) {
                Ok(s) => s,
                Err(e) => return error("state", e),
            };
            let exe = std::env::current_exe().unwrap_or_default();
            let sha =
                crate::identity::file_sha256(&exe).unwrap_or_else(|e| format!("unreadable: {e}"));
            reply(Reply::Hello {
                facts: HostFacts {
                    platform: this_platform(),
                    version: VERSION.to_string(),
                    executable: exe.display().to_string(),
                    executable_sha256: sha,
                    state_dir: state.base().display().to_string(),
                },
            })
        }
        Call::Observe {
            snapshot,
            names,
            budget_ms,
        } => {
            let (here, state, topology, secrets) = match host_side(state_dir, snapshot) {
                Ok(x) => x,
                Err(e) => return *e,
            };
            let store = match crate::operate::open_store(&state) {
                Ok(s) => s,
                Err(e) => return error("state", crate::error::chain(&e)),
            };
            let observer = crate::observe::Observer {
                adapters: crate::adapter::Adapters::native(),
                topology: &topology,
                store: &store,
                state: &state,
                secrets: &secrets,
                here: Some(&here),
                probe_deadline: budget_ms
                    .map(|ms| std::time::Instant::now() + Duration::from_millis(ms)),
            };
            match observer.observe(&names).await {
                Ok(report) => reply(Reply::Observed { report }),
                Err(e) => error("state", crate::error::chain(&e)),
            }
        }
        Call::Logs {
            component,
            lines,
            project,
            from,
        } => {
            if component.is_empty() || component.contains('/') || component.starts_with('.') {
                return error("request", format!("`{component}` is not a component name"));
            }
            let state = match state_of(&project, false) {
                Ok(s) => s,
                Err(e) => return error("state", e),
            };
            let path = state.log(&component);
            // At most 1 MiB of new lines per call while following.
            let read = match from {
                Some(from) => crate::logs::read_since(&path, from, 1 << 20),
                None => crate::logs::tail_with_end(&path, lines),
            };
            match read {
                Ok((lines, end)) => reply(Reply::Logs {
                    end: Some(end),
                    path: path.display().to_string(),
                    exists: path.exists(),
                    modified_ms: std::fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as u64),
                    lines,
                }),
                Err(e) => error("state", crate::error::chain(&e)),
            }
        }
        Call::Check { snapshot, names } => {
            let (here, state, topology) = match host_parts(state_dir, snapshot) {
                Ok(x) => x,
                Err(e) => return *e,
            };
            // Secrets this host refuses to read (a secrets file others can read…) are
            // a finding in this host's own words; the other checks still run.
            let mut findings = Vec::new();
            let secrets = match crate::operate::secrets(&state) {
                Ok(s) => s,
                Err(e) => {
                    findings.push(crate::preflight::Finding {
                        check: "secrets".into(),
                        ok: false,
                        saw: crate::error::chain(&e),
                    });
                    match crate::secrets::SecretResolver::new(true, None) {
                        Ok(s) => s,
                        Err(e) => return error("state", e.to_string()),
                    }
                }
            };
            findings.extend(crate::preflight::check(
                &topology,
                &here,
                &names,
                &home_dir(),
                &state,
                &secrets,
            ));
            reply(Reply::Checked { findings })
        }
        Call::Discover { snapshot, options } => {
            // The journal's recorded pids count as covered when there is one; a host
            // without a state directory yet has none.
            let project = snapshot.project.as_deref().unwrap_or(DEFAULT_PROJECT);
            let state = StateDir::resolve(state_dir, project).ok();
            let report = crate::discover::discover(&snapshot, state.as_ref(), &options).await;
            reply(Reply::Discovered { report })
        }
        Call::Step {
            snapshot,
            step,
            wave,
            operation,
            ready_timeout_ms,
        } => {
            let digest = snapshot.topology_digest.clone();
            let state = match state_of(&snapshot.project, true) {
                Ok(s) => s,
                Err(e) => return error("state", e),
            };
            let topology = match Topology::from_snapshot(snapshot) {
                Ok(t) => Arc::new(t),
                Err(e) => return error("snapshot", e.to_string()),
            };
            if topology.id(&step.component).is_none() {
                return error(
                    "snapshot",
                    format!("`{}` is not a component of this host", step.component),
                );
            }
            match run_step(
                &state,
                StepArgs {
                    topology,
                    step,
                    wave,
                    operation,
                    topology_digest: digest,
                    ready_timeout_ms,
                },
                cancelled,
            )
            .await
            {
                Ok(report) => reply(Reply::Step { report }),
                Err(e) => error("state", e),
            }
        }
        Call::Adopt {
            snapshot,
            component,
            question,
        } => {
            let state = match state_of(&snapshot.project, true) {
                Ok(s) => s,
                Err(e) => return error("state", e),
            };
            let topology = match Topology::from_snapshot(snapshot) {
                Ok(t) => t,
                Err(e) => return error("snapshot", e.to_string()),
            };
            let Some(id) = topology.id(&component) else {
                return error(
                    "snapshot",
                    format!("`{component}` is not a component of this host"),
                );
            };
            let question: crate::adopt::host::Ask = match serde_json::from_value(question) {
                Ok(q) => q,
                Err(e) => return error("request", format!("malformed adopt question: {e}")),
            };
            let base_dir = home_dir();
            let here = crate::adopt::host::Here {
                component: topology.component(id),
                state: &state,
                base_dir: &base_dir,
            };
            match crate::adopt::host::answer(question, &here).await {
                Ok(answer) => match serde_json::to_value(&answer) {
                    Ok(answer) => reply(Reply::Adopt { answer }),
                    Err(e) => error("adopt", e.to_string()),
                },
                Err(e) => error("adopt", crate::error::chain(&e)),
            }
        }
    }
}

/// A step to run on this host, as the controller sent it.
struct StepArgs {
    topology: Arc<Topology>,
    step: Step,
    wave: usize,
    operation: String,
    topology_digest: String,
    ready_timeout_ms: u64,
}

async fn run_step(
    state: &StateDir,
    args: StepArgs,
    cancelled: tokio_util::sync::CancellationToken,
) -> Result<StepReport, String> {
    let StepArgs {
        topology,
        step,
        wave,
        operation,
        topology_digest,
        ready_timeout_ms,
    } = args;
    let holder = crate::lock::LockHolder::this_process(format!(
        "flotilla host serve: {} {} for {operation}",
        step.action.as_str(),
        step.component
    ));
    // The store first: it creates the state directory owner-only.
    let mut store = crate::operate::open_store(state).map_err(|e| crate::error::chain(&e))?;
    let _locks =
        crate::lock::LifecycleLock::acquire_for_step(state.root(), &step.component, &holder)
            .map_err(|e| crate::error::chain(&e))?;
    for note in crate::operate::reconcile(&topology, state, &mut store)
        .map_err(|e| crate::error::chain(&e))?
    {
        tracing::info!("{note}");
    }
    let secrets = Arc::new(crate::operate::secrets(state).map_err(|e| crate::error::chain(&e))?);
    let step_json = serde_json::to_string(&step).map_err(|e| e.to_string())?;
    let op = flotilla_store::NewOperation {
        verb: step.action.as_str().to_string(),
        target: step.component.clone(),
        flags: Vec::new(),
        plan_digest: flotilla_model::digest::digest_of(&step),
        topology_digest: topology_digest.to_string(),
        plan_json: step_json,
        who: crate::this_process::who(),
        pid: std::process::id(),
        command_line: format!("step of {operation}"),
        started_at_ms: now_ms(),
    };
    let op_id = store
        .begin_operation(&op)
        .map_err(|e| crate::error::chain(&e))?;
    let store = Arc::new(Mutex::new(store));
    let base_dir = home_dir();
    let mut exec = Executor {
        cancelled,
        topology,
        state: state.clone(),
        store: Arc::clone(&store),
        secrets,
        base_dir,
        ready_timeout: Duration::from_millis(ready_timeout_ms),
        log_max_bytes: crate::operate::LOG_MAX_BYTES,
        log_keep: crate::operate::LOG_KEEP,
        operation: op_id,
        events: Arc::new(|_| {}),
        transport: None,
        adapters: crate::adapter::Adapters::native(),
    };
    let mut report = exec.run_step(wave, step.clone()).await;
    // A start that failed here (not ready, or the controller gave up) leaves nothing
    // running: the controller may be gone and unable to clean up.
    if report.outcome != flotilla_store::Outcome::Succeeded && report.launched {
        // A cancelled run still stops what it launched: with a token of its own.
        exec.cancelled = tokio_util::sync::CancellationToken::new();
        let stop = Step {
            action: flotilla_plan::Action::Stop,
            reason: "stopped again on the host after a failed start".into(),
            ..step
        };
        let stopped = exec.run_step(wave, stop).await;
        report.summary = format!(
            "{}; stopped again on the host: {}",
            report.summary, stopped.summary
        );
        if let serde_json::Value::Object(map) = &mut report.evidence {
            map.insert(
                "host_cleanup".into(),
                serde_json::to_value(&stopped).unwrap_or_default(),
            );
        }
    }
    let mut store = store.lock().unwrap_or_else(|p| p.into_inner());
    let error =
        (report.outcome != flotilla_store::Outcome::Succeeded).then(|| report.summary.clone());
    store
        .finish_operation(op_id, report.outcome, now_ms(), error.as_deref())
        .map_err(|e| crate::error::chain(&e))?;
    Ok(report)
}

/// What a read-only call about `snapshot` needs on this host: its name, its project's
/// state directory (read where it is), the topology rebuilt from the snapshot, and
/// the secrets; or the error answer.
fn host_side(
    state_dir: Option<&Path>,
    snapshot: Snapshot,
) -> Result<(String, StateDir, Topology, crate::secrets::SecretResolver), Box<Response>> {
    let (here, state, topology) = host_parts(state_dir, snapshot)?;
    let secrets = crate::operate::secrets(&state)
        .map_err(|e| Box::new(error("state", crate::error::chain(&e))))?;
    Ok((here, state, topology, secrets))
}

/// This host's name, its project's state directory and the topology of `snapshot`.
fn host_parts(
    state_dir: Option<&Path>,
    snapshot: Snapshot,
) -> Result<(String, StateDir, Topology), Box<Response>> {
    let here = snapshot.host.clone();
    let project = snapshot.project.as_deref().unwrap_or(DEFAULT_PROJECT);
    let state = StateDir::resolve(state_dir, project)
        .map_err(|e| Box::new(error("state", format!("state directory: {e}"))))?;
    let topology = Topology::from_snapshot(snapshot)
        .map_err(|e| Box::new(error("snapshot", e.to_string())))?;
    Ok((here, state, topology))
}

/// This host's home directory: where relative paths of its components start.
fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}
