//! Queue scopes: asynchronous copies, fills and launches that borrow host
//! and device memory, with every borrow kept until the queue is done.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytemuck::Pod;
use offload_core::plugin::KernelArgs as RawArgs;
use offload_core::{Error, LaunchConfig, Location, Result};

use crate::buffer::check_len;
use crate::buffer::{DeviceDst, DeviceSrc, View};
use crate::completion::Completion;
use crate::{BufferSliceMut, Device, Event, Kernel, KernelArgs, Queue};
use std::ops::RangeBounds;

/// Asynchronous work on a [`Queue`] that borrows memory for `'env`; made by
/// [`Queue::scope`], which waits for the queue before it returns, so the
/// borrowed host slices and device buffers outlive every operation that
/// uses them — even when a [`Pending`] is dropped, leaked or the closure
/// panics.
pub struct Scope<'scope, 'env: 'scope> {
    queue: &'scope Queue,
    // Invariant in both lifetimes, as `std::thread::Scope` is.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// An operation of a [`Scope`] in flight. [`wait`](Pending::wait) for it,
/// `.await` it (no async runtime needed), or drop it (the scope's end waits
/// for it). What it gives back on completion: `&mut [T]` for a copy into
/// host memory (the destination, readable again), `()` otherwise.
pub struct Pending<'scope, R> {
    completion: Option<Completion>,
    value: Option<R>,
    _scope: PhantomData<&'scope ()>,
}

