//! Loading device images into this process.
//!
//! The image is an x86_64 ELF shared object. It is written to an anonymous
//! memory file (`memfd_create`) and opened with `dlopen("/proc/self/fd/N")`,
//! so nothing is left on disk (LLVM's host plugin leaves a `/tmp/tmpfile_*`
//! behind per image). Where memfd is unavailable a temporary file is used
//! and unlinked right after `dlopen`.
//!
//! Before the dynamic loader sees an image, it is checked structurally by
//! [`offload_image::validate::x86_64_shared_object`]: `ld.so` trusts the
//! files it maps, and a corrupt one can make it assert (exiting the process)
//! or crash. A rejected image is an `InvalidBinary` error naming the bad
//! field; the process goes on.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CString};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use offload_core::plugin::{self, DevicePtr};
use offload_core::{Error, Result};
use offload_image::elf;

use crate::kernel::HostKernel;

/// A dlopened image; dlclosed when the last program or kernel drops it.
pub struct LoadedImage {
    /// `None` only while dropping.
    library: Option<Library>,
    /// The memfd the library was opened from. Kept open while loaded so
    /// that no other image gets the same `/proc/self/fd/N` name, which the
    /// dynamic loader would take for an already loaded library. Closed
    /// after `dlclose`, and never if the library stays loaded (see `Drop`).
    memfd: Option<OwnedFd>,
    /// Sizes of the data symbols the image defines (dlsym gives no size).
    object_sizes: HashMap<String, u64>,
    /// The functions and data objects the image itself defines and exports
    /// (its defined `.dynsym` entries). Only these are looked up: `dlsym`
    /// on the image's handle also searches its dependencies, and would
    /// hand out `system` or `dlopen` from libc as a "kernel".
    exported: HashSet<String>,
    /// Whether `dlclose` leaves the image loaded, when the validator could
    /// tell from the file (`None`: ask the loader after `dlclose`).
    stays_loaded: Option<bool>,
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
        #[cfg(target_arch = "x86_64")]
        let stays_loaded = offload_image::validate::x86_64_shared_object(bytes)
            .map_err(|e| Error::invalid_binary(format!("{label}: {e}")))?
            .stays_loaded;
        #[cfg(target_arch = "x86_64")]
        let stays_loaded = Some(stays_loaded);
        #[cfg(not(target_arch = "x86_64"))]
        let stays_loaded = None;
        let object_sizes =
            elf::object_sizes(bytes).map_err(|e| Error::invalid_binary(format!("{label}: {e}")))?;
        let exported = offload_image::entries::exported_symbols(bytes)
            .map_err(|e| Error::invalid_binary(format!("{label}: {e}")))?
            .into_iter()
            .map(|s| s.name)
            .collect();
        let (library, memfd) = open_from_memory(bytes, label)?;
        Ok(LoadedImage {
            library: Some(library),
            memfd,
            object_sizes,
            exported,
            stays_loaded,
        })
    }

    /// The address of `name`, a symbol the image itself defines; never one
    /// of its dependencies' (`system`, `dlopen`, `printf` are NotFound).
    fn symbol(&self, name: &str) -> Result<*const c_void> {
        if !self.exported.contains(name) {
            return Err(Error::not_found(format!(
                "'{name}' is not defined by the image"
            )));
        }
        let missing = || Error::not_found(format!("'{name}' not found in the loaded image"));
        let cname = CString::new(name).map_err(|_| missing())?;
        let library = self.library.as_ref().ok_or_else(missing)?;
        // SAFETY: looking up an address; nothing is called here. The name is
        // one the image defines, and the handle's lookup scope starts with
        // the image itself, so the address is the image's own definition.
        let sym = unsafe { library.get::<*const c_void>(cname.as_bytes_with_nul()) }
            .map_err(|_| missing())?;
        let addr = sym.into_raw() as *const c_void;
        if addr.is_null() {
            return Err(missing());
        }
        Ok(addr)
    }
}

