//! Device (`cuMemAlloc`), pinned host (`cuMemAllocHost`) and managed
//! (`cuMemAllocManaged`) memory, and host-memory registration
//! (`cuMemHostRegister`).
//!
//! With unified addressing (every 64-bit Linux GPU since CUDA 4) a pinned
//! host allocation's device address is its host address, so one
//! [`DevicePtr`] names it on both sides.

use std::ffi::c_void;

use offload_core::plugin::{AllocKind, DevicePtr};
use offload_core::{ErrorCode, Result};

use crate::driver::{Gpu, HostRegistration};
use crate::sys;

pub fn alloc(gpu: &Gpu, size: usize, kind: AllocKind) -> Result<DevicePtr> {
    // The driver refuses zero-byte allocations; the core hands out unique
    // addresses, so a zero-byte request gets one byte.
    let bytes = size.max(1);
    match kind {
        AllocKind::Device => match device_memory(gpu, bytes) {
            // Memory the queue pool keeps may be what is missing.
            Err(e) if e.code() == ErrorCode::OutOfResources && gpu.trim_queue_pool() => {
                tracing::debug!(device = %gpu.label, "out of memory: queue pool trimmed, trying again");
                device_memory(gpu, bytes)
            }
            r => r,
        },
        AllocKind::Host => {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: writes one host pointer.
            gpu.call("cuMemAllocHost", |d| unsafe {
                (d.cuMemAllocHost)(&mut p, bytes)
            })?;
            Ok(DevicePtr(p as u64))
        }
        AllocKind::Shared => {
            let mut p: sys::CUdeviceptr = 0;
            // SAFETY: writes one managed pointer.
            gpu.call("cuMemAllocManaged", |d| unsafe {
                (d.cuMemAllocManaged)(&mut p, bytes, sys::CU_MEM_ATTACH_GLOBAL)
            })?;
            Ok(DevicePtr(p))
        }
    }
}

fn device_memory(gpu: &Gpu, bytes: usize) -> Result<DevicePtr> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: writes one device pointer.
    gpu.call("cuMemAlloc", |d| unsafe { (d.cuMemAlloc)(&mut p, bytes) })?;
    Ok(DevicePtr(p))
}

pub fn free(gpu: &Gpu, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
    match kind {
        // SAFETY: the core frees only what `alloc` returned, once.
        AllocKind::Host => gpu.call("cuMemFreeHost", |d| unsafe {
            (d.cuMemFreeHost)(ptr.0 as usize as *mut c_void)
        }),
        AllocKind::Device | AllocKind::Shared => {
            // SAFETY: as above (managed memory is freed with cuMemFree too).
            gpu.call("cuMemFree", |d| unsafe { (d.cuMemFree)(ptr.0) })
        }
    }
}

/// Page-lock `[ptr, ptr + size)` of host memory for fast asynchronous copies.
///
/// # Safety
/// The range must be host memory of this process that stays mapped until
/// [`unregister_host`].
pub unsafe fn register_host(gpu: &Gpu, ptr: *mut u8, size: usize) -> Result<()> {
    let mut registered = gpu.host_registrations.lock();
    // The same range registered by another GPU of the plugin: one more.
    if let Some(r) = registered.get_mut(&(ptr as usize)) {
        if r.size == size {
            r.devices += 1;
            return Ok(());
        }
    }
    // SAFETY: the caller guarantees the range.
    let r = gpu.call_raw(|d| unsafe {
        (d.cuMemHostRegister)(ptr.cast(), size, sys::CU_MEMHOSTREGISTER_PORTABLE)
    })?;
    // Memory the program page-locked itself serves as it is (LLVM's
    // plugin does not register at all).
    let external = r == sys::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if !external {
        crate::driver::check(
            &gpu.driver,
            r,
            format_args!("{}: cuMemHostRegister", gpu.label),
        )?;
    }
    let entry = HostRegistration {
        size,
        devices: 1,
        external,
    };
    registered.insert(ptr as usize, entry);
    Ok(())
}

/// Undo [`register_host`] (the driver's registration goes with the last
/// device that made it).
pub fn unregister_host(gpu: &Gpu, ptr: *mut u8) -> Result<()> {
    let mut registered = gpu.host_registrations.lock();
    if let Some(r) = registered.get_mut(&(ptr as usize)) {
        r.devices -= 1;
        if r.devices > 0 {
            return Ok(());
        }
        let external = r.external;
        registered.remove(&(ptr as usize));
        if external {
            return Ok(());
        }
    }
    // SAFETY: the driver checks that `ptr` was registered.
    gpu.call("cuMemHostUnregister", |d| unsafe {
        (d.cuMemHostUnregister)(ptr.cast())
    })
}
