//! A kernel: a `CUfunction` of a loaded module.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use offload_core::launch::{ExecMode, GridValues, OpenMpKernel};
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
    /// For an OpenMP kernel: its mode and this GPU's grid values, from
    /// which the core picks launch sizes.
    openmp: Option<OpenMpKernel>,
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
        let max_threads = max.max(1) as u32;
        let openmp = openmp_kernel(&module, name, max_threads)?;
        Ok(CudaKernel {
            name: name.to_string(),
            function: function as usize,
            module,
            max_threads,
            dyn_shared_optin: AtomicU32::new(DEFAULT_DYNAMIC_SHARED),
            openmp,
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

    fn openmp(&self) -> Option<OpenMpKernel> {
        self.openmp
    }
}

/// An OpenMP kernel's launch rules: clang emits `<name>_kernel_environment`
/// for every target region, its third byte the execution mode; the grid
/// values are LLVM's for NVPTX within this kernel's and GPU's limits.
/// `None` for other kernels (no such global), which launch with the sizes
/// given.
fn openmp_kernel(module: &Module, name: &str, max_threads: u32) -> Result<Option<OpenMpKernel>> {
    let Ok(global) = std::ffi::CString::new(format!("{name}_kernel_environment")) else {
        return Ok(None);
    };
    let gpu = &module.gpu;
    let (mut ptr, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    let raw = module.raw();
    // SAFETY: a loaded module and a NUL-terminated name.
    let found = gpu.call("cuModuleGetGlobal", |d| unsafe {
        (d.cuModuleGetGlobal)(&mut ptr, &mut size, raw, global.as_ptr())
    });
    if found.is_err() || size < 3 {
        return Ok(None);
    }
    let mut head = [0u8; 3];
    // SAFETY: `head` holds 3 bytes; the global holds at least 3.
    gpu.call("cuMemcpyDtoHAsync", |d| unsafe {
        (d.cuMemcpyDtoHAsync)(head.as_mut_ptr().cast(), ptr, 3, std::ptr::null_mut())
    })?;
    // SAFETY: waits for the legacy default stream the copy went to.
    gpu.call("cuStreamSynchronize", |d| unsafe {
        (d.cuStreamSynchronize)(std::ptr::null_mut())
    })?;
    let Some(mode) = ExecMode::from_flags(head[2]) else {
        return Ok(None);
    };
    let attr = |a| -> Result<u32> {
        let mut v = 0;
        // SAFETY: writes one int for a valid device.
        gpu.call("cuDeviceGetAttribute", |d| unsafe {
            (d.cuDeviceGetAttribute)(&mut v, a, gpu.ordinal)
        })?;
        Ok(v.max(1) as u32)
    };
    let nvptx = GridValues::NVPTX;
    Ok(Some(OpenMpKernel {
        mode,
        grid: GridValues {
            max_threads: max_threads
                .min(attr(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?)
                .min(nvptx.max_threads),
            max_teams: attr(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?.min(nvptx.max_teams),
            ..nvptx
        },
    }))
}
