//! Queues and events as every face sees them: one asynchronous operation
//! set (copies, fill, launch, host function, event record/wait) over a
//! plugin queue.
//!
//! * A plugin with real queues (remote, GPUs) gets its operations handed
//!   straight through: its pipelining is kept, errors surface at sync.
//! * A plugin whose queues complete inline (host, sim) gets the generic
//!   [`Worker`] in front, so enqueuing returns at once and a host function
//!   may block on something the caller does after enqueuing it.
//! * A queue of no device (liboffload's host device) is a worker alone.
//!
//! Copies are decided in one place, [`crate::Runtime::copy`]; the methods
//! here are the per-queue halves it calls.

use std::sync::Arc;

use tracing::debug_span;

use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::executor::{self, Worker};
use crate::index::Owner;
use crate::plugin::{self, AllocKind, DevicePtr, KernelArgs, LaunchConfig};
use crate::program::Kernel;

pub struct Queue {
    device: Option<Arc<Device>>,
    raw: Option<Arc<dyn plugin::Queue>>,
    worker: Option<Arc<Worker>>,
}

/// A point in a queue's work.
#[derive(Clone)]
pub struct Event(EventKind);

#[derive(Clone)]
enum EventKind {
    /// Everything before `position` of a worker-driven queue.
    Position(Arc<Worker>, u64),
    /// A plugin event.
    Plugin(Arc<dyn plugin::Event>),
}

/// Host addresses carried into queued closures.
#[derive(Clone, Copy)]
pub(crate) struct HostAddr(pub usize);

impl Queue {
    /// A new queue on `device`, or a host-only queue with `None`.
    pub fn new(device: Option<&Arc<Device>>) -> Result<Queue> {
        let _s = debug_span!("create_queue", device = device.map(|d| d.id())).entered();
        let Some(device) = device else {
            return Ok(Queue {
                device: None,
                raw: None,
                worker: Some(Worker::new()),
            });
        };
        let raw = device.create_raw_queue()?;
        let worker = raw
            .completes_inline()
            .then(|| Worker::for_device(raw.clone()));
        if let Some(w) = &worker {
            device.track_queue(w);
        }
        Ok(Queue {
            device: Some(device.clone()),
            raw: Some(raw),
            worker,
        })
    }

    /// The device, or None for a host-only queue.
    pub fn device(&self) -> Option<&Arc<Device>> {
        self.device.as_ref()
    }

    /// Whether this queue belongs to `device`.
    pub fn is_on(&self, device: &Device) -> bool {
        self.device
            .as_ref()
            .is_some_and(|d| std::ptr::eq(&**d, device))
    }

    /// Run `op` against the plugin queue, in queue order.
    fn submit_raw(
        &self,
        op: impl FnOnce(&dyn plugin::Queue) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        let raw = self.raw.as_ref().ok_or_else(|| {
            Error::new(
                ErrorCode::Unsupported,
                "the host device runs no device operations",
            )
        })?;
        match &self.worker {
            // Enqueued: the call returns before the work runs (on the
            // queue's worker, or in a thread that waits for it first),
            // on the plugin queue the worker was made for.
            Some(w) => w.enqueue_device(Box::new(op)),
            None => op(raw.as_ref()),
        }
    }

