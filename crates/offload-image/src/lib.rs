//! Parsers and writers for the containers that carry offload device images.
//!
//! This crate understands the formats a Rust re-implementation of LLVM's
//! offload runtime (libomptarget) meets when it is handed a device image:
//!
//! * [`offload_binary`]: LLVM's `OffloadBinary` container (magic
//!   `10 FF 10 AD`), possibly several concatenated back to back, as found in
//!   the `.llvm.offloading` section of host objects and executables;
//! * [`metadata`]: the `1OMP` metadata header (a YAML mapping of compile
//!   options, producer, target ID, vendor, ... in front of an image);
//! * [`elf`]: the facts the runtime needs from an ELF file (class, byte order,
//!   machine, type, defined symbols, `.llvm.offloading` sections);
//! * LLVM bitcode, which is only recognised;
//! * [`validate`]: whether an x86-64 shared object is safe to hand to the
//!   dynamic loader (`dlopen`): ELF and program headers, the dynamic section,
//!   hash tables, symbols, versions and relocations are checked the way
//!   glibc's `ld.so` uses them, so that a corrupt image is an error instead
//!   of an `ld.so` assertion or a crash (the rules are listed in the
//!   module's documentation).
//!
//! [`unwrap`] strips containers recursively and yields every leaf
//! [`DeviceImage`] together with what the containers said about it;
//! [`images_in_host_binary`] does the same for the offloading sections of a
//! host executable or object file.
//!
//! # Design rules
//!
//! * **Never panics on input.** Every parser takes untrusted bytes and returns
//!   an [`ImageError`] naming what is wrong and where (offset / value) instead
//!   of panicking; this is exercised by deterministic hostile-input tests and
//!   by the cargo-fuzz target in `fuzz/`.
//! * **Bounds-checked.** Every offset and size read from the input is
//!   validated with checked arithmetic against the enclosing buffer before it
//!   is used; strings must be NUL-terminated inside their container.
//! * **Zero-copy.** Parsed images borrow from the input (`&'a [u8]`); only
//!   small metadata (string maps, symbol names) is copied into owned
//!   `String`s.
//! * **Bounded recursion and amplification.** Containers may nest (an
//!   `OffloadBinary` inside a `1OMP` header or vice versa) at most
//!   [`MAX_NESTING`] levels deep; YAML aliases are rejected; the strings an
//!   `OffloadBinary` decodes to, and the string data [`unwrap`] copies into
//!   its leaves, are capped relative to the input size, so a small input
//!   cannot demand huge allocations.
//! * **Text is UTF-8.** `OffloadBinary` strings and `1OMP` YAML must be valid
//!   UTF-8 (an error otherwise); ELF symbol names are converted lossily.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

pub mod amdgpu;
pub mod cuda;
pub mod elf;
pub mod entries;
pub mod metadata;
pub mod offload_binary;
mod unwrap;
pub mod validate;

#[cfg(test)]
mod test_elf;

pub use unwrap::{images_in_host_binary, unwrap, DeviceImage, MAX_NESTING};

/// The kind of a byte buffer, as recognised from its leading magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    /// An ELF file (`7F 45 4C 46`).
    Elf,
    /// An LLVM `OffloadBinary` (`10 FF 10 AD`).
    OffloadBinary,
    /// A `1OMP` metadata header followed by an image.
    MetadataHeader,
    /// LLVM bitcode (`42 43 C0 DE`, or the bitcode wrapper `DE C0 17 0B`).
    Bitcode,
    /// Anything else (PTX text, fatbinaries, SPIR-V, garbage, ...).
    Unknown,
}

impl fmt::Display for ImageFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ImageFormat::Elf => "ELF",
            ImageFormat::OffloadBinary => "OffloadBinary",
            ImageFormat::MetadataHeader => "1OMP metadata header",
            ImageFormat::Bitcode => "LLVM bitcode",
            ImageFormat::Unknown => "unknown",
        })
    }
}

