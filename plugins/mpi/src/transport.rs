//! MPI as the transport of the remote protocol's messages.
//!
//! A request is one message with tag [`TAG_REQUEST`]: an operation byte
//! ([`Op`]) followed by the protobuf encoding of the remote protocol's
//! request message (`offload_proto`). Every request gets one reply
//! ([`TAG_REPLY`]): a `QueueCompletion` (code, message, and the encoded reply
//! message or small read data). Copies of [`BULK_MIN`] bytes or more move as
//! raw messages ([`TAG_DATA`]) straight from and into user or device
//! memory, in pieces of at most [`MAX_PIECE`] bytes (an MPI count is an
//! `int`); rank-to-rank copies between two serving ranks use [`TAG_PEER`].
//!
//! Everything runs on a private duplicate of `MPI_COMM_WORLD` whose errors
//! are returned, so an application's own traffic never mixes with ours. All
//! MPI calls of the process go through one lock ([`Transport::lock`]):
//! MPI is used at `MPI_THREAD_SERIALIZED`.

use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

use offload_core::{Error, ErrorCode, Result};
use offload_proto::QueueCompletion;
use prost::Message;

use crate::ffi::{self, Handle, Mpi};

pub const TAG_REQUEST: c_int = 0x0f10;
pub const TAG_REPLY: c_int = 0x0f11;
pub const TAG_DATA: c_int = 0x0f12;
pub const TAG_PEER: c_int = 0x0f13;

/// Copies at least this large move as raw messages, not inside the request.
pub const BULK_MIN: usize = 64 << 10;
/// Largest single MPI message.
pub const MAX_PIECE: usize = 1 << 30;

/// What a rank does in the job (exchanged by one `MPI_Allgather` at start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// An application rank whose runtime uses the serving ranks' devices.
    Client = 0,
    /// `offload serve --mpi`.
    Server = 1,
}

/// The operation of a request (first byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// `HelloRequest` -> `HelloEvent` (the rank's devices).
    Hello = 1,
    Alloc = 2,
    Free = 3,
    RegisterBinary = 4,
    UnregisterBinary = 5,
    LoadProgram = 6,
    UnloadProgram = 7,
    GetKernel = 8,
    GetGlobal = 9,
    /// A `QueueOp` run at once: launch, small write/read, copy, fill, marker.
    Queue = 10,
    /// `WriteChunk` without data; `size` raw bytes follow (TAG_DATA).
    WriteBulk = 11,
    /// `ReadRequest`; after a successful reply `size` raw bytes follow.
    ReadBulk = 12,
    /// `MpiPeerCopy`: send device memory to another serving rank.
    PeerSend = 13,
    /// `MpiPeerCopy`: receive device memory from another serving rank.
    PeerRecv = 14,
    /// The client is done (no reply).
    Bye = 15,
    /// Empty round trip (benchmarks).
    Ping = 16,
    /// `MpiBench`: a bare MPI loop with the client (benchmark baseline).
    Bench = 17,
}

impl Op {
    pub fn from_u8(b: u8) -> Option<Op> {
        use Op::*;
        Some(match b {
            1 => Hello,
            2 => Alloc,
            3 => Free,
            4 => RegisterBinary,
            5 => UnregisterBinary,
            6 => LoadProgram,
            7 => UnloadProgram,
            8 => GetKernel,
            9 => GetGlobal,
            10 => Queue,
            11 => WriteBulk,
            12 => ReadBulk,
            13 => PeerSend,
            14 => PeerRecv,
            15 => Bye,
            16 => Ping,
            17 => Bench,
            _ => return None,
        })
    }
}

/// An environment that says this process is one program of a
/// multi-program MPI launch, the shape of `mpirun -np 1 ./app : -np N
/// offload serve --mpi`: Open MPI's mpirun sets `OMPI_NUM_APP_CTX` (2
/// there, 1 for `mpirun -np 4 ./app`). Only then does the plugin start MPI
/// on its own: an ordinary MPI job (one program on every rank) has no
/// serving ranks, and the collectives the transport starts with would hang
/// it or collide with its own. Other launchers (MPICH's hydra, srun) do not
/// say how many programs they started: there `OFFLOAD_PLUGINS=mpi` turns
/// the plugin on. Nothing is loaded to find out.
pub fn launched_with_ranks(lookup: impl Fn(&str) -> Option<String>) -> bool {
    let var = |k: &str| lookup(k);
    var("OMPI_NUM_APP_CTX")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 1)
}

struct State {
    closed: bool,
}

/// The process's MPI connection.
pub struct Transport {
    mpi: Mpi,
    comm: Handle,
    pub rank: c_int,
    /// Role of every rank, by rank.
    pub roles: Vec<Role>,
    /// Whether this process called MPI_Init (then it also finalizes).
    initialized_here: bool,
    /// The thread level MPI runs at (`MPI_Query_thread`).
    pub thread_level: c_int,
    state: Mutex<State>,
}

impl Transport {
    /// Load libmpi, initialise MPI unless the application already did, and
    /// learn every rank's role. Collective: every rank of the job calls it.
    pub fn start(role: Role) -> Result<Transport> {
        let mpi = Mpi::load()?;
        if mpi.is_finalized() {
            return Err(Error::backend("MPI was already finalized"));
        }
        let (initialized_here, thread_level) = if mpi.is_initialized() {
            (false, mpi.thread_level()?)
        } else {
            (true, mpi.init_thread(ffi::THREAD_SERIALIZED)?)
        };
        let comm = mpi.dup_returning_errors(mpi.comm_world)?;
        let (rank, size) = mpi.rank_and_size(comm)?;
        let roles = mpi
            .allgather_byte(comm, role as u8, size as usize)?
            .into_iter()
            .map(|b| if b == 1 { Role::Server } else { Role::Client })
            .collect();
        tracing::debug!(rank, size, library = %mpi.library, abi = ?mpi.abi, "MPI transport up");
        Ok(Transport {
            mpi,
            comm,
            rank,
            roles,
            initialized_here,
            thread_level,
            state: Mutex::new(State { closed: false }),
        })
    }

