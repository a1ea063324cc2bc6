//! The objects Flotilla sends to a cluster: snapshots of what a component becomes,
//! properties every component's objects keep, and the objects checked against the
//! Kubernetes API's own schemas by `kubernetes-validate --strict` (PyPI; installed by
//! `scripts/kube-tools`, found through `FLOTILLA_KUBE_TOOLS`; required when
//! `FLOTILLA_REQUIRE_KUBE_TOOLS=1`, as `scripts/test` sets it).

mod common;

use flotilla_kube::manifest::{self, Inputs, Objects, Workload};
use flotilla_model::source::{Format, SourceFile, Sources};
use flotilla_model::topology::Component;
use flotilla_model::validate::validate;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const CLUSTER: &str =
    "[hosts.gpu]\ntransport = \"kubernetes\"\ncontext = \"lab\"\nnamespace = \"inference\"\n";

fn component(inventory: &str, name: &str) -> Component {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, inventory));
    let t = match validate(&sources, id, &[]) {
        Ok(v) => v.topology,
        Err(d) => panic!("invalid inventory: {d:#?}\n{inventory}"),
    };
    t.component(t.id(name).expect("the component")).clone()
}

fn llm() -> Component {
    component(
        &format!(
            "{CLUSTER}[components.llm]\nhost = \"gpu\"\nadapter = \"kubernetes\"\n\
             description = \"llama.cpp on a GPU\"\n\
             command = [\"--model\", \"/models/smol.gguf\", \"--port\", \"8080\"]\n\
             env = {{ LLAMA_ARG_CTX_SIZE = \"4096\" }}\n\
             stop = {{ grace_period = \"20s\" }}\n\
             [components.llm.kubernetes]\nimage = \"ghcr.io/ggml-org/llama.cpp:server\"\n\
             gpus = 1\nrequests = {{ cpu = \"2\", memory = \"8Gi\" }}\nlimits = {{ memory = \"12Gi\" }}\n\
             node_selector = {{ \"nvidia.com/gpu.product\" = \"NVIDIA-L4\" }}\n\
             ports = [{{ name = \"http\", container_port = 8080, service_port = 80 }}]\n\
             volumes = [{{ claim = \"models\", mount_path = \"/models\", read_only = true }}]\n\
             image_pull_policy = \"IfNotPresent\"\n"
        ),
        "llm",
    )
}

fn objects_of(c: &Component, replicas: u32) -> Objects {
    let env = [("LLAMA_ARG_CTX_SIZE".to_string(), "4096".to_string())];
    manifest::objects(
        c,
        &Inputs {
            project: "lab",
            env: &env,
            replicas,
            restarted_at: None,
        },
    )
    .unwrap()
}

/// The objects as JSON, with the config digest (which follows the model's canonical
/// form) replaced so that snapshots show the shape.
fn shown(o: &Objects) -> serde_json::Value {
    let mut w = o.workload.to_json();
    w["metadata"]["annotations"][manifest::ANNOTATION_CONFIG_DIGEST] = "sha256:…".into();
    serde_json::json!({ "workload": w, "service": o.service })
}

#[test]
fn a_gpu_model_server_becomes_a_deployment_and_a_service() {
    insta::assert_json_snapshot!(shown(&objects_of(&llm(), 1)));
}

#[test]
fn a_statefulset_names_its_service() {
    let c = component(
        &format!(
            "{CLUSTER}[components.db]\nhost = \"gpu\"\nadapter = \"kubernetes\"\n\
             kubernetes = {{ image = \"postgres:16@sha256:{}\", kind = \"statefulset\", replicas = 3, namespace = \"data\", ports = [{{ container_port = 5432 }}], service_type = \"NodePort\" }}\n",
            "a".repeat(64)
        ),
        "db",
    );
    insta::assert_json_snapshot!(shown(&objects_of(&c, 3)));
}

#[test]
fn a_stop_and_a_restart_change_only_replicas_and_the_restart_annotation() {
    let c = llm();
    let run = objects_of(&c, 1).workload.to_json();
    let stop = objects_of(&c, 0).workload.to_json();
    assert_eq!(run["spec"]["replicas"], 1);
    assert_eq!(stop["spec"]["replicas"], 0);
    let mut same = stop.clone();
    same["spec"]["replicas"] = 1.into();
    assert_eq!(same, run);
    let env = [];
    let restarted = manifest::objects(
        &c,
        &Inputs {
            project: "lab",
            env: &env,
            replicas: 1,
            restarted_at: Some("2026-12-03T10:00:00Z"),
        },
    )
    .unwrap()
    .workload
    .to_json();
    assert_eq!(
        restarted["spec"]["template"]["metadata"]["annotations"][manifest::ANNOTATION_RESTARTED_AT],
        "2026-12-03T10:00:00Z"
    );
}

