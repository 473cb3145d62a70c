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
//!    the items (z, y, x: x fastest, local ids set in a private item).
//!    Stack slots (`analysis::plan_slots`):
//!    - one whose address escapes, or live at a region's start (a value
//!      kept across a barrier), gets one element per item;
//!    - except, when live at a region's start: a *uniform* one (every item
//!      holds the same value there: a loop counter) stays one slot, each
//!      item starting the region from the region's snapshot; one computed
//!      from the item and run-long values (a hoisted address) is
//!      recomputed at each region;
//!    - every other slot stays a plain stack slot, promoted to registers
//!      again by `-O2`.
//!
//!    When all items leave a region at the same barrier the next region
//!    runs; when all return, the group is done. The group form is compiled
//!    for the processor the JIT runs on (`-march=native`), as PoCL does.
//!
//! Anything this does not understand (an indirect call other than the
//! barrier, a call into another function of the module, dynamic stack
//! allocation, debug info, inline assembly, exceptions) leaves that kernel
//! to the coroutines: the transformation is an optimisation, never a
//! requirement (and when the result does not compile, the JIT compiles the
//! image as it came). Items that wait at different calls of the barrier
//! (LLVM may duplicate a call into both arms of a branch) go on together in
//! a general step that resumes each item where it stopped, as coroutines
//! would. Items that return while others wait (a barrier in divergent
//! control flow) stop the group: the group form then calls the barrier,
//! which the host plugin reports as an error naming the kernel (the kernel
//! exports `<kernel>_offload_group_generated` so the message can say why).
//!
//! Files: `mark` (steps 2 and 4), `analysis` (which slots live per item),
//! `emit` (step 6), `text` (reading LLVM's text form).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

mod analysis;
mod emit;
mod mark;
mod text;

use analysis::*;
use emit::*;
use mark::*;
use text::*;

/// Part of the JIT cache key: the SHA-256 of this module's sources, so any
/// change to the transformation makes images compile again.
pub(crate) fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(concat!(
            include_str!("mod.rs"),
            include_str!("text.rs"),
            include_str!("mark.rs"),
            include_str!("analysis.rs"),
            include_str!("emit.rs")
        ));
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
    find_tool(compiler, "opt")
}

/// The LLVM tool `name` of the same LLVM as `compiler`: beside it, else
/// `<name>-22` on PATH.
pub(crate) fn find_tool(compiler: &Path, name: &str) -> Option<std::path::PathBuf> {
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
        .and_then(|real| Some(real.parent()?.join(name)))
        .filter(|o| o.is_file());
    beside.or_else(|| on_path(Path::new(&format!("{name}-22"))))
}

/// The module of `bitcode` with group forms added to its barrier kernels,
/// as LLVM text written to `out`; `Ok(false)` when no kernel got one.
/// `work` is a private scratch path prefix.
pub(crate) fn add_group_forms(
    opt: &Path,
    host: Option<&HostCpu>,
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
    if let Some(host) = host {
        retarget(&mut module, &kept, host);
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

/// The processor the JIT runs on, as clang names it for `-march=native`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostCpu {
    pub(crate) cpu: String,
    /// `+feature,-feature,...`, as in a `"target-features"` attribute.
    pub(crate) features: String,
}

impl HostCpu {
    /// Asks `compiler` (`-### -march=native`: it prints, runs nothing);
    /// once per process.
    pub(crate) fn of(compiler: &Path) -> Option<&'static HostCpu> {
        static FOUND: std::sync::OnceLock<Option<HostCpu>> = std::sync::OnceLock::new();
        FOUND
            .get_or_init(|| {
                let run = Command::new(compiler)
                    .args([
                        "-###",
                        "-march=native",
                        "-x",
                        "c",
                        "-c",
                        "/dev/null",
                        "-o",
                        "/dev/null",
                    ])
                    .output()
                    .ok()?;
                HostCpu::parse(&String::from_utf8_lossy(&run.stderr))
            })
            .as_ref()
    }

    /// From the `-cc1` line of `clang -###`.
    fn parse(listing: &str) -> Option<HostCpu> {
        let line = listing.lines().find(|l| l.contains("\"-target-cpu\""))?;
        let words: Vec<&str> = line
            .split_whitespace()
            .map(|w| w.trim_matches('"'))
            .collect();
        let after =
            |flag: &'static str| words.windows(2).filter(move |w| w[0] == flag).map(|w| w[1]);
        let cpu = after("-target-cpu").next()?.to_string();
        let features: Vec<&str> = after("-target-feature").collect();
        let plain = |s: &str| {
            s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"+-._,".contains(&c))
        };
        (plain(&cpu) && features.iter().all(|f| plain(f))).then(|| HostCpu {
            cpu,
            features: features.join(","),
        })
    }
}

