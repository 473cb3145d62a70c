//! Library state and handle registries.
//!
//! `olInit` (reference counted) builds a [`Context`] over the process's one
//! core [`Runtime`] (shared with the OpenMP face when both live in one
//! library): one platform per plugin that has devices plus the synthetic
//! "Host" platform, and their devices (ol device N is runtime device N; the
//! host device comes last). The last `olShutDown` empties the context: it
//! destroys every queue, event and program still alive and frees every
//! allocation made through the ol* API. The context itself (platform and
//! device lists) stays for the next `olInit`.
//!
//! This face keeps handles only: memory is in the core's allocation index
//! (owner [`OL_OWNER`]), queues and events are core queues and events.
//!
//! Every handle is the address of one of our own objects, but it is never
//! dereferenced before it has been found in the registry of its kind:
//! platforms and devices are checked against the context's (short) lists,
//! queues, events, programs and symbols against address-keyed hash maps.
//! A null, dangling, destroyed or foreign handle is therefore an error code,
//! never a crash. Looking a handle up clones an `Arc`, so an object destroyed
//! by another thread stays alive until the call using it returns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use offload_core::plugin::{AllocKind, Backend, DevicePtr};
use offload_core::{Owner, Runtime};

use crate::error::{err, uninitialized, ErrorCode, OlResult};
use crate::types::*;

/// Owner of every allocation and registration made through the ol* API.
pub const OL_OWNER: Owner = Owner(1);

/// Reference count of `olInit` calls; guards bring-up and teardown.
static REFS: Mutex<usize> = Mutex::new(0);
/// The context: built by the first olInit and kept for the life of the
/// process (the runtime under it lives that long too). olShutDown empties
/// it; a later olInit reuses it. So a handle lookup is one atomic load, and
/// a call racing with olShutDown never sees freed memory.
static CONTEXT: OnceLock<Context> = OnceLock::new();
/// Between the first olInit and the last olShutDown.
static LIVE: AtomicBool = AtomicBool::new(false);

/// The current context, or OL_ERRC_UNINITIALIZED.
#[inline]
pub fn context() -> OlResult<&'static Context> {
    if !LIVE.load(Ordering::Acquire) {
        return Err(uninitialized());
    }
    CONTEXT.get().ok_or_else(uninitialized)
}

pub fn init() -> OlResult {
    let mut refs = REFS.lock().unwrap_or_else(|e| e.into_inner());
    if *refs == 0 {
        CONTEXT.get_or_init(Context::new);
        LIVE.store(true, Ordering::Release);
    }
    *refs += 1;
    Ok(())
}

/// liboffload for another face of this process (libomptarget's interop
/// objects): one `olInit` the first time, never undone (the handles it
/// hands out stay valid for the life of the process, and the face never
/// calls `olShutDown`), then the context, whose devices are the runtime's
/// own (`Context::handles_of`).
pub fn embedded() -> OlResult<&'static Context> {
    static ONCE: OnceLock<OlResult> = OnceLock::new();
    ONCE.get_or_init(init).clone()?;
    context()
}

pub fn shutdown() -> OlResult {
    let mut refs = REFS.lock().unwrap_or_else(|e| e.into_inner());
    if *refs == 0 {
        return Err(uninitialized());
    }
    *refs -= 1;
    if *refs == 0 {
        LIVE.store(false, Ordering::Release);
        if let Some(ctx) = CONTEXT.get() {
            ctx.teardown();
        }
    }
    Ok(())
}

/// A platform: one plugin, or the synthetic host platform.
pub struct Platform {
    pub name: String,
    pub vendor: String,
    pub version: String,
    pub backend: ol_platform_backend_t,
}

/// What backs a device handle.
pub enum DeviceKind {
    /// A device of a plugin: runs programs.
    Plugin { core: Arc<offload_core::Device> },
    /// The `OL_DEVICE_TYPE_HOST` device: names host memory in copies;
    /// allocations are host memory, queues run work synchronously, and it
    /// loads no programs.
    Host,
}

