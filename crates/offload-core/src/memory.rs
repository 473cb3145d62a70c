//! Device memory bookkeeping shared by every plugin.
//!
//! * [`MemoryPool`]: the caching allocator. Requests up to a threshold
//!   (`LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`, default 8 KiB, 0 = off) are
//!   rounded up to a power-of-two size class and served from per-class free
//!   lists, so map/unmap cycles do not reach the device allocator.
//!   A thread-local front keeps recently freed blocks per thread, so threads
//!   that map their own data share no lock and no cache line.
//!   Cached blocks keep their [`Slot`] in the allocation index
//!   ([`crate::index`]), marked not live: taking one from the pool and
//!   giving it back touch no shared structure.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::plugin::DevicePtr;

pub use crate::index::{Allocation, AllocationIndex, Origin, Owner, Slot};

/// A cached block: its slot in the device's allocation index.
pub type Block = Arc<Slot>;

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
    classes: Vec<Mutex<Vec<Block>>>,
    /// Owned blocks (see [`MemoryPool::take_owned_in`]), by class.
    owned: Vec<Mutex<Vec<DevicePtr>>>,
}

/// Blocks one thread keeps per size class before giving them to the pool.
const FRONT_PER_CLASS: usize = 32;

/// One thread's free lists for one pool.
struct Front {
    pool: u64,
    shared: Weak<SharedLists>,
    classes: Vec<Vec<Block>>,
    owned: Vec<Vec<DevicePtr>>,
}

/// What one thread keeps for the allocator: its pool fronts (handed back
/// to the pools at thread exit) and the slots it used last (see
/// [`crate::index`]). One thread-local for both, so an allocation or a free
/// costs one thread-local access.
#[derive(Default)]
pub(crate) struct ThreadState {
    fronts: Vec<Front>,
    pub(crate) recent: Vec<crate::index::Recent>,
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        for f in self.fronts.drain(..) {
            if let Some(shared) = f.shared.upgrade() {
                for (c, blocks) in f.classes.into_iter().enumerate() {
                    shared.classes[c]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(blocks);
                }
                for (c, blocks) in f.owned.into_iter().enumerate() {
                    shared.owned[c]
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(blocks);
                }
            }
        }
    }
}

thread_local! {
    static THREAD: RefCell<ThreadState> = const {
        RefCell::new(ThreadState { fronts: Vec::new(), recent: Vec::new() })
    };
}

