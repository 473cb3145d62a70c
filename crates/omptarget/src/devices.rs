//! OpenMP device numbering: which devices count, and the device a
//! construct names.

use crate::abi::IdentRef;
use crate::device::DevState;
use crate::libomp::default_device;
use crate::msg;
use crate::policy::{policy, POLICY_DISABLED};
use crate::state::{state, usable_devices};

/// Offloading is disabled (`OMP_TARGET_OFFLOAD=DISABLED`, or by default
/// when no device is usable).
#[inline]
pub fn offload_disabled() -> bool {
    policy(usable_devices) == POLICY_DISABLED
}

/// Number of devices (0 when offloading is disabled).
pub fn num_devices() -> usize {
    if offload_disabled() {
        0
    } else {
        usable_devices()
    }
}

/// Resolve a device id for a construct at `loc`: Some(index) to offload,
/// None for host execution. Out-of-range ids are fatal, like LLVM, and so is
/// any construct when offloading is mandatory but no device is usable
/// (LLVM's checkDevice: even one naming the initial device).
pub fn resolve(id: i64, loc: IdentRef) -> Option<&'static DevState> {
    if offload_disabled() {
        return None;
    }
    let id = if id == -1 { default_device() } else { id };
    let st = state();
    let n = usable_devices() as i64;
    if n == 0 {
        crate::report::target_failed(loc);
    }
    if id == n {
        return None;
    }
    if id < 0 || id > n {
        msg::fatal(
            id,
            &format!(
                "\"invalid value\" device number '{id}' out of range, only {n} devices available"
            ),
        );
    }
    // The caller loads the images (`ensure_loaded`) after printing the
    // construct's INFO header, in LLVM's order.
    Some(&st.devices[id as usize])
}
