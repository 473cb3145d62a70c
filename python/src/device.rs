//! Devices and platforms.

use offload::internals::CoreAccess as _;
use offload::Device;
use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::array::{shape_arg, PyArray};
use crate::buffer::HostBuffer;
use crate::dtype::DType;
use crate::error::IntoPyResult;
use crate::info;
use crate::program::PyProgram;
use crate::queue::PyQueue;

/// A device of the runtime: the host CPU, a device of an ``offload serve``
/// server (``OFFLOAD_REMOTE``), ... Equal when their ``index`` is.
#[pyclass(frozen, name = "Device", module = "offload", eq, hash)]
pub struct PyDevice {
    pub(crate) dev: Device,
}

impl PartialEq for PyDevice {
    fn eq(&self, other: &Self) -> bool {
        self.dev.id() == other.dev.id()
    }
}

impl std::hash::Hash for PyDevice {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dev.id().hash(state)
    }
}

impl PyDevice {
    pub fn new(dev: Device) -> Self {
        PyDevice { dev }
    }
}

fn json_loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl PyDevice {
    /// The device's name.
    #[getter]
    fn name(&self) -> &str {
        &self.dev.info().name
    }

    /// ``"cpu"``, ``"gpu"`` or ``"host"``.
    #[getter]
    fn r#type(&self) -> &'static str {
        self.dev.info().device_type.name()
    }

    /// The runtime's device number (``offload.device(index)``).
    #[getter]
    fn index(&self) -> usize {
        self.dev.id()
    }

    /// The plugin owning the device (``host``, ``remote``, ...).
    #[getter]
    fn plugin(&self) -> &'static str {
        self.dev.plugin_name()
    }

    /// ``host``, ``cuda``, ``amdgpu``, ``remote`` or ``other``.
    #[getter]
    fn backend(&self) -> &'static str {
        self.dev.info().backend.name()
    }

    /// The vendor string.
    #[getter]
    fn vendor(&self) -> &str {
        &self.dev.info().vendor
    }

    /// A stable unique id (``x86_64-0``).
    #[getter]
    fn uid(&self) -> &str {
        &self.dev.info().uid
    }

    /// Target triple of the images it runs.
    #[getter]
    fn triple(&self) -> &str {
        &self.dev.info().triple
    }

    /// Architecture (empty when any of the triple runs).
    #[getter]
    fn arch(&self) -> &str {
        &self.dev.info().arch
    }

    /// An AMD GPU's ISAs as target IDs (``gfx90a:sramecc+:xnack-``, then
    /// its family's generic ISA): which code objects it runs. Empty for
    /// other devices.
    #[getter]
    fn target_ids(&self) -> Vec<String> {
        self.dev
            .info()
            .target_ids
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Global memory in bytes.
    #[getter]
    fn global_memory(&self) -> u64 {
        self.dev.info().global_memory_bytes
    }

    /// Whether device memory is host memory (arrays then export to DLPack
    /// as ``kDLCPU`` without a copy).
    #[getter]
    fn shares_host_memory(&self) -> bool {
        self.dev.core().shares_host_memory()
    }

    /// Every property ``offload info --json`` reports for the device, as a
    /// dict with the same keys (LLVM's labels in snake case, then ours).
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let rt = offload::internals::runtime();
        let facts = info::platform_of(rt, self.dev.id());
        json_loads(py, &info::device_report_json(self.dev.core(), &facts)?)
    }

    /// The platform (plugin) of the device.
    #[getter]
    fn platform(&self) -> PyPlatform {
        PyPlatform::of(offload::internals::runtime(), self.dev.id())
    }

    fn __repr__(&self) -> String {
        format!(
            "Device(index={}, name={:?}, type={:?}, plugin={:?})",
            self.dev.id(),
            self.dev.info().name,
            self.r#type(),
            self.dev.plugin_name()
        )
    }

    /// A device array holding a copy of ``obj``: anything with the buffer
    /// protocol (numpy arrays, bytes, array.array, ...) or another device
    /// array. Shape and dtype come from the buffer.
    fn to_device(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        PyArray::from_object(py, &self.dev, obj)
    }

    /// A new array of ``shape`` and ``dtype``, its contents unspecified.
    #[pyo3(signature = (shape, dtype = None))]
    fn empty(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        // Zeroed memory: never expose another allocation's old bytes.
        self.zeros(py, shape, dtype)
    }

    /// A new array of ``shape`` and ``dtype`` (default ``float64``), every
    /// byte zero.
    #[pyo3(signature = (shape, dtype = None))]
    fn zeros(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        let dtype = match dtype {
            Some(t) => DType::from_py(t)?,
            None => DType::from_name("float64").expect("a known dtype"),
        };
        PyArray::zeros(py, &self.dev, shape_arg(shape)?, dtype)
    }

    /// Load a program: ``src`` is image bytes (any buffer) or a path
    /// (``str`` or ``os.PathLike``). Host-kernel shared objects (built
    /// against ``include/offload/host_kernel.h``), OpenMP device images,
    /// LLVM OffloadBinary containers and LLVM bitcode (compiled at load
    /// time) all load; the best image this device runs is chosen.
    fn load_program(&self, py: Python<'_>, src: &Bound<'_, PyAny>) -> PyResult<PyProgram> {
        let is_path = src.is_instance_of::<PyString>() || src.hasattr("__fspath__")?;
        let program = if is_path {
            let path: std::path::PathBuf = src.extract()?;
            // Only a regular file within the image size limit: a path to
            // /dev/zero or a FIFO is refused, not read until memory runs out.
            let bytes = py
                .detach(|| offload_core::files::read_image(&path))
                .map_err(|e| match e.code() {
                    offload_core::ErrorCode::HostIo => {
                        pyo3::exceptions::PyOSError::new_err(e.message().to_string())
                    }
                    _ => crate::error::to_py(e),
                })?;
            py.detach(|| self.dev.load_program(&bytes)).py()?
        } else {
            if src.is_instance_of::<PyBytes>() {
                let bytes = src.cast::<PyBytes>()?.as_bytes();
                let program = py.detach(|| self.dev.load_program(bytes)).py()?;
                return Ok(PyProgram::new(program));
            }
            let buf = HostBuffer::get(src, false).map_err(|_| {
                PyTypeError::new_err("load_program takes image bytes (a buffer) or a path")
            })?;
            let bytes = buf.bytes();
            py.detach(|| self.dev.load_program(bytes)).py()?
        };
        Ok(PyProgram::new(program))
    }

    /// Whether ``image`` (bytes) holds an image this device can run.
    fn is_compatible(&self, image: &Bound<'_, PyAny>) -> PyResult<bool> {
        let buf = HostBuffer::get(image, false)?;
        Ok(self.dev.is_compatible(buf.bytes()))
    }

    /// A new in-order asynchronous queue on this device.
    fn queue(&self) -> PyResult<PyQueue> {
        PyQueue::new(&self.dev)
    }
}

