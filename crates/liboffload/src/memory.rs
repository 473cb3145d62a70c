//! olMemAlloc / olMemFree / olMemcpy / olMemFill / olMemRegister / olMemUnregister.
//!
//! Memory lives in the core: plugin-device allocations in the device's
//! allocation index (caching allocator in front), host-device allocations in
//! the runtime's host-memory index, both with owner [`OL_OWNER`]. So
//! olGetMemInfo answers for interior pointers, olMemFree rejects double,
//! interior and foreign frees, and every copy and fill is checked against
//! the allocation it names before anything moves. Copies are decided by
//! [`offload_core::Runtime::copy`].

use std::ffi::c_void;

use offload_core::plugin::DevicePtr;
use offload_core::Location;

use crate::abi;
use crate::error::{check_handle, check_ptr, err, ErrorCode, OlResult};
use crate::handles::{alloc_kind, context, Context, Device, DeviceKind, Registration, OL_OWNER};
use crate::types::*;

/// olMemAlloc.
///
/// # Safety
/// `out`, when not null, is writable for one pointer.
pub unsafe fn alloc(
    device: ol_device_handle_t,
    kind: ol_alloc_type_t,
    size: usize,
    out: *mut *mut c_void,
) -> OlResult {
    let ctx = context()?;
    if size == 0 {
        return Err(err(ErrorCode::InvalidSize, "validation failure: Size == 0"));
    }
    check_handle(device, "Device")?;
    check_ptr(out, "AllocationOut")?;
    let dev = ctx.device(device, "Device")?;
    let core_kind = alloc_kind(kind).ok_or_else(|| {
        err(
            ErrorCode::InvalidEnumeration,
            format!("ol_alloc_type_t enum '{}' is invalid", kind.0),
        )
    })?;
    let base = match dev.core() {
        Some(core) => core.alloc_for(size, core_kind, OL_OWNER)?.0 as *mut c_void,
        None => ctx.runtime.alloc_host(size, core_kind, OL_OWNER)? as *mut c_void,
    };
    // SAFETY: `out` is not null (checked above) and writable (our contract).
    unsafe { abi::write(out, base) };
    Ok(())
}

/// olMemFree: `address` is looked up, never dereferenced.
pub fn free(address: *mut c_void) -> OlResult {
    let ctx = context()?;
    check_ptr(address, "Address")?;
    let ptr = DevicePtr(address as usize as u64);
    let unknown = || {
        err(
            ErrorCode::InvalidArgument,
            format!(
                "address is not a known allocation: {address:p} was not returned by olMemAlloc or was already freed (double free or foreign pointer)"
            ),
        )
    };
    let (device, a) = ctx.find_allocation(address as usize).ok_or_else(unknown)?;
    if a.base != ptr {
        return Err(err(
            ErrorCode::InvalidArgument,
            format!(
                "address is not a known allocation: {address:p} points inside the {}-byte allocation at {}; free its base address",
                a.size, a.base
            ),
        ));
    }
    match ctx.devices[device].core() {
        Some(core) => core.free(ptr),
        None => ctx.runtime.free_host(ptr),
    }
}

/// Where `ptr` given with `dev` lives, for [`offload_core::Runtime::copy`].
fn location(dev: &Device, ptr: *const c_void) -> Location {
    match dev.core() {
        Some(core) => Location::Device(core.id(), DevicePtr(ptr as usize as u64)),
        None => Location::Host(ptr.cast()),
    }
}

/// olMemcpy.
///
/// # Safety
/// `dst` and `src` are valid for `size` bytes where they name host memory
/// (device memory is checked against its allocation), until the queue
/// reaches the copy when one is given.
#[allow(clippy::too_many_arguments)]
pub unsafe fn memcpy(
    queue: ol_queue_handle_t,
    dst: *mut c_void,
    dst_device: ol_device_handle_t,
    src: *const c_void,
    src_device: ol_device_handle_t,
    size: usize,
) -> OlResult {
    let ctx = context()?;
    // LLVM's order: handles, then pointers.
    check_handle(dst_device, "DstDevice")?;
    check_handle(src_device, "SrcDevice")?;
    check_ptr(dst, "DstPtr")?;
    check_ptr(src, "SrcPtr")?;
    let ddev = ctx.device(dst_device, "DstDevice")?;
    let sdev = ctx.device(src_device, "SrcDevice")?;
    let q = if queue.is_null() {
        None
    } else {
        Some(ctx.queue(queue)?)
    };
    // The header: "If a queue is specified, at least one device must be a
    // non-host device" (LLVM checks this before anything else, size 0 too).
    if q.is_some() && sdev.is_host() && ddev.is_host() {
        return Err(err(
            ErrorCode::InvalidArgument,
            "one of DstDevice and SrcDevice must be a non-host device if queue is specified",
        ));
    }
    if size == 0 {
        return Ok(());
    }
    // SAFETY: host locations are valid for `size` bytes until the copy runs
    // (our contract, which is Runtime::copy's).
    unsafe {
        ctx.runtime.copy(
            location(ddev, dst),
            location(sdev, src),
            size,
            q.as_deref().map(|q| &q.core),
        )
    }
}

