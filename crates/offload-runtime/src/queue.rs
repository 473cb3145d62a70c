//! Queues, kernel arguments, launches and events.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytemuck::{NoUninit, Pod};
use offload_core::plugin::KernelArgs as RawArgs;
use offload_core::{DevicePtr, Error, LaunchConfig, Result};

use crate::buffer::{DeviceDst, DeviceSrc};
use crate::completion::Completion;
use crate::{Device, Kernel};

/// An in-order, asynchronous queue of a device. Cheap to clone: clones
/// are the same queue.
///
/// Work on a queue runs in the order it was enqueued and asynchronously to
/// the host. Kernels launch with [`Queue::launch`]; copies, fills and
/// launches that borrow host or device memory are enqueued inside a
/// [`Queue::scope`], which keeps every borrow alive until the queue has
/// finished with it.
#[derive(Clone)]
pub struct Queue {
    pub(crate) device: Device,
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) core: Arc<offload_core::Queue>,
    /// Failures of launches whose [`Launch`] was dropped unwaited: the next
    /// [`Queue::synchronize`] reports the first.
    deferred: Mutex<Option<Error>>,
}

impl Shared {
    fn defer(&self, e: Error) {
        let mut d = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
        d.get_or_insert(e);
    }
    fn take_deferred(&self) -> Option<Error> {
        self.deferred
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last clone lets the queue's executor (if any) finish and exit.
        let _ = self.core.close();
    }
}

/// A packed argument buffer, laid out like a C struct of the values pushed.
///
/// It borrows the buffers it points to for `'a`: read-only for
/// [`ptr`](Self::ptr), exclusively for [`ptr_mut`](Self::ptr_mut) (the
/// kernel may write there). While the arguments, or a [`Launch`] made from
/// them, are alive, the borrow checker keeps the host off buffers the kernel
/// writes.
#[derive(Debug, Default)]
pub struct KernelArgs<'a> {
    bytes: Vec<u8>,
    _borrows: PhantomData<&'a mut ()>,
}

impl<'a> KernelArgs<'a> {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a plain value at its natural alignment.
    ///
    /// `T: NoUninit` (no padding, no uninitialised bytes): `bool`, integers,
    /// floats, arrays and `#[repr(C)]` structs of them without padding.
    pub fn value<T: NoUninit>(mut self, value: T) -> Self {
        let align = std::mem::align_of::<T>();
        let start = self.bytes.len().next_multiple_of(align);
        self.bytes.resize(start, 0);
        self.bytes.extend_from_slice(bytemuck::bytes_of(&value));
        self
    }

    /// Append the device address of a buffer (or a view of one) the kernel
    /// only reads.
    pub fn ptr<T: Pod>(self, buffer: impl DeviceSrc<'a, T>) -> Self {
        let view = buffer.view();
        self.value(view.device_ptr().0)
    }

    /// Append the device address of a buffer (or a view of one) the kernel
    /// may write: it stays mutably borrowed as long as the arguments (and
    /// the launch made from them) are.
    pub fn ptr_mut<T: Pod>(self, buffer: impl DeviceDst<'a, T>) -> Self {
        let view = buffer.view();
        self.value(view.device_ptr().0)
    }

    /// Append a device address the API does not track (a global's, or one
    /// computed by other means). The launch's safety contract covers it.
    pub fn address(self, ptr: DevicePtr) -> Self {
        self.value(ptr.0)
    }

    /// The packed bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Queue {
    pub(crate) fn new(device: &Device) -> Result<Queue> {
        Ok(Queue {
            device: device.clone(),
            shared: Arc::new(Shared {
                core: Arc::new(offload_core::Queue::new(Some(&device.inner))?),
                deferred: Mutex::new(None),
            }),
        })
    }

    /// The core queue, for code that needs the lower layer (the Python
    /// face enqueues launches there and keeps their buffers alive itself,
    /// through [`crate::internals::CoreAccess`]).
    pub(crate) fn core_queue(&self) -> &Arc<offload_core::Queue> {
        &self.shared.core
    }

    /// The device it belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Device memory for `len` values of `T`, allocated and zeroed in this
    /// queue's order, and freed in its order when dropped (after the work
    /// enqueued here before the drop, without waiting for the device or
    /// stalling other queues). This is stream-ordered allocation where the
    /// plugin has it (CUDA memory pools: `cuMemAllocAsync` /
    /// `cuMemFreeAsync`) and a plain allocation elsewhere.
    ///
    /// It returns once the zeroing has run (so after the work enqueued
    /// here before it): the buffer is then usable anywhere, by any queue
    /// and by its own synchronous methods.
    pub fn alloc_zeros<T: Pod>(&self, len: usize) -> Result<crate::DeviceBuffer<T>> {
        crate::DeviceBuffer::new_on_queue(self, len)
    }

