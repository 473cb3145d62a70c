//! The project's own benchmark harness.
//!
//! `offload-bench remote` measures remote offloading between two processes
//! (this one, and a server child it starts) next to the baselines the goals
//! are stated against, in one run:
//!
//! * launch round trip of an empty kernel (launch + synchronise through the
//!   remote plugin) vs a bare gRPC unary Ping to a session worker process
//!   of the same server (goal: at most 1x);
//! * 1 KiB copies each way vs the same ping (goal: at most 2x);
//! * copy bandwidth to and from a remote device vs raw loopback TCP between
//!   the same processes, each side sending from memory as large as the
//!   transfer (goal: at least 80%);
//! * the start of a session (Hello until the greeting: a worker process
//!   started, its devices opened; goal: at most 5 ms);
//! * 32 clients at once, each its own session, each checking every result:
//!   aggregate operations per second vs one client alone.
//!
//! The server is `offload serve`'s supervisor with a worker process per
//! session (this executable's `serve-worker`), as deployed.
//!
//! Results print as a table; `--json` prints JSON lines instead.

mod launch;
mod mpi;
mod queue_memory;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::{Config, Runtime};

/// The project's benchmark harness. Bad options and values are errors
/// (exit status 2), never silently defaulted.
#[derive(clap::Parser, Debug)]
#[command(name = "offload-bench")]
enum Cmd {
    /// Remote offloading against gRPC and plain-TCP baselines.
    Remote {
        /// One JSON document instead of the table.
        #[arg(long)]
        json: bool,
        /// Fewer rounds (a smoke test).
        #[arg(long)]
        quick: bool,
    },
    /// Launch latency of the Rust API and the core on a host device.
    Launch {
        /// The kernels' shared object (with a kernel `empty`).
        so: std::path::PathBuf,
        /// Launches per round.
        #[arg(short = 'n', default_value_t = 100_000)]
        n: usize,
        /// Rounds (the best counts).
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
    /// The MPI plugin (under mpirun, with `offload serve --mpi` ranks).
    Mpi {
        /// One JSON document instead of the table.
        #[arg(long)]
        json: bool,
        /// Fewer rounds (a smoke test).
        #[arg(long)]
        quick: bool,
    },
    /// Stream-ordered queue memory against plain allocations.
    QueueMemory {
        /// Cycles per round.
        #[arg(short = 'n', default_value_t = 2000)]
        n: usize,
        /// Rounds (the best counts).
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// The server side of `remote` (started by it).
    #[command(hide = true)]
    ServeSide,
    /// One session of the server side (started by it).
    #[command(hide = true)]
    ServeWorker,
}

fn main() {
    use clap::Parser;
    match Cmd::parse() {
        Cmd::ServeSide => serve_side(),
        Cmd::ServeWorker => {
            let control = offload_server::worker::control_socket_from_env().unwrap();
            offload_server::worker::run(control).unwrap();
        }
        Cmd::Launch { so, n, reps } => launch::run(&so, n, reps),
        Cmd::Mpi { json, quick } => mpi::run(json, quick),
        Cmd::QueueMemory { n, reps } => queue_memory::run(n, reps),
        Cmd::Remote { json, quick } => remote(json, quick),
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
    let sessions = offload_server::Sessions::Workers(offload_server::WorkerCommand {
        program: std::env::current_exe().unwrap(),
        args: vec!["serve-worker".into()],
    });
    rt.block_on(async move {
        let options = offload_server::ServeOptions {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        };
        offload_server::serve(
            options,
            sessions,
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
    let mut source: Vec<u8> = Vec::new();
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
            // Sent from a buffer as large as the transfer (written once), as
            // the server sends device memory: not one cache-hot megabyte.
            if source.len() < len {
                source = vec![5u8; len];
            }
            s.write_all(&source[..len]).unwrap();
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

/// Clients of [`clients_ops_per_s`] in the many-clients case.
const CLIENTS: usize = 32;

struct Throughput {
    ops_per_s: f64,
    all_correct: bool,
}

/// `clients` threads, each its own client (runtime, session, worker
/// process), each doing `iters` rounds of: write 1 KiB, launch an empty
/// kernel and synchronise, read the 1 KiB back and check it. Operations
/// (write, launch, read) per second, all clients together.
fn clients_ops_per_s(config: &Config, image: &[u8], clients: usize, iters: usize) -> Throughput {
    let ready = Arc::new(std::sync::Barrier::new(clients + 1));
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (config, image, ready) = (config.clone(), image.to_vec(), ready.clone());
            std::thread::spawn(move || {
                let rt = Runtime::new(config, &offload::internals::builtin_plugins());
                let dev = rt.devices().first().expect("no remote device").clone();
                let program = dev.load_program(&image).unwrap();
                let kernel = program.kernel("empty").unwrap();
                let queue = offload_core::Queue::new(Some(&dev)).unwrap();
                let buf = dev.alloc(1024, AllocKind::Device).unwrap();
                ready.wait();
                let mut ok = true;
                let mut back = vec![0u8; 1024];
                for i in 0..iters {
                    let data = vec![(c * 7 + i) as u8; 1024];
                    // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size. the empty kernel takes no arguments.
                    unsafe {
                        dev.copy_to_device(buf, data.as_ptr(), 1024).unwrap();
                        queue
                            .launch(&kernel, KernelArgs::Packed(&[]), &LaunchConfig::default())
                            .unwrap();
                        queue.synchronize().unwrap();
                        dev.copy_from_device(back.as_mut_ptr(), buf, 1024).unwrap();
                    }
                    ok &= back == data;
                }
                dev.free(buf).unwrap();
                ok
            })
        })
        .collect();
    ready.wait();
    let t = Instant::now();
    let all_correct = handles.into_iter().all(|h| h.join().unwrap_or(false));
    Throughput {
        ops_per_s: (3 * clients * iters) as f64 / t.elapsed().as_secs_f64(),
        all_correct,
    }
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

/// The human-readable table of `rows`. A goal in parentheses is for
/// reference only: its row has no verdict.
fn print_rows(rows: &[Row]) {
    println!(
        "{:<32} {:>12} {:>12}  {:<20} {:>7}  {:<17} verdict",
        "case", "ours", "baseline", "baseline is", "ratio", "goal"
    );
    for r in rows {
        let verdict = match (r.goal.starts_with('('), r.ok) {
            (true, _) => "-",
            (false, true) => "met",
            (false, false) => "MISSED",
        };
        println!(
            "{:<32} {:>9.2} {:<4} {:>9.2} {:<4}  {:<20} {:>7.2}  {:<17} {verdict}",
            r.case,
            r.ours,
            r.unit,
            r.baseline,
            r.unit,
            r.baseline_name,
            r.ours / r.baseline,
            r.goal,
        );
    }
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

    // Bare gRPC unary ping to a session worker process (a session of its
    // own: its Hello, then its session connection), and the session start.
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .unwrap()
        .tcp_nodelay(true);
    let (mut ping_client, _ping_session, session_start_us) = io.block_on(async {
        let ch = endpoint.connect().await.unwrap();
        let mut main = offload_proto::offload_client::OffloadClient::new(ch);
        let hello = || offload_proto::HelloRequest {
            client: "offload-bench".into(),
            protocol_version: offload_proto::PROTOCOL_VERSION,
        };
        // Session starts: Hello until the greeting, a fresh worker each.
        let mut starts = Vec::new();
        for _ in 0..if quick { 5 } else { 21 } {
            let t = Instant::now();
            let mut s = main.hello(hello()).await.unwrap().into_inner();
            s.message().await.unwrap().unwrap();
            starts.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut session = main.hello(hello()).await.unwrap().into_inner();
        let greeting = session.message().await.unwrap().unwrap();
        let ch = offload_plugin_remote::connect_session(&endpoint, &greeting.session)
            .await
            .unwrap();
        (
            offload_proto::offload_client::OffloadClient::new(ch),
            session,
            median(starts),
        )
    });
    // The remote plugin.
    let config = Config {
        plugins: Some(vec!["remote".into()]),
        remote_servers: vec![grpc.clone()],
        ..Config::from_env()
    };
    let rt = Runtime::new(config.clone(), &offload::internals::builtin_plugins());
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
        // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
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
        // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
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
        // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
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
        // SAFETY: the host buffer holds every byte copied; the device range was allocated above with that size.
        || unsafe { dev.copy_from_device(back.as_mut_ptr(), d, bytes).unwrap() },
        || {
            down.write_all(&header(1)).unwrap();
            down.read_exact(&mut tcp_back).unwrap();
        },
    );
    let (h2d, tcp_up, d2h, tcp_down) = (gbs(h2d_us), gbs(up_us), gbs(d2h_us), gbs(down_us));
    dev.free(d).unwrap();

    // Many clients at once, each its own session (worker process).
    let image = empty_kernel_image();
    let per_client = if quick { 100 } else { 500 };
    let one = clients_ops_per_s(&config, &image, 1, per_client);
    let many = clients_ops_per_s(&config, &image, CLIENTS, per_client);
    let _ = child.kill();
    let _ = child.wait();

    let rows = [
        Row {
            case: "remote launch+sync round trip",
            ours: launch,
            baseline: ping,
            unit: "us",
            baseline_name: "gRPC unary ping",
            goal: "<= 1x",
            ok: launch <= ping,
        },
        Row {
            case: "remote 1 KiB copy device->host",
            ours: d2h_small,
            baseline: ping_small,
            unit: "us",
            baseline_name: "gRPC unary ping",
            goal: "<= 2x",
            ok: d2h_small <= 2.0 * ping_small,
        },
        Row {
            case: "remote 1 KiB copy host->device",
            ours: h2d_small,
            baseline: ping_small,
            unit: "us",
            baseline_name: "gRPC unary ping",
            goal: "<= 2x",
            ok: h2d_small <= 2.0 * ping_small,
        },
        Row {
            case: "remote copy host->device",
            ours: h2d,
            baseline: tcp_up,
            unit: "GB/s",
            baseline_name: "raw TCP send",
            goal: ">= 0.80x",
            ok: h2d >= 0.8 * tcp_up,
        },
        Row {
            case: "remote copy device->host",
            ours: d2h,
            baseline: tcp_down,
            unit: "GB/s",
            baseline_name: "raw TCP receive",
            goal: ">= 0.80x",
            ok: d2h >= 0.8 * tcp_down,
        },
        Row {
            case: "session start (Hello->greeting)",
            ours: session_start_us / 1e3,
            baseline: ping / 1e3,
            unit: "ms",
            baseline_name: "gRPC unary ping",
            goal: "<= 5 ms",
            ok: session_start_us <= 5e3,
        },
        Row {
            case: "32 clients, aggregate",
            ours: many.ops_per_s / 1e3,
            baseline: one.ops_per_s / 1e3,
            unit: "k/s",
            baseline_name: "one client alone",
            goal: "all right",
            ok: many.all_correct && one.all_correct,
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
    print_rows(&rows);
    let _ = Duration::ZERO;
}
