//! `offload pack`: build an `OffloadBinary` or a `1OMP`-headed image.
//!
//! `--image FILE[,key=value...]` follows `llvm-offload-binary --image`
//! (`file=FILE` is accepted as well as a bare first element). A key given
//! twice gets both values joined with a comma, as LLVM does; `--meta
//! KEY=VALUE` takes a value verbatim, commas included.
//!
//! * `--format offload-binary` (default): one binary per `--image`.
//!   `triple=` and `arch=` go into the string map (`triple` defaults to the
//!   one an ELF image's header implies, `arch` to empty), `kind=` is the
//!   producer (`openmp` by default), `image-kind=` overrides the image kind
//!   found from the contents (ELF -> `o`, bitcode -> `bc`) or the file
//!   extension; every other pair, and every `--meta`, is kept in the string
//!   map.
//! * `--format 1omp`: exactly one `--image`; every pair (and `--meta`)
//!   becomes a metadata entry, in order.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use offload_image::elf::{self, ElfType};
use offload_image::metadata::{self, Metadata};
use offload_image::offload_binary::{self, ImageKind, OffloadBinary, OffloadKind};
use offload_image::{detect, ImageFormat};

use crate::inspect::read_file;
use crate::progress::{self, Progress};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// LLVM's OffloadBinary container (what `.llvm.offloading` sections hold).
    OffloadBinary,
    /// A `1OMP` metadata header (YAML) in front of one image.
    #[value(name = "1omp")]
    OneOmp,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write the result.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: PathBuf,
    /// What to write.
    #[arg(long, value_enum, default_value_t = Format::OffloadBinary)]
    format: Format,
    /// An image file and its properties: FILE[,key=value...]
    /// (keys: triple, arch, kind, image-kind, or anything else).
    #[arg(long = "image", value_name = "FILE[,key=value...]", required = true)]
    images: Vec<String>,
    /// An extra KEY=VALUE pair whose value may contain commas (1OMP metadata,
    /// or the string map of the single OffloadBinary image).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
}

/// A parsed `--image` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    pub file: PathBuf,
    /// The key=value pairs in order, each key once (repeats joined by ',').
    pub pairs: Vec<(String, String)>,
}

fn split_pair(s: &str) -> anyhow::Result<(String, String)> {
    let Some((k, v)) = s.split_once('=') else {
        bail!("expected key=value, found {s:?} (use --meta KEY=VALUE for a value with commas)");
    };
    if k.is_empty() {
        bail!("empty key in {s:?}");
    }
    Ok((k.to_string(), v.to_string()))
}

fn add_pair(pairs: &mut Vec<(String, String)>, k: String, v: String) {
    match pairs.iter_mut().find(|(pk, _)| *pk == k) {
        Some((_, pv)) => {
            pv.push(',');
            pv.push_str(&v);
        }
        None => pairs.push((k, v)),
    }
}

/// Parses `FILE[,key=value...]` or `file=FILE[,key=value...]`.
pub fn parse_image_spec(spec: &str) -> anyhow::Result<ImageSpec> {
    let mut parts = spec.split(',').peekable();
    let mut file = None;
    let mut pairs = Vec::new();
    // A bare first element (no '=') is the file; a path containing '='
    // needs the explicit `file=` form.
    if let Some(first) = parts.next_if(|p| !p.contains('=')) {
        if !first.is_empty() {
            file = Some(first.to_string());
        }
    }
    for part in parts {
        let (k, v) = split_pair(part).with_context(|| format!("--image {spec:?}"))?;
        if k == "file" {
            if file.is_some() {
                bail!("--image {spec:?} names more than one file");
            }
            file = Some(v);
        } else {
            add_pair(&mut pairs, k, v);
        }
    }
    let file = match file {
        Some(f) if !f.is_empty() => f,
        _ => bail!("--image {spec:?} names no file (expected FILE[,key=value...])"),
    };
    Ok(ImageSpec {
        file: PathBuf::from(file),
        pairs,
    })
}

/// What the contents of an image file say about it.
struct Contents {
    kind: Option<ImageKind>,
    triple: Option<String>,
}

