//! Devices: listing, memory, programs, queues.

use std::fmt;
use std::sync::Arc;

use bytemuck::Pod;
use offload_core::{AllocKind, Backend, DeviceInfo, Error, ErrorCode, Result, Runtime};

use crate::{DeviceBuffer, Program, Queue};

/// The runtime a device belongs to: the process-wide one (configured by
/// the environment) or one an [`crate::Instance`] owns.
#[derive(Clone)]
pub(crate) enum Rt {
    Global(&'static Runtime),
    Owned(Arc<crate::instance::Owned>),
}

impl Rt {
    pub(crate) fn global() -> Rt {
        Rt::Global(offload_plugins::runtime())
    }
    pub(crate) fn get(&self) -> &Runtime {
        match self {
            Rt::Global(r) => r,
            Rt::Owned(o) => &o.runtime,
        }
    }
    pub(crate) fn same(&self, other: &Rt) -> bool {
        std::ptr::eq(self.get(), other.get())
    }
    pub(crate) fn devices(&self) -> Vec<Device> {
        self.get()
            .devices()
            .iter()
            .map(|d| Device {
                inner: d.clone(),
                rt: self.clone(),
            })
            .collect()
    }
    pub(crate) fn device(&self, id: usize) -> Result<Device> {
        self.get().device(id).map(|d| Device {
            inner: d.clone(),
            rt: self.clone(),
        })
    }
    pub(crate) fn host(&self) -> Result<Device> {
        self.devices()
            .into_iter()
            .find(|d| d.info().backend == Backend::Host)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::NotFound,
                    "no host device (is the host plugin disabled by OFFLOAD_PLUGINS?)",
                )
            })
    }
}

/// A device. Cheap to clone.
///
/// It prints (`Display` and `Debug`) as the core's label, "device N
/// (plugin uid)".
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<offload_core::Device>,
    pub(crate) rt: Rt,
}

/// Every device of every plugin of the process-wide runtime (configured by
/// `OFFLOAD_PLUGINS` and the other settings of the environment), in id
/// order. [`crate::Instance::builder`] chooses plugins in code instead.
pub fn devices() -> Vec<Device> {
    Rt::global().devices()
}

impl Device {
    /// Device number `id` of the process-wide runtime.
    pub fn get(id: usize) -> Result<Device> {
        Rt::global().device(id)
    }

    /// The first device of the host plugin of the process-wide runtime.
    pub fn host() -> Result<Device> {
        Rt::global().host()
    }

    /// The runtime this device belongs to (copies between devices stay
    /// within one).
    pub(crate) fn runtime(&self) -> &Runtime {
        self.rt.get()
    }

    /// An error unless `other` belongs to the same runtime (instance).
    pub(crate) fn check_same_runtime(&self, other: &Device) -> Result<()> {
        if self.rt.same(&other.rt) {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "{self} and {other} belong to different instances: copy through host memory"
            )))
        }
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
        // SAFETY: our caller takes on writing before reading.
        unsafe { DeviceBuffer::new_uninit(self, len, AllocKind::Device) }
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
        // SAFETY: as for alloc_uninit.
        unsafe { DeviceBuffer::new_uninit(self, len, kind) }
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
