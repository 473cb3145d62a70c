//! The CUDA plugin against a fake driver (`tests/fake_cuda/fake_cuda.c`,
//! built with clang-22 and loaded through `OFFLOAD_CUDA_DRIVER`): device
//! enumeration and info, memory, copies, launches (grid, block, shared
//! memory and the packed parameter block reach `cuLaunchKernel`), JIT
//! options, error mapping, threads. Through the core's Runtime, as every
//! face uses it. Without clang-22 the tests are skipped, except under
//! `CI=true`, where `common::clang` fails them.

mod common;

use std::ffi::{c_char, c_int, c_long, CString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use offload_core::plugin::{AllocKind, Backend, DevicePtr, DeviceType, KernelArgs, LaunchConfig};
use offload_core::{Config, ErrorCode, Location, Queue, Runtime};
use offload_image::metadata::{self, Metadata};

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct FakeLaunch {
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    arg_size: usize,
    args: [u8; 1024],
    used_extra: c_int,
    count: c_int,
    dyn_ptr: u64,
    launch_env: [u8; 16],
    buffer_nonzero: c_long,
}

struct Fake {
    lib: libloading::Library,
}

impl Fake {
    fn calls(&self, name: &str) -> i64 {
        let n = CString::new(name).unwrap();
        // SAFETY: a test control function of the fake driver.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const c_char) -> c_long>(b"fake_cuda_calls\0")
                .unwrap();
            f(n.as_ptr())
        }
    }
    fn fail(&self, name: &str, result: i32, count: i32) {
        let n = CString::new(name).unwrap();
        // SAFETY: as above.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const c_char, c_int, c_int)>(b"fake_cuda_fail\0")
                .unwrap();
            f(n.as_ptr(), result, count)
        }
    }
    fn last_launch(&self) -> FakeLaunch {
        let mut l = std::mem::MaybeUninit::<FakeLaunch>::zeroed();
        // SAFETY: as above; fills the whole struct.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*mut FakeLaunch)>(b"fake_cuda_last_launch\0")
                .unwrap();
            f(l.as_mut_ptr());
            l.assume_init()
        }
    }
    /// Look at `bytes` of each launch's reduction buffer (and scribble
    /// over them and the counters afterwards when `scribble`).
    fn inspect_reduction(&self, bytes: usize, scribble: bool) {
        // SAFETY: a test control function of the fake driver.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(usize, c_int)>(b"fake_cuda_inspect_reduction\0")
                .unwrap();
            f(bytes, c_int::from(scribble))
        }
    }
    fn pool_threshold(&self) -> u64 {
        // SAFETY: a test control function of the fake driver.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn() -> u64>(b"fake_cuda_pool_threshold\0")
                .unwrap();
            f()
        }
    }
    fn last_jit_options(&self) -> Vec<(i32, i64)> {
        let mut k = [0 as c_int; 32];
        let mut v = [0 as c_long; 32];
        // SAFETY: as above; writes at most 32 of each.
        let n = unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*mut c_int, *mut c_long, c_int) -> c_int>(
                    b"fake_cuda_last_jit_options\0",
                )
                .unwrap();
            f(k.as_mut_ptr(), v.as_mut_ptr(), 32)
        };
        (0..n as usize).map(|i| (k[i], v[i])).collect()
    }
}

/// The fake driver and one runtime over it (CUDA plugin only), shared by
/// the tests of this file, which run one at a time (the fake's counters
/// and injected failures are process-wide).
fn setup() -> Option<(MutexGuard<'static, ()>, &'static Fake, &'static Runtime)> {
    static SERIAL: Mutex<()> = Mutex::new(());
    static STATE: OnceLock<Option<(Fake, Runtime)>> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let state = STATE.get_or_init(|| {
        let path = common::fake_driver()?;
        // SAFETY: set once, before any runtime of this process reads it,
        // while the other tests wait on the lock above.
        unsafe { std::env::set_var(offload_plugin_cuda::DRIVER_ENV, &path) };
        // SAFETY: as above. Bitcode images compile afresh in each run.
        unsafe { std::env::set_var("OFFLOAD_JIT_CACHE", common::scratch().join("jit")) };
        // SAFETY: the test controls of the same library the plugin loads.
        let lib = unsafe { libloading::Library::new(&path) }.unwrap();
        let config = Config::from_lookup(|k| (k == "OFFLOAD_PLUGINS").then(|| "cuda".to_string()));
        let rt = Runtime::new(config, &[offload_plugin_cuda::ENTRY]);
        assert!(rt.failed_plugins().is_empty(), "{:?}", rt.failed_plugins());
        Some((Fake { lib }, rt))
    });
    let (fake, rt) = state.as_ref()?;
    Some((guard, fake, rt))
}

fn kernels_ptx() -> Option<Vec<u8>> {
    static PTX: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    PTX.get_or_init(|| common::ptx(common::KERNELS_C, "sm_80"))
        .clone()
}

/// `saxpy` of `image` (PTX or bitcode of `common::KERNELS_C`) loaded on
/// `d` (the kernel keeps its program), and device buffers `x` and `y` of
/// `n` floats for it.
struct Saxpy {
    kernel: Arc<offload_core::Kernel>,
    x: DevicePtr,
    y: DevicePtr,
}

fn saxpy_on(d: &Arc<offload_core::Device>, image: &[u8], n: usize) -> Saxpy {
    Saxpy {
        kernel: d.load_program(image).unwrap().kernel("saxpy").unwrap(),
        x: d.alloc(n * 4, AllocKind::Device).unwrap(),
        y: d.alloc(n * 4, AllocKind::Device).unwrap(),
    }
}

#[test]
fn devices_and_their_info_come_from_the_driver() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    assert_eq!(rt.devices().len(), 2);
    for (i, d) in rt.devices().iter().enumerate() {
        let info = d.info();
        assert_eq!(d.plugin_name(), "cuda");
        assert_eq!(info.name, format!("Fake NVIDIA GPU {i}"));
        assert_eq!(info.vendor, "NVIDIA Corporation");
        assert_eq!(info.device_type, DeviceType::Gpu);
        assert_eq!(info.backend, Backend::Cuda);
        assert_eq!(info.triple, "nvptx64-nvidia-cuda");
        assert_eq!(info.arch, "sm_90");
        assert_eq!(info.driver_version, "13.0");
        assert_eq!(info.global_memory_bytes, 80 << 30);
        assert_eq!(info.group_memory_bytes, 232448);
        assert_eq!(info.compute_units, 132);
        assert_eq!(info.max_group_size, 1024);
        assert_eq!(info.max_group_size_per_dim, [1024, 1024, 64]);
        assert_eq!(info.max_num_groups, [i32::MAX as u32, 65535, 65535]);
        assert_eq!(info.clock_mhz, 1980);
        assert_eq!(info.address_bits, 64);
        assert!(!d.shares_host_memory());
    }
    let b = 0x10u8;
    assert_eq!(
        rt.devices()[1].info().uid,
        format!(
            "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, b + 11, b + 12,
            b + 13, b + 14, b + 15
        )
    );
}