/// A platform: one plugin and its devices.
#[pyclass(frozen, name = "Platform", module = "offload", get_all)]
pub struct PyPlatform {
    /// The plugin's name (``host``, ``remote``, ...).
    name: String,
    /// LLVM's "Platform Vendor Name".
    vendor_name: String,
    /// LLVM's "Platform Version" (the API version).
    version: String,
    /// The backend of its devices (``host``, ``remote``, ...).
    backend: String,
    /// Its devices.
    devices: Vec<Py<PyDevice>>,
}

impl PyPlatform {
    fn of(rt: &offload::internals::Runtime, id: usize) -> Self {
        platforms_of(rt)
            .into_iter()
            .find(|(range, _)| range.contains(&id))
            .map(|(_, p)| p)
            .unwrap_or_else(|| PyPlatform {
                name: "unknown".into(),
                vendor_name: String::new(),
                version: String::new(),
                backend: "other".into(),
                devices: Vec::new(),
            })
    }
}

fn platforms_of(rt: &offload::internals::Runtime) -> Vec<(std::ops::Range<usize>, PyPlatform)> {
    Python::attach(|py| {
        rt.plugins()
            .map(|(plugin, range)| {
                let backend = rt
                    .devices()
                    .get(range.start)
                    .filter(|_| !range.is_empty())
                    .map_or(offload::Backend::Other, |d| d.info().backend);
                let facts = info::plugin_platform(plugin.name(), backend);
                let devices = range
                    .clone()
                    .filter_map(|id| Device::get(id).ok())
                    .filter_map(|d| Py::new(py, PyDevice::new(d)).ok())
                    .collect();
                let backend = if range.is_empty() {
                    plugin.name().to_string()
                } else {
                    backend.name().to_string()
                };
                (
                    range,
                    PyPlatform {
                        name: facts.name,
                        vendor_name: facts.vendor_name,
                        version: "v0.0.1".into(),
                        backend,
                        devices,
                    },
                )
            })
            .collect()
    })
}

#[pymethods]
impl PyPlatform {
    fn __repr__(&self) -> String {
        format!(
            "Platform(name={:?}, backend={:?}, devices={})",
            self.name,
            self.backend,
            self.devices.len()
        )
    }
}

/// Every device of every plugin, in index order (the host CPU first; then
/// the devices of servers named by ``OFFLOAD_REMOTE``). ``OFFLOAD_PLUGINS``
/// and the other ``OFFLOAD_*`` variables apply, read when the runtime
/// starts (the first call).
#[pyfunction]
pub fn devices(py: Python<'_>) -> Vec<PyDevice> {
    py.detach(offload::devices)
        .into_iter()
        .map(PyDevice::new)
        .collect()
}

/// Device number ``index`` (default 0).
#[pyfunction]
#[pyo3(signature = (index = 0))]
pub fn device(py: Python<'_>, index: usize) -> PyResult<PyDevice> {
    let all = py.detach(offload::devices);
    all.into_iter()
        .nth(index)
        .map(PyDevice::new)
        .ok_or_else(|| PyIndexError::new_err(format!("no device {index}")))
}

/// The first device of the host plugin (the host CPU).
#[pyfunction]
pub fn host_device(py: Python<'_>) -> PyResult<PyDevice> {
    py.detach(Device::host).py().map(PyDevice::new)
}

/// The platforms (plugins) with devices, like ``offload info`` lists them
/// (without the virtual HOST platform: see ``offload.info()``).
#[pyfunction]
pub fn platforms(py: Python<'_>) -> Vec<PyPlatform> {
    let rt = py.detach(offload::internals::runtime);
    platforms_of(rt).into_iter().map(|(_, p)| p).collect()
}
