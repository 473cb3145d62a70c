//! Copies between a host range and its device copy, with their INFO lines,
//! and the attached-pointer shadows a copy re-applies or restores.

use offload_core::plugin::DevicePtr;

use crate::addr::{HostAddr, HostRange};
use crate::device::DevState;
use crate::mapping::Shadow;
use crate::msg;

/// Copy `[hp, hp + size)` to `tgt` (with its INFO line).
///
/// # Safety
/// As [`DevState::h2d`]: the host range is readable, the device range lies
/// in live device memory of a mapping-table entry or owned block.
pub(crate) unsafe fn copy_h2d(
    d: &DevState,
    e_name: usize,
    hp: HostAddr,
    tgt: DevicePtr,
    size: u64,
) -> bool {
    if msg::info_on(msg::INFO_DATA_TRANSFER) {
        msg::dev_info(
            d.id,
            &format!(
                "Copying data from host to device, HstPtr={hp}, TgtPtr={tgt}, Size={size}, Name={}",
                msg::name_of(e_name)
            ),
        );
    }
    // SAFETY: the caller's guarantee, passed on.
    unsafe { d.h2d(tgt, hp, size) }
}

/// Copy `size` bytes at `tgt` to `[hp, hp + size)` (with its INFO line).
///
/// # Safety
/// As [`DevState::d2h`]: the host range is writable, the device range lies
/// in live device memory of a mapping-table entry.
pub(crate) unsafe fn copy_d2h(
    d: &DevState,
    e_name: usize,
    hp: HostAddr,
    tgt: DevicePtr,
    size: u64,
) -> bool {
    if msg::info_on(msg::INFO_DATA_TRANSFER) {
        msg::dev_info(
            d.id,
            &format!(
                "Copying data from device to host, TgtPtr={tgt}, HstPtr={hp}, Size={size}, Name={}",
                msg::name_of(e_name)
            ),
        );
    }
    // SAFETY: the caller's guarantee, passed on.
    unsafe { d.d2h(hp, tgt, size) }
}

/// The shadows whose pointer slot lies inside `[hp, hp + size)`.
fn shadows_in(shadows: &[Shadow], hp: HostAddr, size: u64) -> impl Iterator<Item = &Shadow> {
    let copied = HostRange::saturating(hp, size);
    shadows.iter().filter(move |s| {
        HostRange::new(s.host_ptr_addr, 8).is_some_and(|p| copied.contains_range(p))
    })
}

/// After a TO copy of `[hp, hp+size)`: re-write attached device pointers.
pub(crate) fn reapply_shadows(d: &DevState, shadows: &[Shadow], hp: HostAddr, size: u64) {
    for s in shadows_in(shadows, hp, size) {
        // SAFETY: the source is the shadow's own 8-byte value; a shadow's
        // device slot lies inside the device memory of the live entry
        // that holds it (recorded by `attach`).
        unsafe { d.h2d(s.tgt_ptr_addr, HostAddr::of(&s.tgt_value.0), 8) };
    }
}

/// After a FROM copy of `[hp, hp+size)`: restore host pointer values.
pub(crate) fn restore_shadows(shadows: &[Shadow], hp: HostAddr, size: u64) {
    for s in shadows_in(shadows, hp, size) {
        // SAFETY: the pointer slot lies inside `[hp, hp + size)` (checked
        // by `shadows_in`), host memory of a live entry the program mapped
        // (`Args::from_raw`'s contract when it was mapped).
        unsafe { std::ptr::write_unaligned(s.host_ptr_addr.as_mut_ptr::<u64>(), s.host_value.0) };
    }
}
