//! What the plugin does for the OpenMP device runtime linked into a code
//! object (ours or LLVM's; the layouts are `offload_core::openmp_env`'s):
//! the device environment written at load, and a launch environment with
//! a zeroed reduction buffer for each launch of a kernel with a teams
//! reduction (its address becomes the kernel's first argument, `dyn_ptr`),
//! in blocks the GPU keeps for reuse.

use std::ffi::c_void;

use offload_core::openmp_env::{
    launch_environment, DeviceEnvironment, DEVICE_ENVIRONMENT_GLOBAL, LAUNCH_ENVIRONMENT_SIZE,
};
use offload_core::plugin::{AllocKind, DevicePtr};
use offload_core::{Error, Result};

use crate::gpu::Gpu;
use crate::image::Loaded;
use crate::memory::{self, Host};
use crate::reuse::Block;

/// The clock of `omp_get_wtime` on AMD GPUs (`s_memrealtime`) when the
/// runtime does not say: 100 MHz on every current GPU.
pub const DEFAULT_CLOCK_HZ: u64 = 100_000_000;

/// The device environment of `gpu`: the debug kind, the plugin's device
/// count and this GPU's index (the plugin's numbering, as LLVM), no
/// dynamic memory (launches carry it), the steady counter's frequency, no
/// indirect-call table, and the waves that can be resident at once
/// (compute units x waves per compute unit).
pub fn device_environment(gpu: &Gpu) -> DeviceEnvironment {
    let f = &gpu.facts;
    DeviceEnvironment {
        debug_kind: gpu.openmp.debug_kind,
        num_devices: gpu.openmp.num_devices,
        device_num: gpu.index,
        dynamic_mem_size: 0,
        clock_frequency: if f.timestamp_hz > 0 {
            f.timestamp_hz
        } else {
            DEFAULT_CLOCK_HZ
        },
        indirect_call_table: 0,
        indirect_call_table_size: 0,
        hardware_parallelism: u64::from(f.compute_units) * u64::from(f.max_waves_per_cu),
    }
}

/// Writes the device environment into a just-loaded program, when it has
/// one (OpenMP images do). A global of another size is an error.
pub(crate) fn write_device_environment(program: &Loaded) -> Result<()> {
    let gpu = &program.gpu;
    let Some((address, size)) = program.variable(DEVICE_ENVIRONMENT_GLOBAL)? else {
        return Ok(());
    };
    DeviceEnvironment::check_size(&gpu.label, size)?;
    let bytes = device_environment(gpu).to_bytes();
    // SAFETY: 48 bytes into the 48-byte global; `bytes` outlives the copy.
    unsafe {
        memory::copy(
            gpu,
            address.0 as *mut c_void,
            bytes.as_ptr().cast(),
            bytes.len(),
            Host::Src,
        )
    }?;
    tracing::debug!(device = %gpu.label, "{DEVICE_ENVIRONMENT_GLOBAL} written");
    Ok(())
}

/// One launch's environment and reduction buffer, in one device block:
/// the buffer first, the 16-byte environment in the block's last 16 bytes,
/// its buffer address written once, when the block is made. Each launch
/// zeroes the buffer and both counters with one fill; the block goes back
/// to the GPU's idle ones when dropped, after the launch was waited for.
pub struct LaunchEnvironment<'g> {
    gpu: &'g Gpu,
    block: Block,
}

impl<'g> LaunchEnvironment<'g> {
    pub fn new(gpu: &'g Gpu, buffer_bytes: u64) -> Result<LaunchEnvironment<'g>> {
        let need = usize::try_from(buffer_bytes.div_ceil(16) * 16)
            .ok()
            .and_then(|b| b.checked_add(LAUNCH_ENVIRONMENT_SIZE))
            .ok_or_else(|| {
                Error::out_of_resources(format!(
                    "{}: a teams-reduction buffer of {buffer_bytes} bytes",
                    gpu.label
                ))
            })?;
        let block = match gpu.scratch.launch_envs.take(need, need.saturating_mul(2)) {
            Some(block) => block,
            None => make_block(gpu, need).or_else(|_| {
                // Short of memory: give back what is idle, and try again.
                for idle in gpu.scratch.launch_envs.drain() {
                    // SAFETY: an idle block no launch uses any more.
                    let _ = unsafe { free_block(gpu, idle) };
                }
                make_block(gpu, need)
            })?,
        };
        let env = LaunchEnvironment { gpu, block };
        // The buffer and the two 32-bit counters that open the environment.
        let zeroed = block.capacity - LAUNCH_ENVIRONMENT_SIZE + 8;
        // SAFETY: the first `zeroed` bytes of the block, which no launch
        // uses while it is taken.
        unsafe { memory::fill(gpu, DevicePtr(block.ptr as u64), &[0], zeroed) }?;
        Ok(env)
    }

    /// The environment's device address (the kernel's `dyn_ptr`).
    pub fn address(&self) -> u64 {
        environment_address(self.block)
    }
}

fn environment_address(block: Block) -> u64 {
    (block.ptr + block.capacity - LAUNCH_ENVIRONMENT_SIZE) as u64
}

/// A device block of `capacity` bytes whose last 16 hold an environment
/// pointing at the block's start.
fn make_block(gpu: &Gpu, capacity: usize) -> Result<Block> {
    let ptr = memory::alloc(gpu, capacity, AllocKind::Device)?;
    let block = Block {
        ptr: ptr.0 as usize,
        capacity,
    };
    let bytes = launch_environment(ptr.0);
    // SAFETY: the block's last 16 bytes; `bytes` outlives the copy, which
    // is waited for.
    let written = unsafe {
        memory::copy(
            gpu,
            environment_address(block) as *mut c_void,
            bytes.as_ptr().cast(),
            bytes.len(),
            Host::Src,
        )
    };
    if let Err(e) = written {
        // SAFETY: the allocation just made, used by nobody.
        let _ = unsafe { memory::free(gpu, ptr, AllocKind::Device) };
        return Err(e);
    }
    tracing::debug!(device = %gpu.label, bytes = capacity, "teams-reduction launch environment allocated");
    Ok(block)
}

impl Drop for LaunchEnvironment<'_> {
    fn drop(&mut self) {
        let Some(extra) = self.gpu.scratch.launch_envs.keep(self.block) else {
            return;
        };
        // SAFETY: an idle block no launch uses any more.
        if let Err(e) = unsafe { free_block(self.gpu, extra) } {
            tracing::warn!(device = %self.gpu.label, "freeing a launch environment: {e}");
        }
    }
}

/// Frees a launch-environment block.
///
/// # Safety
/// A block of this GPU's launch environments that no launch uses.
pub(crate) unsafe fn free_block(gpu: &Gpu, block: Block) -> Result<()> {
    // SAFETY: the caller's guarantee.
    unsafe { memory::free(gpu, DevicePtr(block.ptr as u64), AllocKind::Device) }
}
