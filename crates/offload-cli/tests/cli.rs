//! End-to-end tests of the `offload` executable.

mod common;
use common::skip;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_offload");

/// `offload ARGS` with a predictable environment.
fn offload() -> Command {
    let mut c = Command::new(EXE);
    for var in [
        "OFFLOAD_PLUGINS",
        "OFFLOAD_HOST_DEVICES",
        "OFFLOAD_LIB_DIR",
        "LIBOMPTARGET_DEBUG",
    ] {
        c.env_remove(var);
    }
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("cannot start offload")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(c: &mut Command) -> String {
    let o = run(c);
    assert!(
        o.status.success(),
        "{c:?} failed: {:?}\nstderr: {}",
        o.status,
        stderr(&o)
    );
    stdout(&o)
}

fn json(c: &mut Command) -> Value {
    let text = ok(c);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: not JSON:\n{text}"))
}

/// Asserts a clean failure: non-zero status, one `offload: error:` line, no panic.
fn fails(c: &mut Command) -> String {
    let o = run(c);
    let err = stderr(&o);
    assert!(!o.status.success(), "{c:?} unexpectedly succeeded");
    assert!(o.status.code().is_some(), "{c:?} died of a signal: {err}");
    assert!(!err.contains("panicked"), "{c:?} panicked: {err}");
    assert!(
        err.starts_with("offload: error: "),
        "{c:?}: unexpected stderr {err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    err
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn have_clang() -> bool {
    let ok = have("clang-22");
    if !ok {
        skip("clang-22 not found");
    }
    ok
}

fn clang(args: &[&str], dir: &Path) {
    let st = Command::new("clang-22")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "clang-22 {args:?} failed");
}

/// A small host-kernel shared object with a kernel-named function and a global.
fn kernel_so(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("k.c"),
        "int counter[4] = {1, 2, 3, 4};\n\
         void __omp_offloading_demo_kernel(void) { counter[0]++; }\n\
         __attribute__((visibility(\"hidden\"))) void helper(void) {}\n",
    )
    .unwrap();
    clang(&["-O2", "-fPIC", "-shared", "-o", "k.so", "k.c"], dir);
    dir.join("k.so")
}

fn platforms_devices(v: &Value) -> Vec<Value> {
    v["platforms"]
        .as_array()
        .expect("platforms array")
        .iter()
        .flat_map(|p| p["devices"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn info_json_lists_host_devices() {
    let v = json(offload().args(["info", "--json"]));
    let host = v["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["plugin"] == "host")
        .expect("host platform");
    assert_eq!(host["backend"], "host");
    let devices = host["devices"].as_array().unwrap();
    assert!(!devices.is_empty());
    let d = &devices[0];
    assert_eq!(d["plugin"], "host");
    assert_eq!(d["id"], 0);
    for key in [
        "name",
        "vendor",
        "product_name",
        "type",
        "backend",
        "triple",
        "arch",
        "uid",
        "driver_version",
        "global_memory_bytes",
        "group_memory_bytes",
        "compute_units",
        "max_group_size",
        "max_group_size_per_dim",
        "max_num_groups",
        "clock_mhz",
        "address_bits",
    ] {
        assert!(d.get(key).is_some(), "device lacks {key}: {d}");
    }
    assert!(v["failed_plugins"].is_array());

    let v = json(
        offload()
            .args(["info", "--json"])
            .env("OFFLOAD_HOST_DEVICES", "2"),
    );
    let all = platforms_devices(&v);
    let hosts: Vec<_> = all.iter().filter(|d| d["plugin"] == "host").collect();
    assert_eq!(hosts.len(), 2, "{v}");
    assert_eq!(hosts[1]["id"], 1);
}

#[test]
fn info_text() {
    let out = ok(offload().arg("info").env("OFFLOAD_HOST_DEVICES", "1"));
    assert!(out.contains("Platform 0: host"), "{out}");
    assert!(out.contains("Device 0 (host"), "{out}");
    assert!(out.contains("Global Mem Size:"), "{out}");
    // No usable device: the report (only the HOST device) and status 1.
    // (`remote` without a server has no devices; an unknown name such as
    // "nothing" is an error of its own.)
    let o = run(offload()
        .arg("info")
        .env("OFFLOAD_PLUGINS", "remote")
        .env_remove("OFFLOAD_REMOTE"));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    assert!(out.contains("no usable devices"), "{out}");
}

#[test]
fn inspect_openmp_executable_and_object() {
    if !have_clang() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("t.c"),
        "#include <stdio.h>\n\
         int main(void) {\n\
           int a = 0;\n\
         #pragma omp target map(tofrom: a)\n\
           { a = 42; }\n\
           printf(\"%d\\n\", a);\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    let omp = [
        "-fopenmp",
        "-fopenmp-targets=x86_64-unknown-linux-gnu",
        "t.c",
    ];
    clang(&[&omp[..], &["-o", "t"]].concat(), t.path());
    clang(&[&omp[..], &["-c", "-o", "t.o"]].concat(), t.path());

    for (file, elf_type) in [("t", "shared object"), ("t.o", "relocatable")] {
        let path = t.path().join(file);
        let v = json(offload().arg("inspect").arg(&path).arg("--json"));
        assert_eq!(v["format"], "host-binary", "{v}");
        let images = v["images"].as_array().unwrap();
        assert_eq!(images.len(), 1, "{v}");
        let img = &images[0];
        assert_eq!(img["triple"], "x86_64-unknown-linux-gnu");
        assert_eq!(img["chain"], "OffloadBinary > ELF");
        assert_eq!(img["producer"], "openmp");
        assert_eq!(img["elf"]["machine"], "x86_64");
        assert_eq!(img["elf"]["type"], elf_type);
        let kernels = img["kernels"].as_array().unwrap();
        assert!(
            kernels
                .iter()
                .any(|k| k.as_str().unwrap().starts_with("__omp_offloading_")),
            "{v}"
        );
        assert!(
            !img["runnable_on"].as_array().unwrap().is_empty(),
            "the host device should run an x86_64 image: {v}"
        );

        let text = ok(offload().arg("inspect").arg(&path));
        assert!(text.contains("x86_64-unknown-linux-gnu"), "{text}");
        assert!(text.contains("__omp_offloading_"), "{text}");
        assert!(text.contains("image 0: OffloadBinary > ELF"), "{text}");
    }
}

#[test]
fn pack_then_inspect_round_trip() {
    if !have_clang() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let so = kernel_so(t.path());
    let blob = t.path().join("blob.ptx");
    std::fs::write(&blob, "//\n.version 8.0\n.target sm_80\n").unwrap();
    let out = t.path().join("out.bin");
    ok(offload()
        .args(["pack", "-o"])
        .arg(&out)
        .arg("--image")
        .arg(format!(
            "{},triple=x86_64-unknown-linux-gnu,arch=znver3,note=a,note=b",
            so.display()
        ))
        .arg("--image")
        .arg(format!(
            "file={},triple=nvptx64-nvidia-cuda,arch=sm_80,kind=cuda",
            blob.display()
        )));
    let v = json(offload().arg("inspect").arg(&out).arg("--json"));
    assert_eq!(v["format"], "offload-binary");
    let images = v["images"].as_array().unwrap();
    assert_eq!(images.len(), 2, "{v}");

    let a = &images[0];
    assert_eq!(a["triple"], "x86_64-unknown-linux-gnu");
    assert_eq!(a["arch"], "znver3");
    assert_eq!(a["image_kind"], "o");
    assert_eq!(a["producer"], "openmp");
    assert_eq!(a["strings"]["note"], "a,b");
    assert_eq!(a["size"], std::fs::metadata(&so).unwrap().len());
    assert_eq!(
        a["kernels"],
        serde_json::json!(["__omp_offloading_demo_kernel"])
    );
    let counter = a["globals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "counter")
        .expect("global counter");
    assert_eq!(counter["size"], 16);
    assert!(a["functions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "helper" && f["kernel"] == false));

    let b = &images[1];
    assert_eq!(b["triple"], "nvptx64-nvidia-cuda");
    assert_eq!(b["arch"], "sm_80");
    assert_eq!(b["image_kind"], "s");
    assert_eq!(b["producer"], "cuda");
    // PTX text is recognised as such (offload_image::cuda).
    assert_eq!(b["format"], "PTX");
    assert_eq!(b["runnable_on"], serde_json::json!([]));

    // The triple of an ELF image defaults to the one its header implies.
    let out2 = t.path().join("out2.bin");
    ok(offload()
        .args(["pack", "-o"])
        .arg(&out2)
        .arg("--image")
        .arg(&so));
    let v = json(offload().arg("inspect").arg(&out2).arg("--json"));
    assert_eq!(v["images"][0]["triple"], "x86_64-unknown-linux-gnu");
    assert_eq!(v["images"][0]["strings"]["arch"], "");
}

#[test]
fn pack_output_is_readable_by_llvm_objdump() {
    if !have_clang() {
        return;
    }
    if !have("llvm-objdump-22") {
        skip("llvm-objdump-22 not found");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let so = kernel_so(t.path());
    let out = t.path().join("packed.bin");
    ok(offload()
        .args(["pack", "--format", "offload-binary", "-o"])
        .arg(&out)
        .arg("--image")
        .arg(format!(
            "{},triple=x86_64-unknown-linux-gnu,arch=skylake,kind=openmp",
            so.display()
        )));
    let o = Command::new("llvm-objdump-22")
        .arg("--offloading")
        .arg(&out)
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(o.status.success(), "{}\n{}", text, stderr(&o));
    assert!(text.contains("x86_64-unknown-linux-gnu"), "{text}");
    assert!(text.contains("skylake"), "{text}");
    assert!(text.contains("openmp"), "{text}");

    // And LLVM's own tool extracts the image byte for byte.
    let tool = "/usr/lib/llvm-22/bin/llvm-offload-binary";
    if Path::new(tool).exists() {
        let back = t.path().join("back.so");
        let st = Command::new(tool)
            .arg(&out)
            .arg(format!(
                "--image=file={},triple=x86_64-unknown-linux-gnu,arch=skylake",
                back.display()
            ))
            .status()
            .unwrap();
        assert!(st.success());
        assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&so).unwrap());
    }
}

#[test]
fn one_omp_pack_keeps_metadata() {
    let t = tempfile::tempdir().unwrap();
    // Any payload will do for a 1OMP image; a recognisable one makes the
    // image kind visible.
    let payload = t.path().join("payload.bin");
    std::fs::write(&payload, b"not an ELF, just bytes").unwrap();
    let out = t.path().join("img.omp");
    let compile = "-O2 -g, -DX=\"a:b\" --offload-arch=gfx90a:xnack+";
    let vendor = "it's: \"quoted\", really";
    ok(offload()
        .args(["pack", "--format", "1omp", "-o"])
        .arg(&out)
        .arg("--image")
        .arg(format!(
            "{},Producer=clang 22,TargetID=amdgcn-amd-amdhsa--gfx90a:xnack+,VendorId=0x1002,Custom=1",
            payload.display()
        ))
        .arg("--meta")
        .arg(format!("CompileOptions={compile}"))
        .args(["--meta", "LinkOptions=-lm,-lc"])
        .arg("--meta")
        .arg(format!("VendorName={vendor}")));
    assert_eq!(&std::fs::read(&out).unwrap()[..4], b"1OMP");

    let v = json(offload().arg("inspect").arg(&out).arg("--json"));
    assert_eq!(v["format"], "1omp");
    let img = &v["images"][0];
    assert_eq!(img["chain"], "1OMP > unknown");
    assert_eq!(
        img["metadata"],
        serde_json::json!({
            "Producer": "clang 22",
            "TargetID": "amdgcn-amd-amdhsa--gfx90a:xnack+",
            "VendorId": "0x1002",
            "Custom": "1",
            "CompileOptions": compile,
            "LinkOptions": "-lm,-lc",
            "VendorName": vendor,
        })
    );
    assert_eq!(img["arch"], "gfx90a:xnack+");
    // Order is kept too.
    let text = ok(offload().arg("inspect").arg(&out));
    let p = text.find("Producer = clang 22").expect(&text);
    let c = text.find("CompileOptions = ").expect(&text);
    assert!(p < c, "{text}");

    // A 1OMP image inside an OffloadBinary.
    let nested = t.path().join("nested.bin");
    ok(offload()
        .args(["pack", "-o"])
        .arg(&nested)
        .arg("--image")
        .arg(format!(
            "{},triple=amdgcn-amd-amdhsa,image-kind=o",
            out.display()
        )));
    let v = json(offload().arg("inspect").arg(&nested).arg("--json"));
    assert_eq!(v["images"][0]["chain"], "OffloadBinary > 1OMP > unknown");
    assert_eq!(v["images"][0]["metadata"]["VendorName"], vendor);
}

#[test]
fn hostile_files_are_clean_errors() {
    let t = tempfile::tempdir().unwrap();
    let p = |name: &str| t.path().join(name);

    // A truncated ELF: the first 100 bytes of a real shared object.
    let so = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/ld-linux-x86-64.so.2",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.exists())
    .map(|p| std::fs::read(p).unwrap())
    .unwrap_or_else(|| std::fs::read(EXE).unwrap());
    std::fs::write(p("trunc.so"), &so[..100]).unwrap();

    // 4 KiB of (deterministic) random bytes.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    std::fs::write(p("random.bin"), &random).unwrap();

    // An OffloadBinary header whose entry lies beyond the file.
    let mut ob = vec![0x10, 0xff, 0x10, 0xad];
    ob.extend_from_slice(&1u32.to_le_bytes());
    ob.extend_from_slice(&72u64.to_le_bytes()); // size
    ob.extend_from_slice(&0x1000u64.to_le_bytes()); // entry offset
    ob.extend_from_slice(&40u64.to_le_bytes()); // entry size
    ob.resize(72, 0);
    std::fs::write(p("offsets.bin"), &ob).unwrap();
    // ... and one whose size runs past the end of the file.
    let mut ob2 = ob.clone();
    ob2[8..16].copy_from_slice(&0xffff_ffffu64.to_le_bytes());
    std::fs::write(p("size.bin"), &ob2).unwrap();

    // A 1OMP header declaring 0xFFFFFFF0 bytes of YAML.
    let mut omp = b"1OMP".to_vec();
    omp.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    omp.extend_from_slice(b"a: b\n");
    std::fs::write(p("huge.omp"), &omp).unwrap();

    // A 1OMP header followed by bad YAML.
    let yaml = b"a: [b";
    let mut bad = b"1OMP".to_vec();
    bad.extend_from_slice(&(yaml.len() as u32).to_le_bytes());
    bad.extend_from_slice(yaml);
    bad.extend_from_slice(b"IMAGE");
    std::fs::write(p("badyaml.omp"), &bad).unwrap();

    std::fs::write(p("empty"), b"").unwrap();

    for name in [
        "trunc.so",
        "random.bin",
        "offsets.bin",
        "size.bin",
        "huge.omp",
        "badyaml.omp",
        "empty",
    ] {
        for json in [false, true] {
            let mut c = offload();
            c.arg("inspect").arg(p(name));
            if json {
                c.arg("--json");
            }
            let err = fails(&mut c);
            assert!(
                err.contains(name),
                "{name}: message does not name the file: {err}"
            );
        }
        // pack refuses the same files as images.
        let mut c = offload();
        c.args(["pack", "-o"])
            .arg(p("out"))
            .arg("--image")
            .arg(p(name));
        fails(&mut c);
    }
    assert!(!p("out").exists());

    // Not a file at all.
    fails(offload().arg("inspect").arg(t.path()));
    fails(offload().arg("inspect").arg(p("missing")));
    fails(offload().args(["inspect", "/dev/zero"]));
}

#[test]
fn bad_command_lines_are_one_line_errors() {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("img");
    std::fs::write(&img, b"bytes").unwrap();
    let out = t.path().join("out");
    for args in [
        vec!["inspect"],
        vec!["frobnicate"],
        vec!["info", "--jsn"],
        vec!["pack", "-o", "x"],
        vec!["pack", "-o", "x", "--format", "zip", "--image", "y"],
        vec!["exec"],
    ] {
        let o = run(offload().args(&args));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(err.starts_with("offload: error: "), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    let img_s = img.display().to_string();
    for args in [
        // Unknown producer, unknown image kind, unknown format.
        vec![
            "--image".to_string(),
            format!("{img_s},kind=fortran,image-kind=o,triple=t"),
        ],
        vec![
            "--image".to_string(),
            format!("{img_s},image-kind=zip,triple=t"),
        ],
        vec!["--image".to_string(), format!("{img_s},triple=t")],
        // No triple for an image that does not imply one.
        vec!["--image".to_string(), format!("{img_s},image-kind=o")],
        // Malformed pairs.
        vec!["--image".to_string(), format!("{img_s},novalue")],
        vec!["--image".to_string(), ",triple=t".to_string()],
        // 1OMP takes one image.
        vec![
            "--format".into(),
            "1omp".into(),
            "--image".into(),
            img_s.clone(),
            "--image".into(),
            img_s.clone(),
        ],
        vec![
            "--format".into(),
            "1omp".into(),
            "--image".into(),
            img_s.clone(),
            "--meta".into(),
            "nokey".into(),
        ],
        vec![
            "--image".into(),
            t.path().join("missing").display().to_string(),
        ],
    ] {
        let mut c = offload();
        c.args(["pack", "-o"]).arg(&out).args(&args);
        fails(&mut c);
    }
    assert!(!out.exists());
    ok(offload().arg("--help"));
    ok(offload().args(["pack", "--help"]));
}

fn lib_dir() -> PathBuf {
    let out = ok(offload().arg("lib-dir"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    PathBuf::from(lines[0])
}

#[test]
fn lib_dir_exists_next_to_the_executable() {
    let dir = lib_dir();
    assert!(dir.is_dir(), "{}", dir.display());
    assert!(dir.is_absolute());
    assert_eq!(dir.file_name().unwrap(), "offload-lib");
    let exe_dir = Path::new(EXE).canonicalize().unwrap();
    assert_eq!(dir.parent().unwrap(), exe_dir.parent().unwrap());
    for (lib, soname) in [
        ("libomptarget.so", "libomptarget.so.22.1"),
        ("libLLVMOffload.so", "libLLVMOffload.so.22.1"),
    ] {
        assert_eq!(
            std::fs::read_link(dir.join(soname)).unwrap(),
            Path::new("..").join(lib)
        );
        assert!(dir.join(lib).is_file(), "{lib} link does not resolve");
    }
    // Stable across calls.
    assert_eq!(lib_dir(), dir);

    // OFFLOAD_LIB_DIR is used as it is, and must hold both libraries.
    let t = tempfile::tempdir().unwrap();
    let err = fails(offload().arg("lib-dir").env("OFFLOAD_LIB_DIR", t.path()));
    assert!(
        err.contains("libomptarget.so.22.1 and libLLVMOffload.so.22.1 is missing"),
        "{err}"
    );
    std::fs::write(t.path().join("libomptarget.so.22.1"), b"").unwrap();
    let err = fails(offload().arg("lib-dir").env("OFFLOAD_LIB_DIR", t.path()));
    assert!(err.contains("libLLVMOffload.so.22.1 is missing"), "{err}");
    std::fs::write(t.path().join("libLLVMOffload.so.22.1"), b"").unwrap();
    let out = ok(offload().arg("lib-dir").env("OFFLOAD_LIB_DIR", t.path()));
    assert_eq!(out.trim_end(), t.path().display().to_string());
    fails(
        offload()
            .arg("lib-dir")
            .env("OFFLOAD_LIB_DIR", t.path().join("missing")),
    );
}

/// A copy of the `offload` executable in `bin/` of a fresh directory under
/// the target directory (a hard link where the file system allows it).
fn offload_copy() -> (tempfile::TempDir, PathBuf) {
    offload_copy_named(".tmp")
}

/// `offload_copy` in a directory whose name starts with `prefix`.
fn offload_copy_named(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let exe = bin.join("offload");
    if std::fs::hard_link(EXE, &exe).is_err() {
        std::fs::copy(EXE, &exe).unwrap();
    }
    (root, exe)
}

#[test]
fn a_copied_offload_without_libraries_refuses_to_run_programs() {
    let (root, exe) = offload_copy();
    let marker = root.path().join("ran");
    let mut c = Command::new(&exe);
    c.env_remove("OFFLOAD_LIB_DIR")
        .args(["exec", "touch"])
        .arg(&marker);
    let err = fails(&mut c);
    assert!(err.contains("is missing from"), "{err}");
    assert!(!marker.exists(), "the program ran without our libraries");
    fails(
        Command::new(&exe)
            .env_remove("OFFLOAD_LIB_DIR")
            .arg("lib-dir"),
    );
}

#[test]
fn an_installed_offload_finds_its_libraries_relative_to_itself() {
    let (root, exe) = offload_copy();
    let libs = root.path().join("lib/offload");
    std::fs::create_dir_all(&libs).unwrap();
    let built = Path::new(EXE).parent().unwrap();
    for (lib, soname) in [
        ("libomptarget.so", "libomptarget.so.22.1"),
        ("libLLVMOffload.so", "libLLVMOffload.so.22.1"),
    ] {
        std::fs::copy(built.join(lib), libs.join(soname)).unwrap();
    }
    let out = ok(Command::new(&exe)
        .env_remove("OFFLOAD_LIB_DIR")
        .arg("lib-dir"));
    assert_eq!(Path::new(out.trim_end()), libs.canonicalize().unwrap());
    // Nothing is created next to an installed executable.
    assert!(!root.path().join("bin/offload-lib").exists());
    let out = ok(Command::new(&exe).env_remove("OFFLOAD_LIB_DIR").args([
        "exec",
        "sh",
        "-c",
        "echo $LD_LIBRARY_PATH",
    ]));
    let first = out.trim_end().split(':').next().unwrap().to_string();
    assert_eq!(Path::new(&first), libs.canonicalize().unwrap());
}

const NVPTX: &str = "nvptx64-nvidia-cuda";
const AMDGCN: &str = "amdgcn-amd-amdhsa";

/// An installed `offload` (a copy in `ROOT/bin`) with the device runtime's
/// files in `ROOT/lib/offload/<triple>/` (empty: only their presence
/// counts) and a CUDA toolkit's files in `ROOT/cuda` (ptxas and nvlink
/// executable; cuda.h says 13.0).
fn installed_with_device_runtime(prefix: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (root, exe) = offload_copy_named(prefix);
    let root_path = root.path().canonicalize().unwrap();
    for triple in [NVPTX, AMDGCN] {
        let dir = root_path.join("lib/offload").join(triple);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libompdevice.a"), b"!<arch>\n").unwrap();
        std::fs::write(dir.join("empty.bc"), b"").unwrap();
    }
    let cuda = root_path.join("cuda");
    for (f, text) in [
        ("bin/ptxas", ""),
        ("bin/nvlink", ""),
        ("nvvm/libdevice/libdevice.10.bc", ""),
        ("include/cuda.h", "#define CUDA_VERSION 13000\n"),
    ] {
        let p = cuda.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (root, exe, cuda)
}

/// The user cache of an `offload` copied by `offload_copy` (where an
/// installed one makes its CUDA tool shims): `ROOT/cache`.
fn cache_of(exe: &Path) -> PathBuf {
    exe.parent().unwrap().parent().unwrap().join("cache")
}

/// The CUDA tool shim an installed `exe` made (the only one).
fn shim_of(exe: &Path) -> PathBuf {
    let dir = cache_of(exe).join("offload");
    let shims: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("cuda-shim-")
        })
        .collect();
    assert_eq!(shims.len(), 1, "{shims:?}");
    shims[0].clone()
}

/// `offload clang-flags` run from `exe` with a predictable environment.
fn clang_flags(exe: &Path, cuda: Option<&Path>, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.env_remove("OFFLOAD_DEVICERTL_DIR")
        .env_remove("OFFLOAD_CUDA_PATH")
        .env("XDG_CACHE_HOME", cache_of(exe))
        .arg("clang-flags")
        .args(args);
    if let Some(cuda) = cuda {
        c.env("OFFLOAD_CUDA_PATH", cuda);
    }
    c
}

/// An installed `offload clang-flags` names `<prefix>/lib/offload/<triple>`
/// and the CUDA toolkit: the exact flags for NVIDIA, AMD and both.
#[test]
fn clang_flags_from_an_installed_prefix() {
    let (root, exe, cuda) = installed_with_device_runtime(".tmp");
    let lib = root.path().canonicalize().unwrap().join("lib/offload");
    let (nv, amd) = (lib.join(NVPTX), lib.join(AMDGCN));
    let out = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90"],
    ));
    // The device linker gets the CUDA tool shim, made in the user's cache:
    // `ptxas` and `nvlink` are this `offload`, `toolkit` the real one.
    let shim = shim_of(&exe);
    let link = |p: &str| std::fs::read_link(shim.join(p)).unwrap();
    assert_eq!(link("toolkit"), cuda);
    assert_eq!(link("bin/ptxas"), exe.canonicalize().unwrap());
    assert_eq!(link("bin/nvlink"), exe.canonicalize().unwrap());
    let relocatable = format!(
        "--offload-arch=sm_90 -foffload-lto --cuda-path={} -Xoffload-linker-{NVPTX} -L{}",
        cuda.display(),
        nv.display()
    );
    // The device LTO interleaves loops (--interleave, 4 by default).
    let interleave = format!(
        " -Xoffload-linker-{NVPTX} --plugin-opt=-force-vector-interleave=4 \
         -Xoffload-linker-{NVPTX} --plugin-opt=-force-ordered-reductions"
    );
    let sm90 = format!(
        "{relocatable} -Xoffload-linker-{NVPTX} --cuda-path={}{interleave}",
        shim.display()
    );
    assert_eq!(out, format!("{sm90}\n"));
    let out = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90", "--ptxas-relocatable"],
    ));
    assert_eq!(out, format!("{relocatable}{interleave}\n"));
    let out = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &[
            "--offload-arch=sm_90",
            "--ptxas-relocatable",
            "--interleave",
            "8",
        ],
    ));
    assert_eq!(
        out,
        format!("{relocatable}{}\n", interleave.replace("=4", "=8"))
    );
    let out = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &[
            "--offload-arch=sm_90",
            "--ptxas-relocatable",
            "--interleave=1",
        ],
    ));
    assert_eq!(out, format!("{relocatable}\n"));
    // No cache to make it in: a warning, and the relocatable compile.
    let o = run(clang_flags(&exe, Some(&cuda), &["--offload-arch=sm_90"])
        .env("XDG_CACHE_HOME", "/dev/null/cache"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{relocatable}{interleave}\n"));
    assert!(
        stderr(&o).contains("cannot make the CUDA tool shim"),
        "{}",
        stderr(&o)
    );
    let gfx90a = format!(
        "-Xarch_amdgcn -nogpulib -Xoffload-linker-{AMDGCN} -L{}",
        amd.display()
    );
    // AMD needs no CUDA toolkit.
    let empty = tempfile::tempdir().unwrap();
    let out = ok(&mut clang_flags(
        &exe,
        Some(empty.path()),
        &["--offload-arch=gfx90a"],
    ));
    assert_eq!(
        out,
        format!("--offload-arch=gfx90a -foffload-lto {gfx90a}\n")
    );
    // Both kinds in one binary; repeated options add up, repeats go.
    let out = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90,gfx90a", "--offload-arch", "sm_90"],
    ));
    let both = sm90.replace("--offload-arch=sm_90 ", "--offload-arch=sm_90,gfx90a ");
    assert_eq!(out, format!("{both} {gfx90a}\n"));
    // Without device LTO clang also needs a device-runtime bitcode file
    // for each compiled file (ours: empty).
    let out = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90", "--no-lto"],
    ));
    assert_eq!(
        out,
        format!(
            "--offload-arch=sm_90 -fno-offload-lto --cuda-path={} \
             --libomptarget-nvptx-bc-path={}/empty.bc -Xoffload-linker-{NVPTX} -L{}\n",
            cuda.display(),
            nv.display(),
            nv.display()
        )
    );

    let v = json(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_80,gfx942:xnack-", "--json"],
    ));
    assert_eq!(v["flags"][0], "--offload-arch=sm_80,gfx942:xnack-");
    assert_eq!(v["cuda"]["found_by"], "OFFLOAD_CUDA_PATH");
    assert_eq!(v["cuda"]["version"], "13.0");
    assert_eq!(v["device_runtime"][0]["found_by"], "installed");
    assert_eq!(v["device_runtime"][1]["path"], amd.display().to_string());
    assert_eq!(v["archs"][1]["vendor"], "amd");
    assert_eq!(v["ptxas"]["mode"], "whole-program");
    assert_eq!(v["ptxas"]["shim"], shim.display().to_string());

    let o = run(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90", "-v"],
    ));
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "device runtime for {NVPTX}: {} (installed)",
            nv.display()
        )),
        "{err}"
    );
    assert!(err.contains("(CUDA 13.0; OFFLOAD_CUDA_PATH)"), "{err}");
}

