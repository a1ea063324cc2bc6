//! The sessions' state: `sessions.toml` as loaded, the gate's policy, the launcher
//! and executor, the clone cache, per-session locks, the capacity counters and the
//! live runtimes this process started.

use crate::sessions_config::*;
use flotilla_sessions::alerts::Matcher;
use flotilla_sessions::clone_cache::CloneCache;
use flotilla_sessions::executor::Allowlist;
use flotilla_sessions::policy::Policy;
use flotilla_sessions::runtime::Runtime;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The authority's sessions, when `sessions.toml` is present.
pub struct Sessions {
    pub(crate) config: SessionsConfig,
    pub(crate) policy: Arc<Policy>,
    pub(crate) matchers: Vec<Matcher>,
    pub(crate) allowlist: Allowlist,
    pub(crate) dir: PathBuf,
    /// The authority's URL as the sandbox reaches it, and its CA (PEM).
    pub(crate) url: String,
    pub(crate) ca_pem: String,
    /// The launcher and the executor.
    pub(crate) privileged: crate::privsep::Privileged,
    /// Where runtimes run (the bubblewrap sandbox, through the launcher).
    pub(crate) runtime: Arc<dyn Runtime>,
    pub(crate) flotilla_exe: PathBuf,
    pub(crate) claude: PathBuf,
    /// `[runtime] uids`, inclusive.
    pub(crate) uids: (u32, u32),
    /// What runtimes reach through the authority (`network = "proxy"`).
    pub(crate) egress: Arc<crate::egress::EgressSetup>,
    /// Held while a uid is chosen for a session (no two sessions get one).
    pub(crate) uid_allocation: tokio::sync::Mutex<()>,
    pub(crate) clones: CloneCache,
    /// One lock per session: boots and turn ends are serialised per session.
    pub(crate) locks: std::sync::Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    /// Executor runs in progress (at most `[executor] max_running`).
    pub(crate) executor_slots: tokio::sync::Semaphore,
    /// Executor runs in progress per session (at most `[executor]
    /// max_running_per_session` each).
    pub(crate) executor_running: Arc<std::sync::Mutex<HashMap<u64, usize>>>,
    /// Boots in progress (each holds a place under `max_runtimes`).
    pub(crate) booting: std::sync::Mutex<usize>,
    /// Held while a question is answered or an answer is used: one answer per
    /// question, and an answer used once.
    pub(crate) answers: tokio::sync::Mutex<()>,
    /// Live runtimes this process started: session → (boot, last activity ms).
    pub(crate) live: std::sync::Mutex<HashMap<u64, Live>>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Live {
    /// The runtime's number ([`flotilla_api::sessions::RuntimeRecord::boot`]).
    pub(crate) boot: u64,
    pub(crate) activity_ms: i64,
}

/// Where the sessions machinery is set up from (`flotilla serve`).
#[derive(Debug, Clone)]
pub struct SessionsSetup {
    /// The parsed `sessions.toml`.
    pub config: SessionsConfig,
    /// The authority's directory (the launcher hides it from runtimes).
    pub authority_dir: PathBuf,
    /// The authority's URL as seen from the sandbox (`https://127.0.0.1:<port>`).
    pub url: String,
    /// The CA (PEM) the runtime's hook pins.
    pub ca_pem: String,
    /// The launcher and the executor ([`crate::privsep::setup`]).
    pub privileged: crate::privsep::Privileged,
    /// The runtime with `[runtime] kind = "kubernetes"` (one Pod per runtime,
    /// made by the binary, which alone links a Kubernetes client); `None` for the
    /// local bubblewrap sandbox, reached through the launcher.
    pub runtime: Option<Arc<dyn Runtime>>,
}

impl Sessions {
    /// Sets up from `setup`: finds the Claude Code executable, the runtime user,
    /// and this program (run inside the sandbox as the command hook).
    ///
    /// # Errors
    /// A message when one of them cannot be found.
    pub fn new(setup: SessionsSetup) -> Result<Sessions, String> {
        let config = setup.config;
        let max_running = config.executor.max_running;
        let policy = config.policy()?;
        let matchers = config.matchers()?;
        let allowlist = match &config.executor.allow {
            None => Allowlist::default_reads(),
            Some(list) => {
                Allowlist::new(list.clone()).map_err(|e| format!("[executor] allow: {e}"))?
            }
        };
        let dir = config
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SESSIONS_DIR));
        let uids = parse_uids(&config.runtime.uids).map_err(|e| format!("[runtime] uids: {e}"))?;
        let pods = config.runtime.kubernetes.clone();
        let (claude, flotilla_exe) = match &pods {
            // The image's own, as the pods see them.
            Some(k) => (k.claude.clone(), k.flotilla.clone()),
            None => (
                match &config.runtime.claude {
                    Some(p) => p.clone(),
                    None => which("claude")
                        .ok_or("[runtime] claude is not set and `claude` is not on PATH")?,
                },
                std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?,
            ),
        };
        let runtime: Arc<dyn Runtime> =
            match (setup.runtime, &pods) {
                (Some(r), Some(_)) => r,
                (None, None) => Arc::new(flotilla_sessions::runtime::local::Local {
                    socket: setup.privileged.launcher.clone(),
                }),
                (None, Some(_)) => return Err(
                    "[runtime] kind = \"kubernetes\": this program was given no Kubernetes runtime"
                        .into(),
                ),
                (Some(_), None) => {
                    return Err("a runtime was given but [runtime] kind is \"local\"".into())
                }
            };
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(&dir)
                .map_err(|e| {
                    format!("cannot make the sessions directory {}: {e}", dir.display())
                })?;
        }
        // Every session uid must reach what the sandbox binds (bwrap runs as it):
        // checked for the first of the range (it owns none of these). Pods bind
        // nothing of this host's.
        let (uid, gid) = (uids.0, uids.0);
        let bound = [
            ("the sessions directory", &dir),
            ("this program (the gate's hook)", &flotilla_exe),
            ("Claude Code", &claude),
        ];
        for (what, p) in bound.into_iter().filter(|_| pods.is_none()) {
            if let Some(closed) = crate::privsep::closed_to(p, uid, gid) {
                return Err(format!(
                    "{what} {} cannot be reached by the sessions' uids ({}): {} is closed to them \
                     (give it o+x, or choose a path they can reach)",
                    p.display(),
                    config.runtime.uids,
                    closed.display()
                ));
            }
        }
        let api = setup
            .url
            .strip_prefix("https://")
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .ok_or_else(|| format!("the authority's URL `{}` is not https://IP:PORT", setup.url))?;
        let model = match &config.egress.model {
            None => None,
            Some(m) => Some(crate::egress::ModelUpstream {
                url: m.url.trim_end_matches('/').to_string(),
                header: m.header.to_ascii_lowercase(),
                key: std::fs::read_to_string(&m.key_file)
                    .map_err(|e| format!("[egress.model] key_file {}: {e}", m.key_file.display()))?
                    .trim()
                    .to_string(),
            }),
        };
        let egress = Arc::new(crate::egress::EgressSetup {
            allow: config.egress.allow.clone(),
            model,
            api,
        });
        Ok(Sessions {
            clones: CloneCache::new(dir.join("mirrors")),
            policy: Arc::new(policy),
            matchers,
            allowlist,
            url: setup.url,
            runtime,
            privileged: setup.privileged,
            ca_pem: setup.ca_pem,
            flotilla_exe,
            claude,
            uids,
            egress,
            uid_allocation: tokio::sync::Mutex::new(()),
            dir,
            config,
            locks: std::sync::Mutex::new(HashMap::new()),
            answers: tokio::sync::Mutex::new(()),
            booting: std::sync::Mutex::new(0),
            executor_slots: tokio::sync::Semaphore::new(max_running),
            executor_running: Arc::default(),
            live: std::sync::Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn lock_of(&self, id: u64) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("not poisoned")
            .entry(id)
            .or_default()
            .clone()
    }

    /// Whether runtime `r` still runs, measured now by the runtime that started it
    /// (its process in `/proc`, or its pod in a watch's cache).
    pub(crate) fn alive(&self, r: &flotilla_api::sessions::RuntimeRecord) -> bool {
        self.runtime.running(&super::docs::running_of(r))
    }

    pub(crate) fn session_dir(&self, id: u64) -> PathBuf {
        self.dir.join(id.to_string())
    }
}
