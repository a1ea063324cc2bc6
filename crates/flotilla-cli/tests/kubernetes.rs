//! Components on a Kubernetes cluster through the whole binary: `up`, `status`,
//! `restart`, `down` and their errors, against the testkit's fake API server on
//! loopback (it copies the real server's apply, watches and a kubelet's pod status;
//! see `flotilla_testkit::kube_api`). No real cluster runs here.

mod common;

use common::Workspace;
use flotilla_testkit::kube_api::{FakeKube, Misbehaviour};

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/inference/deployments";

fn setup(components: &str) -> (FakeKube, Workspace) {
    let fake = FakeKube::start();
    fake.create_namespace("inference");
    let ws = Workspace::new();
    fake.write_kubeconfig(&ws.path().join("kubeconfig"), "lab", None)
        .unwrap();
    ws.write(
        "flotilla.toml",
        &format!(
            "project = \"lab\"\n[hosts.gpu]\ntransport = \"kubernetes\"\nkubeconfig = \"{}\"\ncontext = \"lab\"\nnamespace = \"inference\"\n{components}",
            ws.path().join("kubeconfig").display()
        ),
    );
    (fake, ws)
}

const STACK: &str = "[components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\ncommand = [\"--port\", \"8080\"]\n\
    [components.llm.kubernetes]\nimage = \"ghcr.io/ggml-org/llama.cpp:server\"\nreplicas = 2\ngpus = 1\n\
    ports = [{ name = \"http\", container_port = 8080 }]\n\
    [components.ui]\nhost = \"gpu\"\nadapter = \"kubernetes\"\ndepends_on = [\"llm\"]\n\
    kubernetes = { image = \"ghcr.io/open-webui/open-webui:main\", ports = [{ container_port = 8080, service_port = 80 }] }\n\
    [stacks.chat]\ncomponents = [\"llm\", \"ui\"]\n";

fn component<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {status:#}"))
}

