//! The MPI plugin: the devices of every rank started as `offload serve
//! --mpi` in the same MPI job become ordinary devices of the application
//! (numbered after its local ones).
//!
//! ```sh
//! mpirun -np 1 ./app : -np 2 offload serve --mpi
//! ```
//!
//! * Nothing for non-MPI users: libmpi is loaded at run time ([`ffi`]), and
//!   only when `OFFLOAD_PLUGINS` names `mpi` or the environment says the
//!   process is one program of a multi-program launch
//!   ([`launched_with_ranks`]; an ordinary `mpirun -np 4 ./app` is left
//!   alone). Otherwise the plugin reports no device and
//!   touches nothing.
//! * The messages are the remote protocol's (`offload_proto`), with MPI as
//!   the transport ([`transport`], the `offload_mpi` crate shared with the
//!   server); the server side lives in
//!   `offload_server::mpi`.
//! * Devices, programs, kernels, shipped images and request building are
//!   the forwarding layer shared with the remote plugin (`offload_forward`);
//!   this crate gives it a transport per serving rank ([`RankLink`]) and
//!   the queues.
//! * Binaries: the register hook ships a binary's images to each serving
//!   rank once; loads name them by id; the unregister hook tears them down
//!   there (nesting like the remote plugin's).
//! * A copy between devices of two serving ranks goes rank to rank
//!   (`Queue::copy_to_peer`), never through the application's rank.
//! * MPI is initialised (at `MPI_THREAD_SERIALIZED`) unless the application
//!   does so itself, and finalized at exit only if we initialised it. An
//!   MPI+OpenMP program initialises MPI in `main`, after its images were
//!   registered: the OpenMP face waits for that
//!   ([`waits_for_application_init`]), and the goodbye to the serving ranks
//!   goes out at the start of the program's `MPI_Finalize`. Every MPI call
//!   of the runtime is serialized by one lock.

mod device;

use std::ffi::c_int;
use std::sync::{Arc, Mutex, OnceLock};

use offload_core::binary::BinaryDescriptor;
use offload_core::plugin::{self, Plugin};
use offload_core::{Config, Error, PluginEntry, Result};
use offload_proto::{HelloEvent, HelloRequest};
use prost::Message;

pub use device::{ping, raw_loop, MpiDevice, MpiKernel, RankLink};
/// The MPI transport (libmpi loaded at run time, the framing), shared with
/// `offload serve --mpi`.
pub use offload_mpi::{ffi, transport, SERVING_ENV};
pub use transport::{launched_with_ranks, Op, Role, Transport};

/// The plugin's entry for [`offload_core::Runtime::new`].
pub const ENTRY: PluginEntry = PluginEntry {
    name: "mpi",
    create,
    opt_in: false,
};

fn create(config: &Config) -> Result<Box<dyn Plugin>> {
    Ok(Box::new(MpiPlugin {
        config: config.clone(),
        servers: Mutex::new(Vec::new()),
        shipped: Default::default(),
    }))
}

/// The process's transport, once started (client side).
static TRANSPORT: OnceLock<Arc<Transport>> = OnceLock::new();

/// The process's MPI transport, once the plugin started it (benchmarks).
pub fn transport() -> Option<Arc<Transport>> {
    TRANSPORT.get().cloned()
}

/// Images shipped per serving rank.
pub type ShippedImages = offload_forward::ShippedImages<c_int>;

pub struct MpiPlugin {
    config: Config,
    /// The links to the serving ranks found at init.
    servers: Mutex<Vec<Arc<RankLink>>>,
    shipped: Arc<ShippedImages>,
}

/// One request and its reply, with MPI held for both.
pub(crate) fn call(t: &Transport, rank: c_int, op: Op, body: &impl Message) -> Result<Vec<u8>> {
    let link = t.lock()?;
    link.send_request(rank, op, body)?;
    link.recv_reply(rank)
}

pub(crate) fn decode<M: Message + Default>(rank: c_int, data: &[u8]) -> Result<M> {
    M::decode(data).map_err(|e| Error::backend(format!("bad reply from MPI rank {rank}: {e}")))
}

/// Whether this plugin would start MPI in this process (see the crate
/// doc): not in a serving rank, enabled, and named in `OFFLOAD_PLUGINS` or
/// under a multi-program launch.
fn would_start(config: &Config) -> bool {
    std::env::var_os(SERVING_ENV).is_none()
        && config.plugin_enabled("mpi")
        && (config.plugin_named("mpi") || launched_with_ranks(|k| std::env::var(k).ok()))
}

/// Whether a runtime starting now should wait for the application to
/// initialise MPI: the plugin would start, and the program links libmpi
/// (an MPI+OpenMP program) but has not called `MPI_Init` yet. MPI may be
/// initialised only once per process, and such a program does it itself,
/// usually first thing in `main`, after the constructors that register
/// its OpenMP images; the OpenMP face then starts its runtime at the first
/// device use instead. Looks only at symbols already loaded.
pub fn waits_for_application_init(config: &Config) -> bool {
    if TRANSPORT.get().is_some() || !would_start(config) {
        return false;
    }
    // SAFETY: a lookup in the global scope; nothing is loaded.
    let initialized = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"MPI_Initialized".as_ptr()) };
    if initialized.is_null() {
        return false;
    }
    // SAFETY: the program's own libmpi's `int MPI_Initialized(int *)`,
    // callable at any time.
    let initialized: unsafe extern "C" fn(*mut c_int) -> c_int =
        unsafe { std::mem::transmute(initialized) };
    let mut flag: c_int = 0;
    // SAFETY: plain out-parameter.
    unsafe { initialized(&mut flag) };
    flag == 0
}

