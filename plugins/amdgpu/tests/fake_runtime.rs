//! The AMDGPU plugin against a fake HSA runtime (`tests/fake_hsa/fake_hsa.c`,
//! built with clang-22 and loaded through `OFFLOAD_HSA_RUNTIME`), through
//! the core's Runtime as every face uses it: agents and pools, memory and
//! copies, code objects built by clang-22 for gfx90a (OpenCL kernels the
//! fake runs, and an OpenMP program with our device runtime), kernel
//! arguments with the hidden ones where the metadata puts them, the
//! OpenMP device and launch environments, faults and bad input. Without
//! clang-22 the tests are skipped, except under `CI=true`.

use std::ffi::{c_char, c_int, c_long, c_void, CString};
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

use offload_core::openmp_env::NO_LAUNCH_ENVIRONMENT;
use offload_core::plugin::{AllocKind, Backend, DevicePtr, DeviceType, KernelArgs, LaunchConfig};
use offload_core::{Config, ErrorCode, Runtime};
use offload_image::amdgpu;

use test_support::amd::{self, run};
use test_support::clang;
use test_support::device::{read_values as read, write_values as write};

fn scratch() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temporary directory"))
        .path()
}

/// OpenCL C kernels the fake runs (by name), built for `arch`.
fn kernels(arch: &str) -> Option<Vec<u8>> {
    amd::opencl_code_object(arch, KERNELS)
}

/// The kernels [`kernels`] builds.
const KERNELS: &str = "#define ID() (int)(__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x())
         kernel void fake_saxpy(int n, float a, global const float *x, global float *y) {
           int i = ID(); if (i < n) y[i] = a * x[i] + y[i]; }
         kernel void fake_fill(global int *p, int v, int n) {
           int i = ID(); if (i < n) p[i] = v; }
         kernel void fake_fault(global int *p) { p[0] = 1; }
         kernel void fake_page_fault(global int *p) { p[0] = 1; }
         __attribute__((visibility(\"protected\"))) global int counter = 42;";

/// An OpenMP program with a teams reduction, built for gfx90a against the
/// project's device runtime; its linked code object.
fn openmp_code_object() -> Option<Vec<u8>> {
    static IMG: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    IMG.get_or_init(|| {
        let dir = openmp_program("omp", &[])?;
        Some(std::fs::read(dir.join("p.amdgcn.gfx90a.img")).unwrap())
    })
    .clone()
}

/// The same program built with `-fopenmp-target-jit`: the executable,
/// whose device image is bitcode (device runtime included).
fn openmp_jit_executable() -> Option<Vec<u8>> {
    let dir = openmp_program("omp-jit", &["-fopenmp-target-jit"])?;
    Some(std::fs::read(dir.join("p")).unwrap())
}

/// Builds the OpenMP test program in `name` (a folder of the scratch
/// directory) with `extra` flags; the folder, with `-save-temps` output.
fn openmp_program(name: &str, extra: &[&str]) -> Option<std::path::PathBuf> {
    let clang = clang()?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rtl = root.join("target/devicertl/amdgcn-amd-amdhsa");
    if !rtl.join("libompdevice.a").exists() {
        run(
            Command::new("bash").arg(root.join("devicertl/build.sh")),
            "building the device runtime",
        );
    }
    let dir = scratch().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("p.c"),
        "#include <stdio.h>
         int main(void) { double s = 0; double a[1000];
           for (int i = 0; i < 1000; i++) a[i] = i;
           #pragma omp target teams distribute parallel for reduction(+:s) map(to:a[:1000])
           for (int i = 0; i < 1000; i++) s += a[i];
           printf(\"%f\\n\", s); return 0; }",
    )
    .unwrap();
    run(
        Command::new(clang)
            .current_dir(&dir)
            .args([
                "-fopenmp",
                "--offload-arch=gfx90a",
                "-foffload-lto",
                "-Xarch_amdgcn",
                "-nogpulib",
            ])
            .arg("-Xoffload-linker-amdgcn-amd-amdhsa")
            .arg(format!("-L{}", rtl.display()))
            .args(extra)
            .args(["-O2", "-save-temps", "p.c", "-o", "p"]),
        "building an OpenMP program for gfx90a",
    );
    Some(dir)
}

struct Fake {
    lib: libloading::Library,
}

impl Fake {
    fn sym<T: Copy>(&self, name: &str) -> T {
        // SAFETY: a test control function of the fake, of type T.
        unsafe { *self.lib.get::<T>(name.as_bytes()).unwrap() }
    }
    fn calls(&self, name: &str) -> i64 {
        let n = CString::new(name).unwrap();
        // SAFETY: the fake's counter query.
        unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char) -> c_long>("fake_hsa_calls\0")(
                n.as_ptr(),
            )
        }
    }
    fn fail(&self, name: &str, status: u32, count: i32) {
        let n = CString::new(name).unwrap();
        // SAFETY: the fake's error injection.
        unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char, u32, c_int)>("fake_hsa_fail\0")(
                n.as_ptr(),
                status,
                count,
            )
        }
    }
    fn live(&self, what: &str) -> i64 {
        // SAFETY: one of the fake's live-object counts.
        unsafe {
            self.sym::<unsafe extern "C" fn() -> c_long>(&format!("fake_hsa_live_{what}\0"))()
        }
    }
    fn allowed(&self, ptr: DevicePtr, agent: u64) -> bool {
        // SAFETY: the fake's access query.
        unsafe {
            self.sym::<unsafe extern "C" fn(*const c_void, u64) -> c_int>("fake_hsa_allowed\0")(
                ptr.0 as *const c_void,
                agent,
            ) != 0
        }
    }
    /// The agents' target ID and whether they list their family's generic
    /// ISA, until the guard returned is dropped (then as `setup` left them).
    fn agents_as(&self, target_id: &str, with_generic_isa: bool) -> ArchGuard<'_> {
        self.set_arch(target_id, with_generic_isa);
        ArchGuard(self)
    }
    fn set_arch(&self, target_id: &str, with_generic_isa: bool) {
        let t = CString::new(target_id).unwrap();
        // SAFETY: the fake's target-ID control.
        unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char, c_int)>("fake_hsa_set_arch\0")(
                t.as_ptr(),
                c_int::from(with_generic_isa),
            )
        }
    }
    /// (dispatches so far, the last packet, kernel name, kernel arguments).
    fn last_dispatch(&self) -> (i32, [u8; 64], String, Vec<u8>) {
        let mut packet = [0u8; 64];
        let mut name = [0u8; 256];
        let mut args = vec![0u8; 4096];
        let mut size = 0usize;
        type F = unsafe extern "C" fn(
            *mut c_void,
            *mut c_char,
            usize,
            *mut c_void,
            usize,
            *mut usize,
        ) -> c_int;
        // SAFETY: the fake writes at most the capacities given.
        let n = unsafe {
            self.sym::<F>("fake_hsa_last_dispatch\0")(
                packet.as_mut_ptr().cast(),
                name.as_mut_ptr().cast(),
                name.len(),
                args.as_mut_ptr().cast(),
                args.len(),
                &mut size,
            )
        };
        args.truncate(size.min(4096));
        let end = name.iter().position(|&b| b == 0).unwrap_or(0);
        (
            n,
            packet,
            String::from_utf8_lossy(&name[..end]).into_owned(),
            args,
        )
    }
}

