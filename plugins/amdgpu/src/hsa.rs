//! `hsa_status_t` -> [`offload_core::Error`], and typed queries of agents
//! and memory pools.

use std::ffi::{c_char, c_void, CStr};
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use offload_core::{Error, ErrorCode, Result};

use crate::sys::{self, hsa_agent_t, hsa_amd_memory_pool_t, hsa_status_t, Hsa};

/// The loaded runtime, shut down when the last user drops it.
pub struct Runtime {
    pub api: Hsa,
    /// Set by the system event handler when a GPU reports a memory fault
    /// (static: the runtime may call the handler as long as it lives).
    pub memory_fault: &'static AtomicBool,
}

/// ROCr's system events: a GPU memory fault is recorded (the engines then
/// fail their waits) and handled, so that ROCr does not abort the process.
unsafe extern "C" fn on_system_event(event: *const c_void, data: *mut c_void) -> hsa_status_t {
    if event.is_null() {
        return sys::HSA_STATUS_SUCCESS;
    }
    // SAFETY: ROCr passes an `hsa_amd_event_t`, whose first field is its
    // type, and our flag as `data`.
    let kind = unsafe { event.cast::<u32>().read() };
    if kind == sys::HSA_AMD_GPU_MEMORY_FAULT_EVENT {
        // SAFETY: `data` is the leaked flag of `Runtime::open`.
        unsafe { &*data.cast::<AtomicBool>() }.store(true, Ordering::Release);
    }
    sys::HSA_STATUS_SUCCESS
}

impl Runtime {
    /// Loads the library and initialises the runtime.
    pub fn open(path: Option<&std::path::Path>) -> Result<Arc<Runtime>> {
        let api = Hsa::load(path).map_err(Error::backend)?;
        // SAFETY: takes no arguments; balanced by hsa_shut_down in Drop.
        let r = unsafe { (api.hsa_init)() };
        let memory_fault: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let rt = Runtime { api, memory_fault };
        if let Err(e) = rt.check(r, format_args!("hsa_init ({})", rt.api.path.display())) {
            // Not initialised: Drop must not shut down.
            std::mem::forget(rt);
            return Err(e);
        }
        if let Some(register) = rt.api.hsa_amd_register_system_event_handler {
            let data = (memory_fault as *const AtomicBool).cast_mut().cast();
            // SAFETY: the handler only reads the event's type and stores
            // into the flag, which is never freed.
            let r = unsafe { register(on_system_event, data) };
            rt.check(r, "hsa_amd_register_system_event_handler")?;
        }
        Ok(Arc::new(rt))
    }

    /// The runtime's text for `status`.
    pub fn status_text(&self, status: hsa_status_t) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: writes one pointer to a static string on success.
        let r = unsafe { (self.api.hsa_status_string)(status, &mut text) };
        if r != sys::HSA_STATUS_SUCCESS || text.is_null() {
            return format!("HSA status {status:#x}");
        }
        // SAFETY: a NUL-terminated string owned by the runtime.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// `Ok` for success (and `HSA_STATUS_INFO_BREAK`, an iteration's early
    /// stop); otherwise an error naming `what` and the runtime's text.
    pub fn check(&self, status: hsa_status_t, what: impl Display) -> Result<()> {
        if status == sys::HSA_STATUS_SUCCESS || status == sys::HSA_STATUS_INFO_BREAK {
            return Ok(());
        }
        Err(Error::new(
            error_code(status),
            format!(
                "{what}: {} (HSA status {status:#x})",
                self.status_text(status)
            ),
        ))
    }

    /// One fixed-size attribute of `agent`.
    pub fn agent_info<T: Copy + Default>(
        &self,
        agent: hsa_agent_t,
        attribute: u32,
        what: &str,
    ) -> Result<T> {
        let mut v = T::default();
        // SAFETY: the attribute's value is a `T` (see sys.rs).
        let r = unsafe {
            (self.api.hsa_agent_get_info)(agent, attribute, (&mut v as *mut T).cast::<c_void>())
        };
        self.check(r, format_args!("hsa_agent_get_info({what})"))?;
        Ok(v)
    }

    /// A `char[64]` attribute of `agent` (its name, product name).
    pub fn agent_string(&self, agent: hsa_agent_t, attribute: u32, what: &str) -> Result<String> {
        let mut bytes = [0u8; 64];
        // SAFETY: the attribute's value is a `char[64]` (see sys.rs).
        let r =
            unsafe { (self.api.hsa_agent_get_info)(agent, attribute, bytes.as_mut_ptr().cast()) };
        self.check(r, format_args!("hsa_agent_get_info({what})"))?;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Ok(String::from_utf8_lossy(&bytes[..end]).trim().to_string())
    }

