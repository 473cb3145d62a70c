//! `offload inspect FILE`: what a file holds.
//!
//! Recognises a host executable or object with `.llvm.offloading`
//! section(s), an `OffloadBinary` (possibly several concatenated), a
//! `1OMP`-headed image, a plain ELF (a device image), LLVM bitcode, CUDA
//! PTX text, a cubin and a CUDA fatbinary (their SM and entries shown). For
//! every leaf image it shows the container chain, triple, arch, kinds, size,
//! string map, metadata, for ELF images the header facts and the kernels,
//! functions and globals defined (for cubins with the registers per thread
//! each kernel needs, which bound the threads an SM holds; a global of the
//! entry table that the image's data objects lack is named), and which
//! devices of this runtime could run it. Anything else (unknown, truncated, corrupt) is an error.
//!
//! Kernels and globals are what the runtime would look up, decided as the
//! runtime decides (one truth):
//!
//! * images of a host binary: the host's offload entry table
//!   (`llvm_offload_entries`, the table `__tgt_bin_desc` hands to
//!   libomptarget): entries of size 0 are kernels, entries with a size are
//!   globals;
//! * a standalone device image with its own entry table (clang-22 OpenMP
//!   device images carry one): that table, the same way;
//! * any other ELF image (host kernels written with `host_kernel.h`): the
//!   functions and objects it exports, i.e. what the host plugin's `dlsym`
//!   finds, without the symbols the linker and C runtime define.
//!
//! A program (an executable without `.llvm.offloading` sections) holds no
//! device image: it is reported as having no offloading images.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use offload_core::Runtime;
use offload_image::elf::{self, ElfInfo, ElfType, SymbolKind};
use offload_image::entries::{self, EntryClass, FileEntry};
use offload_image::{DeviceImage, ImageFormat};
use serde::Serialize;

use crate::output::{self, OrderedMap};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The file to inspect.
    file: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Debug)]
pub struct Report {
    pub file: String,
    pub size: u64,
    /// `host-binary`, `offload-binary`, `1omp`, `elf`, `bitcode`, `ptx` or `fatbin`.
    pub format: &'static str,
    /// A one-line human description of the file.
    pub description: String,
    /// The host ELF's header, when the file is a host binary.
    pub host: Option<ElfReport>,
    /// The host binary's offload entry table (`llvm_offload_entries`),
    /// empty for other files.
    pub host_entries: Vec<EntryReport>,
    /// Empty for a program without offloading images.
    pub images: Vec<ImageReport>,
}

/// One offload entry.
#[derive(Serialize, Debug)]
pub struct EntryReport {
    pub name: String,
    /// `kernel`, `global`, `indirect` or `requires`.
    pub class: &'static str,
    pub size: u64,
    pub flags: u32,
    /// Producer: `openmp`, `cuda`, `hip`, `sycl` or the number.
    pub producer: String,
}

#[derive(Serialize, Debug)]
pub struct ElfReport {
    pub class: u8,
    pub endian: &'static str,
    pub machine: &'static str,
    pub machine_id: u16,
    #[serde(rename = "type")]
    pub elf_type: String,
    pub flags: String,
    pub triple: Option<&'static str>,
}

#[derive(Serialize, Debug)]
pub struct ImageReport {
    pub index: usize,
    /// Containers stripped to reach the image, outermost first.
    pub containers: Vec<&'static str>,
    /// Containers and leaf, e.g. `OffloadBinary > 1OMP > ELF`.
    pub chain: String,
    /// The leaf format: `ELF`, `bitcode`, `PTX`, `fatbin` or `unknown`.
    pub format: &'static str,
    pub triple: Option<String>,
    pub arch: Option<String>,
    /// The OffloadBinary image kind (LLVM's names: `o`, `bc`, `cubin`, ...).
    pub image_kind: Option<String>,
    /// The OffloadBinary offload kind (`openmp`, `cuda`, `hip`, `sycl`, `none`).
    pub producer: Option<String>,
    pub size: usize,
    /// The OffloadBinary string map (merged over nested binaries).
    pub strings: OrderedMap,
    /// The 1OMP metadata (merged over nested headers).
    pub metadata: OrderedMap,
    pub elf: Option<ElfReport>,
    /// Where `kernels` and `globals` come from: `host entry table`,
    /// `image entry table`, `exported symbols` or `none`.
    pub kernel_source: &'static str,
    /// The kernels the runtime can launch from this image, by name.
    pub kernels: Vec<String>,
    /// Every defined function (ELF images only); `kernel` marks those
    /// listed in `kernels`.
    pub functions: Vec<FunctionReport>,
    /// The global variables the runtime can look up (no linker symbols).
    pub globals: Vec<GlobalReport>,
    /// Every defined data object (ELF images only): where a global of the
    /// host's entry table must be for the runtime to find it.
    pub objects: Vec<GlobalReport>,
    /// Devices of this runtime whose plugin says they can run the image.
    pub runnable_on: Vec<RunnableDevice>,
    /// Devices that load this image when given the whole file (their best
    /// image: native code before bitcode, exact architecture first).
    pub loaded_by: Vec<usize>,
    /// What CUDA code (PTX, a cubin, a fatbinary) says about itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<CudaReport>,
}

