//! Pipelined in-order queues: operations stream to the server without
//! waiting; only synchronisation points (events, sync, reads) wait for a
//! completion. Errors of earlier operations surface at the next wait.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use offload_core::plugin::{self, DevicePtr, KernelArgs, LaunchConfig};
use offload_core::{Error, ErrorCode, Result};
use offload_forward::request;
use offload_proto::local_ring::RingError;
use offload_proto::prost::Message;
use offload_proto::{queue_op, Empty, QueueCompletion, QueueOp};
use tokio::sync::mpsc;

use crate::connection::{io_runtime, rpc_error, Connection};
use crate::device::{RemoteDevice, RemoteKernel};
use crate::local::LocalLink;

/// Bytes per message of a copy carried in a same-host queue (its ring
/// holds 1 MiB).
const LOCAL_CHUNK: usize = 256 << 10;

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
    /// The ticket of the last copy handed over unsynced
    /// (`copy_to_device_unsynced`): other queues' work waits for it.
    unsynced: u64,
}

pub(crate) struct Shared {
    progress: Mutex<Progress>,
    cv: Condvar,
    /// The queue's rings when it runs through shared memory: whoever waits
    /// reads the completions (no reader task in between).
    local: Option<LocalLink>,
    spin: Duration,
}

/// How long a wait sleeps before it looks at the session again.
const CHECK_EVERY: Duration = Duration::from_millis(100);

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take in the completions waiting in the rings (local queues only).
    fn drain(&self, p: &mut Progress, conn: &Connection) {
        let Some(link) = &self.local else { return };
        if p.broken.is_some() {
            return;
        }
        let mut message = Vec::new();
        let mut taken = 0;
        loop {
            match link.ring.recv(&mut message) {
                Ok(true) => match QueueCompletion::decode(message.as_slice()) {
                    Ok(c) => {
                        complete(p, c, &conn.addr);
                        taken += 1;
                    }
                    Err(e) => {
                        p.broken = Some(Error::backend(format!(
                            "remote server {}: undecodable completion on the same-host queue: {e}",
                            conn.addr
                        )));
                        break;
                    }
                },
                Ok(false) => break,
                Err(RingError::Closed) => {
                    p.broken = Some(if conn.is_alive() {
                        Error::backend(format!(
                            "remote server {}: the same-host queue was closed by the server",
                            conn.addr
                        ))
                    } else {
                        conn.gone("queue")
                    });
                    break;
                }
                Err(e) => {
                    p.broken = Some(Error::backend(format!("remote server {}: {e}", conn.addr)));
                    break;
                }
            }
        }
        if taken > 0 {
            // Other threads waiting on this queue look at what was taken.
            link.ring.nudge();
        }
    }

    /// Let go of the lock until something may have changed: a completion
    /// arrived, or a while passed (the caller looks at the session again).
    fn pause<'a>(
        &'a self,
        p: std::sync::MutexGuard<'a, Progress>,
    ) -> std::sync::MutexGuard<'a, Progress> {
        match &self.local {
            None => {
                self.cv
                    .wait_timeout(p, CHECK_EVERY)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            Some(link) => {
                // Read before the lock goes: a drain by another thread
                // after this point moves it.
                let seen = link.ring.doorbell();
                drop(p);
                link.ring.wait(seen, self.spin, CHECK_EVERY);
                self.lock()
            }
        }
    }
}

/// Apply one completion: its output, a read's bytes, its error, its ticket.
fn complete(p: &mut Progress, c: QueueCompletion, addr: &str) {
    // Out before the wait for this operation returns.
    crate::output::emit(c.output.as_ref());
    if let Some((dst, len)) = p.pending_reads.remove(&c.ticket) {
        let n = len.min(c.data.len());
        // SAFETY: the enqueuer keeps `dst` valid until the queue syncs.
        unsafe { std::ptr::copy_nonoverlapping(c.data.as_ptr(), dst as *mut u8, n) };
    }
    if c.code != 0 && p.first_error.is_none() {
        let code = ErrorCode::from_raw(c.code).unwrap_or(ErrorCode::BackendFailure);
        p.first_error = Some(Error::new(
            code,
            format!("remote server {addr}: {}", c.message),
        ));
    }
    if c.ticket > p.completed {
        p.completed = c.ticket;
    }
}

