//! The plugin traits: everything that differs between targets, and nothing else.
//!
//! One trait per object kind ([`Plugin`], [`Device`], [`Program`], [`Kernel`],
//! [`Queue`], [`Event`]). The core wraps them with the shared parts (caching
//! allocator, allocation table, image unwrapping, tracing), so a backend stays
//! small. Pointers into device memory are plain `u64` addresses
//! ([`DevicePtr`]): on the host plugin they are process addresses, on the
//! remote plugin addresses in the server process.
//!
//! Plugins downcast the core-visible objects they receive back to their own
//! types with [`AsAny`]; an object of a foreign plugin is an `InvalidArgument`.
//!
//! # What the core validates before it calls a plugin
//!
//! As in wgpu-hal, validation is the core's job and the plugins trust it. A
//! plugin may dereference device pointers it is given (the host plugin reads
//! the word before an allocation in [`Device::free`], and copies and fills
//! through plain pointers), so the core calls these methods only with
//! arguments it has checked against the device's allocation index
//! (`crate::index`):
//!
//! * [`Device::free`]: `ptr` is the base of a live allocation this plugin's
//!   [`Device::alloc`] (or [`Device::alloc_at`]) returned, with the kind it
//!   was allocated with; it has been taken out of the index first, so each
//!   allocation is freed once, and only after the queued work that may still
//!   use it has passed (deferred frees).
//! * [`Queue::copy_within`], [`Queue::fill`], [`Queue::copy_to_device`],
//!   [`Queue::copy_from_device`]: every device range `[ptr, ptr + size)`
//!   lies inside one live range of this queue's device (allocation, global
//!   or registration): checked against the index (`Device::check_range`),
//!   or, for a face's own blocks, promised by the caller of the `unsafe`
//!   `Device::copy_{to,from}_owned_block`; for `fill`, `size` is a
//!   multiple of `pattern.len() > 0`. Host memory a device does
//!   not reach ([`Device::host_allocations_are_local`]) never gets here: the
//!   core moves it itself. Host pointers of the two `unsafe` copies are the
//!   caller's promise, as their `# Safety` sections say.
//! * [`Queue::copy_to_peer`]: both ranges checked as above, the devices of
//!   the same plugin.
//! * [`Queue::launch`]: the kernel belongs to a program loaded on this
//!   queue's device, kept loaded until the launch has run; the
//!   configuration has been resolved (`Kernel::resolve`). What the kernel
//!   arguments point to is the face's business: the core does not look.
//! * Handles (devices, queues, events, kernels) reach a plugin only as
//!   objects the plugin created; a foreign one is refused by downcasting.
//!
//! The methods whose implementations trust a pointer they are given
//! ([`Device::free`], [`Queue::copy_within`], [`Queue::copy_to_peer`],
//! [`Queue::fill`] and the host copies) are `unsafe fn`s whose `# Safety` sections are the above:
//! the core's calls discharge them (each with a `SAFETY` comment naming the
//! check), and code that holds a plugin object itself
//! ([`crate::Runtime::plugins`], or a plugin crate used directly, as plugin
//! tests do) must too. The others take only handles the plugin made (checked
//! by downcasting) or values it validates itself.

use std::any::Any;
use std::sync::Arc;

use offload_image::DeviceImage;

use crate::binary::BinaryDescriptor;
use crate::error::{Error, ErrorCode, Result};

/// An address in a device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    pub const NULL: DevicePtr = DevicePtr(0);
    pub fn is_null(self) -> bool {
        self.0 == 0
    }
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }
    /// The distance from `base` to this address, wrapping (the inverse of
    /// [`DevicePtr::offset`]).
    pub fn offset_from(self, base: DevicePtr) -> u64 {
        self.0.wrapping_sub(base.0)
    }
    pub fn as_ptr<T>(self) -> *mut T {
        self.0 as usize as *mut T
    }
}

impl std::fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

/// Which kind of memory an allocation is (liboffload's `ol_alloc_type_t` order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AllocKind {
    /// Page-locked host memory the device can reach.
    Host = 0,
    /// Device-local memory.
    Device = 1,
    /// Shared (managed / unified) memory, reachable from both sides.
    Shared = 2,
}

