//! Device memory bookkeeping shared by every plugin.
//!
//! * [`MemoryPool`]: the caching allocator. Requests up to a threshold
//!   (`LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`, default 8 KiB, 0 = off) are
//!   rounded up to a power-of-two size class and served from per-class free
//!   lists, so map/unmap cycles do not reach the device allocator.
//!   A thread-local front keeps recently freed blocks per thread, so threads
//!   that map their own data share no lock and no cache line.
//! * [`AllocationIndex`]: every live range of device memory a caller may name
//!   (user allocations, program globals, registered host memory), with its
//!   owner. Frees of unknown pointers are caught (double free, foreign
//!   pointer), an interior pointer is traced to its allocation, and every
//!   copy or fill is checked against the ranges it touches. It is sharded by
//!   address so threads working on different memory do not contend.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::error::{Error, ErrorCode, Result};
use crate::plugin::{AllocKind, DevicePtr};

/// Smallest size class (bytes); smaller requests share it.
const MIN_CLASS: usize = 16;

/// A caching allocator in front of a device allocator.
pub struct MemoryPool {
    threshold: usize,
    id: u64,
    shared: Arc<SharedLists>,
}

/// The pool's shared free lists: `classes[i]` holds blocks of `MIN_CLASS << i` bytes.
struct SharedLists {
    classes: Vec<Mutex<Vec<DevicePtr>>>,
}

/// Blocks one thread keeps per size class before giving them to the pool.
const FRONT_PER_CLASS: usize = 32;

/// One thread's free lists for one pool.
struct Front {
    pool: u64,
    shared: Weak<SharedLists>,
    classes: Vec<Vec<DevicePtr>>,
}

/// Every front of this thread; handed back to the pools at thread exit.
struct Fronts(Vec<Front>);

impl Drop for Fronts {
    fn drop(&mut self) {
        for f in self.0.drain(..) {
            if let Some(shared) = f.shared.upgrade() {
                for (c, blocks) in f.classes.into_iter().enumerate() {
                    shared.classes[c]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(blocks);
                }
            }
        }
    }
}

thread_local! {
    static FRONTS: RefCell<Fronts> = const { RefCell::new(Fronts(Vec::new())) };
}

impl MemoryPool {
    /// A pool that caches requests of at most `threshold` bytes (0 disables it).
    pub fn new(threshold: usize) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(1);
        let n = if threshold == 0 {
            0
        } else {
            class_index(threshold) + 1
        };
        MemoryPool {
            threshold,
            id: IDS.fetch_add(1, Ordering::Relaxed),
            shared: Arc::new(SharedLists {
                classes: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            }),
        }
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Size class a request falls in, or None when it bypasses the pool.
    fn class_of(&self, size: usize) -> Option<usize> {
        (size > 0 && size <= self.threshold).then(|| class_index(size))
    }

    /// Run `f` on this thread's lists for this pool; None once the
    /// thread-local storage is gone (thread exit).
    #[inline]
    fn with_front<R>(&self, f: impl FnOnce(&mut Vec<Vec<DevicePtr>>) -> R) -> Option<R> {
        FRONTS
            .try_with(|fr| {
                let mut fr = fr.try_borrow_mut().ok()?;
                let i = match fr.0.iter().position(|x| x.pool == self.id) {
                    Some(i) => i,
                    None => {
                        fr.0.push(Front {
                            pool: self.id,
                            shared: Arc::downgrade(&self.shared),
                            classes: vec![Vec::new(); self.shared.classes.len()],
                        });
                        fr.0.len() - 1
                    }
                };
                Some(f(&mut fr.0[i].classes))
            })
            .ok()
            .flatten()
    }

    /// Allocate `size` bytes, reusing a cached block when one fits.
    /// `backend` allocates from the device.
    pub fn alloc(
        &self,
        size: usize,
        backend: impl FnOnce(usize) -> Result<DevicePtr>,
    ) -> Result<DevicePtr> {
        let Some(c) = self.class_of(size) else {
            return backend(size);
        };
        if let Some(p) = self.with_front(|f| f[c].pop()).flatten() {
            return Ok(p);
        }
        let cached = self.shared.classes[c]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        match cached {
            Some(p) => Ok(p),
            None => backend(MIN_CLASS << c),
        }
    }

    /// Return a block of the `size` it was requested with. Pooled sizes are
    /// kept for reuse; others go to `backend`.
    pub fn free(
        &self,
        ptr: DevicePtr,
        size: usize,
        backend: impl FnOnce(DevicePtr) -> Result<()>,
    ) -> Result<()> {
        let Some(c) = self.class_of(size) else {
            return backend(ptr);
        };
        let kept = self.with_front(|f| (f[c].len() < FRONT_PER_CLASS).then(|| f[c].push(ptr)));
        if kept.flatten().is_none() {
            self.shared.classes[c]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(ptr);
        }
        Ok(())
    }

