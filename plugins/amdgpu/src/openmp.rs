//! What the plugin does for the OpenMP device runtime linked into a code
//! object (ours or LLVM's; the layouts are `offload_core::openmp_env`'s):
//! the device environment written at load, and a launch environment with
//! a zeroed reduction buffer for each launch of a kernel with a teams
//! reduction (its address becomes the kernel's first argument, `dyn_ptr`).

use std::ffi::c_void;

use offload_core::openmp_env::{
    launch_environment, DeviceEnvironment, DEVICE_ENVIRONMENT_GLOBAL, LAUNCH_ENVIRONMENT_SIZE,
};
use offload_core::plugin::{AllocKind, DevicePtr};
use offload_core::Result;

use crate::gpu::Gpu;
use crate::image::Loaded;
use crate::memory::{self, Host};

/// What every image's device environment says about the runtime around
/// it, fixed when the plugin enumerates its GPUs.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenMpSettings {
    /// GPUs of this plugin.
    pub num_devices: u32,
    /// `LIBOMPTARGET_DEVICE_RTL_DEBUG`.
    pub debug_kind: u32,
}

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

/// One launch's environment and reduction buffer, in one device
/// allocation (the buffer first, the 16-byte environment after it), freed
/// when dropped, after the launch that used it was waited for.
pub struct LaunchEnvironment<'g> {
    gpu: &'g Gpu,
    ptr: DevicePtr,
    buffer_bytes: u64,
}

impl<'g> LaunchEnvironment<'g> {
    pub fn new(gpu: &'g Gpu, buffer_bytes: u64) -> Result<LaunchEnvironment<'g>> {
        let buffer_bytes = buffer_bytes.div_ceil(16) * 16;
        let total = buffer_bytes as usize + LAUNCH_ENVIRONMENT_SIZE;
        let ptr = memory::alloc(gpu, total, AllocKind::Device)?;
        let env = LaunchEnvironment {
            gpu,
            ptr,
            buffer_bytes,
        };
        // SAFETY: the allocation just made, `total` bytes.
        unsafe { memory::fill(gpu, ptr, &[0], buffer_bytes as usize) }?;
        let bytes = launch_environment(ptr.0);
        // SAFETY: the last 16 bytes of the allocation; `bytes` outlives
        // the copy, which is waited for.
        unsafe {
            memory::copy(
                gpu,
                env.address() as *mut c_void,
                bytes.as_ptr().cast(),
                bytes.len(),
                Host::Src,
            )
        }?;
        Ok(env)
    }

    /// The environment's device address (the kernel's `dyn_ptr`).
    pub fn address(&self) -> u64 {
        self.ptr.0 + self.buffer_bytes
    }
}

impl Drop for LaunchEnvironment<'_> {
    fn drop(&mut self) {
        // SAFETY: our allocation; the launch that used it has finished.
        if let Err(e) = unsafe { memory::free(self.gpu, self.ptr, AllocKind::Device) } {
            tracing::warn!(device = %self.gpu.label, "freeing a launch environment: {e}");
        }
    }
}
