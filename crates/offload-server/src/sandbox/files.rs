//! The session worker's view of the file system: a Landlock ruleset
//! (`landlock` crate) built from an allowlist, applied by the worker to
//! itself before it serves anyone.
//!
//! Namespaces give a session its own `/tmp`, `/dev/shm` and `/proc`, but
//! the rest of the file system is the host's: without this a kernel could
//! open every file its uid may (under a server that is not root, every file
//! of the server's user: its home, a `--token-file`, the server's
//! binaries). With the ruleset only these stay reachable:
//!
//! * read and execute: the system hierarchies a worker, its device drivers
//!   and its JIT compiler (clang under `/usr`) need: [`SYSTEM_READ`];
//! * read: `/proc` (the session's own PID namespace) and `/sys`; write and
//!   truncate as well: the worker's own `/proc/<pid>` (CUDA's cuInit
//!   needs it);
//! * everything: the session's private `/tmp` and `/dev/shm`;
//! * read, write and device `ioctl`s: the device nodes in [`DEVICES`] and
//!   GPU nodes (`/dev/nvidia*`, `/dev/nvidia-caps`, `/dev/kfd`, `/dev/dri`)
//!   where present; listing `/dev`;
//! * read and execute: every `--sandbox-read PATH` of the server.
//!
//! Everything else fails with EACCES, whatever its owner and mode.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, ABI,
};

/// The Landlock ABI the ruleset is written for: 5 (Linux 6.10) handles
/// every file system right there is, device `ioctl`s included. On older
/// kernels the crate enforces what the kernel knows (best effort).
const TARGET_ABI: ABI = ABI::V5;

/// Read and execute (when present): where a worker's libraries, drivers,
/// configuration and compiler live.
pub const SYSTEM_READ: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt",
];

/// Device nodes a session may read and write (when present).
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/kfd",
];

/// The Landlock ABI version of the running kernel (None: no Landlock,
/// built without it or disabled at boot).
pub fn kernel_abi() -> Option<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset(2) with a null attribute, size 0 and
    // the VERSION flag reads no memory; it returns the ABI version or -1.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (v > 0).then_some(v as i32)
}

/// A ruleset ready to apply: its rules hold no path, only the rule
/// descriptors already added to the kernel's ruleset.
pub struct Prepared {
    ruleset: RulesetCreated,
    rules: usize,
    /// When building it began (the log line says what it cost).
    started: std::time::Instant,
}

fn err(what: impl std::fmt::Display) -> impl Fn(landlock::RulesetError) -> String {
    move |e| format!("sandbox: landlock: {what}: {e}")
}

/// One rule: `access` (trimmed to what a non-directory can have) beneath
/// `path`; nothing when the path does not exist.
fn rule(path: &Path, access: BitFlags<AccessFs>) -> Result<Option<PathBeneath<PathFd>>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("sandbox: landlock: {}: {e}", path.display())),
    };
    let access = if meta.is_dir() {
        access
    } else {
        access & AccessFs::from_file(TARGET_ABI)
    };
    let fd = PathFd::new(path)
        .map_err(|e| format!("sandbox: landlock: opening {}: {e}", path.display()))?;
    Ok(Some(PathBeneath::new(fd, access)))
}

/// Every path the ruleset allows and how (see the module's text).
pub fn allowlist(extra_read: &[PathBuf]) -> Vec<(PathBuf, BitFlags<AccessFs>)> {
    let read_exec = AccessFs::from_read(TARGET_ABI);
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let mut list: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    list.extend(SYSTEM_READ.iter().map(|p| (PathBuf::from(p), read_exec)));
    list.push(("/proc".into(), read));
    // The worker's own /proc/<pid> (resolved when the ruleset is built, in
    // the worker) may also be written, truncating opens included: CUDA's
    // cuInit writes there (it opens its files there as fopen "w" does) and
    // fails with CUDA_ERROR_OPERATING_SYSTEM without both rights (found on
    // an H200: write alone was not enough). Its children's and other
    // processes' entries stay read-only.
    list.push((
        "/proc/self".into(),
        read | AccessFs::WriteFile | AccessFs::Truncate,
    ));
    list.push(("/sys".into(), read));
    list.push(("/tmp".into(), AccessFs::from_all(TARGET_ABI)));
    list.push(("/dev/shm".into(), AccessFs::from_all(TARGET_ABI)));
    list.push(("/dev".into(), AccessFs::ReadDir.into()));
    list.extend(DEVICES.iter().map(|p| (PathBuf::from(p), device)));
    // GPU nodes: NVIDIA's (/dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-caps/),
    // DRM render nodes.
    if let Ok(entries) = std::fs::read_dir("/dev") {
        let mut gpu: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
            .map(|e| e.path())
            .collect();
        gpu.sort();
        list.extend(gpu.into_iter().map(|p| (p, device | AccessFs::ReadDir)));
    }
    list.push(("/dev/dri".into(), device | AccessFs::ReadDir));
    list.extend(extra_read.iter().map(|p| (p.clone(), read_exec)));
    list
}

/// Build the ruleset (opening each allowed path: do it while those paths
/// can still be looked up, before the uid changes).
pub fn prepare(extra_read: &[PathBuf]) -> Result<Prepared, String> {
    let started = std::time::Instant::now();
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(err("ruleset"))?
        .create()
        .map_err(err("ruleset"))?;
    let mut rules = 0;
    for (path, access) in allowlist(extra_read) {
        if let Some(r) = rule(&path, access)? {
            ruleset = ruleset.add_rule(r).map_err(err(path.display()))?;
            rules += 1;
        }
    }
    Ok(Prepared {
        ruleset,
        rules,
        started,
    })
}

impl Prepared {
    /// Restrict this thread (and every thread and process it starts from
    /// now on) to the ruleset. Needs `no_new_privs` (or CAP_SYS_ADMIN) and
    /// one thread: Landlock applies to the calling thread only. Returns
    /// how much of it the kernel enforces.
    pub fn apply(self) -> Result<String, String> {
        let status = self.ruleset.restrict_self().map_err(err("restrict_self"))?;
        let us = self.started.elapsed().as_micros();
        match status.ruleset {
            RulesetStatus::FullyEnforced => Ok(format!("landlock ({} rules, {us} us)", self.rules)),
            RulesetStatus::PartiallyEnforced => Ok(format!(
                "landlock partly ({} rules, {us} us; the kernel's ABI predates {TARGET_ABI:?})",
                self.rules
            )),
            RulesetStatus::NotEnforced => {
                Err("sandbox: landlock: the kernel enforces none of the ruleset".into())
            }
        }
    }
}

/// Whether a session could read `path` through the allowlist (its
/// canonical form beneath a read-allowed path): for a warning about a
/// `--token-file` kept there.
pub fn readable_by_sessions(path: &Path, extra_read: &[PathBuf]) -> bool {
    let Ok(path) = path.canonicalize() else {
        return false;
    };
    // (A session's /tmp and /dev/shm are its own, not the host's.)
    allowlist(extra_read)
        .into_iter()
        .filter(|(p, _)| p != Path::new("/tmp") && p != Path::new("/dev/shm"))
        .filter(|(_, access)| access.contains(AccessFs::ReadFile))
        .filter_map(|(p, _)| p.canonicalize().ok())
        .any(|p| path.starts_with(p))
}
