//! One GPU agent: its facts, its memory pools, and the one engine (HSA
//! queue and completion signal) every copy and launch of it goes through.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use offload_core::{Error, Result};

use offload_image::amdgpu::{Feature, TargetId};

use crate::engine::Engine;
use crate::hsa::Runtime;
use crate::reuse::Scratch;
use crate::sys::{self, hsa_agent_t, hsa_amd_memory_pool_t};
use offload_core::openmp_env::OpenMpSettings;

/// What the plugin reads of a GPU agent once.
#[derive(Debug, Clone)]
pub struct Facts {
    /// `gfx90a`, ... (`HSA_AGENT_INFO_NAME`).
    pub arch: String,
    /// The target IDs of the ISAs the agent runs, with the features it
    /// runs them with (`gfx90a:sramecc+:xnack-`): never empty.
    pub isas: Vec<TargetId>,
    pub product_name: String,
    pub wavefront_size: u32,
    pub compute_units: u32,
    pub max_waves_per_cu: u32,
    pub workgroup_max_size: u32,
    pub workgroup_max_dim: [u32; 3],
    pub grid_max_dim: [u32; 3],
    pub clock_mhz: u32,
    /// Ticks per second of the counter `omp_get_wtime` reads.
    pub timestamp_hz: u64,
    /// Bytes of the device's coarse-grained pool.
    pub memory_bytes: u64,
}

/// LDS a work-group may use on every AMD GPU this plugin knows (gfx9 to
/// gfx12; gfx950 has more, which its launches do not need yet).
pub const GROUP_MEMORY_BYTES: u32 = 64 * 1024;

pub struct Gpu {
    pub rt: Arc<Runtime>,
    pub agent: hsa_agent_t,
    /// The CPU agent whose pools hold host and kernel-argument memory.
    pub host_agent: hsa_agent_t,
    /// Index among this plugin's GPUs.
    pub index: u32,
    /// `amdgpu-N (gfx90a)`, for messages.
    pub label: String,
    pub facts: Facts,
    pub device_pool: hsa_amd_memory_pool_t,
    pub host_pool: hsa_amd_memory_pool_t,
    pub kernarg_pool: hsa_amd_memory_pool_t,
    pub openmp: OpenMpSettings,
    /// `LIBOMPTARGET_STACK_SIZE`: scratch per work-item for kernels whose
    /// stack is not known statically.
    pub stack_size: u32,
    pub engine: Engine,
    /// Every GPU agent of the plugin: host memory is made reachable by all.
    pub gpu_agents: Vec<hsa_agent_t>,
    /// Host memory every GPU reaches without locking, shared by the
    /// plugin's GPUs: its host allocations and registered ranges.
    pub(crate) host_ranges: Arc<HostRanges>,
    /// Kernel-argument buffers and launch environments kept for reuse.
    pub(crate) scratch: Scratch,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        for block in self.scratch.kernargs.drain() {
            // SAFETY: an idle kernel-argument buffer; no launch is left.
            unsafe { (self.rt.api.hsa_amd_memory_pool_free)(block.ptr as *mut std::ffi::c_void) };
        }
        for block in self.scratch.launch_envs.drain() {
            // SAFETY: an idle launch environment; no launch is left.
            let _ = unsafe { crate::openmp::free_block(self, block) };
        }
    }
}

/// One range of [`HostRanges`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostRange {
    pub size: usize,
    /// The address GPUs use for the range's first byte (a locked range may
    /// be mapped elsewhere than its host address).
    pub gpu_base: usize,
    /// Registered (locked by `olMemRegister`), not a pool allocation.
    pub registered: bool,
    /// How many of the plugin's GPUs registered it (one lock serves all:
    /// a second `hsa_amd_memory_lock` of the range is not made).
    pub registrations: u32,
}

/// Host ranges by base address.
#[derive(Default)]
pub(crate) struct HostRanges(Mutex<BTreeMap<usize, HostRange>>);

impl HostRanges {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, HostRange>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The GPU address of `[ptr, ptr + len)` when it lies in one range.
    pub fn gpu_address(&self, ptr: usize, len: usize) -> Option<usize> {
        let map = self.lock();
        let (&base, r) = map.range(..=ptr).next_back()?;
        let end = ptr.checked_add(len)?;
        (end <= base + r.size).then(|| r.gpu_base + (ptr - base))
    }

    /// Whether `[ptr, ptr + len)` overlaps a range.
    pub fn overlaps(&self, ptr: usize, len: usize) -> bool {
        let map = self.lock();
        let end = ptr.saturating_add(len.max(1));
        map.range(..end)
            .next_back()
            .is_some_and(|(&base, r)| base + r.size > ptr)
    }
}

