//! The project's own benchmark harness.
//!
//! `offload-bench remote` measures remote offloading between two processes
//! (this one, and a server child it starts) next to the baselines the goals
//! are stated against, in one run:
//!
//! * launch round trip of an empty kernel (launch + synchronise through the
//!   remote plugin) vs a bare gRPC unary Ping between the same processes
//!   (goal: at most 1.5x);
//! * copy bandwidth to and from a remote device vs raw loopback TCP between
//!   the same processes (goal: at least 70%).
//!
//! Results print as a table; `--json` prints JSON lines instead.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::{Config, Runtime};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve-side") => serve_side(),
        Some("remote") => remote(
            args.iter().any(|a| a == "--json"),
            args.iter().any(|a| a == "--quick"),
        ),
        _ => {
            eprintln!("usage: offload-bench remote [--json] [--quick]");
            std::process::exit(2);
        }
    }
}

/// The server process: the gRPC service plus a raw TCP sink/source.
fn serve_side() {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_addr = tcp.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in tcp.incoming().flatten() {
            std::thread::spawn(move || tcp_peer(stream));
        }
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = Arc::new(offload_server::local_runtime());
    rt.block_on(async move {
        let options = offload_server::ServeOptions {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        };
        offload_server::serve(
            options,
            runtime,
            move |addr| {
                println!("grpc={addr} tcp={tcp_addr}");
                std::io::stdout().flush().unwrap();
            },
            std::future::pending(),
        )
        .await
        .unwrap();
    });
}

