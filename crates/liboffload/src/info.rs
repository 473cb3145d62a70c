//! The info queries: `olGet{Platform,Device,Queue,Event,Symbol,Mem}Info[Size]`.
//!
//! Each query computes a typed [`Value`] and delivers it either as its size
//! (the `...Size` form) or as bytes into the caller's buffer, which must be
//! at least that large (`OL_ERRC_INVALID_SIZE` otherwise). Strings are
//! NUL-terminated and their size counts the NUL. Unknown enumerators are
//! `OL_ERRC_INVALID_ENUMERATION`. Checks run in LLVM's order: initialised,
//! `PropSize == 0`, null handle, null output pointer, handle validity,
//! enumerator, size.

use std::ffi::c_void;

use crate::abi;
use crate::error::{check_handle, check_ptr, err, ErrorCode, OlResult};
use crate::handles::{context, Context, Device, DeviceKind, SymbolKind};
use crate::types::*;
use offload_core::facts::{self, VirtualHost};

/// One info value, in the representation the header documents.
pub enum Value {
    U32(u32),
    U64(u64),
    Usize(usize),
    Ptr(usize),
    Bool(bool),
    Str(String),
    Dims([u32; 3]),
}

impl Value {
    /// Call `f` with the value's bytes (no allocation for scalars).
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Value::U32(v) => f(&v.to_ne_bytes()),
            Value::U64(v) => f(&v.to_ne_bytes()),
            Value::Usize(v) | Value::Ptr(v) => f(&v.to_ne_bytes()),
            Value::Bool(b) => f(&[*b as u8]),
            Value::Str(s) => {
                let mut v = Vec::with_capacity(s.len() + 1);
                v.extend(s.bytes().filter(|&b| b != 0));
                v.push(0);
                f(&v)
            }
            Value::Dims(d) => {
                let mut b = [0u8; 12];
                for (i, x) in d.iter().enumerate() {
                    b[i * 4..i * 4 + 4].copy_from_slice(&x.to_ne_bytes());
                }
                f(&b)
            }
        }
    }
    fn size(&self) -> usize {
        match self {
            Value::U32(_) => 4,
            Value::U64(_) | Value::Usize(_) | Value::Ptr(_) => 8,
            Value::Bool(_) => 1,
            Value::Str(s) => s.bytes().filter(|&b| b != 0).count() + 1,
            Value::Dims(_) => 12,
        }
    }
}

/// Where a query's answer goes: the caller's output argument, which the
/// (unsafe) constructors vouch for, so that delivering is safe.
#[derive(Clone, Copy)]
pub struct Out(Target);

#[derive(Clone, Copy)]
enum Target {
    Size(*mut usize),
    Value { size: usize, ptr: *mut c_void },
}

impl Out {
    /// The `...InfoSize` form: the size goes to `ptr`.
    ///
    /// # Safety
    /// `ptr`, when not null, is writable for one `size_t` until the query
    /// returns.
    pub unsafe fn size(ptr: *mut usize) -> Out {
        Out(Target::Size(ptr))
    }
    /// The value form: the value goes to `ptr`, which holds `size` bytes.
    ///
    /// # Safety
    /// `ptr`, when not null, is writable for `size` bytes until the query
    /// returns.
    pub unsafe fn value(size: usize, ptr: *mut c_void) -> Out {
        Out(Target::Value { size, ptr })
    }

    /// Validate the output arguments (before the handle is looked up).
    fn check_args(self) -> OlResult {
        match self.0 {
            Target::Size(p) => check_ptr(p, "PropSizeRet"),
            Target::Value { ptr, .. } => check_ptr(ptr, "PropValue"),
        }
    }
    fn check_size(self) -> OlResult {
        match self.0 {
            Target::Value { size: 0, .. } => Err(err(
                ErrorCode::InvalidSize,
                "validation failure: PropSize == 0",
            )),
            _ => Ok(()),
        }
    }
    /// Write `value` (or its size) to the caller, after
    /// [`Out::check_args`] (the pointer is not null).
    #[inline(always)]
    fn deliver(self, value: Value, prop: &str) -> OlResult {
        self.check_args()?;
        match self.0 {
            Target::Size(p) => {
                // SAFETY: not null (checked above) and writable for a size_t
                // (the constructor's contract).
                unsafe { abi::write_unaligned(p, value.size()) };
                Ok(())
            }
            Target::Value { size, ptr } => {
                value.with_bytes(|bytes| {
                    if size < bytes.len() {
                        return Err(err(
                            ErrorCode::InvalidSize,
                            format!(
                                "provided size is invalid: {prop} needs {} bytes, PropSize is {size}",
                                bytes.len()
                            ),
                        ));
                    }
                    // SAFETY: not null (checked above); the caller's buffer
                    // holds `size >= bytes.len()` bytes (the constructor's
                    // contract) and is not our `bytes`.
                    unsafe { abi::write_bytes(ptr, bytes) };
                    Ok(())
                })
            }
        }
    }
}

