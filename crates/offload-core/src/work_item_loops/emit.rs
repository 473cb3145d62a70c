//! Step 6: the group form, one loop nest over the items per region.

use super::*;

/// Step 6: the group form `<kernel>_offload_group` from the final copy.
pub(super) fn group_form(text: &str, kernel: &str) -> Result<String, String> {
    let f = split_function(text);
    let params = parameter_names(f.define);
    let [args, item] = params.as_slice() else {
        return Err("not the (args, item) signature".into());
    };
    let attrs: Vec<&str> = f
        .define
        .rsplit_once(')')
        .map_or("", |(_, a)| a)
        .split_whitespace()
        .filter(|a| a.starts_with('#'))
        .collect();
    let (blocks, slots) = blocks_and_slots(&f.body)?;
    let mut starts = vec![blocks[0].label.clone()];
    starts.extend(
        blocks
            .iter()
            .filter(|b| b.label.starts_with("wil.b"))
            .map(|b| b.label.clone()),
    );
    let plan = plan_slots(&blocks, &slots, &starts, args, item);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "define void @{kernel}_offload_group(ptr noundef %wil.args, ptr noundef %wil.first) {} {{",
        attrs.join(" ")
    );
    prologue(&mut out, &plan, args, item);
    for region in regions(&blocks, &starts) {
        let (preheader, header) = region_entry(&plan, &region.prefix);
        region_loop(
            &mut out,
            &region,
            &blocks,
            &plan.per_item,
            item,
            &preheader,
            &header,
        )?;
    }
    out.push_str(&EPILOGUE.replace("{barrier_at}", &BARRIER_AT.to_string()));
    let _ = writeln!(out, "@{kernel}_offload_group_generated = constant i32 1\n");
    Ok(out)
}

/// Most blocks a kernel's copy may have for work-item loops.
const MAX_BLOCKS: usize = 600;

/// The copy's blocks without lifetime markers (they take a stack slot; a
/// per-item slot is not one) and its entry block's slots, moved out.
fn blocks_and_slots(body: &[&str]) -> Result<(Vec<Block>, Vec<Slot>), String> {
    let mut blocks = blocks_of(body)?;
    // The analyses are quadratic to cubic in blocks: a kernel this large
    // (hundreds of times the project's) keeps its coroutines.
    if blocks.is_empty() || blocks.len() > MAX_BLOCKS {
        return Err(format!("{} blocks (at most {MAX_BLOCKS})", blocks.len()));
    }
    for b in &mut blocks {
        b.lines.retain(|l| !l.contains("@llvm.lifetime."));
    }
    let mut slots = Vec::new();
    blocks[0].lines.retain(|l| {
        if let Some(slot) = parse_alloca(l) {
            slots.push(slot);
            return false;
        }
        !l.contains("%\"reg2mem alloca point")
    });
    if blocks
        .iter()
        .flat_map(|b| &b.lines)
        .any(|l| l.contains(" = alloca "))
    {
        return Err("a stack allocation that is not a plain slot".into());
    }
    Ok((blocks, slots))
}

/// The function's entry: shared slots, the private item (a copy of the
/// first), the group size, one allocation for the per-item arrays (the
/// exit codes first, then each slot's, 64-byte aligned).
fn prologue(out: &mut String, plan: &SlotPlan, args: &str, item: &str) {
    out.push_str("wil.entry:\n");
    for s in &plan.shared {
        let _ = writeln!(out, "  {} = alloca {}, align {}", s.name, s.ty, s.align);
    }
    let words = ITEM_SIZE / 8;
    let _ = writeln!(out, "  {item} = alloca [{words} x i64], align 16");
    let _ = writeln!(
        out,
        "  %wil.item.v = load [{words} x i64], ptr %wil.first, align 8"
    );
    let _ = writeln!(
        out,
        "  store [{words} x i64] %wil.item.v, ptr {item}, align 16"
    );
    let _ = writeln!(out, "  {args} = getelementptr i8, ptr %wil.args, i64 0");
    for (d, name) in ["x", "y", "z"].iter().enumerate() {
        let at = GROUP_SIZE_AT + 4 * d as u32;
        let _ = writeln!(
            out,
            "  %wil.s{name}.p = getelementptr i8, ptr %wil.first, i64 {at}"
        );
        let _ = writeln!(
            out,
            "  %wil.s{name} = load i32, ptr %wil.s{name}.p, align 4"
        );
        let _ = writeln!(out, "  %wil.s{name}.64 = zext i32 %wil.s{name} to i64");
    }
    out.push_str(GROUP_SIZE);
    let mut total = "%wil.codes.bytes".to_string();
    for (k, s) in plan.per_item.iter().enumerate() {
        let a = s.align.max(1);
        let array = PER_ITEM_ARRAY
            .replace("{ty}", &s.ty)
            .replace("{align-1}", &(a - 1).to_string())
            .replace("{align}", &a.to_string())
            .replace("{after}", &total)
            .replace("{k}", &k.to_string());
        out.push_str(&array);
        total = format!("%wil.end{k}");
    }
    out.push_str(&ALLOCATE.replace("{total}", &total));
    for k in 0..plan.per_item.len() {
        let _ = writeln!(
            out,
            "  %wil.base{k} = getelementptr i8, ptr %wil.mem, i64 %wil.off{k}"
        );
    }
    let _ = writeln!(out, "  br label %wil.r0");
}

