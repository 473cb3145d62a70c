use std::sync::Arc;

use offload_core::{AllocKind, Backend, DeviceInfo, Error, ErrorCode, Result};

use crate::{runtime, DeviceBuffer, Program, Queue};

/// A device. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) inner: Arc<offload_core::Device>,
}

/// Every device of every plugin, in id order.
pub fn devices() -> Vec<Device> {
    runtime()
        .devices()
        .iter()
        .map(|d| Device { inner: d.clone() })
        .collect()
}

impl Device {
    /// Device number `id`.
    pub fn get(id: usize) -> Result<Device> {
        runtime().device(id).map(|d| Device { inner: d.clone() })
    }

    /// The first device of the host plugin.
    pub fn host() -> Result<Device> {
        devices()
            .into_iter()
            .find(|d| d.info().backend == Backend::Host)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::NotFound,
                    "no host device (is the host plugin disabled by OFFLOAD_PLUGINS?)",
                )
            })
    }

    pub fn id(&self) -> usize {
        self.inner.id()
    }
    pub fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    pub fn plugin_name(&self) -> &'static str {
        self.inner.plugin_name()
    }
    /// The core device, for code that needs the lower layer.
    pub fn core(&self) -> &Arc<offload_core::Device> {
        &self.inner
    }

    /// Uninitialised (zeroed on the host plugin is not promised) device memory
    /// for `len` values of `T`.
    pub fn alloc<T: Copy>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new(self, len, AllocKind::Device)
    }

    /// Memory of a chosen kind (host-pinned, device, shared).
    pub fn alloc_kind<T: Copy>(&self, len: usize, kind: AllocKind) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new(self, len, kind)
    }

    /// Device memory holding a copy of `data`.
    pub fn buffer_from<T: Copy>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = self.alloc(data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// Load a program from image bytes; containers are unwrapped and the
    /// first image this device can run is loaded.
    pub fn load_program(&self, bytes: &[u8]) -> Result<Program> {
        let core = self.inner.load_program(bytes)?;
        Ok(Program {
            device: self.clone(),
            core,
        })
    }

    /// Whether `bytes` hold an image this device can run.
    pub fn is_compatible(&self, bytes: &[u8]) -> bool {
        self.inner.is_compatible(bytes)
    }

    pub fn create_queue(&self) -> Result<Queue> {
        Ok(Queue {
            device: self.clone(),
            core: Arc::new(offload_core::Queue::new(Some(&self.inner))?),
        })
    }
}
