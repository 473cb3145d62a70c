//! A session worker's stdout and stderr, for its client.
//!
//! Device code (a kernel's `printf`, an image's constructors) writes to the
//! worker process's descriptors 1 and 2. [`capture`] makes them pipes that
//! a thread of the worker drains; [`take`] flushes C's stdio and returns
//! what was written so far, and the service sends it with the next reply
//! that can follow device code (queue completions, program loads and
//! unloads, [`offload_proto::Output`]). The client writes it to its own
//! stdout and stderr before that call returns: a launch's output comes out
//! before its sync, in order with the client's own output.
//!
//! What was drained but not yet sent is held in a memory file
//! ([`Spool`]), not in the worker's heap: the supervisor has the same file
//! and the pipes' read ends ([`Capture::handles`]), so when device code
//! ends the worker (`exit()`, a crash, the OOM killer) the supervisor still
//! finds what it wrote last ([`leftovers`]) and sends it to the client
//! before the session's end. An `atexit` hook and a handler of the fatal
//! signals move what is still in the pipes into the spool first.
//!
//! The worker's own log goes to the descriptor that was its stderr (the
//! server's log), through [`log_writer`].

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, MutexGuard, OnceLock};

use offload_proto::Output;

/// Output held for the client beyond this (per stream) is dropped (and
/// said so).
pub const MAX_HELD: usize = 8 << 20;

/// The spool's layout: a header of four little-endian u64 (bytes held of
/// stdout and stderr, bytes dropped of each), then stdout's region, then
/// stderr's.
const HEADER_BYTES: usize = 32;
const REGION_START: u64 = 4096;

fn region(stream: usize) -> u64 {
    REGION_START + (stream * MAX_HELD) as u64
}

/// Output drained from the pipes and not yet sent, in a memory file
/// (`memfd`) that outlives the worker in the supervisor.
pub struct Spool(File);

/// Lengths of what a [`Spool`] holds (a copy of its header).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct Lengths {
    held: [u64; 2],
    dropped: [u64; 2],
}

