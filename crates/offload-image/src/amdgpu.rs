//! AMD GPU code objects (`amdgcn-amd-amdhsa` ELF files): the processor
//! named by `e_flags`, and the kernels' metadata note.
//!
//! Code object versions 4 to 6 say the processor in `e_flags`
//! (`EF_AMDGPU_MACH`, bits 0-7) with the `xnack` and `sramecc` settings in
//! bits 8-11. Each kernel's launch facts (where its hidden arguments lie,
//! its kernel-argument segment size, its group and private segment sizes)
//! are in one ELF note of owner `AMDGPU` and type `NT_AMDGPU_METADATA`
//! (32), a MessagePack map (`amdhsa.kernels`, `amdhsa.target`, ...).

use std::collections::BTreeMap;

use object::elf::FileHeader64;
use object::read::elf::SectionHeader;
use object::Endianness;
use rmpv::Value;

use crate::{ImageError, Result};

/// The triple of AMD GPU code objects.
pub const TRIPLE: &str = "amdgcn-amd-amdhsa";
/// `NT_AMDGPU_METADATA`: the note type of the metadata map.
pub const NT_AMDGPU_METADATA: u32 = 32;
/// `EF_AMDGPU_MACH`: the processor bits of `e_flags`.
const EF_AMDGPU_MACH: u32 = 0xff;
/// Nesting deeper than this is not metadata (it is 5 deep).
const MAX_DEPTH: usize = 16;

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

/// The metadata note of a 64-bit AMD GPU code object: `Ok(None)` when it
/// has none (an ELF file of code object version 2, or of another machine),
/// an error when the file or the note is malformed.
pub fn code_object_metadata(bytes: &[u8]) -> Result<Option<CodeObjectMetadata>> {
    if crate::elf::class_of(bytes)? != 64 {
        return Ok(None);
    }
    let p = crate::elf::parse_elf::<FileHeader64<Endianness>>(bytes)?;
    for section in p.sections.iter() {
        let Ok(Some(mut notes)) = section.notes(p.endian, bytes) else {
            continue;
        };
        while let Some(note) = notes
            .next()
            .map_err(|e| ImageError::Elf(format!("note section: {e}")))?
        {
            if note.name() == b"AMDGPU" && note.n_type(p.endian) == NT_AMDGPU_METADATA {
                return parse_metadata(note.desc()).map(Some);
            }
        }
    }
    Ok(None)
}

fn bad(what: impl std::fmt::Display) -> ImageError {
    ImageError::Elf(format!("AMDGPU metadata note: {what}"))
}

/// Decodes the MessagePack map of a metadata note.
pub fn parse_metadata(desc: &[u8]) -> Result<CodeObjectMetadata> {
    let mut rd = desc;
    let value = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(bad)?;
    let map = as_map(&value, "the note")?;
    let version = match map.get("amdhsa.version") {
        Some(v) => as_array(v, "amdhsa.version")?
            .iter()
            .map(|x| as_u32(x, "amdhsa.version"))
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    let target = match map.get("amdhsa.target") {
        Some(v) => Some(as_str(v, "amdhsa.target")?.to_string()),
        None => None,
    };
    let kernels = match map.get("amdhsa.kernels") {
        Some(v) => as_array(v, "amdhsa.kernels")?
            .iter()
            .map(parse_kernel)
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    Ok(CodeObjectMetadata {
        version,
        target,
        kernels,
    })
}

fn parse_kernel(value: &Value) -> Result<KernelMetadata> {
    let map = as_map(value, "a kernel of amdhsa.kernels")?;
    let name = as_str(
        map.get(".name")
            .ok_or_else(|| bad("a kernel without .name"))?,
        ".name",
    )?
    .to_string();
    let u32_field = |key: &str| -> Result<u32> {
        map.get(key)
            .map(|v| as_u32(v, key))
            .transpose()
            .map(Option::unwrap_or_default)
            .map_err(|e| bad(format_args!("kernel '{name}': {e}")))
    };
    let args = match map.get(".args") {
        Some(v) => as_array(v, ".args")?
            .iter()
            .map(parse_arg)
            .collect::<Result<_>>()
            .map_err(|e| bad(format_args!("kernel '{name}': {e}")))?,
        None => Vec::new(),
    };
    let symbol = match map.get(".symbol") {
        Some(v) => as_str(v, ".symbol")?.to_string(),
        None => format!("{name}.kd"),
    };
    Ok(KernelMetadata {
        symbol,
        kernarg_segment_size: u32_field(".kernarg_segment_size")?,
        kernarg_segment_align: u32_field(".kernarg_segment_align")?,
        group_segment_fixed_size: u32_field(".group_segment_fixed_size")?,
        private_segment_fixed_size: u32_field(".private_segment_fixed_size")?,
        max_flat_workgroup_size: u32_field(".max_flat_workgroup_size")?,
        wavefront_size: u32_field(".wavefront_size")?,
        sgpr_count: u32_field(".sgpr_count")?,
        vgpr_count: u32_field(".vgpr_count")?,
        uses_dynamic_stack: matches!(map.get(".uses_dynamic_stack"), Some(Value::Boolean(true))),
        args,
        name,
    })
}

fn parse_arg(value: &Value) -> Result<KernelArg> {
    let map = as_map(value, "an argument")?;
    let field = |key: &str| {
        map.get(key)
            .ok_or_else(|| bad(format_args!("an argument without {key}")))
    };
    Ok(KernelArg {
        offset: as_u32(field(".offset")?, ".offset")?,
        size: as_u32(field(".size")?, ".size")?,
        value_kind: as_str(field(".value_kind")?, ".value_kind")?.to_string(),
    })
}

/// A map with string keys (other keys are skipped; a repeated key keeps
/// its first value).
fn as_map<'v>(value: &'v Value, what: &str) -> Result<BTreeMap<&'v str, &'v Value>> {
    let Value::Map(entries) = value else {
        return Err(bad(format_args!("{what} is not a map")));
    };
    let mut map = BTreeMap::new();
    for (k, v) in entries {
        if let Some(k) = k.as_str() {
            map.entry(k).or_insert(v);
        }
    }
    Ok(map)
}

fn as_array<'v>(value: &'v Value, what: &str) -> Result<&'v [Value]> {
    match value {
        Value::Array(a) => Ok(a),
        _ => Err(bad(format_args!("{what} is not an array"))),
    }
}

