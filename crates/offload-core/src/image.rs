//! Matching images to devices.

use offload_image::{cuda, DeviceImage};

use crate::plugin::DeviceInfo;

mod amdgpu;

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
    // An NVIDIA GPU, also behind a proxy (a remote server's, an MPI
    // rank's): compute-capability rules, as its own plugin applies them.
    // Bitcode is not GPU code yet: it goes by triple and arch below (a
    // proxy passes it on to a server that compiles it).
    let bitcode = image.format == offload_image::ImageFormat::Bitcode;
    if !bitcode {
        if let Some(device) = cuda_device_sm(info) {
            return cuda_image_runs_on(image, device);
        }
    }
    // An AMD GPU that names its ISAs: target-ID rules, xnack and sramecc
    // included, as its own plugin applies them (bitcode: the arch it is
    // declared for, and a triple, as below).
    if let Some(isas) = amdgpu::isas(info) {
        return amdgpu::incompatibility(&info.arch, isas, image).is_none()
            && (!bitcode || image.triple.is_some());
    }
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

/// Why the device of `info` does not run `image`, where the triple and
/// architecture do not say it all (an AMD GPU's `xnack` setting); `None`
/// when there is nothing to add.
pub fn incompatibility(info: &DeviceInfo, image: &DeviceImage<'_>) -> Option<String> {
    amdgpu::incompatibility(&info.arch, amdgpu::isas(info)?, image)
}

/// How many target features of `image` (one the device runs) the rules
/// above checked: an AMD GPU's `xnack-` and `sramecc+`; 0 elsewhere.
pub fn pinned_features(info: &DeviceInfo, image: &DeviceImage<'_>) -> u8 {
    amdgpu::isas(info).map_or(0, |_| amdgpu::pinned_features(image))
}

pub(crate) use amdgpu::declared_arch_runs_on as amd_bitcode_runs_on;

/// The compute capability of an NVIDIA GPU device (`nvptx64` triple,
/// `sm_XX` architecture).
fn cuda_device_sm(info: &DeviceInfo) -> Option<cuda::Sm> {
    if !triples_compatible(&info.triple, cuda::TRIPLE) {
        return None;
    }
    cuda::parse_arch(&info.arch).map(|t| t.sm)
}

/// Whether a GPU of compute capability `device` runs `image` (PTX text, a
/// cubin or a fatbinary): PTX for this SM or an older one, a cubin of the
/// same major with a minor no higher than the GPU's, arch-specific code
/// only on exactly its SM, a fatbinary with any such entry. An image whose
/// container names another triple never runs.
pub fn cuda_image_runs_on(image: &DeviceImage<'_>, device: cuda::Sm) -> bool {
    if image
        .triple
        .as_deref()
        .is_some_and(|t| !triples_compatible(t, cuda::TRIPLE))
    {
        return false;
    }
    match cuda::detect(image.bytes) {
        Some(cuda::Kind::Ptx) => cuda::ptx_info(image.bytes)
            .and_then(|i| i.target)
            .is_some_and(|t| cuda::ptx_runs_on(t, device)),
        Some(cuda::Kind::Cubin) => {
            cuda::cubin_target(image.bytes).is_some_and(|t| cuda::cubin_runs_on(t, device))
        }
        Some(cuda::Kind::Fatbin) => cuda::fatbin_runs_on(image.bytes, device),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's device as the remote plugin shows it.
    pub(super) fn device(triple: &str, arch: &str) -> DeviceInfo {
        use crate::plugin::{Backend, DeviceType};
        DeviceInfo {
            name: String::new(),
            vendor: String::new(),
            product_name: String::new(),
            device_type: DeviceType::Gpu,
            backend: Backend::Remote,
            triple: triple.into(),
            arch: arch.into(),
            target_ids: Vec::new(),
            uid: String::new(),
            driver_version: String::new(),
            global_memory_bytes: 0,
            group_memory_bytes: 0,
            compute_units: 0,
            max_group_size: 0,
            max_group_size_per_dim: [0; 3],
            max_num_groups: [0; 3],
            clock_mhz: 0,
            address_bits: 64,
        }
    }

    #[test]
    fn nvidia_gpus_match_by_compute_capability_behind_any_plugin() {
        let gpu = |arch: &str| device(cuda::TRIPLE, arch);
        let ptx = |sm: &str| format!(".version 7.8\n.target {sm}\n.address_size 64\n");
        let runs = |device: &DeviceInfo, code: &str| {
            offload_image::unwrap(code.as_bytes())
                .unwrap()
                .iter()
                .any(|i| triple_and_arch_match(device, i))
        };
        // What a remote server's sm_90 GPU runs: older PTX, not newer,
        // arch-specific PTX only for exactly its SM.
        assert!(runs(&gpu("sm_90"), &ptx("sm_80")));
        assert!(runs(&gpu("sm_90"), &ptx("sm_90a")));
        assert!(!runs(&gpu("sm_90"), &ptx("sm_100")));
        assert!(!runs(&gpu("sm_89"), &ptx("sm_90a")));
        // Not a GPU: PTX has no triple and matches nothing by default.
        let host = device("x86_64-unknown-linux-gnu", "");
        assert!(!runs(&host, &ptx("sm_80")));
        // NVPTX bitcode for the GPU's arch still matches by triple and
        // arch, for a server to compile.
        let bitcode = DeviceImage {
            bytes: b"BC\xc0\xde",
            format: offload_image::ImageFormat::Bitcode,
            triple: Some(cuda::TRIPLE.into()),
            arch: Some("sm_90".into()),
            ..offload_image::unwrap(ptx("sm_80").as_bytes()).unwrap()[0].clone()
        };
        assert!(triple_and_arch_match(&gpu("sm_90"), &bitcode));
        assert!(!triple_and_arch_match(&gpu("sm_80"), &bitcode));
    }

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
