//! `offload-bench mpi`: the MPI plugin against MPI itself, between the same
//! ranks. Start it as the application rank of an MPI job:
//!
//! ```sh
//! mpirun --oversubscribe -np 1 offload-bench mpi : -np N offload serve --mpi
//! ```
//!
//! * launch round trip of an empty kernel on the first serving rank's device
//!   (a synchronous launch, as a target region makes) vs a bare MPI
//!   ping-pong of 8 bytes with the same rank (goal: at most 1.5x); also a
//!   launch on a queue plus its synchronize, and an empty request (the
//!   protocol's floor), for reference;
//! * copy bandwidth to and from that device vs bare MPI sends and receives
//!   of the same size between the same two ranks (blocking, osu-style
//!   loop; goal: at least 0.8x);
//! * with two or more serving ranks, a copy between the devices of ranks 1
//!   and 2 (rank to rank) next to the application-to-rank MPI bandwidth.
//!
//! Baseline and ours alternate within each repetition; medians are shown.

use std::sync::Arc;
use std::time::Instant;

use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::{Config, Location, Runtime};

use crate::{empty_kernel_image, median, Row};

pub fn run(json: bool, quick: bool) {
    let config = Config {
        plugins: Some(vec!["mpi".into()]),
        ..Config::from_env()
    };
    let rt = Runtime::new(config, &offload::internals::builtin_plugins());
    let t = offload_plugin_mpi::transport()
        .expect("no MPI transport: start under mpirun with `offload serve --mpi` ranks");
    let devs: Vec<_> = rt.devices().to_vec();
    assert!(!devs.is_empty(), "no serving rank devices");
    let rank_of = |d: &Arc<offload_core::Device>| -> i32 {
        d.info()
            .uid
            .strip_prefix("mpi:")
            .and_then(|r| r.split('/').next())
            .and_then(|r| r.parse().ok())
            .expect("an MPI device uid")
    };
    let dev = devs[0].clone();
    let rank = rank_of(&dev);
    let servers = t.ranks_with(offload_plugin_mpi::Role::Server).len();
    let reps = if quick { 5 } else { 15 };
    let iters = if quick { 200 } else { 1000 };

    // Launch round trip vs MPI ping-pong.
    let program = dev.load_program(&empty_kernel_image()).unwrap();
    let kernel = program.kernel("empty").unwrap();
    let queue = offload_core::Queue::new(Some(&dev)).unwrap();
    let mut small = [0u8; 8];
    let (mut ours, mut queued, mut base, mut floor) = (vec![], vec![], vec![], vec![]);
    for r in 0..reps + 1 {
        // A synchronous launch: what an OpenMP target region does.
        let s = Instant::now();
        for _ in 0..iters {
            dev.launch(&kernel, KernelArgs::Packed(&[]), &LaunchConfig::default())
                .unwrap();
        }
        let launch_us = s.elapsed().as_secs_f64() * 1e6 / iters as f64;
        // On a queue, then a synchronize (ol* and Rust API queues).
        let s = Instant::now();
        for _ in 0..iters {
            queue
                .launch(&kernel, KernelArgs::Packed(&[]), &LaunchConfig::default())
                .unwrap();
            queue.synchronize().unwrap();
        }
        let queued_us = s.elapsed().as_secs_f64() * 1e6 / iters as f64;
        let s = Instant::now();
        for _ in 0..iters {
            offload_plugin_mpi::ping(&t, rank).unwrap();
        }
        let ping_request_us = s.elapsed().as_secs_f64() * 1e6 / iters as f64;
        let ping_us = offload_plugin_mpi::raw_loop(&t, rank, 1, iters as u64, &mut small).unwrap()
            * 1e6
            / iters as f64;
        if r > 0 {
            // The first round warms both up.
            ours.push(launch_us);
            queued.push(queued_us);
            base.push(ping_us);
            floor.push(ping_request_us);
        }
    }
    let (launch, queued, ping, request) =
        (median(ours), median(queued), median(base), median(floor));

    // Bandwidth vs bare MPI between the same ranks.
    let bytes: usize = if quick { 16 << 20 } else { 64 << 20 };
    let copy_reps = if quick { 3 } else { 7 };
    let gbs = |secs: f64| bytes as f64 / secs / 1e9;
    let host = vec![7u8; bytes];
    let mut back = vec![0u8; bytes];
    let mut raw = vec![5u8; bytes];
    let d = dev.alloc(bytes, AllocKind::Device).unwrap();
    let (mut up, mut raw_up, mut down, mut raw_down) = (vec![], vec![], vec![], vec![]);
    // Warm-up: every buffer on both sides touched once.
    // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
    unsafe { dev.copy_to_device(d, host.as_ptr(), bytes).unwrap() };
    // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
    unsafe { dev.copy_from_device(back.as_mut_ptr(), d, bytes).unwrap() };
    offload_plugin_mpi::raw_loop(&t, rank, 2, 1, &mut raw).unwrap();
    offload_plugin_mpi::raw_loop(&t, rank, 3, 1, &mut raw).unwrap();
    for _ in 0..copy_reps {
        let s = Instant::now();
        // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
        unsafe { dev.copy_to_device(d, host.as_ptr(), bytes).unwrap() };
        up.push(gbs(s.elapsed().as_secs_f64()));
        raw_up.push(gbs(
            offload_plugin_mpi::raw_loop(&t, rank, 2, 1, &mut raw).unwrap()
        ));
        let s = Instant::now();
        // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
        unsafe { dev.copy_from_device(back.as_mut_ptr(), d, bytes).unwrap() };
        down.push(gbs(s.elapsed().as_secs_f64()));
        raw_down.push(gbs(
            offload_plugin_mpi::raw_loop(&t, rank, 3, 1, &mut raw).unwrap()
        ));
    }
    assert!(back == host, "copy round trip corrupted data");
    let (h2d, mpi_up, d2h, mpi_down) = (median(up), median(raw_up), median(down), median(raw_down));

    let mut rows = vec![
        Row {
            case: "MPI launch+sync round trip",
            ours: launch,
            baseline: ping,
            unit: "us",
            baseline_name: "MPI ping-pong 8 B",
            goal: "<= 1.5x",
            ok: launch <= 1.5 * ping,
        },
        Row {
            case: "MPI queue launch + synchronize",
            ours: queued,
            baseline: ping,
            unit: "us",
            baseline_name: "MPI ping-pong 8 B",
            goal: "(queues)",
            ok: true,
        },
        Row {
            case: "MPI empty request round trip",
            ours: request,
            baseline: ping,
            unit: "us",
            baseline_name: "MPI ping-pong 8 B",
            goal: "(protocol floor)",
            ok: true,
        },
        Row {
            case: "MPI copy host->device",
            ours: h2d,
            baseline: mpi_up,
            unit: "GB/s",
            baseline_name: "MPI_Send, same size",
            goal: ">= 0.80x",
            ok: h2d >= 0.8 * mpi_up,
        },
        Row {
            case: "MPI copy device->host",
            ours: d2h,
            baseline: mpi_down,
            unit: "GB/s",
            baseline_name: "MPI_Recv, same size",
            goal: ">= 0.80x",
            ok: d2h >= 0.8 * mpi_down,
        },
    ];

    // Rank to rank.
    if let Some(other) = devs.iter().find(|o| rank_of(o) != rank) {
        let o = other.clone();
        let od = o.alloc(bytes, AllocKind::Device).unwrap();
        let (src_id, dst_id) = (dev.id(), o.id());
        let mut peer = Vec::new();
        for _ in 0..copy_reps {
            let s = Instant::now();
            // SAFETY: both are device ranges allocated above.
            unsafe {
                rt.copy(
                    Location::Device(dst_id, od),
                    Location::Device(src_id, d),
                    bytes,
                    None,
                )
                .unwrap()
            };
            peer.push(gbs(s.elapsed().as_secs_f64()));
        }
        let mut check = vec![0u8; bytes];
        // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
        unsafe { o.copy_from_device(check.as_mut_ptr(), od, bytes).unwrap() };
        assert!(check == host, "rank-to-rank copy corrupted data");
        let p = median(peer);
        rows.push(Row {
            case: "MPI copy rank->rank (devices)",
            ours: p,
            baseline: mpi_up,
            unit: "GB/s",
            baseline_name: "MPI_Send app->rank",
            goal: "(info)",
            ok: true,
        });
        o.free(od).unwrap();
    }
    dev.free(d).unwrap();
    drop(kernel);
    drop(program);

    if json {
        for r in &rows {
            println!(
                "{{\"case\":\"{}\",\"serving_ranks\":{servers},\"value\":{:.3},\"baseline\":{:.3},\"unit\":\"{}\",\"ratio\":{:.3},\"goal\":\"{}\",\"ok\":{}}}",
                r.case, r.ours, r.baseline, r.unit, r.ours / r.baseline, r.goal, r.ok
            );
        }
        return;
    }
    println!("serving ranks: {servers} ({} bytes per copy)", bytes);
    crate::print_rows(&rows);
}
