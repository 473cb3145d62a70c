//! Target regions: map the arguments, pack the kernel's words
//! (firstprivates, lambda captures), launch, unmap.

use std::ffi::c_void;

use offload_core::plugin::{DevicePtr, KernelArgs, LaunchConfig};
use smallvec::SmallVec;

use crate::abi::*;
use crate::addr::HostAddr;
use crate::args::Args;
use crate::construct::{begin_fail_msgs, mapping_exists_unchanged, print_args, Ctx, NO_TGT};
use crate::device::DevState;
use crate::devices;
use crate::enter::{data_begin, process_attaches};
use crate::exit::data_end;
use crate::kernels::KernelRef;
use crate::mapping::Found;
use crate::msg::{self, Loc};
use crate::report::{after_block, lookup_name, target_failed};
use crate::transfer::copy_h2d;

const MAX_STACK_WORDS: usize = 32;

/// PTR_AND_OBJ | LITERAL | IMPLICIT: a by-reference capture of a lambda.
const LAMBDA_CAPTURE: i64 = PTR_AND_OBJ | LITERAL | IMPLICIT;
/// Firstprivate copies up to this size are packed into one transfer.
const FP_PACK_THRESHOLD: u64 = 1024;
const FP_MAX_ALIGN: u64 = 16;

/// Write the device address of a lambda's by-reference capture into the
/// device copy of the lambda (LLVM's lambda handling in processDataBefore).
fn lambda_capture(d: &DevState, a: &Args, i: usize, last_param: (usize, u64)) {
    let Some(parent) = parent_index(a.ty(i)) else {
        return;
    };
    if parent != last_param.0 {
        return;
    }
    let hp_val = a.begin(i);
    let size = a.size(i).max(0) as u64;
    // The capture's slot in the lambda's device copy (the parent's word).
    let tgt_ptr_begin = DevicePtr(last_param.1).offset(a.base_addr(i).offset_from(a.begin(parent)));
    let (value, name) = {
        let tbl = d.table(hp_val, size);
        let Some((k, _)) = tbl.lookup(hp_val, size) else {
            return;
        };
        let e = tbl.get(k).unwrap();
        let tgt = e.tgt_of(hp_val);
        if msg::info_on(msg::INFO_MAPPING_EXISTS) {
            mapping_exists_unchanged(d, e, hp_val, size);
        }
        (tgt.0, e.name)
    };
    // SAFETY: the source is the local word `value`; the destination is the
    // capture's slot inside the lambda's private device copy (its word).
    unsafe { copy_h2d(d, name, HostAddr::of(&value), tgt_ptr_begin, 8) };
}

/// The kernel's argument words: on the stack up to [`MAX_STACK_WORDS`],
/// all of them on the heap beyond.
struct Words {
    stack: [u64; MAX_STACK_WORDS],
    heap: Vec<u64>,
    n: usize,
}

impl Words {
    #[inline]
    fn new() -> Words {
        Words {
            stack: [0; MAX_STACK_WORDS],
            heap: Vec::new(),
            n: 0,
        }
    }
    /// The index the next word gets.
    #[inline]
    fn len(&self) -> usize {
        self.n
    }
    #[inline]
    fn push(&mut self, w: u64) {
        if self.n < MAX_STACK_WORDS {
            self.stack[self.n] = w;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack);
            }
            self.heap.push(w);
        }
        self.n += 1;
    }
    /// Overwrite word `idx` (already pushed).
    #[inline]
    fn set(&mut self, idx: usize, w: u64) {
        if self.heap.is_empty() {
            self.stack[idx] = w;
        } else {
            self.heap[idx] = w;
        }
    }
    #[inline]
    fn as_slice(&self) -> &[u64] {
        if self.n <= MAX_STACK_WORDS {
            &self.stack[..self.n]
        } else {
            &self.heap[..]
        }
    }
}