fn setup() -> Option<(MutexGuard<'static, ()>, &'static Fake, &'static Runtime)> {
    static SERIAL: Mutex<()> = Mutex::new(());
    static STATE: OnceLock<Option<(Fake, Runtime)>> = OnceLock::new();
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let state = STATE.get_or_init(|| {
        let path = amd::fake_hsa_library()?;
        // SAFETY: set once, before any runtime of this process reads it,
        // while the other tests wait on the lock above.
        unsafe { std::env::set_var(offload_plugin_amdgpu::RUNTIME_ENV, &path) };
        // The agents' target ID, as ROCr names an MI210's ISA.
        // SAFETY: as above.
        unsafe { std::env::set_var("HSA_FAKE_ARCH", AGENT_TARGET_ID) };
        // ROCr's setting, which the fake honours, must not come from the
        // machine's environment.
        // SAFETY: as above.
        unsafe { std::env::remove_var("HSA_XNACK") };
        // SAFETY: the test controls of the same library the plugin loads.
        let lib = unsafe { libloading::Library::new(&path) }.unwrap();
        let rt = amdgpu_runtime();
        assert!(rt.failed_plugins().is_empty(), "{:?}", rt.failed_plugins());
        Some((Fake { lib }, rt))
    });
    let (fake, rt) = state.as_ref()?;
    Some((guard, fake, rt))
}

/// A runtime of the amdgpu plugin alone, over the fake.
fn amdgpu_runtime() -> Runtime {
    let config = Config::from_lookup(|k| (k == "OFFLOAD_PLUGINS").then(|| "amdgpu".to_string()));
    Runtime::new(config, &[offload_plugin_amdgpu::ENTRY])
}

/// The arguments of `fake_fill`: `n` ints at `p` set to `value`.
fn fill_args(p: DevicePtr, value: i32, n: i32) -> Vec<u8> {
    let mut args = p.0.to_ne_bytes().to_vec();
    args.extend_from_slice(&value.to_ne_bytes());
    args.extend_from_slice(&n.to_ne_bytes());
    args
}

/// One work-group of `size` work-items runs `kernel` with `args`.
fn launch_one_group(
    d: &offload_core::Device,
    kernel: &offload_core::Kernel,
    args: &[u8],
    size: u32,
) -> offload_core::Result<()> {
    d.launch(
        kernel,
        KernelArgs::Packed(args),
        &LaunchConfig::linear(1, size),
    )
}

/// Puts the fake's agents back to [`AGENT_TARGET_ID`] when dropped.
struct ArchGuard<'a>(&'a Fake);

impl Drop for ArchGuard<'_> {
    fn drop(&mut self) {
        self.0.set_arch(AGENT_TARGET_ID, true);
    }
}

/// What the fake's GPUs run: sramecc on, xnack off.
const AGENT_TARGET_ID: &str = "gfx90a:sramecc+:xnack-";

/// The fake's first agent handle (the CPU's; GPU i is this + 1 + i).
const FAKE_AGENT_BASE: u64 = 0xa9e_0000;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn agents_become_devices_with_their_facts() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    assert_eq!(rt.devices().len(), 2);
    for (i, d) in rt.devices().iter().enumerate() {
        let info = d.info();
        assert_eq!(d.plugin_name(), "amdgpu");
        assert_eq!(info.backend, Backend::Amdgpu);
        assert_eq!(info.device_type, DeviceType::Gpu);
        assert_eq!(info.triple, "amdgcn-amd-amdhsa");
        assert_eq!(info.arch, "gfx90a");
        assert_eq!(info.name, "gfx90a");
        assert_eq!(info.vendor, "AMD");
        assert_eq!(info.product_name, "AMD Instinct MI210 (fake)");
        assert_eq!(info.uid, format!("amdgpu-{i}-gfx90a"));
        assert_eq!(info.compute_units, 104);
        assert_eq!(info.max_group_size, 1024);
        assert_eq!(info.global_memory_bytes, 64 << 30);
        assert_eq!(info.clock_mhz, 1700);
    }
}

