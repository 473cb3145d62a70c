//! AMD GPU code objects (`amdgcn-amd-amdhsa` ELF files): the processor
//! named by `e_flags`, and the kernels' metadata note.
//!
//! Code object versions 4 to 6 say the processor in `e_flags`
//! (`EF_AMDGPU_MACH`, bits 0-7) with the `xnack` and `sramecc` settings in
//! bits 8-11. Each kernel's launch facts (where its hidden arguments lie,
//! its kernel-argument segment size, its group and private segment sizes)
//! are in one ELF note of owner `AMDGPU` and type `NT_AMDGPU_METADATA`
//! (32), a MessagePack map (`amdhsa.kernels`, `amdhsa.target`, ...).

#[cfg(feature = "amdgpu-metadata")]
mod note;
mod target_id;
#[cfg(feature = "amdgpu-metadata")]
pub use note::{code_object_metadata, parse_metadata};
pub use target_id::{Feature, TargetId, TargetIdError};

/// The triple of AMD GPU code objects.
pub const TRIPLE: &str = "amdgcn-amd-amdhsa";
/// `NT_AMDGPU_METADATA`: the note type of the metadata map.
pub const NT_AMDGPU_METADATA: u32 = 32;
/// `EF_AMDGPU_MACH`: the processor bits of `e_flags`.
const EF_AMDGPU_MACH: u32 = 0xff;

/// `EF_AMDGPU_MACH_AMDGCN_*` values and the processors they name.
const PROCESSORS: &[(u32, &str)] = &[
    (0x20, "gfx600"),
    (0x21, "gfx601"),
    (0x22, "gfx700"),
    (0x23, "gfx701"),
    (0x24, "gfx702"),
    (0x25, "gfx703"),
    (0x26, "gfx704"),
    (0x28, "gfx801"),
    (0x29, "gfx802"),
    (0x2a, "gfx803"),
    (0x2b, "gfx810"),
    (0x2c, "gfx900"),
    (0x2d, "gfx902"),
    (0x2e, "gfx904"),
    (0x2f, "gfx906"),
    (0x30, "gfx908"),
    (0x31, "gfx909"),
    (0x32, "gfx90c"),
    (0x33, "gfx1010"),
    (0x34, "gfx1011"),
    (0x35, "gfx1012"),
    (0x36, "gfx1030"),
    (0x37, "gfx1031"),
    (0x38, "gfx1032"),
    (0x39, "gfx1033"),
    (0x3a, "gfx602"),
    (0x3b, "gfx705"),
    (0x3c, "gfx805"),
    (0x3d, "gfx1035"),
    (0x3e, "gfx1034"),
    (0x3f, "gfx90a"),
    (0x40, "gfx940"),
    (0x41, "gfx1100"),
    (0x42, "gfx1013"),
    (0x43, "gfx1150"),
    (0x44, "gfx1103"),
    (0x45, "gfx1036"),
    (0x46, "gfx1101"),
    (0x47, "gfx1102"),
    (0x48, "gfx1200"),
    (0x4a, "gfx1151"),
    (0x4b, "gfx941"),
    (0x4c, "gfx942"),
    (0x4e, "gfx1201"),
    (0x4f, "gfx950"),
];

/// The processor (`gfx90a`, ...) that `e_flags` of a code object names.
pub fn processor(e_flags: u32) -> Option<&'static str> {
    let mach = e_flags & EF_AMDGPU_MACH;
    PROCESSORS.iter().find(|(m, _)| *m == mach).map(|(_, n)| *n)
}

/// The `e_flags` processor value of `name` (`gfx90a`, or a target ID
/// such as `gfx90a:xnack+`, whose features are ignored).
pub fn mach_of(name: &str) -> Option<u32> {
    let base = name.split(':').next()?;
    PROCESSORS.iter().find(|(_, n)| *n == base).map(|(m, _)| *m)
}

/// A code object's processor, from its ELF header: `None` when the bytes
/// are not a 64-bit AMD GPU ELF file or name an unknown processor.
pub fn code_object_processor(bytes: &[u8]) -> Option<&'static str> {
    let info = crate::elf::info(bytes).ok()?;
    if info.machine != crate::elf::EM_AMDGPU || info.class != 64 {
        return None;
    }
    processor(info.flags)
}