/// CUDA facts of an image.
#[derive(Serialize, Debug)]
pub struct CudaReport {
    /// `PTX`, `cubin` or `fatbin`.
    pub kind: String,
    /// The SM the code targets (PTX `.target`, cubin `e_flags`).
    pub target: Option<String>,
    /// PTX ISA version (`.version`).
    pub ptx_version: Option<String>,
    /// A fatbinary's entries.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<FatbinEntryReport>,
}

/// One entry of a fatbinary.
#[derive(Serialize, Debug)]
pub struct FatbinEntryReport {
    /// `PTX`, `cubin` or the kind number.
    pub kind: String,
    pub arch: String,
    pub size: usize,
    pub compressed: bool,
}

fn cuda_report(bytes: &[u8]) -> Option<CudaReport> {
    use offload_image::cuda::{self, EntryKind, Kind};
    let kind = cuda::detect(bytes)?;
    let mut r = CudaReport {
        kind: kind.to_string(),
        target: None,
        ptx_version: None,
        entries: Vec::new(),
    };
    match kind {
        Kind::Ptx => {
            let info = cuda::ptx_info(bytes)?;
            r.target = info.target.map(|t| t.to_string());
            r.ptx_version = info.version.map(|(a, b)| format!("{a}.{b}"));
        }
        Kind::Cubin => r.target = cuda::cubin_target(bytes).map(|t| t.to_string()),
        Kind::Fatbin => {
            r.entries = cuda::fatbin_entries(bytes)
                .unwrap_or_default()
                .iter()
                .map(|e| FatbinEntryReport {
                    kind: match e.kind {
                        EntryKind::Ptx => "PTX".to_string(),
                        EntryKind::Cubin => "cubin".to_string(),
                        EntryKind::Other(n) => n.to_string(),
                    },
                    arch: e.sm.to_string(),
                    size: e.payload.len(),
                    compressed: e.compressed,
                })
                .collect()
        }
    }
    Some(r)
}

#[derive(Serialize, Debug)]
pub struct FunctionReport {
    pub name: String,
    pub size: u64,
    pub kernel: bool,
    /// Registers per thread (cubins: from `.nv.info`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registers: Option<u32>,
}

#[derive(Serialize, Debug)]
pub struct GlobalReport {
    pub name: String,
    pub size: u64,
}

#[derive(Serialize, Debug)]
pub struct RunnableDevice {
    pub id: usize,
    pub plugin: String,
    pub uid: String,
}

fn short_format(f: ImageFormat) -> &'static str {
    match f {
        ImageFormat::Elf => "ELF",
        ImageFormat::OffloadBinary => "OffloadBinary",
        ImageFormat::MetadataHeader => "1OMP",
        ImageFormat::Bitcode => "bitcode",
        ImageFormat::Unknown => "unknown",
    }
}

fn elf_type_name(t: ElfType) -> String {
    match t {
        ElfType::Relocatable => "relocatable".into(),
        ElfType::Executable => "executable".into(),
        ElfType::SharedObject => "shared object".into(),
        ElfType::Core => "core".into(),
        ElfType::Other(n) => format!("other ({n:#x})"),
    }
}

