//! Host "device" memory: process memory from malloc.

use offload_core::plugin::{AllocKind, DevicePtr};
use offload_core::{Error, Result};

/// Alignment of every host allocation (enough for AVX-512 vectors).
const ALIGN: usize = 64;

/// `size` bytes aligned to [`ALIGN`]: one `malloc` of `size + ALIGN`, the
/// block's own address kept in the word before the aligned pointer.
///
/// Not `posix_memalign`: glibc serves an aligned request by splitting a
/// larger chunk and freeing the unaligned head, and those small heads fill
/// the fast bins, so every later free of a large block (>= 64 KiB) pays a
/// `malloc_consolidate` (a quarter of an `omp_target_alloc`/`free` pair of
/// 1 MiB).
pub fn alloc(size: usize, _kind: AllocKind) -> Result<DevicePtr> {
    let failed = || Error::out_of_resources(format!("host allocation of {size} bytes failed"));
    let total = size.max(1).checked_add(ALIGN).ok_or_else(failed)?;
    // SAFETY: plain allocation call.
    let block = unsafe { libc::malloc(total) } as usize;
    if block == 0 {
        return Err(failed());
    }
    // malloc returns 16-byte aligned blocks, so the aligned pointer lies
    // 16 to 64 bytes in: room for the header word, and `size` bytes fit.
    let aligned = (block + ALIGN) & !(ALIGN - 1);
    // SAFETY: `aligned - 8` lies inside the block (see above) and is
    // 8-byte aligned.
    unsafe { *((aligned - 8) as *mut usize) = block };
    Ok(DevicePtr(aligned as u64))
}

pub fn free(ptr: DevicePtr) {
    if fixed::free(ptr) {
        return;
    }
    // SAFETY: the core only frees pointers this plugin's `alloc` returned,
    // once (offload_core::plugin, "What the core validates"); they carry
    // their block's address in the word before them.
    unsafe {
        let block = *((ptr.0 as usize - 8) as *const usize);
        libc::free(block as *mut libc::c_void)
    }
}

/// Memory at a caller-chosen address (`offload replay` keeping recorded
/// addresses): whole pages mapped with `MAP_FIXED_NOREPLACE`, so nothing
/// already in the process is ever replaced; pages shared by several such
/// ranges are counted and unmapped with the last.
pub mod fixed {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use offload_core::plugin::DevicePtr;
    use offload_core::{Error, ErrorCode, Result};

    struct Pages {
        /// Page address -> ranges using it.
        users: HashMap<u64, usize>,
        /// Range base -> size.
        ranges: HashMap<u64, usize>,
    }

    /// How many ranges `alloc` placed and `free` has not released.
    static PLACED: AtomicUsize = AtomicUsize::new(0);

