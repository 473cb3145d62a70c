//! Runtime errors as Python exceptions.
//!
//! `offload.OffloadError` is defined in Python (`offload/_errors.py`): a
//! plain `Exception` subclass with `.code` (an `offload.ErrorCode`, the
//! `IntEnum` of LLVM 22's `ol_errc_t`) and `.message`. This module raises
//! it from an `offload_core::Error`.

use offload_core::ErrorCode;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// `InvalidArgument` -> `INVALID_ARGUMENT` (LLVM's `OL_ERRC_` suffix).
fn upper_snake(code: ErrorCode) -> String {
    let camel = format!("{code:?}");
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// `[(name, value, description)]` of every `ol_errc_t` code, for the
/// Python `ErrorCode` enum.
#[pyfunction]
pub fn error_codes() -> Vec<(String, u32, &'static str)> {
    ErrorCode::ALL
        .iter()
        .map(|&c| (upper_snake(c), c.as_raw(), c.description()))
        .collect()
}

static OFFLOAD_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The `offload.OffloadError` raised for `e`.
pub fn to_py(e: offload_core::Error) -> PyErr {
    Python::attach(|py| {
        let class = match OFFLOAD_ERROR.import(py, "offload._errors", "OffloadError") {
            Ok(c) => c,
            Err(import_failed) => return import_failed,
        };
        match class.call1((e.message(), e.code().as_raw())) {
            Ok(value) => PyErr::from_value(value),
            Err(call_failed) => call_failed,
        }
    })
}

/// `Result<T, offload_core::Error>` -> `PyResult<T>`.
pub trait IntoPyResult<T> {
    /// The value, or the error as `offload.OffloadError`.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, offload_core::Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