pub struct Device {
    pub index: usize,
    pub platform: usize,
    pub kind: DeviceKind,
}

impl Device {
    pub fn core(&self) -> Option<&Arc<offload_core::Device>> {
        match &self.kind {
            DeviceKind::Plugin { core, .. } => Some(core),
            DeviceKind::Host => None,
        }
    }
    pub fn is_host(&self) -> bool {
        matches!(self.kind, DeviceKind::Host)
    }
    /// Whether device pointers of this device are host addresses.
    pub fn shares_host_memory(&self) -> bool {
        match &self.kind {
            DeviceKind::Plugin { core, .. } => core.shares_host_memory(),
            DeviceKind::Host => true,
        }
    }
    /// Whether `olMemRegister` works for this device.
    pub fn registers_host_memory(&self) -> bool {
        match &self.kind {
            DeviceKind::Plugin { core, .. } => core.registers_host_memory(),
            DeviceKind::Host => true,
        }
    }
    pub fn label(&self) -> String {
        match &self.kind {
            DeviceKind::Plugin { core, .. } => core.label().to_string(),
            DeviceKind::Host => "the host device".to_string(),
        }
    }
}

pub struct Queue {
    pub device: usize,
    pub core: offload_core::Queue,
}

pub struct Event {
    /// Handle value of the queue the event was recorded on.
    pub queue: usize,
    pub core: offload_core::Event,
}

pub struct Program {
    pub device: usize,
    pub core: Arc<offload_core::Program>,
    /// Symbols handed out, by (name, kind): repeated lookups return the same handle.
    pub symbols: Mutex<HashMap<(String, u32), usize>>,
}

pub enum SymbolKind {
    /// A kernel: it keeps its program loaded (queued launches too).
    Kernel(Arc<offload_core::Kernel>),
    Global {
        addr: DevicePtr,
        size: u64,
        /// Keeps the global's program loaded.
        program: Arc<offload_core::Program>,
    },
}

pub struct Symbol {
    pub device: usize,
    pub program: usize,
    pub kind: SymbolKind,
}

impl Symbol {
    pub fn kind_value(&self) -> ol_symbol_kind_t {
        match self.kind {
            SymbolKind::Kernel(_) => ol_symbol_kind_t::OL_SYMBOL_KIND_KERNEL,
            SymbolKind::Global { .. } => ol_symbol_kind_t::OL_SYMBOL_KIND_GLOBAL_VARIABLE,
        }
    }
}

/// A live olMemRegister registration (the core files the range; this
/// counts its users).
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub device: usize,
    pub base: usize,
    pub size: usize,
    pub users: usize,
}

/// Live objects of one kind, keyed by handle address.
pub struct Registry<T> {
    /// Keys are addresses we handed out (no SipHash needed).
    map: RwLock<HashMap<usize, Arc<T>, offload_core::hash::AddrHash>>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            map: RwLock::new(HashMap::default()),
        }
    }
}

impl<T> Registry<T> {
    /// Register `obj`; its handle is its address.
    pub fn insert(&self, obj: Arc<T>) -> usize {
        let key = Arc::as_ptr(&obj) as *const () as usize;
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, obj);
        key
    }
    pub fn get(&self, handle: usize) -> Option<Arc<T>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&handle)
            .cloned()
    }
    pub fn remove(&self, handle: usize) -> Option<Arc<T>> {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&handle)
    }
    pub fn drain(&self) -> Vec<Arc<T>> {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, v)| v)
            .collect()
    }
}

pub struct Context {
    pub runtime: &'static Runtime,
    /// Fixed for the life of the process: a handle is the address of an
    /// element, checked by its offset into the slice.
    pub platforms: Box<[Platform]>,
    pub devices: Box<[Device]>,
    pub queues: Registry<Queue>,
    pub events: Registry<Event>,
    pub programs: Registry<Program>,
    pub symbols: Registry<Symbol>,
    pub registrations: Mutex<Vec<Registration>>,
}

