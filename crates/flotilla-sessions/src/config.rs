//! `sessions.toml`: the configuration of agent sessions on the authority (repositories,
//! the runtime, the gate, alerts, the executor, privileges, egress, retention), read
//! and checked at start with errors that say file:line:column.

use crate::alerts::Matcher;
use crate::executor::Allowlist;
use crate::output;
use crate::policy::{AlwaysAsk, Policy};
use crate::rules::Rules;
use crate::runtime::{Network, RuntimeKind};
use crate::Mode;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Where session trees, agents' homes and mirrors live unless `dir` says otherwise.
pub const DEFAULT_SESSIONS_DIR: &str = "/var/lib/flotilla/sessions";

/// The sessions configuration file in the authority's directory.
pub const SESSIONS_CONFIG_FILE: &str = "sessions.toml";

/// `sessions.toml`: what the authority needs to run agent sessions. Absent file:
/// sessions are off (every session route answers 409 saying so).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// Where session trees, agents' homes and outputs live (default:
    /// `<authority dir>/sessions`). Must be traversable by [`RuntimeConfig::user`].
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// The runtime.
    pub runtime: RuntimeConfig,
    /// Repositories sessions may work on, by name.
    #[serde(default)]
    pub repos: BTreeMap<String, RepoConfig>,
    /// The gate's rules.
    #[serde(default)]
    pub gate: GateConfig,
    /// Sessions opened by alerts.
    #[serde(default)]
    pub alerts: Option<AlertsConfig>,
    /// The executor.
    #[serde(default)]
    pub executor: ExecutorConfig,
    /// What a runtime reaches with `[runtime] network = "proxy"` (the default).
    #[serde(default)]
    pub egress: EgressConfig,
    /// Who the authority's pieces run as ([`crate::privsep`]).
    #[serde(default)]
    pub privileges: PrivilegesConfig,
    /// How often runtimes are reconciled on their own (default 60 s), besides
    /// every read.
    #[serde(default = "default_reconcile", with = "humantime_serde_compat")]
    pub reconcile_every: Duration,
    /// Tool and executor output beyond this many bytes is capped (default 16 KiB).
    #[serde(default = "default_cap")]
    pub output_cap: usize,
    /// When sessions and mirrors are deleted on their own
    /// ([`the authority's session cleanup`]).
    #[serde(default)]
    pub retention: RetentionConfig,
}

/// `[retention]` of `sessions.toml`: automatic, measured cleanup.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// A session whose runtime does not run and whose last activity (its last
    /// event, or its document's last update) is older than this is deleted, with
    /// its files, on the reconciler's next pass (e.g. `"30d"`; at least 1 s).
    /// Absent (the default): sessions are only deleted by `flotilla session
    /// delete`.
    #[serde(default, with = "humantime_serde_compat::option")]
    pub after: Option<Duration>,
    /// A mirror no session pins is removed once it has not been used (fetched,
    /// pinned, unpinned) for this long (default 1 day).
    #[serde(default = "default_mirror_grace", with = "humantime_serde_compat")]
    pub mirror_grace: Duration,
}

fn default_mirror_grace() -> Duration {
    Duration::from_secs(24 * 3600)
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            after: None,
            mirror_grace: default_mirror_grace(),
        }
    }
}

fn default_reconcile() -> Duration {
    Duration::from_secs(60)
}

fn default_cap() -> usize {
    output::DEFAULT_CAP
}

