//! Recursive container stripping.

use crate::metadata::{self, Metadata};
use crate::offload_binary::{self, ImageKind, OffloadKind};
use crate::{detect, elf, hex_prefix, ImageError, ImageFormat, Result};

/// How many containers may enclose a leaf image. One more is
/// [`ImageError::NestingTooDeep`].
pub const MAX_NESTING: usize = 8;

/// A leaf device image and what its containers said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceImage<'a> {
    /// The leaf's bytes, borrowed from the input.
    pub bytes: &'a [u8],
    /// The leaf's format ([`ImageFormat::Elf`], [`ImageFormat::Bitcode`] or
    /// [`ImageFormat::Unknown`]; never a container format).
    pub format: ImageFormat,
    /// The target triple: from the innermost `OffloadBinary`'s `triple`
    /// string, else (for an ELF leaf) guessed from its `e_machine`.
    pub triple: Option<String>,
    /// The processor: from the innermost `OffloadBinary`'s non-empty `arch`
    /// string, else from the `1OMP` `TargetID`
    /// (see [`metadata::arch_from_target_id`]).
    pub arch: Option<String>,
    /// The innermost `OffloadBinary`'s image kind.
    pub image_kind: Option<ImageKind>,
    /// The innermost `OffloadBinary`'s offload kind.
    pub offload_kind: Option<OffloadKind>,
    /// The `OffloadBinary` string maps (including `triple` and `arch`),
    /// merged outer to inner: inner values replace outer ones.
    pub strings: Vec<(String, String)>,
    /// The `1OMP` metadata, merged outer to inner: inner values replace
    /// outer ones.
    pub metadata: Metadata,
    /// The containers that were stripped, outermost first.
    pub containers: Vec<ImageFormat>,
}

impl DeviceImage<'_> {
    /// The value of `key` in the merged `OffloadBinary` string map.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.strings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Default)]
struct Ctx {
    triple: Option<String>,
    arch: Option<String>,
    image_kind: Option<ImageKind>,
    offload_kind: Option<OffloadKind>,
    strings: Vec<(String, String)>,
    metadata: Metadata,
    containers: Vec<ImageFormat>,
}

fn non_empty(s: Option<&str>) -> Option<String> {
    s.filter(|s| !s.is_empty()).map(str::to_owned)
}

fn enter(ctx: &Ctx, format: ImageFormat) -> Result<Ctx> {
    if ctx.containers.len() >= MAX_NESTING {
        return Err(ImageError::NestingTooDeep { limit: MAX_NESTING });
    }
    let mut c = ctx.clone();
    c.containers.push(format);
    Ok(c)
}

/// Collects leaves, charging the string data copied into each one against a
/// budget so that many leaves under a large string map cannot exhaust
/// memory.
struct Out<'a> {
    images: Vec<DeviceImage<'a>>,
    budget: u64,
}

impl<'a> Out<'a> {
    fn new(input_len: usize) -> Self {
        Out {
            images: Vec::new(),
            budget: COPY_BUDGET_SLACK
                .saturating_add((input_len as u64).saturating_mul(COPY_BUDGET_FACTOR)),
        }
    }
}

/// Leaves may carry copies of string maps and metadata totalling at most
/// this many times the input's size, plus [`COPY_BUDGET_SLACK`].
const COPY_BUDGET_FACTOR: u64 = 16;
const COPY_BUDGET_SLACK: u64 = 64 << 20;

fn pairs_len<'s>(pairs: impl Iterator<Item = (&'s str, &'s str)>) -> u64 {
    pairs.map(|(k, v)| (k.len() + v.len() + 16) as u64).sum()
}

fn walk<'a>(bytes: &'a [u8], ctx: &Ctx, top: bool, out: &mut Out<'a>) -> Result<()> {
    let format = detect(bytes);
    match format {
        ImageFormat::OffloadBinary => {
            let binaries = offload_binary::parse_all(bytes)?;
            for b in binaries {
                let mut c = enter(ctx, format)?;
                crate::merge_pairs(
                    &mut c.strings,
                    b.strings.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                );
                if let Some(t) = non_empty(b.triple()) {
                    c.triple = Some(t);
                }
                if let Some(a) = non_empty(b.arch()) {
                    c.arch = Some(a);
                }
                c.image_kind = Some(b.image_kind);
                c.offload_kind = Some(b.offload_kind);
                walk(b.image, &c, false, out)?;
            }
            Ok(())
        }
        ImageFormat::MetadataHeader => {
            let mut c = enter(ctx, format)?;
            let (meta, image) = metadata::parse(bytes)?;
            c.metadata.merge(&meta);
            walk(image, &c, false, out)
        }
        ImageFormat::Unknown if top && crate::cuda::detect(bytes).is_none() => {
            Err(ImageError::Unrecognised {
                found: hex_prefix(bytes),
                len: bytes.len(),
            })
        }
        ImageFormat::Elf | ImageFormat::Bitcode | ImageFormat::Unknown => {
            let mut triple = ctx.triple.clone();
            if format == ImageFormat::Elf {
                // Validate every ELF leaf, and use it for the triple if no
                // container named one.
                let info = elf::info(bytes)?;
                if triple.is_none() {
                    triple = info.triple.map(str::to_owned);
                }
            }
            // CUDA code (PTX text, a fatbinary, a cubin) names its own
            // triple and SM when no container did.
            let cuda = crate::cuda::detect(bytes);
            if triple.is_none() && cuda.is_some() {
                triple = Some(crate::cuda::TRIPLE.to_owned());
            }
            let arch = ctx
                .arch
                .clone()
                .or_else(|| ctx.metadata.arch().map(str::to_owned))
                .or_else(|| cuda.and_then(|_| crate::cuda::arch_of(bytes)));
            let cost = pairs_len(ctx.strings.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                + pairs_len(ctx.metadata.iter());
            out.budget = out.budget.checked_sub(cost).ok_or(ImageError::TooLarge {
                what: "the string maps and metadata copied into the unwrapped images",
                size: cost,
            })?;
            out.images.push(DeviceImage {
                bytes,
                format,
                triple,
                arch,
                image_kind: ctx.image_kind,
                offload_kind: ctx.offload_kind,
                strings: ctx.strings.clone(),
                metadata: ctx.metadata.clone(),
                containers: ctx.containers.clone(),
            });
            Ok(())
        }
    }
}

