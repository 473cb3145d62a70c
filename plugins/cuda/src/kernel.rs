//! A kernel: a `CUfunction` of a loaded module.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use offload_core::plugin;
use offload_core::Result;

use crate::image::Module;
use crate::sys;

/// Group size used when the driver's occupancy calculator fails.
pub const DEFAULT_GROUP_SIZE: u32 = 128;
/// Dynamic shared memory a launch gets without opting in.
pub const DEFAULT_DYNAMIC_SHARED: u32 = 48 * 1024;

pub struct CudaKernel {
    pub(crate) name: String,
    function: usize,
    /// Keeps the module loaded while the kernel is alive.
    pub(crate) module: Arc<Module>,
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub(crate) max_threads: u32,
    /// The dynamic shared memory this kernel was opted in to (above 48 KiB).
    pub(crate) dyn_shared_optin: AtomicU32,
}

impl CudaKernel {
    pub(crate) fn new(
        module: Arc<Module>,
        name: &str,
        function: sys::CUfunction,
    ) -> Result<CudaKernel> {
        let mut max = 0;
        // SAFETY: writes one int for a valid function.
        module.gpu.call("cuFuncGetAttribute", |d| unsafe {
            (d.cuFuncGetAttribute)(
                &mut max,
                sys::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                function,
            )
        })?;
        Ok(CudaKernel {
            name: name.to_string(),
            function: function as usize,
            module,
            max_threads: max.max(1) as u32,
            dyn_shared_optin: AtomicU32::new(DEFAULT_DYNAMIC_SHARED),
        })
    }

    pub(crate) fn raw(&self) -> sys::CUfunction {
        self.function as sys::CUfunction
    }

    /// Make sure launches may ask for `bytes` of dynamic shared memory
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, needed above 48 KiB).
    pub(crate) fn opt_in_shared(&self, bytes: u32) -> Result<()> {
        if bytes <= self.dyn_shared_optin.load(Ordering::Relaxed) {
            return Ok(());
        }
        let f = self.raw();
        // SAFETY: sets one attribute of a valid function.
        self.module.gpu.call("cuFuncSetAttribute", |d| unsafe {
            (d.cuFuncSetAttribute)(
                f,
                sys::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
        })?;
        self.dyn_shared_optin.fetch_max(bytes, Ordering::Relaxed);
        Ok(())
    }
}

impl plugin::Kernel for CudaKernel {
    fn name(&self) -> &str {
        &self.name
    }

    /// The driver's occupancy calculator (`cuOccupancyMaxPotentialBlockSize`).
    fn preferred_group_size(&self, dyn_group_memory: usize) -> u32 {
        let (mut min_grid, mut block) = (0, 0);
        let f = self.raw();
        // SAFETY: writes two ints; no block-size callback.
        let r = self
            .module
            .gpu
            .call("cuOccupancyMaxPotentialBlockSize", |d| unsafe {
                (d.cuOccupancyMaxPotentialBlockSize)(
                    &mut min_grid,
                    &mut block,
                    f,
                    None,
                    dyn_group_memory,
                    0,
                )
            });
        match r {
            Ok(()) if block > 0 => block as u32,
            _ => DEFAULT_GROUP_SIZE.min(self.max_threads),
        }
    }
}
