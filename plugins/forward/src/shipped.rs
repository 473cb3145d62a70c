//! Binaries' images shipped once per server.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use offload_core::binary::BinaryDescriptor;
use offload_core::{Error, Result};
use offload_proto::{RegisterBinaryRequest, UnregisterBinaryRequest};

use crate::request::image_desc;
use crate::Transport;

/// A shipped image: (server, image address, length).
type ImageKey<P> = (P, usize, usize);
/// (server, binary id).
type BinaryKey<P> = (P, u64);

/// Images shipped per server: image key -> the server's image id.
pub struct ShippedImages<P> {
    by_image: Mutex<HashMap<ImageKey<P>, u64>>,
    /// (server, binary) -> the keys it added, to forget them on unregister.
    by_binary: Mutex<HashMap<BinaryKey<P>, Vec<ImageKey<P>>>>,
}

impl<P> Default for ShippedImages<P> {
    fn default() -> Self {
        ShippedImages {
            by_image: Mutex::new(HashMap::new()),
            by_binary: Mutex::new(HashMap::new()),
        }
    }
}

impl<P: Clone + Eq + Hash> ShippedImages<P> {
    /// The id `peer` gave `bytes` when its binary was registered.
    pub fn lookup(&self, peer: &P, bytes: &[u8]) -> Option<u64> {
        let key = (peer.clone(), bytes.as_ptr() as usize, bytes.len());
        self.by_image
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
    }

    /// The register hook: ships `binary`'s images to every server once.
    /// Every server is tried; the failures are reported together.
    pub fn register<T: Transport<Peer = P>>(
        &self,
        links: &[Arc<T>],
        binary: &BinaryDescriptor,
    ) -> Result<()> {
        let mut failures = Vec::new();
        for link in links {
            let req = RegisterBinaryRequest {
                client_binary: binary.id.0,
                images: binary.images.iter().map(image_desc).collect(),
            };
            match link.register_binary(req) {
                Ok(reply) => {
                    let peer = link.peer();
                    let mut keys = Vec::new();
                    let mut map = self.by_image.lock().unwrap_or_else(|e| e.into_inner());
                    for (img, id) in binary.images.iter().zip(reply.image_ids) {
                        let key = (peer.clone(), img.bytes.as_ptr() as usize, img.bytes.len());
                        map.insert(key.clone(), id);
                        keys.push(key);
                    }
                    self.by_binary
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((peer, binary.id.0), keys);
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        joined(failures)
    }

    /// The unregister hook: forgets `binary`'s images and tears the binary
    /// down on every live server, in reverse order of construction.
    pub fn unregister<T: Transport<Peer = P>>(
        &self,
        links: &[Arc<T>],
        binary: &BinaryDescriptor,
    ) -> Result<()> {
        let mut failures = Vec::new();
        for link in links.iter().rev() {
            let keys = self
                .by_binary
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(link.peer(), binary.id.0));
            let Some(keys) = keys else { continue };
            {
                let mut map = self.by_image.lock().unwrap_or_else(|e| e.into_inner());
                for k in keys {
                    map.remove(&k);
                }
            }
            if !link.is_alive() {
                continue;
            }
            let req = UnregisterBinaryRequest {
                client_binary: binary.id.0,
            };
            if let Err(e) = link.unregister_binary(req) {
                failures.push(e.to_string());
            }
        }
        joined(failures)
    }
}

fn joined(failures: Vec<String>) -> Result<()> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::backend(failures.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use offload_core::binary::BinaryId;
    use offload_core::plugin;
    use offload_proto::*;

    use super::*;

    /// A server that numbers images and counts unregistrations.
    struct Fake {
        peer: u32,
        alive: AtomicBool,
        next_image: AtomicU64,
        unregistered: AtomicU64,
    }

    fn fake(peer: u32) -> Arc<Fake> {
        Arc::new(Fake {
            peer,
            alive: AtomicBool::new(true),
            next_image: AtomicU64::new(100),
            unregistered: AtomicU64::new(0),
        })
    }

    fn unused<T>() -> Result<T> {
        Err(Error::backend("not part of this test"))
    }

    impl Transport for Fake {
        type Peer = u32;
        fn peer(&self) -> u32 {
            self.peer
        }
        fn is_alive(&self) -> bool {
            self.alive.load(Ordering::SeqCst)
        }
        fn alloc(&self, _: AllocRequest) -> Result<AllocReply> {
            unused()
        }
        fn free(&self, _: FreeRequest) -> Result<()> {
            unused()
        }
        fn register_binary(&self, req: RegisterBinaryRequest) -> Result<RegisterBinaryReply> {
            let image_ids = req
                .images
                .iter()
                .map(|_| self.next_image.fetch_add(1, Ordering::SeqCst))
                .collect();
            Ok(RegisterBinaryReply { image_ids })
        }
        fn unregister_binary(&self, _: UnregisterBinaryRequest) -> Result<()> {
            self.unregistered.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn load_program(&self, _: LoadProgramRequest) -> Result<LoadProgramReply> {
            unused()
        }
        fn unload_program(&self, _: UnloadProgramRequest) {}
        fn get_kernel(&self, _: SymbolRequest) -> Result<KernelReply> {
            unused()
        }
        fn get_global(&self, _: SymbolRequest) -> Result<GlobalReply> {
            unused()
        }
        fn create_queue(_: &Arc<Self>, _: u32) -> Result<Arc<dyn plugin::Queue>> {
            unused()
        }
    }

    #[test]
    fn images_ship_once_per_server_and_are_forgotten() {
        let bytes = b"not an ELF image, shipped as it is".to_vec();
        let binary = BinaryDescriptor {
            id: BinaryId(7),
            images: vec![offload_image::DeviceImage {
                bytes: &bytes,
                format: offload_image::ImageFormat::Unknown,
                triple: None,
                arch: None,
                image_kind: None,
                offload_kind: None,
                strings: Vec::new(),
                metadata: Default::default(),
                containers: Vec::new(),
            }],
            entries: Vec::new(),
        };
        let image = binary.images[0].bytes;
        let (a, b) = (fake(1), fake(2));
        let shipped = ShippedImages::default();
        shipped.register(&[a.clone(), b.clone()], &binary).unwrap();
        assert_eq!(shipped.lookup(&1, image), Some(100));
        assert_eq!(shipped.lookup(&2, image), Some(100));
        // Another slice with the same bytes is another image.
        assert_eq!(shipped.lookup(&1, &bytes.clone()), None);

        b.alive.store(false, Ordering::SeqCst);
        shipped
            .unregister(&[a.clone(), b.clone()], &binary)
            .unwrap();
        assert_eq!(shipped.lookup(&1, image), None);
        assert_eq!(shipped.lookup(&2, image), None);
        assert_eq!(a.unregistered.load(Ordering::SeqCst), 1);
        // A dead server is forgotten without a request.
        assert_eq!(b.unregistered.load(Ordering::SeqCst), 0);
        // Unregistering twice asks nobody again.
        shipped
            .unregister(std::slice::from_ref(&a), &binary)
            .unwrap();
        assert_eq!(a.unregistered.load(Ordering::SeqCst), 1);
    }
}
