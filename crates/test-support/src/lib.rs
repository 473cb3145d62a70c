//! What the project's integration tests share (a dev-dependency of the
//! crates whose tests build C programs or need outside tools).
//!
//! The rule every test follows: a test that needs a tool which is missing
//! is skipped with a note on stderr, except under `CI=true`, where that is
//! a failure, so CI never passes by skipping ([`skip`], [`require`]).
//!
//! Beside that: the workspace's own build outputs found from any crate's
//! tests ([`offload_bin`], [`drop_in_libraries`]), `offload serve` in a
//! child process ([`serve::Server`]), the fake HSA runtime and AMD code
//! objects built for it ([`amd`]) and, with the `device` feature, bytes
//! in and out of offload-core devices ([`device`]).

pub mod amd;
mod artifacts;
#[cfg(feature = "device")]
pub mod device;
pub mod serve;

pub use artifacts::{built, drop_in_libraries, offload_bin, profile_dir};

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Whether tests run under CI (`CI=true`): no skipping there.
pub fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skip the calling test (it returns after this): a note on stderr, or a
/// panic under `CI=true`.
pub fn skip(why: &str) {
    assert!(!under_ci(), "CI=true: cannot skip: {why}");
    eprintln!("skipped: {why}");
}

/// `present`, after [`skip`]ping with "`what` not installed" when it is not.
pub fn require(present: bool, what: &str) -> bool {
    if !present {
        skip(&format!("{what} not installed"));
    }
    present
}

/// clang-22 (`clang-22` on PATH, else LLVM 22's own directory), or `None`
/// after [`skip`].
pub fn clang() -> Option<PathBuf> {
    static CLANG: OnceLock<Option<PathBuf>> = OnceLock::new();
    let found = CLANG
        .get_or_init(|| {
            ["clang-22", "/usr/lib/llvm-22/bin/clang"]
                .iter()
                .map(PathBuf::from)
                .find(|c| runs(Command::new(c).arg("--version")))
        })
        .clone();
    if found.is_none() {
        skip("clang-22 (apt install clang-22; scripts/setup.sh does)");
    }
    found
}

/// Whether `cmd` starts and exits 0.
pub fn runs(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_names_status_and_both_streams() {
        let o = Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output()
            .unwrap();
        let t = text(&o);
        assert!(t.contains("exit status: 3"), "{t}");
        assert!(t.contains("stdout:\nout\n"), "{t}");
        assert!(t.contains("stderr:\nerr\n"), "{t}");
    }

    #[test]
    fn present_tools_are_required_without_a_note() {
        assert!(require(true, "anything"));
        assert!(runs(Command::new("true").arg("x")));
        assert!(!runs(&mut Command::new("false")));
        assert!(!runs(&mut Command::new("/nonexistent/tool")));
    }
}
