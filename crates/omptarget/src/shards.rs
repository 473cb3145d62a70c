//! The mapping table of one device, split by host address so that host
//! threads mapping unrelated data do not serialize on one lock.
//!
//! Host memory is cut into 1 MiB regions; a region hashes to one of
//! [`SHARDS`] shards, each a [`Table`] behind its own lock on its own cache
//! lines. An entry inside one region lives in that region's shard. An entry
//! crossing a region boundary lives in the *spanning* table, and every shard
//! it touches counts it, so an operation on a range inside one region locks
//! its shard, and the spanning table only while that count is non-zero.
//!
//! Rules (they make a [`View`] see exactly what one table would):
//! - an entry inside one region is in its shard, any other one is spanning;
//! - a view locks every shard its range touches, ascending, then the
//!   spanning table (one order everywhere: no deadlock);
//! - a spanning entry is inserted only through a view holding every shard it
//!   touches, so a shard's count is never zero while such an entry exists
//!   that a view of that shard could miss.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::addr::{HostAddr, HostRange};
use crate::mapping::{lookup_in, Entry, Found, Neighbours, Table};

/// log2 of the host region size.
const REGION_SHIFT: u32 = 20;
const SHARD_BITS: u32 = 4;
/// Number of shards per device.
pub const SHARDS: usize = 1 << SHARD_BITS;
const ALL_SHARDS: u32 = u32::MAX >> (32 - SHARDS);

/// One shard, alone on its cache lines (threads write it on every map).
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    table: Mutex<Table>,
    /// Spanning entries touching a region of this shard.
    spanning: AtomicU32,
}

#[repr(align(128))]
#[derive(Default)]
struct Spanning(Mutex<Table>);

#[derive(Default)]
pub struct ShardedTable {
    shards: [Shard; SHARDS],
    spanning: Spanning,
}

fn region(a: HostAddr) -> u64 {
    a.0 >> REGION_SHIFT
}

fn shard_of_region(r: u64) -> usize {
    // Fibonacci hashing: neighbouring regions (one thread's stack, one
    // array) and far apart ones (two threads' stacks) spread over shards.
    (r.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARD_BITS)) as usize
}

fn shard_of(a: HostAddr) -> usize {
    shard_of_region(region(a))
}

/// The last byte of `r`, or its begin when it is empty.
fn last_byte(r: HostRange) -> HostAddr {
    if r.is_empty() {
        r.begin()
    } else {
        HostAddr(r.end().0 - 1)
    }
}

/// Whether `r` lies inside one region (empty ranges do).
fn in_one_region(r: HostRange) -> bool {
    r.is_empty() || region(r.begin()) == region(last_byte(r))
}

/// The shards the regions of `r` hash to, as a bit set.
fn shard_set(r: HostRange) -> u32 {
    let (first, last) = (region(r.begin()), region(last_byte(r)));
    if last - first >= SHARDS as u64 {
        return ALL_SHARDS;
    }
    (first..=last).fold(0, |set, r| set | 1 << shard_of_region(r))
}

fn lock(m: &Mutex<Table>) -> MutexGuard<'_, Table> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An entry outside the range a view was opened for (a caller's bug).
#[derive(Debug, PartialEq, Eq)]
pub struct OutsideView;

