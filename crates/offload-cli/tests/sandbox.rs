//! The session sandbox of `offload serve` against hostile kernels
//! (`tests/sandbox/hostile.c`): each attack of issue 22 is tried from a
//! real session's worker and must stay inside that session. The server
//! runs on loopback; every loop is bounded. Under `CI=true` a missing
//! mechanism (clang-22, root) fails instead of skipping.

mod common;
use common::{packed, read, read_into, skip, write, Server};

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::{Config, Device, Runtime};

/// The token of the sandbox tests' servers.
const TOKEN: &str = "sandbox-test-token";

/// A server with one host device and [`TOKEN`].
fn serve(extra: &[&str]) -> Server {
    Server::start_env(Some(TOKEN), extra, 1, &[])
}

fn client(addr: &str) -> Runtime {
    let config = Config {
        plugins: Some(vec!["remote".into()]),
        remote_servers: vec![addr.to_string()],
        remote_token: Some(TOKEN.into()),
        remote_timeout_secs: 10,
        remote_chunk_size: 1 << 20,
        ..Config::default()
    };
    Runtime::new(config, &offload::internals::builtin_plugins())
}

/// Whether this machine can run the sandbox tests (clang-22, root).
fn ready() -> bool {
    if Command::new("clang-22").arg("--version").output().is_err() {
        skip("clang-22 not found");
        return false;
    }
    if !nix_is_root() {
        skip("not root: the sandbox runs sessions under their own uids only as root");
        return false;
    }
    true
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
}

fn hostile_so(dir: &Path) -> Vec<u8> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.join("hostile.so");
    let ok = Command::new("clang-22")
        .args(["-O1", "-fPIC", "-shared", "-I"])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sandbox/hostile.c"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "clang-22 failed on hostile.c");
    std::fs::read(out).unwrap()
}

/// Run kernel `name` of `image` once with `args`.
fn run<T: Copy>(dev: &Arc<Device>, image: &[u8], name: &str, args: &T) -> offload_core::Result<()> {
    let program = dev.load_program(image)?;
    let kernel = program.kernel(name)?;
    dev.launch(
        &kernel,
        KernelArgs::Packed(packed(args)),
        &LaunchConfig::linear(1, 1),
    )
}

