//! What the offload runtime needs to know about an ELF file.
//!
//! Parsing uses the `object` crate's bounds-checked readers (with its
//! `unaligned` feature, so images nested at any address are fine). Every
//! function first validates the file: the header, the program header table
//! and its segments, and the section header table and every section's file
//! range must lie inside the buffer, so a truncated file is an error.

use std::collections::{HashMap, HashSet};

use object::elf::{FileHeader32, FileHeader64};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym};
use object::Endianness;

use crate::{hex_prefix, ImageError, Result};

/// `SHT_LLVM_OFFLOADING`: the section type of `.llvm.offloading`.
pub const SHT_LLVM_OFFLOADING: u32 = 0x6fff_4c0b;
/// The name of the section that holds embedded `OffloadBinary`s.
pub const OFFLOADING_SECTION: &str = ".llvm.offloading";

/// `e_machine` of x86-64.
pub const EM_X86_64: u16 = 62;
/// `e_machine` of AArch64.
pub const EM_AARCH64: u16 = 183;
/// `e_machine` of 64-bit PowerPC.
pub const EM_PPC64: u16 = 21;
/// `e_machine` of AMD GPUs.
pub const EM_AMDGPU: u16 = 224;
/// `e_machine` of NVIDIA CUDA.
pub const EM_CUDA: u16 = 190;
/// `e_machine` of RISC-V.
pub const EM_RISCV: u16 = 243;

/// The ELF file type (`e_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElfType {
    /// `ET_REL`: a relocatable object.
    Relocatable,
    /// `ET_EXEC`: an executable.
    Executable,
    /// `ET_DYN`: a shared object (or position-independent executable).
    SharedObject,
    /// `ET_CORE`: a core dump.
    Core,
    /// Any other value.
    Other(u16),
}

impl ElfType {
    /// Decodes `e_type`.
    pub fn from_u16(v: u16) -> Self {
        match v {
            1 => ElfType::Relocatable,
            2 => ElfType::Executable,
            3 => ElfType::SharedObject,
            4 => ElfType::Core,
            n => ElfType::Other(n),
        }
    }
}

/// Header facts about an ELF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ElfInfo {
    /// 32 or 64.
    pub class: u8,
    /// Byte order.
    pub little_endian: bool,
    /// `e_machine`.
    pub machine: u16,
    /// A short name for `e_machine` (`x86_64`, `aarch64`, `amdgpu`, `cuda`,
    /// ...; `unknown` when not known).
    pub machine_name: &'static str,
    /// `e_type`.
    pub elf_type: ElfType,
    /// `e_flags` (for AMD GPUs this encodes the processor).
    pub flags: u32,
    /// The target triple guessed from machine, class and byte order.
    pub triple: Option<&'static str>,
}

/// The short name of an `e_machine` value.
pub fn machine_name(machine: u16) -> &'static str {
    match machine {
        0 => "none",
        2 => "sparc",
        3 => "i386",
        8 => "mips",
        20 => "ppc",
        21 => "ppc64",
        22 => "s390",
        40 => "arm",
        43 => "sparcv9",
        62 => "x86_64",
        183 => "aarch64",
        190 => "cuda",
        224 => "amdgpu",
        243 => "riscv",
        247 => "bpf",
        258 => "loongarch",
        _ => "unknown",
    }
}

/// The target triple an image for `machine` with the given class and byte
/// order most likely has.
pub fn triple_for(machine: u16, class: u8, little_endian: bool) -> Option<&'static str> {
    let is64 = class == 64;
    Some(match (machine, is64, little_endian) {
        (3, false, true) => "i386-unknown-linux-gnu",
        (62, true, true) => "x86_64-unknown-linux-gnu",
        (62, false, true) => "x86_64-unknown-linux-gnux32",
        (183, true, true) => "aarch64-unknown-linux-gnu",
        (183, true, false) => "aarch64_be-unknown-linux-gnu",
        (21, true, true) => "powerpc64le-unknown-linux-gnu",
        (21, true, false) => "powerpc64-unknown-linux-gnu",
        (20, false, false) => "powerpc-unknown-linux-gnu",
        (22, true, false) => "s390x-ibm-linux",
        (224, true, true) => "amdgcn-amd-amdhsa",
        (190, true, true) => "nvptx64-nvidia-cuda",
        (190, false, true) => "nvptx-nvidia-cuda",
        (243, true, true) => "riscv64-unknown-linux-gnu",
        (243, false, true) => "riscv32-unknown-linux-gnu",
        (258, true, true) => "loongarch64-unknown-linux-gnu",
        _ => return None,
    })
}

