//! Same-host queues: clients on this machine run a queue through shared
//! memory instead of the gRPC stream (offload-proto's `local_ring`).
//!
//! The server listens on an abstract Unix socket with a random name (in
//! its network namespace: only processes that can reach the server over
//! loopback can reach it), offered in the greeting (under TLS too: the
//! rings never cross the network). A connection starts, as a data connection does, with the
//! session's `data_secret` and a newline; the supervisor hands it to the
//! session's worker ([`crate::worker::TAG_LOCAL`]). Then the client sends
//! one byte with a sealed memfd holding the rings; the server maps it,
//! answers a status, and one thread serves the queue's operations in order
//! with the same code as the gRPC stream ([`crate::service`]) until
//! either side closes. The connection stays open for that long: its end
//! tells each side that the other went away.

use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use offload_core::Error;
use offload_proto::local_ring::{LocalRing, RingError};
use offload_proto::{QueueCompletion, QueueOp};
use prost::Message;

use crate::data::{find_session, read_secret_line, send_status, still_open, Destination};
use crate::session::Session;

/// Connections that have not yet named their session, at most.
const MAX_UNAUTHENTICATED: usize = 64;
/// A sleeping server thread looks at the connection and the session this
/// often.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Bind a listener with a fresh random abstract name; the name to offer.
pub(crate) fn bind() -> std::io::Result<(UnixListener, String)> {
    let name = format!(
        "offload-serve.{}.{}",
        std::process::id(),
        crate::secret::random_hex(8)
    );
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    Ok((UnixListener::bind_addr(&addr)?, name))
}

/// Accept same-host queue connections until the process ends.
pub(crate) fn spawn(listener: UnixListener, destination: Destination) {
    let pending = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("offload-local-accept".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let deadline = std::time::Instant::now() + crate::peers::handshake_timeout();
                if pending.fetch_add(1, Ordering::AcqRel) >= MAX_UNAUTHENTICATED {
                    pending.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!("same-host queue refused: too many unauthenticated connections");
                    continue;
                }
                let (destination, counter) = (destination.clone(), pending.clone());
                let spawned = std::thread::Builder::new()
                    .name("offload-local".into())
                    .spawn(move || {
                        let secret = read_secret_line(&stream, deadline);
                        counter.fetch_sub(1, Ordering::AcqRel);
                        match secret {
                            Ok(secret) => route(stream, &secret, &destination),
                            Err(e) => tracing::debug!(error = %e, "same-host queue: no secret"),
                        }
                    });
                if spawned.is_err() {
                    pending.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })
        .expect("starting the same-host queue listener");
}

fn route(stream: UnixStream, secret: &str, destination: &Destination) {
    let refuse = |mut s: &UnixStream| {
        let e = Error::invalid_argument("same-host queue: unknown session secret");
        let _ = send_status(&mut s, Err(e));
    };
    match destination {
        Destination::InProcess(sessions) => match find_session(sessions, secret) {
            Some(session) => {
                let open = || still_open(sessions, &session);
                if let Err(e) = serve(stream, &session, open, &Served::default(), || {}) {
                    tracing::debug!(session = %session.id, error = %e, "same-host queue ended");
                }
            }
            None => refuse(&stream),
        },
        Destination::Workers(workers) => {
            if !workers.hand_local_connection(secret, &stream) {
                refuse(&stream);
            }
        }
    }
}

/// The same-host queues a process serves, so that its end can wait for
/// the operations in flight (as a gRPC server's graceful shutdown waits
/// for its calls) and wake the idle queues at once.
#[derive(Default)]
pub(crate) struct Served {
    rings: Mutex<Vec<Weak<LocalRing>>>,
    stopping: AtomicBool,
    open: Mutex<usize>,
    closed: Condvar,
}

impl Served {
    fn add(&self, ring: &Arc<LocalRing>) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        rings.retain(|r| r.strong_count() > 0);
        rings.push(Arc::downgrade(ring));
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    fn done(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        self.closed.notify_all();
    }

