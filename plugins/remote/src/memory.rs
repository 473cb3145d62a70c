//! Synchronous copies, streamed in chunks.

use offload_core::{DevicePtr, Result};
use offload_proto::{ReadRequest, WriteChunk};

use crate::connection::{block_on, rpc_error, Connection};

/// Host to device. The bytes are sent in `chunk_size` pieces; at most a few
/// pieces are in flight at once.
///
/// # Safety
/// `src` valid for `size` bytes for the duration of the call.
pub unsafe fn write(
    conn: &Connection,
    device: u32,
    dst: DevicePtr,
    src: *const u8,
    size: usize,
) -> Result<()> {
    conn.check_alive("write")?;
    crate::queue::fence(conn, None);
    if let Some(data) = conn
        .data
        .as_ref()
        .filter(|d| d.usable() && size >= crate::data::MIN_BYTES)
    {
        // SAFETY: this function's caller makes `src` readable for `size`.
        if let Some(done) = unsafe { data.write(device, dst, src, size) } {
            return done;
        }
    }
    let chunk = conn.chunk_size;
    let src_addr = src as usize;
    let (tx, rx) = tokio::sync::mpsc::channel::<WriteChunk>(4);
    let mut client = conn.client.clone();
    block_on(async move {
        let producer = async move {
            let mut off = 0usize;
            loop {
                let n = chunk.min(size - off);
                // SAFETY: the caller keeps `src` valid until we return.
                let data = unsafe { std::slice::from_raw_parts((src_addr + off) as *const u8, n) }
                    .to_vec();
                let first = off == 0;
                let msg = WriteChunk {
                    device: if first { device } else { 0 },
                    dst: if first { dst.0 } else { 0 },
                    size: if first { size as u64 } else { 0 },
                    data: data.into(),
                };
                if tx.send(msg).await.is_err() {
                    return;
                }
                off += n;
                if off >= size {
                    return;
                }
            }
        };
        let call = client.write(tokio_stream::wrappers::ReceiverStream::new(rx));
        let (_, res) = tokio::join!(producer, call);
        res.map(|_| ())
            .map_err(|s| rpc_error(&conn.addr, "copy to device", s))
    })
}

/// Device to host, received in chunks.
///
/// # Safety
/// `dst` valid for `size` bytes for the duration of the call.
pub unsafe fn read(
    conn: &Connection,
    device: u32,
    dst: *mut u8,
    src: DevicePtr,
    size: usize,
) -> Result<()> {
    conn.check_alive("read")?;
    crate::queue::fence(conn, None);
    if let Some(data) = conn
        .data
        .as_ref()
        .filter(|d| d.usable() && size >= crate::data::MIN_BYTES)
    {
        // SAFETY: this function's caller makes `dst` writable for `size`.
        if let Some(done) = unsafe { data.read(device, dst, src, size) } {
            return done;
        }
    }
    let mut client = conn.client.clone();
    let dst_addr = dst as usize;
    let req = ReadRequest {
        device,
        src: src.0,
        size: size as u64,
        chunk_size: conn.chunk_size as u64,
    };
    block_on(async move {
        let what = "copy from device";
        let mut stream = client
            .read(req)
            .await
            .map_err(|s| rpc_error(&conn.addr, what, s))?
            .into_inner();
        let mut off = 0usize;
        while let Some(c) = stream
            .message()
            .await
            .map_err(|s| rpc_error(&conn.addr, what, s))?
        {
            let n = c.data.len().min(size - off);
            // SAFETY: bounded by `size`; the caller keeps `dst` valid.
            unsafe {
                std::ptr::copy_nonoverlapping(c.data.as_ptr(), (dst_addr + off) as *mut u8, n)
            };
            off += n;
        }
        if off != size {
            return Err(offload_core::Error::backend(format!(
                "remote server {}: {what}: got {off} of {size} bytes",
                conn.addr
            )));
        }
        Ok(())
    })
}
