//! Loading images into modules: PTX (JIT-compiled by the driver), cubins
//! and fatbinaries, all through `cuModuleLoadDataEx`.
//!
//! The `1OMP` metadata's `CompileOptions` become JIT options for PTX:
//! `-O0`..`-O4` (`CU_JIT_OPTIMIZATION_LEVEL`), `-g`/`-G`
//! (`CU_JIT_GENERATE_DEBUG_INFO`), `-lineinfo` (`CU_JIT_GENERATE_LINE_INFO`),
//! `-maxrregcount=N` / `--maxrregcount N` (`CU_JIT_MAX_REGISTERS`) and `-v`
//! (`CU_JIT_LOG_VERBOSE`); other options are ignored (with a debug
//! message). The JIT's error log is part of a failed load's error.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use offload_core::plugin::{self, DevicePtr};
use offload_core::{Error, ErrorCode, Result};
use offload_image::cuda::{self, Kind};
use offload_image::metadata::COMPILE_OPTIONS;
use offload_image::DeviceImage;

use crate::driver::Gpu;
use crate::kernel::CudaKernel;
use crate::sys;

/// A loaded module; unloaded when the last program or kernel drops it.
pub struct Module {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) handle: usize,
}

impl Module {
    pub(crate) fn raw(&self) -> sys::CUmodule {
        self.handle as sys::CUmodule
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let raw = self.raw();
        // SAFETY: the module was loaded by `load` and is unloaded once.
        let _ = self
            .gpu
            .call("cuModuleUnload", |d| unsafe { (d.cuModuleUnload)(raw) });
    }
}

/// A program: one module.
pub struct CudaProgram {
    pub(crate) module: Arc<Module>,
}

/// The JIT options `CompileOptions` asks for, as (option, value) pairs.
pub fn jit_options(compile_options: &str) -> Vec<(sys::CUjit_option, usize)> {
    // The metadata renders a YAML sequence as `["-O3", "-g"]`; a scalar is
    // a plain string of space-separated options.
    let words: Vec<String> = compile_options
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split([',', ' '])
        .map(|w| w.trim().trim_matches('"').to_string())
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let flag = w.trim_start_matches('-');
        if let Some(level) = flag.strip_prefix('O').and_then(|l| l.parse::<usize>().ok()) {
            out.push((sys::CU_JIT_OPTIMIZATION_LEVEL, level.min(4)));
        } else if flag == "g" || flag == "G" || flag == "device-debug" {
            out.push((sys::CU_JIT_GENERATE_DEBUG_INFO, 1));
        } else if flag == "lineinfo" || flag == "generate-line-info" {
            out.push((sys::CU_JIT_GENERATE_LINE_INFO, 1));
        } else if flag == "v" || flag == "verbose" {
            out.push((sys::CU_JIT_LOG_VERBOSE, 1));
        } else if let Some(rest) = flag.strip_prefix("maxrregcount") {
            let value = match rest.strip_prefix('=') {
                Some(v) => v.parse().ok(),
                None if rest.is_empty() => {
                    i += 1;
                    words.get(i).and_then(|v| v.parse().ok())
                }
                None => None,
            };
            match value {
                Some(n) => out.push((sys::CU_JIT_MAX_REGISTERS, n)),
                None => tracing::debug!(option = w, "CUDA JIT: -maxrregcount without a number"),
            }
        } else {
            tracing::debug!(option = w, "CUDA JIT: compile option ignored");
        }
        i += 1;
    }
    out
}

const LOG_SIZE: usize = 16 * 1024;

