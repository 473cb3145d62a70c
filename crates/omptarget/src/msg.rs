//! LLVM's message texts, INFO output and the fatal / abort sequences.

use std::ffi::{c_char, CStr};
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::abi::*;

pub const INFO_KERNEL_ARGS: u32 = 0x01;
pub const INFO_MAPPING_EXISTS: u32 = 0x02;
pub const INFO_DUMP_TABLE: u32 = 0x04;
pub const INFO_MAPPING_CHANGED: u32 = 0x08;
pub const INFO_PLUGIN_KERNEL: u32 = 0x10;
pub const INFO_DATA_TRANSFER: u32 = 0x20;
pub const INFO_EMPTY_MAPPING: u32 = 0x40;

/// u32::MAX = not read yet.
static INFO: AtomicU32 = AtomicU32::new(u32::MAX - 1);
static INFO_READ: std::sync::Once = std::sync::Once::new();

/// The LIBOMPTARGET_INFO mask (cheap after the first call).
#[inline]
pub fn info() -> u32 {
    INFO_READ.call_once(|| {
        INFO.store(offload_core::Config::get().info, Ordering::Relaxed);
    });
    INFO.load(Ordering::Relaxed)
}

#[inline]
pub fn info_on(bit: u32) -> bool {
    info() & bit != 0
}

pub fn set_info(flags: u32) {
    INFO_READ.call_once(|| {});
    INFO.store(flags, Ordering::Relaxed);
}

/// Write one whole line to stderr (unbuffered, one write call).
pub fn eprint_line(s: &str) {
    let mut buf = String::with_capacity(s.len() + 1);
    buf.push_str(s);
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

pub fn dev_info(dev: usize, s: &str) {
    eprint_line(&format!("omptarget device {dev} info: {s}"));
}

extern "C" {
    /// glibc's `stdout` stream.
    #[link_name = "stdout"]
    static C_STDOUT: *mut libc::FILE;
}

/// An INFO line on C's `stdout` stream (LLVM's `INFO_MESSAGE_TO(stdout)`):
/// buffered together with the program's own `printf` output.
pub fn dev_info_stdout(dev: usize, s: &str) {
    let Ok(line) = std::ffi::CString::new(format!("omptarget device {dev} info: {s}\n")) else {
        return;
    };
    // SAFETY: `stdout` is initialised by libc before any constructor runs;
    // fputs takes the stream's own lock.
    unsafe {
        libc::fputs(line.as_ptr(), C_STDOUT);
    }
}

pub fn message(s: &str) {
    eprint_line(&format!("omptarget message: {s}"));
}

pub fn warning(s: &str) {
    eprint_line(&format!("omptarget warning: {s}"));
}

pub fn error(s: &str) {
    eprint_line(&format!("omptarget error: {s}"));
}

/// A plugin operation failed: say why, with the plugin's own message (it
/// names the device, address or server), in the plugin layer's format.
pub fn plugin_error(what: &str, e: &offload_core::Error) {
    eprint_line(&format!("\"PluginInterface\" error: {what}: {e}"));
    die_like_the_device(e);
}

/// When `e` is the death of the device's process by a signal (a remote
/// session's worker whose kernel or constructor trapped or faulted), end
/// this process by the same signal: a local run would have died of it in
/// the offloaded code, and the exit status must say the same.
pub fn die_like_the_device(e: &offload_core::Error) {
    let Some(sig) = e.signal() else {
        return;
    };
    eprint_line(&format!(
        "omptarget fatal error: the device's process was killed by signal {sig}; ending this process by the same signal, as a local run of the offloaded code would have ended"
    ));
    let _ = std::io::stderr().flush();
    // SAFETY: plain libc calls: default action for `sig`, unblocked, raised;
    // abort() if it does not end the process (a signal whose default
    // action is to go on).
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
        libc::abort()
    }
}

/// `omptarget fatal error <code>: <msg>` then abort.
pub fn fatal(code: i64, s: &str) -> ! {
    eprint_line(&format!("omptarget fatal error {code}: {s}"));
    abort()
}

pub fn abort() -> ! {
    // Like LLVM: stderr lines are already written; buffered stdout is lost,
    // as with any abort().
    let _ = std::io::stderr().flush();
    // SAFETY: plain libc call.
    unsafe { libc::abort() }
}

/// `0x%016lx`.
pub struct P(pub u64);
impl std::fmt::Display for P {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

/// Source location from an `ident_t`.
pub struct Loc {
    pub file: String,
    pub line: u32,
    pub col: u32,
    pub known: bool,
}

impl Loc {
    pub fn from_ident(loc: IdentRef) -> Loc {
        let unknown = Loc {
            file: "unknown".into(),
            line: 0,
            col: 0,
            known: false,
        };
        let Some(ps) = loc.psource() else {
            return unknown;
        };
        let s = ps.to_string_lossy();
        let parts: Vec<&str> = s.split(';').collect();
        if parts.len() < 5 {
            return unknown;
        }
        let file = parts[1].rsplit('/').next().unwrap_or(parts[1]).to_string();
        let line = parts[3].parse().unwrap_or(0);
        let col = parts[4].parse().unwrap_or(0);
        let known = file != "unknown" && line != 0;
        Loc {
            file,
            line,
            col,
            known,
        }
    }
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// A map name `;expr;file;line;col;;` -> expr ("unknown" if absent).
pub fn name_of(name: usize) -> String {
    if name == 0 {
        return "unknown".into();
    }
    // SAFETY: map names are C strings emitted by clang.
    let s = unsafe { CStr::from_ptr(name as *const c_char) }.to_string_lossy();
    let parts: Vec<&str> = s.split(';').collect();
    if parts.len() >= 2 && s.starts_with(';') {
        parts[1].to_string()
    } else {
        s.into_owned()
    }
}

/// "expr at file:line:col" for table dumps.
pub fn declaration_of(name: usize) -> String {
    if name == 0 {
        return "unknown at unknown:0:0".into();
    }
    // SAFETY: map names are C strings emitted by clang.
    let s = unsafe { CStr::from_ptr(name as *const c_char) }.to_string_lossy();
    let parts: Vec<&str> = s.split(';').collect();
    if parts.len() >= 5 && s.starts_with(';') {
        let file = parts[2].rsplit('/').next().unwrap_or(parts[2]);
        format!("{} at {}:{}:{}", parts[1], file, parts[3], parts[4])
    } else {
        format!("{s} at unknown:0:0")
    }
}

/// The `to(a)[16] ` argument kind word.
pub fn arg_kind(t: i64, size: i64) -> &'static str {
    if t & ATTACH != 0 {
        "attach"
    } else if t & TO != 0 && t & FROM != 0 {
        "tofrom"
    } else if t & TO != 0 {
        "to"
    } else if t & FROM != 0 {
        "from"
    } else if t & PRIVATE != 0 {
        "private"
    } else if t & LITERAL != 0 {
        "firstprivate"
    } else if size != 0 {
        "alloc"
    } else {
        "use_address"
    }
}

pub fn rc_str(rc: u64) -> String {
    if rc == u64::MAX {
        "INF".into()
    } else {
        rc.to_string()
    }
}
