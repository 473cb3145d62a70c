//! The host plugin end to end: C kernels built with clang-22, loaded from
//! memory and launched through the core, in both argument conventions.

use std::path::{Path, PathBuf};
use std::process::Command;

use offload_core::{AllocKind, Config, DevicePtr, ErrorCode, KernelArgs, LaunchConfig, Runtime};
use offload_image::{metadata, offload_binary};

fn runtime(devices: usize) -> Runtime {
    let config = Config {
        host_devices: devices,
        ..Config::default()
    };
    Runtime::new(config, &[offload_plugin_host::ENTRY])
}

/// Build `source` into a shared object with clang-22.
fn build_so(dir: &Path, name: &str, source: &str, extra: &[&str]) -> Vec<u8> {
    let src = dir.join(format!("{name}.c"));
    let out = dir.join(format!("{name}.so"));
    std::fs::write(&src, source).unwrap();
    let include: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "include"]
        .iter()
        .collect();
    let status = Command::new("clang-22")
        .args(["-O1", "-fPIC", "-shared", "-I"])
        .arg(&include)
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("clang-22 must be installed (see scripts/setup.sh)");
    assert!(status.success(), "clang-22 failed on {name}.c");
    std::fs::read(out).unwrap()
}

/// A kernel `k<n>(dyn_ptr, out, a1..a<n-1>)` storing a weighted sum of its
/// words, so any lost or shifted argument changes the result.
fn words_kernel_source(counts: &[usize]) -> String {
    let mut s = String::from("#include <stdint.h>\n");
    for &n in counts {
        s += &format!("void k{n}(void *dyn, int64_t *out");
        for i in 1..n {
            s += &format!(", int64_t a{i}");
        }
        s += ") {\n  int64_t acc = (int64_t)(intptr_t)dyn;\n";
        for i in 1..n {
            s += &format!("  acc += a{i} * {i};\n");
        }
        s += "  *out = acc;\n}\n";
    }
    s
}

#[test]
fn words_convention_with_many_argument_counts() {
    let counts = [1usize, 2, 5, 6, 7, 15, 16, 17, 40, 64, 65, 200, 255];
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "words", &words_kernel_source(&counts), &[]);
    let rt = runtime(1);
    let dev = &rt.devices()[0];
    let program = dev.load_program(&image).unwrap();
    let out = dev.alloc(8, AllocKind::Device).unwrap();
    for &n in &counts {
        let kernel = program.kernel(&format!("k{n}")).unwrap();
        // Words: dyn_ptr, out, then n-1 values.
        let mut words = vec![1000u64, out.0];
        words.extend((1..n as u64).map(|i| i * 3 + 1));
        let expected: i64 = 1000 + (1..n as i64).map(|i| (i * 3 + 1) * i).sum::<i64>();
        dev.launch(&kernel, KernelArgs::Words(&words), &LaunchConfig::default())
            .unwrap();
        let mut got = 0i64;
        // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
        unsafe {
            dev.copy_from_device((&mut got as *mut i64).cast(), out, 8)
                .unwrap()
        };
        assert_eq!(got, expected, "kernel with {} words", words.len());
    }
    dev.free(out).unwrap();
}

#[test]
fn too_many_words_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "w1", &words_kernel_source(&[1]), &[]);
    let rt = runtime(1);
    let dev = &rt.devices()[0];
    let kernel = dev.load_program(&image).unwrap().kernel("k1").unwrap();
    let words = vec![0u64; offload_plugin_host::MAX_KERNEL_WORDS + 1];
    let e = dev
        .launch(&kernel, KernelArgs::Words(&words), &LaunchConfig::default())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Unsupported);
    assert!(e.message().contains("257"), "{e}");
}

const PACKED_KERNELS: &str = r#"
#include "offload/host_kernel.h"
OFFLOAD_HOST_KERNEL(saxpy) {
  const struct { float a; const float *x; float *y; uint32_t n; } *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
}
/* Sum with a per-group partial in group memory, one atomic per group. */
OFFLOAD_HOST_KERNEL(group_sum) {
  const struct { const int64_t *x; int64_t *total; uint32_t n; } *p = args;
  int64_t *partial = item->group_memory;
  uint32_t last = item->group_size[0] - 1;
  if (item->local_id[0] == 0) *partial = 0;
  size_t i = offload_global_id_x(item);
  if (i < p->n) *partial += p->x[i];
  if (item->local_id[0] == last) __atomic_fetch_add(p->total, *partial, __ATOMIC_RELAXED);
}
/* Records each item's 3-D coordinates. */
OFFLOAD_HOST_KERNEL(coords) {
  uint32_t *out = *(uint32_t *const *)args;
  size_t gx = offload_global_id(item, 0), gy = offload_global_id(item, 1), gz = offload_global_id(item, 2);
  size_t w = offload_global_size(item, 0), h = offload_global_size(item, 1);
  size_t lin = (gz * h + gy) * w + gx;
  out[lin] = (uint32_t)(gx | gy << 8 | gz << 16);
}
int counter = 7;
long table[4] = {1, 2, 3, 4};
"#;

