use std::marker::PhantomData;

use offload_core::{AllocKind, DevicePtr, Error, Result};

use crate::Device;

/// `len` values of `T` in a device's memory, freed on drop.
pub struct DeviceBuffer<T: Copy> {
    device: Device,
    ptr: DevicePtr,
    len: usize,
    kind: AllocKind,
    _values: PhantomData<T>,
}

impl<T: Copy> DeviceBuffer<T> {
    pub(crate) fn new(device: &Device, len: usize, kind: AllocKind) -> Result<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::invalid_argument(format!("{len} elements overflow the address space"))
        })?;
        // Zero-length buffers get one byte so that they have an address.
        let ptr = device.inner.alloc(bytes.max(1), kind)?;
        Ok(DeviceBuffer {
            device: device.clone(),
            ptr,
            len,
            kind,
            _values: PhantomData,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn size_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// Device address of the first element.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    pub fn kind(&self) -> AllocKind {
        self.kind
    }
    pub fn device(&self) -> &Device {
        &self.device
    }

    fn check_len(&self, n: usize, what: &str) -> Result<()> {
        if n != self.len {
            return Err(Error::invalid_size(format!(
                "{what}: host slice has {n} elements, device buffer at {} has {}",
                self.ptr, self.len
            )));
        }
        Ok(())
    }

    /// Copy `src` (exactly `len` elements) to the device.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.check_len(src.len(), "copy to device")?;
        // SAFETY: `src` is `size_bytes` long and the buffer is ours.
        unsafe {
            self.device
                .inner
                .copy_to_device(self.ptr, src.as_ptr().cast(), self.size_bytes())
        }
    }

    /// Copy the buffer into `dst` (exactly `len` elements).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.check_len(dst.len(), "copy from device")?;
        // SAFETY: as above; `T: Copy` so any bytes the kernel wrote are a valid
        // bit pattern only if `T` accepts every pattern, which holds for the
        // plain numeric types this API is meant for.
        unsafe {
            self.device
                .inner
                .copy_from_device(dst.as_mut_ptr().cast(), self.ptr, self.size_bytes())
        }
    }

    /// The buffer's contents.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v: Vec<T> = Vec::with_capacity(self.len);
        // SAFETY: filled completely by the copy before it is read.
        unsafe {
            self.device.inner.copy_from_device(
                v.as_mut_ptr().cast(),
                self.ptr,
                self.size_bytes(),
            )?;
            v.set_len(self.len);
        }
        Ok(v)
    }

    /// Set every element to `value`.
    pub fn fill(&mut self, value: T) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: `value` is a plain `T`; we read its bytes.
        let pattern = unsafe {
            std::slice::from_raw_parts((&value as *const T).cast::<u8>(), std::mem::size_of::<T>())
        };
        self.device.inner.fill(self.ptr, pattern, self.size_bytes())
    }

    /// Copy `other` (same length, maybe on another device) into this buffer.
    pub fn copy_from_buffer(&mut self, other: &DeviceBuffer<T>) -> Result<()> {
        self.check_len(other.len, "copy between buffers")?;
        let (dst, src) = (
            offload_core::Location::Device(self.device.id(), self.ptr),
            offload_core::Location::Device(other.device.id(), other.ptr),
        );
        // SAFETY: both ends are live device buffers of this length.
        unsafe { crate::runtime().copy(dst, src, self.size_bytes(), None) }
    }
}

impl<T: Copy> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let _ = self.device.inner.free(self.ptr);
    }
}

impl<T: Copy> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer({} x {} at {} on {:?})",
            self.len,
            std::any::type_name::<T>(),
            self.ptr,
            self.device
        )
    }
}
