//! Reading clang's binary descriptors: the host entry table and the
//! device images (with the OffloadBinary around them).

use std::ffi::{c_void, CStr};

use offload_image::DeviceImage;

use crate::abi::*;

/// A host entry as read from the table.
#[derive(Clone)]
pub struct HostEntry {
    pub addr: u64,
    /// The symbol-name C string (static in the registering module).
    pub name_ptr: usize,
    pub name: String,
    pub size: u64,
    pub flags: u32,
    pub data: u64,
    pub kind: u16,
}

/// Read the entry table `[begin, end)` (new or legacy layout).
///
/// # Safety
/// `[begin, end)` is null/empty or a readable entry table (whole entries of
/// one layout) whose symbol names are null or NUL-terminated C strings.
pub unsafe fn read_entries(begin: *const u8, end: *const u8) -> Vec<HostEntry> {
    let mut out = Vec::new();
    if begin.is_null() || end <= begin {
        return out;
    }
    let bytes = end as usize - begin as usize;
    let cstr = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: the caller guarantees non-null names are C strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: the table is non-empty (checked above) and readable (caller);
    // every layout starts with an 8-byte word.
    let first = unsafe { std::ptr::read_unaligned(begin as *const u64) };
    if first == 0 {
        let n = bytes / std::mem::size_of::<EntryTy>();
        let p = begin as *const EntryTy;
        for i in 0..n {
            // SAFETY: `i < n` whole entries lie in the caller's readable table.
            let e = unsafe { std::ptr::read_unaligned(p.add(i)) };
            out.push(HostEntry {
                addr: e.address as u64,
                name_ptr: e.symbol_name as usize,
                name: cstr(e.symbol_name),
                size: e.size,
                flags: e.flags,
                data: e.data,
                kind: e.kind,
            });
        }
    } else {
        let n = bytes / std::mem::size_of::<LegacyEntryTy>();
        let p = begin as *const LegacyEntryTy;
        for i in 0..n {
            // SAFETY: as above, for the legacy layout.
            let e = unsafe { std::ptr::read_unaligned(p.add(i)) };
            out.push(HostEntry {
                addr: e.address as u64,
                name_ptr: e.name as usize,
                name: cstr(e.name),
                size: e.size,
                flags: e.flags as u32,
                data: e.data as u32 as u64,
                kind: 1,
            });
        }
    }
    out
}

/// Turn one `__tgt_device_image` into DeviceImages, using the enclosing
/// OffloadBinary (found by walking back from `image_start`) for the triple.
///
/// # Safety
/// `[image_start, image_end)` is null/empty or readable memory that stays
/// valid and unchanged for the life of the process (an image in the
/// program's read-only data).
pub unsafe fn read_image(img: &DeviceImageTy) -> Vec<DeviceImage<'static>> {
    let start = img.image_start;
    let end = img.image_end;
    if start.is_null() || end <= start {
        return vec![];
    }
    // SAFETY: the caller guarantees the non-empty range is readable for
    // the life of the process.
    let raw: &'static [u8] =
        unsafe { std::slice::from_raw_parts(start, end as usize - start as usize) };
    // Walk back (8-byte steps, up to 4 KiB) looking for the OffloadBinary magic.
    let mut k = 8usize;
    while k <= 4096 {
        let hdr = start.wrapping_sub(k);
        // Only read what is in a mapped region: the header must lie in the
        // same section; check magic then image_offset of the entry.
        if (hdr as usize).is_multiple_of(8) && readable(hdr, 32) {
            // SAFETY: `[hdr, hdr + 32)` is mapped (checked just now).
            let (magic, size, entry_off) = unsafe {
                (
                    std::slice::from_raw_parts(hdr, 4),
                    std::ptr::read_unaligned(hdr.add(8) as *const u64) as usize,
                    std::ptr::read_unaligned(hdr.add(16) as *const u64) as usize,
                )
            };
            if magic == [0x10, 0xFF, 0x10, 0xAD]
                && size >= k
                && entry_off + 40 <= size
                && readable(hdr, size)
            {
                // SAFETY: `entry_off + 40 <= size` and `[hdr, hdr + size)`
                // is mapped (checked just now).
                let img_off = unsafe {
                    std::ptr::read_unaligned(hdr.add(entry_off + 24) as *const u64) as usize
                };
                if img_off == k {
                    // SAFETY: mapped (checked above) and, as the
                    // OffloadBinary around the caller's image, in the same
                    // never-unmapped section as the image.
                    let whole: &'static [u8] = unsafe { std::slice::from_raw_parts(hdr, size) };
                    match offload_image::unwrap(whole) {
                        Ok(imgs) if !imgs.is_empty() => return imgs,
                        _ => break,
                    }
                }
            }
        }
        k += 8;
    }
    offload_image::unwrap(raw).unwrap_or_default()
}

/// Whether `[p, p+len)` is mapped memory (mincore-free check via the
/// `/proc/self/maps`-less trick: msync on page boundaries).
fn readable(p: *const u8, len: usize) -> bool {
    let page = 4096usize;
    let a = (p as usize) & !(page - 1);
    let e = (p as usize + len + page - 1) & !(page - 1);
    // SAFETY: msync only validates the mapping; MS_ASYNC on private
    // read-only mappings is a no-op.
    unsafe { libc::msync(a as *mut c_void, e - a, libc::MS_ASYNC) == 0 }
}
