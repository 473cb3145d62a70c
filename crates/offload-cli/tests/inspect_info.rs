//! `offload inspect` on real clang-22 builds (kernels from the entry table,
//! host kernels, plain executables, no linker symbols) and `offload info`
//! against LLVM's `llvm-offload-device-info` (every field, the HOST device,
//! the schema version, the exit status).
//!
//! Under `CI=true` a missing clang-22 or llvm-offload-device-info fails the
//! test instead of skipping it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_offload");
const DEVICE_INFO: &str = "/usr/lib/llvm-22/bin/llvm-offload-device-info";

/// The symbols linkers and C start files define, which are never kernels
/// or program globals.
const LINKER_SYMBOLS: &[&str] = &[
    "__bss_start",
    "_end",
    "_edata",
    "__dso_handle",
    "_DYNAMIC",
    "_GLOBAL_OFFSET_TABLE_",
    "__TMC_END__",
    "__FRAME_END__",
    "_IO_stdin_used",
    "__abi_tag",
    "_init",
    "_fini",
    "completed.0",
    "__do_global_dtors_aux_fini_array_entry",
    "__frame_dummy_init_array_entry",
];

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

fn output(c: &mut Command) -> Output {
    c.output().expect("cannot start the command")
}

fn ok(c: &mut Command) -> String {
    let o = output(c);
    assert!(
        o.status.success(),
        "{c:?} failed: {:?}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(c: &mut Command) -> Value {
    let text = ok(c);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: not JSON:\n{text}"))
}

/// Whether `tool` runs; under `CI=true` its absence fails the test.
fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: cannot skip: {tool} not found"
        );
        eprintln!("skipped: {tool} not found");
    }
    found
}

fn clang(dir: &Path, args: &[&str]) {
    let o = output(Command::new("clang-22").args(args).current_dir(dir));
    assert!(
        o.status.success(),
        "clang-22 {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include")
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| {
            x.as_str()
                .or_else(|| x["name"].as_str())
                .unwrap_or_else(|| panic!("no name: {x}"))
                .to_string()
        })
        .collect()
}

fn assert_no_linker_symbols(img: &Value) {
    for g in names(&img["globals"]) {
        assert!(
            !LINKER_SYMBOLS.contains(&g.as_str()) && !g.starts_with('.'),
            "linker or compiler symbol {g} listed as a global: {img}"
        );
    }
    for k in names(&img["kernels"]) {
        assert!(
            !LINKER_SYMBOLS.contains(&k.as_str()),
            "{k} listed as a kernel"
        );
    }
}

const ONE_REGION: &str = r#"
#include <stdio.h>
int scale = 3;
#pragma omp declare target(scale)
int main(void) {
  int n = 1000;
  double s = 0, a[1000];
  for (int i = 0; i < n; i++) a[i] = i;
#pragma omp target teams distribute parallel for reduction(+ : s) map(to : a)
  for (int i = 0; i < n; i++) s += a[i] * scale;
  printf("%f\n", s);
  return 0;
}
"#;

/// One target region (with teams, parallel and a reduction, whose outlined
/// helpers clang also names `__omp_offloading_...`) is exactly one kernel,
/// in the executable and in the host object; `scale` is the one global.
#[test]
fn inspect_one_target_region_is_one_kernel() {
    if !have("clang-22") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("r.c"), ONE_REGION).unwrap();
    let omp = [
        "-O1",
        "-fopenmp",
        "-fopenmp-targets=x86_64-unknown-linux-gnu",
    ];
    clang(t.path(), &[&omp[..], &["r.c", "-o", "r"]].concat());
    clang(t.path(), &[&omp[..], &["-c", "r.c", "-o", "r.o"]].concat());

    for file in ["r", "r.o"] {
        let path = t.path().join(file);
        let v = json(offload().arg("inspect").arg(&path).arg("--json"));
        assert_eq!(v["format"], "host-binary", "{v}");
        let entries = &v["host_entries"];
        assert_eq!(entries.as_array().unwrap().len(), 2, "{file}: {v}");
        let images = v["images"].as_array().unwrap();
        assert_eq!(images.len(), 1, "{v}");
        let img = &images[0];
        assert_eq!(img["kernel_source"], "host entry table", "{file}");
        let kernels = names(&img["kernels"]);
        assert_eq!(kernels.len(), 1, "{file}: {kernels:?}");
        assert!(
            kernels[0].starts_with("__omp_offloading_") && kernels[0].ends_with("_main_l9"),
            "{file}: {kernels:?}"
        );
        // The kernel is defined in the image, and only it is marked so.
        let marked: Vec<String> = img["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kernel"] == true)
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(marked, kernels, "{file}");
        let globals = &img["globals"];
        assert_eq!(names(globals), ["scale"], "{file}: {globals}");
        assert_eq!(globals[0]["size"], 4);
        assert_no_linker_symbols(img);

        let text = ok(offload().arg("inspect").arg(&path));
        assert!(
            text.contains("kernels (1, from the host entry table):"),
            "{text}"
        );
        assert!(text.contains(&format!("    {}\n", kernels[0])), "{text}");
        assert!(text.contains("globals (1):\n    scale (4 bytes)"), "{text}");
        // The image defines it (inspect would name it otherwise).
        let objects = names(&img["objects"]);
        assert!(objects.iter().any(|o| o == "scale"), "{file}: {objects:?}");
        assert!(text.contains("  objects:"), "{text}");
        assert!(!text.contains("not defined"), "{text}");
    }

    // The device image alone (as llvm-offload-binary extracts it) names the
    // same kernel from its own entry table.
    let dev = t.path().join("dev.so");
    if have("llvm-offload-binary-22") {
        let o = output(
            Command::new("llvm-offload-binary-22")
                .arg(t.path().join("r"))
                .arg(format!(
                    "--image=file={},triple=x86_64-unknown-linux-gnu",
                    dev.display()
                )),
        );
        assert!(o.status.success(), "{o:?}");
        let v = json(offload().arg("inspect").arg(&dev).arg("--json"));
        let img = &v["images"][0];
        assert_eq!(img["kernel_source"], "image entry table", "{v}");
        assert_eq!(names(&img["kernels"]).len(), 1, "{v}");
        assert_eq!(names(&img["globals"]), ["scale"], "{v}");
        assert_no_linker_symbols(img);
    }
}

