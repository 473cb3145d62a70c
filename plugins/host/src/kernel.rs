//! Calling host kernels.
//!
//! Two conventions reach the host plugin:
//!
//! * **Words** (OpenMP images built by clang-22): `void k(void *dyn_ptr, W1, ..., Wn)`,
//!   every argument one 64-bit word. LLVM goes through libffi; on x86-64 SysV
//!   (and AArch64) a callee that takes N integer words can be called through a
//!   function type with *more* integer parameters: the surplus lands in unused
//!   registers or stack slots the caller owns. So we call through one of four
//!   fixed arities (6, 16, 64, 256 words) with zero padding: no allocation,
//!   no libffi.
//! * **Packed** (liboffload and the Rust API): `void k(const void *args,
//!   const offload_host_item_t *item)` once per work item, as described in
//!   `include/offload/host_kernel.h`, or its `k_offload_group` (same
//!   signature) once per group when the image exports one, or its
//!   `k_offload_groups` (a count added) once per run of groups.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::plugin;
use offload_core::{Error, Result};

/// Most words a kernel can take.
pub const MAX_KERNEL_WORDS: usize = 256;

/// A resolved kernel symbol of a loaded host image.
pub struct HostKernel {
    pub(crate) name: String,
    pub(crate) entry: *const c_void,
    /// `<name>_offload_group` (OFFLOAD_HOST_KERNEL exports it): the loop over
    /// one group's items, called once per group with the item of local id 0
    /// instead of `entry` once per item. Same signature as `entry`.
    pub(crate) group_entry: Option<*const c_void>,
    /// `<name>_offload_groups` (OFFLOAD_HOST_KERNEL and
    /// OFFLOAD_HOST_KERNEL_GROUP export it): the group entry over a run of
    /// consecutive groups, called once per piece of a launch.
    pub(crate) groups_entry: Option<*const c_void>,
    /// Keeps the image mapped while the kernel is alive.
    pub(crate) _program: Arc<crate::image::LoadedImage>,
    /// Declared with `OFFLOAD_HOST_KERNEL_BARRIER` (exports
    /// `<name>_offload_barrier`): its groups run as coroutines.
    pub(crate) uses_barrier: bool,
    /// The group entry is work-item loops the JIT made from the kernel's
    /// bitcode (exports `<name>_offload_group_generated`): a barrier call
    /// from it means the items diverged.
    pub(crate) generated_group: bool,
    /// Bytes of static group memory (`<name>_offload_group_static_size`).
    pub(crate) group_static_size: u64,
}

// SAFETY: `entry` is an address in an image that `_program` keeps loaded;
// calling it from any thread is what the image was built for.
unsafe impl Send for HostKernel {}
// SAFETY: as for Send; nothing in a HostKernel changes after lookup.
unsafe impl Sync for HostKernel {}

impl plugin::Kernel for HostKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn preferred_group_size(&self, _dyn_group_memory: usize) -> u32 {
        // Work items of a group run serially; larger groups only amortise
        // the per-group set-up.
        64
    }
    fn check_launch(
        &self,
        args: &plugin::KernelArgs<'_>,
        config: &plugin::LaunchConfig,
    ) -> Result<()> {
        match args {
            plugin::KernelArgs::Packed(_) => crate::queue::validate(self, config),
            // OpenMP kernels fan out through libomp: no grid of ours.
            plugin::KernelArgs::Words(_) => Ok(()),
        }
    }
}

/// `offload_host_item_t` of include/offload/host_kernel.h, ABI version 2.
/// Version 1 ends at `group_memory_size`; version 2 only appends fields, so
/// kernels built against either header read what they know.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HostItem {
    pub abi_version: u32,
    /// Bytes at `args` (`reserved` in ABI v1 headers; 0 then).
    pub args_size: u32,
    pub num_groups: [u32; 3],
    pub group_size: [u32; 3],
    pub group_id: [u32; 3],
    pub local_id: [u32; 3],
    pub group_memory: *mut c_void,
    pub group_memory_size: u64,
    // ABI version 2:
    /// `offload_group_barrier(item)` calls this.
    pub barrier: unsafe extern "C" fn(*const HostItem),
    /// The kernel's static group memory (`OFFLOAD_HOST_GROUP_STATIC`).
    pub group_static: *mut c_void,
    pub group_static_size: u64,
    /// The runtime's, opaque to kernels.
    pub runtime: *mut c_void,
}

