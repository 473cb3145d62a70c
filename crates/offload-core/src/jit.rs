//! LLVM bitcode images compiled for a device at load time.
//!
//! A plugin says what it runs ([`crate::plugin::Device::jit_target`]: a
//! triple, a processor and the kind of output its loader takes); the core
//! compiles a bitcode image for it with an LLVM 22 compiler found at run
//! time (no libLLVM in the runtime, so programs without bitcode images do
//! not pay for it) and loads the result like any native image: a shared
//! object for host devices, PTX text for CUDA devices, a code object for
//! AMD GPUs (clang links it with ld.lld, as for `-fopenmp` builds). The image's
//! `1OMP` `CompileOptions` and `LinkOptions` reach the compiler.
//!
//! Results are cached on disk, keyed by the SHA-256 of the image bytes
//! (or of `LIBOMPTARGET_JIT_REPLACEMENT_MODULE`'s), the target, the
//! options, the `LIBOMPTARGET_JIT_*` settings that change the result and
//! the compiler's identity (its resolved path, size, modification and
//! change times and inode: a cached load runs no process and reads one
//! file, unless IR is to be written out). Each entry holds the SHA-256 of its
//! contents, checked on every load: a corrupt entry is reported (naming the
//! file) and compiled again. Entries are written under a temporary name
//! (mode 0600) and renamed into place, so concurrent processes never see a
//! partial entry.
//!
//! The cache is per user: a directory that is not owned by the effective
//! user, or that is group- or world-writable, is not used (one warning
//! names it; images are then compiled in a private temporary directory and
//! not cached), so another user cannot plant an entry that runs as you.
//!
//! * Compiler, first found: `$OFFLOAD_JIT_COMPILER`, `clang-22` on `PATH`,
//!   `/usr/lib/llvm-22/bin/clang`.
//! * Cache: `$OFFLOAD_JIT_CACHE` (a sandboxed server session's is its own),
//!   else `$XDG_CACHE_HOME/offload/jit`, else `$HOME/.cache/offload/jit`,
//!   else `offload-jit-<uid>` in the temporary directory (created 0700).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use offload_image::metadata::{COMPILE_OPTIONS, LINK_OPTIONS};
use offload_image::{DeviceImage, ImageFormat};

use crate::error::{Error, ErrorCode, Result};
use crate::work_item_loops;

mod controls;
use controls::Controls;

/// What a device's loader takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitOutput {
    /// A position-independent shared object (the host plugin's images).
    SharedObject,
    /// PTX text for NVIDIA GPUs (the CUDA plugin's driver compiles it),
    /// at least the given PTX ISA version (`78`: 7.8, the first with
    /// `sm_90`).
    Ptx { isa: u32 },
    /// An AMD GPU code object (linked by the compiler's ld.lld), for the
    /// processor and features of the target's `cpu` (a target ID:
    /// `gfx90a:sramecc+:xnack-`).
    CodeObject,
}

impl JitOutput {
    /// File extension of a compiled image (and its cache entry).
    fn extension(&self) -> &'static str {
        match self {
            JitOutput::SharedObject => "so",
            JitOutput::Ptx { .. } => "ptx",
            JitOutput::CodeObject => "hsaco",
        }
    }
}

/// What bitcode is compiled to for one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitTarget {
    pub triple: String,
    /// `-march` for the compiler, when the device names one.
    pub cpu: Option<String>,
    pub output: JitOutput,
}

/// Whether `image` is bitcode that `target` can compile: its triple, and
/// for an AMD GPU the processor and features it was built for (clang's
/// bitcode names them on every function, so gfx90a bitcode does not
/// become gfx1100 code), suit the target.
pub fn can_compile(image: &DeviceImage<'_>, target: &JitTarget) -> bool {
    image.format == ImageFormat::Bitcode
        && image
            .triple
            .as_deref()
            .is_none_or(|t| crate::image::triples_compatible(t, &target.triple))
        && (target.output != JitOutput::CodeObject || amd_arch_suits(image, target))
}

/// Whether the arch an AMD GPU bitcode image declares (if any) runs on
/// the target ID the plugin compiles for. (Bitcode that declares none is
/// checked when it is compiled: [`check_amd_bitcode`].)
fn amd_arch_suits(image: &DeviceImage<'_>, target: &JitTarget) -> bool {
    use offload_image::amdgpu::{self, TargetId};
    let Some(Ok(device)) = target.cpu.as_deref().map(TargetId::parse) else {
        return false;
    };
    // Bitcode for the GPU's family's generic processor compiles for it too.
    let generic = amdgpu::generic_of(&device.processor).map(|g| TargetId {
        processor: g.to_string(),
        ..device.clone()
    });
    let arch = image.arch.as_deref();
    crate::image::amd_bitcode_runs_on(arch, &device)
        || generic.is_some_and(|g| crate::image::amd_bitcode_runs_on(arch, &g))
}

/// The version of what the JIT checks and does beyond the compiler's own
/// work (part of every cache key): results made under older rules, which
/// may have let through what these refuse, are not reused.
const RULES: &str = "rules-2";