/// Items in the group, and the bytes of their exit codes.
const GROUP_SIZE: &str = "\
  %wil.sxy = mul nuw i64 %wil.sx.64, %wil.sy.64
  %wil.n = mul nuw i64 %wil.sxy, %wil.sz.64
  %wil.codes.bytes = shl nuw i64 %wil.n, 2
";

/// Slot `{k}`'s array: the stride (its size rounded up to its alignment)
/// and where it starts, after `{after}`.
const PER_ITEM_ARRAY: &str = "\
  %wil.sz{k}.p = getelementptr {ty}, ptr null, i64 1
  %wil.sz{k}.raw = ptrtoint ptr %wil.sz{k}.p to i64
  %wil.sz{k}.up = add i64 %wil.sz{k}.raw, {align-1}
  %wil.stride{k} = and i64 %wil.sz{k}.up, -{align}
  %wil.bytes{k} = mul nuw i64 %wil.stride{k}, %wil.n
  %wil.off{k}.up = add i64 {after}, 63
  %wil.off{k} = and i64 %wil.off{k}.up, -64
  %wil.end{k} = add i64 %wil.off{k}, %wil.bytes{k}
";

const ALLOCATE: &str = "\
  %wil.mem = call ptr @malloc(i64 {total})
  %wil.oom = icmp eq ptr %wil.mem, null
  br i1 %wil.oom, label %wil.trap, label %wil.go
wil.trap:
  call void @llvm.trap()
  unreachable
wil.go:
";

/// The end: all returned, or items diverged (reported through the barrier:
/// the host plugin names the kernel and the reason).
const EPILOGUE: &str = "\
wil.exit:
  call void @free(ptr %wil.mem)
  ret void
wil.diverged:
  %wil.bar.p = getelementptr i8, ptr %wil.first, i64 {barrier_at}
  %wil.bar = load ptr, ptr %wil.bar.p, align 8
  call void %wil.bar(ptr %wil.first)
  call void @free(ptr %wil.mem)
  ret void
}
";

