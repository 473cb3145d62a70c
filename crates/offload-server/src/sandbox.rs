//! The session sandbox: what a session's worker process may see and do.
//!
//! A client's kernels are native code running in its session's worker, so
//! the worker is shut in with the kernel's own mechanisms before it reads a
//! single byte from the client (see `docs/remote-sandbox.md`):
//!
//! * **namespaces** — a new PID namespace (the worker is its init: other
//!   sessions and the supervisor have no pid it could name; when it dies the
//!   kernel kills every process it left), mount namespace (a fresh `/proc`
//!   showing only the session's processes; private size-capped tmpfs on
//!   `/tmp` and `/dev/shm`), IPC namespace (no System V objects of others)
//!   and network namespace (no network at all: the worker gets its client
//!   sockets from the supervisor over its control socket);
//! * **identity** — as root, a dedicated unprivileged uid/gid per session
//!   from a configured range (no capabilities, no supplementary groups);
//!   otherwise a user namespace whose only uid is the server's, with every
//!   capability dropped. Kernels never run as root;
//! * **limits** — a cgroup (v1 `memory` and `pids`, when writable) or
//!   rlimits (`RLIMIT_AS`/`RLIMIT_DATA`) bound all of the session's memory;
//!   `pids.max` and `RLIMIT_NPROC` (per uid: the uid is the session's own)
//!   bound its processes and threads; no core dumps;
//! * **seccomp** — ptrace, `process_vm_*`, `pidfd_*`, `kcmp`, mounts,
//!   namespaces (`unshare`, `setns`, `clone` with namespace flags), bpf,
//!   keyrings, perf, modules, kexec, io_uring and the like fail with EPERM
//!   (`clone3` with ENOSYS, so libc falls back to `clone`, which is checked);
//! * **files** — a Landlock ruleset ([`files`]): read and execute on the
//!   system hierarchies, read on `/proc` and `/sys`, read and write on the
//!   session's `/tmp`, `/dev/shm` and device nodes, read on each
//!   `--sandbox-read PATH`; nothing else (the server user's home, its
//!   token file, the project) can be opened;
//! * **hygiene** — every inherited descriptor but its own closed, not
//!   dumpable, `no_new_privs`, its own session and process group, and an
//!   environment that holds no secret (emptied once the runtime is up).
//!
//! The supervisor's child is a small *waiter* outside the namespaces: it
//! creates the cgroups, forks the worker into the new PID namespace, mirrors
//! its exit status and removes the cgroups once every process of the session
//! is gone.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

pub mod files;

/// Environment variable carrying a worker's [`Plan`] (set by the supervisor,
/// read and removed by the worker before it talks to anyone).
pub const PLAN_ENV: &str = "OFFLOAD_WORKER_SANDBOX";

/// Memory a worker needs for itself (its runtime, threads, device contexts)
/// on top of `--max-session-memory` when a cgroup bounds the session.
pub const WORKER_ALLOWANCE: u64 = 128 << 20;
/// The same for `RLIMIT_AS`, which counts address space reserved but never
/// touched (thread stacks, malloc arenas): much more generous.
pub const WORKER_AS_ALLOWANCE: u64 = 4 << 30;

/// How a server sandboxes its sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `--insecure-no-sandbox`, or no mechanism available.
    Off,
    /// The server runs as root: each session gets its own uid/gid.
    Root,
    /// Not root: a user namespace per session.
    UserNs,
}

/// Sandbox settings of a server (`offload serve --sandbox-*`).
#[derive(Clone, Debug)]
pub struct SandboxOptions {
    /// `--insecure-no-sandbox`: run workers without a sandbox.
    pub disabled: bool,
    /// First uid (and gid) of the range sessions run as when the server is root.
    pub uid_base: u32,
    /// How many uids the range holds (at most that many sessions at once).
    pub uid_count: u32,
    /// Processes and threads one session may have (`pids.max`, `RLIMIT_NPROC`).
    pub max_processes: u64,
    /// Size of each of a session's private `/tmp` and `/dev/shm`.
    pub tmp_bytes: u64,
    /// `--sandbox-read PATH`: more hierarchies sessions may read (and
    /// execute from), e.g. shared libraries device images need.
    pub read_paths: Vec<PathBuf>,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            disabled: false,
            uid_base: 2_100_000_000,
            uid_count: 65_536,
            max_processes: 512,
            tmp_bytes: 64 << 20,
            read_paths: Vec::new(),
        }
    }
}