#[test]
fn memory_of_every_kind_round_trips() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    for kind in [AllocKind::Device, AllocKind::Host, AllocKind::Shared] {
        let p = d.alloc(data.len(), kind).unwrap();
        common::write(d, p, &data);
        let back: Vec<u8> = common::read(d, p, data.len());
        assert_eq!(back, data, "{kind:?}");
        d.free(p).unwrap();
    }
    assert!(fake.calls("cuMemAllocHost_v2") >= 1);
    assert!(fake.calls("cuMemAllocManaged") >= 1);
    assert!(fake.calls("cuMemcpyHtoDAsync_v2") >= 3);
    assert!(fake.calls("cuMemcpyDtoHAsync_v2") >= 3);
}

#[test]
fn registered_host_memory_is_page_locked_and_copies_name_it() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    assert!(d.registers_host_memory());
    let mut host: Vec<u8> = (0..8192u32).map(|i| (i * 3) as u8).collect();
    let base = DevicePtr(host.as_mut_ptr() as u64);
    let (reg, unreg) = (
        fake.calls("cuMemHostRegister_v2"),
        fake.calls("cuMemHostUnregister"),
    );
    // SAFETY: `host` stays alive and unmoved until the unregistration below.
    unsafe { d.register_host_range(base, host.len(), offload_core::Owner(7)) }.unwrap();
    assert_eq!(fake.calls("cuMemHostRegister_v2"), reg + 1);
    assert!(d.allocation(base).is_some(), "the range is filed");
    let p = d.alloc(host.len(), AllocKind::Device).unwrap();
    common::write(d, p, &host);
    let back: Vec<u8> = common::read(d, p, host.len());
    assert_eq!(back, host);
    d.free(p).unwrap();
    d.unregister_host_range(base).unwrap();
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 1);
    assert!(d.allocation(base).is_none());
    // A second unregistration is refused before it reaches the driver.
    assert!(d.unregister_host_range(base).is_err());
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 1);
}

/// `Device::lock_host` (`llvm_omp_target_lock_mem`): one page-locking
/// for a buffer locked twice and a part of it locked again, undone by the
/// last unlock; a range reaching past a locked one, or an unlock of
/// memory never locked, is refused before it reaches the driver.
#[test]
fn host_locks_are_counted_per_buffer() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let mut host = vec![0u8; 8192];
    let base = DevicePtr(host.as_mut_ptr() as u64);
    let part = DevicePtr(base.0 + 4096);
    let (reg, unreg) = (
        fake.calls("cuMemHostRegister_v2"),
        fake.calls("cuMemHostUnregister"),
    );
    // SAFETY: `host` stays alive and unmoved until the last unlock below.
    unsafe {
        assert_eq!(d.lock_host(base, host.len()).unwrap(), base);
        assert_eq!(d.lock_host(base, host.len()).unwrap(), base);
        assert_eq!(d.lock_host(part, 16).unwrap(), part);
        let e = d.lock_host(part, host.len()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    }
    assert_eq!(fake.calls("cuMemHostRegister_v2"), reg + 1);
    assert!(d.is_locked_host(part));
    d.unlock_host(base).unwrap();
    d.unlock_host(part).unwrap();
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg);
    d.unlock_host(base).unwrap();
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 1);
    assert!(!d.is_locked_host(base));
    assert!(d.unlock_host(base).is_err());
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 1);

    // The same buffer for the second GPU: the driver's one (portable)
    // registration serves both, and goes with the last.
    let other = &rt.devices()[1];
    // SAFETY: as above.
    unsafe {
        d.lock_host(base, host.len()).unwrap();
        other.lock_host(base, host.len()).unwrap();
    }
    assert_eq!(fake.calls("cuMemHostRegister_v2"), reg + 2);
    d.unlock_host(base).unwrap();
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 1);
    other.unlock_host(base).unwrap();
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 2);

    // Host memory the device allocated is page-locked already: counted,
    // never registered again.
    let pinned = d.alloc(4096, AllocKind::Host).unwrap();
    // SAFETY: the allocation stays until the free below.
    unsafe { d.lock_host(pinned, 4096) }.unwrap();
    d.unlock_host(pinned).unwrap();
    assert_eq!(fake.calls("cuMemHostRegister_v2"), reg + 2);
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 2);
    d.free(pinned).unwrap();

    // Memory the program page-locked itself (the driver says "already
    // registered"): locked as it is, and left registered at the unlock.
    fake.fail("cuMemHostRegister_v2", 712, 1);
    // SAFETY: as above.
    unsafe { d.lock_host(base, host.len()) }.unwrap();
    d.unlock_host(base).unwrap();
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 2);
    // Another error is one.
    fake.fail("cuMemHostRegister_v2", 2, 1);
    // SAFETY: as above.
    let e = unsafe { d.lock_host(base, host.len()) }.unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources, "{e}");
    assert!(!d.is_locked_host(base));
}

#[test]
fn fills_use_memset_or_staged_copies() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let n = 3 * 4096;
    let p = d.alloc(n, AllocKind::Device).unwrap();
    // The fake's counters are process-wide: count from here.
    let [d8, d16, d32] =
        ["cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async"].map(|f| fake.calls(f));
    for pattern in [
        &[7u8][..],
        &[1, 2],
        &[1, 2, 3, 4],
        &[9, 8, 7],
        &[5, 5, 5, 5],
    ] {
        d.fill(p, pattern, n / pattern.len() * pattern.len())
            .unwrap();
        let back: Vec<u8> = common::read(d, p, n);
        let want: Vec<u8> = pattern.iter().copied().cycle().take(n).collect();
        assert_eq!(back, want, "pattern {pattern:?}");
    }
    assert!(fake.calls("cuMemsetD8Async") >= d8 + 2);
    assert_eq!(fake.calls("cuMemsetD16Async"), d16 + 1);
    assert_eq!(fake.calls("cuMemsetD32Async"), d32 + 1);
    d.free(p).unwrap();
    // Beyond 1 MiB an odd pattern is staged once, then doubled on the device.
    let n = 3 << 20;
    let p = d.alloc(n, AllocKind::Device).unwrap();
    let before = fake.calls("cuMemcpyDtoDAsync_v2");
    d.fill(p, &[9, 8, 7], n).unwrap();
    assert!(fake.calls("cuMemcpyDtoDAsync_v2") >= before + 2);
    let back: Vec<u8> = common::read(d, p, n);
    assert!(back.chunks(3).all(|c| c == [9, 8, 7]));
    d.free(p).unwrap();
}

#[test]
fn copies_between_devices_are_peer_copies() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let (d0, d1) = (&rt.devices()[0], &rt.devices()[1]);
    let data: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    let a = d0.alloc(data.len(), AllocKind::Device).unwrap();
    let b = d1.alloc(data.len(), AllocKind::Device).unwrap();
    let before = fake.calls("cuMemcpyPeerAsync");
    let mut back = vec![0u8; data.len()];
    // SAFETY: host buffers outlive the synchronous copies.
    unsafe {
        rt.copy(
            Location::Device(0, a),
            Location::Host(data.as_ptr()),
            data.len(),
            None,
        )
        .unwrap();
        rt.copy(
            Location::Device(1, b),
            Location::Device(0, a),
            data.len(),
            None,
        )
        .unwrap();
        rt.copy(
            Location::Host(back.as_mut_ptr()),
            Location::Device(1, b),
            data.len(),
            None,
        )
        .unwrap();
    }
    assert_eq!(back, data);
    assert_eq!(fake.calls("cuMemcpyPeerAsync"), before + 1);
    d0.free(a).unwrap();
    d1.free(b).unwrap();
}

