//! The argument arrays of a mapping construct or target region, as clang
//! passes them (the one place that reads them through raw pointers),
//! declare-mapper expansion into arrays of the runtime's own, and the walk
//! over a construct's mapped arguments that every mapping construct shares.

use std::ffi::c_void;

use crate::abi::*;
use crate::addr::HostAddr;
use crate::mapper::MapperComponents;

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
    /// pointer slot is the program's memory, live for the construct; the
    /// `begin` of a NON_CONTIG entry points to `sizes[i]` readable
    /// [`NonContig`] descriptors; a non-null name is a C string; a non-null
    /// mapper is a mapper function of clang's signature (`MapperFn`).
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
    /// The base of argument `i` as a host address (a PTR_AND_OBJ's or
    /// ATTACH's pointer slot, a struct's base); [`Self::base`] is the raw
    /// word (a literal's value).
    #[inline]
    pub fn base_addr(&self, i: usize) -> HostAddr {
        HostAddr(self.base(i))
    }
    /// The host address argument `i` maps.
    #[inline]
    pub fn begin(&self, i: usize) -> HostAddr {
        let p: *mut c_void = self.at(self.begin as *const *mut c_void, i);
        HostAddr::of(p)
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

    /// The dimensions of NON_CONTIG argument `i` (`size(i)` descriptors at
    /// its begin); empty for a size of 0 or less.
    pub fn non_contig(&self, i: usize) -> &'a [NonContig] {
        assert!(
            self.ty(i) & NON_CONTIG != 0,
            "argument {i} is not NON_CONTIG"
        );
        let dims = self.size(i).max(0) as usize;
        if dims == 0 {
            return &[];
        }
        // SAFETY: a NON_CONTIG entry's begin points to `sizes[i]` readable
        // descriptors, live for `'a` (`from_raw`'s contract).
        unsafe { std::slice::from_raw_parts(self.begin(i).as_ptr::<NonContig>(), dims) }
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

type MapperFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, i64, i64, *mut c_void);

pub(crate) struct OwnedArgs {
    base: Vec<*mut c_void>,
    begin: Vec<*mut c_void>,
    sizes: Vec<i64>,
    types: Vec<i64>,
    names: Vec<*mut c_void>,
}

impl OwnedArgs {
    /// The arrays as [`Args`] (borrowing `self`).
    pub(crate) fn args(&mut self) -> Args<'_> {
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
pub(crate) fn run_mapper(a: &Args, i: usize) -> OwnedArgs {
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
            a.begin(i).as_mut_ptr::<c_void>(),
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

/// The order in which [`walk_mapped`] visits a construct's arguments.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// First to last (mapping in, updates).
    Forward,
    /// Last to first (unmapping: members before their struct).
    Reverse,
}

/// Visit the mapped arguments of a construct in `order`: each argument
/// that is neither literal nor private, with a declare mapper's components
/// visited in its place (recursively). `visit(args, i, from_mapper)` gets
/// the arrays the argument is in and whether a mapper pushed it; the walk
/// stops at its first error.
#[inline]
pub(crate) fn walk_mapped<E>(
    a: &Args,
    order: Order,
    visit: &mut impl FnMut(&Args, usize, bool) -> Result<(), E>,
) -> Result<(), E> {
    walk(a, order, false, visit)
}

/// One level of [`walk_mapped`]: inlined into each construct's walk (as
/// the loop it replaces was); a mapper's components recurse out of line.
#[inline]
fn walk<E, F>(a: &Args, order: Order, from_mapper: bool, visit: &mut F) -> Result<(), E>
where
    F: FnMut(&Args, usize, bool) -> Result<(), E>,
{
    let n = a.n();
    for k in 0..n {
        let i = match order {
            Order::Forward => k,
            Order::Reverse => n - 1 - k,
        };
        if a.ty(i) & (LITERAL | PRIVATE) != 0 {
            continue;
        }
        if a.mapper(i) != 0 {
            walk_mapper(a, i, order, visit)?;
            continue;
        }
        visit(a, i, from_mapper)?;
    }
    Ok(())
}

/// [`walk`] over the components the declare mapper of argument `i` pushes.
#[inline(never)]
fn walk_mapper<E, F>(a: &Args, i: usize, order: Order, visit: &mut F) -> Result<(), E>
where
    F: FnMut(&Args, usize, bool) -> Result<(), E>,
{
    let mut components = run_mapper(a, i);
    walk(&components.args(), order, true, visit)
}
