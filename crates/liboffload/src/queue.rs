//! Queues, events and host functions.
//!
//! Every ol queue is asynchronous and in-order: its operations (kernel
//! launches through the plugin queue, copies, fills, host functions, waits
//! on other queues' events) run on the queue's own worker thread
//! ([`crate::worker`]), so the enqueuing call returns at once. An event is a
//! position in its queue; olWaitEvents enqueues a wait for the positions of
//! other queues' events (the caller is not blocked). Failures of queued
//! operations are reported by the next olSyncQueue / olSyncEvent covering
//! them. olDestroyQueue does not wait (as in LLVM 22, pending work still
//! runs and the queue's events stay valid); the last olShutDown drains every
//! queue and joins every worker.

use std::ffi::c_void;
use std::sync::Arc;

use crate::error::{check_handle, check_ptr, OlResult};
use crate::handles::{context, DeviceKind, Event, Queue};
use crate::types::*;
use crate::worker::Worker;

pub unsafe fn create_queue(device: ol_device_handle_t, out: *mut ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_ptr(out, "Queue")?;
    let dev = ctx.device(device, "Device")?;
    let raw = match &dev.kind {
        DeviceKind::Plugin { core, .. } => Some(core.create_queue()?),
        DeviceKind::Host => None,
    };
    let worker = Worker::new();
    let h = ctx.queues.insert(Arc::new(Queue {
        device: dev.index,
        raw,
        worker,
    }));
    out.write(h as ol_queue_handle_t);
    Ok(())
}

pub unsafe fn destroy_queue(queue: ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    let q = ctx.queue(queue)?;
    if ctx.queues.remove(queue as usize).is_none() {
        // Another thread destroyed it first.
        return Err(crate::error::err(
            crate::error::ErrorCode::InvalidQueue,
            format!("Queue {queue:p} is not a live queue (destroyed, or never created)"),
        ));
    }
    // As LLVM 22: no waiting. Work already enqueued still happens (the
    // worker finishes it, then exits) and events recorded on the queue stay
    // valid. An idle queue reports a failure nobody has synchronised yet.
    let (thread, pending) = q.worker.close();
    if let Some(t) = thread {
        ctx.retire(t);
    }
    pending
}

pub unsafe fn sync_queue(queue: ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    let q = ctx.queue(queue)?;
    q.worker.sync()
}

/// Send-able wrapper for the user's callback data pointer.
struct UserData(*mut c_void);
// SAFETY: the pointer is only handed back to the user's callback, which the
// header says runs in this process; what it points to is the user's business.
unsafe impl Send for UserData {}

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
    q.worker.enqueue(Box::new(move || {
        let data = data;
        // SAFETY: calling the user's callback with the user's data.
        unsafe { cb(data.0) };
        Ok(())
    }))
}

pub unsafe fn create_event(queue: ol_queue_handle_t, out: *mut ol_event_handle_t) -> OlResult {
    let ctx = context()?;
    check_handle(queue, "Queue")?;
    check_ptr(out, "Event")?;
    let q = ctx.queue(queue)?;
    let h = ctx.events.insert(Arc::new(Event {
        queue: queue as usize,
        worker: q.worker.clone(),
        position: q.worker.position(),
    }));
    out.write(h as ol_event_handle_t);
    Ok(())
}

pub unsafe fn destroy_event(event: ol_event_handle_t) -> OlResult {
    let ctx = context()?;
    ctx.event(event)?;
    ctx.events.remove(event as usize);
    Ok(())
}

pub unsafe fn sync_event(event: ol_event_handle_t) -> OlResult {
    let ctx = context()?;
    let e = ctx.event(event)?;
    e.worker.wait_for(e.position)
}

pub unsafe fn wait_events(
    queue: ol_queue_handle_t,
    events: *mut ol_event_handle_t,
    count: usize,
) -> OlResult {
    let ctx = context()?;
    check_handle(queue, "Queue")?;
    check_ptr(events, "Events")?;
    let q = ctx.queue(queue)?;
    let list = std::slice::from_raw_parts(events, count);
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
    // Events of this queue are ordered already; complete ones need nothing.
    let pending: Vec<(Arc<Worker>, u64)> = found
        .into_iter()
        .filter(|e| !Arc::ptr_eq(&e.worker, &q.worker) && !e.worker.reached(e.position))
        .map(|e| (e.worker.clone(), e.position))
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    // The queue's later work waits; the caller does not. (No cycle is
    // possible: an event only covers work enqueued before it existed.)
    q.worker.enqueue(Box::new(move || {
        for (worker, position) in pending {
            worker.wait_until(position)?;
        }
        Ok(())
    }))
}

