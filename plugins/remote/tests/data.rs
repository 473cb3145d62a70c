//! Copies between the client and a server's devices: host memory of a
//! remote device, large and small copies, the bulk-data channel (where it
//! listens, when it cannot be reached, frees racing writes on it).

mod common;
use common::{client, offload_bin, raw_remote_devices, read, read_into, write, RawSession, Server};

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use offload_core::plugin::AllocKind;
use offload_core::{DevicePtr, ErrorCode, Location, Queue};

/// `AllocKind::Host` on a server's device is memory of the client (it
/// must be touchable by the caller, as pinned memory is), copies move it
/// like any host buffer; shared memory cannot span two machines.
#[test]
fn host_memory_of_a_remote_device_is_the_clients() {
    let server = Server::start(Some("s3cret"));
    let rt = client(&server.addr, Some("s3cret"));
    let dev = &rt.devices()[1];
    let n = 3 << 20;
    let h = dev.alloc(n, AllocKind::Host).unwrap();
    // SAFETY: `h` is a host allocation of n bytes in this process,
    // readable and writable until `dev.free(h)` below; `hs` is not used
    // after that free.
    let hs = unsafe { std::slice::from_raw_parts_mut(h.0 as *mut u8, n) };
    assert!(hs.iter().all(|&b| b == 0), "host memory comes zeroed");
    for (i, b) in hs.iter_mut().enumerate() {
        *b = (i % 253) as u8;
    }
    let d = dev.alloc(n, AllocKind::Device).unwrap();
    let q = Queue::new(Some(dev)).unwrap();
    // SAFETY: the host end is `hs`, n bytes, live until `dev.free(h)`
    // below and untouched until `q.synchronize()` has waited for the copy.
    unsafe {
        rt.copy(
            Location::Device(dev.id(), d),
            Location::Host(hs.as_ptr()),
            n,
            Some(&q),
        )
        .unwrap();
    }
    q.synchronize().unwrap();
    hs.fill(0);
    read_into(dev, d, hs).unwrap();
    assert!(hs.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8));

    // Copies and fills that name the remote device for the host memory
    // (as CUDA users name the GPU for pinned memory) work on it here: the
    // server never sees the client's address.
    let on_dev = |p: DevicePtr| Location::Device(dev.id(), p);
    dev.fill(d, &[3], n).unwrap();
    // SAFETY: both ends are device locations (`h` named as the remote
    // device's host memory); the contract covers `Location::Host` only.
    unsafe { rt.copy(on_dev(h), on_dev(d), n, Some(&q)).unwrap() };
    q.synchronize().unwrap();
    assert!(hs.iter().all(|&b| b == 3));
    dev.fill(h, &[4, 5], n).unwrap();
    assert!(hs.chunks(2).all(|c| c == [4, 5]));
    // SAFETY: as above, device locations only.
    unsafe { rt.copy(on_dev(d), on_dev(h), n, None).unwrap() };
    let back = read(dev, d, n);
    assert!(back.chunks(2).all(|c| c == [4, 5]));
    q.fill(h, &[6], 4096).unwrap();
    q.synchronize().unwrap();
    assert!(hs[..4096].iter().all(|&b| b == 6) && hs[4096] == 4);
    let src = [9u8; 16];
    write(dev, h, &src).unwrap();
    let out = read(dev, DevicePtr(h.0 + 8), 16);
    assert_eq!(&out[..8], &[9; 8]);
    assert_eq!(&out[8..], &[6; 8]);
    // A range running past the host allocation is still an error.
    let e = write(dev, DevicePtr(h.0 + n as u64 - 8), &src).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSize, "{e}");
    dev.free(h).unwrap();
    assert_eq!(dev.free(h).unwrap_err().code(), ErrorCode::InvalidArgument);
    dev.free(d).unwrap();

    let e = dev.alloc(64, AllocKind::Shared).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Unsupported);
    assert!(e.message().contains("another machine"), "{}", e.message());
    // Still usable, and no server-side allocation is left behind.
    let d = dev.alloc(64, AllocKind::Device).unwrap();
    dev.free(d).unwrap();
}

