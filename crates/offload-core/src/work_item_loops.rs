//! Work-item loops for barrier kernels of bitcode images (host devices).
//!
//! A kernel declared with `OFFLOAD_HOST_KERNEL_BARRIER` runs its group's
//! items as coroutines that switch stacks at every barrier. When such a
//! kernel comes as LLVM bitcode, the JIT can do better, as PoCL does for
//! OpenCL. It cuts the kernel at its barriers into *regions* and runs each
//! region as a loop over the group's items. The result is exported as the
//! kernel's group form, `<kernel>_offload_group`, which the host plugin
//! already prefers over coroutines. No stacks, no switches, and loops the
//! compiler can vectorise.
//!
//! Steps, on LLVM's text form (`opt` from the same LLVM as the compiler):
//!
//! 1. `opt -passes=instnamer`: every value and block gets a name, so lines
//!    can be added and copied without renumbering.
//! 2. A copy of the kernel, with each barrier call (`item->barrier(item)`,
//!    the inline `offload_group_barrier`) replaced by a call to a marker.
//! 3. `opt -passes=reg2mem`: no SSA value crosses a block any more.
//! 4. Each marker ends its block; what followed starts block `wil.bN`.
//! 5. `reg2mem` again, for the values the split made cross-block.
//! 6. The group form: per region (the entry, each `wil.bN`), a copy of the
//!    blocks it reaches without crossing a barrier, inside a loop nest over
//!    the items (z, y, x: x fastest, local ids set in a private item). A
//!    stack slot live at a region's start (a value kept across a barrier)
//!    or whose address escapes gets one element per item; every other slot
//!    stays a plain stack slot, promoted to registers again by `-O2`.
//!    When all items leave a region at the same barrier the next region
//!    runs; when all return, the group is done.
//!
//! Anything this does not understand (an indirect call other than the
//! barrier, a call into another function of the module, dynamic stack
//! allocation, debug info, inline assembly, exceptions) leaves that kernel
//! to the coroutines: the transformation is an optimisation, never a
//! requirement. Items that leave one region at different barriers, or some
//! at a barrier and some by returning (a barrier in divergent control
//! flow), stop the group: the group form then calls the barrier, which the
//! host plugin reports as an error naming the kernel (the kernel exports
//! `<kernel>_offload_group_generated` so the message can say why).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Part of the JIT cache key: the SHA-256 of this file, so any change to
/// the transformation makes images compile again.
pub(crate) fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(include_str!("work_item_loops.rs"));
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("work-item-loops {hex}")
    })
}

/// Offsets in `offload_host_item_t` (include/offload/host_kernel.h).
const ITEM_SIZE: u32 = 104;
const GROUP_SIZE_AT: u32 = 20;
const LOCAL_ID_AT: u32 = 44;
const BARRIER_AT: u32 = 72;

const MARKER: &str = "@__offload_wil_barrier";

/// Whether `bitcode` may hold a barrier kernel (its symbol names are in the
/// string table as they are).
pub(crate) fn may_apply(bitcode: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"_offload_barrier";
    bitcode.windows(NEEDLE.len()).any(|w| w == NEEDLE)
}

/// `opt` of the same LLVM as `compiler`: beside it, else `opt-22` on PATH.
pub(crate) fn find_opt(compiler: &Path) -> Option<std::path::PathBuf> {
    let on_path = |name: &Path| {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|c| c.is_file())
        })
    };
    let compiler = match compiler.components().count() {
        1 => on_path(compiler),
        _ => Some(compiler.to_path_buf()),
    };
    let beside = compiler
        .and_then(|c| std::fs::canonicalize(c).ok())
        .and_then(|real| Some(real.parent()?.join("opt")))
        .filter(|o| o.is_file());
    beside.or_else(|| on_path(Path::new("opt-22")))
}

