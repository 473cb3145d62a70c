//! Safe Rust API of the offload runtime.
//!
//! Devices come from every built-in plugin (the host CPU first). Device
//! memory is typed and freed on drop; programs load from image bytes (ELF
//! shared objects, LLVM OffloadBinary containers, `1OMP`-headed images,
//! LLVM bitcode); kernels launch on in-order asynchronous queues with a
//! packed argument buffer.
//!
//! ```
//! use offload_runtime::Device;
//!
//! let device = Device::host()?;
//! let mut buf = device.alloc_zeros::<u32>(4)?;
//! assert_eq!(buf.to_vec()?, vec![0; 4]);
//! buf.copy_from_host(&[1, 2, 3, 4])?;
//! assert_eq!(buf.to_vec()?, vec![1, 2, 3, 4]);
//! buf.slice_mut(2..).fill(7)?;
//! assert_eq!(buf.to_vec()?, vec![1, 2, 7, 7]);
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! # Soundness
//!
//! * Element types of device buffers are plain old data ([`Pod`], from
//!   [bytemuck]): every bit pattern a kernel leaves behind is a valid value,
//!   so reading a buffer back is safe. Kernel argument values are
//!   [`NoUninit`] (no padding bytes to leak). `bool`, references, pointers
//!   and structs with padding are refused at compile time.
//! * Buffers start initialised ([`Device::alloc_zeros`],
//!   [`Device::buffer_from`], [`Device::alloc_filled`]); uninitialised
//!   memory takes the `unsafe` [`Device::alloc_uninit`]. A queue's own
//!   temporaries come from [`Queue::alloc_zeros`]: allocated, zeroed and
//!   freed in the queue's order (stream-ordered allocation where the
//!   plugin has it).
//! * Asynchronous copies borrow their host and device memory inside a
//!   [`Queue::scope`], which waits for the queue before it returns: the
//!   memory cannot be touched by the host, moved or freed while the queue
//!   may still use it, and leaking a [`Pending`] changes nothing.
//! * Launching a kernel is `unsafe` (it runs arbitrary device code), but
//!   its [`KernelArgs`] borrow the buffers it reads ([`KernelArgs::ptr`])
//!   and writes ([`KernelArgs::ptr_mut`]) until the [`Launch`] finishes.
//!
//! # Asynchronous work and futures
//!
//! [`Event`], [`Launch`] and [`Pending`] implement
//! [`Future`](std::future::Future) without needing any async runtime: the
//! queue itself wakes the task when the work is done (a host function
//! enqueued behind it). Blocking `wait()` works everywhere too.
//!
//! Running a kernel written against `include/offload/host_kernel.h` (the
//! doctest builds it with clang-22, which the project's setup installs):
//!
//! ```
//! use offload_runtime::{Device, KernelArgs, LaunchConfig};
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
//! #     .status().expect("clang-22 (scripts/setup.sh installs it)").success();
//! # assert!(ok);
//! let image = std::fs::read(&so).unwrap(); // a host-kernel shared object
//! let device = Device::host()?;
//! let program = device.load_program(&image)?;
//! let kernel = program.kernel("scale")?;
//!
//! let mut x = device.buffer_from(&vec![2.0f32; 100])?;
//! let args = KernelArgs::new().ptr_mut(&mut x).value(1.5f32).value(100u32);
//! let queue = device.create_queue()?;
//! // SAFETY: `scale` reads the argument layout built above and writes
//! // only inside `x`.
//! let launch = unsafe { queue.launch(&kernel, LaunchConfig::linear(4, 32), &args)? };
//! // `x` is borrowed by the pending launch: reading it here does not compile.
//! launch.wait()?;
//! assert!(x.to_vec()?.iter().all(|&v| v == 3.0));
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! # Misuse that does not compile
//!
//! Uninitialised memory takes `unsafe`:
//!
//! ```compile_fail,E0133
//! # let device = offload_runtime::Device::host()?;
//! let buf = device.alloc_uninit::<u32>(4)?; // error: call to unsafe function
//! let _ = buf.to_vec()?;
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! `bool` is not plain old data (byte 0xAB is not a `bool`):
//!
//! ```compile_fail,E0277
//! # let device = offload_runtime::Device::host()?;
//! let flags = device.alloc_zeros::<bool>(4)?; // error: `bool: Pod` is not satisfied
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! A struct with padding bytes cannot be plain old data:
//!
//! ```compile_fail,E0080
//! use bytemuck::{Pod, Zeroable};
//! #[derive(Clone, Copy, Pod, Zeroable)] // error: padding
//! #[repr(C)]
//! struct Particle { kind: u8, mass: f32 }
//! # let device = offload_runtime::Device::host()?;
//! let buf = device.alloc_zeros::<Particle>(4)?;
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! nor can one holding a pointer:
//!
//! ```compile_fail,E0277
//! #[derive(Clone, Copy)]
//! #[repr(C)]
//! struct Node { next: *const Node, value: u64 }
//! # let device = offload_runtime::Device::host()?;
//! let buf = device.alloc_zeros::<Node>(4)?; // error: `Node: Pod` is not satisfied
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! Host memory an asynchronous copy writes cannot be read before the copy
//! is done (waiting gives it back):
//!
//! ```compile_fail,E0502
//! # let device = offload_runtime::Device::host()?;
//! # let queue = device.create_queue()?;
//! let buf = device.buffer_from(&[1u32, 2, 3])?;
//! let mut out = vec![0u32; 3];
//! queue.scope(|s| {
//!     let copy = s.copy_to_host(&mut out, &buf)?;
//!     println!("{}", out[0]); // error: `out` is mutably borrowed by the copy
//!     copy.wait()?;
//!     Ok(())
//! })?;
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! nor can host memory an asynchronous copy reads be changed or dropped:
//!
//! ```compile_fail,E0505
//! # let device = offload_runtime::Device::host()?;
//! # let queue = device.create_queue()?;
//! let mut buf = device.alloc_zeros::<u32>(3)?;
//! let data = vec![1u32, 2, 3];
//! queue.scope(|s| {
//!     s.copy_to_device(&mut buf, &data)?;
//!     drop(data); // error: `data` is borrowed until the scope ends
//!     Ok(())
//! })?;
//! # Ok::<(), offload_runtime::Error>(())
//! ```
//!
//! A buffer a pending launch writes cannot be read by the host:
//!
//! ```compile_fail,E0502
//! # use offload_runtime::{Kernel, KernelArgs, LaunchConfig, Queue};
//! # fn run(queue: &Queue, kernel: &Kernel) -> offload_runtime::Result<()> {
//! let mut y = queue.device().alloc_zeros::<f32>(64)?;
//! let args = KernelArgs::new().ptr_mut(&mut y);
//! let launch = unsafe { queue.launch(kernel, LaunchConfig::linear(1, 64), &args)? };
//! let early = y.to_vec()?; // error: `y` is mutably borrowed by the launch
//! launch.wait()?;
//! # Ok(()) }
//! ```
//!
//! # Choosing plugins and devices in code
//!
//! [`devices`] and [`Device::host`] use the process-wide runtime, which the
//! environment configures (`OFFLOAD_PLUGINS`, `OFFLOAD_HOST_DEVICES`, ...:
//! the settings the drop-in libraries read). [`Instance::builder`] starts a
//! runtime of its own with the plugins and device counts chosen in code.
//!
//! # Cargo features
//!
//! The default build has the host CPU and simulated (`sim`) devices only,
//! and no networking or GPU dependencies. Opt in to more:
//!
//! * `cuda`: NVIDIA GPUs through the CUDA driver (loaded at run time:
//!   nothing CUDA is needed to build).
//! * `remote`: devices of `offload serve` servers through the gRPC client
//!   plugin (`OFFLOAD_REMOTE`; tonic, tokio, rustls).
//! * `mpi`: devices of `offload serve --mpi` ranks (libmpi loaded at run
//!   time, only under an MPI launcher).
//! * `derive`: `#[derive(Pod, Zeroable)]` through bytemuck's derive macros
//!   (re-exported as [`Pod`] and [`Zeroable`]); the expansion names
//!   `::bytemuck`, so depend on bytemuck yourself or add
//!   `#[bytemuck(crate = "offload_runtime::bytemuck")]`.

