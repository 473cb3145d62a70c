//! `offload info`: platforms, devices and device properties, like LLVM's
//! `llvm-offload-device-info`.

use std::fmt::Write as _;

use offload_core::{Backend, Device, DeviceType, Runtime};
use serde::Serialize;

use crate::output;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// Everything `info` reports.
#[derive(Serialize, Debug)]
pub struct Report {
    pub platforms: Vec<Platform>,
    pub failed_plugins: Vec<FailedPlugin>,
}

/// One initialised plugin.
#[derive(Serialize, Debug)]
pub struct Platform {
    pub plugin: String,
    /// The backend of the plugin's devices (the plugin name when it has none).
    pub backend: String,
    pub devices: Vec<DeviceReport>,
}

/// A plugin that was enabled but failed to initialise.
#[derive(Serialize, Debug)]
pub struct FailedPlugin {
    pub plugin: String,
    /// The `ol_errc_t`-style error code name.
    pub code: String,
    pub error: String,
}

/// One device and its properties.
#[derive(Serialize, Debug)]
pub struct DeviceReport {
    pub id: usize,
    pub plugin: String,
    pub name: String,
    pub vendor: String,
    pub product_name: String,
    #[serde(rename = "type")]
    pub device_type: String,
    pub backend: String,
    pub triple: String,
    pub arch: String,
    pub uid: String,
    pub driver_version: String,
    pub global_memory_bytes: u64,
    pub group_memory_bytes: u64,
    pub compute_units: u32,
    pub max_group_size: u32,
    pub max_group_size_per_dim: [u32; 3],
    pub max_num_groups: [u32; 3],
    pub clock_mhz: u32,
    pub address_bits: u32,
}

pub fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Host => "host",
        Backend::Cuda => "cuda",
        Backend::Amdgpu => "amdgpu",
        Backend::Remote => "remote",
        Backend::Other => "other",
    }
}

pub fn device_type_name(t: DeviceType) -> &'static str {
    match t {
        DeviceType::Gpu => "gpu",
        DeviceType::Cpu => "cpu",
        DeviceType::Host => "host",
    }
}

fn device_report(d: &Device) -> DeviceReport {
    let i = d.info();
    DeviceReport {
        id: d.id(),
        plugin: d.plugin_name().to_string(),
        name: i.name.clone(),
        vendor: i.vendor.clone(),
        product_name: i.product_name.clone(),
        device_type: device_type_name(i.device_type).to_string(),
        backend: backend_name(i.backend).to_string(),
        triple: i.triple.clone(),
        arch: i.arch.clone(),
        uid: i.uid.clone(),
        driver_version: i.driver_version.clone(),
        global_memory_bytes: i.global_memory_bytes,
        group_memory_bytes: i.group_memory_bytes,
        compute_units: i.compute_units,
        max_group_size: i.max_group_size,
        max_group_size_per_dim: i.max_group_size_per_dim,
        max_num_groups: i.max_num_groups,
        clock_mhz: i.clock_mhz,
        address_bits: i.address_bits,
    }
}

/// Collects the report from `runtime`.
pub fn collect(runtime: &Runtime) -> Report {
    let all = runtime.devices();
    let platforms = runtime
        .plugins()
        .map(|(plugin, range)| {
            let devices: Vec<DeviceReport> = all
                .get(range)
                .unwrap_or(&[])
                .iter()
                .map(|d| device_report(d))
                .collect();
            let backend = devices
                .first()
                .map(|d| d.backend.clone())
                .unwrap_or_else(|| plugin.name().to_string());
            Platform {
                plugin: plugin.name().to_string(),
                backend,
                devices,
            }
        })
        .collect();
    let failed_plugins = runtime
        .failed_plugins()
        .iter()
        .map(|(name, e)| FailedPlugin {
            plugin: name.to_string(),
            code: format!("{:?}", e.code()),
            error: e.message().to_string(),
        })
        .collect();
    Report {
        platforms,
        failed_plugins,
    }
}

fn dims(d: [u32; 3]) -> String {
    format!("{} x {} x {}", d[0], d[1], d[2])
}

/// Renders the report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let ndev: usize = r.platforms.iter().map(|p| p.devices.len()).sum();
    let _ = writeln!(s, "{} platform(s), {ndev} device(s)", r.platforms.len());
    for (pi, p) in r.platforms.iter().enumerate() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Platform {pi}: {} (backend {}, {} device(s))",
            p.plugin,
            p.backend,
            p.devices.len()
        );
        for d in &p.devices {
            let _ = writeln!(s, "  Device {} ({} {}):", d.id, d.plugin, d.uid);
            let rows: [(&str, String); 18] = [
                ("Name", output::text(&d.name)),
                ("Vendor", output::text(&d.vendor)),
                ("Product name", output::text(&d.product_name)),
                ("Type", d.device_type.clone()),
                ("Backend", d.backend.clone()),
                ("Triple", output::text(&d.triple)),
                (
                    "Arch",
                    if d.arch.is_empty() {
                        "(any)".to_string()
                    } else {
                        output::text(&d.arch)
                    },
                ),
                ("UID", output::text(&d.uid)),
                ("Driver version", output::text(&d.driver_version)),
                ("Global memory", output::bytes(d.global_memory_bytes)),
                ("Group memory", output::bytes(d.group_memory_bytes)),
                ("Compute units", d.compute_units.to_string()),
                ("Max group size", d.max_group_size.to_string()),
                ("Max group size per dim", dims(d.max_group_size_per_dim)),
                ("Max groups", dims(d.max_num_groups)),
                ("Clock", format!("{} MHz", d.clock_mhz)),
                ("Address bits", d.address_bits.to_string()),
                ("Plugin", d.plugin.clone()),
            ];
            for (k, v) in rows {
                let _ = writeln!(s, "    {:<24}{v}", format!("{k}:"));
            }
        }
    }
    if r.platforms.is_empty() {
        let why = match std::env::var("OFFLOAD_PLUGINS") {
            Ok(v) => {
                format!(" (OFFLOAD_PLUGINS={v:?} enables no built-in plugin that initialised)")
            }
            Err(_) => String::new(),
        };
        let _ = writeln!(s, "no platforms{why}");
    }
    if !r.failed_plugins.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(s, "Plugins that failed to initialise:");
        for f in &r.failed_plugins {
            let _ = writeln!(s, "  {}: {} ({})", f.plugin, output::text(&f.error), f.code);
        }
    }
    s
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let report = collect(offload::runtime());
    if args.json {
        output::emit_json(&report)
    } else {
        output::emit(&render(&report))
    }
}