/// One region per start (the entry: code 0; barrier N: code N), and the
/// general step: each item resumes where it stopped. That step runs when
/// the items of a group wait at different calls of the barrier (the
/// optimiser may duplicate a barrier call into both arms of a branch on
/// the local id; the coroutines count barriers, not calls, and so does
/// this step).
fn regions(blocks: &[Block], starts: &[String]) -> Vec<Region> {
    let index = block_index(blocks);
    let code_of = |label: &str| -> u32 {
        label
            .strip_prefix("wil.b")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut all: Vec<Region> = starts
        .iter()
        .map(|start| {
            let region = region_blocks(blocks, &index, &[start.as_str()]);
            Region {
                prefix: format!("wil.r{}", code_of(start)),
                entry: vec![(code_of(start), start.clone())],
                exits: region_exits(blocks, &region),
                blocks: region,
            }
        })
        .collect();
    let waiting: Vec<&str> = starts.iter().skip(1).map(String::as_str).collect();
    all.push(Region {
        prefix: "wil.rg".into(),
        entry: waiting
            .iter()
            .map(|s| (code_of(s), s.to_string()))
            .collect(),
        exits: starts.iter().map(|s| code_of(s)).chain([0]).collect(),
        blocks: region_blocks(blocks, &index, &waiting),
    });
    all
}

/// A region's preheader (snapshots of the restored slots) and its items'
/// header: the snapshots restored first (the recomputed slots may read
/// them), then the recomputed slots.
fn region_entry(plan: &SlotPlan, prefix: &str) -> (String, String) {
    let mut preheader = String::new();
    let mut header = String::new();
    for (k, slot) in plan.restored.iter().enumerate() {
        let (ty, name, align) = (&slot.ty, &slot.name, slot.align);
        let _ = writeln!(
            preheader,
            "  %{prefix}.snap{k} = load {ty}, ptr {name}, align {align}"
        );
        let _ = writeln!(
            header,
            "  store {ty} %{prefix}.snap{k}, ptr {name}, align {align}"
        );
    }
    header.push_str(&plan.recompute.replace("WILP", prefix));
    (preheader, header)
}

/// Blocks reachable from `starts` without crossing a barrier edge: the
/// first start first (the loop header enters it), then program order.
pub(super) fn region_blocks(
    blocks: &[Block],
    index: &HashMap<&str, usize>,
    starts: &[&str],
) -> Vec<usize> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<usize> = starts
        .iter()
        .filter_map(|s| index.get(s).copied())
        .collect();
    while let Some(i) = todo.pop() {
        if !seen.insert(i) {
            continue;
        }
        if barrier_of(&blocks[i]).is_some() {
            continue;
        }
        todo.extend(
            blocks[i]
                .successors()
                .iter()
                .filter_map(|s| index.get(s.as_str()).copied()),
        );
    }
    let first = starts.first().and_then(|s| index.get(s).copied());
    first
        .into_iter()
        .chain(seen.into_iter().filter(|&i| Some(i) != first))
        .collect()
}

/// One region's loop over the items: where items enter it (a code and a
/// block: one for a region, every barrier for the general step), how they
/// may leave it, its blocks.
pub(super) struct Region {
    pub(super) prefix: String,
    pub(super) entry: Vec<(u32, String)>,
    pub(super) exits: BTreeSet<u32>,
    pub(super) blocks: Vec<usize>,
}

/// The barrier number a block ends at, when it ends at one.
pub(super) fn barrier_of(b: &Block) -> Option<u32> {
    let last = b.lines.last()?.trim();
    let n = last.strip_prefix("br label %wil.b")?.parse().ok()?;
    b.lines
        .iter()
        .any(|l| l.trim_start().starts_with(&format!("call void {MARKER}(")))
        .then_some(n)
}

/// How a region's items may leave it: 0 = return, N = barrier N.
pub(super) fn region_exits(blocks: &[Block], region: &[usize]) -> BTreeSet<u32> {
    let mut exits = BTreeSet::new();
    for &i in region {
        if let Some(n) = barrier_of(&blocks[i]) {
            exits.insert(n);
        } else if blocks[i]
            .lines
            .last()
            .is_some_and(|l| l.trim() == "ret void")
        {
            exits.insert(0);
        }
    }
    exits
}

/// The loop nest over a group's items (z, y, x: x fastest), up to the
/// item's linear index `%{p}.i`, its local ids stored in the item (at
/// LOCAL_ID_AT).
const _: () = assert!(LOCAL_ID_AT == 44);

const LOOP_HEAD: &str = "\
{p}:
{preheader}  br label %{p}.z
{p}.z:
  %{p}.zi = phi i32 [ 0, %{p} ], [ %{p}.zn, %{p}.zl ]
  br label %{p}.y
{p}.y:
  %{p}.yi = phi i32 [ 0, %{p}.z ], [ %{p}.yn, %{p}.yl ]
  %{p}.z64 = zext i32 %{p}.zi to i64
  %{p}.y64 = zext i32 %{p}.yi to i64
  %{p}.zrow = mul nuw i64 %{p}.z64, %wil.sy.64
  %{p}.zy = add nuw i64 %{p}.zrow, %{p}.y64
  %{p}.row = mul nuw i64 %{p}.zy, %wil.sx.64
  br label %{p}.x
{p}.x:
  %{p}.xi = phi i32 [ 0, %{p}.y ], [ %{p}.xn, %{p}.latch ]
  %{p}.lid0 = getelementptr i8, ptr {item}, i64 44
  store i32 %{p}.xi, ptr %{p}.lid0, align 4
  %{p}.lid1 = getelementptr i8, ptr {item}, i64 48
  store i32 %{p}.yi, ptr %{p}.lid1, align 4
  %{p}.lid2 = getelementptr i8, ptr {item}, i64 52
  store i32 %{p}.zi, ptr %{p}.lid2, align 4
  %{p}.x64 = zext i32 %{p}.xi to i64
  %{p}.i = add nuw i64 %{p}.row, %{p}.x64
