//! The CUDA driver API as this plugin uses it: types, constants and the
//! function table, resolved once from `libcuda.so.1` at run time.
//!
//! Nothing here needs CUDA at build time: the declarations are ours (the
//! subset of `cuda.h` the plugin calls, CUDA 12/13 ABI), and
//! [`Driver::load`] opens the library with `dlopen` and looks every symbol
//! up once. Versioned entry points are named as `cuda.h` maps them
//! (`cuMemAlloc` is the `cuMemAlloc_v2` symbol since CUDA 3.2, and so on).
//! `cuGetProcAddress` is not used.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};

use libloading::Library;

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUdevice_attribute = c_int;
/// `CUlimit`: a context limit (`cuCtxSetLimit`).
pub type CUlimit = c_int;
pub type CUfunction_attribute = c_int;
pub type CUjit_option = c_int;
pub type CUmemoryPool = *mut c_void;
pub type CUmemPool_attribute = c_int;
pub type CUhostFn = unsafe extern "C" fn(user_data: *mut c_void);
pub type CUoccupancyB2DSize = Option<unsafe extern "C" fn(block_size: c_int) -> usize>;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
pub const CUDA_ERROR_STUB_LIBRARY: CUresult = 34;
pub const CUDA_ERROR_INSUFFICIENT_DRIVER: CUresult = 35;
pub const CUDA_ERROR_DEVICE_UNAVAILABLE: CUresult = 46;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CUresult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_NO_BINARY_FOR_GPU: CUresult = 209;
pub const CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: CUresult = 217;
pub const CUDA_ERROR_INVALID_PTX: CUresult = 218;
pub const CUDA_ERROR_UNSUPPORTED_PTX_VERSION: CUresult = 222;
pub const CUDA_ERROR_JIT_COMPILER_NOT_FOUND: CUresult = 223;
pub const CUDA_ERROR_INVALID_SOURCE: CUresult = 300;
pub const CUDA_ERROR_FILE_NOT_FOUND: CUresult = 301;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: CUresult = 701;
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

// CUdevice_attribute values (cuda.h).
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CUdevice_attribute = 1;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: CUdevice_attribute = 2;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: CUdevice_attribute = 3;
pub const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: CUdevice_attribute = 4;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: CUdevice_attribute = 5;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: CUdevice_attribute = 6;
pub const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: CUdevice_attribute = 7;
pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: CUdevice_attribute = 8;
pub const CU_DEVICE_ATTRIBUTE_WARP_SIZE: CUdevice_attribute = 10;
pub const CU_DEVICE_ATTRIBUTE_CLOCK_RATE: CUdevice_attribute = 13;
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: CUdevice_attribute = 16;
pub const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: CUdevice_attribute = 39;
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: CUdevice_attribute = 41;
pub const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: CUdevice_attribute = 33;
pub const CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: CUdevice_attribute = 34;
pub const CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: CUdevice_attribute = 50;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: CUdevice_attribute = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: CUdevice_attribute = 76;
pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: CUdevice_attribute = 97;
/// Whether `cuMemAllocAsync` / `cuMemFreeAsync` (memory pools) work.
pub const CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: CUdevice_attribute = 115;

// CUfunction_attribute values.
pub const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CUfunction_attribute = 0;
pub const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: CUfunction_attribute = 1;
pub const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: CUfunction_attribute = 8;

// CUjit_option values.
pub const CU_JIT_MAX_REGISTERS: CUjit_option = 0;
pub const CU_JIT_INFO_LOG_BUFFER: CUjit_option = 3;
pub const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: CUjit_option = 4;
pub const CU_JIT_ERROR_LOG_BUFFER: CUjit_option = 5;
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: CUjit_option = 6;
pub const CU_JIT_OPTIMIZATION_LEVEL: CUjit_option = 7;
pub const CU_JIT_GENERATE_DEBUG_INFO: CUjit_option = 11;
pub const CU_JIT_LOG_VERBOSE: CUjit_option = 12;
pub const CU_JIT_GENERATE_LINE_INFO: CUjit_option = 13;

/// `CU_LAUNCH_PARAM_*` markers of `cuLaunchKernel`'s `extra` array.
pub const CU_LAUNCH_PARAM_END: *mut c_void = std::ptr::null_mut();
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void = std::ptr::without_provenance_mut(1);
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: *mut c_void = std::ptr::without_provenance_mut(2);

pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// Stack bytes per GPU thread.
pub const CU_LIMIT_STACK_SIZE: CUlimit = 0x00;
/// Bytes of the heap device-side `malloc` draws from.
pub const CU_LIMIT_MALLOC_HEAP_SIZE: CUlimit = 0x02;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
pub const CU_MEM_ATTACH_GLOBAL: c_uint = 0x1;
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x1;
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x1;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`: ordinary device memory.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 0x1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`: `CUmemLocation::id` is a device ordinal.
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 0x1;
/// Bytes a pool keeps reserved across synchronisations (a `cuuint64_t`).
pub const CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: CUmemPool_attribute = 4;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUmemLocation {
    pub type_: c_int,
    pub id: c_int,
}