#[test]
fn copies_of_more_than_a_gibibyte() {
    let server = Server::start(None);
    let rt = client(&server.addr, None);
    let dev = &rt.devices()[0];
    let n: usize = (1 << 30) + 4097;
    let mut data = vec![0u8; n];
    for (i, chunk) in data.chunks_mut(4096).enumerate() {
        chunk.fill((i % 251) as u8);
    }
    let p = dev.alloc(n, AllocKind::Device).unwrap();
    write(dev, p, &data).unwrap();
    let back = read(dev, p, n);
    assert!(back == data, "1 GiB round trip differs");
    dev.free(p).unwrap();
}

/// Small copies must not wait for delayed ACKs (~40 ms each when a reply
/// leaves in pieces on a socket without TCP_NODELAY): 50 device-to-host
/// copies of 1 KiB, each a full round trip, take well under a second, and
/// none (bar two, for a loaded machine's scheduling hiccups) takes 20 ms.
#[test]
fn small_reads_do_not_stall_on_delayed_acks() {
    let server = Server::start(None);
    let rt = client(&server.addr, None);
    let dev = &rt.devices()[0];
    let p = dev.alloc(1024, AllocKind::Device).unwrap();
    let data: Vec<u8> = (0..1024).map(|i| i as u8).collect();
    write(dev, p, &data).unwrap();
    let mut back = vec![0u8; 1024];
    // Warm up: the thread's queue stream opens on first use.
    read_into(dev, p, &mut back).unwrap();
    let rounds = 50;
    let start = Instant::now();
    let mut each = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        back.fill(0);
        let t = Instant::now();
        read_into(dev, p, &mut back).unwrap();
        each.push(t.elapsed());
        assert_eq!(back, data);
    }
    let elapsed = start.elapsed();
    let slow = each
        .iter()
        .filter(|t| **t >= Duration::from_millis(20))
        .count();
    each.sort();
    eprintln!(
        "{rounds} reads of 1 KiB: {elapsed:?} (median {:?}, max {:?}, {slow} of 20 ms or more)",
        each[rounds / 2],
        each[rounds - 1]
    );
    assert!(
        slow <= 2 && elapsed < Duration::from_millis(500),
        "{rounds} small reads took {elapsed:?}, {slow} of them 20 ms or more: reads wait for delayed ACKs"
    );
    dev.free(p).unwrap();
}

/// A bind failure names the address (gRPC and the data channel); the data
/// channel listens where `--data-listen` says and large copies use it.
#[test]
fn bind_errors_name_the_address_and_data_listen_is_honoured() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(offload_bin())
        .args(["serve", "--listen", &addr])
        .env_remove("OFFLOAD_REMOTE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    let out = Command::new(offload_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-listen", &addr])
        .env_remove("OFFLOAD_REMOTE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on {addr} (bulk-data channel")),
        "{err}"
    );
    drop(taken);

    // A free port for the data channel, then a large copy through it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = format!("127.0.0.1:{port}");
    let server = Server::start_with(None, &["--data-listen", &data]);
    let rt = client(&server.addr, None);
    let dev = &rt.devices()[0];
    let n = 1 << 20;
    let bytes: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    let p = dev.alloc(n, AllocKind::Device).unwrap();
    write(dev, p, &bytes).unwrap();
    let back = read(dev, p, n);
    assert!(back == bytes);
    let log = server.log();
    assert!(
        log.contains(&format!("bulk-data channel listening addr={data}")),
        "{log}"
    );
}

