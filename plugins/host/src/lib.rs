//! The host plugin: the CPU of this process as offload devices.
//!
//! * Images are x86_64 (the build machine's) ELF shared objects, as clang-22
//!   links them for `-fopenmp-targets=x86_64-unknown-linux-gnu`, or plain
//!   `-shared` objects with host kernels (`include/offload/host_kernel.h`).
//!   They are loaded from memory (memfd + dlopen), leaving no file behind.
//! * Device memory is process memory; copies are `memcpy`. The plugin's
//!   queues run work when called; the core's executor in front of them makes
//!   queued work asynchronous.
//! * Packed kernels run over a grid: groups spread over a worker pool, the
//!   items of a group as plain calls or, for kernels that use work-group
//!   barriers (host_kernel.h ABI v2), as coroutines (`group.rs`).
//! * Like LLVM's host plugin it reports several devices (default 4,
//!   `OFFLOAD_HOST_DEVICES=N`); each loads its own copy of an image, so
//!   globals are per device.

mod device;
mod group;
mod image;
mod kernel;
mod memory;
mod queue;

use std::sync::Arc;

use offload_core::plugin::{self, Plugin};
use offload_core::{Config, PluginEntry, Result};

pub use device::{HostDevice, MachineFacts};
pub use kernel::{HostItem, HOST_ITEM_ABI_VERSION, MAX_KERNEL_WORDS};

/// Triple of the images this plugin runs.
pub const TARGET_TRIPLE: &str = concat!(env!("HOST_ARCH_FOR_TRIPLE"), "-unknown-linux-gnu");

/// The plugin's entry for [`offload_core::Runtime::new`].
pub const ENTRY: PluginEntry = PluginEntry {
    name: "host",
    create,
    opt_in: false,
};

fn create(config: &Config) -> Result<Box<dyn Plugin>> {
    Ok(Box::new(HostPlugin {
        devices: config.host_devices,
    }))
}

pub struct HostPlugin {
    devices: usize,
}

impl Plugin for HostPlugin {
    fn name(&self) -> &'static str {
        "host"
    }
    fn init(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        let facts = device::MachineFacts::read();
        Ok((0..self.devices)
            .map(|i| Arc::new(HostDevice::new(i, &facts)) as Arc<dyn plugin::Device>)
            .collect())
    }
}
