//! One server connection: channel, session, liveness, and blocking helpers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use offload_core::{Config, Error, ErrorCode, Result};
use offload_proto::offload_client::OffloadClient;
use offload_proto::{
    session_connection, HelloEvent, HelloRequest, PROTOCOL_VERSION, SESSION_HEADER,
    WORKER_SIGNAL_HEADER,
};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// Metadata key of the `ol_errc_t` carried by failed calls (server side).
const ERRC_HEADER: &str = "x-offload-errc";
/// Largest gRPC message accepted or sent (the server's limit too).
pub(crate) const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Refuse a request of `len` encoded bytes that exceeds
/// [`MAX_MESSAGE_BYTES`] before it is sent, with an error naming the limit
/// (the transport would only say "h2 protocol error").
pub(crate) fn fits(addr: &str, what: &str, len: usize) -> Result<()> {
    if len <= MAX_MESSAGE_BYTES {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::InvalidSize,
        format!(
            "remote server {addr}: {what}: the request is {len} bytes, over the message size limit of {MAX_MESSAGE_BYTES} bytes ({} MiB) of the remote protocol (split the images over several binaries or load them one by one)",
            MAX_MESSAGE_BYTES >> 20
        ),
    ))
}

/// The plugin's own async runtime (two I/O threads).
pub fn io_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("offload-remote-io")
            .enable_all()
            .build()
            .expect("starting the remote plugin's I/O runtime")
    })
}

/// Run `fut` to completion from synchronous code (also from inside another
/// tokio runtime, where `block_on` itself would panic).
pub fn block_on<F: std::future::Future + Send>(fut: F) -> F::Output
where
    F::Output: Send,
{
    // Inside another runtime `block_on` would panic, and during process exit
    // (atexit handlers, e.g. __tgt_unregister_lib) this thread's tokio
    // context is already destroyed: use a helper thread in both cases.
    let usable_here = match tokio::runtime::Handle::try_current() {
        Ok(_) => false,
        Err(e) => !e.is_thread_local_destroyed(),
    };
    if usable_here {
        io_runtime().block_on(fut)
    } else {
        std::thread::scope(|s| {
            s.spawn(|| io_runtime().block_on(fut))
                .join()
                .expect("remote I/O thread")
        })
    }
}