fn packed<T>(v: &T) -> &[u8] {
    // SAFETY: `v` is a live value of size_of::<T>() initialised bytes, borrowed as long as the slice.
    unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
}

#[test]
fn packed_grid_saxpy_reduction_and_3d_ids() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "packed", PACKED_KERNELS, &[]);
    let rt = runtime(1);
    let dev = &rt.devices()[0];
    let program = dev.load_program(&image).unwrap();

    // saxpy over 10_000 elements, 40 groups of 256.
    let n = 10_000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = vec![1.0; n];
    let dx = dev.alloc(n * 4, AllocKind::Device).unwrap();
    let dy = dev.alloc(n * 4, AllocKind::Device).unwrap();
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        dev.copy_to_device(dx, x.as_ptr().cast(), n * 4).unwrap();
        dev.copy_to_device(dy, y.as_ptr().cast(), n * 4).unwrap();
    }
    #[repr(C)]
    struct Saxpy {
        a: f32,
        x: u64,
        y: u64,
        n: u32,
    }
    let args = Saxpy {
        a: 2.0,
        x: dx.0,
        y: dy.0,
        n: n as u32,
    };
    let k = program.kernel("saxpy").unwrap();
    dev.launch(
        &k,
        KernelArgs::Packed(packed(&args)),
        &LaunchConfig::linear(40, 256),
    )
    .unwrap();
    let mut out = vec![0f32; n];
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        dev.copy_from_device(out.as_mut_ptr().cast(), dy, n * 4)
            .unwrap()
    };
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 2.0 * i as f32 + 1.0));

    // Reduction: group memory is per group and persists across its items.
    let vals: Vec<i64> = (1..=5000).collect();
    let dv = dev.alloc(vals.len() * 8, AllocKind::Device).unwrap();
    let total = dev.alloc(8, AllocKind::Device).unwrap();
    dev.fill(total, &[0], 8).unwrap();
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        dev.copy_to_device(dv, vals.as_ptr().cast(), vals.len() * 8)
            .unwrap()
    };
    #[repr(C)]
    struct Sum {
        x: u64,
        total: u64,
        n: u32,
    }
    let args = Sum {
        x: dv.0,
        total: total.0,
        n: vals.len() as u32,
    };
    let cfg = LaunchConfig {
        dyn_group_memory: 8,
        ..LaunchConfig::linear(40, 128)
    };
    dev.launch(
        &program.kernel("group_sum").unwrap(),
        KernelArgs::Packed(packed(&args)),
        &cfg,
    )
    .unwrap();
    let mut got = 0i64;
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        dev.copy_from_device((&mut got as *mut i64).cast(), total, 8)
            .unwrap()
    };
    assert_eq!(got, 5000 * 5001 / 2);

    // Every item of a 3-D grid runs exactly once with the right ids.
    let (w, h, d) = (8usize, 6usize, 4usize);
    let dout = dev.alloc(w * h * d * 4, AllocKind::Device).unwrap();
    dev.fill(dout, &[0xff; 4], w * h * d * 4).unwrap();
    let cfg = LaunchConfig {
        num_groups: [2, 3, 2],
        group_size: [4, 2, 2],
        ..Default::default()
    };
    dev.launch(
        &program.kernel("coords").unwrap(),
        KernelArgs::Packed(packed(&dout.0)),
        &cfg,
    )
    .unwrap();
    let mut ids = vec![0u32; w * h * d];
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        dev.copy_from_device(ids.as_mut_ptr().cast(), dout, ids.len() * 4)
            .unwrap()
    };
    for z in 0..d {
        for y in 0..h {
            for x in 0..w {
                assert_eq!(ids[(z * h + y) * w + x], (x | y << 8 | z << 16) as u32);
            }
        }
    }
    for p in [dx, dy, dv, total, dout] {
        dev.free(p).unwrap();
    }
}

