// Shared by the build scripts of the drop-in libraries (`include!`d): link
// the cdylib with `map` as its version script and `soname` as its SONAME.
//
// rustc always gives a cdylib an anonymous version script of its own, which
// linkers refuse to combine with LLVM's named node (VERS1.0). So the link
// goes through `tools/ld-version-script`, installed as `ld.bfd` in OUT_DIR and
// found by the C compiler driver through `-B`: build-script arguments only,
// so builds from any directory (and packaging tools) get the same library.

fn link_with_version_script(map: &str, soname: &str) {
    use std::path::PathBuf;
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let wrapper = manifest.join("../../tools/ld-version-script");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("ld");
    std::fs::create_dir_all(&out).unwrap();
    let installed = out.join("ld.bfd");
    let _ = std::fs::remove_file(&installed);
    std::fs::copy(&wrapper, &installed).expect("copy tools/ld-version-script");
    let map = manifest.join(map);
    println!("cargo:rerun-if-changed={}", map.display());
    println!("cargo:rerun-if-changed={}", wrapper.display());
    for arg in [
        "-fuse-ld=bfd".to_string(),
        format!("-B{}/", out.display()),
        format!("-Wl,--offload-version-script={}", map.display()),
        format!("-Wl,--offload-soname={soname}"),
    ] {
        println!("cargo:rustc-cdylib-link-arg={arg}");
    }
}