/// `[runtime]` of `sessions.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Where runtimes run: `local` (a bubblewrap sandbox on the authority's host,
    /// the default) or `kubernetes` (one Pod per runtime, `[runtime.kubernetes]`).
    #[serde(default)]
    pub kind: RuntimeKind,
    /// `[runtime.kubernetes]`: the cluster and the pods, with `kind = "kubernetes"`.
    #[serde(default)]
    pub kubernetes: Option<KubernetesRuntimeConfig>,
    /// The Claude Code executable (absolute; default `claude` found on `PATH`).
    #[serde(default)]
    pub claude: Option<PathBuf>,
    /// No longer taken: each session runs as a uid of its own from
    /// [`RuntimeConfig::uids`]. A file that still sets it is refused, saying so.
    #[serde(default)]
    pub user: Option<String>,
    /// The uids sessions run as, one per session (`"FIRST-LAST"`, default
    /// `"61184-65519"`, systemd's `DynamicUser` range): allocated at a session's
    /// first boot, the lowest free one that no account of this host has; the
    /// session's gid is the same number. Never root, never a shared account.
    #[serde(default = "default_uids")]
    pub uids: String,
    /// A runtime that has written nothing and asked nothing for this long is torn
    /// down (default 10 min); the next message boots a new one.
    #[serde(default = "default_idle", with = "humantime_serde_compat")]
    pub idle_timeout: Duration,
    /// The sandbox's network: `proxy` (the default: none of its own; the model API,
    /// `[egress] allow` and the authority through the authority), `host` or `none`.
    #[serde(default)]
    pub network: Network,
    /// Environment given to the agent (its model API's URL and key…); nothing
    /// else of the authority's environment reaches it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// More paths the agent may write (e.g. a remote on this host).
    #[serde(default)]
    pub writable: Vec<PathBuf>,
    /// More arguments for Claude Code (e.g. `--model`).
    #[serde(default)]
    pub args: Vec<String>,
    /// At most this many runtimes run at once (default 4); more sessions' messages
    /// wait (`waiting_for_capacity`) until one ends.
    #[serde(default = "default_max_runtimes")]
    pub max_runtimes: usize,
}

/// `[runtime.kubernetes]` of `sessions.toml`: where sessions' pods run and what
/// they run. The image must hold Claude Code, `git`, `/bin/sh` and this version
/// of `flotilla` (the gate's hook, and the pod's init and agent wrapper).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesRuntimeConfig {
    /// The kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Its context (default: its current context).
    #[serde(default)]
    pub context: Option<String>,
    /// The namespace of the sessions' pods, Secrets and claims (default `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The pods' image (`registry/repository:tag` or `…@sha256:…`).
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never` (default: Kubernetes' own).
    #[serde(default)]
    pub image_pull_policy: Option<String>,
    /// `flotilla` inside the image (absolute; default `/usr/local/bin/flotilla`).
    #[serde(default = "default_pod_flotilla")]
    pub flotilla: PathBuf,
    /// Claude Code inside the image (absolute; default `/usr/local/bin/claude`).
    #[serde(default = "default_pod_claude")]
    pub claude: PathBuf,
    /// The authority's URL as the pods reach it (default: the authority's own
    /// `https://IP:PORT`); its certificate must name the host.
    #[serde(default)]
    pub authority_url: Option<String>,
    /// The size of each session's PersistentVolumeClaim (its tree and home), a
    /// Kubernetes quantity (default `1Gi`).
    #[serde(default = "default_storage")]
    pub storage: String,
    /// The claims' StorageClass (default: the cluster's default class).
    #[serde(default)]
    pub storage_class: Option<String>,
    /// The pods' node selector.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// How long a pod's init container keeps trying to reach the authority for the
    /// session's tree (it may be restarting) before the runtime fails (default 2
    /// min).
    #[serde(default = "default_authority_wait", with = "humantime_serde_compat")]
    pub authority_wait: Duration,
}

fn default_authority_wait() -> Duration {
    Duration::from_secs(120)
}

fn default_namespace() -> String {
    "default".into()
}

fn default_pod_flotilla() -> PathBuf {
    PathBuf::from("/usr/local/bin/flotilla")
}

fn default_pod_claude() -> PathBuf {
    PathBuf::from("/usr/local/bin/claude")
}

fn default_storage() -> String {
    "1Gi".into()
}

fn default_max_runtimes() -> usize {
    4
}

fn default_uids() -> String {
    format!("{}-{}", DEFAULT_UIDS.0, DEFAULT_UIDS.1)
}

