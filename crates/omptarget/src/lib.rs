//! libomptarget.so.22.1: the OpenMP offload face of the runtime.
//!
//! Every `extern "C"` entry point runs inside `guard!`, which turns a Rust
//! panic into LLVM's fatal-error-and-abort instead of unwinding into C.
//!
//! # The C boundary
//!
//! One convention for both C faces (this one and liboffload's): an entry
//! point that takes a pointer is an `unsafe extern "C" fn`, and its
//! `# Safety` contract is the ABI LLVM 22's libomptarget has for it (the
//! layouts are in [`abi`]): a pointer is null only where the entry point
//! allows it, and otherwise valid for the counts and sizes its other
//! arguments give, for the call (an image descriptor and an `ident_t`: for
//! as long as the program runs). Entry points without pointers are safe.
//! Raw pointers are turned into the face's own types here and nowhere
//! deeper: argument arrays into [`args::Args`] (`Args::from_raw`), source
//! locations into [`abi::IdentRef`]; the modules below take those types.

// Both lints keep the convention above (they are warnings by default; CI
// denies warnings).
#![deny(clippy::missing_safety_doc, clippy::not_unsafe_ptr_arg_deref)]

pub mod abi;
pub mod addr;
pub mod api;
pub mod args;
pub mod construct;
pub mod descriptor;
pub mod device;
pub mod devices;
pub mod dump;
pub mod enter;
pub mod exit;
pub mod host_lock;
pub mod interop;
pub mod kernels;
pub mod launch;
pub mod libomp;
pub mod loading;
pub mod mapper;
pub mod mapping;
pub mod msg;
pub mod policy;
pub mod report;
pub mod requires;
pub mod shards;
pub mod state;
pub mod target;
pub mod transfer;
pub mod update;

use std::ffi::{c_char, c_void};

use abi::*;
use args::Args;
use offload_core::AllocKind;
use target::DataKind;

macro_rules! guard {
    ($($body:tt)*) => {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| { $($body)* })) {
            Ok(v) => v,
            Err(_) => $crate::msg::fatal(1, "internal error in libomptarget (Rust panic)"),
        }
    };
}

type Ptrs = *mut *mut c_void;

