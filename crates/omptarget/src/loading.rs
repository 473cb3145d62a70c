//! Loading registered binaries onto a device (lazily, at its first
//! construct) and unloading them at unregistration.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use offload_core::plugin::DevicePtr;
use offload_image::DeviceImage;

use crate::abi::*;
use crate::addr::{HostAddr, HostRange};
use crate::device::{DevState, Loaded};
use crate::kernels::KernelRef;
use crate::mapping::{Entry, INF};
use crate::msg;
use crate::requires::usm;
use crate::state::{state, Registered};
use offload_core::OffloadEntry;

impl DevState {
    /// Load every registered binary not yet loaded here (cheap when none is new).
    #[inline]
    pub fn ensure_loaded(&self) {
        let g = state().generation.load(Ordering::Acquire);
        if self.loaded_gen.load(Ordering::Acquire) == g {
            return;
        }
        self.load_pending(g);
    }

    #[cold]
    fn load_pending(&self, g: u64) {
        let mut ls = self.load_lock.lock().unwrap_or_else(|e| e.into_inner());
        let bins: Vec<Arc<Registered>> = state()
            .binaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for b in bins {
            if ls.loaded.iter().any(|(id, _)| *id == b.binary.id) {
                continue;
            }
            let (prog, kernels) = self.load_binary(&b);
            ls.loaded.push((b.binary.id, (prog, kernels)));
        }
        self.loaded_gen.store(g, Ordering::Release);
    }

    fn load_binary(&self, b: &Registered) -> Loaded {
        let Some(img) = self.choose_image(b) else {
            return (None, vec![]);
        };
        let prog = match self.dev.load_image(img) {
            Ok(p) => p,
            Err(e) => {
                msg::error(&format!("Failed to load image: {e}"));
                msg::die_like_the_device(&e);
                return (None, vec![]);
            }
        };
        let mut kernels = Vec::new();
        let mut kmap = HashMap::new();
        let usm = usm();
        for (e, name_ptr) in b.entries() {
            if e.producer != 1 || e.flags & ENTRY_REQUIRES != 0 {
                continue;
            }
            if e.flags & ENTRY_INDIRECT != 0 {
                self.load_indirect(&prog, e, name_ptr);
            } else if e.size == 0 {
                if e.host_addr == 0 {
                    continue;
                }
                match prog.kernel(&e.name) {
                    Ok(k) => {
                        kmap.insert(e.host_addr, KernelRef(Arc::as_ptr(&k)));
                        kernels.push(k);
                    }
                    Err(_) => msg::error(&format!("Failed to load kernel {}", e.name)),
                }
            } else {
                self.load_global(&prog, e, name_ptr, usm);
            }
        }
        self.kernels.update(|m| m.extend(kmap));
        (Some(prog), kernels)
    }

