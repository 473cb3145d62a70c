//! The gRPC service: each call checks the token and the session, then runs
//! the operation on the server's local devices.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_core::Stream;
use offload_core::plugin::{KernelArgs, LaunchConfig};
use offload_core::{DevicePtr, Error, ErrorCode, Location, Runtime};
use offload_proto::offload_server::Offload;
use offload_proto::*;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};
use tracing::info;

use crate::requests;
use crate::session::Session;

/// Metadata key carrying the `ol_errc_t` of a failed call.
pub const ERRC_HEADER: &str = "x-offload-errc";

pub struct Service {
    mode: Mode,
    /// Port of the bulk-data listener (0 = none).
    data_port: u16,
    /// Abstract socket name of the same-host queues, if offered.
    local_queues: Option<String>,
    /// The server's token, kept only hashed.
    token: Option<crate::secret::Hashed>,
    sessions: Arc<Mutex<HashMap<String, Arc<Session>>>>,
    server_name: String,
    /// Turns true when the server shuts down: session streams end.
    stopping: tokio::sync::watch::Receiver<bool>,
    limits: Limits,
    /// Refused authentications (logged with rate limiting, counted).
    refusals: Arc<crate::refusals::Refusals>,
    /// The port's unauthenticated connections: an accepted Hello marks its
    /// connection (no deadline from then on).
    peers: Option<Arc<crate::peers::Peers>>,
}

/// Where sessions live.
enum Mode {
    /// In this process, sharing its devices (tests; `offload serve
    /// --sessions-in-process`).
    InProcess(Arc<Runtime>),
    /// This process is one session's worker: it serves that session's
    /// calls; Hello is the supervisor's.
    Worker,
    /// In worker processes, one per session: this process says Hello and
    /// hands each session its sockets.
    Supervisor(Arc<crate::supervisor::Workers>),
}

/// Per-server limits (`offload serve --max-sessions`, `--max-session-memory`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    pub max_sessions: Option<usize>,
    pub max_session_memory: Option<u64>,
}

impl Service {
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// An accepted Hello marks its connection in `peers` as authenticated.
    pub(crate) fn mark_sessions_on(mut self, peers: Arc<crate::peers::Peers>) -> Self {
        self.peers = Some(peers);
        self
    }

    /// Greetings name the same-host queues' socket (`local::bind`).
    pub(crate) fn offer_local_queues(mut self, name: Option<String>) -> Self {
        self.local_queues = name;
        self
    }

    /// Sessions end (their Hello streams close) once `stopping` turns true.
    pub fn stop_sessions_on(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stopping = stopping;
        self
    }

    pub fn new(runtime: Arc<Runtime>, token: Option<String>, data_port: u16) -> Self {
        Self::with_mode(Mode::InProcess(runtime), token, data_port)
    }

    fn with_mode(mode: Mode, token: Option<String>, data_port: u16) -> Self {
        Service {
            mode,
            data_port,
            local_queues: None,
            token: token.as_deref().map(crate::secret::Hashed::new),
            sessions: Default::default(),
            server_name: server_name(),
            stopping: tokio::sync::watch::channel(false).1,
            limits: Limits::default(),
            refusals: Default::default(),
            peers: None,
        }
    }

    /// Refused authentications of this service.
    pub(crate) fn refusals(&self) -> Arc<crate::refusals::Refusals> {
        self.refusals.clone()
    }

