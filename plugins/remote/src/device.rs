//! A device of a remote server.

use std::sync::Arc;

use offload_core::client_host_memory::{no_shared_memory, ClientHostMemory};
use offload_core::plugin::{self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType};
use offload_core::Result;
use offload_image::DeviceImage;
use offload_proto::{
    load_program_request, AllocRequest, DeviceDesc, FreeRequest, ImageDesc, KeyValue,
    LoadProgramRequest,
};

use crate::connection::Connection;
use crate::image::RemoteProgram;
use crate::queue::RemoteQueue;
use crate::ShippedImages;

pub struct RemoteDevice {
    pub(crate) conn: Arc<Connection>,
    /// The device's index on its server.
    pub(crate) remote_id: u32,
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

impl RemoteDevice {
    pub fn new(conn: Arc<Connection>, d: &DeviceDesc, shipped: Arc<ShippedImages>) -> Self {
        let device_type = match d.device_type {
            2 => DeviceType::Gpu,
            4 => DeviceType::Host,
            _ => DeviceType::Cpu,
        };
        let info = DeviceInfo {
            name: format!("{} @ {}", d.name, conn.addr),
            vendor: d.vendor.clone(),
            product_name: d.product_name.clone(),
            device_type,
            backend: Backend::Remote,
            triple: d.triple.clone(),
            arch: d.arch.clone(),
            uid: format!("remote:{}/{}", conn.addr, d.uid),
            driver_version: format!("{} via {}", d.driver_version, conn.server),
            global_memory_bytes: d.global_memory_bytes,
            group_memory_bytes: d.group_memory_bytes,
            compute_units: d.compute_units,
            max_group_size: d.max_group_size,
            max_group_size_per_dim: dim3(&d.max_group_size_per_dim),
            max_num_groups: dim3(&d.max_num_groups),
            clock_mhz: d.clock_mhz,
            address_bits: d.address_bits,
        };
        RemoteDevice {
            conn,
            remote_id: d.id,
            info,
            shipped,
            host_memory: ClientHostMemory::default(),
        }
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

impl RemoteDevice {
    pub(crate) fn connection(&self) -> &Arc<Connection> {
        &self.conn
    }
    pub(crate) fn remote_id(&self) -> u32 {
        self.remote_id
    }
}

impl plugin::Device for RemoteDevice {
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
        let r = self
            .conn
            .call("alloc", |mut c| async move { c.alloc(req).await })?;
        Ok(DevicePtr(r.ptr))
    }

    fn host_allocations_are_local(&self) -> bool {
        true
    }

    fn free(&self, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
        if kind == AllocKind::Host {
            return self.host_memory.free(ptr);
        }
        let req = FreeRequest {
            device: self.remote_id,
            ptr: ptr.0,
        };
        self.conn
            .call("free", |mut c| async move { c.free(req).await })
            .map(|_| ())
    }

    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        // Images of registered binaries were shipped once; name them by id.
        let source = match self.shipped.lookup(&self.conn.addr, image.bytes) {
            Some(id) => load_program_request::Source::ImageId(id),
            None => load_program_request::Source::Image(image_desc(image)),
        };
        let req = LoadProgramRequest {
            device: self.remote_id,
            source: Some(source),
        };
        let r = self.conn.call(
            "load program",
            |mut c| async move { c.load_program(req).await },
        )?;
        crate::output::emit(r.output.as_ref());
        Ok(Arc::new(RemoteProgram {
            conn: self.conn.clone(),
            id: r.program,
        }))
    }

    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        Ok(Arc::new(RemoteQueue::open(
            self.conn.clone(),
            self.remote_id,
        )?))
    }
}
