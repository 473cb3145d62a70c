//! The CUDA plugin through the core's API, checking only what a real GPU
//! must show too (no fake-driver controls, no fake-only values): device
//! info, allocation kinds and copies, fills, registered host memory, saxpy
//! and a reduction in dynamic shared memory from PTX, queue/event/host
//! function ordering, globals, stream-ordered queue memory, `1OMP`
//! compile options as JIT options, context stack/heap limits, 8 host
//! threads sharing the primary context, and the errors of bad pointers
//! and sizes.
//!
//! It runs against whatever CUDA driver the plugin loads:
//!
//! * `cargo test -p offload-plugin-cuda --test gpu_api`: the fake driver
//!   (`tests/fake_cuda/fake_cuda.c`) and PTX of `tests/gpu/kernels.c` are
//!   built with clang-22, and `OFFLOAD_CUDA_DRIVER` names the fake;
//! * `OFFLOAD_GPU_TEST_PTX=kernels.ptx ./gpu_api --test-threads=1`
//!   (`scripts/gpu-tests.sh run`, on a GPU machine without Rust or clang):
//!   that PTX and the driver the loader finds, or the one an
//!   `OFFLOAD_CUDA_DRIVER` already in the environment names (the CI
//!   rehearsal of the bundle against the fake). There a missing device is
//!   a failure, never a skip.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use offload_core::{
    AllocKind, Backend, Config, Device, DevicePtr, DeviceType, ErrorCode, KernelArgs, LaunchConfig,
    Location, Owner, Queue, Runtime,
};

/// The PTX to load instead of building one (and the real driver instead of
/// the fake).
const PTX_ENV: &str = "OFFLOAD_GPU_TEST_PTX";

struct Gpu {
    rt: Runtime,
    ptx: Vec<u8>,
}

/// The runtime (CUDA plugin only) and the kernels' PTX, shared by the
/// tests; None when clang-22 is missing outside CI in `cargo test` mode.
fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| {
        let ptx = match std::env::var_os(PTX_ENV) {
            Some(path) => std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{PTX_ENV}={}: {e}", path.to_string_lossy())),
            None => {
                let fake = common::fake_driver()?;
                let ptx = common::ptx(include_str!("gpu/kernels.c"), "sm_80")?;
                // SAFETY: set once, before the runtime below reads it; the
                // other tests wait on this OnceLock meanwhile.
                unsafe { std::env::set_var(offload_plugin_cuda::DRIVER_ENV, &fake) };
                ptx
            }
        };
        let config = Config::from_lookup(|k| (k == "OFFLOAD_PLUGINS").then(|| "cuda".to_string()));
        let rt = Runtime::new(config, &[offload_plugin_cuda::ENTRY]);
        assert!(
            rt.failed_plugins().is_empty(),
            "the CUDA plugin failed: {:?}",
            rt.failed_plugins()
        );
        assert!(!rt.devices().is_empty(), "no CUDA device");
        let info = rt.devices()[0].info();
        eprintln!(
            "gpu_api: {} ({}, {} SMs, {} MiB, {} MHz, driver {}) via {}",
            info.name,
            info.arch,
            info.compute_units,
            info.global_memory_bytes >> 20,
            info.clock_mhz,
            info.driver_version,
            std::env::var(offload_plugin_cuda::DRIVER_ENV).unwrap_or("libcuda.so.1".into())
        );
        Some(Gpu { rt, ptx })
    })
    .as_ref()
}

fn device(g: &Gpu) -> &Arc<Device> {
    &g.rt.devices()[0]
}

/// `reduce(const int *in, int n, long long *out)`.
fn reduce_args(input: DevicePtr, n: i32, out: DevicePtr) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&input.0.to_ne_bytes());
    b.extend_from_slice(&n.to_ne_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&out.0.to_ne_bytes());
    b
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: any f32 is 4 plain bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 4) }
}

fn upload(d: &Device, dst: DevicePtr, bytes: &[u8]) {
    // SAFETY: `bytes` outlives the synchronous copy.
    unsafe { d.copy_to_device(dst, bytes.as_ptr(), bytes.len()) }.unwrap();
}

