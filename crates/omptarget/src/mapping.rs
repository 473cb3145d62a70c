//! The per-device host-to-device mapping table (reference section 5, rules 1-2, 4).
//!
//! Pure data structure: no device calls, no printing, so the lookup and
//! reference-count rules can be unit-tested without C.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use offload_core::plugin::DevicePtr;
pub use offload_core::range_map::Neighbours;
use offload_core::range_map::{Ranged, Store as RangeStore};

use crate::addr::{HostAddr, HostRange};

/// Infinite reference count (declare target globals, associated pointers).
pub const INF: u64 = u64::MAX;

/// A pointer inside a mapped block whose device copy was redirected to a
/// device pointee (pointer attachment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shadow {
    /// Host address of the pointer variable.
    pub host_ptr_addr: HostAddr,
    /// The value the host pointer had (restored after FROM copies).
    pub host_value: HostAddr,
    /// Device address of the device copy of the pointer.
    pub tgt_ptr_addr: DevicePtr,
    /// The value written into the device pointer.
    pub tgt_value: DevicePtr,
}

#[derive(Debug, Clone)]
pub struct Entry {
    /// The base the construct named (a zero-sized lookup between it and
    /// the range finds the entry).
    pub hst_base: HostAddr,
    /// The mapped host bytes; the entry's key is their begin.
    pub host: HostRange,
    /// The device block (before any struct padding); freed with the entry
    /// when `owned`.
    pub tgt_alloc: DevicePtr,
    /// The device address of `host.begin()`.
    pub tgt_begin: DevicePtr,
    pub dyn_rc: u64,
    pub hold_rc: u64,
    /// Map-name C string (0 = none).
    pub name: usize,
    /// The device memory belongs to this entry (freed on removal).
    pub owned: bool,
    /// Host memory used directly (unified shared memory): no copies.
    pub host_ptr: bool,
    /// The host range was locked for this entry
    /// (`LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS`): unlocked at its removal.
    pub host_locked: bool,
    pub shadows: Vec<Shadow>,
}

impl Ranged for Entry {
    type Key = HostAddr;
    #[inline]
    fn key(&self) -> HostAddr {
        self.host.begin()
    }
    #[inline]
    fn bounds(&self) -> (u64, u64) {
        (self.host.begin().0, self.host.end().0)
    }
}

impl Entry {
    /// A placeholder (what a recycled box holds).
    const EMPTY: Entry = Entry {
        hst_base: HostAddr::NULL,
        host: HostRange::EMPTY,
        tgt_alloc: DevicePtr::NULL,
        tgt_begin: DevicePtr::NULL,
        dyn_rc: 0,
        hold_rc: 0,
        name: 0,
        owned: false,
        host_ptr: false,
        host_locked: false,
        shadows: Vec::new(),
    };

