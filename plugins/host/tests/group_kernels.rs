//! GPU-style host kernels (host_kernel.h ABI v2) through the core: work-group
//! barriers, dynamic and static group memory, divergent barriers reported as
//! errors, grid limits, and asynchronous queues. The kernels are
//! tests/kernels/group_kernels.c, built with clang-22 (a missing clang-22
//! fails the test: these are not optional).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use offload_core::queue::Queue;
use offload_core::{AllocKind, Config, Device, ErrorCode, KernelArgs, LaunchConfig, Runtime};

fn runtime() -> Runtime {
    let config = Config {
        host_devices: 1,
        ..Config::default()
    };
    Runtime::new(config, &[offload_plugin_host::ENTRY])
}

fn kernels() -> Vec<u8> {
    kernels_with(&[])
}

/// group_kernels.c built as a shared object with `flags` added.
fn kernels_with(flags: &[&str]) -> Vec<u8> {
    let mut all = vec!["-shared"];
    all.extend_from_slice(flags);
    build_kernels(&all, "group_kernels.so")
}

/// group_kernels.c as LLVM bitcode: loading it compiles it (the JIT), and
/// its barrier kernels get work-item loops instead of coroutines.
fn bitcode_kernels() -> Vec<u8> {
    build_kernels(&["-emit-llvm", "-c"], "group_kernels.bc")
}

/// The bytes clang-22 makes of group_kernels.c with `flags`.
fn build_kernels(flags: &[&str], name: &str) -> Vec<u8> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(name);
    let status = Command::new("clang-22")
        .args(["-O2", "-fPIC", "-Wall", "-Werror"])
        .args(flags)
        .arg("-I")
        .arg(root.join("../../include"))
        .arg(root.join("tests/kernels/group_kernels.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("clang-22 must be installed (see scripts/setup.sh)");
    assert!(status.success(), "clang-22 failed on group_kernels.c");
    std::fs::read(out).unwrap()
}

/// `n` elements of `T` of device memory (host memory of this process).
fn buffer<T: Copy>(dev: &Device, n: usize, init: T) -> &'static mut [T] {
    let p = dev
        .alloc(n * std::mem::size_of::<T>(), AllocKind::Device)
        .unwrap();
    // SAFETY: a fresh host-plugin allocation of `n` elements, never freed
    // before the runtime ends (the test leaks it to the runtime's teardown).
    let s = unsafe { std::slice::from_raw_parts_mut(p.as_ptr::<T>(), n) };
    s.fill(init);
    s
}

fn ptr_arg<T>(p: &[T]) -> Vec<u8> {
    (p.as_ptr() as u64).to_ne_bytes().to_vec()
}

fn config(groups: [u32; 3], size: [u32; 3], dyn_mem: u32) -> LaunchConfig {
    LaunchConfig {
        num_groups: groups,
        group_size: size,
        dyn_group_memory: dyn_mem,
        ..LaunchConfig::default()
    }
}

#[test]
fn local_memory_reductions_dynamic_and_static() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    check_reductions(dev, &prog);
}

/// `reduce_dynamic` and `reduce_static` over 7 groups of 64, 128 and 256
/// items: each group's sum of 2s.
fn check_reductions(dev: &Device, prog: &Arc<offload_core::Program>) {
    for name in ["reduce_dynamic", "reduce_static"] {
        let k = prog.kernel(name).unwrap();
        for size in [64u32, 128, 256] {
            let groups = 7;
            let out = buffer(dev, groups, 0u32);
            let dyn_mem = if name == "reduce_dynamic" {
                size * 4
            } else {
                0
            };
            dev.launch(
                &k,
                KernelArgs::Packed(&ptr_arg(out)),
                &config([groups as u32, 1, 1], [size, 1, 1], dyn_mem),
            )
            .unwrap_or_else(|e| panic!("{name} x {size}: {e}"));
            assert!(
                out.iter().all(|&v| v == 2 * size),
                "{name} x {size}: {out:?}"
            );
        }
    }
}

#[test]
fn tiled_matrix_multiply() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    check_matmul(dev, &prog, "matmul_tiled", 64);
}