/// The default range of session uids: systemd's `DynamicUser` range
/// (<https://systemd.io/UIDS-GIDS/>).
pub const DEFAULT_UIDS: (u32, u32) = (61184, 65519);

/// Parses `[runtime] uids` (`"FIRST-LAST"`, inclusive, `0 < FIRST <= LAST`).
///
/// # Errors
/// What is wrong, as a sentence.
pub fn parse_uids(text: &str) -> Result<(u32, u32), String> {
    let (a, b) = text
        .split_once('-')
        .ok_or_else(|| format!("`{text}` is not a range FIRST-LAST (e.g. \"61184-65519\")"))?;
    let num = |x: &str| {
        x.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{text}`: `{x}` is not a uid"))
    };
    let (a, b) = (num(a)?, num(b)?);
    if a == 0 || a > b {
        return Err(format!(
            "`{text}`: the range must start above 0 (root) and not end before it starts"
        ));
    }
    if b >= 65534 && a <= 65534 {
        return Err(format!(
            "`{text}` holds 65534 (`nobody`, shared by other daemons)"
        ));
    }
    Ok((a, b))
}

fn default_idle() -> Duration {
    Duration::from_secs(600)
}

/// `[repos.<name>]` of `sessions.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoConfig {
    /// Where to fetch it from (any URL or path `git clone` takes).
    pub url: String,
    /// The commit, branch or tag sessions start from (default: its HEAD).
    #[serde(default)]
    pub base: Option<String>,
}

/// `[gate]` of `sessions.toml`: Claude Code permission rules and the always-ask
/// list (default: [`AlwaysAsk::default_list`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// Commands no mode may run without a human's answer.
    #[serde(default)]
    pub always_ask: Option<Vec<String>>,
    /// Allow rules.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Ask rules.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Deny rules.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// `[alerts]` of `sessions.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// The repository alert sessions work on.
    pub repo: String,
    /// Alertmanager matchers an alert's own labels must all match (default
    /// `severity="critical"`).
    #[serde(default)]
    pub matchers: Option<Vec<String>>,
    /// The mode of alert sessions (default `default`).
    #[serde(default)]
    pub mode: Mode,
}

/// `[executor]` of `sessions.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorConfig {
    /// Argv prefixes run at once (default: [`Allowlist::default_reads`]).
    #[serde(default)]
    pub allow: Option<Vec<Vec<String>>>,
    /// How long one command may run (default 60 s).
    #[serde(default, with = "humantime_serde_compat::option")]
    pub timeout: Option<Duration>,
    /// At most this many commands run at once (default 4); more are refused (429).
    #[serde(default = "default_max_running")]
    pub max_running: usize,
    /// At most this many of them for one session (default 2): one session's
    /// long reads (`journalctl -f` until the timeout) cannot hold every slot.
    #[serde(default = "default_max_running_per_session")]
    pub max_running_per_session: usize,
}

fn default_max_running() -> usize {
    4
}

fn default_max_running_per_session() -> usize {
    2
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            allow: None,
            timeout: None,
            max_running: default_max_running(),
            max_running_per_session: default_max_running_per_session(),
        }
    }
}

/// `[privileges]` of `sessions.toml`: the users of the authority's pieces
/// ([`crate::privsep`]); each a name or a number (uid = gid).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivilegesConfig {
    /// The API process (HTTP, database, CA key): never root, never a session uid
    /// (default `"61183"`, just below the session range).
    #[serde(default = "default_api_user")]
    pub api_user: String,
    /// The executor (its kubeconfig, the journal): default `"61182"`, an
    /// unprivileged uid that holds nothing; name an account (its groups come with
    /// it: e.g. `systemd-journal`) that holds only what the executor's reads need.
    /// Root is refused: a compromised API could make it run anything.
    #[serde(default = "default_executor_user")]
    pub executor_user: String,
}

impl Default for PrivilegesConfig {
    fn default() -> Self {
        PrivilegesConfig {
            api_user: default_api_user(),
            executor_user: default_executor_user(),
        }
    }
}

