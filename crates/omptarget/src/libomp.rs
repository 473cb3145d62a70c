//! What libomp tells this library: symbols looked up in the process, the
//! `OMP_TARGET_OFFLOAD` setting and the default device.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

pub fn dlsym_default(name: &CStr) -> *mut c_void {
    // SAFETY: looking up a symbol by a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

pub fn default_device() -> i64 {
    static F: OnceLock<usize> = OnceLock::new();
    let f = *F.get_or_init(|| dlsym_default(c"omp_get_default_device") as usize);
    if f == 0 {
        return 0;
    }
    // SAFETY: libomp's `int omp_get_default_device(void)`.
    let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(f) };
    f() as i64
}

/// libomp's `OMP_TARGET_OFFLOAD` (0 disabled, 1 default, 2 mandatory), if
/// libomp is loaded.
pub fn raw_policy() -> Option<i32> {
    let f = dlsym_default(c"__kmpc_get_target_offload");
    if f.is_null() {
        return None;
    }
    // SAFETY: libomp's `int __kmpc_get_target_offload(void)`.
    let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(f) };
    Some(f())
}

/// libomp says `OMP_TARGET_OFFLOAD=MANDATORY`.
pub fn raw_policy_is_mandatory() -> bool {
    raw_policy() == Some(2)
}
