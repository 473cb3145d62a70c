//! Configuration, read once from the environment.
//!
//! LLVM's `LIBOMPTARGET_*` names come first; our own `OFFLOAD_*` names cover
//! what LLVM has no variable for.

use std::path::PathBuf;

use crate::launch::LaunchTuning;
use std::sync::OnceLock;

/// LLVM's default caching-allocator threshold (bytes).
pub const DEFAULT_MEMORY_MANAGER_THRESHOLD: usize = 8 * 1024;
/// LLVM's host plugin pretends to have four devices; so do we by default.
pub const DEFAULT_HOST_DEVICES: usize = 4;

/// Runtime configuration. Build one with [`Config::from_env`] or take the
/// process-wide copy with [`Config::get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `LIBOMPTARGET_DEBUG`: > 0 prints tracing spans to stderr.
    pub debug: u32,
    /// `LIBOMPTARGET_INFO`: decimal bit mask (`-1` = all bits), as LLVM parses it.
    pub info: u32,
    /// `LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD`: largest allocation the caching
    /// allocator serves; 0 disables it.
    pub memory_manager_threshold: usize,
    /// `OFFLOAD_PLUGINS=host,remote,...`: which plugins to load (None = all).
    pub plugins: Option<Vec<String>>,
    /// `OFFLOAD_HOST_DEVICES`: number of host devices the host plugin reports.
    pub host_devices: usize,
    /// `LIBOMPTARGET_PROFILE`: where to write a trace-event profile.
    pub profile: Option<PathBuf>,
    /// `LIBOMPTARGET_PROFILE_GRANULARITY` (µs, default 500 as LLVM):
    /// shorter events only count in the totals.
    pub profile_granularity_us: u64,
    /// `OFFLOAD_REMOTE=HOST:PORT[,HOST:PORT...]`: servers whose devices the
    /// remote plugin adds.
    pub remote_servers: Vec<String>,
    /// `OFFLOAD_REMOTE_TOKEN`: shared secret sent to the servers.
    pub remote_token: Option<String>,
    /// `OFFLOAD_REMOTE_TIMEOUT` (seconds, default 10): bound on connecting and
    /// on noticing a dead server.
    pub remote_timeout_secs: u64,
    /// `OFFLOAD_REMOTE_TLS_CA=cert.pem`: talk TLS to the servers, trusting
    /// this certificate (authority).
    pub remote_tls_ca: Option<PathBuf>,
    /// `OFFLOAD_REMOTE_CHUNK_SIZE` (bytes, default 1 MiB): size of the pieces
    /// large copies are streamed in.
    pub remote_chunk_size: usize,
    /// OpenMP launch tuning: `OMP_NUM_TEAMS`, `OMP_TEAMS_THREAD_LIMIT`,
    /// `LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT`,
    /// `LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT`,
    /// `LIBOMPTARGET_SHARED_MEMORY_SIZE` ([`crate::launch`]).
    pub launch: LaunchTuning,
    /// `LIBOMPTARGET_STACK_SIZE`: stack bytes per GPU thread, set on each
    /// GPU when it is first used (plugins without one ignore it).
    pub device_stack_size: Option<u64>,
    /// `LIBOMPTARGET_HEAP_SIZE`: bytes of each GPU's device-side `malloc`
    /// heap, set when it is first used.
    pub device_heap_size: Option<u64>,
    /// `LIBOMPTARGET_DEVICE_RTL_DEBUG`: the `DeviceDebugKind` bits GPU
    /// plugins write into each OpenMP image's device environment at load
    /// (0 by default; what the bits enable is the device runtime's).
    pub device_rtl_debug: u32,
    /// One line per setting whose value was ignored (or read otherwise than
    /// written), naming the variable and the value: printed once on stderr
    /// by [`Config::get`] and [`Config::from_env`].
    pub warnings: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            debug: 0,
            info: 0,
            memory_manager_threshold: DEFAULT_MEMORY_MANAGER_THRESHOLD,
            plugins: None,
            host_devices: DEFAULT_HOST_DEVICES,
            profile: None,
            profile_granularity_us: 500,
            remote_servers: Vec::new(),
            remote_token: None,
            remote_timeout_secs: 10,
            remote_tls_ca: None,
            remote_chunk_size: 1 << 20,
            launch: LaunchTuning::default(),
            device_stack_size: None,
            device_heap_size: None,
            device_rtl_debug: 0,
            warnings: Vec::new(),
        }
    }
}

