//! A session's worker process (`offload serve-worker`, started by the
//! supervisor in [`crate::supervisor`]).
//!
//! The worker opens the devices, serves exactly one session and exits when
//! the supervisor closes its control socket (the client went away, or the
//! server stops). Everything the client loads and runs stays in this
//! process: a kernel that crashes, calls `exit()` or reads wild addresses
//! takes only its own session with it.
//!
//! Control socket, after the [`WorkerConfig`] / [`WorkerReady`] exchange:
//! the supervisor sends client sockets, one per message (see
//! [`offload_proto::fdpass`]), tagged [`TAG_GRPC`] (a session connection, its
//! preamble already read), [`TAG_DATA`] (a bulk-data connection, its
//! secret line already read and checked) or [`TAG_LOCAL`] (a same-host
//! queue connection, likewise).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use offload_proto::{HelloEvent, WorkerConfig, WorkerReady};
use prost::Message;
use tonic::transport::{Identity, ServerTlsConfig};

use crate::service::Service;
use crate::session::Session;

/// Tag of a handed-over gRPC session connection.
pub const TAG_GRPC: u8 = b'g';
/// Tag of a handed-over bulk-data connection.
pub const TAG_DATA: u8 = b'd';
/// Tag of a handed-over same-host queue connection ([`crate::local`]).
pub const TAG_LOCAL: u8 = b'q';
/// Tags of the descriptors a worker sends the supervisor at start: its
/// output spool and the read ends of its stdout and stderr pipes (see
/// [`crate::output`]).
pub const TAG_SPOOL: u8 = b's';
pub const TAG_STDOUT: u8 = b'1';
pub const TAG_STDERR: u8 = b'2';
/// Environment variable naming the control socket's descriptor.
pub const CONTROL_FD_ENV: &str = "OFFLOAD_WORKER_FD";
/// Environment variable with the session's idle timeout in milliseconds
/// (0: none), set by the supervisor.
pub const IDLE_ENV: &str = "OFFLOAD_WORKER_IDLE_MS";
/// Largest control frame accepted (a config with TLS material is a few KiB).
const MAX_FRAME: usize = 1 << 20;

/// Write one length-prefixed frame.
pub(crate) fn write_frame(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(4 + bytes.len());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
    w.write_all(&out)?;
    w.flush()
}

/// Read one length-prefixed frame.
pub(crate) fn read_frame(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "control frame of {len} bytes"
        )));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// The control socket this process was started with (`OFFLOAD_WORKER_FD`).
pub fn control_socket_from_env() -> Result<UnixStream, String> {
    use std::os::fd::FromRawFd;
    let fd: i32 = std::env::var(CONTROL_FD_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            format!("{CONTROL_FD_ENV} is not set: serve-worker is started by `offload serve`")
        })?;
    // SAFETY: the supervisor placed a connected Unix socket at this
    // descriptor for this process alone; it is owned from here on.
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}

