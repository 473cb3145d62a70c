//! `offload serve --mpi`: this rank's devices for the application ranks of
//! the same MPI job, over the MPI transport of `offload_mpi`.
//!
//! One thread serves requests in arrival order, each client rank in its own
//! [`Session`] (same address checks as the gRPC server). The rank finalizes
//! MPI and returns once every client rank said goodbye. Images are native
//! code run in this process: isolation between the ranks of one job is not
//! a goal (they are one application).

use std::ffi::c_int;
use std::sync::Arc;

use offload_core::{DevicePtr, Error, Result, Runtime};
use offload_mpi::transport::{Link, TAG_DATA, TAG_PEER};
use offload_mpi::{Op, Role, Transport};
use offload_proto::*;
use prost::Message;
use tracing::{debug, info};

use crate::requests;
use crate::service::run_queue_op;
use crate::session::Session;

/// The runtime a serving rank offers: the local plugins. The job's
/// environment may say `OFFLOAD_PLUGINS=mpi` (meant for the application's
/// ranks); here the list names the local plugins to serve, and one naming
/// none of them means all.
pub fn serving_runtime() -> Runtime {
    // Before any thread that reads the environment exists: a drop-in
    // library an image pulls into this process must not join MPI itself.
    std::env::set_var(offload_mpi::SERVING_ENV, "1");
    let mut config = offload_core::Config::get().clone();
    if let Some(list) = &mut config.plugins {
        list.retain(|p| p != "mpi" && p != "remote");
        if list.is_empty() {
            config.plugins = None;
        }
    }
    Runtime::new(config, &offload_plugins::local())
}

/// Serve until every client rank is done. Collective with the clients'
/// start (every rank of the job takes part in the role exchange).
pub fn serve(runtime: Arc<Runtime>) -> Result<()> {
    let t = Transport::start(Role::Server)?;
    let clients = t.ranks_with(Role::Client);
    info!(
        rank = t.rank,
        clients = clients.len(),
        devices = runtime.devices().len(),
        "serving over MPI"
    );
    let server = format!("{} rank {}", crate::service::server_name(), t.rank);
    // By client rank (ranks are small numbers).
    let mut sessions: Vec<Option<Session>> = Vec::new();
    // Requests of each client's session (the log line at its end: what
    // the tests count round trips with).
    let mut requests: Vec<u64> = Vec::new();
    let mut done = 0usize;
    let result = (|| {
        while done < clients.len() {
            let link = t.lock()?;
            let (from, op, body) = link.recv_request()?;
            let Some(op) = Op::from_u8(op) else {
                reply(
                    &link,
                    from,
                    Err(Error::invalid_argument(format!("unknown operation {op}"))),
                )?;
                continue;
            };
            let Ok(slot) = usize::try_from(from) else {
                continue;
            };
            if sessions.len() <= slot {
                sessions.resize_with(slot + 1, || None);
                requests.resize(slot + 1, 0);
            }
            requests[slot] += 1;
            if op == Op::Bye {
                if let Some(s) = sessions[slot].take() {
                    let (freed, programs) = s.release();
                    info!(
                        client = from,
                        freed,
                        programs,
                        requests = requests[slot],
                        "session closed"
                    );
                    requests[slot] = 0;
                }
                done += 1;
                continue;
            }
            let s = sessions[slot].get_or_insert_with(|| {
                info!(client = from, "session opened");
                Session::new(format!("MPI rank {from}"), runtime.clone())
            });
            handle(&link, s, &runtime, &server, from, op, &body)?;
        }
        Ok(())
    })();
    if let Err(e) = &result {
        // A broken transport cannot be served further: end the job rather
        // than leave the application waiting.
        tracing::error!(error = %e, "MPI serving failed; aborting the job");
        t.abort(1);
    }
    t.close(|_| {});
    result
}

fn decode<M: Message + Default>(body: &[u8]) -> Result<M> {
    M::decode(body).map_err(|e| Error::invalid_argument(format!("bad request: {e}")))
}

fn reply(link: &Link<'_>, to: c_int, r: Result<Vec<u8>>) -> Result<()> {
    let c = match r {
        Ok(data) => QueueCompletion {
            ticket: 0,
            code: 0,
            message: String::new(),
            data: data.into(),
            output: None,
        },
        Err(e) => QueueCompletion {
            ticket: 0,
            code: e.code().as_raw(),
            message: e.message().to_string(),
            data: Default::default(),
            output: None,
        },
    };
    link.send_reply(to, &c)
}

