//! Hostile inputs: random buffers and mutated valid images must never panic,
//! and whatever parses must survive a write/parse round trip.

mod common;

use common::{test_elf, Rng};
use offload_image::metadata::{self, Metadata};
use offload_image::offload_binary::{self, ImageKind, OffloadBinary, OffloadKind};
use offload_image::{amdgpu, cuda, detect, elf, images_in_host_binary, unwrap};

/// Calls every parser on `b`; checks round-trip properties of what parses.
fn exercise(b: &[u8]) {
    let _ = detect(b);
    let _ = unwrap(b);
    let _ = elf::info(b);
    let _ = elf::defined_symbols(b);
    let _ = elf::offloading_sections(b);
    let _ = elf::symtab_names(b);
    let _ = elf::object_sizes(b);
    let _ = elf::sections_named(b, ".nv.info");
    let _ = images_in_host_binary(b);
    let _ = offload_binary::parse_all(b);
    exercise_cuda(b);
    exercise_amdgpu(b);
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

/// The AMD GPU readers: the processor, the metadata note (and the note's
/// MessagePack read from anywhere).
fn exercise_amdgpu(b: &[u8]) {
    let _ = amdgpu::code_object_processor(b);
    if let Some(t) = amdgpu::TargetId::of_code_object(b) {
        // A code object's target ID prints as one that parses back.
        assert_eq!(
            amdgpu::TargetId::parse(&t.to_string()).map(|p| p.processor),
            Ok(t.processor)
        );
    }
    if let Ok(t) = amdgpu::TargetId::parse(&String::from_utf8_lossy(b)) {
        // Whatever parses prints canonically and parses back the same.
        assert_eq!(amdgpu::TargetId::parse(&t.to_string()), Ok(t));
    }
    // The note's reader is in the `amdgpu-metadata` feature, which
    // `cargo test --workspace` turns on (the AMDGPU plugin needs it).
    #[cfg(feature = "amdgpu-metadata")]
    {
        if let Ok(Some(meta)) = amdgpu::code_object_metadata(b) {
            for k in &meta.kernels {
                // Whatever parses describes arguments that fit in the note.
                assert!(k.args.len() <= b.len());
                let _ = k.explicit_size();
            }
        }
        let _ = amdgpu::parse_metadata(b);
    }
}

/// The CUDA readers: PTX directives, cubin targets and register counts,
/// fatbinary entries (and the payloads they point at).
fn exercise_cuda(b: &[u8]) {
    let _ = cuda::detect(b);
    let _ = cuda::ptx_info(b);
    let _ = cuda::cubin_target(b);
    let _ = cuda::arch_of(b);
    let _ = cuda::fatbin_sections(b);
    if let Ok(regs) = cuda::cubin_registers(b) {
        // Each count is one 12-byte record of a `.nv.info` section (several
        // section headers may name the same bytes).
        let sections = elf::sections_named(b, ".nv.info").unwrap_or_default();
        assert!(regs.len() <= sections.iter().map(|s| s.len() / 12).sum::<usize>());
    }
    if let Ok(entries) = cuda::fatbin_entries(b) {
        for e in &entries {
            let _ = cuda::cubin_registers(e.payload);
            let _ = cuda::ptx_info(e.payload);
        }
    }
    let _ = cuda::fatbin_runs_on(b, cuda::Sm::from_number(90));
}

/// A cubin (`EM_CUDA`, sm_90) whose `.nv.info` gives k1 and k2 their
/// register counts, between attributes of the other formats.
fn cubin_sample() -> Vec<u8> {
    let mut info = vec![1, 0x0a, 0, 0, 3, 0x1b, 0x20, 0];
    for (symbol, registers) in [(1u32, 32u32), (2, 40)] {
        info.extend([4, 0x2f, 8, 0]);
        info.extend(symbol.to_le_bytes());
        info.extend(registers.to_le_bytes());
    }
    info.extend([4, 0x11, 4, 0, 1, 2, 3, 4]);
    test_elf::cubin_with_info(&info)
}

const PTX_SAMPLE: &[u8] = b"// generated\n.version 8.0\n.target sm_90\n.address_size 64\n\
    .visible .global .align 4 .u32 counter;\n\
    .visible .entry k(.param .u64 p)\n{\n  ret;\n}\n";

/// A fatbinary with a PTX and a cubin entry.
fn fatbin_sample(cubin: &[u8]) -> Vec<u8> {
    let mut entries = Vec::new();
    for (kind, payload) in [(1u16, PTX_SAMPLE), (2, cubin)] {
        let mut h = vec![0u8; 64];
        h[..2].copy_from_slice(&kind.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        h[28..32].copy_from_slice(&90u32.to_le_bytes());
        entries.extend(h);
        entries.extend(payload);
    }
    let mut f = cuda::FATBIN_MAGIC.to_le_bytes().to_vec();
    f.extend(1u16.to_le_bytes());
    f.extend(16u16.to_le_bytes());
    f.extend((entries.len() as u64).to_le_bytes());
    f.extend(entries);
    f
}

/// A gfx90a code object with a metadata note (tests/data/README.md).
const AMDGPU_SAMPLE: &[u8] = include_bytes!("data/scale-gfx90a.hsaco");

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
    let cubin = cubin_sample();
    let fatbin = fatbin_sample(&cubin);
    vec![
        AMDGPU_SAMPLE.to_vec(),
        dev,
        cubin,
        fatbin,
        PTX_SAMPLE.to_vec(),
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

/// The CUDA samples are what they claim, so their mutations start from
/// code the readers accept.
#[test]
fn amdgpu_sample_parses() {
    assert_eq!(amdgpu::code_object_processor(AMDGPU_SAMPLE), Some("gfx90a"));
    #[cfg(feature = "amdgpu-metadata")]
    amdgpu_sample_note();
}

#[cfg(feature = "amdgpu-metadata")]
fn amdgpu_sample_note() {
    let meta = amdgpu::code_object_metadata(AMDGPU_SAMPLE)
        .unwrap()
        .unwrap();
    assert_eq!(meta.version, [1, 2]);
    assert_eq!(meta.target.as_deref(), Some("amdgcn-amd-amdhsa--gfx90a"));
    let k = meta.kernel("scale").unwrap();
    assert_eq!(k.symbol, "scale.kd");
    assert_eq!(k.explicit_size(), 16);
    // Code object version 5: the hidden arguments right after the
    // explicit ones, 8-byte aligned.
    assert_eq!(k.hidden("hidden_block_count_x").unwrap().offset, 16);
    assert_eq!(k.hidden("hidden_group_size_x").unwrap().offset, 28);
    assert!(k.kernarg_segment_size >= 16 + 256 - 16);
}

#[test]
fn cuda_samples_parse() {
    let cubin = cubin_sample();
    let regs = cuda::cubin_registers(&cubin).unwrap();
    let counts: Vec<(&str, u32)> = regs
        .iter()
        .map(|r| (r.name.as_str(), r.registers))
        .collect();
    assert_eq!(counts, [("k1", 32), ("k2", 40)]);
    assert_eq!(cuda::arch_of(&cubin).as_deref(), Some("sm_90"));
    let ptx = cuda::ptx_info(PTX_SAMPLE).unwrap();
    assert_eq!(
        (ptx.entries, ptx.globals),
        (vec!["k".to_string()], vec!["counter".to_string()])
    );
    let fatbin = fatbin_sample(&cubin);
    let entries = cuda::fatbin_entries(&fatbin).unwrap();
    let kinds: Vec<_> = entries.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [cuda::EntryKind::Ptx, cuda::EntryKind::Cubin]);
    assert_eq!(entries[1].payload, &cubin[..]);
    assert!(cuda::fatbin_runs_on(&fatbin, cuda::Sm::from_number(90)));
}

#[test]
fn random_buffers_do_not_panic() {
    let magics: [&[u8]; 8] = [
        b"\x7fELF\x02\x01\x01\0",
        b"\x50\xed\x55\xba\x01\0\x10\0",
        b".version 8.0\n.target sm_90\n.entry k {",
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
