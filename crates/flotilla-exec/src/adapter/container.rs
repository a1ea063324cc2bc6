//! Container components (adapter `container`): containers run by a container engine
//! through the Docker Engine API.
//!
//! This build knows the adapter by name but does not drive an engine yet: every
//! mutating verb answers that, naming the component.

use super::{Adapter, Launch, Launched, Stopped};
use crate::error::ExecError;
use flotilla_model::inventory::AdapterKind;
use flotilla_model::topology::Component;
use flotilla_store::InstanceRecord;

/// The container adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Container;

fn unavailable(c: &Component) -> ExecError {
    ExecError::Adapter {
        component: c.name.clone(),
        message: "the container adapter cannot reach an engine in this build".into(),
    }
}

impl Adapter for Container {
    fn kind(&self) -> Option<AdapterKind> {
        Some(AdapterKind::Container)
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        Err(unavailable(&launch.component))
    }

    fn stop(&self, c: &Component, _: Option<&InstanceRecord>) -> Result<Stopped, ExecError> {
        Err(unavailable(c))
    }
}