enum Locked<'a> {
    One(usize, MutexGuard<'a, Table>),
    /// Ascending shard index.
    Many(Vec<(usize, MutexGuard<'a, Table>)>),
}

/// The part of a [`ShardedTable`] one operation needs, locked: behaves as
/// one table for every range inside the range it was opened for.
pub struct View<'a> {
    owner: &'a ShardedTable,
    locked: Locked<'a>,
    /// The spanning table, locked when first needed (a view of one shard
    /// whose own entry holds the range never needs it).
    spanning: OnceCell<MutexGuard<'a, Table>>,
    /// Whether spanning entries may touch the locked shards.
    spanning_near: bool,
    /// The range this view answers for (entries may be inserted inside it).
    range: HostRange,
}

impl ShardedTable {
    /// Lock what the range `[hp, hp + size)` needs. A zero size asks about
    /// the address `hp` (as [`Table::lookup`] does).
    #[inline]
    pub fn view(&self, hp: HostAddr, size: u64) -> View<'_> {
        if size == 0 {
            return self.view_point(hp);
        }
        let range = HostRange::saturating(hp, size);
        if in_one_region(range) {
            self.view_shard(shard_of(hp), range)
        } else {
            self.view_shards(shard_set(range), range)
        }
    }

    /// Lock everything (whole-table walks: dumps, names for messages).
    pub fn view_all(&self) -> View<'_> {
        self.view_shards(ALL_SHARDS, HostRange::ALL)
    }

    #[inline]
    fn view_shard(&self, s: usize, range: HostRange) -> View<'_> {
        let shard = &self.shards[s];
        let guard = lock(&shard.table);
        // Read under the shard's lock: no spanning entry touching this
        // shard can appear until the view is dropped.
        let spanning_near = shard.spanning.load(Ordering::Acquire) > 0;
        View {
            owner: self,
            locked: Locked::One(s, guard),
            spanning: OnceCell::new(),
            spanning_near,
            range,
        }
    }

    fn view_shards(&self, set: u32, range: HostRange) -> View<'_> {
        let locked = (0..SHARDS)
            .filter(|s| set & (1 << s) != 0)
            .map(|s| (s, lock(&self.shards[s].table)))
            .collect();
        View {
            owner: self,
            locked: Locked::Many(locked),
            spanning: OnceCell::from(lock(&self.spanning.0)),
            spanning_near: true,
            range,
        }
    }

    /// A zero-sized lookup may hit an entry whose base lies far away: the
    /// shard of `hp` answers when an entry there holds `hp` (then that entry
    /// is the nearest one at or below `hp` in the whole table), else the
    /// whole table is locked.
    fn view_point(&self, hp: HostAddr) -> View<'_> {
        let v = self.view_shard(shard_of(hp), HostRange::saturating(hp, 0));
        let holds = |t: &Table| matches!(t.last_below(hp.saturating_add(1)), Some((_, e)) if hp < e.host.end());
        if v.locked.table(shard_of(hp)).is_some_and(holds)
            || (v.spanning_near && holds(v.spanning_table()))
        {
            return v;
        }
        drop(v);
        self.view_all()
    }
}

impl<'a> Locked<'a> {
    fn table(&self, s: usize) -> Option<&Table> {
        match self {
            Locked::One(i, g) => (*i == s).then_some(&**g),
            Locked::Many(gs) => gs.iter().find(|(i, _)| *i == s).map(|(_, g)| &**g),
        }
    }

    fn table_mut(&mut self, s: usize) -> Option<&mut Table> {
        match self {
            Locked::One(i, g) => (*i == s).then_some(&mut **g),
            Locked::Many(gs) => gs.iter_mut().find(|(i, _)| *i == s).map(|(_, g)| &mut **g),
        }
    }
}