/// Raw TCP peer: a request is `u8 op, u64 len`; op 0 = receive len bytes
/// then ack one byte, op 1 = send len bytes.
fn tcp_peer(mut s: TcpStream) {
    s.set_nodelay(true).ok();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let mut hdr = [0u8; 9];
        if s.read_exact(&mut hdr).is_err() {
            return;
        }
        let len = u64::from_le_bytes(hdr[1..].try_into().unwrap()) as usize;
        let mut done = 0;
        if hdr[0] == 0 {
            while done < len {
                let want = (len - done).min(buf.len());
                let n = s.read(&mut buf[..want]).unwrap();
                if n == 0 {
                    return;
                }
                done += n;
            }
            s.write_all(&[1]).unwrap();
        } else {
            while done < len {
                let n = (len - done).min(buf.len());
                s.write_all(&buf[..n]).unwrap();
                done += n;
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Per-iteration time (µs) of one batch of `iters` calls.
fn batch_us(iters: usize, f: &mut impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / iters as f64
}

/// Median per-iteration times (µs) of `a` and `b`, measured in alternating
/// batches so that load from elsewhere hits both alike.
fn interleaved_us(
    reps: usize,
    iters: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (f64, f64) {
    for _ in 0..iters.min(100) {
        a();
        b();
    }
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    for r in 0..reps {
        // ABBA order within each pair of rounds.
        if r % 2 == 0 {
            sa.push(batch_us(iters, &mut a));
            sb.push(batch_us(iters, &mut b));
        } else {
            sb.push(batch_us(iters, &mut b));
            sa.push(batch_us(iters, &mut a));
        }
    }
    (median(sa), median(sb))
}

fn empty_kernel_image() -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("offload-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("empty.c");
    let so = dir.join("empty.so");
    std::fs::write(
        &src,
        "void empty(const void *a, const void *i) { (void)a; (void)i; }\n",
    )
    .unwrap();
    let ok = Command::new("clang-22")
        .args(["-O2", "-fPIC", "-shared", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "clang-22 failed");
    let bytes = std::fs::read(&so).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    bytes
}

struct Row {
    case: &'static str,
    ours: f64,
    baseline: f64,
    unit: &'static str,
    baseline_name: &'static str,
    goal: &'static str,
    ok: bool,
}

fn remote(json: bool, quick: bool) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("serve-side")
        .env("OFFLOAD_HOST_DEVICES", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grpc = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .unwrap()
        .to_string();
    let tcp = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("tcp="))
        .unwrap()
        .to_string();
    let (reps, iters, bytes) = if quick {
        (3, 200, 16 << 20)
    } else {
        (7, 2000, 64 << 20)
    };

    // Bare gRPC unary ping on its own channel.
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut ping_client = io.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .unwrap()
            .tcp_nodelay(true)
            .connect()
            .await
            .unwrap();
        offload_proto::offload_client::OffloadClient::new(ch)
    });
    // The remote plugin.
    let config = Config {
        plugins: Some(vec!["remote".into()]),
        remote_servers: vec![grpc.clone()],
        ..Config::from_env()
    };
    let rt = Runtime::new(config.clone(), &offload::builtin_plugins());
    let dev = rt.devices().first().expect("no remote device").clone();
    let program = dev.load_program(&empty_kernel_image()).unwrap();
    let kernel = program.kernel("empty").unwrap();
    let queue = offload_core::Queue::new(Some(&dev)).unwrap();
    let (launch, ping) = interleaved_us(
        reps,
        iters,
        || {
            queue
                .launch(&kernel, KernelArgs::Packed(&[]), &LaunchConfig::default())
                .unwrap();
            queue.synchronize().unwrap();
        },
        || {
            io.block_on(ping_client.ping(offload_proto::PingRequest {
                payload: Default::default(),
            }))
            .unwrap();
        },
    );

    // Small copies: each a full round trip; against the same ping (a reply
    // that leaves in pieces without TCP_NODELAY waits for a delayed ACK).
    let small = dev.alloc(1024, AllocKind::Device).unwrap();
    let mut small_host = vec![3u8; 1024];
    let (d2h_small, ping_small) = interleaved_us(
        reps,
        iters / 4,
        || unsafe {
            dev.copy_from_device(small_host.as_mut_ptr(), small, 1024)
                .unwrap()
        },
        || {
            io.block_on(ping_client.ping(offload_proto::PingRequest {
                payload: Default::default(),
            }))
            .unwrap();
        },
    );
    let (h2d_small, _) = interleaved_us(
        reps,
        iters / 4,
        || unsafe {
            dev.copy_to_device(small, small_host.as_ptr(), 1024)
                .unwrap()
        },
        || {},
    );
    dev.free(small).unwrap();

    // Bandwidth, against raw TCP between the same two processes.
    let host = vec![7u8; bytes];
    let mut back = vec![0u8; bytes];
    let mut tcp_back = vec![0u8; bytes];
    let d = dev.alloc(bytes, AllocKind::Device).unwrap();
    let copy_reps = if quick { 3 } else { 9 };
    let gbs = |us: f64| bytes as f64 / us / 1e3;
    let mut up = TcpStream::connect(&tcp).unwrap();
    up.set_nodelay(true).unwrap();
    let mut down = TcpStream::connect(&tcp).unwrap();
    down.set_nodelay(true).unwrap();
    let header = |op: u8| {
        let mut hdr = [op; 9];
        hdr[1..].copy_from_slice(&(bytes as u64).to_le_bytes());
        hdr
    };
    let (h2d_us, up_us) = interleaved_us(
        copy_reps,
        2,
        || unsafe { dev.copy_to_device(d, host.as_ptr(), bytes).unwrap() },
        || {
            up.write_all(&header(0)).unwrap();
            up.write_all(&host).unwrap();
            let mut ack = [0u8; 1];
            up.read_exact(&mut ack).unwrap();
        },
    );
    let (d2h_us, down_us) = interleaved_us(
        copy_reps,
        2,
        || unsafe { dev.copy_from_device(back.as_mut_ptr(), d, bytes).unwrap() },
        || {
            down.write_all(&header(1)).unwrap();
            down.read_exact(&mut tcp_back).unwrap();
        },
    );
    let (h2d, tcp_up, d2h, tcp_down) = (gbs(h2d_us), gbs(up_us), gbs(d2h_us), gbs(down_us));
    dev.free(d).unwrap();
    let _ = child.kill();
    let _ = child.wait();

    let rows = [
        Row {
            case: "remote launch+sync round trip",
            ours: launch,
            baseline: ping,
            unit: "us",
            baseline_name: "gRPC unary ping",
            goal: "<= 1.5x",
            ok: launch <= 1.5 * ping,
        },
        Row {
            case: "remote 1 KiB copy device->host",
            ours: d2h_small,
            baseline: ping_small,
            unit: "us",
            baseline_name: "gRPC unary ping",
            goal: "<= 3x",
            ok: d2h_small <= 3.0 * ping_small,
        },
        Row {
            case: "remote 1 KiB copy host->device",
            ours: h2d_small,
            baseline: ping_small,
            unit: "us",
            baseline_name: "gRPC unary ping",
            goal: "<= 3x",
            ok: h2d_small <= 3.0 * ping_small,
        },
        Row {
            case: "remote copy host->device",
            ours: h2d,
            baseline: tcp_up,
            unit: "GB/s",
            baseline_name: "raw TCP send",
            goal: ">= 0.70x",
            ok: h2d >= 0.7 * tcp_up,
        },
        Row {
            case: "remote copy device->host",
            ours: d2h,
            baseline: tcp_down,
            unit: "GB/s",
            baseline_name: "raw TCP receive",
            goal: ">= 0.70x",
            ok: d2h >= 0.7 * tcp_down,
        },
    ];
    if json {
        for r in &rows {
            println!(
                "{{\"case\":\"{}\",\"value\":{:.3},\"baseline\":{:.3},\"unit\":\"{}\",\"ratio\":{:.3},\"goal\":\"{}\",\"ok\":{}}}",
                r.case, r.ours, r.baseline, r.unit, r.ours / r.baseline, r.goal, r.ok
            );
        }
        return;
    }
    println!(
        "{:<32} {:>12} {:>12}  {:<18} {:>7}  {:<9} verdict",
        "case", "ours", "baseline", "baseline is", "ratio", "goal"
    );
    for r in &rows {
        println!(
            "{:<32} {:>9.2} {:<2} {:>9.2} {:<2}  {:<18} {:>7.2}  {:<9} {}",
            r.case,
            r.ours,
            r.unit,
            r.baseline,
            r.unit,
            r.baseline_name,
            r.ours / r.baseline,
            r.goal,
            if r.ok { "met" } else { "MISSED" }
        );
    }
    let _ = Duration::ZERO;
}
