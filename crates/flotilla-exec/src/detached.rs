//! Starting programs that are not components: a service manager's verb run to its
//! end ([`run_verb`]: `systemctl`, `launchctl`, `systemd-run`), a program started
//! detached from the caller ([`spawn_detached`]: its own session, output appended to
//! a log), and this process replaced by another program in place ([`exec_in_place`]:
//! same pid). The agent's self-update uses them; signalling one recorded process is
//! [`crate::process::stop_identified`].

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Why a verb run by [`run_verb`] did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    /// The command could not be started.
    #[error("`{command}` could not be run")]
    Run {
        /// The command line.
        command: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// How it exited.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
}

/// Runs `argv` (`argv[0]` the program, from `PATH` when it has no `/`) to its end,
/// standard input `/dev/null`; its standard output.
///
/// # Errors
/// [`VerbError::Run`] when it cannot be started (or `argv` is empty);
/// [`VerbError::Failed`] when it exits unsuccessfully, with its standard error.
pub fn run_verb<S: AsRef<OsStr>>(argv: &[S]) -> Result<String, VerbError> {
    let command = argv
        .iter()
        .map(|a| a.as_ref().to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let Some((program, args)) = argv.split_first() else {
        return Err(VerbError::Run {
            command,
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no program"),
        });
    };
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| VerbError::Run {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(VerbError::Failed {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts `program` with `argv` (`argv[0]` included, as the process will see it)
/// detached: a new session (`setsid`, so no signal to the caller's process group or
/// session reaches it), standard input `/dev/null`, standard output and error
/// appended to `log` (created 0600 when missing, its directory too), in `cwd` (`/`
/// when that is not a directory; the caller's when `None`). The child is returned for
/// reaping; dropping it neither kills nor waits for the process.
///
/// # Errors
/// When the log cannot be opened or the program cannot be started.
pub fn spawn_detached(
    program: &Path,
    argv: &[OsString],
    cwd: Option<&Path>,
    log: &Path,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    if let Some(first) = argv.first() {
        cmd.arg0(first);
    }
    cmd.args(argv.iter().skip(1));
    if let Some(cwd) = cwd {
        cmd.current_dir(if cwd.is_dir() { cwd } else { Path::new("/") });
    }
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    in_new_session(&mut cmd).spawn()
}

/// Makes the process `cmd` starts the leader of a new session and process group
/// (`setsid()` before `exec`): no terminal's signals reach it, and its group can be
/// signalled as a whole.
pub fn in_new_session(cmd: &mut Command) -> &mut Command {
    // SAFETY: `setsid` is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        })
    }
}

/// [`Command::spawn`], retried for up to 500 ms on `ETXTBSY`: the program was just
/// written and some forked-but-not-yet-exec'd child (of this or another thread)
/// still holds it open for writing, which clears as soon as that child execs.
pub fn spawn_when_not_busy(cmd: &mut Command) -> std::io::Result<Child> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    loop {
        match cmd.spawn() {
            Err(e)
                if e.raw_os_error() == Some(nix::libc::ETXTBSY)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            other => return other,
        }
    }
}

/// Replaces this process with `program` run as `argv0 args…` (`execvp`: the pid, and
/// so what a supervisor watches, stays). Returns only when that failed, with why.
pub fn exec_in_place(program: &Path, argv0: &OsStr, args: &[OsString]) -> std::io::Error {
    Command::new(program).arg0(argv0).args(args).exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_report_output_and_failures() {
        assert_eq!(run_verb(&["echo", "a", "b"]).unwrap(), "a b\n");
        match run_verb(&["sh", "-c", "echo no >&2; exit 3"]) {
            Err(VerbError::Failed {
                command, stderr, ..
            }) => {
                assert_eq!(command, "sh -c echo no >&2; exit 3");
                assert_eq!(stderr, "no");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run_verb(&["/nonexistent/flotilla-verb"]),
            Err(VerbError::Run { .. })
        ));
        assert!(matches!(run_verb::<&str>(&[]), Err(VerbError::Run { .. })));
    }

    #[test]
    fn detached_children_have_their_own_session_and_log() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("logs/out.log");
        let mut child = spawn_detached(
            Path::new("/bin/sh"),
            &[
                "my-sh".into(),
                "-c".into(),
                "echo $0; pwd; exec sleep 30".into(),
            ],
            Some(Path::new("/nonexistent")),
            &log,
        )
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.lines().count() >= 2 || std::time::Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["my-sh", "/"], "{text}");
        if cfg!(target_os = "linux") {
            let st = crate::sys::read_stat(child.id()).unwrap().unwrap();
            assert_eq!(st.session, child.id() as i32, "a session of its own");
        }
        child.kill().unwrap();
        child.wait().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
