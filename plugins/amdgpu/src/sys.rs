//! The HSA runtime as this plugin uses it: types, constants and the
//! function table, resolved once from `libhsa-runtime64.so.1` at run time.
//!
//! Nothing here needs ROCm at build time: the declarations are ours, the
//! subset of `hsa.h` and `hsa_ext_amd.h` (HSA 1.1 with AMD's extensions,
//! 64-bit "large" machine model) that the plugin calls.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use libloading::Library;

pub type hsa_status_t = u32;
pub type hsa_signal_value_t = i64;

/// Opaque runtime objects: one 64-bit handle each.
macro_rules! handle {
    ($($name:ident),*) => {$(
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name {
            pub handle: u64,
        }
    )*};
}
handle!(
    hsa_agent_t,
    hsa_signal_t,
    hsa_amd_memory_pool_t,
    hsa_executable_t,
    hsa_executable_symbol_t,
    hsa_code_object_reader_t,
    hsa_loaded_code_object_t,
    hsa_isa_t
);

pub const HSA_STATUS_SUCCESS: hsa_status_t = 0x0;
pub const HSA_STATUS_INFO_BREAK: hsa_status_t = 0x1;
pub const HSA_STATUS_ERROR: hsa_status_t = 0x1000;
pub const HSA_STATUS_ERROR_INVALID_ARGUMENT: hsa_status_t = 0x1001;
pub const HSA_STATUS_ERROR_OUT_OF_RESOURCES: hsa_status_t = 0x1008;
pub const HSA_STATUS_ERROR_NOT_INITIALIZED: hsa_status_t = 0x100B;
pub const HSA_STATUS_ERROR_INVALID_ISA: hsa_status_t = 0x100F;
pub const HSA_STATUS_ERROR_INVALID_CODE_OBJECT: hsa_status_t = 0x1010;
pub const HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: hsa_status_t = 0x1013;
pub const HSA_STATUS_ERROR_EXCEPTION: hsa_status_t = 0x1016;
pub const HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: hsa_status_t = 0x29;
pub const HSA_STATUS_ERROR_MEMORY_FAULT: hsa_status_t = 0x2B;

// hsa_agent_info_t, and AMD's additions.
pub const HSA_AGENT_INFO_NAME: u32 = 0; // char[64]
pub const HSA_AGENT_INFO_VENDOR_NAME: u32 = 1; // char[64]
pub const HSA_AGENT_INFO_WAVEFRONT_SIZE: u32 = 6; // u32
pub const HSA_AGENT_INFO_WORKGROUP_MAX_DIM: u32 = 7; // u16[3]
pub const HSA_AGENT_INFO_WORKGROUP_MAX_SIZE: u32 = 8; // u32
pub const HSA_AGENT_INFO_GRID_MAX_DIM: u32 = 9; // u32[3]
pub const HSA_AGENT_INFO_QUEUE_MAX_SIZE: u32 = 14; // u32
pub const HSA_AGENT_INFO_DEVICE: u32 = 17; // hsa_device_type_t (u32)
pub const HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: u32 = 0xA002; // u32
pub const HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY: u32 = 0xA003; // u32, MHz
pub const HSA_AMD_AGENT_INFO_PRODUCT_NAME: u32 = 0xA009; // char[64]
pub const HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU: u32 = 0xA00A; // u32
pub const HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY: u32 = 0xA016; // u64, Hz

pub const HSA_DEVICE_TYPE_CPU: u32 = 0;
pub const HSA_DEVICE_TYPE_GPU: u32 = 1;

// hsa_amd_memory_pool_info_t
pub const HSA_AMD_MEMORY_POOL_INFO_SEGMENT: u32 = 0; // u32
pub const HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: u32 = 1; // u32
pub const HSA_AMD_MEMORY_POOL_INFO_SIZE: u32 = 2; // usize
pub const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: u32 = 5; // bool (u8)
pub const HSA_AMD_SEGMENT_GLOBAL: u32 = 0;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT: u32 = 1;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
pub const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;

// hsa_signal_condition_t, hsa_wait_state_t
pub const HSA_SIGNAL_CONDITION_EQ: u32 = 0;
pub const HSA_SIGNAL_CONDITION_LT: u32 = 2;
pub const HSA_WAIT_STATE_BLOCKED: u32 = 0;

