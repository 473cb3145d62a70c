//! GPU OpenMP programs built here, without a GPU. The project's OpenMP
//! C/C++ programs that make sense on a GPU (crates/omptarget/tests/c:
//! target regions, teams, parallel loops, reductions, maps, mappers,
//! declare-target globals, C++ classes) are built for sm_80, sm_90, gfx90a
//! and gfx942 in one binary with `offload clang-flags`. ptxas, nvlink and
//! ld.lld reject undefined or invalid device code, so a successful link is
//! the first check; `offload inspect` must then describe the four images
//! (cubins for sm_80 and sm_90, AMDGPU ELF objects for gfx90a and gfx942,
//! each holding every kernel of the host's entry table); and each program,
//! run through `offload exec` on our libomptarget, falls back to the host
//! and must print what LLVM 22's libomptarget prints for the same binary
//! (stdout and exit status, as in crates/omptarget/tests/c_programs.rs).
//! `devicertl/notes/constructs.c` (every construct clang lowers to a
//! device-runtime call) must link for sm_90 and gfx90a.
//!
//! Needs clang-22, LLVM 22's libomptarget, the CUDA tools and the device
//! runtime (scripts/setup.sh installs and builds them). Without them the
//! tests are skipped with a note, except under `CI=true`, where that is a
//! failure. A build-tree device runtime older than a devicertl/src file is
//! a failure (run devicertl/build.sh).

mod common;
use common::{skip, text};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

const OFFLOAD: &str = env!("CARGO_BIN_EXE_offload");
const LLVM_LIB: &str = "/usr/lib/llvm-22/lib";
const NVPTX: &str = "nvptx64-nvidia-cuda";
const AMDGCN: &str = "amdgcn-amd-amdhsa";

