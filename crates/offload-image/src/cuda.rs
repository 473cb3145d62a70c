//! NVIDIA CUDA device code: PTX text, cubins and fatbinaries.
//!
//! * **PTX** is text: an optional comment block, then `.version X.Y`,
//!   `.target sm_XX[a|f]`, `.address_size 64` and the module. It runs on
//!   every GPU whose compute capability is at least the target's (the driver
//!   JIT-compiles it); an arch-specific target (`sm_90a`) only on exactly
//!   that one.
//! * A **cubin** is an ELF file with `e_machine` `EM_CUDA` (190). Its SM
//!   number (major * 10 + minor) sits in `e_flags`: in the low byte under
//!   the ELF ABI version 7 (`ELFABIVERSION_CUDA_V1`, up to sm_90: `0x5a` for
//!   sm_90), in bits 8-15 under ABI version 8 (`ELFABIVERSION_CUDA_V2`,
//!   Blackwell and later toolkits). A cubin runs on the same major
//!   architecture with an equal or higher minor version (CUDA's binary
//!   compatibility rule); an arch-specific one (`EF_CUDA_ACCELERATORS`) only
//!   on exactly its SM.
//! * A **fatbinary** (magic `0xBA55ED50`, the contents of a host binary's
//!   `.nv_fatbin` section) holds several entries: each a PTX or cubin payload
//!   (possibly compressed) for one SM. Layout, little-endian: a 16-byte
//!   header (`u32 magic`, `u16 version`, `u16 header size`, `u64 size of the
//!   entries`), then entries, each a header (`u16 kind` (1 PTX, 2 cubin),
//!   `u16 version`, `u32 header size`, `u64 payload size`, ..., `u32 sm` at
//!   offset 28, `u64 flags` at offset 40) followed by its payload.
//!
//! Everything here reads untrusted bytes: bounds-checked, never panics.

use crate::{elf, ImageError, Result};

/// The triple of 64-bit NVIDIA GPU code.
pub const TRIPLE: &str = "nvptx64-nvidia-cuda";
/// Fatbinary magic, little-endian at offset 0.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Name of the section that holds a host binary's fatbinary.
pub const FATBIN_SECTION: &str = ".nv_fatbin";
/// `e_ident[EI_ABIVERSION]` of cubins with the SM in the low byte of `e_flags`.
pub const ELFABIVERSION_CUDA_V1: u8 = 7;
/// `e_ident[EI_ABIVERSION]` of cubins with the SM in bits 8-15 of `e_flags`.
pub const ELFABIVERSION_CUDA_V2: u8 = 8;
/// `EF_CUDA_SM`: the SM under ABI version 7.
pub const EF_CUDA_SM: u32 = 0xff;
/// `EF_CUDA_SM_MASK` / `EF_CUDA_SM_OFFSET`: the SM under ABI version 8.
pub const EF_CUDA_SM_MASK: u32 = 0xff00;
/// Shift of [`EF_CUDA_SM_MASK`].
pub const EF_CUDA_SM_OFFSET: u32 = 8;
/// `EF_CUDA_ACCELERATORS_V1`: arch-specific (`sm_90a`) under ABI version 7.
pub const EF_CUDA_ACCELERATORS_V1: u32 = 0x800;
/// `EF_CUDA_ACCELERATORS`: arch-specific under ABI version 8.
pub const EF_CUDA_ACCELERATORS: u32 = 0x8;

/// A compute capability / SM version, e.g. 9.0 for `sm_90`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sm {
    /// Major version (9 for sm_90, 10 for sm_100).
    pub major: u32,
    /// Minor version (0 for sm_90, 3 for sm_103).
    pub minor: u32,
}

impl Sm {
    /// From the number NVIDIA writes (`90` for sm_90, `103` for sm_103).
    pub fn from_number(n: u32) -> Sm {
        Sm {
            major: n / 10,
            minor: n % 10,
        }
    }
    /// `major * 10 + minor`.
    pub fn number(self) -> u32 {
        self.major.saturating_mul(10).saturating_add(self.minor)
    }
}

