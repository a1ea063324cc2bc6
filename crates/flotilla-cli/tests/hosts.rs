//! Remote hosts for real: the `flotilla` binary driving `flotilla-testkit` services on
//! the SSH test hosts of `scripts/testnet` (network namespaces h1, h2, h3 on
//! 10.213.77.0/24, each with its own sshd and home): installing flotilla on a host,
//! components on three hosts started, observed and stopped, a stack answering through a
//! real SSH tunnel, a host partitioned in the middle of a `status`, changed, unknown and
//! wrong keys, version skew, and a host that was never reachable.
//!
//! The tests share the hosts (they partition and rekey them), so they run one at a time:
//! nextest's `testnet` test group (`.config/nextest.toml`, `binary(=hosts)`) and
//! [`testnet::lock`] under `cargo test`. Each test uses its own ports, its own local state
//! directory and its own state directory on every host (`<home>/state-<test>-<pid>`),
//! and a [`Fixture`] guard takes down what it started, even when the test panics.
//! Every wait is on a condition with a deadline.

mod common;

use common::{cmdline, kill9, pids_with_arg, Run};
use flotilla_testkit::testnet::{self, TestHost, Testnet};
use flotilla_testkit::{alive, free_port, wait_until};
use serde_json::Value;
use std::cell::RefCell;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one condition may take; tests move on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(20);

/// A TOML (and JSON) string.
fn q(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).expect("a string")
}

fn testkit() -> String {
    flotilla_testkit::binary().display().to_string()
}

/// `GET /` on 127.0.0.1:`port` (this machine's loopback): the whole answer, or why not.
fn http_get(port: u16) -> Result<String, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    if out.is_empty() {
        Err("connection closed without an answer".into())
    } else {
        Ok(out)
    }
}

/// `sha256:<hex>` of a file, by `sha256sum`.
fn sha256_of(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("run sha256sum");
    assert!(out.status.success(), "sha256sum {}", path.display());
    let text = String::from_utf8_lossy(&out.stdout);
    format!(
        "sha256:{}",
        text.split_whitespace().next().expect("a digest")
    )
}

/// The `SHA256:…` fingerprint of a public key file.
fn fingerprint(pub_key: &Path) -> String {
    let out = Command::new("ssh-keygen")
        .arg("-lf")
        .arg(pub_key)
        .output()
        .expect("run ssh-keygen -lf");
    assert!(out.status.success(), "ssh-keygen -lf {}", pub_key.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .expect("a fingerprint")
        .to_string()
}

/// Where `flotilla host install` puts releases on `host` (the file system is shared).
fn install_root(host: &TestHost) -> PathBuf {
    host.home.join(".local/lib/flotilla")
}

/// Whether a printed plan has a step `action name on host`.
fn plan_has(plan: &str, action: &str, name: &str, host: &str) -> bool {
    plan.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() >= 4 && w[0] == action && w[1] == name && w[2] == "on" && w[3] == host
    })
}

fn both(run: &Run) -> String {
    format!("{}{}", run.stdout, run.stderr)
}

/// The component named `name` in a `status --json` answer.
fn comp<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["components"]
        .as_array()
        .expect("components")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no component `{name}` in {status:#}"))
}