/// A data port the client cannot reach (a container that publishes only
/// the gRPC port): large copies fall back to gRPC and stay correct.
#[test]
fn an_unreachable_data_port_falls_back_to_grpc() {
    // The data channel listens on 127.0.0.2; the client, told the gRPC
    // address 127.0.0.1, tries 127.0.0.1:<data port>, where nothing listens.
    let server = Server::start_with(None, &["--data-listen", "127.0.0.2:0"]);
    assert!(
        server
            .log()
            .contains("bulk-data channel listening addr=127.0.0.2:"),
        "{}",
        server.log()
    );
    let rt = client(&server.addr, None);
    let dev = &rt.devices()[0];
    let n = 3 << 20;
    let data: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8).collect();
    let p = dev.alloc(n, AllocKind::Device).unwrap();
    let started = Instant::now();
    for _ in 0..2 {
        write(dev, p, &data).unwrap();
        let back = read(dev, p, n);
        assert!(back == data, "round trip differs");
    }
    // Refused at once on loopback, and tried once: no per-copy stall.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    dev.free(p).unwrap();
}

/// A data-channel request header (see offload-server's data module).
fn data_header(op: u32, device: u32, addr: u64, len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(offload_proto::data_channel::HEADER_BYTES);
    h.extend_from_slice(&op.to_le_bytes());
    h.extend_from_slice(&device.to_le_bytes());
    h.extend_from_slice(&addr.to_le_bytes());
    h.extend_from_slice(&(len as u64).to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h
}

/// Issue 22 item 8: a free racing a data-channel write must not let the
/// write land in the session's next allocation. The client sends half of a
/// write, frees the buffer, allocates and fills new buffers of the same
/// size (the allocator would hand the freed block out again), then sends
/// the rest: the free waits for the write (it is still pending while the
/// write is), the new buffers keep their bytes, and the free then succeeds.
#[test]
fn a_free_waits_for_a_data_channel_write_in_flight() {
    use offload_proto::data_channel::{OP_READ, OP_WRITE};
    use std::io::Write;
    const N: usize = 96 << 10;
    const FRESH: usize = 8;
    let server = Server::start(None);
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let raw = io.block_on(RawSession::open(&server.addr));
    let alloc = |raw: &RawSession| {
        let req = raw.req(offload_proto::AllocRequest {
            device: 0,
            size: N as u64,
            kind: 1,
        });
        let mut c = raw.client.clone();
        io.block_on(async move { c.alloc(req).await })
            .unwrap()
            .into_inner()
            .ptr
    };
    let p = alloc(&raw);
    let mut data =
        std::net::TcpStream::connect(("127.0.0.1", raw.greeting.data_port as u16)).unwrap();
    data.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    data.write_all(format!("{}\n", raw.greeting.data_secret).as_bytes())
        .unwrap();
    // One round trip: the connection is with the session's worker now.
    data.write_all(&data_header(OP_READ, 0, p, 1)).unwrap();
    assert_eq!(
        offload_proto::data_channel::read_status(&mut data)
            .unwrap()
            .0,
        0
    );
    let mut one = [0u8; 1];
    std::io::Read::read_exact(&mut data, &mut one).unwrap();
    // Half of a write of N bytes of 0xEE.
    let junk = vec![0xEEu8; N];
    data.write_all(&data_header(OP_WRITE, 0, p, N)).unwrap();
    data.write_all(&junk[..N / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The free, while the write is in flight.
    let mut c = raw.client.clone();
    let free_req = raw.req(offload_proto::FreeRequest { device: 0, ptr: p });
    let free = io.spawn(async move { c.free(free_req).await });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !free.is_finished(),
        "the free returned while a data-channel write into the buffer was in flight"
    );
    // New buffers of the same size, filled with 0x11.
    let fresh: Vec<u64> = (0..FRESH).map(|_| alloc(&raw)).collect();
    assert!(
        !fresh.contains(&p),
        "the pinned buffer was handed out again"
    );
    for &q in &fresh {
        let req = raw.req(offload_proto::FillRequest {
            device: 0,
            dst: q,
            pattern: vec![0x11].into(),
            size: N as u64,
        });
        let mut c = raw.client.clone();
        io.block_on(async move { c.fill(req).await }).unwrap();
    }
    // The rest of the write: it lands in the buffer it named.
    data.write_all(&junk[N / 2..]).unwrap();
    let (code, msg) = offload_proto::data_channel::read_status(&mut data).unwrap();
    assert_eq!(code, 0, "the write failed: {msg}");
    io.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), free)
            .await
            .expect("the free still waits after the write completed")
            .unwrap()
            .expect("the free succeeds once the write is done");
    });
    for &q in &fresh {
        let mut c = raw.client.clone();
        let req = raw.req(offload_proto::ReadRequest {
            device: 0,
            src: q,
            size: N as u64,
            chunk_size: N as u64,
        });
        let back = io.block_on(async move {
            let mut s = c.read(req).await.unwrap().into_inner();
            let mut back = Vec::new();
            while let Some(chunk) = s.message().await.unwrap() {
                back.extend_from_slice(&chunk.data);
            }
            back
        });
        assert_eq!(back.len(), N);
        assert!(
            back.iter().all(|&b| b == 0x11),
            "a new allocation got bytes of a write to a freed buffer"
        );
    }
    // A free that would wait forever (a write whose bytes never come) is
    // refused after a while, not granted: covered by the server's unit tests.
    drop(data);
}

