//! `offload lib-dir`: the directory holding the drop-in shared libraries.
//!
//! The cdylibs are built as `libomptarget.so` and `libLLVMOffload.so` in the
//! cargo target directory next to the `offload` executable. Programs linked
//! against LLVM's libraries ask for the sonames `libomptarget.so.22.1` and
//! `libLLVMOffload.so.22.1`, so the lib dir, `<exe dir>/offload-lib/`, holds
//! relative symlinks:
//!
//! ```text
//! offload-lib/libomptarget.so.22.1   -> ../libomptarget.so
//! offload-lib/libomptarget.so        -> libomptarget.so.22.1
//! offload-lib/libLLVMOffload.so.22.1 -> ../libLLVMOffload.so
//! offload-lib/libLLVMOffload.so      -> libLLVMOffload.so.22.1
//! ```
//!
//! They are (re)created on every call, each by renaming a freshly made
//! temporary link over the old one, so concurrent callers never see a
//! missing link.
//!
//! An installed `offload` (`scripts/install.sh`, the Debian package) finds
//! its libraries relative to itself, in `<exe dir>/../lib/offload/`, and
//! creates nothing. `OFFLOAD_LIB_DIR` names a ready-made directory instead
//! (used as is). Wherever they are looked for, a directory without both
//! libraries is an error: running a program anyway would silently give it
//! LLVM's runtime.

use std::io;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::output;

#[derive(clap::Args, Debug)]
pub struct Args {}

/// Name of the lib dir inside the executable's directory.
pub const LIB_DIR_NAME: &str = "offload-lib";

/// The drop-in libraries: (file built by cargo, soname).
pub const LIBRARIES: [(&str, &str); 2] = [
    ("libomptarget.so", "libomptarget.so.22.1"),
    ("libLLVMOffload.so", "libLLVMOffload.so.22.1"),
];

/// The lib dir and whether any drop-in library is available in it.
#[derive(Debug)]
pub struct LibDir {
    pub path: PathBuf,
    pub libraries_found: usize,
}

/// Points `link` at `target`, atomically replacing whatever is there.
fn replace_symlink(target: &Path, link: &Path) -> anyhow::Result<()> {
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let dir = link.parent().unwrap_or(Path::new("."));
    let name = link.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .with_context(|| format!("cannot create symlink {}", tmp.display()))?;
    if let Err(e) = std::fs::rename(&tmp, link) {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow::Error::new(e).context(format!(
            "cannot replace {} with a symlink to {}",
            link.display(),
            target.display()
        )));
    }
    Ok(())
}

/// Removes `link` if it is a symlink pointing at `target` (a stale link of
/// ours); anything else is left alone.
fn remove_own_link(target: &Path, link: &Path) {
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        let _ = std::fs::remove_file(link);
    }
}

/// Creates `exe_dir/offload-lib` and its links for the libraries present in
/// `exe_dir`.
pub fn populate(exe_dir: &Path) -> anyhow::Result<LibDir> {
    let dir = exe_dir.join(LIB_DIR_NAME);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("cannot create directory {}", dir.display()))
            )
        }
    }
    let mut found = 0;
    for (lib, soname) in LIBRARIES {
        let up = Path::new("..").join(lib);
        let soname_link = dir.join(soname);
        let dev_link = dir.join(lib);
        if exe_dir.join(lib).is_file() {
            replace_symlink(&up, &soname_link)?;
            replace_symlink(Path::new(soname), &dev_link)?;
            found += 1;
        } else {
            // The library was removed (cargo clean): drop our dangling links.
            remove_own_link(&up, &soname_link);
            remove_own_link(Path::new(soname), &dev_link);
        }
    }
    Ok(LibDir {
        path: dir,
        libraries_found: found,
    })
}

/// Where an installed `offload` keeps the libraries, relative to its
/// executable's directory.
pub const INSTALLED_LIB_DIR: &str = "../lib/offload";

/// How many drop-in libraries (by soname) `dir` holds.
fn count_sonames(dir: &Path) -> usize {
    LIBRARIES
        .iter()
        .filter(|(_, soname)| dir.join(soname).is_file())
        .count()
}

/// The lib dir for this executable, as described in the module docs. Errors
/// when it does not hold both libraries.
pub fn ensure() -> anyhow::Result<LibDir> {
    let dir = locate()?;
    if dir.libraries_found < LIBRARIES.len() {
        let missing: Vec<&str> = LIBRARIES
            .iter()
            .map(|(_, soname)| *soname)
            .filter(|soname| !dir.path.join(soname).is_file())
            .collect();
        bail!(
            "{} is missing from {}: build the libraries (`cargo build --release -p omptarget -p liboffload`), \
             install them (scripts/install.sh) or set OFFLOAD_LIB_DIR",
            missing.join(" and "),
            dir.path.display()
        );
    }
    Ok(dir)
}

/// The directory of the running `offload` executable (symlinks resolved):
/// `target/<profile>` in the build tree, `<prefix>/bin` when installed.
pub fn exe_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the offload executable")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    exe.parent()
        .map(Path::to_path_buf)
        .with_context(|| format!("{} has no parent directory", exe.display()))
}

fn locate() -> anyhow::Result<LibDir> {
    if let Some(v) = std::env::var_os("OFFLOAD_LIB_DIR").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(v);
        if !path.is_dir() {
            bail!("OFFLOAD_LIB_DIR={} is not a directory", path.display());
        }
        let libraries_found = count_sonames(&path);
        return Ok(LibDir {
            path,
            libraries_found,
        });
    }
    let exe_dir = exe_dir()?;
    let exe_dir = exe_dir.as_path();
    let installed = exe_dir.join(INSTALLED_LIB_DIR);
    let libraries_found = count_sonames(&installed);
    if libraries_found > 0 {
        let path = installed.canonicalize().unwrap_or(installed);
        return Ok(LibDir {
            path,
            libraries_found,
        });
    }
    populate(exe_dir)
}

pub fn run(_args: Args) -> anyhow::Result<()> {
    let dir = ensure()?;
    output::emit(&format!("{}\n", dir.path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_follow_the_libraries() {
        let t = tempfile::tempdir().unwrap();
        let d = populate(t.path()).unwrap();
        assert_eq!(d.libraries_found, 0);
        assert!(d.path.is_dir());

        std::fs::write(t.path().join("libomptarget.so"), b"x").unwrap();
        let d = populate(t.path()).unwrap();
        assert_eq!(d.libraries_found, 1);
        assert_eq!(
            std::fs::read_link(d.path.join("libomptarget.so.22.1")).unwrap(),
            Path::new("../libomptarget.so")
        );
        assert_eq!(
            std::fs::read_link(d.path.join("libomptarget.so")).unwrap(),
            Path::new("libomptarget.so.22.1")
        );
        assert_eq!(std::fs::read(d.path.join("libomptarget.so")).unwrap(), b"x");
        assert!(!d.path.join("libLLVMOffload.so.22.1").exists());

        // Idempotent, and stale links go away with their library.
        populate(t.path()).unwrap();
        std::fs::remove_file(t.path().join("libomptarget.so")).unwrap();
        let d = populate(t.path()).unwrap();
        assert_eq!(d.libraries_found, 0);
        assert!(std::fs::read_link(d.path.join("libomptarget.so.22.1")).is_err());
        assert_eq!(std::fs::read_dir(&d.path).unwrap().count(), 0);
    }
}
