//! `flotilla tui` as a person uses it: the real binary in a real terminal (tmux, on
//! a server private to the test), driven with keys and read back from the screen.
//! It starts a real process component (the plan shown, then applied with `y`),
//! sees it running with its pid (and the process in /proc), stops it the same way,
//! and quits with the terminal restored.

mod common;

use common::Workspace;
use flotilla_testkit::wait_until;
use std::process::Command;
use std::time::Duration;

/// A tmux server of this test's own (its socket in the test's temporary directory:
/// `tmux -S PATH`), killed when dropped, with the component's process if one is
/// still there.
struct Tmux {
    socket: std::path::PathBuf,
    pid: std::cell::Cell<Option<i32>>,
}

impl Tmux {
    fn new(dir: &std::path::Path) -> Tmux {
        Tmux {
            socket: dir.join("tmux.sock"),
            pid: std::cell::Cell::new(None),
        }
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("run tmux (scripts/test installs Debian's tmux)")
    }

    /// The screen as text (`ansi`: with its colours, as escape sequences).
    fn screen(&self, ansi: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", "tui"];
        if ansi {
            args.push("-e");
        }
        String::from_utf8_lossy(&self.run(&args).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "tui"];
        args.extend(keys);
        assert!(self.run(&args).status.success(), "send-keys {keys:?}");
    }

    /// Waits until the screen satisfies `ok`; panics with the screen if it never does.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let seen = wait_until(Duration::from_secs(30), || {
            last = self.screen(false);
            ok(&last)
        });
        assert!(seen, "never saw {what}; the screen:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
        if let Some(pid) = self.pid.get() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The words of the table row of `name` (after the border and cursor).
fn row<'s>(screen: &'s str, name: &str) -> Option<Vec<&'s str>> {
    screen.lines().find_map(|l| {
        let words: Vec<&str> = l
            .split_whitespace()
            .filter(|w| !matches!(*w, "│" | "│>" | ">" | "*"))
            .collect();
        (words.get(1) == Some(&name)).then_some(words)
    })
}

/// `(lifecycle, pid)` of `name`'s row: HOST COMPONENT LIFECYCLE HEALTH CONDITION PID.
fn state(screen: &str, name: &str) -> Option<(String, Option<i32>)> {
    let w = row(screen, name)?;
    Some((w.get(2)?.to_string(), w.get(5).and_then(|p| p.parse().ok())))
}

fn alive(pid: i32) -> bool {
    // A zombie is gone for every purpose here.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn start_see_it_running_stop_it_and_quit() {
    let ws = Workspace::new();
    ws.write("flotilla.toml", common::SLEEPER);
    let tmux = Tmux::new(ws.path());
    let command = format!(
        "env -u NO_COLOR FLOTILLA_STATE_DIR={state} {bin} -f {file} tui --interval 300ms",
        state = ws.path().join("state").display(),
        bin = env!("CARGO_BIN_EXE_flotilla"),
        file = ws.path().join("flotilla.toml").display(),
    );
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "tui",
        "-x",
        "120",
        "-y",
        "40",
        &command,
    ]);
    assert!(started.status.success(), "{started:?}");

    let screen = tmux.wait("the sleeper stopped", |s| {
        state(s, "sleeper").is_some_and(|(l, _)| l == "stopped")
    });
    // What a person sees first, kept for the README.
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(out.join("tui-main.txt"), &screen).unwrap();

    // `s`: the plan and its command line, asked about; nothing runs yet.
    tmux.keys(&["s"]);
    let plan = tmux.wait("the plan", |s| s.contains("Apply exactly this plan?"));
    assert!(plan.contains("plan: flotilla start sleeper"), "{plan}");
    assert!(plan.contains("wave 1"), "{plan}");
    assert!(
        plan.contains("equivalent command: flotilla start sleeper"),
        "{plan}"
    );
    std::fs::write(out.join("tui-plan.txt"), &plan).unwrap();

    // `y` applies it.
    tmux.keys(&["y"]);
    tmux.wait("the start done", |s| s.contains("done (1 step)"));
    tmux.keys(&["Escape"]);
    let running = tmux.wait("the sleeper running with a pid", |s| {
        !s.contains("plan: ")
            && state(s, "sleeper").is_some_and(|(l, pid)| l == "running" && pid.is_some())
    });
    let pid = state(&running, "sleeper").unwrap().1.unwrap();
    tmux.pid.set(Some(pid));
    assert!(alive(pid), "pid {pid} shown running is not there");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert_eq!(cmdline, b"sleep\x00600\x00", "pid {pid} is not the sleeper");
    std::fs::write(out.join("tui-main.txt"), &running).unwrap();
    std::fs::write(out.join("tui-main.ansi"), tmux.screen(true)).unwrap();

    // `x`, `y`: stopped, and the process is gone.
    tmux.keys(&["x"]);
    let plan = tmux.wait("the stop plan", |s| s.contains("Apply exactly this plan?"));
    assert!(plan.contains("plan: flotilla stop sleeper"), "{plan}");
    tmux.keys(&["y"]);
    tmux.wait("the stop done", |s| s.contains("done (1 step)"));
    tmux.keys(&["Escape"]);
    tmux.wait("the sleeper stopped again", |s| {
        state(s, "sleeper").is_some_and(|(l, pid)| l == "stopped" && pid.is_none())
    });
    assert!(
        wait_until(Duration::from_secs(10), || !alive(pid)),
        "pid {pid} still runs after the stop"
    );
    tmux.pid.set(None);

    // `q` quits: the program ends (its window closes).
    tmux.keys(&["q"]);
    assert!(
        wait_until(Duration::from_secs(10), || !tmux
            .run(&["has-session", "-t", "tui"])
            .status
            .success()),
        "the UI did not quit; the screen:\n{}",
        tmux.screen(false)
    );
}