    /// The service of a session's worker process: `session` is the only
    /// one it serves.
    pub(crate) fn for_worker(
        runtime: Arc<Runtime>,
        token: Option<String>,
        session: Arc<Session>,
    ) -> Self {
        drop(runtime);
        let s = Self::with_mode(Mode::Worker, token, 0);
        s.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.id.clone(), session);
        s
    }

    /// The supervisor's service: Ping and Hello; sessions run in `workers`.
    pub(crate) fn supervisor(
        workers: Arc<crate::supervisor::Workers>,
        token: Option<String>,
        data_port: u16,
    ) -> Self {
        Self::with_mode(Mode::Supervisor(workers), token, data_port)
    }

    pub fn sessions(&self) -> Arc<Mutex<HashMap<String, Arc<Session>>>> {
        self.sessions.clone()
    }

    fn authorize<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        match given.and_then(|g| g.strip_prefix("Bearer ")) {
            Some(g) if token.matches(g) => Ok(()),
            None => {
                self.refusals.note(req.remote_addr(), "no token");
                Err(Status::unauthenticated(
                    "offload server: this server requires a token; set OFFLOAD_REMOTE_TOKEN on the client",
                ))
            }
            Some(_) => {
                self.refusals.note(req.remote_addr(), "wrong token");
                Err(Status::unauthenticated(
                    "offload server: wrong token (OFFLOAD_REMOTE_TOKEN does not match)",
                ))
            }
        }
    }

    /// The session named by the call's `x-offload-session` credential
    /// (`<id>.<secret>`): looked up by its public id, then the secret is
    /// compared in constant time. Refusals never echo the credential.
    fn session<T>(&self, req: &Request<T>) -> Result<Arc<Session>, Status> {
        self.authorize(req)?;
        if let Mode::Supervisor(_) = self.mode {
            return Err(Status::failed_precondition(
                "offload server: sessions run in their own processes here; send session calls on the session connection (HelloEvent.session_connection)",
            ));
        }
        let credential = req
            .metadata()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                Status::failed_precondition("offload server: no session; call Hello first")
            })?;
        let refused = || {
            Status::failed_precondition(
                "offload server: the session is not open (unknown or closed session credential)",
            )
        };
        let found = credential.split_once('.').and_then(|(id, secret)| {
            let session = self
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(id)
                .cloned();
            session.filter(|s| s.secret_matches(secret))
        });
        found.ok_or_else(|| {
            self.refusals
                .note(req.remote_addr(), "unknown or closed session credential");
            refused()
        })
    }
}

/// How this server names itself to clients: host name and process id.
pub(crate) fn server_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{} (pid {})", host.trim(), std::process::id())
}