/// Complete a plugin-queue operation on the worker: the worker counts an
/// operation as done only when the device has done it, so a plugin whose
/// queues are asynchronous is drained here (the host plugin's queues are
/// idle when the call returns).
pub fn finish(raw: &dyn offload_core::plugin::Queue, r: OlResult) -> OlResult {
    r?;
    if !raw.is_idle()? {
        raw.synchronize()?;
    }
    Ok(())
}

/// Run `op` on `queue`'s worker, or now in the calling thread without one.
pub fn submit(queue: Option<&Queue>, op: impl FnOnce() -> OlResult + Send + 'static) -> OlResult {
    match queue {
        Some(q) => q.worker.enqueue(Box::new(op)),
        None => op(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{err, ErrorCode};
    use crate::types::ol_errc_t;

    fn code(r: crate::types::ol_result_t) -> u32 {
        if r.is_null() {
            0
        } else {
            // SAFETY: results are interned and immortal.
            unsafe { (*r).code }
        }
    }

    /// A failure on the worker (which the C API cannot provoke on the host
    /// plugin: everything is validated at enqueue time) surfaces once, at
    /// the olSyncEvent / olSyncQueue covering it, and later work still runs.
    #[test]
    fn failures_of_queued_operations_surface_at_sync() {
        unsafe {
            assert_eq!(code(crate::olInit()), 0);
            let ctx = context().unwrap();
            let host = ctx.device_handle(ctx.devices.len() - 1);
            let mut q: ol_queue_handle_t = std::ptr::null_mut();
            assert_eq!(code(crate::olCreateQueue(host, &mut q)), 0);
            let mut before: ol_event_handle_t = std::ptr::null_mut();
            assert_eq!(code(crate::olCreateEvent(q, &mut before)), 0);
            let queue = ctx.queue(q).unwrap();
            queue
                .worker
                .enqueue(Box::new(|| {
                    Err(err(ErrorCode::OutOfResources, "device lost"))
                }))
                .unwrap();
            let mut after: ol_event_handle_t = std::ptr::null_mut();
            assert_eq!(code(crate::olCreateEvent(q, &mut after)), 0);
            assert_eq!(code(crate::olSyncEvent(before)), 0);
            let r = crate::olSyncEvent(after);
            assert_eq!(code(r), ol_errc_t::OL_ERRC_OUT_OF_RESOURCES.0);
            let details = std::ffi::CStr::from_ptr((*r).details).to_string_lossy();
            assert!(details.contains("device lost"), "{details}");
            // Reported once.
            assert_eq!(code(crate::olSyncEvent(after)), 0);
            assert_eq!(code(crate::olSyncQueue(q)), 0);
            // Not synchronised by anyone: olSyncQueue reports it.
            queue
                .worker
                .enqueue(Box::new(|| Err(err(ErrorCode::InvalidValue, "bad"))))
                .unwrap();
            assert_eq!(
                code(crate::olSyncQueue(q)),
                ol_errc_t::OL_ERRC_INVALID_VALUE.0
            );
            // Destroying an idle queue reports what nobody synchronised.
            queue
                .worker
                .enqueue(Box::new(|| Err(err(ErrorCode::InvalidValue, "late"))))
                .unwrap();
            queue.worker.wait_until(queue.worker.position()).unwrap();
            drop(queue);
            assert_eq!(
                code(crate::olDestroyQueue(q)),
                ol_errc_t::OL_ERRC_INVALID_VALUE.0
            );
            assert_eq!(code(crate::olDestroyEvent(before)), 0);
            assert_eq!(code(crate::olDestroyEvent(after)), 0);
            drop(ctx);
            assert_eq!(code(crate::olShutDown()), 0);
        }
    }
}