    /// The image of `b` this device runs best (None: none runs here).
    fn choose_image<'b>(&self, b: &'b Registered) -> Option<&'b DeviceImage<'static>> {
        let Some(img) = self.dev.best_image(&b.binary.images) else {
            tracing::debug!(
                device = self.id,
                images = b.binary.images.len(),
                "no image of the binary runs on this device"
            );
            return None;
        };
        // Which image this device took (LIBOMPTARGET_DEBUG; LLVM reports
        // image compatibility as debug output too).
        tracing::debug!(
            device = self.id,
            image = b.binary.images.iter().position(|i| std::ptr::eq(i, img)).unwrap_or(0),
            of = b.binary.images.len(),
            format = %img.format,
            triple = img.triple.as_deref().unwrap_or(""),
            arch = img.arch.as_deref().unwrap_or(""),
            "image chosen"
        );
        Some(img)
    }

    /// An indirect function entry: read its device address and map the
    /// host function's address to it (unless already mapped).
    fn load_indirect(&self, prog: &offload_core::Program, e: &OffloadEntry, name_ptr: usize) {
        let host = HostAddr(e.host_addr);
        if self.table(host, 1).lookup(host, 1).is_some() {
            return;
        }
        let Ok((dptr, _)) = prog.global(&e.name) else {
            return;
        };
        let mut fptr = 0u64;
        if msg::info_on(msg::INFO_DATA_TRANSFER) {
            // LLVM reads the device function address with an
            // ordinary transfer, so INFO shows it (the name is
            // the table's neighbour of the buffer, as for any
            // copy without a map entry).
            let hp = HostAddr::of(&fptr);
            let name = crate::report::lookup_name(self, hp, 8);
            msg::dev_info(
                self.id,
                &format!(
                    "Copying data from device to host, TgtPtr={dptr}, HstPtr={hp}, Size=8, Name={}",
                    msg::name_of(name)
                ),
            );
        }
        // SAFETY: the device symbol holds an 8-byte function address.
        let ok = unsafe {
            self.dev
                .copy_from_device(&mut fptr as *mut u64 as *mut u8, dptr, 8)
                .is_ok()
        };
        if ok {
            // The entry's size (a pointer's), as LLVM's table shows it.
            self.insert_permanent(host, e.size.max(1), DevicePtr(fptr), name_ptr);
        }
    }

    /// A declare-target global: map the host variable to the image's.
    fn load_global(
        &self,
        prog: &offload_core::Program,
        e: &OffloadEntry,
        name_ptr: usize,
        usm: bool,
    ) {
        match prog.global(&e.name) {
            Ok((dptr, _)) => {
                if usm && e.name.ends_with("_decl_tgt_ref_ptr") && e.flags & ENTRY_LINK == 0 {
                    // Copy the host ref pointer (host address of the variable).
                    // SAFETY: both sides are 8-byte pointer slots.
                    unsafe {
                        let _ = self.dev.copy_to_device(dptr, e.host_addr as *const u8, 8);
                    }
                }
                self.insert_permanent(HostAddr(e.host_addr), e.size, dptr, name_ptr);
            }
            Err(_) => {
                if msg::info_on(msg::INFO_EMPTY_MAPPING) {
                    msg::dev_info(
                        self.id,
                        &format!(
                            "variable {} does not have a valid device counterpart",
                            e.name
                        ),
                    );
                }
            }
        }
    }

    /// Map `[host, host + size)` to `tgt` for good (declare target
    /// globals, indirect functions); nothing when already mapped or when
    /// the range would wrap the address space.
    fn insert_permanent(&self, host: HostAddr, size: u64, tgt: DevicePtr, name: usize) {
        let Some(range) = HostRange::new(host, size) else {
            return;
        };
        let mut t = self.table(host, size);
        if t.lookup(host, size).is_some() {
            return;
        }
        let _ = t.insert(Entry {
            hst_base: host,
            host: range,
            tgt_alloc: tgt,
            tgt_begin: tgt,
            dyn_rc: INF,
            hold_rc: 0,
            name,
            owned: false,
            host_ptr: false,
            host_locked: false,
            shadows: Vec::new(),
        });
    }

    /// Drop what was loaded from binary `id` (unregistration).
    pub fn unload(&self, b: &Registered) {
        let mut ls = self.load_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = ls.loaded.iter().position(|(id, _)| *id == b.binary.id) else {
            return;
        };
        let (_, (prog, _kernels)) = ls.loaded.remove(pos);
        if prog.is_none() {
            return;
        }
        self.kernels.update(|km| {
            for e in &b.binary.entries {
                if e.size == 0 {
                    km.remove(&e.host_addr);
                }
            }
        });
        let mut t = self.table_all();
        for e in &b.binary.entries {
            if e.size > 0 || e.flags & ENTRY_INDIRECT != 0 {
                let host = HostAddr(e.host_addr);
                if let Some(en) = t.get(host) {
                    if en.dyn_rc == INF && !en.owned {
                        t.remove(host);
                    }
                }
            }
        }
        // Programs (and kernels) drop here, after the kernel map forgot them.
    }
}
