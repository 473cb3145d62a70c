//! Queues and events.

use std::sync::{Mutex, PoisonError};

use offload::{Device, Event, Queue};
use pyo3::prelude::*;

use crate::array::Storage;
use crate::device::PyDevice;
use crate::error::IntoPyResult;

/// Past this many kept buffers a launch checks whether the queue is idle
/// and lets them go (a program that never synchronises stays bounded).
const KEEP_CHECK: usize = 4096;

/// An in-order asynchronous queue of a device.
///
/// Launches return as soon as they are enqueued; ``synchronize()`` waits
/// for everything enqueued so far (without holding the GIL) and raises the
/// first failure. The arrays a launch names stay allocated until the queue
/// has been synchronised, even when Python drops them earlier. As a context
/// manager the queue synchronises on exit.
#[pyclass(frozen, name = "Queue", module = "offload")]
pub struct PyQueue {
    pub(crate) queue: Queue,
    /// Storage named by launches since the last synchronisation.
    keep: Mutex<Kept>,
}

/// The storage a queue keeps alive, and the length at which a launch next
/// checks whether the queue went idle (doubling, so checks stay rare).
#[derive(Default)]
struct Kept {
    storage: Vec<Storage>,
    next_check: usize,
}

impl PyQueue {
    pub fn new(device: &Device) -> PyResult<Self> {
        Ok(PyQueue {
            queue: device.create_queue().py()?,
            keep: Mutex::new(Kept {
                storage: Vec::new(),
                next_check: KEEP_CHECK,
            }),
        })
    }

    /// Keep `storage` allocated until the queue is next known idle.
    pub(crate) fn keep_alive(&self, storage: impl IntoIterator<Item = Storage>) {
        let mut keep = self.keep.lock().unwrap_or_else(PoisonError::into_inner);
        keep.storage.extend(storage);
        if keep.storage.len() >= keep.next_check {
            if let Ok(true) = self.queue.is_idle() {
                keep.storage.clear();
            }
            keep.next_check = (2 * keep.storage.len()).max(KEEP_CHECK);
        }
    }

    /// The kept storage, taken out. Taken *before* waiting: what a launch
    /// of another thread adds while we wait belongs to work our wait may
    /// not cover, so it stays kept.
    fn release(&self) -> Vec<Storage> {
        let mut keep = self.keep.lock().unwrap_or_else(PoisonError::into_inner);
        keep.next_check = KEEP_CHECK;
        std::mem::take(&mut keep.storage)
    }

    /// Wait without the GIL; then let the storage of the launches waited
    /// for go.
    pub fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let kept = self.release();
        let r = py.detach(|| self.queue.synchronize());
        drop(kept);
        r.py()
    }
}

impl Drop for PyQueue {
    fn drop(&mut self) {
        // Launches may still use the storage: wait before freeing it.
        let kept = self.release();
        if !kept.is_empty() {
            let _ = self.queue.synchronize();
        }
        drop(kept);
    }
}

#[pymethods]
impl PyQueue {
    /// The device it belongs to.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice::new(self.queue.device().clone())
    }

    /// Block (without holding the GIL) until everything enqueued has
    /// finished; raise the first failure among it as ``OffloadError``.
    #[pyo3(name = "synchronize")]
    fn py_synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.synchronize(py)
    }

    /// An event completing when the work enqueued so far has.
    fn record_event(&self) -> PyResult<PyEvent> {
        Ok(PyEvent {
            event: self.queue.record_event().py()?,
        })
    }

    /// Make work enqueued later on this queue wait for ``event`` (of any
    /// queue). Does not block the caller.
    fn wait_event(&self, py: Python<'_>, event: &PyEvent) -> PyResult<()> {
        py.detach(|| self.queue.wait_event(&event.event)).py()
    }

    /// True when nothing is pending.
    fn is_idle(&self) -> PyResult<bool> {
        self.queue.is_idle().py()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.synchronize(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("Queue(on {})", self.queue.device())
    }
}

/// A point in a queue's work: complete when everything enqueued before it
/// has finished.
#[pyclass(frozen, name = "Event", module = "offload")]
pub struct PyEvent {
    event: Event,
}

#[pymethods]
impl PyEvent {
    /// Block (without holding the GIL) until the event; raise the first
    /// failure of the work before it (each failure is reported once).
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.event.wait()).py()
    }

    /// The same as ``wait()``.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.wait(py)
    }

    /// Whether the work before the event has finished.
    fn is_complete(&self) -> PyResult<bool> {
        self.event.is_complete().py()
    }

    fn __repr__(&self) -> &'static str {
        "Event"
    }
}
