//! `offload_interop_table_t` of `include/offload/interop.h`: the ol* API as
//! a table of function pointers, bound to one device (and queue).
//!
//! libomptarget hands one out per OpenMP interop object (property
//! `OMPX_IPR_OFFLOAD_TABLE`), filled with this library's own entry points,
//! so that an OpenMP program reaches the ol* API of the runtime it already
//! runs on without linking or loading a second library.
//!
//! Versioning: members are only appended; [`OFFLOAD_INTEROP_TABLE_VERSION`]
//! and `size` grow with every addition (see the header). The layout is
//! checked against the C header by `tests/interop_table.rs`.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

use crate::types::*;

/// `OFFLOAD_INTEROP_TABLE_VERSION` of the header this mirrors.
pub const OFFLOAD_INTEROP_TABLE_VERSION: u32 = 1;

/// `OMPX_IPR_OFFLOAD_TABLE`: the implementation-defined interop property
/// (OpenMP numbers them from 0) whose value is the table.
pub const OMPX_IPR_OFFLOAD_TABLE: i32 = 0;

/// `OMPX_IFR_LIBOFFLOAD`: the `omp_ipr_fr_id` of our interop objects.
pub const OMPX_IFR_LIBOFFLOAD: isize = 0x100;

macro_rules! table {
    ($($name:ident ( $($arg:ty),* );)*) => {
        /// `offload_interop_table_t` (version 1).
        #[repr(C)]
        #[derive(Debug, Clone, Copy)]
        pub struct offload_interop_table_t {
            pub version: u32,
            pub size: u32,
            pub platform: ol_platform_handle_t,
            pub device: ol_device_handle_t,
            pub queue: ol_queue_handle_t,
            $(pub $name: Option<unsafe extern "C" fn($($arg),*) -> ol_result_t>,)*
        }

        impl offload_interop_table_t {
            /// A table of this library's entry points bound to the given
            /// handles (not checked here: they are the caller's).
            pub fn new(
                platform: ol_platform_handle_t,
                device: ol_device_handle_t,
                queue: ol_queue_handle_t,
            ) -> Self {
                offload_interop_table_t {
                    version: OFFLOAD_INTEROP_TABLE_VERSION,
                    size: std::mem::size_of::<Self>() as u32,
                    platform,
                    device,
                    queue,
                    $($name: Some(crate::$name),)*
                }
            }

            /// Every member with its byte offset, in declaration order
            /// (compared with the C header by the tests).
            pub fn layout() -> Vec<(&'static str, usize)> {
                vec![
                    ("version", std::mem::offset_of!(Self, version)),
                    ("size", std::mem::offset_of!(Self, size)),
                    ("platform", std::mem::offset_of!(Self, platform)),
                    ("device", std::mem::offset_of!(Self, device)),
                    ("queue", std::mem::offset_of!(Self, queue)),
                    $((stringify!($name), std::mem::offset_of!(Self, $name)),)*
                ]
            }
        }
    };
}

table! {
    olInit();
    olShutDown();
    olIterateDevices(ol_device_iterate_cb_t, *mut c_void);
    olGetPlatformInfo(ol_platform_handle_t, ol_platform_info_t, usize, *mut c_void);
    olGetPlatformInfoSize(ol_platform_handle_t, ol_platform_info_t, *mut usize);
    olGetDeviceInfo(ol_device_handle_t, ol_device_info_t, usize, *mut c_void);
    olGetDeviceInfoSize(ol_device_handle_t, ol_device_info_t, *mut usize);
    olCreateQueue(ol_device_handle_t, *mut ol_queue_handle_t);
    olDestroyQueue(ol_queue_handle_t);
    olSyncQueue(ol_queue_handle_t);
    olGetQueueInfo(ol_queue_handle_t, ol_queue_info_t, usize, *mut c_void);
    olGetQueueInfoSize(ol_queue_handle_t, ol_queue_info_t, *mut usize);
    olWaitEvents(ol_queue_handle_t, *mut ol_event_handle_t, usize);
    olLaunchHostFunction(ol_queue_handle_t, ol_host_function_cb_t, *mut c_void);
    olCreateEvent(ol_queue_handle_t, *mut ol_event_handle_t);
    olDestroyEvent(ol_event_handle_t);
    olSyncEvent(ol_event_handle_t);
    olGetEventInfo(ol_event_handle_t, ol_event_info_t, usize, *mut c_void);
    olGetEventInfoSize(ol_event_handle_t, ol_event_info_t, *mut usize);
    olMemAlloc(ol_device_handle_t, ol_alloc_type_t, usize, *mut *mut c_void);
    olMemFree(*mut c_void);
    olGetMemInfo(*const c_void, ol_mem_info_t, usize, *mut c_void);
    olGetMemInfoSize(*const c_void, ol_mem_info_t, *mut usize);
    olMemcpy(ol_queue_handle_t, *mut c_void, ol_device_handle_t, *const c_void, ol_device_handle_t, usize);
    olMemFill(ol_queue_handle_t, *mut c_void, usize, *const c_void, usize);
    olMemRegister(ol_device_handle_t, *mut c_void, usize, ol_memory_register_flags_t, *mut *mut c_void);
    olMemUnregister(ol_device_handle_t, *mut c_void);
    olCreateProgram(ol_device_handle_t, *const c_void, usize, *mut ol_program_handle_t);
    olDestroyProgram(ol_program_handle_t);
    olIsValidBinary(ol_device_handle_t, *const c_void, usize, *mut bool);
    olGetSymbol(ol_program_handle_t, *const c_char, ol_symbol_kind_t, *mut ol_symbol_handle_t);
    olGetSymbolInfo(ol_symbol_handle_t, ol_symbol_info_t, usize, *mut c_void);
    olGetSymbolInfoSize(ol_symbol_handle_t, ol_symbol_info_t, *mut usize);
    olLaunchKernel(ol_queue_handle_t, ol_device_handle_t, ol_symbol_handle_t, *const c_void, usize, *const ol_kernel_launch_size_args_t);
    olCalculateOptimalOccupancy(ol_device_handle_t, ol_symbol_handle_t, usize, *mut usize);
}

// SAFETY: the handles are addresses of objects of this library that are
// never dereferenced without being looked up first; the functions are
// thread-safe entry points. The table may be shared between threads.
unsafe impl Send for offload_interop_table_t {}
// SAFETY: as for Send: the table is plain data, never written through a
// shared reference.
unsafe impl Sync for offload_interop_table_t {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_and_sized() {
        let t = offload_interop_table_t::new(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(t.version, OFFLOAD_INTEROP_TABLE_VERSION);
        assert_eq!(
            t.size as usize,
            std::mem::size_of::<offload_interop_table_t>()
        );
        // 8 bytes of header, 3 handles, 35 entry points.
        assert_eq!(t.size as usize, 8 + 3 * 8 + 35 * 8);
        assert_eq!(offload_interop_table_t::layout().len(), 5 + 35);
        assert!(t.olLaunchKernel.is_some() && t.olCalculateOptimalOccupancy.is_some());
    }
}