";

/// The loop nest's latches, to `%{p}.done`.
const LOOP_LATCH: &str = "\
{p}.latch:
  %{p}.xn = add nuw i32 %{p}.xi, 1
  %{p}.xmore = icmp ult i32 %{p}.xn, %wil.sx
  br i1 %{p}.xmore, label %{p}.x, label %{p}.yl
{p}.yl:
  %{p}.yn = add nuw i32 %{p}.yi, 1
  %{p}.ymore = icmp ult i32 %{p}.yn, %wil.sy
  br i1 %{p}.ymore, label %{p}.y, label %{p}.zl
{p}.zl:
  %{p}.zn = add nuw i32 %{p}.zi, 1
  %{p}.zmore = icmp ult i32 %{p}.zn, %wil.sz
  br i1 %{p}.zmore, label %{p}.z, label %{p}.done
";

/// After a region: every item's exit code equal to the first one's goes to
/// `%{p}.next` (which switches on `%{p}.c0`), else to `%{p}.mixed`.
const CODE_CHECK: &str = "\
{p}.done:
  %{p}.c0 = load i32, ptr %wil.mem, align 4
  br label %{p}.chk
{p}.chk:
  %{p}.ci = phi i64 [ 1, %{p}.done ], [ %{p}.cn, %{p}.same ]
  %{p}.cend = icmp uge i64 %{p}.ci, %wil.n
  br i1 %{p}.cend, label %{p}.next, label %{p}.cmp
{p}.cmp:
  %{p}.cp = getelementptr i32, ptr %wil.mem, i64 %{p}.ci
  %{p}.cv = load i32, ptr %{p}.cp, align 4
  %{p}.ceq = icmp eq i32 %{p}.cv, %{p}.c0
  br i1 %{p}.ceq, label %{p}.same, label %{p}.mixed
{p}.same:
  %{p}.cn = add nuw i64 %{p}.ci, 1
  br label %{p}.chk
";

/// Items left a region in different ways: one returned (code 0) while
/// others wait is divergence; all waiting, at different barrier calls, is
/// the general step's case.
const MIXED_CODES: &str = "\
{p}.mixed:
  br label %{p}.zero
{p}.zero:
  %{p}.zi0 = phi i64 [ 0, %{p}.mixed ], [ %{p}.zn0, %{p}.nz ]
  %{p}.zend = icmp uge i64 %{p}.zi0, %wil.n
  br i1 %{p}.zend, label %wil.rg, label %{p}.zchk
{p}.zchk:
  %{p}.zp = getelementptr i32, ptr %wil.mem, i64 %{p}.zi0
  %{p}.zv = load i32, ptr %{p}.zp, align 4
  %{p}.zz = icmp eq i32 %{p}.zv, 0
  br i1 %{p}.zz, label %wil.diverged, label %{p}.nz
{p}.nz:
  %{p}.zn0 = add nuw i64 %{p}.zi0, 1
  br label %{p}.zero
";

