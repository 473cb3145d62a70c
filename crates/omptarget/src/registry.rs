//! Global state: policy, registered descriptors, per-device loaded state.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use offload_core::plugin::DevicePtr;
use offload_core::{BinaryId, OffloadEntry};
use offload_image::DeviceImage;

use crate::abi::*;
use crate::mapping::{Entry, INF};
use crate::msg;
use crate::shards::{ShardedTable, View};

// ---------------------------------------------------------------- policy

pub const POLICY_DISABLED: u8 = 0;
pub const POLICY_MANDATORY: u8 = 2;
static POLICY: AtomicU8 = AtomicU8::new(0xFF);

pub fn dlsym_default(name: &CStr) -> *mut c_void {
    // SAFETY: looking up a symbol by a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// 0 disabled, 2 mandatory (default becomes mandatory when devices exist).
#[inline]
pub fn policy() -> u8 {
    let p = POLICY.load(Ordering::Relaxed);
    if p != 0xFF {
        return p;
    }
    let p = match raw_policy().unwrap_or(1) {
        0 => POLICY_DISABLED,
        2 => POLICY_MANDATORY,
        _ => {
            if usable_devices() == 0 {
                POLICY_DISABLED
            } else {
                POLICY_MANDATORY
            }
        }
    };
    POLICY.store(p, Ordering::Relaxed);
    p
}

pub fn offload_disabled() -> bool {
    policy() == POLICY_DISABLED
}

/// Number of devices (0 when offloading is disabled).
pub fn num_devices() -> usize {
    if offload_disabled() {
        0
    } else {
        usable_devices()
    }
}

/// Devices that count for OpenMP: like LLVM's libomptarget, which adds a
/// plugin's devices only when an image registered with it can run there,
/// the devices count once some registered image runs on one of them, and
/// not before. A program built only for a GPU on a machine without one
/// thus sees 0 devices (host fallback, or LLVM's fatal error under
/// `OMP_TARGET_OFFLOAD=MANDATORY`) instead of devices that have no kernel.
pub fn usable_devices() -> usize {
    state().usable.load(Ordering::Acquire)
}

/// The devices that count (see [`usable_devices`]).
pub fn visible_devices() -> &'static [DevState] {
    let st = state();
    &st.devices[..usable_devices().min(st.devices.len())]
}

pub fn default_device() -> i64 {
    static F: OnceLock<usize> = OnceLock::new();
    let f = *F.get_or_init(|| dlsym_default(c"omp_get_default_device") as usize);
    if f == 0 {
        return 0;
    }
    // SAFETY: libomp's `int omp_get_default_device(void)`.
    let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(f) };
    f() as i64
}

/// Resolve a device id for a construct at `loc`: Some(index) to offload,
/// None for host execution. Out-of-range ids are fatal, like LLVM, and so is
/// any construct when offloading is mandatory but no device is usable
/// (LLVM's checkDevice: even one naming the initial device).
pub fn resolve(id: i64, loc: *const Ident) -> Option<&'static DevState> {
    if offload_disabled() {
        return None;
    }
    let id = if id == -1 { default_device() } else { id };
    let st = state();
    let n = usable_devices() as i64;
    if n == 0 {
        crate::target::target_failed(loc);
    }
    if id == n {
        return None;
    }
    if id < 0 || id > n {
        msg::fatal(
            id,
            &format!(
                "\"invalid value\" device number '{id}' out of range, only {n} devices available"
            ),
        );
    }
    // The caller loads the images (`ensure_loaded`) after printing the
    // construct's INFO header, in LLVM's order.
    Some(&st.devices[id as usize])
}

// ---------------------------------------------------------------- registry

/// A host entry as read from the table.
#[derive(Clone)]
pub struct HostEntry {
    pub addr: u64,
    /// The symbol-name C string (static in the registering module).
    pub name_ptr: usize,
    pub name: String,
    pub size: u64,
    pub flags: u32,
    pub data: u64,
    pub kind: u16,
}

pub struct Registered {
    pub desc: usize,
    pub id: BinaryId,
    pub images: Vec<DeviceImage<'static>>,
    pub entries: Vec<HostEntry>,
}