    /// Launch `kernel` over the grid `config` with a packed argument buffer.
    ///
    /// The returned [`Launch`] keeps `args` (and so every buffer in it)
    /// borrowed until it is waited for, awaited or dropped; dropping it
    /// waits for the kernel (a failure is then reported by the next
    /// [`Queue::synchronize`]).
    ///
    /// # Safety
    /// The kernel runs arbitrary device code: `args` must match the layout
    /// it expects, it may touch only the memory `args` names (and write only
    /// what is passed with [`KernelArgs::ptr_mut`]), `args` names no
    /// [`ScopedBuffer`](crate::ScopedBuffer) of another queue's scope, and
    /// the returned `Launch` must not be leaked (`std::mem::forget`) before
    /// the kernel has finished.
    pub unsafe fn launch<'l>(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &'l KernelArgs<'_>,
    ) -> Result<Launch<'l>> {
        self.check_kernel(kernel)?;
        self.core_queue()
            .launch(&kernel.core, RawArgs::Packed(args.as_bytes()), &config)?;
        let event = match self.core_queue().record_event() {
            Ok(e) => e,
            Err(e) => {
                // No event to wait on later: wait now, the borrows end here.
                let _ = self.core_queue().synchronize();
                return Err(e);
            }
        };
        Ok(Launch {
            completion: Some(Completion::new(self.core_queue().clone(), event)),
            queue: self.shared.clone(),
            _args: PhantomData,
        })
    }

    /// Launch a kernel that takes one 64-bit word per parameter (the
    /// convention of OpenMP images: pass the `dyn_ptr` word first). Nothing
    /// is borrowed: wait with [`Queue::synchronize`].
    ///
    /// # Safety
    /// As for [`Queue::launch`], and every address in `words` stays
    /// allocated and untouched by the host until the queue is synchronised.
    pub unsafe fn launch_words(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        words: &[u64],
    ) -> Result<()> {
        self.check_kernel(kernel)?;
        self.core_queue()
            .launch(&kernel.core, RawArgs::Words(words), &config)
    }

    pub(crate) fn check_kernel(&self, kernel: &Kernel) -> Result<()> {
        if kernel.device().id() != self.device.id() {
            return Err(Error::invalid_argument(format!(
                "kernel '{}' belongs to {}, the queue to {}",
                kernel.name(),
                kernel.device(),
                self.device
            )));
        }
        Ok(())
    }

    /// Block until everything enqueued has finished; report the first
    /// failure among it.
    pub fn synchronize(&self) -> Result<()> {
        let r = self.core_queue().synchronize();
        match self.shared.take_deferred() {
            Some(e) => Err(e),
            None => r,
        }
    }

    /// An event completing when the work enqueued so far has. It is a
    /// [`Future`] too.
    pub fn record_event(&self) -> Result<Event> {
        Ok(Event {
            completion: Completion::new(
                self.core_queue().clone(),
                self.core_queue().record_event()?,
            ),
        })
    }

    /// Make later work on this queue wait for `event` (of any queue).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.core_queue().wait_event(event.completion.event())
    }

    /// Run `f` on the host after everything before it.
    ///
    /// `f` runs on a thread of the plugin's choosing, and on CUDA inside
    /// the driver's stream callback, where the driver may not be called:
    /// `f` must not use the runtime (no copies, launches, synchronisation,
    /// and no dropping of device buffers); signal another thread instead.
    /// A panic in `f` is caught: it never unwinds into the plugin.
    pub fn host_function(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        self.core_queue().host_function(Box::new(f))
    }

    /// True when nothing is pending.
    pub fn is_idle(&self) -> Result<bool> {
        self.core_queue().is_idle()
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Queue(on {})", self.device)
    }
}

/// A kernel launch in flight. It borrows the launch's [`KernelArgs`] (and
/// through them the buffers) until it is waited for ([`Launch::wait`]),
/// awaited (it is a [`Future`]) or dropped (which waits).
#[must_use = "dropping a Launch waits for the kernel; keep it to overlap work"]
pub struct Launch<'a> {
    completion: Option<Completion>,
    queue: Arc<Shared>,
    _args: PhantomData<&'a ()>,
}

impl Launch<'_> {
    /// Block until the kernel (and everything before it on the queue) has
    /// finished; the first failure among that work.
    pub fn wait(mut self) -> Result<()> {
        match self.completion.take() {
            Some(c) => c.wait(),
            None => Ok(()),
        }
    }

    /// Whether the kernel has finished.
    pub fn is_complete(&self) -> Result<bool> {
        match &self.completion {
            Some(c) => c.is_complete(),
            None => Ok(true),
        }
    }

    /// An event at the launch's end, for other queues to wait on.
    pub fn event(&self) -> Option<Event> {
        self.completion.as_ref().map(|c| Event {
            completion: c.clone(),
        })
    }
}

impl Future for Launch<'_> {
    type Output = Result<()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let Some(c) = self.completion.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let r = c.poll(cx);
        if r.is_ready() {
            self.completion = None;
        }
        r
    }
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.completion.take() {
            if let Err(e) = c.wait() {
                self.queue.defer(e);
            }
        }
    }
}

impl std::fmt::Debug for Launch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.completion.is_some() {
            "Launch(pending)"
        } else {
            "Launch(done)"
        })
    }
}

/// A point in a queue's work: complete when everything enqueued before it
/// has finished. Wait for it by blocking ([`Event::wait`]) or as a
/// [`Future`] (no async runtime needed: the queue wakes the task).
#[derive(Clone)]
pub struct Event {
    pub(crate) completion: Completion,
}

impl Event {
    /// Block until the event; report the first failure of the work before
    /// it (each failure is reported once).
    pub fn wait(&self) -> Result<()> {
        self.completion.wait()
    }

    /// The same as [`Event::wait`].
    pub fn synchronize(&self) -> Result<()> {
        self.wait()
    }

    /// Whether the work before the event has finished.
    pub fn is_complete(&self) -> Result<bool> {
        self.completion.is_complete()
    }
}

impl Future for Event {
    type Output = Result<()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.completion.poll(cx)
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Event")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_follow_c_layout() {
        let a = KernelArgs::new()
            .value(1u8)
            .value(2u32)
            .value(3u64)
            .value(4u16)
            .value(true);
        let b = a.as_bytes();
        assert_eq!(b.len(), 19);
        assert_eq!(b[0], 1);
        assert_eq!(&b[4..8], &2u32.to_ne_bytes());
        assert_eq!(&b[8..16], &3u64.to_ne_bytes());
        assert_eq!(&b[16..18], &4u16.to_ne_bytes());
        assert_eq!(b[18], 1);
    }
}
