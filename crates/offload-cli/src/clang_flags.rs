//! `offload clang-flags --offload-arch=ARCH[,ARCH...]`: the clang-22 flags
//! that build an OpenMP program for GPUs against the project's own OpenMP
//! device runtime (`devicertl/`):
//!
//! ```text
//! clang-22 -fopenmp $(offload clang-flags --offload-arch=sm_90,gfx90a) prog.c -o prog
//! ```
//!
//! The same flags serve compiling (`-c`) and linking. `-foffload-lto`
//! first: the device runtime is a bitcode archive, and only a device
//! link-time optimisation inlines it into the kernels (`--no-lto` gives
//! `-fno-offload-lto` instead: programs are right, but every runtime call
//! is a call into the separately compiled runtime). For NVIDIA GPUs
//! (`sm_XX`) clang needs a CUDA toolkit's `ptxas`, `nvlink` and libdevice
//! (`--cuda-path`); without LTO also a bitcode file where it would link
//! LLVM's device runtime into each file (`--libomptarget-nvptx-bc-path`:
//! our empty one, see [`flags`]); and the
//! directory holding our `libompdevice.a` for its device link (clang adds
//! `-lompdevice` itself). For AMD GPUs (`gfxNNN`) it needs no toolkit:
//! `-Xarch_amdgcn -nogpulib` drops the ROCm device libraries for the AMD
//! images only (a plain `-nogpulib` would also drop libdevice and
//! `-lompdevice` for the NVIDIA ones) and the linker finds `libompdevice.a`
//! the same way.
//!
//! With LTO the device link also gets a CUDA tool shim
//! (`-Xoffload-linker-nvptx64-nvidia-cuda --cuda-path=SHIM`, see
//! [`crate::cuda_shim`]) so that ptxas compiles the linked program as a
//! whole, which gives the kernels far fewer registers than clang's
//! relocatable compile; it lives in the build tree's `target/` or in
//! `$XDG_CACHE_HOME/offload` (`~/.cache/offload`), one per toolkit (and
//! `offload` executable), and
//! `--ptxas-relocatable` leaves it out.
//!
//! Where things are found (`-v` says which) depends on where `offload`
//! runs from: an installed one (`<prefix>/bin/offload` next to
//! `<prefix>/lib/offload/`) or the build tree's (`target/<profile>/offload`).
//! - the device runtime, `<triple>/libompdevice.a` (+ `empty.bc`), as
//!   `devicertl/build.sh OUTDIR` lays it out: in `OFFLOAD_DEVICERTL_DIR`
//!   (an OUTDIR) when set; else in `<prefix>/lib/offload/<triple>/`, or in
//!   the build tree's `target/devicertl/<triple>/` (where
//!   `scripts/setup.sh` builds it);
//! - the CUDA tools: `OFFLOAD_CUDA_PATH` when set; else, in the build tree,
//!   those `scripts/setup.sh` installs (`target/cuda-tools/nvidia/cu13`,
//!   CUDA 13.0 from PyPI); else `/usr/local/cuda`.
//!
//! Output: one line for `$(...)`, which splits words at blanks without
//! honouring quotes, so a path with a blank or a wildcard is refused there;
//! `--shell` quotes each flag for `eval`, `--lines` prints one flag per
//! line, `--null` ends each with a NUL byte, `--json` adds where each piece
//! was found. An unknown architecture is a usage error (status 2); a missing
//! runtime or toolkit is status 1, naming what is missing and where it was
//! looked for.

use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::Serialize;

use crate::{lib_dir, output, ExitStatusError};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GPU architectures, comma-separated or repeated: NVIDIA `sm_XX`
    /// (sm_70 and later; CUDA 13 tools: sm_75 and later), AMD
    /// `gfxNNN[:xnack±][:sramecc±]`.
    #[arg(
        long = "offload-arch",
        value_name = "ARCH[,ARCH...]",
        value_delimiter = ',',
        required = true
    )]
    offload_arch: Vec<String>,
    /// Quote each flag for a POSIX shell (for `eval`; needed when a path
    /// holds a blank).
    #[arg(long, conflicts_with_all = ["lines", "null", "json"])]
    shell: bool,
    /// One flag per line (`mapfile -t flags < <(offload clang-flags --lines ...)`).
    #[arg(long, conflicts_with_all = ["null", "json"])]
    lines: bool,
    /// End each flag with a NUL byte (`xargs -0`).
    #[arg(long, conflicts_with = "json")]
    null: bool,
    /// The flags and where each piece was found, as JSON.
    #[arg(long)]
    json: bool,
    /// Say on stderr where each piece was found.
    #[arg(short, long)]
    verbose: bool,
    /// Build without device link-time optimisation: the device runtime is
    /// then called from the kernels, not inlined into them (slower on the
    /// GPU; for comparisons and for toolchains whose LTO fails).
    #[arg(long)]
    no_lto: bool,
    /// Let ptxas compile the linked device program as relocatable code, as
    /// clang does by default (more registers per thread; for comparisons).
    /// Without it, LTO builds for NVIDIA GPUs compile the whole program at
    /// once through a shim of the CUDA tools.
    #[arg(long)]
    ptxas_relocatable: bool,
    /// How many iterations of a loop the device link-time optimisation of
    /// NVIDIA images interleaves (LLVM's loop vectoriser, which keeps a
    /// floating-point reduction's order): several independent loads in
    /// flight per thread, which a sum reduction needs to reach the GPU's
    /// memory bandwidth. 1 leaves LLVM's choice (no interleaving on NVIDIA
    /// GPUs). No effect with --no-lto or on AMD GPUs.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_INTERLEAVE,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    interleave: u32,
}

