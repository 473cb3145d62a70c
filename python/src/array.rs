//! Device arrays: typed, shaped device memory, copied from and to anything
//! with the buffer protocol, exported through DLPack.

use offload::internals::CoreAccess as _;
use std::sync::Arc;

use offload::{Device, DeviceBuffer};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};

use crate::buffer::HostBuffer;
use crate::device::PyDevice;
use crate::dlpack;
use crate::dtype::DType;
use crate::error::IntoPyResult;
use crate::queue::PyQueue;

/// The memory of one or more arrays (views made by `reshape` and DLPack
/// imports share it); freed when the last of them, and the last launch or
/// DLPack capsule using it, is gone.
pub type Storage = Arc<DeviceBuffer<u8>>;

/// An n-dimensional, C-contiguous array in a device's memory.
///
/// Made by ``Device.to_device``, ``Device.empty``/``zeros`` or
/// ``offload.from_dlpack``; freed when collected (and after every launch
/// using it has finished). Copies to and from the host are synchronous;
/// pass ``queue=`` to wait for the work on that queue first.
#[pyclass(frozen, name = "DeviceArray", module = "offload")]
pub struct PyArray {
    pub(crate) buf: Storage,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
}

/// Elements of `shape`, or an error when the count overflows.
fn count(shape: &[usize]) -> PyResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| PyValueError::new_err("array size overflows"))
}

/// Bytes of an array of `shape` and `dtype`.
pub fn nbytes(shape: &[usize], dtype: DType) -> PyResult<usize> {
    count(shape)?
        .checked_mul(dtype.size)
        .ok_or_else(|| PyValueError::new_err("array size overflows"))
}

/// A shape argument: an int or a sequence of ints, none negative.
pub fn shape_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let dims: Vec<i128> = if let Ok(n) = obj.extract::<i128>() {
        vec![n]
    } else {
        obj.extract::<Vec<i128>>()
            .map_err(|_| PyTypeError::new_err("shape must be an int or a sequence of ints"))?
    };
    dims.iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                PyValueError::new_err(if d < 0 {
                    format!("negative dimension {d} in shape {dims:?}: dimensions must be >= 0")
                } else {
                    format!("dimension {d} in shape {dims:?} is too large")
                })
            })
        })
        .collect()
}

/// Untyped bytes (`bytes`, `bytearray`, a `B` memoryview, a uint8 array)
/// copy into any array of their size; a typed source or destination must
/// have the array's element type and shape.
fn check_host_layout(host: &HostBuffer<'_>, array: &PyArray, what: &str) -> PyResult<()> {
    let raw_bytes = matches!(host.format(), "B" | "c") && host.shape().len() <= 1;
    if raw_bytes {
        return Ok(());
    }
    match host.dtype() {
        Some(d) if d == array.dtype => {}
        d => {
            return Err(PyTypeError::new_err(format!(
                "{what} has dtype {}, the array {}: convert it first (numpy: .astype('{}')), or pass raw bytes (.view(numpy.uint8))",
                d.map_or_else(|| format!("of format {:?}", host.format()), |d| d.name().to_string()),
                array.dtype.name(),
                array.dtype.name()
            )))
        }
    }
    let shape = host.shape();
    if shape != array.shape && !(shape.len() <= 1 && array.shape.len() <= 1) {
        return Err(PyValueError::new_err(format!(
            "{what} has shape {:?}, the array {:?}",
            shape, array.shape
        )));
    }
    Ok(())
}

/// Wait for `queue`'s work, without the GIL, when one is given.
pub fn sync_first(py: Python<'_>, queue: Option<&Bound<'_, PyQueue>>) -> PyResult<()> {
    match queue {
        Some(q) => q.get().synchronize(py),
        None => Ok(()),
    }
}

impl PyArray {
    /// A new zeroed array.
    pub fn zeros(
        py: Python<'_>,
        device: &Device,
        shape: Vec<usize>,
        dtype: DType,
    ) -> PyResult<Self> {
        let bytes = nbytes(&shape, dtype)?;
        let buf = py.detach(|| device.alloc_zeros::<u8>(bytes)).py()?;
        Ok(PyArray {
            buf: Arc::new(buf),
            dtype,
            shape,
        })
    }

    /// A device copy of the host buffer `src`.
    pub fn from_host_buffer(
        py: Python<'_>,
        device: &Device,
        src: &HostBuffer<'_>,
    ) -> PyResult<Self> {
        let dtype = src.dtype().ok_or_else(|| {
            PyBufferError::new_err(format!(
                "unsupported buffer format {:?} (use bool, (u)int8-64, float16/32/64, complex64/128)",
                src.format()
            ))
        })?;
        let bytes = src.bytes();
        let buf = py.detach(|| device.buffer_from(bytes)).py()?;
        Ok(PyArray {
            buf: Arc::new(buf),
            dtype,
            shape: src.shape(),
        })
    }

