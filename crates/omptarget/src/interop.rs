//! OpenMP interop objects (`#pragma omp interop`, `omp_get_interop_*`).
//!
//! An interop object of this runtime exposes the liboffload (ol*) API of its
//! OpenMP device: the liboffload code is linked into this library (crate
//! `liboffload`, its symbols kept local by the version script), initialised
//! once when the first object is made (`liboffload::handles::embedded`, a
//! Rust call: its context is built over this process's one core runtime),
//! and OpenMP device N gets the handle of the same core device, found by
//! identity (the initial device is liboffload's HOST device). The object's foreign runtime is therefore
//! "liboffload":
//!
//! | property | type | value |
//! |---|---|---|
//! | `fr_id` | int | `OMPX_IFR_LIBOFFLOAD` (0x100) |
//! | `fr_name` | str | `"liboffload"` |
//! | `vendor` / `vendor_name` | int / str | 9 / `"llvm"` (the OpenMP vendor id LLVM's runtime reports) |
//! | `device_num` | int | the OpenMP device number |
//! | `platform` | ptr | `ol_platform_handle_t` of the device |
//! | `device` | ptr | `ol_device_handle_t` |
//! | `device_context` | ptr | none (`omp_irc_no_value`): liboffload has no contexts |
//! | `targetsync` | ptr | `ol_queue_handle_t` (`init(targetsync: ...)`), else `omp_irc_no_value` |
//! | `OMPX_IPR_OFFLOAD_TABLE` (0) | ptr | `const offload_interop_table_t *` (include/offload/interop.h) |
//!
//! `interop use` synchronises the targetsync queue (`olSyncQueue`), with or
//! without `nowait` (completing early is always allowed); `depend` clauses
//! first wait for the sibling tasks they name (`__kmpc_omp_wait_deps`).
//! `interop destroy` synchronises and destroys the queue. Objects are
//! looked up in a registry before use: a dangling or foreign pointer is an
//! error code (`omp_irc_other`), never a crash.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, OnceLock};

use ol::interop_table::{offload_interop_table_t, OMPX_IFR_LIBOFFLOAD};
use ol::types::*;
use LLVMOffload as ol;

use crate::{devices, libomp, state};

// ------------------------------------------------------------ OpenMP constants

pub const IPR_FR_ID: i32 = -1;
pub const IPR_FR_NAME: i32 = -2;
pub const IPR_VENDOR: i32 = -3;
pub const IPR_VENDOR_NAME: i32 = -4;
pub const IPR_DEVICE_NUM: i32 = -5;
pub const IPR_PLATFORM: i32 = -6;
pub const IPR_DEVICE: i32 = -7;
pub const IPR_DEVICE_CONTEXT: i32 = -8;
pub const IPR_TARGETSYNC: i32 = -9;
pub const IPR_FIRST: i32 = -9;
/// `OMPX_IPR_OFFLOAD_TABLE`.
pub const IPR_OFFLOAD_TABLE: i32 = ol::interop_table::OMPX_IPR_OFFLOAD_TABLE;
/// Implementation-defined properties: 0..NUM_PROPERTIES.
pub const NUM_PROPERTIES: i32 = 1;

pub const IRC_NO_VALUE: i32 = 1;
pub const IRC_SUCCESS: i32 = 0;
pub const IRC_EMPTY: i32 = -1;
pub const IRC_OUT_OF_RANGE: i32 = -2;
pub const IRC_TYPE_INT: i32 = -3;
pub const IRC_TYPE_PTR: i32 = -4;
pub const IRC_TYPE_STR: i32 = -5;
pub const IRC_OTHER: i32 = -6;

/// OpenMP Additional Definitions' vendor id of LLVM.
const VENDOR_LLVM: isize = 9;

/// What an interop object was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Target,
    TargetSync,
}

impl Kind {
    /// The interop type argument of `__tgt_interop_init` as clang-22 emits
    /// it (`llvm::omp::OMPInteropType`: 1 target, 2 targetsync).
    pub fn from_clang(t: i32) -> Kind {
        if t == 2 {
            Kind::TargetSync
        } else {
            Kind::Target
        }
    }
    /// The interop type of `__tgt_interop_get` (LLVM's runtime enum
    /// `kmp_interop_type_t`: 0 target, 1 targetsync).
    pub fn from_kmp(t: i32) -> Kind {
        if t == 1 {
            Kind::TargetSync
        } else {
            Kind::Target
        }
    }
}