/// Marks a cache entry: the magic, the SHA-256 of the image that follows,
/// then the image.
const ENTRY_MAGIC: &[u8; 8] = b"OFFJIT1\n";

/// Compile `image` (bitcode) for `target`, or take the cached result.
/// Returns the native image's bytes. LLVM's `LIBOMPTARGET_JIT_*`
/// variables apply ([`Controls`]).
pub fn compile(image: &DeviceImage<'_>, target: &JitTarget) -> Result<Vec<u8>> {
    let controls = Controls::from_env();
    if let Some(path) = &controls.replacement_object {
        return replacement_object(path, target);
    }
    let compiler = compiler()?;
    let replaced;
    let module: &[u8] = match &controls.replacement_module {
        Some(path) => {
            let what = format!("LIBOMPTARGET_JIT_REPLACEMENT_MODULE {}", path.display());
            replaced = std::fs::read(path).map_err(|e| io(&what, e))?;
            &replaced
        }
        None => image.bytes,
    };
    let options = options(image);
    let loops = work_item_loops_wanted(module, target);
    // With work-item loops the result also depends on the transformation
    // and on the processor it is compiled for.
    let host = loops
        .then(|| work_item_loops::HostCpu::of(&compiler.path))
        .flatten();
    let identity = match loops {
        true => format!(
            "{} {} {host:?}",
            compiler.version,
            work_item_loops::version()
        ),
        false => compiler.version.clone(),
    };
    let identity = format!("{identity} {} {RULES}", controls.key());
    let key = cache_key(module, target, &options, &identity);
    // The cache when it is safe to use, else a private scratch directory
    // (removed when `_scratch` drops) and no cache.
    let (dir, cached, _scratch) = match usable_cache_dir() {
        Some(dir) => (dir, true, None),
        None => {
            let scratch = Scratch::new().map_err(|e| io("creating a private directory", e))?;
            (scratch.0.clone(), false, Some(scratch))
        }
    };
    let entry = dir.join(format!("{key}.{}", target.output.extension()));
    // (IR asked for is written by a compilation, cached result or not.)
    if cached && !controls.dumps_ir() {
        if let Some(bytes) = read_entry(&entry) {
            tracing::debug!(entry = %entry.display(), "JIT cache hit");
            return Ok(bytes);
        }
    }
    // Unique per process and call: concurrent compilations of the same
    // image each write their own file; the last rename wins, all identical.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let job = Job {
        compiler,
        target,
        options: &options,
        controls: &controls,
        // Bitcode whose processor no container declared is checked.
        check_processor: image.arch.as_deref().is_none_or(str::is_empty)
            || controls.replacement_module.is_some(),
        loops: loops.then_some(host),
        stem: dir.join(format!(".{key}.{}.{n}", std::process::id())),
    };
    let started = std::time::Instant::now();
    let bytes = job.run(module)?;
    if cached {
        file_entry(&job.named("entry"), &entry, &bytes)?;
    }
    tracing::info!(triple = %target.triple, ms = started.elapsed().as_millis() as u64, entry = %entry.display(), "bitcode image compiled");
    Ok(bytes)
}

/// One compilation that the cache did not answer.
struct Job<'a> {
    compiler: &'a Compiler,
    target: &'a JitTarget,
    options: &'a Options,
    controls: &'a Controls,
    /// Check the processors AMD GPU bitcode names ([`check_amd_bitcode`]).
    check_processor: bool,
    /// Work-item loops wanted, for this host CPU.
    loops: Option<Option<&'a work_item_loops::HostCpu>>,
    /// A private path prefix for the files of this compilation.
    stem: PathBuf,
}

impl Job<'_> {
    /// A file of this compilation (names built whole: `with_extension`
    /// would cut the stem at its last dot).
    fn named(&self, ext: &str) -> PathBuf {
        PathBuf::from(format!("{}.{ext}", self.stem.display()))
    }

    /// Compiles `module`; the native image's bytes. Leaves no file.
    fn run(&self, module: &[u8]) -> Result<Vec<u8>> {
        let input = self.named("bc");
        let output = self.named(self.target.output.extension());
        let transformed = self.named("loops.ll");
        write_private(&input, &[module]).map_err(|e| io("writing the bitcode", e))?;
        let run = self.compile(&input, &transformed, &output);
        let _ = std::fs::remove_file(&input);
        let _ = std::fs::remove_file(&transformed);
        let bytes = run
            .and_then(|()| std::fs::read(&output).map_err(|e| io("reading the compiled image", e)));
        let _ = std::fs::remove_file(&output);
        bytes
    }

    /// The checks, the IR asked for, and the compiler run that writes
    /// `output`.
    fn compile(&self, input: &Path, transformed: &Path, output: &Path) -> Result<()> {
        let (compiler, target) = (self.compiler, self.target);
        if self.check_processor && target.output == JitOutput::CodeObject {
            check_amd_bitcode(compiler, input, target)?;
        }
        let with_loops = self.loops.as_ref().is_some_and(|host| {
            with_work_item_loops(&compiler.path, *host, input, &self.stem, transformed)
        });
        let source = if with_loops { transformed } else { input };
        dump_ir(compiler, target, self.options, self.controls, input, source)?;
        let compile = |source: &Path| {
            Command::new(&compiler.path)
                .args(arguments(
                    target,
                    self.options,
                    self.controls,
                    source,
                    output,
                ))
                .output()
        };
        let run = match compile(source) {
            // The loops are an optimisation: if the compiler rejects them,
            // the image as it came (its barrier kernels on coroutines).
            Ok(failed) if with_loops && !failed.status.success() => {
                let why = String::from_utf8_lossy(&failed.stderr);
                warn(&format!(
                    "JIT: the work-item loops did not compile ({}); barrier kernels run as coroutines",
                    why.lines().next().unwrap_or("")
                ));
                compile(input)
            }
            run => run,
        };
        let run = run.map_err(|e| io(&format!("running {}", compiler.path.display()), e))?;
        match run.status.success() {
            true => Ok(()),
            false => Err(compile_failure(compiler, target, &run)),
        }
    }
}