impl LoadedImage {
    /// The value of the kernel declaration `<kernel><suffix>` (a `uint32_t`
    /// or `uint64_t` the image exports, see include/offload/host_kernel.h);
    /// 0 when the image does not define it.
    fn declared(&self, kernel: &str, suffix: &str) -> Result<u64> {
        let name = format!("{kernel}{suffix}");
        let Some(&size) = self.object_sizes.get(&name) else {
            return Ok(0);
        };
        let Ok(addr) = self.symbol(&name) else {
            return Ok(0);
        };
        match size {
            // SAFETY: `addr` is a data object of the image, `size` bytes long
            // (its symbol table says so); it is read as the declared width.
            4 => Ok(unsafe { std::ptr::read_unaligned(addr.cast::<u32>()) } as u64),
            // SAFETY: as above.
            8 => Ok(unsafe { std::ptr::read_unaligned(addr.cast::<u64>()) }),
            _ => Err(Error::invalid_binary(format!(
                "'{name}' is {size} bytes; a kernel declaration is a uint32_t or uint64_t \
                 (use the macros of offload/host_kernel.h)"
            ))),
        }
    }
}

impl Drop for LoadedImage {
    fn drop(&mut self) {
        if let Some(library) = self.library.take() {
            let _ = library.close();
        }
        let Some(fd) = self.memfd.as_ref() else {
            return;
        };
        // An image marked DF_1_NODELETE (or made so by unique symbols)
        // stays loaded after dlclose. Its name `/proc/self/fd/N` must then
        // never be reused, or the loader would hand out this image for the
        // next one opened through a new memfd with the same number: keep
        // the descriptor open for the life of the process. The validator
        // usually knows from the file; otherwise the loader is asked.
        match self.stays_loaded {
            Some(true) => {
                std::mem::forget(self.memfd.take());
                return;
            }
            Some(false) => return,
            None => {}
        }
        let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
        // SAFETY: a NUL-terminated path; RTLD_NOLOAD never loads anything.
        let handle =
            unsafe { libc::dlopen(path.as_ptr().cast(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if !handle.is_null() {
            // SAFETY: drops the reference RTLD_NOLOAD just took.
            unsafe { libc::dlclose(handle) };
            std::mem::forget(self.memfd.take());
        }
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
        let entry = self.image.symbol(name)?;
        if self.image.object_sizes.contains_key(name) {
            return Err(Error::new(
                offload_core::ErrorCode::SymbolKind,
                format!("'{name}' is a global variable, not a kernel"),
            ));
        }
        let uses_barrier = self.image.declared(name, "_offload_barrier")? != 0;
        let generated_group = self.image.declared(name, "_offload_group_generated")? != 0;
        let group_static_size = self.image.declared(name, "_offload_group_static_size")?;
        if group_static_size > crate::queue::MAX_GROUP_MEMORY {
            return Err(Error::out_of_resources(format!(
                "kernel '{name}' declares {group_static_size} bytes of static group memory; \
                 the host device offers {}",
                crate::queue::MAX_GROUP_MEMORY
            )));
        }
        // The group entry: for a plain kernel the loop over a group's items
        // that OFFLOAD_HOST_KERNEL exports; for a barrier kernel its form
        // as loops split at the barriers (OFFLOAD_HOST_KERNEL_GROUP), run
        // instead of the items as coroutines.
        let group_entry = self.image.symbol(&format!("{name}_offload_group")).ok();
        // The same over a run of groups (only with a group entry).
        let groups_entry =
            group_entry.and_then(|_| self.image.symbol(&format!("{name}_offload_groups")).ok());
        Ok(Arc::new(HostKernel {
            name: name.to_string(),
            entry,
            group_entry,
            groups_entry,
            _program: self.image.clone(),
            uses_barrier,
            generated_group,
            group_static_size,
        }))
    }

    fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        let addr = self.image.symbol(name)?;
        let size = *self.image.object_sizes.get(name).ok_or_else(|| {
            Error::new(
                offload_core::ErrorCode::SymbolKind,
                format!("'{name}' is a function, not a global variable"),
            )
        })?;
        Ok((DevicePtr(addr as u64), size))
    }
}
