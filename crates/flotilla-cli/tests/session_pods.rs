//! Sessions on Kubernetes (`[runtime] kind = "kubernetes"`): a real `flotilla serve`
//! whose runtimes are Pods on `flotilla-testkit`'s API server, whose process kubelet
//! runs each pod's containers for real (bubblewrap, this host's file system as the
//! image, the claim and the Secret mounted where the pod says, as the session's
//! uid). The agent is real Claude Code against the scripted Anthropic stub; its
//! tool calls reach the gate from inside the pod with the credential the Secret
//! carried; the tree is made by the init container from the authority's bundle.

mod common;

use common::sessions::{claude, git, SessionsAuthority};
use flotilla_testkit::anthropic_stub::{tool_results, AnthropicStub, Reply, Script};
use flotilla_testkit::kube_api::FakeKube;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A FIFO the agent reads (blocking until the test writes it), visible in the pods
/// (the process kubelet shows this host's files outside `/tmp` read-only).
const HOLD: &str = "/var/tmp/flotilla-session-pods-hold/fifo";

/// "look" → a Bash call reading the tree's history; "hold" → one reading [`HOLD`];
/// "wait" → one that never ends; a tool's result → "Done.".
fn stub() -> AnthropicStub {
    AnthropicStub::start(
        Script::new(Reply::text("Nothing to do."))
            .when_tool_result("", Reply::text("Done."))
            .when_text(
                "hold",
                Reply::tool_use_with_id(
                    "toolu_hold",
                    "Bash",
                    serde_json::json!({"command": format!("cat {HOLD} # flotilla-pod-hold"), "description": "Wait for the test"}),
                ),
            )
            .when_text(
                "ask the executor",
                Reply::tool_use_with_id(
                    "toolu_exec",
                    "Bash",
                    serde_json::json!({"command": "flotilla exec -- systemctl status", "description": "Read through the executor"}),
                ),
            )
            .when_text(
                "wait",
                Reply::tool_use_with_id(
                    "toolu_sleep",
                    "Bash",
                    serde_json::json!({"command": "tail -f /dev/null # flotilla-pod-test", "description": "Wait"}),
                ),
            )
            .when_text(
                "look",
                Reply::tool_use_with_id(
                    "toolu_log",
                    "Bash",
                    serde_json::json!({"command": "git log --format=%s", "description": "History"}),
                ),
            ),
    )
    .expect("start the Anthropic stub")
}

struct Cluster {
    kube: FakeKube,
    data: tempfile::TempDir,
    s: SessionsAuthority,
}

/// An authority whose sessions run as pods on a fake cluster; `more` is added to
/// `[runtime.kubernetes]`.
fn cluster(stub: &AnthropicStub, more: &str) -> Cluster {
    let kube = FakeKube::start();
    let data = tempfile::tempdir().unwrap();
    kube.run_pods(data.path())
        .expect("the process kubelet (bwrap)");
    let kc = tempfile::tempdir().unwrap().keep();
    let kubeconfig = kc.join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig, "fake", None).unwrap();
    let base = stub.base_url();
    let s = SessionsAuthority::new(
        &claude(),
        &[
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-stub"),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
        ],
        "kind = \"kubernetes\"\nnetwork = \"host\"",
        &format!(
            "[gate]\nallow = [\"Bash(git log *)\", \"Bash(tail *)\", \"Bash(cat *)\", \"Bash(flotilla exec *)\"]\n\n[runtime.kubernetes]\nkubeconfig = {kc:?}\nimage = \"agent:test\"\nflotilla = {fl:?}\nclaude = {cl:?}\n{more}\n",
            kc = kubeconfig.display().to_string(),
            fl = env!("CARGO_BIN_EXE_flotilla"),
            cl = claude().display().to_string(),
        ),
    );
    Cluster { kube, data, s }
}

/// Whether runtime `boot` of session `id` has nothing left on the cluster: its pod
/// and its Secret are deleted.
fn runtime_gone(kube: &FakeKube, id: u64, boot: u64) -> bool {
    ["pods", "secrets"].iter().all(|kind| {
        kube.object(&format!(
            "/api/v1/namespaces/default/{kind}/flotilla-session-{id}-{boot}"
        ))
        .is_none()
    })
}

fn claim_dir(data: &Path, id: u64) -> PathBuf {
    data.join(format!("pvc/default/flotilla-session-{id}"))
}

