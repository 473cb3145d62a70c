//! Instances: a runtime whose plugins and devices are chosen in code.

use std::sync::Arc;

use offload_core::{Config, Error, Result, Runtime};

use crate::device::Rt;
use crate::Device;

/// A runtime of its own, with the plugins and device counts chosen in
/// code (wgpu's `Instance` convention). [`crate::devices`] and
/// [`Device::host`] use the process-wide runtime instead, which the
/// environment (`OFFLOAD_PLUGINS`, `OFFLOAD_HOST_DEVICES`, ...) configures.
///
/// ```
/// use offload_runtime::Instance;
///
/// let instance = Instance::builder().plugins(["host"]).host_devices(2).build()?;
/// assert_eq!(instance.devices().len(), 2);
/// let buf = instance.host()?.buffer_from(&[1u32, 2, 3])?;
/// assert_eq!(buf.to_vec()?, vec![1, 2, 3]);
/// # Ok::<(), offload_runtime::Error>(())
/// ```
///
/// Devices, buffers, programs and queues keep their instance alive; its
/// plugins shut down when the last of them is dropped. Copies between
/// devices of two instances are refused (go through host memory).
#[derive(Clone)]
pub struct Instance {
    rt: Rt,
}

/// The runtime an [`Instance`] owns, shut down when the last user drops it.
pub(crate) struct Owned {
    pub(crate) runtime: Runtime,
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.runtime.shutdown();
    }
}

impl Instance {
    /// A builder starting from the environment's settings (`LIBOMPTARGET_*`
    /// and `OFFLOAD_*`), which its methods override.
    pub fn builder() -> InstanceBuilder {
        InstanceBuilder {
            plugins: None,
            host_devices: None,
            remote_servers: None,
        }
    }

    /// Every device of this instance, in id order.
    pub fn devices(&self) -> Vec<Device> {
        self.rt.devices()
    }

    /// Device number `id` of this instance.
    pub fn device(&self, id: usize) -> Result<Device> {
        self.rt.device(id)
    }

    /// The first device of the host plugin.
    pub fn host(&self) -> Result<Device> {
        self.rt.host()
    }

    /// Names of the plugins that initialised, in device order.
    pub fn plugins(&self) -> Vec<&'static str> {
        self.rt.get().plugins().map(|(p, _)| p.name()).collect()
    }
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("plugins", &self.plugins())
            .field("devices", &self.rt.get().devices().len())
            .finish()
    }
}

/// Chooses what an [`Instance`] loads. Built by [`Instance::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct InstanceBuilder {
    plugins: Option<Vec<String>>,
    host_devices: Option<usize>,
    remote_servers: Option<Vec<String>>,
}

impl InstanceBuilder {
    /// Load only these plugins, in this order (`host`, `sim`, and with
    /// their cargo features `cuda`, `remote`, `mpi`). A name this build
    /// does not have makes [`InstanceBuilder::build`] fail.
    pub fn plugins<S: AsRef<str>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.plugins = Some(
            names
                .into_iter()
                .map(|n| n.as_ref().trim().to_ascii_lowercase())
                .collect(),
        );
        self
    }

    /// How many host devices the host plugin offers (default 4).
    pub fn host_devices(mut self, n: usize) -> Self {
        self.host_devices = Some(n);
        self
    }

    /// Servers (`HOST:PORT`) whose devices the `remote` plugin adds.
    pub fn remote_servers<S: AsRef<str>>(mut self, servers: impl IntoIterator<Item = S>) -> Self {
        self.remote_servers = Some(
            servers
                .into_iter()
                .map(|s| s.as_ref().to_string())
                .collect(),
        );
        self
    }

    /// Start the chosen plugins. Fails when a plugin name is unknown to
    /// this build; a plugin that fails to start is left out (as in the
    /// process-wide runtime).
    pub fn build(self) -> Result<Instance> {
        let mut config = Config::get().clone();
        if let Some(p) = self.plugins {
            config.plugins = Some(p);
        }
        if let Some(n) = self.host_devices {
            config.host_devices = n;
        }
        if let Some(s) = self.remote_servers {
            config.remote_servers = s;
        }
        if let Some(names) = &config.plugins {
            offload_plugins::check_names(names).map_err(Error::invalid_argument)?;
        }
        let runtime = Runtime::new(config, &offload_plugins::builtin());
        Ok(Instance {
            rt: Rt::Owned(Arc::new(Owned { runtime })),
        })
    }
}
