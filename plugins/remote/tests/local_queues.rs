//! Same-host queues: a client on the server's machine runs its queues
//! through shared memory (offload-proto's `local_ring`), with the results
//! of the gRPC stream; hostile clients of the queue socket break only
//! their own queue.

mod common;
use common::{client, read, RawSession, Server};

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use offload_core::plugin::AllocKind;
use offload_core::{Location, Queue, Runtime};
use offload_proto::local_ring::{LocalRing, DEFAULT_RING_BYTES};
use offload_proto::prost::Message;
use offload_proto::{queue_op, Empty, QueueCompletion, QueueOp};

const DEBUG_LOG: (&str, &str) = ("OFFLOAD_LOG", "info,offload_server=debug");

fn server(extra: &[&str]) -> Server {
    Server::start_env(
        None,
        extra,
        2,
        &[
            (DEBUG_LOG.0, Path::new(DEBUG_LOG.1)),
            ("OFFLOAD_SERVE_HANDSHAKE_MS", Path::new("700")),
        ],
    )
}

/// Queued work that fills the rings many times over, with reads, fills and
/// an event waited for by two threads at once: the values that come back.
fn queued_work(rt: &Runtime) -> Vec<u32> {
    let dev = &rt.devices()[1];
    let queue = Queue::new(Some(dev)).unwrap();
    let words = 1024usize;
    let p = dev.alloc(words * 4, AllocKind::Device).unwrap();
    let on_dev = |off: usize| Location::Device(dev.id(), offload_core::DevicePtr(p.0 + off as u64));
    // 3 000 inline writes of 4 KiB (12 MiB through a 1 MiB ring), each
    // overwriting the buffer with its round number.
    let rounds: Vec<Vec<u32>> = (0..3000u32).map(|r| vec![r; words]).collect();
    for r in &rounds {
        // SAFETY: `r` lives until the queue is synchronised below.
        unsafe {
            rt.copy(
                on_dev(0),
                Location::Host(r.as_ptr().cast()),
                words * 4,
                Some(&queue),
            )
            .unwrap()
        };
    }
    queue
        .fill(offload_core::DevicePtr(p.0 + 4), &[7, 0, 0, 0], 8)
        .unwrap();
    let mut out = vec![0u32; words];
    // SAFETY: `out` outlives the event's synchronisation below.
    unsafe {
        rt.copy(
            Location::Host(out.as_mut_ptr().cast_const().cast()),
            on_dev(0),
            words * 4,
            Some(&queue),
        )
        .unwrap()
    };
    let event = Arc::new(queue.record_event().unwrap());
    let other = {
        let e = event.clone();
        std::thread::spawn(move || e.synchronize())
    };
    event.synchronize().unwrap();
    other.join().unwrap().unwrap();
    queue.synchronize().unwrap();
    drop(rounds);
    // A read of a bad range is an error at the next wait; the queue goes on.
    let mut one = [0u8; 4];
    // SAFETY: `one` outlives the synchronisation.
    let bad = unsafe {
        rt.copy(
            Location::Host(one.as_mut_ptr().cast_const().cast()),
            Location::Device(dev.id(), offload_core::DevicePtr(p.0 + (words * 4) as u64)),
            4,
            Some(&queue),
        )
    };
    assert!(
        bad.is_err() || queue.synchronize().is_err(),
        "a read past the allocation"
    );
    queue.synchronize().unwrap();
    assert_eq!(read(dev, p, 4), 2999u32.to_le_bytes());
    dev.free(p).unwrap();
    out
}

#[test]
fn a_server_on_this_machine_runs_queues_in_shared_memory_with_the_same_results() {
    let mut expected = vec![2999u32; 1024];
    expected[1] = 7;
    expected[2] = 7;

    let local = server(&[]);
    assert_eq!(queued_work(&client(&local.addr, None)), expected);
    let log = local.log();
    assert!(log.contains("same-host queues listening socket=@"), "{log}");
    assert!(
        log.contains("same-host queue opened"),
        "the queue did not use shared memory:\n{log}"
    );

    let grpc = server(&["--no-local-queues"]);
    assert_eq!(queued_work(&client(&grpc.addr, None)), expected);
    let log = grpc.log();
    assert!(
        !log.contains("same-host queue"),
        "offered although turned off:\n{log}"
    );
}

/// The queue socket's name, as the server logged it.
fn socket_of(server: &Server) -> String {
    let log = server.log();
    log.lines()
        .find_map(|l| l.split("same-host queues listening socket=@").nth(1))
        .expect("queue socket in the log")
        .trim()
        .to_string()
}

