//! The digests stream `serde_json` output straight into SHA-256; that is only a digest
//! of *canonical* JSON if the types serialise in canonical (RFC 8785) form. This checks
//! it against an independent JCS implementation on a realistic topology, observed
//! state and plan, so a field added out of order fails here.

use flotilla_model::digest::{canonical_json, digest_of, sha256_hex};
use flotilla_model::status::{
    Health, Lifecycle, Observability, Observed, ObservedComponent, StackRecord, StartedBy,
};
use flotilla_model::{validate, Format, SourceFile, Sources};
use flotilla_plan::{plan, Operation, Verb};

fn assert_canonical<T: serde::Serialize>(what: &str, v: &T) {
    let ours = canonical_json(v);
    let jcs = serde_jcs::to_string(v).unwrap();
    assert_eq!(ours, jcs, "{what} does not serialise canonically");
    assert_eq!(digest_of(v), sha256_hex(jcs.as_bytes()));
}

#[test]
fn topology_observed_and_plan_serialise_canonically() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/local-ai/flotilla.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, text));
    let topology = validate(&sources, id, &[]).unwrap().topology;
    assert_canonical("topology", &topology);
    let mut observed = Observed::default();
    observed.components.insert(
        "llm".into(),
        ObservedComponent {
            lifecycle: Lifecycle::Running,
            health: Health::Healthy,
            observability: Observability::Observed,
            config_changes: Vec::new(),
            started_by: StartedBy::Flotilla {
                operation: "op-1".into(),
            },
            owner_error: None,
            unobserved_why: None,
        },
    );
    observed.components.insert(
        "embed".into(),
        ObservedComponent {
            lifecycle: Lifecycle::Running,
            health: Health::NotApplicable,
            observability: Observability::Unreachable,
            config_changes: Vec::new(),
            started_by: StartedBy::Foreign {
                evidence: "pid 7".into(),
            },
            owner_error: None,
            unobserved_why: None,
        },
    );
    observed.stacks.insert(
        "chat".into(),
        StackRecord {
            start_order: vec!["llm".into()],
        },
    );
    assert_canonical("observed", &observed);
    // Everything else was observed stopped (an absent component is unknown).
    for c in &topology.components {
        if c.name != "llm" {
            observed
                .components
                .insert(c.name.clone(), ObservedComponent::STOPPED);
        }
    }
    let p = plan(
        &topology,
        &observed,
        &Operation::new(Verb::Start, "everything"),
    )
    .unwrap();
    assert_canonical("plan", &p);
}

/// The two-host example (ssh host settings, tunnels): its topology is canonical, and
/// each host's snapshot survives JSON and rebuilds into a topology of just that host.
#[test]
fn two_host_topology_and_snapshots_round_trip() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/local-ai/two-hosts.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("two-hosts.toml", Format::Toml, text));
    let topology = validate(&sources, id, &[]).unwrap().topology;
    assert_canonical("two-host topology", &topology);
    for host in ["local", "studio"] {
        let snap = topology.snapshot(host);
        assert_canonical("snapshot", &snap);
        let json = serde_json::to_string(&snap).unwrap();
        let back: flotilla_model::topology::Snapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snap);
        let rebuilt = flotilla_model::Topology::from_snapshot(back).unwrap();
        assert!(rebuilt.components.iter().all(|c| c.host == host));
        for c in &rebuilt.components {
            let original = topology.component(topology.id(&c.name).unwrap());
            assert_eq!(c.config_digest(), original.config_digest(), "{}", c.name);
            assert!(c.depends_on.iter().all(|d| rebuilt.id(d).is_some()));
        }
        assert_eq!(rebuilt.order().len(), rebuilt.len());
    }
    let studio = topology.snapshot("studio");
    let names: Vec<&str> = studio.components.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["embed", "llm"]);
    let local = topology.snapshot("local");
    // The tunnels' `via` host travels with them; no secret value is anywhere in it.
    assert!(local.hosts.contains_key("studio"));
    let proxy = local.components.iter().find(|c| c.name == "proxy").unwrap();
    assert!(proxy.depends_on.contains(&"llm-tunnel".to_string()));
    let json = serde_json::to_string(&local).unwrap();
    assert!(json.contains("LITELLM_MASTER_KEY") && !json.contains("sk-"));
}
