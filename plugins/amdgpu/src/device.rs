//! A GPU agent as a device of the core.

use std::sync::Arc;

use offload_core::plugin::{self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType};
use offload_core::{Error, Result};
use offload_image::DeviceImage;

use crate::gpu::{Gpu, GROUP_MEMORY_BYTES};
use crate::{image, memory, queue, TARGET_TRIPLE};

pub struct AmdgpuDevice {
    pub(crate) gpu: Arc<Gpu>,
    info: DeviceInfo,
}

impl AmdgpuDevice {
    pub fn new(gpu: Arc<Gpu>) -> AmdgpuDevice {
        let f = &gpu.facts;
        let info = DeviceInfo {
            name: f.arch.clone(),
            vendor: "AMD".to_string(),
            product_name: f.product_name.clone(),
            device_type: DeviceType::Gpu,
            backend: Backend::Amdgpu,
            triple: TARGET_TRIPLE.to_string(),
            arch: f.arch.split(':').next().unwrap_or_default().to_string(),
            target_ids: f.isas.clone(),
            uid: format!("amdgpu-{}-{}", gpu.index, f.arch),
            driver_version: "HSA 1.1".to_string(),
            global_memory_bytes: f.memory_bytes,
            group_memory_bytes: u64::from(GROUP_MEMORY_BYTES),
            compute_units: f.compute_units,
            max_group_size: f.workgroup_max_size,
            max_group_size_per_dim: f.workgroup_max_dim,
            max_num_groups: f.grid_max_dim,
            clock_mhz: f.clock_mhz,
            address_bits: 64,
        };
        AmdgpuDevice { gpu, info }
    }
}

impl plugin::Device for AmdgpuDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// An `amdgcn-amd-amdhsa` ELF code object that one of this GPU's ISAs
    /// runs, by the core's target-ID rules over [`DeviceInfo::target_ids`]
    /// (which also give the reason for a refusal and the feature count of
    /// image choice). Bitcode is not: the core compiles it first, if at all.
    fn can_run(&self, image: &DeviceImage<'_>) -> bool {
        image.format == offload_image::ImageFormat::Elf && self.incompatibility(image).is_none()
    }

    /// LLVM bitcode (`-fopenmp-target-jit`, bitcode given to
    /// `olCreateProgram`) becomes a code object for this GPU's own ISA,
    /// with the xnack/sramecc settings it runs.
    fn jit_target(&self) -> Option<offload_core::jit::JitTarget> {
        Some(offload_core::jit::JitTarget {
            triple: TARGET_TRIPLE.to_string(),
            cpu: Some(self.gpu.own_isa().to_string()),
            output: offload_core::jit::JitOutput::CodeObject,
        })
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        memory::alloc(&self.gpu, size, kind)
    }

    unsafe fn free(&self, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
        // SAFETY: the caller's guarantee.
        unsafe { memory::free(&self.gpu, ptr, kind) }
    }

    fn registers_host_memory(&self) -> bool {
        true
    }

    unsafe fn register_host(&self, ptr: *mut u8, size: usize) -> Result<()> {
        // SAFETY: the caller's guarantee.
        unsafe { memory::register_host(&self.gpu, ptr, size) }
    }

    fn unregister_host(&self, ptr: *mut u8) -> Result<()> {
        memory::unregister_host(&self.gpu, ptr)
    }

    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        if let Some(why) = self.incompatibility(image) {
            return Err(Error::invalid_binary(format!("{}: {why}", self.gpu.label)));
        }
        Ok(Arc::new(image::load(&self.gpu, image.bytes)?))
    }

    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        Ok(Arc::new(queue::AmdgpuQueue {
            gpu: self.gpu.clone(),
        }))
    }
}