/// Run as `ptxas` from a shim folder, `offload` compiles a whole program
/// with `-ewp` instead of `-c`, runs the relocatable compile when that
/// fails, and passes everything else (and `nvlink`) to the real tools with
/// their exit status. The real tools here are scripts that log their
/// arguments; this ptxas refuses `-ewp` when FAIL_EWP is set.
#[test]
fn the_cuda_shim_compiles_whole_programs_and_falls_back() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let (root, exe) = offload_copy();
    let toolkit = root.path().join("cuda");
    let log = root.path().join("log");
    std::fs::create_dir_all(toolkit.join("bin")).unwrap();
    let ptxas = format!(
        "#!/bin/sh\necho \"ptxas $*\" >> {}\nfor a; do [ \"$a\" = -ewp ] && [ -n \"$FAIL_EWP\" ] \
         && {{ echo ewp refused >&2; exit 3; }}; done\necho compiled\nexit 0\n",
        log.display()
    );
    let nvlink = format!(
        "#!/bin/sh\necho \"nvlink $*\" >> {}\nexit 5\n",
        log.display()
    );
    for (tool, script) in [("ptxas", ptxas), ("nvlink", nvlink)] {
        let p = toolkit.join("bin").join(tool);
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let shim = root.path().join("shim");
    std::fs::create_dir_all(shim.join("bin")).unwrap();
    symlink(&toolkit, shim.join("toolkit")).unwrap();
    for tool in ["ptxas", "nvlink"] {
        symlink(&exe, shim.join("bin").join(tool)).unwrap();
    }
    let whole = root.path().join("whole.s");
    std::fs::write(
        &whole,
        ".version 8.8\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n",
    )
    .unwrap();
    let part = root.path().join("part.s");
    std::fs::write(
        &part,
        ".version 8.8\n.target sm_90\n.visible .func f()\n{\n\tret;\n}\n",
    )
    .unwrap();
    let shim_run = |tool: &str, args: &[&str], fail_ewp: bool| {
        let _ = std::fs::remove_file(&log);
        let mut c = Command::new(shim.join("bin").join(tool));
        c.args(args).current_dir(root.path());
        if fail_ewp {
            c.env("FAIL_EWP", "1");
        }
        let o = run(&mut c);
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        (o, logged)
    };
    let wrapper_args = |file: &str| {
        [
            "-m64",
            "-c",
            file,
            "-O2",
            "-arch",
            "sm_90",
            "-o",
            "out.cubin",
        ]
        .map(String::from)
    };
    let args = wrapper_args("whole.s");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (o, logged) = shim_run("ptxas", &args, false);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        logged,
        "ptxas -m64 -ewp whole.s -O2 -arch sm_90 -o out.cubin\n"
    );
    assert_eq!(stdout(&o), "compiled\n");
    // -ewp refused: the relocatable compile, and only its messages.
    let (o, logged) = shim_run("ptxas", &args, true);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        logged,
        "ptxas -m64 -ewp whole.s -O2 -arch sm_90 -o out.cubin\n\
         ptxas -m64 -c whole.s -O2 -arch sm_90 -o out.cubin\n"
    );
    assert!(!stderr(&o).contains("ewp refused"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("whole-program compile (-ewp) failed; compiling relocatable code"),
        "{}",
        stderr(&o)
    );
    // Not a whole program: as given.
    let args = wrapper_args("part.s");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, logged) = shim_run("ptxas", &args, false);
    assert_eq!(
        logged,
        "ptxas -m64 -c part.s -O2 -arch sm_90 -o out.cubin\n"
    );
    // nvlink: as given, with its exit status.
    let (o, logged) = shim_run(
        "nvlink",
        &["-arch", "sm_90", "out.cubin", "-o", "a.img"],
        false,
    );
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(logged, "nvlink -arch sm_90 out.cubin -o a.img\n");
    // A shim whose toolkit link names itself: the shim it starts stops with
    // an error (not a shim that starts itself again and again), and the
    // first passes its status on.
    let looped = root.path().join("looped");
    std::fs::create_dir_all(looped.join("bin")).unwrap();
    symlink(&looped, looped.join("toolkit")).unwrap();
    symlink(&exe, looped.join("bin").join("ptxas")).unwrap();
    let o = run(Command::new(looped.join("bin/ptxas"))
        .args(&args)
        .current_dir(root.path()));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("was started by a shim") && stderr(&o).matches("error").count() == 1,
        "{}",
        stderr(&o)
    );
}

