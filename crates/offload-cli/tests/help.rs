//! `offload --help` lists every user-facing subcommand, in the command list
//! and in the one-line summary above it; only the internal `serve-worker`
//! stays hidden.

use std::process::Command;

const SUBCOMMANDS: [&str; 11] = [
    "info",
    "inspect",
    "pack",
    "lib-dir",
    "exec",
    "clang-flags",
    "serve",
    "record",
    "replay",
    "completions",
    "man",
];

#[test]
fn help_lists_every_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_offload"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let summary = help.lines().next().unwrap_or("");
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for sub in SUBCOMMANDS {
        assert!(listed.contains(&sub), "`{sub}` not listed:\n{help}");
        assert!(
            summary.contains(sub),
            "summary line does not name `{sub}`: {summary}"
        );
    }
    assert!(
        !listed.contains(&"serve-worker"),
        "serve-worker is internal:\n{help}"
    );
}
