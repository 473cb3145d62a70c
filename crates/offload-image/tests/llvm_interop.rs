//! Interoperability with LLVM's own tools. Each test prints a note and
//! passes when the tool it needs is not installed.

mod common;

use test_support::skip;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::test_elf;
use offload_image::elf::{self, ElfType, SymbolKind};
use offload_image::offload_binary::{self, ImageKind, OffloadBinary, OffloadKind};
use offload_image::{images_in_host_binary, unwrap, ImageFormat};

fn find(candidates: &[&str]) -> Option<PathBuf> {
    for c in candidates {
        let p = Path::new(c);
        if p.is_absolute() {
            if p.exists() {
                return Some(p.to_path_buf());
            }
        } else if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                let full = dir.join(c);
                if full.exists() {
                    return Some(full);
                }
            }
        }
    }
    None
}

fn offload_binary_tool() -> Option<PathBuf> {
    let t = find(&["/usr/lib/llvm-22/bin/llvm-offload-binary"]);
    if t.is_none() {
        skip("/usr/lib/llvm-22/bin/llvm-offload-binary is not installed");
    }
    t
}

fn objdump() -> Option<PathBuf> {
    let t = find(&["/usr/lib/llvm-22/bin/llvm-objdump", "llvm-objdump-22"]);
    if t.is_none() {
        skip("llvm-objdump-22 is not installed");
    }
    t
}

fn clang() -> Option<PathBuf> {
    let t = find(&["clang-22", "/usr/lib/llvm-22/bin/clang"]);
    if t.is_none() {
        skip("clang-22 is not installed");
    }
    t
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn parse_output_of_llvm_offload_binary() {
    let Some(tool) = offload_binary_tool() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let x86 = test_elf::build(62, 1, None, &[("__omp_offloading_x", true, 8)]);
    let amd = test_elf::build(224, 3, None, &[]);
    let xo = dir.path().join("X.o");
    let ao = dir.path().join("A.o");
    std::fs::write(&xo, &x86).unwrap();
    std::fs::write(&ao, &amd).unwrap();
    let out = dir.path().join("out.bin");
    run(Command::new(&tool)
        .arg("-o")
        .arg(&out)
        .arg(format!(
            "--image=file={},triple=x86_64-unknown-linux-gnu,arch=generic,kind=openmp,foo=bar",
            xo.display()
        ))
        .arg(format!(
            "--image=file={},triple=amdgcn-amd-amdhsa,arch=gfx90a:xnack+,kind=hip",
            ao.display()
        )));
    let bytes = std::fs::read(&out).unwrap();

    let (first, used) = offload_binary::parse(&bytes).unwrap();
    assert!(used < bytes.len(), "two binaries expected");
    assert_eq!(first.triple(), Some("x86_64-unknown-linux-gnu"));
    assert_eq!(first.arch(), Some("generic"));
    assert_eq!(first.get("foo"), Some("bar"));
    assert_eq!(first.offload_kind, OffloadKind::OpenMp);
    assert_eq!(first.image_kind, ImageKind::Object);
    assert_eq!(first.image, &x86[..]);

    let all = offload_binary::parse_all(&bytes).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].offload_kind, OffloadKind::Hip);
    assert_eq!(all[1].arch(), Some("gfx90a:xnack+"));
    assert_eq!(all[1].image, &amd[..]);

    let imgs = unwrap(&bytes).unwrap();
    assert_eq!(imgs.len(), 2);
    assert_eq!(imgs[0].format, ImageFormat::Elf);
    assert_eq!(imgs[0].string("foo"), Some("bar"));
    assert_eq!(imgs[1].triple.as_deref(), Some("amdgcn-amd-amdhsa"));
    assert_eq!(imgs[1].arch.as_deref(), Some("gfx90a:xnack+"));

    // Re-writing what LLVM wrote gives binaries that parse the same (the
    // bytes may differ: LLVM's string table tail-merges and orders strings
    // its own way).
    let ours = offload_binary::write(&all);
    assert_eq!(offload_binary::parse_all(&ours).unwrap(), all);
}

