//! Structural validation of x86-64 shared objects before they reach the
//! dynamic loader.
//!
//! glibc's `ld.so` trusts the files it maps: a corrupt program header, hash
//! table or relocation can make `dlopen` assert (`Inconsistency detected by
//! ld.so`, exit 127), read or write out of bounds, loop forever, or make the
//! image's own start-up code jump to garbage. [`x86_64_shared_object`] reads
//! the file the way `ld.so` will (program headers, then the dynamic section
//! and everything it points to) and refuses, with an error naming the
//! offending field and value, anything `ld.so` would assert on, crash on, or
//! turn into a call of a bad address. Every image clang-22 links (GNU ld or
//! lld, `-shared -fPIC`, OpenMP `-fopenmp-targets=x86_64-unknown-linux-gnu`
//! device images, with or without `-z pack-relative-relocs`) passes.
//!
//! # Rules
//!
//! * **ELF header**: 64-bit, little-endian, `EV_CURRENT`, OS ABI System V or
//!   GNU, `ET_DYN`, `EM_X86_64`; `e_phentsize` 56, `1..=`[`MAX_PHNUM`] program
//!   headers inside the file; if there are section headers, `e_shentsize` 64,
//!   the table inside the file and `e_shstrndx` in range.
//! * **`PT_LOAD`**: non-empty, `p_filesz <= p_memsz`, file range inside the
//!   file, `p_align` 0, 1 or a power of two up to 1 GiB, `p_vaddr ≡ p_offset`
//!   modulo the page size and modulo `p_align`, end below 2^47; segments in
//!   ascending address order, no two sharing a page of memory or a byte of
//!   the file.
//! * **Other program headers**: exactly one `PT_DYNAMIC`, non-empty, inside
//!   the file-backed part of a readable `PT_LOAD` at the matching file
//!   offset; at most one `PT_TLS` (`p_filesz <= p_memsz`, aligned, its
//!   initialisation image inside a `PT_LOAD`), `PT_GNU_RELRO` (inside one
//!   `PT_LOAD`) and `PT_PHDR` (describing the real program header table);
//!   `PT_GNU_PROPERTY` and `PT_GNU_EH_FRAME` inside a readable `PT_LOAD`
//!   (the property notes well-formed); `PT_NOTE` and `PT_INTERP` inside the
//!   file.
//! * **Dynamic section**: a `DT_NULL` before the end of `PT_DYNAMIC`; no
//!   duplicate single-valued tags; `DT_STRTAB`, `DT_STRSZ`, `DT_SYMTAB` and
//!   `DT_GNU_HASH` or `DT_HASH` present; no `DT_REL`, `DT_TEXTREL` or
//!   `DF_TEXTREL`; the companions `ld.so` dereferences without checking
//!   present (`DT_RELA` with `DT_RELASZ` and `DT_RELAENT` = 24, `DT_JMPREL`
//!   with `DT_PLTRELSZ` and `DT_PLTREL` = `DT_RELA`, `DT_RELR` with
//!   `DT_RELRSZ` and `DT_RELRENT` = 8, each `*_ARRAY` with its `*_ARRAYSZ`,
//!   `DT_VERNEED`/`DT_VERDEF` with their `*NUM` and `DT_VERSYM`); `DT_SYMENT`
//!   24 if present; every address-valued tag pointing, with its size, into
//!   the file-backed part of a readable `PT_LOAD`; `DT_PLTGOT` and
//!   `DT_TLSDESC_GOT` into writable memory; string-valued tags (`DT_NEEDED`,
//!   `DT_SONAME`, `DT_RUNPATH`, ...) NUL-terminated inside the string table.
//! * **Hash tables**: `DT_GNU_HASH` with a power-of-two Bloom filter, bucket
//!   indexes at or above `symoffset` and chains that end inside the file;
//!   `DT_HASH` with entries below `nchain` and acyclic, disjoint chains. The
//!   symbol count comes from them.
//! * **Symbols**: every `.dynsym` entry with its name inside the string
//!   table, a known binding and type, a section index in range (when there
//!   are section headers); defined functions inside an executable segment,
//!   defined objects inside a `PT_LOAD`, TLS symbols inside `PT_TLS`.
//! * **Versions**: `DT_VERNEED` entries of version 1 naming a `DT_NEEDED`
//!   library (glibc asserts otherwise), `vn_cnt >= 1`, `vna_other >= 2`,
//!   `vn_next`/`vna_next` chains inside the file and ending (next = 0)
//!   exactly after `DT_VERNEEDNUM`/`vn_cnt` entries; the same for
//!   `DT_VERDEF`; every `DT_VERSYM` index below the number of versions.
//! * **Relocations** (`DT_RELA`, `DT_JMPREL` as `ld.so` splits or merges
//!   them, `DT_RELR`): types from the set x86-64 `ld.so` applies (no
//!   `R_X86_64_COPY`); symbol index below the symbol count; `GLOB_DAT`,
//!   `JUMP_SLOT` and `SIZE*` name a symbol; a referenced undefined symbol is
//!   global or weak with default visibility (otherwise `ld.so` binds it to
//!   the load address); the first `DT_RELACOUNT` entries are
//!   `R_X86_64_RELATIVE`; every write lies in writable loaded memory and
//!   overlaps neither another relocation's write nor anything `ld.so` reads
//!   (dynamic section, symbol, string, hash, version and relocation tables);
//!   an `R_X86_64_IRELATIVE` resolver lies in executable code.
//! * **PLT GOT**: the words the `DT_JMPREL` entries fill, right after the
//!   three reserved words at `DT_PLTGOT`, are all relocated, and
//!   `R_X86_64_JUMP_SLOT` writes only there; with section headers, every
//!   later word of the section at `DT_PLTGOT` that holds a non-zero
//!   link-time value (a lazy-binding address) is relocated.
//! * **Code run by `dlopen`/`dlclose`**: `DT_INIT`, `DT_FINI` and every
//!   entry of `DT_INIT_ARRAY`, `DT_FINI_ARRAY`, `DT_PREINIT_ARRAY` (each
//!   entry relocated by exactly one relocation: its value as the loader will
//!   compute it) lie in the file-backed part of an executable segment.
//!   With section headers, `DT_INIT` and `DT_FINI` must be the start of an
//!   executable section (`.init`, `.fini`: `-Wl,-init=` elsewhere is
//!   refused); with a `.symtab`, array entries must be the address of a
//!   function symbol or the start of an executable section.
//! * **Section headers** (when present): every allocated section lies in a
//!   `PT_LOAD` at the file offset that segment maps it from, and
//!   `PT_GNU_RELRO`, rounded to pages as `ld.so` protects it, covers no
//!   writable section that starts below it.
//!
//! Limits: this is a structural check. It cannot prove that machine code is
//! sane: a stripped image (no `.symtab`) is only checked to start its
//! initialisers inside executable code, and corrupt code or data the image's
//! own constructors use is not detected.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Display;

use crate::{ImageError, Result};

/// The most program headers accepted. `ld.so` copies them, and one record
/// per segment, onto the stack.
pub const MAX_PHNUM: u16 = 512;

const PAGE: u64 = 4096;
const ADDR_LIMIT: u64 = 1 << 47;
const MAX_ALIGN: u64 = 1 << 30;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
const PT_PHDR: u32 = 6;
const PT_TLS: u32 = 7;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const PT_GNU_PROPERTY: u32 = 0x6474_e553;

const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;

const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_PLTRELSZ: u64 = 2;
const DT_PLTGOT: u64 = 3;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_RELA: u64 = 7;
const DT_RELASZ: u64 = 8;
const DT_RELAENT: u64 = 9;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const DT_INIT: u64 = 12;
const DT_FINI: u64 = 13;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_REL: u64 = 17;
const DT_RELSZ: u64 = 18;
const DT_RELENT: u64 = 19;
const DT_PLTREL: u64 = 20;
const DT_TEXTREL: u64 = 22;
const DT_JMPREL: u64 = 23;
const DT_INIT_ARRAY: u64 = 25;
const DT_FINI_ARRAY: u64 = 26;
const DT_INIT_ARRAYSZ: u64 = 27;
const DT_FINI_ARRAYSZ: u64 = 28;
const DT_RUNPATH: u64 = 29;
const DT_FLAGS: u64 = 30;
const DT_PREINIT_ARRAY: u64 = 32;
const DT_PREINIT_ARRAYSZ: u64 = 33;
const DT_RELRSZ: u64 = 35;
const DT_RELR: u64 = 36;
const DT_RELRENT: u64 = 37;
const DT_GNU_HASH: u64 = 0x6fff_fef5;
const DT_TLSDESC_PLT: u64 = 0x6fff_fef6;
const DT_TLSDESC_GOT: u64 = 0x6fff_fef7;
const DT_CONFIG: u64 = 0x6fff_fefa;
const DT_DEPAUDIT: u64 = 0x6fff_fefb;
const DT_AUDIT: u64 = 0x6fff_fefc;
const DT_VERSYM: u64 = 0x6fff_fff0;
const DT_RELACOUNT: u64 = 0x6fff_fff9;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
const DF_1_NODELETE: u64 = 0x8;
const STB_GNU_UNIQUE: u8 = 10;
const DT_VERDEF: u64 = 0x6fff_fffc;
const DT_VERDEFNUM: u64 = 0x6fff_fffd;
const DT_VERNEED: u64 = 0x6fff_fffe;
const DT_VERNEEDNUM: u64 = 0x6fff_ffff;
const DT_AUXILIARY: u64 = 0x7fff_fffd;
const DT_FILTER: u64 = 0x7fff_ffff;

const DF_TEXTREL: u64 = 4;

const R_NONE: u32 = 0;
const R_64: u32 = 1;
const R_PC32: u32 = 2;
const R_COPY: u32 = 5;
const R_GLOB_DAT: u32 = 6;
const R_JUMP_SLOT: u32 = 7;
const R_RELATIVE: u32 = 8;
const R_32: u32 = 10;
const R_DTPMOD64: u32 = 16;
const R_DTPOFF64: u32 = 17;
const R_TPOFF64: u32 = 18;
const R_SIZE32: u32 = 32;
const R_SIZE64: u32 = 33;
const R_TLSDESC: u32 = 36;
const R_IRELATIVE: u32 = 37;

const SHN_UNDEF: u16 = 0;
const SHN_LORESERVE: u16 = 0xff00;
const SHN_ABS: u16 = 0xfff1;
const SHN_COMMON: u16 = 0xfff2;

const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
const STT_TLS: u8 = 6;
const STT_GNU_IFUNC: u8 = 10;

const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;
const SHF_TLS: u64 = 0x400;

