//! The per-device host-to-device mapping table (reference section 5, rules 1-2, 4).
//!
//! Pure data structure: no device calls, no printing, so the lookup and
//! reference-count rules can be unit-tested without C.

use std::collections::BTreeMap;

/// Infinite reference count (declare target globals, associated pointers).
pub const INF: u64 = u64::MAX;

/// A pointer inside a mapped block whose device copy was redirected to a
/// device pointee (pointer attachment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shadow {
    /// Host address of the pointer variable.
    pub host_ptr_addr: u64,
    /// The value the host pointer had (restored after FROM copies).
    pub host_value: u64,
    /// Device address of the device copy of the pointer.
    pub tgt_ptr_addr: u64,
    /// The value written into the device pointer.
    pub tgt_value: u64,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub hst_base: u64,
    pub hst_begin: u64,
    pub hst_end: u64,
    pub tgt_alloc: u64,
    pub tgt_begin: u64,
    pub dyn_rc: u64,
    pub hold_rc: u64,
    /// Map-name C string (0 = none).
    pub name: usize,
    /// The device memory belongs to this entry (freed on removal).
    pub owned: bool,
    /// Host memory used directly (unified shared memory): no copies.
    pub host_ptr: bool,
    pub shadows: Vec<Shadow>,
}

impl Entry {
    pub fn size(&self) -> u64 {
        self.hst_end - self.hst_begin
    }
    pub fn total(&self) -> u64 {
        if self.dyn_rc == INF || self.hold_rc == INF {
            INF
        } else {
            self.dyn_rc + self.hold_rc
        }
    }
    /// Device address for host address `hp` (may lie before the entry for
    /// implicit partial overlaps).
    pub fn tgt_of(&self, hp: u64) -> u64 {
        self.tgt_begin.wrapping_add(hp.wrapping_sub(self.hst_begin))
    }
    pub fn inc(&mut self, hold: bool) {
        let c = if hold {
            &mut self.hold_rc
        } else {
            &mut self.dyn_rc
        };
        if *c != INF {
            *c += 1;
        }
    }
    /// Decrement (or reset with `delete`); returns true when the entry is
    /// now unused.
    pub fn dec(&mut self, hold: bool, delete: bool) -> bool {
        let (d, h) = dec_counts(self.dyn_rc, self.hold_rc, hold, delete);
        self.dyn_rc = d;
        self.hold_rc = h;
        self.total() == 0
    }
    /// Whether one decrement (or a delete) would make the entry unused.
    pub fn would_be_last(&self, hold: bool, delete: bool) -> bool {
        let (d, h) = dec_counts(self.dyn_rc, self.hold_rc, hold, delete);
        d == 0 && h == 0
    }
}

fn dec_counts(mut d: u64, mut h: u64, hold: bool, delete: bool) -> (u64, u64) {
    if delete && !hold {
        if d != INF {
            d = 0;
        }
    } else {
        let c = if hold { &mut h } else { &mut d };
        if *c != INF && *c > 0 {
            *c -= 1;
        }
    }
    (d, h)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// `[hp, hp+size)` lies inside the entry.
    Contained,
    /// Partial overlap with the entry.
    Extends,
}

/// Entries are boxed: B-tree nodes then hold only keys and pointers, so
/// inserting and removing shifts little memory and threads mapping
/// different data touch fewer shared cache lines.
#[derive(Default, Debug)]
pub struct Table {
    pub map: BTreeMap<u64, Box<Entry>>,
}

impl Table {
    /// LLVM's lookupMapping: the key of the entry the range hits and how.
    pub fn lookup(&self, hp: u64, size: u64) -> Option<(u64, Found)> {
        if size == 0 {
            let mut left = self.map.range(..=hp).next_back();
            let right = self
                .map
                .range((std::ops::Bound::Excluded(hp), std::ops::Bound::Unbounded))
                .next();
            if let Some((&k, e)) = left.take() {
                if hp < e.hst_end || hp < e.hst_base {
                    return Some((k, Found::Contained));
                }
            }
            if let Some((&k, e)) = right {
                if hp >= e.hst_base {
                    return Some((k, Found::Contained));
                }
            }
            return None;
        }
        let end = hp.saturating_add(size);
        // One search in the common cases: the last entry starting before
        // `end` is either the entry at or before `hp` (then no later entry
        // can overlap) or an entry overlapping from the right.
        let (&qk, q) = self.map.range(..end).next_back()?;
        if q.hst_begin <= hp {
            if hp < q.hst_end && end <= q.hst_end {
                return Some((qk, Found::Contained));
            }
            if hp < q.hst_end {
                return Some((qk, Found::Extends));
            }
            return None;
        }
        // `q` overlaps from the right; LLVM reports the left neighbour first.
        if let Some((&k, e)) = self.map.range(..=hp).next_back() {
            if hp < e.hst_end {
                return Some((k, Found::Extends));
            }
        }
        Some((qk, Found::Extends))
    }