/// The module of `bitcode` with group forms added to its barrier kernels,
/// as LLVM text written to `out`; `Ok(false)` when no kernel got one.
/// `work` is a private scratch path prefix.
pub(crate) fn add_group_forms(
    opt: &Path,
    bitcode: &Path,
    work: &Path,
    out: &Path,
) -> Result<(Vec<String>, Vec<String>), String> {
    let named = PathBuf::from(format!("{}.named.ll", work.display()));
    run_opt(opt, "instnamer", bitcode, &named)?;
    let mut module = read(&named)?;
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    for kernel in barrier_kernels(&module) {
        match marked_copy(&module, &kernel) {
            Ok(Some(copy)) => {
                module.push_str(&copy);
                done.push(kernel);
            }
            Ok(None) => {}
            Err(why) => skipped.push(format!("{kernel}: {why}")),
        }
    }
    if done.is_empty() {
        let _ = std::fs::remove_file(&named);
        return Ok((done, skipped));
    }
    let _ = writeln!(module, "declare void {MARKER}(ptr)");
    let demoted = PathBuf::from(format!("{}.demoted.ll", work.display()));
    std::fs::write(&named, &module).map_err(|e| e.to_string())?;
    run_opt(opt, "reg2mem", &named, &demoted)?;
    let mut module = read(&demoted)?;
    for kernel in &done {
        let (start, end) = function_span(&module, &copy_name(kernel)).ok_or("copy vanished")?;
        let split = split_at_barriers(&module[start..end]);
        module.replace_range(start..end, &split);
    }
    std::fs::write(&named, &module).map_err(|e| e.to_string())?;
    run_opt(opt, "reg2mem", &named, &demoted)?;
    let mut module = read(&demoted)?;
    let _ = std::fs::remove_file(&named);
    let _ = std::fs::remove_file(&demoted);
    let mut kept = Vec::new();
    for kernel in done {
        let (start, end) = function_span(&module, &copy_name(&kernel)).ok_or("copy vanished")?;
        match group_form(&module[start..end], &kernel) {
            Ok(form) => {
                module.replace_range(start..end, &form);
                kept.push(kernel);
            }
            Err(why) => {
                module.replace_range(start..end, "");
                skipped.push(format!("{kernel}: {why}"));
            }
        }
    }
    for (name, decl) in [
        ("@malloc(", "declare ptr @malloc(i64)"),
        ("@free(", "declare void @free(ptr)"),
        ("@llvm.trap(", "declare void @llvm.trap()"),
    ] {
        if !has_declaration(&module, name) {
            let _ = writeln!(module, "{decl}");
        }
    }
    std::fs::write(out, &module).map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok((kept, skipped))
}

fn has_declaration(module: &str, name: &str) -> bool {
    module
        .lines()
        .any(|l| (l.starts_with("declare ") || l.starts_with("define ")) && l.contains(name))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn run_opt(opt: &Path, passes: &str, input: &Path, output: &Path) -> Result<(), String> {
    let run = Command::new(opt)
        .arg(format!("-passes={passes}"))
        .arg("-S")
        .arg(input)
        .arg("-o")
        .arg(output)
        .output()
        .map_err(|e| format!("running {}: {e}", opt.display()))?;
    if run.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} -passes={passes} failed: {}",
            opt.display(),
            String::from_utf8_lossy(&run.stderr).trim()
        ))
    }
}

fn copy_name(kernel: &str) -> String {
    format!("__offload_wil.{kernel}")
}

/// Kernels that declare a barrier (`@K_offload_barrier = ...`) and export
/// no group form of their own.
fn barrier_kernels(module: &str) -> Vec<String> {
    module
        .lines()
        .filter_map(|l| l.strip_prefix('@')?.split_once("_offload_barrier = "))
        .map(|(k, _)| k.to_string())
        .filter(|k| {
            let group = format!("@{k}_offload_group(");
            is_identifier(k)
                && function_span(module, k).is_some()
                && !module
                    .lines()
                    .any(|l| l.starts_with("define ") && l.contains(&group))
        })
        .collect()
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Byte range of function `name`'s definition (its `define` line to its
/// closing brace and newline).
fn function_span(module: &str, name: &str) -> Option<(usize, usize)> {
    let head = format!("@{name}(");
    let mut at = 0;
    for line in module.split_inclusive('\n') {
        if line.starts_with("define ") && line.contains(&head) {
            let rest = &module[at..];
            let close = rest.find("\n}\n")?;
            return Some((at, at + close + 3));
        }
        at += line.len();
    }
    None
}

/// A function's parts: its `define` line and its lines up to `}`.
struct Function<'a> {
    define: &'a str,
    body: Vec<&'a str>,
}

fn split_function(text: &str) -> Function<'_> {
    let mut lines = text.lines();
    let define = lines.next().unwrap_or("");
    let body = lines.take_while(|l| *l != "}").collect();
    Function { define, body }
}