/// The mode this process can sandbox its workers in.
pub fn detect(options: &SandboxOptions) -> Mode {
    if options.disabled {
        return Mode::Off;
    }
    if nix::unistd::geteuid().is_root() {
        return Mode::Root;
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let max_ns = read("/proc/sys/user/max_user_namespaces").and_then(|v| v.parse::<u64>().ok());
    let debian_knob = read("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor_knob = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    if max_ns.unwrap_or(0) > 0
        && debian_knob.as_deref() != Some("0")
        && apparmor_knob.as_deref() != Some("1")
    {
        Mode::UserNs
    } else {
        Mode::Off
    }
}

/// Whether sessions get the Landlock file system ruleset: in every
/// sandboxed mode, where the kernel has Landlock.
pub fn landlock_available() -> bool {
    files::kernel_abi().is_some()
}

/// The start line's words on the file system ruleset.
fn describe_files() -> String {
    match files::kernel_abi() {
        Some(abi) => format!(
            "Landlock ABI {abi} (files: system dirs, /proc, /sys, devices, --sandbox-read only)"
        ),
        None => {
            "NO Landlock in this kernel: sessions can open every file their uid can".to_string()
        }
    }
}

/// One line for the server's start saying how sessions are sandboxed.
pub fn describe(mode: Mode, options: &SandboxOptions) -> String {
    match mode {
        Mode::Off if options.disabled => "offload serve: session sandbox OFF (--insecure-no-sandbox): kernels run as the server's user and can reach other sessions and the server".to_string(),
        Mode::Off => "offload serve: session sandbox OFF (not root and no user namespaces): loopback clients only".to_string(),
        Mode::Root => format!(
            "offload serve: session sandbox on: PID/mount/IPC/network namespaces, uid {}..{}, seccomp, cgroup or rlimits, private /tmp and /dev/shm, {}",
            options.uid_base,
            options.uid_base as u64 + options.uid_count as u64 - 1,
            describe_files()
        ),
        Mode::UserNs => format!("offload serve: session sandbox on: user/PID/mount/IPC/network namespaces, no capabilities, seccomp, rlimits, private /tmp and /dev/shm, {}", describe_files()),
    }
}

/// The uids of the range that live sessions use.
pub(crate) struct UidPool {
    base: u32,
    count: u32,
    used: Mutex<BTreeSet<u32>>,
}

impl UidPool {
    pub fn new(options: &SandboxOptions) -> Self {
        UidPool {
            base: options.uid_base,
            count: options.uid_count.max(1),
            used: Mutex::new(BTreeSet::new()),
        }
    }

    /// The lowest free uid of the range, now taken.
    pub fn take(&self) -> Option<u32> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let uid = (0..self.count)
            .map(|i| self.base.saturating_add(i))
            .find(|u| !used.contains(u) && *u != 0 && *u != u32::MAX)?;
        used.insert(uid);
        Some(uid)
    }

    /// Give `uid` back (every process of its session is gone).
    pub fn put(&self, uid: u32) {
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uid);
    }
}

/// What one worker sets up (passed in [`PLAN_ENV`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub mode: Mode,
    /// Uid and gid (mode Root).
    pub uid: u32,
    /// All the session's memory, bytes (0 = unbounded).
    pub memory: u64,
    pub max_processes: u64,
    pub tmp_bytes: u64,
    /// Apply the Landlock file system ruleset ([`files`]).
    pub landlock: bool,
    /// `--sandbox-read` paths.
    pub read: Vec<PathBuf>,
}