pub struct State {
    /// Every device of the runtime; the first [`usable_devices`] count.
    pub devices: Vec<DevState>,
    /// See [`usable_devices`]: 0, or `devices.len()` once a registered
    /// image runs on one of them (never goes back: LLVM keeps devices).
    usable: std::sync::atomic::AtomicUsize,
    pub binaries: Mutex<Vec<Arc<Registered>>>,
    pub generation: AtomicU64,
    pub requires: AtomicI64,
}

static STATE: OnceLock<State> = OnceLock::new();

/// The runtime's state; starting the runtime (first use) also registers
/// the binaries that waited for it (see [`register`]).
#[inline]
pub fn state() -> &'static State {
    let st = started_state();
    if ANY_WAITING.load(Ordering::Acquire) {
        register_waiting();
    }
    st
}

/// Binaries registered before the runtime could start (an MPI program that
/// initialises MPI itself, after the constructors: see
/// `offload_plugins::runtime_should_wait`): their descriptors, in order.
static WAITING: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// `WAITING` is not empty (read on every `state()`).
static ANY_WAITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The thread registering the waiting binaries (0: none): its own calls
/// of `state()` during that must not wait for itself.
static REGISTERING: AtomicU64 = AtomicU64::new(0);

fn this_thread() -> u64 {
    thread_local!(static ID: u8 = const { 0 });
    ID.with(|id| id as *const u8 as u64)
}

#[cold]
fn register_waiting() {
    let me = this_thread();
    if REGISTERING.load(Ordering::Acquire) == me {
        return;
    }
    // Other threads wait here until every waiting binary is registered.
    let mut waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    if !ANY_WAITING.load(Ordering::Acquire) {
        return;
    }
    REGISTERING.store(me, Ordering::Release);
    for desc in std::mem::take(&mut *waiting) {
        // SAFETY: a descriptor `__tgt_register_lib` received and
        // `__tgt_unregister_lib` has not taken back (it removes waiting ones).
        unsafe { register_now(desc as *const BinDesc) };
    }
    ANY_WAITING.store(false, Ordering::Release);
    REGISTERING.store(0, Ordering::Release);
}

fn started_state() -> &'static State {
    STATE.get_or_init(|| {
        let rt = offload_plugins::runtime();
        let devices = rt
            .devices()
            .iter()
            .enumerate()
            .map(|(i, d)| DevState::new(i, d.clone()))
            .collect();
        report_failed_plugins(rt);
        State {
            devices,
            usable: std::sync::atomic::AtomicUsize::new(0),
            binaries: Mutex::new(Vec::new()),
            generation: AtomicU64::new(1),
            requires: AtomicI64::new(0),
        }
    })
}

/// One warning line on stderr per enabled plugin that failed to come up
/// (remote server unreachable or refusing the token, driver missing), so
/// that a silent host fallback has a visible reason. Not when offloading
/// is explicitly disabled (`OMP_TARGET_OFFLOAD=DISABLED`).
fn report_failed_plugins(rt: &offload_core::Runtime) {
    if rt.failed_plugins().is_empty() || raw_policy() == Some(0) {
        return;
    }
    for (name, e) in rt.failed_plugins() {
        msg::warning(&format!("plugin '{name}' has no devices: {e}"));
    }
}

pub fn requires() -> i64 {
    state().requires.load(Ordering::Relaxed)
}

pub fn usm() -> bool {
    requires() & REQ_UNIFIED_SHARED_MEMORY != 0
}

/// A kernel pointer kept alive by the device's loaded programs.
#[derive(Clone, Copy)]
pub struct KernelRef(pub *const offload_core::Kernel);
// SAFETY: `offload_core::Kernel` is Send + Sync; the pointee is kept alive
// by the `Arc<Kernel>` in the device's `LoadState::loaded` until the kernel
// map has forgotten it (see `DevState::unload`).
unsafe impl Send for KernelRef {}
// SAFETY: as for `Send`: shared access to a `Sync` kernel.
unsafe impl Sync for KernelRef {}

