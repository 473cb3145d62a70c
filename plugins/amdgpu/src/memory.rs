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

use crate::gpu::{Gpu, HostRange};
use crate::sys;
use std::ffi::c_int;

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
    let ptr = pool_alloc(gpu, pool, size, kind)?;
    if kind != AllocKind::Device {
        if let Err(e) = allow_access(gpu, ptr) {
            // SAFETY: the allocation just made, used by nobody.
            unsafe { (gpu.rt.api.hsa_amd_memory_pool_free)(ptr) };
            return Err(e);
        }
        let range = HostRange {
            size,
            gpu_base: ptr as usize,
            registered: false,
            registrations: 0,
        };
        gpu.host_ranges.lock().insert(ptr as usize, range);
    }
    Ok(DevicePtr(ptr as u64))
}

fn pool_alloc(
    gpu: &Gpu,
    pool: sys::hsa_amd_memory_pool_t,
    size: usize,
    kind: AllocKind,
) -> Result<*mut c_void> {
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one pointer; flags 0.
    let r = unsafe { (gpu.rt.api.hsa_amd_memory_pool_allocate)(pool, size, 0, &mut ptr) };
    gpu.rt.check(
        r,
        format_args!("{}: allocating {size} bytes of {kind:?} memory", gpu.label),
    )?;
    Ok(ptr)
}

/// Lets every GPU of the plugin reach host-pool memory at `ptr` (ROCr
/// keeps system memory from the agents not named).
pub(crate) fn allow_access(gpu: &Gpu, ptr: *mut c_void) -> Result<()> {
    let agents = &gpu.gpu_agents;
    // SAFETY: `agents.len()` agents; no flags; `ptr` is a pool allocation.
    let r = unsafe {
        (gpu.rt.api.hsa_amd_agents_allow_access)(
            agents.len() as u32,
            agents.as_ptr(),
            std::ptr::null(),
            ptr,
        )
    };
    gpu.rt.check(
        r,
        format_args!("{}: hsa_amd_agents_allow_access", gpu.label),
    )
}

/// # Safety
/// `ptr` is a live allocation of [`alloc`] on this GPU.
pub unsafe fn free(gpu: &Gpu, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
    if kind != AllocKind::Device {
        gpu.host_ranges.lock().remove(&(ptr.0 as usize));
    }
    // SAFETY: the caller's guarantee.
    let r = unsafe { (gpu.rt.api.hsa_amd_memory_pool_free)(ptr.0 as *mut c_void) };
    gpu.rt
        .check(r, format_args!("{}: freeing {ptr}", gpu.label))
}

/// Locks `[ptr, ptr + size)` for every GPU until [`unregister_host`].
/// A range overlapping one the plugin knows (an allocation of its host
/// pool, or a registered range) is refused: unlocking it later would take
/// pool memory away from the GPUs.
///
/// # Safety
/// The range is host memory of this process, mapped until unregistered.
pub unsafe fn register_host(gpu: &Gpu, ptr: *mut u8, size: usize) -> Result<()> {
    // The same range registered by another GPU of the plugin: one more.
    if let Some(r) = gpu.host_ranges.lock().get_mut(&(ptr as usize)) {
        if r.registered && r.size == size {
            r.registrations += 1;
            return Ok(());
        }
    }
    if gpu.host_ranges.overlaps(ptr as usize, size) {
        return Err(Error::invalid_argument(format!(
            "{}: host memory at {ptr:p} ({size} bytes) overlaps memory already registered or allocated for the GPUs",
            gpu.label
        )));
    }
    let gpu_base = lock(gpu, ptr.cast(), size)?;
    let range = HostRange {
        size,
        gpu_base: gpu_base as usize,
        registered: true,
        registrations: 1,
    };
    gpu.host_ranges.lock().insert(ptr as usize, range);
    Ok(())
}

pub fn unregister_host(gpu: &Gpu, ptr: *mut u8) -> Result<()> {
    let mut ranges = gpu.host_ranges.lock();
    match ranges.get_mut(&(ptr as usize)) {
        Some(r) if r.registered && r.registrations > 1 => {
            r.registrations -= 1;
            return Ok(());
        }
        Some(r) if r.registered => {
            ranges.remove(&(ptr as usize));
        }
        _ => {
            return Err(Error::invalid_argument(format!(
                "{}: {ptr:p} is not registered host memory",
                gpu.label
            )))
        }
    }
    drop(ranges);
    unlock(gpu, ptr.cast())
}

