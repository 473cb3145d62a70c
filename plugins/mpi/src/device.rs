//! A device of a serving rank, its programs, kernels and queues.
//!
//! A queue defers what needs no answer (small writes, launches, copies and
//! fills on the device, small reads into the caller's buffer) and sends it
//! with the next request that does: a synchronisation, a unary call, a
//! bulk copy. So an OpenMP region's copies in, launch and reads back are
//! one MPI round trip (`Op::QueueBatch`). It defers only while it is its
//! link's one queue (one thread offloading): then every error of a batch
//! is its own. With several queues each operation is its own round trip.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::{Error, Result};
use offload_forward::{request, ForwardDevice, ForwardKernel};
use offload_proto::{
    queue_op, AllocReply, AllocRequest, Empty, FreeRequest, GlobalReply, KernelReply,
    LoadProgramReply, LoadProgramRequest, MpiPeerCopy, MpiQueueBatch, QueueOp, RegisterBinaryReply,
    RegisterBinaryRequest, SymbolRequest, UnloadProgramRequest, UnregisterBinaryRequest,
};

use crate::transport::{Link, Op, Transport, BULK_MIN, TAG_DATA};
use crate::{call, decode};

/// A device of a serving rank.
pub type MpiDevice = ForwardDevice<RankLink>;
/// A kernel of a program on a serving rank.
pub type MpiKernel = ForwardKernel<RankLink>;

/// The link to one serving rank: the forwarding layer's transport, each
/// request one MPI request/reply exchange with MPI held for both, after
/// the queue operations deferred so far.
pub struct RankLink {
    pub t: Arc<Transport>,
    /// The serving rank.
    pub rank: c_int,
    deferred: Mutex<Deferred>,
}

/// Where a deferred read's bytes go.
struct ReadBack {
    dst: *mut u8,
    size: usize,
}

// SAFETY: `dst` is written only when the batch holding its read is sent,
// under the link's lock, while the queue's caller keeps it valid (until the
// queue is synchronised: the `plugin::Queue` contract); nothing else reads
// or writes through it.
unsafe impl Send for ReadBack {}

/// What the link's queue left for the next request.
#[derive(Default)]
struct Deferred {
    /// Operations not sent yet, in order.
    ops: Vec<QueueOp>,
    /// Where the deferred reads' bytes go, in the order of their operations.
    reads: Vec<ReadBack>,
    /// Live queues of the link: operations are deferred only while it is one.
    queues: usize,
    /// Operations that may have changed device memory, sent or deferred
    /// (`memory_snapshot`).
    changes: u64,
    /// The error of a batch that a request other than the queue's own sent
    /// (a unary call, a second queue's creation): its next synchronisation
    /// reports it.
    failed: Option<Error>,
}

impl RankLink {
    pub fn new(t: Arc<Transport>, rank: c_int) -> RankLink {
        RankLink {
            t,
            rank,
            deferred: Mutex::new(Deferred::default()),
        }
    }

    fn deferred(&self) -> MutexGuard<'_, Deferred> {
        self.deferred.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn call<M: prost::Message + Default>(&self, op: Op, body: &impl prost::Message) -> Result<M> {
        decode(self.rank, &self.request(op, body)?)
    }

    /// A unary request after the deferred batch (whose error, kept for the
    /// queue, is this call's too).
    fn request(&self, op: Op, body: &impl prost::Message) -> Result<Vec<u8>> {
        let link = self.t.lock()?;
        self.flush(&link, None, true)?;
        if !matches!(op, Op::GetKernel | Op::GetGlobal | Op::Ping) {
            self.deferred().changes += 1;
        }
        link.send_request(self.rank, op, body)?;
        link.recv_reply(self.rank)
    }