/// One region as a loop nest over the group's items, then the step to the
/// next region.
pub(super) fn region_loop(
    out: &mut String,
    plan: &Region,
    blocks: &[Block],
    per_item: &[Slot],
    item: &str,
    preheader: &str,
    header: &str,
) -> Result<(), String> {
    let p = plan.prefix.as_str();
    let general = plan.entry.len() != 1;
    let recorded = plan.exits.len() > 1 || general;
    out.push_str(
        &LOOP_HEAD
            .replace("{preheader}", preheader)
            .replace("{item}", item)
            .replace("{p}", p),
    );
    for (k, s) in per_item.iter().enumerate() {
        let _ = writeln!(out, "  %{p}.at{k} = mul nuw i64 %{p}.i, %wil.stride{k}");
        let _ = writeln!(
            out,
            "  {}.{p} = getelementptr i8, ptr %wil.base{k}, i64 %{p}.at{k}",
            s.name
        );
    }
    if recorded {
        let _ = writeln!(
            out,
            "  %{p}.code = getelementptr i32, ptr %wil.mem, i64 %{p}.i"
        );
    }
    out.push_str(header);
    if general {
        // Each item where it stopped (an item that returned is skipped).
        let _ = writeln!(out, "  %{p}.at = load i32, ptr %{p}.code, align 4");
        let _ = write!(out, "  switch i32 %{p}.at, label %{p}.latch [");
        for (code, start) in &plan.entry {
            let _ = write!(out, " i32 {code}, label %{start}.{p}");
        }
        out.push_str(" ]\n");
    } else {
        let _ = writeln!(out, "  br label %{}.{p}", plan.entry[0].1);
    }
    copy_blocks(out, plan, blocks, per_item, recorded)?;
    out.push_str(&LOOP_LATCH.replace("{p}", p));
    let target = |code: u32| match code {
        0 => "wil.exit".to_string(),
        n => format!("wil.r{n}"),
    };
    if !recorded {
        let only = plan
            .exits
            .first()
            .copied()
            .ok_or("a region that never ends")?;
        let _ = writeln!(out, "{p}.done:\n  br label %{}", target(only));
        return Ok(());
    }
    // All items at one barrier (or all returned): that region next. At
    // different calls of the barrier: the general step. Some returned,
    // others wait: the barrier is in divergent control flow.
    out.push_str(&CODE_CHECK.replace("{p}", p));
    let _ = write!(
        out,
        "{p}.next:\n  switch i32 %{p}.c0, label %wil.diverged ["
    );
    for &code in &plan.exits {
        let _ = write!(out, " i32 {code}, label %{}", target(code));
    }
    out.push_str(" ]\n");
    out.push_str(&MIXED_CODES.replace("{p}", p));
    Ok(())
}

/// The region's blocks, each name given the region's suffix; a barrier or
/// a return ends the item's run (with its exit code when `recorded`).
fn copy_blocks(
    out: &mut String,
    plan: &Region,
    blocks: &[Block],
    per_item: &[Slot],
    recorded: bool,
) -> Result<(), String> {
    let p = plan.prefix.as_str();
    let mut renamed: HashSet<String> = per_item.iter().map(|s| s.name.clone()).collect();
    for &i in &plan.blocks {
        renamed.insert(format!("%{}", blocks[i].label));
        renamed.extend(
            blocks[i]
                .lines
                .iter()
                .filter_map(|l| defined(l))
                .map(String::from),
        );
    }
    let rename = |line: &str| -> String {
        let mut s = String::with_capacity(line.len() + 16);
        let mut last = 0;
        for (a, b) in locals(line) {
            s.push_str(&line[last..b]);
            if renamed.contains(&line[a..b]) {
                let _ = write!(s, ".{p}");
            }
            last = b;
        }
        s.push_str(&line[last..]);
        s
    };
    let marker = format!("call void {MARKER}(");
    for &i in &plan.blocks {
        let b = &blocks[i];
        let _ = writeln!(out, "{}.{p}:", b.label);
        let exit = barrier_of(b);
        for l in &b.lines {
            let t = l.trim();
            if t.starts_with(&marker) || t == "ret void" {
                if recorded {
                    let code = if t == "ret void" {
                        0
                    } else {
                        exit.unwrap_or(0)
                    };
                    let _ = writeln!(out, "  store i32 {code}, ptr %{p}.code, align 4");
                }
                if t == "ret void" {
                    let _ = writeln!(out, "  br label %{p}.latch");
                }
            } else if exit.is_some() && t.starts_with("br label %wil.b") {
                let _ = writeln!(out, "  br label %{p}.latch");
            } else if t.starts_with("ret ") {
                return Err("returns a value".into());
            } else {
                // Loop metadata would be shared by the region copies.
                let line = l.find(", !llvm.loop").map_or(l.as_str(), |at| &l[..at]);
                let _ = writeln!(out, "{}", rename(line));
            }
        }
    }
    Ok(())
}
