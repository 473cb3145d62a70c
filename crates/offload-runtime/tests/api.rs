//! The Rust API end to end on the host devices.

mod common;

use common::{compile, skip};
use offload_runtime::internals::CoreAccess as _;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use offload_runtime::{
    devices, AllocKind, Device, DeviceType, ErrorCode, KernelArgs, LaunchConfig,
};

fn demo_image() -> Vec<u8> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mut text = std::fs::read_to_string(root.join("examples/kernels/demo_kernels.c")).unwrap();
    text += "int answer = 41;\nOFFLOAD_HOST_KERNEL(bump) { (void)args; (void)item; answer++; }\n";
    compile(dir.path(), "k.so", &text, &["-O1", "-fPIC", "-shared"])
}

/// A host kernel `bump` that increments the global `answer` (starting at
/// `start`).
fn bump_source(start: i32) -> String {
    format!("#include \"offload/host_kernel.h\"\nint answer = {start};\nOFFLOAD_HOST_KERNEL(bump) {{ (void)args; (void)item; answer++; }}\n")
}

#[test]
fn devices_are_listed_with_host_properties() {
    let all = devices();
    assert!(!all.is_empty());
    let host = Device::host().unwrap();
    let info = host.info();
    assert_eq!(info.device_type, DeviceType::Cpu);
    assert_eq!(info.triple, "x86_64-unknown-linux-gnu");
    assert!(info.uid.starts_with("x86_64-"));
    assert!(info.global_memory_bytes > 0 && info.compute_units > 0);
    assert_eq!(
        Device::get(all.len()).unwrap_err().code(),
        ErrorCode::InvalidDevice
    );
}

#[test]
fn buffers_copy_fill_and_free_on_drop() {
    // The last device (a host device: no other plugin has devices here),
    // which the other tests of this file leave alone: they run in parallel
    // and would change the allocation count of a shared device.
    let dev = devices().pop().unwrap();
    if dev.id() < 2 {
        skip("needs a third device (OFFLOAD_HOST_DEVICES >= 3) to count allocations alone");
        return;
    }
    let before = dev.core().live_allocations();
    {
        let mut b = dev.alloc_zeros::<u64>(1000).unwrap();
        assert_eq!(dev.core().live_allocations(), before + 1);
        let data: Vec<u64> = (0..1000).collect();
        b.copy_from_host(&data).unwrap();
        assert_eq!(b.to_vec().unwrap(), data);
        let e = b.copy_from_host(&data[..10]).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSize);
        b.fill(u64::MAX).unwrap();
        let mut back = vec![0; 1000];
        b.copy_to_host(&mut back).unwrap();
        assert!(back.iter().all(|&v| v == u64::MAX));
        for kind in [AllocKind::Host, AllocKind::Shared] {
            let k = dev.alloc_zeros_in::<u8>(10, kind).unwrap();
            assert_eq!(k.kind(), kind);
        }
        let empty = dev.alloc_zeros::<u32>(0).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.to_vec().unwrap(), Vec::<u32>::new());
    }
    assert_eq!(
        dev.core().live_allocations(),
        before,
        "every buffer was freed on drop"
    );
}

#[test]
fn copies_between_devices() {
    let all = devices();
    if all.len() < 2 {
        skip("needs two devices (OFFLOAD_HOST_DEVICES >= 2)");
        return;
    }
    let src = all[0].buffer_from(&[1.5f64, 2.5, 3.5]).unwrap();
    let mut dst = all[1].alloc_zeros::<f64>(3).unwrap();
    dst.copy_from_buffer(&src).unwrap();
    assert_eq!(dst.to_vec().unwrap(), vec![1.5, 2.5, 3.5]);
}

#[test]
fn programs_kernels_globals_queues_events() {
    let image = demo_image();
    let dev = Device::host().unwrap();
    assert!(dev.is_compatible(&image));
    assert!(!dev.is_compatible(b"not an image"));
    let program = dev.load_program(&image).unwrap();
    let answer = program.global("answer").unwrap();
    assert_eq!(answer.size(), 4);
    assert_eq!(answer.read::<i32>().unwrap(), 41);
    assert_eq!(
        answer.read::<i64>().unwrap_err().code(),
        ErrorCode::InvalidSize
    );

    let queue = dev.create_queue().unwrap();
    let bump = program.kernel("bump").unwrap();
    let args = KernelArgs::new();
    // SAFETY: the arguments match the kernel's parameters (test kernels of this file) and name only live buffers; the launch is waited for.
    let launch = unsafe { queue.launch(&bump, LaunchConfig::default(), &args) }.unwrap();
    let event = queue.record_event().unwrap();
    event.synchronize().unwrap();
    assert!(event.is_complete().unwrap());
    assert!(launch.is_complete().unwrap());
    launch.wait().unwrap();
    queue.wait_event(&event).unwrap();
    assert_eq!(answer.read::<i32>().unwrap(), 42);
    answer.write(100i32).unwrap();
    assert_eq!(answer.read::<i32>().unwrap(), 100);

    // Host functions run in queue order.
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    queue
        .host_function(move || flag.store(true, Ordering::SeqCst))
        .unwrap();
    queue.synchronize().unwrap();
    assert!(ran.load(Ordering::SeqCst));
    assert!(queue.is_idle().unwrap());

    let e = program.kernel("missing").err().unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound);
    assert!(e.message().contains("missing"), "{e}");
}