/// Region id -> kernel, read on every launch without a lock: readers load
/// an immutable map; (rare) updates at image load/unload publish a new copy.
/// Replaced maps are kept until exit so a concurrent reader never sees a
/// freed one.
#[derive(Default)]
struct KernelMap {
    current: AtomicPtr<KMap>,
    // Boxed on purpose: readers may still hold the published address.
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<KMap>>>,
}

/// Region ids are addresses: a multiplicative hash is enough.
type KMap = HashMap<u64, KernelRef, offload_core::hash::AddrHash>;

impl KernelMap {
    #[inline]
    fn get(&self, region: u64) -> Option<KernelRef> {
        let p = self.current.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: published maps are never freed before the process exits.
        unsafe { &*p }.get(&region).copied()
    }

    fn update(&self, f: impl FnOnce(&mut KMap)) {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.current.load(Ordering::Acquire);
        let mut next = if cur.is_null() {
            KMap::default()
        } else {
            // SAFETY: see `get`; updates are serialised by `retired`.
            unsafe { &*cur }.clone()
        };
        f(&mut next);
        self.current
            .store(Box::into_raw(Box::new(next)), Ordering::Release);
        if !cur.is_null() {
            // SAFETY: `cur` came from `Box::into_raw` and is no longer published.
            retired.push(unsafe { Box::from_raw(cur) });
        }
    }
}

pub struct DevState {
    pub id: usize,
    pub dev: Arc<offload_core::Device>,
    /// Sharded by host address, each shard on its own cache lines: it is
    /// written by every mapping construct, while the fields around it are
    /// read by every launch.
    table: ShardedTable,
    kernels: KernelMap,
    loaded_gen: AtomicU64,
    load_lock: Mutex<LoadState>,
}

type Loaded = (
    Option<Arc<offload_core::Program>>,
    Vec<Arc<offload_core::Kernel>>,
);

#[derive(Default)]
struct LoadState {
    /// Binary ids already loaded with their programs and kernels.
    loaded: Vec<(BinaryId, Loaded)>,
}

impl DevState {
    fn new(id: usize, dev: Arc<offload_core::Device>) -> DevState {
        DevState {
            id,
            dev,
            table: ShardedTable::default(),
            kernels: KernelMap::default(),
            loaded_gen: AtomicU64::new(0),
            load_lock: Mutex::new(LoadState::default()),
        }
    }

