//! Running one work group of a packed host kernel.
//!
//! Two modes, chosen per kernel when it is looked up:
//!
//! * **Direct** (kernels without `OFFLOAD_HOST_KERNEL_BARRIER`, and barrier
//!   kernels that export their group form): the group's work items are
//!   plain calls, one after another on the worker thread, in x-fastest
//!   order; or one call of the kernel's own group entry
//!   (`<kernel>_offload_group`: the loop over the items that
//!   `OFFLOAD_HOST_KERNEL` exports, or a barrier kernel's group form from
//!   `OFFLOAD_HOST_KERNEL_GROUP`, loops split at its barriers) with the item
//!   of local id 0. No context switch, no extra stack. A barrier call here
//!   cannot wait for anyone: it is recorded and the launch fails with an
//!   error naming the missing declaration (or the group form that made it).
//! * **Cooperative** (kernels declared with `OFFLOAD_HOST_KERNEL_BARRIER`):
//!   every work item of the group is a stackful coroutine (`corosensei`) on
//!   the worker thread. The worker resumes the items in x-fastest order; an
//!   item that calls `offload_group_barrier` suspends back to the worker,
//!   which resumes the next one. When every item waits at the barrier, a
//!   new round starts: the barrier is passed. Group memory is one buffer
//!   that all items of the group see. A barrier reached by some items while
//!   others of the group have returned can never be passed: the waiting
//!   items are abandoned (their stacks reset, nothing on them runs again)
//!   and the launch fails with an error naming the group and the barrier.
//!
//! A worker runs a piece of consecutive groups ([`GroupLaunch::run_range`])
//! with one set-up: the item, the thread's state and group memory, the
//! group ids stepped from one group to the next; with one call of
//! `<kernel>_offload_groups` when the kernel exports it (it steps the ids).
//!
//! Stacks come from a per-thread pool, reused across groups and launches:
//! [`item_stack_size`] bytes each (`OFFLOAD_HOST_ITEM_STACK`, default
//! 64 KiB) plus a guard page, so an overflow is a crash (SIGSEGV), not a
//! silent corruption. A group of N items uses N stacks at once.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::sync::OnceLock;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

#[cfg(doc)]
use crate::kernel::GROUP_ARGS_MAX;
use crate::kernel::{GroupsFn, HostItem, PackedKernelFn, HOST_ITEM_ABI_VERSION};

/// Default stack of one work item in cooperative mode.
pub const DEFAULT_ITEM_STACK: usize = 64 << 10;
/// Bounds of `OFFLOAD_HOST_ITEM_STACK`.
const MIN_ITEM_STACK: usize = 16 << 10;
const MAX_ITEM_STACK: usize = 64 << 20;

/// Bytes of stack per work item of a barrier kernel: `OFFLOAD_HOST_ITEM_STACK`
/// (bytes, or with a `K`/`M` suffix), clamped to 16 KiB..64 MiB; 64 KiB
/// by default or when unreadable.
pub fn item_stack_size() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("OFFLOAD_HOST_ITEM_STACK")
            .ok()
            .and_then(|v| parse_size(&v))
            .map_or(DEFAULT_ITEM_STACK, |n| {
                n.clamp(MIN_ITEM_STACK, MAX_ITEM_STACK)
            })
    })
}

fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (digits, shift) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 10),
        b'm' | b'M' => (&v[..v.len() - 1], 20),
        _ => (v, 0),
    };
    digits.trim().parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// How `offload_group_barrier` behaves for the items of a group.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Undeclared barrier kernel: a call is misuse, recorded.
    Direct,
    /// Declared, but the group has one item: nothing to wait for.
    Solo,
    /// Declared: suspend to the worker.
    Cooperative,
}

/// What `HostItem::runtime` points to.
struct ItemRuntime {
    mode: Mode,
    /// The item's coroutine, set when it starts (cooperative mode).
    yielder: Cell<*const Yielder<(), ()>>,
    /// A barrier was called where it cannot work (direct mode).
    misused: Cell<bool>,
}

impl ItemRuntime {
    fn new(mode: Mode) -> Self {
        ItemRuntime {
            mode,
            yielder: Cell::new(std::ptr::null()),
            misused: Cell::new(false),
        }
    }
}

/// `offload_group_barrier(item)`: the function pointer every v2 item carries.
///
/// Never unwinds: it suspends the calling coroutine (a stack switch, not an
/// unwind) or records misuse.
pub unsafe extern "C" fn group_barrier(item: *const HostItem) {
    if item.is_null() {
        return;
    }
    // SAFETY: kernels get `item` from the runtime and pass it back; its
    // `runtime` field points at the `ItemRuntime` of the running group,
    // alive until every item of the group has finished or been abandoned.
    let rt = unsafe { (*item).runtime as *const ItemRuntime };
    if rt.is_null() {
        return;
    }
    // SAFETY: see above.
    let rt = unsafe { &*rt };
    match rt.mode {
        Mode::Solo => {}
        Mode::Direct => rt.misused.set(true),
        Mode::Cooperative => {
            let y = rt.yielder.get();
            if y.is_null() {
                rt.misused.set(true);
                return;
            }
            // SAFETY: set by the item's coroutine before it called the
            // kernel; the coroutine (and its yielder) live while the item
            // runs, which it does now. Suspending switches stacks only.
            unsafe { (*y).suspend(()) }
        }
    }
}

