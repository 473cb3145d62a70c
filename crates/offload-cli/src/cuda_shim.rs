//! The CUDA tool shim: how `offload clang-flags` gets clang-22's OpenMP
//! device link to compile the whole program at once.
//!
//! With `-foffload-lto`, clang's `clang-nvlink-wrapper` optimises the
//! program and the device runtime into one PTX module and then runs
//! `ptxas -c` on it (a relocatable object) and `nvlink`. A relocatable
//! compile allocates registers as if any function might be called from
//! code it cannot see: on sm_90 an OpenMP `target teams distribute parallel
//! for reduction(+:)` kernel gets 64-66 registers that way and 32 when
//! ptxas sees the whole program, a STREAM triad 40 and 30 (omp_bench, CUDA
//! 13.0 ptxas). The
//! count bounds the threads an SM runs, and a memory-bound loop like these
//! is as fast as the loads it keeps in flight. nvcc compiles whole programs
//! by default.
//!
//! So the shim: a folder laid out like a CUDA toolkit's `bin/` whose
//! `ptxas` and `nvlink` are links to this `offload` executable, plus
//! `toolkit`, a link to the real toolkit. `offload clang-flags` makes one
//! per toolkit and `offload` executable ([`ensure`]) and hands it to the device linker alone
//! (`-Xoffload-linker-nvptx64-nvidia-cuda --cuda-path=SHIM`; clang keeps
//! the real toolkit for libdevice and headers). Run as `ptxas`, `offload`
//! ([`run_tool`]) turns `-c` into `-ewp` (extensible whole program: the
//! output still links with nvlink) when the module is a whole program
//! ([`is_whole_program`]), and falls back to the relocatable compile when
//! that fails; everything else goes to the real tool unchanged.
//! `offload clang-flags --ptxas-relocatable` leaves the shim out.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The tools the shim stands in for.
pub const TOOLS: [&str; 2] = ["ptxas", "nvlink"];

/// The shim's link to the real toolkit, next to its `bin/`.
const TOOLKIT_LINK: &str = "toolkit";

/// Set for the real tools a shim starts; a shim that finds it set was
/// started by a shim.
const SHIM_ACTIVE: &str = "OFFLOAD_CUDA_SHIM_ACTIVE";

/// Functions the CUDA driver provides to every program: calls to them do
/// not make a module incomplete.
const DRIVER_FUNCTIONS: [&str; 4] = ["vprintf", "malloc", "free", "__assertfail"];

/// The tool `argv0` names when `offload` runs as one (`.../bin/ptxas`).
pub fn tool_of(argv0: &OsStr) -> Option<&'static str> {
    let name = Path::new(argv0).file_name()?;
    TOOLS.into_iter().find(|t| name == OsStr::new(t))
}

/// Whether a PTX module is a whole program: it has kernels, defines no
/// function another object could call, and calls none but the driver's.
/// (`clang-nvlink-wrapper`'s LTO output is; without `-foffload-lto` its
/// compile of the device runtime alone has no kernels and is not.)
pub fn is_whole_program(ptx: &str) -> bool {
    let mut kernels = false;
    for line in ptx.lines().map(str::trim_start) {
        let words: Vec<&str> = line.split_whitespace().take(3).collect();
        let Some(kind) = words.iter().position(|w| *w == ".entry" || *w == ".func") else {
            continue;
        };
        let linkage = &words[..kind];
        if !linkage
            .iter()
            .all(|w| matches!(*w, ".visible" | ".weak" | ".extern"))
        {
            continue; // not a declaration (`call`, a comment, ...)
        }
        if words[kind] == ".entry" {
            kernels = true;
            continue;
        }
        // A function others may call, or one from another object.
        let callable = linkage.contains(&".visible") || linkage.contains(&".weak");
        let foreign = linkage.contains(&".extern") && !DRIVER_FUNCTIONS.contains(&func_name(line));
        if callable || foreign {
            return false;
        }
    }
    kernels
}

/// The name in `.extern .func (.param .b32 func_retval0) vprintf(...)`.
fn func_name(decl: &str) -> &str {
    let rest = decl.split_once(".func").map_or("", |(_, r)| r).trim_start();
    // Skip a return value list `( ... )`.
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')').map_or("", |(_, r)| r).trim_start(),
        None => rest,
    };
    rest.split(|c: char| c == '(' || c == ';' || c.is_whitespace())
        .next()
        .unwrap_or("")
}

