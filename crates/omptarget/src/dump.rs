//! The dump of one device's mapping table (LLVM's INFO table format).
//! Below the global state: which devices to dump is the caller's choice.

use crate::device::DevState;
use crate::msg;

pub fn dump_table(d: &DevState, header: &str) {
    dump_table_with(d, header, &mut |dev, line| msg::dev_info(dev, line));
}

pub fn dump_table_with(d: &DevState, header: &str, out: &mut dyn FnMut(usize, &str)) {
    let tbl = d.table_all();
    if tbl.is_empty() {
        out(d.id, "OpenMP Host-Device pointer mappings table empty");
        return;
    }
    out(d.id, header);
    out(
        d.id,
        "Host Ptr           Target Ptr         Size (B) DynRefCount HoldRefCount Declaration",
    );
    for e in tbl.entries() {
        out(
            d.id,
            &format!(
                "{} {} {:<8} {:<11} {:<12} {}",
                e.key(),
                e.tgt_begin,
                e.size(),
                msg::rc_str(e.dyn_rc),
                msg::rc_str(e.hold_rc),
                msg::declaration_of(e.name)
            ),
        );
    }
}