/// What [`x86_64_shared_object`] learnt about an image it accepted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checked {
    /// The `DT_NEEDED` libraries, in order (invalid UTF-8 replaced).
    pub needed: Vec<String>,
    /// Entries of `.dynsym`, as the hash tables count them.
    pub symbols: u64,
    /// Dynamic relocations (`DT_RELA`, `DT_JMPREL`, and words `DT_RELR`
    /// relocates).
    pub relocations: u64,
    /// Functions `dlopen` and `dlclose` call (`DT_INIT`, `DT_FINI`, array
    /// entries).
    pub init_fini_calls: u64,
    /// Whether a `.symtab` allowed checking that they are function entries.
    pub entry_points_checked: bool,
    /// Whether `dlclose` leaves the image loaded: it is marked
    /// `DF_1_NODELETE`, or defines `STB_GNU_UNIQUE` symbols (which glibc
    /// pins). Conservative: true when either is present.
    pub stays_loaded: bool,
}

/// Checks that `bytes`, an ELF file, is an x86-64 shared object the dynamic
/// loader can map, relocate, initialise and unload without asserting,
/// crashing or calling an address outside the image's code. See the
/// [module documentation](self) for the rules.
pub fn x86_64_shared_object(bytes: &[u8]) -> Result<Checked> {
    Validator::new(bytes)?.run()
}

macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(ImageError::Elf(format!($($arg)*)))
    };
}

#[derive(Debug, Clone, Copy)]
struct Phdr {
    index: usize,
    p_type: u32,
    flags: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
    align: u64,
}

#[derive(Debug, Clone, Copy)]
struct Section {
    index: usize,
    sh_type: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
}

#[derive(Debug, Clone, Copy)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

impl Sym {
    fn bind(&self) -> u8 {
        self.info >> 4
    }
    fn typ(&self) -> u8 {
        self.info & 0xf
    }
    fn defined(&self) -> bool {
        self.shndx != SHN_UNDEF
    }
}

#[derive(Debug, Clone, Copy)]
enum WriteKind {
    Rela { r_type: u32, sym: u32, addend: i64 },
    Relr,
}

#[derive(Debug, Clone, Copy)]
struct Write {
    start: u64,
    end: u64,
    kind: WriteKind,
    /// For messages: which table and which entry.
    table: &'static str,
    entry: u64,
}

struct Validator<'a> {
    data: &'a [u8],
    e_phoff: u64,
    e_phnum: u16,
    phdrs: Vec<Phdr>,
    loads: Vec<Phdr>,
    sections: Vec<Section>,
}

fn rd<const N: usize>(data: &[u8], off: u64) -> Option<[u8; N]> {
    let start = usize::try_from(off).ok()?;
    let end = start.checked_add(N)?;
    data.get(start..end)?.try_into().ok()
}
fn u16_at(data: &[u8], off: u64) -> Option<u16> {
    rd::<2>(data, off).map(u16::from_le_bytes)
}
fn u32_at(data: &[u8], off: u64) -> Option<u32> {
    rd::<4>(data, off).map(u32::from_le_bytes)
}
fn u64_at(data: &[u8], off: u64) -> Option<u64> {
    rd::<8>(data, off).map(u64::from_le_bytes)
}

fn page_down(v: u64) -> u64 {
    v & !(PAGE - 1)
}
fn page_up(v: u64) -> Option<u64> {
    v.checked_add(PAGE - 1).map(page_down)
}

fn tag_name(tag: u64) -> Cow<'static, str> {
    match known_tag(tag) {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(format!("dynamic tag {tag:#x}")),
    }
}

/// The name of a dynamic tag ld.so knows.
fn known_tag(tag: u64) -> Option<&'static str> {
    Some(match tag {
        DT_NEEDED => "DT_NEEDED",
        DT_PLTRELSZ => "DT_PLTRELSZ",
        DT_PLTGOT => "DT_PLTGOT",
        DT_HASH => "DT_HASH",
        DT_STRTAB => "DT_STRTAB",
        DT_SYMTAB => "DT_SYMTAB",
        DT_RELA => "DT_RELA",
        DT_RELASZ => "DT_RELASZ",
        DT_RELAENT => "DT_RELAENT",
        DT_STRSZ => "DT_STRSZ",
        DT_SYMENT => "DT_SYMENT",
        DT_INIT => "DT_INIT",
        DT_FINI => "DT_FINI",
        DT_SONAME => "DT_SONAME",
        DT_RPATH => "DT_RPATH",
        16 => "DT_SYMBOLIC",
        DT_REL => "DT_REL",
        DT_RELSZ => "DT_RELSZ",
        DT_RELENT => "DT_RELENT",
        DT_PLTREL => "DT_PLTREL",
        21 => "DT_DEBUG",
        DT_TEXTREL => "DT_TEXTREL",
        DT_JMPREL => "DT_JMPREL",
        24 => "DT_BIND_NOW",
        DT_INIT_ARRAY => "DT_INIT_ARRAY",
        DT_FINI_ARRAY => "DT_FINI_ARRAY",
        DT_INIT_ARRAYSZ => "DT_INIT_ARRAYSZ",
        DT_FINI_ARRAYSZ => "DT_FINI_ARRAYSZ",
        DT_RUNPATH => "DT_RUNPATH",
        DT_FLAGS => "DT_FLAGS",
        DT_PREINIT_ARRAY => "DT_PREINIT_ARRAY",
        DT_PREINIT_ARRAYSZ => "DT_PREINIT_ARRAYSZ",
        DT_RELRSZ => "DT_RELRSZ",
        DT_RELR => "DT_RELR",
        DT_RELRENT => "DT_RELRENT",
        DT_GNU_HASH => "DT_GNU_HASH",
        DT_TLSDESC_PLT => "DT_TLSDESC_PLT",
        DT_TLSDESC_GOT => "DT_TLSDESC_GOT",
        DT_CONFIG => "DT_CONFIG",
        DT_DEPAUDIT => "DT_DEPAUDIT",
        DT_AUDIT => "DT_AUDIT",
        DT_VERSYM => "DT_VERSYM",
        DT_RELACOUNT => "DT_RELACOUNT",
        0x6fff_fffa => "DT_RELCOUNT",
        DT_FLAGS_1 => "DT_FLAGS_1",
        DT_VERDEF => "DT_VERDEF",
        DT_VERDEFNUM => "DT_VERDEFNUM",
        DT_VERNEED => "DT_VERNEED",
        DT_VERNEEDNUM => "DT_VERNEEDNUM",
        DT_AUXILIARY => "DT_AUXILIARY",
        DT_FILTER => "DT_FILTER",
        _ => return None,
    })
}

fn phdr_name(t: u32) -> String {
    match t {
        PT_LOAD => "PT_LOAD".into(),
        PT_DYNAMIC => "PT_DYNAMIC".into(),
        PT_INTERP => "PT_INTERP".into(),
        PT_NOTE => "PT_NOTE".into(),
        PT_PHDR => "PT_PHDR".into(),
        PT_TLS => "PT_TLS".into(),
        PT_GNU_EH_FRAME => "PT_GNU_EH_FRAME".into(),
        PT_GNU_RELRO => "PT_GNU_RELRO".into(),
        PT_GNU_PROPERTY => "PT_GNU_PROPERTY".into(),
        t => format!("program header type {t:#x}"),
    }
}

fn reloc_name(t: u32) -> String {
    match t {
        R_NONE => "R_X86_64_NONE".into(),
        R_64 => "R_X86_64_64".into(),
        R_PC32 => "R_X86_64_PC32".into(),
        R_COPY => "R_X86_64_COPY".into(),
        R_GLOB_DAT => "R_X86_64_GLOB_DAT".into(),
        R_JUMP_SLOT => "R_X86_64_JUMP_SLOT".into(),
        R_RELATIVE => "R_X86_64_RELATIVE".into(),
        R_32 => "R_X86_64_32".into(),
        R_DTPMOD64 => "R_X86_64_DTPMOD64".into(),
        R_DTPOFF64 => "R_X86_64_DTPOFF64".into(),
        R_TPOFF64 => "R_X86_64_TPOFF64".into(),
        R_SIZE32 => "R_X86_64_SIZE32".into(),
        R_SIZE64 => "R_X86_64_SIZE64".into(),
        R_TLSDESC => "R_X86_64_TLSDESC".into(),
        R_IRELATIVE => "R_X86_64_IRELATIVE".into(),
        t => format!("relocation type {t}"),
    }
}

/// Bytes a relocation type writes, or `None` if `ld.so` does not apply it
/// (or it has no place in a shared object).
fn reloc_width(t: u32) -> Option<u64> {
    Some(match t {
        R_NONE => 0,
        R_PC32 | R_32 | R_SIZE32 => 4,
        R_64 | R_GLOB_DAT | R_JUMP_SLOT | R_RELATIVE | R_DTPMOD64 | R_DTPOFF64 | R_TPOFF64
        | R_SIZE64 | R_IRELATIVE => 8,
        R_TLSDESC => 16,
        _ => return None,
    })
}

/// Dynamic-section facts: single-valued tags and the `DT_NEEDED` list.
struct Dynamic {
    /// (tag, value), each tag once; a few dozen at most, so a list.
    tags: Vec<(u64, u64)>,
    needed: Vec<u64>,
}

impl Dynamic {
    fn get(&self, tag: u64) -> Option<u64> {
        self.tags.iter().find(|&&(t, _)| t == tag).map(|&(_, v)| v)
    }
    fn has(&self, tag: u64) -> bool {
        self.get(tag).is_some()
    }
}