fn default_api_user() -> String {
    crate::users::DEFAULT_API_USER.into()
}

fn default_executor_user() -> String {
    crate::users::DEFAULT_EXECUTOR_USER.into()
}

/// `[egress]` of `sessions.toml`: what a runtime reaches with `network = "proxy"`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressConfig {
    /// Destinations a runtime may open with HTTP `CONNECT` (`HTTPS_PROXY`):
    /// `host` (port 443), `host:port`, `*.domain` (its subdomains); nothing else.
    #[serde(default)]
    pub allow: Vec<String>,
    /// The model API, reached with the credential injected by the authority.
    #[serde(default)]
    pub model: Option<ModelConfig>,
}

/// `[egress.model]` of `sessions.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The model API's base URL (`https://api.anthropic.com`); the agent's
    /// `ANTHROPIC_BASE_URL` points at the authority's relay instead.
    pub url: String,
    /// A file holding the credential (read at start; keep it 0600, root's). The
    /// agent holds a placeholder.
    pub key_file: PathBuf,
    /// The header carrying it: `x-api-key` (the default, Anthropic's) or
    /// `authorization` (sent as `Bearer KEY`).
    #[serde(default = "default_key_header")]
    pub header: String,
}

fn default_key_header() -> String {
    "x-api-key".into()
}

/// `humantime` durations in TOML strings (`"60s"`, `"10m"`).
mod humantime_serde_compat {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(|_| {
            serde::de::Error::custom(format!(
                "`{s}` is not a duration (e.g. \"500ms\", \"60s\", \"10m\")"
            ))
        })
    }
    pub mod option {
        use super::*;
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            super::deserialize(d).map(Some)
        }
    }
}

/// Why `sessions.toml` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SessionsConfigError {
    /// It cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not valid (the message gives line and column).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What and where.
        message: String,
    },
}

