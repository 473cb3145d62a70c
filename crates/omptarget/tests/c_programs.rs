//! Builds each program under tests/c with clang-22 for the x86_64 host
//! offload target and runs it twice: on LLVM's libomptarget.so.22.1 and on
//! ours. Stdout and exit status must match; error cases compare the key
//! stderr lines, and files marked `COMPARE-STDERR` compare all of stderr
//! after normalising addresses.
//!
//! Directives (comment lines at the top of a test file):
//! `// ENV: K=V ...`, `// ENV-VARIANTS: K=V | K=V`, `// ARGS: a b c` (one run
//! per argument), `// CXX`, `// SHARED: lib.c`, `// COMPARE-STDERR`,
//! `// NO-REMOTE: reason` (skipped in remote mode), `// KNOWN-DIFF: reason`
//! (a known difference from LLVM: its test is `#[ignore]`d with that reason
//! below; `cargo test -- --ignored` runs it), `// OFFLOAD-ARCH: gfx90a` (build
//! the device code for that GPU only, with `-nogpulib`; the image is never
//! run, so its unresolved device-runtime symbols are left unresolved: a
//! program whose images no device here can run).
//!
//! Where LLVM's runtime itself misbehaves, a program states our intended
//! behaviour instead of comparing: `// OURS-ONLY: why LLVM differs` runs it
//! on our runtime only, against `// EXPECT: line` (stdout, in order, after
//! normalising addresses), `// EXPECT-EXIT: 134` (default 0) and
//! `// EXPECT-STDERR: text` (exactly one stderr line contains `text`).
//!
//! Without clang-22 or LLVM's runtime the programs are skipped with a note,
//! except under `CI=true`, where that is a failure (`test_support::require`).
//!
//! Remote mode: with `OFFLOAD_TEST_REMOTE=HOST:PORT` our runs use only the
//! remote plugin against that `offload serve` (token from
//! `OFFLOAD_REMOTE_TOKEN`), so every target region runs in the server
//! process, and the output must still equal LLVM's local run.
//!
//! MPI mode: with `OFFLOAD_TEST_MPI=N` (scripts/mpi-tests.sh) our runs use
//! only the mpi plugin and start as `mpirun -np 1 PROGRAM : -np N offload
//! serve --mpi` (the `offload` of `OFFLOAD_TEST_MPI_SERVER`), so every
//! target region runs on a serving rank. Exit statuses must agree on
//! success or failure (mpirun reports a failed rank its own way); stdout
//! must equal LLVM's local run where that succeeds (Open MPI line-buffers
//! stdout, so a failing program's buffered output differs); stderr is not
//! compared (it carries mpirun's and the serving ranks' messages).
//! NO-REMOTE programs are skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const LLVM_LIB: &str = "/usr/lib/llvm-22/lib";

static RUN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// A directory holding `libomptarget.so.22.1` -> our cdylib.
fn our_lib_dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let lib = exe
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("libomptarget.so");
        assert!(lib.exists(), "cdylib not found at {}", lib.display());
        let dir = std::env::temp_dir().join(format!("omptarget-ours-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("libomptarget.so.22.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        dir
    })
}

fn have_clang() -> bool {
    let ok = Command::new("clang-22").arg("--version").output().is_ok()
        && Path::new(LLVM_LIB).join("libomptarget.so.22.1").exists();
    test_support::require(ok, "clang-22 or LLVM 22's libomptarget")
}

struct Spec {
    env: Vec<(String, String)>,
    variants: Vec<Vec<(String, String)>>,
    args: Vec<String>,
    cxx: bool,
    shared: Option<String>,
    compare_stderr: bool,
    no_remote: bool,
    known_diff: Option<String>,
    offload_arch: Option<String>,
    ours_only: Option<String>,
    expect_stdout: Vec<String>,
    expect_exit: Option<i32>,
    expect_stderr: Vec<String>,
}

