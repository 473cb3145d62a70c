//! The `1OMP` metadata header.
//!
//! Layout:
//!
//! ```text
//! "1OMP" | u32 N (little-endian) | N bytes: a UTF-8 YAML document | image bytes
//! ```
//!
//! `N` is the length of the YAML document alone: it does **not** count the 8
//! bytes of magic and size, so the image starts at offset `8 + N` and runs to
//! the end of the buffer. [`write()`] pads the document with trailing newlines
//! so that the image starts on an 8-byte boundary.
//!
//! The document must be a YAML mapping (an empty document is an empty
//! mapping). Keys are kept in document order, unknown keys included.
//!
//! Value rules:
//!
//! * scalars are kept as strings, exactly as YAML unescapes them, with no type
//!   resolution: `VendorId: 0x1002` gives `"0x1002"`, `Flag: true` gives
//!   `"true"`, and an empty value gives `""`; tags are ignored;
//! * a sequence or mapping value is kept as a faithful flow-style YAML
//!   rendering of it with every scalar double-quoted, e.g.
//!   `["-O2", "-g"]` or `{"a": "1"}` (it is a string from then on: writing
//!   it back stores it as a quoted scalar);
//! * keys must be scalars and must not repeat; anchors are allowed but
//!   aliases are rejected (no alias expansion, so no "billion laughs").
//!
//! [`write()`] double-quotes every key and value and escapes every character
//! that could change its meaning, so any string survives a round trip.

use std::collections::HashSet;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::{hex_prefix, ImageError, Result};

/// The magic bytes of the header.
pub const MAGIC: &[u8; 4] = b"1OMP";
/// Size of the magic plus the length field.
pub const HEADER_SIZE: usize = 8;

/// Compiler options used to build the image.
pub const COMPILE_OPTIONS: &str = "CompileOptions";
/// Linker options used to build the image.
pub const LINK_OPTIONS: &str = "LinkOptions";
/// The tool that produced the image.
pub const PRODUCER: &str = "Producer";
/// The target ID, e.g. `amdgcn-amd-amdhsa--gfx90a:xnack+` or `gfx90a`.
pub const TARGET_ID: &str = "TargetID";
/// The device vendor's numeric ID.
pub const VENDOR_ID: &str = "VendorId";
/// The device vendor's name.
pub const VENDOR_NAME: &str = "VendorName";

/// Deepest nesting of a sequence/mapping value that is rendered.
const MAX_VALUE_DEPTH: usize = 64;

/// An ordered string-to-string map.
///
/// Keys are meant to be unique: [`insert`](Self::insert) keeps them so. If
/// `entries` is edited directly and holds a key twice, [`get`](Self::get) and
/// [`write()`] use the first occurrence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Metadata {
    /// The entries in order.
    pub entries: Vec<(String, String)>,
}

