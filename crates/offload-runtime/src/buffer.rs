//! Typed device memory and views of it.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use bytemuck::Pod;
use offload_core::{AllocKind, DevicePtr, Error, Location, Result};

use crate::queue::Shared;
use crate::{Device, Queue};

/// `len` values of `T` in a device's memory, freed on drop.
///
/// `T` is plain old data ([`Pod`]): every bit pattern a kernel or a copy
/// leaves in the buffer is a valid `T`, so reading it back is safe. A
/// buffer comes initialised ([`Device::alloc_zeros`],
/// [`Device::buffer_from`], [`Device::alloc_filled`]) unless it was asked
/// for with the unsafe [`Device::alloc_uninit`].
///
/// Views of a part of the buffer ([`slice`](Self::slice),
/// [`slice_mut`](Self::slice_mut)) work wherever a whole buffer does: in
/// copies, fills and kernel arguments.
pub struct DeviceBuffer<T: Pod> {
    device: Device,
    ptr: DevicePtr,
    len: usize,
    kind: AllocKind,
    /// For memory of [`Queue::alloc_zeros`]: the queue in whose order it
    /// is freed.
    ordered_on: Option<Arc<Shared>>,
    _values: PhantomData<T>,
}

/// Bytes of `len` values of `T`, or an error when that overflows.
fn bytes_of<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        Error::invalid_argument(format!("{len} elements overflow the address space"))
    })
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocate without initialising.
    ///
    /// # Safety
    /// The memory is uninitialised: the caller writes every element before
    /// anything reads it.
    pub(crate) unsafe fn new_uninit(device: &Device, len: usize, kind: AllocKind) -> Result<Self> {
        let bytes = bytes_of::<T>(len)?;
        // Zero-length buffers get one byte so that they have an address.
        let ptr = device.inner.alloc(bytes.max(1), kind)?;
        Ok(DeviceBuffer {
            device: device.clone(),
            ptr,
            len,
            kind,
            ordered_on: None,
            _values: PhantomData,
        })
    }

    /// Device memory allocated and zeroed in `queue`'s order, freed in its
    /// order on drop ([`Queue::alloc_zeros`]).
    pub(crate) fn new_on_queue(queue: &Queue, len: usize) -> Result<Self> {
        let bytes = bytes_of::<T>(len)?.max(1);
        let core = queue.core_queue();
        let ptr = core.alloc(bytes)?;
        let buf = DeviceBuffer {
            device: queue.device().clone(),
            ptr,
            len,
            kind: AllocKind::Device,
            ordered_on: Some(queue.shared.clone()),
            _values: PhantomData,
        };
        // Zeroed in the queue's order; `T: Pod` makes all-zero bytes a
        // valid `T`. Handed out once the zeroing is done: from then on any
        // queue and the buffer's own synchronous methods may use it (the
        // allocation point is behind the host, as CUDA asks of other
        // streams), while the free on drop stays in the queue's order.
        core.fill(ptr, &[0], bytes)?;
        core.record_event()?.synchronize()?;
        Ok(buf)
    }

    /// Allocate and set every byte to zero.
    pub(crate) fn new_zeroed(device: &Device, len: usize, kind: AllocKind) -> Result<Self> {
        // SAFETY: every byte is written by the fill before the buffer is
        // handed out; `T: Pod` makes all-zero bytes a valid `T`.
        let buf = unsafe { Self::new_uninit(device, len, kind)? };
        let bytes = buf.size_bytes();
        if bytes > 0 {
            device.inner.fill(buf.ptr, &[0], bytes)?;
        }
        Ok(buf)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// Device address of the first element.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// The kind of memory it was allocated as.
    pub fn kind(&self) -> AllocKind {
        self.kind
    }
    /// The device that holds it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A read-only view of the whole buffer.
    pub fn as_slice(&self) -> BufferSlice<'_, T> {
        BufferSlice {
            device: &self.device,
            ptr: self.ptr,
            len: self.len,
            _values: PhantomData,
        }
    }

    /// A writable view of the whole buffer.
    pub fn as_slice_mut(&mut self) -> BufferSliceMut<'_, T> {
        BufferSliceMut {
            device: &self.device,
            ptr: self.ptr,
            len: self.len,
            _values: PhantomData,
        }
    }

    /// A read-only view of the elements in `range`.
    ///
    /// # Panics
    /// When the range lies outside the buffer, as slice indexing does
    /// ([`get`](Self::get) returns `None` instead).
    #[track_caller]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> BufferSlice<'_, T> {
        self.as_slice().slice(range)
    }

    /// A writable view of the elements in `range`.
    ///
    /// # Panics
    /// When the range lies outside the buffer ([`get_mut`](Self::get_mut)
    /// returns `None` instead).
    #[track_caller]
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> BufferSliceMut<'_, T> {
        self.as_slice_mut().into_slice(range)
    }

    /// A read-only view of `range`, or `None` when it lies outside the buffer.
    pub fn get(&self, range: impl RangeBounds<usize>) -> Option<BufferSlice<'_, T>> {
        self.as_slice().get(range)
    }

    /// A writable view of `range`, or `None` when it lies outside the buffer.
    pub fn get_mut(&mut self, range: impl RangeBounds<usize>) -> Option<BufferSliceMut<'_, T>> {
        let (start, end) = resolve(range, self.len)?;
        let s = self.as_slice_mut();
        Some(s.narrow(start, end))
    }

    /// Copy `src` (exactly `len` elements) to the device, now.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.as_slice_mut().copy_from_host(src)
    }

    /// Copy the buffer into `dst` (exactly `len` elements), now.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_slice().copy_to_host(dst)
    }

    /// The buffer's contents.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_slice().to_vec()
    }

    /// Set every element to `value`, now.
    pub fn fill(&mut self, value: T) -> Result<()> {
        self.as_slice_mut().fill(value)
    }

    /// Copy `src` (same length, maybe on another device) into this buffer, now.
    pub fn copy_from_buffer<'s>(&mut self, src: impl Into<BufferSlice<'s, T>>) -> Result<()> {
        self.as_slice_mut().copy_from(src)
    }
}

