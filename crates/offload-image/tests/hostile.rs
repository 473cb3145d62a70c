//! Hostile inputs: random buffers and mutated valid images must never panic,
//! and whatever parses must survive a write/parse round trip.

mod common;

use common::{test_elf, Rng};
use offload_image::metadata::{self, Metadata};
use offload_image::offload_binary::{self, ImageKind, OffloadBinary, OffloadKind};
use offload_image::{detect, elf, images_in_host_binary, unwrap};

/// Calls every parser on `b`; checks round-trip properties of what parses.
fn exercise(b: &[u8]) {
    let _ = detect(b);
    let _ = unwrap(b);
    let _ = elf::info(b);
    let _ = elf::defined_symbols(b);
    let _ = elf::offloading_sections(b);
    let _ = images_in_host_binary(b);
    let _ = offload_binary::parse_all(b);
    if let Ok((bin, used)) = offload_binary::parse(b) {
        assert!(used <= b.len());
        let again = offload_binary::write(std::slice::from_ref(&bin));
        let (reparsed, _) = offload_binary::parse(&again).expect("rewritten binary parses");
        assert_eq!(reparsed, bin);
    }
    if let Ok((meta, image)) = metadata::parse(b) {
        let again = metadata::write(&meta, image);
        let (m2, i2) = metadata::parse(&again).expect("rewritten 1OMP parses");
        assert_eq!(m2, meta);
        assert_eq!(i2, image);
    }
}

fn samples() -> Vec<Vec<u8>> {
    let dev = test_elf::build(224, 3, None, &[("kernel", true, 64), ("g", false, 4)]);
    let omp = metadata::write(
        &[
            (metadata::TARGET_ID, "amdgcn-amd-amdhsa--gfx90a"),
            (metadata::COMPILE_OPTIONS, "-O2"),
        ]
        .into_iter()
        .collect::<Metadata>(),
        &dev,
    );
    let ob = offload_binary::write(&[
        OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, &omp)
            .with("triple", "amdgcn-amd-amdhsa")
            .with("arch", "gfx90a"),
        OffloadBinary::new(ImageKind::Ptx, OffloadKind::Cuda, b".version 8.0\n")
            .with("triple", "nvptx64-nvidia-cuda"),
    ]);
    let omp_outer = metadata::write(
        &[("Producer", "x"), ("Nested", "y: [z]")]
            .into_iter()
            .collect::<Metadata>(),
        &ob,
    );
    let host = test_elf::build(62, 2, Some(&ob), &[("main", true, 8)]);
    let yaml = "A: [1, {b: c}]\nB: 'q'\nC: \"\\u00e9\"\n";
    let mut raw_omp = b"1OMP".to_vec();
    raw_omp.extend_from_slice(&(yaml.len() as u32).to_le_bytes());
    raw_omp.extend_from_slice(yaml.as_bytes());
    raw_omp.extend_from_slice(b"BC\xC0\xDE");
    vec![
        dev,
        omp,
        ob,
        omp_outer,
        host,
        raw_omp,
        test_elf::header32(3, 1, true),
    ]
}

#[test]
fn samples_are_valid() {
    for s in samples() {
        if detect(&s) == offload_image::ImageFormat::Elf && s.len() > 100 {
            elf::info(&s).unwrap();
        } else {
            unwrap(&s).unwrap();
        }
        exercise(&s);
    }
}

#[test]
fn random_buffers_do_not_panic() {
    let magics: [&[u8]; 6] = [
        b"\x7fELF\x02\x01\x01\0",
        b"\x7fELF\x01\x02\x01\0",
        &offload_binary::MAGIC,
        b"\x10\xff\x10\xad\x01\0\0\0",
        b"1OMP",
        b"BC\xC0\xDE",
    ];
    let mut rng = Rng::new(0xfeed_beef);
    for _ in 0..10_000 {
        let len = rng.below(300);
        let mut b = rng.bytes(len);
        if rng.below(2) == 0 {
            let m = magics[rng.below(magics.len())];
            let n = m.len().min(b.len());
            b[..n].copy_from_slice(&m[..n]);
            // Small 1OMP lengths so the YAML parser is reached.
            if m == b"1OMP" && b.len() >= 8 {
                let n = rng.below(b.len() - 7) as u32;
                b[4..8].copy_from_slice(&n.to_le_bytes());
            }
        }
        exercise(&b);
    }
}

#[test]
fn mutated_samples_do_not_panic() {
    let mut rng = Rng::new(42);
    for s in samples() {
        for _ in 0..1_500 {
            let mut b = s.clone();
            match rng.below(5) {
                0 => {
                    // Flip a few bits.
                    for _ in 0..=rng.below(4) {
                        let i = rng.below(b.len());
                        b[i] ^= 1 << rng.below(8);
                    }
                }
                1 => {
                    // Overwrite an aligned word with a hostile value.
                    let i = rng.below(b.len() / 8) * 8;
                    let v: u64 = match rng.below(4) {
                        0 => u64::MAX,
                        1 => b.len() as u64 + rng.below(64) as u64,
                        2 => 1 << rng.below(64),
                        _ => rng.next_u64(),
                    };
                    b[i..i + 8].copy_from_slice(&v.to_le_bytes());
                }
                2 => {
                    // Truncate.
                    let n = rng.below(b.len());
                    b.truncate(n);
                }
                3 => {
                    // Overwrite a random byte.
                    let i = rng.below(b.len());
                    b[i] = rng.next_u64() as u8;
                }
                _ => {
                    // Splice in random bytes.
                    let i = rng.below(b.len());
                    let n = rng.below(16);
                    let junk = rng.bytes(n);
                    b.splice(i..i, junk);
                }
            }
            exercise(&b);
        }
    }
}

#[test]
fn every_truncation_of_every_sample_is_handled() {
    for s in samples() {
        for n in 0..s.len() {
            exercise(&s[..n]);
        }
    }
}
