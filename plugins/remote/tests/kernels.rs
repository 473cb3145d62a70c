//! Programs and kernels on a server's devices: memory, loads and launches
//! over the wire, registered binaries, a server's CUDA device.

mod common;
use common::{client, packed, raw_remote_devices, read, write, Server};

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::{DevicePtr, ErrorCode, Location, Queue};
use offload_image::offload_binary::{write as write_binary, ImageKind, OffloadBinary, OffloadKind};

fn kernels_so(dir: &Path) -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.join("k.so");
    let ok = Command::new("clang-22")
        .args(["-O1", "-fPIC", "-shared", "-I"])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&out)
        .arg(root.join("crates/offload-runtime/examples/kernels/demo_kernels.c"))
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::fs::read(out).unwrap()
}

#[test]
fn memory_programs_and_launches_over_the_wire() {
    let server = Server::start(Some("s3cret"));
    let rt = client(&server.addr, Some("s3cret"));
    assert!(rt.failed_plugins().is_empty(), "{:?}", rt.failed_plugins());
    assert_eq!(rt.devices().len(), 2, "every device of the server appears");
    let dev = &rt.devices()[1];
    assert!(dev.info().uid.starts_with("remote:"), "{}", dev.info().uid);
    assert!(dev.info().name.contains(&server.addr));

    // 3.5 MiB round trip: streamed in 1 MiB chunks both ways.
    let n = 7 << 19;
    let data: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    let p = dev.alloc(n, AllocKind::Device).unwrap();
    write(dev, p, &data).unwrap();
    let back = read(dev, p, n);
    assert!(back == data, "round trip differs");
    // Fill and device-to-device (same server: done there).
    let q = dev.alloc(64, AllocKind::Device).unwrap();
    dev.fill(q, &[9, 8], 64).unwrap();
    let other = &rt.devices()[0];
    let r = other.alloc(64, AllocKind::Device).unwrap();
    // SAFETY: both ends are device locations; the contract covers host
    // pointers only.
    unsafe {
        rt.copy(
            Location::Device(other.id(), r),
            Location::Device(dev.id(), q),
            64,
            None,
        )
        .unwrap()
    };
    assert_eq!(read(other, r, 4), [9, 8, 9, 8]);

    // A program shipped with the load, a kernel, a pipelined queue.
    let dir = tempfile::tempdir().unwrap();
    let image = kernels_so(dir.path());
    let program = dev.load_program(&image).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let count = 10_000usize;
    let x: Vec<f32> = (0..count).map(|i| i as f32).collect();
    let y = vec![1.0f32; count];
    let dx = dev.alloc(count * 4, AllocKind::Device).unwrap();
    let dy = dev.alloc(count * 4, AllocKind::Device).unwrap();
    let queue = Queue::new(Some(dev)).unwrap();
    let mut out = vec![0f32; count];
    // The C struct's padding written out, for `packed`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Saxpy {
        a: f32,
        _pad_a: u32,
        x: u64,
        y: u64,
        n: u32,
        _pad_n: u32,
    }
    let args = Saxpy {
        a: 3.0,
        _pad_a: 0,
        x: dx.0,
        y: dy.0,
        n: count as u32,
        _pad_n: 0,
    };
    let on_dev = |p: DevicePtr| Location::Device(dev.id(), p);
    // SAFETY: the host ends are `x` and `y` (read) and `out` (written),
    // each `count` f32s = `count * 4` bytes; all three live to the end of
    // this function and are not touched again until `event.synchronize()`
    // below has waited for every queued copy.
    unsafe {
        rt.copy(
            on_dev(dx),
            Location::Host(x.as_ptr().cast()),
            count * 4,
            Some(&queue),
        )
        .unwrap();
        rt.copy(
            on_dev(dy),
            Location::Host(y.as_ptr().cast()),
            count * 4,
            Some(&queue),
        )
        .unwrap();
        queue
            .launch(
                &saxpy,
                KernelArgs::Packed(packed(&args)),
                &LaunchConfig::linear(40, 256),
            )
            .unwrap();
        rt.copy(
            Location::Host(out.as_mut_ptr().cast_const().cast()),
            on_dev(dy),
            count * 4,
            Some(&queue),
        )
        .unwrap();
    }
    let event = queue.record_event().unwrap();
    event.synchronize().unwrap();
    assert!(event.is_complete().unwrap());
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 3.0 * i as f32 + 1.0));

    // Errors of queued work surface at the next synchronisation.
    let bad = Saxpy {
        a: 1.0,
        _pad_a: 0,
        x: 0,
        y: 0,
        n: 0,
        _pad_n: 0,
    };
    queue
        .launch(
            &saxpy,
            KernelArgs::Packed(packed(&bad)),
            &LaunchConfig::linear(1, 4096),
        )
        .unwrap();
    let e = queue.synchronize().unwrap_err();
    assert!(e.message().contains("group size"), "{e}");
    queue.synchronize().unwrap();

    // Unknown kernels and double frees are clear errors; the session survives.
    assert_eq!(
        program.kernel("nope").err().unwrap().code(),
        ErrorCode::NotFound
    );
    // (Small blocks stay in the client's caching pool; `p` is large.)
    dev.free(p).unwrap();
    let e = dev.free(p).unwrap_err();
    assert!(e.message().contains("double free"), "{e}");
    // The server refuses it too (a client without the core's index).
    let raw = raw_remote_devices(&server.addr, Some("s3cret"));
    // SAFETY: the remote plugin touches no memory here: it forwards the
    // request, and the server checks it (what this test attacks).
    let e = unsafe { raw[1].free(p, AllocKind::Device) }.unwrap_err();
    assert!(
        e.message().contains("double free or foreign pointer"),
        "{e}"
    );
    for ptr in [q, dx, dy] {
        dev.free(ptr).unwrap();
    }
    other.free(r).unwrap();
    let log = server.log();
    assert!(log.contains("session opened"), "{log}");
    assert!(log.contains("program loaded"), "{log}");
}