/// The API version as LLVM prints it in platform versions.
pub const API_VERSION: &str = offload_core::facts::OL_API_VERSION;

fn plugin_platform(name: &str, backend: Backend) -> Platform {
    Platform {
        name: name.to_string(),
        vendor: match name {
            "host" => "offload-rs host plugin".to_string(),
            other => format!("offload-rs {other} plugin"),
        },
        version: API_VERSION.to_string(),
        backend: ol_platform_backend_t(backend.ol_value()),
    }
}

impl Context {
    fn new() -> Context {
        let runtime = offload_plugins::runtime();
        let mut platforms: Vec<Platform> = Vec::new();
        let mut devices: Vec<Device> = Vec::new();
        for (plugin, range) in runtime.plugins() {
            if range.is_empty() {
                continue;
            }
            let backend = runtime.devices()[range.start].info().backend;
            let platform = platforms.len();
            platforms.push(plugin_platform(plugin.name(), backend));
            for id in range {
                devices.push(Device {
                    index: devices.len(),
                    platform,
                    kind: DeviceKind::Plugin {
                        core: runtime.devices()[id].clone(),
                    },
                });
            }
        }
        // As in LLVM 22: one synthetic host platform and device, last.
        let platform = platforms.len();
        platforms.push(Platform {
            name: offload_core::facts::HOST_PLATFORM_NAME.to_string(),
            vendor: offload_core::facts::HOST_PLATFORM_VENDOR.to_string(),
            version: API_VERSION.to_string(),
            backend: ol_platform_backend_t::OL_PLATFORM_BACKEND_HOST,
        });
        devices.push(Device {
            index: devices.len(),
            platform,
            kind: DeviceKind::Host,
        });
        Context {
            runtime,
            platforms: platforms.into_boxed_slice(),
            devices: devices.into_boxed_slice(),
            queues: Registry::default(),
            events: Registry::default(),
            programs: Registry::default(),
            symbols: Registry::default(),
            registrations: Mutex::new(Vec::new()),
        }
    }

    /// Release everything made through this API (last olShutDown). Objects
    /// still referenced by calls in flight on other threads are dropped when
    /// those calls return. The runtime itself lives on (other faces of the
    /// process may use it).
    fn teardown(&self) {
        // Close every queue (destroyed ones were closed already) and wait
        // for their work before anything it may touch goes away.
        for q in self.queues.drain() {
            let _ = q.core.close();
        }
        offload_core::queue::join_closed_queues();
        self.events.drain();
        self.symbols.drain();
        self.programs.drain();
        for d in self.runtime.devices() {
            for a in d.allocations_of(OL_OWNER) {
                let _ = d.free(a.base);
            }
        }
        self.runtime.free_host_of(OL_OWNER);
        let regs =
            std::mem::take(&mut *self.registrations.lock().unwrap_or_else(|e| e.into_inner()));
        for r in regs {
            if let Some(core) = self.devices[r.device].core() {
                let _ = core.unregister_host_range(DevicePtr(r.base as u64));
            }
        }
    }

    /// The handles (platform, device) of core device `core`, found by
    /// identity (None: not a device of this process's runtime).
    pub fn handles_of(
        &self,
        core: &Arc<offload_core::Device>,
    ) -> Option<(ol_platform_handle_t, ol_device_handle_t)> {
        let d = self
            .devices
            .iter()
            .find(|d| d.core().is_some_and(|c| Arc::ptr_eq(c, core)))?;
        Some((
            self.platform_handle(d.platform),
            self.device_handle(d.index),
        ))
    }

    /// The handles (platform, device) of the synthetic host device.
    pub fn host_handles(&self) -> (ol_platform_handle_t, ol_device_handle_t) {
        let d = self.devices.last().expect("the host device is always last");
        (
            self.platform_handle(d.platform),
            self.device_handle(d.index),
        )
    }