    pub fn size(&self) -> u64 {
        self.host.len()
    }
    /// The host begin address, the entry's key in a table.
    #[inline]
    pub fn key(&self) -> HostAddr {
        self.host.begin()
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
    #[inline]
    pub fn tgt_of(&self, hp: HostAddr) -> DevicePtr {
        self.tgt_begin.offset(hp.offset_from(self.host.begin()))
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

/// One device's mappings (or one shard of them), by host begin address.
///
/// Entries are boxed, so the ordered store holds only keys and pointers:
/// inserting and removing shifts little memory. While small the store is a
/// sorted vector (a binary search over the keys alone); past
/// `SMALL_MAX` entries it becomes a B-tree. Boxes of removed entries are
/// kept for the next insert (a `map(tofrom:)` region inserts and removes
/// each of its entries once).
#[derive(Default, Debug)]
// Boxed on purpose: the boxes move between the store and the spares, and
// the vectors shift pointers, not entries.
#[allow(clippy::vec_box)]
pub struct Table {
    store: Store,
    spare: Vec<Box<Entry>>,
    /// Position of the entry the last neighbour query returned in a small
    /// store: a lookup is followed by a `get`/`get_mut` of that entry.
    /// (Relaxed atomic loads and stores are plain moves; the table is
    /// only used under its shard's write lock.)
    hint: AtomicUsize,
}

#[derive(Debug)]
#[allow(clippy::vec_box)] // see Table
enum Store {
    Small {
        keys: Vec<HostAddr>,
        entries: Vec<Box<Entry>>,
    },
    Large(BTreeMap<HostAddr, Box<Entry>>),
}

impl Default for Store {
    fn default() -> Self {
        Store::Small {
            keys: Vec::new(),
            entries: Vec::new(),
        }
    }
}

/// Where `key` sits in sorted `keys`: at `hint` when it is there (the
/// entry the last lookup found), else by binary search.
#[inline]
fn position(keys: &[HostAddr], key: HostAddr, hint: usize) -> Option<usize> {
    if keys.get(hint) == Some(&key) {
        return Some(hint);
    }
    keys.binary_search(&key).ok()
}

/// Entries a table keeps in a sorted vector.
const SMALL_MAX: usize = 64;
/// Boxes a table keeps for reuse.
const SPARE_BOXES: usize = 32;

/// LLVM's lookupMapping: the key of the entry the range hits and how.
/// A zero-sized range asks about one address (using the entries' bases);
/// otherwise the entry containing `hp` wins, then the first entry the
/// range overlaps from the left. Written over the neighbours of an address
/// ([`Neighbours`]): a single [`Table`] and a view over several shards
/// (see `shards.rs`) both provide them.
pub fn lookup_in(
    t: &impl Neighbours<Value = Entry>,
    hp: HostAddr,
    size: u64,
) -> Option<(HostAddr, Found)> {
    let at_or_before = |x: HostAddr| t.last_below(x.saturating_add(1));
    if size == 0 {
        if let Some((k, e)) = at_or_before(hp) {
            if hp < e.host.end() || hp < e.hst_base {
                return Some((k, Found::Contained));
            }
        }
        return match t.first_above(hp) {
            Some((k, e)) if hp >= e.hst_base => Some((k, Found::Contained)),
            _ => None,
        };
    }
    let end = hp.saturating_add(size);
    // One search in the common cases: the last entry starting before
    // `end` is either the entry at or before `hp` (then no later entry
    // can overlap) or an entry overlapping from the right.
    let (qk, q) = t.last_below(end)?;
    if q.host.begin() <= hp {
        if hp < q.host.end() && end <= q.host.end() {
            return Some((qk, Found::Contained));
        }
        if hp < q.host.end() {
            return Some((qk, Found::Extends));
        }
        return None;
    }
    // Something overlaps from the right; LLVM reports the left neighbour
    // first, else the first entry after `hp`.
    if let Some((k, e)) = at_or_before(hp) {
        if hp < e.host.end() {
            return Some((k, Found::Extends));
        }
    }
    let (k, _) = t.first_above(hp)?;
    Some((k, Found::Extends))
}

impl Neighbours for Table {
    type Value = Entry;
    #[inline]
    fn last_below(&self, x: HostAddr) -> Option<(HostAddr, &Entry)> {
        match &self.store {
            Store::Small { keys, entries } => {
                let i = keys.partition_point(|&k| k < x).checked_sub(1)?;
                self.hint.store(i, Ordering::Relaxed);
                Some((keys[i], &*entries[i]))
            }
            Store::Large(map) => map.range(..x).next_back().map(|(&k, e)| (k, &**e)),
        }
    }
    #[inline]
    fn first_above(&self, x: HostAddr) -> Option<(HostAddr, &Entry)> {
        match &self.store {
            Store::Small { keys, entries } => {
                let i = keys.partition_point(|&k| k <= x);
                let &k = keys.get(i)?;
                self.hint.store(i, Ordering::Relaxed);
                Some((k, &*entries[i]))
            }
            Store::Large(map) => map
                .range((std::ops::Bound::Excluded(x), std::ops::Bound::Unbounded))
                .next()
                .map(|(&k, e)| (k, &**e)),
        }
    }
}

impl Table {
    /// See [`lookup_in`].
    #[inline]
    pub fn lookup(&self, hp: HostAddr, size: u64) -> Option<(HostAddr, Found)> {
        lookup_in(self, hp, size)
    }

    pub fn get(&self, key: HostAddr) -> Option<&Entry> {
        match &self.store {
            Store::Small { keys, entries } => {
                position(keys, key, self.hint.load(Ordering::Relaxed)).map(|i| &*entries[i])
            }
            Store::Large(map) => map.get(&key).map(|b| &**b),
        }
    }

    pub fn get_mut(&mut self, key: HostAddr) -> Option<&mut Entry> {
        match &mut self.store {
            Store::Small { keys, entries } => {
                position(keys, key, self.hint.load(Ordering::Relaxed)).map(|i| &mut *entries[i])
            }
            Store::Large(map) => map.get_mut(&key).map(|b| &mut **b),
        }
    }

    /// File `e` under its host begin (replacing an entry with that key,
    /// which is returned).
    pub fn insert(&mut self, e: Entry) -> Option<Entry> {
        let key = e.key();
        let boxed = match self.spare.pop() {
            Some(mut b) => {
                *b = e;
                b
            }
            None => Box::new(e),
        };
        match &mut self.store {
            Store::Small { keys, entries } => match keys.binary_search(&key) {
                Ok(i) => Some(*std::mem::replace(&mut entries[i], boxed)),
                Err(i) if keys.len() < SMALL_MAX => {
                    keys.insert(i, key);
                    entries.insert(i, boxed);
                    None
                }
                Err(_) => {
                    let mut map: BTreeMap<HostAddr, Box<Entry>> =
                        keys.drain(..).zip(entries.drain(..)).collect();
                    map.insert(key, boxed);
                    self.store = Store::Large(map);
                    None
                }
            },
            Store::Large(map) => map.insert(key, boxed).map(|b| *b),
        }
    }

    pub fn remove(&mut self, key: HostAddr) -> Option<Entry> {
        let mut b = match &mut self.store {
            Store::Small { keys, entries } => {
                let i = position(keys, key, self.hint.load(Ordering::Relaxed))?;
                keys.remove(i);
                entries.remove(i)
            }
            Store::Large(map) => map.remove(&key)?,
        };
        if self.spare.len() >= SPARE_BOXES {
            return Some(*b);
        }
        let e = std::mem::replace(&mut *b, Entry::EMPTY);
        self.spare.push(b);
        Some(e)
    }

    pub fn len(&self) -> usize {
        match &self.store {
            Store::Small { keys, .. } => keys.len(),
            Store::Large(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, by host begin.
    pub fn values(&self) -> Box<dyn Iterator<Item = &Entry> + '_> {
        match &self.store {
            Store::Small { entries, .. } => Box::new(entries.iter().map(|b| &**b)),
            Store::Large(map) => Box::new(map.values().map(|b| &**b)),
        }
    }
}

impl RangeStore for Table {
    #[inline]
    fn get(&self, key: HostAddr) -> Option<&Entry> {
        Table::get(self, key)
    }
    #[inline]
    fn get_mut(&mut self, key: HostAddr) -> Option<&mut Entry> {
        Table::get_mut(self, key)
    }
    #[inline]
    fn insert(&mut self, e: Entry) -> Option<Entry> {
        Table::insert(self, e)
    }
    #[inline]
    fn remove(&mut self, key: HostAddr) -> Option<Entry> {
        Table::remove(self, key)
    }
    fn len(&self) -> usize {
        Table::len(self)
    }
    fn values(&self) -> Box<dyn Iterator<Item = &Entry> + '_> {
        Table::values(self)
    }
    fn retain(&mut self, keep: &mut dyn FnMut(&mut Entry) -> bool) {
        let dropped: Vec<HostAddr> = match &mut self.store {
            Store::Small { entries, .. } => entries
                .iter_mut()
                .filter_map(|e| (!keep(e)).then(|| e.key()))
                .collect(),
            Store::Large(map) => map
                .iter_mut()
                .filter_map(|(&k, e)| (!keep(e)).then_some(k))
                .collect(),
        };
        for k in dropped {
            Table::remove(self, k);
        }
    }
}

/// A plain entry mapping `[begin, end)` to device address `begin + 0x1000`.
#[cfg(test)]
pub(crate) fn test_entry(begin: u64, end: u64) -> Entry {
    Entry {
        hst_base: HostAddr(begin),
        host: HostRange::new(HostAddr(begin), end - begin).unwrap(),
        tgt_alloc: DevicePtr(begin + 0x1000),
        tgt_begin: DevicePtr(begin + 0x1000),
        dyn_rc: 1,
        hold_rc: 0,
        name: 0,
        owned: true,
        host_ptr: false,
        host_locked: false,
        shadows: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(b: u64, e: u64) -> Entry {
        test_entry(b, e)
    }

    /// [`Table::lookup`] in plain numbers.
    fn lk(t: &Table, hp: u64, size: u64) -> Option<(u64, Found)> {
        t.lookup(HostAddr(hp), size).map(|(k, f)| (k.0, f))
    }

    #[test]
    fn contained_and_extensions() {
        let mut t = Table::default();
        t.insert(entry(100, 116));
        assert_eq!(lk(&t, 100, 16), Some((100, Found::Contained)));
        assert_eq!(lk(&t, 104, 4), Some((100, Found::Contained)));
        assert_eq!(lk(&t, 100, 32), Some((100, Found::Extends)));
        assert_eq!(lk(&t, 96, 8), Some((100, Found::Extends)));
        assert_eq!(lk(&t, 116, 4), None);
        assert_eq!(lk(&t, 80, 20), None);
    }

    #[test]
    fn lookup_between_neighbours() {
        let mut t = Table::default();
        t.insert(entry(100, 116));
        t.insert(entry(200, 216));
        t.insert(entry(300, 316));
        // Gap between two entries, touching neither.
        assert_eq!(lk(&t, 116, 84), None);
        // Overlapping the right neighbour only.
        assert_eq!(lk(&t, 150, 60), Some((200, Found::Extends)));
        // Overlapping both: the left neighbour is reported (LLVM's order).
        assert_eq!(lk(&t, 110, 100), Some((100, Found::Extends)));
        // Spanning a whole entry from before it.
        assert_eq!(lk(&t, 190, 40), Some((200, Found::Extends)));
        assert_eq!(lk(&t, 204, 8), Some((200, Found::Contained)));
        assert_eq!(lk(&t, 316, 1), None);
        // Overlapping two entries from the left: the first one (LLVM's
        // upper_bound), not the last.
        assert_eq!(lk(&t, 150, 200), Some((200, Found::Extends)));
        assert_eq!(lk(&t, 0, 1), None);
    }

    #[test]
    fn zero_size_lookup_uses_base() {
        let mut t = Table::default();
        let mut e = entry(100, 116);
        e.hst_base = HostAddr(90);
        t.insert(e);
        assert_eq!(lk(&t, 95, 0), Some((100, Found::Contained)));
        assert_eq!(lk(&t, 110, 0), Some((100, Found::Contained)));
        assert_eq!(lk(&t, 116, 0), None);
        assert_eq!(lk(&t, 80, 0), None);
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

    /// The store changes from a vector to a B-tree past `SMALL_MAX`
    /// entries; lookups, updates and removals answer the same on both.
    #[test]
    fn small_and_large_stores_agree() {
        let mut t = Table::default();
        for i in (0..200u64).rev() {
            t.insert(entry(1000 + i * 16, 1000 + i * 16 + 8));
            assert_eq!(t.len(), 200 - i as usize);
            assert_eq!(
                lk(&t, 1000 + i * 16 + 4, 2),
                Some((1000 + i * 16, Found::Contained))
            );
            assert_eq!(lk(&t, 1000 + i * 16 + 8, 4), None);
            assert_eq!(
                lk(&t, 1000 + i * 16 - 4, 8),
                Some((1000 + i * 16, Found::Extends))
            );
            if i == 200 - SMALL_MAX as u64 {
                assert!(matches!(t.store, Store::Small { .. }));
            }
        }
        assert!(matches!(t.store, Store::Large(_)));
        let keys: Vec<HostAddr> = t.values().map(|e| e.key()).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        t.get_mut(HostAddr(1000)).unwrap().dyn_rc = 7;
        assert_eq!(t.get(HostAddr(1000)).unwrap().dyn_rc, 7);
        for i in 0..200u64 {
            assert_eq!(
                t.remove(HostAddr(1000 + i * 16)).map(|e| e.key()),
                Some(HostAddr(1000 + i * 16))
            );
        }
        assert!(t.is_empty());
        assert!(t.remove(HostAddr(1000)).is_none());
        // Recycled boxes carry nothing of the entries they held.
        t.insert(entry(5, 6));
        assert_eq!(t.get(HostAddr(5)).unwrap().dyn_rc, 1);
    }

    #[test]
    fn many_entries() {
        let mut t = Table::default();
        for i in 0..10_000u64 {
            t.insert(entry(i * 64, i * 64 + 32));
        }
        assert_eq!(lk(&t, 640 * 3 + 8, 8), Some((640 * 3, Found::Contained)));
        assert_eq!(lk(&t, 64 * 5 + 40, 8), None);
        assert_eq!(lk(&t, 64 * 5 + 24, 16), Some((320, Found::Extends)));
    }
}
