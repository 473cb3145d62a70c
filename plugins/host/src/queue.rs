//! Queues and events. Host work runs when it is enqueued, on the calling
//! thread (OpenMP images) or on the worker pool (grids of packed kernels),
//! so a queue is always idle when an enqueue returns and events are complete
//! when recorded. Ordering is therefore trivially in-order.

use std::ffi::c_void;
use std::sync::OnceLock;

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::{Error, Result};

use crate::kernel::{call_words, HostItem, HostKernel, PackedKernelFn, HOST_ITEM_ABI_VERSION};
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

fn host_kernel(kernel: &dyn plugin::Kernel) -> Result<&HostKernel> {
    kernel.as_any().downcast_ref::<HostKernel>().ok_or_else(|| {
        Error::invalid_argument(format!(
            "kernel '{}' does not belong to the host plugin",
            kernel.name()
        ))
    })
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

fn validate(config: &LaunchConfig) -> Result<()> {
    if config.num_groups.contains(&0) || config.group_size.contains(&0) {
        return Err(Error::invalid_argument(format!(
            "launch size has a zero dimension: {:?} groups of {:?}",
            config.num_groups, config.group_size
        )));
    }
    if config.total_items_per_group() > MAX_GROUP_SIZE as u64 {
        return Err(Error::invalid_argument(format!(
            "group size {:?} exceeds the host device's limit of {MAX_GROUP_SIZE} work items",
            config.group_size
        )));
    }
    if config.dyn_group_memory as u64 > MAX_GROUP_MEMORY {
        return Err(Error::out_of_resources(format!(
            "{} bytes of dynamic group memory requested; the host device offers {MAX_GROUP_MEMORY}",
            config.dyn_group_memory
        )));
    }
    Ok(())
}

fn launch_packed(k: &HostKernel, args: &[u8], config: &LaunchConfig) -> Result<()> {
    validate(config)?;
    // SAFETY: packed host kernels have this signature (host_kernel.h).
    let f: PackedKernelFn =
        unsafe { std::mem::transmute::<*const c_void, PackedKernelFn>(k.entry) };
    let args_ptr = args.as_ptr() as usize;
    let groups = config.total_groups();
    let run_group = |g: u64, scratch: &mut Vec<u64>| {
        let [nx, ny, _] = config.num_groups.map(|n| n as u64);
        let gid = [
            (g % nx) as u32,
            ((g / nx) % ny) as u32,
            (g / (nx * ny)) as u32,
        ];
        let mem_words = (config.dyn_group_memory as usize).div_ceil(8);
        if scratch.len() < mem_words {
            scratch.resize(mem_words, 0);
        }
        let mut item = HostItem {
            abi_version: HOST_ITEM_ABI_VERSION,
            reserved: 0,
            num_groups: config.num_groups,
            group_size: config.group_size,
            group_id: gid,
            local_id: [0; 3],
            group_memory: if mem_words > 0 {
                scratch.as_mut_ptr().cast()
            } else {
                std::ptr::null_mut()
            },
            group_memory_size: config.dyn_group_memory as u64,
        };
        for z in 0..config.group_size[2] {
            for y in 0..config.group_size[1] {
                for x in 0..config.group_size[0] {
                    item.local_id = [x, y, z];
                    // SAFETY: the caller keeps the argument buffer alive for the launch.
                    unsafe { f(args_ptr as *const c_void, &item) };
                }
            }
        }
    };
    if groups == 1 {
        run_group(0, &mut Vec::new());
        return Ok(());
    }
    use rayon::prelude::*;
    worker_pool().install(|| {
        (0..groups)
            .into_par_iter()
            .for_each_init(Vec::new, |scratch, g| run_group(g, scratch));
    });
    Ok(())
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
        memory::copy(dst.as_ptr(), src, size);
        Ok(())
    }
    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        memory::copy(dst, src.as_ptr(), size);
        Ok(())
    }
    fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        // SAFETY: both are host-plugin allocations named by the caller.
        unsafe { memory::copy(dst.as_ptr(), src.as_ptr(), size) };
        Ok(())
    }
    fn copy_to_peer(
        &self,
        dst_device: &dyn plugin::Device,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<bool> {
        // All host devices share one address space.
        if dst_device.as_any().is::<crate::device::HostDevice>() {
            self.copy_within(dst, src, size)?;
            return Ok(true);
        }
        Ok(false)
    }
    fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        // SAFETY: as above.
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