#[test]
fn a_session_runs_as_a_pod_whose_tree_comes_from_the_bundle_and_whose_calls_pass_the_gate() {
    let stub = stub();
    let c = cluster(&stub, "");
    let s = &c.s;
    let id = s.create(&["--prompt", "look"]);
    let done = s.wait_state(id, "idle", Duration::from_secs(120));
    assert_eq!(done["doc"]["last_end"]["code"], 0, "{done:#}");

    // One pod ran it, as the session's uid, and its pod and Secret are gone now.
    let booted = s.events_of(id, "runtime-booted");
    assert_eq!(booted.len(), 1, "{booted:#?}");
    let uid = done["doc"]["uid"].as_u64().unwrap();
    assert!(uid >= 61184, "{done:#}");
    assert!(runtime_gone(&c.kube, id, 1));

    // The init container made the tree on the claim from the authority's bundle:
    // the repository's commit, origin the repository.
    let tree = claim_dir(c.data.path(), id).join("tree");
    assert_eq!(git(&tree, &["log", "--format=%s"]), "first");
    assert_eq!(
        git(&tree, &["rev-parse", "HEAD"]),
        done["doc"]["base_commit"].as_str().unwrap()
    );
    assert_eq!(
        git(&tree, &["remote", "get-url", "origin"]),
        s.origin.display().to_string()
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(tree.join("README.md")).unwrap().uid(),
        uid as u32
    );

    // Its tool call passed the gate (from inside the pod, with the Secret's
    // credential) and ran in the pod's tree: the model got the history.
    let gate = s.events_of(id, "gate");
    assert!(
        gate.iter()
            .any(|g| g["decision"] == "allow" && g["tool"] == "Bash"),
        "{gate:#?}"
    );
    assert_eq!(stub.tool_result_count("toolu_log"), 1);
    // The tool's result is the tree's history: one commit, "first".
    let results: Vec<(String, String)> = stub
        .messages_requests()
        .iter()
        .flat_map(|body| {
            body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| tool_results(&m["content"]))
                .collect::<Vec<_>>()
        })
        .filter(|(id, _)| id == "toolu_log")
        .collect();
    assert!(
        results.iter().all(|(_, out)| out.trim() == "first") && !results.is_empty(),
        "{results:?}"
    );
    // The transcript is the pod's log, copied by the authority.
    let transcript =
        std::fs::read_to_string(s.a.ws.path().join(format!("sessions/{id}/runtime-1.jsonl")))
            .unwrap();
    assert!(transcript.contains("\"type\":\"result\""), "{transcript}");
    assert!(transcript.contains("Done."), "{transcript}");

    // A second message: a second pod resumes the same conversation from the home
    // on the claim.
    let r = s.run(&["session", "send", &id.to_string(), "anything new?"]);
    assert_eq!(r.code, 0, "{r:?}");
    flotilla_testkit::wait_until(Duration::from_secs(120), || {
        s.events_of(id, "runtime-exited").len() == 2
    });
    let again = s.wait_state(id, "idle", Duration::from_secs(60));
    assert_eq!(again["doc"]["last_end"]["code"], 0, "{again:#}");
    let last = stub.messages_requests().last().cloned().unwrap();
    assert!(
        last.to_string().contains("look") && last.to_string().contains("anything new?"),
        "the second pod resumed the conversation: {last:#}"
    );

    // Deleted: its claim (tree and home) goes with it.
    let r = s.run(&["session", "delete", &id.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "PersistentVolumeClaim default/flotilla-session-{id}"
        )),
        "the report names what went from the cluster: {r:?}"
    );
    assert!(c
        .kube
        .object(&format!(
            "/api/v1/namespaces/default/persistentvolumeclaims/flotilla-session-{id}"
        ))
        .is_none());
    assert!(flotilla_testkit::wait_until(
        Duration::from_secs(10),
        || !claim_dir(c.data.path(), id).exists()
    ));
}

#[test]
fn a_pod_that_cannot_reach_the_authority_fails_its_runtime_saying_why() {
    let stub = stub();
    // The pods are told an address where nothing listens.
    let c = cluster(
        &stub,
        "authority_url = \"https://127.0.0.1:9\"\nauthority_wait = \"1s\"",
    );
    let s = &c.s;
    let id = s.create(&["--prompt", "look"]);
    s.wait_state(id, "failed", Duration::from_secs(60));
    // A read may find the pod ended (`gone`) before its end is read; then the
    // end is recorded with what the pod said.
    let mut failed = serde_json::Value::Null;
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || {
            failed = s.show(id);
            failed["doc"]["last_end"]["how"] == "exited"
        }),
        "{failed:#}"
    );
    let detail = failed["doc"]["last_end"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(detail.contains("container `prepare` exited"), "{failed:#}");
    assert!(detail.contains("127.0.0.1:9"), "{failed:#}");
    assert!(stub.messages_requests().is_empty(), "the agent never ran");
    // Nothing of the runtime is left on the cluster; the claim stays for the next.
    assert!(runtime_gone(&c.kube, id, 1));
}