impl Service {
    /// Hello on a supervisor: start the session's worker process and keep
    /// the stream open while it runs. Its end (crash, exit) ends the stream
    /// with a status saying how; the client going away ends the worker.
    async fn hello_supervised(
        &self,
        workers: Arc<crate::supervisor::Workers>,
        peer: String,
        hello: HelloRequest,
        peer_addr: Option<std::net::SocketAddr>,
    ) -> R<BoxStream<HelloEvent>> {
        let counted = |c: &std::sync::atomic::AtomicU64| {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        // The place is taken before the worker starts: concurrent Hellos
        // cannot overshoot --max-sessions.
        let Some(admission) = workers.admit(self.limits.max_sessions) else {
            let max = self.limits.max_sessions.unwrap_or(0);
            counted(&workers.metrics.sessions_refused);
            tracing::warn!(%peer, max, "session refused: server full");
            return Err(Status::resource_exhausted(format!(
                "offload server: {max} sessions open, the most it serves (offload serve --max-sessions); try again later"
            )));
        };
        let started = std::time::Instant::now();
        let crate::supervisor::Started {
            worker,
            hello: mut greeting,
            credential,
            data_secret,
        } = workers
            .start(hello.client.clone(), self.limits.max_session_memory)
            .await
            .map_err(|e| {
                counted(&workers.metrics.sessions_refused);
                tracing::error!(%peer, error = %e, "session refused: no worker");
                Status::unavailable(format!("offload server: cannot start the session: {e}"))
            })?;
        counted(&workers.metrics.sessions_opened);
        if let (Some(peers), Some(addr)) = (&self.peers, peer_addr) {
            peers.authenticated(addr);
        }
        info!(session = %worker.id, client = %hello.client, %peer, worker_pid = worker.pid, start_us = started.elapsed().as_micros() as u64, "session opened");
        greeting.session = credential;
        greeting.protocol_version = PROTOCOL_VERSION;
        greeting.session_connection = true;
        greeting.data_port = self.data_port as u32;
        // The secret authenticates data connections and same-host queues.
        greeting.data_secret = if self.data_port != 0 || self.local_queues.is_some() {
            data_secret
        } else {
            String::new()
        };
        greeting.local_queues = self.local_queues.clone().unwrap_or_default();
        let mut stopping = self.stopping.clone();
        let stopped = Box::pin(async move {
            if stopping.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        let ended = Box::pin(worker.ended());
        Ok(Response::new(Box::pin(SupervisedStream {
            greeting: Some(greeting),
            last: std::collections::VecDeque::new(),
            guard: WorkerGuard {
                worker,
                workers,
                client: hello.client,
                _admission: admission,
            },
            stopped,
            ended,
            done: false,
            draining: false,
        })))
    }
}

/// Most output bytes in one Hello event (clients decode at most 4 MiB).
const LAST_OUTPUT_EVENT: usize = 1 << 20;

/// `output` in pieces of at most `piece` bytes (stdout's pieces first).
pub(crate) fn split_output(
    output: offload_proto::Output,
    piece: usize,
) -> Vec<offload_proto::Output> {
    let mut pieces = Vec::new();
    for (bytes, is_stdout) in [(output.stdout, true), (output.stderr, false)] {
        for chunk in bytes.chunks(piece) {
            let chunk = bytes.slice_ref(chunk);
            pieces.push(if is_stdout {
                offload_proto::Output {
                    stdout: chunk,
                    ..Default::default()
                }
            } else {
                offload_proto::Output {
                    stderr: chunk,
                    ..Default::default()
                }
            });
        }
    }
    pieces
}

/// A supervised session's Hello stream.
struct SupervisedStream {
    greeting: Option<HelloEvent>,
    /// After the worker died: what its device code wrote last (in events
    /// of at most [`LAST_OUTPUT_EVENT`] bytes), then the status saying how
    /// it ended.
    last: std::collections::VecDeque<Result<HelloEvent, Status>>,
    guard: WorkerGuard,
    stopped: Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// Resolves with how the worker process ended.
    ended: Pin<Box<dyn std::future::Future<Output = crate::supervisor::Ended> + Send>>,
    done: bool,
    /// The server is stopping: the worker was told to finish; the stream
    /// ends when it has.
    draining: bool,
}

struct WorkerGuard {
    worker: Arc<crate::supervisor::Worker>,
    workers: Arc<crate::supervisor::Workers>,
    client: String,
    /// The session's place among --max-sessions, given back at its end.
    _admission: crate::supervisor::Admission,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.workers.close(&self.worker);
        info!(session = %self.worker.id, client = %self.client, "session closed");
    }
}

impl Stream for SupervisedStream {
    type Item = Result<HelloEvent, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(g) = self.greeting.take() {
            return Poll::Ready(Some(Ok(g)));
        }
        if let Some(last) = self.last.pop_front() {
            if self.last.is_empty() {
                self.done = true;
            }
            return Poll::Ready(Some(last));
        }
        if let Poll::Ready(ended) = self.ended.as_mut().poll(cx) {
            if self.draining {
                self.done = true;
                return Poll::Ready(None);
            }
            let how = ended.how;
            let id = self.guard.worker.id.clone();
            tracing::warn!(session = %id, pid = self.guard.worker.pid, worker = %how, "session worker ended; session closed");
            let why = end_reason(&how, ended.signal, self.guard.worker.quota);
            let mut status = Status::aborted(format!(
                "offload server: the session's process (pid {}) {how}; the session is closed ({why})",
                self.guard.worker.pid
            ));
            // The signal, for a client that ends the way a local run would.
            if let Some(sig) = ended.signal {
                status
                    .metadata_mut()
                    .insert(offload_proto::WORKER_SIGNAL_HEADER, sig.into());
            }
            // Its last output first: the client prints it before it reports
            // (or dies of) the end.
            if let Some(output) = ended.output {
                for o in split_output(output, LAST_OUTPUT_EVENT) {
                    self.last.push_back(Ok(HelloEvent {
                        output: Some(o),
                        ..Default::default()
                    }));
                }
            }
            self.last.push_back(Err(status));
            return self.as_mut().poll_next(cx);
        }
        if !self.draining {
            if let Poll::Ready(()) = self.stopped.as_mut().poll(cx) {
                // Drain: the worker finishes the calls in flight and exits
                // (killed after --drain-timeout); this stream ends then.
                self.draining = true;
                self.guard.workers.close(&self.guard.worker);
                return self.as_mut().poll_next(cx);
            }
        }
        Poll::Pending
    }
}

/// Where clang-22's OpenMP host runtime may live, in order.
const LIBOMP: [&str; 3] = [
    "libomp.so.5",
    "/usr/lib/llvm-22/lib/libomp.so.5",
    "/usr/lib/x86_64-linux-gnu/libomp.so.5",
];

/// Before this process loads its first program: make the OpenMP host
/// runtime (`libomp`) global, as it is in any OpenMP program. A native
/// OpenMP image names it itself (DT_NEEDED), but a host image the server
/// compiled from bitcode (`-fopenmp-target-jit`) does not, and its
/// `__kmpc_fork_teams` & co. resolve only against what is loaded globally:
/// the client's own process has libomp loaded; a session worker would not.
/// Without libomp on this machine nothing is done (the load then names the
/// missing symbol).
/// Why a session's worker ended, for the client. A SIGKILL the supervisor
/// did not send (its own ends say so in `how`) comes from the kernel: under
/// a memory quota, the cgroup's OOM killer.
fn end_reason(how: &str, signal: Option<i32>, quota: Option<u64>) -> String {
    if how.contains("--session-idle-timeout") {
        return "the session was idle for too long".to_string();
    }
    match (signal, quota) {
        (Some(libc::SIGKILL), Some(q)) => format!(
            "most likely the session reached its memory limit (--max-session-memory {} MiB), \
             at which the kernel kills it; else a kernel of the session killed it",
            q >> 20
        ),
        _ => "a kernel or image of this session crashed or exited".to_string(),
    }
}

pub(crate) fn preload_openmp_runtime() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        for name in LIBOMP {
            let Ok(c) = std::ffi::CString::new(name) else {
                continue;
            };
            // SAFETY: a NUL-terminated path; libomp's constructors only set
            // up its own state. The handle is kept for the process's life.
            let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if !handle.is_null() {
                tracing::debug!(lib = name, "OpenMP host runtime loaded for images");
                return;
            }
        }
        tracing::debug!("no OpenMP host runtime (libomp.so.5) found");
    });
}