impl std::fmt::Display for Sm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sm_{}", self.number())
    }
}

/// An architecture a piece of code targets: an SM and whether it is
/// arch-specific (`sm_90a`: runs on exactly that SM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    /// The SM.
    pub sm: Sm,
    /// `a` suffix / `EF_CUDA_ACCELERATORS`.
    pub arch_specific: bool,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{}",
            self.sm,
            if self.arch_specific { "a" } else { "" }
        )
    }
}

/// Parses `sm_90`, `sm_90a`, `sm_100f`, `compute_80` (the `f` family
/// suffix counts as plain).
pub fn parse_arch(arch: &str) -> Option<Target> {
    let digits = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))?;
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let n: u32 = digits[..end].parse().ok()?;
    let arch_specific = match &digits[end..] {
        "" | "f" => false,
        "a" => true,
        _ => return None,
    };
    Some(Target {
        sm: Sm::from_number(n),
        arch_specific,
    })
}

/// Whether a cubin for `image` runs on a device of compute capability
/// `device`: same major, device minor at least the image's (exactly equal
/// for arch-specific code).
pub fn cubin_runs_on(image: Target, device: Sm) -> bool {
    if image.arch_specific {
        return image.sm == device;
    }
    image.sm.major == device.major && device.minor >= image.sm.minor
}

/// Whether PTX for `image` runs on `device` (the driver compiles it for any
/// newer GPU; arch-specific PTX only for exactly its SM).
pub fn ptx_runs_on(image: Target, device: Sm) -> bool {
    if image.arch_specific {
        return image.sm == device;
    }
    device >= image.sm
}

/// What kind of CUDA code a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// PTX text.
    Ptx,
    /// An ELF file for `EM_CUDA`.
    Cubin,
    /// A fatbinary.
    Fatbin,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Ptx => "PTX",
            Kind::Cubin => "cubin",
            Kind::Fatbin => "fatbin",
        })
    }
}

/// Recognises CUDA code from its first bytes (PTX: its first directive).
pub fn detect(bytes: &[u8]) -> Option<Kind> {
    if bytes.get(..4) == Some(&FATBIN_MAGIC.to_le_bytes()[..]) {
        return Some(Kind::Fatbin);
    }
    if bytes.get(..4) == Some(&[0x7f, b'E', b'L', b'F'][..]) {
        return (bytes.len() >= 20 && u16::from_le_bytes([bytes[18], bytes[19]]) == elf::EM_CUDA)
            .then_some(Kind::Cubin);
    }
    is_ptx(bytes).then_some(Kind::Ptx)
}

/// The text lines of PTX: up to the first NUL, lossy UTF-8.
fn ptx_text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
}

/// Whether `bytes` is PTX text: the first directive, after blank lines and
/// comments, is `.version`.
pub fn is_ptx(bytes: &[u8]) -> bool {
    // Only the head is looked at: a comment block and the directive.
    let head = &bytes[..bytes.len().min(64 * 1024)];
    if head.iter().any(|&b| b != 0 && b < 0x09) {
        return false;
    }
    let text = ptx_text(head);
    let mut in_block = false;
    for line in text.lines() {
        let mut l = line.trim();
        if in_block {
            match l.find("*/") {
                Some(i) => {
                    in_block = false;
                    l = l[i + 2..].trim();
                }
                None => continue,
            }
        }
        if let Some(rest) = l.strip_prefix("/*") {
            match rest.find("*/") {
                Some(i) => l = rest[i + 2..].trim(),
                None => {
                    in_block = true;
                    continue;
                }
            }
        }
        if l.is_empty() || l.starts_with("//") {
            continue;
        }
        return l.starts_with(".version");
    }
    false
}

/// What a PTX module says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PtxInfo {
    /// `.version` (PTX ISA), e.g. (7, 8).
    pub version: Option<(u32, u32)>,
    /// The first SM named by `.target`.
    pub target: Option<Target>,
    /// `.address_size` (32 or 64), when given.
    pub address_size: Option<u32>,
    /// Kernels (`.entry` names), in order.
    pub entries: Vec<String>,
    /// Module-scope `.global` / `.const` variables, in order.
    pub globals: Vec<String>,
}

