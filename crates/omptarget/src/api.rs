//! OpenMP device-memory API and LLVM extensions (reference 4.5).

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

use offload_core::{AllocKind, DevicePtr, Location};

use crate::addr::{HostAddr, HostRange};
use crate::device::DevState;
use crate::mapping::{Entry, Found, INF};
use crate::msg;
use crate::{devices, libomp, state};

pub fn initial_device() -> i64 {
    devices::num_devices() as i64
}

/// A device for an API call: Ok(None) = the initial device, Err = invalid.
#[allow(clippy::result_unit_err)]
pub fn api_device(dev: i64) -> Result<Option<&'static DevState>, ()> {
    let n = devices::num_devices() as i64;
    if dev == n {
        return Ok(None);
    }
    if dev < 0 || dev > n {
        return Err(());
    }
    let d = &state::state().devices[dev as usize];
    Ok(Some(d))
}

/// Like [`api_device`], but an out-of-range device is LLVM's fatal error
/// (every device-memory routine but `omp_get_mapped_ptr` behaves so).
pub fn checked_device(dev: i64) -> Option<&'static DevState> {
    match api_device(dev) {
        Ok(d) => d,
        Err(()) => {
            let n = devices::num_devices();
            msg::fatal(
                dev,
                &format!("\"invalid value\" device number '{dev}' out of range, only {n} devices available"),
            )
        }
    }
}

pub fn target_alloc(size: usize, dev: i64, kind: AllocKind) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    match checked_device(dev) {
        // SAFETY: plain malloc; a null result is returned as is.
        None => unsafe { libc::malloc(size) },
        Some(d) => d
            .dev
            .alloc(size, kind)
            .map(|p| p.0 as *mut c_void)
            .unwrap_or(std::ptr::null_mut()),
    }
}

/// # Safety
/// `p` is null or memory `omp_target_alloc` (or its `llvm_omp_*` forms)
/// gave for device `dev` and not yet freed.
pub unsafe fn target_free(p: *mut c_void, dev: i64) {
    if p.is_null() {
        return;
    }
    match checked_device(dev) {
        // SAFETY: `omp_target_free` on the initial device takes what
        // `omp_target_alloc` gave there, which is malloc'd memory (above).
        None => unsafe { libc::free(p) },
        Some(d) => {
            if d.dev.free(DevicePtr(p as u64)).is_err() {
                msg::fatal(
                    1,
                    "Failed to deallocate device ptr. Set OFFLOAD_TRACK_ALLOCATION_TRACES=1 to track allocations.",
                );
            }
        }
    }
}

/// Copy `len` bytes between any two devices (host = initial device).
///
/// # Safety
/// Where a side is the initial device, its address names `len` readable
/// (source) or writable (destination) bytes of host memory; device sides
/// are checked by the core.
pub unsafe fn memcpy(dst: u64, src: u64, len: usize, dst_dev: i64, src_dev: i64) -> i32 {
    if len == 0 {
        return 0;
    }
    let (dd, sd) = (checked_device(dst_dev), checked_device(src_dev));
    if msg::info_on(msg::INFO_DATA_TRANSFER) {
        match (dd, sd) {
            (Some(d), None) => msg::dev_info(
                d.id,
                &format!(
                    "Copying data from host to device, HstPtr={}, TgtPtr={}, Size={len}, Name={}",
                    msg::P(src),
                    msg::P(dst),
                    name_by_tgt(d, DevicePtr(dst))
                ),
            ),
            (None, Some(s)) => msg::dev_info(
                s.id,
                &format!(
                    "Copying data from device to host, TgtPtr={}, HstPtr={}, Size={len}, Name={}",
                    msg::P(src),
                    msg::P(dst),
                    name_by_tgt(s, DevicePtr(src))
                ),
            ),
            _ => {}
        }
    }
    // One copy decision for every face: the core's.
    let at = |d: Option<&DevState>, p: u64| match d {
        Some(d) => Location::Device(d.id, DevicePtr(p)),
        None => Location::Host(p as *const u8),
    };
    // SAFETY: host sides name `len` valid bytes (the caller's guarantee);
    // device ranges are checked by the core.
    let ok = unsafe {
        offload_plugins::runtime()
            .copy(at(dd, dst), at(sd, src), len, None)
            .is_ok()
    };
    if ok {
        0
    } else {
        -1
    }
}