/// Loop iterations interleaved by default (`--interleave`): on an H200 a
/// 2^27-double sum went from 0.71x to 0.85x of a two-pass CUDA C kernel
/// with 4 (2 and 8 measured the same); BENCHMARKS.md.
pub const DEFAULT_INTERLEAVE: u32 = 4;

/// How the device code is linked and optimised.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLink<'a> {
    pub kind: Link,
    /// The CUDA tool shim for whole-program ptxas (LTO only).
    pub shim: Option<&'a Path>,
    /// `--interleave` (LTO only).
    pub interleave: u32,
}

/// How the device code is linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// `-foffload-lto`: the program and the device runtime optimised
    /// together; the runtime is inlined into the kernels (the default).
    Lto,
    /// `-fno-offload-lto`: each file compiled alone, the runtime linked as
    /// separately compiled code.
    NoLto,
}

/// The GPU vendors clang builds OpenMP images for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
}

impl Vendor {
    /// The device triple: the image's target and the runtime's folder.
    pub fn triple(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvptx64-nvidia-cuda",
            Vendor::Amd => "amdgcn-amd-amdhsa",
        }
    }

    /// The files of the device runtime's folder that the flags name.
    fn runtime_files(self) -> &'static [&'static str] {
        match self {
            Vendor::Nvidia => &["libompdevice.a", "empty.bc"],
            Vendor::Amd => &["libompdevice.a"],
        }
    }
}

/// NVIDIA architectures clang-22 builds OpenMP images for and the device
/// runtime supports (its warp primitives need sm_70).
pub const NVIDIA_ARCHS: &[&str] = &[
    "sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a",
    "sm_100", "sm_100a", "sm_103", "sm_103a", "sm_110", "sm_110a", "sm_120", "sm_120a", "sm_121",
    "sm_121a",
];

/// NVIDIA architectures CUDA 13's ptxas no longer supports.
const NVIDIA_BEFORE_CUDA_13: &[&str] = &["sm_70", "sm_72"];

/// AMD architectures (GFX9 and later) clang-22 builds OpenMP images for.
pub const AMD_ARCHS: &[&str] = &[
    "gfx900",
    "gfx902",
    "gfx904",
    "gfx906",
    "gfx908",
    "gfx909",
    "gfx90a",
    "gfx90c",
    "gfx942",
    "gfx950",
    "gfx1010",
    "gfx1011",
    "gfx1012",
    "gfx1013",
    "gfx1030",
    "gfx1031",
    "gfx1032",
    "gfx1033",
    "gfx1034",
    "gfx1035",
    "gfx1036",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1103",
    "gfx1150",
    "gfx1151",
    "gfx1152",
    "gfx1153",
    "gfx1200",
    "gfx1201",
    "gfx1250",
    "gfx1251",
    "gfx9-generic",
    "gfx9-4-generic",
    "gfx10-1-generic",
    "gfx10-3-generic",
    "gfx11-generic",
    "gfx12-generic",
];

/// One `--offload-arch` value, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arch {
    /// As clang takes it (`sm_90`, `gfx90a:xnack+`).
    pub name: String,
    pub vendor: Vendor,
}

/// Checks one architecture; the error lists the valid forms.
pub fn parse_arch(s: &str) -> Result<Arch, String> {
    if NVIDIA_ARCHS.contains(&s) {
        return Ok(Arch {
            name: s.to_string(),
            vendor: Vendor::Nvidia,
        });
    }
    let base = s.split(':').next().unwrap_or_default();
    if AMD_ARCHS.contains(&base) {
        // The features of a target ID, read as the AMDGPU plugin reads them.
        if let Err(e) = offload_image::amdgpu::TargetId::parse(s) {
            return Err(format!("invalid GPU architecture {e}"));
        }
        return Ok(Arch {
            name: s.to_string(),
            vendor: Vendor::Amd,
        });
    }
    Err(format!(
        "unknown GPU architecture '{s}': valid are NVIDIA {} and AMD {} (AMD optionally with \
         :xnack+/- and :sramecc+/-, e.g. gfx90a:xnack+)",
        NVIDIA_ARCHS.join(", "),
        AMD_ARCHS.join(", ")
    ))
}

