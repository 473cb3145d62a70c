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
/// The whole of a request too long for [`INLINE_MAX`] (announced on
/// [`TAG_REQUEST`] by a [`LARGE`] frame).
pub const TAG_REQUEST_LARGE: c_int = 0x0f14;
/// The same for replies.
pub const TAG_REPLY_LARGE: c_int = 0x0f15;

/// Longest request or reply sent as one message (frame byte included):
/// the receiver posts one receive of this size, so no `MPI_Probe` precedes
/// a request or reply. Inline copies (below [`BULK_MIN`]) fit.
pub const INLINE_MAX: usize = BULK_MIN + 4096;
/// First byte of a frame announcing a longer message: 8 bytes of its
/// length follow, the message itself comes on the `..._LARGE` tag.
const LARGE: u8 = 0xff;
/// First byte of an inline reply.
const REPLY: u8 = 0;

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
    /// `MpiQueueBatch`: deferred queue operations run in order; the reply
    /// holds the reads' bytes.
    QueueBatch = 18,
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
            18 => QueueBatch,
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
    /// The one receive buffer (INLINE_MAX bytes once used).
    rx: std::cell::RefCell<Vec<u8>>,
    /// The send buffer, reused (its capacity kept).
    tx: std::cell::RefCell<Vec<u8>>,
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
    /// How receives of requests and replies wait (`OFFLOAD_MPI_SPIN_US`).
    patience: ffi::Patience,
    state: Mutex<State>,
}

impl Transport {
    /// Load libmpi, initialise MPI unless the application already did, and
    /// learn every rank's role. Collective: every rank of the job calls it.
    pub fn start(role: Role) -> Result<Transport> {
        let patience = ffi::Patience::from_env()?;
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
            patience,
            state: Mutex::new(State {
                closed: false,
                rx: Default::default(),
                tx: Default::default(),
            }),
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
        self.send_framed(rank, op as u8, body, TAG_REQUEST, TAG_REQUEST_LARGE)
    }

    /// The next request from any rank: (rank, op byte, body).
    pub fn recv_request(&self) -> Result<(c_int, u8, Vec<u8>)> {
        let any = self.mpi().any_source();
        self.recv_framed(any, TAG_REQUEST, TAG_REQUEST_LARGE, |from, msg| {
            match msg.split_first() {
                Some((&op, body)) => Ok((from, op, body.to_vec())),
                None => Err(Error::invalid_argument(format!(
                    "empty request from rank {from}"
                ))),
            }
        })
    }

    pub fn send_reply(&self, rank: c_int, reply: &QueueCompletion) -> Result<()> {
        self.send_framed(rank, REPLY, reply, TAG_REPLY, TAG_REPLY_LARGE)
    }

    /// The reply from `rank`: its data, or the error it carries.
    pub fn recv_reply(&self, rank: c_int) -> Result<Vec<u8>> {
        let c = self
            .recv_framed(rank, TAG_REPLY, TAG_REPLY_LARGE, |_, msg| {
                match msg.split_first() {
                    Some((&REPLY, body)) => QueueCompletion::decode(body).map_err(|e| {
                        Error::backend(format!("bad reply from MPI rank {rank}: {e}"))
                    }),
                    _ => Err(Error::backend(format!("bad reply from MPI rank {rank}"))),
                }
            })
            .map_err(|e| rank_error(rank, e))?;
        if c.code != 0 {
            return Err(Error::new(
                ErrorCode::from_raw(c.code).unwrap_or(ErrorCode::Unknown),
                format!("{} (MPI rank {rank})", c.message),
            ));
        }
        Ok(c.data.to_vec())
    }

    /// `first` then `body` as one message on `tag`, or, when longer than
    /// [`INLINE_MAX`], a [`LARGE`] frame on `tag` and the message on
    /// `large_tag` (MPI keeps the order of two messages between the same
    /// ranks).
    fn send_framed(
        &self,
        rank: c_int,
        first: u8,
        body: &impl Message,
        tag: c_int,
        large_tag: c_int,
    ) -> Result<()> {
        let mut buf = self._g.tx.borrow_mut();
        buf.clear();
        buf.reserve(1 + body.encoded_len());
        buf.push(first);
        body.encode(&mut *buf)
            .map_err(|e| Error::backend(e.to_string()))?;
        let send = |tag, data: &[u8]| {
            self.mpi()
                .send(self.t.comm, rank, tag, data)
                .map_err(|e| rank_error(rank, e))
        };
        if buf.len() <= INLINE_MAX {
            return send(tag, &buf);
        }
        let mut frame = [0u8; 9];
        frame[0] = LARGE;
        frame[1..].copy_from_slice(&(buf.len() as u64).to_le_bytes());
        send(tag, &frame)?;
        send(large_tag, &buf)
    }

    /// One framed message (see [`Link::send_framed`]) from `source`,
    /// handed to `read` with its sender (frame byte first) where it was
    /// received: no copy for inline messages.
    fn recv_framed<R>(
        &self,
        source: c_int,
        tag: c_int,
        large_tag: c_int,
        read: impl FnOnce(c_int, &[u8]) -> Result<R>,
    ) -> Result<R> {
        let mut rx = self._g.rx.borrow_mut();
        if rx.len() < INLINE_MAX {
            rx.resize(INLINE_MAX, 0);
        }
        let (from, n) = self
            .mpi()
            .recv_into(self.t.comm, source, tag, &mut rx, self.t.patience)?;
        let msg = &rx[..n];
        if msg.first() != Some(&LARGE) {
            return read(from, msg);
        }
        let len = msg
            .get(1..9)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::backend(format!("bad frame from MPI rank {from}")))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > INLINE_MAX && l <= MAX_PIECE)
            .ok_or_else(|| {
                Error::backend(format!("MPI rank {from} announced a {len}-byte message"))
            })?;
        let mut whole = vec![0u8; len];
        self.mpi()
            .recv_raw(self.t.comm, from, large_tag, whole.as_mut_ptr(), len)?;
        read(from, &whole)
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
        in_pieces(len, |at, n| {
            // SAFETY: `at + n <= len` and the caller makes `ptr` readable
            // for `len` bytes.
            let piece = unsafe { ptr.add(at) };
            self.mpi()
                .send_raw(self.t.comm, rank, tag, piece, n)
                .map_err(|e| rank_error(rank, e))
        })
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
        in_pieces(len, |at, n| {
            // SAFETY: `at + n <= len` and the caller makes `ptr` writable
            // for `len` bytes.
            let piece = unsafe { ptr.add(at) };
            self.mpi()
                .recv_raw(self.t.comm, rank, tag, piece, n)
                .map_err(|e| rank_error(rank, e))
        })
    }
}

/// `len` bytes as pieces of at most [`MAX_PIECE`]: `piece(offset, size)`
/// for each, in order (an MPI count is an `int`).
fn in_pieces(len: usize, mut piece: impl FnMut(usize, usize) -> Result<()>) -> Result<()> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(MAX_PIECE);
        piece(done, n)?;
        done += n;
    }
    Ok(())
}
