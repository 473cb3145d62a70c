//! Programs, their kernels and their global variables.

use std::sync::Arc;

use bytemuck::{AnyBitPattern, NoUninit};
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
            .map_err(|e| e.context(format!("program on {}", self.device)))?;
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
            .map_err(|e| e.context(format!("program on {}", self.device)))?;
        Ok(Global {
            device: self.device.clone(),
            _program: self.core.clone(),
            ptr,
            size,
        })
    }

    /// The device it is loaded on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Program(on {})", self.device)
    }
}

/// A kernel of a program (it keeps the program loaded).
#[derive(Clone)]
pub struct Kernel {
    pub(crate) device: Device,
    pub(crate) core: Arc<offload_core::Kernel>,
}

impl Kernel {
    /// The kernel's symbol name.
    pub fn name(&self) -> &str {
        self.core.name()
    }
    /// The device its program is loaded on.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// A group size that suits this kernel on its device.
    pub fn preferred_group_size(&self, dyn_group_memory: usize) -> u32 {
        self.core.preferred_group_size(dyn_group_memory)
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel('{}' on {})", self.name(), self.device)
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
    /// Device address of the variable.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Size of the variable in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Read the variable as a `T` of exactly its size.
    pub fn read<T: AnyBitPattern>(&self) -> Result<T> {
        self.check::<T>()?;
        let mut v = T::zeroed();
        // SAFETY: sizes checked; the global lives as long as its program,
        // which we hold; `T: AnyBitPattern` accepts whatever bytes it holds.
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
    pub fn write<T: NoUninit>(&self, value: T) -> Result<()> {
        self.check::<T>()?;
        // SAFETY: as above; `T: NoUninit` has no padding, so all its bytes
        // are initialised.
        unsafe {
            self.device.inner.copy_to_device(
                self.ptr,
                bytemuck::bytes_of(&value).as_ptr(),
                self.size as usize,
            )
        }
    }

    fn check<T>(&self) -> Result<()> {
        if std::mem::size_of::<T>() as u64 != self.size {
            return Err(Error::invalid_size(format!(
                "global at {} on {} has {} bytes, the Rust type {} has {}",
                self.ptr,
                self.device,
                self.size,
                std::any::type_name::<T>(),
                std::mem::size_of::<T>()
            )));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Global {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Global({} bytes at {} on {})",
            self.size, self.ptr, self.device
        )
    }
}