/// What kind of thing a symbol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymbolKind {
    /// `STT_FUNC` (or `STT_GNU_IFUNC`).
    Function,
    /// `STT_OBJECT`: a data object.
    Object,
}

/// A defined symbol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// The name (invalid UTF-8 is replaced by U+FFFD).
    pub name: String,
    /// Function or data object.
    pub kind: SymbolKind,
    /// `st_size`.
    pub size: u64,
}

fn elf_err(e: object::read::Error) -> ImageError {
    ImageError::Elf(e.to_string())
}

/// The class byte of the identification, after checking the magic.
pub(crate) fn class_of(bytes: &[u8]) -> Result<u8> {
    if bytes.get(..4) != Some(&crate::ELF_MAGIC[..]) {
        return Err(ImageError::NotElf {
            found: hex_prefix(bytes),
        });
    }
    match bytes.get(4) {
        Some(1) => Ok(32),
        Some(2) => Ok(64),
        Some(c) => Err(ImageError::Elf(format!(
            "invalid class {c} in e_ident[EI_CLASS] at offset 0x4 (expected 1 or 2)"
        ))),
        None => Err(ImageError::Truncated {
            what: "ELF identification",
            offset: 0,
            needed: 16,
            available: bytes.len() as u64,
        }),
    }
}

/// A parsed and validated ELF file.
pub(crate) struct Parsed<'data, Elf: FileHeader> {
    pub(crate) header: &'data Elf,
    pub(crate) endian: Endianness,
    pub(crate) sections: SectionTable<'data, Elf, &'data [u8]>,
}

pub(crate) fn parse_elf<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> Result<Parsed<'_, Elf>> {
    if data.len() < std::mem::size_of::<Elf>() {
        return Err(ImageError::Truncated {
            what: "ELF header",
            offset: 0,
            needed: std::mem::size_of::<Elf>() as u64,
            available: data.len() as u64,
        });
    }
    let header = Elf::parse(data).map_err(elf_err)?;
    let endian = header.endian().map_err(elf_err)?;

    let phdrs = header.program_headers(endian, data).map_err(|e| {
        ImageError::Elf(format!(
            "{e} (e_phoff {:#x}, e_phnum {}, file size {:#x})",
            header.e_phoff(endian).into(),
            header.e_phnum(endian),
            data.len()
        ))
    })?;
    for (i, ph) in phdrs.iter().enumerate() {
        if ph.data(endian, data).is_err() {
            let (off, size) = ph.file_range(endian);
            return Err(ImageError::Elf(format!(
                "program header {i}: segment at {off:#x} with file size {size:#x} extends past the end of the file ({:#x} bytes)",
                data.len()
            )));
        }
    }

    let sections = header.sections(endian, data).map_err(|e| {
        ImageError::Elf(format!(
            "{e} (e_shoff {:#x}, e_shnum {}, file size {:#x})",
            header.e_shoff(endian).into(),
            header.e_shnum(endian),
            data.len()
        ))
    })?;
    for (i, sh) in sections.iter().enumerate() {
        if sh.data(endian, data).is_err() {
            let (off, size) = sh.file_range(endian).unwrap_or((0, 0));
            return Err(ImageError::Elf(format!(
                "section {i}: data at {off:#x} with size {size:#x} extends past the end of the file ({:#x} bytes)",
                data.len()
            )));
        }
    }
    Ok(Parsed {
        header,
        endian,
        sections,
    })
}

fn info_impl<Elf: FileHeader<Endian = Endianness>>(data: &[u8], class: u8) -> Result<ElfInfo> {
    let p = parse_elf::<Elf>(data)?;
    let machine = p.header.e_machine(p.endian);
    let little_endian = p.endian == Endianness::Little;
    Ok(ElfInfo {
        class,
        little_endian,
        machine,
        machine_name: machine_name(machine),
        elf_type: ElfType::from_u16(p.header.e_type(p.endian)),
        flags: p.header.e_flags(p.endian),
        triple: triple_for(machine, class, little_endian),
    })
}

/// Reads and validates the ELF header, program headers and section headers.
pub fn info(bytes: &[u8]) -> Result<ElfInfo> {
    match class_of(bytes)? {
        32 => info_impl::<FileHeader32<Endianness>>(bytes, 32),
        _ => info_impl::<FileHeader64<Endianness>>(bytes, 64),
    }
}

