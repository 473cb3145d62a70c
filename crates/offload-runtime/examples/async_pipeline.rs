//! Asynchronous copies, buffer views and futures: a chunked saxpy pipeline.
//!
//! The input goes to the device in chunks (views of one buffer), all in
//! flight at once on a copy queue; the compute queue waits for their
//! events, runs saxpy, and the result comes back in chunks. Every
//! operation is awaited with a tiny executor (no async runtime).
//!
//!     cargo run -p offload-runtime --example async_pipeline

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use offload_runtime::{Device, KernelArgs, LaunchConfig};

/// Wakes the thread that waits in [`block_on`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Run a future to completion on this thread.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

fn build_kernels() -> Result<Vec<u8>, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = root.join("examples/kernels/demo_kernels.c");
    let dir = std::env::temp_dir().join(format!("offload-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let image = dir.join("demo_kernels.so");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang-22".into());
    let ok = Command::new(&clang)
        .args(["-O2", "-fPIC", "-shared", "-I"])
        .arg(root.join("../../include"))
        .arg("-o")
        .arg(&image)
        .arg(&source)
        .status()
        .map_err(|e| format!("{clang}: {e}"))?
        .success();
    if !ok {
        return Err(format!("{clang} failed on {}", source.display()));
    }
    let bytes = std::fs::read(&image).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(bytes)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let image = build_kernels()?;
    let device = Device::host()?;
    let saxpy = device.load_program(&image)?.kernel("saxpy")?;
    let copies = device.create_queue()?;
    let compute = device.create_queue()?;

    let (n, chunks) = (1 << 16, 4);
    let chunk = n / chunks;
    let a = 3.0f32;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut dx = device.alloc_zeros::<f32>(n)?;
    let mut dy = device.alloc_filled::<f32>(n, 1.0)?;
    let mut y = vec![0f32; n];

    // Upload x in chunks, each into its own view of `dx`, all in flight at
    // once; the compute queue waits for each chunk's event.
    copies.scope(|s| {
        let mut rest = dx.as_slice_mut();
        let mut uploads = Vec::new();
        for host in x.chunks(chunk) {
            let (view, tail) = rest.split_at(host.len());
            rest = tail;
            let upload = s.copy_to_device(view, host)?;
            if let Some(event) = upload.event() {
                compute.wait_event(&event)?;
            }
            uploads.push(upload);
        }
        for upload in uploads {
            block_on(upload)?;
        }
        Ok(())
    })?;

    // The kernel writes `dy`: it stays borrowed until the launch is done.
    let args = KernelArgs::new()
        .value(a)
        .ptr(&dx)
        .ptr_mut(&mut dy)
        .value(n as u32);
    // SAFETY: `saxpy` reads {a, x, y, n} as laid out above and touches only
    // the first n elements of x and y.
    let launch = unsafe {
        compute.launch(
            &saxpy,
            LaunchConfig::linear((n as u32).div_ceil(256), 256),
            &args,
        )?
    };
    block_on(launch)?;

    // Bring the result back in chunks, asynchronously, and await each.
    compute.scope(|s| {
        let pending = y
            .chunks_mut(chunk)
            .enumerate()
            .map(|(c, host)| s.copy_to_host(host, dy.slice(c * chunk..(c + 1) * chunk)))
            .collect::<Result<Vec<_>, _>>()?;
        for p in pending {
            let back = block_on(p)?;
            assert_eq!(back.len(), chunk);
        }
        Ok(())
    })?;
    let wrong = (0..n).filter(|&i| y[i] != a * x[i] + 1.0).count();
    println!("pipeline: {n} elements in {chunks} chunks: {wrong} wrong");
    if wrong != 0 {
        return Err("pipeline: results are wrong".into());
    }
    println!("pipeline: OK");
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        // Display, not Debug: the message names what failed.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
