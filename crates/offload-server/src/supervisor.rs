//! `offload serve` with a process per session: the supervisor side.
//!
//! The supervisor authenticates a client's Hello, starts a worker process
//! for the session ([`crate::worker`]) and hands it the session's sockets:
//! the session connection (recognised by its preamble on the gRPC port, see
//! [`offload_proto::session_connection`]) and every bulk-data connection
//! (recognised by its secret line). The supervisor never opens a device nor
//! loads an image; a worker that crashes or exits ends only its session,
//! and the client's Hello stream reports how it ended.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use offload_proto::{HelloEvent, WorkerConfig, WorkerReady};
use prost::Message;

use crate::secret::{random_hex, Hashed};
use crate::worker::{read_frame, write_frame, CONTROL_FD_ENV, TAG_DATA, TAG_GRPC, TAG_LOCAL};

/// How to start a worker: this executable and the arguments that make it
/// one (`offload serve-worker`).
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// How long a new worker may take to open its devices and answer.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a worker whose session ended may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// One running session worker.
pub(crate) struct Worker {
    /// Public session id.
    pub id: String,
    /// Only hashes of the session's secrets stay in the supervisor.
    secret: Hashed,
    data_secret: Hashed,
    pub pid: u32,
    /// The `--max-session-memory` its sandbox enforces, if any.
    pub quota: Option<u64>,
    /// The control socket (None once the session is closing).
    control: Mutex<Option<UnixStream>>,
    /// How the process ended, once it has.
    ended: tokio::sync::watch::Receiver<Option<Ended>>,
    kill: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// Set when the supervisor ends the session (an exit after that is no
    /// crash).
    closing: Arc<std::sync::atomic::AtomicBool>,
}

/// How a worker process ended.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ended {
    /// In words ("was killed by signal 11 (SIGSEGV)").
    pub how: String,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// What its device code wrote last and no reply carried.
    pub output: Option<offload_proto::Output>,
}

impl Ended {
    fn of(
        status: std::io::Result<std::process::ExitStatus>,
        output: Option<offload_proto::Output>,
    ) -> Ended {
        let signal = status.as_ref().ok().and_then(|s| s.signal());
        Ended {
            how: describe_exit(status),
            signal,
            output,
        }
    }
}

/// A worker's output spool and the read ends of its stdout and stderr
/// pipes (sent by the worker at start, see [`crate::output`]).
type OutputHandles = (crate::output::Spool, [std::fs::File; 2]);

/// A started worker process, watched from its start (reaped the moment it
/// ends, given a session or not), not yet serving a session: a new one,
/// or the spare started ahead of the next Hello.
struct Process {
    pid: u32,
    /// The supervisor's end of the control socket.
    control: UnixStream,
    ended: tokio::sync::watch::Receiver<Option<Ended>>,
    /// Sent or dropped: the process is killed.
    kill: tokio::sync::oneshot::Sender<()>,
    closing: Arc<std::sync::atomic::AtomicBool>,
    /// Set once it is given a session (until then it is a spare or about
    /// to be given one).
    assigned: Arc<std::sync::atomic::AtomicBool>,
    output: Arc<Mutex<Option<OutputHandles>>>,
    /// The `--max-session-memory` its sandbox was planned for.
    quota: Option<u64>,
}

/// What a new session gets from [`Workers::start`]: its worker and the
/// secrets to hand the client (kept nowhere else in the supervisor).
pub(crate) struct Started {
    pub worker: Arc<Worker>,
    pub hello: HelloEvent,
    /// `<id>.<secret>`, for the client.
    pub credential: String,
    pub data_secret: String,
}

/// A place among `--max-sessions`, taken before a worker starts and given
/// back when the session ends (or never started).
pub(crate) struct Admission {
    workers: Arc<Workers>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.workers
            .admitted
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Worker {
    /// Resolves with how the process ended.
    pub fn ended(&self) -> impl std::future::Future<Output = Ended> + Send + 'static {
        let mut rx = self.ended.clone();
        async move {
            match rx.wait_for(|v| v.is_some()).await {
                Ok(v) => v.clone().unwrap_or_default(),
                Err(_) => Ended {
                    how: "ended".to_string(),
                    ..Default::default()
                },
            }
        }
    }