impl Metadata {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` to `value`. An existing key keeps its position and its old
    /// value is returned; a new key is appended.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> Option<String> {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                self.entries.push((key, value));
                None
            }
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// [`insert`](Self::insert)s every entry of `other`: its values win, keys
    /// already present keep their position, new keys are appended in
    /// `other`'s order.
    pub fn merge(&mut self, other: &Metadata) {
        crate::merge_pairs(&mut self.entries, other.iter());
    }

    /// The [`TARGET_ID`] value.
    pub fn target_id(&self) -> Option<&str> {
        self.get(TARGET_ID)
    }

    /// The processor part of the [`TARGET_ID`] value, see
    /// [`arch_from_target_id`].
    pub fn arch(&self) -> Option<&str> {
        self.target_id().and_then(arch_from_target_id)
    }

    /// Renders the YAML document [`write()`] stores (without alignment padding).
    pub fn to_yaml(&self) -> String {
        if self.entries.is_empty() {
            return "{}\n".to_string();
        }
        let mut seen = HashSet::new();
        let mut out = String::new();
        for (k, v) in &self.entries {
            if !seen.insert(k.as_str()) {
                continue;
            }
            out.push_str(&quote(k));
            out.push_str(": ");
            out.push_str(&quote(v));
            out.push('\n');
        }
        out
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Metadata::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// The processor (with target features) named by a target ID.
///
/// * `amdgcn-amd-amdhsa--gfx90a:xnack+` (triple, `--`, processor) gives
///   `gfx90a:xnack+`, the part after the last `--`;
/// * a string without `-`, such as `gfx90a` or `gfx90a:xnack+` or `sm_80`,
///   is the processor itself;
/// * anything else (a bare triple such as `x86_64-unknown-linux-gnu`) names
///   no processor: `None`. An empty processor is `None` too.
///
/// Target features are kept, as LLVM keeps them in an `OffloadBinary`'s
/// `arch` string.
pub fn arch_from_target_id(target_id: &str) -> Option<&str> {
    let t = target_id.trim();
    let arch = if let Some(i) = t.rfind("--") {
        &t[i + 2..]
    } else if !t.contains('-') {
        t
    } else {
        return None;
    };
    (!arch.is_empty()).then_some(arch)
}

/// Quotes `s` as a YAML double-quoted scalar that reads back as exactly `s`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            '\u{85}' => out.push_str("\\N"),
            '\u{a0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            '\u{feff}' | '\u{fffe}' | '\u{ffff}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Events<'a> {
    parser: Parser<std::str::Chars<'a>>,
}

impl Events<'_> {
    fn next(&mut self) -> Result<(Event, Marker)> {
        self.parser
            .next_token()
            .map_err(|e| ImageError::Yaml(e.to_string()))
    }
}

fn at(mark: &Marker) -> String {
    format!("line {} column {}", mark.line(), mark.col() + 1)
}

fn unexpected(ev: &Event, mark: &Marker) -> ImageError {
    ImageError::Metadata(format!("unexpected YAML event {ev:?} at {}", at(mark)))
}

/// Appends a flow-style rendering of the node that starts with `first`.
fn render(
    events: &mut Events<'_>,
    first: Event,
    mark: Marker,
    depth: usize,
    out: &mut String,
) -> Result<()> {
    if depth > MAX_VALUE_DEPTH {
        return Err(ImageError::Metadata(format!(
            "value nested more than {MAX_VALUE_DEPTH} levels deep at {}",
            at(&mark)
        )));
    }
    match first {
        Event::Scalar(s, ..) => out.push_str(&quote(&s)),
        Event::SequenceStart(..) => {
            out.push('[');
            let mut n = 0;
            loop {
                let (ev, m) = events.next()?;
                if matches!(ev, Event::SequenceEnd) {
                    break;
                }
                if n > 0 {
                    out.push_str(", ");
                }
                n += 1;
                render(events, ev, m, depth + 1, out)?;
            }
            out.push(']');
        }
        Event::MappingStart(..) => {
            out.push('{');
            let mut n = 0;
            loop {
                let (ev, m) = events.next()?;
                if matches!(ev, Event::MappingEnd) {
                    break;
                }
                if n > 0 {
                    out.push_str(", ");
                }
                n += 1;
                render(events, ev, m, depth + 1, out)?;
                out.push_str(": ");
                let (ev, m) = events.next()?;
                render(events, ev, m, depth + 1, out)?;
            }
            out.push('}');
        }
        Event::Alias(_) => {
            return Err(ImageError::Metadata(format!(
                "YAML aliases are not supported (at {})",
                at(&mark)
            )))
        }
        ev => return Err(unexpected(&ev, &mark)),
    }
    Ok(())
}

/// Parses a metadata YAML document (the part after the 8-byte header).
pub fn parse_yaml(text: &str) -> Result<Metadata> {
    let mut events = Events {
        parser: Parser::new_from_str(text),
    };
    let mut meta = Metadata::new();

    match events.next()? {
        (Event::StreamStart, _) => {}
        (ev, m) => return Err(unexpected(&ev, &m)),
    }
    match events.next()? {
        (Event::StreamEnd, _) => return Ok(meta),
        (Event::DocumentStart, _) => {}
        (ev, m) => return Err(unexpected(&ev, &m)),
    }
    match events.next()? {
        (Event::MappingStart(..), _) => {
            let mut seen = HashSet::new();
            loop {
                let (ev, mark) = events.next()?;
                let key = match ev {
                    Event::MappingEnd => break,
                    Event::Scalar(s, ..) => s,
                    Event::Alias(_) => {
                        return Err(ImageError::Metadata(format!(
                            "YAML aliases are not supported (key at {})",
                            at(&mark)
                        )))
                    }
                    Event::SequenceStart(..) | Event::MappingStart(..) => {
                        return Err(ImageError::Metadata(format!(
                            "keys must be scalars (non-scalar key at {})",
                            at(&mark)
                        )))
                    }
                    ev => return Err(unexpected(&ev, &mark)),
                };
                if !seen.insert(key.clone()) {
                    return Err(ImageError::Metadata(format!(
                        "duplicate key {key:?} at {}",
                        at(&mark)
                    )));
                }
                let (ev, m) = events.next()?;
                let value = match ev {
                    Event::Scalar(s, ..) => s,
                    ev => {
                        let mut s = String::new();
                        render(&mut events, ev, m, 1, &mut s)?;
                        s
                    }
                };
                meta.entries.push((key, value));
            }
        }
        // An empty document.
        (Event::Scalar(s, TScalarStyle::Plain, _, None), _) if s.is_empty() || s == "~" => {}
        (Event::Scalar(..), _) => return Err(ImageError::MetadataNotMapping { found: "scalar" }),
        (Event::SequenceStart(..), _) => {
            return Err(ImageError::MetadataNotMapping { found: "sequence" })
        }
        (Event::Alias(..), _) => return Err(ImageError::MetadataNotMapping { found: "alias" }),
        (ev, m) => return Err(unexpected(&ev, &m)),
    }
    match events.next()? {
        (Event::DocumentEnd, _) => {}
        (ev, m) => return Err(unexpected(&ev, &m)),
    }
    match events.next()? {
        (Event::StreamEnd, _) => Ok(meta),
        (Event::DocumentStart, m) => Err(ImageError::Metadata(format!(
            "more than one YAML document (second starts at {})",
            at(&m)
        ))),
        (ev, m) => Err(unexpected(&ev, &m)),
    }
}

/// Parses a `1OMP` header at the start of `bytes`; returns the metadata and
/// the image (everything after the YAML document).
pub fn parse(bytes: &[u8]) -> Result<(Metadata, &[u8])> {
    if bytes.len() < HEADER_SIZE {
        return Err(ImageError::Truncated {
            what: "1OMP header",
            offset: 0,
            needed: HEADER_SIZE as u64,
            available: bytes.len() as u64,
        });
    }
    if bytes[..4] != MAGIC[..] {
        return Err(ImageError::BadMagic {
            what: "1OMP",
            offset: 0,
            found: hex_prefix(&bytes[..4]),
        });
    }
    let declared = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    let rest = &bytes[HEADER_SIZE..];
    let n = usize::try_from(declared)
        .ok()
        .filter(|&n| n <= rest.len())
        .ok_or(ImageError::MetadataTooLarge {
            declared: u64::from(declared),
            available: rest.len() as u64,
        })?;
    let (yaml, image) = rest.split_at(n);
    let text = std::str::from_utf8(yaml).map_err(|e| ImageError::InvalidUtf8 {
        what: "1OMP YAML document",
        offset: (HEADER_SIZE + e.valid_up_to()) as u64,
    })?;
    Ok((parse_yaml(text)?, image))
}

/// Builds `1OMP` + length + YAML + `image`, like [`write()`], failing only if
/// the YAML document would not fit the 32-bit length field.
pub fn try_write(meta: &Metadata, image: &[u8]) -> Result<Vec<u8>> {
    let mut yaml = meta.to_yaml();
    while !(HEADER_SIZE + yaml.len()).is_multiple_of(8) {
        yaml.push('\n');
    }
    let n = u32::try_from(yaml.len()).map_err(|_| ImageError::TooLarge {
        what: "1OMP YAML document",
        size: yaml.len() as u64,
    })?;
    let mut out = Vec::with_capacity(HEADER_SIZE + yaml.len() + image.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(yaml.as_bytes());
    out.extend_from_slice(image);
    Ok(out)
}

/// Builds `1OMP` + length + YAML + `image`. The image starts on an 8-byte
/// boundary of the result.
///
/// # Panics
///
/// If the rendered metadata exceeds 4 GiB (see [`try_write`]).
pub fn write(meta: &Metadata, image: &[u8]) -> Vec<u8> {
    try_write(meta, image).expect("1OMP metadata larger than 4 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_basic() {
        let mut m = Metadata::new();
        m.insert(PRODUCER, "clang 22");
        m.insert(TARGET_ID, "amdgcn-amd-amdhsa--gfx90a:xnack+");
        m.insert(VENDOR_ID, "0x1002");
        let bytes = write(&m, b"IMAGE");
        assert_eq!(&bytes[..4], b"1OMP");
        let n = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        assert_eq!((8 + n) % 8, 0);
        let (p, img) = parse(&bytes).unwrap();
        assert_eq!(p, m);
        assert_eq!(img, b"IMAGE");
        assert_eq!(p.arch(), Some("gfx90a:xnack+"));
    }

    #[test]
    fn insert_keeps_position() {
        let mut m: Metadata = [("a", "1"), ("b", "2")].into_iter().collect();
        assert_eq!(m.insert("a", "3"), Some("1".to_string()));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![("a", "3"), ("b", "2")]);
        assert_eq!(m.remove("a"), Some("3".into()));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn scalars_are_not_type_resolved() {
        let m = parse_yaml("VendorId: 0x1002\nFlag: true\nEmpty:\nTilde: ~\nF: 1.50\n").unwrap();
        assert_eq!(m.get("VendorId"), Some("0x1002"));
        assert_eq!(m.get("Flag"), Some("true"));
        assert_eq!(m.get("Empty"), Some(""));
        assert_eq!(m.get("Tilde"), Some("~"));
        assert_eq!(m.get("F"), Some("1.50"));
    }

    #[test]
    fn non_scalar_values_are_rendered() {
        let m = parse_yaml("CompileOptions: [-O2, \"-g\"]\nX:\n  a: 1\n  b: [c]\n").unwrap();
        assert_eq!(m.get("CompileOptions"), Some(r#"["-O2", "-g"]"#));
        assert_eq!(m.get("X"), Some(r#"{"a": "1", "b": ["c"]}"#));
        // The rendering is itself YAML that reads back to the same structure.
        let again = parse_yaml(&format!("X: {}\n", m.get("X").unwrap())).unwrap();
        assert_eq!(again.get("X"), m.get("X"));
    }

    #[test]
    fn empty_documents() {
        assert!(parse_yaml("").unwrap().is_empty());
        assert!(parse_yaml("# just a comment\n").unwrap().is_empty());
        assert!(parse_yaml("---\n").unwrap().is_empty());
        assert!(parse_yaml("{}").unwrap().is_empty());
        let bytes = write(&Metadata::new(), b"x");
        let (m, img) = parse(&bytes).unwrap();
        assert!(m.is_empty());
        assert_eq!(img, b"x");
    }

    #[test]
    fn rejects() {
        assert!(matches!(
            parse_yaml("- a\n- b\n"),
            Err(ImageError::MetadataNotMapping { found: "sequence" })
        ));
        assert!(matches!(
            parse_yaml("hello"),
            Err(ImageError::MetadataNotMapping { found: "scalar" })
        ));
        assert!(matches!(parse_yaml("a: [b"), Err(ImageError::Yaml(_))));
        assert!(matches!(
            parse_yaml("a: 1\na: 2\n"),
            Err(ImageError::Metadata(_))
        ));
        assert!(matches!(
            parse_yaml("a: &x 1\nb: *x\n"),
            Err(ImageError::Metadata(_))
        ));
        assert!(matches!(
            parse_yaml("[a]: 1\n"),
            Err(ImageError::Metadata(_))
        ));
        assert!(matches!(
            parse_yaml("a: 1\n---\nb: 2\n"),
            Err(ImageError::Metadata(_))
        ));
    }

    #[test]
    fn arch_from_target_ids() {
        assert_eq!(
            arch_from_target_id("amdgcn-amd-amdhsa--gfx90a"),
            Some("gfx90a")
        );
        assert_eq!(arch_from_target_id("gfx90a:xnack+"), Some("gfx90a:xnack+"));
        assert_eq!(arch_from_target_id("sm_80"), Some("sm_80"));
        assert_eq!(arch_from_target_id("x86_64-unknown-linux-gnu"), None);
        assert_eq!(arch_from_target_id("amdgcn-amd-amdhsa--"), None);
        assert_eq!(arch_from_target_id(""), None);
    }

    #[test]
    fn header_errors() {
        assert!(matches!(parse(b"1OM"), Err(ImageError::Truncated { .. })));
        assert!(matches!(
            parse(b"2OMP\0\0\0\0"),
            Err(ImageError::BadMagic { .. })
        ));
        assert!(matches!(
            parse(b"1OMP\xff\xff\xff\xffabc"),
            Err(ImageError::MetadataTooLarge {
                declared: 0xffff_ffff,
                available: 3
            })
        ));
        assert!(matches!(
            parse(b"1OMP\x02\0\0\0\xff\xfe"),
            Err(ImageError::InvalidUtf8 { offset: 8, .. })
        ));
    }
}