/// Validates `bytes` as far as its format allows and finds its kind/triple.
fn examine(path: &Path, bytes: &[u8]) -> anyhow::Result<Contents> {
    let name = path.display();
    if bytes.is_empty() {
        bail!("image file {name} is empty");
    }
    Ok(match detect(bytes) {
        ImageFormat::Elf => {
            let info = elf::info(bytes).with_context(|| format!("image file {name}"))?;
            let kind = match info.elf_type {
                ElfType::Relocatable | ElfType::SharedObject | ElfType::Executable => {
                    Some(ImageKind::Object)
                }
                _ => None,
            };
            Contents {
                kind,
                triple: info.triple.map(str::to_owned),
            }
        }
        ImageFormat::Bitcode => Contents {
            kind: Some(ImageKind::Bitcode),
            triple: None,
        },
        ImageFormat::OffloadBinary | ImageFormat::MetadataHeader => {
            let leaves =
                offload_image::unwrap(bytes).with_context(|| format!("image file {name}"))?;
            let formats: Vec<ImageFormat> = leaves.iter().map(|l| l.format).collect();
            let kind = if formats.is_empty() {
                None
            } else if formats.iter().all(|&f| f == ImageFormat::Elf) {
                Some(ImageKind::Object)
            } else if formats.iter().all(|&f| f == ImageFormat::Bitcode) {
                Some(ImageKind::Bitcode)
            } else {
                None
            };
            let triple = match leaves.as_slice() {
                [one] => one.triple.clone(),
                _ => None,
            };
            Contents { kind, triple }
        }
        ImageFormat::Unknown => Contents {
            kind: None,
            triple: None,
        },
    })
}

fn kind_from_extension(path: &Path) -> Option<ImageKind> {
    let ext = path.extension()?.to_str()?;
    if ext.eq_ignore_ascii_case("so") {
        return Some(ImageKind::Object);
    }
    match ext.parse::<ImageKind>() {
        Ok(ImageKind::None) | Err(_) => None,
        Ok(k) => Some(k),
    }
}

fn parse_meta(meta: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    meta.iter()
        .map(|m| split_pair(m).with_context(|| format!("--meta {m:?}")))
        .collect()
}

/// Builds one OffloadBinary entry's fields from a spec and the file contents.
fn binary_entry<'a>(
    spec: &ImageSpec,
    bytes: &'a [u8],
    extra: &[(String, String)],
) -> anyhow::Result<OffloadBinary<'a>> {
    let name = spec.file.display();
    let contents = examine(&spec.file, bytes)?;
    let mut offload_kind = OffloadKind::OpenMp;
    let mut image_kind = None;
    let mut triple = None;
    let mut arch = None;
    let mut others = Vec::new();
    for (k, v) in spec.pairs.iter().chain(extra) {
        match k.as_str() {
            "kind" => {
                offload_kind = v.parse().map_err(|_| {
                    anyhow::anyhow!(
                        "{name}: unknown kind {v:?} (expected openmp, cuda, hip, sycl or none)"
                    )
                })?
            }
            "image-kind" => {
                image_kind = Some(v.parse::<ImageKind>().map_err(|_| {
                    anyhow::anyhow!(
                        "{name}: unknown image-kind {v:?} (expected o, bc, cubin, fatbin, ptx, spv or none)"
                    )
                })?)
            }
            "triple" => triple = Some(v.clone()),
            "arch" => arch = Some(v.clone()),
            _ => others.push((k.clone(), v.clone())),
        }
    }
    let image_kind = image_kind
        .or(contents.kind)
        .or_else(|| kind_from_extension(&spec.file))
        .with_context(|| {
            format!(
                "cannot tell the image kind of {name} from its contents or extension; \
                 add image-kind=o|bc|cubin|fatbin|ptx|spv|none"
            )
        })?;
    let triple = triple.or(contents.triple).with_context(|| {
        format!("{name}: no triple= given and none can be derived from the image")
    })?;
    let mut entry = OffloadBinary::new(image_kind, offload_kind, bytes)
        .with("triple", triple)
        .with("arch", arch.unwrap_or_default());
    for (k, v) in others {
        entry.set(k, v);
    }
    Ok(entry)
}

