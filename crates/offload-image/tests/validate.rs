//! `validate::x86_64_shared_object` on real clang-22 images: every kind
//! clang-22 links is accepted, and targeted corruptions of the fields
//! `ld.so` asserts or crashes on are refused with a message naming them.
//! Needs clang-22 (and lld-22), as the rest of the test suite does.

use std::path::Path;
use std::process::Command;

use offload_image::validate::{x86_64_shared_object, Checked};
use offload_image::{images_in_host_binary, ImageError};

const KERNELS: &str = r#"
#include <stdint.h>
int counter = 7;
long table[4] = {1, 2, 3, 4};
const char *names[2] = {"a", "b"};
void saxpy(const void *args, const void *item) {
  const struct { float a; const float *x; float *y; uint32_t n; } *p = args;
  for (uint32_t i = 0; i < p->n; i++) p->y[i] = p->a * p->x[i] + p->y[i];
  (void)item;
}
"#;

const WITH_PLT: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int f(int x) { char b[32]; snprintf(b, 32, "%d", x); return (int)strlen(b) + abs(x) + atoi(b); }
"#;

const CXX: &str = r#"
#include <vector>
#include <string>
#include <stdexcept>
static std::vector<int> v(10, 3);
thread_local int tl = 5;
struct S { S() { v.push_back(1); } ~S() { v.clear(); } } s;
extern "C" int kern(int x) {
  tl += x;
  try { if (x < 0) throw std::runtime_error("neg"); } catch (...) { return -1; }
  return (int)v.size() + tl + (int)std::to_string(x).size();
}
"#;

const OPENMP: &str = r#"
#include <stdio.h>
int table[4];
#pragma omp declare target to(table)
int main() {
  int x = 0;
#pragma omp target map(tofrom: x)
  { x = 42; table[1] = x; }
  printf("%d\n", x);
  return 0;
}
"#;

fn compile(dir: &Path, name: &str, ext: &str, source: &str, args: &[&str]) -> Vec<u8> {
    let src = dir.join(format!("{name}.{ext}"));
    let out = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let cc = if ext == "cpp" {
        "clang++-22"
    } else {
        "clang-22"
    };
    let status = Command::new(cc)
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("{cc} must be installed (see scripts/setup.sh): {e}"));
    assert!(
        status.success(),
        "{cc} failed to build {name} with {args:?}"
    );
    std::fs::read(out).unwrap()
}

fn shared(dir: &Path, name: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["-O1", "-fPIC", "-shared"];
    args.extend_from_slice(extra);
    compile(dir, name, "c", KERNELS, &args)
}

fn accepted(what: &str, image: &[u8]) -> Checked {
    x86_64_shared_object(image).unwrap_or_else(|e| panic!("{what} was refused: {e}"))
}