/// A random Kubernetes component (names, ports, replicas, resources, kind).
fn arb_component() -> impl Strategy<Value = Component> {
    (
        "[a-z][a-z0-9]{0,10}",
        prop::bool::ANY,
        1u32..5,
        prop::collection::btree_set(1u16..65535, 0..4),
        prop::option::of(1u32..8),
        prop::option::of("[a-z][a-z0-9-]{0,8}[a-z0-9]"),
    )
        .prop_map(|(name, stateful, replicas, ports, gpus, ns)| {
            let ports: Vec<String> = ports
                .iter()
                .map(|p| format!("{{ container_port = {p} }}"))
                .collect();
            let kind = if stateful && !ports.is_empty() {
                "statefulset"
            } else {
                "deployment"
            };
            let mut table = format!(
                "image = \"registry.local/{name}:1\"\nkind = \"{kind}\"\nreplicas = {replicas}\nports = [{}]\n",
                ports.join(", ")
            );
            if let Some(g) = gpus {
                table.push_str(&format!("gpus = {g}\n"));
            }
            if let Some(ns) = ns {
                table.push_str(&format!("namespace = \"{ns}\"\n"));
            }
            component(
                &format!(
                    "{CLUSTER}[components.{name}]\nhost = \"gpu\"\nadapter = \"kubernetes\"\n[components.{name}.kubernetes]\n{table}"
                ),
                &name,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the component: the selector picks the template's pods and no other
    /// component's, every object is in the component's namespace under its name and
    /// marked as Flotilla's, and the Service exposes exactly the declared ports.
    #[test]
    fn every_components_objects_select_its_own_pods(c in arb_component()) {
        let k = c.kubernetes.clone().unwrap();
        let o = objects_of(&c, k.replicas.unwrap());
        let w = o.workload.to_json();
        let selector = w["spec"]["selector"]["matchLabels"].as_object().unwrap().clone();
        let template = w["spec"]["template"]["metadata"]["labels"].as_object().unwrap().clone();
        for (key, v) in &selector {
            prop_assert_eq!(template.get(key), Some(v));
        }
        prop_assert_eq!(selector.get(manifest::LABEL_COMPONENT).and_then(|v| v.as_str()), Some(c.name.as_str()));
        prop_assert_eq!(w["metadata"]["namespace"].as_str(), k.namespace.as_deref());
        prop_assert_eq!(w["metadata"]["labels"][manifest::LABEL_MANAGED_BY].as_str(), Some("flotilla"));
        prop_assert_eq!(w["spec"]["replicas"].as_u64(), k.replicas.map(u64::from));
        match (&o.service, k.ports.is_empty()) {
            (None, true) => {}
            (Some(s), false) => {
                let sv = serde_json::to_value(s).unwrap();
                prop_assert_eq!(&sv["spec"]["selector"], &serde_json::Value::Object(selector.clone()));
                prop_assert_eq!(sv["spec"]["ports"].as_array().unwrap().len(), k.ports.len());
                prop_assert_eq!(sv["metadata"]["namespace"].as_str(), k.namespace.as_deref());
            }
            (s, _) => prop_assert!(false, "service {:?} for ports {:?}", s, k.ports),
        }
        if let Workload::StatefulSet(s) = &o.workload {
            prop_assert_eq!(s.spec.as_ref().unwrap().service_name.as_deref(), k.name.as_deref());
        }
        if let Some(g) = k.gpus {
            let limits = &w["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
            let want = g.to_string();
            prop_assert_eq!(limits[manifest::GPU_RESOURCE].as_str(), Some(want.as_str()));
        }
    }
}

#[test]
fn what_is_sent_passes_the_apis_own_schemas_strictly() {
    let Some(validate) = common::validator() else {
        eprintln!("skipped: kubernetes-validate is not installed (scripts/kube-tools; FLOTILLA_KUBE_TOOLS)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut components = vec![llm()];
    for _ in 0..12 {
        components.push(arb_component().new_tree(&mut runner).unwrap().current());
    }
    for (i, c) in components.iter().enumerate() {
        let o = objects_of(c, 1);
        let mut objs = vec![o.workload.to_json()];
        if let Some(s) = &o.service {
            objs.push(serde_json::to_value(s).unwrap());
        }
        for (j, obj) in objs.iter().enumerate() {
            let f = dir.path().join(format!("{i}-{j}.json"));
            std::fs::write(&f, serde_json::to_vec_pretty(obj).unwrap()).unwrap();
            files.push(f);
        }
    }
    let out = std::process::Command::new(&validate)
        .arg("--strict")
        .arg("--quiet")
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubernetes-validate --strict refused what Flotilla sends:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // And it does refuse what the schemas do not allow: a field no Deployment has.
    let mut bad = objects_of(&llm(), 1).workload.to_json();
    bad["spec"]["replicaCount"] = 2.into();
    let f = dir.path().join("bad.json");
    std::fs::write(&f, serde_json::to_vec(&bad).unwrap()).unwrap();
    let out = std::process::Command::new(&validate)
        .args(["--strict", "--quiet"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "an unknown field passed strict validation"
    );
}