#[test]
fn launch_limits_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "limits", PACKED_KERNELS, &[]);
    let rt = runtime(1);
    let dev = &rt.devices()[0];
    let k = dev.load_program(&image).unwrap().kernel("saxpy").unwrap();
    let too_big = LaunchConfig::linear(1, 4096);
    assert_eq!(
        dev.launch(&k, KernelArgs::Packed(&[0; 32]), &too_big)
            .unwrap_err()
            .code(),
        ErrorCode::InvalidArgument
    );
    let zero = LaunchConfig::linear(0, 1);
    assert_eq!(
        dev.launch(&k, KernelArgs::Packed(&[0; 32]), &zero)
            .unwrap_err()
            .code(),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn globals_have_sizes_and_each_device_its_own_copy() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "globals", PACKED_KERNELS, &[]);
    let rt = runtime(2);
    let p0 = rt.devices()[0].load_program(&image).unwrap();
    let p1 = rt.devices()[1].load_program(&image).unwrap();
    let (c0, size) = p0.global("counter").unwrap();
    assert_eq!(size, 4);
    assert_eq!(p0.global("table").unwrap().1, 32);
    let (c1, _) = p1.global("counter").unwrap();
    assert_ne!(c0, c1, "each device loads its own copy of the image");
    let v = 42i32;
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        rt.devices()[0]
            .copy_to_device(c0, (&v as *const i32).cast(), 4)
            .unwrap()
    };
    let mut r = 0i32;
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        rt.devices()[1]
            .copy_from_device((&mut r as *mut i32).cast(), c1, 4)
            .unwrap()
    };
    assert_eq!(r, 7);
    // Kinds are checked both ways.
    assert_eq!(
        p0.kernel("counter").err().unwrap().code(),
        ErrorCode::SymbolKind
    );
    assert_eq!(
        p0.global("saxpy").unwrap_err().code(),
        ErrorCode::SymbolKind
    );
    assert_eq!(p0.kernel("nope").err().unwrap().code(), ErrorCode::NotFound);
}

#[test]
fn containers_are_unwrapped_and_metadata_reaches_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "wrapped", PACKED_KERNELS, &[]);
    let rt = runtime(1);
    let dev = &rt.devices()[0];
    // OffloadBinary around the ELF.
    let ob = offload_binary::write(&[offload_binary::OffloadBinary::new(
        offload_binary::ImageKind::Object,
        offload_binary::OffloadKind::OpenMp,
        &image,
    )
    .with("triple", "x86_64-unknown-linux-gnu")
    .with("arch", "")]);
    assert!(dev.is_compatible(&ob));
    dev.load_program(&ob).unwrap().kernel("saxpy").unwrap();
    // 1OMP header around that.
    let mut meta = metadata::Metadata::new();
    meta.insert(metadata::PRODUCER, "clang-22");
    meta.insert(metadata::COMPILE_OPTIONS, "-O1 -fPIC");
    let nested = metadata::write(&meta, &ob);
    dev.load_program(&nested).unwrap().kernel("saxpy").unwrap();
    // An image for another target is refused with a message naming both.
    let foreign = offload_binary::write(&[offload_binary::OffloadBinary::new(
        offload_binary::ImageKind::Object,
        offload_binary::OffloadKind::OpenMp,
        &image,
    )
    .with("triple", "nvptx64-nvidia-cuda")
    .with("arch", "sm_90")]);
    let e = dev.load_program(&foreign).err().unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidBinary);
    assert!(e.message().contains("nvptx64-nvidia-cuda sm_90"), "{e}");
}

