//! The mapping table of one device, split by host address so that host
//! threads mapping unrelated data do not serialize on one lock: a
//! [`RangeMap`] of [`Table`]s (see `offload_core::range_map` for the
//! sharding, the spanning table and the lock order). What is specific to
//! OpenMP stays here: LLVM's lookup over a view, with a fast path for a
//! view of one shard.

use std::ops::{Deref, DerefMut};

use offload_core::range_map::{self, RangeMap};

use crate::addr::HostAddr;
use crate::mapping::{lookup_in, Found, Table};

#[derive(Default)]
pub struct ShardedTable(RangeMap<Table>);

/// The part of a [`ShardedTable`] one operation needs, locked: behaves as
/// one table for every range inside the range it was opened for.
pub struct View<'a>(range_map::View<'a, Table>);

impl ShardedTable {
    /// Lock what the range `[hp, hp + size)` needs. A zero size asks about
    /// the address `hp` (as [`Table::lookup`] does).
    #[inline]
    pub fn view(&self, hp: HostAddr, size: u64) -> View<'_> {
        View(self.0.view(hp, size))
    }

    /// Lock everything (whole-table walks: dumps, names for messages).
    pub fn view_all(&self) -> View<'_> {
        View(self.0.view_all())
    }
}

impl<'a> Deref for View<'a> {
    type Target = range_map::View<'a, Table>;
    #[inline]
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for View<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl View<'_> {
    /// See [`crate::mapping::lookup_in`]; exact for ranges inside the view's.
    #[inline]
    pub fn lookup(&self, hp: HostAddr, size: u64) -> Option<(HostAddr, Found)> {
        debug_assert!({
            let (b, e) = self.0.range();
            hp.0 >= b && hp.saturating_add(size).0 <= e.max(hp.0)
        });
        match self.0.single_shard() {
            Some(shard) if size > 0 => {
                let found = shard.lookup(hp, size);
                // Entries are disjoint: one holding the whole range leaves
                // no room for a spanning entry to matter.
                if matches!(found, Some((_, Found::Contained))) {
                    return found;
                }
                match self.0.spanning_if_near() {
                    None => found,
                    Some(spanning) => either_of(found, spanning.lookup(hp, size), hp),
                }
            }
            _ => lookup_in(&self.0, hp, size),
        }
    }
}