pub type CompletionCb = unsafe extern "C" fn(interop: *mut c_void, data: *mut c_void);

/// One interop object; C sees the address of its box.
pub struct Interop {
    kind: Kind,
    device_num: i32,
    table: offload_interop_table_t,
    /// ompx_interop_add_completion_callback: run (and dropped) at the next
    /// synchronisation of the object.
    callbacks: Vec<(CompletionCb, usize)>,
    /// (gtid) for runtime-owned objects of `__tgt_interop_get(implicit)`.
    owner: Option<i32>,
}

struct Live {
    objects: HashMap<usize, Box<Interop>>,
    /// Runtime-owned (implicit) objects by (kind, device, gtid).
    implicit: HashMap<(bool, i32, i32), usize>,
}

static LIVE: Mutex<Option<Live>> = Mutex::new(None);

fn with_live<R>(f: impl FnOnce(&mut Live) -> R) -> R {
    let mut g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let live = g.get_or_insert_with(|| Live {
        objects: HashMap::new(),
        implicit: HashMap::new(),
    });
    f(live)
}

// ------------------------------------------------------------ liboffload devices

/// An ol* call's failure as text (None: success).
fn ol_error(r: ol_result_t) -> Option<String> {
    if r.is_null() {
        return None;
    }
    // SAFETY: a non-null result points at liboffload's immortal error struct.
    let e = unsafe { &*r };
    let details = if e.details.is_null() {
        String::new()
    } else {
        // SAFETY: NUL-terminated details string owned by liboffload.
        unsafe { CStr::from_ptr(e.details) }
            .to_string_lossy()
            .into_owned()
    };
    Some(format!("error {}: {details}", e.code))
}

/// The ol* handles (platform, device) of OpenMP device `device` (`n`: the
/// initial device, liboffload's host device), through liboffload's own
/// context over this process's runtime: the same core device, found by
/// identity.
fn ol_handles(
    device: usize,
    n: usize,
) -> Result<(ol_platform_handle_t, ol_device_handle_t), String> {
    let ctx = ol::handles::embedded().map_err(|e| format!("liboffload unavailable: {e}"))?;
    if device == n {
        return Ok(ctx.host_handles());
    }
    let core = &state::state().devices[device].dev;
    ctx.handles_of(core)
        .ok_or_else(|| format!("no liboffload device for OpenMP device {device}"))
}

// ------------------------------------------------------------ dependences

/// libomp's `kmp_depend_info_t`.
#[repr(C)]
pub struct DependInfo {
    pub base: usize,
    pub len: usize,
    pub flags: u8,
}

/// Wait for the sibling tasks that `deps` order this construct after.
/// # Safety
/// `loc` is null or clang's `ident_t`; each dependence list is null or holds
/// its count of libomp `kmp_depend_info` records, valid for the call.
pub unsafe fn wait_deps(
    loc: *const c_void,
    gtid: i32,
    (ndeps, deps): (i32, *const DependInfo),
    (nnoalias, noalias): (i32, *const DependInfo),
) {
    let (ndeps, deps) = if deps.is_null() {
        (0, deps)
    } else {
        (ndeps.max(0), deps)
    };
    let (nnoalias, noalias) = if noalias.is_null() {
        (0, noalias)
    } else {
        (nnoalias.max(0), noalias)
    };
    if ndeps == 0 && nnoalias == 0 {
        return;
    }
    type WaitDeps =
        unsafe extern "C" fn(*const c_void, i32, i32, *const DependInfo, i32, *const DependInfo);
    static F: OnceLock<usize> = OnceLock::new();
    let f = *F.get_or_init(|| libomp::dlsym_default(c"__kmpc_omp_wait_deps") as usize);
    if f == 0 {
        return;
    }
    // SAFETY: libomp's __kmpc_omp_wait_deps with its exported signature;
    // the list comes from the compiler-generated call.
    unsafe {
        let wait: WaitDeps = std::mem::transmute::<usize, WaitDeps>(f);
        wait(loc, gtid, ndeps, deps, nnoalias, noalias);
    }
}

