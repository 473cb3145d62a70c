//! A device of a serving rank, its programs, kernels and queues.
//!
//! Queues complete every operation before the call returns (one request and
//! its reply each); the core puts its executor in front where a face needs
//! asynchronous queues.

use std::ffi::c_int;
use std::sync::Arc;

use offload_core::client_host_memory::{no_shared_memory, ClientHostMemory};
use offload_core::plugin::{
    self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType, KernelArgs, LaunchConfig,
};
use offload_core::{Error, Result};
use offload_image::DeviceImage;
use offload_proto::{
    load_program_request, queue_op, AllocReply, AllocRequest, CopyRequest, DeviceDesc, Empty,
    FillRequest, GlobalReply, ImageDesc, KernelReply, KeyValue, Launch, LoadProgramReply,
    LoadProgramRequest, MpiPeerCopy, QueueOp, ReadRequest, SymbolRequest, UnloadProgramRequest,
    WriteChunk,
};

use crate::transport::{Op, Transport, BULK_MIN, TAG_DATA};
use crate::{call, decode, ShippedImages};

pub struct MpiDevice {
    t: Arc<Transport>,
    rank: c_int,
    /// The device's index on its rank.
    remote_id: u32,
    info: DeviceInfo,
    shipped: Arc<ShippedImages>,
    /// `AllocKind::Host` memory: in this process, where the caller can
    /// touch it (`offload_core::client_host_memory`).
    host_memory: ClientHostMemory,
}

fn dim3(v: &[u32]) -> [u32; 3] {
    [
        v.first().copied().unwrap_or(1),
        v.get(1).copied().unwrap_or(1),
        v.get(2).copied().unwrap_or(1),
    ]
}

impl MpiDevice {
    pub fn new(
        t: Arc<Transport>,
        rank: c_int,
        server: &str,
        d: &DeviceDesc,
        shipped: Arc<ShippedImages>,
    ) -> Self {
        let device_type = match d.device_type {
            2 => DeviceType::Gpu,
            4 => DeviceType::Host,
            _ => DeviceType::Cpu,
        };
        let info = DeviceInfo {
            name: format!("{} @ MPI rank {rank}", d.name),
            vendor: d.vendor.clone(),
            product_name: d.product_name.clone(),
            device_type,
            backend: Backend::Remote,
            triple: d.triple.clone(),
            arch: d.arch.clone(),
            uid: format!("mpi:{rank}/{}", d.uid),
            driver_version: format!("{} via {server} (MPI)", d.driver_version),
            global_memory_bytes: d.global_memory_bytes,
            group_memory_bytes: d.group_memory_bytes,
            compute_units: d.compute_units,
            max_group_size: d.max_group_size,
            max_group_size_per_dim: dim3(&d.max_group_size_per_dim),
            max_num_groups: dim3(&d.max_num_groups),
            clock_mhz: d.clock_mhz,
            address_bits: d.address_bits,
        };
        MpiDevice {
            t,
            rank,
            remote_id: d.id,
            info,
            shipped,
            host_memory: ClientHostMemory::default(),
        }
    }

    /// The serving rank this device lives on.
    pub fn rank(&self) -> c_int {
        self.rank
    }

    fn call(&self, op: Op, body: &impl prost::Message) -> Result<Vec<u8>> {
        call(&self.t, self.rank, op, body)
    }
}

pub fn image_desc(image: &DeviceImage<'_>) -> ImageDesc {
    ImageDesc {
        bytes: image.bytes.to_vec().into(),
        triple: image.triple.clone().unwrap_or_default(),
        arch: image.arch.clone().unwrap_or_default(),
        metadata: image
            .metadata
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        strings: image
            .strings
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        image_kind: image.image_kind.map(|k| k.to_u16() as u32).unwrap_or(0),
        offload_kind: image.offload_kind.map(|k| k.to_u16() as u32).unwrap_or(0),
    }
}

