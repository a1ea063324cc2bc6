//! The `kubernetes` adapter against an API server on loopback: the testkit's fake
//! (`flotilla_testkit::kube_api`, which copies the real server's server-side apply,
//! watches and a kubelet's pod status; its parity with kmock is tested in the
//! testkit), through the adapter's public trait, as the executor calls it.

use flotilla_exec::adapter::{Adapter, Launch, Stopped};
use flotilla_kube::Kubernetes;
use flotilla_model::source::{Format, SourceFile, Sources};
use flotilla_model::status::Lifecycle;
use flotilla_model::topology::Component;
use flotilla_model::validate::validate;
use flotilla_testkit::kube_api::{FakeKube, Fault, Misbehaviour};
use std::time::Duration;

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/inference/deployments";
const SERVICES: &str = "/api/v1/namespaces/inference/services";

/// A fake cluster with namespace `inference`, its kubeconfig (context `lab`) and the
/// inventory's host table.
struct Cluster {
    fake: FakeKube,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Cluster {
        let fake = FakeKube::start();
        fake.create_namespace("inference");
        let dir = tempfile::tempdir().unwrap();
        fake.write_kubeconfig(&dir.path().join("kubeconfig"), "lab", None)
            .unwrap();
        Cluster { fake, dir }
    }

    fn host(&self) -> String {
        format!(
            "[hosts.gpu]\ntransport = \"kubernetes\"\nkubeconfig = \"{}\"\ncontext = \"lab\"\nnamespace = \"inference\"\n",
            self.dir.path().join("kubeconfig").display()
        )
    }

    /// Component `name` of an inventory of this cluster with `components` (TOML).
    fn component(&self, components: &str, name: &str) -> Component {
        let text = format!("{}{components}", self.host());
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new(
            "flotilla.toml",
            Format::Toml,
            text.as_str(),
        ));
        let t = validate(&sources, id, &[])
            .unwrap_or_else(|d| panic!("{d:#?}"))
            .topology;
        t.component(t.id(name).unwrap()).clone()
    }

    fn launch(&self, c: &Component) -> Launch {
        Launch {
            component: c.clone(),
            argv: c.command.clone(),
            env: c
                .env
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        serde_json::to_value(v)
                            .unwrap()
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    )
                })
                .collect(),
            cwd: self.dir.path().to_path_buf(),
            log_path: self.dir.path().join(format!("{}.log", c.name)),
            log_max_bytes: 0,
            log_keep: 0,
            state_root: self.dir.path().to_path_buf(),
            start_note: String::new(),
            project: "lab".into(),
            operation: "op-1".into(),
            secret_files: Vec::new(),
            cancel: Default::default(),
        }
    }
}

fn llm(replicas: u32) -> String {
    format!(
        "[components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\ncommand = [\"--port\", \"8080\"]\n\
         env = {{ MODEL = \"smol\" }}\n\
         [components.llm.kubernetes]\nimage = \"ghcr.io/ggml-org/llama.cpp:server\"\nreplicas = {replicas}\n\
         ports = [{{ name = \"http\", container_port = 8080 }}]\n"
    )
}

/// The lifecycle the adapter observes of `c` now.
fn lifecycle(a: &Kubernetes, c: &Component) -> Lifecycle {
    a.observe("lab", c, None).unwrap().unwrap().lifecycle
}

fn adapter() -> Kubernetes {
    Kubernetes {
        rollout_timeout: Duration::from_secs(30),
    }
}

