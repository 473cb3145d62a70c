//! A driver older than CUDA 11.2 lacks the stream-ordered allocation entry
//! points (`cuMemAllocAsync`, `cuMemFreeAsync`): the plugin still loads,
//! and queue memory falls back to plain allocations freed after a sync.
//! The fake driver is built without them (`-DFAKE_CUDA_NO_ASYNC_ALLOC`);
//! a process of its own, as `OFFLOAD_CUDA_DRIVER` is read once per runtime.
//! Without clang-22 the test is skipped, except under `CI=true`, where
//! `common::clang` fails it.

mod common;

use offload_core::{AllocKind, Config, KernelArgs, LaunchConfig, Queue, Runtime};

#[test]
fn a_driver_without_stream_ordered_allocation_still_serves() {
    let Some(path) = common::build_fake_driver("fake-no-async", &["FAKE_CUDA_NO_ASYNC_ALLOC"])
    else {
        return;
    };
    let Some(ptx) = common::ptx(include_str!("gpu/kernels.c"), "sm_80") else {
        return;
    };
    // SAFETY: the only thread of this test process that reads the
    // environment is this one, and it sets the variable first.
    unsafe { std::env::set_var(offload_plugin_cuda::DRIVER_ENV, &path) };
    // The library really lacks the entry points.
    // SAFETY: loading the fake runs no initialisers of note.
    let lib = unsafe { libloading::Library::new(&path) }.unwrap();
    // SAFETY: only looked up, never called.
    assert!(unsafe { lib.get::<unsafe extern "C" fn()>(b"cuMemAllocAsync\0") }.is_err());
    // SAFETY: as above.
    assert!(unsafe { lib.get::<unsafe extern "C" fn()>(b"cuLaunchKernel\0") }.is_ok());

    let config = Config::from_lookup(|k| (k == "OFFLOAD_PLUGINS").then(|| "cuda".to_string()));
    let rt = Runtime::new(config, &[offload_plugin_cuda::ENTRY]);
    assert!(rt.failed_plugins().is_empty(), "{:?}", rt.failed_plugins());
    let d = &rt.devices()[0];
    let program = d.load_program(&ptx).unwrap();
    let saxpy = program.kernel("saxpy").unwrap();
    let q = Queue::new(Some(d)).unwrap();
    let n = 1000usize;
    let x = q.alloc(n * 4).unwrap();
    let y = d.alloc(n * 4, AllocKind::Device).unwrap();
    q.fill(x, &2f32.to_ne_bytes(), n * 4).unwrap();
    q.fill(y, &1f32.to_ne_bytes(), n * 4).unwrap();
    let args = common::saxpy_args(n as i32, 3.0, x, y);
    q.launch(
        &saxpy,
        KernelArgs::Packed(&args),
        &LaunchConfig::linear(4, 256),
    )
    .unwrap();
    q.free(x).unwrap();
    q.synchronize().unwrap();
    let mut out = vec![0f32; n];
    // SAFETY: `out` outlives the synchronous copy.
    unsafe {
        d.copy_from_device(out.as_mut_ptr().cast(), y, n * 4)
            .unwrap()
    };
    assert!(out.iter().all(|&v| v == 7.0));
    assert!(d.allocation(x).is_none());
    d.free(y).unwrap();
}
