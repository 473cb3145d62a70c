//! `offload replay` of hostile recordings: a real recording (an OpenMP
//! program recorded on the host device) with its `launch.json` and data
//! files mutated in many ways. Every hostile variant must end with a
//! non-zero exit status and an `offload: error:` line; no input may make
//! replay panic (exit 101) or die by a signal.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

const OFFLOAD: &str = env!("CARGO_BIN_EXE_offload");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn offload(args: &[&str]) -> Output {
    Command::new(OFFLOAD)
        .args(args)
        .env_remove("OFFLOAD_RECORD")
        .env_remove("OFFLOAD_PLUGINS")
        .env_remove("OFFLOAD_REMOTE")
        .env("OFFLOAD_HOST_DEVICES", "1")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One launch of tests/record/omp_global.c, recorded.
fn recorded_launch(dir: &Path) -> PathBuf {
    let exe = dir.join("omp_global");
    let src = root().join("crates/offload-cli/tests/record/omp_global.c");
    let o = Command::new("clang-22")
        .args([
            "-fopenmp",
            "-fopenmp-targets=x86_64-unknown-linux-gnu",
            "-O1",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("clang-22 (scripts/setup.sh installs it)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = dir.join("rec");
    let out = offload(&[
        "record",
        "-o",
        rec.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::read_dir(&rec)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("launch.json").is_file())
        .expect("a recorded launch")
}

/// A fresh copy of the launch folder `src` at `dst`.
fn copy_launch(src: &Path, dst: &Path) {
    let _ = std::fs::remove_dir_all(dst);
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

/// Replays `launch` and asserts it neither panicked nor died by a signal.
fn replay(launch: &Path, what: &str) -> Output {
    let out = offload(&["replay", launch.to_str().unwrap(), "--verify"]);
    assert!(
        out.status.signal().is_none(),
        "{what}: replay died by a signal\n{}",
        text(&out)
    );
    assert_ne!(
        out.status.code(),
        Some(101),
        "{what}: replay panicked\n{}",
        text(&out)
    );
    out
}

/// Replays `launch` and asserts it was refused with an error line.
fn refused(launch: &Path, what: &str) -> String {
    let out = replay(launch, what);
    assert!(
        !out.status.success(),
        "{what}: a hostile recording replayed\n{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.lines().any(|l| l.starts_with("offload: error:")),
        "{what}: no error line\n{}",
        text(&out)
    );
    err
}

fn write_manifest(launch: &Path, m: &Value) {
    std::fs::write(
        launch.join("launch.json"),
        serde_json::to_vec_pretty(m).unwrap(),
    )
    .unwrap();
}

/// Index of the first recorded range with `origin`.
fn range_of(m: &Value, origin: &str) -> usize {
    m["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["origin"] == origin && r["recorded"] == true)
        .unwrap_or_else(|| panic!("a recorded {origin} range in {m}"))
}

#[test]
fn hostile_recordings_are_errors_never_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let original = recorded_launch(dir.path());
    let m0: Value =
        serde_json::from_slice(&std::fs::read(original.join("launch.json")).unwrap()).unwrap();
    let work = dir.path().join("work");

    // The unmodified recording replays and verifies.
    copy_launch(&original, &work);
    let out = replay(&work, "unmodified");
    assert!(out.status.success(), "{}", text(&out));

    let alloc = range_of(&m0, "alloc");
    let global = range_of(&m0, "global");
    let base = m0["ranges"][alloc]["base"].as_u64().unwrap();
    let size = m0["ranges"][alloc]["size"].as_u64().unwrap();
    let image_size = m0["image_size"]
        .as_u64()
        .expect("the recorder writes image_size");

    // Each hostile edit of the manifest, with a word the error must contain.
    type Edit = Box<dyn Fn(&mut Value)>;
    let set = |ptr: &'static str, v: Value| -> Edit {
        Box::new(move |m: &mut Value| *m.pointer_mut(ptr).unwrap() = v.clone())
    };
    let a = |field: &str| format!("/ranges/{alloc}/{field}");
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "image ../../etc/passwd",
            set("/image", json!("../../etc/passwd")),
            "inside the recording",
        ),
        (
            "absolute image",
            set("/image", json!("/etc/passwd")),
            "inside the recording",
        ),
        (
            "image /dev/zero",
            set("/image", json!("/dev/zero")),
            "inside the recording",
        ),
        ("image a number", set("/image", json!(5)), "image"),
        (
            "image empty",
            set("/image", json!("")),
            "inside the recording",
        ),
        (
            "image size +1",
            set("/image_size", json!(image_size + 1)),
            "image",
        ),
        (
            "image size -1",
            set("/image_size", json!(image_size - 1)),
            "image",
        ),
        (
            "kernel system",
            set("/kernel", json!("system")),
            "not defined by the image",
        ),
        (
            "kernel dlopen",
            set("/kernel", json!("dlopen")),
            "not defined by the image",
        ),
        ("format 2", set("/format", json!(2)), "format"),
        (
            "packed non-ASCII",
            set("/args", json!({"packed": "é0é0"})),
            "hexadecimal",
        ),
        ("packed odd", set("/args", json!({"packed": "abc"})), "odd"),
        (
            "packed short",
            set("/args", json!({"packed": "ab", "size": 8})),
            "packed",
        ),
        ("packed empty", set("/args", json!({"packed": ""})), "empty"),
        (
            "packed not a string",
            set("/args", json!({"packed": 7})),
            "arguments",
        ),
        (
            "word negative",
            set("/args/words/0", json!(-1)),
            "args.words",
        ),
        (
            "word a string",
            set("/args/words/0", json!("x")),
            "args.words",
        ),
        ("base 0", set(leak(a("base")), json!(0)), "base 0"),
        (
            "base wraps",
            set(leak(a("base")), json!(u64::MAX - 8)),
            "wraps",
        ),
        (
            "base moved",
            set(leak(a("base")), json!(base + (1 << 24))),
            "no recorded range",
        ),
        ("size 0", set(leak(a("size")), json!(0)), "size 0"),
        ("size short", set(leak(a("size")), json!(size - 1)), "bytes"),
        (
            "size 2^40",
            set(leak(a("size")), json!(1u64 << 40)),
            "bytes",
        ),
        ("size negative", set(leak(a("size")), json!(-5)), "size"),
        (
            "origin unknown",
            set(leak(a("origin")), json!("heap")),
            "origin",
        ),
        (
            "recorded a string",
            set(leak(a("recorded")), json!("yes")),
            "recorded",
        ),
        (
            "range a string",
            set(leak(format!("/ranges/{alloc}")), json!("r")),
            "not an object",
        ),
        (
            "global too large",
            set(leak(format!("/ranges/{global}/size")), json!(1 << 20)),
            "bytes",
        ),
        (
            "global unnamed",
            set(leak(format!("/ranges/{global}/name")), json!(null)),
            "without a name",
        ),
        (
            "num_groups 2^40",
            set("/config/num_groups", json!([1u64 << 40, 1, 1])),
            "num_groups",
        ),
        (
            "group_size 2^32",
            set("/config/group_size", json!([1u64 << 32])),
            "group_size",
        ),
        (
            "4 dimensions",
            set("/config/group_size", json!([1, 1, 1, 1])),
            "dimensions",
        ),
        (
            "dims a string",
            set("/config/num_groups", json!("many")),
            "num_groups",
        ),
        (
            "dyn memory 2^33",
            set("/config/dyn_group_memory", json!(1u64 << 33)),
            "dyn_group_memory",
        ),
        (
            "overlapping ranges",
            Box::new(move |m: &mut Value| {
                let r = m["ranges"][alloc].clone();
                m["ranges"].as_array_mut().unwrap().push(r);
            }),
            "overlaps",
        ),
        ("ranges missing", set("/ranges", json!(null)), "ranges"),
    ];
    for (what, edit, expect) in &cases {
        copy_launch(&original, &work);
        let mut m = m0.clone();
        edit(&mut m);
        write_manifest(&work, &m);
        let err = refused(&work, what);
        assert!(
            err.contains(expect),
            "{what}: expected '{expect}' in:\n{err}"
        );
    }

    // Hostile files: data that is a special file, a symbolic link out of
    // the folder, of another size; a manifest that is no JSON.
    let data = format!("r{alloc}.before");
    type Breakage<'a> = Box<dyn Fn(&Path) + 'a>;
    let file_cases: Vec<(&str, Breakage)> = vec![
        (
            "data -> /dev/zero",
            Box::new(|w: &Path| {
                std::fs::remove_file(w.join(&data)).unwrap();
                std::os::unix::fs::symlink("/dev/zero", w.join(&data)).unwrap();
            }),
        ),
        (
            "data -> outside",
            Box::new(|w: &Path| {
                std::fs::remove_file(w.join(&data)).unwrap();
                std::os::unix::fs::symlink("/etc/hostname", w.join(&data)).unwrap();
            }),
        ),
        (
            "data a FIFO",
            Box::new(|w: &Path| {
                std::fs::remove_file(w.join(&data)).unwrap();
                let c = std::ffi::CString::new(w.join(&data).to_str().unwrap()).unwrap();
                // SAFETY: `c` is a NUL-terminated CString, alive for the call.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }),
        ),
        (
            "data a directory",
            Box::new(|w: &Path| {
                std::fs::remove_file(w.join(&data)).unwrap();
                std::fs::create_dir(w.join(&data)).unwrap();
            }),
        ),
        (
            "data longer",
            Box::new(|w: &Path| {
                let mut d = std::fs::read(w.join(&data)).unwrap();
                d.push(0);
                std::fs::write(w.join(&data), d).unwrap();
            }),
        ),
        (
            "data missing",
            Box::new(|w: &Path| std::fs::remove_file(w.join(&data)).unwrap()),
        ),
        (
            "image -> /dev/zero",
            Box::new(|w: &Path| {
                std::fs::remove_file(w.join("image.bin")).unwrap();
                std::os::unix::fs::symlink("/dev/zero", w.join("image.bin")).unwrap();
            }),
        ),
        (
            "manifest not JSON",
            Box::new(|w: &Path| std::fs::write(w.join("launch.json"), b"{\"format\": 1,").unwrap()),
        ),
        (
            "manifest not UTF-8",
            Box::new(|w: &Path| {
                std::fs::write(w.join("launch.json"), b"{\"kernel\": \"\xff\"}").unwrap()
            }),
        ),
    ];
    for (what, break_it) in &file_cases {
        copy_launch(&original, &work);
        break_it(&work);
        refused(&work, what);
    }

    // Bounded random mutations of the manifest's structure and numbers
    // (not of argument values, which are the kernel's own contract: a null
    // pointer in a kernel's arguments crashes it as it would in the
    // program). Some mutants replay; none may panic or crash.
    let leaves = [
        json!(0),
        json!(1),
        json!(-1),
        json!(u64::MAX),
        json!(1u64 << 40),
        json!(4096),
        json!("é"),
        json!(""),
        json!(null),
        json!([]),
        json!({}),
        json!(true),
        json!(1.5),
    ];
    let mut seed: u64 = 0x5eed;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let mut paths = Vec::new();
    fn collect(v: &Value, at: String, out: &mut Vec<String>) {
        if at.starts_with("/args") {
            return;
        }
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    collect(x, format!("{at}/{k}"), out);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    collect(x, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
        out.push(at);
    }
    collect(&m0, String::new(), &mut paths);
    paths.retain(|p| !p.is_empty());
    let (mut ok, mut errors) = (0, 0);
    for i in 0..120 {
        copy_launch(&original, &work);
        let mut m = m0.clone();
        for _ in 0..1 + next() % 3 {
            let p = &paths[next() % paths.len()];
            if let Some(slot) = m.pointer_mut(p) {
                *slot = leaves[next() % leaves.len()].clone();
            }
        }
        write_manifest(&work, &m);
        let out = replay(&work, &format!("mutant {i}: {m}"));
        if out.status.success() {
            ok += 1;
        } else {
            errors += 1;
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.lines().any(|l| l.starts_with("offload: error:")),
                "mutant {i}: no error line\n{}",
                text(&out)
            );
        }
    }
    assert!(errors > 0, "{ok} mutants replayed, {errors} refused");
}
