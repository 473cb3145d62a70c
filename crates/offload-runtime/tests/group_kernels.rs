//! GPU-style host kernels (host_kernel.h ABI v2: work-group barriers,
//! dynamic and static group memory) through the Rust API: LLVM's
//! local-memory reduction and static local-memory tests, a tiled matrix
//! multiply, and a divergent barrier reported as an error. The kernels are
//! plugins/host/tests/kernels/group_kernels.c, built with clang-22 (a
//! missing clang-22 fails the test).

mod common;

use offload_runtime::{Device, KernelArgs, LaunchConfig};

fn kernels() -> Vec<u8> {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source =
        std::fs::read_to_string(root.join("../../plugins/host/tests/kernels/group_kernels.c"))
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    common::compile(
        dir.path(),
        "group_kernels.so",
        &source,
        &["-O2", "-fPIC", "-shared"],
    )
}

fn grid(groups: [u32; 3], size: [u32; 3], dyn_group_memory: u32) -> LaunchConfig {
    LaunchConfig {
        num_groups: groups,
        group_size: size,
        dyn_group_memory,
        ..LaunchConfig::default()
    }
}

#[test]
fn reductions_in_group_memory_with_barriers() {
    let dev = Device::host().unwrap();
    let program = dev.load_program(&kernels()).unwrap();
    let queue = dev.create_queue().unwrap();
    for (name, dynamic) in [("reduce_dynamic", true), ("reduce_static", false)] {
        let kernel = program.kernel(name).unwrap();
        for size in [64u32, 128, 256] {
            let mut out = dev.alloc_zeros::<u32>(8).unwrap();
            let args = KernelArgs::new().ptr_mut(&mut out);
            let mem = if dynamic { 4 * size } else { 0 };
            // SAFETY: the kernel writes one u32 per group into `out`.
            unsafe { queue.launch(&kernel, grid([8, 1, 1], [size, 1, 1], mem), &args) }
                .unwrap()
                .wait()
                .unwrap();
            drop(args);
            assert_eq!(out.to_vec().unwrap(), vec![2 * size; 8], "{name} x {size}");
        }
    }
}

#[test]
fn tiled_matrix_multiply_and_divergent_barriers() {
    let dev = Device::host().unwrap();
    let program = dev.load_program(&kernels()).unwrap();
    let queue = dev.create_queue().unwrap();
    let n = 48usize;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let (da, db) = (dev.buffer_from(&a).unwrap(), dev.buffer_from(&b).unwrap());
    let mut dc = dev.alloc_zeros::<f32>(n * n).unwrap();
    let matmul = program.kernel("matmul_tiled").unwrap();
    let args = KernelArgs::new()
        .ptr(&da)
        .ptr(&db)
        .ptr_mut(&mut dc)
        .value(n as u64);
    let t = (n / 16) as u32;
    // SAFETY: the kernel reads n x n floats of a and b, writes n x n of c.
    unsafe { queue.launch(&matmul, grid([t, t, 1], [16, 16, 1], 0), &args) }
        .unwrap()
        .wait()
        .unwrap();
    drop(args);
    let c = dc.to_vec().unwrap();
    for row in 0..n {
        for col in 0..n {
            let want: f32 = (0..n).map(|k| a[row * n + k] * b[k * n + col]).sum();
            assert_eq!(c[row * n + col], want, "c[{row}][{col}]");
        }
    }
    // Item 0 of each group returns before the barrier the others wait at.
    let divergent = program.kernel("divergent_barrier").unwrap();
    let mut out = dev.alloc_zeros::<u32>(128).unwrap();
    let args = KernelArgs::new().ptr_mut(&mut out);
    // SAFETY: the kernel writes at most one u32 per item into `out`.
    let e = unsafe { queue.launch(&divergent, grid([2, 1, 1], [64, 1, 1], 0), &args) }
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(e.to_string().contains("divergent control flow"), "{e}");
    drop(args);
    assert!(
        out.to_vec().unwrap().iter().all(|&v| v == 0),
        "abandoned items ran on"
    );
}