/// LLVM bitcode for NVPTX is compiled to PTX by the core's JIT (clang-22
/// at run time) and loaded by the driver like any PTX image.
#[test]
fn nvptx_bitcode_is_compiled_to_ptx_and_runs() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let Some(bc) = common::bitcode(common::KERNELS_C, "sm_80") else {
        return;
    };
    assert_eq!(&bc[..4], b"BC\xc0\xde");
    let d = &rt.devices()[0];
    let n = 256usize;
    let Saxpy {
        kernel: saxpy,
        x,
        y,
        ..
    } = saxpy_on(d, &bc, n);
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    common::write(d, x, &xs);
    common::write(d, y, &xs);
    let args = common::saxpy_args(n as i32, 3.0, x, y);
    d.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(2, 128),
    )
    .unwrap();
    let out: Vec<f32> = common::read(d, y, n);
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, 4.0 * i as f32);
    }
    // The JIT's output, PTX, is in its cache.
    assert!(std::fs::read_dir(common::scratch().join("jit"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().ends_with(".ptx")));
}

/// OpenMP kernels (with a `<name>_kernel_environment` global) get LLVM's
/// launch sizes for what the program left unset (0 from the OpenMP face)
/// and a warp for a generic kernel's main thread; other kernels keep the
/// sizes they are given, and a 0 there is an error.
/// An OpenMP launch request with `num_teams` and `thread_limit` unset.
fn unset(tripcount: u64) -> LaunchConfig {
    LaunchConfig {
        num_groups: [0, 1, 1],
        group_size: [0, 1, 1],
        dyn_group_memory: 0,
        tripcount,
    }
}

#[test]
fn openmp_kernels_get_llvms_launch_sizes() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let mut omp_ptx = ptx.clone();
    omp_ptx.extend_from_slice(b"\n.global .align 8 .b8 saxpy_kernel_environment[48];\n");
    let d = &rt.devices()[1];
    let n = 1000usize;
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    let zeros = vec![0u8; n * 4];
    common::write(d, x, &zeros);
    common::write(d, y, &zeros);
    let args = common::saxpy_args(n as i32, 2.0, x, y);
    // The kernel environment's third byte: 2 SPMD, 1 generic.
    let openmp = |mode: u8| {
        let program = d.load_program(&omp_ptx).unwrap();
        let (env, size) = program.global("saxpy_kernel_environment").unwrap();
        assert_eq!(size, 48);
        // Three bytes into the 48-byte global.
        common::write(d, env, &[0u8, 0, mode]);
        (program.kernel("saxpy").unwrap(), program)
    };

    let (spmd, _p) = openmp(2);
    // 1000 iterations: too few for 3200 teams, so a warp per team.
    d.launch(&spmd, KernelArgs::Packed(&args), &unset(1000))
        .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([32, 1, 1], [32, 1, 1]));
    // What the OpenMP face prints for LIBOMPTARGET_INFO is what launched.
    let (plan, mode) = spmd.launch_plan(&unset(1000)).unwrap();
    assert_eq!(
        (plan.num_groups, plan.group_size, mode.llvm_name()),
        (l.grid, l.block, "SPMD")
    );
    // Queued launches are resolved the same way.
    let q = Queue::new(Some(d)).unwrap();
    q.launch(&spmd, KernelArgs::Packed(&args), &unset(128))
        .unwrap();
    q.synchronize().unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([4, 1, 1], [32, 1, 1]));
    // No trip count: the default 3200 teams of 128 threads.
    d.launch(&spmd, KernelArgs::Packed(&args), &unset(0))
        .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([3200, 1, 1], [128, 1, 1]));
    // A long loop: teams of 64 threads, as many as the GPU runs at once
    // (the fake's occupancy calculator: 32 blocks of 64 threads on each of
    // 132 SMs), asked of the driver once for every launch of that size.
    let occupancy = "cuOccupancyMaxActiveBlocksPerMultiprocessor";
    let mut asked = 0;
    for i in 0..3 {
        d.launch(&spmd, KernelArgs::Packed(&args), &unset(1 << 27))
            .unwrap();
        let l = fake.last_launch();
        assert_eq!((l.grid, l.block), ([4224, 1, 1], [64, 1, 1]));
        if i == 0 {
            asked = fake.calls(occupancy);
            assert!(asked > 0);
        }
    }
    assert_eq!(fake.calls(occupancy), asked);
    let (plan, _) = spmd.launch_plan(&unset(1 << 27)).unwrap();
    assert_eq!(
        (plan.num_groups, plan.group_size),
        ([4224, 1, 1], [64, 1, 1])
    );
    // With thread_limit(128): 16 blocks of 128 per SM.
    d.launch(
        &spmd,
        KernelArgs::Packed(&args),
        &LaunchConfig {
            tripcount: 1 << 27,
            ..LaunchConfig::linear(0, 128)
        },
    )
    .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([2112, 1, 1], [128, 1, 1]));
    // Clauses given are kept.
    d.launch(
        &spmd,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(4, 64),
    )
    .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([4, 1, 1], [64, 1, 1]));

    let (generic, _q) = openmp(1);
    d.launch(
        &generic,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(4, 64),
    )
    .unwrap();
    assert_eq!(fake.last_launch().block, [96, 1, 1]);
    d.launch(&generic, KernelArgs::Packed(&args), &unset(10))
        .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([10, 1, 1], [128, 1, 1]));

    // Not an OpenMP kernel: sizes as given, and no zero.
    let bare = d.load_program(&ptx).unwrap().kernel("saxpy").unwrap();
    assert_eq!(bare.launch_plan(&unset(1000)), None);
    let e = d
        .launch(&bare, KernelArgs::Packed(&args), &unset(1000))
        .unwrap_err();
    assert!(e.message().contains("zero dimension"), "{e}");
}

#[test]
fn launch_tuning_variables_reach_the_driver() {
    let Some((_g, fake, _rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let mut omp_ptx = ptx;
    omp_ptx.extend_from_slice(b"\n.global .align 8 .b8 saxpy_kernel_environment[48];\n");
    // A runtime of its own, as a program started with these variables.
    let rt = runtime_with(&[
        ("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT", "8"),
        ("OMP_TEAMS_THREAD_LIMIT", "64"),
        ("OMP_NUM_TEAMS", "1000"),
        ("LIBOMPTARGET_SHARED_MEMORY_SIZE", "256"),
    ]);
    let d = &rt.devices()[0];
    let program = d.load_program(&omp_ptx).unwrap();
    let (env, _) = program.global("saxpy_kernel_environment").unwrap();
    // Three bytes into the 48-byte global; SPMD mode.
    common::write(d, env, &[0u8, 0, 2]);
    let k = program.kernel("saxpy").unwrap();
    let n = 128usize;
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let args = common::saxpy_args(n as i32, 1.0, x, x);
    // 128 iterations with at least 8 threads a team: [16] x [8] (LLVM's
    // lit test for the variable expects the same).
    d.launch(&k, KernelArgs::Packed(&args), &unset(128))
        .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block, l.shared), ([16, 1, 1], [8, 1, 1], 256));
    // No loop: teams capped by OMP_NUM_TEAMS, threads by the thread limit.
    d.launch(&k, KernelArgs::Packed(&args), &unset(0)).unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([1000, 1, 1], [64, 1, 1]));
    d.free(x).unwrap();
    drop((k, program));
    rt.shutdown();
}