/// `CUmemPoolProps` (88 bytes in every CUDA 11.2+ header: fields added
/// later took bytes of `reserved`, and zero means their default).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemPoolProps {
    pub alloc_type: c_int,
    pub handle_types: c_int,
    pub location: CUmemLocation,
    pub win32_security_attributes: *mut c_void,
    pub reserved: [u8; 64],
}

const _: () = assert!(std::mem::size_of::<CUmemPoolProps>() == 88);

/// `CUuuid`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

/// The name the driver library is opened by when `OFFLOAD_CUDA_DRIVER` is unset.
pub const DEFAULT_DRIVER: &str = "libcuda.so.1";

macro_rules! driver_table {
    (
        required { $( $field:ident = $sym:literal : fn($($arg:ty),*); )* }
        optional { $( $ofield:ident = $osym:literal : fn($($oarg:ty),*); )* }
    ) => {
        /// Every driver entry point the plugin calls, resolved once. The
        /// optional ones are newer than the oldest driver the plugin runs
        /// on; their features are off where they are missing.
        #[allow(non_snake_case)]
        pub struct Driver {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CUresult, )*
            $( pub $ofield: Option<unsafe extern "C" fn($($oarg),*) -> CUresult>, )*
            /// Where the library was loaded from.
            pub path: PathBuf,
            /// Keeps the function pointers valid.
            _library: Library,
        }

        impl Driver {
            fn resolve(library: Library, path: PathBuf) -> Result<Driver, String> {
                $(
                    // SAFETY: the symbol is the driver function of that
                    // name; its C signature is the declared one (cuda.h).
                    let $field = unsafe {
                        *library
                            .get::<unsafe extern "C" fn($($arg),*) -> CUresult>(
                                concat!($sym, "\0").as_bytes(),
                            )
                            .map_err(|e| {
                                format!("{} has no {}: {e}", path.display(), $sym)
                            })?
                    };
                )*
                $(
                    // SAFETY: as above, where the driver has the symbol.
                    let $ofield = unsafe {
                        library
                            .get::<unsafe extern "C" fn($($oarg),*) -> CUresult>(
                                concat!($osym, "\0").as_bytes(),
                            )
                            .ok()
                            .map(|f| *f)
                    };
                )*
                Ok(Driver { $( $field, )* $( $ofield, )* path, _library: library })
            }
        }
    };
}

