//! An authority with agent sessions for CLI tests: a real `flotilla serve` whose
//! `sessions.toml` names a real git repository (a bare `origin.git` with one
//! commit, read-only to runtimes) and a runtime program (Claude Code, or a
//! stand-in script), run in bubblewrap as the session's own uid.

use super::authority::Authority;
use super::Run;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// An authority with sessions on.
pub struct SessionsAuthority {
    pub a: Authority,
    /// The bare repository sessions clone (the authority pushes to it once a human
    /// allows a session's push).
    pub origin: PathBuf,
}

/// Claude Code: `$FLOTILLA_CLAUDE_CODE`, else installed by `scripts/claude-code`
/// (into /var/cache/flotilla-tools: the runtime user must be able to run it).
pub fn claude() -> PathBuf {
    if let Some(p) = std::env::var_os("FLOTILLA_CLAUDE_CODE") {
        return PathBuf::from(p);
    }
    let out = std::process::Command::new(super::repo_root().join("scripts/claude-code"))
        .env(
            "FLOTILLA_TOOLS",
            std::env::var("FLOTILLA_TOOLS").unwrap_or_else(|_| "/var/cache/flotilla-tools".into()),
        )
        .output()
        .expect("run scripts/claude-code");
    assert!(
        out.status.success(),
        "scripts/claude-code failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs `git ARGS` in `dir`, asserting success; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        // The remote belongs to the authority's API user, not to this test's root.
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Makes every directory from `path` up to `/` traversable by others (a runtime
/// runs as its session's own uid; test directories are 0700).
pub fn open_up(path: &Path) {
    let mut p = Some(path);
    while let Some(d) = p {
        if let Ok(meta) = std::fs::metadata(d) {
            let mode = meta.permissions().mode();
            if mode & 0o011 != 0o011 {
                let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o711));
            }
        }
        p = d.parent();
    }
}

impl SessionsAuthority {
    /// An authority whose `sessions.toml` runs `claude` (its `[runtime] claude`)
    /// with `env` given to it, `runtime` more lines of the `[runtime]` table and
    /// `extra` appended to the file.
    pub fn new(
        claude: &Path,
        env: &[(&str, &str)],
        runtime: &str,
        extra: &str,
    ) -> SessionsAuthority {
        let mut a = Authority::initialised("", &[]);
        let ws = a.ws.path().to_path_buf();
        open_up(&ws);
        // The repository: one commit, in a bare origin the agent may push to.
        let src = ws.join("src");
        std::fs::create_dir_all(&src).unwrap();
        git(&src, &["init", "-q", "-b", "main"]);
        std::fs::write(src.join("README.md"), "infra\n").unwrap();
        git(&src, &["add", "."]);
        git(&src, &["commit", "-qm", "first"]);
        let origin = ws.join("origin.git");
        git(
            &ws,
            &[
                "clone",
                "-q",
                "--bare",
                src.to_str().unwrap(),
                origin.to_str().unwrap(),
            ],
        );
        // The authority's API user's (it pushes, after a human's answer), and
        // read-only to every runtime (`sessions.toml` refuses a writable remote).
        let api = flotilla_server::privsep::DEFAULT_API_USER;
        let st = Command::new("chown")
            .args(["-R", &format!("{api}:{api}")])
            .arg(&origin)
            .status()
            .unwrap();
        assert!(st.success());
        // The agent's git trusts that repository of root's (git's safe.directory,
        // from protected "command" configuration in the environment).
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.extend([
            ("GIT_CONFIG_COUNT".to_string(), "1".to_string()),
            ("GIT_CONFIG_KEY_0".into(), "safe.directory".into()),
            ("GIT_CONFIG_VALUE_0".into(), origin.display().to_string()),
        ]);
        let env = env
            .iter()
            .map(|(k, v)| format!("{k} = {v:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sessions_dir = ws.join("sessions");
        std::fs::create_dir_all(&sessions_dir).unwrap();
        std::fs::set_permissions(&sessions_dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        let toml = format!(
            r#"dir = "{dir}"
reconcile_every = "1s"

[runtime]
claude = "{claude}"
env = {{ {env} }}
{runtime}

[repos.infra]
url = "{origin}"

{extra}
"#,
            dir = sessions_dir.display(),
            claude = claude.display(),
            origin = origin.display(),
        );
        std::fs::write(a.dir.join("sessions.toml"), toml).unwrap();
        a.start();
        SessionsAuthority { a, origin }
    }

    /// Runs `flotilla ARGS` as the operator.
    pub fn run(&self, args: &[&str]) -> Run {
        self.a.run(args)
    }

    /// `session show ID --json`.
    pub fn show(&self, id: u64) -> serde_json::Value {
        let r = self.run(&["session", "show", &id.to_string(), "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        r.json()
    }

    /// `session events ID --json`: the events.
    pub fn events(&self, id: u64) -> Vec<serde_json::Value> {
        let r = self.run(&["session", "events", &id.to_string(), "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        r.json()["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].clone())
            .collect()
    }

    /// The events of `kind`.
    pub fn events_of(&self, id: u64, kind: &str) -> Vec<serde_json::Value> {
        self.events(id)
            .into_iter()
            .filter(|e| e["kind"] == kind)
            .collect()
    }

    /// Waits until session `id`'s state is `state` (deadline `within`).
    pub fn wait_state(&self, id: u64, state: &str, within: Duration) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        let ok = flotilla_testkit::wait_until(within, || {
            last = self.show(id);
            last["state"] == state
        });
        assert!(ok, "session {id} never became {state}: {last:#}");
        last
    }

    /// Runs `flotilla` `n` times at once as the operator, the `i`-th with the
    /// arguments `args(i)`; the runs, in order.
    pub fn run_concurrently(&self, n: usize, args: impl Fn(usize) -> Vec<String>) -> Vec<Run> {
        let env: Vec<(String, String)> = self
            .a
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let dir = self.a.ws.path().to_path_buf();
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let (env, dir, args) = (env.clone(), dir.clone(), args(i));
                std::thread::spawn(move || {
                    let env: Vec<(&str, &str)> =
                        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    super::run_with_env(&dir, &args, &env)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    /// The operator file the authority wrote (`operator.json`: credential, CA).
    pub fn operator(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.a.dir.join("operator.json")).unwrap()).unwrap()
    }

    /// A client of the authority with `credential`.
    pub fn client(&self, credential: &str) -> flotilla_api::Client {
        flotilla_api::Client::new(
            &self.a.url,
            self.operator()["ca_pem"].as_str().unwrap(),
            Some(credential.to_string()),
        )
        .unwrap()
    }

    /// Session `id`'s credential, once its runtime has handed it over (`token` in
    /// its home, as the stand-in agents write it).
    pub fn token(&self, id: u64) -> String {
        let p = self.a.ws.path().join(format!("sessions/{id}/home/token"));
        assert!(
            flotilla_testkit::wait_until(Duration::from_secs(30), || p.exists()),
            "the runtime never started: {:#}",
            self.show(id)
        );
        std::fs::read_to_string(p).unwrap().trim().to_string()
    }

    /// `session create --repo infra` with `args`; the new session's id.
    pub fn create(&self, args: &[&str]) -> u64 {
        let mut all = vec!["session", "create", "--repo", "infra", "--json"];
        all.extend_from_slice(args);
        let r = self.run(&all);
        assert_eq!(r.code, 0, "{r:?}");
        r.json()["id"].as_u64().unwrap()
    }
}

/// POSTs JSON `body` to `path` with `c`; the answer's JSON (panics on an error).
pub fn post(c: &flotilla_api::Client, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bytes = rt
        .block_on(c.post_bytes(path, body.to_string().into_bytes(), Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    serde_json::from_slice(&bytes).unwrap()
}

/// A Claude Code `PreToolUse` hook payload for a Bash `command` (the shape of
/// Claude Code 2.1's, as `flotilla gate hook` reads it).
pub fn bash_payload(command: &str) -> serde_json::Value {
    serde_json::json!({
        "session_id": "00000000-0000-4000-8000-000000000000",
        "transcript_path": "/dev/null",
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "d"},
        "tool_use_id": "toolu_01"
    })
}
