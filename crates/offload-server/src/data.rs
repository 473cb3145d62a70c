//! The bulk-data side channel: plain TCP next to the gRPC port, so large
//! copies move at socket speed, straight between the socket and device
//! memory when the device shares the server's address space.
//!
//! A connection starts with the session's `data_secret` and a newline (the
//! secret is handed out only by an authenticated Hello). Then, repeatedly:
//!
//! ```text
//! client: op:u32 (1 = host to device, 2 = device to host) device:u32 addr:u64 len:u64 reserved:u64
//! op 1:   client sends len bytes; server answers status
//! op 2:   server answers status; if it is 0, len bytes follow
//! status: code:u32 (ol_errc_t, 0 = success) msg_len:u32 msg
//! ```
//!
//! Unauthenticated peers are bounded: at most 64 connections wait for
//! their secret line at once, at most 32 from one address (more are closed
//! at accept), each until the handshake deadline measured from accept (a
//! peer trickling its line a byte at a time is cut all the same). Every range is checked against the session's memory,
//! as on gRPC, and its allocation stays pinned until the copy is done: a
//! free racing the copy waits for it ([`Session::pin`]). When
//! TLS is on there is no side channel (it would be plain text). Sockets are
//! TCP_NODELAY and every reply (status and payload) leaves in one write, so
//! no small piece waits for the peer's delayed ACK.

use std::collections::HashMap;
use std::io::{BufReader, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use offload_core::{DevicePtr, Error};

use crate::session::Session;

pub use offload_proto::data_channel::{HEADER_BYTES, OP_READ, OP_WRITE};
/// Staging buffer for devices whose memory is not ours to address.
const STAGING: usize = 1 << 20;

pub(crate) type Sessions = Arc<Mutex<HashMap<String, Arc<Session>>>>;

/// Where authenticated data connections go.
#[derive(Clone)]
pub(crate) enum Destination {
    /// Sessions of this process: served here.
    InProcess(Sessions),
    /// Sessions in worker processes: the socket is handed to the worker.
    Workers(Arc<crate::supervisor::Workers>),
}

/// Connections that have not yet named their session, at most: more are
/// closed at once, so unauthenticated peers cannot pin threads.
const MAX_UNAUTHENTICATED: usize = 64;

/// Accept data connections on `listener` until the process ends.
pub(crate) fn spawn(listener: TcpListener, destination: Destination) {
    let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let peers = Arc::new(crate::peers::Peers::default());
    std::thread::Builder::new()
        .name("offload-data-accept".into())
        .spawn(move || {
            use std::sync::atomic::Ordering::AcqRel;
            for stream in listener.incoming().flatten() {
                // The handshake deadline runs from accept.
                let deadline = std::time::Instant::now() + crate::peers::handshake_timeout();
                let Some(slot) = stream.peer_addr().ok().and_then(|a| peers.admit(a)) else {
                    continue;
                };
                if pending.fetch_add(1, AcqRel) >= MAX_UNAUTHENTICATED {
                    pending.fetch_sub(1, AcqRel);
                    tracing::warn!(peer = ?stream.peer_addr().ok(), "data connection refused: too many unauthenticated connections");
                    continue;
                }
                let destination = destination.clone();
                let counter = pending.clone();
                let spawned = std::thread::Builder::new()
                    .name("offload-data".into())
                    .spawn(move || {
                        let accepted = Accepted {
                            slot,
                            deadline,
                            pending: &counter,
                        };
                        if let Err(e) = serve_connection(stream, &destination, accepted) {
                            tracing::debug!(error = %e, "data connection ended");
                        }
                    });
                if spawned.is_err() {
                    pending.fetch_sub(1, AcqRel);
                }
            }
        })
        .expect("starting the data listener");
}

/// The session whose data secret is `secret`: every open session's secret is
/// compared, each in constant time.
pub(crate) fn find_session(sessions: &Sessions, secret: &str) -> Option<Arc<Session>> {
    if secret.is_empty() {
        return None;
    }
    let map = sessions.lock().unwrap_or_else(|e| e.into_inner());
    let mut found = None;
    for s in map.values() {
        if crate::secret::equal(s.data_secret.as_bytes(), secret.as_bytes()) {
            found = Some(s.clone());
        }
    }
    found
}

pub(crate) fn still_open(sessions: &Sessions, session: &Session) -> bool {
    sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&session.id)
}

/// Counts a connection as unauthenticated until dropped or [`Pending::done`].
struct Pending<'a>(Option<&'a std::sync::atomic::AtomicUsize>);

impl Pending<'_> {
    fn done(&mut self) {
        if let Some(p) = self.0.take() {
            p.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.done();
    }
}

