//! Corrupt images must be refused, never end the process.
//!
//! Takes real clang-22-built kernel objects and, for every byte of the
//! structures the dynamic loader reads (ELF header, program headers, dynamic
//! section, `.dynsym`/`.dynstr`, hash tables, relocation tables, version
//! sections, init/fini arrays, notes) plus a few hundred random positions
//! elsewhere outside executable code, sets the byte to 0x00, 0xff and its
//! value XOR 0x80. Each mutant is loaded through the host plugin (then a
//! kernel and a global are looked up and it is unloaded) in a child process
//! (this test binary re-executed), many mutants per child. A child that dies
//! by a signal or exits 127 (an `ld.so` assertion) fails the test, naming
//! the mutant; every mutant must either load cleanly or be an
//! `InvalidBinary` error.
//!
//! Code bytes are not mutated: corrupt machine code in the image's own
//! constructors crashes whatever the loader checks. Nor is `.rodata`, for
//! the same reason: it holds the jump tables of that code (compiler-rt's
//! `__cpu_indicator_init`, a constructor the kernels' multiversioned group
//! loops pull in, runs during `dlopen` and switches through tables there;
//! with clang-22.1.8 a random position landed in one and the constructor
//! jumped astray).

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use offload_core::{Config, ErrorCode, Runtime};

const CHILD_ENV: &str = "OFFLOAD_MUTANT_JOB";

const KERNELS: &str = r#"
#include "offload/host_kernel.h"
OFFLOAD_HOST_KERNEL(saxpy) {
  const struct { float a; const float *x; float *y; uint32_t n; } *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
}
int counter = 7;
long table[4] = {1, 2, 3, 4};
const char *names[2] = {"a", "b"};
"#;

fn build_so(dir: &Path, name: &str, extra: &[&str]) -> Vec<u8> {
    let src = dir.join(format!("{name}.c"));
    let out = dir.join(format!("{name}.so"));
    std::fs::write(&src, KERNELS).unwrap();
    let include: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "include"]
        .iter()
        .collect();
    let status = Command::new("clang-22")
        .args(["-O1", "-fPIC", "-shared", "-I"])
        .arg(&include)
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("clang-22 must be installed (see scripts/setup.sh)");
    assert!(status.success(), "clang-22 failed on {name}");
    std::fs::read(out).unwrap()
}

fn le(b: &[u8], off: usize, n: usize) -> u64 {
    let mut v = 0u64;
    for i in (0..n).rev() {
        v = v << 8 | u64::from(b[off + i]);
    }
    v
}

/// Byte ranges of what the loader reads, from the section headers of the
/// (unmutated) image, and the file ranges never mutated: executable
/// segments and `.rodata` (jump tables of load-time code).
/// A named byte range of the image: `(start, end, name)`.
type Region = (usize, usize, String);

fn regions(img: &[u8]) -> (Vec<Region>, Vec<(usize, usize)>) {
    let phoff = le(img, 32, 8) as usize;
    let phnum = le(img, 56, 2) as usize;
    let shoff = le(img, 40, 8) as usize;
    let shnum = le(img, 60, 2) as usize;
    let shstrndx = le(img, 62, 2) as usize;
    let mut out = vec![
        (0, 64, "ELF header".to_string()),
        (phoff, phoff + phnum * 56, "program headers".to_string()),
    ];
    let sh = |i: usize, o: usize, n: usize| le(img, shoff + i * 64 + o, n) as usize;
    let strs = sh(shstrndx, 24, 8);
    let mut code = Vec::new();
    for i in 1..shnum {
        let ty = sh(i, 4, 4) as u32;
        let name_off = strs + sh(i, 0, 4);
        let name_end = img[name_off..].iter().position(|&b| b == 0).unwrap();
        let name = String::from_utf8_lossy(&img[name_off..name_off + name_end]).into_owned();
        let wanted = matches!(
            ty,
            4 | 5 | 6 | 7 | 11 | 14 | 15 | 19 | 0x6fff_fff6 | 0x6fff_fffd..=0x6fff_ffff
        ) || name == ".dynstr";
        let (off, size) = (sh(i, 24, 8), sh(i, 32, 8));
        if name == ".rodata" {
            code.push((off, off + size));
        }
        if wanted {
            out.push((off, off + size, name));
        }
    }
    for i in 0..phnum {
        let at = phoff + i * 56;
        if le(img, at, 4) == 1 && le(img, at + 4, 4) & 1 != 0 {
            let off = le(img, at + 8, 8) as usize;
            code.push((off, off + le(img, at + 32, 8) as usize));
        }
    }
    (out, code)
}

