//! The memory pool behind queue memory (`Queue::alloc`, stream-ordered).
//!
//! A device's default pool hands memory freed with `cuMemFreeAsync` back
//! to the system at the next synchronisation (release threshold 0), so an
//! allocate / use / free / sync loop maps fresh memory every time: on an
//! H200 that loop cost 128-234 us per round, more than plain
//! `cuMemAlloc`/`cuMemFree` (91-167 us), against 9-14 us with the
//! threshold raised (BENCHMARKS.md). Raising it on the default pool would
//! change it for every user of that pool in the process (the CUDA runtime
//! through an interop object, say), so the plugin makes a pool of its own
//! per device that keeps what it has (threshold `u64::MAX`). The memory it
//! keeps is given back when a plain allocation runs out of memory
//! ([`crate::memory::alloc`] synchronises the device, trims the pool and
//! tries once more) and when the plugin shuts down. Until then it is held:
//! other allocations in this process (module loads, pinned or managed
//! memory) and other processes on the GPU cannot reclaim it.

use offload_core::plugin::DevicePtr;
use offload_core::Result;

use crate::driver::Gpu;
use crate::sys;

type AllocFromPool = unsafe extern "C" fn(
    *mut sys::CUdeviceptr,
    usize,
    sys::CUmemoryPool,
    sys::CUstream,
) -> sys::CUresult;
type TrimPool = unsafe extern "C" fn(sys::CUmemoryPool, usize) -> sys::CUresult;
type DestroyPool = unsafe extern "C" fn(sys::CUmemoryPool) -> sys::CUresult;

/// A `cuMemPoolCreate` pool on one device, with the (optional) driver
/// entry points it needs, resolved when it was made.
pub struct QueuePool {
    /// The `CUmemoryPool`, as an integer to keep the type `Send + Sync`
    /// (the driver's handles may be used from any thread).
    raw: usize,
    alloc: AllocFromPool,
    trim: TrimPool,
    destroy: DestroyPool,
}

impl QueuePool {
    /// A pool of `gpu`'s device memory that keeps freed memory reserved;
    /// None where the driver has no pool API or refuses (the device's
    /// default pool serves then).
    pub fn create(gpu: &Gpu) -> Option<QueuePool> {
        let d = &gpu.driver;
        let (create, set, destroy) = (
            d.cuMemPoolCreate?,
            d.cuMemPoolSetAttribute?,
            d.cuMemPoolDestroy?,
        );
        let (alloc, trim) = (d.cuMemAllocFromPoolAsync?, d.cuMemPoolTrimTo?);
        let props = sys::CUmemPoolProps {
            alloc_type: sys::CU_MEM_ALLOCATION_TYPE_PINNED,
            handle_types: 0,
            location: sys::CUmemLocation {
                type_: sys::CU_MEM_LOCATION_TYPE_DEVICE,
                id: gpu.ordinal,
            },
            win32_security_attributes: std::ptr::null_mut(),
            reserved: [0; 64],
        };
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `props` is a complete, zero-padded CUmemPoolProps; the
        // call writes one pool handle.
        let made = gpu.call("cuMemPoolCreate", |_| unsafe { create(&mut pool, &props) });
        if let Err(e) = made {
            tracing::debug!(device = %gpu.label, error = %e, "no pool of our own: the default pool serves queue memory");
            return None;
        }
        let mut keep = u64::MAX;
        // SAFETY: the release threshold is a cuuint64_t the call reads.
        let kept = gpu.call("cuMemPoolSetAttribute", |_| unsafe {
            set(
                pool,
                sys::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut keep as *mut u64).cast(),
            )
        });
        if let Err(e) = kept {
            tracing::debug!(device = %gpu.label, error = %e, "pool release threshold refused: the default pool serves queue memory");
            // SAFETY: the pool was created above and holds nothing.
            let _ = gpu.call("cuMemPoolDestroy", |_| unsafe { destroy(pool) });
            return None;
        }
        Some(QueuePool {
            raw: pool as usize,
            alloc,
            trim,
            destroy,
        })
    }

    fn raw(&self) -> sys::CUmemoryPool {
        self.raw as sys::CUmemoryPool
    }

    /// `size` bytes from the pool, in the order of `stream`.
    pub(crate) fn alloc(&self, gpu: &Gpu, size: usize, stream: sys::CUstream) -> Result<DevicePtr> {
        let mut p: sys::CUdeviceptr = 0;
        let (alloc, pool) = (self.alloc, self.raw());
        // SAFETY: writes one device pointer; pool and stream are live.
        gpu.call("cuMemAllocFromPoolAsync", |_| unsafe {
            alloc(&mut p, size, pool, stream)
        })?;
        Ok(DevicePtr(p))
    }

    /// Give the memory the pool keeps, and nothing in use, back to the
    /// system.
    pub fn trim(&self, gpu: &Gpu) -> Result<()> {
        let (trim, pool) = (self.trim, self.raw());
        // SAFETY: a live pool; only unused memory is released.
        gpu.call("cuMemPoolTrimTo", |_| unsafe { trim(pool, 0) })
    }

    /// Destroy the pool (plugin shutdown). Memory still allocated from it
    /// is released by the driver once freed.
    pub fn destroy(&self, gpu: &Gpu) {
        let (destroy, pool) = (self.destroy, self.raw());
        // SAFETY: called once, at the device's release.
        let _ = gpu.call("cuMemPoolDestroy", |_| unsafe { destroy(pool) });
    }
}
