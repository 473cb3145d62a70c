use super::*;

const MIB: u64 = 1 << GRANULE_SHIFT;

/// A test value: `[b, e)` with a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct R {
    b: u64,
    e: u64,
    n: u64,
}

impl Ranged for R {
    type Key = u64;
    fn key(&self) -> u64 {
        self.b
    }
    fn bounds(&self) -> (u64, u64) {
        (self.b, self.e)
    }
}

type Map = RangeMap<BTreeMap<u64, R>>;

fn r(b: u64, e: u64) -> R {
    R { b, e, n: 0 }
}

/// The value holding `a`, through the direct (read-locked) path.
fn holding(m: &Map, a: u64) -> Option<u64> {
    m.find_map(a, |v| (a >= v.b && a < v.e).then_some(v.b))
}

fn counts(m: &Map) -> Vec<u32> {
    m.shards
        .iter()
        .map(|s| s.spanning.load(Ordering::Relaxed))
        .collect()
}

/// splitmix64 over a counter: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

#[test]
fn ranges_inside_one_granule_stay_in_their_shard() {
    let m = Map::default();
    assert!(m.insert(r(MIB + 16, MIB + 48)).is_none());
    assert!(m.insert(r(7 * MIB, 7 * MIB + 1)).is_none());
    assert_eq!(holding(&m, MIB + 16), Some(MIB + 16));
    assert_eq!(holding(&m, MIB + 47), Some(MIB + 16));
    assert_eq!(holding(&m, MIB + 48), None);
    assert_eq!(holding(&m, MIB + 15), None);
    assert_eq!(holding(&m, 7 * MIB), Some(7 * MIB));
    assert_eq!(m.spanning_len(), 0);
    assert!(counts(&m).iter().all(|&c| c == 0));
    assert_eq!(m.get_map(MIB + 16, |v| Some(v.e)), Some(MIB + 48));
    assert_eq!(m.get_map(MIB + 17, |v| Some(v.e)), None);
    // Replacing a value at the same key hands the old one back.
    assert_eq!(m.insert(r(MIB + 16, MIB + 32)).map(|v| v.e), Some(MIB + 48));
    assert!(m.remove_if(MIB + 16, Home::Shard, |_| false).is_none());
    assert!(m.remove_if(MIB + 16, Home::Shard, |_| true).is_some());
    assert_eq!(holding(&m, MIB + 20), None);
}

#[test]
fn ranges_crossing_granules_are_spanning_and_counted() {
    assert!(!is_spanning(MIB, 2 * MIB));
    assert!(is_spanning(MIB, 2 * MIB + 1));
    assert!(
        !is_spanning(5 * MIB, 5 * MIB),
        "empty ranges are in one granule"
    );
    assert_eq!(shard_set(0, 64 * MIB), ALL_SHARDS);
    assert_eq!(shard_set(MIB, MIB + 1).count_ones(), 1);
    let m = Map::default();
    let (b, e) = (3 * MIB - 16, 3 * MIB + 16);
    m.insert(r(b, e));
    let touched = shard_set(b, e);
    assert_eq!(touched.count_ones(), 2);
    for (s, c) in counts(&m).into_iter().enumerate() {
        assert_eq!(c, u32::from(touched & (1 << s) != 0));
    }
    for a in [b, 3 * MIB - 1, 3 * MIB, e - 1] {
        assert_eq!(holding(&m, a), Some(b), "{a:#x}");
    }
    assert_eq!(holding(&m, e), None);
    // A small value next to it, in the same shard: both answer.
    m.insert(r(3 * MIB + 64, 3 * MIB + 128));
    assert_eq!(holding(&m, 3 * MIB + 64), Some(3 * MIB + 64));
    assert_eq!(holding(&m, 3 * MIB + 8), Some(b));
    assert!(m.remove_if(b, Home::Shard, |_| true).is_none());
    assert!(m.remove_if(b, Home::Spanning, |_| true).is_some());
    assert!(counts(&m).iter().all(|&c| c == 0));
    assert_eq!(holding(&m, 3 * MIB + 8), None);
    // A huge value counts in every shard; retain uncounts what it drops.
    m.insert(r(MIB, 65 * MIB));
    assert!(counts(&m).iter().all(|&c| c == 1));
    assert_eq!(holding(&m, 40 * MIB), Some(MIB));
    m.retain(|v| v.e - v.b < MIB);
    assert!(counts(&m).iter().all(|&c| c == 0));
    let mut left = Vec::new();
    m.for_each(|v| left.push(v.b));
    assert_eq!(left, vec![3 * MIB + 64]);
}

