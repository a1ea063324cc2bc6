//! Container components against a real engine: Podman's Docker-compatible API
//! (Debian's podman with runc), served and given its test image by `scripts/podman`
//! (`eval "$(scripts/podman)"`: `FLOTILLA_TEST_PODMAN_SOCKET`, `FLOTILLA_TEST_IMAGE`,
//! `CONTAINERS_CONF`). Without that socket these tests say loudly that they are
//! skipped, unless `FLOTILLA_REQUIRE_PODMAN` is set (scripts/test sets it): then they
//! fail.
//!
//! Each test has its own project and container names, and removes what it made.

mod common;

use common::{run_with_env, Run, Workspace};
use flotilla_testkit::{free_port, wait_until};
use std::time::Duration;

/// The engine's socket and the test image, or `None` (said loudly) without them.
fn podman() -> Option<(String, String)> {
    match (
        std::env::var("FLOTILLA_TEST_PODMAN_SOCKET"),
        std::env::var("FLOTILLA_TEST_IMAGE"),
    ) {
        (Ok(s), Ok(i)) if !s.is_empty() && !i.is_empty() => Some((s, i)),
        _ if std::env::var_os("FLOTILLA_REQUIRE_PODMAN").is_some() => panic!(
            "FLOTILLA_REQUIRE_PODMAN is set but FLOTILLA_TEST_PODMAN_SOCKET/FLOTILLA_TEST_IMAGE are not: run eval \"$(scripts/podman)\" first"
        ),
        _ => {
            eprintln!(
                "\n!!! SKIPPED: no Podman API (FLOTILLA_TEST_PODMAN_SOCKET unset): the container tests did not run; eval \"$(scripts/podman)\" to run them !!!\n"
            );
            None
        }
    }
}

/// `podman ARGS` (the configuration scripts/podman exported), its stdout.
fn podman_cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("podman")
        .args(args)
        .output()
        .expect("run podman");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

/// A test's own names (`<tag>-<pid>`), its workspace, and the container names it
/// must leave removed.
struct Env {
    ws: Workspace,
    socket: String,
    image: String,
    uniq: String,
    cleanup: Vec<String>,
    /// Processes to kill at the end: those one of whose arguments is one of these.
    markers: Vec<String>,
    /// Image tags to remove at the end (after the containers).
    images: Vec<String>,
}

impl Env {
    fn new(tag: &str) -> Option<Env> {
        let (socket, image) = podman()?;
        Some(Env {
            ws: Workspace::new(),
            socket,
            image,
            uniq: format!("{tag}-{}", std::process::id()),
            cleanup: Vec::new(),
            markers: Vec::new(),
            images: Vec::new(),
        })
    }

    /// The container name of component `c` in this test.
    fn name(&self, c: &str) -> String {
        format!("ft-{}-{c}", self.uniq)
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// [`Env::run`] with more environment variables.
    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut all = vec![("WEB_KEY", "s3cr3t-Value-42")];
        all.extend_from_slice(env);
        run_with_env(self.ws.path(), args, &all)
    }

    /// Runs `flotilla ARGS`, asserting that it fails and says `says` (on stdout or
    /// stderr).
    fn refused(&self, args: &[&str], says: &str) {
        let run = self.run(args);
        assert_ne!(run.code, 0, "{args:?} succeeded:\n{}", run.stdout);
        assert!(
            format!("{}{}", run.stdout, run.stderr).contains(says),
            "{args:?} does not say `{says}`:\n{}\n{}",
            run.stdout,
            run.stderr
        );
    }

    fn status(&self, c: &str) -> serde_json::Value {
        let run = self.run(&["status", "--json", c]);
        run.json()["components"][0].clone()
    }

    /// `inspect` of a container as the engine answers it, `None` when it has none.
    fn inspect(&self, name: &str) -> Option<serde_json::Value> {
        let (ok, out) = podman_cli(&["container", "inspect", name]);
        ok.then(|| {
            serde_json::from_str::<serde_json::Value>(&out).expect("inspect JSON")[0].clone()
        })
    }

    /// A web container component `c` publishing `port` (busybox httpd on 8080).
    fn web(&mut self, c: &str, port: u16, extra: &str) -> String {
        let name = self.name(c);
        self.cleanup.push(name.clone());
        format!(
            "[components.{c}]\nadapter = \"container\"\nendpoints = {{ http = \"http://127.0.0.1:{port}\" }}\nreadiness = {{ http = {{ endpoint = \"http\", path = \"/\" }} }}\nstop = {{ grace_period = \"2s\" }}\n{extra}\n[components.{c}.container]\nimage = \"{}\"\nname = \"{name}\"\nports = [{{ target = 8080, published = {port} }}]\n",
            self.image
        )
    }

    /// This test's project name.
    fn project(&self) -> String {
        self.uniq
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
            .to_lowercase()
    }

    fn inventory(&self, body: &str) {
        self.ws.write(
            "flotilla.toml",
            &format!(
                "project = \"{}\"\n[hosts.local]\ncontainer_api = \"{}\"\n{body}",
                self.project(),
                self.socket
            ),
        );
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for n in &self.cleanup {
            let _ = podman_cli(&["rm", "-f", "-t", "0", n]);
        }
        for i in &self.images {
            let _ = podman_cli(&["rmi", "-f", i]);
        }
        for m in &self.markers {
            for pid in common::pids_with_arg(m) {
                common::kill9(pid);
            }
        }
    }
}