/// Unknown architectures are usage errors listing the valid forms; missing
/// CUDA tools and a missing device runtime say what is missing and where
/// it was looked for.
#[test]
fn clang_flags_errors_name_what_is_missing() {
    for bad in ["sm_91", "gfx90a:xnack", "sm_90,native"] {
        let mut c = offload();
        c.args(["clang-flags", "--offload-arch", bad]);
        let err = fails(&mut c);
        assert_eq!(run(&mut c).status.code(), Some(2), "{bad}");
        assert!(err.contains("GPU architecture"), "{err}");
        assert!(
            err.contains("sm_90") && err.contains("gfx90a") || err.contains("xnack+"),
            "{err}"
        );
    }
    fails(offload().arg("clang-flags"));
    fails(offload().args(["clang-flags", "--offload-arch=sm_90", "--json", "--lines"]));
    for n in ["0", "17", "four"] {
        let mut c = offload();
        c.args(["clang-flags", "--offload-arch=sm_90", "--interleave", n]);
        let err = fails(&mut c);
        assert!(err.contains("--interleave"), "{n}: {err}");
    }

    let (root, exe, _cuda) = installed_with_device_runtime(".tmp");
    let empty = tempfile::tempdir().unwrap();
    let mut c = clang_flags(&exe, Some(empty.path()), &["--offload-arch=sm_90"]);
    let err = fails(&mut c);
    assert_eq!(run(&mut c).status.code(), Some(1));
    assert!(
        err.contains(&format!(
            "OFFLOAD_CUDA_PATH={} is not a CUDA toolkit clang can use (no bin/ptxas, no bin/nvlink",
            empty.path().display()
        )),
        "{err}"
    );
    drop(root);

    // A copied `offload` (a build tree's) with neither runtime nor toolkit:
    // every problem in one line.
    let (root, exe) = offload_copy();
    let root = root.path().canonicalize().unwrap();
    let err = fails(&mut clang_flags(
        &exe,
        None,
        &["--offload-arch=sm_90,gfx90a"],
    ));
    for triple in [NVPTX, AMDGCN] {
        let dir = root.join("devicertl").join(triple);
        let want = format!(
            "device runtime for {triple} not found at {} (needs",
            dir.display()
        );
        assert!(err.contains(&want), "{err}");
    }
    assert!(err.contains("build it with devicertl/build.sh"), "{err}");
    if !Path::new("/usr/local/cuda/bin/nvlink").exists() {
        assert!(err.contains("no CUDA tools found"), "{err}");
        assert!(
            err.contains("run scripts/setup.sh or set OFFLOAD_CUDA_PATH="),
            "{err}"
        );
    }
}