#[test]
fn start_applies_with_a_dry_run_first_and_rolls_out_every_replica() {
    let k = Cluster::new();
    let c = k.component(&llm(2), "llm");
    let a = adapter();
    let launched = a.start(&k.launch(&c)).unwrap();
    let pods = launched.facts["pods"].as_array().unwrap().clone();
    assert_eq!(pods.len(), 2, "{:#}", launched.facts);
    let digest = flotilla_model::digest::sha256_hex(b"ghcr.io/ggml-org/llama.cpp:server");
    assert_eq!(
        launched.identity.exe_sha256, digest,
        "the digest the pods report"
    );

    // What was sent: two server-side applies per object, a dry run first, under the
    // field manager `flotilla`, the Service before the Deployment.
    let patches: Vec<_> = k
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect();
    let seen: Vec<(String, bool)> = patches
        .iter()
        .map(|r| (r.path.clone(), r.query.contains("dryRun=All")))
        .collect();
    assert_eq!(
        seen,
        [
            (format!("{SERVICES}/llm"), true),
            (format!("{DEPLOYMENTS}/llm"), true),
            (format!("{SERVICES}/llm"), false),
            (format!("{DEPLOYMENTS}/llm"), false),
        ]
    );
    for r in &patches {
        assert_eq!(r.content_type, "application/apply-patch+yaml");
        assert!(r.query.contains("fieldManager=flotilla"), "{}", r.query);
        assert!(
            !r.query.contains("force"),
            "never forced unless asked: {}",
            r.query
        );
        assert!(r.authorization, "the kubeconfig's token is sent");
    }
    let d = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
        "smol"
    );
    let managers: Vec<&str> = d["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"flotilla"), "{managers:?}");

    // What is seen: running, as the pods the start measured.
    let seen = a.observe("lab", &c, None).unwrap().unwrap();
    assert_eq!(seen.lifecycle, Lifecycle::Running, "{:?}", seen.evidence);
    assert_eq!(seen.main.as_ref(), Some(&launched.identity));
    assert!(
        seen.evidence
            .iter()
            .any(|(_, e)| e.contains("2 of 2 pods ready")),
        "{:?}",
        seen.evidence
    );
    assert_eq!(seen.fresh.as_ref().unwrap().stale, None);
}

#[test]
fn components_of_one_namespace_share_one_watch_per_kind() {
    let k = Cluster::new();
    let mut toml = String::new();
    for i in 0..5 {
        toml.push_str(&format!(
            "[components.c{i}]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox:1\" }}\n"
        ));
    }
    let a = adapter();
    for i in 0..5 {
        let c = k.component(&toml, &format!("c{i}"));
        a.start(&k.launch(&c)).unwrap();
        assert_eq!(lifecycle(&a, &c), Lifecycle::Running);
    }
    let opened = k.fake.watches_opened();
    assert_eq!(opened.get("pods"), Some(&1), "{opened:?}");
    assert_eq!(opened.get("deployments.apps"), Some(&1), "{opened:?}");
    let lists = k
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && !r.query.contains("watch"))
        .count();
    assert_eq!(lists, 2, "one LIST per kind, none per component");
}

#[test]
fn a_restart_replaces_every_pod_and_proves_it() {
    let k = Cluster::new();
    let c = k.component(&llm(2), "llm");
    let a = adapter();
    let before = a.start(&k.launch(&c)).unwrap().identity;
    let after = a.restart(&k.launch(&c), None).unwrap().identity;
    a.prove_restart(&c, Some(&before), &after).unwrap();
    assert!(a.prove_restart(&c, Some(&before), &before).is_err());
    let d = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert!(
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .is_string()
    );
    let seen = a.observe("lab", &c, None).unwrap().unwrap();
    assert_eq!(seen.main, Some(after));
}

#[test]
fn a_stop_scales_to_zero_and_keeps_the_service() {
    let k = Cluster::new();
    let c = k.component(&llm(2), "llm");
    let a = adapter();
    a.start(&k.launch(&c)).unwrap();
    match a.stop("lab", &c, None).unwrap() {
        Stopped::Stopped { summary, .. } => {
            assert!(
                summary.starts_with("scaled Deployment inference/llm to 0: 2 pods gone"),
                "{summary}"
            )
        }
        other => panic!("{other:?}"),
    }
    let seen = a.observe("lab", &c, None).unwrap().unwrap();
    assert_eq!(seen.lifecycle, Lifecycle::Stopped, "{:?}", seen.evidence);
    assert!(k.fake.object(&format!("{SERVICES}/llm")).is_some());
    let d = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(d["spec"]["replicas"], 0);
    assert!(matches!(
        a.stop("lab", &c, None).unwrap(),
        Stopped::Stopped { .. }
    ));
    a.start(&k.launch(&c)).unwrap();
    assert_eq!(lifecycle(&a, &c), Lifecycle::Running);
}