/// A CUDA toolkit clang can use.
#[derive(Debug, Clone, Serialize)]
pub struct CudaTools {
    pub path: PathBuf,
    /// `major.minor` from `include/cuda.h`.
    pub version: Option<String>,
    pub found_by: &'static str,
}

/// What clang needs of a CUDA toolkit (relative to its root).
const CUDA_FILES: [&str; 4] = [
    "bin/ptxas",
    "bin/nvlink",
    "nvvm/libdevice/libdevice.10.bc",
    "include/cuda.h",
];

/// Where `scripts/setup.sh` puts the CUDA tools, relative to the directory
/// above the build tree's `offload` (`target/`).
pub const BUILD_TREE_CUDA: &str = "cuda-tools/nvidia/cu13";

/// The last place looked for a CUDA toolkit.
pub const SYSTEM_CUDA: &str = "/usr/local/cuda";

/// What `dir` lacks to be a CUDA toolkit clang can use (empty: nothing).
fn cuda_problems(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut problems = Vec::new();
    for f in CUDA_FILES {
        match std::fs::metadata(dir.join(f)) {
            Ok(m) if m.is_file() => {
                if f.starts_with("bin/") && m.permissions().mode() & 0o111 == 0 {
                    problems.push(format!("{f} is not executable"));
                }
            }
            _ => problems.push(format!("no {f}")),
        }
    }
    problems
}

/// `major.minor` of the toolkit, from `#define CUDA_VERSION 13000` in cuda.h.
fn cuda_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("include/cuda.h")).ok()?;
    let n: u32 = text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("#define CUDA_VERSION")?
            .trim()
            .parse()
            .ok()
    })?;
    Some(format!("{}.{}", n / 1000, n % 1000 / 10))
}

/// Where the running `offload` lives, which decides where it looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `<prefix>/bin/offload` with `<prefix>/lib/offload/` (this path).
    Installed(PathBuf),
    /// `target/<profile>/offload` in the build tree (this path: `target/`).
    BuildTree(PathBuf),
}

impl Layout {
    /// An installed prefix when `<exe dir>/../lib/offload` exists.
    pub fn of(exe_dir: &Path) -> Layout {
        let lib = exe_dir.join(lib_dir::INSTALLED_LIB_DIR);
        if lib.is_dir() {
            Layout::Installed(clean(&lib))
        } else {
            Layout::BuildTree(exe_dir.parent().unwrap_or(exe_dir).to_path_buf())
        }
    }
}

/// The CUDA toolkit: `env` (OFFLOAD_CUDA_PATH) when given, else the one
/// `scripts/setup.sh` installs in the build tree, else `system`.
pub fn find_cuda_tools(
    env: Option<&Path>,
    layout: &Layout,
    system: &Path,
) -> anyhow::Result<CudaTools> {
    let found = |path: &Path, found_by| CudaTools {
        path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        version: cuda_version(path),
        found_by,
    };
    if let Some(dir) = env {
        let problems = cuda_problems(dir);
        if !problems.is_empty() {
            bail!(
                "OFFLOAD_CUDA_PATH={} is not a CUDA toolkit clang can use ({}): point it at a \
                 toolkit's root (DIR/bin/ptxas, DIR/bin/nvlink, DIR/nvvm/libdevice) or unset it",
                dir.display(),
                problems.join(", ")
            );
        }
        return Ok(found(dir, "OFFLOAD_CUDA_PATH"));
    }
    let mut looked = Vec::new();
    if let Layout::BuildTree(target) = layout {
        let dir = target.join(BUILD_TREE_CUDA);
        if cuda_problems(&dir).is_empty() {
            return Ok(found(&dir, "build tree"));
        }
        looked.push(dir.display().to_string());
    }
    if cuda_problems(system).is_empty() {
        return Ok(found(system, "system"));
    }
    looked.push(system.display().to_string());
    let how = match layout {
        Layout::BuildTree(_) => {
            "run scripts/setup.sh or set OFFLOAD_CUDA_PATH=DIR to a CUDA toolkit"
        }
        Layout::Installed(_) => {
            "set OFFLOAD_CUDA_PATH=DIR to a CUDA toolkit (CUDA 13.0 from PyPI: `python3 -m pip \
             install --target T 'nvidia-cuda-nvcc==13.0.*' 'nvidia-nvvm==13.0.*' \
             'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*'` gives DIR=T/nvidia/cu13)"
        }
    };
    bail!(
        "no CUDA tools found (NVIDIA GPUs need ptxas, nvlink and libdevice): {how}; looked in {}",
        looked.join(" and ")
    )
}

/// Where the device runtime of one vendor was found.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRuntime {
    pub triple: &'static str,
    pub path: PathBuf,
    pub found_by: &'static str,
}

/// Where the build tree keeps the device runtime, relative to `target/`:
/// `devicertl/build.sh`'s default.
pub const BUILD_TREE_DEVICERTL: &str = "devicertl";