    /// Hand every cached block back to the device: the shared lists and the
    /// calling thread's front (other threads' fronts are returned to the
    /// shared lists when those threads exit).
    pub fn release_all(&self, mut backend: impl FnMut(DevicePtr) -> Result<()>) -> Result<()> {
        let mut first_err = None;
        let mine = self
            .with_front(|f| f.iter_mut().flat_map(std::mem::take).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut blocks = mine;
        for class in &self.shared.classes {
            blocks.append(&mut class.lock().unwrap_or_else(|e| e.into_inner()));
        }
        for p in blocks {
            if let Err(e) = backend(p) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Number of cached (free) blocks in the shared lists and this thread's
    /// front, for tests and statistics.
    pub fn cached_blocks(&self) -> usize {
        let front = self
            .with_front(|f| f.iter().map(Vec::len).sum::<usize>())
            .unwrap_or(0);
        front
            + self
                .shared
                .classes
                .iter()
                .map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).len())
                .sum::<usize>()
    }
}

fn class_index(size: usize) -> usize {
    let rounded = size.max(MIN_CLASS).next_power_of_two();
    (rounded / MIN_CLASS).trailing_zeros() as usize
}

/// Who made a range: lets one face (or one server session) free and check
/// only its own memory. `Owner::RUNTIME` is everything the faces of this
/// process allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Owner(pub u64);

impl Owner {
    pub const RUNTIME: Owner = Owner(0);
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

/// A live range of device memory.
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

const SHARDS: usize = 16;
/// Ranges are filed under the 64 KiB granules they touch, modulo `SHARDS`.
const GRANULE_SHIFT: u32 = 16;

/// Live ranges of one device, sharded by address. A range is filed in every
/// shard one of its granules maps to, so the shard of any address inside it
/// holds it; ranges never overlap, so the greatest base at or below an
/// address in that shard is the only candidate.
pub struct AllocationIndex {
    shards: [RwLock<BTreeMap<u64, Allocation>>; SHARDS],
}

/// Key of a sentinel kept in every shard: a B-tree that never becomes
/// empty never frees and re-allocates its root node, which would otherwise
/// cost a malloc/free pair per allocation of a device with one live range.
const SENTINEL: u64 = u64::MAX;

impl Default for AllocationIndex {
    fn default() -> Self {
        let sentinel = Allocation {
            base: DevicePtr(SENTINEL),
            size: 0,
            kind: AllocKind::Device,
            origin: Origin::Global,
            owner: Owner::RUNTIME,
        };
        AllocationIndex {
            shards: std::array::from_fn(|_| RwLock::new(BTreeMap::from([(SENTINEL, sentinel)]))),
        }
    }
}

fn shard_of(addr: u64) -> usize {
    ((addr >> GRANULE_SHIFT) as usize) % SHARDS
}

/// The shards a range is filed in (ascending, no repeats).
fn shards_of(base: u64, size: usize) -> impl Iterator<Item = usize> {
    let first = base >> GRANULE_SHIFT;
    let last = base.saturating_add(size.max(1) as u64 - 1) >> GRANULE_SHIFT;
    let span = last - first + 1;
    let mut set = [false; SHARDS];
    if span >= SHARDS as u64 {
        set = [true; SHARDS];
    } else {
        for g in first..=last {
            set[(g as usize) % SHARDS] = true;
        }
    }
    (0..SHARDS).filter(move |&s| set[s])
}

impl AllocationIndex {
    /// File a new range. A registration or global overlapping a live range
    /// is an error.
    pub fn insert(&self, a: Allocation) -> Result<()> {
        if a.base.0 == SENTINEL || a.base.0.checked_add(a.size as u64).is_none() {
            return Err(Error::new(
                ErrorCode::InvalidSize,
                format!("[{}, +{}) wraps around the address space", a.base, a.size),
            ));
        }
        // Registrations and globals may overlap live memory; a device
        // allocator never hands out memory that is still live.
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
        for s in shards_of(a.base.0, a.size) {
            self.shards[s]
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(a.base.0, a);
        }
        Ok(())
    }

    /// Remove the range that starts exactly at `base` if `accept` agrees.
    pub fn remove_if(
        &self,
        base: DevicePtr,
        device: &str,
        accept: impl FnOnce(&Allocation) -> Result<()>,
    ) -> Result<Allocation> {
        let home = shard_of(base.0);
        let a = {
            let mut shard = self.shards[home].write().unwrap_or_else(|e| e.into_inner());
            match shard.entry(base.0) {
                std::collections::btree_map::Entry::Occupied(e) if base.0 != SENTINEL => {
                    accept(e.get())?;
                    e.remove()
                }
                _ => {
                    let msg = match shard
                        .range(..=base.0)
                        .next_back()
                        .filter(|(_, a)| a.contains(base))
                    {
                        Some((_, a)) => format!(
                            "pointer {base} is inside the allocation at {} on {device}, not its start",
                            a.base
                        ),
                        None => format!(
                            "pointer {base} is not a live allocation on {device} (double free or foreign pointer)"
                        ),
                    };
                    return Err(Error::new(ErrorCode::InvalidArgument, msg));
                }
            }
        };
        for s in shards_of(a.base.0, a.size).filter(|&s| s != home) {
            self.shards[s]
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&a.base.0);
        }
        Ok(a)
    }

