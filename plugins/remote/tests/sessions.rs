//! Sessions of `offload serve` and who may open them: tokens, TLS, session
//! credentials, per-session limits, one process per session, and memory
//! freed when a client vanishes.

mod common;
use common::{
    client, hostile_images, offload_bin, packed, raw_remote_devices, read, read_into, skip, write,
    Server,
};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::{Config, ErrorCode, Runtime};

#[test]
fn tokens_are_required_and_checked() {
    let server = Server::start(Some("right"));
    let missing = client(&server.addr, None);
    assert!(missing.devices().is_empty());
    let msg = missing.failed_plugins()[0].1.to_string();
    assert!(msg.contains("requires a token"), "{msg}");
    let wrong = client(&server.addr, Some("wrong"));
    let msg = wrong.failed_plugins()[0].1.to_string();
    assert!(msg.contains("wrong token"), "{msg}");
    assert_eq!(client(&server.addr, Some("right")).devices().len(), 2);
}

#[test]
fn non_loopback_without_token_is_refused() {
    let out = Command::new(offload_bin())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("OFFLOAD_REMOTE_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without a token"), "{err}");
}

#[test]
fn tls_with_a_trusted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (ca, ca_key, cert, key, csr, ext) = (
        path("ca.pem"),
        path("ca.key"),
        path("cert.pem"),
        path("key.pem"),
        path("leaf.csr"),
        path("ext.cnf"),
    );
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let steps: [Vec<&str>; 3] = [
        vec![
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=offload-test-ca",
            "-keyout",
            &ca_key,
            "-out",
            &ca,
        ],
        vec![
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
        vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &cert,
        ],
    ];
    for step in &steps {
        let made = Command::new("openssl")
            .args(step)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !made.is_ok_and(|s| s.success()) {
            skip("openssl could not make test certificates");
            return;
        }
    }
    let cert = PathBuf::from(cert);
    let key = PathBuf::from(key);
    let server = Server::start_env(
        Some("tls-token"),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        2,
        &[("OFFLOAD_LOG", Path::new("info,offload_server=debug"))],
    );
    let config = Config {
        plugins: Some(vec!["remote".into()]),
        remote_servers: vec![server.addr.clone()],
        remote_token: Some("tls-token".into()),
        remote_tls_ca: Some(PathBuf::from(&ca)),
        remote_timeout_secs: 5,
        ..Config::default()
    };
    let rt = Runtime::new(config, &[offload_plugin_remote::ENTRY]);
    assert_eq!(rt.devices().len(), 2, "{:?}", rt.failed_plugins());
    let dev = &rt.devices()[0];
    // Several 1 MiB gRPC chunks (no plain-text side channel under TLS).
    let n = (7 << 19) + 3;
    let p = dev.alloc(n, AllocKind::Device).unwrap();
    let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    write(dev, p, &data).unwrap();
    let back = read(dev, p, n);
    assert!(back == data, "round trip over TLS differs");
    // Queues still go through shared memory: nothing of it leaves the machine.
    let queue = offload_core::Queue::new(Some(dev)).unwrap();
    queue.fill(p, &[0xAB], 64).unwrap();
    queue.synchronize().unwrap();
    assert_eq!(read(dev, p, 2), [0xAB, 0xAB]);
    assert!(
        server.log().contains("same-host queue opened"),
        "{}",
        server.log()
    );
    // A plain-text client cannot talk to the TLS server.
    let plain = client(&server.addr, Some("tls-token"));
    assert!(plain.devices().is_empty());
}