    pub fn device_handle(&self, index: usize) -> ol_device_handle_t {
        &self.devices[index] as *const Device as ol_device_handle_t
    }
    pub fn platform_handle(&self, index: usize) -> ol_platform_handle_t {
        &self.platforms[index] as *const Platform as ol_platform_handle_t
    }

    /// The device behind `h`: INVALID_NULL_HANDLE / INVALID_DEVICE otherwise.
    pub fn device(&self, h: ol_device_handle_t, what: &str) -> OlResult<&Device> {
        crate::error::check_handle(h, what)?;
        element_of(&self.devices, h as usize).ok_or_else(|| {
            err(
                ErrorCode::InvalidDevice,
                format!("{what} {h:p} is not a device handle of this liboffload instance"),
            )
        })
    }

    pub fn platform(&self, h: ol_platform_handle_t) -> OlResult<&Platform> {
        crate::error::check_handle(h, "Platform")?;
        element_of(&self.platforms, h as usize).ok_or_else(|| {
            err(
                ErrorCode::InvalidPlatform,
                format!("Platform {h:p} is not a platform handle of this liboffload instance"),
            )
        })
    }

    pub fn queue(&self, h: ol_queue_handle_t) -> OlResult<Arc<Queue>> {
        crate::error::check_handle(h, "Queue")?;
        self.queues.get(h as usize).ok_or_else(|| {
            err(
                ErrorCode::InvalidQueue,
                format!("Queue {h:p} is not a live queue (destroyed, or never created)"),
            )
        })
    }

    pub fn event(&self, h: ol_event_handle_t) -> OlResult<Arc<Event>> {
        crate::error::check_handle(h, "Event")?;
        self.events.get(h as usize).ok_or_else(|| {
            err(
                ErrorCode::InvalidEvent,
                format!("Event {h:p} is not a live event (destroyed, or never created)"),
            )
        })
    }

    pub fn program(&self, h: ol_program_handle_t) -> OlResult<Arc<Program>> {
        crate::error::check_handle(h, "Program")?;
        self.programs.get(h as usize).ok_or_else(|| {
            err(
                ErrorCode::InvalidArgument,
                format!("Program {h:p} is not a live program (destroyed, or never created)"),
            )
        })
    }

    pub fn symbol(&self, h: ol_symbol_handle_t, what: &str) -> OlResult<Arc<Symbol>> {
        crate::error::check_handle(h, what)?;
        self.symbols.get(h as usize).ok_or_else(|| {
            err(
                ErrorCode::InvalidArgument,
                format!("{what} {h:p} is not a live symbol (its program was destroyed, or it never existed)"),
            )
        })
    }

    /// The live range containing `ptr` (interior pointers included) and
    /// the index of the ol device it belongs to.
    pub fn find_allocation(&self, ptr: usize) -> Option<(usize, offload_core::Allocation)> {
        let (dev, a) = self.runtime.find_allocation(DevicePtr(ptr as u64))?;
        let index = match dev {
            Some(d) => d.id(),
            None => self.devices.len() - 1,
        };
        Some((index, a))
    }
}

/// The element of `items` whose address is `addr`, if any (no dereference
/// of `addr`: only its offset into the slice is checked).
#[inline]
fn element_of<T>(items: &[T], addr: usize) -> Option<&T> {
    let size = std::mem::size_of::<T>();
    let offset = addr.wrapping_sub(items.as_ptr() as usize);
    let i = offset / size;
    (offset.is_multiple_of(size) && i < items.len()).then(|| &items[i])
}

/// `ol_alloc_type_t` to the core's kind (same numbering).
pub fn alloc_kind(t: ol_alloc_type_t) -> Option<AllocKind> {
    match t {
        ol_alloc_type_t::OL_ALLOC_TYPE_HOST => Some(AllocKind::Host),
        ol_alloc_type_t::OL_ALLOC_TYPE_DEVICE => Some(AllocKind::Device),
        ol_alloc_type_t::OL_ALLOC_TYPE_MANAGED => Some(AllocKind::Shared),
        _ => None,
    }
}