impl Config {
    /// The process-wide configuration, read from the environment on first use.
    pub fn get() -> &'static Config {
        static CONFIG: OnceLock<Config> = OnceLock::new();
        CONFIG.get_or_init(Config::from_env)
    }

    /// Read the configuration from the process environment now (settings
    /// it ignores are warned about on stderr, each once per process).
    pub fn from_env() -> Config {
        let c = Config::from_lookup(|k| std::env::var(k).ok());
        for w in &c.warnings {
            warn_once(w);
        }
        c
    }

    /// Read the configuration through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Config {
        let mut c = Config::default();
        let mut w = Vec::new();
        if let Some(v) = lookup("LIBOMPTARGET_DEBUG") {
            c.debug = llvm_int("LIBOMPTARGET_DEBUG", &v, &mut w);
        }
        if let Some(v) = lookup("LIBOMPTARGET_INFO") {
            c.info = llvm_int("LIBOMPTARGET_INFO", &v, &mut w);
        }
        let mut num = |name: &str, what: &str, default: String| -> Option<u64> {
            let v = lookup(name)?;
            let n = strict_u64(&v);
            if n.is_none() {
                w.push(ignored(name, &v, what, &default));
            }
            n
        };
        if let Some(n) = num(
            "LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD",
            "a byte count",
            DEFAULT_MEMORY_MANAGER_THRESHOLD.to_string(),
        ) {
            c.memory_manager_threshold = n as usize;
        }
        if let Some(n) = num(
            "OFFLOAD_HOST_DEVICES",
            "a count",
            DEFAULT_HOST_DEVICES.to_string(),
        ) {
            c.host_devices = n as usize;
        }
        if let Some(n) = num(
            "LIBOMPTARGET_PROFILE_GRANULARITY",
            "microseconds",
            "500".into(),
        ) {
            c.profile_granularity_us = n;
        }
        if let Some(n) = num("OFFLOAD_REMOTE_TIMEOUT", "seconds", "10".into()) {
            c.remote_timeout_secs = n.max(1);
        }
        if let Some(n) = num(
            "OFFLOAD_REMOTE_CHUNK_SIZE",
            "a byte count",
            "1048576".into(),
        ) {
            c.remote_chunk_size = (n.min(64 << 20) as usize).max(4096);
        }
        c.device_stack_size = num(
            "LIBOMPTARGET_STACK_SIZE",
            "a byte count",
            "the device's".into(),
        );
        c.device_heap_size = num(
            "LIBOMPTARGET_HEAP_SIZE",
            "a byte count",
            "the device's".into(),
        );
        if let Some(n) = num("LIBOMPTARGET_DEVICE_RTL_DEBUG", "a bit mask", "0".into()) {
            c.device_rtl_debug = n as u32;
        }
        if let Some(v) = lookup("OFFLOAD_PLUGINS") {
            let names: Vec<String> = v
                .split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect();
            c.plugins = Some(names);
        }
        if let Some(v) = lookup("LIBOMPTARGET_PROFILE") {
            if !v.is_empty() {
                c.profile = Some(PathBuf::from(v));
            }
        }
        if let Some(v) = lookup("OFFLOAD_REMOTE") {
            c.remote_servers = v
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
        c.remote_token = lookup("OFFLOAD_REMOTE_TOKEN").filter(|t| !t.is_empty());
        c.remote_tls_ca = lookup("OFFLOAD_REMOTE_TLS_CA")
            .filter(|t| !t.is_empty())
            .map(PathBuf::from);
        c.launch = launch_tuning(&lookup, &mut w);
        c.warnings = w;
        c
    }

    /// Whether plugin `name` may be loaded under `OFFLOAD_PLUGINS`.
    /// Whether `OFFLOAD_PLUGINS` names `name` explicitly.
    pub fn plugin_named(&self, name: &str) -> bool {
        self.plugins
            .as_ref()
            .is_some_and(|list| list.iter().any(|p| p == name))
    }

    pub fn plugin_enabled(&self, name: &str) -> bool {
        match &self.plugins {
            None => true,
            Some(list) => list.iter().any(|p| p == name),
        }
    }
}