/// C = A x B of `n` x `n` (a multiple of 16) by kernel `name`, in 16 x 16
/// groups, checked against the host's sums; C is returned.
fn check_matmul(dev: &Device, prog: &Arc<offload_core::Program>, name: &str, n: usize) -> Vec<f32> {
    let k = prog.kernel(name).unwrap();
    let a = buffer(dev, n * n, 0f32);
    let b = buffer(dev, n * n, 0f32);
    let c = buffer(dev, n * n, -1f32);
    for i in 0..n * n {
        a[i] = (i % 7) as f32 - 3.0;
        b[i] = (i % 5) as f32 * 0.5;
    }
    let mut args = Vec::new();
    for p in [a.as_ptr() as u64, b.as_ptr() as u64, c.as_ptr() as u64] {
        args.extend_from_slice(&p.to_ne_bytes());
    }
    args.extend_from_slice(&(n as u64).to_ne_bytes()); // u32 n + padding
    let t = (n / 16) as u32;
    dev.launch(
        &k,
        KernelArgs::Packed(&args),
        &config([t, t, 1], [16, 16, 1], 0),
    )
    .unwrap();
    for row in 0..n {
        for col in 0..n {
            let want: f32 = (0..n).map(|k| a[row * n + k] * b[k * n + col]).sum();
            assert_eq!(c[row * n + col], want, "{name}: c[{row}][{col}]");
        }
    }
    c.to_vec()
}

#[test]
fn prefix_scan_in_groups_larger_than_the_worker_pool() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    check_scans(dev, &prog, 5);
}

/// `scan_group` over `groups` groups of 1, 32 and 1024 items: each item
/// holds its group's inclusive prefix sum.
fn check_scans(dev: &Device, prog: &Arc<offload_core::Program>, groups: usize) {
    let k = prog.kernel("scan_group").unwrap();
    for size in [1u32, 32, 1024] {
        let n = groups * size as usize;
        let input = buffer(dev, n, 0u32);
        let out = buffer(dev, n, 0u32);
        for (i, v) in input.iter_mut().enumerate() {
            *v = (i as u32).wrapping_mul(2654435761) >> 28;
        }
        let mut args = ptr_arg(input);
        args.extend(ptr_arg(out));
        dev.launch(
            &k,
            KernelArgs::Packed(&args),
            &config([groups as u32, 1, 1], [size, 1, 1], 2 * 4 * size),
        )
        .unwrap();
        for g in 0..groups {
            let mut acc = 0;
            for i in 0..size as usize {
                acc += input[g * size as usize + i];
                assert_eq!(
                    out[g * size as usize + i],
                    acc,
                    "group {g} item {i} of {size}"
                );
            }
        }
    }
}

#[test]
fn three_dimensional_groups_share_memory() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    check_neighbour_3d(dev, &prog, [2, 3, 2], [4, 3, 5]);
}

/// `neighbour_3d` over `groups` of `size`: every item read its neighbour's
/// local id from group memory after the barrier.
fn check_neighbour_3d(
    dev: &Device,
    prog: &Arc<offload_core::Program>,
    groups: [u32; 3],
    size: [u32; 3],
) {
    let k = prog.kernel("neighbour_3d").unwrap();
    let items: u32 = size.iter().product();
    let [w, h, d] = [0, 1, 2].map(|i| (groups[i] * size[i]) as usize);
    let out = buffer(dev, w * h * d, u32::MAX);
    dev.launch(
        &k,
        KernelArgs::Packed(&ptr_arg(out)),
        &config(groups, size, items * 4),
    )
    .unwrap();
    for z in 0..d {
        for y in 0..h {
            for x in 0..w {
                let l = [x, y, z].map(|v| v as u32);
                let lin = l[0] % size[0] + size[0] * (l[1] % size[1] + size[1] * (l[2] % size[2]));
                assert_eq!(out[x + w * (y + h * z)], (lin + 1) % items, "({x},{y},{z})");
            }
        }
    }
}

#[test]
fn group_loops_cover_every_item_of_3d_grids() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    check_write_ids_3d(dev, &prog, [3, 2, 2], [5, 3, 2]);
}

