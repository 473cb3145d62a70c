//! The CUDA plugin: NVIDIA GPUs through the CUDA driver API, loaded at run
//! time (`libcuda.so.1`, or `OFFLOAD_CUDA_DRIVER=/path/to/libcuda.so.1`).
//! Nothing CUDA is needed to build it.
//!
//! Layers, as in other Rust CUDA bindings:
//!
//! * [`sys`]: declarations of the driver entry points and constants, and
//!   the run-time loading (every function pointer resolved once), after
//!   [`locate`] says the loader could find the library at all (a failing
//!   `dlopen` search costs most of a GPU-less start-up);
//! * [`driver`]: `CUresult` -> [`offload_core::Error`] (driver error name
//!   and string in the message, the code mapped onto `ol_errc_t`), and
//!   [`driver::Gpu`], which makes the device's primary context current on
//!   the calling thread before each call;
//! * the plugin objects: [`device`] (info from `cuDeviceGetAttribute`,
//!   image matching by compute capability), [`memory`] (device, pinned
//!   host and managed allocations), [`queue`] (streams and events, copies
//!   in every direction, host functions, launches), [`image`] (PTX JIT
//!   options, cubins and fatbinaries), [`kernel`] (occupancy; an OpenMP
//!   kernel's whole kernel environment and NVPTX grid values, from which
//!   the core picks launch sizes: `offload_core::launch`), [`openmp`]
//!   (the device environment written at load, the teams-reduction launch
//!   environments passed as `dyn_ptr`).
//!
//! Without a driver (or without GPUs) the plugin has no devices and one
//! reason: when `OFFLOAD_PLUGINS` names `cuda` the reason is an init error
//! (a warning from the OpenMP face, listed by `offload info`); otherwise it
//! is only a debug message (`LIBOMPTARGET_DEBUG=1`), since most machines
//! have no NVIDIA GPU.
//!
//! **Not run on hardware**: this plugin was built and tested against a fake
//! driver (`tests/fake_cuda/fake_cuda.c`) only; see the README.

pub mod device;
pub mod driver;
pub mod image;
pub mod kernel;
pub use offload_core::locate;
pub mod memory;
pub mod openmp;
pub mod pool;
pub mod queue;
pub mod sys;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use offload_core::plugin::{self, Plugin};
use offload_core::{Config, Error, PluginEntry, Result};

pub use device::CudaDevice;

/// Triple of the images this plugin runs.
pub const TARGET_TRIPLE: &str = offload_image::cuda::TRIPLE;

/// The environment variable naming the driver library to load.
pub const DRIVER_ENV: &str = "OFFLOAD_CUDA_DRIVER";

/// The plugin's entry for [`offload_core::Runtime::new`].
pub const ENTRY: PluginEntry = PluginEntry {
    name: "cuda",
    create,
    opt_in: false,
};

fn create(config: &Config) -> Result<Box<dyn Plugin>> {
    Ok(Box::new(CudaPlugin {
        explicit: config.plugin_named("cuda"),
        driver_path: std::env::var_os(DRIVER_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        gpus: Mutex::new(Vec::new()),
        limits: driver::ContextLimits {
            stack_size: config.device_stack_size,
            heap_size: config.device_heap_size,
        },
        device_rtl_debug: config.device_rtl_debug,
    }))
}

pub struct CudaPlugin {
    /// `OFFLOAD_PLUGINS` names `cuda`: a missing driver is an error.
    explicit: bool,
    driver_path: Option<PathBuf>,
    gpus: Mutex<Vec<Arc<driver::Gpu>>>,
    /// `LIBOMPTARGET_STACK_SIZE` / `LIBOMPTARGET_HEAP_SIZE`.
    limits: driver::ContextLimits,
    /// `LIBOMPTARGET_DEVICE_RTL_DEBUG`, for OpenMP images' device environment.
    device_rtl_debug: u32,
}

impl CudaPlugin {
    fn open(&self) -> std::result::Result<Vec<Arc<dyn plugin::Device>>, Error> {
        let driver = sys::Driver::load(self.driver_path.as_deref()).map_err(Error::backend)?;
        let driver = Arc::new(driver);
        // SAFETY: cuInit takes flags 0.
        let r = unsafe { (driver.cuInit)(0) };
        driver::check(
            &driver,
            r,
            format_args!("cuInit ({})", driver.path.display()),
        )?;
        let mut count = 0;
        // SAFETY: writes one int.
        let r = unsafe { (driver.cuDeviceGetCount)(&mut count) };
        driver::check(&driver, r, "cuDeviceGetCount")?;
        if count <= 0 {
            return Err(Error::new(
                offload_core::ErrorCode::InvalidDevice,
                format!(
                    "the CUDA driver ({}) reports no GPUs",
                    driver.path.display()
                ),
            ));
        }
        let mut version = 0;
        // SAFETY: writes one int.
        let r = unsafe { (driver.cuDriverGetVersion)(&mut version) };
        driver::check(&driver, r, "cuDriverGetVersion")?;
        let mut devices = Vec::new();
        let host_registrations = Arc::new(driver::HostRegistrations::default());
        let mut gpus = self.gpus.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..count {
            let mut ordinal = 0;
            // SAFETY: writes one device handle for ordinal `i` < count.
            let r = unsafe { (driver.cuDeviceGet)(&mut ordinal, i) };
            driver::check(&driver, r, format_args!("cuDeviceGet({i})"))?;
            let openmp = offload_core::openmp_env::OpenMpSettings {
                num_devices: count as u32,
                debug_kind: self.device_rtl_debug,
            };
            let gpu = Arc::new(driver::Gpu::new(
                driver.clone(),
                ordinal,
                self.limits,
                openmp,
                host_registrations.clone(),
            ));
            let dev = CudaDevice::new(gpu.clone(), version)?;
            gpus.push(gpu);
            devices.push(Arc::new(dev) as Arc<dyn plugin::Device>);
        }
        Ok(devices)
    }
}

impl Plugin for CudaPlugin {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn init(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        let _s = tracing::debug_span!("cuda_init").entered();
        match self.open() {
            Ok(devices) => Ok(devices),
            Err(e) if self.explicit => Err(e),
            Err(e) => {
                tracing::debug!(plugin = "cuda", "no CUDA devices: {e}");
                Ok(Vec::new())
            }
        }
    }

    fn deinit(&self) -> Result<()> {
        for gpu in self
            .gpus
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            gpu.release();
        }
        Ok(())
    }
}
