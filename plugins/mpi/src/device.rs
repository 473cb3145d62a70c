//! A device of a serving rank, its programs, kernels and queues.
//!
//! Queues complete every operation before the call returns (one request and
//! its reply each); the core puts its executor in front where a face needs
//! asynchronous queues.

use std::ffi::c_int;
use std::sync::Arc;

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::{Error, Result};
use offload_forward::{request, ForwardDevice, ForwardKernel};
use offload_proto::{
    queue_op, AllocReply, AllocRequest, Empty, FreeRequest, GlobalReply, KernelReply,
    LoadProgramReply, LoadProgramRequest, MpiPeerCopy, QueueOp, RegisterBinaryReply,
    RegisterBinaryRequest, SymbolRequest, UnloadProgramRequest, UnregisterBinaryRequest,
};

use crate::transport::{Op, Transport, BULK_MIN, TAG_DATA};
use crate::{call, decode};

/// A device of a serving rank.
pub type MpiDevice = ForwardDevice<RankLink>;
/// A kernel of a program on a serving rank.
pub type MpiKernel = ForwardKernel<RankLink>;

/// The link to one serving rank: the forwarding layer's transport, each
/// request one MPI request/reply exchange with MPI held for both.
pub struct RankLink {
    pub t: Arc<Transport>,
    /// The serving rank.
    pub rank: c_int,
}

impl RankLink {
    fn call<M: prost::Message + Default>(&self, op: Op, body: &impl prost::Message) -> Result<M> {
        decode(self.rank, &call(&self.t, self.rank, op, body)?)
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
        call(&self.t, self.rank, Op::Free, &req).map(|_| ())
    }

    fn register_binary(&self, req: RegisterBinaryRequest) -> Result<RegisterBinaryReply> {
        self.call(Op::RegisterBinary, &req)
    }

    fn unregister_binary(&self, req: UnregisterBinaryRequest) -> Result<()> {
        call(&self.t, self.rank, Op::UnregisterBinary, &req).map(|_| ())
    }

    fn load_program(&self, req: LoadProgramRequest) -> Result<LoadProgramReply> {
        self.call(Op::LoadProgram, &req)
    }

    fn unload_program(&self, req: UnloadProgramRequest) {
        // Fails quietly once the transport is closed (exit).
        let _ = call(&self.t, self.rank, Op::UnloadProgram, &req);
    }

    fn get_kernel(&self, req: SymbolRequest) -> Result<KernelReply> {
        self.call(Op::GetKernel, &req)
    }

    fn get_global(&self, req: SymbolRequest) -> Result<GlobalReply> {
        self.call(Op::GetGlobal, &req)
    }

    fn create_queue(link: &Arc<Self>, device: u32) -> Result<Arc<dyn plugin::Queue>> {
        Ok(Arc::new(MpiQueue {
            link: link.clone(),
            device,
        }))
    }
}

/// A queue of a device on a serving rank: every operation is one round trip.
pub struct MpiQueue {
    link: Arc<RankLink>,
    device: u32,
}

struct DoneEvent;

impl plugin::Event for DoneEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn is_complete(&self) -> Result<bool> {
        Ok(true)
    }
}

impl MpiQueue {
    fn op(&self, op: queue_op::Op) -> Result<Vec<u8>> {
        let req = QueueOp {
            ticket: 0,
            device: self.device,
            op: Some(op),
        };
        call(&self.link.t, self.link.rank, Op::Queue, &req)
    }
}

impl plugin::Queue for MpiQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        if size < BULK_MIN {
            // SAFETY: the caller guarantees `src` is readable for `size` bytes.
            let data = unsafe { std::slice::from_raw_parts(src, size) };
            let write = request::write(self.device, dst, size, data.to_vec());
            self.op(queue_op::Op::Write(write))?;
            return Ok(());
        }
        let req = request::write(self.device, dst, size, Vec::new());
        let rank = self.link.rank;
        let link = self.link.t.lock()?;
        link.send_request(rank, Op::WriteBulk, &req)?;
        // SAFETY: the caller guarantees `src` is readable for `size` bytes.
        unsafe { link.send_bulk(rank, TAG_DATA, src, size)? };
        link.recv_reply(rank).map(|_| ())
    }

    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        let req = request::read(self.device, src, size);
        let rank = self.link.rank;
        if size < BULK_MIN {
            let data = self.op(queue_op::Op::Read(req))?;
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
        let link = self.link.t.lock()?;
        link.send_request(rank, Op::ReadBulk, &req)?;
        link.recv_reply(rank)?;
        // SAFETY: the caller guarantees `dst` is writable for `size` bytes.
        unsafe { link.recv_bulk(rank, TAG_DATA, dst, size) }
    }

    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        self.op(request::copy(self.device, src, self.device, dst, size))
            .map(|_| ())
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
            self.op(request::copy(self.device, src, peer.remote_id(), dst, size))?;
            return Ok(true);
        }
        if !self.link.t.ranks_with(crate::Role::Client).is_empty() {
            // Several application ranks: two of them copying between the
            // same serving ranks at once could cross there (a serving rank
            // handles one request at a time, on one tag), so each copy goes
            // through its own application rank instead.
            return Ok(false);
        }
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
        self.op(request::fill(self.device, dst, pattern, size))
            .map(|_| ())
    }

    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let k = MpiKernel::id_of(kernel)
            .ok_or_else(|| Error::invalid_argument("kernel of another plugin"))?;
        self.op(request::launch(k, args, config)).map(|_| ())
    }

    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        f();
        Ok(())
    }

    fn record_event(&self) -> Result<Arc<dyn plugin::Event>> {
        Ok(Arc::new(DoneEvent))
    }

    fn wait_event(&self, _event: &dyn plugin::Event) -> Result<()> {
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn is_idle(&self) -> Result<bool> {
        Ok(true)
    }

    fn completes_inline(&self) -> bool {
        true
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
