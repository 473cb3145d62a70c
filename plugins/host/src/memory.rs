//! Host "device" memory: process memory from malloc.

use offload_core::plugin::{AllocKind, DevicePtr};
use offload_core::{Error, Result};

/// Alignment of every host allocation (enough for AVX-512 vectors).
const ALIGN: usize = 64;

pub fn alloc(size: usize, _kind: AllocKind) -> Result<DevicePtr> {
    let mut p: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: plain allocation call.
    let rc = unsafe { libc::posix_memalign(&mut p, ALIGN, size.max(1)) };
    if rc != 0 || p.is_null() {
        return Err(Error::out_of_resources(format!(
            "host allocation of {size} bytes failed"
        )));
    }
    Ok(DevicePtr(p as u64))
}

pub fn free(ptr: DevicePtr) {
    // SAFETY: the core only frees pointers this plugin allocated.
    unsafe { libc::free(ptr.as_ptr()) }
}

/// # Safety
/// Both ranges valid for `size` bytes. They may overlap (memmove).
pub unsafe fn copy(dst: *mut u8, src: *const u8, size: usize) {
    std::ptr::copy(src, dst, size);
}

/// # Safety
/// `dst` valid for `size` bytes; `size` a multiple of `pattern.len()`.
pub unsafe fn fill(dst: *mut u8, pattern: &[u8], size: usize) {
    offload_core::transfer::host_fill(dst, pattern, size)
}