impl Gpu {
    /// The GPU's own ISA (not its family's generic one), with the
    /// features it runs.
    pub fn own_isa(&self) -> &TargetId {
        let isas = &self.facts.isas;
        isas.iter()
            .find(|isa| !offload_image::amdgpu::is_generic(&isa.processor))
            .unwrap_or(&isas[0])
    }

    /// The ISA of this GPU that runs code built for `code`, if any.
    pub fn isa_for(&self, code: &TargetId) -> Option<&TargetId> {
        self.facts.isas.iter().find(|isa| code.runs_on(isa))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        rt: Arc<Runtime>,
        agent: hsa_agent_t,
        host_agent: hsa_agent_t,
        gpu_agents: Vec<hsa_agent_t>,
        host_ranges: Arc<HostRanges>,
        index: u32,
        openmp: OpenMpSettings,
        stack_size: u32,
    ) -> Result<Gpu> {
        let facts = read_facts(&rt, agent)?;
        let label = format!("amdgpu-{index} ({})", facts.isas[0]);
        let missing = |what: &str| {
            Error::backend(format!(
                "{label}: the HSA runtime offers no {what} memory pool"
            ))
        };
        let device_pool = rt
            .global_pool(agent, sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)?
            .ok_or_else(|| missing("coarse-grained device"))?;
        // Host memory from a fine-grained pool that is not the kernarg
        // pool where there is one (ROCr maps the kernarg pool uncached).
        let fine = sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
        let kernarg = sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;
        let host_pool = match rt.global_pool_without(host_agent, fine, kernarg)? {
            Some(pool) => pool,
            None => rt
                .global_pool(host_agent, fine)?
                .ok_or_else(|| missing("fine-grained host"))?,
        };
        let kernarg_pool = rt
            .global_pool(
                host_agent,
                sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
            )?
            .ok_or_else(|| missing("kernel-argument"))?;
        let memory_bytes = rt
            .pool_info::<usize>(device_pool, sys::HSA_AMD_MEMORY_POOL_INFO_SIZE)
            .unwrap_or(0) as u64;
        let engine = Engine::new(&rt, agent, &label)?;
        Ok(Gpu {
            facts: Facts {
                memory_bytes,
                ..facts
            },
            rt,
            agent,
            host_agent,
            index,
            label,
            device_pool,
            host_pool,
            kernarg_pool,
            openmp,
            stack_size,
            engine,
            gpu_agents,
            host_ranges,
            scratch: Scratch::default(),
        })
    }
}

fn read_facts(rt: &Runtime, agent: hsa_agent_t) -> Result<Facts> {
    let u32_info = |attr, what| rt.agent_info::<u32>(agent, attr, what);
    let dims16: [u16; 3] = rt.agent_info(
        agent,
        sys::HSA_AGENT_INFO_WORKGROUP_MAX_DIM,
        "WORKGROUP_MAX_DIM",
    )?;
    let arch = rt.agent_string(agent, sys::HSA_AGENT_INFO_NAME, "NAME")?;
    let mut isas = rt.agent_isas(agent)?;
    if isas.is_empty() {
        // A runtime that names no ISA: the agent's processor, whose
        // features code objects may then not ask for.
        isas.push(TargetId {
            processor: arch.clone(),
            sramecc: Feature::Unsupported,
            xnack: Feature::Unsupported,
        });
    }
    Ok(Facts {
        isas,
        product_name: rt
            .agent_string(agent, sys::HSA_AMD_AGENT_INFO_PRODUCT_NAME, "PRODUCT_NAME")
            .unwrap_or_else(|_| arch.clone()),
        arch,
        wavefront_size: u32_info(sys::HSA_AGENT_INFO_WAVEFRONT_SIZE, "WAVEFRONT_SIZE")?.max(1),
        compute_units: u32_info(
            sys::HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
            "COMPUTE_UNIT_COUNT",
        )?,
        max_waves_per_cu: u32_info(sys::HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU, "MAX_WAVES_PER_CU")
            .unwrap_or(0),
        workgroup_max_size: u32_info(sys::HSA_AGENT_INFO_WORKGROUP_MAX_SIZE, "WORKGROUP_MAX_SIZE")?
            .max(1),
        workgroup_max_dim: dims16.map(u32::from),
        grid_max_dim: rt.agent_info(agent, sys::HSA_AGENT_INFO_GRID_MAX_DIM, "GRID_MAX_DIM")?,
        clock_mhz: u32_info(
            sys::HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY,
            "MAX_CLOCK_FREQUENCY",
        )
        .unwrap_or(0),
        timestamp_hz: rt
            .agent_info::<u64>(
                agent,
                sys::HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY,
                "TIMESTAMP_FREQUENCY",
            )
            .unwrap_or(0),
        memory_bytes: 0,
    })
}