/// A shared object with two `OFFLOAD_HOST_KERNEL`s lists both (what the
/// host plugin's dlsym finds), not the hidden helper or linker symbols;
/// its exported variable is the one global.
#[test]
fn inspect_host_kernels() {
    if !have("clang-22") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("hk.c"),
        r#"
#include <offload/host_kernel.h>
int table[8];
static int twice(int x) { return 2 * x; }
__attribute__((visibility("hidden"))) int hidden_helper(int x) { return x + 1; }
OFFLOAD_HOST_KERNEL(fill) {
  (void)args;
  table[offload_global_id_x(item) & 7] = twice(hidden_helper(1));
}
OFFLOAD_HOST_KERNEL(bump) { (void)args; (void)item; __atomic_fetch_add(&table[0], 1, 0); }
OFFLOAD_HOST_GROUP_STATIC(sync, int);
OFFLOAD_HOST_KERNEL_BARRIER(sync) { (void)args; offload_group_barrier(item); }
OFFLOAD_HOST_KERNEL_GROUP(sync) { (void)args; (void)group; }
"#,
    )
    .unwrap();
    let inc = format!("-I{}", include_dir().display());
    clang(
        t.path(),
        &["-O2", "-fPIC", "-shared", &inc, "hk.c", "-o", "hk.so"],
    );
    let so = t.path().join("hk.so");
    let v = json(offload().arg("inspect").arg(&so).arg("--json"));
    assert_eq!(v["format"], "elf", "{v}");
    let img = &v["images"][0];
    assert_eq!(img["kernel_source"], "exported symbols");
    let mut kernels = names(&img["kernels"]);
    kernels.sort();
    // The macros' companions (`fill_offload_group`, `fill_offload_groups`,
    // `sync_offload_barrier`, `sync_offload_group_static_size`, the group
    // form's `sync_offload_group(s)`) are neither kernels nor globals.
    assert_eq!(kernels, ["bump", "fill", "sync"], "{v}");
    assert_eq!(names(&img["globals"]), ["table"], "{v}");
    assert_eq!(img["globals"][0]["size"], 32);
    assert_no_linker_symbols(img);
    assert!(
        !img["runnable_on"].as_array().unwrap().is_empty(),
        "the host device runs host kernels: {v}"
    );
    let text = ok(offload().arg("inspect").arg(&so));
    assert!(
        text.contains("kernels (3, from the exported symbols):"),
        "{text}"
    );
}

/// An executable built without -fopenmp-targets holds no device image and
/// runs on no device.
#[test]
fn inspect_plain_executable() {
    if !have("clang-22") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("p.c"),
        "#include <stdio.h>\nint g = 1;\nint main(void) { printf(\"%d\\n\", g); return 0; }\n",
    )
    .unwrap();
    // A PIE (the default) and a classic ET_EXEC executable.
    clang(t.path(), &["p.c", "-o", "pie"]);
    clang(t.path(), &["-no-pie", "p.c", "-o", "nopie"]);
    // -fopenmp alone (no targets) embeds nothing either.
    clang(t.path(), &["-fopenmp", "p.c", "-o", "omp"]);
    for file in ["pie", "nopie", "omp"] {
        let path = t.path().join(file);
        let text = ok(offload().arg("inspect").arg(&path));
        assert!(text.contains("no offloading images"), "{file}: {text}");
        assert!(!text.contains("runs on"), "{file}: {text}");
        assert!(!text.contains("device 0"), "{file}: {text}");
        let v = json(offload().arg("inspect").arg(&path).arg("--json"));
        assert_eq!(v["images"], serde_json::json!([]), "{file}: {v}");
        assert_eq!(v["format"], "host-binary", "{file}: {v}");
    }
}

