//! A kernel: a `CUfunction` of a loaded module.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use offload_core::launch::{GridValues, OpenMpKernel};
use offload_core::openmp_env::{
    kernel_environment_global, KernelEnvironment, KERNEL_ENVIRONMENT_SIZE,
};
use offload_core::plugin;
use offload_core::Result;

use crate::image::Module;
use crate::sys;

/// Group size used when the driver's occupancy calculator fails.
pub const DEFAULT_GROUP_SIZE: u32 = 128;
/// Dynamic shared memory a launch gets without opting in.
pub const DEFAULT_DYNAMIC_SHARED: u32 = 48 * 1024;

/// (block, dynamic shared memory) -> blocks the GPU runs at once.
type ResidentAnswer = ((u32, u32), Option<u32>);
/// Answers kept per kernel; sizes past these are asked every time.
const RESIDENT_CACHE: usize = 16;

pub struct CudaKernel {
    pub(crate) name: String,
    function: usize,
    /// Keeps the module loaded while the kernel is alive.
    pub(crate) module: Arc<Module>,
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub(crate) max_threads: u32,
    /// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`: static shared memory.
    pub(crate) static_shared: u32,
    /// The dynamic shared memory this kernel was opted in to (above 48 KiB).
    pub(crate) dyn_shared_optin: AtomicU32,
    /// For an OpenMP kernel: its mode and this GPU's grid values, from
    /// which the core picks launch sizes, and its teams-reduction buffer.
    pub(crate) openmp: Option<OpenMpKernel>,
    /// The GPU's multiprocessors (for [`plugin::Kernel::resident_groups`]).
    multiprocessors: u32,
    /// Answers of the occupancy calculator. Launches ask with few sizes.
    resident: Mutex<Vec<ResidentAnswer>>,
}

impl CudaKernel {
    pub(crate) fn new(
        module: Arc<Module>,
        name: &str,
        function: sys::CUfunction,
    ) -> Result<CudaKernel> {
        let attribute = |attr| -> Result<i32> {
            let mut v = 0;
            // SAFETY: writes one int for a valid function.
            module.gpu.call("cuFuncGetAttribute", |d| unsafe {
                (d.cuFuncGetAttribute)(&mut v, attr, function)
            })?;
            Ok(v)
        };
        let max_threads = attribute(sys::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?.max(1) as u32;
        let shared = attribute(sys::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?;
        let openmp = openmp_kernel(&module, name, max_threads)?;
        // 0 when unknown: launches then keep LLVM's grids.
        let multiprocessors = module
            .gpu
            .attribute(sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(0, |n| n.max(0) as u32);
        Ok(CudaKernel {
            multiprocessors,
            resident: Mutex::new(Vec::new()),
            name: name.to_string(),
            function: function as usize,
            module,
            max_threads,
            static_shared: shared.max(0) as u32,
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

    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor` x multiprocessors,
    /// asked once per size.
    fn resident_groups(&self, group_size: u32, dyn_group_memory: u32) -> Option<u32> {
        let key = (group_size, dyn_group_memory);
        let mut cache = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, answer)) = cache.iter().find(|(k, _)| *k == key) {
            return answer;
        }
        let answer = self.occupancy(group_size, dyn_group_memory);
        if cache.len() < RESIDENT_CACHE {
            cache.push((key, answer));
        }
        answer
    }
}

impl CudaKernel {
    fn occupancy(&self, group_size: u32, dyn_group_memory: u32) -> Option<u32> {
        let query = self
            .module
            .gpu
            .driver
            .cuOccupancyMaxActiveBlocksPerMultiprocessor?;
        let (mut blocks, f) = (0, self.raw());
        // SAFETY: writes one int for a valid function.
        let r = self
            .module
            .gpu
            .call("cuOccupancyMaxActiveBlocksPerMultiprocessor", |_| unsafe {
                query(&mut blocks, f, group_size as i32, dyn_group_memory as usize)
            });
        match r {
            Ok(()) if blocks > 0 => (blocks as u32)
                .checked_mul(self.multiprocessors)
                .filter(|&n| n > 0),
            _ => None,
        }
    }
}

/// An OpenMP kernel's launch rules, from its whole kernel environment
/// (`<name>_kernel_environment`, which clang emits for every target
/// region; parsed by `offload_core::openmp_env`) and LLVM's NVPTX grid
/// values within this kernel's and GPU's limits (as LLVM's CUDA plugin:
/// threads up to the kernel's `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`
/// and the GPU's block size, teams up to the GPU's grid). `None` for other
/// kernels (no such global), which launch with the sizes given. An
/// environment of another size or an unknown execution mode is an error
/// naming the kernel.
fn openmp_kernel(module: &Module, name: &str, max_threads: u32) -> Result<Option<OpenMpKernel>> {
    let Ok(global) = std::ffi::CString::new(kernel_environment_global(name)) else {
        return Ok(None);
    };
    let gpu = &module.gpu;
    let (mut ptr, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    let raw = module.raw();
    // SAFETY: a loaded module and a NUL-terminated name.
    let r = gpu.call_raw(|d| unsafe {
        (d.cuModuleGetGlobal)(&mut ptr, &mut size, raw, global.as_ptr())
    })?;
    if r == sys::CUDA_ERROR_NOT_FOUND {
        return Ok(None);
    }
    crate::driver::check(
        &gpu.driver,
        r,
        format_args!(
            "{}: cuModuleGetGlobal({})",
            gpu.label,
            kernel_environment_global(name)
        ),
    )?;
    KernelEnvironment::check_size(name, size as u64)?;
    let mut bytes = [0u8; KERNEL_ENVIRONMENT_SIZE];
    // SAFETY: `bytes` holds 48 bytes; so does the global.
    gpu.call("cuMemcpyDtoHAsync", |d| unsafe {
        (d.cuMemcpyDtoHAsync)(bytes.as_mut_ptr().cast(), ptr, size, std::ptr::null_mut())
    })?;
    // SAFETY: waits for the legacy default stream the copy went to.
    gpu.call("cuStreamSynchronize", |d| unsafe {
        (d.cuStreamSynchronize)(std::ptr::null_mut())
    })?;
    let env = KernelEnvironment::parse(name, &bytes)?;
    let limits = gpu.launch_limits()?;
    let nvptx = GridValues::NVPTX;
    let device = GridValues {
        max_threads: max_threads.min(limits.block[0]).min(nvptx.max_threads),
        // LLVM's CUDA plugin replaces the NVPTX team limit with the GPU's.
        max_teams: limits.grid[0].max(1),
        ..nvptx
    };
    Ok(Some(OpenMpKernel::from_environment(&env, device)))
}