/// Every (position, new value) to try on `img`.
fn mutants(img: &[u8], random_positions: usize, seed: u64) -> (Vec<(usize, u8)>, usize) {
    let (regions, exec) = regions(img);
    let mut positions: Vec<usize> = Vec::new();
    let mut seen = HashSet::new();
    for (start, end, _) in &regions {
        for p in *start..(*end).min(img.len()) {
            if seen.insert(p) {
                positions.push(p);
            }
        }
    }
    let structured = positions.len();
    let mut rng = seed;
    let mut added = 0;
    while added < random_positions {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let p = (rng % img.len() as u64) as usize;
        if exec.iter().any(|&(s, e)| p >= s && p < e) || !seen.insert(p) {
            continue;
        }
        positions.push(p);
        added += 1;
    }
    let mut out = Vec::new();
    for p in positions {
        let old = img[p];
        let mut vals = vec![0x00, 0xff, old ^ 0x80];
        vals.dedup();
        for v in vals {
            if v != old && !out.contains(&(p, v)) {
                out.push((p, v));
            }
        }
    }
    (out, structured)
}

/// The child: loads each mutant of a job, recording progress line by line
/// so that the parent can name the mutant a crash happened on.
#[test]
fn mutation_child_process_entry() {
    let Ok(job) = std::env::var(CHILD_ENV) else {
        return; // Only does something when re-executed by the parent.
    };
    let job = PathBuf::from(job);
    let image = std::fs::read(job.join("image.so")).unwrap();
    let list = std::fs::read_to_string(job.join("mutants.txt")).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(job.join("results.txt"))
        .unwrap();
    let rt = Runtime::new(
        Config {
            host_devices: 1,
            ..Config::default()
        },
        &[offload_plugin_host::ENTRY],
    );
    let dev = &rt.devices()[0];
    for line in list.lines() {
        let mut it = line.split_whitespace();
        let idx: usize = it.next().unwrap().parse().unwrap();
        let pos: usize = it.next().unwrap().parse().unwrap();
        let val: u8 = it.next().unwrap().parse().unwrap();
        let mut m = image.clone();
        m[pos] = val;
        writeln!(log, "B {idx}").unwrap();
        let outcome = match dev.load_program(&m) {
            Ok(p) => {
                let _ = p.kernel("saxpy");
                let _ = p.global("counter");
                drop(p);
                "ok".to_string()
            }
            Err(e) => format!("err {:?} {}", e.code(), e.message().replace('\n', " ")),
        };
        writeln!(log, "R {idx} {outcome}").unwrap();
    }
}

#[derive(Default, Debug)]
struct Tally {
    loaded: usize,
    refused: usize,
    dlopen_errors: usize,
    failures: Vec<String>,
}