/// `$(...)` splits words at blanks: a path with one is refused in the
/// one-line output, and --shell, --lines and --null carry it intact.
#[test]
fn clang_flags_paths_with_blanks() {
    let (_root, exe, cuda) = installed_with_device_runtime("with blank ");
    let err = fails(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=gfx90a"],
    ));
    assert!(err.contains("holds a blank or a wildcard"), "{err}");
    assert!(err.contains("--shell") && err.contains("--lines"), "{err}");

    let lines = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90", "--lines"],
    ));
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 11, "{lines:?}");
    assert_eq!(lines[1], "-foffload-lto");
    assert_eq!(lines[2], format!("--cuda-path={}", cuda.display()));
    assert_eq!(lines[6], format!("--cuda-path={}", shim_of(&exe).display()));
    let null = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90", "--null"],
    ));
    assert_eq!(
        null,
        lines.iter().map(|l| format!("{l}\0")).collect::<String>()
    );

    // What --shell prints, evaluated by sh, gives back the flags as words.
    let quoted = ok(&mut clang_flags(
        &exe,
        Some(&cuda),
        &["--offload-arch=sm_90", "--shell"],
    ));
    assert!(quoted.contains("'--cuda-path="), "{quoted}");
    let words = ok(Command::new("sh").arg("-c").arg(format!(
        "eval \"set -- {}\"; printf '%s\\n' \"$@\"",
        quoted.trim_end()
    )));
    assert_eq!(words.lines().collect::<Vec<_>>(), lines);
}