    /// Run `f` on the host in queue order (it may block).
    pub(crate) fn submit_host(
        &self,
        f: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Result<()> {
        if let Some(w) = &self.worker {
            return w.enqueue(Box::new(f));
        }
        let raw = self
            .raw
            .as_ref()
            .expect("a queue has a worker or a plugin queue");
        // A plugin host function cannot return an error: run the work at its
        // turn and report a failure by the next sync of this thread instead.
        // The plugin queue orders it; we wait for everything before it first.
        raw.synchronize()?;
        f()
    }

    /// # Safety
    /// `src` stays valid for `size` bytes until the queue reaches the copy.
    pub(crate) unsafe fn copy_to_device(
        &self,
        dst: DevicePtr,
        src: HostAddr,
        size: usize,
    ) -> Result<()> {
        // SAFETY: `src` stays valid until the queue reaches the copy (our
        // contract); the caller checked the device range.
        self.submit_raw(move |q| unsafe { q.copy_to_device(dst, src.0 as *const u8, size) })
    }

    /// # Safety
    /// `dst` stays valid for `size` bytes until the queue reaches the copy.
    pub(crate) unsafe fn copy_from_device(
        &self,
        dst: HostAddr,
        src: DevicePtr,
        size: usize,
    ) -> Result<()> {
        // SAFETY: `dst` stays valid until the queue reaches the copy (our
        // contract); the caller checked the device range.
        self.submit_raw(move |q| unsafe { q.copy_from_device(dst.0 as *mut u8, src, size) })
    }

    /// # Safety
    /// Both ranges lie in live ranges of this queue's device (checked).
    pub(crate) unsafe fn copy_within(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<()> {
        // SAFETY: the caller's guarantee, passed on.
        self.submit_raw(move |q| unsafe { q.copy_within(dst, src, size) })
    }

    /// Fill `size` bytes at `dst` (memory of this queue's device, or host
    /// memory on a host-only queue) with `pattern`; the pattern is copied now.
    pub fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        crate::device::check_fill(pattern, size)?;
        if size == 0 {
            return Ok(());
        }
        let pattern = pattern.to_vec();
        match &self.device {
            Some(d) if d.local_host_range(dst, size).is_some() => self.submit_host(move || {
                // SAFETY: a live host allocation of this process (checked
                // above), filled in the queue's order; `pattern` is our copy.
                unsafe { crate::transfer::host_fill(dst.0 as *mut u8, &pattern, size) };
                Ok(())
            }),
            Some(d) => {
                d.check_range(dst, size)?;
                // SAFETY: a live range of this device (checked just now);
                // the pattern and size were checked on entry.
                self.submit_raw(move |q| unsafe { q.fill(dst, &pattern, size) })
            }
            None => self.submit_host(move || {
                // SAFETY: a host-only queue names host memory its user owns
                // (its one user, liboffload's host device, passes olMemFill's
                // pointer under the C caller's contract). Not checked here:
                // this safe function trusts that contract (issue 23).
                // `pattern` is our copy, so it does not overlap `dst`.
                unsafe { crate::transfer::host_fill(dst.0 as *mut u8, &pattern, size) };
                Ok(())
            }),
        }
    }

    /// Launch `kernel` (of this queue's device). The arguments are copied
    /// now: the caller may reuse them as soon as this returns.
    pub fn launch(
        &self,
        kernel: &Arc<Kernel>,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let device = self
            .device
            .as_ref()
            .ok_or_else(|| Error::new(ErrorCode::Unsupported, "the host device runs no kernels"))?;
        device.check_kernel(kernel)?;
        device.stats().count_launch();
        let _s = debug_span!("launch", device = device.id(), kernel = kernel.name()).entered();
        if let Some(rec) = crate::record::active().filter(|r| r.wants(kernel.name())) {
            // Recorded launches run in order, now: earlier work first, so
            // the snapshot sees what the kernel will.
            self.synchronize()?;
            let sizes = kernel.resolve(config);
            return rec.record(device, kernel, args, config, || {
                device.with_sync_queue(|q| q.launch(kernel.raw(), args, &sizes))
            });
        }
        let config = kernel.resolve(config);
        kernel.raw().check_launch(&args, &config)?;
        if self.worker.is_none() {
            // The plugin queue copies what it needs before returning.
            let raw = self
                .raw
                .as_ref()
                .expect("device queues have a plugin queue");
            return raw.launch(kernel.raw(), args, &config);
        }
        let kernel = kernel.clone();
        match args {
            KernelArgs::Words(w) => {
                let words = w.to_vec();
                self.submit_raw(move |q| q.launch(kernel.raw(), KernelArgs::Words(&words), &config))
            }
            KernelArgs::Packed(b) => {
                let bytes = b.to_vec();
                self.submit_raw(move |q| {
                    q.launch(kernel.raw(), KernelArgs::Packed(&bytes), &config)
                })
            }
        }
    }

    /// `size` bytes of device memory for the work of this queue
    /// (stream-ordered allocation, as `cuMemAllocAsync`): work enqueued
    /// here from now on may use it at once; other queues and synchronous
    /// calls only after this queue's work so far has finished (sync, or
    /// wait for an event recorded after this call). Plugins without
    /// ordered allocation allocate plainly (usable everywhere at once).
    /// Release it with [`Queue::free`] (of any queue of the device), not
    /// `Device::free`.
    pub fn alloc(&self, size: usize) -> Result<DevicePtr> {
        let device = self.device_or_unsupported()?;
        if size == 0 {
            return Err(Error::invalid_size(format!(
                "cannot allocate 0 bytes on {}",
                device.label()
            )));
        }
        let _s = debug_span!("queue_alloc", device = device.id(), size).entered();
        device.stats().count_alloc(size);
        let ordered = match (&self.worker, &self.raw) {
            (None, Some(raw)) => raw.alloc_ordered(size)?,
            _ => None,
        };
        let (ptr, owner) = match ordered {
            Some(ptr) => (ptr, Owner::QUEUE_ORDERED),
            None => (
                device.raw().alloc(size, AllocKind::Device)?,
                Owner::QUEUE_DEFERRED,
            ),
        };
        if ptr.is_null() {
            return Err(Error::out_of_resources(format!(
                "{} returned no memory for {size} bytes",
                device.label()
            )));
        }
        device.file_queue_alloc(ptr, size, owner)?;
        Ok(ptr)
    }

    /// Release memory of [`Queue::alloc`] once the work enqueued here so
    /// far has finished; the pointer is invalid for new work at once.
    /// Without ordered allocation in the plugin, a queue driven by the
    /// core's executor frees it in its turn and a plugin queue is
    /// synchronised first. Other pointers are an `InvalidArgument` error.
    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        let device = self.device_or_unsupported()?;
        let _s = debug_span!("queue_free", device = device.id(), ptr = %ptr).entered();
        let owner = device.retire_queue_alloc(ptr)?;
        // The pointer has left the index: if the ordered free cannot be
        // queued, it is freed now rather than leaked (`cuMemFree` takes
        // pool memory too).
        let now = |e: Error| {
            let synced = self.synchronize();
            // SAFETY: (each free below) queue memory of this device, retired
            // from the index just now (so freed once), released after the
            // work enqueued before this free: synchronised first, or queued
            // behind it.
            unsafe { device.raw().free(ptr, AllocKind::Device) }?;
            synced.and(Err(e))
        };
        match (&self.worker, &self.raw) {
            (None, Some(raw)) if owner == Owner::QUEUE_ORDERED => {
                raw.free_ordered(ptr).or_else(now)
            }
            (Some(_), _) => {
                let d = device.clone();
                // SAFETY: as above.
                self.submit_host(move || unsafe { d.raw().free(ptr, AllocKind::Device) })
                    .or_else(now)
            }
            _ => {
                // Freed even when earlier work failed (the memory is no
                // longer filed); the failure is still reported.
                let synced = self.synchronize();
                // SAFETY: as above.
                let freed = unsafe { device.raw().free(ptr, AllocKind::Device) };
                synced.and(freed)
            }
        }
    }