#[test]
fn registered_binaries_ship_their_images_once() {
    let server = Server::start(None);
    let rt = client(&server.addr, None);
    let dir = tempfile::tempdir().unwrap();
    let image: &'static [u8] = Box::leak(kernels_so(dir.path()).into_boxed_slice());
    let images = offload_image::unwrap(image).unwrap();
    let (desc, failures) = rt.register_binary(images, vec![]);
    assert!(failures.is_empty(), "{failures:?}");
    // Both devices load the registered image by id.
    for dev in rt.devices() {
        let p = dev.load_image(&desc.images[0]).unwrap();
        p.kernel("sum").unwrap();
    }
    rt.unregister_binary(desc.id).unwrap();
    let log = server.log();
    assert_eq!(log.matches("binary registered").count(), 1, "{log}");
    assert_eq!(log.matches("program loaded").count(), 2, "{log}");
    assert!(log.contains("binary unregistered"), "{log}");
}

/// The CUDA plugin's fake driver (`plugins/cuda/tests/fake_cuda`) built
/// as `libcuda.so.1`, and the GPU test kernels as PTX for sm_80.
fn fake_cuda(dir: &Path) -> (PathBuf, Vec<u8>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/cuda/tests");
    let driver = dir.join("libcuda.so.1");
    let ok = Command::new("clang-22")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&driver)
        .arg(root.join("fake_cuda/fake_cuda.c"))
        .arg("-lpthread")
        .status()
        .unwrap()
        .success();
    assert!(ok, "building the fake CUDA driver");
    let ptx = dir.join("kernels.ptx");
    let ok = Command::new("clang-22")
        .args(["--target=nvptx64-nvidia-cuda", "-march=sm_80"])
        .args(["-Xclang", "-target-feature", "-Xclang", "+ptx78"])
        .args(["-nogpulib", "-ffreestanding", "-O2", "-S", "-o"])
        .arg(&ptx)
        .arg(root.join("gpu/kernels.c"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "compiling the PTX kernels");
    (driver, std::fs::read(ptx).unwrap())
}