/// `snake_case` of one of LLVM's labels: "Max Work Group Size" is
/// `max_work_group_size`.
fn snake(label: &str) -> String {
    label.trim().to_lowercase().replace(' ', "_")
}

/// The `Label: value` lines of each device block of llvm-offload-device-info.
fn device_blocks(text: &str) -> Vec<Vec<(String, String)>> {
    let mut blocks: Vec<Vec<(String, String)>> = Vec::new();
    for line in text.lines() {
        if line.starts_with('[') && line.ends_with(']') {
            blocks.push(Vec::new());
        } else if let (Some(block), Some((k, v))) = (blocks.last_mut(), line.split_once(": ")) {
            block.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    blocks
}

fn all_devices(v: &Value) -> Vec<Value> {
    v["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["devices"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// `offload info --json` has a schema version, the HOST device, and every
/// field llvm-offload-device-info prints (LLVM's own liboffload), on every
/// device; text output uses LLVM's labels.
#[test]
fn info_has_every_llvm_field_and_the_host_device() {
    let v = json(offload().args(["info", "--json"]));
    assert_eq!(v["schema_version"], 1, "{v}");
    let devices = all_devices(&v);
    let host: Vec<&Value> = devices.iter().filter(|d| d["uid"] == "HOST").collect();
    assert_eq!(host.len(), 1, "one HOST device: {v}");
    assert_eq!(host[0]["type"], "host");
    assert_eq!(host[0]["usable"], false);
    assert_eq!(host[0]["platform_backend"], "HOST");
    assert!(host[0]["id"].is_null());
    let usable = devices.iter().filter(|d| d["usable"] == true).count();
    assert_eq!(v["usable_devices"], usable, "{v}");
    assert!(usable >= 1, "the host plugin's devices are usable: {v}");

    if !Path::new(DEVICE_INFO).exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: cannot skip: {DEVICE_INFO} not found"
        );
        eprintln!("skipped: {DEVICE_INFO} not found");
        return;
    }
    // LLVM's tool on LLVM's own liboffload (prints at least its HOST device).
    let o = output(Command::new(DEVICE_INFO).env_remove("LD_LIBRARY_PATH"));
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let blocks = device_blocks(&text);
    assert!(!blocks.is_empty(), "no device in:\n{text}");
    let labels: Vec<String> = blocks[0].iter().map(|(k, _)| k.clone()).collect();
    assert!(labels.len() >= 30, "{labels:?}");
    for d in &devices {
        for label in &labels {
            let key = snake(label);
            assert!(
                d.get(&key).is_some_and(|x| !x.is_null()),
                "device {} lacks {key} ({label}): {d}",
                d["uid"]
            );
        }
    }
    // LLVM's HOST device and ours agree where the value is not a fact of
    // the machine or the library version.
    let llvm_host = blocks
        .iter()
        .find(|b| b.iter().any(|(k, v)| k == "UID" && v == "HOST"))
        .expect("LLVM prints a HOST device");
    let ours = host[0];
    for (label, value) in llvm_host {
        let key = snake(label);
        let expect = match key.as_str() {
            "name"
            | "product_name"
            | "uid"
            | "platform_name"
            | "platform_vendor_name"
            | "platform_version"
            | "platform_backend" => Value::from(value.as_str()),
            "type" => Value::from(value.to_lowercase()),
            "max_work_group_size" | "max_work_size" | "num_compute_units" | "address_bits" => {
                Value::from(value.parse::<u64>().unwrap())
            }
            _ => continue,
        };
        assert_eq!(ours[&key], expect, "HOST {label}");
    }

    // The text output carries LLVM's labels.
    let text = ok(offload().arg("info"));
    for label in &labels {
        assert!(
            text.contains(&format!("{label}:")),
            "no {label} in:\n{text}"
        );
    }
    assert!(text.contains("Virtual Host Device (HOST):"), "{text}");
}

/// Our values are what our libLLVMOffload gives llvm-offload-device-info,
/// when the drop-in library is built next to the `offload` executable.
#[test]
fn info_matches_llvm_offload_device_info_on_our_library() {
    if !Path::new(DEVICE_INFO).exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: cannot skip: {DEVICE_INFO} not found"
        );
        return;
    }
    let lib = Path::new(EXE).parent().unwrap().join("libLLVMOffload.so");
    if !lib.is_file() {
        eprintln!("skipped: {} not built", lib.display());
        return;
    }
    let o = output(offload().args(["exec", DEVICE_INFO]));
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let v = json(offload().args(["info", "--json"]));
    let devices = all_devices(&v);
    let blocks = device_blocks(&text);
    assert_eq!(blocks.len(), devices.len(), "{text}\n{v}");
    for block in &blocks {
        let uid = &block.iter().find(|(k, _)| k == "UID").unwrap().1;
        let d = devices
            .iter()
            .find(|d| d["uid"] == uid.as_str())
            .unwrap_or_else(|| panic!("no device {uid} in {v}"));
        for (label, value) in block {
            let key = snake(label);
            let ours = &d[&key];
            let shown = match ours {
                Value::String(s) if key == "type" => s.to_uppercase(),
                Value::String(s) => s.clone(),
                Value::Number(n) if key.ends_with("clock_frequency") || key.ends_with("rate") => {
                    format!("{n} MHz")
                }
                Value::Number(n)
                    if matches!(
                        key.as_str(),
                        "max_mem_allocation_size"
                            | "global_mem_size"
                            | "work_group_shared_mem_size"
                    ) =>
                {
                    format!("{n} B")
                }
                Value::Number(n) => n.to_string(),
                Value::Object(o) if o.contains_key("x") => {
                    format!("{{x: {}, y: {}, z: {}}}", o["x"], o["y"], o["z"])
                }
                Value::Object(o) => {
                    let flags: Vec<&str> = o["flags"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f.as_str().unwrap())
                        .collect();
                    if flags.is_empty() {
                        format!("{} {{ }}", o["value"])
                    } else {
                        format!("{} {{ {} }}", o["value"], flags.join(" "))
                    }
                }
                other => panic!("{key}: {other}"),
            };
            assert_eq!(&shown, value, "device {uid}: {label}");
        }
    }
}