/// Every image these tests build: (triple, arch).
const IMAGES: [(&str, &str); 4] = [
    (AMDGCN, "gfx90a"),
    (AMDGCN, "gfx942"),
    (NVPTX, "sm_80"),
    (NVPTX, "sm_90"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The newest file under devicertl/src and its modification time.
fn newest_source() -> Option<(PathBuf, std::time::SystemTime)> {
    std::fs::read_dir(root().join("devicertl/src"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.path(), e.metadata().ok()?.modified().ok()?)))
        .max_by_key(|(_, t)| *t)
}

/// `offload clang-flags --offload-arch=ARCHS`, or `None` (skipped) when a
/// tool is missing. Panics when the build tree's device runtime is stale.
fn clang_flags(archs: &str) -> Option<Vec<String>> {
    let clang = Command::new("clang-22")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !clang || !Path::new(LLVM_LIB).join("libomptarget.so.22.1").exists() {
        skip("clang-22 or LLVM 22's libomptarget (scripts/setup.sh installs them)");
        return None;
    }
    let o = Command::new(OFFLOAD)
        .args(["clang-flags", "--json", "--offload-arch", archs])
        .output()
        .unwrap();
    if !o.status.success() {
        skip(&format!(
            "offload clang-flags --offload-arch={archs}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
        return None;
    }
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for rt in v["device_runtime"].as_array().unwrap() {
        if rt["found_by"] != "build tree" {
            continue;
        }
        let archive = Path::new(rt["path"].as_str().unwrap()).join("libompdevice.a");
        let built = std::fs::metadata(&archive).unwrap().modified().unwrap();
        if let Some((src, changed)) = newest_source() {
            assert!(
                changed <= built,
                "{} is older than {}: run devicertl/build.sh",
                archive.display(),
                src.display()
            );
        }
    }
    let flags = v["flags"].as_array().unwrap();
    Some(flags.iter().map(|f| f.as_str().unwrap().into()).collect())
}

/// The flags for all four architectures, asked for once.
fn all_flags() -> Option<&'static [String]> {
    static FLAGS: OnceLock<Option<Vec<String>>> = OnceLock::new();
    FLAGS
        .get_or_init(|| clang_flags("sm_80,sm_90,gfx90a,gfx942"))
        .as_deref()
}

/// The undefined device symbols named in a failed link's messages.
fn undefined_symbols(stderr: &str) -> BTreeSet<String> {
    stderr
        .lines()
        .filter_map(|l| match l.split_once("Undefined reference to '") {
            Some((_, rest)) => rest.split('\'').next(),
            None => l.split_once("undefined symbol: ").map(|(_, s)| s.trim()),
        })
        .map(String::from)
        .collect()
}

/// Builds `src` with clang-22 (clang++-22 for C++) and `flags` into `out`.
fn build(src: &Path, flags: &[String], extra: &[&str], out: &Path) {
    let cxx = src.extension().is_some_and(|e| e == "cpp");
    let o = Command::new(if cxx { "clang++-22" } else { "clang-22" })
        .args(["-fopenmp", "-O1"])
        .args(flags)
        .args(extra)
        .arg(src)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "building {} for GPUs failed; undefined device symbols: {:?}\n{}",
        src.display(),
        undefined_symbols(&stderr),
        text(&o)
    );
}

/// `offload inspect --json FILE`.
fn inspect(file: &Path) -> Value {
    let o = Command::new(OFFLOAD)
        .args(["inspect", "--json"])
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "offload inspect: {}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `EF_AMDGPU_MACH` (the low byte of e_flags) of the AMD architectures.
fn amdgpu_mach(arch: &str) -> u64 {
    match arch {
        "gfx90a" => 0x3f,
        "gfx942" => 0x4c,
        "gfx9-4-generic" => 0x5f,
        "gfx11-generic" => 0x54,
        other => panic!("no EF_AMDGPU_MACH for {other}"),
    }
}

/// Asserts that `file` holds exactly the images `want` (triple, arch), each
/// a cubin or AMDGPU ELF object for its arch that defines every kernel and
/// every global of the host's entry table.
fn check_images(file: &Path, want: &[(&str, &str)]) {
    let v = inspect(file);
    let what = file.display();
    let entries = |class: &str| -> BTreeSet<&str> {
        v["host_entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["class"] == class)
            .map(|e| e["name"].as_str().unwrap())
            .collect()
    };
    let (kernels, globals) = (entries("kernel"), entries("global"));
    assert!(!kernels.is_empty(), "{what}: no kernels in the entry table");
    let mut seen = Vec::new();
    for im in v["images"].as_array().unwrap() {
        let (triple, arch) = (im["triple"].as_str().unwrap(), im["arch"].as_str().unwrap());
        seen.push((triple, arch));
        let defined: BTreeSet<&str> = im["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kernel"] == true)
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(defined, kernels, "{what} {arch}: the image's kernels");
        // Every global of the entry table is an object the image defines
        // (however ptxas compiled it: a whole program keeps them too).
        let objects: BTreeSet<&str> = im["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["name"].as_str().unwrap())
            .collect();
        let missing: Vec<&str> = globals.difference(&objects).copied().collect();
        assert!(
            missing.is_empty(),
            "{what} {arch}: globals not in the image: {missing:?}"
        );
        assert_eq!(im["chain"], "OffloadBinary > ELF", "{what} {arch}");
        match triple {
            NVPTX => {
                assert_eq!(im["elf"]["machine"], "cuda", "{what} {arch}");
                assert_eq!(im["cuda"]["kind"], "cubin", "{what} {arch}");
                assert_eq!(im["cuda"]["target"], arch, "{what} {arch}");
            }
            AMDGCN => {
                assert_eq!(im["elf"]["machine"], "amdgpu", "{what} {arch}");
                let flags = im["elf"]["flags"].as_str().unwrap();
                let flags = u64::from_str_radix(flags.trim_start_matches("0x"), 16).unwrap();
                assert_eq!(
                    flags & 0xff,
                    amdgpu_mach(arch),
                    "{what} {arch}: e_flags {flags:#x}"
                );
                // A generic processor's code object carries its generic
                // version (1 for today's families), the loader's check.
                let generic_version = u64::from(arch.ends_with("-generic"));
                assert_eq!(
                    flags >> 24,
                    generic_version,
                    "{what} {arch}: e_flags {flags:#x}"
                );
            }
            other => panic!("{what}: unexpected image for {other}"),
        }
    }
    seen.sort();
    assert_eq!(seen, want, "{what}: images");
}

/// Runs `exe` with no offloading settings of the caller's.
fn run(mut c: Command) -> Output {
    for var in [
        "OMP_TARGET_OFFLOAD",
        "LIBOMPTARGET_INFO",
        "LIBOMPTARGET_DEBUG",
        "OFFLOAD_PLUGINS",
        "OFFLOAD_LIB_DIR",
    ] {
        c.env_remove(var);
    }
    c.output().unwrap()
}

/// Builds tests/c/NAME of the omptarget crate for the four architectures,
/// inspects the binary and runs it on our libomptarget and on LLVM's.
fn check(name: &str) {
    let Some(flags) = all_flags() else { return };
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("crates/omptarget/tests/c").join(name);
    let exe = dir.path().join(name.replace('.', "_"));
    build(&src, flags, &[], &exe);
    check_images(&exe, &IMAGES);

    let mut ours = Command::new(OFFLOAD);
    ours.arg("exec").arg(&exe);
    let ours = run(ours);
    let mut llvm = Command::new(&exe);
    llvm.env("LD_LIBRARY_PATH", LLVM_LIB);
    let llvm = run(llvm);
    assert_eq!(
        ours.status.code(),
        Some(0),
        "{name} on ours: {}",
        text(&ours)
    );
    assert_eq!(
        (ours.status.code(), String::from_utf8_lossy(&ours.stdout)),
        (llvm.status.code(), String::from_utf8_lossy(&llvm.stdout)),
        "{name}: ours (left) and LLVM's libomptarget differ\nours {}\nllvm {}",
        text(&ours),
        text(&llvm)
    );
    assert!(!ours.stdout.is_empty(), "{name}: printed nothing");
}

macro_rules! gpu_build_tests {
    ($($t:ident => $f:literal,)*) => {
        $( #[test] fn $t() { check($f); } )*
    };
}

gpu_build_tests! {
    basic => "basic.c",
    collapse => "collapse.c",
    declare_target_vars => "declare_target_vars.c",
    deep_copy => "deep_copy.c",
    firstprivate_big => "firstprivate_big.c",
    globals => "globals.c",
    implicit => "implicit.c",
    nested_data => "nested_data.c",
    reductions => "reductions.c",
    structs => "structs.c",
    target_in_parallel => "target_in_parallel.c",
    threads_nowait => "threads_nowait.c",
    update_strided => "update_strided.c",
    cxx_classes => "cxx_classes.cpp",
    lambda_ref => "lambda_ref.cpp",
    mapper => "mapper.cpp",
}

/// Links `devicertl/notes/constructs.c` (every construct clang-22 lowers
/// to a device-runtime call) for `archs` as a shared object (the file has
/// no main): nvlink and ld.lld refuse undefined symbols, and the message
/// lists them. Then the images must be `want`.
fn link_constructs(archs: &str, want: &[(&str, &str)]) {
    let Some(flags) = clang_flags(archs) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("libconstructs.so");
    let src = root().join("devicertl/notes/constructs.c");
    build(&src, &flags, &["-fPIC", "-shared"], &so);
    check_images(&so, want);
}

#[test]
fn constructs_link_without_undefined_symbols() {
    link_constructs("sm_90,gfx90a", &[(AMDGCN, "gfx90a"), (NVPTX, "sm_90")]);
}

/// The device runtime links for LLVM's generic AMD processors too, whose
/// code runs on every GPU of a family (gfx11-generic: gfx1100 to gfx1153).
#[test]
fn constructs_link_for_generic_amd_processors() {
    link_constructs(
        "gfx9-4-generic,gfx11-generic",
        &[(AMDGCN, "gfx11-generic"), (AMDGCN, "gfx9-4-generic")],
    );
}

#[test]
fn undefined_symbols_are_read_from_both_linkers() {
    let stderr = "nvlink error   : Undefined reference to '__kmpc_barrier' in '/tmp/x.cubin'\n\
                  ld.lld: error: undefined symbol: __kmpc_target_init\n\
                  >>> referenced by x.o\n";
    let got: Vec<String> = undefined_symbols(stderr).into_iter().collect();
    assert_eq!(got, ["__kmpc_barrier", "__kmpc_target_init"]);
}

/// The fake CUDA driver (plugins/cuda/tests/fake_cuda), built in `dir`.
fn fake_driver(dir: &Path) -> PathBuf {
    let fake = dir.join("libcuda.so.1");
    let o = Command::new("clang-22")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&fake)
        .arg(root().join("plugins/cuda/tests/fake_cuda/fake_cuda.c"))
        .arg("-lpthread")
        .output()
        .unwrap();
    assert!(o.status.success(), "building the fake driver: {}", text(&o));
    fake
}

/// An sm_90 program, as clang-22 builds it, through our libomptarget on the
/// fake CUDA driver (plugins/cuda/tests/fake_cuda, which reads a cubin's
/// symbol table and runs no device code): the kernel environments clang
/// wrote are read from the real cubin, so the `LIBOMPTARGET_INFO` launch
/// lines show each kernel's mode and the sizes LLVM's plugin would pick
/// (LLVM's own `small_trip_count.c` expects 4 x 32, 5 x 32 and 32 x 4),
/// except for a long loop (occupancy-sized, see the CUDA plugin's README),
/// and every kernel is found in the cubin.
#[test]
fn sm_90_kernels_launch_with_llvms_sizes_on_the_fake_driver() {
    let Some(flags) = clang_flags("sm_90") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_driver(dir.path());
    let exe = dir.path().join("launch_sizes");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/launch_sizes.c");
    build(&src, &flags, &[], &exe);

    let mut c = Command::new(OFFLOAD);
    c.arg("exec")
        .arg(&exe)
        .env("OFFLOAD_PLUGINS", "cuda")
        .env("OFFLOAD_CUDA_DRIVER", &fake)
        .env("FAKE_CUDA_DEVICES", "1")
        .env("LIBOMPTARGET_INFO", "16")
        .env("OMP_TARGET_OFFLOAD", "MANDATORY");
    for var in ["LIBOMPTARGET_DEBUG", "OFFLOAD_LIB_DIR"] {
        c.env_remove(var);
    }
    let mut out = c.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let launches: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once("info: Launching kernel ").map(|(_, r)| r))
        .map(|r| r.split_once(" with ").map_or(r, |(_, sizes)| sizes))
        .collect();
    assert_eq!(
        launches,
        [
            "[4,1,1] blocks and [32,1,1] threads in SPMD mode",
            "[5,1,1] blocks and [32,1,1] threads in SPMD mode",
            "[32,1,1] blocks and [4,1,1] threads in SPMD mode",
            // 2^20 iterations: LLVM's plugin launches 3200 x 128; ours, on
            // purpose, as many teams of 64 as the GPU runs at once (the
            // fake's occupancy calculator: 32 per SM on 132 SMs).
            "[4224,1,1] blocks and [64,1,1] threads in SPMD mode",
            // `target teams` + `parallel`: generic code, which OpenMPOpt
            // (device LTO) turned into Generic-SPMD; thread_limit(64) is
            // also the kernel's launch bound (clang's MaxThreads and
            // nvvm.maxntid).
            "[7,1,1] blocks and [64,1,1] threads in Generic-SPMD mode",
            // a plain `target`: one team (clang passes num_teams -1).
            "[1,1,1] blocks and [128,1,1] threads in Generic-SPMD mode",
        ],
        "{stderr}"
    );
    out.stdout.retain(|&b| b != b'\r');
    assert_eq!(String::from_utf8_lossy(&out.stdout), "launched 6 regions\n");
}

/// Host memory locked for the GPU, on the fake CUDA driver: an sm_90
/// program's `llvm_omp_target_lock_mem` page-locks once for a buffer and a
/// part of it, and unlocks at the last unlock; with
/// `LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS` a mapped buffer is locked while
/// mapped, a buffer that cannot be locked is mapped anyway (`on`) or is a
/// failure naming the setting (`mandatory`).
#[test]
fn host_buffers_are_locked_on_request_on_the_fake_driver() {
    let Some(flags) = clang_flags("sm_90") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_driver(dir.path());
    let exe = dir.path().join("lock_host");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/lock_host.c");
    build(&src, &flags, &["-ldl"], &exe);
    let go = |setting: &str, fail: bool| {
        let mut c = Command::new(OFFLOAD);
        c.arg("exec")
            .arg(&exe)
            .args(fail.then_some("fail"))
            .env("OFFLOAD_PLUGINS", "cuda")
            .env("OFFLOAD_CUDA_DRIVER", &fake)
            .env("FAKE_CUDA_DEVICES", "1")
            .env("LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS", setting);
        for var in ["LIBOMPTARGET_DEBUG", "LIBOMPTARGET_INFO", "OFFLOAD_LIB_DIR"] {
            c.env_remove(var);
        }
        c.output().unwrap()
    };
    let stdout = |o: &Output| String::from_utf8_lossy(&o.stdout).replace('\r', "");
    let api = "devices=1\nlocked=1 part=1\n\
               locked twice: register=1 unregister=0\n\
               unlocked once: register=1 unregister=0\n\
               unlocked twice: register=1 unregister=1\n";
    let off = go("off", false);
    assert_eq!(off.status.code(), Some(0), "{}", text(&off));
    // A buffer the program locked and then mapped stays locked until the
    // unmap, whatever the setting (`r` registrations so far).
    let user_then_mapping = |r: u32| {
        format!(
            "locked, mapped, unlocked: register={} unregister={r}\n\
             unmapped again: register={} unregister={}\n",
            r + 1,
            r + 1,
            r + 1
        )
    };
    let mapped_unlocked = "mapped: register=1 unregister=1\n\
                           unmapped: register=1 unregister=1\na[5]=5\n";
    let want = format!("{api}{mapped_unlocked}{}", user_then_mapping(1));
    assert_eq!(stdout(&off), want);
    for setting in ["on", "mandatory"] {
        let on = go(setting, false);
        assert_eq!(on.status.code(), Some(0), "{}", text(&on));
        let mapped_locked = "mapped: register=2 unregister=1\n\
                             unmapped: register=2 unregister=2\na[5]=5\n";
        let want = format!("{api}{mapped_locked}{}", user_then_mapping(2));
        assert_eq!(stdout(&on), want, "{setting}");
    }
    // The driver refuses: mapped all the same when best effort ...
    let refused = go("on", true);
    assert_eq!(refused.status.code(), Some(0), "{}", text(&refused));
    assert!(stdout(&refused).contains("unmapped: register=2 unregister=1\na[5]=5\n"));
    // ... a failure when mandatory.
    let refused = go("mandatory", true);
    assert_ne!(refused.status.code(), Some(0), "{}", text(&refused));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("LIBOMPTARGET_LOCK_MAPPED_HOST_BUFFERS=mandatory"),
        "{err}"
    );
}

/// The flags' device LTO inlines the device runtime into the kernels: the
/// linked sm_90 image of a `target teams distribute parallel for` program
/// keeps no `__kmpc_parallel_60` function, while the same program built
/// with `offload clang-flags --no-lto` calls it as one (each build linked,
/// so nvlink accepted both).
#[test]
fn device_lto_inlines_the_runtime_and_no_lto_calls_it() {
    let Some(lto) = clang_flags("sm_90") else {
        return;
    };
    let o = Command::new(OFFLOAD)
        .args(["clang-flags", "--offload-arch=sm_90", "--no-lto"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let no_lto: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    let src = root().join("plugins/cuda/tests/gpu/omp_bench.c");
    // Names of the functions left in the linked device image.
    let functions = |flags: &[String], tag: &str| -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join(format!("omp_bench_{tag}"));
        // -save-temps keeps the linked device image next to the program.
        let o = Command::new("clang-22")
            .current_dir(dir.path())
            .args(["-fopenmp", "-O2", "-save-temps"])
            .args(flags)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(o.status.success(), "{tag} build: {}", text(&o));
        let image = dir
            .path()
            .join(format!("omp_bench_{tag}.nvptx64.sm_90.img"));
        let o = Command::new("readelf")
            .arg("-sW")
            .arg(&image)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "readelf {}: {}",
            image.display(),
            text(&o)
        );
        let symbols = String::from_utf8_lossy(&o.stdout);
        assert!(
            symbols.contains("__omp_offloading_"),
            "{tag}: no kernels in {}",
            image.display()
        );
        symbols
            .lines()
            .filter(|l| l.contains(" FUNC "))
            .filter_map(|l| l.split_whitespace().last().map(String::from))
            .collect()
    };
    // What each chunk of a `distribute parallel for` runs: with device LTO
    // these are inlined into the kernel, the region's outlined function
    // with them (a direct call once the region pointer is a constant).
    let hot = [
        "__kmpc_target_init",
        "__kmpc_target_deinit",
        "__kmpc_parallel_60",
        "__kmpc_distribute_static_init_8",
        "__kmpc_for_static_init_8",
        "__kmpc_nvptx_parallel_reduce_nowait_v2",
    ];
    let lto = functions(&lto, "lto");
    let left: Vec<&String> = lto
        .iter()
        .filter(|f| hot.contains(&f.as_str()) || f.ends_with("_omp_outlined"))
        .collect();
    assert!(left.is_empty(), "LTO left these calls: {left:?}");
    let no_lto = functions(&no_lto, "nolto");
    assert!(
        no_lto.iter().any(|f| f == "__kmpc_parallel_60"),
        "--no-lto inlined __kmpc_parallel_60: {no_lto:?}"
    );
}

/// Registers per thread of each kernel of a program's NVIDIA image, as the
/// driver gives them to a block: `offload inspect` reads the REGCOUNT
/// attributes of the cubin's `.nv.info` section (the most of everything
/// the kernel may call, which is what counts).
fn kernel_registers(program: &Path) -> Vec<(String, u64)> {
    let report = inspect(program);
    let functions = report["images"][0]["functions"].as_array().unwrap();
    functions
        .iter()
        .filter(|f| f["kernel"] == true)
        .map(|f| {
            let registers = f["registers"].as_u64();
            let name = f["name"].as_str().unwrap().to_string();
            (
                name.clone(),
                registers.unwrap_or_else(|| panic!("{name}: no register count")),
            )
        })
        .collect()
}

/// omp_bench built for sm_90 with `offload clang-flags` (and `extra`
/// flags for it): its kernels' registers.
fn omp_bench_registers(extra: &[&str]) -> Vec<(String, u64)> {
    let o = Command::new(OFFLOAD)
        .args(["clang-flags", "--offload-arch=sm_90"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "clang-flags {extra:?}: {}", text(&o));
    let flags = String::from_utf8(o.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("omp_bench");
    let o = Command::new("clang-22")
        .current_dir(dir.path())
        .args(["-fopenmp", "-O2", "-save-temps"])
        .args(flags.split_whitespace())
        .arg(root().join("plugins/cuda/tests/gpu/omp_bench.c"))
        .arg("-o")
        .arg(&program)
        .output()
        .unwrap();
    assert!(o.status.success(), "build with {extra:?}: {}", text(&o));
    let regs = kernel_registers(&program);
    // Five kernels: two empty loops, the initialisation, the triad and the
    // sum reduction (last in the source).
    assert_eq!(regs.len(), 5, "{regs:?}");
    // What the host side looks up in the linked image is there, however
    // ptxas compiled it: each kernel's environment and the device
    // environment.
    use object::{Object, ObjectSymbol};
    let image = std::fs::read(dir.path().join("omp_bench.nvptx64.sm_90.img")).unwrap();
    let elf = object::File::parse(&*image).unwrap();
    let defined: Vec<String> = elf
        .symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| s.name().ok().map(String::from))
        .collect();
    let mut wanted: Vec<String> = regs
        .iter()
        .map(|(k, _)| format!("{k}_kernel_environment"))
        .collect();
    wanted.push("__omp_rtl_device_environment".into());
    for w in wanted {
        assert!(defined.contains(&w), "{extra:?}: {w} is not in the image");
    }
    regs
}

/// OpenMP kernels stay light in registers, which sets how many threads an
/// SM holds, and so the bandwidth of a loop like STREAM's, which keeps one
/// load per thread in flight. With the CUDA tool shim ptxas compiles the
/// linked program as a whole: without loop interleaving (`--interleave 1`)
/// every omp_bench kernel fits in 32 registers (a full SM on sm_90) but the
/// sum reduction, which the divisions of the distribute chunk's size take
/// to 40 (devicertl/README.md, "Wider distribute chunks"), where
/// clang's relocatable compile (`--ptxas-relocatable`) gives the sum
/// reduction 66 and the others up to 40. Regressions this also catches,
/// found on an H200 (devicertl/README.md, "Inlining"): the serialised-region
/// path out of line made every region an indirect call (94 registers), and
/// the device heap's allocator inlined on the data-environment path set
/// every kernel with a region to 56. With the default interleaving the sum
/// reduction trades registers for loads in flight (four per thread; on an
/// H200 0.85x a two-pass CUDA kernel instead of 0.71x): at most 64, the
/// others unchanged.
#[test]
fn openmp_kernels_keep_registers_low() {
    if clang_flags("sm_90").is_none() {
        return;
    }
    // The sum reduction is the last kernel in the source.
    let line = |k: &str| -> u32 { k.rsplit("_l").next().unwrap().parse().unwrap() };
    let check = |regs: &[(String, u64)], sum_limit: u64, what: &str| {
        let sum = regs.iter().map(|(k, _)| line(k)).max().unwrap();
        for (k, n) in regs {
            let limit = if line(k) == sum { sum_limit } else { 32 };
            assert!(*n <= limit, "{what}: {k} has {n} registers: {regs:?}");
        }
    };
    let plain = omp_bench_registers(&["--interleave", "1"]);
    check(&plain, 40, "whole program, not interleaved");
    let interleaved = omp_bench_registers(&[]);
    check(&interleaved, 64, "whole program, interleaved");
    // The interleaved sum keeps more values in flight: the flags reached
    // the device LTO.
    let sum_of = |regs: &[(String, u64)]| regs.iter().max_by_key(|(k, _)| line(k)).unwrap().1;
    assert!(
        sum_of(&interleaved) > sum_of(&plain),
        "interleaving changed nothing: {plain:?} against {interleaved:?}"
    );
    let relocatable = omp_bench_registers(&["--ptxas-relocatable", "--interleave", "1"]);
    let most = |regs: &[(String, u64)]| regs.iter().map(|(_, n)| *n).max().unwrap();
    assert!(
        most(&relocatable) > most(&plain),
        "the shim made no difference: {plain:?} against {relocatable:?}"
    );
}
