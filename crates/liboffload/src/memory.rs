//! olMemAlloc / olMemFree / olMemcpy / olMemFill / olMemRegister / olMemUnregister.
//!
//! Every allocation is recorded in the context's table (base -> size, type,
//! device), which answers olGetMemInfo for interior pointers and lets
//! olMemFree find the owning device and reject double frees, interior and
//! foreign pointers. Host-device allocations are `posix_memalign`
//! memory; plugin-device allocations go through the core device (caching
//! allocator and its own allocation table).

use std::ffi::c_void;

use offload_core::plugin::DevicePtr;

use crate::error::{check_handle, check_ptr, err, ErrorCode, OlResult};
use crate::handles::{alloc_kind, context, Allocation, Context, DeviceKind, Registration};
use crate::queue::{finish, submit};
use crate::types::*;

const HOST_ALIGN: usize = 64;

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
        Some(core) => core.alloc(size, core_kind)?.0 as usize,
        None => {
            let mut p: *mut c_void = std::ptr::null_mut();
            if libc::posix_memalign(&mut p, HOST_ALIGN, size) != 0 || p.is_null() {
                return Err(err(
                    ErrorCode::OutOfResources,
                    format!("host allocation of {size} bytes failed"),
                ));
            }
            p as usize
        }
    };
    ctx.allocations
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            base,
            Allocation {
                size,
                kind,
                device: dev.index,
            },
        );
    out.write(base as *mut c_void);
    Ok(())
}

pub unsafe fn free(address: *mut c_void) -> OlResult {
    let ctx = context()?;
    check_ptr(address, "Address")?;
    let base = address as usize;
    let removed = {
        let mut allocs = ctx.allocations.lock().unwrap_or_else(|e| e.into_inner());
        match allocs.remove(&base) {
            Some(a) => a,
            None => {
                let inside = allocs
                    .range(..=base)
                    .next_back()
                    .filter(|(b, a)| base < **b + a.size)
                    .map(|(b, a)| (*b, a.size));
                let msg = match inside {
                    Some((b, size)) => format!(
                        "address is not a known allocation: {address:p} points inside the {size}-byte allocation at {:#x}; free its base address",
                        b
                    ),
                    None => format!(
                        "address is not a known allocation: {address:p} was not returned by olMemAlloc or was already freed (double free or foreign pointer)"
                    ),
                };
                return Err(err(ErrorCode::InvalidArgument, msg));
            }
        }
    };
    match ctx.devices[removed.device].core() {
        Some(core) => core.free(DevicePtr(base as u64)),
        None => {
            libc::free(address);
            Ok(())
        }
    }
}

/// Bytes `[ptr, ptr+size)` as a slice of host memory.
///
/// # Safety
/// The caller guarantees the range is readable.
unsafe fn host_slice<'a>(ptr: *const c_void, size: usize) -> &'a [u8] {
    std::slice::from_raw_parts(ptr.cast::<u8>(), size)
}

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
    // With a queue the copy runs on its worker, after the queue's earlier
    // work, through the plugin queue when that belongs to the device whose
    // memory is named (else through the core device); without one, now.
    let q = q.as_deref();
    let raw_for = |dev: usize| q.filter(|q| q.device == dev).and_then(|q| q.raw.clone());
    let (d, s) = (dst as usize, src as usize);
    match (&sdev.kind, &ddev.kind) {
        (DeviceKind::Host, DeviceKind::Host) => submit(q, move || {
            // SAFETY: the caller names `size` valid bytes at both addresses.
            unsafe { std::ptr::copy(s as *const u8, d as *mut u8, size) };
            Ok(())
        }),
        (DeviceKind::Host, DeviceKind::Plugin { core, .. }) => {
            let (raw, core) = (raw_for(ddev.index), core.clone());
            submit(q, move || unsafe {
                // SAFETY: as above.
                match raw {
                    Some(raw) => finish(
                        &*raw,
                        raw.copy_to_device(DevicePtr(d as u64), s as *const u8, size),
                    ),
                    None => core.copy_to_device(DevicePtr(d as u64), s as *const u8, size),
                }
            })
        }
        (DeviceKind::Plugin { core, .. }, DeviceKind::Host) => {
            let (raw, core) = (raw_for(sdev.index), core.clone());
            submit(q, move || unsafe {
                // SAFETY: as above.
                match raw {
                    Some(raw) => finish(
                        &*raw,
                        raw.copy_from_device(d as *mut u8, DevicePtr(s as u64), size),
                    ),
                    None => core.copy_from_device(d as *mut u8, DevicePtr(s as u64), size),
                }
            })
        }
        (DeviceKind::Plugin { core: sc, .. }, DeviceKind::Plugin { core: dc, .. }) => {
            let raw = if sdev.index == ddev.index {
                raw_for(sdev.index)
            } else {
                None
            };
            let (sc, dc) = (sc.clone(), dc.clone());
            submit(q, move || match raw {
                Some(raw) => finish(
                    &*raw,
                    raw.copy_within(DevicePtr(d as u64), DevicePtr(s as u64), size),
                ),
                None => sc.copy_to(&dc, DevicePtr(d as u64), DevicePtr(s as u64), size),
            })
        }
    }
}