/// The device runtime for `vendor`: in `env` (OFFLOAD_DEVICERTL_DIR) when
/// given, else in `<prefix>/lib/offload` or the build tree's `target/devicertl`.
pub fn find_device_runtime(
    vendor: Vendor,
    env: Option<&Path>,
    layout: &Layout,
) -> anyhow::Result<DeviceRuntime> {
    let triple = vendor.triple();
    let (dir, found_by, how) = match (env, layout) {
        (Some(dir), _) => (
            dir.join(triple),
            "OFFLOAD_DEVICERTL_DIR",
            "OFFLOAD_DEVICERTL_DIR names an output folder of devicertl/build.sh",
        ),
        (None, Layout::Installed(lib)) => (
            lib.join(triple),
            "installed",
            "reinstall (scripts/install.sh or the package), or set OFFLOAD_DEVICERTL_DIR to an \
             output folder of devicertl/build.sh",
        ),
        (None, Layout::BuildTree(target)) => (
            target.join(BUILD_TREE_DEVICERTL).join(triple),
            "build tree",
            "build it with devicertl/build.sh (scripts/setup.sh does)",
        ),
    };
    let files = vendor.runtime_files();
    if files.iter().all(|f| dir.join(f).is_file()) {
        return Ok(DeviceRuntime {
            triple,
            path: dir.canonicalize().unwrap_or(dir),
            found_by,
        });
    }
    bail!(
        "device runtime for {triple} not found at {} (needs {}): {how}",
        dir.display(),
        files.join(" and ")
    )
}

/// `dir` without `..` components (for messages; nothing is resolved).
fn clean(dir: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in dir.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn utf8(p: &Path) -> anyhow::Result<&str> {
    match p.to_str() {
        Some(s) => Ok(s),
        None => bail!("{} is not a UTF-8 path", p.display()),
    }
}

/// The clang flags for `archs` (checked, deduplicated) with the runtimes
/// and toolkit found for them.
pub fn flags(
    archs: &[Arch],
    runtimes: &[DeviceRuntime],
    cuda: Option<&CudaTools>,
    device_link: DeviceLink<'_>,
) -> anyhow::Result<Vec<String>> {
    let (link, shim) = (device_link.kind, device_link.shim);
    let names: Vec<&str> = archs.iter().map(|a| a.name.as_str()).collect();
    // The device runtime is bitcode: only a link-time optimisation over the
    // program and the runtime together inlines it into the kernels. Without
    // it clang links the runtime named by `--libomptarget-nvptx-bc-path`
    // into each file (ours is empty: one copy of the runtime's team state
    // per file would be wrong across files) and every runtime call is a real
    // call into the separately compiled archive: right, but slow. With LTO
    // clang does not use that file (and warns when it is given).
    let mut f = vec![
        format!("--offload-arch={}", names.join(",")),
        match link {
            Link::Lto => "-foffload-lto",
            Link::NoLto => "-fno-offload-lto",
        }
        .to_string(),
    ];
    let runtime = |vendor: Vendor| runtimes.iter().find(|r| r.triple == vendor.triple());
    if let Some(rt) = runtime(Vendor::Nvidia) {
        let Some(cuda) = cuda else {
            bail!("NVIDIA architectures need CUDA tools");
        };
        f.push(format!("--cuda-path={}", utf8(&cuda.path)?));
        if link == Link::NoLto {
            f.push(format!(
                "--libomptarget-nvptx-bc-path={}",
                utf8(&rt.path.join("empty.bc"))?
            ));
        }
        f.push(format!("-Xoffload-linker-{}", rt.triple));
        f.push(format!("-L{}", utf8(&rt.path)?));
        // The device linker's own toolkit (the last --cuda-path it gets
        // wins): the shim's ptxas compiles the LTO output as a whole.
        if let (Link::Lto, Some(shim)) = (link, shim) {
            f.push(format!("-Xoffload-linker-{}", rt.triple));
            f.push(format!("--cuda-path={}", utf8(shim)?));
        }
        // Interleaving in the device LTO (clang-nvlink-wrapper's LLVM
        // options); ordered reductions let it interleave floating-point
        // sums without reassociating them.
        if link == Link::Lto && device_link.interleave > 1 {
            for opt in [
                format!("-force-vector-interleave={}", device_link.interleave),
                "-force-ordered-reductions".to_string(),
            ] {
                f.push(format!("-Xoffload-linker-{}", rt.triple));
                f.push(format!("--plugin-opt={opt}"));
            }
        }
    }
    if let Some(rt) = runtime(Vendor::Amd) {
        f.extend(["-Xarch_amdgcn".to_string(), "-nogpulib".to_string()]);
        f.push(format!("-Xoffload-linker-{}", rt.triple));
        f.push(format!("-L{}", utf8(&rt.path)?));
    }
    Ok(f)
}

/// Whether `$(...)` passes `flag` on as one word, unchanged: no blanks
/// (word splitting) and no wildcards (pathname expansion).
fn survives_word_splitting(flag: &str) -> bool {
    !flag
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '*' | '?' | '['))
}

