//! A server's device, its programs and kernels, over any transport.

use std::marker::PhantomData;
use std::sync::Arc;

use offload_core::client_host_memory::{no_shared_memory, ClientHostMemory};
use offload_core::plugin::{self, AllocKind, DeviceInfo, DevicePtr};
use offload_core::Result;
use offload_image::DeviceImage;
use offload_proto::{
    load_program_request, AllocRequest, FreeRequest, LoadProgramRequest, SymbolRequest,
    UnloadProgramRequest,
};

use crate::request::image_desc;
use crate::{ShippedImages, Transport};

/// A device of a server, reached through `T`.
pub struct ForwardDevice<T: Transport> {
    link: Arc<T>,
    /// The device's index on its server.
    remote_id: u32,
    info: DeviceInfo,
    shipped: Arc<ShippedImages<T::Peer>>,
    /// `AllocKind::Host` memory: in this process, where the caller can
    /// touch it (`offload_core::client_host_memory`).
    host_memory: ClientHostMemory,
}

impl<T: Transport> ForwardDevice<T> {
    /// Device `remote_id` of the server behind `link`, described by `info`
    /// ([`crate::request::device_info`]).
    pub fn new(
        link: Arc<T>,
        remote_id: u32,
        info: DeviceInfo,
        shipped: Arc<ShippedImages<T::Peer>>,
    ) -> Self {
        ForwardDevice {
            link,
            remote_id,
            info,
            shipped,
            host_memory: ClientHostMemory::default(),
        }
    }

    /// The link to the device's server.
    pub fn link(&self) -> &Arc<T> {
        &self.link
    }

    /// The device's index on its server.
    pub fn remote_id(&self) -> u32 {
        self.remote_id
    }
}

impl<T: Transport> plugin::Device for ForwardDevice<T> {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        match kind {
            AllocKind::Host => return self.host_memory.alloc(size),
            AllocKind::Shared => return Err(no_shared_memory(&self.info.name)),
            AllocKind::Device => {}
        }
        let r = self.link.alloc(AllocRequest {
            device: self.remote_id,
            size: size as u64,
            kind: kind as u32,
        })?;
        Ok(DevicePtr(r.ptr))
    }

    fn host_allocations_are_local(&self) -> bool {
        true
    }

    unsafe fn free(&self, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
        if kind == AllocKind::Host {
            return self.host_memory.free(ptr);
        }
        self.link.free(FreeRequest {
            device: self.remote_id,
            ptr: ptr.0,
        })
    }

    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        // Images of registered binaries were shipped once; name them by id.
        let source = match self.shipped.lookup(&self.link.peer(), image.bytes) {
            Some(id) => load_program_request::Source::ImageId(id),
            None => load_program_request::Source::Image(image_desc(image)),
        };
        let r = self.link.load_program(LoadProgramRequest {
            device: self.remote_id,
            source: Some(source),
        })?;
        Ok(Arc::new(ForwardProgram {
            link: self.link.clone(),
            id: r.program,
        }))
    }

    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        T::create_queue(&self.link, self.remote_id)
    }
}

/// A program loaded on a server; unloaded there when dropped.
pub struct ForwardProgram<T: Transport> {
    link: Arc<T>,
    id: u64,
}

/// A kernel of a program on a server. Typed by its transport, so that a
/// queue of one forwarding plugin never takes another's kernel.
pub struct ForwardKernel<T> {
    name: String,
    id: u64,
    preferred_group_size: u32,
    transport: PhantomData<fn() -> T>,
}

impl<T: Transport> ForwardKernel<T> {
    /// The server's id of `kernel`, or an error naming `plugin` when it
    /// is not a kernel of transport `T`.
    pub fn id_of(kernel: &dyn plugin::Kernel, plugin: &str) -> Result<u64> {
        plugin::own_kernel::<Self>(kernel, plugin).map(|k| k.id)
    }
}

impl<T: Transport> plugin::Kernel for ForwardKernel<T> {
    fn name(&self) -> &str {
        &self.name
    }
    fn preferred_group_size(&self, _dyn_group_memory: usize) -> u32 {
        self.preferred_group_size
    }
}

impl<T: Transport> plugin::Program for ForwardProgram<T> {
    fn kernel(&self, name: &str) -> Result<Arc<dyn plugin::Kernel>> {
        let r = self.link.get_kernel(SymbolRequest {
            program: self.id,
            name: name.to_string(),
        })?;
        Ok(Arc::new(ForwardKernel::<T> {
            name: name.to_string(),
            id: r.kernel,
            preferred_group_size: r.preferred_group_size,
            transport: PhantomData,
        }))
    }

    fn global(&self, name: &str) -> Result<(DevicePtr, u64)> {
        let r = self.link.get_global(SymbolRequest {
            program: self.id,
            name: name.to_string(),
        })?;
        Ok((DevicePtr(r.ptr), r.size))
    }
}

impl<T: Transport> Drop for ForwardProgram<T> {
    fn drop(&mut self) {
        self.link
            .unload_program(UnloadProgramRequest { program: self.id });
    }
}
