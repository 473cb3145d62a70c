//! `offload serve`: expose this machine's devices over gRPC.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on (loopback by default; port 0 picks a free port).
    #[arg(long, default_value = offload_server::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// File holding the shared-secret token (default: $OFFLOAD_REMOTE_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Allow a non-loopback address without a token.
    #[arg(long)]
    insecure: bool,
    /// PEM certificate chain for TLS (with --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS (with --tls-cert).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Address of the bulk-data side channel for copies of 64 KiB and more
    /// (default: the --listen IP with a free port; not used under TLS).
    #[arg(long)]
    data_listen: Option<SocketAddr>,
    /// Do not offer same-host queues: clients on this machine (connecting
    /// over loopback) otherwise run their queues through shared memory,
    /// not a gRPC stream (also under TLS: nothing of it crosses the network).
    #[arg(long)]
    no_local_queues: bool,
    /// Most sessions (clients) served at once; more are refused with a clear error.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Most device memory one session may hold, in bytes; larger allocations
    /// are refused (out of resources).
    #[arg(long)]
    max_session_memory: Option<u64>,
    /// Run every session inside this process instead of one worker process
    /// per session (no isolation between clients: one client's crashing
    /// kernel takes every session down; for debugging).
    #[arg(long)]
    sessions_in_process: bool,
    /// Serve Prometheus metrics (sessions, bytes moved, launches, errors,
    /// worker crashes, refused authentications) on ADDR, path /metrics.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Serve this rank's devices to the application ranks of the MPI job it
    /// was started in (`mpirun -np 1 ./app : -np N offload serve --mpi`)
    /// instead of listening on the network; libmpi is loaded only then.
    #[arg(long)]
    mpi: bool,
    /// Run session workers without the sandbox (namespaces, dedicated uid,
    /// seccomp, limits): a kernel can then reach other sessions and the
    /// server. Needed to serve non-loopback clients where no sandbox can be
    /// made (not root and no user namespaces).
    #[arg(long)]
    insecure_no_sandbox: bool,
    /// Uids (and gids) sessions run as when the server is root: BASE:COUNT,
    /// one per session, never used by anything else.
    #[arg(long, value_name = "BASE:COUNT", value_parser = parse_uid_range)]
    sandbox_uids: Option<(u32, u32)>,
    /// A file or directory sessions may also read (and execute from), e.g.
    /// shared libraries their device images load; repeatable. Sessions see
    /// only the system directories (/usr, /lib, /etc, /opt, ...), /proc,
    /// /sys, device nodes, their own /tmp and /dev/shm and these paths.
    #[arg(long, value_name = "PATH")]
    sandbox_read: Vec<PathBuf>,
    /// Most processes and threads one session may have.
    #[arg(long, default_value_t = 512)]
    max_session_processes: u64,
    /// Seconds a session may go without calls or copies before it is closed (0: never).
    #[arg(long, default_value_t = 600)]
    session_idle_timeout: u64,
    /// Seconds calls in flight may take to finish after SIGTERM/SIGINT
    /// before the sessions end.
    #[arg(long, default_value_t = 30)]
    drain_timeout: u64,
    /// Session workers kept started ahead of the next clients (sandboxed,
    /// devices open: a new session only hands one its credentials); each
    /// serves one session and is replaced. 0: each session starts its own.
    #[arg(long, default_value_t = offload_server::DEFAULT_SPARE_WORKERS as u64, value_parser = clap::value_parser!(u64).range(0..=16))]
    spare_workers: u64,
}

