//! The simulated device plugin (`OFFLOAD_PLUGINS=sim`): a device that runs
//! the same images as the host plugin (x86_64 ELF, host kernels) but looks
//! like a discrete accelerator to the faces (its memory is not declared
//! shared with the host), and fails on request, so every error path of every
//! face can be exercised in CI without hardware.
//!
//! * Faults (`OFFLOAD_SIM_FAULTS`): a comma-separated list of
//!   `OP:N` (fail the Nth operation of that kind, counted from 1 per process)
//!   or `OP:N+` (fail the Nth and every later one). Operations: `init`,
//!   `alloc`, `free`, `load` (program load), `queue` (queue creation),
//!   `copy` (any copy), `h2d`, `d2h`, `d2d`, `fill`, `launch`, `sync`.
//!   Example: `OFFLOAD_SIM_FAULTS=alloc:3,launch:1+`.
//! * Timing: `OFFLOAD_SIM_LATENCY_US` (added to every queue operation) and
//!   `OFFLOAD_SIM_BANDWIDTH_MBS` (copies take `bytes / bandwidth`).
//! * `OFFLOAD_SIM_DEVICES=N` devices (default 1).
//!
//! Only initialises when `OFFLOAD_PLUGINS` names it.

mod device;
mod faults;
mod queue;

use std::sync::Arc;

use offload_core::plugin::{self, Plugin};
use offload_core::{Config, Error, PluginEntry, Result};

pub use faults::{FaultPlan, Op};

/// The plugin's entry for [`offload_core::Runtime::new`].
pub const ENTRY: PluginEntry = PluginEntry {
    name: "sim",
    create,
    opt_in: true,
};

fn create(_config: &Config) -> Result<Box<dyn Plugin>> {
    let plan = FaultPlan::from_env()?;
    let devices = std::env::var("OFFLOAD_SIM_DEVICES")
        .ok()
        .map(|v| {
            v.trim().parse::<usize>().map_err(|_| {
                Error::invalid_argument(format!("OFFLOAD_SIM_DEVICES={v} is not a number"))
            })
        })
        .transpose()?
        .unwrap_or(1);
    Ok(Box::new(SimPlugin {
        plan: Arc::new(plan),
        devices,
    }))
}

pub struct SimPlugin {
    plan: Arc<FaultPlan>,
    devices: usize,
}

impl Plugin for SimPlugin {
    fn name(&self) -> &'static str {
        "sim"
    }
    fn init(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        self.plan.check(Op::Init)?;
        let facts = offload_plugin_host::MachineFacts::read();
        Ok((0..self.devices)
            .map(|i| {
                Arc::new(device::SimDevice::new(i, &facts, self.plan.clone()))
                    as Arc<dyn plugin::Device>
            })
            .collect())
    }
}