    /// Hand a client socket to the worker.
    fn hand_over(&self, tag: u8, stream: &impl AsRawFd) -> std::io::Result<()> {
        let control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        match control.as_ref() {
            Some(c) => offload_proto::fdpass::send_fd(c, tag, stream.as_raw_fd()),
            None => Err(std::io::Error::other("session closing")),
        }
    }

    /// End the session: the worker sees its control socket close and
    /// exits; one that does not within [`EXIT_GRACE`] is killed.
    fn close(&self, grace: Duration) {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let control = self
            .control
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Shut down, not just dropped (the report reader holds a clone):
        // the worker reads the end; its last report can still come back.
        if let Some(c) = control {
            let _ = c.shutdown(std::net::Shutdown::Write);
        }
        if let Some(kill) = self.kill.lock().unwrap_or_else(|e| e.into_inner()).take() {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move {
                        tokio::time::sleep(grace).await;
                        let _ = kill.send(());
                    });
                }
                Err(_) => {
                    let _ = kill.send(());
                }
            }
        }
    }
}

/// The supervisor's session workers.
pub(crate) struct Workers {
    command: WorkerCommand,
    tls: Option<(Vec<u8>, Vec<u8>)>,
    map: Mutex<HashMap<String, Arc<Worker>>>,
    pub metrics: Arc<crate::metrics::Metrics>,
    sandbox: crate::sandbox::Mode,
    sandbox_options: crate::sandbox::SandboxOptions,
    uids: crate::sandbox::UidPool,
    /// Sandboxed workers apply the Landlock file system ruleset (the
    /// kernel has Landlock).
    landlock: bool,
    /// Sessions admitted (starting or running).
    admitted: std::sync::atomic::AtomicUsize,
    /// Worker processes not yet reaped.
    running: tokio::sync::watch::Sender<usize>,
    /// A session idle this long ends (0 = never).
    idle_timeout: Duration,
    /// How long a closed session's worker may take to exit (the drain
    /// timeout once the server stops).
    grace: Mutex<Duration>,
    /// Workers started (and sandboxed) ahead of the next Hellos, each
    /// never given a session before: a new session takes one and only
    /// hands it its configuration (`--spare-workers`).
    spares: Mutex<Vec<Process>>,
    spare_count: usize,
    /// The `--max-session-memory` of the spares' sandboxes.
    spare_quota: Option<u64>,
    /// The server stops: no more spares.
    stopping: std::sync::atomic::AtomicBool,
    /// Asks the thread that starts spares for more.
    spare_starter: std::sync::OnceLock<Mutex<std::sync::mpsc::Sender<()>>>,
}

/// Settings of the supervisor's workers.
pub(crate) struct WorkerSettings {
    pub command: WorkerCommand,
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    pub sandbox: crate::sandbox::Mode,
    pub sandbox_options: crate::sandbox::SandboxOptions,
    pub idle_timeout: Duration,
    /// Workers kept started ahead of the next Hellos (0: each session
    /// starts its own).
    pub spare_workers: usize,
    /// `--max-session-memory` (the spares' sandboxes are planned for it).
    pub quota: Option<u64>,
}

/// Default `--spare-workers`.
pub const DEFAULT_SPARE_WORKERS: usize = 1;

/// The output spool and pipes a worker sends before its greeting (tags
/// [`crate::worker::TAG_SPOOL`], `TAG_STDOUT`, `TAG_STDERR`).
fn receive_output_handles(c: &UnixStream) -> std::io::Result<Option<OutputHandles>> {
    use crate::worker::{TAG_SPOOL, TAG_STDERR, TAG_STDOUT};
    let mut got: [Option<std::os::fd::OwnedFd>; 3] = Default::default();
    for _ in 0..3 {
        match offload_proto::fdpass::recv_fd(c)? {
            None => {
                return Err(std::io::Error::other(
                    "the worker closed its control socket",
                ))
            }
            Some((tag, fd)) => {
                let slot = match tag {
                    TAG_SPOOL => 0,
                    TAG_STDOUT => 1,
                    TAG_STDERR => 2,
                    _ => {
                        return Err(std::io::Error::other(
                            "unexpected descriptor from the worker",
                        ))
                    }
                };
                got[slot] = Some(fd);
            }
        }
    }
    match got {
        [Some(spool), Some(out), Some(err)] => Ok(Some((
            crate::output::Spool::from_fd(spool),
            [std::fs::File::from(out), std::fs::File::from(err)],
        ))),
        _ => Err(std::io::Error::other("the worker sent a descriptor twice")),
    }
}