impl Queue {
    /// Run `f` with a [`Scope`] on this queue, then wait for the queue.
    ///
    /// Inside, copies (host to device, device to host, device to device),
    /// fills and launches are enqueued without blocking; the host memory
    /// and buffers they name stay borrowed until the scope ends, so the
    /// borrow checker refuses host access to them while they may be in use.
    /// Device memory that several operations of the scope use is bound once
    /// with [`Scope::bind`].
    ///
    /// The result is `f`'s error if it failed, else the first failure of
    /// the queue's work that nobody waited for, else `f`'s value.
    ///
    /// ```
    /// use offload_runtime::Device;
    ///
    /// let device = Device::host()?;
    /// let queue = device.create_queue()?;
    /// let input: Vec<u32> = (0..1000).collect();
    /// let mut staged = device.alloc_zeros::<u32>(1000)?;
    /// let mut moved = device.alloc_zeros::<u32>(500)?;
    /// let mut out = vec![0u32; 500];
    /// queue.scope(|s| {
    ///     // Bound: used by several operations, which the queue orders.
    ///     let (staged, moved) = (s.bind(&mut staged), s.bind(&mut moved));
    ///     s.copy_to_device(staged, &input)?;               // host -> device
    ///     s.copy(moved, staged.slice(250..750))?;          // device -> device
    ///     let back = s.copy_to_host(&mut out, moved)?;     // device -> host
    ///     let out = back.wait()?;                          // readable again
    ///     assert_eq!(out[0], 250);
    ///     Ok(())
    /// })?;
    /// assert_eq!(out[499], 749);
    /// assert_eq!(staged.slice(999..).to_vec()?, vec![999]); // the host's again
    /// # Ok::<(), offload_runtime::Error>(())
    /// ```
    pub fn scope<'env, R>(
        &self,
        f: impl for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        /// Waits for the queue however the scope is left (panics included).
        struct WaitOnDrop<'q>(&'q Queue);
        impl Drop for WaitOnDrop<'_> {
            fn drop(&mut self) {
                let _ = self.0.synchronize();
            }
        }
        let scope = Scope {
            queue: self,
            _scope: PhantomData,
            _env: PhantomData,
        };
        let guard = WaitOnDrop(self);
        let result = f(&scope);
        std::mem::forget(guard);
        let synced = self.synchronize();
        let value = result?;
        synced.map(|()| value)
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// The queue the work goes to.
    pub fn queue(&self) -> &'scope Queue {
        self.queue
    }

    fn pending<R>(&self, value: R) -> Result<Pending<'scope, R>> {
        let core = self.queue.core_queue();
        Ok(Pending {
            completion: Some(Completion::new(core.clone(), core.record_event()?)),
            value: Some(value),
            _scope: PhantomData,
        })
    }

    /// Bind device memory to this scope: exclusively borrowed until the
    /// scope ends, usable (read and written) by any number of this queue's
    /// operations, which the queue orders, and by none of the host's.
    pub fn bind<T: Pod>(
        &self,
        buffer: impl Into<BufferSliceMut<'scope, T>>,
    ) -> ScopedBuffer<'scope, T> {
        let view = buffer.into();
        ScopedBuffer {
            device: view.device(),
            ptr: view.device_ptr(),
            len: view.len(),
            _values: PhantomData,
            _scope: PhantomData,
        }
    }

    /// Copy `src` into device memory `dst` (same length), asynchronously.
    pub fn copy_to_device<T: Pod>(
        &self,
        dst: impl DeviceDst<'scope, T>,
        src: &'scope [T],
    ) -> Result<Pending<'scope, ()>> {
        let dst = dst.view();
        check_len(dst.len(), src.len(), dst.device_ptr(), "copy to device")?;
        self.queue.device().check_same_runtime(dst.device())?;
        // SAFETY: `src` is borrowed for 'scope; the scope waits for the
        // queue before it ends.
        unsafe {
            self.queue.device().runtime().copy(
                dst.location(),
                Location::Host(src.as_ptr().cast()),
                dst.size_bytes(),
                Some(self.queue.core_queue()),
            )?
        };
        self.pending(())
    }

    /// Copy device memory `src` into `dst` (same length), asynchronously.
    /// Waiting for the copy gives `dst` back.
    pub fn copy_to_host<T: Pod>(
        &self,
        dst: &'scope mut [T],
        src: impl DeviceSrc<'scope, T>,
    ) -> Result<Pending<'scope, &'scope mut [T]>> {
        let src = src.view();
        check_len(src.len(), dst.len(), src.device_ptr(), "copy from device")?;
        self.queue.device().check_same_runtime(src.device())?;
        // SAFETY: `dst` is exclusively borrowed for 'scope (the scope waits
        // for the queue before it ends); `T: Pod` accepts any bytes.
        unsafe {
            self.queue.device().runtime().copy(
                Location::Host(dst.as_mut_ptr().cast_const().cast()),
                src.location(),
                src.size_bytes(),
                Some(self.queue.core_queue()),
            )?
        };
        self.pending(dst)
    }

    /// Copy device memory `src` into device memory `dst` (same length; the
    /// same device or another one), asynchronously.
    pub fn copy<T: Pod>(
        &self,
        dst: impl DeviceDst<'scope, T>,
        src: impl DeviceSrc<'scope, T>,
    ) -> Result<Pending<'scope, ()>> {
        let (dst, src) = (dst.view(), src.view());
        check_len(
            dst.len(),
            src.len(),
            dst.device_ptr(),
            "copy between buffers",
        )?;
        self.queue.device().check_same_runtime(dst.device())?;
        self.queue.device().check_same_runtime(src.device())?;
        // SAFETY: both ends are device memory borrowed for 'scope (checked
        // again by the core); the scope waits for the queue.
        unsafe {
            self.queue.device().runtime().copy(
                dst.location(),
                src.location(),
                dst.size_bytes(),
                Some(self.queue.core_queue()),
            )?
        };
        self.pending(())
    }

    /// Set every element of `dst` (memory of the queue's device) to
    /// `value`, asynchronously.
    pub fn fill<T: Pod>(
        &self,
        dst: impl DeviceDst<'scope, T>,
        value: T,
    ) -> Result<Pending<'scope, ()>> {
        let dst = dst.view();
        if dst.device().id() != self.queue.device().id() {
            return Err(Error::invalid_argument(format!(
                "fill: the buffer at {} is on {}, the queue on {}",
                dst.device_ptr(),
                dst.device(),
                self.queue.device()
            )));
        }
        self.queue.core_queue().fill(
            dst.device_ptr(),
            bytemuck::bytes_of(&value),
            dst.size_bytes(),
        )?;
        self.pending(())
    }

    /// Launch `kernel` with `args`; the buffers in `args` stay borrowed
    /// until the scope ends. Arguments may name [`ScopedBuffer`]s of this
    /// scope.
    ///
    /// # Safety
    /// The kernel runs arbitrary device code: `args` must match the layout
    /// it expects, and it may touch only the memory `args` names (writing
    /// only what is passed with [`KernelArgs::ptr_mut`]).
    pub unsafe fn launch(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &KernelArgs<'scope>,
    ) -> Result<Pending<'scope, ()>> {
        self.queue.check_kernel(kernel)?;
        self.queue
            .core_queue()
            .launch(&kernel.core, RawArgs::Packed(args.as_bytes()), &config)?;
        self.pending(())
    }

    /// An event at this point of the queue.
    pub fn record_event(&self) -> Result<Event> {
        self.queue.record_event()
    }

    /// Make later work on the queue wait for `event` (of any queue).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.queue.wait_event(event)
    }
}