/// `omp_target_memcpy_rect` over `ndims` dimensions.
///
/// # Safety
/// Unless `dst` and `src` are both 0 (the query form) or a check below
/// fails first, `volume`, `dst_off`, `src_off`, `dst_dims` and `src_dims`
/// each hold `ndims` readable elements, and the rectangles they describe
/// satisfy [`memcpy`] on each side.
#[allow(clippy::too_many_arguments)]
pub unsafe fn memcpy_rect(
    dst: u64,
    src: u64,
    elem: usize,
    ndims: usize,
    volume: *const usize,
    dst_off: *const usize,
    src_off: *const usize,
    dst_dims: *const usize,
    src_dims: *const usize,
    dst_dev: i64,
    src_dev: i64,
) -> i32 {
    if dst == 0 && src == 0 {
        return i32::MAX;
    }
    if dst == 0 || src == 0 || elem == 0 || ndims == 0 || volume.is_null() {
        return -1;
    }
    // SAFETY: each array holds `ndims` elements (the caller's guarantee).
    let s = |p: *const usize| unsafe { std::slice::from_raw_parts(p, ndims) };
    let (vol, doff, soff, ddim, sdim) =
        (s(volume), s(dst_off), s(src_off), s(dst_dims), s(src_dims));
    if ndims == 1 {
        // SAFETY: the innermost row of the caller's rectangles.
        return unsafe {
            memcpy(
                dst + (doff[0] * elem) as u64,
                src + (soff[0] * elem) as u64,
                vol[0] * elem,
                dst_dev,
                src_dev,
            )
        };
    }
    let dst_slice: usize = ddim[1..].iter().product::<usize>() * elem;
    let src_slice: usize = sdim[1..].iter().product::<usize>() * elem;
    for i in 0..vol[0] {
        // SAFETY: `ndims > 1`, so each array has `ndims - 1` elements after
        // its first; slice `i < vol[0]` lies inside the caller's rectangles.
        let r = unsafe {
            memcpy_rect(
                dst + (dst_slice * (doff[0] + i)) as u64,
                src + (src_slice * (soff[0] + i)) as u64,
                elem,
                ndims - 1,
                volume.add(1),
                dst_off.add(1),
                src_off.add(1),
                dst_dims.add(1),
                src_dims.add(1),
                dst_dev,
                src_dev,
            )
        };
        if r != 0 {
            return r;
        }
    }
    0
}

/// `omp_target_memset`.
///
/// # Safety
/// On the initial device, `[p, p + n)` is writable host memory (device
/// ranges are checked by the core).
pub unsafe fn memset(p: *mut c_void, val: i32, n: usize, dev: i64) -> *mut c_void {
    if p.is_null() || n == 0 {
        return p;
    }
    match checked_device(dev) {
        // SAFETY: host memory the caller names as `n` writable bytes.
        None => unsafe {
            libc::memset(p, val, n);
        },
        Some(d) => {
            let _ = d.dev.fill(DevicePtr(p as u64), &[val as u8], n);
        }
    }
    p
}

