//! The handle a `declare mapper` function fills through
//! `__tgt_push_mapper_component` and reads back through
//! `__tgt_mapper_num_components`.
//!
//! Its layout is LLVM 22's `MapperComponentsTy`: an
//! `llvm::SmallVector<MapComponentInfoTy>` with one inline element, i.e. a
//! header of (begin pointer, `u32` length, `u32` capacity) followed by the
//! inline slot. Generated code treats the handle as opaque, but programs
//! also call the two entry points with handles they made themselves (LLVM's
//! own tests pass a zero-initialised `std::vector`): LLVM's runtime then
//! grows the storage with `malloc`/`realloc` through the header, and so do
//! we, touching nothing past the header unless `begin` names the inline
//! slot. A handle whose `begin` is null or heap memory is grown with
//! `realloc`, so a zeroed caller's struct works and its heap block can be
//! released with `free` (what `operator delete` does).

use std::ffi::c_void;
use std::mem::MaybeUninit;

/// One entry pushed by a mapper function: the layout of LLVM 22's
/// `MapComponentInfoTy` (base, begin, size, type, name).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MapComponent {
    pub base: *mut c_void,
    pub begin: *mut c_void,
    pub size: i64,
    pub ty: i64,
    pub name: *mut c_void,
}

/// The part of the handle every caller's handle has: SmallVector's header.
#[repr(C)]
pub struct Header {
    begin: *mut MapComponent,
    len: u32,
    cap: u32,
}

/// A handle the runtime makes for one mapper call (LLVM's
/// `MapperComponentsTy`, inline slot included). It starts with no storage
/// (`begin` null), so it may move until the mapper runs; heap storage is
/// freed on drop.
#[repr(C)]
pub struct MapperComponents {
    header: Header,
    _inline: MaybeUninit<MapComponent>,
}

/// Why a push could not grow the storage (LLVM reports both and aborts).
#[derive(Debug, PartialEq, Eq)]
pub enum GrowError {
    /// The length is at `u32::MAX` already.
    AtMaximumCapacity,
    /// `malloc`/`realloc` failed.
    OutOfMemory,
}

impl std::fmt::Display for GrowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrowError::AtMaximumCapacity => write!(
                f,
                "mapper components unable to grow, already at maximum size {}",
                u32::MAX
            ),
            GrowError::OutOfMemory => write!(f, "allocation failed"),
        }
    }
}

impl MapperComponents {
    pub fn new() -> MapperComponents {
        MapperComponents {
            header: Header {
                begin: std::ptr::null_mut(),
                len: 0,
                cap: 0,
            },
            _inline: MaybeUninit::uninit(),
        }
    }

    /// The handle to pass to a mapper function.
    pub fn handle(&mut self) -> *mut c_void {
        self as *mut MapperComponents as *mut c_void
    }

    /// The components pushed so far.
    pub fn as_slice(&self) -> &[MapComponent] {
        if self.header.begin.is_null() {
            return &[];
        }
        // SAFETY: `begin` holds `len` initialised components, written by
        // `push` through this handle.
        unsafe { std::slice::from_raw_parts(self.header.begin, self.header.len as usize) }
    }
}

impl Default for MapperComponents {
    fn default() -> MapperComponents {
        MapperComponents::new()
    }
}

impl Drop for MapperComponents {
    fn drop(&mut self) {
        let h: *mut Header = &mut self.header;
        // SAFETY: `h` is this handle's header; heap storage came from
        // `malloc`/`realloc` in `grow`.
        unsafe { release(h) }
    }
}

/// The address of the inline slot of the handle whose header is `h`
/// (computed, never read unless `begin` equals it).
fn inline_slot(h: *mut Header) -> *mut MapComponent {
    h.wrapping_byte_add(std::mem::size_of::<Header>()) as *mut MapComponent
}

/// Number of components in the handle.
///
/// # Safety
/// `h` points to a readable header.
pub unsafe fn len(h: *const Header) -> u32 {
    // SAFETY: the caller's guarantee.
    unsafe { (*h).len }
}

