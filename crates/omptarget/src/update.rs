//! `target update`: copies between present host ranges and their device
//! copies, strided (non-contiguous) ones included.

use crate::abi::*;
use crate::addr::HostAddr;
use crate::args::{walk_mapped, Args, Order};
use crate::construct::{mapping_exists_unchanged, Fail};
use crate::device::DevState;
use crate::mapping::Found;
use crate::msg;
use crate::requires;
use crate::transfer::{copy_d2h, copy_h2d, reapply_shadows, restore_shadows};

/// targetDataUpdate: copy each argument of `a` (declare mappers expanded)
/// as its motion type says.
pub fn data_update(d: &DevState, a: &Args) -> Result<(), Fail> {
    walk_mapped(a, Order::Forward, &mut |a, i, _| {
        let t = a.ty(i);
        if t & NON_CONTIG != 0 {
            return update_strided(d, a, i);
        }
        update_one(d, a.begin(i), a.size(i).max(0) as u64, t, a.name(i))
    })
}

/// [`data_update`] of a NON_CONTIG argument: one copy per contiguous
/// piece (dimensions whose pieces abut are merged).
fn update_strided(d: &DevState, a: &Args, i: usize) -> Result<(), Fail> {
    let nc = a.non_contig(i);
    let Some(last) = nc.last() else {
        return Ok(());
    };
    let dims = nc.len();
    let size = last.count * last.stride;
    let mut merged = 0;
    for j in (1..dims).rev() {
        if nc[j].count * nc[j].stride == nc[j - 1].stride {
            merged += 1;
        }
    }
    let (t, name) = (a.ty(i), a.name(i));
    non_contig(d, a.base_addr(i), nc, size, t, name, 0, dims - merged, 0)
}

#[allow(clippy::too_many_arguments)]
fn non_contig(
    d: &DevState,
    base: HostAddr,
    nc: &[NonContig],
    size: u64,
    t: i64,
    name: usize,
    dim: usize,
    ndims: usize,
    offset: u64,
) -> Result<(), Fail> {
    if dim < ndims {
        for k in 0..nc[dim].count {
            let off = (nc[dim].offset + k) * nc[dim].stride;
            if dim != ndims - 1 || k == 0 {
                non_contig(d, base, nc, size, t, name, dim + 1, ndims, offset + off)?;
            }
        }
        Ok(())
    } else {
        update_one(d, base.wrapping_add(offset), size, t, name)
    }
}

fn update_one(d: &DevState, hp: HostAddr, size: u64, t: i64, _name: usize) -> Result<(), Fail> {
    let (tgt, shadows, host_ptr, name) = {
        let tbl = d.table(hp, size);
        match tbl.lookup(hp, size) {
            Some((k, Found::Contained)) => {
                let e = tbl.get(k).unwrap();
                let tgt = e.tgt_of(hp);
                if msg::info_on(msg::INFO_MAPPING_EXISTS) {
                    mapping_exists_unchanged(d, e, hp, size);
                }
                (tgt, e.shadows.clone(), e.host_ptr, e.name)
            }
            _ => {
                if t & PRESENT != 0 && !requires::usm() {
                    msg::message(&format!(
                        "device mapping required by 'present' motion modifier does not exist for host address {hp} ({size} bytes)",
                    ));
                    return Err(Fail::Present);
                }
                return Ok(());
            }
        }
    };
    if host_ptr || size == 0 {
        return Ok(());
    }
    if t & FROM != 0 {
        // SAFETY: the update's host range (`Args::from_raw`, or a strided
        // piece of it), contained in a live entry (looked up above).
        if !unsafe { copy_d2h(d, name, hp, tgt, size) } {
            return Err(Fail::Other);
        }
        restore_shadows(&shadows, hp, size);
    }
    if t & TO != 0 {
        // SAFETY: as for the FROM copy above.
        if !unsafe { copy_h2d(d, name, hp, tgt, size) } {
            return Err(Fail::Other);
        }
        reapply_shadows(d, &shadows, hp, size);
    }
    Ok(())
}
