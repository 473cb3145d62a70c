use std::sync::Arc;

use offload_core::plugin::KernelArgs as RawArgs;
use offload_core::{Error, LaunchConfig, Result};

use crate::{Device, DeviceBuffer, Kernel};

/// An in-order, asynchronous queue of a device.
#[derive(Clone)]
pub struct Queue {
    pub(crate) device: Device,
    pub(crate) core: Arc<offload_core::Queue>,
}

/// A packed argument buffer, laid out like a C struct of the values pushed.
#[derive(Clone, Debug, Default)]
pub struct KernelArgs {
    bytes: Vec<u8>,
}

impl KernelArgs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a plain value at its natural alignment.
    pub fn value<T: Copy>(mut self, value: T) -> Self {
        let align = std::mem::align_of::<T>();
        let start = self.bytes.len().next_multiple_of(align);
        self.bytes.resize(start, 0);
        // SAFETY: reading the bytes of a `Copy` value.
        let raw = unsafe {
            std::slice::from_raw_parts((&value as *const T).cast::<u8>(), std::mem::size_of::<T>())
        };
        self.bytes.extend_from_slice(raw);
        self
    }

    /// Append the device address of `buffer`.
    pub fn ptr<T: Copy>(self, buffer: &DeviceBuffer<T>) -> Self {
        self.value(buffer.device_ptr().0)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Queue {
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Launch `kernel` over the grid `config` with a packed argument buffer.
    ///
    /// # Safety
    /// The kernel runs arbitrary device code: `args` must match what it
    /// expects, and every device pointer in it must stay allocated until the
    /// queue is synchronised.
    pub unsafe fn launch(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &KernelArgs,
    ) -> Result<()> {
        self.check_kernel(kernel)?;
        self.core
            .launch(&kernel.core, RawArgs::Packed(args.as_bytes()), &config)
    }

    /// Launch a kernel that takes one 64-bit word per parameter (the
    /// convention of OpenMP images: pass the `dyn_ptr` word first).
    ///
    /// # Safety
    /// As for [`Queue::launch`].
    pub unsafe fn launch_words(
        &self,
        kernel: &Kernel,
        config: LaunchConfig,
        words: &[u64],
    ) -> Result<()> {
        self.check_kernel(kernel)?;
        self.core
            .launch(&kernel.core, RawArgs::Words(words), &config)
    }

    fn check_kernel(&self, kernel: &Kernel) -> Result<()> {
        if kernel.device().id() != self.device.id() {
            return Err(Error::invalid_argument(format!(
                "kernel '{}' belongs to {:?}, the queue to {:?}",
                kernel.name(),
                kernel.device(),
                self.device
            )));
        }
        Ok(())
    }

    /// Block until everything enqueued has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.core.synchronize()
    }

    /// An event completing when the work enqueued so far has.
    pub fn record_event(&self) -> Result<Event> {
        Ok(Event {
            core: self.core.record_event()?,
        })
    }

    /// Make later work on this queue wait for `event`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.core.wait_event(&event.core)
    }

    /// Run `f` on the host after everything before it.
    pub fn host_function(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        self.core.host_function(Box::new(f))
    }

    pub fn is_idle(&self) -> Result<bool> {
        self.core.is_idle()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // The last clone lets the queue's executor (if any) finish and exit.
        if Arc::strong_count(&self.core) == 1 {
            let _ = self.core.close();
        }
    }
}

/// A point in a queue's work.
#[derive(Clone)]
pub struct Event {
    core: offload_core::Event,
}

impl Event {
    pub fn synchronize(&self) -> Result<()> {
        self.core.synchronize()
    }
    pub fn is_complete(&self) -> Result<bool> {
        self.core.is_complete()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_follow_c_layout() {
        let a = KernelArgs::new()
            .value(1u8)
            .value(2u32)
            .value(3u64)
            .value(4u16);
        let b = a.as_bytes();
        assert_eq!(b.len(), 18);
        assert_eq!(b[0], 1);
        assert_eq!(&b[4..8], &2u32.to_ne_bytes());
        assert_eq!(&b[8..16], &3u64.to_ne_bytes());
        assert_eq!(&b[16..18], &4u16.to_ne_bytes());
    }
}
