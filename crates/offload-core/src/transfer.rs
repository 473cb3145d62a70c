//! Copies: the one place that decides which plugin call a copy becomes.
//!
//! A copy names two [`Location`]s. Host to host is a `memcpy`; host and
//! device is the device's copy in that direction; two devices are the same
//! device (copy within), peers of one plugin that can copy directly, or
//! anything else staged through host memory. Every device-side range is
//! checked against the device's allocation index first: a pointer given with
//! a device must lie inside a live allocation (or global, or registration)
//! of that device, for the whole length.
//!
//! With a queue the copy is enqueued on it (ordered after the queue's
//! earlier work); without one it runs now, on the calling thread's
//! synchronous queue of the device ("default queue, then sync").

use std::sync::Arc;

use tracing::debug_span;

use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::plugin::DevicePtr;
use crate::queue::{HostAddr, Queue};
use crate::runtime::Runtime;

/// One end of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// Host memory of this process.
    Host(*const u8),
    /// Memory of device `id` of the runtime.
    Device(usize, DevicePtr),
}

/// Largest host staging buffer for copies between unconnected devices.
const STAGING_CHUNK: usize = 8 << 20;

impl Runtime {
    /// Copy `size` bytes from `src` to `dst`, on `queue` or now.
    ///
    /// # Safety
    /// Host locations are valid for `size` bytes (until the queue reaches
    /// the copy, when queued).
    pub unsafe fn copy(
        &self,
        dst: Location,
        src: Location,
        size: usize,
        queue: Option<&Queue>,
    ) -> Result<()> {
        if let (Location::Host(d), Location::Host(s), None) = (dst, src, queue) {
            // Plain memcpy: no device, nothing to trace or count.
            if size > 0 && (d.is_null() || s.is_null()) {
                return Err(Error::new(
                    ErrorCode::InvalidNullPointer,
                    "host pointer of a copy is null",
                ));
            }
            // SAFETY: both are valid for `size` bytes (our contract) and not
            // null (checked just now); they may overlap (memmove).
            unsafe { std::ptr::copy(s, d.cast_mut(), size) };
            return Ok(());
        }
        let _s = debug_span!("copy", ?dst, ?src, size).entered();
        // Host memory of a device in another process is moved here.
        let (dst, src) = (self.local_host(dst, size), self.local_host(src, size));
        // Resolve and check both ends before anything moves.
        let dst_dev = self.checked_end(dst, size)?;
        let src_dev = self.checked_end(src, size)?;
        if size == 0 {
            return Ok(());
        }
        match (src, dst) {
            (Location::Host(s), Location::Host(d)) => {
                let (s, d) = (HostAddr(s as usize), HostAddr(d as usize));
                let op = move || {
                    // SAFETY: the caller names `size` valid bytes at both addresses.
                    unsafe { std::ptr::copy(s.0 as *const u8, d.0 as *mut u8, size) };
                    Ok(())
                };
                match queue {
                    Some(q) => q.submit_host(op),
                    None => op(),
                }
            }
            (Location::Host(s), Location::Device(_, d)) => {
                let dev = dst_dev.expect("device end");
                dev.stats().count_to_device(size);
                match queue {
                    // SAFETY: (all three arms) `s` is valid for `size` bytes until
                    // the queue reaches the copy (our contract); the device
                    // range was checked above (`checked_end`).
                    Some(q) if q.is_on(dev) => unsafe {
                        q.copy_to_device(d, HostAddr(s as usize), size)
                    },
                    Some(q) => {
                        let (dev, s) = (dev.clone(), HostAddr(s as usize));
                        // SAFETY: as above.
                        q.submit_host(move || unsafe {
                            dev.copy_to_device(d, s.0 as *const u8, size)
                        })
                    }
                    // SAFETY: as above (synchronous).
                    None => dev.with_sync_queue(|q| unsafe { q.copy_to_device(d, s, size) }),
                }
            }
            (Location::Device(_, s), Location::Host(d)) => {
                let dev = src_dev.expect("device end");
                dev.stats().count_from_device(size);
                match queue {
                    // SAFETY: (all three arms) `d` is valid for `size` bytes until
                    // the queue reaches the copy (our contract); the device
                    // range was checked above (`checked_end`).
                    Some(q) if q.is_on(dev) => unsafe {
                        q.copy_from_device(HostAddr(d as usize), s, size)
                    },
                    Some(q) => {
                        let (dev, d) = (dev.clone(), HostAddr(d as usize));
                        // SAFETY: as above.
                        q.submit_host(move || unsafe {
                            dev.copy_from_device(d.0 as *mut u8, s, size)
                        })
                    }
                    // SAFETY: as above (synchronous).
                    None => dev
                        .with_sync_queue(|q| unsafe { q.copy_from_device(d as *mut u8, s, size) }),
                }
            }
            (Location::Device(_, s), Location::Device(_, d)) => {
                let (sdev, ddev) = (src_dev.expect("device end"), dst_dev.expect("device end"));
                sdev.stats().count_device_to_device(size);
                if Arc::ptr_eq(sdev, ddev) {
                    // Both ranges were checked against this device's live
                    // ranges above (`checked_end`): the guarantee each
                    // `copy_within` below needs.
                    return match queue {
                        // SAFETY: checked ranges (above).
                        Some(q) if q.is_on(sdev) => unsafe { q.copy_within(d, s, size) },
                        Some(q) => {
                            let dev = sdev.clone();
                            q.submit_host(move || {
                                // SAFETY: checked ranges (above).
                                dev.with_sync_queue(|q| unsafe { q.copy_within(d, s, size) })
                            })
                        }
                        // SAFETY: checked ranges (above).
                        None => sdev.with_sync_queue(|q| unsafe { q.copy_within(d, s, size) }),
                    };
                }
                let (sdev, ddev) = (sdev.clone(), ddev.clone());
                // SAFETY: both ranges were checked above (`checked_end`).
                let op = move || unsafe { copy_between(&sdev, &ddev, d, s, size) };
                match queue {
                    Some(q) => q.submit_host(op),
                    None => op(),
                }
            }
        }
    }

