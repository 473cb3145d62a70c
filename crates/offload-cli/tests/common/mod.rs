//! Shared by this crate's integration tests (`mod common;`); each test
//! file uses what it needs.
#![allow(dead_code)]

use std::process::Output;

/// Under `CI=true` a missing tool fails the test instead of skipping it.
pub fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: cannot skip: {why}"
    );
    eprintln!("skipped: {why}");
}

/// A finished command's status, stdout and stderr, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