#[test]
fn memory_of_every_kind_round_trips_and_host_memory_is_unlocked_after_copies() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let before = fake.live("allocations");
    let (locks, stages) = (
        fake.calls("hsa_amd_memory_lock"),
        fake.calls("hsa_amd_memory_pool_allocate"),
    );
    // Small copies go through a staging buffer, large ones lock the
    // caller's pages for the copy.
    for len in [100_000usize, 3 << 20] {
        let data: Vec<u8> = (0..len as u32).map(|i| (i * 7) as u8).collect();
        for kind in [AllocKind::Device, AllocKind::Host, AllocKind::Shared] {
            let p = d.alloc(data.len(), kind).unwrap();
            if kind != AllocKind::Device {
                // Every GPU (the fake's agents: the CPU, then the GPUs)
                // reaches host memory.
                assert!(fake.allowed(p, FAKE_AGENT_BASE + 1), "{kind:?}");
                assert!(fake.allowed(p, FAKE_AGENT_BASE + 2), "{kind:?}");
            }
            write(d, p, &data);
            assert_eq!(read::<u8>(d, p, data.len()), data, "{kind:?} {len}");
            d.free(p).unwrap();
        }
    }
    assert_eq!(fake.live("allocations"), before, "stages freed");
    assert_eq!(
        fake.live("locks"),
        0,
        "every pageable buffer unlocked after its copy"
    );
    assert!(
        fake.calls("hsa_amd_memory_lock") >= locks + 6,
        "3 MiB copies lock"
    );
    assert!(
        fake.calls("hsa_amd_memory_pool_allocate") >= stages + 6 + 6,
        "small copies stage"
    );
}

#[test]
fn registered_host_memory_stays_locked_and_pool_memory_is_never_locked() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let mut buf = vec![0u8; 4 << 20];
    let ptr = buf.as_mut_ptr();
    let locks = fake.calls("hsa_amd_memory_lock");
    // SAFETY: `buf` stays alive and mapped until unregistered below.
    unsafe { d.register_host_range(DevicePtr(ptr as u64), buf.len(), offload_core::Owner(7)) }
        .unwrap();
    assert_eq!(fake.live("locks"), 1);
    let p = d.alloc(buf.len(), AllocKind::Device).unwrap();
    buf.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    // SAFETY: `buf` is readable for the call.
    unsafe { d.copy_to_device(p, buf.as_ptr(), buf.len()) }.unwrap();
    assert_eq!(
        fake.calls("hsa_amd_memory_lock"),
        locks + 1,
        "registered memory is not locked again"
    );
    assert_eq!(read::<u8>(d, p, 300)[..], buf[..300]);
    // Registering it again, or host-pool memory, is refused.
    // SAFETY: as above.
    let again = unsafe { d.register_host_range(DevicePtr(ptr as u64), 16, offload_core::Owner(7)) };
    assert!(again.is_err());
    let h = d.alloc(4096, AllocKind::Host).unwrap();
    // SAFETY: pool memory, mapped until freed below.
    assert!(unsafe { d.register_host_range(h, 4096, offload_core::Owner(7)) }.is_err());
    d.unregister_host_range(DevicePtr(ptr as u64)).unwrap();
    assert!(
        d.unregister_host_range(h).is_err(),
        "pool memory is never unlocked"
    );
    assert_eq!(fake.live("locks"), 0);
    d.free(h).unwrap();
    d.free(p).unwrap();
}

#[test]
fn fills_of_every_pattern_width() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    let p = d.alloc(64, AllocKind::Device).unwrap();
    for pattern in [
        &[0xabu8][..],
        &[1, 2],
        &[1, 2, 3, 4],
        &[9, 8, 7, 6, 5, 4, 3, 2],
        &[5, 6, 7],
    ] {
        let size = 48 / pattern.len() * pattern.len();
        d.fill(p, pattern, size).unwrap();
        let back = read::<u8>(d, p, size);
        let want: Vec<u8> = pattern.iter().copied().cycle().take(size).collect();
        assert_eq!(back, want, "{pattern:?}");
    }
    d.free(p).unwrap();
}