/// A path as hex digits (a plan is one comma-separated line; paths may
/// hold any byte but NUL).
fn hex_of(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn path_of_hex(hex: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    if hex.is_empty() || !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    (!bytes.contains(&0)).then(|| PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

impl Plan {
    pub fn encode(&self) -> String {
        let mode = match self.mode {
            Mode::Off => "off",
            Mode::Root => "root",
            Mode::UserNs => "userns",
        };
        let mut line = format!(
            "mode={mode},uid={},memory={},processes={},tmp={},landlock={}",
            self.uid,
            self.memory,
            self.max_processes,
            self.tmp_bytes,
            u8::from(self.landlock)
        );
        for p in &self.read {
            line.push_str(",read=");
            line.push_str(&hex_of(p));
        }
        line
    }

    pub fn decode(s: &str) -> Result<Plan, String> {
        let mut plan = Plan {
            mode: Mode::Off,
            uid: 0,
            memory: 0,
            max_processes: 0,
            tmp_bytes: 0,
            landlock: false,
            read: Vec::new(),
        };
        for kv in s.split(',') {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad sandbox plan {s:?}"))?;
            let num = || {
                v.parse::<u64>()
                    .map_err(|_| format!("bad sandbox plan value {kv:?}"))
            };
            match k {
                "mode" => {
                    plan.mode = match v {
                        "off" => Mode::Off,
                        "root" => Mode::Root,
                        "userns" => Mode::UserNs,
                        _ => return Err(format!("bad sandbox mode {v:?}")),
                    }
                }
                "uid" => plan.uid = u32::try_from(num()?).map_err(|_| "bad uid".to_string())?,
                "memory" => plan.memory = num()?,
                "processes" => plan.max_processes = num()?,
                "tmp" => plan.tmp_bytes = num()?,
                "landlock" => plan.landlock = num()? != 0,
                "read" => plan
                    .read
                    .push(path_of_hex(v).ok_or_else(|| format!("bad sandbox plan path {v:?}"))?),
                _ => return Err(format!("unknown sandbox plan key {k:?}")),
            }
        }
        if plan.mode == Mode::Root && plan.uid == 0 {
            return Err("a sandbox plan never runs a session as root".into());
        }
        Ok(plan)
    }
}

/// Names of the environment a worker is started with: the server's own
/// `OFFLOAD_*` configuration and the GPU runtimes' (which GPUs, the HSA
/// runtime's `HSA_*` settings such as `HSA_XNACK`, which decide what code
/// the GPUs run; not `HSA_TOOLS_*`, which would load profiler libraries
/// into the process that runs clients' kernels), never a credential.
pub fn passes_to_worker(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let secret = upper.contains("TOKEN") || upper.contains("SECRET") || upper.contains("KEY");
    !secret
        && (name.starts_with("OFFLOAD_") && !name.starts_with("OFFLOAD_REMOTE")
            || name.starts_with("HSA_") && !name.starts_with("HSA_TOOLS_")
            || matches!(
                name,
                "PATH" | "LD_LIBRARY_PATH" | "CUDA_VISIBLE_DEVICES" | "ROCR_VISIBLE_DEVICES"
            ))
}

/// Remove every environment variable of this process that
/// [`passes_to_worker`] would not pass (the worker, once its
/// runtime is up and before it serves anyone): a kernel's `getenv` finds
/// nothing.
pub fn clear_environment() {
    // PATH (the JIT's compiler finds its linker with it), the server's
    // OFFLOAD_* configuration (read lazily, e.g. the JIT cache; the
    // supervisor passed no credential) and the GPU runtimes' settings
    // stay: nothing secret.
    let names: Vec<_> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| k.to_str().is_none_or(|k| !passes_to_worker(k)))
        .collect();
    for name in names {
        std::env::remove_var(name);
    }
}

/// The worker's first step: enter the sandbox its [`PLAN_ENV`] describes
/// (nothing when absent or `mode=off`). Must run while the process has one
/// thread. Returns, in the sandboxed worker, a line saying which layers are
/// on; the process the supervisor started stays outside as the waiter and
/// never returns from here.
pub fn enter_from_env() -> Result<String, String> {
    let Some(raw) = std::env::var_os(PLAN_ENV) else {
        return Ok("no sandbox".into());
    };
    std::env::remove_var(PLAN_ENV);
    let plan = Plan::decode(&raw.to_string_lossy())?;
    if plan.mode == Mode::Off {
        return Ok("no sandbox (--insecure-no-sandbox)".into());
    }
    let entered = linux::enter(&plan)?;
    // Still one thread. The server's JIT cache (`OFFLOAD_JIT_CACHE`, or
    // its user's `~/.cache`) would be one folder every session writes:
    // an entry one session planted would run in another's. Each session
    // compiles into a cache of its own, in its private `/tmp` (gone with
    // the session).
    std::env::set_var(JIT_CACHE_ENV, SESSION_JIT_CACHE);
    Ok(entered)
}

/// The variable naming the JIT cache folder (read by `offload_core::jit`).
const JIT_CACHE_ENV: &str = "OFFLOAD_JIT_CACHE";
/// A sandboxed session's JIT cache: in its own `/tmp`.
pub const SESSION_JIT_CACHE: &str = "/tmp/offload-jit";

mod linux {
    use super::{Mode, Plan};
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    use nix::sys::resource::{setrlimit, Resource};
    use nix::sys::signal::Signal;
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{ForkResult, Gid, Pid, Uid};
    use std::os::fd::AsRawFd;
    use std::path::{Path, PathBuf};

    fn err(what: &str) -> impl Fn(nix::Error) -> String + '_ {
        move |e| format!("sandbox: {what}: {e}")
    }

    /// The session's cgroups (v1 `memory` and `pids`, under this process's own).
    struct Cgroups {
        dirs: Vec<PathBuf>,
    }

    impl Cgroups {
        /// Create them with the plan's limits; None where the hierarchy is
        /// missing or not writable (rlimits then).
        fn create(plan: &Plan) -> Option<Cgroups> {
            let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let path_of = |controller: &str| {
                own.lines().find_map(|l| {
                    let mut parts = l.splitn(3, ':');
                    let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
                    ctrls
                        .split(',')
                        .any(|c| c == controller)
                        .then(|| path.to_string())
                })
            };
            let name = format!("offload-session-{}", std::process::id());
            let mut made = Cgroups { dirs: Vec::new() };
            for (controller, file, value) in [
                ("memory", "memory.limit_in_bytes", plan.memory),
                ("pids", "pids.max", plan.max_processes),
            ] {
                let rel = path_of(controller)?;
                let dir = Path::new("/sys/fs/cgroup")
                    .join(controller)
                    .join(rel.trim_start_matches('/'))
                    .join(&name);
                if let Some(parent) = dir.parent() {
                    sweep(parent);
                }
                std::fs::create_dir(&dir).ok()?;
                made.dirs.push(dir.clone());
                if value > 0 {
                    std::fs::write(dir.join(file), value.to_string()).ok()?;
                }
                if controller == "memory" && value > 0 {
                    // Swap counts too where the kernel accounts it.
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        let _ = std::fs::write(memsw, value.to_string());
                    }
                }
            }
            Some(made)
        }

        /// Move the calling process in (its children are born there:
        /// memory a process touched before moving stays charged where it was).
        fn join(&self) -> Result<(), String> {
            let file = membership_file();
            for d in &self.dirs {
                std::fs::write(d.join(file), "0")
                    .map_err(|e| format!("sandbox: joining {}: {e}", d.display()))?;
            }
            Ok(())
        }

        /// Move the calling process back to where it came from.
        fn leave(&self) {
            let file = membership_file();
            for d in &self.dirs {
                if let Some(parent) = d.parent() {
                    let _ = std::fs::write(parent.join(file), "0");
                }
            }
        }

        /// Remove them (every process of the session is gone).
        fn remove(&self) {
            for d in &self.dirs {
                for _ in 0..50 {
                    if std::fs::remove_dir(d).is_ok() || !d.exists() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }

    /// The cgroup v1 file that moves the calling process: `tasks` (this
    /// thread) when it has one thread, as here, else `cgroup.procs`. Writing
    /// `cgroup.procs` takes the kernel's cgroup-wide threadgroup lock for
    /// writing, which waits for an RCU grace period (about 10 ms on the
    /// project's VMs: most of a sandboxed start); moving the calling thread
    /// through `tasks` does not take it.
    fn membership_file() -> &'static str {
        let threads = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|n| n.trim().parse::<u32>().ok())
            });
        if threads == Some(1) {
            "tasks"
        } else {
            "cgroup.procs"
        }
    }

    /// Remove the session cgroups of waiters that are gone (killed with a
    /// server that was killed): empty ones only, never a live session's.
    fn sweep(parent: &Path) {
        let Ok(entries) = std::fs::read_dir(parent) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("offload-session-"))
            else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }

    impl Drop for Cgroups {
        fn drop(&mut self) {
            self.remove();
        }
    }

    pub(super) fn enter(plan: &Plan) -> Result<String, String> {
        let mut flags = CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWNET;
        let (uid, gid) = (Uid::current(), Gid::current());
        if plan.mode == Mode::UserNs {
            flags |= CloneFlags::CLONE_NEWUSER;
        }
        let cgroups = if plan.mode == Mode::Root {
            Cgroups::create(plan)
        } else {
            None
        };
        if let Some(c) = &cgroups {
            c.join()?;
        }
        unshare(flags).map_err(err("unshare"))?;
        if plan.mode == Mode::UserNs {
            let write = |f: &str, v: String| {
                std::fs::write(f, v).map_err(|e| format!("sandbox: writing {f}: {e}"))
            };
            write("/proc/self/setgroups", "deny".into())?;
            write("/proc/self/uid_map", format!("0 {uid} 1"))?;
            write("/proc/self/gid_map", format!("0 {gid} 1"))?;
        }
        // Tells the worker when its waiter is gone (it may die before the
        // worker asks to die with it).
        let (alive_r, alive_w) = nix::unistd::pipe().map_err(err("pipe"))?;
        // The session's init tells the waiter how the worker ended.
        let (status_r, status_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(err("pipe"))?;
        // SAFETY: the worker has one thread until the sandbox is entered
        // (called first thing by `worker::run`), so the child may run
        // arbitrary code.
        match unsafe { nix::unistd::fork() }.map_err(err("fork"))? {
            ForkResult::Parent { child } => {
                drop((alive_r, status_w));
                if let Some(c) = &cgroups {
                    c.leave();
                }
                // The control socket is the worker's alone.
                let _ = nix::unistd::close(3);
                wait_and_mirror(child, cgroups, alive_w, status_r)
            }
            ForkResult::Child => {
                drop((alive_w, status_r));
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(err("pdeathsig"))?;
                let mut fds = [nix::poll::PollFd::new(
                    std::os::fd::AsFd::as_fd(&alive_r),
                    nix::poll::PollFlags::POLLIN,
                )];
                if nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap_or(0) > 0 {
                    std::process::exit(1);
                }
                drop(alive_r);
                let memory = match cgroups {
                    Some(c) => {
                        // The waiter removes them.
                        std::mem::forget(c);
                        "cgroup v1 memory+pids"
                    }
                    None => "rlimits",
                };
                // This process is the session's init (pid 1): it makes the
                // session's world, then runs the worker as its child and
                // reaps every process the session orphans.
                world(plan)?;
                // SAFETY: still one thread (see above).
                match unsafe { nix::unistd::fork() }.map_err(err("fork"))? {
                    ForkResult::Parent { child } => init(plan, child, status_w),
                    ForkResult::Child => drop(status_w),
                }
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(err("pdeathsig"))?;
                let files = confine(plan, memory == "rlimits")?;
                Ok(format!(
                    "sandbox: {} pid/mount/ipc/net namespaces, uid {}, limits by {memory}, seccomp, private /tmp and /dev/shm, files: {files}",
                    if plan.mode == Mode::UserNs { "user," } else { "" },
                    if plan.mode == Mode::Root { plan.uid.to_string() } else { format!("{uid} (user namespace)") },
                ))
            }
        }
    }

    /// The waiter: wait for the worker (init of the session's PID namespace:
    /// when it is reaped every process of the session is gone), remove the
    /// cgroups and end the same way.
    fn wait_and_mirror(
        child: Pid,
        cgroups: Option<Cgroups>,
        alive: std::os::fd::OwnedFd,
        worker_end: std::os::fd::OwnedFd,
    ) -> ! {
        // Signals meant for the session (a terminal's ^C) are not ours to die of.
        for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            // SAFETY: SIG_IGN installs no handler code.
            unsafe {
                let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn);
            }
        }
        let status = loop {
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, code)) => break Ok(code),
                Ok(WaitStatus::Signaled(_, sig, _)) => break Err(sig),
                Ok(_) => continue,
                Err(nix::Error::EINTR) => continue,
                Err(_) => break Ok(70),
            }
        };
        // The worker's own end, as its init saw it (none when the init
        // itself was killed: the OOM killer, the supervisor).
        let mut word = [0u8; 8];
        let mut got = 0;
        let mut status_pipe = std::fs::File::from(worker_end);
        while got < word.len() {
            match std::io::Read::read(&mut status_pipe, &mut word[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let status = if got == word.len() {
            decode_end(word).unwrap_or(status)
        } else {
            status
        };
        drop(cgroups);
        drop(alive);
        match status {
            Ok(code) => std::process::exit(code),
            Err(sig) => {
                // SAFETY: restoring the default action installs no code.
                unsafe {
                    let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl);
                }
                let _ = nix::sys::signal::raise(sig);
                let _ = nix::sys::signal::kill(Pid::this(), Signal::SIGKILL);
                std::process::exit(128 + sig as i32)
            }
        }
    }

    /// How a process ended, as the init writes it for the waiter: exit
    /// code or signal.
    fn encode_end(end: Result<i32, Signal>) -> [u8; 8] {
        let (kind, value) = match end {
            Ok(code) => (0i32, code),
            Err(sig) => (1, sig as i32),
        };
        let mut w = [0u8; 8];
        w[..4].copy_from_slice(&kind.to_le_bytes());
        w[4..].copy_from_slice(&value.to_le_bytes());
        w
    }

    fn decode_end(w: [u8; 8]) -> Option<Result<i32, Signal>> {
        let kind = i32::from_le_bytes(w[..4].try_into().ok()?);
        let value = i32::from_le_bytes(w[4..].try_into().ok()?);
        match kind {
            0 => Some(Ok(value)),
            1 => Signal::try_from(value).ok().map(Err),
            _ => None,
        }
    }

    /// The session's init (pid 1 of its namespace): holds nothing but the
    /// pipe to the waiter, runs as the session's uid, reaps every process
    /// of the session that ends (orphans are re-parented to it), and once
    /// the worker has ended tells the waiter how and exits, which ends
    /// every process left in the session.
    fn init(plan: &Plan, worker: Pid, status: std::os::fd::OwnedFd) -> ! {
        for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            // SAFETY: SIG_IGN installs no handler code.
            unsafe {
                let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn);
            }
        }
        let keep = status.as_raw_fd() as u32;
        // SAFETY: close_range(2) takes no pointers; every descriptor but the
        // status pipe's is the worker's (this process reads or writes
        // nothing else; `status` is not closed).
        unsafe {
            if keep > 0 {
                libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32);
            }
            libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
        }
        // As unprivileged as the worker; failing that, it only waits.
        let _ = identity(plan);
        let _ = nix::sys::prctl::set_dumpable(false);
        let _ = nix::sys::prctl::set_no_new_privs();
        let end = loop {
            match waitpid(None::<Pid>, None) {
                Ok(WaitStatus::Exited(pid, code)) if pid == worker => break Ok(code),
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == worker => break Err(sig),
                Ok(_) | Err(nix::Error::EINTR) => continue,
                Err(_) => break Ok(70),
            }
        };
        let _ = nix::unistd::write(&status, &encode_end(end));
        // Nothing registered to run at exit in this process.
        std::process::exit(0)
    }

    /// As the session's init, still privileged: the session's world (its
    /// mounts) for it and the worker.
    fn world(plan: &Plan) -> Result<(), String> {
        // Mounts made here stay here.
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(err("making / private"))?;
        let tmpfs = |target: &str| {
            let data = format!("size={},mode=1777", plan.tmp_bytes.max(1 << 20));
            mount(
                Some("tmpfs"),
                target,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(data.as_str()),
            )
            .map_err(|e| format!("sandbox: private {target}: {e}"))
        };
        tmpfs("/tmp")?;
        if Path::new("/dev/shm").is_dir() {
            tmpfs("/dev/shm")?;
        }
        // A /proc of this PID namespace: only the session's processes.
        mount(
            Some("proc"),
            "/proc",
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(err("mounting /proc"))?;
        let _ = nix::unistd::chdir("/");
        Ok(())
    }

    /// The worker, in the session's world: limits, then give up every
    /// privilege. Returns what confines its file system access.
    fn confine(plan: &Plan, rlimit_memory: bool) -> Result<String, String> {
        nix::unistd::setsid().map_err(err("setsid"))?;
        // Limits.
        let set = |r: Resource, v: u64| {
            setrlimit(r, v, v).map_err(|e| format!("sandbox: setrlimit {r:?}: {e}"))
        };
        set(Resource::RLIMIT_CORE, 0)?;
        if plan.max_processes > 0 {
            set(Resource::RLIMIT_NPROC, plan.max_processes)?;
        }
        if rlimit_memory && plan.memory > 0 {
            let bytes = plan.memory.saturating_add(super::WORKER_AS_ALLOWANCE);
            set(Resource::RLIMIT_AS, bytes)?;
            set(Resource::RLIMIT_DATA, bytes)?;
        }
        // Only the standard streams and the control socket stay open.
        // SAFETY: close_range(2) takes no pointers, and closing 4 and up
        // takes no descriptor from a live owner: `alive_r` is dropped in
        // `enter`, `Cgroups` holds paths only, and `worker::run` enters the
        // sandbox before it opens anything (fd 3, the control socket, stays).
        unsafe {
            libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
        }
        // The file system ruleset, built while every allowed path can
        // still be opened (a `--sandbox-read` path the session uid cannot
        // search to is then simply unreadable, not an error).
        let ruleset = if plan.landlock {
            Some(super::files::prepare(&plan.read)?)
        } else {
            None
        };
        identity(plan)?;
        nix::sys::prctl::set_dumpable(false).map_err(err("dumpable"))?;
        nix::sys::prctl::set_no_new_privs().map_err(err("no_new_privs"))?;
        // Still one thread: Landlock restricts the calling thread and what
        // it starts afterwards, which is all of the worker.
        let files = match ruleset {
            Some(r) => r.apply()?,
            None => "uid only (no Landlock)".to_string(),
        };
        // The worker dies with its init (cleared by the uid change).
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(err("pdeathsig"))?;
        super::seccomp::apply()?;
        Ok(files)
    }

    /// The session's uid (root mode) or no capability (user namespace).
    fn identity(plan: &Plan) -> Result<(), String> {
        match plan.mode {
            Mode::Root => {
                let (u, g) = (Uid::from_raw(plan.uid), Gid::from_raw(plan.uid));
                nix::unistd::setgroups(&[]).map_err(err("setgroups"))?;
                nix::unistd::setresgid(g, g, g).map_err(err("setresgid"))?;
                nix::unistd::setresuid(u, u, u).map_err(err("setresuid"))?;
                if nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
                    return Err("sandbox: could regain root after dropping it".into());
                }
            }
            Mode::UserNs => drop_capabilities()?,
            Mode::Off => {}
        }
        Ok(())
    }

    /// Empty every capability set (user namespace mode: uid 0 inside).
    fn drop_capabilities() -> Result<(), String> {
        for cap in 0..64 {
            // SAFETY: prctl with integer arguments; EINVAL past the last cap.
            let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
            if r != 0 && cap < 41 {
                return Err(format!(
                    "sandbox: dropping capability {cap}: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut header = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        // SAFETY: capset reads one header and two data records, both live.
        let r = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
        if r != 0 {
            return Err(format!(
                "sandbox: capset: {}",
                std::io::Error::last_os_error()
            ));
        }
        let _ = std::io::stderr().as_raw_fd();
        Ok(())
    }
}

pub(crate) mod seccomp {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;

    /// System calls a session never needs and an attacker would.
    pub const DENIED: &[i64] = &[
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_pidfd_open,
        libc::SYS_pidfd_send_signal,
        libc::SYS_kcmp,
        libc::SYS_process_madvise,
        libc::SYS_move_pages,
        libc::SYS_migrate_pages,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_syslog,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_vhangup,
        libc::SYS_lookup_dcookie,
        libc::SYS_fanotify_init,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_uselib,
        libc::SYS_personality,
    ];

    /// `clone` flags that would make new namespaces.
    const NAMESPACE_FLAGS: &[u64] = &[
        libc::CLONE_NEWNS as u64,
        libc::CLONE_NEWUTS as u64,
        libc::CLONE_NEWIPC as u64,
        libc::CLONE_NEWUSER as u64,
        libc::CLONE_NEWPID as u64,
        libc::CLONE_NEWNET as u64,
        libc::CLONE_NEWCGROUP as u64,
        0x80, // CLONE_NEWTIME
    ];

    fn arch() -> Result<TargetArch, String> {
        TargetArch::try_from(std::env::consts::ARCH)
            .map_err(|e| format!("sandbox: seccomp on {}: {e:?}", std::env::consts::ARCH))
    }

    /// The filters: EPERM for [`DENIED`] and namespace-making `clone`;
    /// ENOSYS for `clone3` (its flags are out of a filter's reach).
    pub fn programs() -> Result<Vec<BpfProgram>, String> {
        let e = |e: seccompiler::BackendError| format!("sandbox: seccomp filter: {e}");
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
        let clone_rules = NAMESPACE_FLAGS
            .iter()
            .map(|&flag| {
                SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(flag),
                    flag,
                )
                .and_then(|c| SeccompRule::new(vec![c]))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(e)?;
        rules.insert(libc::SYS_clone, clone_rules);
        let deny = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch()?,
        )
        .map_err(e)?;
        let clone3 = SeccompFilter::new(
            [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch()?,
        )
        .map_err(e)?;
        let compile = |f: SeccompFilter| {
            BpfProgram::try_from(f).map_err(|e| format!("sandbox: seccomp filter: {e}"))
        };
        Ok(vec![compile(deny)?, compile(clone3)?])
    }

    /// Install the filters on this thread (and every thread it starts).
    pub fn apply() -> Result<(), String> {
        for p in programs()? {
            seccompiler::apply_filter(&p).map_err(|e| format!("sandbox: seccomp: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_and_never_name_root() {
        let plan = Plan {
            mode: Mode::Root,
            uid: 2_100_000_001,
            memory: 1 << 30,
            max_processes: 64,
            tmp_bytes: 1 << 20,
            landlock: true,
            read: vec!["/opt/libs, odd=name".into(), "/srv/é".into()],
        };
        assert_eq!(Plan::decode(&plan.encode()).unwrap(), plan);
        assert!(Plan::decode("mode=off,read=2f00").is_err(), "NUL in a path");
        assert!(Plan::decode("mode=off,read=2f7").is_err());
        let root = Plan { uid: 0, ..plan };
        assert!(Plan::decode(&root.encode()).is_err());
        assert!(Plan::decode("mode=weird").is_err());
    }

    #[test]
    fn uids_are_handed_out_once() {
        let pool = UidPool::new(&SandboxOptions {
            uid_base: 5000,
            uid_count: 2,
            ..Default::default()
        });
        let (a, b) = (pool.take().unwrap(), pool.take().unwrap());
        assert_eq!((a, b), (5000, 5001));
        assert!(pool.take().is_none(), "the range is used up");
        pool.put(a);
        assert_eq!(pool.take(), Some(5000));
    }

    #[test]
    fn credentials_never_reach_a_worker() {
        assert!(passes_to_worker("OFFLOAD_HOST_DEVICES"));
        assert!(passes_to_worker("PATH"));
        assert!(!passes_to_worker("OFFLOAD_REMOTE_TOKEN"));
        assert!(!passes_to_worker("OFFLOAD_REMOTE"));
        // (Built from pieces: not a variable anything reads.)
        assert!(!passes_to_worker(concat!("OFFLOAD_", "SOMETHING_SECRET")));
        assert!(!passes_to_worker("HOME"));
        // The GPU runtimes' settings reach it: they decide what code runs.
        assert!(passes_to_worker("HSA_XNACK"));
        assert!(passes_to_worker("ROCR_VISIBLE_DEVICES"));
        assert!(!passes_to_worker(concat!("HSA_", "API_KEY")));
        assert!(!passes_to_worker("HSA_TOOLS_LIB"));
    }

    #[test]
    fn the_seccomp_filters_compile() {
        assert_eq!(seccomp::programs().unwrap().len(), 2);
    }
}
