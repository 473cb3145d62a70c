//! Queues, events and host functions.
//!
//! Every ol queue is a core [`offload_core::Queue`]: asynchronous and
//! in-order. On plugins with real queues (remote) operations go straight to
//! the plugin's queue and keep its pipelining; on plugins that complete work
//! inline (host, sim) and on the host device the core's executor runs them
//! on the queue's own thread, so the enqueuing call returns at once. An
//! event is a core event; olWaitEvents makes the queue's later work wait
//! (the caller is not blocked). Failures of queued operations are reported
//! by the next olSyncQueue / olSyncEvent covering them. olDestroyQueue does
//! not wait (as in LLVM 22, pending work still runs and the queue's events
//! stay valid); the last olShutDown drains every queue.

use std::ffi::c_void;
use std::sync::Arc;

use crate::abi;
use crate::error::{check_handle, check_ptr, OlResult};
use crate::handles::{context, Event, Queue};
use crate::types::*;

/// olCreateQueue.
///
/// # Safety
/// `out`, when not null, is writable for one handle.
pub unsafe fn create_queue(device: ol_device_handle_t, out: *mut ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_ptr(out, "Queue")?;
    let dev = ctx.device(device, "Device")?;
    let core = offload_core::Queue::new(dev.core())?;
    let h = ctx.queues.insert(Arc::new(Queue {
        device: dev.index,
        core,
    }));
    // SAFETY: `out` is not null (checked above) and writable (our contract).
    unsafe { abi::write(out, h as ol_queue_handle_t) };
    Ok(())
}

pub fn destroy_queue(queue: ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    let q = ctx.queue(queue)?;
    if ctx.queues.remove(queue as usize).is_none() {
        // Another thread destroyed it first.
        return Err(crate::error::err(
            crate::error::ErrorCode::InvalidQueue,
            format!("Queue {queue:p} is not a live queue (destroyed, or never created)"),
        ));
    }
    // As LLVM 22: no waiting. Work already enqueued still happens and events
    // recorded on the queue stay valid. An idle queue reports a failure
    // nobody has synchronised yet.
    q.core.close()
}

pub fn sync_queue(queue: ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    let q = ctx.queue(queue)?;
    q.core.synchronize()
}

/// Send-able wrapper for the user's callback data pointer.
struct UserData(*mut c_void);
// SAFETY: the pointer is only handed back to the user's callback, which the
// header says runs in this process; what it points to is the user's business.
unsafe impl Send for UserData {}

/// olLaunchHostFunction.
///
/// # Safety
/// `callback` may be called with `user_data` on another thread once the
/// queue reaches it.
pub unsafe fn launch_host_function(
    queue: ol_queue_handle_t,
    callback: ol_host_function_cb_t,
    user_data: *mut c_void,
) -> OlResult {
    let ctx = context()?;
    check_handle(queue, "Queue")?;
    let cb = callback.ok_or_else(|| crate::error::null_pointer("Callback"))?;
    let q = ctx.queue(queue)?;
    let data = UserData(user_data);
    q.core.host_function(Box::new(move || {
        let data = data;
        // SAFETY: the user's callback with the user's data, called once
        // where the queue reaches it (our contract).
        unsafe { cb(data.0) };
    }))
}

/// olCreateEvent.
///
/// # Safety
/// `out`, when not null, is writable for one handle.
pub unsafe fn create_event(queue: ol_queue_handle_t, out: *mut ol_event_handle_t) -> OlResult {
    let ctx = context()?;
    check_handle(queue, "Queue")?;
    check_ptr(out, "Event")?;
    let q = ctx.queue(queue)?;
    let h = ctx.events.insert(Arc::new(Event {
        queue: queue as usize,
        core: q.core.record_event()?,
    }));
    // SAFETY: `out` is not null (checked above) and writable (our contract).
    unsafe { abi::write(out, h as ol_event_handle_t) };
    Ok(())
}

pub fn destroy_event(event: ol_event_handle_t) -> OlResult {
    let ctx = context()?;
    ctx.event(event)?;
    ctx.events.remove(event as usize);
    Ok(())
}

pub fn sync_event(event: ol_event_handle_t) -> OlResult {
    let ctx = context()?;
    let e = ctx.event(event)?;
    e.core.synchronize()
}

/// olWaitEvents.
///
/// # Safety
/// `events`, when not null, is readable for `count` handles.
pub unsafe fn wait_events(
    queue: ol_queue_handle_t,
    events: *mut ol_event_handle_t,
    count: usize,
) -> OlResult {
    let ctx = context()?;
    check_handle(queue, "Queue")?;
    check_ptr(events, "Events")?;
    let q = ctx.queue(queue)?;
    // SAFETY: `events` is not null (checked above) and readable for `count`
    // handles (our contract); the handles are looked up, not trusted.
    let list = unsafe { abi::slice(events, count) };
    // Validate them all before waiting on any.
    let mut found = Vec::with_capacity(count);
    for (i, &h) in list.iter().enumerate() {
        if h.is_null() {
            return Err(crate::error::err(
                crate::error::ErrorCode::InvalidNullHandle,
                format!("validation failure: Events[{i}] is NULL"),
            ));
        }
        found.push(ctx.event(h)?);
    }
    // The queue's later work waits; the caller does not. (No cycle is
    // possible: an event only covers work enqueued before it existed.)
    for e in found {
        q.core.wait_event(&e.core)?;
    }
    Ok(())
}