/// Runs `list` (indexes into `muts`) in children, restarting after a crash.
fn run_children(
    image: &[u8],
    muts: &[(usize, u8)],
    list: Vec<usize>,
    dir: &Path,
    regions: &[Region],
) -> Tally {
    let mut tally = Tally::default();
    let mut todo = list;
    let mut round = 0;
    while !todo.is_empty() {
        round += 1;
        let job = dir.join(format!("job{round}"));
        std::fs::create_dir_all(&job).unwrap();
        std::fs::write(job.join("image.so"), image).unwrap();
        let text: String = todo
            .iter()
            .map(|&i| format!("{i} {} {}\n", muts[i].0, muts[i].1))
            .collect();
        std::fs::write(job.join("mutants.txt"), text).unwrap();
        let stderr = std::fs::File::create(job.join("stderr.txt")).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "mutation_child_process_entry",
                "--exact",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &job)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let results = std::fs::read_to_string(job.join("results.txt")).unwrap_or_default();
        let mut done = HashSet::new();
        let mut last_begun = None;
        for line in results.lines() {
            let mut it = line.splitn(3, ' ');
            let (kind, idx) = (
                it.next().unwrap(),
                it.next().unwrap().parse::<usize>().unwrap(),
            );
            let rest = it.next().unwrap_or("");
            match kind {
                "B" => last_begun = Some(idx),
                _ => {
                    done.insert(idx);
                    if rest == "ok" {
                        tally.loaded += 1;
                    } else if !rest.starts_with(&format!("err {:?} ", ErrorCode::InvalidBinary)) {
                        let (p, v) = muts[idx];
                        tally
                            .failures
                            .push(format!("byte {p:#x} -> {v:#04x}: unexpected error {rest}"));
                    } else if rest.contains("cannot load image") {
                        tally.dlopen_errors += 1;
                    } else {
                        tally.refused += 1;
                    }
                }
            }
        }
        let crashed = match status {
            Some(s) if s.success() => None,
            Some(s) => Some(format!("{s:?}")),
            None => Some("a hang (killed after 120 s)".to_string()),
        };
        if let Some(how) = crashed {
            let stderr = std::fs::read_to_string(job.join("stderr.txt")).unwrap_or_default();
            let Some(bad) = last_begun.filter(|i| !done.contains(i)) else {
                panic!("child failed ({how}) outside any mutant: {stderr}");
            };
            let (p, v) = muts[bad];
            let region = regions
                .iter()
                .find(|r| p >= r.0 && p < r.1)
                .map_or("elsewhere", |r| r.2.as_str());
            let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            tally.failures.push(format!(
                "byte {p:#x} ({region}) {:#04x} -> {v:#04x}: child ended with {how}; stderr: {tail}",
                image[p]
            ));
            done.insert(bad);
        }
        todo.retain(|i| !done.contains(i));
    }
    tally
}

fn mutate_and_load(name: &str, extra: &[&str], random_positions: usize, seed: u64) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), name, extra);
    let (muts, structured) = mutants(&image, random_positions, seed);
    let (regions, _) = regions(&image);
    // Two children at a time.
    let indexes: Vec<usize> = (0..muts.len()).collect();
    let half = indexes.len() / 2;
    let (a, b) = indexes.split_at(half);
    let (ta, tb) = std::thread::scope(|s| {
        let ja =
            s.spawn(|| run_children(&image, &muts, a.to_vec(), &dir.path().join("a"), &regions));
        let jb =
            s.spawn(|| run_children(&image, &muts, b.to_vec(), &dir.path().join("b"), &regions));
        (ja.join().unwrap(), jb.join().unwrap())
    });
    let mut t = Tally {
        loaded: ta.loaded + tb.loaded,
        refused: ta.refused + tb.refused,
        dlopen_errors: ta.dlopen_errors + tb.dlopen_errors,
        failures: ta.failures,
    };
    t.failures.extend(tb.failures);
    eprintln!(
        "{name}: {} mutants ({structured} structural byte positions + {random_positions} random): {} loaded, {} refused by validation, {} refused by dlopen, {} failures",
        muts.len(),
        t.loaded,
        t.refused,
        t.dlopen_errors,
        t.failures.len()
    );
    assert_eq!(
        t.loaded + t.refused + t.dlopen_errors + t.failures.len(),
        muts.len()
    );
    t
}

fn check(t: Tally) {
    assert!(
        t.failures.is_empty(),
        "{} mutants were not handled:\n{}",
        t.failures.len(),
        t.failures.join("\n")
    );
    assert!(t.loaded > 0 && t.refused > 0, "{t:?}");
}

#[test]
fn mutated_images_from_the_default_linker_never_end_the_process() {
    check(mutate_and_load("gnu_ld", &[], 300, 0x9E37_79B9_7F4A_7C15));
}

#[test]
fn mutated_images_from_lld_with_relr_and_both_hashes_never_end_the_process() {
    check(mutate_and_load(
        "lld",
        &[
            "-fuse-ld=lld",
            "-Wl,-z,pack-relative-relocs",
            "-Wl,--hash-style=both",
        ],
        200,
        0xD1B5_4A32_D192_ED03,
    ));
}

