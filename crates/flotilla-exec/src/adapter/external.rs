//! External components (owner `external`): observed by their probes only, never
//! started, stopped or signalled (invariant 4). Every mutating verb is refused here
//! too, although the planner never asks for one.

use super::{Adapter, Launch, Launched, Stopped};
use crate::error::ExecError;
use flotilla_model::inventory::AdapterKind;
use flotilla_model::topology::Component;
use flotilla_store::InstanceRecord;

/// The observe-only adapter of external components.
#[derive(Debug, Clone, Copy, Default)]
pub struct External;

fn refuse(c: &Component) -> ExecError {
    ExecError::Adapter {
        component: c.name.clone(),
        message: "is external: never started or stopped".into(),
    }
}

impl Adapter for External {
    fn kind(&self) -> Option<AdapterKind> {
        None
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        Err(refuse(&launch.component))
    }

    fn stop(
        &self,
        _: &str,
        c: &Component,
        _: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        Err(refuse(c))
    }

    fn restart(&self, launch: &Launch, _: Option<&InstanceRecord>) -> Result<Launched, ExecError> {
        Err(refuse(&launch.component))
    }
}