/// The start of the application's own `MPI_Finalize` (an `MPI_COMM_SELF`
/// attribute being deleted): say goodbye while MPI still works.
unsafe extern "C" fn at_application_finalize(
    _comm: ffi::Handle,
    _keyval: c_int,
    _attr: *mut std::ffi::c_void,
    _extra: *mut std::ffi::c_void,
) -> c_int {
    at_exit();
    0
}

/// Once per process: a program that initialised MPI below
/// `MPI_THREAD_SERIALIZED` may only call MPI from one thread (or from its
/// main thread), while the runtime calls it from whichever thread offloads.
fn check_thread_level(t: &Transport) {
    if t.thread_level >= ffi::THREAD_SERIALIZED {
        return;
    }
    let level = match t.thread_level {
        ffi::THREAD_SINGLE => "MPI_THREAD_SINGLE",
        ffi::THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
        _ => "an unknown level",
    };
    let line = format!(
        "offload warning: the program initialised MPI at {level}; the MPI plugin calls MPI from every thread that offloads (nowait regions, other threads): offload from the main thread only, or initialise with MPI_Init_thread(..., MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE, ...)\n"
    );
    // One write, so that the line stays whole among other ranks' output.
    use std::io::Write;
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// At exit: tell every serving rank we are done, then finalize MPI if we
/// initialised it (the serving ranks finalize when all clients said bye).
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(t) = TRANSPORT.get() {
            t.close(|link| {
                for r in t.ranks_with(Role::Server) {
                    let _ = link.send_request(r, Op::Bye, &offload_proto::Empty {});
                }
            });
        }
    });
}

/// Whether the transport is up and goodbye not yet said.
fn transport_open() -> bool {
    TRANSPORT.get().is_some_and(|t| !t.is_closed())
}

impl MpiPlugin {
    /// The serving ranks found at init.
    fn servers(&self) -> Vec<Arc<RankLink>> {
        self.servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Plugin for MpiPlugin {
    fn name(&self) -> &'static str {
        "mpi"
    }

    fn init(&self) -> Result<Vec<Arc<dyn plugin::Device>>> {
        if !would_start(&self.config) {
            // In a serving rank (a loaded image linking the drop-in
            // library: that rank's MPI belongs to the server), or not under
            // an MPI launcher: load nothing.
            return Ok(Vec::new());
        }
        let t = match TRANSPORT.get() {
            Some(t) => t.clone(),
            None => {
                let t = Arc::new(Transport::start(Role::Client)?);
                let t = TRANSPORT.get_or_init(|| t).clone();
                if t.initialized_by_application() {
                    // The program's MPI_Finalize comes before our exit
                    // handler: say goodbye at its start.
                    t.close_before_finalize(at_application_finalize)?;
                    check_thread_level(&t);
                }
                // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
                unsafe { libc::atexit(at_exit) };
                t
            }
        };
        let mut devices: Vec<Arc<dyn plugin::Device>> = Vec::new();
        let mut servers = Vec::new();
        for rank in t.ranks_with(Role::Server) {
            let data = call(
                &t,
                rank,
                Op::Hello,
                &HelloRequest {
                    client: format!("rank {}", t.rank),
                    protocol_version: offload_proto::PROTOCOL_VERSION,
                },
            )?;
            let hello: HelloEvent = decode(rank, &data)?;
            let link = Arc::new(RankLink::new(t.clone(), rank));
            for d in &hello.devices {
                let info = offload_forward::request::device_info(
                    d,
                    &format!("MPI rank {rank}"),
                    &format!("mpi:{rank}"),
                    &format!("{} (MPI)", hello.server),
                );
                devices.push(Arc::new(MpiDevice::new(
                    link.clone(),
                    d.id,
                    info,
                    self.shipped.clone(),
                )));
            }
            servers.push(link);
        }
        *self.servers.lock().unwrap_or_else(|e| e.into_inner()) = servers;
        Ok(devices)
    }

    fn register_binary(&self, binary: &BinaryDescriptor) -> Result<()> {
        if !transport_open() {
            return Ok(());
        }
        self.shipped.register(&self.servers(), binary)
    }

    fn unregister_binary(&self, binary: &BinaryDescriptor) -> Result<()> {
        // Once the transport is closed (goodbye said, at the program's
        // MPI_Finalize or at exit) the serving ranks dropped the session
        // and everything in it.
        if !transport_open() {
            return Ok(());
        }
        self.shipped.unregister(&self.servers(), binary)
    }

    fn deinit(&self) -> Result<()> {
        at_exit();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_transport_without_launcher() {
        // Without a launcher's environment the plugin loads nothing.
        if launched_with_ranks(|k| std::env::var(k).ok()) {
            return;
        }
        let p = create(&Config::default()).unwrap();
        assert!(p.init().unwrap().is_empty());
        assert!(TRANSPORT.get().is_none());
    }
}
