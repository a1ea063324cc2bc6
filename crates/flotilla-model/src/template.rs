//! Templates: typed recipes that supply a component's command, endpoints and probes
//! from a few parameters, so nobody hand-writes what every llama.cpp user writes.
//!
//! Built-in templates have Rust parameter types (their JSON Schemas come from
//! [`builtin_param_schema`]). User templates are TOML or JSON files next to the
//! inventory ([`TemplateFile`]) declaring typed parameters and a body in which
//! `${params.NAME}` is substituted.

use crate::diag::Code;
use crate::inventory::{
    AdapterKind, ContainerPort, ContainerSpec, ContainerVolume, GpuCount, GpuRequest, HttpCheck,
    Owner, ProbeSpec, StopSpec, TunnelDirection, TunnelSpec, VolumeType,
};
use crate::node::{from_node, DecodeError, Node};
use crate::values::EnvValue;
use crate::values::{dial_host, HumanDuration, Port, StatusRange};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a template supplies; a component's own keys override each of these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateOutput {
    /// Owner (e.g. `external-http` makes it external).
    pub owner: Option<Owner>,
    /// Adapter.
    pub adapter: Option<AdapterKind>,
    /// argv.
    pub command: Option<Vec<String>>,
    /// Environment.
    pub env: BTreeMap<String, EnvValue>,
    /// Endpoints (URL strings).
    pub endpoints: BTreeMap<String, String>,
    /// Readiness probe.
    pub readiness: Option<ProbeSpec>,
    /// Liveness probe.
    pub liveness: Option<ProbeSpec>,
    /// Stop settings.
    pub stop: Option<StopSpec>,
    /// SSH forward.
    pub tunnel: Option<TunnelSpec>,
    /// The container, for `adapter = "container"`: the project's image, the published
    /// port and the mounts the parameters name (a component's own `container` keys
    /// override these, see [`container_over`]).
    pub container: Option<ContainerSpec>,
}

/// The image llama.cpp publishes with the server alone (its `ENTRYPOINT` is
/// `/app/llama-server`): llama.cpp's docs/docker.md, "ghcr.io/ggml-org/llama.cpp:server";
/// `:server-cuda`, `:server-rocm` and `:server-vulkan` are its GPU builds (`image` param).
pub const LLAMA_CPP_IMAGE: &str = "ghcr.io/ggml-org/llama.cpp:server";
/// vLLM's OpenAI-compatible server image: vLLM's documentation, "Using Docker"
/// (`docker run --gpus all … vllm/vllm-openai:latest --model …`); its entrypoint
/// serves the model named by `--model`.
pub const VLLM_IMAGE: &str = "docker.io/vllm/vllm-openai:latest";
/// Ollama's image: Ollama's docs/docker.md (`docker run -d -v ollama:/root/.ollama -p
/// 11434:11434 --name ollama ollama/ollama`); its command is `serve`.
pub const OLLAMA_IMAGE: &str = "docker.io/ollama/ollama:latest";
/// LiteLLM's proxy image: LiteLLM's documentation, "Docker, Deployment" (`docker run
/// -v $(pwd)/litellm_config.yaml:/app/config.yaml -p 4000:4000
/// ghcr.io/berriai/litellm:main-stable --config /app/config.yaml`).
pub const LITELLM_IMAGE: &str = "ghcr.io/berriai/litellm:main-stable";

/// A template's container under a component's own `container` table: each key the
/// component sets (an image that is not empty, a list that is not empty) wins.
pub fn container_over(template: ContainerSpec, own: Option<ContainerSpec>) -> ContainerSpec {
    let Some(own) = own else {
        return template;
    };
    ContainerSpec {
        image: if own.image.is_empty() {
            template.image
        } else {
            own.image
        },
        pull: own.pull.or(template.pull),
        entrypoint: own.entrypoint.or(template.entrypoint),
        name: own.name.or(template.name),
        ports: list(own.ports, template.ports),
        volumes: list(own.volumes, template.volumes),
        user: own.user.or(template.user),
        devices: list(own.devices, template.devices),
        gpus: own.gpus.or(template.gpus),
        network: own.network.or(template.network),
        restart: own.restart.or(template.restart),
        secrets: list(own.secrets, template.secrets),
        healthcheck: own.healthcheck.or(template.healthcheck),
        stop_signal: own.stop_signal.or(template.stop_signal),
    }
}

