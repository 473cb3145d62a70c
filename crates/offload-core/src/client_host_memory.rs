//! Host memory for devices on another machine (remote and MPI plugins).
//!
//! `AllocKind::Host` promises memory the calling process can read and
//! write and copies can name as host memory. A server's page-locked memory
//! lives in the server's address space, where the client would fault on
//! it; so those plugins allocate `Host` memory here, in the client, and
//! say so (`plugin::Device::host_allocations_are_local`): the core's copies
//! and fills then work on it here, whichever device they name for it, and
//! the server never sees its address. Kernels on the server cannot
//! dereference it (nothing can span two machines), and `AllocKind::Shared`
//! is refused for the same reason: see [`no_shared_memory`].

use std::alloc::Layout;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::plugin::DevicePtr;
use crate::{Error, Result};

/// Page alignment, as page-locked allocations of GPU drivers have.
const ALIGN: usize = 4096;

/// Client-side `AllocKind::Host` allocations of one device.
#[derive(Default)]
pub struct ClientHostMemory {
    live: Mutex<HashMap<u64, Layout>>,
}

impl ClientHostMemory {
    /// `size` bytes of zeroed, page-aligned memory of this process.
    pub fn alloc(&self, size: usize) -> Result<DevicePtr> {
        let layout = Layout::from_size_align(size.max(1), ALIGN).map_err(|_| {
            Error::invalid_size(format!("cannot allocate {size} bytes of host memory"))
        })?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(Error::out_of_resources(format!(
                "host allocation of {size} bytes failed"
            )));
        }
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p as u64, layout);
        Ok(DevicePtr(p as u64))
    }

    /// Release memory of [`ClientHostMemory::alloc`]; other pointers are
    /// an `InvalidArgument` error.
    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        let layout = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ptr.0)
            .ok_or_else(|| {
                Error::invalid_argument(format!("pointer {ptr} is not host memory of this device"))
            })?;
        // SAFETY: allocated by `alloc` with this layout, removed once.
        unsafe { std::alloc::dealloc(ptr.0 as *mut u8, layout) };
        Ok(())
    }
}

impl Drop for ClientHostMemory {
    fn drop(&mut self) {
        let live = std::mem::take(self.live.get_mut().unwrap_or_else(|e| e.into_inner()));
        for (p, layout) in live {
            // SAFETY: allocated by `alloc` with this layout, never freed.
            unsafe { std::alloc::dealloc(p as *mut u8, layout) };
        }
    }
}

/// The error for `AllocKind::Shared` on a device of another machine.
pub fn no_shared_memory(device: &str) -> Error {
    Error::unsupported(format!(
        "{device} is on another machine: shared (managed) memory needs one address space \
         for host and device; allocate device memory and copy, or host memory for staging"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_writable_aligned_and_freed_once() {
        let m = ClientHostMemory::default();
        let p = m.alloc(10_000).unwrap();
        assert_eq!(p.0 as usize % ALIGN, 0);
        // SAFETY: 10 000 bytes of this process's memory.
        let s = unsafe { std::slice::from_raw_parts_mut(p.0 as *mut u8, 10_000) };
        assert!(s.iter().all(|&b| b == 0));
        s.fill(7);
        let empty = m.alloc(0).unwrap();
        m.free(empty).unwrap();
        m.free(p).unwrap();
        assert_eq!(
            m.free(p).unwrap_err().code(),
            crate::ErrorCode::InvalidArgument
        );
        assert_eq!(
            m.free(DevicePtr(12345)).unwrap_err().code(),
            crate::ErrorCode::InvalidArgument
        );
        // Still live at drop: released then.
        m.alloc(64).unwrap();
    }
}