/// The launch tuning variables, read as LLVM's plugins read them: a value
/// that does not parse leaves the default (with a warning); counts must be
/// positive.
fn launch_tuning(lookup: &impl Fn(&str) -> Option<String>, w: &mut Vec<String>) -> LaunchTuning {
    let mut positive = |name: &str| {
        let v = lookup(name)?;
        match v.trim().parse::<i64>().ok().filter(|&n| n > 0) {
            Some(n) => Some(n.min(i64::from(u32::MAX)) as u32),
            None => {
                w.push(ignored(name, &v, "a positive count", "unset"));
                None
            }
        }
    };
    let mut t = LaunchTuning {
        max_teams: positive("OMP_NUM_TEAMS"),
        max_threads: positive("OMP_TEAMS_THREAD_LIMIT"),
        ..LaunchTuning::default()
    };
    let d = LaunchTuning::default();
    let mut u32_var = |name: &str, default: u32| {
        let v = lookup(name)?;
        let n = strict_u64(&v).and_then(|n| u32::try_from(n).ok());
        if n.is_none() {
            w.push(ignored(name, &v, "a count", &default.to_string()));
        }
        n
    };
    if let Some(n) = u32_var(
        "LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT",
        d.min_threads_low_trip_count,
    ) {
        t.min_threads_low_trip_count = n;
    }
    if let Some(n) = u32_var("LIBOMPTARGET_SHARED_MEMORY_SIZE", d.min_dyn_group_memory) {
        t.min_dyn_group_memory = n;
    }
    if let Some(v) = lookup("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT") {
        match parse_bool(&v) {
            Some(b) => t.reuse_blocks_high_trip_count = b,
            None => w.push(ignored(
                "LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT",
                &v,
                "true/false, yes/no, on/off or 1/0",
                &d.reuse_blocks_high_trip_count.to_string(),
            )),
        }
    }
    t
}

/// A whole unsigned decimal number (blanks around it allowed), or None.
fn strict_u64(v: &str) -> Option<u64> {
    v.trim().parse::<u64>().ok()
}

/// The warning for a setting whose value is ignored: "offload: warning:
/// NAME=VALUE ignored: not WHAT (using DEFAULT)".
pub fn ignored(name: &str, value: &str, what: &str, default: &str) -> String {
    format!("offload: warning: {name}={value:?} ignored: not {what} (using {default})")
}

/// Print `line` on stderr unless this process printed it already.
pub fn warn_once(line: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if !seen.iter().any(|s| s == line) {
        seen.push(line.to_string());
        eprintln!("{line}");
    }
}

/// Read `name=value` (a number the environment sets) with `strict_u64`;
/// a value that is set but not a number is warned about once (see
/// [`ignored`]) and gives None. For settings read outside [`Config`].
pub fn env_u64(name: &str, what: &str, default: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let n = strict_u64(&v);
    if n.is_none() {
        warn_once(&ignored(name, &v, what, default));
    }
    n
}

/// LLVM's boolean variables: true/yes/on/1 and false/no/off/0, any case.
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// LLVM reads `LIBOMPTARGET_DEBUG` and `LIBOMPTARGET_INFO` with
/// `std::stoi`: decimal, leading sign allowed, trailing junk ignored, so
/// `0x10` reads as 0. We read them the same, and warn when the value is not
/// a whole decimal number.
fn llvm_int(name: &str, v: &str, w: &mut Vec<String>) -> u32 {
    let n = parse_flag_int(v);
    let t = v.trim();
    let whole = t.strip_prefix(['-', '+']).unwrap_or(t);
    if n.is_none() || whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        let read = n.unwrap_or(0) as i32;
        w.push(format!(
            "offload: warning: {name}={v:?} is not a decimal number: read as {read} (as LLVM's runtime does)"
        ));
    }
    n.unwrap_or(0)
}

