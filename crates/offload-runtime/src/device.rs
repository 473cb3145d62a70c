//! Devices: listing, memory, programs, queues.

use std::fmt;
use std::sync::Arc;

use bytemuck::Pod;
use offload_core::{AllocKind, Backend, DeviceInfo, Error, ErrorCode, Result};

use crate::{runtime, DeviceBuffer, Program, Queue};

/// A device. Cheap to clone.
///
/// It prints (`Display` and `Debug`) as the core's label, "device N
/// (plugin uid)".
#[derive(Clone)]
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

    /// Index of this device among all devices of the runtime.
    pub fn id(&self) -> usize {
        self.inner.id()
    }
    /// What the plugin reports about the device.
    pub fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    /// Name of the plugin that owns the device.
    pub fn plugin_name(&self) -> &'static str {
        self.inner.plugin_name()
    }
    /// The core device, for code that needs the lower layer.
    pub fn core(&self) -> &Arc<offload_core::Device> {
        &self.inner
    }

    /// Device memory for `len` values of `T`, every byte zero.
    pub fn alloc_zeros<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new_zeroed(self, len, AllocKind::Device)
    }

    /// Memory of a chosen kind (host-pinned, device, shared), every byte zero.
    pub fn alloc_zeros_in<T: Pod>(&self, len: usize, kind: AllocKind) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new_zeroed(self, len, kind)
    }

    /// Device memory for `len` copies of `value`.
    pub fn alloc_filled<T: Pod>(&self, len: usize, value: T) -> Result<DeviceBuffer<T>> {
        // SAFETY: the fill writes every element before the buffer is returned.
        let mut b = unsafe { DeviceBuffer::new_uninit(self, len, AllocKind::Device)? };
        b.fill(value)?;
        Ok(b)
    }

    /// Device memory for `len` values of `T`, not initialised (no zeroing
    /// cost).
    ///
    /// # Safety
    /// The contents are uninitialised: write every element (a copy, a fill,
    /// a kernel) before reading any of it back to the host.
    pub unsafe fn alloc_uninit<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new_uninit(self, len, AllocKind::Device)
    }

    /// Uninitialised memory of a chosen kind.
    ///
    /// # Safety
    /// As for [`Device::alloc_uninit`].
    pub unsafe fn alloc_uninit_in<T: Pod>(
        &self,
        len: usize,
        kind: AllocKind,
    ) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new_uninit(self, len, kind)
    }

    /// Device memory holding a copy of `data`.
    pub fn buffer_from<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        // SAFETY: the copy writes every element before the buffer is returned.
        let mut b = unsafe { DeviceBuffer::new_uninit(self, data.len(), AllocKind::Device)? };
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// Load a program from image bytes; containers are unwrapped and the
    /// best image this device can run is loaded.
    pub fn load_program(&self, bytes: &[u8]) -> Result<Program> {
        let core = self.inner.load_program(bytes)?;
        Ok(Program {
            device: self.clone(),
            core,
        })
    }

    /// Load a program from the image file at `path`: a regular file of at
    /// most `OFFLOAD_MAX_IMAGE_SIZE` bytes (4 GiB by default). Special
    /// files (`/dev/zero`, FIFOs, directories) are refused with an error
    /// naming the path, never read.
    pub fn load_program_file(&self, path: impl AsRef<std::path::Path>) -> Result<Program> {
        let bytes = offload_core::files::read_image(path.as_ref())?;
        self.load_program(&bytes)
    }

    /// Whether `bytes` hold an image this device can run.
    pub fn is_compatible(&self, bytes: &[u8]) -> bool {
        self.inner.is_compatible(bytes)
    }

    /// A new in-order asynchronous queue on this device.
    pub fn create_queue(&self) -> Result<Queue> {
        Queue::new(self)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.inner.label())
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.inner.label())
    }
}