/// `mine` unless it is empty.
fn list<T>(mine: Vec<T>, theirs: Vec<T>) -> Vec<T> {
    if mine.is_empty() {
        theirs
    } else {
        mine
    }
}

/// A container listening on `port` on all its addresses, published on `bind:port`.
fn container_on(image: String, bind: &str, port: Port) -> ContainerSpec {
    ContainerSpec {
        image,
        ports: vec![ContainerPort {
            target: port,
            published: port,
            host_ip: Some(bind.to_string()),
            protocol: None,
        }],
        ..ContainerSpec::default()
    }
}

/// A host path mounted read-only under `dir` in the container, by its file name;
/// returns the path inside.
fn mount(c: &mut ContainerSpec, host: &str, dir: &str) -> String {
    let name = host
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .unwrap_or("model");
    let inside = format!("{dir}/{name}");
    c.volumes.push(ContainerVolume {
        kind: VolumeType::Bind,
        source: host.to_string(),
        target: inside.clone(),
        read_only: true,
    });
    inside
}

/// An error at parameter `key` of `params`.
fn param_error(params: &Node, key: &str, message: String) -> DecodeError {
    DecodeError {
        code: Code::InvalidValue,
        message,
        span: params.get(key).map(|n| n.span),
        help: None,
        missing: None,
    }
}

/// Checks the parameters that only one adapter takes: `image` (containers only) and a
/// `binary` other than `default` (processes only).
fn adapter_params(
    params: &Node,
    container: bool,
    image: &Option<String>,
    binary: &str,
    default: &str,
) -> Result<(), DecodeError> {
    if image.is_some() && !container {
        return Err(param_error(
            params,
            "image",
            "parameter `image` is for adapter = \"container\"".into(),
        ));
    }
    if container && binary != default {
        return Err(param_error(
            params,
            "binary",
            format!("parameter `binary` is the program run on the host; a container runs its image's entrypoint (`{default}`): remove it, or name another image with `image`"),
        ));
    }
    Ok(())
}

/// Names and one-line descriptions of the built-in templates.
pub const BUILTIN_TEMPLATES: &[(&str, &str)] = &[
    (
        "llama-server",
        "llama.cpp's OpenAI-compatible server (`/health` answers 503 while the model loads)",
    ),
    ("mlx-lm", "mlx_lm.server on Apple silicon"),
    ("vllm", "vLLM's OpenAI-compatible server (`vllm serve`)"),
    ("ollama", "Ollama (`ollama serve`)"),
    ("litellm", "LiteLLM proxy"),
    ("ssh-tunnel", "an OpenSSH local or remote port forward"),
    (
        "external-http",
        "an HTTP service Flotilla observes but does not run",
    ),
];

fn default_bind() -> String {
    "127.0.0.1".into()
}

fn http_url(bind: &str, port: Port) -> String {
    let h = dial_host(bind);
    if h.contains(':') {
        format!("http://[{h}]:{}", port.0)
    } else {
        format!("http://{h}:{}", port.0)
    }
}

fn http_probe(path: &str, period_ms: u64) -> ProbeSpec {
    ProbeSpec {
        http: Some(HttpCheck {
            endpoint: Some("http".into()),
            url: None,
            path: Some(path.into()),
            status: None,
            body_contains: None,
            json_pointer: None,
            json_equals: None,
        }),
        period: Some(HumanDuration(std::time::Duration::from_millis(period_ms))),
        ..ProbeSpec::default()
    }
}

