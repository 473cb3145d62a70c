//! Waiting for a point in a queue, blocking or as a future.
//!
//! A [`Completion`] is a core event plus what it takes to wake a future
//! without any async runtime: on the first poll that finds the event
//! incomplete it enqueues a host function on the event's queue (the queue
//! runs it once everything before it has finished, so it is the
//! completion callback) which marks the completion fired and wakes the
//! last waker. If the queue takes no more work (closed), a small helper
//! thread waits for the event instead.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use offload_core::Result;

pub(crate) struct Completion {
    event: offload_core::Event,
    queue: Arc<offload_core::Queue>,
    /// Set by the first poll that found the event incomplete (a clone
    /// starts unarmed: one waker slot per future).
    wake: Option<Arc<WakeState>>,
}

#[derive(Default)]
struct WakeState {
    inner: Mutex<WakeInner>,
    done: Condvar,
}

#[derive(Default)]
struct WakeInner {
    /// Everything up to the event has finished.
    fired: bool,
    /// A helper thread waits (and takes the event's error, kept here).
    by_thread: bool,
    result: Option<Result<()>>,
    waker: Option<Waker>,
}

impl WakeState {
    fn lock(&self) -> MutexGuard<'_, WakeInner> {
        // The lock guards plain flags: a panic elsewhere leaves them valid.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fire(&self, result: Option<Result<()>>) {
        let waker = {
            let mut g = self.lock();
            g.fired = true;
            g.result = result;
            g.waker.take()
        };
        self.done.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Clone for Completion {
    fn clone(&self) -> Self {
        Completion::new(self.queue.clone(), self.event.clone())
    }
}

impl Completion {
    pub(crate) fn new(queue: Arc<offload_core::Queue>, event: offload_core::Event) -> Completion {
        Completion {
            event,
            queue,
            wake: None,
        }
    }

    /// The core event.
    pub(crate) fn event(&self) -> &offload_core::Event {
        &self.event
    }

    /// Whether the work up to the event has finished (errors are reported
    /// by [`wait`](Self::wait)).
    pub(crate) fn is_complete(&self) -> Result<bool> {
        if let Some(ws) = &self.wake {
            let g = ws.lock();
            if g.by_thread {
                return Ok(g.fired);
            }
        }
        self.event.is_complete()
    }

    /// Block until the event; the first failure of the work before it.
    pub(crate) fn wait(&self) -> Result<()> {
        if let Some(ws) = &self.wake {
            let mut g = ws.lock();
            if g.by_thread {
                while !g.fired {
                    g = ws.done.wait(g).unwrap_or_else(PoisonError::into_inner);
                }
                return g.result.take().unwrap_or(Ok(()));
            }
        }
        self.event.synchronize()
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(ws) = &self.wake {
            let mut g = ws.lock();
            if g.fired {
                if g.by_thread {
                    return Poll::Ready(g.result.take().unwrap_or(Ok(())));
                }
                drop(g);
                // Complete: this returns at once, with the event's error.
                return Poll::Ready(self.event.synchronize());
            }
            g.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        match self.event.is_complete() {
            Ok(true) => return Poll::Ready(self.event.synchronize()),
            Ok(false) => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
        let ws = Arc::new(WakeState::default());
        ws.lock().waker = Some(cx.waker().clone());
        let st = ws.clone();
        if self
            .queue
            .host_function(Box::new(move || st.fire(None)))
            .is_err()
        {
            // The queue takes no more work: a helper thread waits instead.
            ws.lock().by_thread = true;
            let (st, event) = (ws.clone(), self.event.clone());
            let spawned = std::thread::Builder::new()
                .name("offload-wake".into())
                .spawn(move || {
                    let r = event.synchronize();
                    st.fire(Some(r));
                });
            if spawned.is_err() {
                // No thread either: block, as `wait` would.
                return Poll::Ready(self.event.synchronize());
            }
        }
        self.wake = Some(ws);
        Poll::Pending
    }
}