fn bad_enum(what: &str, v: u32) -> crate::error::Error {
    err(
        ErrorCode::InvalidEnumeration,
        format!("{what} enum '{v}' is invalid"),
    )
}

// ---------------------------------------------------------------- platform

pub fn platform_info(h: ol_platform_handle_t, prop: ol_platform_info_t, out: Out) -> OlResult {
    let ctx = context()?;
    out.check_size()?;
    check_handle(h, "Platform")?;
    out.check_args()?;
    let p = ctx.platform(h)?;
    let v = match prop {
        ol_platform_info_t::OL_PLATFORM_INFO_NAME => Value::Str(p.name.clone()),
        ol_platform_info_t::OL_PLATFORM_INFO_VENDOR_NAME => Value::Str(p.vendor.clone()),
        ol_platform_info_t::OL_PLATFORM_INFO_VERSION => Value::Str(p.version.clone()),
        ol_platform_info_t::OL_PLATFORM_INFO_BACKEND => Value::U32(p.backend.0),
        _ => return Err(bad_enum("getPlatformInfo", prop.0)),
    };
    out.deliver(v, prop.name().unwrap_or("?"))
}

// ---------------------------------------------------------------- device

#[inline(always)]
fn device_value(ctx: &Context, d: &Device, prop: ol_device_info_t) -> OlResult<Value> {
    use ol_device_info_t as P;
    let widths = |i: usize| Value::U32(offload_core::facts::host_native_vector_widths()[i]);
    let v = match &d.kind {
        DeviceKind::Plugin { core, .. } => {
            let info = core.info();
            let max_work = |g: u32, n: u32| (g as u64 * n as u64).min(u32::MAX as u64) as u32;
            match prop {
                P::OL_DEVICE_INFO_TYPE => Value::U32(info.device_type as u32),
                P::OL_DEVICE_INFO_PLATFORM => Value::Ptr(ctx.platform_handle(d.platform) as usize),
                P::OL_DEVICE_INFO_NAME => Value::Str(info.name.clone()),
                P::OL_DEVICE_INFO_PRODUCT_NAME => Value::Str(info.product_name.clone()),
                P::OL_DEVICE_INFO_UID => Value::Str(info.uid.clone()),
                P::OL_DEVICE_INFO_VENDOR => Value::Str(info.vendor.clone()),
                P::OL_DEVICE_INFO_DRIVER_VERSION => Value::Str(info.driver_version.clone()),
                P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE => Value::U32(info.max_group_size),
                P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION => {
                    Value::Dims(info.max_group_size_per_dim)
                }
                P::OL_DEVICE_INFO_MAX_WORK_SIZE => {
                    Value::U32(max_work(info.max_num_groups[0], info.max_group_size))
                }
                P::OL_DEVICE_INFO_MAX_WORK_SIZE_PER_DIMENSION => Value::Dims(
                    [0, 1, 2]
                        .map(|i| max_work(info.max_num_groups[i], info.max_group_size_per_dim[i])),
                ),
                P::OL_DEVICE_INFO_VENDOR_ID => {
                    Value::U32(offload_core::facts::cpu_vendor_id(&info.vendor))
                }
                P::OL_DEVICE_INFO_NUM_COMPUTE_UNITS => Value::U32(info.compute_units),
                P::OL_DEVICE_INFO_MAX_CLOCK_FREQUENCY => Value::U32(info.clock_mhz.max(1)),
                // No unprivileged source for a CPU's memory clock: report the
                // core clock (nonzero, as LLVM's unittests require).
                P::OL_DEVICE_INFO_MEMORY_CLOCK_RATE => Value::U32(info.clock_mhz.max(1)),
                P::OL_DEVICE_INFO_ADDRESS_BITS => Value::U32(info.address_bits),
                P::OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE => Value::U64(info.global_memory_bytes),
                P::OL_DEVICE_INFO_GLOBAL_MEM_SIZE => Value::U64(info.global_memory_bytes),
                P::OL_DEVICE_INFO_WORK_GROUP_LOCAL_MEM_SIZE => Value::U64(info.group_memory_bytes),
                P::OL_DEVICE_INFO_SINGLE_FP_CONFIG | P::OL_DEVICE_INFO_DOUBLE_FP_CONFIG => {
                    Value::U32(if core.shares_host_memory() {
                        fp::FULL_IEEE
                    } else {
                        0
                    })
                }
                P::OL_DEVICE_INFO_HALF_FP_CONFIG => Value::U32(0),
                _ => return device_value_common(prop, widths),
            }
        }
        DeviceKind::Host => {
            let host = || VirtualHost::of(ctx.runtime);
            match prop {
                P::OL_DEVICE_INFO_TYPE => Value::U32(ol_device_type_t::OL_DEVICE_TYPE_HOST.0),
                P::OL_DEVICE_INFO_PLATFORM => Value::Ptr(ctx.platform_handle(d.platform) as usize),
                P::OL_DEVICE_INFO_NAME | P::OL_DEVICE_INFO_PRODUCT_NAME => {
                    Value::Str(facts::HOST_DEVICE_NAME.to_string())
                }
                P::OL_DEVICE_INFO_UID => Value::Str(facts::HOST_DEVICE_UID.to_string()),
                P::OL_DEVICE_INFO_VENDOR => Value::Str(host().vendor),
                P::OL_DEVICE_INFO_DRIVER_VERSION => Value::Str(facts::driver_version()),
                P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE => Value::U32(1),
                P::OL_DEVICE_INFO_MAX_WORK_GROUP_SIZE_PER_DIMENSION => Value::Dims([1, 1, 1]),
                P::OL_DEVICE_INFO_MAX_WORK_SIZE => Value::U32(u32::MAX),
                P::OL_DEVICE_INFO_MAX_WORK_SIZE_PER_DIMENSION => Value::Dims([u32::MAX; 3]),
                P::OL_DEVICE_INFO_VENDOR_ID => Value::U32(0),
                P::OL_DEVICE_INFO_NUM_COMPUTE_UNITS => Value::U32(1),
                P::OL_DEVICE_INFO_MAX_CLOCK_FREQUENCY | P::OL_DEVICE_INFO_MEMORY_CLOCK_RATE => {
                    Value::U32(host().clock_mhz.max(1))
                }
                P::OL_DEVICE_INFO_ADDRESS_BITS => Value::U32(usize::BITS),
                P::OL_DEVICE_INFO_MAX_MEM_ALLOC_SIZE | P::OL_DEVICE_INFO_GLOBAL_MEM_SIZE => {
                    Value::U64(host().memory_bytes)
                }
                P::OL_DEVICE_INFO_WORK_GROUP_LOCAL_MEM_SIZE => Value::U64(0),
                P::OL_DEVICE_INFO_SINGLE_FP_CONFIG | P::OL_DEVICE_INFO_DOUBLE_FP_CONFIG => {
                    Value::U32(fp::FULL_IEEE)
                }
                P::OL_DEVICE_INFO_HALF_FP_CONFIG => Value::U32(0),
                _ => return device_value_common(prop, widths),
            }
        }
    };
    Ok(v)
}