#[test]
fn every_kind_of_clang_22_image_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gnu = accepted("GNU ld image", &shared(d, "gnu", &[]));
    assert_eq!(gnu.needed, vec!["libc.so.6".to_string()]);
    assert!(gnu.symbols > 3 && gnu.relocations > 3, "{gnu:?}");
    assert!(gnu.entry_points_checked);
    assert!(gnu.init_fini_calls >= 4, "{gnu:?}");
    let variants: &[(&str, &[&str])] = &[
        ("lld", &["-fuse-ld=lld"]),
        (
            "lld_relr_both",
            &[
                "-fuse-ld=lld",
                "-Wl,-z,pack-relative-relocs",
                "-Wl,--hash-style=both",
            ],
        ),
        ("sysv_hash", &["-Wl,--hash-style=sysv"]),
        ("stripped", &["-s"]),
        ("lld_stripped", &["-fuse-ld=lld", "-s"]),
        ("now", &["-Wl,-z,now"]),
        ("lld_now", &["-fuse-ld=lld", "-Wl,-z,now"]),
        ("O3", &["-O3"]),
        ("debug", &["-g", "-O0"]),
    ];
    for (name, extra) in variants {
        let c = accepted(name, &shared(d, name, extra));
        assert_eq!(c.entry_points_checked, !name.contains("stripped"), "{name}");
    }
    // Version definitions.
    let script = d.join("vers.map");
    std::fs::write(&script, "V1 { global: saxpy; counter; local: *; };\n").unwrap();
    let arg = format!("-Wl,--version-script={}", script.display());
    accepted("versioned image", &shared(d, "versioned", &[&arg]));
    accepted(
        "lld versioned image",
        &shared(d, "lld_versioned", &["-fuse-ld=lld", &arg]),
    );
    // PLT calls, lazily and eagerly bound, with both linkers.
    for (name, extra) in [
        ("plt_bfd", &["-Wl,-z,lazy"][..]),
        ("plt_bfd_now", &["-Wl,-z,now"][..]),
        ("plt_lld", &["-fuse-ld=lld", "-Wl,-z,lazy"][..]),
        ("plt_lld_now", &["-fuse-ld=lld", "-Wl,-z,now"][..]),
    ] {
        let mut args = vec!["-O1", "-fPIC", "-shared"];
        args.extend_from_slice(extra);
        let c = accepted(name, &compile(d, name, "c", WITH_PLT, &args));
        assert!(c.relocations >= 3, "{name}: {c:?}");
    }
    // C++: constructors, destructors, exceptions, thread-local storage.
    for (name, extra) in [("cxx", &[][..]), ("cxx_lld", &["-fuse-ld=lld"][..])] {
        let mut args = vec!["-O2", "-fPIC", "-shared"];
        args.extend_from_slice(extra);
        let c = accepted(name, &compile(d, name, "cpp", CXX, &args));
        assert!(c.needed.iter().any(|n| n.starts_with("libstdc++")), "{c:?}");
    }
    // The device image of an OpenMP offload program.
    let exe = compile(
        d,
        "omp",
        "c",
        OPENMP,
        &["-fopenmp", "-fopenmp-targets=x86_64-unknown-linux-gnu"],
    );
    let images = images_in_host_binary(&exe).unwrap();
    assert_eq!(images.len(), 1);
    let c = accepted("OpenMP device image", images[0].bytes);
    assert!(c.needed.iter().any(|n| n == "libomp.so.5"), "{c:?}");
}

/// Offsets of the structures of a little-endian ELF64 image.
struct Layout {
    phdrs: Vec<(u32, usize)>,
    /// (tag, file offset of the entry)
    dynamic: Vec<(u64, usize)>,
    /// name -> (file offset, size)
    sections: Vec<(String, usize, usize)>,
}

fn le(b: &[u8], off: usize, n: usize) -> u64 {
    let mut v = 0u64;
    for i in (0..n).rev() {
        v = v << 8 | u64::from(b[off + i]);
    }
    v
}

fn put(b: &mut [u8], off: usize, n: usize, v: u64) {
    for i in 0..n {
        b[off + i] = (v >> (8 * i)) as u8;
    }
}

fn layout(img: &[u8]) -> Layout {
    let phoff = le(img, 32, 8) as usize;
    let phnum = le(img, 56, 2) as usize;
    let phdrs: Vec<(u32, usize)> = (0..phnum)
        .map(|i| (le(img, phoff + i * 56, 4) as u32, phoff + i * 56))
        .collect();
    let dyn_ph = phdrs.iter().find(|p| p.0 == 2).unwrap().1;
    let dyn_off = le(img, dyn_ph + 8, 8) as usize;
    let mut dynamic = Vec::new();
    for i in 0.. {
        let at = dyn_off + i * 16;
        let tag = le(img, at, 8);
        dynamic.push((tag, at));
        if tag == 0 {
            break;
        }
    }
    let shoff = le(img, 40, 8) as usize;
    let shnum = le(img, 60, 2) as usize;
    let shstr = le(img, shoff + le(img, 62, 2) as usize * 64 + 24, 8) as usize;
    let sections = (0..shnum)
        .map(|i| {
            let at = shoff + i * 64;
            let n = shstr + le(img, at, 4) as usize;
            let len = img[n..].iter().position(|&c| c == 0).unwrap();
            (
                String::from_utf8_lossy(&img[n..n + len]).into_owned(),
                le(img, at + 24, 8) as usize,
                le(img, at + 32, 8) as usize,
            )
        })
        .collect();
    Layout {
        phdrs,
        dynamic,
        sections,
    }
}

