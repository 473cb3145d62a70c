//! The library's global state and the registration of binary
//! descriptors, deferred while the runtime must not start yet (MPI).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use offload_core::{BinaryDescriptor, OffloadEntry};
use offload_image::DeviceImage;

use crate::abi::*;
use crate::descriptor::{read_entries, read_image, HostEntry};
use crate::device::DevState;
use crate::libomp::{raw_policy, raw_policy_is_mandatory};
use crate::msg;
use crate::policy::policy;
use crate::requires::add_requires;

/// A registered descriptor: the core's record of it (images and entries,
/// the one binary registry) and what only this face needs besides.
pub struct Registered {
    pub desc: usize,
    pub binary: Arc<BinaryDescriptor<'static>>,
    /// Each entry's name as the program's own C string (`binary.entries`
    /// order): copy lines and table dumps print it.
    pub name_ptrs: Vec<usize>,
}

impl Registered {
    /// The binary's entries with their C-string names.
    pub fn entries(&self) -> impl Iterator<Item = (&OffloadEntry, usize)> {
        self.binary
            .entries
            .iter()
            .zip(self.name_ptrs.iter().copied())
    }
}

pub struct State {
    /// Every device of the runtime; the first [`usable_devices`] count.
    pub devices: Vec<DevState>,
    /// See [`usable_devices`]: 0, or `devices.len()` once a registered
    /// image runs on one of them (never goes back: LLVM keeps devices).
    pub(crate) usable: std::sync::atomic::AtomicUsize,
    pub binaries: Mutex<Vec<Arc<Registered>>>,
    pub generation: AtomicU64,
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
    // SAFETY: the caller's guarantee.
    let (entries, images) = unsafe { read_descriptor(desc) };
    record_requires(&entries);
    // The devices count for OpenMP once an image can run on one of them.
    if st.usable.load(Ordering::Acquire) == 0
        && images
            .iter()
            .any(|i| st.devices.iter().any(|d| d.dev.can_run(i)))
    {
        st.usable.store(st.devices.len(), Ordering::Release);
    }
    let name_ptrs = entries.iter().map(|e| e.name_ptr).collect();
    let binary = register_in_core(st, entries, images);
    let reg = Arc::new(Registered {
        desc: desc as usize,
        binary,
        name_ptrs,
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
    let _ = policy(usable_devices);
}

/// The entry table and the device images of a descriptor.
///
/// # Safety
/// As for [`register`], and `desc` is not null.
unsafe fn read_descriptor(desc: *const BinDesc) -> (Vec<HostEntry>, Vec<DeviceImage<'static>>) {
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
    (entries, images)
}

/// The requires flags of a binary's entries (none: `OMP_REQ_NONE`).
fn record_requires(entries: &[HostEntry]) {
    let mut any_req = false;
    for e in entries {
        if e.kind == 1 && e.flags & ENTRY_REQUIRES != 0 {
            any_req = true;
            add_requires(e.data as i64);
        }
    }
    if !any_req {
        add_requires(1); // OMP_REQ_NONE
    }
}

/// Register a binary with the core; a plugin hook's failure is reported
/// (fatal under the mandatory policy with devices).
fn register_in_core(
    st: &State,
    entries: Vec<HostEntry>,
    images: Vec<DeviceImage<'static>>,
) -> Arc<BinaryDescriptor<'static>> {
    let core_entries: Vec<OffloadEntry> = entries
        .into_iter()
        .map(|e| OffloadEntry {
            name: e.name,
            host_addr: e.addr,
            size: e.size,
            flags: e.flags,
            data: e.data,
            producer: e.kind,
        })
        .collect();
    let (bd, failures) = offload_plugins::runtime().register_binary(images, core_entries);
    for f in failures {
        msg::error(&format!(
            "plugin '{}' failed to register the binary: {}",
            f.plugin, f.error
        ));
        // Hook failures are only fatal under the mandatory policy, with
        // devices (what `policy() == POLICY_MANDATORY && num_devices() != 0`
        // comes to when libomp says MANDATORY).
        if raw_policy_is_mandatory() && st.usable.load(Ordering::Acquire) != 0 {
            msg::fatal(
                1,
                "failure of target construct while offloading is mandatory",
            );
        }
    }
    bd
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
            crate::dump::dump_table(
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
    match offload_plugins::runtime().unregister_binary(reg.binary.id) {
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