#[test]
fn ptx_kernels_launch_with_the_packed_buffer_grid_and_shared_memory() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let d = &rt.devices()[1];
    let n = 1000usize;
    let Saxpy {
        kernel: saxpy,
        x,
        y,
        ..
    } = saxpy_on(d, &ptx, n);
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ys: Vec<f32> = vec![1.0; n];
    common::write(d, x, &xs);
    common::write(d, y, &ys);
    let args = common::saxpy_args(n as i32, 2.0, x, y);
    let config = LaunchConfig {
        num_groups: [8, 2, 1],
        group_size: [128, 2, 1],
        dyn_group_memory: 1024,
        tripcount: 0,
    };
    d.launch(&saxpy, KernelArgs::Packed(&args), &config)
        .unwrap();
    let l = fake.last_launch();
    assert_eq!(l.grid, [8, 2, 1]);
    assert_eq!(l.block, [128, 2, 1]);
    assert_eq!(l.shared, 1024);
    assert_eq!(l.used_extra, 1);
    assert_eq!(l.arg_size, args.len());
    assert_eq!(&l.args[..args.len()], &args[..]);
    let out: Vec<f32> = common::read(d, y, n);
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, 2.0 * i as f32 + 1.0);
    }

    // Above 48 KiB of dynamic shared memory the kernel is opted in once.
    let big = LaunchConfig {
        dyn_group_memory: 100 * 1024,
        ..config
    };
    let before = fake.calls("cuFuncSetAttribute");
    d.launch(&saxpy, KernelArgs::Packed(&args), &big).unwrap();
    d.launch(&saxpy, KernelArgs::Packed(&args), &big).unwrap();
    assert_eq!(fake.calls("cuFuncSetAttribute"), before + 1);
    assert_eq!(fake.last_launch().shared, 100 * 1024);

    // Group sizes beyond the kernel's limit fail before the driver.
    let launches = fake.last_launch().count;
    let e = d
        .launch(
            &saxpy,
            KernelArgs::Packed(&args),
            &LaunchConfig::linear(1, 2048),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert_eq!(fake.last_launch().count, launches);

    // The occupancy calculator picks the preferred group size.
    assert_eq!(saxpy.preferred_group_size(0), 512);
    d.free(x).unwrap();
    d.free(y).unwrap();
}

/// A launch that reads device memory back in the same round trip
/// (`Device::launch_reading_back`, how the OpenMP face ends a region with
/// `map(from:)`): the copy that follows is served from that read while no
/// write to the GPU came in between, from any queue (the plugin counts
/// them); after one it reads afresh.
#[test]
fn reads_with_a_launch_are_reused_until_the_gpu_is_written() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let d = &rt.devices()[0];
    let n = 256usize;
    let Saxpy {
        kernel: saxpy,
        x,
        y,
        ..
    } = saxpy_on(d, &ptx, n);
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    common::write(d, x, &xs);
    common::write(d, y, &vec![1.0f32; n]);
    let args = common::saxpy_args(n as i32, 2.0, x, y);
    let config = LaunchConfig::linear(1, n as u32);
    let read_y = || {
        let mut out = vec![0f32; n];
        // SAFETY: `out` holds n floats; `y` is a live allocation of n floats.
        unsafe { d.copy_from_owned_block(out.as_mut_ptr().cast(), y, n * 4) }.unwrap();
        out
    };
    let reads = || fake.calls("cuMemcpyDtoHAsync_v2");

    assert!(d.batch_begin());
    let before = reads();
    d.launch_reading_back(&saxpy, KernelArgs::Packed(&args), &config, || [(y, n * 4)])
        .unwrap();
    assert_eq!(reads(), before + 1, "read with the launch");
    let out = read_y();
    assert_eq!(
        reads(),
        before + 1,
        "the copy after it is served from that read"
    );
    assert_eq!(out[3], 7.0);
    d.batch_end().unwrap();

    // A write to the GPU in between, from another thread (so through
    // another queue), or a fill: read again, and see what was written.
    let fill = |v: f32| d.fill(y, &v.to_ne_bytes(), n * 4).unwrap();
    let other_thread = |v: f32| {
        std::thread::scope(|sc| {
            sc.spawn(|| common::write(d, y, &vec![v; n]));
        })
    };
    let writes: [(&str, &dyn Fn(f32)); 2] = [("another thread", &other_thread), ("a fill", &fill)];
    for (i, (what, write)) in writes.into_iter().enumerate() {
        assert!(d.batch_begin());
        let before = reads();
        d.launch_reading_back(&saxpy, KernelArgs::Packed(&args), &config, || [(y, n * 4)])
            .unwrap();
        assert_eq!(reads(), before + 1);
        let v = 5.0 + i as f32;
        write(v);
        let out = read_y();
        assert_eq!(reads(), before + 2, "{what} wrote after the launch's read");
        assert_eq!(out[3], v, "{what}");
        d.batch_end().unwrap();
    }
    d.free(x).unwrap();
    d.free(y).unwrap();
}

#[test]
fn openmp_word_arguments_and_launch_sizes_reach_the_driver() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let d = &rt.devices()[0];
    let program = d.load_program(&ptx).unwrap();
    let reduce = program.kernel("reduce").unwrap();
    let input: Vec<i32> = (1..=100).collect();
    let inp = d.alloc(400, AllocKind::Device).unwrap();
    let out = d.alloc(8, AllocKind::Device).unwrap();
    common::write(d, inp, &input);
    // One 64-bit word per parameter, as the OpenMP face passes them.
    let words = [inp.0, 100u64, out.0];
    let config = LaunchConfig {
        num_groups: [132, 1, 1],
        group_size: [256, 1, 1],
        dyn_group_memory: 0,
        tripcount: 100,
    };
    d.launch(&reduce, KernelArgs::Words(&words), &config)
        .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block, l.shared), ([132, 1, 1], [256, 1, 1], 0));
    assert_eq!(l.arg_size, 24);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(&l.args[..24], &bytes[..]);
    assert_eq!(common::read::<i64>(d, out, 1), [5050]);
    d.free(inp).unwrap();
    d.free(out).unwrap();
}

#[test]
fn globals_and_missing_symbols() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let d = &rt.devices()[0];
    let program = d.load_program(&ptx).unwrap();
    let (p, size) = program.global("counter").unwrap();
    assert_eq!(size, 4);
    let (_, tsize) = program.global("table").unwrap();
    assert_eq!(tsize, 32);
    let v = 41u32;
    // The global is filed in the index: copies may name it.
    common::write(d, p, &[v]);
    assert_eq!(common::read::<u32>(d, p, 1), [41]);
    let e = program.kernel("nope").err().unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("'nope'"), "{e}");
    let e = program.global("nope").unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotFound);
}