    /// Serve no more: each queue finishes what its client has sent, then
    /// ends. Waits (at most `limit`) until every queue has ended.
    pub(crate) fn stop(&self, limit: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        for ring in self.rings.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if let Some(r) = ring.upgrade() {
                r.nudge();
            }
        }
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .closed
            .wait_timeout_while(open, limit, |n| *n > 0)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// Serve one queue for `session` on an authenticated connection: take its
/// rings, answer, then run its operations until the client closes or
/// `still_open` says the session is gone.
pub(crate) fn serve(
    stream: UnixStream,
    session: &Session,
    still_open: impl Fn() -> bool,
    served: &Served,
    touch: impl Fn(),
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(crate::peers::handshake_timeout()))?;
    let ring = match offload_proto::fdpass::recv_fd(&stream)? {
        Some((_, fd)) => LocalRing::attach(&fd),
        None => return Ok(()),
    };
    let ring = match ring {
        Ok(r) => r,
        Err(e) => {
            let e = Error::invalid_argument(format!("same-host queue: {e}"));
            return send_status(&mut &stream, Err(e));
        }
    };
    send_status(&mut &stream, Ok(()))?;
    tracing::debug!(session = %session.id, "same-host queue opened");
    let ring = Arc::new(ring);
    served.add(&ring);
    let open = || still_open() && !served.stopping.load(Ordering::SeqCst);
    let mut counts = Counts::default();
    let result = run(&ring, &stream, session, &open, &touch, &mut counts);
    ring.close();
    served.done();
    tracing::debug!(session = %session.id, operations = counts.operations, completions = counts.completions, "same-host queue closed");
    match result {
        Ok(()) | Err(RingError::Closed) => Ok(()),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// Whether the client is gone: its end of the connection closed.
fn hung_up(stream: &UnixStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a local; the descriptor is open.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// What one queue carried (logged when it closes).
#[derive(Default)]
struct Counts {
    operations: u64,
    completions: u64,
}

fn run(
    ring: &LocalRing,
    stream: &UnixStream,
    session: &Session,
    still_open: &impl Fn() -> bool,
    touch: &impl Fn(),
    counts: &mut Counts,
) -> Result<(), RingError> {
    let spin = offload_proto::local_ring::spin_setting();
    let mut queue = crate::service::ServedQueue::default();
    let mut message = Vec::new();
    loop {
        if !ring.recv(&mut message)? {
            if !ring.wait_readable(spin, CHECK_EVERY) && (hung_up(stream) || !still_open()) {
                return Ok(());
            }
            continue;
        }
        counts.operations += 1;
        touch();
        let completion = match QueueOp::decode(message.as_slice()) {
            Ok(op) => queue.complete(session, op),
            Err(e) => Some(QueueCompletion {
                code: offload_core::ErrorCode::InvalidArgument.as_raw(),
                message: format!("same-host queue: undecodable operation: {e}"),
                ..Default::default()
            }),
        };
        touch();
        if let Some(c) = completion {
            counts.completions += 1;
            reply(ring, stream, c)?;
        }
    }
}

/// Send a completion, its output first in pieces when it would not fit.
fn reply(ring: &LocalRing, stream: &UnixStream, mut c: QueueCompletion) -> Result<(), RingError> {
    if c.encoded_len() > ring.max_message() {
        if let Some(output) = c.output.take() {
            for piece in crate::service::split_output(output, ring.max_message() / 2) {
                let only_output = QueueCompletion {
                    output: Some(piece),
                    ..Default::default()
                };
                send(ring, stream, &only_output.encode_to_vec())?;
            }
        }
    }
    if c.encoded_len() > ring.max_message() {
        // Only a read larger than the client's own ring asks for this.
        c = QueueCompletion {
            ticket: c.ticket,
            code: offload_core::ErrorCode::InvalidArgument.as_raw(),
            message: format!(
                "same-host queue: a reply of {} bytes does not fit the queue's ring ({} bytes)",
                c.data.len(),
                ring.max_message()
            ),
            ..Default::default()
        };
    }
    send(ring, stream, &c.encode_to_vec())
}

/// Send one message, waiting for room while the client reads.
fn send(ring: &LocalRing, stream: &UnixStream, bytes: &[u8]) -> Result<(), RingError> {
    let mut pause = Duration::from_micros(20);
    while !ring.send(bytes)? {
        if hung_up(stream) {
            return Err(RingError::Closed);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
    Ok(())
}