/// The parameters' names (`%arg`, `%arg1`) of a `define` line.
fn parameter_names(define: &str) -> Vec<String> {
    let open = define.find('(').map(|i| i + 1).unwrap_or(0);
    let mut depth = 0;
    let mut params = Vec::new();
    let mut current = String::new();
    for c in define[open..].chars() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                params.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    params.push(current);
    params
        .iter()
        .filter_map(|p| p.split_whitespace().last())
        .filter(|t| t.starts_with('%'))
        .map(String::from)
        .collect()
}

/// Local names (`%x`, `%"a b"`) in `line`, with their byte ranges.
fn locals(line: &str) -> Vec<(usize, usize)> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let start = i;
            i += 1;
            if i < b.len() && b[i] == b'"' {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += 1;
                }
                i += 1;
            } else {
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'-' | b'$' | b'.' | b'_'))
                {
                    i += 1;
                }
            }
            if i > start + 1 {
                out.push((start, i.min(b.len())));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The defined name of an instruction line (`%x = ...`).
fn defined(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let (name, rest) = t.split_once(" = ")?;
    (name.starts_with('%') && !name.contains(' '))
        .then_some(name)
        .filter(|_| !rest.is_empty())
}

/// A block label line's name (`bb12:  ; preds = ...`).
fn label(line: &str) -> Option<&str> {
    if line.starts_with(' ') || line.is_empty() {
        return None;
    }
    let (name, _) = line.split_once(':')?;
    (!name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'$' | b'.' | b'_')))
    .then_some(name)
}

/// Step 2: the kernel's copy with every barrier call replaced by the
/// marker; `Ok(None)` when it has no barrier call.
fn marked_copy(module: &str, kernel: &str) -> Result<Option<String>, String> {
    let (start, end) = function_span(module, kernel).ok_or("no definition")?;
    let f = split_function(&module[start..end]);
    if f.define.contains("!dbg") || f.define.contains("personality") {
        return Err("debug info or exceptions".into());
    }
    let params = parameter_names(f.define);
    let [_, item] = params.as_slice() else {
        return Err("not the (args, item) signature".into());
    };
    let defs: HashMap<&str, &str> = f
        .body
        .iter()
        .filter_map(|l| Some((defined(l)?, *l)))
        .collect();
    let is_barrier_pointer = |callee: &str| -> bool {
        let Some(load) = defs.get(callee) else {
            return false;
        };
        let Some(from) = load.split_once("= load ptr, ptr ").map(|(_, r)| r) else {
            return false;
        };
        let Some(gep) = from.split(',').next().and_then(|g| defs.get(g.trim())) else {
            return false;
        };
        let gep = gep.split_once(" = ").map(|(_, r)| r).unwrap_or("");
        gep.starts_with("getelementptr")
            && gep.contains(&format!("i8, ptr {item}, i64 {BARRIER_AT}"))
            && !gep.contains('<')
    };
    let mut out = String::new();
    let mut barriers = 0;
    let _ = writeln!(
        out,
        "{}",
        f.define.replacen(
            &format!("@{kernel}("),
            &format!("@{}(", copy_name(kernel)),
            1
        )
    );
    for line in &f.body {
        let t = line.trim_start();
        for bad in [
            "asm ",
            "indirectbr",
            "callbr",
            "invoke ",
            "landingpad",
            "blockaddress",
            "!dbg",
        ] {
            if t.contains(bad) {
                return Err(format!("uses {}", bad.trim()));
            }
        }
        if let Some(call) = call_of(t) {
            if let Some(callee) = call.strip_prefix('%') {
                let callee = format!("%{}", callee.split('(').next().unwrap_or(""));
                if !is_barrier_pointer(&callee) {
                    return Err("an indirect call other than the barrier".into());
                }
                let _ = writeln!(out, "  call void {MARKER}(ptr {item})");
                barriers += 1;
                continue;
            }
            let name = call.split('(').next().unwrap_or("");
            if !name.starts_with("@llvm.")
                && module
                    .lines()
                    .any(|l| l.starts_with("define ") && l.contains(&format!("{name}(")))
            {
                return Err(format!(
                    "calls {name}, defined in the module (it may hold a barrier)"
                ));
            }
        }
        let _ = writeln!(out, "{line}");
    }
    out.push_str("}\n");
    if entry_only_allocas(&f.body).is_err() {
        return Err("a stack allocation outside the entry block".into());
    }
    Ok((barriers > 0).then_some(out))
}