/// Calls `f(name, kind, size)` for each defined, named function or data
/// object of `.symtab` and then `.dynsym`, in table order.
fn visit_defined<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    mut f: impl FnMut(&[u8], SymbolKind, u64),
) -> Result<()> {
    let p = parse_elf::<Elf>(data)?;
    for sh_type in [object::elf::SHT_SYMTAB, object::elf::SHT_DYNSYM] {
        let table = p
            .sections
            .symbols(p.endian, data, sh_type)
            .map_err(elf_err)?;
        let strings = table.strings();
        for sym in table.iter() {
            if sym.st_shndx(p.endian) == object::elf::SHN_UNDEF {
                continue;
            }
            let kind = match sym.st_type() {
                object::elf::STT_FUNC | object::elf::STT_GNU_IFUNC => SymbolKind::Function,
                object::elf::STT_OBJECT => SymbolKind::Object,
                _ => continue,
            };
            let name = sym.name(p.endian, strings).map_err(elf_err)?;
            if !name.is_empty() {
                f(name, kind, sym.st_size(p.endian).into());
            }
        }
    }
    Ok(())
}

fn symbols_impl<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<Vec<Symbol>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    visit_defined::<Elf>(data, |name, kind, size| {
        let name = String::from_utf8_lossy(name).into_owned();
        if seen.insert((name.clone(), kind)) {
            out.push(Symbol { name, kind, size });
        }
    })?;
    Ok(out)
}

fn symtab_names_impl<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<Vec<String>> {
    let p = parse_elf::<Elf>(data)?;
    let table = p
        .sections
        .symbols(p.endian, data, object::elf::SHT_SYMTAB)
        .map_err(elf_err)?;
    let strings = table.strings();
    table
        .iter()
        .map(|sym| {
            let name = sym.name(p.endian, strings).map_err(elf_err)?;
            Ok(String::from_utf8_lossy(name).into_owned())
        })
        .collect()
}

/// The names of `.symtab`'s symbols by index (index 0 is the null symbol;
/// empty without a symbol table): what sections that refer to symbols by
/// index, like a cubin's `.nv.info`, need.
pub fn symtab_names(bytes: &[u8]) -> Result<Vec<String>> {
    match class_of(bytes)? {
        32 => symtab_names_impl::<FileHeader32<Endianness>>(bytes),
        _ => symtab_names_impl::<FileHeader64<Endianness>>(bytes),
    }
}

/// The defined function and data-object symbols of `.symtab` and `.dynsym`,
/// in table order (`.symtab` first), each name/kind pair once.
pub fn defined_symbols(bytes: &[u8]) -> Result<Vec<Symbol>> {
    match class_of(bytes)? {
        32 => symbols_impl::<FileHeader32<Endianness>>(bytes),
        _ => symbols_impl::<FileHeader64<Endianness>>(bytes),
    }
}

/// The sizes of the defined data objects, by name (the first definition
/// in [`defined_symbols`] order wins): what a loader needs besides the
/// addresses `dlsym` gives. Functions are skipped without copying names.
pub fn object_sizes(bytes: &[u8]) -> Result<HashMap<String, u64>> {
    let mut out = HashMap::new();
    let mut add = |name: &[u8], kind, size| {
        if kind == SymbolKind::Object && !out.contains_key(name_str(name).as_ref()) {
            out.insert(name_str(name).into_owned(), size);
        }
    };
    match class_of(bytes)? {
        32 => visit_defined::<FileHeader32<Endianness>>(bytes, &mut add)?,
        _ => visit_defined::<FileHeader64<Endianness>>(bytes, &mut add)?,
    }
    Ok(out)
}

fn name_str(name: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(name)
}

fn offloading_impl<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<Vec<&[u8]>> {
    let p = parse_elf::<Elf>(data)?;
    let mut out = Vec::new();
    for (i, sh) in p.sections.iter().enumerate() {
        let is_offloading = sh.sh_type(p.endian) == SHT_LLVM_OFFLOADING || {
            let name = p
                .sections
                .section_name(p.endian, sh)
                .map_err(|e| ImageError::Elf(format!("section {i}: cannot read its name: {e}")))?;
            name == OFFLOADING_SECTION.as_bytes()
        };
        if is_offloading {
            // Validated in `parse_elf`.
            out.push(sh.data(p.endian, data).map_err(elf_err)?);
        }
    }
    Ok(out)
}

/// The contents of every `.llvm.offloading` section (by type
/// `SHT_LLVM_OFFLOADING` or by name), in section order. Each usually holds
/// one or more concatenated `OffloadBinary`s.
pub fn offloading_sections(bytes: &[u8]) -> Result<Vec<&[u8]>> {
    match class_of(bytes)? {
        32 => offloading_impl::<FileHeader32<Endianness>>(bytes),
        _ => offloading_impl::<FileHeader64<Endianness>>(bytes),
    }
}