    /// Whether the application initialised MPI itself (then it also
    /// finalizes it; see [`Transport::close_before_finalize`]).
    pub fn initialized_by_application(&self) -> bool {
        !self.initialized_here
    }

    /// Have `on_finalize` run at the start of the application's
    /// `MPI_Finalize`, while MPI still works (the application's own
    /// finalize comes before any exit handler of ours).
    pub fn close_before_finalize(&self, on_finalize: ffi::DeleteAttrFn) -> Result<()> {
        self.mpi.call_at_finalize(on_finalize)
    }

    /// Whether [`Transport::close`] ran.
    pub fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).closed
    }

    pub fn ranks_with(&self, role: Role) -> Vec<c_int> {
        (0..self.roles.len() as c_int)
            .filter(|&r| self.roles[r as usize] == role && r != self.rank)
            .collect()
    }

    /// Exclusive use of MPI; fails once the transport is closed.
    pub fn lock(&self) -> Result<Link<'_>> {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if g.closed {
            return Err(Error::new(
                ErrorCode::BackendFailure,
                "the MPI transport is closed (the process is exiting)",
            ));
        }
        Ok(Link { t: self, _g: g })
    }

    /// Close: run `last` with the lock held (a client says goodbye), then
    /// finalize MPI if this process initialised it. Later calls fail.
    pub fn close(&self, last: impl FnOnce(&Link<'_>)) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if g.closed {
            return;
        }
        let link = Link { t: self, _g: g };
        last(&link);
        g = link._g;
        g.closed = true;
        if self.initialized_here && !self.mpi.is_finalized() {
            if let Err(e) = self.mpi.finalize() {
                tracing::warn!(error = %e, "MPI_Finalize failed");
            }
        }
    }

    pub fn abort(&self, code: c_int) {
        self.mpi.abort(code);
    }
}

/// The lock on MPI: every send and receive goes through one.
pub struct Link<'a> {
    t: &'a Transport,
    _g: MutexGuard<'a, State>,
}

fn rank_error(rank: c_int, e: Error) -> Error {
    Error::new(
        ErrorCode::BackendFailure,
        format!("MPI rank {rank} unreachable: {}", e.message()),
    )
}

impl Link<'_> {
    fn mpi(&self) -> &Mpi {
        &self.t.mpi
    }

    /// A request: `op` then `body`.
    pub fn send_request(&self, rank: c_int, op: Op, body: &impl Message) -> Result<()> {
        let mut buf = Vec::with_capacity(1 + body.encoded_len());
        buf.push(op as u8);
        body.encode(&mut buf)
            .map_err(|e| Error::backend(e.to_string()))?;
        self.mpi()
            .send(self.t.comm, rank, TAG_REQUEST, &buf)
            .map_err(|e| rank_error(rank, e))
    }

    /// The next request from any rank: (rank, op byte, body).
    pub fn recv_request(&self) -> Result<(c_int, u8, Vec<u8>)> {
        let (from, mut buf) =
            self.mpi()
                .recv_any_len(self.t.comm, self.mpi().any_source(), TAG_REQUEST)?;
        if buf.is_empty() {
            return Err(Error::invalid_argument(format!(
                "empty request from rank {from}"
            )));
        }
        let op = buf.remove(0);
        Ok((from, op, buf))
    }

    pub fn send_reply(&self, rank: c_int, reply: &QueueCompletion) -> Result<()> {
        self.mpi()
            .send(self.t.comm, rank, TAG_REPLY, &reply.encode_to_vec())
            .map_err(|e| rank_error(rank, e))
    }

    /// The reply from `rank`: its data, or the error it carries.
    pub fn recv_reply(&self, rank: c_int) -> Result<Vec<u8>> {
        let (_, buf) = self
            .mpi()
            .recv_any_len(self.t.comm, rank, TAG_REPLY)
            .map_err(|e| rank_error(rank, e))?;
        let c = QueueCompletion::decode(buf.as_slice())
            .map_err(|e| Error::backend(format!("bad reply from MPI rank {rank}: {e}")))?;
        if c.code != 0 {
            return Err(Error::new(
                ErrorCode::from_raw(c.code).unwrap_or(ErrorCode::Unknown),
                format!("{} (MPI rank {rank})", c.message),
            ));
        }
        Ok(c.data.to_vec())
    }

    /// Send `len` bytes at `ptr` in pieces.
    ///
    /// # Safety
    /// `ptr` readable for `len` bytes.
    pub unsafe fn send_bulk(
        &self,
        rank: c_int,
        tag: c_int,
        ptr: *const u8,
        len: usize,
    ) -> Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_PIECE);
            self.mpi()
                .send_raw(self.t.comm, rank, tag, ptr.add(done), n)
                .map_err(|e| rank_error(rank, e))?;
            done += n;
        }
        Ok(())
    }

    /// Receive `len` bytes into `ptr`, in the pieces [`Link::send_bulk`] sent.
    ///
    /// # Safety
    /// `ptr` writable for `len` bytes.
    pub unsafe fn recv_bulk(
        &self,
        rank: c_int,
        tag: c_int,
        ptr: *mut u8,
        len: usize,
    ) -> Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_PIECE);
            self.mpi()
                .recv_raw(self.t.comm, rank, tag, ptr.add(done), n)
                .map_err(|e| rank_error(rank, e))?;
            done += n;
        }
        Ok(())
    }
}
