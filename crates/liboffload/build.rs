include!("../../tools/version_script_link.rs");

fn main() {
    link_with_version_script("libLLVMOffload.map", "libLLVMOffload.so.22.1");
}
