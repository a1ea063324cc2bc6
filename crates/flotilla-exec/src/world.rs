//! The project's world, opened once ([`World`]): its validated topology, its state
//! directory, its secrets and how its remote hosts are reached. Every face of
//! Flotilla — the CLI's verbs, and a terminal UI or a dashboard alike — opens one
//! and asks it, instead of walking state directory → connections → secrets →
//! observation itself.

use crate::hosts::{CheckReport, Finding};
use crate::observe::StatusReport;
use crate::operate::{observe, secrets, OperateError, RemoteObservation};
use crate::remote::{Call, Reply};
use crate::secrets::SecretResolver;
use crate::statedir::StateDir;
use crate::transport::Transport;
use flotilla_model::{Observed, Topology};
use flotilla_store::Store;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One project, opened: what every verb needs to observe or change it.
pub struct World {
    /// The validated topology (its `project` set).
    pub topology: Arc<Topology>,
    /// The project's state directory.
    pub state: StateDir,
    /// Secrets, from the state directory's secrets file and the environment.
    pub secrets: SecretResolver,
    /// How calls reach remote hosts (SSH, or through the authority to agents).
    pub fleet: Arc<dyn Transport>,
    /// Time allowed per remote host (connecting included).
    pub host_timeout: Duration,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("project", &self.project())
            .field("state", &self.state.root())
            .field("host_timeout", &self.host_timeout)
            .finish_non_exhaustive()
    }
}

impl World {
    /// Opens `topology`'s project: its state directory (`explicit`, else
    /// `$FLOTILLA_STATE_DIR`, XDG, `~/.local/state/flotilla`; see
    /// [`StateDir::resolve`]) and its secrets. Creates nothing.
    ///
    /// # Errors
    /// [`OperateError::StateDirUnresolved`] when the state directory cannot be
    /// resolved;
    /// [`OperateError::Secrets`] when the secrets file is unreadable or invalid.
    pub fn open(
        topology: Arc<Topology>,
        explicit: Option<&Path>,
        fleet: Arc<dyn Transport>,
        host_timeout: Duration,
    ) -> Result<World, OperateError> {
        let state = StateDir::resolve(explicit, topology.project_name())
            .map_err(OperateError::StateDirUnresolved)?;
        let secrets = secrets(&state)?;
        Ok(World {
            topology,
            state,
            secrets,
            fleet,
            host_timeout,
        })
    }

    /// The project's name.
    pub fn project(&self) -> &str {
        self.topology.project_name()
    }

    /// Observes what runs now for `names` (all components when empty): the status
    /// report and the planner's view. Read-only: with no journal yet, nothing is
    /// created.
    ///
    /// # Errors
    /// The journal's ([`OperateError::Store`]).
    pub async fn observe(
        &self,
        names: &[String],
    ) -> Result<(StatusReport, Observed), OperateError> {
        let database = self.state.database();
        // A journal that cannot be looked at is an error, never "nothing recorded":
        // that would show what runs as stopped.
        let exists = database
            .try_exists()
            .map_err(|source| OperateError::StateDir {
                path: database.clone(),
                source,
            })?;
        if !exists {
            if let Some(dir) = database.parent() {
                // The project directory is there but cannot be listed: the same.
                if let Err(source) = std::fs::read_dir(dir) {
                    if source.kind() != std::io::ErrorKind::NotFound {
                        return Err(OperateError::StateDir {
                            path: dir.to_path_buf(),
                            source,
                        });
                    }
                }
            }
        }
        let opened = if exists {
            Store::open(&database)
        } else {
            Store::open_in_memory()
        };
        let mut store = opened.map_err(|source| OperateError::Store {
            path: database.clone(),
            source: Box::new(source),
        })?;
        let remote = RemoteObservation {
            transport: self.fleet.as_ref(),
            host_timeout: self.host_timeout,
        };
        let (mut report, observed) = observe(
            &self.topology,
            &mut store,
            &self.state,
            &self.secrets,
            names,
            remote,
        )
        .await?;
        // What the agent's supervision is doing about what is down here.
        crate::supervision::annotate(
            &mut report,
            &crate::supervision::read(self.state.root()),
            crate::this_process::now_ms(),
        );
        Ok((report, observed))
    }

    /// [`World::observe`] with every stack's end-to-end readiness probes run now
    /// (`status`).
    ///
    /// # Errors
    /// As [`World::observe`].
    pub async fn status(&self, names: &[String]) -> Result<StatusReport, OperateError> {
        let mut report = self.observe(names).await?.0;
        report.stacks = crate::observe::stack_routes(&self.topology, &self.secrets, &report).await;
        Ok(report)
    }
}

impl World {
    /// The pre-flight report of each of `hosts` for `names` (every component there
    /// when empty): local hosts checked here, remote ones asked to check themselves
    /// (all at once, each within [`World::host_timeout`]). `base_dir` is the
    /// inventory's directory (relative paths are resolved against it).
    pub async fn preflight(
        &self,
        hosts: &[&str],
        names: &[String],
        base_dir: &Path,
    ) -> Vec<CheckReport> {
        let topology = &self.topology;
        let asks = hosts.iter().map(|&host| async move {
            let remote = topology.hosts.get(host).is_some_and(|h| h.is_remote());
            let findings = if !remote {
                crate::preflight::check(topology, host, names, base_dir, &self.state, &self.secrets)
            } else {
                let call = Call::Check {
                    snapshot: topology.snapshot(host),
                    names: names.to_vec(),
                };
                match self.fleet.call(host, call, self.host_timeout, None).await {
                    Ok(Reply::Checked { findings }) => findings,
                    Ok(other) => vec![Finding {
                        check: "reachable".into(),
                        ok: false,
                        saw: format!("unexpected answer {other:?}"),
                    }],
                    Err(e) => vec![Finding {
                        check: "reachable".into(),
                        ok: false,
                        saw: e.to_string(),
                    }],
                }
            };
            CheckReport {
                host: host.to_string(),
                findings,
            }
        });
        futures_util::future::join_all(asks).await
    }
}
