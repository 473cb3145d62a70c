//! A sharded map of disjoint address ranges: the machinery both the
//! allocation index ([`crate::index`]) and the OpenMP mapping table
//! (omptarget's `mapping.rs`) are built on.
//!
//! Generic over the per-shard [`Store`] (an ordered set of values keyed by
//! the begin of the range each covers): the index files `Arc<Slot>`s in a
//! `BTreeMap`, the mapping table its own small-vector/B-tree table of
//! entries. What a value *means* (liveness, reference counts, shadows)
//! stays with its user; this module only knows each value's bounds.
//!
//! Design rules:
//!
//! - Addresses are cut into 1 MiB granules (`GRANULE_SHIFT`); a granule
//!   hashes (Fibonacci hashing, so that neighbouring granules and far apart
//!   ones both spread) to one of [`SHARDS`] shards. Each shard is a store
//!   behind its own `RwLock`, alone on its cache lines with a count of the
//!   spanning values touching it.
//! - A value inside one granule (an empty one counts as inside the granule
//!   of its begin) is filed in that granule's shard; any other value is
//!   *spanning*: filed once in the spanning table, and counted in every
//!   shard one of its granules hashes to. So the shard of an address holds
//!   every value that could contain it, except spanning ones, and the
//!   spanning table needs to be looked at only while that shard's count is
//!   non-zero.
//! - Locks are taken in one order everywhere: shards ascending, then the
//!   spanning table. The direct operations ([`RangeMap::find_map`],
//!   [`RangeMap::insert`], ...) hold one lock at a time; a [`View`] holds
//!   every shard its range touches (then the spanning table, when needed)
//!   and behaves as one table for every range inside its own.
//! - A spanning value is counted before it is filed and uncounted after it
//!   is taken out, so a reader seeing a zero count can miss no filed value.
//!   Inserted through a view (which holds every shard it touches), a
//!   spanning value appears atomically to every other view; inserted
//!   directly, each single lookup sees it or not (what the index needs).
//! - A value's bounds must not change while it is filed (its counts are
//!   computed from them when it is filed and when it is taken out).

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::plugin::DevicePtr;

/// log2 of the granule size (1 MiB): small enough that threads' data
/// spreads over the shards, large enough that a big range touches few.
pub const GRANULE_SHIFT: u32 = 20;
const SHARD_BITS: u32 = 4;
/// Number of shards of a map.
pub const SHARDS: usize = 1 << SHARD_BITS;
const ALL_SHARDS: u32 = u32::MAX >> (32 - SHARDS);

/// An address type a map is keyed by.
pub trait Address: Copy + Ord {
    fn raw(self) -> u64;
    fn from_raw(raw: u64) -> Self;
}

impl Address for u64 {
    #[inline]
    fn raw(self) -> u64 {
        self
    }
    #[inline]
    fn from_raw(raw: u64) -> Self {
        raw
    }
}

impl Address for DevicePtr {
    #[inline]
    fn raw(self) -> u64 {
        self.0
    }
    #[inline]
    fn from_raw(raw: u64) -> Self {
        DevicePtr(raw)
    }
}

/// A value filed in a map: the range of addresses it covers.
pub trait Ranged {
    type Key: Address;
    /// Its key: the begin of its range.
    fn key(&self) -> Self::Key;
    /// `[begin, end)` as raw addresses (`begin <= end`; may be empty).
    fn bounds(&self) -> (u64, u64);
}

impl<T: Ranged> Ranged for Arc<T> {
    type Key = T::Key;
    #[inline]
    fn key(&self) -> T::Key {
        (**self).key()
    }
    #[inline]
    fn bounds(&self) -> (u64, u64) {
        (**self).bounds()
    }
}

/// The key type of a store's values.
pub type KeyOf<S> = <<S as Neighbours>::Value as Ranged>::Key;

/// The neighbours of an address in an ordered set of disjoint values: what
/// interval lookups are written over (a store, or a view of several).
pub trait Neighbours {
    type Value: Ranged;
    /// The value with the greatest key `< x`.
    fn last_below(&self, x: KeyOf<Self>) -> Option<(KeyOf<Self>, &Self::Value)>;
    /// The value with the least key `> x`.
    fn first_above(&self, x: KeyOf<Self>) -> Option<(KeyOf<Self>, &Self::Value)>;
}

