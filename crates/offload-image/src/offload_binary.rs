//! LLVM's `OffloadBinary` container.
//!
//! Layout (all integers little-endian; offsets relative to the start of the
//! binary):
//!
//! ```text
//! header (32 bytes)  magic 10 FF 10 AD | u32 version (1) | u64 size
//!                    | u64 entry_offset | u64 entry_size
//! entry  (40 bytes)  u16 image_kind | u16 offload_kind | u32 flags
//!                    | u64 string_offset | u64 num_strings
//!                    | u64 image_offset | u64 image_size
//! string map         num_strings × { u64 key_offset, u64 value_offset }
//! string table       NUL-terminated strings (starts with a NUL byte)
//! image              aligned to 8; the whole binary is padded to 8
//! ```
//!
//! Several binaries may be concatenated back to back; each starts right
//! after the previous one's `size` bytes. [`parse`] validates every offset
//! and size against the binary's `size` with checked arithmetic.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::{hex_prefix, ImageError, Result};

/// The magic bytes every `OffloadBinary` starts with: `10 FF 10 AD`.
pub const MAGIC: [u8; 4] = [0x10, 0xFF, 0x10, 0xAD];
/// The only version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Size of the fixed header.
pub const HEADER_SIZE: usize = 32;
/// Size of the entry this crate reads and writes.
pub const ENTRY_SIZE: usize = 40;
/// Alignment of the image inside a binary and of the binary's total size.
pub const ALIGNMENT: usize = 8;

/// What the image inside an `OffloadBinary` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// `IMG_None` (0).
    None,
    /// An object file, usually ELF (1).
    Object,
    /// LLVM bitcode (2).
    Bitcode,
    /// A CUDA cubin (3).
    Cubin,
    /// A CUDA fatbinary (4).
    Fatbinary,
    /// PTX assembly (5).
    Ptx,
    /// SPIR-V (6).
    SpirV,
    /// Any other value. [`ImageKind::from_u16`] never produces this for the
    /// values above.
    Other(u16),
}

impl ImageKind {
    /// Decodes the on-disk value.
    pub fn from_u16(v: u16) -> Self {
        match v {
            0 => ImageKind::None,
            1 => ImageKind::Object,
            2 => ImageKind::Bitcode,
            3 => ImageKind::Cubin,
            4 => ImageKind::Fatbinary,
            5 => ImageKind::Ptx,
            6 => ImageKind::SpirV,
            n => ImageKind::Other(n),
        }
    }

    /// Encodes to the on-disk value.
    pub fn to_u16(self) -> u16 {
        match self {
            ImageKind::None => 0,
            ImageKind::Object => 1,
            ImageKind::Bitcode => 2,
            ImageKind::Cubin => 3,
            ImageKind::Fatbinary => 4,
            ImageKind::Ptx => 5,
            ImageKind::SpirV => 6,
            ImageKind::Other(n) => n,
        }
    }
}

/// Displays the conventional file extension LLVM uses for the kind: `o`,
/// `bc`, `cubin`, `fatbin`, `s` (PTX), `spv`; `none` and `unknown(N)`
/// otherwise.
impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageKind::None => f.write_str("none"),
            ImageKind::Object => f.write_str("o"),
            ImageKind::Bitcode => f.write_str("bc"),
            ImageKind::Cubin => f.write_str("cubin"),
            ImageKind::Fatbinary => f.write_str("fatbin"),
            ImageKind::Ptx => f.write_str("s"),
            ImageKind::SpirV => f.write_str("spv"),
            ImageKind::Other(n) => write!(f, "unknown({n})"),
        }
    }
}