fn as_str<'v>(value: &'v Value, what: &str) -> Result<&'v str> {
    value
        .as_str()
        .ok_or_else(|| bad(format_args!("{what} is not a UTF-8 string")))
}

fn as_u32(value: &Value, what: &str) -> Result<u32> {
    value
        .as_u64()
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| bad(format_args!("{what} is not an unsigned 32-bit integer")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::from(v)
    }

    fn encode(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn arg(offset: u32, size: u32, kind: &str) -> Value {
        Value::Map(vec![
            (s(".offset"), Value::from(offset)),
            (s(".size"), Value::from(size)),
            (s(".value_kind"), s(kind)),
        ])
    }

    fn sample() -> Value {
        Value::Map(vec![
            (s("amdhsa.version"), Value::Array(vec![1.into(), 2.into()])),
            (s("amdhsa.target"), s("amdgcn-amd-amdhsa--gfx90a")),
            (
                s("amdhsa.kernels"),
                Value::Array(vec![Value::Map(vec![
                    (s(".name"), s("k")),
                    (s(".symbol"), s("k.kd")),
                    (s(".kernarg_segment_size"), Value::from(272u32)),
                    (s(".group_segment_fixed_size"), Value::from(16u32)),
                    (s(".uses_dynamic_stack"), Value::Boolean(true)),
                    (
                        s(".args"),
                        Value::Array(vec![
                            arg(0, 8, "global_buffer"),
                            arg(8, 4, "by_value"),
                            arg(16, 4, "hidden_block_count_x"),
                            arg(28, 2, "hidden_group_size_x"),
                        ]),
                    ),
                ])]),
            ),
        ])
    }

    #[test]
    fn metadata_is_decoded() {
        let m = parse_metadata(&encode(&sample())).unwrap();
        assert_eq!(m.version, vec![1, 2]);
        assert_eq!(m.target.as_deref(), Some("amdgcn-amd-amdhsa--gfx90a"));
        let k = m.kernel("k").unwrap();
        assert_eq!(k.kernarg_segment_size, 272);
        assert_eq!(k.group_segment_fixed_size, 16);
        assert!(k.uses_dynamic_stack);
        assert_eq!(k.explicit_size(), 12);
        assert_eq!(k.hidden("hidden_group_size_x").unwrap().offset, 28);
        assert!(k.hidden("hidden_grid_dims").is_none());
    }

    #[test]
    fn malformed_metadata_is_an_error() {
        for bad in [
            Value::from(3),
            Value::Map(vec![(s("amdhsa.kernels"), Value::from(1))]),
            Value::Map(vec![(
                s("amdhsa.kernels"),
                Value::Array(vec![Value::Map(vec![(s(".symbol"), s("x"))])]),
            )]),
            Value::Map(vec![(
                s("amdhsa.kernels"),
                Value::Array(vec![Value::Map(vec![
                    (s(".name"), s("k")),
                    (
                        s(".args"),
                        Value::Array(vec![arg(0, 8, "by_value"), Value::from(1)]),
                    ),
                ])]),
            )]),
            Value::Map(vec![(
                s("amdhsa.kernels"),
                Value::Array(vec![Value::Map(vec![
                    (s(".name"), s("k")),
                    (s(".kernarg_segment_size"), Value::from(-1)),
                ])]),
            )]),
        ] {
            assert!(parse_metadata(&encode(&bad)).is_err(), "{bad:?}");
        }
        // Truncated, and nested past the depth limit.
        let bytes = encode(&sample());
        for n in 0..bytes.len() {
            assert!(parse_metadata(&bytes[..n]).is_err(), "prefix {n}");
        }
        let mut deep = Value::from(1);
        for _ in 0..100 {
            deep = Value::Array(vec![deep]);
        }
        assert!(parse_metadata(&encode(&deep)).is_err());
        // A 4-billion-element array header with nothing behind it.
        assert!(parse_metadata(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

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
}