pub struct RemoteQueue {
    conn: Arc<Connection>,
    /// This queue's number in its session (`Connection::writer`).
    id: u64,
    device: u32,
    /// The gRPC stream's sender; None for a same-host queue
    /// (`Shared::local`).
    tx: Option<mpsc::UnboundedSender<QueueOp>>,
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
        let local = conn.local.as_ref().and_then(|l| l.open());
        let spin = conn.local.as_ref().map(|l| l.spin).unwrap_or_default();
        let same_host = local.is_some();
        let shared = Arc::new(Shared {
            progress: Mutex::new(Progress::default()),
            cv: Condvar::new(),
            local,
            spin,
        });
        conn.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&shared));
        let id = conn.next_queue.fetch_add(1, Ordering::Relaxed);
        let tx = match same_host {
            true => None,
            false => Some(Self::stream(&conn, &shared)),
        };
        Ok(RemoteQueue {
            conn,
            id,
            device,
            tx,
            shared,
        })
    }

    /// Open the queue's gRPC stream; a task applies its completions.
    fn stream(conn: &Arc<Connection>, shared: &Arc<Shared>) -> mpsc::UnboundedSender<QueueOp> {
        let (tx, rx) = mpsc::unbounded_channel::<QueueOp>();
        let mut client = conn.client.clone();
        let sh = shared.clone();
        let addr = conn.addr.clone();
        let weak = Arc::downgrade(conn);
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
                                complete(&mut sh.lock(), c, &addr);
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
        tx
    }

    fn send(&self, ticketed: bool, op: queue_op::Op) -> Result<u64> {
        self.conn.check_alive("queue operation")?;
        if !matches!(op, queue_op::Op::Marker(_)) {
            fence(&self.conn, Some(&self.shared));
            // Every operation but a marker may change device memory.
            self.writes();
        }
        let ticket = if ticketed {
            let mut p = self.shared.lock();
            p.next_ticket += 1;
            p.next_ticket
        } else {
            0
        };
        self.push(QueueOp {
            ticket,
            device: self.device,
            op: Some(op),
        })?;
        Ok(ticket)
    }

    fn push(&self, op: QueueOp) -> Result<()> {
        let closed = || {
            Error::backend(format!(
                "remote server {}: queue stream is closed",
                self.conn.addr
            ))
        };
        match (&self.tx, &self.shared.local) {
            (Some(tx), _) => tx.send(op).map_err(|_| closed()),
            (None, Some(link)) => self.push_local(link, &op.encode_to_vec()),
            (None, None) => Err(closed()),
        }
    }

    /// Put an operation into the rings; while they are full, take in
    /// completions (the server may be waiting for room to reply).
    fn push_local(&self, link: &LocalLink, bytes: &[u8]) -> Result<()> {
        let mut pause = Duration::from_micros(10);
        loop {
            match link.ring.send(bytes) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(RingError::Closed) if !self.conn.is_alive() => {
                    return Err(self.conn.gone("queue"))
                }
                Err(e) => {
                    return Err(Error::backend(format!(
                        "remote server {}: {e}",
                        self.conn.addr
                    )))
                }
            }
            let mut p = self.shared.lock();
            self.shared.drain(&mut p, &self.conn);
            if let Some(e) = &p.broken {
                return Err(e.clone());
            }
            drop(p);
            self.conn.check_alive("queue operation")?;
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// Bytes per message of a copy carried in the queue.
    fn chunk(&self) -> usize {
        match self.shared.local {
            Some(_) => self.conn.chunk_size.min(LOCAL_CHUNK),
            None => self.conn.chunk_size,
        }
    }

    /// A host-to-device copy carried in the stream, in `chunk_size` pieces
    /// whose bytes are captured now (`src` may be reused at once).
    /// `unsynced`: the last piece carries a ticket, so that other queues'
    /// work waits for its completion (`fence`) and this queue's next wait
    /// reports its error.
    ///
    /// # Safety
    /// `src` readable for `size` bytes for the duration of the call.
    unsafe fn write_inline(
        &self,
        dst: DevicePtr,
        src: *const u8,
        size: usize,
        unsynced: bool,
    ) -> Result<()> {
        self.conn.check_alive("queue operation")?;
        fence(&self.conn, Some(&self.shared));
        self.writes();
        let chunk = self.chunk();
        let mut off = 0;
        while off < size {
            let n = chunk.min(size - off);
            let ticket = if unsynced && off + n >= size {
                let mut p = self.shared.lock();
                p.next_ticket += 1;
                p.unsynced = p.next_ticket;
                p.next_ticket
            } else {
                0
            };
            if unsynced {
                self.conn.unsynced_copies.store(true, Ordering::Release);
            }
            // SAFETY: the caller guarantees `src` is readable for `size`
            // bytes, and `off + n <= size`.
            let data = unsafe { std::slice::from_raw_parts(src.add(off), n) }.to_vec();
            self.push(QueueOp {
                ticket,
                device: self.device,
                op: Some(queue_op::Op::Write(request::write(
                    self.device,
                    DevicePtr(dst.0 + off as u64),
                    n,
                    data,
                ))),
            })?;
            off += n;
        }
        Ok(())
    }

    /// Whether a copy of `size` bytes goes over the data side channel.
    fn bulk(&self, size: usize) -> bool {
        self.conn.data.as_ref().is_some_and(|d| d.usable()) && size >= crate::data::MIN_BYTES
    }

    fn marker(&self) -> Result<u64> {
        self.send(true, queue_op::Op::Marker(Empty {}))
    }

    /// Note work of this queue that may change device memory, before it is
    /// sent (`memory_snapshot`).
    fn writes(&self) {
        let c = &self.conn;
        c.device_writes.fetch_add(1, Ordering::SeqCst);
        let w = c.writer.load(Ordering::SeqCst);
        if w != self.id
            && w != crate::connection::MANY_WRITERS
            && c.writer
                .compare_exchange(0, self.id, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            c.writer
                .store(crate::connection::MANY_WRITERS, Ordering::SeqCst);
        }
    }

    /// Whether only this queue has ever sent work that may change device
    /// memory in this session.
    fn sole_writer(&self) -> bool {
        let w = self.conn.writer.load(Ordering::SeqCst);
        w == 0 || w == self.id
    }
}