#[test]
fn exec_prepends_the_lib_dir() {
    let dir = lib_dir();
    let out = ok(offload()
        .args(["exec", "sh", "-c", "echo $LD_LIBRARY_PATH"])
        .env("LD_LIBRARY_PATH", "/somewhere:/else"));
    let line = out.trim_end();
    let parts: Vec<&str> = line.split(':').collect();
    assert_eq!(Path::new(parts[0]), dir, "{line}");
    assert_eq!(&parts[1..3], &["/somewhere", "/else"], "{line}");
    if Path::new("/usr/lib/llvm-22/lib").is_dir() {
        assert_eq!(parts.last(), Some(&"/usr/lib/llvm-22/lib"), "{line}");
    }

    // The program's own options and exit status pass through.
    let o = run(offload().args(["exec", "sh", "-c", "exit 7", "--", "-x"]));
    assert_eq!(o.status.code(), Some(7));
    let out = ok(offload().args(["exec", "echo", "--json", "--help", "-o", "x"]));
    assert_eq!(out.trim_end(), "--json --help -o x");

    let o = run(offload().args(["exec", "/nonexistent/program"]));
    assert_eq!(o.status.code(), Some(127));
    let err = stderr(&o);
    assert!(
        err.starts_with("offload: error: cannot run /nonexistent/program"),
        "{err}"
    );
}

