//! `offload exec PROGRAM ARGS...`: run a program against the drop-in
//! libraries.
//!
//! The lib dir (set up as by `offload lib-dir`) goes first on
//! `LD_LIBRARY_PATH`, the existing value follows, and `/usr/lib/llvm-22/lib`
//! (when it exists) comes last so `libomp.so.5` resolves (`-v` prints the
//! value on stderr). The program then replaces this process (`exec`), so its
//! exit status and signals are its own; `OFFLOAD_EXEC_NOTE=1` asks its
//! runtime to say at exit when it launched no kernel on any device.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::lib_dir;
use crate::ExitStatusError;

/// Where clang-22's OpenMP runtime (`libomp.so.5`) lives on Debian/Ubuntu.
pub const LLVM_LIB_DIR: &str = "/usr/lib/llvm-22/lib";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the LD_LIBRARY_PATH the program gets on stderr first.
    #[arg(short, long)]
    verbose: bool,
    /// The program to run and its arguments, passed as they are (options
    /// after PROGRAM, `--help` included, belong to the program).
    #[arg(
        value_name = "PROGRAM [ARGS]",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

/// `lib_dir`, then the non-empty elements of `existing`, then `llvm_lib`
/// (if given and not already present).
pub fn library_path(lib_dir: &Path, existing: Option<&OsStr>, llvm_lib: Option<&Path>) -> OsString {
    let mut parts: Vec<OsString> = vec![lib_dir.as_os_str().to_owned()];
    if let Some(existing) = existing {
        for p in std::env::split_paths(existing) {
            if !p.as_os_str().is_empty() {
                parts.push(p.into_os_string());
            }
        }
    }
    if let Some(l) = llvm_lib {
        if !parts.iter().any(|p| Path::new(p) == l) {
            parts.push(l.as_os_str().to_owned());
        }
    }
    // Joining cannot fail: none of the parts came with a ':' except through
    // split_paths, which removed them; a lib dir containing ':' is refused
    // by `run` before this point.
    let mut out = OsString::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(":");
        }
        out.push(p);
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::check_plugin_names()?;
    if args.verbose {
        let cmd = command_with_libraries(&args.command)?;
        if let Some((_, Some(v))) = cmd.get_envs().find(|(k, _)| *k == "LD_LIBRARY_PATH") {
            eprintln!(
                "offload exec: LD_LIBRARY_PATH={} (the drop-in libraries first{})",
                v.to_string_lossy(),
                if Path::new(LLVM_LIB_DIR).is_dir() {
                    format!(", {LLVM_LIB_DIR} last for libomp.so.5")
                } else {
                    String::new()
                }
            );
        }
    }
    run_with_env(
        &args.command,
        &[(offload_plugins::EXEC_NOTE, OsString::from("1"))],
    )
}

/// `command` with the drop-in libraries first, and `env` set.
pub fn run_with_env(command: &[OsString], env: &[(&str, OsString)]) -> anyhow::Result<()> {
    let err = command_with_libraries(command)?
        .envs(env.iter().map(|(k, v)| (k, v)))
        .exec();
    let program = command.first().map(Path::new).unwrap_or(Path::new(""));
    // `exec` only returns on failure.
    let status = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Err(ExitStatusError {
        status,
        error: anyhow::Error::new(err).context(format!("cannot run {}", program.display())),
    }
    .into())
}

/// `command` (program and arguments) set to run against the drop-in
/// libraries.
pub fn command_with_libraries(command: &[OsString]) -> anyhow::Result<std::process::Command> {
    let dir = lib_dir::ensure()?;
    if dir.path.as_os_str().as_encoded_bytes().contains(&b':') {
        anyhow::bail!(
            "the lib dir {} contains ':' and cannot be put on LD_LIBRARY_PATH",
            dir.path.display()
        );
    }
    let llvm = Path::new(LLVM_LIB_DIR);
    let path = library_path(
        &dir.path,
        std::env::var_os("LD_LIBRARY_PATH").as_deref(),
        llvm.is_dir().then_some(llvm),
    );
    let Some((program, program_args)) = command.split_first() else {
        anyhow::bail!("no program to run");
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(program_args).env("LD_LIBRARY_PATH", path);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_order() {
        let p = library_path(
            Path::new("/x/offload-lib"),
            Some(OsStr::new("/a::/b:")),
            Some(Path::new("/llvm")),
        );
        assert_eq!(p, "/x/offload-lib:/a:/b:/llvm");
        let p = library_path(
            Path::new("/d"),
            Some(OsStr::new("/llvm")),
            Some(Path::new("/llvm")),
        );
        assert_eq!(p, "/d:/llvm");
        assert_eq!(library_path(Path::new("/d"), None, None), "/d");
    }
}
