//! The AI servers' templates with `adapter = "container"`: each runs its project's
//! image (by name; nothing is pulled), its parameters becoming the image
//! entrypoint's arguments, the published port and read-only mounts; a component's own
//! `container` keys win (an image it does not name stays the template's); what has no
//! place in a container is refused at the parameter.

use flotilla_model::inventory::{GpuCount, VolumeType};
use flotilla_model::topology::{Component, Topology};
use flotilla_model::{validate, Diagnostic, Format, SourceFile, Sources};

fn topology(inventory: &str) -> Result<Topology, Vec<Diagnostic>> {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, inventory));
    validate(&sources, id, &[]).map(|v| v.topology)
}

fn component(inventory: &str, name: &str) -> Component {
    let t = topology(inventory).unwrap_or_else(|d| panic!("invalid: {d:#?}"));
    let id = t.id(name).expect("the component");
    t.component(id).clone()
}

#[test]
fn llama_server_runs_llama_cpps_server_image() {
    let c = component(
        r#"
[components.llm]
template = "llama-server"
adapter = "container"
params = { model = "models/smollm2.gguf", port = 8081, ctx_size = 2048 }
"#,
        "llm",
    );
    assert_eq!(
        c.command,
        [
            "--model",
            "/models/smollm2.gguf",
            "--host",
            "0.0.0.0",
            "--port",
            "8081",
            "--ctx-size",
            "2048"
        ]
    );
    let ctr = c.container.expect("a container");
    assert_eq!(ctr.image, "ghcr.io/ggml-org/llama.cpp:server");
    assert_eq!(ctr.ports.len(), 1);
    assert_eq!(
        (ctr.ports[0].target.0, ctr.ports[0].published.0),
        (8081, 8081)
    );
    assert_eq!(ctr.ports[0].host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(ctr.volumes.len(), 1);
    let v = &ctr.volumes[0];
    assert_eq!(
        (v.kind, v.source.as_str(), v.target.as_str(), v.read_only),
        (
            VolumeType::Bind,
            "models/smollm2.gguf",
            "/models/smollm2.gguf",
            true
        )
    );
    assert_eq!(c.endpoints["http"].url, "http://127.0.0.1:8081");
    assert!(c.readiness.is_some());
}

#[test]
fn vllm_ollama_and_litellm_run_their_projects_images() {
    let t = topology(
        r#"
[components.vllm]
template = "vllm"
adapter = "container"
params = { model = "Qwen/Qwen2.5-1.5B-Instruct", max_model_len = 8192 }

[components.ollama]
template = "ollama"
adapter = "container"
params = { keep_alive = "10m" }

[components.proxy]
template = "litellm"
adapter = "container"
params = { config = "litellm.yaml", bind = "0.0.0.0" }
"#,
    )
    .unwrap_or_else(|d| panic!("invalid: {d:#?}"));
    let get = |n: &str| t.component(t.id(n).unwrap()).clone();
    let vllm = get("vllm");
    let c = vllm.container.as_ref().unwrap();
    assert_eq!(c.image, "docker.io/vllm/vllm-openai:latest");
    assert_eq!(c.gpus.as_ref().and_then(|g| g.count), Some(GpuCount::All));
    assert_eq!(vllm.command[..2], ["--model", "Qwen/Qwen2.5-1.5B-Instruct"]);
    assert!(vllm
        .command
        .ends_with(&["--max-model-len".into(), "8192".into()]));
    assert!(c.volumes.is_empty(), "a Hugging Face name is not mounted");

    let ollama = get("ollama");
    let c = ollama.container.as_ref().unwrap();
    assert_eq!(c.image, "docker.io/ollama/ollama:latest");
    assert!(ollama.command.is_empty(), "the image's own `serve`");
    assert_eq!(c.ports[0].published.0, 11434);
    assert_eq!(c.volumes[0].source, "ollama");
    assert_eq!(c.volumes[0].target, "/root/.ollama");
    let env: Vec<(&str, String)> = ollama
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), format!("{v:?}")))
        .collect();
    assert!(
        env.iter()
            .any(|(k, v)| *k == "OLLAMA_HOST" && v.contains("0.0.0.0:11434")),
        "{env:?}"
    );

    let proxy = get("proxy");
    let c = proxy.container.as_ref().unwrap();
    assert_eq!(c.image, "ghcr.io/berriai/litellm:main-stable");
    assert_eq!(c.ports[0].host_ip.as_deref(), Some("0.0.0.0"));
    assert_eq!(c.volumes[0].target, "/app/config.yaml");
    assert_eq!(proxy.command[..2], ["--config", "/app/config.yaml"]);
}

