//! Client side of the bulk-data side channel (protocol described in
//! offload-server's `data` module): large copies go over plain TCP,
//! straight from and into the caller's memory. Connections are TCP_NODELAY
//! and each request (secret line of a new connection, header, payload)
//! leaves in one write.

use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use offload_core::{DevicePtr, Error, ErrorCode, Result};

use offload_proto::data_channel::{read_status, write_all_vectored, OP_READ, OP_WRITE};

/// Copies at least this large use the side channel.
pub const MIN_BYTES: usize = 64 << 10;

pub struct DataChannel {
    addr: SocketAddr,
    secret: String,
    timeout: Duration,
    /// Idle connections; a copy takes one (or opens one) and gives it back.
    idle: Mutex<Vec<TcpStream>>,
    label: String,
    /// Set when a new connection could not be opened: copies go over gRPC
    /// from then on (a firewall or a container that does not publish the
    /// data port).
    unreachable: std::sync::atomic::AtomicBool,
    /// Until when copies skip the channel after a connection failed before
    /// the server answered (the server refused it: busy, or under attack).
    refused_until: Mutex<Option<Instant>>,
}

/// How long copies go over gRPC after the channel refused a connection.
const REFUSED_BACKOFF: Duration = Duration::from_secs(2);

impl DataChannel {
    /// The side channel of a server at `server` (HOST:PORT) with `port`.
    pub fn new(server: &str, port: u16, secret: String, timeout: Duration) -> Option<DataChannel> {
        let host = server.rsplit_once(':').map(|(h, _)| h).unwrap_or(server);
        let host = host
            .trim_start_matches("http://")
            .trim_start_matches('[')
            .trim_end_matches(']');
        let addr = (host, port).to_socket_addrs().ok()?.next()?;
        Some(DataChannel {
            addr,
            secret,
            timeout,
            idle: Mutex::new(Vec::new()),
            label: server.to_string(),
            unreachable: Default::default(),
            refused_until: Mutex::new(None),
        })
    }

    /// Whether copies should try this channel.
    pub fn usable(&self) -> bool {
        if self.unreachable.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let mut until = self.refused_until.lock().unwrap_or_else(|e| e.into_inner());
        match *until {
            Some(t) if Instant::now() < t => false,
            Some(_) => {
                *until = None;
                true
            }
            None => true,
        }
    }

    /// A copy's connection failed before the server answered it (refused
    /// at accept, closed, reset): the copy goes over gRPC instead (copies
    /// are idempotent: the same bytes to the same place), and so do the
    /// next ones for [`REFUSED_BACKOFF`].
    fn refused(&self, what: &str, e: std::io::Error) {
        let mut until = self.refused_until.lock().unwrap_or_else(|e| e.into_inner());
        if until.is_none() {
            tracing::warn!(server = %self.label, data = %self.addr, error = %e, "{what}: the bulk-data channel refused the copy; copies go over gRPC for {} s", REFUSED_BACKOFF.as_secs());
        }
        *until = Some(Instant::now() + REFUSED_BACKOFF);
        // Pooled connections may be dead too.
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::new(
            ErrorCode::BackendFailure,
            format!("remote server {}: {what} (data channel): {e}", self.label),
        )
    }

    /// An idle connection, or a new one; with what must precede the first
    /// request on it (the secret line of a new connection). None when no
    /// connection can be opened (the channel is then given up).
    fn take(&self) -> Option<Result<(TcpStream, Vec<u8>)>> {
        if let Some(s) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Some(Ok((s, Vec::with_capacity(32))));
        }
        // Connecting is bounded well below the call timeout: an unreachable
        // port (filtered: no answer at all) must not stall every copy.
        let wait = self.timeout.min(Duration::from_secs(2));
        let s = match TcpStream::connect_timeout(&self.addr, wait) {
            Ok(s) => s,
            Err(e) => {
                if !self
                    .unreachable
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(server = %self.label, data = %self.addr, error = %e, "the bulk-data channel cannot be reached; large copies go over gRPC");
                }
                return None;
            }
        };
        Some(self.prepare(s))
    }

    fn prepare(&self, s: TcpStream) -> Result<(TcpStream, Vec<u8>)> {
        s.set_nodelay(true).map_err(|e| self.error("connect", e))?;
        s.set_read_timeout(Some(self.timeout)).ok();
        s.set_write_timeout(Some(self.timeout)).ok();
        Ok((s, format!("{}\n", self.secret).into_bytes()))
    }

    fn give_back(&self, s: TcpStream) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }

    /// Append a request header to `out`.
    fn header(out: &mut Vec<u8>, op: u32, device: u32, addr: u64, len: usize) {
        out.extend_from_slice(&op.to_le_bytes());
        out.extend_from_slice(&device.to_le_bytes());
        out.extend_from_slice(&addr.to_le_bytes());
        out.extend_from_slice(&(len as u64).to_le_bytes());
        out.extend_from_slice(&[0; 8]);
    }

    /// Read a status; `Ok(Err(..))` is an error the server reported.
    fn status(&self, s: &mut TcpStream) -> std::io::Result<Result<()>> {
        let (code, msg) = read_status(s)?;
        if code == 0 {
            return Ok(Ok(()));
        }
        let code = ErrorCode::from_raw(code).unwrap_or(ErrorCode::BackendFailure);
        Ok(Err(Error::new(
            code,
            format!("remote server {}: {msg}", self.label),
        )))
    }

    /// Host to device; None when the channel cannot be reached or refuses
    /// the copy (copy over gRPC instead).
    ///
    /// # Safety
    /// `src` valid for `size` bytes.
    pub unsafe fn write(
        &self,
        device: u32,
        dst: DevicePtr,
        src: *const u8,
        size: usize,
    ) -> Option<Result<()>> {
        let (mut s, mut head) = match self.take()? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        // SAFETY: the caller makes `src` readable for `size` bytes for the
        // whole call.
        let data = unsafe { std::slice::from_raw_parts(src, size) };
        Self::header(&mut head, OP_WRITE, device, dst.0, size);
        let io = (|| {
            write_all_vectored(&mut s, &mut [IoSlice::new(&head), IoSlice::new(data)])?;
            self.status(&mut s)
        })();
        match io {
            Ok(r) => {
                self.give_back(s);
                Some(r)
            }
            Err(e) => {
                self.refused("copy to device", e);
                None
            }
        }
    }

    /// Device to host; None when the channel cannot be reached or refuses
    /// the copy.
    ///
    /// # Safety
    /// `dst` valid for `size` bytes.
    pub unsafe fn read(
        &self,
        device: u32,
        dst: *mut u8,
        src: DevicePtr,
        size: usize,
    ) -> Option<Result<()>> {
        let (mut s, mut head) = match self.take()? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        // SAFETY: the caller makes `dst` writable for `size` bytes for the
        // whole call, and nothing else reads or writes it meanwhile.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, size) };
        Self::header(&mut head, OP_READ, device, src.0, size);
        let io = (|| {
            s.write_all(&head)?;
            match self.status(&mut s)? {
                Ok(()) => s.read_exact(out).map(|_| Ok(())),
                Err(e) => Ok(Err(e)),
            }
        })();
        match io {
            Ok(r) => {
                self.give_back(s);
                Some(r)
            }
            Err(e) => {
                self.refused("copy from device", e);
                None
            }
        }
    }
}
