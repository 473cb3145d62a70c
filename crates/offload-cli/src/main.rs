//! `offload`: the command-line companion of the offload runtime.
//!
//! ```text
//! offload info [--json]                 platforms, devices and their properties
//! offload inspect FILE [--json]         the device images a file holds
//! offload pack -o OUT --image FILE[,key=value...]...
//!              [--format offload-binary|1omp] [--meta KEY=VALUE]...
//!                                       build an OffloadBinary or a 1OMP image
//! offload lib-dir                       directory of the drop-in libomptarget /
//!                                       libLLVMOffload shared libraries
//! offload exec PROGRAM [ARGS...]        run PROGRAM against those libraries
//! offload clang-flags --offload-arch=ARCH[,ARCH...] [--shell|--lines|--null|--json]
//!                                       clang-22 flags that build an OpenMP
//!                                       program for NVIDIA/AMD GPUs against
//!                                       the project's device runtime
//! offload serve [--listen ADDR:PORT]    expose this machine's devices over gRPC
//! offload record -o DIR -- PROGRAM      record PROGRAM's kernel launches
//! offload replay DIR [--verify]         run recorded launches again, on any device
//! offload completions SHELL             shell completion script
//! ```
//!
//! Every subcommand lives in its own module and returns an error instead of
//! panicking; `main` prints it as a single `offload: error: ...` line and
//! exits with status 1 (2 for command-line usage errors; `exec` uses 126/127
//! when the program cannot be started, like a shell; `info` exits 1 when no
//! device can run kernels and 2 on errors; `clang-flags` exits 2 for an
//! unknown GPU architecture).
//!
//! Run by the name `ptxas` or `nvlink` (the links in a CUDA tool shim
//! folder that `clang-flags` makes), `offload` is that tool instead: see
//! [`cuda_shim`].

mod clang_flags;
mod cuda_shim;
mod exec;
mod generate;
mod info;
mod inspect;
mod lib_dir;
mod output;
mod pack;
mod progress;
mod record;
mod serve;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Command-line interface of the offload runtime.
#[derive(Parser, Debug)]
#[command(name = "offload", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List platforms (initialised plugins), their devices and device properties.
    Info(info::Args),
    /// Show the device images a file holds (host binary, OffloadBinary, 1OMP, ELF, bitcode).
    Inspect(inspect::Args),
    /// Write an OffloadBinary (or a 1OMP-headed image) from image files.
    Pack(pack::Args),
    /// Print (and set up) the directory holding the drop-in shared libraries.
    LibDir(lib_dir::Args),
    /// Run a program with the drop-in libraries first on LD_LIBRARY_PATH
    /// (and LLVM's /usr/lib/llvm-22/lib last, for libomp.so.5; -v shows it).
    Exec(exec::Args),
    /// Print the clang-22 flags that build an OpenMP program for GPUs against
    /// the project's device runtime: `clang-22 -fopenmp $(offload clang-flags
    /// --offload-arch=sm_90) prog.c`.
    ClangFlags(clang_flags::Args),
    /// Expose this machine's devices to remote clients over gRPC.
    Serve(serve::Args),
    /// Run a program and record its kernel launches (image, arguments,
    /// device memory before and after) for `offload replay`.
    Record(record::RecordArgs),
    /// Replay recorded kernel launches on any device, optionally verifying
    /// the memory they leave against the recording.
    Replay(record::ReplayArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(generate::CompletionsArgs),
    /// Write man pages for `offload` and its commands into a directory.
    Man(generate::ManArgs),
    /// One session of `offload serve` (started by the server, not by hand).
    #[command(hide = true)]
    ServeWorker,
}

/// An error that asks for a specific exit status.
#[derive(Debug)]
pub struct ExitStatusError {
    pub status: u8,
    pub error: anyhow::Error,
}

impl std::fmt::Display for ExitStatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for ExitStatusError {}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Info(a) => info::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Pack(a) => pack::run(a),
        Command::LibDir(a) => lib_dir::run(a),
        Command::Exec(a) => exec::run(a),
        Command::ClangFlags(a) => clang_flags::run(a),
        Command::Serve(a) => serve::run(a),
        Command::ServeWorker => serve::run_worker(),
        Command::Record(a) => record::record(a),
        Command::Replay(a) => record::replay(a),
        Command::Completions(a) => generate::completions(a, Cli::command()),
        Command::Man(a) => generate::man(a, Cli::command()),
    }
}

/// An error when `OFFLOAD_PLUGINS` names a plugin this build does not
/// have (the libraries only warn).
pub fn check_plugin_names() -> anyhow::Result<()> {
    offload_plugins::check_plugin_names(offload_core::Config::get()).map_err(anyhow::Error::msg)
}

/// Prints `offload: error: MESSAGE` as one line.
fn report(message: &str) {
    let one_line: String = message
        .trim()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    eprintln!("offload: error: {one_line}");
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    if let Some(argv0) = argv.next() {
        if let Some(tool) = cuda_shim::tool_of(&argv0) {
            return cuda_shim::run_tool(tool, std::path::Path::new(&argv0), argv.collect());
        }
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                // Help and version text go to stdout with their own status.
                let _ = e.print();
                return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
            }
            // clap's message up to the usage/tips, on one line.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| {
                    !l.starts_with("Usage:")
                        && !l.starts_with("tip:")
                        && !l.starts_with("For more information")
                })
                .filter(|l| !l.is_empty())
                .collect();
            let message = message.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            report(&format!("{message} (see 'offload --help')"));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let status = e
                .downcast_ref::<ExitStatusError>()
                .map(|s| s.status)
                .unwrap_or(1);
            // An empty message is a status without an error (`info` with
            // no usable device).
            let message = format!("{e:#}");
            if !message.is_empty() {
                report(&message);
            }
            ExitCode::from(status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