/// Look one byte up in `d`'s table the way LLVM's API routines do: the
/// device address if it is mapped, with the "Mapping exists" INFO line.
fn lookup_byte(d: &DevState, p: HostAddr) -> Option<DevicePtr> {
    d.ensure_loaded();
    let t = d.table(p, 1);
    let Some((k, Found::Contained)) = t.lookup(p, 1) else {
        return None;
    };
    let e = t.get(k).unwrap();
    let tgt = e.tgt_of(p);
    if msg::info_on(msg::INFO_MAPPING_EXISTS) {
        msg::dev_info(
            d.id,
            &format!(
                "Mapping exists with HstPtrBegin={p}, TgtPtrBegin={tgt}, Size=1, DynRefCount={} (update suppressed), HoldRefCount={}",
                msg::rc_str(e.dyn_rc),
                msg::rc_str(e.hold_rc)
            ),
        );
    }
    Some(tgt)
}

pub fn is_present(p: *const c_void, dev: i64) -> i32 {
    if p.is_null() {
        return 0;
    }
    match checked_device(dev) {
        None => 1,
        Some(d) => lookup_byte(d, HostAddr::of(p)).is_some() as i32,
    }
}

pub fn mapped_ptr(p: *const c_void, dev: i64) -> *mut c_void {
    if p.is_null() {
        return std::ptr::null_mut();
    }
    // Unlike the other routines, a bad device here is just "not mapped".
    match api_device(dev) {
        Ok(None) => p as *mut c_void,
        Ok(Some(d)) => {
            lookup_byte(d, HostAddr::of(p)).map_or(std::ptr::null_mut(), |t| t.as_ptr::<c_void>())
        }
        Err(()) => std::ptr::null_mut(),
    }
}

pub fn associate(host: HostAddr, dptr: DevicePtr, size: usize, off: usize, dev: i64) -> i32 {
    if host.is_null() || dptr.is_null() || size == 0 {
        return -1;
    }
    let Some(d) = checked_device(dev) else {
        return -1;
    };
    d.ensure_loaded();
    let tgt = dptr.offset(off as u64);
    let mut t = d.table(host, size as u64);
    if let Some((k, f)) = t.lookup(host, size as u64) {
        let e = t.get(k).unwrap();
        if f == Found::Contained && e.key() == host && e.tgt_begin == tgt {
            return 0;
        }
        drop(t);
        msg::error(
            "Not allowed to re-associate a different device ptr+offset with the same host ptr",
        );
        return -1;
    }
    // Like a new mapping (LLVM notifies the plugin of both).
    let Ok(host_locked) = crate::host_lock::lock_mapped(d, host, size as u64) else {
        return -1;
    };
    let inserted = t.insert(Entry {
        hst_base: host,
        host: HostRange::saturating(host, size as u64),
        tgt_alloc: tgt,
        tgt_begin: tgt,
        dyn_rc: INF,
        hold_rc: 0,
        name: 0,
        owned: false,
        host_ptr: false,
        host_locked,
        shadows: Vec::new(),
    });
    if inserted.is_err() {
        if host_locked {
            crate::host_lock::unlock_mapped(d, host);
        }
        return -1;
    }
    0
}

pub fn disassociate(host: HostAddr, dev: i64) -> i32 {
    let Some(d) = checked_device(dev) else {
        return -1;
    };
    let mut t = d.table(host, 0);
    let key = match t.lookup(host, 0) {
        Some((k, _)) if t.get(k).map(|e| e.key() == host).unwrap_or(false) => k,
        _ => {
            drop(t);
            msg::error("Association not found");
            return -1;
        }
    };
    let e = t.get(key).unwrap();
    if e.hold_rc > 0 {
        drop(t);
        msg::error("Trying to disassociate a pointer with a non-zero hold reference count");
        return -1;
    }
    if e.dyn_rc != INF {
        drop(t);
        msg::error(
            "Trying to disassociate a pointer which was not mapped via omp_target_associate_ptr",
        );
        return -1;
    }
    let removed = t.remove(key);
    drop(t);
    if removed.is_some_and(|e| e.host_locked) {
        crate::host_lock::unlock_mapped(d, host);
    }
    0
}

