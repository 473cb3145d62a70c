//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// `source` compiled by clang-22 with `args` (the host-kernel header on
/// the include path); the output's bytes.
pub fn compile(dir: &Path, name: &str, source: &str, args: &[&str]) -> Vec<u8> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let ok = Command::new("clang-22")
        .args(args)
        .arg("-I")
        .arg(root.join("../../include"))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("clang-22 (scripts/setup.sh installs it)")
        .success();
    assert!(ok, "clang-22 {args:?} on {name}");
    std::fs::read(out).unwrap()
}

/// The demo kernels (`examples/kernels/demo_kernels.c`) as a host-kernel
/// shared object.
pub fn demo_kernels() -> Vec<u8> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root.join("examples/kernels/demo_kernels.c")).unwrap();
    compile(dir.path(), "k.so", &text, &["-O1", "-fPIC", "-shared"])
}

#[allow(unused_imports)] // each test file uses what it needs
pub use test_support::skip;
