//! What the plugin does for the OpenMP device runtime linked into an image
//! (ours or LLVM's; the layouts are `offload_core::openmp_env`'s):
//!
//! * at load, [`write_device_environment`] fills the image's
//!   `__omp_rtl_device_environment` as LLVM 22 does (see
//!   [`device_environment`] for each field);
//! * for each launch of a kernel with a teams reduction, [`LaunchEnvPool`]
//!   provides the kernel launch environment (counters 0) and a zeroed
//!   `ReductionDataSize x ReductionBufferLength` buffer, whose address
//!   becomes the kernel's first argument (`dyn_ptr`).

use std::sync::Mutex;

use offload_core::openmp_env::{
    launch_environment, DeviceEnvironment, DEVICE_ENVIRONMENT_GLOBAL, LAUNCH_ENVIRONMENT_SIZE,
};
use offload_core::plugin::{AllocKind, DevicePtr};
use offload_core::Result;

use crate::driver::Gpu;
use crate::{memory, sys};

/// The clock `omp_get_wtime` reads on NVIDIA GPUs is `%globaltimer`, in
/// nanoseconds: LLVM's CUDA plugin reports 1 GHz whatever the SM clock.
pub const NVPTX_CLOCK_FREQUENCY: u64 = 1_000_000_000;

