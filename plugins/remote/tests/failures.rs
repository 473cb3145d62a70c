//! Servers that die or are told to stop, and regions that kill their
//! session: errors come back quickly and clearly, signals drain.

mod common;
use common::{build_openmp, client, client_config, exec_remote, offload_bin, read_into, Server};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use offload_core::plugin::AllocKind;
use offload_core::{Config, DevicePtr, Queue, Runtime};

#[test]
fn a_killed_server_ends_calls_with_an_error_quickly() {
    let mut server = Server::start(None);
    let rt = client(&server.addr, None);
    let dev = &rt.devices()[0];
    let p = dev.alloc(64, AllocKind::Device).unwrap();
    let queue = Queue::new(Some(dev)).unwrap();
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let start = Instant::now();
    // The session's worker dies with the server through parent-death
    // signals, which arrive asynchronously: a call made in that moment may
    // still be served. Every call after it fails.
    let e = loop {
        match dev.alloc(64, AllocKind::Device) {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the worker outlived the server"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    assert!(e.message().contains(&server.addr), "{e}");
    let mut b = [0u8; 8];
    assert!(read_into(dev, p, &mut b).is_err());
    assert!(queue.synchronize().is_err());
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    let _ = DevicePtr::NULL;
}

/// How `child` ended, waiting at most `limit` (else the test fails).
fn exit_within(
    child: &mut std::process::Child,
    limit: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM (systemd, docker) and SIGINT end `offload serve` cleanly: exit
/// status 0 and a log line, within a few seconds.
#[test]
fn sigterm_and_sigint_drain_and_exit_zero() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut server = Server::start(None);
        // A client session is open while the signal arrives.
        let rt = client(&server.addr, None);
        assert!(!rt.devices().is_empty());
        // SAFETY: kill(2) takes no pointers; the pid is our child's, not
        // yet reaped, so it cannot name another process.
        assert_eq!(unsafe { libc::kill(server.child.id() as i32, signal) }, 0);
        let status = exit_within(
            &mut server.child,
            Duration::from_secs(15),
            "serve after a signal",
        );
        assert!(
            status.success(),
            "signal {signal}: {status}\n{}",
            server.log()
        );
        let log = server.log();
        assert!(log.contains("shutting down (signal)"), "{log}");
        assert!(log.contains("offload server stopped"), "{log}");
        drop(rt);
    }
}

/// Killing the server while an OpenMP program offloads to it ends the
/// program with an error (default policy = mandatory), within 30 seconds.
#[test]
fn an_openmp_program_fails_cleanly_when_its_server_dies() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_openmp(
        dir.path(),
        "loop",
        r#"#include <stdio.h>
#include <unistd.h>
int main(void) {
  int x = 0;
  for (int i = 0; i < 1200; i++) {
#pragma omp target map(tofrom: x)
    x++;
    if (i == 0) { printf("first region done\n"); fflush(stdout); }
    usleep(25000);
  }
  printf("x=%d\n", x);
  return 0;
}
"#,
    );
    let mut server = Server::start(None);
    let mut child = Command::new(offload_bin())
        .arg("exec")
        .arg(&exe)
        .env("OFFLOAD_PLUGINS", "remote")
        .env("OFFLOAD_REMOTE", &server.addr)
        .env("OFFLOAD_REMOTE_TIMEOUT", "5")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "first region done");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let killed_at = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "client still running 30 s after the server died"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        !status.success(),
        "the program must fail, not report success"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("omptarget"),
        "no omptarget error message:\n{err}"
    );
    assert!(!err.contains("panicked"), "a panic escaped:\n{err}");
}

