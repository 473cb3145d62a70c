//! `offload-bench` options are parsed strictly: a bad value or an unknown
//! option is a usage error (status 2) naming it, never a silent default.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_offload-bench"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn bad_values_are_errors() {
    for (args, needle) in [
        (&["queue-memory", "-n", "abc"][..], "invalid value 'abc'"),
        (&["launch", "k.so", "--reps", "x"], "--reps"),
        (&["remote", "--quik"], "--quik"),
        (&["launch"], "<SO>"),
        (&["nonsense"], "nonsense"),
    ] {
        let o = bench(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert!(bench(&["--help"]).status.success());
}
