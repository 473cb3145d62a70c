//! A GPU's engine: one HSA queue and one completion signal. Every copy
//! and dispatch of the GPU goes through it, one at a time, and is waited
//! for before the call returns (the plugin's queues complete inline; the
//! core's executor makes them asynchronous for the faces that need it).
//!
//! A fault while a kernel runs (a memory violation, an illegal
//! instruction) reaches the plugin through the queue's error callback, or
//! (a page fault) through the runtime's system event naming the GPU, not
//! through the completion signal, which then never completes: the wait
//! looks at both, and from then on the engine refuses work with the
//! fault's text, while the rest of the runtime stays usable. Other GPUs
//! go on copying, but launch no kernels after a page fault (the runtime
//! reports only the first).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use offload_core::{Error, Result};

use crate::hsa::Runtime;
use crate::sys::{self, hsa_agent_t, hsa_kernel_dispatch_packet_t, hsa_queue_t, hsa_signal_t};

/// Slots of the AQL ring (LLVM's default queue size).
const QUEUE_SLOTS: u32 = 512;
/// How long one wait on the completion signal lasts before the queue's
/// error flag is looked at again (a hint, in the runtime's timestamp ticks).
const WAIT_HINT: u64 = 10_000_000;

struct State {
    /// The runtime's queue (`*mut hsa_queue_t`), valid until Drop.
    queue: usize,
    signal: hsa_signal_t,
    /// Set after a fault: why the engine refuses work.
    broken: Option<String>,
}

pub struct Engine {
    rt: Arc<Runtime>,
    /// The GPU whose memory faults end this engine's waits.
    agent: hsa_agent_t,
    label: String,
    state: Mutex<State>,
    /// Written by the queue's error callback (the failing status).
    fault: Arc<AtomicU32>,
}

/// The queue's error callback: records the status for the waiting thread.
unsafe extern "C" fn on_queue_error(status: u32, _queue: *mut hsa_queue_t, data: *mut c_void) {
    // SAFETY: `data` is the engine's `fault`, which outlives the queue.
    let fault = unsafe { &*data.cast::<AtomicU32>() };
    fault.store(status.max(1), Ordering::Release);
}