impl Spool {
    fn create() -> Result<Spool, String> {
        let fd = nix::sys::memfd::memfd_create(
            c"offload-output",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .map_err(|e| format!("output spool: {e}"))?;
        Ok(Spool(File::from(fd)))
    }

    /// The supervisor's view of a worker's spool.
    pub fn from_fd(fd: OwnedFd) -> Spool {
        Spool(File::from(fd))
    }

    fn write_lengths(&self, l: &Lengths) {
        let mut h = [0u8; HEADER_BYTES];
        for (i, v) in l.held.iter().chain(l.dropped.iter()).enumerate() {
            h[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let _ = self.0.write_all_at(&h, 0);
    }

    /// The header, with lengths past a region's end cut to it (the file is
    /// writable by the session's own code: trusted for nothing).
    fn read_lengths(&self) -> Lengths {
        let mut h = [0u8; HEADER_BYTES];
        if self.0.read_exact_at(&mut h, 0).is_err() {
            return Lengths::default();
        }
        let word = |i: usize| u64::from_le_bytes(h[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Lengths {
            held: [word(0).min(MAX_HELD as u64), word(1).min(MAX_HELD as u64)],
            dropped: [word(2), word(3)],
        }
    }

    /// Append to stream `i`'s region what fits; count the rest as dropped.
    /// No allocation (runs in a signal handler too).
    fn append(&self, l: &mut Lengths, i: usize, bytes: &[u8]) {
        let room = (MAX_HELD as u64)
            .saturating_sub(l.held[i])
            .min(bytes.len() as u64) as usize;
        if room > 0
            && self
                .0
                .write_all_at(&bytes[..room], region(i) + l.held[i])
                .is_ok()
        {
            l.held[i] += room as u64;
        } else {
            l.dropped[i] += room as u64;
        }
        l.dropped[i] += (bytes.len() - room) as u64;
        self.write_lengths(l);
    }

    /// What it holds, as one [`Output`] (None when empty), and empty it.
    fn take(&self, l: &mut Lengths) -> Option<Output> {
        let mut out: [Vec<u8>; 2] = Default::default();
        for (i, o) in out.iter_mut().enumerate() {
            let mut bytes = vec![0u8; l.held[i] as usize];
            let mut got = 0;
            while got < bytes.len() {
                match self.0.read_at(&mut bytes[got..], region(i) + got as u64) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            bytes.truncate(got);
            *o = bytes;
        }
        let dropped = l.dropped;
        if *l != Lengths::default() {
            *l = Lengths::default();
            self.write_lengths(l);
        }
        finish(out, dropped)
    }
}

/// An [`Output`] of `out`, with a line per stream saying how much was
/// dropped; None when there is nothing.
fn finish(mut out: [Vec<u8>; 2], dropped: [u64; 2]) -> Option<Output> {
    for i in 0..2 {
        if dropped[i] > 0 {
            let note = format!(
                "\n[offload serve: {} bytes of the device's output dropped: more than {} MiB between two replies]\n",
                dropped[i],
                MAX_HELD >> 20
            );
            out[i].extend_from_slice(note.as_bytes());
        }
    }
    if out.iter().all(|o| o.is_empty()) {
        return None;
    }
    let [stdout, stderr] = out;
    Some(Output {
        stdout: stdout.into(),
        stderr: stderr.into(),
    })
}

struct Capture {
    /// Read ends of the stdout and stderr pipes (non-blocking).
    pipes: [File; 2],
    spool: Spool,
    /// The spool's lengths and the buffer bytes pass through; held while
    /// moving bytes from a pipe to the spool, so that nothing is ever only
    /// in that buffer when another thread looks (the exit hook takes it
    /// for good).
    held: Mutex<Held>,
}

/// What [`Capture::held`] guards. The buffer is not on a stack: the
/// fatal-signal handler drains too, on whatever stack faulted.
struct Held {
    lengths: Lengths,
    buf: Box<[u8]>,
}

static CAPTURE: OnceLock<Capture> = OnceLock::new();
/// The server's log (the worker's stderr before [`capture`]).
static LOG: OnceLock<File> = OnceLock::new();
/// The process's stdout before [`capture`].
static OUT: OnceLock<File> = OnceLock::new();

/// Writes a log line to the server's log, wherever stderr points now.
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match LOG.get() {
            Some(mut f) => f.write(buf),
            None => std::io::stderr().write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The worker's log writer (for `tracing_subscriber`'s `with_writer`).
pub fn log_writer() -> LogWriter {
    LogWriter
}

fn pipe() -> Result<(File, OwnedFd), String> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| format!("output pipe: {e}"))?;
    nix::fcntl::fcntl(
        r.as_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .map_err(|e| format!("output pipe: {e}"))?;
    Ok((File::from(r), w))
}

/// A duplicate of descriptor `fd` (close-on-exec, numbered 3 or above).
fn keep(fd: i32, what: &str) -> Result<File, String> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on a standard descriptor of this
    // process; the new descriptor is ours alone.
    unsafe {
        let new = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
        if new < 0 {
            return Err(format!(
                "keeping {what}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(File::from_raw_fd(new))
    }
}

/// Make descriptors 1 and 2 pipes drained for the client; the log keeps
/// the old stderr. Called once, in the worker, before any device code runs.
pub fn capture() -> Result<(), String> {
    capture_with(true)
}

/// `offload serve --sessions-in-process`: the server's own descriptors 1
/// and 2 become the pipes, drained for the sessions' replies as in a
/// worker. Every session of the process shares them: a reply carries what
/// device code wrote since the previous reply, whichever session's code
/// wrote it (the mode has no isolation between sessions at all). The log
/// and the server's own lines keep the old descriptors ([`log_writer`],
/// [`log_line`], [`print_line`]). Not done by [`crate::serve`] itself: a
/// program embedding the server keeps its descriptors.
pub fn capture_in_process() -> Result<(), String> {
    capture_with(false)
}

/// The server's own line on its stdout (the old one, once captured).
pub fn print_line(line: &str) {
    let mut text = line.to_string();
    text.push('\n');
    let _ = match OUT.get() {
        Some(mut f) => f.write_all(text.as_bytes()),
        None => {
            let mut out = std::io::stdout();
            out.write_all(text.as_bytes()).and_then(|_| out.flush())
        }
    };
}

/// The server's own line on its log (stderr, the old one once captured).
pub fn log_line(line: &str) {
    let mut text = line.to_string();
    text.push('\n');
    let _ = LogWriter.write_all(text.as_bytes());
}

fn capture_with(last_words: bool) -> Result<(), String> {
    let _ = LOG.set(keep(2, "the log")?);
    if !last_words {
        // (In a worker its stdout is nothing of its own.)
        let _ = OUT.set(keep(1, "stdout")?);
    }
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    for (w, target) in [(&out_w, 1), (&err_w, 2)] {
        // SAFETY: dup2 onto the standard descriptors, which stay open.
        if unsafe { libc::dup2(w.as_raw_fd(), target) } < 0 {
            return Err(format!(
                "redirecting descriptor {target}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    drop((out_w, err_w));
    // stdout as a pipe is fully buffered: line-buffered instead, as on a
    // terminal, so that lines written before a crash reach the pipe.
    // SAFETY: setvbuf on C's stdout before anything was written to it.
    unsafe {
        libc::setvbuf(stdout_file(), std::ptr::null_mut(), libc::_IOLBF, 0);
    }
    if CAPTURE
        .set(Capture {
            pipes: [out_r, err_r],
            spool: Spool::create()?,
            held: Mutex::new(Held {
                lengths: Lengths::default(),
                buf: vec![0u8; 16 << 10].into_boxed_slice(),
            }),
        })
        .is_err()
    {
        return Err("output captured twice".into());
    }
    if last_words {
        install_last_words();
    }
    std::thread::Builder::new()
        .name("offload-worker-output".into())
        .spawn(drain_forever)
        .map_err(|e| format!("starting the output thread: {e}"))?;
    Ok(())
}

/// The spool and the pipes' read ends, for the supervisor (after
/// [`capture`]): what it needs to find the output of a worker that died.
pub fn handles() -> Option<[std::os::fd::BorrowedFd<'static>; 3]> {
    let c = CAPTURE.get()?;
    Some([c.spool.0.as_fd(), c.pipes[0].as_fd(), c.pipes[1].as_fd()])
}

fn stdout_file() -> *mut libc::FILE {
    extern "C" {
        static mut stdout: *mut libc::FILE;
    }
    // SAFETY: glibc's `stdout`, initialised before main; read only.
    unsafe { stdout }
}

/// Keep the pipes empty (a kernel writing more than a pipe holds must not
/// block until the next reply).
fn drain_forever() {
    let Some(c) = CAPTURE.get() else { return };
    loop {
        let mut fds = [
            nix::poll::PollFd::new(c.pipes[0].as_fd(), nix::poll::PollFlags::POLLIN),
            nix::poll::PollFd::new(c.pipes[1].as_fd(), nix::poll::PollFlags::POLLIN),
        ];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
            Ok(_) | Err(nix::Error::EINTR) => c.drain(&mut c.lock()),
            Err(_) => return,
        }
        // Device code closed its descriptor 1 or 2 (or ours): no spinning.
        let gone = nix::poll::PollFlags::POLLHUP | nix::poll::PollFlags::POLLNVAL;
        if fds
            .iter()
            .any(|f| f.revents().is_some_and(|r| r.intersects(gone)))
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Capture {
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Move what the pipes hold into the spool (no allocation, little
    /// stack).
    fn drain(&self, held: &mut Held) {
        let Held { lengths, buf } = held;
        for (i, mut pipe) in self.pipes.iter().enumerate() {
            loop {
                match pipe.read(buf) {
                    Ok(0) => break,
                    Ok(n) => self.spool.append(lengths, i, &buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        }
    }

    /// The process is ending: move everything written so far into the
    /// spool, where the supervisor finds it. Waits (a bounded time) for a
    /// drain in progress; `forever` keeps the lock (the process exits: no
    /// byte may then leave the pipes for a buffer that dies with it).
    fn last_words(&self, forever: bool) {
        let mut tries = 0;
        let mut guard = loop {
            match self.held.try_lock() {
                Ok(g) => break g,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) if tries < 200 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                // Held by this very thread (or stuck): the pipes keep the
                // rest for the supervisor.
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        };
        self.drain(&mut guard);
        if forever {
            std::mem::forget(guard);
        }
    }
}

/// `atexit` hook: device code called `exit()` (or the worker ends).
extern "C" fn at_exit() {
    if let Some(c) = CAPTURE.get() {
        // SAFETY: fflush(NULL) flushes every C stream, each under its lock.
        unsafe {
            libc::fflush(std::ptr::null_mut());
        }
        c.last_words(true);
    }
}

/// Signals that end the worker by default and that device code may
/// cause itself.
const FATAL: [libc::c_int; 7] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Fatal signal handler (one-shot, `SA_RESETHAND`): save the output, then
/// die of the same signal: a fault happens again when the handler returns,
/// a signal sent by someone is sent again.
extern "C" fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if let Some(c) = CAPTURE.get() {
        c.last_words(false);
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let sent = info.is_null() || unsafe { (*info).si_code } <= 0;
    if sent {
        // SAFETY: raise(3) is async-signal-safe; the action is the default
        // again (SA_RESETHAND).
        unsafe {
            libc::raise(sig);
        }
    }
}

fn install_last_words() {
    // SAFETY: registering a plain function with no captured state.
    unsafe {
        libc::atexit(at_exit);
    }
    for sig in FATAL {
        // SAFETY: a zeroed sigaction is valid; the handler only touches the
        // spool and the pipes (syscalls, no allocation) and raise(3).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal as *const () as usize;
            // On the stack that faulted (not an alternate one, which may
            // be small): a stack overflow cannot run it and simply kills.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// What device code wrote since the last call, or None when nothing was
/// (or output is not captured: sessions in the server's process).
pub fn take() -> Option<Output> {
    let c = CAPTURE.get()?;
    // SAFETY: fflush(NULL) flushes every C stream, each under its own lock.
    unsafe {
        libc::fflush(std::ptr::null_mut());
    }
    let mut held = c.lock();
    c.drain(&mut held);
    c.spool.take(&mut held.lengths)
}

/// In the supervisor, once a worker is gone: what its device code wrote
/// and the session was not sent (its spool, then what is left in its
/// pipes). At most [`MAX_HELD`] per stream from each.
pub fn leftovers(spool: &Spool, pipes: &[File; 2]) -> Option<Output> {
    let mut held = spool.read_lengths();
    let mut out = match spool.take(&mut held) {
        Some(o) => [o.stdout.to_vec(), o.stderr.to_vec()],
        None => Default::default(),
    };
    let mut buf = [0u8; 16 << 10];
    for (i, mut pipe) in pipes.iter().enumerate() {
        let mut from_pipe = 0;
        while from_pipe < MAX_HELD {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let n = n.min(MAX_HELD - from_pipe);
                    out[i].extend_from_slice(&buf[..n]);
                    from_pipe += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    }
    finish(out, [0, 0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spool_keeps_order_bounds_and_counts_what_it_drops() {
        let spool = Spool::create().unwrap();
        let mut l = Lengths::default();
        spool.append(&mut l, 0, b"hello ");
        spool.append(&mut l, 1, b"err");
        spool.append(&mut l, 0, b"world");
        // Another process's view (the supervisor's) reads the same file.
        let again = Spool(spool.0.try_clone().unwrap());
        let mut seen = again.read_lengths();
        let o = again.take(&mut seen).unwrap();
        assert_eq!(&o.stdout[..], b"hello world");
        assert_eq!(&o.stderr[..], b"err");
        assert!(spool.take(&mut spool.read_lengths()).is_none(), "emptied");
        let big = vec![b'x'; MAX_HELD + 10];
        let mut l = Lengths::default();
        spool.append(&mut l, 0, &big);
        let o = spool.take(&mut l).unwrap();
        assert!(o.stdout.len() > MAX_HELD);
        assert!(String::from_utf8_lossy(&o.stdout[MAX_HELD..]).contains("10 bytes"));
    }

    #[test]
    fn leftovers_are_the_spool_then_the_pipes_and_lengths_are_not_trusted() {
        let spool = Spool::create().unwrap();
        let mut l = Lengths::default();
        spool.append(&mut l, 0, b"spooled ");
        let (r0, w0) = pipe().unwrap();
        let (r1, w1) = pipe().unwrap();
        File::from(w0).write_all(b"piped").unwrap();
        drop(w1);
        let o = leftovers(&spool, &[r0, r1]).unwrap();
        assert_eq!(&o.stdout[..], b"spooled piped");
        // A header claiming more than a region holds is cut to it.
        spool.0.write_all_at(&u64::MAX.to_le_bytes(), 0).unwrap();
        assert_eq!(spool.read_lengths().held[0], MAX_HELD as u64);
    }
}
