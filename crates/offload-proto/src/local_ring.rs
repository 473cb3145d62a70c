//! Same-host queues: a pair of message rings in shared memory, so a
//! client on the server's machine streams queue operations
//! ([`crate::QueueOp`]) and receives completions ([`crate::QueueCompletion`])
//! without a socket round trip per wait.
//!
//! The client creates the memory (a sealed `memfd`) and hands its
//! descriptor to the session's server process over a Unix socket (see
//! offload-server's `local` module). Each direction is a single-producer,
//! single-consumer byte ring of length-prefixed messages. A side that waits
//! spins briefly, then sleeps on a futex in the shared memory (a process
//! shared futex) that the other side wakes only when someone sleeps there:
//! a busy exchange makes no system calls.
//!
//! Layout (little endian, each control word on its own cache line):
//!
//! ```text
//! 0     magic u64 "OFLDRNG1", version u32, ring_bytes u32
//! 64    requests: tail u64 (client)      128  requests: head u64 (server)
//! 192   requests: doorbell u32, sleepers u32 (the server sleeps here)
//! 256   replies:  tail u64 (server)      320  replies:  head u64 (client)
//! 384   replies:  doorbell u32, sleepers u32 (the client sleeps here)
//! 448   closed by client u32, closed by server u32
//! 4096  request bytes [ring_bytes], then reply bytes [ring_bytes]
//! message: len u32, then len bytes; the next starts 8-byte aligned
//! ```
//!
//! The peer is not trusted: every counter and length read from the shared
//! memory is checked before use, messages are copied out before they are
//! decoded, and a ring whose memory could shrink under the mapping (a file
//! without `F_SEAL_SHRINK`) is refused, so a hostile peer can make the
//! exchange fail but not fault this process.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAGIC: u64 = u64::from_le_bytes(*b"OFLDRNG1");
const VERSION: u32 = 1;
/// Where the message bytes start (one page of control words before them).
const DATA_OFFSET: usize = 4096;
/// How long a waiting side polls before it sleeps, unless
/// `OFFLOAD_LOCAL_SPIN_US` says otherwise ([`spin_setting`]).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(100);

/// How long waiting sides poll before they sleep: `OFFLOAD_LOCAL_SPIN_US`
/// (microseconds), else [`DEFAULT_SPIN`]. Read by both ends.
pub fn spin_setting() -> Duration {
    std::env::var("OFFLOAD_LOCAL_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_micros)
        .unwrap_or(DEFAULT_SPIN)
}

/// How long a waiting side polls without giving up its core.
const BUSY_POLL: Duration = Duration::from_micros(5);
/// Bytes of each direction's ring in rings this side creates.
pub const DEFAULT_RING_BYTES: usize = 1 << 20;
/// Ring sizes a server accepts.
const MIN_RING_BYTES: usize = 4096;
const MAX_RING_BYTES: usize = 16 << 20;

/// Which end of the rings this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sends requests, receives replies.
    Client,
    /// Receives requests, sends replies.
    Server,
}

/// One direction's control words (offsets into the mapping).
#[derive(Clone, Copy)]
struct Direction {
    tail: usize,
    head: usize,
    doorbell: usize,
    sleepers: usize,
    data: usize,
}

const REQUESTS: Direction = Direction {
    tail: 64,
    head: 128,
    doorbell: 192,
    sleepers: 196,
    data: DATA_OFFSET,
};
const CLOSED_BY_CLIENT: usize = 448;
const CLOSED_BY_SERVER: usize = 452;

fn replies(ring_bytes: usize) -> Direction {
    Direction {
        tail: 256,
        head: 320,
        doorbell: 384,
        sleepers: 388,
        data: DATA_OFFSET + ring_bytes,
    }
}