fn identifier(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%' | '.'))
        .collect()
}

/// Reads the directives of a PTX module (None when it is not PTX).
pub fn ptx_info(bytes: &[u8]) -> Option<PtxInfo> {
    if !is_ptx(bytes) {
        return None;
    }
    let text = ptx_text(bytes);
    let mut info = PtxInfo::default();
    let mut depth = 0usize;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        if depth == 0 {
            let mut words = code.split_whitespace();
            match words.next() {
                Some(".version") if info.version.is_none() => {
                    info.version = words.next().and_then(|v| {
                        let (a, b) = v.split_once('.')?;
                        Some((a.parse().ok()?, b.parse().ok()?))
                    });
                }
                Some(".target") if info.target.is_none() => {
                    info.target = code[".target".len()..]
                        .split(',')
                        .map(str::trim)
                        .find_map(parse_arch);
                }
                Some(".address_size") => {
                    info.address_size = words.next().and_then(|v| v.parse().ok());
                }
                _ => {}
            }
            let toks: Vec<&str> = code.split_whitespace().collect();
            if let Some(i) = toks.iter().position(|t| *t == ".entry") {
                if let Some(name) = toks.get(i + 1).map(|t| identifier(t)) {
                    if !name.is_empty() {
                        info.entries.push(name);
                    }
                }
            } else if toks.iter().any(|t| *t == ".global" || *t == ".const")
                && !toks.contains(&".func")
            {
                // `.visible .global .align 4 .u32 counter;` / `... .b8 buf[16] = {...};`
                if let Some(last) = code
                    .split('=')
                    .next()
                    .and_then(|d| d.trim().trim_end_matches(';').split_whitespace().last())
                {
                    let name = identifier(last.split('[').next().unwrap_or(""));
                    if !name.is_empty() && !name.starts_with('.') {
                        info.globals.push(name);
                    }
                }
            }
        }
        for c in code.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    Some(info)
}

/// The target of a cubin (None when `bytes` is not a valid `EM_CUDA` ELF).
pub fn cubin_target(bytes: &[u8]) -> Option<Target> {
    let info = elf::info(bytes).ok()?;
    if info.machine != elf::EM_CUDA {
        return None;
    }
    let abi = *bytes.get(8)?;
    let (n, arch_specific) = if abi >= ELFABIVERSION_CUDA_V2 {
        (
            (info.flags & EF_CUDA_SM_MASK) >> EF_CUDA_SM_OFFSET,
            info.flags & EF_CUDA_ACCELERATORS != 0,
        )
    } else {
        (
            info.flags & EF_CUDA_SM,
            info.flags & EF_CUDA_ACCELERATORS_V1 != 0,
        )
    };
    (n != 0).then(|| Target {
        sm: Sm::from_number(n),
        arch_specific,
    })
}

/// `.nv.info` attribute formats (the byte before the attribute): 1 no
/// value, 2 a byte, 3 a half word (each in the record's last two bytes), 4
/// a size and that many bytes.
const EIFMT_NVAL: u8 = 1;
const EIFMT_SVAL: u8 = 4;
/// `.nv.info` attribute: a function's register count (`u32` symbol index,
/// `u32` registers per thread).
const EIATTR_REGCOUNT: u8 = 0x2f;

/// Registers per thread of one function of a cubin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRegisters {
    /// The function's symbol name (`<symbol N>` when the index is not in
    /// `.symtab`).
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
}

