//! The runtime: plugins, their devices, and registered binaries.

use std::sync::{Arc, Mutex};

use offload_image::DeviceImage;
use tracing::{debug_span, warn};

use crate::binary::{BinaryDescriptor, BinaryId, OffloadEntry};
use crate::config::Config;
use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::memory::{Allocation, AllocationIndex, Origin, Owner};
use crate::plugin::{AllocKind, DevicePtr, Plugin};

/// How the runtime finds a plugin: a name (for `OFFLOAD_PLUGINS`) and a
/// constructor. Faces pass the list of built-in plugins.
#[derive(Clone, Copy)]
pub struct PluginEntry {
    pub name: &'static str,
    pub create: fn(&Config) -> Result<Box<dyn Plugin>>,
    /// Initialised only when `OFFLOAD_PLUGINS` names it (test plugins).
    pub opt_in: bool,
}

/// A plugin that initialised, with the ids of its devices.
struct LoadedPlugin {
    plugin: Box<dyn Plugin>,
    devices: std::ops::Range<usize>,
}

/// A hook that failed; reported to the caller, never fatal by itself.
#[derive(Debug, Clone)]
pub struct HookFailure {
    pub plugin: &'static str,
    pub error: Error,
}

/// The core runtime: every initialised plugin and its devices.
pub struct Runtime {
    config: Config,
    plugins: Vec<LoadedPlugin>,
    devices: Vec<Arc<Device>>,
    binaries: Mutex<Vec<Arc<BinaryDescriptor<'static>>>>,
    /// Plugins that failed to initialise, with why (shown by `offload info`).
    failed_plugins: Vec<(&'static str, Error)>,
    /// Host memory handed out by [`Runtime::alloc_host`] (liboffload's host
    /// device): the same index type as every device's.
    host_memory: AllocationIndex,
}

/// Alignment of [`Runtime::alloc_host`] memory.
const HOST_ALIGN: usize = 64;

impl Runtime {
    /// Initialise the plugins that `config` enables, in the given order;
    /// devices are numbered in that order.
    pub fn new(config: Config, entries: &[PluginEntry]) -> Runtime {
        crate::trace::init(&config);
        if config.debug > 0
            || config.profile.is_some()
            || std::env::var_os("OFFLOAD_STATS").is_some_and(|v| v == "1")
        {
            crate::stats::enable();
        }
        let _s = debug_span!("runtime_init", plugins = entries.len()).entered();
        let mut plugins = Vec::new();
        let mut devices: Vec<Arc<Device>> = Vec::new();
        let mut failed_plugins = Vec::new();
        for entry in entries {
            if !config.plugin_enabled(entry.name)
                || (entry.opt_in && !config.plugin_named(entry.name))
            {
                continue;
            }
            let created = (entry.create)(&config).and_then(|p| p.init().map(|d| (p, d)));
            match created {
                Ok((plugin, raw_devices)) => {
                    let first = devices.len();
                    for raw in raw_devices {
                        let id = devices.len();
                        devices.push(Arc::new(Device::new(id, entry.name, raw, &config)));
                    }
                    plugins.push(LoadedPlugin {
                        plugin,
                        devices: first..devices.len(),
                    });
                }
                Err(e) => {
                    warn!(plugin = entry.name, error = %e, "plugin failed to initialise");
                    failed_plugins.push((entry.name, e));
                }
            }
        }
        Runtime {
            config,
            plugins,
            devices,
            binaries: Mutex::new(Vec::new()),
            failed_plugins,
            host_memory: AllocationIndex::default(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn devices(&self) -> &[Arc<Device>] {
        &self.devices
    }

    /// Device `id`, or an `InvalidDevice` error naming the valid range.
    pub fn device(&self, id: usize) -> Result<&Arc<Device>> {
        self.devices.get(id).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidDevice,
                format!(
                    "device number '{id}' out of range, only {} devices available",
                    self.devices.len()
                ),
            )
        })
    }

    /// Names of the initialised plugins with their device id ranges.
    pub fn plugins(&self) -> impl Iterator<Item = (&dyn Plugin, std::ops::Range<usize>)> {
        self.plugins
            .iter()
            .map(|p| (p.plugin.as_ref(), p.devices.clone()))
    }