fn put(b: &mut [u8], off: usize, n: usize, v: u64) {
    for i in 0..n {
        b[off + i] = (v >> (8 * i)) as u8;
    }
}

fn section(img: &[u8], name: &str) -> usize {
    regions(img)
        .0
        .into_iter()
        .find(|r| r.2 == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .0
}

/// Corruptions that made glibc assert (exit 127) are plain errors now.
#[test]
fn former_ld_so_assertions_are_invalid_binary_errors() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "asserts", &[]);
    let rt = Runtime::new(
        Config {
            host_devices: 1,
            ..Config::default()
        },
        &[offload_plugin_host::ENTRY],
    );
    let dev = &rt.devices()[0];
    let gnu_hash = section(&image, ".gnu.hash");
    let verneed = section(&image, ".gnu.version_r");
    let cases: [(&str, usize, usize, u64); 2] = [
        // `assert ((bitmask_nwords & (bitmask_nwords - 1)) == 0)`
        ("Bloom filter size 3", gnu_hash + 8, 4, 3),
        // `assert (needed != NULL)` in _dl_check_map_versions
        ("not a DT_NEEDED library", verneed + 4, 4, 0),
    ];
    for (expect, off, n, v) in cases {
        let mut m = image.clone();
        put(&mut m, off, n, v);
        let e = dev.load_program(&m).err().expect("corrupt image loaded");
        assert_eq!(e.code(), ErrorCode::InvalidBinary, "{e}");
        assert!(e.message().contains(expect), "{e}");
    }
    dev.load_program(&image).unwrap().kernel("saxpy").unwrap();
}

/// An image that stays loaded after dlclose (DF_1_NODELETE) must not be
/// handed out again for a later image opened under the same
/// `/proc/self/fd/N` name.
#[test]
fn a_nodelete_image_does_not_shadow_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let sticky = build_so(dir.path(), "sticky", &["-Wl,-z,nodelete"]);
    shadow_check(dir.path(), &sticky);
}

/// The same for an image that glibc pins because it binds to an
/// `STB_GNU_UNIQUE` symbol it defines (what g++ emits for inline statics).
#[test]
fn an_image_with_a_unique_symbol_does_not_shadow_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let asm = dir.path().join("unique.h");
    std::fs::write(
        &asm,
        "__asm__(\".data\\n.globl pinned\\n.type pinned, @gnu_unique_object\\n\
         .size pinned, 4\\npinned: .long 7\\n.text\\n\");\n\
         extern int pinned;\n\
         int *pinned_address(void) { return &pinned; }\n",
    )
    .unwrap();
    let sticky = build_so(dir.path(), "unique", &["-include", asm.to_str().unwrap()]);
    shadow_check(dir.path(), &sticky);
}

/// Loads and drops `sticky` (an image `dlclose` leaves loaded), then a
/// different image, three times: the second must be itself each time.
fn shadow_check(dir: &Path, sticky: &[u8]) {
    assert!(
        offload_image::validate::x86_64_shared_object(sticky)
            .unwrap()
            .stays_loaded
    );
    let src = dir.join("other.c");
    std::fs::write(&src, "void other_kernel(const void *a, const void *i) {}\n").unwrap();
    let out = dir.join("other.so");
    assert!(Command::new("clang-22")
        .args(["-O1", "-fPIC", "-shared", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let other = std::fs::read(&out).unwrap();
    assert!(
        !offload_image::validate::x86_64_shared_object(&other)
            .unwrap()
            .stays_loaded
    );
    let rt = Runtime::new(
        Config {
            host_devices: 1,
            ..Config::default()
        },
        &[offload_plugin_host::ENTRY],
    );
    let dev = &rt.devices()[0];
    for _ in 0..3 {
        let p = dev.load_program(sticky).unwrap();
        p.kernel("saxpy").unwrap();
        drop(p);
        let p = dev.load_program(&other).unwrap();
        p.kernel("other_kernel").unwrap();
        assert!(p.kernel("saxpy").is_err());
    }
}
