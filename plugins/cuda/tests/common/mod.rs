//! Shared by the CUDA plugin's tests: clang-22, the fake driver, PTX and
//! synthetic cubin/fatbinary fixtures.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// clang-22, or None (the test is skipped) — except under `CI=true`, where
/// a missing compiler fails the test.
#[allow(unused_imports)] // each test file uses what it needs
pub use test_support::clang;

/// A directory that lives as long as the test process.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temporary directory"))
        .path()
}

/// The fake driver built as `libcuda.so.1` in a temporary directory.
pub fn fake_driver() -> Option<PathBuf> {
    static LIB: OnceLock<Option<PathBuf>> = OnceLock::new();
    LIB.get_or_init(|| build_fake_driver("fake", &[])).clone()
}

/// The fake driver built with extra `defines` (`-DNAME`), in its own
/// directory `name` of the scratch directory.
pub fn build_fake_driver(name: &str, defines: &[&str]) -> Option<PathBuf> {
    let clang = clang()?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_cuda/fake_cuda.c");
    let dir = scratch().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("libcuda.so.1");
    let o = Command::new(clang)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg(&src)
        .arg("-lpthread")
        .output()
        .expect("running clang-22");
    assert!(
        o.status.success(),
        "building the fake driver failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(out)
}

/// `saxpy(int n, float a, const float *x, float *y)`'s parameters packed
/// as CUDA lays them out (each at its natural alignment).
pub fn saxpy_args(
    n: i32,
    a: f32,
    x: offload_core::DevicePtr,
    y: offload_core::DevicePtr,
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&n.to_ne_bytes());
    b.extend_from_slice(&a.to_ne_bytes());
    b.extend_from_slice(&x.0.to_ne_bytes());
    b.extend_from_slice(&y.0.to_ne_bytes());
    b
}

/// `source` compiled by clang-22 for `sm` as PTX text.
pub fn ptx(source: &str, sm: &str) -> Option<Vec<u8>> {
    nvptx(source, sm, "k.ptx", &["-S"])
}

/// `source` compiled by clang-22 for `sm` as LLVM bitcode (what the
/// runtime's JIT turns into PTX).
pub fn bitcode(source: &str, sm: &str) -> Option<Vec<u8>> {
    nvptx(source, sm, "k.bc", &["-emit-llvm", "-c"])
}

fn nvptx(source: &str, sm: &str, out_name: &str, emit: &[&str]) -> Option<Vec<u8>> {
    let clang = clang()?;
    let n = {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    };
    let dir = scratch().join(format!("ptx{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("k.c");
    std::fs::write(&c, source).unwrap();
    let out = dir.join(out_name);
    let o = Command::new(clang)
        .args([
            "--target=nvptx64-nvidia-cuda",
            &format!("-march={sm}"),
            "-Xclang",
            "-target-feature",
            "-Xclang",
            if sm.starts_with("sm_9") || sm.starts_with("sm_1") {
                "+ptx80"
            } else {
                "+ptx78"
            },
            "-nogpulib",
            "-ffreestanding",
            "-O2",
        ])
        .args(emit)
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .output()
        .expect("running clang-22");
    assert!(
        o.status.success(),
        "clang-22 failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(std::fs::read(out).unwrap())
}

/// The kernels the fake driver can run, as C for clang-22's NVPTX target.
pub const KERNELS_C: &str = r#"
#include <gpuintrin.h>
int counter;
double table[4];
__gpu_kernel void saxpy(int n, float a, const float *x, float *y) {
  int i = __gpu_block_id_x() * __gpu_num_threads_x() + __gpu_thread_id_x();
  if (i < n) y[i] = a * x[i] + y[i];
}
__gpu_kernel void reduce(const int *in, int n, long long *out) {
  if (__gpu_block_id_x() == 0 && __gpu_thread_id_x() == 0) {
    long long s = 0;
    for (int i = 0; i < n; i++) s += in[i];
    *out = s;
    counter++;
  }
}
"#;

/// A minimal 64-bit cubin header: ELF, `EM_CUDA`, the SM in `e_flags`
/// (ABI version 7: low byte; 8: bits 8-15), no sections.
pub fn cubin(sm: u32, abi_version: u8, arch_specific: bool) -> Vec<u8> {
    let mut e = vec![0u8; 64];
    e[..4].copy_from_slice(b"\x7fELF");
    e[4] = 2; // ELFCLASS64
    e[5] = 1; // little-endian
    e[6] = 1; // EV_CURRENT
    e[7] = 0x33; // ELFOSABI_CUDA
    e[8] = abi_version;
    e[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e[18..20].copy_from_slice(&190u16.to_le_bytes()); // EM_CUDA
    e[20..24].copy_from_slice(&1u32.to_le_bytes());
    let flags = if abi_version >= 8 {
        (sm << 8) | if arch_specific { 0x8 } else { 0 } | 0x0600_0000
    } else {
        sm | 0x400 | if arch_specific { 0x800 } else { 0 } // EF_CUDA_64BIT_ADDRESS
    };
    e[48..52].copy_from_slice(&flags.to_le_bytes());
    e[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    e[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    e[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    e
}

/// A fatbinary holding `entries`: (kind 1 = PTX / 2 = cubin, SM, payload).
pub fn fatbin(entries: &[(u16, u32, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, sm, payload) in entries {
        let padded = payload.len().div_ceil(8) * 8;
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[28..32].copy_from_slice(&sm.to_le_bytes());
        h[40..48].copy_from_slice(&0x11u64.to_le_bytes()); // 64-bit, Linux
        body.extend_from_slice(&h);
        body.extend_from_slice(payload);
        body.resize(body.len() + padded - payload.len(), 0);
    }
    let mut f = Vec::new();
    f.extend_from_slice(&0xBA55_ED50u32.to_le_bytes());
    f.extend_from_slice(&1u16.to_le_bytes());
    f.extend_from_slice(&16u16.to_le_bytes());
    f.extend_from_slice(&(body.len() as u64).to_le_bytes());
    f.extend_from_slice(&body);
    f
}

/// Typed copies to and from device memory, as the tests share them.
#[allow(unused_imports)] // not every test binary of this folder copies values
pub use test_support::device::{read_values as read, write_values as write};