/// A small firstprivate packed into the launch's one transfer (LLVM's
/// PrivateArgumentManager).
struct Packed {
    /// Its kernel word.
    word: usize,
    hp: HostAddr,
    size: u64,
    /// Bytes before it in the packed buffer.
    padding: u64,
    /// Base minus begin, added to its device address for the word.
    off: u64,
    /// The alignment its start has.
    align: u64,
}

/// Private device copies of one launch, freed after the kernel ran.
#[derive(Default)]
struct Privates {
    /// (device block, size).
    blocks: Vec<(DevicePtr, u64)>,
    /// Small firstprivates copied in one transfer after the argument loop.
    packed: Vec<Packed>,
}

impl Privates {
    /// Add a small firstprivate to the packed buffer, aligned as LLVM does.
    fn pack(&mut self, word: usize, hp: HostAddr, size: u64, off: u64) {
        let (padding, align) = match self.packed.last() {
            None => (0, FP_MAX_ALIGN),
            Some(l) => {
                let mut start = l.align;
                if l.size % start != 0 {
                    start = l.size % start;
                }
                // getPartialStructRequiredAlignment
                let req = hp.alignment(FP_MAX_ALIGN);
                if req > start {
                    (req - start, req)
                } else {
                    (0, start)
                }
            }
        };
        self.packed.push(Packed {
            word,
            hp,
            size,
            padding,
            off,
            align,
        });
    }
}

/// Copy the packed small firstprivates in one transfer and fill in their
/// kernel words.
#[inline(never)]
fn pack_firstprivates(d: &DevState, info: u32, privates: &mut Privates, words: &mut Words) -> bool {
    let packed = &privates.packed;
    let total: u64 = packed.iter().map(|p| p.size + p.padding).sum();
    let mut small = [0u8; 4096];
    let mut big = Vec::new();
    let buf: &mut [u8] = if total as usize <= small.len() {
        &mut small[..total as usize]
    } else {
        big.resize(total as usize, 0u8);
        &mut big[..]
    };
    let mut at = 0usize;
    for p in packed {
        at += p.padding as usize;
        // SAFETY: `[hp, hp+size)` is the firstprivate host variable.
        let src = unsafe { std::slice::from_raw_parts(p.hp.as_ptr::<u8>(), p.size as usize) };
        buf[at..at + p.size as usize].copy_from_slice(src);
        at += p.size as usize;
    }
    let Some(block) = d.alloc_block(total) else {
        return false;
    };
    privates.blocks.push((block, total));
    let bp = HostAddr::of(buf.as_ptr());
    let name = if info & msg::INFO_DATA_TRANSFER != 0 {
        lookup_name(d, bp, total)
    } else {
        0
    };
    // SAFETY: `buf` holds `total` bytes; `block` is a block of `total` bytes.
    unsafe { copy_h2d(d, name, bp, block, total) };
    let mut tp = block.0;
    for p in packed {
        tp += p.padding;
        words.set(p.word, tp.wrapping_add(p.off));
        tp += p.size;
    }
    true
}

/// The launch geometry the program asked for: teams become groups, the
/// thread limit the group size, plus the dynamic group memory and loop trip
/// count. A clause the program left unset stays 0 in the x dimension: the
/// plugin picks (the CUDA plugin as LLVM's does; the host plugin runs
/// OpenMP kernels with one call and libomp fans out).
fn launch_config(ka: &KernelArgsTy) -> LaunchConfig {
    let x_as_given = |v: [u32; 3]| [v[0], v[1].max(1), v[2].max(1)];
    LaunchConfig {
        num_groups: x_as_given(teams_of(ka.num_teams)),
        group_size: x_as_given(ka.thread_limit),
        dyn_group_memory: ka.dyn_cgroup_mem,
        tripcount: ka.tripcount,
    }
}

/// The teams a construct asked for: clang passes -1 for a `target` that is
/// not a teams construct, which runs one team (as LLVM's
/// `__tgt_target_kernel` sets it; as given, a GPU launched 2^31-1 blocks).
fn teams_of(num_teams: [u32; 3]) -> [u32; 3] {
    match num_teams {
        [u32::MAX, y, z] => [1, y, z],
        given => given,
    }
}

