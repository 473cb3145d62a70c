use std::sync::Arc;

use offload_core::{DevicePtr, Error, Result};

use crate::Device;

/// A loaded image on one device.
#[derive(Clone)]
pub struct Program {
    pub(crate) device: Device,
    pub(crate) core: Arc<offload_core::Program>,
}

impl Program {
    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let core = self
            .core
            .kernel(name)
            .map_err(|e| e.context(format!("program on {:?}", self.device)))?;
        Ok(Kernel {
            device: self.device.clone(),
            core,
        })
    }

    /// The global variable called `name`.
    pub fn global(&self, name: &str) -> Result<Global> {
        let (ptr, size) = self
            .core
            .global(name)
            .map_err(|e| e.context(format!("program on {:?}", self.device)))?;
        Ok(Global {
            device: self.device.clone(),
            _program: self.core.clone(),
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
    pub(crate) core: Arc<offload_core::Kernel>,
}

impl Kernel {
    pub fn name(&self) -> &str {
        self.core.name()
    }
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// A group size that suits this kernel on its device.
    pub fn preferred_group_size(&self, dyn_group_memory: usize) -> u32 {
        self.core.preferred_group_size(dyn_group_memory)
    }
}

/// A global variable of a program (it keeps the program loaded).
#[derive(Clone)]
pub struct Global {
    device: Device,
    _program: Arc<offload_core::Program>,
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
