//! Bitcode device images (`-fopenmp-target-jit`) compiled at load time: an
//! OpenMP program gives the native build's output on our runtime (LLVM 22's
//! own host plugin cannot run it), a second run takes the compiled image
//! from the cache without running the compiler, and a missing compiler is
//! a clear error naming what was looked for.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LLVM_LIB: &str = "/usr/lib/llvm-22/lib";

struct Built {
    dir: tempfile::TempDir,
    native: PathBuf,
    jit: PathBuf,
    lib_dir: PathBuf,
}

fn build() -> Built {
    build_with(&[])
}

/// The test program built natively and for the JIT with `defines`.
fn build_with(defines: &[&str]) -> Built {
    let exe = std::env::current_exe().unwrap();
    let lib = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libomptarget.so");
    assert!(lib.exists(), "cdylib not found at {}", lib.display());
    let dir = tempfile::tempdir().unwrap();
    let lib_dir = dir.path().join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    std::os::unix::fs::symlink(&lib, lib_dir.join("libomptarget.so.22.1")).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jit/saxpy_reduce.c");
    let clang = |out: &Path, extra: &[&str]| {
        let o = Command::new("clang-22")
            .args([
                "-fopenmp",
                "-fopenmp-targets=x86_64-unknown-linux-gnu",
                "-O1",
            ])
            .args(extra)
            .args(defines)
            .arg("-o")
            .arg(out)
            .arg(&src)
            .output()
            .expect("clang-22 is required (scripts/setup.sh installs it)");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let native = dir.path().join("native");
    let jit = dir.path().join("jit");
    clang(&native, &[]);
    // Debian's device link step needs lld for `--lto-emit-llvm`.
    clang(
        &jit,
        &[
            "-fopenmp-target-jit",
            "-fuse-ld=lld",
            "-Wl,--device-compiler=x86_64-unknown-linux-gnu=-fuse-ld=lld",
        ],
    );
    Built {
        dir,
        native,
        jit,
        lib_dir,
    }
}

fn run(b: &Built, exe: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(exe)
        .env(
            "LD_LIBRARY_PATH",
            format!("{}:{LLVM_LIB}", b.lib_dir.display()),
        )
        .env("OMP_TARGET_OFFLOAD", "MANDATORY")
        .env_remove("OFFLOAD_PLUGINS")
        .env_remove("LIBOMPTARGET_INFO")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn bitcode_images_are_compiled_once_and_cached() {
    let b = build();
    let cache = b.dir.path().join("cache");
    let (wrapper, log) = counting_compiler(b.dir.path());
    let env = [
        ("OFFLOAD_JIT_CACHE", cache.to_str().unwrap()),
        ("OFFLOAD_JIT_COMPILER", wrapper.to_str().unwrap()),
    ];

    let native = Command::new(&b.native)
        .env("LD_LIBRARY_PATH", LLVM_LIB)
        .output()
        .unwrap();
    assert!(native.status.success());
    let want = String::from_utf8_lossy(&native.stdout).to_string();
    assert!(want.starts_with("sum="), "{want}");

    for round in 0..3 {
        let out = run(&b, &b.jit, &env);
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "round {round}");
    }
    // LIBOMPTARGET_DEBUG says which image the device took.
    let mut debug_env = env.to_vec();
    debug_env.push(("LIBOMPTARGET_DEBUG", "1"));
    let out = run(&b, &b.jit, &debug_env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.contains("image chosen") && l.contains("format=LLVM bitcode")),
        "{err}"
    );
    assert_eq!(
        compiler_runs(&log),
        1,
        "the compiler ran once, then the cache served"
    );
    let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
    assert_eq!(entries.len(), 1, "one cached image, no temporary left over");

    corrupt_entry_is_compiled_again(&b, &env, &want, &entries[0].path(), &log);
    writable_cache_is_not_used(&b, &env, &want, &cache, &log);

    // LLVM 22's runtime cannot run the bitcode image on this machine.
    let llvm = Command::new(&b.jit)
        .env("LD_LIBRARY_PATH", LLVM_LIB)
        .env("OMP_TARGET_OFFLOAD", "MANDATORY")
        .output()
        .unwrap();
    assert!(!llvm.status.success() || String::from_utf8_lossy(&llvm.stdout) != want);
}