// ------------------------------------------------------------ objects

/// Create an interop object on OpenMP device `device` (-1: the default
/// device; the initial device is allowed). NULL (`omp_interop_none`) when
/// offloading is disabled, the device does not exist, or liboffload cannot
/// serve it.
pub fn create(kind: Kind, device: i64, implicit_gtid: Option<i32>) -> *mut c_void {
    if devices::offload_disabled() {
        return std::ptr::null_mut();
    }
    let device = if device == -1 {
        libomp::default_device()
    } else {
        device
    };
    let n = devices::num_devices() as i64;
    if device < 0 || device > n {
        tracing::debug!(device, "interop: no such device");
        return std::ptr::null_mut();
    }
    if let Some(gtid) = implicit_gtid {
        let key = (kind == Kind::TargetSync, device as i32, gtid);
        if let Some(obj) = with_live(|l| l.implicit.get(&key).copied()) {
            return obj as *mut c_void;
        }
    }
    let (platform, dev) = match ol_handles(device as usize, n as usize) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(device, error = e, "interop: no liboffload device");
            return std::ptr::null_mut();
        }
    };
    let mut queue: ol_queue_handle_t = std::ptr::null_mut();
    if kind == Kind::TargetSync {
        if let Some(e) =
            // SAFETY: a live device handle of liboffload's context, an out
            // pointer.
            ol_error(unsafe { ol::olCreateQueue(dev, &mut queue) })
        {
            tracing::warn!(device, error = e, "interop: olCreateQueue failed");
            return std::ptr::null_mut();
        }
    }
    let obj = Box::new(Interop {
        kind,
        device_num: device as i32,
        table: offload_interop_table_t::new(platform, dev, queue),
        callbacks: Vec::new(),
        owner: implicit_gtid,
    });
    let addr = &*obj as *const Interop as usize;
    with_live(|l| {
        l.objects.insert(addr, obj);
        if let Some(gtid) = implicit_gtid {
            l.implicit
                .insert((kind == Kind::TargetSync, device as i32, gtid), addr);
        }
    });
    addr as *mut c_void
}

/// Wait for everything enqueued on the object's targetsync queue, then run
/// its completion callbacks. OFFLOAD_SUCCESS (0) or OFFLOAD_FAIL (~0).
// `obj` is only a key: it is looked up among the live objects before
// anything else, and callbacks get back the pointer they were registered for.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn sync(obj: *mut c_void) -> i32 {
    let found = with_live(|l| {
        l.objects
            .get_mut(&(obj as usize))
            .map(|o| (o.table.queue as usize, std::mem::take(&mut o.callbacks)))
    });
    let Some((queue, callbacks)) = found else {
        return !0;
    };
    let mut rc = 0;
    if queue != 0 {
        // SAFETY: the object's own live queue.
        if let Some(e) = ol_error(unsafe { ol::olSyncQueue(queue as ol_queue_handle_t) }) {
            crate::msg::error(&format!(
                "interop use: synchronising the targetsync queue failed: {e}"
            ));
            rc = !0;
        }
    }
    for (cb, data) in callbacks {
        // SAFETY: a callback registered by the program for this object.
        unsafe { cb(obj, data as *mut c_void) };
    }
    rc
}

/// Synchronise and free the object. OFFLOAD_SUCCESS (0) or OFFLOAD_FAIL (~0).
pub fn release(obj: *mut c_void) -> i32 {
    if obj.is_null() {
        return !0;
    }
    let known = with_live(|l| l.objects.contains_key(&(obj as usize)));
    if !known {
        return !0;
    }
    let mut rc = sync(obj);
    let removed = with_live(|l| {
        let o = l.objects.remove(&(obj as usize))?;
        if let Some(gtid) = o.owner {
            l.implicit
                .remove(&(o.kind == Kind::TargetSync, o.device_num, gtid));
        }
        Some(o)
    });
    let Some(o) = removed else {
        return !0; // released concurrently by another thread
    };
    if !o.table.queue.is_null() {
        // SAFETY: the object's own queue, idle after the sync above.
        if let Some(e) = ol_error(unsafe { ol::olDestroyQueue(o.table.queue) }) {
            crate::msg::error(&format!(
                "interop destroy: destroying the targetsync queue failed: {e}"
            ));
            rc = !0;
        }
    }
    rc
}

