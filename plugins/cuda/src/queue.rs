//! Queues are CUDA streams (`CU_STREAM_NON_BLOCKING`), events are CUDA
//! events (`CU_EVENT_DISABLE_TIMING`). Every operation is enqueued
//! asynchronously; errors of a kernel surface at the next synchronisation.

use std::ffi::c_void;
use std::sync::Arc;

use offload_core::openmp_env::NO_LAUNCH_ENVIRONMENT;
use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::{Error, Result};

use crate::device::CudaDevice;
use crate::driver::{Gpu, LaunchLimits};
use crate::kernel::CudaKernel;
use crate::sys;

pub struct CudaQueue {
    gpu: Arc<Gpu>,
    stream: usize,
}

impl CudaQueue {
    pub fn new(gpu: Arc<Gpu>) -> Result<CudaQueue> {
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle.
        gpu.call("cuStreamCreate", |d| unsafe {
            (d.cuStreamCreate)(&mut s, sys::CU_STREAM_NON_BLOCKING)
        })?;
        Ok(CudaQueue {
            gpu,
            stream: s as usize,
        })
    }

    fn raw(&self) -> sys::CUstream {
        self.stream as sys::CUstream
    }
}

impl Drop for CudaQueue {
    fn drop(&mut self) {
        let s = self.raw();
        // SAFETY: the stream was created by `new` and is destroyed once;
        // work still queued completes first (the driver's rule).
        let _ = self
            .gpu
            .call("cuStreamDestroy", |d| unsafe { (d.cuStreamDestroy)(s) });
    }
}

pub struct CudaEvent {
    gpu: Arc<Gpu>,
    event: usize,
}

impl CudaEvent {
    fn raw(&self) -> sys::CUevent {
        self.event as sys::CUevent
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        let e = self.raw();
        // SAFETY: created by `record_event`, destroyed once.
        let _ = self
            .gpu
            .call("cuEventDestroy", |d| unsafe { (d.cuEventDestroy)(e) });
    }
}

impl plugin::Event for CudaEvent {
    fn synchronize(&self) -> Result<()> {
        let e = self.raw();
        // SAFETY: a live event.
        self.gpu.call("cuEventSynchronize", |d| unsafe {
            (d.cuEventSynchronize)(e)
        })
    }
    fn is_complete(&self) -> Result<bool> {
        let e = self.raw();
        // SAFETY: a live event.
        let r = self.gpu.call_raw(|d| unsafe { (d.cuEventQuery)(e) })?;
        match r {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            r => Err(crate::driver::error(
                &self.gpu.driver,
                r,
                format_args!("{}: cuEventQuery", self.gpu.label),
            )),
        }
    }
}

/// Calls the boxed closure `cuLaunchHostFunc` was given, once. A panic
/// stops here: it must not unwind into the driver.
unsafe extern "C" fn host_trampoline(data: *mut c_void) {
    // SAFETY: `data` is the `Box<HostFn>` leaked by `host_function`, and
    // the driver calls the function exactly once.
    let f = unsafe { Box::from_raw(data.cast::<HostFn>()) };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || (f.0)())).is_err() {
        tracing::error!("a host function enqueued on a CUDA stream panicked");
    }
}

struct HostFn(Box<dyn FnOnce() + Send>);

/// A launch this GPU cannot run is an error naming the kernel and the
/// limit, found before the driver is asked (its own error would say only
/// `CUDA_ERROR_INVALID_VALUE`); nothing is enqueued.
fn check_launch(config: &LaunchConfig, kernel: &CudaKernel, limits: &LaunchLimits) -> Result<()> {
    let name = &kernel.name;
    if config.num_groups.contains(&0) || config.group_size.contains(&0) {
        return Err(Error::invalid_argument(format!(
            "kernel '{name}': launch size has a zero dimension: {:?} groups of {:?}",
            config.num_groups, config.group_size
        )));
    }
    if config.total_items_per_group() > kernel.max_threads as u64 {
        return Err(Error::invalid_argument(format!(
            "kernel '{name}': group size {:?} exceeds its limit of {} threads per block",
            config.group_size, kernel.max_threads
        )));
    }
    let over = |asked: [u32; 3], max: [u32; 3]| asked.iter().zip(max).any(|(&n, m)| n > m);
    if over(config.group_size, limits.block) {
        return Err(Error::invalid_argument(format!(
            "kernel '{name}': block of {:?} threads exceeds this GPU's limit of {:?} per dimension",
            config.group_size, limits.block
        )));
    }
    if over(config.num_groups, limits.grid) {
        return Err(Error::invalid_argument(format!(
            "kernel '{name}': grid of {:?} blocks exceeds this GPU's limit of {:?} per dimension",
            config.num_groups, limits.grid
        )));
    }
    let shared = u64::from(config.dyn_group_memory) + u64::from(kernel.static_shared);
    if shared > u64::from(limits.shared_optin) {
        return Err(Error::new(
            offload_core::ErrorCode::OutOfResources,
            format!(
                "kernel '{name}': {} bytes of dynamic shared memory (ompx_dyn_cgroup_mem / LIBOMPTARGET_SHARED_MEMORY_SIZE) and {} of static shared memory exceed this GPU's {} bytes per block",
                config.dyn_group_memory, kernel.static_shared, limits.shared_optin
            ),
        ));
    }
    Ok(())
}

