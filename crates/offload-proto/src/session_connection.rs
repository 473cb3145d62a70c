//! The preamble of a session connection: when a server runs each session
//! in its own process (`HelloEvent.session_connection`), the client opens a
//! second connection to the same address for the session's calls and
//! starts it with these bytes, so the server can hand the socket to the
//! session's process before any gRPC (or TLS) byte is read.
//!
//! The preamble carries the whole session credential (`<id>.<secret>`, as
//! the authenticated Hello reply gave it), not just the public id: the
//! server hands the socket over only when the secret matches (compared in
//! constant time), so knowing a session's public id opens nothing.

/// First bytes of the preamble. Its first byte is neither the first byte of
/// the HTTP/2 preface (`P`) nor of a TLS record (0x16).
pub const MAGIC: &[u8; 8] = b"OFLDSES2";
/// Length of a session's public id (hex characters).
pub const ID_BYTES: usize = 16;
/// Length of a session's secret (hex characters).
pub const SECRET_BYTES: usize = 32;
/// The whole preamble: magic, the public session id, then its secret.
pub const PREAMBLE_BYTES: usize = MAGIC.len() + ID_BYTES + SECRET_BYTES;

fn hex(b: &[u8]) -> bool {
    b.iter().all(u8::is_ascii_hexdigit)
}

/// The preamble for the session credential `credential` (`<id>.<secret>`,
/// from `HelloEvent.session`); None if it has the wrong shape.
pub fn preamble(credential: &str) -> Option<[u8; PREAMBLE_BYTES]> {
    let (id, secret) = credential.split_once('.')?;
    if id.len() != ID_BYTES || secret.len() != SECRET_BYTES {
        return None;
    }
    if !hex(id.as_bytes()) || !hex(secret.as_bytes()) {
        return None;
    }
    let mut out = [0u8; PREAMBLE_BYTES];
    out[..MAGIC.len()].copy_from_slice(MAGIC);
    out[MAGIC.len()..MAGIC.len() + ID_BYTES].copy_from_slice(id.as_bytes());
    out[MAGIC.len() + ID_BYTES..].copy_from_slice(secret.as_bytes());
    Some(out)
}

/// The public session id and secret a preamble names, if it is one.
pub fn parse(bytes: &[u8; PREAMBLE_BYTES]) -> Option<(&str, &str)> {
    let (magic, rest) = bytes.split_at(MAGIC.len());
    if magic != MAGIC || !hex(rest) {
        return None;
    }
    let (id, secret) = rest.split_at(ID_BYTES);
    Some((
        std::str::from_utf8(id).ok()?,
        std::str::from_utf8(secret).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "00112233445566778899aabbccddeeff";

    #[test]
    fn round_trip_and_refusals() {
        let cred = format!("0123456789abcdef.{SECRET}");
        let p = preamble(&cred).unwrap();
        assert_eq!(parse(&p), Some(("0123456789abcdef", SECRET)));
        assert!(preamble("0123456789abcdef").is_none(), "public id alone");
        assert!(preamble(&format!("short.{SECRET}")).is_none());
        assert!(preamble(&format!("0123456789abcdeg.{SECRET}")).is_none());
        assert!(preamble("0123456789abcdef.0011").is_none());
        let mut bad = p;
        bad[0] = b'P';
        assert!(parse(&bad).is_none());
        let mut bad = p;
        bad[20] = b'/';
        assert!(parse(&bad).is_none());
        let mut bad = p;
        bad[PREAMBLE_BYTES - 1] = b'.';
        assert!(parse(&bad).is_none());
    }
}
