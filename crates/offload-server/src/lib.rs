//! `offload serve`: this machine's devices over gRPC.
//!
//! * Every client connection opens a **session** (the Hello stream). With
//!   [`Sessions::Workers`] (what `offload serve` uses) each session runs in
//!   its own worker process ([`worker`]), started and watched by the
//!   supervisor (`supervisor` module): a kernel that crashes, exits or reads
//!   wild addresses ends only its session. Inside a session the server also
//!   checks every device address a client names against the session's own
//!   allocations and program globals; when the Hello stream ends the
//!   session's memory and programs are freed (its worker exits).
//! * A shared-secret **token** (`OFFLOAD_REMOTE_TOKEN` or `--token-file`) is
//!   checked on every call. A session is named by an unguessable credential
//!   (a public selector plus 128 random bits from the OS), compared in
//!   constant time, as are the token and the data-channel secrets. Listening beyond loopback without a token is
//!   refused unless `insecure` is set. TLS (rustls) is optional.
//! * Logs are structured (`tracing`): one line per session event.

mod data;
mod incoming;
mod local;
pub mod metrics;
pub mod mpi;
pub mod output;
mod peers;
mod refusals;
mod requests;
pub mod sandbox;
mod secret;
mod service;
mod session;
mod supervisor;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;

use offload_core::{Config, Runtime};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

pub use sandbox::SandboxOptions;
pub use service::{Service, ERRC_HEADER};
pub use supervisor::{WorkerCommand, DEFAULT_SPARE_WORKERS};

/// Where the sessions of a server run.
pub enum Sessions {
    /// In the serving process, on these devices (one address space for
    /// every client: for tests and trusted setups).
    InProcess(Arc<Runtime>),
    /// Each in its own worker process started with this command (what
    /// `offload serve` does): a session's crash or wild kernel reaches no
    /// other session.
    Workers(WorkerCommand),
}

impl From<Arc<Runtime>> for Sessions {
    fn from(runtime: Arc<Runtime>) -> Self {
        Sessions::InProcess(runtime)
    }
}

/// Largest gRPC message either side accepts (chunks are smaller).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// HTTP/2 flow-control window per stream (the connection gets twice that).
pub const WINDOW_BYTES: u32 = 16 << 20;

/// Largest HTTP/2 frame we accept (the protocol's default is 16 KiB).
pub const FRAME_BYTES: u32 = 1 << 20;

/// How to serve.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    pub listen: Option<SocketAddr>,
    pub token: Option<String>,
    pub insecure: bool,
    /// PEM certificate chain and private key for TLS.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Address of the bulk-data side channel (default: the gRPC address's
    /// IP with a free port). Must be reachable by clients (publish it too
    /// when the server runs in a container).
    pub data_listen: Option<SocketAddr>,
    /// Do not offer same-host queues (`--no-local-queues`): clients on this
    /// machine run their queues over gRPC too.
    pub no_local_queues: bool,
    /// Sessions served at once (`--max-sessions`); more are refused.
    pub max_sessions: Option<usize>,
    /// Device memory one session may hold (`--max-session-memory`, bytes).
    pub max_session_memory: Option<u64>,
    /// Address of the Prometheus metrics endpoint (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// How session workers are sandboxed (`--insecure-no-sandbox`, `--sandbox-*`).
    pub sandbox: SandboxOptions,
    /// A session without calls or copies this long ends
    /// (`--session-idle-timeout`; default [`DEFAULT_IDLE_TIMEOUT`]; zero: never).
    pub session_idle_timeout: Option<std::time::Duration>,
    /// After SIGTERM, how long calls in flight may finish before sessions
    /// end (`--drain-timeout`; default [`DEFAULT_DRAIN_TIMEOUT`]).
    pub drain_timeout: Option<std::time::Duration>,
    /// Sessions run in this process (`--sessions-in-process`): unsandboxed.
    pub in_process: bool,
    /// Worker processes kept started (sandboxed, devices open) ahead of
    /// the next Hellos (`--spare-workers`; default
    /// [`supervisor::DEFAULT_SPARE_WORKERS`]; 0: each session starts its
    /// own). Each is used for one session only, and replaced.
    pub spare_workers: Option<usize>,
}

/// Default `--session-idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);
/// Default `--drain-timeout`.
pub const DEFAULT_DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Largest message the supervisor accepts: it serves only Ping and Hello,
/// before any session exists (bulk calls go to the session's worker).
pub const MAX_SUPERVISOR_MESSAGE_BYTES: usize = 64 << 10;