    /// Sends the deferred operations, then `last`, as one request (`last`
    /// alone when nothing is deferred) and returns `last`'s reply data.
    /// `for_other`: a request other than the queue's own (its error is
    /// kept for the queue's next synchronisation).
    fn flush(&self, link: &Link<'_>, last: Option<QueueOp>, for_other: bool) -> Result<Vec<u8>> {
        let mut d = self.deferred();
        if d.ops.is_empty() {
            drop(d);
            let Some(op) = last else {
                return Ok(Vec::new());
            };
            link.send_request(self.rank, Op::Queue, &op)?;
            return link.recv_reply(self.rank);
        }
        let mut ops = std::mem::take(&mut d.ops);
        let reads = std::mem::take(&mut d.reads);
        ops.extend(last);
        link.send_request(self.rank, Op::QueueBatch, &MpiQueueBatch { ops })?;
        let data = match link.recv_reply(self.rank) {
            Ok(data) => data,
            Err(e) => {
                if for_other {
                    d.failed = Some(e.clone());
                }
                return Err(e);
            }
        };
        let deferred_bytes: usize = reads.iter().map(|r| r.size).sum();
        if data.len() < deferred_bytes {
            let e = Error::backend(format!(
                "MPI rank {} returned {} bytes for reads of {deferred_bytes}",
                self.rank,
                data.len()
            ));
            if for_other {
                d.failed = Some(e.clone());
            }
            return Err(e);
        }
        let mut at = 0;
        for r in reads {
            // SAFETY: the read's caller keeps `dst` writable for `size`
            // bytes until the queue is synchronised (`ReadBack`); `data`
            // holds them at `at`.
            unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), r.dst, r.size) };
            at += r.size;
        }
        Ok(data[at..].to_vec())
    }
}

impl offload_forward::Transport for RankLink {
    type Peer = c_int;

    fn peer(&self) -> c_int {
        self.rank
    }

    fn is_alive(&self) -> bool {
        !self.t.is_closed()
    }

    fn alloc(&self, req: AllocRequest) -> Result<AllocReply> {
        self.call(Op::Alloc, &req)
    }

    fn free(&self, req: FreeRequest) -> Result<()> {
        self.request(Op::Free, &req).map(|_| ())
    }

    fn register_binary(&self, req: RegisterBinaryRequest) -> Result<RegisterBinaryReply> {
        self.call(Op::RegisterBinary, &req)
    }

    fn unregister_binary(&self, req: UnregisterBinaryRequest) -> Result<()> {
        self.request(Op::UnregisterBinary, &req).map(|_| ())
    }

    fn load_program(&self, req: LoadProgramRequest) -> Result<LoadProgramReply> {
        self.call(Op::LoadProgram, &req)
    }

    fn unload_program(&self, req: UnloadProgramRequest) {
        // Fails quietly once the transport is closed (exit).
        let _ = self.request(Op::UnloadProgram, &req);
    }

    fn get_kernel(&self, req: SymbolRequest) -> Result<KernelReply> {
        self.call(Op::GetKernel, &req)
    }

    fn get_global(&self, req: SymbolRequest) -> Result<GlobalReply> {
        self.call(Op::GetGlobal, &req)
    }

    fn create_queue(link: &Arc<Self>, device: u32) -> Result<Arc<dyn plugin::Queue>> {
        let second = {
            let mut d = link.deferred();
            d.queues += 1;
            d.queues == 2
        };
        if second {
            // The first queue's deferred work goes now, as its own: from
            // here on every operation is its own round trip.
            if let Ok(l) = link.t.lock() {
                let _ = link.flush(&l, None, true);
            }
        }
        Ok(Arc::new(MpiQueue {
            link: link.clone(),
            device,
        }))
    }
}

/// A queue of a device on a serving rank (see the module doc).
pub struct MpiQueue {
    link: Arc<RankLink>,
    device: u32,
}

impl MpiQueue {
    fn queue_op(&self, op: queue_op::Op) -> QueueOp {
        QueueOp {
            ticket: 0,
            device: self.device,
            op: Some(op),
        }
    }

    /// `op` now, after what is deferred; its reply data.
    fn run(&self, op: queue_op::Op) -> Result<Vec<u8>> {
        let op = self.queue_op(op);
        let link = self.link.t.lock()?;
        self.link.flush(&link, Some(op), false)
    }