    /// A device copy of any buffer-protocol object (a non-contiguous numpy
    /// array goes through `numpy.ascontiguousarray`), or of another device
    /// array (on any device).
    pub fn from_object(py: Python<'_>, device: &Device, obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(other) = obj.cast::<PyArray>() {
            return other.get().copy_to(py, device);
        }
        let src = match HostBuffer::get(obj, false) {
            Ok(b) => b,
            Err(e) => {
                // A numpy array that is not C-contiguous: through a
                // contiguous copy. Nothing else is converted.
                let Ok(np) = py.import("numpy") else {
                    return Err(e);
                };
                if !obj.is_instance(&np.getattr("ndarray")?)? {
                    return Err(e);
                }
                let contiguous = np.getattr("ascontiguousarray")?.call1((obj,))?;
                HostBuffer::get(&contiguous, false)?
            }
        };
        Self::from_host_buffer(py, device, &src)
    }

    /// A copy on `device` (device to device, or through the host: the core
    /// decides).
    pub fn copy_to(&self, py: Python<'_>, device: &Device) -> PyResult<Self> {
        let src = &self.buf;
        let buf = py
            .detach(|| {
                let mut dst = device.alloc_zeros::<u8>(src.len())?;
                dst.copy_from_buffer(&**src)?;
                Ok::<_, offload::Error>(dst)
            })
            .py()?;
        Ok(PyArray {
            buf: Arc::new(buf),
            dtype: self.dtype,
            shape: self.shape.clone(),
        })
    }

    /// The device holding the array.
    pub fn device_ref(&self) -> &Device {
        self.buf.device()
    }

    /// Byte strides of the C-contiguous layout.
    pub fn byte_strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.shape.len()];
        let mut step = self.dtype.size;
        for (s, &d) in strides.iter_mut().zip(&self.shape).rev() {
            *s = step;
            step *= d.max(1);
        }
        strides
    }
}