#[test]
fn crash_looping_pods_fail_the_start_with_the_kubelets_reason() {
    let k = Cluster::new();
    let c = k.component(&llm(1), "llm");
    k.fake.pods_misbehave(
        "inference",
        "llm",
        Misbehaviour::CrashLoop {
            reason: "OOMKilled".into(),
            exit_code: 137,
        },
    );
    let a = adapter();
    let err = a.start(&k.launch(&c)).unwrap_err().to_string();
    assert!(err.contains("CrashLoopBackOff"), "{err}");
    assert!(err.contains("OOMKilled (code 137)"), "{err}");
    assert!(
        err.contains("scaled Deployment inference/llm back to 0"),
        "{err}"
    );
    let d = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(
        d["spec"]["replicas"], 0,
        "a start that failed leaves nothing running"
    );
    assert_eq!(lifecycle(&a, &c), Lifecycle::Stopped);

    // Running, then its pods start crashing: failed, with the kubelet's reason.
    k.fake
        .pods_misbehave("inference", "llm", Misbehaviour::Healthy);
    a.start(&k.launch(&c)).unwrap();
    k.fake.pods_misbehave(
        "inference",
        "llm",
        Misbehaviour::CrashLoop {
            reason: "OOMKilled".into(),
            exit_code: 137,
        },
    );
    let failed = flotilla_testkit::wait_until(Duration::from_secs(10), || {
        a.observe("lab", &c, None)
            .ok()
            .flatten()
            .is_some_and(|s| s.lifecycle == Lifecycle::Failed)
    });
    assert!(failed, "crash-looping pods are seen as failed");
    let seen = a.observe("lab", &c, None).unwrap().unwrap();
    assert!(
        seen.evidence.iter().any(|(_, e)| e.contains("OOMKilled")),
        "{:?}",
        seen.evidence
    );

    // A restart that cannot pull its image fails, and says so.
    k.fake
        .pods_misbehave("inference", "llm", Misbehaviour::ImagePullFailure);
    let err = a.restart(&k.launch(&c), None).unwrap_err().to_string();
    assert!(
        err.contains("ErrImagePull") || err.contains("ImagePullBackOff"),
        "{err}"
    );
}

#[test]
fn fields_of_another_manager_are_a_conflict_never_forced_unless_asked() {
    let k = Cluster::new();
    let c = k.component(&llm(1), "llm");
    let a = adapter();
    a.start(&k.launch(&c)).unwrap();
    // Someone scales it by hand (`kubectl edit`: an update that takes the field over).
    let out = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "PATCH",
            "-H",
            "Content-Type: application/merge-patch+json",
            "-d",
            r#"{"spec":{"replicas":3}}"#,
        ])
        .arg(format!(
            "{}{DEPLOYMENTS}/llm?fieldManager=kubectl-edit",
            k.fake.url()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let before = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    let err = a.restart(&k.launch(&c), None).unwrap_err().to_string();
    assert!(err.contains("conflict"), "{err}");
    assert!(err.contains("kubectl-edit"), "{err}");
    assert!(err.contains("force_conflicts"), "{err}");
    let after = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(before["spec"], after["spec"], "nothing was applied");

    let forced = k.component(&format!("{}force_conflicts = true\n", llm(1)), "llm");
    a.restart(&k.launch(&forced), None).unwrap();
    let d = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(d["spec"]["replicas"], 1, "taken over");
}

#[test]
fn a_verb_the_user_may_not_use_fails_before_anything_is_applied() {
    let k = Cluster::new();
    let c = k.component(&llm(1), "llm");
    k.fake.fault(Fault {
        method: Some("PATCH".into()),
        path: "/deployments/".into(),
        status: 403,
        reason: "Forbidden".into(),
        message: "deployments.apps \"llm\" is forbidden: User \"dev\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"inference\"".into(),
        times: None,
    });
    let err = adapter().start(&k.launch(&c)).unwrap_err().to_string();
    assert!(
        err.contains("cannot patch resource \"deployments\""),
        "{err}"
    );
    assert!(err.contains("RBAC"), "{err}");
    assert!(
        k.fake.object(&format!("{SERVICES}/llm")).is_none(),
        "the Service passed its dry run, but nothing is applied until every object has"
    );
}

#[test]
fn a_namespace_that_does_not_exist_is_named_and_not_created() {
    let k = Cluster::new();
    let c = k.component(
        "[components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = { image = \"busybox:1\", namespace = \"nowhere\" }\n",
        "llm",
    );
    let err = adapter().start(&k.launch(&c)).unwrap_err().to_string();
    assert!(err.contains("nowhere"), "{err}");
    assert!(err.contains("does not create namespaces"), "{err}");
    assert!(k.fake.object("/api/v1/namespaces/nowhere").is_none());
}

#[test]
fn a_context_the_kubeconfig_lacks_is_named_with_those_it_has() {
    let k = Cluster::new();
    let text = k.host().replace("context = \"lab\"", "context = \"prod\"");
    let c = {
        let inv = format!(
            "{text}[components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox:1\" }}\n"
        );
        let mut sources = Sources::new();
        let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, inv.as_str()));
        let t = validate(&sources, id, &[]).unwrap().topology;
        t.component(t.id("llm").unwrap()).clone()
    };
    let err = adapter().observe("lab", &c, None).unwrap_err().to_string();
    assert!(err.contains("has no context `prod` (it has: lab)"), "{err}");
}