    /// `op` (no reply data) deferred while this is the link's one queue,
    /// else run now.
    fn defer(&self, op: queue_op::Op) -> Result<()> {
        let op = self.queue_op(op);
        {
            let mut d = self.link.deferred();
            d.changes += 1;
            if d.queues == 1 {
                d.ops.push(op);
                return Ok(());
            }
        }
        let link = self.link.t.lock()?;
        self.link.flush(&link, Some(op), false).map(|_| ())
    }

    /// Sends what is deferred (before a bulk or rank-to-rank copy).
    fn send_deferred(&self) -> Result<()> {
        let link = self.link.t.lock()?;
        self.link.flush(&link, None, false).map(|_| ())
    }
}

impl Drop for MpiQueue {
    fn drop(&mut self) {
        if !self.link.t.is_closed() {
            // Best effort: a queue dropped unsynchronised still runs its work.
            let _ = self.send_deferred();
        }
        self.link.deferred().queues -= 1;
    }
}

impl plugin::Queue for MpiQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        if size < BULK_MIN {
            // SAFETY: the caller guarantees `src` is readable for `size` bytes.
            let data = unsafe { std::slice::from_raw_parts(src, size) };
            let write = request::write(self.device, dst, size, data.to_vec());
            return self.defer(queue_op::Op::Write(write));
        }
        self.send_deferred()?;
        self.link.deferred().changes += 1;
        let req = request::write(self.device, dst, size, Vec::new());
        let rank = self.link.rank;
        let link = self.link.t.lock()?;
        link.send_request(rank, Op::WriteBulk, &req)?;
        // SAFETY: the caller guarantees `src` is readable for `size` bytes.
        unsafe { link.send_bulk(rank, TAG_DATA, src, size)? };
        link.recv_reply(rank).map(|_| ())
    }

    unsafe fn copy_to_device_unsynced(
        &self,
        dst: DevicePtr,
        src: *const u8,
        size: usize,
    ) -> Result<()> {
        // SAFETY: the caller's guarantee; `src` is read (copied or sent)
        // before this returns, and what is deferred runs before anything
        // sent later.
        unsafe { self.copy_to_device(dst, src, size) }
    }

    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        let req = request::read(self.device, src, size);
        let rank = self.link.rank;
        if size < BULK_MIN {
            {
                let mut d = self.link.deferred();
                if d.queues == 1 {
                    d.ops.push(self.queue_op(queue_op::Op::Read(req)));
                    d.reads.push(ReadBack { dst, size });
                    return Ok(());
                }
            }
            let data = self.run(queue_op::Op::Read(req))?;
            if data.len() != size {
                return Err(Error::backend(format!(
                    "MPI rank {rank} returned {} bytes for a read of {size}",
                    data.len()
                )));
            }
            // SAFETY: the caller guarantees `dst` is writable for `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, size) };
            return Ok(());
        }
        self.send_deferred()?;
        let link = self.link.t.lock()?;
        link.send_request(rank, Op::ReadBulk, &req)?;
        link.recv_reply(rank)?;
        // SAFETY: the caller guarantees `dst` is writable for `size` bytes.
        unsafe { link.recv_bulk(rank, TAG_DATA, dst, size) }
    }

    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        self.defer(request::copy(self.device, src, self.device, dst, size))
    }

    unsafe fn copy_to_peer(
        &self,
        dst_device: &dyn plugin::Device,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<bool> {
        let Some(peer) = dst_device.as_any().downcast_ref::<MpiDevice>() else {
            return Ok(false);
        };
        let (rank, peer_rank) = (self.link.rank, peer.link().rank);
        if peer_rank == rank {
            // Two devices of one rank: that rank copies.
            self.defer(request::copy(self.device, src, peer.remote_id(), dst, size))?;
            return Ok(true);
        }
        if !self.link.t.ranks_with(crate::Role::Client).is_empty() {
            // Several application ranks: two of them copying between the
            // same serving ranks at once could cross there (a serving rank
            // handles one request at a time, on one tag), so each copy goes
            // through its own application rank instead.
            return Ok(false);
        }
        // What either side deferred runs first.
        self.send_deferred()?;
        {
            let l = self.link.t.lock()?;
            peer.link().flush(&l, None, true)?;
        }
        peer.link().deferred().changes += 1;
        // Rank to rank: the receiver first (it posts its receive), then the
        // sender; both reply once their side is done.
        let link = self.link.t.lock()?;
        link.send_request(
            peer_rank,
            Op::PeerRecv,
            &MpiPeerCopy {
                device: peer.remote_id(),
                ptr: dst.0,
                size: size as u64,
                peer: rank,
            },
        )?;
        link.send_request(
            rank,
            Op::PeerSend,
            &MpiPeerCopy {
                device: self.device,
                ptr: src.0,
                size: size as u64,
                peer: peer_rank,
            },
        )?;
        let sent = link.recv_reply(rank);
        let received = link.recv_reply(peer_rank);
        sent.and(received).map(|_| true)
    }

    unsafe fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        self.defer(request::fill(self.device, dst, pattern, size))
    }

    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let k = MpiKernel::id_of(kernel, "MPI")?;
        self.defer(request::launch(k, args, config))
    }

    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        self.synchronize()?;
        f();
        Ok(())
    }

    fn record_event(&self) -> Result<Arc<dyn plugin::Event>> {
        // Everything before it has run once the event exists.
        self.synchronize()?;
        Ok(Arc::new(plugin::FinishedEvent))
    }

    fn wait_event(&self, _event: &dyn plugin::Event) -> Result<()> {
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        self.send_deferred()?;
        match self.link.deferred().failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn is_idle(&self) -> Result<bool> {
        self.synchronize().map(|()| true)
    }

    fn memory_snapshot(&self) -> Option<u64> {
        let d = self.link.deferred();
        (d.queues == 1).then_some(d.changes)
    }

    fn unchanged_since(&self, token: u64) -> bool {
        let d = self.link.deferred();
        d.queues == 1 && d.changes == token
    }
}