/// Load `image` (already checked to run on this device) into a module.
pub fn load(gpu: &Arc<Gpu>, image: &DeviceImage<'_>) -> Result<CudaProgram> {
    let kind = cuda::detect(image.bytes);
    let _s = tracing::debug_span!("cuda_load", device = gpu.ordinal, kind = ?kind, size = image.bytes.len())
        .entered();
    // The driver reads PTX as a NUL-terminated string and binary images
    // from an 8-byte-aligned buffer: copy into one that is both.
    let mut words = vec![0u64; image.bytes.len() / 8 + 1];
    // SAFETY: `words` has at least `bytes.len() + 1` bytes; u64 has no
    // invalid bit patterns and the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            image.bytes.as_ptr(),
            words.as_mut_ptr().cast::<u8>(),
            image.bytes.len(),
        );
    }
    let mut options = Vec::new();
    let mut values: Vec<*mut c_void> = Vec::new();
    if kind == Some(Kind::Ptx) {
        if let Some(opts) = image.metadata.get(COMPILE_OPTIONS) {
            for (o, v) in jit_options(opts) {
                options.push(o);
                values.push(v as *mut c_void);
            }
        }
    }
    let mut error_log = vec![0u8; LOG_SIZE];
    let mut info_log = vec![0u8; LOG_SIZE];
    options.extend([
        sys::CU_JIT_ERROR_LOG_BUFFER,
        sys::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        sys::CU_JIT_INFO_LOG_BUFFER,
        sys::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ]);
    values.extend([
        error_log.as_mut_ptr().cast(),
        LOG_SIZE as *mut c_void,
        info_log.as_mut_ptr().cast(),
        LOG_SIZE as *mut c_void,
    ]);
    let mut module: sys::CUmodule = std::ptr::null_mut();
    let r = gpu.call_raw(|d| {
        // SAFETY: `words` holds the image (NUL-terminated), `options` and
        // `values` have the same length, the log buffers have the sizes
        // the options declare and outlive the call.
        unsafe {
            (d.cuModuleLoadDataEx)(
                &mut module,
                words.as_ptr().cast(),
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        }
    })?;
    let log = |buf: &[u8]| {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim().to_string()
    };
    let info = log(&info_log);
    if !info.is_empty() {
        tracing::debug!(device = gpu.ordinal, "CUDA JIT: {info}");
    }
    if r != sys::CUDA_SUCCESS {
        let mut e = crate::driver::error(
            &gpu.driver,
            r,
            format_args!(
                "{}: cuModuleLoadDataEx ({})",
                gpu.label,
                kind.map(|k| k.to_string()).unwrap_or_default()
            ),
        );
        let err = log(&error_log);
        let missing = unresolved_symbols(&err);
        if !missing.is_empty() {
            e = Error::new(
                e.code(),
                format!(
                    "the image references {}, which it does not define: it was built against a device runtime that provides {}, and that runtime is not linked into it (an OpenMP image needs the device runtime it was compiled for)",
                    missing.iter().map(|m| format!("'{m}'")).collect::<Vec<_>>().join(", "),
                    if missing.len() == 1 { "it" } else { "them" },
                ),
            )
            .context(format_args!("{}", e.message()));
        }
        if !err.is_empty() {
            e = Error::new(e.code(), format!("{}; JIT log: {err}", e.message()));
        }
        return Err(e);
    }
    // Unloaded again if what follows fails.
    let module = Arc::new(Module {
        gpu: gpu.clone(),
        handle: module as usize,
    });
    let what = format!(
        "{}: the image ({})",
        gpu.label,
        kind.map(|k| k.to_string()).unwrap_or_default()
    );
    crate::openmp::write_device_environment(gpu, module.raw(), &what)?;
    Ok(CudaProgram { module })
}

/// The symbols a JIT log says are missing: ptxas reports each as
/// `Unresolved extern function 'NAME'` (or `variable`).
pub fn unresolved_symbols(log: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for marker in [
        "Unresolved extern function '",
        "Unresolved extern variable '",
    ] {
        for (at, _) in log.match_indices(marker) {
            let rest = &log[at + marker.len()..];
            if let Some(end) = rest.find('\'') {
                let name = rest[..end].to_string();
                if !name.is_empty() && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(name)
        .map_err(|_| Error::invalid_argument(format!("symbol name {name:?} contains a NUL byte")))
}

impl plugin::Program for CudaProgram {
    fn kernel(&self, name: &str) -> Result<Arc<dyn plugin::Kernel>> {
        let cname = c_name(name)?;
        let gpu = &self.module.gpu;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        let module = self.module.raw();
        // SAFETY: a loaded module and a NUL-terminated name.
        gpu.call("cuModuleGetFunction", |d| unsafe {
            (d.cuModuleGetFunction)(&mut f, module, cname.as_ptr())
        })
        .map_err(|e| match e.code() {
            ErrorCode::NotFound => {
                Error::not_found(format!("kernel '{name}' not found in the image"))
            }
            _ => e,
        })?;
        Ok(Arc::new(CudaKernel::new(self.module.clone(), name, f)?))
    }

    fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        let cname = c_name(name)?;
        let gpu = &self.module.gpu;
        let mut p: sys::CUdeviceptr = 0;
        let mut size = 0usize;
        let module = self.module.raw();
        // SAFETY: a loaded module and a NUL-terminated name.
        gpu.call("cuModuleGetGlobal", |d| unsafe {
            (d.cuModuleGetGlobal)(&mut p, &mut size, module, cname.as_ptr())
        })
        .map_err(|e| match e.code() {
            ErrorCode::NotFound => {
                Error::not_found(format!("global '{name}' not found in the image"))
            }
            _ => e,
        })?;
        Ok((DevicePtr(p), size as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unresolved_symbols_come_from_the_jit_log() {
        let log = "ptxas fatal   : Unresolved extern function '__kmpc_parallel_60'\nptxas fatal   : Unresolved extern variable 'x'\nUnresolved extern function '__kmpc_parallel_60'";
        assert_eq!(unresolved_symbols(log), vec!["__kmpc_parallel_60", "x"]);
        assert!(unresolved_symbols("ptxas fatal : syntax error").is_empty());
        assert!(unresolved_symbols("Unresolved extern function 'unterminated").is_empty());
    }

    #[test]
    fn compile_options_become_jit_options() {
        let o = jit_options(r#"["-O2", "-lineinfo", "--maxrregcount", "64", "-g", "-ffast-math"]"#);
        assert_eq!(
            o,
            vec![
                (sys::CU_JIT_OPTIMIZATION_LEVEL, 2),
                (sys::CU_JIT_GENERATE_LINE_INFO, 1),
                (sys::CU_JIT_MAX_REGISTERS, 64),
                (sys::CU_JIT_GENERATE_DEBUG_INFO, 1),
            ]
        );
        assert_eq!(jit_options("-O9 -maxrregcount=32"), vec![(7, 4), (0, 32)]);
        assert!(jit_options("").is_empty());
    }
}
