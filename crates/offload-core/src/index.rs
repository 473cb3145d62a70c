//! The allocation index: every range of device memory a caller may name
//! (allocations, globals of loaded programs, registered host memory), with
//! its owner. Frees of unknown pointers are caught (double free, foreign or
//! interior pointer), an interior pointer is traced to its allocation, and
//! every copy or fill is checked against the range it touches.
//!
//! Shape, for speed:
//!
//! * Each range is a [`Slot`] whose liveness is an atomic. Blocks of the
//!   caching allocator keep their slot while cached (not live), so a
//!   map/unmap cycle flips a flag instead of inserting and removing.
//! * The ranges live in a [`RangeMap`] (sharded by address, see
//!   [`crate::range_map`]): the shard of an address holds every range
//!   inside one granule that could contain it, ranges never overlap, so the
//!   greatest base at or below an address there is the only candidate, and
//!   a range crossing a granule boundary (a large one) sits in the spanning
//!   table, looked at only when the shard has no answer and large ranges
//!   touch it. Lookups take read locks; threads working on different memory
//!   do not contend.
//! * Each thread remembers the last few slots it used: checking the range
//!   of a copy into memory the thread just allocated touches no lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, ErrorCode, Result};
use crate::plugin::{AllocKind, DevicePtr};
use crate::range_map::{Home, RangeMap, Ranged};

/// Who made a range: lets one face (or one server session) free and check
/// only its own memory. `Owner::RUNTIME` is everything the faces of this
/// process allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Owner(pub u64);

impl Owner {
    pub const RUNTIME: Owner = Owner(0);
    /// Blocks a face manages itself ([`crate::Device::alloc_owned_block`]):
    /// only [`crate::Device::free_owned_block`] releases them.
    pub const OWNED_BLOCKS: Owner = Owner(u64::MAX);
    /// Stream-ordered memory of a queue ([`crate::Queue::alloc`]) that the
    /// plugin allocated in order (`cuMemAllocAsync`): only
    /// [`crate::Queue::free`] releases it, in order.
    pub const QUEUE_ORDERED: Owner = Owner(u64::MAX - 1);
    /// Memory of [`crate::Queue::alloc`] on a plugin without ordered
    /// allocation: a plain allocation, released by [`crate::Queue::free`]
    /// once the queue's earlier work is done.
    pub const QUEUE_DEFERRED: Owner = Owner(u64::MAX - 2);

    /// Whether this is one of the queue allocation owners.
    pub fn is_queue(self) -> bool {
        self == Owner::QUEUE_ORDERED || self == Owner::QUEUE_DEFERRED
    }
}

/// Where a range of device memory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An allocation through the core ([`crate::Device::alloc`]).
    Alloc(AllocKind),
    /// A global variable of a loaded program.
    Global,
    /// Host memory registered for the device (`olMemRegister`).
    Registered,
}

/// A live range of device memory, as lookups report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub base: DevicePtr,
    pub size: usize,
    pub kind: AllocKind,
    pub origin: Origin,
    pub owner: Owner,
}

impl Allocation {
    pub fn end(&self) -> u64 {
        self.base.0.saturating_add(self.size.max(1) as u64)
    }
    pub fn contains(&self, ptr: DevicePtr) -> bool {
        ptr.0 >= self.base.0 && ptr.0 < self.end()
    }
}

const CACHED: u8 = 0;
const LIVE: u8 = 1;
/// Out of the index for good (its address may belong to a new slot).
const DEAD: u8 = 2;

/// One range in the index.
#[derive(Debug)]
pub struct Slot {
    base: DevicePtr,
    /// Bytes the slot may ever cover (a pooled block's class size).
    capacity: usize,
    /// Bytes of the current allocation (<= capacity).
    size: AtomicUsize,
    owner: AtomicU64,
    kind: AllocKind,
    origin: Origin,
    state: AtomicU8,
}

impl Slot {
    pub fn base(&self) -> DevicePtr {
        self.base
    }

    /// The allocation, when live.
    #[inline]
    fn live(&self) -> Option<Allocation> {
        (self.state.load(Ordering::Acquire) == LIVE).then(|| Allocation {
            base: self.base,
            size: self.size.load(Ordering::Relaxed),
            kind: self.kind,
            origin: self.origin,
            owner: Owner(self.owner.load(Ordering::Relaxed)),
        })
    }

