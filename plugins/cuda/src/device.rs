//! A CUDA device: its info from the driver, image matching by compute
//! capability, allocation, program loading and queue creation.

use std::ffi::c_char;
use std::sync::Arc;

use offload_core::plugin::{self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType};
use offload_core::{Error, Result};
use offload_image::cuda::Sm;
use offload_image::DeviceImage;

use crate::driver::{check, Gpu};
use crate::sys;
use crate::{image, memory, queue, TARGET_TRIPLE};

pub struct CudaDevice {
    pub(crate) gpu: Arc<Gpu>,
    info: DeviceInfo,
    sm: Sm,
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as `nvidia-smi -L` prints it.
fn uuid_string(u: &sys::CUuuid) -> String {
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

impl CudaDevice {
    /// Reads everything the device info needs (no context is created).
    pub fn new(gpu: Arc<Gpu>, driver_version: i32) -> Result<CudaDevice> {
        let d = &gpu.driver;
        let mut name = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
        let r = unsafe { (d.cuDeviceGetName)(name.as_mut_ptr(), name.len() as i32, gpu.ordinal) };
        check(d, r, format_args!("{}: cuDeviceGetName", gpu.label))?;
        let name_bytes: Vec<u8> = name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let name = String::from_utf8_lossy(&name_bytes).into_owned();
        let mut total = 0usize;
        // SAFETY: writes one size_t.
        let r = unsafe { (d.cuDeviceTotalMem)(&mut total, gpu.ordinal) };
        check(d, r, format_args!("{}: cuDeviceTotalMem", gpu.label))?;
        let mut uuid = sys::CUuuid::default();
        // SAFETY: writes one 16-byte CUuuid.
        let r = unsafe { (d.cuDeviceGetUuid)(&mut uuid, gpu.ordinal) };
        check(d, r, format_args!("{}: cuDeviceGetUuid", gpu.label))?;
        let a = |attr| gpu.attribute(attr);
        let u = |attr| a(attr).map(|v| v.max(0) as u32);
        let sm = Sm {
            major: u(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            minor: u(sys::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        };
        // Block and grid dimensions, shared memory per block (opt-in
        // maximum): what launches are checked against too.
        let limits = gpu.launch_limits()?;
        let info = DeviceInfo {
            name: name.clone(),
            vendor: "NVIDIA Corporation".to_string(),
            product_name: name,
            device_type: DeviceType::Gpu,
            backend: Backend::Cuda,
            triple: TARGET_TRIPLE.to_string(),
            arch: sm.to_string(),
            target_ids: Vec::new(),
            uid: uuid_string(&uuid),
            driver_version: format!("{}.{}", driver_version / 1000, (driver_version % 1000) / 10),
            global_memory_bytes: total as u64,
            group_memory_bytes: limits.shared_optin as u64,
            compute_units: u(sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_group_size: u(sys::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_group_size_per_dim: limits.block,
            max_num_groups: limits.grid,
            // In kHz. Informational only, and CUDA 13 deprecates it: a
            // driver that refuses it leaves 0 rather than losing the GPU.
            clock_mhz: u(sys::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).unwrap_or(0) / 1000,
            address_bits: 64,
        };
        Ok(CudaDevice { gpu, info, sm })
    }

    /// The compute capability.
    pub fn sm(&self) -> Sm {
        self.sm
    }
}

/// Whether a device of compute capability `sm` runs `image` (the core's
/// rule, which proxies of a GPU such as the remote plugin apply too).
pub use offload_core::image::cuda_image_runs_on as image_runs_on;

impl plugin::Device for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// PTX for this SM or an older one, a cubin of the same major with a
    /// minor no higher than the device's, a fatbinary with either.
    fn can_run(&self, image: &DeviceImage<'_>) -> bool {
        image_runs_on(image, self.sm)
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        memory::alloc(&self.gpu, size, kind)
    }

    unsafe fn free(&self, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
        memory::free(&self.gpu, ptr, kind)
    }

    fn registers_host_memory(&self) -> bool {
        true
    }

    /// `olMemRegister`: page-locked with `cuMemHostRegister`.
    unsafe fn register_host(&self, ptr: *mut u8, size: usize) -> Result<()> {
        // SAFETY: the core passes on its caller's promise about the range.
        unsafe { memory::register_host(&self.gpu, ptr, size) }
    }

    fn unregister_host(&self, ptr: *mut u8) -> Result<()> {
        memory::unregister_host(&self.gpu, ptr)
    }

    /// LLVM bitcode becomes PTX for this compute capability (the driver
    /// then compiles it like any PTX image).
    fn jit_target(&self) -> Option<offload_core::jit::JitTarget> {
        Some(offload_core::jit::JitTarget {
            triple: TARGET_TRIPLE.to_string(),
            cpu: Some(self.sm.to_string()),
            // PTX 7.8 is the first with sm_90; sm_100 and later need 8.6.
            output: offload_core::jit::JitOutput::Ptx {
                isa: if self.sm.major >= 10 { 86 } else { 78 },
            },
        })
    }

    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        if !self.can_run(image) {
            return Err(Error::invalid_binary(format!(
                "{}: the image is not PTX, a cubin or a fatbinary that runs on {}",
                self.gpu.label, self.sm
            )));
        }
        Ok(Arc::new(image::load(&self.gpu, image)?))
    }

    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        Ok(Arc::new(queue::CudaQueue::new(self.gpu.clone())?))
    }
}