/// One answer from two tables of disjoint entries, each answered by
/// [`lookup_in`] for a range of non-zero size: what one table holding both
/// would answer (an entry holding the range, else the one holding `hp`,
/// else the first one after `hp`).
fn either_of(
    a: Option<(HostAddr, Found)>,
    b: Option<(HostAddr, Found)>,
    hp: HostAddr,
) -> Option<(HostAddr, Found)> {
    let (x, y) = match (a, b) {
        (None, other) | (other, None) => return other,
        (Some(x), Some(y)) => (x, y),
    };
    Some(if x.1 == Found::Contained || x.0 <= hp {
        x
    } else if y.1 == Found::Contained || y.0 <= hp {
        y
    } else if x.0 < y.0 {
        x
    } else {
        y
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::HostRange;
    use crate::mapping::Entry;
    use offload_core::range_map::{Neighbours, GRANULE_SHIFT};

    const MIB: u64 = 1 << GRANULE_SHIFT;

    fn entry(begin: u64, end: u64) -> Entry {
        crate::mapping::test_entry(begin, end)
    }

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A random range near a region boundary, of a size from bytes to
    /// several regions.
    fn range(r: &mut Rng) -> (u64, u64) {
        let base = (1 + r.below(40)) * MIB;
        let begin = base - 512 + r.below(1024) + r.below(3) * r.below(MIB);
        let size = match r.below(4) {
            0 => 0,
            1 => 1 + r.below(64),
            2 => 1 + r.below(4096),
            _ => 1 + r.below(3 * MIB),
        };
        (begin, size)
    }

    /// The sharded table answers every lookup as one table holding the
    /// same entries does, through inserts and removals of entries inside
    /// one region and spanning several.
    #[test]
    fn views_agree_with_one_table() {
        let sharded = ShardedTable::default();
        let mut reference = Table::default();
        let mut r = Rng(0x1234_5678_9abc_def1);
        for step in 0..20_000 {
            let (hp, size) = range(&mut r);
            let hp = HostAddr(hp);
            let expected = reference.lookup(hp, size);
            let mut v = sharded.view(hp, size);
            assert_eq!(
                v.lookup(hp, size),
                expected,
                "step {step}: lookup({hp}, {size})"
            );
            match expected {
                None if size > 0 && r.below(2) == 0 => {
                    v.insert(entry(hp.0, hp.0 + size)).unwrap();
                    reference.insert(entry(hp.0, hp.0 + size));
                }
                Some((k, _)) if r.below(3) == 0 => {
                    let got = v.remove(k).map(|e| e.host);
                    let want = reference.remove(k).map(|e| e.host);
                    assert_eq!(got, want);
                }
                Some((k, _)) => {
                    assert_eq!(
                        v.get(k).map(|e| e.host.end()),
                        reference.get(k).map(|e| e.host.end())
                    );
                    v.get_mut(k).unwrap().dyn_rc += 1;
                    reference.get_mut(k).unwrap().dyn_rc += 1;
                }
                None => {}
            }
        }
        let all = sharded.view_all();
        let ours: Vec<_> = all.entries().iter().map(|e| (e.key(), e.dyn_rc)).collect();
        let theirs: Vec<_> = reference.values().map(|e| (e.key(), e.dyn_rc)).collect();
        assert_eq!(ours, theirs);
        assert!(
            ours.len() > 100,
            "the walk filled the table ({})",
            ours.len()
        );
    }

    #[test]
    fn spanning_entries_are_counted_and_uncounted() {
        let t = ShardedTable::default();
        let (b, e) = (3 * MIB - 16, 3 * MIB + 16);
        t.view(HostAddr(b), e - b).insert(entry(b, e)).unwrap();
        // (The counts themselves: offload_core::range_map's tests.)
        // A view of one region sees the spanning entry.
        let (m3, b) = (HostAddr(3 * MIB), HostAddr(b));
        assert_eq!(t.view(m3, 4).lookup(m3, 4), Some((b, Found::Contained)));
        let before = HostAddr(b.0 - 8);
        assert_eq!(
            t.view(before, 16).lookup(before, 16),
            Some((b, Found::Extends))
        );
        assert!(t.view(m3, 4).remove(b).is_some());
        assert!(t.view_all().is_empty());
        assert_eq!(t.view(m3, 4).lookup(m3, 4), None);
    }

    #[test]
    fn insert_outside_the_view_is_refused() {
        let t = ShardedTable::default();
        let mut v = t.view(HostAddr(MIB), 64);
        assert!(v.insert(entry(MIB, MIB + 128)).is_err());
        assert!(v.insert(entry(MIB - 8, MIB + 8)).is_err());
        assert!(v.insert(entry(MIB, MIB + 64)).is_ok());
    }

    #[test]
    fn huge_ranges_lock_every_shard() {
        let t = ShardedTable::default();
        t.view(HostAddr(MIB), 64 * MIB)
            .insert(entry(MIB, 65 * MIB))
            .unwrap();
        let r = HostRange::new(HostAddr(MIB), 64 * MIB).unwrap();
        let v = t.view_all();
        let all: Vec<&Entry> = v.entries();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].host, r);
        drop(v);
        assert_eq!(
            t.view(HostAddr(40 * MIB), 8).lookup(HostAddr(40 * MIB), 8),
            Some((HostAddr(MIB), Found::Contained))
        );
    }

    /// Threads mapping and unmapping their own data, plus one thread
    /// mapping spanning entries over all of it: counts stay exact.
    #[test]
    fn concurrent_threads_keep_the_table_consistent() {
        let t = ShardedTable::default();
        std::thread::scope(|scope| {
            for th in 0..4u64 {
                let t = &t;
                scope.spawn(move || {
                    let base = (1 + th * 5) * MIB + 64;
                    for i in 0..20_000u64 {
                        let hp = HostAddr(base + (i % 7) * 64);
                        let mut v = t.view(hp, 32);
                        match v.lookup(hp, 32) {
                            None => v.insert(entry(hp.0, hp.0 + 32)).unwrap(),
                            Some((k, Found::Contained)) => {
                                v.get_mut(k).unwrap().dyn_rc += 1;
                            }
                            Some(other) => panic!("{other:?}"),
                        }
                        drop(v);
                        let mut v = t.view(hp, 32);
                        let (k, _) = v.lookup(hp, 32).expect("own entry present");
                        let e = v.get_mut(k).unwrap();
                        e.dyn_rc -= 1;
                        if e.dyn_rc == 0 {
                            v.remove(k).unwrap();
                        }
                    }
                });
            }
            let t = &t;
            scope.spawn(move || {
                for i in 0..2_000u64 {
                    let b = HostAddr((30 + i % 5) * MIB - 32);
                    let mut v = t.view(b, 64);
                    if v.lookup(b, 64).is_none() {
                        v.insert(entry(b.0, b.0 + 64)).unwrap();
                    } else {
                        v.remove(b).unwrap();
                    }
                }
            });
        });
        let left = t.view_all().entries().len();
        assert_eq!(left, 0, "every thread removed what it mapped");
        assert!(t.view_all().is_empty());
        let far = HostAddr(32 * MIB);
        assert!(t.view(far, 0).last_below(far).is_none());
    }
}
