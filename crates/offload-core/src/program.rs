//! Loaded programs and their kernels, as the faces see them: a plugin
//! program plus the core's bookkeeping (globals filed in the device's
//! allocation index, so copies to them pass the range checks; a kernel keeps
//! its program, and the program its device, alive).

use std::sync::{Arc, Mutex};

use tracing::debug_span;

use crate::device::Device;
use crate::error::Result;
use crate::launch::{ExecMode, OpenMpKernel};
use crate::memory::Owner;
use crate::plugin::{self, DevicePtr, LaunchConfig};

pub struct Program {
    device: Arc<Device>,
    raw: Arc<dyn plugin::Program>,
    /// Owner of the globals in the device's index.
    owner: Owner,
    /// Globals filed in the device's index (with their names), removed
    /// when the program goes.
    globals: Mutex<Vec<(DevicePtr, String)>>,
    /// The image it was loaded from, kept while launches are recorded.
    image: Option<Arc<[u8]>>,
}

impl Program {
    pub(crate) fn new(
        device: Arc<Device>,
        raw: Arc<dyn plugin::Program>,
        owner: Owner,
        image: Option<Arc<[u8]>>,
    ) -> Arc<Program> {
        Arc::new(Program {
            device,
            raw,
            owner,
            globals: Mutex::new(Vec::new()),
            image,
        })
    }

    /// The image bytes, when kept (launches are being recorded).
    pub fn image(&self) -> Option<&[u8]> {
        self.image.as_deref()
    }

    /// The globals looked up so far, with their names.
    pub fn global_names(&self) -> Vec<(DevicePtr, String)> {
        self.globals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The kernel `name`.
    pub fn kernel(self: &Arc<Self>, name: &str) -> Result<Arc<Kernel>> {
        let _s = debug_span!("get_kernel", device = self.device.id(), name).entered();
        let raw = self.raw.kernel(name)?;
        let openmp = raw.openmp();
        Ok(Arc::new(Kernel {
            program: self.clone(),
            raw,
            openmp,
        }))
    }

    /// Device address and size of the global variable `name`.
    pub fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        let (ptr, size) = self.raw.global(name)?;
        let mut filed = self.globals.lock().unwrap_or_else(|e| e.into_inner());
        if !filed.iter().any(|(p, _)| *p == ptr) {
            self.device.file_global(ptr, size as usize, self.owner);
            filed.push((ptr, name.to_string()));
        }
        Ok((ptr, size))
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        for (g, _) in self.globals.get_mut().unwrap_or_else(|e| e.into_inner()) {
            self.device.forget_global(*g);
        }
    }
}

pub struct Kernel {
    program: Arc<Program>,
    raw: Arc<dyn plugin::Kernel>,
    /// The plugin's launch rules of an OpenMP kernel, asked once.
    openmp: Option<OpenMpKernel>,
}

impl Kernel {
    pub fn name(&self) -> &str {
        self.raw.name()
    }
    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }
    #[inline]
    pub fn device(&self) -> &Arc<Device> {
        &self.program.device
    }
    /// A group size that fills the device well for this kernel.
    pub fn preferred_group_size(&self, dyn_group_memory: usize) -> u32 {
        self.raw.preferred_group_size(dyn_group_memory)
    }
    /// The grid a launch asking for `config` gets: for an OpenMP kernel
    /// of a GPU-like plugin, LLVM's choice for unset `num_teams` /
    /// `thread_limit` under the user's tuning variables, with the
    /// kernel's execution mode; `None` for kernels launched as given.
    pub fn launch_plan(&self, config: &LaunchConfig) -> Option<(LaunchConfig, ExecMode)> {
        let omp = self.openmp.as_ref()?;
        Some((self.resolve_openmp(omp, config), omp.mode))
    }
    fn resolve_openmp(&self, omp: &OpenMpKernel, config: &LaunchConfig) -> LaunchConfig {
        let resident = |threads, dyn_memory| self.raw.resident_groups(threads, dyn_memory);
        omp.resolve_with(self.device().launch_tuning(), config, &resident)
    }
    /// What the plugin launches for `config` (see [`Kernel::launch_plan`]).
    #[inline]
    pub(crate) fn resolve(&self, config: &LaunchConfig) -> LaunchConfig {
        match &self.openmp {
            None => *config,
            Some(omp) => self.resolve_openmp(omp, config),
        }
    }
    #[inline]
    pub(crate) fn raw(&self) -> &dyn plugin::Kernel {
        self.raw.as_ref()
    }
}