/// `write_ids_3d` over `groups` of `size`: every item wrote its linear
/// global id, plus 1 for seeing its own group's memory.
fn check_write_ids_3d(
    dev: &Device,
    prog: &Arc<offload_core::Program>,
    groups: [u32; 3],
    size: [u32; 3],
) {
    let k = prog.kernel("write_ids_3d").unwrap();
    let n: u32 = (0..3).map(|i| groups[i] * size[i]).product();
    let out = buffer(dev, n as usize, u32::MAX);
    dev.launch(
        &k,
        KernelArgs::Packed(&ptr_arg(out)),
        &config(groups, size, 4),
    )
    .unwrap();
    for (i, &v) in out.iter().enumerate() {
        assert_eq!(v, i as u32 + 1, "item {i}: id and its group's memory");
    }
}

#[test]
fn a_kernels_group_loop_is_called_once_per_group() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    let (groups, size) = ([5u32, 3, 1], [8u32, 2, 1]);
    // (kernel, argument bytes, item calls, group calls)
    for (name, arg_bytes, want_items, want_groups) in [
        ("count_group_calls", 16, 0, 15),
        ("count_group_calls", 4096, 0, 15),
        // Past what the group loop's copy holds: one call per item.
        ("count_group_calls", 4097, 15 * 16, 0),
        ("count_item_calls", 16, 15 * 16, 0),
    ] {
        let k = prog.kernel(name).unwrap();
        let counts = buffer(dev, 2, 0u32);
        let mut args = ptr_arg(&counts[..1]);
        args.extend(ptr_arg(&counts[1..]));
        args.resize(arg_bytes, 0);
        dev.launch(&k, KernelArgs::Packed(&args), &config(groups, size, 0))
            .unwrap();
        assert_eq!(
            (counts[0], counts[1]),
            (want_items, want_groups),
            "{name} with {arg_bytes} argument bytes: (item calls, group calls)"
        );
    }
}

/// A barrier kernel's group form (OFFLOAD_HOST_KERNEL_GROUP: the group as
/// loops split at the barriers) gives what its items give as coroutines,
/// over grids of many groups (several pieces per worker thread).
#[test]
fn group_forms_of_barrier_kernels_match_their_items() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    for size in [64u32, 128, 256] {
        let groups = 1000usize;
        let mut got = Vec::new();
        for name in ["reduce_dynamic", "reduce_loops"] {
            let k = prog.kernel(name).unwrap();
            let out = buffer(dev, groups, 0u32);
            dev.launch(
                &k,
                KernelArgs::Packed(&ptr_arg(out)),
                &config([groups as u32, 1, 1], [size, 1, 1], size * 4),
            )
            .unwrap_or_else(|e| panic!("{name} x {size}: {e}"));
            assert!(
                out.iter().all(|&v| v == 2 * size),
                "{name} x {size}: {out:?}"
            );
            got.push(out.to_vec());
        }
        assert_eq!(got[0], got[1]);
    }
    assert_eq!(
        check_matmul(dev, &prog, "matmul_tiled", 96),
        check_matmul(dev, &prog, "matmul_loops", 96)
    );
}

/// The runtime runs a barrier kernel's group form, not its items, once per
/// group, whatever the argument size; a group form that calls the barrier
/// fails the launch with an error naming it.
#[test]
fn barrier_kernels_with_a_group_form_run_it_once_per_group() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    let k = prog.kernel("count_barrier_group_calls").unwrap();
    for (groups, size, arg_bytes) in [
        ([5u32, 3, 1], [8u32, 2, 1], 16usize),
        ([2, 2, 3], [4, 3, 2], 8192),
        ([1, 1, 1], [1, 1, 1], 16),
    ] {
        let counts = buffer(dev, 2, 0u32);
        let mut args = ptr_arg(&counts[..1]);
        args.extend(ptr_arg(&counts[1..]));
        args.resize(arg_bytes, 0);
        dev.launch(&k, KernelArgs::Packed(&args), &config(groups, size, 64))
            .unwrap();
        let want = groups.iter().product::<u32>();
        assert_eq!(
            (counts[0], counts[1]),
            (0, want),
            "{groups:?} x {size:?}, {arg_bytes} argument bytes: (item calls, group calls)"
        );
    }
    let k = prog.kernel("group_form_barrier").unwrap();
    let e = dev
        .launch(
            &k,
            KernelArgs::Packed(&[]),
            &config([3, 1, 1], [8, 1, 1], 0),
        )
        .unwrap_err();
    assert!(
        e.message().contains("group_form_barrier_offload_group")
            && e.message().contains("must not call the barrier"),
        "{e}"
    );
}

