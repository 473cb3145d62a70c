//! One OpenMP device: its mapping table, its kernel map, what is loaded
//! on it, and the allocation and copy wrappers the mapping code uses.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use offload_core::plugin::DevicePtr;
use offload_core::BinaryId;

use crate::addr::HostAddr;
use crate::kernels::{KernelMap, KernelRef};
use crate::shards::{ShardedTable, View};

pub struct DevState {
    pub id: usize,
    pub dev: Arc<offload_core::Device>,
    /// Sharded by host address, each shard on its own cache lines: it is
    /// written by every mapping construct, while the fields around it are
    /// read by every launch.
    table: ShardedTable,
    pub(crate) kernels: KernelMap,
    pub(crate) loaded_gen: AtomicU64,
    pub(crate) load_lock: Mutex<LoadState>,
}

pub(crate) type Loaded = (
    Option<Arc<offload_core::Program>>,
    Vec<Arc<offload_core::Kernel>>,
);

#[derive(Default)]
pub(crate) struct LoadState {
    /// Binary ids already loaded with their programs and kernels.
    pub(crate) loaded: Vec<(BinaryId, Loaded)>,
}

impl DevState {
    pub(crate) fn new(id: usize, dev: Arc<offload_core::Device>) -> DevState {
        DevState {
            id,
            dev,
            table: ShardedTable::default(),
            kernels: KernelMap::default(),
            loaded_gen: AtomicU64::new(0),
            load_lock: Mutex::new(LoadState::default()),
        }
    }

    /// The mapping table as far as `[hp, hp + size)` needs it, locked
    /// (a zero size: the address `hp`).
    #[inline]
    pub fn table(&self, hp: HostAddr, size: u64) -> View<'_> {
        self.table.view(hp, size)
    }
    /// The whole mapping table, locked.
    pub fn table_all(&self) -> View<'_> {
        self.table.view_all()
    }

    #[inline]
    pub fn kernel(&self, region: u64) -> Option<KernelRef> {
        self.kernels.get(region)
    }

    pub fn alloc(&self, size: u64) -> Option<DevicePtr> {
        match self
            .dev
            .alloc(size as usize, offload_core::AllocKind::Device)
        {
            Ok(p) => Some(p),
            Err(e) => {
                crate::msg::plugin_error("Failure to allocate device memory", &e);
                None
            }
        }
    }

    /// Device memory for runtime-owned data (mapped blocks, private
    /// copies): the core's owned blocks (caching allocator, per-thread
    /// front, live ranges of the core's index). Free with
    /// [`Self::free_block`] and the same size.
    #[inline]
    pub fn alloc_block(&self, size: u64) -> Option<DevicePtr> {
        match self.dev.alloc_owned_block(size as usize) {
            Ok(p) => Some(p),
            Err(e) => {
                report("Failure to allocate device memory", e);
                None
            }
        }
    }

    /// Release a block from [`Self::alloc_block`] of `size` bytes (each is
    /// freed once: the mapping table entry or the launch that made it owns it).
    #[inline]
    pub fn free_block(&self, p: DevicePtr, size: u64) -> bool {
        reported(
            self.dev.free_owned_block(p, size as usize),
            "Failure to deallocate device memory",
        )
    }

    pub fn free(&self, p: DevicePtr) -> bool {
        reported(self.dev.free(p), "Failure to deallocate device memory")
    }

    /// Copy `size` bytes from host address `hst` into the owned block
    /// range at `tgt`.
    ///
    /// # Safety
    /// `[hst, hst + size)` is readable host memory, and `[tgt, tgt + size)`
    /// lies inside device memory of a live mapping-table entry (a block
    /// from [`Self::alloc_block`] or a global of a loaded image).
    #[inline]
    pub unsafe fn h2d(&self, tgt: DevicePtr, hst: HostAddr, size: u64) -> bool {
        size == 0
            || reported(
                // SAFETY: the caller guarantees the host range is readable
                // and the device range is inside live device memory this
                // face allocated or loaded (range checked in debug builds).
                unsafe {
                    self.dev
                        .copy_to_owned_block(tgt, hst.as_ptr::<u8>(), size as usize)
                },
                "Failure to copy data from host to device",
            )
    }
    /// Copy `size` bytes from the owned block range at `tgt` to host
    /// address `hst`.
    ///
    /// # Safety
    /// `[hst, hst + size)` is writable host memory, and `[tgt, tgt + size)`
    /// lies inside device memory of a live mapping-table entry (a block
    /// from [`Self::alloc_block`] or a global of a loaded image).
    #[inline]
    pub unsafe fn d2h(&self, hst: HostAddr, tgt: DevicePtr, size: u64) -> bool {
        size == 0
            || reported(
                // SAFETY: the caller guarantees the host range is writable
                // and the device range is inside live device memory this
                // face allocated or loaded.
                unsafe {
                    self.dev
                        .copy_from_owned_block(hst.as_mut_ptr::<u8>(), tgt, size as usize)
                },
                "Failure to copy data from device to host",
            )
    }
}

/// True on success; prints the plugin's reason on failure.
#[inline]
fn reported(r: offload_core::Result<()>, what: &str) -> bool {
    match r {
        Ok(()) => true,
        Err(e) => report(what, e),
    }
}

#[cold]
fn report(what: &str, e: offload_core::Error) -> bool {
    crate::msg::plugin_error(what, &e);
    false
}
