//! Which AMD GPU code objects a device runs, judged from the ISAs its
//! [`DeviceInfo::target_ids`] lists: the same rule for the AMDGPU plugin's
//! own GPUs and for a server's GPU behind the remote or MPI plugin.

use offload_image::amdgpu::{self, Feature, TargetId};
use offload_image::{DeviceImage, ImageFormat};

use super::triples_compatible;
use crate::plugin::DeviceInfo;

/// The ISAs of `info` when it is an AMD GPU that names them.
pub(super) fn isas(info: &DeviceInfo) -> Option<&[TargetId]> {
    (!info.target_ids.is_empty() && triples_compatible(&info.triple, amdgpu::TRIPLE))
        .then_some(info.target_ids.as_slice())
}

/// Why an AMD GPU with ISAs `isas` (processor `processor`) does not run
/// `image`; `None` when it does. The code object's processor and its
/// `xnack`/`sramecc` settings (`e_flags`), and those of the arch its
/// container declares (`gfx90a:xnack+`), must suit one of the ISAs;
/// generic code needs a generic version and a runtime that lists the
/// family's generic ISA. Bitcode goes by the arch it is declared for
/// (it still has to be compiled: see `jit`).
pub(super) fn incompatibility(
    processor: &str,
    isas: &[TargetId],
    image: &DeviceImage<'_>,
) -> Option<String> {
    if image
        .triple
        .as_deref()
        .is_some_and(|t| !triples_compatible(t, amdgpu::TRIPLE))
    {
        return Some("not an AMD GPU image".to_string());
    }
    match image.format {
        ImageFormat::Elf => {}
        ImageFormat::Bitcode => return declared_incompatibility(isas, image.arch.as_deref()),
        _ => return Some("not an ELF code object".to_string()),
    }
    let Some(code) = TargetId::of_code_object(image.bytes) else {
        return Some("not an AMD GPU code object of a known processor".to_string());
    };
    if amdgpu::is_generic(&code.processor)
        && amdgpu::code_object_generic_version(image.bytes).unwrap_or(0)
            < amdgpu::MIN_GENERIC_VERSION
    {
        return Some(format!(
            "the code object is built for the generic processor {} but has no \
             generic version (e_flags bits 24-31 of a version 6 code object)",
            code.processor
        ));
    }
    let runs = |target: &TargetId| isas.iter().any(|isa| target.runs_on(isa));
    if !runs(&code) {
        if amdgpu::generic_of(processor) == Some(code.processor.as_str()) {
            // ROCr lists the generic ISA where it can load generic code.
            return Some(format!(
                "the code object is built for {code}, the generic processor of this GPU's \
                 family, but the HSA runtime does not list that ISA ({}): it is too old \
                 to load generic code objects",
                list(isas)
            ));
        }
        return Some(format!(
            "the code object is built for {code}, which this GPU does not run ({})",
            list(isas)
        ));
    }
    match TargetId::parse(image.arch.as_deref().filter(|a| !a.is_empty())?) {
        Ok(d) if d.processor != code.processor => Some(format!(
            "the image is declared for {d} but its code object is built for {code}"
        )),
        _ => declared_incompatibility(isas, image.arch.as_deref()),
    }
}

/// Why the arch an image is declared for (`gfx90a:xnack+`), if any, does
/// not run on one of `isas`.
fn declared_incompatibility(isas: &[TargetId], arch: Option<&str>) -> Option<String> {
    let declared = arch.filter(|a| !a.is_empty())?;
    match TargetId::parse(declared) {
        Ok(d) if isas.iter().any(|isa| d.runs_on(isa)) => None,
        Ok(d) => Some(format!(
            "the image is declared for {d}, which this GPU does not run ({})",
            list(isas)
        )),
        Err(e) => Some(format!("the image's arch: {e}")),
    }
}

/// Whether bitcode declared for `arch` (none: not declared) may be
/// compiled for an AMD GPU of ISA `isa`.
pub(crate) fn declared_arch_runs_on(arch: Option<&str>, isa: &TargetId) -> bool {
    declared_incompatibility(std::slice::from_ref(isa), arch).is_none()
}

/// How many `xnack`/`sramecc` settings `image` (one the GPU runs) pins, in
/// its code object or in the arch its container declares.
pub(super) fn pinned_features(image: &DeviceImage<'_>) -> u8 {
    let count = |t: &TargetId| {
        [t.sramecc, t.xnack]
            .iter()
            .filter(|f| matches!(f, Feature::On | Feature::Off))
            .count() as u8
    };
    let code = TargetId::of_code_object(image.bytes).map_or(0, |t| count(&t));
    let declared = image
        .arch
        .as_deref()
        .and_then(|a| TargetId::parse(a).ok())
        .map_or(0, |t| count(&t));
    code.max(declared)
}

/// ISAs for messages: `gfx90a:sramecc+:xnack-, ...`.
fn list(isas: &[TargetId]) -> String {
    let ids: Vec<String> = isas.iter().map(ToString::to_string).collect();
    ids.join(", ")
}

#[cfg(test)]
mod tests {
    use offload_image::offload_binary::{write, ImageKind, OffloadBinary, OffloadKind};

    use super::super::{incompatibility, pinned_features, triple_and_arch_match};
    use super::*;

