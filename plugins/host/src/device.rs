//! A host device: this process's CPU and memory.

use std::sync::Arc;

use offload_core::plugin::{self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType};
use offload_core::{Error, Result};
use offload_image::{elf, DeviceImage, ImageFormat};

use crate::image::{HostProgram, LoadedImage};
use crate::queue::{HostQueue, MAX_GROUP_MEMORY, MAX_GROUP_SIZE};
use crate::{memory, TARGET_TRIPLE};

pub struct HostDevice {
    info: DeviceInfo,
}

impl HostDevice {
    pub fn new(index: usize, machine: &MachineFacts) -> Self {
        let info = DeviceInfo {
            name: machine.cpu_model.clone(),
            vendor: machine.cpu_vendor.clone(),
            product_name: machine.cpu_model.clone(),
            device_type: DeviceType::Cpu,
            backend: Backend::Host,
            triple: TARGET_TRIPLE.to_string(),
            arch: String::new(),
            target_ids: Vec::new(),
            uid: format!("{}-{index}", std::env::consts::ARCH),
            driver_version: machine.kernel_release.clone(),
            global_memory_bytes: machine.memory_bytes,
            group_memory_bytes: MAX_GROUP_MEMORY,
            compute_units: machine.cpus,
            max_group_size: MAX_GROUP_SIZE,
            max_group_size_per_dim: [MAX_GROUP_SIZE, MAX_GROUP_SIZE, MAX_GROUP_SIZE],
            max_num_groups: [u32::MAX, u32::MAX, u32::MAX],
            clock_mhz: machine.clock_mhz,
            address_bits: usize::BITS,
        };
        HostDevice { info }
    }
}

impl plugin::Device for HostDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Any ELF built for this machine runs here, whatever triple a container claims.
    fn can_run(&self, image: &DeviceImage<'_>) -> bool {
        image.format == ImageFormat::Elf
            && elf::info(image.bytes).is_ok_and(|i| i.machine == host_elf_machine())
            && image
                .triple
                .as_deref()
                .is_none_or(|t| offload_core::image::triples_compatible(t, TARGET_TRIPLE))
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        memory::alloc(size, kind)
    }
    unsafe fn free(&self, ptr: DevicePtr, _kind: AllocKind) -> Result<()> {
        memory::free(ptr);
        Ok(())
    }
    fn alloc_at(&self, ptr: DevicePtr, size: usize) -> Result<()> {
        memory::fixed::alloc(ptr, size)
    }
    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        if !self.can_run(image) {
            return Err(Error::invalid_binary(format!(
                "device {}: image is not an ELF shared object for {}",
                self.info.uid, TARGET_TRIPLE
            )));
        }
        let loaded = LoadedImage::load(image.bytes, &format!("device {}", self.info.uid))?;
        Ok(Arc::new(HostProgram {
            image: Arc::new(loaded),
        }))
    }

    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        Ok(Arc::new(HostQueue))
    }

    fn shares_host_memory(&self) -> bool {
        true
    }

    /// Bitcode becomes a shared object for this machine, loaded like any.
    fn jit_target(&self) -> Option<offload_core::jit::JitTarget> {
        Some(offload_core::jit::JitTarget {
            triple: TARGET_TRIPLE.to_string(),
            cpu: None,
            output: offload_core::jit::JitOutput::SharedObject,
        })
    }
}

/// `e_machine` of the machine we run on.
pub fn host_elf_machine() -> u16 {
    match std::env::consts::ARCH {
        "x86_64" => 62,
        "aarch64" => 183,
        "powerpc64" => 21,
        "riscv64" => 243,
        _ => 0,
    }
}

/// What the host devices report, read once from /proc.
pub struct MachineFacts {
    pub cpu_model: String,
    pub cpu_vendor: String,
    pub cpus: u32,
    pub clock_mhz: u32,
    pub memory_bytes: u64,
    pub kernel_release: String,
}

impl MachineFacts {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |key: &str| {
            cpuinfo
                .lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        MachineFacts {
            cpu_model: field("model name")
                .unwrap_or_else(|| format!("{} host CPU", std::env::consts::ARCH)),
            cpu_vendor: field("vendor_id").unwrap_or_else(|| "unknown".into()),
            cpus: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            clock_mhz: field("cpu MHz")
                .and_then(|v| v.parse::<f64>().ok())
                .map(|v| v as u32)
                .unwrap_or(0),
            memory_bytes: mem_kib * 1024,
            kernel_release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }
}
