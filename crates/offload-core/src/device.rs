//! The core's view of a device: a plugin device plus the shared bookkeeping
//! (caching allocator, allocation index, image selection, statistics,
//! tracing).
//!
//! Synchronous operations are "a queue, then sync": each thread gets its own
//! plugin queue per device (created on first use), so threads neither
//! serialise on one queue nor see each other's errors. Plugins whose queues
//! complete inline share one queue: there is nothing to synchronise.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use offload_image::DeviceImage;
use tracing::debug_span;

use crate::config::Config;
use crate::error::{Error, ErrorCode, Result};
use crate::executor::Worker;
use crate::host_locks::{HostLocks, Locked, Released};
use crate::launch::LaunchTuning;
use crate::memory::{Allocation, AllocationIndex, MemoryPool, Origin, Owner};
use crate::plugin::{self, AllocKind, DeviceInfo, DevicePtr, KernelArgs, LaunchConfig};
use crate::program::{Kernel, Program};
use crate::stats::Stats;

/// A device of some plugin, numbered across all plugins.
pub struct Device {
    id: usize,
    /// Unique across runtimes in this process (keys per-thread queues).
    serial: u64,
    plugin: &'static str,
    raw: Arc<dyn plugin::Device>,
    pool: MemoryPool,
    index: AllocationIndex,
    /// The queue of every thread when the plugin's queues complete inline.
    inline_queue: OnceLock<Option<Arc<dyn plugin::Queue>>>,
    stats: Stats,
    label: String,
    /// The user's OpenMP launch tuning ([`crate::launch`]).
    launch_tuning: LaunchTuning,
    /// [`plugin::Device::host_allocations_are_local`], asked once.
    local_host_allocations: bool,
    /// The core-driven queues made on this device (their work runs later,
    /// on memory a free must not release under it).
    queues: Mutex<Vec<Weak<Worker>>>,
    /// Host memory locked on request ([`Device::lock_host`]).
    host_locks: Mutex<HostLocks>,
}

/// Memory whose free waits for queued work: released when the last queue
/// that had work pending at the free drops its token (has passed it).
struct DeferredFree {
    raw: Arc<dyn plugin::Device>,
    ptr: DevicePtr,
    kind: AllocKind,
    label: String,
}

impl Drop for DeferredFree {
    fn drop(&mut self) {
        // SAFETY: a `DeferredFree` is made only for an allocation of this
        // plugin device that `free` took out of the index (so it is freed
        // once), with its kind; it drops when the queues that had work
        // pending at the free have passed it.
        if let Err(e) = unsafe { self.raw.free(self.ptr, self.kind) } {
            tracing::warn!(device = %self.label, ptr = %self.ptr, error = %e, "deferred free failed");
        }
    }
}

thread_local! {
    /// This thread's synchronous queue per device serial.
    static SYNC_QUEUES: RefCell<Vec<(u64, Arc<dyn plugin::Queue>)>> =
        const { RefCell::new(Vec::new()) };
    /// The device (serial) whose copies to owned blocks this thread batches
    /// ([`Device::batch_begin`]), and whether one still waits for a
    /// synchronisation of its queue.
    static BATCH: Cell<Option<(u64, bool)>> = const { Cell::new(None) };
    /// Device memory read with a launch ([`Device::launch_reading_back`]).
    static READ_BACK: RefCell<Vec<ReadBack>> = const { RefCell::new(Vec::new()) };
}

/// Bytes read with a launch: device serial, source, the plugin's memory
/// token, the bytes.
type ReadBack = (u64, DevicePtr, u64, Vec<u8>);

impl Device {
    pub(crate) fn new(
        id: usize,
        plugin: &'static str,
        raw: Arc<dyn plugin::Device>,
        config: &Config,
    ) -> Self {
        static SERIALS: AtomicU64 = AtomicU64::new(1);
        let label = format!("device {id} ({plugin} {})", raw.info().uid);
        let local_host_allocations = raw.host_allocations_are_local();
        Device {
            id,
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            plugin,
            raw,
            pool: MemoryPool::new(config.memory_manager_threshold),
            index: AllocationIndex::default(),
            inline_queue: OnceLock::new(),
            stats: Stats::default(),
            label,
            launch_tuning: config.launch,
            local_host_allocations,
            queues: Mutex::new(Vec::new()),
            host_locks: Mutex::new(HostLocks::default()),
        }
    }

