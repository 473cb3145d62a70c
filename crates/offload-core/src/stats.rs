//! Per-device counters of what the core did: copies (count and bytes, by
//! direction), launches and allocations. Every copy and launch of every face
//! passes the core, so they are counted here once.
//!
//! Counting costs a shared atomic add, so it is on only when someone looks:
//! `LIBOMPTARGET_DEBUG`, `LIBOMPTARGET_PROFILE` or `OFFLOAD_STATS=1` (the
//! runtime prints a summary at shutdown under the first and last), or after
//! [`enable`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

static ON: AtomicBool = AtomicBool::new(false);

/// Start counting (also done by [`crate::Runtime::new`] when configured).
pub fn enable() {
    ON.store(true, Relaxed);
}

pub fn enabled() -> bool {
    ON.load(Relaxed)
}

#[derive(Default, Debug)]
pub struct Stats {
    pub to_device: Counter,
    pub from_device: Counter,
    pub device_to_device: Counter,
    pub launches: AtomicU64,
    pub allocs: Counter,
}

/// A number of operations and the bytes they moved.
#[derive(Default, Debug)]
pub struct Counter {
    pub count: AtomicU64,
    pub bytes: AtomicU64,
}

impl Counter {
    #[inline]
    fn add(&self, bytes: usize) {
        if enabled() {
            self.count.fetch_add(1, Relaxed);
            self.bytes.fetch_add(bytes as u64, Relaxed);
        }
    }
    pub fn get(&self) -> (u64, u64) {
        (self.count.load(Relaxed), self.bytes.load(Relaxed))
    }
}

impl Stats {
    /// Count a copy to the device. The core counts its own copies; a face
    /// that moves bytes itself (the server's data channel writing straight
    /// into memory the device shares with the host) counts them here.
    #[inline]
    pub fn count_to_device(&self, bytes: usize) {
        self.to_device.add(bytes);
    }
    /// Count a copy from the device (see [`Stats::count_to_device`]).
    #[inline]
    pub fn count_from_device(&self, bytes: usize) {
        self.from_device.add(bytes);
    }
    #[inline]
    pub(crate) fn count_device_to_device(&self, bytes: usize) {
        self.device_to_device.add(bytes);
    }
    #[inline]
    pub(crate) fn count_launch(&self) {
        if enabled() {
            self.launches.fetch_add(1, Relaxed);
        }
    }
    #[inline]
    pub(crate) fn count_alloc(&self, bytes: usize) {
        self.allocs.add(bytes);
    }

    /// One line: "h2d N (B bytes), d2h ..., launches N, allocs N (B bytes)".
    pub fn summary(&self) -> String {
        let (hc, hb) = self.to_device.get();
        let (dc, db) = self.from_device.get();
        let (pc, pb) = self.device_to_device.get();
        let (ac, ab) = self.allocs.get();
        format!(
            "host->device {hc} ({hb} bytes), device->host {dc} ({db} bytes), device->device {pc} ({pb} bytes), launches {}, allocations {ac} ({ab} bytes)",
            self.launches.load(Relaxed)
        )
    }
}