/// What a call instruction calls: `@f(...)` or `%p(...)` (text from the
/// callee on), for `call`/`tail call` lines.
fn call_of(t: &str) -> Option<&str> {
    let rest = t.split_once(" = ").map(|(_, r)| r).unwrap_or(t);
    let rest = rest
        .trim_start_matches("tail ")
        .trim_start_matches("musttail ")
        .trim_start_matches("notail ");
    let rest = rest.strip_prefix("call ")?;
    // Skip the return type and attributes up to the callee.
    let at = rest.find(['@', '%'])?;
    Some(&rest[at..])
}

fn entry_only_allocas(body: &[&str]) -> Result<(), ()> {
    let mut in_entry = true;
    for (i, line) in body.iter().enumerate() {
        if i > 0 && label(line).is_some() {
            in_entry = false;
        }
        if !in_entry && line.contains(" = alloca ") {
            return Err(());
        }
    }
    Ok(())
}

/// Step 4: each marker call ends its block; the rest starts `wil.bN`.
fn split_at_barriers(text: &str) -> String {
    let mut out = String::new();
    let mut n = 0;
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        if line
            .trim_start()
            .starts_with(&format!("call void {MARKER}("))
        {
            n += 1;
            let _ = write!(out, "  br label %wil.b{n}\n\nwil.b{n}:\n");
        }
    }
    out
}

/// A basic block of the final copy.
struct Block {
    label: String,
    lines: Vec<String>,
}

impl Block {
    fn successors(&self) -> Vec<String> {
        let mut out = Vec::new();
        // The terminator: the last line, or a switch's bracketed lines.
        let start = self
            .lines
            .iter()
            .rposition(|l| {
                let t = l.trim_start();
                t.starts_with("br ")
                    || t.starts_with("switch ")
                    || t.starts_with("ret ")
                    || t == "unreachable"
            })
            .unwrap_or(self.lines.len());
        for line in &self.lines[start..] {
            let mut rest = line.as_str();
            while let Some(at) = rest.find("label %") {
                let name: String = rest[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '$' | '.' | '_'))
                    .collect();
                out.push(name);
                rest = &rest[at + 7..];
            }
        }
        out
    }
}

fn blocks_of(body: &[&str]) -> Result<Vec<Block>, String> {
    let mut blocks: Vec<Block> = Vec::new();
    for (i, line) in body.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(name) = label(line) {
            blocks.push(Block {
                label: name.to_string(),
                lines: Vec::new(),
            });
        } else if line.starts_with(|c: char| !c.is_whitespace()) && !line.starts_with(';') {
            return Err(format!("unexpected line {i}: {line}"));
        } else {
            if blocks.is_empty() {
                blocks.push(Block {
                    label: "wil.entry0".into(),
                    lines: Vec::new(),
                });
            }
            blocks.last_mut().unwrap().lines.push(line.to_string());
        }
    }
    Ok(blocks)
}

/// Each block's position, by label.
fn block_index(blocks: &[Block]) -> HashMap<&str, usize> {
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| (b.label.as_str(), i))
        .collect()
}

/// Each block's successors, as positions.
fn successor_indices(blocks: &[Block], index: &HashMap<&str, usize>) -> Vec<Vec<usize>> {
    let known = |b: &Block| -> Vec<usize> {
        b.successors()
            .iter()
            .filter_map(|s| index.get(s.as_str()).copied())
            .collect()
    };
    blocks.iter().map(known).collect()
}

/// A stack slot of the entry block.
struct Slot {
    name: String,
    ty: String,
    align: u32,
}