/// What kind of processor a device is (liboffload's `ol_device_type_t` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DeviceType {
    Gpu = 2,
    Cpu = 3,
    Host = 4,
}

/// The backend family (liboffload's `ol_platform_backend_t`, plus ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Host,
    Cuda,
    Amdgpu,
    Remote,
    Other,
}

impl DeviceType {
    /// Lower-case name (`gpu`, `cpu`, `host`; LLVM prints it in capitals).
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Gpu => "gpu",
            DeviceType::Cpu => "cpu",
            DeviceType::Host => "host",
        }
    }
}

impl Backend {
    /// Lower-case name of the family (`host`, `cuda`, `amdgpu`, `remote`,
    /// `other`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Cuda => "cuda",
            Backend::Amdgpu => "amdgpu",
            Backend::Remote => "remote",
            Backend::Other => "other",
        }
    }

    /// LLVM's name of [`Backend::ol_value`] (`HOST`, `CUDA`, `AMDGPU`,
    /// `UNKNOWN`).
    pub fn ol_name(self) -> &'static str {
        match self.ol_value() {
            1 => "CUDA",
            2 => "AMDGPU",
            4 => "HOST",
            _ => "UNKNOWN",
        }
    }

    /// `ol_platform_backend_t` value; remote devices report the backend they
    /// proxy elsewhere, so `Remote` alone is UNKNOWN.
    pub fn ol_value(self) -> u32 {
        match self {
            Backend::Cuda => 1,
            Backend::Amdgpu => 2,
            Backend::Host => 4,
            Backend::Remote | Backend::Other => 0,
        }
    }
}

/// Static properties of a device, filled in once by the plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    pub name: String,
    pub vendor: String,
    pub product_name: String,
    pub device_type: DeviceType,
    pub backend: Backend,
    /// Target triple images must have, e.g. `x86_64-unknown-linux-gnu`.
    pub triple: String,
    /// Architecture (`sm_80`, `gfx90a`); empty when any arch of the triple runs.
    pub arch: String,
    /// An AMD GPU's ISAs as target IDs, with the features it runs them
    /// with (`gfx90a:sramecc+:xnack-`, then its family's generic ISA where
    /// the HSA runtime lists one): what decides which code objects run on
    /// it, here and behind a proxy. Empty for other devices, and for a
    /// server's AMD GPU that did not say (the processor name decides then).
    pub target_ids: Vec<offload_image::amdgpu::TargetId>,
    /// Stable unique id, e.g. `x86_64-0` (LLVM's host plugin format).
    pub uid: String,
    pub driver_version: String,
    pub global_memory_bytes: u64,
    /// Per-group (shared/local) memory.
    pub group_memory_bytes: u64,
    pub compute_units: u32,
    pub max_group_size: u32,
    pub max_group_size_per_dim: [u32; 3],
    pub max_num_groups: [u32; 3],
    pub clock_mhz: u32,
    pub address_bits: u32,
}

/// Grid geometry and extras of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Groups (teams, blocks) per dimension. From the OpenMP face, 0 in x
    /// means `num_teams` was left unset: the plugin chooses.
    pub num_groups: [u32; 3],
    /// Work items (threads) per group. From the OpenMP face, 0 in x means
    /// `thread_limit` was left unset: the plugin chooses.
    pub group_size: [u32; 3],
    /// Bytes of dynamic group ("shared") memory per group.
    pub dyn_group_memory: u32,
    /// Loop trip count hint (OpenMP), 0 when unknown.
    pub tripcount: u64,
}

impl Default for LaunchConfig {
    fn default() -> Self {
        LaunchConfig {
            num_groups: [1, 1, 1],
            group_size: [1, 1, 1],
            dyn_group_memory: 0,
            tripcount: 0,
        }
    }
}

impl LaunchConfig {
    /// `num_groups` groups of `group_size` work items, one dimension.
    pub fn linear(num_groups: u32, group_size: u32) -> Self {
        LaunchConfig {
            num_groups: [num_groups, 1, 1],
            group_size: [group_size, 1, 1],
            ..Default::default()
        }
    }
    /// Group size of [`LaunchConfig::for_num_elems`].
    pub const ELEMS_GROUP_SIZE: u32 = 256;