fn named_impl<'a, Elf: FileHeader<Endian = Endianness>>(
    data: &'a [u8],
    wanted: &str,
) -> Result<Vec<&'a [u8]>> {
    let p = parse_elf::<Elf>(data)?;
    let mut out = Vec::new();
    for (i, sh) in p.sections.iter().enumerate() {
        let name = p
            .sections
            .section_name(p.endian, sh)
            .map_err(|e| ImageError::Elf(format!("section {i}: cannot read its name: {e}")))?;
        if name == wanted.as_bytes() && sh.sh_type(p.endian) != object::elf::SHT_NOBITS {
            out.push(sh.data(p.endian, data).map_err(elf_err)?);
        }
    }
    Ok(out)
}

/// The contents of every section called `name`, in section order.
pub fn sections_named<'a>(bytes: &'a [u8], name: &str) -> Result<Vec<&'a [u8]>> {
    match class_of(bytes)? {
        32 => named_impl::<FileHeader32<Endianness>>(bytes, name),
        _ => named_impl::<FileHeader64<Endianness>>(bytes, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_elf;

    #[test]
    fn info_of_built_elf() {
        let e = test_elf::build(EM_AMDGPU, 3, None, &[]);
        let i = info(&e).unwrap();
        assert_eq!(i.class, 64);
        assert!(i.little_endian);
        assert_eq!(i.machine, 224);
        assert_eq!(i.machine_name, "amdgpu");
        assert_eq!(i.elf_type, ElfType::SharedObject);
        assert_eq!(i.triple, Some("amdgcn-amd-amdhsa"));
    }

    #[test]
    fn symbols_and_sections() {
        let e = test_elf::build(
            EM_X86_64,
            1,
            Some(b"payload!"),
            &[
                ("kernel", true, 16),
                ("table", false, 8),
                ("kernel", true, 16),
            ],
        );
        let syms = defined_symbols(&e).unwrap();
        assert_eq!(
            syms,
            vec![
                Symbol {
                    name: "kernel".into(),
                    kind: SymbolKind::Function,
                    size: 16
                },
                Symbol {
                    name: "table".into(),
                    kind: SymbolKind::Object,
                    size: 8
                },
            ]
        );
        assert_eq!(offloading_sections(&e).unwrap(), vec![&b"payload!"[..]]);
        let plain = test_elf::build(EM_X86_64, 1, None, &[]);
        // Found by name even with another section type.
        assert_eq!(offloading_sections(&plain).unwrap(), vec![&b""[..]]);
    }

    #[test]
    fn class32_and_big_endian() {
        let i = info(&test_elf::header32(EM_PPC64, 2, false)).unwrap();
        assert_eq!(
            (i.class, i.little_endian, i.machine_name),
            (32, false, "ppc64")
        );
        assert_eq!(i.elf_type, ElfType::Executable);
        assert_eq!(i.triple, None); // ppc64 is a 64-bit class target
        let i = info(&test_elf::header32(EM_RISCV, 1, true)).unwrap();
        assert_eq!(i.triple, Some("riscv32-unknown-linux-gnu"));
        assert!(defined_symbols(&test_elf::header32(3, 1, true))
            .unwrap()
            .is_empty());
        let mut bad = test_elf::header32(3, 1, true);
        bad[4] = 7;
        assert!(matches!(info(&bad), Err(ImageError::Elf(_))));
    }

    #[test]
    fn triples() {
        assert_eq!(
            triple_for(21, 64, true),
            Some("powerpc64le-unknown-linux-gnu")
        );
        assert_eq!(triple_for(190, 64, true), Some("nvptx64-nvidia-cuda"));
        assert_eq!(triple_for(183, 64, true), Some("aarch64-unknown-linux-gnu"));
        assert_eq!(triple_for(9999, 64, true), None);
    }

    #[test]
    fn truncation_is_an_error() {
        let e = test_elf::build(EM_X86_64, 1, Some(b"payload!"), &[("f", true, 1)]);
        for len in 0..e.len() {
            let cut = &e[..len];
            assert!(info(cut).is_err(), "len {len}");
            assert!(defined_symbols(cut).is_err(), "len {len}");
            assert!(offloading_sections(cut).is_err(), "len {len}");
        }
        assert!(matches!(info(b"nope"), Err(ImageError::NotElf { .. })));
    }
}
