//! Starting a component's program: directly with its output appended to its log,
//! or (the default of the `flotilla` binary) under its log writer
//! ([`crate::log_writer`]), placed in a systemd scope of its own when this process
//! runs as a systemd service ([`crate::placement`]). [`crate::process::start`]
//! measures what was started.

use crate::detached::{in_new_session, spawn_when_not_busy};
use crate::logs::open_append;
use crate::ExecError;
use std::fmt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Everything needed to start one component's process.
#[derive(Clone)]
pub struct ProcessSpec {
    /// The component's name (used in errors and tracing only).
    pub component: String,
    /// The program: a path if it contains `/` (relative paths are relative to
    /// `cwd`), otherwise a name searched in `PATH` (the component's own `PATH` from
    /// `env` when it sets one, else this process's). Also passed as argv\[0\].
    pub program: String,
    /// Arguments after argv\[0\].
    pub args: Vec<String>,
    /// The environment, already resolved (secret values included): the whole
    /// environment of the child unless `inherit_env`. Never logged; `Debug` prints the
    /// names only.
    pub env: Vec<(String, String)>,
    /// Start from this process's environment (then `env` over it) instead of `env`
    /// alone.
    pub inherit_env: bool,
    /// Working directory (must exist).
    pub cwd: PathBuf,
    /// The log file: stdout and stderr are appended to it. Its directory is created.
    pub log_path: PathBuf,
    /// Rotate the log at start when it is larger than this many bytes (0: never).
    pub log_max_bytes: u64,
    /// Rotated copies kept (`X.log.1` … `X.log.<keep>`).
    pub log_keep: u32,
    /// Appended to `started pid N` in the start marker the log writer writes before
    /// the process's first line, e.g. ` (op-12)` (see [`crate::log_writer`]).
    pub start_note: String,
}

impl fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessSpec")
            .field("component", &self.component)
            .field("program", &self.program)
            .field("args", &self.args)
            .field(
                "env",
                &self
                    .env
                    .iter()
                    .map(|(k, _)| format!("{k}=<redacted>"))
                    .collect::<Vec<_>>(),
            )
            .field("cwd", &self.cwd)
            .field("log_path", &self.log_path)
            .field("log_max_bytes", &self.log_max_bytes)
            .field("log_keep", &self.log_keep)
            .field("start_note", &self.start_note)
            .finish()
    }
}

/// Spawns the program itself with stdout and stderr appended to the log (no log
/// writer: lines get no time of their own).
pub(crate) fn spawn_direct(
    spec: &ProcessSpec,
    program: &Path,
    log_err: &dyn Fn(&Path, std::io::Error) -> ExecError,
) -> Result<std::process::Child, ExecError> {
    let component = spec.component.as_str();
    let log = open_append(&spec.log_path).map_err(|e| log_err(&spec.log_path, e))?;
    let log2 = log.try_clone().map_err(|e| log_err(&spec.log_path, e))?;
    let mut cmd = Command::new(program);
    if !spec.inherit_env {
        cmd.env_clear();
    }
    cmd.arg0(&spec.program)
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2));
    spawn_when_not_busy(in_new_session(&mut cmd)).map_err(|source| ExecError::Spawn {
        component: component.to_string(),
        program: program.to_path_buf(),
        source,
    })
}