/// Device memory bound to a [`Scope`] by [`Scope::bind`]: exclusively
/// borrowed until the scope ends, usable by any number of the scope's
/// operations (copies from and to it, fills, kernel arguments), which its
/// queue runs in order, and never by the host. Cheap to copy.
pub struct ScopedBuffer<'scope, T: Pod> {
    device: &'scope Device,
    ptr: offload_core::DevicePtr,
    len: usize,
    _values: PhantomData<&'scope mut [T]>,
    // Invariant in 'scope: it cannot move to another scope.
    _scope: PhantomData<fn(&'scope ()) -> &'scope ()>,
}

impl<T: Pod> Clone for ScopedBuffer<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Pod> Copy for ScopedBuffer<'_, T> {}

impl<'scope, T: Pod> ScopedBuffer<'scope, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Device address of the first element.
    pub fn device_ptr(&self) -> offload_core::DevicePtr {
        self.ptr
    }
    /// The elements in `range`, still bound to the scope.
    ///
    /// # Panics
    /// When the range lies outside.
    #[track_caller]
    pub fn slice(self, range: impl RangeBounds<usize>) -> ScopedBuffer<'scope, T> {
        let v = self.view().slice(range);
        ScopedBuffer {
            device: v.device,
            ptr: v.ptr,
            len: v.len,
            _values: PhantomData,
            _scope: PhantomData,
        }
    }
    fn view(self) -> View<'scope> {
        View {
            device: self.device,
            ptr: self.ptr,
            len: self.len,
            elem: std::mem::size_of::<T>(),
        }
    }
}

impl<'scope, T: Pod> crate::buffer::sealed::Sealed for ScopedBuffer<'scope, T> {}
impl<'scope, T: Pod> DeviceSrc<'scope, T> for ScopedBuffer<'scope, T> {
    fn view(self) -> View<'scope> {
        ScopedBuffer::view(self)
    }
}
impl<'scope, T: Pod> DeviceDst<'scope, T> for ScopedBuffer<'scope, T> {
    fn view(self) -> View<'scope> {
        ScopedBuffer::view(self)
    }
}

impl<T: Pod> std::fmt::Debug for ScopedBuffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ScopedBuffer({} x {} at {} on {})",
            self.len,
            std::any::type_name::<T>(),
            self.ptr,
            self.device
        )
    }
}

impl<R> Pending<'_, R> {
    /// Block until the operation (and everything before it on the queue)
    /// has finished; what it gives back, or the first failure among that
    /// work.
    pub fn wait(mut self) -> Result<R> {
        if let Some(c) = self.completion.take() {
            c.wait()?;
        }
        self.take_value()
    }

    /// Whether the operation has finished.
    pub fn is_complete(&self) -> Result<bool> {
        match &self.completion {
            Some(c) => c.is_complete(),
            None => Ok(true),
        }
    }

    /// An event at the operation's end, for other queues to wait on.
    pub fn event(&self) -> Option<Event> {
        self.completion.as_ref().map(|c| Event {
            completion: c.clone(),
        })
    }

    fn take_value(&mut self) -> Result<R> {
        self.value
            .take()
            .ok_or_else(|| Error::invalid_argument("a Pending polled after it completed"))
    }
}

// `Pending` never pins its value in place.
impl<R> Unpin for Pending<'_, R> {}

impl<R> Future for Pending<'_, R> {
    type Output = Result<R>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<R>> {
        if let Some(c) = self.completion.as_mut() {
            match c.poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => {
                    self.completion = None;
                    if let Err(e) = r {
                        self.value = None;
                        return Poll::Ready(Err(e));
                    }
                }
            }
        }
        Poll::Ready(self.take_value())
    }
}

impl<R> std::fmt::Debug for Pending<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.completion.is_some() {
            "Pending(in flight)"
        } else {
            "Pending(done)"
        })
    }
}