#[test]
fn clients_cannot_touch_each_others_memory() {
    let server = Server::start(None);
    let a = client(&server.addr, None);
    let b = client(&server.addr, None);
    let pa = a.devices()[0].alloc(256, AllocKind::Device).unwrap();
    a.devices()[0].fill(pa, &[7], 256).unwrap();
    let db = &b.devices()[0];
    // B's core refuses A's addresses before anything is sent...
    let mut buf = [0u8; 16];
    let e = read_into(db, pa, &mut buf).unwrap_err();
    assert!(e.message().contains("not inside a live allocation"), "{e}");
    // ...and the server refuses a client that sends them anyway.
    let attacker = raw_remote_devices(&server.addr, None);
    let aq = attacker[0].create_queue().unwrap();
    // SAFETY: `buf` holds 16 bytes and outlives this function; nothing
    // touches it before `aq.synchronize()` below reaches the copy.
    unsafe { aq.copy_from_device(buf.as_mut_ptr(), pa, 16) }.unwrap();
    let e = aq.synchronize().unwrap_err();
    assert!(e.message().contains("not memory of this session"), "{e}");
    // SAFETY: `buf`, 16 bytes, lives past the `aq.synchronize()` below.
    unsafe { aq.copy_to_device(pa, buf.as_ptr(), 16) }.unwrap();
    let e = aq.synchronize().unwrap_err();
    assert!(e.message().contains("not memory of this session"), "{e}");
    // SAFETY: the remote plugin touches no memory here: it forwards the
    // request, and the server checks it (what this test attacks).
    unsafe { aq.fill(pa, &[0], 16) }.unwrap();
    assert!(aq.synchronize().is_err());
    // Large copies take the bulk-data side channel: checked the same way.
    let big = a.devices()[0].alloc(1 << 20, AllocKind::Device).unwrap();
    let mut large = vec![0u8; 256 << 10];
    // SAFETY: `large` holds `large.len()` bytes, lives to the end of this
    // function and is untouched until `aq.synchronize()` has run.
    let e = unsafe { aq.copy_from_device(large.as_mut_ptr(), big, large.len()) }
        .and_then(|_| aq.synchronize())
        .unwrap_err();
    assert!(e.message().contains("not memory of this session"), "{e}");
    // SAFETY: as above: `large`'s bytes live past `aq.synchronize()`.
    let e = unsafe { aq.copy_to_device(big, large.as_ptr(), large.len()) }
        .and_then(|_| aq.synchronize())
        .unwrap_err();
    assert!(e.message().contains("not memory of this session"), "{e}");
    // The side channel stays usable for B's own memory after the refusals.
    let mine_big = db.alloc(1 << 20, AllocKind::Device).unwrap();
    write(db, mine_big, &large).unwrap();
    a.devices()[0].free(big).unwrap();
    // SAFETY: the remote plugin touches no memory here: it forwards the
    // request, and the server checks it (what this test attacks).
    assert!(unsafe { attacker[0].free(pa, AllocKind::Device) }.is_err());
    // A's data is intact and A can still free it.
    assert_eq!(read(&a.devices()[0], pa, 4), [7; 4]);
    a.devices()[0].free(pa).unwrap();
}

const CHILD: &str = "OFFLOAD_REMOTE_TEST_CHILD";

