//! Shared by this crate's integration tests (`mod common;`).

/// Whether the tools a test needs are here: `true` when `present`; else,
/// locally, a note on stderr and `false` (the caller returns: skipped), but
/// under `CI=true` a test failure, so CI never passes by skipping.
pub fn tools_present(present: bool, what: &str) -> bool {
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: cannot skip: {what} not installed"
        );
        eprintln!("skipped: {what} not installed");
    }
    present
}
