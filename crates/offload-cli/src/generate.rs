//! `offload completions SHELL` and `offload man DIR`: shell completions and
//! man pages generated from the command-line definition itself, so they
//! always match `--help`. The install script and the Debian package run
//! them at install time.

use std::path::PathBuf;

use anyhow::Context;

use crate::output;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Directory to write `offload.1` and one `offload-COMMAND.1` per
    /// command into (created if missing).
    dir: PathBuf,
}

/// Prints the completion script for `args.shell` on standard output.
pub fn completions(args: CompletionsArgs, mut cli: clap::Command) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cli, "offload", &mut script);
    output::emit(&String::from_utf8_lossy(&script))
}

/// Writes the man pages into `args.dir`.
pub fn man(args: ManArgs, cli: clap::Command) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    clap_mangen::generate_to(cli, &args.dir)
        .with_context(|| format!("cannot write man pages into {}", args.dir.display()))
}
