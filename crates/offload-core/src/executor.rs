//! The generic executor: a dedicated thread per queue that runs the queue's
//! operations in order, asynchronously to the threads that enqueue them.
//!
//! It serves plugins whose queues complete work inline, in the calling
//! thread ([`crate::plugin::Queue::completes_inline`]: the host CPU, the
//! simulator). Asynchronous queue semantics need more than that: a host
//! function may block until the caller, *after* enqueuing it, sets a flag
//! (LLVM's liboffload tests do exactly this). So such a core queue owns a
//! [`Worker`]: enqueuing pushes a boxed operation and wakes the worker thread
//! (started on the first enqueue, so queues that only ever see events or
//! syncs cost no thread); the worker runs the operations one after another.
//!
//! Progress is a counter: operation `n` (0-based, in enqueue order) is done
//! when `completed > n`. An event is a position (the number of operations
//! enqueued before it): complete when `completed >= position`.
//!
//! Errors of operations that fail are kept with their position and reported
//! once, by the first `sync` (any position) or `event sync`
//! (positions before the event) that covers them; later operations still run.
//!
//! Hand-off: a mutex-protected deque plus two condvars (work for the worker,
//! progress for waiters); notifications are only sent when someone sleeps.
//! At most one thread runs the queue's operations at a time (`running`):
//! normally the worker, but a thread that *waits* for the queue (sync,
//! event sync, a wait of another queue) and finds the next operation not
//! yet started runs it itself instead of sleeping until the worker has been
//! scheduled. The order is the same and the waiter would be blocked anyway;
//! it saves two thread hand-offs per launch + sync (the dominant cost of a
//! short kernel, and on a machine with fewer free cores than threads).
//! A wait from inside one of the queue's own operations is refused
//! (`InvalidArgument`) rather than left to hang.
//!
//! The worker takes everything pending at once and runs it as a batch,
//! counting each finished operation without the lock (it is the only
//! runner meanwhile; failures are filed under the lock before they are
//! counted, sleepers are woken only when there are some): a thread that
//! enqueues many operations meets the worker at the lock once per batch,
//! not twice per operation.
//!
//! Device work (launches, copies, fills) is always enqueued, never run in
//! the enqueuing thread: the call returns before the work runs. A worker
//! that finds new work on an idle queue first leaves it for
//! `OFFLOAD_QUEUE_HANDOFF_US` (3 us) to a waiter, so the common "launch,
//! then sync at once" still runs in the syncing thread with no hand-off,
//! and work nobody waits for starts on the worker within microseconds.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};

type OlResult<T = ()> = Result<T>;

fn err(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code, message)
}

/// Identifies the calling thread cheaply (the address of a thread-local),
/// unlike `std::thread::current()`, which touches a reference count.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ThreadKey(usize);

impl ThreadKey {
    #[inline]
    fn current() -> ThreadKey {
        thread_local! {
            static KEY: u8 = const { 0 };
        }
        KEY.with(|k| ThreadKey(k as *const u8 as usize))
    }
}

/// One queued operation.
pub type Op = Box<dyn FnOnce() -> OlResult + Send>;

/// A queued operation on the device queue the worker serves
/// ([`Worker::for_device`]): it gets the queue when it runs, so that it
/// need not hold a reference of its own.
pub type DeviceOp = Box<dyn FnOnce(&dyn crate::plugin::Queue) -> OlResult + Send>;

enum Queued {
    Host(Op),
    Device(DeviceOp),
}

/// Stack of a worker thread: host functions and single-group kernels run on
/// it, so give it what a main thread would have.
const WORKER_STACK: usize = 8 << 20;

