include!("../../tools/version_script_link.rs");

fn main() {
    link_with_version_script("libomptarget.map", "libomptarget.so.22.1");
}