/// The gRPC server settings both the main server and session workers use.
pub(crate) fn grpc_server_builder() -> Server {
    Server::builder()
        // Large HTTP/2 windows: bulk copies must not stall on flow control.
        .initial_stream_window_size(Some(WINDOW_BYTES))
        .initial_connection_window_size(Some(2 * WINDOW_BYTES))
        .max_frame_size(Some(FRAME_BYTES))
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(5)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
}

/// The service with the message size limits.
pub(crate) fn offload_service(
    service: Service,
) -> offload_proto::offload_server::OffloadServer<Service> {
    offload_proto::offload_server::OffloadServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// Default listening address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50151";

/// The server's own devices: every built-in plugin except `remote` (a server
/// does not proxy other servers), honouring `OFFLOAD_PLUGINS`.
pub fn local_runtime() -> Runtime {
    Runtime::new(Config::get().clone(), &offload_plugins::local())
}

/// Refuse unsafe combinations before binding.
pub fn validate(options: &ServeOptions, addr: SocketAddr) -> Result<(), String> {
    if options.token.is_none() && !addr.ip().is_loopback() && !options.insecure {
        return Err(format!(
            "refusing to listen on non-loopback address {addr} without a token: set OFFLOAD_REMOTE_TOKEN or --token-file (or pass --insecure)"
        ));
    }
    let unsandboxed = options.in_process || sandbox::detect(&options.sandbox) == sandbox::Mode::Off;
    if unsandboxed && !addr.ip().is_loopback() && !options.sandbox.disabled {
        return Err(format!(
            "refusing to serve non-loopback address {addr} without a session sandbox ({}): run as root or allow user namespaces, or pass --insecure-no-sandbox",
            if options.in_process { "--sessions-in-process" } else { "not root and no user namespaces" }
        ));
    }
    Ok(())
}

/// Bind, then serve until `shutdown` resolves. `on_bound` receives the
/// actual address (useful with port 0).
pub async fn serve(
    options: ServeOptions,
    sessions: impl Into<Sessions>,
    on_bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr = options
        .listen
        .unwrap_or_else(|| DEFAULT_LISTEN.parse().unwrap());
    validate(&options, addr)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let sessions = sessions.into();
    // The bulk-data side channel (plain TCP: not offered under TLS).
    let data_listener = if options.tls.is_none() {
        let data_addr = options
            .data_listen
            .unwrap_or_else(|| SocketAddr::new(bound.ip(), 0));
        let l = std::net::TcpListener::bind(data_addr).map_err(|e| {
            format!("cannot listen on {data_addr} (bulk-data channel, --data-listen): {e}")
        })?;
        tracing::info!(addr = %l.local_addr()?, "bulk-data channel listening");
        Some(l)
    } else {
        None
    };
    let data_port = match &data_listener {
        Some(l) => l.local_addr()?.port(),
        None => 0,
    };
    // Same-host queues (authenticated by the session's data secret; never
    // on the network, so offered under TLS too): a failure to bind only
    // leaves them out.
    let local_queues = match !options.no_local_queues {
        true => match local::bind() {
            Ok(bound) => Some(bound),
            Err(e) => {
                tracing::warn!(error = %e, "same-host queues not offered: cannot bind their socket");
                None
            }
        },
        false => None,
    };
    let local_name = local_queues.as_ref().map(|(_, name)| name.clone());
    // Shutdown: the signal stops accepting and ends every session stream;
    // calls in flight get DRAIN_GRACE to finish.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let limits = service::Limits {
        max_sessions: options.max_sessions,
        max_session_memory: options.max_session_memory,
    };
    let metrics = Arc::new(metrics::Metrics::default());
    let (service, workers) = match sessions {
        Sessions::InProcess(runtime) => {
            tracing::info!(
                devices = runtime.devices().len(),
                "sessions run in this process"
            );
            offload_core::stats::enable();
            output::log_line("offload serve: session sandbox OFF (--sessions-in-process): every session shares this process");
            metrics.count_local(runtime.clone());
            (
                Service::new(runtime, options.token.clone(), data_port),
                None,
            )
        }
        Sessions::Workers(command) => {
            tracing::info!(worker = %command.program.display(), "each session runs in its own process");
            // Nothing of the same uid may read this process's memory.
            if let Err(e) = nix::sys::prctl::set_dumpable(false) {
                tracing::warn!(error = %e, "cannot make the server undumpable");
            }
            let mode = sandbox::detect(&options.sandbox);
            output::log_line(&sandbox::describe(mode, &options.sandbox));
            let workers = Arc::new(supervisor::Workers::new(
                supervisor::WorkerSettings {
                    command,
                    tls: options.tls.clone(),
                    sandbox: mode,
                    sandbox_options: options.sandbox.clone(),
                    idle_timeout: options.session_idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT),
                    spare_workers: options
                        .spare_workers
                        .unwrap_or(supervisor::DEFAULT_SPARE_WORKERS),
                    quota: options.max_session_memory,
                },
                metrics.clone(),
            ));
            // The first session's worker, started (and sandboxed) now.
            workers.refill_spares();
            let service = Service::supervisor(workers.clone(), options.token.clone(), data_port);
            (service, Some(workers))
        }
    };
    // Unauthenticated connections of the gRPC port, per peer; an accepted
    // Hello lifts its connection's deadline.
    let grpc_peers = Arc::new(peers::Peers::default());
    let service = service
        .offer_local_queues(local_name)
        .stop_sessions_on(stop_rx.clone())
        .with_limits(limits)
        .mark_sessions_on(grpc_peers.clone());
    metrics.watch_refusals(service.refusals());
    if let Some(addr) = options.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr} (metrics, --metrics-listen): {e}"))?;
        tracing::info!(addr = %listener.local_addr()?, "metrics at /metrics");
        let active: Box<dyn Fn() -> usize + Send + Sync> = match &workers {
            Some(w) => {
                let w = w.clone();
                Box::new(move || w.len())
            }
            None => {
                let sessions = service.sessions();
                Box::new(move || sessions.lock().map(|m| m.len()).unwrap_or(0))
            }
        };
        metrics::spawn(listener, metrics.clone(), active);
    }
    let destination = match &workers {
        Some(w) => data::Destination::Workers(w.clone()),
        None => data::Destination::InProcess(service.sessions()),
    };
    if let Some(listener) = data_listener {
        data::spawn(listener, destination.clone());
    }
    if let Some((listener, name)) = local_queues {
        tracing::info!(socket = %format!("@{name}"), "same-host queues listening");
        local::spawn(listener, destination);
    }
    let supervising = workers.is_some();
    let svc = if supervising {
        // Before a session exists: small messages, small windows.
        offload_proto::offload_server::OffloadServer::new(service)
            .max_decoding_message_size(MAX_SUPERVISOR_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    } else {
        offload_service(service)
    };
    let mut builder = if supervising {
        Server::builder()
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(5)))
            .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
    } else {
        grpc_server_builder()
    };
    if let Some((cert, key)) = &options.tls {
        builder =
            builder.tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))?;
    }
    tracing::info!(%bound, tls = options.tls.is_some(), token = options.token.is_some(), "offload server listening");
    on_bound(bound);
    // The standard gRPC health service: SERVING until shutdown begins.
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<offload_proto::offload_server::OffloadServer<Service>>()
        .await;
    let drain = options.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT);
    let draining = workers.clone();
    let signal = async move {
        shutdown.await;
        if let Some(w) = &draining {
            w.set_drain(drain);
        }
        health
            .set_not_serving::<offload_proto::offload_server::OffloadServer<Service>>()
            .await;
        let _ = stop_tx.send(true);
    };
    let router = builder.add_service(health_service).add_service(svc);
    let workers_left = workers.clone();
    // `tcp_nodelay` of the builder applies only to listeners it binds
    // itself: the incoming streams set it on every accepted socket (without
    // it a reply that leaves in pieces waits for the peer's delayed ACK).
    let serving: std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), tonic::transport::Error>> + Send>,
    > =
        match workers {
            Some(workers) => Box::pin(router.serve_with_incoming_shutdown(
                incoming::route(listener, workers, grpc_peers),
                signal,
            )),
            None => Box::pin(router.serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                signal,
            )),
        };
    let mut stopping = stop_rx;
    let grace = async move {
        let _ = stopping.wait_for(|s| *s).await;
        tokio::time::sleep(drain + std::time::Duration::from_secs(1)).await;
    };
    tokio::select! {
        r = serving => r?,
        _ = grace => tracing::warn!(drain_secs = drain.as_secs(), "calls still in flight after --drain-timeout; stopping anyway"),
    }
    if let Some(w) = workers_left {
        // Sessions end: workers that are not done by now are killed.
        if tokio::time::timeout(std::time::Duration::from_secs(2), w.all_exited())
            .await
            .is_err()
        {
            w.kill_all();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), w.all_exited()).await;
        }
    }
    tracing::info!("offload server stopped");
    Ok(())
}