/// A connection's places among the unauthenticated ones (its peer's and
/// the port's) and its handshake deadline.
struct Accepted<'a> {
    slot: Arc<crate::peers::Slot>,
    deadline: std::time::Instant,
    pending: &'a std::sync::atomic::AtomicUsize,
}

fn serve_connection(
    stream: TcpStream,
    destination: &Destination,
    accepted: Accepted<'_>,
) -> std::io::Result<()> {
    let mut unauthenticated = Pending(Some(accepted.pending));
    stream.set_nodelay(true)?;
    // A peer that does not name its session by the deadline is dropped.
    let secret = read_secret_line(&stream, accepted.deadline)?;
    let refuse = |mut w: &TcpStream| {
        send_status(
            &mut w,
            Err(Error::invalid_argument(
                "data channel: unknown session secret",
            )),
        )
    };
    match destination {
        Destination::InProcess(sessions) => {
            let Some(session) = find_session(sessions, &secret) else {
                return refuse(&stream);
            };
            unauthenticated.done();
            accepted.slot.release();
            serve_authenticated(stream, &session, || still_open(sessions, &session))
        }
        Destination::Workers(workers) => {
            if workers.hand_data_connection(&secret, &stream) {
                Ok(())
            } else {
                refuse(&stream)
            }
        }
    }
}

/// A socket whose reads can be bounded in time (the secret line's
/// deadline): the data channel's TCP and the same-host queues' Unix sockets.
pub(crate) trait Handshake {
    fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> std::io::Result<()>;
}

impl Handshake for TcpStream {
    fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> std::io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
}

impl Handshake for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> std::io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, timeout)
    }
}

/// The secret line, read byte by byte: nothing after it may be consumed
/// here (the connection may go to another process, and the client sends
/// its first request right behind the line). The whole line must arrive by
/// `deadline` (each read waits only for what is left of it).
pub(crate) fn read_secret_line<S: Handshake>(
    stream: &S,
    deadline: std::time::Instant,
) -> std::io::Result<String>
where
    for<'a> &'a S: Read,
{
    let mut stream = stream;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    // The secret line is short; refuse anything long.
    while line.len() < 256 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "data channel: no secret line by the handshake deadline",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        if stream.read(&mut byte)? == 0 {
            break;
        }
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&line).trim().to_string())
}

/// Serve copies for `session` on an authenticated connection until the
/// client closes it or `still_open` says the session is gone.
pub(crate) fn serve_authenticated(
    stream: TcpStream,
    session: &Session,
    still_open: impl Fn() -> bool,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    // Authenticated: copies may be far apart; the session's end closes it.
    stream.set_read_timeout(None)?;
    let mut reader = BufReader::with_capacity(64 << 10, stream.try_clone()?);
    let mut writer = stream;
    tracing::debug!(session = %session.id, "data connection opened");
    let mut staging = Vec::new();
    loop {
        let mut hdr = [0u8; HEADER_BYTES];
        match reader.read_exact(&mut hdr) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        if !still_open() {
            return Ok(());
        }
        let op = u32::from_le_bytes(hdr[0..4].try_into().unwrap());
        let device = u32::from_le_bytes(hdr[4..8].try_into().unwrap());
        let addr = u64::from_le_bytes(hdr[8..16].try_into().unwrap());
        let len = u64::from_le_bytes(hdr[16..24].try_into().unwrap());
        match op {
            OP_WRITE => {
                let result = receive(session, device, addr, len, &mut reader, &mut staging)?;
                send_status(&mut writer, result)?;
            }
            OP_READ => send(session, device, addr, len, &mut writer, &mut staging)?,
            _ => {
                send_status(
                    &mut writer,
                    Err(Error::invalid_argument(format!(
                        "data channel: unknown operation {op}"
                    ))),
                )?;
                return Ok(());
            }
        }
    }
}

/// Host to device. On a bad range the bytes are still consumed, so the
/// stream stays in step, and the error is reported.
fn receive(
    session: &Session,
    device: u32,
    addr: u64,
    len: u64,
    reader: &mut impl Read,
    staging: &mut Vec<u8>,
) -> std::io::Result<Result<(), Error>> {
    // Pinned until the last byte has landed: a free racing this copy waits.
    let target = session
        .pin(device, addr, len)
        .and_then(|pin| session.device(device).cloned().map(|d| (d, pin)));
    let (dev, _pin) = match target {
        Ok(d) => d,
        Err(e) => {
            std::io::copy(&mut reader.take(len), &mut std::io::sink())?;
            return Ok(Err(e));
        }
    };
    if dev.shares_host_memory() {
        // SAFETY: the range lies inside a live allocation of this session,
        // pinned (not freed) until this copy is done.
        let dst = unsafe { std::slice::from_raw_parts_mut(addr as usize as *mut u8, len as usize) };
        reader.read_exact(dst)?;
        // Past the core's copies: counted here (the staged path below goes
        // through `copy_to_device`, which counts).
        dev.stats().count_to_device(dst.len());
        return Ok(Ok(()));
    }
    staging.resize(STAGING, 0);
    let mut done = 0u64;
    let mut result = Ok(());
    while done < len {
        let n = (len - done).min(STAGING as u64) as usize;
        reader.read_exact(&mut staging[..n])?;
        if result.is_ok() {
            // SAFETY: range checked; `staging` holds n bytes.
            result = unsafe { dev.copy_to_device(DevicePtr(addr + done), staging.as_ptr(), n) };
        }
        done += n as u64;
    }
    Ok(result)
}