fn pid_of(c: &Value) -> u32 {
    c["runtime_identity"]["measured"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no measured pid: {c:#}")) as u32
}

fn evidence_text(c: &Value) -> String {
    c["evidence"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|e| format!("{}: {}", e["signal"], e["saw"].as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// One test's inventory, local state directory and remote state directories, and the
/// guard that takes down what it started: on drop it runs `down --force` for each of
/// its stacks, then kills whatever still carries its marker (every testkit service it
/// declares has `--exec-name <marker>`) or was [`Fixture::track`]ed, and removes its
/// state directories on the hosts.
struct Fixture {
    name: String,
    dir: tempfile::TempDir,
    inventory: PathBuf,
    state: PathBuf,
    marker: String,
    remote_states: RefCell<Vec<PathBuf>>,
    stacks: RefCell<Vec<String>>,
    tracked: RefCell<Vec<(u32, String)>>,
}

impl Fixture {
    fn new(test: &str) -> Fixture {
        let name = format!("{test}-{}", std::process::id());
        let dir = tempfile::tempdir().expect("temp dir");
        Fixture {
            marker: format!("flt-hosts-{name}"),
            inventory: dir.path().join("flotilla.toml"),
            state: dir.path().join("state"),
            dir,
            name,
            remote_states: RefCell::new(Vec::new()),
            stacks: RefCell::new(Vec::new()),
            tracked: RefCell::new(Vec::new()),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// This test's state directory on `host` (emptied when first asked for, removed on
    /// drop).
    fn remote_state(&self, host: &TestHost) -> PathBuf {
        let d = host.home.join(format!("state-{}", self.name));
        let mut all = self.remote_states.borrow_mut();
        if !all.contains(&d) {
            let _ = std::fs::remove_dir_all(&d);
            all.push(d.clone());
        }
        d
    }

    /// `host`'s inventory table, with this test's state directory there.
    fn host_toml(&self, host: &TestHost) -> String {
        format!(
            "{}state_dir = {}\n\n",
            host.inventory_toml(),
            q(self.remote_state(host).to_string_lossy())
        )
    }

    /// A testkit service on `host` answering HTTP on 127.0.0.1:`port` there, ready
    /// when `GET /` answers; `extra` is more TOML for its table.
    fn service(&self, name: &str, host: &str, port: u16, extra: &str) -> String {
        format!(
            "[components.{name}]\nhost = {}\ncommand = [{}, \"--listen\", {}, \"--exec-name\", {}]\n\
             endpoints = {{ http = {} }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"100ms\" }}\n\
             stop = {{ grace_period = \"2s\" }}\n{extra}\n",
            q(host),
            q(testkit()),
            q(format!("127.0.0.1:{port}")),
            q(&self.marker),
            q(format!("http://127.0.0.1:{port}")),
        )
    }

    /// Writes an inventory of `host` and one service `name` on it (a free port there).
    fn one_service(&self, host: &TestHost, name: &str) {
        self.write(
            &format!(
                "{}{}",
                self.host_toml(host),
                self.service(name, &host.name, free_port(), "")
            ),
            &[],
        );
    }

    /// Writes the inventory; `stacks` are taken down on drop.
    fn write(&self, toml: &str, stacks: &[&str]) {
        std::fs::write(&self.inventory, toml).expect("write the inventory");
        self.stacks
            .borrow_mut()
            .extend(stacks.iter().map(|s| s.to_string()));
    }

    /// Kill `pid` on drop if it still runs `program` then.
    fn track(&self, pid: u32, program: &str) {
        self.tracked.borrow_mut().push((pid, program.to_string()));
    }

    /// `flotilla -f INVENTORY --state-dir STATE ARGS`, not yet run.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        cmd.arg("-f")
            .arg(&self.inventory)
            .arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .current_dir(self.path())
            .env_remove("FLOTILLA_FILE")
            .env_remove("FLOTILLA_STATE_DIR")
            .env_remove("FLOTILLA_HOST_TIMEOUT")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        let out = self.command(args).output().expect("run flotilla");
        Run {
            code: out.status.code().expect("an exit code"),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `run`, asserting exit 0.
    fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        assert_eq!(
            run.code,
            0,
            "`flotilla {}` failed:\n{}\n{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run
    }

    /// `status --json ARGS`: the run and its JSON.
    fn status(&self, args: &[&str]) -> (Run, Value) {
        let mut all = vec!["status", "--json"];
        all.extend_from_slice(args);
        let run = self.run(&all);
        let json = run.json();
        (run, json)
    }

    /// `host install` on each of `hosts`, all at once; asserts each succeeded and
    /// returns their JSON reports.
    fn install(&self, hosts: &[&str]) -> Vec<Value> {
        let children: Vec<_> = hosts
            .iter()
            .map(|h| {
                let child = self
                    .command(&["host", "install", h, "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("run flotilla host install");
                (h, child)
            })
            .collect();
        children
            .into_iter()
            .map(|(h, child)| {
                let out = child.wait_with_output().expect("wait for host install");
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "host install {h}: {}\n{stdout}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                serde_json::from_str(&stdout)
                    .unwrap_or_else(|e| panic!("host install {h} --json: {e}: {stdout}"))
            })
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for stack in self.stacks.borrow().iter() {
            let _ = self
                .command(&["--host-timeout", "5s", "down", stack, "--force"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        for pid in pids_with_arg(&self.marker) {
            kill9(pid);
        }
        for (pid, program) in self.tracked.borrow().iter() {
            if alive(*pid) && cmdline(*pid).first().is_some_and(|p| p.ends_with(program)) {
                kill9(*pid);
            }
        }
        for d in self.remote_states.borrow().iter() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// 1. `host install` copies this flotilla to a host checked by SHA-256, is idempotent
///    (a second install copies nothing), repairs a damaged release, and the installed
///    binary answers; `host check` reports flotilla, platform and tools.
#[test]
fn install_is_checksummed_idempotent_and_answers() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("install");
    let web = free_port();
    fx.write(
        &format!(
            "{}{}[components.shell]\nhost = \"h1\"\ncommand = [\"sh\", \"-c\", \"sleep 60\"]\n",
            fx.host_toml(h1),
            fx.service("web", "h1", web, "")
        ),
        &[],
    );
    let local_sha = sha256_of(Path::new(env!("CARGO_BIN_EXE_flotilla")));
    let version = fx.ok(&["--version"]).stdout;
    let version = version
        .split_whitespace()
        .nth(1)
        .expect("a version")
        .to_string();
    let release = format!("versions/{version}-{}", &local_sha["sha256:".len()..][..12]);
    let root = install_root(h1);
    // Start from a host without this release, so the first install really copies it.
    let _ = std::fs::remove_dir_all(root.join(&release));

    let first = &fx.install(&["h1"])[0];
    assert_eq!(first["host"], "h1", "{first:#}");
    assert_eq!(first["release"], release.as_str(), "{first:#}");
    assert_eq!(first["sha256"], local_sha.as_str(), "{first:#}");
    let size = std::fs::metadata(env!("CARGO_BIN_EXE_flotilla"))
        .expect("the flotilla binary")
        .len();
    assert_eq!(
        first["copied_bytes"], size,
        "the first install copies the binary: {first:#}"
    );
    assert_eq!(first["facts"]["version"], version.as_str(), "{first:#}");
    assert_eq!(
        first["facts"]["executable_sha256"],
        local_sha.as_str(),
        "{first:#}"
    );
    assert_eq!(first["facts"]["platform"], "linux-x86_64", "{first:#}");
    assert_eq!(
        first["facts"]["state_dir"],
        fx.remote_state(h1).to_string_lossy().as_ref(),
        "{first:#}"
    );
    let installed = root.join(&release).join("flotilla");
    assert_eq!(sha256_of(&installed), local_sha, "the copy on h1 is intact");

    // Again: already there, nothing copied, in the human form too.
    let again = fx.ok(&["host", "install", "h1"]);
    assert!(
        again.stdout.contains("already there, intact"),
        "a second install says the release is already there:\n{}",
        again.stdout
    );
    assert!(again.stdout.contains(&release), "{}", again.stdout);
    let again = &fx.install(&["h1"])[0];
    assert_eq!(again["copied_bytes"], 0, "{again:#}");
    assert_eq!(again["previous"], release.as_str(), "{again:#}");

    // `current` points into versions/, at this release.
    let current = std::fs::read_link(root.join("current")).expect("a `current` link on h1");
    assert!(
        current.starts_with("versions"),
        "`current` points into versions/: {}",
        current.display()
    );
    assert_eq!(current, Path::new(&release));
    assert_eq!(sha256_of(&root.join("current/flotilla")), local_sha);

    // A damaged release is noticed by its digest and copied again, never trusted.
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&installed)
            .expect("open the installed binary");
        f.write_all(b"damage").expect("damage it");
    }
    assert_ne!(sha256_of(&installed), local_sha);
    let repaired = &fx.install(&["h1"])[0];
    assert_eq!(repaired["copied_bytes"], size, "{repaired:#}");
    assert_eq!(
        sha256_of(&installed),
        local_sha,
        "the damaged copy was replaced"
    );
    for e in std::fs::read_dir(root.join("versions"))
        .expect("versions/")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!(
            "{}.broken.",
            release.trim_start_matches("versions/")
        )) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }

    // host check: exit 0, and says what it found.
    let check = fx.ok(&["host", "check", "h1", "--json"]);
    let report = check.json();
    assert_eq!(report["host"], "h1");
    let findings = report["findings"].as_array().expect("findings");
    let finding = |name: &str| -> &Value {
        findings
            .iter()
            .find(|f| f["check"] == name)
            .unwrap_or_else(|| panic!("no `{name}` finding in {report:#}"))
    };
    for f in findings {
        assert_eq!(f["ok"], true, "{f}");
    }
    for name in ["reachable", "platform", "disk", "flotilla"] {
        finding(name);
    }
    let flotilla = finding("flotilla")["saw"].as_str().unwrap().to_string();
    assert!(flotilla.contains(&version), "{flotilla}");
    assert!(
        flotilla.contains(&format!("protocol {}", flotilla_exec::remote::PROTOCOL)),
        "{flotilla}"
    );
    assert!(flotilla.contains(&local_sha), "{flotilla}");
    assert!(
        flotilla.contains(&release),
        "it names the installed release: {flotilla}"
    );
    let platform = finding("platform")["saw"].as_str().unwrap();
    assert!(platform.starts_with("linux-x86_64"), "{platform}");
    finding(&format!("tool {}", testkit()));
    let sh = finding("tool sh")["saw"].as_str().unwrap();
    assert!(sh.contains("found at /"), "{sh}");
    let text = fx.ok(&["host", "check", "h1"]).stdout;
    for word in ["reachable", "platform", "flotilla", "tool sh"] {
        assert!(text.contains(word), "{text}");
    }
}

/// 1b. One install layout: an install of the older layout (`releases/` and
///     `current`) is converted by the next install (its release kept as `previous`
///     under `versions/`, `releases/` gone); `host uninstall` is refused while a
///     component's processes run from the install, removes it once they are
///     stopped and keeps the state directory, which `--purge` removes.
#[test]
fn an_older_install_is_converted_and_uninstall_removes_it_keeping_state_unless_purged() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("uninstall");
    fx.write(
        &format!(
            "{}[components.shell]\nhost = \"h1\"\ncommand = [\"sh\", \"-c\", \"sleep 600\"]\n",
            fx.host_toml(h1)
        ),
        &[],
    );
    let root = install_root(h1);
    // The older layout, as an earlier flotilla left it: releases/<v>-<sha> + current.
    let _ = std::fs::remove_dir_all(&root);
    let old = root.join("releases/0.0.1-0123456789ab");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_flotilla"), old.join("flotilla")).unwrap();
    std::os::unix::fs::symlink("releases/0.0.1-0123456789ab", root.join("current")).unwrap();
    // Owned by the host's user, as an install there would be.
    let home = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&h1.home).unwrap());
    let group = std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(&h1.home).unwrap());
    for p in [
        root.join(".."),
        root.clone(),
        root.join("releases"),
        old.clone(),
        old.join("flotilla"),
        root.join("current"),
    ] {
        std::os::unix::fs::lchown(&p, Some(home), Some(group)).unwrap();
    }
    let report = &fx.install(&["h1"])[0];
    assert_eq!(
        report["previous"], "versions/0.0.1-0123456789ab",
        "{report:#}"
    );
    let release = report["release"].as_str().unwrap().to_string();
    assert!(release.starts_with("versions/"), "{report:#}");
    assert_eq!(
        std::fs::read_link(root.join("current")).unwrap(),
        Path::new(&release)
    );
    assert_eq!(
        std::fs::read_link(root.join("previous")).unwrap(),
        Path::new("versions/0.0.1-0123456789ab")
    );
    assert!(root.join("versions/0.0.1-0123456789ab/flotilla").exists());
    assert!(!root.join("releases").exists(), "the older layout is gone");

    // A component runs there (its log writer runs from the install): refused.
    fx.ok(&["start", "shell"]);
    let refused = fx.run(&["host", "uninstall", "h1"]);
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains("flotilla still runs there")
            && refused.stderr.contains("pid ")
            && refused.stderr.contains("flotilla"),
        "{}",
        refused.stderr
    );
    assert!(root.join("current/flotilla").exists(), "nothing removed");
    fx.ok(&["stop", "shell"]);
    let state = fx.remote_state(h1);
    assert!(state.exists(), "the component's state is there");
    let done = fx.ok(&["host", "uninstall", "h1", "--json"]).json();
    assert_eq!(done["purged"], false, "{done:#}");
    assert!(!root.exists(), "the install root is removed");
    assert!(state.exists(), "the state directory is kept");
    // Again: nothing installed, not an error; --purge removes flotilla's state and
    // keeps a file flotilla did not write there (and so the directory).
    let base = state.clone();
    assert!(
        base.join("projects").exists(),
        "the project's state is there"
    );
    let theirs = base.join("notes.txt");
    std::fs::write(&theirs, "the user's own file\n").unwrap();
    let again = fx.ok(&["host", "uninstall", "h1", "--purge"]);
    assert!(again.stdout.contains("not installed"), "{}", again.stdout);
    assert!(!base.join("projects").exists(), "{}", again.stdout);
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "the user's own file\n"
    );
    assert!(
        again
            .stdout
            .contains("kept what flotilla did not write there: notes.txt"),
        "{}",
        again.stdout
    );
    // Once only flotilla's files are there, the directory goes too.
    std::fs::remove_file(&theirs).unwrap();
    std::fs::create_dir_all(base.join("projects/x")).unwrap();
    let json = fx
        .ok(&["host", "uninstall", "h1", "--purge", "--json"])
        .json();
    assert_eq!(json["kept"], serde_json::json!([]), "{json:#}");
    assert!(!base.exists(), "{json:#}");
    // Later tests install it again.
    fx.install(&["h1"]);
}

/// 2. One component on each of h1, h2, h3 and one here: `up` starts them where they
///    belong, `status` shows each running, healthy and observed with its host and pid,
///    using one SSH handshake per host per invocation; `down` stops them all.
#[test]
fn components_on_three_hosts_start_stop_and_are_observed() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let hosts = ["h1", "h2", "h3"];
    let fx = Fixture::new("three");
    let mut toml = String::new();
    for h in hosts {
        toml.push_str(&fx.host_toml(net.host(h)));
    }
    let mut ports = Vec::new();
    for h in hosts {
        let port = free_port();
        ports.push((format!("web-{h}"), h, port));
        toml.push_str(&fx.service(&format!("web-{h}"), h, port, ""));
    }
    let local_port = free_port();
    ports.push(("web-local".to_string(), "local", local_port));
    toml.push_str(&fx.service("web-local", "local", local_port, ""));
    toml.push_str(
        "[stacks.fleet]\ncomponents = [\"web-h1\", \"web-h2\", \"web-h3\", \"web-local\"]\n",
    );
    fx.write(&toml, &["fleet"]);
    fx.install(&hosts);

    let up = fx.ok(&["up", "fleet"]);
    for (name, host, _) in &ports {
        assert!(
            plan_has(&up.stdout, "start", name, host),
            "the plan starts `{name}` on {host}:\n{}",
            up.stdout
        );
    }

    let (run, status) = fx.status(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let mut pids = Vec::new();
    for (name, host, port) in &ports {
        let c = comp(&status, name);
        assert_eq!(c["host"], *host, "{c:#}");
        assert_eq!(c["lifecycle"], "running", "{c:#}");
        assert_eq!(c["desired"], "running", "{c:#}");
        assert_eq!(c["health"], "healthy", "{c:#}");
        assert_eq!(c["condition"], "ok", "{c:#}");
        assert_eq!(c["observability"], "observed", "{c:#}");
        assert!(c.get("last_known").is_none_or(Value::is_null), "{c:#}");
        let pid = pid_of(c);
        pids.push(pid);
        // The process really runs, with this component's arguments…
        let args = cmdline(pid);
        assert!(
            args.contains(&format!("127.0.0.1:{port}")) && args.contains(&fx.marker),
            "pid {pid} of `{name}` is not its service: {args:?}"
        );
        if *host == "local" {
            let body = http_get(*port).expect("the local service answers");
            assert!(body.contains(&format!("\"pid\":{pid}")), "{body}");
        } else {
            // …on its host: in that host's network namespace, answering on its loopback.
            let h = net.host(host);
            let ns = Command::new("ip")
                .args(["netns", "identify", &pid.to_string()])
                .output()
                .expect("ip netns identify");
            assert_eq!(
                String::from_utf8_lossy(&ns.stdout).trim(),
                h.netns,
                "pid {pid} of `{name}` runs in {}'s namespace",
                h.name
            );
            let out = h.exec(&[
                "curl",
                "-sS",
                "-m",
                "5",
                &format!("http://127.0.0.1:{port}/"),
            ]);
            let body = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && body.contains(&format!("\"pid\":{pid}")),
                "`{name}` answers on {host}'s loopback: {body} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    // One SSH handshake per host per invocation, whatever it asks of the host.
    for round in 1..=2 {
        let before: Vec<usize> = hosts
            .iter()
            .map(|h| net.host(h).accepted_logins())
            .collect();
        let (run, status) = fx.status(&[]);
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        for (name, _, _) in &ports {
            assert_eq!(comp(&status, name)["observability"], "observed");
        }
        for (h, before) in hosts.iter().zip(before) {
            let host = net.host(h);
            wait_until(Duration::from_secs(5), || host.accepted_logins() > before);
            assert_eq!(
                host.accepted_logins(),
                before + 1,
                "round {round}: one `status` logs in to {h} exactly once"
            );
        }
    }

    let down = fx.ok(&["down", "fleet"]);
    for (name, host, _) in &ports {
        assert!(
            plan_has(&down.stdout, "stop", name, host),
            "{}",
            down.stdout
        );
    }
    for &pid in &pids {
        assert!(
            wait_until(DEADLINE, || !alive(pid)),
            "pid {pid} survived `down`: {:?}",
            cmdline(pid)
        );
    }
    let (run, status) = fx.status(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    for (name, _, _) in &ports {
        let c = comp(&status, name);
        assert_eq!(c["lifecycle"], "stopped", "{c:#}");
        assert_eq!(c["desired"], "stopped", "{c:#}");
        assert_eq!(c["observability"], "observed", "{c:#}");
    }
}

/// 3. A web service on h1 and, here, an SSH tunnel to it through h1: `up` proves the
///    route end to end, a request here reaches the process there; killing that process
///    makes the tunnel unhealthy and the service down-unexpectedly; `down` cleans up.
#[test]
fn a_stack_across_two_hosts_answers_through_a_real_tunnel() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("tunnel");
    let web_port = free_port();
    let local_port = free_port();
    fx.write(
        &format!(
            "{}{}[components.t]\ntemplate = \"ssh-tunnel\"\n\
             params = {{ via = \"h1\", target = \"web.http\", listen_port = {local_port} }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }} }}\n\n\
             [stacks.s]\ncomponents = [\"t\"]\n",
            fx.host_toml(h1),
            fx.service("web", "h1", web_port, ""),
        ),
        &["s"],
    );
    fx.install(&["h1"]);

    let up = fx.ok(&["up", "s"]);
    assert!(plan_has(&up.stdout, "start", "web", "h1"), "{}", up.stdout);
    assert!(plan_has(&up.stdout, "start", "t", "local"), "{}", up.stdout);
    let (run, status) = fx.status(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let web = comp(&status, "web");
    let t = comp(&status, "t");
    for c in [web, t] {
        assert_eq!(c["lifecycle"], "running", "{c:#}");
        assert_eq!(c["health"], "healthy", "{c:#}");
        assert_eq!(c["observability"], "observed", "{c:#}");
    }
    assert_eq!(web["host"], "h1");
    assert_eq!(t["host"], "local");
    let web_pid = pid_of(web);
    let tunnel_pid = pid_of(t);
    fx.track(tunnel_pid, "ssh");
    let tunnel_args = cmdline(tunnel_pid);
    assert!(
        tunnel_args.first().is_some_and(|p| p.ends_with("ssh"))
            && tunnel_args.contains(&format!("127.0.0.1:{local_port}:127.0.0.1:{web_port}"))
            && tunnel_args.contains(&h1.address),
        "the tunnel is `ssh -L 127.0.0.1:{local_port}:127.0.0.1:{web_port} … {}`: {tunnel_args:?}",
        h1.address
    );

    // A request here goes through the tunnel to the process on h1.
    let answer = http_get(local_port).expect("an answer through the tunnel");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains(&format!("\"pid\":{web_pid}")),
        "the answer comes from pid {web_pid} on h1: {answer}"
    );

    // The far end dies: the forward is dead, and status says so.
    let killed = h1.exec(&["kill", "-9", &web_pid.to_string()]);
    assert!(killed.status.success(), "{killed:?}");
    assert!(
        wait_until(DEADLINE, || !alive(web_pid)),
        "pid {web_pid} survived kill -9"
    );
    let (run, status) = fx.status(&[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let web = comp(&status, "web");
    let t = comp(&status, "t");
    assert_ne!(web["lifecycle"], "running", "{web:#}");
    assert_eq!(web["condition"], "down-unexpectedly", "{web:#}");
    assert_eq!(web["observability"], "observed", "{web:#}");
    assert_ne!(
        t["health"], "healthy",
        "the tunnel forwards to nothing: {t:#}"
    );
    assert!(
        evidence_text(t).contains(&format!("127.0.0.1:{local_port}")),
        "{}",
        evidence_text(t)
    );
    assert!(
        http_get(local_port).map_or(true, |a| !a.contains(&format!("\"pid\":{web_pid}"))),
        "an answer from pid {web_pid} after it was killed"
    );

    let down = fx.ok(&["down", "s"]);
    assert!(
        plan_has(&down.stdout, "stop", "t", "local"),
        "{}",
        down.stdout
    );
    assert!(
        wait_until(DEADLINE, || !alive(tunnel_pid)),
        "the tunnel (pid {tunnel_pid}) survived `down`"
    );
    assert!(
        wait_until(DEADLINE, || http_get(local_port).is_err()),
        "nothing listens on 127.0.0.1:{local_port} after `down`"
    );
    assert!(
        pids_with_arg(&fx.marker).is_empty(),
        "a service survived `down`"
    );
    let (run, status) = fx.status(&[]);
    let t = comp(&status, "t");
    assert_eq!(t["lifecycle"], "stopped", "{t:#}");
    assert_eq!(t["condition"], "ok", "{t:#}");
    let web = comp(&status, "web");
    assert_ne!(web["lifecycle"], "running", "{web:#}");
    // `down` took the whole stack down on purpose, `web` included (it was already
    // gone): it is meant to be stopped now, not `down-unexpectedly`, as for a local
    // component.
    assert_eq!(web["desired"], "stopped", "after `down`: {web:#}");
    assert_eq!(web["condition"], "ok", "after `down`: {web:#}");
    assert_eq!(
        run.code, 0,
        "status after `down`:\n{}\n{}",
        run.stdout, run.stderr
    );
}

/// 4. A host partitioned while `status` waits for it: `status` still returns within
///    its host timeout, shows that host's component `unreachable` with its last-known
///    state (never `stopped`) and the other host's as observed; a change needing the
///    host is refused; once the link is back, the host is observed again.
#[test]
fn a_host_partitioned_mid_status_is_unreachable_with_last_known_state() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let (h1, h2) = (net.host("h1"), net.host("h2"));
    let fx = Fixture::new("partition");
    let (pa, pb) = (free_port(), free_port());
    fx.write(
        &format!(
            "{}{}{}{}[stacks.s]\ncomponents = [\"a\", \"b\"]\n",
            fx.host_toml(h1),
            fx.host_toml(h2),
            fx.service("a", "h1", pa, ""),
            // Observing b takes 1.5 s on h2: long enough to cut the link meanwhile.
            fx.service(
                "b",
                "h2",
                pb,
                "liveness = { exec = { command = [\"sh\", \"-c\", \"sleep 1.5\"] }, timeout = \"5s\" }"
            ),
        ),
        &["s"],
    );
    fx.install(&["h1", "h2"]);
    fx.ok(&["up", "s"]);
    let (run, status) = fx.status(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    for name in ["a", "b"] {
        let c = comp(&status, name);
        assert_eq!(c["lifecycle"], "running", "{c:#}");
        assert_eq!(c["health"], "healthy", "{c:#}");
        assert_eq!(c["observability"], "observed", "{c:#}");
    }
    let pid_b = pid_of(comp(&status, "b"));
    let seen_at = status["observed_at_ms"].as_i64().expect("observed_at_ms");

    // status, and while h2 works on it, h2's link goes down.
    let out = fx.path().join("status.json");
    let err = fx.path().join("status.err");
    let began = Instant::now();
    let mut child = fx
        .command(&["--host-timeout", "3s", "status", "--json"])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run flotilla status");
    let remote_state = fx.remote_state(h2).to_string_lossy().into_owned();
    let serving = || {
        let pids = Command::new("ip")
            .args(["netns", "pids", &h2.netns])
            .output()
            .expect("ip netns pids");
        String::from_utf8_lossy(&pids.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .any(|p| {
                let args = cmdline(p).join(" ");
                args.contains("host serve") && args.contains(&remote_state)
            })
    };
    assert!(
        wait_until(Duration::from_secs(5), serving),
        "`flotilla host serve` never showed up on h2"
    );
    let partition = net.partition("h2");
    let cut_at = began.elapsed();
    assert!(
        wait_until(Duration::from_secs(15), || child
            .try_wait()
            .expect("try_wait")
            .is_some()),
        "status did not return after h2 was cut off"
    );
    let took = began.elapsed();
    eprintln!("status: h2 cut off after {cut_at:?}, returned after {took:?}");
    let code = child.wait().expect("wait").code();
    let text = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(
        took < Duration::from_secs(8),
        "status took {took:?} with --host-timeout 3s (h2 cut off after {cut_at:?})"
    );
    assert_eq!(code, Some(1), "{text}\n{stderr}");
    let status: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("status --json: {e}: {text}\n{stderr}"));
    let b = comp(&status, "b");
    assert_eq!(b["host"], "h2");
    assert_eq!(b["observability"], "unreachable", "{b:#}");
    assert_ne!(
        b["lifecycle"], "stopped",
        "an unreachable component is never `stopped`: {b:#}"
    );
    assert_ne!(
        b["lifecycle"], "running",
        "it was not seen running now: {b:#}"
    );
    let last = &b["last_known"];
    assert_eq!(last["lifecycle"], "running", "{b:#}");
    assert_eq!(last["health"], "healthy", "{b:#}");
    let last_at = last["observed_at_ms"]
        .as_i64()
        .expect("last_known.observed_at_ms");
    assert!(
        last_at >= seen_at - 1_000 && last_at <= status["observed_at_ms"].as_i64().unwrap(),
        "last seen at {last_at}, the first status observed at {seen_at}: {b:#}"
    );
    let ev = evidence_text(b);
    assert!(ev.contains("h2"), "{ev}");
    assert!(ev.contains("last seen running"), "{ev}");
    let a = comp(&status, "a");
    assert_eq!(a["observability"], "observed", "h1 answered: {a:#}");
    assert_eq!(a["lifecycle"], "running", "{a:#}");
    assert_eq!(a["health"], "healthy", "{a:#}");
    assert!(
        alive(pid_b),
        "h2's service kept running behind the partition"
    );

    // A change that needs h2 is refused, naming it.
    let refused = fx.run(&["--host-timeout", "2s", "stop", "b"]);
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    let said = both(&refused);
    assert!(
        said.contains("h2") && said.contains("unreachable"),
        "{said}"
    );
    assert!(alive(pid_b), "a refused stop signalled nothing");

    // Link up: h2 is observed again.
    drop(partition);
    let mut last = Value::Null;
    let back = wait_until(DEADLINE, || {
        let (_, s) = fx.status(&["--host-timeout", "3s"]);
        last = comp(&s, "b").clone();
        last["observability"] == "observed"
    });
    assert!(
        back,
        "h2 is not observed again after its link came back: {last:#}"
    );
    assert_eq!(last["lifecycle"], "running", "{last:#}");
    assert_eq!(last["health"], "healthy", "{last:#}");
    assert_eq!(pid_of(&last), pid_b);
    assert!(
        last.get("last_known").is_none_or(Value::is_null),
        "{last:#}"
    );
}

/// 5. A host whose key changed is refused, naming the host, saying the key CHANGED and
///    showing the new fingerprint; known_hosts is left as it was.
#[test]
fn a_changed_host_key_is_refused_naming_host_and_fingerprint() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h3 = net.host("h3");
    let fx = Fixture::new("rekey");
    fx.one_service(h3, "c");
    let known_before = std::fs::read(&h3.known_hosts).expect("known_hosts");
    let rekeyed = net.rekeyed("h3");
    let new_print = fingerprint(&h3.host_key.with_extension("pub"));
    let logins = h3.accepted_logins();

    let (run, status) = fx.status(&["--host-timeout", "5s"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let c = comp(&status, "c");
    assert_eq!(c["observability"], "not-permitted", "{c:#}");
    assert_ne!(c["lifecycle"], "stopped", "{c:#}");
    let ev = evidence_text(c);
    assert!(ev.contains("h3"), "{ev}");
    assert!(ev.contains("CHANGED"), "{ev}");
    assert!(
        ev.contains(&new_print),
        "the evidence shows the new key {new_print}: {ev}"
    );

    let check = fx.run(&["host", "check", "h3"]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    let said = both(&check);
    assert!(said.contains("h3") && said.contains("CHANGED"), "{said}");
    assert!(said.contains(&new_print), "{said}");
    assert!(
        said.contains("ssh-keygen -R"),
        "it says how to accept the change: {said}"
    );

    assert_eq!(
        std::fs::read(&h3.known_hosts).expect("known_hosts"),
        known_before,
        "known_hosts changed"
    );
    assert_eq!(
        h3.accepted_logins(),
        logins,
        "a login was accepted with a changed key"
    );
    drop(rekeyed);
}

/// 6. A host whose key is not in known_hosts is refused with the fingerprint it
///    presents and how to trust it; the known_hosts file stays empty.
#[test]
fn an_unknown_host_key_is_refused_with_its_fingerprint_and_how_to_trust_it() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("unknown-key");
    let empty = fx.path().join("known_hosts");
    std::fs::write(&empty, "").unwrap();
    let table = fx.host_toml(h1).replace(
        &q(h1.known_hosts.to_string_lossy()),
        &q(empty.to_string_lossy()),
    );
    assert!(table.contains(&q(empty.to_string_lossy())), "{table}");
    fx.write(
        &format!("{table}{}", fx.service("x", "h1", free_port(), "")),
        &[],
    );
    let print = fingerprint(&h1.host_key.with_extension("pub"));
    let logins = h1.accepted_logins();

    let check = fx.run(&["host", "check", "h1"]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    let said = both(&check);
    assert!(said.contains("`h1`"), "{said}");
    assert!(said.contains("not known"), "{said}");
    assert!(
        said.contains(&print),
        "it shows h1's fingerprint {print}: {said}"
    );
    assert!(said.contains("ssh-keyscan"), "{said}");
    assert!(
        said.contains(&empty.to_string_lossy().into_owned()),
        "{said}"
    );

    let (run, status) = fx.status(&["--host-timeout", "5s"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let x = comp(&status, "x");
    assert_eq!(x["observability"], "not-permitted", "{x:#}");
    assert!(evidence_text(x).contains(&print), "{x:#}");

    assert_eq!(
        std::fs::read(&empty).unwrap(),
        b"",
        "the key was recorded silently"
    );
    assert_eq!(
        h1.accepted_logins(),
        logins,
        "a login to an unknown host was accepted"
    );
}

/// 7. A key the host does not accept is a clear authentication error naming the host.
#[test]
fn a_wrong_key_is_a_clear_authentication_error() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("wrong-key");
    let wrong = fx.path().join("wrong");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-N", "", "-t", "ed25519", "-f"])
        .arg(&wrong)
        .status()
        .expect("ssh-keygen");
    assert!(made.success());
    let table = fx.host_toml(h1).replace(
        &q(h1.identity.to_string_lossy()),
        &q(wrong.to_string_lossy()),
    );
    assert!(table.contains(&q(wrong.to_string_lossy())), "{table}");
    fx.write(
        &format!("{table}{}", fx.service("x", "h1", free_port(), "")),
        &[],
    );
    let logins = h1.accepted_logins();

    let check = fx.run(&["host", "check", "h1"]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    let said = both(&check);
    assert!(said.contains("authentication failed"), "{said}");
    assert!(said.contains("`h1`"), "{said}");
    assert!(said.contains("root"), "it names the user: {said}");

    let (run, status) = fx.status(&["--host-timeout", "5s"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let x = comp(&status, "x");
    assert_eq!(x["observability"], "not-permitted", "{x:#}");
    assert!(evidence_text(x).contains("authentication failed"), "{x:#}");
    assert_eq!(h1.accepted_logins(), logins);
}

/// Puts `link` back to `target` (or removes it) on drop.
struct RestoreLink {
    link: PathBuf,
    target: Option<PathBuf>,
}

impl Drop for RestoreLink {
    fn drop(&mut self) {
        let tmp = self.link.with_extension("restore");
        let _ = std::fs::remove_file(&tmp);
        match &self.target {
            Some(t) => {
                let _ = std::os::unix::fs::symlink(t, &tmp);
                let _ = std::fs::rename(&tmp, &self.link);
            }
            None => {
                let _ = std::fs::remove_file(&self.link);
            }
        }
    }
}

/// 8. A host running a flotilla that speaks another protocol is not observed, and both
///    `status` and `host check` say which versions meet and what to run; the host side
///    refuses a controller speaking another protocol, naming both.
#[test]
fn version_skew_is_detected_and_says_what_to_do() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("skew");
    fx.one_service(h1, "x");
    fx.install(&["h1"]);
    let (run, status) = fx.status(&[]);
    assert_eq!(
        comp(&status, "x")["observability"],
        "observed",
        "{}",
        run.stderr
    );

    // h1's `current` flotilla now answers as 9.9.9, protocol 999.
    let fake = fx.path().join("fake");
    std::fs::create_dir(&fake).unwrap();
    let script = fake.join("flotilla");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":999,\"version\":\"9.9.9\",\"reply\":\"error\",\"kind\":\"protocol\",\"message\":\"x\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let current = install_root(h1).join("current");
    let restore = RestoreLink {
        target: std::fs::read_link(&current).ok(),
        link: current.clone(),
    };
    let tmp = current.with_extension("fake");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&fake, &tmp).unwrap();
    std::fs::rename(&tmp, &current).unwrap();

    let version = fx.ok(&["--version"]).stdout;
    let version = version.split_whitespace().nth(1).unwrap().to_string();
    let (run, status) = fx.status(&[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let x = comp(&status, "x");
    assert_ne!(x["observability"], "observed", "{x:#}");
    assert_ne!(x["observability"], "unreachable", "h1 is reachable: {x:#}");
    assert_ne!(x["lifecycle"], "stopped", "{x:#}");
    let ev = evidence_text(x);
    for want in [
        "9.9.9",
        "protocol 999",
        &format!("{version} (protocol {})", flotilla_exec::remote::PROTOCOL),
        "flotilla host install h1",
    ] {
        assert!(ev.contains(want), "the evidence says `{want}`: {ev}");
    }
    let check = fx.run(&["host", "check", "h1"]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    let said = both(&check);
    for want in ["9.9.9", "protocol 999", "flotilla host install h1"] {
        assert!(said.contains(want), "host check says `{want}`: {said}");
    }
    drop(restore);
    fx.ok(&["host", "check", "h1"]);

    // The host side: a controller speaking protocol 999 is refused, naming both.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["host", "serve", "--state-dir"])
        .arg(fx.path().join("serve-state"))
        .env_remove("FLOTILLA_STATE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run flotilla host serve");
    serve
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"protocol":999,"version":"9.9.9","call":"hello"}"#)
        .unwrap();
    let out = serve.wait_with_output().expect("host serve");
    let text = String::from_utf8_lossy(&out.stdout);
    let answer: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("host serve answered no JSON ({e}): {text}"));
    assert_eq!(answer["reply"], "error", "{answer}");
    assert_eq!(answer["kind"], "protocol", "{answer}");
    assert_eq!(
        answer["protocol"],
        flotilla_exec::remote::PROTOCOL,
        "{answer}"
    );
    assert_eq!(answer["version"], version.as_str(), "{answer}");
    let message = answer["message"].as_str().unwrap();
    for want in [
        "9.9.9",
        "protocol 999",
        &format!("{version} (protocol {})", flotilla_exec::remote::PROTOCOL),
        "flotilla host install",
    ] {
        assert!(
            message.contains(want),
            "the refusal says `{want}`: {message}"
        );
    }
}

/// 9. A host that cannot be reached at all and was never observed: a plan that needs it
///    is refused naming it, and `status` answers within its host timeout with the
///    component `unreachable`, no last-known state, and says it was never observed.
#[test]
fn an_unreachable_host_refuses_the_plan_naming_it() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("unreachable");
    fx.one_service(h1, "x");
    let _partition = net.partition("h1");

    let began = Instant::now();
    let plan = fx.run(&["--host-timeout", "2s", "plan", "start", "x"]);
    let took = began.elapsed();
    assert_eq!(plan.code, 1, "{}\n{}", plan.stdout, plan.stderr);
    let said = both(&plan);
    assert!(said.contains("refused"), "{said}");
    assert!(
        said.contains("`h1`") && said.contains("unreachable"),
        "{said}"
    );
    assert!(said.contains("`x`"), "{said}");
    assert!(
        took < Duration::from_secs(6),
        "plan took {took:?} with --host-timeout 2s"
    );

    let began = Instant::now();
    let (run, status) = fx.status(&["--host-timeout", "2s"]);
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "status took {took:?} with --host-timeout 2s"
    );
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let x = comp(&status, "x");
    assert_eq!(x["host"], "h1");
    assert_eq!(x["observability"], "unreachable", "{x:#}");
    assert_ne!(x["lifecycle"], "stopped", "{x:#}");
    assert!(
        x.get("last_known").is_none_or(Value::is_null),
        "never observed: {x:#}"
    );
    let ev = evidence_text(x);
    assert!(
        ev.contains("h1") && ev.contains("cannot be reached"),
        "{ev}"
    );
    assert!(ev.contains("never observed"), "{ev}");
    assert!(
        !fx.state.exists(),
        "a read-only status created {}",
        fx.state.display()
    );
}

/// 10. Ctrl-C while a step waits on a remote host: the host is told to give up (the
///     controller closes the step's standard input), stops what the step launched
///     there, and the command ends promptly, leaving nothing running and the
///     component not meant to run.
#[test]
fn ctrl_c_during_a_remote_start_stops_what_it_launched_there() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("ctrlc");
    let port = free_port();
    // Listens only after 60 s: its readiness cannot pass while the test runs.
    fx.write(
        &format!(
            "{}{}",
            fx.host_toml(h1),
            fx.service("slow", "h1", port, "").replace(
                "\"--exec-name\"",
                "\"--listen-after\", \"60000\", \"--exec-name\""
            ),
        ),
        &[],
    );
    fx.install(&["h1"]);
    let began = Instant::now();
    let mut child = fx
        .command(&["start", "slow", "--timeout", "120s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run flotilla start");
    // Wait until the service runs on h1, then interrupt the controller.
    let launched = wait_until(Duration::from_secs(20), || {
        !pids_with_arg(&fx.marker).is_empty()
    });
    assert!(launched, "the slow service never started on h1");
    let remote_pid = pids_with_arg(&fx.marker)[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let ended = wait_until(Duration::from_secs(20), || {
        child.try_wait().expect("try_wait").is_some()
    });
    assert!(ended, "flotilla did not end within 20 s of Ctrl-C");
    let took = began.elapsed();
    let out = child.wait_with_output().expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {text}");
    assert!(text.contains("interrupted"), "{text}");
    let gone = wait_until(Duration::from_secs(10), || !alive(remote_pid));
    assert!(
        gone,
        "pid {remote_pid} still runs on h1 after Ctrl-C: {text}"
    );
    let (_, status) = fx.status(&[]);
    let c = comp(&status, "slow");
    assert_eq!(c["lifecycle"], "stopped", "{c:#}");
    assert_eq!(c["desired"], "stopped", "{c:#}");
    assert_eq!(c["condition"], "ok", "{c:#}");
}

/// 11. A slow probe on a host does not make the host look unreachable: the host
///     answers within the host timeout, the slow probe's component is `unknown`
///     (cut short, saying so), the others on that host are observed as usual, and
///     plans for that host are not refused.
#[test]
fn a_slow_probe_leaves_its_host_observed() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("slowprobe");
    let (pf, ps) = (free_port(), free_port());
    fx.write(
        &format!(
            "{}{}{}[stacks.s]\ncomponents = [\"fine\", \"slow\"]\n",
            fx.host_toml(h1),
            fx.service("fine", "h1", pf, ""),
            fx.service(
                "slow",
                "h1",
                ps,
                "liveness = { exec = { command = [\"sh\", \"-c\", \"sleep 30\"] }, timeout = \"20s\" }"
            ),
        ),
        &["s"],
    );
    fx.install(&["h1"]);
    fx.ok(&["up", "s"]);
    let began = Instant::now();
    let (run, status) = fx.status(&["--host-timeout", "3s"]);
    let took = began.elapsed();
    assert!(took < Duration::from_secs(6), "status took {took:?}");
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let fine = comp(&status, "fine");
    assert_eq!(fine["observability"], "observed", "{fine:#}");
    assert_eq!(fine["health"], "healthy", "{fine:#}");
    let slow = comp(&status, "slow");
    assert_eq!(slow["observability"], "observed", "{slow:#}");
    assert_eq!(slow["lifecycle"], "running", "{slow:#}");
    assert_eq!(slow["health"], "unknown", "{slow:#}");
    assert!(
        evidence_text(slow).contains("did not finish within"),
        "{slow:#}"
    );
    let plan = fx.run(&["--host-timeout", "3s", "plan", "stop", "fine"]);
    assert_eq!(plan.code, 0, "{}\n{}", plan.stdout, plan.stderr);
}

/// 12. Installing a binary that does not work there switches nothing: `current`
///     still points at the working release and the host is still observed.
#[test]
fn a_broken_binary_is_never_switched_to() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h3 = net.host("h3");
    let fx = Fixture::new("badbin");
    fx.one_service(h3, "c");
    fx.install(&["h3"]);
    let current = install_root(h3).join("current");
    let before = std::fs::read_link(&current).expect("current link");
    let bad = fx.path().join("not-flotilla");
    std::fs::write(&bad, "#!/bin/sh\nexit 0\n").unwrap();
    let run = fx.run(&["host", "install", "h3", "--binary", bad.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        both(&run).contains("nothing was switched"),
        "{}",
        both(&run)
    );
    assert_eq!(std::fs::read_link(&current).expect("current link"), before);
    let releases = std::fs::read_dir(install_root(h3).join("versions"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert!(
        releases.iter().all(|r| !r.starts_with(".incoming.")),
        "a staged copy was left: {releases:?}"
    );
    let (_, status) = fx.status(&[]);
    assert_eq!(comp(&status, "c")["observability"], "observed");
}

/// 12b. `host install --release`: a signed release's artifact for the host's platform
///     is installed once its signature (a pinned key), expiry, size and digest are
///     checked; signed by another key, it is refused and nothing is copied.
#[test]
fn a_signed_release_is_installed_and_an_untrusted_one_is_refused() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h3 = net.host("h3");
    let fx = Fixture::new("signed");
    fx.one_service(h3, "c");
    fx.install(&["h3"]);
    let current = install_root(h3).join("current");
    let before = std::fs::read_link(&current).expect("current link");
    // This flotilla with bytes appended: the same program, another digest.
    let build = fx.path().join("flotilla-signed");
    let mut bytes = std::fs::read(env!("CARGO_BIN_EXE_flotilla")).unwrap();
    bytes.extend_from_slice(b"\nflotilla-signed-install-test\n");
    std::fs::write(&build, &bytes).unwrap();
    let artifact = format!("linux-x86_64={}", build.display());
    for args in [
        vec!["release", "keygen", "--dir", "keys", "--name", "good"],
        vec!["release", "keygen", "--dir", "keys", "--name", "other"],
        vec![
            "release",
            "manifest",
            "flotilla-agent",
            "7.0.0",
            "--serial",
            "7",
            "--artifact",
            &artifact,
            "-o",
            "m.json",
        ],
    ] {
        fx.ok(&args);
    }
    let install = || {
        fx.run(&[
            "host",
            "install",
            "h3",
            "--release",
            "m.json",
            "--trusted-key",
            "keys/good.pub",
            "--artifact",
            build.to_str().unwrap(),
            "--json",
        ])
    };
    // Signed by a key h3's operator does not trust: refused, nothing copied.
    fx.ok(&["release", "sign", "m.json", "--key", "keys/other.key"]);
    let run = install();
    assert_eq!(run.code, 1, "{}", both(&run));
    assert!(both(&run).contains("SignatureInvalid"), "{}", both(&run));
    assert!(both(&run).contains("nothing was copied"), "{}", both(&run));
    assert_eq!(std::fs::read_link(&current).expect("current link"), before);
    // Signed by the trusted key: installed, and the host runs exactly that artifact.
    fx.ok(&["release", "sign", "m.json", "--key", "keys/good.key"]);
    let run = install();
    assert_eq!(run.code, 0, "{}", both(&run));
    let r = run.json();
    assert_eq!(r["sha256"], sha256_of(&build).as_str(), "{r:#}");
    assert_ne!(std::fs::read_link(&current).expect("current link"), before);
    assert_eq!(
        sha256_of(&install_root(h3).join("current/flotilla")),
        sha256_of(&build)
    );
}

/// 13. `--ssh-persist`: the first invocation makes one handshake per host and leaves
///     the master running (its control socket recorded under the state directory);
///     the next invocations reuse it and make none.
#[test]
fn persisted_connections_are_reused_across_invocations() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h2 = net.host("h2");
    let fx = Fixture::new("persist");
    fx.one_service(h2, "c");
    fx.install(&["h2"]);
    let logins = || h2.accepted_logins();
    let before = logins();
    let (run, _) = fx.status(&["--ssh-persist", "20s"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        wait_until(Duration::from_secs(5), || logins() == before + 1),
        "first invocation: {} logins, expected 1",
        logins() - before
    );
    for _ in 0..3 {
        let (run, status) = fx.status(&["--ssh-persist", "20s"]);
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        assert_eq!(comp(&status, "c")["observability"], "observed");
    }
    assert_eq!(logins(), before + 1, "later invocations made handshakes");
    // Close the kept masters (they would exit 20 s after their last use anyway).
    let dir = fx.path().join("state/run/ssh");
    for entry in std::fs::read_dir(&dir).expect("run/ssh") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "ctl") {
            let ctl = std::fs::read_to_string(&path).unwrap();
            let _ = Command::new("ssh")
                .args(["-S", ctl.trim(), "-O", "exit", "none"])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The test host whose PID 1 is a real systemd (`scripts/testnet up 4 --systemd 1`).
fn systemd_host(net: &Testnet) -> &TestHost {
    net.hosts.iter().find(|h| h.is_systemd()).unwrap_or_else(|| {
        panic!("no test host runs systemd: run `scripts/testnet up 4 --systemd 1` (scripts/test does)")
    })
}

/// `cmd` run by `sh` on `host` over SSH: its stdout, trimmed; panics when it fails.
fn on(host: &TestHost, cmd: &str) -> String {
    let out = host.ssh(&[], cmd);
    assert!(
        out.status.success(),
        "`{cmd}` on {}: {}\n{}",
        host.name,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A copy of the stand-in service under `fx`'s state directory on `host` (the
/// systemd test host has a private `/tmp`: a checkout under `/tmp` is not visible
/// there, its home is).
fn testkit_on(fx: &Fixture, host: &TestHost) -> String {
    let dir = fx.remote_state(host).join("bin");
    std::fs::create_dir_all(&dir).expect("mkdir bin");
    let bin = dir.join("flotilla-testkit");
    if !bin.exists() {
        std::fs::copy(flotilla_testkit::binary(), &bin).expect("copy the stand-in service");
    }
    bin.display().to_string()
}

/// `MainPID` of `unit` on `host`, as systemd reports it.
fn main_pid(host: &TestHost, unit: &str) -> u32 {
    on(host, &format!("systemctl show -p MainPID --value {unit}"))
        .parse()
        .expect("a MainPID")
}

/// 14. A component with `adapter = "systemd"` on a real systemd: Flotilla writes its
///     unit, starts it, observes it (`managed (systemd)`, MainPID measured), restarts it
///     with a proven new identity, reports `stale-runtime` when its binary is replaced
///     on disk and clears it by a restart, calls its `kill -9` `down-unexpectedly`, and
///     stops it.
#[test]
fn a_systemd_unit_is_started_observed_restarted_with_proof_and_stopped() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h = systemd_host(&net);
    let fx = Fixture::new("systemd");
    let port = free_port();
    // Its own copy of the service binary, so it can be replaced on disk.
    let bin_dir = fx.remote_state(h).join("bin");
    std::fs::create_dir_all(&bin_dir).expect("mkdir bin");
    let bin = bin_dir.join("svc");
    std::fs::copy(flotilla_testkit::binary(), &bin).expect("copy the service binary");
    let unit = "flotilla-svc.service";
    let _remove = RemoveUnit(h, unit);
    fx.write(
        &format!(
            "{}[components.svc]\nhost = {}\nadapter = \"systemd\"\n\
             command = [{}, \"--listen\", {}, \"--exec-name\", {}]\n\
             env = {{ GREETING = \"hello from a unit\" }}\n\
             endpoints = {{ http = {} }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"100ms\" }}\n\
             stop = {{ grace_period = \"2s\" }}\n",
            fx.host_toml(h),
            q(&h.name),
            q(bin.to_string_lossy()),
            q(format!("127.0.0.1:{port}")),
            q(&fx.marker),
            q(format!("http://127.0.0.1:{port}")),
        ),
        &[],
    );
    fx.install(&[&h.name]);

    let up = fx.ok(&["start", "svc"]);
    assert!(both(&up).contains("started pid"), "{}", both(&up));
    let (_, st) = fx.status(&["svc"]);
    let c = comp(&st, "svc");
    assert_eq!(c["ownership"], "managed (systemd)", "{c:#}");
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    assert_eq!(c["health"], "healthy", "{c:#}");
    let first = pid_of(c);
    assert_eq!(
        main_pid(h, unit),
        first,
        "status measures the unit's MainPID"
    );
    assert_eq!(
        on(h, &format!("systemctl show -p ActiveState --value {unit}")),
        "active"
    );
    let written = on(h, &format!("cat /run/systemd/system/{unit}"));
    assert!(written.contains("KillMode=control-group"), "{written}");
    assert!(
        !written.contains("Restart="),
        "no Restart= unless asked: {written}"
    );
    assert!(
        !written.contains("hello from a unit"),
        "values live in the environment file, not the unit: {written}"
    );
    let environ = on(h, &format!("tr '\\0' '\\n' < /proc/{first}/environ"));
    assert!(environ.contains("GREETING=hello from a unit"), "{environ}");

    // restart: a new MainPID, proven.
    let restarted = fx.ok(&["restart", "svc"]);
    assert!(
        both(&restarted).contains(&format!("replaced pid {first} with pid")),
        "{}",
        both(&restarted)
    );
    let (_, st) = fx.status(&["svc"]);
    let second = pid_of(comp(&st, "svc"));
    assert_ne!(second, first);
    assert_eq!(main_pid(h, unit), second);

    // The binary replaced on disk under the running unit: stale-runtime, until a
    // restart loads the new one.
    let mut bytes = std::fs::read(&bin).expect("read the binary");
    bytes.extend_from_slice(b"\0flotilla-test-upgrade");
    let staged = bin_dir.join("svc.new");
    std::fs::write(&staged, &bytes).expect("write the new binary");
    std::fs::set_permissions(&staged, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::rename(&staged, &bin).expect("replace the binary");
    let (_, st) = fx.status(&["svc"]);
    let c = comp(&st, "svc");
    assert_eq!(c["condition"], "stale-runtime", "{c:#}");
    fx.ok(&["restart", "svc"]);
    let (_, st) = fx.status(&["svc"]);
    let c = comp(&st, "svc");
    assert_eq!(c["condition"], "ok", "{c:#}");
    assert_eq!(
        c["runtime_identity"]["measured"]["exe_sha256"],
        sha256_of(&bin).as_str(),
        "{c:#}"
    );
    let third = pid_of(c);

    // kill -9 without Restart=: the unit fails, and it was meant to run.
    on(h, &format!("kill -9 {third}"));
    let deadline = Instant::now() + DEADLINE;
    let c = loop {
        let (_, st) = fx.status(&["svc"]);
        let c = comp(&st, "svc").clone();
        if c["condition"] == "down-unexpectedly" || Instant::now() > deadline {
            break c;
        }
        std::thread::yield_now();
    };
    assert_eq!(c["condition"], "down-unexpectedly", "{c:#}");
    assert_eq!(c["lifecycle"], "failed", "{c:#}");
    let ev = evidence_text(&c);
    assert!(ev.contains("failed (failed)"), "systemd's own word: {ev}");
    assert!(
        ev.contains(&format!("pid {third} that")),
        "names the lost pid: {ev}"
    );

    // start again, then stop: the unit is inactive and nothing of it runs.
    fx.ok(&["start", "svc"]);
    let (_, st) = fx.status(&["svc"]);
    let fourth = pid_of(comp(&st, "svc"));

    // Another project with a component `svc` on this host: the unit names its
    // project, so that project's start is refused, and its stop and status leave it.
    let written = on(h, &format!("cat /run/systemd/system/{unit}"));
    assert!(written.contains("\nX-Flotilla-Project="), "{written}");
    let other = Fixture::new("systemd-other");
    let other_port = free_port();
    other.write(
        &format!(
            "{}[components.svc]\nhost = {}\nadapter = \"systemd\"\n\
             command = [{}, \"--listen\", {}]\n\
             endpoints = {{ http = {} }}\n",
            other.host_toml(h),
            q(&h.name),
            q(bin.to_string_lossy()),
            q(format!("127.0.0.1:{other_port}")),
            q(format!("http://127.0.0.1:{other_port}")),
        ),
        &[],
    );
    other.install(&[&h.name]);
    let refused = other.run(&["start", "svc"]);
    assert_ne!(refused.code, 0, "{}", both(&refused));
    assert!(
        both(&refused).contains("was written for flotilla project"),
        "{}",
        both(&refused)
    );
    let _ = other.run(&["stop", "svc", "--force"]);
    let (_, st) = other.status(&["svc"]);
    let c = comp(&st, "svc");
    assert!(
        evidence_text(c).contains("was written for flotilla project"),
        "{c:#}"
    );
    assert_ne!(c["lifecycle"], "running", "{c:#}");
    assert_eq!(
        main_pid(h, unit),
        fourth,
        "the other project left it running"
    );
    assert_eq!(
        on(h, &format!("systemctl show -p ActiveState --value {unit}")),
        "active"
    );
    let stop = fx.ok(&["stop", "svc"]);
    assert!(both(&stop).contains("stopped unit"), "{}", both(&stop));
    assert_eq!(
        on(h, &format!("systemctl show -p ActiveState --value {unit}")),
        "inactive"
    );
    assert_eq!(
        on(
            h,
            &format!("test -e /proc/{fourth} && echo alive || echo gone")
        ),
        "gone"
    );
    let (_, st) = fx.status(&["svc"]);
    let c = comp(&st, "svc");
    assert_eq!(c["lifecycle"], "stopped", "{c:#}");
    assert_eq!(c["condition"], "ok", "{c:#}");
}

/// 15. An existing unit driven by name keeps its own `Restart=`: after a `kill -9`
///     systemd brings it back, and status says so (running, new pid, `NRestarts`),
///     not `down-unexpectedly`.
#[test]
fn an_existing_units_own_restart_is_reported_with_n_restarts() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h = systemd_host(&net);
    let fx = Fixture::new("sd-existing");
    let port = free_port();
    let unit = format!("flt-test-{}.service", std::process::id());
    let unit_file = format!("/run/systemd/system/{unit}");
    on(
        h,
        &format!(
            "printf '%s\\n' '[Service]' 'ExecStart={} --listen 127.0.0.1:{port} --exec-name {}' \
             'Restart=always' 'RestartSec=100ms' > {unit_file} && systemctl daemon-reload",
            testkit_on(&fx, h),
            fx.marker
        ),
    );
    let _remove = RemoveHandUnit(h, unit.clone(), unit_file.clone());
    fx.write(
        &format!(
            "{}[components.existing]\nhost = {}\nadapter = \"systemd\"\nsystemd = {{ unit = {} }}\n\
             endpoints = {{ http = {} }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"100ms\" }}\n",
            fx.host_toml(h),
            q(&h.name),
            q(&unit),
            q(format!("http://127.0.0.1:{port}")),
        ),
        &[],
    );
    fx.install(&[&h.name]);
    fx.ok(&["start", "existing"]);
    let (_, st) = fx.status(&["existing"]);
    let first = pid_of(comp(&st, "existing"));
    assert_eq!(main_pid(h, &unit), first);

    on(h, &format!("kill -9 {first}"));
    let deadline = Instant::now() + DEADLINE;
    let c = loop {
        let (_, st) = fx.status(&["existing"]);
        let c = comp(&st, "existing").clone();
        let back = c["lifecycle"] == "running"
            && c["runtime_identity"]["measured"]["pid"].as_u64() != Some(u64::from(first));
        if back || Instant::now() > deadline {
            break c;
        }
        std::thread::yield_now();
    };
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    assert_ne!(pid_of(&c), first, "{c:#}");
    assert_ne!(c["condition"], "down-unexpectedly", "{c:#}");
    let ev = evidence_text(&c);
    assert!(ev.contains("NRestarts 1"), "{ev}");
    assert!(ev.contains("systemd restarted it"), "{ev}");

    fx.ok(&["stop", "existing"]);
    assert_eq!(
        on(h, &format!("systemctl show -p ActiveState --value {unit}")),
        "inactive"
    );
}

/// 16. `flotilla check` asks each host to check its own components, there: a program
///     missing on h1 is found on h1 (not here), a fine one passes.
#[test]
fn check_runs_the_pre_flight_on_each_host() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h1 = net.host("h1");
    let fx = Fixture::new("check");
    fx.write(
        &format!(
            "{}{}[components.ghost]\nhost = \"h1\"\ncommand = [\"no-such-program-on-h1\"]\n",
            fx.host_toml(h1),
            fx.service("web", "h1", free_port(), "")
        ),
        &[],
    );
    fx.install(&["h1"]);
    let run = fx.run(&["check", "--json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let json = run.json();
    let h = json
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["host"] == "h1")
        .unwrap_or_else(|| panic!("no report for h1: {json:#}"));
    let findings = h["findings"].as_array().unwrap();
    let ghost = findings
        .iter()
        .find(|f| f["check"] == "ghost: program")
        .unwrap_or_else(|| panic!("{h:#}"));
    assert_eq!(ghost["ok"], false, "{h:#}");
    let web = findings
        .iter()
        .find(|f| f["check"] == "web: program")
        .unwrap_or_else(|| panic!("{h:#}"));
    assert_eq!(web["ok"], true, "{h:#}");
}

/// 17. A `--user` unit (`systemd = { user = true }`) on the systemd test host: written
///     into the user manager's runtime directory, started, measured, stopped through
///     `systemctl --user` (its runtime directory found without a login session).
#[test]
fn a_user_unit_is_started_and_stopped_through_the_user_manager() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h = systemd_host(&net);
    on(h, "systemctl start user@0.service");
    let fx = Fixture::new("sd-user");
    let port = free_port();
    fx.write(
        &format!(
            "{}[components.usvc]\nhost = {}\nadapter = \"systemd\"\nsystemd = {{ user = true }}\n\
             command = [{}, \"--listen\", {}, \"--exec-name\", {}]\n\
             endpoints = {{ http = {} }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"100ms\" }}\n",
            fx.host_toml(h),
            q(&h.name),
            q(testkit_on(&fx, h)),
            q(format!("127.0.0.1:{port}")),
            q(&fx.marker),
            q(format!("http://127.0.0.1:{port}")),
        ),
        &[],
    );
    fx.install(&[&h.name]);
    fx.ok(&["start", "usvc"]);
    let (_, st) = fx.status(&["usvc"]);
    let c = comp(&st, "usvc");
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    let user_show = |p: &str| {
        on(
            h,
            &format!("XDG_RUNTIME_DIR=/run/user/0 systemctl --user show -p {p} --value flotilla-usvc.service"),
        )
    };
    assert_eq!(user_show("MainPID"), pid_of(c).to_string());
    assert!(
        on(h, "ls /run/user/0/systemd/user/").contains("flotilla-usvc.service"),
        "the unit lives in the user manager's runtime directory"
    );
    fx.ok(&["stop", "usvc"]);
    assert_eq!(user_show("ActiveState"), "inactive");
}

/// Stops, resets and removes a unit Flotilla wrote on `host` when the test ends, even
/// when it panics: with a `Restart=` policy, the [`Fixture`]'s `kill -9` of its process
/// would only make systemd start it again.
struct RemoveUnit<'a>(&'a TestHost, &'static str);

impl Drop for RemoveUnit<'_> {
    fn drop(&mut self) {
        let unit = self.1;
        let _ = self.0.ssh(
            &[],
            &format!(
                "systemctl stop {unit}; systemctl reset-failed {unit}; \
                 rm -f /run/systemd/system/{unit}; systemctl daemon-reload"
            ),
        );
    }
}

/// Stops (and disables) a unit a test wrote by hand on `host` (`.0`), named `.1`, and
/// removes its file `.2` when the test ends, even when it panics.
struct RemoveHandUnit<'a>(&'a TestHost, String, String);

impl Drop for RemoveHandUnit<'_> {
    fn drop(&mut self) {
        let _ = self.0.ssh(
            &[],
            &format!(
                "systemctl disable --now {0}; systemctl stop {0}; rm -f {1}; systemctl daemon-reload",
                self.1, self.2
            ),
        );
    }
}

/// Writes `unit` by hand under `/etc/systemd/system` on `h` (installable in
/// `multi-user.target`), running the stand-in service on 127.0.0.1:`port` with
/// `fx`'s marker, and runs `systemctl VERB unit` (`start`, `enable --now`); the
/// guard that removes it.
fn hand_unit<'a>(
    fx: &Fixture,
    h: &'a TestHost,
    unit: &str,
    port: u16,
    verb: &str,
) -> RemoveHandUnit<'a> {
    let unit_file = format!("/etc/systemd/system/{unit}");
    on(
        h,
        &format!(
            "printf '%s\\n' '[Unit]' 'Description=a service written by hand' '[Service]' \
             'ExecStart={} --listen 127.0.0.1:{port} --exec-name {}' '[Install]' \
             'WantedBy=multi-user.target' > {unit_file} && \
             systemctl daemon-reload && systemctl {verb} {unit}",
            testkit_on(fx, h),
            fx.marker
        ),
    );
    RemoveHandUnit(h, unit.to_string(), unit_file)
}

/// `ActiveState SubState MainPID NRestarts` of `unit` on `host`, one line.
fn unit_state(host: &TestHost, unit: &str) -> String {
    on(
        host,
        &format!(
            "systemctl show -p ActiveState,SubState,MainPID,NRestarts {unit} | sort | tr '\\n' ' '"
        ),
    )
}

/// Asserts that `unit` on `host` stays as `expect` says (a `unit_state` line, checked
/// by `expect`) for all of `period`, looking again and again.
fn stays(host: &TestHost, unit: &str, period: Duration, expect: impl Fn(&str) -> bool) {
    let since = Instant::now();
    let mut looks = 0;
    while since.elapsed() < period {
        let st = unit_state(host, unit);
        assert!(
            expect(&st),
            "after {:?} ({looks} looks): {st}",
            since.elapsed()
        );
        looks += 1;
    }
    assert!(looks > 1, "looked only {looks} time(s) in {period:?}");
}

/// An inventory of `h` with one systemd component `name` running the stand-in service
/// on 127.0.0.1:`port` there, `extra` TOML in its table.
fn systemd_service(fx: &Fixture, h: &TestHost, name: &str, port: u16, extra: &str) -> String {
    format!(
        "{}[components.{name}]\nhost = {}\nadapter = \"systemd\"\n\
         command = [{}, \"--listen\", {}, \"--exec-name\", {}]\n\
         endpoints = {{ http = {} }}\n\
         readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"100ms\" }}\n\
         stop = {{ grace_period = \"2s\" }}\n{extra}\n",
        fx.host_toml(h),
        q(&h.name),
        q(testkit_on(fx, h)),
        q(format!("127.0.0.1:{port}")),
        q(&fx.marker),
        q(format!("http://127.0.0.1:{port}")),
    )
}

/// 18. `restart = { policy = "on-failure" }` on a real systemd: Flotilla writes
///     `Restart=on-failure` and `RestartSec=` into its unit; a `kill -9` of the main
///     process is undone by systemd (a new MainPID), and status says so (running, not
///     `down-unexpectedly`, the owner's `NRestarts` 1, `ps` RESTARTS 1); `flotilla stop`
///     stops it for good: systemd restarts no unit stopped on purpose.
#[test]
fn a_systemd_unit_with_restart_on_failure_is_restarted_by_systemd_and_stays_stopped() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h = systemd_host(&net);
    let fx = Fixture::new("sd-onfail");
    let unit = "flotilla-sdonfail.service";
    let _remove = RemoveUnit(h, unit);
    fx.write(
        &systemd_service(
            &fx,
            h,
            "sdonfail",
            free_port(),
            "restart = { policy = \"on-failure\", backoff = \"200ms\" }",
        ),
        &[],
    );
    fx.install(&[&h.name]);
    fx.ok(&["start", "sdonfail"]);
    let written = on(h, &format!("cat /run/systemd/system/{unit}"));
    for line in ["Restart=on-failure", "RestartSec=200ms"] {
        assert!(written.lines().any(|l| l == line), "{line}: {written}");
    }
    let (_, st) = fx.status(&["sdonfail"]);
    let c = comp(&st, "sdonfail");
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    let first = pid_of(c);
    assert_eq!(main_pid(h, unit), first);

    // kill -9: systemd starts it again after RestartSec.
    on(h, &format!("kill -9 {first}"));
    let deadline = Instant::now() + DEADLINE;
    let c = loop {
        let (_, st) = fx.status(&["sdonfail"]);
        let c = comp(&st, "sdonfail").clone();
        let back = c["lifecycle"] == "running"
            && c["runtime_identity"]["measured"]["pid"]
                .as_u64()
                .is_some_and(|p| p != u64::from(first));
        if back || Instant::now() > deadline {
            break c;
        }
        std::thread::yield_now();
    };
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    assert_ne!(c["condition"], "down-unexpectedly", "{c:#}");
    let second = pid_of(&c);
    assert_ne!(second, first);
    assert_eq!(main_pid(h, unit), second, "status measures the new MainPID");
    let ev = evidence_text(&c);
    assert!(ev.contains("NRestarts 1,"), "the owner's restarts: {ev}");
    assert!(
        ev.contains(&format!(
            "pid {second}, not pid {first} that Flotilla started"
        )),
        "{ev}"
    );
    assert!(
        ev.contains("systemd restarted it on its own 1 time(s)"),
        "{ev}"
    );
    let ps = fx.ok(&["ps", "--json", "sdonfail"]).json();
    assert_eq!(ps["components"][0]["restarts"], 1, "{ps:#}");

    // stop: inactive, and it stays so for ten times RestartSec.
    let stop = fx.ok(&["stop", "sdonfail"]);
    assert!(both(&stop).contains("stopped unit"), "{}", both(&stop));
    stays(h, unit, Duration::from_secs(2), |st| {
        st.contains("ActiveState=inactive ") && st.contains("MainPID=0 ")
    });
    assert_eq!(
        on(
            h,
            &format!("test -e /proc/{second} && echo alive || echo gone")
        ),
        "gone"
    );
    let (_, st) = fx.status(&["sdonfail"]);
    let c = comp(&st, "sdonfail");
    assert_eq!(c["lifecycle"], "stopped", "{c:#}");
    assert_eq!(c["condition"], "ok", "{c:#}");
}

/// 19. `restart = { policy = "never" }`: `Restart=no` in the unit; after a `kill -9`
///     nothing brings it back (the unit stays failed, MainPID 0, NRestarts 0, looked at
///     over ten times the backoff), and status says `down-unexpectedly`, `failed`.
#[test]
fn a_systemd_unit_with_restart_never_stays_dead_after_kill_9() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h = systemd_host(&net);
    let fx = Fixture::new("sd-never");
    let unit = "flotilla-sdnever.service";
    let _remove = RemoveUnit(h, unit);
    fx.write(
        &systemd_service(
            &fx,
            h,
            "sdnever",
            free_port(),
            "restart = { policy = \"never\", backoff = \"200ms\" }",
        ),
        &[],
    );
    fx.install(&[&h.name]);
    fx.ok(&["start", "sdnever"]);
    let written = on(h, &format!("cat /run/systemd/system/{unit}"));
    assert!(written.lines().any(|l| l == "Restart=no"), "{written}");
    let (_, st) = fx.status(&["sdnever"]);
    let first = pid_of(comp(&st, "sdnever"));

    on(h, &format!("kill -9 {first}"));
    let failed = wait_until(DEADLINE, || {
        unit_state(h, unit).contains("ActiveState=failed ")
    });
    assert!(failed, "{}", unit_state(h, unit));
    stays(h, unit, Duration::from_secs(2), |st| {
        st.contains("ActiveState=failed ")
            && st.contains("MainPID=0 ")
            && st.contains("NRestarts=0 ")
    });
    let (_, st) = fx.status(&["sdnever"]);
    let c = comp(&st, "sdnever");
    assert_eq!(c["condition"], "down-unexpectedly", "{c:#}");
    assert_eq!(c["lifecycle"], "failed", "{c:#}");
    let ev = evidence_text(c);
    assert!(ev.contains("NRestarts 0,"), "{ev}");
    assert!(
        ev.contains(&format!("pid {first} that")),
        "names the lost pid: {ev}"
    );
}

/// 20. `flotilla discover h4` on the systemd test host: a unit written by hand under
///     `/etc/systemd/system` (the host's own) and started with `systemctl`, running the
///     stand-in service on 127.0.0.1 there, is found by the host's own flotilla
///     (`host serve`) as `adapter = "systemd"` driving that unit, with its main process
///     (the MainPID systemd reports), its endpoint and a `/health` probe asked on that
///     host's loopback; a unit Flotilla wrote and started is left out, saying so; the
///     proposal, pasted into the inventory, validates.
#[test]
fn discover_on_the_systemd_host_proposes_a_unit_written_by_hand() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h = systemd_host(&net);
    let fx = Fixture::new("discover");
    let (port, ours) = (free_port(), free_port());
    let unit = format!("disc-{}.service", std::process::id());
    let hand = hand_unit(&fx, h, &unit, port, "start");
    let unit_file = hand.2.clone();
    let _remove_ours = RemoveUnit(h, "flotilla-svc.service");
    fx.write(&systemd_service(&fx, h, "svc", ours, ""), &[]);
    fx.install(&[&h.name]);
    fx.ok(&["start", "svc"]);

    let (p, o) = (port.to_string(), ours.to_string());
    let mut report = Value::Null;
    // systemd answers `start` once the process runs; its socket comes a moment later.
    assert!(
        wait_until(DEADLINE, || {
            report = fx
                .ok(&["discover", &h.name, "--json", "--port", &p, "--port", &o])
                .json();
            report["findings"].as_array().is_some_and(|f| !f.is_empty())
        }),
        "{report:#}"
    );
    assert_eq!(report["host"], h.name.as_str(), "{report:#}");
    let systemd = report["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "systemd")
        .expect("systemd was looked at");
    assert_eq!(systemd["looked"], true, "{report:#}");
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{report:#}");
    let f = &findings[0];
    assert_eq!(f["adapter"], "systemd", "{f:#}");
    assert_eq!(f["unit"]["unit"], unit.as_str(), "{f:#}");
    assert_eq!(f["unit"]["fragment_path"], unit_file.as_str(), "{f:#}");
    assert_eq!(f["process"]["pid"], main_pid(h, &unit), "{f:#}");
    let proposal = &f["proposal"];
    assert_eq!(proposal["host"], h.name.as_str(), "{f:#}");
    assert_eq!(
        proposal["systemd"],
        serde_json::json!({ "unit": unit }),
        "{f:#}"
    );
    assert_eq!(
        proposal["endpoints"],
        serde_json::json!({ "http": format!("http://127.0.0.1:{port}") })
    );
    assert_eq!(
        proposal["readiness"],
        serde_json::json!({ "http": { "endpoint": "http", "path": "/health" } }),
        "{f:#}"
    );
    let skipped = report["skipped"].to_string();
    assert!(
        skipped.contains("started by flotilla: component `svc`"),
        "{skipped}"
    );

    let run = fx.ok(&["discover", &h.name, "--port", &p]);
    assert!(
        run.stdout.contains(&format!(
            "# proposal — not in your inventory: systemd unit {unit}"
        )),
        "{}",
        run.stdout
    );
    let inventory = std::fs::read_to_string(&fx.inventory).unwrap();
    fx.write(&format!("{inventory}\n{}", run.stdout), &[]);
    let v = fx.ok(&["validate", "--json"]).json();
    assert_eq!(v["summary"]["components"], 2, "{v:#}");
    fx.ok(&["stop", "svc"]);
}

/// `systemctl is-enabled` and `is-active` of `unit` on `host`: `enabled active`.
fn enabled_active(host: &TestHost, unit: &str) -> String {
    on(
        host,
        &format!("echo $(systemctl is-enabled {unit}; systemctl is-active {unit}; true)"),
    )
}

/// 21. `flotilla adopt` of a unit written by hand on the systemd test host, enabled
///     by hand (`systemctl enable --now`), running the service the inventory declares
///     there as `adapter = "systemd"`: the host's own flotilla finds the unit from
///     the listener's control group, a declaration on another port is refused with
///     the difference and nothing changes; the adopt disables and stops the hand unit
///     and starts Flotilla's `flotilla-NAME.service` (accepted by its readiness,
///     asked on the host); `--rollback` stops Flotilla's unit, enables and starts
///     the hand unit again and proves it back.
#[test]
fn adopt_moves_a_hand_enabled_unit_to_flotillas_unit_and_rolls_back() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let h = systemd_host(&net);
    let fx = Fixture::new("adopt-sd");
    let (port, other) = (free_port(), free_port());
    let unit = format!("hand-{}.service", std::process::id());
    let ours = "flotilla-adsd.service";
    let hand = hand_unit(&fx, h, &unit, port, "enable --now");
    let unit_file = hand.2.clone();
    let _remove_ours = RemoveUnit(h, ours);

    // Declared on another port: refused, naming the difference; nothing changes.
    fx.write(&systemd_service(&fx, h, "adsd", other, ""), &[]);
    fx.install(&[&h.name]);
    let mut refused = fx.run(&["adopt", "adsd", "--yes"]);
    // systemd answers `enable --now` once the process runs; its socket comes a
    // moment later.
    assert!(
        wait_until(DEADLINE, || {
            refused = fx.run(&["adopt", "adsd", "--yes"]);
            refused.stdout.contains("differences from the declaration")
        }),
        "{}",
        both(&refused)
    );
    assert_eq!(refused.code, 1, "{}", both(&refused));
    assert!(
        refused.stdout.contains(&format!(
            "port: endpoint `http` declares port {other}; it does not listen there (it listens on {port})"
        )),
        "{}",
        both(&refused)
    );
    assert!(
        refused.stderr.contains("nothing was changed"),
        "{}",
        both(&refused)
    );
    assert_eq!(enabled_active(h, &unit), "enabled active");

    // As declared: the plan names the hand unit, found by the host's flotilla.
    fx.write(&systemd_service(&fx, h, "adsd", port, ""), &[]);
    let plan = fx.ok(&["adopt", "adsd", "--dry-run", "--json"]).json();
    assert_eq!(plan["host"], h.name.as_str(), "{plan:#}");
    assert_eq!(plan["adapter"], "systemd", "{plan:#}");
    assert_eq!(plan["holder"]["holder"], "prior", "{plan:#}");
    let prior = &plan["holder"]["prior"];
    assert_eq!(prior["kind"], "unit", "{plan:#}");
    assert_eq!(prior["unit"], unit.as_str(), "{plan:#}");
    assert_eq!(prior["unit_file_state"], "enabled", "{plan:#}");
    assert_eq!(prior["fragment_path"], unit_file.as_str(), "{plan:#}");
    assert_eq!(prior["main"]["pid"], main_pid(h, &unit), "{plan:#}");
    assert_eq!(plan["differences"], serde_json::json!([]), "{plan:#}");
    let baseline = plan["baseline"].to_string();
    assert!(
        plan["baseline"]
            .as_array()
            .is_some_and(|b| b.len() == 2 && b.iter().all(|c| c["passed"] == true)),
        "listening and readiness, measured on the host: {baseline}"
    );

    let adopted = fx.ok(&["adopt", "adsd", "--yes"]);
    let text = both(&adopted);
    assert!(
        text.contains(&format!("`systemctl disable --now {unit}`: inactive")),
        "{text}"
    );
    assert!(
        text.contains("adopted: flotilla (systemd) runs `adsd`"),
        "{text}"
    );
    assert_eq!(
        enabled_active(h, &unit),
        "disabled inactive",
        "the hand unit does not come back: {text}"
    );
    assert_eq!(
        on(h, &format!("systemctl is-active {ours}")),
        "active",
        "{text}"
    );
    let (_, st) = fx.status(&["adsd"]);
    let c = comp(&st, "adsd");
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    assert_eq!(pid_of(c), main_pid(h, ours), "{c:#}");

    let back = fx.ok(&["adopt", "adsd", "--rollback"]);
    let text = both(&back);
    assert!(
        text.contains(&format!("`systemctl enable --now {unit}`")),
        "{text}"
    );
    assert!(text.contains("rolled back: systemd unit"), "{text}");
    assert_eq!(enabled_active(h, &unit), "enabled active", "{text}");
    assert_eq!(
        on(h, &format!("systemctl is-active {ours}; true")),
        "inactive",
        "{text}"
    );
    // The hand unit answers on its port again, on the host.
    let (_, st) = fx.status(&["adsd"]);
    let c = comp(&st, "adsd");
    assert_ne!(
        c["lifecycle"], "running",
        "flotilla's instance is stopped: {c:#}"
    );
    let again = fx.ok(&["adopt", "adsd", "--dry-run", "--json"]).json();
    assert_eq!(
        again["holder"]["prior"]["main"]["pid"],
        main_pid(h, &unit),
        "{again:#}"
    );
}
