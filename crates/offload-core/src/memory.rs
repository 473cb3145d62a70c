//! Device memory bookkeeping shared by every plugin.
//!
//! * [`MemoryPool`]: the caching allocator. Requests up to a threshold
//!   (`LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`, default 8 KiB, 0 = off) are
//!   rounded up to a power-of-two size class and served from per-class free
//!   lists, so map/unmap cycles do not reach the device allocator.
//! * [`AllocationTable`]: every live user allocation, ordered by address, so
//!   frees of unknown pointers are caught (double free, foreign pointer) and
//!   an interior pointer can be traced to its allocation.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::{Error, ErrorCode, Result};
use crate::plugin::{AllocKind, DevicePtr};

/// Smallest size class (bytes); smaller requests share it.
const MIN_CLASS: usize = 16;

/// A caching allocator in front of a device allocator.
pub struct MemoryPool {
    threshold: usize,
    /// `classes[i]` holds free blocks of `MIN_CLASS << i` bytes.
    classes: Vec<Mutex<Vec<DevicePtr>>>,
}

impl MemoryPool {
    /// A pool that caches requests of at most `threshold` bytes (0 disables it).
    pub fn new(threshold: usize) -> Self {
        let n = if threshold == 0 {
            0
        } else {
            class_index(threshold) + 1
        };
        MemoryPool {
            threshold,
            classes: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Size class a request falls in, or None when it bypasses the pool.
    fn class_of(&self, size: usize) -> Option<usize> {
        (size > 0 && size <= self.threshold).then(|| class_index(size))
    }

    /// Allocate `size` bytes, reusing a cached block when one fits.
    /// `backend` allocates from the device.
    pub fn alloc(
        &self,
        size: usize,
        backend: impl FnOnce(usize) -> Result<DevicePtr>,
    ) -> Result<DevicePtr> {
        match self.class_of(size) {
            None => backend(size),
            Some(c) => {
                if let Some(p) = self.classes[c]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop()
                {
                    return Ok(p);
                }
                backend(MIN_CLASS << c)
            }
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
        match self.class_of(size) {
            None => backend(ptr),
            Some(c) => {
                self.classes[c]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(ptr);
                Ok(())
            }
        }
    }

    /// Hand every cached block back to the device.
    pub fn release_all(&self, mut backend: impl FnMut(DevicePtr) -> Result<()>) -> Result<()> {
        let mut first_err = None;
        for class in &self.classes {
            let blocks = std::mem::take(&mut *class.lock().unwrap_or_else(|e| e.into_inner()));
            for p in blocks {
                if let Err(e) = backend(p) {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Number of cached (free) blocks, for tests and statistics.
    pub fn cached_blocks(&self) -> usize {
        self.classes
            .iter()
            .map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

fn class_index(size: usize) -> usize {
    let rounded = size.max(MIN_CLASS).next_power_of_two();
    (rounded / MIN_CLASS).trailing_zeros() as usize
}

/// A live allocation as the user sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub base: DevicePtr,
    pub size: usize,
    pub kind: AllocKind,
}

/// Live allocations of one device, by base address.
#[derive(Default)]
pub struct AllocationTable {
    live: Mutex<BTreeMap<u64, (usize, AllocKind)>>,
}

impl AllocationTable {
    pub fn insert(&self, a: Allocation) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(a.base.0, (a.size, a.kind));
    }

    /// Remove the allocation that starts exactly at `base`.
    pub fn remove(&self, base: DevicePtr, device: &str) -> Result<Allocation> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        match live.remove(&base.0) {
            Some((size, kind)) => Ok(Allocation { base, size, kind }),
            None => {
                let inside = live
                    .range(..=base.0)
                    .next_back()
                    .filter(|(b, (s, _))| base.0 < **b + *s as u64)
                    .map(|(b, _)| *b);
                let msg = match inside {
                    Some(b) => format!(
                        "pointer {base} is inside the allocation at {} on {device}, not its start",
                        DevicePtr(b)
                    ),
                    None => format!(
                        "pointer {base} is not a live allocation on {device} (double free or foreign pointer)"
                    ),
                };
                Err(Error::new(ErrorCode::InvalidArgument, msg))
            }
        }
    }

    /// The allocation containing `ptr` (interior pointers included).
    pub fn find(&self, ptr: DevicePtr) -> Option<Allocation> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let (&b, &(size, kind)) = live.range(..=ptr.0).next_back()?;
        (ptr.0 < b + size.max(1) as u64).then_some(Allocation {
            base: DevicePtr(b),
            size,
            kind,
        })
    }

    pub fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take every live allocation out (shutdown).
    pub fn drain(&self) -> Vec<Allocation> {
        let live = std::mem::take(&mut *self.live.lock().unwrap_or_else(|e| e.into_inner()));
        live.into_iter()
            .map(|(b, (size, kind))| Allocation {
                base: DevicePtr(b),
                size,
                kind,
            })
            .collect()
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

    #[test]
    fn table_catches_double_and_interior_frees() {
        let t = AllocationTable::default();
        t.insert(Allocation {
            base: DevicePtr(0x100),
            size: 0x40,
            kind: AllocKind::Device,
        });
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
