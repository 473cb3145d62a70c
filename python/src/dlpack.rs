//! DLPack (the legacy, unversioned `"dltensor"` capsule), both ways.
//!
//! Export: memory of a device that shares host memory (the host CPU
//! device) is described as `kDLCPU` with no copy; the capsule's managed
//! tensor holds a reference to the array's storage, so the allocation
//! lives until the consumer calls the deleter (or, unconsumed, the capsule
//! is collected).
//!
//! Import (`from_dlpack`): a capsule we exported becomes an array over the
//! same storage (no copy); any other `kDLCPU` tensor (numpy's) is copied
//! into new device memory, since it is not memory the runtime allocated.

use offload::internals::CoreAccess as _;
use std::ffi::{c_void, CStr};
use std::sync::Arc;

use offload::Device;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::array::{nbytes, PyArray, Storage};
use crate::device::PyDevice;
use crate::dtype::DType;
use crate::error::IntoPyResult;

const KDL_CPU: i32 = 1;
const KDL_CUDA_HOST: i32 = 3;
const KDL_ROCM_HOST: i32 = 11;
const KDL_EXT_DEV: i32 = 12;

const DLTENSOR: &CStr = c"dltensor";
const USED_DLTENSOR: &CStr = c"used_dltensor";
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLPackVersion`.
#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

/// `DLManagedTensorVersioned` (DLPack 1.0).
#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// What an exported tensor owns: its shape and strides, and a reference
/// to the storage.
struct Owner {
    shape: Vec<i64>,
    strides: Vec<i64>,
    storage: Storage,
}

/// A legacy export: the managed tensor first, so that a pointer to it is a
/// pointer to this.
#[repr(C)]
struct Exported {
    managed: DLManagedTensor,
    owner: Owner,
}

/// A versioned export, laid out likewise.
#[repr(C)]
struct ExportedVersioned {
    managed: DLManagedTensorVersioned,
    owner: Owner,
}

/// Drop a boxed export; no panic may unwind into C.
fn drop_quietly<T>(b: Box<T>) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(b)));
}

/// The deleter of our legacy managed tensors.
unsafe extern "C" fn delete_exported(managed: *mut DLManagedTensor) {
    if !managed.is_null() {
        // SAFETY: our managed tensors are the first field of a boxed
        // `Exported` whose address is `manager_ctx`; DLPack calls the
        // deleter once. Dropping frees the device memory if this held the
        // last reference.
        drop_quietly(unsafe { Box::from_raw((*managed).manager_ctx.cast::<Exported>()) });
    }
}

/// The deleter of our versioned managed tensors.
unsafe extern "C" fn delete_exported_versioned(managed: *mut DLManagedTensorVersioned) {
    if !managed.is_null() {
        // SAFETY: as for `delete_exported`, with `ExportedVersioned`.
        drop_quietly(unsafe { Box::from_raw((*managed).manager_ctx.cast::<ExportedVersioned>()) });
    }
}

/// The destructor of our capsules: an unconsumed capsule deletes its tensor.
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule; IsValid sets no error
    // when the name differs (a consumer renamed it to "used_...").
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let managed =
                ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        } else if ffi::PyCapsule_IsValid(capsule, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, DLTENSOR_VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
    }
}

/// DLPack's `(device_type, device_id)` of memory on `device`.
pub fn device_of(device: &Device) -> (i32, i32) {
    if device.core().shares_host_memory() {
        (KDL_CPU, 0)
    } else {
        (KDL_EXT_DEV, device.id() as i32)
    }
}

/// A DLPack capsule over `array`'s memory: `"dltensor_versioned"` (DLPack
/// 1.0, writable) when the consumer accepts version 1, else the legacy
/// `"dltensor"`.
pub fn export<'py>(
    py: Python<'py>,
    array: &PyArray,
    versioned: bool,
) -> PyResult<Bound<'py, PyCapsule>> {
    let device = array.device_ref();
    let (device_type, device_id) = device_of(device);
    if device_type != KDL_CPU {
        return Err(PyBufferError::new_err(format!(
            "the memory of {device} is not addressable by the host: copy it with to_numpy()"
        )));
    }
    let mut owner = Owner {
        shape: array.shape.iter().map(|&d| d as i64).collect(),
        strides: array
            .byte_strides()
            .iter()
            .map(|&s| (s / array.dtype.size.max(1)) as i64)
            .collect(),
        storage: array.buf.clone(),
    };
    // The vectors' heap blocks do not move when `owner` does.
    let tensor = DLTensor {
        data: array.buf.device_ptr().0 as *mut c_void,
        device: DLDevice {
            device_type,
            device_id,
        },
        ndim: owner.shape.len() as i32,
        dtype: DLDataType {
            code: array.dtype.dlpack_code(),
            bits: (array.dtype.size * 8) as u8,
            lanes: 1,
        },
        shape: owner.shape.as_mut_ptr(),
        strides: owner.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let (pointer, name): (*mut c_void, &CStr) = if versioned {
        let raw = Box::into_raw(Box::new(ExportedVersioned {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_exported_versioned),
                flags: 0,
                dl_tensor: tensor,
            },
            owner,
        }));
        // SAFETY: `raw` is a valid, uniquely owned box.
        unsafe { (*raw).managed.manager_ctx = raw.cast() };
        (raw.cast(), DLTENSOR_VERSIONED)
    } else {
        let raw = Box::into_raw(Box::new(Exported {
            managed: DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_exported),
            },
            owner,
        }));
        // SAFETY: `raw` is a valid, uniquely owned box.
        unsafe { (*raw).managed.manager_ctx = raw.cast() };
        (raw.cast(), DLTENSOR)
    };
    // SAFETY: `pointer` is a managed tensor of the kind `name` says; from
    // here on the capsule (or its consumer) owns it and frees it through
    // its deleter.
    unsafe {
        let capsule = ffi::PyCapsule_New(pointer, name.as_ptr(), Some(capsule_destructor));
        if capsule.is_null() {
            if versioned {
                delete_exported_versioned(pointer.cast());
            } else {
                delete_exported(pointer.cast());
            }
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule).cast_into_unchecked())
    }
}

/// The most dimensions a DLPack tensor may have here (numpy's limit is 64).
const MAX_NDIM: usize = 64;

/// Whether `[addr, addr + len)` lies in readable mappings of this process
/// (`/proc/self/maps`). A DLPack tensor is a promise by its producer that
/// its memory is readable; a crafted capsule (a garbage pointer, a stride
/// of 2^40) breaks it, and reading would crash the interpreter. This checks
/// the promise before anything is read.
fn readable(addr: usize, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    let mut ranges: Vec<(usize, usize)> = maps
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (lo, hi) = f.next()?.split_once('-')?;
            let perms = f.next()?;
            perms.starts_with('r').then_some(())?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            ))
        })
        .collect();
    ranges.sort_unstable();
    let mut at = addr;
    for (lo, hi) in ranges {
        if hi <= at {
            continue;
        }
        if lo > at {
            return false;
        }
        at = hi;
        if at >= end {
            return true;
        }
    }
    false
}

/// The bytes a strided tensor spans, relative to its first element:
/// `(lowest, highest + item)` byte offsets, or None when they overflow.
fn extent(shape: &[usize], strides: &[i64], item: usize) -> Option<(i128, i128)> {
    let (mut lo, mut hi) = (0i128, 0i128);
    for (&d, &s) in shape.iter().zip(strides) {
        if d == 0 {
            return Some((0, 0));
        }
        let reach = (d as i128 - 1)
            .checked_mul(s as i128)?
            .checked_mul(item as i128)?;
        if reach < 0 {
            lo = lo.checked_add(reach)?;
        } else {
            hi = hi.checked_add(reach)?;
        }
    }
    Some((lo, hi.checked_add(item as i128)?))
}

/// Whether `strides` (in elements) are those of a C-ordered `shape`.
fn is_c_contiguous(shape: &[usize], strides: &[i64]) -> bool {
    let mut step = 1i64;
    shape.iter().zip(strides).rev().all(|(&d, &s)| {
        let ok = d <= 1 || s == step;
        step = step.saturating_mul(d as i64);
        ok
    })
}

/// Copy a strided CPU tensor into `out` (C order).
///
/// # Safety
/// `t` describes readable memory (the DLPack producer's promise).
unsafe fn gather(t: &DLTensor, shape: &[usize], dtype: DType, out: &mut [u8]) {
    let item = dtype.size;
    let ndim = shape.len();
    // SAFETY: a non-null `strides` holds `ndim` entries (DLPack).
    let strides: &[i64] = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
    // SAFETY: the producer's data pointer plus byte offset is the first element.
    let base = unsafe { t.data.cast::<u8>().add(t.byte_offset as usize) };
    let mut index = vec![0usize; ndim];
    for chunk in out.chunks_exact_mut(item) {
        let offset: isize = index
            .iter()
            .zip(strides)
            .map(|(&i, &s)| i as isize * s as isize * item as isize)
            .sum();
        // SAFETY: every index lies inside the shape, so the element lies
        // inside the producer's memory.
        unsafe { std::ptr::copy_nonoverlapping(base.offset(offset), chunk.as_mut_ptr(), item) };
        for d in (0..ndim).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// Releases a consumed capsule: renames it and calls the deleter.
struct Consumed<'a, 'py> {
    capsule: &'a Bound<'py, PyAny>,
    managed: *mut DLManagedTensor,
}

impl Drop for Consumed<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: the capsule is a live "dltensor" capsule whose pointer is
        // `managed`; renaming it first keeps its destructor from deleting
        // it a second time, and the deleter is called exactly once.
        unsafe {
            ffi::PyCapsule_SetName(self.capsule.as_ptr(), USED_DLTENSOR.as_ptr());
            if let Some(deleter) = (*self.managed).deleter {
                deleter(self.managed);
            }
        }
    }
}

/// An array from any DLPack exporter (``__dlpack__``), or from a
/// ``"dltensor"`` capsule.
///
/// A tensor this package exported becomes an array over the same memory
/// (no copy). Any other CPU tensor (numpy's, for instance) is copied into
/// new memory of ``device`` (by default the host device): it is not memory
/// the runtime allocated, so kernels could not be given it safely. An
/// ``offload.DeviceArray`` is returned as it is when it already lives on
/// ``device``.
#[pyfunction]
#[pyo3(signature = (obj, device = None))]
pub fn from_dlpack(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyDevice>>,
) -> PyResult<Py<PyAny>> {
    let target: Option<Device> = device.map(|d| d.get().dev.clone());
    if let Ok(array) = obj.cast::<PyArray>() {
        let a = array.get();
        return match &target {
            Some(t) if t.id() != a.device_ref().id() => {
                Ok(Py::new(py, a.copy_to(py, t)?)?.into_any())
            }
            _ => Ok(array.clone().unbind().into_any()),
        };
    }
    let capsule = if obj.is_instance_of::<PyCapsule>() {
        obj.clone()
    } else if obj.hasattr("__dlpack__")? {
        obj.call_method0("__dlpack__")?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{} does not support DLPack (no __dlpack__)",
            obj.get_type().name()?
        )));
    };
    // SAFETY: IsValid accepts any object and sets no error on a mismatch.
    if unsafe { ffi::PyCapsule_IsValid(capsule.as_ptr(), DLTENSOR.as_ptr()) } != 1 {
        return Err(PyBufferError::new_err(
            "expected an unconsumed \"dltensor\" capsule (was it used already?)",
        ));
    }
    // SAFETY: the capsule is valid under that name, so this is its pointer.
    let managed = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), DLTENSOR.as_ptr()) }
        .cast::<DLManagedTensor>();
    if managed.is_null() {
        return Err(PyErr::fetch(py));
    }
    let consumed = Consumed {
        capsule: &capsule,
        managed,
    };
    if !readable(managed as usize, std::mem::size_of::<DLManagedTensor>()) {
        // Not ours to delete either: forget the capsule's tensor.
        std::mem::forget(consumed);
        return Err(PyBufferError::new_err(format!(
            "the DLPack capsule's tensor at {managed:p} is not readable memory"
        )));
    }
    // SAFETY: a valid capsule points to a managed tensor that lives until
    // its deleter runs (when `consumed` drops); its memory was just checked.
    let t = unsafe { &(*managed).dl_tensor };
    let ndim = usize::try_from(t.ndim).map_err(|_| PyBufferError::new_err("negative ndim"))?;
    if ndim > MAX_NDIM {
        return Err(PyBufferError::new_err(format!(
            "DLPack tensor with {ndim} dimensions (at most {MAX_NDIM})"
        )));
    }
    for (what, p) in [("shape", t.shape), ("strides", t.strides)] {
        let needed = ndim > 0 && (what == "shape" || !p.is_null());
        if needed && (p.is_null() || !readable(p as usize, ndim * 8)) {
            return Err(PyBufferError::new_err(format!(
                "the DLPack tensor's {what} array at {p:p} is not readable memory"
            )));
        }
    }
    let shape: Vec<usize> = if ndim == 0 {
        Vec::new()
    } else {
        // SAFETY: DLPack: `shape` holds `ndim` entries (checked readable).
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| PyBufferError::new_err("negative dimension")))
            .collect::<PyResult<_>>()?
    };
    let dtype = DType::from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes).ok_or_else(|| {
        PyBufferError::new_err(format!(
            "unsupported DLPack dtype (code {}, bits {}, lanes {})",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;

    // One of ours: share the storage.
    // SAFETY: `managed` is the capsule's live DLManagedTensor (checked
    // non-null above); its deleter field is read, nothing called. Our
    // deleter identifies our layout for the reads below.
    let ours = unsafe { (*managed).deleter }
        .is_some_and(|d| std::ptr::fn_addr_eq(d, delete_exported as unsafe extern "C" fn(_)));
    if ours {
        // SAFETY: our managed tensors sit in an `Exported` at `manager_ctx`.
        let storage: Storage = unsafe {
            (*(*managed).manager_ctx.cast::<Exported>())
                .owner
                .storage
                .clone()
        };
        // The shape must fit the storage, and what we export is C-contiguous:
        // a capsule edited after export is refused, not read past its end.
        let bytes = nbytes(&shape, dtype)?;
        let c_order = t.strides.is_null() || {
            // SAFETY: a non-null `strides` holds `ndim` entries (checked).
            let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
            is_c_contiguous(&shape, strides)
        };
        if bytes > storage.size_bytes() || t.byte_offset != 0 || !c_order {
            return Err(PyBufferError::new_err(format!(
                "the DLPack tensor (shape {shape:?}, byte offset {}) does not match the {} bytes of the memory it was exported from",
                t.byte_offset,
                storage.size_bytes()
            )));
        }
        let same_device = target
            .as_ref()
            .is_none_or(|d| d.id() == storage.device().id());
        let shared = PyArray {
            buf: storage,
            dtype,
            shape,
        };
        drop(consumed);
        return if same_device {
            Ok(Py::new(py, shared)?.into_any())
        } else {
            let t = target.as_ref().expect("a different device was given");
            Ok(Py::new(py, shared.copy_to(py, t)?)?.into_any())
        };
    }

    if !matches!(
        t.device.device_type,
        KDL_CPU | KDL_CUDA_HOST | KDL_ROCM_HOST
    ) {
        return Err(PyBufferError::new_err(format!(
            "DLPack device type {} is not host memory: only CPU tensors can be copied in",
            t.device.device_type
        )));
    }
    let target = match target {
        Some(d) => d,
        None => Device::host().py()?,
    };
    let bytes = nbytes(&shape, dtype)?;
    let strides: Option<&[i64]> = (!t.strides.is_null()).then(|| {
        // SAFETY: a non-null `strides` holds `ndim` entries (checked readable).
        unsafe { std::slice::from_raw_parts(t.strides, ndim) }
    });
    let contiguous = strides.is_none_or(|s| is_c_contiguous(&shape, s));
    if bytes > 0 {
        // Every byte the shape, strides and offset reach must be memory of
        // this process that can be read: checked before anything is read.
        let (lo, hi) = match strides {
            None => Some((0, bytes as i128)),
            Some(s) => extent(&shape, s, dtype.size),
        }
        .ok_or_else(|| {
            PyBufferError::new_err(format!(
                "the DLPack tensor's shape {shape:?} and strides {strides:?} overflow the address space"
            ))
        })?;
        let first = (t.data as usize as i128)
            .checked_add(t.byte_offset as i128)
            .filter(|&f| f > 0);
        let span = first.and_then(|f| {
            let start = f.checked_add(lo)?;
            let end = f.checked_add(hi)?;
            (start > 0 && end <= usize::MAX as i128).then_some((start as usize, end as usize))
        });
        let ok = span.is_some_and(|(start, end)| readable(start, end - start));
        if !ok {
            return Err(PyBufferError::new_err(format!(
                "the DLPack tensor (data {:p}, byte offset {}, shape {shape:?}, strides {strides:?}) reaches memory that is not readable in this process",
                t.data, t.byte_offset
            )));
        }
    }
    let buf = if bytes == 0 {
        target.alloc_zeros::<u8>(0).py()?
    } else if contiguous {
        // SAFETY: the producer's tensor holds `bytes` contiguous readable
        // bytes from data + byte_offset, alive until `consumed` drops.
        let src = unsafe {
            std::slice::from_raw_parts(t.data.cast::<u8>().add(t.byte_offset as usize), bytes)
        };
        py.detach(|| target.buffer_from(src)).py()?
    } else {
        let mut host = vec![0u8; bytes];
        // SAFETY: the producer describes readable memory.
        unsafe { gather(t, &shape, dtype, &mut host) };
        py.detach(|| target.buffer_from(&host)).py()?
    };
    drop(consumed);
    Ok(Py::new(
        py,
        PyArray {
            buf: Arc::new(buf),
            dtype,
            shape,
        },
    )?
    .into_any())
}
