//! Which stack slots of the final copy must live per item: liveness at
//! region starts, uniform values (control dependence over post-dominators),
//! values recomputable from the item.

use super::*;

/// A stack slot of the entry block.
#[derive(Clone)]
pub(super) struct Slot {
    pub(super) name: String,
    pub(super) ty: String,
    pub(super) align: u32,
}

/// Slots used other than as the address of plain loads and stores: their
/// address escapes, so they get one element per item, always.
pub(super) fn escaped_slots(blocks: &[Block], slots: &[Slot]) -> HashSet<String> {
    let names: HashSet<&str> = slots.iter().map(|s| s.name.as_str()).collect();
    let mut escaped = HashSet::new();
    for b in blocks {
        for line in &b.lines {
            if line.contains(" = alloca ") {
                continue;
            }
            let simple = pointer_operand(line);
            for (s, e) in locals(line) {
                let tok = &line[s..e];
                if !names.contains(tok) {
                    continue;
                }
                if simple.map(|(p, _)| p) != Some(s) {
                    escaped.insert(tok.to_string());
                }
            }
        }
    }
    escaped
}

/// Slots live at the start of some region (a value kept across a barrier).
pub(super) fn live_at_region_starts(
    blocks: &[Block],
    slots: &HashSet<String>,
    starts: &[String],
) -> HashSet<String> {
    let index = block_index(blocks);
    let mut gen: Vec<HashSet<String>> = Vec::new();
    let mut kill: Vec<HashSet<String>> = Vec::new();
    for b in blocks {
        let (mut g, mut k) = (HashSet::new(), HashSet::new());
        for line in &b.lines {
            if let Some((at, is_load)) = pointer_operand(line) {
                let tok = locals(&line[at..])
                    .first()
                    .map(|&(s, e)| line[at + s..at + e].to_string());
                if let Some(tok) = tok.filter(|t| slots.contains(t)) {
                    if is_load && !k.contains(&tok) {
                        g.insert(tok);
                    } else if !is_load {
                        k.insert(tok);
                    }
                }
            }
        }
        gen.push(g);
        kill.push(k);
    }
    let succ = successor_indices(blocks, &index);
    let mut live_in: Vec<HashSet<String>> = gen.clone();
    loop {
        let mut changed = false;
        for i in (0..blocks.len()).rev() {
            let mut out: HashSet<String> = HashSet::new();
            for &s in &succ[i] {
                out.extend(live_in[s].iter().cloned());
            }
            let mut new = gen[i].clone();
            new.extend(out.into_iter().filter(|v| !kill[i].contains(v)));
            if new.len() != live_in[i].len() {
                live_in[i] = new;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    starts
        .iter()
        .skip(1)
        .filter_map(|s| index.get(s.as_str()))
        .flat_map(|&i| live_in[i].iter().cloned())
        .collect()
}

/// The stores of each simple slot: the one store of slots stored once (its
/// value and type), and every stored value with its block.
pub(super) struct SingleStores<'a> {
    pub(super) defs: HashMap<&'a str, &'a str>,
    pub(super) value: HashMap<String, (&'a str, &'a str)>,
    pub(super) all: HashMap<String, Vec<(&'a str, usize)>>,
}

pub(super) fn single_stores<'a>(blocks: &'a [Block], simple: &HashSet<String>) -> SingleStores<'a> {
    let mut defs = HashMap::new();
    let mut all: HashMap<String, Vec<(&str, &str, usize)>> = HashMap::new();
    for (bi, b) in blocks.iter().enumerate() {
        for line in &b.lines {
            if let Some(d) = defined(line) {
                defs.insert(d, line.as_str());
            }
            let Some((at, false)) = pointer_operand(line) else {
                continue;
            };
            let Some(&(s, e)) = locals(&line[at..]).first() else {
                continue;
            };
            let slot = &line[at + s..at + e];
            if simple.contains(slot) {
                let head = line[..at - 6].trim_start().trim_start_matches("store ");
                let (ty, value) = head.rsplit_once(' ').unwrap_or(("", head));
                all.entry(slot.to_string())
                    .or_default()
                    .push((value, ty, bi));
            }
        }
    }
    let value = all
        .iter()
        .filter(|(_, v)| v.len() == 1)
        .map(|(s, v)| (s.clone(), (v[0].0, v[0].1)))
        .collect();
    let all = all
        .into_iter()
        .map(|(s, v)| (s, v.into_iter().map(|(value, _, b)| (value, b)).collect()))
        .collect();
    SingleStores { defs, value, all }
}

/// Slots that hold the same value in every item at every region start:
/// every store stores a value computed from constants, the arguments, the
/// item's fields other than its local id and such slots, in a block every
/// item runs when any does (not under a branch on a value that differs
/// between items). The largest such set: loop counters of loops with a
/// barrier inside are in it.
pub(super) fn uniform_slots(
    blocks: &[Block],
    stores: &SingleStores<'_>,
    inputs: Inputs<'_>,
) -> HashSet<String> {
    let index = block_index(blocks);
    let succ = successor_indices(blocks, &index);
    let pdom = post_dominators(&succ);
    let mut found: HashSet<String> = stores.all.keys().cloned().collect();
    loop {
        let before = found.len();
        let divergent = divergent_blocks(blocks, &succ, &pdom, &stores.defs, &found, inputs);
        let ok = found.clone();
        found.retain(|s| {
            let sources = Sources {
                defs: &stores.defs,
                ok: &ok,
                inputs,
            };
            stores.all[s]
                .iter()
                .all(|&(value, b)| !divergent[b] && sources.allow(value, &mut HashMap::new()))
        });
        if found.len() == before {
            return found;
        }
    }
}

/// Post-dominator sets (`pdom[b][a]`: `a` post-dominates `b`).
pub(super) fn post_dominators(succ: &[Vec<usize>]) -> Vec<Vec<bool>> {
    let n = succ.len();
    let mut pdom: Vec<Vec<bool>> = (0..n)
        .map(|b| {
            if succ[b].is_empty() {
                (0..n).map(|a| a == b).collect()
            } else {
                vec![true; n]
            }
        })
        .collect();
    loop {
        let mut changed = false;
        for b in (0..n).rev() {
            if succ[b].is_empty() {
                continue;
            }
            let mut new: Vec<bool> = (0..n)
                .map(|a| succ[b].iter().all(|&s| pdom[s][a]))
                .collect();
            new[b] = true;
            if new != pdom[b] {
                pdom[b] = new;
                changed = true;
            }
        }
        if !changed {
            return pdom;
        }
    }
}

/// Blocks only some items of a group may run: control dependent on a
/// branch whose condition differs between items, or on a branch in such a
/// block.
pub(super) fn divergent_blocks(
    blocks: &[Block],
    succ: &[Vec<usize>],
    pdom: &[Vec<bool>],
    defs: &HashMap<&str, &str>,
    uniform: &HashSet<String>,
    inputs: Inputs<'_>,
) -> Vec<bool> {
    let n = blocks.len();
    let condition_differs = |b: &Block| -> bool {
        let Some(term) = b.lines.iter().rev().find(|l| {
            let t = l.trim_start();
            t.starts_with("br i1 ") || t.starts_with("switch ")
        }) else {
            return false;
        };
        let t = term.trim_start();
        let cond = locals(t).first().map(|&(s, e)| &t[s..e]).unwrap_or("");
        let sources = Sources {
            defs,
            ok: uniform,
            inputs,
        };
        !sources.allow(cond, &mut HashMap::new())
    };
    // Blocks control dependent on each branch block.
    let dependent = |a: usize| -> Vec<usize> {
        (0..n)
            .filter(|&b| succ[a].iter().any(|&s| pdom[s][b]) && !(pdom[a][b] && a != b))
            .collect()
    };
    let mut divergent = vec![false; n];
    let mut todo: Vec<usize> = (0..n)
        .filter(|&a| succ[a].len() > 1 && condition_differs(&blocks[a]))
        .collect();
    let mut done = HashSet::new();
    while let Some(a) = todo.pop() {
        if !done.insert(a) {
            continue;
        }
        for b in dependent(a) {
            if !divergent[b] {
                divergent[b] = true;
            }
            if succ[b].len() > 1 {
                todo.push(b);
            }
        }
    }
    divergent
}

/// What a value may be computed from, for [`slots_computed_from`].
#[derive(Clone, Copy)]
pub(super) struct Inputs<'s> {
    pub(super) args: &'s str,
    pub(super) item: &'s str,
    /// The item's local id counts (recomputing a value in each item).
    pub(super) local_id: bool,
    /// Divisions count (not when recomputed where the program did not
    /// compute: they may trap).
    pub(super) division: bool,
}