/// `--model MODEL --host 0.0.0.0 --port PORT`: a server in a container listens on all
/// the container's addresses (its port is published on the host's `bind`).
fn model_on_all_addresses(model: String, port: Port) -> Vec<String> {
    vec![
        "--model".into(),
        model,
        "--host".into(),
        "0.0.0.0".into(),
        "--port".into(),
        port.0.to_string(),
    ]
}

/// An HTTP server on `bind:port`: its `http` endpoint, readiness (every `ready_ms`)
/// and liveness (every 5 s) probes of `path`.
fn serves_http(out: &mut TemplateOutput, bind: &str, port: Port, path: &str, ready_ms: u64) {
    out.endpoints.insert("http".into(), http_url(bind, port));
    out.readiness = Some(http_probe(path, ready_ms));
    out.liveness = Some(http_probe(path, 5000));
}

fn push_opt<T: ToString>(argv: &mut Vec<String>, flag: &str, v: &Option<T>) {
    if let Some(v) = v {
        argv.push(flag.into());
        argv.push(v.to_string());
    }
}

/// llama-server's options after `--model`, `--host` and `--port`.
fn llama_options(argv: &mut Vec<String>, p: &LlamaServerParams) {
    push_opt(argv, "--ctx-size", &p.ctx_size);
    push_opt(argv, "--n-gpu-layers", &p.n_gpu_layers);
    push_opt(argv, "--threads", &p.threads);
    push_opt(argv, "--parallel", &p.parallel);
    push_opt(argv, "--alias", &p.alias);
    if p.embeddings {
        argv.push("--embeddings".into());
    }
    push_opt(argv, "--pooling", &p.pooling.map(Pooling::as_str));
    argv.extend(p.extra_args.iter().cloned());
}

/// Parameters of `llama-server` (llama.cpp, <https://github.com/ggml-org/llama.cpp/tree/master/tools/server>).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlamaServerParams {
    /// Path of the GGUF model file (`--model`).
    pub model: String,
    /// Listening port (`--port`), default 8080.
    #[serde(default = "LlamaServerParams::default_port")]
    pub port: Port,
    /// Listening address (`--host`), default 127.0.0.1.
    #[serde(default = "default_bind")]
    pub bind: String,
    /// Context size in tokens (`--ctx-size`).
    #[serde(default)]
    pub ctx_size: Option<u32>,
    /// Layers offloaded to the GPU (`--n-gpu-layers`).
    #[serde(default)]
    pub n_gpu_layers: Option<i32>,
    /// CPU threads (`--threads`).
    #[serde(default)]
    pub threads: Option<u32>,
    /// Parallel sequences (`--parallel`).
    #[serde(default)]
    pub parallel: Option<u32>,
    /// Model name reported to clients (`--alias`).
    #[serde(default)]
    pub alias: Option<String>,
    /// Serve `/v1/embeddings` (`--embeddings`).
    #[serde(default)]
    pub embeddings: bool,
    /// Pooling for embeddings (`--pooling`): none, mean, cls, last, rank.
    #[serde(default)]
    pub pooling: Option<Pooling>,
    /// The executable, default `llama-server` (found on PATH).
    #[serde(default = "LlamaServerParams::default_binary")]
    pub binary: String,
    /// More arguments, appended as given.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// The image, with `adapter = "container"`; default `ghcr.io/ggml-org/llama.cpp:server` (the project's own).
    #[serde(default)]
    pub image: Option<String>,
}

impl LlamaServerParams {
    fn default_port() -> Port {
        Port(8080)
    }
    fn default_binary() -> String {
        "llama-server".into()
    }
}

/// llama.cpp embedding pooling types.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// No pooling.
    None,
    /// Mean of token embeddings.
    Mean,
    /// CLS token.
    Cls,
    /// Last token.
    Last,
    /// Reranking.
    Rank,
}

impl Pooling {
    fn as_str(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }
}