    fn device_or_unsupported(&self) -> Result<&Arc<Device>> {
        self.device.as_ref().ok_or_else(|| {
            Error::new(
                ErrorCode::Unsupported,
                "the host device has no queue-ordered memory",
            )
        })
    }

    /// Run `f` on the host once everything enqueued before it has finished.
    pub fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        match (&self.worker, &self.raw) {
            (Some(w), _) => w.enqueue(Box::new(move || {
                f();
                Ok(())
            })),
            (None, Some(raw)) => raw.host_function(f),
            (None, None) => unreachable!("a queue has a worker or a plugin queue"),
        }
    }

    /// An event that completes when everything enqueued so far has.
    pub fn record_event(&self) -> Result<Event> {
        match (&self.worker, &self.raw) {
            (Some(w), _) => Ok(Event(EventKind::Position(w.clone(), w.position()))),
            (None, Some(raw)) => Ok(Event(EventKind::Plugin(raw.record_event()?))),
            (None, None) => unreachable!("a queue has a worker or a plugin queue"),
        }
    }

    /// Make work enqueued later wait for `event` (of any queue). The caller
    /// is not blocked, except when a plugin queue must wait for a
    /// worker-driven queue (no plugin can wait on our workers).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if event.is_complete()? {
            return Ok(());
        }
        match (&self.worker, &event.0) {
            (Some(w), EventKind::Position(ew, _)) if Arc::ptr_eq(w, ew) => Ok(()),
            (Some(w), _) => {
                let e = event.clone();
                w.enqueue(Box::new(move || e.wait()))
            }
            (None, EventKind::Plugin(pe)) => {
                let raw = self
                    .raw
                    .as_ref()
                    .expect("device queues have a plugin queue");
                raw.wait_event(pe.as_ref())
            }
            (None, EventKind::Position(..)) => event.wait(),
        }
    }

    /// Wait for everything enqueued so far; report the first failure among it.
    pub fn synchronize(&self) -> Result<()> {
        match (&self.worker, &self.raw) {
            (Some(w), _) => w.sync(),
            (None, Some(raw)) => raw.synchronize(),
            (None, None) => unreachable!("a queue has a worker or a plugin queue"),
        }
    }

    /// True when nothing is pending.
    pub fn is_idle(&self) -> Result<bool> {
        match (&self.worker, &self.raw) {
            (Some(w), _) => Ok(w.is_empty()),
            (None, Some(raw)) => raw.is_idle(),
            (None, None) => unreachable!("a queue has a worker or a plugin queue"),
        }
    }

    /// Accept no more work. Work already enqueued still runs (a worker is
    /// joined by [`join_closed_queues`]); an idle queue reports a failure
    /// nobody has synchronised yet.
    pub fn close(&self) -> Result<()> {
        match &self.worker {
            Some(w) => {
                let (thread, pending) = w.close();
                if let Some(t) = thread {
                    executor::retire(t);
                }
                pending
            }
            None => Ok(()),
        }
    }
}

/// Wait for the workers of every closed queue (library teardown).
pub fn join_closed_queues() {
    executor::join_retired();
}

impl Event {
    /// Wait for the event's work; report the first failure among it (once).
    pub fn synchronize(&self) -> Result<()> {
        match &self.0 {
            EventKind::Position(w, p) => w.wait_for(*p),
            EventKind::Plugin(e) => e.synchronize(),
        }
    }

    /// Wait without taking the queue's errors (used by other queues).
    fn wait(&self) -> Result<()> {
        match &self.0 {
            EventKind::Position(w, p) => w.wait_until(*p),
            EventKind::Plugin(e) => e.synchronize(),
        }
    }

    pub fn is_complete(&self) -> Result<bool> {
        match &self.0 {
            EventKind::Position(w, p) => Ok(w.reached(*p)),
            EventKind::Plugin(e) => e.is_complete(),
        }
    }
}
