//! Queues of the simulated device: the host plugin's queue underneath
//! (work completes inline), with faults and simulated timing.

use std::sync::Arc;

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::Result;

use crate::faults::{FaultPlan, Op};

pub struct SimQueue {
    inner: Arc<dyn plugin::Queue>,
    plan: Arc<FaultPlan>,
}

impl SimQueue {
    pub fn new(inner: Arc<dyn plugin::Queue>, plan: Arc<FaultPlan>) -> SimQueue {
        SimQueue { inner, plan }
    }

    fn step(&self, op: Op, bytes: usize) -> Result<()> {
        self.plan.check(op)?;
        self.plan.delay(bytes);
        Ok(())
    }
}

impl plugin::Queue for SimQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        self.step(Op::H2d, size)?;
        // SAFETY: the caller's guarantee for this call is the inner queue's.
        unsafe { self.inner.copy_to_device(dst, src, size) }
    }
    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        self.step(Op::D2h, size)?;
        // SAFETY: as above.
        unsafe { self.inner.copy_from_device(dst, src, size) }
    }
    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        self.step(Op::D2d, size)?;
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.inner.copy_within(dst, src, size) }
    }
    unsafe fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        self.step(Op::Fill, size)?;
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.inner.fill(dst, pattern, size) }
    }
    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        self.step(Op::Launch, 0)?;
        self.inner.launch(kernel, args, config)
    }
    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        self.inner.host_function(f)
    }
    fn record_event(&self) -> Result<Arc<dyn plugin::Event>> {
        self.inner.record_event()
    }
    fn wait_event(&self, event: &dyn plugin::Event) -> Result<()> {
        self.inner.wait_event(event)
    }
    fn synchronize(&self) -> Result<()> {
        self.plan.check(Op::Sync)?;
        self.inner.synchronize()
    }
    fn is_idle(&self) -> Result<bool> {
        self.inner.is_idle()
    }
    fn completes_inline(&self) -> bool {
        true
    }
}
