//! What every mapping construct shares: its bookkeeping ([`Ctx`]), why it
//! failed ([`Fail`]), the entries it removed, and its INFO/error lines.

use offload_core::plugin::DevicePtr;
use smallvec::SmallVec;

use crate::abi::*;
use crate::addr::{HostAddr, HostRange};
use crate::args::Args;
use crate::device::DevState;
use crate::mapping::Entry;
use crate::msg;

/// Why a construct failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    Present,
    Illegal,
    Other,
}

/// Per-construct bookkeeping.
#[derive(Default)]
pub struct Ctx {
    /// Host ranges of entries created by this construct (an entry's key
    /// is its begin).
    pub new_entries: SmallVec<[HostRange; 8]>,
    /// Deferred ATTACH entries: (pointer address, pointee begin, type).
    pub attaches: Vec<(HostAddr, HostAddr, i64)>,
    /// Device address found or created for each top-level argument of a
    /// `target` construct (`NO_TGT` = not known), so that the kernel
    /// arguments need no second lookup. Empty outside `target`.
    pub arg_tgt: SmallVec<[DevicePtr; 16]>,
}

/// An argument's device address is not known (see [`Ctx::arg_tgt`]).
pub const NO_TGT: DevicePtr = DevicePtr(u64::MAX);

/// Entries a `target exit data` (or the end of a region) removed, freed
/// after all its map entries are processed (LLVM's order of messages).
pub(crate) type Removals = SmallVec<[Removed; 16]>;

/// What reporting and freeing a removed entry needs.
pub(crate) struct Removed {
    pub(crate) hst_begin: HostAddr,
    pub(crate) tgt_begin: DevicePtr,
    pub(crate) tgt_alloc: DevicePtr,
    pub(crate) size: u64,
    pub(crate) name: usize,
    pub(crate) owned: bool,
    pub(crate) host_locked: bool,
}

impl From<&Entry> for Removed {
    fn from(e: &Entry) -> Removed {
        Removed {
            hst_begin: e.key(),
            tgt_begin: e.tgt_begin,
            tgt_alloc: e.tgt_alloc,
            size: e.size(),
            name: e.name,
            owned: e.owned,
            host_locked: e.host_locked,
        }
    }
}

impl Ctx {
    /// Whether the entry with key `k` was created by this construct.
    pub fn is_new(&self, k: HostAddr) -> bool {
        self.new_entries.iter().any(|r| r.begin() == k)
    }

    /// Whether `[addr, addr + len)` lies inside an entry this construct
    /// created (a zero `len`: the byte at `addr`).
    pub fn in_new_entry(&self, addr: HostAddr, len: u64) -> bool {
        let r = HostRange::saturating(addr, len.max(1));
        self.new_entries.iter().any(|n| n.contains_range(r))
    }
}

pub(crate) fn counts(e: &Entry, hold: bool, note: &str) -> (String, String) {
    let (mut dc, mut hc) = (msg::rc_str(e.dyn_rc), msg::rc_str(e.hold_rc));
    if !note.is_empty() {
        if hold {
            hc.push_str(note);
        } else {
            dc.push_str(note);
        }
    }
    (dc, hc)
}

pub(crate) fn print_args(d: &DevState, a: &Args) {
    for i in 0..a.n() {
        let t = a.ty(i);
        let s = a.size(i);
        msg::dev_info(
            d.id,
            &format!(
                "{}({})[{}] {}",
                msg::arg_kind(t, s),
                msg::name_of(a.name(i)),
                s,
                if t & IMPLICIT != 0 { "(implicit)" } else { "" }
            ),
        );
    }
}

pub(crate) fn present_missing(hp: HostAddr, size: u64) {
    msg::message(&format!(
        "device mapping required by 'present' map type modifier does not exist for host address {hp} ({size} bytes)",
    ));
}

pub(crate) fn begin_fail_msgs(f: Fail) {
    match f {
        Fail::Present => msg::error(
            "Call to getTargetPointer returned null pointer ('present' map type modifier).",
        ),
        Fail::Illegal | Fail::Other => msg::error(
            "Call to getTargetPointer returned null pointer (device failure or illegal mapping).",
        ),
    }
}

/// LLVM's INFO line for a lookup of a present range that changes no count
/// (`Mapping exists ... (update suppressed)`); the caller checks the flag.
pub(crate) fn mapping_exists_unchanged(d: &DevState, e: &Entry, hp: HostAddr, size: u64) {
    let (dc, hc) = counts(e, false, " (update suppressed)");
    msg::dev_info(
        d.id,
        &format!(
            "Mapping exists with HstPtrBegin={hp}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}",
            e.tgt_of(hp)
        ),
    );
}