/// One argument of a kernel, as the metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelArg {
    /// Byte offset in the kernel-argument segment.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// `.value_kind`: `by_value`, `global_buffer`, `hidden_block_count_x`, ...
    pub value_kind: String,
}

impl KernelArg {
    /// Whether the runtime, not the caller, provides this argument.
    pub fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }
}

/// One kernel's entry of `amdhsa.kernels`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelMetadata {
    /// `.name`: the kernel's name.
    pub name: String,
    /// `.symbol`: its descriptor's symbol (`NAME.kd`).
    pub symbol: String,
    /// `.kernarg_segment_size`: explicit and hidden arguments together.
    pub kernarg_segment_size: u32,
    /// `.kernarg_segment_align`.
    pub kernarg_segment_align: u32,
    /// `.group_segment_fixed_size`: static LDS bytes.
    pub group_segment_fixed_size: u32,
    /// `.private_segment_fixed_size`: scratch bytes per work-item.
    pub private_segment_fixed_size: u32,
    /// `.max_flat_workgroup_size`.
    pub max_flat_workgroup_size: u32,
    /// `.wavefront_size` (32 or 64).
    pub wavefront_size: u32,
    /// `.sgpr_count`: scalar registers.
    pub sgpr_count: u32,
    /// `.vgpr_count`: vector registers.
    pub vgpr_count: u32,
    /// `.uses_dynamic_stack`: the scratch it needs is not known statically.
    pub uses_dynamic_stack: bool,
    /// `.args`, in order.
    pub args: Vec<KernelArg>,
}

impl KernelMetadata {
    /// The hidden argument of kind `value_kind` (`hidden_block_count_x`, ...).
    pub fn hidden(&self, value_kind: &str) -> Option<&KernelArg> {
        self.args.iter().find(|a| a.value_kind == value_kind)
    }

    /// Bytes of explicit arguments: the end of the last one.
    pub fn explicit_size(&self) -> u32 {
        self.args
            .iter()
            .filter(|a| !a.is_hidden())
            .map(|a| a.offset.saturating_add(a.size))
            .max()
            .unwrap_or(0)
    }
}

/// A code object's metadata note.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CodeObjectMetadata {
    /// `amdhsa.version` (`[1, 2]` for code object version 5).
    pub version: Vec<u32>,
    /// `amdhsa.target`: `amdgcn-amd-amdhsa--gfx90a:xnack+`, ...
    pub target: Option<String>,
    /// `amdhsa.kernels`.
    pub kernels: Vec<KernelMetadata>,
}

impl CodeObjectMetadata {
    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&KernelMetadata> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processors_round_trip() {
        assert_eq!(processor(0x53f), Some("gfx90a"));
        assert_eq!(processor(0x4c), Some("gfx942"));
        assert_eq!(processor(0xff), None);
        assert_eq!(mach_of("gfx90a:xnack+"), Some(0x3f));
        assert_eq!(mach_of("sm_90"), None);
        for (m, n) in PROCESSORS {
            assert_eq!(mach_of(n), Some(*m));
        }
    }

    #[test]
    fn target_id_of_a_clang_code_object() {
        // Built by clang-22 with --offload-arch=gfx90a: version 5, both
        // features left to "any".
        let bytes = include_bytes!("../tests/data/scale-gfx90a.hsaco");
        let t = TargetId::of_code_object(bytes).unwrap();
        assert_eq!(
            (t.processor.as_str(), t.xnack, t.sramecc),
            ("gfx90a", Feature::Any, Feature::Any)
        );
        // The same header read as version 3 (one bit per feature: 0x53f
        // has xnack's set, sramecc's clear) and as version 2.
        let mut old = bytes.to_vec();
        old[8] = 1;
        let t = TargetId::of_code_object(&old).unwrap();
        assert_eq!((t.xnack, t.sramecc), (Feature::On, Feature::Any));
        old[8] = 0;
        let t = TargetId::of_code_object(&old).unwrap();
        assert_eq!(
            (t.xnack, t.sramecc),
            (Feature::Unsupported, Feature::Unsupported)
        );
        assert_eq!(TargetId::of_code_object(b"not an elf"), None);
    }
}
