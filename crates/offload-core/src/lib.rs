//! Target-independent core of the offload runtime.
//!
//! Design rules:
//!
//! * **The core is the only way to a plugin.** Faces hold core objects
//!   ([`Device`], [`Queue`], [`Event`], [`Program`], [`Kernel`]), never
//!   plugin trait objects. Every allocation, copy, fill, launch, queue and
//!   event goes face -> core -> plugin, so statistics ([`stats`]), tracing
//!   and range checks are written once.
//! * **Plugins implement only what differs between targets** ([`plugin`]):
//!   one trait per object kind; data movement is declared once, on the
//!   plugin queue. Everything shareable lives here: image unwrapping and
//!   device matching ([`image`]), the caching allocator with a thread-local
//!   front and the one allocation index ([`memory`]), the generic executor
//!   for plugins without real queues ([`executor`]), the copy decision
//!   ([`Runtime::copy`]), binary registration with nested hooks
//!   ([`Runtime::register_binary`]), configuration ([`Config`]), tracing.
//! * **Synchronous means "a queue, then sync".** [`Device`]'s synchronous
//!   calls run on a per-thread plugin queue of that device.
//! * **Nothing here is OpenMP- or liboffload-specific.** Map types, reference
//!   counts and `ol_*` handles belong to the faces.
//! * **Errors carry a code and say what was wrong.** [`ErrorCode`] maps
//!   one-to-one onto liboffload's `ol_errc_t`; messages name the device,
//!   image or address at fault. Bad input is an error, never a panic.
//! * **Every public operation opens a `tracing` span**;
//!   `LIBOMPTARGET_DEBUG=1` prints them, `LIBOMPTARGET_PROFILE=<file>`
//!   writes them as a Chrome trace-event profile.

pub mod binary;
pub mod client_host_memory;
pub mod config;
pub mod device;
pub mod error;
pub mod executor;
pub mod facts;
pub mod files;
pub mod hash;
mod host_locks;
pub mod image;
pub mod index;
pub mod jit;
pub mod launch;
pub mod locate;
pub mod memory;
pub mod openmp_env;
pub mod plugin;
pub mod profile;
pub mod program;
pub mod queue;
pub mod range_map;
pub mod record;
pub mod runtime;
pub mod stats;
pub mod trace;
pub mod transfer;
mod work_item_loops;

pub use binary::{BinaryDescriptor, BinaryId, OffloadEntry};
pub use config::Config;
pub use device::Device;
pub use error::{Error, ErrorCode, Result};
pub use memory::{Allocation, Origin, Owner};
pub use offload_image as images;
pub use plugin::{AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType, KernelArgs, LaunchConfig};
pub use program::{Kernel, Program};
pub use queue::{Event, Queue};
pub use runtime::{HookFailure, PluginEntry, Runtime};
pub use transfer::Location;
