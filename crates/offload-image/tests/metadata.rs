//! 1OMP metadata header: quoting round trips and hostile headers.

mod common;

use common::Rng;
use offload_image::metadata::{self, parse, parse_yaml, write, Metadata};
use offload_image::ImageError;

const TRICKY: &[&str] = &[
    "",
    " ",
    "a: b",
    "key: value: more",
    ":",
    ": leading colon",
    "trailing colon:",
    "'single quoted'",
    "\"double quoted\"",
    "it's",
    "say \"hi\"",
    "line1\nline2",
    "line1\r\nline2\r",
    "\n",
    "   leading spaces",
    "trailing spaces   ",
    "\tleading tab",
    "# not a comment",
    "value # not a comment",
    "#",
    "-",
    "- item",
    "? complex",
    "{a: b}",
    "[a, b]",
    "&anchor",
    "*alias",
    "!tag value",
    "!!str",
    "%YAML 1.2",
    "---",
    "...",
    "null",
    "~",
    "true",
    "no",
    "0x1002",
    "1e3",
    "@reserved",
    "`backtick",
    "|",
    ">",
    "back\\slash\\",
    "\\n not a newline",
    "\u{0}nul",
    "\u{7}bell\u{1b}[0m",
    "\u{7f}del",
    "\u{85}nel",
    "\u{a0}nbsp",
    "\u{2028}ls\u{2029}ps",
    "\u{feff}bom",
    "\u{fffe}\u{ffff}",
    "émoji 🎉 中文",
    "-O2 -g -fopenmp --offload-arch=gfx90a:xnack+",
];

fn round_trip(m: &Metadata, image: &[u8]) {
    let bytes = write(m, image);
    let (parsed, img) = parse(&bytes).unwrap_or_else(|e| {
        panic!(
            "{e}\nYAML was:\n{}",
            String::from_utf8_lossy(&bytes[8..bytes.len() - image.len()])
        )
    });
    assert_eq!(&parsed, m);
    assert_eq!(img, image);
    // The image starts 8-aligned within the header's buffer.
    assert_eq!((bytes.len() - image.len()) % 8, 0);
}

#[test]
fn tricky_values_round_trip() {
    let mut m = Metadata::new();
    for (i, v) in TRICKY.iter().enumerate() {
        m.insert(format!("Key{i}"), *v);
    }
    round_trip(&m, b"\x7fELF...");
}

#[test]
fn tricky_keys_round_trip() {
    let mut m = Metadata::new();
    for (i, k) in TRICKY.iter().enumerate() {
        m.insert(*k, format!("v{i}"));
    }
    round_trip(&m, b"");
}

#[test]
fn random_strings_round_trip() {
    let alphabet: Vec<char> =
        "ab :#'\"\\\n\r\t-?&*!%@`|>{}[],.~\u{0}\u{1}\u{7f}\u{85}\u{a0}\u{2028}\u{feff}é🎉 "
            .chars()
            .collect();
    let mut rng = Rng::new(0x1234);
    for _ in 0..500 {
        let mut m = Metadata::new();
        for _ in 0..rng.below(6) {
            let word = |rng: &mut Rng| -> String {
                (0..rng.below(12))
                    .map(|_| alphabet[rng.below(alphabet.len())])
                    .collect()
            };
            let k = word(&mut rng);
            let v = word(&mut rng);
            m.insert(k, v);
        }
        let len = rng.below(20);
        let image = rng.bytes(len);
        round_trip(&m, &image);
    }
}

