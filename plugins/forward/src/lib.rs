//! The forwarding layer: what the remote plugin (gRPC to `offload serve`)
//! and the MPI plugin (ranks of `offload serve --mpi`) share.
//!
//! Both plugins forward the remote protocol's messages (`offload_proto`) to
//! a server that runs them on its devices; they differ only in how a
//! message travels. A plugin implements [`Transport`] for the link to one
//! server (a gRPC connection, a serving rank); this crate builds every
//! request on top of it:
//!
//! * [`ForwardDevice`], [`ForwardProgram`], [`ForwardKernel`]: the plugin
//!   trait's device, program and kernel for any transport (allocations,
//!   frees, program loads by shipped image id, kernel and global lookups,
//!   unloads; `AllocKind::Host` memory stays in this process).
//! * [`ShippedImages`]: the register hook ships a binary's images to each
//!   server once, loads name them by id, the unregister hook tears them down
//!   in reverse order.
//! * [`request`]: the device-info, image and queue-operation messages
//!   (launch, write, read, copy, fill) the plugins' queues send.
//!
//! Queues stay with the transports: gRPC queues are pipelined streams with
//! a data side channel for large copies; MPI queues defer operations into
//! one batch per round trip and move large copies as raw MPI messages.

mod device;
pub mod request;
mod shipped;

use std::hash::Hash;
use std::sync::Arc;

use offload_core::plugin;
use offload_core::Result;
use offload_proto::{
    AllocReply, AllocRequest, FreeRequest, GlobalReply, KernelReply, LoadProgramReply,
    LoadProgramRequest, RegisterBinaryReply, RegisterBinaryRequest, SymbolRequest,
    UnloadProgramRequest, UnregisterBinaryRequest,
};

pub use device::{ForwardDevice, ForwardKernel, ForwardProgram};
pub use shipped::ShippedImages;

/// The link to one server: every method is one request and its reply (a
/// unary gRPC call, one MPI request/reply exchange). Bulk data (large
/// copies) travels through the transport's own queues
/// ([`Transport::create_queue`]).
pub trait Transport: Send + Sync + Sized + 'static {
    /// Names the server in the table of shipped images (its address, its
    /// rank).
    type Peer: Clone + Eq + Hash + Send + Sync + 'static;

    /// This link's server.
    fn peer(&self) -> Self::Peer;
    /// Whether requests can still reach the server (teardown skips dead
    /// ones).
    fn is_alive(&self) -> bool;

    fn alloc(&self, req: AllocRequest) -> Result<AllocReply>;
    fn free(&self, req: FreeRequest) -> Result<()>;
    fn register_binary(&self, req: RegisterBinaryRequest) -> Result<RegisterBinaryReply>;
    fn unregister_binary(&self, req: UnregisterBinaryRequest) -> Result<()>;
    /// Loads a program; whatever the device printed while loading is the
    /// transport's to pass on.
    fn load_program(&self, req: LoadProgramRequest) -> Result<LoadProgramReply>;
    /// Unloads a program when its handle is dropped: best effort, errors
    /// are the transport's to report or ignore.
    fn unload_program(&self, req: UnloadProgramRequest);
    fn get_kernel(&self, req: SymbolRequest) -> Result<KernelReply>;
    fn get_global(&self, req: SymbolRequest) -> Result<GlobalReply>;
    /// A queue of `device` (the device's index on the server).
    fn create_queue(link: &Arc<Self>, device: u32) -> Result<Arc<dyn plugin::Queue>>;
}
