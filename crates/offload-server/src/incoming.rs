//! The supervisor's gRPC port: every accepted connection is either a
//! client's main connection (HTTP/2 or TLS: served here) or a session
//! connection (it starts with the session preamble: handed to the
//! session's worker). One byte, peeked, tells them apart.
//!
//! Every connection has [`crate::peers::handshake_timeout`] from accept to
//! authenticate (a session connection: its preamble; a main connection: an
//! accepted Hello, else it is closed), and a peer address holds at most
//! [`crate::peers::MAX_UNAUTHENTICATED_PER_PEER`] unauthenticated ones.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use offload_proto::session_connection::{parse, MAGIC, PREAMBLE_BYTES};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;

use crate::peers::{Guarded, Peers, Slot};
use crate::supervisor::Workers;

/// Connections whose first bytes have not arrived yet, at most: when a new
/// one would exceed it, the oldest waiting one is closed. A real client
/// sends at once and leaves the queue within a round trip, so a flood of
/// silent connections delays nobody for long.
const MAX_PENDING: usize = 256;

/// The connections waiting for their first bytes, oldest first.
#[derive(Default)]
struct Waiting {
    next: u64,
    queue: VecDeque<(u64, tokio::task::AbortHandle)>,
}

/// Accept on `listener`; yield the connections this process serves.
pub(crate) fn route(
    listener: TcpListener,
    workers: Arc<Workers>,
    peers: Arc<Peers>,
) -> ReceiverStream<std::io::Result<Guarded>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let waiting = Arc::new(Mutex::new(Waiting::default()));
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
                // The server stopped taking connections.
                _ = tx.closed() => return,
            };
            // The deadline runs from accept, whatever the peer sends.
            let deadline = tokio::time::Instant::now() + crate::peers::handshake_timeout();
            let Some(slot) = peers.admit(peer) else {
                continue;
            };
            let (tx, workers, list) = (tx.clone(), workers.clone(), waiting.clone());
            let mut w = waiting.lock().unwrap_or_else(|e| e.into_inner());
            if w.queue.len() >= MAX_PENDING {
                if let Some((_, oldest)) = w.queue.pop_front() {
                    oldest.abort();
                    tracing::warn!(peer = ?stream.peer_addr().ok(), "too many connections that sent nothing; the oldest was closed");
                }
            }
            let id = w.next;
            w.next += 1;
            let task = tokio::spawn(async move {
                let routed = tokio::time::timeout_at(deadline, sort(stream, &workers, &slot)).await;
                list.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .queue
                    .retain(|(i, _)| *i != id);
                if let Ok(Some(ours)) = routed {
                    let _ = tx.send(Ok(Guarded::new(ours, slot, deadline))).await;
                }
            });
            w.queue.push_back((id, task.abort_handle()));
        }
    });
    ReceiverStream::new(rx)
}

/// A connection for this process, or None (handed over or dropped).
async fn sort(mut stream: TcpStream, workers: &Workers, slot: &Slot) -> Option<TcpStream> {
    let _ = stream.set_nodelay(true);
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await.ok()? == 0 {
        return None;
    }
    if first[0] != MAGIC[0] {
        return Some(stream);
    }
    let peer = stream.peer_addr().ok();
    let mut preamble = [0u8; PREAMBLE_BYTES];
    stream.read_exact(&mut preamble).await.ok()?;
    let Some((id, secret)) = parse(&preamble) else {
        tracing::warn!(?peer, "connection refused: bad session preamble");
        return None;
    };
    let std_stream = stream.into_std().ok()?;
    match workers.hand_session_connection(id, secret, &std_stream) {
        Ok(()) => slot.release(),
        Err(why) => {
            tracing::warn!(?peer, session = %id, "session connection refused: {why}")
        }
    }
    None
}
