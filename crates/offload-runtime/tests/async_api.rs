//! Initialised allocation, buffer views, queue-ordered asynchronous copies,
//! launches on views, futures and error messages.

mod common;

use offload_runtime::internals::CoreAccess as _;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use offload_runtime::{devices, Device, ErrorCode, KernelArgs, LaunchConfig};

/// Wakes the thread blocked in [`block_on`] and counts the wake-ups.
struct ThreadWaker {
    thread: Thread,
    wakes: AtomicUsize,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// A trivial executor: poll, park until woken, poll again. Returns the
/// output and how often the future was woken.
fn block_on<F: Future>(fut: F) -> (F::Output, usize) {
    let mut fut = pin!(fut);
    let state = Arc::new(ThreadWaker {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(state.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return (v, state.wakes.load(Ordering::SeqCst));
        }
        // A spurious unpark only costs another poll.
        std::thread::park();
    }
}

/// A queue operation that cannot finish before `gate` is set: a host
/// function spinning on it.
fn hold_queue(queue: &offload_runtime::Queue) -> Arc<AtomicBool> {
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    queue
        .host_function(move || {
            while !g.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        })
        .unwrap();
    gate
}

#[test]
fn alloc_zeros_is_zero_even_on_reused_memory() {
    let dev = Device::host().unwrap();
    // Leave garbage in blocks the caching allocator hands out again.
    for _ in 0..4 {
        let mut b = dev.alloc_filled::<u32>(1024, 0xABAB_ABAB).unwrap();
        assert!(b.to_vec().unwrap().iter().all(|&v| v == 0xABAB_ABAB));
        b.fill(0xDEAD_BEEF).unwrap();
    }
    for len in [0, 1, 7, 1024, 4096] {
        let b = dev.alloc_zeros::<u32>(len).unwrap();
        assert_eq!(b.len(), len);
        assert!(b.to_vec().unwrap().iter().all(|&v| v == 0), "len {len}");
    }
    let f = dev.alloc_zeros::<f64>(33).unwrap();
    assert!(f.to_vec().unwrap().iter().all(|&v| v == 0.0));
    let filled = dev.alloc_filled(5, [1u16, 2]).unwrap();
    assert_eq!(filled.to_vec().unwrap(), vec![[1, 2]; 5]);
    // SAFETY: every element is written before it is read.
    let mut raw = unsafe { dev.alloc_uninit::<u8>(16) }.unwrap();
    raw.fill(9).unwrap();
    assert_eq!(raw.to_vec().unwrap(), vec![9; 16]);
}

#[test]
fn queue_ordered_buffers_are_zeroed_on_the_queue_and_freed_in_its_order() {
    let dev = Device::host().unwrap();
    let core = dev.core().clone();
    let q = dev.create_queue().unwrap();
    let live = core.live_allocations();
    // Garbage in memory the next allocation may reuse (above the caching
    // allocator's threshold, so it goes back to the plugin).
    let n = 16 * 1024;
    drop(dev.alloc_filled::<u32>(n, 0xABAB_ABAB).unwrap());
    let b = q.alloc_zeros::<u32>(n).unwrap();
    assert_eq!(core.live_allocations(), live + 1);
    let ptr = b.device_ptr();
    // Not the device's to free: only a queue frees queue memory.
    let e = core.free(ptr).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.message().contains("free it on a queue"), "{e}");
    // Handed out zeroed: usable by synchronous calls at once.
    assert!(b.to_vec().unwrap().iter().all(|&v| v == 0));

    // Dropped while the queue is busy: gone for new work at once, its
    // memory released in the queue's turn.
    let gate = hold_queue(&q);
    drop(b);
    assert_eq!(core.live_allocations(), live);
    assert!(core.allocation(ptr).is_none());
    assert!(!q.is_idle().unwrap());
    gate.store(true, Ordering::SeqCst);
    q.synchronize().unwrap();

    // Double frees and foreign pointers are errors that change nothing.
    let e = q.core().free(ptr).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let plain = dev.alloc_zeros::<u8>(64).unwrap();
    let e = q.core().free(plain.device_ptr()).unwrap_err();
    assert!(e.message().contains("not allocated on a queue"), "{e}");
    assert_eq!(plain.to_vec().unwrap(), vec![0; 64]);
    assert_eq!(q.alloc_zeros::<u64>(0).unwrap().len(), 0);
}

#[test]
fn slices_address_elements_at_their_offsets() {
    let dev = Device::host().unwrap();
    let mut b = dev.alloc_zeros::<u32>(10).unwrap();
    b.slice_mut(2..5).copy_from_host(&[1, 2, 3]).unwrap();
    b.slice_mut(8..).fill(7).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![0, 0, 1, 2, 3, 0, 0, 0, 7, 7]);
    let s = b.slice(2..=4);
    assert_eq!(s.len(), 3);
    assert_eq!(s.device_ptr(), b.device_ptr().offset(8));
    assert_eq!(s.to_vec().unwrap(), vec![1, 2, 3]);
    assert_eq!(s.slice(1..).to_vec().unwrap(), vec![2, 3]);
    let mut out = [0u32; 2];
    b.slice(8..10).copy_to_host(&mut out).unwrap();
    assert_eq!(out, [7, 7]);
    assert!(b.slice(10..).is_empty());
    assert!(b.get(5..11).is_none());
    assert!(b.get_mut(11..).is_none());
    // Copies between views of one buffer, through split_at.
    let (left, mut right) = b.as_slice_mut().split_at(5);
    right.copy_from(left).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![0, 0, 1, 2, 3, 0, 0, 1, 2, 3]);
    // Lengths must match.
    let e = b.slice_mut(0..3).copy_from_host(&[1, 2]).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSize);
}

