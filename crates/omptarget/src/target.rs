//! Data-mapping constructs and kernel launch (reference section 5, rules 3-13).

use std::ffi::c_void;

use offload_core::plugin::{DevicePtr, KernelArgs, LaunchConfig};
use smallvec::SmallVec;

use crate::abi::*;
use crate::device::DevState;
use crate::kernels::KernelRef;
use crate::mapper::MapperComponents;
use crate::mapping::{Entry, Found, Shadow};
use crate::msg::{self, Loc, P};
use crate::report::{after_block, lookup_name, target_failed};
use crate::shards::View;
use crate::{devices, requires};

/// The argument arrays of one construct (clang's `args_base`, `args`,
/// `arg_sizes`, `arg_types`, `arg_names`, `arg_mappers`), read through
/// index accessors. Built only by the unsafe constructors, whose contract
/// is the invariant every accessor relies on: each non-null array holds
/// `n` elements, readable (and `base` writable) while the value is used.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    n: usize,
    base: *mut *mut c_void,
    begin: *mut *mut c_void,
    sizes: *const i64,
    types: *const i64,
    names: *const *mut c_void,
    mappers: *const *mut c_void,
    /// The arrays are borrowed for `'a`.
    _arrays: std::marker::PhantomData<&'a mut [*mut c_void]>,
}

impl<'a> Args<'a> {
    /// # Safety
    /// `base` and `begin` hold `n` pointers each (`base` also writable:
    /// RETURN_PARAM entries get their device address there); `sizes`,
    /// `types`, `names` and `mappers` are null or hold `n` elements; all
    /// of them stay valid for `'a`. As clang guarantees: each mapped host
    /// range (`begin[i]`, `sizes[i]` bytes) and each PTR_AND_OBJ/ATTACH base
    /// pointer slot is the program's memory, live for the construct; a
    /// non-null name is a C string; a non-null mapper is a mapper function
    /// of clang's signature ([`MapperFn`]).
    pub unsafe fn from_raw(
        n: usize,
        base: *mut *mut c_void,
        begin: *mut *mut c_void,
        sizes: *const i64,
        types: *const i64,
        names: *const *mut c_void,
        mappers: *const *mut c_void,
    ) -> Args<'a> {
        Args {
            n,
            base,
            begin,
            sizes,
            types,
            names,
            mappers,
            _arrays: std::marker::PhantomData,
        }
    }

    /// The argument arrays of a `__tgt_target_kernel` call.
    ///
    /// # Safety
    /// `ka`'s arrays satisfy [`Args::from_raw`] for `ka.num_args` and `'a`.
    pub unsafe fn from_kernel_args(ka: &KernelArgsTy) -> Args<'a> {
        // SAFETY: the caller's guarantee for `ka`'s arrays.
        unsafe {
            Args::from_raw(
                ka.num_args as usize,
                ka.arg_base_ptrs,
                ka.arg_ptrs,
                ka.arg_sizes,
                ka.arg_types,
                ka.arg_names as *const *mut c_void,
                ka.arg_mappers as *const *mut c_void,
            )
        }
    }

    /// The number of arguments.
    #[inline]
    pub fn n(&self) -> usize {
        self.n
    }

    /// Element `i` of a non-null array of `n` elements (the constructor's
    /// contract); a bad index from malformed input panics (`guard!` turns
    /// that into LLVM's fatal error) instead of reading past the array.
    #[inline]
    fn at<T: Copy>(&self, p: *const T, i: usize) -> T {
        assert!(i < self.n, "argument index {i} out of range ({})", self.n);
        // SAFETY: `p` is one of this value's non-null arrays, which hold
        // `n` readable elements (`from_raw`'s contract), and `i < n`.
        unsafe { *p.add(i) }
    }

    #[inline]
    pub fn base(&self, i: usize) -> u64 {
        self.at(self.base as *const *mut c_void, i) as u64
    }
    #[inline]
    pub fn begin(&self, i: usize) -> u64 {
        self.at(self.begin as *const *mut c_void, i) as u64
    }
    #[inline]
    pub fn size(&self, i: usize) -> i64 {
        if self.sizes.is_null() {
            0
        } else {
            self.at(self.sizes, i)
        }
    }
    #[inline]
    pub fn ty(&self, i: usize) -> i64 {
        if self.types.is_null() {
            0
        } else {
            self.at(self.types, i)
        }
    }
    #[inline]
    pub fn name(&self, i: usize) -> usize {
        if self.names.is_null() {
            0
        } else {
            self.at(self.names, i) as usize
        }
    }
    #[inline]
    pub fn mapper(&self, i: usize) -> usize {
        if self.mappers.is_null() {
            0
        } else {
            self.at(self.mappers, i) as usize
        }
    }

    /// Store `v` in base slot `i` (a RETURN_PARAM's device address, which
    /// clang reads back after the call).
    #[inline]
    pub fn set_base(&self, i: usize, v: u64) {
        assert!(i < self.n, "argument index {i} out of range ({})", self.n);
        // SAFETY: `base` holds `n` writable pointers (`from_raw`'s
        // contract) and `i < n`.
        unsafe { *self.base.add(i) = v as *mut c_void };
    }
}

/// Why a construct failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    Present,
    Illegal,
    Other,
}

/// Per-construct bookkeeping.
#[derive(Default)]
pub struct Ctx {
    /// Host ranges `(begin, end)` of entries created by this construct
    /// (an entry's key is its begin).
    pub new_entries: SmallVec<[(u64, u64); 8]>,
    /// Deferred ATTACH entries: (pointer address, pointee begin, type).
    pub attaches: Vec<(u64, u64, i64)>,
    /// Device address found or created for each top-level argument of a
    /// `target` construct (`NO_TGT` = not known), so that the kernel
    /// arguments need no second lookup. Empty outside `target`.
    pub arg_tgt: SmallVec<[u64; 16]>,
}

pub const NO_TGT: u64 = u64::MAX;

/// Entries a `target exit data` (or the end of a region) removed, freed
/// after all its map entries are processed (LLVM's order of messages).
type Removals = SmallVec<[Removed; 16]>;

/// What reporting and freeing a removed entry needs.
struct Removed {
    hst_begin: u64,
    tgt_begin: DevicePtr,
    tgt_alloc: DevicePtr,
    size: u64,
    name: usize,
    owned: bool,
}