fn elf_report(i: &ElfInfo) -> ElfReport {
    ElfReport {
        class: i.class,
        endian: if i.little_endian { "little" } else { "big" },
        machine: i.machine_name,
        machine_id: i.machine,
        elf_type: elf_type_name(i.elf_type),
        flags: format!("{:#x}", i.flags),
        triple: i.triple,
    }
}

/// Reads `path`, refusing what is not a regular file (a FIFO or
/// `/dev/zero` would never end).
pub fn read_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn producer_name(kind: u16) -> String {
    match kind {
        1 => "openmp".to_string(),
        2 => "cuda".to_string(),
        4 => "hip".to_string(),
        8 => "sycl".to_string(),
        n => n.to_string(),
    }
}

fn entry_reports(entries: &[FileEntry]) -> Vec<EntryReport> {
    entries
        .iter()
        .map(|e| EntryReport {
            name: e.name.clone(),
            class: e.class().name(),
            size: e.size,
            flags: e.flags,
            producer: producer_name(e.kind),
        })
        .collect()
}

/// Kernels and globals named by an entry table, in table order.
fn from_entries(entries: &[FileEntry]) -> (Vec<String>, Vec<GlobalReport>) {
    let mut kernels = Vec::new();
    let mut globals = Vec::new();
    for e in entries.iter().filter(|e| !e.name.is_empty()) {
        match e.class() {
            EntryClass::Kernel => kernels.push(e.name.clone()),
            EntryClass::Global => globals.push(GlobalReport {
                name: e.name.clone(),
                size: e.size,
            }),
            EntryClass::Indirect | EntryClass::Requires => {}
        }
    }
    (kernels, globals)
}

fn image_report(
    index: usize,
    img: &DeviceImage<'_>,
    runtime: &Runtime,
    host_entries: Option<&[FileEntry]>,
) -> anyhow::Result<ImageReport> {
    let containers: Vec<&'static str> = img.containers.iter().map(|&c| short_format(c)).collect();
    let mut chain = containers.clone();
    chain.push(short_format(img.format));
    let mut report = ImageReport {
        index,
        chain: chain.join(" > "),
        containers,
        format: short_format(img.format),
        triple: img.triple.clone(),
        arch: img.arch.clone(),
        image_kind: img.image_kind.map(|k| k.to_string()),
        producer: img.offload_kind.map(|k| k.to_string()),
        size: img.bytes.len(),
        strings: OrderedMap(img.strings.clone()),
        metadata: OrderedMap(img.metadata.entries.clone()),
        elf: None,
        kernel_source: "none",
        kernels: Vec::new(),
        functions: Vec::new(),
        objects: Vec::new(),
        globals: Vec::new(),
        runnable_on: Vec::new(),
        loaded_by: Vec::new(),
        cuda: cuda_report(img.bytes),
    };
    if img.format == ImageFormat::Unknown {
        if let Some(c) = &report.cuda {
            // PTX text and fatbinaries: name the leaf by what it is.
            report.format = if c.kind == "PTX" { "PTX" } else { "fatbin" };
            let mut chain = report.containers.clone();
            chain.push(report.format);
            report.chain = chain.join(" > ");
        }
        if let Some(ptx) = offload_image::cuda::ptx_info(img.bytes) {
            if host_entries.is_none() {
                report.kernels = ptx.entries;
                report.globals = ptx
                    .globals
                    .into_iter()
                    .map(|name| GlobalReport { name, size: 0 })
                    .collect();
                report.kernel_source = "PTX directives";
            }
        }
    }
    if let Some(host) = host_entries {
        (report.kernels, report.globals) = from_entries(host);
        report.kernel_source = "host entry table";
    }
    if img.format == ImageFormat::Elf {
        let info = elf::info(img.bytes).with_context(|| format!("image {index}"))?;
        report.elf = Some(elf_report(&info));
        if host_entries.is_none() {
            let own = entries::offload_entries(img.bytes)
                .with_context(|| format!("image {index}: cannot read its offload entries"))?;
            if own.is_empty() {
                let exported = entries::exported_symbols(img.bytes)
                    .with_context(|| format!("image {index}: cannot read its symbols"))?;
                let functions: Vec<&str> = exported
                    .iter()
                    .filter(|s| s.kind == SymbolKind::Function)
                    .map(|s| s.name.as_str())
                    .collect();
                let companion = |name: &str| host_kernel_companion(name, &functions);
                let (kernels, globals): (Vec<_>, Vec<_>) = exported
                    .iter()
                    .filter(|s| !companion(&s.name))
                    .partition(|s| s.kind == SymbolKind::Function);
                report.kernels = kernels.into_iter().map(|s| s.name.clone()).collect();
                report.globals = globals
                    .into_iter()
                    .map(|s| GlobalReport {
                        name: s.name.clone(),
                        size: s.size,
                    })
                    .collect();
                report.kernel_source = "exported symbols";
            } else {
                (report.kernels, report.globals) = from_entries(&own);
                report.kernel_source = "image entry table";
            }
        }
        let symbols = elf::defined_symbols(img.bytes)
            .with_context(|| format!("image {index}: cannot read its symbols"))?;
        // Register counts are a bonus: a cubin whose `.nv.info` is not
        // understood is still shown, without them.
        let registers = if info.machine == elf::EM_CUDA {
            offload_image::cuda::cubin_registers(img.bytes).unwrap_or_default()
        } else {
            Vec::new()
        };
        for s in symbols {
            if s.kind == SymbolKind::Object {
                report.objects.push(GlobalReport {
                    name: s.name.clone(),
                    size: s.size,
                });
            }
            if s.kind == SymbolKind::Function {
                let kernel = report.kernels.contains(&s.name);
                let registers = registers
                    .iter()
                    .find(|r| r.name == s.name)
                    .map(|r| r.registers);
                report.functions.push(FunctionReport {
                    name: s.name,
                    size: s.size,
                    kernel,
                    registers,
                });
            }
        }
    }
    report.runnable_on = runtime
        .devices()
        .iter()
        .filter(|d| d.can_run(img))
        .map(|d| RunnableDevice {
            id: d.id(),
            plugin: d.plugin_name().to_string(),
            uid: d.info().uid.clone(),
        })
        .collect();
    Ok(report)
}