/// Serve one session until the supervisor closes `control`.
pub fn run(mut control: UnixStream) -> Result<(), String> {
    // First, while this process has one thread and has read nothing from
    // anyone: the sandbox (the process the supervisor started stays
    // outside as its waiter and never returns from here).
    let sandboxed = crate::sandbox::enter_from_env()?;
    // Device code's stdout and stderr go to the client, not the server's log.
    crate::output::capture()?;
    // The supervisor keeps what device code wrote last when this process
    // dies: it gets the spool and the pipes.
    let handles = crate::output::handles().ok_or("output not captured")?;
    for (tag, fd) in [TAG_SPOOL, TAG_STDOUT, TAG_STDERR].into_iter().zip(handles) {
        use std::os::fd::AsRawFd;
        offload_proto::fdpass::send_fd(&control, tag, fd.as_raw_fd())
            .map_err(|e| format!("sending the output handles: {e}"))?;
    }
    let idle = std::env::var(IDLE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(std::time::Duration::from_millis);
    std::env::remove_var(IDLE_ENV);
    // The devices open before the session is known: a spare worker
    // (started ahead of the next Hello) waits below with everything ready.
    // Counted for the supervisor's metrics (bytes moved, launches).
    offload_core::stats::enable();
    let runtime = Arc::new(crate::local_runtime());
    // The runtime has read its configuration: a kernel's getenv finds nothing.
    crate::sandbox::clear_environment();
    let frame = read_frame(&mut control).map_err(|e| format!("reading the session config: {e}"))?;
    let config =
        WorkerConfig::decode(frame.as_slice()).map_err(|e| format!("bad session config: {e}"))?;
    let session = Arc::new(Session::with_credentials(
        crate::session::Credentials {
            id: config.session_id.clone(),
            secret: config.secret.clone(),
            data_secret: config.data_secret.clone(),
        },
        config.client.clone(),
        runtime.clone(),
        (config.quota > 0).then_some(config.quota),
    ));
    let ready = WorkerReady {
        hello: Some(HelloEvent {
            server: crate::service::server_name(),
            devices: crate::requests::device_descs(&runtime),
            ..Default::default()
        }),
        error: String::new(),
    };
    write_frame(&mut control, &ready.encode_to_vec())
        .map_err(|e| format!("answering the supervisor: {e}"))?;
    tracing::info!(session = %session.id, client = %session.client, pid = std::process::id(), %sandboxed, "session worker started");
    let activity = Activity::new();
    if let Some(idle) = idle {
        let watched = activity.clone();
        std::thread::Builder::new()
            .name("offload-worker-idle".into())
            .spawn(move || loop {
                std::thread::sleep(idle.min(std::time::Duration::from_secs(1)));
                if watched.idle_for() >= idle {
                    tracing::info!(
                        idle_secs = idle.as_secs_f64(),
                        "session idle; closing it (--session-idle-timeout)"
                    );
                    std::process::exit(crate::supervisor::IDLE_EXIT);
                }
            })
            .map_err(|e| format!("starting the idle watch: {e}"))?;
    }

    let token = (!config.token.is_empty()).then(|| config.token.clone());
    let service = Service::for_worker(runtime.clone(), token, session.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("starting the worker runtime: {e}"))?;
    let (conns_tx, conns_rx) =
        tokio::sync::mpsc::channel::<std::io::Result<tokio::net::TcpStream>>(16);
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = rt.handle().clone();
    let data_session = session.clone();
    let data_activity = activity.clone();
    let served_queues = Arc::new(crate::local::Served::default());
    let local_queues = served_queues.clone();
    let reports = control
        .try_clone()
        .map_err(|e| format!("control socket: {e}"))?;
    let mut last_report = control
        .try_clone()
        .map_err(|e| format!("control socket: {e}"))?;
    let reporting = runtime.clone();
    std::thread::Builder::new()
        .name("offload-worker-stats".into())
        .spawn(move || report_stats(reports, &reporting))
        .map_err(|e| format!("starting the stats thread: {e}"))?;
    std::thread::Builder::new()
        .name("offload-worker-control".into())
        .spawn(move || {
            receive_connections(
                &control,
                &handle,
                &conns_tx,
                &data_session,
                &data_activity,
                &local_queues,
            );
            let _ = closed_tx.send(());
        })
        .map_err(|e| format!("starting the control thread: {e}"))?;

    let mut builder = crate::grpc_server_builder();
    if !config.tls_cert.is_empty() {
        builder = builder
            .tls_config(
                ServerTlsConfig::new()
                    .identity(Identity::from_pem(&config.tls_cert, &config.tls_key)),
            )
            .map_err(|e| format!("TLS: {e}"))?;
    }
    let svc = crate::offload_service(service);
    let served = rt.block_on(async move {
        let incoming = tokio_stream::wrappers::ReceiverStream::new(conns_rx);
        let closed = async {
            let _ = closed_rx.await;
        };
        builder
            .layer(ActivityLayer(activity))
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, closed)
            .await
    });
    // Same-host queues finish what their clients sent, as the gRPC calls
    // in flight did (the supervisor kills this process after the drain
    // timeout all the same).
    served_queues.stop(std::time::Duration::from_secs(3600));
    // The last totals, before the supervisor sees the socket close.
    let _ = write_frame(
        &mut last_report,
        &crate::metrics::local_totals(&runtime).encode_to_vec(),
    );
    let (freed, programs) = session.release();
    tracing::info!(session = %session.id, freed_allocations = freed, unloaded_programs = programs, "session worker done");
    served.map_err(|e| format!("serving the session: {e}"))
}

/// Send the session's totals to the supervisor every 0.1 s when they changed, until
/// the socket closes.
fn report_stats(mut control: UnixStream, runtime: &offload_core::Runtime) {
    let mut last = None;
    loop {
        let now = crate::metrics::local_totals(runtime);
        if last.as_ref() != Some(&now) {
            if write_frame(&mut control, &now.encode_to_vec()).is_err() {
                return;
            }
            last = Some(now);
        }
        std::thread::sleep(STATS_EVERY);
    }
}