/// Operations of this process that failed (calls and queued operations).
pub(crate) static ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A core error as a gRPC status that carries the `ol_errc_t` code.
pub fn status(e: Error) -> Status {
    ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let code = match e.code() {
        ErrorCode::InvalidArgument
        | ErrorCode::InvalidValue
        | ErrorCode::InvalidSize
        | ErrorCode::InvalidBinary => tonic::Code::InvalidArgument,
        ErrorCode::NotFound => tonic::Code::NotFound,
        ErrorCode::OutOfResources => tonic::Code::ResourceExhausted,
        ErrorCode::Unsupported | ErrorCode::Unimplemented => tonic::Code::Unimplemented,
        _ => tonic::Code::Internal,
    };
    let mut s = Status::new(code, e.message().to_string());
    if let Ok(v) = e.code().as_raw().to_string().parse() {
        s.metadata_mut().insert(ERRC_HEADER, v);
    }
    s
}

type R<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The Hello stream: sends the greeting, then stays open; dropping it (the
/// client went away) closes the session and frees what it held.
struct SessionStream {
    greeting: Option<HelloEvent>,
    guard: SessionGuard,
    /// Resolves when the server shuts down.
    stopped: Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

struct SessionGuard {
    session: Arc<Session>,
    sessions: Arc<Mutex<HashMap<String, Arc<Session>>>>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.session.id);
        // Release waits for copies in flight: off the executor when on one.
        let session = self.session.clone();
        let release = move || {
            let (freed, programs) = session.release();
            info!(session = %session.id, client = %session.client, freed_allocations = freed, unloaded_programs = programs, "session closed");
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(release)),
            Err(_) => release(),
        }
    }
}

