//! Templates: typed recipes that supply a component's command, endpoints and probes
//! from a few parameters, so nobody hand-writes what every llama.cpp user writes.
//!
//! Built-in templates have Rust parameter types (their JSON Schemas come from
//! [`builtin_param_schema`]). User templates are TOML or JSON files next to the
//! inventory ([`TemplateFile`]) declaring typed parameters and a body in which
//! `${params.NAME}` is substituted.

use crate::inventory::{
    AdapterKind, HttpCheck, Owner, ProbeSpec, StopSpec, TunnelDirection, TunnelSpec,
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

fn push_opt<T: ToString>(argv: &mut Vec<String>, flag: &str, v: &Option<T>) {
    if let Some(v) = v {
        argv.push(flag.into());
        argv.push(v.to_string());
    }
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
}

impl OllamaParams {
    fn default_port() -> Port {
        Port(11434)
    }
    fn default_binary() -> String {
        "ollama".into()
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

/// Expands a built-in template from its parameters (a table node).
///
/// # Errors
/// A [`DecodeError`] at the offending parameter (unknown, missing or mistyped).
///
/// # Panics
/// If `name` is not a built-in (check [`is_builtin`] first).
pub fn expand_builtin(name: &str, params: &Node) -> Result<TemplateOutput, DecodeError> {
    let mut out = TemplateOutput::default();
    match name {
        "llama-server" => {
            let p: LlamaServerParams = from_node(params)?;
            let mut argv = vec![
                p.binary.clone(),
                "--model".into(),
                p.model.clone(),
                "--host".into(),
                p.bind.clone(),
                "--port".into(),
                p.port.0.to_string(),
            ];
            push_opt(&mut argv, "--ctx-size", &p.ctx_size);
            push_opt(&mut argv, "--n-gpu-layers", &p.n_gpu_layers);
            push_opt(&mut argv, "--threads", &p.threads);
            push_opt(&mut argv, "--parallel", &p.parallel);
            push_opt(&mut argv, "--alias", &p.alias);
            if p.embeddings {
                argv.push("--embeddings".into());
            }
            push_opt(&mut argv, "--pooling", &p.pooling.map(Pooling::as_str));
            argv.extend(p.extra_args.iter().cloned());
            out.command = Some(argv);
            out.endpoints
                .insert("http".into(), http_url(&p.bind, p.port));
            out.readiness = Some(http_probe("/health", 250));
            out.liveness = Some(http_probe("/health", 5000));
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
            out.endpoints
                .insert("http".into(), http_url(&p.bind, p.port));
            out.readiness = Some(http_probe("/v1/models", 250));
            out.liveness = Some(http_probe("/v1/models", 5000));
        }
        "vllm" => {
            let p: VllmParams = from_node(params)?;
            let mut argv = vec![
                p.binary.clone(),
                "serve".into(),
                p.model.clone(),
                "--host".into(),
                p.bind.clone(),
                "--port".into(),
                p.port.0.to_string(),
            ];
            push_opt(&mut argv, "--max-model-len", &p.max_model_len);
            push_opt(
                &mut argv,
                "--gpu-memory-utilization",
                &p.gpu_memory_utilization,
            );
            push_opt(&mut argv, "--served-model-name", &p.served_model_name);
            argv.extend(p.extra_args.iter().cloned());
            out.command = Some(argv);
            out.endpoints
                .insert("http".into(), http_url(&p.bind, p.port));
            out.readiness = Some(http_probe("/health", 500));
            out.liveness = Some(http_probe("/health", 5000));
        }
        "ollama" => {
            let p: OllamaParams = from_node(params)?;
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
            out.endpoints
                .insert("http".into(), http_url(&p.bind, p.port));
            out.readiness = Some(http_probe("/api/version", 250));
            out.liveness = Some(http_probe("/api/version", 5000));
        }
        "litellm" => {
            let p: LitellmParams = from_node(params)?;
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
            out.endpoints
                .insert("http".into(), http_url(&p.bind, p.port));
            out.readiness = Some(http_probe("/health/liveliness", 500));
            out.liveness = Some(http_probe("/health/liveliness", 5000));
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