/// The register count of each function of a cubin, from its `.nv.info`
/// section (what `cuobjdump -res-usage` shows as REG): a list of
/// attributes, each `u8 format`, `u8 attribute`, then either a `u16` value
/// (formats 1-3) or a `u16` size and that many bytes (format 4). Register
/// counts decide how many threads an SM can hold.
pub fn cubin_registers(bytes: &[u8]) -> Result<Vec<FunctionRegisters>> {
    let info = elf::info(bytes)?;
    if info.machine != elf::EM_CUDA {
        return Err(ImageError::Elf(format!(
            "not a cubin: e_machine is {} ({}), not EM_CUDA (190)",
            info.machine, info.machine_name
        )));
    }
    let names = elf::symtab_names(bytes)?;
    let mut out = Vec::new();
    for section in elf::sections_named(bytes, ".nv.info")? {
        let mut at = 0;
        while let Some(&[format, attribute, lo, hi]) = section.get(at..at + 4) {
            let value = u16::from_le_bytes([lo, hi]) as usize;
            at += 4;
            if !(EIFMT_NVAL..=EIFMT_SVAL).contains(&format) {
                return Err(ImageError::Elf(format!(
                    ".nv.info: unknown attribute format {format} at offset {:#x}",
                    at - 4
                )));
            }
            if format != EIFMT_SVAL {
                continue;
            }
            let Some(payload) = section.get(at..at + value) else {
                return Err(ImageError::Elf(format!(
                    ".nv.info: attribute {attribute:#x} at offset {:#x} says {value} bytes, \
                     {} are left",
                    at - 4,
                    section.len() - at
                )));
            };
            at += value;
            if attribute == EIATTR_REGCOUNT && payload.len() == 8 {
                let index = u32::from_le_bytes(payload[..4].try_into().unwrap_or_default());
                let registers = u32::from_le_bytes(payload[4..].try_into().unwrap_or_default());
                let name = names
                    .get(index as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("<symbol {index}>"));
                out.push(FunctionRegisters { name, registers });
            }
        }
    }
    Ok(out)
}

/// The payload kind of a fatbinary entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// PTX text (kind 1).
    Ptx,
    /// A cubin (kind 2).
    Cubin,
    /// Anything else, with its kind number.
    Other(u16),
}

/// One entry of a fatbinary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatbinEntry<'a> {
    /// What the payload is.
    pub kind: EntryKind,
    /// The SM it was built for (PTX: the virtual architecture).
    pub sm: Sm,
    /// The entry's flags.
    pub flags: u64,
    /// Whether the payload is compressed (flag `0x2000` or `0x8000`).
    pub compressed: bool,
    /// The payload, with its padding.
    pub payload: &'a [u8],
}

/// Entry flag bits that mark a compressed payload (older and newer toolkits).
const COMPRESSED_FLAGS: u64 = 0x2000 | 0x8000;
const FATBIN_HEADER: usize = 16;
const ENTRY_HEADER_MIN: usize = 48;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn truncated(what: &'static str, offset: usize, needed: u64, bytes: &[u8]) -> ImageError {
    ImageError::Truncated {
        what,
        offset: offset as u64,
        needed,
        available: bytes.len().saturating_sub(offset) as u64,
    }
}