#[test]
fn views_answer_neighbours_across_shards() {
    let m = Map::default();
    for (b, e) in [
        (MIB - 8, MIB + 8),
        (2 * MIB, 2 * MIB + 4),
        (9 * MIB, 12 * MIB),
    ] {
        m.view(b, e - b).insert(r(b, e)).unwrap();
    }
    let all = m.view_all();
    assert_eq!(all.last_below(2 * MIB).map(|(k, _)| k), Some(MIB - 8));
    assert_eq!(all.last_below(2 * MIB + 1).map(|(k, _)| k), Some(2 * MIB));
    assert_eq!(all.first_above(2 * MIB).map(|(k, _)| k), Some(9 * MIB));
    assert_eq!(all.first_above(9 * MIB), None);
    assert_eq!(all.entries().len(), 3);
    drop(all);
    // A view of one granule sees the spanning value over it (once it has
    // locked the spanning table: neighbour queries look only at what is
    // locked).
    let v = m.view(10 * MIB, 4);
    assert!(v.single_shard().is_some());
    assert!(v.spanning_if_near().is_some());
    assert_eq!(v.last_below(10 * MIB + 1).map(|(k, _)| k), Some(9 * MIB));
    assert_eq!(v.get(9 * MIB).map(|x| x.e), Some(12 * MIB));
    drop(v);
    // A point view far from any value locks everything.
    let v = m.view(30 * MIB, 0);
    assert!(v.single_shard().is_none());
    assert_eq!(v.last_below(30 * MIB).map(|(k, _)| k), Some(9 * MIB));
    drop(v);
    let v = m.view(2 * MIB + 2, 0);
    assert!(v.single_shard().is_some(), "a value there holds it");
    drop(v);
    let mut v = m.view(MIB, 4);
    v.get_mut(MIB - 8).unwrap().n = 5;
    assert_eq!(v.remove(MIB - 8).map(|x| x.n), Some(5));
    drop(v);
    assert_eq!(
        counts(&m).iter().sum::<u32>(),
        shard_set(9 * MIB, 12 * MIB).count_ones()
    );
}

#[test]
fn insert_outside_the_view_is_refused() {
    let m = Map::default();
    let mut v = m.view(MIB, 64);
    assert_eq!(v.insert(r(MIB, MIB + 128)), Err(OutsideView));
    assert_eq!(v.insert(r(MIB - 8, MIB + 8)), Err(OutsideView));
    assert!(v.insert(r(MIB, MIB + 64)).is_ok());
    drop(v);
    assert!(!m.view_all().is_empty());
}

/// A random range near a granule boundary, of a size from one byte to
/// several granules.
fn random_range(rng: &mut Rng) -> (u64, u64) {
    let base = (1 + rng.below(40)) * MIB;
    let begin = base - 512 + rng.below(1024) + rng.below(3) * rng.below(MIB);
    let size = match rng.below(3) {
        0 => 1 + rng.below(64),
        1 => 1 + rng.below(4096),
        _ => 1 + rng.below(3 * MIB),
    };
    (begin, begin + size)
}

/// The model: one `BTreeMap` of disjoint ranges.
fn model_holding(model: &BTreeMap<u64, R>, a: u64) -> Option<u64> {
    model
        .range(..=a)
        .next_back()
        .filter(|(_, v)| a < v.e)
        .map(|(&k, _)| k)
}