#[test]
fn a_servers_cuda_device_is_served_to_remote_clients() {
    let dir = tempfile::tempdir().unwrap();
    let (driver, ptx) = fake_cuda(dir.path());
    // The fake driver lies in a private temporary folder, which a
    // sandboxed worker (its own /tmp, its own uid) cannot see.
    let server = Server::start_env(
        Some("gpu"),
        &["--insecure-no-sandbox"],
        0,
        &[
            ("OFFLOAD_PLUGINS", Path::new("cuda")),
            ("OFFLOAD_CUDA_DRIVER", &driver),
        ],
    );
    let rt = client(&server.addr, Some("gpu"));
    assert!(rt.failed_plugins().is_empty(), "{:?}", rt.failed_plugins());
    assert_eq!(rt.devices().len(), 2, "the server's two GPUs");
    let dev = &rt.devices()[1];
    let info = dev.info();
    assert!(
        info.name.starts_with("Fake NVIDIA GPU 1 @ "),
        "{}",
        info.name
    );
    // The platform is the remote plugin; the device is the server's GPU.
    assert_eq!(info.backend, offload_core::Backend::Remote);
    assert_eq!(info.device_type, offload_core::DeviceType::Gpu);
    assert_eq!(
        (info.triple.as_str(), info.arch.as_str()),
        ("nvptx64-nvidia-cuda", "sm_90")
    );

    // sm_80 PTX runs on the sm_90 GPU: the server's plugin decides.
    assert!(dev.is_compatible(&ptx));
    let program = dev.load_program(&ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let n = 4096usize;
    let x: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_ne_bytes()).collect();
    let dx = dev.alloc(n * 4, AllocKind::Device).unwrap();
    let dy = dev.alloc(n * 4, AllocKind::Device).unwrap();
    write(dev, dx, &x).unwrap();
    dev.fill(dy, &1f32.to_ne_bytes(), n * 4).unwrap();
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Saxpy {
        n: i32,
        a: f32,
        x: u64,
        y: u64,
    }
    let args = Saxpy {
        n: n as i32,
        a: 2.0,
        x: dx.0,
        y: dy.0,
    };
    dev.launch(
        &saxpy,
        KernelArgs::Packed(packed(&args)),
        &LaunchConfig::linear((n / 128) as u32, 128),
    )
    .unwrap();
    let y: Vec<f32> = read(dev, dy, n * 4)
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert!(y
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 2.0 * i as f32 + 1.0));
    // A driver error comes back as the driver's error.
    let e = dev
        .launch(
            &saxpy,
            KernelArgs::Packed(packed(&args)),
            &LaunchConfig::linear(1, 4096),
        )
        .unwrap_err();
    assert!(e.message().contains("block"), "{e}");
    dev.free(dx).unwrap();
    dev.free(dy).unwrap();
}

/// A server whose AMDGPU plugin runs on the fake HSA runtime with agents
/// of target ID `agent` (`gfx90a:sramecc+:xnack-`), and `HSA_XNACK` set
/// to `xnack` when given, with its JIT cache in the returned folder;
/// `None` without clang-22 (a failure under `CI=true`).
fn amd_server(agent: &str, xnack: Option<&str>) -> Option<(Server, tempfile::TempDir)> {
    let runtime = test_support::amd::fake_hsa_library()?;
    let cache = tempfile::tempdir().unwrap();
    let env = [
        ("OFFLOAD_PLUGINS", Path::new("amdgpu")),
        ("OFFLOAD_HSA_RUNTIME", runtime.as_path()),
        ("OFFLOAD_JIT_CACHE", cache.path()),
        ("HSA_FAKE_ARCH", Path::new(agent)),
        // (Empty: the fake ignores it, whatever this machine exports.)
        ("HSA_XNACK", Path::new(xnack.unwrap_or(""))),
    ];
    // The fake lies in a private temporary folder, which a sandboxed
    // worker (its own /tmp, its own uid) cannot see.
    let server = Server::start_env(Some("amd"), &["--insecure-no-sandbox"], 0, &env);
    Some((server, cache))
}

/// One binary with a code object per `(target ID, mark)`, each declared
/// for its target ID, as clang-22 bundles several `--offload-arch`s.
fn amd_bundle(images: &[(&str, i32)]) -> Vec<u8> {
    images
        .iter()
        .flat_map(|&(target, mark)| {
            let code = test_support::amd::marked_code_object(target, mark).unwrap();
            let entry = OffloadBinary::new(ImageKind::Object, OffloadKind::OpenMp, &code)
                .with("triple", offload_image::amdgpu::TRIPLE)
                .with("arch", target);
            write_binary(&[entry])
        })
        .collect()
}