/// `__tgt_target_kernel`: returns 0 when the region ran on the device.
/// Map the arguments, pack the kernel words, launch, unmap.
pub fn target_kernel(
    loc: IdentRef,
    device: i64,
    region: *mut c_void,
    ka: &KernelArgsTy,
    a: &Args,
) -> i32 {
    let Some(d) = devices::resolve(device, loc) else {
        return -1;
    };
    let info = msg::info();
    if info & msg::INFO_KERNEL_ARGS != 0 {
        kernel_header(d, loc, a);
    }
    // Images load on a device's first construct, after the INFO header
    // (LLVM's order: their INFO lines follow it).
    d.ensure_loaded();
    let Some(kernel) = d.kernel(region as u64) else {
        no_kernel(region, loc);
    };
    let mut ctx = Ctx::default();
    // Over a queue with round trips (remote), the copies in go out without
    // waiting; the launch waits for them (one round trip, not one each).
    let batched = a.n() > 0 && d.dev.batch_begin();
    map_args(d, a, loc, &mut ctx);
    let mut words = Words::new();
    let mut privates = Privates::default();
    if !pack_args(d, a, ka.version, info, &ctx, &mut words, &mut privates) {
        msg::error("Failed to process data before launching the kernel.");
        target_failed(loc);
    }
    // With a batch, the copies back ride on the launch's round trip.
    let read_back = batched.then_some(a);
    launch(d, kernel, ka, words.as_slice(), info, loc, read_back);
    unmap_args(d, a, loc);
    for (p, size) in privates.blocks {
        d.free_block(p, size);
    }
    if batched {
        end_batch(d, loc);
    }
    if info & msg::INFO_DUMP_TABLE != 0 {
        after_block(&Loc::from_ident(loc));
    }
    0
}

/// INFO: the kernel's entry line and its argument list.
#[cold]
fn kernel_header(d: &DevState, loc: IdentRef, a: &Args) {
    msg::dev_info(
        d.id,
        &format!(
            "Entering OpenMP kernel at {} with {} arguments:",
            Loc::from_ident(loc),
            a.n()
        ),
    );
    print_args(d, a);
}

#[cold]
fn no_kernel(region: *mut c_void, loc: IdentRef) -> ! {
    msg::error(&format!(
        "Failed to launch kernel: no kernel found for host region {}",
        HostAddr::of(region)
    ));
    target_failed(loc);
}

/// Map the kernel's arguments (targetDataBegin and the deferred attaches),
/// recording the device address of each top-level argument in `ctx`.
#[inline]
fn map_args(d: &DevState, a: &Args, loc: IdentRef, ctx: &mut Ctx) {
    if a.n() == 0 {
        return;
    }
    ctx.arg_tgt = smallvec::smallvec![NO_TGT; a.n()];
    if let Err(f) = data_begin(d, a, ctx) {
        begin_fail_msgs(f);
        msg::error("Call to targetDataBegin failed, abort target.");
        msg::error("Failed to process data before launching the kernel.");
        target_failed(loc);
    }
    process_attaches(d, ctx);
}