/// Slots stored once with a value computed only from constants, the
/// arguments, the item's fields (its local id only if `inputs` say so) and
/// slots of `known` or of the result (the largest such set).
///
/// Without the local id these are *uniform*: every item stores the same
/// value, and items run one after another, so one shared slot serves them
/// all. (A slot stored more than once may hold different values in
/// different items after a branch on the local id: it stays per item.)
/// With it, the value can be recomputed for each item from its item.
pub(super) fn slots_computed_from(
    stores: &SingleStores<'_>,
    known: &HashSet<String>,
    inputs: Inputs<'_>,
) -> HashSet<String> {
    let mut found: HashSet<String> = stores
        .value
        .keys()
        .filter(|s| !known.contains(*s))
        .cloned()
        .collect();
    loop {
        let before = found.len();
        let ok: HashSet<String> = found.union(known).cloned().collect();
        found.retain(|s| {
            let sources = Sources {
                defs: &stores.defs,
                ok: &ok,
                inputs,
            };
            sources.allow(stores.value[s].0, &mut HashMap::new())
        });
        if found.len() == before {
            return found;
        }
    }
}

/// What [`slots_computed_from`] checks values against.
pub(super) struct Sources<'a, 's> {
    pub(super) defs: &'s HashMap<&'a str, &'a str>,
    pub(super) ok: &'s HashSet<String>,
    pub(super) inputs: Inputs<'s>,
}

