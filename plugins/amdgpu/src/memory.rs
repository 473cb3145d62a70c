//! Allocations from the GPU's and the host's memory pools, and copies and
//! fills through the GPU's engine.
//!
//! * Device memory comes from the GPU's coarse-grained pool.
//! * Host and shared memory come from the host's fine-grained pool, made
//!   reachable by the GPU (`hsa_amd_agents_allow_access`): the GPU reads
//!   and writes it in place.
//! * Copies from or to other host memory lock it for the copy's duration
//!   (`hsa_amd_memory_lock`), as the DMA engines need; memory registered
//!   with `olMemRegister` stays locked until unregistered.

use std::ffi::c_void;

use offload_core::plugin::{AllocKind, DevicePtr};
use offload_core::{Error, Result};

use crate::gpu::Gpu;

pub fn alloc(gpu: &Gpu, size: usize, kind: AllocKind) -> Result<DevicePtr> {
    if size == 0 {
        return Err(Error::invalid_argument(format!(
            "{}: allocation of 0 bytes",
            gpu.label
        )));
    }
    let pool = match kind {
        AllocKind::Device => gpu.device_pool,
        AllocKind::Host | AllocKind::Shared => gpu.host_pool,
    };
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one pointer; flags 0.
    let r = unsafe { (gpu.rt.api.hsa_amd_memory_pool_allocate)(pool, size, 0, &mut ptr) };
    gpu.rt.check(
        r,
        format_args!("{}: allocating {size} bytes of {kind:?} memory", gpu.label),
    )?;
    if kind != AllocKind::Device {
        if let Err(e) = allow_access(gpu, ptr) {
            // SAFETY: the allocation just made, used by nobody.
            unsafe { (gpu.rt.api.hsa_amd_memory_pool_free)(ptr) };
            return Err(e);
        }
        let mut map = gpu.reachable_host.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(ptr as usize, size);
    }
    Ok(DevicePtr(ptr as u64))
}

/// Lets the GPU reach host-pool memory at `ptr`.
pub(crate) fn allow_access(gpu: &Gpu, ptr: *mut c_void) -> Result<()> {
    // SAFETY: one agent; no flags; `ptr` is a pool allocation.
    let r =
        unsafe { (gpu.rt.api.hsa_amd_agents_allow_access)(1, &gpu.agent, std::ptr::null(), ptr) };
    gpu.rt.check(
        r,
        format_args!("{}: hsa_amd_agents_allow_access", gpu.label),
    )
}

/// # Safety
/// `ptr` is a live allocation of [`alloc`] on this GPU.
pub unsafe fn free(gpu: &Gpu, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
    if kind != AllocKind::Device {
        let mut map = gpu.reachable_host.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&(ptr.0 as usize));
    }
    // SAFETY: the caller's guarantee.
    let r = unsafe { (gpu.rt.api.hsa_amd_memory_pool_free)(ptr.0 as *mut c_void) };
    gpu.rt
        .check(r, format_args!("{}: freeing {ptr}", gpu.label))
}

/// Locks `[ptr, ptr + size)` for the GPU until [`unregister_host`].
///
/// # Safety
/// The range is host memory of this process, mapped until unregistered.
pub unsafe fn register_host(gpu: &Gpu, ptr: *mut u8, size: usize) -> Result<()> {
    lock(gpu, ptr.cast(), size)?;
    let mut map = gpu.reachable_host.lock().unwrap_or_else(|e| e.into_inner());
    map.insert(ptr as usize, size);
    Ok(())
}

pub fn unregister_host(gpu: &Gpu, ptr: *mut u8) -> Result<()> {
    let removed = {
        let mut map = gpu.reachable_host.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&(ptr as usize))
    };
    if removed.is_none() {
        return Err(Error::invalid_argument(format!(
            "{}: {ptr:p} is not registered host memory",
            gpu.label
        )));
    }
    unlock(gpu, ptr.cast())
}

/// Locks host memory and returns the address the GPU uses for it.
fn lock(gpu: &Gpu, ptr: *mut c_void, size: usize) -> Result<*mut c_void> {
    let mut agent = gpu.agent;
    let mut agent_ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: the caller's range of host memory; one agent.
    let r = unsafe { (gpu.rt.api.hsa_amd_memory_lock)(ptr, size, &mut agent, 1, &mut agent_ptr) };
    gpu.rt.check(
        r,
        format_args!(
            "{}: locking {size} bytes of host memory at {ptr:p}",
            gpu.label
        ),
    )?;
    Ok(agent_ptr)
}

fn unlock(gpu: &Gpu, ptr: *mut c_void) -> Result<()> {
    // SAFETY: `ptr` was locked by `lock`.
    let r = unsafe { (gpu.rt.api.hsa_amd_memory_unlock)(ptr) };
    gpu.rt.check(
        r,
        format_args!("{}: unlocking host memory at {ptr:p}", gpu.label),
    )
}

