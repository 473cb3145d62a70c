//! Matching images to devices.

use offload_image::DeviceImage;

use crate::plugin::DeviceInfo;

/// Triple components that decide compatibility: architecture and OS
/// (`x86_64-unknown-linux-gnu` runs `x86_64-pc-linux-gnu` images).
fn triple_key(triple: &str) -> (&str, &str) {
    let mut parts = triple.split('-');
    let arch = parts.next().unwrap_or("");
    let rest: Vec<&str> = parts.collect();
    let os = match rest.len() {
        0 => "",
        1 => rest[0],
        _ => rest[1],
    };
    (arch, os)
}

/// True when both triples name the same architecture and OS.
pub fn triples_compatible(a: &str, b: &str) -> bool {
    a == b || triple_key(a) == triple_key(b)
}

/// The default compatibility rule: triples compatible, and when both the
/// image and the device name an architecture, the same one. An image
/// without a triple is judged by the plugin alone, so it does not match here.
pub fn triple_and_arch_match(info: &DeviceInfo, image: &DeviceImage<'_>) -> bool {
    let Some(triple) = image.triple.as_deref() else {
        return false;
    };
    if !triples_compatible(triple, &info.triple) {
        return false;
    }
    match image.arch.as_deref() {
        None | Some("") | Some("generic") => true,
        Some(arch) => {
            info.arch.is_empty() || arch == info.arch || arch.split(':').next() == Some(&info.arch)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triples() {
        assert!(triples_compatible(
            "x86_64-unknown-linux-gnu",
            "x86_64-pc-linux-gnu"
        ));
        assert!(!triples_compatible(
            "x86_64-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu"
        ));
        assert!(!triples_compatible(
            "nvptx64-nvidia-cuda",
            "amdgcn-amd-amdhsa"
        ));
    }
}