#![deny(missing_docs)]

mod buffer;
mod completion;
mod device;
mod instance;
mod program;
mod queue;
mod scope;

pub use buffer::{BufferSlice, BufferSliceMut, DeviceBuffer, DeviceDst, DeviceSrc};
pub use device::{devices, Device};
pub use instance::{Instance, InstanceBuilder};
pub use offload_core::{
    AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType, Error, ErrorCode, LaunchConfig, Result,
};
pub use program::{Global, Kernel, Program};
pub use queue::{Event, KernelArgs, Launch, Queue};
pub use scope::{Pending, Scope, ScopedBuffer};

/// The plain-old-data crate the element and argument bounds come from.
pub use bytemuck;
pub use bytemuck::{AnyBitPattern, NoUninit, Pod, Zeroable};

/// The layer below this API, for the project's own tools (the `offload`
/// command, the Python package, benchmarks): **not a stable API**. Its
/// contents change with the core without notice; nothing here is covered
/// by this crate's version number.
#[doc(hidden)]
pub mod internals {
    use std::sync::Arc;

    pub use offload_core::{Config, PluginEntry, Runtime};
    /// Every plugin built into this runtime, in device-numbering order.
    pub use offload_plugins::builtin as builtin_plugins;
    /// The process-wide runtime, initialised on first use from the environment.
    pub use offload_plugins::runtime;

    /// The core object under an API object.
    pub trait CoreAccess {
        /// The core type.
        type Core;
        /// The core object, for code that needs the lower layer.
        fn core(&self) -> &Arc<Self::Core>;
    }

    impl CoreAccess for crate::Device {
        type Core = offload_core::Device;
        fn core(&self) -> &Arc<offload_core::Device> {
            &self.inner
        }
    }

    impl CoreAccess for crate::Queue {
        type Core = offload_core::Queue;
        fn core(&self) -> &Arc<offload_core::Queue> {
            self.core_queue()
        }
    }

    impl CoreAccess for crate::Kernel {
        type Core = offload_core::Kernel;
        fn core(&self) -> &Arc<offload_core::Kernel> {
            &self.core
        }
    }
}

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
