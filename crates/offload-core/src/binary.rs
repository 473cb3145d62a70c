//! Registered binaries: the images and host entries of one linked module.
//!
//! Generic on purpose: an OpenMP `__tgt_bin_desc` maps onto it, and so does
//! any other producer that wants its images known to every plugin (the remote
//! plugin ships them to its servers in the register hook).

use std::sync::atomic::{AtomicU64, Ordering};

use offload_image::DeviceImage;

/// Identifies a registered binary for the lifetime of the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BinaryId(pub u64);

impl BinaryId {
    pub(crate) fn next() -> BinaryId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        BinaryId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A host-side entry: a kernel, a global variable, or another record the
/// producer wants resolved in the device images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadEntry {
    /// Symbol name looked up in the device image.
    pub name: String,
    /// Host address (kernel region id, host variable, host function).
    pub host_addr: u64,
    /// 0 for kernels, bytes for variables.
    pub size: u64,
    /// Producer-specific flags (OpenMP: link, indirect, requires, ...).
    pub flags: u32,
    /// Producer-specific data (OpenMP: the requires mask).
    pub data: u64,
    /// Producer kind (1 OpenMP, 2 CUDA, 4 HIP, 8 SYCL).
    pub producer: u16,
}

/// One registered binary.
#[derive(Debug)]
pub struct BinaryDescriptor<'a> {
    pub id: BinaryId,
    /// Every device image, already unwrapped from its containers.
    pub images: Vec<DeviceImage<'a>>,
    pub entries: Vec<OffloadEntry>,
}
