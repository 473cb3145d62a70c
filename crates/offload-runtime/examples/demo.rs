//! The demo: build C kernels with clang-22, load them through the Rust API
//! on the host device, run saxpy and a sum over a grid, check the results.
//!
//!     cargo run --release -p offload-runtime --example demo

use std::path::PathBuf;
use std::process::Command;

use offload_runtime::{Device, KernelArgs, LaunchConfig};

fn main() {
    if let Err(e) = run() {
        // Display, not Debug: the message names what failed.
        eprintln!("demo: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = root.join("examples/kernels/demo_kernels.c");
    let include = root.join("../../include");
    let out_dir = std::env::temp_dir().join(format!("offload-demo-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir)?;
    let image_path = out_dir.join("demo_kernels.so");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang-22".into());
    println!("building {} with {clang}", source.display());
    let status = Command::new(&clang)
        .args(["-O2", "-fPIC", "-shared", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&image_path)
        .arg(&source)
        .status()?;
    if !status.success() {
        return Err(format!("{clang} failed").into());
    }
    let image = std::fs::read(&image_path)?;
    std::fs::remove_dir_all(&out_dir)?;

    let device = Device::host()?;
    let info = device.info();
    println!(
        "device {}: {} ({}, {} compute units, uid {})",
        device.id(),
        info.name,
        info.triple,
        info.compute_units,
        info.uid
    );
    let program = device.load_program(&image)?;
    let queue = device.create_queue()?;

    // y = a*x + y over a million elements.
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let y: Vec<f32> = vec![1.0; n];
    let dx = device.buffer_from(&x)?;
    let mut dy = device.buffer_from(&y)?;
    let a = 2.5f32;
    let args = KernelArgs::new()
        .value(a)
        .ptr(&dx)
        .ptr_mut(&mut dy)
        .value(n as u32);
    let group = 256;
    let groups = (n as u32).div_ceil(group);
    // SAFETY: `saxpy` reads {a, x, y, n} as laid out above and touches only
    // the first n elements of x and y, which outlive the launch.
    let launch = unsafe {
        queue.launch(
            &program.kernel("saxpy")?,
            LaunchConfig::linear(groups, group),
            &args,
        )?
    };
    // `dy` stays borrowed by the launch until it has finished.
    launch.wait()?;
    let result = dy.to_vec()?;
    let wrong = (0..n).filter(|&i| result[i] != a * x[i] + y[i]).count();
    println!("saxpy: {n} elements in {groups} groups of {group}: {wrong} wrong");

    // A reduction: per-group partial sums in group memory, combined atomically.
    let mut total = device.alloc_zeros::<f64>(1)?;
    let args = KernelArgs::new()
        .ptr(&dx)
        .ptr_mut(&mut total)
        .value(n as u32);
    let config = LaunchConfig {
        dyn_group_memory: 8,
        ..LaunchConfig::linear(groups, group)
    };
    // SAFETY: `sum` reads {x, sum, n} and adds into `total` only.
    unsafe { queue.launch(&program.kernel("sum")?, config, &args)? }.wait()?;
    let got = total.to_vec()?[0];
    let expected: f64 = x.iter().map(|&v| v as f64).sum();
    println!("sum: {got} (expected {expected})");
    dy.fill(0.0)?;

    if wrong == 0 && got == expected {
        println!("demo: OK");
        Ok(())
    } else {
        Err("demo: results are wrong".into())
    }
}
