//! Table dumps, copy names and the abort sequence (LLVM's INFO and
//! failure output that is not tied to one mapping step).

use crate::abi::IdentRef;
use crate::addr::HostAddr;
use crate::device::DevState;
use crate::dump::{dump_table, dump_table_with};
use crate::mapping::Neighbours;
use crate::msg::{self, Loc};
use crate::state::visible_devices;

/// The map name LLVM prints for a copy without a known entry: the entry
/// containing `[hp, hp+size)` or overlapping it from the left, else the next
/// entry above, else the one below (lookupMapping's choice), else none.
pub(crate) fn lookup_name(d: &DevState, hp: HostAddr, size: u64) -> usize {
    let tbl = d.table_all();
    let left = tbl.last_below(hp.saturating_add(1));
    if let Some((_, e)) = left {
        if hp < e.host.end() {
            return e.name;
        }
    }
    let upper = tbl.first_above(hp);
    let _ = size;
    upper.or(left).map(|(_, e)| e.name).unwrap_or(0)
}

pub fn dump_tables(header: &str) {
    for d in visible_devices() {
        dump_table(d, header);
    }
}

/// `ompx_dump_mapping_tables`: like LLVM, the tables go to stdout (through
/// C's `stdout` stream, so they keep their place among the program's own
/// buffered output), not to stderr like the INFO dumps.
pub fn dump_tables_to_stdout() {
    for d in visible_devices() {
        dump_table_with(
            d,
            "OpenMP Host-Device pointer mappings after block at libomptarget:0:0:",
            &mut |dev, line| msg::dev_info_stdout(dev, line),
        );
    }
}

pub(crate) fn after_block(loc: &Loc) {
    dump_tables(&format!(
        "OpenMP Host-Device pointer mappings after block at {loc}:"
    ));
}

/// The abort sequence for a failed construct (handleTargetOutcome).
pub fn target_failed(loc_ptr: IdentRef) -> ! {
    let loc = Loc::from_ident(loc_ptr);
    if msg::info_on(msg::INFO_DUMP_TABLE) {
        after_block(&loc);
    } else {
        msg::error("Consult https://openmp.llvm.org/design/Runtimes.html for debugging options.");
    }
    if loc.known {
        msg::eprint_line(&format!(
            "{loc}: omptarget fatal error 1: failure of target construct while offloading is mandatory"
        ));
        msg::abort()
    } else {
        msg::error(
            "Source location information not present. Compile with -g or -gline-tables-only.",
        );
        msg::fatal(
            1,
            "failure of target construct while offloading is mandatory",
        )
    }
}