impl Engine {
    pub fn new(rt: &Arc<Runtime>, agent: hsa_agent_t, label: &str) -> Result<Engine> {
        let max: u32 =
            rt.agent_info(agent, sys::HSA_AGENT_INFO_QUEUE_MAX_SIZE, "QUEUE_MAX_SIZE")?;
        // Both are powers of two (the runtime's maximum always is).
        let slots = QUEUE_SLOTS.min(max).max(1);
        let fault = Arc::new(AtomicU32::new(0));
        let mut queue: *mut hsa_queue_t = std::ptr::null_mut();
        // SAFETY: the callback only stores into `fault`, which the engine
        // keeps alive past hsa_queue_destroy; u32::MAX: no segment hints.
        let r = unsafe {
            (rt.api.hsa_queue_create)(
                agent,
                slots,
                sys::HSA_QUEUE_TYPE_MULTI,
                Some(on_queue_error),
                Arc::as_ptr(&fault).cast_mut().cast(),
                u32::MAX,
                u32::MAX,
                &mut queue,
            )
        };
        rt.check(r, format_args!("{label}: hsa_queue_create"))?;
        if queue.is_null() {
            return Err(Error::backend(format!(
                "{label}: hsa_queue_create gave no queue"
            )));
        }
        let mut signal = hsa_signal_t::default();
        // SAFETY: writes one signal handle; no consumer list.
        let r = unsafe { (rt.api.hsa_signal_create)(0, 0, std::ptr::null(), &mut signal) };
        if let Err(e) = rt.check(r, format_args!("{label}: hsa_signal_create")) {
            // SAFETY: the queue just made, used by nobody.
            unsafe { (rt.api.hsa_queue_destroy)(queue) };
            return Err(e);
        }
        Ok(Engine {
            rt: rt.clone(),
            agent,
            label: label.to_string(),
            state: Mutex::new(State {
                queue: queue as usize,
                signal,
                broken: None,
            }),
            fault,
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = &state.broken {
            return Err(Error::backend(format!(
                "{}: the GPU's queue failed earlier ({why}); it runs nothing more",
                self.label
            )));
        }
        Ok(state)
    }

    /// `Ok` while the engine takes kernel launches; the fault's text once
    /// it does not.
    pub fn check_usable(&self) -> Result<()> {
        self.lock().and_then(|_| self.check_no_page_fault())
    }

    /// ROCr tells of a process's first GPU page fault only (its handler
    /// does not re-arm): after one, on any GPU, a kernel that faults would
    /// never end, so no GPU launches kernels any more. Copies go on.
    fn check_no_page_fault(&self) -> Result<()> {
        match self.rt.faults.first() {
            None => Ok(()),
            Some(fault) => Err(Error::backend(format!(
                "{}: no kernel launches after a GPU page fault ({fault}, agent {:#x}): the HSA runtime reports only the first one, so a later fault would hang",
                self.label, fault.agent.handle
            ))),
        }
    }

    /// Runs one asynchronous copy (or fill) that `start` begins with the
    /// given completion signal, and waits for it.
    pub fn copy(&self, what: &str, start: impl FnOnce(hsa_signal_t) -> u32) -> Result<()> {
        let mut state = self.lock()?;
        let signal = state.signal;
        // SAFETY: our signal, not in use by anything else (we hold the lock).
        unsafe { (self.rt.api.hsa_signal_store_screlease)(signal, 1) };
        let r = start(signal);
        self.rt.check(r, format_args!("{}: {what}", self.label))?;
        // A copy engine finishes its copy whatever happened to the queue:
        // wait for it, so that its buffers are not freed under it.
        self.wait(&mut state, what, false)
    }

    /// Dispatches `packet` (its header, setup and completion signal are
    /// filled here) and waits for the kernel to finish.
    pub fn dispatch(
        &self,
        mut packet: hsa_kernel_dispatch_packet_t,
        dims: u16,
        what: &str,
    ) -> Result<()> {
        let mut state = self.lock()?;
        self.check_no_page_fault()?;
        let api = &self.rt.api;
        let queue = state.queue as *mut hsa_queue_t;
        packet.completion_signal = state.signal;
        // SAFETY: our signal, not in use by anything else (we hold the lock).
        unsafe { (api.hsa_signal_store_screlease)(state.signal, 1) };
        // SAFETY: `queue` is live; reading its fixed fields.
        let (base, slots, doorbell) = unsafe {
            (
                (*queue).base_address,
                (*queue).size,
                (*queue).doorbell_signal,
            )
        };
        // SAFETY: reserves one slot of a live queue.
        let index = unsafe { (api.hsa_queue_add_write_index_relaxed)(queue, 1) };
        // The engine waits for each packet, so the ring is never full; a
        // foreign producer could fill it: wait for the slot then.
        // SAFETY: reads the index of a live queue.
        while index.wrapping_sub(unsafe { (api.hsa_queue_load_read_index_scacquire)(queue) })
            >= u64::from(slots)
        {
            self.check_fault(&mut state, what)?;
            std::thread::yield_now();
        }
        let slot = (index % u64::from(slots.max(1))) as usize
            * std::mem::size_of::<hsa_kernel_dispatch_packet_t>();
        let header = (sys::HSA_PACKET_TYPE_KERNEL_DISPATCH << sys::HSA_PACKET_HEADER_TYPE)
            | (1 << sys::HSA_PACKET_HEADER_BARRIER)
            | (sys::HSA_FENCE_SCOPE_SYSTEM << sys::HSA_PACKET_HEADER_ACQUIRE_FENCE_SCOPE)
            | (sys::HSA_FENCE_SCOPE_SYSTEM << sys::HSA_PACKET_HEADER_RELEASE_FENCE_SCOPE);
        let setup = dims << sys::HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
        // SAFETY: `slot` is a 64-byte, 64-aligned packet of the ring that
        // the packet processor does not read until its header changes:
        // the body is written first, then the header and setup in one
        // atomic release store, then the doorbell rings.
        unsafe {
            let dst = base.cast::<u8>().add(slot);
            let body = (&packet as *const hsa_kernel_dispatch_packet_t).cast::<u8>();
            std::ptr::copy_nonoverlapping(body.add(4), dst.add(4), 60);
            let word = &*dst.cast::<AtomicU32>();
            word.store(
                u32::from(header) | (u32::from(setup) << 16),
                Ordering::Release,
            );
            (api.hsa_signal_store_screlease)(doorbell, index as i64);
        }
        self.wait(&mut state, what, true)
    }

    fn check_fault(&self, state: &mut State, what: &str) -> Result<()> {
        let status = self.fault.load(Ordering::Acquire);
        let text = if status != 0 {
            format!("{} (HSA status {status:#x})", self.rt.status_text(status))
        } else if let Some(fault) = self.rt.faults.of(self.agent) {
            fault.to_string()
        } else {
            return Ok(());
        };
        state.broken = Some(text.clone());
        Err(Error::backend(format!(
            "{}: {what} failed on the GPU: {text}",
            self.label
        )))
    }

    /// Waits for the completion signal; for a dispatch (`watch_faults`)
    /// also for a fault, which ends the wait with an error.
    fn wait(&self, state: &mut State, what: &str, watch_faults: bool) -> Result<()> {
        loop {
            // SAFETY: waits on our own signal.
            let v = unsafe {
                (self.rt.api.hsa_signal_wait_scacquire)(
                    state.signal,
                    sys::HSA_SIGNAL_CONDITION_LT,
                    1,
                    WAIT_HINT,
                    sys::HSA_WAIT_STATE_BLOCKED,
                )
            };
            if v < 1 {
                return Ok(());
            }
            if watch_faults {
                self.check_fault(state, what)?;
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: nothing uses the queue or signal after the engine.
        unsafe {
            (self.rt.api.hsa_queue_destroy)(state.queue as *mut hsa_queue_t);
            (self.rt.api.hsa_signal_destroy)(state.signal);
        }
    }
}