/// Appends `c`, growing the storage as SmallVector does (capacity
/// `2 * cap + 1`).
///
/// # Safety
/// `h` points to a writable header whose `begin` is null, heap memory from
/// `malloc`, or the inline slot right after the header, holding `len` of
/// `cap` components.
pub unsafe fn push(h: *mut Header, c: MapComponent) -> Result<(), GrowError> {
    // SAFETY: the caller's guarantee: `h` is a readable header.
    if unsafe { (*h).len >= (*h).cap } {
        // SAFETY: the caller's guarantee, which `grow` needs too.
        unsafe { grow(h) }?;
    }
    // SAFETY: `h` is a writable header (the caller's guarantee) and, after
    // `grow`, `begin` has room for `len + 1` components.
    unsafe {
        let hd = &mut *h;
        hd.begin.add(hd.len as usize).write(c);
        hd.len += 1;
    }
    Ok(())
}

/// Moves the storage to a heap block of capacity `2 * cap + 1`.
///
/// # Safety
/// As for [`push`].
unsafe fn grow(h: *mut Header) -> Result<(), GrowError> {
    // SAFETY: the caller's guarantee: `h` is a writable header.
    let hd = unsafe { &mut *h };
    if hd.cap == u32::MAX {
        return Err(GrowError::AtMaximumCapacity);
    }
    let new_cap = hd.cap.saturating_mul(2).saturating_add(1).max(hd.len + 1);
    let bytes = new_cap as usize * std::mem::size_of::<MapComponent>();
    let new = if hd.begin == inline_slot(h) {
        // SAFETY: a fresh block; the old inline slot holds `len` elements.
        unsafe {
            let p = libc::malloc(bytes) as *mut MapComponent;
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(hd.begin, p, hd.len as usize);
            }
            p
        }
    } else {
        // SAFETY: `begin` is null or a block from `malloc`/`realloc`.
        unsafe { libc::realloc(hd.begin as *mut c_void, bytes) as *mut MapComponent }
    };
    if new.is_null() {
        return Err(GrowError::OutOfMemory);
    }
    hd.begin = new;
    hd.cap = new_cap;
    Ok(())
}

/// Frees heap storage of the handle whose header is `h`.
///
/// # Safety
/// As for [`push`]; the handle is not used afterwards.
unsafe fn release(h: *mut Header) {
    // SAFETY: the caller's guarantee: `h` is a readable header.
    let begin = unsafe { (*h).begin };
    if !begin.is_null() && begin != inline_slot(h) {
        // SAFETY: heap storage from `grow`.
        unsafe { libc::free(begin as *mut c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comp(i: i64) -> MapComponent {
        MapComponent {
            base: std::ptr::null_mut(),
            begin: i as usize as *mut c_void,
            size: i,
            ty: i,
            name: std::ptr::null_mut(),
        }
    }

    #[test]
    fn layout_is_llvm_smallvector() {
        assert_eq!(std::mem::size_of::<MapComponent>(), 40);
        assert_eq!(std::mem::size_of::<Header>(), 16);
        assert_eq!(std::mem::size_of::<MapperComponents>(), 56);
    }

    #[test]
    fn pushes_grow_and_keep_order() {
        let mut mc = MapperComponents::new();
        let h = mc.handle() as *mut Header;
        for i in 0..10 {
            // SAFETY: `h` is `mc`'s header.
            unsafe { push(h, comp(i)).unwrap() };
            // SAFETY: as above.
            assert_eq!(unsafe { len(h) }, i as u32 + 1);
        }
        let sizes: Vec<i64> = mc.as_slice().iter().map(|c| c.size).collect();
        assert_eq!(sizes, (0..10).collect::<Vec<_>>());
        // Capacities 1, 3, 7, 15 as SmallVector's.
        assert_eq!(mc.header.cap, 15);
    }

    #[test]
    fn inline_storage_is_copied_out() {
        let mut mc = MapperComponents::new();
        let h = mc.handle() as *mut Header;
        mc.header.begin = inline_slot(h);
        mc.header.cap = 1;
        // SAFETY: `h` is `mc`'s header; its inline slot is the storage.
        unsafe {
            push(h, comp(1)).unwrap();
            push(h, comp(2)).unwrap();
        }
        assert_ne!(mc.header.begin, inline_slot(h));
        let sizes: Vec<i64> = mc.as_slice().iter().map(|c| c.size).collect();
        assert_eq!(sizes, vec![1, 2]);
    }
}