/// The whole-program form of a `ptxas` command line (`-c` -> `-ewp`), when
/// it compiles one PTX file that is a whole program and is not a debug
/// build; `read` gives a file's text.
pub fn whole_program_args(
    args: &[OsString],
    read: impl Fn(&Path) -> Option<String>,
) -> Option<Vec<OsString>> {
    let is = |a: &OsString, s: &str| a.as_os_str() == OsStr::new(s);
    if args.iter().filter(|a| is(a, "-c")).count() != 1
        || args
            .iter()
            .any(|a| is(a, "-g") || is(a, "--device-debug") || is(a, "-ewp"))
    {
        return None;
    }
    // The PTX input: the one word naming a `.s` or `.ptx` file (options'
    // values never do: ptxas takes no other input).
    let inputs: Vec<&OsString> = args
        .iter()
        .filter(|a| {
            let ext = Path::new(a).extension();
            !a.to_string_lossy().starts_with('-')
                && (ext == Some(OsStr::new("s")) || ext == Some(OsStr::new("ptx")))
        })
        .collect();
    let [input] = inputs[..] else { return None };
    if !is_whole_program(&read(Path::new(input))?) {
        return None;
    }
    Some(
        args.iter()
            .map(|a| {
                if is(a, "-c") {
                    "-ewp".into()
                } else {
                    a.clone()
                }
            })
            .collect(),
    )
}

/// `offload` run as `ptxas` or `nvlink` from a shim folder (`argv0` is the
/// path it was run by: `SHIM/bin/TOOL`).
pub fn run_tool(tool: &str, argv0: &Path, args: Vec<OsString>) -> ExitCode {
    let Some(shim) = argv0.parent().and_then(Path::parent) else {
        eprintln!(
            "offload: error: {tool} shim run without its folder ({})",
            argv0.display()
        );
        return ExitCode::from(1);
    };
    let real = shim.join(TOOLKIT_LINK).join("bin").join(tool);
    if std::env::var_os(SHIM_ACTIVE).is_some() {
        // A real tool never starts ptxas or nvlink: this is a shim started
        // by a shim (a `toolkit` link naming a shim, directly or through
        // others), which would otherwise go on one process deeper each time.
        eprintln!(
            "offload: error: the {tool} shim was started by a shim: the real tool {} leads back \
             to one (a shim's `{TOOLKIT_LINK}` link must name a CUDA toolkit, not a shim); run \
             `offload clang-flags` again",
            real.display()
        );
        return ExitCode::from(1);
    }
    if tool == "ptxas" {
        let read = |p: &Path| std::fs::read_to_string(p).ok();
        if let Some(whole) = whole_program_args(&args, read) {
            // Output captured: a failed attempt's messages would only
            // confuse; the relocatable compile below speaks for itself.
            match Command::new(&real)
                .args(&whole)
                .env(SHIM_ACTIVE, "1")
                .output()
            {
                Ok(out) if out.status.success() => {
                    use std::io::Write;
                    let _ = std::io::stdout().write_all(&out.stdout);
                    let _ = std::io::stderr().write_all(&out.stderr);
                    return ExitCode::SUCCESS;
                }
                // Killed (interrupted, out of memory): no second compile.
                Ok(out) if out.status.code().is_none() => return exit_code(out.status),
                _ => eprintln!(
                    "offload (ptxas shim): the whole-program compile (-ewp) failed; compiling \
                     relocatable code (more registers per thread)"
                ),
            }
        }
    }
    match Command::new(&real)
        .args(&args)
        .env(SHIM_ACTIVE, "1")
        .status()
    {
        Ok(status) => exit_code(status),
        Err(e) => {
            eprintln!("offload: error: cannot run {}: {e}", real.display());
            ExitCode::from(1)
        }
    }
}

/// A tool's exit status passed on (a signal as a shell reports it: 128 + N).
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// A stable 64-bit FNV-1a hash (the shim folder's name must not change
/// between builds of `offload`).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Whether `dir` is a complete shim for `toolkit` run by `exe`, made by
/// this user (in a cache others can write to, a folder of theirs could
/// swap its links for their own tools later).
fn is_shim_for(dir: &Path, toolkit: &Path, exe: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let mine = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == me);
    let link = |p: PathBuf| std::fs::read_link(p).ok();
    mine(dir)
        && mine(&dir.join("bin"))
        && link(dir.join(TOOLKIT_LINK)).as_deref() == Some(toolkit)
        && TOOLS
            .iter()
            .all(|t| link(dir.join("bin").join(t)).as_deref() == Some(exe))
}