/// An empty round trip to `rank` (benchmarks: the protocol's floor).
pub fn ping(t: &Transport, rank: c_int) -> Result<()> {
    call(t, rank, Op::Ping, &Empty {}).map(|_| ())
}

/// A bare MPI loop with serving rank `rank` (`MpiBench` mode 1 ping-pong,
/// 2 client sends, 3 client receives; `iters` messages of `buf.len()`
/// bytes): the baseline of the benchmarks. Returns the loop's seconds as
/// this side measured them.
pub fn raw_loop(t: &Transport, rank: c_int, mode: u32, iters: u64, buf: &mut [u8]) -> Result<f64> {
    let link = t.lock()?;
    link.send_request(
        rank,
        Op::Bench,
        &offload_proto::MpiBench {
            mode,
            iters,
            bytes: buf.len() as u64,
        },
    )?;
    let start = std::time::Instant::now();
    for _ in 0..iters {
        // SAFETY: `buf` is valid for its length for both directions.
        unsafe {
            match mode {
                1 => {
                    link.send_bulk(rank, TAG_DATA, buf.as_ptr(), buf.len())?;
                    link.recv_bulk(rank, TAG_DATA, buf.as_mut_ptr(), buf.len())?;
                }
                2 => link.send_bulk(rank, TAG_DATA, buf.as_ptr(), buf.len())?,
                _ => link.recv_bulk(rank, TAG_DATA, buf.as_mut_ptr(), buf.len())?,
            }
        }
    }
    if mode == 2 {
        // The receiver's acknowledgement: the data has arrived.
        let mut ack = [0u8; 1];
        // SAFETY: `ack` holds one byte.
        unsafe { link.recv_bulk(rank, TAG_DATA, ack.as_mut_ptr(), 1)? };
    }
    let secs = start.elapsed().as_secs_f64();
    link.recv_reply(rank)?;
    Ok(secs)
}
