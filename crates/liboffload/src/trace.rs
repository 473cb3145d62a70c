//! `OFFLOAD_TRACE`: print every API call with its arguments and result to
//! stderr, in LLVM's format:
//!
//! ```text
//! ---> olGetDeviceInfo(.Device = 0x55.., .PropName = OL_DEVICE_INFO_TYPE, .PropSize = 4, .PropValue = 0x7ff..)-> OL_SUCCESS
//! ```
//!
//! Failing calls add the error details after the code. Any value other than
//! empty, `0`, `false` or `off` turns tracing on; it is read once.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::OlResult;
use crate::types::*;

/// 0 = not read yet, 1 = off, 2 = on.
static STATE: AtomicU8 = AtomicU8::new(0);

#[inline]
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var("OFFLOAD_TRACE").is_ok_and(|v| {
                let v = v.trim().to_ascii_lowercase();
                !(v.is_empty() || v == "0" || v == "false" || v == "off")
            });
            STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// How one argument is shown in a trace line.
pub trait TraceArg {
    fn trace(&self, out: &mut String);
}

impl<T> TraceArg for *const T {
    fn trace(&self, out: &mut String) {
        if self.is_null() {
            out.push_str("nullptr");
        } else {
            let _ = write!(out, "{:p}", *self);
        }
    }
}
impl<T> TraceArg for *mut T {
    fn trace(&self, out: &mut String) {
        (*self as *const T).trace(out)
    }
}
impl TraceArg for usize {
    fn trace(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}
impl TraceArg for u32 {
    fn trace(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}
impl TraceArg for ol_device_iterate_cb_t {
    fn trace(&self, out: &mut String) {
        let _ = write!(out, "{:#x}", self.map_or(0, |f| f as usize));
    }
}
impl TraceArg for ol_host_function_cb_t {
    fn trace(&self, out: &mut String) {
        let _ = write!(out, "{:#x}", self.map_or(0, |f| f as usize));
    }
}

macro_rules! trace_enum {
    ($($t:ty),*) => {$(
        impl TraceArg for $t {
            fn trace(&self, out: &mut String) {
                match self.name() {
                    Some(n) => out.push_str(n),
                    None => { let _ = write!(out, "unknown enumerator ({})", self.0); }
                }
            }
        }
    )*};
}
trace_enum!(
    ol_alloc_type_t,
    ol_device_info_t,
    ol_event_info_t,
    ol_mem_info_t,
    ol_platform_info_t,
    ol_queue_info_t,
    ol_symbol_info_t,
    ol_symbol_kind_t
);

/// Print the trace line of one finished call.
pub fn emit(name: &str, args: &[(&str, &dyn TraceArg)], result: &OlResult) {
    let mut line = format!("---> {name}(");
    for (i, (arg, value)) in args.iter().enumerate() {
        if i > 0 {
            line.push_str(", ");
        }
        let _ = write!(line, ".{arg} = ");
        value.trace(&mut line);
    }
    line.push_str(")-> ");
    match result {
        Ok(()) => line.push_str("OL_SUCCESS"),
        Err(e) => {
            let code = ol_errc_t(e.code().as_raw());
            let _ = write!(
                line,
                "{} ({})",
                code.name().unwrap_or("OL_ERRC_UNKNOWN"),
                e.message()
            );
        }
    }
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
