//! The runtime: plugins, their devices, and registered binaries.

use std::sync::{Arc, Mutex};

use offload_image::DeviceImage;
use tracing::{debug_span, warn};

use crate::binary::{BinaryDescriptor, BinaryId, OffloadEntry};
use crate::config::Config;
use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::plugin::Plugin;

/// How the runtime finds a plugin: a name (for `OFFLOAD_PLUGINS`) and a
/// constructor. Faces pass the list of built-in plugins.
#[derive(Clone, Copy)]
pub struct PluginEntry {
    pub name: &'static str,
    pub create: fn(&Config) -> Result<Box<dyn Plugin>>,
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
}

impl Runtime {
    /// Initialise the plugins that `config` enables, in the given order;
    /// devices are numbered in that order.
    pub fn new(config: Config, entries: &[PluginEntry]) -> Runtime {
        crate::trace::init(&config);
        let _s = debug_span!("runtime_init", plugins = entries.len()).entered();
        let mut plugins = Vec::new();
        let mut devices: Vec<Arc<Device>> = Vec::new();
        let mut failed_plugins = Vec::new();
        for entry in entries {
            if !config.plugin_enabled(entry.name) {
                continue;
            }
            let created = (entry.create)(&config).and_then(|p| p.init().map(|d| (p, d)));
            match created {
                Ok((plugin, raw_devices)) => {
                    let first = devices.len();
                    for raw in raw_devices {
                        let id = devices.len();
                        devices.push(Arc::new(Device::new(
                            id,
                            entry.name,
                            raw,
                            config.memory_manager_threshold,
                        )));
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

    /// Free all memory and deinitialise the plugins.
    pub fn shutdown(&self) {
        let _s = debug_span!("runtime_shutdown").entered();
        for d in &self.devices {
            d.release_memory();
        }
        for p in self.plugins.iter().rev() {
            if let Err(error) = p.plugin.deinit() {
                warn!(plugin = p.plugin.name(), %error, "plugin deinit failed");
            }
        }
    }
}