#[test]
fn compile_options_become_jit_options_and_jit_errors_carry_the_log() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let d = &rt.devices()[0];
    let mut m = Metadata::new();
    m.insert(metadata::COMPILE_OPTIONS, "-O2 -lineinfo --maxrregcount=40");
    d.load_program(&metadata::write(&m, &ptx)).unwrap();
    let opts = fake.last_jit_options();
    let keys: Vec<i32> = opts.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, vec![7, 13, 0, 5, 6, 3, 4]);
    assert_eq!(opts[0].1, 2);
    assert_eq!(opts[1].1, 1);
    assert_eq!(opts[2].1, 40);
    assert_eq!(opts[4].1, 16 * 1024);

    let mut bad = ptx.clone();
    bad.extend_from_slice(b"\n// FAKE_INVALID_PTX\n");
    let e = d.load_program(&bad).err().unwrap();
    assert_eq!(e.code(), ErrorCode::CompileFailure);
    assert!(e.message().contains("CUDA_ERROR_INVALID_PTX"), "{e}");
    assert!(e.message().contains("fake syntax error"), "{e}");

    // Cubins and fatbinaries go to the driver as they are.
    d.load_program(&common::cubin(90, 7, false)).unwrap();
    d.load_program(&common::fatbin(&[(2, 90, &common::cubin(90, 7, false))]))
        .unwrap();
    // A cubin for another major is refused before the driver sees it.
    let e = d.load_program(&common::cubin(80, 7, false)).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
}

#[test]
fn driver_errors_map_to_ol_codes_with_the_drivers_names() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    fake.fail("cuMemAlloc_v2", 2, 1);
    let e = d.alloc(1 << 20, AllocKind::Device).unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources);
    assert!(
        e.message()
            .contains("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"),
        "{e}"
    );
    // The next allocation works again.
    let p = d.alloc(1 << 20, AllocKind::Device).unwrap();
    d.free(p).unwrap();

    fake.fail("cuStreamSynchronize", 700, 1);
    let q = Queue::new(Some(d)).unwrap();
    let e = q.synchronize().unwrap_err();
    assert_eq!(e.code(), ErrorCode::BackendFailure);
    assert!(e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{e}");

    fake.fail("cuMemcpyHtoDAsync_v2", 12345, 1);
    let p = d.alloc(64, AllocKind::Device).unwrap();
    let v = [0u8; 64];
    // SAFETY: `v` outlives the copy.
    let e = unsafe { d.copy_to_device(p, v.as_ptr(), 64) }.unwrap_err();
    assert_eq!(e.code(), ErrorCode::BackendFailure);
    assert!(e.message().contains("CUresult 12345"), "{e}");
    d.free(p).unwrap();
}

#[test]
fn queues_events_and_host_functions() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let q1 = Queue::new(Some(d)).unwrap();
    let q2 = Queue::new(Some(&rt.devices()[1])).unwrap();
    let hit = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hit.clone();
    q1.host_function(Box::new(move || {
        h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }))
    .unwrap();
    // A panicking host function stops at the trampoline.
    q1.host_function(Box::new(|| panic!("host function panics")))
        .unwrap();
    let e = q1.record_event().unwrap();
    q2.wait_event(&e).unwrap();
    q2.synchronize().unwrap();
    q1.synchronize().unwrap();
    assert!(e.is_complete().unwrap());
    assert!(q1.is_idle().unwrap());
    assert_eq!(hit.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(fake.calls("cuLaunchHostFunc") >= 2);
    assert!(fake.calls("cuEventRecord") >= 1);
}

#[test]
fn threads_share_the_primary_contexts() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let programs: Vec<_> = rt
        .devices()
        .iter()
        .map(|d| d.load_program(&ptx).unwrap())
        .collect();
    let retains = fake.calls("cuDevicePrimaryCtxRetain");
    std::thread::scope(|s| {
        for t in 0..8usize {
            let programs = &programs;
            s.spawn(move || {
                // Alternate devices: each call must make its own context current.
                for round in 0..20usize {
                    let i = (t + round) % 2;
                    let d = &rt.devices()[i];
                    let n = 64usize;
                    let xs = vec![1.0f32; n];
                    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
                    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
                    d.fill(y, &0f32.to_ne_bytes(), n * 4).unwrap();
                    common::write(d, x, &xs);
                    let k = programs[i].kernel("saxpy").unwrap();
                    let args = common::saxpy_args(n as i32, t as f32, x, y);
                    d.launch(&k, KernelArgs::Packed(&args), &LaunchConfig::linear(1, 64))
                        .unwrap();
                    let out: Vec<f32> = common::read(d, y, n);
                    assert!(out.iter().all(|&v| v == t as f32));
                    d.free(x).unwrap();
                    d.free(y).unwrap();
                }
            });
        }
    });
    // Each device's primary context was retained once, whatever the threads.
    assert!(fake.calls("cuDevicePrimaryCtxRetain") - retains <= 0);
    // Every retain is one runtime's first use of a device (other tests'
    // runtimes release theirs when dropped).
    let held = fake.calls("cuDevicePrimaryCtxRetain") - fake.calls("cuDevicePrimaryCtxRelease_v2");
    assert!(held <= 2, "{held} primary contexts held");
}

/// The plugin sets a context only when the thread's current one differs,
/// and asks the driver each time: a context switched by other code on the
/// thread (the CUDA runtime through an interop object, say) between two
/// of our calls is put right before the next.
#[test]
fn contexts_are_set_only_when_another_is_current() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let d = &rt.devices()[0];
    let n = 64usize;
    let Saxpy {
        kernel: saxpy,
        x,
        y,
        ..
    } = saxpy_on(d, &ptx, n);
    let q = Queue::new(Some(d)).unwrap();
    let run = |a: f32| {
        d.fill(y, &0f32.to_ne_bytes(), n * 4).unwrap();
        d.fill(x, &1f32.to_ne_bytes(), n * 4).unwrap();
        let args = common::saxpy_args(n as i32, a, x, y);
        q.launch(
            &saxpy,
            KernelArgs::Packed(&args),
            &LaunchConfig::linear(1, 64),
        )
        .unwrap();
        q.synchronize().unwrap();
        let out: Vec<f32> = common::read(d, y, n);
        assert!(out.iter().all(|&v| v == a), "{out:?}");
    };
    run(1.0);
    // Already current on this thread: no cuCtxSetCurrent at all.
    let sets = fake.calls("cuCtxSetCurrent");
    for _ in 0..10 {
        run(2.0);
    }
    assert_eq!(fake.calls("cuCtxSetCurrent"), sets);
    assert!(fake.calls("cuCtxGetCurrent") >= 10 * 5);

    // SAFETY: the fake's own entry points, called as foreign code on this
    // thread would: clear the current context, then make device 1's current.
    let set_current = |ctx: *mut std::ffi::c_void| unsafe {
        let f = fake
            .lib
            .get::<unsafe extern "C" fn(*mut std::ffi::c_void) -> c_int>(b"cuCtxSetCurrent\0")
            .unwrap();
        assert_eq!(f(ctx), 0);
    };
    set_current(std::ptr::null_mut());
    run(3.0);
    let mut other: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: as above; writes one context handle (device 1 exists).
    unsafe {
        let retain = fake
            .lib
            .get::<unsafe extern "C" fn(*mut *mut std::ffi::c_void, c_int) -> c_int>(
                b"cuDevicePrimaryCtxRetain\0",
            )
            .unwrap();
        assert_eq!(retain(&mut other, 1), 0);
    }
    set_current(other);
    run(4.0);
    // SAFETY: balances the retain above.
    unsafe {
        let release = fake
            .lib
            .get::<unsafe extern "C" fn(c_int) -> c_int>(b"cuDevicePrimaryCtxRelease_v2\0")
            .unwrap();
        assert_eq!(release(1), 0);
    }
    drop(q);
    d.free(x).unwrap();
    d.free(y).unwrap();
}