fn read_words(dev: &Arc<Device>, at: offload_core::DevicePtr, n: usize) -> Vec<i64> {
    read(dev, at, n * 8)
        .chunks_exact(8)
        .map(|w| i64::from_ne_bytes(w.try_into().unwrap()))
        .collect()
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Probe {
    out: u64,
    sibling: i64,
    tag: i64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Opener {
    out: u64,
    paths: u64,
    n: i64,
}

/// What the `opener` kernel got for each of `paths`: (errno of opening it
/// for reading, errno of opening it for appending, creating it if missing;
/// 0 = opened).
fn try_open(dev: &Arc<Device>, image: &[u8], paths: &[&Path]) -> Vec<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = Vec::new();
    for p in paths {
        bytes.extend_from_slice(p.as_os_str().as_bytes());
        bytes.push(0);
    }
    let names = dev.alloc(bytes.len(), AllocKind::Device).unwrap();
    write(dev, names, &bytes).unwrap();
    let out = dev.alloc(paths.len() * 16, AllocKind::Device).unwrap();
    let args = Opener {
        out: out.0,
        paths: names.0,
        n: paths.len() as i64,
    };
    run(dev, image, "opener", &args).unwrap();
    let w = read_words(dev, out, paths.len() * 2);
    dev.free(names).unwrap();
    dev.free(out).unwrap();
    w.chunks_exact(2).map(|p| (p[0], p[1])).collect()
}

/// Files a session must not reach and that its uid could open were it
/// not for the sandbox's file system ruleset: in a folder of the project
/// (outside `/tmp`, which a session does not share), owned by `owner`:
/// `home/` (0700 when the owner is the server's user, else 0755)
/// holding `secret` (0600, or 0666 under a root server: sessions run as
/// other uids), and a token file (0600 or 0644).
struct Forbidden {
    dir: std::path::PathBuf,
    secret: std::path::PathBuf,
    created: std::path::PathBuf,
    token_file: std::path::PathBuf,
}

impl Forbidden {
    fn new(label: &str, owner: u32, open_to_all: bool) -> Forbidden {
        use std::os::unix::fs::PermissionsExt;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sandbox-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let secret = home.join("secret");
        std::fs::write(&secret, "secret of the server's user\n").unwrap();
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let mode = |p: &Path, m: u32| {
            std::os::unix::fs::chown(p, Some(owner), Some(owner)).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        };
        mode(&dir, 0o755);
        mode(&home, if open_to_all { 0o777 } else { 0o700 });
        mode(&secret, if open_to_all { 0o666 } else { 0o600 });
        mode(&token_file, if open_to_all { 0o644 } else { 0o600 });
        Forbidden {
            created: home.join("created"),
            dir,
            secret,
            token_file,
        }
    }

    /// A kernel of `dev`'s session is refused each of them (EACCES), the
    /// files are unchanged and nothing was created; what a session needs
    /// (system files, `/dev/null`, its `/tmp`) still opens.
    fn check(&self, dev: &Arc<Device>, image: &[u8], log: &str) {
        if landlock_abi().is_none() {
            return skip("no Landlock in this kernel: the file system ruleset is not tested");
        }
        let tmp_file = format!("/tmp/offload-sandbox-opener-{}", std::process::id());
        let got = try_open(
            dev,
            image,
            &[
                &self.secret,
                &self.token_file,
                &self.created,
                Path::new("/etc/passwd"),
                Path::new("/dev/null"),
                Path::new(&tmp_file),
                Path::new("/proc/thread-self/comm"),
                Path::new("/proc/1/comm"),
            ],
        );
        let eacces = libc::EACCES as i64;
        assert_eq!(
            got[0],
            (eacces, eacces),
            "a file of the server user's home: {got:?}\n{log}"
        );
        assert_eq!(got[1], (eacces, eacces), "the token file: {got:?}");
        assert_eq!(got[2].1, eacces, "creating a file in that home: {got:?}");
        assert_eq!(got[3].0, 0, "/etc/passwd is readable: {got:?}");
        assert_eq!(got[3].1, eacces, "/etc/passwd is not writable: {got:?}");
        assert_eq!(got[4], (0, 0), "/dev/null: {got:?}");
        assert_eq!(
            got[5].1, 0,
            "creating a file in the session's own /tmp: {got:?}"
        );
        // The worker's own /proc entries are writable (CUDA names its
        // threads there), no other process's: the session's init is pid 1.
        assert_eq!(got[6], (0, 0), "/proc/thread-self/comm: {got:?}");
        assert_eq!(got[7].1, eacces, "writing /proc/1/comm: {got:?}");
        assert_eq!(
            std::fs::read_to_string(&self.secret).unwrap(),
            "secret of the server's user\n"
        );
        assert_eq!(
            std::fs::read_to_string(&self.token_file).unwrap(),
            format!("{TOKEN}\n")
        );
        assert!(
            !self.created.exists(),
            "a session created {}",
            self.created.display()
        );
    }
}

impl Drop for Forbidden {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a kernel sees from inside its session: no other process, no pid
/// of the server or another session, no ptrace/pidfd/process_vm, no root,
/// a /tmp and /dev/shm of its own, no token in an empty environment, no
/// namespaces or mounts, no descriptor but the worker's own.
#[test]
fn a_kernel_sees_only_its_own_session() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    // Files of the server's user (root) that any uid could open: only the
    // file system ruleset keeps a session out.
    let forbidden = Forbidden::new("root", 0, true);
    let token_file = forbidden.token_file.to_str().unwrap().to_string();
    let server = serve(&["--token-file", &token_file]);
    let victim = client(&server.addr);
    let vdev = victim.devices()[0].clone();
    let attacker = client(&server.addr);
    let dev = attacker.devices()[0].clone();
    let pids = server.worker_pids();
    assert_eq!(pids.len(), 2, "{}", server.log());
    let tag = std::process::id() as i64 * 2;

    // The victim leaves a file in its /tmp.
    let vout = vdev.alloc(17 * 8, AllocKind::Device).unwrap();
    let vprobe = Probe {
        out: vout.0,
        sibling: pids[1],
        tag: tag + 1,
    };
    run(&vdev, &image, "probe", &vprobe).unwrap();

    let out = dev.alloc(17 * 8, AllocKind::Device).unwrap();
    let probe = Probe {
        out: out.0,
        sibling: pids[0],
        tag,
    };
    run(&dev, &image, "probe", &probe).unwrap();
    let w = read_words(&dev, out, 17);
    let log = server.log();
    assert!(
        w[0] >= 2 && w[0] <= 5,
        "processes visible in /proc: {} ({w:?})",
        w[0]
    );
    assert_eq!(w[1], libc::ENOENT as i64, "/proc/<sibling>/mem: {w:?}");
    assert_eq!(w[2], libc::ESRCH as i64, "kill(sibling, 0): {w:?}");
    assert_eq!(
        w[3], 1,
        "the parent is the session's init, pid 1 of its own PID namespace: {w:?}"
    );
    assert_eq!(w[4], libc::EPERM as i64, "pidfd_open: {w:?}");
    assert_eq!(w[5], libc::EPERM as i64, "ptrace: {w:?}");
    assert_eq!(w[6], libc::EPERM as i64, "process_vm_readv: {w:?}");
    assert!(w[7] >= 2_100_000_000, "uid {} (never root)", w[7]);
    assert_eq!(w[8], 0, "its own /tmp is writable: {w:?}");
    assert_eq!(w[9], 0, "its own /dev/shm is writable: {w:?}");
    assert_eq!(w[10], 0, "OFFLOAD_REMOTE_TOKEN reached the kernel");
    // PATH, LD_LIBRARY_PATH (cargo sets it) and the server's OFFLOAD_* config at most.
    assert!(
        w[11] <= 5,
        "the environment holds more than PATH and OFFLOAD_*: {w:?}"
    );
    assert_eq!(w[12], libc::EPERM as i64, "unshare: {w:?}");
    assert_eq!(w[13], libc::EPERM as i64, "mount: {w:?}");
    assert_eq!(w[14], 0, "saw the other session's /tmp file");
    assert_eq!(w[15], libc::EPERM as i64, "pidfd_getfd: {w:?}");
    assert!(w[16] <= 64, "descriptors up to {} are open", w[16]);
    assert!(log.contains("sandbox:"), "{log}");
    // Nothing reached the host's /tmp or /dev/shm; the victim is intact.
    for t in [tag, tag + 1] {
        assert!(!Path::new(&format!("/tmp/offload-sandbox-{t}")).exists());
        assert!(!Path::new(&format!("/dev/shm/offload-sandbox-{t}")).exists());
    }
    let v = read_words(&vdev, vout, 17);
    assert_eq!(v[8], 0);
    forbidden.check(&dev, &image, &server.log());
}

/// kill(getppid(), 9) and kill(<another session's worker>, 9): the server
/// and the other session go on.
#[test]
fn kernels_cannot_kill_the_server_or_other_sessions() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let mut server = serve(&[]);
    let victim = client(&server.addr);
    let vdev = victim.devices()[0].clone();
    let data = vdev.alloc(64, AllocKind::Device).unwrap();
    vdev.fill(data, &[0x5A], 64).unwrap();
    let attacker = client(&server.addr);
    let dev = attacker.devices()[0].clone();
    let pids = server.worker_pids();
    let _ = run(&dev, &image, "killer", &pids[0]);
    let server_pid = server.child.id() as i64;
    let _ = run(&dev, &image, "killer", &server_pid);
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.alive(), "the server died: {}", server.log());
    assert_eq!(
        read(&vdev, data, 64),
        [0x5A; 64],
        "the victim's session is gone or changed"
    );
    // The attacker's own session also survived its kernel.
    dev.alloc(64, AllocKind::Device).unwrap();
}