#[test]
fn an_object_of_the_name_that_is_not_flotillas_is_never_touched() {
    let k = Cluster::new();
    let c = k.component(&llm(1), "llm");
    k.fake
        .apply_as(
            "kubectl",
            &format!("{DEPLOYMENTS}/llm"),
            &serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "llm", "namespace": "inference", "labels": {"app": "llm"}},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}},
                         "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [{"name": "x", "image": "nginx:1"}]}}}}),
        )
        .unwrap();
    let a = adapter();
    let err = a.start(&k.launch(&c)).unwrap_err().to_string();
    assert!(err.contains("not touched"), "{err}");
    let seen = a.observe("lab", &c, None).unwrap().unwrap();
    assert!(seen.foreign.is_some(), "{seen:?}");
    assert!(matches!(
        a.stop("lab", &c, None).unwrap(),
        Stopped::NotOurs { .. }
    ));
    let d = k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1"
    );
}

#[test]
fn a_tag_that_moved_under_running_pods_is_stale() {
    let k = Cluster::new();
    let c = k.component(&llm(2), "llm");
    let a = adapter();
    let first = a.start(&k.launch(&c)).unwrap().identity;
    // The tag now names another image; one pod is replaced (a node drained): it pulls
    // the new one, the other still runs the old.
    let moved = format!("sha256:{}", "e".repeat(64));
    k.fake
        .set_image_digest("ghcr.io/ggml-org/llama.cpp:server", &moved);
    let pods_url = format!("{}/api/v1/namespaces/inference/pods", k.fake.url());
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .arg("-sf")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "curl {args:?}");
        out.stdout
    };
    let pods: serde_json::Value = serde_json::from_slice(&curl(&[&pods_url])).unwrap();
    let victim = pods["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    curl(&["-X", "DELETE", &format!("{pods_url}/{victim}")]);
    let stale = flotilla_testkit::wait_until(Duration::from_secs(10), || {
        a.observe("lab", &c, None)
            .ok()
            .flatten()
            .and_then(|s| s.fresh)
            .and_then(|f| f.stale)
            .is_some()
    });
    assert!(stale, "a moved tag is seen once a pod pulled it");
    let seen = a.observe("lab", &c, None).unwrap().unwrap();
    let (_, why) = seen.fresh.unwrap().stale.unwrap();
    assert!(why.contains("eeeeeeeeeeee"), "{why}");
    assert_ne!(seen.main.unwrap().exe_sha256, first.exe_sha256);
}

