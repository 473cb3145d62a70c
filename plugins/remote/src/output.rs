//! What the session's device code wrote to its stdout and stderr on the
//! server (protocol 3), written to this process's own.

use offload_proto::Output;

extern "C" {
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Write the device's output through C's stdio and flush it: whatever the
/// program printed before (still in `stdout`'s buffer) comes out first, so
/// host and device lines keep the order a local run gives them.
pub(crate) fn emit(output: Option<&Output>) {
    let Some(o) = output else { return };
    // SAFETY: glibc's standard streams, initialised before main; fwrite and
    // fflush take each stream's own lock; the buffers outlive the calls.
    unsafe {
        for (bytes, stream) in [(&o.stdout, stdout), (&o.stderr, stderr)] {
            if !bytes.is_empty() {
                libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), stream);
                libc::fflush(stream);
            }
        }
    }
}