/// Every entry of a fatbinary (several containers back to back are read
/// in turn; zero padding between them is skipped).
pub fn fatbin_entries(bytes: &[u8]) -> Result<Vec<FatbinEntry<'_>>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let magic = u32_at(bytes, at)
            .ok_or_else(|| truncated("fatbinary header", at, FATBIN_HEADER as u64, bytes))?;
        if magic != FATBIN_MAGIC {
            return Err(ImageError::BadMagic {
                what: "fatbinary",
                offset: at as u64,
                found: crate::hex_prefix(rest),
            });
        }
        let header_size = u16_at(bytes, at + 6)
            .ok_or_else(|| truncated("fatbinary header", at, FATBIN_HEADER as u64, bytes))?
            as usize;
        let body = u64_at(bytes, at + 8)
            .ok_or_else(|| truncated("fatbinary header", at, FATBIN_HEADER as u64, bytes))?;
        let start = at
            .checked_add(header_size.max(FATBIN_HEADER))
            .filter(|&s| s <= bytes.len())
            .ok_or_else(|| truncated("fatbinary header", at, header_size as u64, bytes))?;
        let end = u64::try_from(start)
            .ok()
            .and_then(|s| s.checked_add(body))
            .filter(|&e| e <= bytes.len() as u64)
            .ok_or_else(|| truncated("fatbinary entries", start, body, bytes))?
            as usize;
        let mut e = start;
        while e < end {
            let kind = u16_at(bytes, e)
                .filter(|_| e + ENTRY_HEADER_MIN <= end)
                .ok_or_else(|| {
                    truncated("fatbinary entry header", e, ENTRY_HEADER_MIN as u64, bytes)
                })?;
            let hsize = u32_at(bytes, e + 4).unwrap_or(0) as usize;
            let psize = u64_at(bytes, e + 8).unwrap_or(0);
            if hsize < ENTRY_HEADER_MIN {
                return Err(ImageError::Elf(format!(
                    "fatbinary entry at {e:#x}: header size {hsize} is below {ENTRY_HEADER_MIN}"
                )));
            }
            let pstart = e
                .checked_add(hsize)
                .filter(|&p| p <= end)
                .ok_or_else(|| truncated("fatbinary entry header", e, hsize as u64, bytes))?;
            let pend = u64::try_from(pstart)
                .ok()
                .and_then(|p| p.checked_add(psize))
                .filter(|&p| p <= end as u64)
                .ok_or_else(|| truncated("fatbinary entry payload", pstart, psize, bytes))?
                as usize;
            let flags = u64_at(bytes, e + 40).unwrap_or(0);
            out.push(FatbinEntry {
                kind: match kind {
                    1 => EntryKind::Ptx,
                    2 => EntryKind::Cubin,
                    n => EntryKind::Other(n),
                },
                sm: Sm::from_number(u32_at(bytes, e + 28).unwrap_or(0)),
                flags,
                compressed: flags & COMPRESSED_FLAGS != 0,
                payload: &bytes[pstart..pend],
            });
            if pend == e {
                break;
            }
            e = pend;
        }
        at = end;
    }
    Ok(out)
}

/// Whether code of this fatbinary runs on `device`: some cubin entry by the
/// cubin rule or some PTX entry by the PTX rule.
pub fn fatbin_runs_on(bytes: &[u8], device: Sm) -> bool {
    fatbin_entries(bytes).is_ok_and(|entries| {
        entries.iter().any(|e| {
            let target = Target {
                sm: e.sm,
                arch_specific: false,
            };
            match e.kind {
                EntryKind::Cubin => {
                    let t = if e.compressed {
                        None
                    } else {
                        cubin_target(e.payload)
                    };
                    cubin_runs_on(t.unwrap_or(target), device)
                }
                EntryKind::Ptx => ptx_runs_on(target, device),
                EntryKind::Other(_) => false,
            }
        })
    })
}

/// The architecture unwrap reports for a CUDA leaf with no container
/// naming one: a PTX module's target, a cubin's SM (None for fatbinaries,
/// which hold several).
pub fn arch_of(bytes: &[u8]) -> Option<String> {
    match detect(bytes)? {
        Kind::Ptx => ptx_info(bytes)?.target.map(|t| t.to_string()),
        Kind::Cubin => cubin_target(bytes).map(|t| t.to_string()),
        Kind::Fatbin => None,
    }
}

