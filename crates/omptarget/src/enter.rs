//! Mapping table, entering: find or create the mapping of each argument
//! (LLVM's getTargetPointer), attach pointers, `target enter data` and the
//! start of a target region.

use offload_core::plugin::DevicePtr;

use crate::abi::*;
use crate::addr::{HostAddr, HostRange};
use crate::args::{walk_mapped, Args, Order};
use crate::construct::{counts, mapping_exists_unchanged, present_missing, Ctx, Fail};
use crate::device::DevState;
use crate::host_lock;
use crate::mapping::{Entry, Found, Shadow};
use crate::msg;
use crate::requires;
use crate::shards::View;
use crate::transfer::{copy_h2d, reapply_shadows};

pub struct MapResult {
    pub tgt: DevicePtr,
    pub key: Option<HostAddr>,
    pub is_new: bool,
    /// Host memory used directly (unified shared memory, no entry).
    pub host: bool,
}

/// What [`map_one`] maps: the host range `[hp, hp + size)` with its base,
/// the padding allocated before it, its name and map type, and what to do
/// with the reference count and the data.
#[derive(Clone, Copy)]
pub struct MapReq {
    pub hp: HostAddr,
    pub hb: HostAddr,
    pub padding: u64,
    pub size: u64,
    pub name: usize,
    pub t: i64,
    /// Increment the reference count (or only report it "update suppressed").
    pub update_ref: bool,
    /// Copy the data in (a new entry always; a present one under `always`
    /// or `force_copy`, or when this construct created it).
    pub to: bool,
    pub force_copy: bool,
}

impl MapReq {
    #[inline]
    fn implicit(&self) -> bool {
        self.t & IMPLICIT != 0
    }
    #[inline]
    fn hold(&self) -> bool {
        self.t & OMPX_HOLD != 0
    }
}

impl MapResult {
    const NONE: MapResult = MapResult {
        tgt: DevicePtr::NULL,
        key: None,
        is_new: false,
        host: false,
    };
}

/// getTargetPointer: find or create the mapping of `[hp, hp+size)`.
#[inline]
pub fn map_one(d: &DevState, ctx: &mut Ctx, r: &MapReq) -> Result<MapResult, Fail> {
    let tbl = d.table(r.hp, r.size);
    match tbl.lookup(r.hp, r.size) {
        Some((k, f)) if f == Found::Contained || r.implicit() => map_present(d, ctx, tbl, k, r),
        Some((k, _)) => Err(extension_error(tbl.get(k).unwrap(), r)),
        // LLVM 22 creates no entry under unified shared memory: the host
        // address is used directly and nothing is recorded.
        None if r.size > 0 && requires::usm() && r.t & CLOSE == 0 => {
            drop(tbl);
            Ok(map_usm(d, r))
        }
        // LLVM checks unified shared memory before the `present` modifier:
        // host memory is always "present" there.
        None if r.t & PRESENT != 0 => {
            present_missing(r.hp, r.size);
            Err(Fail::Present)
        }
        None if r.size > 0 => map_new(d, ctx, tbl, r),
        None => Ok(MapResult::NONE),
    }
}

/// [`map_one`] of a range inside the present entry `k`: count the
/// reference and copy in where the map type asks for it.
fn map_present(
    d: &DevState,
    ctx: &mut Ctx,
    mut tbl: View<'_>,
    k: HostAddr,
    r: &MapReq,
) -> Result<MapResult, Fail> {
    let (hp, size) = (r.hp, r.size);
    let e = tbl.get_mut(k).unwrap();
    let note = if r.update_ref {
        e.inc(r.hold());
        " (incremented)"
    } else {
        " (update suppressed)"
    };
    let tgt = e.tgt_of(hp);
    if msg::info_on(msg::INFO_MAPPING_EXISTS) {
        let (dc, hc) = counts(e, r.hold(), note);
        msg::dev_info(
            d.id,
            &format!(
                "Mapping exists{} with HstPtrBegin={hp}, TgtPtrBegin={tgt}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}, Name={}",
                if r.implicit() { " (implicit)" } else { "" },
                msg::name_of(r.name)
            ),
        );
    }
    let host_ptr = e.host_ptr;
    let ename = e.name;
    let always = r.t & ALWAYS != 0;
    if r.to && !host_ptr && size > 0 && (always || r.force_copy || ctx.is_new(k)) {
        let shadows = e.shadows.clone();
        drop(tbl);
        // SAFETY: `[hp, hp + size)` is the construct's mapped host
        // range (`Args::from_raw`), inside the live entry `k`.
        if !unsafe { copy_h2d(d, ename, hp, tgt, size) } {
            return Err(Fail::Other);
        }
        reapply_shadows(d, &shadows, hp, size);
    }
    Ok(MapResult {
        tgt,
        key: Some(k),
        is_new: false,
        host: false,
    })
}