#[test]
fn a_watch_that_ends_with_410_gone_lists_again_and_misses_nothing() {
    let k = Cluster::new();
    let c = k.component(&llm(2), "llm");
    let a = adapter();
    a.start(&k.launch(&c)).unwrap();
    let lists = |k: &Cluster| {
        k.fake
            .requests()
            .iter()
            .filter(|r| {
                r.method == "GET" && r.path.ends_with("/pods") && !r.query.contains("watch")
            })
            .count()
    };
    assert_eq!(lists(&k), 1);
    // The API server restarts after a compaction: the watches end, and watching on
    // from where they were answers 410 Gone.
    k.fake.expire_watches();
    match a.stop("lab", &c, None).unwrap() {
        Stopped::Stopped { summary, .. } => assert!(summary.contains("2 pods gone"), "{summary}"),
        other => panic!("{other:?}"),
    }
    let expired = k
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/pods") && r.query.contains("watch"))
        .count();
    assert!(expired >= 2, "the watch was opened again");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(10), || lists(&k) >= 2),
        "after 410 the pods are listed again"
    );
    assert_eq!(lifecycle(&a, &c), Lifecycle::Stopped);
    a.start(&k.launch(&c)).unwrap();
    assert_eq!(lifecycle(&a, &c), Lifecycle::Running);
}

#[test]
fn an_api_server_that_never_answers_is_an_error_not_a_hang() {
    // Accepts connections (the kernel's backlog) and never answers a byte.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {url}\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n    user: lab\ncurrent-context: lab\nusers:\n- name: lab\n  user:\n    token: t\n"),
    )
    .unwrap();
    std::env::set_var("FLOTILLA_KUBERNETES_API_TIMEOUT", "1s");
    let text = format!(
        "[hosts.gpu]\ntransport = \"kubernetes\"\nkubeconfig = \"{}\"\n[components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\nkubernetes = {{ image = \"busybox:1\" }}\n",
        kubeconfig.display()
    );
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new(
        "flotilla.toml",
        Format::Toml,
        text.as_str(),
    ));
    let t = validate(&sources, id, &[]).unwrap().topology;
    let c = t.component(t.id("llm").unwrap()).clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(adapter().observe("lab", &c, None).map(|_| ()));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("observe returned (a silent API server must not hang it)");
    let err = got.unwrap_err().to_string();
    assert!(err.contains("not done after 1s"), "{err}");
    drop(silent);
}

#[test]
fn a_user_who_may_not_list_pods_is_told_so() {
    let k = Cluster::new();
    let c = k.component(&llm(1), "llm");
    k.fake.fault(Fault::new(
        Some("GET"),
        "/pods",
        403,
        "Forbidden",
        "pods is forbidden: User \"dev\" cannot list resource \"pods\" in API group \"\" in the namespace \"inference\"",
    ));
    let err = adapter().observe("lab", &c, None).unwrap_err().to_string();
    assert!(
        err.contains("list and watch Pod in namespace inference"),
        "{err}"
    );
    assert!(err.contains("cannot list resource \"pods\""), "{err}");
    assert!(err.contains("RBAC"), "{err}");
}

#[test]
fn an_interrupted_rollout_stops_waiting_and_leaves_nothing_running() {
    let k = Cluster::new();
    let c = k.component(&llm(1), "llm");
    // Pods that are never scheduled: the rollout would wait its whole deadline.
    k.fake
        .pods_misbehave("inference", "llm", Misbehaviour::NeverReady);
    let mut launch = k.launch(&c);
    let cancel = tokio_util::sync::CancellationToken::new();
    launch.cancel = cancel.clone();
    let a = Kubernetes {
        rollout_timeout: Duration::from_secs(600),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(a.start(&launch).map(|_| ()));
    });
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(20), || k
            .fake
            .object(&format!("{DEPLOYMENTS}/llm"))
            .is_some()),
        "the start applied its Deployment"
    );
    cancel.cancel();
    let got = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("an interrupted start returns (not after its 600 s deadline)");
    let err = got.unwrap_err().to_string();
    assert!(err.contains("interrupted"), "{err}");
    assert!(err.contains("back to 0"), "{err}");
    assert_eq!(
        k.fake.object(&format!("{DEPLOYMENTS}/llm")).unwrap()["spec"]["replicas"],
        0
    );
}