#[pymethods]
impl PyArray {
    /// The dimensions, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// Byte steps between consecutive elements of each dimension
    /// (C-contiguous, as numpy gives them).
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.byte_strides())
    }

    /// The element type: a ``numpy.dtype`` (its name when numpy is not
    /// installed).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.dtype.to_py(py)
    }

    /// Number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    #[getter]
    fn size(&self) -> PyResult<usize> {
        count(&self.shape)
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.dtype.size
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.buf.len()
    }

    /// The device holding the array.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice::new(self.buf.device().clone())
    }

    /// The device address of the first element (what a kernel receives).
    #[getter]
    fn ptr(&self) -> u64 {
        self.buf.device_ptr().0
    }

    fn __len__(&self) -> PyResult<usize> {
        self.shape
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d device array"))
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceArray(shape={:?}, dtype={}, device={})",
            self.shape,
            self.dtype.name(),
            self.buf.device()
        )
    }

    /// A copy in a new numpy array. With ``queue``, that queue's work is
    /// waited for first (the copy itself is synchronous either way).
    #[pyo3(signature = (queue = None))]
    fn to_numpy<'py>(
        &self,
        py: Python<'py>,
        queue: Option<&Bound<'py, PyQueue>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let np = py.import("numpy")?;
        let out = np
            .getattr("empty")?
            .call1((PyTuple::new(py, &self.shape)?, self.dtype.name()))?;
        self.copy_to_host(py, &out, queue)?;
        Ok(out)
    }

    /// Copy the array into ``out``, any writable C-contiguous buffer of
    /// exactly ``nbytes`` bytes. With ``queue``, that queue's work is
    /// waited for first.
    #[pyo3(signature = (out, queue = None))]
    fn copy_to_host(
        &self,
        py: Python<'_>,
        out: &Bound<'_, PyAny>,
        queue: Option<&Bound<'_, PyQueue>>,
    ) -> PyResult<()> {
        sync_first(py, queue)?;
        let dst = HostBuffer::get(out, true)?;
        check_host_layout(&dst, self, "destination")?;
        if dst.len() != self.buf.len() {
            return Err(PyValueError::new_err(format!(
                "destination has {} bytes, the array {}",
                dst.len(),
                self.buf.len()
            )));
        }
        let buf = &self.buf;
        let ptr = crate::buffer::SendPtr(dst.ptr());
        let len = dst.len();
        py.detach(move || {
            let ptr = ptr;
            if len == 0 {
                return Ok(());
            }
            // SAFETY: `dst` (held until this returns) exports `len`
            // writable bytes at `ptr`; nothing else in Rust refers to them.
            let out = unsafe { std::slice::from_raw_parts_mut(ptr.0, len) };
            buf.copy_to_host(out)
        })
        .py()
    }

    /// Overwrite the array with ``src``, any C-contiguous buffer of exactly
    /// ``nbytes`` bytes. With ``queue``, that queue's work is waited for
    /// first.
    #[pyo3(signature = (src, queue = None))]
    fn copy_from_host(
        &self,
        py: Python<'_>,
        src: &Bound<'_, PyAny>,
        queue: Option<&Bound<'_, PyQueue>>,
    ) -> PyResult<()> {
        sync_first(py, queue)?;
        let src = HostBuffer::get(src, false)?;
        check_host_layout(&src, self, "source")?;
        if src.len() != self.buf.len() {
            return Err(PyValueError::new_err(format!(
                "source has {} bytes, the array {}",
                src.len(),
                self.buf.len()
            )));
        }
        let bytes = src.bytes();
        let buf = &self.buf;
        py.detach(|| {
            if bytes.is_empty() {
                return Ok(());
            }
            let ptr = buf.device_ptr();
            // SAFETY: `bytes` is valid for its length while `src` is held;
            // the core checks that the destination range lies inside the
            // array's allocation.
            unsafe {
                buf.device()
                    .core()
                    .copy_to_device(ptr, bytes.as_ptr(), bytes.len())
            }
        })
        .py()
    }

    /// A copy of the array on ``device`` (this array's device by default).
    #[pyo3(signature = (device = None))]
    fn copy(&self, py: Python<'_>, device: Option<&Bound<'_, PyDevice>>) -> PyResult<PyArray> {
        let device = device.map_or_else(|| self.buf.device().clone(), |d| d.get().dev.clone());
        self.copy_to(py, &device)
    }

    /// The same memory with another shape of the same size.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<PyArray> {
        let shape = if shape.len() == 1 {
            shape_arg(&shape.get_item(0)?)?
        } else {
            shape_arg(shape.as_any())?
        };
        if count(&shape)? != count(&self.shape)? {
            return Err(PyValueError::new_err(format!(
                "cannot reshape {:?} into {:?}",
                self.shape, shape
            )));
        }
        Ok(PyArray {
            buf: self.buf.clone(),
            dtype: self.dtype,
            shape,
        })
    }

    /// CUDA Array Interface v3 (CuPy, PyTorch, Numba) for arrays on CUDA
    /// devices: the device pointer, shape and ``typestr``, C-contiguous
    /// (``strides`` None). ``stream`` is None: the consumer does not wait
    /// on a stream, so synchronise the queues that write the array first.
    /// Other devices have no such attribute (``hasattr`` is False).
    #[getter]
    fn __cuda_array_interface__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        if self.buf.device().info().backend != offload::Backend::Cuda {
            return Err(pyo3::exceptions::PyAttributeError::new_err(format!(
                "__cuda_array_interface__: the array is on {}, not a CUDA device",
                self.buf.device()
            )));
        }
        let d = pyo3::types::PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.dtype.typestr())?;
        d.set_item("data", (self.buf.device_ptr().0, false))?;
        d.set_item("version", 3)?;
        d.set_item("strides", py.None())?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// numpy's array protocol: ``numpy.asarray(a)`` copies the array to
    /// the host.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(false) {
            return Err(PyValueError::new_err(
                "a device array cannot become a numpy array without a copy (use numpy.from_dlpack)",
            ));
        }
        let out = self.to_numpy(py, None)?;
        match dtype {
            Some(t) => out.call_method1("astype", (t,)),
            None => Ok(out),
        }
    }

    /// DLPack export: a capsule over the array's memory, no copy: the
    /// legacy ``"dltensor"``, or ``"dltensor_versioned"`` (DLPack 1.0) when
    /// ``max_version`` is at least ``(1, 0)``. Only memory the host can address (devices that share host
    /// memory, such as the host CPU device) can be exported; it is
    /// described as ``kDLCPU``. The capsule keeps the memory allocated
    /// until its consumer calls the deleter. ``copy=True`` exports a fresh
    /// copy on the same device.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = stream; // CPU memory: there is no stream to order against
                        // DLPack 1.0 (writable for numpy) when the consumer takes it.
        let versioned = match max_version {
            Some(v) => v.extract::<(u32, u32)>().is_ok_and(|(major, _)| major >= 1),
            None => false,
        };
        if let Some(want) = dl_device {
            if want != dlpack::device_of(self.device_ref()) {
                return Err(PyBufferError::new_err(format!(
                    "cannot export to DLPack device {want:?}: the array is on {}",
                    self.device_ref()
                )));
            }
        }
        if copy == Some(true) {
            let fresh = self.copy_to(py, self.device_ref())?;
            return dlpack::export(py, &fresh, versioned);
        }
        dlpack::export(py, self, versioned)
    }

    /// DLPack: ``(device_type, device_id)``; ``(1, 0)`` (``kDLCPU``) for
    /// memory the host can address, else ``(12, index)`` (``kDLExtDev``).
    fn __dlpack_device__(&self) -> (i32, i32) {
        dlpack::device_of(self.device_ref())
    }
}
