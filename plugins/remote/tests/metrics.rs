//! What operators see of a server: Prometheus metrics, the gRPC health
//! service, refused authentications in the log.

mod common;
use common::{client, hostile_images, packed, read, skip, write, Server};

use std::process::Command;
use std::time::{Duration, Instant};

use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};

/// `--metrics-listen`: Prometheus counters of sessions, bytes, launches,
/// refused authentications and worker crashes; the standard gRPC health
/// service says SERVING; refused tokens are logged with the peer address.
#[test]
fn metrics_health_and_refusal_logs() {
    if Command::new("clang-22").arg("--version").output().is_err() {
        return skip("clang-22 not found");
    }
    let server = Server::start_with(Some("tok"), &["--metrics-listen", "127.0.0.1:0"]);
    let metrics_addr = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = server.log();
            if let Some(a) = log
                .lines()
                .find(|l| l.contains("metrics at /metrics"))
                .and_then(|l| l.split("addr=").nth(1))
                .and_then(|r| r.split_whitespace().next())
            {
                break a.to_string();
            }
            assert!(Instant::now() < deadline, "no metrics address:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let scrape = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&metrics_addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        out
    };
    let value = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
            .parse()
            .unwrap()
    };

    // Health: SERVING.
    let io = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = io.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = tonic_health::pb::health_client::HealthClient::new(ch);
        health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
    });
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // A working session, a refused token, a crashing session.
    let dir = tempfile::tempdir().unwrap();
    let (kernels, _) = hostile_images(dir.path());
    {
        let rt = client(&server.addr, Some("tok"));
        let dev = &rt.devices()[0];
        let p = dev.alloc(4096, AllocKind::Device).unwrap();
        let data = [7u8; 4096];
        write(dev, p, &data).unwrap();
        // 1 MiB each way: over the data channel (64 KiB and more), whose
        // bytes count too.
        let big = dev.alloc(1 << 20, AllocKind::Device).unwrap();
        write(dev, big, &vec![3u8; 1 << 20]).unwrap();
        assert_eq!(read(dev, big, 1 << 20), vec![3u8; 1 << 20]);
        let program = dev.load_program(&kernels).unwrap();
        let quit = program.kernel("quit").unwrap();
        let peek = program.kernel("peek").unwrap();
        let nothing = [p.0, p.0, 0];
        dev.launch(
            &peek,
            KernelArgs::Packed(packed(&nothing)),
            &LaunchConfig::linear(1, 1),
        )
        .unwrap();
        let refused = client(&server.addr, Some("wrong"));
        assert!(refused.devices().is_empty());
        // Workers report every 0.1 s; what a crash cuts short is lost.
        std::thread::sleep(Duration::from_millis(400));
        let status: i32 = 9;
        assert!(dev
            .launch(
                &quit,
                KernelArgs::Packed(packed(&status)),
                &LaunchConfig::linear(1, 1)
            )
            .is_err());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = scrape();
        if value(&text, "offload_worker_crashes_total") == 1
            && value(&text, "offload_bytes_to_device_total") >= 4096 + (1 << 20)
            && value(&text, "offload_bytes_from_device_total") >= 1 << 20
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "counters did not arrive:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(value(&text, "offload_sessions_opened_total") >= 1, "{text}");
    assert!(value(&text, "offload_auth_refused_total") >= 1, "{text}");
    assert!(value(&text, "offload_launches_total") >= 1, "{text}");
    assert!(
        text.contains("# TYPE offload_sessions_active gauge"),
        "{text}"
    );
    let log = server.log();
    assert!(
        log.lines()
            .any(|l| l.contains("authentication refused") && l.contains("peer=127.0.0.1")),
        "{log}"
    );
}