/// One launch's fixed parts, shared by its groups.
pub struct GroupLaunch<'a> {
    pub kernel: &'a str,
    pub entry: PackedKernelFn,
    /// The kernel's loop over a group's items, when it exports one.
    pub group_entry: Option<PackedKernelFn>,
    /// The group entry over a run of groups, when the kernel exports one.
    pub groups_entry: Option<GroupsFn>,
    pub args: *const c_void,
    /// Bytes at `args` (at most [`GROUP_ARGS_MAX`] when `group_entry` is set).
    pub args_size: u32,
    pub num_groups: [u32; 3],
    pub group_size: [u32; 3],
    pub dyn_group_memory: usize,
    pub static_group_memory: usize,
    pub uses_barrier: bool,
    /// The group entry was made by the JIT ([`crate::kernel::HostKernel`]).
    pub generated_group: bool,
}

/// 64-byte aligned chunk of group memory.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Chunk([u8; 64]);

/// Per-thread reusable state: group memory, stacks, the coroutine vector.
#[derive(Default)]
struct ThreadState {
    memory: Vec<Chunk>,
    stacks: Vec<DefaultStack>,
    coroutines: Vec<ItemCoroutine>,
}

thread_local! {
    static STATE: RefCell<ThreadState> = RefCell::new(ThreadState::default());
}

type ItemCoroutine = Coroutine<(), (), (), DefaultStack>;