/// `exec -v` says what it puts on LD_LIBRARY_PATH; `OFFLOAD_PLUGINS`
/// naming an unknown plugin is an error for `info`, `exec` and `record`.
#[test]
fn exec_verbose_and_unknown_plugins() {
    let o = run(offload().args(["exec", "-v", "true"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("offload exec: LD_LIBRARY_PATH=")
            && err.contains("drop-in libraries first"),
        "{err}"
    );
    if Path::new("/usr/lib/llvm-22/lib").is_dir() {
        assert!(err.contains("/usr/lib/llvm-22/lib last"), "{err}");
    }
    for args in [
        &["info"][..],
        &["exec", "true"],
        &["record", "-o", "/nonexistent/rec", "--", "true"],
    ] {
        let err = fails(offload().args(args).env("OFFLOAD_PLUGINS", "host,bogus"));
        assert!(
            err.contains("OFFLOAD_PLUGINS=host,bogus: unknown plugin 'bogus'")
                && err.contains("plugins of this build: host"),
            "{args:?}: {err}"
        );
    }
    // A bad count is named with its value, and ignored.
    let o = run(offload()
        .args(["info", "--json"])
        .env("OFFLOAD_HOST_DEVICES", "abc"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("OFFLOAD_HOST_DEVICES=\"abc\" ignored"),
        "{}",
        stderr(&o)
    );
}

/// A program run by `offload exec` that launches no kernel gets a note at
/// exit; one that does, none.
#[test]
fn exec_notes_a_program_that_never_offloaded() {
    if !have_clang() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.c"),
        "#include <omp.h>\n#include <stdio.h>\n\
         int main(int argc, char **argv) {\n\
           int x = 0;\n\
           if (argc > 1) {\n\
         #pragma omp target map(tofrom: x)\n\
             x = 1;\n\
           }\n\
           printf(\"devices %d x %d\\n\", omp_get_num_devices(), x);\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    clang(
        &[
            "-fopenmp",
            "-fopenmp-targets=x86_64-unknown-linux-gnu",
            "-o",
            "p",
            "p.c",
        ],
        dir.path(),
    );
    let p = dir.path().join("p");
    let o = run(offload().arg("exec").arg(&p));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("offload exec: note: the program launched no kernel"),
        "{}",
        stderr(&o)
    );
    let o = run(offload().arg("exec").arg(&p).arg("offload"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("x 1"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
}

/// `offload inspect` of a binary with images for several targets says,
/// per image, which devices would load it: native code before bitcode,
/// and nothing for a foreign target.
#[test]
fn inspect_says_which_image_each_device_loads() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.c");
    std::fs::write(
        &src,
        "int answer = 1;\nvoid k(void *a, void *i) { (void)a; (void)i; answer++; }\n",
    )
    .unwrap();
    let so = dir.path().join("k.so");
    let bc = dir.path().join("k.bc");
    let ptx = dir.path().join("k.ptx");
    let cc = |args: &[&str], out: &std::path::Path| {
        let ok = Command::new("clang-22")
            .args(args)
            .arg("-o")
            .arg(out)
            .arg(&src)
            .status()
            .expect("clang-22 (scripts/setup.sh installs it)")
            .success();
        assert!(ok, "clang-22 {args:?}");
    };
    cc(&["-O1", "-fPIC", "-shared"], &so);
    cc(&["-O1", "-c", "-emit-llvm"], &bc);
    cc(
        &[
            "--target=nvptx64-nvidia-cuda",
            "-march=sm_80",
            "-Xclang",
            "-target-feature",
            "-Xclang",
            "+ptx78",
            "-nogpulib",
            "-ffreestanding",
            "-S",
        ],
        &ptx,
    );
    let packed = dir.path().join("mixed.bin");
    let host = "triple=x86_64-unknown-linux-gnu";
    let out = Command::new(env!("CARGO_BIN_EXE_offload"))
        .args(["pack", "-o"])
        .arg(&packed)
        .arg("--image")
        .arg(format!(
            "{},triple=nvptx64-nvidia-cuda,arch=sm_80,image-kind=ptx",
            ptx.display()
        ))
        .arg("--image")
        .arg(format!("{},{host},image-kind=bc", bc.display()))
        .arg("--image")
        .arg(format!("{},{host},image-kind=o", so.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_offload"))
        .args(["inspect", "--json"])
        .arg(&packed)
        .env("OFFLOAD_PLUGINS", "host")
        .env("OFFLOAD_HOST_DEVICES", "2")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let loaded = |i: usize| v["images"][i]["loaded_by"].as_array().unwrap().len();
    assert_eq!((loaded(0), loaded(1), loaded(2)), (0, 0, 2), "{v}");
    assert_eq!(v["images"][0]["runnable_on"].as_array().unwrap().len(), 0);
    assert_eq!(
        v["images"][1]["runnable_on"].as_array().unwrap().len(),
        2,
        "bitcode runs (compiled)"
    );
}
