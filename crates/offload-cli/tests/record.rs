//! `offload record` + `offload replay --verify`: an OpenMP program (word
//! arguments, a declare-target global) and an ol* program (packed
//! arguments, queues) recorded on a host device, replayed on the same
//! device, another host device (both at the recorded addresses) and a
//! remote server (relocated); a kernel following a pointer stored in device
//! memory; a tampered recording fails verification.

mod common;
use common::text;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const OFFLOAD: &str = env!("CARGO_BIN_EXE_offload");

fn clang(args: &[&str], out: &Path) {
    let o = Command::new("clang-22")
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .expect("clang-22 (scripts/setup.sh installs it)");
    assert!(
        o.status.success(),
        "clang-22 {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `tests/record/NAME.c` built as an OpenMP offload program in `dir`.
fn build_openmp(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let src = root().join(format!("crates/offload-cli/tests/record/{name}.c"));
    clang(
        &[
            "-fopenmp",
            "-fopenmp-targets=x86_64-unknown-linux-gnu",
            "-O1",
            src.to_str().unwrap(),
        ],
        &exe,
    );
    exe
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn offload(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(OFFLOAD)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("OFFLOAD_RECORD")
        .env("OFFLOAD_HOST_DEVICES", "2")
        .output()
        .unwrap()
}

/// Replays `rec` with `env` and `extra` arguments; asserts it verified.
fn replay_verified(rec: &Path, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut args = vec!["replay", rec.to_str().unwrap(), "--verify"];
    args.extend(extra);
    let out = offload(&args, env);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(stdout.contains("verify: OK"), "{stdout}");
    stdout
}

fn record(rec: &Path, program: &[&str], kernels: &[&str]) {
    let mut args = vec!["record", "-o", rec.to_str().unwrap()];
    for k in kernels {
        args.extend(["--kernel", k]);
    }
    args.push("--");
    args.extend(program);
    let out = offload(&args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let launches = std::fs::read_dir(rec).unwrap().count();
    assert!(launches >= 1, "nothing recorded:\n{}", text(&out));
}

/// A server to replay on; killed when dropped.
struct Server(std::process::Child, String);

impl Server {
    fn start() -> Server {
        let mut child = Command::new(OFFLOAD)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("OFFLOAD_HOST_DEVICES", "1")
            .env_remove("OFFLOAD_REMOTE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        Server(child, addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn openmp_launches_replay_anywhere_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_openmp(dir.path(), "omp_global");
    let rec = dir.path().join("rec");
    record(&rec, &[exe.to_str().unwrap()], &[]);
    let launch = std::fs::read_dir(&rec)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let manifest = std::fs::read_to_string(launch.join("launch.json")).unwrap();
    assert!(
        manifest.contains("\"name\": \"scale\""),
        "the global is named:\n{manifest}"
    );

    let here = replay_verified(&rec, &[], &[]);
    assert!(here.contains("1 global(s) by name"), "{here}");
    replay_verified(&rec, &["--device", "1", "--repeat", "3"], &[]);
    let server = Server::start();
    let remote = replay_verified(
        &rec,
        &[],
        &[
            ("OFFLOAD_PLUGINS", "remote"),
            ("OFFLOAD_REMOTE", server.1.as_str()),
        ],
    );
    assert!(remote.contains("remote:"), "{remote}");

    // Tampered input: the kernel computes other bytes than recorded.
    let before = std::fs::read_dir(&launch)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "before")
                && std::fs::metadata(p).map(|m| m.len()).unwrap_or(0) == 2048
        })
        .expect("the 2 KiB array `a`");
    let mut bytes = std::fs::read(&before).unwrap();
    bytes[0] ^= 0x55;
    std::fs::write(&before, bytes).unwrap();
    let out = offload(&["replay", rec.to_str().unwrap(), "--verify"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("verify: FAILED"),
        "{}",
        text(&out)
    );
}

/// `record` says how many launches it recorded and where, refuses a
/// non-empty directory unless `--force` (which replaces the recording),
/// and fails when `--kernel` matched nothing; `replay` sums up.
#[test]
fn record_summary_force_and_unmatched_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_openmp(dir.path(), "omp_global");
    let exe = exe.to_str().unwrap();
    let rec = dir.path().join("rec");
    let rec_s = rec.to_str().unwrap();
    let out = offload(&["record", "-o", rec_s, "--", exe], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let n = std::fs::read_dir(&rec).unwrap().count();
    let line = format!("offload record: recorded {n} launch");
    assert!(n >= 1 && text(&out).contains(&line), "{}", text(&out));
    assert!(text(&out).contains(rec_s), "{}", text(&out));

    // An existing recording is refused, then replaced with --force.
    let out = offload(&["record", "-o", rec_s, "--", exe], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("--force"), "{}", text(&out));
    assert_eq!(std::fs::read_dir(&rec).unwrap().count(), n);
    let out = offload(&["record", "--force", "-o", rec_s, "--", exe], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_dir(&rec).unwrap().count(),
        n,
        "replaced, not appended"
    );
    // --force never deletes what is not a recording.
    std::fs::write(rec.join("notes.txt"), "mine").unwrap();
    let out = offload(&["record", "--force", "-o", rec_s, "--", exe], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(rec.join("notes.txt").exists());

    let none = dir.path().join("none");
    let out = offload(
        &[
            "record",
            "-o",
            none.to_str().unwrap(),
            "--kernel",
            "no_such_kernel",
            "--",
            exe,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("recorded 0 launches")
            && text(&out).contains("--kernel no_such_kernel matched no launch"),
        "{}",
        text(&out)
    );

    std::fs::remove_file(rec.join("notes.txt")).unwrap();
    let out = offload(&["replay", rec_s, "--verify"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let want = format!("offload replay: replayed {n} launch");
    assert!(
        text(&out).contains(&want) && text(&out).contains("all verified"),
        "{}",
        text(&out)
    );
}

#[test]
fn ol_launches_replay_with_packed_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let tests_c = root().join("crates/liboffload/tests/c");
    let kernels = dir.path().join("kernels.so");
    clang(
        &[
            "-O2",
            "-fPIC",
            "-shared",
            "-I",
            root().join("include").to_str().unwrap(),
            tests_c.join("kernels.c").to_str().unwrap(),
        ],
        &kernels,
    );
    // The drop-in libLLVMOffload.so of this build, to link against.
    let lib = Path::new(OFFLOAD)
        .parent()
        .unwrap()
        .join("libLLVMOffload.so");
    assert!(lib.exists(), "build the workspace first: {}", lib.display());
    let lib_dir = dir.path().join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    std::os::unix::fs::symlink(&lib, lib_dir.join("libLLVMOffload.so")).unwrap();
    let e2e = dir.path().join("e2e");
    clang(
        &[
            "-O2",
            "-I",
            "/usr/lib/llvm-22/include/offload",
            "-I",
            tests_c.to_str().unwrap(),
            tests_c.join("e2e.c").to_str().unwrap(),
            "-L",
            lib_dir.to_str().unwrap(),
            "-lLLVMOffload",
            "-lpthread",
        ],
        &e2e,
    );
    let rec = dir.path().join("rec");
    record(
        &rec,
        &[e2e.to_str().unwrap(), kernels.to_str().unwrap()],
        &["saxpy"],
    );
    // Two saxpy launches (queued, then synchronous), both verified.
    let out = replay_verified(&rec, &["--device", "1"], &[]);
    assert_eq!(out.matches("kernel saxpy").count(), 2, "{out}");
    assert!(out.contains("memory at the recorded addresses"), "{out}");
    // Group-size override for tuning still computes the same result.
    replay_verified(&rec, &["--threads", "64"], &[]);
    // And on a remote server's device.
    let server = Server::start();
    let remote = replay_verified(
        &rec,
        &[],
        &[
            ("OFFLOAD_PLUGINS", "remote"),
            ("OFFLOAD_REMOTE", server.1.as_str()),
        ],
    );
    assert_eq!(remote.matches("remote:").count(), 2, "{remote}");
    // A server cannot place memory at chosen addresses: the ranges move
    // and the argument pointers follow.
    assert_eq!(remote.matches("relocated").count(), 2, "{remote}");
}

/// A kernel that follows a pointer stored in device memory (an attached
/// struct member): replayed at the recorded addresses, it finds its data.
#[test]
fn pointers_inside_device_memory_stay_valid_on_replay() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_openmp(dir.path(), "omp_pointer");
    let rec = dir.path().join("rec");
    record(&rec, &[exe.to_str().unwrap()], &[]);
    for device in ["0", "1"] {
        let out = replay_verified(&rec, &["--device", device, "--repeat", "2"], &[]);
        assert!(out.contains("memory at the recorded addresses"), "{out}");
    }
}
