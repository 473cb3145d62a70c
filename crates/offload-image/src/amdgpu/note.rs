//! The metadata note: `NT_AMDGPU_METADATA`'s MessagePack map, decoded
//! with `rmpv` (the `amdgpu-metadata` feature).

use std::collections::BTreeMap;

use object::elf::FileHeader64;
use object::read::elf::SectionHeader;
use object::Endianness;
use rmpv::Value;

use super::{CodeObjectMetadata, KernelArg, KernelMetadata, NT_AMDGPU_METADATA};
use crate::{ImageError, Result};

/// Nesting deeper than this is not metadata (it is 5 deep).
const MAX_DEPTH: usize = 16;

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
}