/// Strips `OffloadBinary` and `1OMP` containers (nested in any order, at
/// most [`MAX_NESTING`] deep) and returns every leaf image, in order.
///
/// * A plain ELF gives one image whose triple is guessed from `e_machine`
///   and whose arch is `None`.
/// * An `OffloadBinary` (or several concatenated) gives the leaves of each
///   binary's image, with triple, arch, kinds and strings from the binary; an
///   empty `arch` counts as absent.
/// * A `1OMP` header gives the leaves of its image with the metadata
///   attached; its `TargetID` fills `arch` only when no `OffloadBinary`
///   supplied one.
/// * Bitcode is a leaf. Inside a container, bytes of no known format (PTX
///   text, a fatbinary, an empty image, ...) are a leaf of format
///   [`ImageFormat::Unknown`]; at the top level they are
///   [`ImageError::Unrecognised`].
/// * Every ELF leaf is validated with [`elf::info`]; a malformed one is an
///   error.
pub fn unwrap(bytes: &[u8]) -> Result<Vec<DeviceImage<'_>>> {
    let mut out = Out::new(bytes.len());
    walk(bytes, &Ctx::default(), true, &mut out)?;
    Ok(out.images)
}

/// Finds the `.llvm.offloading` sections of a host executable, shared
/// object or relocatable object and [`unwrap`]s their contents (each section
/// holds concatenated `OffloadBinary`s; empty sections are skipped).
///
/// For an executable the leaves are the linked device images (an ELF shared
/// object for CPU targets); for a `.o` they are the device objects
/// (relocatable ELF) or bitcode. The host ELF itself is not listed in
/// [`DeviceImage::containers`]. A host without such sections gives an empty
/// list.
pub fn images_in_host_binary(bytes: &[u8]) -> Result<Vec<DeviceImage<'_>>> {
    let mut out = Out::new(bytes.len());
    for section in elf::offloading_sections(bytes)? {
        if section.iter().all(|&b| b == 0) {
            continue;
        }
        walk(section, &Ctx::default(), true, &mut out)?;
    }
    Ok(out.images)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload_binary::OffloadBinary;
    use crate::test_elf;

    #[test]
    fn plain_elf() {
        let e = test_elf::build(elf::EM_AARCH64, 3, None, &[]);
        let imgs = unwrap(&e).unwrap();
        assert_eq!(imgs.len(), 1);
        assert_eq!(imgs[0].format, ImageFormat::Elf);
        assert_eq!(imgs[0].triple.as_deref(), Some("aarch64-unknown-linux-gnu"));
        assert_eq!(imgs[0].arch, None);
        assert!(imgs[0].containers.is_empty());
    }

    #[test]
    fn unknown_top_level_is_an_error() {
        let err = unwrap(b"hello world").unwrap_err();
        assert!(err.to_string().starts_with("not a recognised device image"));
        assert!(unwrap(b"").is_err());
    }

    #[test]
    fn ptx_inside_offload_binary_is_unknown_leaf() {
        let ptx = b"//\n.version 8.0\n.target sm_80\n";
        let bin =
            offload_binary::write(&[OffloadBinary::new(ImageKind::Ptx, OffloadKind::Cuda, ptx)
                .with("triple", "nvptx64-nvidia-cuda")
                .with("arch", "sm_80")]);
        let imgs = unwrap(&bin).unwrap();
        assert_eq!(imgs.len(), 1);
        assert_eq!(imgs[0].format, ImageFormat::Unknown);
        assert_eq!(imgs[0].bytes, ptx);
        assert_eq!(imgs[0].arch.as_deref(), Some("sm_80"));
        assert_eq!(imgs[0].image_kind, Some(ImageKind::Ptx));
        assert_eq!(imgs[0].containers, vec![ImageFormat::OffloadBinary]);
    }

    #[test]
    fn host_binary_sections() {
        let dev = test_elf::build(elf::EM_X86_64, 3, None, &[("__omp_offloading_k", true, 4)]);
        let bin = offload_binary::write(&[OffloadBinary::new(
            ImageKind::Object,
            OffloadKind::OpenMp,
            &dev,
        )
        .with("triple", "x86_64-unknown-linux-gnu")
        .with("arch", "")]);
        let host = test_elf::build(elf::EM_X86_64, 2, Some(&bin), &[("main", true, 10)]);
        let imgs = images_in_host_binary(&host).unwrap();
        assert_eq!(imgs.len(), 1);
        assert_eq!(imgs[0].bytes, &dev[..]);
        assert_eq!(imgs[0].arch, None);
        assert_eq!(imgs[0].string("arch"), Some(""));
        let plain = test_elf::build(elf::EM_X86_64, 2, None, &[]);
        assert!(images_in_host_binary(&plain).unwrap().is_empty());
        assert!(images_in_host_binary(b"not elf").is_err());
    }
}