/// Why a ring exchange failed.
#[derive(Debug)]
pub enum RingError {
    /// The other side closed its end.
    Closed,
    /// A message larger than [`LocalRing::max_message`].
    TooLarge(usize),
    /// The other side wrote counters or lengths that cannot be.
    Corrupt(&'static str),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::Closed => write!(f, "the other side closed the shared-memory queue"),
            RingError::TooLarge(n) => {
                write!(f, "a message of {n} bytes does not fit the queue's ring")
            }
            RingError::Corrupt(what) => write!(f, "the shared-memory queue is corrupt: {what}"),
        }
    }
}

impl std::error::Error for RingError {}

/// A mapped pair of rings, one end of it.
pub struct LocalRing {
    base: *mut u8,
    map_len: usize,
    ring_bytes: usize,
    role: Role,
    /// Our producer position (the shared copy is only published), and the
    /// reader's position as last read: the shared one is read again only
    /// when that says the ring is full (each read of a word the other side
    /// writes is a cache miss).
    tail: Mutex<(u64, u64)>,
    /// Our consumer position.
    head: Mutex<u64>,
}

// SAFETY: the mapping is shared memory accessed through atomics (control
// words) and through copies guarded by the two mutexes (message bytes);
// nothing in it is tied to a thread.
unsafe impl Send for LocalRing {}
// SAFETY: as above; `&LocalRing` methods serialise producers and
// consumers with the mutexes.
unsafe impl Sync for LocalRing {}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl LocalRing {
    /// A new pair of rings in a sealed memfd (client side), and the
    /// descriptor to hand to the server.
    pub fn create(ring_bytes: usize) -> io::Result<(LocalRing, OwnedFd)> {
        if !ring_bytes.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring_bytes)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a queue ring of {ring_bytes} bytes: a power of two from {MIN_RING_BYTES} to {MAX_RING_BYTES} is needed"),
            ));
        }
        let total = DATA_OFFSET + 2 * ring_bytes;
        // SAFETY: a NUL-terminated name and valid flags.
        let raw = unsafe {
            libc::memfd_create(
                c"offload-queue".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(last_error("memfd_create"));
        }
        // SAFETY: `raw` is a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain calls on our own descriptor.
        unsafe {
            if libc::ftruncate(fd.as_raw_fd(), total as libc::off_t) != 0 {
                return Err(last_error("ftruncate"));
            }
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
                return Err(last_error("sealing the queue memory"));
            }
        }
        let ring = Self::map(&fd, total, ring_bytes, Role::Client)?;
        ring.word64(8).store(
            u64::from(VERSION) | ((ring_bytes as u64) << 32),
            Ordering::Relaxed,
        );
        ring.word64(0).store(MAGIC, Ordering::Release);
        Ok((ring, fd))
    }

    /// Map a ring a client handed over (server side), after checking that
    /// its memory cannot shrink and that its header is one of ours.
    pub fn attach(fd: &OwnedFd) -> io::Result<LocalRing> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        // SAFETY: plain queries on a descriptor we hold.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(invalid(
                "queue memory must be a memfd sealed against shrinking",
            ));
        }
        // SAFETY: `st` is written by fstat before it is read.
        let size = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
                return Err(last_error("fstat"));
            }
            st.st_size as u64
        };
        if size < (DATA_OFFSET + 2 * MIN_RING_BYTES) as u64
            || size > (DATA_OFFSET + 2 * MAX_RING_BYTES) as u64
        {
            return Err(invalid("queue memory has an unexpected size"));
        }
        // Map what is there, then check the header against it.
        let probe = Self::map(fd, size as usize, MIN_RING_BYTES, Role::Server)?;
        if probe.word64(0).load(Ordering::Acquire) != MAGIC {
            return Err(invalid("queue memory does not start with the ring header"));
        }
        let word = probe.word64(8).load(Ordering::Relaxed);
        let (version, ring_bytes) = (word as u32, (word >> 32) as usize);
        if version != VERSION {
            return Err(invalid("queue ring of another version"));
        }
        if !ring_bytes.is_power_of_two()
            || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring_bytes)
            || DATA_OFFSET + 2 * ring_bytes > size as usize
        {
            return Err(invalid("queue ring size does not fit its memory"));
        }
        let mut ring = probe;
        ring.ring_bytes = ring_bytes;
        // Start from where the client says it is (a fresh ring: 0).
        let tail = ring
            .word64(replies(ring_bytes).tail)
            .load(Ordering::Acquire);
        let head = ring
            .word64(replies(ring_bytes).head)
            .load(Ordering::Acquire);
        *ring.tail.get_mut().unwrap() = (tail, head);
        *ring.head.get_mut().unwrap() = ring.word64(REQUESTS.head).load(Ordering::Acquire);
        Ok(ring)
    }

    fn map(fd: &OwnedFd, len: usize, ring_bytes: usize, role: Role) -> io::Result<LocalRing> {
        // SAFETY: a shared mapping of a descriptor we hold, of its size.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(last_error("mapping the queue memory"));
        }
        Ok(LocalRing {
            base: base.cast(),
            map_len: len,
            ring_bytes,
            role,
            tail: Mutex::new((0, 0)),
            head: Mutex::new(0),
        })
    }

    fn word64(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset % 8 == 0 && offset + 8 <= DATA_OFFSET);
        // SAFETY: control words lie inside the mapping, 8-byte aligned
        // (the mapping is page aligned), and are only accessed atomically.
        unsafe { &*self.base.add(offset).cast::<AtomicU64>() }
    }

    fn word32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset % 4 == 0 && offset + 4 <= DATA_OFFSET);
        // SAFETY: as in `word64`, 4-byte aligned.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    fn outgoing(&self) -> Direction {
        match self.role {
            Role::Client => REQUESTS,
            Role::Server => replies(self.ring_bytes),
        }
    }

    fn incoming(&self) -> Direction {
        match self.role {
            Role::Client => replies(self.ring_bytes),
            Role::Server => REQUESTS,
        }
    }

    /// The largest message [`LocalRing::send`] takes.
    pub fn max_message(&self) -> usize {
        self.ring_bytes - 8
    }

    /// Copy `bytes` into the ring at position `pos` (wrapping).
    fn put(&self, dir: Direction, pos: u64, bytes: &[u8]) {
        let cap = self.ring_bytes;
        let at = (pos as usize) & (cap - 1);
        let first = bytes.len().min(cap - at);
        // SAFETY: both pieces lie inside this direction's ring bytes; the
        // consumer does not read them until the tail moves past them.
        unsafe {
            let ring = self.base.add(dir.data);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), ring.add(at), first);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), ring, bytes.len() - first);
        }
    }

    /// Copy `out.len()` bytes out of the ring at position `pos` (wrapping).
    fn get(&self, dir: Direction, pos: u64, out: &mut [u8]) {
        let cap = self.ring_bytes;
        let at = (pos as usize) & (cap - 1);
        let first = out.len().min(cap - at);
        // SAFETY: both pieces lie inside this direction's ring bytes. The
        // peer may change them meanwhile; they are only untrusted bytes.
        unsafe {
            let ring = self.base.add(dir.data);
            std::ptr::copy_nonoverlapping(ring.add(at), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(ring, out.as_mut_ptr().add(first), out.len() - first);
        }
    }

    /// Queue one message if there is room: Ok(false) when the ring is full.
    pub fn send(&self, message: &[u8]) -> Result<bool, RingError> {
        if message.len() > self.max_message() {
            return Err(RingError::TooLarge(message.len()));
        }
        if self.peer_closed() {
            return Err(RingError::Closed);
        }
        let dir = self.outgoing();
        let mut guard = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let (tail, known_head) = &mut *guard;
        let record = align8(4 + message.len()) as u64;
        if tail.wrapping_sub(*known_head) + record > self.ring_bytes as u64 {
            let head = self.word64(dir.head).load(Ordering::Acquire);
            let used = tail.wrapping_sub(head);
            if used > self.ring_bytes as u64 || head % 8 != 0 {
                return Err(RingError::Corrupt("the reader is ahead of the writer"));
            }
            *known_head = head;
            if used + record > self.ring_bytes as u64 {
                return Ok(false);
            }
        }
        self.put(dir, *tail, &(message.len() as u32).to_le_bytes());
        self.put(dir, *tail + 4, message);
        *tail += record;
        self.word64(dir.tail).store(*tail, Ordering::SeqCst);
        drop(guard);
        // A sleeper counted itself before it looked at the tail for the
        // last time (both SeqCst): either it saw this message, or this
        // sees it and wakes it. Without sleepers the doorbell stays as it
        // is (no write to a line the other side reads).
        if self.word32(dir.sleepers).load(Ordering::SeqCst) != 0 {
            self.ring(dir);
        }
        Ok(true)
    }

    /// Wake the other side if it sleeps on `dir`'s doorbell.
    fn ring(&self, dir: Direction) {
        let doorbell = self.word32(dir.doorbell);
        doorbell.fetch_add(1, Ordering::SeqCst);
        if self.word32(dir.sleepers).load(Ordering::SeqCst) != 0 {
            futex_wake(doorbell);
        }
    }

    /// Take the next message into `out` (replacing its contents): Ok(false)
    /// when none is waiting.
    pub fn recv(&self, out: &mut Vec<u8>) -> Result<bool, RingError> {
        let dir = self.incoming();
        let mut head = self.head.lock().unwrap_or_else(|e| e.into_inner());
        let tail = self.word64(dir.tail).load(Ordering::Acquire);
        let avail = tail.wrapping_sub(*head);
        if avail == 0 {
            return if self.peer_closed() {
                Err(RingError::Closed)
            } else {
                Ok(false)
            };
        }
        if avail > self.ring_bytes as u64 || avail < 8 || tail % 8 != 0 {
            return Err(RingError::Corrupt("the writer's position cannot be"));
        }
        let mut len = [0u8; 4];
        self.get(dir, *head, &mut len);
        let len = u32::from_le_bytes(len) as usize;
        let record = align8(4 + len) as u64;
        if len > self.max_message() || record > avail {
            return Err(RingError::Corrupt("a message longer than what was written"));
        }
        out.clear();
        out.resize(len, 0);
        self.get(dir, *head + 4, out);
        *head += record;
        self.word64(dir.head).store(*head, Ordering::SeqCst);
        drop(head);
        // A writer waiting for room polls; nothing to wake.
        Ok(true)
    }

    /// Whether a message (or the peer's close) is waiting.
    pub fn readable(&self) -> bool {
        let dir = self.incoming();
        // The published head is ours (the peer may scribble on it: then
        // this says "readable" and `recv` finds the truth).
        let head = self.word64(dir.head).load(Ordering::Acquire);
        self.word64(dir.tail).load(Ordering::Acquire) != head || self.peer_closed()
    }

    /// The incoming direction's doorbell: read it before the check that
    /// decides to wait, and pass it to [`LocalRing::wait`].
    pub fn doorbell(&self) -> u32 {
        self.word32(self.incoming().doorbell).load(Ordering::SeqCst)
    }

    /// Ring the incoming direction's doorbell: other threads of this
    /// process waiting on it look again (one of them read what they
    /// waited for).
    pub fn nudge(&self) {
        self.ring(self.incoming());
    }

    /// Wait until [`LocalRing::readable`] or the doorbell moves past
    /// `seen`: poll for `spin` (busy for the first microseconds, then
    /// yielding the core between looks, so that on a machine with more
    /// runnable threads than cores the other side gets to run), then sleep
    /// until woken or `timeout` passes. Returns whether it is readable.
    pub fn wait(&self, seen: u32, spin: Duration, timeout: Duration) -> bool {
        let dir = self.incoming();
        let doorbell = self.word32(dir.doorbell);
        let start = Instant::now();
        let mut turns = 0u32;
        loop {
            if self.readable() {
                return true;
            }
            if doorbell.load(Ordering::SeqCst) != seen {
                return false;
            }
            turns += 1;
            if turns % 64 == 0 {
                let waited = start.elapsed();
                if waited >= spin {
                    break;
                }
                if waited >= BUSY_POLL {
                    std::thread::yield_now();
                    continue;
                }
            }
            std::hint::spin_loop();
        }
        let sleepers = self.word32(dir.sleepers);
        sleepers.fetch_add(1, Ordering::SeqCst);
        if !self.readable() {
            futex_wait(doorbell, seen, timeout);
        }
        sleepers.fetch_sub(1, Ordering::SeqCst);
        self.readable()
    }

    /// [`LocalRing::wait`] from now.
    pub fn wait_readable(&self, spin: Duration, timeout: Duration) -> bool {
        self.wait(self.doorbell(), spin, timeout)
    }

    /// Close our end: the other side's waits end and its sends fail.
    pub fn close(&self) {
        let own = match self.role {
            Role::Client => CLOSED_BY_CLIENT,
            Role::Server => CLOSED_BY_SERVER,
        };
        self.word32(own).store(1, Ordering::SeqCst);
        self.ring(self.outgoing());
        self.ring(self.incoming());
    }

    /// Whether the other side closed its end.
    pub fn peer_closed(&self) -> bool {
        let peer = match self.role {
            Role::Client => CLOSED_BY_SERVER,
            Role::Server => CLOSED_BY_CLIENT,
        };
        self.word32(peer).load(Ordering::SeqCst) != 0
    }
}

