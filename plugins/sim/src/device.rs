//! A simulated device: the host plugin's device underneath, with the fault
//! plan consulted before every operation.

use std::sync::Arc;

use offload_core::plugin::{self, AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType};
use offload_core::Result;
use offload_image::DeviceImage;
use offload_plugin_host::{HostDevice, MachineFacts};

use crate::faults::{FaultPlan, Op};
use crate::queue::SimQueue;

pub struct SimDevice {
    info: DeviceInfo,
    inner: HostDevice,
    plan: Arc<FaultPlan>,
}

impl SimDevice {
    pub fn new(index: usize, facts: &MachineFacts, plan: Arc<FaultPlan>) -> SimDevice {
        let inner = HostDevice::new(index, facts);
        let mut info = plugin::Device::info(&inner).clone();
        info.name = "offload-rs simulated device".to_string();
        info.vendor = "offload-rs".to_string();
        info.product_name = "sim".to_string();
        info.device_type = DeviceType::Gpu;
        info.backend = Backend::Other;
        info.uid = format!("sim-{index}");
        SimDevice { info, inner, plan }
    }
}

impl plugin::Device for SimDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn can_run(&self, image: &DeviceImage<'_>) -> bool {
        self.inner.can_run(image)
    }
    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr> {
        self.plan.check(Op::Alloc)?;
        self.inner.alloc(size, kind)
    }
    unsafe fn free(&self, ptr: DevicePtr, kind: AllocKind) -> Result<()> {
        self.plan.check(Op::Free)?;
        // SAFETY: the caller's guarantee (the host device underneath made it).
        unsafe { self.inner.free(ptr, kind) }
    }
    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn plugin::Program>> {
        self.plan.check(Op::Load)?;
        self.inner.load_program(image)
    }
    fn create_queue(&self) -> Result<Arc<dyn plugin::Queue>> {
        self.plan.check(Op::Queue)?;
        Ok(Arc::new(SimQueue::new(
            self.inner.create_queue()?,
            self.plan.clone(),
        )))
    }
}