#[test]
fn opencl_kernels_run_with_their_hidden_arguments_in_place() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(image) = kernels("gfx90a") else {
        return;
    };
    let meta = amdgpu::code_object_metadata(&image)
        .unwrap()
        .expect("a metadata note");
    let saxpy_meta = meta.kernel("fake_saxpy").unwrap().clone();
    let d = &rt.devices()[1];
    let program = d.load_program(&image).unwrap();
    let saxpy = program.kernel("fake_saxpy").unwrap();
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = vec![1.0; n];
    let (px, py) = (
        d.alloc(4 * n, AllocKind::Device).unwrap(),
        d.alloc(4 * n, AllocKind::Device).unwrap(),
    );
    write(d, px, &x);
    write(d, py, &y);
    let mut args = Vec::new();
    args.extend_from_slice(&(n as i32).to_ne_bytes());
    args.extend_from_slice(&2.0f32.to_ne_bytes());
    args.extend_from_slice(&px.0.to_ne_bytes());
    args.extend_from_slice(&py.0.to_ne_bytes());
    let config = LaunchConfig::linear(4, 256);
    d.launch(&saxpy, KernelArgs::Packed(&args), &config)
        .unwrap();
    let got = read::<f32>(d, py, n);
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 2.0 * i as f32 + 1.0));
    let (_, packet, name, kernargs) = fake.last_dispatch();
    assert_eq!(name, "fake_saxpy");
    assert_eq!(&kernargs[..args.len()], &args[..]);
    // The packet: 1 dimension, 256 x 1 x 1 work-items a group, 1024 in all.
    assert_eq!(u16_at(&packet, 2) & 3, 1);
    assert_eq!(u16_at(&packet, 4), 256);
    assert_eq!(u32_at(&packet, 12), 1024);
    let hidden = |kind: &str| {
        saxpy_meta
            .hidden(kind)
            .unwrap_or_else(|| panic!("{kind}"))
            .offset as usize
    };
    assert_eq!(u32_at(&kernargs, hidden("hidden_block_count_x")), 4);
    assert_eq!(u32_at(&kernargs, hidden("hidden_block_count_y")), 1);
    assert_eq!(u16_at(&kernargs, hidden("hidden_group_size_x")), 256);
    assert_eq!(u16_at(&kernargs, hidden("hidden_group_size_z")), 1);
    assert_eq!(u16_at(&kernargs, hidden("hidden_grid_dims")), 1);
    // A global with its initial value, at its own address.
    let (counter, size) = program.global("counter").unwrap();
    assert_eq!(size, 4);
    assert_eq!(read::<i32>(d, counter, 1), [42]);
    // A two-dimensional launch: its y counts and 2 dimensions.
    let two_d = LaunchConfig {
        num_groups: [2, 3, 1],
        group_size: [64, 2, 1],
        ..Default::default()
    };
    d.launch(&saxpy, KernelArgs::Packed(&args), &two_d).unwrap();
    let (_, packet, _, kernargs) = fake.last_dispatch();
    assert_eq!(u16_at(&packet, 2) & 3, 2);
    assert_eq!((u16_at(&packet, 6), u32_at(&packet, 16)), (2, 6));
    assert_eq!(u32_at(&kernargs, hidden("hidden_block_count_y")), 3);
    assert_eq!(u16_at(&kernargs, hidden("hidden_group_size_y")), 2);
    assert_eq!(u16_at(&kernargs, hidden("hidden_grid_dims")), 2);
    // Too many argument bytes would overwrite the hidden ones.
    let long = vec![0u8; hidden("hidden_block_count_x") + 8];
    let e = d
        .launch(&saxpy, KernelArgs::Packed(&long), &config)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.message().contains("fake_saxpy"), "{e}");
    d.free(px).unwrap();
    d.free(py).unwrap();
    assert_eq!(fake.live("locks"), 0);
}

#[test]
fn launches_past_the_devices_limits_are_refused_naming_the_kernel() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let Some(image) = kernels("gfx90a") else {
        return;
    };
    let d = &rt.devices()[0];
    let program = d.load_program(&image).unwrap();
    let k = program.kernel("fake_fill").unwrap();
    let p = d.alloc(64, AllocKind::Device).unwrap();
    let args = fill_args(p, 7, 16);
    for config in [
        LaunchConfig::linear(1, 2048),
        LaunchConfig {
            dyn_group_memory: 1 << 20,
            ..LaunchConfig::linear(1, 64)
        },
        LaunchConfig {
            num_groups: [1 << 31, 4, 1],
            ..LaunchConfig::linear(1, 64)
        },
    ] {
        let e = d
            .launch(&k, KernelArgs::Packed(&args), &config)
            .unwrap_err();
        assert!(e.message().contains("fake_fill"), "{e}");
    }
    // And the device still works.
    d.launch(&k, KernelArgs::Packed(&args), &LaunchConfig::linear(1, 64))
        .unwrap();
    assert_eq!(read::<i32>(d, p, 16), [7; 16]);
    d.free(p).unwrap();
}

#[test]
fn code_objects_for_another_processor_or_malformed_are_refused() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(other) = kernels("gfx942") else {
        return;
    };
    let d = &rt.devices()[0];
    let before = fake.live("executables");
    let e = d.load_program(&other).err().expect("refused");
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(
        e.message().contains("gfx942") || e.message().contains("amdgcn"),
        "{e}"
    );
    let image = kernels("gfx90a").unwrap();
    let mut truncated = image.clone();
    truncated.truncate(image.len() / 2);
    assert!(d.load_program(&truncated).is_err());
    assert!(d.load_program(b"\x7fELF not really").is_err());
    // A runtime refusing the code object: its text in the error.
    fake.fail("hsa_executable_load_agent_code_object", 0x1010, 1);
    let e = d.load_program(&image).err().expect("refused");
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert_eq!(
        fake.live("executables"),
        before,
        "a failed load leaves nothing loaded"
    );
    // Unknown kernels and globals.
    let program = d.load_program(&image).unwrap();
    assert_eq!(
        program.kernel("nope").err().unwrap().code(),
        ErrorCode::NotFound
    );
    assert!(program.global("nope").is_err());
}

#[test]
fn code_objects_must_suit_the_gpus_xnack_and_sramecc_settings() {
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let Some(any) = kernels("gfx90a") else {
        return;
    };
    let d = &rt.devices()[0];
    let image = |bytes: &[u8], arch: Option<&str>| {
        let mut i = offload_image::unwrap(bytes).unwrap().remove(0);
        i.arch = arch.map(str::to_string);
        (d.can_run(&i), d.load_image(&i).map(|_| ()))
    };
    // Left to "any", or set as the GPU has them: runs.
    for arch in ["gfx90a:xnack-", "gfx90a:sramecc+", "gfx90a:sramecc+:xnack-"] {
        let code = kernels(arch).unwrap();
        let t = amdgpu::TargetId::of_code_object(&code).unwrap();
        assert_eq!(t.to_string(), arch, "clang's e_flags for {arch}");
        let (runs, loaded) = image(&code, Some(arch));
        assert!(runs && loaded.is_ok(), "{arch}: {loaded:?}");
    }
    assert!(image(&any, None).0);
    // Asking for what the GPU does not do: refused, naming both sides.
    for arch in ["gfx90a:xnack+", "gfx90a:sramecc-", "gfx90a:sramecc+:xnack+"] {
        let code = kernels(arch).unwrap();
        let (runs, loaded) = image(&code, None);
        assert!(!runs, "{arch} should not run on {AGENT_TARGET_ID}");
        let e = loaded.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidBinary);
        assert!(e.message().contains(AGENT_TARGET_ID), "{e}");
        let e = d.load_program(&code).err().expect("refused");
        assert!(
            e.message().contains(arch) && e.message().contains(AGENT_TARGET_ID),
            "{e}"
        );
    }
    // An OffloadBinary entry that asks for xnack+ does not run, even when
    // its code object leaves xnack to "any"; a malformed arch neither.
    assert!(!image(&any, Some("gfx90a:xnack+")).0);
    assert!(!image(&any, Some("gfx90a:bogus+")).0);
    assert!(!image(&any, Some("gfx942")).0);
    assert!(image(&any, Some("gfx90a")).0);
}