impl View<'_> {
    fn tables(&self) -> impl Iterator<Item = &Table> {
        let (one, many) = match &self.locked {
            Locked::One(_, g) => (Some(&**g), &[][..]),
            Locked::Many(gs) => (None, &gs[..]),
        };
        one.into_iter()
            .chain(many.iter().map(|(_, g)| &**g))
            .chain(self.spanning.get().map(|g| &**g))
    }

    /// The spanning table, locked now if not yet (after the shards: the
    /// one lock order).
    fn spanning_table(&self) -> &Table {
        self.spanning.get_or_init(|| lock(&self.owner.spanning.0))
    }

    /// See [`crate::mapping::lookup_in`]; exact for ranges inside the view's.
    #[inline]
    pub fn lookup(&self, hp: HostAddr, size: u64) -> Option<(HostAddr, Found)> {
        debug_assert!(
            hp >= self.range.begin() && hp.saturating_add(size) <= self.range.end().max(hp)
        );
        match &self.locked {
            Locked::One(_, shard) if size > 0 => {
                let found = shard.lookup(hp, size);
                // Entries are disjoint: one holding the whole range leaves
                // no room for a spanning entry to matter.
                if !self.spanning_near || matches!(found, Some((_, Found::Contained))) {
                    return found;
                }
                let spanning = self.spanning_table().lookup(hp, size);
                either_of(found, spanning, hp)
            }
            _ => lookup_in(self, hp, size),
        }
    }

    pub fn get(&self, key: HostAddr) -> Option<&Entry> {
        if let Some(e) = self.locked.table(shard_of(key)).and_then(|t| t.get(key)) {
            return Some(e);
        }
        self.spanning_near.then(|| self.spanning_table().get(key))?
    }

    pub fn get_mut(&mut self, key: HostAddr) -> Option<&mut Entry> {
        if let Some(e) = self
            .locked
            .table_mut(shard_of(key))
            .and_then(|t| t.get_mut(key))
        {
            return Some(e);
        }
        // (Field by field: the shard's borrow above may be returned.)
        if self.spanning_near && self.spanning.get().is_none() {
            let _ = self.spanning.set(lock(&self.owner.spanning.0));
        }
        self.spanning.get_mut().and_then(|t| t.get_mut(key))
    }

    /// File `e`, which must lie inside the range this view was opened for
    /// (else it is refused: the shards it needs may not be locked).
    pub fn insert(&mut self, e: Entry) -> Result<(), OutsideView> {
        if !self.range.contains_range(e.host) {
            return Err(OutsideView);
        }
        if in_one_region(e.host) {
            return match self.locked.table_mut(shard_of(e.key())) {
                Some(t) => {
                    t.insert(e);
                    Ok(())
                }
                None => Err(OutsideView),
            };
        }
        let Some(spanning) = self.spanning.get_mut() else {
            return Err(OutsideView);
        };
        // Every shard in the set is locked by this view (the view's range
        // holds the entry's), so no view of them is between its lock and
        // its count check.
        let set = shard_set(e.host);
        for s in 0..SHARDS {
            if set & (1 << s) != 0 {
                self.owner.shards[s].spanning.fetch_add(1, Ordering::AcqRel);
            }
        }
        spanning.insert(e);
        Ok(())
    }

    pub fn remove(&mut self, key: HostAddr) -> Option<Entry> {
        if let Some(e) = self
            .locked
            .table_mut(shard_of(key))
            .and_then(|t| t.remove(key))
        {
            return Some(e);
        }
        if self.spanning_near && self.spanning.get().is_none() {
            let _ = self.spanning.set(lock(&self.owner.spanning.0));
        }
        let e = self.spanning.get_mut()?.remove(key)?;
        // Removed first, uncounted after: a view reading a stale count just
        // locks the spanning table for nothing.
        let set = shard_set(e.host);
        for s in 0..SHARDS {
            if set & (1 << s) != 0 {
                self.owner.shards[s].spanning.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Some(e)
    }

    /// Every entry this view holds, by host address.
    pub fn entries(&self) -> Vec<&Entry> {
        let mut all: Vec<&Entry> = self.tables().flat_map(|t| t.values()).collect();
        all.sort_by_key(|e| e.key());
        all
    }

    pub fn is_empty(&self) -> bool {
        self.tables().all(|t| t.is_empty())
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

impl Neighbours for View<'_> {
    fn last_below(&self, x: HostAddr) -> Option<(HostAddr, &Entry)> {
        self.tables()
            .filter_map(|t| t.last_below(x))
            .max_by_key(|(k, _)| *k)
    }
    fn first_above(&self, x: HostAddr) -> Option<(HostAddr, &Entry)> {
        self.tables()
            .filter_map(|t| t.first_above(x))
            .min_by_key(|(k, _)| *k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << REGION_SHIFT;

    fn entry(begin: u64, end: u64) -> Entry {
        crate::mapping::test_entry(begin, end)
    }

    fn range_of(begin: u64, end: u64) -> HostRange {
        HostRange::new(HostAddr(begin), end - begin).unwrap()
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
        let touched = shard_set(range_of(b, e));
        assert_eq!(touched.count_ones(), 2);
        for s in 0..SHARDS {
            let want = u32::from(touched & (1 << s) != 0);
            assert_eq!(t.shards[s].spanning.load(Ordering::Relaxed), want);
        }
        // A view of one region sees the spanning entry.
        let (m3, b) = (HostAddr(3 * MIB), HostAddr(b));
        assert_eq!(t.view(m3, 4).lookup(m3, 4), Some((b, Found::Contained)));
        let before = HostAddr(b.0 - 8);
        assert_eq!(
            t.view(before, 16).lookup(before, 16),
            Some((b, Found::Extends))
        );
        assert!(t.view(m3, 4).remove(b).is_some());
        assert!(t
            .shards
            .iter()
            .all(|s| s.spanning.load(Ordering::Relaxed) == 0));
        assert!(t.view_all().is_empty());
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
        assert_eq!(shard_set(range_of(0, 64 * MIB)), ALL_SHARDS);
        assert_eq!(shard_set(range_of(MIB, MIB + 1)).count_ones(), 1);
        let t = ShardedTable::default();
        t.view(HostAddr(MIB), 64 * MIB)
            .insert(entry(MIB, 65 * MIB))
            .unwrap();
        assert!(t
            .shards
            .iter()
            .all(|s| s.spanning.load(Ordering::Relaxed) == 1));
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
        assert!(t
            .shards
            .iter()
            .all(|s| s.spanning.load(Ordering::Relaxed) == 0));
    }
}
