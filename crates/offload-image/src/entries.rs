//! The offload entry table of an ELF file, read from the file (not from a
//! loaded process), and which symbols a file exports.
//!
//! clang-22 collects one 56-byte `llvm::offloading::EntryTy` record per
//! kernel and `declare target` variable into the section
//! `llvm_offload_entries`, in host objects and executables and in the
//! device images alike. The pointer fields (address, name) are relocated:
//! in a linked file by dynamic relocations (`R_*_RELATIVE` with the target
//! in the addend), in a relocatable object by section relocations against
//! symbols. [`offload_entries`] applies them to recover each entry's name.
//!
//! The entry classes follow the runtime: an entry is a kernel when its size
//! is 0 and no special flag is set, a global when its size is non-zero
//! (OpenMP `libomptarget` and `crates/omptarget` decide the same way).

use std::collections::HashMap;

use object::elf::{FileHeader32, FileHeader64};
use object::read::elf::{Dyn, FileHeader, ProgramHeader, Rel, Rela, SectionHeader, Sym};
use object::{Endianness, SectionIndex, SymbolIndex};

use crate::elf::{class_of, parse_elf, SymbolKind};
use crate::{ImageError, Result};

/// Name of the section that holds the offload entries.
pub const ENTRIES_SECTION: &str = "llvm_offload_entries";
/// Size of one LLVM 20+ entry record.
pub const ENTRY_SIZE: usize = 56;

/// OpenMP entry flag: `declare target link` reference pointer.
pub const FLAG_LINK: u32 = 0x01;
/// OpenMP entry flag: `declare target indirect` function.
pub const FLAG_INDIRECT: u32 = 0x08;
/// OpenMP entry flag: the `requires` record.
pub const FLAG_REQUIRES: u32 = 0x10;
/// OpenMP entry flag: indirect vtable.
pub const FLAG_INDIRECT_VTABLE: u32 = 0x20;

/// What an entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryClass {
    /// A kernel (size 0, no special flag).
    Kernel,
    /// A global variable (size > 0), including `declare target link`
    /// reference pointers.
    Global,
    /// An indirectly callable function (or vtable).
    Indirect,
    /// The `requires` record.
    Requires,
}

impl EntryClass {
    /// `kernel`, `global`, `indirect` or `requires`.
    pub fn name(self) -> &'static str {
        match self {
            EntryClass::Kernel => "kernel",
            EntryClass::Global => "global",
            EntryClass::Indirect => "indirect",
            EntryClass::Requires => "requires",
        }
    }
}

/// One entry of an `llvm_offload_entries` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// The symbol name the runtime looks up in the device image (empty when
    /// the name pointer could not be resolved).
    pub name: String,
    /// Producer: 1 OpenMP, 2 CUDA, 4 HIP, 8 SYCL.
    pub kind: u16,
    /// Producer-specific flags.
    pub flags: u32,
    /// 0 for kernels, bytes for variables.
    pub size: u64,
    /// Producer-specific data (OpenMP: the requires mask).
    pub data: u64,
}

impl FileEntry {
    /// The entry's class, decided as the runtime decides it.
    pub fn class(&self) -> EntryClass {
        if self.flags & FLAG_REQUIRES != 0 {
            EntryClass::Requires
        } else if self.flags & (FLAG_INDIRECT | FLAG_INDIRECT_VTABLE) != 0 {
            EntryClass::Indirect
        } else if self.size == 0 {
            EntryClass::Kernel
        } else {
            EntryClass::Global
        }
    }
}

/// Where a resolved pointer field points.
enum Target {
    /// A virtual address of a linked file.
    Addr(u64),
    /// An offset into a section of a relocatable file.
    Section(SectionIndex, u64),
}

fn err(msg: impl Into<String>) -> ImageError {
    ImageError::Elf(msg.into())
}

fn read_u16(b: &[u8], off: usize, little: bool) -> u16 {
    let x = [b[off], b[off + 1]];
    if little {
        u16::from_le_bytes(x)
    } else {
        u16::from_be_bytes(x)
    }
}

fn read_u32(b: &[u8], off: usize, little: bool) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[off..off + 4]);
    if little {
        u32::from_le_bytes(x)
    } else {
        u32::from_be_bytes(x)
    }
}

fn read_u64(b: &[u8], off: usize, little: bool) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    if little {
        u64::from_le_bytes(x)
    } else {
        u64::from_be_bytes(x)
    }
}