/// A runtime of its own over the fake driver, configured by `env`.
fn runtime_with(env: &[(&str, &str)]) -> Runtime {
    let config = Config::from_lookup(|k| {
        std::iter::once(("OFFLOAD_PLUGINS", "cuda"))
            .chain(env.iter().copied())
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.to_string())
    });
    Runtime::new(config, &[offload_plugin_cuda::ENTRY])
}

#[test]
fn stack_and_heap_sizes_are_set_on_the_context() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let limit = |device: c_int, which: c_int| -> usize {
        // SAFETY: a test control function of the fake driver.
        unsafe {
            let f = fake
                .lib
                .get::<unsafe extern "C" fn(c_int, c_int) -> usize>(b"fake_cuda_limit\0")
                .unwrap();
            f(device, which)
        }
    };
    let sized = runtime_with(&[
        ("LIBOMPTARGET_STACK_SIZE", "8192"),
        ("LIBOMPTARGET_HEAP_SIZE", "16777216"),
    ]);
    let p = sized.devices()[1].alloc(64, AllocKind::Device).unwrap();
    assert_eq!((limit(1, 0), limit(1, 2)), (8192, 16 << 20));
    sized.devices()[1].free(p).unwrap();
    sized.shutdown();

    // A stack the driver refuses: the GPU reports why on every use, as a
    // device that failed to start; other runtimes are unaffected.
    let refused = runtime_with(&[("LIBOMPTARGET_STACK_SIZE", "1048576")]);
    for _ in 0..2 {
        let e = refused.devices()[0]
            .alloc(64, AllocKind::Device)
            .unwrap_err();
        assert!(
            e.message()
                .contains("cuCtxSetLimit(LIBOMPTARGET_STACK_SIZE=1048576)")
                && e.message().contains("CUDA_ERROR_INVALID_VALUE"),
            "{e}"
        );
    }
    refused.shutdown();
    let p = rt.devices()[0].alloc(64, AllocKind::Device).unwrap();
    rt.devices()[0].free(p).unwrap();
}

#[test]
fn queue_memory_is_stream_ordered_with_memory_pools() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let q = Queue::new(Some(d)).unwrap();
    let (allocs, frees, plain, pools) = (
        fake.calls("cuMemAllocFromPoolAsync"),
        fake.calls("cuMemFreeAsync"),
        fake.calls("cuMemAlloc_v2"),
        fake.calls("cuMemPoolCreate"),
    );
    let p = q.alloc(4096).unwrap();
    // From the plugin's own pool, which keeps freed memory (release
    // threshold u64::MAX), made once per device.
    assert_eq!(fake.calls("cuMemAllocFromPoolAsync"), allocs + 1);
    assert_eq!(fake.calls("cuMemAlloc_v2"), plain);
    assert!(fake.calls("cuMemPoolCreate") <= pools + 1);
    assert_eq!(fake.pool_threshold(), u64::MAX);
    let again = q.alloc(64).unwrap();
    q.free(again).unwrap();
    assert!(fake.calls("cuMemPoolCreate") <= pools + 1);
    // Usable by the queue's work, and a live range for the range checks.
    q.fill(p, &7u32.to_ne_bytes(), 4096).unwrap();
    q.synchronize().unwrap();
    let out: Vec<u32> = common::read(d, p, 1024);
    assert!(out.iter().all(|&v| v == 7));
    assert_eq!(d.allocation(p).map(|a| a.size), Some(4096));
    let e = d.free(p).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    // Freed in stream order, without a synchronisation.
    let syncs = fake.calls("cuStreamSynchronize");
    q.free(p).unwrap();
    assert_eq!(fake.calls("cuMemFreeAsync"), frees + 2);
    assert_eq!(fake.calls("cuStreamSynchronize"), syncs);
    assert!(d.allocation(p).is_none());
    assert_eq!(q.free(p).unwrap_err().code(), ErrorCode::InvalidArgument);
    // A driver failure is the driver's error, and nothing is filed.
    fake.fail("cuMemAllocFromPoolAsync", 2, 1);
    let e = q.alloc(64).unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources);
    assert!(e.message().contains("cuMemAllocFromPoolAsync"), "{e}");

    // A plain allocation that runs out of memory gets back what the pool
    // keeps and tries once more.
    let (trims, syncs) = (
        fake.calls("cuMemPoolTrimTo"),
        fake.calls("cuCtxSynchronize"),
    );
    fake.fail("cuMemAlloc_v2", 2, 1);
    let p = d.alloc(1 << 20, AllocKind::Device).unwrap();
    assert_eq!(fake.calls("cuMemPoolTrimTo"), trims + 1);
    // The device was synchronised first (pending frees reach the pool).
    assert_eq!(fake.calls("cuCtxSynchronize"), syncs + 1);
    d.free(p).unwrap();
    // Out of memory twice: the driver's error, after one trim.
    fake.fail("cuMemAlloc_v2", 2, 2);
    let e = d.alloc(1 << 20, AllocKind::Device).unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources);
    assert_eq!(fake.calls("cuMemPoolTrimTo"), trims + 2);
}

/// Where the driver refuses to make a pool, queue memory comes from the
/// device's default pool (`cuMemAllocAsync`), and an out-of-memory plain
/// allocation has nothing to trim.
#[test]
fn queue_memory_falls_back_to_the_default_pool() {
    let Some((_g, fake, _rt)) = setup() else {
        return;
    };
    let rt = runtime_with(&[]);
    let d = &rt.devices()[0];
    let q = Queue::new(Some(d)).unwrap();
    fake.fail("cuMemPoolCreate", 801, 1);
    let (ordered, pooled) = (
        fake.calls("cuMemAllocAsync"),
        fake.calls("cuMemAllocFromPoolAsync"),
    );
    let p = q.alloc(256).unwrap();
    assert_eq!(fake.calls("cuMemAllocAsync"), ordered + 1);
    assert_eq!(fake.calls("cuMemAllocFromPoolAsync"), pooled);
    q.free(p).unwrap();
    q.synchronize().unwrap();
    let trims = fake.calls("cuMemPoolTrimTo");
    fake.fail("cuMemAlloc_v2", 2, 1);
    let e = d.alloc(64, AllocKind::Device).unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources);
    assert_eq!(fake.calls("cuMemPoolTrimTo"), trims);
    drop(q);
    rt.shutdown();
}

