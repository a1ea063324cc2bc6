//! The objects of a session's runtime on a cluster (its Pod, Secret and claim),
//! built by pure functions: a snapshot of the pod, the properties that make the
//! boundary (no service-account token, no privilege, the session's uid, the
//! credential only in the Secret), `kubernetes-validate --strict` against the
//! Kubernetes API's own schemas (when `scripts/kube-tools` installed it), and what
//! the runtime reads from a pod's status.

mod common;

use flotilla_kube::session::{
    agent_end, pod_runs, progress, runtime_secret, session_claim, session_pod, PodPlan, PodProgress,
};
use flotilla_sessions::config::KubernetesRuntimeConfig;
use flotilla_sessions::runtime::PodRef;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::path::Path;

fn cfg() -> KubernetesRuntimeConfig {
    let text = r#"
namespace = "agents"
image = "registry.example/agent@sha256:6b1f0e5e2c7a4d3b9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928"
image_pull_policy = "IfNotPresent"
storage = "5Gi"
storage_class = "fast"
node_selector = { "kubernetes.io/arch" = "arm64" }
"#;
    toml::from_str(text).unwrap()
}

fn env() -> Vec<(String, String)> {
    vec![
        ("FLOTILLA_SERVER".into(), "https://10.0.0.5:8443".into()),
        (
            "FLOTILLA_SESSION_TOKEN_FILE".into(),
            "/var/lib/flotilla/sessions/7/run/token".into(),
        ),
        ("HOME".into(), "/somewhere/else".into()),
        ("ANTHROPIC_API_KEY".into(), "sk-ant-model-key".into()),
    ]
}

fn files() -> Vec<String> {
    ["ca.pem", "prompt", "settings.json", "token"]
        .map(String::from)
        .to_vec()
}

fn pod() -> Pod {
    let args: Vec<String> = ["-p", "--session-id", "0b5e1c9e-2f9e-4a43-9d7e-6f1a2b3c4d5e"]
        .map(String::from)
        .to_vec();
    session_pod(&PodPlan {
        id: 7,
        boot: 3,
        uid: 61190,
        session_dir: Path::new("/var/lib/flotilla/sessions/7"),
        args: &args,
        env: &env(),
        cfg: &cfg(),
        files: &files(),
    })
}

#[test]
fn a_runtime_is_one_pod_mounting_its_claim_and_its_secret() {
    insta::assert_json_snapshot!(pod());
}

#[test]
fn the_pod_holds_no_credential_but_its_sessions_and_runs_unprivileged_as_its_uid() {
    let v = serde_json::to_value(pod()).unwrap();
    let spec = &v["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["securityContext"]["runAsUser"], 61190);
    assert_eq!(spec["securityContext"]["fsGroup"], 61190);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    for c in spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["containers"].as_array().unwrap())
    {
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{c:#}");
        assert_eq!(sc["capabilities"]["drop"][0], "ALL", "{c:#}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{c:#}");
        // Flotilla's own variables are written in the spec; the configured ones
        // (a model key) only in the runtime's Secret, and only for the agent.
        assert!(!c.to_string().contains("sk-ant-model-key"), "{c:#}");
        let key: Vec<&serde_json::Value> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "ANTHROPIC_API_KEY")
            .collect();
        if c["name"] == "agent" {
            assert_eq!(
                key[0]["valueFrom"]["secretKeyRef"],
                serde_json::json!({"name": "flotilla-session-7-3", "key": "env.ANTHROPIC_API_KEY"})
            );
        } else {
            assert!(key.is_empty(), "{c:#}");
        }
        // HOME is the session's home on its claim, whatever the environment said.
        let homes: Vec<&serde_json::Value> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "HOME")
            .collect();
        assert_eq!(homes.len(), 1);
        assert_eq!(homes[0]["value"], "/var/lib/flotilla/sessions/7/home");
        // The run files (with the credential) are mounted read-only.
        let run = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "run")
            .unwrap();
        assert_eq!(run["readOnly"], true);
        assert_eq!(run["mountPath"], "/var/lib/flotilla/sessions/7/run");
    }
    let volumes = spec["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 3);
    assert_eq!(volumes[0]["secret"]["secretName"], "flotilla-session-7-3");
    assert_eq!(volumes[0]["secret"]["defaultMode"], 0o440);
    // Only the run files are files: the environment's keys are not.
    assert_eq!(volumes[0]["secret"]["items"].as_array().unwrap().len(), 4);
    assert_eq!(
        volumes[1]["persistentVolumeClaim"]["claimName"],
        "flotilla-session-7"
    );
    let claim = serde_json::to_value(session_claim(7, &cfg())).unwrap();
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    assert_eq!(claim["metadata"]["labels"]["io.flotilla.session"], "7");
}