fn processes_named(name: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .count()
}

/// A kernel's setsid grandchild dies with the session (here ended by
/// `--session-idle-timeout`), and its cgroups go with it.
#[test]
fn a_sessions_processes_end_with_it() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let server = serve(&["--session-idle-timeout", "2"]);
    let tag = (std::process::id() as i64) % 100_000_000;
    let name = format!("ofsurv{tag}");
    {
        let attacker = client(&server.addr);
        let dev = attacker.devices()[0].clone();
        run(&dev, &image, "survivor", &tag).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while processes_named(&name) == 0 {
            assert!(Instant::now() < deadline, "the survivor never started");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_named(&name) > 0 {
        assert!(
            Instant::now() < deadline,
            "a kernel's process outlived its session: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = server.worker_pids()[0];
    let cgroup = format!("offload-session-{pid}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Command::new("find")
        .args([
            "/sys/fs/cgroup/memory",
            "/sys/fs/cgroup/pids",
            "-name",
            &cgroup,
        ])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
    {
        assert!(Instant::now() < deadline, "cgroup {cgroup} left behind");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Counted {
    out: u64,
    n: i64,
}

/// `--max-session-memory` bounds everything the session's processes take
/// (a kernel's malloc too): the hog's session ends, another goes on.
/// `--max-session-processes` bounds a fork bomb.
#[test]
fn memory_and_processes_are_bounded_per_session() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let server = serve(&[
        "--max-session-memory",
        &(64u64 << 20).to_string(),
        "--max-session-processes",
        "64",
    ]);
    let bystander = client(&server.addr);
    let bdev = bystander.devices()[0].clone();
    let keep = bdev.alloc(4096, AllocKind::Device).unwrap();
    {
        let attacker = client(&server.addr);
        let dev = attacker.devices()[0].clone();
        let out = dev.alloc(8, AllocKind::Device).unwrap();
        // Within the limit: fine.
        let small = Counted {
            out: out.0,
            n: 16 << 20,
        };
        run(&dev, &image, "hog", &small).unwrap();
        assert_eq!(read_words(&dev, out, 1)[0], 2);
        // Far beyond it (2 GiB): refused or the session ends.
        let big = Counted {
            out: out.0,
            n: 2 << 30,
        };
        dev.fill(out, &[0], 8).unwrap();
        let r = run(&dev, &image, "hog", &big);
        match r {
            Ok(()) => assert_eq!(read_words(&dev, out, 1)[0], 1, "2 GiB were granted"),
            Err(e) => assert!(e.message().contains("signal 9"), "{e}"),
        }
    }
    {
        let attacker = client(&server.addr);
        let dev = attacker.devices()[0].clone();
        let out = dev.alloc(8, AllocKind::Device).unwrap();
        let bomb = Counted {
            out: out.0,
            n: 1000,
        };
        run(&dev, &image, "bomb", &bomb).unwrap();
        let forks = read_words(&dev, out, 1)[0];
        assert!(forks < 64, "{forks} forks with --max-session-processes 64");
    }
    bdev.fill(keep, &[1], 4096).unwrap();
    bdev.free(keep).unwrap();
}

/// The bystander session of the quota tests and a fresh one still work.
fn still_usable(addr: &str, bdev: &Arc<Device>, keep: offload_core::DevicePtr, image: &[u8]) {
    bdev.fill(keep, &[1], 4096).unwrap();
    assert_eq!(read(bdev, keep, 8), vec![1; 8]);
    let after = client(addr);
    let dev = after.devices()[0].clone();
    let out = dev.alloc(8, AllocKind::Device).unwrap();
    let small = Counted {
        out: out.0,
        n: 1 << 20,
    };
    run(&dev, image, "hog", &small).unwrap();
    assert_eq!(read_words(&dev, out, 1)[0], 2);
}

/// Issue 22 item 5: an image whose zero-initialised global (`.bss`, 1 GiB)
/// is far beyond `--max-session-memory 256M` is not loaded, or its kernel
/// writing all of it ends the session: it never gets the memory. The
/// server and another session go on.
#[test]
fn a_big_bss_global_is_bounded_by_the_session_memory() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let src = dir.path().join("bss.c");
    std::fs::write(
        &src,
        r#"#include "offload/host_kernel.h"
#define BIG (1LL << 30)
char big_bss[BIG];
typedef struct { long long *out; } bss_args;
/* write every page of big_bss; out[0] = 2 when all of it was written. */
OFFLOAD_HOST_KERNEL(touch_bss) {
  const bss_args *a = args;
  if (offload_global_id_x(item) != 0) return;
  volatile char *p = big_bss;
  for (long long i = 0; i < BIG; i += 4096) p[i] = 1;
  a->out[0] = 2;
}
"#,
    )
    .unwrap();
    let so = dir.path().join("bss.so");
    let ok = Command::new("clang-22")
        .args(["-O1", "-fPIC", "-shared", "-I"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include"))
        .arg("-o")
        .arg(&so)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "clang-22 failed on bss.c");
    let bss = std::fs::read(&so).unwrap();
    let server = serve(&["--max-session-memory", &(256u64 << 20).to_string()]);
    let bystander = client(&server.addr);
    let bdev = bystander.devices()[0].clone();
    let keep = bdev.alloc(4096, AllocKind::Device).unwrap();
    {
        let attacker = client(&server.addr);
        let dev = attacker.devices()[0].clone();
        let out = dev.alloc(8, AllocKind::Device).unwrap();
        match dev.load_program(&bss) {
            Err(e) => assert!(
                e.message().contains("--max-session-memory"),
                "a 1 GiB .bss refused without naming the limit: {e}"
            ),
            Ok(program) => {
                let kernel = program.kernel("touch_bss").unwrap();
                let r = dev.launch(
                    &kernel,
                    KernelArgs::Packed(packed(&[out.0])),
                    &LaunchConfig::linear(1, 1),
                );
                let e = r.expect_err("a kernel wrote 1 GiB of .bss under a 256 MiB quota");
                assert!(
                    e.message().contains("--max-session-memory 256 MiB"),
                    "the session's end does not name the quota: {e}"
                );
            }
        }
    }
    still_usable(&server.addr, &bdev, keep, &image);
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// Issue 22 item 5: registered images count against `--max-session-memory`.
/// Four 200 MiB images under a 256 MiB quota — in one RegisterBinary or in
/// four — are refused with an error naming the limit (or the session
/// ends); the supervisor never holds them (its peak memory grows by far
/// less than they carry: session connections go to the worker), and the
/// server and another session go on.
#[test]
fn registered_images_are_bounded_by_the_session_memory() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let server = serve(&["--max-session-memory", &(256u64 << 20).to_string()]);
    let bystander = client(&server.addr);
    let bdev = bystander.devices()[0].clone();
    let keep = bdev.alloc(4096, AllocKind::Device).unwrap();
    let pid = server.child.id();
    let before = common::peak_rss(pid);
    let blob: &'static [u8] = Box::leak(vec![0x5au8; 200 << 20].into_boxed_slice());
    let leaked: &'static [u8] = Box::leak(image.clone().into_boxed_slice());
    let template = offload_image::unwrap(leaked).unwrap().remove(0);
    let big = || offload_image::DeviceImage {
        bytes: blob,
        ..template.clone()
    };
    let limit_named = |m: &str| {
        m.contains("--max-session-memory") || m.contains("limit") || m.contains("signal 9")
    };
    // One binary of four images: 800 MiB in one message.
    {
        let attacker = client(&server.addr);
        assert!(!attacker.devices().is_empty());
        let (_, failures) = attacker.register_binary((0..4).map(|_| big()).collect(), vec![]);
        assert!(
            !failures.is_empty(),
            "4 x 200 MiB images registered in one binary"
        );
        let m = failures[0].error.to_string();
        assert!(limit_named(&m), "{m}");
    }
    // Four binaries of one image each: 200 MiB per message.
    {
        let attacker = client(&server.addr);
        assert!(!attacker.devices().is_empty());
        let mut refused = None;
        for _ in 0..4 {
            let (_, failures) = attacker.register_binary(vec![big()], vec![]);
            if let Some(f) = failures.first() {
                refused = Some(f.error.to_string());
                break;
            }
        }
        let m = refused.expect("4 binaries of 200 MiB images registered under a 256 MiB quota");
        // The cgroup's OOM killer ends the session: the error names the quota.
        assert!(m.contains("--max-session-memory 256 MiB"), "{m}");
    }
    let grown = common::peak_rss(pid).saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "registering 1.6 GiB of images raised the supervisor's peak memory by {} MiB",
        grown >> 20
    );
    still_usable(&server.addr, &bdev, keep, &image);
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// N clients at once against `--max-sessions 3`: exactly 3 get in.
#[test]
fn max_sessions_holds_under_concurrency() {
    let server = serve(&["--max-sessions", "3"]);
    let n = 8;
    let barrier = Arc::new(Barrier::new(n));
    let addr = server.addr.clone();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (barrier, addr) = (barrier.clone(), addr.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let rt = client(&addr);
                let admitted = !rt.devices().is_empty();
                // Hold the session until every client has tried.
                std::thread::sleep(Duration::from_secs(2));
                admitted
            })
        })
        .collect();
    let admitted = handles
        .into_iter()
        .filter(|_| true)
        .map(|h| h.join().unwrap())
        .filter(|&a| a)
        .count();
    assert_eq!(admitted, 3, "{}", server.log());
}

/// `--session-idle-timeout`: an idle session is closed, its client told why.
#[test]
fn idle_sessions_are_closed() {
    let server = serve(&["--session-idle-timeout", "1"]);
    let rt = client(&server.addr);
    let dev = rt.devices()[0].clone();
    dev.alloc(64, AllocKind::Device).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let e = dev.alloc(64, AllocKind::Device).unwrap_err();
    assert!(e.message().contains("idle"), "{e}");
    assert!(server.log().contains("session idle"), "{}", server.log());
}

/// The Landlock ABI of this kernel (None: no Landlock).
fn landlock_abi() -> Option<i64> {
    // SAFETY: landlock_create_ruleset(2) with a null attribute, size 0 and
    // LANDLOCK_CREATE_RULESET_VERSION (1) reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    (v > 0).then_some(v)
}

/// The start line says how sessions are sandboxed, the file system
/// ruleset (Landlock) included; a kernel without Landlock is said so (and
/// fails this test under `CI=true`: the project's kernels have it).
#[test]
fn the_server_says_how_it_sandboxes() {
    let server = serve(&[]);
    let log = server.log();
    if nix_is_root() {
        assert!(log.contains("session sandbox on"), "{log}");
        match landlock_abi() {
            Some(abi) => assert!(log.contains(&format!("Landlock ABI {abi}")), "{log}"),
            None => {
                assert!(log.contains("NO Landlock"), "{log}");
                skip("no Landlock in this kernel: sessions' files are not confined");
            }
        }
    }
    drop(server);
    let server = serve(&["--insecure-no-sandbox"]);
    assert!(
        server.log().contains("session sandbox OFF"),
        "{}",
        server.log()
    );
}

/// What the sandbox costs: session start (the server's `start_us`), launch
/// round trip and 64 MiB copies, with and without it. Run by hand:
/// `cargo test -p offload-cli --test sandbox --release -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_sandbox_cost() {
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    for extra in [&["--insecure-no-sandbox"][..], &[][..]] {
        let server = serve(extra);
        let mut starts = Vec::new();
        let (mut launch_us, mut h2d, mut d2h) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            let rt = client(&server.addr);
            let dev = rt.devices()[0].clone();
            let out = dev.alloc(8, AllocKind::Device).unwrap();
            let program = dev.load_program(&image).unwrap();
            let kernel = program.kernel("bomb").unwrap();
            let args = Counted { out: out.0, n: 0 };
            let t = Instant::now();
            for _ in 0..200 {
                dev.launch(
                    &kernel,
                    KernelArgs::Packed(packed(&args)),
                    &LaunchConfig::linear(1, 1),
                )
                .unwrap();
            }
            launch_us.push(t.elapsed().as_secs_f64() * 1e6 / 200.0);
            let n = 64 << 20;
            let buf = vec![7u8; n];
            let mut back = vec![0u8; n];
            let d = dev.alloc(n, AllocKind::Device).unwrap();
            for _ in 0..3 {
                let t = Instant::now();
                write(&dev, d, &buf).unwrap();
                h2d.push(n as f64 / t.elapsed().as_secs_f64() / 1e9);
                let t = Instant::now();
                read_into(&dev, d, &mut back).unwrap();
                d2h.push(n as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
            dev.free(d).unwrap();
        }
        for l in server
            .log()
            .lines()
            .filter(|l| l.contains("session opened"))
        {
            if let Some(v) = l.split("start_us=").nth(1) {
                starts.push(v.trim().parse::<f64>().unwrap_or(0.0) / 1000.0);
            }
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        println!(
            "{:<22} session start {:6.1} ms  launch {:7.1} us  h2d {:5.2} GB/s  d2h {:5.2} GB/s",
            if extra.is_empty() {
                "sandbox"
            } else {
                "--insecure-no-sandbox"
            },
            med(&mut starts),
            med(&mut launch_us),
            med(&mut h2d),
            med(&mut d2h)
        );
    }
}

/// Set in a child copy of this test binary: what it does (see
/// [`a_dying_kernels_last_output_reaches_the_client`]).
const CHILD: &str = "OFFLOAD_SANDBOX_TEST_CHILD";

/// A kernel that writes to stdout and stderr and then calls `exit()` or
/// crashes (SIGSEGV, SIGILL): what it wrote (more than a pipe holds, so most of it had left
/// the pipes for the worker's memory) still comes out on the client, on
/// the right stream, before the client's error; none of it in the
/// server's log. The client is a child copy of this test (its stdout is
/// the one to read).
#[test]
fn a_dying_kernels_last_output_reaches_the_client() {
    if let Ok(spec) = std::env::var(CHILD) {
        // Child: ADDR MODE IMAGE.
        let mut it = spec.splitn(3, ' ');
        let (addr, mode, image) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let mode: i64 = mode.parse().unwrap();
        let rt = client(addr);
        let dev = rt.devices()[0].clone();
        let image = std::fs::read(image).unwrap();
        let e = run(&dev, &image, "last_words", &mode).unwrap_err();
        println!("client: the launch failed: {e}");
        std::process::exit(0);
    }
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let image_path = dir.path().join("hostile.so");
    std::fs::write(&image_path, &image).unwrap();
    let server = serve(&[]);
    for (mode, how) in [
        (0, "exited with status 7"),
        (1, "killed by signal 11 (SIGSEGV)"),
        // (The worker's handler must not change the signal it dies of.)
        (2, "killed by signal 4 (SIGILL)"),
    ] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_dying_kernels_last_output_reaches_the_client",
                "--nocapture",
            ])
            .env(
                CHILD,
                format!("{} {mode} {}", server.addr, image_path.display()),
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let all = format!(
            "mode {mode}: {}\nserver log:\n{}",
            common::text(&out),
            server.log()
        );
        assert!(out.status.success(), "{all}");
        assert!(stdout.contains(how), "{all}");
        assert!(stdout.contains("last words on stdout\n"), "{all}");
        for i in [0, 1000, 1999] {
            assert!(
                stdout.contains(&format!("bulk line {i} of the last words\n")),
                "line {i} lost: {all}"
            );
        }
        assert_eq!(
            stdout.matches(" of the last words\n").count(),
            2000,
            "{all}"
        );
        // exit() flushes C's stdout; a crash loses its unfinished line,
        // as it would in a local process.
        if mode == 0 {
            assert!(stdout.contains("a line without its end"), "{all}");
        }
        // Before the error that reports the end.
        let last = stdout.find("bulk line 1999 of").unwrap();
        let error = stdout.find("client: the launch failed").unwrap();
        assert!(last < error, "the output came after the error: {all}");
        assert!(stderr.contains("last words on stderr\n"), "{all}");
        assert!(!server.log().contains("last words"), "{all}");
    }
}

/// `(pid, parent, state)` of every process.
fn processes() -> Vec<(i64, i64, char)> {
    let mut all = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat
            .rsplit_once(')')
            .map(|(_, r)| r.trim_start().to_string())
        else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        all.push((pid, ppid, state));
    }
    all
}