#[inline(always)]
fn device_value_common(prop: ol_device_info_t, widths: impl Fn(usize) -> Value) -> OlResult<Value> {
    use ol_device_info_t as P;
    Ok(match prop {
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_CHAR => widths(0),
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_SHORT => widths(1),
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_INT => widths(2),
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_LONG => widths(3),
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_FLOAT => widths(4),
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_DOUBLE => widths(5),
        P::OL_DEVICE_INFO_NATIVE_VECTOR_WIDTH_HALF => widths(6),
        _ => return Err(bad_enum("getDeviceInfo", prop.0)),
    })
}

pub fn device_info(h: ol_device_handle_t, prop: ol_device_info_t, out: Out) -> OlResult {
    let ctx = context()?;
    out.check_size()?;
    check_handle(h, "Device")?;
    out.check_args()?;
    let d = ctx.device(h, "Device")?;
    let v = device_value(ctx, d, prop)?;
    out.deliver(v, prop.name().unwrap_or("?"))
}

// ---------------------------------------------------------------- queue / event

pub fn queue_info(h: ol_queue_handle_t, prop: ol_queue_info_t, out: Out) -> OlResult {
    let ctx = context()?;
    out.check_size()?;
    check_handle(h, "Queue")?;
    out.check_args()?;
    let q = ctx.queue(h)?;
    let v = match prop {
        ol_queue_info_t::OL_QUEUE_INFO_DEVICE => Value::Ptr(ctx.device_handle(q.device) as usize),
        ol_queue_info_t::OL_QUEUE_INFO_EMPTY => Value::Bool(q.core.is_idle()?),
        _ => return Err(bad_enum("getQueueInfo", prop.0)),
    };
    out.deliver(v, prop.name().unwrap_or("?"))
}