#[test]
fn up_status_restart_and_down_of_a_stack_on_a_cluster() {
    let (fake, ws) = setup(STACK);
    let up = ws.run(&["up", "chat"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    let d = fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "1"
    );

    let st = ws.run(&["status", "--json"]);
    assert_eq!(st.code, 0, "{}\n{}", st.stdout, st.stderr);
    let s = st.json();
    let llm = component(&s, "llm");
    assert_eq!(llm["lifecycle"], "running", "{llm:#}");
    let text = llm.to_string();
    assert!(text.contains("2 of 2 pods ready"), "{text}");
    assert!(
        text.contains("kubernetes://inference/deployment/llm#"),
        "{text}"
    );
    assert_eq!(component(&s, "ui")["lifecycle"], "running");

    let before = fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    let r = ws.run(&["restart", "llm"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let after = fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_ne!(
        before["spec"]["template"]["metadata"]["annotations"],
        after["spec"]["template"]["metadata"]["annotations"],
        "a rollout restart"
    );

    let down = ws.run(&["down", "chat"]);
    assert_eq!(down.code, 0, "{}\n{}", down.stdout, down.stderr);
    let s = ws.run(&["status", "--json"]).json();
    assert_eq!(component(&s, "llm")["lifecycle"], "stopped");
    assert_eq!(
        fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap()["spec"]["replicas"],
        0
    );
}

#[test]
fn a_crash_looping_component_fails_up_and_status_says_why() {
    let (fake, ws) = setup(STACK);
    fake.pods_misbehave(
        "inference",
        "llm",
        Misbehaviour::CrashLoop {
            reason: "OOMKilled".into(),
            exit_code: 137,
        },
    );
    let up = ws.run(&["up", "chat"]);
    assert_ne!(up.code, 0);
    let all = format!("{}{}", up.stdout, up.stderr);
    assert!(all.contains("CrashLoopBackOff"), "{all}");
    assert!(all.contains("OOMKilled"), "{all}");
    assert!(
        fake.object(&format!("{DEPLOYMENTS}/ui")).is_none(),
        "its dependent is not started"
    );
    let s = ws.run(&["status", "--json"]).json();
    let llm = component(&s, "llm");
    // Nothing of a start that failed is left running, and status says why.
    assert_eq!(llm["lifecycle"], "stopped", "{llm:#}");
    assert_eq!(llm["condition"], "attention", "{llm:#}");
    let text = llm.to_string();
    assert!(text.contains("OOMKilled"), "{llm:#}");
    assert!(
        text.contains("scaled Deployment inference/llm back to 0"),
        "{llm:#}"
    );
    assert_eq!(
        fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap()["spec"]["replicas"],
        0
    );
}

#[test]
fn an_unknown_context_is_a_clear_error_naming_the_kubeconfig() {
    let (_fake, ws) = setup(STACK);
    let inv = std::fs::read_to_string(ws.path().join("flotilla.toml")).unwrap();
    ws.write(
        "flotilla.toml",
        &inv.replace("context = \"lab\"", "context = \"prod\""),
    );
    let st = ws.run(&["up", "chat"]);
    assert_ne!(st.code, 0);
    let all = format!("{}{}", st.stdout, st.stderr);
    assert!(all.contains("has no context `prod` (it has: lab)"), "{all}");
}

#[test]
fn check_asks_the_cluster_and_dry_runs_every_apply() {
    let (fake, ws) = setup(STACK);
    let ok = ws.run(&["check", "chat"]);
    assert_eq!(ok.code, 0, "{}\n{}", ok.stdout, ok.stderr);
    assert!(
        ok.stdout.contains("llm: apply (dry run)  yes"),
        "{}",
        ok.stdout
    );
    assert!(ok.stdout.contains("the API server at"), "{}", ok.stdout);
    // It says how far this was tested: never on a real cluster; so does status -v.
    assert!(ok.stdout.contains("never a real cluster"), "{}", ok.stdout);
    let st = ws.run(&["-v", "status", "chat"]);
    assert!(
        st.stdout
            .contains("note: llm, ui (kubernetes): Flotilla's CI runs this adapter against an in-memory API server and kmock, never a real cluster"),
        "{}",
        st.stdout
    );
    assert!(
        !ok.stdout.contains("program"),
        "nothing of a pod runs here: {}",
        ok.stdout
    );
    assert!(
        fake.object(&format!("{DEPLOYMENTS}/llm")).is_none(),
        "check applies nothing"
    );
    // A user who may not patch Deployments: check says so, and which verb.
    fake.fault(flotilla_testkit::kube_api::Fault::new(
        Some("PATCH"),
        "/deployments/ui",
        403,
        "Forbidden",
        "deployments.apps \"ui\" is forbidden: User \"dev\" cannot patch resource \"deployments\"",
    ));
    let bad = ws.run(&["check", "chat"]);
    assert_eq!(bad.code, 1, "{}\n{}", bad.stdout, bad.stderr);
    let line = bad
        .stdout
        .lines()
        .find(|l| l.starts_with("ui: apply (dry run)"))
        .unwrap_or_default();
    assert!(line.contains(" NO "), "{}", bad.stdout);
    assert!(
        bad.stdout.contains("cannot patch resource"),
        "{}",
        bad.stdout
    );
}

#[test]
fn a_changed_image_is_rolled_out_by_up_and_drift_shows_until_then() {
    let (fake, ws) = setup(STACK);
    let up = ws.run(&["up", "chat"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    let inv = std::fs::read_to_string(ws.path().join("flotilla.toml")).unwrap();
    ws.write(
        "flotilla.toml",
        &inv.replace("llama.cpp:server\"", "llama.cpp:server-b6000\""),
    );
    let s = ws.run(&["status", "--json"]).json();
    assert_eq!(
        component(&s, "llm")["condition"],
        "drift",
        "{:#}",
        component(&s, "llm")
    );
    let plan = ws.run(&["plan", "up", "chat"]);
    assert!(plan.stdout.contains("restart  llm"), "{}", plan.stdout);
    let up = ws.run(&["up", "chat"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    let d = fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/ggml-org/llama.cpp:server-b6000"
    );
    let s = ws.run(&["status", "--json"]).json();
    assert_eq!(
        component(&s, "llm")["condition"],
        "ok",
        "{:#}",
        component(&s, "llm")
    );
}

#[test]
fn a_relative_kubeconfig_is_found_beside_the_inventory_wherever_flotilla_runs() {
    let (fake, ws) = setup(STACK);
    let inv = std::fs::read_to_string(ws.path().join("flotilla.toml")).unwrap();
    let abs = format!(
        "kubeconfig = \"{}\"",
        ws.path().join("kubeconfig").display()
    );
    ws.write(
        "flotilla.toml",
        &inv.replace(&abs, "kubeconfig = \"kubeconfig\""),
    );
    // Run from another directory, naming the inventory.
    let elsewhere = tempfile::tempdir().unwrap();
    let file = ws.path().join("flotilla.toml");
    let ok = common::run_in(
        elsewhere.path(),
        &["-f", file.to_str().unwrap(), "check", "chat"],
    );
    assert_eq!(ok.code, 0, "{}\n{}", ok.stdout, ok.stderr);
    assert!(ok.stdout.contains(&fake.url()), "{}", ok.stdout);
}

#[test]
fn a_kubeconfig_that_is_not_there_is_named_once_with_the_file_systems_words() {
    let (_fake, ws) = setup(STACK);
    let inv = std::fs::read_to_string(ws.path().join("flotilla.toml")).unwrap();
    let abs = format!(
        "kubeconfig = \"{}\"",
        ws.path().join("kubeconfig").display()
    );
    ws.write("flotilla.toml", &inv.replace(&abs, "kubeconfig = \"nope\""));
    let st = ws.run(&["check", "chat"]);
    assert_ne!(st.code, 0);
    let all = format!("{}{}", st.stdout, st.stderr);
    let missing = ws.path().join("nope").display().to_string();
    assert!(
        all.contains(&format!("kubeconfig {missing}: No such file or directory")),
        "{all}"
    );
    assert!(!all.contains("'\""), "{all}");
}

/// The names of `component`'s pods (of project `lab`) in `inference`.
fn pod_names(fake: &FakeKube, component: &str) -> Vec<String> {
    fake.pods(
        "inference",
        &format!("io.flotilla.project=lab,io.flotilla.component={component}"),
    )
    .iter()
    .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
    .collect()
}

#[test]
fn logs_copies_each_pods_lines_once_in_the_order_written_and_follows_new_ones() {
    let (fake, ws) = setup(STACK);
    let up = ws.run(&["up", "chat"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    let pods = pod_names(&fake, "llm");
    assert_eq!(pods.len(), 2, "{pods:?}");
    let (a, b) = (&pods[0], &pods[1]);
    // Each line in a later millisecond than the one before (`--since` below).
    let write = |pod: &str, text: &str| {
        let before = std::time::SystemTime::now();
        fake.write_pod_log("inference", pod, None, text).unwrap();
        let later = before + std::time::Duration::from_millis(2);
        assert!(flotilla_testkit::wait_until(
            std::time::Duration::from_secs(5),
            || std::time::SystemTime::now() > later
        ));
    };
    write(a, "loading model");
    write(b, "loading model");
    write(a, "listening on :8080");

    let shown = |args: &[&str]| {
        let r = ws.run(args);
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
        // One component: its lines without a name prefix.
        r.stdout
            .lines()
            .filter(|l| l.contains("[pod/"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let want = vec![
        format!("[pod/{a}] loading model"),
        format!("[pod/{b}] loading model"),
        format!("[pod/{a}] listening on :8080"),
    ];
    assert_eq!(shown(&["logs", "llm"]), want);
    // Read again: nothing copied twice.
    assert_eq!(shown(&["logs", "llm"]), want);
    // The pods' own times: what was written before a time is left out after it.
    let stamped = shown(&["logs", "llm", "-t"]);
    let second = stamped[1].split_whitespace().next().unwrap().to_string();
    assert!(second.ends_with('Z'), "{stamped:?}");
    write(b, "ready");
    assert_eq!(
        shown(&["logs", "llm", "--since", &second]),
        [
            format!("[pod/{b}] loading model"),
            format!("[pod/{a}] listening on :8080"),
            format!("[pod/{b}] ready"),
        ]
    );

    // Followed: a line a pod writes later is shown.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["logs", "llm", "-f", "-n", "1"])
        .current_dir(ws.path())
        .env("FLOTILLA_STATE_DIR", ws.path().join(".flotilla-state"))
        .env("NO_COLOR", "1")
        .env_remove("FLOTILLA_FILE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rx = common::lines_of(child.stdout.take().unwrap());
    let line = format!("[pod/{a}] request 1 done");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = Vec::new();
    // Copied by the follower's first read (then its last line) or by a later one.
    fake.write_pod_log("inference", a, None, "request 1 done")
        .unwrap();
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) if l == line => break,
            Ok(l) => seen.push(l),
            Err(_) => panic!("not followed: {line:?}; seen {seen:?}"),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let ready = format!("[pod/{b}] ready");
    assert!(
        seen.iter().all(|l| *l == ready),
        "only the last line, then new ones: {seen:?}"
    );
}

#[test]
fn logs_of_an_unreachable_cluster_warn_and_show_the_markers() {
    let (fake, ws) = setup(STACK);
    // Never started: no pods, nothing to copy, no warning.
    let none = ws.run(&["logs", "llm"]);
    assert_eq!(none.code, 0, "{}\n{}", none.stdout, none.stderr);
    assert!(
        none.stderr.contains("no log yet for `llm`"),
        "{}",
        none.stderr
    );
    assert!(!none.stderr.contains("warning"), "{}", none.stderr);
    let up = ws.run(&["start", "llm"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    drop(fake);
    let r = common::run_with_env(
        ws.path(),
        &["logs", "llm"],
        &[("FLOTILLA_KUBERNETES_API_TIMEOUT", "3s")],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("warning: `llm`: "), "{}", r.stderr);
    assert!(r.stderr.contains("pods of inference/llm"), "{}", r.stderr);
    assert!(r.stdout.contains("--- flotilla "), "{}", r.stdout);
}

#[test]
fn down_and_restart_refuse_while_the_cluster_cannot_say_what_runs() {
    let (fake, ws) = setup(STACK);
    let up = ws.run(&["up", "chat"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    // Every read of the namespace fails: what runs is not known.
    fake.fault(flotilla_testkit::kube_api::Fault::new(
        Some("GET"),
        "/namespaces/inference",
        503,
        "ServiceUnavailable",
        "etcd is down",
    ));
    let env = [("FLOTILLA_KUBERNETES_API_TIMEOUT", "2s")];
    for args in [&["down", "chat"][..], &["stop", "ui"], &["restart", "llm"]] {
        let r = common::run_with_env(ws.path(), args, &env);
        assert_eq!(r.code, 1, "{args:?}: {}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("its owner cannot be asked"),
            "{args:?}: {}",
            r.stderr
        );
    }
    fake.clear_faults();
    // Nothing was recorded stopped and nothing was scaled down.
    assert_eq!(
        fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap()["spec"]["replicas"],
        2
    );
    let s = ws.run(&["status", "--json"]);
    assert_eq!(s.code, 0, "{}\n{}", s.stdout, s.stderr);
    assert_eq!(component(&s.json(), "llm")["desired"], "running");
}

#[test]
fn kubeconfig_files_listed_in_kubeconfig_are_merged_and_missing_ones_passed_over() {
    let fake = FakeKube::start();
    fake.create_namespace("inference");
    let ws = Workspace::new();
    // `prod` in one file, `lab` (the fake) in another: kubectl's merge finds both.
    let other = FakeKube::start();
    other
        .write_kubeconfig(&ws.path().join("prod.yaml"), "prod", None)
        .unwrap();
    fake.write_kubeconfig(&ws.path().join("lab.yaml"), "lab", None)
        .unwrap();
    ws.write(
        "flotilla.toml",
        &format!("project = \"lab\"\n[hosts.gpu]\ntransport = \"kubernetes\"\ncontext = \"lab\"\nnamespace = \"inference\"\n{STACK}"),
    );
    let list = ["gone.yaml", "prod.yaml", "lab.yaml"]
        .map(|f| ws.path().join(f).display().to_string())
        .join(":");
    let up = common::run_with_env(ws.path(), &["up", "chat"], &[("KUBECONFIG", &list)]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    assert!(fake.object(&format!("{DEPLOYMENTS}/llm")).is_some());
    assert!(other.object(&format!("{DEPLOYMENTS}/llm")).is_none());
    // None of them there: said once, naming the list.
    let none = common::run_with_env(
        ws.path(),
        &["status"],
        &[("KUBECONFIG", "/nonexistent/a:/nonexistent/b")],
    );
    assert_ne!(none.code, 0);
    assert!(
        none.stderr.contains("/nonexistent/a:/nonexistent/b")
            || none.stdout.contains("/nonexistent/a:/nonexistent/b"),
        "{}\n{}",
        none.stdout,
        none.stderr
    );
}

#[test]
fn an_image_changed_by_another_field_manager_is_stale_runtime_and_restart_names_the_conflict() {
    let (fake, ws) = setup(STACK);
    let up = ws.run(&["up", "chat"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    // Someone takes the image over (kubectl apply --server-side --force-conflicts).
    fake.force_apply_as(
        "kubectl",
        &format!("{DEPLOYMENTS}/ui"),
        &serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "ui", "namespace": "inference"},
            "spec": {"template": {"spec": {"containers": [{"name": "ui", "image": "attacker/nginx:evil"}]}}},
        }),
    )
    .unwrap();
    let st = ws.run(&["status", "--json"]);
    assert_eq!(st.code, 1, "{}\n{}", st.stdout, st.stderr);
    let s = st.json();
    let ui = component(&s, "ui");
    assert_eq!(ui["condition"], "stale-runtime", "{ui:#}");
    let text = ui["evidence"].to_string();
    assert!(
        text.contains("runs image attacker/nginx:evil, not ghcr.io/open-webui/open-webui:main")
            && text.contains("kubectl"),
        "{text}"
    );
    // restart applies the inventory's, and the other manager's field is a conflict,
    // reported, not forced.
    let r = ws.run(&["restart", "ui"]);
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(
        said.contains("kubectl") && said.contains("force_conflicts"),
        "{said}"
    );
}