impl Drop for LocalRing {
    fn drop(&mut self) {
        self.close();
        // SAFETY: our own mapping, unmapped once; no reference into it
        // outlives `self`.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

/// Sleep while `word` holds `expected`, at most `timeout` (process-shared
/// futex: the word lives in memory shared with the other process).
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned 32-bit word; a spurious or early
    // return is fine for every caller (they re-check and loop).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(bytes: usize) -> (LocalRing, LocalRing) {
        let (client, fd) = LocalRing::create(bytes).unwrap();
        let server = LocalRing::attach(&fd).unwrap();
        (client, server)
    }

    #[test]
    fn messages_cross_both_ways_in_order_and_wrap_around() {
        let (client, server) = pair(MIN_RING_BYTES);
        let mut got = Vec::new();
        for round in 0..200u32 {
            let msg: Vec<u8> = (0..(round as usize * 37) % 1500)
                .map(|i| (i as u32 ^ round) as u8)
                .collect();
            assert!(client.send(&msg).unwrap());
            assert!(server.recv(&mut got).unwrap());
            assert_eq!(got, msg, "request {round}");
            assert!(server.send(&msg[..msg.len() / 2]).unwrap());
            assert!(client.recv(&mut got).unwrap());
            assert_eq!(got, &msg[..msg.len() / 2], "reply {round}");
        }
        assert!(!server.recv(&mut got).unwrap(), "nothing left");
    }

