//! The AMDGPU plugin: AMD GPUs through the HSA runtime (ROCr), loaded at
//! run time (`libhsa-runtime64.so.1`, or
//! `OFFLOAD_HSA_RUNTIME=/path/to/libhsa-runtime64.so.1`). Nothing ROCm is
//! needed to build it.
//!
//! Layers, as in the CUDA plugin:
//!
//! * [`sys`]: declarations of the runtime's entry points and constants,
//!   resolved once when the library is opened;
//! * [`hsa`]: `hsa_status_t` -> [`offload_core::Error`] (the runtime's
//!   text in the message), typed agent and pool queries;
//! * [`gpu`]: one GPU agent with its pools and facts, and its [`engine`]
//!   (one AQL queue and completion signal: every copy and dispatch of the
//!   GPU, one at a time, waited for; faults reported through the queue's
//!   error callback become errors, not hangs);
//! * the plugin objects: [`device`], [`memory`] (device memory from the
//!   GPU's coarse-grained pool, host memory from the CPU's fine-grained
//!   pool, other host memory locked for each copy), [`queue`] (operations
//!   complete inline; the core's executor makes queues asynchronous),
//!   [`image`] (code objects loaded into HSA executables, with their
//!   metadata note), [`kernel`] (kernel-argument buffers with the hidden
//!   arguments the metadata places, dispatch packets, an OpenMP kernel's
//!   environment and grid values), [`openmp`] (the device environment
//!   written at load, launch environments for teams reductions); kernel
//!   arguments and launch environments come from blocks each GPU keeps
//!   for reuse (`reuse`).
//!
//! Without the runtime (or without GPU agents) the plugin has no devices:
//! when `OFFLOAD_PLUGINS` names `amdgpu` that is an init error, otherwise
//! a debug message (`LIBOMPTARGET_DEBUG=1`).
//!
//! **Not run on hardware**: this plugin was built and tested against a fake
//! HSA runtime (`tests/fake_hsa/fake_hsa.c`) only.

pub mod device;
pub mod engine;
pub mod gpu;
pub mod hsa;
pub mod image;
pub mod kernel;
pub mod memory;
pub mod openmp;
pub mod queue;
mod reuse;
pub mod sys;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use offload_core::plugin::{self, Plugin};
use offload_core::{Config, Error, ErrorCode, PluginEntry, Result};

pub use device::AmdgpuDevice;

/// Triple of the images this plugin runs.
pub const TARGET_TRIPLE: &str = offload_image::amdgpu::TRIPLE;

/// The environment variable naming the runtime library to load.
pub const RUNTIME_ENV: &str = "OFFLOAD_HSA_RUNTIME";

/// Scratch per work-item for kernels whose stack size is not known
/// statically, when `LIBOMPTARGET_STACK_SIZE` does not say (LLVM's AMDGPU
/// default).
pub const DEFAULT_STACK_SIZE: u32 = 1024;

/// The plugin's entry for [`offload_core::Runtime::new`].
pub const ENTRY: PluginEntry = PluginEntry {
    name: "amdgpu",
    create,
    opt_in: false,
};

fn create(config: &Config) -> Result<Box<dyn Plugin>> {
    Ok(Box::new(AmdgpuPlugin {
        explicit: config.plugin_named("amdgpu"),
        runtime_path: std::env::var_os(RUNTIME_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        stack_size: config
            .device_stack_size
            .map_or(DEFAULT_STACK_SIZE, |s| s.min(u64::from(u32::MAX)) as u32),
        device_rtl_debug: config.device_rtl_debug,
        gpus: Mutex::new(Vec::new()),
    }))
}

pub struct AmdgpuPlugin {
    /// `OFFLOAD_PLUGINS` names `amdgpu`: a missing runtime is an error.
    explicit: bool,
    runtime_path: Option<PathBuf>,
    stack_size: u32,
    /// `LIBOMPTARGET_DEVICE_RTL_DEBUG`, for OpenMP images' device environment.
    device_rtl_debug: u32,
    gpus: Mutex<Vec<Arc<gpu::Gpu>>>,
}

impl AmdgpuPlugin {
    fn open(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        let rt = hsa::Runtime::open(self.runtime_path.as_deref())?;
        let mut cpus = Vec::new();
        let mut gpu_agents = Vec::new();
        for agent in rt.agents()? {
            match rt.agent_info::<u32>(agent, sys::HSA_AGENT_INFO_DEVICE, "DEVICE")? {
                sys::HSA_DEVICE_TYPE_CPU => cpus.push(agent),
                sys::HSA_DEVICE_TYPE_GPU => gpu_agents.push(agent),
                _ => {}
            }
        }
        if gpu_agents.is_empty() {
            return Err(Error::new(
                ErrorCode::InvalidDevice,
                format!(
                    "the HSA runtime ({}) reports no GPUs",
                    rt.api.path.display()
                ),
            ));
        }
        let host_agent = *cpus.first().ok_or_else(|| {
            Error::backend(format!(
                "the HSA runtime ({}) reports no CPU agent for host memory",
                rt.api.path.display()
            ))
        })?;
        let settings = offload_core::openmp_env::OpenMpSettings {
            num_devices: gpu_agents.len() as u32,
            debug_kind: self.device_rtl_debug,
        };
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        let mut devices = Vec::new();
        let host_ranges = Arc::new(gpu::HostRanges::default());
        for (index, &agent) in gpu_agents.iter().enumerate() {
            let gpu = Arc::new(gpu::Gpu::new(
                rt.clone(),
                agent,
                host_agent,
                gpu_agents.clone(),
                host_ranges.clone(),
                index as u32,
                settings,
                self.stack_size,
            )?);
            gpus.push(gpu.clone());
            devices.push(Arc::new(AmdgpuDevice::new(gpu)) as Arc<dyn plugin::Device>);
        }
        Ok(devices)
    }
}

impl Plugin for AmdgpuPlugin {
    fn name(&self) -> &'static str {
        "amdgpu"
    }

    fn init(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        let _s = tracing::debug_span!("amdgpu_init").entered();
        match self.open() {
            Ok(devices) => Ok(devices),
            Err(e) if self.explicit => Err(e),
            Err(e) => {
                tracing::debug!(plugin = "amdgpu", "no AMD GPUs: {e}");
                Ok(Vec::new())
            }
        }
    }

    fn deinit(&self) -> Result<()> {
        self.gpus.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(())
    }
}
