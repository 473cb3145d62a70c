//! Same-host queues, client side: when the server is on this machine
//! (reached over loopback) and offers them, each queue runs through a pair
//! of rings in shared memory (offload-proto's `local_ring`) instead of a
//! gRPC stream; see offload-server's `local` module for the exchange.

use std::io::Write;
use std::net::ToSocketAddrs;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use offload_core::{Error, ErrorCode, Result};
use offload_proto::local_ring::{LocalRing, DEFAULT_RING_BYTES};

/// The byte that carries the ring's descriptor (any byte will do).
const RING_TAG: u8 = b'r';

/// A server's same-host queue socket, when this client may use it.
pub struct LocalQueues {
    socket: String,
    secret: String,
    label: String,
    timeout: Duration,
    /// Set once opening a ring failed: later queues use gRPC.
    failed: AtomicBool,
    pub(crate) spin: Duration,
}

/// One queue's rings and the connection that keeps them alive.
pub struct LocalLink {
    pub ring: LocalRing,
    /// Closed when the queue is dropped: the server stops serving it.
    _stream: UnixStream,
}

/// Whether every address `server` (HOST:PORT, maybe with an http scheme) names is a
/// loopback address: the server shares this machine and its network
/// namespace (where its abstract socket lives).
fn is_loopback(server: &str) -> bool {
    let host_port = server
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let mut addrs = match host_port.to_socket_addrs() {
        Ok(a) => a.peekable(),
        Err(_) => return false,
    };
    addrs.peek().is_some() && addrs.all(|a| a.ip().is_loopback())
}

fn enabled() -> bool {
    !matches!(
        std::env::var("OFFLOAD_REMOTE_LOCAL_QUEUES").as_deref(),
        Ok("0" | "false" | "off" | "no")
    )
}

impl LocalQueues {
    /// The offer of a server at `server`, if it made one, it is on this
    /// machine, and `OFFLOAD_REMOTE_LOCAL_QUEUES` does not turn them off.
    pub fn new(server: &str, socket: &str, secret: &str, timeout: Duration) -> Option<LocalQueues> {
        if socket.is_empty() || secret.is_empty() || !enabled() || !is_loopback(server) {
            return None;
        }
        Some(LocalQueues {
            socket: socket.to_string(),
            secret: secret.to_string(),
            label: server.to_string(),
            timeout,
            failed: AtomicBool::new(false),
            spin: offload_proto::local_ring::spin_setting(),
        })
    }

    /// Rings for a new queue; None (after one warning) when the server
    /// cannot take them: the queue goes over gRPC.
    pub fn open(&self) -> Option<LocalLink> {
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        match self.try_open() {
            Ok(link) => Some(link),
            Err(e) => {
                if !self.failed.swap(true, Ordering::Relaxed) {
                    tracing::warn!(server = %self.label, error = %e, "same-host queues unavailable; queues go over gRPC");
                }
                None
            }
        }
    }

    fn try_open(&self) -> Result<LocalLink> {
        let io = |e: std::io::Error| {
            Error::backend(format!(
                "remote server {}: same-host queue: {e}",
                self.label
            ))
        };
        let addr = SocketAddr::from_abstract_name(self.socket.as_bytes()).map_err(io)?;
        let mut stream = UnixStream::connect_addr(&addr).map_err(io)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(io)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(io)?;
        let (ring, fd) = LocalRing::create(DEFAULT_RING_BYTES).map_err(io)?;
        stream
            .write_all(format!("{}\n", self.secret).as_bytes())
            .map_err(io)?;
        // A server that refuses the secret answers and closes at once, so
        // sending the rings may fail: its answer says why better.
        let sent = offload_proto::fdpass::send_fd(&stream, RING_TAG, fd.as_raw_fd());
        drop(fd);
        match (sent, self.status(&mut stream)) {
            (_, Ok(Err(refused))) => return Err(refused),
            (Err(e), _) | (Ok(()), Err(e)) => return Err(io(e)),
            (Ok(()), Ok(Ok(()))) => {}
        }
        Ok(LocalLink {
            ring,
            _stream: stream,
        })
    }

    /// The server's answer (the data channel's status format).
    fn status(&self, s: &mut UnixStream) -> std::io::Result<Result<()>> {
        let (code, msg) = offload_proto::data_channel::read_status(s)?;
        if code == 0 {
            return Ok(Ok(()));
        }
        let code = ErrorCode::from_raw(code).unwrap_or(ErrorCode::BackendFailure);
        Ok(Err(Error::new(code, msg)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_servers_are_same_host() {
        assert!(is_loopback("127.0.0.1:1"));
        assert!(is_loopback("http://127.0.0.1:1"));
        assert!(is_loopback("[::1]:1"));
        assert!(is_loopback("localhost:1") || "localhost:1".to_socket_addrs().is_err());
        assert!(!is_loopback("10.0.0.1:1"));
        assert!(!is_loopback("not an address"));
    }
}