#[test]
fn generic_code_objects_run_on_every_processor_of_their_family() {
    let Some((_g, fake, _rt)) = setup() else {
        return;
    };
    let Some(generic) = kernels("gfx11-generic") else {
        return;
    };
    let rdna2 = kernels("gfx10-3-generic").unwrap();
    let _restore = fake.agents_as("gfx1100", true);
    let rt = amdgpu_runtime();
    let d = &rt.devices()[0];
    let image = offload_image::unwrap(&generic).unwrap().remove(0);
    assert!(d.can_run(&image));
    let program = d.load_program(&generic).unwrap();
    let fill = program.kernel("fake_fill").unwrap();
    let p = d.alloc(64, AllocKind::Device).unwrap();
    let args = fill_args(p, 7, 16);
    launch_one_group(d, &fill, &args, 16).unwrap();
    assert_eq!(read::<i32>(d, p, 16), vec![7; 16]);
    d.free(p).unwrap();
    // Another family's generic code: refused, naming both sides.
    let e = d.load_program(&rdna2).err().expect("refused");
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(
        e.message().contains("gfx10-3-generic") && e.message().contains("(gfx1100, gfx11-generic)"),
        "{e}"
    );
    // A runtime older than generic code objects lists no generic ISA (and
    // cannot load them): refused before loading, saying why.
    fake.set_arch("gfx1100", false);
    let old_rt = amdgpu_runtime();
    let d = &old_rt.devices()[0];
    assert!(!d.can_run(&image));
    let e = d.load_program(&generic).err().expect("refused");
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(
        e.message()
            .contains("generic processor of this GPU's family")
            && e.message().contains("too old"),
        "{e}"
    );
    fake.set_arch("gfx1100", true);
    // A generic code object without a generic version (not one clang
    // writes): refused by its header, before the runtime sees it.
    let mut unversioned = generic.clone();
    unversioned[48 + 3] = 0;
    let rt = amdgpu_runtime();
    let e = rt.devices()[0]
        .load_program(&unversioned)
        .err()
        .expect("refused");
    assert!(e.message().contains("generic version"), "{e}");
    // xnack/sramecc hold for generic code as for any: a gfx942 agent with
    // sramecc on runs gfx9-4-generic code, not code asking for it off.
    let mi300 = "gfx942:sramecc+:xnack-";
    let ok = kernels("gfx9-4-generic:sramecc+").unwrap();
    let off = kernels("gfx9-4-generic:sramecc-").unwrap();
    fake.set_arch(mi300, true);
    let rt = amdgpu_runtime();
    let d = &rt.devices()[0];
    assert!(d.load_program(&ok).is_ok());
    let e = d.load_program(&off).err().expect("refused");
    assert!(
        e.message().contains("gfx9-4-generic:sramecc-") && e.message().contains(mi300),
        "{e}"
    );
}

/// Of the images of one binary a GPU runs, the most specific is loaded,
/// wherever it stands: its own processor before its family's generic
/// one, and pinned features before features left to "any".
#[test]
fn the_most_specific_image_a_gpu_runs_is_loaded() {
    use offload_image::offload_binary::{write, ImageKind, OffloadBinary, OffloadKind};
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let entry = |code: &[u8], arch: &str| -> Vec<u8> {
        let e = OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, code)
            .with("triple", amdgpu::TRIPLE)
            .with("arch", arch);
        write(&[e])
    };
    let bundle = |images: &[(&str, i32)]| -> Vec<u8> {
        images
            .iter()
            .flat_map(|&(arch, mark)| entry(&amd::marked_code_object(arch, mark).unwrap(), arch))
            .collect()
    };
    let loaded_mark = |d: &std::sync::Arc<offload_core::Device>, binary: &[u8]| -> i32 {
        let program = d.load_program(binary).unwrap();
        let (mark, _) = program.global("mark").unwrap();
        read::<i32>(d, mark, 1)[0]
    };
    let d = &rt.devices()[0];
    // gfx90a:sramecc+:xnack-: the image pinning both features wins over
    // one pinning xnack only, which wins over the bare processor; an image
    // the GPU does not run (xnack+) never.
    let images = [
        ("gfx90a", 1),
        ("gfx90a:xnack+", 2),
        ("gfx90a:xnack-", 3),
        ("gfx90a:sramecc+:xnack-", 4),
    ];
    assert_eq!(loaded_mark(d, &bundle(&images)), 4);
    assert_eq!(loaded_mark(d, &bundle(&images[..3])), 3);
    assert_eq!(loaded_mark(d, &bundle(&[images[3], images[0]])), 4);
    // Equally specific: the first.
    assert_eq!(loaded_mark(d, &bundle(&[("gfx90a", 5), ("gfx90a", 6)])), 5);
    // A gfx1100 runs gfx11-generic code, but prefers its own.
    let _restore = fake.agents_as("gfx1100", true);
    let rt = amdgpu_runtime();
    let d = &rt.devices()[0];
    let own_and_generic = bundle(&[("gfx11-generic", 7), ("gfx1100", 8)]);
    assert_eq!(loaded_mark(d, &own_and_generic), 8);
    assert_eq!(loaded_mark(d, &bundle(&[("gfx11-generic", 7)])), 7);
}