/// The free-vs-write race on the data channel: an attacker frees its own
/// buffers while large writes into them are in flight, over and over, as a
/// victim allocates, fills and checks its own buffers on the same server.
/// Whatever the attacker's race does stays in its own process: the
/// victim's bytes are never touched. Then an oversize gRPC message is
/// refused and the attacker's session still works.
#[test]
fn free_vs_write_races_and_oversize_messages_stay_in_the_attackers_session() {
    let server = Server::start(None);
    let victim = client(&server.addr, None);
    let vdev = victim.devices()[0].clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rounds = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 20 {
                let n = 1 << 20;
                let p = vdev.alloc(n, AllocKind::Device).unwrap();
                let pattern = (rounds % 200) as u8 + 1;
                vdev.fill(p, &[pattern], n).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                let back = read(&vdev, p, n);
                assert!(back.iter().all(|&b| b == pattern), "victim data changed");
                vdev.free(p).unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    // The attacker: the plugin without the core in front, so nothing on the
    // client side stops it from racing its own frees.
    let attacker = Arc::new(raw_remote_devices(&server.addr, None));
    let junk = Arc::new(vec![0xEEu8; 1 << 20]);
    for _ in 0..30 {
        let p = attacker[0].alloc(1 << 20, AllocKind::Device).unwrap();
        let (a, j) = (attacker.clone(), junk.clone());
        let writer = std::thread::spawn(move || {
            let q = a[0].create_queue().unwrap();
            // SAFETY: `j` keeps the 1 MiB of `junk` alive until this
            // closure ends, after `q.synchronize()` below.
            let _ = unsafe { q.copy_to_device(p, j.as_ptr(), j.len()) };
            let _ = q.synchronize();
        });
        // SAFETY: the remote plugin touches no memory here: it forwards the
        // request, and the server checks it (what this test attacks).
        let _ = unsafe { attacker[0].free(p, AllocKind::Device) };
        let _ = writer.join();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(checker.join().unwrap() >= 20);

    // An oversize message (past the 256 MiB limit) on the attacker's own
    // session connection: refused; the session goes on.
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refused = io.block_on(async {
        let session = RawSession::open(&server.addr).await;
        let mut raw = session.client.clone();
        let chunk = offload_proto::WriteChunk {
            device: 0,
            dst: 0x1000,
            size: 300 << 20,
            data: vec![1u8; 300 << 20].into(),
        };
        let refused = raw
            .write(session.req(tokio_stream::iter(vec![chunk])))
            .await
            .expect_err("a 300 MiB message was taken");
        // The same session still answers.
        let ok = session.req(offload_proto::AllocRequest {
            device: 0,
            size: 64,
            kind: 1,
        });
        raw.alloc(ok)
            .await
            .expect("the session survives an oversize message");
        refused
    });
    assert_ne!(refused.code(), tonic::Code::Ok);
}