impl<T: Pod> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let _ = match &self.ordered_on {
            Some(queue) => queue.core.free(self.ptr),
            None => self.device.inner.free(self.ptr),
        };
    }
}

impl<T: Pod> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceBuffer({} x {} at {} on {})",
            self.len,
            std::any::type_name::<T>(),
            self.ptr,
            self.device
        )
    }
}

/// `range` of a sequence of `len` as `(start, end)`, if it fits.
fn resolve(range: impl RangeBounds<usize>, len: usize) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1)?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start <= end && end <= len).then_some((start, end))
}

type Bounds = (Bound<usize>, Bound<usize>);

fn bounds(range: &impl RangeBounds<usize>) -> Bounds {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

#[cold]
#[track_caller]
fn out_of_range((start, end): Bounds, len: usize) -> ! {
    let start = match start {
        Bound::Included(s) => s.to_string(),
        Bound::Excluded(s) => format!("{s} (excluded)"),
        Bound::Unbounded => String::new(),
    };
    let end = match end {
        Bound::Included(e) => format!("={e}"),
        Bound::Excluded(e) => e.to_string(),
        Bound::Unbounded => String::new(),
    };
    panic!("range {start}..{end} is out of bounds of a device buffer view of {len} elements")
}

/// A read-only view of consecutive elements of a [`DeviceBuffer`]
/// (the buffer stays borrowed while it exists). Cheap to copy.
pub struct BufferSlice<'a, T: Pod> {
    device: &'a Device,
    ptr: DevicePtr,
    len: usize,
    _values: PhantomData<&'a [T]>,
}

/// A writable view of consecutive elements of a [`DeviceBuffer`] (the
/// buffer stays mutably borrowed while it exists).
pub struct BufferSliceMut<'a, T: Pod> {
    device: &'a Device,
    ptr: DevicePtr,
    len: usize,
    _values: PhantomData<&'a mut [T]>,
}

impl<T: Pod> Clone for BufferSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Pod> Copy for BufferSlice<'_, T> {}

impl<'a, T: Pod> From<&'a DeviceBuffer<T>> for BufferSlice<'a, T> {
    fn from(b: &'a DeviceBuffer<T>) -> Self {
        b.as_slice()
    }
}
impl<'a, T: Pod> From<&'a mut DeviceBuffer<T>> for BufferSlice<'a, T> {
    fn from(b: &'a mut DeviceBuffer<T>) -> Self {
        b.as_slice()
    }
}
impl<'a, T: Pod> From<BufferSliceMut<'a, T>> for BufferSlice<'a, T> {
    fn from(s: BufferSliceMut<'a, T>) -> Self {
        BufferSlice {
            device: s.device,
            ptr: s.ptr,
            len: s.len,
            _values: PhantomData,
        }
    }
}
impl<'a, 'b, T: Pod> From<&'a BufferSliceMut<'b, T>> for BufferSlice<'a, T> {
    fn from(s: &'a BufferSliceMut<'b, T>) -> Self {
        s.as_slice()
    }
}
impl<'a, T: Pod> From<&'a mut DeviceBuffer<T>> for BufferSliceMut<'a, T> {
    fn from(b: &'a mut DeviceBuffer<T>) -> Self {
        b.as_slice_mut()
    }
}
impl<'a, 'b, T: Pod> From<&'a mut BufferSliceMut<'b, T>> for BufferSliceMut<'a, T> {
    fn from(s: &'a mut BufferSliceMut<'b, T>) -> Self {
        s.reborrow()
    }
}

