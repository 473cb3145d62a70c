//! Queues and events. A plugin queue runs its work when called, on the
//! calling thread (OpenMP images, single-group launches) or on the worker
//! pool (grids of packed kernels, see `group.rs`), so it is idle when
//! a call returns and its events are complete when recorded. The core puts
//! its executor in front ([`plugin::Queue::completes_inline`]): to users,
//! queued launches, copies and fills return once enqueued and run on the
//! queue's worker thread (and the pool), in order.

use std::ffi::c_void;
use std::sync::OnceLock;

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::{Error, ErrorCode, Result};

use crate::group::GroupLaunch;
use crate::kernel::{call_words, GroupsFn, HostKernel, PackedKernelFn, GROUP_ARGS_MAX};
use crate::memory;

/// Largest group size and dynamic group memory a host launch accepts.
pub const MAX_GROUP_SIZE: u32 = 1024;
pub const MAX_GROUP_MEMORY: u64 = 1 << 20;

pub struct HostQueue;

pub struct HostEvent;

impl plugin::Event for HostEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn is_complete(&self) -> Result<bool> {
        Ok(true)
    }
}

pub(crate) fn host_kernel(kernel: &dyn plugin::Kernel) -> Result<&HostKernel> {
    plugin::own_kernel(kernel, "host")
}

/// Run one launch to completion.
pub fn launch(
    kernel: &dyn plugin::Kernel,
    args: KernelArgs<'_>,
    config: &LaunchConfig,
) -> Result<()> {
    let k = host_kernel(kernel)?;
    let _s = tracing::debug_span!("host_launch", kernel = %k.name).entered();
    match args {
        // OpenMP host kernels fan out through libomp themselves: one call.
        // SAFETY: the face built one word per kernel parameter.
        KernelArgs::Words(words) => unsafe { call_words(k.entry, words) },
        KernelArgs::Packed(bytes) => launch_packed(k, bytes, config),
    }
}

/// Most work items one launch may have (groups x items per group): 2^48,
/// about 3 days of the emptiest kernel on one core. Larger grids, and
/// grids whose item count overflows 64 bits, are refused at launch.
pub const MAX_GRID_ITEMS: u64 = 1 << 48;

/// What the host device refuses for this launch of `k`: checked when the
/// launch is enqueued, so the caller gets the error at once.
#[inline]
pub(crate) fn validate(k: &HostKernel, config: &LaunchConfig) -> Result<()> {
    let wide = |d: [u32; 3]| d.iter().map(|&n| n as u128).product::<u128>();
    // Each at most 2^96: their product fits in 128 bits once the group
    // size is known to be at most MAX_GROUP_SIZE.
    let (groups, per_group) = (wide(config.num_groups), wide(config.group_size));
    if groups == 0 || per_group == 0 || per_group > MAX_GROUP_SIZE as u128 {
        return Err(bad_group(config));
    }
    if groups * per_group > MAX_GRID_ITEMS as u128 {
        return Err(bad_grid(k, config));
    }
    if config.dyn_group_memory as u64 + k.group_static_size > MAX_GROUP_MEMORY {
        return Err(bad_memory(k, config));
    }
    Ok(())
}

#[cold]
fn bad_group(config: &LaunchConfig) -> Error {
    if config.num_groups.contains(&0) || config.group_size.contains(&0) {
        return Error::invalid_argument(format!(
            "launch size has a zero dimension: {:?} groups of {:?}",
            config.num_groups, config.group_size
        ));
    }
    Error::invalid_argument(format!(
        "group size {:?} exceeds the host device's limit of {MAX_GROUP_SIZE} work items",
        config.group_size
    ))
}

#[cold]
fn bad_grid(k: &HostKernel, config: &LaunchConfig) -> Error {
    Error::invalid_argument(format!(
        "kernel '{}': a grid of {:?} groups of {:?} work items exceeds the host device's \
         limit of 2^48 work items per launch",
        k.name, config.num_groups, config.group_size
    ))
}

#[cold]
fn bad_memory(k: &HostKernel, config: &LaunchConfig) -> Error {
    Error::out_of_resources(format!(
        "{} bytes of dynamic group memory requested (+{} static of kernel '{}'); \
         the host device offers {MAX_GROUP_MEMORY}",
        config.dyn_group_memory, k.group_static_size, k.name
    ))
}