/// Device to host.
fn send(
    session: &Session,
    device: u32,
    addr: u64,
    len: u64,
    writer: &mut impl Write,
    staging: &mut Vec<u8>,
) -> std::io::Result<()> {
    // Pinned until the last byte has left (see `receive`).
    let (dev, _pin) = match session
        .pin(device, addr, len)
        .and_then(|pin| session.device(device).cloned().map(|d| (d, pin)))
    {
        Ok(d) => d,
        Err(e) => return send_status(writer, Err(e)),
    };
    if dev.shares_host_memory() {
        // SAFETY: the range lies inside a live allocation of this session,
        // pinned (not freed) until this copy is done.
        let src = unsafe { std::slice::from_raw_parts(addr as usize as *const u8, len as usize) };
        let status = status_bytes(Ok(()));
        write_all_vectored(writer, &mut [IoSlice::new(&status), IoSlice::new(src)])?;
        dev.stats().count_from_device(src.len());
        return Ok(());
    }
    // Stage the first piece before committing to success.
    staging.resize(STAGING, 0);
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(STAGING as u64) as usize;
        // SAFETY: range checked; `staging` holds n bytes.
        let r = unsafe { dev.copy_from_device(staging.as_mut_ptr(), DevicePtr(addr + done), n) };
        match (done, r) {
            // The status and the first piece leave together.
            (0, Ok(())) => {
                let status = status_bytes(Ok(()));
                write_all_vectored(
                    writer,
                    &mut [IoSlice::new(&status), IoSlice::new(&staging[..n])],
                )?;
            }
            (0, Err(e)) => return send_status(writer, Err(e)),
            (_, Ok(())) => writer.write_all(&staging[..n])?,
            // Mid-stream failure: the client sees a short stream and drops it.
            (_, Err(_)) => return Err(std::io::Error::other("device read failed mid-transfer")),
        }
        done += n as u64;
    }
    if len == 0 {
        send_status(writer, Ok(()))?;
    }
    Ok(())
}

fn status_bytes(result: Result<(), Error>) -> Vec<u8> {
    let (code, msg) = match result {
        Ok(()) => (0u32, String::new()),
        Err(e) => (e.code().as_raw(), e.message().to_string()),
    };
    let mut out = Vec::with_capacity(8 + msg.len());
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    out.extend_from_slice(msg.as_bytes());
    out
}

/// A status alone, in one write.
pub(crate) fn send_status(w: &mut impl Write, result: Result<(), Error>) -> std::io::Result<()> {
    w.write_all(&status_bytes(result))?;
    w.flush()
}

/// `write_all` for several buffers, then flush.
fn write_all_vectored(w: &mut impl Write, bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    offload_proto::data_channel::write_all_vectored(w, bufs)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts writes; accepts at most `max` bytes per call.
    struct Counting {
        out: Vec<u8>,
        writes: usize,
        max: usize,
    }

    impl Write for Counting {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.write_vectored(&[IoSlice::new(b)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
            self.writes += 1;
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.max - n);
                self.out.extend_from_slice(&b[..take]);
                n += take;
            }
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn status_and_payload_leave_in_one_write() {
        let mut w = Counting {
            out: Vec::new(),
            writes: 0,
            max: usize::MAX,
        };
        let status = status_bytes(Ok(()));
        write_all_vectored(
            &mut w,
            &mut [IoSlice::new(&status), IoSlice::new(&[9; 1024])],
        )
        .unwrap();
        assert_eq!(w.writes, 1);
        assert_eq!(w.out.len(), 8 + 1024);
        assert_eq!(&w.out[..8], &[0; 8]);
    }

    #[test]
    fn short_writes_are_resumed() {
        let mut w = Counting {
            out: Vec::new(),
            writes: 0,
            max: 5,
        };
        let payload: Vec<u8> = (0..100).collect();
        write_all_vectored(&mut w, &mut [IoSlice::new(b"abc"), IoSlice::new(&payload)]).unwrap();
        let mut want = b"abc".to_vec();
        want.extend_from_slice(&payload);
        assert_eq!(w.out, want);
        assert_eq!(w.writes, 21);
    }
}
