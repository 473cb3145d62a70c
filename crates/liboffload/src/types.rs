//! `repr(C)` mirrors of `OffloadAPI.h` (LLVM 22.1, API version 0.0.1).
//!
//! Handles are pointers to opaque types; the library never dereferences a
//! handle it was given: it looks the address up in a registry first
//! ([`crate::handles`]). Enumerations are `u32` newtypes so that an unknown
//! enumerator coming from C is representable (and rejected with
//! `OL_ERRC_INVALID_ENUMERATION`) instead of being undefined behaviour.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}
opaque!(
    ol_platform_impl_t,
    ol_device_impl_t,
    ol_queue_impl_t,
    ol_event_impl_t,
    ol_program_impl_t,
    ol_symbol_impl_t
);

pub type ol_platform_handle_t = *mut ol_platform_impl_t;
pub type ol_device_handle_t = *mut ol_device_impl_t;
pub type ol_queue_handle_t = *mut ol_queue_impl_t;
pub type ol_event_handle_t = *mut ol_event_impl_t;
pub type ol_program_handle_t = *mut ol_program_impl_t;
pub type ol_symbol_handle_t = *mut ol_symbol_impl_t;

/// `ol_error_struct_t`.
#[repr(C)]
pub struct ol_error_struct_t {
    pub code: u32,
    pub details: *const c_char,
}

/// `ol_result_t`: NULL is success.
pub type ol_result_t = *const ol_error_struct_t;

#[repr(C)]
pub struct ol_code_location_t {
    pub function_name: *const c_char,
    pub source_file: *const c_char,
    pub line_number: u32,
    pub column_number: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ol_dimensions_t {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ol_kernel_launch_size_args_t {
    pub dimensions: usize,
    pub num_groups: ol_dimensions_t,
    pub group_size: ol_dimensions_t,
    pub dyn_shared_memory: usize,
}

pub type ol_device_iterate_cb_t =
    Option<unsafe extern "C" fn(device: ol_device_handle_t, user_data: *mut c_void) -> bool>;
pub type ol_host_function_cb_t = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

pub type ol_memory_register_flags_t = u32;

/// A C enumeration as a `u32` newtype with its enumerator names.
macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $val:literal),* $(,)? }) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub u32);
        #[allow(dead_code)]
        impl $name {
            $(pub const $variant: $name = $name($val);)*
            /// The C enumerator name, or None for an unknown value.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($val => Some(stringify!($variant)),)*
                    _ => None,
                }
            }
        }
    };
}

c_enum!(ol_alloc_type_t {
    OL_ALLOC_TYPE_HOST = 0,
    OL_ALLOC_TYPE_DEVICE = 1,
    OL_ALLOC_TYPE_MANAGED = 2,
});

c_enum!(ol_device_info_t {
    OL_DEVICE_INFO_TYPE = 0,
    OL_DEVICE_INFO_PLATFORM = 1,
    OL_DEVICE_INFO_NAME = 2,
    OL_DEVICE_INFO_PRODUCT_NAME = 3,
    OL_DEVICE_INFO_UID = 4,
    OL_DEVICE_INFO_VENDOR = 5,
    OL_DEVICE_INFO_DRIVER_VERSION = 6,
    OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE = 7,
    OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION = 8,
    OL_DEVICE_INFO_MAX_WORK_SIZE = 9,
    OL_DEVICE_INFO_MAX_WORK_SIZE_PER_DIMENSION = 10,
    OL_DEVICE_INFO_VENDOR_ID = 11,
    OL_DEVICE_INFO_NUM_COMPUTE_UNITS = 12,
    OL_DEVICE_INFO_MAX_CLOCK_FREQUENCY = 13,
    OL_DEVICE_INFO_MEMORY_CLOCK_RATE = 14,
    OL_DEVICE_INFO_ADDRESS_BITS = 15,
    OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE = 16,
    OL_DEVICE_INFO_GLOBAL_MEM_SIZE = 17,
    OL_DEVICE_INFO_WORK_GROUP_LOCAL_MEM_SIZE = 18,
    OL_DEVICE_INFO_SINGLE_FP_CONFIG = 19,
    OL_DEVICE_INFO_DOUBLE_FP_CONFIG = 20,
    OL_DEVICE_INFO_HALF_FP_CONFIG = 21,
    OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_CHAR = 22,
    OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_SHORT = 23,
    OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_INT = 24,
    OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_LONG = 25,
    OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_FLOAT = 26,
    OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_DOUBLE = 27,
    OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_HALF = 28,
});

c_enum!(ol_device_type_t {
    OL_DEVICE_TYPE_DEFAULT = 0,
    OL_DEVICE_TYPE_ALL = 1,
    OL_DEVICE_TYPE_GPU = 2,
    OL_DEVICE_TYPE_CPU = 3,
    OL_DEVICE_TYPE_HOST = 4,
});