/// Bitcode (`-fopenmp-target-jit`, or given to `olCreateProgram`) is
/// compiled at load into a code object for the GPU's own target ID, and
/// runs like one; bitcode built for another processor is not compiled.
#[test]
fn bitcode_is_compiled_for_the_gpus_target_id() {
    use offload_image::offload_binary::{write as pack, ImageKind, OffloadBinary, OffloadKind};
    let Some((_g, _fake, rt)) = setup() else {
        return;
    };
    let Some(gfx90a) = amd::opencl_bitcode("gfx90a", KERNELS) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let _cache = JitCacheGuard::set(cache.path());
    let packed = |code: &[u8], arch: &str| {
        let e = OffloadBinary::new(ImageKind::Bitcode, OffloadKind::OpenMp, code)
            .with("triple", amdgpu::TRIPLE)
            .with("arch", arch);
        pack(&[e])
    };
    let d = &rt.devices()[0];
    let program = d.load_program(&packed(&gfx90a, "gfx90a")).unwrap();
    let fill = program.kernel("fake_fill").unwrap();
    let p = d.alloc(64 * 4, AllocKind::Device).unwrap();
    launch_one_group(d, &fill, &fill_args(p, 7, 64), 64).unwrap();
    assert_eq!(read::<i32>(d, p, 64), vec![7; 64]);
    d.free(p).unwrap();
    // The code object went to the cache, built for the GPU's target ID.
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = std::fs::read(&entries[0]).unwrap();
    let code = entry
        .windows(4)
        .position(|w| w == b"\x7fELF")
        .map(|at| &entry[at..])
        .expect("a code object in the entry");
    let built = amdgpu::TargetId::of_code_object(code).unwrap();
    assert_eq!(built.to_string(), AGENT_TARGET_ID);

    // gfx1100 bitcode is not compiled for a gfx90a, declared so or not
    // (its functions name their processor); bitcode for xnack on is not
    // compiled for a GPU running xnack off.
    let rdna3 = amd::opencl_bitcode("gfx1100", KERNELS).unwrap();
    let e = d.load_program(&packed(&rdna3, "gfx1100")).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary, "{e}");
    assert!(
        e.message()
            .contains("declared for gfx1100, which this GPU does not run"),
        "{e}"
    );
    let e = d.load_program(&rdna3).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary, "{e}");
    assert!(e.message().contains("built for gfx1100"), "{e}");
    let e = d
        .load_program(&packed(&gfx90a, "gfx90a:xnack+"))
        .err()
        .unwrap();
    assert!(e.message().contains("gfx90a:xnack+"), "{e}");
    // Raw bitcode for its own processor compiles.
    let program = d.load_program(&gfx90a).unwrap();
    assert!(program.kernel("fake_fill").is_ok());

    // An OpenMP program built with -fopenmp-target-jit: its bitcode holds
    // the device runtime, and the loaded code object gets its device
    // environment like one built ahead of time.
    let exe = openmp_jit_executable().unwrap();
    let images = offload_image::images_in_host_binary(&exe).unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].format, offload_image::ImageFormat::Bitcode);
    let program = d.load_image(&images[0]).unwrap();
    let (env, size) = program.global("__omp_rtl_device_environment").unwrap();
    assert_eq!(size, 48);
    let env = read::<u32>(d, env, 3);
    assert_eq!((env[1], env[2]), (2, 0), "2 devices, this one the first");
}

/// `OFFLOAD_JIT_CACHE` set for one test, unset when dropped (also when the
/// test fails).
struct JitCacheGuard;

impl JitCacheGuard {
    fn set(dir: &Path) -> JitCacheGuard {
        // SAFETY: read by the JIT of this process's loads; the tests that
        // load run one at a time (setup's lock).
        unsafe { std::env::set_var("OFFLOAD_JIT_CACHE", dir) };
        JitCacheGuard
    }
}

impl Drop for JitCacheGuard {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe { std::env::remove_var("OFFLOAD_JIT_CACHE") };
    }
}

#[test]
fn out_of_memory_is_out_of_resources_and_the_device_stays_usable() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let d = &rt.devices()[0];
    fake.fail("hsa_amd_memory_pool_allocate", 0x1008, 1);
    let e = d.alloc(4096, AllocKind::Device).unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources);
    assert!(e.message().contains("amdgpu-0"), "{e}");
    let p = d.alloc(4096, AllocKind::Device).unwrap();
    d.free(p).unwrap();
}