impl plugin::Device for MpiDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        match kind {
            AllocKind::Host => return self.host_memory.alloc(size),
            AllocKind::Shared => return Err(no_shared_memory(&self.info.name)),
            AllocKind::Device => {}
        }
        let req = AllocRequest {
            device: self.remote_id,
            size: size as u64,
            kind: kind as u32,
        };
        let r: AllocReply = decode(self.rank, &self.call(Op::Alloc, &req)?)?;
        Ok(DevicePtr(r.ptr))
    }

    fn host_allocations_are_local(&self) -> bool {
        true
    }

    fn free(&self, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
        if kind == AllocKind::Host {
            return self.host_memory.free(ptr);
        }
        let req = offload_proto::FreeRequest {
            device: self.remote_id,
            ptr: ptr.0,
        };
        self.call(Op::Free, &req).map(|_| ())
    }

    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        // Images of registered binaries were shipped once; name them by id.
        let source = match self.shipped.lookup(self.rank, image.bytes) {
            Some(id) => load_program_request::Source::ImageId(id),
            None => load_program_request::Source::Image(image_desc(image)),
        };
        let req = LoadProgramRequest {
            device: self.remote_id,
            source: Some(source),
        };
        let r: LoadProgramReply = decode(self.rank, &self.call(Op::LoadProgram, &req)?)?;
        Ok(Arc::new(MpiProgram {
            t: self.t.clone(),
            rank: self.rank,
            id: r.program,
        }))
    }

    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        Ok(Arc::new(MpiQueue {
            t: self.t.clone(),
            rank: self.rank,
            device: self.remote_id,
        }))
    }
}

pub struct MpiProgram {
    t: Arc<Transport>,
    rank: c_int,
    id: u64,
}

pub struct MpiKernel {
    name: String,
    id: u64,
    preferred_group_size: u32,
}

impl plugin::Kernel for MpiKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn preferred_group_size(&self, _dyn_group_memory: usize) -> u32 {
        self.preferred_group_size
    }
}

impl plugin::Program for MpiProgram {
    fn kernel(&self, name: &str) -> Result<Arc<dyn plugin::Kernel>> {
        let req = SymbolRequest {
            program: self.id,
            name: name.to_string(),
        };
        let r: KernelReply = decode(self.rank, &call(&self.t, self.rank, Op::GetKernel, &req)?)?;
        Ok(Arc::new(MpiKernel {
            name: name.to_string(),
            id: r.kernel,
            preferred_group_size: r.preferred_group_size,
        }))
    }

    fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        let req = SymbolRequest {
            program: self.id,
            name: name.to_string(),
        };
        let r: GlobalReply = decode(self.rank, &call(&self.t, self.rank, Op::GetGlobal, &req)?)?;
        Ok((DevicePtr(r.ptr), r.size))
    }
}

impl Drop for MpiProgram {
    fn drop(&mut self) {
        // Fails quietly once the transport is closed (exit).
        let _ = call(
            &self.t,
            self.rank,
            Op::UnloadProgram,
            &UnloadProgramRequest { program: self.id },
        );
    }
}

/// A queue of a device on a serving rank: every operation is one round trip.
pub struct MpiQueue {
    t: Arc<Transport>,
    rank: c_int,
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
        call(&self.t, self.rank, Op::Queue, &req)
    }
}