    /// Plugins that were enabled but failed to initialise.
    pub fn failed_plugins(&self) -> &[(&'static str, Error)] {
        &self.failed_plugins
    }

    /// Register a binary: generic registration first (the descriptor becomes
    /// visible), then every plugin's register hook in plugin order. Hook
    /// failures are returned, not fatal.
    pub fn register_binary(
        &self,
        images: Vec<DeviceImage<'static>>,
        entries: Vec<OffloadEntry>,
    ) -> (Arc<BinaryDescriptor<'static>>, Vec<HookFailure>) {
        let desc = Arc::new(BinaryDescriptor {
            id: BinaryId::next(),
            images,
            entries,
        });
        let _s = debug_span!(
            "register_binary",
            id = desc.id.0,
            images = desc.images.len()
        )
        .entered();
        self.binaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(desc.clone());
        let mut failures = Vec::new();
        for p in &self.plugins {
            if let Err(error) = p.plugin.register_binary(&desc) {
                warn!(plugin = p.plugin.name(), %error, "register hook failed");
                failures.push(HookFailure {
                    plugin: p.plugin.name(),
                    error,
                });
            }
        }
        (desc, failures)
    }

    /// Unregister a binary: plugin hooks first, in reverse plugin order, then
    /// generic teardown. Unknown ids are an `InvalidArgument` error.
    pub fn unregister_binary(&self, id: BinaryId) -> Result<Vec<HookFailure>> {
        let _s = debug_span!("unregister_binary", id = id.0).entered();
        let desc = self
            .binary(id)
            .ok_or_else(|| Error::invalid_argument(format!("binary {} is not registered", id.0)))?;
        let mut failures = Vec::new();
        for p in self.plugins.iter().rev() {
            if let Err(error) = p.plugin.unregister_binary(&desc) {
                warn!(plugin = p.plugin.name(), %error, "unregister hook failed");
                failures.push(HookFailure {
                    plugin: p.plugin.name(),
                    error,
                });
            }
        }
        self.binaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|b| b.id != id);
        Ok(failures)
    }

    /// A registered binary.
    pub fn binary(&self, id: BinaryId) -> Option<Arc<BinaryDescriptor<'static>>> {
        self.binaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|b| b.id == id)
            .cloned()
    }

    /// Every registered binary, in registration order.
    pub fn binaries(&self) -> Vec<Arc<BinaryDescriptor<'static>>> {
        self.binaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Allocate `size` bytes of ordinary host memory for `owner`, filed in
    /// the runtime's host-memory index.
    /// `kind` is what the caller asked for (reported back by lookups).
    pub fn alloc_host(&self, size: usize, kind: AllocKind, owner: Owner) -> Result<*mut u8> {
        let layout =
            std::alloc::Layout::from_size_align(size.max(1), HOST_ALIGN).map_err(|_| {
                Error::invalid_size(format!("cannot allocate {size} bytes of host memory"))
            })?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(Error::out_of_resources(format!(
                "host allocation of {size} bytes failed"
            )));
        }
        self.host_memory.insert(Allocation {
            base: DevicePtr(p as u64),
            size,
            kind,
            origin: Origin::Alloc(kind),
            owner,
        })?;
        Ok(p)
    }

    /// Free memory from [`Runtime::alloc_host`]; unknown pointers are an error.
    pub fn free_host(&self, ptr: DevicePtr) -> Result<()> {
        let a = self.host_memory.remove(ptr, "the host")?;
        let layout = std::alloc::Layout::from_size_align(a.size.max(1), HOST_ALIGN)
            .expect("checked at allocation");
        // SAFETY: allocated by `alloc_host` with this layout.
        unsafe { std::alloc::dealloc(ptr.0 as *mut u8, layout) };
        Ok(())
    }

    /// Free every [`Runtime::alloc_host`] allocation of `owner`.
    pub fn free_host_of(&self, owner: Owner) {
        for a in self.host_memory.all() {
            if a.owner == owner {
                let _ = self.free_host(a.base);
            }
        }
    }

    /// The live range containing `ptr`: in host memory from
    /// [`Runtime::alloc_host`] (device None) or on a device. Devices are
    /// searched in order (addresses of different remote servers may
    /// coincide; the first device wins).
    pub fn find_allocation(&self, ptr: DevicePtr) -> Option<(Option<&Arc<Device>>, Allocation)> {
        if let Some(a) = self.host_memory.find(ptr) {
            return Some((None, a));
        }
        self.devices
            .iter()
            .find_map(|d| d.allocation(ptr).map(|a| (Some(d), a)))
    }

    /// Free all memory and deinitialise the plugins.
    pub fn shutdown(&self) {
        let _s = debug_span!("runtime_shutdown").entered();
        crate::queue::join_closed_queues();
        for d in &self.devices {
            d.release_memory();
        }
        for a in self.host_memory.drain() {
            let layout = std::alloc::Layout::from_size_align(a.size.max(1), HOST_ALIGN)
                .expect("checked at allocation");
            // SAFETY: allocated by `alloc_host` with this layout.
            unsafe { std::alloc::dealloc(a.base.0 as *mut u8, layout) };
        }
        for p in self.plugins.iter().rev() {
            if let Err(error) = p.plugin.deinit() {
                warn!(plugin = p.plugin.name(), %error, "plugin deinit failed");
            }
        }
    }
}