/// Locks host memory for every GPU and returns the address GPUs use for it.
fn lock(gpu: &Gpu, ptr: *mut c_void, size: usize) -> Result<*mut c_void> {
    let mut agents = gpu.gpu_agents.clone();
    let mut agent_ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: the caller's range of host memory; `agents.len()` agents.
    let r = unsafe {
        (gpu.rt.api.hsa_amd_memory_lock)(
            ptr,
            size,
            agents.as_mut_ptr(),
            agents.len() as c_int,
            &mut agent_ptr,
        )
    };
    gpu.rt.check(
        r,
        format_args!(
            "{}: locking {size} bytes of host memory at {ptr:p}",
            gpu.label
        ),
    )?;
    Ok(if agent_ptr.is_null() { ptr } else { agent_ptr })
}

fn unlock(gpu: &Gpu, ptr: *mut c_void) -> Result<()> {
    // SAFETY: `ptr` was locked by `lock`.
    let r = unsafe { (gpu.rt.api.hsa_amd_memory_unlock)(ptr) };
    gpu.rt.check(
        r,
        format_args!("{}: unlocking host memory at {ptr:p}", gpu.label),
    )
}

/// Copies at most this many bytes through a staging buffer of the host
/// pool rather than locking the caller's memory (LLVM's threshold).
const STAGE_AT_MOST: usize = 1 << 20;
/// Bytes of one staging buffer.
const STAGE_CHUNK: usize = 4 << 20;

/// Copies `size` bytes from `src` to `dst` on the GPU's engine, where
/// either side may be ordinary host memory (`host` says which). Memory the
/// plugin knows (its host pool, registered ranges) is used where the GPUs
/// see it; other host memory is staged through host-pool memory when the
/// copy is small or cannot be locked (read-only pages), else locked for
/// the copy.
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
        // SAFETY: the caller's guarantee.
        Host::Neither => return unsafe { engine_copy(gpu, dst, src, size) },
    };
    // The copy with its host side at GPU address `at`.
    let with_host_at = |at: usize| match host {
        // SAFETY: the caller's ranges, the host one as the GPUs see it.
        Host::Src => unsafe { engine_copy(gpu, dst, at as *const c_void, size) },
        // SAFETY: as above.
        _ => unsafe { engine_copy(gpu, at as *mut c_void, src, size) },
    };
    if let Some(at) = gpu.host_ranges.gpu_address(host_ptr, size) {
        return with_host_at(at);
    }
    if size > STAGE_AT_MOST {
        if let Ok(at) = lock(gpu, host_ptr as *mut c_void, size) {
            let copied = with_host_at(at as usize);
            return copied.and(unlock(gpu, host_ptr as *mut c_void));
        }
    }
    // SAFETY: the caller's guarantee.
    unsafe { staged_copy(gpu, dst, src, size, host) }
}

/// One copy on the engine between GPU-reachable addresses.
///
/// # Safety
/// Both ranges are valid and GPU-reachable for `size` bytes.
unsafe fn engine_copy(gpu: &Gpu, dst: *mut c_void, src: *const c_void, size: usize) -> Result<()> {
    let api = &gpu.rt.api;
    let what = format!("copying {size} bytes from {src:p} to {dst:p}");
    // SAFETY: the caller's guarantee; the engine waits for the copy.
    gpu.engine.copy(&what, |signal| unsafe {
        (api.hsa_amd_memory_async_copy)(
            dst,
            gpu.agent,
            src,
            gpu.agent,
            size,
            0,
            std::ptr::null(),
            signal,
        )
    })
}

/// A copy through host-pool memory, a chunk at a time.
///
/// # Safety
/// As [`copy`]; `host` is `Src` or `Dst`.
unsafe fn staged_copy(
    gpu: &Gpu,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    host: Host,
) -> Result<()> {
    let chunk = size.min(STAGE_CHUNK);
    let stage = pool_alloc(gpu, gpu.host_pool, chunk, AllocKind::Host)?;
    let result = (|| {
        allow_access(gpu, stage)?;
        let mut done = 0;
        while done < size {
            let n = chunk.min(size - done);
            // SAFETY: `done + n <= size` inside the caller's ranges; the
            // stage holds `chunk >= n` bytes; each engine copy is waited for.
            unsafe {
                if host == Host::Src {
                    std::ptr::copy_nonoverlapping(
                        src.cast::<u8>().add(done),
                        stage.cast::<u8>(),
                        n,
                    );
                    engine_copy(gpu, dst.cast::<u8>().add(done).cast(), stage, n)?;
                } else {
                    engine_copy(gpu, stage, src.cast::<u8>().add(done).cast(), n)?;
                    std::ptr::copy_nonoverlapping(
                        stage.cast::<u8>(),
                        dst.cast::<u8>().add(done),
                        n,
                    );
                }
            }
            done += n;
        }
        Ok(())
    })();
    // SAFETY: the stage, used by nobody any more.
    unsafe { (gpu.rt.api.hsa_amd_memory_pool_free)(stage) };
    result
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