/// One shard's (or the spanning table's) ordered values, by key.
pub trait Store: Neighbours + Default {
    fn get(&self, key: KeyOf<Self>) -> Option<&Self::Value>;
    fn get_mut(&mut self, key: KeyOf<Self>) -> Option<&mut Self::Value>;
    /// File `v` under its key; the value it replaces, if any.
    fn insert(&mut self, v: Self::Value) -> Option<Self::Value>;
    fn remove(&mut self, key: KeyOf<Self>) -> Option<Self::Value>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every value, by key.
    fn values(&self) -> Box<dyn Iterator<Item = &Self::Value> + '_>;
    /// Keep the values `keep` says yes to.
    fn retain(&mut self, keep: &mut dyn FnMut(&mut Self::Value) -> bool);
}

impl<V: Ranged> Neighbours for BTreeMap<V::Key, V> {
    type Value = V;
    #[inline]
    fn last_below(&self, x: V::Key) -> Option<(V::Key, &V)> {
        self.range(..x).next_back().map(|(&k, v)| (k, v))
    }
    #[inline]
    fn first_above(&self, x: V::Key) -> Option<(V::Key, &V)> {
        self.range((Bound::Excluded(x), Bound::Unbounded))
            .next()
            .map(|(&k, v)| (k, v))
    }
}

impl<V: Ranged> Store for BTreeMap<V::Key, V> {
    #[inline]
    fn get(&self, key: V::Key) -> Option<&V> {
        BTreeMap::get(self, &key)
    }
    #[inline]
    fn get_mut(&mut self, key: V::Key) -> Option<&mut V> {
        BTreeMap::get_mut(self, &key)
    }
    #[inline]
    fn insert(&mut self, v: V) -> Option<V> {
        BTreeMap::insert(self, v.key(), v)
    }
    #[inline]
    fn remove(&mut self, key: V::Key) -> Option<V> {
        BTreeMap::remove(self, &key)
    }
    fn len(&self) -> usize {
        BTreeMap::len(self)
    }
    fn values(&self) -> Box<dyn Iterator<Item = &V> + '_> {
        Box::new(BTreeMap::values(self))
    }
    fn retain(&mut self, keep: &mut dyn FnMut(&mut V) -> bool) {
        BTreeMap::retain(self, |_, v| keep(v));
    }
}

#[inline]
fn granule(a: u64) -> u64 {
    a >> GRANULE_SHIFT
}

#[inline]
fn shard_of_granule(g: u64) -> usize {
    (g.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARD_BITS)) as usize
}

/// The shard an address belongs to.
#[inline]
pub fn shard_of(a: u64) -> usize {
    shard_of_granule(granule(a))
}

/// The last byte of `[begin, end)`, or `begin` when it is empty.
#[inline]
fn last_byte(begin: u64, end: u64) -> u64 {
    if end > begin {
        end - 1
    } else {
        begin
    }
}

/// Whether `[begin, end)` crosses a granule boundary (then a value
/// covering it is filed in the spanning table).
#[inline]
pub fn is_spanning(begin: u64, end: u64) -> bool {
    granule(begin) != granule(last_byte(begin, end))
}

/// The shards the granules of `[begin, end)` hash to, as a bit set.
fn shard_set(begin: u64, end: u64) -> u32 {
    let (first, last) = (granule(begin), granule(last_byte(begin, end)));
    if last - first >= SHARDS as u64 {
        return ALL_SHARDS;
    }
    (first..=last).fold(0, |set, g| set | 1 << shard_of_granule(g))
}

fn shards_in(set: u32) -> impl Iterator<Item = usize> {
    (0..SHARDS).filter(move |s| set & (1 << s) != 0)
}

fn read<S>(l: &RwLock<S>) -> RwLockReadGuard<'_, S> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<S>(l: &RwLock<S>) -> RwLockWriteGuard<'_, S> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// One shard, alone on its cache lines (threads write it on every map).
#[repr(align(128))]
#[derive(Default)]
struct Shard<S> {
    table: RwLock<S>,
    /// Spanning values touching a granule of this shard.
    spanning: AtomicU32,
}

#[repr(align(128))]
#[derive(Default)]
struct Spanning<S>(RwLock<S>);

/// Which table of a map a value is filed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Home {
    /// The shard of its granule.
    Shard,
    /// The spanning table.
    Spanning,
}