    fn pages() -> &'static Mutex<Pages> {
        static P: std::sync::OnceLock<Mutex<Pages>> = std::sync::OnceLock::new();
        P.get_or_init(|| {
            Mutex::new(Pages {
                users: HashMap::new(),
                ranges: HashMap::new(),
            })
        })
    }

    fn page_size() -> u64 {
        // SAFETY: sysconf has no preconditions.
        (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as u64
    }

    fn span(base: u64, size: usize) -> impl Iterator<Item = u64> {
        let page = page_size();
        let first = base / page * page;
        let end = base.saturating_add(size.max(1) as u64);
        (first..end).step_by(page as usize)
    }

    /// Make `[base, base + size)` usable at exactly that address.
    pub fn alloc(base: DevicePtr, size: usize) -> Result<()> {
        let mut p = pages().lock().unwrap_or_else(|e| e.into_inner());
        if p.ranges.contains_key(&base.0) {
            return Err(Error::invalid_argument(format!("{base} is already placed")));
        }
        let page = page_size();
        let mut mapped = Vec::new();
        for addr in span(base.0, size) {
            if p.users.contains_key(&addr) {
                continue;
            }
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing
            // mapping; the kernel refuses instead.
            let got = unsafe {
                libc::mmap(
                    addr as *mut libc::c_void,
                    page as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if got == libc::MAP_FAILED || got as u64 != addr {
                if got != libc::MAP_FAILED {
                    // SAFETY: an older kernel placed it elsewhere: undo.
                    unsafe { libc::munmap(got, page as usize) };
                }
                for a in mapped {
                    // SAFETY: pages this call mapped, unused by anyone.
                    unsafe { libc::munmap(a as *mut libc::c_void, page as usize) };
                }
                return Err(Error::new(
                    ErrorCode::OutOfResources,
                    format!("the address range at {base} (+{size}) is not free in this process"),
                ));
            }
            mapped.push(addr);
        }
        for addr in span(base.0, size) {
            *p.users.entry(addr).or_insert(0) += 1;
        }
        p.ranges.insert(base.0, size);
        PLACED.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Release a range of [`alloc`]; false when `ptr` is not one.
    pub fn free(ptr: DevicePtr) -> bool {
        // Every free of the host plugin asks: with no placed range (all
        // but `offload replay`), no lock and no lookup.
        if PLACED.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut p = pages().lock().unwrap_or_else(|e| e.into_inner());
        let Some(size) = p.ranges.remove(&ptr.0) else {
            return false;
        };
        PLACED.fetch_sub(1, Ordering::AcqRel);
        let page = page_size() as usize;
        for addr in span(ptr.0, size) {
            let last = match p.users.get_mut(&addr) {
                Some(n) => {
                    *n -= 1;
                    *n == 0
                }
                None => false,
            };
            if last {
                p.users.remove(&addr);
                // SAFETY: a page mapped by `alloc` that no range uses now.
                unsafe { libc::munmap(addr as *mut libc::c_void, page) };
            }
        }
        true
    }
}

/// # Safety
/// Both ranges valid for `size` bytes. They may overlap (memmove).
pub unsafe fn copy(dst: *mut u8, src: *const u8, size: usize) {
    // SAFETY: the caller's guarantee above.
    unsafe { std::ptr::copy(src, dst, size) };
}

/// # Safety
/// `dst` valid for `size` bytes, not overlapping `pattern`; `size` a
/// multiple of `pattern.len()`.
pub unsafe fn fill(dst: *mut u8, pattern: &[u8], size: usize) {
    // SAFETY: the caller's guarantee above is host_fill's.
    unsafe { offload_core::transfer::host_fill(dst, pattern, size) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A free hole of `len` bytes in this process's address space.
    fn hole(len: usize) -> u64 {
        // SAFETY: map and unmap an anonymous region of our own.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap(p, len);
            p as u64
        }
    }

    #[test]
    fn fixed_ranges_share_pages_and_never_replace_mappings() {
        let base = hole(1 << 20);
        let a = DevicePtr(base + 100);
        let b = DevicePtr(base + 3000); // same first page as `a`
        fixed::alloc(a, 5000).unwrap();
        fixed::alloc(b, 64).unwrap();
        // SAFETY: both ranges are mapped now.
        unsafe {
            std::ptr::write_bytes(a.as_ptr::<u8>(), 7, 5000);
            assert_eq!(*(b.as_ptr() as *const u8), 7);
        }
        assert!(fixed::alloc(a, 8).is_err(), "placed twice");
        assert!(fixed::free(a));
        // The shared page stays for `b`.
        // SAFETY: `b` is still mapped (only `a` was freed).
        unsafe { assert_eq!(*(b.as_ptr() as *const u8), 7) };
        assert!(fixed::free(b));
        assert!(!fixed::free(b), "freed twice");
        // Memory the process already uses is never taken.
        let taken = vec![0u8; 1 << 16];
        assert!(fixed::alloc(DevicePtr(taken.as_ptr() as u64), 16).is_err());
    }
}
