use super::*;

fn workload(desired: i32, ready: i32) -> WorkloadFacts {
    WorkloadFacts {
        kind: "Deployment".into(),
        namespace: "inference".into(),
        name: "llm".into(),
        labels: crate::manifest::labels("lab", "llm", "llm"),
        generation: 2,
        observed_generation: 2,
        desired,
        replicas: ready,
        updated: ready,
        ready,
        available: ready,
        ..Default::default()
    }
}

fn pod(uid: &str, ready: bool, digest: char, started_ms: u64) -> PodFacts {
    PodFacts {
        name: format!("llm-{uid}"),
        uid: uid.into(),
        phase: "Running".into(),
        ready,
        started_ms,
        digests: vec![format!("sha256:{}", digest.to_string().repeat(64))],
        labels: crate::manifest::labels("lab", "llm", "llm"),
        ..Default::default()
    }
}

#[test]
fn digests_in_every_form_the_runtimes_report() {
    let hex = "ab".repeat(32);
    for id in [
        format!("docker.io/library/nginx@sha256:{hex}"),
        format!("docker-pullable://nginx@sha256:{hex}"),
        format!("sha256:{hex}"),
    ] {
        assert_eq!(
            digest_of_image_id(&id),
            Some(format!("sha256:{hex}")),
            "{id}"
        );
    }
    assert_eq!(digest_of_image_id(""), None);
    assert_eq!(digest_of_image_id("sha256:abc"), None);
}

#[test]
fn a_rolled_out_workload_runs_as_its_ready_pods() {
    let pods = [pod("b", true, 'a', 20), pod("a", true, 'a', 10)];
    let a = assess(Some(&workload(2, 2)), &pods, "lab", "llm", &["x".into()]);
    assert_eq!(a.lifecycle, Lifecycle::Running);
    let id = a.identity.unwrap();
    assert_eq!(
        id.exe.to_str().unwrap(),
        "kubernetes://inference/deployment/llm#a,b"
    );
    assert_eq!(pod_uids(&id), ["a", "b"]);
    assert_eq!(id.start_time_ticks, 20);
    assert_eq!(id.exe_sha256, format!("sha256:{}", "a".repeat(64)));
}

#[test]
fn a_rollout_under_way_is_starting_and_a_scale_to_zero_stopping() {
    let mut w = workload(2, 1);
    w.updated = 1;
    let pods = [pod("a", true, 'a', 1)];
    assert_eq!(
        assess(Some(&w), &pods, "lab", "llm", &[]).lifecycle,
        Lifecycle::Starting
    );
    let mut w = workload(2, 2);
    w.generation = 3;
    assert_eq!(
        assess(Some(&w), &pods, "lab", "llm", &[]).lifecycle,
        Lifecycle::Starting,
        "a generation the controller has not seen is not rolled out"
    );
    let w = workload(0, 0);
    assert_eq!(
        assess(Some(&w), &pods, "lab", "llm", &[]).lifecycle,
        Lifecycle::Stopping
    );
    assert_eq!(
        assess(Some(&w), &[], "lab", "llm", &[]).lifecycle,
        Lifecycle::Stopped
    );
    assert_eq!(
        assess(None, &[], "lab", "llm", &[]).lifecycle,
        Lifecycle::Stopped
    );
    let other = PodFacts {
        labels: crate::manifest::labels("lab", "web", "web"),
        ..pod("z", true, 'a', 1)
    };
    assert_eq!(
        assess(None, &[other], "lab", "llm", &[]).lifecycle,
        Lifecycle::Stopped,
        "another component's pods are not this one's"
    );
}

#[test]
fn crash_looping_pods_fail_with_the_kubelets_reason() {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "llm-x", "uid": "x", "labels": crate::manifest::labels("lab", "llm", "llm") },
        "status": {
            "phase": "Running",
            "containerStatuses": [{
                "name": "llm", "image": "llm:1", "imageID": format!("llm@sha256:{}", "c".repeat(64)),
                "ready": false, "restartCount": 4,
                "state": { "waiting": { "reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container" } },
                "lastState": { "terminated": { "reason": "OOMKilled", "exitCode": 137 } }
            }]
        }
    }))
    .unwrap();
    let f = PodFacts::of(&p);
    assert_eq!(f.restarts, 4);
    let a = assess(Some(&workload(1, 0)), &[f], "lab", "llm", &[]);
    assert_eq!(a.lifecycle, Lifecycle::Failed);
    assert_eq!(
        a.failing.as_deref(),
        Some("pod llm-x: container llm is CrashLoopBackOff (restarted 4 times; last exit: OOMKilled (code 137)): back-off 40s restarting failed container")
    );
    assert_eq!(a.restarts, 4);
}

#[test]
fn a_workload_of_another_owner_is_foreign() {
    let mut w = workload(1, 1);
    assert_eq!(w.foreign("lab", "llm"), None);
    assert!(w.foreign("prod", "llm").unwrap().contains("project `lab`"));
    w.labels.remove(crate::manifest::LABEL_MANAGED_BY);
    assert!(w
        .foreign("lab", "llm")
        .unwrap()
        .contains("not managed by Flotilla"));
}

#[test]
fn a_moved_tag_or_a_pinned_digest_not_running_is_stale() {
    let old = pod("a", true, 'a', 10);
    let new = pod("b", true, 'b', 20);
    let (current, why) = stale("llm:latest", &[&old, &new]);
    assert_eq!(current, Some(format!("sha256:{}", "b".repeat(64))));
    let why = why.unwrap();
    assert!(why.contains("llm-a runs aaaaaaaaaaaa"), "{why}");
    assert_eq!(stale("llm:latest", &[&old]).1, None);
    let pinned = format!("llm@sha256:{}", "b".repeat(64));
    assert!(stale(&pinned, &[&old]).1.is_some());
    assert_eq!(stale(&pinned, &[&new]).1, None);
}