impl Home {
    /// Where a value covering `[begin, end)` is filed.
    #[inline]
    pub fn of(begin: u64, end: u64) -> Home {
        if is_spanning(begin, end) {
            Home::Spanning
        } else {
            Home::Shard
        }
    }
}

/// A sharded map of disjoint ranges (see the module documentation).
pub struct RangeMap<S> {
    shards: [Shard<S>; SHARDS],
    spanning: Spanning<S>,
}

impl<S: Store> Default for RangeMap<S> {
    fn default() -> Self {
        RangeMap {
            shards: std::array::from_fn(|_| Shard::default()),
            spanning: Spanning::default(),
        }
    }
}

impl<S: Store> RangeMap<S> {
    /// Count (`up`) or uncount a spanning value of bounds `b` in the shards
    /// it touches.
    fn count(&self, (begin, end): (u64, u64), up: bool) {
        for s in shards_in(shard_set(begin, end)) {
            let c = &self.shards[s].spanning;
            if up {
                c.fetch_add(1, Ordering::AcqRel);
            } else {
                c.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Spanning values touching the shard of `addr` (read without a lock).
    #[inline]
    fn spanning_near(&self, addr: u64) -> bool {
        self.shards[shard_of(addr)].spanning.load(Ordering::Acquire) > 0
    }

    /// How many values the spanning table holds.
    pub fn spanning_len(&self) -> usize {
        read(&self.spanning.0).len()
    }

    /// File `v` in its home table, one lock held; the value it replaces
    /// (same key, same table), if any.
    pub fn insert(&self, v: S::Value) -> Option<S::Value> {
        let b = v.bounds();
        match Home::of(b.0, b.1) {
            Home::Shard => write(&self.shards[shard_of(b.0)].table).insert(v),
            Home::Spanning => {
                self.count(b, true);
                let old = write(&self.spanning.0).insert(v);
                if let Some(old) = &old {
                    self.count(old.bounds(), false);
                }
                old
            }
        }
    }

    /// Take out the value filed at `key` in `home` if `take` agrees.
    pub fn remove_if(
        &self,
        key: KeyOf<S>,
        home: Home,
        take: impl FnOnce(&S::Value) -> bool,
    ) -> Option<S::Value> {
        let raw = key.raw();
        match home {
            Home::Shard => {
                let mut t = write(&self.shards[shard_of(raw)].table);
                t.get(key).is_some_and(take).then(|| t.remove(key))?
            }
            Home::Spanning => {
                if !self.spanning_near(raw) {
                    return None;
                }
                let v = {
                    let mut t = write(&self.spanning.0);
                    t.get(key).is_some_and(take).then(|| t.remove(key))??
                };
                self.count(v.bounds(), false);
                Some(v)
            }
        }
    }

    /// `f` of the value with the greatest key at or below `addr` in the
    /// shard of `addr`, else (when spanning values touch that shard) in the
    /// spanning table. Read locks, one at a time: the first `Some` wins, so
    /// `f` says whether the value holds `addr` (and what to return).
    #[inline]
    pub fn find_map<R>(&self, addr: KeyOf<S>, f: impl Fn(&S::Value) -> Option<R>) -> Option<R> {
        let raw = addr.raw();
        let above = KeyOf::<S>::from_raw(raw.saturating_add(1));
        let near = |t: &S| t.last_below(above).and_then(|(_, v)| f(v));
        let shard = &self.shards[shard_of(raw)];
        if let Some(r) = near(&read(&shard.table)) {
            return Some(r);
        }
        if shard.spanning.load(Ordering::Acquire) == 0 {
            return None;
        }
        near(&read(&self.spanning.0))
    }

    /// `f` of the value filed at exactly `key` (its shard, else the
    /// spanning table), read-locked.
    #[inline]
    pub fn get_map<R>(&self, key: KeyOf<S>, f: impl Fn(&S::Value) -> Option<R>) -> Option<R> {
        let raw = key.raw();
        let shard = &self.shards[shard_of(raw)];
        if let Some(r) = read(&shard.table).get(key).and_then(&f) {
            return Some(r);
        }
        if shard.spanning.load(Ordering::Acquire) == 0 {
            return None;
        }
        read(&self.spanning.0).get(key).and_then(f)
    }

    /// `f` of every value, shard by shard, then the spanning table (not in
    /// address order).
    pub fn for_each(&self, mut f: impl FnMut(&S::Value)) {
        for shard in &self.shards {
            read(&shard.table).values().for_each(&mut f);
        }
        read(&self.spanning.0).values().for_each(f);
    }

    /// Keep only the values `keep` says yes to (one table at a time).
    pub fn retain(&self, mut keep: impl FnMut(&mut S::Value) -> bool) {
        for shard in &self.shards {
            write(&shard.table).retain(&mut keep);
        }
        write(&self.spanning.0).retain(&mut |v| {
            let kept = keep(v);
            if !kept {
                self.count(v.bounds(), false);
            }
            kept
        });
    }

    /// Lock what the range `len` bytes from `begin` needs (cut at the top of
    /// the address space). A zero `len` asks about the address `begin`:
    /// see [`RangeMap::view_point`].
    #[inline]
    pub fn view(&self, begin: KeyOf<S>, len: u64) -> View<'_, S> {
        if len == 0 {
            return self.view_point(begin);
        }
        let (b, e) = (begin.raw(), begin.raw().saturating_add(len));
        if is_spanning(b, e) {
            self.view_shards(shard_set(b, e), (b, e))
        } else {
            self.view_shard(shard_of(b), (b, e))
        }
    }

    /// Lock everything (whole-map walks).
    pub fn view_all(&self) -> View<'_, S> {
        self.view_shards(ALL_SHARDS, (0, u64::MAX))
    }

    #[inline]
    fn view_shard(&self, s: usize, range: (u64, u64)) -> View<'_, S> {
        let shard = &self.shards[s];
        let guard = write(&shard.table);
        // Read under the shard's lock: no spanning value touching this
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

    fn view_shards(&self, set: u32, range: (u64, u64)) -> View<'_, S> {
        let locked = shards_in(set)
            .map(|s| (s, write(&self.shards[s].table)))
            .collect();
        View {
            owner: self,
            locked: Locked::Many(locked),
            spanning: OnceCell::from(write(&self.spanning.0)),
            spanning_near: true,
            range,
        }
    }