fn connect(name: &str) -> UnixStream {
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let s = UnixStream::connect_addr(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Hand `fd` over as the client does after its secret line.
fn offer(name: &str, secret: &str, fd: &impl AsRawFd) -> (UnixStream, (u32, String)) {
    let mut s = connect(name);
    s.write_all(format!("{secret}\n").as_bytes()).unwrap();
    // A refusal may close the connection before the descriptor is sent:
    // the answer is what counts.
    let _ = offload_proto::fdpass::send_fd(&s, b'r', fd.as_raw_fd());
    let st = offload_proto::data_channel::read_status(&mut s).unwrap();
    (s, st)
}

/// The next completion, waiting at most 10 s.
fn completion(ring: &LocalRing) -> QueueCompletion {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = Vec::new();
    loop {
        if ring.recv(&mut buf).unwrap() {
            return QueueCompletion::decode(buf.as_slice()).unwrap();
        }
        assert!(Instant::now() < deadline, "no completion");
        ring.wait_readable(Duration::ZERO, Duration::from_millis(50));
    }
}

fn marker(ticket: u64) -> Vec<u8> {
    QueueOp {
        ticket,
        device: 0,
        op: Some(queue_op::Op::Marker(Empty {})),
    }
    .encode_to_vec()
}

#[test]
fn hostile_same_host_clients_break_only_their_own_queue() {
    let server = server(&[]);
    let name = socket_of(&server);
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let raw = io.block_on(RawSession::open(&server.addr));
    let secret = raw.greeting.data_secret.clone();
    assert_eq!(
        raw.greeting.local_queues, name,
        "the greeting names the socket"
    );

    // A wrong secret is refused; so is memory that could shrink under the
    // server's mapping.
    let (ring, fd) = LocalRing::create(DEFAULT_RING_BYTES).unwrap();
    let (_, (code, msg)) = offer(&name, "not-the-secret", &fd);
    assert_ne!(code, 0);
    assert!(msg.contains("unknown session secret"), "{msg}");
    drop(ring);
    // SAFETY: plain calls on a descriptor this test owns.
    let unsealed = unsafe {
        let raw = libc::memfd_create(c"x".as_ptr(), libc::MFD_CLOEXEC);
        assert!(raw >= 0);
        assert_eq!(libc::ftruncate(raw, 4 << 20), 0);
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw)
    };
    let (_, (code, msg)) = offer(&name, &secret, &unsealed);
    assert_ne!(code, 0);
    assert!(msg.contains("sealed"), "{msg}");

    // A connection that never names its session is closed by the deadline.
    let mut idle = connect(&name);
    let started = Instant::now();
    let mut byte = [0u8; 1];
    assert_eq!(
        idle.read(&mut byte).unwrap_or(0),
        0,
        "closed without an answer"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // Garbage and impossible operations are errors; the queue goes on.
    let (ring, fd) = LocalRing::create(DEFAULT_RING_BYTES).unwrap();
    let (_link, (code, msg)) = offer(&name, &secret, &fd);
    assert_eq!(code, 0, "{msg}");
    assert!(ring.send(&[0xff; 64]).unwrap());
    let c = completion(&ring);
    assert_ne!(c.code, 0);
    assert!(c.message.contains("undecodable"), "{}", c.message);
    let wild_read = QueueOp {
        ticket: 1,
        device: 0,
        op: Some(queue_op::Op::Read(offload_proto::ReadRequest {
            device: 0,
            src: 0x1000,
            size: 64 << 20,
            chunk_size: 0,
        })),
    };
    assert!(ring.send(&wild_read.encode_to_vec()).unwrap());
    let c = completion(&ring);
    assert_eq!(c.ticket, 1);
    assert_ne!(c.code, 0, "a read of memory the session does not own");
    assert!(ring.send(&marker(2)).unwrap());
    let c = completion(&ring);
    assert_eq!((c.ticket, c.code), (2, 0), "{}", c.message);

    // Counters that cannot be: the server ends this queue, nothing else.
    let (bad, fd) = LocalRing::create(DEFAULT_RING_BYTES).unwrap();
    let (_bad_link, (code, _)) = offer(&name, &secret, &fd);
    assert_eq!(code, 0);
    corrupt_request_tail(&fd);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !bad.peer_closed() {
        assert!(
            Instant::now() < deadline,
            "the server did not end a corrupt queue"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first queue and the session's calls still work.
    assert!(ring.send(&marker(3)).unwrap());
    assert_eq!(completion(&ring).ticket, 3);
    let mut c = raw.client.clone();
    let req = raw.req(offload_proto::AllocRequest {
        device: 0,
        size: 64,
        kind: 1,
    });
    io.block_on(async move { c.alloc(req).await })
        .expect("the session still serves calls");
    assert!(server.log().contains("same-host queue"), "{}", server.log());
}

/// Write an impossible request tail (far beyond the ring) through a
/// second mapping of the ring's memory.
fn corrupt_request_tail(fd: &impl AsRawFd) {
    // SAFETY: a fresh shared mapping of the ring's first page, unmapped
    // below; the request tail is the u64 at offset 64.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::write_volatile(p.cast::<u8>().add(64).cast::<u64>(), 1 << 40);
        libc::munmap(p, 4096);
    }
}
