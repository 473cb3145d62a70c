//! The bulk-data side channel's wire format, shared by the server and the
//! remote plugin (plain TCP next to gRPC; see offload-server's `data`
//! module for the exchange).

use std::io::{IoSlice, Write};

/// Host to device: the client sends `len` bytes, the server answers a status.
pub const OP_WRITE: u32 = 1;
/// Device to host: the server answers a status, then `len` bytes on success.
pub const OP_READ: u32 = 2;
/// `op:u32 device:u32 addr:u64 len:u64 reserved:u64`, little endian.
pub const HEADER_BYTES: usize = 32;

/// `write_all` for several buffers, in as few writes (one `writev` when the
/// socket takes it all) as the kernel allows: a header and its payload
/// leave together, so neither waits for the peer's delayed ACK.
pub fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
