//! Locking host memory for a device: `llvm_omp_target_lock_mem` /
//! `llvm_omp_target_unlock_mem`, and `LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS`
//! (mapped host buffers locked while they are mapped, for faster copies).
//! The core counts the users of a locked range ([`offload_core::Device::lock_host`]);
//! devices that register no host memory (host, remote) lock nothing.

use std::ffi::c_void;
use std::sync::OnceLock;

use offload_core::DevicePtr;

use crate::addr::HostAddr;
use crate::api::checked_device;
use crate::construct::Fail;
use crate::device::DevState;
use crate::msg;

/// `LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS`, as LLVM reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMapped {
    /// `off` (the default, and any value not understood).
    Off,
    /// `on` (or another true boolean): a buffer that cannot be locked is
    /// mapped anyway.
    BestEffort,
    /// `mandatory`: a buffer that cannot be locked is a mapping failure.
    Mandatory,
}

impl LockMapped {
    pub fn parse(value: Option<&str>) -> LockMapped {
        let Some(v) = value.map(|v| v.trim().to_ascii_lowercase()) else {
            return LockMapped::Off;
        };
        match v.as_str() {
            "1" | "true" | "yes" | "on" => LockMapped::BestEffort,
            "mandatory" => LockMapped::Mandatory,
            "0" | "false" | "no" | "off" => LockMapped::Off,
            _ => {
                msg::warning(&format!(
                    "LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS={v} is not on, off or mandatory: off"
                ));
                LockMapped::Off
            }
        }
    }

    fn get() -> LockMapped {
        static SETTING: OnceLock<LockMapped> = OnceLock::new();
        *SETTING.get_or_init(|| {
            let v = std::env::var("LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS").ok();
            LockMapped::parse(v.as_deref())
        })
    }
}

/// `llvm_omp_target_lock_mem`: the address devices use for `p` (`p`
/// itself), or null when it cannot be locked. The initial device and
/// devices that lock nothing give `p` back.
///
/// # Safety
/// `[p, p + size)` is host memory that stays mapped until unlocked.
pub unsafe fn lock_mem(p: *mut c_void, size: usize, dev: i64) -> *mut c_void {
    if p.is_null() {
        return p;
    }
    let Some(d) = checked_device(dev) else {
        return p;
    };
    // SAFETY: the caller's promise, passed on.
    match unsafe { d.dev.lock_host(DevicePtr(p as u64), size) } {
        Ok(ptr) => ptr.0 as *mut c_void,
        Err(e) => {
            msg::error(&format!("Failure to lock memory {p:?}: {e}"));
            std::ptr::null_mut()
        }
    }
}

/// `llvm_omp_target_unlock_mem`.
pub fn unlock_mem(p: *mut c_void, dev: i64) {
    if p.is_null() {
        return;
    }
    if let Some(d) = checked_device(dev) {
        if let Err(e) = d.dev.unlock_host(DevicePtr(p as u64)) {
            msg::error(&format!("Failure to unlock memory {p:?}: {e}"));
        }
    }
}

/// A new mapping of `[hp, hp + size)`: locked when
/// `LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS` asks. Ok(true) when this
/// mapping holds a lock to give back at its removal; Err when the setting
/// is `mandatory` and the buffer cannot be locked (said on stderr).
pub(crate) fn lock_mapped(d: &DevState, hp: HostAddr, size: u64) -> Result<bool, Fail> {
    let setting = LockMapped::get();
    if size == 0 {
        return Ok(false);
    }
    if setting == LockMapped::Off {
        // Memory the program locked counts the mapping as a user all the
        // same (LLVM does so too): an unlock while it is mapped leaves it
        // locked until the mapping goes.
        if !d.dev.is_locked_host(DevicePtr(hp.0)) {
            return Ok(false);
        }
        // SAFETY: as below.
        return Ok(unsafe { d.dev.lock_host(DevicePtr(hp.0), size as usize) }.is_ok());
    }
    // SAFETY: a mapped host range stays mapped while its entry lives; the
    // lock is given back when the entry is removed.
    match unsafe { d.dev.lock_host(DevicePtr(hp.0), size as usize) } {
        Ok(_) => Ok(d.dev.is_locked_host(DevicePtr(hp.0))),
        Err(_) if setting == LockMapped::BestEffort => Ok(false),
        Err(e) => {
            msg::error(&format!(
                "Failure to lock the mapped host buffer {hp} ({size} bytes; \
                 LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS=mandatory): {e}"
            ));
            Err(Fail::Other)
        }
    }
}

/// The removal of a mapping that [`lock_mapped`] locked.
pub(crate) fn unlock_mapped(d: &DevState, hp: HostAddr) {
    if let Err(e) = d.dev.unlock_host(DevicePtr(hp.0)) {
        msg::error(&format!(
            "Failure to unlock the mapped host buffer {hp}: {e}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_reads_as_llvms() {
        assert_eq!(LockMapped::parse(None), LockMapped::Off);
        assert_eq!(LockMapped::parse(Some("off")), LockMapped::Off);
        assert_eq!(LockMapped::parse(Some("0")), LockMapped::Off);
        assert_eq!(LockMapped::parse(Some("ON")), LockMapped::BestEffort);
        assert_eq!(LockMapped::parse(Some("true")), LockMapped::BestEffort);
        assert_eq!(LockMapped::parse(Some("mandatory")), LockMapped::Mandatory);
        assert_eq!(LockMapped::parse(Some("sometimes")), LockMapped::Off);
    }
}
