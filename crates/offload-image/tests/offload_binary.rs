//! OffloadBinary write/parse round trips and hostile headers.

mod common;

use common::Rng;
use offload_image::offload_binary::{
    self, parse, parse_all, write, ImageKind, OffloadBinary, OffloadKind,
};
use offload_image::ImageError;

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn sample() -> Vec<u8> {
    write(&[
        OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, b"IMAGEDATA")
            .with("triple", "x86_64-unknown-linux-gnu")
            .with("arch", "generic"),
    ])
}

#[test]
fn round_trip_many_entries_many_strings() {
    let mut rng = Rng::new(7);
    let images: Vec<Vec<u8>> = (0..6)
        .map(|i| rng.bytes([0, 1, 7, 8, 9, 1000][i]))
        .collect();
    let kinds = [
        (ImageKind::Object, OffloadKind::OpenMp),
        (ImageKind::Bitcode, OffloadKind::Hip),
        (ImageKind::Cubin, OffloadKind::Cuda),
        (ImageKind::Fatbinary, OffloadKind::Cuda),
        (ImageKind::SpirV, OffloadKind::Sycl),
        (ImageKind::Other(77), OffloadKind::Other(3)),
    ];
    let entries: Vec<OffloadBinary<'_>> = images
        .iter()
        .zip(kinds)
        .enumerate()
        .map(|(i, (img, (ik, ok)))| {
            let mut b = OffloadBinary::new(ik, ok, img);
            b.flags = 0xdead_0000 | i as u32;
            b.set("triple", format!("triple-{i}"));
            b.set(
                "arch",
                if i % 2 == 0 {
                    String::new()
                } else {
                    format!("gfx9{i}")
                },
            );
            for j in 0..(i * 20) {
                b.set(
                    format!("key{j}"),
                    format!("value {j} ünïcode = {}", "x".repeat(j)),
                );
            }
            b.set("shared", "same value"); // deduplicated in the table
            b
        })
        .collect();
    let bytes = write(&entries);
    assert_eq!(bytes.len() % 8, 0);
    let parsed = parse_all(&bytes).unwrap();
    assert_eq!(parsed, entries);

    // Each binary is consumed exactly, and each one's size is a multiple of 8.
    let mut pos = 0;
    for e in &entries {
        let (b, used) = parse(&bytes[pos..]).unwrap();
        assert_eq!(&b, e);
        assert_eq!(used % 8, 0);
        pos += used;
    }
    assert_eq!(pos, bytes.len());
}

#[test]
fn layout_matches_llvm_writer() {
    let b = sample();
    assert_eq!(&b[..4], &offload_binary::MAGIC);
    assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 1);
    assert_eq!(get_u64(&b, 8), b.len() as u64);
    assert_eq!(get_u64(&b, 16), 32); // entry offset
    assert_eq!(get_u64(&b, 24), 40); // entry size
    assert_eq!(u16::from_le_bytes([b[32], b[33]]), 1); // image kind
    assert_eq!(u16::from_le_bytes([b[34], b[35]]), 1); // offload kind
    assert_eq!(get_u64(&b, 40), 72); // string map offset
    assert_eq!(get_u64(&b, 48), 2); // num strings
    let table = 72 + 2 * 16;
    assert_eq!(b[table], 0, "string table starts with NUL");
    assert_eq!(get_u64(&b, 56) % 8, 0, "image aligned");
    assert_eq!(get_u64(&b, 64), 9);
}

#[test]
fn empty_image_and_no_strings() {
    let e = OffloadBinary::new(ImageKind::None, OffloadKind::None, b"");
    let bytes = write(std::slice::from_ref(&e));
    let (p, used) = parse(&bytes).unwrap();
    assert_eq!(p, e);
    assert_eq!(used, bytes.len());
    assert_eq!(p.triple(), None);
}

