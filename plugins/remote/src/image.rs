//! Programs and kernels living on a server.

use std::sync::Arc;

use offload_core::plugin::{self, DevicePtr};
use offload_core::Result;
use offload_proto::{SymbolRequest, UnloadProgramRequest};

use crate::connection::Connection;

pub struct RemoteProgram {
    pub(crate) conn: Arc<Connection>,
    pub(crate) id: u64,
}

pub struct RemoteKernel {
    pub(crate) name: String,
    pub(crate) id: u64,
    pub(crate) preferred_group_size: u32,
}

impl plugin::Kernel for RemoteKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn preferred_group_size(&self, _dyn_group_memory: usize) -> u32 {
        self.preferred_group_size
    }
}

impl plugin::Program for RemoteProgram {
    fn kernel(&self, name: &str) -> Result<Arc<dyn plugin::Kernel>> {
        let req = SymbolRequest {
            program: self.id,
            name: name.to_string(),
        };
        let r = self
            .conn
            .call("get kernel", |mut c| async move { c.get_kernel(req).await })?;
        Ok(Arc::new(RemoteKernel {
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
        let r = self
            .conn
            .call("get global", |mut c| async move { c.get_global(req).await })?;
        Ok((DevicePtr(r.ptr), r.size))
    }
}

impl Drop for RemoteProgram {
    fn drop(&mut self) {
        if self.conn.is_alive() {
            let req = UnloadProgramRequest { program: self.id };
            let r = self.conn.call("unload program", |mut c| async move {
                c.unload_program(req).await
            });
            if let Ok(r) = r {
                crate::output::emit(r.output.as_ref());
            }
        }
    }
}