/// Parameters of `mlx-lm` (`mlx_lm.server`, Apple silicon only).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MlxLmParams {
    /// Model path or Hugging Face repository (`--model`).
    pub model: String,
    /// Listening port, default 8080.
    #[serde(default = "LlamaServerParams::default_port")]
    pub port: Port,
    /// Listening address, default 127.0.0.1.
    #[serde(default = "default_bind")]
    pub bind: String,
    /// The executable, default `mlx_lm.server`.
    #[serde(default = "MlxLmParams::default_binary")]
    pub binary: String,
    /// More arguments.
    #[serde(default)]
    pub extra_args: Vec<String>,
}

impl MlxLmParams {
    fn default_binary() -> String {
        "mlx_lm.server".into()
    }
}

/// vLLM's options after the model, `--host` and `--port`.
fn vllm_options(argv: &mut Vec<String>, p: &VllmParams) {
    push_opt(argv, "--max-model-len", &p.max_model_len);
    push_opt(argv, "--gpu-memory-utilization", &p.gpu_memory_utilization);
    push_opt(argv, "--served-model-name", &p.served_model_name);
    argv.extend(p.extra_args.iter().cloned());
}

/// Parameters of `vllm` (`vllm serve`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VllmParams {
    /// Model path or Hugging Face repository.
    pub model: String,
    /// Listening port, default 8000.
    #[serde(default = "VllmParams::default_port")]
    pub port: Port,
    /// Listening address, default 127.0.0.1.
    #[serde(default = "default_bind")]
    pub bind: String,
    /// `--max-model-len`.
    #[serde(default)]
    pub max_model_len: Option<u32>,
    /// `--gpu-memory-utilization` (0–1).
    #[serde(default)]
    pub gpu_memory_utilization: Option<f64>,
    /// `--served-model-name`.
    #[serde(default)]
    pub served_model_name: Option<String>,
    /// The executable, default `vllm`.
    #[serde(default = "VllmParams::default_binary")]
    pub binary: String,
    /// More arguments.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// The image, with `adapter = "container"`; default `docker.io/vllm/vllm-openai:latest` (the project's own).
    #[serde(default)]
    pub image: Option<String>,
}

impl VllmParams {
    fn default_port() -> Port {
        Port(8000)
    }
    fn default_binary() -> String {
        "vllm".into()
    }
}

/// Parameters of `ollama` (`ollama serve`, configured through `OLLAMA_HOST`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OllamaParams {
    /// Listening port, default 11434.
    #[serde(default = "OllamaParams::default_port")]
    pub port: Port,
    /// Listening address, default 127.0.0.1.
    #[serde(default = "default_bind")]
    pub bind: String,
    /// `OLLAMA_MODELS`: where models are stored.
    #[serde(default)]
    pub models_dir: Option<String>,
    /// `OLLAMA_KEEP_ALIVE`, e.g. `"5m"`.
    #[serde(default)]
    pub keep_alive: Option<String>,
    /// The executable, default `ollama`.
    #[serde(default = "OllamaParams::default_binary")]
    pub binary: String,
    /// The image, with `adapter = "container"`; default `docker.io/ollama/ollama:latest` (the project's own).
    #[serde(default)]
    pub image: Option<String>,
}

impl OllamaParams {
    fn default_port() -> Port {
        Port(11434)
    }
    fn default_binary() -> String {
        "ollama".into()
    }
}

/// LiteLLM's environment: the master key (a secret) and the offline cost map.
fn litellm_env(out: &mut TemplateOutput, p: &LitellmParams) {
    if let Some(s) = &p.master_key_secret {
        out.env
            .insert("LITELLM_MASTER_KEY".into(), EnvValue::Secret(s.clone()));
    }
    if p.offline {
        out.env.insert(
            "LITELLM_LOCAL_MODEL_COST_MAP".into(),
            EnvValue::Literal("True".into()),
        );
    }
}