/// How old a temporary folder must be before it counts as left behind
/// (making a shim takes milliseconds; a folder on a cache shared between
/// hosts or PID namespaces may belong to a live process this one cannot see).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes the temporary folders (`.cuda-shim-HASH.PID`, `...PID.old`)
/// that builds killed while making this shim left behind: owned by this
/// user, older than [`STALE_AFTER`], of processes that no longer run.
fn remove_stale_temps(base: &Path, hash: u64) {
    use std::os::unix::fs::MetadataExt;
    let prefix = format!(".cuda-shim-{hash:016x}.");
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Ok(pid) = rest.trim_end_matches(".old").parse::<libc::pid_t>() else {
            continue;
        };
        let old = |m: &std::fs::Metadata| {
            m.modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_AFTER)
        };
        let stale = entry.metadata().is_ok_and(|m| m.uid() == me && old(&m));
        if stale && pid > 0 && !process_runs(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether process `pid` exists (signal 0 checks without sending).
fn process_runs(pid: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 only checks that `pid` can be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The shim folder for `toolkit` under `base`, made when missing (several
/// builds may race: each makes its own and renames it into place; a stale
/// or broken one is replaced).
pub fn ensure(base: &Path, toolkit: &Path, exe: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;
    let hash = fnv1a(&[toolkit.as_os_str().as_bytes(), exe.as_os_str().as_bytes()]);
    let dir = base.join(format!("cuda-shim-{hash:016x}"));
    for _ in 0..2 {
        if is_shim_for(&dir, toolkit, exe) {
            return Ok(dir);
        }
        std::fs::create_dir_all(base)?;
        remove_stale_temps(base, hash);
        let tmp = base.join(format!(".cuda-shim-{hash:016x}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("bin"))?;
        symlink(toolkit, tmp.join(TOOLKIT_LINK))?;
        for t in TOOLS {
            symlink(exe, tmp.join("bin").join(t))?;
        }
        if std::fs::rename(&tmp, &dir).is_ok() {
            return Ok(dir);
        }
        // Another build's shim, or a broken one: check it again, after
        // moving a broken one aside (a rename, so that a good one another
        // build renames in meanwhile is never the one removed).
        let _ = std::fs::remove_dir_all(&tmp);
        if !is_shim_for(&dir, toolkit, exe) {
            let trash = base.join(format!(".cuda-shim-{hash:016x}.{}.old", std::process::id()));
            if std::fs::rename(&dir, &trash).is_ok() {
                let _ = std::fs::remove_dir_all(&trash);
            }
        }
    }
    if is_shim_for(&dir, toolkit, exe) {
        return Ok(dir);
    }
    Err(std::io::Error::other(format!(
        "{} exists and cannot be replaced",
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = ".version 8.8\n.target sm_90\n.address_size 64\n\
        .extern .func  (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 p0\n)\n;\n\
        .extern .func  (.param .b64 func_retval0) malloc\n(\n\t.param .b64 p0\n)\n;\n\
        .func rtl_fatal\n(\n)\n{\n\tret;\n}\n\
        \t// .weak\tk\n.weak .entry k(\n\t.param .b64 k_param_0\n)\n.maxntid 128\n{\n\
        \t{ // callseq 1, 0\n\tcall.uni rtl_fatal, ();\n\t}\n\tret;\n}\n";

    #[test]
    fn tools_are_known_by_file_name() {
        assert_eq!(
            tool_of(OsStr::new("/x/cuda-shim-1/bin/ptxas")),
            Some("ptxas")
        );
        assert_eq!(tool_of(OsStr::new("nvlink")), Some("nvlink"));
        assert_eq!(tool_of(OsStr::new("/usr/bin/offload")), None);
        assert_eq!(tool_of(OsStr::new("ptxas-wrapper")), None);
    }

    #[test]
    fn whole_programs_are_recognised() {
        assert!(is_whole_program(KERNEL));
        // No kernel: the device runtime alone (builds without LTO).
        assert!(!is_whole_program(".func f()\n{\n\tret;\n}\n"));
        // A function other objects may call, or a call into another object.
        let visible = KERNEL.replace(".func rtl_fatal", ".visible .func rtl_fatal");
        assert!(!is_whole_program(&visible));
        let weak = KERNEL.replace(".func rtl_fatal", ".weak .func rtl_fatal");
        assert!(!is_whole_program(&weak));
        let external =
            format!(".extern .func  (.param .b32 func_retval0) helper\n(\n)\n;\n{KERNEL}");
        assert!(!is_whole_program(&external));
        let entry_visible = KERNEL.replace(".weak .entry", ".visible .entry");
        assert!(is_whole_program(&entry_visible));
    }

    #[test]
    fn extern_function_names_are_read() {
        assert_eq!(
            func_name(".extern .func  (.param .b32 func_retval0) vprintf"),
            "vprintf"
        );
        assert_eq!(func_name(".extern .func free"), "free");
        assert_eq!(func_name(".extern .func g(.param .b32 x);"), "g");
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_a_whole_program_compile_changes() {
        let read = |p: &Path| (p == Path::new("m.s")).then(|| KERNEL.to_string());
        let wrapper = os(&[
            "-m64", "-c", "m.s", "-v", "-O2", "-arch", "sm_90", "-o", "m.cubin",
        ]);
        let whole = whole_program_args(&wrapper, read).unwrap();
        assert_eq!(
            whole,
            os(&["-m64", "-ewp", "m.s", "-v", "-O2", "-arch", "sm_90", "-o", "m.cubin"])
        );
        // Debug builds, other files, no `-c`, two inputs: unchanged.
        let debug = os(&[
            "-m64", "-c", "m.s", "-O0", "-g", "-arch", "sm_90", "-o", "m.cubin",
        ]);
        assert!(whole_program_args(&debug, read).is_none());
        assert!(whole_program_args(&os(&["-c", "other.s", "-o", "o.cubin"]), read).is_none());
        assert!(whole_program_args(&os(&["m.s", "-o", "m.cubin"]), read).is_none());
        assert!(whole_program_args(&os(&["-c", "m.s", "m.s", "-o", "x"]), read).is_none());
        assert!(whole_program_args(&os(&["--version"]), read).is_none());
        // An option's value is not taken for an input.
        let words = |s: &str| s.split(' ').map(OsString::from).collect::<Vec<_>>();
        let valued = words("-c m.s --maxrregcount 32 -e k -o m.cubin");
        let whole = words("-ewp m.s --maxrregcount 32 -e k -o m.cubin");
        assert_eq!(whole_program_args(&valued, read).unwrap(), whole);
    }

    #[test]
    fn the_shim_folder_is_made_once_and_mended() {
        let base = tempfile::tempdir().unwrap();
        let toolkit = Path::new("/opt/cuda");
        let exe = Path::new("/usr/bin/offload");
        let dir = ensure(base.path(), toolkit, exe).unwrap();
        assert!(is_shim_for(&dir, toolkit, exe));
        assert_eq!(std::fs::read_link(dir.join("bin/ptxas")).unwrap(), exe);
        assert_eq!(ensure(base.path(), toolkit, exe).unwrap(), dir);
        // Another toolkit gets its own folder; a broken one is remade.
        let other = ensure(base.path(), Path::new("/other/cuda"), exe).unwrap();
        assert_ne!(other, dir);
        std::fs::remove_file(dir.join("bin/nvlink")).unwrap();
        assert_eq!(ensure(base.path(), toolkit, exe).unwrap(), dir);
        assert!(is_shim_for(&dir, toolkit, exe));
        let leftovers: Vec<_> = std::fs::read_dir(base.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn killed_builds_leftovers_are_removed() {
        let base = tempfile::tempdir().unwrap();
        let (toolkit, exe) = (Path::new("/opt/cuda"), Path::new("/usr/bin/offload"));
        let dir = ensure(base.path(), toolkit, exe).unwrap();
        let hash = dir.file_name().unwrap().to_str().unwrap();
        let hash = hash.strip_prefix("cuda-shim-").unwrap();
        // pid_max is at most 2^22: these processes cannot exist.
        let temp = |name: &str| base.path().join(format!(".cuda-shim-{hash}.{name}"));
        let dead = temp("99999999");
        let dead_old = temp("99999998.old");
        let dead_recent = temp("99999997");
        // The parent process runs (and is not this one).
        let alive = temp(&std::os::unix::process::parent_id().to_string());
        let other = base.path().join(".cuda-shim-0000000000000000.99999999");
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for d in [&dead, &dead_old, &dead_recent, &alive, &other] {
            std::fs::create_dir_all(d.join("bin")).unwrap();
            if d != &dead_recent {
                let f = std::fs::File::open(d).unwrap();
                f.set_modified(an_hour_ago).unwrap();
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
        // Remaking the shim clears this shim's old leftovers of dead
        // processes, and only those.
        assert_eq!(ensure(base.path(), toolkit, exe).unwrap(), dir);
        assert!(!dead.exists() && !dead_old.exists());
        assert!(dead_recent.exists() && alive.exists() && other.exists());
    }
}
