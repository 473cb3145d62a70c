//! The OpenMP face's error paths, driven by the simulated device's injected
//! faults (`OFFLOAD_PLUGINS=sim`, `OFFLOAD_SIM_FAULTS`): a failing
//! allocation, copy in either direction, launch or image load inside a
//! target region prints the plugin's reason and LLVM's error lines and ends
//! with LLVM's fatal error and abort (exit 134); the device-memory routines
//! report failures by their return values and the program goes on.
//!
//! LLVM's runtime cannot inject faults, so the expected lines are LLVM's
//! message texts for these paths (the same texts the differential tests
//! compare where LLVM can be made to fail).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const LLVM_LIB: &str = "/usr/lib/llvm-22/lib";
const FATAL: &str =
    "omptarget fatal error 1: failure of target construct while offloading is mandatory";

fn built() -> &'static (PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let lib = exe
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("libomptarget.so");
        assert!(lib.exists(), "cdylib not found at {}", lib.display());
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("omptarget-sim");
        let lib_dir = dir.join("lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        let link = lib_dir.join("libomptarget.so.22.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sim/omp_faults.c");
        let out = Command::new("clang-22")
            .args([
                "-fopenmp",
                "-fopenmp-targets=x86_64-unknown-linux-gnu",
                "-O1",
                "-o",
            ])
            .arg(dir.join("omp_faults"))
            .arg(&src)
            .output()
            .expect("clang-22 is required (scripts/setup.sh installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (dir.join("omp_faults"), lib_dir)
    })
}

fn run(mode: &str, faults: &str) -> (Output, String, String) {
    run_env(mode, faults, &[])
}

fn run_env(mode: &str, faults: &str, env: &[(&str, &str)]) -> (Output, String, String) {
    let (exe, lib_dir) = built();
    let start = Instant::now();
    let out = Command::new(exe)
        .arg(mode)
        .envs(env.iter().copied())
        .env(
            "LD_LIBRARY_PATH",
            format!("{}:{LLVM_LIB}", lib_dir.display()),
        )
        .env("OFFLOAD_PLUGINS", "sim")
        .env("OFFLOAD_SIM_FAULTS", faults)
        .env_remove("OMP_TARGET_OFFLOAD")
        .env_remove("LIBOMPTARGET_INFO")
        .output()
        .unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{mode} with {faults} took {:?}",
        start.elapsed()
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// A target region whose `faults` fire: the listed stderr lines, in
/// order, then the fatal error and SIGABRT.
fn region_fails(faults: &str, lines: &[&str]) {
    let (out, stdout, stderr) = run("region", faults);
    assert_eq!(out.status.code(), None, "{faults}: must abort\n{stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(6), "{faults}: SIGABRT\n{stderr}");
    assert!(
        !stdout.contains("region:"),
        "{faults}: the region went on\n{stdout}"
    );
    let mut at = 0;
    for l in lines.iter().chain([&FATAL]) {
        match stderr[at..].find(l) {
            Some(i) => at += i + l.len(),
            None => panic!("{faults}: missing (in order) {l:?}\n{stderr}"),
        }
    }
}

#[test]
fn no_fault_runs_the_region_on_the_simulated_device() {
    let (out, stdout, stderr) = run("region", "");
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "region: a[10] = 11\n");
}

/// Every copy and launch passes the core, which counts it once.
#[test]
fn the_core_counts_the_regions_copies_and_launch() {
    let (out, _, stderr) = run_env("region", "", &[("OFFLOAD_STATS", "1")]);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("offload stats: device 0 (sim sim-0)"))
        .unwrap_or_else(|| panic!("no stats line:\n{stderr}"));
    for part in [
        "host->device 1 (256 bytes)",
        "device->host 1 (256 bytes)",
        "launches 1",
        "allocations 1 (256 bytes)",
    ] {
        assert!(line.contains(part), "{part} missing: {line}");
    }
}

#[test]
fn failing_allocation_aborts_the_region() {
    region_fails(
        "alloc:1",
        &[
            "\"PluginInterface\" error: Failure to allocate device memory: simulated device: injected failure of alloc #1",
            "omptarget error: Call to getTargetPointer returned null pointer (device failure or illegal mapping).",
            "omptarget error: Call to targetDataBegin failed, abort target.",
            "omptarget error: Failed to process data before launching the kernel.",
        ],
    );
}

#[test]
fn failing_copy_to_the_device_aborts_the_region() {
    region_fails(
        "h2d:1",
        &[
            "Failure to copy data from host to device: simulated device: injected failure of h2d #1",
            "omptarget error: Call to targetDataBegin failed, abort target.",
            "omptarget error: Failed to process data before launching the kernel.",
        ],
    );
}

#[test]
fn failing_copy_back_aborts_after_the_kernel() {
    region_fails(
        "d2h:1",
        &[
            "Failure to copy data from device to host: simulated device: injected failure of d2h #1",
            "omptarget error: Call to targetDataEnd failed, abort target.",
            "omptarget error: Failed to process data after launching the kernel.",
        ],
    );
}

#[test]
fn failing_launch_aborts() {
    region_fails(
        "launch:1",
        &[
            "injected failure of launch #1",
            "omptarget error: Executing target region abort target.",
        ],
    );
}

#[test]
fn failing_image_load_aborts_at_the_first_region() {
    region_fails(
        "load:1",
        &[
            "omptarget error: Failed to load image: simulated device: injected failure of load #1",
            "omptarget error: Failed to launch kernel: no kernel found for host region",
        ],
    );
}

#[test]
fn device_memory_routines_report_failures_and_go_on() {
    let (out, stdout, stderr) = run("alloc", "alloc:1");
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout,
        "first omp_target_alloc: NULL\nsecond omp_target_alloc: memory\n"
    );
    let (out, stdout, stderr) = run("memcpy", "h2d:1");
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "memcpy results: fail ok ok, back[5] = 5\n");
}