impl<'a> Sources<'a, '_> {
    /// Whether `value` is computed only from what [`slots_computed_from`]
    /// allows.
    pub(super) fn allow(&self, value: &'a str, seen: &mut HashMap<&'a str, bool>) -> bool {
        if !value.starts_with('%') {
            return !value.ends_with(')');
        }
        if value == self.inputs.args || value == self.inputs.item {
            return true;
        }
        if let Some(&known) = seen.get(value) {
            return known;
        }
        // Cycles do not count; the answer replaces this once known.
        seen.insert(value, false);
        let answer = self.allow_definition(value, seen);
        seen.insert(value, answer);
        answer
    }

    fn allow_definition(&self, value: &'a str, seen: &mut HashMap<&'a str, bool>) -> bool {
        let (defs, ok, inputs) = (self.defs, self.ok, self.inputs);
        let Some(line) = defs.get(value) else {
            return false;
        };
        let rest = line.split_once(" = ").map(|(_, r)| r).unwrap_or("");
        let op = rest.split_whitespace().next().unwrap_or("");
        if op == "load" {
            let Some(p) = load_pointer(line) else {
                return false;
            };
            if ok.contains(p) || p == inputs.args || p == inputs.item {
                return true;
            }
            return match field_of(p, defs, inputs) {
                Some((true, offset)) => {
                    inputs.local_id || !(LOCAL_ID_AT..LOCAL_ID_AT + 12).contains(&offset)
                }
                Some((false, _)) => true,
                None => false,
            };
        }
        const PURE: [&str; 23] = [
            "getelementptr",
            "add",
            "sub",
            "mul",
            "shl",
            "lshr",
            "ashr",
            "and",
            "or",
            "xor",
            "zext",
            "sext",
            "trunc",
            "bitcast",
            "ptrtoint",
            "inttoptr",
            "icmp",
            "fcmp",
            "select",
            "fadd",
            "fsub",
            "fmul",
            "fneg",
        ];
        const DIVISION: [&str; 5] = ["udiv", "sdiv", "urem", "srem", "fdiv"];
        let pure_call = (op == "call" || op == "tail")
            && [
                "umax", "umin", "smax", "smin", "abs", "ctlz", "cttz", "ctpop",
            ]
            .iter()
            .any(|f| rest.contains(&format!("@llvm.{f}.")));
        if !(PURE.contains(&op) || pure_call || inputs.division && DIVISION.contains(&op)) {
            return false;
        }
        locals(rest)
            .iter()
            .map(|&(s, e)| &rest[s..e])
            .all(|o| self.allow(o, seen))
    }
}

