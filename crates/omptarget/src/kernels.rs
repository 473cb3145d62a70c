//! Region id -> kernel, read on every launch without a lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// A kernel pointer kept alive by the device's loaded programs.
#[derive(Clone, Copy)]
pub struct KernelRef(pub *const offload_core::Kernel);
// SAFETY: `offload_core::Kernel` is Send + Sync; the pointee is kept alive
// by the `Arc<Kernel>` in the device's `LoadState::loaded` until the kernel
// map has forgotten it (see `DevState::unload`).
unsafe impl Send for KernelRef {}
// SAFETY: as for `Send`: shared access to a `Sync` kernel.
unsafe impl Sync for KernelRef {}

/// Region id -> kernel, read on every launch without a lock: readers load
/// an immutable map; (rare) updates at image load/unload publish a new copy.
/// Replaced maps are kept until exit so a concurrent reader never sees a
/// freed one.
#[derive(Default)]
pub(crate) struct KernelMap {
    current: AtomicPtr<KMap>,
    // Boxed on purpose: readers may still hold the published address.
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<KMap>>>,
}

/// Region ids are addresses: a multiplicative hash is enough.
type KMap = HashMap<u64, KernelRef, offload_core::hash::AddrHash>;

impl KernelMap {
    #[inline]
    pub(crate) fn get(&self, region: u64) -> Option<KernelRef> {
        let p = self.current.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: published maps are never freed before the process exits.
        unsafe { &*p }.get(&region).copied()
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut KMap)) {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.current.load(Ordering::Acquire);
        let mut next = if cur.is_null() {
            KMap::default()
        } else {
            // SAFETY: see `get`; updates are serialised by `retired`.
            unsafe { &*cur }.clone()
        };
        f(&mut next);
        self.current
            .store(Box::into_raw(Box::new(next)), Ordering::Release);
        if !cur.is_null() {
            // SAFETY: `cur` came from `Box::into_raw` and is no longer published.
            retired.push(unsafe { Box::from_raw(cur) });
        }
    }
}