#[test]
fn openmp_code_objects_get_their_environments() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(image) = openmp_code_object() else {
        return;
    };
    let meta = amdgpu::code_object_metadata(&image).unwrap().unwrap();
    let kernel_meta = meta
        .kernels
        .iter()
        .find(|k| k.name.starts_with("__omp_offloading_"))
        .expect("an OpenMP kernel")
        .clone();
    let d = &rt.devices()[1];
    let program = d.load_program(&image).unwrap();
    // The device environment, written at load: 2 devices, this one the
    // second, the 100 MHz counter, 104 CUs x 32 waves.
    let (env, size) = program.global("__omp_rtl_device_environment").unwrap();
    assert_eq!(size, 48);
    let env = read::<u8>(d, env, 48);
    assert_eq!((u32_at(&env, 4), u32_at(&env, 8)), (2, 1));
    assert_eq!(u64_at(&env, 16), 100_000_000);
    assert_eq!(u64_at(&env, 40), 104 * 32);
    // The kernel: SPMD with a teams reduction, so launches get a launch
    // environment in place of the "none" word.
    let kernel = program.kernel(&kernel_meta.name).unwrap();
    let unset = LaunchConfig {
        num_groups: [0, 1, 1],
        group_size: [0, 1, 1],
        tripcount: 1000,
        ..Default::default()
    };
    let (sizes, _mode) = kernel
        .launch_plan(&unset)
        .expect("an OpenMP kernel's launch plan");
    assert!(
        sizes.group_size[0] > 0 && sizes.num_groups[0] > 0,
        "{sizes:?}"
    );
    let a = d.alloc(8000, AllocKind::Device).unwrap();
    let s = d.alloc(8, AllocKind::Device).unwrap();
    let words = [NO_LAUNCH_ENVIRONMENT, s.0, a.0, 1000];
    let explicit_words = (kernel_meta.explicit_size() / 8) as usize;
    let launch = || {
        d.launch(
            &kernel,
            KernelArgs::Words(&words[..explicit_words.min(4)]),
            &unset,
        )
        .unwrap();
        fake.last_dispatch()
    };
    let (_, packet, name, kernargs) = launch();
    assert_eq!(name, kernel_meta.name);
    let dyn_ptr = u64_at(&kernargs, 0);
    assert!(dyn_ptr != NO_LAUNCH_ENVIRONMENT && dyn_ptr != 0);
    let group = u16_at(&packet, 4);
    let groups = u32_at(&packet, 12) / u32::from(group);
    assert!(group > 0 && group <= 256, "{group}");
    let hidden = |kind: &str| kernel_meta.hidden(kind).unwrap().offset as usize;
    assert_eq!(u32_at(&kernargs, hidden("hidden_block_count_x")), groups);
    assert_eq!(u16_at(&kernargs, hidden("hidden_group_size_x")), group);
    // The environment: both counters 0, the reduction buffer just before
    // it. The fake's device memory is this process's: play the kernel
    // that leaves counters and partial results behind.
    let env = dyn_ptr as *mut u32;
    // SAFETY: the 16-byte environment and the buffer's first 8 bytes, in
    // the fake's device memory, which no launch uses now.
    let buffer = unsafe {
        assert_eq!((env.read(), env.add(1).read()), (0, 0));
        let buffer = env.add(2).cast::<u64>().read();
        assert!(buffer < dyn_ptr && buffer + 8 <= dyn_ptr, "{buffer:#x}");
        env.write(5);
        env.add(1).write(7);
        (buffer as *mut u64).write(u64::MAX);
        buffer
    };
    // The next launch reuses the environment and its kernel-argument
    // buffer (no allocation), zeroed again.
    let allocations = fake.calls("hsa_amd_memory_pool_allocate");
    let (_, _, _, kernargs) = launch();
    assert_eq!(fake.calls("hsa_amd_memory_pool_allocate"), allocations);
    assert_eq!(u64_at(&kernargs, 0), dyn_ptr, "the same environment");
    // SAFETY: as above.
    unsafe {
        assert_eq!((env.read(), env.add(1).read()), (0, 0));
        assert_eq!(env.add(2).cast::<u64>().read(), buffer);
        assert_eq!((buffer as *const u64).read(), 0);
    }
    d.free(a).unwrap();
    d.free(s).unwrap();
}

#[test]
fn a_fault_is_an_error_and_other_devices_stay_usable() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(image) = kernels("gfx90a") else {
        return;
    };
    // The last test of the file to use device 0's queue after its fault
    // would fail; this one uses its own runtime's devices instead.
    let own = amdgpu_runtime();
    let (d0, d1) = (&own.devices()[0], &own.devices()[1]);
    let program = d0.load_program(&image).unwrap();
    let fault = program.kernel("fake_fault").unwrap();
    let p = d0.alloc(8, AllocKind::Device).unwrap();
    let args = p.0.to_ne_bytes();
    let e = launch_one_group(d0, &fault, &args, 1).unwrap_err();
    assert!(
        e.message().contains("fake_fault") && e.message().contains("0x29"),
        "{e}"
    );
    // Later work on that GPU is refused with the reason.
    let one = [1u8];
    // SAFETY: `one` is readable for the call.
    let e = unsafe { d0.copy_to_device(p, one.as_ptr(), 1) }.unwrap_err();
    assert!(e.message().contains("failed earlier"), "{e}");
    // Refused before any kernel-argument memory is taken.
    let allocations = fake.calls("hsa_amd_memory_pool_allocate");
    let e = launch_one_group(d0, &fault, &args, 1).unwrap_err();
    assert!(e.message().contains("failed earlier"), "{e}");
    assert_eq!(fake.calls("hsa_amd_memory_pool_allocate"), allocations);
    // The other GPU, and the shared runtime's, still work.
    let q = d1.alloc(16, AllocKind::Device).unwrap();
    write(d1, q, &[5u8; 16]);
    assert_eq!(read::<u8>(d1, q, 16), [5; 16]);
    d1.free(q).unwrap();
    let r = rt.devices()[0].alloc(16, AllocKind::Device).unwrap();
    rt.devices()[0].free(r).unwrap();
}