// Queues and AQL packets.
pub const HSA_QUEUE_TYPE_MULTI: u32 = 0;
pub const HSA_PACKET_TYPE_KERNEL_DISPATCH: u16 = 2;
pub const HSA_PACKET_HEADER_TYPE: u16 = 0;
pub const HSA_PACKET_HEADER_BARRIER: u16 = 8;
pub const HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE: u16 = 9;
pub const HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE: u16 = 11;
pub const HSA_FENCE_SCOPE_SYSTEM: u16 = 2;
pub const HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS: u16 = 0;

// Executables.
pub const HSA_PROFILE_FULL: u32 = 1;
pub const HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT: u32 = 0;
pub const HSA_EXECUTABLE_SYMBOL_INFO_TYPE: u32 = 0; // u32 (hsa_symbol_kind_t)
pub const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE: u32 = 9; // u32
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: u32 = 11; // u32
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: u32 = 13; // u32
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: u32 = 14; // u32
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK: u32 = 15; // bool (u8)
pub const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS: u32 = 21; // u64
pub const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: u32 = 22; // u64

/// `hsa_queue_t` (large model): the runtime owns it; the plugin reads the
/// ring's address and size and rings the doorbell.
#[repr(C)]
#[derive(Debug)]
pub struct hsa_queue_t {
    pub type_: u32,
    pub features: u32,
    pub base_address: *mut c_void,
    pub doorbell_signal: hsa_signal_t,
    pub size: u32,
    pub reserved1: u32,
    pub id: u64,
}

/// `hsa_kernel_dispatch_packet_t`: one 64-byte AQL slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_kernel_dispatch_packet_t {
    pub header: u16,
    pub setup: u16,
    pub workgroup_size_x: u16,
    pub workgroup_size_y: u16,
    pub workgroup_size_z: u16,
    pub reserved0: u16,
    pub grid_size_x: u32,
    pub grid_size_y: u32,
    pub grid_size_z: u32,
    pub private_segment_size: u32,
    pub group_segment_size: u32,
    pub kernel_object: u64,
    pub kernarg_address: u64,
    pub reserved2: u64,
    pub completion_signal: hsa_signal_t,
}

const _: () = assert!(std::mem::size_of::<hsa_kernel_dispatch_packet_t>() == 64);
const _: () = assert!(std::mem::size_of::<hsa_queue_t>() == 40);

pub type AgentCallback = unsafe extern "C" fn(hsa_agent_t, *mut c_void) -> hsa_status_t;
pub type PoolCallback = unsafe extern "C" fn(hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t;
pub type IsaCallback = unsafe extern "C" fn(hsa_isa_t, *mut c_void) -> hsa_status_t;
/// `hsa_isa_info_t`: the length of an ISA's name (u32), and the name
/// (`amdgcn-amd-amdhsa--gfx90a:xnack-`; current runtimes count and write
/// a terminating NUL, older ones neither).
pub const HSA_ISA_INFO_NAME_LENGTH: u32 = 0;
pub const HSA_ISA_INFO_NAME: u32 = 1;
/// `hsa_amd_system_event_callback_t`: called with an [`hsa_amd_event_t`].
pub type EventCallback = unsafe extern "C" fn(*const hsa_amd_event_t, *mut c_void) -> hsa_status_t;
/// `HSA_AMD_GPU_MEMORY_FAULT_EVENT`.
pub const HSA_AMD_GPU_MEMORY_FAULT_EVENT: u32 = 0;

/// `hsa_amd_gpu_memory_fault_info_t`: which GPU faulted, where, and why
/// (`HSA_AMD_MEMORY_FAULT_*` bits).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_gpu_memory_fault_info_t {
    pub agent: hsa_agent_t,
    pub virtual_address: u64,
    pub fault_reason_mask: u32,
}

/// `hsa_amd_event_t`: the event's type, then a union of which only the
/// memory fault (its largest member) is read, and only for that type.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hsa_amd_event_t {
    pub event_type: u32,
    pub memory_fault: hsa_amd_gpu_memory_fault_info_t,
}

const _: () = assert!(std::mem::size_of::<hsa_amd_event_t>() == 32);

/// `hsa_amd_memory_fault_reason_t` bits, with what they mean.
pub const HSA_AMD_MEMORY_FAULT_REASONS: &[(u32, &str)] = &[
    (1 << 0, "page not present or not accessible"),
    (1 << 1, "write to a read-only page"),
    (1 << 2, "execution of a non-executable page"),
    (1 << 3, "access to a host-only page"),
    (1 << 4, "DRAM ECC error"),
    (1 << 5, "imprecise fault address"),
    (1 << 6, "SRAM ECC error"),
    (1 << 31, "GPU reset after a hang"),
];
pub type QueueCallback = unsafe extern "C" fn(hsa_status_t, *mut hsa_queue_t, *mut c_void);