/// Files `bytes` as the cache entry `entry`, through `staged`.
fn file_entry(staged: &Path, entry: &Path, bytes: &[u8]) -> Result<()> {
    let digest = Sha256::digest(bytes);
    let filed = write_private(staged, &[ENTRY_MAGIC, &digest, bytes])
        .and_then(|()| std::fs::rename(staged, entry));
    filed.map_err(|e| {
        let _ = std::fs::remove_file(staged);
        io(
            &format!("filing the compiled image as {}", entry.display()),
            e,
        )
    })
}

/// Refuses AMD GPU bitcode that no container declared an arch for when
/// its module names another triple or processor (`"target-cpu"` on its
/// functions, which wins over `-march`: gfx1100 functions would become
/// gfx1100 code in a code object marked for this GPU). Without
/// `llvm-dis` beside the compiler the check is skipped.
fn check_amd_bitcode(compiler: &Compiler, input: &Path, target: &JitTarget) -> Result<()> {
    use offload_image::amdgpu::{self, TargetId};
    let Some(dis) = work_item_loops::find_tool(&compiler.path, "llvm-dis") else {
        tracing::debug!("JIT: no llvm-dis beside the compiler: bitcode processors not checked");
        return Ok(());
    };
    let listing = match Command::new(&dis).arg("-o").arg("-").arg(input).output() {
        Ok(o) if o.status.success() => o.stdout,
        // Not readable bitcode: the compiler says why.
        _ => return Ok(()),
    };
    let text = String::from_utf8_lossy(&listing);
    let refuse = |what: String| {
        Err(Error::invalid_binary(format!(
            "JIT: the bitcode image is {what}, not for this GPU ({})",
            target.cpu.as_deref().unwrap_or(&target.triple)
        )))
    };
    let triple = text
        .lines()
        .find_map(|l| l.strip_prefix("target triple = \"")?.strip_suffix('"'));
    if let Some(t) = triple.filter(|t| !crate::image::triples_compatible(t, &target.triple)) {
        return refuse(format!("for {t}"));
    }
    let Some(Ok(device)) = target.cpu.as_deref().map(TargetId::parse) else {
        return Ok(());
    };
    // Its family's generic processor, with the same features.
    let generic = amdgpu::generic_of(&device.processor).map(|g| TargetId {
        processor: g.to_string(),
        ..device.clone()
    });
    let runs = |t: &TargetId| t.runs_on(&device) || generic.as_ref().is_some_and(|g| t.runs_on(g));
    let foreign = text
        .lines()
        .filter(|l| l.starts_with("attributes #"))
        .filter_map(attribute_target)
        .find(|t| !runs(t));
    match foreign {
        Some(t) => refuse(format!("built for {t}")),
        None => Ok(()),
    }
}

/// The target ID a function attribute group of an LLVM IR listing names:
/// its `"target-cpu"`, with the `xnack`/`sramecc` settings of its
/// `"target-features"` (`+xnack`, `-sramecc`; others are "any").
fn attribute_target(line: &str) -> Option<offload_image::amdgpu::TargetId> {
    use offload_image::amdgpu::{Feature, TargetId};
    let value = |key: &str| {
        let rest = line.split(&format!("\"{key}\"=\"")).nth(1)?;
        rest.split('"').next()
    };
    let cpu = value("target-cpu").filter(|c| !c.is_empty())?;
    let features: Vec<&str> = value("target-features").unwrap_or("").split(',').collect();
    let setting = |name: &str| {
        if features.contains(&format!("+{name}").as_str()) {
            Feature::On
        } else if features.contains(&format!("-{name}").as_str()) {
            Feature::Off
        } else {
            Feature::Any
        }
    };
    Some(TargetId {
        processor: cpu.to_string(),
        sramecc: setting("sramecc"),
        xnack: setting("xnack"),
    })
}

/// A host I/O error of the JIT.
fn io(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorCode::HostIo, format!("JIT: {what}: {e}"))
}

/// The error of a compiler run that failed.
fn compile_failure(compiler: &Compiler, target: &JitTarget, run: &std::process::Output) -> Error {
    Error::new(
        ErrorCode::CompileFailure,
        format!(
            "JIT: {} failed on a bitcode image for {} ({}): {}",
            compiler.path.display(),
            target.triple,
            run.status,
            String::from_utf8_lossy(&run.stderr).trim()
        ),
    )
}

