fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let map = format!("{dir}/libLLVMOffload.map");
    println!("cargo:rerun-if-changed={map}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libLLVMOffload.so.22.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--offload-version-script={map}");
}