/// Pids of the processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmd)
                .contains(marker)
                .then_some(pid)
        })
        .collect()
}

#[test]
fn stopping_a_session_deletes_its_pod_and_everything_in_it_ends() {
    let stub = stub();
    let c = cluster(&stub, "");
    let s = &c.s;
    let id = s.create(&["--prompt", "wait"]);
    // The agent's tool call runs in the pod.
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || !processes_with(
            "flotilla-pod-test"
        )
        .is_empty()),
        "the tool call never ran: {:#} {:#?}",
        s.show(id),
        s.events(id)
    );
    let working = s.show(id);
    assert_eq!(working["state"], "working", "{working:#}");
    assert_eq!(
        working["doc"]["runtime"]["pod"]["name"],
        format!("flotilla-session-{id}-1")
    );
    let list = s.run(&["session", "list"]);
    assert!(
        list.stdout
            .contains(&format!("pod default/flotilla-session-{id}-1")),
        "{list:?}"
    );
    // Reading the pod does not show the model key: it is in the runtime's Secret.
    let pod = c
        .kube
        .object(&format!(
            "/api/v1/namespaces/default/pods/flotilla-session-{id}-1"
        ))
        .unwrap();
    assert!(!pod.to_string().contains("sk-ant-stub"), "{pod:#}");
    assert!(pod.to_string().contains("env.ANTHROPIC_API_KEY"), "{pod:#}");
    // A cluster that does not delete the pod: the stop says so, and nothing is
    // recorded as stopped.
    c.kube.fault(flotilla_testkit::kube_api::Fault::new(
        Some("DELETE"),
        "/pods/",
        503,
        "ServiceUnavailable",
        "the server is currently unable to handle the request",
    ));
    let r = s.run(&["session", "stop", &id.to_string()]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("it still runs"), "{r:?}");
    assert_eq!(s.show(id)["state"], "working");
    assert!(!processes_with("flotilla-pod-test").is_empty());
    c.kube.clear_faults();
    let r = s.run(&["session", "stop", &id.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    let stopped = s.show(id);
    assert_eq!(stopped["doc"]["last_end"]["how"], "stopped", "{stopped:#}");
    assert_eq!(stopped["state"], "idle", "{stopped:#}");
    // The pod and its Secret are deleted, and nothing it ran is left.
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || {
            processes_with("flotilla-pod-test").is_empty() && runtime_gone(&c.kube, id, 1)
        }),
        "left: {:?}",
        processes_with("flotilla-pod-test")
    );
    // Its credential died with it: the gate refuses the token the Secret carried.
    let events = s.events_of(id, "runtime-torn-down");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(s.show(id)["doc"]["token_hash"], serde_json::Value::Null);
}