#[test]
fn hostile_images_are_rejected_and_the_device_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "good", PACKED_KERNELS, &[]);
    let rt = runtime(1);
    let dev = &rt.devices()[0];
    let mut rng = 0x2545F4914F6CDD1Du64;
    let mut random = vec![0u8; 4096];
    for b in random.iter_mut() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        *b = rng as u8;
    }
    let truncated = &image[..image.len() / 3];
    let header_only = &image[..64];
    for (what, bytes) in [
        ("random", &random[..]),
        ("truncated", truncated),
        ("header", header_only),
        ("empty", &[][..]),
    ] {
        let e = dev
            .load_program(bytes)
            .err()
            .unwrap_or_else(|| panic!("{what} image was accepted"));
        assert_eq!(e.code(), ErrorCode::InvalidBinary, "{what}: {e}");
    }
    // A relocatable object is an ELF for this machine but cannot be dlopened.
    let obj_path = dir.path().join("obj.o");
    let src = dir.path().join("good.c");
    assert!(Command::new("clang-22")
        .args(["-c", "-fPIC", "-I"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include"))
        .arg("-o")
        .arg(&obj_path)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let e = dev
        .load_program(&std::fs::read(&obj_path).unwrap())
        .err()
        .unwrap();
    assert!(e.message().contains("shared object"), "{e}");
    // Still fine afterwards.
    dev.load_program(&image).unwrap().kernel("saxpy").unwrap();
}

#[test]
fn loading_leaves_no_files_behind() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(dir.path(), "nofiles", PACKED_KERNELS, &[]);
    let list = || -> Vec<String> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("offload-image") || n.starts_with("tmpfile_"))
            .collect()
    };
    let before = list();
    let rt = runtime(2);
    for d in rt.devices() {
        d.load_program(&image).unwrap();
    }
    assert_eq!(list(), before);
}

#[test]
fn memory_kinds_frees_and_copies() {
    let rt = runtime(2);
    let (d0, d1) = (&rt.devices()[0], &rt.devices()[1]);
    for kind in [AllocKind::Host, AllocKind::Device, AllocKind::Shared] {
        let p = d0.alloc(100, kind).unwrap();
        assert_eq!(p.0 % 64, 0, "host allocations are 64-byte aligned");
        assert_eq!(d0.allocation(p.offset(50)).unwrap().kind, kind);
        d0.free(p).unwrap();
    }
    assert_eq!(
        d0.free(DevicePtr(0x1234)).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    let a = d0.alloc(1 << 20, AllocKind::Device).unwrap();
    let b = d1.alloc(1 << 20, AllocKind::Device).unwrap();
    let data: Vec<u8> = (0..1 << 20).map(|i| (i * 7) as u8).collect();
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe { d0.copy_to_device(a, data.as_ptr(), data.len()).unwrap() };
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        rt.copy(
            offload_core::Location::Device(d1.id(), b),
            offload_core::Location::Device(d0.id(), a),
            data.len(),
            None,
        )
        .unwrap()
    };
    let mut back = vec![0u8; data.len()];
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe {
        d1.copy_from_device(back.as_mut_ptr(), b, back.len())
            .unwrap()
    };
    assert_eq!(back, data);
    d0.fill(a, &[1, 2, 3, 4], 16).unwrap();
    // SAFETY: the host buffer holds every byte copied, and the device range is a live allocation of this test.
    unsafe { d0.copy_from_device(back.as_mut_ptr(), a, 16).unwrap() };
    assert_eq!(&back[..8], &[1, 2, 3, 4, 1, 2, 3, 4]);
    assert_eq!(
        d0.fill(a, &[1, 2, 3], 16).unwrap_err().code(),
        ErrorCode::InvalidSize
    );
    d0.free(a).unwrap();
    d1.free(b).unwrap();
    assert_eq!(
        d0.free(a).unwrap_err().code(),
        ErrorCode::InvalidArgument,
        "double free"
    );
}

/// Kernels and globals are looked up only among the symbols the image
/// itself defines: `dlsym` on the image's handle would also find its
/// dependencies' (libc's `system`, `dlopen`, `printf`), and a "kernel"
/// `system` launched with a pointer to "sh -c ..." runs a shell command.
#[test]
fn lookups_find_only_what_the_image_defines() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_so(
        dir.path(),
        "own",
        "#include <stdio.h>\n#include <stdlib.h>\n\
         int g_own = 7;\n\
         void own(void *a, void *i) { (void)a; (void)i; if (g_own == 0) { printf(\"x\"); system(\"true\"); } }\n",
        &[],
    );
    let rt = runtime(1);
    let dev = &rt.devices()[0];
    let program = dev.load_program(&image).unwrap();
    program.kernel("own").unwrap();
    assert_eq!(program.global("g_own").unwrap().1, 4);
    for name in ["system", "dlopen", "printf", "malloc", "_init", "environ"] {
        let Err(e) = program.kernel(name) else {
            panic!("kernel '{name}' was found in an image that does not define it")
        };
        assert_eq!(e.code(), ErrorCode::NotFound, "{name}: {e}");
        assert!(
            e.to_string()
                .contains(&format!("'{name}' is not defined by the image")),
            "{name}: {e}"
        );
        assert!(program.global(name).is_err(), "global '{name}'");
    }
}