impl plugin::Queue for CudaQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let s = self.raw();
        self.gpu.note_device_write();
        // SAFETY: the caller keeps `src` valid until the queue reaches the copy.
        self.gpu.call("cuMemcpyHtoDAsync", |d| unsafe {
            (d.cuMemcpyHtoDAsync)(dst.0, src.cast(), size, s)
        })
    }

    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let s = self.raw();
        // SAFETY: the caller keeps `dst` valid until the queue reaches the copy.
        self.gpu.call("cuMemcpyDtoHAsync", |d| unsafe {
            (d.cuMemcpyDtoHAsync)(dst.cast(), src.0, size, s)
        })
    }

    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let s = self.raw();
        self.gpu.note_device_write();
        // SAFETY: device addresses the core range-checked.
        self.gpu.call("cuMemcpyDtoDAsync", |d| unsafe {
            (d.cuMemcpyDtoDAsync)(dst.0, src.0, size, s)
        })
    }

    unsafe fn copy_to_peer(
        &self,
        dst_device: &dyn plugin::Device,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<bool> {
        let Some(peer) = dst_device.as_any().downcast_ref::<CudaDevice>() else {
            return Ok(false);
        };
        if size == 0 {
            return Ok(true);
        }
        peer.gpu.note_device_write();
        let dst_ctx = peer.gpu.context()?;
        let src_ctx = self.gpu.context()?;
        let s = self.raw();
        // SAFETY: both addresses range-checked by the core on their devices;
        // both contexts are retained primary contexts.
        self.gpu.call("cuMemcpyPeerAsync", |d| unsafe {
            (d.cuMemcpyPeerAsync)(dst.0, dst_ctx, src.0, src_ctx, size, s)
        })?;
        Ok(true)
    }

    unsafe fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        if size == 0 || pattern.is_empty() {
            return Ok(());
        }
        let s = self.raw();
        self.gpu.note_device_write();
        let uniform = pattern.iter().all(|&b| b == pattern[0]);
        if uniform {
            let v = pattern[0];
            // SAFETY: a range the core checked.
            return self.gpu.call("cuMemsetD8Async", |d| unsafe {
                (d.cuMemsetD8Async)(dst.0, v, size, s)
            });
        }
        if pattern.len() == 2 && dst.0.is_multiple_of(2) {
            let v = u16::from_ne_bytes([pattern[0], pattern[1]]);
            // SAFETY: as above; `size` is a multiple of 2.
            return self.gpu.call("cuMemsetD16Async", |d| unsafe {
                (d.cuMemsetD16Async)(dst.0, v, size / 2, s)
            });
        }
        if pattern.len() == 4 && dst.0.is_multiple_of(4) {
            let v = u32::from_ne_bytes([pattern[0], pattern[1], pattern[2], pattern[3]]);
            // SAFETY: as above; `size` is a multiple of 4.
            return self.gpu.call("cuMemsetD32Async", |d| unsafe {
                (d.cuMemsetD32Async)(dst.0, v, size / 4, s)
            });
        }
        // Any other pattern: one chunk of repeats from the host, then
        // doubling device-to-device copies. A copy from pageable host
        // memory returns once the driver staged the data, so the chunk
        // may go when the call returns.
        let chunk_len = size
            .min((1 << 20) / pattern.len() * pattern.len())
            .max(pattern.len());
        let chunk: Vec<u8> = pattern.iter().copied().cycle().take(chunk_len).collect();
        // SAFETY: `chunk` is valid for `chunk_len` bytes during the call.
        unsafe { plugin::Queue::copy_to_device(self, dst, chunk.as_ptr(), chunk_len)? };
        let mut done = chunk_len;
        while done < size {
            let n = done.min(size - done);
            // SAFETY: both ranges lie in `[dst, dst + size)`, which the
            // caller guarantees is live device memory of this device.
            unsafe { self.copy_within(dst.offset(done as u64), dst, n) }?;
            done += n;
        }
        Ok(())
    }

    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let k = plugin::own_kernel::<CudaKernel>(kernel, "CUDA")?;
        if k.module.gpu.ordinal != self.gpu.ordinal {
            return Err(plugin::kernel_on_other_device(
                &k.name,
                &k.module.gpu.label,
                &self.gpu.label,
            ));
        }
        // OpenMP kernels arrive with the sizes the core picked
        // (`offload_core::launch`).
        check_launch(config, k, &self.gpu.launch_limits()?)?;
        k.opt_in_shared(config.dyn_group_memory)
            .map_err(|e| e.context(format_args!("kernel '{}'", k.name)))?;
        // A kernel with a teams reduction gets a launch environment in
        // place of the "none" the OpenMP face put first (LLVM's rule;
        // packed ol* arguments and launches without the word are left
        // alone).
        let reduction = match (k.openmp.and_then(|o| o.reduction_buffer), args) {
            (Some(bytes), KernelArgs::Words(w)) if w.first() == Some(&NO_LAUNCH_ENVIRONMENT) => {
                let block = self.gpu.launch_envs.acquire(&self.gpu, self.raw(), bytes)?;
                let mut words = w.to_vec();
                words[0] = block.environment();
                Some((block, words))
            }
            _ => None,
        };
        let args = match &reduction {
            Some((_, words)) => KernelArgs::Words(words),
            None => args,
        };
        // OpenMP passes one 64-bit word per parameter, the ol* API one
        // packed buffer: both are the kernel's parameter block as
        // `CU_LAUNCH_PARAM_BUFFER_POINTER` wants it (the driver copies it
        // at launch).
        let bytes: &[u8] = match args {
            // SAFETY: a `[u64]` viewed as its bytes (u8 has no alignment
            // or validity requirements); same lifetime.
            KernelArgs::Words(w) => unsafe {
                std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), std::mem::size_of_val(w))
            },
            KernelArgs::Packed(b) => b,
        };
        let mut size = bytes.len();
        let mut extra = [
            sys::CU_LAUNCH_PARAM_BUFFER_POINTER,
            bytes.as_ptr() as *mut c_void,
            sys::CU_LAUNCH_PARAM_BUFFER_SIZE,
            (&mut size as *mut usize).cast::<c_void>(),
            sys::CU_LAUNCH_PARAM_END,
        ];
        let extra_ptr = if bytes.is_empty() {
            std::ptr::null_mut()
        } else {
            extra.as_mut_ptr()
        };
        let [gx, gy, gz] = config.num_groups;
        let [bx, by, bz] = config.group_size;
        let f = k.raw();
        let s = self.raw();
        self.gpu.note_device_write();
        let _span = tracing::debug_span!("cuda_launch", kernel = %k.name, grid = ?config.num_groups, block = ?config.group_size, shared = config.dyn_group_memory).entered();
        // SAFETY: `extra` names a parameter block of `size` bytes that
        // lives across the call (the driver copies it); no kernelParams.
        let launched = self
            .gpu
            .call("cuLaunchKernel", |d| unsafe {
                (d.cuLaunchKernel)(
                    f,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    config.dyn_group_memory,
                    s,
                    std::ptr::null_mut(),
                    extra_ptr,
                )
            })
            .map_err(|e| e.context(format_args!("launching '{}'", k.name)));
        if let Some((block, _)) = reduction {
            // Reused once this launch is done (or never ran).
            self.gpu.launch_envs.give_back(&self.gpu, s, block);
        }
        launched
    }

    /// `cuMemAllocAsync` on this stream, where the GPU has memory pools.
    /// From the plugin's pool (`crate::pool`), else the device's default
    /// pool.
    fn alloc_ordered(&self, size: usize) -> Result<Option<DevicePtr>> {
        let alloc = match self.gpu.driver.cuMemAllocAsync {
            Some(f) if self.gpu.has_memory_pools() => f,
            _ => return Ok(None),
        };
        let s = self.raw();
        if let Some(pool) = self.gpu.queue_pool() {
            return pool.alloc(&self.gpu, size, s).map(Some);
        }
        let mut p: sys::CUdeviceptr = 0;
        self.gpu
            // SAFETY: writes one device pointer; the stream is this queue's.
            .call("cuMemAllocAsync", |_| unsafe { alloc(&mut p, size, s) })?;
        Ok(Some(DevicePtr(p)))
    }

    /// `cuMemFreeAsync` on this stream.
    fn free_ordered(&self, ptr: DevicePtr) -> Result<()> {
        // Only memory of `alloc_ordered` comes here, which needed both.
        let free = self.gpu.driver.cuMemFreeAsync.ok_or_else(|| {
            Error::unsupported(format!(
                "{}: the driver has no cuMemFreeAsync",
                self.gpu.label
            ))
        })?;
        let s = self.raw();
        // SAFETY: `ptr` came from `cuMemAllocAsync` on this device (the
        // core files which memory is stream-ordered) and is freed once.
        self.gpu
            .call("cuMemFreeAsync", |_| unsafe { free(ptr.0, s) })
    }

    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        let data = Box::into_raw(Box::new(HostFn(f))).cast::<c_void>();
        let s = self.raw();
        // SAFETY: the trampoline takes ownership of `data` when called.
        let r = self.gpu.call("cuLaunchHostFunc", |d| unsafe {
            (d.cuLaunchHostFunc)(s, host_trampoline, data)
        });
        if r.is_err() {
            // SAFETY: not enqueued, so never called: reclaim it.
            drop(unsafe { Box::from_raw(data.cast::<HostFn>()) });
        }
        r
    }

    fn record_event(&self) -> Result<Arc<dyn plugin::Event>> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        // SAFETY: writes one event handle.
        self.gpu.call("cuEventCreate", |d| unsafe {
            (d.cuEventCreate)(&mut e, sys::CU_EVENT_DISABLE_TIMING)
        })?;
        let event = CudaEvent {
            gpu: self.gpu.clone(),
            event: e as usize,
        };
        let s = self.raw();
        self.gpu
            // SAFETY: a live event and stream.
            .call("cuEventRecord", |d| unsafe { (d.cuEventRecord)(e, s) })?;
        Ok(Arc::new(event))
    }

    fn wait_event(&self, event: &dyn plugin::Event) -> Result<()> {
        let e = plugin::own_event::<CudaEvent>(event, "CUDA")?;
        let (s, ev) = (self.raw(), e.raw());
        // SAFETY: a live stream and event (events of any device may be waited on).
        self.gpu.call("cuStreamWaitEvent", |d| unsafe {
            (d.cuStreamWaitEvent)(s, ev, 0)
        })
    }

    fn synchronize(&self) -> Result<()> {
        let s = self.raw();
        // SAFETY: a live stream.
        self.gpu.call("cuStreamSynchronize", |d| unsafe {
            (d.cuStreamSynchronize)(s)
        })
    }

    /// Any write to this GPU through the plugin counts
    /// ([`Gpu::note_device_write`]), from every queue and thread. Work the
    /// program enqueues on the driver itself (on a stream an interop
    /// object handed out) is not seen; the core keeps a snapshot only
    /// within one OpenMP construct of one thread, where such work could
    /// only race with the construct's own copies.
    fn memory_snapshot(&self) -> Option<u64> {
        Some(self.gpu.device_writes())
    }

    fn unchanged_since(&self, token: u64) -> bool {
        self.gpu.device_writes() == token
    }

    fn is_idle(&self) -> Result<bool> {
        let s = self.raw();
        // SAFETY: a live stream.
        let r = self.gpu.call_raw(|d| unsafe { (d.cuStreamQuery)(s) })?;
        match r {
            sys::CUDA_SUCCESS => Ok(true),
            sys::CUDA_ERROR_NOT_READY => Ok(false),
            r => Err(crate::driver::error(
                &self.gpu.driver,
                r,
                format_args!("{}: cuStreamQuery", self.gpu.label),
            )),
        }
    }
}