impl From<&Entry> for Removed {
    fn from(e: &Entry) -> Removed {
        Removed {
            hst_begin: e.hst_begin,
            tgt_begin: e.tgt_begin,
            tgt_alloc: e.tgt_alloc,
            size: e.size(),
            name: e.name,
            owned: e.owned,
        }
    }
}

impl Ctx {
    /// Whether the entry with key `k` was created by this construct.
    pub fn is_new(&self, k: u64) -> bool {
        self.new_entries.iter().any(|&(b, _)| b == k)
    }
}

// ------------------------------------------------------------ mappers

type MapperFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, i64, i64, *mut c_void);

struct OwnedArgs {
    base: Vec<*mut c_void>,
    begin: Vec<*mut c_void>,
    sizes: Vec<i64>,
    types: Vec<i64>,
    names: Vec<*mut c_void>,
}

impl OwnedArgs {
    /// The arrays as [`Args`] (borrowing `self`).
    fn args(&mut self) -> Args<'_> {
        debug_assert!([
            self.begin.len(),
            self.sizes.len(),
            self.types.len(),
            self.names.len()
        ]
        .iter()
        .all(|&l| l == self.base.len()));
        // SAFETY: five vectors of `base.len()` elements each (filled
        // together in `run_mapper`), mutably borrowed for the result's
        // lifetime; no mapper array.
        unsafe {
            Args::from_raw(
                self.base.len(),
                self.base.as_mut_ptr(),
                self.begin.as_mut_ptr(),
                self.sizes.as_ptr(),
                self.types.as_ptr(),
                self.names.as_ptr(),
                std::ptr::null(),
            )
        }
    }
}

/// Call the declare-mapper function of argument `i` (not null) and return
/// the components it pushed.
fn run_mapper(a: &Args, i: usize) -> OwnedArgs {
    let mut mc = MapperComponents::new();
    let m = a.mapper(i);
    assert!(m != 0, "argument {i} has no mapper");
    // SAFETY: a non-null mapper entry is a function of clang's mapper
    // signature (`Args::from_raw`'s contract).
    let f: MapperFn = unsafe { std::mem::transmute::<usize, MapperFn>(m) };
    // SAFETY: `f` is clang's generated mapper; the handle is `mc`'s live
    // `MapperComponentsTy`, the other arguments the construct's own.
    unsafe {
        f(
            mc.handle(),
            a.base(i) as *mut c_void,
            a.begin(i) as *mut c_void,
            a.size(i),
            a.ty(i),
            a.name(i) as *mut c_void,
        )
    };
    let mut o = OwnedArgs {
        base: vec![],
        begin: vec![],
        sizes: vec![],
        types: vec![],
        names: vec![],
    };
    // The components as pushed, like LLVM 22: clang's mapper functions
    // decay each member's to/from by the map type they are called with but
    // drop its `always`, so a present item moves only where a member entry
    // would be its last reference (`always_mapper.cpp`).
    for c in mc.as_slice() {
        o.base.push(c.base);
        o.begin.push(c.begin);
        o.sizes.push(c.size);
        o.types.push(c.ty);
        o.names.push(c.name);
    }
    o
}

// ------------------------------------------------------------ helpers

/// Copy `[hp, hp + size)` to `tgt` (with its INFO line).
///
/// # Safety
/// As [`DevState::h2d`]: the host range is readable, the device range lies
/// in live device memory of a mapping-table entry or owned block.
unsafe fn copy_h2d(d: &DevState, e_name: usize, hp: u64, tgt: u64, size: u64) -> bool {
    if msg::info_on(msg::INFO_DATA_TRANSFER) {
        msg::dev_info(
            d.id,
            &format!(
                "Copying data from host to device, HstPtr={}, TgtPtr={}, Size={size}, Name={}",
                P(hp),
                P(tgt),
                msg::name_of(e_name)
            ),
        );
    }
    // SAFETY: the caller's guarantee, passed on.
    unsafe { d.h2d(tgt, hp, size) }
}

/// Copy `size` bytes at `tgt` to `[hp, hp + size)` (with its INFO line).
///
/// # Safety
/// As [`DevState::d2h`]: the host range is writable, the device range lies
/// in live device memory of a mapping-table entry.
unsafe fn copy_d2h(d: &DevState, e_name: usize, hp: u64, tgt: u64, size: u64) -> bool {
    if msg::info_on(msg::INFO_DATA_TRANSFER) {
        msg::dev_info(
            d.id,
            &format!(
                "Copying data from device to host, TgtPtr={}, HstPtr={}, Size={size}, Name={}",
                P(tgt),
                P(hp),
                msg::name_of(e_name)
            ),
        );
    }
    // SAFETY: the caller's guarantee, passed on.
    unsafe { d.d2h(hp, tgt, size) }
}

/// After a TO copy of `[hp, hp+size)`: re-write attached device pointers.
fn reapply_shadows(d: &DevState, shadows: &[Shadow], hp: u64, size: u64) {
    for s in shadows {
        if s.host_ptr_addr >= hp && s.host_ptr_addr + 8 <= hp + size {
            // SAFETY: the source is the shadow's own 8-byte value; a shadow's
            // device slot lies inside the device memory of the live entry
            // that holds it (recorded by `attach`).
            unsafe { d.h2d(s.tgt_ptr_addr, &s.tgt_value as *const u64 as u64, 8) };
        }
    }
}

/// After a FROM copy of `[hp, hp+size)`: restore host pointer values.
fn restore_shadows(shadows: &[Shadow], hp: u64, size: u64) {
    for s in shadows {
        if s.host_ptr_addr >= hp && s.host_ptr_addr + 8 <= hp + size {
            // SAFETY: the pointer slot lies inside `[hp, hp + size)` (checked
            // above), host memory of a live entry the program mapped
            // (`Args::from_raw`'s contract when it was mapped).
            unsafe { std::ptr::write_unaligned(s.host_ptr_addr as *mut u64, s.host_value) };
        }
    }
}

fn counts(e: &Entry, hold: bool, note: &str) -> (String, String) {
    let (mut dc, mut hc) = (msg::rc_str(e.dyn_rc), msg::rc_str(e.hold_rc));
    if !note.is_empty() {
        if hold {
            hc.push_str(note);
        } else {
            dc.push_str(note);
        }
    }
    (dc, hc)
}

