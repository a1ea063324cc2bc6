//! A real `flotilla serve` for CLI tests: initialised in a temporary workspace,
//! listening on a free loopback port, driven through the CLI (`FLOTILLA_SERVER`,
//! `FLOTILLA_OPERATOR_FILE`).

use super::{run_with_env, KillOnDrop, Run, Workspace};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A canary secret value: it must never appear in what the authority keeps or says.
pub const CANARY: &str = "canary-secret-5f1d9a3e-never-leaves-the-host";

/// A running authority process.
pub struct Authority {
    pub ws: Workspace,
    pub dir: PathBuf,
    pub url: String,
    /// More arguments for `flotilla serve` (e.g. `--report-deadline 2s`).
    pub serve_args: Vec<String>,
    child: Option<(Child, KillOnDrop)>,
}

/// A free port on 127.0.0.1 below the kernel's ephemeral range (20000–32767), for a
/// server that these tests kill and start again on the same port: another test's
/// `bind(:0)` (ephemeral, 32768 and up) can never be handed it while it is briefly
/// free.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    for attempt in 0u64.. {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(attempt ^ u64::from(std::process::id()));
        let port = 20000 + (h.finish() % 12768) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
        assert!(attempt < 1000, "no free port in 20000-32767");
    }
    unreachable!()
}

/// Asserts that the authority at `server` answers the operator of
/// `operator_file` (`config history`) within 30 s, run from `dir`; panics with
/// the last attempt otherwise.
#[allow(dead_code)]
pub fn assert_answers(dir: &std::path::Path, server: &str, operator_file: &str) {
    let mut last = None;
    let answered = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        let r = run_with_env(
            dir,
            &["config", "history", "--json"],
            &[
                ("FLOTILLA_SERVER", server),
                ("FLOTILLA_OPERATOR_FILE", operator_file),
            ],
        );
        let ok = r.code == 0;
        last = Some(r);
        ok
    });
    assert!(
        answered,
        "the authority never answered the operator: {last:?}"
    );
}

impl Authority {
    /// An initialised authority serving on a free loopback port, with `inventory` at
    /// `fleet/flotilla.toml` and the canary secret in the secrets file.
    pub fn new(inventory: &str) -> Authority {
        Authority::with(inventory, &[])
    }

    /// [`Authority::new`], `flotilla serve` given `serve_args` too.
    pub fn with(inventory: &str, serve_args: &[&str]) -> Authority {
        let mut a = Authority::initialised(inventory, serve_args);
        a.start();
        a
    }

    /// An initialised authority, not started yet (files can be added to its
    /// directory first; then [`Authority::start`]).
    pub fn initialised(inventory: &str, serve_args: &[&str]) -> Authority {
        let ws = Workspace::new();
        ws.write("fleet/flotilla.toml", inventory);
        // The canary in the secrets file where a local `up` would read it.
        let secrets = ws.write(
            ".flotilla-state/secrets.env",
            &format!("MODEL_KEY={CANARY}\n"),
        );
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
        let dir = ws.path().join("authority");
        let url = format!("https://127.0.0.1:{}", free_port());
        let a = Authority {
            ws,
            dir,
            url,
            serve_args: serve_args.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        let init = a.run(&["serve", "init"]);
        assert_eq!(init.code, 0, "{init:?}");
        assert!(init.stdout.contains("CA pin: sha256:"), "{}", init.stdout);
        a
    }

    pub fn env(&self) -> Vec<(&str, String)> {
        vec![
            ("FLOTILLA_AUTHORITY_DIR", self.dir.display().to_string()),
            ("FLOTILLA_SERVER", self.url.clone()),
            (
                "FLOTILLA_OPERATOR_FILE",
                self.dir.join("operator.json").display().to_string(),
            ),
        ]
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_with_env(self.ws.path(), args, &env)
    }

    pub fn publish(&self, args: &[&str]) -> Run {
        let mut all = vec!["-f", "fleet/flotilla.toml", "config", "publish"];
        all.extend_from_slice(args);
        self.run(&all)
    }

    pub fn start(&mut self) {
        let listen = self.url.trim_start_matches("https://").to_string();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        cmd.args(["serve", "--listen", &listen])
            .args(&self.serve_args)
            .current_dir(self.ws.path())
            .env("FLOTILLA_STATE_DIR", self.ws.path().join(".flotilla-state"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.log())
                    .expect("open the authority's log"),
            ));
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start flotilla serve");
        let guard = KillOnDrop(child.id());
        self.child = Some((child, guard));
        // Ready when it answers an operator request (deadline, not a fixed sleep).
        let mut last = None;
        let up = flotilla_testkit::wait_until(Duration::from_secs(30), || {
            let r = self.run(&["config", "history", "--json"]);
            let ok = r.code == 0;
            last = Some(r);
            ok
        });
        assert!(up, "the authority never answered: {last:?}");
    }

    /// The pid of the running `flotilla serve` (with sessions: the API process).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|(c, _)| c.id())
    }

    /// Sends SIGTERM and waits up to `within` for the process to end; whether it did
    /// (if not, it is killed).
    pub fn terminate(&mut self, within: Duration) -> bool {
        let Some((mut child, _guard)) = self.child.take() else {
            return true;
        };
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let ended = flotilla_testkit::wait_until(within, || child.try_wait().unwrap().is_some());
        if !ended {
            child.kill().unwrap();
        }
        child.wait().unwrap();
        ended
    }

    pub fn kill9(&mut self) {
        if let Some((mut child, _guard)) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Where the authority's standard error goes (`serve.log` in the workspace,
    /// appended to at every start).
    pub fn log(&self) -> PathBuf {
        self.ws.path().join("serve.log")
    }

    pub fn db(&self) -> PathBuf {
        self.dir.join("authority.db")
    }
}