fn launch_packed(k: &HostKernel, args: &[u8], config: &LaunchConfig) -> Result<()> {
    validate(k, config)?;
    // A plain kernel's group loop (OFFLOAD_HOST_KERNEL's) copies the
    // arguments into a local buffer: only buffers that fit; a barrier
    // kernel's group form takes any.
    let loops_take_args = k.uses_barrier || args.len() <= GROUP_ARGS_MAX;
    let group = GroupLaunch {
        kernel: &k.name,
        // SAFETY: packed host kernels have this signature (host_kernel.h).
        entry: unsafe { std::mem::transmute::<*const c_void, PackedKernelFn>(k.entry) },
        group_entry: k.group_entry.filter(|_| loops_take_args).map(|e| {
            // SAFETY: as above (OFFLOAD_HOST_KERNEL defines both alike).
            unsafe { std::mem::transmute::<*const c_void, PackedKernelFn>(e) }
        }),
        groups_entry: k.groups_entry.filter(|_| loops_take_args).map(|e| {
            // SAFETY: `<kernel>_offload_groups` has this signature
            // (host_kernel.h's macros define it).
            unsafe { std::mem::transmute::<*const c_void, GroupsFn>(e) }
        }),
        args: args.as_ptr().cast(),
        args_size: u32::try_from(args.len()).unwrap_or(u32::MAX),
        num_groups: config.num_groups,
        group_size: config.group_size,
        dyn_group_memory: config.dyn_group_memory as usize,
        static_group_memory: k.group_static_size as usize,
        uses_barrier: k.uses_barrier,
        generated_group: k.generated_group,
    };
    let failed = |e: String| Error::new(ErrorCode::InvalidArgument, e);
    let groups = config.total_groups();
    if groups == 1 {
        return group.run_at([0; 3]).map_err(failed);
    }
    use rayon::prelude::*;
    let pool = worker_pool();
    let chunk = chunk_len(groups, pool.current_num_threads());
    let shared = SharedLaunch(&group);
    pool.install(|| {
        (0..groups.div_ceil(chunk))
            .into_par_iter()
            .try_for_each(|c| shared.run(c * chunk, groups.min((c + 1) * chunk)))
            .map_err(failed)
    })
}

/// Groups per piece of work a worker takes (consecutive groups, run by one
/// call): about 16 pieces per worker thread, so that a thread slowed down
/// by others' work on the machine leaves its share to the rest, while the
/// set-up per piece and the pool's bookkeeping stay small against the
/// groups' work. At most 4096 groups, so a piece is never more than a small
/// fraction of a large launch.
pub(crate) fn chunk_len(groups: u64, threads: usize) -> u64 {
    let pieces = (threads.max(1) as u64) * 16;
    groups.div_ceil(pieces).clamp(1, 4096)
}

/// A launch's groups shared by the worker threads.
struct SharedLaunch<'a>(&'a GroupLaunch<'a>);

// SAFETY: the argument buffer and kernel entry are read-only during the
// launch, which the calling thread waits for; kernels are written to run
// their groups on any thread.
unsafe impl Sync for SharedLaunch<'_> {}

impl SharedLaunch<'_> {
    fn run(&self, start: u64, end: u64) -> std::result::Result<(), String> {
        self.0.run_range(start, end)
    }
}

/// The worker pool for grids: one thread per CPU, started on first use.
fn worker_pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("offload-host-{i}"))
            .build()
            .expect("starting the host worker pool")
    })
}

impl plugin::Queue for HostQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        // SAFETY: the trait's contract: `src` is valid for `size` bytes and
        // the core checked `dst..dst+size` against a live allocation.
        unsafe { memory::copy(dst.as_ptr(), src, size) };
        Ok(())
    }
    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        // SAFETY: as above, the other way.
        unsafe { memory::copy(dst, src.as_ptr(), size) };
        Ok(())
    }
    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        // SAFETY: both ranges lie inside live ranges of host-plugin memory:
        // the core checks them before it calls (offload_core::plugin, "What
        // the core validates"); memmove allows overlap.
        unsafe { memory::copy(dst.as_ptr(), src.as_ptr(), size) };
        Ok(())
    }
    unsafe fn copy_to_peer(
        &self,
        dst_device: &dyn plugin::Device,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<bool> {
        // All host devices share one address space.
        if dst_device.as_any().is::<crate::device::HostDevice>() {
            // SAFETY: the caller's guarantee: both ranges are live host-plugin
            // memory, one address space for every host device.
            unsafe { self.copy_within(dst, src, size) }?;
            return Ok(true);
        }
        Ok(false)
    }
    unsafe fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        // SAFETY: the range lies inside a live range of host-plugin memory
        // and `size` is a multiple of `pattern.len()` (the core checks both:
        // offload_core::plugin, "What the core validates"); device memory,
        // which no shared slice such as `pattern` points into.
        unsafe { memory::fill(dst.as_ptr(), pattern, size) };
        Ok(())
    }
    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        launch(kernel, args, config)
    }
    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        f();
        Ok(())
    }
    fn record_event(&self) -> Result<std::sync::Arc<dyn plugin::Event>> {
        Ok(std::sync::Arc::new(HostEvent))
    }
    fn wait_event(&self, _event: &dyn plugin::Event) -> Result<()> {
        // Every queue runs its work at enqueue time, so any event is complete.
        Ok(())
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn is_idle(&self) -> Result<bool> {
        Ok(true)
    }
    fn completes_inline(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_len;

    #[test]
    fn pieces_of_a_grid() {
        // About 16 pieces per thread, at least one group, at most 4096.
        assert_eq!(chunk_len(2, 2), 1);
        assert_eq!(chunk_len(1 << 16, 2), 2048);
        assert_eq!(chunk_len(1 << 30, 2), 4096);
        assert_eq!(chunk_len(100, 0), 7);
        for (groups, threads) in [(1u64, 1usize), (33, 2), (1 << 16, 16), (12345, 3)] {
            let c = chunk_len(groups, threads);
            assert!(
                groups.div_ceil(c) <= threads as u64 * 16,
                "{groups} on {threads}"
            );
        }
    }
}