/// ompx_interop_add_completion_callback.
pub fn add_completion_callback(
    obj: *mut c_void,
    cb: Option<CompletionCb>,
    data: *mut c_void,
) -> i32 {
    let Some(cb) = cb else {
        return IRC_OTHER;
    };
    with_live(|l| match l.objects.get_mut(&(obj as usize)) {
        Some(o) => {
            o.callbacks.push((cb, data as usize));
            IRC_SUCCESS
        }
        None => IRC_OTHER,
    })
}

// ------------------------------------------------------------ properties

enum Value {
    Int(isize),
    Ptr(*mut c_void),
    Str(&'static CStr),
    None,
}

/// The result type of a property (its `omp_irc_type_*` code).
fn type_code(prop: i32) -> i32 {
    match prop {
        IPR_FR_ID | IPR_VENDOR | IPR_DEVICE_NUM => IRC_TYPE_INT,
        IPR_FR_NAME | IPR_VENDOR_NAME => IRC_TYPE_STR,
        _ => IRC_TYPE_PTR,
    }
}

fn value(o: &Interop, prop: i32) -> Value {
    match prop {
        IPR_FR_ID => Value::Int(OMPX_IFR_LIBOFFLOAD),
        IPR_FR_NAME => Value::Str(c"liboffload"),
        IPR_VENDOR => Value::Int(VENDOR_LLVM),
        IPR_VENDOR_NAME => Value::Str(c"llvm"),
        IPR_DEVICE_NUM => Value::Int(o.device_num as isize),
        IPR_PLATFORM => Value::Ptr(o.table.platform as *mut c_void),
        IPR_DEVICE => Value::Ptr(o.table.device as *mut c_void),
        IPR_DEVICE_CONTEXT => Value::None,
        IPR_TARGETSYNC if o.kind == Kind::TargetSync => Value::Ptr(o.table.queue as *mut c_void),
        IPR_TARGETSYNC => Value::None,
        IPR_OFFLOAD_TABLE => Value::Ptr(&o.table as *const offload_interop_table_t as *mut c_void),
        _ => Value::None,
    }
}

fn in_range(prop: i32, num_props: i32) -> bool {
    (IPR_FIRST..num_props).contains(&prop)
}

/// Look a property up for `omp_get_interop_{int,ptr,str}`: the value, or
/// the return code to report.
fn query(obj: *const c_void, prop: i32, want: i32) -> Result<Value, i32> {
    if obj.is_null() {
        return Err(IRC_EMPTY);
    }
    with_live(|l| {
        let o = l.objects.get(&(obj as usize)).ok_or(IRC_OTHER)?;
        if !in_range(prop, NUM_PROPERTIES) {
            return Err(IRC_OUT_OF_RANGE);
        }
        let code = type_code(prop);
        if code != want {
            return Err(code);
        }
        match value(o, prop) {
            Value::None => Err(IRC_NO_VALUE),
            v => Ok(v),
        }
    })
}

fn set_rc(rc: *mut i32, v: i32) {
    if !rc.is_null() {
        // SAFETY: the caller's return-code slot.
        unsafe { *rc = v };
    }
}

pub fn get_int(obj: *const c_void, prop: i32, rc: *mut i32) -> isize {
    match query(obj, prop, IRC_TYPE_INT) {
        Ok(Value::Int(v)) => {
            set_rc(rc, IRC_SUCCESS);
            v
        }
        Ok(_) => {
            set_rc(rc, IRC_OTHER);
            0
        }
        Err(code) => {
            set_rc(rc, code);
            0
        }
    }
}

pub fn get_ptr(obj: *const c_void, prop: i32, rc: *mut i32) -> *mut c_void {
    match query(obj, prop, IRC_TYPE_PTR) {
        Ok(Value::Ptr(v)) => {
            set_rc(rc, IRC_SUCCESS);
            v
        }
        Ok(_) => {
            set_rc(rc, IRC_OTHER);
            std::ptr::null_mut()
        }
        Err(code) => {
            set_rc(rc, code);
            std::ptr::null_mut()
        }
    }
}

pub fn get_str(obj: *const c_void, prop: i32, rc: *mut i32) -> *const c_char {
    match query(obj, prop, IRC_TYPE_STR) {
        Ok(Value::Str(v)) => {
            set_rc(rc, IRC_SUCCESS);
            v.as_ptr()
        }
        Ok(_) => {
            set_rc(rc, IRC_OTHER);
            std::ptr::null()
        }
        Err(code) => {
            set_rc(rc, code);
            std::ptr::null()
        }
    }
}

/// omp_get_num_interop_properties: 1 (OMPX_IPR_OFFLOAD_TABLE) for a live
/// object, 0 otherwise.
pub fn num_properties(obj: *const c_void) -> i32 {
    if obj.is_null() {
        return 0;
    }
    if with_live(|l| l.objects.contains_key(&(obj as usize))) {
        NUM_PROPERTIES
    } else {
        0
    }
}

pub fn name(obj: *const c_void, prop: i32) -> *const c_char {
    if !in_range(prop, num_properties(obj)) {
        return std::ptr::null();
    }
    let s: &'static CStr = match prop {
        IPR_FR_ID => c"fr_id",
        IPR_FR_NAME => c"fr_name",
        IPR_VENDOR => c"vendor",
        IPR_VENDOR_NAME => c"vendor_name",
        IPR_DEVICE_NUM => c"device_num",
        IPR_PLATFORM => c"platform",
        IPR_DEVICE => c"device",
        IPR_DEVICE_CONTEXT => c"device_context",
        IPR_TARGETSYNC => c"targetsync",
        _ => c"ompx_offload_table",
    };
    s.as_ptr()
}