fn get(url: &str) -> Option<String> {
    let out = std::process::Command::new("curl")
        .args(["-sf", "--max-time", "2", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_container_starts_ready_keeps_its_secret_out_of_inspect_logs_with_engine_times_and_stops() {
    let Some(mut e) = Env::new("life") else {
        return;
    };
    let port = free_port();
    let web = e.web(
        "web",
        port,
        "env = { MODE = \"test\", API_KEY = { secret = \"WEB_KEY\" } }",
    );
    e.inventory(&format!("{web}secrets = [\"WEB_KEY\"]\n"));
    let run = e.run(&["start", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let s = e.status("web");
    assert_eq!(s["lifecycle"], "running", "{s:#}");
    assert_eq!(s["health"], "healthy", "{s:#}");
    assert_eq!(s["ownership"], "managed (container)", "{s:#}");
    assert!(get(&format!("http://127.0.0.1:{port}/"))
        .unwrap()
        .contains("hello from flotilla-test"));
    // Labels, and the secret only as a file: never in Env, labels or inspect.
    let info = e.inspect(&e.name("web")).expect("created");
    let text = info.to_string();
    assert!(
        !text.contains("s3cr3t-Value-42"),
        "secret in inspect: {text}"
    );
    assert_eq!(info["Config"]["Labels"]["io.flotilla.component"], "web");
    assert!(info["Config"]["Labels"]["io.flotilla.config-digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert!(info["Config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v == "MODE=test"));
    let (ok, secret) = podman_cli(&["exec", &e.name("web"), "cat", "/run/secrets/WEB_KEY"]);
    assert!(ok && secret == "s3cr3t-Value-42", "{secret}");
    // A variable that takes a secret is in the environment of what runs (the image's
    // own command, exec'd by the wrapper that exported it), and not in inspect.
    let (ok, environ) = podman_cli(&["exec", &e.name("web"), "cat", "/proc/1/environ"]);
    assert!(ok, "{environ}");
    let vars: Vec<&str> = environ.split('\0').collect();
    assert!(vars.contains(&"API_KEY=s3cr3t-Value-42"), "{vars:?}");
    assert!(vars.contains(&"MODE=test"), "{vars:?}");
    let (_, comm) = podman_cli(&["exec", &e.name("web"), "cat", "/proc/1/cmdline"]);
    assert!(
        comm.starts_with("/bin/httpd\0"),
        "the image's command runs: {comm:?}"
    );
    let (_, mode) = podman_cli(&["exec", &e.name("web"), "ls", "-l", "/run/secrets/WEB_KEY"]);
    // Readable by whatever user the image runs as (no `user` declared), like
    // Docker's own secrets; the directory it lives in on the host is private.
    assert!(mode.starts_with("-r--r--r--"), "{mode}");
    // The engine's lines, with its timestamps, through `flotilla logs`.
    get(&format!("http://127.0.0.1:{port}/index.html"));
    let mut logs = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            logs = e.run(&["logs", "-t", "web"]).stdout;
            logs.contains("response:200")
        }),
        "{logs}"
    );
    let line = logs.lines().find(|l| l.contains("response:200")).unwrap();
    assert!(line.starts_with("20") && line.contains('T'), "{line}");
    assert!(!logs.contains("s3cr3t"), "{logs}");
    // Stop: gone from the engine.
    let run = e.run(&["stop", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        format!("{}{}", run.stdout, run.stderr).contains("stopped container"),
        "{}",
        run.stderr
    );
    assert!(e.inspect(&e.name("web")).is_none());
    assert_eq!(e.status("web")["lifecycle"], "stopped");
}

/// A line the container writes as it starts follows the start's marker in
/// `flotilla logs`, though Podman stamps its lines in whole seconds.
#[test]
fn a_line_written_as_the_container_starts_follows_the_start_marker() {
    let Some(mut e) = Env::new("early") else {
        return;
    };
    let port = free_port();
    let web = e.web(
        "web",
        port,
        "command = [\"sh\", \"-c\", \"echo early-line; exec httpd -f -v -p 8080 -h /www\"]",
    );
    e.inventory(&web);
    let run = e.run(&["start", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let mut logs = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            logs = e.run(&["logs", "web"]).stdout;
            logs.contains("early-line")
        }),
        "{logs}"
    );
    let lines: Vec<&str> = logs.lines().collect();
    let marker = lines.iter().position(|l| l.starts_with("--- flotilla"));
    let early = lines.iter().position(|l| l.contains("early-line"));
    assert!(
        marker.is_some() && marker < early,
        "the start's marker comes first:\n{logs}"
    );
}

#[test]
fn a_containers_record_outlives_the_next_command_so_its_identity_and_config_stay_known() {
    let Some(mut e) = Env::new("keep") else {
        return;
    };
    let (p1, p2) = (free_port(), free_port());
    let web = e.web("web", p1, "env = { MODE = \"a\" }");
    let other = e.web("other", p2, "");
    e.inventory(&format!("{web}{other}"));
    assert_eq!(e.run(&["start", "web"]).code, 0);
    // Another command reconciles the journal with what runs: the container's
    // record stays (the engine, not /proc, says whether it runs).
    let run = e.run(&["start", "other"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let s = e.status("web");
    assert_eq!(s["lifecycle"], "running", "{s:#}");
    assert_ne!(s["started_by"], "nobody", "{s:#}");
    assert!(s["runtime_identity"].is_object(), "{s:#}");
    // So a changed config is seen: the plan restarts it.
    e.inventory(&format!(
        "{}{other}",
        web.replace("MODE = \"a\"", "MODE = \"b\"")
    ));
    let plan = e.run(&["plan", "start", "web"]);
    assert!(
        plan.stdout.contains("restart") && plan.stdout.contains("MODE"),
        "{}\n{}",
        plan.stdout,
        plan.stderr
    );
}

#[test]
fn kill_9_is_down_unexpectedly_with_the_exit_code_and_a_restart_is_proven() {
    let Some(mut e) = Env::new("kill") else {
        return;
    };
    let port = free_port();
    let web = e.web("web", port, "");
    e.inventory(&web);
    assert_eq!(e.run(&["start", "web"]).code, 0);
    let before = e.inspect(&e.name("web")).unwrap();
    let pid = before["State"]["Pid"].as_i64().unwrap();
    assert!(pid > 0);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let mut s = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(15), || {
            s = e.status("web");
            s["condition"] == "down-unexpectedly"
        }),
        "{s:#}"
    );
    assert_eq!(s["lifecycle"], "failed");
    assert!(
        s.to_string()
            .contains("exited with code 137 (killed by SIGKILL)"),
        "{s:#}"
    );
    let run = e.run(&["restart", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let after = e.inspect(&e.name("web")).unwrap();
    assert_ne!(after["Id"], before["Id"], "a new container");
    assert_eq!(after["Image"], before["Image"], "the expected image");
    let mut s = e.status("web");
    assert_eq!(
        (s["lifecycle"].as_str(), s["condition"].as_str()),
        (Some("running"), Some("ok")),
        "{s:#}"
    );
    // A restart of a running one is proven too: another container, started later.
    let run = e.run(&["restart", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let again = e.inspect(&e.name("web")).unwrap();
    assert_ne!(again["Id"], after["Id"]);
    e.run(&["stop", "web"]);

    // A container whose main process exits with status 0 is stopped, not failed;
    // still down unexpectedly, since it was meant to run.
    let web = e.web(
        "web",
        port,
        "command = [\"sh\", \"-c\", \"trap 'exit 0' TERM; httpd -f -p 8080 -h /www & wait\"]",
    );
    e.inventory(&web);
    let run = e.run(&["start", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let pid = e.inspect(&e.name("web")).unwrap()["State"]["Pid"]
        .as_i64()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || {
            s = e.status("web");
            s["condition"] == "down-unexpectedly"
        }),
        "{s:#}"
    );
    assert_eq!(s["lifecycle"], "stopped", "{s:#}");
    assert!(s.to_string().contains("exited with code 0"), "{s:#}");
    e.run(&["stop", "web"]);
}

#[test]
fn a_tag_moved_to_another_image_is_stale_runtime_until_a_restart_runs_it() {
    let Some(mut e) = Env::new("stale") else {
        return;
    };
    let tag = format!("localhost/flotilla-test:{}", e.uniq);
    let (ok, _) = podman_cli(&["tag", &e.image, &tag]);
    assert!(ok);
    let port = free_port();
    let web = e.web("web", port, "").replace(
        &format!("image = \"{}\"", e.image),
        &format!("image = \"{tag}\""),
    );
    e.inventory(&web);
    assert_eq!(e.run(&["start", "web"]).code, 0);
    assert_eq!(e.status("web")["condition"], "ok");
    // The tag now names another image (a commit of the running container).
    let (ok, _) = podman_cli(&["commit", "-q", &e.name("web"), &tag]);
    assert!(ok);
    let s = e.status("web");
    assert_eq!(s["condition"], "stale-runtime", "{s:#}");
    assert!(s.to_string().contains("now names"), "{s:#}");
    let run = e.run(&["restart", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(e.status("web")["condition"], "ok");
    e.run(&["stop", "web"]);
    let _ = podman_cli(&["rmi", "-f", &tag]);
}

#[test]
fn a_foreign_container_of_the_same_name_is_never_touched() {
    let Some(mut e) = Env::new("foreign") else {
        return;
    };
    let port = free_port();
    let web = e.web("web", port, "");
    e.inventory(&web);
    let name = e.name("web");
    let (ok, _) = podman_cli(&["run", "-d", "--name", &name, &e.image]);
    assert!(ok);
    let id = e.inspect(&name).unwrap()["Id"].clone();
    let run = e.run(&["start", "web"]);
    assert_ne!(run.code, 0);
    assert!(
        run.stdout.contains("is not this component's")
            || run.stderr.contains("is not this component's"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    let s = e.status("web");
    assert!(
        s.to_string().contains("not adopted, never touched"),
        "{s:#}"
    );
    let run = e.run(&["stop", "web", "--force"]);
    let still = e.inspect(&name).expect("still there");
    assert_eq!(still["Id"], id, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(still["State"]["Status"], "running");
}

/// Two projects with a component of one name: by default each gets its own container
/// (`flotilla-<project>-<component>`), and neither's commands touch the other's. When
/// both declare the same `container.name`, the second is refused, and its stop and
/// status leave the first project's container alone, naming its project.
#[test]
fn another_projects_container_is_never_taken_for_ones_own() {
    let (Some(mut a), Some(mut b)) = (Env::new("proj-a"), Env::new("proj-b")) else {
        return;
    };
    let plain = |e: &Env, port: u16| {
        format!(
            "[components.web]\nadapter = \"container\"\nendpoints = {{ http = \"http://127.0.0.1:{port}\" }}\nreadiness = {{ http = {{ endpoint = \"http\", path = \"/\" }} }}\nstop = {{ grace_period = \"2s\" }}\n[components.web.container]\nimage = \"{}\"\nports = [{{ target = 8080, published = {port} }}]\n",
            e.image
        )
    };
    let (pa, pb) = (free_port(), free_port());
    let (name_a, name_b) = (
        format!("flotilla-{}-web", a.project()),
        format!("flotilla-{}-web", b.project()),
    );
    a.cleanup.push(name_a.clone());
    b.cleanup.push(name_b.clone());
    a.inventory(&plain(&a, pa));
    b.inventory(&plain(&b, pb));
    for e in [&a, &b] {
        let run = e.run(&["start", "web"]);
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    }
    let id_a = a.inspect(&name_a).expect("project a's container")["Id"].clone();
    assert!(b.inspect(&name_b).is_some(), "project b's container");
    let run = b.run(&["stop", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(b.inspect(&name_b).is_none(), "b's container is removed");
    let still = a.inspect(&name_a).expect("a's container is untouched");
    assert_eq!(
        (&still["Id"], &still["State"]["Status"]),
        (&id_a, &"running".into())
    );
    assert_eq!(
        a.status("web")["lifecycle"],
        "running",
        "{:#}",
        a.status("web")
    );

    // One declared name in both: the second project's start is refused, and its
    // stop (it has no record) and status leave the first one's container alone.
    let shared = format!("ft-shared-{}", std::process::id());
    a.cleanup.push(shared.clone());
    let named = |e: &Env, port: u16| plain(e, port) + &format!("name = \"{shared}\"\n");
    let run = a.run(&["stop", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    a.inventory(&named(&a, pa));
    b.inventory(&named(&b, pb));
    let run = a.run(&["start", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let id = a.inspect(&shared).expect("a's named container")["Id"].clone();
    let belongs = format!("it belongs to project `{}`", a.project());
    // What a's container writes never reaches b's log.
    assert!(get(&format!("http://127.0.0.1:{pa}/index.html")).is_some());
    assert!(
        wait_until(Duration::from_secs(10), || a
            .run(&["logs", "web"])
            .stdout
            .contains("response:200")),
        "a's container logged the request"
    );
    // No line a's container wrote reaches b's log, by b's start or b's `logs`.
    let lines = |e: &Env| -> Vec<String> {
        e.run(&["logs", "web"])
            .stdout
            .lines()
            .filter(|l| !l.starts_with("--- flotilla"))
            .map(str::to_string)
            .collect()
    };
    // Foreseen by the plan (its observation names the container's owner), not a
    // start that fails on the spot: refused, nothing run.
    // b's log before: the lines of its own container, stopped above. Comparing it
    // with a's lines would not do: both are the same image's request lines
    // (`<client addr>:<port>: response:200`), and the kernel hands out the same
    // ephemeral ports for connections to different destinations.
    let b_before = lines(&b);
    let plan = b.run(&["plan", "start", "web", "--json"]);
    assert_eq!(plan.code, 1, "{}\n{}", plan.stdout, plan.stderr);
    let refusal = plan.json()["refusal"]["reasons"][0].clone();
    assert_eq!(refusal["kind"], "foreign-owner", "{refusal:#}");
    assert!(refusal.to_string().contains(&belongs), "{refusal:#}");
    b.refused(&["start", "web"], &belongs);
    let (of_a, of_b) = (lines(&a), lines(&b));
    assert!(!of_a.is_empty());
    assert_eq!(
        of_b, b_before,
        "lines reached b's log from a's container (a's: {of_a:#?})"
    );
    let s = b.status("web");
    assert!(s.to_string().contains(&belongs), "{s:#}");
    assert_ne!(s["lifecycle"], "running", "{s:#}");
    let run = b.run(&["stop", "web", "--force"]);
    let still = a.inspect(&shared).expect("still there");
    assert_eq!(still["Id"], id, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(still["State"]["Status"], "running");
    assert_eq!(a.status("web")["lifecycle"], "running");
}

/// `flotilla discover`: a container started by hand with `podman run` is found with
/// its image, name, published port and own command, the port its engine holds on the
/// host is said to be the container's, and the proposal (a `/health` probe: the
/// container serves that file) validates once pasted; a container Flotilla created is
/// left out, saying so.
#[test]
fn a_container_started_by_hand_is_discovered_with_its_image_and_its_proposal_validates() {
    let Some(mut e) = Env::new("discover") else {
        return;
    };
    let (port, ours) = (free_port(), free_port());
    let name = e.name("byhand");
    e.cleanup.push(name.clone());
    let cmd = "echo ok > /www/health; exec httpd -f -p 8080 -h /www";
    let (ok, out) = podman_cli(&[
        "run",
        "-d",
        "--name",
        &name,
        "-p",
        &format!("127.0.0.1:{port}:8080"),
        &e.image,
        "sh",
        "-c",
        cmd,
    ]);
    assert!(ok, "podman run: {out}");
    assert!(
        wait_until(Duration::from_secs(20), || get(&format!(
            "http://127.0.0.1:{port}/health"
        ))
        .is_some()),
        "the container answers /health"
    );
    let web = e.web("web", ours, "");
    e.inventory(&web);
    let run = e.run(&["start", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);

    let (p, o) = (port.to_string(), ours.to_string());
    let run = e.run(&["discover", "--json", "--port", &p, "--port", &o]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    let containers = report["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "containers")
        .expect("containers were looked at");
    assert_eq!(containers["looked"], true, "{report:#}");
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{report:#}");
    let f = &findings[0];
    assert_eq!(f["adapter"], "container", "{f:#}");
    assert_eq!(f["container"]["name"], name.as_str());
    assert_eq!(f["container"]["image"], e.image.as_str());
    let proposal = &f["proposal"];
    assert_eq!(proposal["container"]["image"], e.image.as_str(), "{f:#}");
    assert_eq!(proposal["container"]["name"], name.as_str());
    assert_eq!(
        proposal["container"]["ports"],
        serde_json::json!([{ "target": 8080, "published": port }])
    );
    assert_eq!(
        proposal["command"],
        serde_json::json!(["sh", "-c", cmd]),
        "its own command, not the image's: {f:#}"
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
        skipped.contains(&format!(
            "created by flotilla (project `{}`",
            e.uniq
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
                .to_lowercase()
        )),
        "{skipped}"
    );
    assert!(
        skipped.contains(&format!(
            "holds a port the container engine publishes for container {name}"
        )),
        "the engine's port holder is the container's: {skipped}"
    );

    // Pasted into the inventory, the proposal validates.
    let run = e.run(&["discover", "--port", &p]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let inventory = std::fs::read_to_string(e.ws.path().join("flotilla.toml")).unwrap();
    e.ws.write("flotilla.toml", &format!("{inventory}\n{}", run.stdout));
    let run = e.run(&["validate", "--json"]);
    let v = run.json();
    assert_eq!(v["valid"], true, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(v["summary"]["components"], 2, "{v:#}");
    assert_eq!(e.run(&["stop", "web"]).code, 0);
}

#[test]
fn bad_input_is_refused_clearly_and_leaves_nothing_half_made() {
    let Some(mut e) = Env::new("bad") else { return };
    // An image reference that does not parse: invalid inventory, at its line:column.
    e.inventory(
        "[components.web]\nadapter = \"container\"\ncontainer = { image = \"Web:latest\" }\n",
    );
    let run = e.run(&["validate"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("flotilla.toml:6:"), "{}", run.stderr);
    assert!(run.stderr.contains("uppercase"), "{}", run.stderr);

    // A port another container already publishes: the container this start created
    // is removed again.
    let port = free_port();
    let other = e.name("other");
    e.cleanup.push(other.clone());
    let (ok, _) = podman_cli(&[
        "run",
        "-d",
        "--name",
        &other,
        "-p",
        &format!("127.0.0.1:{port}:8080"),
        &e.image,
    ]);
    assert!(ok);
    // No endpoint names the port, so only the engine finds it taken, at start.
    let name = e.name("web");
    e.cleanup.push(name.clone());
    e.inventory(&format!(
        "[components.web]\nadapter = \"container\"\n[components.web.container]\nimage = \"{}\"\nname = \"{name}\"\nports = [{{ target = 8080, published = {port} }}]\n",
        e.image
    ));
    let run = e.run(&["start", "web"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("start container") && all.contains("was removed"),
        "{all}"
    );
    assert!(
        e.inspect(&e.name("web")).is_none(),
        "created-not-started container left behind"
    );

    // A bind source that does not exist: said, nothing created.
    let port = free_port();
    let web = e.web("web", port, "");
    e.inventory(&format!(
        "{web}volumes = [{{ type = \"bind\", source = \"./nope\", target = \"/data\" }}]\n"
    ));
    e.refused(&["start", "web"], "does not exist");
    assert!(e.inspect(&e.name("web")).is_none());
    e.refused(&["check", "web"], "nope does not exist");

    // An image the engine does not have, with pull = "never" (the default, and
    // written): check says so, and a start creates nothing.
    let web = e.web("web", port, "").replace(
        &format!("image = \"{}\"", e.image),
        "image = \"localhost/flotilla-absent:1\"",
    );
    for policy in ["", "pull = \"never\"\n"] {
        e.inventory(&format!("{web}{policy}"));
        let run = e.run(&["check", "web"]);
        assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
        assert!(
            run.stdout.contains(
                "localhost/flotilla-absent:1 is not in the engine (pull = \"never\"): pull it there, or set container.pull = \"missing\""
            ),
            "{policy}: {}",
            run.stdout
        );
        e.refused(&["start", "web"], "is not in the engine");
        assert!(e.inspect(&e.name("web")).is_none());
    }
    // With pull = "missing", check says a start would pull it (nothing is pulled here).
    e.inventory(&format!("{web}pull = \"missing\"\n"));
    let run = e.run(&["check", "web"]);
    assert!(
        run.stdout.contains(
            "localhost/flotilla-absent:1 is not in the engine yet: a start pulls it (pull = \"missing\")"
        ),
        "{}",
        run.stdout
    );

    // What else check finds before a start: a secret that does not resolve, an
    // endpoint on a port the container does not publish, a published port someone
    // holds, a device and a network that do not exist, and a GPU request Podman
    // would drop (a start is refused for it, and leaves nothing).
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().port();
    let port = free_port();
    let web = e.web("web", port, "").replace(
        &format!("published = {port}"),
        &format!("published = {busy}"),
    );
    let extra = "secrets = [\"ABSENT_KEY\"]\ndevices = [\"/dev/flotilla-none\"]\nnetwork = \"flotilla-no-net\"\ngpus = { count = 1 }\n";
    e.inventory(&format!("{web}{extra}"));
    let run = e.run(&["check", "web"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for says in [
        "ABSENT_KEY",
        "is not one the container publishes",
        &format!("port {busy}"),
        "busy:",
        "/dev/flotilla-none",
        "flotilla-no-net does not exist in the engine",
        "ignores GPU requests",
    ] {
        assert!(run.stdout.contains(says), "{says}: {}", run.stdout);
    }
    drop(held);
    let web = e.web("web", free_port(), "");
    e.inventory(&format!("{web}gpus = {{ count = 1 }}\n"));
    e.refused(&["start", "web"], "dropped the GPU request");
    assert!(e.inspect(&e.name("web")).is_none(), "nothing left behind");

    // A container that exits at once: the failed start shows what it wrote, which
    // only its engine kept.
    let web = e.web(
        "web",
        free_port(),
        "command = [\"sh\", \"-c\", \"echo cannot open /models/absent.gguf >&2; exit 3\"]",
    );
    e.inventory(&web);
    let run = e.run(&["start", "web"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let all = format!("{}{}", run.stdout, run.stderr);
    let tail = all
        .split("last lines of its log:")
        .nth(1)
        .unwrap_or_default();
    assert!(tail.contains("cannot open /models/absent.gguf"), "{all}");
}

#[test]
fn an_engine_that_hangs_or_is_absent_is_an_error_within_the_time_limit() {
    let Some(e) = Env::new("hang") else { return };
    // A socket that accepts and never answers.
    let sock = e.ws.path().join("hang.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    e.ws.write(
        "flotilla.toml",
        &format!(
            "[hosts.local]\ncontainer_api = \"unix://{}\"\n[components.web]\nadapter = \"container\"\ncontainer = {{ image = \"{}\" }}\n",
            sock.display(),
            e.image
        ),
    );
    let env = [("FLOTILLA_CONTAINER_API_TIMEOUT", "1s")];
    let began = std::time::Instant::now();
    let run = run_with_env(e.ws.path(), &["start", "web"], &env);
    assert_ne!(run.code, 0);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(
        all.contains("did not answer") && all.contains("within 1s"),
        "{all}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "{:?}",
        began.elapsed()
    );
    let run = run_with_env(e.ws.path(), &["status", "web"], &env);
    assert!(
        format!("{}{}", run.stdout, run.stderr).contains("did not answer"),
        "{}",
        run.stdout
    );
    // No engine at all.
    e.ws.write(
        "flotilla.toml",
        &format!("[hosts.local]\ncontainer_api = \"unix://{}/none.sock\"\n[components.web]\nadapter = \"container\"\ncontainer = {{ image = \"{}\" }}\n", e.ws.path().display(), e.image),
    );
    let run = e.run(&["check", "web"]);
    assert_ne!(run.code, 0);
    assert!(
        format!("{}{}", run.stdout, run.stderr).contains("cannot be reached"),
        "{}",
        run.stdout
    );
    // A socket file nobody listens on (an engine that stopped): said in those words.
    let dead = e.ws.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    e.ws.write(
        "flotilla.toml",
        &format!("[hosts.local]\ncontainer_api = \"unix://{}\"\n[components.web]\nadapter = \"container\"\ncontainer = {{ image = \"{}\" }}\n", dead.display(), e.image),
    );
    let run = e.run(&["check", "web"]);
    assert_ne!(run.code, 0);
    assert!(
        run.stdout.contains("Connection refused") && run.stdout.contains("nothing listens on it"),
        "{}",
        run.stdout
    );
}

/// Asserts that `text` holds each of `parts`, in this order.
fn in_order(text: &str, parts: &[&str]) {
    let at: Vec<usize> = parts
        .iter()
        .map(|p| {
            text.find(p)
                .unwrap_or_else(|| panic!("no `{p}` in:\n{text}"))
        })
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "not in order {parts:?}:\n{text}"
    );
}

/// The number of the wave (a `wave N` heading of a printed plan) holding the step
/// `start NAME`.
fn wave_of(plan: &str, name: &str) -> Option<usize> {
    let mut wave = None;
    for l in plan.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["wave", n, ..] => wave = n.trim_end_matches(':').parse().ok(),
            ["start", n, ..] if *n == name => return wave,
            _ => {}
        }
    }
    None
}

/// The mixed stack of a homelab: llama-server (a process) and a LiteLLM-like proxy (a
/// container) on the GPU box, reached from here through an SSH tunnel. The GPU box is
/// this machine seen through an sshd of the test's own on 127.0.0.1
/// ([`flotilla_testkit::LoopbackSshd`]), so the tunnel's far end reaches the proxy's
/// port there. The proxy (host network) answers /cgi-bin/route by fetching the
/// process's page: the stack's route readiness goes client → tunnel → container →
/// process. Needs Debian's openssh-server (scripts/testnet installs it).
#[test]
fn a_process_a_container_and_a_tunnel_come_up_in_one_wave_order_with_the_route_ready_end_to_end() {
    let Some(mut e) = Env::new("mixed") else {
        return;
    };
    let sshd = flotilla_testkit::LoopbackSshd::start(&e.ws.path().join("sshd"))
        .unwrap_or_else(|err| panic!("the GPU box's sshd: {err}"));
    let (pport, cport, tport) = (free_port(), free_port(), free_port());
    let site = e.ws.path().join("site");
    e.ws.write("site/index.html", "from the process\n");
    let cgi = e.ws.write(
        "cgi/cgi-bin/route",
        &format!("#!/bin/sh\necho 'Content-Type: text/plain'\necho\nwget -qO- http://127.0.0.1:{pport}/\n"),
    );
    std::fs::set_permissions(&cgi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let name = e.name("proxy");
    e.cleanup.push(name.clone());
    e.markers.push(site.display().to_string());
    e.markers
        .push(format!("127.0.0.1:{tport}:127.0.0.1:{cport}"));
    e.inventory(&format!(
        "{}state_dir = \"{}\"\ncontainer_api = \"{}\"\n\
         [components.llama]\nhost = \"gpu\"\n\
         command = [\"/bin/busybox\", \"httpd\", \"-f\", \"-p\", \"127.0.0.1:{pport}\", \"-h\", \"{}\"]\n\
         endpoints = {{ http = \"http://127.0.0.1:{pport}\" }}\nreadiness = {{ http = {{ endpoint = \"http\" }} }}\n\
         [components.proxy]\nhost = \"gpu\"\nadapter = \"container\"\ndepends_on = [\"llama\"]\n\
         command = [\"/bin/httpd\", \"-f\", \"-p\", \"127.0.0.1:{cport}\", \"-h\", \"/srv\"]\n\
         endpoints = {{ http = \"http://127.0.0.1:{cport}\" }}\nreadiness = {{ http = {{ endpoint = \"http\", path = \"/cgi-bin/route\" }} }}\n\
         stop = {{ grace_period = \"2s\" }}\n\
         [components.proxy.container]\nimage = \"{}\"\nname = \"{name}\"\nnetwork = \"host\"\n\
         volumes = [{{ type = \"bind\", source = \"{}\", target = \"/srv\", read_only = true }}]\n\
         [components.tunnel]\ntemplate = \"ssh-tunnel\"\n\
         params = {{ via = \"gpu\", target = \"proxy.http\", listen_port = {tport} }}\n\
         [stacks.chat]\ncomponents = [\"llama\", \"proxy\", \"tunnel\"]\n\
         readiness = [{{ request = {{ endpoint = \"tunnel.http\", path = \"/cgi-bin/route\", body_contains = \"from the process\" }} }}]\n",
        sshd.inventory_toml("gpu"),
        e.ws.path().join("gpu-state").display(),
        e.socket,
        site.display(),
        e.image,
        e.ws.path().join("cgi").display(),
    ));
    let run = e.run(&["validate"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let run = e.run(&["host", "install", "gpu"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);

    // One plan: the process, then the container that needs it, then the tunnel to it.
    let plan = e.run(&["plan", "up", "chat"]);
    assert_eq!(plan.code, 0, "{}\n{}", plan.stdout, plan.stderr);
    let waves: Vec<Option<usize>> = ["llama", "proxy", "tunnel"]
        .iter()
        .map(|c| wave_of(&plan.stdout, c))
        .collect();
    assert!(
        waves.iter().all(Option::is_some) && waves[0] < waves[1] && waves[1] < waves[2],
        "waves {waves:?}:\n{}",
        plan.stdout
    );
    let run = e.run(&["up", "chat", "--timeout", "30s"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    // Run in that order, each ready before the next, then the route end to end (the
    // progress lines, on stderr).
    in_order(
        &run.stderr,
        &[
            "wave 1: start llama",
            "wave 2: start proxy",
            "wave 3: start tunnel",
            "stack `chat` answers end to end: GET http://127.0.0.1:",
        ],
    );
    let status = e.run(&["status", "--json", "chat"]).json();
    assert_eq!(status["stacks"][0]["health"], "healthy", "{status:#}");
    for c in status["components"].as_array().unwrap() {
        assert_eq!(c["lifecycle"], "running", "{c:#}");
        assert_eq!(c["health"], "healthy", "{c:#}");
    }
    // A client here: through the tunnel, the container, to the process.
    let answer = get(&format!("http://127.0.0.1:{tport}/cgi-bin/route"));
    assert_eq!(answer.as_deref(), Some("from the process\n"));
    let info = e.inspect(&name).expect("the proxy's container");
    assert_eq!(info["State"]["Status"], "running");
    let proxy = status["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "proxy")
        .expect("proxy in status");
    assert_eq!(proxy["host"], "gpu", "{proxy:#}");
    assert_eq!(proxy["ownership"], "managed (container)", "{proxy:#}");
    assert_eq!(
        proxy["runtime_identity"]["measured"]["exe"],
        format!("container:{}", info["Id"].as_str().unwrap()),
        "{proxy:#}"
    );

    let run = e.run(&["down", "chat"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(e.inspect(&name).is_none(), "the container survived `down`");
    assert!(
        wait_until(Duration::from_secs(10), || get(&format!(
            "http://127.0.0.1:{tport}/"
        ))
        .is_none()
            && get(&format!("http://127.0.0.1:{pport}/")).is_none()),
        "the tunnel or the process survived `down`"
    );
    let status = e.run(&["status", "--json", "chat"]).json();
    for c in status["components"].as_array().unwrap() {
        assert_eq!(c["lifecycle"], "stopped", "{c:#}");
    }
}

/// A compose file as AI projects ship them (a proxy that waits for its database's
/// health check), made of the local test image: `import compose` writes an inventory
/// that validates and runs as it is — the database's `CMD-SHELL` check becomes
/// `container_health` readiness (the engine's own check, run through Podman's API
/// here, where no systemd runs Podman's timers), the proxy's `wget` check an `http`
/// probe on its published port, `service_healthy` a dependency on readiness — and
/// `down` removes both containers, named as compose names them.
#[test]
fn an_imported_compose_file_validates_comes_up_in_order_healthy_and_goes_down() {
    let Some(mut e) = Env::new("compose") else {
        return;
    };
    let project = e.uniq.clone();
    let (db, proxy) = (format!("{project}-db-1"), format!("{project}-proxy-1"));
    e.cleanup.extend([db.clone(), proxy.clone()]);
    let (dport, pport) = (free_port().to_string(), free_port().to_string());
    e.ws.write(
        "compose.yaml",
        &format!(
            "name: {project}\n\
             services:\n\
             \x20 db:\n\
             \x20   image: ${{IMAGE}}\n\
             \x20   ports:\n\
             \x20     - \"127.0.0.1:${{DB_PORT}}:8080\"\n\
             \x20   healthcheck:\n\
             \x20     test: [\"CMD-SHELL\", \"test -s /www/index.html && wget -q -O /dev/null http://127.0.0.1:8080/\"]\n\
             \x20     interval: 1s\n\
             \x20     timeout: 2s\n\
             \x20     retries: 3\n\
             \x20   stop_grace_period: 2s\n\
             \x20 proxy:\n\
             \x20   image: ${{IMAGE}}\n\
             \x20   ports:\n\
             \x20     - \"127.0.0.1:${{PROXY_PORT}}:8080\"\n\
             \x20   healthcheck:\n\
             \x20     test: [\"CMD\", \"wget\", \"-q\", \"-O-\", \"http://localhost:8080/\"]\n\
             \x20     interval: 1s\n\
             \x20   depends_on:\n\
             \x20     db:\n\
             \x20       condition: service_healthy\n\
             \x20   stop_grace_period: 2s\n"
        ),
    );
    // The engine: $DOCKER_HOST, as for docker compose (the inventory is left as written).
    let socket = e.socket.clone();
    let image = e.image.clone();
    let env = [
        ("DOCKER_HOST", socket.as_str()),
        ("IMAGE", image.as_str()),
        ("DB_PORT", dport.as_str()),
        ("PROXY_PORT", pport.as_str()),
    ];
    let run = e.run_env(&["import", "compose", "-o", "flotilla.toml"], &env);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let written = std::fs::read_to_string(e.ws.path().join("flotilla.toml")).unwrap();
    for want in [
        "readiness = { container_health = {} }".to_string(),
        "readiness = { http = { endpoint = \"http\" }, period = \"1s\" }".to_string(),
        "depends_on = [\"db\"]".to_string(),
        format!("name = \"{db}\""),
        format!("name = \"{proxy}\""),
    ] {
        assert!(written.contains(&want), "no `{want}` in:\n{written}");
    }
    let run = e.run_env(&["validate"], &env);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains(": valid:"), "{}", run.stdout);

    let run = e.run_env(&["up", &project, "--timeout", "30s"], &env);
    assert_eq!(run.code, 0, "{}\n{}\n{written}", run.stdout, run.stderr);
    in_order(
        &run.stderr,
        &[
            "wave 1: start db",
            "ready: engine reports healthy (last check: exit 0",
            "wave 2: start proxy",
            &format!("ready: GET http://127.0.0.1:{pport}/ → 200 OK"),
        ],
    );
    // The engine holds the check's result, as its own timer's run would have left it.
    let info = e.inspect(&db).expect("the db container");
    assert_eq!(info["State"]["Health"]["Status"], "healthy", "{info:#}");
    let status = e.run_env(&["status", "--json"], &env).json();
    for c in status["components"].as_array().unwrap() {
        assert_eq!(c["lifecycle"], "running", "{c:#}");
        assert_eq!(c["health"], "healthy", "{c:#}");
        assert_eq!(c["ownership"], "managed (container)", "{c:#}");
    }
    let db_status = &status["components"][0];
    assert_eq!(db_status["name"], "db");
    assert!(
        db_status
            .to_string()
            .contains("container.healthcheck reports healthy"),
        "{db_status:#}"
    );
    assert!(get(&format!("http://127.0.0.1:{pport}/"))
        .unwrap()
        .contains("hello from flotilla-test"));

    let run = e.run_env(&["down", &project], &env);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(e.inspect(&db).is_none(), "{db} survived `down`");
    assert!(e.inspect(&proxy).is_none(), "{proxy} survived `down`");
}

/// An image's own `HEALTHCHECK` (an image built here `FROM` the test image, nothing
/// pulled): the engine runs it (through Podman's API here, where no systemd runs
/// Podman's timers), `container_health` readiness waits for it, and `status` shows
/// what the engine reports as evidence — healthy, unhealthy once the check fails in
/// the container, healthy again once it passes.
#[test]
fn the_images_own_healthcheck_is_shown_healthy_then_unhealthy_as_the_engine_reports_it() {
    let Some(mut e) = Env::new("imagehc") else {
        return;
    };
    let tag = format!("localhost/flotilla-test:{}", e.uniq);
    e.images.push(tag.clone());
    let dir = e.ws.path().join("image");
    e.ws.write(
        "image/Containerfile",
        &format!(
            "FROM {}\nHEALTHCHECK --interval=1s --timeout=2s --retries=1 CMD [\"/bin/sh\", \"-c\", \"test ! -e /tmp/sick && echo fine\"]\n",
            e.image
        ),
    );
    let (ok, out) = podman_cli(&[
        "build",
        "-q",
        "--pull=never",
        "--format",
        "docker",
        "-t",
        &tag,
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "podman build: {out}");
    let port = free_port();
    let web = e
        .web("web", port, "")
        .replace(
            &format!("image = \"{}\"", e.image),
            &format!("image = \"{tag}\""),
        )
        .replace(
            "readiness = { http = { endpoint = \"http\", path = \"/\" } }",
            "readiness = { container_health = {}, period = \"200ms\" }",
        );
    assert!(web.contains("container_health"), "{web}");
    e.inventory(&web);
    let run = e.run(&["start", "web", "--timeout", "30s"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("ready: engine reports healthy (last check: exit 0, \"fine\")"),
        "{}",
        run.stderr
    );
    let engine_health = |s: &serde_json::Value| -> String {
        s["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["source"] == "engine health check")
            .map(|v| v["saw"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let s = e.status("web");
    assert_eq!(s["health"], "healthy", "{s:#}");
    assert!(
        engine_health(&s)
            .starts_with("the image's HEALTHCHECK reports healthy (last check: exit 0, \"fine\")"),
        "{s:#}"
    );

    // The check fails in the container: the engine says unhealthy, and so does status.
    let (ok, out) = podman_cli(&["exec", &e.name("web"), "sh", "-c", "echo > /tmp/sick"]);
    assert!(ok, "{out}");
    let mut s = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(15), || {
            s = e.status("web");
            engine_health(&s)
                .starts_with("the image's HEALTHCHECK reports unhealthy (last check: exit 1")
        }),
        "{s:#}"
    );
    assert_eq!(s["health"], "unhealthy", "{s:#}");
    assert_eq!(s["lifecycle"], "running", "{s:#}");
    let info = e.inspect(&e.name("web")).unwrap();
    assert_eq!(info["State"]["Health"]["Status"], "unhealthy", "{info:#}");

    // It passes again: healthy again.
    let (ok, out) = podman_cli(&["exec", &e.name("web"), "sh", "-c", "rm /tmp/sick"]);
    assert!(ok, "{out}");
    assert!(
        wait_until(Duration::from_secs(15), || {
            s = e.status("web");
            s["health"] == "healthy" && engine_health(&s).contains("reports healthy")
        }),
        "{s:#}"
    );
    let run = e.run(&["stop", "web"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
}

/// llama-server's template in a container, whose own `container` table names no
/// image: the template's (llama.cpp's published server image) is the one asked of the
/// engine, which does not have it here (nothing is pulled): `check` says so by name,
/// and `start` creates nothing.
#[test]
fn a_templates_image_applies_under_a_container_table_that_names_none() {
    let Some(mut e) = Env::new("tplimage") else {
        return;
    };
    e.ws.write("models/smollm2.gguf", "not a model\n");
    let name = e.name("llm");
    e.cleanup.push(name.clone());
    let port = free_port();
    e.inventory(&format!(
        "[components.llm]\ntemplate = \"llama-server\"\nadapter = \"container\"\n\
         params = {{ model = \"models/smollm2.gguf\", port = {port} }}\n\
         [components.llm.container]\nname = \"{name}\"\n"
    ));
    let run = e.run(&["validate"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    e.refused(
        &["check", "llm"],
        "ghcr.io/ggml-org/llama.cpp:server is not in the engine (pull = \"never\")",
    );
    e.refused(
        &["start", "llm"],
        "image ghcr.io/ggml-org/llama.cpp:server is not in the engine",
    );
    assert!(e.inspect(&name).is_none());
}

/// Whether container `name` runs, as `inspect` says (`None`: it does not exist).
fn running(e: &Env, name: &str) -> Option<bool> {
    e.inspect(name)
        .map(|i| i["State"]["Running"].as_bool().unwrap_or(false))
}

/// `flotilla adopt` of a container not created by Flotilla (`podman run -d -p` by
/// hand) by a container component publishing the same port: found through the
/// engine's port map, refused while its image or its command differs from the
/// declared one (nothing changed), then stopped with the engine and kept (not removed) while
/// Flotilla's own container takes the port, accepted by its readiness; `--rollback`
/// stops Flotilla's container and starts the very same container again (same id),
/// proven by its answer on the port.
#[test]
fn a_container_started_by_hand_is_adopted_and_rolled_back_to_the_same_container() {
    let Some(mut e) = Env::new("adopt") else {
        return;
    };
    let port = free_port();
    let hand = e.name("byhand");
    e.cleanup.push(hand.clone());
    let (ok, id) = podman_cli(&[
        "run",
        "-d",
        "--name",
        &hand,
        "-p",
        &format!("127.0.0.1:{port}:8080"),
        &e.image,
    ]);
    assert!(ok, "podman run: {id}");
    let url = format!("http://127.0.0.1:{port}/");
    assert!(
        wait_until(Duration::from_secs(20), || get(&url).is_some()),
        "the container answers"
    );

    // Another image declared: refused with the difference, nothing changed.
    let other = e.web("web", port, "").replace(
        &format!("image = \"{}\"", e.image),
        "image = \"localhost/flotilla-test:other\"",
    );
    e.inventory(&other);
    let run = e.run(&["adopt", "web", "--yes"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "image: declared localhost/flotilla-test:other, it runs {}",
            e.image
        )),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(run.stderr.contains("nothing was changed"), "{}", run.stderr);
    assert_eq!(running(&e, &hand), Some(true));
    // A command of its own declared, where the image's runs: refused too.
    let own = e.web(
        "web",
        port,
        "command = [\"httpd\", \"-f\", \"-p\", \"8080\"]",
    );
    e.inventory(&own);
    let run = e.run(&["adopt", "web", "--yes"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("command: declared `httpd -f -p 8080`, it runs the image's"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(running(&e, &hand), Some(true));

    let web = e.web("web", port, "");
    e.inventory(&web);
    let plan = e.run(&["adopt", "web", "--dry-run", "--json"]).json();
    let prior = &plan["holder"]["prior"];
    assert_eq!(prior["kind"], "container", "{plan:#}");
    assert_eq!(prior["name"], hand.as_str(), "{plan:#}");
    assert_eq!(prior["image"], e.image.as_str(), "{plan:#}");
    assert!(id.starts_with(prior["id"].as_str().unwrap()), "{plan:#}");
    assert_eq!(plan["differences"], serde_json::json!([]), "{plan:#}");
    assert_eq!(
        plan["holder"]["listening"],
        serde_json::json!([format!("127.0.0.1:{port}")]),
        "{plan:#}"
    );

    let run = e.run(&["adopt", "web", "--yes"]);
    let text = format!("{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, 0, "{text}");
    assert!(
        text.contains(&format!("stopped container {hand}")),
        "{text}"
    );
    assert_eq!(running(&e, &hand), Some(false), "kept, stopped: {text}");
    assert_eq!(running(&e, &e.name("web")), Some(true), "{text}");
    let s = e.status("web");
    assert_eq!(s["lifecycle"], "running", "{s:#}");
    assert_eq!(s["ownership"], "managed (container)", "{s:#}");
    assert!(get(&url).is_some(), "flotilla's container answers");

    let run = e.run(&["adopt", "web", "--rollback"]);
    let text = format!("{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, 0, "{text}");
    assert!(
        text.contains(&format!("started container {hand}")),
        "{text}"
    );
    assert!(text.contains("rolled back: container"), "{text}");
    assert_eq!(running(&e, &hand), Some(true), "{text}");
    let info = e.inspect(&hand).expect("the same container");
    assert_eq!(
        info["Id"].as_str(),
        Some(id.as_str()),
        "the very same container"
    );
    assert_ne!(
        running(&e, &e.name("web")),
        Some(true),
        "flotilla's container is stopped: {text}"
    );
    assert!(get(&url).is_some(), "the hand container answers again");

    // Declared with the hand container's own name (as `discover` proposes it): the
    // prior is kept under another name while flotilla's container takes its name,
    // and a rollback gives it back.
    let same = e.web("web", port, "").replace(
        &format!("name = \"{}\"", e.name("web")),
        &format!("name = \"{hand}\""),
    );
    e.inventory(&same);
    let kept = format!("{hand}-before-flotilla");
    e.cleanup.push(kept.clone());
    let plan = e.run(&["adopt", "web", "--dry-run"]);
    assert!(
        plan.stdout
            .contains(&format!("kept, not removed, as {kept}"))
            && plan.stdout.contains(&format!("container {hand} (")),
        "the plan says so, and names the container behind the port forwarder:\n{}",
        plan.stdout
    );
    let run = e.run(&["adopt", "web", "--yes"]);
    let text = format!("{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, 0, "{text}");
    let theirs = e.inspect(&kept).expect("the prior container, kept");
    assert_eq!(theirs["Id"].as_str(), Some(id.as_str()), "{text}");
    let ours = e.inspect(&hand).expect("flotilla's container has the name");
    assert_ne!(ours["Id"].as_str(), Some(id.as_str()), "{text}");
    assert_eq!(e.status("web")["ownership"], "managed (container)");
    let run = e.run(&["adopt", "web", "--rollback"]);
    let text = format!("{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, 0, "{text}");
    let back = e.inspect(&hand).expect("its name back");
    assert_eq!(back["Id"].as_str(), Some(id.as_str()), "{text}");
    assert!(e.inspect(&kept).is_none(), "{text}");
    assert_eq!(running(&e, &hand), Some(true), "{text}");
}
