//! Writing results: stdout without panics, JSON, and small formatting helpers.

use std::io::Write;

use serde::ser::{Serialize, SerializeMap, Serializer};

/// Writes `text` to stdout. A closed pipe (`offload info | head -1`) is not
/// an error; other write failures are.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to standard output")),
    }
}

/// Prints `value` as one pretty-printed JSON document.
pub fn emit_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    emit(&text)
}

/// An ordered string map that serialises as a JSON object in its own order.
#[derive(Debug, Clone, Default)]
pub struct OrderedMap(pub Vec<(String, String)>);

impl Serialize for OrderedMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `12345678 (11.8 MiB)`-style rendering of a byte count.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{n} B ({v:.1} {})", UNITS[unit])
}

/// `s` as is when it is plain printable text, else Rust-quoted so control
/// characters stay visible and on one line.
pub fn text(s: &str) -> String {
    if s.chars().any(|c| c.is_control()) {
        format!("{s:?}")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_map_keeps_order() {
        let m = OrderedMap(vec![("z".into(), "1".into()), ("a".into(), "2".into())]);
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"z":"1","a":"2"}"#);
    }

    #[test]
    fn byte_counts() {
        assert_eq!(bytes(10), "10 B");
        assert_eq!(bytes(2048), "2048 B (2.0 KiB)");
        assert_eq!(bytes(3 << 30), "3221225472 B (3.0 GiB)");
        assert_eq!(bytes(u64::MAX), "18446744073709551615 B (16.0 EiB)");
    }

    #[test]
    fn text_quotes_control_characters() {
        assert_eq!(text("a b"), "a b");
        assert_eq!(text("a\nb"), "\"a\\nb\"");
    }
}