/// The device environment of `gpu`, as LLVM 22 writes it: the debug kind
/// from `LIBOMPTARGET_DEVICE_RTL_DEBUG`; the plugin's device count and
/// this GPU's index among them (LLVM writes the plugin's numbering too,
/// not OpenMP's); `DynamicMemSize` 0 (LLVM 22's libomptarget writes 0;
/// `LIBOMPTARGET_SHARED_MEMORY_SIZE` reaches launches instead); the 1 GHz
/// `%globaltimer` clock; no indirect-call table (this runtime builds none:
/// `declare target indirect` calls are not supported); and the warps
/// that can be resident at once (SMs x max threads per SM / warp size).
pub fn device_environment(gpu: &Gpu) -> Result<DeviceEnvironment> {
    let attr = |a| gpu.attribute(a).map(|v| v.max(0) as u64);
    let sms = attr(sys::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let per_sm = attr(sys::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?;
    let warp = attr(sys::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?.max(1);
    Ok(DeviceEnvironment {
        debug_kind: gpu.openmp.debug_kind,
        num_devices: gpu.openmp.num_devices,
        device_num: gpu.ordinal.max(0) as u32,
        dynamic_mem_size: 0,
        clock_frequency: NVPTX_CLOCK_FREQUENCY,
        indirect_call_table: 0,
        indirect_call_table_size: 0,
        hardware_parallelism: sms * (per_sm / warp),
    })
}

/// Write the device environment into a just-loaded module, when it has
/// one (OpenMP images do; ol* and CUDA C images do not). A global of
/// another size is an error naming the image (`what`).
pub(crate) fn write_device_environment(gpu: &Gpu, module: sys::CUmodule, what: &str) -> Result<()> {
    let name = std::ffi::CString::new(DEVICE_ENVIRONMENT_GLOBAL).expect("no NUL");
    let (mut ptr, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: a loaded module and a NUL-terminated name.
    let r = gpu.call_raw(|d| unsafe {
        (d.cuModuleGetGlobal)(&mut ptr, &mut size, module, name.as_ptr())
    })?;
    if r == sys::CUDA_ERROR_NOT_FOUND {
        return Ok(());
    }
    crate::driver::check(
        &gpu.driver,
        r,
        format_args!("{what}: cuModuleGetGlobal({DEVICE_ENVIRONMENT_GLOBAL})"),
    )?;
    DeviceEnvironment::check_size(what, size as u64)?;
    let bytes = device_environment(gpu)?.to_bytes();
    // SAFETY: 48 bytes into the 48-byte global; `bytes` outlives the
    // copy, which is waited for below.
    gpu.call("cuMemcpyHtoDAsync", |d| unsafe {
        (d.cuMemcpyHtoDAsync)(
            ptr,
            bytes.as_ptr().cast(),
            bytes.len(),
            std::ptr::null_mut(),
        )
    })?;
    // SAFETY: waits for the legacy default stream the copy went to.
    gpu.call("cuStreamSynchronize", |d| unsafe {
        (d.cuStreamSynchronize)(std::ptr::null_mut())
    })?;
    tracing::debug!(device = %gpu.label, "{what}: {DEVICE_ENVIRONMENT_GLOBAL} written");
    Ok(())
}

/// Idle blocks kept per GPU; more are freed as they come back.
const MAX_IDLE: usize = 32;

/// One launch environment and its reduction buffer in one allocation:
/// the buffer (`capacity` bytes, a multiple of 16) at `ptr`, the 16-byte
/// environment right after it, so that one memset of `capacity + 8`
/// bytes zeroes the buffer and both counters and leaves the buffer's
/// address (written once, when the block is made) in place.
pub struct Block {
    ptr: u64,
    capacity: u64,
    /// Recorded after each launch that used the block; the next user's
    /// stream waits for it, so a block is reused in stream order across
    /// streams without a host synchronisation.
    event: usize,
    /// The environment's bytes, copied once to the device; kept as long
    /// as the block, so the asynchronous copy may read them late.
    _host: Box<[u8; LAUNCH_ENVIRONMENT_SIZE]>,
}

impl Block {
    /// The launch environment's device address (the `dyn_ptr` word).
    pub fn environment(&self) -> u64 {
        self.ptr + self.capacity
    }
    /// The reduction buffer's device address.
    pub fn buffer(&self) -> u64 {
        self.ptr
    }
}

/// The launch environments of one GPU, reused across launches: a hot loop
/// of teams reductions allocates once, then each launch costs one
/// `cuMemsetD8Async` (and a `cuStreamWaitEvent` + `cuEventRecord`).
#[derive(Default)]
pub struct LaunchEnvPool {
    idle: Mutex<Vec<Block>>,
}

impl LaunchEnvPool {
    /// A block with room for `buffer_bytes`, zeroed (buffer and counters)
    /// on `stream` after any earlier use of it has finished.
    pub(crate) fn acquire(
        &self,
        gpu: &Gpu,
        stream: sys::CUstream,
        buffer_bytes: u64,
    ) -> Result<Block> {
        let need = buffer_bytes.div_ceil(16) * 16;
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let best = idle
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity >= need)
                .min_by_key(|(_, b)| b.capacity)
                .map(|(i, _)| i);
            best.map(|i| idle.swap_remove(i))
        };
        let block = match reused {
            Some(b) => {
                let e = b.event as sys::CUevent;
                // SAFETY: a live stream and event of this GPU.
                if let Err(err) = gpu.call("cuStreamWaitEvent", |d| unsafe {
                    (d.cuStreamWaitEvent)(stream, e, 0)
                }) {
                    self.release_block(gpu, b);
                    return Err(err);
                }
                b
            }
            None => Self::make(gpu, stream, need)?,
        };
        let (ptr, n) = (block.ptr, (block.capacity + 8) as usize);
        // SAFETY: the first `capacity + 8` bytes of the block's allocation.
        if let Err(err) = gpu.call("cuMemsetD8Async", |d| unsafe {
            (d.cuMemsetD8Async)(ptr, 0, n, stream)
        }) {
            self.give_back(gpu, stream, block);
            return Err(err);
        }
        Ok(block)
    }

    fn make(gpu: &Gpu, stream: sys::CUstream, capacity: u64) -> Result<Block> {
        let size = usize::try_from(capacity + LAUNCH_ENVIRONMENT_SIZE as u64).map_err(|_| {
            offload_core::Error::out_of_resources(format!(
                "{}: a teams-reduction buffer of {capacity} bytes",
                gpu.label
            ))
        })?;
        let ptr = memory::alloc(gpu, size, AllocKind::Device)?;
        let mut event: sys::CUevent = std::ptr::null_mut();
        // SAFETY: writes one event handle.
        if let Err(e) = gpu.call("cuEventCreate", |d| unsafe {
            (d.cuEventCreate)(&mut event, sys::CU_EVENT_DISABLE_TIMING)
        }) {
            let _ = memory::free(gpu, ptr, AllocKind::Device);
            return Err(e);
        }
        let block = Block {
            ptr: ptr.0,
            capacity,
            event: event as usize,
            _host: Box::new(launch_environment(ptr.0)),
        };
        let (dst, src) = (block.environment(), block._host.as_ptr());
        // SAFETY: 16 bytes at the end of the allocation; the source lives
        // in the block, which is freed only after a synchronisation.
        if let Err(e) = gpu.call("cuMemcpyHtoDAsync", |d| unsafe {
            (d.cuMemcpyHtoDAsync)(dst, src.cast(), LAUNCH_ENVIRONMENT_SIZE, stream)
        }) {
            // SAFETY: waits for the stream, so the copy is done or never ran.
            let _ = gpu.call("cuStreamSynchronize", |d| unsafe {
                (d.cuStreamSynchronize)(stream)
            });
            free_block(gpu, block);
            return Err(e);
        }
        tracing::debug!(device = %gpu.label, bytes = capacity, "teams-reduction launch environment allocated");
        Ok(block)
    }

    /// Return `block` after the launch that used it was enqueued on
    /// `stream`: its next user waits for that launch.
    pub(crate) fn give_back(&self, gpu: &Gpu, stream: sys::CUstream, block: Block) {
        let e = block.event as sys::CUevent;
        // SAFETY: a live event and stream of this GPU.
        let recorded = gpu.call("cuEventRecord", |d| unsafe { (d.cuEventRecord)(e, stream) });
        if recorded.is_err() {
            // Without the event the block's use cannot be ordered: wait.
            // SAFETY: a live stream.
            let _ = gpu.call("cuStreamSynchronize", |d| unsafe {
                (d.cuStreamSynchronize)(stream)
            });
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(block);
            return;
        }
        drop(idle);
        self.release_block(gpu, block);
    }

    fn release_block(&self, gpu: &Gpu, block: Block) {
        let e = block.event as sys::CUevent;
        // SAFETY: a live event: the block's last use has finished after it.
        let _ = gpu.call("cuEventSynchronize", |d| unsafe {
            (d.cuEventSynchronize)(e)
        });
        free_block(gpu, block);
    }

    /// Free every idle block (plugin shutdown; nothing is in flight).
    pub fn release(&self, gpu: &Gpu) {
        let blocks: Vec<Block> =
            std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for b in blocks {
            self.release_block(gpu, b);
        }
    }
}

fn free_block(gpu: &Gpu, block: Block) {
    let e = block.event as sys::CUevent;
    // SAFETY: the event was made for this block and is destroyed once.
    let _ = gpu.call("cuEventDestroy", |d| unsafe { (d.cuEventDestroy)(e) });
    let _ = memory::free(gpu, DevicePtr(block.ptr), AllocKind::Device);
}
