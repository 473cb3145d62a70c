//! The preamble of a session connection: when a server runs each session
//! in its own process (`HelloEvent.session_connection`), the client opens a
//! second connection to the same address for the session's calls and
//! starts it with these bytes, so the server can hand the socket to the
//! session's process before any gRPC (or TLS) byte is read.

/// First bytes of the preamble. Its first byte is neither the first byte of
/// the HTTP/2 preface (`P`) nor of a TLS record (0x16).
pub const MAGIC: &[u8; 8] = b"OFLDSES1";
/// Length of a session's public id (hex characters).
pub const ID_BYTES: usize = 16;
/// The whole preamble: magic, then the public session id.
pub const PREAMBLE_BYTES: usize = MAGIC.len() + ID_BYTES;

/// The preamble for the session with public id `id` (the part of the
/// session credential before the dot); None if `id` has the wrong shape.
pub fn preamble(id: &str) -> Option<[u8; PREAMBLE_BYTES]> {
    if id.len() != ID_BYTES || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; PREAMBLE_BYTES];
    out[..MAGIC.len()].copy_from_slice(MAGIC);
    out[MAGIC.len()..].copy_from_slice(id.as_bytes());
    Some(out)
}

/// The public session id a preamble names, if it is one.
pub fn parse(bytes: &[u8; PREAMBLE_BYTES]) -> Option<&str> {
    let (magic, id) = bytes.split_at(MAGIC.len());
    if magic != MAGIC || !id.iter().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    std::str::from_utf8(id).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let p = preamble("0123456789abcdef").unwrap();
        assert_eq!(parse(&p), Some("0123456789abcdef"));
        assert!(preamble("short").is_none());
        assert!(preamble("0123456789abcdeg").is_none());
        let mut bad = p;
        bad[0] = b'P';
        assert!(parse(&bad).is_none());
        let mut bad = p;
        bad[20] = b'/';
        assert!(parse(&bad).is_none());
    }
}