impl Layout {
    fn phdr(&self, p_type: u32) -> usize {
        self.phdrs.iter().find(|p| p.0 == p_type).unwrap().1
    }
    fn dyn_entry(&self, tag: u64) -> usize {
        self.dynamic.iter().find(|d| d.0 == tag).unwrap().1
    }
    fn section(&self, name: &str) -> (usize, usize) {
        let s = self.sections.iter().find(|s| s.0 == name).unwrap();
        (s.1, s.2)
    }
}

fn refused(image: &[u8], expect: &str) {
    match x86_64_shared_object(image) {
        Err(ImageError::Elf(msg)) => assert!(
            msg.contains(expect),
            "expected an error containing {expect:?}, got {msg:?}"
        ),
        other => panic!("expected an error containing {expect:?}, got {other:?}"),
    }
}

#[test]
fn corrupt_fields_are_refused_with_a_message_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let gnu = shared(dir.path(), "gnu", &[]);
    let lld = shared(
        dir.path(),
        "lld",
        &[
            "-fuse-ld=lld",
            "-Wl,-z,pack-relative-relocs",
            "-Wl,--hash-style=both",
        ],
    );
    let g = layout(&gnu);
    let l = layout(&lld);
    let edit = |img: &[u8], f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = img.to_vec();
        f(&mut m);
        m
    };

    // ELF header.
    refused(&edit(&gnu, &|m| m[4] = 1), "EI_CLASS");
    refused(&edit(&gnu, &|m| m[5] = 2), "EI_DATA");
    refused(&edit(&gnu, &|m| put(m, 16, 2, 2)), "ET_DYN");
    refused(&edit(&gnu, &|m| put(m, 18, 2, 183)), "EM_X86_64");
    refused(&edit(&gnu, &|m| put(m, 54, 2, 32)), "e_phentsize");
    refused(&edit(&gnu, &|m| put(m, 56, 2, 0xffff)), "e_phnum");
    refused(&edit(&gnu, &|m| put(m, 56, 2, 0)), "e_phnum");
    refused(
        &edit(&gnu, &|m| put(m, 32, 8, 0xffff_ffff_ffff_fff0)),
        "program header table",
    );
    refused(
        &edit(&gnu, &|m| put(m, 40, 8, 1 << 40)),
        "section header table",
    );

    // Program headers.
    let dynph = g.phdr(2);
    refused(
        &edit(&gnu, &|m| put(m, dynph + 8, 8, 0x10_0000)),
        "PT_DYNAMIC at 0x",
    );
    refused(
        &edit(&gnu, &|m| put(m, dynph + 16, 8, 0x7000_0000)),
        "PT_DYNAMIC",
    );
    let load0 = g.phdr(1);
    refused(&edit(&gnu, &|m| put(m, load0 + 48, 8, 0x3000)), "p_align");
    refused(
        &edit(&gnu, &|m| put(m, load0 + 48, 8, 0x8000_0000_0000_1000)),
        "p_align",
    );
    refused(
        &edit(&gnu, &|m| {
            let memsz = le(m, load0 + 40, 8);
            put(m, load0 + 32, 8, memsz + 8)
        }),
        "exceeds p_memsz",
    );
    refused(&edit(&gnu, &|m| put(m, load0 + 8, 8, 0x123)), "PT_LOAD");
    let load1 = g.phdrs.iter().filter(|p| p.0 == 1).nth(1).unwrap().1;
    refused(
        &edit(&gnu, &|m| put(m, load1 + 8, 8, 0)),
        "overlapping file ranges",
    );
    refused(&edit(&gnu, &|m| put(m, load1 + 16, 8, 0)), "ascending");
    refused(&edit(&gnu, &|m| put(m, load1 + 4, 4, 4)), "executable");
    let relro = g.phdr(0x6474_e552);
    refused(
        &edit(&gnu, &|m| put(m, relro + 40, 8, 0x10_0000)),
        "PT_GNU_RELRO",
    );

    // Dynamic section.
    refused(
        &edit(&gnu, &|m| {
            // Every DT_NULL (the linker pads with several) becomes an
            // unknown tag.
            let end = le(m, dynph + 8, 8) + le(m, dynph + 32, 8);
            for at in (g.dyn_entry(0)..end as usize).step_by(16) {
                put(m, at, 8, 0x6000_0000);
            }
        }),
        "no DT_NULL terminator",
    );
    refused(
        &edit(&gnu, &|m| put(m, g.dyn_entry(9) + 8, 8, 16)),
        "DT_RELAENT is 16 (expected 24)",
    );
    refused(
        &edit(&gnu, &|m| put(m, g.dyn_entry(8), 8, 0x7000_0123)),
        "DT_RELA is present without DT_RELASZ",
    );
    refused(
        &edit(&gnu, &|m| put(m, g.dyn_entry(0x1b), 8, 0x7000_0123)),
        "DT_INIT_ARRAY is present without DT_INIT_ARRAYSZ",
    );
    refused(
        &edit(&gnu, &|m| put(m, g.dyn_entry(5) + 8, 8, 0x10_0000)),
        "DT_STRTAB at 0x100000",
    );
    refused(
        &edit(&gnu, &|m| put(m, g.dyn_entry(1) + 8, 8, 0x10_0000)),
        "DT_NEEDED: string offset 0x100000",
    );
    refused(
        &edit(&gnu, &|m| put(m, g.dyn_entry(0xc) + 8, 8, 0x1001)),
        "DT_INIT 0x1001 is not the start of a function",
    );
    refused(
        &edit(&gnu, &|m| put(m, g.dyn_entry(0xb), 8, 0x16)),
        "text relocations",
    );
    refused(
        &edit(&lld, &|m| put(m, l.dyn_entry(0x14) + 8, 8, 17)),
        "DT_PLTREL is 17",
    );
    refused(
        &edit(&lld, &|m| put(m, l.dyn_entry(0x25) + 8, 8, 4)),
        "DT_RELRENT is 4",
    );
    refused(
        &edit(&lld, &|m| put(m, l.dyn_entry(2) + 8, 8, 0)),
        "is not relocated",
    );

    // Hash tables.
    let (gh, _) = g.section(".gnu.hash");
    refused(
        &edit(&gnu, &|m| put(m, gh + 8, 4, 3)),
        "Bloom filter size 3",
    );
    refused(
        &edit(&gnu, &|m| put(m, gh + 8, 4, 0)),
        "Bloom filter size 0",
    );
    refused(
        &edit(&gnu, &|m| put(m, gh, 4, 0x4000_0000)),
        "DT_GNU_HASH buckets",
    );
    let (sh, _) = l.section(".hash");
    let nbucket = le(&lld, sh, 4) as usize;
    refused(
        &edit(&lld, &|m| {
            // Make the first non-empty bucket's symbol chain to itself.
            let b = (0..nbucket)
                .map(|i| le(m, sh + 8 + i * 4, 4))
                .find(|&b| b != 0);
            let s = b.unwrap() as usize;
            put(m, sh + 8 + (nbucket + s) * 4, 4, s as u64);
        }),
        "reached twice",
    );

    // Symbols and strings.
    let (dynsym, dynsym_size) = g.section(".dynsym");
    let last = dynsym + dynsym_size - 24;
    refused(&edit(&gnu, &|m| put(m, last, 4, 0xffff)), "string offset");
    refused(&edit(&gnu, &|m| m[last + 4] = 0x92), "unknown binding");
    refused(
        &edit(&gnu, &|m| put(m, last + 6, 2, 0x7fff)),
        "section index",
    );
    let (dynstr, dynstr_size) = g.section(".dynstr");
    refused(
        &edit(&gnu, &|m| m[dynstr + dynstr_size - 1] = b'x'),
        "not NUL-terminated",
    );

    // Versions: a DT_VERNEED naming a library that is not DT_NEEDED is
    // an ld.so assertion.
    let (vr, _) = g.section(".gnu.version_r");
    refused(
        &edit(&gnu, &|m| put(m, vr + 4, 4, 0)),
        "not a DT_NEEDED library",
    );
    refused(&edit(&gnu, &|m| put(m, vr, 2, 2)), "vn_version 2");
    refused(&edit(&gnu, &|m| put(m, vr + 12, 4, 0x40)), "vn_next");
    let (vs, _) = g.section(".gnu.version");
    refused(
        &edit(&gnu, &|m| put(m, vs + 2, 2, 0x7ff)),
        "version index 2047",
    );

    // Relocations.
    let (rela, _) = g.section(".rela.dyn");
    refused(&edit(&gnu, &|m| put(m, rela + 8, 4, 5)), "R_X86_64_COPY");
    refused(&edit(&gnu, &|m| put(m, rela + 8, 4, 99)), "not supported");
    refused(
        &edit(&gnu, &|m| put(m, rela + 12, 4, 0x00ff_0000)),
        "symbol index",
    );
    refused(&edit(&gnu, &|m| put(m, rela, 8, 0x100)), "outside writable");
    let rela_size = g.section(".rela.dyn").1;
    let last_rela = rela + rela_size - 24;
    refused(
        &edit(&gnu, &|m| put(m, last_rela + 12, 4, 0)),
        "names no symbol",
    );
    refused(
        &edit(&gnu, &|m| {
            let first = le(m, rela, 8);
            put(m, rela + 24, 8, first)
        }),
        "both relocate",
    );
    // The first relocation sets DT_INIT_ARRAY[0] (frame_dummy).
    refused(
        &edit(&gnu, &|m| {
            let a = le(m, rela + 16, 8);
            put(m, rela + 16, 8, a + 1)
        }),
        "is not the start of a function",
    );
    let (relr, _) = l.section(".relr.dyn");
    refused(&edit(&lld, &|m| put(m, relr, 8, 3)), "bitmap");
    refused(&edit(&lld, &|m| put(m, relr, 8, 0x10)), "outside writable");
    let (rplt, _) = l.section(".rela.plt");
    refused(&edit(&lld, &|m| put(m, rplt, 8, 0x10)), "outside writable");
    refused(&edit(&lld, &|m| put(m, rplt + 8, 4, 0)), "not relocated");
}

#[test]
fn no_panic_on_truncations_or_any_single_byte_change() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("gnu", &[][..]),
        (
            "lld",
            &[
                "-fuse-ld=lld",
                "-Wl,-z,pack-relative-relocs",
                "-Wl,--hash-style=both",
            ][..],
        ),
    ] {
        let image = shared(dir.path(), name, extra);
        for len in 0..image.len() {
            assert!(
                x86_64_shared_object(&image[..len]).is_err(),
                "{name}: {len}"
            );
        }
        let mut m = image.clone();
        let mut refused = 0;
        for p in 0..image.len() {
            for v in [0x00, 0xff, image[p] ^ 0x80, image[p].wrapping_add(1)] {
                m[p] = v;
                refused += usize::from(x86_64_shared_object(&m).is_err());
            }
            m[p] = image[p];
        }
        assert!(refused > 1000, "{name}: only {refused} mutants refused");
        // Several random bytes at once.
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..3000 {
            let mut m = image.clone();
            for _ in 0..1 + next() % 8 {
                let p = (next() % m.len() as u64) as usize;
                m[p] = next() as u8;
            }
            let _ = x86_64_shared_object(&m);
        }
    }
}