/// The library opened when `OFFLOAD_HSA_RUNTIME` names none.
pub const DEFAULT_RUNTIME: &str = "libhsa-runtime64.so.1";
/// Where ROCm installs it when the loader's paths do not say.
pub const ROCM_RUNTIME: &str = "/opt/rocm/lib/libhsa-runtime64.so.1";

macro_rules! runtime_table {
    (
        required { $( $field:ident : fn($($arg:ty),*) -> $ret:ty; )* }
        optional { $( $ofield:ident : fn($($oarg:ty),*) -> $oret:ty; )* }
    ) => {
        /// Every runtime entry point the plugin calls, resolved once; the
        /// optional ones are missing from some runtimes (the fake's).
        pub struct Hsa {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> $ret, )*
            $( pub $ofield: Option<unsafe extern "C" fn($($oarg),*) -> $oret>, )*
            /// Where the library was loaded from.
            pub path: PathBuf,
            /// Keeps the function pointers valid.
            _library: Library,
        }

        impl Hsa {
            fn resolve(library: Library, path: PathBuf) -> Result<Hsa, String> {
                $(
                    // SAFETY: the symbol is the HSA function of that name;
                    // its C signature is the declared one (hsa.h).
                    let $field = unsafe {
                        *library
                            .get::<unsafe extern "C" fn($($arg),*) -> $ret>(
                                concat!(stringify!($field), "\0").as_bytes(),
                            )
                            .map_err(|e| {
                                format!("{} has no {}: {e}", path.display(), stringify!($field))
                            })?
                    };
                )*
                $(
                    // SAFETY: as above, where the runtime has the symbol.
                    let $ofield = unsafe {
                        library
                            .get::<unsafe extern "C" fn($($oarg),*) -> $oret>(
                                concat!(stringify!($ofield), "\0").as_bytes(),
                            )
                            .ok()
                            .map(|f| *f)
                    };
                )*
                Ok(Hsa { $( $field, )* $( $ofield, )* path, _library: library })
            }
        }
    };
}

runtime_table! {
    required {
    hsa_init: fn() -> hsa_status_t;
    hsa_shut_down: fn() -> hsa_status_t;
    hsa_status_string: fn(hsa_status_t, *mut *const c_char) -> hsa_status_t;
    hsa_iterate_agents: fn(AgentCallback, *mut c_void) -> hsa_status_t;
    hsa_agent_get_info: fn(hsa_agent_t, u32, *mut c_void) -> hsa_status_t;
    hsa_agent_iterate_isas: fn(hsa_agent_t, IsaCallback, *mut c_void) -> hsa_status_t;
    hsa_isa_get_info_alt: fn(hsa_isa_t, u32, *mut c_void) -> hsa_status_t;
    hsa_amd_agent_iterate_memory_pools: fn(hsa_agent_t, PoolCallback, *mut c_void) -> hsa_status_t;
    hsa_amd_memory_pool_get_info: fn(hsa_amd_memory_pool_t, u32, *mut c_void) -> hsa_status_t;
    hsa_amd_memory_pool_allocate: fn(hsa_amd_memory_pool_t, usize, u32, *mut *mut c_void) -> hsa_status_t;
    hsa_amd_memory_pool_free: fn(*mut c_void) -> hsa_status_t;
    hsa_amd_agents_allow_access: fn(u32, *const hsa_agent_t, *const u32, *const c_void) -> hsa_status_t;
    hsa_amd_memory_lock: fn(*mut c_void, usize, *mut hsa_agent_t, c_int, *mut *mut c_void) -> hsa_status_t;
    hsa_amd_memory_unlock: fn(*mut c_void) -> hsa_status_t;
    hsa_amd_memory_async_copy: fn(*mut c_void, hsa_agent_t, *const c_void, hsa_agent_t, usize, u32, *const hsa_signal_t, hsa_signal_t) -> hsa_status_t;
    hsa_amd_memory_fill: fn(*mut c_void, u32, usize) -> hsa_status_t;
    hsa_signal_create: fn(hsa_signal_value_t, u32, *const hsa_agent_t, *mut hsa_signal_t) -> hsa_status_t;
    hsa_signal_destroy: fn(hsa_signal_t) -> hsa_status_t;
    hsa_signal_store_screlease: fn(hsa_signal_t, hsa_signal_value_t) -> ();
    hsa_signal_load_scacquire: fn(hsa_signal_t) -> hsa_signal_value_t;
    hsa_signal_wait_scacquire: fn(hsa_signal_t, u32, hsa_signal_value_t, u64, u32) -> hsa_signal_value_t;
    hsa_queue_create: fn(hsa_agent_t, u32, u32, Option<QueueCallback>, *mut c_void, u32, u32, *mut *mut hsa_queue_t) -> hsa_status_t;
    hsa_queue_destroy: fn(*mut hsa_queue_t) -> hsa_status_t;
    hsa_queue_add_write_index_relaxed: fn(*const hsa_queue_t, u64) -> u64;
    hsa_queue_load_read_index_scacquire: fn(*const hsa_queue_t) -> u64;
    hsa_code_object_reader_create_from_memory: fn(*const c_void, usize, *mut hsa_code_object_reader_t) -> hsa_status_t;
    hsa_code_object_reader_destroy: fn(hsa_code_object_reader_t) -> hsa_status_t;
    hsa_executable_create_alt: fn(u32, u32, *const c_char, *mut hsa_executable_t) -> hsa_status_t;
    hsa_executable_load_agent_code_object: fn(hsa_executable_t, hsa_agent_t, hsa_code_object_reader_t, *const c_char, *mut hsa_loaded_code_object_t) -> hsa_status_t;
    hsa_executable_freeze: fn(hsa_executable_t, *const c_char) -> hsa_status_t;
    hsa_executable_destroy: fn(hsa_executable_t) -> hsa_status_t;
    hsa_executable_get_symbol_by_name: fn(hsa_executable_t, *const c_char, *const hsa_agent_t, *mut hsa_executable_symbol_t) -> hsa_status_t;
    hsa_executable_symbol_get_info: fn(hsa_executable_symbol_t, u32, *mut c_void) -> hsa_status_t;
    }
    optional {
    // GPU memory faults arrive here; without a handler ROCr aborts.
    hsa_amd_register_system_event_handler: fn(EventCallback, *mut c_void) -> hsa_status_t;
    }
}