/// Exit status of a worker that ended its session for being idle.
pub const IDLE_EXIT: i32 = 75;

/// Words for how a process ended.
pub(crate) fn describe_exit(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Err(e) => format!("could not be waited for ({e})"),
        Ok(s) => match (s.code(), s.signal()) {
            (Some(0), _) => "exited normally".to_string(),
            (Some(IDLE_EXIT), _) => {
                "ended the session: idle for longer than --session-idle-timeout".to_string()
            }
            (Some(c), _) => format!("exited with status {c}"),
            (_, Some(sig)) => format!("was killed by signal {sig} ({})", signal_name(sig)),
            _ => format!("ended ({s})"),
        },
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

impl Workers {
    pub fn new(settings: WorkerSettings, metrics: Arc<crate::metrics::Metrics>) -> Self {
        Workers {
            command: settings.command,
            tls: settings.tls,
            map: Mutex::new(HashMap::new()),
            metrics,
            uids: crate::sandbox::UidPool::new(&settings.sandbox_options),
            sandbox: settings.sandbox,
            sandbox_options: settings.sandbox_options,
            landlock: crate::sandbox::landlock_available(),
            admitted: Default::default(),
            running: tokio::sync::watch::channel(0).0,
            idle_timeout: settings.idle_timeout,
            grace: Mutex::new(EXIT_GRACE),
            spares: Mutex::new(Vec::new()),
            spare_count: settings.spare_workers,
            spare_quota: settings.quota,
            stopping: Default::default(),
            spare_starter: Default::default(),
        }
    }

    /// Take a place for a new session, atomically: None when `max` are
    /// admitted already.
    pub fn admit(self: &Arc<Self>, max: Option<usize>) -> Option<Admission> {
        use std::sync::atomic::Ordering::AcqRel;
        let limit = max.unwrap_or(usize::MAX);
        self.admitted
            .fetch_update(AcqRel, std::sync::atomic::Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(Admission {
            workers: self.clone(),
        })
    }

    /// The server stops: closed sessions' workers get `drain` to finish
    /// what they are doing before they are killed.
    pub fn set_drain(&self, drain: Duration) {
        *self.grace.lock().unwrap_or_else(|e| e.into_inner()) = drain;
        self.stop_spares();
    }

    /// No more spares; those started end now (they never had a session).
    pub fn stop_spares(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.stopping.store(true, SeqCst);
        let spares = std::mem::take(&mut *self.spares.lock().unwrap_or_else(|e| e.into_inner()));
        for p in spares {
            p.closing.store(true, SeqCst);
            // Dropping `kill` kills it; its watcher reaps it.
            drop(p);
        }
    }

    /// Start spares until there are `--spare-workers`, in the background
    /// (the fork and exec never delay a session's start, nor take one of
    /// the runtime's threads). On one thread that lives as long as the
    /// server: a worker dies with the thread that started it
    /// (`PR_SET_PDEATHSIG` follows the parent *thread*), so never on
    /// tokio's blocking pool, which ends threads idle for 10 s.
    pub fn refill_spares(self: &Arc<Self>) {
        if self.spare_count == 0 || self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let starter = self.spare_starter.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let (workers, rt) = (Arc::downgrade(self), tokio::runtime::Handle::current());
            let started = std::thread::Builder::new()
                .name("offload-spares".into())
                .spawn(move || {
                    let _in_runtime = rt.enter();
                    // Ends when the supervisor is dropped (its sender with it).
                    while rx.recv().is_ok() {
                        match workers.upgrade() {
                            Some(w) => w.start_spares(),
                            None => return,
                        }
                    }
                });
            if let Err(e) = started {
                tracing::warn!(error = %e, "no thread for spare session workers");
            }
            Mutex::new(tx)
        });
        let _ = starter.lock().unwrap_or_else(|e| e.into_inner()).send(());
    }

    /// [`Workers::refill_spares`]'s work, on its thread.
    fn start_spares(self: &Arc<Self>) {
        let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
        // Those that died waiting (reaped already) are replaced.
        spares.retain(|p| p.ended.borrow().is_none());
        while spares.len() < self.spare_count
            && !self.stopping.load(std::sync::atomic::Ordering::SeqCst)
        {
            match self.spawn(self.spare_quota) {
                Ok(p) => spares.push(p),
                Err(e) => {
                    tracing::warn!(error = %e, "no spare session worker");
                    break;
                }
            }
        }
    }

    /// A spare planned for `quota` that is still alive, if there is one.
    fn take_spare(&self, quota: Option<u64>) -> Option<Process> {
        let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(p) = spares.pop() {
            if p.quota == quota && p.ended.borrow().is_none() {
                return Some(p);
            }
            // Dead (its watcher reaped it) or planned otherwise: let it go.
            p.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        None
    }

    /// Resolves once every worker process has been reaped.
    pub fn all_exited(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.running.subscribe();
        async move {
            let _ = rx.wait_for(|n| *n == 0).await;
        }
    }

    /// Kill every worker still running (the drain timeout passed).
    pub fn kill_all(&self) {
        self.stop_spares();
        let workers: Vec<_> = self.map().values().cloned().collect();
        for w in workers {
            if let Some(kill) = w.kill.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = kill.send(());
            }
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Worker>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Start a worker for a new session (or take the spare started ahead
    /// of it); returns it with the devices it describes (the rest of the
    /// greeting is the caller's).
    pub async fn start(
        self: &Arc<Self>,
        client: String,
        quota: Option<u64>,
    ) -> Result<Started, String> {
        let started = match self.take_spare(quota) {
            Some(spare) => match self.assign(spare, client.clone(), quota).await {
                Ok(s) => Ok(s),
                Err(e) => {
                    // A spare that died or went wrong: a fresh one.
                    tracing::warn!(error = %e, "the spare session worker failed; starting another");
                    let fresh = self.spawn(quota)?;
                    self.assign(fresh, client, quota).await
                }
            },
            None => {
                let fresh = self.spawn(quota)?;
                self.assign(fresh, client, quota).await
            }
        };
        self.refill_spares();
        started
    }

    /// Start a worker process for a session with `quota`: sandboxed, its
    /// devices opened, waiting for its session's configuration. Watched
    /// (and reaped) from here on.
    fn spawn(self: &Arc<Self>, quota: Option<u64>) -> Result<Process, String> {
        use crate::sandbox::{Mode, Plan, PLAN_ENV};
        let uid = match self.sandbox {
            Mode::Root => Some(self.uids.take().ok_or_else(|| {
                "every uid of the sandbox range is in use (offload serve --sandbox-uids)"
                    .to_string()
            })?),
            _ => None,
        };
        let give_back_uid = |uid: Option<u32>| {
            if let Some(u) = uid {
                self.uids.put(u);
            }
        };
        let plan = Plan {
            mode: self.sandbox,
            uid: uid.unwrap_or(0),
            memory: quota.map_or(0, |q| q.saturating_add(crate::sandbox::WORKER_ALLOWANCE)),
            max_processes: self.sandbox_options.max_processes,
            tmp_bytes: self.sandbox_options.tmp_bytes,
            landlock: self.landlock,
            read: self.sandbox_options.read_paths.clone(),
        };
        let (ours, theirs) = UnixStream::pair().map_err(|e| {
            give_back_uid(uid);
            format!("control socket: {e}")
        })?;
        let mut cmd = tokio::process::Command::new(&self.command.program);
        // An environment without credentials: the server's OFFLOAD_*
        // configuration, PATH and the GPU runtimes' settings
        // (`sandbox::passes_to_worker`); the worker drops anything else
        // once it is up.
        cmd.args(&self.command.args)
            .env_clear()
            .envs(
                std::env::vars_os()
                    .filter(|(k, _)| k.to_str().is_some_and(crate::sandbox::passes_to_worker)),
            )
            .env(CONTROL_FD_ENV, "3")
            .env(PLAN_ENV, plan.encode())
            .env(
                crate::worker::IDLE_ENV,
                self.idle_timeout.as_millis().to_string(),
            )
            // Its own process group: a kill(0, ...) of a kernel reaches no
            // one outside the session.
            .process_group(0)
            .stdin(std::process::Stdio::null());
        let theirs_fd = theirs.as_raw_fd();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if theirs_fd == 3 {
                    if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(theirs_fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The worker dies with the supervisor.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            give_back_uid(uid);
            format!("starting {}: {e}", self.command.program.display())
        })?;
        drop(theirs);
        self.running.send_modify(|n| *n += 1);
        let pid = child.id().unwrap_or(0);
        let (ended_tx, ended_rx) = tokio::sync::watch::channel(None);
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let assigned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let output: Arc<Mutex<Option<OutputHandles>>> = Arc::default();
        let (watched, given, found, metrics, workers) = (
            closing.clone(),
            assigned.clone(),
            output.clone(),
            self.metrics.clone(),
            self.clone(),
        );
        tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                // Sent or dropped.
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            // Reaped: the session's PID namespace is empty, its uid free.
            if let Some(u) = uid {
                workers.uids.put(u);
            }
            workers.running.send_modify(|n| *n = n.saturating_sub(1));
            let clean = matches!(&status, Ok(s) if s.success() || s.code() == Some(IDLE_EXIT));
            let closing = watched.load(std::sync::atomic::Ordering::SeqCst);
            if !clean && !closing {
                metrics
                    .worker_crashes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // Every writer of its pipes is gone: what device code wrote
            // last and no reply carried, for the client.
            let handles = found.lock().unwrap_or_else(|e| e.into_inner()).take();
            let output = match handles {
                Some((spool, pipes)) if !closing => crate::output::leftovers(&spool, &pipes),
                _ => None,
            };
            let _ = ended_tx.send(Some(Ended::of(status, output)));
            // A spare that died waiting (killed, out of memory) is
            // replaced, a second later (one that cannot start at all is
            // not restarted in a loop), not only at the next Hello.
            if !closing && !given.load(std::sync::atomic::Ordering::SeqCst) {
                tracing::warn!(
                    pid,
                    "a spare session worker ended before its session; starting another in 1 s"
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                workers.refill_spares();
            }
        });
        Ok(Process {
            pid,
            control: ours,
            ended: ended_rx,
            kill: kill_tx,
            closing,
            assigned,
            output,
            quota,
        })
    }

    /// Give the started worker `process` its session: its configuration
    /// (credentials, client, TLS), then its greeting.
    async fn assign(
        self: &Arc<Self>,
        process: Process,
        client: String,
        quota: Option<u64>,
    ) -> Result<Started, String> {
        let Process {
            pid,
            control,
            mut ended,
            kill,
            closing,
            assigned,
            output,
            ..
        } = process;
        assigned.store(true, std::sync::atomic::Ordering::SeqCst);
        let (id, secret, data_secret) = (random_hex(8), random_hex(16), random_hex(32));
        let (secret_hash, data_hash) = (Hashed::new(&secret), Hashed::new(&data_secret));
        let credential = format!("{id}.{secret}");
        let config = WorkerConfig {
            session_id: id.clone(),
            secret,
            data_secret: data_secret.clone(),
            client,
            // The worker checks the session credential; the server's token
            // never enters a process that runs client code.
            token: String::new(),
            quota: quota.unwrap_or(0),
            tls_cert: self
                .tls
                .as_ref()
                .map(|t| t.0.clone())
                .unwrap_or_default()
                .into(),
            tls_key: self
                .tls
                .as_ref()
                .map(|t| t.1.clone())
                .unwrap_or_default()
                .into(),
        };
        type Exchanged = (UnixStream, Vec<u8>, Option<OutputHandles>);
        let exchange = tokio::task::spawn_blocking(move || -> std::io::Result<Exchanged> {
            let mut c = control;
            c.set_read_timeout(Some(START_TIMEOUT))?;
            write_frame(&mut c, &config.encode_to_vec())?;
            let handles = receive_output_handles(&c)?;
            let reply = read_frame(&mut c)?;
            c.set_read_timeout(None)?;
            Ok((c, reply, handles))
        });
        let answered = async {
            let (control, reply) = match exchange.await {
                Ok(Ok((c, reply, handles))) => {
                    *output.lock().unwrap_or_else(|e| e.into_inner()) = handles;
                    (c, reply)
                }
                Ok(Err(e)) => {
                    return Err(format!("the session worker (pid {pid}) did not start: {e}"))
                }
                Err(e) => return Err(format!("starting a session worker: {e}")),
            };
            let ready = WorkerReady::decode(reply.as_slice())
                .map_err(|e| format!("the session worker answered garbage: {e}"))?;
            if !ready.error.is_empty() {
                return Err(format!(
                    "the session worker could not start: {}",
                    ready.error
                ));
            }
            Ok((control, ready))
        };
        let (control, ready) = match answered.await {
            Ok(r) => r,
            Err(why) => {
                // Killed (the sender dropped) and reaped by its watcher.
                drop(kill);
                let how = match ended.wait_for(|v| v.is_some()).await {
                    Ok(v) => v.clone().unwrap_or_default().how,
                    Err(_) => "ended".to_string(),
                };
                return Err(format!("{why}; it {how}"));
            }
        };
        let reports = control.try_clone().ok();
        let worker = Arc::new(Worker {
            id: id.clone(),
            secret: secret_hash,
            data_secret: data_hash,
            pid,
            quota,
            control: Mutex::new(Some(control)),
            ended,
            kill: Mutex::new(Some(kill)),
            closing,
        });
        if let Some(reports) = reports {
            self.read_reports(reports, id.clone());
        }
        self.map().insert(id, worker.clone());
        Ok(Started {
            worker,
            hello: ready.hello.unwrap_or_default(),
            credential,
            data_secret,
        })
    }

    /// Keep the metrics' view of a worker's totals current (its reports on
    /// the control socket), until the socket closes.
    fn read_reports(&self, mut reports: UnixStream, id: String) {
        let metrics = self.metrics.clone();
        let spawned = std::thread::Builder::new()
            .name("offload-worker-reports".into())
            .spawn(move || {
                while let Ok(frame) = read_frame(&mut reports) {
                    if let Ok(stats) = offload_proto::WorkerStats::decode(frame.as_slice()) {
                        metrics.report(&id, stats);
                    }
                }
                metrics.ended(&id);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread for a worker's reports");
        }
    }

    /// The session is over: forget its worker and let it go.
    pub fn close(&self, worker: &Worker) {
        self.map().remove(&worker.id);
        worker.close(*self.grace.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Whether `credential` (`<id>.<secret>`) names the open session `id`
    /// (its secret compared by hash, in constant time).
    #[allow(dead_code)]
    pub fn credential_matches(&self, credential: &str) -> bool {
        let Some((id, secret)) = credential.split_once('.') else {
            return false;
        };
        let worker = self.map().get(id).cloned();
        worker.is_some_and(|w| w.secret.matches(secret))
    }

    /// Hand a session connection (its preamble read) to the worker of
    /// session `id` when `secret` is that session's (compared by hash, in
    /// constant time): the public id alone opens nothing. Why not, if not.
    pub fn hand_session_connection(
        &self,
        id: &str,
        secret: &str,
        stream: &std::net::TcpStream,
    ) -> Result<(), &'static str> {
        let worker = self.map().get(id).cloned();
        match worker {
            Some(w) if w.secret.matches(secret) => w
                .hand_over(TAG_GRPC, stream)
                .map_err(|_| "the session is closing"),
            Some(_) => Err("wrong session secret"),
            None => Err("no such session"),
        }
    }

    /// Hand a bulk-data connection to the session whose data secret is
    /// `secret` (every open session compared, each in constant time).
    pub fn hand_data_connection(&self, secret: &str, stream: &std::net::TcpStream) -> bool {
        self.hand_by_data_secret(TAG_DATA, secret, stream)
    }

    /// Hand a same-host queue connection (see [`crate::local`]) to the
    /// session whose data secret is `secret`.
    pub fn hand_local_connection(&self, secret: &str, stream: &UnixStream) -> bool {
        self.hand_by_data_secret(TAG_LOCAL, secret, stream)
    }

    fn hand_by_data_secret(&self, tag: u8, secret: &str, stream: &impl AsRawFd) -> bool {
        if secret.is_empty() {
            return false;
        }
        let given = Hashed::new(secret);
        let mut found = None;
        for w in self.map().values() {
            if w.data_secret.equals(&given) {
                found = Some(w.clone());
            }
        }
        match found {
            Some(w) => w.hand_over(tag, stream).is_ok(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_described_for_people() {
        let st = |raw: i32| Ok(std::process::ExitStatus::from_raw(raw));
        assert_eq!(describe_exit(st(0)), "exited normally");
        assert_eq!(describe_exit(st(3 << 8)), "exited with status 3");
        assert_eq!(
            describe_exit(st(libc::SIGSEGV)),
            "was killed by signal 11 (SIGSEGV)"
        );
    }
}