/// `LIBOMPTARGET_JIT_REPLACEMENT_OBJECT`: the user's result, loaded in
/// place of compiling (never cached). A relocatable object is linked
/// first for targets whose loader takes linked code (the host's shared
/// objects, AMD GPU code objects), as LLVM links what its JIT emits.
fn replacement_object(path: &Path, target: &JitTarget) -> Result<Vec<u8>> {
    let what = format!("LIBOMPTARGET_JIT_REPLACEMENT_OBJECT {}", path.display());
    let bytes = std::fs::read(path).map_err(|e| io(&what, e))?;
    let relocatable = offload_image::elf::info(&bytes)
        .is_ok_and(|i| i.elf_type == offload_image::elf::ElfType::Relocatable);
    if !relocatable || matches!(target.output, JitOutput::Ptx { .. }) {
        tracing::info!(object = %path.display(), "JIT: replacement object loaded");
        return Ok(bytes);
    }
    let compiler = compiler()?;
    let scratch = Scratch::new().map_err(|e| io("creating a private directory", e))?;
    let output = scratch
        .0
        .join(format!("linked.{}", target.output.extension()));
    let run = Command::new(&compiler.path)
        .args(link_arguments(target, path, &output))
        .output()
        .map_err(|e| io(&format!("running {}", compiler.path.display()), e))?;
    if !run.status.success() {
        return Err(Error::new(
            ErrorCode::CompileFailure,
            format!(
                "JIT: linking {what} failed ({}): {}",
                run.status,
                String::from_utf8_lossy(&run.stderr).trim()
            ),
        ));
    }
    std::fs::read(&output).map_err(|e| io("reading the linked replacement object", e))
}