/// olMemFill.
///
/// # Safety
/// `pattern` is readable for `pattern_size` bytes; `ptr`, where it is host
/// memory not found in an allocation, is writable for `size` bytes until
/// the queue reaches the fill.
pub unsafe fn fill(
    queue: ol_queue_handle_t,
    ptr: *mut c_void,
    pattern_size: usize,
    pattern: *const c_void,
    size: usize,
) -> OlResult {
    let ctx = context()?;
    if size.checked_rem(pattern_size) != Some(0) {
        return Err(err(
            ErrorCode::InvalidSize,
            format!("validation failure: FillSize % PatternSize != 0 (FillSize {size}, PatternSize {pattern_size})"),
        ));
    }
    check_ptr(ptr, "Ptr")?;
    check_ptr(pattern, "PatternPtr")?;
    let q = if queue.is_null() {
        None
    } else {
        Some(ctx.queue(queue)?)
    };
    // SAFETY: `pattern` is not null (checked above) and readable for
    // `pattern_size` bytes (our contract); the core copies it before we return.
    let pat = unsafe { abi::bytes(pattern, pattern_size) };
    let dst = DevicePtr(ptr as usize as u64);
    // Which device the memory lives on: the queue's, else the allocation's.
    let found = ctx.find_allocation(ptr as usize);
    if let Some((_, a)) = found {
        if (ptr as usize)
            .checked_add(size)
            .is_none_or(|end| end as u64 > a.base.0 + a.size as u64)
        {
            return Err(err(
                ErrorCode::InvalidSize,
                format!(
                    "fill of {size} bytes at {ptr:p} runs past the end of its {}-byte allocation at {}",
                    a.size, a.base
                ),
            ));
        }
    }
    if size == 0 {
        return Ok(());
    }
    if let Some(q) = q {
        return q.core.fill(dst, pat, size);
    }
    let Some((device, _)) = found else {
        return Err(err(
            ErrorCode::InvalidArgument,
            format!("{ptr:p} is not inside an olMemAlloc allocation; pass the queue of the device that owns it"),
        ));
    };
    match &ctx.devices[device].kind {
        DeviceKind::Host => {
            // SAFETY: `[ptr, ptr + size)` lies inside a live host-device
            // allocation (found and range-checked above); `size` is a
            // multiple of the pattern (checked first); the pattern is the
            // caller's separate input buffer (olMemFill's contract).
            unsafe { offload_core::transfer::host_fill(ptr.cast(), pat, size) };
            Ok(())
        }
        DeviceKind::Plugin { core } => core.fill(dst, pat, size),
    }
}

/// olMemRegister.
///
/// # Safety
/// `[ptr, ptr + size)` is host memory of the caller that stays mapped until
/// olMemUnregister; `pinned`, when not null, is writable for one pointer.
pub unsafe fn register(
    device: ol_device_handle_t,
    ptr: *mut c_void,
    size: usize,
    _flags: ol_memory_register_flags_t,
    pinned: *mut *mut c_void,
) -> OlResult {
    let ctx = context()?;
    if size == 0 {
        return Err(err(ErrorCode::InvalidSize, "validation failure: Size == 0"));
    }
    check_handle(device, "Device")?;
    check_ptr(ptr, "Ptr")?;
    check_ptr(pinned, "PinnedPtr")?;
    let dev = ctx.device(device, "Device")?;
    if !dev.registers_host_memory() {
        return Err(err(
            ErrorCode::Unsupported,
            format!("{} cannot register host memory", dev.label()),
        ));
    }
    let base = ptr as usize;
    let end = base.checked_add(size).filter(|&e| e <= isize::MAX as usize).ok_or_else(|| {
        err(
            ErrorCode::InvalidSize,
            format!("[{ptr:p}, +{size}) is not a range of host memory (it wraps around the address space)"),
        )
    })?;
    let mut regs = lock_regs(ctx);
    for r in regs.iter_mut().filter(|r| r.device == dev.index) {
        let (rb, re) = (r.base, r.base + r.size);
        if base >= rb && end <= re {
            // Inside an existing registration: one more user.
            r.users += 1;
            // SAFETY: `pinned` is not null (checked above) and writable
            // (our contract).
            unsafe { abi::write(pinned, ptr) };
            return Ok(());
        }
        if base < re && end > rb {
            return Err(err(
                ErrorCode::InvalidArgument,
                format!(
                    "[{base:#x}, {end:#x}) partially overlaps the registered range [{rb:#x}, {re:#x}) on {}",
                    dev.label()
                ),
            ));
        }
    }
    if let Some(core) = dev.core() {
        // SAFETY: the caller registers its own memory and keeps it mapped
        // until olMemUnregister (our contract, the API's).
        unsafe { core.register_host_range(DevicePtr(base as u64), size, OL_OWNER) }?;
    }
    regs.push(Registration {
        device: dev.index,
        base,
        size,
        users: 1,
    });
    // The pinned pointer is the pointer: host-memory devices reach host
    // memory directly, and CUDA maps registered memory at the same address
    // (unified addressing).
    // SAFETY: `pinned` is not null (checked above) and writable (our contract).
    unsafe { abi::write(pinned, ptr) };
    Ok(())
}

fn lock_regs(ctx: &Context) -> std::sync::MutexGuard<'_, Vec<Registration>> {
    ctx.registrations.lock().unwrap_or_else(|e| e.into_inner())
}

/// olMemUnregister: `ptr` is looked up, never dereferenced.
pub fn unregister(device: ol_device_handle_t, ptr: *mut c_void) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_ptr(ptr, "Ptr")?;
    let dev = ctx.device(device, "Device")?;
    let p = ptr as usize;
    let mut regs = lock_regs(ctx);
    let i = regs
        .iter()
        .position(|r| r.device == dev.index && p >= r.base && p < r.base + r.size)
        .ok_or_else(|| {
            err(
                ErrorCode::InvalidArgument,
                format!(
                    "{ptr:p} is not registered on {} (olMemRegister)",
                    dev.label()
                ),
            )
        })?;
    regs[i].users -= 1;
    if regs[i].users == 0 {
        let r = regs.swap_remove(i);
        if let Some(core) = dev.core() {
            core.unregister_host_range(DevicePtr(r.base as u64))?;
        }
    }
    Ok(())
}