/// Run `f` on this thread's allocator state; None once thread-local storage
/// is gone (thread exit) or when called re-entrantly.
#[inline]
pub(crate) fn with_thread<R>(f: impl FnOnce(&mut ThreadState) -> R) -> Option<R> {
    THREAD
        .try_with(|t| t.try_borrow_mut().ok().map(|mut t| f(&mut t)))
        .ok()
        .flatten()
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
                owned: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            }),
        }
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Size class a request falls in, or None when it bypasses the pool.
    #[inline]
    fn class_of(&self, size: usize) -> Option<usize> {
        (size > 0 && size <= self.threshold).then(|| class_index(size))
    }

    /// This pool's front in a thread's state.
    #[inline]
    fn front_of<'t>(&self, t: &'t mut ThreadState) -> &'t mut Front {
        let i = match t.fronts.iter().position(|x| x.pool == self.id) {
            Some(i) => i,
            None => self.add_front(t),
        };
        &mut t.fronts[i]
    }

    /// A thread's first use of this pool (kept out of line: the lookup
    /// above runs on every allocation).
    #[cold]
    fn add_front(&self, t: &mut ThreadState) -> usize {
        let n = self.shared.classes.len();
        t.fronts.push(Front {
            pool: self.id,
            shared: Arc::downgrade(&self.shared),
            classes: vec![Vec::new(); n],
            owned: vec![Vec::new(); n],
        });
        t.fronts.len() - 1
    }

    /// This pool's lists in a thread's state.
    #[inline]
    fn front_in<'t>(&self, t: &'t mut ThreadState) -> &'t mut Vec<Vec<Block>> {
        &mut self.front_of(t).classes
    }

    /// A cached owned block for `size` bytes. Owned blocks are a face's own
    /// runtime blocks (OpenMP's mapped data): they stay live ranges of the
    /// allocation index while cached, so taking and giving one back touch
    /// neither the index nor any shared cache line.
    #[inline]
    pub(crate) fn take_owned_in(&self, t: &mut ThreadState, size: usize) -> Option<DevicePtr> {
        let c = self.class_of(size)?;
        match self.front_of(t).owned[c].pop() {
            Some(p) => Some(p),
            None => self.take_owned_shared(c),
        }
    }

    #[cold]
    fn take_owned_shared(&self, c: usize) -> Option<DevicePtr> {
        self.shared.owned[c]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }

    /// Keep an owned block of a request of `size` bytes (a pooled class).
    #[inline]
    pub(crate) fn put_owned_in(&self, t: &mut ThreadState, size: usize, ptr: DevicePtr) {
        let Some(c) = self.class_of(size) else {
            return;
        };
        let front = &mut self.front_of(t).owned[c];
        if front.len() < FRONT_PER_CLASS {
            front.push(ptr);
        } else {
            self.put_owned_shared(c, ptr);
        }
    }

    #[cold]
    fn put_owned_shared(&self, c: usize, ptr: DevicePtr) {
        self.shared.owned[c]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ptr);
    }

    /// Forget every cached owned block (shutdown: their ranges are freed
    /// with the index's live ranges).
    pub(crate) fn drain_owned(&self) -> Vec<DevicePtr> {
        let mut out = with_thread(|t| {
            self.front_of(t)
                .owned
                .iter_mut()
                .flat_map(std::mem::take)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
        for class in &self.shared.owned {
            out.append(&mut class.lock().unwrap_or_else(|e| e.into_inner()));
        }
        out
    }

    /// Run `f` on this thread's lists for this pool; None once the
    /// thread-local storage is gone (thread exit).
    #[inline]
    fn with_front<R>(&self, f: impl FnOnce(&mut Vec<Vec<Block>>) -> R) -> Option<R> {
        with_thread(|t| f(self.front_in(t)))
    }

    /// The block size a request of `size` bytes is served with, when the
    /// pool serves it.
    #[inline]
    pub fn class_size(&self, size: usize) -> Option<usize> {
        self.class_of(size).map(|c| MIN_CLASS << c)
    }

    /// A cached block for a request of `size` bytes, if one is free.
    #[inline]
    pub fn take(&self, size: usize) -> Option<Block> {
        let c = self.class_of(size)?;
        if let Some(b) = self.with_front(|f| f[c].pop()).flatten() {
            return Some(b);
        }
        self.take_shared(c)
    }

    /// [`MemoryPool::take`] with this thread's state in hand.
    #[inline]
    pub(crate) fn take_in(&self, t: &mut ThreadState, size: usize) -> Option<Block> {
        let c = self.class_of(size)?;
        self.front_in(t)[c].pop().or_else(|| self.take_shared(c))
    }

    fn take_shared(&self, c: usize) -> Option<Block> {
        self.shared.classes[c]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }

    /// [`MemoryPool::put`] with this thread's state in hand.
    #[inline]
    pub(crate) fn put_in(&self, t: &mut ThreadState, size: usize, block: Block) {
        let Some(c) = self.class_of(size) else {
            return;
        };
        let front = &mut self.front_in(t)[c];
        if front.len() < FRONT_PER_CLASS {
            front.push(block);
        } else {
            self.shared.classes[c]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(block);
        }
    }

    /// Keep `block`, of a request of `size` bytes (its class must be pooled).
    #[inline]
    pub fn put(&self, size: usize, block: Block) {
        let Some(c) = self.class_of(size) else {
            debug_assert!(false, "put of an unpooled size");
            return;
        };
        let mut block = Some(block);
        self.with_front(|f| {
            if f[c].len() < FRONT_PER_CLASS {
                f[c].extend(block.take());
            }
        });
        if let Some(block) = block {
            self.shared.classes[c]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(block);
        }
    }

    /// Take every cached block out: the shared lists and the calling
    /// thread's front (other threads' fronts go to the shared lists when
    /// those threads exit).
    pub fn drain(&self) -> Vec<Block> {
        let mut blocks = self
            .with_front(|f| f.iter_mut().flat_map(std::mem::take).collect::<Vec<_>>())
            .unwrap_or_default();
        for class in &self.shared.classes {
            blocks.append(&mut class.lock().unwrap_or_else(|e| e.into_inner()));
        }
        blocks
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

#[inline]
fn class_index(size: usize) -> usize {
    let rounded = size.max(MIN_CLASS).next_power_of_two();
    (rounded / MIN_CLASS).trailing_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{AllocKind, DevicePtr};

    fn block(index: &AllocationIndex, base: u64, size: usize) -> Block {
        index
            .insert(Allocation {
                base: DevicePtr(base),
                size,
                kind: AllocKind::Device,
                origin: Origin::Alloc(AllocKind::Device),
                owner: Owner::RUNTIME,
            })
            .unwrap()
    }

    #[test]
    fn size_classes() {
        assert_eq!(class_index(1), 0);
        assert_eq!(class_index(16), 0);
        assert_eq!(class_index(17), 1);
        assert_eq!(class_index(8192), 9);
        let pool = MemoryPool::new(8192);
        assert_eq!(pool.class_size(100), Some(128));
        assert_eq!(pool.class_size(8193), None);
        assert_eq!(MemoryPool::new(0).class_size(16), None);
    }

    #[test]
    fn pool_reuses_blocks_of_the_same_class() {
        let index = AllocationIndex::default();
        let pool = MemoryPool::new(8192);
        assert!(pool.take(100).is_none());
        let a = block(&index, 0x1000, 100);
        pool.put(100, a.clone());
        assert!(pool.take(1000).is_none(), "another class");
        let b = pool.take(120).expect("same class");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(pool.cached_blocks(), 0);
    }

    #[test]
    fn drain_returns_cached_blocks() {
        let index = AllocationIndex::default();
        let pool = MemoryPool::new(1024);
        pool.put(10, block(&index, 0x10, 10));
        pool.put(1000, block(&index, 0x4000, 1000));
        let mut got: Vec<u64> = pool.drain().iter().map(|b| b.base().0).collect();
        got.sort();
        assert_eq!(got, vec![0x10, 0x4000]);
        assert_eq!(pool.cached_blocks(), 0);
    }

    #[test]
    fn pool_front_is_per_thread_and_returns_at_exit() {
        let index = AllocationIndex::default();
        let pool = Arc::new(MemoryPool::new(1024));
        let b = block(&index, 0x40, 64);
        let p2 = pool.clone();
        std::thread::spawn(move || {
            p2.put(64, b);
            assert_eq!(p2.cached_blocks(), 1);
        })
        .join()
        .unwrap();
        // The exiting thread handed its block to the shared lists.
        assert_eq!(pool.take(64).unwrap().base(), DevicePtr(0x40));
    }
}