fn parse_env(s: &str) -> Vec<(String, String)> {
    s.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn spec(text: &str) -> Spec {
    let mut s = Spec {
        env: vec![],
        variants: vec![],
        args: vec![],
        cxx: false,
        shared: None,
        compare_stderr: false,
        no_remote: false,
        known_diff: None,
        offload_arch: None,
        ours_only: None,
        expect_stdout: vec![],
        expect_exit: None,
        expect_stderr: vec![],
    };
    for line in text.lines().take_while(|l| l.starts_with("//")) {
        let l = line.trim_start_matches("//").trim();
        if let Some(v) = l.strip_prefix("ENV-VARIANTS:") {
            s.variants = v.split('|').map(parse_env).collect();
        } else if let Some(v) = l.strip_prefix("ENV:") {
            s.env = parse_env(v);
        } else if let Some(v) = l.strip_prefix("ARGS:") {
            s.args = v.split_whitespace().map(String::from).collect();
        } else if l == "CXX" {
            s.cxx = true;
        } else if let Some(v) = l.strip_prefix("SHARED:") {
            s.shared = Some(v.trim().to_string());
        } else if l == "COMPARE-STDERR" {
            s.compare_stderr = true;
        } else if l.starts_with("NO-REMOTE") {
            s.no_remote = true;
        } else if let Some(v) = l.strip_prefix("KNOWN-DIFF:") {
            s.known_diff = Some(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("OFFLOAD-ARCH:") {
            s.offload_arch = Some(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("OURS-ONLY:") {
            s.ours_only = Some(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("EXPECT-EXIT:") {
            s.expect_exit = Some(v.trim().parse().expect("EXPECT-EXIT: a number"));
        } else if let Some(v) = l.strip_prefix("EXPECT-STDERR:") {
            s.expect_stderr.push(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("EXPECT:") {
            s.expect_stdout.push(v.trim().to_string());
        }
    }
    s
}

fn compile(name: &str, sp: &Spec, out_dir: &Path) -> PathBuf {
    let src = src_dir().join(name);
    let cc = if sp.cxx { "clang++-22" } else { "clang-22" };
    let exe = out_dir.join(name.replace('.', "_"));
    let mut cmd = Command::new(cc);
    match &sp.offload_arch {
        None => cmd.args([
            "-fopenmp",
            "-fopenmp-targets=x86_64-unknown-linux-gnu",
            "-O1",
            "-g",
        ]),
        Some(arch) => cmd
            .args(["-fopenmp", "-O1", "-g", "-nogpulib"])
            .arg(format!("--offload-arch={arch}"))
            .args(["-Xoffload-linker", "--unresolved-symbols=ignore-all"]),
    };
    if let Some(lib) = &sp.shared {
        let so = out_dir.join("libk.so");
        let st = Command::new("clang-22")
            .args([
                "-fopenmp",
                "-fopenmp-targets=x86_64-unknown-linux-gnu",
                "-O1",
                "-g",
            ])
            .args(["-fPIC", "-shared", "-o"])
            .arg(&so)
            .arg(src_dir().join(lib))
            .status()
            .unwrap();
        assert!(st.success(), "building {lib} failed");
        cmd.arg(format!("-L{}", out_dir.display()))
            .arg(format!("-Wl,-rpath,{}", out_dir.display()));
        cmd.arg(&src).arg("-lk");
    } else {
        cmd.arg(&src);
    }
    let st = cmd.arg("-o").arg(&exe).status().unwrap();
    assert!(st.success(), "compiling {name} failed");
    exe
}

struct Run {
    status: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

/// MPI mode: the number of serving ranks (`OFFLOAD_TEST_MPI`).
fn mpi_servers() -> Option<String> {
    std::env::var("OFFLOAD_TEST_MPI")
        .ok()
        .filter(|n| !n.is_empty())
}

fn run(exe: &Path, lib_path: &str, env: &[(String, String)], arg: Option<&str>) -> Run {
    use std::os::unix::process::ExitStatusExt;
    let ours_on_mpi = env
        .iter()
        .any(|(k, v)| k == "OFFLOAD_PLUGINS" && v == "mpi");
    let mut cmd = match mpi_servers().filter(|_| ours_on_mpi) {
        Some(n) => {
            let server = std::env::var("OFFLOAD_TEST_MPI_SERVER")
                .expect("OFFLOAD_TEST_MPI_SERVER: the offload binary");
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "--allow-run-as-root"]);
            // When a rank fails, mpirun sends SIGTERM to the others and
            // then sleeps `odls_base_sigkill_timeout` seconds (default 1,
            // whether or not they are already gone) before SIGKILL. A
            // failing program's serving ranks have nothing left to do:
            // without the sleep its run takes ~0.5 s instead of ~1.5 s
            // (42 failing runs in this suite). The exit status is the same.
            c.args(["--mca", "odls_base_sigkill_timeout", "0", "-np", "1"]);
            c.arg(exe);
            if let Some(a) = arg {
                c.arg(a);
            }
            // As many devices in all as LLVM's host plugin has (4).
            let per_rank = (4 / n.parse::<usize>().unwrap_or(1)).max(1);
            let devices = format!("OFFLOAD_HOST_DEVICES={per_rank}");
            c.args([":", "-np", &n, "env", &devices, &server, "serve", "--mpi"]);
            c.env("OFFLOAD_LOG", "warn");
            c
        }
        None => {
            let mut c = Command::new(exe);
            if let Some(a) = arg {
                c.arg(a);
            }
            c
        }
    };
    cmd.env("LD_LIBRARY_PATH", lib_path);
    cmd.env_remove("LIBOMPTARGET_INFO");
    cmd.env_remove("OMP_TARGET_OFFLOAD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    Run {
        status: o.status.code(),
        signal: o.status.signal(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Replace addresses and kernel ids so both runtimes' output compares.
fn normalise(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        if line.contains("/tmp/tmpfile_") {
            continue;
        }
        // Remote devices' UIDs name their server: `remote:HOST:PORT/x86_64-0`.
        let line = strip_remote_uid(line);
        // MPI devices' UIDs name their rank: `mpi:1/x86_64-0`.
        let line = strip_mpi_uid(&line);
        let mut l = String::new();
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'0' && i + 1 < b.len() && b[i + 1] == b'x' {
                let mut j = i + 2;
                while j < b.len() && b[j].is_ascii_hexdigit() {
                    j += 1;
                }
                l.push_str("PTR");
                i = j;
            } else {
                l.push(b[i] as char);
                i += 1;
            }
        }
        // kernel names carry file ids that differ per build
        let l = match l.find("__omp_offloading_") {
            Some(p) => {
                let rest = &l[p..];
                let end = rest.find(' ').unwrap_or(rest.len());
                format!("{}KERNEL{}", &l[..p], &rest[end..])
            }
            None => l,
        };
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn strip_mpi_uid(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(p) = rest.find("mpi:") {
        out.push_str(&rest[..p]);
        let tail = &rest[p + "mpi:".len()..];
        let digits = tail.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && tail[digits..].starts_with('/') {
            rest = &tail[digits + 1..];
        } else {
            out.push_str("mpi:");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

fn strip_remote_uid(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(p) = rest.find("remote:") {
        out.push_str(&rest[..p]);
        let tail = &rest[p..];
        match tail.find('/') {
            Some(slash) if !tail[..slash].contains(' ') => rest = &tail[slash + 1..],
            _ => {
                out.push_str("remote:");
                rest = &tail["remote:".len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The stderr lines both runtimes must agree on in error cases.
fn key_lines(s: &str) -> Vec<String> {
    normalise(s)
        .lines()
        .filter(|l| l.contains("omptarget") && !l.contains(" info: "))
        .map(String::from)
        .collect()
}

/// A private temporary directory for one run, given to the program as
/// `TMPDIR`: what a run leaves there is that run's, whatever other offload
/// programs on the machine (LLVM's runtime writes `/tmp/tmpfile_*` per
/// image and never removes them) do meanwhile. Removed when dropped.
struct RunTmp(PathBuf);

impl RunTmp {
    fn new(test_dir: &Path) -> RunTmp {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = test_dir.join(format!("tmp-{}", N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&d).unwrap();
        RunTmp(d)
    }

    /// `env` plus `TMPDIR` naming this directory.
    fn env_with(&self, env: &[(String, String)]) -> Vec<(String, String)> {
        let mut e = env.to_vec();
        e.push(("TMPDIR".into(), self.0.display().to_string()));
        e
    }

    /// Temporary files a runtime left behind: LLVM's `tmpfile_*` or ours
    /// (`offload-*`). Other entries (an MPI launcher's session directory)
    /// are not the runtime's.
    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("tmpfile_") || n.starts_with("offload-"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for RunTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn check(name: &str) {
    if !have_clang() {
        return;
    }
    let text = std::fs::read_to_string(src_dir().join(name)).unwrap();
    let sp = spec(&text);
    if let Some(reason) = &sp.known_diff {
        // Its test is #[ignore]d; this runs only under `--ignored`.
        eprintln!("{name}: KNOWN-DIFF: {reason}");
    }
    let remote = std::env::var("OFFLOAD_TEST_REMOTE")
        .ok()
        .filter(|r| !r.is_empty());
    if (remote.is_some() || mpi_servers().is_some()) && sp.no_remote {
        eprintln!("skipping {name} in remote/MPI mode (NO-REMOTE)");
        return;
    }
    let dir = tempfile_dir(name);
    let exe = compile(name, &sp, &dir);
    let ours_path = format!("{}:{LLVM_LIB}", our_lib_dir().display());
    if let Some(why) = &sp.ours_only {
        check_expected(name, why, &sp, &exe, &ours_path, remote.as_deref());
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let args: Vec<Option<&str>> = if sp.args.is_empty() {
        vec![None]
    } else {
        sp.args.iter().map(|a| Some(a.as_str())).collect()
    };
    for env in variant_envs(&sp) {
        for a in &args {
            let ours_tmp = RunTmp::new(&dir);
            let ours = {
                let _g = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
                let mut ours_env = ours_tmp.env_with(&env);
                add_plugin_env(&mut ours_env, remote.as_deref());
                run(&exe, &ours_path, &ours_env, *a)
            };
            let llvm = {
                let llvm_tmp = RunTmp::new(&dir);
                let _g = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
                run(&exe, LLVM_LIB, &llvm_tmp.env_with(&env), *a)
            };
            let what = format!("{name} env={env:?} arg={a:?}");
            let left = ours_tmp.leftovers();
            assert!(
                left.is_empty(),
                "{what}: our run left temporary files behind: {left:?}"
            );
            compare_with_llvm(&what, &sp, &ours, &llvm);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The environment of each variant of a program: its `ENV` plus the
/// variant's (one run without variants).
fn variant_envs(sp: &Spec) -> Vec<Vec<(String, String)>> {
    let variants = if sp.variants.is_empty() {
        vec![vec![]]
    } else {
        sp.variants.clone()
    };
    variants
        .into_iter()
        .map(|v| {
            let mut env = sp.env.clone();
            env.extend(v);
            env
        })
        .collect()
}

/// Our runs go to the remote server or the MPI ranks when the suite runs
/// in that mode.
fn add_plugin_env(env: &mut Vec<(String, String)>, remote: Option<&str>) {
    if let Some(r) = remote {
        env.push(("OFFLOAD_PLUGINS".into(), "remote".into()));
        env.push(("OFFLOAD_REMOTE".into(), r.to_string()));
    } else if mpi_servers().is_some() {
        env.push(("OFFLOAD_PLUGINS".into(), "mpi".into()));
    }
}

/// Our run of a program against LLVM's: exit status, stdout, and stderr
/// (all of it, or the error messages of a failing run).
fn compare_with_llvm(what: &str, sp: &Spec, ours: &Run, llvm: &Run) {
    if mpi_servers().is_some() {
        assert_eq!(
            ours.status == Some(0),
            llvm.status == Some(0),
            "{what}: success differs under mpirun\nours stderr:\n{}\nllvm stderr:\n{}",
            ours.stderr,
            llvm.stderr
        );
        // Open MPI's MPI_Init makes stdout line-buffered: what a
        // failing program had buffered is printed under mpirun.
        if llvm.status == Some(0) {
            assert_eq!(
                normalise(&ours.stdout),
                normalise(&llvm.stdout),
                "{what}: stdout differs under mpirun\nours stderr:\n{}",
                ours.stderr
            );
        }
        return;
    }
    assert_eq!(
        (ours.status, ours.signal),
        (llvm.status, llvm.signal),
        "{what}: exit status differs\nours stderr:\n{}\nllvm stderr:\n{}",
        ours.stderr,
        llvm.stderr
    );
    assert_eq!(
        normalise(&ours.stdout),
        normalise(&llvm.stdout),
        "{what}: stdout differs"
    );
    if sp.compare_stderr {
        assert_eq!(
            normalise(&ours.stderr),
            normalise(&llvm.stderr),
            "{what}: stderr differs"
        );
    } else if llvm.status != Some(0) {
        assert_eq!(
            key_lines(&ours.stderr),
            key_lines(&llvm.stderr),
            "{what}: error messages differ"
        );
    }
}

/// An `OURS-ONLY` program: our runtime against the stated expectations.
fn check_expected(
    name: &str,
    why: &str,
    sp: &Spec,
    exe: &Path,
    ours_path: &str,
    remote: Option<&str>,
) {
    assert!(
        !sp.expect_stdout.is_empty() || !sp.expect_stderr.is_empty(),
        "{name}: OURS-ONLY needs EXPECT lines"
    );
    for mut env in variant_envs(sp) {
        add_plugin_env(&mut env, remote);
        let tmp = RunTmp::new(exe.parent().unwrap());
        let r = {
            let _g = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            run(exe, ours_path, &tmp.env_with(&env), None)
        };
        let what = format!("{name} (ours only: {why}) env={env:?}");
        let left = tmp.leftovers();
        assert!(
            left.is_empty(),
            "{what}: our run left temporary files behind: {left:?}"
        );
        compare_with_expected(&what, sp, &r);
    }
}

/// Our run of an `OURS-ONLY` program against its `EXPECT` lines.
fn compare_with_expected(what: &str, sp: &Spec, r: &Run) {
    let want_exit = sp.expect_exit.unwrap_or(0);
    // Exit 134 is how a shell reports abort(): the process got SIGABRT.
    let got_exit = r.status.or(r.signal.map(|s| 128 + s));
    if mpi_servers().is_some() {
        // mpirun reports failed ranks its own way; stderr carries its
        // and the serving ranks' messages.
        assert_eq!(
            got_exit == Some(0),
            want_exit == 0,
            "{what}: exit status\nstderr:\n{}",
            r.stderr
        );
        if want_exit == 0 {
            let got: Vec<String> = normalise(&r.stdout).lines().map(String::from).collect();
            assert_eq!(
                got, sp.expect_stdout,
                "{what}: stdout\nstderr:\n{}",
                r.stderr
            );
        }
        return;
    }
    assert_eq!(
        got_exit,
        Some(want_exit),
        "{what}: exit status\nstdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let got: Vec<String> = normalise(&r.stdout).lines().map(String::from).collect();
    assert_eq!(
        got, sp.expect_stdout,
        "{what}: stdout\nstderr:\n{}",
        r.stderr
    );
    for want in &sp.expect_stderr {
        let n = r
            .stderr
            .lines()
            .filter(|l| l.contains(want.as_str()))
            .count();
        assert_eq!(
            n, 1,
            "{what}: expected exactly one stderr line containing {want:?}\nstderr:\n{}",
            r.stderr
        );
    }
}

fn tempfile_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "omptarget-test-{}-{}",
        std::process::id(),
        name.replace('.', "_")
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

macro_rules! c_tests {
    ($($(#[$attr:meta])* $t:ident => $f:literal,)*) => {
        $( $(#[$attr])* #[test] fn $t() { check($f); } )*
    };
}

c_tests! {
    basic => "basic.c",
    refcount => "refcount.c",
    err_present => "err_present.c",
    globals => "globals.c",
    structs => "structs.c",
    use_device_ptr => "use_device_ptr.c",
    update_strided => "update_strided.c",
    mapper => "mapper.cpp",
    devmem => "devmem.c",
    threads_nowait => "threads_nowait.c",
    policy => "policy.c",
    shared_lib => "shared_lib.c",
    implicit => "implicit.c",
    reductions => "reductions.c",
    collapse => "collapse.c",
    target_in_parallel => "target_in_parallel.c",
    nested_data => "nested_data.c",
    declare_target_vars => "declare_target_vars.c",
    cxx_classes => "cxx_classes.cpp",
    deep_copy => "deep_copy.c",
    firstprivate_big => "firstprivate_big.c",
    overlap_sections => "overlap_sections.c",
    memcpy_rect3d => "memcpy_rect3d.c",
    alloc_kernels => "alloc_kernels.c",
    usm => "usm.c",
    unified_address => "unified_address.c",
    if_clause => "if_clause.c",
    devices => "devices.c",
    err_paths => "err_paths.c",
    policy_api => "policy_api.c",
    info_kernels => "info_kernels.c",
    info_update => "info_update.c",
    #[ignore = "KNOWN-DIFF with LLVM (INFO lines): see the directive in tests/c/zero_len.c"]
    zero_len => "zero_len.c",
    lambda_ref => "lambda_ref.cpp",
    use_device_fallback => "use_device_fallback.c",
    zero_len_unmapped => "zero_len_unmapped.c",
    memcpy_async_depend => "memcpy_async_depend.c",
    err_api_device => "err_api_device.c",
    usm_info => "usm_info.c",
    shared_alloc => "shared_alloc.c",
    fp_info => "fp_info.c",
    abort_flush => "abort_flush.c",
    mandatory_no_device => "mandatory_no_device.c",
    gpu_only => "gpu_only.c",
    remote_warn => "remote_warn.c",
    mapper_api => "mapper_api.c",
    always_mapper => "always_mapper.cpp",
    dump_stdout => "dump_stdout.c",
    indirect_shared => "indirect_shared.c",
    mapper_partial_struct => "mapper_partial_struct.c",
    mapper_api_handles => "mapper_api_handles.cpp",
    use_device_addr_ref_member => "use_device_addr_ref_member.cpp",
}

// ------------------------------------------------ remote plugin failures

/// `offload serve` inside this test process (host devices only), stopped
/// when dropped.
struct TestServer {
    addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    fn start(token: &str) -> TestServer {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let token = token.to_string();
        let thread = std::thread::spawn(move || {
            let config = offload_core::Config {
                plugins: Some(vec!["host".into()]),
                host_devices: 2,
                ..offload_core::Config::default()
            };
            let runtime = std::sync::Arc::new(offload_core::Runtime::new(
                config,
                &offload_plugins::builtin(),
            ));
            let options = offload_server::ServeOptions {
                listen: Some("127.0.0.1:0".parse().unwrap()),
                token: Some(token),
                ..Default::default()
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let served = rt.block_on(offload_server::serve(
                options,
                runtime,
                |a| {
                    let _ = addr_tx.send(a.to_string());
                },
                async {
                    let _ = stopped.await;
                },
            ));
            served.expect("test server failed");
        });
        let addr = addr_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("test server did not start");
        TestServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("omptarget warning:"))
        .collect()
}

/// Exactly one `omptarget warning:` line in `r`'s stderr, starting with
/// `prefix` and containing `reason`.
fn assert_one_warning(r: &Run, prefix: &str, reason: &str) {
    let w = warnings(&r.stderr);
    assert_eq!(w.len(), 1, "one warning line:\n{}", r.stderr);
    assert!(
        w[0].starts_with(prefix) && w[0].contains(reason),
        "{}",
        w[0]
    );
}

/// A plugin whose devices do not come up says why in one warning line on
/// stderr (without LIBOMPTARGET_DEBUG), and the program falls back to the
/// host: a server that refuses the token, a server that is not there. With
/// the right token there is no warning and the devices are the server's.
#[test]
fn remote_plugin_failure_warns_once() {
    if !have_clang() {
        return;
    }
    let name = "remote_warn.c";
    let text = std::fs::read_to_string(src_dir().join(name)).unwrap();
    let dir = tempfile_dir("remote_plugin_failure");
    let exe = compile(name, &spec(&text), &dir);
    let ours_path = format!("{}:{LLVM_LIB}", our_lib_dir().display());
    let server = TestServer::start("right-token");
    let run_with = |env: &[(&str, &str)]| {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let _g = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        run(&exe, &ours_path, &env, None)
    };
    let remote = |addr: &str, token: &str| {
        run_with(&[
            ("OFFLOAD_PLUGINS", "remote"),
            ("OFFLOAD_REMOTE", addr),
            ("OFFLOAD_REMOTE_TOKEN", token),
            ("OFFLOAD_REMOTE_TIMEOUT", "10"),
        ])
    };

    let ok = remote(&server.addr, "right-token");
    assert_eq!(ok.status, Some(0), "stderr:\n{}", ok.stderr);
    assert_eq!(ok.stdout, "devices=2\nx=2\n");
    assert!(warnings(&ok.stderr).is_empty(), "{}", ok.stderr);

    let refused = remote(&server.addr, "wrong-token");
    assert_eq!(refused.status, Some(0), "stderr:\n{}", refused.stderr);
    assert_eq!(refused.stdout, "devices=0\nx=2\n", "host fallback");
    assert_one_warning(
        &refused,
        &format!(
            "omptarget warning: plugin 'remote' has no devices: remote server {}",
            server.addr
        ),
        "wrong token",
    );

    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = format!("127.0.0.1:{port}");
    let unreachable = remote(&gone, "right-token");
    assert_eq!(
        unreachable.status,
        Some(0),
        "stderr:\n{}",
        unreachable.stderr
    );
    assert_eq!(unreachable.stdout, "devices=0\nx=2\n", "host fallback");
    assert_one_warning(
        &unreachable,
        &format!(
            "omptarget warning: plugin 'remote' has no devices: remote server {gone}: connect"
        ),
        "Connection refused",
    );

    // Offloading switched off: no warning about devices nobody wants.
    let off = run_with(&[
        ("OFFLOAD_PLUGINS", "remote"),
        ("OFFLOAD_REMOTE", gone.as_str()),
        ("OMP_TARGET_OFFLOAD", "DISABLED"),
    ]);
    assert_eq!(off.stdout, "devices=0\nx=2\n");
    assert!(warnings(&off.stderr).is_empty(), "{}", off.stderr);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CUDA plugin without a driver: asked for by name
/// (`OFFLOAD_PLUGINS=cuda`) it says why in one warning line and the program
/// falls back to the host; not asked for, it is silent (the reason is only
/// in `LIBOMPTARGET_DEBUG` output).
#[test]
fn cuda_plugin_without_a_driver() {
    if !have_clang() {
        return;
    }
    let name = "remote_warn.c";
    let text = std::fs::read_to_string(src_dir().join(name)).unwrap();
    let dir = tempfile_dir("cuda_plugin_without_a_driver");
    let exe = compile(name, &spec(&text), &dir);
    let ours_path = format!("{}:{LLVM_LIB}", our_lib_dir().display());
    let go = |pairs: &[(&str, &str)]| {
        let mut env: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push((
            "OFFLOAD_CUDA_DRIVER".into(),
            "/nonexistent/libcuda.so.1".into(),
        ));
        let _g = RUN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        run(&exe, &ours_path, &env, None)
    };
    let named = go(&[("OFFLOAD_PLUGINS", "cuda")]);
    assert_eq!(named.status, Some(0), "stderr:\n{}", named.stderr);
    assert_eq!(named.stdout, "devices=0\nx=2\n", "host fallback");
    let w = warnings(&named.stderr);
    assert_eq!(w.len(), 1, "one warning line:\n{}", named.stderr);
    assert!(
        w[0].starts_with(
            "omptarget warning: plugin 'cuda' has no devices: cannot load the CUDA driver /nonexistent/libcuda.so.1"
        ),
        "{}",
        w[0]
    );
    let default = go(&[]);
    assert_eq!(default.status, Some(0), "stderr:\n{}", default.stderr);
    assert!(warnings(&default.stderr).is_empty(), "{}", default.stderr);
    assert!(!default.stderr.contains("cuda"), "{}", default.stderr);
    let debug = go(&[("LIBOMPTARGET_DEBUG", "1")]);
    assert!(
        debug
            .stderr
            .contains("no CUDA devices: cannot load the CUDA driver /nonexistent/libcuda.so.1"),
        "{}",
        debug.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