/// One request. Errors of the request go back to the client; only transport
/// failures are returned.
fn handle(
    link: &Link<'_>,
    s: &Session,
    runtime: &Runtime,
    server: &str,
    from: c_int,
    op: Op,
    body: &[u8],
) -> Result<()> {
    let r: Result<Vec<u8>> = match op {
        Op::Ping => Ok(Vec::new()),
        Op::Hello => decode::<HelloRequest>(body).map(|_| {
            HelloEvent {
                server: server.to_string(),
                protocol_version: PROTOCOL_VERSION,
                devices: requests::device_descs(runtime),
                ..Default::default()
            }
            .encode_to_vec()
        }),
        Op::Alloc => decode::<AllocRequest>(body)
            .and_then(|r| requests::alloc(s, &r))
            .map(|m| m.encode_to_vec()),
        Op::Free => decode::<FreeRequest>(body)
            .and_then(|r| requests::free(s, &r))
            .map(|_| vec![]),
        Op::RegisterBinary => decode::<RegisterBinaryRequest>(body)
            .map(|r| requests::register_binary(s, r).encode_to_vec()),
        Op::UnregisterBinary => decode::<UnregisterBinaryRequest>(body)
            .and_then(|r| requests::unregister_binary(s, &r))
            .map(|_| vec![]),
        Op::LoadProgram => decode::<LoadProgramRequest>(body)
            .and_then(|r| requests::load_program(s, r))
            .map(|program| {
                LoadProgramReply {
                    program,
                    output: None,
                }
                .encode_to_vec()
            }),
        Op::UnloadProgram => decode::<UnloadProgramRequest>(body)
            .and_then(|r| requests::unload_program(s, &r))
            .map(|_| vec![]),
        Op::GetKernel => decode::<SymbolRequest>(body)
            .and_then(|r| requests::get_kernel(s, &r))
            .map(|m| m.encode_to_vec()),
        Op::GetGlobal => decode::<SymbolRequest>(body)
            .and_then(|r| requests::get_global(s, &r))
            .map(|m| m.encode_to_vec()),
        Op::Queue => decode::<QueueOp>(body).and_then(|op| {
            let mut queue = None;
            run_queue_op(s, &mut queue, op)
        }),
        Op::QueueBatch => decode::<MpiQueueBatch>(body).and_then(|batch| {
            let mut queue = None;
            let mut reads = Vec::new();
            for op in batch.ops {
                reads.extend(run_queue_op(s, &mut queue, op)?);
            }
            Ok(reads)
        }),
        Op::WriteBulk => {
            // The data follows whatever we answer: take it first.
            let r = decode::<WriteChunk>(body)?;
            let checked = s
                .check(r.device, r.dst, r.size)
                .and_then(|_| s.device(r.device).cloned());
            let done = receive_into(link, from, TAG_DATA, checked, r.dst, r.size as usize);
            return reply(link, from, done.map(|_| vec![]));
        }
        Op::ReadBulk => {
            let r = decode::<ReadRequest>(body)?;
            let checked = s
                .check(r.device, r.src, r.size)
                .and_then(|_| s.device(r.device).cloned());
            return match checked {
                Err(e) => reply(link, from, Err(e)),
                Ok(dev) => send_from(link, from, TAG_DATA, &dev, r.src, r.size as usize, true),
            };
        }
        Op::PeerRecv => {
            let r = decode::<MpiPeerCopy>(body)?;
            let checked = s
                .check(r.device, r.ptr, r.size)
                .and_then(|_| s.device(r.device).cloned());
            // The sending rank sends whatever happens on this side (it
            // checks its own range): receive it (or drop it) either way.
            let done = receive_into(link, r.peer, TAG_PEER, checked, r.ptr, r.size as usize);
            debug!(
                client = from,
                from_rank = r.peer,
                bytes = r.size,
                ok = done.is_ok(),
                "peer copy received"
            );
            return reply(link, from, done.map(|_| vec![]));
        }
        Op::PeerSend => {
            let r = decode::<MpiPeerCopy>(body)?;
            let checked = s
                .check(r.device, r.ptr, r.size)
                .and_then(|_| s.device(r.device).cloned());
            return match checked {
                Ok(dev) => {
                    let sent =
                        send_from(link, r.peer, TAG_PEER, &dev, r.ptr, r.size as usize, false);
                    debug!(
                        client = from,
                        to_rank = r.peer,
                        bytes = r.size,
                        ok = sent.is_ok(),
                        "peer copy sent"
                    );
                    reply(link, from, sent.map(|_| vec![]))
                }
                Err(e) => {
                    // The receiving rank waits for the data: send zeros so it
                    // is not left hanging, and fail the copy.
                    let zeros = vec![0u8; (r.size as usize).min(1 << 20)];
                    let mut left = r.size as usize;
                    while left > 0 {
                        let n = left.min(zeros.len());
                        // SAFETY: `zeros` holds at least `n` bytes.
                        unsafe { link.send_bulk(r.peer, TAG_PEER, zeros.as_ptr(), n)? };
                        left -= n;
                    }
                    reply(link, from, Err(e))
                }
            };
        }
        Op::Bench => {
            let b = decode::<MpiBench>(body)?;
            thread_local! {
                // Kept between loops: the baseline pays no page faults.
                static BENCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
            }
            let mut buf = BENCH.with(|b| std::mem::take(&mut *b.borrow_mut()));
            buf.resize(b.bytes as usize, 0);
            for _ in 0..b.iters {
                // SAFETY: `buf` is valid for its length.
                unsafe {
                    match b.mode {
                        1 => {
                            link.recv_bulk(from, TAG_DATA, buf.as_mut_ptr(), buf.len())?;
                            link.send_bulk(from, TAG_DATA, buf.as_ptr(), buf.len())?;
                        }
                        2 => link.recv_bulk(from, TAG_DATA, buf.as_mut_ptr(), buf.len())?,
                        _ => link.send_bulk(from, TAG_DATA, buf.as_ptr(), buf.len())?,
                    }
                }
            }
            if b.mode == 2 {
                // SAFETY: one byte of `[1]`.
                unsafe { link.send_bulk(from, TAG_DATA, [1u8].as_ptr(), 1)? };
            }
            BENCH.with(|b| *b.borrow_mut() = buf);
            Ok(vec![])
        }
        Op::Bye => Ok(vec![]),
    };
    reply(link, from, r)
}

