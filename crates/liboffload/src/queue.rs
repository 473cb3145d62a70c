//! Queues, events and host functions.
//!
//! A queue of a plugin device wraps the plugin's in-order queue. A queue of
//! the host device has no plugin queue: its work (copies, fills, host
//! functions) runs synchronously when enqueued, and its events are complete
//! when created.

use std::ffi::c_void;
use std::sync::Arc;

use crate::error::{check_handle, check_ptr, OlResult};
use crate::handles::{context, DeviceKind, Event, Queue};
use crate::types::*;

pub unsafe fn create_queue(device: ol_device_handle_t, out: *mut ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_ptr(out, "Queue")?;
    let dev = ctx.device(device, "Device")?;
    let raw = match &dev.kind {
        DeviceKind::Plugin { core, .. } => Some(core.create_queue()?),
        DeviceKind::Host => None,
    };
    let h = ctx.queues.insert(Arc::new(Queue {
        device: dev.index,
        raw,
    }));
    out.write(h as ol_queue_handle_t);
    Ok(())
}

pub unsafe fn destroy_queue(queue: ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    let q = ctx.queue(queue)?;
    // Work already enqueued still happens; events recorded on it stay valid.
    let synced = match &q.raw {
        Some(raw) => raw.synchronize(),
        None => Ok(()),
    };
    ctx.queues.remove(queue as usize);
    synced
}

pub unsafe fn sync_queue(queue: ol_queue_handle_t) -> OlResult {
    let ctx = context()?;
    let q = ctx.queue(queue)?;
    match &q.raw {
        Some(raw) => raw.synchronize(),
        None => Ok(()),
    }
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
    match &q.raw {
        Some(raw) => {
            let data = UserData(user_data);
            raw.host_function(Box::new(move || {
                let data = data;
                // SAFETY: calling the user's callback with the user's data.
                unsafe { cb(data.0) }
            }))
        }
        None => {
            cb(user_data);
            Ok(())
        }
    }
}

pub unsafe fn create_event(queue: ol_queue_handle_t, out: *mut ol_event_handle_t) -> OlResult {
    let ctx = context()?;
    check_handle(queue, "Queue")?;
    check_ptr(out, "Event")?;
    let q = ctx.queue(queue)?;
    let raw = match &q.raw {
        Some(raw) => Some(raw.record_event()?),
        None => None,
    };
    let h = ctx.events.insert(Arc::new(Event {
        queue: queue as usize,
        raw,
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
    match &e.raw {
        Some(raw) => raw.synchronize(),
        None => Ok(()),
    }
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
    for e in found {
        let Some(ev) = &e.raw else { continue };
        match &q.raw {
            // Same plugin: the queue waits without blocking the caller; a
            // foreign event is waited for here.
            Some(raw) if same_plugin(&ctx, q.device, e.queue) => raw.wait_event(ev.as_ref())?,
            _ => ev.synchronize()?,
        }
    }
    Ok(())
}

/// Whether the event's queue (maybe destroyed) is on the same plugin as `device`.
fn same_plugin(ctx: &crate::handles::Context, device: usize, event_queue: usize) -> bool {
    let Some(eq) = ctx.queues.get(event_queue) else {
        return false;
    };
    match (ctx.devices[device].core(), ctx.devices[eq.device].core()) {
        (Some(a), Some(b)) => a.plugin_name() == b.plugin_name(),
        _ => false,
    }
}