/// Writes the textual IR that `LIBOMPTARGET_JIT_PRE_OPT_IR_MODULE` and
/// `LIBOMPTARGET_JIT_POST_OPT_IR_MODULE` ask for: `input` before any
/// optimisation, `source` (what is compiled) after the optimisation the
/// compilation applies.
fn dump_ir(
    compiler: &Compiler,
    target: &JitTarget,
    options: &Options,
    controls: &Controls,
    input: &Path,
    source: &Path,
) -> Result<()> {
    let jobs = [
        (
            "LIBOMPTARGET_JIT_PRE_OPT_IR_MODULE",
            &controls.pre_opt_ir,
            input,
            true,
        ),
        (
            "LIBOMPTARGET_JIT_POST_OPT_IR_MODULE",
            &controls.post_opt_ir,
            source,
            false,
        ),
    ];
    for (variable, out, from, pre) in jobs {
        let Some(out) = out else {
            continue;
        };
        // The compilation's own flags, less those that make assembly or
        // link: IR as the compiler sees it.
        let mut args = target_arguments(target);
        args.extend(output_kind_arguments(target));
        args.retain(|a| a != "-S" && a != "-shared");
        args.extend(["-S", "-emit-llvm"].map(String::from));
        args.extend(optimisation_arguments(options, controls));
        if pre && !controls.skip_opt {
            args.extend(["-Xclang", "-disable-llvm-passes"].map(String::from));
        }
        args.extend(["-x".into(), "ir".into(), from.display().to_string()]);
        args.extend(["-o".into(), out.display().to_string()]);
        let run = Command::new(&compiler.path)
            .args(&args)
            .output()
            .map_err(|e| io(&format!("running {}", compiler.path.display()), e))?;
        if !run.status.success() {
            return Err(Error::new(
                ErrorCode::HostIo,
                format!(
                    "JIT: {variable}: could not write the IR to {}: {}",
                    out.display(),
                    String::from_utf8_lossy(&run.stderr).trim()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether the image's barrier kernels should get work-item loops
/// ([`work_item_loops`]): host devices, unless
/// `OFFLOAD_HOST_WORK_ITEM_LOOPS=0`.
fn work_item_loops_wanted(bitcode: &[u8], target: &JitTarget) -> bool {
    target.output == JitOutput::SharedObject
        && std::env::var("OFFLOAD_HOST_WORK_ITEM_LOOPS").map_or(true, |v| v != "0")
        && work_item_loops::may_apply(bitcode)
}

/// Writes the module with group forms to `out`; false (compile the image
/// as it is: its barrier kernels run as coroutines) when none was made.
fn with_work_item_loops(
    compiler: &Path,
    host: Option<&work_item_loops::HostCpu>,
    input: &Path,
    stem: &Path,
    out: &Path,
) -> bool {
    let Some(opt) = work_item_loops::find_opt(compiler) else {
        tracing::debug!(
            "JIT: no opt beside {}: barrier kernels run as coroutines",
            compiler.display()
        );
        return false;
    };
    match work_item_loops::add_group_forms(&opt, host, input, stem, out) {
        Ok((made, skipped)) => {
            for why in &skipped {
                tracing::debug!("JIT: barrier kernel left to coroutines: {why}");
            }
            if !made.is_empty() {
                tracing::info!(kernels = ?made, "JIT: work-item loops for barrier kernels");
            }
            !made.is_empty()
        }
        Err(e) => {
            warn(&format!(
                "JIT: work-item loops not made ({e}); barrier kernels run as coroutines"
            ));
            false
        }
    }
}

/// A cache entry's image, when the entry is there and intact. A damaged
/// entry (wrong magic, short, or contents that do not hash to the stored
/// SHA-256) is reported with a warning naming the file, and recompiled.
fn read_entry(entry: &Path) -> Option<Vec<u8>> {
    let data = match std::fs::read(entry) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            warn(&format!(
                "JIT cache entry {} cannot be read ({e}): recompiling",
                entry.display()
            ));
            return None;
        }
    };
    let header = ENTRY_MAGIC.len() + 32;
    let intact = data.len() >= header
        && data.starts_with(ENTRY_MAGIC)
        && Sha256::digest(&data[header..]).as_slice() == &data[ENTRY_MAGIC.len()..header];
    if !intact {
        warn(&format!(
            "JIT cache entry {} is corrupt (its SHA-256 does not match): recompiling",
            entry.display()
        ));
        return None;
    }
    Some(data[header..].to_vec())
}

/// A one-line warning on stderr (shown whether or not tracing is on), and
/// in the trace.
fn warn(line: &str) {
    tracing::warn!("{line}");
    eprintln!("offload: warning: {line}");
}

/// Write `parts` to a new file at `path` readable by its owner only; an
/// existing file (a name planted in advance) is an error, not followed.
fn write_private(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    for p in parts {
        f.write_all(p)?;
    }
    Ok(())
}

/// A private (0700) directory for one compilation without a cache.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "offload-jit-scratch-{}-{n}-{nanos}",
            std::process::id()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `--target` and `-march` of `target`.
fn target_arguments(target: &JitTarget) -> Vec<String> {
    let mut args = vec![format!("--target={}", target.triple)];
    if let Some(cpu) = &target.cpu {
        args.push(format!("-march={cpu}"));
    }
    args
}

/// What the kind of output asks of the compiler.
fn output_kind_arguments(target: &JitTarget) -> Vec<String> {
    let mut args = Vec::new();
    match target.output {
        JitOutput::SharedObject => {
            args.extend(["-fPIC", "-shared", "-nostdlib"].map(String::from));
        }
        JitOutput::Ptx { isa } => {
            // Assembly only: the driver compiles PTX; no CUDA installation
            // or device library is needed (or looked for).
            args.extend(["-S", "-nogpulib"].map(String::from));
            args.extend(["-Xclang", "-target-feature", "-Xclang"].map(String::from));
            args.push(format!("+ptx{isa}"));
        }
        // clang links AMD GPU code into a code object with ld.lld; the
        // OpenMP device runtime is already in the bitcode.
        JitOutput::CodeObject => args.push("-nogpulib".into()),
    }
    args
}

/// The optimisation level and the image's compile options:
/// `LIBOMPTARGET_JIT_OPT_LEVEL` over the image's own `-O` option over
/// `-O2`; `LIBOMPTARGET_JIT_SKIP_OPT` runs no optimisation pass.
fn optimisation_arguments(options: &Options, controls: &Controls) -> Vec<String> {
    let is_level = |o: &String| o.starts_with("-O");
    let mut args = Vec::new();
    match controls.opt_level {
        Some(level) => args.push(format!("-O{level}")),
        None if !options.compile.iter().any(is_level) => args.push("-O2".into()),
        None => {}
    }
    args.extend(
        options
            .compile
            .iter()
            .filter(|o| controls.opt_level.is_none() || !is_level(o))
            .cloned(),
    );
    if controls.skip_opt {
        args.extend(["-Xclang", "-disable-llvm-passes"].map(String::from));
    }
    args
}

/// The compiler's command line.
fn arguments(
    target: &JitTarget,
    options: &Options,
    controls: &Controls,
    input: &Path,
    output: &Path,
) -> Vec<String> {
    let mut args = target_arguments(target);
    args.extend(output_kind_arguments(target));
    // PTX is assembled, not linked.
    let links = !matches!(target.output, JitOutput::Ptx { .. });
    args.extend(optimisation_arguments(options, controls));
    if links {
        args.extend(options.link.iter().map(|o| format!("-Wl,{o}")));
    }
    args.extend(["-x".into(), "ir".into()]);
    args.push(input.display().to_string());
    if target.output == JitOutput::SharedObject {
        // The compiler's own runtime, linked statically after the input:
        // code compiled for the host may call into it (host_kernel.h's
        // per-CPU-level group loops read `__cpu_features2` through
        // `__builtin_cpu_supports`), and `-nostdlib` leaves it out.
        args.push("-lgcc".into());
    }
    args.extend(["-o".into(), output.display().to_string()]);
    args
}

/// The command line that links the relocatable object `input` as the
/// loader of `target` takes it (not for PTX, which is not linked).
fn link_arguments(target: &JitTarget, input: &Path, output: &Path) -> Vec<String> {
    let mut args = target_arguments(target);
    let host = target.output == JitOutput::SharedObject;
    if host {
        args.extend(["-fPIC", "-shared", "-nostdlib"].map(String::from));
    } else {
        args.push("-nogpulib".into());
    }
    args.push(input.display().to_string());
    if host {
        args.push("-lgcc".into());
    }
    args.extend(["-o".into(), output.display().to_string()]);
    args
}

/// Options the image carries for its compilation.
#[derive(Debug, Default, PartialEq, Eq)]
struct Options {
    compile: Vec<String>,
    link: Vec<String>,
}

fn options(image: &DeviceImage<'_>) -> Options {
    let list = |key: &str| image.metadata.get(key).map(split_list).unwrap_or_default();
    Options {
        compile: list(COMPILE_OPTIONS),
        link: list(LINK_OPTIONS),
    }
}

/// A metadata option list: a YAML flow sequence (`["-O3", "-g"]`) or words.
fn split_list(value: &str) -> Vec<String> {
    let v = value.trim();
    let inner = v
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(v);
    let sep = if v.starts_with('[') { ',' } else { ' ' };
    inner
        .split(sep)
        .map(|s| s.trim().trim_matches('"').trim_matches('\'').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

struct Compiler {
    path: PathBuf,
    version: String,
}

/// The LLVM compiler, looked up once per process.
fn compiler() -> Result<&'static Compiler> {
    static FOUND: OnceLock<std::result::Result<Compiler, String>> = OnceLock::new();
    FOUND.get_or_init(find_compiler).as_ref().map_err(|looked| {
        Error::new(
            ErrorCode::HostToolNotFound,
            format!("JIT: no LLVM 22 compiler for bitcode images: looked for {looked}"),
        )
    })
}

fn find_compiler() -> std::result::Result<Compiler, String> {
    let on_path = |name: &str| -> Vec<PathBuf> {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect())
            .unwrap_or_default()
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    let mut looked = Vec::new();
    match std::env::var_os("OFFLOAD_JIT_COMPILER") {
        Some(p) => {
            let p = PathBuf::from(p);
            looked.push(format!("$OFFLOAD_JIT_COMPILER ({})", p.display()));
            if p.components().count() == 1 {
                candidates.extend(on_path(&p.to_string_lossy()));
            } else {
                candidates.push(p);
            }
        }
        None => {
            looked.push("$OFFLOAD_JIT_COMPILER (unset)".to_string());
            looked.push("clang-22 on PATH".to_string());
            candidates.extend(on_path("clang-22"));
            looked.push("/usr/lib/llvm-22/bin/clang".to_string());
            candidates.push("/usr/lib/llvm-22/bin/clang".into());
        }
    }
    use std::os::unix::fs::MetadataExt;
    for path in candidates {
        let Ok(real) = std::fs::canonicalize(&path) else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&real) else {
            continue;
        };
        if meta.is_file() && meta.mode() & 0o111 != 0 {
            // The compiler's identity for the cache, without running it (a
            // cached load must not pay for a process): the installed
            // binary's resolved path, size, inode, modification and change
            // times change with it (the change time cannot be set back).
            let version = format!(
                "{} {} {} {} {}.{}",
                real.display(),
                meta.len(),
                meta.ino(),
                meta.mtime(),
                meta.ctime(),
                meta.ctime_nsec()
            );
            return Ok(Compiler { path, version });
        }
    }
    Err(looked.join(", "))
}

/// Where compiled images are kept (see the module documentation); not yet
/// checked (`usable_cache_dir` checks it).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OFFLOAD_JIT_CACHE").filter(|d| !d.is_empty()) {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("offload/jit");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".cache/offload/jit"),
        // SAFETY: geteuid cannot fail.
        None => std::env::temp_dir().join(format!("offload-jit-{}", unsafe { libc::geteuid() })),
    }
}

/// The cache directory, created (0700) when missing, if it is safe to use:
/// a directory (not a symbolic link) owned by the effective user and not
/// writable by its group or others. Otherwise None, with one warning per
/// process naming the directory and why.
fn usable_cache_dir() -> Option<PathBuf> {
    let dir = cache_dir();
    match check_cache_dir(&dir) {
        Ok(()) => Some(dir),
        Err(why) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                warn(&format!(
                    "JIT cache {} not used: {why}; bitcode images are compiled without a cache",
                    dir.display()
                ))
            });
            None
        }
    }
}

