//! The committed JSON Schemas in `schema/` are exactly what `flotilla schema` prints,
//! so editors and CI that use them never drift from the Rust types.

mod common;

fn check(args: &[&str], file: &str) {
    let root = common::repo_root();
    let run = common::run_in(&root, args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let committed = std::fs::read_to_string(root.join("schema").join(file))
        .unwrap_or_else(|e| panic!("schema/{file}: {e}"));
    assert!(
        committed == run.stdout,
        "schema/{file} differs from `flotilla {}`; regenerate it with scripts/update-schemas",
        args.join(" ")
    );
}

#[test]
fn inventory_schema_is_committed_and_current() {
    check(&["schema"], "inventory.schema.json");
    let s: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo_root().join("schema/inventory.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(s["additionalProperties"], false);
}

#[test]
fn template_schemas_are_committed_and_current() {
    check(&["schema", "--template-file"], "template.schema.json");
    for (name, _) in flotilla_model_templates() {
        check(
            &["schema", "--template", name],
            &format!("template-{name}.params.schema.json"),
        );
    }
}

#[test]
fn unknown_template_schema_is_a_usage_error() {
    let run = common::run_in(&common::repo_root(), &["schema", "--template", "nope"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("built-in templates: llama-server"),
        "{}",
        run.stderr
    );
}

fn flotilla_model_templates() -> &'static [(&'static str, &'static str)] {
    &[
        ("llama-server", ""),
        ("mlx-lm", ""),
        ("vllm", ""),
        ("ollama", ""),
        ("litellm", ""),
        ("ssh-tunnel", ""),
        ("external-http", ""),
    ]
}