/// [`map_one`] of a range that extends the present entry `e`: LLVM's
/// message, and why it failed.
#[cold]
fn extension_error(e: &Entry, r: &MapReq) -> Fail {
    msg::message(&format!(
        "explicit extension not allowed: host address specified is {} ({} bytes), but device allocation maps to host at {} ({} bytes)",
        r.hp,
        r.size,
        e.key(),
        e.size()
    ));
    if r.t & PRESENT != 0 {
        present_missing(r.hp, r.size);
        return Fail::Present;
    }
    Fail::Illegal
}

/// [`map_one`] under unified shared memory: the host address itself.
fn map_usm(d: &DevState, r: &MapReq) -> MapResult {
    if msg::info_on(msg::INFO_MAPPING_CHANGED) {
        msg::dev_info(
            d.id,
            &format!(
                "Return HstPtrBegin {} Size={} for unified shared memory",
                r.hp, r.size
            ),
        );
    }
    MapResult {
        // The host address is the device address.
        tgt: DevicePtr(r.hp.0),
        key: None,
        is_new: false,
        host: true,
    }
}

/// [`map_one`] of an unmapped range: a new entry over a new block, with
/// the data copied in before the table is unlocked.
fn map_new(d: &DevState, ctx: &mut Ctx, mut tbl: View<'_>, r: &MapReq) -> Result<MapResult, Fail> {
    let (hp, size, padding, name, hold) = (r.hp, r.size, r.padding, r.name, r.hold());
    let Some(block_size) = size.checked_add(padding) else {
        return Err(Fail::Other);
    };
    let Some(alloc) = d.alloc_block(block_size) else {
        return Err(Fail::Other);
    };
    let tgt = alloc.offset(padding);
    let Some(host) = HostRange::new(hp, size) else {
        // A range wrapping the address space.
        d.free_block(alloc, block_size);
        return Err(Fail::Other);
    };
    // Locked before the copy in, which then runs from locked memory.
    let host_locked = match host_lock::lock_mapped(d, hp, size) {
        Ok(locked) => locked,
        Err(fail) => {
            d.free_block(alloc, block_size);
            return Err(fail);
        }
    };
    let e = Entry {
        hst_base: r.hb,
        host,
        tgt_alloc: alloc,
        tgt_begin: tgt,
        dyn_rc: if hold { 0 } else { 1 },
        hold_rc: if hold { 1 } else { 0 },
        name,
        owned: true,
        host_ptr: false,
        host_locked,
        shadows: Vec::new(),
    };
    if msg::info_on(msg::INFO_MAPPING_CHANGED) {
        msg::dev_info(
            d.id,
            &format!(
                "Creating new map entry with HstPtrBase={}, HstPtrBegin={hp}, TgtAllocBegin={alloc}, TgtPtrBegin={tgt}, Size={size}, DynRefCount={}, HoldRefCount={}, Name={}",
                r.hb,
                e.dyn_rc,
                e.hold_rc,
                msg::name_of(name)
            ),
        );
    }
    if tbl.insert(e).is_err() {
        // Only a caller's bug gets here (the view is opened for the range).
        drop(tbl);
        if host_locked {
            host_lock::unlock_mapped(d, hp);
        }
        d.free_block(alloc, block_size);
        return Err(Fail::Other);
    }
    // The copy in completes before the table is unlocked: another
    // thread finding the new entry must see its data on the device
    // (over a remote device the copy is a round trip; the window
    // lost increments of shared mapped counters).
    // SAFETY: the construct's mapped host range (`Args::from_raw`)
    // into the block just allocated for it.
    let copied = !r.to || unsafe { copy_h2d(d, name, hp, tgt, size) };
    drop(tbl);
    ctx.new_entries.push(host);
    if !copied {
        return Err(Fail::Other);
    }
    Ok(MapResult {
        tgt,
        key: Some(hp),
        is_new: true,
        host: false,
    })
}