driver_table! {
    required {
    cuInit = "cuInit": fn(c_uint);
    cuDriverGetVersion = "cuDriverGetVersion": fn(*mut c_int);
    cuGetErrorName = "cuGetErrorName": fn(CUresult, *mut *const c_char);
    cuGetErrorString = "cuGetErrorString": fn(CUresult, *mut *const c_char);
    cuDeviceGetCount = "cuDeviceGetCount": fn(*mut c_int);
    cuDeviceGet = "cuDeviceGet": fn(*mut CUdevice, c_int);
    cuDeviceGetName = "cuDeviceGetName": fn(*mut c_char, c_int, CUdevice);
    cuDeviceGetAttribute = "cuDeviceGetAttribute": fn(*mut c_int, CUdevice_attribute, CUdevice);
    cuDeviceTotalMem = "cuDeviceTotalMem_v2": fn(*mut usize, CUdevice);
    cuDeviceGetUuid = "cuDeviceGetUuid": fn(*mut CUuuid, CUdevice);
    cuDeviceCanAccessPeer = "cuDeviceCanAccessPeer": fn(*mut c_int, CUdevice, CUdevice);
    cuDevicePrimaryCtxRetain = "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease = "cuDevicePrimaryCtxRelease_v2": fn(CUdevice);
    cuCtxSetCurrent = "cuCtxSetCurrent": fn(CUcontext);
    cuCtxSynchronize = "cuCtxSynchronize": fn();
    cuCtxGetCurrent = "cuCtxGetCurrent": fn(*mut CUcontext);
    cuCtxSetLimit = "cuCtxSetLimit": fn(CUlimit, usize);
    cuCtxEnablePeerAccess = "cuCtxEnablePeerAccess": fn(CUcontext, c_uint);
    cuMemAlloc = "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize);
    cuMemFree = "cuMemFree_v2": fn(CUdeviceptr);
    cuMemAllocHost = "cuMemAllocHost_v2": fn(*mut *mut c_void, usize);
    cuMemFreeHost = "cuMemFreeHost": fn(*mut c_void);
    cuMemAllocManaged = "cuMemAllocManaged": fn(*mut CUdeviceptr, usize, c_uint);
    cuMemHostRegister = "cuMemHostRegister_v2": fn(*mut c_void, usize, c_uint);
    cuMemHostUnregister = "cuMemHostUnregister": fn(*mut c_void);
    cuMemcpyHtoDAsync = "cuMemcpyHtoDAsync_v2": fn(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoHAsync = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoDAsync = "cuMemcpyDtoDAsync_v2": fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpyPeerAsync = "cuMemcpyPeerAsync": fn(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize, CUstream);
    cuMemsetD8Async = "cuMemsetD8Async": fn(CUdeviceptr, u8, usize, CUstream);
    cuMemsetD16Async = "cuMemsetD16Async": fn(CUdeviceptr, u16, usize, CUstream);
    cuMemsetD32Async = "cuMemsetD32Async": fn(CUdeviceptr, c_uint, usize, CUstream);
    cuStreamCreate = "cuStreamCreate": fn(*mut CUstream, c_uint);
    cuStreamDestroy = "cuStreamDestroy_v2": fn(CUstream);
    cuStreamSynchronize = "cuStreamSynchronize": fn(CUstream);
    cuStreamQuery = "cuStreamQuery": fn(CUstream);
    cuStreamWaitEvent = "cuStreamWaitEvent": fn(CUstream, CUevent, c_uint);
    cuLaunchHostFunc = "cuLaunchHostFunc": fn(CUstream, CUhostFn, *mut c_void);
    cuEventCreate = "cuEventCreate": fn(*mut CUevent, c_uint);
    cuEventRecord = "cuEventRecord": fn(CUevent, CUstream);
    cuEventSynchronize = "cuEventSynchronize": fn(CUevent);
    cuEventQuery = "cuEventQuery": fn(CUevent);
    cuEventDestroy = "cuEventDestroy_v2": fn(CUevent);
    cuModuleLoadDataEx = "cuModuleLoadDataEx": fn(*mut CUmodule, *const c_void, c_uint, *mut CUjit_option, *mut *mut c_void);
    cuModuleUnload = "cuModuleUnload": fn(CUmodule);
    cuModuleGetFunction = "cuModuleGetFunction": fn(*mut CUfunction, CUmodule, *const c_char);
    cuModuleGetGlobal = "cuModuleGetGlobal_v2": fn(*mut CUdeviceptr, *mut usize, CUmodule, *const c_char);
    cuFuncGetAttribute = "cuFuncGetAttribute": fn(*mut c_int, CUfunction_attribute, CUfunction);
    cuFuncSetAttribute = "cuFuncSetAttribute": fn(CUfunction, CUfunction_attribute, c_int);
    cuOccupancyMaxPotentialBlockSize = "cuOccupancyMaxPotentialBlockSize": fn(*mut c_int, *mut c_int, CUfunction, CUoccupancyB2DSize, usize, c_int);
    cuLaunchKernel = "cuLaunchKernel": fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
    }
    optional {
    // Blocks of a size one SM runs at once (since CUDA 6.5; optional so
    // that a driver without it only loses the occupancy-sized grids).
    cuOccupancyMaxActiveBlocksPerMultiprocessor = "cuOccupancyMaxActiveBlocksPerMultiprocessor": fn(*mut c_int, CUfunction, c_int, usize);
    // Stream-ordered allocation and memory pools: CUDA 11.2 and later.
    cuMemAllocAsync = "cuMemAllocAsync": fn(*mut CUdeviceptr, usize, CUstream);
    cuMemFreeAsync = "cuMemFreeAsync": fn(CUdeviceptr, CUstream);
    cuMemPoolCreate = "cuMemPoolCreate": fn(*mut CUmemoryPool, *const CUmemPoolProps);
    cuMemPoolDestroy = "cuMemPoolDestroy": fn(CUmemoryPool);
    cuMemPoolSetAttribute = "cuMemPoolSetAttribute": fn(CUmemoryPool, CUmemPool_attribute, *mut c_void);
    cuMemPoolTrimTo = "cuMemPoolTrimTo": fn(CUmemoryPool, usize);
    cuMemAllocFromPoolAsync = "cuMemAllocFromPoolAsync": fn(*mut CUdeviceptr, usize, CUmemoryPool, CUstream);
    }
}

impl Driver {
    /// Opens the driver library (`path`, or `libcuda.so.1` through the
    /// dynamic loader's search) and resolves every entry point. The error
    /// says what is missing; it never panics.
    pub fn load(path: Option<&Path>) -> Result<Driver, String> {
        let name = path
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DRIVER));
        let ld_library_path = std::env::var_os("LD_LIBRARY_PATH");
        if !crate::locate::findable(
            name.as_os_str(),
            ld_library_path.as_deref(),
            Path::new(crate::locate::LD_SO_CACHE),
            crate::locate::SYSTEM_DIRS,
        ) {
            return Err(format!(
                "cannot load the CUDA driver {}: not in LD_LIBRARY_PATH, {} or the system library directories (set {} to its path)",
                name.display(),
                crate::locate::LD_SO_CACHE,
                crate::DRIVER_ENV
            ));
        }
        // SAFETY: loading the CUDA driver runs its initialisers, which is
        // what using it means; RTLD_LOCAL keeps its symbols to itself.
        let library = unsafe {
            libloading::os::unix::Library::open(
                Some(&name),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
            )
        }
        .map_err(|e| format!("cannot load the CUDA driver {}: {e}", name.display()))?;
        Driver::resolve(Library::from(library), name)
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Driver({})", self.path.display())
    }
}