#[test]
fn a_page_fault_names_its_address_and_stops_only_that_gpu() {
    let Some((_g, _fake, _rt)) = setup() else {
        return;
    };
    let Some(image) = kernels("gfx90a") else {
        return;
    };
    // Its own runtime (the newest, which the fake tells of the fault), so
    // that the shared one's GPU 1 stays usable for the other tests.
    let own = amdgpu_runtime();
    let (d0, d1) = (&own.devices()[0], &own.devices()[1]);
    let program = d1.load_program(&image).unwrap();
    let fault = program.kernel("fake_page_fault").unwrap();
    let args = 0xdead_0000u64.to_ne_bytes();
    let e = launch_one_group(d1, &fault, &args, 1).unwrap_err();
    let m = e.message();
    assert!(
        m.contains("fake_page_fault")
            && m.contains("amdgpu-1")
            && m.contains("memory access fault at address 0xdead0000")
            && m.contains("page not present"),
        "{e}"
    );
    assert!(!m.contains("no kernel launches"), "{e}");
    let e = launch_one_group(d1, &fault, &args, 1).unwrap_err();
    assert!(e.message().contains("failed earlier"), "{e}");
    // GPU 0 of the same runtime never faulted: it copies, but launches no
    // kernel, since ROCr would not report a second page fault.
    let p = d0.alloc(64, AllocKind::Device).unwrap();
    write(d0, p, &[3i32; 16]);
    assert_eq!(read::<i32>(d0, p, 16), [3; 16]);
    let program = d0.load_program(&image).unwrap();
    let fill = program.kernel("fake_fill").unwrap();
    let args = fill_args(p, 7, 16);
    let e = launch_one_group(d0, &fill, &args, 16).unwrap_err();
    assert!(
        e.message().contains("amdgpu-0")
            && e.message()
                .contains("no kernel launches after a GPU page fault")
            && e.message().contains("0xdead0000"),
        "{e}"
    );
    assert_eq!(read::<i32>(d0, p, 16), [3; 16]);
    d0.free(p).unwrap();
}

#[test]
fn kernel_arguments_are_zeroed_between_launches() {
    let Some((_g, fake, rt)) = setup() else {
        return;
    };
    let Some(image) = kernels("gfx90a") else {
        return;
    };
    let d = &rt.devices()[0];
    let program = d.load_program(&image).unwrap();
    let fill = program.kernel("fake_fill").unwrap();
    let p = d.alloc(64, AllocKind::Device).unwrap();
    let args = fill_args(p, 7, 16);
    launch_one_group(d, &fill, &args, 16).unwrap();
    assert_eq!(read::<i32>(d, p, 16), [7; 16]);
    // The same buffer again, with only the pointer given: the value and
    // count the last launch left there read as 0 (nothing filled).
    let allocations = fake.calls("hsa_amd_memory_pool_allocate");
    launch_one_group(d, &fill, &args[..8], 16).unwrap();
    assert_eq!(fake.calls("hsa_amd_memory_pool_allocate"), allocations);
    let (_, _, _, kernargs) = fake.last_dispatch();
    assert_eq!(&kernargs[..8], &args[..8]);
    assert_eq!(&kernargs[8..16], &[0; 8]);
    assert_eq!(read::<i32>(d, p, 16), [7; 16]);
    d.free(p).unwrap();
}

#[test]
fn a_missing_runtime_is_an_error_only_when_amdgpu_is_asked_for() {
    let Some((_g, _fake, _rt)) = setup() else {
        return;
    };
    let saved = std::env::var_os(offload_plugin_amdgpu::RUNTIME_ENV);
    // SAFETY: the tests of this file run one at a time (the lock).
    unsafe {
        std::env::set_var(
            offload_plugin_amdgpu::RUNTIME_ENV,
            "/nonexistent/libhsa-runtime64.so.1",
        )
    };
    let explicit = Runtime::new(
        Config::from_lookup(|k| (k == "OFFLOAD_PLUGINS").then(|| "amdgpu".to_string())),
        &[offload_plugin_amdgpu::ENTRY],
    );
    let quiet = Runtime::new(
        Config::from_lookup(|_| None),
        &[offload_plugin_amdgpu::ENTRY],
    );
    // SAFETY: as above.
    unsafe { std::env::set_var(offload_plugin_amdgpu::RUNTIME_ENV, saved.unwrap()) };
    let failed = explicit.failed_plugins();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        format!("{failed:?}").contains("/nonexistent/libhsa-runtime64.so.1"),
        "{failed:?}"
    );
    assert!(quiet.failed_plugins().is_empty());
    assert!(quiet.devices().is_empty());
}

#[test]
fn every_object_is_released_when_the_runtime_goes() {
    let Some((_g, fake, _rt)) = setup() else {
        return;
    };
    let Some(image) = kernels("gfx90a") else {
        return;
    };
    let (queues, executables) = (fake.live("queues"), fake.live("executables"));
    let allocations = fake.live("allocations");
    {
        let own = amdgpu_runtime();
        assert_eq!(fake.live("queues"), queues + 2);
        let d = &own.devices()[0];
        let program = d.load_program(&image).unwrap();
        assert_eq!(fake.live("executables"), executables + 1);
        // A launch leaves its kernel-argument buffer for the next one.
        let fill = program.kernel("fake_fill").unwrap();
        let p = d.alloc(64, AllocKind::Device).unwrap();
        let mut args = p.0.to_ne_bytes().to_vec();
        args.extend_from_slice(&[0; 8]);
        launch_one_group(d, &fill, &args, 1).unwrap();
        assert_eq!(fake.live("allocations"), allocations + 2);
        drop(program);
        own.shutdown();
    }
    assert_eq!(fake.live("queues"), queues);
    assert_eq!(fake.live("executables"), executables);
    assert_eq!(fake.live("allocations"), allocations);
    // No call of the plugin named a handle the runtime never gave out.
    assert_eq!(fake.calls("invalid_handle"), 0);
}