    /// A view for one address: the shard of `a` when a value there (or a
    /// spanning one) holds `a` (then that value is also the nearest one at
    /// or below `a` in the whole map), else the whole map, since a lookup
    /// of an address may need neighbours far away.
    pub fn view_point(&self, a: KeyOf<S>) -> View<'_, S> {
        let raw = a.raw();
        let v = self.view_shard(shard_of(raw), (raw, raw));
        let above = KeyOf::<S>::from_raw(raw.saturating_add(1));
        let holds = |t: &S| matches!(t.last_below(above), Some((_, x)) if raw < x.bounds().1);
        if v.locked.table(shard_of(raw)).is_some_and(holds)
            || (v.spanning_near && holds(v.spanning_table()))
        {
            return v;
        }
        drop(v);
        self.view_all()
    }
}

/// A value outside the range a view was opened for (a caller's bug).
#[derive(Debug, PartialEq, Eq)]
pub struct OutsideView;

enum Locked<'a, S> {
    One(usize, RwLockWriteGuard<'a, S>),
    /// Ascending shard index.
    Many(Vec<(usize, RwLockWriteGuard<'a, S>)>),
}

impl<S> Locked<'_, S> {
    #[inline]
    fn table(&self, s: usize) -> Option<&S> {
        match self {
            Locked::One(i, g) => (*i == s).then_some(&**g),
            Locked::Many(gs) => gs.iter().find(|(i, _)| *i == s).map(|(_, g)| &**g),
        }
    }

    #[inline]
    fn table_mut(&mut self, s: usize) -> Option<&mut S> {
        match self {
            Locked::One(i, g) => (*i == s).then_some(&mut **g),
            Locked::Many(gs) => gs.iter_mut().find(|(i, _)| *i == s).map(|(_, g)| &mut **g),
        }
    }
}

/// The part of a [`RangeMap`] one operation needs, write-locked: behaves
/// as one table for every range inside the range it was opened for.
pub struct View<'a, S> {
    owner: &'a RangeMap<S>,
    locked: Locked<'a, S>,
    /// The spanning table, locked when first needed (a view of one shard
    /// whose own value holds the range never needs it).
    spanning: OnceCell<RwLockWriteGuard<'a, S>>,
    /// Whether spanning values may touch the locked shards.
    spanning_near: bool,
    /// The raw range this view answers for (values may be inserted inside it).
    range: (u64, u64),
}

