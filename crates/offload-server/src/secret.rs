//! Secrets: random bytes from the OS and constant-time comparison.

use subtle::ConstantTimeEq;

/// `n` random bytes from the operating system's generator (`getrandom`:
/// the getrandom(2) system call, no file descriptor), as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    // Fails only where the OS has no generator: nothing safe to fall back to.
    getrandom::fill(&mut bytes).expect("the operating system's random generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A secret kept only as its SHA-256 (the supervisor never holds a
/// session's secret or the server's token in the clear after handing it
/// out): compared with a candidate's hash in constant time.
#[derive(Clone)]
pub struct Hashed([u8; 32]);

impl Hashed {
    pub fn new(secret: &str) -> Self {
        use sha2::Digest;
        Hashed(sha2::Sha256::digest(secret.as_bytes()).into())
    }

    /// Whether `candidate` is the secret (constant time).
    pub fn matches(&self, candidate: &str) -> bool {
        self.equals(&Hashed::new(candidate))
    }

    pub fn equals(&self, other: &Hashed) -> bool {
        equal(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Hashed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hashed(..)")
    }
}

/// Whether `a == b`, in time that depends only on the lengths.
pub fn equal(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_hex_is_fresh_and_sized() {
        let a = random_hex(16);
        let b = random_hex(16);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn hashed_secrets_match_only_themselves() {
        let h = Hashed::new("s3cret");
        assert!(h.matches("s3cret"));
        assert!(!h.matches("s3cre"));
        assert!(!h.matches(""));
        assert!(!format!("{h:?}").contains("s3cret"));
    }

    #[test]
    fn equal_compares_contents_and_lengths() {
        assert!(equal(b"abc", b"abc"));
        assert!(!equal(b"abc", b"abd"));
        assert!(!equal(b"abc", b"abcd"));
        assert!(equal(b"", b""));
    }
}