    /// One fixed-size attribute of a memory pool.
    pub fn pool_info<T: Copy + Default>(
        &self,
        pool: hsa_amd_memory_pool_t,
        attribute: u32,
    ) -> Result<T> {
        let mut v = T::default();
        // SAFETY: the attribute's value is a `T` (see sys.rs).
        let r = unsafe {
            (self.api.hsa_amd_memory_pool_get_info)(
                pool,
                attribute,
                (&mut v as *mut T).cast::<c_void>(),
            )
        };
        self.check(r, "hsa_amd_memory_pool_get_info")?;
        Ok(v)
    }

    /// Every agent, in the runtime's order.
    pub fn agents(&self) -> Result<Vec<hsa_agent_t>> {
        unsafe extern "C" fn push(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t {
            // SAFETY: `data` is the Vec below, alive for the iteration.
            unsafe { (*data.cast::<Vec<hsa_agent_t>>()).push(agent) };
            sys::HSA_STATUS_SUCCESS
        }
        let mut agents: Vec<hsa_agent_t> = Vec::new();
        // SAFETY: the callback only pushes into `agents`.
        let r = unsafe {
            (self.api.hsa_iterate_agents)(push, (&mut agents as *mut Vec<hsa_agent_t>).cast())
        };
        self.check(r, "hsa_iterate_agents")?;
        Ok(agents)
    }

    /// Every memory pool of `agent`.
    pub fn pools(&self, agent: hsa_agent_t) -> Result<Vec<hsa_amd_memory_pool_t>> {
        unsafe extern "C" fn push(pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t {
            // SAFETY: `data` is the Vec below, alive for the iteration.
            unsafe { (*data.cast::<Vec<hsa_amd_memory_pool_t>>()).push(pool) };
            sys::HSA_STATUS_SUCCESS
        }
        let mut pools: Vec<hsa_amd_memory_pool_t> = Vec::new();
        // SAFETY: the callback only pushes into `pools`.
        let r = unsafe {
            (self.api.hsa_amd_agent_iterate_memory_pools)(
                agent,
                push,
                (&mut pools as *mut Vec<hsa_amd_memory_pool_t>).cast(),
            )
        };
        self.check(r, "hsa_amd_agent_iterate_memory_pools")?;
        Ok(pools)
    }

    /// The first global pool of `agent` whose flags include `want` and
    /// from which the runtime allocates.
    pub fn global_pool(
        &self,
        agent: hsa_agent_t,
        want: u32,
    ) -> Result<Option<hsa_amd_memory_pool_t>> {
        self.global_pool_without(agent, want, 0)
    }

    /// As [`Runtime::global_pool`], skipping pools with a flag of `avoid`.
    pub fn global_pool_without(
        &self,
        agent: hsa_agent_t,
        want: u32,
        avoid: u32,
    ) -> Result<Option<hsa_amd_memory_pool_t>> {
        for pool in self.pools(agent)? {
            let segment: u32 = self.pool_info(pool, sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT)?;
            if segment != sys::HSA_AMD_SEGMENT_GLOBAL {
                continue;
            }
            let allowed: u8 =
                self.pool_info(pool, sys::HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED)?;
            let flags: u32 = self.pool_info(pool, sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS)?;
            if allowed != 0 && flags & want == want && flags & avoid == 0 {
                return Ok(Some(pool));
            }
        }
        Ok(None)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: balances the hsa_init of `open`; nothing of this runtime
        // is used afterwards (every user held an Arc to it).
        unsafe { (self.api.hsa_shut_down)() };
    }
}

/// The `ol_errc_t` an HSA status maps onto.
pub fn error_code(status: hsa_status_t) -> ErrorCode {
    match status {
        sys::HSA_STATUS_ERROR_INVALID_ARGUMENT => ErrorCode::InvalidArgument,
        sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES => ErrorCode::OutOfResources,
        sys::HSA_STATUS_ERROR_NOT_INITIALIZED => ErrorCode::Uninitialized,
        sys::HSA_STATUS_ERROR_INVALID_CODE_OBJECT | sys::HSA_STATUS_ERROR_INVALID_ISA => {
            ErrorCode::InvalidBinary
        }
        sys::HSA_STATUS_ERROR_INVALID_SYMBOL_NAME => ErrorCode::NotFound,
        _ => ErrorCode::BackendFailure,
    }
}