    /// One work item per element for `n` elements: groups of
    /// [`Self::ELEMS_GROUP_SIZE`] items, as many as cover `n` (at least
    /// one). The last group may run past `n`: kernels check their index.
    ///
    /// ```
    /// use offload_core::LaunchConfig;
    /// let c = LaunchConfig::for_num_elems(1000);
    /// assert_eq!((c.num_groups[0], c.group_size[0]), (4, 256));
    /// assert_eq!(LaunchConfig::for_num_elems(0).num_groups[0], 1);
    /// ```
    pub fn for_num_elems(n: u32) -> Self {
        Self::linear(
            n.div_ceil(Self::ELEMS_GROUP_SIZE).max(1),
            Self::ELEMS_GROUP_SIZE,
        )
    }
    /// Groups in the whole grid.
    pub fn total_groups(&self) -> u64 {
        self.num_groups.iter().map(|&n| n as u64).product()
    }
    /// Work items in one group.
    pub fn total_items_per_group(&self) -> u64 {
        self.group_size.iter().map(|&n| n as u64).product()
    }
}

/// Kernel arguments, in one of the two conventions the faces use.
#[derive(Debug, Clone, Copy)]
pub enum KernelArgs<'a> {
    /// One pointer-sized word per parameter (OpenMP: `dyn_ptr` first, then
    /// one word per TARGET_PARAM map entry). The plugin must not keep the slice.
    Words(&'a [u64]),
    /// One packed argument buffer (CUDA-style; liboffload and the Rust API).
    /// The plugin copies it before returning if it launches asynchronously.
    Packed(&'a [u8]),
}

/// Lets plugins downcast core-visible objects to their own types.
pub trait AsAny: Any {
    fn as_any(&self) -> &dyn Any;
}
impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A plugin: one backend family (host, cuda, amdgpu, remote, ...).
pub trait Plugin: Send + Sync + AsAny {
    /// Short lower-case name used by `OFFLOAD_PLUGINS` (`host`, `remote`, ...).
    fn name(&self) -> &'static str;
    /// Initialise and enumerate devices. A plugin whose vendor library is
    /// missing returns an empty list, not an error.
    fn init(&self) -> Result<Vec<Arc<dyn Device>>>;
    /// Hook run after the core registered a binary descriptor (e.g. the
    /// remote plugin ships its images here). Failures are reported, not fatal.
    fn register_binary(&self, _binary: &BinaryDescriptor) -> Result<()> {
        Ok(())
    }
    /// Hook run before the core tears a binary down (reverse order).
    fn unregister_binary(&self, _binary: &BinaryDescriptor) -> Result<()> {
        Ok(())
    }
    /// Release everything; called once when the runtime shuts down.
    fn deinit(&self) -> Result<()> {
        Ok(())
    }
}

/// One device of a plugin.
///
/// Data movement and launches live on [`Queue`] only: the core turns a
/// synchronous call into "a queue of the calling thread, then sync".
pub trait Device: Send + Sync + AsAny {
    fn info(&self) -> &DeviceInfo;

    /// Whether this device can run `image`. The default compares the triple
    /// and, when both sides name one, the architecture; for NVIDIA GPUs
    /// compute capabilities, for AMD GPUs that list their ISAs
    /// ([`DeviceInfo::target_ids`]) target IDs.
    fn can_run(&self, image: &DeviceImage<'_>) -> bool {
        crate::image::triple_and_arch_match(self.info(), image)
    }

    /// Why `image` does not run here, when the triple and architecture do
    /// not say it all (an AMD GPU's `xnack` setting, say): the core adds
    /// it to its "cannot run" errors. `None` when there is nothing to add.
    fn incompatibility(&self, image: &DeviceImage<'_>) -> Option<String> {
        crate::image::incompatibility(self.info(), image)
    }

    /// How many target features of `image` (one it runs) this device
    /// checked and holds, such as an AMD GPU's `xnack-` and `sramecc+`:
    /// of images for its architecture, the core loads the one pinning
    /// most. The default counts them for AMD GPUs that list their ISAs,
    /// and is 0 elsewhere.
    fn pinned_features(&self, image: &DeviceImage<'_>) -> u8 {
        crate::image::pinned_features(self.info(), image)
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<DevicePtr>;
    /// Release `ptr`.
    ///
    /// # Safety
    /// `ptr` is the base of a live allocation this device's
    /// [`Device::alloc`] (or [`Device::alloc_at`]) returned, with the kind
    /// it was allocated with, freed once, after the queued work that may
    /// use it has passed (what the core checks first: see the module
    /// documentation).
    unsafe fn free(&self, ptr: DevicePtr, kind: AllocKind) -> Result<()>;

    /// Whether host memory can be registered for this device
    /// (`olMemRegister`): devices that reach host memory directly, and those
    /// that override [`Device::register_host`].
    fn registers_host_memory(&self) -> bool {
        self.shares_host_memory()
    }

    /// Prepare host memory `[ptr, ptr + size)` for fast copies with this
    /// device (`olMemRegister`; CUDA page-locks it). Devices that reach host
    /// memory directly need nothing: the default does nothing.
    ///
    /// # Safety
    /// The range is host memory of this process that stays mapped until
    /// [`Device::unregister_host`].
    unsafe fn register_host(&self, ptr: *mut u8, size: usize) -> Result<()> {
        let _ = (ptr, size);
        Ok(())
    }

    /// Undo [`Device::register_host`] for the range starting at `ptr`.
    fn unregister_host(&self, ptr: *mut u8) -> Result<()> {
        let _ = ptr;
        Ok(())
    }

    /// Device memory at exactly `ptr` (replay keeping recorded addresses),
    /// freed with [`Device::free`]; unsupported by default.
    fn alloc_at(&self, ptr: DevicePtr, size: usize) -> Result<()> {
        let _ = (ptr, size);
        Err(crate::Error::new(
            crate::ErrorCode::Unsupported,
            format!(
                "{} cannot place memory at a chosen address",
                self.info().uid
            ),
        ))
    }

    /// Load an (unwrapped) image into a program.
    fn load_program(&self, image: &DeviceImage<'_>) -> Result<Arc<dyn Program>>;

    /// A new in-order queue.
    fn create_queue(&self) -> Result<Arc<dyn Queue>>;

    /// Whether device pointers are ordinary host pointers (host plugin).
    fn shares_host_memory(&self) -> bool {
        false
    }

    /// Whether this device's `AllocKind::Host` memory is ordinary memory of
    /// this process that the device itself cannot reach (remote and MPI
    /// devices, whose kernels run in another process): the core then moves
    /// and fills it as host memory, whichever device a copy names for it,
    /// and never hands it to the plugin's copies or fills.
    fn host_allocations_are_local(&self) -> bool {
        false
    }

    /// What LLVM bitcode images are compiled to for this device (see
    /// [`crate::jit`]); None: bitcode does not run here.
    fn jit_target(&self) -> Option<crate::jit::JitTarget> {
        None
    }
}

/// A loaded image.
pub trait Program: Send + Sync + AsAny {
    fn kernel(&self, name: &str) -> Result<Arc<dyn Kernel>>;
    /// Device address and size of a global variable.
    fn global(&self, name: &str) -> Result<(DevicePtr, u64)>;
}

/// A kernel of a program.
pub trait Kernel: Send + Sync + AsAny {
    fn name(&self) -> &str;
    /// A group size that fills the device well for this kernel.
    fn preferred_group_size(&self, _dyn_group_memory: usize) -> u32 {
        1
    }
    /// For an OpenMP target region whose launch sizes the runtime picks
    /// (a GPU's): its execution mode and the device's grid values. The
    /// core then resolves every launch before the plugin sees it
    /// ([`crate::launch`]). `None`: launches keep the sizes given.
    fn openmp(&self) -> Option<crate::launch::OpenMpKernel> {
        None
    }
    /// How many groups of `group_size` work-items, each with
    /// `dyn_group_memory` bytes of dynamic group memory, the whole device
    /// runs at once (the vendor's occupancy calculator); `None`: unknown.
    /// A long OpenMP loop gets that many teams ([`crate::launch`]).
    fn resident_groups(&self, _group_size: u32, _dyn_group_memory: u32) -> Option<u32> {
        None
    }
    /// What the plugin would refuse about a launch of this kernel with
    /// `args` and `config` (already resolved), checked when the launch is
    /// enqueued so that the caller gets the error at once rather than from
    /// the sync.
    fn check_launch(&self, _args: &KernelArgs<'_>, _config: &LaunchConfig) -> Result<()> {
        Ok(())
    }
}

/// An in-order queue: the one operation set every data movement and launch
/// goes through. Operations may run asynchronously; their arguments (host
/// memory included) must stay valid until the queue is synchronised.
///
/// A plugin whose queues finish every operation before the call returns
/// says so with [`Queue::completes_inline`]; the core then puts its generic
/// executor in front where callers need asynchronous queues (liboffload).
pub trait Queue: Send + Sync + AsAny {
    /// # Safety
    /// `src` valid for `size` bytes until the queue reaches this operation.
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()>;
    /// # Safety
    /// `dst` valid for `size` bytes until the queue reaches this operation.
    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()>;
    /// A synchronous copy to the device whose wait the plugin may leave to
    /// this queue's next [`Queue::synchronize`]: `src` is read before the
    /// call returns, and the copy lands before any work enqueued later on
    /// any queue of the device, and before any later free, read or copy
    /// of the plugin, runs. Its errors surface here or at this queue's
    /// next synchronisation. The default copies and synchronises.
    ///
    /// # Safety
    /// `src` valid for `size` bytes for the duration of the call.
    unsafe fn copy_to_device_unsynced(
        &self,
        dst: DevicePtr,
        src: *const u8,
        size: usize,
    ) -> Result<()> {
        // SAFETY: the caller's guarantee; synchronised before we return.
        unsafe { self.copy_to_device(dst, src, size) }?;
        self.synchronize()
    }
    /// Copy within this queue's device.
    ///
    /// # Safety
    /// `[dst, dst + size)` and `[src, src + size)` each lie inside one live
    /// range of this queue's device (checked by the core against the
    /// allocation index: see the module documentation).
    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()>;
    /// Copy from this queue's device to another device of the same plugin
    /// when the plugin can do it directly; `Ok(false)` makes the core stage
    /// the copy through the host.
    ///
    /// # Safety
    /// `[src, src + size)` lies in a live range of this queue's device and
    /// `[dst, dst + size)` in one of `dst_device`, a device of this plugin
    /// (both checked by the core: see the module documentation).
    unsafe fn copy_to_peer(
        &self,
        _dst_device: &dyn Device,
        _dst: DevicePtr,
        _src: DevicePtr,
        _size: usize,
    ) -> Result<bool> {
        Ok(false)
    }
    /// Fill `size` bytes with a repeated `pattern`.
    ///
    /// # Safety
    /// `[dst, dst + size)` lies inside one live range of this queue's device
    /// (checked by the core: see the module documentation), and `size` is a
    /// multiple of `pattern.len() > 0`.
    unsafe fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()>;
    /// Launch `kernel` (of a program of this queue's device).
    fn launch(
        &self,
        kernel: &dyn Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()>;
    /// Run `f` on the host once everything before it finished.
    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()>;
    /// Stream-ordered allocation (`cuMemAllocAsync`): `size` bytes of
    /// device memory that work enqueued after this call may use. `Ok(None)`:
    /// this queue has none, and the core allocates plainly instead.
    fn alloc_ordered(&self, _size: usize) -> Result<Option<DevicePtr>> {
        Ok(None)
    }
    /// Release memory of [`Queue::alloc_ordered`] (of any queue of this
    /// device) once the work enqueued here before has finished.
    fn free_ordered(&self, ptr: DevicePtr) -> Result<()> {
        Err(Error::new(
            ErrorCode::Unsupported,
            format!("{ptr} is not stream-ordered memory of this plugin"),
        ))
    }
    /// An event that completes when everything enqueued so far has.
    fn record_event(&self) -> Result<Arc<dyn Event>>;
    /// Make later work wait for `event` (which may come from another queue).
    fn wait_event(&self, event: &dyn Event) -> Result<()>;
    /// Block until all enqueued work has finished.
    fn synchronize(&self) -> Result<()>;
    /// True when no work is pending.
    fn is_idle(&self) -> Result<bool>;
    /// True when every operation has finished by the time its call returns
    /// (no real queue behind it: host CPU, simulators).
    fn completes_inline(&self) -> bool {
        false
    }
    /// After a synchronisation: a token for the device memory as the work
    /// done so far left it, when the plugin can later tell whether any work
    /// of any queue has changed device memory since
    /// ([`Queue::unchanged_since`]). None (the default): it cannot.
    fn memory_snapshot(&self) -> Option<u64> {
        None
    }
    /// Whether no work of any queue has changed device memory since
    /// [`Queue::memory_snapshot`] returned `token` (false when unsure).
    fn unchanged_since(&self, _token: u64) -> bool {
        false
    }
}

/// The plugin's own kernel type `K` behind a kernel a queue was handed,
/// or an invalid-argument error naming the kernel and `plugin` (`CUDA`,
/// `host`, ...). Every plugin's `launch` starts with it.
pub fn own_kernel<'k, K: Kernel>(kernel: &'k dyn Kernel, plugin: &str) -> Result<&'k K> {
    kernel.as_any().downcast_ref::<K>().ok_or_else(|| {
        Error::invalid_argument(format!(
            "kernel '{}' does not belong to the {plugin} plugin",
            kernel.name()
        ))
    })
}

/// The error of a kernel launched on a queue of a device other than the
/// one its program was loaded on (devices named by their labels).
pub fn kernel_on_other_device(kernel: &str, loaded_on: &str, queue_of: &str) -> Error {
    Error::invalid_argument(format!(
        "kernel '{kernel}' was loaded on {loaded_on}, not {queue_of}"
    ))
}

/// A point in a queue's work.
pub trait Event: Send + Sync + AsAny {
    fn synchronize(&self) -> Result<()>;
    fn is_complete(&self) -> Result<bool>;
}

/// The plugin's own event type `E` behind an event a queue was asked to
/// wait for, or an invalid-argument error naming `plugin`.
pub fn own_event<'e, E: Event>(event: &'e dyn Event, plugin: &str) -> Result<&'e E> {
    event.as_any().downcast_ref::<E>().ok_or_else(|| {
        Error::invalid_argument(format!("the event does not belong to the {plugin} plugin"))
    })
}

