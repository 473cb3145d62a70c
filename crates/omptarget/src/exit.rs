//! Mapping table, exiting: release references, copy back and remove
//! entries (`target exit data` and the end of a target region).

use crate::abi::*;
use crate::addr::HostAddr;
use crate::args::{walk_mapped, Args, Order};
use crate::construct::{counts, Fail, Removals, Removed};
use crate::device::DevState;
use crate::enter::Item;
use crate::mapping::{Entry, Found};
use crate::msg;
use crate::requires;
use crate::transfer::{copy_d2h, restore_shadows};

/// targetDataEnd: release each argument of `a` (declare mappers
/// expanded), last to first, then report and free the entries removed.
pub fn data_end(d: &DevState, a: &Args, check_present: bool) -> Result<(), Fail> {
    let mut removals = Removals::new();
    let r = walk_mapped(a, Order::Reverse, &mut |a, i, from_mapper| {
        if a.ty(i) & ATTACH != 0 {
            return Ok(());
        }
        end_one(d, a, i, from_mapper, check_present, &mut removals)
    });
    for e in removals {
        if msg::info_on(msg::INFO_MAPPING_CHANGED) {
            msg::dev_info(
                d.id,
                &format!(
                    "Removing map entry with HstPtrBegin={}, TgtPtrBegin={}, Size={}, Name={}",
                    e.hst_begin,
                    e.tgt_begin,
                    e.size,
                    msg::name_of(e.name)
                ),
            );
        }
        if e.owned {
            d.free_block(e.tgt_alloc, e.tgt_begin.offset_from(e.tgt_alloc) + e.size);
        }
        if e.host_locked {
            crate::host_lock::unlock_mapped(d, e.hst_begin);
        }
    }
    r
}

/// [`data_end`] of argument `i` (neither private nor literal, no
/// mapper, no ATTACH): release a reference, copy back, remove the entry.
pub(crate) fn end_one(
    d: &DevState,
    a: &Args,
    i: usize,
    from_mapper: bool,
    check_present: bool,
    removals: &mut Removals,
) -> Result<(), Fail> {
    let Item {
        t,
        hp,
        size,
        update_ref,
        ..
    } = Item::of(a, i, from_mapper);
    let mut tbl = d.table(hp, size);
    let key = match tbl.lookup(hp, size) {
        Some((k, Found::Contained)) => Some(k),
        Some((k, Found::Extends)) if t & IMPLICIT != 0 => Some(k),
        _ => None,
    };
    let Some(k) = key else {
        drop(tbl);
        if check_present && t & PRESENT != 0 && !requires::usm() {
            msg::message(&format!(
                "device mapping required by 'present' map type modifier does not exist for host address {hp} ({size} bytes)",
            ));
            return Err(Fail::Present);
        }
        return Ok(());
    };
    let e = tbl.get_mut(k).unwrap();
    let last = release_ref(d, e, hp, size, t, update_ref);
    let tgt = e.tgt_of(hp);
    let name = e.name;
    let do_copy = t & FROM != 0 && size > 0 && !e.host_ptr && (last || t & ALWAYS != 0);
    let remove = last && update_ref && e.total() == 0;
    let shadows = if do_copy {
        e.shadows.clone()
    } else {
        Vec::new()
    };
    if do_copy && remove {
        // The last reference copies back before the entry leaves the
        // table: a thread mapping the range next (a new entry, copied
        // in from the host) must see the updated host value.
        // SAFETY: the construct's mapped host range (`Args::from_raw`),
        // from the entry `k`, still in the table (locked).
        let copied = unsafe { copy_d2h(d, name, hp, tgt, size) };
        if copied {
            restore_shadows(&shadows, hp, size);
        }
        let removed = tbl.remove(k);
        drop(tbl);
        if let Some(e) = removed {
            removals.push(Removed::from(&e));
        }
        return if copied { Ok(()) } else { Err(Fail::Other) };
    }
    let removed = if remove { tbl.remove(k) } else { None };
    drop(tbl);
    if do_copy {
        // SAFETY: the construct's mapped host range; the entry is not
        // removed (`removed` is None here), so its memory is live.
        if !unsafe { copy_d2h(d, name, hp, tgt, size) } {
            return Err(Fail::Other);
        }
        restore_shadows(&shadows, hp, size);
    }
    if let Some(e) = removed {
        removals.push(Removed::from(&e));
    }
    Ok(())
}

/// Release the reference of map type `t` to entry `e` (or, without
/// `update_ref`, only ask whether it would be the last) and print the
/// INFO line for `[hp, hp + size)`. True when it is the last.
fn release_ref(
    d: &DevState,
    e: &mut Entry,
    hp: HostAddr,
    size: u64,
    t: i64,
    update_ref: bool,
) -> bool {
    let hold = t & OMPX_HOLD != 0;
    let delete = t & DELETE != 0;
    let (last, note) = if update_ref {
        let last = e.dec(hold, delete);
        let note = match (last, delete && !hold) {
            (true, true) => " (reset, delayed deletion)",
            (true, false) => " (decremented, delayed deletion)",
            _ => " (decremented)",
        };
        (last, note)
    } else {
        (e.would_be_last(hold, delete), " (update suppressed)")
    };
    if msg::info_on(msg::INFO_MAPPING_EXISTS) {
        let (dc, hc) = counts(e, hold, note);
        msg::dev_info(
            d.id,
            &format!(
                "Mapping exists with HstPtrBegin={hp}, TgtPtrBegin={}, Size={size}, DynRefCount={dc}, HoldRefCount={hc}",
                e.tgt_of(hp)
            ),
        );
    }
    last
}
