//! `offload-bench launch SO [-n N] [--reps R]`: launches of the empty host
//! kernel `empty` (python/tests/kernels.c) from Rust, the baseline of
//! `python/bench/launch_overhead.py`.
//!
//! Per launch, best of R repetitions of N launches then one synchronize, on
//! the host device, grid 1 x block 1:
//! * `rust-api`: `offload_runtime::Queue::launch` (records an event per
//!   launch; the `Launch`es are kept and dropped after the sync);
//! * `rust-core`: `Queue::core().launch` (what the Python face calls).
//!
//! Each with no arguments and with two (a buffer and a `u32`).

use offload::internals::CoreAccess as _;
use std::time::Instant;

use offload::{Device, KernelArgs, LaunchConfig};
use offload_core::plugin::KernelArgs as RawArgs;

fn best_ns(reps: usize, n: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn run(so: &std::path::Path, n: usize, reps: usize) {
    let image = std::fs::read(so).expect("the kernels' shared object");
    let device = Device::host().expect("a host device");
    let program = device.load_program(&image).expect("loadable kernels");
    let kernel = program.kernel("empty").expect("kernel `empty`");
    let queue = device.create_queue().expect("a queue");
    let config = LaunchConfig::linear(1, 1);
    let buf = device.alloc_zeros::<f32>(16).expect("memory");
    let none = KernelArgs::new();
    let two = KernelArgs::new().ptr(&buf).value(16u32);

    for (label, args) in [("no args", &none), ("2 args", &two)] {
        let api = best_ns(reps, n, || {
            let mut launches = Vec::with_capacity(n);
            for _ in 0..n {
                // SAFETY: `empty` reads nothing of its arguments.
                launches.push(unsafe { queue.launch(&kernel, config, args) }.expect("launch"));
            }
            queue.synchronize().expect("sync");
            drop(launches);
        });
        let core = best_ns(reps, n, || {
            for _ in 0..n {
                queue
                    .core()
                    .launch(kernel.core(), RawArgs::Packed(args.as_bytes()), &config)
                    .expect("launch");
            }
            queue.synchronize().expect("sync");
        });
        println!("rust-api  {label:8} {api:8.0} ns/launch  (N={n}, best of {reps})");
        println!("rust-core {label:8} {core:8.0} ns/launch  (N={n}, best of {reps})");
    }
}