impl GroupLaunch<'_> {
    /// Run groups `start..end` (linear indices, x fastest) to completion,
    /// in that order, on this thread; a message on misuse of the barrier.
    ///
    /// The item, the thread's state and the group memory are set up once
    /// for the whole range; the group ids advance without a division.
    pub fn run_range(&self, start: u64, end: u64) -> Result<(), String> {
        if start >= end {
            return Ok(());
        }
        let gid = self.group_ids(start);
        if !self.needs_state() {
            // No per-thread state needed (the common plain kernel).
            let none = std::ptr::null_mut();
            return self.run_direct(gid, end - start, none, none, Mode::Direct);
        }
        // A kernel launching from inside a kernel on this thread (never
        // done by the faces) gets fresh state instead of a borrow panic.
        STATE.with(|s| match s.try_borrow_mut() {
            Ok(mut st) => self.run_in(gid, end - start, &mut st),
            Err(_) => self.run_in(gid, end - start, &mut ThreadState::default()),
        })
    }

    /// Run the group with ids `gid` (the launch's only group, say).
    pub fn run_at(&self, gid: [u32; 3]) -> Result<(), String> {
        if !self.needs_state() {
            let none = std::ptr::null_mut();
            return self.run_direct(gid, 1, none, none, Mode::Direct);
        }
        STATE.with(|s| match s.try_borrow_mut() {
            Ok(mut st) => self.run_in(gid, 1, &mut st),
            Err(_) => self.run_in(gid, 1, &mut ThreadState::default()),
        })
    }

    /// Group ids of linear group index `g`.
    fn group_ids(&self, g: u64) -> [u32; 3] {
        let [nx, ny, _] = self.num_groups.map(|n| n as u64);
        [
            (g % nx) as u32,
            ((g / nx) % ny) as u32,
            (g / (nx * ny)) as u32,
        ]
    }

    /// Step `gid` to the next group (x fastest).
    #[inline(always)]
    fn next_group(&self, gid: &mut [u32; 3]) {
        gid[0] += 1;
        if gid[0] == self.num_groups[0] {
            gid[0] = 0;
            gid[1] += 1;
            if gid[1] == self.num_groups[1] {
                gid[1] = 0;
                gid[2] += 1;
            }
        }
    }

    /// Whether a group needs the thread's state (group memory or stacks).
    #[inline(always)]
    fn needs_state(&self) -> bool {
        self.dyn_group_memory != 0 || self.static_group_memory != 0 || self.cooperative()
    }

    /// Whether the groups run as coroutines: a barrier kernel without a
    /// group entry of its own.
    #[inline(always)]
    fn cooperative(&self) -> bool {
        self.uses_barrier && self.group_entry.is_none()
    }

    /// `count` groups from `gid` on, with the thread's state.
    fn run_in(&self, mut gid: [u32; 3], count: u64, st: &mut ThreadState) -> Result<(), String> {
        // Static group memory first, then the dynamic part, each 64-byte aligned.
        let static_chunks = self.static_group_memory.div_ceil(64);
        let chunks = static_chunks + self.dyn_group_memory.div_ceil(64);
        if st.memory.len() < chunks {
            st.memory.resize(chunks, Chunk([0; 64]));
        }
        let base = st.memory.as_mut_ptr();
        let ptr_at = |chunk: usize, size: usize| {
            if size == 0 {
                std::ptr::null_mut()
            } else {
                // SAFETY: `chunk` < `chunks` <= the buffer's length.
                unsafe { base.add(chunk) }.cast::<c_void>()
            }
        };
        let items = self
            .group_size
            .iter()
            .map(|&n| n as usize)
            .product::<usize>();
        let mode = match (self.cooperative(), items) {
            (false, _) => Mode::Direct,
            (true, 1) => Mode::Solo,
            (true, _) => Mode::Cooperative,
        };
        let (group_static, group_memory) = (
            ptr_at(0, self.static_group_memory),
            ptr_at(static_chunks, self.dyn_group_memory),
        );
        if mode != Mode::Cooperative {
            return self.run_direct(gid, count, group_static, group_memory, mode);
        }
        for _ in 0..count {
            let proto = self.item(gid, group_static, group_memory, std::ptr::null());
            self.run_cooperative(proto, items, st)?;
            self.next_group(&mut gid);
        }
        Ok(())
    }

    /// The item of local id 0 of group `gid`.
    #[inline]
    fn item(
        &self,
        gid: [u32; 3],
        group_static: *mut c_void,
        group_memory: *mut c_void,
        runtime: *const ItemRuntime,
    ) -> HostItem {
        HostItem {
            abi_version: HOST_ITEM_ABI_VERSION,
            args_size: self.args_size,
            num_groups: self.num_groups,
            group_size: self.group_size,
            group_id: gid,
            local_id: [0; 3],
            group_memory,
            group_memory_size: self.dyn_group_memory as u64,
            barrier: group_barrier,
            group_static,
            group_static_size: self.static_group_memory as u64,
            runtime: runtime as *mut c_void,
        }
    }

    /// `count` groups from `gid` on, each as one call of the group entry
    /// or as its items one after another (plain calls).
    #[inline]
    fn run_direct(
        &self,
        mut gid: [u32; 3],
        count: u64,
        group_static: *mut c_void,
        group_memory: *mut c_void,
        mode: Mode,
    ) -> Result<(), String> {
        let rt = ItemRuntime::new(mode);
        let mut item = self.item(gid, group_static, group_memory, &rt);
        if let Some(groups_entry) = self.groups_entry {
            // SAFETY: as in `run_group`; the entry steps the group ids
            // itself, `count` groups from `gid` on, all inside the grid.
            unsafe { groups_entry(self.args, &item, count) };
            return match rt.misused.get() {
                true => Err(self.misused_barrier()),
                false => Ok(()),
            };
        }
        self.run_group(&mut item);
        for _ in 1..count {
            self.next_group(&mut gid);
            item.group_id = gid;
            self.run_group(&mut item);
        }
        if rt.misused.get() {
            return Err(self.misused_barrier());
        }
        Ok(())
    }

    /// The group of `item` (local id 0): one call of the group entry, or
    /// the items one after another.
    #[inline(always)]
    fn run_group(&self, item: &mut HostItem) {
        match self.group_entry {
            // SAFETY: the entry has the packed signature; the caller keeps
            // the argument buffer alive; the loop gives each item its local
            // id (in its own copy of `item`).
            Some(group_entry) => unsafe { group_entry(self.args, item) },
            None => self.run_items(item),
        }
    }

    /// The items of `item`'s group, one call each.
    #[inline]
    fn run_items(&self, item: &mut HostItem) {
        for z in 0..self.group_size[2] {
            for y in 0..self.group_size[1] {
                for x in 0..self.group_size[0] {
                    item.local_id = [x, y, z];
                    // SAFETY: the kernel has the packed signature; the
                    // caller keeps the argument buffer alive.
                    unsafe { (self.entry)(self.args, item) };
                }
            }
        }
    }

    #[cold]
    fn misused_barrier(&self) -> String {
        if self.generated_group {
            return format!(
                "kernel '{}': the work items of a group did not all reach the same barrier \
                 (some returned, or waited at another barrier call, while others waited): \
                 every work item of a group must call offload_group_barrier the same number \
                 of times, at the same call (a barrier in divergent control flow). The \
                 kernel's work-item loops, made from its bitcode, stopped the group",
                self.kernel
            );
        }
        if self.uses_barrier {
            return format!(
                "kernel '{}': its group entry ({}_offload_group) called offload_group_barrier; \
                 a group entry runs the whole group and must not call the barrier",
                self.kernel, self.kernel
            );
        }
        format!(
            "kernel '{}' called offload_group_barrier but is not declared with \
             OFFLOAD_HOST_KERNEL_BARRIER({}): its work items run one after another, \
             so a barrier cannot wait for the others",
            self.kernel, self.kernel
        )
    }

    #[inline(never)]
    fn run_cooperative(
        &self,
        proto: HostItem,
        items: usize,
        st: &mut ThreadState,
    ) -> Result<(), String> {
        let stack_size = item_stack_size();
        let mut coroutines = std::mem::take(&mut st.coroutines);
        coroutines.reserve(items);
        let proto_addr = &proto as *const HostItem as usize;
        let (entry, args) = (self.entry, self.args as usize);
        for i in 0..items {
            let stack = match st.stacks.pop() {
                Some(s) => s,
                None => match DefaultStack::new(stack_size) {
                    Ok(s) => s,
                    Err(e) => {
                        release(&mut coroutines, st);
                        st.coroutines = coroutines;
                        return Err(format!(
                            "cannot map a {stack_size}-byte stack for a work item of kernel '{}' \
                             ({items} items per group): {e}",
                            self.kernel
                        ));
                    }
                },
            };
            // The item and its runtime record live at the top of the item's
            // own stack: one page per item holds all a switch touches.
            coroutines.push(Coroutine::with_stack(
                stack,
                move |y: &Yielder<(), ()>, ()| {
                    let rt = ItemRuntime::new(Mode::Cooperative);
                    rt.yielder.set(y as *const Yielder<(), ()>);
                    // SAFETY: `proto_addr` is the group's prototype item,
                    // which outlives every coroutine of the group (they are
                    // finished or reset before it goes).
                    let proto = unsafe { &*(proto_addr as *const HostItem) };
                    let item = HostItem {
                        local_id: local_id(proto.group_size, i),
                        runtime: &rt as *const ItemRuntime as *mut c_void,
                        ..*proto
                    };
                    // SAFETY: the kernel has the packed signature; the
                    // caller keeps the argument buffer alive.
                    unsafe { entry(args as *const c_void, &item) };
                },
            ));
        }
        let mut barrier = 0u64;
        let mut result = Ok(());
        loop {
            let mut waiting = 0usize;
            for c in coroutines.iter_mut() {
                if !c.done() && matches!(c.resume(()), CoroutineResult::Yield(())) {
                    waiting += 1;
                }
            }
            if waiting == 0 {
                break;
            }
            barrier += 1;
            let finished = coroutines.iter().filter(|c| c.done()).count();
            if finished > 0 {
                let first_done = coroutines.iter().position(|c| c.done()).unwrap_or(0);
                let first_waiting = coroutines.iter().position(|c| !c.done()).unwrap_or(0);
                result = Err(format!(
                    "kernel '{}', group {:?}: {waiting} of {items} work items wait at barrier #{barrier} \
                     (first: local id {:?}) but {finished} returned without reaching it \
                     (first: local id {:?}); every work item of a group must call \
                     offload_group_barrier the same number of times (a barrier in divergent \
                     control flow). The waiting items were abandoned",
                    self.kernel,
                    proto.group_id,
                    local_id(self.group_size, first_waiting),
                    local_id(self.group_size, first_done),
                ));
                for c in coroutines.iter_mut() {
                    if !c.done() {
                        // SAFETY: the abandoned stack holds the kernel's C
                        // frames, `group_barrier`'s frame and the start
                        // closure's (an item and a runtime record), none of
                        // which has anything to drop; it is never resumed.
                        unsafe { c.force_reset() };
                    }
                }
                break;
            }
        }
        release(&mut coroutines, st);
        st.coroutines = coroutines;
        result
    }
}

/// Local id of the `i`-th item of a group (x fastest).
fn local_id(size: [u32; 3], i: usize) -> [u32; 3] {
    let [sx, sy, _] = size.map(|n| n as usize);
    [
        (i % sx) as u32,
        ((i / sx) % sy) as u32,
        (i / (sx * sy)) as u32,
    ]
}

/// Give the stacks of the group's coroutines back to the thread's pool
/// (the vector is left empty, its capacity kept for the next group).
fn release(coroutines: &mut Vec<ItemCoroutine>, st: &mut ThreadState) {
    for mut c in coroutines.drain(..) {
        if !c.started() {
            // Never resumed: drops the start closure only (plain values).
            c.force_unwind();
        }
        if c.done() {
            st.stacks.push(c.into_stack());
        } else {
            // Unreachable (every item finished or was reset), but dropping
            // a suspended coroutine would unwind through C frames: leak it.
            std::mem::forget(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_sizes_parse() {
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("128K"), Some(128 << 10));
        assert_eq!(parse_size(" 2m "), Some(2 << 20));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size(""), None);
    }
}