c_enum!(ol_errc_t {
    OL_ERRC_SUCCESS = 0,
    OL_ERRC_UNKNOWN = 1,
    OL_ERRC_HOST_IO = 2,
    OL_ERRC_INVALID_BINARY = 3,
    OL_ERRC_INVALID_NULL_POINTER = 4,
    OL_ERRC_INVALID_ARGUMENT = 5,
    OL_ERRC_NOT_FOUND = 6,
    OL_ERRC_OUT_OF_RESOURCES = 7,
    OL_ERRC_INVALID_SIZE = 8,
    OL_ERRC_INVALID_ENUMERATION = 9,
    OL_ERRC_HOST_TOOL_NOT_FOUND = 10,
    OL_ERRC_INVALID_VALUE = 11,
    OL_ERRC_UNIMPLEMENTED = 12,
    OL_ERRC_UNSUPPORTED = 13,
    OL_ERRC_ASSEMBLE_FAILURE = 14,
    OL_ERRC_COMPILE_FAILURE = 15,
    OL_ERRC_LINK_FAILURE = 16,
    OL_ERRC_BACKEND_FAILURE = 17,
    OL_ERRC_UNINITIALIZED = 18,
    OL_ERRC_INVALID_NULL_HANDLE = 19,
    OL_ERRC_INVALID_PLATFORM = 20,
    OL_ERRC_INVALID_DEVICE = 21,
    OL_ERRC_INVALID_QUEUE = 22,
    OL_ERRC_INVALID_EVENT = 23,
    OL_ERRC_SYMBOL_KIND = 24,
});

c_enum!(ol_event_info_t {
    OL_EVENT_INFO_QUEUE = 0,
    OL_EVENT_INFO_IS_COMPLETE = 1,
});

c_enum!(ol_mem_info_t {
    OL_MEM_INFO_DEVICE = 0,
    OL_MEM_INFO_BASE = 1,
    OL_MEM_INFO_SIZE = 2,
    OL_MEM_INFO_TYPE = 3,
});

c_enum!(ol_platform_backend_t {
    OL_PLATFORM_BACKEND_UNKNOWN = 0,
    OL_PLATFORM_BACKEND_CUDA = 1,
    OL_PLATFORM_BACKEND_AMDGPU = 2,
    OL_PLATFORM_BACKEND_LEVEL_ZERO = 3,
    OL_PLATFORM_BACKEND_HOST = 4,
});

c_enum!(ol_platform_info_t {
    OL_PLATFORM_INFO_NAME = 0,
    OL_PLATFORM_INFO_VENDOR_NAME = 1,
    OL_PLATFORM_INFO_VERSION = 2,
    OL_PLATFORM_INFO_BACKEND = 3,
});

c_enum!(ol_queue_info_t {
    OL_QUEUE_INFO_DEVICE = 0,
    OL_QUEUE_INFO_EMPTY = 1,
});

c_enum!(ol_symbol_info_t {
    OL_SYMBOL_INFO_KIND = 0,
    OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS = 1,
    OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE = 2,
});

c_enum!(ol_symbol_kind_t {
    OL_SYMBOL_KIND_KERNEL = 0,
    OL_SYMBOL_KIND_GLOBAL_VARIABLE = 1,
});

/// `ol_device_fp_capability_flag_t` bits.
pub mod fp {
    pub const CORRECTLY_ROUNDED_DIVIDE_SQRT: u32 = 1;
    pub const ROUND_TO_NEAREST: u32 = 2;
    pub const ROUND_TO_ZERO: u32 = 4;
    pub const ROUND_TO_INF: u32 = 8;
    pub const INF_NAN: u32 = 16;
    pub const DENORM: u32 = 32;
    pub const FMA: u32 = 64;
    /// Everything an IEEE-754 CPU unit does in hardware.
    pub const FULL_IEEE: u32 = CORRECTLY_ROUNDED_DIVIDE_SQRT
        | ROUND_TO_NEAREST
        | ROUND_TO_ZERO
        | ROUND_TO_INF
        | INF_NAN
        | DENORM
        | FMA;
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn layouts_match_the_header() {
        assert_eq!(std::mem::size_of::<ol_error_struct_t>(), 16);
        assert_eq!(std::mem::size_of::<ol_code_location_t>(), 24);
        assert_eq!(std::mem::size_of::<ol_dimensions_t>(), 12);
        assert_eq!(std::mem::size_of::<ol_kernel_launch_size_args_t>(), 40);
        assert_eq!(
            std::mem::offset_of!(ol_kernel_launch_size_args_t, group_size),
            20
        );
        assert_eq!(
            std::mem::offset_of!(ol_kernel_launch_size_args_t, dyn_shared_memory),
            32
        );
        assert_eq!(
            ol_device_info_t(28).name(),
            Some("OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_HALF")
        );
        assert_eq!(ol_device_info_t(29).name(), None);
    }
}