/// Grids of many groups are run in pieces of consecutive groups: every
/// item of a large 3-D grid gets its ids and its group's memory, across the
/// pieces' boundaries, through the group loop and as coroutines.
#[test]
fn large_grids_run_in_pieces_keep_every_group_id() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    check_write_ids_3d(dev, &prog, [37, 11, 5], [4, 2, 1]);
    check_neighbour_3d(dev, &prog, [19, 7, 3], [2, 3, 2]);
}

/// The group loops of OFFLOAD_HOST_KERNEL, built once per x86-64 level
/// and picked per call (the default), or built just once
/// (OFFLOAD_HOST_NO_CLONES), and with -march=native: the same results.
#[test]
fn group_loops_for_each_vector_width_agree() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let n = 5000usize; // not a multiple of the group size: the bounds check
    let x = buffer(dev, n, 0f32);
    for (i, v) in x.iter_mut().enumerate() {
        *v = i as f32 * 0.25;
    }
    for flags in [&[][..], &["-DOFFLOAD_HOST_NO_CLONES"], &["-march=native"]] {
        let prog = dev.load_program(&kernels_with(flags)).unwrap();
        check_write_ids_3d(dev, &prog, [7, 3, 2], [16, 2, 3]);
        let k = prog.kernel("saxpy").unwrap();
        let y = buffer(dev, n + 64, -1f32);
        y[..n].fill(1.0);
        let mut args = 2f32.to_ne_bytes().to_vec();
        args.extend_from_slice(&[0; 4]);
        args.extend(ptr_arg(x));
        args.extend(ptr_arg(y));
        args.extend_from_slice(&(n as u64).to_ne_bytes()); // u32 n + padding
        let groups = n.div_ceil(256) as u32;
        dev.launch(
            &k,
            KernelArgs::Packed(&args),
            &config([groups, 1, 1], [256, 1, 1], 0),
        )
        .unwrap();
        for i in 0..n {
            assert_eq!(y[i], 2.0 * x[i] + 1.0, "{flags:?}: y[{i}]");
        }
        assert!(y[n..].iter().all(|&v| v == -1.0), "{flags:?}: past n");
    }
}

/// The group loops are what makes plain kernels fast: whatever the target
/// flags, the copies the header builds per x86-64 level must have the work
/// item inlined (a copy whose features are not a superset of the build's
/// kept the kernel's inline helpers as calls, one per item: 5x slower).
#[test]
fn group_loops_inline_the_item_for_every_target() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    for flags in [
        &[][..],
        &["-mavx2"],
        &["-march=skylake"],
        &["-march=x86-64-v4"],
        &["-march=znver4"],
        &["-DOFFLOAD_HOST_NO_CLONES"],
    ] {
        let out = dir.path().join("k.so");
        let status = Command::new("clang-22")
            .args(["-O2", "-fPIC", "-shared", "-I"])
            .arg(root.join("../../include"))
            .args(flags)
            .arg(root.join("tests/kernels/group_kernels.c"))
            .arg("-o")
            .arg(&out)
            .status()
            .expect("clang-22 must be installed (see scripts/setup.sh)");
        assert!(status.success(), "clang-22 {flags:?}");
        let dis = Command::new("llvm-objdump-22")
            .args(["-d", "--no-show-raw-insn"])
            .arg(&out)
            .output()
            .expect("llvm-objdump-22 must be installed (llvm-22, see scripts/setup.sh)");
        assert!(dis.status.success());
        let text = String::from_utf8_lossy(&dis.stdout);
        let mut loops = 0;
        let mut current = String::new();
        for line in text.lines() {
            if let Some(name) = line.strip_suffix(">:").and_then(|l| l.split('<').nth(1)) {
                current = name.to_string();
                if ["saxpy", "write_global_id"]
                    .iter()
                    .any(|k| current.starts_with(&format!("{k}_offload_group")))
                {
                    loops += 1;
                }
                continue;
            }
            let in_loop = ["saxpy", "write_global_id"]
                .iter()
                .any(|k| current.starts_with(&format!("{k}_offload_group")));
            if in_loop && line.contains("call") {
                assert!(
                    !line.contains("<offload_") && !line.contains("_offload_item_"),
                    "{flags:?}: {current} calls a helper per item: {line}"
                );
            }
        }
        assert!(loops >= 2, "{flags:?}: no group loops found");
    }
}