pub const HOST_ITEM_ABI_VERSION: u32 = 2;

// The JIT's work-item loops (offload-core's `work_item_loops`) write these
// offsets into the group forms they generate; they must match this layout.
const _: () = {
    assert!(std::mem::size_of::<HostItem>() == 104);
    assert!(std::mem::offset_of!(HostItem, group_size) == 20);
    assert!(std::mem::offset_of!(HostItem, local_id) == 44);
    assert!(std::mem::offset_of!(HostItem, barrier) == 72);
};

/// `OFFLOAD_HOST_GROUP_ARGS_MAX`: a group loop copies the arguments into a
/// local buffer of this size, so larger argument buffers are passed to the
/// per-item entry instead.
pub const GROUP_ARGS_MAX: usize = 4096;

pub type PackedKernelFn = unsafe extern "C" fn(*const c_void, *const HostItem);

/// `<kernel>_offload_groups(args, first, count)`: `count` consecutive
/// groups (x fastest) from `first`'s, each as `<kernel>_offload_group`.
pub type GroupsFn = unsafe extern "C" fn(*const c_void, *const HostItem, u64);

macro_rules! call_with {
    ($f:expr, $a:expr; $($i:literal)*) => {{
        type F = unsafe extern "C" fn($(call_with!(@ty $i)),*);
        // SAFETY: `call_words`'s caller guarantees `$f` is a kernel taking
        // at most as many integer words, valid for these values; surplus
        // words land in registers or stack slots the caller owns (SysV).
        unsafe {
            let f: F = std::mem::transmute::<*const c_void, F>($f);
            f($($a[$i]),*)
        }
    }};
    (@ty $i:literal) => { u64 };
}

/// Call `f` with `words` as its integer arguments.
///
/// # Safety
/// `f` must be a function taking at most `words.len()` integer/pointer
/// parameters, and the words must be valid for it.
pub unsafe fn call_words(f: *const c_void, words: &[u64]) -> Result<()> {
    match words.len() {
        0..=6 => {
            let mut a = [0u64; 6];
            a[..words.len()].copy_from_slice(words);
            call_with!(f, a; 0 1 2 3 4 5)
        }
        7..=16 => {
            let mut a = [0u64; 16];
            a[..words.len()].copy_from_slice(words);
            call_with!(f, a; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
        }
        17..=64 => {
            let mut a = [0u64; 64];
            a[..words.len()].copy_from_slice(words);
            call_with!(f, a; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63)
        }
        65..=256 => {
            let mut a = [0u64; 256];
            a[..words.len()].copy_from_slice(words);
            call_with!(f, a; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127 128 129 130 131 132 133 134 135 136 137 138 139 140 141 142 143 144 145 146 147 148 149 150 151 152 153 154 155 156 157 158 159 160 161 162 163 164 165 166 167 168 169 170 171 172 173 174 175 176 177 178 179 180 181 182 183 184 185 186 187 188 189 190 191 192 193 194 195 196 197 198 199 200 201 202 203 204 205 206 207 208 209 210 211 212 213 214 215 216 217 218 219 220 221 222 223 224 225 226 227 228 229 230 231 232 233 234 235 236 237 238 239 240 241 242 243 244 245 246 247 248 249 250 251 252 253 254 255)
        }
        n => {
            return Err(Error::unsupported(format!(
            "kernel takes {n} argument words; the host plugin supports at most {MAX_KERNEL_WORDS}"
        )))
        }
    }
    Ok(())
}