fn check_cache_dir(dir: &Path) -> std::result::Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(format!("cannot create it: {e}"));
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a directory (a symbolic link or a file)".into());
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "it is owned by uid {}, not by uid {me}",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "it is writable by its group or by others (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// SHA-256 over everything that decides the output, as hex. Each part is
/// followed by its length, so no two different inputs run together.
fn cache_key(bytes: &[u8], target: &JitTarget, options: &Options, compiler: &str) -> String {
    let mut h = Sha256::new();
    let mut eat = |part: &[u8]| {
        h.update(part);
        h.update((part.len() as u64).to_le_bytes());
    };
    eat(bytes);
    eat(target.triple.as_bytes());
    eat(target.cpu.as_deref().unwrap_or("").as_bytes());
    eat(format!("{:?}", target.output).as_bytes());
    for o in &options.compile {
        eat(b"compile");
        eat(o.as_bytes());
    }
    for o in &options.link {
        eat(b"link");
        eat(o.as_bytes());
    }
    eat(compiler.as_bytes());
    h.finalize()
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            use std::fmt::Write;
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> JitTarget {
        JitTarget {
            triple: "x86_64-unknown-linux-gnu".into(),
            cpu: None,
            output: JitOutput::SharedObject,
        }
    }

    #[test]
    fn keys_change_with_every_input() {
        let t = target();
        let o = Options::default();
        let base = cache_key(b"BC\xc0\xde", &t, &o, "clang 22");
        assert_eq!(base.len(), 64);
        assert_eq!(base, cache_key(b"BC\xc0\xde", &t, &o, "clang 22"));
        assert_ne!(base, cache_key(b"BC\xc0\xdf", &t, &o, "clang 22"));
        assert_ne!(base, cache_key(b"BC\xc0\xde", &t, &o, "clang 23"));
        let mut cpu = target();
        cpu.cpu = Some("znver4".into());
        assert_ne!(base, cache_key(b"BC\xc0\xde", &cpu, &o, "clang 22"));
        let opts = Options {
            compile: vec!["-O3".into()],
            link: vec![],
        };
        assert_ne!(base, cache_key(b"BC\xc0\xde", &t, &opts, "clang 22"));
    }

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("offload-jit-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn foreign_or_shared_cache_directories_are_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("dirs");
        check_cache_dir(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "created private");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = check_cache_dir(&d).unwrap_err();
        assert!(why.contains("writable by its group or by others"), "{why}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            let c = std::ffi::CString::new(d.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path.
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 4321, 4321) }, 0);
            let why = check_cache_dir(&d).unwrap_err();
            assert!(why.contains("owned by uid 4321"), "{why}");
        }
        let link = scratch("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(
            check_cache_dir(&link).is_err(),
            "a symbolic link is not used"
        );
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn entries_are_verified_on_load() {
        let d = scratch("entries");
        std::fs::create_dir_all(&d).unwrap();
        let entry = d.join("k.so");
        assert_eq!(read_entry(&entry), None, "missing");
        let image = b"\x7fELF a compiled image".to_vec();
        let digest = Sha256::digest(&image);
        write_private(&entry, &[ENTRY_MAGIC, &digest, &image]).unwrap();
        assert_eq!(read_entry(&entry).as_deref(), Some(&image[..]));
        assert!(
            write_private(&entry, &[b"x"]).is_err(),
            "never overwrites in place"
        );
        let mut bytes = std::fs::read(&entry).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&entry, &bytes).unwrap();
        assert_eq!(read_entry(&entry), None, "a flipped byte is caught");
        std::fs::write(&entry, &image).unwrap();
        assert_eq!(read_entry(&entry), None, "an entry without a header");
        std::fs::write(&entry, b"").unwrap();
        assert_eq!(read_entry(&entry), None, "an empty entry");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn option_lists_from_metadata() {
        assert_eq!(split_list(r#"["-O3", "-g"]"#), vec!["-O3", "-g"]);
        assert_eq!(split_list("-O1 -ffast-math"), vec!["-O1", "-ffast-math"]);
        assert!(split_list("[]").is_empty());
        let args = arguments(
            &target(),
            &Options {
                compile: vec!["-O3".into()],
                link: vec!["--no-undefined".into()],
            },
            &Controls::default(),
            Path::new("in.bc"),
            Path::new("out.so"),
        );
        assert!(args.contains(&"-O3".to_string()));
        assert!(!args.contains(&"-O2".to_string()), "{args:?}");
        assert!(args.contains(&"-Wl,--no-undefined".to_string()));
        assert_eq!(args.last().map(String::as_str), Some("out.so"));
        // The compiler runtime is linked after the input (a static archive
        // only resolves what came before it).
        let at = |a: &str| args.iter().position(|x| x == a).unwrap();
        assert!(at("-lgcc") > at("in.bc"), "{args:?}");
    }

    #[test]
    fn ptx_is_assembled_not_linked() {
        let ptx = JitTarget {
            triple: "nvptx64-nvidia-cuda".into(),
            cpu: Some("sm_90".into()),
            output: JitOutput::Ptx { isa: 78 },
        };
        let args = arguments(
            &ptx,
            &Options {
                compile: vec![],
                link: vec!["--no-undefined".into()],
            },
            &Controls::default(),
            Path::new("in.bc"),
            Path::new("out.ptx"),
        );
        for want in [
            "--target=nvptx64-nvidia-cuda",
            "-march=sm_90",
            "-S",
            "+ptx78",
            "-O2",
        ] {
            assert!(args.contains(&want.to_string()), "{want} in {args:?}");
        }
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("-Wl,") || a == "-shared" || a == "-lgcc"),
            "{args:?}"
        );
        assert_ne!(
            cache_key(b"BC", &ptx, &Options::default(), "c"),
            cache_key(b"BC", &target(), &Options::default(), "c")
        );
        assert_eq!(ptx.output.extension(), "ptx");
    }

    #[test]
    fn llvms_jit_variables_set_the_optimisation() {
        let image_o3 = Options {
            compile: vec!["-O3".into(), "-g".into()],
            link: vec![],
        };
        let args = |options: &Options, controls: &Controls| {
            arguments(
                &target(),
                options,
                controls,
                Path::new("in.bc"),
                Path::new("out.so"),
            )
        };
        let level = Controls {
            opt_level: Some(1),
            ..Controls::default()
        };
        // LIBOMPTARGET_JIT_OPT_LEVEL over the image's -O3; its -g stays.
        let a = args(&image_o3, &level);
        assert!(
            a.contains(&"-O1".to_string()) && a.contains(&"-g".to_string()),
            "{a:?}"
        );
        assert!(!a.contains(&"-O3".to_string()), "{a:?}");
        let skip = Controls {
            skip_opt: true,
            ..Controls::default()
        };
        let a = args(&Options::default(), &skip);
        assert!(a.contains(&"-disable-llvm-passes".to_string()), "{a:?}");
        assert!(
            a.contains(&"-O2".to_string()),
            "code generation still optimises"
        );
        let a = args(&Options::default(), &Controls::default());
        assert!(!a.contains(&"-disable-llvm-passes".to_string()), "{a:?}");
    }

    #[test]
    fn relocatable_replacement_objects_are_linked_as_the_loader_takes_them() {
        let host = link_arguments(&target(), Path::new("k.o"), Path::new("k.so"));
        for want in ["-shared", "-fPIC", "k.o", "-lgcc"] {
            assert!(host.contains(&want.to_string()), "{want} in {host:?}");
        }
        let gpu = link_arguments(&amd("gfx90a"), Path::new("k.o"), Path::new("k.hsaco"));
        assert!(gpu.contains(&"-march=gfx90a".to_string()), "{gpu:?}");
        assert!(!gpu.contains(&"-shared".to_string()), "{gpu:?}");
    }

    fn amd(cpu: &str) -> JitTarget {
        JitTarget {
            triple: "amdgcn-amd-amdhsa".into(),
            cpu: Some(cpu.into()),
            output: JitOutput::CodeObject,
        }
    }

    #[test]
    fn amd_code_objects_are_linked_for_the_gpus_target_id() {
        let args = arguments(
            &amd("gfx90a:sramecc+:xnack-"),
            &Options {
                compile: vec![],
                link: vec!["--no-undefined".into()],
            },
            &Controls::default(),
            Path::new("in.bc"),
            Path::new("out.hsaco"),
        );
        for want in [
            "--target=amdgcn-amd-amdhsa",
            "-march=gfx90a:sramecc+:xnack-",
            "-nogpulib",
            "-Wl,--no-undefined",
            "-O2",
        ] {
            assert!(args.contains(&want.to_string()), "{want} in {args:?}");
        }
        assert!(
            !args
                .iter()
                .any(|a| a == "-S" || a == "-lgcc" || a == "-shared"),
            "{args:?}"
        );
        assert_eq!(amd("gfx90a").output.extension(), "hsaco");
    }

    #[test]
    fn function_attributes_name_a_target_id() {
        let line = |attrs: &str| format!("attributes #0 = {{ convergent {attrs} }}");
        let id = |attrs: &str| attribute_target(&line(attrs)).map(|t| t.to_string());
        assert_eq!(
            id(r#""target-cpu"="gfx90a" "target-features"="+16-bit-insts,-xnack,+sramecc""#),
            Some("gfx90a:sramecc+:xnack-".into())
        );
        assert_eq!(id(r#""target-cpu"="gfx1100""#), Some("gfx1100".into()));
        assert_eq!(id(r#""target-features"="+xnack""#), None, "no processor");
        assert_eq!(id(r#""target-cpu"="" "#), None);
    }

    #[test]
    fn amd_bitcode_compiles_only_for_the_processor_it_names() {
        let bitcode = |arch: Option<&str>| DeviceImage {
            bytes: b"BC\xc0\xde",
            format: ImageFormat::Bitcode,
            triple: Some("amdgcn-amd-amdhsa".into()),
            arch: arch.map(str::to_string),
            image_kind: None,
            offload_kind: None,
            strings: Default::default(),
            metadata: Default::default(),
            containers: Vec::new(),
        };
        let gpu = amd("gfx90a:sramecc+:xnack-");
        assert!(can_compile(&bitcode(Some("gfx90a")), &gpu));
        assert!(can_compile(&bitcode(Some("gfx90a:xnack-")), &gpu));
        assert!(can_compile(&bitcode(None), &gpu));
        assert!(!can_compile(&bitcode(Some("gfx90a:xnack+")), &gpu));
        assert!(!can_compile(&bitcode(Some("gfx1100")), &gpu));
        assert!(!can_compile(&bitcode(Some("not a target")), &gpu));
        // Other targets do not look at the arch.
        let host = DeviceImage {
            triple: Some("x86_64-unknown-linux-gnu".into()),
            ..bitcode(Some("znver4"))
        };
        assert!(can_compile(&host, &target()));
    }
}