impl<'a, T: Pod> BufferSlice<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// Device address of the view's first element.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// The device that holds it.
    pub fn device(&self) -> &'a Device {
        self.device
    }

    /// A narrower view: `range` of this view's elements.
    ///
    /// # Panics
    /// When the range lies outside this view.
    #[track_caller]
    pub fn slice(self, range: impl RangeBounds<usize>) -> BufferSlice<'a, T> {
        let bounds = bounds(&range);
        match resolve(bounds, self.len) {
            Some((s, e)) => self.narrow(s, e),
            None => out_of_range(bounds, self.len),
        }
    }

    /// A narrower view, or `None` when `range` lies outside this one.
    pub fn get(self, range: impl RangeBounds<usize>) -> Option<BufferSlice<'a, T>> {
        let (s, e) = resolve(range, self.len)?;
        Some(self.narrow(s, e))
    }

    fn narrow(self, start: usize, end: usize) -> BufferSlice<'a, T> {
        BufferSlice {
            device: self.device,
            ptr: self.ptr.offset((start * std::mem::size_of::<T>()) as u64),
            len: end - start,
            _values: PhantomData,
        }
    }

    pub(crate) fn location(&self) -> Location {
        Location::Device(self.device.id(), self.ptr)
    }

    /// Copy the view into `dst` (exactly `len` elements), now.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        check_len(self.len, dst.len(), self.ptr, "copy from device")?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: `dst` is valid for `size_bytes` and exclusively ours; the
        // device range is checked by the core; `T: Pod` accepts every byte
        // pattern the device memory holds.
        unsafe {
            self.device
                .inner
                .copy_from_device(dst.as_mut_ptr().cast(), self.ptr, self.size_bytes())
        }
    }

    /// The view's contents.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl<'a, T: Pod> BufferSliceMut<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// Device address of the view's first element.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// The device that holds it.
    pub fn device(&self) -> &'a Device {
        self.device
    }

    /// A read-only view of the same elements, borrowing this one.
    pub fn as_slice(&self) -> BufferSlice<'_, T> {
        BufferSlice {
            device: self.device,
            ptr: self.ptr,
            len: self.len,
            _values: PhantomData,
        }
    }

    /// A shorter-lived writable view of the same elements.
    pub fn reborrow(&mut self) -> BufferSliceMut<'_, T> {
        BufferSliceMut {
            device: self.device,
            ptr: self.ptr,
            len: self.len,
            _values: PhantomData,
        }
    }

    /// A narrower writable view: `range` of this view's elements.
    ///
    /// # Panics
    /// When the range lies outside this view.
    #[track_caller]
    pub fn into_slice(self, range: impl RangeBounds<usize>) -> BufferSliceMut<'a, T> {
        let bounds = bounds(&range);
        match resolve(bounds, self.len) {
            Some((s, e)) => self.narrow(s, e),
            None => out_of_range(bounds, self.len),
        }
    }

    /// Split into two writable views at element `mid`.
    ///
    /// # Panics
    /// When `mid > len`.
    #[track_caller]
    pub fn split_at(self, mid: usize) -> (BufferSliceMut<'a, T>, BufferSliceMut<'a, T>) {
        assert!(
            mid <= self.len,
            "split at {mid} of a device buffer view of {} elements",
            self.len
        );
        let right = BufferSliceMut {
            device: self.device,
            ptr: self.ptr.offset((mid * std::mem::size_of::<T>()) as u64),
            len: self.len - mid,
            _values: PhantomData,
        };
        (self.narrow(0, mid), right)
    }

    fn narrow(self, start: usize, end: usize) -> BufferSliceMut<'a, T> {
        BufferSliceMut {
            device: self.device,
            ptr: self.ptr.offset((start * std::mem::size_of::<T>()) as u64),
            len: end - start,
            _values: PhantomData,
        }
    }

    pub(crate) fn location(&self) -> Location {
        Location::Device(self.device.id(), self.ptr)
    }

    /// Copy `src` (exactly `len` elements) into the view, now.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        check_len(self.len, src.len(), self.ptr, "copy to device")?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: `src` is valid for `size_bytes`; the device range is
        // checked by the core and mutably borrowed by this view.
        unsafe {
            self.device
                .inner
                .copy_to_device(self.ptr, src.as_ptr().cast(), self.size_bytes())
        }
    }

    /// Copy the view into `dst` (exactly `len` elements), now.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_slice().copy_to_host(dst)
    }

    /// The view's contents.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_slice().to_vec()
    }

    /// Set every element to `value`, now.
    pub fn fill(&mut self, value: T) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.device
            .inner
            .fill(self.ptr, bytemuck::bytes_of(&value), self.size_bytes())
    }

    /// Copy `src` (same length, maybe on another device) into the view, now.
    pub fn copy_from<'s>(&mut self, src: impl Into<BufferSlice<'s, T>>) -> Result<()> {
        let src = src.into();
        check_len(self.len, src.len, self.ptr, "copy between buffers")?;
        self.device.check_same_runtime(src.device)?;
        // SAFETY: both ends are live device memory of this length (checked
        // again by the core), the destination mutably borrowed.
        unsafe {
            self.device
                .runtime()
                .copy(self.location(), src.location(), self.size_bytes(), None)
        }
    }
}