impl Hsa {
    /// Opens the runtime library (`path`; else `libhsa-runtime64.so.1`
    /// through the loader's search, else ROCm's default location) and
    /// resolves every entry point. The error says what is missing.
    pub fn load(path: Option<&Path>) -> Result<Hsa, String> {
        let name = match path {
            Some(p) => p.to_path_buf(),
            None => default_location().ok_or_else(|| {
                format!(
                    "cannot load the HSA runtime {DEFAULT_RUNTIME}: not in LD_LIBRARY_PATH, {}, the system library directories or {ROCM_RUNTIME} (set {} to its path)",
                    offload_core::locate::LD_SO_CACHE,
                    crate::RUNTIME_ENV
                )
            })?,
        };
        // SAFETY: loading the HSA runtime runs its initialisers, which is
        // what using it means; RTLD_LOCAL keeps its symbols to itself, and
        // RTLD_NODELETE keeps it loaded after the plugin (ROCr and its
        // driver layer are not made to be unloaded).
        let library = unsafe {
            libloading::os::unix::Library::open(
                Some(&name),
                libloading::os::unix::RTLD_NOW
                    | libloading::os::unix::RTLD_LOCAL
                    | libc_rtld_nodelete(),
            )
        }
        .map_err(|e| format!("cannot load the HSA runtime {}: {e}", name.display()))?;
        Hsa::resolve(Library::from(library), name)
    }
}

/// `RTLD_NODELETE` (glibc's value on every Linux architecture).
const fn libc_rtld_nodelete() -> std::ffi::c_int {
    0x1000
}

/// The runtime's soname when the loader can find it, else ROCm's file when
/// it exists (ROCm does not always register its directory with the loader).
fn default_location() -> Option<PathBuf> {
    use offload_core::locate;
    let ld_library_path = std::env::var_os("LD_LIBRARY_PATH");
    if locate::findable(
        DEFAULT_RUNTIME.as_ref(),
        ld_library_path.as_deref(),
        Path::new(locate::LD_SO_CACHE),
        locate::SYSTEM_DIRS,
    ) {
        return Some(PathBuf::from(DEFAULT_RUNTIME));
    }
    Path::new(ROCM_RUNTIME)
        .exists()
        .then(|| PathBuf::from(ROCM_RUNTIME))
}

impl std::fmt::Debug for Hsa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hsa({})", self.path.display())
    }
}