/// The event of a queue whose work has always finished by the time it is
/// recorded (queues that complete inline, proxies that wait).
pub struct FinishedEvent;

impl Event for FinishedEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn is_complete(&self) -> Result<bool> {
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Saxpy;
    impl Kernel for Saxpy {
        fn name(&self) -> &str {
            "saxpy"
        }
    }
    struct OtherKernel;
    impl Kernel for OtherKernel {
        fn name(&self) -> &str {
            "other"
        }
    }

    #[test]
    fn own_kernel_takes_the_plugins_type_and_names_a_foreign_one() {
        let mine: &dyn Kernel = &Saxpy;
        assert!(own_kernel::<Saxpy>(mine, "CUDA").is_ok());
        let foreign: &dyn Kernel = &OtherKernel;
        let e = own_kernel::<Saxpy>(foreign, "CUDA").err().unwrap();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(
            e.to_string()
                .contains("kernel 'other' does not belong to the CUDA plugin"),
            "{e}"
        );
    }

    #[test]
    fn own_event_refuses_another_plugins_event() {
        struct OtherEvent;
        impl Event for OtherEvent {
            fn synchronize(&self) -> Result<()> {
                Ok(())
            }
            fn is_complete(&self) -> Result<bool> {
                Ok(true)
            }
        }
        assert!(own_event::<FinishedEvent>(&FinishedEvent, "AMDGPU").is_ok());
        let e = own_event::<FinishedEvent>(&OtherEvent, "AMDGPU")
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("does not belong to the AMDGPU plugin"),
            "{e}"
        );
    }

    #[test]
    fn a_kernel_on_another_device_names_both() {
        let e = kernel_on_other_device("k", "cuda-0 (H200)", "cuda-1 (H200)");
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(
            e.to_string()
                .contains("kernel 'k' was loaded on cuda-0 (H200), not cuda-1 (H200)"),
            "{e}"
        );
    }
}
