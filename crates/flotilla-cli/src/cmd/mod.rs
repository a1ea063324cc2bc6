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

/// Observes what runs now (read-only; nothing is created when the state directory has
/// no journal yet) for `names` (all components when empty).
pub fn observe_now(
    cli: &Cli,
    topology: &flotilla_model::Topology,
    names: &[String],
) -> anyhow::Result<(
    flotilla_exec::observe::StatusReport,
    flotilla_model::Observed,
)> {
    let state = flotilla_exec::statedir::StateDir::resolve(cli.state_dir.as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut store = if state.database().exists() {
            flotilla_store::Store::open(&state.database())?
        } else {
            flotilla_store::Store::open_in_memory()?
        };
        let secrets = flotilla_exec::operate::secrets(&state)?;
        let fleet = fleet(cli, topology);
        let remote = flotilla_exec::operate::RemoteObservation {
            fleet: &fleet,
            host_timeout: cli.host_timeout,
        };
        Ok(
            flotilla_exec::operate::observe(topology, &mut store, &state, &secrets, names, remote)
                .await?,
        )
    })
}

/// SSH connections to the topology's remote hosts, connecting within `--host-timeout`.
pub fn fleet(cli: &Cli, topology: &flotilla_model::Topology) -> flotilla_exec::ssh::Fleet {
    flotilla_exec::ssh::Fleet::new(topology.hosts.clone(), cli.host_timeout)
}