/// Analyses `bytes` (the contents of `name`).
pub fn analyse(name: &str, bytes: &[u8], runtime: &Runtime) -> anyhow::Result<Report> {
    if bytes.is_empty() {
        bail!("{name}: the file is empty");
    }
    let format = offload_image::detect(bytes);
    let mut host = None;
    let mut host_entries = None;
    let (kind, description, images) = match format {
        ImageFormat::Elf => {
            let info = elf::info(bytes).with_context(|| name.to_string())?;
            let images = offload_image::images_in_host_binary(bytes)
                .with_context(|| format!("{name}: bad .llvm.offloading section"))?;
            let what = format!(
                "{}-bit {}-endian {} ELF {}",
                info.class,
                if info.little_endian { "little" } else { "big" },
                info.machine_name,
                elf_type_name(info.elf_type)
            );
            if images.is_empty() && info.machine == elf::EM_CUDA {
                let images = offload_image::unwrap(bytes).with_context(|| name.to_string())?;
                ("elf", format!("{what} (CUDA cubin)"), images)
            } else if images.is_empty() {
                let program = entries::is_program(bytes).with_context(|| name.to_string())?;
                if program {
                    // An executable is never a device image: it was built
                    // without -fopenmp-targets (or similar).
                    host = Some(elf_report(&info));
                    let what = format!(
                        "{}-bit {}-endian {} ELF executable",
                        info.class,
                        if info.little_endian { "little" } else { "big" },
                        info.machine_name,
                    );
                    (
                        "host-binary",
                        format!("host {what} with no offloading images"),
                        Vec::new(),
                    )
                } else {
                    let images = offload_image::unwrap(bytes).with_context(|| name.to_string())?;
                    ("elf", what, images)
                }
            } else {
                host = Some(elf_report(&info));
                host_entries = Some(
                    entries::offload_entries(bytes)
                        .with_context(|| format!("{name}: bad {}", entries::ENTRIES_SECTION))?,
                );
                let n = images.len();
                (
                    "host-binary",
                    format!("host {what} with {n} offloading image(s)"),
                    images,
                )
            }
        }
        ImageFormat::OffloadBinary | ImageFormat::MetadataHeader | ImageFormat::Bitcode => {
            let images = offload_image::unwrap(bytes).with_context(|| name.to_string())?;
            let (kind, what) = match format {
                ImageFormat::OffloadBinary => {
                    let n = offload_image::offload_binary::parse_all(bytes)
                        .map(|b| b.len())
                        .unwrap_or(1);
                    ("offload-binary", format!("{n} OffloadBinary container(s)"))
                }
                ImageFormat::MetadataHeader => ("1omp", "1OMP-headed image".to_string()),
                _ => ("bitcode", "LLVM bitcode".to_string()),
            };
            (kind, what, images)
        }
        ImageFormat::Unknown if offload_image::cuda::detect(bytes).is_some() => {
            let images = offload_image::unwrap(bytes).with_context(|| name.to_string())?;
            match offload_image::cuda::detect(bytes) {
                Some(offload_image::cuda::Kind::Ptx) => ("ptx", "PTX text".to_string(), images),
                _ => {
                    let n = offload_image::cuda::fatbin_entries(bytes)
                        .map(|e| e.len())
                        .unwrap_or(0);
                    ("fatbin", format!("CUDA fatbinary with {n} entries"), images)
                }
            }
        }
        ImageFormat::Unknown => {
            let err = offload_image::unwrap(bytes)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "unknown format".to_string());
            bail!(
                "{name}: {err} (expected a host binary with offloading sections, an \
                 OffloadBinary, a 1OMP image, an ELF file, LLVM bitcode, PTX or a CUDA fatbinary)"
            );
        }
    };
    let mut reports = images
        .iter()
        .enumerate()
        .map(|(i, img)| image_report(i, img, runtime, host_entries.as_deref()))
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| name.to_string())?;
    for d in runtime.devices() {
        let chosen = d
            .best_image(&images)
            .and_then(|best| images.iter().position(|i| std::ptr::eq(i, best)));
        if let Some(i) = chosen {
            reports[i].loaded_by.push(d.id());
        }
    }
    let images = reports;
    Ok(Report {
        file: name.to_string(),
        size: bytes.len() as u64,
        format: kind,
        description,
        host,
        host_entries: host_entries
            .as_deref()
            .map(entry_reports)
            .unwrap_or_default(),
        images,
    })
}