#[test]
fn the_components_own_container_keys_win() {
    let c = component(
        r#"
[components.llm]
template = "llama-server"
adapter = "container"
params = { model = "/srv/m.gguf", image = "ghcr.io/ggml-org/llama.cpp:server-cuda" }
container = { image = "ghcr.io/ggml-org/llama.cpp:server-vulkan", pull = "missing", devices = ["/dev/dri:/dev/dri"] }
"#,
        "llm",
    )
    .container
    .unwrap();
    assert_eq!(c.image, "ghcr.io/ggml-org/llama.cpp:server-vulkan");
    assert_eq!(c.devices, ["/dev/dri:/dev/dri"]);
    assert_eq!(c.ports[0].published.0, 8080, "the template's port stays");
    assert_eq!(c.volumes[0].target, "/models/m.gguf");
    let c = component(
        r#"
[components.llm]
template = "llama-server"
adapter = "container"
params = { model = "/srv/m.gguf", image = "ghcr.io/ggml-org/llama.cpp:server-cuda" }
"#,
        "llm",
    )
    .container
    .unwrap();
    assert_eq!(c.image, "ghcr.io/ggml-org/llama.cpp:server-cuda");
}

#[test]
fn a_container_table_that_names_no_image_keeps_the_templates() {
    // The project's image, and the params' `image`, under a table without `image`.
    for (params, image) in [
        ("", "ghcr.io/ggml-org/llama.cpp:server"),
        (
            ", image = \"ghcr.io/ggml-org/llama.cpp:server-cuda\"",
            "ghcr.io/ggml-org/llama.cpp:server-cuda",
        ),
    ] {
        let c = component(
            &format!(
                "[components.llm]\ntemplate = \"llama-server\"\nadapter = \"container\"\nparams = {{ model = \"/srv/m.gguf\"{params} }}\n[components.llm.container]\nname = \"llm-gpu\"\npull = \"missing\"\n"
            ),
            "llm",
        )
        .container
        .unwrap();
        assert_eq!(c.image, image);
        assert_eq!(c.name.as_deref(), Some("llm-gpu"));
        assert_eq!(c.pull, Some(flotilla_model::inventory::PullPolicy::Missing));
        assert_eq!(c.ports[0].published.0, 8080, "the template's port stays");
    }
    // Without a template, the image is required, at the table.
    let (m, line, col) = one_error(
        "[components.web]\nadapter = \"container\"\n[components.web.container]\nname = \"web\"\n",
    );
    assert_eq!(m, "component `web`: missing required key `image`");
    assert_eq!((line, col), (3, 1));
    let (m, line, col) =
        one_error("[components.web]\nadapter = \"container\"\ncontainer = { name = \"web\" }\n");
    assert_eq!(m, "component `web`: missing required key `image`");
    assert_eq!((line, col), (3, 13));
}

/// The one error of `inventory`: its message and its line:column.
fn one_error(inventory: &str) -> (String, usize, usize) {
    let mut sources = Sources::new();
    let id = sources.add(SourceFile::new("flotilla.toml", Format::Toml, inventory));
    let diags = match validate(&sources, id, &[]) {
        Ok(_) => panic!("valid:\n{inventory}"),
        Err(d) => d,
    };
    let errors: Vec<_> = diags
        .iter()
        .filter(|d| d.severity == flotilla_model::Severity::Error)
        .collect();
    assert_eq!(errors.len(), 1, "{diags:#?}");
    let loc = errors[0].locate(&sources);
    let v = serde_json::to_value(&loc).unwrap();
    (
        errors[0].message.clone(),
        v["location"]["start"]["line"].as_u64().unwrap() as usize,
        v["location"]["start"]["column"].as_u64().unwrap() as usize,
    )
}

#[test]
fn what_has_no_place_in_a_container_is_refused_at_the_parameter() {
    let (m, line, col) = one_error(
        "[components.llm]\ntemplate = \"llama-server\"\nadapter = \"container\"\nparams = { model = \"m.gguf\", binary = \"/opt/llama-server\" }\n",
    );
    assert!(
        m.contains("parameter `binary` is the program run on the host"),
        "{m}"
    );
    assert_eq!((line, col), (4, 39));
    let (m, line, col) = one_error(
        "[components.llm]\ntemplate = \"llama-server\"\nparams = { model = \"m.gguf\", image = \"x:1\" }\n",
    );
    assert!(
        m.contains("parameter `image` is for adapter = \"container\""),
        "{m}"
    );
    assert_eq!((line, col), (3, 38));
    let (m, _, _) = one_error(
        "[components.mlx]\ntemplate = \"mlx-lm\"\nadapter = \"container\"\nparams = { model = \"mlx-community/x\" }\n",
    );
    assert!(m.contains("cannot run in a container"), "{m}");
}
