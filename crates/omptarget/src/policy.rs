//! The offload policy (`OMP_TARGET_OFFLOAD` and whether devices exist),
//! settled once. It sits below the global state: the caller passes how to
//! count the usable devices (asked only while the policy is not settled).

use std::sync::atomic::{AtomicU8, Ordering};

use crate::libomp::raw_policy;

pub const POLICY_DISABLED: u8 = 0;
pub const POLICY_MANDATORY: u8 = 2;
static POLICY: AtomicU8 = AtomicU8::new(0xFF);

/// 0 disabled, 2 mandatory (default becomes mandatory when devices exist).
#[inline]
pub fn policy(usable_devices: impl FnOnce() -> usize) -> u8 {
    let p = POLICY.load(Ordering::Relaxed);
    if p != 0xFF {
        return p;
    }
    let p = match raw_policy().unwrap_or(1) {
        0 => POLICY_DISABLED,
        2 => POLICY_MANDATORY,
        _ => {
            if usable_devices() == 0 {
                POLICY_DISABLED
            } else {
                POLICY_MANDATORY
            }
        }
    };
    POLICY.store(p, Ordering::Relaxed);
    p
}