/// The group forms of `kernels` compiled for `host` (PoCL does the same: a
/// work-group loop is worth vectorising for the machine it runs on, and
/// the JIT runs there): each gets a copy of its attribute group with the
/// host's processor and features.
fn retarget(module: &mut String, kernels: &[String], host: &HostCpu) {
    let group_of =
        |line: &str| -> Option<u32> { line.strip_suffix(" {")?.rsplit_once(" #")?.1.parse().ok() };
    let mut next = module
        .lines()
        .filter_map(|l| {
            l.strip_prefix("attributes #")?
                .split_once(' ')?
                .0
                .parse::<u32>()
                .ok()
        })
        .max()
        .map_or(0, |m| m + 1);
    let mut copies: HashMap<u32, u32> = HashMap::new();
    let mut added = String::new();
    let mut lines: Vec<String> = module.lines().map(String::from).collect();
    for line in &mut lines {
        let is_form = kernels
            .iter()
            .any(|k| line.starts_with(&format!("define void @{k}_offload_group(")));
        let Some(group) = is_form.then(|| group_of(line)).flatten() else {
            continue;
        };
        let Some(source) = module
            .lines()
            .find(|l| l.starts_with(&format!("attributes #{group} = {{")))
        else {
            continue;
        };
        let copy = *copies.entry(group).or_insert_with(|| {
            let mut attrs: Vec<String> = source
                .split_once('{')
                .map_or("", |(_, r)| r.trim_end_matches('}'))
                .split_whitespace()
                .filter(|a| {
                    !a.starts_with("\"target-cpu\"=")
                        && !a.starts_with("\"target-features\"=")
                        && !a.starts_with("\"tune-cpu\"=")
                })
                .map(String::from)
                .collect();
            attrs.push(format!("\"target-cpu\"=\"{}\"", host.cpu));
            attrs.push(format!("\"target-features\"=\"{}\"", host.features));
            let _ = writeln!(added, "attributes #{next} = {{ {} }}", attrs.join(" "));
            next += 1;
            next - 1
        });
        *line = line.replacen(&format!(" #{group} {{"), &format!(" #{copy} {{"), 1);
    }
    *module = lines.join("\n") + "\n" + &added;
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
        let (made, skipped) = add_group_forms(
            &opt.unwrap(),
            HostCpu::of(&clang),
            &bc,
            &dir.path().join("w"),
            &out,
        )
        .unwrap();
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
    fn host_cpu_from_a_clang_listing() {
        let listing = r#" "/usr/bin/clang" "-cc1" "-triple" "x86_64-pc-linux-gnu" "-target-cpu" "skylake-avx512" "-target-feature" "+avx512f" "-target-feature" "-amx-tile" "-x" "c""#;
        let host = HostCpu::parse(listing).unwrap();
        assert_eq!(host.cpu, "skylake-avx512");
        assert_eq!(host.features, "+avx512f,-amx-tile");
        assert!(HostCpu::parse("clang version 22").is_none());
        assert!(HostCpu::parse(r#""-target-cpu" "a\"b""#).is_none());
    }

    #[test]
    fn group_forms_are_compiled_for_the_host() {
        let mut module = "define void @k(ptr %a, ptr %b) #3 {\nbb:\n  ret void\n}\n\
            define void @k_offload_group(ptr noundef %wil.args, ptr noundef %wil.first) #3 {\n\
            wil.entry:\n  ret void\n}\n\
            attributes #3 = { nounwind \"target-cpu\"=\"x86-64\" \"target-features\"=\"+sse2\" }\n"
            .to_string();
        let host = HostCpu {
            cpu: "znver4".into(),
            features: "+avx512f".into(),
        };
        retarget(&mut module, &["k".to_string()], &host);
        assert!(
            module.contains("define void @k(ptr %a, ptr %b) #3 {"),
            "{module}"
        );
        assert!(module.contains("%wil.first) #4 {"), "{module}");
        assert!(module.contains(
            "attributes #4 = { nounwind \"target-cpu\"=\"znver4\" \"target-features\"=\"+avx512f\" }"
        ), "{module}");
        assert!(
            module.contains("attributes #3 = { nounwind \"target-cpu\"=\"x86-64\""),
            "{module}"
        );
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
