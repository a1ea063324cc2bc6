//! What an adopt asks of the component's host: each question ([`Ask`]) is answered
//! on the host where the component runs ([`answer`]), by this process for a local
//! component and by `flotilla host serve` there for a remote one
//! ([`crate::remote::Call::Adopt`]), so that the ports, `/proc`, `systemctl` and the
//! readiness probe are those of that host (a probe of `127.0.0.1` is asked on its
//! loopback).
//!
//! The adopt record stays with the controller (the process that runs `flotilla
//! adopt`, whose `kill -9` the record is for, and whose `status` names it): every
//! ask is one idempotent step that keeps nothing on the host but what the step
//! itself changes (a stopped unit, a process run again, its output in the host's
//! `adopt/<component>.prior.log`).

use super::checks;
use super::compare::{self, Comparison};
use super::container;
use super::launchd;
use super::prior::{self, Holder, PriorError};
use super::record::{self, CheckResult, Prior};
use crate::operate::OperateError;
use crate::statedir::StateDir;
use flotilla_model::topology::Component;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One question of an adopt to the component's host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "kebab-case")]
pub enum Ask {
    /// Who holds the component's ports ([`prior::find`]) and how that differs from
    /// the declaration ([`compare::compare`]). Read-only.
    Look,
    /// The host's checks ([`checks::listening`], [`checks::readiness`]), the
    /// readiness answered with the identity of `prior`'s process when given, else
    /// of Flotilla's instance as the host's journal records it. Read-only.
    Checks {
        /// The prior owner whose process answers a `process` readiness check.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prior: Option<Prior>,
    },
    /// Stop the prior owner its own way ([`prior::stop`]).
    Stop {
        /// The prior owner, as recorded.
        prior: Prior,
    },
    /// Wait until nothing listens on the component's ports ([`prior::wait_free`]).
    WaitFree {
        /// For at most this many ms.
        within_ms: u64,
    },
    /// Wait until something listens on each of the component's ports
    /// ([`prior::wait_listening`]).
    WaitListening {
        /// For at most this many ms.
        within_ms: u64,
    },
    /// Whether the prior owner, as recorded, still runs ([`prior::still_runs`]).
    StillRuns {
        /// The prior owner, as recorded.
        prior: Prior,
    },
    /// Whether a process Flotilla started for the component (it carries the
    /// instance marker of the host's state directory) runs.
    Marked,
    /// Give the prior owner back as it was ([`prior::restore`]).
    Restore {
        /// The prior owner, as recorded.
        prior: Prior,
    },
}

impl Ask {
    /// How long answering may take at most, beyond the exchange itself: the waits
    /// it is given, or a stop's grace period and a restore's start.
    pub fn takes(&self, c: &Component) -> Duration {
        match self {
            Ask::WaitFree { within_ms } | Ask::WaitListening { within_ms } => {
                Duration::from_millis(*within_ms)
            }
            Ask::Stop { .. } => crate::adapter::stop_settings(c).1 + Duration::from_secs(30),
            Ask::Restore { .. } | Ask::Checks { .. } => Duration::from_secs(30),
            _ => Duration::ZERO,
        }
    }
}

/// What a stop or a restore did: one line, and whether it worked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// Whether it worked.
    pub ok: bool,
    /// What it did, or why it failed.
    pub says: String,
}

impl Done {
    fn of(r: Result<String, PriorError>) -> Done {
        match r {
            Ok(says) => Done { ok: true, says },
            Err(e) => Done {
                ok: false,
                says: crate::error::chain(&e),
            },
        }
    }
}

/// The host's answer to an [`Ask`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    /// To [`Ask::Look`].
    Looked {
        /// Who holds the ports.
        holder: Holder,
        /// Its differences from the declaration, and the notes.
        comparison: Comparison,
    },
    /// To [`Ask::Checks`].
    Checked {
        /// Each check and what it saw.
        checks: Vec<CheckResult>,
    },
    /// To [`Ask::Stop`].
    Stopped {
        /// What the stop did.
        done: Done,
    },
    /// To [`Ask::WaitFree`]: `None` when free, else who still holds them.
    Free {
        /// Who still holds the ports.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_by: Option<String>,
    },
    /// To [`Ask::WaitListening`].
    Listening {
        /// Whether something listens on each port.
        all: bool,
    },
    /// To [`Ask::StillRuns`] and [`Ask::Marked`].
    Runs {
        /// Whether it runs.
        runs: bool,
    },
    /// To [`Ask::Restore`].
    Restored {
        /// The prior owner as it runs now (a process run again has a new pid).
        prior: Prior,
        /// What the restore did.
        done: Done,
    },
}