    /// The mapping table as far as `[hp, hp + size)` needs it, locked
    /// (a zero size: the address `hp`).
    #[inline]
    pub fn table(&self, hp: u64, size: u64) -> View<'_> {
        self.table.view(hp, size)
    }
    /// The whole mapping table, locked.
    pub fn table_all(&self) -> View<'_> {
        self.table.view_all()
    }

    #[inline]
    pub fn kernel(&self, region: u64) -> Option<KernelRef> {
        self.kernels.get(region)
    }

    /// Load every registered binary not yet loaded here (cheap when none is new).
    #[inline]
    pub fn ensure_loaded(&self) {
        let g = state().generation.load(Ordering::Acquire);
        if self.loaded_gen.load(Ordering::Acquire) == g {
            return;
        }
        self.load_pending(g);
    }

    #[cold]
    fn load_pending(&self, g: u64) {
        let mut ls = self.load_lock.lock().unwrap_or_else(|e| e.into_inner());
        let bins: Vec<Arc<Registered>> = state()
            .binaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for b in bins {
            if ls.loaded.iter().any(|(id, _)| *id == b.id) {
                continue;
            }
            let (prog, kernels) = self.load_binary(&b);
            ls.loaded.push((b.id, (prog, kernels)));
        }
        self.loaded_gen.store(g, Ordering::Release);
    }

    fn load_binary(&self, b: &Registered) -> Loaded {
        let Some(img) = self.dev.best_image(&b.images) else {
            tracing::debug!(
                device = self.id,
                images = b.images.len(),
                "no image of the binary runs on this device"
            );
            return (None, vec![]);
        };
        // Which image this device took (LIBOMPTARGET_DEBUG; LLVM reports
        // image compatibility as debug output too).
        tracing::debug!(
            device = self.id,
            image = b.images.iter().position(|i| std::ptr::eq(i, img)).unwrap_or(0),
            of = b.images.len(),
            format = %img.format,
            triple = img.triple.as_deref().unwrap_or(""),
            arch = img.arch.as_deref().unwrap_or(""),
            "image chosen"
        );
        let prog = match self.dev.load_image(img) {
            Ok(p) => p,
            Err(e) => {
                msg::error(&format!("Failed to load image: {e}"));
                return (None, vec![]);
            }
        };
        let mut kernels = Vec::new();
        let mut kmap = HashMap::new();
        let usm = usm();
        for e in &b.entries {
            if e.kind != 1 || e.flags & ENTRY_REQUIRES != 0 {
                continue;
            }
            if e.flags & ENTRY_INDIRECT != 0 {
                if self.table(e.addr, 1).lookup(e.addr, 1).is_some() {
                    continue;
                }
                if let Ok((dptr, _)) = prog.global(&e.name) {
                    let mut fptr = 0u64;
                    if msg::info_on(msg::INFO_DATA_TRANSFER) {
                        // LLVM reads the device function address with an
                        // ordinary transfer, so INFO shows it (the name is
                        // the table's neighbour of the buffer, as for any
                        // copy without a map entry).
                        let hp = &fptr as *const u64 as u64;
                        let name = crate::target::lookup_name(self, hp, 8);
                        msg::dev_info(
                            self.id,
                            &format!(
                                "Copying data from device to host, TgtPtr={}, HstPtr={}, Size=8, Name={}",
                                msg::P(dptr.0),
                                msg::P(hp),
                                msg::name_of(name)
                            ),
                        );
                    }
                    // SAFETY: the device symbol holds an 8-byte function address.
                    let ok = unsafe {
                        self.dev
                            .copy_from_device(&mut fptr as *mut u64 as *mut u8, dptr, 8)
                            .is_ok()
                    };
                    if ok {
                        // The entry's size (a pointer's), as LLVM's table shows it.
                        self.insert_permanent(e.addr, e.size.max(1), fptr, e.name_ptr);
                    }
                }
                continue;
            }
            if e.size == 0 {
                if e.addr == 0 {
                    continue;
                }
                match prog.kernel(&e.name) {
                    Ok(k) => {
                        kmap.insert(e.addr, KernelRef(Arc::as_ptr(&k)));
                        kernels.push(k);
                    }
                    Err(_) => msg::error(&format!("Failed to load kernel {}", e.name)),
                }
                continue;
            }
            match prog.global(&e.name) {
                Ok((dptr, _)) => {
                    if usm && e.name.ends_with("_decl_tgt_ref_ptr") && e.flags & ENTRY_LINK == 0 {
                        // Copy the host ref pointer (host address of the variable).
                        // SAFETY: both sides are 8-byte pointer slots.
                        unsafe {
                            let _ = self.dev.copy_to_device(dptr, e.addr as *const u8, 8);
                        }
                    }
                    self.insert_permanent(e.addr, e.size, dptr.0, e.name_ptr);
                }
                Err(_) => {
                    if msg::info_on(msg::INFO_EMPTY_MAPPING) {
                        msg::dev_info(
                            self.id,
                            &format!(
                                "variable {} does not have a valid device counterpart",
                                e.name
                            ),
                        );
                    }
                }
            }
        }
        self.kernels.update(|m| m.extend(kmap));
        (Some(prog), kernels)
    }

    fn insert_permanent(&self, host: u64, size: u64, tgt: u64, name: usize) {
        let mut t = self.table(host, size);
        if t.lookup(host, size).is_some() {
            return;
        }
        let _ = t.insert(Entry {
            hst_base: host,
            hst_begin: host,
            hst_end: host + size,
            tgt_alloc: tgt,
            tgt_begin: tgt,
            dyn_rc: INF,
            hold_rc: 0,
            name,
            owned: false,
            host_ptr: false,
            shadows: Vec::new(),
        });
    }

    /// Drop what was loaded from binary `id` (unregistration).
    pub fn unload(&self, b: &Registered) {
        let mut ls = self.load_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = ls.loaded.iter().position(|(id, _)| *id == b.id) else {
            return;
        };
        let (_, (prog, _kernels)) = ls.loaded.remove(pos);
        if prog.is_none() {
            return;
        }
        self.kernels.update(|km| {
            for e in &b.entries {
                if e.size == 0 {
                    km.remove(&e.addr);
                }
            }
        });
        let mut t = self.table_all();
        for e in &b.entries {
            if e.size > 0 || e.flags & ENTRY_INDIRECT != 0 {
                if let Some(en) = t.get(e.addr) {
                    if en.dyn_rc == INF && !en.owned {
                        t.remove(e.addr);
                    }
                }
            }
        }
        // Programs (and kernels) drop here, after the kernel map forgot them.
    }

    pub fn alloc(&self, size: u64) -> Option<u64> {
        match self
            .dev
            .alloc(size as usize, offload_core::AllocKind::Device)
        {
            Ok(p) => Some(p.0),
            Err(e) => {
                crate::msg::plugin_error("Failure to allocate device memory", &e);
                None
            }
        }
    }

    /// Device memory for runtime-owned data (mapped blocks, private
    /// copies): the core's owned blocks (caching allocator, per-thread
    /// front, live ranges of the core's index). Free with
    /// [`Self::free_block`] and the same size.
    #[inline]
    pub fn alloc_block(&self, size: u64) -> Option<u64> {
        match self.dev.alloc_owned_block(size as usize) {
            Ok(p) => Some(p.0),
            Err(e) => {
                report("Failure to allocate device memory", e);
                None
            }
        }
    }

    /// Release a block from [`Self::alloc_block`] of `size` bytes (each is
    /// freed once: the mapping table entry or the launch that made it owns it).
    #[inline]
    pub fn free_block(&self, p: u64, size: u64) -> bool {
        reported(
            self.dev.free_owned_block(DevicePtr(p), size as usize),
            "Failure to deallocate device memory",
        )
    }

    pub fn free(&self, p: u64) -> bool {
        reported(
            self.dev.free(DevicePtr(p)),
            "Failure to deallocate device memory",
        )
    }

    /// Copy `size` bytes from host address `hst` into the owned block
    /// range at `tgt`.
    ///
    /// # Safety
    /// `[hst, hst + size)` is readable host memory, and `[tgt, tgt + size)`
    /// lies inside device memory of a live mapping-table entry (a block
    /// from [`Self::alloc_block`] or a global of a loaded image).
    #[inline]
    pub unsafe fn h2d(&self, tgt: u64, hst: u64, size: u64) -> bool {
        size == 0
            || reported(
                // SAFETY: the caller guarantees the host range is readable
                // and the device range is inside live device memory this
                // face allocated or loaded (range checked in debug builds).
                unsafe {
                    self.dev
                        .copy_to_owned_block(DevicePtr(tgt), hst as *const u8, size as usize)
                },
                "Failure to copy data from host to device",
            )
    }
    /// Copy `size` bytes from the owned block range at `tgt` to host
    /// address `hst`.
    ///
    /// # Safety
    /// `[hst, hst + size)` is writable host memory, and `[tgt, tgt + size)`
    /// lies inside device memory of a live mapping-table entry (a block
    /// from [`Self::alloc_block`] or a global of a loaded image).
    #[inline]
    pub unsafe fn d2h(&self, hst: u64, tgt: u64, size: u64) -> bool {
        size == 0
            || reported(
                // SAFETY: the caller guarantees the host range is writable
                // and the device range is inside live device memory this
                // face allocated or loaded.
                unsafe {
                    self.dev
                        .copy_from_owned_block(hst as *mut u8, DevicePtr(tgt), size as usize)
                },
                "Failure to copy data from device to host",
            )
    }
}