pub fn event_info(h: ol_event_handle_t, prop: ol_event_info_t, out: Out) -> OlResult {
    let ctx = context()?;
    out.check_size()?;
    check_handle(h, "Event")?;
    out.check_args()?;
    let e = ctx.event(h)?;
    let v = match prop {
        ol_event_info_t::OL_EVENT_INFO_QUEUE => Value::Ptr(e.queue),
        ol_event_info_t::OL_EVENT_INFO_IS_COMPLETE => Value::Bool(e.core.is_complete()?),
        _ => return Err(bad_enum("getEventInfo", prop.0)),
    };
    out.deliver(v, prop.name().unwrap_or("?"))
}

// ---------------------------------------------------------------- symbol

pub fn symbol_info(h: ol_symbol_handle_t, prop: ol_symbol_info_t, out: Out) -> OlResult {
    let ctx = context()?;
    out.check_size()?;
    check_handle(h, "Symbol")?;
    out.check_args()?;
    let s = ctx.symbol(h, "Symbol")?;
    let not_global = || {
        err(
            ErrorCode::SymbolKind,
            format!(
                "{} is not applicable to symbol {h:p}: it is a kernel, not a global variable",
                prop.name().unwrap_or("?")
            ),
        )
    };
    let v = match prop {
        ol_symbol_info_t::OL_SYMBOL_INFO_KIND => Value::U32(s.kind_value().0),
        ol_symbol_info_t::OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS => match s.kind {
            SymbolKind::Global { addr, .. } => Value::Ptr(addr.0 as usize),
            SymbolKind::Kernel(_) => return Err(not_global()),
        },
        ol_symbol_info_t::OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE => match s.kind {
            SymbolKind::Global { size, .. } => Value::Usize(size as usize),
            SymbolKind::Kernel(_) => return Err(not_global()),
        },
        _ => return Err(bad_enum("getSymbolInfo", prop.0)),
    };
    out.deliver(v, prop.name().unwrap_or("?"))
}

// ---------------------------------------------------------------- memory

pub fn mem_info(ptr: *const c_void, prop: ol_mem_info_t, out: Out) -> OlResult {
    let ctx = context()?;
    out.check_size()?;
    check_ptr(ptr, "Ptr")?;
    out.check_args()?;
    let found = ctx
        .find_allocation(ptr as usize)
        .filter(|(_, a)| matches!(a.origin, offload_core::Origin::Alloc(_)));
    let (device, a) = found.ok_or_else(|| {
        err(
            ErrorCode::NotFound,
            format!("allocated memory information not found: {ptr:p} is not inside an olMemAlloc allocation"),
        )
    })?;
    let v = match prop {
        ol_mem_info_t::OL_MEM_INFO_DEVICE => Value::Ptr(ctx.device_handle(device) as usize),
        ol_mem_info_t::OL_MEM_INFO_BASE => Value::Ptr(a.base.0 as usize),
        ol_mem_info_t::OL_MEM_INFO_SIZE => Value::Usize(a.size),
        ol_mem_info_t::OL_MEM_INFO_TYPE => Value::U32(a.kind as u32),
        _ => return Err(bad_enum("getMemInfo", prop.0)),
    };
    out.deliver(v, prop.name().unwrap_or("?"))
}