    #[test]
    fn a_full_ring_refuses_until_read_and_big_messages_are_refused() {
        let (client, server) = pair(MIN_RING_BYTES);
        let msg = [7u8; 1000];
        let mut sent = 0;
        while client.send(&msg).unwrap() {
            sent += 1;
        }
        assert_eq!(sent, MIN_RING_BYTES / 1008);
        let mut got = Vec::new();
        assert!(server.recv(&mut got).unwrap());
        assert!(client.send(&msg).unwrap(), "room again after one read");
        assert!(LocalRing::create(3000).is_err(), "not a power of two");
        assert!(LocalRing::create(MAX_RING_BYTES * 2).is_err(), "too large");
        assert!(matches!(
            client.send(&vec![0; MIN_RING_BYTES]),
            Err(RingError::TooLarge(_))
        ));
    }

    #[test]
    fn a_waiting_side_is_woken_and_sees_a_close() {
        let (client, server) = pair(MIN_RING_BYTES);
        let server = std::sync::Arc::new(server);
        let s = server.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            assert!(s.wait_readable(Duration::ZERO, Duration::from_secs(20)));
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        client.send(b"wake").unwrap();
        assert!(
            t.join().unwrap() < Duration::from_secs(10),
            "woken, not timed out"
        );
        drop(client);
        let mut got = Vec::new();
        assert!(server.recv(&mut got).unwrap());
        assert!(matches!(server.recv(&mut got), Err(RingError::Closed)));
        assert!(matches!(server.send(b"x"), Err(RingError::Closed)));
    }

