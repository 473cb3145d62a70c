//! Loading device images into this process.
//!
//! The image is an x86_64 ELF shared object. It is written to an anonymous
//! memory file (`memfd_create`) and opened with `dlopen("/proc/self/fd/N")`,
//! so nothing is left on disk (LLVM's host plugin leaves a `/tmp/tmpfile_*`
//! behind per image). Where memfd is unavailable a temporary file is used
//! and unlinked right after `dlopen`.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use offload_core::plugin::{self, DevicePtr};
use offload_core::{Error, Result};
use offload_image::elf::{self, SymbolKind};

use crate::kernel::HostKernel;

/// A dlopened image; dlclosed when the last program or kernel drops it.
pub struct LoadedImage {
    library: Library,
    /// The memfd the library was opened from. Kept open while loaded so
    /// that no other image gets the same `/proc/self/fd/N` name, which the
    /// dynamic loader would take for an already loaded library. Declared
    /// after `library` so it closes after `dlclose`.
    _memfd: Option<OwnedFd>,
    /// Sizes of the data symbols the image defines (dlsym gives no size).
    object_sizes: HashMap<String, u64>,
}

impl LoadedImage {
    /// Load `bytes` (an ELF shared object for this machine).
    pub fn load(bytes: &[u8], label: &str) -> Result<LoadedImage> {
        let info = elf::info(bytes).map_err(|e| Error::invalid_binary(format!("{label}: {e}")))?;
        if info.elf_type != elf::ElfType::SharedObject {
            return Err(Error::invalid_binary(format!(
                "{label}: ELF image is {:?}, but the host plugin needs a shared object (link with -shared)",
                info.elf_type
            )));
        }
        let object_sizes = elf::defined_symbols(bytes)
            .map_err(|e| Error::invalid_binary(format!("{label}: {e}")))?
            .into_iter()
            .filter(|s| s.kind == SymbolKind::Object)
            .map(|s| (s.name, s.size))
            .collect();
        let (library, memfd) = open_from_memory(bytes, label)?;
        Ok(LoadedImage {
            library,
            _memfd: memfd,
            object_sizes,
        })
    }

    fn symbol(&self, name: &str) -> Option<*const c_void> {
        let cname = CString::new(name).ok()?;
        // SAFETY: looking up an address; nothing is called here.
        let sym = unsafe { self.library.get::<*const c_void>(cname.as_bytes_with_nul()) }.ok()?;
        let addr = sym.into_raw() as *const c_void;
        (!addr.is_null()).then_some(addr)
    }
}

fn open_from_memory(bytes: &[u8], label: &str) -> Result<(Library, Option<OwnedFd>)> {
    let io_err = |what: &str, e: std::io::Error| Error::host_io(format!("{label}: {what}: {e}"));
    // SAFETY: plain syscall with a static NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"offload-image".as_ptr(), libc::MFD_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: `fd` is a fresh descriptor we own.
        let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.write_all(bytes)
            .map_err(|e| io_err("writing the image to a memfd", e))?;
        let path = format!("/proc/self/fd/{fd}");
        let lib = dlopen(&path, label)?;
        return Ok((lib, Some(OwnedFd::from(file))));
    }
    // No memfd: a temporary file, removed as soon as it is mapped.
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "offload-image-{}-{}.so",
        std::process::id(),
        unique()
    ));
    std::fs::write(&path, bytes).map_err(|e| io_err("writing the image to a temporary file", e))?;
    let lib = dlopen(path.to_str().unwrap_or_default(), label);
    let _ = std::fs::remove_file(&path);
    Ok((lib?, None))
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn dlopen(path: &str, label: &str) -> Result<Library> {
    // SAFETY: running the image's initialisers is what loading it means.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| Error::invalid_binary(format!("{label}: cannot load image: {e}")))
}

/// A program: one loaded image.
pub struct HostProgram {
    pub(crate) image: Arc<LoadedImage>,
}

impl plugin::Program for HostProgram {
    fn kernel(&self, name: &str) -> Result<Arc<dyn plugin::Kernel>> {
        let entry = self
            .image
            .symbol(name)
            .ok_or_else(|| Error::not_found(format!("kernel '{name}' not found in the image")))?;
        if self.image.object_sizes.contains_key(name) {
            return Err(Error::new(
                offload_core::ErrorCode::SymbolKind,
                format!("'{name}' is a global variable, not a kernel"),
            ));
        }
        Ok(Arc::new(HostKernel {
            name: name.to_string(),
            entry,
            _program: self.image.clone(),
        }))
    }

    fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        let addr = self
            .image
            .symbol(name)
            .ok_or_else(|| Error::not_found(format!("global '{name}' not found in the image")))?;
        let size = *self.image.object_sizes.get(name).ok_or_else(|| {
            Error::new(
                offload_core::ErrorCode::SymbolKind,
                format!("'{name}' is a function, not a global variable"),
            )
        })?;
        Ok((DevicePtr(addr as u64), size))
    }
}
