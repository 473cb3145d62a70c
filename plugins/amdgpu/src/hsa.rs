//! `hsa_status_t` -> [`offload_core::Error`], and typed queries of agents
//! and memory pools.

use std::ffi::{c_char, c_void, CStr};
use std::fmt::Display;
use std::sync::{Arc, Mutex};

use offload_core::{Error, ErrorCode, Result};
use offload_image::amdgpu::TargetId;

use crate::sys::{self, hsa_agent_t, hsa_amd_memory_pool_t, hsa_status_t, Hsa};

/// The loaded runtime, shut down when the last user drops it.
pub struct Runtime {
    pub api: Hsa,
    /// Memory faults the system event handler was told of (static: the
    /// runtime may call the handler as long as it lives).
    pub faults: &'static FaultLog,
}

/// One GPU memory fault, as the runtime reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryFault {
    pub agent: hsa_agent_t,
    pub address: u64,
    /// `HSA_AMD_MEMORY_FAULT_*` bits.
    pub reasons: u32,
}

impl std::fmt::Display for MemoryFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "memory access fault at address {:#x}", self.address)?;
        let reasons: Vec<&str> = sys::HSA_AMD_MEMORY_FAULT_REASONS
            .iter()
            .filter(|(bit, _)| self.reasons & bit != 0)
            .map(|(_, text)| *text)
            .collect();
        if !reasons.is_empty() {
            write!(f, " ({})", reasons.join(", "))?;
        }
        Ok(())
    }
}

/// The memory faults of every GPU, newest last (few: a GPU that faulted
/// runs nothing more).
#[derive(Default)]
pub struct FaultLog(Mutex<Vec<MemoryFault>>);

impl FaultLog {
    /// The first fault of any GPU, if any.
    pub fn first(&self) -> Option<MemoryFault> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .first()
            .copied()
    }

    /// The first fault `agent` reported, if any.
    pub fn of(&self, agent: hsa_agent_t) -> Option<MemoryFault> {
        let log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().find(|f| f.agent == agent).copied()
    }

    fn record(&self, fault: MemoryFault) {
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !log.contains(&fault) {
            log.push(fault);
        }
    }
}

/// ROCr's system events: a GPU memory fault is recorded for that GPU
/// (whose engine then fails its wait) and handled, so that ROCr does not
/// abort the process; other events are left to the runtime.
unsafe extern "C" fn on_system_event(
    event: *const sys::hsa_amd_event_t,
    data: *mut c_void,
) -> hsa_status_t {
    if event.is_null() || data.is_null() {
        return sys::HSA_STATUS_SUCCESS;
    }
    // SAFETY: ROCr passes a valid event, and our log as `data`.
    let (kind, log) = unsafe { ((*event).event_type, &*data.cast::<FaultLog>()) };
    if kind != sys::HSA_AMD_GPU_MEMORY_FAULT_EVENT {
        // Not handled: the runtime's default (for hardware exceptions and
        // memory errors, ending the process) applies.
        return sys::HSA_STATUS_ERROR;
    }
    // SAFETY: for this type the union holds the memory fault.
    let info = unsafe { (*event).memory_fault };
    log.record(MemoryFault {
        agent: info.agent,
        address: info.virtual_address,
        reasons: info.fault_reason_mask,
    });
    sys::HSA_STATUS_SUCCESS
}

impl Runtime {
    /// Loads the library and initialises the runtime.
    pub fn open(path: Option<&std::path::Path>) -> Result<Arc<Runtime>> {
        let api = Hsa::load(path).map_err(Error::backend)?;
        // SAFETY: takes no arguments; balanced by hsa_shut_down in Drop.
        let r = unsafe { (api.hsa_init)() };
        let faults: &'static FaultLog = Box::leak(Box::default());
        let rt = Runtime { api, faults };
        if let Err(e) = rt.check(r, format_args!("hsa_init ({})", rt.api.path.display())) {
            // Not initialised: Drop must not shut down.
            std::mem::forget(rt);
            return Err(e);
        }
        if let Some(register) = rt.api.hsa_amd_register_system_event_handler {
            let data = (faults as *const FaultLog).cast_mut().cast();
            // SAFETY: the handler only reads the event and records into
            // the log, which is never freed.
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

    /// The target IDs of the ISAs `agent` runs (`gfx90a:sramecc+:xnack-`),
    /// in the runtime's order; names that are not AMD GPU target IDs are
    /// left out.
    pub fn agent_isas(&self, agent: hsa_agent_t) -> Result<Vec<TargetId>> {
        unsafe extern "C" fn push(isa: sys::hsa_isa_t, data: *mut c_void) -> hsa_status_t {
            // SAFETY: `data` is the Vec below, alive for the iteration.
            unsafe { (*data.cast::<Vec<sys::hsa_isa_t>>()).push(isa) };
            sys::HSA_STATUS_SUCCESS
        }
        let mut isas: Vec<sys::hsa_isa_t> = Vec::new();
        // SAFETY: `push` only appends to `isas`, which outlives the call.
        let r = unsafe {
            (self.api.hsa_agent_iterate_isas)(agent, push, (&mut isas as *mut Vec<_>).cast())
        };
        self.check(r, "hsa_agent_iterate_isas")?;
        let mut ids = Vec::new();
        for isa in isas {
            let mut len = 0u32;
            // SAFETY: the attribute is a u32.
            let r = unsafe {
                (self.api.hsa_isa_get_info_alt)(
                    isa,
                    sys::HSA_ISA_INFO_NAME_LENGTH,
                    (&mut len as *mut u32).cast(),
                )
            };
            self.check(r, "hsa_isa_get_info_alt(NAME_LENGTH)")?;
            if len > 4096 {
                return Err(Error::backend(format!(
                    "hsa_isa_get_info_alt: an ISA name of {len} bytes"
                )));
            }
            // Room for a terminator: older runtimes count it, newer ones
            // write it past the length.
            let mut name = vec![0u8; len as usize + 1];
            // SAFETY: the name is `len` bytes, and the buffer is larger.
            let r = unsafe {
                (self.api.hsa_isa_get_info_alt)(
                    isa,
                    sys::HSA_ISA_INFO_NAME,
                    name.as_mut_ptr().cast(),
                )
            };
            self.check(r, "hsa_isa_get_info_alt(NAME)")?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let text = String::from_utf8_lossy(&name[..end]);
            match TargetId::parse(text.trim()) {
                Ok(id) => ids.push(id),
                Err(e) => tracing::debug!("an ISA of the agent is not a target ID: {e}"),
            }
        }
        Ok(ids)
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