/// A kernel exporting `<kernel>_offload_groups` is called once per run of
/// consecutive groups (each group exactly once, far fewer calls than
/// groups), a launch of one group included, never through its
/// `_offload_group` or per item.
#[test]
fn runs_of_groups_go_to_the_groups_entry() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    let k = prog.kernel("count_piece_calls").unwrap();
    for groups in [[37u32, 11, 5], [1, 1, 1], [2, 1, 1], [1000, 1, 1]] {
        let n = groups.iter().product::<u32>() as usize;
        let seen = buffer(dev, n, 0u32);
        let counts = buffer(dev, 3, 0u32);
        let mut args = ptr_arg(seen);
        args.extend(ptr_arg(counts));
        dev.launch(&k, KernelArgs::Packed(&args), &config(groups, [4, 2, 1], 0))
            .unwrap();
        assert!(seen.iter().all(|&v| v == 1), "{groups:?}: {seen:?}");
        let (runs, single, items) = (counts[0], counts[1], counts[2]);
        assert_eq!(items, 0, "{groups:?}: per-item calls");
        assert_eq!(single, 0, "{groups:?}: single-group calls");
        assert!(
            runs >= 1 && (n < 64 || (runs as usize) < n / 4),
            "{groups:?}: {runs} runs"
        );
    }
}

#[test]
fn many_barriers_in_loops() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    let k = prog.kernel("many_barriers").unwrap();
    let groups = 9usize;
    let out = buffer(dev, groups, 0u32);
    let mut args = ptr_arg(out);
    args.extend_from_slice(&50u64.to_ne_bytes());
    dev.launch(
        &k,
        KernelArgs::Packed(&args),
        &config([groups as u32, 1, 1], [100, 1, 1], 8),
    )
    .unwrap();
    assert!(out.iter().all(|&v| v == 50), "{out:?}");
}

#[test]
fn divergent_and_undeclared_barriers_are_errors_not_hangs() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    let out = buffer(dev, 4 * 64, 0u32);
    for m in divergent_launch_errors(dev, &prog, out) {
        assert!(
            m.contains("divergent_barrier") && m.contains("63 of 64 work items wait at barrier #1"),
            "{m}"
        );
        assert!(
            m.contains("returned without reaching it") && m.contains("[0, 0, 0]"),
            "{m}"
        );
    }
    assert!(out.iter().all(|&v| v == 0), "abandoned items ran on");
    let k = prog.kernel("undeclared_barrier").unwrap();
    let e = dev
        .launch(
            &k,
            KernelArgs::Packed(&[]),
            &config([2, 1, 1], [8, 1, 1], 0),
        )
        .unwrap_err();
    assert!(
        e.message()
            .contains("OFFLOAD_HOST_KERNEL_BARRIER(undeclared_barrier)"),
        "{e}"
    );
    // The device stays usable, and stacks are reused.
    reduce_once(dev, &prog, out);
}

/// The messages of `divergent_barrier` launched over 1 and 4 groups of 64
/// (item 0 returns before the barrier), writing into `out`.
fn divergent_launch_errors(
    dev: &Device,
    prog: &Arc<offload_core::Program>,
    out: &[u32],
) -> Vec<String> {
    let k = prog.kernel("divergent_barrier").unwrap();
    [1u32, 4]
        .map(|groups| {
            let e = dev
                .launch(
                    &k,
                    KernelArgs::Packed(&ptr_arg(out)),
                    &config([groups, 1, 1], [64, 1, 1], 0),
                )
                .unwrap_err();
            e.message().to_string()
        })
        .to_vec()
}

