//! Reading input files the runtime is pointed at (program images given by
//! path, recorded launches) without trusting them: only regular files (a
//! path to `/dev/zero`, a FIFO or a terminal is refused instead of being
//! read until memory runs out or blocking forever), at most a bounded
//! number of bytes, and a file that changes size while it is read is an
//! error.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::OnceLock;

use crate::error::{Error, ErrorCode, Result};

/// The default largest program image the runtime loads (4 GiB);
/// `OFFLOAD_MAX_IMAGE_SIZE` (bytes) changes it.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 4 << 30;

/// The largest program image the runtime loads: `OFFLOAD_MAX_IMAGE_SIZE`
/// (bytes) when set to a number, else [`DEFAULT_MAX_IMAGE_BYTES`].
pub fn max_image_bytes() -> u64 {
    static MAX: OnceLock<u64> = OnceLock::new();
    *MAX.get_or_init(|| {
        crate::config::env_u64("OFFLOAD_MAX_IMAGE_SIZE", "a byte count", "4 GiB")
            .filter(|&v| v > 0)
            .unwrap_or(DEFAULT_MAX_IMAGE_BYTES)
    })
}

/// An error unless an image of `len` bytes is within [`max_image_bytes`].
pub fn check_image_size(len: usize) -> Result<()> {
    let max = max_image_bytes();
    if len as u64 > max {
        return Err(Error::new(
            ErrorCode::InvalidSize,
            format!(
                "image of {len} bytes exceeds the limit of {max} bytes for a program image (OFFLOAD_MAX_IMAGE_SIZE)"
            ),
        ));
    }
    Ok(())
}

/// What a file that is not a regular file is, for messages.
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// The bytes of `path`, a regular file of at most `max` bytes. `what` names
/// the file's role in messages ("program image"). Opened non-blocking, so
/// a FIFO is refused rather than waited on; reads at most the size the
/// file had when opened plus one byte, so a file that grows meanwhile (or
/// lies about its size) is an error, never an unbounded read.
pub fn read_regular(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let io = |e: std::io::Error| {
        Error::new(ErrorCode::HostIo, format!("{what} {}: {e}", path.display()))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "{what} {}: is {}; only a regular file is read",
                path.display(),
                kind_of(meta.file_type())
            ),
        ));
    }
    let len = meta.len();
    if len > max {
        return Err(Error::new(
            ErrorCode::InvalidSize,
            format!(
                "{what} {}: {len} bytes, more than the limit of {max} bytes",
                path.display()
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 != len {
        return Err(Error::new(
            ErrorCode::HostIo,
            format!(
                "{what} {}: changed size while being read ({len} bytes when opened, {}{} read)",
                path.display(),
                bytes.len(),
                if bytes.len() as u64 > len {
                    " or more"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(bytes)
}

/// A program image read from `path` (see [`read_regular`]), within
/// [`max_image_bytes`].
pub fn read_image(path: &Path) -> Result<Vec<u8>> {
    read_regular(path, max_image_bytes(), "program image")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_and_oversized_inputs_are_refused() {
        for p in ["/dev/zero", "/dev/null", "/dev/urandom", "/"] {
            let e = read_regular(Path::new(p), 1 << 20, "program image").unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArgument, "{p}: {e}");
            assert!(e.to_string().contains(p), "{e}");
        }
        let dir = std::env::temp_dir().join(format!("offload-files-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Non-blocking: refused at once, never waiting for a writer.
        let e = read_regular(&fifo, 1 << 20, "program image").unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let big = dir.join("big");
        std::fs::write(&big, vec![7u8; 100]).unwrap();
        let e = read_regular(&big, 99, "program image").unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSize, "{e}");
        assert_eq!(read_regular(&big, 100, "x").unwrap().len(), 100);
        assert!(check_image_size(usize::MAX).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
