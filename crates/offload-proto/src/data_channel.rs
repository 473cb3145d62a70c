//! The bulk-data side channel's wire format, shared by the server and the
//! remote plugin (plain TCP next to gRPC; see offload-server's `data`
//! module for the exchange).

use std::io::{IoSlice, Read, Write};

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

/// Read a status (`code:u32 msg_len:u32 msg`, what the server answers a
/// request or a same-host queue): the code (0: success) and the message,
/// of which at most 64 KiB is kept (the rest is read and dropped, so the
/// stream stays in step).
pub fn read_status(r: &mut impl Read) -> std::io::Result<(u32, String)> {
    let mut st = [0u8; 8];
    r.read_exact(&mut st)?;
    let code = u32::from_le_bytes([st[0], st[1], st[2], st[3]]);
    let len = u64::from(u32::from_le_bytes([st[4], st[5], st[6], st[7]]));
    let mut msg = Vec::new();
    r.take(len.min(64 << 10)).read_to_end(&mut msg)?;
    std::io::copy(
        &mut r.take(len.saturating_sub(64 << 10)),
        &mut std::io::sink(),
    )?;
    if (msg.len() as u64) < len.min(64 << 10) {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok((code, String::from_utf8_lossy(&msg).into_owned()))
}