fn parse_flag_int(v: &str) -> Option<u32> {
    let v = v.trim();
    let (neg, digits) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let n: i64 = digits[..end].parse().ok()?;
    let n = if neg { -n } else { n };
    Some(n as i32 as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let c = cfg(&[]);
        assert_eq!(c.memory_manager_threshold, 8192);
        assert_eq!(c.host_devices, 4);
        assert!(c.plugin_enabled("host"));
        assert_eq!(c.device_rtl_debug, 0);
        assert_eq!(
            cfg(&[("LIBOMPTARGET_DEVICE_RTL_DEBUG", "5")]).device_rtl_debug,
            5
        );
        assert_eq!(
            cfg(&[("LIBOMPTARGET_DEVICE_RTL_DEBUG", "x")]).device_rtl_debug,
            0
        );
    }

    #[test]
    fn launch_tuning_variables() {
        assert_eq!(cfg(&[]).launch, LaunchTuning::default());
        let t = cfg(&[
            ("OMP_NUM_TEAMS", "12"),
            ("OMP_TEAMS_THREAD_LIMIT", "64"),
            ("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT", "8"),
            ("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", "Off"),
            ("LIBOMPTARGET_SHARED_MEMORY_SIZE", "4096"),
        ])
        .launch;
        assert_eq!(t.max_teams, Some(12));
        assert_eq!(t.max_threads, Some(64));
        assert_eq!(t.min_threads_low_trip_count, 8);
        assert!(!t.reuse_blocks_high_trip_count);
        assert_eq!(t.min_dyn_group_memory, 4096);
        // Non-positive or junk values keep the defaults.
        let t = cfg(&[
            ("OMP_NUM_TEAMS", "0"),
            ("OMP_TEAMS_THREAD_LIMIT", "-4"),
            ("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", "maybe"),
            ("LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT", "x"),
        ])
        .launch;
        assert_eq!(t, LaunchTuning::default());
    }

    #[test]
    fn info_is_decimal_like_llvm() {
        assert_eq!(cfg(&[("LIBOMPTARGET_INFO", "-1")]).info, u32::MAX);
        assert_eq!(cfg(&[("LIBOMPTARGET_INFO", "32")]).info, 32);
        assert_eq!(cfg(&[("LIBOMPTARGET_INFO", "0x10")]).info, 0);
        assert_eq!(cfg(&[("LIBOMPTARGET_INFO", "junk")]).info, 0);
    }

    #[test]
    fn ignored_values_are_warned_about_by_name() {
        let bad = [
            ("OFFLOAD_HOST_DEVICES", "abc"),
            ("LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD", "8k"),
            ("LIBOMPTARGET_INFO", "0x10"),
            ("OMP_NUM_TEAMS", "0"),
            ("LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT", "maybe"),
            ("LIBOMPTARGET_STACK_SIZE", "-1"),
        ];
        let mut env = bad.to_vec();
        env.push(("OFFLOAD_REMOTE_TIMEOUT", "5"));
        let c = cfg(&env);
        assert_eq!(c.host_devices, DEFAULT_HOST_DEVICES);
        assert_eq!(c.memory_manager_threshold, DEFAULT_MEMORY_MANAGER_THRESHOLD);
        assert_eq!(c.device_stack_size, None);
        assert_eq!(c.remote_timeout_secs, 5);
        assert_eq!(c.warnings.len(), 6, "{:#?}", c.warnings);
        for (name, value) in bad {
            let needle = format!("{name}=\"{value}\"");
            let line = c.warnings.iter().find(|w| w.contains(&needle));
            let line = line.unwrap_or_else(|| panic!("no warning for {needle}: {:?}", c.warnings));
            assert!(line.starts_with("offload: warning: ") && !line.contains('\n'));
        }
        assert!(
            cfg(&[("OFFLOAD_HOST_DEVICES", " 2 "), ("LIBOMPTARGET_INFO", "-1")])
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn plugins_and_threshold() {
        let c = cfg(&[
            ("OFFLOAD_PLUGINS", "Remote, host"),
            ("LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD", "0"),
            ("OFFLOAD_HOST_DEVICES", "1"),
        ]);
        assert!(c.plugin_enabled("host") && c.plugin_enabled("remote"));
        assert!(!c.plugin_enabled("cuda"));
        assert_eq!(c.memory_manager_threshold, 0);
        assert_eq!(c.host_devices, 1);
    }
}