pub fn type_desc(obj: *const c_void, prop: i32) -> *const c_char {
    if !in_range(prop, num_properties(obj)) {
        return std::ptr::null();
    }
    let s: &'static CStr = match prop {
        IPR_FR_ID | IPR_VENDOR => c"intptr_t",
        IPR_FR_NAME | IPR_VENDOR_NAME => c"const char *",
        IPR_DEVICE_NUM => c"int",
        IPR_PLATFORM => c"ol_platform_handle_t",
        IPR_DEVICE => c"ol_device_handle_t",
        IPR_DEVICE_CONTEXT => c"void * (no value: liboffload has no device context)",
        IPR_TARGETSYNC => c"ol_queue_handle_t",
        _ => c"const offload_interop_table_t *",
    };
    s.as_ptr()
}

pub fn rc_desc(_obj: *const c_void, rc: i32) -> *const c_char {
    let s: &'static CStr = match rc {
        IRC_NO_VALUE => c"parameters valid, but the property has no value",
        IRC_SUCCESS => c"success",
        IRC_EMPTY => c"the interop object is omp_interop_none",
        IRC_OUT_OF_RANGE => c"property id out of range",
        IRC_TYPE_INT => c"the property is an integer: use omp_get_interop_int",
        IRC_TYPE_PTR => c"the property is a pointer: use omp_get_interop_ptr",
        IRC_TYPE_STR => c"the property is a string: use omp_get_interop_str",
        IRC_OTHER => c"not a live interop object of this runtime, or another error",
        _ => return std::ptr::null(),
    };
    s.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_ranges() {
        assert_eq!(Kind::from_clang(2), Kind::TargetSync);
        assert_eq!(Kind::from_clang(1), Kind::Target);
        assert_eq!(Kind::from_kmp(1), Kind::TargetSync);
        assert_eq!(Kind::from_kmp(0), Kind::Target);
        assert!(in_range(IPR_TARGETSYNC, 1) && in_range(IPR_OFFLOAD_TABLE, 1));
        assert!(!in_range(-10, 1) && !in_range(1, 1) && !in_range(0, 0));
        let mut rc = 7;
        assert_eq!(get_int(std::ptr::null(), IPR_FR_ID, &mut rc), 0);
        assert_eq!(rc, IRC_EMPTY);
        let bogus = 0x1000 as *const c_void;
        assert!(get_ptr(bogus, IPR_DEVICE, &mut rc).is_null());
        assert_eq!(rc, IRC_OTHER);
        assert!(name(std::ptr::null(), IPR_OFFLOAD_TABLE).is_null());
        assert!(!name(std::ptr::null(), IPR_FR_ID).is_null());
        assert!(rc_desc(std::ptr::null(), 42).is_null());
    }
}