/// Exit status: 0 with a usable device, 1 without (the report still
/// printed, no error line), documented in `--help`.
#[test]
fn info_exit_status() {
    let o = output(offload().arg("info"));
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    for json in [false, true] {
        let mut c = offload();
        // `remote` without a server: a known plugin with no devices.
        c.arg("info")
            .env("OFFLOAD_PLUGINS", "remote")
            .env_remove("OFFLOAD_REMOTE");
        if json {
            c.arg("--json");
        }
        let o = output(&mut c);
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        assert!(o.stderr.is_empty(), "{o:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        if json {
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["usable_devices"], 0);
            assert_eq!(all_devices(&v).len(), 1, "only the HOST device: {v}");
        } else {
            assert!(out.contains("no usable devices"), "{out}");
            assert!(out.contains("Virtual Host Device"), "{out}");
        }
    }

    let help = ok(offload().args(["info", "--help"]));
    assert!(help.contains("Exit status:"), "{help}");
    assert!(help.contains("schema_version"), "{help}");
}

/// An AMD GPU (the fake HSA runtime's gfx1100) reports the target IDs of
/// its ISAs, its own and its family's generic one, in text and JSON;
/// other devices have none.
#[test]
fn info_names_an_amd_gpus_target_ids() {
    let Some(runtime) = test_support::amd::fake_hsa_library() else {
        return;
    };
    let amd = || {
        let mut c = offload();
        c.arg("info")
            .env("OFFLOAD_PLUGINS", "amdgpu")
            .env("OFFLOAD_HSA_RUNTIME", &runtime)
            .env("HSA_FAKE_ARCH", "gfx1100")
            .env("HSA_FAKE_GPUS", "1")
            .env_remove("HSA_XNACK");
        c
    };
    let text = ok(&mut amd());
    let rows: Vec<&str> = text.lines().map(str::trim).collect();
    let arch = rows.iter().position(|l| l.starts_with("Arch")).unwrap();
    assert!(rows[arch].ends_with("gfx1100"), "{text}");
    assert!(
        rows[arch + 1].starts_with("Target IDs")
            && rows[arch + 1].ends_with("gfx1100, gfx11-generic"),
        "{text}"
    );
    let v = json(amd().arg("--json"));
    let devices = all_devices(&v);
    let gpu = devices.iter().find(|d| d["backend"] == "amdgpu").unwrap();
    assert_eq!(
        gpu["target_ids"],
        serde_json::json!(["gfx1100", "gfx11-generic"])
    );
    let host = devices.iter().find(|d| d["uid"] == "HOST").unwrap();
    assert_eq!(host["target_ids"], serde_json::json!([]));
}
