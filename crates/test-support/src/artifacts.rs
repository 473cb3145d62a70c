//! The workspace's own build outputs (the `offload` executable, the drop-in
//! libraries), found beside the running test.
//!
//! Cargo sets `CARGO_BIN_EXE_<name>` only for the tests of the package that
//! builds the binary. Any test finds them in its own target directory
//! instead: a test runs as `<target>/<profile>/deps/<test>-<hash>`, and
//! cargo puts binaries and cdylibs in `<target>/<profile>/`.
//!
//! `cargo test --workspace` (CI, `scripts/test.sh`) builds them before any
//! test runs. A test run alone (`cargo test -p offload-plugin-remote`)
//! builds what is missing once per test process with `cargo build` (cargo
//! holds no lock on the target directory while tests run, and its own lock
//! makes two test processes that build at once take turns). Under
//! `CI=true` a missing output is a failure that names the command instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::under_ci;

/// `<target>/<profile>`: where cargo put the running test's executable's
/// binaries and cdylibs.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's own path");
    let dir = exe.parent().expect("the test executable's folder");
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps" | "examples") => dir.parent().unwrap_or(dir).to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// `cargo build` of `packages` (cargo arguments such as `-p offload-cli
/// --bin offload`) into the target directory and profile of `dir`, as
/// program and arguments.
fn build_command(dir: &Path, packages: &[&str]) -> (PathBuf, Vec<String>) {
    let cargo = std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    let mut args: Vec<String> = vec!["build".into()];
    args.extend(packages.iter().map(|a| a.to_string()));
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => args.push("--release".into()),
        Some(other) => args.extend(["--profile".into(), other.into()]),
    }
    if let Some(target) = dir.parent() {
        args.extend(["--target-dir".into(), target.display().to_string()]);
    }
    args.extend([
        "--manifest-path".into(),
        root.join("Cargo.toml").display().to_string(),
    ]);
    (cargo, args)
}

/// `<target>/<profile>/<file>` for each of `files`, built first with `cargo
/// build PACKAGES...` when any is missing (once per process; a failure
/// names the command). Under `CI=true` a missing file fails the test.
pub fn built(files: &[&str], packages: &[&str]) -> Vec<PathBuf> {
    let dir = profile_dir();
    let paths: Vec<PathBuf> = files.iter().map(|f| dir.join(f)).collect();
    let missing = || paths.iter().filter(|p| !p.exists()).collect::<Vec<_>>();
    if missing().is_empty() {
        return paths;
    }
    let (cargo, args) = build_command(&dir, packages);
    let shown = format!("cargo {}", args.join(" "));
    assert!(
        !under_ci(),
        "CI=true: {:?} missing (`cargo test --workspace` builds them first); run: {shown}",
        missing()
    );
    // One build at a time in this process; the next caller finds the files.
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    if !missing().is_empty() {
        eprintln!("{:?} missing: running {shown}", missing());
        let status = Command::new(&cargo).args(&args).status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()) && missing().is_empty(),
            "{:?} still missing after `{shown}` ({status:?}); run it yourself",
            missing()
        );
    }
    paths
}

/// The workspace's `offload` executable (`offload serve`, `offload exec`).
pub fn offload_bin() -> PathBuf {
    let name = format!("offload{}", std::env::consts::EXE_SUFFIX);
    built(&[&name], &["-p", "offload-cli", "--bin", "offload"]).remove(0)
}

/// The folder holding the drop-in libraries (`libomptarget.so`,
/// `libLLVMOffload.so`) beside `offload`, which `offload exec` runs
/// programs on.
pub fn drop_in_libraries() -> PathBuf {
    let libs = built(
        &["libomptarget.so", "libLLVMOffload.so"],
        &["-p", "omptarget", "-p", "liboffload"],
    );
    libs[0].parent().expect("the profile folder").to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_dir_holds_the_test_and_builds_into_its_target() {
        let dir = profile_dir();
        let exe = std::env::current_exe().unwrap();
        assert!(exe.starts_with(&dir), "{exe:?} outside {dir:?}");
        let (_, args) = build_command(&dir, &["-p", "x"]);
        assert_eq!(&args[..3], ["build", "-p", "x"]);
        let target = dir.parent().unwrap().display().to_string();
        assert!(
            args.windows(2).any(|w| w == ["--target-dir", &*target]),
            "{args:?}"
        );
        let (_, release) = build_command(Path::new("/t/release"), &[]);
        assert!(release.contains(&"--release".to_string()), "{release:?}");
    }
}
