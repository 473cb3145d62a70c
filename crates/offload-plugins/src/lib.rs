//! Plugin selection: which plugins this build has, in which order, and the
//! one runtime a process shares.
//!
//! Every face (the drop-in libraries, the Rust API, the server) gets its
//! plugins here, so adding a backend means adding it to [`builtin`] and
//! nowhere else. `OFFLOAD_PLUGINS=a,b` (read by the core's `Config`)
//! restricts which of them initialise.

use std::sync::OnceLock;

use offload_core::{Config, PluginEntry, Runtime};

/// Every plugin built into this runtime, in device-numbering order: local
/// devices first, remote ones (`OFFLOAD_REMOTE`) after them, then those of
/// serving MPI ranks (`mpi`: loads libmpi only under an MPI launcher). The simulated
/// device (`sim`) only initialises when `OFFLOAD_PLUGINS` names it.
pub fn builtin() -> Vec<PluginEntry> {
    vec![
        offload_plugin_host::ENTRY,
        #[cfg(feature = "cuda")]
        offload_plugin_cuda::ENTRY,
        #[cfg(feature = "amdgpu")]
        offload_plugin_amdgpu::ENTRY,
        offload_plugin_sim::ENTRY,
        #[cfg(feature = "remote")]
        offload_plugin_remote::ENTRY,
        #[cfg(feature = "mpi")]
        offload_plugin_mpi::ENTRY,
    ]
}

/// Every plugin this project has, whether or not this build includes it
/// (`cuda`, `amdgpu`, `remote` and `mpi` are cargo features).
pub const ALL_PLUGINS: [&str; 6] = ["host", "cuda", "amdgpu", "sim", "remote", "mpi"];

/// What is wrong with the plugin names `names`, if anything: one line
/// naming each unknown plugin (or one this build leaves out) and the ones
/// this build has.
pub fn check_names(names: &[String]) -> Result<(), String> {
    let built: Vec<&str> = builtin().iter().map(|e| e.name).collect();
    let mut problems = Vec::new();
    for n in names {
        if built.contains(&n.as_str()) {
            continue;
        }
        if ALL_PLUGINS.contains(&n.as_str()) {
            problems.push(format!(
                "'{n}' is not built into this runtime (the `{n}` cargo feature is off)"
            ));
        } else {
            problems.push(format!("unknown plugin '{n}'"));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} (plugins of this build: {})",
        problems.join(", "),
        built.join(", ")
    ))
}

/// [`check_names`] for the names `OFFLOAD_PLUGINS` gives, naming the
/// variable. `offload` commands make it an error; the libraries warn.
pub fn check_plugin_names(config: &Config) -> Result<(), String> {
    match &config.plugins {
        None => Ok(()),
        Some(names) => {
            check_names(names).map_err(|why| format!("OFFLOAD_PLUGINS={}: {why}", names.join(",")))
        }
    }
}

/// Built-in plugins that serve devices to remote clients (all but `remote`
/// and `mpi`).
pub fn local() -> Vec<PluginEntry> {
    builtin()
        .into_iter()
        .filter(|e| e.name != "remote" && e.name != "mpi")
        .collect()
}

/// The process-wide runtime, initialised on first use from the environment.
/// Both drop-in libraries' faces (and the interop table) share it.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let config = Config::get();
        match std::env::var("OFFLOAD_STATS").as_deref() {
            Ok("1") => {
                // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
                unsafe { libc::atexit(print_stats) };
            }
            Ok("0") | Err(_) => {}
            Ok(v) => offload_core::config::warn_once(&offload_core::config::ignored(
                "OFFLOAD_STATS",
                v,
                "1 or 0",
                "0",
            )),
        }
        if let Err(why) = check_plugin_names(config) {
            offload_core::config::warn_once(&format!("offload: warning: {why}; ignored"));
        }
        if std::env::var_os(EXEC_NOTE).is_some_and(|v| v == "1") {
            offload_core::stats::enable();
            // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
            unsafe { libc::atexit(note_if_nothing_ran) };
        }
        Runtime::new(config.clone(), &builtin())
    })
}

/// Set to `1` by `offload exec` (and `offload record`) for the program it
/// runs: at exit the runtime says on stderr when that program launched no
/// kernel on any device.
pub const EXEC_NOTE: &str = "OFFLOAD_EXEC_NOTE";

/// The note [`EXEC_NOTE`] asks for, when no launch reached a device.
extern "C" fn note_if_nothing_ran() {
    let _ = std::panic::catch_unwind(|| {
        let rt = runtime();
        let launches: u64 = rt
            .devices()
            .iter()
            .map(|d| {
                d.stats()
                    .launches
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum();
        if launches == 0 {
            let devices = rt.devices().len();
            eprintln!(
                "offload exec: note: the program launched no kernel on any of the {devices} device(s) \
                 (its target regions, if any, ran on the host fallback; LIBOMPTARGET_INFO=-1 says why)"
            );
        }
    });
}

/// Whether starting the process runtime now would come too early: the
/// program initialises MPI itself and has not yet (see
/// `offload_plugin_mpi::waits_for_application_init`). Faces that start the
/// runtime from a constructor then wait for the program's first device use.
pub fn runtime_should_wait() -> bool {
    #[cfg(feature = "mpi")]
    {
        offload_plugin_mpi::waits_for_application_init(Config::get())
    }
    #[cfg(not(feature = "mpi"))]
    {
        false
    }
}

/// `OFFLOAD_STATS=1`: one line per device at exit, on stderr.
extern "C" fn print_stats() {
    let _ = std::panic::catch_unwind(|| {
        for d in runtime().devices() {
            eprintln!("offload stats: {}: {}", d.label(), d.stats().summary());
        }
    });
}