/// Input this large (all images together) shows a spinner with the phase
/// on a terminal.
const LARGE_INPUT: u64 = 64 << 20;

/// Builds the output bytes for `args` without writing them, telling
/// `progress` each phase.
fn build(args: &Args, progress: &mut Progress) -> anyhow::Result<Vec<u8>> {
    let specs = args
        .images
        .iter()
        .map(|s| parse_image_spec(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let meta = parse_meta(&args.meta)?;
    let mut files = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        progress.phase(format!(
            "reading image {}/{}: {}",
            i + 1,
            specs.len(),
            s.file.display()
        ));
        files.push(read_file(&s.file)?);
    }
    let total: u64 = files.iter().map(|f| f.len() as u64).sum();
    progress.phase(format!(
        "checking and packing {} image{} ({})",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        progress::bytes(total)
    ));
    match args.format {
        Format::OffloadBinary => {
            if !meta.is_empty() && specs.len() != 1 {
                bail!("--meta needs exactly one --image with --format offload-binary (use key=value in each --image)");
            }
            let entries = specs
                .iter()
                .zip(&files)
                .map(|(s, b)| binary_entry(s, b, &meta))
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(offload_binary::try_write(&entries)?)
        }
        Format::OneOmp => {
            let [spec] = specs.as_slice() else {
                bail!(
                    "--format 1omp takes exactly one --image, got {}",
                    specs.len()
                );
            };
            examine(&spec.file, &files[0])?;
            let mut m = Metadata::new();
            for (k, v) in spec.pairs.iter().chain(&meta) {
                m.insert(k.clone(), v.clone());
            }
            Ok(metadata::try_write(&m, &files[0])?)
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // The inputs' sizes decide whether a spinner is worth showing.
    let input: u64 = args
        .images
        .iter()
        .filter_map(|s| parse_image_spec(s).ok())
        .filter_map(|s| std::fs::metadata(&s.file).ok())
        .map(|m| m.len())
        .sum();
    let mut progress = Progress::phases("offload pack", input >= LARGE_INPUT);
    let bytes = build(&args, &mut progress)?;
    progress.phase(format!(
        "writing {} ({})",
        args.output.display(),
        progress::bytes(bytes.len() as u64)
    ));
    std::fs::write(&args.output, bytes)
        .with_context(|| format!("cannot write {}", args.output.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_specs() {
        let s = parse_image_spec("a.so,triple=x,arch=y,k=1,k=2").unwrap();
        assert_eq!(s.file, PathBuf::from("a.so"));
        assert_eq!(
            s.pairs,
            vec![
                ("triple".into(), "x".into()),
                ("arch".into(), "y".into()),
                ("k".into(), "1,2".into())
            ]
        );
        let s = parse_image_spec("file=b.o,kind=cuda").unwrap();
        assert_eq!(s.file, PathBuf::from("b.o"));
        let s = parse_image_spec("kind=hip,file=c=d.o").unwrap();
        assert_eq!(s.file, PathBuf::from("c=d.o"));
        assert_eq!(s.pairs, vec![("kind".into(), "hip".into())]);
        assert!(parse_image_spec("").is_err());
        assert!(parse_image_spec(",triple=x").is_err());
        assert!(parse_image_spec("a,b").is_err());
        assert!(parse_image_spec("a,=b").is_err());
        assert!(parse_image_spec("a,file=b").is_err());
        let s = parse_image_spec("a,v=x=y,e=").unwrap();
        assert_eq!(
            s.pairs,
            vec![("v".into(), "x=y".into()), ("e".into(), "".into())]
        );
    }

    #[test]
    fn extensions() {
        assert_eq!(
            kind_from_extension(Path::new("x.bc")),
            Some(ImageKind::Bitcode)
        );
        assert_eq!(
            kind_from_extension(Path::new("x.so")),
            Some(ImageKind::Object)
        );
        assert_eq!(
            kind_from_extension(Path::new("x.ptx")),
            Some(ImageKind::Ptx)
        );
        assert_eq!(kind_from_extension(Path::new("x.txt")), None);
        assert_eq!(kind_from_extension(Path::new("x")), None);
    }
}