    /// An AMD GPU as the remote plugin shows a server's: no plugin of its
    /// own here, only what the server said.
    fn server_gpu(processor: &str, isas: &[&str]) -> DeviceInfo {
        DeviceInfo {
            target_ids: isas.iter().map(|t| TargetId::parse(t).unwrap()).collect(),
            ..super::super::tests::device(amdgpu::TRIPLE, processor)
        }
    }

    /// `e_flags` bits of a version 6 code object (LLVM's ELF.h).
    const XNACK_ANY: u32 = 0x100;
    const XNACK_OFF: u32 = 0x200;
    const XNACK_ON: u32 = 0x300;
    const SRAMECC_ON: u32 = 0xc00;

    /// The ELF header of a version 6 code object for `processor` with the
    /// feature bits `features` and generic version `generic`: all that
    /// decides where it runs.
    fn code_object(processor: &str, features: u32, generic: u8) -> Vec<u8> {
        let flags = amdgpu::mach_of(processor).unwrap() | features | u32::from(generic) << 24;
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2; // 64-bit
        h[5] = 1; // little-endian
        h[6] = 1; // EV_CURRENT
        h[7] = 64; // ELFOSABI_AMDGPU_HSA
        h[8] = 4; // code object version 6
        h[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        h[18..20].copy_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        h
    }

    /// `code` in an OffloadBinary entry that declares `arch`.
    fn declared(code: &[u8], arch: &str) -> Vec<u8> {
        let e = OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, code)
            .with("triple", amdgpu::TRIPLE)
            .with("arch", arch);
        write(&[e])
    }

    fn image(bytes: &[u8]) -> DeviceImage<'_> {
        let mut images = offload_image::unwrap(bytes).unwrap();
        assert_eq!(images.len(), 1);
        images.remove(0)
    }

    #[test]
    fn a_servers_gpu_runs_what_its_target_ids_allow() {
        let gpu = server_gpu("gfx90a", &["gfx90a:sramecc+:xnack-"]);
        let runs = |bytes: &[u8]| triple_and_arch_match(&gpu, &image(bytes));
        assert!(runs(&code_object("gfx90a", XNACK_ANY, 0)));
        assert!(runs(&code_object("gfx90a", XNACK_OFF | SRAMECC_ON, 0)));
        assert!(!runs(&code_object("gfx90a", XNACK_ON, 0)));
        assert!(!runs(&code_object("gfx942", XNACK_ANY, 0)));
        // The container's arch pins what the code object leaves open.
        let any = code_object("gfx90a", XNACK_ANY, 0);
        assert!(runs(&declared(&any, "gfx90a:xnack-")));
        assert!(!runs(&declared(&any, "gfx90a:xnack+")));
        // And the reason names the server GPU's ISA.
        let why = incompatibility(&gpu, &image(&code_object("gfx90a", XNACK_ON, 0))).unwrap();
        assert!(
            why.contains("gfx90a:xnack+") && why.contains("(gfx90a:sramecc+:xnack-)"),
            "{why}"
        );
        // A server that does not list target IDs: the processor decides.
        let older_server = server_gpu("gfx90a", &[]);
        let xnack_on = code_object("gfx90a", XNACK_ON, 0);
        assert!(triple_and_arch_match(&older_server, &image(&xnack_on)));
        assert_eq!(incompatibility(&older_server, &image(&xnack_on)), None);
    }

    #[test]
    fn generic_code_runs_where_the_generic_isa_is_listed() {
        let rdna3 = server_gpu("gfx1100", &["gfx1100", "gfx11-generic"]);
        let generic = code_object("gfx11-generic", 0, 1);
        assert!(triple_and_arch_match(&rdna3, &image(&generic)));
        let unversioned = code_object("gfx11-generic", 0, 0);
        let why = incompatibility(&rdna3, &image(&unversioned)).unwrap();
        assert!(why.contains("no generic version"), "{why}");
        let old_runtime = server_gpu("gfx1100", &["gfx1100"]);
        let why = incompatibility(&old_runtime, &image(&generic)).unwrap();
        assert!(why.contains("too old"), "{why}");
        assert!(!triple_and_arch_match(&old_runtime, &image(&generic)));
        // Another family's generic code: plainly not this GPU's.
        let other = code_object("gfx10-3-generic", 0, 1);
        let why = incompatibility(&rdna3, &image(&other)).unwrap();
        assert!(why.contains("which this GPU does not run"), "{why}");
    }

    #[test]
    fn pinned_features_are_counted_only_where_target_ids_are_known() {
        let gpu = server_gpu("gfx90a", &["gfx90a:sramecc+:xnack-"]);
        let both = code_object("gfx90a", XNACK_OFF | SRAMECC_ON, 0);
        let any = code_object("gfx90a", XNACK_ANY, 0);
        assert_eq!(pinned_features(&gpu, &image(&both)), 2);
        assert_eq!(pinned_features(&gpu, &image(&any)), 0);
        assert_eq!(
            pinned_features(&gpu, &image(&declared(&any, "gfx90a:xnack-"))),
            1
        );
        assert_eq!(
            pinned_features(&server_gpu("gfx90a", &[]), &image(&both)),
            0
        );
    }

    #[test]
    fn other_images_are_not_code_objects_of_this_gpu() {
        let gpu = server_gpu("gfx90a", &["gfx90a"]);
        let ptx = b".version 7.8\n.target sm_80\n.address_size 64\n";
        assert!(!triple_and_arch_match(&gpu, &image(ptx)));
        assert!(incompatibility(&gpu, &image(ptx)).is_some());
    }
}