/// Accepts the [`Display`](fmt::Display) names and common aliases (`elf`,
/// `object`, `bitcode`, `fatbinary`, `ptx`, `spirv`, `spir-v`), case-insensitively.
impl FromStr for ImageKind {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "none" | "" => ImageKind::None,
            "o" | "elf" | "object" | "obj" => ImageKind::Object,
            "bc" | "bitcode" | "llvm ir" => ImageKind::Bitcode,
            "cubin" => ImageKind::Cubin,
            "fatbin" | "fatbinary" => ImageKind::Fatbinary,
            "s" | "ptx" => ImageKind::Ptx,
            "spv" | "spirv" | "spir-v" => ImageKind::SpirV,
            _ => {
                return Err(ImageError::UnknownName {
                    what: "image kind",
                    name: s.to_string(),
                })
            }
        })
    }
}

/// The offloading model that produced an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffloadKind {
    /// `OFK_None` (0).
    None,
    /// OpenMP (1).
    OpenMp,
    /// CUDA (2).
    Cuda,
    /// HIP (4).
    Hip,
    /// SYCL (8).
    Sycl,
    /// Any other value (LLVM treats the field as a bit mask).
    Other(u16),
}

impl OffloadKind {
    /// Decodes the on-disk value.
    pub fn from_u16(v: u16) -> Self {
        match v {
            0 => OffloadKind::None,
            1 => OffloadKind::OpenMp,
            2 => OffloadKind::Cuda,
            4 => OffloadKind::Hip,
            8 => OffloadKind::Sycl,
            n => OffloadKind::Other(n),
        }
    }

    /// Encodes to the on-disk value.
    pub fn to_u16(self) -> u16 {
        match self {
            OffloadKind::None => 0,
            OffloadKind::OpenMp => 1,
            OffloadKind::Cuda => 2,
            OffloadKind::Hip => 4,
            OffloadKind::Sycl => 8,
            OffloadKind::Other(n) => n,
        }
    }
}

/// `none`, `openmp`, `cuda`, `hip`, `sycl`, or `unknown(N)`.
impl fmt::Display for OffloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffloadKind::None => f.write_str("none"),
            OffloadKind::OpenMp => f.write_str("openmp"),
            OffloadKind::Cuda => f.write_str("cuda"),
            OffloadKind::Hip => f.write_str("hip"),
            OffloadKind::Sycl => f.write_str("sycl"),
            OffloadKind::Other(n) => write!(f, "unknown({n})"),
        }
    }
}

/// Accepts the [`Display`](fmt::Display) names case-insensitively.
impl FromStr for OffloadKind {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "none" | "" => OffloadKind::None,
            "openmp" | "omp" => OffloadKind::OpenMp,
            "cuda" => OffloadKind::Cuda,
            "hip" => OffloadKind::Hip,
            "sycl" => OffloadKind::Sycl,
            _ => {
                return Err(ImageError::UnknownName {
                    what: "offload kind",
                    name: s.to_string(),
                })
            }
        })
    }
}

/// One `OffloadBinary`: an image plus its string map. Used both for parsing
/// (the image borrows from the input) and for [`write()`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OffloadBinary<'a> {
    /// What the image is.
    pub image_kind: ImageKind,
    /// The offloading model.
    pub offload_kind: OffloadKind,
    /// Uninterpreted flags.
    pub flags: u32,
    /// The string map in on-disk order (`triple`, `arch`, and any other
    /// `key=value` pairs). Duplicate keys are kept; lookups see the last one,
    /// as LLVM does.
    pub strings: Vec<(String, String)>,
    /// The image bytes.
    pub image: &'a [u8],
}

impl<'a> OffloadBinary<'a> {
    /// A binary with no strings and no flags.
    pub fn new(image_kind: ImageKind, offload_kind: OffloadKind, image: &'a [u8]) -> Self {
        OffloadBinary {
            image_kind,
            offload_kind,
            flags: 0,
            strings: Vec::new(),
            image,
        }
    }

