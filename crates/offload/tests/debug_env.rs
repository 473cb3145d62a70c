//! `LIBOMPTARGET_DEBUG=1` prints the runtime's operations to stderr.
//! The test re-runs its own binary as a child with the variable set.

use std::process::Command;

use offload::{Device, LaunchConfig};

const CHILD: &str = "OFFLOAD_DEBUG_TEST_CHILD";

fn exercise_runtime() {
    let dev = Device::host().unwrap();
    let mut b = dev.alloc::<u32>(16).unwrap();
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