/// Every process below `root`, with its state.
fn descendants(root: i64) -> Vec<(i64, char)> {
    let all = processes();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid, state) in &all {
            if ppid == p {
                found.push((pid, state));
                frontier.push(pid);
            }
        }
    }
    found
}

/// Orphans of a session's kernels (children of its children) are reaped
/// while the session runs, not left as zombies until it ends; and after
/// many sessions (that forked, exited, crashed or just ended) the server
/// has no zombie and no process but its spare worker's.
#[test]
fn sessions_leave_no_zombies() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let server = serve(&[]);
    let server_pid = server.child.id() as i64;
    for round in 0..6 {
        // Each session in a thread of its own: a thread's default queue
        // holds its session's connection until the thread ends; the
        // session ends with the client's last reference to it.
        let (addr, image) = (server.addr.clone(), image.clone());
        std::thread::spawn(move || session_round(&addr, &image, round))
            .join()
            .unwrap();
    }
    // The sessions are over: their processes go, nothing stays a zombie.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let below = descendants(server_pid);
        let zombies: Vec<_> = below.iter().filter(|(_, s)| *s == 'Z').collect();
        let children = processes()
            .iter()
            .filter(|(_, ppid, _)| *ppid == server_pid)
            .count();
        // The spare (its waiter, the waiter's sandboxed process and its init).
        if zombies.is_empty() && children <= 1 && below.len() <= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 6 sessions: {children} children, zombies {zombies:?}, below the server {below:?}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Session start, side by side (run by hand, release build):