const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
const BITCODE_MAGIC: [u8; 4] = [0x42, 0x43, 0xC0, 0xDE];
const BITCODE_WRAPPER_MAGIC: [u8; 4] = [0xDE, 0xC0, 0x17, 0x0B];

/// Recognises the format of `bytes` from its first four bytes.
///
/// Only the magic is looked at: a buffer that is detected as some format may
/// still fail to parse as that format.
pub fn detect(bytes: &[u8]) -> ImageFormat {
    let Some(magic) = bytes.get(..4) else {
        return ImageFormat::Unknown;
    };
    if magic == ELF_MAGIC {
        ImageFormat::Elf
    } else if magic == offload_binary::MAGIC {
        ImageFormat::OffloadBinary
    } else if magic == metadata::MAGIC {
        ImageFormat::MetadataHeader
    } else if magic == BITCODE_MAGIC || magic == BITCODE_WRAPPER_MAGIC {
        ImageFormat::Bitcode
    } else {
        ImageFormat::Unknown
    }
}

/// Everything that can go wrong while reading or writing images.
///
/// Offsets are byte offsets from the start of the buffer handed to the
/// function that failed (for [`offload_binary::parse_all`], from the start of
/// the whole concatenation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The buffer ends before a structure that must be there.
    #[error("truncated {what} at offset {offset:#x}: need {needed} bytes but only {available} are available")]
    Truncated {
        /// The structure that does not fit.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// How many bytes it needs.
        needed: u64,
        /// How many bytes there are from `offset` to the end.
        available: u64,
    },
    /// The magic bytes are not those of the expected format.
    #[error("bad {what} magic at offset {offset:#x}: found {found}")]
    BadMagic {
        /// The format that was expected.
        what: &'static str,
        /// Where the magic was read.
        offset: u64,
        /// The bytes found, in hex.
        found: String,
    },
    /// An `OffloadBinary` whose version this crate does not read.
    #[error("OffloadBinary at offset {offset:#x} has unsupported version {version} (expected 1)")]
    UnsupportedVersion {
        /// Start of the binary.
        offset: u64,
        /// The version found.
        version: u32,
    },
    /// A header field with an impossible value.
    #[error("OffloadBinary at offset {offset:#x}: invalid {field} {value:#x}: {reason}")]
    InvalidField {
        /// Start of the binary.
        offset: u64,
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A region described by an offset and a size does not lie inside its
    /// container.
    #[error("OffloadBinary at offset {offset:#x}: {what} at {start:#x} with size {len:#x} lies outside the binary's {limit:#x} bytes")]
    OutOfBounds {
        /// Start of the binary.
        offset: u64,
        /// The region.
        what: &'static str,
        /// Its start, relative to the binary.
        start: u64,
        /// Its length.
        len: u64,
        /// The binary's size.
        limit: u64,
    },
    /// A string-table entry without a terminating NUL inside the binary.
    #[error("OffloadBinary at offset {offset:#x}: string at {string_offset:#x} is not NUL-terminated inside the binary")]
    UnterminatedString {
        /// Start of the binary.
        offset: u64,
        /// Where the string starts, relative to the binary.
        string_offset: u64,
    },
    /// Text that must be UTF-8 is not.
    #[error("{what} at offset {offset:#x} is not valid UTF-8")]
    InvalidUtf8 {
        /// What the text is.
        what: &'static str,
        /// Where it starts.
        offset: u64,
    },
    /// A `1OMP` header whose declared YAML length runs past the buffer.
    #[error("1OMP header declares {declared} bytes of YAML but only {available} bytes follow the 8-byte header")]
    MetadataTooLarge {
        /// The declared YAML length.
        declared: u64,
        /// The bytes actually present after the header.
        available: u64,
    },
    /// The `1OMP` YAML document does not parse.
    #[error("invalid YAML in 1OMP metadata: {0}")]
    Yaml(String),
    /// The `1OMP` YAML document is not a mapping.
    #[error("1OMP metadata must be a YAML mapping, found a {found}")]
    MetadataNotMapping {
        /// What was found instead (`scalar`, `sequence`, `alias`).
        found: &'static str,
    },
    /// The `1OMP` YAML mapping is a mapping but is otherwise unacceptable
    /// (duplicate or non-scalar keys, aliases, several documents, ...).
    #[error("invalid 1OMP metadata: {0}")]
    Metadata(String),
    /// A malformed or truncated ELF file.
    #[error("invalid ELF: {0}")]
    Elf(String),
    /// Bytes handed to an ELF function are not ELF.
    #[error("not an ELF file: first bytes are {found}")]
    NotElf {
        /// The first bytes, in hex.
        found: String,
    },
    /// Containers nested deeper than [`MAX_NESTING`].
    #[error("containers nested more than {limit} levels deep")]
    NestingTooDeep {
        /// The limit.
        limit: usize,
    },
    /// Top-level bytes that are no known device image format.
    #[error("not a recognised device image: {len} bytes starting with {found}")]
    Unrecognised {
        /// The first bytes, in hex.
        found: String,
        /// The buffer's length.
        len: usize,
    },
    /// A string that cannot be written (it contains a NUL byte).
    #[error("{what} {value:?} contains a NUL byte and cannot be stored in an OffloadBinary string table")]
    NulInString {
        /// `key` or `value`.
        what: &'static str,
        /// The string.
        value: String,
    },
    /// Something too large: for a size field of the format, or for the
    /// copy budget of [`unwrap`].
    #[error("{what} is too large: {size} bytes")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: u64,
    },
    /// A name that is no known image or offload kind.
    #[error("unknown {what} name {name:?}")]
    UnknownName {
        /// `image kind` or `offload kind`.
        what: &'static str,
        /// The name.
        name: String,
    },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, ImageError>;