/// True on success; prints the plugin's reason on failure.
#[inline]
fn reported(r: offload_core::Result<()>, what: &str) -> bool {
    match r {
        Ok(()) => true,
        Err(e) => report(what, e),
    }
}

#[cold]
fn report(what: &str, e: offload_core::Error) -> bool {
    crate::msg::plugin_error(what, &e);
    false
}

// ---------------------------------------------------------------- registration

/// Read the entry table `[begin, end)` (new or legacy layout).
///
/// # Safety
/// `[begin, end)` is null/empty or a readable entry table (whole entries of
/// one layout) whose symbol names are null or NUL-terminated C strings.
pub unsafe fn read_entries(begin: *const u8, end: *const u8) -> Vec<HostEntry> {
    let mut out = Vec::new();
    if begin.is_null() || end <= begin {
        return out;
    }
    let bytes = end as usize - begin as usize;
    let cstr = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: the caller guarantees non-null names are C strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: the table is non-empty (checked above) and readable (caller);
    // every layout starts with an 8-byte word.
    let first = unsafe { std::ptr::read_unaligned(begin as *const u64) };
    if first == 0 {
        let n = bytes / std::mem::size_of::<EntryTy>();
        let p = begin as *const EntryTy;
        for i in 0..n {
            // SAFETY: `i < n` whole entries lie in the caller's readable table.
            let e = unsafe { std::ptr::read_unaligned(p.add(i)) };
            out.push(HostEntry {
                addr: e.address as u64,
                name_ptr: e.symbol_name as usize,
                name: cstr(e.symbol_name),
                size: e.size,
                flags: e.flags,
                data: e.data,
                kind: e.kind,
            });
        }
    } else {
        let n = bytes / std::mem::size_of::<LegacyEntryTy>();
        let p = begin as *const LegacyEntryTy;
        for i in 0..n {
            // SAFETY: as above, for the legacy layout.
            let e = unsafe { std::ptr::read_unaligned(p.add(i)) };
            out.push(HostEntry {
                addr: e.address as u64,
                name_ptr: e.name as usize,
                name: cstr(e.name),
                size: e.size,
                flags: e.flags as u32,
                data: e.data as u32 as u64,
                kind: 1,
            });
        }
    }
    out
}