#[test]
fn well_known_keys_and_unknown_keys_keep_order() {
    let yaml = "\
Producer: clang version 22.0.0
UnknownKey: kept
TargetID: amdgcn-amd-amdhsa--gfx90a:xnack+
VendorId: 0x1002
VendorName: AMD
CompileOptions: -O3 -fopenmp
LinkOptions: ''
";
    let mut bytes = b"1OMP".to_vec();
    bytes.extend_from_slice(&(yaml.len() as u32).to_le_bytes());
    bytes.extend_from_slice(yaml.as_bytes());
    bytes.extend_from_slice(b"IMG");
    let (m, img) = parse(&bytes).unwrap();
    assert_eq!(img, b"IMG");
    let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            metadata::PRODUCER,
            "UnknownKey",
            metadata::TARGET_ID,
            metadata::VENDOR_ID,
            metadata::VENDOR_NAME,
            metadata::COMPILE_OPTIONS,
            metadata::LINK_OPTIONS
        ]
    );
    assert_eq!(m.get(metadata::VENDOR_ID), Some("0x1002"));
    assert_eq!(m.get(metadata::LINK_OPTIONS), Some(""));
    assert_eq!(m.arch(), Some("gfx90a:xnack+"));
    round_trip(&m, img);
}

fn header(n: u32, rest: &[u8]) -> Vec<u8> {
    let mut b = b"1OMP".to_vec();
    b.extend_from_slice(&n.to_le_bytes());
    b.extend_from_slice(rest);
    b
}

#[test]
fn huge_or_overlong_size_is_an_error() {
    for n in [u32::MAX, 0x8000_0000, 1000, 6] {
        match parse(&header(n, b"a: b\n")) {
            Err(ImageError::MetadataTooLarge {
                declared,
                available: 5,
            }) => assert_eq!(declared, u64::from(n)),
            other => panic!("{n}: {other:?}"),
        }
    }
    let msg = parse(&header(u32::MAX, b"")).unwrap_err().to_string();
    assert!(msg.contains("4294967295"), "{msg}");
    // Exactly the whole buffer is fine (empty image).
    let bytes = header(5, b"a: b\n");
    let (m, img) = parse(&bytes).unwrap();
    assert_eq!(m.get("a"), Some("b"));
    assert!(img.is_empty());
}

#[test]
fn bad_yaml_is_an_error() {
    for bad in [
        "a: [unclosed\n",
        "a: \"unterminated\n",
        "a: b\n c: d\n  - e\n",
        "a: @reserved\n",
        "a: 'x' y\n",
        "{a: b\n",
        "a: b: c\n",
    ] {
        let e = parse(&header(bad.len() as u32, bad.as_bytes())).unwrap_err();
        assert!(
            matches!(e, ImageError::Yaml(_) | ImageError::Metadata(_)),
            "{bad:?}: {e:?}"
        );
        assert!(e.to_string().contains("1OMP"), "{e}");
    }
}

#[test]
fn non_mapping_documents_are_errors() {
    for (doc, found) in [
        ("just a string", "scalar"),
        ("42", "scalar"),
        ("\"quoted\"", "scalar"),
        ("- a\n- b\n", "sequence"),
        ("[a, b]", "sequence"),
    ] {
        match parse_yaml(doc) {
            Err(ImageError::MetadataNotMapping { found: f }) => assert_eq!(f, found, "{doc}"),
            other => panic!("{doc:?}: {other:?}"),
        }
    }
}

#[test]
fn other_rejections() {
    assert!(matches!(
        parse_yaml("a: 1\na: 2"),
        Err(ImageError::Metadata(_))
    ));
    assert!(matches!(
        parse_yaml("a: &x [1]\nb: *x"),
        Err(ImageError::Metadata(_))
    ));
    assert!(matches!(
        parse_yaml("? [k]\n: v\n"),
        Err(ImageError::Metadata(_))
    ));
    assert!(matches!(
        parse_yaml("a: 1\n---\nb: 1\n"),
        Err(ImageError::Metadata(_))
    ));
    let deep = format!("a: {}{}\n", "[".repeat(200), "]".repeat(200));
    assert!(parse_yaml(&deep).is_err());
    assert!(matches!(
        parse(&header(2, b"\xc3\x28")),
        Err(ImageError::InvalidUtf8 { .. })
    ));
    assert!(matches!(
        parse(b"1OMP\x01\0\0"),
        Err(ImageError::Truncated { .. })
    ));
}

#[test]
fn empty_metadata_round_trips() {
    round_trip(&Metadata::new(), b"payload");
    let bytes = header(0, b"payload");
    let (m, img) = parse(&bytes).unwrap();
    assert!(m.is_empty());
    assert_eq!(img, b"payload");
}