#[test]
fn queue_memory_without_memory_pools_is_freed_after_a_sync() {
    let Some((_g, fake, _rt)) = setup() else {
        return;
    };
    // SAFETY: read by the fake's attribute query; the tests of this file
    // run one at a time and the variable is removed before the lock goes.
    unsafe { std::env::set_var("FAKE_CUDA_NO_POOLS", "1") };
    let rt = runtime_with(&[]);
    let d = &rt.devices()[0];
    let q = Queue::new(Some(d)).unwrap();
    let (ordered, plain, syncs) = (
        fake.calls("cuMemAllocAsync"),
        fake.calls("cuMemAlloc_v2"),
        fake.calls("cuStreamSynchronize"),
    );
    let p = q.alloc(256).unwrap();
    // SAFETY: as above.
    unsafe { std::env::remove_var("FAKE_CUDA_NO_POOLS") };
    assert_eq!(fake.calls("cuMemAllocAsync"), ordered);
    assert_eq!(fake.calls("cuMemAlloc_v2"), plain + 1);
    q.fill(p, &[1], 256).unwrap();
    q.free(p).unwrap();
    assert!(fake.calls("cuStreamSynchronize") > syncs);
    assert!(d.allocation(p).is_none());
    drop(q);
    rt.shutdown();
}

// ---------------------------------------------------------------- OpenMP
// What the plugin does for images built with an OpenMP device runtime:
// kernel environments read whole, the device environment written at
// load, launch environments for teams reductions, limits checked.

/// The kernels' PTX plus OpenMP kernels the fake cannot run (so that their
/// launches only record what they were given): `omp_sum` and `omp_plain`
/// with kernel environments, `omp_short` with one of 40 bytes, and the
/// image's device environment.
fn openmp_ptx(device_env_size: usize) -> Option<Vec<u8>> {
    let mut p = kernels_ptx()?;
    p.extend_from_slice(
        format!(
            "
.visible .entry omp_sum()\n{{\n ret;\n}}
.visible .entry omp_plain()\n{{\n ret;\n}}
.visible .entry omp_short()\n{{\n ret;\n}}
.global .align 8 .b8 omp_sum_kernel_environment[48];
.global .align 8 .b8 omp_plain_kernel_environment[48];
.global .align 8 .b8 omp_short_kernel_environment[40];
.global .align 8 .b8 __omp_rtl_device_environment[{device_env_size}];
"
        )
        .as_bytes(),
    );
    Some(p)
}

/// A kernel environment: flags, then MinThreads, MaxThreads, MinTeams,
/// MaxTeams, ReductionDataSize, ReductionBufferLength.
fn kernel_env(mode: u8, ints: [i32; 6]) -> [u8; 48] {
    let mut b = [0u8; 48];
    b[2] = mode;
    for (i, v) in ints.iter().enumerate() {
        b[4 + 4 * i..8 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// `kernel` of `program`, its environment set to `env` first (as clang's
/// initialiser would have it; the fake zeroes globals).
fn omp_kernel(
    d: &offload_core::Device,
    program: &Arc<offload_core::Program>,
    kernel: &str,
    env: &[u8],
) -> offload_core::Result<Arc<offload_core::Kernel>> {
    let (g, size) = program
        .global(&format!("{kernel}_kernel_environment"))
        .unwrap();
    common::write(d, g, &env[..env.len().min(size as usize)]);
    program.kernel(kernel)
}

const NO_ENV: u64 = offload_core::openmp_env::NO_LAUNCH_ENVIRONMENT;

#[test]
fn teams_reductions_get_a_zeroed_launch_environment_reused_across_launches() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = openmp_ptx(48) else { return };
    let d = &rt.devices()[0];
    let program = d.load_program(&ptx).unwrap();
    // `reduction(+:double)`: 8 bytes a team, 1024 records (clang-22's).
    let sum = omp_kernel(
        d,
        &program,
        "omp_sum",
        &kernel_env(2, [1, 128, 0, 0, 8, 1024]),
    )
    .unwrap();
    let plain = omp_kernel(
        d,
        &program,
        "omp_plain",
        &kernel_env(2, [1, 128, 0, 0, 0, 0]),
    )
    .unwrap();
    fake.inspect_reduction(8 * 1024, true);
    let words = [NO_ENV, 42];
    let launch = |k: &offload_core::Kernel| {
        d.launch(k, KernelArgs::Words(&words), &unset(0)).unwrap();
        fake.last_launch()
    };
    let (allocs, memsets) = (fake.calls("cuMemAlloc_v2"), fake.calls("cuMemsetD8Async"));
    let first = launch(&sum);
    let env = first.dyn_ptr;
    assert!(env != 0 && env != NO_ENV, "{env:#x}");
    // Counters 0, the buffer's address, every byte of it 0.
    assert_eq!(&first.launch_env[..8], &[0; 8]);
    let buffer = u64::from_le_bytes(first.launch_env[8..].try_into().unwrap());
    assert_ne!(buffer, 0);
    assert_eq!(first.buffer_nonzero, 0);
    // The other arguments are as given; the sizes as LLVM picks them.
    assert_eq!(&first.args[8..16], &42u64.to_ne_bytes());
    assert_eq!((first.grid, first.block), ([3200, 1, 1], [128, 1, 1]));
    assert_eq!(fake.calls("cuMemAlloc_v2"), allocs + 1);
    // The "kernel" left the buffer and counters dirty; a hot loop reuses
    // the same memory, zeroed again before each launch, and allocates
    // nothing more.
    for _ in 0..10 {
        let l = launch(&sum);
        assert_eq!(l.dyn_ptr, env);
        assert_eq!(&l.launch_env[..8], &[0; 8]);
        assert_eq!(&l.launch_env[8..], &buffer.to_le_bytes());
        assert_eq!(l.buffer_nonzero, 0);
    }
    assert_eq!(fake.calls("cuMemAlloc_v2"), allocs + 1);
    assert_eq!(fake.calls("cuMemsetD8Async"), memsets + 11);
    // Queued launches too, on another stream (ordered after the last use).
    let q = Queue::new(Some(d)).unwrap();
    let waits = fake.calls("cuStreamWaitEvent");
    q.launch(&sum, KernelArgs::Words(&words), &unset(0))
        .unwrap();
    q.synchronize().unwrap();
    let l = fake.last_launch();
    assert_eq!((l.dyn_ptr, l.buffer_nonzero), (env, 0));
    assert_eq!(fake.calls("cuStreamWaitEvent"), waits + 1);
    // Without a teams reduction: LLVM's "none", (void *)~0, as given.
    let l = launch(&plain);
    assert_eq!(l.dyn_ptr, NO_ENV);
    // A launch without the "none" word (an older ABI, no dyn_ptr) is not
    // touched.
    fake.inspect_reduction(0, false);
    d.launch(&sum, KernelArgs::Words(&[7, 42]), &unset(0))
        .unwrap();
    assert_eq!(fake.last_launch().dyn_ptr, 7);
    // Memory for a launch environment that cannot be had: the launch
    // fails with the driver's error, nothing runs, and the runtime goes on.
    let big = omp_kernel(
        d,
        &program,
        "omp_sum",
        &kernel_env(2, [1, 128, 0, 0, 64, 1024]),
    );
    let big = big.unwrap();
    let count = fake.last_launch().count;
    // (Twice: a plain allocation trims the queue pool and tries again.)
    fake.fail("cuMemAlloc_v2", 2, 2);
    let e = d
        .launch(&big, KernelArgs::Words(&words), &unset(0))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources, "{e}");
    assert_eq!(fake.last_launch().count, count);
    fake.inspect_reduction(64 * 1024, false);
    let l = launch(&big);
    assert!(l.dyn_ptr != env && l.buffer_nonzero == 0);
    // The smaller kernel keeps the smallest block that fits.
    fake.inspect_reduction(8 * 1024, false);
    assert_eq!(launch(&sum).dyn_ptr, env);
    fake.inspect_reduction(0, false);
}

#[test]
fn the_device_environment_is_written_at_load() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = openmp_ptx(48) else { return };
    let read = |rt: &Runtime, dev: usize| -> Vec<u8> {
        let d = &rt.devices()[dev];
        let program = d.load_program(&ptx).unwrap();
        let (g, size) = program.global("__omp_rtl_device_environment").unwrap();
        assert_eq!(size, 48);
        common::read::<u8>(d, g, 48)
    };
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let b = read(rt, 1);
    // DeviceDebugKind 0, 2 GPUs, the second, no DynamicMemSize (LLVM 22).
    assert_eq!(
        (u32_at(&b, 0), u32_at(&b, 4), u32_at(&b, 8), u32_at(&b, 12)),
        (0, 2, 1, 0)
    );
    // The 1 GHz %globaltimer clock, no indirect-call table, and
    // 132 SMs x 2048 threads / 32 = 8448 resident warps.
    assert_eq!(u64_at(&b, 16), 1_000_000_000);
    assert_eq!((u64_at(&b, 24), u64_at(&b, 32)), (0, 0));
    assert_eq!(u64_at(&b, 40), 8448);
    assert_eq!(u32_at(&read(rt, 0), 8), 0);
    // LIBOMPTARGET_DEVICE_RTL_DEBUG reaches the device.
    let debug = runtime_with(&[("LIBOMPTARGET_DEVICE_RTL_DEBUG", "5")]);
    assert_eq!(u32_at(&read(&debug, 0), 0), 5);
    debug.shutdown();
    // Another runtime's layout: the load fails, naming the image.
    let Some(bad) = openmp_ptx(40) else { return };
    let e = rt.devices()[0].load_program(&bad).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(
        e.message().contains("CUDA device 0: the image (PTX)")
            && e.message()
                .contains("__omp_rtl_device_environment is 40 bytes, expected 48"),
        "{e}"
    );
    // Images without one (ol* PTX) load as before.
    rt.devices()[0]
        .load_program(&kernels_ptx().unwrap())
        .unwrap();
}