/// Turn one `__tgt_device_image` into DeviceImages, using the enclosing
/// OffloadBinary (found by walking back from `image_start`) for the triple.
///
/// # Safety
/// `[image_start, image_end)` is null/empty or readable memory that stays
/// valid and unchanged for the life of the process (an image in the
/// program's read-only data).
pub unsafe fn read_image(img: &DeviceImageTy) -> Vec<DeviceImage<'static>> {
    let start = img.image_start;
    let end = img.image_end;
    if start.is_null() || end <= start {
        return vec![];
    }
    // SAFETY: the caller guarantees the non-empty range is readable for
    // the life of the process.
    let raw: &'static [u8] =
        unsafe { std::slice::from_raw_parts(start, end as usize - start as usize) };
    // Walk back (8-byte steps, up to 4 KiB) looking for the OffloadBinary magic.
    let mut k = 8usize;
    while k <= 4096 {
        let hdr = start.wrapping_sub(k);
        // Only read what is in a mapped region: the header must lie in the
        // same section; check magic then image_offset of the entry.
        if (hdr as usize).is_multiple_of(8) && readable(hdr, 32) {
            // SAFETY: `[hdr, hdr + 32)` is mapped (checked just now).
            let (magic, size, entry_off) = unsafe {
                (
                    std::slice::from_raw_parts(hdr, 4),
                    std::ptr::read_unaligned(hdr.add(8) as *const u64) as usize,
                    std::ptr::read_unaligned(hdr.add(16) as *const u64) as usize,
                )
            };
            if magic == [0x10, 0xFF, 0x10, 0xAD]
                && size >= k
                && entry_off + 40 <= size
                && readable(hdr, size)
            {
                // SAFETY: `entry_off + 40 <= size` and `[hdr, hdr + size)`
                // is mapped (checked just now).
                let img_off = unsafe {
                    std::ptr::read_unaligned(hdr.add(entry_off + 24) as *const u64) as usize
                };
                if img_off == k {
                    // SAFETY: mapped (checked above) and, as the
                    // OffloadBinary around the caller's image, in the same
                    // never-unmapped section as the image.
                    let whole: &'static [u8] = unsafe { std::slice::from_raw_parts(hdr, size) };
                    match offload_image::unwrap(whole) {
                        Ok(imgs) if !imgs.is_empty() => return imgs,
                        _ => break,
                    }
                }
            }
        }
        k += 8;
    }
    offload_image::unwrap(raw).unwrap_or_default()
}