/// `cargo test -p offload-cli --test sandbox --release -- --ignored --nocapture measure_session_start`.
/// Five servers per round, the order reversed every other round:
/// unsandboxed without a spare (the start before the sandbox existed),
/// sandboxed without a spare (each Hello starts and sandboxes a worker),
/// sandboxed with the default spare, unsandboxed with a spare, sandboxed
/// with two spares. Each server
/// gets 9 sessions one after another, either bare (`light`: open, list
/// the devices, close) or after real work (`heavy`: a kernel and 3 x 64
/// MiB each way, so the previous worker's teardown overlaps the next
/// start). Printed: the server's `start_us` (Hello to greeting) of
/// sessions 2-9, sorted, and the client's whole open (connect, Hello,
/// session connection) median. `ROUNDS` (3), `GAP_MS` (pause between two
/// sessions, 50) and `KINDS` (`light,heavy`) change the run.
#[test]
#[ignore]
fn measure_session_start() {
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(default)
    };
    let rounds = env("ROUNDS", 3) as usize;
    // Pause between two sessions (GAP_MS=0: back to back).
    let gap = Duration::from_millis(env("GAP_MS", 50));
    let kinds: Vec<String> = std::env::var("KINDS")
        .unwrap_or_else(|_| "light,heavy".into())
        .split(',')
        .map(str::to_string)
        .collect();
    let modes: [(&str, &[&str]); 5] = [
        (
            "unsandboxed, no spare",
            &["--insecure-no-sandbox", "--spare-workers", "0"],
        ),
        ("sandbox, no spare", &["--spare-workers", "0"]),
        ("sandbox, spare", &[]),
        ("unsandboxed, spare", &["--insecure-no-sandbox"]),
        ("sandbox, 2 spares", &["--spare-workers", "2"]),
    ];
    for kind in kinds.iter().map(String::as_str) {
        for round in 0..rounds {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..modes.len()).collect()
            } else {
                (0..modes.len()).rev().collect()
            };
            for m in order {
                let (name, flags) = modes[m];
                let server = serve(flags);
                let mut opens = Vec::new();
                for _ in 0..9 {
                    // Let the previous session end (and a spare start)
                    // as a client would between two runs.
                    std::thread::sleep(gap);
                    // In a thread of its own: the session ends with it (a
                    // thread's default queue holds its connection).
                    let (addr, image, heavy) =
                        (server.addr.clone(), image.clone(), kind == "heavy");
                    let open = std::thread::spawn(move || {
                        let t = Instant::now();
                        let rt = client(&addr);
                        let dev = rt.devices()[0].clone();
                        let open = t.elapsed().as_secs_f64() * 1e3;
                        if heavy {
                            let out = dev.alloc(8, AllocKind::Device).unwrap();
                            let args = Counted { out: out.0, n: 0 };
                            run(&dev, &image, "bomb", &args).unwrap();
                            let n = 64 << 20;
                            let buf = vec![7u8; n];
                            let mut back = vec![0u8; n];
                            let d = dev.alloc(n, AllocKind::Device).unwrap();
                            for _ in 0..3 {
                                write(&dev, d, &buf).unwrap();
                                read_into(&dev, d, &mut back).unwrap();
                            }
                        }
                        open
                    })
                    .join()
                    .unwrap();
                    opens.push(open);
                }
                // The server logs the last session's start a moment later.
                std::thread::sleep(Duration::from_millis(100));
                let mut starts: Vec<f64> = server
                    .log()
                    .lines()
                    .filter(|l| l.contains("session opened"))
                    .filter_map(|l| l.split("start_us=").nth(1))
                    .filter_map(|v| v.trim().parse::<f64>().ok())
                    .map(|us| us / 1000.0)
                    .skip(1)
                    .collect();
                starts.sort_by(|a, b| a.partial_cmp(b).unwrap());
                opens.sort_by(|a, b| a.partial_cmp(b).unwrap());
                let list: Vec<String> = starts.iter().map(|s| format!("{s:.2}")).collect();
                println!(
                    "{kind} round {round} {name:<22} start_ms median {:6.2} [{}]  client open median {:6.2} ms",
                    starts.get(starts.len() / 2).copied().unwrap_or(f64::NAN),
                    list.join(" "),
                    opens[opens.len() / 2],
                );
            }
        }
    }
}

