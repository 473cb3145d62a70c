//! `offload serve --metrics-listen ADDR`: the server's counters in the
//! Prometheus text format (`GET /metrics` over plain HTTP).
//!
//! Sessions, refusals and worker crashes are the supervisor's own counts;
//! bytes moved, launches and failed operations happen in the session
//! workers, which report their totals every 0.1 s when they changed, and as
//! they end normally ([`offload_proto::WorkerStats`]): a session's last
//! report is kept when it ends, so the counters only grow (a worker that
//! crashes loses what it did since its last report).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use offload_proto::WorkerStats;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::refusals::Refusals;

/// The counters one server exposes.
#[derive(Default)]
pub struct Metrics {
    pub sessions_opened: AtomicU64,
    pub sessions_refused: AtomicU64,
    pub worker_crashes: AtomicU64,
    /// Totals of sessions that have ended.
    ended: Mutex<WorkerStats>,
    /// Latest totals of running sessions, by session id.
    running: Mutex<std::collections::HashMap<String, WorkerStats>>,
    refusals: Mutex<Vec<Arc<Refusals>>>,
    /// Sessions served in this process: their devices' counters.
    local: Mutex<Option<Arc<offload_core::Runtime>>>,
}

fn add(a: &mut WorkerStats, b: &WorkerStats) {
    a.bytes_to_device += b.bytes_to_device;
    a.bytes_from_device += b.bytes_from_device;
    a.bytes_device_to_device += b.bytes_device_to_device;
    a.launches += b.launches;
    a.errors += b.errors;
}

impl Metrics {
    /// Count the refusals of a service too.
    pub fn watch_refusals(&self, r: Arc<Refusals>) {
        self.refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
    }

    /// Count what `runtime` (this process's sessions' devices) does too.
    pub fn count_local(&self, runtime: Arc<offload_core::Runtime>) {
        *self.local.lock().unwrap_or_else(|e| e.into_inner()) = Some(runtime);
    }

    /// A running session's latest totals.
    pub fn report(&self, session: &str, stats: WorkerStats) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.to_string(), stats);
    }

    /// A session ended: keep its last totals.
    pub fn ended(&self, session: &str) {
        let last = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
        if let Some(last) = last {
            add(
                &mut self.ended.lock().unwrap_or_else(|e| e.into_inner()),
                &last,
            );
        }
    }

    /// Totals of every session, ended or running.
    pub fn totals(&self) -> WorkerStats {
        let mut t = *self.ended.lock().unwrap_or_else(|e| e.into_inner());
        for s in self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            add(&mut t, s);
        }
        if let Some(rt) = self
            .local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            add(&mut t, &local_totals(rt));
        }
        t
    }

    /// The Prometheus text exposition.
    pub fn render(&self, sessions_active: usize) -> String {
        let t = self.totals();
        let refused_auth: u64 = self
            .refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|r| r.total())
            .sum();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let rows: [(&str, &str, &str, u64); 10] = [
            (
                "offload_sessions_active",
                "gauge",
                "Sessions open now.",
                sessions_active as u64,
            ),
            (
                "offload_sessions_opened_total",
                "counter",
                "Sessions opened.",
                load(&self.sessions_opened),
            ),
            (
                "offload_sessions_refused_total",
                "counter",
                "Sessions refused (limits, no worker).",
                load(&self.sessions_refused),
            ),
            (
                "offload_auth_refused_total",
                "counter",
                "Calls refused for a missing or wrong token or session credential.",
                refused_auth,
            ),
            (
                "offload_worker_crashes_total",
                "counter",
                "Session worker processes that died (signal or non-zero exit).",
                load(&self.worker_crashes),
            ),
            (
                "offload_bytes_to_device_total",
                "counter",
                "Bytes copied host to device.",
                t.bytes_to_device,
            ),
            (
                "offload_bytes_from_device_total",
                "counter",
                "Bytes copied device to host.",
                t.bytes_from_device,
            ),
            (
                "offload_bytes_device_to_device_total",
                "counter",
                "Bytes copied between devices.",
                t.bytes_device_to_device,
            ),
            (
                "offload_launches_total",
                "counter",
                "Kernel launches.",
                t.launches,
            ),
            (
                "offload_errors_total",
                "counter",
                "Operations that failed.",
                t.errors,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        out
    }
}

/// What this process did so far (a session worker's report).
pub fn local_totals(runtime: &offload_core::Runtime) -> WorkerStats {
    let mut t = WorkerStats {
        errors: crate::service::ERRORS.load(Ordering::Relaxed),
        ..Default::default()
    };
    for d in runtime.devices() {
        let s = d.stats();
        t.bytes_to_device += s.to_device.get().1;
        t.bytes_from_device += s.from_device.get().1;
        t.bytes_device_to_device += s.device_to_device.get().1;
        t.launches += s.launches.load(Ordering::Relaxed);
    }
    t
}

/// Serve `GET /metrics` on `listener` until the process ends.
pub fn spawn(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    active: impl Fn() -> usize + Send + Sync + 'static,
) {
    let active = Arc::new(active);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let (metrics, active) = (metrics.clone(), active.clone());
            tokio::spawn(async move {
                let mut head = vec![0u8; 4096];
                let read =
                    tokio::time::timeout(Duration::from_secs(5), stream.read(&mut head)).await;
                let Ok(Ok(n)) = read else {
                    return;
                };
                let request = String::from_utf8_lossy(&head[..n]);
                let reply = if request.starts_with("GET /metrics ") || request.starts_with("GET / ")
                {
                    let body = metrics.render(active());
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_string()
                };
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_sessions_keep_their_totals() {
        let m = Metrics::default();
        let s = |b: u64| WorkerStats {
            bytes_to_device: b,
            launches: 1,
            ..Default::default()
        };
        m.report("a", s(10));
        m.report("a", s(30));
        m.report("b", s(5));
        m.ended("a");
        assert_eq!(m.totals().bytes_to_device, 35);
        m.ended("b");
        m.ended("b");
        assert_eq!(m.totals().bytes_to_device, 35);
        assert_eq!(m.totals().launches, 2);
        let text = m.render(0);
        assert!(
            text.contains("offload_bytes_to_device_total 35\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE offload_sessions_active gauge\n"),
            "{text}"
        );
    }
}