/// Fill in the kernel words: one per TARGET_PARAM (after the dyn_ptr word
/// of KernelArgs v3 and later): literals, private copies, mapped device
/// addresses. False when a private copy could not be made.
fn pack_args(
    d: &DevState,
    a: &Args,
    version: u32,
    info: u32,
    ctx: &Ctx,
    words: &mut Words,
    privates: &mut Privates,
) -> bool {
    if version >= 3 {
        words.push(u64::MAX);
    }
    let mut failed = false;
    // The argument index and word of the last target parameter (parent of
    // lambda captures that follow it).
    let mut last_param = (usize::MAX, 0u64);
    for i in 0..a.n() {
        let t = a.ty(i);
        if t & TARGET_PARAM == 0 {
            if t & LAMBDA_CAPTURE == LAMBDA_CAPTURE {
                lambda_capture(d, a, i, last_param);
            }
            continue;
        }
        let w = if t & LITERAL != 0 {
            a.base(i)
        } else if t & PRIVATE != 0 {
            private_word(d, a, i, info, words.len(), privates).unwrap_or_else(|| {
                failed = true;
                0
            })
        } else {
            mapped_word(d, a, i, info, ctx)
        };
        last_param = (i, w);
        words.push(w);
    }
    if !privates.packed.is_empty() && !failed {
        failed = !pack_firstprivates(d, info, privates, words);
    }
    !failed
}

/// The word of private argument `i` (word index `word`): a new device
/// copy, or a place in the packed transfer (filled in later); None when
/// its block could not be allocated.
fn private_word(
    d: &DevState,
    a: &Args,
    i: usize,
    info: u32,
    word: usize,
    privates: &mut Privates,
) -> Option<u64> {
    let t = a.ty(i);
    let size = a.size(i).max(0) as u64;
    let off = a.base_addr(i).offset_from(a.begin(i));
    let first_private = t & TO != 0;
    if size == 0 {
        return Some(a.base(i));
    }
    if first_private
        && size <= FP_PACK_THRESHOLD
        && !(i + 1 < a.n() && a.ty(i + 1) & MEMBER_OF != 0)
    {
        privates.pack(word, a.begin(i), size, off);
        return Some(0);
    }
    let p = d.alloc_block(size)?;
    privates.blocks.push((p, size));
    if first_private {
        let name = if info & msg::INFO_DATA_TRANSFER != 0 {
            lookup_name(d, a.begin(i), size)
        } else {
            0
        };
        // SAFETY: the firstprivate's host range (`Args::from_raw`) into
        // its new block.
        unsafe { copy_h2d(d, name, a.begin(i), p, size) };
    }
    Some(p.offset(off).0)
}

/// The word of mapped argument `i`: its device address from
/// [`map_args`], or looked up (with its INFO line).
#[inline]
fn mapped_word(d: &DevState, a: &Args, i: usize, info: u32, ctx: &Ctx) -> u64 {
    if info & msg::INFO_MAPPING_EXISTS == 0 && ctx.arg_tgt[i] != NO_TGT {
        // Found or created by data_begin above; our reference keeps it.
        let off = a.base_addr(i).offset_from(a.begin(i));
        return ctx.arg_tgt[i].offset(off).0;
    }
    let hp = a.begin(i);
    let size = a.size(i).max(0) as u64;
    let off = a.base_addr(i).offset_from(hp);
    let tbl = d.table(hp, size);
    // LLVM's getTgtPtrBegin without MustContain: an entry that only
    // overlaps the argument (a struct whose declare mapper mapped
    // one member) still gives its device address, by offset.
    let tgt = match tbl.lookup(hp, size) {
        Some((k, _)) => {
            let e = tbl.get(k).unwrap();
            let tgt = e.tgt_of(hp);
            if info & msg::INFO_MAPPING_EXISTS != 0 {
                mapping_exists_unchanged(d, e, hp, size);
            }
            tgt
        }
        // Not mapped: the kernel sees the host address (OpenMP 5.2).
        _ => DevicePtr(hp.0),
    };
    tgt.offset(off).0
}

/// Run the kernel with `words`; a failure is LLVM's fatal error.
#[inline]
fn launch(
    d: &DevState,
    kernel: KernelRef,
    ka: &KernelArgsTy,
    words: &[u64],
    info: u32,
    loc: IdentRef,
    read_back: Option<&Args>,
) {
    // SAFETY: kernel pointers live as long as the device's loaded programs.
    let k = unsafe { &*kernel.0 };
    let config = launch_config(ka);
    if info & msg::INFO_PLUGIN_KERNEL != 0 {
        print_launch(d.id, k, &config);
    }
    let result = match read_back {
        Some(a) => d
            .dev
            .launch_reading_back(k, KernelArgs::Words(words), &config, || {
                read_back_ranges(d, a)
            }),
        None => d.dev.launch(k, KernelArgs::Words(words), &config),
    };
    if let Err(e) = result {
        msg::plugin_error(&format!("Failure to run target region {}", k.name()), &e);
        msg::error("Executing target region abort target.");
        target_failed(loc);
    }
}