#[test]
#[should_panic(expected = "out of bounds")]
fn a_slice_past_the_end_panics_like_slice_indexing() {
    let dev = Device::host().unwrap();
    let b = dev.alloc_zeros::<u8>(4).unwrap();
    let _ = b.slice(2..5);
}

#[test]
fn async_copies_in_a_scope_are_queue_ordered_and_correct() {
    let dev = Device::host().unwrap();
    let queue = dev.create_queue().unwrap();
    let n = 1 << 18;
    let input: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
    let mut a = dev.alloc_zeros::<u64>(n).unwrap();
    let mut b = dev.alloc_zeros::<u64>(n).unwrap();
    let mut out = vec![0u64; n];
    let mut tail = vec![0u64; 100];
    let gate = hold_queue(&queue);
    queue
        .scope(|s| {
            // Nothing can run before the gate opens: all of this is enqueued.
            // Bound buffers serve several operations, in queue order.
            let (a, b) = (s.bind(&mut a), s.bind(&mut b));
            let up = s.copy_to_device(a, &input)?;
            let within = s.copy(b, a)?;
            let fill = s.fill(b.slice(n - 100..), 5u64)?;
            let down = s.copy_to_host(&mut out, b)?;
            let back = s.copy_to_host(&mut tail, b.slice(n - 100..))?;
            assert!(!up.is_complete()?);
            assert!(!s.queue().is_idle()?);
            gate.store(true, Ordering::SeqCst);
            let tail = back.wait()?;
            assert!(tail.iter().all(|&v| v == 5));
            assert!(up.is_complete()? && within.is_complete()? && fill.is_complete()?);
            let out = down.wait()?;
            assert_eq!(&out[..n - 100], &input[..n - 100]);
            assert!(out[n - 100..].iter().all(|&v| v == 5));
            Ok(())
        })
        .unwrap();
    assert!(queue.is_idle().unwrap());
    // The borrows have ended: everything is the host's again.
    assert_eq!(a.to_vec().unwrap(), input);
    assert_eq!(out[0], 1);
}

#[test]
fn a_scope_waits_for_work_it_did_not_wait_for() {
    let dev = Device::host().unwrap();
    let queue = dev.create_queue().unwrap();
    let src = dev.buffer_from(&[9u32; 4096]).unwrap();
    let mut out = vec![0u32; 4096];
    let gate = hold_queue(&queue);
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            gate.store(true, Ordering::SeqCst);
        })
    };
    let ran = queue
        .scope(|s| {
            // Dropped and even leaked: the scope still waits before `out`
            // is the host's again.
            std::mem::forget(s.copy_to_host(&mut out, &src)?);
            Ok(42)
        })
        .unwrap();
    assert_eq!(ran, 42);
    assert!(out.iter().all(|&v| v == 9));
    opener.join().unwrap();
}