/// How often a worker reports its totals (when they changed).
const STATS_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Take client sockets from the supervisor until it closes the socket.
fn receive_connections(
    control: &UnixStream,
    rt: &tokio::runtime::Handle,
    grpc: &tokio::sync::mpsc::Sender<std::io::Result<tokio::net::TcpStream>>,
    session: &Arc<Session>,
    activity: &Activity,
    served: &Arc<crate::local::Served>,
) {
    loop {
        let (tag, fd) = match offload_proto::fdpass::recv_fd(control) {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "control socket failed; ending the session");
                return;
            }
        };
        if tag == TAG_LOCAL {
            serve_local_queue(
                std::os::unix::net::UnixStream::from(fd),
                session,
                activity,
                served,
            );
            continue;
        }
        let stream = TcpStream::from(fd);
        match tag {
            TAG_GRPC => {
                let _enter = rt.enter();
                let converted = stream
                    .set_nonblocking(true)
                    .and_then(|_| tokio::net::TcpStream::from_std(stream));
                if grpc.blocking_send(converted).is_err() {
                    return;
                }
            }
            TAG_DATA => {
                let (session, activity) = (session.clone(), activity.clone());
                let spawned = std::thread::Builder::new()
                    .name("offload-data".into())
                    .spawn(move || {
                        let touch = || {
                            activity.touch();
                            true
                        };
                        if let Err(e) = crate::data::serve_authenticated(stream, &session, touch) {
                            tracing::debug!(error = %e, "data connection ended");
                        }
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "no thread for a data connection");
                }
            }
            other => tracing::warn!(tag = other, "unknown connection tag from the supervisor"),
        }
    }
}

/// Serve a same-host queue on its own thread; each operation counts as
/// the session's activity, as each message of a gRPC queue stream does.
fn serve_local_queue(
    stream: std::os::unix::net::UnixStream,
    session: &Arc<Session>,
    activity: &Activity,
    served: &Arc<crate::local::Served>,
) {
    let (session, activity, served) = (session.clone(), activity.clone(), served.clone());
    let spawned = std::thread::Builder::new()
        .name("offload-local".into())
        .spawn(move || {
            let touch = || activity.touch();
            if let Err(e) = crate::local::serve(stream, &session, || true, &served, touch) {
                tracing::debug!(error = %e, "same-host queue ended");
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread for a same-host queue");
    }
}

/// When the session last did something, and what it is doing now: calls
/// in flight never count as idle.
#[derive(Clone)]
pub(crate) struct Activity(Arc<ActivityState>);

struct ActivityState {
    start: std::time::Instant,
    /// Milliseconds after `start` of the last call's start or end.
    last_ms: std::sync::atomic::AtomicU64,
    in_flight: std::sync::atomic::AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity(Arc::new(ActivityState {
            start: std::time::Instant::now(),
            last_ms: Default::default(),
            in_flight: Default::default(),
        }))
    }

    fn touch(&self) {
        let now = self.0.start.elapsed().as_millis() as u64;
        self.0
            .last_ms
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long nothing has happened (zero while a call is in flight).
    fn idle_for(&self) -> std::time::Duration {
        if self.0.in_flight.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return std::time::Duration::ZERO;
        }
        let last = self.0.last_ms.load(std::sync::atomic::Ordering::Relaxed);
        self.0
            .start
            .elapsed()
            .saturating_sub(std::time::Duration::from_millis(last))
    }

    fn begin(&self) -> CallGuard {
        self.0
            .in_flight
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.touch();
        CallGuard(self.clone())
    }
}

struct CallGuard(Activity);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0
             .0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Tower layer marking every call of the worker's gRPC service as activity.
#[derive(Clone)]
struct ActivityLayer(Activity);

impl<S> tower_layer::Layer<S> for ActivityLayer {
    type Service = Tracked<S>;
    fn layer(&self, inner: S) -> Tracked<S> {
        Tracked {
            inner,
            activity: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    activity: Activity,
}

impl<S, B> tower_service::Service<tonic::codegen::http::Request<B>> for Tracked<S>
where
    S: tower_service::Service<tonic::codegen::http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: tonic::codegen::http::Request<B>) -> Self::Future {
        let guard = self.activity.begin();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            drop(guard);
            r
        })
    }
}