fn model_overlaps(model: &BTreeMap<u64, R>, b: u64, e: u64) -> bool {
    model_holding(model, b).is_some() || model.range(b..e).next().is_some()
}

/// Direct operations and views answer as one `BTreeMap` holding the same
/// disjoint ranges does, through inserts and removals of ranges inside
/// one granule and spanning several.
#[test]
fn randomized_against_one_btree() {
    let m = Map::default();
    let mut model: BTreeMap<u64, R> = BTreeMap::new();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for step in 0..20_000 {
        let (b, e) = random_range(&mut rng);
        let probe = b + rng.below(e - b + 64);
        assert_eq!(
            holding(&m, probe),
            model_holding(&model, probe),
            "step {step}"
        );
        let free = !model_overlaps(&model, b, e);
        match rng.below(4) {
            0 if free => {
                assert!(m.insert(r(b, e)).is_none());
                model.insert(b, r(b, e));
            }
            1 if free => {
                m.view(b, e - b).insert(r(b, e)).unwrap();
                model.insert(b, r(b, e));
            }
            2 => {
                let Some(k) = model_holding(&model, probe) else {
                    continue;
                };
                let v = model.remove(&k).unwrap();
                let home = Home::of(v.b, v.e);
                assert_eq!(m.remove_if(k, home, |_| true), Some(v), "step {step}");
            }
            _ => {
                // Exact inside the view's range: the value holding `b`, and
                // the first one beginning after it.
                let v = m.view(b, e - b);
                let _ = v.spanning_if_near();
                let at = v.last_below(b + 1).filter(|(_, x)| b < x.e).map(|(k, _)| k);
                assert_eq!(at, model_holding(&model, b), "step {step}");
                let next = v.first_above(b).map(|(k, _)| k).filter(|&k| k < e);
                assert_eq!(next, model.range(b + 1..e).next().map(|(&k, _)| k));
            }
        }
    }
    let all = m.view_all();
    let ours: Vec<u64> = all.entries().iter().map(|v| v.b).collect();
    let theirs: Vec<u64> = model.keys().copied().collect();
    assert_eq!(ours, theirs);
    assert!(ours.len() > 100, "the walk filled the map ({})", ours.len());
    drop(all);
    m.retain(|_| false);
    assert!(counts(&m).iter().all(|&c| c == 0));
    assert!(m.view_all().is_empty());
}

/// File `[b, b + len)` and take it out again, directly or through views.
fn cycle(m: &Map, b: u64, len: u64, direct: bool) {
    let last = b + len - 1;
    if direct {
        m.insert(r(b, b + len));
        assert_eq!(holding(m, last), Some(b));
        assert!(m.remove_if(b, Home::of(b, b + len), |_| true).is_some());
    } else {
        let mut v = m.view(b, len);
        v.insert(r(b, b + len)).unwrap();
        v.get_mut(b).unwrap().n += 1;
        drop(v);
        assert!(m.view(last, 0).remove(b).is_some());
    }
}

/// Threads on their own granules (mostly different shards) and one thread
/// filing spanning values elsewhere: every thread finds its own values, and
/// the counts end at zero.
#[test]
fn concurrent_threads_on_different_shards() {
    let m = Map::default();
    std::thread::scope(|scope| {
        for th in 0..4u64 {
            let m = &m;
            scope.spawn(move || {
                let base = (1 + th * 5) * MIB + 64;
                for i in 0..20_000u64 {
                    cycle(m, base + (i % 7) * 64, 32, i % 2 == 0);
                }
            });
        }
        let m = &m;
        scope.spawn(move || {
            for i in 0..2_000u64 {
                cycle(m, (30 + i % 5) * MIB - 32, 64, i % 2 == 0);
            }
        });
    });
    assert!(m.view_all().is_empty());
    assert!(counts(&m).iter().all(|&c| c == 0));
}