#[test]
fn a_panicking_scope_still_waits_for_the_queue() {
    let dev = Device::host().unwrap();
    let queue = dev.create_queue().unwrap();
    let src = dev.buffer_from(&[3u8; 1000]).unwrap();
    let mut out = vec![0u8; 1000];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        queue.scope(|s| {
            let gate = hold_queue(s.queue());
            s.copy_to_host(&mut out, &src)?;
            gate.store(true, Ordering::SeqCst);
            panic!("in the scope");
            #[allow(unreachable_code)]
            Ok(())
        })
    }));
    assert!(r.is_err());
    assert!(queue.is_idle().unwrap());
    assert!(out.iter().all(|&v| v == 3));
}

#[test]
fn scope_errors_name_the_problem() {
    let dev = Device::host().unwrap();
    let queue = dev.create_queue().unwrap();
    let mut a = dev.alloc_zeros::<u32>(8).unwrap();
    let short = [1u32; 3];
    let e = queue
        .scope(|s| s.copy_to_device(&mut a, &short).map(|_| ()))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSize);
    let msg = e.to_string();
    assert!(msg.contains("3 elements") && msg.contains("has 8"), "{msg}");
}

#[test]
fn device_to_device_copies_on_a_queue_across_devices() {
    let all = devices();
    if all.len() < 2 {
        common::skip("needs two devices (OFFLOAD_HOST_DEVICES >= 2)");
        return;
    }
    let src = all[0].buffer_from(&[1.5f64, 2.5, 3.5, 4.5]).unwrap();
    let mut dst = all[1].alloc_zeros::<f64>(4).unwrap();
    let mut out = [0f64; 2];
    let queue = all[1].create_queue().unwrap();
    let e = queue
        .scope(|s| s.copy(dst.slice_mut(1..3), src.slice(1..)).map(|_| ()))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidSize);
    queue
        .scope(|s| {
            let dst = s.bind(dst.slice_mut(1..3));
            s.copy(dst, src.slice(2..4))?.wait()?;
            s.copy_to_host(&mut out, dst)?.wait()?;
            Ok(())
        })
        .unwrap();
    assert_eq!(out, [3.5, 4.5]);
    assert_eq!(dst.to_vec().unwrap(), vec![0.0, 3.5, 4.5, 0.0]);
    // A fill must name memory of the queue's device.
    let mut other = all[0].alloc_zeros::<u8>(4).unwrap();
    let e = queue
        .scope(|s| s.fill(&mut other, 1u8).map(|_| ()))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(e.to_string().contains("device 0"), "{e}");
}

#[test]
fn events_pending_copies_and_launches_are_futures() {
    let image = common::demo_kernels();
    let dev = Device::host().unwrap();
    let saxpy = dev.load_program(&image).unwrap().kernel("saxpy").unwrap();
    let queue = dev.create_queue().unwrap();

    // An event that completes only after the executor has parked: woken
    // by the queue, not by polling.
    let gate = hold_queue(&queue);
    let event = queue.record_event().unwrap();
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            gate.store(true, Ordering::SeqCst);
        })
    };
    let (r, wakes) = block_on(event.clone());
    r.unwrap();
    assert!(wakes >= 1, "the future was woken");
    assert!(event.is_complete().unwrap());
    opener.join().unwrap();
    // Complete already: ready on the first poll.
    let (r, wakes) = block_on(event);
    r.unwrap();
    assert_eq!(wakes, 0);

    // A launch on views, awaited; then the result copied back, awaited.
    let n = 1000;
    let x = dev.buffer_from(&vec![1.0f32; n + 10]).unwrap();
    let mut y = dev.alloc_filled(n + 10, 2.0f32).unwrap();
    let args = KernelArgs::new()
        .value(3.0f32)
        .ptr(x.slice(10..))
        .ptr_mut(y.slice_mut(10..))
        .value(n as u32);
    // SAFETY: the arguments match the kernel's parameters (test kernels of this file) and name only live buffers; the launch is waited for.
    let launch = unsafe { queue.launch(&saxpy, LaunchConfig::linear(16, 64), &args) }.unwrap();
    block_on(launch).0.unwrap();
    drop(args);
    let mut out = vec![0f32; n + 10];
    queue
        .scope(|s| {
            let gate = hold_queue(s.queue());
            let copy = s.copy_to_host(&mut out, &y)?;
            gate.store(true, Ordering::SeqCst);
            let (back, _) = block_on(copy);
            let back = back?;
            assert!(back[..10].iter().all(|&v| v == 2.0));
            assert!(back[10..].iter().all(|&v| v == 5.0));
            Ok(())
        })
        .unwrap();

    // A scope launch writes through a view and is awaited.
    queue
        .scope(|s| {
            let args = KernelArgs::new()
                .value(1.0f32)
                .ptr(&x)
                .ptr_mut(y.slice_mut(..10))
                .value(10u32);
            // SAFETY: the arguments match the kernel's parameters (test kernels of this file) and name only live buffers; the launch is waited for.
            let pending = unsafe { s.launch(&saxpy, LaunchConfig::linear(1, 16), &args)? };
            block_on(pending).0
        })
        .unwrap();
    assert_eq!(y.slice(..10).to_vec().unwrap(), vec![3.0; 10]);
    assert_eq!(y.slice(10..).to_vec().unwrap(), vec![5.0; n]);
}