#[test]
fn a_pod_that_outlives_its_authority_is_followed_to_its_end_after_a_restart() {
    let dir = Path::new(HOLD).parent().unwrap();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let made = std::process::Command::new("mkfifo")
        .args(["-m", "0666", HOLD])
        .status()
        .unwrap();
    assert!(made.success());
    let stub = stub();
    let mut c = cluster(&stub, "");
    let id = c.s.create(&["--prompt", "hold"]);
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || !processes_with(
            "flotilla-pod-hold"
        )
        .is_empty()),
        "the tool call never ran: {:#}",
        c.s.show(id)
    );
    // The authority is stopped (its launcher with it) and ends at once, though it
    // follows a pod; the pod runs on.
    assert!(
        c.s.a.terminate(Duration::from_secs(10)),
        "flotilla serve did not end on SIGTERM while a pod ran"
    );
    assert!(!processes_with("flotilla-pod-hold").is_empty());
    c.s.a.start();
    let s = &c.s;
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || !s
            .events_of(id, "runtime-reattached")
            .is_empty()),
        "{:#?}",
        s.events(id)
    );
    let shown = s.show(id);
    assert_eq!(shown["state"], "working", "{shown:#}");
    // The tool call ends; the agent ends its turn; the restarted authority records
    // that end, with the whole transcript.
    std::fs::write(HOLD, "released\n").unwrap();
    let done = s.wait_state(id, "idle", Duration::from_secs(60));
    assert_eq!(done["doc"]["last_end"]["code"], 0, "{done:#}");
    assert_eq!(done["doc"]["last_end"]["how"], "exited", "{done:#}");
    let transcript =
        std::fs::read_to_string(s.a.ws.path().join(format!("sessions/{id}/runtime-1.jsonl")))
            .unwrap();
    assert!(transcript.contains("\"subtype\":\"init\""), "{transcript}");
    assert!(transcript.contains("toolu_hold"), "{transcript}");
    assert!(transcript.contains("Done."), "{transcript}");
    assert!(s.events_of(id, "runtime-gone").is_empty());
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || c
            .kube
            .object(&format!(
                "/api/v1/namespaces/default/pods/flotilla-session-{id}-1"
            ))
            .is_none()),
        "the pod is deleted once its end is read"
    );

    // A second turn whose pod ends while no authority runs: its end is read from
    // the pod when the authority is back, not taken for a runtime that vanished.
    let r = s.run(&["session", "send", &id.to_string(), "hold"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || !processes_with(
            "flotilla-pod-hold"
        )
        .is_empty()),
        "the second tool call never ran"
    );
    assert!(c.s.a.terminate(Duration::from_secs(10)));
    std::fs::write(HOLD, "released again\n").unwrap();
    let pod2 = format!("/api/v1/namespaces/default/pods/flotilla-session-{id}-2");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || c
            .kube
            .object(&pod2)
            .is_some_and(|p| p["status"]["phase"] == "Succeeded")),
        "{:#?}",
        c.kube.object(&pod2)
    );
    c.s.a.start();
    let s = &c.s;
    let done = s.wait_state(id, "idle", Duration::from_secs(60));
    assert_eq!(done["doc"]["last_end"]["code"], 0, "{done:#}");
    assert_eq!(done["doc"]["last_end"]["how"], "exited", "{done:#}");
    assert!(
        s.events_of(id, "runtime-gone").is_empty(),
        "{:#?}",
        s.events(id)
    );
    let transcript =
        std::fs::read_to_string(s.a.ws.path().join(format!("sessions/{id}/runtime-2.jsonl")))
            .unwrap();
    assert!(transcript.contains("released again"), "{transcript}");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || c.kube.object(&pod2).is_none()),
        "the ended pod is deleted once its end is read"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_pod_the_cluster_refuses_fails_the_boot_visibly_and_leaves_nothing() {
    let stub = stub();
    let c = cluster(&stub, "");
    let s = &c.s;
    c.kube.fault(flotilla_testkit::kube_api::Fault::new(
        Some("POST"),
        "/pods",
        403,
        "Forbidden",
        "pods is forbidden: User \"flotilla\" cannot create resource \"pods\"",
    ));
    let r = s.run(&["session", "create", "--repo", "infra", "--prompt", "look"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr
            .contains("session 1 was created, but its first runtime did not start"),
        "{r:?}"
    );
    let shown = s.show(1);
    assert_eq!(shown["state"], "failed", "{shown:#}");
    assert_eq!(shown["doc"]["last_end"]["how"], "boot-failed", "{shown:#}");
    let detail = shown["doc"]["last_end"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.contains("cannot create resource \"pods\""),
        "{detail}"
    );
    assert_eq!(shown["doc"]["pending"][0], "look", "{shown:#}");
    // Its Secret (with its credential) went with the pod that was not made.
    assert!(runtime_gone(&c.kube, 1, 1));
    // Allowed again: the next message boots it, with the one that waited.
    c.kube.clear_faults();
    let r = s.run(&["session", "send", "1", "anything new?"]);
    assert_eq!(r.code, 0, "{r:?}");
    let done = s.wait_state(1, "idle", Duration::from_secs(120));
    assert_eq!(done["doc"]["last_end"]["code"], 0, "{done:#}");
    assert_eq!(
        stub.tool_result_count("toolu_log"),
        1,
        "the waiting message was given"
    );
}

#[test]
fn the_executor_is_reached_from_a_pod_as_from_the_sandbox() {
    let stub = stub();
    let c = cluster(&stub, "");
    let s = &c.s;
    let id = s.create(&["--prompt", "ask the executor"]);
    let done = s.wait_state(id, "idle", Duration::from_secs(120));
    assert_eq!(done["doc"]["last_end"]["code"], 0, "{done:#}");
    // `flotilla exec` in the pod asked the authority (with the Secret's
    // credential), whose executor ran the allowlisted read on its own host.
    let runs = s.events_of(id, "exec");
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["outcome"], "ran", "{runs:#?}");
    assert_eq!(runs[0]["argv"], serde_json::json!(["systemctl", "status"]));
    assert_eq!(stub.tool_result_count("toolu_exec"), 1);
}