// ------------------------------------------------------------ registration

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_register_lib(desc: *const BinDesc) {
    // SAFETY: clang's descriptor: static data that outlives the
    // registration (`__tgt_unregister_lib` comes from the same module).
    guard!(unsafe { state::register(desc) })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_unregister_lib(desc: *const BinDesc) {
    guard!(state::unregister(desc))
}

#[no_mangle]
pub extern "C" fn __tgt_init_all_rtls() {
    guard!({
        let _ = state::state();
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_init() {
    guard!({
        let _ = state::state();
    })
}

#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit() {}

#[no_mangle]
pub extern "C" fn __tgt_register_requires(_flags: i64) {
    guard!(msg::message(
        "The __tgt_register_requires function has been removed. Old OpenMP requirements will not be handled"
    ))
}

// ------------------------------------------------------------ kernels

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_kernel(
    loc: *const Ident,
    device: i64,
    _num_teams: i32,
    _thread_limit: i32,
    host_ptr: *mut c_void,
    args: *const KernelArgsTy,
) -> i32 {
    guard!({
        if args.is_null() {
            return -1;
        }
        // SAFETY: clang passes a `KernelArgsTy` valid for the call.
        let ka = unsafe { &*args };
        // SAFETY: its arrays hold `num_args` entries (clang's contract;
        // `arg_base_ptrs` is the writable `.offload_baseptrs` array).
        let a = unsafe { Args::from_kernel_args(ka) };
        // SAFETY: clang's `ident_t` (static) or null.
        let loc = unsafe { IdentRef::from_raw(loc) };
        launch::target_kernel(loc, device, host_ptr, ka, &a)
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_kernel_nowait(
    loc: *const Ident,
    device: i64,
    num_teams: i32,
    thread_limit: i32,
    host_ptr: *mut c_void,
    args: *const KernelArgsTy,
    _dep_num: i32,
    _deps: *mut c_void,
    _ndn: i32,
    _nd: *mut c_void,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe { __tgt_target_kernel(loc, device, num_teams, thread_limit, host_ptr, args) }
}

/// The legacy `__tgt_target*` entry points as a `__tgt_target_kernel` call.
///
/// # Safety
/// The arrays hold `n` entries each, as [`Args::from_raw`] states.
#[allow(clippy::too_many_arguments)]
unsafe fn legacy_kernel(
    loc: *const Ident,
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    names: Ptrs,
    mappers: Ptrs,
    teams: i32,
    limit: i32,
) -> i32 {
    let ka = KernelArgsTy {
        version: 1,
        num_args: n.max(0) as u32,
        arg_base_ptrs: base,
        arg_ptrs: args,
        arg_sizes: sizes,
        arg_types: types,
        arg_names: names,
        arg_mappers: mappers,
        tripcount: 0,
        flags: 0,
        num_teams: [teams.max(0) as u32, 0, 0],
        thread_limit: [limit.max(0) as u32, 0, 0],
        dyn_cgroup_mem: 0,
    };
    // SAFETY: `ka` is a local `KernelArgsTy` over the caller's arrays
    // (this function's contract).
    unsafe { __tgt_target_kernel(loc, device, teams, limit, host_ptr, &ka) }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target(
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged; a
    // `target` is a teams launch of no teams clause (-1) and no limit.
    unsafe { __tgt_target_teams(device, host_ptr, n, base, args, sizes, types, -1, 0) }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_nowait(
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    _a: i32,
    _b: *mut c_void,
    _c: i32,
    _d: *mut c_void,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe { __tgt_target(device, host_ptr, n, base, args, sizes, types) }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_mapper(
    loc: *const Ident,
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    names: Ptrs,
    mappers: Ptrs,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe {
        legacy_kernel(
            loc, device, host_ptr, n, base, args, sizes, types, names, mappers, -1, 0,
        )
    }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_nowait_mapper(
    loc: *const Ident,
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    names: Ptrs,
    mappers: Ptrs,
    _a: i32,
    _b: *mut c_void,
    _c: i32,
    _d: *mut c_void,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe {
        __tgt_target_mapper(
            loc, device, host_ptr, n, base, args, sizes, types, names, mappers,
        )
    }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_teams(
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    teams: i32,
    limit: i32,
) -> i32 {
    let z = std::ptr::null_mut();
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe {
        legacy_kernel(
            std::ptr::null(),
            device,
            host_ptr,
            n,
            base,
            args,
            sizes,
            types,
            z,
            z,
            teams,
            limit,
        )
    }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_teams_nowait(
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    teams: i32,
    limit: i32,
    _a: i32,
    _b: *mut c_void,
    _c: i32,
    _d: *mut c_void,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe { __tgt_target_teams(device, host_ptr, n, base, args, sizes, types, teams, limit) }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_teams_mapper(
    loc: *const Ident,
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    names: Ptrs,
    mappers: Ptrs,
    teams: i32,
    limit: i32,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe {
        legacy_kernel(
            loc, device, host_ptr, n, base, args, sizes, types, names, mappers, teams, limit,
        )
    }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_teams_nowait_mapper(
    loc: *const Ident,
    device: i64,
    host_ptr: *mut c_void,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    names: Ptrs,
    mappers: Ptrs,
    teams: i32,
    limit: i32,
    _a: i32,
    _b: *mut c_void,
    _c: i32,
    _d: *mut c_void,
) -> i32 {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe {
        legacy_kernel(
            loc, device, host_ptr, n, base, args, sizes, types, names, mappers, teams, limit,
        )
    }
}

#[no_mangle]
pub extern "C" fn __kmpc_push_target_tripcount(_device: i64, _count: u64) {}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __kmpc_push_target_tripcount_mapper(
    _loc: *const Ident,
    _device: i64,
    _count: u64,
) {
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_nowait_query(async_handle: *mut *mut c_void) {
    if !async_handle.is_null() {
        // Everything runs synchronously: nothing is ever pending.
        // SAFETY: libomp passes the address of the task's handle slot.
        unsafe { *async_handle = std::ptr::null_mut() };
    }
}

// ------------------------------------------------------------ data

#[allow(clippy::too_many_arguments)]
fn data(
    loc: *const Ident,
    device: i64,
    n: i32,
    base: Ptrs,
    args: Ptrs,
    sizes: *mut i64,
    types: *mut i64,
    names: Ptrs,
    mappers: Ptrs,
    kind: DataKind,
) {
    guard!({
        // SAFETY: clang passes `n` entries in each array (names and
        // mappers may be null), valid for the call; `base` is writable.
        let a = unsafe {
            Args::from_raw(
                n.max(0) as usize,
                base,
                args,
                sizes,
                types,
                names as *const *mut c_void,
                mappers as *const *mut c_void,
            )
        };
        // SAFETY: clang's `ident_t` (static) or null.
        let loc = unsafe { IdentRef::from_raw(loc) };
        target::target_data(loc, device, &a, kind)
    })
}

macro_rules! data_fns {
    ($kind:expr, $mapper:ident, $nowait_mapper:ident, $plain:ident, $nowait:ident) => {
        /// # Safety
        /// The C ABI contract of this entry point (see the crate doc).
        #[no_mangle]
        pub unsafe extern "C" fn $mapper(
            loc: *const Ident,
            device: i64,
            n: i32,
            base: Ptrs,
            args: Ptrs,
            sizes: *mut i64,
            types: *mut i64,
            names: Ptrs,
            mappers: Ptrs,
        ) {
            data(
                loc, device, n, base, args, sizes, types, names, mappers, $kind,
            )
        }

        /// # Safety
        /// The C ABI contract of this entry point (see the crate doc).
        #[no_mangle]
        pub unsafe extern "C" fn $nowait_mapper(
            loc: *const Ident,
            device: i64,
            n: i32,
            base: Ptrs,
            args: Ptrs,
            sizes: *mut i64,
            types: *mut i64,
            names: Ptrs,
            mappers: Ptrs,
            _dep_num: i32,
            _deps: *mut c_void,
            _ndn: i32,
            _nd: *mut c_void,
        ) {
            data(
                loc, device, n, base, args, sizes, types, names, mappers, $kind,
            )
        }

        /// # Safety
        /// The C ABI contract of this entry point (see the crate doc).
        #[no_mangle]
        pub unsafe extern "C" fn $plain(
            device: i64,
            n: i32,
            base: Ptrs,
            args: Ptrs,
            sizes: *mut i64,
            types: *mut i64,
        ) {
            let z = std::ptr::null_mut();
            data(
                std::ptr::null(),
                device,
                n,
                base,
                args,
                sizes,
                types,
                z,
                z,
                $kind,
            )
        }

        /// # Safety
        /// The C ABI contract of this entry point (see the crate doc).
        #[no_mangle]
        pub unsafe extern "C" fn $nowait(
            device: i64,
            n: i32,
            base: Ptrs,
            args: Ptrs,
            sizes: *mut i64,
            types: *mut i64,
            _dep_num: i32,
            _deps: *mut c_void,
            _ndn: i32,
            _nd: *mut c_void,
        ) {
            let z = std::ptr::null_mut();
            data(
                std::ptr::null(),
                device,
                n,
                base,
                args,
                sizes,
                types,
                z,
                z,
                $kind,
            )
        }
    };
}

data_fns!(
    DataKind::Begin,
    __tgt_target_data_begin_mapper,
    __tgt_target_data_begin_nowait_mapper,
    __tgt_target_data_begin,
    __tgt_target_data_begin_nowait
);
data_fns!(
    DataKind::End,
    __tgt_target_data_end_mapper,
    __tgt_target_data_end_nowait_mapper,
    __tgt_target_data_end,
    __tgt_target_data_end_nowait
);
data_fns!(
    DataKind::Update,
    __tgt_target_data_update_mapper,
    __tgt_target_data_update_nowait_mapper,
    __tgt_target_data_update,
    __tgt_target_data_update_nowait
);

/// The number of components a mapper has pushed to `handle`.
/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_mapper_num_components(handle: *mut c_void) -> i64 {
    if handle.is_null() {
        return 0;
    }
    // SAFETY: LLVM's contract: the handle is a `MapperComponentsTy` (ours,
    // passed to the mapper function that calls us) or a caller's struct
    // that starts with its header.
    guard!(i64::from(unsafe {
        mapper::len(handle as *const mapper::Header)
    }))
}

/// Appends one component to `handle` (see [`mapper`] for the layout).
/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_push_mapper_component(
    handle: *mut c_void,
    base: *mut c_void,
    begin: *mut c_void,
    size: i64,
    ty: i64,
    name: *mut c_void,
) {
    if handle.is_null() {
        return;
    }
    let c = mapper::MapComponent {
        base,
        begin,
        size,
        ty,
        name,
    };
    // SAFETY: as in `__tgt_mapper_num_components`; the header is writable.
    let pushed = guard!(unsafe { mapper::push(handle as *mut mapper::Header, c) });
    if let Err(e) = pushed {
        msg::fatal(1, &format!("cannot add a mapper component: {e}"));
    }
}

// ------------------------------------------------------------ OpenMP API

#[no_mangle]
pub extern "C" fn omp_get_num_devices() -> i32 {
    guard!(devices::num_devices() as i32)
}

#[no_mangle]
pub extern "C" fn omp_get_device_num() -> i32 {
    guard!(api::initial_device() as i32)
}

#[no_mangle]
pub extern "C" fn omp_get_initial_device() -> i32 {
    guard!(api::initial_device() as i32)
}

#[no_mangle]
pub extern "C" fn omp_get_uid_from_device(dev: i32) -> *const c_char {
    guard!(api::uid_from_device(dev as i64))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_device_from_uid(uid: *const c_char) -> i32 {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::device_from_uid(uid) }
    })
}

#[no_mangle]
pub extern "C" fn omp_target_alloc(size: usize, dev: i32) -> *mut c_void {
    guard!(api::target_alloc(size, dev as i64, AllocKind::Device))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_free(p: *mut c_void, dev: i32) {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::target_free(p, dev as i64) }
    })
}

#[no_mangle]
pub extern "C" fn llvm_omp_target_alloc_device(size: usize, dev: i32) -> *mut c_void {
    guard!(api::target_alloc(size, dev as i64, AllocKind::Device))
}
#[no_mangle]
pub extern "C" fn llvm_omp_target_alloc_host(size: usize, dev: i32) -> *mut c_void {
    guard!(api::target_alloc(size, dev as i64, AllocKind::Host))
}
#[no_mangle]
pub extern "C" fn llvm_omp_target_alloc_shared(size: usize, dev: i32) -> *mut c_void {
    guard!(api::target_alloc(size, dev as i64, AllocKind::Shared))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn llvm_omp_target_free_device(p: *mut c_void, dev: i32) {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::target_free(p, dev as i64) }
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn llvm_omp_target_free_host(p: *mut c_void, dev: i32) {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::target_free(p, dev as i64) }
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn llvm_omp_target_free_shared(p: *mut c_void, dev: i32) {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::target_free(p, dev as i64) }
    })
}
#[no_mangle]
pub extern "C" fn llvm_omp_target_dynamic_shared_alloc() -> *mut c_void {
    std::ptr::null_mut()
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn llvm_omp_target_lock_mem(
    p: *mut c_void,
    size: usize,
    dev: i32,
) -> *mut c_void {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { host_lock::lock_mem(p, size, dev as i64) }
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn llvm_omp_target_unlock_mem(p: *mut c_void, dev: i32) {
    guard!(host_lock::unlock_mem(p, dev as i64))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy(
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    dst_off: usize,
    src_off: usize,
    dst_dev: i32,
    src_dev: i32,
) -> i32 {
    guard!({
        if dst.is_null() || src.is_null() {
            return -1;
        }
        // SAFETY: the OpenMP API's contract: host sides name `len` valid
        // bytes at the given offsets.
        unsafe {
            api::memcpy(
                dst as u64 + dst_off as u64,
                src as u64 + src_off as u64,
                len,
                dst_dev as i64,
                src_dev as i64,
            )
        }
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    dst_off: usize,
    src_off: usize,
    dst_dev: i32,
    src_dev: i32,
    depobj_count: i32,
    depobj_list: *mut c_void,
) -> i32 {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::wait_depobjs(depobj_count, depobj_list as *const *const c_void) }
    });
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe { omp_target_memcpy(dst, src, len, dst_off, src_off, dst_dev, src_dev) }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy_rect(
    dst: *mut c_void,
    src: *const c_void,
    elem: usize,
    ndims: i32,
    volume: *const usize,
    dst_off: *const usize,
    src_off: *const usize,
    dst_dims: *const usize,
    src_dims: *const usize,
    dst_dev: i32,
    src_dev: i32,
) -> i32 {
    // SAFETY: the OpenMP API's contract: the arrays hold `ndims` elements
    // and describe rectangles inside the named memory.
    guard!(unsafe {
        api::memcpy_rect(
            dst as u64,
            src as u64,
            elem,
            ndims.max(0) as usize,
            volume,
            dst_off,
            src_off,
            dst_dims,
            src_dims,
            dst_dev as i64,
            src_dev as i64,
        )
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_memcpy_rect_async(
    dst: *mut c_void,
    src: *const c_void,
    elem: usize,
    ndims: i32,
    volume: *const usize,
    dst_off: *const usize,
    src_off: *const usize,
    dst_dims: *const usize,
    src_dims: *const usize,
    dst_dev: i32,
    src_dev: i32,
    depobj_count: i32,
    depobj_list: *mut c_void,
) -> i32 {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::wait_depobjs(depobj_count, depobj_list as *const *const c_void) }
    });
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe {
        omp_target_memcpy_rect(
            dst, src, elem, ndims, volume, dst_off, src_off, dst_dims, src_dims, dst_dev, src_dev,
        )
    }
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_memset(
    p: *mut c_void,
    val: i32,
    n: usize,
    dev: i32,
) -> *mut c_void {
    // SAFETY: the OpenMP API's contract: `n` writable bytes at `p`.
    guard!(unsafe { api::memset(p, val, n, dev as i64) })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_memset_async(
    p: *mut c_void,
    val: i32,
    n: usize,
    dev: i32,
    depobj_count: i32,
    depobj_list: *mut c_void,
) -> *mut c_void {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { api::wait_depobjs(depobj_count, depobj_list as *const *const c_void) };
        // SAFETY: as for `omp_target_memset`.
        unsafe { api::memset(p, val, n, dev as i64) }
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_is_present(p: *const c_void, dev: i32) -> i32 {
    guard!(api::is_present(p, dev as i64))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_is_accessible(
    _p: *const c_void,
    _size: usize,
    dev: i32,
) -> i32 {
    // Out-of-range devices are fatal; host memory is not "accessible" from
    // the host plugin's devices in LLVM 22 either.
    guard!(api::checked_device(dev as i64).is_none() as i32)
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_associate_ptr(
    host: *const c_void,
    dptr: *const c_void,
    size: usize,
    off: usize,
    dev: i32,
) -> i32 {
    guard!(api::associate(
        addr::HostAddr::of(host),
        offload_core::DevicePtr(dptr as u64),
        size,
        off,
        dev as i64
    ))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_target_disassociate_ptr(host: *const c_void, dev: i32) -> i32 {
    guard!(api::disassociate(addr::HostAddr::of(host), dev as i64))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_mapped_ptr(p: *const c_void, dev: i32) -> *mut c_void {
    guard!(api::mapped_ptr(p, dev as i64))
}

// ------------------------------------------------------------ interop (interop.rs)

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_int(i: *const c_void, p: i32, rc: *mut i32) -> isize {
    guard!(interop::get_int(i, p, rc))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_ptr(
    i: *const c_void,
    p: i32,
    rc: *mut i32,
) -> *mut c_void {
    guard!(interop::get_ptr(i, p, rc))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_str(
    i: *const c_void,
    p: i32,
    rc: *mut i32,
) -> *const c_char {
    guard!(interop::get_str(i, p, rc))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_name(i: *const c_void, p: i32) -> *const c_char {
    guard!(interop::name(i, p))
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_type_desc(i: *const c_void, p: i32) -> *const c_char {
    guard!(interop::type_desc(i, p))
}
/// Not exported by LLVM 22's libomptarget. Programs call libomp's
/// omp_get_interop_rc_desc (libomp is first in their search order), which
/// forwards with dlsym(RTLD_NEXT, "omp_get_interop_rec_desc") — misspelt in
/// LLVM 22's libomp — so both names are exported.
/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_rc_desc(i: *const c_void, rc: i32) -> *const c_char {
    guard!(interop::rc_desc(i, rc))
}
/// The name LLVM 22's libomp looks up for omp_get_interop_rc_desc.
/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_interop_rec_desc(i: *const c_void, rc: i32) -> *const c_char {
    // SAFETY: this entry point's own contract, passed on unchanged.
    unsafe { omp_get_interop_rc_desc(i, rc) }
}
/// Not exported by LLVM 22's libomptarget; libomp forwards here.
/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn omp_get_num_interop_properties(i: *const c_void) -> i32 {
    guard!(interop::num_properties(i))
}

/// `#pragma omp interop init(...)` as clang-22 lowers it (`interop` is the
/// address of the `omp_interop_t` variable; `ty` 1 = target, 2 = targetsync;
/// `dev` -1 without a device clause).
/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_init(
    loc: *const Ident,
    gtid: i32,
    interop: *mut *mut c_void,
    ty: i32,
    dev: i32,
    ndeps: i32,
    deps: *const interop::DependInfo,
    _nowait: i32,
) {
    guard!({
        if interop.is_null() {
            return;
        }
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { interop::wait_deps(loc.cast(), gtid, (ndeps, deps), (0, std::ptr::null())) };
        let obj = interop::create(interop::Kind::from_clang(ty), dev as i64, None);
        // SAFETY: clang passes the address of the `omp_interop_t` variable
        // (not null: checked above).
        unsafe { *interop = obj };
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_use(
    loc: *const Ident,
    gtid: i32,
    interop: *mut *mut c_void,
    _dev: i32,
    ndeps: i32,
    deps: *const interop::DependInfo,
    _nowait: i32,
) {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { interop::wait_deps(loc.cast(), gtid, (ndeps, deps), (0, std::ptr::null())) };
        if !interop.is_null() {
            // SAFETY: the address of the program's `omp_interop_t` variable.
            interop::sync(unsafe { *interop });
        }
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_destroy(
    loc: *const Ident,
    gtid: i32,
    interop: *mut *mut c_void,
    _dev: i32,
    ndeps: i32,
    deps: *const interop::DependInfo,
    _nowait: i32,
) {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { interop::wait_deps(loc.cast(), gtid, (ndeps, deps), (0, std::ptr::null())) };
        if !interop.is_null() {
            // SAFETY: the address of the program's `omp_interop_t` variable.
            interop::release(unsafe { *interop });
            // SAFETY: as above; it becomes `omp_interop_none`.
            unsafe { *interop = std::ptr::null_mut() };
        }
    })
}

/// LLVM's `interop_ctx_t`: version, flags (bit 0 implicit, bit 1 nowait), gtid.
#[repr(C)]
pub struct InteropCtx {
    pub version: u32,
    pub flags: u32,
    pub gtid: i32,
}
/// LLVM's `dep_pack_t`.
#[repr(C)]
pub struct DepPack {
    pub ndeps: i32,
    pub deplist: *const interop::DependInfo,
    pub ndeps_noalias: i32,
    pub noalias_deplist: *const interop::DependInfo,
}

/// # Safety
/// `loc` is null or clang's `ident_t`; `ctx` and `deps` are null or live
/// LLVM `interop_ctx_t` / `dep_pack_t` records.
unsafe fn ctx_deps(loc: *const Ident, ctx: *const InteropCtx, deps: *const DepPack) -> (i32, bool) {
    // SAFETY: LLVM's contract: `ctx` is null or a live `interop_ctx_t`.
    let ctx = unsafe { ctx.as_ref() };
    let gtid = ctx.map_or(0, |c| c.gtid);
    // SAFETY: LLVM's contract: `deps` is null or a live `dep_pack_t`.
    if let Some(d) = unsafe { deps.as_ref() } {
        // SAFETY: LLVM's contract: the pack's lists hold their counts.
        unsafe {
            interop::wait_deps(
                loc.cast(),
                gtid,
                (d.ndeps, d.deplist),
                (d.ndeps_noalias, d.noalias_deplist),
            )
        };
    }
    (gtid, ctx.is_some_and(|c| c.flags & 1 != 0))
}

/// The OpenMP 6.0 entry (LLVM 22; not emitted by clang-22): `ty` is LLVM's
/// `kmp_interop_type_t` (0 target, 1 targetsync); preferences are ignored
/// (the foreign runtime is always liboffload).
/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_get(
    loc: *const Ident,
    ty: i32,
    dev: i64,
    _num_prefers: i32,
    _prefers: *const c_void,
    ctx: *const InteropCtx,
    deps: *const DepPack,
) -> *mut c_void {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        let (gtid, implicit) = unsafe { ctx_deps(loc, ctx, deps) };
        interop::create(interop::Kind::from_kmp(ty), dev, implicit.then_some(gtid))
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_use60(
    loc: *const Ident,
    obj: *mut c_void,
    ctx: *const InteropCtx,
    deps: *const DepPack,
) -> i32 {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { ctx_deps(loc, ctx, deps) };
        interop::sync(obj)
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_interop_release(
    loc: *const Ident,
    obj: *mut c_void,
    ctx: *const InteropCtx,
    deps: *const DepPack,
) -> i32 {
    guard!({
        // SAFETY: this entry point's own contract, passed on unchanged.
        unsafe { ctx_deps(loc, ctx, deps) };
        interop::release(obj)
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn ompx_interop_add_completion_callback(
    obj: *mut c_void,
    cb: Option<interop::CompletionCb>,
    data: *mut c_void,
) -> i32 {
    guard!(interop::add_completion_callback(obj, cb, data))
}

// ------------------------------------------------------------ tools / misc

#[no_mangle]
pub extern "C" fn __tgt_set_info_flag(flags: u32) {
    msg::set_info(flags)
}

#[no_mangle]
pub extern "C" fn __tgt_print_device_info(dev: i64) {
    guard!(api::print_device_info(dev))
}

#[no_mangle]
pub extern "C" fn ompx_dump_mapping_tables() {
    guard!(report::dump_tables_to_stdout())
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_activate_record_replay(
    _dev: i64,
    _size: u64,
    _vaddr: *mut c_void,
    _is_record: bool,
    _save: bool,
    _offset: *mut u64,
) -> i32 {
    guard!({
        msg::error("record and replay are not supported by this runtime");
        -1
    })
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_kernel_replay(
    _loc: *const Ident,
    _dev: i64,
    _host_ptr: *mut c_void,
    _mem: *mut c_void,
    _mem_size: i64,
    _args: Ptrs,
    _offsets: *mut i64,
    _n: i32,
    _teams: i32,
    _limit: i32,
    _tripcount: u64,
) -> i32 {
    -1
}

/// # Safety
/// The C ABI contract of this entry point (see the crate doc).
#[no_mangle]
pub unsafe extern "C" fn __tgt_target_sync(
    _loc: *const Ident,
    _gtid: i32,
    _task: *mut c_void,
    _event: *mut c_void,
) {
}

#[no_mangle]
pub extern "C" fn __llvmPushCallConfiguration() -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn __llvmPopCallConfiguration() -> u32 {
    0
}
#[no_mangle]
pub extern "C" fn llvmLaunchKernel() -> u32 {
    1
}