/// The `.nv_fatbin` sections of a host ELF (CUDA host binaries).
pub fn fatbin_sections(bytes: &[u8]) -> Result<Vec<&[u8]>> {
    elf::sections_named(bytes, FATBIN_SECTION)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_elf::cubin_with_info;

    fn sval(attribute: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![EIFMT_SVAL, attribute];
        v.extend((payload.len() as u16).to_le_bytes());
        v.extend(payload);
        v
    }

    fn regcount(symbol: u32, registers: u32) -> Vec<u8> {
        let mut p = symbol.to_le_bytes().to_vec();
        p.extend(registers.to_le_bytes());
        sval(EIATTR_REGCOUNT, &p)
    }

    #[test]
    fn register_counts_come_from_nv_info() {
        let mut info = vec![3, 0x1b, 0x20, 0]; // a u16-valued attribute
        info.extend(regcount(2, 32));
        info.extend(sval(0x11, &[0; 8])); // another attribute with a payload
        info.extend(regcount(9, 64)); // a symbol index past the table
        let regs = cubin_registers(&cubin_with_info(&info)).unwrap();
        let named = |name: &str, registers| FunctionRegisters {
            name: name.to_string(),
            registers,
        };
        assert_eq!(regs, [named("k2", 32), named("<symbol 9>", 64)]);
        // A payload running past the section is an error, not a panic.
        let mut short = regcount(1, 40);
        short.truncate(8);
        let e = cubin_registers(&cubin_with_info(&short)).unwrap_err();
        assert!(e.to_string().contains("says 8 bytes, 4 are left"), "{e}");
        // An unknown format is an error, not a guess at its length.
        let e = cubin_registers(&cubin_with_info(&[7, 0x2f, 8, 0])).unwrap_err();
        assert!(e.to_string().contains("unknown attribute format 7"), "{e}");
        // Not a cubin.
        let x86 = crate::test_elf::build(elf::EM_X86_64, 3, None, &[]);
        assert!(cubin_registers(&x86)
            .unwrap_err()
            .to_string()
            .contains("not a cubin"));
    }

    #[test]
    fn arch_names() {
        let t = parse_arch("sm_90a").unwrap();
        assert_eq!(t.sm, Sm { major: 9, minor: 0 });
        assert!(t.arch_specific);
        assert_eq!(
            parse_arch("sm_103").unwrap().sm,
            Sm {
                major: 10,
                minor: 3
            }
        );
        assert_eq!(parse_arch("compute_80").unwrap().to_string(), "sm_80");
        assert!(parse_arch("gfx90a").is_none());
        assert!(parse_arch("sm_").is_none());
    }

    #[test]
    fn compatibility_rules() {
        let sm = |n| Sm::from_number(n);
        let t = |n| Target {
            sm: sm(n),
            arch_specific: false,
        };
        assert!(cubin_runs_on(t(80), sm(86)));
        assert!(!cubin_runs_on(t(86), sm(80)));
        assert!(!cubin_runs_on(t(80), sm(90)));
        assert!(ptx_runs_on(t(80), sm(90)));
        assert!(!ptx_runs_on(t(90), sm(80)));
        let a = Target {
            sm: sm(90),
            arch_specific: true,
        };
        assert!(ptx_runs_on(a, sm(90)) && !ptx_runs_on(a, sm(100)));
    }

    #[test]
    fn ptx_directives() {
        let ptx = b"//\n// Generated\n//\n\n.version 7.8\n.target sm_80\n.address_size 64\n\n\
            .visible .global .align 4 .u32 counter;\n.global .align 1 .b8 buf[16] = {1};\n\
            .visible .entry saxpy(\n\t.param .u32 p0\n)\n{\n\tret;\n}\n\
            .visible .entry reduce(.param .u64 p)\n{\n.reg .b32 %r<2>;\n ret;\n}\n";
        assert_eq!(detect(ptx), Some(Kind::Ptx));
        let i = ptx_info(ptx).unwrap();
        assert_eq!(i.version, Some((7, 8)));
        assert_eq!(i.target.unwrap().to_string(), "sm_80");
        assert_eq!(i.address_size, Some(64));
        assert_eq!(i.entries, vec!["saxpy", "reduce"]);
        assert_eq!(i.globals, vec!["counter", "buf"]);
        assert!(!is_ptx(b"hello .version"));
        assert!(is_ptx(b"/* a\n b */ .version 8.0\n"));
        assert_eq!(detect(b"\x7fELF"), None);
    }

    #[test]
    fn fatbin_hostile_inputs_are_errors() {
        let mut f = FATBIN_MAGIC.to_le_bytes().to_vec();
        f.extend_from_slice(&[1, 0, 16, 0]);
        f.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(fatbin_entries(&f).is_err());
        assert!(fatbin_entries(&f[..10]).is_err());
        assert!(!fatbin_runs_on(&f, Sm::from_number(90)));
    }
}