/// `flag` quoted for a POSIX shell (as is when nothing needs quoting).
pub fn shell_quote(flag: &str) -> String {
    let plain = !flag.is_empty()
        && flag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-+=:,./@%".contains(c));
    if plain {
        flag.to_string()
    } else {
        format!("'{}'", flag.replace('\'', r"'\''"))
    }
}

/// The checked architectures, in order, without repeats.
fn parse_archs(values: &[String]) -> anyhow::Result<Vec<Arch>> {
    let mut archs: Vec<Arch> = Vec::new();
    for v in values.iter().map(|v| v.trim()) {
        let arch = parse_arch(v).map_err(|e| ExitStatusError {
            status: 2,
            error: anyhow::anyhow!(e),
        })?;
        if !archs.contains(&arch) {
            archs.push(arch);
        }
    }
    Ok(archs)
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

#[derive(Serialize)]
struct Report<'a> {
    flags: &'a [String],
    archs: Vec<ArchReport<'a>>,
    device_runtime: &'a [DeviceRuntime],
    cuda: Option<&'a CudaTools>,
    /// NVIDIA only: how ptxas compiles the linked program.
    #[serde(skip_serializing_if = "Option::is_none")]
    ptxas: Option<PtxasReport<'a>>,
}

#[derive(Serialize)]
struct PtxasReport<'a> {
    /// `whole-program` (through the shim) or `relocatable`.
    mode: &'static str,
    shim: Option<&'a Path>,
}

/// Where the CUDA tool shims live: the build tree's `target/`, else the
/// user's cache.
fn shim_base(layout: &Layout) -> Option<PathBuf> {
    match layout {
        Layout::BuildTree(target) => Some(target.clone()),
        // A relative XDG_CACHE_HOME is to be ignored (XDG base directories).
        Layout::Installed(_) => env_path("XDG_CACHE_HOME")
            .filter(|c| c.is_absolute())
            .or_else(|| env_path("HOME").map(|h| h.join(".cache")))
            .map(|c| c.join("offload")),
    }
}

/// The shim for `cuda`, or None (with a warning when it cannot be made:
/// the build then works, with clang's relocatable compile).
fn cuda_shim_for(cuda: &CudaTools, layout: &Layout) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let made = match shim_base(layout) {
        Some(base) => crate::cuda_shim::ensure(&base, &cuda.path, &exe)
            .map_err(|e| format!("in {}: {e}", base.display()))
            .and_then(|dir| match dir.to_str() {
                Some(_) => Ok(dir),
                None => Err(format!("{} is not a UTF-8 path", dir.display())),
            }),
        None => Err("neither XDG_CACHE_HOME nor HOME is set".to_string()),
    };
    match made {
        Ok(dir) => Some(dir),
        Err(e) => {
            eprintln!(
                "offload clang-flags: warning: cannot make the CUDA tool shim ({e}); ptxas will \
                 compile relocatable device code (more registers per thread)"
            );
            None
        }
    }
}