/// Parameters of `litellm` (LiteLLM proxy, `litellm --config FILE`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LitellmParams {
    /// Path of the proxy's YAML config. Upstream addresses can come from the
    /// environment (`api_base: os.environ/LLM_API_BASE`) set from `connections`.
    pub config: String,
    /// Listening port, default 4000.
    #[serde(default = "LitellmParams::default_port")]
    pub port: Port,
    /// Listening address, default 127.0.0.1.
    #[serde(default = "default_bind")]
    pub bind: String,
    /// Name of the secret holding the master key (`LITELLM_MASTER_KEY`).
    #[serde(default)]
    pub master_key_secret: Option<String>,
    /// Use the bundled model cost map instead of fetching it (`LITELLM_LOCAL_MODEL_COST_MAP`).
    #[serde(default)]
    pub offline: bool,
    /// `--num_workers`.
    #[serde(default)]
    pub num_workers: Option<u32>,
    /// The executable, default `litellm`.
    #[serde(default = "LitellmParams::default_binary")]
    pub binary: String,
    /// More arguments.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// The image, with `adapter = "container"`; default `ghcr.io/berriai/litellm:main-stable` (the project's own).
    #[serde(default)]
    pub image: Option<String>,
}

impl LitellmParams {
    fn default_port() -> Port {
        Port(4000)
    }
    fn default_binary() -> String {
        "litellm".into()
    }
}

/// Parameters of `ssh-tunnel`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SshTunnelParams {
    /// The host `ssh` connects to.
    pub via: String,
    /// The forwarded endpoint, `component.endpoint`.
    pub target: String,
    /// The port the forward listens on.
    pub listen_port: Port,
    /// Listening address, default 127.0.0.1.
    #[serde(default)]
    pub bind: Option<String>,
    /// `local` (`-L`, default) or `remote` (`-R`).
    #[serde(default)]
    pub direction: TunnelDirection,
}

/// Parameters of `external-http`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExternalHttpParams {
    /// Base URL of the service.
    pub url: String,
    /// Path probed for readiness, default `/`.
    #[serde(default)]
    pub health_path: Option<String>,
    /// Accepted statuses, default `200-299`.
    #[serde(default)]
    pub status: Option<StatusRange>,
}

/// The JSON Schema of a built-in template's parameters, or `None` for an unknown name.
pub fn builtin_param_schema(name: &str) -> Option<serde_json::Value> {
    let s = match name {
        "llama-server" => schemars::schema_for!(LlamaServerParams),
        "mlx-lm" => schemars::schema_for!(MlxLmParams),
        "vllm" => schemars::schema_for!(VllmParams),
        "ollama" => schemars::schema_for!(OllamaParams),
        "litellm" => schemars::schema_for!(LitellmParams),
        "ssh-tunnel" => schemars::schema_for!(SshTunnelParams),
        "external-http" => schemars::schema_for!(ExternalHttpParams),
        _ => return None,
    };
    Some(serde_json::to_value(s).expect("schema serialises"))
}

/// Whether `name` is a built-in template.
pub fn is_builtin(name: &str) -> bool {
    BUILTIN_TEMPLATES.iter().any(|(n, _)| *n == name)
}

