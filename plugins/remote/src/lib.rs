//! The remote plugin: every device of every server named in
//! `OFFLOAD_REMOTE=HOST:PORT[,HOST:PORT...]` becomes an ordinary device of
//! this process (numbered after the local ones).
//!
//! * One gRPC connection and session per server (`offload serve`). The
//!   token comes from `OFFLOAD_REMOTE_TOKEN`; `OFFLOAD_REMOTE_TLS_CA=cert.pem`
//!   switches to TLS.
//! * Binaries: the register hook ships a binary's images to each server once;
//!   loads then name them by id. The unregister hook tears them down there.
//! * Queues are pipelined gRPC streams; only synchronisation waits.
//! * Faults: connecting and every plain call are bounded by
//!   `OFFLOAD_REMOTE_TIMEOUT` seconds; HTTP/2 keep-alive notices a dead
//!   server, after which calls fail at once with an error naming it.

mod connection;
mod data;
mod device;
mod image;
mod memory;
mod output;
mod queue;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use offload_core::binary::BinaryDescriptor;
use offload_core::plugin::{self, Plugin};
use offload_core::{Config, Error, PluginEntry, Result};
use offload_proto::{RegisterBinaryRequest, UnregisterBinaryRequest};

pub use connection::{connect_session, Connection};
pub use device::RemoteDevice;

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

/// A shipped image: (server, image address, length).
type ImageKey = (String, usize, usize);

/// Images shipped per server: image key -> the server's image id.
#[derive(Default)]
pub struct ShippedImages {
    by_image: Mutex<HashMap<ImageKey, u64>>,
    /// (server, binary) -> the keys it added, to forget them on unregister.
    by_binary: Mutex<HashMap<(String, u64), Vec<ImageKey>>>,
}

impl ShippedImages {
    fn lookup(&self, server: &str, bytes: &[u8]) -> Option<u64> {
        let key = (server.to_string(), bytes.as_ptr() as usize, bytes.len());
        self.by_image
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
    }
}

pub struct RemotePlugin {
    config: Config,
    connections: Mutex<Vec<Arc<Connection>>>,
    shipped: Arc<ShippedImages>,
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
                        devices.push(Arc::new(RemoteDevice::new(
                            conn.clone(),
                            d,
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
        let conns = self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut failures = Vec::new();
        for conn in conns {
            let req = RegisterBinaryRequest {
                client_binary: binary.id.0,
                images: binary.images.iter().map(device::image_desc).collect(),
            };
            match conn.call("register binary", |mut c| async move {
                c.register_binary(req).await
            }) {
                Ok(reply) => {
                    let mut keys = Vec::new();
                    let mut map = self
                        .shipped
                        .by_image
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    for (img, id) in binary.images.iter().zip(reply.image_ids) {
                        let key = (
                            conn.addr.clone(),
                            img.bytes.as_ptr() as usize,
                            img.bytes.len(),
                        );
                        map.insert(key.clone(), id);
                        keys.push(key);
                    }
                    self.shipped
                        .by_binary
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((conn.addr.clone(), binary.id.0), keys);
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::backend(failures.join("; ")))
        }
    }

    fn unregister_binary(&self, binary: &BinaryDescriptor) -> Result<()> {
        let conns = self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut failures = Vec::new();
        // Reverse order of construction.
        for conn in conns.iter().rev() {
            let keys = self
                .shipped
                .by_binary
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(conn.addr.clone(), binary.id.0));
            let Some(keys) = keys else { continue };
            {
                let mut map = self
                    .shipped
                    .by_image
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                for k in keys {
                    map.remove(&k);
                }
            }
            if !conn.is_alive() {
                continue;
            }
            let req = UnregisterBinaryRequest {
                client_binary: binary.id.0,
            };
            if let Err(e) = conn.call("unregister binary", |mut c| async move {
                c.unregister_binary(req).await
            }) {
                failures.push(e.to_string());
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::backend(failures.join("; ")))
        }
    }
}