/// Unmap the kernel's arguments (targetDataEnd).
#[inline]
fn unmap_args(d: &DevState, a: &Args, loc: IdentRef) {
    if a.n() > 0 && data_end(d, a, false).is_err() {
        msg::error("Call to targetDataEnd failed, abort target.");
        msg::error("Failed to process data after launching the kernel.");
        target_failed(loc);
    }
}

/// The end of a batched region: the launch waited for the copies in; this
/// only reports one left unwaited (none in practice).
#[inline]
fn end_batch(d: &DevState, loc: IdentRef) {
    if let Err(e) = d.dev.batch_end() {
        msg::plugin_error("Failure to copy data from host to device", &e);
        msg::error("Failed to process data before launching the kernel.");
        target_failed(loc);
    }
}

/// The device ranges the end of a region may copy back (FROM maps of
/// mapped, small ranges), read with the launch where the plugin can tell
/// they are still current when the copy comes (`launch_reading_back`).
fn read_back_ranges(d: &DevState, a: &Args) -> SmallVec<[(DevicePtr, usize); 4]> {
    const MAX_ONE: u64 = 16 << 10;
    const MAX_ALL: u64 = 64 << 10;
    let mut back = SmallVec::new();
    let mut total = 0u64;
    for i in 0..a.n() {
        let t = a.ty(i);
        let size = a.size(i).max(0) as u64;
        if t & FROM == 0
            || t & (LITERAL | PRIVATE | ATTACH) != 0
            || a.mapper(i) != 0
            || size == 0
            || size > MAX_ONE
            || total + size > MAX_ALL
        {
            continue;
        }
        let hp = a.begin(i);
        let tbl = d.table(hp, size);
        // As `exit::end_one` finds the entry it copies from.
        let key = match tbl.lookup(hp, size) {
            Some((k, Found::Contained)) => Some(k),
            Some((k, Found::Extends)) if t & IMPLICIT != 0 => Some(k),
            _ => None,
        };
        if let Some(e) = key.and_then(|k| tbl.get(k)).filter(|e| !e.host_ptr) {
            back.push((e.tgt_of(hp), size as usize));
            total += size;
        }
    }
    back
}

/// LLVM's INFO line for a launch: the grid an OpenMP kernel of a GPU-like
/// plugin really gets and its mode; host kernels print what LLVM's host
/// plugin prints (one team of one thread, generic).
#[cold]
fn print_launch(device: usize, k: &offload_core::Kernel, config: &LaunchConfig) {
    let (blocks, threads, mode) = match k.launch_plan(config) {
        Some((c, m)) => (c.num_groups, c.group_size, m.llvm_name()),
        None => ([1, 1, 1], [1, 1, 1], "Generic"),
    };
    msg::eprint_line(&format!(
        "\"PluginInterface\" device {device} info: Launching kernel {} with [{},{},{}] blocks and [{},{},{}] threads in {mode} mode",
        k.name(),
        blocks[0],
        blocks[1],
        blocks[2],
        threads[0],
        threads[1],
        threads[2]
    ));
}

#[cfg(test)]
mod launch_tests {
    #[test]
    fn a_target_that_is_not_a_teams_construct_runs_one_team() {
        assert_eq!(super::teams_of([u32::MAX, 0, 0]), [1, 0, 0]);
        assert_eq!(super::teams_of([0, 0, 0]), [0, 0, 0]);
        assert_eq!(super::teams_of([7, 1, 1]), [7, 1, 1]);
    }
}
