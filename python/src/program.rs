//! Programs, kernels and launches.

use offload::internals::CoreAccess as _;
use offload::{Kernel, LaunchConfig, Program};
use offload_core::plugin::KernelArgs as RawArgs;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::array::{PyArray, Storage};
use crate::buffer::HostBuffer;
use crate::device::PyDevice;
use crate::error::IntoPyResult;
use crate::queue::PyQueue;

/// A program loaded on one device (``Device.load_program``).
#[pyclass(frozen, name = "Program", module = "offload")]
pub struct PyProgram {
    program: Program,
}

impl PyProgram {
    pub fn new(program: Program) -> Self {
        PyProgram { program }
    }
}

#[pymethods]
impl PyProgram {
    /// The kernel called ``name`` (``OffloadError`` with code ``NOT_FOUND``
    /// when there is none).
    fn kernel(&self, name: &str) -> PyResult<PyKernel> {
        Ok(PyKernel {
            kernel: self.program.kernel(name).py()?,
        })
    }

    /// ``(address, size)`` of the global variable called ``name``.
    fn global_address(&self, name: &str) -> PyResult<(u64, u64)> {
        let g = self.program.global(name).py()?;
        Ok((g.device_ptr().0, g.size()))
    }

    /// The device it is loaded on.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice::new(self.program.device().clone())
    }

    fn __repr__(&self) -> String {
        format!("Program(on {})", self.program.device())
    }
}

/// A kernel of a program (it keeps the program loaded).
#[pyclass(frozen, name = "Kernel", module = "offload")]
pub struct PyKernel {
    kernel: Kernel,
}