fn download(d: &Device, src: DevicePtr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` outlives the synchronous copy.
    unsafe { d.copy_from_device(out.as_mut_ptr(), src, len) }.unwrap();
    out
}

fn download_f32(d: &Device, src: DevicePtr, n: usize) -> Vec<f32> {
    download(d, src, n * 4)
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn device_info_is_plausible() {
    let Some(g) = gpu() else { return };
    for d in g.rt.devices() {
        let info = d.info();
        assert_eq!(d.plugin_name(), "cuda");
        assert!(!info.name.trim().is_empty(), "empty name");
        assert!(info.vendor.contains("NVIDIA"), "vendor {:?}", info.vendor);
        assert_eq!(info.device_type, DeviceType::Gpu);
        assert_eq!(info.backend, Backend::Cuda);
        assert_eq!(info.triple, "nvptx64-nvidia-cuda");
        let sm = info
            .arch
            .strip_prefix("sm_")
            .unwrap_or_else(|| panic!("{}", info.arch));
        assert!(
            sm.trim_end_matches(['a', 'f'])
                .parse::<u32>()
                .is_ok_and(|v| v >= 30),
            "arch {}",
            info.arch
        );
        assert!(info.uid.starts_with("GPU-"), "uid {}", info.uid);
        assert!(
            info.driver_version
                .split('.')
                .next()
                .is_some_and(|m| m.parse::<u32>().is_ok_and(|m| m >= 11)),
            "driver version {:?}",
            info.driver_version
        );
        assert!(info.global_memory_bytes > 0);
        assert!(info.group_memory_bytes >= 48 * 1024);
        assert!(info.compute_units > 0);
        assert!(info.max_group_size >= 256);
        assert!(info.max_group_size_per_dim[0] >= 256);
        assert!(info.max_num_groups[0] >= 65535);
        assert_eq!(info.address_bits, 64);
        assert!(!d.shares_host_memory());
    }
}

#[test]
fn every_allocation_kind_round_trips_host_to_device_to_device_to_host() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let len = 3 << 20;
    let data = pattern(len, 1);
    for kind in [AllocKind::Device, AllocKind::Host, AllocKind::Shared] {
        let a = d.alloc(len, kind).unwrap();
        let b = d.alloc(len, kind).unwrap();
        upload(d, a, &data);
        // SAFETY: both ranges are live allocations of device 0.
        unsafe {
            g.rt.copy(Location::Device(0, b), Location::Device(0, a), len, None)
                .unwrap()
        };
        assert!(download(d, b, len) == data, "{kind:?}");
        // A sub-range at an odd offset.
        // SAFETY: as above.
        unsafe {
            g.rt.copy(
                Location::Device(0, b.offset(1001)),
                Location::Device(0, a.offset(7)),
                4096,
                None,
            )
            .unwrap()
        };
        assert!(
            download(d, b.offset(1001), 4096) == data[7..7 + 4096],
            "{kind:?}"
        );
        if kind != AllocKind::Device {
            // Pinned and managed memory are the host's too.
            // SAFETY: `a` holds `len` bytes reachable from the host.
            let host = unsafe { std::slice::from_raw_parts(a.0 as *const u8, len) };
            assert!(host == data, "{kind:?} read on the host");
        }
        d.free(a).unwrap();
        d.free(b).unwrap();
    }
}

#[test]
fn queued_copies_run_in_order() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let len = 8 << 20;
    let data = pattern(len, 2);
    let mut back = vec![0u8; len];
    let a = d.alloc(len, AllocKind::Device).unwrap();
    let b = d.alloc(len, AllocKind::Device).unwrap();
    let q = Queue::new(Some(d)).unwrap();
    // SAFETY: `data` and `back` outlive the queue's synchronisation below.
    unsafe {
        g.rt.copy(
            Location::Device(0, a),
            Location::Host(data.as_ptr()),
            len,
            Some(&q),
        )
        .unwrap();
        g.rt.copy(
            Location::Device(0, b),
            Location::Device(0, a),
            len,
            Some(&q),
        )
        .unwrap();
        g.rt.copy(
            Location::Host(back.as_mut_ptr()),
            Location::Device(0, b),
            len,
            Some(&q),
        )
        .unwrap();
    }
    q.synchronize().unwrap();
    assert!(back == data);
    assert!(q.is_idle().unwrap());
    d.free(a).unwrap();
    d.free(b).unwrap();
}

#[test]
fn fills_of_every_pattern_size() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    for n in [4096 * 3, 3 << 20] {
        let p = d.alloc(n, AllocKind::Device).unwrap();
        for pat in [
            &[7u8][..],
            &[1, 2],
            &[1, 2, 3, 4],
            &[9, 8, 7],
            &[1, 2, 3, 4, 5, 6, 7, 8],
        ] {
            let size = n / pat.len() * pat.len();
            d.fill(p, pat, size).unwrap();
            let want: Vec<u8> = pat.iter().copied().cycle().take(size).collect();
            assert!(download(d, p, size) == want, "{n} bytes of {pat:?}");
        }
        d.free(p).unwrap();
    }
    // On a queue, ordered with a copy after it.
    let p = d.alloc(1 << 20, AllocKind::Device).unwrap();
    let q = Queue::new(Some(d)).unwrap();
    q.fill(p, &0xdead_beef_u32.to_ne_bytes(), 1 << 20).unwrap();
    let mut back = vec![0u8; 1 << 20];
    // SAFETY: `back` outlives the synchronisation.
    unsafe {
        g.rt.copy(
            Location::Host(back.as_mut_ptr()),
            Location::Device(0, p),
            back.len(),
            Some(&q),
        )
        .unwrap()
    };
    q.synchronize().unwrap();
    assert!(back
        .chunks_exact(4)
        .all(|c| c == 0xdead_beef_u32.to_ne_bytes()));
    d.free(p).unwrap();
}

#[test]
fn registered_host_memory_copies_both_ways() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    assert!(d.registers_host_memory());
    let len = 4 << 20;
    let mut host = pattern(len, 3);
    let base = DevicePtr(host.as_mut_ptr() as u64);
    // SAFETY: `host` stays alive and unmoved until the unregistration below.
    unsafe { d.register_host_range(base, len, Owner(7)) }.unwrap();
    assert!(d.allocation(base).is_some());
    let p = d.alloc(len, AllocKind::Device).unwrap();
    let q = Queue::new(Some(d)).unwrap();
    // SAFETY: `host` outlives the synchronisations.
    unsafe {
        g.rt.copy(
            Location::Device(0, p),
            Location::Host(host.as_ptr()),
            len,
            Some(&q),
        )
        .unwrap()
    };
    q.synchronize().unwrap();
    let sent = host.clone();
    host.iter_mut().for_each(|b| *b = 0);
    // SAFETY: as above.
    unsafe {
        g.rt.copy(
            Location::Host(host.as_mut_ptr()),
            Location::Device(0, p),
            len,
            Some(&q),
        )
        .unwrap()
    };
    q.synchronize().unwrap();
    assert!(host == sent);
    d.free(p).unwrap();
    d.unregister_host_range(base).unwrap();
    assert!(d.allocation(base).is_none());
    assert!(d.unregister_host_range(base).is_err());
}

#[test]
fn saxpy_from_ptx_with_packed_arguments() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let program = d.load_program(&g.ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = (1 << 20) + 17;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    upload(d, x, f32_bytes(&xs));
    d.fill(y, &1f32.to_ne_bytes(), n * 4).unwrap();
    let args = common::saxpy_args(n as i32, 2.0, x, y);
    let groups = n.div_ceil(256) as u32;
    d.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(groups, 256),
    )
    .unwrap();
    let out = download_f32(d, y, n);
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, 2.0 * i as f32 + 1.0, "y[{i}]");
    }
    // Smaller groups, more of them, over fresh memory.
    d.fill(y, &0f32.to_ne_bytes(), n * 4).unwrap();
    let config = LaunchConfig {
        num_groups: [n.div_ceil(64) as u32, 1, 1],
        group_size: [64, 1, 1],
        dyn_group_memory: 0,
        tripcount: 0,
    };
    d.launch(&saxpy, KernelArgs::Packed(&args), &config)
        .unwrap();
    let out = download_f32(d, y, n);
    assert!(out.iter().enumerate().all(|(i, v)| *v == 2.0 * i as f32));
    // The occupancy calculator gives a usable group size.
    let pref = saxpy.preferred_group_size(0);
    assert!(
        (32..=1024).contains(&pref) && pref % 32 == 0,
        "preferred group size {pref}"
    );
    d.free(x).unwrap();
    d.free(y).unwrap();
}

#[test]
fn launches_queue_up_in_order() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let program = d.load_program(&g.ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 100_000usize;
    let ones = vec![1f32; n];
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    upload(d, x, f32_bytes(&ones));
    d.fill(y, &0f32.to_ne_bytes(), n * 4).unwrap();
    let q = Queue::new(Some(d)).unwrap();
    let args = common::saxpy_args(n as i32, 1.0, x, y);
    let config = LaunchConfig::linear(n.div_ceil(128) as u32, 128);
    for _ in 0..200 {
        q.launch(&saxpy, KernelArgs::Packed(&args), &config)
            .unwrap();
    }
    let mut back = vec![0f32; n];
    // SAFETY: `back` outlives the synchronisation.
    unsafe {
        g.rt.copy(
            Location::Host(back.as_mut_ptr().cast()),
            Location::Device(0, y),
            n * 4,
            Some(&q),
        )
        .unwrap()
    };
    q.synchronize().unwrap();
    assert!(back.iter().all(|v| *v == 200.0), "{:?}", &back[..4]);
    d.free(x).unwrap();
    d.free(y).unwrap();
}

#[test]
fn reduce_in_dynamic_shared_memory() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let program = d.load_program(&g.ptx).unwrap();
    let reduce = program.kernel("reduce").unwrap();
    let m = 100_000i32;
    let input: Vec<i32> = (1..=m).collect();
    // SAFETY: any i32 is 4 plain bytes.
    let bytes = unsafe { std::slice::from_raw_parts(input.as_ptr().cast::<u8>(), input.len() * 4) };
    let inp = d.alloc(bytes.len(), AllocKind::Device).unwrap();
    let out = d.alloc(8, AllocKind::Device).unwrap();
    upload(d, inp, bytes);
    let want = m as i64 * (m as i64 + 1) / 2;
    // One long long per thread; the last size needs the > 48 KiB opt-in.
    let mut cases = vec![(256u32, 256 * 8u32), (1024, 1024 * 8)];
    if d.info().group_memory_bytes >= 64 * 1024 {
        cases.push((256, 64 * 1024));
    }
    for (threads, shared) in cases {
        d.fill(out, &[0], 8).unwrap();
        let args = reduce_args(inp, m, out);
        let config = LaunchConfig {
            num_groups: [1, 1, 1],
            group_size: [threads, 1, 1],
            dyn_group_memory: shared,
            tripcount: 0,
        };
        d.launch(&reduce, KernelArgs::Packed(&args), &config)
            .unwrap();
        let sum = i64::from_ne_bytes(download(d, out, 8).try_into().unwrap());
        assert_eq!(sum, want, "{threads} threads, {shared} bytes shared");
    }
    d.free(inp).unwrap();
    d.free(out).unwrap();
}

#[test]
fn host_functions_and_events_follow_queue_order() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let program = d.load_program(&g.ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 1 << 22;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    // The result lands in pinned memory: a truly asynchronous copy.
    let pinned = d.alloc(n * 4, AllocKind::Host).unwrap();
    upload(d, x, f32_bytes(&xs));
    d.fill(y, &1f32.to_ne_bytes(), n * 4).unwrap();
    let q1 = Queue::new(Some(d)).unwrap();
    let q2 = Queue::new(Some(d)).unwrap();
    let args = common::saxpy_args(n as i32, 3.0, x, y);
    q1.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear((n / 256) as u32, 256),
    )
    .unwrap();
    // SAFETY: `pinned` is freed only after both queues are synchronised.
    unsafe {
        g.rt.copy(
            Location::Host(pinned.0 as *mut u8),
            Location::Device(0, y),
            n * 4,
            Some(&q1),
        )
        .unwrap()
    };
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(AtomicU32::new(0));
    let (o, s, last) = (order.clone(), seen.clone(), pinned.0 as usize + (n - 1) * 4);
    q1.host_function(Box::new(move || {
        // Runs after the copy: the kernel's last element is on the host.
        // SAFETY: `pinned` is live until after the synchronisations.
        let v = unsafe { *(last as *const f32) };
        s.store(v.to_bits(), Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        o.lock().unwrap().push(1);
    }))
    .unwrap();
    let e = q1.record_event().unwrap();
    q2.wait_event(&e).unwrap();
    let o = order.clone();
    q2.host_function(Box::new(move || o.lock().unwrap().push(2)))
        .unwrap();
    // Host functions of one queue run in order.
    for i in 3..10 {
        let o = order.clone();
        q2.host_function(Box::new(move || o.lock().unwrap().push(i)))
            .unwrap();
    }
    q2.synchronize().unwrap();
    assert_eq!(*order.lock().unwrap(), (1..10).collect::<Vec<_>>());
    assert!(e.is_complete().unwrap());
    e.synchronize().unwrap();
    q1.synchronize().unwrap();
    let want = 3.0 * ((n - 1) % 1000) as f32 + 1.0;
    assert_eq!(f32::from_bits(seen.load(Ordering::SeqCst)), want);
    assert!(q1.is_idle().unwrap() && q2.is_idle().unwrap());
    d.free(x).unwrap();
    d.free(y).unwrap();
    d.free(pinned).unwrap();
}

#[test]
fn bad_pointers_and_sizes_are_errors() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let p = d.alloc(4096, AllocKind::Device).unwrap();
    let buf = vec![0u8; 8192];
    // Past the end of the allocation.
    // SAFETY: `buf` holds 8192 bytes; the copy is refused before it moves.
    let e = unsafe { d.copy_to_device(p, buf.as_ptr(), 4097) }.unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSize, "{e}");
    // SAFETY: as above.
    let e = unsafe { d.copy_to_device(p.offset(4000), buf.as_ptr(), 100) }.unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSize, "{e}");
    // Not device memory at all.
    let bogus = DevicePtr(0x10);
    // SAFETY: as above.
    let e = unsafe {
        g.rt.copy(
            Location::Device(0, bogus),
            Location::Host(buf.as_ptr()),
            8,
            None,
        )
    }
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    // A null host pointer.
    // SAFETY: refused before anything moves.
    let e = unsafe {
        g.rt.copy(
            Location::Device(0, p),
            Location::Host(std::ptr::null()),
            8,
            None,
        )
    }
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidNullPointer, "{e}");
    assert!(d.fill(p, &[1, 2, 3], 4095).is_ok());
    assert!(d.fill(p, &[1], 4097).is_err());
    assert!(d.fill(p, &[1, 2, 3], 4000).is_err(), "size not a multiple");
    // Frees of what is not (or no longer) an allocation.
    assert!(d.free(bogus).is_err());
    d.free(p).unwrap();
    assert!(d.free(p).is_err(), "double free");
    // More memory than any GPU has: the driver refuses, the next works.
    let e = d.alloc(1 << 50, AllocKind::Device).unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources, "{e}");
    let p = d.alloc(1 << 20, AllocKind::Device).unwrap();
    d.free(p).unwrap();
    // Images and kernels that are not there.
    assert!(d.load_program(b"not an image at all").is_err());
    let program = d.load_program(&g.ptx).unwrap();
    let e = program.kernel("no_such_kernel").err().unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    // A group larger than any CUDA block.
    let saxpy = program.kernel("saxpy").unwrap();
    let args = common::saxpy_args(0, 0.0, DevicePtr(0), DevicePtr(0));
    let e = d
        .launch(
            &saxpy,
            KernelArgs::Packed(&args),
            &LaunchConfig::linear(1, 4096),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    // The device still works after all of it.
    let q = Queue::new(Some(d)).unwrap();
    q.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(1, 32),
    )
    .unwrap();
    q.synchronize().unwrap();
}

/// Whether the driver is the CI fake (its globals start zeroed, not with
/// their initialisers).
fn on_fake(g: &Gpu) -> bool {
    device(g).info().name.starts_with("Fake")
}

#[test]
fn globals_are_found_read_and_written() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let program = d.load_program(&g.ptx).unwrap();
    let (p, size) = program.global("scale_table").unwrap();
    assert_eq!(size, 16);
    if !on_fake(g) {
        let init: Vec<u8> = [1i32, 2, 3, 4]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert_eq!(download(d, p, 16), init, "the global's initialiser");
    }
    let v = pattern(16, 7);
    upload(d, p, &v);
    assert_eq!(download(d, p, 16), v);
    assert_eq!(
        program.global("no_such_global").unwrap_err().code(),
        ErrorCode::NotFound
    );
}

/// `Queue::alloc`: stream-ordered memory (`cuMemAllocAsync` where the GPU
/// has memory pools) used by copies and a launch on the same queue, freed
/// in queue order.
#[test]
fn queue_memory_is_used_and_freed_in_queue_order() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let program = d.load_program(&g.ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let q = Queue::new(Some(d)).unwrap();
    let n = 1 << 18;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let mut out = vec![0f32; n];
    for round in 0..3 {
        let x = q.alloc(n * 4).unwrap();
        let y = q.alloc(n * 4).unwrap();
        // Device::free refuses queue memory.
        assert_eq!(d.free(x).unwrap_err().code(), ErrorCode::InvalidArgument);
        let on_dev = |p| Location::Device(d.id(), p);
        // SAFETY: `xs` and `out` outlive the queue's work (synchronised
        // below before either is touched).
        unsafe {
            g.rt.copy(
                on_dev(x),
                Location::Host(xs.as_ptr().cast()),
                n * 4,
                Some(&q),
            )
            .unwrap();
            g.rt.copy(
                on_dev(y),
                Location::Host(xs.as_ptr().cast()),
                n * 4,
                Some(&q),
            )
            .unwrap();
        }
        let args = common::saxpy_args(n as i32, round as f32, x, y);
        q.launch(
            &saxpy,
            KernelArgs::Packed(&args),
            &LaunchConfig::linear(n.div_ceil(256) as u32, 256),
        )
        .unwrap();
        // SAFETY: as above.
        unsafe {
            g.rt.copy(
                Location::Host(out.as_mut_ptr().cast_const().cast()),
                on_dev(y),
                n * 4,
                Some(&q),
            )
            .unwrap();
        }
        q.free(x).unwrap();
        q.free(y).unwrap();
        q.synchronize().unwrap();
        for (i, v) in out.iter().enumerate() {
            assert_eq!(*v, (round as f32 + 1.0) * xs[i], "round {round}, y[{i}]");
        }
        assert_eq!(q.free(x).unwrap_err().code(), ErrorCode::InvalidArgument);
    }
}

/// `1OMP` compile options become the driver's JIT options; the driver
/// accepts them and the kernels still run.
#[test]
fn image_compile_options_are_accepted_by_the_jit() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    use offload_image::metadata::{self, Metadata};
    let mut m = Metadata::new();
    m.insert(metadata::COMPILE_OPTIONS, "-O2 -lineinfo --maxrregcount=40");
    let program = d.load_program(&metadata::write(&m, &g.ptx)).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 4096;
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    d.fill(x, &3f32.to_ne_bytes(), n * 4).unwrap();
    d.fill(y, &1f32.to_ne_bytes(), n * 4).unwrap();
    let args = common::saxpy_args(n as i32, 2.0, x, y);
    d.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(16, 256),
    )
    .unwrap();
    assert!(download_f32(d, y, n).iter().all(|&v| v == 7.0));
    d.free(x).unwrap();
    d.free(y).unwrap();
}

/// LIBOMPTARGET_STACK_SIZE / HEAP_SIZE are set on the primary context
/// (`cuCtxSetLimit`) when a runtime first uses the device, and launches
/// run under them.
#[test]
fn stack_and_heap_limits_are_accepted() {
    let Some(g) = gpu() else { return };
    let config = Config::from_lookup(|k| match k {
        "OFFLOAD_PLUGINS" => Some("cuda".to_string()),
        "LIBOMPTARGET_STACK_SIZE" => Some("4096".to_string()),
        "LIBOMPTARGET_HEAP_SIZE" => Some((64 << 20).to_string()),
        _ => None,
    });
    let rt = Runtime::new(config, &[offload_plugin_cuda::ENTRY]);
    let d = &rt.devices()[0];
    let program = d.load_program(&g.ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 256;
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    d.fill(y, &5f32.to_ne_bytes(), n * 4).unwrap();
    let args = common::saxpy_args(n as i32, 0.0, y, y);
    d.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(1, 256),
    )
    .unwrap();
    assert!(download_f32(d, y, n).iter().all(|&v| v == 5.0));
    d.free(y).unwrap();
}

/// Host threads share the device's primary context: each new thread's
/// first call makes it current there, and work from 8 threads at once
/// (each with its own queue) lands correctly.
#[test]
fn threads_share_the_primary_context() {
    let Some(g) = gpu() else { return };
    let d = device(g);
    let program = d.load_program(&g.ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    std::thread::scope(|s| {
        for t in 0..8u32 {
            let saxpy = &saxpy;
            s.spawn(move || {
                let q = Queue::new(Some(d)).unwrap();
                let n = 10_000 + t as usize;
                let x = d.alloc(n * 4, AllocKind::Device).unwrap();
                let y = d.alloc(n * 4, AllocKind::Device).unwrap();
                for round in 0..20u32 {
                    d.fill(x, &1f32.to_ne_bytes(), n * 4).unwrap();
                    d.fill(y, &0f32.to_ne_bytes(), n * 4).unwrap();
                    let a = (t * 100 + round) as f32;
                    let args = common::saxpy_args(n as i32, a, x, y);
                    q.launch(
                        saxpy,
                        KernelArgs::Packed(&args),
                        &LaunchConfig::linear(n.div_ceil(128) as u32, 128),
                    )
                    .unwrap();
                    q.synchronize().unwrap();
                    let out = download_f32(d, y, n);
                    assert!(out.iter().all(|&v| v == a), "thread {t}, round {round}");
                }
                d.free(x).unwrap();
                d.free(y).unwrap();
            });
        }
    });
}