    #[test]
    fn hostile_counters_and_lengths_are_errors_not_faults() {
        let (client, server) = pair(MIN_RING_BYTES);
        let mut got = Vec::new();
        // A tail far beyond what the ring holds.
        client
            .word64(REQUESTS.tail)
            .store(1 << 40, Ordering::SeqCst);
        assert!(matches!(server.recv(&mut got), Err(RingError::Corrupt(_))));
        // A length beyond what was written.
        client.word64(REQUESTS.tail).store(8, Ordering::SeqCst);
        client.put(REQUESTS, 0, &u32::MAX.to_le_bytes());
        assert!(matches!(server.recv(&mut got), Err(RingError::Corrupt(_))));
        // A reader position ahead of the writer: found when the writer
        // next needs room (it reads the reader's position only then).
        client
            .word64(replies(MIN_RING_BYTES).head)
            .store(1 << 33, Ordering::SeqCst);
        let refused = (0..MIN_RING_BYTES).find_map(|_| server.send(b"x").err());
        assert!(
            matches!(refused, Some(RingError::Corrupt(_))),
            "{refused:?}"
        );
    }

    /// A peer that scribbles anything anywhere: counters, lengths, message
    /// bytes, doorbells. The other side's calls return (an error or not),
    /// never panic, never read or write outside the mapping (the process
    /// would fault), and the messages it hands out are never longer than
    /// the ring allows.
    #[test]
    fn random_scribbles_by_the_peer_are_survived() {
        let (client, server) = pair(MIN_RING_BYTES);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut got = Vec::new();
        for _ in 0..20_000 {
            let r = next();
            let offset = [
                REQUESTS.tail,
                REQUESTS.head,
                replies(MIN_RING_BYTES).tail,
                replies(MIN_RING_BYTES).head,
            ][(r % 4) as usize];
            let value = match (r >> 8) % 4 {
                0 => next(),
                1 => next() % (2 * MIN_RING_BYTES as u64),
                2 => next() & !7,
                _ => 0,
            };
            client.word64(offset).store(value, Ordering::SeqCst);
            if r % 3 == 0 {
                let at = (next() as usize) % MIN_RING_BYTES;
                client.put(REQUESTS, at as u64, &next().to_le_bytes()[..4]);
            }
            for _ in 0..4 {
                if let Ok(true) = server.recv(&mut got) {
                    assert!(got.len() <= server.max_message());
                }
                let _ = server.send(&got[..got.len().min(64)]);
                let _ = server.readable();
            }
        }
    }

    #[test]
    fn memory_that_could_shrink_or_is_not_a_ring_is_refused() {
        // SAFETY: plain calls on a descriptor this test owns.
        let unsealed = unsafe {
            let raw = libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC);
            assert!(raw >= 0);
            assert_eq!(libc::ftruncate(raw, 1 << 20), 0);
            OwnedFd::from_raw_fd(raw)
        };
        assert!(LocalRing::attach(&unsealed).is_err());
        let file = tempfile_like();
        assert!(LocalRing::attach(&file).is_err());
        // Sealed but without our header.
        let (_ring, fd) = LocalRing::create(MIN_RING_BYTES).unwrap();
        // SAFETY: a fresh shared mapping of the ring's memory, unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            *(p as *mut u64) = 0;
            libc::munmap(p, 4096);
        }
        assert!(LocalRing::attach(&fd).is_err());
    }

    fn tempfile_like() -> OwnedFd {
        std::fs::File::open("/proc/self/exe").unwrap().into()
    }
}