/// Copies `size` bytes from `src` to `dst` on the GPU's engine, where
/// either side may be host memory (`host` says which: the pointer that
/// is ordinary host memory), which is locked for the copy when the GPU
/// cannot reach it already.
///
/// # Safety
/// Both ranges are valid for `size` bytes for the call's duration.
pub unsafe fn copy(
    gpu: &Gpu,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    host: Host,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    let host_ptr = match host {
        Host::Src => src as usize,
        Host::Dst => dst as usize,
        Host::Neither => 0,
    };
    let locked = if host_ptr != 0 && !gpu.host_reachable(host_ptr, size) {
        Some(lock(gpu, host_ptr as *mut c_void, size)?)
    } else {
        None
    };
    let (dst_gpu, src_gpu) = match (host, locked) {
        (Host::Src, Some(p)) => (dst, p.cast_const()),
        (Host::Dst, Some(p)) => (p, src),
        _ => (dst, src),
    };
    let api = &gpu.rt.api;
    let what = format!("copying {size} bytes from {src:p} to {dst:p}");
    // SAFETY: both ranges are valid (the caller) and reachable by the
    // GPU (pool memory, or locked above); the engine waits for the copy.
    let copied = gpu.engine.copy(&what, |signal| unsafe {
        (api.hsa_amd_memory_async_copy)(
            dst_gpu,
            gpu.agent,
            src_gpu,
            gpu.agent,
            size,
            0,
            std::ptr::null(),
            signal,
        )
    });
    let unlocked = match locked {
        Some(_) => unlock(gpu, host_ptr as *mut c_void),
        None => Ok(()),
    };
    copied.and(unlocked)
}

/// Which side of a [`copy`] is ordinary host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    Src,
    Dst,
    Neither,
}

/// Fills `size` bytes at `dst` with `pattern` repeated: with the runtime's
/// 32-bit fill where the pattern, address and size allow it, else by
/// copying a filled host buffer.
///
/// # Safety
/// `[dst, dst + size)` is GPU-reachable memory; `size` is a multiple of
/// `pattern.len() > 0`.
pub unsafe fn fill(gpu: &Gpu, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    if let Some(word) = fill_word(pattern) {
        if dst.0.is_multiple_of(4) && size.is_multiple_of(4) {
            let api = &gpu.rt.api;
            let what = format!("filling {size} bytes at {dst}");
            // The runtime's fill is synchronous; the engine serialises it
            // with the GPU's other work and reports its status.
            return gpu.engine.copy(&what, |signal| {
                // SAFETY: the caller's range; `size / 4` words.
                let r = unsafe { (api.hsa_amd_memory_fill)(dst.0 as *mut c_void, word, size / 4) };
                // SAFETY: completes the engine's signal for the wait.
                unsafe { (api.hsa_signal_store_screlease)(signal, 0) };
                r
            });
        }
    }
    const CHUNK: usize = 1 << 20;
    let unit = pattern.len();
    let per_chunk = (CHUNK / unit).max(1) * unit;
    let buffer: Vec<u8> = pattern
        .iter()
        .copied()
        .cycle()
        .take(per_chunk.min(size))
        .collect();
    let mut done = 0;
    while done < size {
        let n = buffer.len().min(size - done);
        // SAFETY: the caller's range, `done + n <= size`; `buffer` lives
        // across the copy, which is waited for.
        unsafe {
            copy(
                gpu,
                (dst.0 as usize + done) as *mut c_void,
                buffer.as_ptr().cast(),
                n,
                Host::Src,
            )
        }?;
        done += n;
    }
    Ok(())
}

/// The 32-bit word that repeats `pattern`, for 1-, 2- and 4-byte patterns.
fn fill_word(pattern: &[u8]) -> Option<u32> {
    match *pattern {
        [b] => Some(u32::from_ne_bytes([b; 4])),
        [a, b] => Some(u32::from_ne_bytes([a, b, a, b])),
        [a, b, c, d] => Some(u32::from_ne_bytes([a, b, c, d])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fill_words_repeat_the_pattern() {
        assert_eq!(super::fill_word(&[7]), Some(0x0707_0707));
        assert_eq!(
            super::fill_word(&[1, 2]).map(u32::to_ne_bytes),
            Some([1, 2, 1, 2])
        );
        assert_eq!(
            super::fill_word(&[1, 2, 3, 4]).map(u32::to_ne_bytes),
            Some([1, 2, 3, 4])
        );
        assert_eq!(super::fill_word(&[1, 2, 3]), None);
        assert_eq!(super::fill_word(&[0; 8]), None);
    }
}