/// Why an ask could not be answered (a refused stop or restore is an answer, not
/// this).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// `/proc`, `systemctl` or a signal.
    #[error(transparent)]
    Prior(#[from] PriorError),
    /// `/proc` could not be read.
    #[error(transparent)]
    Exec(#[from] crate::ExecError),
    /// The state directory, its journal or its secrets.
    #[error(transparent)]
    Operate(#[from] OperateError),
    /// A blocking task failed.
    #[error("a task failed: {0}")]
    Task(String),
}

/// Where `c` is answered: its host's state directory for its project and the
/// directory its relative paths start from.
pub struct Here<'a> {
    /// The component.
    pub component: &'a Component,
    /// The project's state directory on this host.
    pub state: &'a StateDir,
    /// Where relative paths (its `cwd`, its program) start on this host.
    pub base_dir: &'a Path,
}

impl Here<'_> {
    /// The working directory a start gives the component here.
    pub fn cwd(&self) -> PathBuf {
        match &self.component.cwd {
            Some(d) => self.base_dir.join(d),
            None => self.base_dir.to_path_buf(),
        }
    }
}

/// Runs blocking `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, HostError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HostError::Task(e.to_string()))
}

/// Answers `ask` on this host.
///
/// # Errors
/// [`HostError`]: `/proc`, `systemctl`, the journal or the secrets could not be
/// read.
pub async fn answer(ask: Ask, here: &Here<'_>) -> Result<Answer, HostError> {
    let c = here.component.clone();
    let ports = prior::declared_ports(&c);
    Ok(match ask {
        Ask::Look => {
            let (root, cwd) = (here.state.root().to_path_buf(), here.cwd());
            let c2 = c.clone();
            let cwd2 = cwd.clone();
            let holder = blocking(move || {
                if c2.container.is_some() {
                    let project = StateDir::project_of(&root)
                        .unwrap_or_else(|| crate::remote::DEFAULT_PROJECT.to_string());
                    if let Some(h) = container::find(&c2, &project)? {
                        return Ok(h);
                    }
                }
                prior::find(&c2, &root, &cwd2)
            })
            .await??;
            let me = nix::unistd::geteuid().as_raw();
            let comparison = match &holder {
                Holder::Prior { prior, listening } => {
                    compare::compare(&c, prior, listening, &cwd, me)
                }
                _ => Comparison::default(),
            };
            Answer::Looked { holder, comparison }
        }
        Ask::Checks { prior } => {
            let identity = match &prior {
                Some(Prior::Process(p))
                | Some(Prior::Unit(record::PriorUnit { main: Some(p), .. }))
                | Some(Prior::Job(record::PriorJob { main: Some(p), .. })) => {
                    crate::identity::measure(p.pid)?
                }
                Some(_) => None,
                None => {
                    let store = crate::operate::open_store(here.state)?;
                    store
                        .instance(&c.name)
                        .map_err(|source| OperateError::Store {
                            path: here.state.database(),
                            source: Box::new(source),
                        })?
                        .map(|rec| crate::identity::RuntimeIdentity::from(&rec))
                }
            };
            let c2 = c.clone();
            let mut out = blocking(move || checks::listening(&c2)).await??;
            let secrets = crate::operate::secrets(here.state)?;
            out.extend(
                checks::readiness(&c, identity, Some(here.state.log(&c.name)), &secrets).await,
            );
            Answer::Checked { checks: out }
        }
        Ask::Stop { prior } => {
            let project = StateDir::project_of(here.state.root())
                .unwrap_or_else(|| crate::remote::DEFAULT_PROJECT.to_string());
            let done = blocking(move || {
                Done::of(match &prior {
                    Prior::Container(k) => container::stop(
                        k,
                        crate::adapter::stop_settings(&c).1,
                        &crate::adapter::container::container_name(&project, &c),
                    ),
                    Prior::Job(j) => launchd::stop(j).map_err(PriorError::from),
                    other => prior::stop(other, &c),
                })
            })
            .await?;
            Answer::Stopped { done }
        }
        Ask::WaitFree { within_ms } => {
            let deadline = Instant::now() + Duration::from_millis(within_ms);
            let held = blocking(move || prior::wait_free(&ports, deadline)).await??;
            Answer::Free {
                held_by: held.err(),
            }
        }
        Ask::WaitListening { within_ms } => {
            let deadline = Instant::now() + Duration::from_millis(within_ms);
            let all = blocking(move || prior::wait_listening(&ports, deadline)).await??;
            Answer::Listening { all }
        }
        Ask::StillRuns { prior } => Answer::Runs {
            runs: blocking(move || match &prior {
                Prior::Container(k) => container::runs(k),
                Prior::Job(j) => launchd::runs(j).map_err(PriorError::from),
                other => prior::still_runs(other),
            })
            .await??,
        },
        Ask::Marked => {
            let root = here.state.root().to_path_buf();
            let name = c.name.clone();
            let runs = blocking(move || crate::process::marked_processes(&root))
                .await??
                .into_iter()
                .any(|(_, _, comp)| comp == name);
            Answer::Runs { runs }
        }
        Ask::Restore { mut prior } => {
            let log = record::prior_log(here.state, &c.name);
            let (prior, done) = blocking(move || {
                let r = match &mut prior {
                    Prior::Container(k) => container::start(k),
                    Prior::Job(j) => launchd::restore(j).map_err(PriorError::from),
                    other => prior::restore(other, &log),
                };
                (prior, Done::of(r))
            })
            .await?;
            Answer::Restored { prior, done }
        }
    })
}
