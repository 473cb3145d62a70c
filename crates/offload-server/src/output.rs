//! A session worker's stdout and stderr, for its client.
//!
//! Device code (a kernel's `printf`, an image's constructors) writes to the
//! worker process's descriptors 1 and 2. [`capture`] makes them pipes that
//! a thread of the worker drains into memory; [`take`] flushes C's stdio
//! and returns what was written so far, and the service sends it with the
//! next reply that can follow device code (queue completions, program loads
//! and unloads, [`offload_proto::Output`]). The client writes it to its own
//! stdout and stderr before that call returns: a launch's output comes out
//! before its sync, in order with the client's own output.
//!
//! The worker's own log goes to the descriptor that was its stderr (the
//! server's log), through [`log_writer`].

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

use offload_proto::Output;

/// Output held for the client beyond this is dropped (and said so).
const MAX_HELD: usize = 8 << 20;

struct Capture {
    /// Read ends of the stdout and stderr pipes (non-blocking).
    pipes: [File; 2],
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    out: [Vec<u8>; 2],
    dropped: [u64; 2],
}

static CAPTURE: OnceLock<Capture> = OnceLock::new();
/// The server's log (the worker's stderr before [`capture`]).
static LOG: OnceLock<File> = OnceLock::new();

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

/// Make descriptors 1 and 2 pipes drained for the client; the log keeps
/// the old stderr. Called once, in the worker, before any device code runs.
pub fn capture() -> Result<(), String> {
    // SAFETY: descriptor 2 is this process's stderr; the duplicate is ours.
    let log = unsafe {
        let fd = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 {
            return Err(format!(
                "keeping the log: {}",
                std::io::Error::last_os_error()
            ));
        }
        File::from_raw_fd(fd)
    };
    let _ = LOG.set(log);
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
            held: Mutex::default(),
        })
        .is_err()
    {
        return Err("output captured twice".into());
    }
    std::thread::Builder::new()
        .name("offload-worker-output".into())
        .spawn(drain_forever)
        .map_err(|e| format!("starting the output thread: {e}"))?;
    Ok(())
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
            Ok(_) | Err(nix::Error::EINTR) => c.drain(),
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
    fn drain(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = [0u8; 16 << 10];
        for (i, mut pipe) in self.pipes.iter().enumerate() {
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = MAX_HELD.saturating_sub(held.out[i].len()).min(n);
                        held.out[i].extend_from_slice(&buf[..room]);
                        held.dropped[i] += (n - room) as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
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
    c.drain();
    let mut held = c.held.lock().unwrap_or_else(|e| e.into_inner());
    if held.out.iter().all(|o| o.is_empty()) {
        return None;
    }
    for i in 0..2 {
        let dropped = std::mem::take(&mut held.dropped[i]);
        if dropped > 0 {
            let note = format!(
                "\n[offload serve: {dropped} bytes of the device's output dropped: more than {} MiB between two replies]\n",
                MAX_HELD >> 20
            );
            held.out[i].extend_from_slice(note.as_bytes());
        }
    }
    Some(Output {
        stdout: std::mem::take(&mut held.out[0]).into(),
        stderr: std::mem::take(&mut held.out[1]).into(),
    })
}
