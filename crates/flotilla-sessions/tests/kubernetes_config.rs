//! `sessions.toml` with `[runtime] kind = "kubernetes"`: every mistake refused at
//! load, naming the line and column and what is wrong; a good one loads.

use flotilla_sessions::config::SessionsConfig;
use flotilla_sessions::runtime::RuntimeKind;

/// A `sessions.toml` whose `[runtime]` holds `runtime` and whose
/// `[runtime.kubernetes]` holds `table` (none when `None`).
fn text(runtime: &str, table: Option<&str>) -> String {
    let mut t =
        format!("[runtime]\n{runtime}\n\n[repos.infra]\nurl = \"https://example.invalid/x.git\"\n");
    if let Some(body) = table {
        t.push_str(&format!("\n[runtime.kubernetes]\n{body}\n"));
    }
    t
}

fn load(t: &str) -> Result<SessionsConfig, String> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sessions.toml");
    std::fs::write(&p, t).unwrap();
    SessionsConfig::load(&p).map_err(|e| e.to_string())
}

const POD: &str = "kind = \"kubernetes\"\nnetwork = \"host\"";

#[test]
fn a_good_kubernetes_runtime_loads_with_its_defaults() {
    let c = load(&text(POD, Some("image = \"agent:1\""))).unwrap();
    assert_eq!(c.runtime.kind, RuntimeKind::Kubernetes);
    let k = c.runtime.kubernetes.unwrap();
    assert_eq!(k.namespace, "default");
    assert_eq!(k.storage, "1Gi");
    assert_eq!(k.flotilla.to_str(), Some("/usr/local/bin/flotilla"));
    assert_eq!(k.claude.to_str(), Some("/usr/local/bin/claude"));
}

#[test]
fn each_mistake_is_refused_where_it_is_written() {
    let cases: &[(&str, String, &str, &str)] = &[
        (
            "no table",
            text(POD, None),
            "needs a [runtime.kubernetes] table",
            "2:1",
        ),
        (
            "table without kind",
            text("network = \"host\"", Some("image = \"a\"")),
            "kind is \"local\"",
            "",
        ),
        (
            "network unset",
            text("kind = \"kubernetes\"", Some("image = \"a\"")),
            "network is not set",
            "2:1",
        ),
        (
            "network proxy",
            text(
                "kind = \"kubernetes\"\nnetwork = \"proxy\"",
                Some("image = \"a\""),
            ),
            "network = \"proxy\" is the local sandbox's",
            "3:1",
        ),
        (
            "relative flotilla",
            text(POD, Some("image = \"a\"\nflotilla = \"bin/flotilla\"")),
            "flotilla `bin/flotilla` is not absolute",
            "",
        ),
        (
            "pull policy",
            text(POD, Some("image = \"a\"\nimage_pull_policy = \"always\"")),
            "not Always, IfNotPresent or Never",
            "",
        ),
        (
            "namespace",
            text(POD, Some("image = \"a\"\nnamespace = \"Bad_NS\"")),
            "namespace `Bad_NS` may hold only lowercase",
            "",
        ),
        (
            "storage",
            text(POD, Some("image = \"a\"\nstorage = \"lots\"")),
            "storage `lots` is not a Kubernetes quantity",
            "",
        ),
        (
            "storage class",
            text(POD, Some("image = \"a\"\nstorage_class = \"\"")),
            "storage_class `` is not a StorageClass name",
            "",
        ),
        (
            "node selector",
            text(
                POD,
                Some("image = \"a\"\nnode_selector = { \"bad key!\" = \"x\" }"),
            ),
            "node_selector key `bad key!`",
            "",
        ),
        (
            "authority url",
            text(POD, Some("image = \"a\"\nauthority_url = \"not a url\"")),
            "authority_url `not a url` is not an https:// URL",
            "",
        ),
        (
            "writable",
            text(
                &format!("{POD}\nwritable = [\"/srv\"]"),
                Some("image = \"a\""),
            ),
            "a pod cannot have them",
            "",
        ),
        (
            "no storage",
            text(POD, Some("image = \"a\"\nstorage = \"0Gi\"")),
            "storage `0Gi` must be more than nothing",
            "",
        ),
        (
            "image with a space",
            text(POD, Some("image = \"agent test\"")),
            "holds white space",
            "",
        ),
        (
            "env name",
            text(
                &format!("{POD}\nenv = {{ \"BAD KEY\" = \"x\" }}"),
                Some("image = \"a\""),
            ),
            "env `BAD KEY` is not a variable name",
            "",
        ),
        (
            "env of Flotilla's",
            text(
                &format!("{POD}\nenv = {{ FLOTILLA_SERVER = \"x\" }}"),
                Some("image = \"a\""),
            ),
            "env `FLOTILLA_SERVER` is set by Flotilla",
            "",
        ),
        (
            "unknown key",
            text(POD, Some("image = \"a\"\nreplicas = 2")),
            "unknown field `replicas`",
            "",
        ),
    ];
    for (name, t, expected, at) in cases {
        let e = load(t)
            .err()
            .unwrap_or_else(|| panic!("{name}: loaded:\n{t}"));
        assert!(e.contains(expected), "{name}: {e}");
        // Every error names where: `sessions.toml: LINE:COLUMN: …`.
        let located = e
            .split("sessions.toml: ")
            .nth(1)
            .and_then(|r| r.split(": ").next())
            .is_some_and(|lc| {
                lc.split(':').count() == 2 && lc.split(':').all(|n| n.parse::<u32>().is_ok())
            });
        assert!(located, "{name}: no line:column in {e}");
        if !at.is_empty() {
            assert!(e.contains(&format!("sessions.toml: {at}: ")), "{name}: {e}");
        }
    }
}