#[test]
fn an_event_of_a_dropped_queue_still_resolves_as_a_future() {
    let dev = Device::host().unwrap();
    let queue = dev.create_queue().unwrap();
    let gate = hold_queue(&queue);
    let event = queue.record_event().unwrap();
    drop(queue); // closed: the waker comes from a helper thread now
    let opener = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        gate.store(true, Ordering::SeqCst);
    });
    block_on(event).0.unwrap();
    opener.join().unwrap();
}

#[test]
fn launches_wait_on_other_queues_events() {
    let image = common::demo_kernels();
    let dev = Device::host().unwrap();
    let saxpy = dev.load_program(&image).unwrap().kernel("saxpy").unwrap();
    let (copies, compute) = (dev.create_queue().unwrap(), dev.create_queue().unwrap());
    let n = 4096;
    let host_x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut x = dev.alloc_zeros::<f32>(n).unwrap();
    let mut y = dev.alloc_zeros::<f32>(n).unwrap();
    copies
        .scope(|up| {
            let gate = hold_queue(up.queue());
            let upload = up.copy_to_device(&mut x, &host_x)?;
            compute.wait_event(&upload.event().unwrap())?;
            gate.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    let args = KernelArgs::new()
        .value(2.0f32)
        .ptr(&x)
        .ptr_mut(&mut y)
        .value(n as u32);
    // SAFETY: the arguments match the kernel's parameters (test kernels of this file) and name only live buffers; the launch is waited for.
    unsafe { compute.launch(&saxpy, LaunchConfig::linear(64, 64), &args) }
        .unwrap()
        .wait()
        .unwrap();
    let got = y.to_vec().unwrap();
    assert!((0..n).all(|i| got[i] == 2.0 * i as f32));
}

#[test]
fn errors_display_without_debug_noise() {
    let all = devices();
    let dev = Device::host().unwrap();
    assert_eq!(dev.to_string(), format!("{dev:?}"));
    assert!(dev.to_string().starts_with("device 0"), "{dev}");

    let e = dev.load_program(b"not an image").unwrap_err();
    let shown = e.to_string();
    assert!(!shown.is_empty());
    let mut b = dev.alloc_zeros::<u16>(4).unwrap();
    let e = b.copy_from_host(&[1, 2]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "copy to device: the other side has 2 elements, the device buffer at {} has 4",
            b.device_ptr()
        )
    );
    let image = common::demo_kernels();
    let program = dev.load_program(&image).unwrap();
    let e = program.kernel("missing").unwrap_err();
    let shown = e.to_string();
    assert!(
        shown.contains("missing") && shown.contains("device 0"),
        "{shown}"
    );
    let e = program.global("nothing").unwrap_err().to_string();
    for text in [&shown, &e, &format!("{b:?}")] {
        for noise in ["Device {", "inner", "Some(", "Inner {", "\\\""] {
            assert!(!text.contains(noise), "'{noise}' in: {text}");
        }
    }
    if all.len() >= 2 {
        let k = program.kernel("saxpy").unwrap();
        let q = all[1].create_queue().unwrap();
        let args = KernelArgs::new();
        // SAFETY: the launch is refused before any device code runs.
        let e = unsafe { q.launch(&k, LaunchConfig::default(), &args) }.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
        assert_eq!(
            e.to_string(),
            format!(
                "kernel 'saxpy' belongs to {}, the queue to {}",
                all[0], all[1]
            )
        );
    }
}
