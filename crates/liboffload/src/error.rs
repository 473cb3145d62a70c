//! `ol_result_t` values: interned, immortal error objects.
//!
//! Lifetime: an error result is an interned `{Code, Details}` pair. The first
//! time a (code, message) pair is returned it is allocated and kept for the
//! rest of the process; later failures with the same code and message return
//! the same pointer. So a result stays valid forever (also across
//! `olShutDown`/`olInit` and when handed to other threads), which is what
//! LLVM's library offers too, and a program that fails the same way in a loop
//! does not grow memory. Only distinct messages cost memory (a few dozen bytes
//! each); messages name handles and addresses, so a program that keeps passing
//! new bogus pointers keeps adding entries — that is the price of results that
//! never dangle.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{LazyLock, Mutex};

pub use offload_core::{Error, ErrorCode};

use crate::types::{ol_error_struct_t, ol_result_t};

pub type OlResult<T = ()> = Result<T, Error>;

struct Interned {
    result: ol_error_struct_t,
    _details: CString,
}

// SAFETY: `result.details` points into `_details`, which is immutable and
// owned by the same (never freed) box: moving the box moves both.
unsafe impl Send for Interned {}
// SAFETY: as for Send: nothing in it is ever written after construction.
unsafe impl Sync for Interned {}

/// (code, details) -> the immortal result.
type Table = Mutex<HashMap<(u32, String), Box<Interned>>>;

static TABLE: LazyLock<Table> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The immortal `ol_result_t` for `code` with `details`.
pub fn intern(code: u32, details: &str) -> ol_result_t {
    let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let key = (code, details.to_string());
    if let Some(e) = table.get(&key) {
        return &e.result;
    }
    let text = CString::new(details.replace('\0', "\\0")).unwrap_or_default();
    let entry = Box::new(Interned {
        result: ol_error_struct_t {
            code,
            details: text.as_ptr(),
        },
        _details: text,
    });
    let ptr: ol_result_t = &entry.result;
    table.insert(key, entry);
    ptr
}

/// Convert a call's outcome into the C result.
pub fn to_result(r: &OlResult) -> ol_result_t {
    match r {
        Ok(()) => std::ptr::null(),
        Err(e) => intern(e.code().as_raw(), e.message()),
    }
}

pub fn err(code: ErrorCode, msg: impl Into<String>) -> Error {
    Error::new(code, msg)
}

/// `validation failure: NULL == Name` (LLVM's wording) as INVALID_NULL_HANDLE.
pub fn null_handle(name: &str) -> Error {
    Error::new(
        ErrorCode::InvalidNullHandle,
        format!("validation failure: NULL == {name}"),
    )
}

/// `validation failure: NULL == Name` as INVALID_NULL_POINTER.
pub fn null_pointer(name: &str) -> Error {
    Error::new(
        ErrorCode::InvalidNullPointer,
        format!("validation failure: NULL == {name}"),
    )
}

pub fn uninitialized() -> Error {
    Error::new(
        ErrorCode::Uninitialized,
        "liboffload has not been initialized - please call olInit before using this API",
    )
}

/// Return INVALID_NULL_HANDLE when `p` is null.
pub fn check_handle<T>(p: *const T, name: &str) -> OlResult {
    if p.is_null() {
        Err(null_handle(name))
    } else {
        Ok(())
    }
}

/// Return INVALID_NULL_POINTER when `p` is null.
pub fn check_ptr<T>(p: *const T, name: &str) -> OlResult {
    if p.is_null() {
        Err(null_pointer(name))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn interned_results_are_shared_and_stable() {
        let a = intern(8, "too small");
        let b = intern(8, "too small");
        let c = intern(9, "too small");
        assert_eq!(a, b);
        assert_ne!(a, c);
        // SAFETY: interned results live forever.
        let s = unsafe { std::ffi::CStr::from_ptr((*a).details) };
        assert_eq!(s.to_str().unwrap(), "too small");
        assert!(to_result(&Ok(())).is_null());
    }
}