/// Wait until every copy that a queue of `conn` (other than `own`) handed
/// over unsynced has completed on the server: work sent after this runs
/// after those copies, as it would had their callers waited for them.
pub(crate) fn fence(conn: &Connection, own: Option<&Arc<Shared>>) {
    if !conn.unsynced_copies.load(Ordering::Acquire) {
        return;
    }
    let queues: Vec<Arc<Shared>> = {
        let mut all = conn.queues.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|q| q.strong_count() > 0);
        let is_own =
            |q: &Weak<Shared>| own.is_some_and(|o| std::ptr::eq(q.as_ptr(), Arc::as_ptr(o)));
        if all.iter().all(is_own) {
            // The session's only queue: nothing to order after.
            return;
        }
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for sh in &queues {
        if own.is_some_and(|o| Arc::ptr_eq(o, sh)) {
            continue;
        }
        let mut p = sh.lock();
        sh.drain(&mut p, conn);
        // A broken stream runs nothing more: there is nothing to order after.
        while p.completed < p.unsynced && p.broken.is_none() && conn.is_alive() {
            p = sh.pause(p);
            sh.drain(&mut p, conn);
        }
    }
}

/// Wait until `ticket` completed; report the first error seen so far.
fn wait(shared: &Shared, conn: &Connection, ticket: u64) -> Result<()> {
    let mut p = shared.lock();
    loop {
        shared.drain(&mut p, conn);
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
        p = shared.pause(p);
    }
}