/// Whether `[p, p+len)` is mapped memory (mincore-free check via the
/// `/proc/self/maps`-less trick: msync on page boundaries).
fn readable(p: *const u8, len: usize) -> bool {
    let page = 4096usize;
    let a = (p as usize) & !(page - 1);
    let e = (p as usize + len + page - 1) & !(page - 1);
    // SAFETY: msync only validates the mapping; MS_ASYNC on private
    // read-only mappings is a no-op.
    unsafe { libc::msync(a as *mut c_void, e - a, libc::MS_ASYNC) == 0 }
}

fn requires_clause(bit: i64) -> &'static str {
    match bit {
        REQ_REVERSE_OFFLOAD => "reverse_offload",
        REQ_UNIFIED_ADDRESS => "unified_address",
        REQ_UNIFIED_SHARED_MEMORY => "unified_shared_memory",
        _ => "dynamic_allocators",
    }
}

/// Merge the requires flags of one descriptor (fatal when inconsistent).
pub fn add_requires(flags: i64) {
    let st = state();
    let old = st.requires.load(Ordering::Relaxed);
    if old == 0 {
        st.requires.store(flags, Ordering::Relaxed);
        return;
    }
    for bit in [
        REQ_REVERSE_OFFLOAD,
        REQ_UNIFIED_ADDRESS,
        REQ_UNIFIED_SHARED_MEMORY,
        REQ_DYNAMIC_ALLOCATORS,
    ] {
        if (old & bit) != (flags & bit) {
            msg::fatal(
                2,
                &format!(
                    "'#pragma omp requires {}' not used consistently!",
                    requires_clause(bit)
                ),
            );
        }
    }
}

/// `__tgt_register_lib`.
///
/// # Safety
/// `desc` is null or a readable `__tgt_bin_desc` whose entry table and
/// images satisfy [`read_entries`] and [`read_image`] and which stays valid
/// until `__tgt_unregister_lib` (clang's descriptors are static data).
pub unsafe fn register(desc: *const BinDesc) {
    if desc.is_null() {
        return;
    }
    if STATE.get().is_none() && offload_plugins::runtime_should_wait() {
        // Starting the runtime now would initialise MPI before the
        // program's own MPI_Init: register at the first device use.
        let mut waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        if !waiting.contains(&(desc as usize)) {
            waiting.push(desc as usize);
        }
        ANY_WAITING.store(true, Ordering::Release);
        return;
    }
    // SAFETY: the caller's guarantee, and `desc` is not null.
    unsafe { register_now(desc) }
}