impl<'a> Validator<'a> {
    fn new(data: &'a [u8]) -> Result<Self> {
        if data.len() < 64 {
            return Err(ImageError::Truncated {
                what: "ELF header",
                offset: 0,
                needed: 64,
                available: data.len() as u64,
            });
        }
        if data[..4] != crate::ELF_MAGIC {
            return Err(ImageError::NotElf {
                found: crate::hex_prefix(data),
            });
        }
        let field = |off: u64| u16_at(data, off).unwrap_or(0);
        if data[4] != 2 {
            bail!("e_ident[EI_CLASS] is {} (expected 2, ELFCLASS64)", data[4]);
        }
        if data[5] != 1 {
            bail!(
                "e_ident[EI_DATA] is {} (expected 1, little-endian)",
                data[5]
            );
        }
        if data[6] != 1 {
            bail!("e_ident[EI_VERSION] is {} (expected 1)", data[6]);
        }
        if data[7] != 0 && data[7] != 3 {
            bail!(
                "e_ident[EI_OSABI] is {} (expected 0, System V, or 3, GNU)",
                data[7]
            );
        }
        let e_type = field(16);
        if e_type != 3 {
            bail!("e_type is {e_type} (expected 3, ET_DYN: a shared object)");
        }
        let machine = field(18);
        if machine != crate::elf::EM_X86_64 {
            bail!("e_machine is {machine} (expected 62, EM_X86_64)");
        }
        let version = u32_at(data, 20).unwrap_or(0);
        if version != 1 {
            bail!("e_version is {version} (expected 1)");
        }
        let e_phoff = u64_at(data, 32).unwrap_or(0);
        let e_shoff = u64_at(data, 40).unwrap_or(0);
        let e_phentsize = field(54);
        let e_phnum = field(56);
        let e_shentsize = field(58);
        let e_shnum = field(60);
        let e_shstrndx = field(62);
        if e_phentsize != 56 {
            bail!("e_phentsize is {e_phentsize} (expected 56)");
        }
        if e_phnum == 0 || e_phnum > MAX_PHNUM {
            bail!("e_phnum is {e_phnum} (expected 1 to {MAX_PHNUM})");
        }
        let ph_end = e_phoff.checked_add(u64::from(e_phnum) * 56);
        if ph_end.is_none_or(|end| end > data.len() as u64) {
            bail!(
                "the program header table at e_phoff {e_phoff:#x} ({e_phnum} entries of 56 bytes) lies outside the file ({:#x} bytes)",
                data.len()
            );
        }
        let mut phdrs = Vec::with_capacity(usize::from(e_phnum));
        for i in 0..u64::from(e_phnum) {
            let at = e_phoff + i * 56;
            let q = |o: u64| u64_at(data, at + o).unwrap_or(0);
            phdrs.push(Phdr {
                index: i as usize,
                p_type: u32_at(data, at).unwrap_or(0),
                flags: u32_at(data, at + 4).unwrap_or(0),
                offset: q(8),
                vaddr: q(16),
                filesz: q(32),
                memsz: q(40),
                align: q(48),
            });
        }
        let mut sections = Vec::new();
        if e_shnum != 0 {
            if e_shentsize != 64 {
                bail!("e_shentsize is {e_shentsize} (expected 64)");
            }
            let sh_end = e_shoff.checked_add(u64::from(e_shnum) * 64);
            if sh_end.is_none_or(|end| end > data.len() as u64) {
                bail!(
                    "the section header table at e_shoff {e_shoff:#x} ({e_shnum} entries of 64 bytes) lies outside the file ({:#x} bytes)",
                    data.len()
                );
            }
            if e_shstrndx >= e_shnum {
                bail!("e_shstrndx {e_shstrndx} is not below e_shnum {e_shnum}");
            }
            for i in 0..u64::from(e_shnum) {
                let at = e_shoff + i * 64;
                let q = |o: u64| u64_at(data, at + o).unwrap_or(0);
                sections.push(Section {
                    index: i as usize,
                    sh_type: u32_at(data, at + 4).unwrap_or(0),
                    flags: q(8),
                    addr: q(16),
                    offset: q(24),
                    size: q(32),
                });
            }
        }
        Ok(Validator {
            data,
            e_phoff,
            e_phnum,
            phdrs,
            loads: Vec::new(),
            sections,
        })
    }

    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    fn run(mut self) -> Result<Checked> {
        self.check_loads()?;
        self.check_other_phdrs()?;
        self.check_sections()?;
        let dynamic = self.read_dynamic()?;
        self.check_dynamic(dynamic)
    }

    fn check_loads(&mut self) -> Result<()> {
        let len = self.len();
        for ph in self.phdrs.iter().filter(|p| p.p_type == PT_LOAD) {
            let i = ph.index;
            if ph.memsz == 0 {
                bail!("program header {i} (PT_LOAD) is empty (p_memsz 0)");
            }
            if ph.filesz > ph.memsz {
                bail!(
                    "program header {i} (PT_LOAD): p_filesz {:#x} exceeds p_memsz {:#x}",
                    ph.filesz,
                    ph.memsz
                );
            }
            if ph.offset.checked_add(ph.filesz).is_none_or(|e| e > len) {
                bail!(
                    "program header {i} (PT_LOAD): file range at {:#x} with size {:#x} lies outside the file ({len:#x} bytes)",
                    ph.offset,
                    ph.filesz
                );
            }
            if ph
                .vaddr
                .checked_add(ph.memsz)
                .is_none_or(|e| e > ADDR_LIMIT)
            {
                bail!(
                    "program header {i} (PT_LOAD): memory at {:#x} with size {:#x} ends beyond {ADDR_LIMIT:#x}",
                    ph.vaddr,
                    ph.memsz
                );
            }
            if ph.align > MAX_ALIGN || (ph.align > 1 && !ph.align.is_power_of_two()) {
                bail!(
                    "program header {i} (PT_LOAD): p_align {:#x} is not a power of two up to {MAX_ALIGN:#x}",
                    ph.align
                );
            }
            if ph.vaddr % PAGE != ph.offset % PAGE {
                bail!(
                    "program header {i} (PT_LOAD): p_vaddr {:#x} and p_offset {:#x} differ modulo the page size",
                    ph.vaddr,
                    ph.offset
                );
            }
            if ph.align > 1 && ph.vaddr % ph.align != ph.offset % ph.align {
                bail!(
                    "program header {i} (PT_LOAD): p_vaddr {:#x} and p_offset {:#x} differ modulo p_align {:#x}",
                    ph.vaddr,
                    ph.offset,
                    ph.align
                );
            }
            self.loads.push(*ph);
        }
        if self.loads.is_empty() {
            bail!("no PT_LOAD program header");
        }
        for w in self.loads.windows(2) {
            let (a, b) = (w[0], w[1]);
            // Checked above: no overflow, below ADDR_LIMIT.
            let a_end = page_up(a.vaddr + a.memsz).unwrap_or(u64::MAX);
            if b.vaddr < a.vaddr || page_down(b.vaddr) < a_end {
                bail!(
                    "PT_LOAD program headers {} (at {:#x}, {:#x} bytes) and {} (at {:#x}) are not in ascending order on separate pages",
                    a.index,
                    a.vaddr,
                    a.memsz,
                    b.index,
                    b.vaddr
                );
            }
        }
        let mut by_offset: Vec<&Phdr> = self.loads.iter().filter(|p| p.filesz > 0).collect();
        by_offset.sort_by_key(|p| p.offset);
        for w in by_offset.windows(2) {
            if w[0].offset + w[0].filesz > w[1].offset {
                bail!(
                    "PT_LOAD program headers {} and {} map overlapping file ranges ({:#x}+{:#x} and {:#x})",
                    w[0].index,
                    w[1].index,
                    w[0].offset,
                    w[0].filesz,
                    w[1].offset
                );
            }
        }
        Ok(())
    }

    /// The file offset of `[vaddr, vaddr+size)` if it lies in the
    /// file-backed part of a `PT_LOAD` with all of `flags`.
    fn file_offset(&self, vaddr: u64, size: u64, flags: u32) -> Option<u64> {
        let end = vaddr.checked_add(size)?;
        self.loads
            .iter()
            .find(|l| l.flags & flags == flags && vaddr >= l.vaddr && end <= l.vaddr + l.filesz)
            .map(|l| l.offset + (vaddr - l.vaddr))
    }

    /// Like [`Self::file_offset`] for readable data, as an error naming `what`.
    fn readable(&self, what: impl Display, vaddr: u64, size: u64) -> Result<u64> {
        match self.file_offset(vaddr, size, PF_R) {
            Some(off) => Ok(off),
            None => bail!(
                "{what} at {vaddr:#x} ({size:#x} bytes) lies outside the file-backed part of every readable PT_LOAD"
            ),
        }
    }

    /// The file offset of `vaddr` and how many file-backed bytes of its
    /// readable `PT_LOAD` follow it.
    fn readable_extent(&self, vaddr: u64) -> Option<(u64, u64)> {
        self.loads
            .iter()
            .find(|l| l.flags & PF_R != 0 && vaddr >= l.vaddr && vaddr < l.vaddr + l.filesz)
            .map(|l| (l.offset + (vaddr - l.vaddr), l.vaddr + l.filesz - vaddr))
    }

    fn in_memory(&self, vaddr: u64, size: u64, flags: u32) -> bool {
        let Some(end) = vaddr.checked_add(size) else {
            return false;
        };
        self.loads
            .iter()
            .any(|l| l.flags & flags == flags && vaddr >= l.vaddr && end <= l.vaddr + l.memsz)
    }

    fn executable(&self, vaddr: u64) -> bool {
        self.loads
            .iter()
            .any(|l| l.flags & PF_X != 0 && vaddr >= l.vaddr && vaddr < l.vaddr + l.filesz)
    }

    /// A segment other than `PT_LOAD` whose memory must be file-backed and
    /// readable, at the file offset its `p_offset` says.
    fn mapped_phdr(&self, ph: &Phdr, size: u64) -> Result<()> {
        let name = phdr_name(ph.p_type);
        let i = ph.index;
        if ph
            .offset
            .checked_add(ph.filesz)
            .is_none_or(|e| e > self.len())
        {
            bail!(
                "{name} (program header {i}) at file offset {:#x} with size {:#x} lies outside the file ({:#x} bytes)",
                ph.offset,
                ph.filesz,
                self.len()
            );
        }
        match self.file_offset(ph.vaddr, size, PF_R) {
            None => bail!(
                "{name} (program header {i}) at {:#x} ({size:#x} bytes) lies outside the file-backed part of every readable PT_LOAD",
                ph.vaddr
            ),
            Some(off) if off != ph.offset => bail!(
                "{name} (program header {i}): p_offset {:#x} does not match the file offset {off:#x} its address {:#x} is loaded from",
                ph.offset,
                ph.vaddr
            ),
            Some(_) => Ok(()),
        }
    }