/// The spare worker waits as long as it takes (here past the 10 s after
/// which the runtime ends idle blocking threads: a worker dies with the
/// thread that started it) and the next session is its; a spare killed
/// while it waits is replaced without a Hello.
#[test]
fn a_spare_worker_waits_for_the_next_session() {
    let server = serve(&[]);
    let server_pid = server.child.id() as i64;
    let children = || -> Vec<i64> {
        processes()
            .iter()
            .filter(|(_, ppid, state)| *ppid == server_pid && *state != 'Z')
            .map(|(pid, _, _)| *pid)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while children().len() != 1 {
        assert!(Instant::now() < deadline, "no spare: {:?}", children());
        std::thread::sleep(Duration::from_millis(50));
    }
    let spare = children()[0];
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(children(), [spare], "the spare is gone: {}", server.log());
    {
        let rt = client(&server.addr);
        rt.devices()[0].alloc(64, AllocKind::Device).unwrap();
        assert_eq!(server.worker_pids(), [spare], "{}", server.log());
    }
    // Its replacement, killed while it waits, is replaced in turn.
    let deadline = Instant::now() + Duration::from_secs(10);
    let replacement = loop {
        let now: Vec<i64> = children().into_iter().filter(|&p| p != spare).collect();
        if now.len() == 1 {
            break now[0];
        }
        assert!(Instant::now() < deadline, "no replacement: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // SAFETY: kill(2) of a process this test's server started.
    assert_eq!(unsafe { libc::kill(replacement as i32, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now: Vec<i64> = children()
            .into_iter()
            .filter(|&p| p != spare && p != replacement)
            .collect();
        if now.len() == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed spare was not replaced: {now:?}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let rt = client(&server.addr);
    rt.devices()[0].alloc(64, AllocKind::Device).unwrap();
}

/// One session of [`sessions_leave_no_zombies`]: orphans, a crash, or a
/// setsid grandchild.
fn session_round(addr: &str, image: &[u8], round: i64) {
    let rt = client(addr);
    let dev = rt.devices()[0].clone();
    let out = dev.alloc(16, AllocKind::Device).unwrap();
    match round % 3 {
        0 => {
            let args = Counted { out: out.0, n: 8 };
            run(&dev, image, "orphans", &args).unwrap();
            let w = read_words(&dev, out, 2);
            assert_eq!(w[0], 0, "zombies in a running session: {w:?}");
            assert!(w[1] >= 1, "{w:?}");
        }
        1 => {
            let mode: i64 = 1;
            assert!(run(&dev, image, "last_words", &mode).is_err());
        }
        _ => {
            let tag = (std::process::id() as i64 * 10 + round) % 100_000_000;
            run(&dev, image, "survivor", &tag).unwrap();
        }
    }
}

/// The uid and gid `offload serve` runs as in
/// [`an_unprivileged_server_sandboxes_sessions_in_user_namespaces`]: `nobody`.
const NOBODY: u32 = 65534;

/// Whether this kernel lets an unprivileged process create user namespaces
/// (the knobs `sandbox::detect` reads).
fn unprivileged_userns_allowed() -> bool {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    read("/proc/sys/user/max_user_namespaces")
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > 0)
        && read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() != Some("0")
        && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() != Some("1")
}

/// `Uid:` (real) of process `pid`.
fn uid_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The server need not be root: run as `nobody` (`setpriv`), it sandboxes
/// each session in a user namespace of its own (with PID, mount, IPC and
/// network namespaces), every capability dropped, and rlimits in place of
/// cgroups. The attacks of `a_kernel_sees_only_its_own_session`,
/// `kernels_cannot_kill_the_server_or_other_sessions`,
/// `a_sessions_processes_end_with_it` and
/// `memory_and_processes_are_bounded_per_session` stay inside the session
/// there too; the server's configured JIT cache (`OFFLOAD_JIT_CACHE`, a
/// folder the server's user owns, outside `/tmp`) is never shared by its
/// sessions: each compiles into its own private `/tmp`. Needs root (to
/// become `nobody`) and unprivileged user namespaces (fails under
/// `CI=true` without them).
#[test]
fn an_unprivileged_server_sandboxes_sessions_in_user_namespaces() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !ready() {
        return;
    }
    if !unprivileged_userns_allowed() {
        return skip("the kernel allows no unprivileged user namespaces");
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        return skip("setpriv (util-linux) not found");
    }
    let dir = tempfile::tempdir().unwrap();
    let image = hostile_so(dir.path());
    let bitcode_path = dir.path().join("hostile.bc");
    let ok = Command::new("clang-22")
        .args(["-O1", "-fPIC", "-c", "-emit-llvm", "-I"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include"))
        .arg("-o")
        .arg(&bitcode_path)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sandbox/hostile.c"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "clang-22 -emit-llvm failed on hostile.c");
    // Bare bitcode names no triple: packed with one, as clang packs it.
    let packed_path = dir.path().join("hostile-bc.offload");
    let out = Command::new(env!("CARGO_BIN_EXE_offload"))
        .args(["pack", "-o"])
        .arg(&packed_path)
        .arg("--image")
        .arg(format!(
            "{},triple=x86_64-unknown-linux-gnu,kind=openmp",
            bitcode_path.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out));
    let bitcode = std::fs::read(&packed_path).unwrap();
    // The server's JIT cache: outside /tmp (a session's /tmp is its own),
    // owned by the server's user, mode 0700: usable by the server's user.
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("userns-jit-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    // The server user's home and its token file.
    let forbidden = Forbidden::new("nobody", NOBODY, false);
    let token_file = forbidden.token_file.to_str().unwrap().to_string();
    let reuid = format!("--reuid={NOBODY}");
    let regid = format!("--regid={NOBODY}");
    let mut server = Server::start_wrapped(
        &["setpriv", &reuid, &regid, "--clear-groups", "--"],
        Some(TOKEN),
        &[
            "--max-session-memory",
            &(64u64 << 20).to_string(),
            "--max-session-processes",
            "64",
            "--session-idle-timeout",
            "6",
            "--token-file",
            &token_file,
        ],
        1,
        &[("OFFLOAD_JIT_CACHE", &cache)],
    );
    let log = server.log();
    assert!(
        log.contains("session sandbox on: user/PID/mount/IPC/network namespaces"),
        "{log}"
    );
    let server_pid = server.child.id();
    assert_eq!(uid_of(server_pid), Some(NOBODY), "{log}");
    // The supervisor is not dumpable: its /proc files belong to root, not
    // to its own user (so no process of that user reads its memory).
    let mem = std::fs::metadata(format!("/proc/{server_pid}/mem")).unwrap();
    assert_eq!(mem.uid(), 0, "the supervisor is dumpable");

    let victim = client(&server.addr);
    let vdev = victim.devices()[0].clone();
    let vout = vdev.alloc(17 * 8, AllocKind::Device).unwrap();
    let attacker = client(&server.addr);
    let dev = attacker.devices()[0].clone();
    let pids = server.worker_pids();
    assert_eq!(pids.len(), 2, "{}", server.log());
    let tag = std::process::id() as i64 * 2 + 1_000_000_000;
    let vprobe = Probe {
        out: vout.0,
        sibling: pids[1],
        tag: tag + 1,
    };
    run(&vdev, &image, "probe", &vprobe).unwrap();
    let out = dev.alloc(17 * 8, AllocKind::Device).unwrap();
    let probe = Probe {
        out: out.0,
        sibling: pids[0],
        tag,
    };
    run(&dev, &image, "probe", &probe).unwrap();
    let w = read_words(&dev, out, 17);
    assert!(w[0] >= 2 && w[0] <= 5, "processes visible in /proc: {w:?}");
    assert_eq!(w[1], libc::ENOENT as i64, "/proc/<sibling>/mem: {w:?}");
    assert_eq!(w[2], libc::ESRCH as i64, "kill(sibling, 0): {w:?}");
    assert_eq!(w[3], 1, "the parent is the session's init: {w:?}");
    assert_eq!(w[4], libc::EPERM as i64, "pidfd_open: {w:?}");
    assert_eq!(w[5], libc::EPERM as i64, "ptrace: {w:?}");
    assert_eq!(w[6], libc::EPERM as i64, "process_vm_readv: {w:?}");
    assert_eq!(w[8], 0, "its own /tmp is writable: {w:?}");
    assert_eq!(w[9], 0, "its own /dev/shm is writable: {w:?}");
    assert_eq!(w[10], 0, "OFFLOAD_REMOTE_TOKEN reached the kernel");
    assert_eq!(w[12], libc::EPERM as i64, "unshare: {w:?}");
    assert_eq!(w[13], libc::EPERM as i64, "mount: {w:?}");
    assert_eq!(w[14], 0, "saw the other session's /tmp file");
    assert_eq!(w[15], libc::EPERM as i64, "pidfd_getfd: {w:?}");
    assert!(w[16] <= 64, "descriptors up to {} are open", w[16]);
    for t in [tag, tag + 1] {
        assert!(!Path::new(&format!("/tmp/offload-sandbox-{t}")).exists());
        assert!(!Path::new(&format!("/dev/shm/offload-sandbox-{t}")).exists());
    }

    // The files of the server's user are out of reach.
    forbidden.check(&dev, &image, &server.log());

    // Root of its own namespace only: no capability, and uid 0 there is
    // the server's unprivileged uid outside.
    let who = dev.alloc(5 * 8, AllocKind::Device).unwrap();
    run(&dev, &image, "whoami", &who.0).unwrap();
    let w = read_words(&dev, who, 5);
    assert_eq!(w[2], 0, "capabilities left in the session: {w:?}");
    assert_eq!(
        w[3], NOBODY as i64,
        "uid 0 inside maps to {} outside: {w:?}",
        w[3]
    );
    assert_eq!(
        w[4], 0,
        "the session sees the initial user namespace: {w:?}"
    );

    // Killing the server or the other session's worker reaches no one.
    let _ = run(&dev, &image, "killer", &pids[0]);
    let _ = run(&dev, &image, "killer", &(server_pid as i64));
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.alive(), "the server died: {}", server.log());
    assert_eq!(
        read_words(&vdev, vout, 17)[8],
        0,
        "the victim's session changed"
    );

    // Memory (rlimits: the quota plus the worker's address-space
    // allowance) and processes (RLIMIT_NPROC, counted in the session's own
    // user namespace) are bounded.
    let counted = dev.alloc(8, AllocKind::Device).unwrap();
    let small = Counted {
        out: counted.0,
        n: 16 << 20,
    };
    run(&dev, &image, "hog", &small).unwrap();
    assert_eq!(read_words(&dev, counted, 1)[0], 2, "16 MiB were refused");
    let huge = Counted {
        out: counted.0,
        n: 8 << 30,
    };
    dev.fill(counted, &[0], 8).unwrap();
    match run(&dev, &image, "hog", &huge) {
        Ok(()) => assert_eq!(read_words(&dev, counted, 1)[0], 1, "8 GiB were granted"),
        Err(e) => assert!(e.message().contains("signal"), "{e}"),
    }

    // A bitcode image is compiled by the session's worker; its cache is
    // the session's own, never the server's folder.
    let program = dev.load_program(&bitcode).unwrap();
    program.kernel("whoami").unwrap();
    let mut entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    entries.sort();
    assert!(
        entries.is_empty(),
        "a session wrote into the server's JIT cache (shared by every session): {entries:?}"
    );

    // A setsid grandchild ends with its session (closed by its client, or
    // else by the idle timeout).
    let surv = (std::process::id() as i64 + 7) % 100_000_000;
    run(&dev, &image, "survivor", &surv).unwrap();
    let name = format!("ofsurv{surv}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while processes_named(&name) == 0 {
        assert!(Instant::now() < deadline, "the survivor never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // (Last: the bomb's children hold every process slot of the session.)
    let bomb = Counted {
        out: counted.0,
        n: 1000,
    };
    run(&dev, &image, "bomb", &bomb).unwrap();
    let forks = read_words(&dev, counted, 1)[0];
    assert!(forks < 64, "{forks} forks with --max-session-processes 64");

    drop((program, dev, attacker));
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_named(&name) > 0 {
        assert!(
            Instant::now() < deadline,
            "a kernel's process outlived its session: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop((vdev, victim));
    drop(server);
    let _ = std::fs::remove_dir_all(&cache);
}