impl<S: Store> View<'_, S> {
    fn tables(&self) -> impl Iterator<Item = &S> {
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
    fn spanning_table(&self) -> &S {
        self.spanning.get_or_init(|| write(&self.owner.spanning.0))
    }

    /// The raw range this view was opened for.
    pub fn range(&self) -> (u64, u64) {
        self.range
    }

    /// The one shard this view holds, when it was opened for a range
    /// inside one granule (a fast path for lookups).
    #[inline]
    pub fn single_shard(&self) -> Option<&S> {
        match &self.locked {
            Locked::One(_, g) => Some(&**g),
            Locked::Many(_) => None,
        }
    }

    /// The spanning table when spanning values may touch the locked shards
    /// (locked now if not yet), else None.
    #[inline]
    pub fn spanning_if_near(&self) -> Option<&S> {
        self.spanning_near.then(|| self.spanning_table())
    }

    pub fn get(&self, key: KeyOf<S>) -> Option<&S::Value> {
        if let Some(v) = self
            .locked
            .table(shard_of(key.raw()))
            .and_then(|t| t.get(key))
        {
            return Some(v);
        }
        self.spanning_if_near()?.get(key)
    }

    pub fn get_mut(&mut self, key: KeyOf<S>) -> Option<&mut S::Value> {
        if let Some(v) = self
            .locked
            .table_mut(shard_of(key.raw()))
            .and_then(|t| t.get_mut(key))
        {
            return Some(v);
        }
        // (Field by field: the shard's borrow above may be returned.)
        spanning_mut(&mut self.spanning, self.spanning_near, self.owner)?.get_mut(key)
    }

    /// File `v`, which must lie inside the range this view was opened for
    /// (else it is refused: the shards it needs may not be locked).
    pub fn insert(&mut self, v: S::Value) -> Result<(), OutsideView> {
        let (b, e) = v.bounds();
        if b < self.range.0 || e > self.range.1 {
            return Err(OutsideView);
        }
        if !is_spanning(b, e) {
            let t = self.locked.table_mut(shard_of(b)).ok_or(OutsideView)?;
            t.insert(v);
            return Ok(());
        }
        let spanning = self.spanning.get_mut().ok_or(OutsideView)?;
        // Every shard it touches is locked by this view (the view's range
        // holds the value's), so no view of them is between its lock and
        // its count check.
        self.owner.count((b, e), true);
        if let Some(old) = spanning.insert(v) {
            self.owner.count(old.bounds(), false);
        }
        Ok(())
    }

    pub fn remove(&mut self, key: KeyOf<S>) -> Option<S::Value> {
        if let Some(v) = self
            .locked
            .table_mut(shard_of(key.raw()))
            .and_then(|t| t.remove(key))
        {
            return Some(v);
        }
        let v = spanning_mut(&mut self.spanning, self.spanning_near, self.owner)?.remove(key)?;
        // Removed first, uncounted after: a view reading a stale count just
        // locks the spanning table for nothing.
        self.owner.count(v.bounds(), false);
        Some(v)
    }

    /// Every value this view holds, by key.
    pub fn entries(&self) -> Vec<&S::Value> {
        let mut all: Vec<&S::Value> = self.tables().flat_map(|t| t.values()).collect();
        all.sort_by_key(|v| v.key());
        all
    }

    pub fn is_empty(&self) -> bool {
        self.tables().all(|t| t.is_empty())
    }
}

/// A view's spanning table, locked now if values there may matter.
fn spanning_mut<'v, 'a: 'v, S>(
    spanning: &'v mut OnceCell<RwLockWriteGuard<'a, S>>,
    near: bool,
    owner: &'a RangeMap<S>,
) -> Option<&'v mut S> {
    if near && spanning.get().is_none() {
        let _ = spanning.set(write(&owner.spanning.0));
    }
    spanning.get_mut().map(|g| &mut **g)
}

impl<S: Store> Neighbours for View<'_, S> {
    type Value = S::Value;
    fn last_below(&self, x: KeyOf<S>) -> Option<(KeyOf<S>, &S::Value)> {
        self.tables()
            .filter_map(|t| t.last_below(x))
            .max_by_key(|(k, _)| *k)
    }
    fn first_above(&self, x: KeyOf<S>) -> Option<(KeyOf<S>, &S::Value)> {
        self.tables()
            .filter_map(|t| t.first_above(x))
            .min_by_key(|(k, _)| *k)
    }
}

#[cfg(test)]
mod tests;