/// One group of `reduce_dynamic`: the device still runs barrier kernels.
fn reduce_once(dev: &Device, prog: &Arc<offload_core::Program>, out: &[u32]) {
    let k = prog.kernel("reduce_dynamic").unwrap();
    dev.launch(
        &k,
        KernelArgs::Packed(&ptr_arg(out)),
        &config([1, 1, 1], [64, 1, 1], 256),
    )
    .unwrap();
    assert_eq!(out[0], 128);
}

#[test]
fn grids_past_the_limit_are_refused_when_enqueued() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    let k = prog.kernel("write_global_id").unwrap();
    let q = Queue::new(Some(dev)).unwrap();
    for (groups, size) in [
        ([u32::MAX, u32::MAX, u32::MAX], [1024u32, 1, 1]), // overflows 64 bits
        ([1 << 20, 1 << 20, 1], [512, 1, 1]),              // 2^49 items
    ] {
        let e = q
            .launch(&k, KernelArgs::Packed(&[0; 8]), &config(groups, size, 0))
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(e.message().contains("limit of 2^48 work items"), "{e}");
    }
    // Static + dynamic group memory past 1 MiB.
    let k = prog.kernel("reduce_static").unwrap();
    let e = q
        .launch(
            &k,
            KernelArgs::Packed(&[0; 8]),
            &config([1, 1, 1], [64, 1, 1], 1 << 20),
        )
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::OutOfResources);
    assert!(e.message().contains("+1024 static"), "{e}");
    q.synchronize().unwrap();
}

/// A queued launch returns before its kernel could finish: the kernel
/// waits for a flag the host sets only after the launch returned, and it
/// starts running (on a worker thread) before anyone synchronises.
#[test]
fn queued_launches_run_asynchronously() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&kernels()).unwrap();
    let k = prog.kernel("wait_for_flag").unwrap();
    let flag = Arc::new(AtomicI32::new(0));
    let started = Arc::new(AtomicI32::new(0));
    let mut args = (flag.as_ptr() as u64).to_ne_bytes().to_vec();
    args.extend_from_slice(&(started.as_ptr() as u64).to_ne_bytes());
    let q = Queue::new(Some(dev)).unwrap();
    for groups in [1u32, 3] {
        flag.store(0, Ordering::SeqCst);
        started.store(0, Ordering::SeqCst);
        q.launch(
            &k,
            KernelArgs::Packed(&args),
            &config([groups, 1, 1], [1, 1, 1], 0),
        )
        .unwrap();
        // Returned with the kernel unable to finish; it starts by itself.
        let t = Instant::now();
        while started.load(Ordering::Acquire) == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the kernel never started"
            );
            std::thread::yield_now();
        }
        assert!(!q.is_idle().unwrap());
        let ev = q.record_event().unwrap();
        assert!(!ev.is_complete().unwrap());
        flag.store(1, Ordering::Release);
        ev.synchronize().unwrap();
        q.synchronize().unwrap();
        assert!(q.is_idle().unwrap());
    }
    // Copies and fills are queued behind a running kernel too.
    flag.store(0, Ordering::SeqCst);
    q.launch(&k, KernelArgs::Packed(&args), &LaunchConfig::default())
        .unwrap();
    let mem = dev.alloc(64, AllocKind::Device).unwrap();
    q.fill(mem, &[7], 64).unwrap();
    // SAFETY: a live allocation of 64 bytes; read before the fill ran.
    let first = unsafe { *mem.as_ptr::<u8>() };
    assert_ne!(first, 7, "the fill ran before the kernel ahead of it");
    flag.store(1, Ordering::Release);
    q.synchronize().unwrap();
    // SAFETY: as above, after the sync.
    assert_eq!(unsafe { *mem.as_ptr::<u8>().add(63) }, 7);
}

