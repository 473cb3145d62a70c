//! The remote plugin: every device of every server named in
//! `OFFLOAD_REMOTE=HOST:PORT[,HOST:PORT...]` becomes an ordinary device of
//! this process (numbered after the local ones).
//!
//! * One gRPC connection and session per server (`offload serve`). The
//!   token comes from `OFFLOAD_REMOTE_TOKEN`; `OFFLOAD_REMOTE_TLS_CA=cert.pem`
//!   switches to TLS.
//! * Binaries: the register hook ships a binary's images to each server once;
//!   loads then name them by id. The unregister hook tears them down there.
//! * Devices, programs, kernels, shipped images and request building are
//!   the forwarding layer shared with the MPI plugin (`offload_forward`);
//!   this crate gives it a transport (a gRPC [`Connection`], each request
//!   one unary call) and the queues.
//! * Queues are pipelined gRPC streams; only synchronisation waits.
//! * Faults: connecting and every plain call are bounded by
//!   `OFFLOAD_REMOTE_TIMEOUT` seconds; HTTP/2 keep-alive notices a dead
//!   server, after which calls fail at once with an error naming it.

mod connection;
mod data;
mod device;
mod local;
mod memory;
mod output;
mod queue;

use std::sync::{Arc, Mutex};

use offload_core::binary::BinaryDescriptor;
use offload_core::plugin::{self, Plugin};
use offload_core::{Config, Error, PluginEntry, Result};

pub use connection::{connect_session, Connection};
pub use device::{RemoteDevice, RemoteKernel};

/// The plugin's entry for [`offload_core::Runtime::new`].
pub const ENTRY: PluginEntry = PluginEntry {
    name: "remote",
    create,
    opt_in: false,
};

fn create(config: &Config) -> Result<Box<dyn Plugin>> {
    Ok(Box::new(RemotePlugin {
        config: config.clone(),
        connections: Mutex::new(Vec::new()),
        shipped: Default::default(),
    }))
}

/// Images shipped per server (by address).
pub type ShippedImages = offload_forward::ShippedImages<String>;

pub struct RemotePlugin {
    config: Config,
    connections: Mutex<Vec<Arc<Connection>>>,
    shipped: Arc<ShippedImages>,
}

impl RemotePlugin {
    /// The servers connected at init.
    fn connections(&self) -> Vec<Arc<Connection>> {
        self.connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Plugin for RemotePlugin {
    fn name(&self) -> &'static str {
        "remote"
    }

    fn init(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        let mut devices: Vec<Arc<dyn plugin::Device>> = Vec::new();
        let mut errors = Vec::new();
        for addr in &self.config.remote_servers {
            match Connection::open(addr, &self.config) {
                Ok(conn) => {
                    for d in &conn.hello.devices {
                        let info = offload_forward::request::device_info(
                            d,
                            &conn.addr,
                            &format!("remote:{}", conn.addr),
                            &conn.server,
                        );
                        devices.push(Arc::new(RemoteDevice::new(
                            conn.clone(),
                            d.id,
                            info,
                            self.shipped.clone(),
                        )));
                    }
                    self.connections
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(conn);
                }
                Err(e) => {
                    tracing::warn!(server = %addr, error = %e, "remote server unavailable");
                    errors.push(e);
                }
            }
        }
        if devices.is_empty() && !errors.is_empty() {
            let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            return Err(Error::backend(msgs.join("; ")));
        }
        Ok(devices)
    }

    fn register_binary(&self, binary: &BinaryDescriptor) -> Result<()> {
        self.shipped.register(&self.connections(), binary)
    }

    fn unregister_binary(&self, binary: &BinaryDescriptor) -> Result<()> {
        self.shipped.unregister(&self.connections(), binary)
    }
}