/// Write the device address of the pointee into the device copy of the
/// pointer at host address `ptr_addr`, and record a shadow pointer.
pub(crate) fn attach(
    d: &DevState,
    ptr_addr: HostAddr,
    pointee_begin: HostAddr,
    pointee_tgt: DevicePtr,
) {
    // SAFETY: `ptr_addr` is the host pointer variable being mapped.
    let host_value = HostAddr(unsafe { std::ptr::read_unaligned(ptr_addr.as_ptr::<u64>()) });
    // Where the pointer points, relative to the pointee's device copy.
    let tgt_value = pointee_tgt.offset(host_value.offset_from(pointee_begin));
    let mut tbl = d.table(ptr_addr, 8);
    let Some((k, Found::Contained)) = tbl.lookup(ptr_addr, 8) else {
        return;
    };
    let e = tbl.get_mut(k).unwrap();
    if e.host_ptr {
        return;
    }
    let tgt_ptr_addr = e.tgt_of(ptr_addr);
    let ename = e.name;
    let s = Shadow {
        host_ptr_addr: ptr_addr,
        host_value,
        tgt_ptr_addr,
        tgt_value,
    };
    if let Some(old) = e.shadows.iter_mut().find(|s| s.host_ptr_addr == ptr_addr) {
        *old = s;
    } else {
        e.shadows.push(s);
    }
    drop(tbl);
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    let word: u64 = tgt_value.0;
    // SAFETY: the source is the local `word`; the device slot is inside
    // the entry containing `[ptr_addr, ptr_addr + 8)` (looked up).
    unsafe { copy_h2d(d, ename, HostAddr::of(&word), tgt_ptr_addr, 8) };
}

fn struct_padding(a: &Args, i: usize) -> u64 {
    let t = a.ty(i);
    if parent_index(t).is_none() && i + 1 < a.n() && parent_index(a.ty(i + 1)) == Some(i) {
        a.begin(i).0 % a.base_addr(i).alignment(16)
    } else {
        0
    }
}

/// What a RETURN_PARAM entry (`use_device_ptr`/`use_device_addr`) gets in
/// its base slot: LLVM's `TgtPtrBegin - (HstPtrBegin - HstPtrBase)`, where
/// the host base of a PTR_AND_OBJ entry is the pointer stored at its base.
/// For a reference member of a class clang names `this` as that base, so
/// LLVM 22 (and we, to match it) load the object's first word there.
fn return_param_base(hp: HostAddr, hb: HostAddr, pao: bool, tgt: DevicePtr) -> u64 {
    let base = if pao {
        // SAFETY: a PTR_AND_OBJ entry's base is the host address of a
        // pointer-sized object the program's map clause names (LLVM reads
        // it the same way).
        let value = unsafe { std::ptr::read_unaligned(hb.as_ptr::<u64>()) };
        HostAddr(value)
    } else {
        hb
    };
    tgt.offset(base.offset_from(hp)).0
}

/// targetDataBegin: map each argument of `a` (declare mappers expanded),
/// deferring ATTACH entries to [`process_attaches`].
pub fn data_begin(d: &DevState, a: &Args, ctx: &mut Ctx) -> Result<(), Fail> {
    walk_mapped(a, Order::Forward, &mut |a, i, from_mapper| {
        let t = a.ty(i);
        if t & ATTACH != 0 {
            ctx.attaches.push((a.base_addr(i), a.begin(i), t));
            return Ok(());
        }
        begin_one(d, a, i, from_mapper, ctx)
    })
}

/// Map argument `i` as [`begin_one`] and [`end_one`] read it.
pub(crate) struct Item {
    pub(crate) t: i64,
    pub(crate) hp: HostAddr,
    pub(crate) size: u64,
    pub(crate) member: bool,
    pub(crate) pao: bool,
    /// The construct counts this reference (not a member, unless
    /// PTR_AND_OBJ; not the first component of a declare mapper).
    pub(crate) update_ref: bool,
}

impl Item {
    #[inline]
    pub(crate) fn of(a: &Args, i: usize, from_mapper: bool) -> Item {
        let t = a.ty(i);
        let member = t & MEMBER_OF != 0;
        let pao = t & PTR_AND_OBJ != 0;
        Item {
            t,
            hp: a.begin(i),
            size: a.size(i).max(0) as u64,
            member,
            pao,
            update_ref: (!member || pao) && !(from_mapper && i == 0),
        }
    }
}