fn parse_uid_range(s: &str) -> Result<(u32, u32), String> {
    let (base, count) = s
        .split_once(':')
        .ok_or_else(|| format!("expected BASE:COUNT, got {s:?}"))?;
    let base: u32 = base.parse().map_err(|e| format!("BASE: {e}"))?;
    let count: u32 = count.parse().map_err(|e| format!("COUNT: {e}"))?;
    if base == 0 || count == 0 || base.checked_add(count).is_none() {
        return Err("the range must be non-empty, above uid 0 and below 2^32".into());
    }
    Ok((base, count))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // The log keeps the server's stderr when --sessions-in-process hands
    // descriptors 1 and 2 to the sessions' device code.
    init_logging_to(offload_server::output::log_writer);
    if args.mpi {
        let runtime = Arc::new(offload_server::mpi::serving_runtime());
        return offload_server::mpi::serve(runtime).map_err(|e| anyhow::anyhow!("{e}"));
    }
    let token = match &args.token_file {
        Some(f) => {
            let t = std::fs::read_to_string(f)
                .with_context(|| format!("reading token file {}", f.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                bail!("token file {} is empty", f.display());
            }
            Some(t)
        }
        None => std::env::var("OFFLOAD_REMOTE_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
    };
    // Absolute and existing: a worker opens each as it starts.
    let sandbox_read = args
        .sandbox_read
        .iter()
        .map(|p| {
            p.canonicalize()
                .with_context(|| format!("--sandbox-read {}", p.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(f) = &args.token_file {
        if !args.insecure_no_sandbox
            && offload_server::sandbox::landlock_available()
            && offload_server::sandbox::files::readable_by_sessions(f, &sandbox_read)
        {
            tracing::warn!(
                "token file {} lies where sessions may read (system directories or --sandbox-read): keep it elsewhere",
                f.display()
            );
        }
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some((
            std::fs::read(c).with_context(|| format!("reading {}", c.display()))?,
            std::fs::read(k).with_context(|| format!("reading {}", k.display()))?,
        )),
        _ => None,
    };
    let options = offload_server::ServeOptions {
        listen: Some(args.listen),
        token,
        insecure: args.insecure,
        tls,
        data_listen: args.data_listen,
        no_local_queues: args.no_local_queues,
        max_sessions: args.max_sessions,
        max_session_memory: args.max_session_memory,
        metrics_listen: args.metrics_listen,
        sandbox: {
            let default = offload_server::SandboxOptions::default();
            let (uid_base, uid_count) = args
                .sandbox_uids
                .unwrap_or((default.uid_base, default.uid_count));
            offload_server::SandboxOptions {
                disabled: args.insecure_no_sandbox,
                uid_base,
                uid_count,
                max_processes: args.max_session_processes,
                read_paths: sandbox_read,
                ..default
            }
        },
        session_idle_timeout: Some(std::time::Duration::from_secs(args.session_idle_timeout)),
        drain_timeout: Some(std::time::Duration::from_secs(args.drain_timeout)),
        in_process: args.sessions_in_process,
        spare_workers: Some(args.spare_workers as usize),
    };
    offload_server::validate(&options, args.listen).map_err(anyhow::Error::msg)?;
    let sessions = if args.sessions_in_process {
        // What device code prints goes to the clients, as with workers.
        offload_server::output::capture_in_process().map_err(anyhow::Error::msg)?;
        offload_server::Sessions::InProcess(Arc::new(offload_server::local_runtime()))
    } else {
        offload_server::Sessions::Workers(offload_server::WorkerCommand {
            program: std::env::current_exe().context("locating the offload executable")?,
            args: vec!["serve-worker".into()],
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the server runtime")?;
    rt.block_on(async {
        // SIGINT (Ctrl-C) and SIGTERM (what systemd and docker send):
        // stop accepting, let calls in flight finish, exit 0.
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let sigterm = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = sigterm => {}
            }
            tracing::info!("shutting down (signal)");
        };
        offload_server::serve(
            options,
            sessions,
            |addr| {
                // Machine-readable line (tests parse it when using port 0).
                offload_server::output::print_line(&format!("offload serve: listening on {addr}"));
            },
            shutdown,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
    })
}

/// `offload serve-worker`: one session, on the control socket the server
/// started this process with.
pub fn run_worker() -> anyhow::Result<()> {
    // The log stays on the server's stderr once the worker hands its own
    // descriptors 1 and 2 to the session's device code.
    init_logging_to(offload_server::output::log_writer);
    let control = offload_server::worker::control_socket_from_env().map_err(anyhow::Error::msg)?;
    offload_server::worker::run(control).map_err(anyhow::Error::msg)
}

fn init_logging_to<W>(writer: W)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("OFFLOAD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .try_init();
}