impl Stream for SessionStream {
    type Item = Result<HelloEvent, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let _ = &self.guard;
        if let Some(g) = self.greeting.take() {
            return Poll::Ready(Some(Ok(g)));
        }
        // The stream ends when the client drops it, or when the server stops.
        match self.stopped.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn dim3(v: &[u32]) -> [u32; 3] {
    [
        v.first().copied().unwrap_or(1),
        v.get(1).copied().unwrap_or(1),
        v.get(2).copied().unwrap_or(1),
    ]
}

#[tonic::async_trait]
impl Offload for Service {
    async fn ping(&self, req: Request<PingRequest>) -> R<PingReply> {
        self.authorize(&req)?;
        Ok(Response::new(PingReply {
            payload: req.into_inner().payload,
        }))
    }

    type HelloStream = BoxStream<HelloEvent>;

    async fn hello(&self, req: Request<HelloRequest>) -> R<Self::HelloStream> {
        self.authorize(&req)?;
        let peer_addr = req.remote_addr();
        let peer = peer_addr.map(|a| a.to_string()).unwrap_or_default();
        let hello = req.into_inner();
        if hello.protocol_version != PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "offload server speaks protocol {PROTOCOL_VERSION}, the client {}",
                hello.protocol_version
            )));
        }
        let runtime = match &self.mode {
            Mode::InProcess(runtime) => runtime.clone(),
            Mode::Supervisor(workers) => {
                return self
                    .hello_supervised(workers.clone(), peer, hello, peer_addr)
                    .await;
            }
            Mode::Worker => {
                return Err(Status::failed_precondition(
                    "offload server: a session connection serves its session; Hello goes to the server's main connection",
                ));
            }
        };
        let session = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(max) = self.limits.max_sessions {
                if sessions.len() >= max {
                    tracing::warn!(%peer, max, "session refused: server full");
                    return Err(Status::resource_exhausted(format!(
                        "offload server: {max} sessions open, the most it serves (offload serve --max-sessions); try again later"
                    )));
                }
            }
            // Public ids are 64 random bits: a clash is unlikely, never fatal.
            loop {
                let s = Arc::new(Session::with_quota(
                    hello.client.clone(),
                    runtime.clone(),
                    self.limits.max_session_memory,
                ));
                if !sessions.contains_key(&s.id) {
                    sessions.insert(s.id.clone(), s.clone());
                    break s;
                }
            }
        };
        let id = session.id.clone();
        info!(session = %id, client = %hello.client, %peer, "session opened");
        let greeting = HelloEvent {
            data_port: self.data_port as u32,
            data_secret: if self.data_port != 0 || self.local_queues.is_some() {
                session.data_secret.clone()
            } else {
                String::new()
            },
            session: session.credential(),
            server: self.server_name.clone(),
            protocol_version: PROTOCOL_VERSION,
            devices: crate::requests::device_descs(&runtime),
            session_connection: false,
            local_queues: self.local_queues.clone().unwrap_or_default(),
            output: None,
        };
        let guard = SessionGuard {
            session,
            sessions: self.sessions.clone(),
        };
        let mut stopping = self.stopping.clone();
        let stopped = Box::pin(async move {
            // A dropped sender (no shutdown wired) never ends the session.
            if stopping.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
        });
        Ok(Response::new(Box::pin(SessionStream {
            greeting: Some(greeting),
            guard,
            stopped,
        })))
    }

    async fn alloc(&self, req: Request<AllocRequest>) -> R<AllocReply> {
        let s = self.session(&req)?;
        let reply = requests::alloc(&s, req.get_ref()).map_err(status)?;
        Ok(Response::new(reply))
    }

    async fn free(&self, req: Request<FreeRequest>) -> R<Empty> {
        let s = self.session(&req)?;
        let r = req.into_inner();
        // Waits for copies in flight on the allocation (blocking).
        tokio::task::spawn_blocking(move || requests::free(&s, &r))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(status)?;
        Ok(Response::new(Empty {}))
    }

    async fn write(&self, req: Request<Streaming<WriteChunk>>) -> R<Empty> {
        let s = self.session(&req)?;
        let mut stream = req.into_inner();
        let Some(first) = stream.message().await? else {
            return Err(Status::invalid_argument("empty write"));
        };
        let (device, dst, size) = (first.device, first.dst, first.size);
        // Pinned while the chunks stream in: a racing free waits.
        let _pin = s.pin(device, dst, size).map_err(status)?;
        let dev = s.device(device).map_err(status)?.clone();
        let mut off = 0u64;
        let mut chunk = Some(first);
        while let Some(c) = chunk {
            let n = c.data.len() as u64;
            if off + n > size {
                return Err(Status::invalid_argument(format!(
                    "write sends more than the {size} bytes announced"
                )));
            }
            // SAFETY: range checked against the session's allocation above.
            unsafe { dev.copy_to_device(DevicePtr(dst + off), c.data.as_ptr(), c.data.len()) }
                .map_err(status)?;
            off += n;
            chunk = stream.message().await?;
        }
        if off != size {
            return Err(Status::invalid_argument(format!(
                "write announced {size} bytes but sent {off}"
            )));
        }
        Ok(Response::new(Empty {}))
    }

    type ReadStream = BoxStream<DataChunk>;

    async fn read(&self, req: Request<ReadRequest>) -> R<Self::ReadStream> {
        let s = self.session(&req)?;
        let r = req.into_inner();
        s.check(r.device, r.src, r.size).map_err(status)?;
        let dev = s.device(r.device).map_err(status)?.clone();
        let chunk = r.chunk_size.clamp(4096, 64 << 20);
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            // Pinned while the chunks are read out: a racing free waits.
            let _pin = match s.pin(r.device, r.src, r.size) {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.blocking_send(Err(status(e)));
                    return;
                }
            };
            let mut off = 0u64;
            while off < r.size {
                let n = chunk.min(r.size - off) as usize;
                let mut data = vec![0u8; n];
                // SAFETY: range checked above; `data` holds n bytes.
                let res =
                    unsafe { dev.copy_from_device(data.as_mut_ptr(), DevicePtr(r.src + off), n) };
                let item = res.map(|_| DataChunk { data: data.into() }).map_err(status);
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    return;
                }
                off += n as u64;
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn copy(&self, req: Request<CopyRequest>) -> R<Empty> {
        let s = self.session(&req)?;
        let r = req.into_inner();
        copy_between(&s, &r).map_err(status)?;
        Ok(Response::new(Empty {}))
    }

    async fn fill(&self, req: Request<FillRequest>) -> R<Empty> {
        let s = self.session(&req)?;
        let r = req.into_inner();
        let _pin = s.pin(r.device, r.dst, r.size).map_err(status)?;
        s.device(r.device)
            .map_err(status)?
            .fill(DevicePtr(r.dst), &r.pattern, r.size as usize)
            .map_err(status)?;
        Ok(Response::new(Empty {}))
    }

    async fn register_binary(&self, req: Request<RegisterBinaryRequest>) -> R<RegisterBinaryReply> {
        let s = self.session(&req)?;
        Ok(Response::new(requests::register_binary(
            &s,
            req.into_inner(),
        )))
    }

    async fn unregister_binary(&self, req: Request<UnregisterBinaryRequest>) -> R<Empty> {
        let s = self.session(&req)?;
        requests::unregister_binary(&s, req.get_ref()).map_err(status)?;
        Ok(Response::new(Empty {}))
    }

    async fn load_program(&self, req: Request<LoadProgramRequest>) -> R<LoadProgramReply> {
        let s = self.session(&req)?;
        let r = req.into_inner();
        let id = tokio::task::spawn_blocking(move || {
            preload_openmp_runtime();
            requests::load_program(&s, r)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(status)?;
        Ok(Response::new(LoadProgramReply {
            program: id,
            output: crate::output::take(),
        }))
    }

    async fn unload_program(&self, req: Request<UnloadProgramRequest>) -> R<UnloadProgramReply> {
        let s = self.session(&req)?;
        requests::unload_program(&s, req.get_ref()).map_err(status)?;
        Ok(Response::new(UnloadProgramReply {
            output: crate::output::take(),
        }))
    }

    async fn get_kernel(&self, req: Request<SymbolRequest>) -> R<KernelReply> {
        let s = self.session(&req)?;
        let reply = requests::get_kernel(&s, req.get_ref()).map_err(status)?;
        Ok(Response::new(reply))
    }

    async fn get_global(&self, req: Request<SymbolRequest>) -> R<GlobalReply> {
        let s = self.session(&req)?;
        let reply = requests::get_global(&s, req.get_ref()).map_err(status)?;
        Ok(Response::new(reply))
    }

    type QueueStream = BoxStream<QueueCompletion>;

    async fn queue(&self, req: Request<Streaming<QueueOp>>) -> R<Self::QueueStream> {
        let s = self.session(&req)?;
        let mut ops = req.into_inner();
        let (tx, rx) = mpsc::channel::<Result<QueueCompletion, Status>>(256);
        let handle = tokio::runtime::Handle::current();
        // Operations run in order on their own thread: launches may take long.
        tokio::task::spawn_blocking(move || {
            // The thread's synchronous core queue per device serves the
            // operations in order; the client sees them pipelined.
            let mut queue = ServedQueue::default();
            loop {
                let op = match handle.block_on(ops.message()) {
                    Ok(Some(op)) => op,
                    Ok(None) => break,
                    Err(e) => {
                        // Usually the client went away mid-stream; the session guard cleans up.
                        tracing::debug!(session = %s.id, error = %e, "queue stream ended");
                        break;
                    }
                };
                let Some(completion) = queue.complete(&s, op) else {
                    continue;
                };
                if tx.blocking_send(Ok(completion)).is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// One client queue as the server runs it (a gRPC stream's or a same-host
/// queue's): its device, and whether device code ran since the output was
/// last collected.
#[derive(Default)]
pub(crate) struct ServedQueue {
    device: Option<u32>,
    output_due: bool,
}

impl ServedQueue {
    /// Run one operation; what the client must hear of it: the completion
    /// of a ticketed operation or any error, with what device code printed
    /// since the last completion that said (None for an untracked success).
    pub(crate) fn complete(&mut self, s: &Session, op: QueueOp) -> Option<QueueCompletion> {
        let ticket = op.ticket;
        // Only device code prints: copies, fills and markers add nothing
        // to collect (collecting costs a flush of every C stream and a
        // read of each pipe).
        self.output_due |= matches!(op.op, Some(queue_op::Op::Launch(_)));
        let result = run_queue_op(s, &mut self.device, op);
        if ticket == 0 && result.is_ok() {
            return None;
        }
        // What the device code printed comes out before the client's wait
        // for this operation returns.
        let output = match std::mem::take(&mut self.output_due) {
            true => crate::output::take(),
            false => None,
        };
        Some(match result {
            Ok(data) => QueueCompletion {
                ticket,
                code: 0,
                message: String::new(),
                data: data.into(),
                output,
            },
            Err(e) => QueueCompletion {
                ticket,
                code: {
                    ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    e.code().as_raw()
                },
                message: e.message().to_string(),
                data: Default::default(),
                output,
            },
        })
    }
}

/// A device-to-device copy within the session.
fn copy_between(s: &Session, c: &CopyRequest) -> Result<(), Error> {
    let _src = s.pin(c.src_device, c.src, c.size)?;
    let _dst = s.pin(c.dst_device, c.dst, c.size)?;
    // SAFETY: device ranges only; checked against the session above.
    unsafe {
        s.runtime().copy(
            Location::Device(c.dst_device as usize, DevicePtr(c.dst)),
            Location::Device(c.src_device as usize, DevicePtr(c.src)),
            c.size as usize,
            None,
        )
    }
}

pub(crate) fn run_queue_op(
    s: &Session,
    queue: &mut Option<u32>,
    op: QueueOp,
) -> Result<Vec<u8>, Error> {
    let device = *queue.get_or_insert(op.device);
    let dev = s.device(device)?.clone();
    use queue_op::Op;
    match op.op {
        Some(Op::Launch(l)) => {
            let (kdev, kernel) = s.kernel(l.kernel)?;
            if kdev != device {
                return Err(Error::invalid_argument(format!(
                    "kernel {} belongs to device {kdev}, the queue to {device}",
                    l.kernel
                )));
            }
            let config = LaunchConfig {
                num_groups: dim3(&l.num_groups),
                group_size: dim3(&l.group_size),
                dyn_group_memory: l.dyn_group_memory,
                tripcount: l.tripcount,
            };
            let args = if l.use_words {
                KernelArgs::Words(&l.words)
            } else {
                KernelArgs::Packed(&l.packed)
            };
            dev.launch(&kernel, args, &config)?;
            Ok(vec![])
        }
        Some(Op::Write(w)) => {
            let _pin = s.pin(device, w.dst, w.data.len() as u64)?;
            // SAFETY: range checked; `w.data` holds the bytes.
            unsafe { dev.copy_to_device(DevicePtr(w.dst), w.data.as_ptr(), w.data.len())? };
            Ok(vec![])
        }
        Some(Op::Read(r)) => {
            let _pin = s.pin(device, r.src, r.size)?;
            let mut data = vec![0u8; r.size as usize];
            // SAFETY: range checked; `data` holds the bytes.
            unsafe { dev.copy_from_device(data.as_mut_ptr(), DevicePtr(r.src), data.len())? };
            Ok(data)
        }
        Some(Op::Copy(c)) => {
            copy_between(s, &c)?;
            Ok(vec![])
        }
        Some(Op::Fill(f)) => {
            let _pin = s.pin(device, f.dst, f.size)?;
            dev.fill(DevicePtr(f.dst), &f.pattern, f.size as usize)?;
            Ok(vec![])
        }
        // Every operation above completed before its call returned.
        Some(Op::Marker(_)) => Ok(vec![]),
        None => Err(Error::invalid_argument("empty queue operation")),
    }
}

#[cfg(test)]
mod tests {
    use super::end_reason;

    #[test]
    fn a_sigkill_under_a_quota_names_the_memory_limit() {
        let how = "was killed by signal 9 (SIGKILL)";
        let why = end_reason(how, Some(libc::SIGKILL), Some(256 << 20));
        assert!(why.contains("--max-session-memory 256 MiB"), "{why}");
        let why = end_reason(how, Some(libc::SIGKILL), None);
        assert!(!why.contains("--max-session-memory"), "{why}");
        let why = end_reason("was killed by signal 11 (SIGSEGV)", Some(11), Some(1 << 30));
        assert!(why.contains("crashed"), "{why}");
        let why = end_reason(
            "ended (--session-idle-timeout)",
            Some(libc::SIGKILL),
            Some(1),
        );
        assert!(why.contains("idle"), "{why}");
    }
}