fn kernel_id(kernel: &dyn plugin::Kernel) -> Result<u64> {
    RemoteKernel::id_of(kernel, "remote")
}

impl plugin::Queue for RemoteQueue {
    unsafe fn copy_to_device(&self, dst: DevicePtr, src: *const u8, size: usize) -> Result<()> {
        if self.bulk(size) {
            // Large copies take the data side channel, after the queue's
            // earlier work (in order, but not pipelined).
            self.synchronize()?;
            self.writes();
            // SAFETY: the trait's contract: `src` readable for `size` bytes.
            return unsafe { crate::memory::write(&self.conn, self.device, dst, src, size) };
        }
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.write_inline(dst, src, size, false) }
    }

    unsafe fn copy_to_device_unsynced(
        &self,
        dst: DevicePtr,
        src: *const u8,
        size: usize,
    ) -> Result<()> {
        if self.bulk(size) {
            // SAFETY: the caller's guarantee; the data channel's copy is
            // complete when it returns.
            return unsafe { self.copy_to_device(dst, src, size) };
        }
        // SAFETY: the caller's guarantee, passed on.
        unsafe { self.write_inline(dst, src, size, true) }
    }

    unsafe fn copy_from_device(&self, dst: *mut u8, src: DevicePtr, size: usize) -> Result<()> {
        if self.bulk(size) {
            self.synchronize()?;
            // SAFETY: the trait's contract: `dst` writable for `size` bytes.
            return unsafe { crate::memory::read(&self.conn, self.device, dst, src, size) };
        }
        self.conn.check_alive("queue operation")?;
        fence(&self.conn, Some(&self.shared));
        let chunk = self.chunk();
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
            self.push(QueueOp {
                ticket,
                device: self.device,
                op: Some(queue_op::Op::Read(request::read(
                    self.device,
                    DevicePtr(src.0 + off as u64),
                    n,
                ))),
            })?;
            off += n;
        }
        Ok(())
    }

    unsafe fn copy_within(&self, dst: DevicePtr, src: DevicePtr, size: usize) -> Result<()> {
        let c = request::copy(self.device, src, self.device, dst, size);
        self.send(false, c).map(|_| ())
    }

    unsafe fn copy_to_peer(
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

    unsafe fn fill(&self, dst: DevicePtr, pattern: &[u8], size: usize) -> Result<()> {
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
        let mut p = self.shared.lock();
        self.shared.drain(&mut p, &self.conn);
        Ok(p.completed >= p.next_ticket)
    }

    // Other queues' work may run on the server at any time; only while this
    // queue is the session's one writer does its synchronisation leave
    // device memory settled until it sends more.
    fn memory_snapshot(&self) -> Option<u64> {
        self.sole_writer()
            .then(|| self.conn.device_writes.load(Ordering::SeqCst))
    }

    fn unchanged_since(&self, token: u64) -> bool {
        self.sole_writer() && self.conn.device_writes.load(Ordering::SeqCst) == token
    }
}

impl plugin::Event for RemoteEvent {
    fn synchronize(&self) -> Result<()> {
        wait(&self.shared, &self.conn, self.ticket)
    }
    fn is_complete(&self) -> Result<bool> {
        let mut p = self.shared.lock();
        self.shared.drain(&mut p, &self.conn);
        if let Some(e) = &p.broken {
            if p.completed < self.ticket {
                return Err(e.clone());
            }
        }
        Ok(p.completed >= self.ticket)
    }
}