/// Expands a built-in template from its parameters (a table node), for the
/// component's own `adapter`: with `container`, the AI servers' templates
/// (`llama-server`, `vllm`, `ollama`, `litellm`) run their project's image (see
/// [`LLAMA_CPP_IMAGE`] and the others), listening on all the container's addresses on
/// `port`, published on `bind:port`, with the files their parameters name mounted
/// read-only; `command` is then the arguments of the image's entrypoint.
///
/// # Errors
/// A [`DecodeError`] at the offending parameter (unknown, missing or mistyped, or for
/// another adapter), or without a place for `mlx-lm` in a container.
///
/// # Panics
/// If `name` is not a built-in (check [`is_builtin`] first).
pub fn expand_builtin(
    name: &str,
    params: &Node,
    adapter: Option<AdapterKind>,
) -> Result<TemplateOutput, DecodeError> {
    let mut out = TemplateOutput::default();
    let container = adapter == Some(AdapterKind::Container);
    match name {
        "llama-server" if container => {
            let p: LlamaServerParams = from_node(params)?;
            adapter_params(params, true, &p.image, &p.binary, "llama-server")?;
            let image = p.image.clone().unwrap_or_else(|| LLAMA_CPP_IMAGE.into());
            let mut c = container_on(image, &p.bind, p.port);
            let model = mount(&mut c, &p.model, "/models");
            let mut argv = model_on_all_addresses(model, p.port);
            llama_options(&mut argv, &p);
            out.command = Some(argv);
            out.container = Some(c);
            serves_http(&mut out, &p.bind, p.port, "/health", 250);
        }
        "llama-server" => {
            let p: LlamaServerParams = from_node(params)?;
            adapter_params(params, false, &p.image, &p.binary, "llama-server")?;
            let mut argv = vec![
                p.binary.clone(),
                "--model".into(),
                p.model.clone(),
                "--host".into(),
                p.bind.clone(),
                "--port".into(),
                p.port.0.to_string(),
            ];
            llama_options(&mut argv, &p);
            out.command = Some(argv);
            serves_http(&mut out, &p.bind, p.port, "/health", 250);
        }
        "mlx-lm" if container => {
            return Err(DecodeError {
                code: Code::InvalidValue,
                message: "template `mlx-lm` cannot run in a container: MLX needs Apple silicon's GPU (Metal), which containers do not reach".into(),
                span: None,
                help: Some("run it as a process on a darwin-aarch64 host (no `adapter`), or use the llama-server or vllm template in a container".into()),
                missing: None,
            });
        }
        "mlx-lm" => {
            let p: MlxLmParams = from_node(params)?;
            let mut argv = vec![
                p.binary.clone(),
                "--model".into(),
                p.model.clone(),
                "--host".into(),
                p.bind.clone(),
                "--port".into(),
                p.port.0.to_string(),
            ];
            argv.extend(p.extra_args.iter().cloned());
            out.command = Some(argv);
            serves_http(&mut out, &p.bind, p.port, "/v1/models", 250);
        }
        "vllm" if container => {
            let p: VllmParams = from_node(params)?;
            adapter_params(params, true, &p.image, &p.binary, "vllm")?;
            let image = p.image.clone().unwrap_or_else(|| VLLM_IMAGE.into());
            let mut c = container_on(image, &p.bind, p.port);
            // vLLM's image runs on the GPU: every GPU, as its documentation runs it.
            c.gpus = Some(GpuRequest {
                count: Some(GpuCount::All),
                ..GpuRequest::default()
            });
            // A local model directory is mounted; a Hugging Face name is passed on.
            let model = if p.model.starts_with('/') || p.model.starts_with('.') {
                mount(&mut c, &p.model, "/models")
            } else {
                p.model.clone()
            };
            let mut argv = model_on_all_addresses(model, p.port);
            vllm_options(&mut argv, &p);
            out.command = Some(argv);
            out.container = Some(c);
            serves_http(&mut out, &p.bind, p.port, "/health", 500);
        }
        "vllm" => {
            let p: VllmParams = from_node(params)?;
            adapter_params(params, false, &p.image, &p.binary, "vllm")?;
            let mut argv = vec![
                p.binary.clone(),
                "serve".into(),
                p.model.clone(),
                "--host".into(),
                p.bind.clone(),
                "--port".into(),
                p.port.0.to_string(),
            ];
            vllm_options(&mut argv, &p);
            out.command = Some(argv);
            serves_http(&mut out, &p.bind, p.port, "/health", 500);
        }
        "ollama" if container => {
            let p: OllamaParams = from_node(params)?;
            adapter_params(params, true, &p.image, &p.binary, "ollama")?;
            let image = p.image.clone().unwrap_or_else(|| OLLAMA_IMAGE.into());
            let mut c = container_on(image, &p.bind, p.port);
            // Models: the directory named, else the named volume Ollama's docs use.
            c.volumes.push(match &p.models_dir {
                Some(d) => ContainerVolume {
                    kind: VolumeType::Bind,
                    source: d.clone(),
                    target: "/root/.ollama/models".into(),
                    read_only: false,
                },
                None => ContainerVolume {
                    kind: VolumeType::Volume,
                    source: "ollama".into(),
                    target: "/root/.ollama".into(),
                    read_only: false,
                },
            });
            out.env.insert(
                "OLLAMA_HOST".into(),
                EnvValue::Literal(format!("0.0.0.0:{}", p.port.0)),
            );
            if let Some(k) = &p.keep_alive {
                out.env
                    .insert("OLLAMA_KEEP_ALIVE".into(), EnvValue::Literal(k.clone()));
            }
            out.container = Some(c);
            serves_http(&mut out, &p.bind, p.port, "/api/version", 250);
        }
        "ollama" => {
            let p: OllamaParams = from_node(params)?;
            adapter_params(params, false, &p.image, &p.binary, "ollama")?;
            out.command = Some(vec![p.binary.clone(), "serve".into()]);
            out.env.insert(
                "OLLAMA_HOST".into(),
                EnvValue::Literal(format!("{}:{}", p.bind, p.port.0)),
            );
            if let Some(d) = &p.models_dir {
                out.env
                    .insert("OLLAMA_MODELS".into(), EnvValue::Literal(d.clone()));
            }
            if let Some(k) = &p.keep_alive {
                out.env
                    .insert("OLLAMA_KEEP_ALIVE".into(), EnvValue::Literal(k.clone()));
            }
            serves_http(&mut out, &p.bind, p.port, "/api/version", 250);
        }
        "litellm" if container => {
            let p: LitellmParams = from_node(params)?;
            adapter_params(params, true, &p.image, &p.binary, "litellm")?;
            let image = p.image.clone().unwrap_or_else(|| LITELLM_IMAGE.into());
            let mut c = container_on(image, &p.bind, p.port);
            c.volumes.push(ContainerVolume {
                kind: VolumeType::Bind,
                source: p.config.clone(),
                target: "/app/config.yaml".into(),
                read_only: true,
            });
            let mut argv = vec![
                "--config".into(),
                "/app/config.yaml".into(),
                "--host".into(),
                "0.0.0.0".into(),
                "--port".into(),
                p.port.0.to_string(),
            ];
            push_opt(&mut argv, "--num_workers", &p.num_workers);
            argv.extend(p.extra_args.iter().cloned());
            out.command = Some(argv);
            litellm_env(&mut out, &p);
            out.container = Some(c);
            serves_http(&mut out, &p.bind, p.port, "/health/liveliness", 500);
        }
        "litellm" => {
            let p: LitellmParams = from_node(params)?;
            adapter_params(params, false, &p.image, &p.binary, "litellm")?;
            let mut argv = vec![
                p.binary.clone(),
                "--config".into(),
                p.config.clone(),
                "--host".into(),
                p.bind.clone(),
                "--port".into(),
                p.port.0.to_string(),
            ];
            push_opt(&mut argv, "--num_workers", &p.num_workers);
            argv.extend(p.extra_args.iter().cloned());
            out.command = Some(argv);
            litellm_env(&mut out, &p);
            serves_http(&mut out, &p.bind, p.port, "/health/liveliness", 500);
        }
        "ssh-tunnel" => {
            let p: SshTunnelParams = from_node(params)?;
            out.adapter = Some(AdapterKind::SshTunnel);
            // A local forward is ready when its socket holds a connection open: ssh
            // accepts, then closes at once when the far end cannot be reached.
            if p.direction == TunnelDirection::Local {
                if let Some((_, endpoint)) = p.target.rsplit_once('.') {
                    out.readiness = Some(ProbeSpec {
                        tcp: Some(crate::inventory::TcpCheck {
                            endpoint: Some(endpoint.to_string()),
                            address: None,
                            stays_open: Some(HumanDuration(std::time::Duration::from_millis(250))),
                        }),
                        period: Some(HumanDuration(std::time::Duration::from_secs(2))),
                        ..ProbeSpec::default()
                    });
                }
            }
            out.tunnel = Some(TunnelSpec {
                via: p.via,
                target: p.target,
                listen_port: p.listen_port,
                bind: p.bind,
                direction: p.direction,
            });
        }
        "external-http" => {
            let p: ExternalHttpParams = from_node(params)?;
            out.owner = Some(Owner::External);
            out.endpoints.insert("http".into(), p.url.clone());
            let mut probe = http_probe(p.health_path.as_deref().unwrap_or("/"), 1000);
            if let Some(h) = probe.http.as_mut() {
                h.status = p.status;
            }
            out.readiness = Some(probe);
        }
        other => panic!("`{other}` is not a built-in template"),
    }
    Ok(out)
}