    /// Make a cached slot live again for a new allocation of `size` bytes.
    pub fn revive(&self, size: usize, owner: Owner) {
        debug_assert!(size <= self.capacity);
        self.size.store(size, Ordering::Relaxed);
        self.owner.store(owner.0, Ordering::Relaxed);
        self.state.store(LIVE, Ordering::Release);
    }

    /// Live -> cached; false when it was not live (a double free racing).
    fn retire(&self) -> bool {
        self.state
            .compare_exchange(LIVE, CACHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

impl Ranged for Slot {
    type Key = DevicePtr;
    #[inline]
    fn key(&self) -> DevicePtr {
        self.base
    }
    /// Everything the slot may ever cover (its capacity, at least a byte).
    #[inline]
    fn bounds(&self) -> (u64, u64) {
        (self.base.0, self.base.0 + self.capacity as u64)
    }
}

/// Slots a thread remembers (most recent last).
const RECENT: usize = 8;

/// One remembered slot: its index and range are kept next to it, so a miss
/// costs no dereference.
pub(crate) struct Recent {
    index: u64,
    base: u64,
    /// `base + capacity`.
    limit: u64,
    slot: Arc<Slot>,
}

/// The ranges of one device.
pub struct AllocationIndex {
    /// Tells this index's slots apart in the per-thread cache.
    id: u64,
    map: RangeMap<BTreeMap<DevicePtr, Arc<Slot>>>,
    /// How many filed ranges are globals or registrations.
    foreign: AtomicUsize,
}

impl Default for AllocationIndex {
    fn default() -> Self {
        static IDS: AtomicU64 = AtomicU64::new(1);
        AllocationIndex {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            map: RangeMap::default(),
            foreign: AtomicUsize::new(0),
        }
    }
}

impl Drop for AllocationIndex {
    fn drop(&mut self) {
        // Per-thread caches may still hold slots: make sure none is live.
        self.map
            .for_each(|slot| slot.state.store(DEAD, Ordering::Release));
    }
}

/// The table a slot is filed in.
fn home(slot: &Slot) -> Home {
    let (begin, end) = slot.bounds();
    Home::of(begin, end)
}

impl AllocationIndex {
    /// File a new live range. A registration or global overlapping a live
    /// range is an error (a device allocator never hands out live memory).
    pub fn insert(&self, a: Allocation) -> Result<Arc<Slot>> {
        self.insert_with_capacity(a, a.size)
    }

    /// File a new live range that may later be reused for up to `capacity`
    /// bytes (a block of the caching allocator).
    pub fn insert_with_capacity(&self, a: Allocation, capacity: usize) -> Result<Arc<Slot>> {
        let capacity = capacity.max(a.size).max(1);
        if a.base.0.checked_add(capacity as u64).is_none() {
            return Err(Error::new(
                ErrorCode::InvalidSize,
                format!("[{}, +{}) wraps around the address space", a.base, a.size),
            ));
        }
        let checked = !matches!(a.origin, Origin::Alloc(_));
        let overlap = || {
            self.find(a.base)
                .or_else(|| self.find(DevicePtr(a.end() - 1)))
        };
        if let Some(old) = checked.then(overlap).flatten() {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "[{}, +{}) overlaps the live range at {} (+{})",
                    a.base, a.size, old.base, old.size
                ),
            ));
        }
        let slot = Arc::new(Slot {
            base: a.base,
            capacity,
            size: AtomicUsize::new(a.size),
            owner: AtomicU64::new(a.owner.0),
            kind: a.kind,
            origin: a.origin,
            state: AtomicU8::new(LIVE),
        });
        let old = self.map.insert(slot.clone());
        if checked {
            self.foreign.fetch_add(1, Ordering::AcqRel);
        }
        // A stale slot at the same base (see below): gone for good.
        if let Some(old) = old {
            self.left(&old);
        }
        // The same base may sit in the other table (a small range there
        // before, a large one now, or the reverse). Allocations leave the
        // index before their memory goes back to the device, so only a
        // foreign range can be stale there: host memory registered and then
        // freed without unregistering, now handed out by a host device.
        if self.foreign.load(Ordering::Acquire) > 0 {
            self.remove_stale(a.base, home(&slot));
        }
        self.remember(&slot);
        Ok(slot)
    }

    /// Take the slot at `base` out of the table a range of the other size
    /// would be filed in (see [`AllocationIndex::insert_with_capacity`]).
    #[cold]
    fn remove_stale(&self, base: DevicePtr, filed: Home) {
        let other = match filed {
            Home::Shard => Home::Spanning,
            Home::Spanning => Home::Shard,
        };
        if let Some(stale) = self.map.remove_if(base, other, |_| true) {
            self.left(&stale);
        }
    }

