//! `include/offload/interop.h` and `interop_table::offload_interop_table_t`
//! agree: a C program built with clang-22 prints the offset of every member
//! (named from the Rust side, so a missing or renamed member fails to
//! compile) and the size (so an extra C member changes it), and checks at
//! compile time that each function pointer has the type of the function of
//! the same name in LLVM 22's OffloadAPI.h.

use std::path::{Path, PathBuf};
use std::process::Command;

use LLVMOffload::interop_table::{offload_interop_table_t, OFFLOAD_INTEROP_TABLE_VERSION};

const CLANG: &str = "clang-22";
const LLVM_INCLUDE: &str = "/usr/lib/llvm-22/include/offload";

fn have_toolchain() -> bool {
    let ok = test_support::runs(std::process::Command::new(CLANG).arg("--version"))
        && Path::new(LLVM_INCLUDE).join("OffloadAPI.h").exists();
    test_support::require(ok, "clang-22 or LLVM 22's OffloadAPI.h")
}

#[test]
fn c_header_matches_rust_layout() {
    if !have_toolchain() {
        return;
    }
    let layout = offload_interop_table_t::layout();
    let mut c = String::from(
        "#include <stdio.h>\n#include <offload/interop.h>\n\
         #define SAME(f) _Static_assert(__builtin_types_compatible_p(\
         __typeof__(((offload_interop_table_t *)0)->f), __typeof__(&f)), #f);\n",
    );
    for (name, _) in &layout {
        if name.starts_with("ol") {
            c.push_str(&format!("SAME({name})\n"));
        }
    }
    c.push_str("int main(void) {\n");
    for (name, _) in &layout {
        c.push_str(&format!(
            "  printf(\"{name} %zu\\n\", offsetof(offload_interop_table_t, {name}));\n"
        ));
    }
    c.push_str(
        "  printf(\"sizeof %zu\\n\", sizeof(offload_interop_table_t));\n\
         printf(\"version %d\\n\", OFFLOAD_INTEROP_TABLE_VERSION);\n\
         printf(\"ipr %d\\n\", OMPX_IPR_OFFLOAD_TABLE);\n  return 0;\n}\n",
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("interop_table");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    std::fs::write(&src, c).unwrap();
    let exe = dir.join("layout");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let out = Command::new(CLANG)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(&include)
        .arg("-I")
        .arg(LLVM_INCLUDE)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compiling the layout probe failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let c_values: Vec<(String, usize)> = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let mut expected: Vec<(String, usize)> =
        layout.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    expected.push((
        "sizeof".into(),
        std::mem::size_of::<offload_interop_table_t>(),
    ));
    expected.push(("version".into(), OFFLOAD_INTEROP_TABLE_VERSION as usize));
    expected.push((
        "ipr".into(),
        LLVMOffload::interop_table::OMPX_IPR_OFFLOAD_TABLE as usize,
    ));
    // `version` appears twice (member offset 0, then the macro's value 1).
    assert_eq!(c_values, expected);
    // Every OffloadAPI.h entry point (not the ...WithCodeLoc twins) is a member.
    let header = std::fs::read_to_string(Path::new(LLVM_INCLUDE).join("OffloadAPI.h")).unwrap();
    let mut api: Vec<&str> = header
        .split("OL_APICALL")
        .skip(1)
        .filter_map(|rest| {
            let name = rest.trim_start().split('(').next()?.trim();
            (name.starts_with("ol") && !name.ends_with("WithCodeLoc")).then_some(name)
        })
        .collect();
    api.sort();
    api.dedup();
    let mut members: Vec<&str> = layout
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| k.starts_with("ol"))
        .collect();
    members.sort();
    assert_eq!(members, api);
}
