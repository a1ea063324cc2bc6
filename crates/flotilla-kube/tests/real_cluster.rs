//! The adapter against a real cluster, when one is given: `FLOTILLA_KUBECONFIG` (a
//! kubeconfig file), optionally `FLOTILLA_KUBE_CONTEXT` (default: its current
//! context) and `FLOTILLA_KUBE_NAMESPACE` (an existing namespace the context may
//! write to; default `default`). Without `FLOTILLA_KUBECONFIG` the test says it is
//! skipped: CI here has no cluster (see README, "Kubernetes").
//!
//! It starts a one-replica Deployment of `registry.k8s.io/pause:3.10` (override with
//! `FLOTILLA_KUBE_IMAGE`) named `flotilla-test-<pid>`, checks it runs as its ready
//! pod, restarts it (all-new pod), scales it to zero, and deletes what it made.

use flotilla_exec::adapter::{Adapter, Launch, Stopped};
use flotilla_kube::Kubernetes;
use flotilla_model::source::{Format, SourceFile, Sources};
use flotilla_model::status::Lifecycle;
use flotilla_model::validate::validate;
use std::time::Duration;

#[test]
fn lifecycle_on_a_real_cluster_when_one_is_given() {
    let Ok(kubeconfig) = std::env::var("FLOTILLA_KUBECONFIG") else {
        eprintln!("skipped: FLOTILLA_KUBECONFIG is not set (no real cluster to test against)");
        return;
    };
    let context = std::env::var("FLOTILLA_KUBE_CONTEXT")
        .map(|c| format!("context = \"{c}\"\n"))
        .unwrap_or_default();
    let namespace = std::env::var("FLOTILLA_KUBE_NAMESPACE").unwrap_or_else(|_| "default".into());
    let image = std::env::var("FLOTILLA_KUBE_IMAGE")
        .unwrap_or_else(|_| "registry.k8s.io/pause:3.10".into());
    let name = format!("flotilla-test-{}", std::process::id());
    let text = format!(
        "[hosts.cluster]\ntransport = \"kubernetes\"\nkubeconfig = \"{kubeconfig}\"\n{context}namespace = \"{namespace}\"\n\
         [components.{name}]\nhost = \"cluster\"\nadapter = \"kubernetes\"\n\
         kubernetes = {{ image = \"{image}\", ports = [{{ container_port = 8080 }}] }}\n"
    );
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new(
        "flotilla.toml",
        Format::Toml,
        text.as_str(),
    ));
    let t = validate(&sources, id, &[]).unwrap().topology;
    let c = t.component(t.id(&name).unwrap()).clone();
    let dir = tempfile::tempdir().unwrap();
    let launch = Launch {
        component: c.clone(),
        argv: Vec::new(),
        env: Vec::new(),
        cwd: dir.path().to_path_buf(),
        log_path: dir.path().join("log"),
        log_max_bytes: 0,
        log_keep: 0,
        state_root: dir.path().to_path_buf(),
        start_note: String::new(),
        project: "flotilla-test".into(),
        operation: "op-1".into(),
        secret_files: Vec::new(),
        cancel: Default::default(),
    };
    let a = Kubernetes {
        rollout_timeout: Duration::from_secs(300),
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let first = a.start(&launch).unwrap().identity;
        let seen = a.observe("flotilla-test", &c, None).unwrap().unwrap();
        assert_eq!(seen.lifecycle, Lifecycle::Running, "{:?}", seen.evidence);
        assert!(first.exe_sha256.starts_with("sha256:"), "{first:?}");
        let second = a.restart(&launch, None).unwrap().identity;
        a.prove_restart(&c, Some(&first), &second).unwrap();
        assert!(matches!(
            a.stop("flotilla-test", &c, None).unwrap(),
            Stopped::Stopped { .. }
        ));
    }));
    // What the test made goes, whatever happened.
    let conn = flotilla_kube::cluster::connect(c.cluster.as_ref().unwrap()).unwrap();
    let (client, ns, n) = (conn.client.clone(), namespace.clone(), name.clone());
    flotilla_kube::cluster::block(async move {
        use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
        let dp = kube::api::DeleteParams::default();
        let _ = kube::Api::<Deployment>::namespaced(client.clone(), &ns)
            .delete(&n, &dp)
            .await;
        let _ = kube::Api::<Service>::namespaced(client, &ns)
            .delete(&n, &dp)
            .await;
    });
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
