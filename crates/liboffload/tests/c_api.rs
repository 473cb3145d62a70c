//! Builds the C tests in tests/c/ with clang-22 against `OffloadAPI.h` and
//! runs them on our `libLLVMOffload.so.22.1` (and the portable one on LLVM's
//! too), plus Debian's unmodified `llvm-offload-device-info`.
//!
//! The library under test is the cdylib cargo built next to this test
//! executable (`target/<profile>/libLLVMOffload.so`); a directory with the
//! `libLLVMOffload.so.22.1` / `libLLVMOffload.so` symlinks is made for
//! linking and for `LD_LIBRARY_PATH`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const CLANG: &str = "clang-22";
const LLVM_LIB: &str = "/usr/lib/llvm-22/lib";
const LLVM_INCLUDE: &str = "/usr/lib/llvm-22/include/offload";
const OFFLOAD_BINARY_TOOL: &str = "/usr/lib/llvm-22/bin/llvm-offload-binary";
const DEVICE_INFO_TOOL: &str = "/usr/lib/llvm-22/bin/llvm-offload-device-info";

struct Built {
    /// Holds our library's symlinks.
    lib_dir: PathBuf,
    /// Test binaries and kernel images.
    dir: PathBuf,
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run_checked(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Build everything once per test process.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        // current_exe() = target/<profile>/deps/c_api-<hash>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let cdylib = profile_dir.join("libLLVMOffload.so");
        assert!(cdylib.exists(), "{} not built", cdylib.display());
        let dir = profile_dir.join("liboffload-c-tests");
        let lib_dir = dir.join("lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        for name in ["libLLVMOffload.so.22.1", "libLLVMOffload.so"] {
            let link = lib_dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&cdylib, &link).unwrap();
        }
        let src = manifest_dir().join("tests/c");
        let include = manifest_dir().join("../../include");
        // Host kernels: a plain shared object, and the same inside an OffloadBinary.
        run_checked(
            Command::new(CLANG)
                .args(["-O2", "-fPIC", "-shared", "-Wall", "-Werror", "-I"])
                .arg(&include)
                .arg(src.join("kernels.c"))
                .arg("-o")
                .arg(dir.join("kernels.so")),
        );
        // GPU-style kernels (barriers, group memory): the host plugin's.
        run_checked(
            Command::new(CLANG)
                .args(["-O2", "-fPIC", "-shared", "-Wall", "-Werror", "-I"])
                .arg(&include)
                .arg(manifest_dir().join("../../plugins/host/tests/kernels/group_kernels.c"))
                .arg("-o")
                .arg(dir.join("group_kernels.so")),
        );
        run_checked(
            Command::new(OFFLOAD_BINARY_TOOL)
                .arg("-o")
                .arg(dir.join("kernels.offbin"))
                .arg(format!(
                    "--image=file={},triple=x86_64-unknown-linux-gnu,arch=generic,kind=openmp",
                    dir.join("kernels.so").display()
                )),
        );
        for t in [
            "portable",
            "full",
            "e2e",
            "threads",
            "conformance",
            "async",
            "hostile",
            "sim_faults",
            "group",
        ] {
            run_checked(
                Command::new(CLANG)
                    .args([
                        "-O1",
                        "-g",
                        "-Wall",
                        "-Werror",
                        "-Wno-unused-function",
                        "-I",
                    ])
                    .arg(LLVM_INCLUDE)
                    .arg("-I")
                    .arg(&src)
                    .arg(src.join(format!("{t}.c")))
                    .arg("-o")
                    .arg(dir.join(t))
                    .arg("-L")
                    .arg(&lib_dir)
                    .args(["-lLLVMOffload", "-lpthread"]),
            );
        }
        Built { lib_dir, dir }
    })
}