#[test]
fn hostile_fields() {
    let good = sample();
    let len = good.len() as u64;
    // (field offset, value) pairs that must each be rejected.
    let cases: &[(usize, u64)] = &[
        (8, 0),         // size smaller than header
        (8, 31),        // size smaller than header
        (8, len + 8),   // size beyond buffer
        (8, u64::MAX),  // size beyond buffer
        (16, len),      // entry offset at end
        (16, u64::MAX), // entry offset overflows
        (16, len - 39), // entry straddles end
        (24, 0),        // entry size too small
        (24, u64::MAX), // entry size overflows
        (40, len),      // string map past end
        (40, u64::MAX - 8),
        (48, u64::MAX), // num_strings * 16 overflows
        (48, 1 << 60),  // overflows as well
        (48, 1000),     // map runs past the end
        (56, len),      // image past end
        (56, u64::MAX),
        (64, len), // image size too large
        (64, u64::MAX),
        (72, len), // key offset out of range
        (72, u64::MAX),
        (80, len + 100), // value offset out of range
    ];
    for &(at, v) in cases {
        let mut b = good.clone();
        put_u64(&mut b, at, v);
        let err = parse(&b).expect_err(&format!("field at {at} = {v:#x} accepted"));
        assert!(!err.to_string().is_empty());
        assert!(parse_all(&b).is_err());
    }
}

#[test]
fn specific_errors() {
    let good = sample();

    let mut b = good.clone();
    b[4] = 2;
    assert!(matches!(
        parse(&b),
        Err(ImageError::UnsupportedVersion { version: 2, .. })
    ));

    let mut b = good.clone();
    b[0] = 0;
    assert!(matches!(parse(&b), Err(ImageError::BadMagic { .. })));

    assert!(matches!(
        parse(&good[..31]),
        Err(ImageError::Truncated { needed: 32, .. })
    ));
    let e = parse(&good[..good.len() - 1]).unwrap_err();
    assert!(matches!(e, ImageError::Truncated { .. }), "{e}");

    // Image size too large: the message names the region and its numbers.
    let mut b = good.clone();
    put_u64(&mut b, 64, 0x1000);
    let msg = parse(&b).unwrap_err().to_string();
    assert!(msg.contains("image") && msg.contains("0x1000"), "{msg}");

    // A string that runs to the end of the binary without a NUL.
    let mut b = good.clone();
    let size = b.len();
    put_u64(&mut b, 72, size as u64 - 1);
    b[size - 1] = b'x';
    assert!(matches!(
        parse(&b),
        Err(ImageError::UnterminatedString { .. })
    ));

    // A string that is not UTF-8.
    let mut b = good.clone();
    let key = get_u64(&b, 72) as usize;
    b[key] = 0xff;
    assert!(matches!(parse(&b), Err(ImageError::InvalidUtf8 { .. })));
}

#[test]
fn parse_all_reports_offset_of_bad_second_binary() {
    let mut bytes = sample();
    let first = bytes.len();
    bytes.extend_from_slice(&sample());
    bytes[first + 4] = 9; // version of the second one
    match parse_all(&bytes) {
        Err(ImageError::UnsupportedVersion { offset, version: 9 }) => {
            assert_eq!(offset, first as u64)
        }
        other => panic!("{other:?}"),
    }
    // Garbage after a valid binary is an error, not silently ignored.
    let mut bytes = sample();
    bytes.extend_from_slice(b"garbage!");
    assert!(parse_all(&bytes).is_err());
}

#[test]
fn parse_ignores_bytes_after_size() {
    let mut bytes = sample();
    let n = bytes.len();
    bytes.extend_from_slice(b"trailing");
    let (_, used) = parse(&bytes).unwrap();
    assert_eq!(used, n);
}

#[test]
fn unaligned_input_is_fine() {
    let good = sample();
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&good);
    let (b, _) = parse(&shifted[1..]).unwrap();
    assert_eq!(b.image, b"IMAGEDATA");
}