#[test]
fn llvm_objdump_reads_our_output() {
    let Some(objdump) = objdump() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dev = test_elf::build(62, 3, None, &[]);
    let bytes = offload_binary::write(&[
        OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, &dev)
            .with("triple", "x86_64-unknown-linux-gnu")
            .with("arch", "ours-arch-1"),
        OffloadBinary::new(ImageKind::Bitcode, OffloadKind::Hip, b"BC\xC0\xDE")
            .with("triple", "amdgcn-amd-amdhsa")
            .with("arch", "gfx942")
            .with("custom", "v"),
    ]);
    let file = dir.path().join("ours.bin");
    std::fs::write(&file, &bytes).unwrap();
    let text = run(Command::new(&objdump).arg("--offloading").arg(&file));
    assert!(text.contains("OFFLOADING IMAGE [0]"), "{text}");
    assert!(text.contains("OFFLOADING IMAGE [1]"), "{text}");
    assert!(text.contains("x86_64-unknown-linux-gnu"), "{text}");
    assert!(text.contains("ours-arch-1"), "{text}");
    assert!(text.contains("amdgcn-amd-amdhsa"), "{text}");
    assert!(text.contains("gfx942"), "{text}");

    // Embedded in an object's .llvm.offloading section.
    let Some(clang) = clang() else {
        return;
    };
    let asm = dir.path().join("embed.s");
    std::fs::write(
        &asm,
        format!(
            ".section .llvm.offloading,\"e\",@llvm_offloading\n.balign 8\n.incbin \"{}\"\n",
            file.display()
        ),
    )
    .unwrap();
    let obj = dir.path().join("embed.o");
    run(Command::new(&clang).arg("-c").arg(&asm).arg("-o").arg(&obj));
    let text = run(Command::new(&objdump).arg("--offloading").arg(&obj));
    assert!(
        text.contains("ours-arch-1") && text.contains("gfx942"),
        "{text}"
    );

    let host = std::fs::read(&obj).unwrap();
    let sections = elf::offloading_sections(&host).unwrap();
    assert_eq!(sections, vec![&bytes[..]]);
    let imgs = images_in_host_binary(&host).unwrap();
    assert_eq!(imgs.len(), 2);
    assert_eq!(imgs[0].bytes, &dev[..]);
    assert_eq!(imgs[1].format, ImageFormat::Bitcode);
    assert_eq!(imgs[1].string("custom"), Some("v"));
}

const PROGRAM: &str = r#"
#include <stdio.h>
int table[4] = {1, 2, 3, 4};
#pragma omp declare target(table)
int main(void) {
  int x = 0;
#pragma omp target map(tofrom : x)
  { x = 42 + table[1]; }
  printf("%d\n", x);
  return 0;
}
"#;

fn has_offloading_symbol(dev: &[u8]) -> bool {
    elf::defined_symbols(dev)
        .unwrap()
        .iter()
        .any(|s| s.name.starts_with("__omp_offloading_") && s.kind == SymbolKind::Function)
}

#[test]
fn openmp_program_compiled_by_clang() {
    let Some(clang) = clang() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("t.c");
    std::fs::write(&src, PROGRAM).unwrap();

    // The executable: one linked x86-64 device image (a shared object).
    let exe = dir.path().join("t");
    run(Command::new(&clang)
        .args(["-fopenmp", "-fopenmp-targets=x86_64-unknown-linux-gnu"])
        .arg(&src)
        .arg("-o")
        .arg(&exe));
    let host = std::fs::read(&exe).unwrap();
    let info = elf::info(&host).unwrap();
    assert_eq!(info.machine_name, "x86_64");
    let imgs = images_in_host_binary(&host).unwrap();
    assert_eq!(imgs.len(), 1, "{imgs:#?}");
    let img = &imgs[0];
    assert_eq!(img.format, ImageFormat::Elf);
    assert_eq!(img.triple.as_deref(), Some("x86_64-unknown-linux-gnu"));
    assert_eq!(img.offload_kind, Some(OffloadKind::OpenMp));
    assert_eq!(img.image_kind, Some(ImageKind::Object));
    assert_eq!(img.containers, vec![ImageFormat::OffloadBinary]);
    let dev = elf::info(img.bytes).unwrap();
    assert_eq!(dev.machine, elf::EM_X86_64);
    assert_eq!(dev.elf_type, ElfType::SharedObject);
    assert!(has_offloading_symbol(img.bytes));
    let syms = elf::defined_symbols(img.bytes).unwrap();
    assert!(
        syms.iter()
            .any(|s| s.name == "table" && s.kind == SymbolKind::Object && s.size == 16),
        "{syms:#?}"
    );

    // The object file: the device *object* (relocatable ELF).
    let obj = dir.path().join("t.o");
    run(Command::new(&clang)
        .args([
            "-c",
            "-fopenmp",
            "-fopenmp-targets=x86_64-unknown-linux-gnu",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&obj));
    let host = std::fs::read(&obj).unwrap();
    assert_eq!(elf::info(&host).unwrap().elf_type, ElfType::Relocatable);
    let imgs = images_in_host_binary(&host).unwrap();
    assert_eq!(imgs.len(), 1, "{imgs:#?}");
    let img = &imgs[0];
    assert_eq!(img.format, ImageFormat::Elf);
    assert_eq!(img.triple.as_deref(), Some("x86_64-unknown-linux-gnu"));
    assert_eq!(elf::info(img.bytes).unwrap().elf_type, ElfType::Relocatable);
    assert!(has_offloading_symbol(img.bytes));

    // LLVM agrees on the number of images.
    if let Some(objdump) = objdump() {
        for f in [&exe, &obj] {
            let text = run(Command::new(&objdump).arg("--offloading").arg(f));
            assert_eq!(text.matches("OFFLOADING IMAGE [").count(), 1, "{text}");
        }
    }
}