/// Types a user template parameter can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    /// Any string.
    String,
    /// A file system path (a string).
    Path,
    /// An integer.
    Integer,
    /// A port, 1–65535.
    Port,
    /// `true` or `false`.
    Bool,
    /// A duration string such as `"30s"`.
    Duration,
}

/// A user template parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParamDecl {
    /// Its type.
    #[serde(rename = "type")]
    pub kind: ParamType,
    /// Its default; a parameter without one is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A user template file (`templates/<name>.toml` or `.json` next to the inventory;
/// the file name without extension is the template's name).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateFile {
    /// What it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its parameters.
    #[serde(default)]
    pub params: BTreeMap<String, ParamDecl>,
    /// Owner it gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Adapter it gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<AdapterKind>,
    /// argv, with `${params.NAME}` substituted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Environment, with `${params.NAME}` substituted in literals.
    #[serde(default)]
    pub env: BTreeMap<String, EnvValue>,
    /// Endpoints, with `${params.NAME}` substituted.
    #[serde(default)]
    pub endpoints: BTreeMap<String, String>,
    /// Readiness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<ProbeSpec>,
    /// Liveness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<ProbeSpec>,
    /// Stop settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopSpec>,
}

/// Checks a parameter value against its declared type and renders it as text.
pub fn render_param(kind: ParamType, v: &crate::node::Value) -> Result<String, String> {
    use crate::node::Value as V;
    match (kind, v) {
        (ParamType::String | ParamType::Path, V::String(s)) => Ok(s.to_string()),
        (ParamType::Integer, V::Integer(i)) => Ok(i.to_string()),
        (ParamType::Port, V::Integer(i)) if (1..=65535).contains(i) => Ok(i.to_string()),
        (ParamType::Port, V::Integer(i)) => {
            Err(format!("port {i} is out of range: a port is 1-65535"))
        }
        (ParamType::Bool, V::Bool(b)) => Ok(b.to_string()),
        (ParamType::Duration, V::String(s)) => humantime::parse_duration(s)
            .map(|_| s.to_string())
            .map_err(|e| format!("invalid duration `{s}` ({e})")),
        (k, other) => Err(format!(
            "expected {}, found {}",
            match k {
                ParamType::String => "a string",
                ParamType::Path => "a path (string)",
                ParamType::Integer => "an integer",
                ParamType::Port => "a port (integer 1-65535)",
                ParamType::Bool => "a boolean",
                ParamType::Duration => "a duration string such as \"30s\"",
            },
            other.kind()
        )),
    }
}

/// Same as [`render_param`] for a JSON default value.
pub fn render_default(kind: ParamType, v: &serde_json::Value) -> Result<String, String> {
    use crate::node::Value as V;
    let node_value = match v {
        serde_json::Value::String(s) => V::String(s.as_str().into()),
        serde_json::Value::Bool(b) => V::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => V::Integer(i),
            None => V::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::Null => V::Null,
        serde_json::Value::Array(_) => V::Array(Vec::new()),
        serde_json::Value::Object(_) => V::Table(Vec::new()),
    };
    render_param(kind, &node_value)
}

/// The JSON Schema of user template files ([`TemplateFile`]).
pub fn template_file_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(TemplateFile)).expect("schema serialises")
}
