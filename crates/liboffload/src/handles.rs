//! Library state and handle registries.
//!
//! `olInit` (reference counted) builds a [`Context`]: a fresh core
//! [`Runtime`] with every built-in plugin, one platform per plugin that has
//! devices plus the synthetic "Host" platform, and their devices. The last
//! `olShutDown` drops it, which destroys every queue, event and program still
//! alive, frees every allocation and deinitialises the plugins.
//!
//! Every handle is the address of one of our own objects, but it is never
//! dereferenced before it has been found in the registry of its kind:
//! platforms and devices are checked against the context's (short) lists,
//! queues, events, programs and symbols against address-keyed hash maps.
//! A null, dangling, destroyed or foreign handle is therefore an error code,
//! never a crash. Looking a handle up clones an `Arc`, so an object destroyed
//! by another thread stays alive until the call using it returns.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use offload_core::plugin::{self, AllocKind, Backend, DevicePtr};
use offload_core::{Config, Runtime};

use crate::error::{err, uninitialized, ErrorCode, OlResult};
use crate::types::*;
use crate::worker::Worker;

/// Reference count of `olInit` calls; guards creation and teardown.
static REFS: Mutex<usize> = Mutex::new(0);
/// The live context, if initialised.
static STATE: RwLock<Option<Arc<Context>>> = RwLock::new(None);

/// The current context, or OL_ERRC_UNINITIALIZED.
#[inline]
pub fn context() -> OlResult<Arc<Context>> {
    STATE
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(uninitialized)
}

pub fn init() -> OlResult {
    let mut refs = REFS.lock().unwrap_or_else(|e| e.into_inner());
    if *refs == 0 {
        let ctx = Context::new();
        *STATE.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(ctx));
    }
    *refs += 1;
    Ok(())
}

