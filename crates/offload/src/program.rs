use std::sync::Arc;

use offload_core::plugin;
use offload_core::{DevicePtr, Error, Result};

use crate::Device;

/// A loaded image on one device.
#[derive(Clone)]
pub struct Program {
    pub(crate) device: Device,
    pub(crate) raw: Arc<dyn plugin::Program>,
}

impl Program {
    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let raw = self
            .raw
            .kernel(name)
            .map_err(|e| e.context(format!("program on {:?}", self.device)))?;
        Ok(Kernel {
            device: self.device.clone(),
            raw,
        })
    }

    /// The global variable called `name`.
    pub fn global(&self, name: &str) -> Result<Global> {
        let (ptr, size) = self
            .raw
            .global(name)
            .map_err(|e| e.context(format!("program on {:?}", self.device)))?;
        Ok(Global {
            device: self.device.clone(),
            ptr,
            size,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }
}

/// A kernel of a program.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) device: Device,
    pub(crate) raw: Arc<dyn plugin::Kernel>,
}

impl Kernel {
    pub fn name(&self) -> &str {
        self.raw.name()
    }
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// A group size that suits this kernel on its device.
    pub fn preferred_group_size(&self, dyn_group_memory: usize) -> u32 {
        self.raw.preferred_group_size(dyn_group_memory)
    }
    pub(crate) fn raw(&self) -> &dyn plugin::Kernel {
        self.raw.as_ref()
    }
}

/// A global variable of a program.
#[derive(Clone, Debug)]
pub struct Global {
    device: Device,
    ptr: DevicePtr,
    size: u64,
}

impl Global {
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Read the variable as a `T` of exactly its size.
    pub fn read<T: Copy + Default>(&self) -> Result<T> {
        self.check::<T>()?;
        let mut v = T::default();
        // SAFETY: sizes checked; the global lives as long as its program.
        unsafe {
            self.device.inner.copy_from_device(
                (&mut v as *mut T).cast(),
                self.ptr,
                self.size as usize,
            )?
        };
        Ok(v)
    }

    /// Overwrite the variable with `value`.
    pub fn write<T: Copy>(&self, value: T) -> Result<()> {
        self.check::<T>()?;
        // SAFETY: as above.
        unsafe {
            self.device.inner.copy_to_device(
                self.ptr,
                (&value as *const T).cast(),
                self.size as usize,
            )
        }
    }

    fn check<T>(&self) -> Result<()> {
        if std::mem::size_of::<T>() as u64 != self.size {
            return Err(Error::invalid_size(format!(
                "global at {} has {} bytes, the Rust type {} has {}",
                self.ptr,
                self.size,
                std::any::type_name::<T>(),
                std::mem::size_of::<T>()
            )));
        }
        Ok(())
    }
}
