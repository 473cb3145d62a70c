//! The buffer protocol, for host memory of any exporter (numpy arrays and
//! scalars, bytes, bytearray, memoryview, array.array, ctypes).
//!
//! pyo3's `PyBuffer` needs the limited API of Python 3.11, and the wheels
//! are abi3 for 3.9: the two functions and the `Py_buffer` struct are
//! declared here. Both functions are exported by every CPython 3 (part of
//! the stable ABI from 3.11 on), and `Py_buffer`'s layout has not changed
//! since Python 3.3.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::marker::PhantomData;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::dtype::DType;

/// CPython's `Py_buffer`.
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;
const PYBUF_C_CONTIGUOUS: c_int = 0x0020 | PYBUF_STRIDES;

/// A C-contiguous buffer exported by a Python object; released on drop.
///
/// It lives no longer than the GIL token `'py` it was made under (and
/// cannot enter `Python::detach`), so it is always released with the GIL
/// held.
pub struct HostBuffer<'py> {
    // Boxed: the exporter may keep pointers into the struct until release.
    raw: Box<RawBuffer>,
    _gil: PhantomData<Python<'py>>,
}

impl<'py> HostBuffer<'py> {
    /// The C-contiguous buffer of `obj` (writable when asked for).
    pub fn get(obj: &Bound<'py, PyAny>, writable: bool) -> PyResult<HostBuffer<'py>> {
        let mut raw = Box::new(RawBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        let flags = PYBUF_C_CONTIGUOUS | PYBUF_FORMAT | if writable { PYBUF_WRITABLE } else { 0 };
        // SAFETY: `obj` is a live object (we hold the GIL through `Bound`);
        // `raw` is a valid, writable Py_buffer that outlives the export
        // (released in Drop, exactly once, only after a successful get).
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *raw, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(HostBuffer {
            raw,
            _gil: PhantomData,
        })
    }

    /// Address of the first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.raw.buf.cast()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.raw.len.max(0) as usize
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: the exporter guarantees `len` readable bytes at `buf`
        // while the buffer is held, which `&self` ensures.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len()) }
    }

    /// The format string (`B` when the exporter gives none).
    pub fn format(&self) -> &str {
        if self.raw.format.is_null() {
            return "B";
        }
        // SAFETY: a non-null format is a NUL-terminated string owned by the
        // exporter for the lifetime of the export, which `&self` bounds.
        unsafe { CStr::from_ptr(self.raw.format) }
            .to_str()
            .unwrap_or("?unreadable")
    }

    /// The element type, when the format is one of ours.
    pub fn dtype(&self) -> Option<DType> {
        DType::from_format(self.format(), self.raw.itemsize.max(0) as usize)
    }

    /// The shape (`[len / itemsize]` when the exporter gives none; `[]` for
    /// a 0-d buffer such as a numpy scalar).
    pub fn shape(&self) -> Vec<usize> {
        let ndim = self.raw.ndim.max(0) as usize;
        if ndim == 0 {
            return Vec::new();
        }
        if self.raw.shape.is_null() {
            let item = self.raw.itemsize.max(1) as usize;
            return vec![self.len() / item];
        }
        // SAFETY: with PyBUF_ND requested, a non-null `shape` holds `ndim`
        // entries valid for the lifetime of the export.
        let dims = unsafe { std::slice::from_raw_parts(self.raw.shape, ndim) };
        dims.iter().map(|&d| d.max(0) as usize).collect()
    }
}

impl Drop for HostBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: the buffer was obtained by a successful PyObject_GetBuffer
        // and is released once; the GIL is held (the `'py` bound).
        unsafe { PyBuffer_Release(&mut *self.raw) }
    }
}

/// A host address carried into a closure that runs without the GIL.
#[derive(Clone, Copy)]
pub struct SendPtr(pub *mut u8);

// SAFETY: the address is only dereferenced while the `HostBuffer` that
// exports it is held by the thread that released the GIL and waits for the
// closure; Python cannot free or resize an exported buffer.
unsafe impl Send for SendPtr {}
