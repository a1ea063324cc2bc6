//! One module per subcommand.

pub mod apply;
pub mod completions;
pub mod down;
pub mod host;
pub mod lifecycle;
pub mod logs;
pub mod operations;
pub mod plan;
pub mod restart;
pub mod schema;
pub mod start;
pub mod status;
pub mod stop;
pub mod topology;
pub mod up;
pub mod validate;

use crate::load::{self, Loaded};
use crate::{render, Cli, EXIT_USAGE};
use flotilla_model::Validated;

/// Loads and validates the inventory; on invalid input prints the diagnostics and
/// returns the exit status to use.
pub fn topology_or_exit(cli: &Cli) -> anyhow::Result<Result<(Loaded, Validated), u8>> {
    let path = load::inventory_path(cli.file.as_deref())?;
    let mut loaded = load::load(&path)?;
    let result = std::mem::replace(&mut loaded.result, Err(Vec::new()));
    match result {
        Ok(v) => {
            render::diagnostics(&loaded.sources, &v.warnings);
            Ok(Ok((loaded, v)))
        }
        Err(diags) => {
            render::diagnostics(&loaded.sources, &diags);
            let errors = diags
                .iter()
                .filter(|d| d.severity == flotilla_model::Severity::Error)
                .count();
            eprintln!(
                "error: {} is invalid ({errors} error{})",
                path.display(),
                if errors == 1 { "" } else { "s" }
            );
            Ok(Err(EXIT_USAGE))
        }
    }
}

/// A status report and the planner's view of it.
pub type Observation = (
    flotilla_exec::observe::StatusReport,
    flotilla_model::Observed,
);

/// Observes what runs now (read-only; nothing is created when the state directory has
/// no journal yet) for `names` (all components when empty).
pub fn observe_now(
    cli: &Cli,
    topology: &flotilla_model::Topology,
    names: &[String],
) -> anyhow::Result<Observation> {
    let rt = runtime()?;
    let fleet = ssh_pool(cli, topology);
    observe_with(cli, &rt, &fleet, topology, names)
}

/// A tokio runtime for one command.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// [`observe_now`] on a given runtime and SSH connections (kept by a caller that
/// observes repeatedly, such as `status --watch`).
pub fn observe_with(
    cli: &Cli,
    rt: &tokio::runtime::Runtime,
    fleet: &flotilla_exec::ssh::Pool,
    topology: &flotilla_model::Topology,
    names: &[String],
) -> anyhow::Result<Observation> {
    let state = flotilla_exec::statedir::StateDir::resolve(cli.state_dir.as_deref())?;
    rt.block_on(async {
        let mut store = if state.database().exists() {
            flotilla_store::Store::open(&state.database())?
        } else {
            flotilla_store::Store::open_in_memory()?
        };
        let secrets = flotilla_exec::operate::secrets(&state)?;
        let remote = flotilla_exec::operate::RemoteObservation {
            transport: fleet,
            host_timeout: cli.host_timeout,
        };
        Ok(
            flotilla_exec::operate::observe(topology, &mut store, &state, &secrets, names, remote)
                .await?,
        )
    })
}

/// SSH connections to the topology's remote hosts, connecting within `--host-timeout`;
/// with `--ssh-persist`, masters kept in `<state>/run/ssh/` (created owner-only) and
/// reused across invocations.
pub fn ssh_pool(cli: &Cli, topology: &flotilla_model::Topology) -> flotilla_exec::ssh::Pool {
    let pool = flotilla_exec::ssh::Pool::new(topology.hosts.clone(), cli.host_timeout);
    let Some(idle) = cli.ssh_persist else {
        return pool;
    };
    let Ok(state) = flotilla_exec::statedir::StateDir::resolve(cli.state_dir.as_deref()) else {
        return pool;
    };
    match flotilla_exec::ssh::Persistence::in_state_dir(state.root(), idle) {
        Ok(p) => pool.persist(p),
        Err(why) => {
            eprintln!("warning: --ssh-persist: {why}; one connection per invocation");
            pool
        }
    }
}