/// `grid`/`block`: an int or a sequence of one to three ints.
fn dims(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<[u32; 3]> {
    let mut d = [1u32; 3];
    let bad = || PyTypeError::new_err(format!("{what} must be an int or 1 to 3 ints"));
    let items: Vec<u32> = if let Ok(n) = obj.extract::<u32>() {
        Ok(vec![n])
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter()
            .map(|x| x.extract::<u32>())
            .collect::<PyResult<_>>()
    } else {
        obj.extract()
    }
    .map_err(|_| bad())?;
    if items.is_empty() || items.len() > 3 {
        return Err(bad());
    }
    d[..items.len()].copy_from_slice(&items);
    if d.contains(&0) {
        return Err(PyValueError::new_err(format!(
            "{what} has a zero dimension: {items:?}"
        )));
    }
    Ok(d)
}

/// The bytes of a scalar argument and their C alignment.
fn scalar<'py>(arg: &Bound<'py, PyAny>, index: usize) -> PyResult<(HostBuffer<'py>, usize)> {
    let not_typed = || {
        PyTypeError::new_err(format!(
            "argument {index}: {} is neither a DeviceArray nor a typed scalar; pass \
             numpy.int32(...), numpy.float32(...), numpy.uint64(...) etc. so the C type is explicit",
            arg.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    };
    let buf = HostBuffer::get(arg, false).map_err(|_| not_typed())?;
    let dtype = buf.dtype().ok_or_else(not_typed)?;
    if buf.len() != dtype.size {
        return Err(PyTypeError::new_err(format!(
            "argument {index}: a scalar must be one element, this buffer has {} bytes \
             (pass arrays as DeviceArray)",
            buf.len()
        )));
    }
    Ok((buf, dtype.align()))
}

/// Append `bytes` at `align` (C struct layout, natural alignment).
fn push_aligned(out: &mut Vec<u8>, bytes: &[u8], align: usize) {
    let start = out.len().next_multiple_of(align.max(1));
    out.resize(start, 0);
    out.extend_from_slice(bytes);
}

#[pymethods]
impl PyKernel {
    /// The kernel's symbol name.
    #[getter]
    fn name(&self) -> &str {
        self.kernel.name()
    }

    /// The device its program is loaded on.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice::new(self.kernel.device().clone())
    }

    /// A block (group) size that suits this kernel on its device.
    #[pyo3(signature = (shared_mem = 0))]
    fn preferred_block_size(&self, shared_mem: usize) -> u32 {
        self.kernel.preferred_group_size(shared_mem)
    }

    /// Enqueue the kernel on ``queue`` over ``grid`` blocks (groups) of
    /// ``block`` work items each (ints or tuples of 1 to 3 ints, CUDA
    /// style: the total is grid * block per dimension); returns at once.
    ///
    /// ``args`` are packed like the fields of a C struct, each at its
    /// natural alignment (the block a host kernel receives as ``args``,
    /// see ``include/offload/host_kernel.h``): a ``DeviceArray`` is its
    /// device address (8 bytes), a typed scalar (``numpy.float32(2)``,
    /// ``numpy.uint32(n)``, a 0-d array, a ctypes value) is its bytes.
    /// Plain Python ints and floats are refused: their C type is not known.
    /// With ``words=True`` every argument is one 64-bit word instead (the
    /// convention of OpenMP device images).
    ///
    /// ``shared_mem`` is the dynamic group memory per block in bytes.
    ///
    /// The launch trusts the argument layout: nothing checks it against
    /// the kernel's signature, and a kernel given the wrong layout can
    /// read or write any memory of the process (for host kernels). The
    /// arrays passed stay allocated until the queue is synchronised.
    /// Errors of the kernel itself surface at ``queue.synchronize()``.
    #[pyo3(signature = (queue, grid, block = None, args = None, shared_mem = 0, words = false))]
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        grid: &Bound<'_, PyAny>,
        block: Option<&Bound<'_, PyAny>>,
        args: Option<&Bound<'_, PyAny>>,
        shared_mem: u32,
        words: bool,
    ) -> PyResult<()> {
        let q = queue.get();
        let device_id = self.kernel.device().id();
        if q.queue.device().id() != device_id {
            return Err(PyValueError::new_err(format!(
                "kernel '{}' belongs to {}, the queue to {}",
                self.kernel.name(),
                self.kernel.device(),
                q.queue.device()
            )));
        }
        let config = LaunchConfig {
            num_groups: dims(grid, "grid")?,
            group_size: match block {
                Some(b) => dims(b, "block")?,
                None => [1, 1, 1],
            },
            dyn_group_memory: shared_mem,
            tripcount: 0,
        };
        check_launch_size(&config, self.kernel.device().info())?;
        let mut packed: Vec<u8> = Vec::with_capacity(64);
        let mut word_list: Vec<u64> = Vec::new();
        let mut keep: Vec<Storage> = Vec::new();
        let mut add = |index: usize, arg: &Bound<'_, PyAny>| -> PyResult<()> {
            if let Ok(array) = arg.cast::<PyArray>() {
                let a = array.get();
                if a.device_ref().id() != device_id {
                    return Err(PyValueError::new_err(format!(
                        "argument {index}: the array is on {}, the kernel on {}",
                        a.device_ref(),
                        self.kernel.device()
                    )));
                }
                let ptr = a.buf.device_ptr().0;
                if words {
                    word_list.push(ptr);
                } else {
                    push_aligned(&mut packed, &ptr.to_ne_bytes(), 8);
                }
                keep.push(a.buf.clone());
                return Ok(());
            }
            let (buf, align) = scalar(arg, index)?;
            if words {
                let bytes = buf.bytes();
                if bytes.len() > 8 {
                    return Err(PyTypeError::new_err(format!(
                        "argument {index}: {} bytes do not fit a 64-bit word",
                        bytes.len()
                    )));
                }
                let mut w = [0u8; 8];
                w[..bytes.len()].copy_from_slice(bytes);
                word_list.push(u64::from_ne_bytes(w));
            } else {
                push_aligned(&mut packed, buf.bytes(), align);
            }
            Ok(())
        };
        if let Some(args) = args {
            if let Ok(list) = args.cast::<PyList>() {
                for (i, a) in list.iter().enumerate() {
                    add(i, &a)?;
                }
            } else if let Ok(tuple) = args.cast::<PyTuple>() {
                for (i, a) in tuple.iter().enumerate() {
                    add(i, &a)?;
                }
            } else {
                for (i, a) in args.try_iter()?.enumerate() {
                    add(i, &a?)?;
                }
            }
        }
        let raw = if words {
            RawArgs::Words(&word_list)
        } else {
            RawArgs::Packed(&packed)
        };
        // The core copies the arguments before returning; the launch runs
        // asynchronously. Its memory safety is the caller's promise (the
        // docstring says so): this is `offload_runtime::Queue::launch`'s
        // contract, with the buffers kept alive by the queue instead of a
        // borrow.
        // Without the GIL: on a plugin whose queues complete inline (the
        // host CPU) the core runs the kernel in this thread when the queue
        // is idle.
        let (core, kernel) = (q.queue.core(), self.kernel.core());
        py.detach(|| core.launch(kernel, raw, &config)).py()?;
        q.keep_alive(keep);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "Kernel('{}' on {})",
            self.kernel.name(),
            self.kernel.device()
        )
    }
}

/// The launch's sizes against the device's limits (0: the plugin gives
/// none), checked before anything is enqueued, so that a block too large
/// is an error at `launch()`, not at `synchronize()`.
fn check_launch_size(config: &LaunchConfig, info: &offload::DeviceInfo) -> PyResult<()> {
    const AXES: [char; 3] = ['x', 'y', 'z'];
    for (i, axis) in AXES.iter().enumerate() {
        let (b, max) = (config.group_size[i], info.max_group_size_per_dim[i]);
        if max > 0 && b > max {
            return Err(PyValueError::new_err(format!(
                "block {:?}: {b} work items in {axis} exceed the device's {max}",
                config.group_size
            )));
        }
        let (g, max) = (config.num_groups[i], info.max_num_groups[i]);
        if max > 0 && g > max {
            return Err(PyValueError::new_err(format!(
                "grid {:?}: {g} groups in {axis} exceed the device's {max}",
                config.num_groups
            )));
        }
    }
    let items = config.total_items_per_group();
    if info.max_group_size > 0 && items > u64::from(info.max_group_size) {
        return Err(PyValueError::new_err(format!(
            "block {:?}: {items} work items per group exceed the device's {}",
            config.group_size, info.max_group_size
        )));
    }
    if info.group_memory_bytes > 0 && u64::from(config.dyn_group_memory) > info.group_memory_bytes {
        return Err(PyValueError::new_err(format!(
            "shared_mem {}: more than the device's {} bytes of group memory",
            config.dyn_group_memory, info.group_memory_bytes
        )));
    }
    Ok(())
}