impl SessionsConfig {
    /// Reads and checks `path` (TOML): rules, always-ask entries, matchers and
    /// the executor's allowlist parse; the runtime user exists.
    ///
    /// # Errors
    /// [`SessionsConfigError`], naming the file and line:column or the entry.
    pub fn load(path: &std::path::Path) -> Result<SessionsConfig, SessionsConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| SessionsConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let invalid = |message: String| SessionsConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let config: SessionsConfig = toml::from_str(&text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("{line}:{col}: ")
                })
                .unwrap_or_default();
            invalid(format!("{at}{}", e.message()))
        })?;
        // Past the syntax, each error names where its value is (line:column).
        let at = |needle: &str| -> String {
            // A quoted value, else a key at the start of a line, else anywhere.
            let key_at = || {
                let mut offset = 0;
                for line in text.split_inclusive('\n') {
                    let t = line.trim_start();
                    if t.strip_prefix(needle)
                        .is_some_and(|r| r.trim_start().starts_with('='))
                    {
                        return Some(offset + (line.len() - t.len()));
                    }
                    offset += line.len();
                }
                None
            };
            text.find(&format!("{needle:?}"))
                .or_else(key_at)
                .or_else(|| text.find(needle))
                .map(|i| {
                    let before = &text[..i];
                    let line = before.matches('\n').count() + 1;
                    let col = before.len() - before.rfind('\n').map_or(0, |j| j + 1) + 1;
                    format!("{line}:{col}: ")
                })
                .unwrap_or_default()
        };
        let g = &config.gate;
        for (list, rules) in [("allow", &g.allow), ("ask", &g.ask), ("deny", &g.deny)] {
            for r in rules {
                let one = [r.clone()];
                let (a, k, d) = match list {
                    "allow" => (&one[..], &[][..], &[][..]),
                    "ask" => (&[][..], &one[..], &[][..]),
                    _ => (&[][..], &[][..], &one[..]),
                };
                Rules::parse(a, k, d)
                    .map_err(|e| invalid(format!("{}[gate] {list}: {e}", at(r))))?;
            }
        }
        if let Some(list) = &g.always_ask {
            for entry in list {
                AlwaysAsk::new(vec![entry.clone()])
                    .map_err(|e| invalid(format!("{}[gate] always_ask: {e}", at(entry))))?;
            }
        }
        config.policy().map_err(invalid)?;
        if let Some(list) = config.alerts.as_ref().and_then(|a| a.matchers.as_ref()) {
            for m in list {
                Matcher::parse(m)
                    .map_err(|e| invalid(format!("{}[alerts] matcher `{m}`: {e}", at(m))))?;
            }
        }
        if let Some(list) = &config.executor.allow {
            for entry in list {
                Allowlist::new(vec![entry.clone()]).map_err(|e| {
                    invalid(format!(
                        "{}[executor] allow: {e}",
                        at(entry.first().map_or("[executor]", String::as_str))
                    ))
                })?;
            }
        }
        if let Some(a) = &config.alerts {
            if !config.repos.contains_key(&a.repo) {
                return Err(invalid(format!(
                    "{}[alerts] repo `{}` is not one of [repos]",
                    at(&a.repo),
                    a.repo
                )));
            }
        }
        match (config.runtime.kind, &config.runtime.kubernetes) {
            (RuntimeKind::Kubernetes, None) => {
                return Err(invalid(format!(
                    "{}[runtime] kind = \"kubernetes\" needs a [runtime.kubernetes] table (image, namespace…)",
                    at("kind")
                )));
            }
            (RuntimeKind::Local, Some(_)) => {
                return Err(invalid(format!(
                    "{}[runtime.kubernetes] is set but [runtime] kind is \"local\": set kind = \"kubernetes\", or remove the table",
                    at("[runtime.kubernetes]")
                )));
            }
            (RuntimeKind::Kubernetes, Some(k)) => {
                if config.runtime.network != Network::Host {
                    let written = text
                        .lines()
                        .any(|l| l.trim_start().starts_with("network") && l.contains('='));
                    let what = if written {
                        format!(
                            "network = \"{}\" is the local sandbox's",
                            serde_json::to_value(config.runtime.network)
                                .ok()
                                .and_then(|v| v.as_str().map(String::from))
                                .unwrap_or_default()
                        )
                    } else {
                        "network is not set, and its default (`proxy`) is the local sandbox's"
                            .to_string()
                    };
                    return Err(invalid(format!(
                        "{}[runtime] {what}: a pod has the cluster's network, so set network = \"host\" (a NetworkPolicy is the cluster's to set)",
                        at(if written { "network" } else { "kind" }),
                    )));
                }
                use flotilla_model::kube_names::{dns_label, is_quantity, label_key, label_value};
                let table = "[runtime.kubernetes]";
                if let Err(why) = dns_label(&k.namespace) {
                    return Err(invalid(format!(
                        "{}{table} namespace `{}` {why} (a DNS-1123 label)",
                        at(&k.namespace),
                        k.namespace
                    )));
                }
                if !is_quantity(&k.storage) {
                    return Err(invalid(format!(
                        "{}{table} storage `{}` is not a Kubernetes quantity (e.g. \"5Gi\")",
                        at(&k.storage),
                        k.storage
                    )));
                }
                if let Some(class) = &k.storage_class {
                    if class.is_empty() || class.split('.').any(|l| dns_label(l).is_err()) {
                        return Err(invalid(format!(
                            "{}{table} storage_class `{class}` is not a StorageClass name (a DNS subdomain); leave it out for the cluster's default",
                            at("storage_class")
                        )));
                    }
                }
                for (key, value) in &k.node_selector {
                    let why = label_key(key)
                        .map_err(|w| format!("key `{key}`: {w}"))
                        .and_then(|()| {
                            label_value(value).map_err(|w| format!("value `{value}` {w}"))
                        });
                    if let Err(why) = why {
                        return Err(invalid(format!("{}{table} node_selector {why}", at(key))));
                    }
                }
                for name in config.runtime.env.keys() {
                    let valid = name
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if !valid {
                        return Err(invalid(format!(
                            "{}[runtime] env `{name}` is not a variable name (letters, digits and `_`, not starting with a digit)",
                            at(name)
                        )));
                    }
                    if name.starts_with("FLOTILLA_") || name == "HOME" || name == "PATH" {
                        return Err(invalid(format!(
                            "{}[runtime] env `{name}` is set by Flotilla in every pod",
                            at(name)
                        )));
                    }
                }
                let number: String = k
                    .storage
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-'))
                    .collect();
                if number.starts_with('-') || !number.chars().any(|c| matches!(c, '1'..='9')) {
                    return Err(invalid(format!(
                        "{}{table} storage `{}` must be more than nothing",
                        at(&k.storage),
                        k.storage
                    )));
                }
                if k.image.chars().any(char::is_whitespace) {
                    return Err(invalid(format!(
                        "{}{table} image `{}` holds white space: not an image reference",
                        at(&k.image),
                        k.image
                    )));
                }
                if let Some(url) = &k.authority_url {
                    let host = url
                        .strip_prefix("https://")
                        .map(|r| r.split('/').next().unwrap_or(""));
                    if host.is_none_or(str::is_empty) {
                        return Err(invalid(format!(
                            "{}{table} authority_url `{url}` is not an https:// URL (how the pods reach the authority)",
                            at(url)
                        )));
                    }
                }
                for (what, p) in [("flotilla", &k.flotilla), ("claude", &k.claude)] {
                    if !p.is_absolute() {
                        return Err(invalid(format!(
                            "{}[runtime.kubernetes] {what} `{}` is not absolute",
                            at(what),
                            p.display()
                        )));
                    }
                }
                if k.image.trim().is_empty() {
                    return Err(invalid(format!(
                        "{}[runtime.kubernetes] image is empty",
                        at("image")
                    )));
                }
                if let Some(p) = &k.image_pull_policy {
                    if !["Always", "IfNotPresent", "Never"].contains(&p.as_str()) {
                        return Err(invalid(format!(
                            "{}[runtime.kubernetes] image_pull_policy `{p}` is not Always, IfNotPresent or Never",
                            at(p)
                        )));
                    }
                }
                if !config.runtime.writable.is_empty() {
                    return Err(invalid(format!(
                        "{}[runtime] writable binds paths of the authority's host into the local sandbox: a pod cannot have them",
                        at("writable")
                    )));
                }
            }
            (RuntimeKind::Local, None) => {}
        }
        for (name, repo) in &config.repos {
            if repo.url.starts_with('/') && !std::path::Path::new(&repo.url).exists() {
                return Err(invalid(format!(
                    "{}[repos.{name}] url `{}` does not exist",
                    at(&repo.url),
                    repo.url
                )));
            }
        }
        // No remote is writable from a runtime: pushes go through the authority
        // (`flotilla push`), which asks a human first. Nor is the clone cache, or any
        // session's files.
        let sessions_dir = config
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SESSIONS_DIR));
        let overlaps =
            |a: &std::path::Path, b: &std::path::Path| a.starts_with(b) || b.starts_with(a);
        for w in &config.runtime.writable {
            let shown = w.display().to_string();
            if !w.is_absolute() {
                return Err(invalid(format!(
                    "{}[runtime] writable `{shown}` is not absolute",
                    at(&shown)
                )));
            }
            // Compared as the kernel resolves them: a link to the remote is the remote.
            let real = std::fs::canonicalize(w).map_err(|e| {
                invalid(format!(
                    "{}[runtime] writable `{shown}`: {e} (it must exist: bubblewrap binds it)",
                    at(&shown)
                ))
            })?;
            let resolved =
                |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or(p.to_path_buf());
            let w = &real;
            for (name, repo) in &config.repos {
                let url = repo.url.strip_prefix("file://").unwrap_or(&repo.url);
                if url.starts_with('/') && overlaps(w, &resolved(std::path::Path::new(url))) {
                    return Err(invalid(format!(
                        "{}[runtime] writable `{shown}` would let a runtime write the remote of [repos.{name}] ({url}): pushes go through the authority (`flotilla push` in the session, answered by a human)",
                        at(&shown)
                    )));
                }
            }
            if overlaps(w, &resolved(&sessions_dir)) {
                return Err(invalid(format!(
                    "{}[runtime] writable `{shown}` overlaps the sessions directory {} (the clone cache and every session's files)",
                    at(&shown),
                    sessions_dir.display()
                )));
            }
        }
        let rt = &config.runtime;
        if let Some(u) = &rt.user {
            return Err(invalid(format!(
                "{}[runtime] user `{u}`: sessions no longer share a user; each runs as a uid of its own from [runtime] uids (default \"{}\"): remove `user`",
                at(u),
                default_uids()
            )));
        }
        parse_uids(&rt.uids)
            .map_err(|e| invalid(format!("{}[runtime] uids: {e}", at(&rt.uids))))?;
        if let Some(c) = &rt.claude {
            if !c.is_absolute() || !c.is_file() {
                let shown = c.display().to_string();
                return Err(invalid(format!(
                    "{}[runtime] claude `{shown}` is not an absolute path to a file (scripts/claude-code installs Claude Code and prints its path)",
                    at(&shown)
                )));
            }
        }
        if let Some(d) = &config.dir {
            if !d.is_absolute() {
                let shown = d.display().to_string();
                return Err(invalid(format!(
                    "{}dir `{shown}` is not absolute",
                    at(&shown)
                )));
            }
        }
        if config.reconcile_every < Duration::from_millis(100) {
            return Err(invalid(format!(
                "{}reconcile_every must be at least 100ms",
                at("reconcile_every")
            )));
        }
        if rt.idle_timeout < Duration::from_secs(1) {
            return Err(invalid(format!(
                "{}[runtime] idle_timeout must be at least 1s",
                at("idle_timeout")
            )));
        }
        if rt.max_runtimes == 0 {
            return Err(invalid(format!(
                "{}[runtime] max_runtimes must be at least 1",
                at("max_runtimes")
            )));
        }
        if config
            .executor
            .timeout
            .is_some_and(|t| t < Duration::from_millis(100))
        {
            return Err(invalid(format!(
                "{}[executor] timeout must be at least 100ms",
                at("timeout")
            )));
        }
        if config.executor.max_running == 0 {
            return Err(invalid(format!(
                "{}[executor] max_running must be at least 1",
                at("max_running")
            )));
        }
        if config.executor.max_running_per_session == 0 {
            return Err(invalid(format!(
                "{}[executor] max_running_per_session must be at least 1",
                at("max_running_per_session")
            )));
        }
        for entry in &config.egress.allow {
            check_allow_entry(entry)
                .map_err(|e| invalid(format!("{}[egress] allow: {e}", at(entry))))?;
        }
        if let Some(m) = &config.egress.model {
            if !(m.url.starts_with("https://") || m.url.starts_with("http://")) {
                return Err(invalid(format!(
                    "{}[egress.model] url `{}` is not an http(s) URL",
                    at(&m.url),
                    m.url
                )));
            }
            let h = m.header.to_ascii_lowercase();
            if h != "x-api-key" && h != "authorization" {
                return Err(invalid(format!(
                    "{}[egress.model] header `{}`: `x-api-key` or `authorization`",
                    at(&m.header),
                    m.header
                )));
            }
            let shown = m.key_file.display().to_string();
            match std::fs::read_to_string(&m.key_file) {
                Ok(k) if !k.trim().is_empty() => {}
                Ok(_) => {
                    return Err(invalid(format!(
                        "{}[egress.model] key_file `{shown}` is empty",
                        at(&shown)
                    )))
                }
                Err(e) => {
                    return Err(invalid(format!(
                        "{}[egress.model] key_file `{shown}`: {e}",
                        at(&shown)
                    )))
                }
            }
        }
        if config.runtime.network == Network::Proxy {
            // No real secret inside the sandbox: a model credential goes in
            // [egress.model], where the authority injects it.
            for k in config.runtime.env.keys() {
                let upper = k.to_ascii_uppercase();
                let secret = ["_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_CREDENTIALS"]
                    .iter()
                    .any(|s| upper.ends_with(s));
                if secret {
                    return Err(invalid(format!(
                        "{}[runtime] env `{k}` looks like a secret: with network = \"proxy\" no secret enters the sandbox; put a model credential in [egress.model] key_file (the agent gets a placeholder)",
                        at(k)
                    )));
                }
            }
        }
        let p = &config.privileges;
        let (api_uid, _) = crate::users::resolve_user(&p.api_user)
            .map_err(|e| invalid(format!("{}[privileges] api_user: {e}", at(&p.api_user))))?;
        let range = parse_uids(&config.runtime.uids).unwrap_or(DEFAULT_UIDS);
        if api_uid == 0 || (range.0..=range.1).contains(&api_uid) {
            return Err(invalid(format!(
                "{}[privileges] api_user `{}` is root or a session uid: the API process runs unprivileged, as a user of its own",
                at(&p.api_user),
                p.api_user
            )));
        }
        let (executor_uid, _) = crate::users::resolve_user(&p.executor_user).map_err(|e| {
            invalid(format!(
                "{}[privileges] executor_user: {e}",
                at(&p.executor_user)
            ))
        })?;
        if executor_uid == 0
            || executor_uid == api_uid
            || (range.0..=range.1).contains(&executor_uid)
        {
            return Err(invalid(format!(
                "{}[privileges] executor_user `{}` is root, the API's user or a session uid: the executor runs whatever the API asks, so it holds only the access its reads need",
                at(&p.executor_user),
                p.executor_user
            )));
        }
        if config
            .retention
            .after
            .is_some_and(|a| a < Duration::from_secs(1))
        {
            return Err(invalid(format!(
                "{}[retention] after must be at least 1s (leave it out to keep sessions until `flotilla session delete`)",
                at("after")
            )));
        }
        if config.output_cap < 1024 {
            return Err(invalid(format!(
                "{}output_cap must be at least 1024 bytes",
                at("output_cap")
            )));
        }
        Ok(config)
    }

    pub fn policy(&self) -> Result<Policy, String> {
        let rules = Rules::parse(&self.gate.allow, &self.gate.ask, &self.gate.deny)
            .map_err(|e| format!("[gate]: {e}"))?;
        let always_ask = match &self.gate.always_ask {
            None => AlwaysAsk::default_list(),
            Some(list) => {
                AlwaysAsk::new(list.clone()).map_err(|e| format!("[gate] always_ask: {e}"))?
            }
        };
        Ok(Policy { rules, always_ask })
    }

    pub fn matchers(&self) -> Result<Vec<Matcher>, String> {
        let list = self
            .alerts
            .as_ref()
            .and_then(|a| a.matchers.clone())
            .unwrap_or_else(|| vec![r#"severity="critical""#.to_string()]);
        list.iter()
            .map(|m| Matcher::parse(m).map_err(|e| format!("[alerts] matcher `{m}`: {e}")))
            .collect()
    }
}

/// The first `name` on `PATH` that is a file.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// Checks one `[egress] allow` entry.
///
/// # Errors
/// What is wrong, as a sentence.
pub fn check_allow_entry(entry: &str) -> Result<(), String> {
    if entry.is_empty() || entry.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(format!(
            "`{entry}` is not a destination (`host`, `host:port`, `*.domain`)"
        ));
    }
    let host = match entry.rsplit_once(':') {
        Some((h, p)) => {
            p.parse::<u16>()
                .map_err(|_| format!("`{entry}`: `{p}` is not a port"))?;
            h
        }
        None => entry,
    };
    if host == "*" || host.strip_prefix("*.").is_some_and(|d| !d.contains('.')) {
        return Err(format!(
            "`{entry}` is too wide: name a domain (`*.example.com`), not every host"
        ));
    }
    Ok(())
}
