//! Recursive unwrapping of nested containers.

mod common;

use common::test_elf;
use offload_image::metadata::{self, Metadata};
use offload_image::offload_binary::{self, ImageKind, OffloadBinary, OffloadKind};
use offload_image::{detect, unwrap, ImageError, ImageFormat, MAX_NESTING};

fn ob(image: &[u8], triple: &str, arch: &str) -> Vec<u8> {
    offload_binary::write(&[
        OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, image)
            .with("triple", triple)
            .with("arch", arch),
    ])
}

fn meta(pairs: &[(&str, &str)]) -> Metadata {
    pairs.iter().map(|&(k, v)| (k, v)).collect()
}

#[test]
fn metadata_inside_offload_binary() {
    let dev = test_elf::build(224, 3, None, &[]);
    let inner = metadata::write(
        &meta(&[
            (metadata::PRODUCER, "test"),
            (metadata::TARGET_ID, "gfx90a"),
        ]),
        &dev,
    );
    let outer = ob(&inner, "amdgcn-amd-amdhsa", "gfx1030");
    let imgs = unwrap(&outer).unwrap();
    assert_eq!(imgs.len(), 1);
    let i = &imgs[0];
    assert_eq!(i.bytes, &dev[..]);
    assert_eq!(i.format, ImageFormat::Elf);
    assert_eq!(
        i.containers,
        vec![ImageFormat::OffloadBinary, ImageFormat::MetadataHeader]
    );
    assert_eq!(i.triple.as_deref(), Some("amdgcn-amd-amdhsa"));
    // The OffloadBinary's arch wins over the TargetID.
    assert_eq!(i.arch.as_deref(), Some("gfx1030"));
    assert_eq!(i.metadata.get(metadata::PRODUCER), Some("test"));
    assert_eq!(i.string("arch"), Some("gfx1030"));
    assert_eq!(i.image_kind, Some(ImageKind::Object));
    assert_eq!(i.offload_kind, Some(OffloadKind::OpenMp));
}

#[test]
fn offload_binary_inside_metadata() {
    let dev = test_elf::build(224, 3, None, &[]);
    let inner = ob(&dev, "amdgcn-amd-amdhsa", "");
    let outer = metadata::write(
        &meta(&[(metadata::TARGET_ID, "amdgcn-amd-amdhsa--gfx90a:xnack+")]),
        &inner,
    );
    assert_eq!(detect(&outer), ImageFormat::MetadataHeader);
    let imgs = unwrap(&outer).unwrap();
    assert_eq!(imgs.len(), 1);
    let i = &imgs[0];
    assert_eq!(
        i.containers,
        vec![ImageFormat::MetadataHeader, ImageFormat::OffloadBinary]
    );
    // Empty arch string is absent, so the TargetID fills it.
    assert_eq!(i.arch.as_deref(), Some("gfx90a:xnack+"));
    assert_eq!(i.bytes, &dev[..]);
}

#[test]
fn metadata_and_strings_merge_outer_to_inner() {
    let leaf = b"BC\xC0\xDE bitcode";
    let inner_meta = metadata::write(&meta(&[("A", "inner"), ("C", "only inner")]), leaf);
    let inner_ob = offload_binary::write(&[OffloadBinary::new(
        ImageKind::Bitcode,
        OffloadKind::Hip,
        &inner_meta,
    )
    .with("triple", "amdgcn-amd-amdhsa")
    .with("x", "inner")]);
    let outer_meta = metadata::write(&meta(&[("A", "outer"), ("B", "only outer")]), &inner_ob);
    let outer = offload_binary::write(&[OffloadBinary::new(
        ImageKind::Object,
        OffloadKind::OpenMp,
        &outer_meta,
    )
    .with("triple", "outer-triple")
    .with("arch", "outer-arch")
    .with("x", "outer")
    .with("y", "outer")]);

    let imgs = unwrap(&outer).unwrap();
    assert_eq!(imgs.len(), 1);
    let i = &imgs[0];
    assert_eq!(i.format, ImageFormat::Bitcode);
    assert_eq!(i.bytes, leaf);
    assert_eq!(
        i.metadata.iter().collect::<Vec<_>>(),
        vec![("A", "inner"), ("B", "only outer"), ("C", "only inner")]
    );
    assert_eq!(i.triple.as_deref(), Some("amdgcn-amd-amdhsa"));
    // The inner binary has no arch, so the outer one's stays.
    assert_eq!(i.arch.as_deref(), Some("outer-arch"));
    assert_eq!(i.string("x"), Some("inner"));
    assert_eq!(i.string("y"), Some("outer"));
    assert_eq!(i.image_kind, Some(ImageKind::Bitcode));
    assert_eq!(i.offload_kind, Some(OffloadKind::Hip));
    assert_eq!(i.containers.len(), 4);
}