/// The target IDs the client was given for the server's GPU `dev`.
fn target_ids(dev: &offload_core::Device) -> Vec<String> {
    dev.info()
        .target_ids
        .iter()
        .map(|t| t.to_string())
        .collect()
}

/// Which image of `binary` the device loaded: its `mark`.
fn loaded_mark(dev: &std::sync::Arc<offload_core::Device>, binary: &[u8]) -> i32 {
    let program = dev.load_program(binary).unwrap();
    let (mark, _) = program.global("mark").unwrap();
    i32::from_ne_bytes(read(dev, mark, 4).try_into().unwrap())
}

/// A server's AMD GPU is matched by its target IDs, as a local one: the
/// xnack/sramecc settings it runs with decide, the most specific image
/// is sent, and its family's generic code runs where the server's
/// runtime lists the generic ISA.
#[test]
fn a_servers_amd_gpu_gets_code_objects_by_its_target_ids() {
    let Some((server, _cache)) = amd_server("gfx90a:sramecc+:xnack-", None) else {
        return;
    };
    let rt = client(&server.addr, Some("amd"));
    assert!(rt.failed_plugins().is_empty(), "{:?}", rt.failed_plugins());
    let dev = &rt.devices()[0];
    assert_eq!(target_ids(dev), ["gfx90a:sramecc+:xnack-"]);
    assert_eq!(dev.info().arch, "gfx90a");
    let images = [
        ("gfx90a", 1),
        ("gfx90a:xnack+", 2),
        ("gfx90a:xnack-", 3),
        ("gfx90a:sramecc+:xnack-", 4),
    ];
    assert_eq!(loaded_mark(dev, &amd_bundle(&images)), 4);
    assert_eq!(loaded_mark(dev, &amd_bundle(&images[..3])), 3);
    // What the GPU cannot run is refused here, with the server's reason.
    let e = dev.load_program(&amd_bundle(&[images[1]])).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(
        e.message().contains("gfx90a:xnack+") && e.message().contains("(gfx90a:sramecc+:xnack-)"),
        "{e}"
    );
    assert!(
        e.message()
            .contains(&format!("no image compatible with {}", dev.label())),
        "the client refused it: {e}"
    );
    // (The two loads above reached the server; the refused one did not.)
    let log = server.log();
    assert_eq!(log.matches("program loaded").count(), 2, "{log}");
    // Bitcode goes to the server as it is, whose JIT makes a code object
    // for its GPU's target ID; of two, the one declared for what the GPU
    // runs (xnack off), wherever it stands.
    let bitcode = |arch: &str, mark: i32| {
        let code = test_support::amd::opencl_bitcode(
            "gfx90a",
            &format!("__attribute__((visibility(\"protected\"))) global int mark = {mark};"),
        )
        .unwrap();
        let entry = OffloadBinary::new(ImageKind::Bitcode, OffloadKind::OpenMp, &code)
            .with("triple", offload_image::amdgpu::TRIPLE)
            .with("arch", arch);
        write_binary(&[entry])
    };
    let both = [bitcode("gfx90a:xnack+", 8), bitcode("gfx90a:xnack-", 9)].concat();
    assert_eq!(loaded_mark(dev, &both), 9);

    // The server's HSA_XNACK=1 reaches its session's runtime: the GPU
    // runs with xnack on, and the client sends the xnack+ image.
    let (xnack_on, _cache_on) = amd_server("gfx90a:sramecc+:xnack-", Some("1")).unwrap();
    let rt = client(&xnack_on.addr, Some("amd"));
    let dev = &rt.devices()[0];
    assert_eq!(target_ids(dev), ["gfx90a:sramecc+:xnack+"]);
    assert_eq!(loaded_mark(dev, &amd_bundle(&images)), 2);

    let (rdna3, _cache_rdna3) = amd_server("gfx1100", None).unwrap();
    let rt = client(&rdna3.addr, Some("amd"));
    let dev = &rt.devices()[0];
    assert_eq!(target_ids(dev), ["gfx1100", "gfx11-generic"]);
    assert_eq!(
        loaded_mark(dev, &amd_bundle(&[("gfx11-generic", 7), ("gfx1100", 8)])),
        8
    );
    assert_eq!(loaded_mark(dev, &amd_bundle(&[("gfx11-generic", 7)])), 7);
}