    pub fn get(&self, key: u64) -> Option<&Entry> {
        self.map.get(&key).map(|b| &**b)
    }
    pub fn get_mut(&mut self, key: u64) -> Option<&mut Entry> {
        self.map.get_mut(&key).map(|b| &mut **b)
    }
    pub fn insert(&mut self, e: Entry) {
        self.map.insert(e.hst_begin, Box::new(e));
    }
    pub fn remove(&mut self, key: u64) -> Option<Entry> {
        self.map.remove(&key).map(|b| *b)
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Device address for a contained `[hp, hp+size)`, if mapped.
    pub fn translate(&self, hp: u64, size: u64) -> Option<u64> {
        match self.lookup(hp, size) {
            Some((k, Found::Contained)) => Some(self.map[&k].tgt_of(hp)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(b: u64, e: u64) -> Entry {
        Entry {
            hst_base: b,
            hst_begin: b,
            hst_end: e,
            tgt_alloc: b + 0x1000,
            tgt_begin: b + 0x1000,
            dyn_rc: 1,
            hold_rc: 0,
            name: 0,
            owned: true,
            host_ptr: false,
            shadows: vec![],
        }
    }

    #[test]
    fn contained_and_extensions() {
        let mut t = Table::default();
        t.insert(entry(100, 116));
        assert_eq!(t.lookup(100, 16), Some((100, Found::Contained)));
        assert_eq!(t.lookup(104, 4), Some((100, Found::Contained)));
        assert_eq!(t.lookup(100, 32), Some((100, Found::Extends)));
        assert_eq!(t.lookup(96, 8), Some((100, Found::Extends)));
        assert_eq!(t.lookup(116, 4), None);
        assert_eq!(t.lookup(80, 20), None);
        assert_eq!(t.translate(108, 4), Some(0x1000 + 108));
    }

    #[test]
    fn lookup_between_neighbours() {
        let mut t = Table::default();
        t.insert(entry(100, 116));
        t.insert(entry(200, 216));
        t.insert(entry(300, 316));
        // Gap between two entries, touching neither.
        assert_eq!(t.lookup(116, 84), None);
        // Overlapping the right neighbour only.
        assert_eq!(t.lookup(150, 60), Some((200, Found::Extends)));
        // Overlapping both: the left neighbour is reported (LLVM's order).
        assert_eq!(t.lookup(110, 100), Some((100, Found::Extends)));
        // Spanning a whole entry from before it.
        assert_eq!(t.lookup(190, 40), Some((200, Found::Extends)));
        assert_eq!(t.lookup(204, 8), Some((200, Found::Contained)));
        assert_eq!(t.lookup(316, 1), None);
        assert_eq!(t.lookup(0, 1), None);
    }

    #[test]
    fn zero_size_lookup_uses_base() {
        let mut t = Table::default();
        let mut e = entry(100, 116);
        e.hst_base = 90;
        t.insert(e);
        assert_eq!(t.lookup(95, 0), Some((100, Found::Contained)));
        assert_eq!(t.lookup(110, 0), Some((100, Found::Contained)));
        assert_eq!(t.lookup(116, 0), None);
        assert_eq!(t.lookup(80, 0), None);
    }

    #[test]
    fn refcounts() {
        let mut e = entry(0, 8);
        e.inc(false);
        assert_eq!(e.dyn_rc, 2);
        e.inc(true);
        assert_eq!(e.hold_rc, 1);
        assert!(!e.dec(false, true));
        assert_eq!(e.dyn_rc, 0);
        assert!(e.would_be_last(true, false));
        assert!(e.dec(true, false));
        let mut g = entry(0, 8);
        g.dyn_rc = INF;
        assert!(!g.dec(false, true));
        assert_eq!(g.dyn_rc, INF);
        assert_eq!(g.total(), INF);
    }

    #[test]
    fn many_entries() {
        let mut t = Table::default();
        for i in 0..10_000u64 {
            t.insert(entry(i * 64, i * 64 + 32));
        }
        assert_eq!(t.lookup(640 * 3 + 8, 8), Some((640 * 3, Found::Contained)));
        assert_eq!(t.lookup(64 * 5 + 40, 8), None);
        assert_eq!(t.lookup(64 * 5 + 24, 16), Some((320, Found::Extends)));
    }
}
