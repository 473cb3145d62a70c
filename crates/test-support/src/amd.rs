//! AMD GPU fixtures without an AMD GPU: the fake HSA runtime
//! (`plugins/amdgpu/tests/fake_hsa/fake_hsa.c`, built with clang-22 as
//! `libhsa-runtime64.so.1`) that the AMDGPU plugin loads through
//! `OFFLOAD_HSA_RUNTIME`, and small code objects built for it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::clang;

/// A folder for this test process's builds (a static is never dropped:
/// it stays in the temporary directory, as the other fixtures' do).
fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temporary directory"))
        .path()
}

/// Runs `cmd`, panicking with its stderr when it fails.
pub fn run(cmd: &mut Command, what: &str) {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The fake HSA runtime, built once per test process; `None` (a skip,
/// a failure under `CI=true`) without clang-22. Its environment:
/// `HSA_FAKE_ARCH` (the agents' target ID, `gfx90a` by default),
/// `HSA_FAKE_GPUS` (2 by default), `HSA_FAKE_MAX_ALLOC`.
pub fn fake_hsa_library() -> Option<PathBuf> {
    static LIB: OnceLock<Option<PathBuf>> = OnceLock::new();
    LIB.get_or_init(|| {
        let clang = clang()?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../plugins/amdgpu/tests/fake_hsa/fake_hsa.c");
        let out = scratch().join("libhsa-runtime64.so.1");
        run(
            Command::new(clang)
                .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
                .arg(&out)
                .arg(&src)
                .arg("-lpthread"),
            "building the fake HSA runtime",
        );
        Some(out)
    })
    .clone()
}

/// OpenCL C `source` built by clang-22 into a code object for `target`
/// (a target ID: `gfx90a:xnack-`); `None` without clang-22.
pub fn opencl_code_object(target: &str, source: &str) -> Option<Vec<u8>> {
    opencl(target, source, &[])
}

/// OpenCL C `source` compiled by clang-22 to LLVM bitcode for `target`,
/// as `-fopenmp-target-jit` leaves device code; `None` without clang-22.
pub fn opencl_bitcode(target: &str, source: &str) -> Option<Vec<u8>> {
    opencl(target, source, &["-emit-llvm", "-c"])
}

fn opencl(target: &str, source: &str, extra: &[&str]) -> Option<Vec<u8>> {
    let clang = clang()?;
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch().join(format!("cl-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("k.cl");
    std::fs::write(&src, source).unwrap();
    let out = dir.join("k.out");
    run(
        Command::new(clang)
            .args(["-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa"])
            .args(["-nogpulib", "-O2"])
            .arg(format!("-mcpu={target}"))
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg(&src),
        "building OpenCL C for an AMD GPU",
    );
    Some(std::fs::read(out).unwrap())
}

/// A code object for `target` whose global `int mark` starts at `mark`:
/// which image of a bundle a GPU loaded. `None` without clang-22.
pub fn marked_code_object(target: &str, mark: i32) -> Option<Vec<u8>> {
    opencl_code_object(
        target,
        &format!("__attribute__((visibility(\"protected\"))) global int mark = {mark};"),
    )
}