/// Starts the program through the log writer (`writer log-writer`, see
/// [`crate::log_writer`]), in a session of its own, and in a systemd scope of its
/// own when [`crate::placement::scope_placement`] says so (started without one,
/// with a warning, when `systemd-run` cannot make it): returns the child handle
/// (the writer, or `systemd-run` that became it; it exits the way the component
/// does) and the component's pid.
pub(crate) fn spawn_through_writer(
    writer: &Path,
    spec: &ProcessSpec,
    program: &Path,
) -> Result<(std::process::Child, u32), ExecError> {
    // `systemd-run` executes the writer itself, so `/proc/self/exe` would name
    // systemd-run: the file it stands for is given instead (not when it was replaced
    // since this process started: then no scope).
    let named = match writer.strip_prefix("/proc/self") {
        Ok(_) => std::fs::read_link(writer).ok().filter(|p| p.is_file()),
        Err(_) => Some(writer.to_path_buf()),
    };
    if let (Some((user, run)), Some(named)) = (crate::placement::scope_placement(), named) {
        let at_ms = crate::this_process::now_ms().max(0) as u64;
        let unit = crate::placement::scope_name(&spec.component, at_ms);
        let mut cmd = Command::new(run);
        cmd.env_clear();
        if *user {
            cmd.arg("--user");
        }
        cmd.args(["--scope", "--quiet", "--collect"])
            .arg(format!("--unit={unit}"))
            .arg("--")
            .arg(&named);
        // systemd-run finds the user manager's bus through these.
        for keep in ["XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"] {
            if let Some(v) = std::env::var_os(keep) {
                cmd.env(keep, v);
            }
        }
        match through_writer(cmd, writer, spec, program)? {
            Ok(started) => return Ok(started),
            Err(why) => tracing::warn!(
                component = %spec.component,
                unit,
                why,
                "systemd-run could not place the component in a scope of its own; started without one"
            ),
        }
    }
    let mut cmd = Command::new(writer);
    cmd.arg0("flotilla").env_clear();
    match through_writer(cmd, writer, spec, program)? {
        Ok(started) => Ok(started),
        Err(why) => Err(ExecError::Spawn {
            component: spec.component.clone(),
            program: program.to_path_buf(),
            source: std::io::Error::other(format!(
                "the log writer {} failed: {why}",
                writer.display()
            )),
        }),
    }
}

/// Runs `cmd` (which ends in executing `writer`, with the environment it was
/// given: none of the component's) as the log writer of `spec`:
/// `Ok(Ok(..))` started; `Ok(Err(why))` when it ended without answering (so nothing
/// was started); `Err` when the writer answered that the program could not be
/// started, or `cmd` could not be run at all.
fn through_writer(
    mut cmd: Command,
    writer: &Path,
    spec: &ProcessSpec,
    program: &Path,
) -> Result<Result<(std::process::Child, u32), String>, ExecError> {
    use crate::log_writer::{Reply, Request, SUBCOMMAND};
    use std::io::{BufRead, Write};
    let component = spec.component.as_str();
    let spawn_err = |source: std::io::Error| ExecError::Spawn {
        component: component.to_string(),
        program: program.to_path_buf(),
        source,
    };
    let mut env: Vec<(String, String)> = Vec::new();
    if spec.inherit_env {
        env.extend(std::env::vars());
    }
    env.extend(spec.env.iter().cloned());
    let request = Request {
        program: program.to_path_buf(),
        arg0: spec.program.clone(),
        args: spec.args.clone(),
        env,
        cwd: spec.cwd.clone(),
        log: spec.log_path.clone(),
        start_note: spec.start_note.clone(),
        log_max_bytes: spec.log_max_bytes,
        log_keep: spec.log_keep,
    };
    // `flotilla log-writer llm` in ps (the component's name is for people only).
    cmd.arg(SUBCOMMAND)
        .arg(&spec.component)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = in_new_session(&mut cmd)
        .spawn()
        .map_err(|e| ExecError::Spawn {
            component: component.to_string(),
            program: writer.to_path_buf(),
            source: e,
        })?;
    let sent = child
        .stdin
        .take()
        .map(|mut stdin| {
            serde_json::to_writer(&mut stdin, &request)
                .map_err(std::io::Error::from)
                .and_then(|()| stdin.flush())
        })
        .unwrap_or_else(|| Err(std::io::Error::other("no pipe to the log writer")));
    drop(request);
    let mut line = String::new();
    let answered = child
        .stdout
        .take()
        .map(|out| std::io::BufReader::new(out).read_line(&mut line))
        .unwrap_or(Ok(0));
    match serde_json::from_str::<Reply>(line.trim()) {
        Ok(Reply::Started { pid }) => Ok(Ok((child, pid))),
        Ok(Reply::SpawnFailed { errno, message }) => {
            let _ = child.wait();
            Err(spawn_err(match errno {
                Some(n) => std::io::Error::from_raw_os_error(n),
                None => std::io::Error::other(message),
            }))
        }
        Err(_) => {
            let status = child
                .wait()
                .map(|s| crate::exit_status::describe_exit(&s))
                .unwrap_or_default();
            Ok(Err(match (sent, answered) {
                (Err(e), _) | (_, Err(e)) => e.to_string(),
                _ => format!("it ended ({status}) without starting it"),
            }))
        }
    }
}
