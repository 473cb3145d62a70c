//! LLVM bitcode images compiled for a device at load time.
//!
//! A plugin says what it runs ([`crate::plugin::Device::jit_target`]: a
//! triple, a processor and the kind of output its loader takes); the core
//! compiles a bitcode image for it with an LLVM 22 compiler found at run
//! time (no libLLVM in the runtime, so programs without bitcode images do
//! not pay for it) and loads the result like any native image: a shared
//! object for host devices, PTX text for CUDA devices. The image's
//! `1OMP` `CompileOptions` and `LinkOptions` reach the compiler.
//!
//! Results are cached on disk, keyed by the image bytes, the target, the
//! options and the compiler (its installed binary's path, size and
//! modification time: a cached load runs no process and reads one file).
//! Entries are written under a temporary name and renamed into place, so
//! concurrent processes never see a partial entry.
//!
//! * Compiler, first found: `$OFFLOAD_JIT_COMPILER`, `clang-22` on `PATH`,
//!   `/usr/lib/llvm-22/bin/clang`.
//! * Cache: `$OFFLOAD_JIT_CACHE`, else `$XDG_CACHE_HOME/offload/jit`, else
//!   `$HOME/.cache/offload/jit`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use offload_image::metadata::{COMPILE_OPTIONS, LINK_OPTIONS};
use offload_image::{DeviceImage, ImageFormat};

use crate::error::{Error, ErrorCode, Result};

/// What a device's loader takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JitOutput {
    /// A position-independent shared object (the host plugin's images).
    SharedObject,
    /// PTX text for NVIDIA GPUs (the CUDA plugin's driver compiles it),
    /// at least the given PTX ISA version (`78`: 7.8, the first with
    /// `sm_90`).
    Ptx { isa: u32 },
}

