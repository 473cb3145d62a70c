//! Connections that have not authenticated yet, on both ports of a
//! supervisor: each gets a deadline measured from accept (not per read: a
//! peer trickling one byte at a time is cut all the same), and each peer
//! address may hold at most [`MAX_UNAUTHENTICATED_PER_PEER`] of them at
//! once per port (more are closed at accept).
//!
//! A main (HTTP/2 or TLS) connection authenticates by opening a session
//! (an accepted Hello); a session connection by the session secret in its
//! preamble; a data connection by its data secret. A main connection that
//! has not opened a session by the deadline is closed.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Unauthenticated connections one peer address may hold at once, per port.
pub const MAX_UNAUTHENTICATED_PER_PEER: usize = 32;

/// How long a new connection has from accept to authenticate
/// (`OFFLOAD_SERVE_HANDSHAKE_MS`, default 10 s; the data port also honours
/// the older `OFFLOAD_SERVE_DATA_HANDSHAKE_MS`).
pub fn handshake_timeout() -> Duration {
    static T: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *T.get_or_init(|| {
        let ms = [
            "OFFLOAD_SERVE_HANDSHAKE_MS",
            "OFFLOAD_SERVE_DATA_HANDSHAKE_MS",
        ]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.trim().parse::<u64>().ok())
        .unwrap_or(10_000);
        Duration::from_millis(ms)
    })
}

/// Unauthenticated connections per peer address (one of these per port),
/// and the main connections still waiting to open a session, by address.
#[derive(Default)]
pub(crate) struct Peers {
    counts: Mutex<HashMap<IpAddr, usize>>,
    waiting: Mutex<HashMap<SocketAddr, Weak<Slot>>>,
    refused: crate::refusals::Refusals,
}

/// One unauthenticated connection's place among its peer's; given back
/// when it authenticates or closes.
pub(crate) struct Slot {
    peers: Arc<Peers>,
    addr: SocketAddr,
    held: AtomicBool,
}

impl Peers {
    /// A place for a new connection from `addr`; None (and a rate-limited
    /// log line) when its address holds too many already.
    pub fn admit(self: &Arc<Self>, addr: SocketAddr) -> Option<Arc<Slot>> {
        {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            let n = counts.entry(addr.ip()).or_default();
            if *n >= MAX_UNAUTHENTICATED_PER_PEER {
                drop(counts);
                self.refused.note(
                    Some(addr),
                    "connection closed at accept: too many unauthenticated connections from this address",
                );
                return None;
            }
            *n += 1;
        }
        Some(Arc::new(Slot {
            peers: self.clone(),
            addr,
            held: AtomicBool::new(true),
        }))
    }

    /// Remember `slot`'s main connection so an accepted Hello can mark it.
    pub fn wait_for_session(&self, slot: &Arc<Slot>) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.retain(|_, w| w.strong_count() > 0);
        waiting.insert(slot.addr, Arc::downgrade(slot));
    }

    /// The main connection from `addr` opened a session: no deadline, and
    /// no longer counted against its peer.
    pub fn authenticated(&self, addr: SocketAddr) {
        let slot = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr)
            .and_then(|w| w.upgrade());
        if let Some(s) = slot {
            s.release();
        }
    }

    /// Unauthenticated connections from `ip` now.
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&ip)
            .copied()
            .unwrap_or(0)
    }
}

impl Slot {
    /// The connection authenticated (or closed).
    pub fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            let mut counts = self.peers.counts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = counts.get_mut(&self.addr.ip()) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&self.addr.ip());
                }
            }
        }
    }

    pub fn is_authenticated(&self) -> bool {
        !self.held.load(Ordering::Acquire)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
    }
}

/// A main connection of the supervisor's gRPC port: reads and writes fail
/// once its deadline (from accept) passes before it opened a session.
pub(crate) struct Guarded {
    inner: TcpStream,
    slot: Arc<Slot>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Guarded {
    pub fn new(inner: TcpStream, slot: Arc<Slot>, deadline: tokio::time::Instant) -> Self {
        slot.peers.wait_for_session(&slot);
        Guarded {
            inner,
            slot,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }

    /// Past the deadline without a session: the connection ends.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        !self.slot.is_authenticated() && self.deadline.as_mut().poll(cx).is_ready()
    }
}

fn too_late() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no session opened within the handshake deadline",
    )
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // The server always has a read pending: polling the deadline here
        // wakes the connection when it passes.
        if self.expired(cx) {
            return Poll::Ready(Err(too_late()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(too_late()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(too_late()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_limited_and_slots_given_back() {
        let peers = Arc::new(Peers::default());
        let a: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1000".parse().unwrap();
        let held: Vec<_> = (0..MAX_UNAUTHENTICATED_PER_PEER)
            .map(|_| peers.admit(a).unwrap())
            .collect();
        assert!(peers.admit(a).is_none(), "one address past the limit");
        let other = peers.admit(b).expect("another address is not affected");
        held[0].release();
        let again = peers.admit(a).expect("a released place is free again");
        drop(held);
        assert_eq!(peers.count(a.ip()), 1);
        drop(again);
        drop(other);
        assert_eq!(peers.count(a.ip()), 0);
        assert_eq!(peers.count(b.ip()), 0);
    }

    #[test]
    fn an_accepted_hello_marks_its_connection() {
        let peers = Arc::new(Peers::default());
        let a: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let slot = peers.admit(a).unwrap();
        peers.wait_for_session(&slot);
        assert!(!slot.is_authenticated());
        peers.authenticated("10.0.0.1:1001".parse().unwrap());
        assert!(!slot.is_authenticated(), "another connection's Hello");
        peers.authenticated(a);
        assert!(slot.is_authenticated());
        assert_eq!(peers.count(a.ip()), 0);
    }
}
