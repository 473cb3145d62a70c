//! A kernel of a loaded program, and its launch: the kernel-argument
//! buffer (explicit arguments, then the hidden ones the code object's
//! metadata places) and one AQL dispatch packet.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::launch::{GridValues, OpenMpKernel};
use offload_core::openmp_env::{
    kernel_environment_global, KernelEnvironment, KERNEL_ENVIRONMENT_SIZE, NO_LAUNCH_ENVIRONMENT,
};
use offload_core::plugin::{self, KernelArgs, LaunchConfig};
use offload_core::{Error, Result};
use offload_image::amdgpu::KernelMetadata;

use crate::gpu::{Gpu, GROUP_MEMORY_BYTES};
use crate::image::Loaded;
use crate::memory::{self, Host};
use crate::reuse::Block;
use crate::sys;

pub struct AmdgpuKernel {
    pub(crate) name: String,
    /// Keeps the executable loaded while the kernel is alive.
    pub(crate) program: Arc<Loaded>,
    kernel_object: u64,
    /// The kernel-argument segment's size (the runtime's).
    kernarg_size: u32,
    group_segment: u32,
    private_segment: u32,
    dynamic_stack: bool,
    /// The kernel's metadata (no hidden arguments when the note is missing).
    meta: KernelMetadata,
    /// Where the hidden arguments start: the first one's offset, else the
    /// end of the segment. Explicit arguments must end before it.
    hidden_start: u32,
    openmp: Option<OpenMpKernel>,
}

impl AmdgpuKernel {
    pub(crate) fn new(program: &Arc<Loaded>, name: &str) -> Result<AmdgpuKernel> {
        let gpu = &program.gpu;
        let listed = program.metadata.kernel(name);
        let symbol_name = listed.map_or_else(|| format!("{name}.kd"), |m| m.symbol.clone());
        let symbol = program.symbol(&symbol_name)?.ok_or_else(|| {
            Error::not_found(format!("{}: the program has no kernel '{name}'", gpu.label))
        })?;
        let meta = match listed {
            Some(m) => m.clone(),
            // A note that lists kernels but not this one: its hidden
            // arguments cannot be placed.
            None if !program.metadata.kernels.is_empty() => {
                return Err(Error::invalid_binary(format!(
                    "{}: kernel '{name}' is missing from the code object's metadata note",
                    gpu.label
                )))
            }
            None => KernelMetadata::default(),
        };
        let kind: u32 = program.symbol_info(symbol, sys::HSA_EXECUTABLE_SYMBOL_INFO_TYPE, name)?;
        if kind != 1 {
            return Err(Error::new(
                offload_core::ErrorCode::SymbolKind,
                format!("{}: '{name}' is not a kernel", gpu.label),
            ));
        }
        let info = |attr| program.symbol_info::<u32>(symbol, attr, name);
        let kernel_object: u64 =
            program.symbol_info(symbol, sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, name)?;
        // The runtime's size (from the kernel descriptor) is the one that
        // holds; a note whose arguments do not fit in it is refused.
        let kernarg_size = info(sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE)?;
        let described = meta
            .args
            .iter()
            .map(|a| a.offset.saturating_add(a.size))
            .max()
            .unwrap_or(0);
        if described.max(meta.kernarg_segment_size) > kernarg_size {
            return Err(Error::invalid_binary(format!(
                "{}: kernel '{name}': the metadata note describes {} bytes of arguments, the kernel descriptor {kernarg_size}",
                gpu.label,
                described.max(meta.kernarg_segment_size)
            )));
        }
        let group_segment = info(sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE)?;
        let private_segment = info(sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE)?;
        let dynamic_stack = program
            .symbol_info::<u8>(
                symbol,
                sys::HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK,
                name,
            )
            .map(|b| b != 0)
            .unwrap_or(false)
            || meta.uses_dynamic_stack;
        let openmp = openmp_kernel(program, name, &meta)?;
        let hidden_start = meta
            .args
            .iter()
            .filter(|a| a.is_hidden())
            .map(|a| a.offset)
            .min()
            .unwrap_or(kernarg_size);
        Ok(AmdgpuKernel {
            hidden_start,
            name: name.to_string(),
            program: program.clone(),
            kernel_object,
            kernarg_size,
            group_segment,
            private_segment,
            dynamic_stack,
            meta,
            openmp,
        })
    }