    /// Remove the allocation that starts exactly at `base`.
    pub fn remove(&self, base: DevicePtr, device: &str) -> Result<Allocation> {
        self.remove_if(base, device, |_| Ok(()))
    }

    /// The live range containing `ptr` (interior pointers included).
    #[inline]
    pub fn find(&self, ptr: DevicePtr) -> Option<Allocation> {
        let shard = self.shards[shard_of(ptr.0)]
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let (_, a) = shard.range(..=ptr.0).next_back()?;
        a.contains(ptr).then_some(*a)
    }

    /// The live range holding all of `[ptr, ptr + size)`, or an error that
    /// says what is wrong with the range.
    pub fn check(&self, ptr: DevicePtr, size: usize, device: &str) -> Result<Allocation> {
        let Some(a) = self.find(ptr) else {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("{ptr} is not inside a live allocation of {device}"),
            ));
        };
        let end = ptr.0.checked_add(size as u64);
        if end.is_none_or(|e| e > a.base.0 + a.size as u64) {
            return Err(Error::new(
                ErrorCode::InvalidSize,
                format!(
                    "{size} bytes at {ptr} run past the end of the {}-byte allocation at {} on {device}",
                    a.size, a.base
                ),
            ));
        }
        Ok(a)
    }

    /// Every live range, each once, in address order.
    pub fn all(&self) -> Vec<Allocation> {
        let mut out: Vec<Allocation> = Vec::new();
        for (s, shard) in self.shards.iter().enumerate() {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            out.extend(
                shard
                    .values()
                    .filter(|a| a.base.0 != SENTINEL && shard_of(a.base.0) == s)
                    .copied(),
            );
        }
        out.sort_by_key(|a| a.base);
        out
    }

    pub fn len(&self) -> usize {
        self.all().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take every live range out (shutdown).
    pub fn drain(&self) -> Vec<Allocation> {
        let all = self.all();
        for shard in &self.shards {
            shard
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|&k, _| k == SENTINEL);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn size_classes() {
        assert_eq!(class_index(1), 0);
        assert_eq!(class_index(16), 0);
        assert_eq!(class_index(17), 1);
        assert_eq!(class_index(8192), 9);
    }

    #[test]
    fn pool_reuses_blocks_of_the_same_class() {
        let pool = MemoryPool::new(8192);
        let calls = Cell::new(0);
        let backend = |n: usize| {
            calls.set(calls.get() + 1);
            assert!(
                n.is_power_of_two(),
                "pooled requests are rounded to a class"
            );
            Ok(DevicePtr(0x1000 * calls.get() as u64))
        };
        let a = pool.alloc(100, backend).unwrap();
        pool.free(a, 100, |_| panic!("pooled block must not reach the device"))
            .unwrap();
        let b = pool
            .alloc(120, |_| panic!("cached block must be reused"))
            .unwrap();
        assert_eq!(a, b);
        // Another class does not reuse it.
        let c = pool.alloc(1000, backend).unwrap();
        assert_ne!(c, a);
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn pool_bypasses_large_and_disabled() {
        let pool = MemoryPool::new(8192);
        let freed = Cell::new(false);
        let p = pool.alloc(8193, |n| {
            assert_eq!(n, 8193);
            Ok(DevicePtr(8))
        });
        pool.free(p.unwrap(), 8193, |_| {
            freed.set(true);
            Ok(())
        })
        .unwrap();
        assert!(freed.get());
        assert_eq!(pool.cached_blocks(), 0);

        let off = MemoryPool::new(0);
        let p = off.alloc(16, |n| {
            assert_eq!(n, 16);
            Ok(DevicePtr(16))
        });
        let freed = Cell::new(false);
        off.free(p.unwrap(), 16, |_| {
            freed.set(true);
            Ok(())
        })
        .unwrap();
        assert!(freed.get());
    }

    #[test]
    fn release_all_returns_cached_blocks() {
        let pool = MemoryPool::new(1024);
        pool.free(DevicePtr(1), 10, |_| unreachable!()).unwrap();
        pool.free(DevicePtr(2), 1000, |_| unreachable!()).unwrap();
        let mut got = vec![];
        pool.release_all(|p| {
            got.push(p.0);
            Ok(())
        })
        .unwrap();
        got.sort();
        assert_eq!(got, vec![1, 2]);
        assert_eq!(pool.cached_blocks(), 0);
    }

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
    fn pool_front_is_per_thread_and_returns_at_exit() {
        let pool = Arc::new(MemoryPool::new(1024));
        let p2 = pool.clone();
        std::thread::spawn(move || {
            p2.free(DevicePtr(0x40), 64, |_| unreachable!()).unwrap();
            assert_eq!(p2.cached_blocks(), 1);
        })
        .join()
        .unwrap();
        // The exiting thread handed its block to the shared lists.
        assert_eq!(
            pool.alloc(64, |_| panic!("must reuse")).unwrap(),
            DevicePtr(0x40)
        );
    }

    #[test]
    fn table_catches_double_and_interior_frees() {
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
}
