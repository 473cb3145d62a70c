//! The `offload._offload` extension module: the Python face of the offload
//! runtime, on the Rust API (`offload-runtime`) and, for queues, the core
//! (`offload-core`).
//!
//! The pure-Python package `offload` (python/python/offload) re-exports
//! everything here and defines the exception types ([`error`]).
//!
//! Rules kept throughout:
//! * every fallible runtime call becomes an `offload.OffloadError` carrying
//!   the `ol_errc_t` code and the runtime's message; misuse from Python
//!   (wrong types, shapes) is a `TypeError`/`ValueError`/`BufferError`;
//! * nothing panics on purpose: errors are returned, never unwrapped;
//! * the GIL is released around everything that may block (queue and event
//!   waits, copies, program loading);
//! * `unsafe` lives only at the boundaries (the buffer protocol, DLPack
//!   capsules, the kernel launch), each with a SAFETY comment.

mod array;
mod buffer;
mod device;
mod dlpack;
mod dtype;
mod error;
mod info;
mod program;
mod queue;

use pyo3::prelude::*;

#[pymodule]
fn _offload(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<device::PyDevice>()?;
    m.add_class::<device::PyPlatform>()?;
    m.add_class::<array::PyArray>()?;
    m.add_class::<program::PyProgram>()?;
    m.add_class::<program::PyKernel>()?;
    m.add_class::<queue::PyQueue>()?;
    m.add_class::<queue::PyEvent>()?;
    m.add_function(wrap_pyfunction!(device::devices, m)?)?;
    m.add_function(wrap_pyfunction!(device::device, m)?)?;
    m.add_function(wrap_pyfunction!(device::host_device, m)?)?;
    m.add_function(wrap_pyfunction!(device::platforms, m)?)?;
    m.add_function(wrap_pyfunction!(info::info_json, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(error::error_codes, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