#[test]
fn a_kernel_cannot_run_on_another_devices_queue() {
    let all = devices();
    if all.len() < 2 {
        return;
    }
    let image = demo_image();
    let k = all[0]
        .load_program(&image)
        .unwrap()
        .kernel("saxpy")
        .unwrap();
    let q = all[1].create_queue().unwrap();
    // SAFETY: the launch is refused before any device code runs.
    let e = unsafe { q.launch(&k, LaunchConfig::default(), &KernelArgs::new()) }.unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
}

#[test]
fn saxpy_from_many_threads_at_once() {
    let image = Arc::new(demo_image());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let image = image.clone();
            std::thread::spawn(move || {
                let dev = Device::host().unwrap();
                let program = dev.load_program(&image).unwrap();
                let k = program.kernel("saxpy").unwrap();
                let q = dev.create_queue().unwrap();
                for round in 0..20 {
                    let n = 1000 + t * 10 + round;
                    let x = dev.buffer_from(&vec![1.0f32; n]).unwrap();
                    let mut y = dev.buffer_from(&vec![t as f32; n]).unwrap();
                    let args = KernelArgs::new()
                        .value(2.0f32)
                        .ptr(&x)
                        .ptr_mut(&mut y)
                        .value(n as u32);
                    let config = LaunchConfig::linear((n as u32).div_ceil(64), 64);
                    // SAFETY: the arguments match the kernel's parameters (test kernels of this file) and name only live buffers; the launch is waited for.
                    unsafe { q.launch(&k, config, &args) }
                        .unwrap()
                        .wait()
                        .unwrap();
                    q.synchronize().unwrap();
                    assert!(y.to_vec().unwrap().iter().all(|&v| v == 2.0 + t as f32));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A program given as LLVM bitcode (`clang -emit-llvm`) is compiled for the
/// host device at load time and behaves as the native build.
#[test]
fn bitcode_programs_are_compiled_at_load_time() {
    let dir = tempfile::tempdir().unwrap();
    let image = compile(
        dir.path(),
        "k.bc",
        &bump_source(41),
        &["-O1", "-fPIC", "-c", "-emit-llvm"],
    );
    assert_eq!(&image[..4], b"BC\xc0\xde");
    let dev = Device::host().unwrap();
    assert!(dev.is_compatible(&image));
    let program = dev.load_program(&image).unwrap();
    let answer = program.global("answer").unwrap();
    assert_eq!(answer.read::<i32>().unwrap(), 41);
    let queue = dev.create_queue().unwrap();
    let bump = program.kernel("bump").unwrap();
    let args = KernelArgs::new();
    // SAFETY: the arguments match the kernel's parameters (test kernels of this file) and name only live buffers; the launch is waited for.
    unsafe { queue.launch(&bump, LaunchConfig::default(), &args) }
        .unwrap()
        .wait()
        .unwrap();
    queue.synchronize().unwrap();
    assert_eq!(answer.read::<i32>().unwrap(), 42);
}

/// One binary with images for several targets: a PTX image, an AMDGPU
/// image, x86_64 bitcode and x86_64 native code. The host device loads the
/// native image; without it, the bitcode (compiled when loaded); with only
/// foreign images, nothing (a clear error listing them). No foreign image
/// ever reaches the host plugin.
#[test]
fn mixed_target_binaries_load_the_best_image() {
    use offload_image::offload_binary::{write, ImageKind, OffloadBinary, OffloadKind};
    let dir = tempfile::tempdir().unwrap();
    // The same kernel, told apart by the global's start value.
    let native = compile(
        dir.path(),
        "native.so",
        &bump_source(100),
        &["-O1", "-fPIC", "-shared"],
    );
    let bitcode = compile(
        dir.path(),
        "k.bc",
        &bump_source(200),
        &["-O1", "-fPIC", "-c", "-emit-llvm"],
    );
    // Real foreign code, as clang-22 makes it for those targets.
    let device_code = "void k(int *p) { *p = 1; }\n";
    let foreign = ["-nogpulib", "-ffreestanding"];
    let ptx = compile(
        dir.path(),
        "dev.ptx",
        device_code,
        &[
            &[
                "--target=nvptx64-nvidia-cuda",
                "-march=sm_80",
                "-Xclang",
                "-target-feature",
                "-Xclang",
                "+ptx78",
                "-S",
            ][..],
            &foreign,
        ]
        .concat(),
    );
    let amd = compile(
        dir.path(),
        "dev.o",
        device_code,
        &[
            &["--target=amdgcn-amd-amdhsa", "-mcpu=gfx90a", "-c"][..],
            &foreign,
        ]
        .concat(),
    );
    fn entry<'b>(kind: ImageKind, bytes: &'b [u8], triple: &str, arch: &str) -> OffloadBinary<'b> {
        let mut e = OffloadBinary::new(kind, OffloadKind::OpenMp, bytes);
        e.strings = vec![
            ("triple".into(), triple.into()),
            ("arch".into(), arch.into()),
        ];
        e
    }
    let host = "x86_64-unknown-linux-gnu";
    let ptx_e = || entry(ImageKind::Ptx, &ptx, "nvptx64-nvidia-cuda", "sm_80");
    let amd_e = || entry(ImageKind::Object, &amd, "amdgcn-amd-amdhsa", "gfx90a");
    let bc_e = || entry(ImageKind::Bitcode, &bitcode, host, "");
    let native_e = || entry(ImageKind::Object, &native, host, "");

    let dev = Device::host().unwrap();
    let start = |binary: Vec<u8>| -> i32 {
        let program = dev.load_program(&binary).unwrap();
        program.global("answer").unwrap().read::<i32>().unwrap()
    };
    // Bitcode listed first: native code still wins.
    assert_eq!(start(write(&[ptx_e(), bc_e(), amd_e(), native_e()])), 100);
    assert_eq!(start(write(&[native_e(), bc_e()])), 100);
    // No native image: the bitcode is compiled.
    assert_eq!(start(write(&[ptx_e(), amd_e(), bc_e()])), 200);
    // Only foreign images: refused, each named.
    let Err(e) = dev.load_program(&write(&[ptx_e(), amd_e()])) else {
        panic!("a foreign image was loaded");
    };
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(e.message().contains("nvptx64-nvidia-cuda"), "{e}");
    assert!(e.message().contains("amdgcn-amd-amdhsa"), "{e}");
}

/// An instance chooses its plugins and device counts in code, refuses
/// unknown plugin names, keeps its devices' memory apart from the
/// process-wide runtime's, and its kernels launch like any.
#[test]
fn instances_choose_plugins_in_code() {
    let inst = offload_runtime::Instance::builder()
        .plugins(["host"])
        .host_devices(2)
        .build()
        .unwrap();
    assert_eq!(inst.plugins(), vec!["host"]);
    assert_eq!(inst.devices().len(), 2);
    let dev = inst.device(1).unwrap();
    let mut buf = dev.buffer_from(&[1u32, 2, 3]).unwrap();
    buf.slice_mut(1..).fill(9).unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![1, 9, 9]);
    let other = inst.device(0).unwrap().alloc_zeros::<u32>(3).unwrap();
    let mut same = inst.host().unwrap().alloc_zeros::<u32>(3).unwrap();
    same.slice_mut(..).copy_from(&buf).unwrap();
    assert_eq!(same.to_vec().unwrap(), vec![1, 9, 9]);
    drop(other);

    // Devices of two runtimes do not mix.
    let mut global = Device::host().unwrap().alloc_zeros::<u32>(3).unwrap();
    let e = global.slice_mut(..).copy_from(&buf).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
    assert!(e.to_string().contains("different instances"), "{e}");

    // The instance lives on in its devices and buffers.
    drop(inst);
    assert_eq!(buf.to_vec().unwrap(), vec![1, 9, 9]);

    let e = offload_runtime::Instance::builder()
        .plugins(["host", "bogus"])
        .build()
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("unknown plugin 'bogus'"), "{e}");
}

#[test]
fn launch_config_for_num_elems_covers_every_element() {
    for (n, groups) in [(0u32, 1u32), (1, 1), (256, 1), (257, 2), (1 << 20, 4096)] {
        let c = LaunchConfig::for_num_elems(n);
        assert_eq!(c.num_groups, [groups, 1, 1], "{n}");
        assert_eq!(c.group_size, [256, 1, 1]);
        assert!(c.total_groups() * c.total_items_per_group() >= u64::from(n));
    }
}