fn opt(s: &Option<String>) -> String {
    match s.as_deref() {
        None | Some("") => "(none)".to_string(),
        Some(s) => output::text(s),
    }
}

fn field(s: &mut String, key: &str, value: impl std::fmt::Display) {
    let _ = writeln!(s, "  {:<14}{value}", format!("{key}:"));
}

fn render_map(s: &mut String, key: &str, map: &OrderedMap) {
    if map.0.is_empty() {
        field(s, key, "(none)");
        return;
    }
    let _ = writeln!(s, "  {key}:");
    for (k, v) in &map.0 {
        let _ = writeln!(s, "    {} = {}", output::text(k), output::text(v));
    }
}

fn render_elf(e: &ElfReport) -> String {
    format!(
        "{}-bit {}-endian, machine {} ({}), type {}, flags {}",
        e.class, e.endian, e.machine, e.machine_id, e.elf_type, e.flags
    )
}

/// Renders the report as text.
/// The globals the image's objects leave out: what the runtime would not
/// find in it.
fn not_defined<'a>(globals: &'a [GlobalReport], objects: &[GlobalReport]) -> Vec<&'a str> {
    globals
        .iter()
        .filter(|g| !objects.iter().any(|o| o.name == g.name))
        .map(|g| g.name.as_str())
        .collect()
}

pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} ({} bytes)",
        r.file,
        output::text(&r.description),
        r.size
    );
    // With several images, say which one each device would load.
    let images_many = r.images.len() > 1;
    for img in &r.images {
        let _ = writeln!(s);
        let _ = writeln!(s, "image {}: {}", img.index, img.chain);
        field(&mut s, "triple", opt(&img.triple));
        field(&mut s, "arch", opt(&img.arch));
        field(&mut s, "image kind", opt(&img.image_kind));
        field(&mut s, "producer", opt(&img.producer));
        field(&mut s, "size", output::bytes(img.size as u64));
        render_map(&mut s, "strings", &img.strings);
        render_map(&mut s, "metadata", &img.metadata);
        if let Some(e) = &img.elf {
            field(&mut s, "ELF", render_elf(e));
        }
        if let Some(c) = &img.cuda {
            let mut what = c.kind.clone();
            if let Some(t) = &c.target {
                what.push_str(&format!(" for {t}"));
            }
            if let Some(v) = &c.ptx_version {
                what.push_str(&format!(", PTX ISA {v}"));
            }
            field(&mut s, "CUDA", what);
            for e in &c.entries {
                let _ = writeln!(
                    s,
                    "    {} {} ({} bytes{})",
                    e.kind,
                    e.arch,
                    e.size,
                    if e.compressed { ", compressed" } else { "" }
                );
            }
        }
        if img.elf.is_some() || img.kernel_source != "none" {
            let _ = writeln!(
                s,
                "  kernels ({}, from the {}):",
                img.kernels.len(),
                img.kernel_source
            );
            for k in &img.kernels {
                let registers = img
                    .functions
                    .iter()
                    .find(|f| &f.name == k)
                    .and_then(|f| f.registers);
                match registers {
                    Some(n) => {
                        let _ = writeln!(s, "    {} ({n} registers)", output::text(k));
                    }
                    None => {
                        let _ = writeln!(s, "    {}", output::text(k));
                    }
                }
            }
            if img.elf.is_some() {
                let others = img.functions.iter().filter(|f| !f.kernel).count();
                field(
                    &mut s,
                    "functions",
                    format!("{} defined, {others} not kernels", img.functions.len()),
                );
                field(&mut s, "objects", format!("{} defined", img.objects.len()));
                let missing = not_defined(&img.globals, &img.objects);
                if !missing.is_empty() {
                    field(
                        &mut s,
                        "not defined",
                        format!(
                            "{} (globals the runtime would not find)",
                            missing.join(", ")
                        ),
                    );
                }
            }
            let _ = writeln!(s, "  globals ({}):", img.globals.len());
            for g in &img.globals {
                let _ = writeln!(s, "    {} ({} bytes)", output::text(&g.name), g.size);
            }
        }
        let runs = if img.runnable_on.is_empty() {
            "no device of this runtime".to_string()
        } else {
            let list = img
                .runnable_on
                .iter()
                .map(|d| format!("device {} ({} {})", d.id, d.plugin, d.uid))
                .collect::<Vec<_>>()
                .join(", ");
            if img.format == "bitcode" {
                format!("{list} (compiled for the device when loaded)")
            } else {
                list
            }
        };
        field(&mut s, "runs on", runs);
        if images_many && !img.loaded_by.is_empty() {
            let ids: Vec<String> = img
                .loaded_by
                .iter()
                .map(|d| format!("device {d}"))
                .collect();
            field(&mut s, "loaded by", ids.join(", "));
        }
    }
    if r.images.is_empty() {
        let _ = writeln!(s, "no offloading images");
    }
    s
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let bytes = read_file(&args.file)?;
    let name = args.file.display().to_string();
    let report = analyse(&name, &bytes, offload::internals::runtime())?;
    if args.json {
        output::emit_json(&report)
    } else {
        output::emit(&render(&report))
    }
}

/// What include/offload/host_kernel.h's macros export beside a kernel `k`
/// that is not a kernel or global of its own: `k_offload_group` (the loop
/// over a group's items), `k_offload_groups` (the same over a run of
/// groups), `k_offload_barrier` and `k_offload_group_static_size`
/// (declarations the runtime reads).
fn host_kernel_companion(name: &str, functions: &[&str]) -> bool {
    [
        "_offload_group",
        "_offload_groups",
        "_offload_barrier",
        "_offload_group_static_size",
    ]
    .iter()
    .any(|suffix| {
        name.strip_suffix(suffix)
            .is_some_and(|kernel| functions.contains(&kernel))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globals_missing_from_the_objects_are_named() {
        let g = |name: &str| GlobalReport {
            name: name.to_string(),
            size: 4,
        };
        let globals = [g("a"), g("b"), g("c")];
        assert_eq!(not_defined(&globals, &[g("b"), g("x")]), ["a", "c"]);
        assert!(not_defined(&globals, &[g("c"), g("a"), g("b")]).is_empty());
    }
}