pub struct MapResult {
    pub tgt: u64,
    pub key: Option<u64>,
    pub is_new: bool,
    /// Host memory used directly (unified shared memory, no entry).
    pub host: bool,
}

/// What [`map_one`] maps: the host range `[hp, hp + size)` with its base,
/// the padding allocated before it, its name and map type, and what to do
/// with the reference count and the data.
#[derive(Clone, Copy)]
pub struct MapReq {
    pub hp: u64,
    pub hb: u64,
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
        tgt: 0,
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
    k: u64,
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
                "Mapping exists{} with HstPtrBegin={}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}, Name={}",
                if r.implicit() { " (implicit)" } else { "" },
                P(hp),
                P(tgt),
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
        P(r.hp),
        r.size,
        P(e.hst_begin),
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
                P(r.hp),
                r.size
            ),
        );
    }
    MapResult {
        tgt: r.hp,
        key: None,
        is_new: false,
        host: true,
    }
}

/// [`map_one`] of an unmapped range: a new entry over a new block, with
/// the data copied in before the table is unlocked.
fn map_new(d: &DevState, ctx: &mut Ctx, mut tbl: View<'_>, r: &MapReq) -> Result<MapResult, Fail> {
    let (hp, size, padding, name, hold) = (r.hp, r.size, r.padding, r.name, r.hold());
    let Some(alloc) = d.alloc_block(size + padding) else {
        return Err(Fail::Other);
    };
    let tgt = alloc + padding;
    let e = Entry {
        hst_base: r.hb,
        hst_begin: hp,
        hst_end: hp + size,
        tgt_alloc: DevicePtr(alloc),
        tgt_begin: DevicePtr(tgt),
        dyn_rc: if hold { 0 } else { 1 },
        hold_rc: if hold { 1 } else { 0 },
        name,
        owned: true,
        host_ptr: false,
        shadows: Vec::new(),
    };
    if msg::info_on(msg::INFO_MAPPING_CHANGED) {
        msg::dev_info(
            d.id,
            &format!(
                "Creating new map entry with HstPtrBase={}, HstPtrBegin={}, TgtAllocBegin={}, TgtPtrBegin={}, Size={size}, DynRefCount={}, HoldRefCount={}, Name={}",
                P(r.hb),
                P(hp),
                P(alloc),
                P(tgt),
                e.dyn_rc,
                e.hold_rc,
                msg::name_of(name)
            ),
        );
    }
    if tbl.insert(e).is_err() {
        // Only a range wrapping the address space gets here.
        drop(tbl);
        d.free_block(alloc, size + padding);
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
    ctx.new_entries.push((hp, hp + size));
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
fn attach(d: &DevState, ptr_addr: u64, pointee_begin: u64, pointee_tgt: u64) {
    // SAFETY: `ptr_addr` is the host pointer variable being mapped.
    let host_value = unsafe { std::ptr::read_unaligned(ptr_addr as *const u64) };
    let tgt_value = pointee_tgt.wrapping_sub(pointee_begin.wrapping_sub(host_value));
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
    // SAFETY: the source is the local `tgt_value`; the device slot is
    // inside the entry containing `[ptr_addr, ptr_addr + 8)` (looked up).
    unsafe { copy_h2d(d, ename, &tgt_value as *const u64 as u64, tgt_ptr_addr, 8) };
}

fn struct_padding(a: &Args, i: usize) -> u64 {
    let t = a.ty(i);
    if parent_index(t).is_none() && i + 1 < a.n() && parent_index(a.ty(i + 1)) == Some(i) {
        let base = a.base(i);
        let align = if base == 0 {
            16
        } else {
            (1u64 << base.trailing_zeros()).min(16)
        };
        a.begin(i) % align
    } else {
        0
    }
}

// ------------------------------------------------------------ enter

/// What a RETURN_PARAM entry (`use_device_ptr`/`use_device_addr`) gets in
/// its base slot: LLVM's `TgtPtrBegin - (HstPtrBegin - HstPtrBase)`, where
/// the host base of a PTR_AND_OBJ entry is the pointer stored at its base.
/// For a reference member of a class clang names `this` as that base, so
/// LLVM 22 (and we, to match it) load the object's first word there.
fn return_param_base(hp: u64, hb: u64, pao: bool, tgt: u64) -> u64 {
    let base = if pao {
        // SAFETY: a PTR_AND_OBJ entry's base is the host address of a
        // pointer-sized object the program's map clause names (LLVM reads
        // it the same way).
        unsafe { std::ptr::read_unaligned(hb as *const u64) }
    } else {
        hb
    };
    tgt.wrapping_sub(hp.wrapping_sub(base))
}

pub fn data_begin(d: &DevState, a: &Args, from_mapper: bool, ctx: &mut Ctx) -> Result<(), Fail> {
    for i in 0..a.n() {
        let t = a.ty(i);
        if t & (LITERAL | PRIVATE) != 0 {
            continue;
        }
        if a.mapper(i) != 0 {
            let mut o = run_mapper(a, i);
            let sub = o.args();
            data_begin(d, &sub, true, ctx)?;
            continue;
        }
        if t & ATTACH != 0 {
            ctx.attaches.push((a.base(i), a.begin(i), t));
            continue;
        }
        begin_one(d, a, i, from_mapper, ctx)?;
    }
    Ok(())
}

/// Map argument `i` as [`begin_one`] and [`end_one`] read it.
struct Item {
    t: i64,
    hp: u64,
    size: u64,
    member: bool,
    pao: bool,
    /// The construct counts this reference (not a member, unless
    /// PTR_AND_OBJ; not the first component of a declare mapper).
    update_ref: bool,
}

impl Item {
    #[inline]
    fn of(a: &Args, i: usize, from_mapper: bool) -> Item {
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
    let hb = a.base(i);
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
    if r.tgt == 0 && (size > 0) {
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
        let tbl = d.table(a.begin(p), 0);
        tbl.lookup(a.begin(p), 0)
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
        let in_new = |addr: u64, len: u64| {
            let end = addr.saturating_add(len.max(1));
            ctx.new_entries.iter().any(|&(b, e)| addr >= b && end <= e)
        };
        if !(always_all || t & ALWAYS != 0 || in_new(ptr_addr, 8) || in_new(pointee, 0)) {
            continue;
        }
        let info = msg::info_on(msg::INFO_MAPPING_EXISTS);
        let line = |e: &Entry, hp: u64, size: u64| {
            let (dc, hc) = counts(e, false, " (update suppressed)");
            msg::dev_info(
                d.id,
                &format!(
                    "Mapping exists with HstPtrBegin={}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}",
                    P(hp),
                    P(e.tgt_of(hp))
                ),
            );
        };
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

// ------------------------------------------------------------ exit

pub fn data_end(
    d: &DevState,
    a: &Args,
    from_mapper: bool,
    check_present: bool,
) -> Result<(), Fail> {
    let mut removals = Removals::new();
    let r = data_end_inner(d, a, from_mapper, check_present, &mut removals);
    for e in removals {
        if msg::info_on(msg::INFO_MAPPING_CHANGED) {
            msg::dev_info(
                d.id,
                &format!(
                    "Removing map entry with HstPtrBegin={}, TgtPtrBegin={}, Size={}, Name={}",
                    P(e.hst_begin),
                    P(e.tgt_begin.0),
                    e.size,
                    msg::name_of(e.name)
                ),
            );
        }
        if e.owned {
            d.free_block(e.tgt_alloc.0, e.tgt_begin.0 - e.tgt_alloc.0 + e.size);
        }
    }
    r
}

fn data_end_inner(
    d: &DevState,
    a: &Args,
    from_mapper: bool,
    check_present: bool,
    removals: &mut Removals,
) -> Result<(), Fail> {
    for i in (0..a.n()).rev() {
        let t = a.ty(i);
        if t & (LITERAL | PRIVATE | ATTACH) != 0 {
            continue;
        }
        if a.mapper(i) != 0 {
            let mut o = run_mapper(a, i);
            let sub = o.args();
            let mut rem = Removals::new();
            let r = data_end_inner(d, &sub, true, check_present, &mut rem);
            removals.extend(rem);
            r?;
            continue;
        }
        end_one(d, a, i, from_mapper, check_present, removals)?;
    }
    Ok(())
}

/// [`data_end_inner`] of argument `i` (neither private nor literal, no
/// mapper, no ATTACH): release a reference, copy back, remove the entry.
fn end_one(
    d: &DevState,
    a: &Args,
    i: usize,
    from_mapper: bool,
    check_present: bool,
    removals: &mut Removals,
) -> Result<(), Fail> {
    let Item {
        t,
        hp,
        size,
        update_ref,
        ..
    } = Item::of(a, i, from_mapper);
    let mut tbl = d.table(hp, size);
    let key = match tbl.lookup(hp, size) {
        Some((k, Found::Contained)) => Some(k),
        Some((k, Found::Extends)) if t & IMPLICIT != 0 => Some(k),
        _ => None,
    };
    let Some(k) = key else {
        drop(tbl);
        if check_present && t & PRESENT != 0 && !requires::usm() {
            msg::message(&format!(
                "device mapping required by 'present' map type modifier does not exist for host address {} ({size} bytes)",
                P(hp)
            ));
            return Err(Fail::Present);
        }
        return Ok(());
    };
    let e = tbl.get_mut(k).unwrap();
    let last = release_ref(d, e, hp, size, t, update_ref);
    let tgt = e.tgt_of(hp);
    let name = e.name;
    let do_copy = t & FROM != 0 && size > 0 && !e.host_ptr && (last || t & ALWAYS != 0);
    let remove = last && update_ref && e.total() == 0;
    let shadows = if do_copy {
        e.shadows.clone()
    } else {
        Vec::new()
    };
    if do_copy && remove {
        // The last reference copies back before the entry leaves the
        // table: a thread mapping the range next (a new entry, copied
        // in from the host) must see the updated host value.
        // SAFETY: the construct's mapped host range (`Args::from_raw`),
        // from the entry `k`, still in the table (locked).
        let copied = unsafe { copy_d2h(d, name, hp, tgt, size) };
        if copied {
            restore_shadows(&shadows, hp, size);
        }
        let removed = tbl.remove(k);
        drop(tbl);
        if let Some(e) = removed {
            removals.push(Removed::from(&e));
        }
        return if copied { Ok(()) } else { Err(Fail::Other) };
    }
    let removed = if remove { tbl.remove(k) } else { None };
    drop(tbl);
    if do_copy {
        // SAFETY: the construct's mapped host range; the entry is not
        // removed (`removed` is None here), so its memory is live.
        if !unsafe { copy_d2h(d, name, hp, tgt, size) } {
            return Err(Fail::Other);
        }
        restore_shadows(&shadows, hp, size);
    }
    if let Some(e) = removed {
        removals.push(Removed::from(&e));
    }
    Ok(())
}

/// Release the reference of map type `t` to entry `e` (or, without
/// `update_ref`, only ask whether it would be the last) and print the
/// INFO line for `[hp, hp + size)`. True when it is the last.
fn release_ref(d: &DevState, e: &mut Entry, hp: u64, size: u64, t: i64, update_ref: bool) -> bool {
    let hold = t & OMPX_HOLD != 0;
    let delete = t & DELETE != 0;
    let (last, note) = if update_ref {
        let last = e.dec(hold, delete);
        let note = match (last, delete && !hold) {
            (true, true) => " (reset, delayed deletion)",
            (true, false) => " (decremented, delayed deletion)",
            _ => " (decremented)",
        };
        (last, note)
    } else {
        (e.would_be_last(hold, delete), " (update suppressed)")
    };
    if msg::info_on(msg::INFO_MAPPING_EXISTS) {
        let (dc, hc) = counts(e, hold, note);
        msg::dev_info(
            d.id,
            &format!(
                "Mapping exists with HstPtrBegin={}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}",
                P(hp),
                P(e.tgt_of(hp))
            ),
        );
    }
    last
}

// ------------------------------------------------------------ update

pub fn data_update(d: &DevState, a: &Args) -> Result<(), Fail> {
    for i in 0..a.n() {
        let t = a.ty(i);
        if t & (LITERAL | PRIVATE) != 0 {
            continue;
        }
        if a.mapper(i) != 0 {
            let mut o = run_mapper(a, i);
            let sub = o.args();
            data_update(d, &sub)?;
            continue;
        }
        if t & NON_CONTIG != 0 {
            let dims = a.size(i).max(0) as usize;
            if dims == 0 {
                continue;
            }
            // SAFETY: clang passes `dims` descriptors in args[i].
            let nc = unsafe { std::slice::from_raw_parts(a.begin(i) as *const NonContig, dims) };
            let size = nc[dims - 1].count * nc[dims - 1].stride;
            let mut merged = 0;
            for j in (1..dims).rev() {
                if nc[j].count * nc[j].stride == nc[j - 1].stride {
                    merged += 1;
                }
            }
            non_contig(d, a.base(i), nc, size, t, a.name(i), 0, dims - merged, 0)?;
            continue;
        }
        update_one(d, a.begin(i), a.size(i).max(0) as u64, t, a.name(i))?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn non_contig(
    d: &DevState,
    base: u64,
    nc: &[NonContig],
    size: u64,
    t: i64,
    name: usize,
    dim: usize,
    ndims: usize,
    offset: u64,
) -> Result<(), Fail> {
    if dim < ndims {
        for k in 0..nc[dim].count {
            let off = (nc[dim].offset + k) * nc[dim].stride;
            if dim != ndims - 1 || k == 0 {
                non_contig(d, base, nc, size, t, name, dim + 1, ndims, offset + off)?;
            }
        }
        Ok(())
    } else {
        update_one(d, base + offset, size, t, name)
    }
}

fn update_one(d: &DevState, hp: u64, size: u64, t: i64, _name: usize) -> Result<(), Fail> {
    let (tgt, shadows, host_ptr, name) = {
        let tbl = d.table(hp, size);
        match tbl.lookup(hp, size) {
            Some((k, Found::Contained)) => {
                let e = tbl.get(k).unwrap();
                let tgt = e.tgt_of(hp);
                if msg::info_on(msg::INFO_MAPPING_EXISTS) {
                    let (dc, hc) = counts(e, false, " (update suppressed)");
                    msg::dev_info(
                        d.id,
                        &format!(
                            "Mapping exists with HstPtrBegin={}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}",
                            P(hp),
                            P(tgt)
                        ),
                    );
                }
                (tgt, e.shadows.clone(), e.host_ptr, e.name)
            }
            _ => {
                if t & PRESENT != 0 && !requires::usm() {
                    msg::message(&format!(
                        "device mapping required by 'present' motion modifier does not exist for host address {} ({size} bytes)",
                        P(hp)
                    ));
                    return Err(Fail::Present);
                }
                return Ok(());
            }
        }
    };
    if host_ptr || size == 0 {
        return Ok(());
    }
    if t & FROM != 0 {
        // SAFETY: the update's host range (`Args::from_raw`, or a strided
        // piece of it), contained in a live entry (looked up above).
        if !unsafe { copy_d2h(d, name, hp, tgt, size) } {
            return Err(Fail::Other);
        }
        restore_shadows(&shadows, hp, size);
    }
    if t & TO != 0 {
        // SAFETY: as for the FROM copy above.
        if !unsafe { copy_h2d(d, name, hp, tgt, size) } {
            return Err(Fail::Other);
        }
        reapply_shadows(d, &shadows, hp, size);
    }
    Ok(())
}

// ------------------------------------------------------------ reporting

fn print_args(d: &DevState, a: &Args) {
    for i in 0..a.n() {
        let t = a.ty(i);
        let s = a.size(i);
        msg::dev_info(
            d.id,
            &format!(
                "{}({})[{}] {}",
                msg::arg_kind(t, s),
                msg::name_of(a.name(i)),
                s,
                if t & IMPLICIT != 0 { "(implicit)" } else { "" }
            ),
        );
    }
}

fn present_missing(hp: u64, size: u64) {
    msg::message(&format!(
        "device mapping required by 'present' map type modifier does not exist for host address {} ({size} bytes)",
        P(hp)
    ));
}

fn begin_fail_msgs(f: Fail) {
    match f {
        Fail::Present => msg::error(
            "Call to getTargetPointer returned null pointer ('present' map type modifier).",
        ),
        Fail::Illegal | Fail::Other => msg::error(
            "Call to getTargetPointer returned null pointer (device failure or illegal mapping).",
        ),
    }
}

// ------------------------------------------------------------ entry points

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    Begin,
    End,
    Update,
}

pub fn target_data(loc: *const Ident, device: i64, a: &Args, kind: DataKind) {
    let Some(d) = devices::resolve(device, loc) else {
        return;
    };
    let info = msg::info();
    if info & msg::INFO_KERNEL_ARGS != 0 {
        let what = match kind {
            DataKind::Begin => "Entering OpenMP data region with being_mapper",
            DataKind::End => "Exiting OpenMP data region with end_mapper",
            DataKind::Update => "Updating data within the OpenMP data region with update_mapper",
        };
        msg::dev_info(
            d.id,
            &format!(
                "{what} at {} with {} arguments:",
                Loc::from_ident(loc),
                a.n()
            ),
        );
        print_args(d, a);
    }
    d.ensure_loaded();
    let r = match kind {
        DataKind::Begin => {
            let mut ctx = Ctx::default();
            let r = data_begin(d, a, false, &mut ctx);
            if r.is_ok() {
                process_attaches(d, &mut ctx);
            } else if let Err(f) = r {
                begin_fail_msgs(f);
            }
            r
        }
        DataKind::End => data_end(d, a, false, true),
        DataKind::Update => data_update(d, a),
    };
    if r.is_err() {
        target_failed(loc);
    }
    if info & msg::INFO_DUMP_TABLE != 0 {
        after_block(&Loc::from_ident(loc));
    }
}

const MAX_STACK_WORDS: usize = 32;

/// PTR_AND_OBJ | LITERAL | IMPLICIT: a by-reference capture of a lambda.
const LAMBDA_CAPTURE: i64 = PTR_AND_OBJ | LITERAL | IMPLICIT;
/// Firstprivate copies up to this size are packed into one transfer.
const FP_PACK_THRESHOLD: u64 = 1024;
const FP_MAX_ALIGN: u64 = 16;

/// Alignment of a host address, at most 16 (getPartialStructRequiredAlignment).
fn required_alignment(p: u64) -> u64 {
    if p == 0 {
        FP_MAX_ALIGN
    } else {
        (1u64 << p.trailing_zeros()).min(FP_MAX_ALIGN)
    }
}

/// Write the device address of a lambda's by-reference capture into the
/// device copy of the lambda (LLVM's lambda handling in processDataBefore).
fn lambda_capture(d: &DevState, a: &Args, i: usize, last_param: (usize, u64)) {
    let Some(parent) = parent_index(a.ty(i)) else {
        return;
    };
    if parent != last_param.0 {
        return;
    }
    let hp_val = a.begin(i);
    let size = a.size(i).max(0) as u64;
    let tgt_ptr_begin = last_param
        .1
        .wrapping_add(a.base(i).wrapping_sub(a.begin(parent)));
    let (value, name) = {
        let tbl = d.table(hp_val, size);
        let Some((k, _)) = tbl.lookup(hp_val, size) else {
            return;
        };
        let e = tbl.get(k).unwrap();
        let tgt = e.tgt_of(hp_val);
        if msg::info_on(msg::INFO_MAPPING_EXISTS) {
            let (dc, hc) = counts(e, false, " (update suppressed)");
            msg::dev_info(
                d.id,
                &format!(
                    "Mapping exists with HstPtrBegin={}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}",
                    P(hp_val),
                    P(tgt)
                ),
            );
        }
        (tgt, e.name)
    };
    // SAFETY: the source is the local `value`; the destination is the
    // capture's slot inside the lambda's private device copy (its word).
    unsafe { copy_h2d(d, name, &value as *const u64 as u64, tgt_ptr_begin, 8) };
}

/// The kernel's argument words: on the stack up to [`MAX_STACK_WORDS`],
/// all of them on the heap beyond.
struct Words {
    stack: [u64; MAX_STACK_WORDS],
    heap: Vec<u64>,
    n: usize,
}

impl Words {
    #[inline]
    fn new() -> Words {
        Words {
            stack: [0; MAX_STACK_WORDS],
            heap: Vec::new(),
            n: 0,
        }
    }
    /// The index the next word gets.
    #[inline]
    fn len(&self) -> usize {
        self.n
    }
    #[inline]
    fn push(&mut self, w: u64) {
        if self.n < MAX_STACK_WORDS {
            self.stack[self.n] = w;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack);
            }
            self.heap.push(w);
        }
        self.n += 1;
    }
    /// Overwrite word `idx` (already pushed).
    #[inline]
    fn set(&mut self, idx: usize, w: u64) {
        if self.heap.is_empty() {
            self.stack[idx] = w;
        } else {
            self.heap[idx] = w;
        }
    }
    #[inline]
    fn as_slice(&self) -> &[u64] {
        if self.n <= MAX_STACK_WORDS {
            &self.stack[..self.n]
        } else {
            &self.heap[..]
        }
    }
}

/// A small firstprivate packed into the launch's one transfer (LLVM's
/// PrivateArgumentManager).
struct Packed {
    /// Its kernel word.
    word: usize,
    hp: u64,
    size: u64,
    /// Bytes before it in the packed buffer.
    padding: u64,
    /// Base minus begin, added to its device address for the word.
    off: u64,
    /// The alignment its start has.
    align: u64,
}

/// Private device copies of one launch, freed after the kernel ran.
#[derive(Default)]
struct Privates {
    /// (device block, size).
    blocks: Vec<(u64, u64)>,
    /// Small firstprivates copied in one transfer after the argument loop.
    packed: Vec<Packed>,
}

impl Privates {
    /// Add a small firstprivate to the packed buffer, aligned as LLVM does.
    fn pack(&mut self, word: usize, hp: u64, size: u64, off: u64) {
        let (padding, align) = match self.packed.last() {
            None => (0, FP_MAX_ALIGN),
            Some(l) => {
                let mut start = l.align;
                if l.size % start != 0 {
                    start = l.size % start;
                }
                let req = required_alignment(hp);
                if req > start {
                    (req - start, req)
                } else {
                    (0, start)
                }
            }
        };
        self.packed.push(Packed {
            word,
            hp,
            size,
            padding,
            off,
            align,
        });
    }
}

/// Copy the packed small firstprivates in one transfer and fill in their
/// kernel words.
#[inline(never)]
fn pack_firstprivates(d: &DevState, info: u32, privates: &mut Privates, words: &mut Words) -> bool {
    let packed = &privates.packed;
    let total: u64 = packed.iter().map(|p| p.size + p.padding).sum();
    let mut small = [0u8; 4096];
    let mut big = Vec::new();
    let buf: &mut [u8] = if total as usize <= small.len() {
        &mut small[..total as usize]
    } else {
        big.resize(total as usize, 0u8);
        &mut big[..]
    };
    let mut at = 0usize;
    for p in packed {
        at += p.padding as usize;
        // SAFETY: `[hp, hp+size)` is the firstprivate host variable.
        let src = unsafe { std::slice::from_raw_parts(p.hp as *const u8, p.size as usize) };
        buf[at..at + p.size as usize].copy_from_slice(src);
        at += p.size as usize;
    }
    let Some(block) = d.alloc_block(total) else {
        return false;
    };
    privates.blocks.push((block, total));
    let bp = buf.as_ptr() as u64;
    let name = if info & msg::INFO_DATA_TRANSFER != 0 {
        lookup_name(d, bp, total)
    } else {
        0
    };
    // SAFETY: `buf` holds `total` bytes; `block` is a block of `total` bytes.
    unsafe { copy_h2d(d, name, bp, block, total) };
    let mut tp = block;
    for p in packed {
        tp += p.padding;
        words.set(p.word, tp.wrapping_add(p.off));
        tp += p.size;
    }
    true
}

/// The launch geometry the program asked for: teams become groups, the
/// thread limit the group size, plus the dynamic group memory and loop trip
/// count. A clause the program left unset stays 0 in the x dimension: the
/// plugin picks (the CUDA plugin as LLVM's does; the host plugin runs
/// OpenMP kernels with one call and libomp fans out).
fn launch_config(ka: &KernelArgsTy) -> LaunchConfig {
    let x_as_given = |v: [u32; 3]| [v[0], v[1].max(1), v[2].max(1)];
    LaunchConfig {
        num_groups: x_as_given(teams_of(ka.num_teams)),
        group_size: x_as_given(ka.thread_limit),
        dyn_group_memory: ka.dyn_cgroup_mem,
        tripcount: ka.tripcount,
    }
}

/// The teams a construct asked for: clang passes -1 for a `target` that is
/// not a teams construct, which runs one team (as LLVM's
/// `__tgt_target_kernel` sets it; as given, a GPU launched 2^31-1 blocks).
fn teams_of(num_teams: [u32; 3]) -> [u32; 3] {
    match num_teams {
        [u32::MAX, y, z] => [1, y, z],
        given => given,
    }
}

/// `__tgt_target_kernel`: returns 0 when the region ran on the device.
/// Map the arguments, pack the kernel words, launch, unmap.
pub fn target_kernel(
    loc: *const Ident,
    device: i64,
    region: *mut c_void,
    ka: &KernelArgsTy,
    a: &Args,
) -> i32 {
    let Some(d) = devices::resolve(device, loc) else {
        return -1;
    };
    let info = msg::info();
    if info & msg::INFO_KERNEL_ARGS != 0 {
        kernel_header(d, loc, a);
    }
    // Images load on a device's first construct, after the INFO header
    // (LLVM's order: their INFO lines follow it).
    d.ensure_loaded();
    let Some(kernel) = d.kernel(region as u64) else {
        no_kernel(region, loc);
    };
    let mut ctx = Ctx::default();
    // Over a queue with round trips (remote), the copies in go out without
    // waiting; the launch waits for them (one round trip, not one each).
    let batched = a.n() > 0 && d.dev.batch_begin();
    map_args(d, a, loc, &mut ctx);
    let mut words = Words::new();
    let mut privates = Privates::default();
    if !pack_args(d, a, ka.version, info, &ctx, &mut words, &mut privates) {
        msg::error("Failed to process data before launching the kernel.");
        target_failed(loc);
    }
    // With a batch, the copies back ride on the launch's round trip.
    let read_back = batched.then_some(a);
    launch(d, kernel, ka, words.as_slice(), info, loc, read_back);
    unmap_args(d, a, loc);
    for (p, size) in privates.blocks {
        d.free_block(p, size);
    }
    if batched {
        end_batch(d, loc);
    }
    if info & msg::INFO_DUMP_TABLE != 0 {
        after_block(&Loc::from_ident(loc));
    }
    0
}

/// INFO: the kernel's entry line and its argument list.
#[cold]
fn kernel_header(d: &DevState, loc: *const Ident, a: &Args) {
    msg::dev_info(
        d.id,
        &format!(
            "Entering OpenMP kernel at {} with {} arguments:",
            Loc::from_ident(loc),
            a.n()
        ),
    );
    print_args(d, a);
}

#[cold]
fn no_kernel(region: *mut c_void, loc: *const Ident) -> ! {
    msg::error(&format!(
        "Failed to launch kernel: no kernel found for host region {}",
        P(region as u64)
    ));
    target_failed(loc);
}

/// Map the kernel's arguments (targetDataBegin and the deferred attaches),
/// recording the device address of each top-level argument in `ctx`.
#[inline]
fn map_args(d: &DevState, a: &Args, loc: *const Ident, ctx: &mut Ctx) {
    if a.n() == 0 {
        return;
    }
    ctx.arg_tgt = smallvec::smallvec![NO_TGT; a.n()];
    if let Err(f) = data_begin(d, a, false, ctx) {
        begin_fail_msgs(f);
        msg::error("Call to targetDataBegin failed, abort target.");
        msg::error("Failed to process data before launching the kernel.");
        target_failed(loc);
    }
    process_attaches(d, ctx);
}

/// Fill in the kernel words: one per TARGET_PARAM (after the dyn_ptr word
/// of KernelArgs v3 and later): literals, private copies, mapped device
/// addresses. False when a private copy could not be made.
fn pack_args(
    d: &DevState,
    a: &Args,
    version: u32,
    info: u32,
    ctx: &Ctx,
    words: &mut Words,
    privates: &mut Privates,
) -> bool {
    if version >= 3 {
        words.push(u64::MAX);
    }
    let mut failed = false;
    // The argument index and word of the last target parameter (parent of
    // lambda captures that follow it).
    let mut last_param = (usize::MAX, 0u64);
    for i in 0..a.n() {
        let t = a.ty(i);
        if t & TARGET_PARAM == 0 {
            if t & LAMBDA_CAPTURE == LAMBDA_CAPTURE {
                lambda_capture(d, a, i, last_param);
            }
            continue;
        }
        let w = if t & LITERAL != 0 {
            a.base(i)
        } else if t & PRIVATE != 0 {
            private_word(d, a, i, info, words.len(), privates).unwrap_or_else(|| {
                failed = true;
                0
            })
        } else {
            mapped_word(d, a, i, info, ctx)
        };
        last_param = (i, w);
        words.push(w);
    }
    if !privates.packed.is_empty() && !failed {
        failed = !pack_firstprivates(d, info, privates, words);
    }
    !failed
}

/// The word of private argument `i` (word index `word`): a new device
/// copy, or a place in the packed transfer (filled in later); None when
/// its block could not be allocated.
fn private_word(
    d: &DevState,
    a: &Args,
    i: usize,
    info: u32,
    word: usize,
    privates: &mut Privates,
) -> Option<u64> {
    let t = a.ty(i);
    let size = a.size(i).max(0) as u64;
    let off = a.base(i).wrapping_sub(a.begin(i));
    let first_private = t & TO != 0;
    if size == 0 {
        return Some(a.base(i));
    }
    if first_private
        && size <= FP_PACK_THRESHOLD
        && !(i + 1 < a.n() && a.ty(i + 1) & MEMBER_OF != 0)
    {
        privates.pack(word, a.begin(i), size, off);
        return Some(0);
    }
    let p = d.alloc_block(size)?;
    privates.blocks.push((p, size));
    if first_private {
        let name = if info & msg::INFO_DATA_TRANSFER != 0 {
            lookup_name(d, a.begin(i), size)
        } else {
            0
        };
        // SAFETY: the firstprivate's host range (`Args::from_raw`) into
        // its new block.
        unsafe { copy_h2d(d, name, a.begin(i), p, size) };
    }
    Some(p.wrapping_add(off))
}

/// The word of mapped argument `i`: its device address from
/// [`map_args`], or looked up (with its INFO line).
#[inline]
fn mapped_word(d: &DevState, a: &Args, i: usize, info: u32, ctx: &Ctx) -> u64 {
    if info & msg::INFO_MAPPING_EXISTS == 0 && ctx.arg_tgt[i] != NO_TGT {
        // Found or created by data_begin above; our reference keeps it.
        return ctx.arg_tgt[i].wrapping_add(a.base(i).wrapping_sub(a.begin(i)));
    }
    let hp = a.begin(i);
    let size = a.size(i).max(0) as u64;
    let off = a.base(i).wrapping_sub(hp);
    let tbl = d.table(hp, size);
    // LLVM's getTgtPtrBegin without MustContain: an entry that only
    // overlaps the argument (a struct whose declare mapper mapped
    // one member) still gives its device address, by offset.
    let tgt = match tbl.lookup(hp, size) {
        Some((k, _)) => {
            let e = tbl.get(k).unwrap();
            let tgt = e.tgt_of(hp);
            if info & msg::INFO_MAPPING_EXISTS != 0 {
                let (dc, hc) = counts(e, false, " (update suppressed)");
                msg::dev_info(
                    d.id,
                    &format!(
                        "Mapping exists with HstPtrBegin={}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}",
                        P(hp),
                        P(tgt)
                    ),
                );
            }
            tgt
        }
        // Not mapped: the kernel sees the host address (OpenMP 5.2).
        _ => hp,
    };
    tgt.wrapping_add(off)
}

/// Run the kernel with `words`; a failure is LLVM's fatal error.
#[inline]
fn launch(
    d: &DevState,
    kernel: KernelRef,
    ka: &KernelArgsTy,
    words: &[u64],
    info: u32,
    loc: *const Ident,
    read_back: Option<&Args>,
) {
    // SAFETY: kernel pointers live as long as the device's loaded programs.
    let k = unsafe { &*kernel.0 };
    let config = launch_config(ka);
    if info & msg::INFO_PLUGIN_KERNEL != 0 {
        print_launch(d.id, k, &config);
    }
    let result = match read_back {
        Some(a) => d
            .dev
            .launch_reading_back(k, KernelArgs::Words(words), &config, || {
                read_back_ranges(d, a)
            }),
        None => d.dev.launch(k, KernelArgs::Words(words), &config),
    };
    if let Err(e) = result {
        msg::plugin_error(&format!("Failure to run target region {}", k.name()), &e);
        msg::error("Executing target region abort target.");
        target_failed(loc);
    }
}

/// Unmap the kernel's arguments (targetDataEnd).
#[inline]
fn unmap_args(d: &DevState, a: &Args, loc: *const Ident) {
    if a.n() > 0 && data_end(d, a, false, false).is_err() {
        msg::error("Call to targetDataEnd failed, abort target.");
        msg::error("Failed to process data after launching the kernel.");
        target_failed(loc);
    }
}

/// The end of a batched region: the launch waited for the copies in; this
/// only reports one left unwaited (none in practice).
#[inline]
fn end_batch(d: &DevState, loc: *const Ident) {
    if let Err(e) = d.dev.batch_end() {
        msg::plugin_error("Failure to copy data from host to device", &e);
        msg::error("Failed to process data before launching the kernel.");
        target_failed(loc);
    }
}

/// The device ranges the end of a region may copy back (FROM maps of
/// mapped, small ranges), read with the launch where the plugin can tell
/// they are still current when the copy comes (`launch_reading_back`).
fn read_back_ranges(d: &DevState, a: &Args) -> SmallVec<[(DevicePtr, usize); 4]> {
    const MAX_ONE: u64 = 16 << 10;
    const MAX_ALL: u64 = 64 << 10;
    let mut back = SmallVec::new();
    let mut total = 0u64;
    for i in 0..a.n() {
        let t = a.ty(i);
        let size = a.size(i).max(0) as u64;
        if t & FROM == 0
            || t & (LITERAL | PRIVATE | ATTACH) != 0
            || a.mapper(i) != 0
            || size == 0
            || size > MAX_ONE
            || total + size > MAX_ALL
        {
            continue;
        }
        let hp = a.begin(i);
        let tbl = d.table(hp, size);
        // As `data_end_inner` finds the entry it copies from.
        let key = match tbl.lookup(hp, size) {
            Some((k, Found::Contained)) => Some(k),
            Some((k, Found::Extends)) if t & IMPLICIT != 0 => Some(k),
            _ => None,
        };
        if let Some(e) = key.and_then(|k| tbl.get(k)).filter(|e| !e.host_ptr) {
            back.push((DevicePtr(e.tgt_of(hp)), size as usize));
            total += size;
        }
    }
    back
}

/// LLVM's INFO line for a launch: the grid an OpenMP kernel of a GPU-like
/// plugin really gets and its mode; host kernels print what LLVM's host
/// plugin prints (one team of one thread, generic).
#[cold]
fn print_launch(device: usize, k: &offload_core::Kernel, config: &LaunchConfig) {
    let (blocks, threads, mode) = match k.launch_plan(config) {
        Some((c, m)) => (c.num_groups, c.group_size, m.llvm_name()),
        None => ([1, 1, 1], [1, 1, 1], "Generic"),
    };
    msg::eprint_line(&format!(
        "\"PluginInterface\" device {device} info: Launching kernel {} with [{},{},{}] blocks and [{},{},{}] threads in {mode} mode",
        k.name(),
        blocks[0],
        blocks[1],
        blocks[2],
        threads[0],
        threads[1],
        threads[2]
    ));
}

#[cfg(test)]
mod launch_tests {
    #[test]
    fn a_target_that_is_not_a_teams_construct_runs_one_team() {
        assert_eq!(super::teams_of([u32::MAX, 0, 0]), [1, 0, 0]);
        assert_eq!(super::teams_of([0, 0, 0]), [0, 0, 0]);
        assert_eq!(super::teams_of([7, 1, 1]), [7, 1, 1]);
    }
}
