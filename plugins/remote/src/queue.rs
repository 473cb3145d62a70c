//! Pipelined in-order queues: operations stream to the server without
//! waiting; only synchronisation points (events, sync, reads) wait for a
//! completion. Errors of earlier operations surface at the next wait.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::{Error, ErrorCode, Result};
use offload_forward::request;
use offload_proto::{queue_op, Empty, QueueOp};
use tokio::sync::mpsc;

use crate::connection::{io_runtime, rpc_error, Connection};
use crate::device::{RemoteDevice, RemoteKernel};

#[derive(Default)]
struct Progress {
    next_ticket: u64,
    /// Highest ticket completed (the server completes in order).
    completed: u64,
    first_error: Option<Error>,
    /// Reads waiting for their data: ticket -> (host address, bytes).
    pending_reads: HashMap<u64, (usize, usize)>,
    /// The stream ended: nothing more will complete.
    broken: Option<Error>,
}

struct Shared {
    progress: Mutex<Progress>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct RemoteQueue {
    conn: Arc<Connection>,
    device: u32,
    tx: mpsc::UnboundedSender<QueueOp>,
    shared: Arc<Shared>,
}

pub struct RemoteEvent {
    shared: Arc<Shared>,
    ticket: u64,
    conn: Arc<Connection>,
}

impl RemoteQueue {
    pub fn open(conn: Arc<Connection>, device: u32) -> Result<RemoteQueue> {
        conn.check_alive("create queue")?;
        let (tx, rx) = mpsc::unbounded_channel::<QueueOp>();
        let shared = Arc::new(Shared {
            progress: Mutex::new(Progress::default()),
            cv: Condvar::new(),
        });
        let mut client = conn.client.clone();
        let sh = shared.clone();
        let addr = conn.addr.clone();
        let weak = Arc::downgrade(&conn);
        io_runtime().spawn(async move {
            let lost;
            let mut end = match client
                .queue(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
                .await
            {
                // The worker can die before the stream's headers reach us
                // (a launch that exits at once on a loaded machine).
                Err(s) => {
                    lost = crate::connection::connection_lost(&s);
                    rpc_error(&addr, "queue", s)
                }
                Ok(resp) => {
                    let mut completions = resp.into_inner();
                    loop {
                        match completions.message().await {
                            Ok(Some(c)) => {
                                // Out before the wait for this operation returns.
                                crate::output::emit(c.output.as_ref());
                                let mut p = sh.lock();
                                if let Some((dst, len)) = p.pending_reads.remove(&c.ticket) {
                                    let n = len.min(c.data.len());
                                    // SAFETY: the enqueuer keeps `dst` valid until the queue syncs.
                                    unsafe {
                                        std::ptr::copy_nonoverlapping(
                                            c.data.as_ptr(),
                                            dst as *mut u8,
                                            n,
                                        )
                                    };
                                }
                                if c.code != 0 && p.first_error.is_none() {
                                    let code = ErrorCode::from_raw(c.code)
                                        .unwrap_or(ErrorCode::BackendFailure);
                                    p.first_error = Some(Error::new(
                                        code,
                                        format!("remote server {addr}: {}", c.message),
                                    ));
                                }
                                if c.ticket > p.completed {
                                    p.completed = c.ticket;
                                }
                                sh.cv.notify_all();
                            }
                            Ok(None) => {
                                lost = true;
                                break Error::backend(format!(
                                    "remote server {addr}: queue closed by the server"
                                ));
                            }
                            Err(s) => {
                                lost = crate::connection::connection_lost(&s);
                                break rpc_error(&addr, "queue", s);
                            }
                        }
                    }
                }
            };
            // The session's end says why better than the torn stream.
            if lost {
                if let Some(conn) = weak.upgrade() {
                    if let Some(e) = conn.end_of_session("queue").await {
                        end = e;
                    }
                }
            }
            sh.lock().broken = Some(end);
            sh.cv.notify_all();
        });
        Ok(RemoteQueue {
            conn,
            device,
            tx,
            shared,
        })
    }

    fn send(&self, ticketed: bool, op: queue_op::Op) -> Result<u64> {
        self.conn.check_alive("queue operation")?;
        let ticket = if ticketed {
            let mut p = self.shared.lock();
            p.next_ticket += 1;
            p.next_ticket
        } else {
            0
        };
        self.tx
            .send(QueueOp {
                ticket,
                device: self.device,
                op: Some(op),
            })
            .map_err(|_| {
                Error::backend(format!(
                    "remote server {}: queue stream is closed",
                    self.conn.addr
                ))
            })?;
        Ok(ticket)
    }

    /// Whether a copy of `size` bytes goes over the data side channel.
    fn bulk(&self, size: usize) -> bool {
        self.conn.data.as_ref().is_some_and(|d| d.usable()) && size >= crate::data::MIN_BYTES
    }

    fn marker(&self) -> Result<u64> {
        self.send(true, queue_op::Op::Marker(Empty {}))
    }
}

/// Wait until `ticket` completed; report the first error seen so far.
fn wait(shared: &Shared, conn: &Connection, ticket: u64) -> Result<()> {
    let mut p = shared.lock();
    loop {
        if p.completed >= ticket {
            return match p.first_error.take() {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        if let Some(e) = &p.broken {
            return Err(e.clone());
        }
        if !conn.is_alive() {
            return Err(conn.gone("queue"));
        }
        p = shared
            .cv
            .wait_timeout(p, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

fn kernel_id(kernel: &dyn plugin::Kernel) -> Result<u64> {
    RemoteKernel::id_of(kernel).ok_or_else(|| {
        Error::invalid_argument(format!(
            "kernel '{}' does not belong to the remote plugin",
            kernel.name()
        ))
    })
}

impl plugin::Queue for RemoteQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        if self.bulk(size) {
            // Large copies take the data side channel, after the queue's
            // earlier work (in order, but not pipelined).
            self.synchronize()?;
            return crate::memory::write(&self.conn, self.device, dst, src, size);
        }
        // The bytes are captured now, so `src` may be reused at once.
        let chunk = self.conn.chunk_size;
        let mut off = 0;
        while off < size {
            let n = chunk.min(size - off);
            // SAFETY: the caller guarantees `src` is readable for `size`
            // bytes, and `off + n <= size`.
            let data = unsafe { std::slice::from_raw_parts(src.add(off), n) }.to_vec();
            self.send(
                false,
                queue_op::Op::Write(request::write(
                    self.device,
                    DevicePtr(dst.0 + off as u64),
                    n,
                    data,
                )),
            )?;
            off += n;
        }
        Ok(())
    }

    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        if self.bulk(size) {
            self.synchronize()?;
            return crate::memory::read(&self.conn, self.device, dst, src, size);
        }
        let chunk = self.conn.chunk_size;
        let mut off = 0;
        while off < size {
            let n = chunk.min(size - off);
            // Register the destination before the request can complete.
            let ticket = {
                let mut p = self.shared.lock();
                p.next_ticket += 1;
                let t = p.next_ticket;
                p.pending_reads.insert(t, (dst as usize + off, n));
                t
            };
            let op = QueueOp {
                ticket,
                device: self.device,
                op: Some(queue_op::Op::Read(request::read(
                    self.device,
                    DevicePtr(src.0 + off as u64),
                    n,
                ))),
            };
            self.tx.send(op).map_err(|_| {
                Error::backend(format!(
                    "remote server {}: queue stream is closed",
                    self.conn.addr
                ))
            })?;
            off += n;
        }
        Ok(())
    }

    fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        let c = request::copy(self.device, src, self.device, dst, size);
        self.send(false, c).map(|_| ())
    }

    fn copy_to_peer(
        &self,
        dst_device: &dyn plugin::Device,
        dst: DevicePtr,
        src: DevicePtr,
        size: usize,
    ) -> Result<bool> {
        // Devices of the same server copy there, without a round trip through us.
        let Some(peer) = dst_device.as_any().downcast_ref::<RemoteDevice>() else {
            return Ok(false);
        };
        if !Arc::ptr_eq(peer.link(), &self.conn) {
            return Ok(false);
        }
        let c = request::copy(self.device, src, peer.remote_id(), dst, size);
        self.send(false, c).map(|_| true)
    }

    fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
        let f = request::fill(self.device, dst, pattern, size);
        self.send(false, f).map(|_| ())
    }

    fn launch(
        &self,
        kernel: &dyn plugin::Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
    ) -> Result<()> {
        let l = request::launch(kernel_id(kernel)?, args, config);
        self.send(false, l).map(|_| ())
    }

    fn host_function(&self, f: Box<dyn FnOnce() + Send>) -> Result<()> {
        // Runs once everything before it has completed on the server.
        let t = self.marker()?;
        wait(&self.shared, &self.conn, t)?;
        f();
        Ok(())
    }

    fn record_event(&self) -> Result<Arc<dyn plugin::Event>> {
        let ticket = self.marker()?;
        Ok(Arc::new(RemoteEvent {
            shared: self.shared.clone(),
            ticket,
            conn: self.conn.clone(),
        }))
    }

    fn wait_event(&self, event: &dyn plugin::Event) -> Result<()> {
        // Cross-queue dependencies are resolved on the client.
        event.synchronize()
    }

    fn synchronize(&self) -> Result<()> {
        let t = self.marker()?;
        wait(&self.shared, &self.conn, t)
    }

    fn is_idle(&self) -> Result<bool> {
        let p = self.shared.lock();
        Ok(p.completed >= p.next_ticket)
    }
}

impl plugin::Event for RemoteEvent {
    fn synchronize(&self) -> Result<()> {
        wait(&self.shared, &self.conn, self.ticket)
    }
    fn is_complete(&self) -> Result<bool> {
        let p = self.shared.lock();
        if let Some(e) = &p.broken {
            if p.completed < self.ticket {
                return Err(e.clone());
            }
        }
        Ok(p.completed >= self.ticket)
    }
}
