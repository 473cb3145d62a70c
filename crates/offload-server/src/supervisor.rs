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

use crate::secret::random_hex;
use crate::worker::{read_frame, write_frame, CONTROL_FD_ENV, TAG_DATA, TAG_GRPC};

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
    secret: String,
    data_secret: String,
    pub pid: u32,
    /// The control socket (None once the session is closing).
    control: Mutex<Option<UnixStream>>,
    /// How the process ended, once it has.
    ended: tokio::sync::watch::Receiver<Option<String>>,
    kill: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// Set when the supervisor ends the session (an exit after that is no
    /// crash).
    closing: std::sync::atomic::AtomicBool,
}

impl Worker {
    pub fn credential(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    pub fn data_secret(&self) -> &str {
        &self.data_secret
    }

    /// Resolves with how the process ended.
    pub fn ended(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut rx = self.ended.clone();
        async move {
            match rx.wait_for(|v| v.is_some()).await {
                Ok(v) => v.clone().unwrap_or_default(),
                Err(_) => "ended".to_string(),
            }
        }
    }

    /// Hand a client socket to the worker.
    fn hand_over(&self, tag: u8, stream: &std::net::TcpStream) -> std::io::Result<()> {
        let control = self.control.lock().unwrap_or_else(|e| e.into_inner());
        match control.as_ref() {
            Some(c) => crate::fdpass::send_fd(c, tag, stream.as_raw_fd()),
            None => Err(std::io::Error::other("session closing")),
        }
    }

    /// End the session: the worker sees its control socket close and
    /// exits; one that does not within [`EXIT_GRACE`] is killed.
    fn close(&self) {
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
                        tokio::time::sleep(EXIT_GRACE).await;
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
    token: Option<String>,
    tls: Option<(Vec<u8>, Vec<u8>)>,
    map: Mutex<HashMap<String, Arc<Worker>>>,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Words for how a process ended.
pub(crate) fn describe_exit(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Err(e) => format!("could not be waited for ({e})"),
        Ok(s) => match (s.code(), s.signal()) {
            (Some(0), _) => "exited normally".to_string(),
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
    pub fn new(
        command: WorkerCommand,
        token: Option<String>,
        tls: Option<(Vec<u8>, Vec<u8>)>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Workers {
            command,
            token,
            tls,
            map: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Worker>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Start a worker for a new session; returns it with the devices it
    /// describes (the rest of the greeting is the caller's).
    pub async fn start(
        self: &Arc<Self>,
        client: String,
        quota: Option<u64>,
    ) -> Result<(Arc<Worker>, HelloEvent), String> {
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("control socket: {e}"))?;
        let mut cmd = tokio::process::Command::new(&self.command.program);
        cmd.args(&self.command.args)
            .env(CONTROL_FD_ENV, "3")
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
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.command.program.display()))?;
        drop(theirs);
        let pid = child.id().unwrap_or(0);
        let (id, secret, data_secret) = (random_hex(8), random_hex(16), random_hex(32));
        let config = WorkerConfig {
            session_id: id.clone(),
            secret: secret.clone(),
            data_secret: data_secret.clone(),
            client,
            token: self.token.clone().unwrap_or_default(),
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
        let exchange =
            tokio::task::spawn_blocking(move || -> std::io::Result<(UnixStream, Vec<u8>)> {
                let mut c = ours;
                c.set_read_timeout(Some(START_TIMEOUT))?;
                write_frame(&mut c, &config.encode_to_vec())?;
                let reply = read_frame(&mut c)?;
                c.set_read_timeout(None)?;
                Ok((c, reply))
            });
        let (control, reply) = match exchange.await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let _ = child.start_kill();
                let how = describe_exit(child.wait().await);
                return Err(format!(
                    "the session worker (pid {pid}) did not start: {e}; it {how}"
                ));
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
        let (ended_tx, ended_rx) = tokio::sync::watch::channel(None);
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
        let reports = control.try_clone().ok();
        let worker = Arc::new(Worker {
            id: id.clone(),
            secret,
            data_secret,
            pid,
            control: Mutex::new(Some(control)),
            ended: ended_rx,
            kill: Mutex::new(Some(kill_tx)),
            closing: Default::default(),
        });
        if let Some(reports) = reports {
            self.read_reports(reports, id.clone());
        }
        let (watched, metrics) = (worker.clone(), self.metrics.clone());
        tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            let clean = matches!(&status, Ok(s) if s.success());
            if !clean && !watched.closing.load(std::sync::atomic::Ordering::SeqCst) {
                metrics
                    .worker_crashes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let _ = ended_tx.send(Some(describe_exit(status)));
        });
        self.map().insert(id, worker.clone());
        Ok((worker, ready.hello.unwrap_or_default()))
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
        worker.close();
    }

    /// Hand a session connection (its preamble read) to the worker of
    /// session `id`; false when no such session is open.
    pub fn hand_session_connection(&self, id: &str, stream: &std::net::TcpStream) -> bool {
        let worker = self.map().get(id).cloned();
        match worker {
            Some(w) => w.hand_over(TAG_GRPC, stream).is_ok(),
            None => false,
        }
    }

    /// Hand a bulk-data connection to the session whose data secret is
    /// `secret` (every open session compared, each in constant time).
    pub fn hand_data_connection(&self, secret: &str, stream: &std::net::TcpStream) -> bool {
        if secret.is_empty() {
            return false;
        }
        let mut found = None;
        for w in self.map().values() {
            if crate::secret::equal(w.data_secret.as_bytes(), secret.as_bytes()) {
                found = Some(w.clone());
            }
        }
        match found {
            Some(w) => w.hand_over(TAG_DATA, stream).is_ok(),
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
