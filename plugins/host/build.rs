fn main() {
    // The triple's first component for the machine we build for.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    println!("cargo:rustc-env=HOST_ARCH_FOR_TRIPLE={arch}");
}