/// `p` as a constant byte offset into the item (`true`) or the arguments.
pub(super) fn field_of(
    p: &str,
    defs: &HashMap<&str, &str>,
    inputs: Inputs<'_>,
) -> Option<(bool, u32)> {
    let gep = defs
        .get(p)?
        .split_once(" = ")?
        .1
        .strip_prefix("getelementptr")?;
    [(true, inputs.item), (false, inputs.args)]
        .iter()
        .find_map(|&(is_item, base)| {
            let tail = gep.split_once(&format!("i8, ptr {base}, i64 "))?.1;
            Some((is_item, tail.trim().parse::<u32>().ok()?))
        })
}

/// The instructions computing `value` (see [`slots_computed_from`]), in
/// order, each once.
pub(super) fn chain<'a>(
    value: &'a str,
    defs: &HashMap<&str, &'a str>,
    inputs: Inputs<'_>,
    out: &mut Vec<&'a str>,
) {
    if !value.starts_with('%')
        || value == inputs.args
        || value == inputs.item
        || out.contains(&value)
    {
        return;
    }
    let Some(line) = defs.get(value) else { return };
    let rest = line.split_once(" = ").map(|(_, r)| r).unwrap_or("");
    if rest.starts_with("load ") {
        // Slot loads read the shared slot; field loads need their address.
        if let Some(p) = load_pointer(line) {
            if field_of(p, defs, inputs).is_some() {
                chain(p, defs, inputs, out);
            }
        }
    } else {
        for &(s, e) in &locals(rest) {
            chain(&rest[s..e], defs, inputs, out);
        }
    }
    out.push(value);
}

/// Code storing each slot of `remat` from its item (names end in
/// `.WILP`, replaced by the region's prefix).
pub(super) fn remat_code(
    out: &mut String,
    stores: &SingleStores<'_>,
    remat: &HashSet<String>,
    inputs: Inputs<'_>,
) {
    let chains: Vec<(&String, Vec<&str>)> = {
        let mut sorted: Vec<&String> = remat.iter().collect();
        sorted.sort();
        sorted
            .into_iter()
            .map(|slot| {
                let mut c = Vec::new();
                chain(stores.value[slot].0, &stores.defs, inputs, &mut c);
                (slot, c)
            })
            .collect()
    };
    let reads = |c: &[&str], other: &str| {
        c.iter()
            .any(|v| stores.defs.get(v).and_then(|l| load_pointer(l)) == Some(other))
    };
    let mut done: Vec<&String> = Vec::new();
    while done.len() < chains.len() {
        for (k, (slot, c)) in chains.iter().enumerate() {
            let ready = !done.contains(slot)
                && chains
                    .iter()
                    .all(|(t, _)| t == slot || done.contains(t) || !reads(c, t));
            if !ready {
                continue;
            }
            let rename = |line: &str| -> String {
                let mut r = String::new();
                let mut last = 0;
                for (a, b) in locals(line) {
                    r.push_str(&line[last..b]);
                    if c.contains(&&line[a..b]) {
                        let _ = write!(r, ".rm{k}.WILP");
                    }
                    last = b;
                }
                r.push_str(&line[last..]);
                r
            };
            for v in c {
                let _ = writeln!(out, "{}", rename(stores.defs[v]));
            }
            let (value, ty) = stores.value[*slot];
            let _ = writeln!(out, "  store {ty} {}, ptr {slot}", rename(value));
            done.push(slot);
        }
    }
}