#[derive(Clone)]
pub struct Auth {
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
    session: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl tonic::service::Interceptor for Auth {
    fn call(
        &mut self,
        mut req: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.token {
            req.metadata_mut().insert("authorization", t.clone());
        }
        if let Some(s) = &self.session {
            req.metadata_mut().insert(SESSION_HEADER, s.clone());
        }
        Ok(req)
    }
}

pub type Client = OffloadClient<InterceptedService<Channel, Auth>>;

/// A live session with one server.
pub struct Connection {
    pub addr: String,
    pub client: Client,
    pub session: String,
    pub server: String,
    pub hello: HelloEvent,
    alive: Arc<AtomicBool>,
    /// Why the session ended, once it has (the server's last word on the
    /// Hello stream, e.g. how the session's worker process died).
    ended: Arc<std::sync::Mutex<Option<String>>>,
    /// The signal that killed the session's worker process (0: none known).
    signal: Arc<std::sync::atomic::AtomicI32>,
    pub timeout: Duration,
    pub chunk_size: usize,
    /// Bulk-data side channel, when the server offers one.
    pub data: Option<crate::data::DataChannel>,
    /// Same-host queues, when the server offers them and is on this machine.
    pub(crate) local: Option<crate::local::LocalQueues>,
    /// The session's queues, for [`crate::queue::fence`].
    pub(crate) queues: std::sync::Mutex<Vec<std::sync::Weak<crate::queue::Shared>>>,
    /// Some queue has handed over a copy unsynced (the fence has work).
    pub(crate) unsynced_copies: AtomicBool,
    /// Numbers the session's queues (from 1).
    pub(crate) next_queue: AtomicU64,
    /// The one queue that has sent work that may change device memory
    /// (0: none yet; [`MANY_WRITERS`]: more than one).
    pub(crate) writer: AtomicU64,
    /// How many such operations have been sent.
    pub(crate) device_writes: AtomicU64,
    /// The task holding the session's Hello stream: the session lives as
    /// long as the stream.
    watcher: tokio::task::AbortHandle,
}

impl Drop for Connection {
    /// The client is done with the session: end its Hello stream, so the
    /// server closes the session now (not when this process exits or the
    /// session's idle timeout passes).
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// `Connection::writer` once two queues have sent work that may write.
pub(crate) const MANY_WRITERS: u64 = u64::MAX;

/// Turn a gRPC status into a runtime error that names the server.
pub fn rpc_error(addr: &str, what: &str, s: tonic::Status) -> Error {
    let code = s
        .metadata()
        .get(ERRC_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok())
        .and_then(ErrorCode::from_raw);
    let code = code.unwrap_or(match s.code() {
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => ErrorCode::InvalidArgument,
        tonic::Code::InvalidArgument => ErrorCode::InvalidArgument,
        tonic::Code::NotFound => ErrorCode::NotFound,
        tonic::Code::ResourceExhausted => ErrorCode::OutOfResources,
        tonic::Code::Unimplemented => ErrorCode::Unsupported,
        _ => ErrorCode::BackendFailure,
    });
    // Transport failures keep the useful part ("connection refused") in
    // the status's causes.
    let detail = match std::error::Error::source(&s) {
        Some(cause) => format!("{}: {}", s.message(), error_chain(cause)),
        None => s.message().to_string(),
    };
    let msg = if s.code() == tonic::Code::Unavailable || s.code() == tonic::Code::Cancelled {
        format!(
            "remote server {addr}: {what}: server unreachable or gone ({})",
            s.message()
        )
    } else {
        format!("remote server {addr}: {what}: {detail}")
    };
    Error::new(code, msg)
}

impl Connection {
    /// Connect, authenticate and open a session.
    pub fn open(addr: &str, config: &Config) -> Result<Arc<Connection>> {
        let timeout = Duration::from_secs(config.remote_timeout_secs);
        let tls_ca = config.remote_tls_ca.clone();
        let scheme = if tls_ca.is_some() { "https" } else { "http" };
        let uri = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("{scheme}://{addr}")
        };
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            Error::new(
                ErrorCode::BackendFailure,
                format!("remote server {addr}: {what}: {e}"),
            )
        };
        let mut endpoint = Endpoint::from_shared(uri.clone())
            .map_err(|e| fail("bad address", &e))?
            .connect_timeout(timeout)
            // Small requests and replies must not wait for delayed ACKs.
            .tcp_nodelay(true)
            // Large HTTP/2 windows: bulk copies must not stall on flow control.
            .initial_stream_window_size(16 << 20)
            .initial_connection_window_size(32 << 20)
            .max_frame_size(1 << 20)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(true);
        if let Some(ca) = &tls_ca {
            let pem = std::fs::read(ca).map_err(|e| fail("reading OFFLOAD_REMOTE_TLS_CA", &e))?;
            let tls =
                ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(pem));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| fail("TLS configuration", &e))?;
        }
        let token = match &config.remote_token {
            Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| {
                fail(
                    "token",
                    &"OFFLOAD_REMOTE_TOKEN has characters not allowed in a header",
                )
            })?),
            None => None,
        };
        let addr_owned = addr.to_string();
        let session_endpoint = endpoint.clone();
        block_on(async move {
            let channel = tokio::time::timeout(timeout, endpoint.connect())
                .await
                .map_err(|_| {
                    fail(
                        "connect",
                        &format!("timed out after {}s", timeout.as_secs()),
                    )
                })?
                .map_err(|e| fail("connect", &error_chain(&e)))?;
            let mut client = OffloadClient::with_interceptor(
                channel.clone(),
                Auth {
                    token: token.clone(),
                    session: None,
                },
            );
            let hello = HelloRequest {
                client: client_name(),
                protocol_version: PROTOCOL_VERSION,
            };
            let mut stream = tokio::time::timeout(timeout, client.hello(hello))
                .await
                .map_err(|_| fail("hello", &"timed out"))?
                .map_err(|s| rpc_error(&addr_owned, "hello", s))?
                .into_inner();
            let first = tokio::time::timeout(timeout, stream.message())
                .await
                .map_err(|_| fail("hello", &"timed out"))?
                .map_err(|s| rpc_error(&addr_owned, "hello", s))?
                .ok_or_else(|| fail("hello", &"server closed the session at once"))?;
            let alive = Arc::new(AtomicBool::new(true));
            let ended = Arc::new(std::sync::Mutex::new(None));
            let signal = Arc::new(std::sync::atomic::AtomicI32::new(0));
            // The session lives as long as this stream: watch it.
            let (watch, why, killed_by) = (alive.clone(), ended.clone(), signal.clone());
            let who = addr_owned.clone();
            let watcher = tokio::spawn(async move {
                let end = loop {
                    match stream.message().await {
                        // After a worker died: what its device code wrote
                        // last, before the status that says so.
                        Ok(Some(event)) => {
                            crate::output::emit(event.output.as_ref());
                            continue;
                        }
                        Ok(None) => break "the server closed the session".to_string(),
                        Err(e) => {
                            let sig = e
                                .metadata()
                                .get(WORKER_SIGNAL_HEADER)
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.parse::<i32>().ok())
                                .filter(|&s| s > 0 && s < 65);
                            if let Some(sig) = sig {
                                killed_by.store(sig, Ordering::SeqCst);
                            }
                            break e.message().to_string();
                        }
                    }
                };
                *why.lock().unwrap_or_else(|e| e.into_inner()) = Some(end.clone());
                watch.store(false, Ordering::SeqCst);
                tracing::warn!(server = %who, reason = %end, "remote server connection lost");
            })
            .abort_handle();
            let session: MetadataValue<_> = first
                .session
                .parse()
                .map_err(|_| fail("hello", &"bad session id"))?;
            // A server running the session in its own process takes the
            // session's calls on a second connection that names the session.
            let channel = if first.session_connection {
                tokio::time::timeout(timeout, connect_session(&session_endpoint, &first.session))
                    .await
                    .map_err(|_| fail("session connection", &"timed out"))?
                    .map_err(|e| fail("session connection", &e))?
            } else {
                channel
            };
            let client = OffloadClient::with_interceptor(
                channel,
                Auth {
                    token,
                    session: Some(session),
                },
            )
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
            // The credential is `<id>.<secret>`: log only the public id.
            let public_id = first.session.split('.').next().unwrap_or_default();
            let data = match first.data_port {
                0 => None,
                port => crate::data::DataChannel::new(
                    &addr_owned,
                    port as u16,
                    first.data_secret.clone(),
                    timeout,
                ),
            };
            let local = crate::local::LocalQueues::new(
                &addr_owned,
                &first.local_queues,
                &first.data_secret,
                timeout,
            );
            tracing::info!(server = %addr_owned, session = %public_id, devices = first.devices.len(), same_host_queues = local.is_some(), "remote session opened");
            Ok(Arc::new(Connection {
                addr: addr_owned,
                client,
                session: first.session.clone(),
                server: first.server.clone(),
                hello: first,
                alive,
                ended,
                signal,
                timeout,
                chunk_size: config.remote_chunk_size,
                local,
                data,
                queues: Default::default(),
                unsynced_copies: AtomicBool::new(false),
                next_queue: AtomicU64::new(1),
                writer: AtomicU64::new(0),
                device_writes: AtomicU64::new(0),
                watcher,
            }))
        })
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Error out early when the server is known to be gone.
    pub fn check_alive(&self, what: &str) -> Result<()> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(self.gone(what))
        }
    }

    /// The error for a call after the session ended, saying why.
    pub fn gone(&self, what: &str) -> Error {
        let why = self.ended.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let why = why.unwrap_or_else(|| "connection lost".to_string());
        let e = Error::new(
            ErrorCode::BackendFailure,
            format!(
                "remote server {}: {what}: the session is gone ({why})",
                self.addr
            ),
        );
        match self.signal.load(Ordering::SeqCst) {
            0 => e,
            sig => e.with_signal(sig),
        }
    }

    /// After a call failed for want of a connection: the session's end, if
    /// the server reported one in time (a worker's crash closes the call's
    /// connection a moment before the Hello stream says why; on a loaded
    /// machine that moment can be long, and this path is only taken after a
    /// failure, so it waits up to 2 s).
    pub(crate) async fn end_of_session(&self, what: &str) -> Option<Error> {
        for _ in 0..200 {
            if !self.is_alive() {
                return Some(self.gone(what));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    /// A unary call with the connection's timeout.
    pub fn call<T, F>(&self, what: &str, f: impl FnOnce(Client) -> F) -> Result<T>
    where
        F: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>
            + Send,
        T: Send,
    {
        self.check_alive(what)?;
        // Frees, loads and the rest run after copies still in flight.
        crate::queue::fence(self, None);
        let client = self.client.clone();
        let timeout = self.timeout;
        let fut = f(client);
        block_on(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(Ok(r)) => Ok(r.into_inner()),
                Ok(Err(s)) if connection_lost(&s) => match self.end_of_session(what).await {
                    Some(e) => Err(e),
                    None => Err(rpc_error(&self.addr, what, s)),
                },
                Ok(Err(s)) => Err(rpc_error(&self.addr, what, s)),
                Err(_) => Err(Error::new(
                    ErrorCode::BackendFailure,
                    format!(
                        "remote server {}: {what}: no answer within {}s (OFFLOAD_REMOTE_TIMEOUT)",
                        self.addr,
                        timeout.as_secs()
                    ),
                )),
            }
        })
    }
}