fn uids() -> &'static Vec<CString> {
    static U: OnceLock<Vec<CString>> = OnceLock::new();
    U.get_or_init(|| {
        state::state()
            .devices
            .iter()
            .map(|d| CString::new(d.dev.info().uid.clone()).unwrap_or_default())
            .collect()
    })
}

pub fn uid_from_device(dev: i64) -> *const c_char {
    let n = devices::num_devices() as i64;
    if dev == n {
        return c"HOST".as_ptr();
    }
    if dev < 0 || dev > n {
        msg::fatal(
            dev,
            &format!(
                "\"invalid value\" device number '{dev}' out of range, only {n} devices available"
            ),
        );
    }
    uids()[dev as usize].as_ptr()
}

/// # Safety
/// `uid` is null or a NUL-terminated string.
pub unsafe fn device_from_uid(uid: *const c_char) -> i32 {
    if uid.is_null() {
        return -2;
    }
    // SAFETY: `omp_get_device_from_uid` takes a C string (not null: above).
    let s = unsafe { CStr::from_ptr(uid) };
    if s.to_bytes() == b"HOST" {
        return initial_device() as i32;
    }
    let n = devices::num_devices();
    for (i, u) in uids().iter().enumerate().take(n) {
        if u.as_c_str() == s {
            return i as i32;
        }
    }
    -2 // omp_invalid_device
}

pub fn print_device_info(dev: i64) {
    let Ok(Some(d)) = api_device(dev) else {
        return;
    };
    let i = d.dev.info();
    println!("    Device Type\t\t\t\tGeneric-elf-64bit");
    println!("    UID\t\t\t\t\t{}", i.uid);
}

/// Name of the mapping whose device range holds `tgt` (INFO output only).
fn name_by_tgt(d: &DevState, tgt: DevicePtr) -> String {
    let t = d.table_all();
    for e in t.entries() {
        if tgt >= e.tgt_begin && tgt.offset_from(e.tgt_begin) < e.size() {
            return msg::name_of(e.name);
        }
    }
    "unknown".into()
}

/// Wait until the tasks that the given OpenMP depend objects order this
/// operation after have finished (the `*_async` routines' `depobj_list`).
/// The operation itself then runs at once, so anything ordered after it is
/// trivially satisfied.
/// # Safety
/// `list` is null or holds `count` depend objects (libomp `kmp_depend_info`
/// pointers), valid for the call.
pub unsafe fn wait_depobjs(count: i32, list: *const *const c_void) {
    if count <= 0 || list.is_null() {
        return;
    }
    /// libomp's `kmp_depend_info_t`: base address, length, flag byte.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct DependInfo {
        base: usize,
        len: usize,
        flags: u8,
    }
    type WaitDeps =
        unsafe extern "C" fn(*const c_void, i32, i32, *const DependInfo, i32, *const DependInfo);
    type ThreadNum = unsafe extern "C" fn(*const c_void) -> i32;
    let wait = libomp::dlsym_default(c"__kmpc_omp_wait_deps");
    let gtid = libomp::dlsym_default(c"__kmpc_global_thread_num");
    if wait.is_null() || gtid.is_null() {
        return;
    }
    let deps: Vec<DependInfo> = (0..count as usize)
        // SAFETY: the program passes `count` depobjs (not null: above); each
        // is null or points at libomp's record of one dependence.
        .filter_map(|i| unsafe { (*list.add(i) as *const DependInfo).as_ref().copied() })
        .collect();
    // SAFETY: libomp's entry points, with the signatures it exports.
    unsafe {
        let wait: WaitDeps = std::mem::transmute::<*mut c_void, WaitDeps>(wait);
        let gtid: ThreadNum = std::mem::transmute::<*mut c_void, ThreadNum>(gtid);
        let g = gtid(std::ptr::null());
        wait(
            std::ptr::null(),
            g,
            deps.len() as i32,
            deps.as_ptr(),
            0,
            std::ptr::null(),
        );
    }
}