pub(crate) fn check_len(want: usize, got: usize, at: DevicePtr, what: &str) -> Result<()> {
    if want != got {
        return Err(Error::invalid_size(format!(
            "{what}: the other side has {got} elements, the device buffer at {at} has {want}"
        )));
    }
    Ok(())
}

impl<T: Pod> fmt::Debug for BufferSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BufferSlice({} x {} at {} on {})",
            self.len,
            std::any::type_name::<T>(),
            self.ptr,
            self.device
        )
    }
}

impl<T: Pod> fmt::Debug for BufferSliceMut<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BufferSliceMut({} x {} at {} on {})",
            self.len,
            std::any::type_name::<T>(),
            self.ptr,
            self.device
        )
    }
}

/// Device memory as the queue operations see it: a device, an address and
/// a length in elements of `elem` bytes.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub(crate) device: &'a Device,
    pub(crate) ptr: DevicePtr,
    pub(crate) len: usize,
    pub(crate) elem: usize,
}

impl<'a> View<'a> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    pub(crate) fn device(&self) -> &'a Device {
        self.device
    }
    pub(crate) fn size_bytes(&self) -> usize {
        self.len * self.elem
    }
    pub(crate) fn location(&self) -> Location {
        Location::Device(self.device.id(), self.ptr)
    }
    #[track_caller]
    pub(crate) fn slice(self, range: impl RangeBounds<usize>) -> View<'a> {
        let bounds = bounds(&range);
        match resolve(bounds, self.len) {
            Some((s, e)) => View {
                ptr: self.ptr.offset((s * self.elem) as u64),
                len: e - s,
                ..self
            },
            None => out_of_range(bounds, self.len),
        }
    }
}

pub(crate) mod sealed {
    /// Only this crate's views implement the device-memory traits.
    pub trait Sealed {}
}

/// Device memory an operation reads: a `&DeviceBuffer`, a [`BufferSlice`],
/// a [`BufferSliceMut`], or a [`ScopedBuffer`](crate::ScopedBuffer) of
/// the scope. Sealed.
pub trait DeviceSrc<'a, T: Pod>: sealed::Sealed {
    /// The memory named.
    #[doc(hidden)]
    fn view(self) -> View<'a>;
}

/// Device memory an operation writes: a `&mut DeviceBuffer`, a
/// [`BufferSliceMut`], or a [`ScopedBuffer`](crate::ScopedBuffer) of the
/// scope. Sealed.
pub trait DeviceDst<'a, T: Pod>: sealed::Sealed {
    /// The memory named.
    #[doc(hidden)]
    fn view(self) -> View<'a>;
}

macro_rules! view_of {
    ($v:expr) => {{
        let v = $v;
        View {
            device: v.device,
            ptr: v.ptr,
            len: v.len,
            elem: std::mem::size_of::<T>(),
        }
    }};
}

impl<T: Pod> sealed::Sealed for BufferSlice<'_, T> {}
impl<T: Pod> sealed::Sealed for BufferSliceMut<'_, T> {}
impl<T: Pod> sealed::Sealed for &DeviceBuffer<T> {}
impl<T: Pod> sealed::Sealed for &mut DeviceBuffer<T> {}

impl<'a, T: Pod> DeviceSrc<'a, T> for BufferSlice<'a, T> {
    fn view(self) -> View<'a> {
        view_of!(self)
    }
}
impl<'a, T: Pod> DeviceSrc<'a, T> for BufferSliceMut<'a, T> {
    fn view(self) -> View<'a> {
        view_of!(self)
    }
}
impl<'a, T: Pod> DeviceSrc<'a, T> for &'a DeviceBuffer<T> {
    fn view(self) -> View<'a> {
        view_of!(self.as_slice())
    }
}
impl<'a, T: Pod> DeviceSrc<'a, T> for &'a mut DeviceBuffer<T> {
    fn view(self) -> View<'a> {
        view_of!(self.as_slice())
    }
}
impl<'a, T: Pod> DeviceDst<'a, T> for BufferSliceMut<'a, T> {
    fn view(self) -> View<'a> {
        view_of!(self)
    }
}
impl<'a, T: Pod> DeviceDst<'a, T> for &'a mut DeviceBuffer<T> {
    fn view(self) -> View<'a> {
        view_of!(self.as_slice_mut())
    }
}
