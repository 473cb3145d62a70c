//! The offload policy (`OMP_TARGET_OFFLOAD` and whether devices exist).

use std::sync::atomic::{AtomicU8, Ordering};

use crate::libomp::raw_policy;
use crate::state::usable_devices;

pub const POLICY_DISABLED: u8 = 0;
pub const POLICY_MANDATORY: u8 = 2;
static POLICY: AtomicU8 = AtomicU8::new(0xFF);

/// 0 disabled, 2 mandatory (default becomes mandatory when devices exist).
#[inline]
pub fn policy() -> u8 {
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

pub fn offload_disabled() -> bool {
    policy() == POLICY_DISABLED
}

pub fn raw_policy_is_mandatory() -> bool {
    raw_policy() == Some(2)
}