    /// Builder form of [`set`](Self::set).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.set(key, value);
        self
    }

    /// The value of `key` (the last one if the key is repeated).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.strings
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` to `value`: replaces the first occurrence in place (and
    /// drops any later duplicates) or appends.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.strings.iter().position(|(k, _)| *k == key) {
            Some(i) => {
                self.strings[i].1 = value;
                let mut j = 0;
                self.strings.retain(|(k, _)| {
                    let keep = j <= i || *k != key;
                    j += 1;
                    keep
                });
            }
            None => self.strings.push((key, value)),
        }
    }

    /// The `triple` string.
    pub fn triple(&self) -> Option<&str> {
        self.get("triple")
    }

    /// The `arch` string (may be empty: LLVM writes `arch=""` for targets
    /// without a sub-architecture).
    pub fn arch(&self) -> Option<&str> {
        self.get("arch")
    }
}

/// The decoded strings of one binary may total at most this many times the
/// binary's size (plus [`STRING_EXPANSION_SLACK`]): a guard against string
/// maps whose many pairs all point at one long string.
pub const STRING_EXPANSION_FACTOR: u64 = 4;
/// See [`STRING_EXPANSION_FACTOR`].
pub const STRING_EXPANSION_SLACK: u64 = 64 * 1024;

/// The writer's input: the same type as a parsed binary.
pub type Entry<'a> = OffloadBinary<'a>;

fn rd_u16(b: &[u8], off: usize) -> u16 {
    // Callers guarantee `off + 2 <= b.len()`; `get` keeps this panic-free anyway.
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .unwrap_or(0)
}

fn rd_u32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .unwrap_or(0)
}

fn rd_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map(|s| {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_le_bytes(a)
        })
        .unwrap_or(0)
}

/// Checks that `[start, start + len)` lies inside `limit` bytes and returns it
/// as a `usize` range.
fn region(
    base: u64,
    what: &'static str,
    start: u64,
    len: u64,
    limit: usize,
) -> Result<std::ops::Range<usize>> {
    let err = || ImageError::OutOfBounds {
        offset: base,
        what,
        start,
        len,
        limit: limit as u64,
    };
    let end = start.checked_add(len).ok_or_else(err)?;
    if end > limit as u64 {
        return Err(err());
    }
    // Both fit in usize because they are <= limit.
    Ok(start as usize..end as usize)
}

fn c_string(bin: &[u8], base: u64, at: u64, what: &'static str) -> Result<String> {
    let unterminated = || ImageError::UnterminatedString {
        offset: base,
        string_offset: at,
    };
    let start = usize::try_from(at).map_err(|_| unterminated())?;
    let tail = bin.get(start..).ok_or_else(unterminated)?;
    let len = tail.iter().position(|&b| b == 0).ok_or_else(unterminated)?;
    std::str::from_utf8(&tail[..len])
        .map(str::to_owned)
        .map_err(|_| ImageError::InvalidUtf8 {
            what,
            offset: base + at,
        })
}

/// Parses the `OffloadBinary` at the start of `bytes`, which is `base` bytes
/// into some outer buffer (used only in error messages).
fn parse_at(bytes: &[u8], base: u64) -> Result<(OffloadBinary<'_>, usize)> {
    if bytes.len() < HEADER_SIZE {
        return Err(ImageError::Truncated {
            what: "OffloadBinary header",
            offset: base,
            needed: HEADER_SIZE as u64,
            available: bytes.len() as u64,
        });
    }
    if bytes[..4] != MAGIC {
        return Err(ImageError::BadMagic {
            what: "OffloadBinary",
            offset: base,
            found: hex_prefix(&bytes[..4]),
        });
    }
    let version = rd_u32(bytes, 4);
    if version != VERSION {
        return Err(ImageError::UnsupportedVersion {
            offset: base,
            version,
        });
    }
    let size = rd_u64(bytes, 8);
    if size < HEADER_SIZE as u64 {
        return Err(ImageError::InvalidField {
            offset: base,
            field: "size",
            value: size,
            reason: "smaller than the 32-byte header",
        });
    }
    if size > bytes.len() as u64 {
        return Err(ImageError::Truncated {
            what: "OffloadBinary",
            offset: base,
            needed: size,
            available: bytes.len() as u64,
        });
    }
    // size <= bytes.len(), so it fits in usize.
    let bin = &bytes[..size as usize];
    let limit = bin.len();

    let entry_offset = rd_u64(bin, 16);
    let entry_size = rd_u64(bin, 24);
    if entry_size < ENTRY_SIZE as u64 {
        return Err(ImageError::InvalidField {
            offset: base,
            field: "entry_size",
            value: entry_size,
            reason: "smaller than the 40-byte entry",
        });
    }
    let entry = region(base, "entry", entry_offset, entry_size, limit)?;
    let e = &bin[entry];

    let image_kind = ImageKind::from_u16(rd_u16(e, 0));
    let offload_kind = OffloadKind::from_u16(rd_u16(e, 2));
    let flags = rd_u32(e, 4);
    let string_offset = rd_u64(e, 8);
    let num_strings = rd_u64(e, 16);
    let image_offset = rd_u64(e, 24);
    let image_size = rd_u64(e, 32);

    let map_len = num_strings
        .checked_mul(16)
        .ok_or(ImageError::InvalidField {
            offset: base,
            field: "num_strings",
            value: num_strings,
            reason: "string map size overflows",
        })?;
    let map = region(base, "string map", string_offset, map_len, limit)?;
    let map = &bin[map];
    let mut strings = Vec::with_capacity(map.len() / 16);
    // Many pairs may point at one long string; cap what they expand to so a
    // small input cannot demand gigabytes of copies.
    let budget = (limit as u64).saturating_mul(STRING_EXPANSION_FACTOR) + STRING_EXPANSION_SLACK;
    let mut expanded = 0u64;
    for pair in map.chunks_exact(16) {
        let key = c_string(bin, base, rd_u64(pair, 0), "OffloadBinary string key")?;
        let value = c_string(bin, base, rd_u64(pair, 8), "OffloadBinary string value")?;
        expanded += (key.len() + value.len()) as u64;
        if expanded > budget {
            return Err(ImageError::InvalidField {
                offset: base,
                field: "num_strings",
                value: num_strings,
                reason: "the string map expands to more than 4 times the binary's size",
            });
        }
        strings.push((key, value));
    }

    let image = region(base, "image", image_offset, image_size, limit)?;
    Ok((
        OffloadBinary {
            image_kind,
            offload_kind,
            flags,
            strings,
            image: &bin[image],
        },
        limit,
    ))
}

/// Parses one `OffloadBinary` at the start of `bytes`.
///
/// Every offset and size is checked against the binary's `size`, every
/// string must be NUL-terminated UTF-8 inside the binary, and the decoded
/// strings may total at most [`STRING_EXPANSION_FACTOR`] times the binary's
/// size (plus [`STRING_EXPANSION_SLACK`]).
///
/// Returns the binary and the number of bytes it occupies (its `size` field);
/// anything after that is not looked at.
pub fn parse(bytes: &[u8]) -> Result<(OffloadBinary<'_>, usize)> {
    parse_at(bytes, 0)
}

/// Parses every `OffloadBinary` in a concatenation, such as the contents of
/// a `.llvm.offloading` section.
///
/// Zero bytes up to the next 8-byte boundary between binaries, and any run of
/// trailing zero bytes, are tolerated as padding. An empty buffer gives an
/// empty list. Error offsets are relative to the start of `bytes`.
pub fn parse_all(bytes: &[u8]) -> Result<Vec<OffloadBinary<'_>>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let (bin, used) = parse_at(rest, pos as u64)?;
        out.push(bin);
        pos += used;
        while !pos.is_multiple_of(ALIGNMENT) && bytes.get(pos) == Some(&0) {
            pos += 1;
        }
    }
    Ok(out)
}

fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// Lays out one binary. With `strict`, strings containing NUL are an error;
/// otherwise they are cut at the first NUL.
fn write_one(out: &mut Vec<u8>, e: &OffloadBinary<'_>, strict: bool) -> Result<()> {
    fn clean<'s>(s: &'s str, what: &'static str, strict: bool) -> Result<&'s str> {
        match s.find('\0') {
            None => Ok(s),
            Some(_) if strict => Err(ImageError::NulInString {
                what,
                value: s.to_string(),
            }),
            Some(i) => Ok(&s[..i]),
        }
    }

    let start = out.len();
    let map_offset = HEADER_SIZE + ENTRY_SIZE;
    let table_offset = map_offset + 16 * e.strings.len();

    // String table: a leading NUL (the empty string), then each distinct
    // string once.
    let mut table: Vec<u8> = vec![0];
    let mut offsets: Vec<(usize, usize)> = Vec::with_capacity(e.strings.len());
    let mut seen: HashMap<&str, usize> = HashMap::new();
    fn place<'s>(
        s: &'s str,
        table_offset: usize,
        table: &mut Vec<u8>,
        seen: &mut HashMap<&'s str, usize>,
    ) -> usize {
        if s.is_empty() {
            return table_offset;
        }
        if let Some(&off) = seen.get(s) {
            return off;
        }
        let off = table_offset + table.len();
        table.extend_from_slice(s.as_bytes());
        table.push(0);
        seen.insert(s, off);
        off
    }
    for (k, v) in &e.strings {
        let k = clean(k, "key", strict)?;
        let v = clean(v, "value", strict)?;
        let ko = place(k, table_offset, &mut table, &mut seen);
        let vo = place(v, table_offset, &mut table, &mut seen);
        offsets.push((ko, vo));
    }

    let image_offset = align_up(table_offset + table.len());
    let total = align_up(image_offset + e.image.len());

    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(total as u64).to_le_bytes());
    out.extend_from_slice(&(HEADER_SIZE as u64).to_le_bytes());
    out.extend_from_slice(&(ENTRY_SIZE as u64).to_le_bytes());

    out.extend_from_slice(&e.image_kind.to_u16().to_le_bytes());
    out.extend_from_slice(&e.offload_kind.to_u16().to_le_bytes());
    out.extend_from_slice(&e.flags.to_le_bytes());
    out.extend_from_slice(&(map_offset as u64).to_le_bytes());
    out.extend_from_slice(&(e.strings.len() as u64).to_le_bytes());
    out.extend_from_slice(&(image_offset as u64).to_le_bytes());
    out.extend_from_slice(&(e.image.len() as u64).to_le_bytes());

    for (ko, vo) in offsets {
        out.extend_from_slice(&(ko as u64).to_le_bytes());
        out.extend_from_slice(&(vo as u64).to_le_bytes());
    }
    out.extend_from_slice(&table);
    out.resize(start + image_offset, 0);
    out.extend_from_slice(e.image);
    out.resize(start + total, 0);
    Ok(())
}

/// Writes one `OffloadBinary` per entry, concatenated, in the layout LLVM's
/// writer uses (header, entry, string map, string table, image aligned to 8,
/// total padded to 8).
///
/// Strings cannot contain NUL bytes in this format: a key or value with a
/// NUL is cut at its first NUL. Use [`try_write`] to get an error instead.
pub fn write(entries: &[OffloadBinary<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        // Cannot fail when not strict.
        let _ = write_one(&mut out, e, false);
    }
    out
}

/// Like [`write()`], but a key or value containing a NUL byte is an error.
pub fn try_write(entries: &[OffloadBinary<'_>]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for e in entries {
        write_one(&mut out, e, true)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(image: &[u8]) -> OffloadBinary<'_> {
        OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, image)
            .with("triple", "x86_64-unknown-linux-gnu")
            .with("arch", "")
    }

    #[test]
    fn round_trip_one() {
        let img = b"\x7fELF-not-really";
        let bytes = write(&[sample(img)]);
        assert_eq!(bytes.len() % 8, 0);
        let (b, used) = parse(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(b, sample(img));
        assert_eq!(b.triple(), Some("x86_64-unknown-linux-gnu"));
        assert_eq!(b.arch(), Some(""));
        // Image is 8-aligned within the binary.
        let off = b.image.as_ptr() as usize - bytes.as_ptr() as usize;
        assert_eq!(off % 8, 0);
    }

    #[test]
    fn strings_are_deduplicated_and_empty_points_at_leading_nul() {
        let b = OffloadBinary::new(ImageKind::Ptx, OffloadKind::Cuda, b"x")
            .with("a", "same")
            .with("b", "same")
            .with("c", "");
        let bytes = write(std::slice::from_ref(&b));
        let (p, _) = parse(&bytes).unwrap();
        assert_eq!(p, b);
        let v_a = rd_u64(&bytes, 72 + 8);
        let v_b = rd_u64(&bytes, 72 + 16 + 8);
        let v_c = rd_u64(&bytes, 72 + 32 + 8);
        assert_eq!(v_a, v_b);
        assert_eq!(v_c, 72 + 48);
        assert_eq!(bytes[v_c as usize], 0);
    }

    #[test]
    fn set_replaces_in_place_and_get_sees_last() {
        let mut b = OffloadBinary::new(ImageKind::None, OffloadKind::None, b"");
        b.strings = vec![
            ("k".into(), "1".into()),
            ("x".into(), "y".into()),
            ("k".into(), "2".into()),
        ];
        assert_eq!(b.get("k"), Some("2"));
        b.set("k", "3");
        assert_eq!(
            b.strings,
            vec![("k".into(), "3".into()), ("x".into(), "y".into())]
        );
    }

    #[test]
    fn nul_in_strings() {
        let b = OffloadBinary::new(ImageKind::None, OffloadKind::None, b"").with("k", "a\0b");
        assert!(matches!(
            try_write(std::slice::from_ref(&b)),
            Err(ImageError::NulInString { what: "value", .. })
        ));
        let bytes = write(&[b]);
        let (p, _) = parse(&bytes).unwrap();
        assert_eq!(p.get("k"), Some("a"));
    }

    #[test]
    fn kinds_round_trip() {
        for v in 0..20u16 {
            assert_eq!(ImageKind::from_u16(v).to_u16(), v);
            assert_eq!(OffloadKind::from_u16(v).to_u16(), v);
        }
        for k in [
            ImageKind::None,
            ImageKind::Object,
            ImageKind::Bitcode,
            ImageKind::Cubin,
            ImageKind::Fatbinary,
            ImageKind::Ptx,
            ImageKind::SpirV,
        ] {
            assert_eq!(k.to_string().parse::<ImageKind>().unwrap(), k);
        }
        for k in [
            OffloadKind::None,
            OffloadKind::OpenMp,
            OffloadKind::Cuda,
            OffloadKind::Hip,
            OffloadKind::Sycl,
        ] {
            assert_eq!(k.to_string().parse::<OffloadKind>().unwrap(), k);
        }
        assert_eq!(OffloadKind::OpenMp.to_string(), "openmp");
        assert_eq!("elf".parse::<ImageKind>().unwrap(), ImageKind::Object);
        assert!("nope".parse::<ImageKind>().is_err());
    }

    #[test]
    fn string_bomb_is_rejected() {
        // 4096 pairs all pointing at one 1000-byte string.
        let long = "x".repeat(1000);
        let mut b = OffloadBinary::new(ImageKind::None, OffloadKind::None, b"");
        for i in 0..4096 {
            b.strings.push((format!("{i}"), long.clone()));
        }
        assert!(parse(&write(&[b.clone()])).is_err());
        b.strings.truncate(16);
        let bytes = write(&[b]);
        assert_eq!(parse(&bytes).unwrap().0.strings.len(), 16);
    }

    #[test]
    fn parse_all_tolerates_padding() {
        let a = sample(b"aaa");
        let b = sample(b"bbbbbbbbbbbb");
        let mut bytes = write(&[a.clone(), b.clone()]);
        bytes.extend_from_slice(&[0; 24]);
        assert_eq!(parse_all(&bytes).unwrap(), vec![a, b]);
        assert!(parse_all(&[]).unwrap().is_empty());
        assert!(parse_all(&[0; 16]).unwrap().is_empty());
    }
}
