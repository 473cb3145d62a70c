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
        let mut back = vec![0u8; data.len()];
        // SAFETY: both host buffers outlive the synchronous copies.
        unsafe {
            d.copy_to_device(p, data.as_ptr(), data.len()).unwrap();
            d.copy_from_device(back.as_mut_ptr(), p, data.len())
                .unwrap();
        }
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
    let mut back = vec![0u8; host.len()];
    // SAFETY: both host ranges outlive the synchronous copies.
    unsafe {
        d.copy_to_device(p, host.as_ptr(), host.len()).unwrap();
        d.copy_from_device(back.as_mut_ptr(), p, back.len())
            .unwrap();
    }
    assert_eq!(back, host);
    d.free(p).unwrap();
    d.unregister_host_range(base).unwrap();
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 1);
    assert!(d.allocation(base).is_none());
    // A second unregistration is refused before it reaches the driver.
    assert!(d.unregister_host_range(base).is_err());
    assert_eq!(fake.calls("cuMemHostUnregister"), unreg + 1);
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
        let mut back = vec![0u8; n];
        // SAFETY: `back` outlives the copy.
        unsafe { d.copy_from_device(back.as_mut_ptr(), p, n).unwrap() };
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
    let mut back = vec![0u8; n];
    // SAFETY: `back` outlives the copy.
    unsafe { d.copy_from_device(back.as_mut_ptr(), p, n).unwrap() };
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
    let program = d.load_program(&bc).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 256usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    // SAFETY: host buffers outlive the synchronous copies.
    unsafe {
        d.copy_to_device(x, xs.as_ptr().cast(), n * 4).unwrap();
        d.copy_to_device(y, xs.as_ptr().cast(), n * 4).unwrap();
    }
    let args = common::saxpy_args(n as i32, 3.0, x, y);
    d.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(2, 128),
    )
    .unwrap();
    let mut out = vec![0f32; n];
    // SAFETY: `out` outlives the copy.
    unsafe {
        d.copy_from_device(out.as_mut_ptr().cast(), y, n * 4)
            .unwrap()
    };
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
    // SAFETY: `zeros` outlives the synchronous copies.
    unsafe {
        d.copy_to_device(x, zeros.as_ptr(), n * 4).unwrap();
        d.copy_to_device(y, zeros.as_ptr(), n * 4).unwrap();
    }
    let args = common::saxpy_args(n as i32, 2.0, x, y);
    // The kernel environment's third byte: 2 SPMD, 1 generic.
    let openmp = |mode: u8| {
        let program = d.load_program(&omp_ptx).unwrap();
        let (env, size) = program.global("saxpy_kernel_environment").unwrap();
        assert_eq!(size, 48);
        // SAFETY: three bytes into the 48-byte global.
        unsafe { d.copy_to_device(env, [0u8, 0, mode].as_ptr(), 3).unwrap() };
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
    // SAFETY: three bytes into the 48-byte global; SPMD mode.
    unsafe { d.copy_to_device(env, [0u8, 0, 2].as_ptr(), 3).unwrap() };
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
    let program = d.load_program(&ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 1000usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ys: Vec<f32> = vec![1.0; n];
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    // SAFETY: host buffers outlive the synchronous copies.
    unsafe {
        d.copy_to_device(x, xs.as_ptr().cast(), n * 4).unwrap();
        d.copy_to_device(y, ys.as_ptr().cast(), n * 4).unwrap();
    }
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
    let mut out = vec![0f32; n];
    // SAFETY: `out` outlives the copy.
    unsafe {
        d.copy_from_device(out.as_mut_ptr().cast(), y, n * 4)
            .unwrap()
    };
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
    // SAFETY: host buffer outlives the copy.
    unsafe { d.copy_to_device(inp, input.as_ptr().cast(), 400).unwrap() };
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
    let mut sum = 0i64;
    // SAFETY: `sum` outlives the copy.
    unsafe {
        d.copy_from_device((&mut sum as *mut i64).cast(), out, 8)
            .unwrap()
    };
    assert_eq!(sum, 5050);
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
    let mut back = 0u32;
    // SAFETY: host values outlive the copies; the global is filed in the index.
    unsafe {
        d.copy_to_device(p, (&v as *const u32).cast(), 4).unwrap();
        d.copy_from_device((&mut back as *mut u32).cast(), p, 4)
            .unwrap();
    }
    assert_eq!(back, 41);
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
                    // SAFETY: host buffers outlive the synchronous copies.
                    unsafe { d.copy_to_device(x, xs.as_ptr().cast(), n * 4).unwrap() };
                    let k = programs[i].kernel("saxpy").unwrap();
                    let args = common::saxpy_args(n as i32, t as f32, x, y);
                    d.launch(&k, KernelArgs::Packed(&args), &LaunchConfig::linear(1, 64))
                        .unwrap();
                    let mut out = vec![0f32; n];
                    // SAFETY: as above.
                    unsafe {
                        d.copy_from_device(out.as_mut_ptr().cast(), y, n * 4)
                            .unwrap()
                    };
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
    let program = d.load_program(&ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 64usize;
    let x = d.alloc(n * 4, AllocKind::Device).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
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
        let mut out = vec![0f32; n];
        // SAFETY: `out` outlives the synchronous copy.
        unsafe {
            d.copy_from_device(out.as_mut_ptr().cast(), y, n * 4)
                .unwrap()
        };
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
    let mut out = vec![0u32; 1024];
    // SAFETY: `out` outlives the synchronous copy.
    unsafe {
        d.copy_from_device(out.as_mut_ptr().cast(), p, 4096)
            .unwrap()
    };
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
