//! A GPU agent as a device of the core.

use std::sync::Arc;

use offload_core::plugin::{self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType};
use offload_core::{Error, Result};
use offload_image::DeviceImage;

use offload_image::amdgpu::{self, Feature, TargetId};

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
    /// runs: the processor and the `xnack`/`sramecc` settings of its
    /// `e_flags`, and of the OffloadBinary's arch when that names a target
    /// ID (`gfx90a:xnack+`), must suit the GPU.
    fn can_run(&self, image: &DeviceImage<'_>) -> bool {
        self.incompatibility(image).is_none()
    }

    fn incompatibility(&self, image: &DeviceImage<'_>) -> Option<String> {
        if image.format != offload_image::ImageFormat::Elf {
            return Some("not an ELF code object".to_string());
        }
        let Some(code) = TargetId::of_code_object(image.bytes) else {
            return Some("not an AMD GPU code object of a known processor".to_string());
        };
        if amdgpu::is_generic(&code.processor)
            && amdgpu::code_object_generic_version(image.bytes).unwrap_or(0)
                < amdgpu::MIN_GENERIC_VERSION
        {
            return Some(format!(
                "the code object is built for the generic processor {} but has no \
                 generic version (e_flags bits 24-31 of a version 6 code object)",
                code.processor
            ));
        }
        let gpu_runs = |target: &TargetId| self.gpu.isa_for(target).is_some();
        let family = amdgpu::generic_of(&self.gpu.facts.arch);
        if !gpu_runs(&code) && family == Some(code.processor.as_str()) {
            // ROCr lists the generic ISA where it can load generic code.
            return Some(format!(
                "the code object is built for {code}, the generic processor of this GPU's \
                 family, but the HSA runtime does not list that ISA ({}): it is too old \
                 to load generic code objects",
                image::isa_list(&self.gpu)
            ));
        }
        if !gpu_runs(&code) {
            return Some(format!(
                "the code object is built for {code}, which this GPU does not run ({})",
                image::isa_list(&self.gpu)
            ));
        }
        let declared = image.arch.as_deref().filter(|a| !a.is_empty())?;
        match TargetId::parse(declared) {
            Ok(d) if d.processor == code.processor && gpu_runs(&d) => None,
            Ok(d) => Some(format!(
                "the image is declared for {d}, which this GPU does not run ({})",
                image::isa_list(&self.gpu)
            )),
            Err(e) => Some(format!("the image's arch: {e}")),
        }
    }

    /// The `xnack`/`sramecc` settings the code object (or the
    /// OffloadBinary's arch) pins: [`Self::incompatibility`] checked them.
    fn pinned_features(&self, image: &DeviceImage<'_>) -> u8 {
        let count = |t: &TargetId| {
            [t.sramecc, t.xnack]
                .iter()
                .filter(|f| matches!(f, Feature::On | Feature::Off))
                .count() as u8
        };
        let code = TargetId::of_code_object(image.bytes).map_or(0, |t| count(&t));
        let declared = image
            .arch
            .as_deref()
            .and_then(|a| TargetId::parse(a).ok())
            .map_or(0, |t| count(&t));
        code.max(declared)
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