/// Sets each `(key, value)` of `src` in `dst`: an existing key (its first
/// occurrence) gets the new value in place, a new key is appended. Linear in
/// the sizes of both, so hostile inputs with huge maps stay cheap.
pub(crate) fn merge_pairs<'s>(
    dst: &mut Vec<(String, String)>,
    src: impl IntoIterator<Item = (&'s str, &'s str)>,
) {
    let mut index: std::collections::HashMap<String, usize> =
        std::collections::HashMap::with_capacity(dst.len());
    for (i, (k, _)) in dst.iter().enumerate() {
        index.entry(k.clone()).or_insert(i);
    }
    for (k, v) in src {
        match index.get(k) {
            Some(&i) => dst[i].1 = v.to_owned(),
            None => {
                index.insert(k.to_owned(), dst.len());
                dst.push((k.to_owned(), v.to_owned()));
            }
        }
    }
}

/// Renders up to the first 8 bytes of `bytes` as hex, for error messages.
pub(crate) fn hex_prefix(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "<empty>".to_string();
    }
    let mut s = String::new();
    for (i, b) in bytes.iter().take(8).enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{b:02x}"));
    }
    if bytes.len() > 8 {
        s.push_str(" ...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_by_magic() {
        assert_eq!(detect(b"\x7fELF\x02\x01"), ImageFormat::Elf);
        assert_eq!(
            detect(&[0x10, 0xff, 0x10, 0xad]),
            ImageFormat::OffloadBinary
        );
        assert_eq!(detect(b"1OMP\0\0\0\0"), ImageFormat::MetadataHeader);
        assert_eq!(detect(&[0x42, 0x43, 0xc0, 0xde, 1]), ImageFormat::Bitcode);
        assert_eq!(detect(&[0xde, 0xc0, 0x17, 0x0b]), ImageFormat::Bitcode);
        assert_eq!(detect(b"//\n.version 7.0"), ImageFormat::Unknown);
        assert_eq!(detect(b"\x7fEL"), ImageFormat::Unknown);
        assert_eq!(detect(b""), ImageFormat::Unknown);
    }

    #[test]
    fn hex_prefix_formats() {
        assert_eq!(hex_prefix(b""), "<empty>");
        assert_eq!(hex_prefix(&[1, 0xab]), "01 ab");
        assert_eq!(hex_prefix(&[0; 9]), "00 00 00 00 00 00 00 00 ...");
    }
}