impl plugin::Queue for MpiQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        if size < BULK_MIN {
            // SAFETY: the caller guarantees `src` is readable for `size` bytes.
            let data = unsafe { std::slice::from_raw_parts(src, size) };
            self.op(queue_op::Op::Write(WriteChunk {
                device: self.device,
                dst: dst.0,
                size: size as u64,
                data: data.to_vec().into(),
            }))?;
            return Ok(());
        }
        let req = WriteChunk {
            device: self.device,
            dst: dst.0,
            size: size as u64,
            data: Default::default(),
        };
        let link = self.t.lock()?;
        link.send_request(self.rank, Op::WriteBulk, &req)?;
        // SAFETY: the caller guarantees `src` is readable for `size` bytes.
        unsafe { link.send_bulk(self.rank, TAG_DATA, src, size)? };
        link.recv_reply(self.rank).map(|_| ())
    }

    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        let req = ReadRequest {
            device: self.device,
            src: src.0,
            size: size as u64,
            chunk_size: 0,
        };
        if size < BULK_MIN {
            let data = self.op(queue_op::Op::Read(req))?;
            if data.len() != size {
                return Err(Error::backend(format!(
                    "MPI rank {} returned {} bytes for a read of {size}",
                    self.rank,
                    data.len()
                )));
            }
            // SAFETY: the caller guarantees `dst` is writable for `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, size) };
            return Ok(());
        }
        let link = self.t.lock()?;
        link.send_request(self.rank, Op::ReadBulk, &req)?;
        link.recv_reply(self.rank)?;
        // SAFETY: the caller guarantees `dst` is writable for `size` bytes.
        unsafe { link.recv_bulk(self.rank, TAG_DATA, dst, size) }
    }

    fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        self.op(queue_op::Op::Copy(CopyRequest {
            src_device: self.device,
            src: src.0,
            dst_device: self.device,
            dst: dst.0,
            size: size as u64,
        }))
        .map(|_| ())
    }

    fn copy_to_peer(
        &self,
        dst_device: &dyn plugin::Device,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<bool> {
        let Some(peer) = dst_device.as_any().downcast_ref::<MpiDevice>() else {
            return Ok(false);
        };
        if peer.rank == self.rank {
            // Two devices of one rank: that rank copies.
            self.op(queue_op::Op::Copy(CopyRequest {
                src_device: self.device,
                src: src.0,
                dst_device: peer.remote_id,
                dst: dst.0,
                size: size as u64,
            }))?;
            return Ok(true);
        }
        if !self.t.ranks_with(crate::Role::Client).is_empty() {
            // Several application ranks: two of them copying between the
            // same serving ranks at once could cross there (a serving rank
            // handles one request at a time, on one tag), so each copy goes
            // through its own application rank instead.
            return Ok(false);
        }
        // Rank to rank: the receiver first (it posts its receive), then the
        // sender; both reply once their side is done.
        let link = self.t.lock()?;
        link.send_request(
            peer.rank,
            Op::PeerRecv,
            &MpiPeerCopy {
                device: peer.remote_id,
                ptr: dst.0,
                size: size as u64,
                peer: self.rank,
            },
        )?;
        link.send_request(
            self.rank,
            Op::PeerSend,
            &MpiPeerCopy {
                device: self.device,
                ptr: src.0,
                size: size as u64,
                peer: peer.rank,
            },
        )?;
        let sent = link.recv_reply(self.rank);
        let received = link.recv_reply(peer.rank);
        sent.and(received).map(|_| true)
    }

    fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        self.op(queue_op::Op::Fill(FillRequest {
            device: self.device,
            dst: dst.0,
            pattern: pattern.to_vec().into(),
            size: size as u64,
        }))
        .map(|_| ())
    }

    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let k = kernel
            .as_any()
            .downcast_ref::<MpiKernel>()
            .ok_or_else(|| Error::invalid_argument("kernel of another plugin"))?;
        let (words, packed, use_words) = match args {
            KernelArgs::Words(w) => (w.to_vec(), Vec::new(), true),
            KernelArgs::Packed(p) => (Vec::new(), p.to_vec(), false),
        };
        self.op(queue_op::Op::Launch(Launch {
            kernel: k.id,
            words,
            packed: packed.into(),
            use_words,
            // Omitted when all ones (what the serving side assumes):
            // two vectors less to build and decode per launch.
            num_groups: dims(config.num_groups),
            group_size: dims(config.group_size),
            dyn_group_memory: config.dyn_group_memory,
            tripcount: config.tripcount,
        }))
        .map(|_| ())
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

/// A launch dimension for the wire: empty for `[1, 1, 1]`.
fn dims(d: [u32; 3]) -> Vec<u32> {
    if d == [1, 1, 1] {
        Vec::new()
    } else {
        d.to_vec()
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