/// Every barrier kernel, loaded as bitcode (work-item loops made by the
/// JIT), gives the results of its coroutines: reductions of 64-256 items,
/// tiled matmul, a scan over groups of 1-1024 items, 3-d groups, barriers
/// in loops.
#[test]
fn barrier_kernels_from_bitcode_run_as_work_item_loops() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&bitcode_kernels()).unwrap();
    check_reductions(dev, &prog);
    check_matmul(dev, &prog, "matmul_tiled", 64);
    check_scans(dev, &prog, 3);
    let k = prog.kernel("many_barriers").unwrap();
    let out = buffer(dev, 9, 0u32);
    let mut args = ptr_arg(out);
    args.extend_from_slice(&50u64.to_ne_bytes());
    dev.launch(
        &k,
        KernelArgs::Packed(&args),
        &config([9, 1, 1], [100, 1, 1], 8),
    )
    .unwrap();
    assert!(out.iter().all(|&v| v == 50), "many_barriers: {out:?}");
    check_neighbour_3d(dev, &prog, [2, 3, 2], [4, 3, 5]);
}

/// Values kept across barriers in a private array (its address taken: one
/// copy per item in the loops) and in registers, 2-d groups, from the
/// shared object (coroutines) and from bitcode (work-item loops).
#[test]
fn private_values_survive_barriers() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    for image in [kernels(), bitcode_kernels()] {
        let prog = dev.load_program(&image).unwrap();
        let k = prog.kernel("private_across_barriers").unwrap();
        let items = 12u32;
        let out = buffer(dev, 4 * items as usize, u32::MAX);
        dev.launch(
            &k,
            KernelArgs::Packed(&ptr_arg(out)),
            &config([2, 2, 1], [4, 3, 1], 4 * items),
        )
        .unwrap();
        for (i, &v) in out.iter().enumerate() {
            let l = i as u32 % items;
            assert_eq!(v, l + 10 * ((l + items - 1) % items), "out[{i}]");
        }
    }
}

/// A value computed from a loop counter that changes between the value's
/// computation and the barrier after which it is used (recomputing it
/// there would read the new counter), from the `.so` and from bitcode.
#[test]
fn values_of_an_earlier_counter_survive_barriers() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    for image in [kernels(), bitcode_kernels()] {
        let prog = dev.load_program(&image).unwrap();
        let k = prog.kernel("counter_before_barrier").unwrap();
        let out = buffer(dev, 2 * 16, u32::MAX);
        let mut args = ptr_arg(out);
        args.extend_from_slice(&4u64.to_ne_bytes());
        dev.launch(
            &k,
            KernelArgs::Packed(&args),
            &config([2, 1, 1], [16, 1, 1], 64),
        )
        .unwrap();
        for (i, &v) in out.iter().enumerate() {
            let l = i as u32 % 16;
            let want: u32 = (0..4).map(|r| 2 * (100 * r + l)).sum();
            assert_eq!(v, want, "out[{i}]");
        }
    }
}

/// A barrier in divergent control flow stops the group with an error that
/// says so (the loops' wording: proof they ran, not coroutines); the device
/// stays usable.
#[test]
fn work_item_loops_report_divergent_barriers() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    let prog = dev.load_program(&bitcode_kernels()).unwrap();
    let out = buffer(dev, 4 * 64, 0u32);
    for m in divergent_launch_errors(dev, &prog, out) {
        assert!(
            m.contains("kernel 'divergent_barrier'")
                && m.contains("did not all reach the same barrier"),
            "{m}"
        );
    }
    assert!(out.iter().all(|&v| v == 0), "items ran past the barrier");
    reduce_once(dev, &prog, out);
}

/// A barrier the loops cannot see (in a function the kernel calls) keeps
/// the kernel on coroutines, with the right result, in the bitcode image
/// and in the shared object alike.
#[test]
fn a_barrier_in_a_called_function_keeps_coroutines() {
    let rt = runtime();
    let dev = &rt.devices()[0];
    for image in [kernels(), bitcode_kernels()] {
        let prog = dev.load_program(&image).unwrap();
        let k = prog.kernel("barrier_in_helper").unwrap();
        let out = buffer(dev, 3 * 32, u32::MAX);
        dev.launch(
            &k,
            KernelArgs::Packed(&ptr_arg(out)),
            &config([3, 1, 1], [32, 1, 1], 128),
        )
        .unwrap();
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, (i as u32 % 32 + 1) % 32, "item {i}");
        }
    }
}
