//! `LIBOMPTARGET_DEBUG=1` prints the runtime's operations to stderr;
//! `LIBOMPTARGET_PROFILE=<file>` writes them as a trace-event profile.
//! The tests re-run their own binary as a child with the variables set.

use std::process::Command;

use offload_runtime::{Device, LaunchConfig};

const CHILD: &str = "OFFLOAD_DEBUG_TEST_CHILD";

fn exercise_runtime() {
    let dev = Device::host().unwrap();
    let mut b = dev.alloc_zeros::<u32>(16).unwrap();
    b.fill(3).unwrap();
    let _ = b.to_vec().unwrap();
    let _ = dev.load_program(b"garbage").err().unwrap();
    let _ = LaunchConfig::default();
}

#[test]
fn debug_variable_prints_spans_to_stderr() {
    if std::env::var_os(CHILD).is_some() {
        exercise_runtime();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let run = |debug: &str| {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "debug_variable_prints_spans_to_stderr",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("LIBOMPTARGET_DEBUG", debug)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let on = run("1");
    for op in [
        "runtime_init",
        "alloc",
        "fill",
        "copy_from_device",
        "load_program",
    ] {
        assert!(on.contains(op), "missing span '{op}' in:\n{on}");
    }
    let off = run("0");
    assert!(
        !off.contains("runtime_init"),
        "no output without the variable:\n{off}"
    );
}

#[test]
fn profile_variable_writes_a_trace_event_file() {
    if std::env::var_os(CHILD).is_some() {
        exercise_runtime();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("profile.json");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "profile_variable_writes_a_trace_event_file",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("LIBOMPTARGET_PROFILE", &file)
        .env("LIBOMPTARGET_PROFILE_GRANULARITY", "0")
        .env_remove("LIBOMPTARGET_DEBUG")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(&file).expect("profile written at exit");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let events = json["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = events.iter().filter_map(|e| e["name"].as_str()).collect();
    for want in [
        "alloc",
        "fill",
        "copy_from_device",
        "load_program",
        "Total alloc",
        "process_name",
    ] {
        assert!(names.contains(&want), "no '{want}' event in {names:?}");
    }
    let alloc = events.iter().find(|e| e["name"] == "alloc").unwrap();
    assert_eq!(alloc["ph"], "X");
    assert!(alloc["dur"].as_f64().unwrap() >= 0.0);
    assert!(
        alloc["args"]["detail"]
            .as_str()
            .unwrap()
            .contains("size=64"),
        "{alloc}"
    );
}