#[test]
fn a_vanished_client_has_its_memory_freed() {
    if let Ok(addr) = std::env::var(CHILD) {
        // Child: allocate and exit without freeing.
        let rt = client(&addr, None);
        for _ in 0..3 {
            rt.devices()[0].alloc(1000, AllocKind::Device).unwrap();
        }
        std::process::exit(0);
    }
    let server = Server::start(None);
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_vanished_client_has_its_memory_freed",
            "--nocapture",
        ])
        .env(CHILD, &server.addr)
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // The session's worker process reports what it freed as it exits.
        let log = server.log();
        if log.contains("session closed") && log.contains("freed_allocations=") {
            assert!(log.contains("freed_allocations=3"), "{log}");
            break;
        }
        assert!(Instant::now() < deadline, "session not closed:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A raw gRPC client's Alloc with `credential` as its session header.
async fn alloc_as(
    raw: &mut offload_proto::offload_client::OffloadClient<tonic::transport::Channel>,
    credential: &str,
) -> Result<u64, tonic::Status> {
    let mut req = tonic::Request::new(offload_proto::AllocRequest {
        device: 0,
        size: 64,
        kind: 1,
    });
    req.metadata_mut().insert(
        offload_proto::SESSION_HEADER,
        credential.parse().expect("header value"),
    );
    raw.alloc(req).await.map(|r| r.into_inner().ptr)
}

/// Session credentials are unguessable and bound to their session: a second
/// client that forges another session's header (the old predictable
/// `s<pid>-<n>` format, the public id it can see in logs, or its own
/// credential replayed after its session closed) is refused, and the other
/// session's memory is untouched.
#[test]
fn forged_and_replayed_session_credentials_are_refused() {
    let server = Server::start(None);
    // The victim: an ordinary client with data on the server.
    let victim = client(&server.addr, None);
    let vdev = &victim.devices()[0];
    let vp = vdev.alloc(64, AllocKind::Device).unwrap();
    vdev.fill(vp, &[5], 64).unwrap();
    let victim_id = server
        .log()
        .lines()
        .find(|l| l.contains("session opened"))
        .and_then(|l| l.split("session=").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .expect("session id in the server log")
        .to_string();

    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mine = io.block_on(async {
        let endpoint =
            tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr)).unwrap();
        let channel = endpoint.connect().await.unwrap();
        let mut main = offload_proto::offload_client::OffloadClient::new(channel);
        let hello = || offload_proto::HelloRequest {
            client: "forger".into(),
            protocol_version: offload_proto::PROTOCOL_VERSION,
        };
        let mut stream = main.hello(hello()).await.unwrap().into_inner();
        let greeting = stream.message().await.unwrap().unwrap();
        let mine = greeting.session;
        // `<public id>.<secret>`: 64 + 128 random bits, as hex.
        let (my_id, my_secret) = mine.split_once('.').expect("id.secret");
        assert_eq!((my_id.len(), my_secret.len()), (16, 32), "{mine}");
        assert!(mine.replace('.', "").bytes().all(|c| c.is_ascii_hexdigit()));
        // Each session runs in its own process: session calls are refused
        // on the main connection, taken on the session's own connection.
        assert!(greeting.session_connection);
        let on_main = alloc_as(&mut main, &mine).await.expect_err("alloc on main");
        assert_eq!(
            on_main.code(),
            tonic::Code::FailedPrecondition,
            "{on_main:?}"
        );
        let session_client = |credential: String| {
            let endpoint = endpoint.clone();
            async move {
                offload_plugin_remote::connect_session(&endpoint, &credential)
                    .await
                    .map(offload_proto::offload_client::OffloadClient::new)
            }
        };
        // A connection that names a session without its secret (or with a
        // wrong one) is refused before any call: nothing answers there.
        let not_opened = |c: Result<
            offload_proto::offload_client::OffloadClient<tonic::transport::Channel>,
            String,
        >,
                          credential: String,
                          what: &'static str| async move {
            if let Ok(mut c) = c {
                let s = alloc_as(&mut c, &credential).await.expect_err(what);
                assert_ne!(s.code(), tonic::Code::FailedPrecondition, "{what}: {s:?}");
            }
        };
        let mut raw = session_client(mine.clone())
            .await
            .expect("session connection");
        assert!(alloc_as(&mut raw, &mine).await.is_ok());
        // A second session gets an unrelated credential.
        let mut other = main.hello(hello()).await.unwrap().into_inner();
        let second = other.message().await.unwrap().unwrap().session;
        assert_ne!(second.split_once('.').unwrap().1, my_secret);
        drop(other);

        let refused = |r: Result<u64, tonic::Status>, what: &str| {
            let s = r.expect_err(what);
            assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{what}: {s:?}");
            assert!(s.message().contains("not open"), "{what}: {s:?}");
        };
        // The old predictable format, for the first few sessions of this pid.
        let pid = server.child.id();
        for n in 1..=4 {
            refused(
                alloc_as(&mut raw, &format!("s{pid}-{n}")).await,
                "old format",
            );
        }
        // The victim's public id, alone, with our secret, with a zero secret,
        // on our session's connection: refused call by call.
        refused(alloc_as(&mut raw, &victim_id).await, "public id alone");
        refused(
            alloc_as(&mut raw, &format!("{victim_id}.{my_secret}")).await,
            "public id with another session's secret",
        );
        refused(
            alloc_as(&mut raw, &format!("{victim_id}.{}", "0".repeat(32))).await,
            "public id with a guessed secret",
        );
        // A connection to the victim's own process needs its secret in the
        // preamble: its public id with our secret or a guessed one opens
        // nothing (the server closes the socket).
        for forged in [
            format!("{victim_id}.{my_secret}"),
            format!("{victim_id}.{}", "0".repeat(32)),
        ] {
            let c = session_client(forged.clone()).await;
            not_opened(c, forged, "forged session connection").await;
        }
        let wrong = |log: &str| {
            log.matches("session connection refused: wrong session secret")
                .count()
        };
        assert!(wrong(&server.log()) >= 2, "{}", server.log());
        // Replay: our own credential after our session closed.
        drop(stream);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !server
            .log()
            .lines()
            .any(|l| l.contains("session closed") && l.contains(my_id))
        {
            assert!(
                Instant::now() < deadline,
                "session not closed:\n{}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let replayed = session_client(mine.clone()).await;
        not_opened(replayed, mine.clone(), "replayed credential").await;
        assert!(
            server
                .log()
                .contains("session connection refused: no such session"),
            "{}",
            server.log()
        );
        // Our session's process is gone, and with it its connection.
        let gone = alloc_as(&mut raw, &mine).await.expect_err("closed session");
        assert_ne!(gone.code(), tonic::Code::Ok);
        mine
    });
    // The victim's session and data are intact.
    assert_eq!(read(vdev, vp, 64), [5; 64]);
    vdev.free(vp).unwrap();
    // Credentials never reach the server's log, only public ids.
    let secret = mine.split_once('.').unwrap().1;
    assert!(!server.log().contains(secret), "{}", server.log());
}

const LIMITS_CHILD: &str = "OFFLOAD_REMOTE_TEST_LIMITS_CHILD";

/// `--max-sessions`: a client beyond the limit is refused with a message
/// naming the limit; once a session ends, a new client gets in.
/// `--max-session-memory`: an allocation past the quota is refused
/// (out of resources) and freeing makes room again.
#[test]
fn session_and_memory_limits_refuse_clearly() {
    if let Ok(addr) = std::env::var(LIMITS_CHILD) {
        // Child: hold the only session, check the quota, exit.
        let rt = client(&addr, None);
        assert_eq!(rt.devices().len(), 2, "{:?}", rt.failed_plugins());
        let dev = &rt.devices()[0];
        let a = dev.alloc(600 << 10, AllocKind::Device).unwrap();
        let e = dev.alloc(600 << 10, AllocKind::Device).unwrap_err();
        assert_eq!(e.code(), ErrorCode::OutOfResources, "{e}");
        assert!(e.message().contains("--max-session-memory"), "{e}");
        dev.free(a).unwrap();
        let b = dev.alloc(900 << 10, AllocKind::Device).unwrap();
        dev.free(b).unwrap();
        println!("child: holding the session");
        std::thread::sleep(Duration::from_secs(3));
        std::process::exit(0);
    }
    let server = Server::start_with(
        None,
        &["--max-sessions", "1", "--max-session-memory", "1048576"],
    );
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "session_and_memory_limits_refuse_clearly",
            "--nocapture",
        ])
        .env(LIMITS_CHILD, &server.addr)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("child: holding the session") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
    }
    let second = client(&server.addr, None);
    assert!(second.devices().is_empty());
    let why = second.failed_plugins()[0].1.to_string();
    assert!(why.contains("--max-sessions"), "{why}");
    assert!(child.wait().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let again = client(&server.addr, None);
        if !again.devices().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no session after the first ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One session per process: a kernel that reads another session's device
/// address never gets its data, and a kernel calling `exit()` or an image
/// crashing in `dlopen` ends only its own session, with an error saying
/// how; the victim's session and the server go on.
#[test]
fn sessions_are_contained_in_their_own_processes() {
    if Command::new("clang-22").arg("--version").output().is_err() {
        return skip("clang-22 not found");
    }
    let dir = tempfile::tempdir().unwrap();
    let (kernels, crashing) = hostile_images(dir.path());
    let server = Server::start(None);
    let victim = client(&server.addr, None);
    let vdev = &victim.devices()[0];
    let secret_data = vdev.alloc(64, AllocKind::Device).unwrap();
    vdev.fill(secret_data, &[0xA5], 64).unwrap();
    let victim_ok = || {
        let back = read(vdev, secret_data, 64);
        assert_eq!(back, [0xA5; 64], "the victim's data changed");
        let p = vdev.alloc(4096, AllocKind::Device).unwrap();
        vdev.free(p).unwrap();
    };

    // A kernel reading the victim's address in another session.
    {
        let attacker = client(&server.addr, None);
        let dev = &attacker.devices()[0];
        let program = dev.load_program(&kernels).unwrap();
        let peek = program.kernel("peek").unwrap();
        let mine = dev.alloc(64, AllocKind::Device).unwrap();
        dev.fill(mine, &[0], 64).unwrap();
        // The C struct's tail padding written out, for `packed`.
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Peek {
            from: u64,
            to: u64,
            n: u32,
            _pad: u32,
        }
        let args = Peek {
            from: secret_data.0,
            to: mine.0,
            n: 64,
            _pad: 0,
        };
        let run = dev.launch(
            &peek,
            KernelArgs::Packed(packed(&args)),
            &LaunchConfig::linear(1, 1),
        );
        match run {
            // The address is nothing in the attacker's process, or its own
            // memory: never the victim's bytes.
            Ok(()) => {
                let got = read(dev, mine, 64);
                assert_ne!(got, [0xA5; 64], "read another session's data");
            }
            Err(e) => assert!(e.message().contains("signal 11 (SIGSEGV)"), "{e}"),
        }
    }
    victim_ok();

    // A kernel calling exit(3).
    {
        let attacker = client(&server.addr, None);
        let dev = &attacker.devices()[0];
        let program = dev.load_program(&kernels).unwrap();
        let quit = program.kernel("quit").unwrap();
        let status: i32 = 3;
        let e = dev
            .launch(
                &quit,
                KernelArgs::Packed(packed(&status)),
                &LaunchConfig::linear(1, 1),
            )
            .unwrap_err();
        assert!(e.message().contains("exited with status 3"), "{e}");
        // Later calls of that session say the same, at once.
        let e = dev.alloc(64, AllocKind::Device).unwrap_err();
        assert!(e.message().contains("exited with status 3"), "{e}");
    }
    victim_ok();

    // An image whose constructor crashes inside dlopen.
    {
        let attacker = client(&server.addr, None);
        let dev = &attacker.devices()[0];
        let Err(e) = dev.load_program(&crashing) else {
            panic!("a crashing image loaded");
        };
        assert!(e.message().contains("signal 11 (SIGSEGV)"), "{e}");
    }
    victim_ok();

    // The server still opens sessions, and logged each worker's end.
    let late = client(&server.addr, None);
    let p = late.devices()[0].alloc(64, AllocKind::Device).unwrap();
    late.devices()[0].free(p).unwrap();
    let log = server.log();
    assert!(log.contains("exited with status 3"), "{log}");
    assert!(log.matches("signal 11 (SIGSEGV)").count() >= 1, "{log}");
    vdev.free(secret_data).unwrap();
}