#[test]
fn concatenated_binaries_give_one_image_each() {
    let a = test_elf::build(62, 3, None, &[]);
    let b = test_elf::build(183, 3, None, &[]);
    let ptx = b".version 8.0";
    let bytes = offload_binary::write(&[
        OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, &a)
            .with("triple", "x86_64-unknown-linux-gnu"),
        // No triple: guessed from the ELF.
        OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, &b),
        OffloadBinary::new(ImageKind::Ptx, OffloadKind::Cuda, ptx)
            .with("triple", "nvptx64-nvidia-cuda")
            .with("arch", "sm_90"),
    ]);
    let imgs = unwrap(&bytes).unwrap();
    assert_eq!(imgs.len(), 3);
    assert_eq!(imgs[0].triple.as_deref(), Some("x86_64-unknown-linux-gnu"));
    assert_eq!(imgs[1].triple.as_deref(), Some("aarch64-unknown-linux-gnu"));
    assert_eq!(imgs[1].arch, None);
    assert_eq!(imgs[2].format, ImageFormat::Unknown);
    assert_eq!(imgs[2].arch.as_deref(), Some("sm_90"));
}

#[test]
fn unknown_inside_metadata_is_a_leaf_but_not_at_top() {
    let m = metadata::write(&Metadata::new(), b"opaque");
    let imgs = unwrap(&m).unwrap();
    assert_eq!(imgs.len(), 1);
    assert_eq!(imgs[0].format, ImageFormat::Unknown);
    assert_eq!(imgs[0].bytes, b"opaque");
    match unwrap(b"opaque") {
        Err(e @ ImageError::Unrecognised { .. }) => {
            assert!(e.to_string().contains("not a recognised device image"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bitcode_is_a_leaf() {
    let imgs = unwrap(b"BC\xC0\xDE\x35\x14").unwrap();
    assert_eq!(imgs.len(), 1);
    assert_eq!(imgs[0].format, ImageFormat::Bitcode);
    assert_eq!(imgs[0].triple, None);
}

#[test]
fn broken_elf_leaf_is_an_error() {
    let dev = test_elf::build(62, 3, None, &[]);
    let bytes = ob(&dev[..dev.len() - 8], "x86_64-unknown-linux-gnu", "");
    assert!(matches!(unwrap(&bytes), Err(ImageError::Elf(_))));
}

fn nest(depth: usize, alternate: bool) -> Vec<u8> {
    let mut cur = b"leaf".to_vec();
    for level in 0..depth {
        cur = if alternate && level % 2 == 0 {
            metadata::write(&Metadata::new(), &cur)
        } else if alternate {
            ob(&cur, "t", "")
        } else {
            metadata::write(&meta(&[("Level", &level.to_string())]), &cur)
        };
    }
    cur
}

#[test]
fn nesting_limit() {
    for alternate in [false, true] {
        let ok = nest(MAX_NESTING, alternate);
        let imgs = unwrap(&ok).unwrap();
        assert_eq!(imgs[0].containers.len(), MAX_NESTING);
        assert_eq!(imgs[0].bytes, b"leaf");
        if !alternate {
            // Inner values replace outer ones.
            assert_eq!(imgs[0].metadata.get("Level"), Some("0"));
        }
        let bomb = nest(MAX_NESTING + 1, alternate);
        assert!(matches!(
            unwrap(&bomb),
            Err(ImageError::NestingTooDeep { limit: MAX_NESTING })
        ));
        let deep_bomb = nest(200, alternate);
        assert!(matches!(
            unwrap(&deep_bomb),
            Err(ImageError::NestingTooDeep { .. })
        ));
    }
}

#[test]
fn errors_inside_containers_propagate() {
    // 1OMP with an oversized length inside an OffloadBinary.
    let bad = b"1OMP\xff\xff\0\0a: b".to_vec();
    let bytes = ob(&bad, "t", "");
    assert!(matches!(
        unwrap(&bytes),
        Err(ImageError::MetadataTooLarge { .. })
    ));
    // Non-mapping YAML inside.
    let bad = metadata::write(&Metadata::new(), b"x");
    let mut bad2 = b"1OMP".to_vec();
    bad2.extend_from_slice(&3u32.to_le_bytes());
    bad2.extend_from_slice(b"[1]");
    bad2.extend_from_slice(&bad);
    assert!(matches!(
        unwrap(&bad2),
        Err(ImageError::MetadataNotMapping { .. })
    ));
}

#[test]
fn copy_amplification_is_bounded() {
    // One 60 KB string in an outer binary, copied into each of 2000 leaves,
    // would need ~120 MB for a ~200 KB input.
    let empty = OffloadBinary::new(ImageKind::None, OffloadKind::None, b"");
    let inner = offload_binary::write(&vec![empty; 2000]);
    let outer =
        offload_binary::write(&[
            OffloadBinary::new(ImageKind::None, OffloadKind::None, &inner)
                .with("big", "x".repeat(60_000)),
        ]);
    assert!(matches!(unwrap(&outer), Err(ImageError::TooLarge { .. })));
    // The same shape at a sane size is fine.
    let inner = offload_binary::write(&vec![
        OffloadBinary::new(
            ImageKind::None,
            OffloadKind::None,
            b""
        );
        100
    ]);
    let outer =
        offload_binary::write(&[
            OffloadBinary::new(ImageKind::None, OffloadKind::None, &inner)
                .with("big", "x".repeat(60_000)),
        ]);
    assert_eq!(unwrap(&outer).unwrap().len(), 100);
}
