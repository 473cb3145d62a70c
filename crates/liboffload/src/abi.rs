//! The one place where memory the C caller passed in is read or written.
//!
//! OffloadAPI.h's pointer contract: a pointer argument that is not null is
//! valid for the access the header describes (an output argument for one
//! write of its type, an input buffer for the size passed with it, a name
//! a NUL-terminated string) for the duration of the call. The entry points
//! reject null pointers first ([`crate::error::check_ptr`]); every function
//! here then relies on that contract for the rest, and its callers say in
//! their `SAFETY` comment which argument of which entry point it is.

use std::ffi::{c_char, c_void, CStr};

/// Write `value` to the caller's output argument `out`.
///
/// # Safety
/// `out` is non-null, aligned and valid for one write of `T`.
#[inline(always)]
pub unsafe fn write<T>(out: *mut T, value: T) {
    // SAFETY: the caller's guarantee above.
    unsafe { out.write(value) }
}

/// Write `value` to `out`, which need not be aligned.
///
/// # Safety
/// `out` is non-null and valid for a write of `size_of::<T>()` bytes.
#[inline(always)]
pub unsafe fn write_unaligned<T>(out: *mut T, value: T) {
    // SAFETY: the caller's guarantee above.
    unsafe { out.write_unaligned(value) }
}

/// Copy `bytes` to the caller's buffer `out`.
///
/// # Safety
/// `out` is non-null and valid for a write of `bytes.len()` bytes, and does
/// not overlap `bytes`.
#[inline(always)]
pub unsafe fn write_bytes(out: *mut c_void, bytes: &[u8]) {
    // SAFETY: the caller's guarantee above.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len()) }
}

/// The caller's input buffer `[ptr, ptr + len)`; empty when `len` is 0
/// (then `ptr` is not looked at).
///
/// # Safety
/// When `len > 0`: `ptr` is non-null and valid for reads of `len` bytes,
/// which nobody writes while the slice is alive (until the entry point
/// returns).
#[inline(always)]
pub unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> &'a [u8] {
    // SAFETY: the caller's guarantee above.
    unsafe { slice(ptr.cast::<u8>(), len) }
}

/// The caller's input array of `len` elements at `ptr`; empty when `len`
/// is 0 (then `ptr` is not looked at).
///
/// # Safety
/// When `len > 0`: `ptr` is non-null, aligned and valid for reads of `len`
/// values of `T`, which nobody writes while the slice is alive.
#[inline(always)]
pub unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's guarantee above (`len > 0` here).
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// The caller's input value at `ptr`.
///
/// # Safety
/// `ptr` is non-null, aligned and valid for a read of `T`.
#[inline(always)]
pub unsafe fn read<T: Copy>(ptr: *const T) -> T {
    // SAFETY: the caller's guarantee above.
    unsafe { ptr.read() }
}

/// The caller's NUL-terminated string at `ptr`.
///
/// # Safety
/// `ptr` is non-null and points to a NUL-terminated string that nobody
/// writes while the result is alive.
#[inline(always)]
pub unsafe fn c_str<'a>(ptr: *const c_char) -> &'a CStr {
    // SAFETY: the caller's guarantee above.
    unsafe { CStr::from_ptr(ptr) }
}