/// The NUL-terminated string at the start of `b` (at most 4 KiB).
fn c_string(b: &[u8]) -> String {
    let b = &b[..b.len().min(4096)];
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn entries_impl<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<Vec<FileEntry>> {
    let p = parse_elf::<Elf>(data)?;
    let e = p.endian;
    let little = e == Endianness::Little;
    let relocatable = p.header.e_type(e) == object::elf::ET_REL;

    let mut found = None;
    for (i, sh) in p.sections.iter().enumerate() {
        let name = p
            .sections
            .section_name(e, sh)
            .map_err(|x| err(format!("section {i}: cannot read its name: {x}")))?;
        if name == ENTRIES_SECTION.as_bytes() {
            found = Some((i, sh));
            break;
        }
    }
    let Some((index, section)) = found else {
        return Ok(Vec::new());
    };
    if section.sh_type(e) == object::elf::SHT_NOBITS {
        return Err(err(format!(
            "{ENTRIES_SECTION} has no contents (SHT_NOBITS)"
        )));
    }
    let table = section
        .data(e, data)
        .map_err(|x| err(format!("{ENTRIES_SECTION}: {x}")))?;
    if table.len() % ENTRY_SIZE != 0 {
        return Err(err(format!(
            "{ENTRIES_SECTION} is {} bytes, not a multiple of the {ENTRY_SIZE}-byte entry",
            table.len()
        )));
    }
    let base: u64 = section.sh_addr(e).into();

    // Relocated pointer fields, by offset in the table.
    let mut relocated: HashMap<u64, Target> = HashMap::new();
    for sh in p.sections.iter() {
        let info = sh.sh_info(e) as usize;
        if relocatable && info != index {
            continue;
        }
        let mut add = |r_offset: u64, sym: u32, addend: Option<i64>, link: SectionIndex| {
            let offset = if relocatable {
                r_offset
            } else {
                match r_offset.checked_sub(base) {
                    Some(o) if o < table.len() as u64 => o,
                    _ => return Ok(()),
                }
            };
            if offset
                .checked_add(8)
                .is_none_or(|end| end > table.len() as u64)
            {
                return Ok(());
            }
            let implicit = || read_u64(table, offset as usize, little) as i64;
            let addend = addend.unwrap_or_else(implicit) as u64;
            let target = if sym == 0 {
                Target::Addr(addend)
            } else {
                let symbols = p
                    .sections
                    .symbol_table_by_index(e, data, link)
                    .map_err(|x| err(format!("relocation symbol table: {x}")))?;
                let s = symbols
                    .symbol(SymbolIndex(sym as usize))
                    .map_err(|x| err(format!("relocation symbol {sym}: {x}")))?;
                let value: u64 = s.st_value(e).into();
                let shndx = s.st_shndx(e);
                if relocatable {
                    if shndx == object::elf::SHN_UNDEF || shndx >= object::elf::SHN_LORESERVE {
                        return Ok(());
                    }
                    Target::Section(SectionIndex(shndx as usize), value.wrapping_add(addend))
                } else if shndx == object::elf::SHN_UNDEF {
                    return Ok(());
                } else {
                    Target::Addr(value.wrapping_add(addend))
                }
            };
            relocated.insert(offset, target);
            Ok::<(), ImageError>(())
        };
        if let Some((relas, link)) = sh.rela(e, data).map_err(|x| err(x.to_string()))? {
            let mips = p.header.is_mips64el(e);
            for r in relas {
                let addend: i64 = r.r_addend(e).into();
                add(r.r_offset(e).into(), r.r_sym(e, mips), Some(addend), link)?;
            }
        } else if let Some((rels, link)) = sh.rel(e, data).map_err(|x| err(x.to_string()))? {
            for r in rels {
                add(r.r_offset(e).into(), r.r_sym(e), None, link)?;
            }
        }
    }

    let string_at = |t: &Target| -> Option<String> {
        match *t {
            Target::Addr(addr) => p.sections.iter().find_map(|sh| {
                let start: u64 = sh.sh_addr(e).into();
                let size: u64 = sh.sh_size(e).into();
                let alloc = Into::<u64>::into(sh.sh_flags(e)) & u64::from(object::elf::SHF_ALLOC);
                if alloc == 0
                    || sh.sh_type(e) == object::elf::SHT_NOBITS
                    || addr < start
                    || addr - start >= size
                {
                    return None;
                }
                let bytes = sh.data(e, data).ok()?;
                bytes.get((addr - start) as usize..).map(c_string)
            }),
            Target::Section(index, offset) => {
                let sh = p.sections.section(index).ok()?;
                let bytes = sh.data(e, data).ok()?;
                bytes.get(usize::try_from(offset).ok()?..).map(c_string)
            }
        }
    };

    let mut out = Vec::with_capacity(table.len() / ENTRY_SIZE);
    for (n, rec) in table.chunks_exact(ENTRY_SIZE).enumerate() {
        let at = (n * ENTRY_SIZE) as u64;
        let reserved = read_u64(rec, 0, little);
        let version = read_u16(rec, 8, little);
        if reserved != 0 || version != 1 {
            return Err(err(format!(
                "{ENTRIES_SECTION} entry {n}: not an LLVM 20+ offload entry \
                 (reserved {reserved:#x}, version {version}; expected 0 and 1)"
            )));
        }
        let name_field = at + 24;
        let name = match relocated.get(&name_field) {
            Some(t) => string_at(t),
            None if relocatable => None,
            None => string_at(&Target::Addr(read_u64(rec, 24, little))),
        }
        .unwrap_or_default();
        out.push(FileEntry {
            name,
            kind: read_u16(rec, 10, little),
            flags: read_u32(rec, 12, little),
            size: read_u64(rec, 32, little),
            data: read_u64(rec, 40, little),
        });
    }
    Ok(out)
}

/// The entries of the file's `llvm_offload_entries` section, in table
/// order; empty when there is no such section (or the file is 32-bit).
pub fn offload_entries(bytes: &[u8]) -> Result<Vec<FileEntry>> {
    match class_of(bytes)? {
        // The 56-byte layout is that of 64-bit targets.
        32 => Ok(Vec::new()),
        _ => entries_impl::<FileHeader64<Endianness>>(bytes),
    }
}

fn program_impl<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<bool> {
    let p = parse_elf::<Elf>(data)?;
    let e = p.endian;
    match p.header.e_type(e) {
        object::elf::ET_EXEC => return Ok(true),
        object::elf::ET_DYN => {}
        _ => return Ok(false),
    }
    let phdrs = p
        .header
        .program_headers(e, data)
        .map_err(|x| err(x.to_string()))?;
    if phdrs
        .iter()
        .any(|ph| ph.p_type(e) == object::elf::PT_INTERP)
    {
        return Ok(true);
    }
    if let Some((dyns, _)) = p
        .sections
        .dynamic(e, data)
        .map_err(|x| err(x.to_string()))?
    {
        for d in dyns {
            let tag: u64 = d.d_tag(e).into();
            let val: u64 = d.d_val(e).into();
            if tag == u64::from(object::elf::DT_FLAGS_1)
                && val & u64::from(object::elf::DF_1_PIE) != 0
            {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Whether the ELF file is a program (an executable or a position-independent
/// executable: `ET_EXEC`, a `PT_INTERP` segment or `DF_1_PIE`), not a shared
/// object or a relocatable object. A program is never a device image.
pub fn is_program(bytes: &[u8]) -> Result<bool> {
    match class_of(bytes)? {
        32 => program_impl::<FileHeader32<Endianness>>(bytes),
        _ => program_impl::<FileHeader64<Endianness>>(bytes),
    }
}

fn exported_impl<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> Result<Vec<crate::elf::Symbol>> {
    let p = parse_elf::<Elf>(data)?;
    let e = p.endian;
    let dynamic = p
        .sections
        .symbols(e, data, object::elf::SHT_DYNSYM)
        .map_err(|x| err(x.to_string()))?;
    let table = if dynamic.is_empty() {
        if p.header.e_type(e) != object::elf::ET_REL {
            return Ok(Vec::new());
        }
        p.sections
            .symbols(e, data, object::elf::SHT_SYMTAB)
            .map_err(|x| err(x.to_string()))?
    } else {
        dynamic
    };
    let strings = table.strings();
    let mut out: Vec<crate::elf::Symbol> = Vec::new();
    for sym in table.iter() {
        if sym.st_shndx(e) == object::elf::SHN_UNDEF {
            continue;
        }
        let bind = sym.st_bind();
        if !matches!(
            bind,
            object::elf::STB_GLOBAL | object::elf::STB_WEAK | object::elf::STB_GNU_UNIQUE
        ) {
            continue;
        }
        if !matches!(
            sym.st_visibility(),
            object::elf::STV_DEFAULT | object::elf::STV_PROTECTED
        ) {
            continue;
        }
        let kind = match sym.st_type() {
            object::elf::STT_FUNC | object::elf::STT_GNU_IFUNC => SymbolKind::Function,
            object::elf::STT_OBJECT | object::elf::STT_TLS | object::elf::STT_COMMON => {
                SymbolKind::Object
            }
            _ => continue,
        };
        let name = sym.name(e, strings).map_err(|x| err(x.to_string()))?;
        if name.is_empty() {
            continue;
        }
        let name = String::from_utf8_lossy(name).into_owned();
        if is_reserved_symbol(&name) || out.iter().any(|s| s.name == name && s.kind == kind) {
            continue;
        }
        out.push(crate::elf::Symbol {
            name,
            kind,
            size: sym.st_size(e).into(),
        });
    }
    Ok(out)
}

/// The functions and data objects the file exports: what `dlsym` finds in a
/// shared object (defined `.dynsym` symbols with global, weak or unique
/// binding and default or protected visibility), or for a relocatable
/// object the same selection from `.symtab`. Names the toolchain reserves
/// ([`is_reserved_symbol`]) are left out.
pub fn exported_symbols(bytes: &[u8]) -> Result<Vec<crate::elf::Symbol>> {
    match class_of(bytes)? {
        32 => exported_impl::<FileHeader32<Endianness>>(bytes),
        _ => exported_impl::<FileHeader64<Endianness>>(bytes),
    }
}

/// Whether `name` is a symbol the linker, the C runtime start files or the
/// compiler define for their own use (`_end`, `__bss_start`, `_DYNAMIC`,
/// `__dso_handle`, `_init`, `__start_SECTION`, `.offloading.entry.*`, ...),
/// not a kernel or a variable of the program.
pub fn is_reserved_symbol(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "_init",
        "_fini",
        "_start",
        "_end",
        "end",
        "_edata",
        "edata",
        "_etext",
        "etext",
        "__etext",
        "__bss_start",
        "__bss_start__",
        "__bss_end__",
        "_bss_end__",
        "__end__",
        "__data_start",
        "data_start",
        "__dso_handle",
        "_DYNAMIC",
        "_GLOBAL_OFFSET_TABLE_",
        "_PROCEDURE_LINKAGE_TABLE_",
        "__TMC_END__",
        "__FRAME_END__",
        "__GNU_EH_FRAME_HDR",
        "__ehdr_start",
        "__executable_start",
        "_IO_stdin_used",
        "__abi_tag",
        "__libc_csu_init",
        "__libc_csu_fini",
        "__init_array_start",
        "__init_array_end",
        "__fini_array_start",
        "__fini_array_end",
        "__preinit_array_start",
        "__preinit_array_end",
        "__do_global_dtors_aux_fini_array_entry",
        "__frame_dummy_init_array_entry",
        "__gmon_start__",
        "_ITM_registerTMCloneTable",
        "_ITM_deregisterTMCloneTable",
        "__cxa_finalize",
    ];
    name.starts_with('.')
        || name.starts_with("__start_")
        || name.starts_with("__stop_")
        || RESERVED.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let e = |flags, size| FileEntry {
            name: "x".into(),
            kind: 1,
            flags,
            size,
            data: 0,
        };
        assert_eq!(e(0, 0).class(), EntryClass::Kernel);
        assert_eq!(e(0, 4).class(), EntryClass::Global);
        assert_eq!(e(FLAG_LINK, 8).class(), EntryClass::Global);
        assert_eq!(e(FLAG_INDIRECT, 8).class(), EntryClass::Indirect);
        assert_eq!(e(FLAG_REQUIRES, 0).class(), EntryClass::Requires);
    }

    #[test]
    fn reserved_names() {
        for n in [
            "__bss_start",
            "_end",
            "_edata",
            "__dso_handle",
            "_DYNAMIC",
            "_GLOBAL_OFFSET_TABLE_",
            ".offloading.entry.k",
            "__start_llvm_offload_entries",
        ] {
            assert!(is_reserved_symbol(n), "{n}");
        }
        for n in ["saxpy", "counter", "__omp_offloading_fe00_1_main_l5"] {
            assert!(!is_reserved_symbol(n), "{n}");
        }
    }

    #[test]
    fn files_without_tables() {
        let e = crate::test_elf::build(crate::elf::EM_X86_64, 3, None, &[("k", true, 4)]);
        assert_eq!(offload_entries(&e).unwrap(), vec![]);
        assert!(!is_program(&e).unwrap());
        assert!(offload_entries(b"junk").is_err());
        let exec = crate::test_elf::build(crate::elf::EM_X86_64, 2, None, &[]);
        assert!(is_program(&exec).unwrap());
    }
}