#[test]
fn kernel_environments_of_unknown_layouts_are_errors_naming_the_kernel() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = openmp_ptx(48) else { return };
    let d = &rt.devices()[0];
    let program = d.load_program(&ptx).unwrap();
    let e = omp_kernel(d, &program, "omp_short", &[0u8; 40])
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(
        e.message().contains("kernel 'omp_short'")
            && e.message().contains("is 40 bytes, expected 48")
            && e.message().contains("another OpenMP device runtime"),
        "{e}"
    );
    let e = omp_kernel(d, &program, "omp_plain", &kernel_env(9, [0; 6]))
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(
        e.message()
            .contains("kernel 'omp_plain': unknown execution mode 9"),
        "{e}"
    );
    // The same program's good kernels work.
    let k = omp_kernel(
        d,
        &program,
        "omp_plain",
        &kernel_env(1, [1, 64, 0, 0, 0, 0]),
    )
    .unwrap();
    // Generic with thread_limit(64) (MaxThreads 64): the main thread's
    // warp does not raise it past 64, as LLVM.
    d.launch(
        &k,
        KernelArgs::Words(&[NO_ENV]),
        &LaunchConfig::linear(4, 64),
    )
    .unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([4, 1, 1], [64, 1, 1]));
    let (plan, mode) = k.launch_plan(&LaunchConfig::linear(4, 64)).unwrap();
    assert_eq!(
        (plan.num_groups, plan.group_size, mode.llvm_name()),
        (l.grid, l.block, "Generic")
    );
    // Bare (ompx_bare): every dimension as given, shown as LLVM's "BARE".
    let bare = omp_kernel(d, &program, "omp_plain", &kernel_env(0, [0; 6])).unwrap();
    let c = LaunchConfig {
        num_groups: [2, 3, 4],
        group_size: [8, 4, 2],
        dyn_group_memory: 0,
        tripcount: 0,
    };
    d.launch(&bare, KernelArgs::Words(&[NO_ENV]), &c).unwrap();
    let l = fake.last_launch();
    assert_eq!((l.grid, l.block), ([2, 3, 4], [8, 4, 2]));
    assert_eq!(bare.launch_plan(&c).unwrap().1.llvm_name(), "BARE");
}

#[test]
fn launches_beyond_the_gpus_limits_are_errors_naming_the_kernel() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(ptx) = kernels_ptx() else { return };
    let d = &rt.devices()[0];
    let program = d.load_program(&ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let x = d.alloc(64, AllocKind::Device).unwrap();
    let args = common::saxpy_args(16, 1.0, x, x);
    let launches = fake.last_launch().count;
    let bad = |c: LaunchConfig, what: &[&str]| {
        let e = d.launch(&saxpy, KernelArgs::Packed(&args), &c).unwrap_err();
        assert!(e.message().contains("kernel 'saxpy'"), "{e}");
        for w in what {
            assert!(e.message().contains(w), "{e}");
        }
        e
    };
    bad(
        LaunchConfig::linear(1, 2048),
        &["group size [2048, 1, 1]", "1024 threads per block"],
    );
    let mut c = LaunchConfig::linear(1, 1);
    c.group_size = [32, 32, 2];
    bad(c, &["its limit of 1024 threads per block"]);
    let mut c = LaunchConfig::linear(1, 1);
    c.group_size = [1, 1, 128];
    bad(c, &["[1, 1, 128]", "[1024, 1024, 64]"]);
    let mut c = LaunchConfig::linear(1, 1);
    c.num_groups = [1, 70_000, 1];
    bad(c, &["grid of [1, 70000, 1] blocks", "65535"]);
    let mut c = LaunchConfig::linear(1, 32);
    c.dyn_group_memory = 300_000;
    let e = bad(
        c,
        &[
            "300000 bytes of dynamic shared memory",
            "232448 bytes per block",
        ],
    );
    assert_eq!(e.code(), ErrorCode::OutOfResources);
    // Nothing reached the driver, and the runtime goes on.
    assert_eq!(fake.last_launch().count, launches);
    d.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(1, 16),
    )
    .unwrap();
    assert_eq!(fake.last_launch().count, launches + 1);
    d.free(x).unwrap();
}

#[test]
fn a_missing_device_runtime_entry_point_is_named() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let Some(mut ptx) = kernels_ptx() else { return };
    ptx.extend_from_slice(
        b"\n.extern .func  (.param .b32 func_retval0) __kmpc_parallel_60\n(\n .param .b64 p\n);\n",
    );
    let e = rt.devices()[0].load_program(&ptx).err().unwrap();
    assert_eq!(e.code(), ErrorCode::CompileFailure);
    assert!(
        e.message()
            .contains("the image references '__kmpc_parallel_60', which it does not define")
            && e.message()
                .contains("Unresolved extern function '__kmpc_parallel_60'"),
        "{e}"
    );
    // The device stays usable.
    rt.devices()[0]
        .load_program(&kernels_ptx().unwrap())
        .unwrap();
}