    /// Bookkeeping for a slot taken out of its table: dead, and no longer
    /// counted.
    fn left(&self, slot: &Slot) {
        slot.state.store(DEAD, Ordering::Release);
        if !matches!(slot.origin, Origin::Alloc(_)) {
            self.foreign.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Take a slot out of the index for good (its memory goes back to the
    /// device).
    pub fn forget(&self, slot: &Arc<Slot>) {
        slot.state.store(DEAD, Ordering::Release);
        let taken = self
            .map
            .remove_if(slot.base, home(slot), |filed| Arc::ptr_eq(filed, slot));
        if taken.is_some() {
            self.left(slot);
        }
    }

    /// End the live range starting exactly at `base` if `accept` agrees:
    /// the slot is returned, no longer live (still filed; the caller keeps
    /// it for reuse or [`AllocationIndex::forget`]s it).
    pub fn retire(
        &self,
        base: DevicePtr,
        device: &str,
        accept: impl Fn(&Allocation) -> Result<()>,
    ) -> Result<(Allocation, Arc<Slot>)> {
        // Fast path: a slot this thread used last, moved out of its cache
        // (no reference count touched).
        if let Some(Some(done)) = self.with_recent(|r| self.retire_recent(r, base, &accept)) {
            return done;
        }
        let found = self.map.get_map(base, |s| s.live().map(|a| (a, s.clone())));
        let Some((a, slot)) = found else {
            let msg = match self.find(base) {
                Some(a) => format!(
                    "pointer {base} is inside the allocation at {} on {device}, not its start",
                    a.base
                ),
                None => format!(
                    "pointer {base} is not a live allocation on {device} (double free or foreign pointer)"
                ),
            };
            return Err(Error::new(ErrorCode::InvalidArgument, msg));
        };
        // (`accept` was not called on the fast path when we get here.)
        accept(&a)?;
        if !slot.retire() {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("pointer {base} was freed twice at once on {device}"),
            ));
        }
        Ok((a, slot))
    }

    /// The fast path of [`AllocationIndex::retire`]: `base` among this
    /// thread's recent slots (None: not there, take the slow path).
    #[inline]
    pub(crate) fn retire_recent(
        &self,
        recent: &mut Vec<Recent>,
        base: DevicePtr,
        accept: &impl Fn(&Allocation) -> Result<()>,
    ) -> Option<Result<(Allocation, Arc<Slot>)>> {
        let i = recent
            .iter()
            .rposition(|e| e.index == self.id && e.base == base.0)?;
        let a = recent[i].slot.live()?;
        if let Err(e) = accept(&a) {
            return Some(Err(e));
        }
        if !recent[i].slot.retire() {
            return None;
        }
        Some(Ok((a, recent.swap_remove(i).slot)))
    }

    /// Remove the live range that starts exactly at `base` if `accept` agrees.
    pub fn remove_if(
        &self,
        base: DevicePtr,
        device: &str,
        accept: impl Fn(&Allocation) -> Result<()>,
    ) -> Result<Allocation> {
        let (a, slot) = self.retire(base, device, accept)?;
        self.forget(&slot);
        Ok(a)
    }

    /// Remove the allocation that starts exactly at `base`.
    pub fn remove(&self, base: DevicePtr, device: &str) -> Result<Allocation> {
        self.remove_if(base, device, |_| Ok(()))
    }

    #[inline]
    fn with_recent<R>(&self, f: impl FnOnce(&mut Vec<Recent>) -> R) -> Option<R> {
        crate::memory::with_thread(|t| f(&mut t.recent))
    }

    /// Remember `slot`, handing it over (a pooled block coming back to
    /// life: its next free takes it back out without touching counts).
    #[inline]
    pub fn remember_owned(&self, slot: Arc<Slot>) {
        self.with_recent(|r| self.remember_owned_in(r, slot));
    }

    /// The slot comes from a pool, so it is not among the recent ones
    /// (a stale duplicate is harmless): appended, the oldest dropped.
    #[inline]
    pub(crate) fn remember_owned_in(&self, r: &mut Vec<Recent>, slot: Arc<Slot>) {
        if r.len() >= RECENT {
            r.remove(0);
        }
        r.push(Recent {
            index: self.id,
            base: slot.base.0,
            limit: slot.base.0 + slot.capacity as u64,
            slot,
        });
    }

    /// Remember `slot` for this thread's next checks (most recent first).
    #[inline]
    pub fn remember(&self, slot: &Arc<Slot>) {
        self.with_recent(|r| {
            if r.iter().any(|e| Arc::ptr_eq(&e.slot, slot)) {
                return;
            }
            if r.len() >= RECENT {
                r.remove(0);
            }
            r.push(Recent {
                index: self.id,
                base: slot.base.0,
                limit: slot.base.0 + slot.capacity as u64,
                slot: slot.clone(),
            });
        });
    }

    /// The live range containing `ptr` (interior pointers included).
    #[inline]
    pub fn find(&self, ptr: DevicePtr) -> Option<Allocation> {
        self.find_slot(ptr).and_then(|s| s.live())
    }

    fn find_slot(&self, ptr: DevicePtr) -> Option<Arc<Slot>> {
        self.map.find_map(ptr, |slot| {
            let a = slot.live()?;
            a.contains(ptr).then(|| slot.clone())
        })
    }

    /// The live range holding all of `[ptr, ptr + size)`, or an error that
    /// says what is wrong with the range.
    #[inline]
    pub fn check(&self, ptr: DevicePtr, size: usize, device: &str) -> Result<Allocation> {
        let inside = |a: &Allocation| {
            ptr.0 >= a.base.0
                && ptr
                    .0
                    .checked_add(size as u64)
                    .is_some_and(|e| e <= a.base.0 + a.size as u64)
        };
        let cached = self.with_recent(|r| {
            r.iter()
                .filter(|e| e.index == self.id && ptr.0 >= e.base && ptr.0 < e.limit)
                .find_map(|e| e.slot.live().filter(|a| inside(a)))
        });
        if let Some(a) = cached.flatten() {
            return Ok(a);
        }
        let Some(slot) = self.find_slot(ptr) else {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("{ptr} is not inside a live allocation of {device}"),
            ));
        };
        let Some(a) = slot.live() else {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("{ptr} is not inside a live allocation of {device}"),
            ));
        };
        if !inside(&a) {
            return Err(Error::new(
                ErrorCode::InvalidSize,
                format!(
                    "{size} bytes at {ptr} run past the end of the {}-byte allocation at {} on {device}",
                    a.size, a.base
                ),
            ));
        }
        self.remember(&slot);
        Ok(a)
    }

    /// Every live range, each once, in address order.
    pub fn all(&self) -> Vec<Allocation> {
        let mut out: Vec<Allocation> = Vec::new();
        self.map.for_each(|x| out.extend(x.live()));
        out.sort_by_key(|a| a.base);
        out
    }

    pub fn len(&self) -> usize {
        self.all().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take every live range out (shutdown); cached slots stay with their
    /// pool.
    pub fn drain(&self) -> Vec<Allocation> {
        let mut out = Vec::new();
        self.map.retain(|slot| match slot.live() {
            Some(a) => {
                out.push(a);
                slot.state.store(DEAD, Ordering::Release);
                false
            }
            None => slot.state.load(Ordering::Acquire) == CACHED,
        });
        // Cached slots are allocations: no foreign range is left.
        self.foreign.store(0, Ordering::Release);
        out.sort_by_key(|a| a.base);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(base: u64, size: usize) -> Allocation {
        Allocation {
            base: DevicePtr(base),
            size,
            kind: AllocKind::Device,
            origin: Origin::Alloc(AllocKind::Device),
            owner: Owner::RUNTIME,
        }
    }

    #[test]
    fn index_finds_ranges_across_shards_and_checks_bounds() {
        let t = AllocationIndex::default();
        // Spans granules 0..=2 of shards 1..=3; a large one spans every shard.
        t.insert(alloc(0x1_fff0, 0x2_0020)).unwrap();
        t.insert(alloc(0x100_0000, 4 << 20)).unwrap();
        for p in [0x1_fff0u64, 0x2_0000, 0x3_ffff, 0x4_000f] {
            assert_eq!(
                t.find(DevicePtr(p)).unwrap().base,
                DevicePtr(0x1_fff0),
                "{p:#x}"
            );
        }
        assert!(t.find(DevicePtr(0x4_0010)).is_none());
        assert_eq!(
            t.find(DevicePtr(0x100_0000 + (3 << 20) + 5)).unwrap().size,
            4 << 20
        );
        t.check(DevicePtr(0x2_0000), 0x2_0010, "d").unwrap();
        let e = t.check(DevicePtr(0x2_0000), 0x2_0011, "d").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSize);
        let e = t.check(DevicePtr(0x1000), 1, "d").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(t.check(DevicePtr(0x2_0000), usize::MAX, "d").is_err());
        // Registrations overlapping a live range are refused; the index is
        // unchanged.
        let reg = Allocation {
            origin: Origin::Registered,
            ..alloc(0x4_0000, 0x100)
        };
        assert!(t.insert(reg).is_err());
        assert!(t.insert(alloc(u64::MAX - 4, 16)).is_err(), "wraps");
        assert_eq!(t.len(), 2);
        t.remove(DevicePtr(0x1_fff0), "d").unwrap();
        assert!(t.find(DevicePtr(0x3_0000)).is_none());
        assert_eq!(t.drain().len(), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn index_catches_double_and_interior_frees() {
        let t = AllocationIndex::default();
        t.insert(alloc(0x100, 0x40)).unwrap();
        assert_eq!(t.find(DevicePtr(0x120)).unwrap().base, DevicePtr(0x100));
        assert!(t.find(DevicePtr(0x140)).is_none());
        let e = t.remove(DevicePtr(0x110), "device 0").unwrap_err();
        assert!(e.message().contains("inside the allocation"), "{e}");
        t.remove(DevicePtr(0x100), "device 0").unwrap();
        let e = t.remove(DevicePtr(0x100), "device 0").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(e.message().contains("double free"), "{e}");
    }

    /// A retired (cached) slot is no live memory: checks fail, a second
    /// free is a double free, and reviving it makes it live again with the
    /// new size. The per-thread cache never outlives the state.
    #[test]
    fn cached_slots_are_not_live_until_revived() {
        let t = AllocationIndex::default();
        t.insert_with_capacity(alloc(0x8000, 24), 32).unwrap();
        t.check(DevicePtr(0x8000), 24, "d").unwrap();
        let (_, slot) = t.retire(DevicePtr(0x8000), "d", |_| Ok(())).unwrap();
        assert!(t.check(DevicePtr(0x8000), 1, "d").is_err());
        assert!(t.find(DevicePtr(0x8000)).is_none());
        assert!(t.retire(DevicePtr(0x8000), "d", |_| Ok(())).is_err());
        assert!(t.is_empty());
        slot.revive(32, Owner(7));
        let a = t.check(DevicePtr(0x8000), 32, "d").unwrap();
        assert_eq!(a.owner, Owner(7));
        t.forget(&slot);
        assert!(
            t.check(DevicePtr(0x8000), 1, "d").is_err(),
            "cache must not resurrect it"
        );
        // Another thread sees the same state.
        let t = Arc::new(t);
        t.insert(alloc(0x9000, 8)).unwrap();
        let t2 = t.clone();
        std::thread::spawn(move || t2.remove(DevicePtr(0x9000), "d").unwrap())
            .join()
            .unwrap();
        assert!(t.check(DevicePtr(0x9000), 8, "d").is_err());
    }

    /// Ranges crossing granule boundaries live in the large table: found
    /// from any interior address, next to small ranges of the same
    /// shards, and gone (count back to zero) once freed.
    #[test]
    fn large_ranges_are_found_from_every_granule() {
        let idx = AllocationIndex::default();
        let g = 1u64 << crate::range_map::GRANULE_SHIFT;
        let big = 5 * g - 64;
        idx.insert(alloc(big, 3 * g as usize)).unwrap();
        let small = 20 * g + 128;
        idx.insert(alloc(small, 256)).unwrap();
        for p in [big, 5 * g, 6 * g + 7, big + 3 * g - 1] {
            assert_eq!(
                idx.find(DevicePtr(p)).map(|a| a.base.0),
                Some(big),
                "{p:#x}"
            );
        }
        assert!(idx.find(DevicePtr(big + 3 * g)).is_none());
        assert_eq!(
            idx.find(DevicePtr(small + 8)).map(|a| a.base.0),
            Some(small)
        );
        assert_eq!(idx.all().len(), 2);
        idx.remove(DevicePtr(big), "dev").unwrap();
        assert!(idx.find(DevicePtr(6 * g)).is_none());
        assert_eq!(idx.map.spanning_len(), 0);
        assert!(idx.remove(DevicePtr(big), "dev").is_err(), "double free");
        idx.remove(DevicePtr(small), "dev").unwrap();
        assert!(idx.is_empty());
    }
}