pub(super) fn parse_alloca(line: &str) -> Option<Slot> {
    let name = defined(line)?;
    let rest = line.split_once(" = alloca ")?.1;
    if rest.contains("addrspace") || rest.contains("inalloca") {
        return None;
    }
    let (ty, align) = match rest.rsplit_once(", align ") {
        Some((ty, a)) => (ty, a.trim().parse().ok()?),
        None => (rest, 1),
    };
    // `alloca T, i64 N` (an array count) is not a plain slot.
    if ty.contains(", ") && !ty.trim_start().starts_with(['{', '<', '[']) {
        return None;
    }
    Some(Slot {
        name: name.to_string(),
        ty: ty.trim().to_string(),
        align,
    })
}

/// Where each stack slot of the copy lives in the group form.
pub(super) struct SlotPlan {
    /// One element per item: the address escapes, or the value crosses a
    /// barrier and differs between items.
    pub(super) per_item: Vec<Slot>,
    /// One for the group: the rest.
    pub(super) shared: Vec<Slot>,
    /// Shared slots whose value crosses a barrier, the same in every item:
    /// each item starts a region from the value the region started with
    /// (one item's update of a loop counter must not reach the next).
    pub(super) restored: Vec<Slot>,
    /// Code storing the slots recomputed from each item at a region's start
    /// (names end in `.WILP`).
    pub(super) recompute: String,
}

/// Decides [`SlotPlan`] for the copy's `blocks`, `slots` and region
/// `starts` (the entry first).
pub(super) fn plan_slots(
    blocks: &[Block],
    slots: &[Slot],
    starts: &[String],
    args: &str,
    item: &str,
) -> SlotPlan {
    let escaped = escaped_slots(blocks, slots);
    let simple: HashSet<String> = slots
        .iter()
        .map(|s| s.name.clone())
        .filter(|n| !escaped.contains(n))
        .collect();
    let live = live_at_region_starts(blocks, &simple, starts);
    let stores = single_stores(blocks, &simple);
    let inputs = Inputs {
        args,
        item,
        local_id: false,
        division: true,
    };
    let uniform = uniform_slots(blocks, &stores, inputs);
    let recomputed = Inputs {
        local_id: true,
        division: false,
        ..inputs
    };
    // Recomputing reads other slots later than the program did: only slots
    // that hold one value for the whole run may be read (stored once, from
    // the arguments and the item: not a loop counter, which may have moved
    // on since the value was computed).
    let invariant = slots_computed_from(&stores, &HashSet::new(), inputs);
    let remat: HashSet<String> = slots_computed_from(&stores, &invariant, recomputed)
        .into_iter()
        .filter(|s| live.contains(s) && !uniform.contains(s))
        .collect();
    let mut recompute = String::new();
    remat_code(&mut recompute, &stores, &remat, recomputed);
    let (mut per_item, mut shared, mut restored) = (Vec::new(), Vec::new(), Vec::new());
    for s in slots {
        let crosses = live.contains(&s.name);
        if escaped.contains(&s.name)
            || crosses && !uniform.contains(&s.name) && !remat.contains(&s.name)
        {
            per_item.push(s.clone());
            continue;
        }
        if crosses && uniform.contains(&s.name) {
            restored.push(s.clone());
        }
        shared.push(s.clone());
    }
    SlotPlan {
        per_item,
        shared,
        restored,
        recompute,
    }
}
