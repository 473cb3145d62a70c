//! The result layer over [`crate::sys`]: `CUresult` becomes
//! [`offload_core::Error`] (the driver's error name and string in the
//! message, the code mapped onto `ol_errc_t`), and every call runs with
//! the device's primary context current on the calling thread.

use std::ffi::{c_char, CStr};
use std::sync::{Arc, OnceLock};

use offload_core::{Error, ErrorCode, Result};

use crate::openmp::LaunchEnvPool;
use crate::pool::QueuePool;
use crate::sys::{self, CUcontext, CUdevice, CUresult, Driver};
use offload_core::openmp_env::OpenMpSettings;

/// The `ol_errc_t` a driver result stands for.
pub fn error_code(r: CUresult) -> ErrorCode {
    use sys::*;
    match r {
        CUDA_SUCCESS => ErrorCode::Success,
        CUDA_ERROR_INVALID_VALUE => ErrorCode::InvalidValue,
        CUDA_ERROR_OUT_OF_MEMORY | CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => ErrorCode::OutOfResources,
        CUDA_ERROR_NOT_INITIALIZED | CUDA_ERROR_DEINITIALIZED => ErrorCode::Uninitialized,
        CUDA_ERROR_NO_DEVICE | CUDA_ERROR_INVALID_DEVICE | CUDA_ERROR_DEVICE_UNAVAILABLE => {
            ErrorCode::InvalidDevice
        }
        CUDA_ERROR_INVALID_IMAGE | CUDA_ERROR_NO_BINARY_FOR_GPU | CUDA_ERROR_INVALID_SOURCE => {
            ErrorCode::InvalidBinary
        }
        CUDA_ERROR_INVALID_PTX | CUDA_ERROR_UNSUPPORTED_PTX_VERSION => ErrorCode::CompileFailure,
        CUDA_ERROR_JIT_COMPILER_NOT_FOUND => ErrorCode::HostToolNotFound,
        CUDA_ERROR_FILE_NOT_FOUND | CUDA_ERROR_NOT_FOUND => ErrorCode::NotFound,
        CUDA_ERROR_INVALID_HANDLE => ErrorCode::InvalidArgument,
        CUDA_ERROR_NOT_SUPPORTED | CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => ErrorCode::Unsupported,
        CUDA_ERROR_UNKNOWN => ErrorCode::Unknown,
        _ => ErrorCode::BackendFailure,
    }
}

fn c_text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the driver returns pointers to static NUL-terminated strings.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`, or the number when the
/// driver does not know it.
pub fn describe(driver: &Driver, r: CUresult) -> String {
    let mut name: *const c_char = std::ptr::null();
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: both write one pointer to a static string, or fail.
    let (rn, rs) = unsafe {
        (
            (driver.cuGetErrorName)(r, &mut name),
            (driver.cuGetErrorString)(r, &mut text),
        )
    };
    let name = (rn == sys::CUDA_SUCCESS).then(|| c_text(name)).flatten();
    let text = (rs == sys::CUDA_SUCCESS).then(|| c_text(text)).flatten();
    match (name, text) {
        (Some(n), Some(t)) => format!("{n} ({t})"),
        (Some(n), None) => n,
        _ => format!("CUresult {r}"),
    }
}

/// The error for a failed call: `what: CUDA_ERROR_... (text)`.
#[cold]
pub fn error(driver: &Driver, r: CUresult, what: impl std::fmt::Display) -> Error {
    Error::new(error_code(r), format!("{what}: {}", describe(driver, r)))
}

/// `Ok` for `CUDA_SUCCESS`, the mapped error otherwise.
#[inline]
pub fn check(driver: &Driver, r: CUresult, what: impl std::fmt::Display) -> Result<()> {
    if r == sys::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(error(driver, r, what))
    }
}

/// One GPU: its ordinal, its primary context (retained on first use) and
/// the driver. Shared by the device, its queues, programs and kernels.
pub struct Gpu {
    pub driver: Arc<Driver>,
    pub ordinal: CUdevice,
    /// Label for messages (`cuda device 0`).
    pub label: String,
    /// Limits set on the context when it is retained.
    limits: ContextLimits,
    ctx: OnceLock<std::result::Result<usize, Error>>,
    /// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`, asked once.
    memory_pools: OnceLock<bool>,
    /// The pool of queue memory, made on first use.
    queue_pool: OnceLock<Option<QueuePool>>,
    /// What OpenMP images' device environments say (`crate::openmp`).
    pub openmp: OpenMpSettings,
    /// Launch environments of teams reductions, reused across launches.
    pub launch_envs: LaunchEnvPool,
    /// Launch limits, asked once.
    launch_limits: OnceLock<std::result::Result<LaunchLimits, Error>>,
    /// Host memory page-locked through the plugin, shared by its GPUs.
    pub host_registrations: Arc<HostRegistrations>,
    /// Operations enqueued on any of this GPU's queues that may write its
    /// memory (launches, copies and fills into it), counted so a queue can
    /// tell that none came since a snapshot (`Queue::memory_snapshot`).
    device_writes: std::sync::atomic::AtomicU64,
}