    fn check_other_phdrs(&self) -> Result<()> {
        let mut count: HashMap<u32, usize> = HashMap::new();
        for ph in &self.phdrs {
            let i = ph.index;
            let name = phdr_name(ph.p_type);
            *count.entry(ph.p_type).or_default() += 1;
            match ph.p_type {
                PT_DYNAMIC => {
                    if ph.filesz == 0 {
                        bail!("PT_DYNAMIC (program header {i}) is empty");
                    }
                    if ph.filesz > ph.memsz {
                        bail!(
                            "PT_DYNAMIC (program header {i}): p_filesz {:#x} exceeds p_memsz {:#x}",
                            ph.filesz,
                            ph.memsz
                        );
                    }
                    if ph
                        .offset
                        .checked_add(ph.filesz)
                        .is_none_or(|e| e > self.len())
                    {
                        bail!(
                            "PT_DYNAMIC at {:#x} (file offset {:#x}, {:#x} bytes) lies outside the file ({:#x} bytes)",
                            ph.vaddr,
                            ph.offset,
                            ph.filesz,
                            self.len()
                        );
                    }
                    self.mapped_phdr(ph, ph.filesz)?;
                }
                PT_TLS => {
                    if ph.filesz > ph.memsz {
                        bail!(
                            "PT_TLS (program header {i}): p_filesz {:#x} exceeds p_memsz {:#x}",
                            ph.filesz,
                            ph.memsz
                        );
                    }
                    if ph.memsz > MAX_ALIGN {
                        bail!(
                            "PT_TLS (program header {i}): p_memsz {:#x} is too large",
                            ph.memsz
                        );
                    }
                    if ph.align > PAGE * 16 || (ph.align > 1 && !ph.align.is_power_of_two()) {
                        bail!(
                            "PT_TLS (program header {i}): p_align {:#x} is not a power of two up to 64 KiB",
                            ph.align
                        );
                    }
                    if ph.filesz > 0 {
                        self.mapped_phdr(ph, ph.filesz)?;
                    }
                }
                PT_GNU_RELRO if ph.memsz > 0 && !self.in_memory(ph.vaddr, ph.memsz, 0) => {
                    bail!(
                        "PT_GNU_RELRO (program header {i}) at {:#x} ({:#x} bytes) does not lie inside one PT_LOAD",
                        ph.vaddr,
                        ph.memsz
                    );
                }
                PT_PHDR => {
                    let size = u64::from(self.e_phnum) * 56;
                    if ph.offset != self.e_phoff || ph.filesz < size || ph.memsz < ph.filesz {
                        bail!(
                            "PT_PHDR (program header {i}) at file offset {:#x} with size {:#x} does not describe the program header table (e_phoff {:#x}, {size:#x} bytes)",
                            ph.offset,
                            ph.filesz,
                            self.e_phoff
                        );
                    }
                    self.mapped_phdr(ph, size)?;
                }
                PT_GNU_PROPERTY if ph.memsz > 0 => {
                    self.mapped_phdr(ph, ph.memsz)?;
                    if ph.align == 8 {
                        self.check_notes(ph)?;
                    }
                }
                PT_GNU_EH_FRAME if ph.memsz > 0 => {
                    self.mapped_phdr(ph, ph.memsz)?;
                }
                PT_NOTE | PT_INTERP
                    if ph
                        .offset
                        .checked_add(ph.filesz)
                        .is_none_or(|e| e > self.len()) =>
                {
                    bail!(
                        "{name} (program header {i}) at file offset {:#x} with size {:#x} lies outside the file ({:#x} bytes)",
                        ph.offset,
                        ph.filesz,
                        self.len()
                    );
                }
                _ => {}
            }
        }
        let n = |t| count.get(&t).copied().unwrap_or(0);
        if n(PT_DYNAMIC) != 1 {
            bail!(
                "{} PT_DYNAMIC program headers (expected exactly one)",
                n(PT_DYNAMIC)
            );
        }
        for t in [PT_TLS, PT_GNU_RELRO, PT_PHDR, PT_GNU_PROPERTY] {
            if n(t) > 1 {
                bail!(
                    "{} {} program headers (expected at most one)",
                    n(t),
                    phdr_name(t)
                );
            }
        }
        Ok(())
    }

    /// `PT_GNU_PROPERTY` notes, which `ld.so` parses: every note's name and
    /// descriptor inside the segment.
    fn check_notes(&self, ph: &Phdr) -> Result<()> {
        let mut pos = 0u64;
        while pos + 12 < ph.memsz {
            let at = ph.offset + pos;
            let namesz = u64::from(u32_at(self.data, at).unwrap_or(0));
            let descsz = u64::from(u32_at(self.data, at + 4).unwrap_or(0));
            let next = pos + ((12 + namesz).next_multiple_of(8) + descsz).next_multiple_of(8);
            if next > ph.memsz {
                bail!(
                    "PT_GNU_PROPERTY (program header {}): note at {:#x} (name {namesz:#x} bytes, descriptor {descsz:#x} bytes) runs past the segment's {:#x} bytes",
                    ph.index,
                    ph.vaddr + pos,
                    ph.memsz
                );
            }
            pos = next;
        }
        Ok(())
    }

    fn section_named(&self, s: &Section) -> String {
        format!(
            "section {} (at {:#x}, {:#x} bytes)",
            s.index, s.addr, s.size
        )
    }

    fn check_sections(&self) -> Result<()> {
        for s in &self.sections {
            if s.sh_type != SHT_NOBITS
                && s.offset.checked_add(s.size).is_none_or(|e| e > self.len())
                && s.sh_type != 0
            {
                bail!(
                    "section {}: data at {:#x} with size {:#x} lies outside the file ({:#x} bytes)",
                    s.index,
                    s.offset,
                    s.size,
                    self.len()
                );
            }
            if s.flags & SHF_ALLOC == 0 || s.size == 0 {
                continue;
            }
            if s.sh_type == SHT_NOBITS {
                if s.flags & SHF_TLS == 0 && !self.in_memory(s.addr, s.size, 0) {
                    bail!(
                        "{} is allocated but lies in no PT_LOAD",
                        self.section_named(s)
                    );
                }
                continue;
            }
            match self.file_offset(s.addr, s.size, 0) {
                None => bail!(
                    "{} is allocated but lies outside the file-backed part of every PT_LOAD",
                    self.section_named(s)
                ),
                Some(off) if off != s.offset => bail!(
                    "{} has file offset {:#x}, but its PT_LOAD maps it from {off:#x}",
                    self.section_named(s),
                    s.offset
                ),
                Some(_) => {}
            }
        }
        if let Some(relro) = self
            .phdrs
            .iter()
            .find(|p| p.p_type == PT_GNU_RELRO && p.memsz > 0)
        {
            let start = page_down(relro.vaddr);
            let end = page_down(relro.vaddr + relro.memsz);
            for s in &self.sections {
                if s.flags & (SHF_ALLOC | SHF_WRITE) != SHF_ALLOC | SHF_WRITE
                    || s.size == 0
                    || (s.sh_type == SHT_NOBITS && s.flags & SHF_TLS != 0)
                {
                    continue;
                }
                // Protection covers whole pages from the one holding the
                // segment's start up to its end rounded down; a writable
                // section below the segment must not share that first page.
                let s_end = s.addr.saturating_add(s.size);
                if s.addr < relro.vaddr && s_end > start && start < end {
                    bail!(
                        "PT_GNU_RELRO at {:#x} ({:#x} bytes) would make writable {} read-only",
                        relro.vaddr,
                        relro.memsz,
                        self.section_named(s)
                    );
                }
            }
        }
        Ok(())
    }