impl JitOutput {
    /// File extension of a compiled image (and its cache entry).
    fn extension(&self) -> &'static str {
        match self {
            JitOutput::SharedObject => "so",
            JitOutput::Ptx { .. } => "ptx",
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

/// Whether `image` is bitcode that `target` can compile.
pub fn can_compile(image: &DeviceImage<'_>, target: &JitTarget) -> bool {
    image.format == ImageFormat::Bitcode
        && image
            .triple
            .as_deref()
            .is_none_or(|t| crate::image::triples_compatible(t, &target.triple))
}

/// Compile `image` (bitcode) for `target`, or take the cached result.
/// Returns the native image's bytes.
pub fn compile(image: &DeviceImage<'_>, target: &JitTarget) -> Result<Vec<u8>> {
    let compiler = compiler()?;
    let options = options(image);
    let key = cache_key(image.bytes, target, &options, &compiler.version);
    let dir = cache_dir();
    let entry = dir.join(format!("{key}.{}", target.output.extension()));
    if let Ok(bytes) = std::fs::read(&entry) {
        tracing::debug!(entry = %entry.display(), "JIT cache hit");
        return Ok(bytes);
    }
    std::fs::create_dir_all(&dir).map_err(|e| {
        Error::new(
            ErrorCode::HostIo,
            format!("JIT cache directory {}: {e}", dir.display()),
        )
    })?;
    // Unique per process and call: concurrent compilations of the same
    // image each write their own file; the last rename wins, all identical.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let stem = dir.join(format!(".{key}.{}.{n}", std::process::id()));
    let input = stem.with_extension("bc");
    let output = stem.with_extension(target.output.extension());
    let io =
        |what: &str, e: std::io::Error| Error::new(ErrorCode::HostIo, format!("JIT: {what}: {e}"));
    std::fs::write(&input, image.bytes).map_err(|e| io("writing the bitcode", e))?;
    let started = std::time::Instant::now();
    let run = Command::new(&compiler.path)
        .args(arguments(target, &options, &input, &output))
        .output();
    let _ = std::fs::remove_file(&input);
    let run = run.map_err(|e| io(&format!("running {}", compiler.path.display()), e))?;
    if !run.status.success() {
        let _ = std::fs::remove_file(&output);
        return Err(Error::new(
            ErrorCode::CompileFailure,
            format!(
                "JIT: {} failed on a bitcode image for {} ({}): {}",
                compiler.path.display(),
                target.triple,
                run.status,
                String::from_utf8_lossy(&run.stderr).trim()
            ),
        ));
    }
    let bytes = std::fs::read(&output).map_err(|e| io("reading the compiled image", e))?;
    std::fs::rename(&output, &entry).map_err(|e| io("filing the compiled image", e))?;
    tracing::info!(triple = %target.triple, ms = started.elapsed().as_millis() as u64, entry = %entry.display(), "bitcode image compiled");
    Ok(bytes)
}

/// The compiler's command line.
fn arguments(target: &JitTarget, options: &Options, input: &Path, output: &Path) -> Vec<String> {
    let mut args = vec![format!("--target={}", target.triple)];
    if let Some(cpu) = &target.cpu {
        args.push(format!("-march={cpu}"));
    }
    let links = match target.output {
        JitOutput::SharedObject => {
            args.extend(["-fPIC", "-shared", "-nostdlib"].map(String::from));
            true
        }
        JitOutput::Ptx { isa } => {
            // Assembly only: the driver compiles PTX; no CUDA installation
            // or device library is needed (or looked for).
            args.extend(["-S", "-nogpulib"].map(String::from));
            args.extend(["-Xclang", "-target-feature", "-Xclang"].map(String::from));
            args.push(format!("+ptx{isa}"));
            false
        }
    };
    // The image's own options win over the default optimisation level.
    if !options.compile.iter().any(|o| o.starts_with("-O")) {
        args.push("-O2".into());
    }
    args.extend(options.compile.iter().cloned());
    if links {
        args.extend(options.link.iter().map(|o| format!("-Wl,{o}")));
    }
    args.extend(["-x".into(), "ir".into()]);
    args.push(input.display().to_string());
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
            // binary's path, size and modification time change with it.
            let version = format!("{} {} {}", real.display(), meta.len(), meta.mtime());
            return Ok(Compiler { path, version });
        }
    }
    Err(looked.join(", "))
}

/// Where compiled images are kept.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OFFLOAD_JIT_CACHE") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("offload/jit");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/offload/jit"),
        None => std::env::temp_dir().join("offload-jit"),
    }
}

/// 128-bit FNV-1a over everything that decides the output, as hex.
fn cache_key(bytes: &[u8], target: &JitTarget, options: &Options, compiler: &str) -> String {
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    let mut eat = |part: &[u8]| {
        for &b in part.iter().chain(&(part.len() as u64).to_le_bytes()) {
            h ^= b as u128;
            h = h.wrapping_mul(PRIME);
        }
    };
    eat(bytes);
    eat(target.triple.as_bytes());
    eat(target.cpu.as_deref().unwrap_or("").as_bytes());
    eat(format!("{:?}", target.output).as_bytes());
    for o in options.compile.iter().chain(&options.link) {
        eat(o.as_bytes());
    }
    eat(compiler.as_bytes());
    format!("{h:032x}")
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
        assert_eq!(base.len(), 32);
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
            Path::new("in.bc"),
            Path::new("out.so"),
        );
        assert!(args.contains(&"-O3".to_string()));
        assert!(!args.contains(&"-O2".to_string()), "{args:?}");
        assert!(args.contains(&"-Wl,--no-undefined".to_string()));
        assert_eq!(args.last().map(String::as_str), Some("out.so"));
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
            !args.iter().any(|a| a.starts_with("-Wl,") || a == "-shared"),
            "{args:?}"
        );
        assert_ne!(
            cache_key(b"BC", &ptx, &Options::default(), "c"),
            cache_key(b"BC", &target(), &Options::default(), "c")
        );
        assert_eq!(ptx.output.extension(), "ptx");
    }
}