/// A target region that traps or writes through a null pointer kills a
/// local LLVM run by SIGILL or SIGSEGV; through `offload serve` it kills
/// the session's worker the same way, and the client dies by the same
/// signal after saying so (not "exit 1, the session is gone").
#[test]
fn a_region_killed_by_a_signal_kills_the_client_by_the_same_signal() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = build_openmp(
        dir.path(),
        "die",
        r#"#include <stdio.h>
int main(int argc, char **argv) {
  int mode = argc > 1 ? argv[1][0] : 0, x = 0;
  /* null when argc == 2, which the compiler cannot know */
  long bad = argc - 2;
  printf("started\n");
  fflush(stdout);
#pragma omp target map(tofrom: x) firstprivate(mode, bad)
  {
    if (mode == 't') __builtin_trap();
    if (mode == 's') *(volatile int *)bad = 1;
    x = 1;
  }
  printf("x=%d\n", x);
  return 0;
}
"#,
    );
    let mut server = Server::start(None);
    for (mode, sig, name) in [
        ("t", libc::SIGILL, "SIGILL"),
        ("s", libc::SIGSEGV, "SIGSEGV"),
    ] {
        let llvm = Command::new(&exe)
            .arg(mode)
            .env("LD_LIBRARY_PATH", "/usr/lib/llvm-22/lib")
            .output()
            .unwrap();
        assert_eq!(llvm.status.signal(), Some(sig), "{}", common::text(&llvm));
        let ours = exec_remote(&server, &exe).arg(mode).output().unwrap();
        let err = String::from_utf8_lossy(&ours.stderr);
        assert_eq!(
            ours.status.signal(),
            Some(sig),
            "mode {mode}: {}",
            common::text(&ours)
        );
        assert!(
            err.contains(&format!("killed by signal {sig} ({name})")),
            "{}",
            common::text(&ours)
        );
        assert!(
            err.contains("by the same signal"),
            "{}",
            common::text(&ours)
        );
        assert!(!err.contains("panicked"), "{}", common::text(&ours));
        assert!(String::from_utf8_lossy(&ours.stdout).starts_with("started\n"));
        assert!(server.alive(), "{}", server.log());
    }
    // Undisturbed by its sessions' deaths, the server serves the next one.
    let ok = exec_remote(&server, &exe).output().unwrap();
    assert!(ok.status.success(), "{}", common::text(&ok));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("x=1"));
    // A device constructor that traps (at the image's load): SIGILL both ways.
    let ctor = build_openmp(
        dir.path(),
        "ctor",
        r#"#include <stdio.h>
#include <omp.h>
#pragma omp begin declare target
__attribute__((constructor)) static void boom(void) {
  if (!omp_is_initial_device()) __builtin_trap();
}
#pragma omp end declare target
int main(void) {
  int x = 0;
#pragma omp target map(tofrom: x)
  x = 1;
  printf("x=%d\n", x);
  return 0;
}
"#,
    );
    let llvm = Command::new(&ctor)
        .env("LD_LIBRARY_PATH", "/usr/lib/llvm-22/lib")
        .output()
        .unwrap();
    assert_eq!(
        llvm.status.signal(),
        Some(libc::SIGILL),
        "{}",
        common::text(&llvm)
    );
    let ours = exec_remote(&server, &ctor).output().unwrap();
    assert_eq!(
        ours.status.signal(),
        Some(libc::SIGILL),
        "{}",
        common::text(&ours)
    );
    assert!(
        String::from_utf8_lossy(&ours.stderr).contains("killed by signal 4 (SIGILL)"),
        "{}",
        common::text(&ours)
    );
}

/// SIGTERM drains: a target region running when the signal comes (2.5 s)
/// completes, and its program gets its result and exits 0; a session asked
/// for meanwhile is refused; the server then exits 0.
#[test]
fn sigterm_lets_a_running_region_finish_and_refuses_new_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_openmp(
        dir.path(),
        "slow",
        r#"#include <stdio.h>
#include <unistd.h>
int main(void) {
  int x = 0;
  printf("started\n");
  fflush(stdout);
#pragma omp target map(tofrom: x)
  {
    usleep(2500000);
    x = 41;
  }
  x++;
  printf("x=%d\n", x);
  return 0;
}
"#,
    );
    let mut server = Server::start(None);
    let mut prog = exec_remote(&server, &exe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(prog.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    // The region is on its way (its launch follows at once).
    std::thread::sleep(Duration::from_millis(700));
    let signalled = Instant::now();
    assert_eq!(
        // SAFETY: kill(2) takes no pointers; the pid is our child's, not
        // yet reaped, so it cannot name another process.
        unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) },
        0
    );
    std::thread::sleep(Duration::from_millis(200));
    // A new session during the drain is refused.
    let late = Runtime::new(
        Config {
            remote_timeout_secs: 2,
            ..client_config(&server.addr, None)
        },
        &[offload_plugin_remote::ENTRY],
    );
    assert!(
        late.devices().is_empty(),
        "a session opened while the server drains"
    );
    assert!(
        signalled.elapsed() < Duration::from_millis(1800),
        "too slow to test during the region: {:?}",
        signalled.elapsed()
    );
    let status = prog.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut prog.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        status.success() && rest == "x=42\n",
        "the region in flight did not complete: {status}\nstdout: {rest}\nstderr: {err}\nserver:\n{}",
        server.log()
    );
    let status = exit_within(
        &mut server.child,
        Duration::from_secs(15),
        "serve after draining",
    );
    assert!(status.success(), "{status}\n{}", server.log());
}
