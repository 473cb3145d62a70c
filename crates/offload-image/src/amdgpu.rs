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
    (0x49, "gfx1250"),
    (0x4e, "gfx1201"),
    (0x4f, "gfx950"),
    (0x51, "gfx9-generic"),
    (0x52, "gfx10-1-generic"),
    (0x53, "gfx10-3-generic"),
    (0x54, "gfx11-generic"),
    (0x55, "gfx1152"),
    (0x58, "gfx1153"),
    (0x59, "gfx12-generic"),
    (0x5a, "gfx1251"),
    // Newer than clang-22 (which has gfx1250 and gfx1251 but not their
    // generic processor): for code objects of later compilers.
    (0x5b, "gfx12-5-generic"),
    (0x5f, "gfx9-4-generic"),
];

/// LLVM's generic processors and the processors each one's code runs on.
/// A code object built for a generic processor (code object version 6)
/// runs on every member, with the generic version of its `e_flags`.
const GENERIC_FAMILIES: &[(&str, &[&str])] = &[
    (
        "gfx9-generic",
        &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"],
    ),
    ("gfx9-4-generic", &["gfx940", "gfx941", "gfx942", "gfx950"]),
    (
        "gfx10-1-generic",
        &["gfx1010", "gfx1011", "gfx1012", "gfx1013"],
    ),
    (
        "gfx10-3-generic",
        &[
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
        ],
    ),
    (
        "gfx11-generic",
        &[
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ],
    ),
    ("gfx12-generic", &["gfx1200", "gfx1201"]),
    ("gfx12-5-generic", &["gfx1250", "gfx1251"]),
];

/// `EF_AMDGPU_GENERIC_VERSION`: the generic version's bits of `e_flags`
/// (code object version 6 and later).
const EF_AMDGPU_GENERIC_VERSION: u32 = 0xff00_0000;
/// `EI_ABIVERSION` of code object version 6 (`ELFABIVERSION_AMDGPU_HSA_V6`).
const ABI_VERSION_V6: u8 = 4;
/// The lowest generic version the HSA runtime loads (every processor of
/// today's families joined its family at version 1).
pub const MIN_GENERIC_VERSION: u8 = 1;

/// The processor (`gfx90a`, ...) that `e_flags` of a code object names.
pub fn processor(e_flags: u32) -> Option<&'static str> {
    let mach = e_flags & EF_AMDGPU_MACH;
    PROCESSORS.iter().find(|(m, _)| *m == mach).map(|(_, n)| *n)
}

/// The generic processor whose code runs on `processor` (`gfx11-generic`
/// for `gfx1100`), if it belongs to a family.
pub fn generic_of(processor: &str) -> Option<&'static str> {
    GENERIC_FAMILIES
        .iter()
        .find(|(_, members)| members.contains(&processor))
        .map(|(generic, _)| *generic)
}

/// Whether `processor` is one of LLVM's generic processors.
pub fn is_generic(processor: &str) -> bool {
    GENERIC_FAMILIES.iter().any(|(g, _)| *g == processor)
}

/// The generic version of a code object (`e_flags` bits 24-31): 0 when
/// the code object is older than version 6 or its header does not say.
/// `None` when the bytes are not a 64-bit AMD GPU ELF file.
pub fn code_object_generic_version(bytes: &[u8]) -> Option<u8> {
    let info = crate::elf::info(bytes).ok()?;
    if info.machine != crate::elf::EM_AMDGPU || info.class != 64 {
        return None;
    }
    let abi = bytes.get(8).copied().unwrap_or(0);
    if abi < ABI_VERSION_V6 {
        return Some(0);
    }
    Some(((info.flags & EF_AMDGPU_GENERIC_VERSION) >> 24) as u8)
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
    fn generic_families() {
        assert_eq!(generic_of("gfx1100"), Some("gfx11-generic"));
        assert_eq!(generic_of("gfx1153"), Some("gfx11-generic"));
        assert_eq!(generic_of("gfx942"), Some("gfx9-4-generic"));
        assert_eq!(generic_of("gfx906"), Some("gfx9-generic"));
        assert_eq!(generic_of("gfx90a"), None);
        assert_eq!(generic_of("gfx908"), None);
        assert_eq!(generic_of("gfx11-generic"), None);
        for (generic, members) in GENERIC_FAMILIES {
            assert!(is_generic(generic));
            assert!(mach_of(generic).is_some(), "{generic} has an e_flags value");
            for m in *members {
                assert!(mach_of(m).is_some(), "{m} has an e_flags value");
                assert!(!is_generic(m));
            }
        }
    }

    #[test]
    fn generic_version_of_a_code_object() {
        let bytes = include_bytes!("../tests/data/scale-gfx90a.hsaco");
        // Version 5 (EI_ABIVERSION 3): no generic version, whatever the
        // top bits say.
        let mut co = bytes.to_vec();
        co[48..52].copy_from_slice(&0x0100_0154u32.to_le_bytes());
        co[8] = 3;
        assert_eq!(code_object_generic_version(&co), Some(0));
        co[8] = ABI_VERSION_V6;
        assert_eq!(code_object_generic_version(&co), Some(1));
        assert_eq!(
            TargetId::of_code_object(&co).unwrap().processor,
            "gfx11-generic"
        );
        assert_eq!(code_object_generic_version(b"not an elf"), None);
    }

    #[test]
    fn target_id_of_a_clang_code_object() {
        // Built by clang-22 for gfx90a: code object version 6 (clang-22's
        // default), both features left to "any", generic version 0.
        let bytes = include_bytes!("../tests/data/scale-gfx90a.hsaco");
        let t = TargetId::of_code_object(bytes).unwrap();
        assert_eq!(
            (t.processor.as_str(), t.xnack, t.sramecc),
            ("gfx90a", Feature::Any, Feature::Any)
        );
        assert_eq!(code_object_generic_version(bytes), Some(0));
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
