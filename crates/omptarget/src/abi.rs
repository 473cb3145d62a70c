//! `repr(C)` layouts of the structures clang-22 hands to libomptarget
//! (reference sections 2.1-2.7) and the map-type bits.

use std::ffi::{c_char, c_void};

/// `ident_t`: source location of a construct.
#[repr(C)]
pub struct Ident {
    pub reserved1: i32,
    pub flags: i32,
    pub reserved2: i32,
    pub reserved3: i32,
    pub psource: *const c_char,
}

/// The source location of a construct as the face passes it on: made from
/// clang's `ident_t *` at the C boundary by the unsafe
/// [`IdentRef::from_raw`], whose contract is the invariant [`Self::psource`]
/// relies on.
#[derive(Clone, Copy)]
pub struct IdentRef(*const Ident);

impl IdentRef {
    /// No location (the legacy entry points have none).
    pub const NONE: IdentRef = IdentRef(std::ptr::null());

    /// # Safety
    /// `p` is null or points to an `ident_t` that stays valid and unchanged
    /// for the rest of the program (clang's are static constants), whose
    /// `psource` is null or a NUL-terminated string.
    pub unsafe fn from_raw(p: *const Ident) -> IdentRef {
        IdentRef(p)
    }

    /// The `;file;function;line;column;;` string, if the location has one.
    pub fn psource(self) -> Option<&'static std::ffi::CStr> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer is a live, unchanging `ident_t`
        // (`from_raw`'s contract).
        let ps = unsafe { (*self.0).psource };
        // SAFETY: a non-null `psource` is a NUL-terminated string that
        // lives as long as its `ident_t` (`from_raw`'s contract).
        (!ps.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(ps) })
    }

    /// The pointer, for C functions that take the location too.
    pub fn as_ptr(self) -> *const Ident {
        self.0
    }
}

/// LLVM 20+ offload entry (56 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EntryTy {
    pub reserved: u64,
    pub version: u16,
    pub kind: u16,
    pub flags: u32,
    pub address: *mut c_void,
    pub symbol_name: *const c_char,
    pub size: u64,
    pub data: u64,
    pub aux_addr: *mut c_void,
}

/// Pre-20 offload entry (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LegacyEntryTy {
    pub address: *mut c_void,
    pub name: *const c_char,
    pub size: u64,
    pub flags: i32,
    pub data: i32,
}

#[repr(C)]
pub struct DeviceImageTy {
    pub image_start: *const u8,
    pub image_end: *const u8,
    pub entries_begin: *const u8,
    pub entries_end: *const u8,
}

#[repr(C)]
pub struct BinDesc {
    pub num_device_images: i32,
    pub device_images: *const DeviceImageTy,
    pub host_entries_begin: *const u8,
    pub host_entries_end: *const u8,
}

/// `KernelArgsTy` version 1-3 (104 bytes for v3; v1/v2 lack the trailing
/// launch-geometry fields that the legacy wrappers fill in anyway).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelArgsTy {
    pub version: u32,
    pub num_args: u32,
    pub arg_base_ptrs: *mut *mut c_void,
    pub arg_ptrs: *mut *mut c_void,
    pub arg_sizes: *mut i64,
    pub arg_types: *mut i64,
    pub arg_names: *mut *mut c_void,
    pub arg_mappers: *mut *mut c_void,
    pub tripcount: u64,
    pub flags: u64,
    pub num_teams: [u32; 3],
    pub thread_limit: [u32; 3],
    pub dyn_cgroup_mem: u32,
}

/// One dimension of a non-contiguous `target update`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NonContig {
    pub offset: u64,
    pub count: u64,
    pub stride: u64,
}

pub const TO: i64 = 0x001;
pub const FROM: i64 = 0x002;
pub const ALWAYS: i64 = 0x004;
pub const DELETE: i64 = 0x008;
pub const PTR_AND_OBJ: i64 = 0x010;
pub const TARGET_PARAM: i64 = 0x020;
pub const RETURN_PARAM: i64 = 0x040;
pub const PRIVATE: i64 = 0x080;
pub const LITERAL: i64 = 0x100;
pub const IMPLICIT: i64 = 0x200;
pub const CLOSE: i64 = 0x400;
pub const PRESENT: i64 = 0x1000;
pub const OMPX_HOLD: i64 = 0x2000;
pub const ATTACH: i64 = 0x4000;
pub const NON_CONTIG: i64 = 0x1000_0000_0000;
pub const MEMBER_OF: i64 = 0xFFFF_0000_0000_0000u64 as i64;

/// Parent index of a MEMBER_OF entry, or None.
pub fn parent_index(t: i64) -> Option<usize> {
    let v = ((t as u64) >> 48) as usize;
    if v == 0 {
        None
    } else {
        Some(v - 1)
    }
}

// Offload entry flags.
pub const ENTRY_LINK: u32 = 0x01;
pub const ENTRY_INDIRECT: u32 = 0x08;
pub const ENTRY_REQUIRES: u32 = 0x10;
pub const ENTRY_INDIRECT_VTABLE: u32 = 0x20;

// Requires flags.
pub const REQ_REVERSE_OFFLOAD: i64 = 0x002;
pub const REQ_UNIFIED_ADDRESS: i64 = 0x004;
pub const REQ_UNIFIED_SHARED_MEMORY: i64 = 0x008;
pub const REQ_DYNAMIC_ALLOCATORS: i64 = 0x010;

/// KernelArgs flag bits.
pub const KFLAG_NOWAIT: u64 = 1;
