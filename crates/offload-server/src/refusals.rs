//! Refused authentications: logged with the peer's address, at most once a
//! second (saying how many were not logged since), so a client hammering
//! the server with bad tokens cannot flood the log; all are counted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Log lines at most this often.
const EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Refusals {
    last: Mutex<Option<Instant>>,
    not_logged: AtomicU64,
    total: AtomicU64,
}

impl Refusals {
    /// Count a refusal; log it unless one was logged within [`EVERY`].
    /// Returns whether it was logged.
    pub fn note(&self, peer: Option<SocketAddr>, reason: &str) -> bool {
        self.total.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < EVERY) {
                self.not_logged.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            *last = Some(now);
        }
        let skipped = self.not_logged.swap(0, Ordering::Relaxed);
        let peer = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
        tracing::warn!(%peer, reason, not_logged_since_last = skipped, "authentication refused");
        true
    }

    /// Refusals so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_logged_once_a_second_and_counted_whole() {
        let r = Refusals::default();
        let peer = Some("10.0.0.1:4242".parse().unwrap());
        assert!(r.note(peer, "wrong token"));
        let logged = (0..1000).filter(|_| r.note(peer, "wrong token")).count();
        assert_eq!(logged, 0);
        assert_eq!(r.total(), 1001);
        assert_eq!(r.not_logged.load(Ordering::Relaxed), 1000);
    }
}
