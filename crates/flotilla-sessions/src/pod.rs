//! Inside a session's pod (the Kubernetes runtime, `flotilla-kube`): what its two
//! containers run.
//!
//! - The init container (`flotilla session-pod prepare`) makes the session's tree
//!   on the first boot from a git bundle of its base, fetched from the authority
//!   with the session's credential ([`crate::clone_cache::tree_from_bundle`]), and
//!   resets the agent's home as the local launcher does
//!   ([`crate::privsep::launcher::reset_home`]).
//! - The agent container (`flotilla session-pod run -- CLAUDE ARGS…`) is the pod's
//!   first process: [`run_agent`] gives Claude Code its prompt on stdin, names or
//!   resumes the conversation by what the home holds (the home is here, not on
//!   the authority), keeps the end of its stderr for the pod's termination message
//!   (its stdout is the pod's log, which the authority copies as the transcript),
//!   passes SIGTERM and SIGINT on, and exits with its status.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the kubelet reads a container's termination message by default
/// (<https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/>);
/// it reads at most 4096 bytes of it.
pub const TERMINATION_LOG: &str = "/dev/termination-log";

/// How much of the agent's stderr the termination message keeps: its last bytes,
/// within the kubelet's 4096.
pub const TERMINATION_TAIL: usize = 4000;

/// What [`run_agent`] runs.
#[derive(Debug, Clone)]
pub struct AgentRun {
    /// Claude Code (absolute, inside the image).
    pub program: PathBuf,
    /// Its arguments, as the authority built them: `--session-id UUID` or
    /// `--resume UUID` among them.
    pub args: Vec<String>,
    /// The agent's home (`HOME`).
    pub home: PathBuf,
    /// The run files (the Secret's mount): `prompt` is given on stdin when there.
    pub run: PathBuf,
    /// Where the end of stderr is written when the agent ends.
    pub termination_log: PathBuf,
}

/// `args` with the conversation named as `home` says: `--session-id UUID` becomes
/// `--resume UUID` when the transcript of `UUID` is in `home` (an earlier pod began
/// it), and `--resume UUID` becomes `--session-id UUID` when it is not (the
/// earlier pod never got that far); anything else is kept.
pub fn conversation_args(args: &[String], home: &Path) -> Vec<String> {
    let mut out = args.to_vec();
    if let Some(i) = out
        .iter()
        .position(|a| a == "--session-id" || a == "--resume")
    {
        if let Some(uuid) = out.get(i + 1).cloned() {
            let began = crate::privsep::launcher::has_transcript(home, &uuid);
            out[i] = if began { "--resume" } else { "--session-id" }.into();
        }
    }
    out
}

/// Keeps the last `max` bytes written to it.
#[derive(Debug, Default)]
struct Tail {
    max: usize,
    bytes: Vec<u8>,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.max {
            let cut = self.bytes.len() - self.max;
            self.bytes.drain(..cut);
        }
    }
}

/// Runs the agent as [`AgentRun`] says and waits for it: its exit code, or 128 +
/// the signal that ended it. SIGTERM and SIGINT sent to this process (the pod's
/// first, to which the kubelet sends them) are passed to the agent.
///
/// # Errors
/// [`io::Error`] when the agent cannot be started or waited for, or the prompt
/// cannot be opened.
pub fn run_agent(run: &AgentRun) -> io::Result<i32> {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal};
    use std::os::unix::process::ExitStatusExt;
    let args = conversation_args(&run.args, &run.home);
    let prompt = run.run.join("prompt");
    let stdin = if prompt.exists() {
        Stdio::from(std::fs::File::open(&prompt)?)
    } else {
        Stdio::null()
    };
    // Blocked here before any thread starts, so only the forwarding thread takes
    // them; the child starts with an empty mask (std resets it).
    let mut forwarded = SigSet::empty();
    forwarded.add(Signal::SIGTERM);
    forwarded.add(Signal::SIGINT);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&forwarded), None)
        .map_err(io::Error::from)?;
    let mut command = Command::new(&run.program);
    // The agent and everything it runs get the signals again (a blocked mask is
    // inherited through exec, and std does not reset it).
    // SAFETY: between fork and exec only sigprocmask runs, on a set made before.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(move || {
            nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&forwarded), None)
                .map_err(io::Error::from)
        });
    }
    let mut child = command
        .args(&args)
        .stdin(stdin)
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", run.program.display())))?;
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    std::thread::spawn(move || {
        while let Ok(sig) = forwarded.wait() {
            let _ = nix::sys::signal::kill(pid, sig);
        }
    });
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut tail = Tail {
            max: TERMINATION_TAIL,
            bytes: Vec::new(),
        };
        let mut buf = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            tail.push(&buf[..n]);
        }
        tail.bytes
    });
    let status = child.wait()?;
    let tail = reader.join().unwrap_or_default();
    if !tail.is_empty() {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&run.termination_log)
        {
            let _ = f.write_all(&tail);
        }
    }
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_conversation_is_resumed_only_when_its_transcript_is_in_the_home() {
        let home = tempfile::tempdir().unwrap();
        let uuid = "0b5e1c9e-2f9e-4a43-9d7e-6f1a2b3c4d5e";
        let first = strings(&["-p", "--session-id", uuid, "--verbose"]);
        let resume = strings(&["-p", "--resume", uuid, "--verbose"]);
        assert_eq!(conversation_args(&first, home.path()), first);
        assert_eq!(conversation_args(&resume, home.path()), first);
        let project = home.path().join(".claude/projects/-srv-tree");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join(format!("{uuid}.jsonl")), "{}\n").unwrap();
        assert_eq!(conversation_args(&first, home.path()), resume);
        assert_eq!(conversation_args(&resume, home.path()), resume);
        // Nothing else is touched.
        let other = strings(&["--verbose"]);
        assert_eq!(conversation_args(&other, home.path()), other);
    }

    #[test]
    fn the_termination_message_keeps_the_end_of_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("prompt"), "hello from the prompt").unwrap();
        let log = dir.path().join("termination-log");
        std::fs::write(&log, "").unwrap();
        // A stand-in agent: echoes its stdin, writes 10000 bytes then a last line to
        // stderr, and exits 7.
        let code = run_agent(&AgentRun {
            program: "/bin/sh".into(),
            args: strings(&[
                "-c",
                "cat > \"$0\"; grep SigBlk /proc/self/status > \"$0.mask\"; head -c 10000 /dev/zero | tr '\\0' x >&2; echo; echo the last words >&2; exit 7",
                dir.path().join("stdin-seen").to_str().unwrap(),
            ]),
            home: dir.path().join("home"),
            run,
            termination_log: log.clone(),
        })
        .unwrap();
        assert_eq!(code, 7);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("stdin-seen")).unwrap(),
            "hello from the prompt"
        );
        // The agent can be signalled: nothing is blocked in it.
        let mask = std::fs::read_to_string(dir.path().join("stdin-seen.mask")).unwrap();
        let bits = u64::from_str_radix(mask.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(bits & (1 << 1 | 1 << 14), 0, "{mask}");
        let message = std::fs::read_to_string(&log).unwrap();
        assert_eq!(message.len(), TERMINATION_TAIL);
        assert!(message.ends_with("the last words\n"), "{message:?}");
    }
}
