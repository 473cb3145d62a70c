//! Target-independent core of the offload runtime.
//!
//! Design rules:
//!
//! * **Plugins implement only what differs between targets** ([`plugin`]):
//!   one trait per object kind. Everything shareable lives here: image
//!   unwrapping and device matching ([`image`]), the caching allocator and
//!   allocation table ([`memory`]), binary registration with nested hooks
//!   ([`Runtime::register_binary`]), configuration ([`Config`]), tracing.
//! * **Nothing here is OpenMP- or liboffload-specific.** Map types, reference
//!   counts and `ol_*` handles belong to the faces.
//! * **Errors carry a code and say what was wrong.** [`ErrorCode`] maps
//!   one-to-one onto liboffload's `ol_errc_t`; messages name the device,
//!   image or address at fault. Bad input is an error, never a panic.
//! * **Every public operation opens a `tracing` span**;
//!   `LIBOMPTARGET_DEBUG=1` prints them, `LIBOMPTARGET_PROFILE=<file>`
//!   writes them as a Chrome trace-event profile.

pub mod binary;
pub mod config;
pub mod device;
pub mod error;
pub mod image;
pub mod memory;
pub mod plugin;
pub mod profile;
pub mod runtime;
pub mod trace;

pub use binary::{BinaryDescriptor, BinaryId, OffloadEntry};
pub use config::Config;
pub use device::Device;
pub use error::{Error, ErrorCode, Result};
pub use offload_image as images;
pub use plugin::{AllocKind, Backend, DeviceInfo, DevicePtr, DeviceType, KernelArgs, LaunchConfig};
pub use runtime::{HookFailure, PluginEntry, Runtime};