/// Host ranges page-locked with `cuMemHostRegister` (portable: one
/// registration serves every GPU), by base: the driver refuses a second
/// registration of the same memory, so the second device counts instead.
#[derive(Debug, Default)]
pub struct HostRegistrations(std::sync::Mutex<std::collections::HashMap<usize, HostRegistration>>);

impl HostRegistrations {
    pub fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<usize, HostRegistration>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
pub struct HostRegistration {
    pub size: usize,
    /// How many of the plugin's devices registered the range.
    pub devices: u32,
    /// Page-locked by the program before (the driver said so): never
    /// unregistered here.
    pub external: bool,
}

/// What one launch may ask of this GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLimits {
    /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X/Y/Z`.
    pub block: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X/Y/Z`.
    pub grid: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: shared
    /// memory (static + dynamic) a block may have once opted in.
    pub shared_optin: u32,
}

/// Context limits the user asked for (`LIBOMPTARGET_STACK_SIZE`,
/// `LIBOMPTARGET_HEAP_SIZE`), as LLVM's plugin sets them at device start.
#[derive(Clone, Copy, Debug, Default)]
pub struct ContextLimits {
    pub stack_size: Option<u64>,
    pub heap_size: Option<u64>,
}

impl Gpu {
    /// Count an operation that may write this GPU's memory (before it is
    /// enqueued: a snapshot taken after never misses it).
    pub fn note_device_write(&self) {
        self.device_writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// The count of [`Gpu::note_device_write`] so far.
    pub fn device_writes(&self) -> u64 {
        self.device_writes.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn new(
        driver: Arc<Driver>,
        ordinal: CUdevice,
        limits: ContextLimits,
        openmp: OpenMpSettings,
        host_registrations: Arc<HostRegistrations>,
    ) -> Gpu {
        Gpu {
            driver,
            ordinal,
            label: format!("CUDA device {ordinal}"),
            limits,
            ctx: OnceLock::new(),
            memory_pools: OnceLock::new(),
            queue_pool: OnceLock::new(),
            openmp,
            launch_envs: LaunchEnvPool::default(),
            launch_limits: OnceLock::new(),
            host_registrations,
            device_writes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The grid, block and shared memory limits of a launch (asked once).
    pub fn launch_limits(&self) -> Result<LaunchLimits> {
        self.launch_limits
            .get_or_init(|| {
                let u = |a| self.attribute(a).map(|v| v.max(0) as u32);
                Ok(LaunchLimits {
                    block: [
                        u(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                        u(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                        u(sys::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
                    ],
                    grid: [
                        u(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                        u(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                        u(sys::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
                    ],
                    shared_optin: u(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
                        .max(u(sys::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?),
                })
            })
            .clone()
    }

    /// The primary context, retained once (every host thread shares it).
    /// A limit the driver refuses makes the GPU unusable, with that error
    /// (as a failed device start in LLVM's plugin).
    pub fn context(&self) -> Result<CUcontext> {
        self.ctx
            .get_or_init(|| {
                let mut ctx: CUcontext = std::ptr::null_mut();
                // SAFETY: writes one context handle for a valid ordinal.
                let r = unsafe { (self.driver.cuDevicePrimaryCtxRetain)(&mut ctx, self.ordinal) };
                check(
                    &self.driver,
                    r,
                    format_args!("{}: cuDevicePrimaryCtxRetain", self.label),
                )?;
                if let Err(e) = self.set_limits(ctx) {
                    // SAFETY: balances the retain above.
                    unsafe { (self.driver.cuDevicePrimaryCtxRelease)(self.ordinal) };
                    return Err(e);
                }
                Ok(ctx as usize)
            })
            .clone()
            .map(|c| c as CUcontext)
    }

    fn set_limits(&self, ctx: CUcontext) -> Result<()> {
        let limits = [
            (
                sys::CU_LIMIT_STACK_SIZE,
                "LIBOMPTARGET_STACK_SIZE",
                self.limits.stack_size,
            ),
            (
                sys::CU_LIMIT_MALLOC_HEAP_SIZE,
                "LIBOMPTARGET_HEAP_SIZE",
                self.limits.heap_size,
            ),
        ];
        for (limit, var, value) in limits {
            let Some(value) = value else { continue };
            // SAFETY: `ctx` was just retained for this device.
            let r = unsafe { (self.driver.cuCtxSetCurrent)(ctx) };
            check(
                &self.driver,
                r,
                format_args!("{}: cuCtxSetCurrent", self.label),
            )?;
            // SAFETY: sets one limit of the current context.
            let r = unsafe { (self.driver.cuCtxSetLimit)(limit, value as usize) };
            check(
                &self.driver,
                r,
                format_args!("{}: cuCtxSetLimit({var}={value})", self.label),
            )?;
        }
        Ok(())
    }

    /// Whether stream-ordered allocation (`cuMemAllocAsync`) works here:
    /// the driver has the entry points and the GPU memory pools.
    pub fn has_memory_pools(&self) -> bool {
        *self.memory_pools.get_or_init(|| {
            self.driver.cuMemAllocAsync.is_some()
                && self.driver.cuMemFreeAsync.is_some()
                && self
                    .attribute(sys::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
                    .is_ok_and(|v| v != 0)
        })
    }

    /// The pool queue memory comes from (made on first use), or None
    /// where the default pool serves (`crate::pool`).
    pub fn queue_pool(&self) -> Option<&QueuePool> {
        self.queue_pool
            .get_or_init(|| QueuePool::create(self))
            .as_ref()
    }

    /// Give back what the queue pool keeps, if there is one: whether there
    /// was (a failed allocation is then worth one more try). The device is
    /// synchronised first, so that frees still waiting in their streams
    /// have happened and their memory can go too.
    pub fn trim_queue_pool(&self) -> bool {
        let Some(Some(pool)) = self.queue_pool.get() else {
            return false;
        };
        if self
            // SAFETY: waits for the context's work; no arguments.
            .call("cuCtxSynchronize", |d| unsafe { (d.cuCtxSynchronize)() })
            .is_err()
        {
            return false;
        }
        pool.trim(self).is_ok()
    }

    /// Whether the primary context was retained (and must be released).
    pub fn has_context(&self) -> bool {
        matches!(self.ctx.get(), Some(Ok(_)))
    }

    /// Make the primary context current on this thread, then run `f` (one
    /// driver call) and map its result. `what` names the call for errors.
    #[inline]
    pub fn call(&self, what: &'static str, f: impl FnOnce(&Driver) -> CUresult) -> Result<()> {
        self.make_current()?;
        let r = f(&self.driver);
        check(&self.driver, r, format_args!("{}: {what}", self.label))
    }

    /// Like [`Gpu::call`], but returns the raw result (for calls where a
    /// non-success value is an answer, e.g. `CUDA_ERROR_NOT_READY`).
    pub fn call_raw(&self, f: impl FnOnce(&Driver) -> CUresult) -> Result<CUresult> {
        self.make_current()?;
        Ok(f(&self.driver))
    }

    /// Make the primary context current on this thread unless it already
    /// is. The driver is asked each time (no cache of our own): code
    /// beside us (the CUDA runtime through an interop object, another
    /// library) may switch this thread's context between our calls. On an
    /// H200 with driver 580 `cuCtxGetCurrent` took 7 ns and
    /// `cuCtxSetCurrent` of the current context 18 ns (BENCHMARKS.md):
    /// a small saving on every call, not a visible one per launch.
    #[inline]
    fn make_current(&self) -> Result<()> {
        let ctx = self.context()?;
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one context handle.
        let r = unsafe { (self.driver.cuCtxGetCurrent)(&mut current) };
        if r == sys::CUDA_SUCCESS && current == ctx {
            return Ok(());
        }
        // SAFETY: `ctx` is this device's retained primary context.
        let r = unsafe { (self.driver.cuCtxSetCurrent)(ctx) };
        check(
            &self.driver,
            r,
            format_args!("{}: cuCtxSetCurrent", self.label),
        )
    }

    /// A device attribute (no context needed).
    pub fn attribute(&self, attr: sys::CUdevice_attribute) -> Result<i32> {
        let mut v = 0;
        // SAFETY: writes one int.
        let r = unsafe { (self.driver.cuDeviceGetAttribute)(&mut v, attr, self.ordinal) };
        check(
            &self.driver,
            r,
            format_args!("{}: cuDeviceGetAttribute({attr})", self.label),
        )?;
        Ok(v)
    }

    /// Release the queue pool and the primary context if they were made
    /// (plugin deinit; nothing is called on this GPU afterwards).
    pub fn release(&self) {
        if self.has_context() {
            self.launch_envs.release(self);
        }
        if let Some(Some(pool)) = self.queue_pool.get() {
            pool.destroy(self);
        }
        if self.has_context() {
            // SAFETY: balances the one retain of `context`.
            unsafe { (self.driver.cuDevicePrimaryCtxRelease)(self.ordinal) };
        }
    }
}