/// Fill host memory with a repeated pattern.
unsafe fn host_fill(dst: *mut u8, pattern: &[u8], size: usize) {
    if pattern.len() == 1 {
        std::ptr::write_bytes(dst, pattern[0], size);
        return;
    }
    let mut off = 0;
    while off < size {
        std::ptr::copy_nonoverlapping(pattern.as_ptr(), dst.add(off), pattern.len());
        off += pattern.len();
    }
}

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
    let pat = host_slice(pattern, pattern_size);
    let found = ctx.find_allocation(ptr as usize);
    if let Some((base, a)) = found {
        if ptr as usize + size > base + a.size {
            return Err(err(
                ErrorCode::InvalidSize,
                format!(
                    "fill of {size} bytes at {ptr:p} runs past the end of its {}-byte allocation at {base:#x}",
                    a.size
                ),
            ));
        }
    }
    if size == 0 {
        return Ok(());
    }
    // Which device the memory lives on: the queue's, else the allocation's.
    let device = match (&q, found) {
        (Some(q), _) => q.device,
        (None, Some((_, a))) => a.device,
        (None, None) => {
            return Err(err(
                ErrorCode::InvalidArgument,
                format!("{ptr:p} is not inside an olMemAlloc allocation; pass the queue of the device that owns it"),
            ))
        }
    };
    let dev = &ctx.devices[device];
    let Some(q) = q else {
        // No queue: now, in the calling thread.
        return match &dev.kind {
            DeviceKind::Host => {
                host_fill(ptr.cast(), pat, size);
                Ok(())
            }
            DeviceKind::Plugin { core, .. } => core.fill(DevicePtr(ptr as u64), pat, size),
        };
    };
    // Queued: the pattern is copied now (the caller may reuse its buffer).
    let pat = pat.to_vec();
    let p = ptr as usize;
    let op: Box<dyn FnOnce() -> OlResult + Send> = match (&dev.kind, q.raw.clone()) {
        (DeviceKind::Host, _) => Box::new(move || {
            // SAFETY: the caller names `size` writable bytes at `p`.
            unsafe { host_fill(p as *mut u8, &pat, size) };
            Ok(())
        }),
        (DeviceKind::Plugin { .. }, Some(raw)) => {
            Box::new(move || finish(&*raw, raw.fill(DevicePtr(p as u64), &pat, size)))
        }
        (DeviceKind::Plugin { core, .. }, None) => {
            let core = core.clone();
            Box::new(move || core.fill(DevicePtr(p as u64), &pat, size))
        }
    };
    q.worker.enqueue(op)
}

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
    if !dev.shares_host_memory() {
        return Err(err(
            ErrorCode::Unsupported,
            format!("{} cannot register host memory", dev.label()),
        ));
    }
    let (base, end) = (ptr as usize, ptr as usize + size);
    let mut regs = lock_regs(&ctx);
    for r in regs.iter_mut().filter(|r| r.device == dev.index) {
        let (rb, re) = (r.base, r.base + r.size);
        if base >= rb && end <= re {
            // Inside an existing registration: one more user.
            r.users += 1;
            pinned.write(ptr);
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
    regs.push(Registration {
        device: dev.index,
        base,
        size,
        users: 1,
    });
    // Host-memory devices reach host memory directly: the pinned pointer is the pointer.
    pinned.write(ptr);
    Ok(())
}

fn lock_regs(ctx: &Context) -> std::sync::MutexGuard<'_, Vec<Registration>> {
    ctx.registrations.lock().unwrap_or_else(|e| e.into_inner())
}

pub unsafe fn unregister(device: ol_device_handle_t, ptr: *mut c_void) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_ptr(ptr, "Ptr")?;
    let dev = ctx.device(device, "Device")?;
    let p = ptr as usize;
    let mut regs = lock_regs(&ctx);
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
        regs.swap_remove(i);
    }
    Ok(())
}
