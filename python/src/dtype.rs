//! Element types: numpy's names, buffer-protocol format strings, DLPack
//! type codes, sizes and natural alignments.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

/// The kind of an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int,
    UInt,
    Float,
    Complex,
}

/// An element type: a kind and a size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DType {
    pub kind: Kind,
    pub size: usize,
}

const ALL: [(&str, Kind, usize); 14] = [
    ("bool", Kind::Bool, 1),
    ("int8", Kind::Int, 1),
    ("int16", Kind::Int, 2),
    ("int32", Kind::Int, 4),
    ("int64", Kind::Int, 8),
    ("uint8", Kind::UInt, 1),
    ("uint16", Kind::UInt, 2),
    ("uint32", Kind::UInt, 4),
    ("uint64", Kind::UInt, 8),
    ("float16", Kind::Float, 2),
    ("float32", Kind::Float, 4),
    ("float64", Kind::Float, 8),
    ("complex64", Kind::Complex, 8),
    ("complex128", Kind::Complex, 16),
];

impl DType {
    /// The array-interface type string (`<f4`, `|u1`): little-endian, as
    /// every device the runtime has.
    pub fn typestr(self) -> String {
        let kind = match self.kind {
            Kind::Bool => 'b',
            Kind::Int => 'i',
            Kind::UInt => 'u',
            Kind::Float => 'f',
            Kind::Complex => 'c',
        };
        let order = if self.size == 1 { '|' } else { '<' };
        format!("{order}{kind}{}", self.size)
    }

    /// numpy's name of the type (`float32`).
    pub fn name(self) -> &'static str {
        ALL.iter()
            .find(|&&(_, k, s)| k == self.kind && s == self.size)
            .map_or("void", |&(n, _, _)| n)
    }

    /// The type called `name` (numpy's names, plus short forms like `f4`).
    pub fn from_name(name: &str) -> Option<DType> {
        let name = name.trim_start_matches(['<', '=', '|']);
        if let Some(&(_, kind, size)) = ALL.iter().find(|(n, _, _)| *n == name) {
            return Some(DType { kind, size });
        }
        let short = match name {
            "?" | "b1" => ("bool", 1),
            "float" | "double" | "d" => ("float", 8),
            "f" => ("float", 4),
            "e" => ("float", 2),
            "int" | "l" | "q" => ("int", 8),
            "i" => ("int", 4),
            "h" => ("int", 2),
            "b" => ("int", 1),
            "L" | "Q" => ("uint", 8),
            "I" => ("uint", 4),
            "H" => ("uint", 2),
            "B" => ("uint", 1),
            "complex" | "D" => ("complex", 16),
            "F" => ("complex", 8),
            _ => {
                // f4, i8, u2, c8 ...
                let (k, n) = name.split_at(1.min(name.len()));
                let size: usize = n.parse().ok()?;
                let kind = match k {
                    "f" => "float",
                    "i" => "int",
                    "u" => "uint",
                    "c" => "complex",
                    _ => return None,
                };
                (kind, size)
            }
        };
        let kind = match short.0 {
            "bool" => Kind::Bool,
            "float" => Kind::Float,
            "int" => Kind::Int,
            "uint" => Kind::UInt,
            _ => Kind::Complex,
        };
        let t = DType {
            kind,
            size: short.1,
        };
        (t.name() != "void").then_some(t)
    }

    /// The type of a buffer-protocol item: `format` as `struct` writes it
    /// and the exporter's `itemsize` (which decides the size of `l`, `L`
    /// and friends). `None` for big-endian or composite formats.
    pub fn from_format(format: &str, itemsize: usize) -> Option<DType> {
        let f = format.trim_start_matches(['@', '=', '<']);
        if f.starts_with(['>', '!']) {
            return None;
        }
        let kind = match f {
            "?" => Kind::Bool,
            "b" | "h" | "i" | "l" | "q" | "n" => Kind::Int,
            "B" | "H" | "I" | "L" | "Q" | "N" => Kind::UInt,
            "e" | "f" | "d" => Kind::Float,
            "Zf" | "Zd" => Kind::Complex,
            _ => return None,
        };
        let t = DType {
            kind,
            size: itemsize,
        };
        (t.name() != "void").then_some(t)
    }

    /// Alignment in a C struct: the size, or the part's size for complex.
    pub fn align(self) -> usize {
        match self.kind {
            Kind::Complex => self.size / 2,
            _ => self.size,
        }
    }

    /// DLPack's `DLDataType` code.
    pub fn dlpack_code(self) -> u8 {
        match self.kind {
            Kind::Int => 0,
            Kind::UInt => 1,
            Kind::Float => 2,
            Kind::Complex => 5,
            Kind::Bool => 6,
        }
    }

    /// The type of a DLPack `DLDataType` with one lane.
    pub fn from_dlpack(code: u8, bits: u8, lanes: u16) -> Option<DType> {
        if lanes != 1 || !bits.is_multiple_of(8) {
            return None;
        }
        let kind = match code {
            0 => Kind::Int,
            1 => Kind::UInt,
            2 => Kind::Float,
            5 => Kind::Complex,
            6 => Kind::Bool,
            _ => return None,
        };
        let t = DType {
            kind,
            size: bits as usize / 8,
        };
        (t.name() != "void").then_some(t)
    }

    /// The type a Python argument names: a string, or anything
    /// `numpy.dtype()` accepts (a numpy type, a dtype).
    pub fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
        let name: String = if obj.is_instance_of::<PyString>() {
            obj.extract()?
        } else {
            let np = obj.py().import("numpy").map_err(|_| {
                PyTypeError::new_err(
                    "dtype must be a string such as 'float32' (numpy is not installed)",
                )
            })?;
            np.getattr("dtype")?
                .call1((obj,))?
                .getattr("name")?
                .extract()?
        };
        DType::from_name(&name)
            .ok_or_else(|| PyValueError::new_err(format!("unsupported dtype {name:?}")))
    }

    /// numpy's `dtype` object for the type, or its name when numpy is not
    /// installed.
    pub fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match py.import("numpy") {
            Ok(np) => np.getattr("dtype")?.call1((self.name(),)),
            Err(_) => Ok(PyString::new(py, self.name()).into_any()),
        }
    }
}