/// A compiler wrapper in `dir` that counts its runs in a log: (wrapper, log).
fn counting_compiler(dir: &Path) -> (PathBuf, PathBuf) {
    let log = dir.join("compiler.log");
    let wrapper = dir.join("cc.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho run >> {}\nexec clang-22 \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, log)
}

/// How often the [`counting_compiler`] ran.
fn compiler_runs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

/// A corrupted entry is reported by name and compiled again, not run.
fn corrupt_entry_is_compiled_again(
    b: &Built,
    env: &[(&str, &str)],
    want: &str,
    entry: &Path,
    log: &Path,
) {
    let mut bytes = std::fs::read(entry).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(entry, &bytes).unwrap();
    let out = run(b, &b.jit, env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    assert!(
        err.contains(&format!("JIT cache entry {} is corrupt", entry.display())),
        "{err}"
    );
    assert_eq!(compiler_runs(log), 2, "recompiled once");
    assert_ne!(
        std::fs::read(entry).unwrap(),
        bytes,
        "the entry was replaced"
    );
}

/// A cache others can write to is not used (one warning naming it).
fn writable_cache_is_not_used(
    b: &Built,
    env: &[(&str, &str)],
    want: &str,
    cache: &Path,
    log: &Path,
) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(b, &b.jit, env);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    assert!(
        err.contains(&format!("JIT cache {} not used", cache.display())),
        "{err}"
    );
    assert_eq!(compiler_runs(log), 3, "compiled without the cache");
}

#[test]
fn a_missing_compiler_is_a_clear_error() {
    let b = build();
    let cache = b.dir.path().join("cache");
    let out = run(
        &b,
        &b.jit,
        &[
            ("OFFLOAD_JIT_CACHE", cache.to_str().unwrap()),
            ("OFFLOAD_JIT_COMPILER", "/nonexistent/clang"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no LLVM 22 compiler for bitcode images: looked for $OFFLOAD_JIT_COMPILER (/nonexistent/clang)"),
        "{err}"
    );
    assert!(err.contains("omptarget fatal error 1"), "{err}");
}

/// The bitcode image of a `-fopenmp-target-jit` executable, written to
/// `out`.
fn write_bitcode(exe: &Path, out: &Path) {
    let bytes = std::fs::read(exe).unwrap();
    let images = offload_image::images_in_host_binary(&bytes).unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].format, offload_image::ImageFormat::Bitcode);
    std::fs::write(out, images[0].bytes).unwrap();
}

/// LLVM's JIT variables, as its plugins read them: the IR before and
/// after optimisation written where asked, optimisation skipped or set,
/// a replacement module or object (relocatable: linked) in the image's
/// place, and a clear error for a replacement that is not there.
#[test]
fn llvms_jit_variables_are_honoured() {
    let b = build();
    let dir = b.dir.path();
    let cache = dir.join("cache");
    let cache = cache.to_str().unwrap();
    let native = |exe: &Path| {
        let o = Command::new(exe)
            .env("LD_LIBRARY_PATH", LLVM_LIB)
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let want = native(&b.native);
    let run_ok = |env: &[(&str, &str)]| {
        let mut all = vec![("OFFLOAD_JIT_CACHE", cache)];
        all.extend_from_slice(env);
        let out = run(&b, &b.jit, &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{env:?}: {err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();

    // The IR, before and after optimisation, also when the image was
    // cached by an earlier run.
    assert_eq!(run_ok(&[]), want);
    let (pre, post) = (path("pre.ll"), path("post.ll"));
    let dumps = [
        ("LIBOMPTARGET_JIT_PRE_OPT_IR_MODULE", pre.as_str()),
        ("LIBOMPTARGET_JIT_POST_OPT_IR_MODULE", post.as_str()),
    ];
    assert_eq!(run_ok(&dumps), want);
    let read = |p: &str| std::fs::read_to_string(p).unwrap();
    let (pre_ir, optimised) = (read(&pre), read(&post));
    for ir in [&pre_ir, &optimised] {
        assert!(
            ir.lines()
                .any(|l| l.starts_with("define") && l.contains("__omp_offloading_")),
            "a kernel's definition"
        );
    }
    // Optimisation skipped: the module comes out as it went in.
    let mut skipped = dumps.to_vec();
    skipped.push(("LIBOMPTARGET_JIT_SKIP_OPT", "true"));
    assert_eq!(run_ok(&skipped), want);
    assert_eq!(read(&post), read(&pre), "no pass ran");
    assert_ne!(optimised, pre_ir, "the default optimises");
    // Level 0 is another result than the default (a cache entry of its
    // own), and runs.
    let entries = || std::fs::read_dir(cache).unwrap().count();
    let before = entries();
    assert_eq!(run_ok(&[("LIBOMPTARGET_JIT_OPT_LEVEL", "0")]), want);
    assert_eq!(entries(), before + 1);
    assert_eq!(run_ok(&[("LIBOMPTARGET_JIT_OPT_LEVEL", "0")]), want);
    assert_eq!(entries(), before + 1, "then taken from the cache");

    // Another module in the image's place: the device code adds the
    // variant's bias.
    let variant = build_with(&["-DBIAS=0.5"]);
    let variant_want = native(&variant.native);
    assert_ne!(variant_want, want);
    let module = path("variant.bc");
    write_bitcode(&variant.jit, Path::new(&module));
    assert_eq!(
        run_ok(&[("LIBOMPTARGET_JIT_REPLACEMENT_MODULE", &module)]),
        variant_want
    );
    // A relocatable object in place of the compiled image: linked, run.
    let object = path("variant.o");
    let ok = Command::new("clang-22")
        .args([
            "--target=x86_64-unknown-linux-gnu",
            "-fPIC",
            "-c",
            "-O2",
            "-x",
            "ir",
        ])
        .arg(&module)
        .arg("-o")
        .arg(&object)
        .status()
        .unwrap()
        .success();
    assert!(ok, "compiling the variant's object");
    assert_eq!(
        run_ok(&[("LIBOMPTARGET_JIT_REPLACEMENT_OBJECT", &object)]),
        variant_want
    );
    // A replacement that is not there: an error naming it.
    let out = run(
        &b,
        &b.jit,
        &[
            ("OFFLOAD_JIT_CACHE", cache),
            ("LIBOMPTARGET_JIT_REPLACEMENT_MODULE", "/nonexistent/m.bc"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("LIBOMPTARGET_JIT_REPLACEMENT_MODULE /nonexistent/m.bc"),
        "{err}"
    );
}
