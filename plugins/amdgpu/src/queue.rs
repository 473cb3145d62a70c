//! Queues. Every operation goes through the GPU's engine and has finished
//! when its call returns ([`plugin::Queue::completes_inline`]): the core
//! puts its executor in front where a face needs asynchronous queues.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::Result;

use crate::gpu::Gpu;
use crate::kernel::AmdgpuKernel;
use crate::memory::{self, Host};

pub struct AmdgpuQueue {
    pub(crate) gpu: Arc<Gpu>,
}

impl plugin::Queue for AmdgpuQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        // SAFETY: the caller's ranges.
        unsafe { memory::copy(&self.gpu, dst.0 as *mut c_void, src.cast(), size, Host::Src) }
    }

    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        // SAFETY: the caller's ranges.
        unsafe {
            memory::copy(
                &self.gpu,
                dst.cast(),
                src.0 as *const c_void,
                size,
                Host::Dst,
            )
        }
    }

    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        // SAFETY: the caller's ranges, both of this GPU.
        unsafe {
            memory::copy(
                &self.gpu,
                dst.0 as *mut c_void,
                src.0 as *const c_void,
                size,
                Host::Neither,
            )
        }
    }

    unsafe fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        // SAFETY: the caller's range and pattern.
        unsafe { memory::fill(&self.gpu, dst, pattern, size) }
    }

    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let k = plugin::own_kernel::<AmdgpuKernel>(kernel, "AMDGPU")?;
        if !Arc::ptr_eq(&k.program.gpu, &self.gpu) {
            return Err(plugin::kernel_on_other_device(
                &k.name,
                &k.program.gpu.label,
                &self.gpu.label,
            ));
        }
        k.launch(args, config)
    }

    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        f();
        Ok(())
    }

    fn record_event(&self) -> Result<Arc<dyn plugin::Event>> {
        Ok(Arc::new(plugin::FinishedEvent))
    }

    fn wait_event(&self, _event: &dyn plugin::Event) -> Result<()> {
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