#[test]
fn what_a_runtime_sends_passes_the_apis_own_schemas_strictly() {
    let Some(validate) = common::validator() else {
        eprintln!("skipped: kubernetes-validate is not installed (scripts/kube-tools; FLOTILLA_KUBE_TOOLS)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files: BTreeMap<String, Vec<u8>> = [
        ("token".to_string(), b"flt-session-00".to_vec()),
        ("prompt".into(), b"ship it".to_vec()),
    ]
    .into();
    let mut secret = serde_json::to_value(runtime_secret(7, 3, "agents", &files)).unwrap();
    secret["apiVersion"] = "v1".into();
    secret["kind"] = "Secret".into();
    let objects = [
        serde_json::to_value(pod()).unwrap(),
        serde_json::to_value(session_claim(7, &cfg())).unwrap(),
        secret,
    ];
    let mut paths = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let f = dir.path().join(format!("{i}.json"));
        std::fs::write(&f, serde_json::to_vec_pretty(o).unwrap()).unwrap();
        paths.push(f);
    }
    let out = std::process::Command::new(&validate)
        .args(["--strict", "--quiet"])
        .args(&paths)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubernetes-validate --strict refused a runtime's objects:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pod()` with `status` as the kubelet would write it.
fn with_status(status: serde_json::Value) -> Pod {
    let mut v = serde_json::to_value(pod()).unwrap();
    v["metadata"]["uid"] = "uid-1".into();
    v["status"] = status;
    serde_json::from_value(v).unwrap()
}

#[test]
fn what_the_runtime_reads_from_a_pods_status() {
    let pending = with_status(serde_json::json!({"phase": "Pending"}));
    assert_eq!(progress(&pending), PodProgress::Pending);
    let r = PodRef {
        namespace: "agents".into(),
        name: "flotilla-session-7-3".into(),
        uid: "uid-1".into(),
    };
    assert!(pod_runs(Some(&pending), &r));
    assert!(!pod_runs(None, &r), "a pod that is gone does not run");
    let other = PodRef {
        uid: "uid-2".into(),
        ..r.clone()
    };
    assert!(
        !pod_runs(Some(&pending), &other),
        "a pod made again under the same name is another"
    );
    let pulling = with_status(serde_json::json!({
        "phase": "Pending",
        "initContainerStatuses": [{"name": "prepare", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}],
    }));
    assert_eq!(
        progress(&pulling),
        PodProgress::Stuck(
            "container `prepare`: ImagePullBackOff: Back-off pulling image \"x\"".into()
        )
    );
    let init_failed = with_status(serde_json::json!({
        "phase": "Failed",
        "initContainerStatuses": [{"name": "prepare", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": "cannot reach the authority\n"}}}],
        "containerStatuses": [{"name": "agent", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"waiting": {"reason": "PodInitializing"}}}],
    }));
    assert_eq!(
        progress(&init_failed),
        PodProgress::Failed(
            Some(3),
            "container `prepare` exited 3: cannot reach the authority".into()
        )
    );
    assert!(!pod_runs(Some(&init_failed), &r));
    let running = with_status(serde_json::json!({
        "phase": "Running",
        "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"running": {"startedAt": "2026-12-03T12:00:00Z"}}}],
    }));
    assert_eq!(progress(&running), PodProgress::Started);
    assert_eq!(agent_end(&running), None);
    let ended = with_status(serde_json::json!({
        "phase": "Failed",
        "containerStatuses": [{"name": "agent", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "API error 529"}}}],
    }));
    assert_eq!(progress(&ended), PodProgress::Started);
    assert_eq!(agent_end(&ended), Some((1, "API error 529".into())));
    assert!(!pod_runs(Some(&ended), &r));
}