    /// Remember a core-driven queue of this device (frees defer to its work).
    pub(crate) fn track_queue(&self, worker: &Arc<Worker>) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.retain(|w| w.strong_count() > 0);
        queues.push(Arc::downgrade(worker));
    }

    /// The core-driven queues of this device with work not yet done.
    fn busy_queues(&self) -> Vec<Arc<Worker>> {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|w| w.has_pending())
            .collect()
    }

    /// Whether any core-driven queue of this device has work not yet done:
    /// the check every free makes, so lock-free per queue and allocation-free.
    fn any_queue_busy(&self) -> bool {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues
            .iter()
            .any(|w| w.upgrade().is_some_and(|w| w.has_pending()))
    }

    /// `[ptr, ptr + size)` as a host address, where it lies in a `Host`
    /// allocation of this device that lives in this process
    /// ([`plugin::Device::host_allocations_are_local`]): copies and fills
    /// naming this device for it work on it here.
    #[inline]
    pub(crate) fn local_host_range(&self, ptr: DevicePtr, size: usize) -> Option<*mut u8> {
        if !self.local_host_allocations {
            return None;
        }
        let a = self.index.check(ptr, size.max(1), &self.label).ok()?;
        (a.kind == AllocKind::Host && matches!(a.origin, Origin::Alloc(_)))
            .then_some(ptr.0 as *mut u8)
    }

    /// The OpenMP launch tuning variables this device's launches follow.
    pub fn launch_tuning(&self) -> &LaunchTuning {
        &self.launch_tuning
    }

    /// Index of this device among all devices of the runtime.
    pub fn id(&self) -> usize {
        self.id
    }
    /// Name of the plugin that owns it.
    pub fn plugin_name(&self) -> &'static str {
        self.plugin
    }
    pub fn info(&self) -> &DeviceInfo {
        self.raw.info()
    }
    /// "device N (plugin uid)", for messages.
    pub fn label(&self) -> &str {
        &self.label
    }
    pub fn shares_host_memory(&self) -> bool {
        self.raw.shares_host_memory()
    }

    /// Whether `olMemRegister` works for this device (see
    /// [`plugin::Device::registers_host_memory`]).
    pub fn registers_host_memory(&self) -> bool {
        self.raw.registers_host_memory()
    }

    /// Counters of this device's copies, launches and allocations.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    pub(crate) fn raw(&self) -> &Arc<dyn plugin::Device> {
        &self.raw
    }

    // ------------------------------------------------------------- memory

    /// Allocate `size` bytes of `kind` memory for the runtime's own faces.
    pub fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        self.alloc_for(size, kind, Owner::RUNTIME)
    }

    /// Device memory at exactly `ptr` (`offload replay` keeping recorded
    /// addresses), where the plugin can place it; release it with
    /// [`Device::free_placed`] (never cached by the pool).
    pub fn alloc_at(&self, ptr: DevicePtr, size: usize) -> Result<()> {
        if size == 0 {
            return Err(Error::invalid_size(format!(
                "cannot place 0 bytes on {}",
                self.label
            )));
        }
        self.raw.alloc_at(ptr, size)?;
        let a = Allocation {
            base: ptr,
            size,
            kind: AllocKind::Device,
            origin: Origin::Alloc(AllocKind::Device),
            // Only `free_placed` releases it (not the pool's free).
            owner: Owner::OWNED_BLOCKS,
        };
        if let Err(e) = self.index.insert(a) {
            // SAFETY: what the plugin just allocated, never filed: no one
            // else knows it.
            let _ = unsafe { self.raw.free(ptr, AllocKind::Device) };
            return Err(e);
        }
        Ok(())
    }

    /// Release memory of [`Device::alloc_at`].
    pub fn free_placed(&self, ptr: DevicePtr) -> Result<()> {
        self.free_to_device_if_owned_block(ptr)
    }

    /// Allocate `size` bytes of `kind` memory on behalf of `owner`.
    /// Zero-byte requests are an error (callers that accept them, like
    /// `omp_target_alloc`, check first).
    pub fn alloc_for(&self, size: usize, kind: AllocKind, owner: Owner) -> Result<DevicePtr> {
        if size == 0 {
            return Err(Error::invalid_size(format!(
                "cannot allocate 0 bytes on {}",
                self.label
            )));
        }
        self.stats.count_alloc(size);
        let class = (kind == AllocKind::Device)
            .then(|| self.pool.class_size(size))
            .flatten();
        if class.is_some() {
            // A cached block: its slot comes back to life, nothing shared
            // moves, one thread-local access.
            let reused = crate::memory::with_thread(|t| {
                let slot = self.pool.take_in(t, size)?;
                slot.revive(size, owner);
                let base = slot.base();
                self.index.remember_owned_in(&mut t.recent, slot);
                Some(base)
            });
            if let Some(Some(base)) = reused {
                return Ok(base);
            }
        }
        let capacity = class.unwrap_or(size);
        let _s = debug_span!("alloc", device = self.id, size, ?kind).entered();
        let ptr = self.raw.alloc(capacity, kind)?;
        if ptr.is_null() {
            return Err(Error::out_of_resources(format!(
                "{} returned no memory for {size} bytes",
                self.label
            )));
        }
        let a = Allocation {
            base: ptr,
            size,
            kind,
            origin: Origin::Alloc(kind),
            owner,
        };
        if let Err(e) = self.index.insert_with_capacity(a, capacity) {
            // SAFETY: what the plugin just allocated, never filed: no one
            // else knows it.
            let _ = unsafe { self.raw.free(ptr, kind) };
            return Err(Error::backend(format!("{}: {}", self.label, e.message())));
        }
        Ok(ptr)
    }

    /// Free an allocation made by [`Device::alloc`]. Unknown pointers (double
    /// frees, interior or foreign pointers) are an `InvalidArgument` error
    /// and leave the device untouched.
    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        self.free_for(ptr, None)
    }

    /// Free an allocation; with `owner`, only one of that owner's.
    pub fn free_for(&self, ptr: DevicePtr, owner: Option<Owner>) -> Result<()> {
        let label = &self.label;
        let accept = |a: &Allocation| {
            if a.owner.is_queue() {
                return Err(Error::invalid_argument(format!(
                    "pointer {ptr} was allocated on a queue of {label}: free it on a queue"
                )));
            }
            if !matches!(a.origin, Origin::Alloc(_))
                || owner.is_some_and(|o| o != a.owner)
                || a.owner == Owner::OWNED_BLOCKS
            {
                return Err(Error::invalid_argument(format!(
                    "pointer {ptr} is not an allocation of this caller on {label}"
                )));
            }
            Ok(())
        };
        let pooled = |a: &Allocation| {
            a.kind == AllocKind::Device && a.size <= self.pool.threshold() && a.size > 0
        };
        // Queued work may still use the memory: stream-ordered, the
        // pointer dies now and the memory once those queues pass this point.
        if self.any_queue_busy() {
            let (a, slot) = self.index.retire(ptr, label, accept)?;
            self.index.forget(&slot);
            let token = Arc::new(DeferredFree {
                raw: self.raw.clone(),
                ptr,
                kind: a.kind,
                label: label.clone(),
            });
            // Asked again now that no new work can name the pointer.
            for w in self.busy_queues() {
                let t = token.clone();
                let position = w.position();
                let queued = w.enqueue(Box::new(move || {
                    drop(t);
                    Ok(())
                }));
                if queued.is_err() {
                    // A destroyed queue takes no new work but finishes its
                    // own: wait for it here.
                    let _ = w.wait_until(position);
                }
            }
            return Ok(());
        }
        // Fast path: a block this thread used last goes back to its pool
        // front in one thread-local access.
        let fast = crate::memory::with_thread(|t| {
            let r = self.index.retire_recent(&mut t.recent, ptr, &accept)?;
            Some(r.map(|(a, slot)| {
                if pooled(&a) {
                    self.pool.put_in(t, a.size, slot);
                    None
                } else {
                    Some((a, slot))
                }
            }))
        });
        let (a, slot) = match fast.flatten() {
            Some(Ok(None)) => return Ok(()),
            Some(Ok(Some(unpooled))) => unpooled,
            Some(Err(e)) => return Err(e),
            None => self.index.retire(ptr, label, accept)?,
        };
        if pooled(&a) {
            // Kept for reuse, still filed (not live) in the index.
            self.pool.put(a.size, slot);
            return Ok(());
        }
        let _s = debug_span!("free", device = self.id, ptr = %ptr).entered();
        self.index.forget(&slot);
        // SAFETY: a live allocation of this device (retired from the index
        // above, so freed once) with its recorded kind; no queue had work
        // pending on it (else the deferred path above took it).
        unsafe { self.raw.free(ptr, a.kind) }
    }

    /// File memory of [`crate::Queue::alloc`] (`owner` says how it was
    /// allocated); on failure the memory is released at once.
    pub(crate) fn file_queue_alloc(&self, ptr: DevicePtr, size: usize, owner: Owner) -> Result<()> {
        let a = Allocation {
            base: ptr,
            size,
            kind: AllocKind::Device,
            origin: Origin::Alloc(AllocKind::Device),
            owner,
        };
        if let Err(e) = self.index.insert(a) {
            // SAFETY: what the plugin just allocated, never filed: no one
            // else knows it.
            let _ = unsafe { self.raw.free(ptr, AllocKind::Device) };
            return Err(Error::backend(format!("{}: {}", self.label, e.message())));
        }
        Ok(())
    }

    /// End the live range of queue memory at `ptr`, returning how it was
    /// allocated. Other pointers are an `InvalidArgument` error.
    pub(crate) fn retire_queue_alloc(&self, ptr: DevicePtr) -> Result<Owner> {
        let label = &self.label;
        let (a, slot) = self.index.retire(ptr, label, |a| {
            if a.owner.is_queue() {
                Ok(())
            } else {
                Err(Error::invalid_argument(format!(
                    "pointer {ptr} was not allocated on a queue of {label}"
                )))
            }
        })?;
        self.index.forget(&slot);
        Ok(a.owner)
    }

    /// Device memory for a face's own runtime data (OpenMP's mapped blocks
    /// and private copies), freed with [`Device::free_owned_block`] with the
    /// same size, exactly once. Small blocks come from the caching
    /// allocator and stay live ranges of the index (owner
    /// [`Owner::OWNED_BLOCKS`]) while cached: a copy or free of one touches
    /// no shared state, and pointers to them (`omp_get_mapped_ptr`) pass
    /// the range checks of the other faces. Nobody else can free them.
    #[inline]
    pub fn alloc_owned_block(&self, size: usize) -> Result<DevicePtr> {
        // The common case, kept small: a cached block from this thread's
        // pool front; everything else is out of line.
        if size != 0 && self.pool.class_size(size).is_some() {
            self.stats.count_alloc(size);
            let reused = crate::memory::with_thread(|t| self.pool.take_owned_in(t, size));
            if let Some(Some(ptr)) = reused {
                return Ok(ptr);
            }
        } else {
            self.stats.count_alloc(size);
        }
        self.alloc_owned_block_new(size)
    }

    /// [`Device::alloc_owned_block`] when no cached block serves: a new one
    /// from the device, filed in the index.
    #[cold]
    #[inline(never)]
    fn alloc_owned_block_new(&self, size: usize) -> Result<DevicePtr> {
        if size == 0 {
            return Err(Error::invalid_size(format!(
                "cannot allocate 0 bytes on {}",
                self.label
            )));
        }
        let capacity = self.pool.class_size(size).unwrap_or(size);
        let _s = debug_span!("alloc", device = self.id, size).entered();
        let ptr = self.raw.alloc(capacity, AllocKind::Device)?;
        if ptr.is_null() {
            return Err(Error::out_of_resources(format!(
                "{} returned no memory for {size} bytes",
                self.label
            )));
        }
        let a = Allocation {
            base: ptr,
            size: capacity,
            kind: AllocKind::Device,
            origin: Origin::Alloc(AllocKind::Device),
            owner: Owner::OWNED_BLOCKS,
        };
        if let Err(e) = self.index.insert(a) {
            // SAFETY: what the plugin just allocated, never filed: no one
            // else knows it.
            let _ = unsafe { self.raw.free(ptr, AllocKind::Device) };
            return Err(Error::backend(format!("{}: {}", self.label, e.message())));
        }
        Ok(ptr)
    }

    /// Release a block from [`Device::alloc_owned_block`] of `size` bytes.
    #[inline]
    pub fn free_owned_block(&self, ptr: DevicePtr, size: usize) -> Result<()> {
        if self.pool.class_size(size).is_some() {
            let kept = crate::memory::with_thread(|t| self.pool.put_owned_in(t, size, ptr));
            if kept.is_some() {
                return Ok(());
            }
        }
        self.free_owned_block_to_device(ptr)
    }

    /// [`Device::free_owned_block`] of a block the pool does not keep.
    #[cold]
    #[inline(never)]
    fn free_owned_block_to_device(&self, ptr: DevicePtr) -> Result<()> {
        self.free_to_device_if_owned_block(ptr)
    }

    /// Take `ptr` out of the index and give it back to the device, if it is
    /// a range only its creator frees ([`Owner::OWNED_BLOCKS`]: owned
    /// blocks, placed memory).
    fn free_to_device_if_owned_block(&self, ptr: DevicePtr) -> Result<()> {
        let label = &self.label;
        self.index.remove_if(ptr, label, |a| {
            if a.owner == Owner::OWNED_BLOCKS {
                Ok(())
            } else {
                Err(Error::invalid_argument(format!(
                    "pointer {ptr} is not an owned block or placed memory on {label}"
                )))
            }
        })?;
        let _s = debug_span!("free", device = self.id, ptr = %ptr).entered();
        // SAFETY: an owned block or placed memory of this device, removed
        // from the index just now (so freed once); its creator, who alone
        // frees it, has no work on it left (the owned-block contract).
        unsafe { self.raw.free(ptr, AllocKind::Device) }
    }

    /// The live range (allocation, global, registration) containing `ptr`.
    pub fn allocation(&self, ptr: DevicePtr) -> Option<Allocation> {
        self.index.find(ptr)
    }

    /// The live range holding all of `[ptr, ptr + size)`, or why not.
    pub fn check_range(&self, ptr: DevicePtr, size: usize) -> Result<Allocation> {
        self.index.check(ptr, size, &self.label)
    }

    /// Register host memory for this device (`olMemRegister`): the plugin
    /// prepares it (CUDA page-locks it) and the range is filed so copies
    /// naming it pass the range checks.
    ///
    /// # Safety
    /// `[ptr, ptr + size)` is host memory of this process that stays mapped
    /// until [`Device::unregister_host_range`].
    pub unsafe fn register_host_range(
        &self,
        ptr: DevicePtr,
        size: usize,
        owner: Owner,
    ) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.raw.register_host(ptr.0 as *mut u8, size) }?;
        let filed = self.index.insert(Allocation {
            base: ptr,
            size,
            kind: AllocKind::Host,
            origin: Origin::Registered,
            owner,
        });
        if let Err(e) = filed {
            let _ = self.raw.unregister_host(ptr.0 as *mut u8);
            return Err(e);
        }
        Ok(())
    }

    /// Lock host memory `[ptr, ptr + size)` for fast copies with this
    /// device (`llvm_omp_target_lock_mem`): the plugin registers it as for
    /// [`Device::register_host_range`], once; locking it, or a part of it,
    /// again counts one more user (a range reaching past a locked one is
    /// refused). Host memory this device allocated or registered is
    /// counted as it is. Devices that register nothing (host devices,
    /// remote ones) lock nothing. Returns the host address, which copies
    /// name (an AMD GPU's kernels may see locked memory at another
    /// address: the plugin translates it for copies only).
    ///
    /// # Safety
    /// `[ptr, ptr + size)` is host memory of this process that stays mapped
    /// until its last [`Device::unlock_host`].
    pub unsafe fn lock_host(&self, ptr: DevicePtr, size: usize) -> Result<DevicePtr> {
        if !self.locks_host_memory() {
            return Ok(ptr);
        }
        let mut locks = self.host_locks.lock().unwrap_or_else(|e| e.into_inner());
        if locks.take(ptr.0, size as u64)? == Locked::New {
            // Host memory of this device (`llvm_omp_target_alloc_host`,
            // `olMemRegister`) is locked already: a second registration
            // would be refused.
            let pinned = self.index.find(ptr).filter(|a| {
                let host = a.kind == AllocKind::Host || a.origin == Origin::Registered;
                host && ptr.0.saturating_add(size as u64) <= a.end()
            });
            if pinned.is_none() {
                // SAFETY: the caller's promise, passed on.
                unsafe { self.register_host_range(ptr, size, Owner::RUNTIME) }?;
            }
            locks.insert(ptr.0, size as u64, pinned.is_some());
        }
        Ok(ptr)
    }

    /// Give back a lock of [`Device::lock_host`] (`ptr`: any address in the
    /// locked range); the last one unlocks the memory.
    pub fn unlock_host(&self, ptr: DevicePtr) -> Result<()> {
        if !self.locks_host_memory() {
            return Ok(());
        }
        let mut locks = self.host_locks.lock().unwrap_or_else(|e| e.into_inner());
        let Released::Unlock(base) = locks.give_back(ptr.0)? else {
            return Ok(());
        };
        self.unregister_host_range(DevicePtr(base))
    }

    /// Whether `ptr` lies in host memory [`Device::lock_host`] locked.
    pub fn is_locked_host(&self, ptr: DevicePtr) -> bool {
        let locks = self.host_locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.holds(ptr.0)
    }

    /// Whether locking host memory means something here: the plugin
    /// registers it, and device pointers are not host pointers anyway.
    fn locks_host_memory(&self) -> bool {
        self.raw.registers_host_memory() && !self.raw.shares_host_memory()
    }

    /// Forget a registration made by [`Device::register_host_range`].
    pub fn unregister_host_range(&self, ptr: DevicePtr) -> Result<()> {
        let label = &self.label;
        self.index.remove_if(ptr, label, |a| {
            if a.origin == Origin::Registered {
                Ok(())
            } else {
                Err(Error::invalid_argument(format!(
                    "{ptr} is not registered host memory on {label}"
                )))
            }
        })?;
        self.raw.unregister_host(ptr.0 as *mut u8)
    }

    pub(crate) fn file_global(&self, ptr: DevicePtr, size: usize, owner: Owner) {
        // A global already filed (looked up before) stays as it is.
        if self.index.find(ptr).is_none() {
            let _ = self.index.insert(Allocation {
                base: ptr,
                size: size.max(1),
                kind: AllocKind::Device,
                origin: Origin::Global,
                owner,
            });
        }
    }

    pub(crate) fn forget_global(&self, ptr: DevicePtr) {
        let _ = self.index.remove_if(ptr, &self.label, |a| match a.origin {
            Origin::Global => Ok(()),
            _ => Err(Error::invalid_argument("not a global")),
        });
    }

    /// Number of live user allocations.
    pub fn live_allocations(&self) -> usize {
        self.index
            .all()
            .iter()
            .filter(|a| matches!(a.origin, Origin::Alloc(_)))
            .count()
    }

    /// Live allocations of `owner`.
    pub fn allocations_of(&self, owner: Owner) -> Vec<Allocation> {
        self.index
            .all()
            .into_iter()
            .filter(|a| a.owner == owner && matches!(a.origin, Origin::Alloc(_)))
            .collect()
    }

    // ------------------------------------------------- synchronous queue

    /// Run `op` on this thread's queue for this device, then synchronise.
    #[inline]
    pub(crate) fn with_sync_queue<R>(
        &self,
        op: impl FnOnce(&dyn plugin::Queue) -> Result<R>,
    ) -> Result<R> {
        // Plugins that complete inline (host): straight to the queue.
        if let Some(Some(q)) = self.inline_queue.get() {
            return op(q.as_ref());
        }
        self.with_sync_queue_slow(op)
    }

    #[inline(never)]
    fn with_sync_queue_slow<R>(
        &self,
        op: impl FnOnce(&dyn plugin::Queue) -> Result<R>,
    ) -> Result<R> {
        if let Some(q) = self.inline_queue()? {
            return op(q.as_ref());
        }
        let q = self.thread_queue()?;
        let r = op(q.as_ref());
        let synced = q.synchronize();
        self.batch_synced();
        let r = r?;
        synced?;
        Ok(r)
    }

    #[inline]
    fn inline_queue(&self) -> Result<Option<&Arc<dyn plugin::Queue>>> {
        match self.inline_queue.get() {
            Some(q) => Ok(q.as_ref()),
            None => self.first_inline_queue(),
        }
    }

    #[cold]
    fn first_inline_queue(&self) -> Result<Option<&Arc<dyn plugin::Queue>>> {
        let q = self.raw.create_queue()?;
        let q = q.completes_inline().then_some(q);
        Ok(self.inline_queue.get_or_init(|| q).as_ref())
    }

    fn thread_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        let found = SYNC_QUEUES
            .try_with(|qs| {
                qs.borrow()
                    .iter()
                    .find(|(s, _)| *s == self.serial)
                    .map(|(_, q)| q.clone())
            })
            .ok()
            .flatten();
        if let Some(q) = found {
            return Ok(q);
        }
        let q = self.raw.create_queue()?;
        let _ = SYNC_QUEUES.try_with(|qs| qs.borrow_mut().push((self.serial, q.clone())));
        Ok(q)
    }

    /// A new plugin queue of this device.
    pub(crate) fn create_raw_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        let _s = debug_span!("create_queue", device = self.id).entered();
        self.raw.create_queue()
    }

    /// Copy host memory to the device, now.
    ///
    /// # Safety
    /// `src` is valid for `size` bytes.
    pub unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        let _s = debug_span!("copy_to_device", device = self.id, dst = %dst, size).entered();
        if size == 0 {
            return Ok(());
        }
        if let Some(h) = self.local_host_range(dst, size) {
            // SAFETY: the caller's `src`; `h` is a live host allocation of
            // this process covering `size` bytes (checked just now).
            unsafe { std::ptr::copy(src, h, size) };
            return Ok(());
        }
        self.check_range(dst, size)?;
        self.stats.count_to_device(size);
        // SAFETY: `src` is valid for `size` bytes (our contract), the device
        // range was checked just now; the copy is synchronous.
        self.with_sync_queue(|q| unsafe { q.copy_to_device(dst, src, size) })
    }

    /// Copy host memory into device memory the caller allocated through
    /// this device and still holds, now, without the range check (the
    /// OpenMP face's own mapped blocks, addressed from its mapping table;
    /// addresses a user names go through the checked calls).
    ///
    /// # Safety
    /// `src` is valid for `size` bytes; `[dst, dst + size)` lies inside a
    /// live allocation of this device made by the caller.
    #[inline]
    pub unsafe fn copy_to_owned_block(
        &self,
        dst: DevicePtr,
        src: *const u8,
        size: usize,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        debug_assert!(self.check_range(dst, size).is_ok());
        self.stats.count_to_device(size);
        if !matches!(self.inline_queue.get(), Some(Some(_))) && self.batching() {
            let q = self.thread_queue()?;
            let _ = BATCH.try_with(|b| b.set(Some((self.serial, true))));
            // SAFETY: as below; the plugin reads `src` before returning and
            // orders the copy before later work (its contract).
            return unsafe { q.copy_to_device_unsynced(dst, src, size) };
        }
        // SAFETY: `src` is valid for `size` bytes and the device range lies
        // inside a live allocation (our contract); the copy is synchronous.
        self.with_sync_queue(|q| unsafe { q.copy_to_device(dst, src, size) })
    }

    /// Batch this thread's copies to owned blocks of this device until
    /// [`Device::batch_end`] (one OpenMP construct): each is handed to the
    /// plugin without waiting ([`plugin::Queue::copy_to_device_unsynced`]),
    /// and the next synchronous operation of this thread on the device (the
    /// region's launch) waits for them all. An error of such a copy
    /// surfaces there. False, and nothing batched, where the device's
    /// queues complete inline (nothing to wait for).
    pub fn batch_begin(&self) -> bool {
        match self.inline_queue.get() {
            Some(Some(_)) => return false,
            Some(None) => {}
            None => {
                if !matches!(self.first_inline_queue(), Ok(None)) {
                    return false;
                }
            }
        }
        BATCH
            .try_with(|b| b.set(Some((self.serial, false))))
            .is_ok()
    }

    /// A synchronisation of this thread's queue covered the batch's copies.
    fn batch_synced(&self) {
        let _ = BATCH.try_with(|b| {
            if b.get() == Some((self.serial, true)) {
                b.set(Some((self.serial, false)));
            }
        });
    }

    /// [`Device::launch`] in a batch ([`Device::batch_begin`]), reading
    /// `ranges` of device memory after the kernel in the same round trip:
    /// a [`Device::copy_from_owned_block`] of exactly one of them before
    /// [`Device::batch_end`] takes those bytes, if the plugin can tell that
    /// no work has changed device memory since
    /// ([`plugin::Queue::unchanged_since`]); otherwise it reads afresh.
    /// `ranges` is called only where the plugin can tell; ranges outside
    /// live memory of this device are left out. An error is the launch's
    /// (its wait covers the reads and the batch's copies in).
    pub fn launch_reading_back<R: AsRef<[(DevicePtr, usize)]>>(
        &self,
        kernel: &Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
        ranges: impl FnOnce() -> R,
    ) -> Result<()> {
        if !self.batching()
            || !matches!(self.inline_queue.get(), Some(None))
            || crate::record::active().is_some()
        {
            return self.launch(kernel, args, config);
        }
        let q = self.thread_queue()?;
        if q.memory_snapshot().is_none() {
            return self.launch(kernel, args, config);
        }
        let mut bufs: Vec<(DevicePtr, Vec<u8>)> = ranges()
            .as_ref()
            .iter()
            .filter(|&&(p, n)| self.check_range(p, n).is_ok())
            .map(|&(p, n)| (p, vec![0u8; n]))
            .collect();
        if bufs.is_empty() {
            return self.launch(kernel, args, config);
        }
        let _s = debug_span!("launch", device = self.id, kernel = kernel.name()).entered();
        self.check_kernel(kernel)?;
        self.stats.count_launch();
        let sizes = kernel.resolve(config);
        let sent = q.launch(kernel.raw(), args, &sizes).and_then(|()| {
            bufs.iter_mut().try_for_each(|(p, b)| {
                // SAFETY: `b` is valid for its length and stays allocated
                // until the queue is synchronised below (on failure, for
                // good); the device range lies in live memory of this
                // device (checked above).
                unsafe { q.copy_from_device(b.as_mut_ptr(), *p, b.len()) }
            })
        });
        let synced = q.synchronize();
        self.batch_synced();
        if sent.is_err() || synced.is_err() {
            // A failed wait may leave reads in flight into the buffers.
            std::mem::forget(bufs);
            sent?;
            return synced;
        }
        if let Some(token) = q.memory_snapshot() {
            let serial = self.serial;
            let _ = READ_BACK.try_with(|r| {
                r.borrow_mut()
                    .extend(bufs.into_iter().map(|(p, b)| (serial, p, token, b)))
            });
        }
        Ok(())
    }

    /// Serve a copy from device memory read back with the launch, if it
    /// was and is still current.
    fn take_read_back(&self, dst: *mut u8, src: DevicePtr, size: usize) -> bool {
        let found = READ_BACK
            .try_with(|r| {
                let r = r.borrow();
                r.iter()
                    .position(|(s, p, _, b)| *s == self.serial && *p == src && b.len() == size)
                    .map(|i| (i, r[i].2))
            })
            .ok()
            .flatten();
        let Some((i, token)) = found else {
            return false;
        };
        let current = self.thread_queue().is_ok_and(|q| q.unchanged_since(token));
        READ_BACK
            .try_with(|r| {
                let mut r = r.borrow_mut();
                if !current {
                    r.retain(|e| e.0 != self.serial);
                    return false;
                }
                let (_, _, _, b) = r.swap_remove(i);
                // SAFETY: `dst` is valid for `size` bytes (the caller's
                // contract); `b` holds exactly `size` bytes.
                unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), dst, size) };
                true
            })
            .unwrap_or(false)
    }

    /// End this thread's batch ([`Device::batch_begin`]): wait for copies
    /// no synchronous operation has waited for yet, and report their error.
    pub fn batch_end(&self) -> Result<()> {
        let _ = READ_BACK.try_with(|r| {
            let mut r = r.borrow_mut();
            if !r.is_empty() {
                r.retain(|e| e.0 != self.serial);
            }
        });
        let batch = BATCH.try_with(|b| b.take()).ok().flatten();
        if batch == Some((self.serial, true)) {
            return self.thread_queue()?.synchronize();
        }
        Ok(())
    }

    #[inline]
    fn batching(&self) -> bool {
        BATCH
            .try_with(|b| b.get())
            .ok()
            .flatten()
            .is_some_and(|(s, _)| s == self.serial)
    }

    /// The other direction of [`Device::copy_to_owned_block`].
    ///
    /// # Safety
    /// `dst` is valid for `size` bytes; `[src, src + size)` lies inside a
    /// live allocation of this device made by the caller.
    #[inline]
    pub unsafe fn copy_from_owned_block(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        size: usize,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        debug_assert!(self.check_range(src, size).is_ok());
        self.stats.count_from_device(size);
        if !matches!(self.inline_queue.get(), Some(Some(_))) && self.take_read_back(dst, src, size)
        {
            return Ok(());
        }
        // SAFETY: `dst` is valid for `size` bytes and the device range lies
        // inside a live allocation (our contract); the copy is synchronous.
        self.with_sync_queue(|q| unsafe { q.copy_from_device(dst, src, size) })
    }

    /// Copy device memory to the host, now.
    ///
    /// # Safety
    /// `dst` is valid for `size` bytes.
    pub unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        let _s = debug_span!("copy_from_device", device = self.id, src = %src, size).entered();
        if size == 0 {
            return Ok(());
        }
        if let Some(h) = self.local_host_range(src, size) {
            // SAFETY: as in `copy_to_device`, the other way.
            unsafe { std::ptr::copy(h, dst, size) };
            return Ok(());
        }
        self.check_range(src, size)?;
        self.stats.count_from_device(size);
        // SAFETY: `dst` is valid for `size` bytes (our contract), the device
        // range was checked just now; the copy is synchronous.
        self.with_sync_queue(|q| unsafe { q.copy_from_device(dst, src, size) })
    }

    /// Fill `size` bytes at `dst` with `pattern` repeated, now.
    pub fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        let _s =
            debug_span!("fill", device = self.id, dst = %dst, size, pattern_size = pattern.len())
                .entered();
        check_fill(pattern, size)?;
        if size == 0 {
            return Ok(());
        }
        if let Some(h) = self.local_host_range(dst, size) {
            // SAFETY: a live host allocation of this process covering
            // `size` bytes (checked just now); device memory, which no safe
            // reference (such as `pattern`) points into.
            unsafe { crate::transfer::host_fill(h, pattern, size) };
            return Ok(());
        }
        self.check_range(dst, size)?;
        // SAFETY: the range lies in a live range of this device (checked
        // just now) and `check_fill` accepted the pattern and size.
        self.with_sync_queue(|q| unsafe { q.fill(dst, pattern, size) })
    }

    /// Launch `kernel` and wait for it.
    #[inline]
    pub fn launch(
        &self,
        kernel: &Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let _s = debug_span!("launch", device = self.id, kernel = kernel.name()).entered();
        self.check_kernel(kernel)?;
        self.stats.count_launch();
        let sizes = kernel.resolve(config);
        if let Some(rec) = crate::record::active().filter(|r| r.wants(kernel.name())) {
            // The request is recorded: a replay resolves it again.
            return rec.record(self, kernel, args, config, || {
                self.with_sync_queue(|q| q.launch(kernel.raw(), args, &sizes))
            });
        }
        self.with_sync_queue(|q| q.launch(kernel.raw(), args, &sizes))
    }

    /// Every live range of the index (allocations, globals, registrations).
    #[cfg_attr(not(feature = "record"), allow(dead_code))]
    pub(crate) fn live_ranges(&self) -> Vec<Allocation> {
        self.index.all()
    }

    #[inline]
    pub(crate) fn check_kernel(&self, kernel: &Kernel) -> Result<()> {
        if kernel.device().serial != self.serial {
            return Err(Error::new(
                ErrorCode::InvalidDevice,
                format!(
                    "kernel '{}' belongs to a program of {}, not of {}",
                    kernel.name(),
                    kernel.device().label,
                    self.label
                ),
            ));
        }
        Ok(())
    }

    // ------------------------------------------------------------ images

    /// Whether any image in `bytes` (unwrapped from its containers) runs here.
    pub fn is_compatible(&self, bytes: &[u8]) -> bool {
        offload_image::unwrap(bytes)
            .map(|imgs| imgs.iter().any(|i| self.can_run(i)))
            .unwrap_or(false)
    }

    /// Whether this device can run `image`: natively, or as bitcode it
    /// compiles at load time ([`crate::jit`]).
    pub fn can_run(&self, image: &DeviceImage<'_>) -> bool {
        self.raw.can_run(image) || self.compiles(image)
    }

    /// Whether `image` is bitcode this device compiles at load time.
    fn compiles(&self, image: &DeviceImage<'_>) -> bool {
        image.format == offload_image::ImageFormat::Bitcode
            && self
                .raw
                .jit_target()
                .is_some_and(|t| crate::jit::can_compile(image, &t))
    }

    /// The image of `images` this device should load: native code for
    /// exactly its architecture (the more target features its plugin
    /// checked, as an AMD GPU's `gfx90a:sramecc+:xnack-`, the better), then
    /// native code for its family (no or a generic architecture,
    /// `gfx11-generic`), then bitcode it compiles; the first of the best
    /// kind. Images for other targets are never chosen.
    pub fn best_image<'i, 'a>(&self, images: &'i [DeviceImage<'a>]) -> Option<&'i DeviceImage<'a>> {
        let mut best: Option<(u8, &'i DeviceImage<'a>)> = None;
        for image in images {
            let Some(rank) = self.rank(image) else {
                continue;
            };
            if best.is_none_or(|(b, _)| rank > b) {
                best = Some((rank, image));
            }
        }
        best.map(|(_, image)| image)
    }

    /// How well `image` suits this device (higher is better), None when it
    /// cannot run here.
    fn rank(&self, image: &DeviceImage<'_>) -> Option<u8> {
        if image.format != offload_image::ImageFormat::Bitcode && self.raw.can_run(image) {
            let arch = self.info().arch.as_str();
            let exact = !arch.is_empty()
                && image
                    .arch
                    .as_deref()
                    .is_some_and(|a| a == arch || a.split(':').next() == Some(arch));
            return Some(if exact {
                3u8.saturating_add(self.raw.pinned_features(image).min(8))
            } else {
                2
            });
        }
        // Bitcode: compiled here, or taken as it is by a plugin that passes
        // it on (the remote plugin: the server's device compiles it).
        (self.raw.can_run(image) || self.compiles(image)).then_some(1)
    }

    /// Load the image of `bytes` that suits this device best
    /// ([`Device::best_image`]; containers are unwrapped, metadata reaches
    /// the plugin with the image).
    pub fn load_program(self: &Arc<Self>, bytes: &[u8]) -> Result<Arc<Program>> {
        let _s = debug_span!("load_program", device = self.id, size = bytes.len()).entered();
        crate::files::check_image_size(bytes.len())?;
        let images = offload_image::unwrap(bytes)?;
        let image = self.select_image(&images)?;
        self.load_image_for(image, Owner::RUNTIME)
    }

    /// Load an image already unwrapped by the caller.
    pub fn load_image(self: &Arc<Self>, image: &DeviceImage<'_>) -> Result<Arc<Program>> {
        self.load_image_for(image, Owner::RUNTIME)
    }

    /// Load an unwrapped image for `owner` (its globals are filed as the
    /// owner's memory).
    pub fn load_image_for(
        self: &Arc<Self>,
        image: &DeviceImage<'_>,
        owner: Owner,
    ) -> Result<Arc<Program>> {
        let _s = debug_span!("load_image", device = self.id, size = image.bytes.len()).entered();
        crate::files::check_image_size(image.bytes.len())?;
        // Recorded launches need the image their kernel came from.
        let kept: Option<Arc<[u8]>> = crate::record::active().map(|_| Arc::from(image.bytes));
        if !self.raw.can_run(image) && self.compiles(image) {
            let target = self.raw.jit_target().expect("compiles() checked it");
            let native = crate::jit::compile(image, &target)?;
            let compiled = DeviceImage {
                bytes: &native,
                format: offload_image::detect(&native),
                triple: Some(target.triple.clone()),
                arch: target.cpu.clone(),
                image_kind: None,
                offload_kind: image.offload_kind,
                strings: image.strings.clone(),
                metadata: image.metadata.clone(),
                containers: image.containers.clone(),
            };
            let raw = self.raw.load_program(&compiled)?;
            return Ok(Program::new(self.clone(), raw, owner, kept));
        }
        if !self.raw.can_run(image) {
            return Err(Error::invalid_binary(format!(
                "image ({}) cannot run on {} ({}){}",
                describe_image(image),
                self.label,
                self.info().triple,
                self.incompatibility(image)
            )));
        }
        let raw = self.raw.load_program(image)?;
        Ok(Program::new(self.clone(), raw, owner, kept))
    }

    /// `": reason"` when the plugin says why `image` does not run here.
    fn incompatibility(&self, image: &DeviceImage<'_>) -> String {
        self.raw
            .incompatibility(image)
            .map(|why| format!(": {why}"))
            .unwrap_or_default()
    }

    fn select_image<'i, 'a>(&self, images: &'i [DeviceImage<'a>]) -> Result<&'i DeviceImage<'a>> {
        self.best_image(images).ok_or_else(|| {
            let found: Vec<String> = images
                .iter()
                .map(|i| format!("{}{}", describe_image(i), self.incompatibility(i)))
                .collect();
            Error::invalid_binary(format!(
                "no image compatible with {} ({}); found {} image(s): {}",
                self.label,
                self.info().triple,
                images.len(),
                found.join(", ")
            ))
        })
    }

    /// Free everything still allocated and empty the pool (runtime shutdown).
    pub(crate) fn release_memory(&self) {
        for a in self.index.drain() {
            if let Origin::Alloc(kind) = a.origin {
                // SAFETY: runtime shutdown: every allocation, drained from
                // the index (so each once), with its kind; no queue runs.
                let _ = unsafe { self.raw.free(a.base, kind) };
            }
        }
        for slot in self.pool.drain() {
            self.index.forget(&slot);
            // SAFETY: a cached (not live) pool block, drained from the pool
            // and forgotten by the index: freed once, used by nothing.
            let _ = unsafe { self.raw.free(slot.base(), AllocKind::Device) };
        }
        // Cached owned blocks were live ranges: freed just above.
        self.pool.drain_owned();
    }
}

/// A fill pattern must be non-empty and divide the size.
pub(crate) fn check_fill(pattern: &[u8], size: usize) -> Result<()> {
    if pattern.is_empty() || !size.is_multiple_of(pattern.len()) {
        return Err(Error::invalid_size(format!(
            "fill of {size} bytes is not a multiple of the {}-byte pattern",
            pattern.len()
        )));
    }
    Ok(())
}

/// "triple/arch" of an image for messages.
pub fn describe_image(image: &DeviceImage<'_>) -> String {
    let triple = image.triple.as_deref().unwrap_or("unknown triple");
    match image.arch.as_deref() {
        Some(a) if !a.is_empty() => format!("{triple} {a}"),
        // An AMD code object says its target in its ELF header.
        _ => match offload_image::amdgpu::TargetId::of_code_object(image.bytes) {
            Some(target) => format!("{triple} {target}"),
            None => triple.to_string(),
        },
    }
}

impl Error {
    pub fn invalid_size(message: impl Into<String>) -> Self {
        Error::new(ErrorCode::InvalidSize, message)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}