fn knob(name: &str, default: u64) -> Duration {
    Duration::from_micros(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// How long a waiter spins before sleeping while another thread runs the
/// operation it waits for (`OFFLOAD_QUEUE_WAIT_SPIN_US`).
fn wait_spin() -> Duration {
    static V: OnceLock<Duration> = OnceLock::new();
    *V.get_or_init(|| knob("OFFLOAD_QUEUE_WAIT_SPIN_US", 20))
}

/// How long an idle worker looks for more work before sleeping
/// (`OFFLOAD_QUEUE_WORKER_SPIN_US`).
fn worker_spin() -> Duration {
    static V: OnceLock<Duration> = OnceLock::new();
    *V.get_or_init(|| knob("OFFLOAD_QUEUE_WORKER_SPIN_US", 50))
}

/// How long a worker that finds new work on an idle queue leaves it to a
/// waiter before starting it itself (`OFFLOAD_QUEUE_HANDOFF_US`, default
/// 3 us). A launch or copy followed at once by a sync then runs in the
/// syncing thread (no hand-off between threads, the cost of a short
/// operation), while work nobody waits for still starts within
/// microseconds, asynchronously to the thread that enqueued it.
fn handoff_grace() -> Duration {
    static V: OnceLock<Duration> = OnceLock::new();
    *V.get_or_init(|| knob("OFFLOAD_QUEUE_HANDOFF_US", 3))
}

#[derive(Default)]
struct State {
    ops: VecDeque<Queued>,
    /// Operations ever enqueued.
    enqueued: u64,
    /// Operations started (taken off `ops`, or run at once).
    started: u64,
    /// Unreported failures: (position, error), in position order.
    errors: VecDeque<(u64, Error)>,
    /// The thread running an operation of this queue now, if any.
    runner: Option<ThreadKey>,
    /// No more work will be accepted; the thread exits once drained.
    closed: bool,
    /// The worker thread sleeps on `work`.
    parked: bool,
    /// Threads sleeping on `progress`.
    waiters: usize,
    thread: Option<JoinHandle<()>>,
}

pub struct Worker {
    state: Mutex<State>,
    work: Condvar,
    progress: Condvar,
    /// Lock-free copies of the progress counters, on their own cache lines.
    counters: Counters,
    /// For the thread's name and messages ("queue #id").
    id: u64,
    /// The device queue [`DeviceOp`]s run on.
    device: Option<Arc<dyn crate::plugin::Queue>>,
}

/// Spin-loop hints between two looks of an idle worker at its counters
/// (3-15 us, depending on the CPU's `pause`).
const IDLE_PAUSES: u32 = 1024;

/// Operations finished (`completed`, the one count: the runner of the
/// queue's operations advances it), copies of `State::enqueued` and
/// `State::started` (an idle worker looks for work not yet started) and of
/// `State::waiters` (the worker tells sleepers about progress only when
/// there are some). Apart from the
/// lock and the rest of the state: a spinning worker reads these lines, and
/// sharing them with what the enqueuing thread writes under the lock would
/// cost that thread a cache miss per operation.
#[derive(Default)]
#[repr(align(128))]
struct Counters {
    completed: AtomicU64,
    enqueued: AtomicU64,
    started: AtomicU64,
    waiters: AtomicU64,
}

/// Run one operation; a panic becomes an error.
fn execute(op: impl FnOnce() -> OlResult) -> OlResult {
    catch_unwind(AssertUnwindSafe(op)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(err(
            ErrorCode::Unknown,
            format!("internal error in a queued operation: {what}"),
        ))
    })
}

impl Worker {
    pub fn new() -> Arc<Worker> {
        Self::build(None)
    }

    /// A worker in front of `device`, a queue that completes its work
    /// inline: [`Worker::enqueue_device`] runs operations on it.
    pub fn for_device(device: Arc<dyn crate::plugin::Queue>) -> Arc<Worker> {
        Self::build(Some(device))
    }

    fn build(device: Option<Arc<dyn crate::plugin::Queue>>) -> Arc<Worker> {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Arc::new(Worker {
            device,
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            progress: Condvar::new(),
            counters: Counters::default(),
            id: IDS.fetch_add(1, Ordering::Relaxed),
        })
    }

    fn name(&self) -> String {
        format!("queue #{}", self.id)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Append `op`; it runs after everything enqueued before it.
    pub fn enqueue(self: &Arc<Self>, op: Op) -> OlResult {
        self.push(Queued::Host(op))
    }

    /// Append `op` for the device queue of [`Worker::for_device`].
    pub fn enqueue_device(self: &Arc<Self>, op: DeviceOp) -> OlResult {
        self.push(Queued::Device(op))
    }

    /// Run a queued operation (in order: the caller is the runner).
    fn call(&self, op: Queued) -> OlResult {
        match op {
            Queued::Host(f) => f(),
            Queued::Device(f) => match &self.device {
                Some(q) => f(q.as_ref()),
                None => Err(err(
                    ErrorCode::Unsupported,
                    format!("{} serves no device queue", self.name()),
                )),
            },
        }
    }

    fn push(self: &Arc<Self>, op: Queued) -> OlResult {
        let mut st = self.lock();
        if st.closed {
            return Err(err(
                ErrorCode::InvalidQueue,
                format!(
                    "{} was destroyed while the call was in progress",
                    self.name()
                ),
            ));
        }
        if st.thread.is_none() {
            let me = Arc::clone(self);
            let handle = std::thread::Builder::new()
                .name(format!("offload-queue-{}", self.id))
                .stack_size(WORKER_STACK)
                .spawn(move || me.run())
                .map_err(|e| {
                    err(
                        ErrorCode::OutOfResources,
                        format!("cannot start the worker thread of {}: {e}", self.name()),
                    )
                })?;
            st.thread = Some(handle);
        }
        st.ops.push_back(op);
        st.enqueued += 1;
        self.counters.enqueued.store(st.enqueued, Ordering::Release);
        if st.parked && st.runner.is_none() {
            self.work.notify_one();
        }
        Ok(())
    }

    /// Run `op` in order: now, in the calling thread, when the queue is idle
    /// (nothing pending, nothing running), else after everything enqueued
    /// before it. For device operations only, never for host functions or
    /// waits: those may block on what the caller does after enqueuing them.
    /// The outcome is booked like any queued operation's (a failure is
    /// reported by the sync covering it), so the queue's semantics are
    /// unchanged; an idle queue just skips the hand-off to its thread.
    pub fn run_or_enqueue(
        self: &Arc<Self>,
        op: impl FnOnce() -> OlResult + Send + 'static,
    ) -> OlResult {
        let me = ThreadKey::current();
        {
            let mut st = self.lock();
            let idle = !st.closed && st.ops.is_empty() && st.runner.is_none();
            if !idle {
                drop(st);
                return self.enqueue(Box::new(op));
            }
            st.runner = Some(me);
            st.enqueued += 1;
            st.started += 1;
            self.counters.enqueued.store(st.enqueued, Ordering::Release);
            self.counters.started.store(st.started, Ordering::Release);
        }
        let r = execute(op);
        let mut st = self.lock();
        self.finish_one(&mut st, r);
        Ok(())
    }

    /// Take the next operation if nobody is running one; `me` runs it.
    fn start_next(&self, st: &mut State, me: ThreadKey) -> Option<Queued> {
        if st.runner.is_some() {
            return None;
        }
        let op = st.ops.pop_front()?;
        st.runner = Some(me);
        st.started += 1;
        self.counters.started.store(st.started, Ordering::Release);
        Some(op)
    }

    /// Count the running operation as finished (its failure filed first,
    /// so whoever sees the count sees the failure). The caller holds the
    /// lock and is the runner.
    fn complete(&self, st: &mut State, r: OlResult) {
        let position = self.counters.completed.load(Ordering::Relaxed);
        if let Err(e) = r {
            tracing::debug!(queue = self.id, position, error = %e, "queued operation failed");
            st.errors.push_back((position, e));
        }
        // Under the lock, which sleepers check the count under: no fence.
        self.counters
            .completed
            .store(position + 1, Ordering::Release);
    }

    fn completed(&self) -> u64 {
        self.counters.completed.load(Ordering::SeqCst)
    }

    /// Run the next operation in this thread if nobody runs one: the lock
    /// is released meanwhile and taken again (returned) to book its end.
    /// The guard comes back, with whether an operation ran.
    fn run_next<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        me: ThreadKey,
    ) -> (MutexGuard<'a, State>, bool) {
        let Some(op) = self.start_next(&mut st, me) else {
            return (st, false);
        };
        drop(st);
        let r = execute(|| self.call(op));
        let mut st = self.lock();
        self.finish_one(&mut st, r);
        (st, true)
    }

    /// Book the end of the running operation.
    fn finish_one(&self, st: &mut State, r: OlResult) {
        self.complete(st, r);
        st.runner = None;
        if st.waiters > 0 {
            self.progress.notify_all();
        }
        if st.parked && !st.ops.is_empty() {
            self.work.notify_one();
        }
    }

    /// The worker thread's loop.
    fn run(self: Arc<Self>) {
        let me = ThreadKey::current();
        let mut batch: VecDeque<Queued> = VecDeque::new();
        let mut st = self.lock();
        loop {
            if st.runner.is_none() && !st.ops.is_empty() {
                // Take everything pending at once: the enqueuing thread and
                // the worker then meet at the lock once per operation (its
                // end), not twice. The worker stays the runner meanwhile, so
                // nobody else starts one of them.
                std::mem::swap(&mut st.ops, &mut batch);
                st.runner = Some(me);
                st.started += batch.len() as u64;
                self.counters.started.store(st.started, Ordering::Release);
                drop(st);
                while let Some(op) = batch.pop_front() {
                    let r = execute(|| self.call(op));
                    if r.is_err() {
                        let mut st = self.lock();
                        self.complete(&mut st, r);
                    } else {
                        // Only this thread runs operations of the queue now:
                        // the count needs no lock.
                        let done = self.counters.completed.load(Ordering::Relaxed);
                        self.counters.completed.store(done + 1, Ordering::SeqCst);
                    }
                    // A waiter counts itself, then checks the count, then
                    // sleeps under the lock: it sees the new count, or we see
                    // it here and wake it once it sleeps.
                    if self.counters.waiters.load(Ordering::SeqCst) > 0 {
                        let _st = self.lock();
                        self.progress.notify_all();
                    }
                }
                st = self.lock();
                st.runner = None;
                continue;
            }
            if st.closed && st.ops.is_empty() {
                return;
            }
            if st.runner.is_none() {
                // More work often follows soon: look for it a little before
                // paying for a sleep and a wake-up, without the lock (the
                // enqueuing thread takes it). Work that shows up is left to
                // a waiter for the hand-off grace first (`handoff_grace`):
                // when one starts it, the worker goes on looking.
                drop(st);
                let c = &self.counters;
                let pending =
                    || c.enqueued.load(Ordering::Acquire) != c.started.load(Ordering::Acquire);
                while spin_every(worker_spin(), IDLE_PAUSES, pending)
                    && spin_every(handoff_grace(), IDLE_PAUSES, || !pending())
                {}
                st = self.lock();
                // Closed meanwhile (close() only wakes a parked worker), or
                // work arrived that nobody has started.
                if st.closed || (!st.ops.is_empty() && st.runner.is_none()) {
                    continue;
                }
            }
            st.parked = true;
            st = self.work.wait(st).unwrap_or_else(|e| e.into_inner());
            st.parked = false;
        }
    }

    /// The position an event recorded now stands for.
    pub fn position(&self) -> u64 {
        self.lock().enqueued
    }

    /// Whether everything enqueued before `position` has run.
    pub fn reached(&self, position: u64) -> bool {
        self.counters.completed.load(Ordering::Acquire) >= position
    }

    /// Whether something enqueued has not finished, from the lock-free
    /// counters (a snapshot: work enqueued meanwhile is not seen).
    pub fn has_pending(&self) -> bool {
        let completed = self.counters.completed.load(Ordering::Acquire);
        completed != self.counters.enqueued.load(Ordering::Acquire)
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        let st = self.lock();
        self.completed() == st.enqueued
    }

    /// Block until everything enqueued before `position` has run (no error
    /// reporting: used by waits of other queues). Runs the queue's next
    /// operations itself when nobody has started them.
    pub fn wait_until(&self, position: u64) -> OlResult {
        if self.reached(position) {
            return Ok(());
        }
        let me = ThreadKey::current();
        let mut st = self.lock();
        loop {
            if self.completed() >= position {
                return Ok(());
            }
            if st.runner == Some(me) {
                return Err(err(
                    ErrorCode::InvalidArgument,
                    format!(
                        "waiting for {} from one of its own operations would never return",
                        self.name()
                    ),
                ));
            }
            let ran;
            (st, ran) = self.run_next(st, me);
            if ran {
                continue;
            }
            // Another thread runs the operation: it may well end within
            // microseconds (an empty kernel).
            drop(st);
            if spin_until(wait_spin(), || self.reached(position)) {
                return Ok(());
            }
            st = self.lock();
            if self.completed() >= position || st.runner.is_none() {
                continue;
            }
            st.waiters += 1;
            self.counters
                .waiters
                .store(st.waiters as u64, Ordering::SeqCst);
            if self.completed() < position {
                st = self.progress.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.waiters -= 1;
            self.counters
                .waiters
                .store(st.waiters as u64, Ordering::SeqCst);
        }
    }

    /// Block until everything enqueued before `position` has run; report
    /// (once) the first failure among those operations.
    pub fn wait_for(&self, position: u64) -> OlResult {
        self.wait_until(position)?;
        let mut st = self.lock();
        self.take_errors(&mut st, position)
    }

    /// Drain: wait for everything enqueued so far; report its first failure.
    /// Operations nobody has started run in the calling thread (the lock is
    /// taken once per operation); otherwise it waits as `wait_until`.
    pub fn sync(&self) -> OlResult {
        let me = ThreadKey::current();
        let mut st = self.lock();
        let position = st.enqueued;
        while self.completed() < position {
            let ran;
            (st, ran) = self.run_next(st, me);
            if ran {
                continue;
            }
            drop(st);
            self.wait_until(position)?;
            st = self.lock();
        }
        self.take_errors(&mut st, position)
    }

    /// Remove the unreported failures before `position`; the first one is
    /// returned.
    fn take_errors(&self, st: &mut State, position: u64) -> OlResult {
        if st.errors.is_empty() {
            return Ok(());
        }
        let mut first = None;
        let mut more = 0usize;
        while st.errors.front().is_some_and(|(p, _)| *p < position) {
            let (p, e) = st.errors.pop_front().expect("checked");
            if first.is_none() {
                first = Some((p, e));
            } else {
                more += 1;
            }
        }
        match first {
            None => Ok(()),
            Some((p, e)) => {
                let also = if more > 0 {
                    format!(" ({more} later operation(s) failed too)")
                } else {
                    String::new()
                };
                Err(err(
                    e.code(),
                    format!(
                        "operation #{p} enqueued on {} failed: {}{also}",
                        self.name(),
                        e.message()
                    ),
                ))
            }
        }
    }

    /// Accept no more work. Returns the worker thread (to be joined once
    /// its work is done) and, if nothing was pending, the first unreported
    /// failure (a busy queue keeps running; its failures are dropped).
    pub fn close(&self) -> (Option<JoinHandle<()>>, OlResult) {
        let mut st = self.lock();
        st.closed = true;
        if st.parked {
            self.work.notify_one();
        }
        let thread = st.thread.take();
        let pending = if self.completed() == st.enqueued {
            self.take_errors(&mut st, u64::MAX)
        } else {
            Ok(())
        };
        (thread, pending)
    }
}

/// Spin (with an occasional yield: the machine may have few free cores)
/// until `done()` or `limit` has passed; whether `done()` became true.
fn spin_until(limit: Duration, done: impl Fn() -> bool) -> bool {
    spin_every(limit, 16, done)
}

/// [`spin_until`], asking `done()` every `pauses` spin-loop hints (16:
/// well under 1 us; an idle worker asks less often, so that the lines it
/// reads are not pulled away from the thread that enqueues and syncs).
fn spin_every(limit: Duration, pauses: u32, done: impl Fn() -> bool) -> bool {
    if limit.is_zero() {
        return done();
    }
    let start = Instant::now();
    let mut waited = 0u32;
    let mut last_check = 0u32;
    loop {
        // `pause` takes 10-140 cycles (13 ns on the 2-core CI VM).
        for _ in 0..pauses {
            std::hint::spin_loop();
        }
        if done() {
            return true;
        }
        waited += pauses;
        if waited - last_check >= 64 {
            last_check = waited;
            if start.elapsed() >= limit {
                return false;
            }
        }
        // Let a thread sharing this core run now and then (about every
        // 10 us): on an oversubscribed machine it may be the one we wait for.
        if waited.is_multiple_of(256) {
            std::thread::yield_now();
        }
    }
}

/// Join `thread` unless it is the calling thread (an operation that shuts
/// the library down from its own queue).
pub fn join(thread: JoinHandle<()>) {
    if thread.thread().id() != std::thread::current().id() {
        let _ = thread.join();
    }
}

/// Worker threads of closed queues still running their last work.
static RETIRED: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Keep a closed queue's worker thread until [`join_retired`]; finished ones
/// are joined now.
pub fn retire(thread: JoinHandle<()>) {
    let mut retired = RETIRED.lock().unwrap_or_else(|e| e.into_inner());
    let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut *retired)
        .into_iter()
        .partition(|t| t.is_finished());
    *retired = running;
    retired.push(thread);
    drop(retired);
    for t in done {
        join(t);
    }
}

/// Join every retired worker (their queues' work is done afterwards).
pub fn join_retired() {
    let threads = std::mem::take(&mut *RETIRED.lock().unwrap_or_else(|e| e.into_inner()));
    for t in threads {
        join(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn runs_in_order_and_asynchronously() {
        let w = Worker::new();
        let gate = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let g = gate.clone();
        w.enqueue(Box::new(move || {
            while !g.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            Ok(())
        }))
        .unwrap();
        for i in 0..10 {
            let log = log.clone();
            w.enqueue(Box::new(move || {
                log.lock().unwrap().push(i);
                Ok(())
            }))
            .unwrap();
        }
        let ev = w.position();
        assert!(!w.is_empty());
        assert!(!w.reached(ev));
        gate.store(true, Ordering::Release);
        w.wait_for(ev).unwrap();
        assert!(w.reached(ev) && w.is_empty());
        assert_eq!(*log.lock().unwrap(), (0..10).collect::<Vec<_>>());
        let (t, r) = w.close();
        r.unwrap();
        join(t.unwrap());
        assert!(w.enqueue(Box::new(|| Ok(()))).is_err());
    }

    #[test]
    fn failures_are_reported_once_by_the_covering_sync() {
        let w = Worker::new();
        w.enqueue(Box::new(|| Ok(()))).unwrap();
        let before = w.position();
        w.enqueue(Box::new(|| Err(err(ErrorCode::InvalidArgument, "boom"))))
            .unwrap();
        w.enqueue(Box::new(|| panic!("kaboom"))).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r2 = ran.clone();
        w.enqueue(Box::new(move || {
            r2.store(true, Ordering::Release);
            Ok(())
        }))
        .unwrap();
        // An event before the failures sees none of them.
        w.wait_for(before).unwrap();
        let e = w.sync().unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert!(e.message().contains("operation #1"), "{}", e.message());
        assert!(e.message().contains("boom"), "{}", e.message());
        assert!(e.message().contains("1 later"), "{}", e.message());
        // Later operations still ran; the failures are not reported twice.
        assert!(ran.load(Ordering::Acquire));
        w.sync().unwrap();
        let (t, r) = w.close();
        r.unwrap();
        join(t.unwrap());
    }

    #[test]
    fn close_of_an_idle_queue_reports_its_failure() {
        let w = Worker::new();
        w.enqueue(Box::new(|| Err(err(ErrorCode::Unknown, "late"))))
            .unwrap();
        w.wait_until(w.position()).unwrap();
        let (t, r) = w.close();
        assert!(r.unwrap_err().message().contains("late"));
        join(t.unwrap());
    }

    /// close() while the worker spins for more work (not parked) must still
    /// end it: the join below would hang otherwise.
    #[test]
    fn close_ends_a_spinning_worker() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..300 {
                let w = Worker::new();
                w.enqueue(Box::new(|| Ok(()))).unwrap();
                // Let the worker run it (no helping), then close at once.
                while !w.reached(1) {
                    std::hint::spin_loop();
                }
                let (t, r) = w.close();
                r.unwrap();
                join(t.unwrap());
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("a closed worker did not exit");
    }

    #[test]
    fn idle_queues_run_device_work_inline_busy_ones_keep_order() {
        let w = Worker::new();
        let caller = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(None));
        let r = ran_on.clone();
        w.run_or_enqueue(move || {
            *r.lock().unwrap() = Some(std::thread::current().id());
            Ok(())
        })
        .unwrap();
        assert_eq!(*ran_on.lock().unwrap(), Some(caller), "idle: ran inline");
        // A failure run inline is still reported by the covering sync.
        w.run_or_enqueue(|| Err(err(ErrorCode::BackendFailure, "inline boom")))
            .unwrap();
        assert!(w.sync().unwrap_err().message().contains("inline boom"));
        // Behind a blocked host function, device work waits its turn.
        let gate = Arc::new(AtomicBool::new(false));
        let g = gate.clone();
        w.enqueue(Box::new(move || {
            while !g.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            Ok(())
        }))
        .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        w.run_or_enqueue(move || {
            l.lock().unwrap().push("device op");
            Ok(())
        })
        .unwrap();
        assert!(
            log.lock().unwrap().is_empty(),
            "must not overtake the blocked op"
        );
        gate.store(true, Ordering::Release);
        w.sync().unwrap();
        assert_eq!(*log.lock().unwrap(), vec!["device op"]);
        let (t, _) = w.close();
        join(t.unwrap());
    }

    #[test]
    fn waiting_on_itself_is_an_error_not_a_hang() {
        let w = Worker::new();
        let w2 = w.clone();
        let out = Arc::new(Mutex::new(None));
        let o = out.clone();
        w.enqueue(Box::new(move || {
            *o.lock().unwrap() = Some(w2.sync().is_err());
            Ok(())
        }))
        .unwrap();
        w.sync().unwrap();
        assert_eq!(*out.lock().unwrap(), Some(true));
        let (t, _) = w.close();
        join(t.unwrap());
    }
}
