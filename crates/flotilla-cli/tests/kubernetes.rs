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