    fn read_dynamic(&self) -> Result<Dynamic> {
        let Some(ph) = self.phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
            bail!("no PT_DYNAMIC program header");
        };
        let mut tags = Vec::new();
        let mut needed = Vec::new();
        let n = ph.filesz / 16;
        for i in 0..n {
            let at = ph.offset + i * 16;
            let (Some(tag), Some(val)) = (u64_at(self.data, at), u64_at(self.data, at + 8)) else {
                break;
            };
            match tag {
                DT_NULL => return Ok(Dynamic { tags, needed }),
                DT_NEEDED => needed.push(val),
                _ if known_tag(tag).is_some() && tags.iter().any(|&(t, _)| t == tag) => {
                    bail!(
                        "{} appears more than once in the dynamic section (entry {i})",
                        tag_name(tag)
                    );
                }
                _ if known_tag(tag).is_some() => tags.push((tag, val)),
                _ => {}
            }
        }
        bail!(
            "PT_DYNAMIC at {:#x} has no DT_NULL terminator within its {:#x} bytes",
            ph.vaddr,
            ph.filesz
        )
    }

    fn check_dynamic(&self, d: Dynamic) -> Result<Checked> {
        // Tags x86-64 ld.so ignores or cannot honour safely.
        for tag in [DT_REL, DT_RELSZ, DT_RELENT] {
            if d.has(tag) {
                bail!(
                    "{} is present, but x86-64 uses DT_RELA relocations only",
                    tag_name(tag)
                );
            }
        }
        if d.has(DT_TEXTREL) || d.get(DT_FLAGS).is_some_and(|f| f & DF_TEXTREL != 0) {
            bail!("the image has text relocations (DT_TEXTREL or DF_TEXTREL), which are not supported");
        }
        for tag in [DT_STRTAB, DT_STRSZ, DT_SYMTAB] {
            if !d.has(tag) {
                bail!("the dynamic section has no {}", tag_name(tag));
            }
        }
        if !d.has(DT_GNU_HASH) && !d.has(DT_HASH) {
            bail!("the dynamic section has neither DT_GNU_HASH nor DT_HASH");
        }
        let pairs = [
            (DT_RELA, DT_RELASZ),
            (DT_RELA, DT_RELAENT),
            (DT_JMPREL, DT_PLTRELSZ),
            (DT_JMPREL, DT_PLTREL),
            (DT_PLTREL, DT_JMPREL),
            (DT_RELR, DT_RELRSZ),
            (DT_RELR, DT_RELRENT),
            (DT_INIT_ARRAY, DT_INIT_ARRAYSZ),
            (DT_FINI_ARRAY, DT_FINI_ARRAYSZ),
            (DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ),
            (DT_VERNEED, DT_VERNEEDNUM),
            (DT_VERNEED, DT_VERSYM),
            (DT_VERDEF, DT_VERDEFNUM),
            (DT_VERDEF, DT_VERSYM),
        ];
        for (a, b) in pairs {
            if d.has(a) && !d.has(b) {
                bail!("{} is present without {}", tag_name(a), tag_name(b));
            }
        }
        let expect = |tag: u64, want: u64| -> Result<()> {
            match d.get(tag) {
                Some(v) if v != want => bail!("{} is {v} (expected {want})", tag_name(tag)),
                _ => Ok(()),
            }
        };
        expect(DT_SYMENT, 24)?;
        expect(DT_RELAENT, 24)?;
        expect(DT_RELRENT, 8)?;
        expect(DT_PLTREL, DT_RELA)?;

        // Address-valued tags that only need to point into the image.
        if let Some(v) = d.get(DT_PLTGOT) {
            if !self.in_memory(v, 24, PF_W) {
                bail!("DT_PLTGOT {v:#x} does not point to 24 bytes of writable loaded memory");
            }
        }
        if let Some(v) = d.get(DT_TLSDESC_GOT) {
            if !self.in_memory(v, 8, PF_W) {
                bail!("DT_TLSDESC_GOT {v:#x} does not point into writable loaded memory");
            }
        }
        if let Some(v) = d.get(DT_TLSDESC_PLT) {
            if !self.executable(v) {
                bail!("DT_TLSDESC_PLT {v:#x} does not point into executable code");
            }
        }

        // The string table and every string-valued tag.
        let strtab_addr = d.get(DT_STRTAB).unwrap_or(0);
        let strsz = d.get(DT_STRSZ).unwrap_or(0);
        if strsz == 0 {
            bail!("DT_STRSZ is 0");
        }
        let strtab_off = self.readable("DT_STRTAB", strtab_addr, strsz)?;
        let strtab = Strtab {
            bytes: self
                .data
                .get(strtab_off as usize..(strtab_off + strsz) as usize)
                .unwrap_or(&[]),
        };
        let mut needed = Vec::new();
        for &off in &d.needed {
            needed.push(strtab.get("DT_NEEDED", off)?);
        }
        for tag in [
            DT_SONAME,
            DT_RPATH,
            DT_RUNPATH,
            DT_AUXILIARY,
            DT_FILTER,
            DT_AUDIT,
            DT_DEPAUDIT,
            DT_CONFIG,
        ] {
            if let Some(off) = d.get(tag) {
                strtab.get(tag_name(tag), off)?;
            }
        }

        // Hash tables give the symbol count.
        let mut nsyms = 0u64;
        if let Some(addr) = d.get(DT_GNU_HASH) {
            nsyms = nsyms.max(self.gnu_hash_count(addr)?);
        }
        if let Some(addr) = d.get(DT_HASH) {
            nsyms = nsyms.max(self.sysv_hash_count(addr)?);
        }
        let symtab_addr = d.get(DT_SYMTAB).unwrap_or(0);
        // A GNU hash table covers only the symbols it exports (from
        // `symoffset` on): undefined symbols after an empty hash (an image
        // that exports nothing through .dynsym) are counted from the
        // section header of .dynsym, else from the gap up to the string
        // table, which the linkers place right after the symbols.
        if d.get(DT_HASH).is_none() {
            const SHT_DYNSYM: u32 = 11;
            let from_section = self
                .sections
                .iter()
                .find(|s| s.sh_type == SHT_DYNSYM && s.addr == symtab_addr)
                .map(|s| s.size / 24);
            let strtab_addr = d.get(DT_STRTAB).unwrap_or(0);
            let from_gap = (strtab_addr > symtab_addr).then(|| (strtab_addr - symtab_addr) / 24);
            if let Some(n) = from_section.or(from_gap) {
                nsyms = nsyms.max(n);
            }
        }
        let symtab_size = nsyms.saturating_mul(24);
        let symtab_off = self.readable(
            format_args!("DT_SYMTAB ({nsyms} symbols)"),
            symtab_addr,
            symtab_size,
        )?;
        let mut syms = Vec::with_capacity(nsyms.min(1 << 20) as usize);
        for i in 0..nsyms {
            let at = symtab_off + i * 24;
            let sym = Sym {
                name: u32_at(self.data, at).unwrap_or(0),
                info: self.data.get(at as usize + 4).copied().unwrap_or(0),
                other: self.data.get(at as usize + 5).copied().unwrap_or(0),
                shndx: u16_at(self.data, at + 6).unwrap_or(0),
                value: u64_at(self.data, at + 8).unwrap_or(0),
                size: u64_at(self.data, at + 16).unwrap_or(0),
            };
            self.check_symbol(i, &sym, &strtab)?;
            syms.push(sym);
        }

        // Versions.
        self.check_versions(&d, &strtab, &needed, nsyms)?;

        // Metadata ld.so reads, which no relocation may overwrite.
        let mut meta: Vec<(u64, u64, Cow<'static, str>)> = Vec::new();
        if let Some(ph) = self.phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) {
            meta.push((
                ph.vaddr,
                ph.vaddr.saturating_add(ph.memsz),
                "the dynamic section".into(),
            ));
        }
        meta.push((strtab_addr, strtab_addr + strsz, "DT_STRTAB".into()));
        meta.push((symtab_addr, symtab_addr + symtab_size, "DT_SYMTAB".into()));
        if let Some(v) = d.get(DT_VERSYM) {
            meta.push((v, v.saturating_add(nsyms * 2), "DT_VERSYM".into()));
        }
        for (tag, extent) in [(DT_GNU_HASH, 16u64), (DT_HASH, 8u64)] {
            if let Some(v) = d.get(tag) {
                meta.push((v, v.saturating_add(extent), tag_name(tag)));
            }
        }

        // Relocations.
        let mut writes = Vec::new();
        let rel_count = self.collect_relocations(&d, &syms, &mut writes, &mut meta)?;
        self.check_writes(&mut writes, &mut meta)?;
        self.check_plt_got(&d, &writes)?;

        // Code run by dlopen and dlclose.
        let entries = self.entry_points(&syms)?;
        let mut calls = 0u64;
        // The linkers put DT_INIT and DT_FINI (crt's _init and _fini) at
        // the start of the .init and .fini sections.
        let section_starts: Option<Vec<u64>> = (!self.sections.is_empty()).then(|| {
            let mut v: Vec<u64> = self
                .sections
                .iter()
                .filter(|s| s.flags & (SHF_ALLOC | SHF_EXECINSTR) == SHF_ALLOC | SHF_EXECINSTR)
                .map(|s| s.addr)
                .collect();
            v.sort_unstable();
            v
        });
        for tag in [DT_INIT, DT_FINI] {
            if let Some(v) = d.get(tag) {
                self.check_call(tag_name(tag), v, section_starts.as_ref())?;
                calls += 1;
            }
        }
        for (tag, sz) in [
            (DT_PREINIT_ARRAY, DT_PREINIT_ARRAYSZ),
            (DT_INIT_ARRAY, DT_INIT_ARRAYSZ),
            (DT_FINI_ARRAY, DT_FINI_ARRAYSZ),
        ] {
            if let Some(addr) = d.get(tag) {
                let size = d.get(sz).unwrap_or(0);
                calls +=
                    self.check_array(&tag_name(tag), addr, size, &writes, &syms, entries.as_ref())?;
            }
        }
        for w in &writes {
            if let WriteKind::Rela {
                r_type: R_IRELATIVE,
                addend,
                ..
            } = w.kind
            {
                self.check_call(
                    format_args!(
                        "R_X86_64_IRELATIVE resolver ({} entry {})",
                        w.table, w.entry
                    ),
                    addend as u64,
                    entries.as_ref(),
                )?;
            }
        }

        Ok(Checked {
            needed: needed
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect(),
            symbols: nsyms,
            relocations: rel_count,
            init_fini_calls: calls,
            entry_points_checked: entries.is_some(),
            stays_loaded: d.get(DT_FLAGS_1).is_some_and(|f| f & DF_1_NODELETE != 0)
                || syms
                    .iter()
                    .any(|s| s.defined() && s.bind() == STB_GNU_UNIQUE),
        })
    }

    fn gnu_hash_count(&self, addr: u64) -> Result<u64> {
        let off = self.readable("DT_GNU_HASH header", addr, 16)?;
        let w = |o: u64| u64::from(u32_at(self.data, off + o).unwrap_or(0));
        let (nbuckets, symoffset, bloom, shift) = (w(0), w(4), w(8), w(12));
        if bloom == 0 || !bloom.is_power_of_two() {
            bail!("DT_GNU_HASH at {addr:#x}: Bloom filter size {bloom} is not a power of two");
        }
        if shift >= 32 {
            bail!("DT_GNU_HASH at {addr:#x}: Bloom shift {shift} is not below 32");
        }
        let buckets_addr = addr + 16 + bloom * 8;
        let boff = self.readable("DT_GNU_HASH buckets", buckets_addr, nbuckets * 4)?;
        let mut max_bucket = 0u64;
        for b in 0..nbuckets {
            let v = u64::from(u32_at(self.data, boff + b * 4).unwrap_or(0));
            if v != 0 && v < symoffset {
                bail!("DT_GNU_HASH at {addr:#x}: bucket {b} holds symbol {v}, below symoffset {symoffset}");
            }
            max_bucket = max_bucket.max(v);
        }
        if max_bucket == 0 {
            return Ok(symoffset);
        }
        let chain_addr = buckets_addr + nbuckets * 4;
        let first = chain_addr + (max_bucket - symoffset) * 4;
        let Some((coff, avail)) = self.readable_extent(first) else {
            bail!("DT_GNU_HASH at {addr:#x}: the chain of symbol {max_bucket} at {first:#x} lies outside the file-backed part of every readable PT_LOAD");
        };
        let mut i = 0u64;
        loop {
            if (i + 1) * 4 > avail {
                bail!("DT_GNU_HASH at {addr:#x}: the hash chain starting at symbol {max_bucket} does not end inside its segment");
            }
            let v = u32_at(self.data, coff + i * 4).unwrap_or(1);
            if v & 1 != 0 {
                return Ok(max_bucket + i + 1);
            }
            i += 1;
        }
    }

    fn sysv_hash_count(&self, addr: u64) -> Result<u64> {
        let off = self.readable("DT_HASH header", addr, 8)?;
        let nbucket = u64::from(u32_at(self.data, off).unwrap_or(0));
        let nchain = u64::from(u32_at(self.data, off + 4).unwrap_or(0));
        let toff = self.readable("DT_HASH table", addr + 8, (nbucket + nchain) * 4)?;
        let at = |i: u64| u64::from(u32_at(self.data, toff + i * 4).unwrap_or(0));
        let mut seen = vec![false; nchain as usize];
        for b in 0..nbucket {
            let mut s = at(b);
            while s != 0 {
                if s >= nchain {
                    bail!("DT_HASH at {addr:#x}: symbol index {s} is not below nchain {nchain}");
                }
                if std::mem::replace(&mut seen[s as usize], true) {
                    bail!("DT_HASH at {addr:#x}: symbol {s} is reached twice (a cyclic or shared hash chain)");
                }
                s = at(nbucket + s);
            }
        }
        Ok(nchain)
    }

    fn check_symbol(&self, i: u64, s: &Sym, strtab: &Strtab) -> Result<()> {
        strtab.get(
            format_args!("the name of dynamic symbol {i}"),
            u64::from(s.name),
        )?;
        if !matches!(s.bind(), 0 | 1 | 2 | 10) {
            bail!("dynamic symbol {i} has unknown binding {}", s.bind());
        }
        if !matches!(s.typ(), 0..=6 | 10) {
            bail!("dynamic symbol {i} has unknown type {}", s.typ());
        }
        if !self.sections.is_empty()
            && s.shndx != SHN_UNDEF
            && s.shndx != SHN_ABS
            && s.shndx != SHN_COMMON
            && (s.shndx >= SHN_LORESERVE || usize::from(s.shndx) >= self.sections.len())
        {
            bail!(
                "dynamic symbol {i} has section index {:#x}, but there are {} sections",
                s.shndx,
                self.sections.len()
            );
        }
        if !s.defined() || s.shndx == SHN_ABS || s.shndx == SHN_COMMON {
            return Ok(());
        }
        match s.typ() {
            STT_FUNC | STT_GNU_IFUNC if !self.executable(s.value) => bail!(
                "dynamic symbol {i} is a function at {:#x}, outside every executable segment",
                s.value
            ),
            STT_OBJECT if !self.in_memory(s.value, s.size, 0) => bail!(
                "dynamic symbol {i} is an object at {:#x} ({:#x} bytes), outside every PT_LOAD",
                s.value,
                s.size
            ),
            STT_TLS => {
                let tls_size = self
                    .phdrs
                    .iter()
                    .find(|p| p.p_type == PT_TLS)
                    .map(|p| p.memsz);
                match tls_size {
                    Some(m) if s.value.checked_add(s.size).is_some_and(|e| e <= m) => Ok(()),
                    _ => bail!(
                        "dynamic symbol {i} is a TLS symbol at offset {:#x} ({:#x} bytes) outside PT_TLS",
                        s.value,
                        s.size
                    ),
                }
            }
            _ => Ok(()),
        }
    }

    /// Checks `DT_VERNEED`, `DT_VERDEF` and `DT_VERSYM`; returns the number
    /// of version indexes ld.so allocates (0 when there are none).
    fn check_versions(
        &self,
        d: &Dynamic,
        strtab: &Strtab,
        needed: &[&[u8]],
        nsyms: u64,
    ) -> Result<u64> {
        let mut ndx_high = 0u64;
        let mut any = false;
        if let Some(addr) = d.get(DT_VERNEED) {
            any = true;
            let num = d.get(DT_VERNEEDNUM).unwrap_or(0);
            if num == 0 {
                bail!("DT_VERNEEDNUM is 0");
            }
            let mut ent = addr;
            for n in 0..num {
                let off = self.readable(format_args!("DT_VERNEED entry {n}"), ent, 16)?;
                let version = u16_at(self.data, off).unwrap_or(0);
                let cnt = u64::from(u16_at(self.data, off + 2).unwrap_or(0));
                let file = u64::from(u32_at(self.data, off + 4).unwrap_or(0));
                let aux = u64::from(u32_at(self.data, off + 8).unwrap_or(0));
                let next = u64::from(u32_at(self.data, off + 12).unwrap_or(0));
                if version != 1 {
                    bail!("DT_VERNEED entry {n} at {ent:#x} has vn_version {version} (expected 1)");
                }
                let name = strtab.get(format_args!("vn_file of DT_VERNEED entry {n}"), file)?;
                if !needed.contains(&name) {
                    bail!(
                        "DT_VERNEED entry {n} names {:?}, which is not a DT_NEEDED library",
                        String::from_utf8_lossy(name)
                    );
                }
                if cnt == 0 {
                    bail!("DT_VERNEED entry {n} at {ent:#x} has vn_cnt 0");
                }
                let mut a = ent.saturating_add(aux);
                for k in 0..cnt {
                    let aoff =
                        self.readable(format_args!("DT_VERNEED entry {n} auxiliary {k}"), a, 16)?;
                    let other = u64::from(u16_at(self.data, aoff + 6).unwrap_or(0)) & 0x7fff;
                    let vname = u64::from(u32_at(self.data, aoff + 8).unwrap_or(0));
                    let anext = u64::from(u32_at(self.data, aoff + 12).unwrap_or(0));
                    strtab.get(
                        format_args!("vna_name of DT_VERNEED entry {n} auxiliary {k}"),
                        vname,
                    )?;
                    if other < 2 {
                        bail!("DT_VERNEED entry {n} auxiliary {k} has version index {other} (expected 2 or more)");
                    }
                    ndx_high = ndx_high.max(other);
                    if (k + 1 == cnt) != (anext == 0) {
                        bail!("DT_VERNEED entry {n} auxiliary {k}: vna_next {anext:#x} does not end the chain after vn_cnt {cnt} entries");
                    }
                    a = a.saturating_add(anext);
                }
                if (n + 1 == num) != (next == 0) {
                    bail!("DT_VERNEED entry {n}: vn_next {next:#x} does not end the chain after DT_VERNEEDNUM {num} entries");
                }
                ent = ent.saturating_add(next);
            }
        }
        if let Some(addr) = d.get(DT_VERDEF) {
            any = true;
            let num = d.get(DT_VERDEFNUM).unwrap_or(0);
            if num == 0 {
                bail!("DT_VERDEFNUM is 0");
            }
            let mut ent = addr;
            for n in 0..num {
                let off = self.readable(format_args!("DT_VERDEF entry {n}"), ent, 20)?;
                let version = u16_at(self.data, off).unwrap_or(0);
                let ndx = u64::from(u16_at(self.data, off + 4).unwrap_or(0)) & 0x7fff;
                let cnt = u64::from(u16_at(self.data, off + 6).unwrap_or(0));
                let aux = u64::from(u32_at(self.data, off + 12).unwrap_or(0));
                let next = u64::from(u32_at(self.data, off + 16).unwrap_or(0));
                if version != 1 {
                    bail!("DT_VERDEF entry {n} at {ent:#x} has vd_version {version} (expected 1)");
                }
                if cnt == 0 {
                    bail!("DT_VERDEF entry {n} at {ent:#x} has vd_cnt 0");
                }
                ndx_high = ndx_high.max(ndx);
                let mut a = ent.saturating_add(aux);
                for k in 0..cnt {
                    let aoff =
                        self.readable(format_args!("DT_VERDEF entry {n} auxiliary {k}"), a, 8)?;
                    let vname = u64::from(u32_at(self.data, aoff).unwrap_or(0));
                    let anext = u64::from(u32_at(self.data, aoff + 4).unwrap_or(0));
                    strtab.get(
                        format_args!("vda_name of DT_VERDEF entry {n} auxiliary {k}"),
                        vname,
                    )?;
                    if (k + 1 == cnt) != (anext == 0) {
                        bail!("DT_VERDEF entry {n} auxiliary {k}: vda_next {anext:#x} does not end the chain after vd_cnt {cnt} entries");
                    }
                    a = a.saturating_add(anext);
                }
                if (n + 1 == num) != (next == 0) {
                    bail!("DT_VERDEF entry {n}: vd_next {next:#x} does not end the chain after DT_VERDEFNUM {num} entries");
                }
                ent = ent.saturating_add(next);
            }
        }
        let nversions = if any { ndx_high + 1 } else { 0 };
        if let Some(addr) = d.get(DT_VERSYM) {
            let off = self.readable("DT_VERSYM", addr, nsyms * 2)?;
            for i in 0..nsyms {
                let v = u64::from(u16_at(self.data, off + i * 2).unwrap_or(0)) & 0x7fff;
                if v != 0 && v >= nversions {
                    bail!("DT_VERSYM entry {i} is version index {v}, but only {nversions} version indexes are defined");
                }
            }
        }
        Ok(nversions)
    }

    fn collect_relocations(
        &self,
        d: &Dynamic,
        syms: &[Sym],
        writes: &mut Vec<Write>,
        meta: &mut Vec<(u64, u64, Cow<'static, str>)>,
    ) -> Result<u64> {
        let mut count = 0u64;
        // The ranges as glibc's ELF_DYNAMIC_DO_RELA forms them.
        let mut rela = d.get(DT_RELA).map(|a| (a, d.get(DT_RELASZ).unwrap_or(0)));
        let jmprel = d
            .get(DT_JMPREL)
            .map(|a| (a, d.get(DT_PLTRELSZ).unwrap_or(0)));
        for (name, range) in [("DT_RELASZ", rela), ("DT_PLTRELSZ", jmprel)] {
            if let Some((a, sz)) = range {
                if !sz.is_multiple_of(24) {
                    bail!("{name} {sz:#x} is not a multiple of 24");
                }
                if a.checked_add(sz).is_none() {
                    bail!("{name} {sz:#x} overflows");
                }
            }
        }
        if let (Some((ra, rs)), Some((ja, js))) = (&mut rela, jmprel) {
            if *ra + *rs == ja + js && *rs >= js {
                *rs -= js;
            }
            if *ra < ja + js && ja < *ra + *rs {
                bail!("DT_JMPREL at {ja:#x} ({js:#x} bytes) overlaps DT_RELA at {ra:#x} ({rs:#x} bytes)");
            }
        }
        let nrelative = d.get(DT_RELACOUNT).unwrap_or(0);
        if nrelative > 0 && rela.is_none() {
            bail!("DT_RELACOUNT {nrelative} without DT_RELA");
        }
        let mut tables = Vec::new();
        if let Some(r) = rela {
            tables.push(("DT_RELA", r, nrelative));
        }
        if let Some(r) = jmprel {
            tables.push(("DT_JMPREL", r, 0));
        }
        // DT_RELACOUNT may run on into a merged DT_JMPREL; require it not to
        // exceed the DT_RELA entries (JUMP_SLOT entries are not RELATIVE).
        if let Some((_, rs)) = rela {
            if nrelative > rs / 24 {
                bail!(
                    "DT_RELACOUNT {nrelative} exceeds the {} entries of DT_RELA",
                    rs / 24
                );
            }
        }
        for (table, (addr, size), nrel) in tables {
            if size == 0 {
                continue;
            }
            let off = self.readable(table, addr, size)?;
            meta.push((addr, addr + size, table.into()));
            for i in 0..size / 24 {
                let at = off + i * 24;
                let r_offset = u64_at(self.data, at).unwrap_or(0);
                let info = u64_at(self.data, at + 8).unwrap_or(0);
                let addend = u64_at(self.data, at + 16).unwrap_or(0) as i64;
                let r_type = info as u32;
                let sym = (info >> 32) as u32;
                let Some(width) = reloc_width(r_type) else {
                    if r_type == R_COPY {
                        bail!("{table} entry {i}: R_X86_64_COPY has no place in a shared object");
                    }
                    bail!(
                        "{table} entry {i}: {} is not supported by the x86-64 dynamic loader",
                        reloc_name(r_type)
                    );
                };
                if i < nrel && r_type != R_RELATIVE {
                    bail!("{table} entry {i} is {}, but DT_RELACOUNT {nrel} says it is R_X86_64_RELATIVE", reloc_name(r_type));
                }
                if u64::from(sym) >= syms.len() as u64 {
                    bail!(
                        "{table} entry {i} ({}): symbol index {sym} is not below the symbol count {}",
                        reloc_name(r_type),
                        syms.len()
                    );
                }
                let needs_symbol = matches!(r_type, R_GLOB_DAT | R_JUMP_SLOT | R_SIZE32 | R_SIZE64);
                if needs_symbol && sym == 0 {
                    bail!("{table} entry {i} ({}) names no symbol", reloc_name(r_type));
                }
                let resolves = !matches!(r_type, R_NONE | R_RELATIVE | R_IRELATIVE);
                if resolves && sym != 0 {
                    let s = &syms[sym as usize];
                    if !s.defined() && (!matches!(s.bind(), 1 | 2) || s.other & 3 != 0) {
                        bail!(
                            "{table} entry {i} ({}) refers to undefined symbol {sym}, which is not global or weak with default visibility (it would resolve to the load address)",
                            reloc_name(r_type)
                        );
                    }
                }
                count += 1;
                if width == 0 {
                    continue;
                }
                if !self.in_memory(r_offset, width, PF_W) {
                    bail!(
                        "{table} entry {i} ({}) writes {width} bytes at {r_offset:#x}, outside writable loaded memory",
                        reloc_name(r_type)
                    );
                }
                writes.push(Write {
                    start: r_offset,
                    end: r_offset + width,
                    kind: WriteKind::Rela {
                        r_type,
                        sym,
                        addend,
                    },
                    table,
                    entry: i,
                });
            }
        }
        if let Some(addr) = d.get(DT_RELR) {
            let size = d.get(DT_RELRSZ).unwrap_or(0);
            if !size.is_multiple_of(8) {
                bail!("DT_RELRSZ {size:#x} is not a multiple of 8");
            }
            let off = self.readable("DT_RELR", addr, size)?;
            meta.push((addr, addr + size, "DT_RELR".into()));
            let mut next: Option<u64> = None;
            let push = |w: u64, i: u64, writes: &mut Vec<Write>| -> Result<()> {
                if !self.in_memory(w, 8, PF_W) {
                    bail!("DT_RELR entry {i} relocates the word at {w:#x}, outside writable loaded memory");
                }
                writes.push(Write {
                    start: w,
                    end: w + 8,
                    kind: WriteKind::Relr,
                    table: "DT_RELR",
                    entry: i,
                });
                Ok(())
            };
            for i in 0..size / 8 {
                let e = u64_at(self.data, off + i * 8).unwrap_or(0);
                if e & 1 == 0 {
                    push(e, i, writes)?;
                    count += 1;
                    next = e.checked_add(8);
                } else {
                    let Some(base) = next else {
                        bail!("DT_RELR entry {i} is a bitmap with no address entry before it");
                    };
                    let mut bits = e >> 1;
                    let mut k = 0u64;
                    while bits != 0 {
                        if bits & 1 != 0 {
                            let Some(w) = base.checked_add(k * 8) else {
                                bail!("DT_RELR entry {i} overflows the address space");
                            };
                            push(w, i, writes)?;
                            count += 1;
                        }
                        bits >>= 1;
                        k += 1;
                    }
                    next = base.checked_add(63 * 8);
                }
            }
        }
        Ok(count)
    }

    fn check_writes(
        &self,
        writes: &mut [Write],
        meta: &mut [(u64, u64, Cow<'static, str>)],
    ) -> Result<()> {
        writes.sort_by_key(|w| (w.start, w.end));
        for p in writes.windows(2) {
            if p[1].start < p[0].end {
                bail!(
                    "{} entry {} and {} entry {} both relocate memory at {:#x}",
                    p[0].table,
                    p[0].entry,
                    p[1].table,
                    p[1].entry,
                    p[1].start
                );
            }
        }
        meta.sort_by_key(|m| m.0);
        for (start, end, what) in meta.iter() {
            // The first write ending after `start`.
            let i = writes.partition_point(|w| w.end <= *start);
            if let Some(w) = writes.get(i) {
                if w.start < *end {
                    bail!(
                        "{} entry {} writes at {:#x}, inside {what} ({start:#x}..{end:#x}) that the loader reads",
                        w.table,
                        w.entry,
                        w.start
                    );
                }
            }
        }
        Ok(())
    }

    /// The PLT's GOT slots (after the three reserved words at `DT_PLTGOT`)
    /// are what PLT stubs jump through: each word `DT_JMPREL` fills must be
    /// relocated, and `R_X86_64_JUMP_SLOT` writes only there. With section
    /// headers, the section at `DT_PLTGOT` must be large enough, and each of
    /// its words after the reserved three that holds a non-zero link-time
    /// value must be relocated.
    fn check_plt_got(&self, d: &Dynamic, writes: &[Write]) -> Result<()> {
        // Words of the PLT GOT the DT_JMPREL entries fill (TLSDESC takes two).
        let mut words = 0u64;
        for w in writes.iter().filter(|w| w.table == "DT_JMPREL") {
            words += (w.end - w.start).div_ceil(8);
        }
        let Some(pltgot) = d.get(DT_PLTGOT) else {
            if words > 0 {
                bail!("DT_JMPREL has entries but there is no DT_PLTGOT");
            }
            return Ok(());
        };
        let covered = |word: u64| {
            let i = writes.partition_point(|w| w.end <= word);
            writes
                .get(i)
                .is_some_and(|w| w.start <= word && w.end >= word + 8)
        };
        let first = pltgot.saturating_add(24);
        let end = first.saturating_add(words.saturating_mul(8));
        for k in 0..words {
            let slot = first + k * 8;
            if !covered(slot) {
                bail!("PLT GOT slot {k} at {slot:#x} is not relocated (it would hold an unrelocated address)");
            }
        }
        for w in writes {
            if let WriteKind::Rela {
                r_type: R_JUMP_SLOT,
                ..
            } = w.kind
            {
                if w.start < first || w.end > end {
                    bail!(
                        "{} entry {} (R_X86_64_JUMP_SLOT) writes at {:#x}, outside the PLT GOT slots {first:#x}..{end:#x}",
                        w.table,
                        w.entry,
                        w.start
                    );
                }
            }
        }
        let Some(sec) = self.sections.iter().find(|s| {
            s.addr == pltgot && s.flags & SHF_ALLOC != 0 && s.sh_type != SHT_NOBITS && s.size > 0
        }) else {
            return Ok(());
        };
        if sec.size < 24 + words * 8 {
            bail!(
                "{} at DT_PLTGOT holds {:#x} bytes, fewer than 24 plus the {words} words DT_JMPREL fills",
                self.section_named(sec),
                sec.size
            );
        }
        // A word holding a link-time address (a lazy PLT slot) that no
        // relocation adjusts would be jumped to unrelocated. The offset word
        // after an R_X86_64_DTPMOD64 is a link-time constant.
        for k in 3..sec.size / 8 {
            let word = sec.addr + k * 8;
            let v = u64_at(self.data, sec.offset + k * 8).unwrap_or(0);
            if v == 0 || covered(word) {
                continue;
            }
            let i = writes.partition_point(|w| w.end <= word - 8);
            let after_dtpmod = writes.get(i).is_some_and(|w| {
                w.start == word - 8
                    && matches!(
                        w.kind,
                        WriteKind::Rela {
                            r_type: R_DTPMOD64,
                            ..
                        }
                    )
            });
            if !after_dtpmod {
                bail!("GOT word {k} at {word:#x} holds {v:#x} but is not relocated");
            }
        }
        Ok(())
    }

    /// Function entry addresses from `.symtab` and `.dynsym`, plus the
    /// starts of executable sections, when the image has a `.symtab`.
    fn entry_points(&self, dynsyms: &[Sym]) -> Result<Option<Vec<u64>>> {
        let Some(symtab) = self.sections.iter().find(|s| s.sh_type == SHT_SYMTAB) else {
            return Ok(None);
        };
        let mut out: Vec<u64> = Vec::new();
        let n = symtab.size / 24;
        for i in 0..n {
            let at = symtab.offset + i * 24;
            let info = self.data.get(at as usize + 4).copied().unwrap_or(0);
            let shndx = u16_at(self.data, at + 6).unwrap_or(0);
            let value = u64_at(self.data, at + 8).unwrap_or(0);
            if matches!(info & 0xf, STT_FUNC | STT_GNU_IFUNC) && shndx != SHN_UNDEF {
                out.push(value);
            }
        }
        for s in dynsyms {
            if matches!(s.typ(), STT_FUNC | STT_GNU_IFUNC) && s.defined() {
                out.push(s.value);
            }
        }
        for s in &self.sections {
            if s.flags & (SHF_ALLOC | SHF_EXECINSTR) == SHF_ALLOC | SHF_EXECINSTR {
                out.push(s.addr);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(Some(out))
    }

    fn check_call(
        &self,
        what: impl Display,
        target: u64,
        entries: Option<&Vec<u64>>,
    ) -> Result<()> {
        if !self.executable(target) {
            bail!("{what} {target:#x} does not point into executable code");
        }
        if let Some(e) = entries {
            if e.binary_search(&target).is_err() {
                bail!("{what} {target:#x} is not the start of a function");
            }
        }
        Ok(())
    }

    /// Checks each entry of an init/fini array; returns the entry count.
    fn check_array(
        &self,
        name: &str,
        addr: u64,
        size: u64,
        writes: &[Write],
        syms: &[Sym],
        entries: Option<&Vec<u64>>,
    ) -> Result<u64> {
        if !size.is_multiple_of(8) {
            bail!("{name} size {size:#x} is not a multiple of 8");
        }
        if size == 0 {
            return Ok(0);
        }
        let off = self.readable(name, addr, size)?;
        for k in 0..size / 8 {
            let slot = addr + k * 8;
            let i = writes.partition_point(|w| w.end <= slot);
            let hits: Vec<&Write> = writes[i..]
                .iter()
                .take_while(|w| w.start < slot + 8)
                .collect();
            let what = format_args!("{name}[{k}] at {slot:#x}");
            let [w] = hits[..] else {
                bail!(
                    "{what} is relocated by {} relocations (expected exactly one: it would be called at an unrelocated address)",
                    hits.len()
                );
            };
            if w.start != slot || w.end != slot + 8 {
                bail!(
                    "{what} is only partly relocated ({} entry {})",
                    w.table,
                    w.entry
                );
            }
            let target = match w.kind {
                WriteKind::Relr => u64_at(self.data, off + k * 8).unwrap_or(0),
                WriteKind::Rela {
                    r_type: R_RELATIVE,
                    addend,
                    ..
                } => addend as u64,
                WriteKind::Rela {
                    r_type: R_64,
                    sym,
                    addend,
                } => {
                    let s = syms.get(sym as usize).copied();
                    match s {
                        None => addend as u64,
                        Some(s) if sym == 0 => s.value.wrapping_add(addend as u64),
                        Some(s) if !s.defined() => {
                            if s.bind() != 1 {
                                bail!("{what} refers to undefined symbol {sym}, which is not global (a missing weak symbol would be called as address 0)");
                            }
                            continue;
                        }
                        Some(s) if s.typ() == STT_GNU_IFUNC => {
                            bail!("{what} refers to IFUNC symbol {sym}");
                        }
                        Some(s) => s.value.wrapping_add(addend as u64),
                    }
                }
                WriteKind::Rela { r_type, .. } => bail!(
                    "{what} is relocated by {} ({} entry {}), which does not make a function address",
                    reloc_name(r_type),
                    w.table,
                    w.entry
                ),
            };
            self.check_call(what, target, entries)?;
        }
        Ok(size / 8)
    }
}

struct Strtab<'a> {
    bytes: &'a [u8],
}

impl<'a> Strtab<'a> {
    fn get(&self, what: impl Display, off: u64) -> Result<&'a [u8]> {
        let start = usize::try_from(off).unwrap_or(usize::MAX);
        let Some(rest) = self.bytes.get(start..) else {
            bail!(
                "{what}: string offset {off:#x} lies outside the {:#x}-byte string table",
                self.bytes.len()
            );
        };
        match rest.iter().position(|&b| b == 0) {
            Some(n) => Ok(&rest[..n]),
            None => bail!("{what}: the string at offset {off:#x} is not NUL-terminated inside the string table"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut [u8], off: usize, n: usize, v: u64) {
        for i in 0..n {
            b[off + i] = (v >> (8 * i)) as u8;
        }
    }

    const DYN: usize = 248;

    /// A minimal valid image: one RWX `PT_LOAD` mapping the whole file at
    /// address 0, `PT_DYNAMIC`, `.dynstr`, a one-entry `.dynsym` and a GNU
    /// hash table, no section headers.
    fn minimal() -> Vec<u8> {
        let mut b = vec![0u8; 360];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        put(&mut b, 16, 2, 3); // ET_DYN
        put(&mut b, 18, 2, 62); // EM_X86_64
        put(&mut b, 20, 4, 1);
        put(&mut b, 32, 8, 64); // e_phoff
        put(&mut b, 52, 2, 64);
        put(&mut b, 54, 2, 56);
        put(&mut b, 56, 2, 2);
        // PT_LOAD
        put(&mut b, 64, 4, 1);
        put(&mut b, 68, 4, 7);
        put(&mut b, 64 + 32, 8, 360);
        put(&mut b, 64 + 40, 8, 360);
        put(&mut b, 64 + 48, 8, 0x1000);
        // PT_DYNAMIC
        let p = 120;
        put(&mut b, p, 4, 2);
        put(&mut b, p + 4, 4, 6);
        put(&mut b, p + 8, 8, DYN as u64);
        put(&mut b, p + 16, 8, DYN as u64);
        put(&mut b, p + 32, 8, 112);
        put(&mut b, p + 40, 8, 112);
        put(&mut b, p + 48, 8, 8);
        b[177..186].copy_from_slice(b"libc.so.6");
        // GNU hash: 1 bucket, symoffset 1, 1 Bloom word, shift 6.
        put(&mut b, 216, 4, 1);
        put(&mut b, 220, 4, 1);
        put(&mut b, 224, 4, 1);
        put(&mut b, 228, 4, 6);
        let tags = [
            (DT_NEEDED, 1),
            (DT_STRTAB, 176),
            (DT_STRSZ, 11),
            (DT_SYMTAB, 192),
            (DT_SYMENT, 24),
            (DT_GNU_HASH, 216),
        ];
        for (i, (t, v)) in tags.iter().enumerate() {
            put(&mut b, DYN + i * 16, 8, *t);
            put(&mut b, DYN + i * 16 + 8, 8, *v);
        }
        b
    }

    fn refused(b: &[u8], expect: &str) {
        match x86_64_shared_object(b) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains(expect), "expected {expect:?} in {msg:?}");
            }
            Ok(c) => panic!("expected {expect:?}, got {c:?}"),
        }
    }

    fn with(f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
        let mut b = minimal();
        f(&mut b);
        b
    }

    #[test]
    fn the_minimal_image_is_accepted() {
        let c = x86_64_shared_object(&minimal()).unwrap();
        assert_eq!(c.needed, vec!["libc.so.6".to_string()]);
        assert_eq!(c.symbols, 1);
        assert_eq!(c.relocations, 0);
        assert!(!c.entry_points_checked);
    }

    #[test]
    fn bad_headers() {
        assert!(matches!(
            x86_64_shared_object(b""),
            Err(ImageError::Truncated { .. })
        ));
        assert!(matches!(
            x86_64_shared_object(&[0u8; 64]),
            Err(ImageError::NotElf { .. })
        ));
        refused(&with(|b| b[4] = 1), "EI_CLASS] is 1");
        refused(&with(|b| b[5] = 2), "EI_DATA] is 2");
        refused(&with(|b| b[6] = 0), "EI_VERSION] is 0");
        refused(&with(|b| b[7] = 9), "EI_OSABI] is 9");
        refused(&with(|b| put(b, 16, 2, 2)), "e_type is 2");
        refused(&with(|b| put(b, 18, 2, 3)), "e_machine is 3");
        refused(&with(|b| put(b, 20, 4, 0)), "e_version is 0");
        refused(&with(|b| put(b, 54, 2, 64)), "e_phentsize is 64");
        refused(&with(|b| put(b, 56, 2, 0)), "e_phnum is 0");
        refused(&with(|b| put(b, 56, 2, 513)), "e_phnum is 513");
        refused(&with(|b| put(b, 56, 2, 40)), "program header table");
        refused(
            &with(|b| put(b, 32, 8, u64::MAX - 8)),
            "program header table",
        );
        refused(&with(|b| put(b, 60, 2, 3)), "e_shentsize is 0");
        refused(
            &with(|b| {
                put(b, 58, 2, 64);
                put(b, 60, 2, 3);
                put(b, 40, 8, 300);
            }),
            "section header table",
        );
    }

    #[test]
    fn bad_segments() {
        refused(&with(|b| put(b, 64, 4, 0)), "no PT_LOAD");
        refused(&with(|b| put(b, 104, 8, 0)), "p_memsz 0");
        refused(&with(|b| put(b, 96, 8, 400)), "exceeds p_memsz");
        refused(
            &with(|b| {
                put(b, 96, 8, 400);
                put(b, 104, 8, 400);
            }),
            "lies outside the file",
        );
        refused(&with(|b| put(b, 112, 8, 0x1800)), "p_align 0x1800");
        refused(&with(|b| put(b, 112, 8, 1 << 40)), "p_align");
        refused(&with(|b| put(b, 80, 8, 0x10)), "modulo the page size");
        refused(&with(|b| put(b, 104, 8, u64::MAX)), "ends beyond");
        refused(&with(|b| put(b, 120, 4, 0)), "0 PT_DYNAMIC");
        refused(&with(|b| put(b, 120, 4, 1)), "not in ascending order");
        refused(&with(|b| put(b, 128, 8, 0x4000)), "PT_DYNAMIC at 0xf8");
        refused(&with(|b| put(b, 136, 8, 0x4000)), "PT_DYNAMIC");
        refused(
            &with(|b| put(b, 152, 8, 0)),
            "PT_DYNAMIC (program header 1) is empty",
        );
        refused(&with(|b| put(b, 68, 4, 3)), "readable");
    }

    #[test]
    fn bad_dynamic_sections() {
        refused(
            &with(|b| put(b, DYN + 5 * 16, 8, DT_NULL)),
            "neither DT_GNU_HASH nor DT_HASH",
        );
        refused(
            &with(|b| {
                for i in 6..7 {
                    put(b, DYN + i * 16, 8, 0x6000_0000);
                }
            }),
            "no DT_NULL",
        );
        refused(
            &with(|b| put(b, DYN + 16, 8, DT_SYMTAB)),
            "DT_SYMTAB appears more than once",
        );
        refused(&with(|b| put(b, DYN + 16, 8, 0x6000_0000)), "no DT_STRTAB");
        refused(
            &with(|b| put(b, DYN + 4 * 16 + 8, 8, 16)),
            "DT_SYMENT is 16",
        );
        refused(
            &with(|b| put(b, DYN + 8, 8, 0x20)),
            "DT_NEEDED: string offset 0x20 lies outside",
        );
        refused(&with(|b| b[186] = b'x'), "not NUL-terminated");
        refused(&with(|b| put(b, DYN + 2 * 16 + 8, 8, 0)), "DT_STRSZ is 0");
        refused(
            &with(|b| put(b, DYN + 2 * 16 + 8, 8, 1000)),
            "DT_STRTAB at 0xb0",
        );
        refused(
            &with(|b| put(b, DYN + 4 * 16, 8, DT_REL)),
            "DT_REL is present",
        );
        refused(
            &with(|b| put(b, DYN + 4 * 16, 8, DT_TEXTREL)),
            "text relocations",
        );
        refused(
            &with(|b| put(b, DYN + 4 * 16, 8, DT_RELA)),
            "DT_RELA is present without DT_RELASZ",
        );
        refused(
            &with(|b| put(b, DYN + 4 * 16, 8, DT_JMPREL)),
            "DT_JMPREL is present without",
        );
        refused(
            &with(|b| put(b, DYN + 4 * 16, 8, DT_INIT_ARRAY)),
            "without DT_INIT_ARRAYSZ",
        );
        refused(
            &with(|b| put(b, DYN + 4 * 16, 8, DT_VERNEED)),
            "without DT_VERNEEDNUM",
        );
        refused(
            &with(|b| {
                put(b, DYN + 4 * 16, 8, DT_INIT);
                put(b, 68, 4, 6);
            }),
            "DT_INIT 0x18 does not point into executable code",
        );
        refused(&with(|b| put(b, 224, 4, 3)), "Bloom filter size 3");
        refused(&with(|b| put(b, 228, 4, 40)), "Bloom shift 40");
        refused(
            &with(|b| {
                put(b, 220, 4, 5);
                put(b, 240, 4, 2);
            }),
            "holds symbol 2, below symoffset 5",
        );
        // A bucket whose chain lies beyond the file.
        refused(&with(|b| put(b, 240, 4, 1000)), "the chain of symbol 1000");
    }

    #[test]
    fn no_panic_on_any_single_byte_change_or_truncation() {
        let good = minimal();
        for len in 0..good.len() {
            assert!(x86_64_shared_object(&good[..len]).is_err(), "{len}");
        }
        let mut b = good.clone();
        for p in 0..good.len() {
            for v in [0, 1, 0x7f, 0x80, 0xff, good[p] ^ 0x80] {
                b[p] = v;
                let _ = x86_64_shared_object(&b);
            }
            b[p] = good[p];
        }
    }
}