/// Receive `size` bytes from `rank` into device memory at `dst` (straight
/// into it when the device shares this process's memory); with a failed
/// check the bytes are received and dropped, so the sender never blocks.
fn receive_into(
    link: &Link<'_>,
    rank: c_int,
    tag: c_int,
    checked: Result<Arc<offload_core::Device>>,
    dst: u64,
    size: usize,
) -> Result<()> {
    match checked {
        Ok(dev) if dev.shares_host_memory() => {
            // SAFETY: [dst, dst+size) lies in a live allocation of this
            // session on a device whose pointers are process addresses.
            unsafe { link.recv_bulk(rank, tag, dst as usize as *mut u8, size) }
        }
        Ok(dev) => {
            let mut staging = vec![0u8; size];
            // SAFETY: `staging` holds `size` bytes.
            unsafe { link.recv_bulk(rank, tag, staging.as_mut_ptr(), size)? };
            // SAFETY: range checked; `staging` holds the bytes.
            unsafe { dev.copy_to_device(DevicePtr(dst), staging.as_ptr(), size) }
        }
        Err(e) => {
            // Drained piece by piece (the sender's pieces) into one scratch
            // buffer: never allocate what a request merely claims.
            let piece = offload_mpi::transport::MAX_PIECE;
            let mut sink = vec![0u8; size.min(piece)];
            let mut left = size;
            while left > 0 {
                let n = left.min(piece);
                // SAFETY: `sink` holds at least `n` bytes.
                unsafe { link.recv_bulk(rank, tag, sink.as_mut_ptr(), n)? };
                left -= n;
            }
            Err(e)
        }
    }
}

/// Send `size` bytes of device memory at `src` to `rank`; with `ack`, a
/// successful reply to `rank` goes first (a client read).
fn send_from(
    link: &Link<'_>,
    rank: c_int,
    tag: c_int,
    dev: &offload_core::Device,
    src: u64,
    size: usize,
    ack: bool,
) -> Result<()> {
    if dev.shares_host_memory() {
        if ack {
            reply(link, rank, Ok(vec![]))?;
        }
        // SAFETY: [src, src+size) lies in a live allocation of this session
        // on a device whose pointers are process addresses.
        return unsafe { link.send_bulk(rank, tag, src as usize as *const u8, size) };
    }
    let mut staging = vec![0u8; size];
    // SAFETY: range checked by the caller; `staging` holds `size` bytes.
    let read = unsafe { dev.copy_from_device(staging.as_mut_ptr(), DevicePtr(src), size) };
    match read {
        Ok(()) => {
            if ack {
                reply(link, rank, Ok(vec![]))?;
            }
            // SAFETY: `staging` holds `size` bytes.
            unsafe { link.send_bulk(rank, tag, staging.as_ptr(), size) }
        }
        Err(e) if ack => reply(link, rank, Err(e)),
        Err(e) => {
            // SAFETY: `staging` holds `size` bytes (zeros): the peer is waiting.
            unsafe { link.send_bulk(rank, tag, staging.as_ptr(), size)? };
            Err(e)
        }
    }
}
