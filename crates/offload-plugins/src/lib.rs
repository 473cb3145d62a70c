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
        offload_plugin_sim::ENTRY,
        #[cfg(feature = "remote")]
        offload_plugin_remote::ENTRY,
        #[cfg(feature = "mpi")]
        offload_plugin_mpi::ENTRY,
    ]
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
        if std::env::var_os("OFFLOAD_STATS").is_some_and(|v| v == "1") {
            // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
            unsafe { libc::atexit(print_stats) };
        }
        Runtime::new(Config::get().clone(), &builtin())
    })
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