/// [`register`], with the runtime started.
///
/// # Safety
/// As for [`register`], and `desc` is not null.
unsafe fn register_now(desc: *const BinDesc) {
    TLS_PROBE.with(|_| ());
    let st = started_state();
    {
        let bins = st.binaries.lock().unwrap_or_else(|e| e.into_inner());
        if bins.iter().any(|b| b.desc == desc as usize) {
            return;
        }
    }
    // SAFETY: a non-null, readable descriptor (caller).
    let d = unsafe { &*desc };
    // SAFETY: the descriptor's entry table, as the caller guarantees.
    let entries = unsafe { read_entries(d.host_entries_begin, d.host_entries_end) };
    let mut images = Vec::new();
    for i in 0..d.num_device_images.max(0) as usize {
        // SAFETY: the descriptor holds `num_device_images` image records,
        // each delimiting a static image (caller).
        images.extend(unsafe { read_image(&*d.device_images.add(i)) });
    }
    let mut any_req = false;
    for e in &entries {
        if e.kind == 1 && e.flags & ENTRY_REQUIRES != 0 {
            any_req = true;
            add_requires(e.data as i64);
        }
    }
    if !any_req {
        add_requires(1); // OMP_REQ_NONE
    }
    // The devices count for OpenMP once an image can run on one of them.
    if st.usable.load(Ordering::Acquire) == 0
        && images
            .iter()
            .any(|i| st.devices.iter().any(|d| d.dev.can_run(i)))
    {
        st.usable.store(st.devices.len(), Ordering::Release);
    }
    let core_entries: Vec<OffloadEntry> = entries
        .iter()
        .map(|e| OffloadEntry {
            name: e.name.clone(),
            host_addr: e.addr,
            size: e.size,
            flags: e.flags,
            data: e.data,
            producer: e.kind,
        })
        .collect();
    let (bd, failures) = offload_plugins::runtime().register_binary(images.clone(), core_entries);
    for f in failures {
        msg::error(&format!(
            "plugin '{}' failed to register the binary: {}",
            f.plugin, f.error
        ));
        if policy() == POLICY_MANDATORY && !num_devices().eq(&0) {
            // Hook failures are only fatal under the mandatory policy.
            if raw_policy_is_mandatory() {
                msg::fatal(
                    1,
                    "failure of target construct while offloading is mandatory",
                );
            }
        }
    }
    let reg = Arc::new(Registered {
        desc: desc as usize,
        id: bd.id,
        images,
        entries,
    });
    st.binaries
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(reg);
    st.generation.fetch_add(1, Ordering::AcqRel);
    // Settle the offload policy now, at registration (a global constructor),
    // like LLVM's libomptarget, whose constructor connects to libomp: asking
    // libomp runs its serial initialisation (OMPT tool search, dlopen of
    // libarcher, ~2-3 ms), which would otherwise land in the first construct.
    let _ = policy();
}

fn raw_policy_is_mandatory() -> bool {
    raw_policy() == Some(2)
}

/// libomp's `OMP_TARGET_OFFLOAD` (0 disabled, 1 default, 2 mandatory), if
/// libomp is loaded.
fn raw_policy() -> Option<i32> {
    let f = dlsym_default(c"__kmpc_get_target_offload");
    if f.is_null() {
        return None;
    }
    // SAFETY: libomp's `int __kmpc_get_target_offload(void)`.
    let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(f) };
    Some(f())
}

/// `__tgt_unregister_lib`.
pub fn unregister(desc: *const BinDesc) {
    if ANY_WAITING.load(Ordering::Acquire) {
        // Never registered for real (the program did not use a device).
        let mut waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pos) = waiting.iter().position(|&d| d == desc as usize) {
            waiting.remove(pos);
            if waiting.is_empty() {
                ANY_WAITING.store(false, Ordering::Release);
            }
            return;
        }
    }
    let st = state();
    let reg = {
        let mut bins = st.binaries.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = bins.iter().position(|b| b.desc == desc as usize) else {
            return;
        };
        bins.remove(pos)
    };
    let last = st
        .binaries
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_empty();
    if last && msg::info_on(msg::INFO_DUMP_TABLE) {
        for d in visible_devices().iter().rev() {
            crate::target::dump_table(
                d,
                "OpenMP Host-Device pointer mappings after block at libomptarget:0:0:",
            );
        }
    }
    if tracing::dispatcher::has_been_set() && TLS_PROBE.try_with(|_| ()).is_err() {
        // Called from exit() after this thread's TLS destructors ran, with
        // LIBOMPTARGET_DEBUG/PROFILE on: the tracing subscriber can no longer
        // open spans (it would panic), and the process is ending anyway.
        return;
    }
    for d in &st.devices {
        d.unload(&reg);
    }
    // Unregister-hook failures are reported, never fatal (we are exiting).
    match offload_plugins::runtime().unregister_binary(reg.id) {
        Ok(failures) => {
            for f in failures {
                msg::error(&format!(
                    "plugin '{}' failed to unregister the binary: {}",
                    f.plugin, f.error
                ));
            }
        }
        Err(e) => msg::error(&format!("unregistering the binary failed: {e}")),
    }
}

/// Touched at registration so that its destructor is registered before the
/// tracing subscriber's: once it is gone, this thread's TLS is torn down.
struct TlsProbe;
impl Drop for TlsProbe {
    fn drop(&mut self) {}
}
thread_local! {
    static TLS_PROBE: TlsProbe = const { TlsProbe };
}