pub fn shutdown() -> OlResult {
    let mut refs = REFS.lock().unwrap_or_else(|e| e.into_inner());
    if *refs == 0 {
        return Err(uninitialized());
    }
    *refs -= 1;
    if *refs == 0 {
        let ctx = STATE.write().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(ctx) = ctx {
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
    Plugin {
        core: Arc<offload_core::Device>,
        /// Used for work given with a NULL queue.
        default_queue: Arc<dyn plugin::Queue>,
    },
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
    pub fn label(&self) -> String {
        match &self.kind {
            DeviceKind::Plugin { core, .. } => core.label().to_string(),
            DeviceKind::Host => "the host device".to_string(),
        }
    }
}

pub struct Queue {
    pub device: usize,
    /// The plugin queue the worker drives; None on the host device (its
    /// worker copies, fills and calls host functions itself).
    pub raw: Option<Arc<dyn plugin::Queue>>,
    /// Runs the queue's operations in order, off the caller's thread.
    pub worker: Arc<Worker>,
}

pub struct Event {
    /// Handle value of the queue the event was recorded on.
    pub queue: usize,
    /// That queue's worker (it outlives the queue handle).
    pub worker: Arc<Worker>,
    /// Complete once the worker has run this many operations.
    pub position: u64,
}

pub struct Program {
    pub device: usize,
    pub raw: Arc<dyn plugin::Program>,
    /// Symbols handed out, by (name, kind): repeated lookups return the same handle.
    pub symbols: Mutex<HashMap<(String, u32), usize>>,
}

pub enum SymbolKind {
    Kernel(Arc<dyn plugin::Kernel>),
    Global { addr: DevicePtr, size: u64 },
}

pub struct Symbol {
    pub device: usize,
    pub program: usize,
    /// The loaded program: queued launches keep it alive.
    pub loaded: Arc<dyn plugin::Program>,
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

/// A live olMemAlloc allocation.
#[derive(Debug, Clone, Copy)]
pub struct Allocation {
    pub size: usize,
    pub kind: ol_alloc_type_t,
    pub device: usize,
}

/// A live olMemRegister registration.
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub device: usize,
    pub base: usize,
    pub size: usize,
    pub users: usize,
}

/// Live objects of one kind, keyed by handle address.
pub struct Registry<T> {
    map: RwLock<HashMap<usize, Arc<T>>>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            map: RwLock::new(HashMap::new()),
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
    pub runtime: Runtime,
    pub platforms: Vec<Box<Platform>>,
    pub devices: Vec<Box<Device>>,
    pub queues: Registry<Queue>,
    pub events: Registry<Event>,
    pub programs: Registry<Program>,
    pub symbols: Registry<Symbol>,
    /// Every live olMemAlloc allocation, by base address.
    pub allocations: Mutex<BTreeMap<usize, Allocation>>,
    pub registrations: Mutex<Vec<Registration>>,
    /// Worker threads of destroyed queues (still running their last work;
    /// joined at teardown, finished ones pruned when more are added).
    pub retired: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// The API version as LLVM prints it in platform versions.
pub const API_VERSION: &str = "v0.0.1";

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
        let runtime = Runtime::new(Config::get().clone(), &offload::builtin_plugins());
        let mut platforms: Vec<Box<Platform>> = Vec::new();
        let mut devices: Vec<Box<Device>> = Vec::new();
        for (plugin, range) in runtime.plugins() {
            if range.is_empty() {
                continue;
            }
            let backend = runtime.devices()[range.start].info().backend;
            let platform = platforms.len();
            platforms.push(Box::new(plugin_platform(plugin.name(), backend)));
            for id in range {
                let core = runtime.devices()[id].clone();
                let default_queue = match core.create_queue() {
                    Ok(q) => q,
                    Err(e) => {
                        tracing::warn!(device = core.label(), error = %e, "no default queue; device skipped");
                        continue;
                    }
                };
                devices.push(Box::new(Device {
                    index: devices.len(),
                    platform,
                    kind: DeviceKind::Plugin {
                        core,
                        default_queue,
                    },
                }));
            }
        }
        // As in LLVM 22: one synthetic host platform and device, last.
        let platform = platforms.len();
        platforms.push(Box::new(Platform {
            name: "Host".to_string(),
            vendor: "Unknown platform vendor".to_string(),
            version: API_VERSION.to_string(),
            backend: ol_platform_backend_t::OL_PLATFORM_BACKEND_HOST,
        }));
        devices.push(Box::new(Device {
            index: devices.len(),
            platform,
            kind: DeviceKind::Host,
        }));
        Context {
            runtime,
            platforms,
            devices,
            queues: Registry::default(),
            events: Registry::default(),
            programs: Registry::default(),
            symbols: Registry::default(),
            allocations: Mutex::new(BTreeMap::new()),
            registrations: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// Release everything (last olShutDown). Objects still referenced by
    /// calls in flight on other threads are dropped when those calls return.
    fn teardown(&self) {
        // Drain every queue (destroyed ones too) and join its worker before
        // anything their work may touch goes away.
        let mut threads =
            std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        for q in self.queues.drain() {
            let (thread, _) = q.worker.close();
            threads.extend(thread);
        }
        for t in threads {
            crate::worker::join(t);
        }
        for q in self.queues.drain() {
            // Created by a call that raced with the shutdown.
            let (thread, _) = q.worker.close();
            if let Some(t) = thread {
                crate::worker::join(t);
            }
        }
        self.events.drain();
        self.symbols.drain();
        self.programs.drain();
        let allocations =
            std::mem::take(&mut *self.allocations.lock().unwrap_or_else(|e| e.into_inner()));
        for (base, a) in allocations {
            match self.devices[a.device].core() {
                Some(core) => {
                    let _ = core.free(DevicePtr(base as u64));
                }
                // SAFETY: host-device allocations come from posix_memalign.
                None => unsafe { libc::free(base as *mut libc::c_void) },
            }
        }
        self.registrations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.runtime.shutdown();
    }

    /// Keep a destroyed queue's worker thread until teardown.
    pub fn retire(&self, thread: std::thread::JoinHandle<()>) {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *retired)
            .into_iter()
            .partition(|t| t.is_finished());
        *retired = running;
        retired.push(thread);
        drop(retired);
        for t in done {
            crate::worker::join(t);
        }
    }

    pub fn device_handle(&self, index: usize) -> ol_device_handle_t {
        &*self.devices[index] as *const Device as ol_device_handle_t
    }
    pub fn platform_handle(&self, index: usize) -> ol_platform_handle_t {
        &*self.platforms[index] as *const Platform as ol_platform_handle_t
    }

    /// The device behind `h`: INVALID_NULL_HANDLE / INVALID_DEVICE otherwise.
    pub fn device(&self, h: ol_device_handle_t, what: &str) -> OlResult<&Device> {
        crate::error::check_handle(h, what)?;
        self.devices
            .iter()
            .find(|d| std::ptr::eq(&***d as *const Device, h as *const Device))
            .map(|d| &**d)
            .ok_or_else(|| {
                err(
                    ErrorCode::InvalidDevice,
                    format!("{what} {h:p} is not a device handle of this liboffload instance"),
                )
            })
    }

    pub fn platform(&self, h: ol_platform_handle_t) -> OlResult<&Platform> {
        crate::error::check_handle(h, "Platform")?;
        self.platforms
            .iter()
            .find(|p| std::ptr::eq(&***p as *const Platform, h as *const Platform))
            .map(|p| &**p)
            .ok_or_else(|| {
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

    /// The allocation containing `ptr` (interior pointers included).
    pub fn find_allocation(&self, ptr: usize) -> Option<(usize, Allocation)> {
        let allocs = self.allocations.lock().unwrap_or_else(|e| e.into_inner());
        let (&base, &a) = allocs.range(..=ptr).next_back()?;
        (ptr < base + a.size.max(1)).then_some((base, a))
    }
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