/// [`data_begin`] of argument `i` (neither private nor literal, no mapper,
/// no ATTACH).
fn begin_one(
    d: &DevState,
    a: &Args,
    i: usize,
    from_mapper: bool,
    ctx: &mut Ctx,
) -> Result<(), Fail> {
    let Item {
        t,
        hp,
        size,
        member,
        pao,
        update_ref,
    } = Item::of(a, i, from_mapper);
    let hb = a.base_addr(i);
    let ptr_res = if pao {
        let req = MapReq {
            hp: hb,
            hb,
            padding: 0,
            size: 8,
            name: 0,
            t: t & !(TO | ALWAYS),
            update_ref: !member,
            to: false,
            force_copy: false,
        };
        Some(map_one(d, ctx, &req)?)
    } else {
        None
    };
    let req = MapReq {
        hp,
        hb,
        padding: struct_padding(a, i),
        size,
        name: a.name(i),
        t,
        update_ref,
        to: t & TO != 0,
        force_copy: member && !pao && member_force_copy(d, a, t, from_mapper, ctx),
    };
    let r = map_one(d, ctx, &req)?;
    if r.tgt == DevicePtr::NULL && size > 0 {
        return Err(Fail::Other);
    }
    if !from_mapper && (r.key.is_some() || r.host) {
        if let Some(slot) = ctx.arg_tgt.get_mut(i) {
            *slot = r.tgt;
        }
    }
    if let Some(pr) = ptr_res {
        if r.key.is_some() && (pr.is_new || r.is_new || t & ALWAYS != 0) {
            attach(d, hb, hp, r.tgt);
        }
    }
    if t & RETURN_PARAM != 0 && r.key.is_some() {
        // Not mapped: the host address stays (OpenMP 5.1).
        let tb = return_param_base(hp, hb, pao, r.tgt);
        a.set_base(i, tb);
    }
    if r.key.is_none() && !r.host && t != 0 && !member && t & IMPLICIT == 0 {
        no_device_counterpart(d, a.name(i));
    }
    Ok(())
}

/// Members of a struct allocated by this construct are copied too
/// (outside a declare mapper also when the struct's count is 1;
/// LLVM 22 copies no member of a present struct that a mapper
/// pushed: `always_mapper.cpp`).
fn member_force_copy(d: &DevState, a: &Args, t: i64, from_mapper: bool, ctx: &Ctx) -> bool {
    let p = parent_index(t).unwrap_or(usize::MAX);
    p < a.n() && {
        let parent = a.begin(p);
        let tbl = d.table(parent, 0);
        tbl.lookup(parent, 0)
            .map(|(k, _)| {
                ctx.is_new(k)
                    || (!from_mapper && tbl.get(k).map(|e| e.total() == 1).unwrap_or(false))
            })
            .unwrap_or(false)
    }
}

/// INFO line for an explicit map that found no device memory.
fn no_device_counterpart(d: &DevState, name: usize) {
    if msg::info_on(msg::INFO_EMPTY_MAPPING) {
        msg::dev_info(
            d.id,
            &format!(
                "variable {} does not have a valid device counterpart",
                msg::name_of(name)
            ),
        );
    }
}

/// Handle deferred ATTACH entries (rule 10).
pub fn process_attaches(d: &DevState, ctx: &mut Ctx) {
    if ctx.attaches.is_empty() {
        return;
    }
    static ALWAYS_ALL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let always_all = *ALWAYS_ALL
        .get_or_init(|| std::env::var_os("LIBOMPTARGET_TREAT_ATTACH_AUTO_AS_ALWAYS").is_some());
    let attaches = std::mem::take(&mut ctx.attaches);
    for (ptr_addr, pointee, t) in attaches {
        if ctx.new_entries.is_empty() && !always_all && t & ALWAYS == 0 {
            continue;
        }
        // Decide by address range first (LLVM: pointer or pointee inside an
        // allocation made by this construct); nothing is looked up or
        // printed otherwise.
        if !(always_all
            || t & ALWAYS != 0
            || ctx.in_new_entry(ptr_addr, 8)
            || ctx.in_new_entry(pointee, 0))
        {
            continue;
        }
        let info = msg::info_on(msg::INFO_MAPPING_EXISTS);
        let line = |e: &Entry, hp: HostAddr, size: u64| mapping_exists_unchanged(d, e, hp, size);
        // One view at a time (never two locked together).
        let pointee_entry = {
            let tbl = d.table(pointee, 0);
            tbl.lookup(pointee, 0).map(|(k, _)| {
                let o = tbl.get(k).unwrap();
                if info {
                    line(o, pointee, 0);
                }
                (o.tgt_of(pointee), o.host_ptr)
            })
        };
        let Some((tgt, pointee_on_host)) = pointee_entry else {
            continue;
        };
        let pointer_on_host = {
            let tbl = d.table(ptr_addr, 8);
            let Some((pk, Found::Contained)) = tbl.lookup(ptr_addr, 8) else {
                continue;
            };
            let p = tbl.get(pk).unwrap();
            if info {
                line(p, ptr_addr, 8);
            }
            p.host_ptr
        };
        if pointee_on_host || pointer_on_host {
            continue;
        }
        attach(d, ptr_addr, pointee, tgt);
    }
}