#[derive(Serialize)]
struct ArchReport<'a> {
    arch: &'a str,
    vendor: Vendor,
    triple: &'static str,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let archs = parse_archs(&args.offload_arch)?;
    let layout = Layout::of(&lib_dir::exe_dir()?);
    let mut vendors: Vec<Vendor> = archs.iter().map(|a| a.vendor).collect();
    vendors.sort();
    vendors.dedup();

    // Every missing piece in one message.
    let mut problems: Vec<String> = Vec::new();
    let rtl_env = env_path("OFFLOAD_DEVICERTL_DIR");
    let mut runtimes = Vec::new();
    for &v in &vendors {
        match find_device_runtime(v, rtl_env.as_deref(), &layout) {
            Ok(rt) => runtimes.push(rt),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    let mut cuda = None;
    if vendors.contains(&Vendor::Nvidia) {
        let env = env_path("OFFLOAD_CUDA_PATH");
        match find_cuda_tools(env.as_deref(), &layout, Path::new(SYSTEM_CUDA)) {
            Ok(c) => cuda = Some(c),
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    if let Some(c) = &cuda {
        let major: u32 = c
            .version
            .as_deref()
            .and_then(|v| v.split('.').next()?.parse().ok())
            .unwrap_or(0);
        for a in &archs {
            if major >= 13 && NVIDIA_BEFORE_CUDA_13.contains(&a.name.as_str()) {
                problems.push(format!(
                    "{} needs a CUDA 12 toolkit: the CUDA {} tools at {} support sm_75 and later \
                     (set OFFLOAD_CUDA_PATH to a CUDA 12 toolkit)",
                    a.name,
                    c.version.as_deref().unwrap_or("?"),
                    c.path.display()
                ));
            }
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    let link = if args.no_lto { Link::NoLto } else { Link::Lto };
    let shim = match (&cuda, link) {
        (Some(c), Link::Lto) if !args.ptxas_relocatable => cuda_shim_for(c, &layout),
        _ => None,
    };
    let device_link = DeviceLink {
        kind: link,
        shim: shim.as_deref(),
        interleave: args.interleave,
    };
    let flags = flags(&archs, &runtimes, cuda.as_ref(), device_link)?;

    if args.verbose {
        for a in &archs {
            eprintln!("offload clang-flags: {} -> {}", a.name, a.vendor.triple());
        }
        for rt in &runtimes {
            eprintln!(
                "offload clang-flags: device runtime for {}: {} ({})",
                rt.triple,
                rt.path.display(),
                rt.found_by
            );
        }
        if let Some(c) = &cuda {
            eprintln!(
                "offload clang-flags: CUDA tools: {} (CUDA {}; {})",
                c.path.display(),
                c.version.as_deref().unwrap_or("of unknown version"),
                c.found_by
            );
            match &shim {
                Some(dir) => eprintln!(
                    "offload clang-flags: ptxas compiles whole programs through {}",
                    dir.display()
                ),
                None => eprintln!("offload clang-flags: ptxas compiles relocatable code"),
            }
        }
    }

    if args.json {
        return output::emit_json(&Report {
            flags: &flags,
            archs: archs
                .iter()
                .map(|a| ArchReport {
                    arch: &a.name,
                    vendor: a.vendor,
                    triple: a.vendor.triple(),
                })
                .collect(),
            device_runtime: &runtimes,
            cuda: cuda.as_ref(),
            ptxas: cuda.as_ref().map(|_| PtxasReport {
                mode: if shim.is_some() {
                    "whole-program"
                } else {
                    "relocatable"
                },
                shim: shim.as_deref(),
            }),
        });
    }
    if args.null {
        return output::emit(&flags.iter().map(|f| format!("{f}\0")).collect::<String>());
    }
    if args.lines {
        return output::emit(&flags.iter().map(|f| format!("{f}\n")).collect::<String>());
    }
    if args.shell {
        let quoted: Vec<String> = flags.iter().map(|f| shell_quote(f)).collect();
        return output::emit(&format!("{}\n", quoted.join(" ")));
    }
    if let Some(bad) = flags.iter().find(|f| !survives_word_splitting(f)) {
        bail!(
            "the flag {bad:?} holds a blank or a wildcard, which `$(offload clang-flags ...)` \
             would split or expand: use `eval \"clang-22 -fopenmp $(offload clang-flags --shell \
             ...) prog.c\"`, or --lines (one flag per line)"
        );
    }
    output::emit(&format!("{}\n", flags.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(s: &str) -> Arch {
        parse_arch(s).unwrap()
    }

    fn rt(vendor: Vendor, path: &str) -> DeviceRuntime {
        DeviceRuntime {
            triple: vendor.triple(),
            path: PathBuf::from(path),
            found_by: "test",
        }
    }

    fn cuda(path: &str) -> CudaTools {
        CudaTools {
            path: PathBuf::from(path),
            version: Some("13.0".into()),
            found_by: "test",
        }
    }

    #[test]
    fn architectures_are_checked() {
        assert_eq!(arch("sm_90").vendor, Vendor::Nvidia);
        assert_eq!(arch("sm_121a").vendor, Vendor::Nvidia);
        assert_eq!(arch("gfx90a").vendor, Vendor::Amd);
        assert_eq!(arch("gfx1100").vendor, Vendor::Amd);
        assert_eq!(
            arch("gfx942:sramecc+:xnack-").name,
            "gfx942:sramecc+:xnack-"
        );
        for bad in [
            "",
            "sm_91",
            "sm_50",
            "SM_90",
            "90",
            "native",
            "gfx",
            "gfx90a:",
            "gfx90a:xnack",
            "gfx90a:xnack*",
            "gfx90a:xnack+:xnack-",
            "gfx90a:foo+",
            "sm_90:xnack+",
        ] {
            let e = parse_arch(bad).unwrap_err();
            assert!(
                e.contains("sm_90") || e.contains("xnack+ or xnack-") || e.contains("set twice"),
                "{bad}: {e}"
            );
        }
        let e = parse_arch("sm_91").unwrap_err();
        assert!(
            e.starts_with("unknown GPU architecture 'sm_91': valid are NVIDIA sm_70"),
            "{e}"
        );
        assert!(
            e.contains("gfx90a") && e.contains("gfx942") && e.contains("gfx1030"),
            "{e}"
        );
        let archs = parse_archs(&["sm_90".into(), "gfx90a".into(), "sm_90".into()]).unwrap();
        assert_eq!(archs, vec![arch("sm_90"), arch("gfx90a")]);
        let e = parse_archs(&["sm_90".into(), "bogus".into()]).unwrap_err();
        assert_eq!(e.downcast_ref::<ExitStatusError>().unwrap().status, 2);
    }

    /// Every AMD architecture users may build for is one the runtime
    /// recognises in a code object's header (or its images would be
    /// refused as of an unknown processor).
    #[test]
    fn every_amd_arch_is_known_to_the_image_reader() {
        for a in AMD_ARCHS {
            assert!(
                offload_image::amdgpu::mach_of(a).is_some(),
                "{a} has no e_flags value in offload_image::amdgpu"
            );
        }
    }

    fn lto(interleave: u32) -> DeviceLink<'static> {
        DeviceLink {
            kind: Link::Lto,
            shim: None,
            interleave,
        }
    }

    #[test]
    fn flags_for_nvidia_amd_and_both() {
        let nv = rt(Vendor::Nvidia, "/rtl/nvptx64-nvidia-cuda");
        let amd = rt(Vendor::Amd, "/rtl/amdgcn-amd-amdhsa");
        let c = cuda("/cuda");
        let sm90 = |kind, shim| {
            let link = DeviceLink {
                kind,
                shim,
                interleave: 1,
            };
            flags(&[arch("sm_90")], std::slice::from_ref(&nv), Some(&c), link).unwrap()
        };
        assert_eq!(
            sm90(Link::Lto, None),
            [
                "--offload-arch=sm_90",
                "-foffload-lto",
                "--cuda-path=/cuda",
                "-Xoffload-linker-nvptx64-nvidia-cuda",
                "-L/rtl/nvptx64-nvidia-cuda",
            ]
        );
        // The shim goes to the device linker alone, after the real toolkit.
        let shim = Path::new("/shim");
        assert_eq!(
            sm90(Link::Lto, Some(shim))[3..],
            [
                "-Xoffload-linker-nvptx64-nvidia-cuda",
                "-L/rtl/nvptx64-nvidia-cuda",
                "-Xoffload-linker-nvptx64-nvidia-cuda",
                "--cuda-path=/shim",
            ]
        );
        // Interleaving goes to the device linker's LTO, after the shim.
        let interleaved = |kind, n| {
            let link = DeviceLink {
                kind,
                shim: Some(shim),
                interleave: n,
            };
            flags(&[arch("sm_90")], std::slice::from_ref(&nv), Some(&c), link).unwrap()
        };
        assert_eq!(
            interleaved(Link::Lto, 4)[7..],
            [
                "-Xoffload-linker-nvptx64-nvidia-cuda",
                "--plugin-opt=-force-vector-interleave=4",
                "-Xoffload-linker-nvptx64-nvidia-cuda",
                "--plugin-opt=-force-ordered-reductions",
            ]
        );
        assert_eq!(interleaved(Link::Lto, 1), sm90(Link::Lto, Some(shim)));
        assert_eq!(interleaved(Link::NoLto, 4), sm90(Link::NoLto, Some(shim)));
        // Without LTO clang's ptxas compiles each file: no shim.
        assert_eq!(
            sm90(Link::NoLto, Some(shim)),
            [
                "--offload-arch=sm_90",
                "-fno-offload-lto",
                "--cuda-path=/cuda",
                "--libomptarget-nvptx-bc-path=/rtl/nvptx64-nvidia-cuda/empty.bc",
                "-Xoffload-linker-nvptx64-nvidia-cuda",
                "-L/rtl/nvptx64-nvidia-cuda",
            ]
        );
        assert_eq!(
            flags(
                &[arch("gfx90a")],
                std::slice::from_ref(&amd),
                None,
                lto(DEFAULT_INTERLEAVE)
            )
            .unwrap(),
            [
                "--offload-arch=gfx90a",
                "-foffload-lto",
                "-Xarch_amdgcn",
                "-nogpulib",
                "-Xoffload-linker-amdgcn-amd-amdhsa",
                "-L/rtl/amdgcn-amd-amdhsa",
            ]
        );
        let both = flags(
            &[arch("sm_80"), arch("gfx942"), arch("sm_90")],
            &[nv.clone(), amd],
            Some(&c),
            lto(1),
        )
        .unwrap();
        assert_eq!(both[0], "--offload-arch=sm_80,gfx942,sm_90");
        assert_eq!(both.len(), 9, "{both:?}");
        assert!(flags(&[arch("sm_90")], &[nv], None, lto(1)).is_err());
    }

    /// A fake toolkit: the files clang needs (ptxas and nvlink executable).
    fn fake_cuda(dir: &Path, version: u32) {
        use std::os::unix::fs::PermissionsExt;
        for f in CUDA_FILES {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("#define CUDA_VERSION {version}\n")).unwrap();
            if f.starts_with("bin/") {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
    }

    #[test]
    fn cuda_tools_are_looked_for_in_order() {
        let t = tempfile::tempdir().unwrap();
        let above = t.path().join("target");
        let tree = Layout::BuildTree(above.clone());
        let installed = Layout::Installed(t.path().join("lib/offload"));
        let system = t.path().join("usr-local-cuda");
        let env = t.path().join("env");
        std::fs::create_dir_all(&env).unwrap();

        let e = find_cuda_tools(None, &tree, &system)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("no CUDA tools found"), "{e}");
        assert!(
            e.contains("run scripts/setup.sh or set OFFLOAD_CUDA_PATH="),
            "{e}"
        );
        let looked = format!(
            "looked in {} and {}",
            above.join(BUILD_TREE_CUDA).display(),
            system.display()
        );
        assert!(e.ends_with(&looked), "{e}");
        // An installed `offload` has no build tree and says how to get tools.
        let e = find_cuda_tools(None, &installed, &system)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("set OFFLOAD_CUDA_PATH=DIR") && e.contains("pip"),
            "{e}"
        );
        assert!(
            e.ends_with(&format!("looked in {}", system.display())),
            "{e}"
        );

        fake_cuda(&system, 12080);
        let c = find_cuda_tools(None, &tree, &system).unwrap();
        assert_eq!((c.found_by, c.version.as_deref()), ("system", Some("12.8")));

        fake_cuda(&above.join(BUILD_TREE_CUDA), 13000);
        let c = find_cuda_tools(None, &tree, &system).unwrap();
        assert_eq!(c.path, above.join(BUILD_TREE_CUDA).canonicalize().unwrap());
        assert_eq!(
            (c.found_by, c.version.as_deref()),
            ("build tree", Some("13.0"))
        );
        assert_eq!(
            find_cuda_tools(None, &installed, &system).unwrap().found_by,
            "system"
        );

        // OFFLOAD_CUDA_PATH is the only place looked when set.
        let e = find_cuda_tools(Some(&env), &tree, &system)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("OFFLOAD_CUDA_PATH={}", env.display())),
            "{e}"
        );
        assert!(
            e.contains("no bin/ptxas, no bin/nvlink, no nvvm/libdevice/libdevice.10.bc"),
            "{e}"
        );
        fake_cuda(&env, 13000);
        use std::os::unix::fs::PermissionsExt;
        let nvlink = env.join("bin/nvlink");
        std::fs::set_permissions(&nvlink, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = find_cuda_tools(Some(&env), &tree, &system)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bin/nvlink is not executable"), "{e}");
    }

    #[test]
    fn device_runtime_where_this_offload_lives() {
        let t = tempfile::tempdir().unwrap();
        let exe_dir = t.path().join("bin");
        std::fs::create_dir_all(&exe_dir).unwrap();
        let tree = Layout::of(&exe_dir);
        assert_eq!(tree, Layout::BuildTree(t.path().to_path_buf()));
        let built = t.path().join("devicertl/nvptx64-nvidia-cuda");
        let e = find_device_runtime(Vendor::Nvidia, None, &tree)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "device runtime for nvptx64-nvidia-cuda not found at {} (needs libompdevice.a \
                 and empty.bc): build it with devicertl/build.sh (scripts/setup.sh does)",
                built.display()
            )
        );
        std::fs::create_dir_all(&built).unwrap();
        std::fs::write(built.join("libompdevice.a"), "").unwrap();
        // The NVIDIA runtime needs empty.bc as well.
        assert!(find_device_runtime(Vendor::Nvidia, None, &tree).is_err());
        std::fs::write(built.join("empty.bc"), "").unwrap();
        let r = find_device_runtime(Vendor::Nvidia, None, &tree).unwrap();
        assert_eq!(
            (r.path, r.found_by),
            (built.canonicalize().unwrap(), "build tree")
        );

        // With `<exe dir>/../lib/offload` it is an installed prefix: only
        // lib/offload/<triple> counts.
        let lib = t.path().join("lib/offload");
        std::fs::create_dir_all(&lib).unwrap();
        let installed = Layout::of(&exe_dir);
        assert_eq!(installed, Layout::Installed(lib.clone()));
        let e = find_device_runtime(Vendor::Amd, None, &installed)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "device runtime for amdgcn-amd-amdhsa not found at {} (needs libompdevice.a): \
                 reinstall",
                lib.join("amdgcn-amd-amdhsa").display()
            )),
            "{e}"
        );
        std::fs::create_dir_all(lib.join("amdgcn-amd-amdhsa")).unwrap();
        std::fs::write(lib.join("amdgcn-amd-amdhsa/libompdevice.a"), "").unwrap();
        let r = find_device_runtime(Vendor::Amd, None, &installed).unwrap();
        assert_eq!(r.found_by, "installed");

        // OFFLOAD_DEVICERTL_DIR is the only place looked when set.
        let e = find_device_runtime(Vendor::Amd, Some(&built), &installed)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("OFFLOAD_DEVICERTL_DIR names an output folder"),
            "{e}"
        );
        let r = find_device_runtime(
            Vendor::Nvidia,
            Some(&t.path().join("devicertl")),
            &installed,
        );
        assert_eq!(r.unwrap().found_by, "OFFLOAD_DEVICERTL_DIR");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("-L/a/b"), "-L/a/b");
        assert_eq!(shell_quote("-L/a b"), "'-L/a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert!(survives_word_splitting("--cuda-path=/x/y-1.2"));
        assert!(!survives_word_splitting("-L/my dir"));
        assert!(!survives_word_splitting("-L/x[1]"));
    }
}
