//! `offload info --json`'s report for Python (`offload.info()`,
//! `Device.info`): the `offload-info` crate's model serialised, so the
//! package and the command give the same keys and values.

use offload_core::Device;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

pub use offload_info::{platform_of, plugin_platform, PlatformFacts};

fn to_json(value: &impl serde::Serialize) -> PyResult<String> {
    serde_json::to_string(value).map_err(|e| PyRuntimeError::new_err(format!("device report: {e}")))
}

/// One device's report, as JSON.
pub fn device_report_json(d: &Device, p: &PlatformFacts) -> PyResult<String> {
    to_json(&offload_info::device_report(d, p))
}

/// `offload info --json` as a string (``offload.info()`` parses it).
#[pyfunction]
pub fn info_json() -> PyResult<String> {
    to_json(&offload_info::collect(offload::internals::runtime()))
}
