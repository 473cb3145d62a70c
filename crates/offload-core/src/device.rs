//! The core's view of a device: a plugin device plus the shared bookkeeping
//! (caching allocator, allocation table, image selection, tracing).

use std::sync::Arc;

use offload_image::DeviceImage;
use tracing::debug_span;

use crate::error::{Error, ErrorCode, Result};
use crate::memory::{Allocation, AllocationTable, MemoryPool};
use crate::plugin::{self, AllocKind, DeviceInfo, DevicePtr};

/// A device of some plugin, numbered across all plugins.
pub struct Device {
    id: usize,
    plugin: &'static str,
    raw: Arc<dyn plugin::Device>,
    pool: MemoryPool,
    allocations: AllocationTable,
    label: String,
}

impl Device {
    pub(crate) fn new(
        id: usize,
        plugin: &'static str,
        raw: Arc<dyn plugin::Device>,
        pool_threshold: usize,
    ) -> Self {
        let label = format!("device {id} ({plugin} {})", raw.info().uid);
        Device {
            id,
            plugin,
            raw,
            pool: MemoryPool::new(pool_threshold),
            allocations: AllocationTable::default(),
            label,
        }
    }

    /// Index of this device among all devices of the runtime.
    pub fn id(&self) -> usize {
        self.id
    }
    /// Name of the plugin that owns it.
    pub fn plugin_name(&self) -> &'static str {
        self.plugin
    }
    pub fn info(&self) -> &DeviceInfo {
        self.raw.info()
    }
    /// The plugin object, for faces that need plugin-level calls.
    pub fn raw(&self) -> &Arc<dyn plugin::Device> {
        &self.raw
    }
    /// "device N (plugin uid)", for messages.
    pub fn label(&self) -> &str {
        &self.label
    }
    pub fn shares_host_memory(&self) -> bool {
        self.raw.shares_host_memory()
    }

    /// Allocate `size` bytes of `kind` memory. Zero-byte requests are an error
    /// (callers that accept them, like `omp_target_alloc`, check first).
    pub fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        let _s = debug_span!("alloc", device = self.id, size, ?kind).entered();
        if size == 0 {
            return Err(Error::invalid_size(format!(
                "cannot allocate 0 bytes on {}",
                self.label
            )));
        }
        let ptr = if kind == AllocKind::Device {
            self.pool.alloc(size, |n| self.raw.alloc(n, kind))?
        } else {
            self.raw.alloc(size, kind)?
        };
        if ptr.is_null() {
            return Err(Error::out_of_resources(format!(
                "{} returned no memory for {size} bytes",
                self.label
            )));
        }
        self.allocations.insert(Allocation {
            base: ptr,
            size,
            kind,
        });
        Ok(ptr)
    }

    /// Free an allocation made by [`Device::alloc`]. Unknown pointers (double
    /// frees, interior or foreign pointers) are an `InvalidArgument` error
    /// and leave the device untouched.
    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        let _s = debug_span!("free", device = self.id, ptr = %ptr).entered();
        let a = self.allocations.remove(ptr, &self.label)?;
        if a.kind == AllocKind::Device {
            self.pool.free(ptr, a.size, |p| self.raw.free(p, a.kind))
        } else {
            self.raw.free(ptr, a.kind)
        }
    }

    /// The live allocation containing `ptr`, if any.
    pub fn allocation(&self, ptr: DevicePtr) -> Option<Allocation> {
        self.allocations.find(ptr)
    }

    /// Number of live user allocations.
    pub fn live_allocations(&self) -> usize {
        self.allocations.len()
    }

    /// Copy host memory to the device.
    ///
    /// # Safety
    /// `src` is valid for `size` bytes and `dst` names `size` bytes of device memory.
    pub unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        let _s = debug_span!("copy_to_device", device = self.id, dst = %dst, size).entered();
        if size == 0 {
            return Ok(());
        }
        self.raw.copy_to_device(dst, src, size)
    }

    /// Copy device memory to the host.
    ///
    /// # Safety
    /// `dst` is valid for `size` bytes and `src` names `size` bytes of device memory.
    pub unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        let _s = debug_span!("copy_from_device", device = self.id, src = %src, size).entered();
        if size == 0 {
            return Ok(());
        }
        self.raw.copy_from_device(dst, src, size)
    }

    /// Copy from this device to `dst_device` (which may be this one). Copies
    /// between devices the plugin cannot connect are staged through the host.
    pub fn copy_to(
        &self,
        dst_device: &Device,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<()> {
        let _s = debug_span!(
            "copy_device_to_device",
            src_device = self.id,
            dst_device = dst_device.id,
            size
        )
        .entered();
        if size == 0 {
            return Ok(());
        }
        if std::ptr::eq(self, dst_device) {
            return self.raw.copy_within(dst, src, size);
        }
        if self.plugin == dst_device.plugin
            && self
                .raw
                .copy_to_peer(dst_device.raw.as_ref(), dst, src, size)?
        {
            return Ok(());
        }
        let mut staging = vec![0u8; size.min(STAGING_CHUNK)];
        let mut done = 0usize;
        while done < size {
            let n = (size - done).min(staging.len());
            // SAFETY: the staging buffer holds `n` bytes; the device ranges are the caller's.
            unsafe {
                self.raw
                    .copy_from_device(staging.as_mut_ptr(), src.offset(done as u64), n)?;
                dst_device
                    .raw
                    .copy_to_device(dst.offset(done as u64), staging.as_ptr(), n)?;
            }
            done += n;
        }
        Ok(())
    }

    /// Fill `size` bytes at `dst` with `pattern` repeated.
    pub fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        let _s =
            debug_span!("fill", device = self.id, dst = %dst, size, pattern_size = pattern.len())
                .entered();
        if pattern.is_empty() || !size.is_multiple_of(pattern.len()) {
            return Err(Error::invalid_size(format!(
                "fill of {size} bytes is not a multiple of the {}-byte pattern",
                pattern.len()
            )));
        }
        if size == 0 {
            return Ok(());
        }
        self.raw.fill(dst, pattern, size)
    }

    /// Whether any image in `bytes` (unwrapped from its containers) runs here.
    pub fn is_compatible(&self, bytes: &[u8]) -> bool {
        offload_image::unwrap(bytes)
            .map(|imgs| imgs.iter().any(|i| self.raw.can_run(i)))
            .unwrap_or(false)
    }

    /// Load the first image in `bytes` this device can run (containers are
    /// unwrapped; metadata reaches the plugin with the image).
    pub fn load_program(&self, bytes: &[u8]) -> Result<Arc<dyn plugin::Program>> {
        let _s = debug_span!("load_program", device = self.id, size = bytes.len()).entered();
        let images = offload_image::unwrap(bytes)?;
        let image = self.select_image(&images)?;
        self.raw.load_program(image)
    }

    /// Load an image already unwrapped by the caller.
    pub fn load_image(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        let _s = debug_span!("load_image", device = self.id, size = image.bytes.len()).entered();
        if !self.raw.can_run(image) {
            return Err(Error::invalid_binary(format!(
                "image ({}) cannot run on {} ({})",
                describe_image(image),
                self.label,
                self.info().triple
            )));
        }
        self.raw.load_program(image)
    }

    fn select_image<'i, 'a>(&self, images: &'i [DeviceImage<'a>]) -> Result<&'i DeviceImage<'a>> {
        images.iter().find(|i| self.raw.can_run(i)).ok_or_else(|| {
            let found: Vec<String> = images.iter().map(describe_image).collect();
            Error::invalid_binary(format!(
                "no image compatible with {} ({}); found {} image(s): {}",
                self.label,
                self.info().triple,
                images.len(),
                found.join(", ")
            ))
        })
    }

    pub fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        let _s = debug_span!("create_queue", device = self.id).entered();
        self.raw.create_queue()
    }

    /// Free everything still allocated and empty the pool (runtime shutdown).
    pub(crate) fn release_memory(&self) {
        for a in self.allocations.drain() {
            if a.kind == AllocKind::Device {
                let _ = self.pool.free(a.base, a.size, |p| self.raw.free(p, a.kind));
            } else {
                let _ = self.raw.free(a.base, a.kind);
            }
        }
        let _ = self
            .pool
            .release_all(|p| self.raw.free(p, AllocKind::Device));
    }
}

/// Largest host staging buffer for copies between unconnected devices.
const STAGING_CHUNK: usize = 8 << 20;

/// "triple/arch" of an image for messages.
pub fn describe_image(image: &DeviceImage<'_>) -> String {
    let triple = image.triple.as_deref().unwrap_or("unknown triple");
    match image.arch.as_deref() {
        Some(a) if !a.is_empty() => format!("{triple} {a}"),
        _ => triple.to_string(),
    }
}

impl Error {
    pub fn invalid_size(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::InvalidSize, message)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}
