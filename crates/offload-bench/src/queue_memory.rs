//! `offload-bench queue-memory [-n N] [--reps R]`: a temporary buffer's
//! life on the first device that is not the host (a GPU): allocate, fill
//! 64 KiB of it, free, synchronise, N times, best of R repetitions, for
//! 4 KiB, 1 MiB and 64 MiB buffers:
//!
//! * `queue`: `Queue::alloc` / `Queue::fill` / `Queue::free` /
//!   `Queue::synchronize` (stream-ordered memory, the CUDA plugin's pool);
//! * `device`: `Device::alloc` / `Queue::fill` / `Queue::synchronize` /
//!   `Device::free` (plain allocations, `cuMemAlloc`/`cuMemFree`).

use std::time::Instant;

use offload_core::plugin::{AllocKind, DeviceType};
use offload_core::{Config, Queue, Runtime};

fn best_us(reps: usize, n: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn run(n: usize, reps: usize) {
    let rt = Runtime::new(Config::from_env(), &offload::internals::builtin_plugins());
    let Some(device) = rt
        .devices()
        .iter()
        .find(|d| d.info().device_type != DeviceType::Host)
    else {
        eprintln!("offload-bench queue-memory: no device but the host (set OFFLOAD_PLUGINS)");
        std::process::exit(2);
    };
    let queue = Queue::new(Some(device)).expect("a queue");
    println!("device: {}", device.info().name);
    for size in [4usize << 10, 1 << 20, 64 << 20] {
        let touched = size.min(64 << 10);
        let ordered = best_us(reps, n, || {
            for _ in 0..n {
                let p = queue.alloc(size).expect("queue alloc");
                queue.fill(p, &[1], touched).expect("fill");
                queue.free(p).expect("queue free");
                queue.synchronize().expect("sync");
            }
        });
        let plain = best_us(reps, n, || {
            for _ in 0..n {
                let p = device.alloc(size, AllocKind::Device).expect("alloc");
                queue.fill(p, &[1], touched).expect("fill");
                queue.synchronize().expect("sync");
                device.free(p).expect("free");
            }
        });
        println!("bench queue_memory_{}_us queue {ordered:.3}", size >> 10);
        println!("bench queue_memory_{}_us device {plain:.3}", size >> 10);
    }
}