/// Run a built test binary with `lib_dir` first on the library path.
fn run(test: &str, lib_dir: &Path, args: &[&Path], env: &[(&str, &str)]) -> Output {
    let b = built();
    let mut cmd = Command::new(b.dir.join(test));
    cmd.args(args).env("LD_LIBRARY_PATH", lib_dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn assert_passed(what: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains(", 0 failures"), "{what}: {stdout}");
}

#[test]
fn exports_match_llvm() {
    let b = built();
    let list = |lib: &Path| {
        let out = Command::new("nm")
            .args(["-D", "--defined-only", "--with-symbol-versions"])
            .arg(lib)
            .output()
            .unwrap();
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
            .filter(|s| s.starts_with("ol"))
            .collect();
        v.sort();
        v
    };
    let ours = list(&b.lib_dir.join("libLLVMOffload.so.22.1"));
    let llvm = list(&Path::new(LLVM_LIB).join("libLLVMOffload.so.22.1"));
    assert_eq!(ours.len(), 70);
    assert!(ours.iter().all(|s| s.ends_with("@@VERS1.0")), "{ours:?}");
    assert_eq!(ours, llvm);
    let soname = Command::new("readelf")
        .arg("-d")
        .arg(b.lib_dir.join("libLLVMOffload.so.22.1"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&soname.stdout).contains("[libLLVMOffload.so.22.1]"));
}

#[test]
fn portable_on_ours() {
    let b = built();
    assert_passed("portable (ours)", &run("portable", &b.lib_dir, &[], &[]));
}

#[test]
fn portable_on_llvm() {
    let out = run("portable", Path::new(LLVM_LIB), &[], &[]);
    assert_passed("portable (LLVM 22)", &out);
}

#[test]
fn full_api() {
    let b = built();
    let kernels = b.dir.join("kernels.so");
    assert_passed("full", &run("full", &b.lib_dir, &[&kernels], &[]));
}

#[test]
fn end_to_end_plain_and_offload_binary() {
    let b = built();
    let plain = b.dir.join("kernels.so");
    let wrapped = b.dir.join("kernels.offbin");
    let out = run("e2e", &b.lib_dir, &[&plain, &wrapped], &[]);
    assert_passed("e2e", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches(": ok").count(), 2, "{stdout}");
}

/// The cases of LLVM's own conformance suite (offload/unittests/OffloadAPI),
/// re-expressed in C, on every CPU device and the HOST device.
#[test]
fn llvm_unittest_conformance() {
    let b = built();
    let kernels = b.dir.join("kernels.so");
    let out = run(
        "conformance",
        &b.lib_dir,
        &[&kernels],
        &[("OFFLOAD_HOST_DEVICES", "2")],
    );
    assert_passed("conformance", &out);
}

/// GPU-style kernels on the CPU devices (host_kernel.h ABI v2): LLVM's
/// local-memory reduction and static local-memory tests, tiled matrix
/// multiply, group scan, many barriers, divergent barriers as errors, grid
/// limits and a queued launch that runs asynchronously.
#[test]
fn group_barriers_and_local_memory() {
    let b = built();
    let kernels = b.dir.join("group_kernels.so");
    let out = run(
        "group",
        &b.lib_dir,
        &[&kernels],
        &[("OFFLOAD_HOST_DEVICES", "2")],
    );
    assert_passed("group", &out);
}

#[test]
fn threads() {
    let b = built();
    let kernels = b.dir.join("kernels.so");
    assert_passed("threads", &run("threads", &b.lib_dir, &[&kernels], &[]));
}

/// Asynchronous, in-order queues: blocking host functions released by the
/// caller, events and olWaitEvents across queues, OL_QUEUE_INFO_EMPTY,
/// argument buffers reused at once, errors, concurrent enqueues, destroy of
/// a busy queue, shutdown draining and joining the workers.
#[test]
fn async_queues() {
    let b = built();
    let kernels = b.dir.join("kernels.so");
    let out = run(
        "async",
        &b.lib_dir,
        &[&kernels],
        &[("OFFLOAD_HOST_DEVICES", "2")],
    );
    assert_passed("async", &out);
}

/// A process that exits while a queued launch of 2^40 work items runs ends
/// at once with its own status (the launch returned once enqueued).
#[test]
fn exit_during_a_huge_launch_is_prompt() {
    let b = built();
    let kernels = b.dir.join("kernels.so");
    let mut child = Command::new(b.dir.join("async"))
        .arg(&kernels)
        .arg("exit-during-launch")
        .env("LD_LIBRARY_PATH", &b.lib_dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("still running 10 s after its exit() during the launch");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("exiting during the launch"), "{stdout}");
    assert_eq!(status.code(), Some(0), "{stdout}");
}

#[test]
fn trace_prints_calls() {
    let b = built();
    let out = run("portable", &b.lib_dir, &[], &[("OFFLOAD_TRACE", "1")]);
    assert_passed("portable (traced)", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("---> olInit()-> OL_SUCCESS"), "{stderr}");
    assert!(
        stderr.contains(".PropName = OL_DEVICE_INFO_TYPE, .PropSize = 4"),
        "{stderr}"
    );
    assert!(stderr.contains("-> OL_ERRC_INVALID_SIZE"), "{stderr}");
    assert!(stderr.contains("-> OL_ERRC_UNINITIALIZED"), "{stderr}");
}

#[test]
fn llvm_offload_device_info_uses_our_library() {
    let b = built();
    let out = Command::new(DEVICE_INFO_TOOL)
        .env("LD_LIBRARY_PATH", &b.lib_dir)
        .env("LD_DEBUG", "libs")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The dynamic loader initialised our copy, not LLVM's.
    let ours = format!("{}/libLLVMOffload.so.22.1", b.lib_dir.display());
    assert!(
        stderr.contains(&format!("calling init: {ours}")),
        "our library was not loaded:\n{stderr}"
    );
    assert!(!stderr.contains(&format!("calling init: {LLVM_LIB}/libLLVMOffload.so.22.1")));
    println!("{stdout}");
    assert!(stdout.contains("Liboffload Version: 0.0.1"), "{stdout}");
    let devices: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Num Devices: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("device count");
    assert!(devices >= 2, "{stdout}");
    assert_eq!(stdout.matches("Type: CPU").count(), devices - 1, "{stdout}");
    assert_eq!(stdout.matches("Type: HOST").count(), 1, "{stdout}");
    assert!(stdout.contains("Platform Name: host"), "{stdout}");
    assert!(stdout.contains("Platform Backend: HOST"), "{stdout}");
    assert!(stdout.contains("UID: x86_64-0"), "{stdout}");
    assert!(stdout.contains("Address Bits: 64"), "{stdout}");
    assert!(!stdout.contains("Num Compute Units: 0"), "{stdout}");
}

/// Copies and fills past the end of allocations, into freed memory or to
/// addresses that are no memory of the device, absurd registrations and
/// launch sizes, garbage images: each an error code, and the library stays
/// usable (item 8 of the core-layer issue).
#[test]
fn hostile_calls_are_contained() {
    let b = built();
    let kernels = b.dir.join("kernels.so");
    let out = run("hostile", &b.lib_dir, &[&kernels], &[]);
    assert_passed("hostile", &out);
}

/// Every error path of the ol* face through the simulated device's
/// injected faults: the right code, reported where the header says (the
/// call, or the sync covering a queued operation), and a usable library
/// afterwards.
#[test]
fn sim_device_error_paths() {
    let b = built();
    let kernels = b.dir.join("kernels.so");
    let cases: &[(&str, &str)] = &[
        ("alloc", "alloc:1"),
        ("queue", "queue:1"),
        ("h2d", "h2d:1"),
        ("h2d-queued", "h2d:1"),
        ("d2h", "d2h:1"),
        ("d2d", "d2d:1"),
        ("fill", "fill:1"),
        ("load", "load:1"),
        ("launch", "launch:1"),
        ("launch-queued", "launch:1"),
        ("free", "free:1"),
        ("latency", ""),
    ];
    for (mode, faults) in cases {
        let mut env = vec![("OFFLOAD_PLUGINS", "sim"), ("OFFLOAD_SIM_FAULTS", *faults)];
        if *mode == "latency" {
            env.push(("OFFLOAD_SIM_LATENCY_US", "2000"));
        }
        let out = run("sim_faults", &b.lib_dir, &[Path::new(mode), &kernels], &env);
        assert_passed(&format!("sim_faults {mode} ({faults})"), &out);
    }
}

/// A malformed fault plan is a plugin that fails to come up, not a crash.
#[test]
fn sim_bad_fault_plan_leaves_no_device() {
    let b = built();
    let out = run(
        "portable",
        &b.lib_dir,
        &[],
        &[
            ("OFFLOAD_PLUGINS", "sim"),
            ("OFFLOAD_SIM_FAULTS", "alloc:zero"),
        ],
    );
    assert_passed("portable with a broken sim plan", &out);
}