    fn gpu(&self) -> &Gpu {
        &self.program.gpu
    }

    /// What this GPU refuses about `config` for this kernel.
    pub(crate) fn check_config(&self, config: &LaunchConfig) -> Result<()> {
        let gpu = self.gpu();
        let f = &gpu.facts;
        let group = config.group_size;
        let threads = group.iter().map(|&g| u64::from(g)).product::<u64>();
        let max_group = f
            .workgroup_max_size
            .min(match self.meta.max_flat_workgroup_size {
                0 => u32::MAX,
                m => m,
            });
        let too_big = |what: String| {
            Err(Error::invalid_argument(format!(
                "kernel '{}' on {}: {what}",
                self.name, gpu.label
            )))
        };
        if group.contains(&0) || config.num_groups.contains(&0) {
            return too_big(format!(
                "a launch of {:?} groups of {:?} is empty",
                config.num_groups, group
            ));
        }
        let per_dim_ok = group
            .iter()
            .zip(f.workgroup_max_dim)
            .all(|(&g, max)| g <= max && g <= u32::from(u16::MAX));
        if threads > u64::from(max_group) || !per_dim_ok {
            return too_big(format!(
                "groups of {group:?} work-items exceed the kernel's and device's limit of {max_group}"
            ));
        }
        let dims = config.num_groups.iter().zip(group).zip(f.grid_max_dim);
        for (d, ((&groups, size), max)) in dims.enumerate() {
            let items = u64::from(groups) * u64::from(size);
            if items > u64::from(max) || items > u64::from(u32::MAX) {
                return too_big(format!(
                    "{items} work-items in dimension {d} exceed the device's grid"
                ));
            }
        }
        let lds = u64::from(self.group_segment) + u64::from(config.dyn_group_memory);
        if lds > u64::from(GROUP_MEMORY_BYTES) {
            return too_big(format!(
                "{lds} bytes of group memory ({} static + {} dynamic) exceed the device's {GROUP_MEMORY_BYTES}",
                self.group_segment, config.dyn_group_memory
            ));
        }
        Ok(())
    }

    /// Launches with `args` and waits for the kernel to finish.
    pub(crate) fn launch(&self, args: KernelArgs<'_>, config: &LaunchConfig) -> Result<()> {
        self.check_config(config)?;
        let gpu = self.gpu();
        // A GPU that faulted refuses before any scratch memory is taken.
        gpu.engine.check_usable()?;
        // A kernel with a teams reduction gets a launch environment in
        // place of the "none" the OpenMP face put first (as the CUDA plugin).
        let reduction = match (self.openmp.and_then(|o| o.reduction_buffer), args) {
            (Some(bytes), KernelArgs::Words(w)) if w.first() == Some(&NO_LAUNCH_ENVIRONMENT) => {
                let env = crate::openmp::LaunchEnvironment::new(gpu, bytes)?;
                let mut words = w.to_vec();
                words[0] = env.address();
                Some((env, words))
            }
            _ => None,
        };
        let args = match &reduction {
            Some((_, words)) => KernelArgs::Words(words),
            None => args,
        };
        let explicit_len = match args {
            KernelArgs::Words(w) => std::mem::size_of_val(w),
            KernelArgs::Packed(b) => b.len(),
        };
        if explicit_len > self.hidden_start as usize {
            return Err(Error::invalid_argument(format!(
                "kernel '{}' on {}: {explicit_len} bytes of arguments, but the kernel takes {}",
                self.name, gpu.label, self.hidden_start
            )));
        }
        let dims = dimensions(config);
        let mut buffer = KernargBuffer::take(gpu, self.kernarg_size as usize)?;
        let kernargs = buffer.bytes();
        match args {
            KernelArgs::Words(w) => {
                for (dst, word) in kernargs.chunks_exact_mut(8).zip(w) {
                    dst.copy_from_slice(&word.to_ne_bytes());
                }
            }
            KernelArgs::Packed(b) => kernargs[..b.len()].copy_from_slice(b),
        }
        self.write_hidden(kernargs, config, dims);
        let [gx, gy, gz] = config.num_groups;
        let [bx, by, bz] = config.group_size;
        let private = if self.dynamic_stack {
            self.private_segment.max(gpu.stack_size)
        } else {
            self.private_segment
        };
        let packet = sys::hsa_kernel_dispatch_packet_t {
            workgroup_size_x: bx as u16,
            workgroup_size_y: by as u16,
            workgroup_size_z: bz as u16,
            grid_size_x: gx * bx,
            grid_size_y: gy * by,
            grid_size_z: gz * bz,
            private_segment_size: private,
            group_segment_size: self.group_segment + config.dyn_group_memory,
            kernel_object: self.kernel_object,
            kernarg_address: buffer.block.ptr as u64,
            ..Default::default()
        };
        let _span = tracing::debug_span!("amdgpu_launch", kernel = %self.name, grid = ?config.num_groups, block = ?config.group_size, lds = config.dyn_group_memory).entered();
        let done = gpu
            .engine
            .dispatch(packet, dims, &format!("kernel '{}'", self.name));
        if done.is_err() {
            // The kernel may not have ended (a fault leaves its waves
            // behind): its argument buffer and launch environment are
            // never reused or freed. The engine refuses work from now on,
            // so this happens once per GPU.
            std::mem::forget(buffer);
            std::mem::forget(reduction);
        }
        done
    }