    /// `at`, or the host address of it where it names local host memory
    /// of a device ([`Device::local_host_range`]).
    fn local_host(&self, at: Location, size: usize) -> Location {
        match at {
            Location::Device(id, p) => match self
                .device(id)
                .ok()
                .and_then(|d| d.local_host_range(p, size))
            {
                Some(h) => Location::Host(h.cast_const()),
                None => at,
            },
            host => host,
        }
    }

    /// The device of a location, with the range checked; None for the host.
    fn checked_end(&self, at: Location, size: usize) -> Result<Option<&Arc<Device>>> {
        match at {
            Location::Host(p) => {
                if p.is_null() && size > 0 {
                    return Err(Error::new(
                        ErrorCode::InvalidNullPointer,
                        "host pointer of a copy is null",
                    ));
                }
                Ok(None)
            }
            Location::Device(id, ptr) => {
                let dev = self.device(id)?;
                if size > 0 {
                    dev.check_range(ptr, size)?;
                }
                Ok(Some(dev))
            }
        }
    }
}

/// Copy between two different devices: directly when their plugin can,
/// otherwise through a host staging buffer.
///
/// # Safety
/// `[src, src + size)` lies in a live range of `sdev`, `[dst, dst + size)`
/// in one of `ddev` (checked by the caller).
unsafe fn copy_between(
    sdev: &Device,
    ddev: &Device,
    dst: DevicePtr,
    src: DevicePtr,
    size: usize,
) -> Result<()> {
    if sdev.plugin_name() == ddev.plugin_name() {
        // SAFETY: the caller's guarantee; the devices are of one plugin.
        let direct = sdev
            .with_sync_queue(|q| unsafe { q.copy_to_peer(ddev.raw().as_ref(), dst, src, size) })?;
        if direct {
            return Ok(());
        }
    }
    let mut staging = vec![0u8; size.min(STAGING_CHUNK)];
    let mut done = 0usize;
    while done < size {
        let n = (size - done).min(staging.len());
        let (s, d) = (src.offset(done as u64), dst.offset(done as u64));
        // SAFETY: the staging buffer holds `n` bytes; the device ranges were checked.
        unsafe {
            sdev.with_sync_queue(|q| q.copy_from_device(staging.as_mut_ptr(), s, n))?;
            ddev.with_sync_queue(|q| q.copy_to_device(d, staging.as_ptr(), n))?;
        }
        done += n;
    }
    Ok(())
}

/// Fill host memory with a repeated pattern.
///
/// # Safety
/// `dst` is valid for writes of `size` bytes, which do not overlap
/// `pattern`; `size` is a multiple of the pattern.
pub unsafe fn host_fill(dst: *mut u8, pattern: &[u8], size: usize) {
    if pattern.len() == 1 {
        // SAFETY: `dst` is valid for `size` bytes (our contract).
        unsafe { std::ptr::write_bytes(dst, pattern[0], size) };
        return;
    }
    let mut off = 0;
    while off < size {
        // SAFETY: `off + pattern.len() <= size` (`size` is a multiple of
        // the pattern), so the destination lies in `dst`'s `size` bytes,
        // which do not overlap `pattern` (our contract).
        unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), dst.add(off), pattern.len()) };
        off += pattern.len();
    }
}
