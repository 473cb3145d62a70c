//! OpenMP interop objects on our runtime (tests/interop/): C programs built
//! with clang-22 that check property values and return codes, the offload
//! table (`include/offload/interop.h`) and `interop use/destroy` ordering.
//!
//! These are not compared with LLVM's runtime: on its host-plugin devices
//! LLVM 22's libomptarget makes no interop object (`init` leaves
//! `omp_interop_none`) and then crashes (SIGSEGV) in the first
//! `omp_get_interop_*` call, which dereferences the NULL object. Each
//! program checks itself (exit status 0, last line `OK`) and its stdout must
//! equal the `.expected` file next to it (4 host devices).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const LLVM_LIB: &str = "/usr/lib/llvm-22/lib";
const LLVM_OFFLOAD_INCLUDE: &str = "/usr/lib/llvm-22/include/offload";

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn have_toolchain() -> bool {
    let ok = Command::new("clang-22").arg("--version").output().is_ok()
        && Path::new(LLVM_LIB).join("libomp.so.5").exists()
        && Path::new(LLVM_OFFLOAD_INCLUDE)
            .join("OffloadAPI.h")
            .exists();
    test_support::require(ok, "clang-22, libomp or OffloadAPI.h (LLVM 22)")
}

struct Built {
    dir: PathBuf,
    lib_dir: PathBuf,
}

fn checked(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile = exe.parent().unwrap().parent().unwrap();
        let lib = profile.join("libomptarget.so");
        assert!(lib.exists(), "cdylib not found at {}", lib.display());
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("omptarget-interop");
        let lib_dir = dir.join("lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        let link = lib_dir.join("libomptarget.so.22.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
        checked(
            Command::new("clang-22")
                .args(["-O2", "-fPIC", "-shared", "-Wall", "-Werror", "-I"])
                .arg(&include)
                .arg(src_dir().join("interop_kernels.c"))
                .arg("-o")
                .arg(dir.join("interop_kernels.so")),
        );
        for p in ["interop_props", "interop_table"] {
            checked(
                Command::new("clang-22")
                    .args([
                        "-fopenmp",
                        "-fopenmp-targets=x86_64-unknown-linux-gnu",
                        "-O1",
                        "-g",
                        "-Wall",
                        "-Werror",
                        "-I",
                    ])
                    .arg(&include)
                    .arg("-I")
                    .arg(LLVM_OFFLOAD_INCLUDE)
                    .arg(src_dir().join(format!("{p}.c")))
                    .arg("-o")
                    .arg(dir.join(p)),
            );
        }
        Built { dir, lib_dir }
    })
}

fn run(program: &str, host_devices: &str) -> Output {
    run_with(program, host_devices, &[])
}

fn run_with(program: &str, host_devices: &str, env: &[(&str, &str)]) -> Output {
    let b = built();
    let mut cmd = Command::new(b.dir.join(program));
    if program == "interop_table" {
        cmd.arg(b.dir.join("interop_kernels.so"));
    }
    cmd.env(
        "LD_LIBRARY_PATH",
        format!("{}:{LLVM_LIB}", b.lib_dir.display()),
    )
    .env("OFFLOAD_HOST_DEVICES", host_devices)
    .env_remove("OFFLOAD_PLUGINS")
    .env_remove("OFFLOAD_REMOTE")
    .env_remove("OMP_TARGET_OFFLOAD")
    .env_remove("LIBOMPTARGET_INFO");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn assert_ok(program: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "{program} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(!stdout.contains("FAIL"), "{program}:\n{stdout}");
    stdout
}

fn check_expected(program: &str) {
    if !have_toolchain() {
        return;
    }
    let out = run(program, "4");
    let stdout = assert_ok(program, &out);
    let expected = std::fs::read_to_string(src_dir().join(format!("{program}.expected"))).unwrap();
    assert_eq!(
        stdout, expected,
        "{program}: stdout differs from the expected output"
    );
}

#[test]
fn properties_return_codes_and_ordering() {
    check_expected("interop_props");
}

#[test]
fn properties_with_one_device() {
    if !have_toolchain() {
        return;
    }
    let out = run("interop_props", "1");
    let stdout = assert_ok("interop_props", &out);
    assert!(
        stdout.starts_with("devices: 1, initial device 1\n"),
        "{stdout}"
    );
}

#[test]
fn offload_table_with_openmp_memory() {
    check_expected("interop_table");
}

/// The same program, unchanged, with only the remote plugin: the table,
/// the target regions and omp_target_alloc all reach the server's devices
/// through one runtime (one session), so memory from either face is valid
/// for the other.
#[test]
fn offload_table_on_a_remote_server() {
    if !have_toolchain() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let offload = exe.parent().unwrap().parent().unwrap().join("offload");
    assert!(offload.exists(), "{} not built", offload.display());
    let mut server = Command::new(&offload)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("OFFLOAD_HOST_DEVICES", "4")
        .env_remove("OFFLOAD_REMOTE_TOKEN")
        .env_remove("OFFLOAD_PLUGINS")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    let out = run_with(
        "interop_table",
        "4",
        &[("OFFLOAD_PLUGINS", "remote"), ("OFFLOAD_REMOTE", &addr)],
    );
    let _ = server.kill();
    let _ = server.wait();
    let stdout = assert_ok("interop_table (remote)", &out);
    let expected = std::fs::read_to_string(src_dir().join("interop_table.expected")).unwrap();
    assert_eq!(stdout, expected, "remote run differs from the local one");
}

/// Linking liboffload's code into libomptarget exports none of it: the
/// dynamic symbols are LLVM 22's 81 plus the three interop routines that
/// libomp forwards to (by dlsym) but LLVM's libomptarget lacks.
#[test]
fn exports_are_llvms_plus_interop_routines() {
    if !have_toolchain() {
        return;
    }
    let list = |lib: &Path| {
        let out = Command::new("nm")
            .args(["-D", "--defined-only", "--with-symbol-versions"])
            .arg(lib)
            .output()
            .unwrap();
        assert!(out.status.success());
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
            .collect();
        v.sort();
        v
    };
    let ours = list(&built().lib_dir.join("libomptarget.so.22.1"));
    let mut expected = list(&Path::new(LLVM_LIB).join("libomptarget.so.22.1"));
    assert_eq!(expected.len(), 81);
    for extra in [
        "omp_get_interop_rc_desc",
        "omp_get_interop_rec_desc",
        "omp_get_num_interop_properties",
    ] {
        expected.push(format!("{extra}@@VERS1.0"));
    }
    expected.sort();
    assert_eq!(ours, expected);
    let soname = Command::new("readelf")
        .arg("-d")
        .arg(built().lib_dir.join("libomptarget.so.22.1"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&soname.stdout).contains("[libomptarget.so.22.1]"));
}
