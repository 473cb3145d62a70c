//! Programs: a code object loaded into an HSA executable for one GPU, with
//! its metadata note (the kernels' hidden arguments and segment sizes).

use std::ffi::{c_void, CString};
use std::sync::Arc;

use offload_core::plugin::{self, DevicePtr};
use offload_core::{Error, ErrorCode, Result};
use offload_image::amdgpu::{self, CodeObjectMetadata};

use crate::gpu::Gpu;
use crate::kernel::AmdgpuKernel;
use crate::sys::{self, hsa_code_object_reader_t, hsa_executable_symbol_t, hsa_executable_t};

/// What [`plugin::Program`] hands out: the loaded executable, shared
/// with its kernels (which keep it loaded).
pub struct Program {
    pub(crate) loaded: Arc<Loaded>,
}

pub struct Loaded {
    pub(crate) gpu: Arc<Gpu>,
    executable: hsa_executable_t,
    /// The code object's bytes: ROCr keeps their address for debuggers
    /// and profilers as long as the executable lives.
    _image: Box<[u8]>,
    pub(crate) metadata: CodeObjectMetadata,
}

/// Loads `bytes` (an `amdgcn-amd-amdhsa` code object this GPU runs, as
/// the device checked) and writes the OpenMP device environment when it
/// has one.
pub fn load(gpu: &Arc<Gpu>, bytes: &[u8]) -> Result<Program> {
    let metadata = amdgpu::code_object_metadata(bytes)
        .map_err(|e| Error::invalid_binary(format!("{}: {e}", gpu.label)))?
        .unwrap_or_default();
    let image: Box<[u8]> = bytes.into();
    let executable = load_executable(gpu, &image)?;
    let loaded = Arc::new(Loaded {
        gpu: gpu.clone(),
        executable,
        _image: image,
        metadata,
    });
    crate::openmp::write_device_environment(&loaded)?;
    Ok(Program { loaded })
}

fn load_executable(gpu: &Gpu, bytes: &[u8]) -> Result<hsa_executable_t> {
    let api = &gpu.rt.api;
    let mut reader = hsa_code_object_reader_t::default();
    // SAFETY: `bytes` outlives the reader, destroyed below.
    let r = unsafe {
        (api.hsa_code_object_reader_create_from_memory)(
            bytes.as_ptr().cast(),
            bytes.len(),
            &mut reader,
        )
    };
    gpu.rt
        .check(r, format_args!("{}: reading the code object", gpu.label))?;
    let mut executable = hsa_executable_t::default();
    // SAFETY: writes one handle; no options.
    let r = unsafe {
        (api.hsa_executable_create_alt)(
            sys::HSA_PROFILE_FULL,
            sys::HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
            c"".as_ptr(),
            &mut executable,
        )
    };
    let loaded = gpu
        .rt
        .check(r, format_args!("{}: hsa_executable_create_alt", gpu.label))
        .and_then(|()| {
            let mut code_object = sys::hsa_loaded_code_object_t::default();
            // SAFETY: a live executable and reader; no options.
            let r = unsafe {
                (api.hsa_executable_load_agent_code_object)(
                    executable,
                    gpu.agent,
                    reader,
                    c"".as_ptr(),
                    &mut code_object,
                )
            };
            gpu.rt
                .check(r, format_args!("{}: loading the code object", gpu.label))?;
            // SAFETY: a live executable; no options.
            let r = unsafe { (api.hsa_executable_freeze)(executable, c"".as_ptr()) };
            gpu.rt
                .check(r, format_args!("{}: hsa_executable_freeze", gpu.label))
        });
    // SAFETY: the reader is not needed once the executable is loaded.
    unsafe { (api.hsa_code_object_reader_destroy)(reader) };
    if let Err(e) = loaded {
        if executable.handle != 0 {
            // SAFETY: the executable made above, used by nobody.
            unsafe { (api.hsa_executable_destroy)(executable) };
        }
        return Err(e);
    }
    Ok(executable)
}

impl Loaded {
    /// The symbol `name` of this program on its GPU, `None` when absent.
    pub(crate) fn symbol(&self, name: &str) -> Result<Option<hsa_executable_symbol_t>> {
        let Ok(c_name) = CString::new(name) else {
            return Ok(None);
        };
        let mut symbol = hsa_executable_symbol_t::default();
        // SAFETY: a live executable, a NUL-terminated name, our agent.
        let r = unsafe {
            (self.gpu.rt.api.hsa_executable_get_symbol_by_name)(
                self.executable,
                c_name.as_ptr(),
                &self.gpu.agent,
                &mut symbol,
            )
        };
        if r == sys::HSA_STATUS_ERROR_INVALID_SYMBOL_NAME {
            return Ok(None);
        }
        self.gpu
            .rt
            .check(r, format_args!("{}: looking up '{name}'", self.gpu.label))?;
        Ok(Some(symbol))
    }

    /// One fixed-size attribute of a symbol.
    pub(crate) fn symbol_info<T: Copy + Default>(
        &self,
        symbol: hsa_executable_symbol_t,
        attribute: u32,
        name: &str,
    ) -> Result<T> {
        let mut v = T::default();
        // SAFETY: the attribute's value is a `T` (see sys.rs).
        let r = unsafe {
            (self.gpu.rt.api.hsa_executable_symbol_get_info)(
                symbol,
                attribute,
                (&mut v as *mut T).cast::<c_void>(),
            )
        };
        self.gpu
            .rt
            .check(r, format_args!("{}: symbol '{name}'", self.gpu.label))?;
        Ok(v)
    }

    /// A variable's device address and size; `None` when absent.
    pub(crate) fn variable(&self, name: &str) -> Result<Option<(DevicePtr, u64)>> {
        let Some(symbol) = self.symbol(name)? else {
            return Ok(None);
        };
        let kind: u32 = self.symbol_info(symbol, sys::HSA_EXECUTABLE_SYMBOL_INFO_TYPE, name)?;
        if kind != 0 {
            return Err(Error::new(
                ErrorCode::SymbolKind,
                format!("{}: '{name}' is not a variable", self.gpu.label),
            ));
        }
        let address: u64 = self.symbol_info(
            symbol,
            sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
            name,
        )?;
        let size: u32 =
            self.symbol_info(symbol, sys::HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, name)?;
        Ok(Some((DevicePtr(address), u64::from(size))))
    }
}

impl plugin::Program for Program {
    fn kernel(&self, name: &str) -> Result<Arc<dyn plugin::Kernel>> {
        Ok(Arc::new(AmdgpuKernel::new(&self.loaded, name)?))
    }

    fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        let loaded = &self.loaded;
        loaded.variable(name)?.ok_or_else(|| {
            Error::not_found(format!(
                "{}: the program has no global '{name}'",
                loaded.gpu.label
            ))
        })
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: kernels keep the program (and so the executable) alive
        // while they may be launched.
        unsafe { (self.gpu.rt.api.hsa_executable_destroy)(self.executable) };
    }
}