/// Whether a call failed because its connection went away.
pub fn connection_lost(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
    )
}

/// A channel to the process of the session named by `credential`
/// (`<id>.<secret>`, `HelloEvent.session`) on a server that runs each
/// session in its own process (`HelloEvent.session_connection`). The
/// preamble carries the whole credential: the server refuses the
/// connection unless its secret matches.
pub async fn connect_session(
    endpoint: &Endpoint,
    credential: &str,
) -> std::result::Result<Channel, String> {
    let public_id = credential.split('.').next().unwrap_or_default();
    let preamble = session_connection::preamble(credential)
        .ok_or_else(|| format!("session '{public_id}': not a session credential"))?;
    endpoint
        .connect_with_connector(tower::service_fn(move |uri: tonic::transport::Uri| {
            open_session_socket(uri, preamble)
        }))
        .await
        .map_err(|e| error_chain(&e))
}

/// Connect to the server for a session connection: TCP (no delay), then
/// the preamble with the session's credential; gRPC (or TLS) follows on the socket.
async fn open_session_socket(
    uri: tonic::transport::Uri,
    preamble: [u8; session_connection::PREAMBLE_BYTES],
) -> std::io::Result<hyper_util::rt::TokioIo<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    let host = uri
        .host()
        .ok_or_else(|| std::io::Error::other("address without a host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let default_port = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let port = uri.port_u16().unwrap_or(default_port);
    let mut stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    stream.set_nodelay(true)?;
    stream.write_all(&preamble).await?;
    Ok(hyper_util::rt::TokioIo::new(stream))
}

/// An error with its causes: transport errors hide the useful part there.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut last = text.clone();
    let mut cause = e.source();
    while let Some(c) = cause {
        // Wrappers often repeat their cause's text ("tcp connect error:
        // tcp connect error: ..."): say each part once.
        let part = c.to_string();
        if part != last {
            text.push_str(": ");
            text.push_str(&part);
        }
        last = part;
        cause = c.source();
    }
    text
}

fn client_name() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    format!(
        "{} (pid {})",
        exe.unwrap_or_else(|| "?".into()),
        std::process::id()
    )
}
