//! A device of a remote server: the forwarding layer's device
//! (`offload_forward`) over a gRPC [`Connection`], each request one unary
//! call with the connection's timeout.

use std::sync::Arc;

use offload_core::plugin;
use offload_core::Result;
use offload_forward::{ForwardDevice, ForwardKernel, Transport};
use offload_proto::prost::Message;
use offload_proto::{
    AllocReply, AllocRequest, FreeRequest, GlobalReply, KernelReply, LoadProgramReply,
    LoadProgramRequest, RegisterBinaryReply, RegisterBinaryRequest, SymbolRequest,
    UnloadProgramRequest, UnregisterBinaryRequest,
};

use crate::connection::Connection;
use crate::queue::RemoteQueue;

/// A device of a remote server.
pub type RemoteDevice = ForwardDevice<Connection>;
/// A kernel of a program on a remote server.
pub type RemoteKernel = ForwardKernel<Connection>;

impl Transport for Connection {
    /// Servers are told apart by address.
    type Peer = String;

    fn peer(&self) -> String {
        self.addr.clone()
    }

    fn is_alive(&self) -> bool {
        Connection::is_alive(self)
    }

    fn alloc(&self, req: AllocRequest) -> Result<AllocReply> {
        self.call("alloc", |mut c| async move { c.alloc(req).await })
    }

    fn free(&self, req: FreeRequest) -> Result<()> {
        self.call("free", |mut c| async move { c.free(req).await })
            .map(|_| ())
    }

    fn register_binary(&self, req: RegisterBinaryRequest) -> Result<RegisterBinaryReply> {
        crate::connection::fits(&self.addr, "register binary", req.encoded_len())?;
        self.call("register binary", |mut c| async move {
            c.register_binary(req).await
        })
    }

    fn unregister_binary(&self, req: UnregisterBinaryRequest) -> Result<()> {
        self.call("unregister binary", |mut c| async move {
            c.unregister_binary(req).await
        })
        .map(|_| ())
    }

    fn load_program(&self, req: LoadProgramRequest) -> Result<LoadProgramReply> {
        crate::connection::fits(&self.addr, "load program", req.encoded_len())?;
        let r = self.call(
            "load program",
            |mut c| async move { c.load_program(req).await },
        )?;
        crate::output::emit(r.output.as_ref());
        Ok(r)
    }

    fn unload_program(&self, req: UnloadProgramRequest) {
        if self.is_alive() {
            let r = self.call("unload program", |mut c| async move {
                c.unload_program(req).await
            });
            if let Ok(r) = r {
                crate::output::emit(r.output.as_ref());
            }
        }
    }

    fn get_kernel(&self, req: SymbolRequest) -> Result<KernelReply> {
        self.call("get kernel", |mut c| async move { c.get_kernel(req).await })
    }

    fn get_global(&self, req: SymbolRequest) -> Result<GlobalReply> {
        self.call("get global", |mut c| async move { c.get_global(req).await })
    }

    fn create_queue(link: &Arc<Self>, device: u32) -> Result<Arc<dyn plugin::Queue>> {
        Ok(Arc::new(RemoteQueue::open(link.clone(), device)?))
    }
}