    /// Fills the hidden arguments the metadata lists (those the device
    /// runtime and compiled code read: group counts and sizes, the
    /// dimensions, dynamic LDS); the others stay zero.
    fn write_hidden(&self, kernargs: &mut [u8], config: &LaunchConfig, dims: u16) {
        for arg in self.meta.args.iter().filter(|a| a.is_hidden()) {
            let axis = |kind: &str| {
                ["x", "y", "z"]
                    .iter()
                    .position(|s| kind.ends_with(s))
                    .unwrap_or(0)
            };
            let kind = arg.value_kind.as_str();
            let value: u64 = if kind.starts_with("hidden_block_count_") {
                config.num_groups[axis(kind)].into()
            } else if kind.starts_with("hidden_group_size_") {
                config.group_size[axis(kind)].into()
            } else if kind == "hidden_grid_dims" {
                dims.into()
            } else if kind == "hidden_dynamic_lds_size" {
                config.dyn_group_memory.into()
            } else {
                // Remainders (whole groups only), global offsets (none),
                // and buffers this plugin does not provide (printf,
                // hostcall, heap, multigrid): zero.
                continue;
            };
            let (start, size) = (arg.offset as usize, (arg.size as usize).min(8));
            if let Some(dst) = kernargs.get_mut(start..start.saturating_add(size)) {
                dst.copy_from_slice(&value.to_le_bytes()[..size]);
            }
        }
    }
}

/// Kernel-argument memory from the host's kernarg pool, reachable by the
/// GPU: taken from the GPU's idle buffers (or allocated), zeroed up to the
/// kernel's size, and given back on drop, after the dispatch was waited for.
struct KernargBuffer<'g> {
    gpu: &'g Gpu,
    block: Block,
    size: usize,
}

impl<'g> KernargBuffer<'g> {
    /// The smallest allocation: every kernel of code object version 5
    /// has 256 bytes of hidden arguments.
    const MIN_CAPACITY: usize = 512;

    fn take(gpu: &'g Gpu, size: usize) -> Result<KernargBuffer<'g>> {
        let capacity = size.next_power_of_two().max(Self::MIN_CAPACITY);
        let block = match gpu.scratch.kernargs.take(size, capacity) {
            Some(block) => block,
            None => Self::allocate(gpu, capacity).or_else(|_| {
                // Short of memory: give back what is idle, and try again.
                for idle in gpu.scratch.kernargs.drain() {
                    // SAFETY: an idle block no dispatch reads any more.
                    unsafe { (gpu.rt.api.hsa_amd_memory_pool_free)(idle.ptr as *mut c_void) };
                }
                Self::allocate(gpu, capacity)
            })?,
        };
        // SAFETY: `size <= capacity` bytes of host memory the block owns,
        // read by no dispatch while it is taken.
        unsafe { std::ptr::write_bytes(block.ptr as *mut u8, 0, size) };
        Ok(KernargBuffer { gpu, block, size })
    }

    fn allocate(gpu: &Gpu, capacity: usize) -> Result<Block> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one pointer; flags 0.
        let r = unsafe {
            (gpu.rt.api.hsa_amd_memory_pool_allocate)(gpu.kernarg_pool, capacity, 0, &mut ptr)
        };
        gpu.rt.check(
            r,
            format_args!(
                "{}: allocating {capacity} bytes of kernel arguments",
                gpu.label
            ),
        )?;
        if let Err(e) = memory::allow_access(gpu, ptr) {
            // SAFETY: the allocation just made, used by nobody.
            unsafe { (gpu.rt.api.hsa_amd_memory_pool_free)(ptr) };
            return Err(e);
        }
        Ok(Block {
            ptr: ptr as usize,
            capacity,
        })
    }

