//! The `ssh-tunnel` adapter: an OpenSSH port forward (`ssh -N -L|-R …`, see
//! [`crate::ssh::tunnel_argv`]) run and stopped exactly like a `process` component.
//! Its readiness is proven on the forwarded socket, not by `ssh` running.

use super::process::{start_process, stop_process};
use super::{Adapter, Launch, Launched, Stopped};
use crate::error::ExecError;
use flotilla_model::inventory::AdapterKind;
use flotilla_model::topology::Component;
use flotilla_model::Topology;
use flotilla_store::InstanceRecord;

/// The `ssh-tunnel` adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct SshTunnel;

impl Adapter for SshTunnel {
    fn kind(&self) -> Option<AdapterKind> {
        Some(AdapterKind::SshTunnel)
    }

    fn argv(&self, c: &Component, topology: &Topology) -> Result<Vec<String>, String> {
        let t = c
            .tunnel
            .as_ref()
            .ok_or_else(|| format!("`{}` has no tunnel", c.name))?;
        let via = topology.hosts.get(&t.via).ok_or_else(|| {
            format!(
                "tunnel `{}` goes through host `{}`, which this host does not know",
                c.name, t.via
            )
        })?;
        Ok(crate::ssh::tunnel_argv(t, via))
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        start_process(launch)
    }

    fn stop(
        &self,
        _project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        stop_process(c, recorded)
    }
}