/// Slots used other than as the address of plain loads and stores: their
/// address escapes, so they get one element per item, always.
fn escaped_slots(blocks: &[Block], slots: &[Slot]) -> HashSet<String> {
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

/// For `%x = load T, ptr %p, ...` and `store T v, ptr %p, ...` (not
/// volatile or atomic): where `%p` starts, and whether it is a load.
fn pointer_operand(line: &str) -> Option<(usize, bool)> {
    let t = line.trim_start();
    let is_load = defined(line).is_some() && line.contains(" = load ");
    let is_store = t.starts_with("store ");
    if !(is_load || is_store) || t.contains("volatile") || t.contains("atomic") {
        return None;
    }
    // The pointer is the last `ptr %name` before `, align` (or the end).
    let cut = line.find(", align").unwrap_or(line.len());
    let at = line[..cut].rfind(", ptr %")? + 6;
    Some((at, is_load))
}

/// Slots live at the start of some region (a value kept across a barrier).
fn live_at_region_starts(
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
struct SingleStores<'a> {
    defs: HashMap<&'a str, &'a str>,
    value: HashMap<String, (&'a str, &'a str)>,
    all: HashMap<String, Vec<(&'a str, usize)>>,
}

fn single_stores<'a>(blocks: &'a [Block], simple: &HashSet<String>) -> SingleStores<'a> {
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
fn uniform_slots(
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
fn post_dominators(succ: &[Vec<usize>]) -> Vec<Vec<bool>> {
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
fn divergent_blocks(
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
struct Inputs<'s> {
    args: &'s str,
    item: &'s str,
    /// The item's local id counts (recomputing a value in each item).
    local_id: bool,
    /// Divisions count (not when recomputed where the program did not
    /// compute: they may trap).
    division: bool,
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
fn slots_computed_from(
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
struct Sources<'a, 's> {
    defs: &'s HashMap<&'a str, &'a str>,
    ok: &'s HashSet<String>,
    inputs: Inputs<'s>,
}

impl<'a> Sources<'a, '_> {
    /// Whether `value` is computed only from what [`slots_computed_from`]
    /// allows.
    fn allow(&self, value: &'a str, seen: &mut HashMap<&'a str, bool>) -> bool {
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

/// The pointer a plain load reads.
fn load_pointer(line: &str) -> Option<&str> {
    let (at, true) = pointer_operand(line)? else {
        return None;
    };
    let &(s, e) = locals(&line[at..]).first()?;
    Some(&line[at + s..at + e])
}

/// `p` as a constant byte offset into the item (`true`) or the arguments.
fn field_of(p: &str, defs: &HashMap<&str, &str>, inputs: Inputs<'_>) -> Option<(bool, u32)> {
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
fn chain<'a>(
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
fn remat_code(
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

/// Step 6: the group form `<kernel>_offload_group` from the final copy.
fn group_form(text: &str, kernel: &str) -> Result<String, String> {
    let f = split_function(text);
    let params = parameter_names(f.define);
    let [args, item] = params.as_slice() else {
        return Err("not the (args, item) signature".into());
    };
    let attrs = f
        .define
        .rsplit_once(')')
        .map(|(_, a)| a.trim_end_matches('{').trim())
        .unwrap_or("");
    let attrs: String = attrs
        .split_whitespace()
        .filter(|a| a.starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let mut blocks = blocks_of(&f.body)?;
    // Lifetime markers take a stack slot; per-item slots are not ones.
    for b in &mut blocks {
        b.lines.retain(|l| !l.contains("@llvm.lifetime."));
    }
    // The entry block's slots move out of the regions.
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
    let entry = blocks[0].label.clone();
    let mut starts = vec![entry.clone()];
    starts.extend(
        blocks
            .iter()
            .filter(|b| b.label.starts_with("wil.b"))
            .map(|b| b.label.clone()),
    );
    let escaped = escaped_slots(&blocks, &slots);
    let simple: HashSet<String> = slots
        .iter()
        .map(|s| s.name.clone())
        .filter(|n| !escaped.contains(n))
        .collect();
    let live = live_at_region_starts(&blocks, &simple, &starts);
    let stores = single_stores(&blocks, &simple);
    let inputs = Inputs {
        args,
        item,
        local_id: false,
        division: true,
    };
    let uniform = uniform_slots(&blocks, &stores, inputs);
    // Each item starts a region from the values the region started with:
    // one item's updates (a loop counter) must not reach the next item.
    let restored: Vec<&Slot> = slots
        .iter()
        .filter(|s| uniform.contains(&s.name) && live.contains(&s.name))
        .collect();
    let recomputed = Inputs {
        local_id: true,
        division: false,
        ..inputs
    };
    let remat: HashSet<String> = slots_computed_from(&stores, &uniform, recomputed)
        .into_iter()
        .filter(|s| live.contains(s))
        .collect();
    // Recomputed at each region's start, in dependency order.
    let mut header = String::new();
    remat_code(&mut header, &stores, &remat, recomputed);
    let per_item: Vec<&Slot> = slots
        .iter()
        .filter(|s| {
            escaped.contains(&s.name)
                || live.contains(&s.name) && !uniform.contains(&s.name) && !remat.contains(&s.name)
        })
        .collect();
    let shared: Vec<&Slot> = slots
        .iter()
        .filter(|s| !per_item.iter().any(|p| p.name == s.name))
        .collect();

    let mut out = String::new();
    let _ = writeln!(out, "define void @{kernel}_offload_group(ptr noundef %wil.args, ptr noundef %wil.first) {attrs} {{");
    out.push_str("wil.entry:\n");
    for s in &shared {
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
    out.push_str("  %wil.sxy = mul nuw i64 %wil.sx.64, %wil.sy.64\n  %wil.n = mul nuw i64 %wil.sxy, %wil.sz.64\n");
    // Per-item arrays in one allocation: the exit codes, then each slot.
    let _ = writeln!(out, "  %wil.codes.bytes = shl nuw i64 %wil.n, 2");
    let mut total = "%wil.codes.bytes".to_string();
    for (k, s) in per_item.iter().enumerate() {
        let a = s.align.max(1);
        let _ = writeln!(
            out,
            "  %wil.sz{k}.p = getelementptr {}, ptr null, i64 1",
            s.ty
        );
        let _ = writeln!(out, "  %wil.sz{k}.raw = ptrtoint ptr %wil.sz{k}.p to i64");
        let _ = writeln!(out, "  %wil.sz{k}.up = add i64 %wil.sz{k}.raw, {}", a - 1);
        let _ = writeln!(out, "  %wil.stride{k} = and i64 %wil.sz{k}.up, -{a}");
        let _ = writeln!(out, "  %wil.bytes{k} = mul nuw i64 %wil.stride{k}, %wil.n");
        // Each array starts on a 64-byte boundary.
        let _ = writeln!(out, "  %wil.off{k}.up = add i64 {total}, 63");
        let _ = writeln!(out, "  %wil.off{k} = and i64 %wil.off{k}.up, -64");
        let _ = writeln!(out, "  %wil.end{k} = add i64 %wil.off{k}, %wil.bytes{k}");
        total = format!("%wil.end{k}");
    }
    let _ = writeln!(out, "  %wil.mem = call ptr @malloc(i64 {total})");
    out.push_str("  %wil.oom = icmp eq ptr %wil.mem, null\n  br i1 %wil.oom, label %wil.trap, label %wil.go\n");
    out.push_str("wil.trap:\n  call void @llvm.trap()\n  unreachable\n");
    out.push_str("wil.go:\n");
    for k in 0..per_item.len() {
        let _ = writeln!(
            out,
            "  %wil.base{k} = getelementptr i8, ptr %wil.mem, i64 %wil.off{k}"
        );
    }
    let _ = writeln!(out, "  br label %wil.r0");

    let index = block_index(&blocks);
    let code_of = |label: &str| -> u32 {
        label
            .strip_prefix("wil.b")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut all_codes: BTreeSet<u32> = starts.iter().map(|s| code_of(s)).collect();
    all_codes.insert(0);
    let mut plans: Vec<Region> = starts
        .iter()
        .map(|start| {
            let region = region_blocks(&blocks, &index, &[start.as_str()]);
            let exits = region_exits(&blocks, &region);
            Region {
                prefix: format!("wil.r{}", code_of(start)),
                entry: vec![(code_of(start), start.clone())],
                exits,
                blocks: region,
            }
        })
        .collect();
    // The general step: each item resumes where it stopped. Used when the
    // items of a group wait at different calls of the barrier (the
    // optimiser may duplicate a barrier call into both arms of a branch on
    // the local id; the coroutines count barriers, not calls, and so does
    // this step).
    let every: Vec<&str> = starts.iter().map(String::as_str).collect();
    plans.push(Region {
        prefix: "wil.rg".into(),
        entry: starts
            .iter()
            .skip(1)
            .map(|s| (code_of(s), s.clone()))
            .collect(),
        exits: all_codes.clone(),
        blocks: region_blocks(&blocks, &index, &every[1..]),
    });
    for plan in &plans {
        let prefix = &plan.prefix;
        let header = header.replace("WILP", prefix);
        let mut preheader = String::new();
        let mut restore = String::new();
        for (k, slot) in restored.iter().enumerate() {
            let _ = writeln!(
                preheader,
                "  %{prefix}.snap{k} = load {}, ptr {}, align {}",
                slot.ty, slot.name, slot.align
            );
            let _ = writeln!(
                restore,
                "  store {} %{prefix}.snap{k}, ptr {}, align {}",
                slot.ty, slot.name, slot.align
            );
        }
        // Restored first: the recomputed slots may read them.
        let header = restore + &header;
        region_loop(
            &mut out, plan, &blocks, &per_item, item, &preheader, &header,
        )?;
    }
    out.push_str("wil.exit:\n  call void @free(ptr %wil.mem)\n  ret void\n");
    // Items left one region in different ways: report through the barrier
    // (the host plugin names the kernel and the reason).
    let _ = writeln!(
        out,
        "wil.diverged:\n  %wil.bar.p = getelementptr i8, ptr %wil.first, i64 {BARRIER_AT}"
    );
    out.push_str(
        "  %wil.bar = load ptr, ptr %wil.bar.p, align 8\n  call void %wil.bar(ptr %wil.first)\n",
    );
    out.push_str("  call void @free(ptr %wil.mem)\n  ret void\n}\n");
    let _ = writeln!(out, "@{kernel}_offload_group_generated = constant i32 1\n");
    Ok(out)
}

fn parse_alloca(line: &str) -> Option<Slot> {
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

/// Blocks reachable from `starts` without crossing a barrier edge: the
/// first start first (the loop header enters it), then program order.
fn region_blocks(blocks: &[Block], index: &HashMap<&str, usize>, starts: &[&str]) -> Vec<usize> {
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
struct Region {
    prefix: String,
    entry: Vec<(u32, String)>,
    exits: BTreeSet<u32>,
    blocks: Vec<usize>,
}

/// The barrier number a block ends at, when it ends at one.
fn barrier_of(b: &Block) -> Option<u32> {
    let last = b.lines.last()?.trim();
    let n = last.strip_prefix("br label %wil.b")?.parse().ok()?;
    b.lines
        .iter()
        .any(|l| l.trim_start().starts_with(&format!("call void {MARKER}(")))
        .then_some(n)
}

/// How a region's items may leave it: 0 = return, N = barrier N.
fn region_exits(blocks: &[Block], region: &[usize]) -> BTreeSet<u32> {
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
fn region_loop(
    out: &mut String,
    plan: &Region,
    blocks: &[Block],
    per_item: &[&Slot],
    item: &str,
    preheader: &str,
    header: &str,
) -> Result<(), String> {
    let p = plan.prefix.as_str();
    let (region, exits) = (&plan.blocks, &plan.exits);
    let general = plan.entry.len() != 1;
    let recorded = exits.len() > 1 || general;
    // Names the copy defines get the region's suffix.
    let mut renamed: HashSet<String> = HashSet::new();
    for &i in region {
        renamed.insert(format!("%{}", blocks[i].label));
        for l in &blocks[i].lines {
            if let Some(d) = defined(l) {
                renamed.insert(d.to_string());
            }
        }
    }
    for s in per_item {
        renamed.insert(s.name.clone());
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
    for &i in region {
        let b = &blocks[i];
        let _ = writeln!(out, "{}.{p}:", b.label);
        let exit = barrier_of(b);
        for l in &b.lines {
            let t = l.trim();
            if t.starts_with(&format!("call void {MARKER}(")) {
                if recorded {
                    let _ = writeln!(
                        out,
                        "  store i32 {}, ptr %{p}.code, align 4",
                        exit.unwrap_or(0)
                    );
                }
                continue;
            }
            if exit.is_some() && t.starts_with("br label %wil.b") {
                let _ = writeln!(out, "  br label %{p}.latch");
                continue;
            }
            if t == "ret void" {
                if recorded {
                    let _ = writeln!(out, "  store i32 0, ptr %{p}.code, align 4");
                }
                let _ = writeln!(out, "  br label %{p}.latch");
                continue;
            }
            if t.starts_with("ret ") {
                return Err("returns a value".into());
            }
            // Loop metadata would be shared by the region copies.
            let line = match l.find(", !llvm.loop") {
                Some(at) => &l[..at],
                None => l.as_str(),
            };
            let _ = writeln!(out, "{}", rename(line));
        }
    }
    out.push_str(&LOOP_LATCH.replace("{p}", p));
    let target = |code: u32| {
        if code == 0 {
            "wil.exit".to_string()
        } else {
            format!("wil.r{code}")
        }
    };
    if !recorded {
        let only = exits
            .iter()
            .next()
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
    for &code in exits {
        let _ = write!(out, " i32 {code}, label %{}", target(code));
    }
    out.push_str(" ]\n");
    out.push_str(&MIXED_CODES.replace("{p}", p));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The project's barrier kernels (plugins/host/tests/kernels) through
    /// the whole transformation; `None` when clang-22 or opt is missing
    /// (a failure under CI=true).
    fn transformed() -> Option<(Vec<String>, Vec<String>, String)> {
        let clang = test_support::clang()?;
        let opt = find_opt(&clang);
        if !test_support::require(opt.is_some(), "opt of LLVM 22 (llvm-22)") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let bc = dir.path().join("k.bc");
        let built = Command::new(&clang)
            .args(["-O2", "-fPIC", "-emit-llvm", "-c", "-I"])
            .arg(root.join("include"))
            .arg(root.join("plugins/host/tests/kernels/group_kernels.c"))
            .arg("-o")
            .arg(&bc)
            .status()
            .unwrap();
        assert!(built.success());
        let out = dir.path().join("k.ll");
        let (made, skipped) =
            add_group_forms(&opt.unwrap(), &bc, &dir.path().join("w"), &out).unwrap();
        Some((made, skipped, std::fs::read_to_string(out).unwrap()))
    }

    #[test]
    fn kernels_it_does_not_understand_are_left_alone() {
        let module = "@k_offload_barrier = constant i32 1\n\n\
            define void @k(ptr %arg, ptr %arg1) {\nbb:\n  %f = load ptr, ptr %arg, align 8\n  \
            call void %f(ptr %arg1)\n  ret void\n}\n";
        assert_eq!(barrier_kernels(module), ["k"]);
        let why = marked_copy(module, "k").unwrap_err();
        assert!(
            why.contains("an indirect call other than the barrier"),
            "{why}"
        );
        // A kernel with its own group form is not touched.
        let own = format!(
            "{module}define void @k_offload_group(ptr %a, ptr %b) {{\nbb:\n  ret void\n}}\n"
        );
        assert!(barrier_kernels(&own).is_empty());
    }

    #[test]
    fn barrier_kernels_get_work_item_loops() {
        let Some((made, skipped, module)) = transformed() else {
            return;
        };
        for k in [
            "reduce_dynamic",
            "reduce_static",
            "matmul_tiled",
            "scan_group",
            "neighbour_3d",
            "many_barriers",
            "divergent_barrier",
        ] {
            assert!(
                made.iter().any(|m| m == k),
                "{k} not made: {made:?} {skipped:?}"
            );
            assert!(
                module.contains(&format!("define void @{k}_offload_group(")),
                "{k}"
            );
            assert!(
                module.contains(&format!("@{k}_offload_group_generated = constant i32 1")),
                "{k}"
            );
        }
        // A kernel with its own group form keeps it; a barrier in a called
        // function is not seen: coroutines.
        assert!(
            !made
                .iter()
                .any(|m| m == "reduce_loops" || m == "barrier_in_helper"),
            "{made:?}"
        );
        assert!(
            skipped
                .iter()
                .any(|s| s.starts_with("barrier_in_helper: calls @barrier_helper")),
            "{skipped:?}"
        );
        // The reduction keeps nothing per item across its barriers: its
        // loop counter is uniform, its local id and slot address recomputed.
        let (start, end) = function_span(&module, "reduce_dynamic_offload_group").unwrap();
        let form = &module[start..end];
        assert!(!form.contains("%wil.base"), "per-item slots in:\n{form}");
        assert!(
            form.contains(".snap"),
            "the loop counter is not restored per item"
        );
    }

    #[test]
    fn parameters_and_locals() {
        let d = "define void @k(ptr noundef readonly captures(address, provenance) %arg, ptr noundef %arg1) local_unnamed_addr #0 {";
        assert_eq!(parameter_names(d), ["%arg", "%arg1"]);
        let l = "  %a.b = add i32 %\"x y\", %c1";
        let names: Vec<&str> = locals(l).iter().map(|&(s, e)| &l[s..e]).collect();
        assert_eq!(names, ["%a.b", "%\"x y\"", "%c1"]);
    }

    #[test]
    fn liveness_finds_values_kept_across_a_barrier() {
        let body = [
            "entry:",
            "  store i32 1, ptr %kept, align 4",
            "  store i32 2, ptr %local, align 4",
            "  %v = load i32, ptr %local, align 4",
            "  call void @__offload_wil_barrier(ptr %arg1)",
            "  br label %wil.b1",
            "wil.b1:",
            "  %w = load i32, ptr %kept, align 4",
            "  ret void",
        ];
        let blocks = blocks_of(&body).unwrap();
        let slots: HashSet<String> = ["%kept", "%local"].map(String::from).into();
        let live = live_at_region_starts(&blocks, &slots, &["entry".into(), "wil.b1".into()]);
        assert_eq!(live, ["%kept".to_string()].into());
        assert_eq!(barrier_of(&blocks[0]), Some(1));
    }
}