    /// The kernel's argument bytes.
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `size` bytes of host memory this buffer holds alone.
        unsafe { std::slice::from_raw_parts_mut(self.block.ptr as *mut u8, self.size) }
    }
}

impl Drop for KernargBuffer<'_> {
    fn drop(&mut self) {
        if let Some(extra) = self.gpu.scratch.kernargs.keep(self.block) {
            // SAFETY: an idle block no dispatch reads any more.
            unsafe { (self.gpu.rt.api.hsa_amd_memory_pool_free)(extra.ptr as *mut c_void) };
        }
    }
}

impl plugin::Kernel for AmdgpuKernel {
    fn name(&self) -> &str {
        &self.name
    }

    /// 256 work-items (LLVM's AMDGPU default), within the kernel's limit.
    fn preferred_group_size(&self, _dyn_group_memory: usize) -> u32 {
        let max = match self.meta.max_flat_workgroup_size {
            0 => self.gpu().facts.workgroup_max_size,
            m => m,
        };
        GridValues::AMDGPU.default_threads.min(max).max(1)
    }

    fn openmp(&self) -> Option<OpenMpKernel> {
        self.openmp
    }

    fn check_launch(&self, _args: &KernelArgs<'_>, config: &LaunchConfig) -> Result<()> {
        self.check_config(config)
    }
}

/// An OpenMP kernel's launch rules: its kernel environment (read from the
/// GPU) and LLVM's AMDGPU grid values within this kernel's and GPU's
/// limits (teams by default: 4 per compute unit, as LLVM's plugin). `None`
/// for kernels without an environment.
fn openmp_kernel(
    program: &Loaded,
    name: &str,
    meta: &KernelMetadata,
) -> Result<Option<OpenMpKernel>> {
    let gpu = &program.gpu;
    let Some((address, size)) = program.variable(&kernel_environment_global(name))? else {
        return Ok(None);
    };
    KernelEnvironment::check_size(name, size)?;
    let mut bytes = [0u8; KERNEL_ENVIRONMENT_SIZE];
    // SAFETY: 48 bytes from the 48-byte global into `bytes`.
    unsafe {
        memory::copy(
            gpu,
            bytes.as_mut_ptr().cast(),
            address.0 as *const c_void,
            bytes.len(),
            Host::Dst,
        )
    }?;
    let env = KernelEnvironment::parse(name, &bytes)?;
    let f = &gpu.facts;
    let base = GridValues::AMDGPU;
    let kernel_max = match meta.max_flat_workgroup_size {
        0 => base.max_threads,
        m => m,
    };
    let max_threads = kernel_max
        .min(f.workgroup_max_size)
        .min(base.max_threads)
        .max(1);
    let device = GridValues {
        warp_size: if meta.wavefront_size != 0 {
            meta.wavefront_size
        } else {
            f.wavefront_size
        },
        max_threads,
        default_teams: if f.compute_units > 0 {
            f.compute_units * 4
        } else {
            base.default_teams
        },
        max_teams: (f.grid_max_dim[0] / max_threads).clamp(1, base.max_teams),
        ..base
    };
    Ok(Some(OpenMpKernel::from_environment(&env, device)))
}

/// The launch's dimensions: the highest one with more than one group or
/// work-item.
fn dimensions(config: &LaunchConfig) -> u16 {
    let used = |d: usize| config.num_groups[d] > 1 || config.group_size[d] > 1;
    if used(2) {
        3
    } else if used(1) {
        2
    } else {
        1
    }
}
