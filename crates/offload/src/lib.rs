//! Safe Rust API of the offload runtime.
//!
//! Devices come from every built-in plugin (the host CPU first). Device
//! memory is typed and freed on drop; programs load from image bytes (ELF
//! shared objects, LLVM OffloadBinary containers, `1OMP`-headed images);
//! kernels launch on in-order queues with a packed argument buffer.
//!
//! ```
//! use offload::{Device, LaunchConfig};
//!
//! let device = Device::host()?;
//! let mut buf = device.alloc::<u32>(4)?;
//! buf.copy_from_host(&[1, 2, 3, 4])?;
//! assert_eq!(buf.to_vec()?, vec![1, 2, 3, 4]);
//! buf.fill(7)?;
//! assert_eq!(buf.to_vec()?, vec![7; 4]);
//! # Ok::<(), offload::Error>(())
//! ```
//!
//! Running a kernel written against `include/offload/host_kernel.h` (the
//! doctest builds it with clang-22, which the project's setup installs):
//!
//! ```
//! use offload::{Device, KernelArgs, LaunchConfig};
//! # let dir = tempfile::tempdir().unwrap();
//! # let src = dir.path().join("k.c");
//! # let so = dir.path().join("k.so");
//! # std::fs::write(&src, r#"
//! #   #include "offload/host_kernel.h"
//! #   OFFLOAD_HOST_KERNEL(scale) {
//! #     const struct { float *x; float a; unsigned n; } *p = args;
//! #     size_t i = offload_global_id_x(item);
//! #     if (i < p->n) p->x[i] *= p->a;
//! #   }"#).unwrap();
//! # let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../../include");
//! # let ok = std::process::Command::new("clang-22")
//! #     .args(["-O2", "-fPIC", "-shared", "-I", include, "-o"]).arg(&so).arg(&src)
//! #     .status().unwrap().success();
//! # assert!(ok);
//! let image = std::fs::read(&so).unwrap(); // a host-kernel shared object
//! let device = Device::host()?;
//! let program = device.load_program(&image)?;
//! let kernel = program.kernel("scale")?;
//!
//! let mut x = device.alloc::<f32>(100)?;
//! x.copy_from_host(&vec![2.0; 100])?;
//! let args = KernelArgs::new().ptr(&x).value(1.5f32).value(100u32);
//! let queue = device.create_queue()?;
//! // SAFETY: `scale` reads the argument layout built above and writes
//! // only inside `x`.
//! unsafe { queue.launch(&kernel, LaunchConfig::linear(4, 32), &args)? };
//! queue.synchronize()?;
//! assert!(x.to_vec()?.iter().all(|&v| v == 3.0));
//! # Ok::<(), offload::Error>(())
//! ```

mod buffer;
mod device;
mod program;
mod queue;

pub use buffer::DeviceBuffer;
pub use device::{devices, Device};
pub use offload_core::{
    AllocKind, Backend, Config, DeviceInfo, DevicePtr, DeviceType, Error, ErrorCode, LaunchConfig,
    PluginEntry, Result, Runtime,
};
pub use program::{Global, Kernel, Program};
pub use queue::{Event, KernelArgs, Queue};

pub use offload_plugins::{builtin as builtin_plugins, runtime};
