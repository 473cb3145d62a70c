//! `offload info`: platforms, devices and device properties, like LLVM's
//! `llvm-offload-device-info`.
//!
//! Every property `llvm-offload-device-info` prints is reported, with the
//! value our `libLLVMOffload` gives for it (`crates/liboffload/src/info.rs`),
//! under the key that is LLVM's label in snake case ("Max Work Group Size"
//! is `max_work_group_size`). As in LLVM 22, a last platform `Host` holds the
//! virtual HOST device (uid `HOST`): it names host memory and runs no
//! kernels.
//!
//! `--json` prints one document; its top-level `schema_version` (now
//! [`SCHEMA_VERSION`]) changes only when a key is removed or changes meaning.
//!
//! Exit status: 0 when at least one device can run kernels, 1 when none can
//! (the report is still printed), 2 on error.

use std::fmt::Write as _;

use offload_core::{facts, Backend, Device, DeviceType, Runtime};
use serde::Serialize;

use crate::output;
use crate::ExitStatusError;

/// The version of the `--json` document.
pub const SCHEMA_VERSION: u32 = 1;

/// The exit statuses, as `offload info --help` states them.
const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  at least one device can run kernels
  1  no device can run kernels (only the virtual HOST device); the report is still printed
  2  error

JSON (--json): one document with \"schema_version\": 1 at the top level; every
device carries each property llvm-offload-device-info prints, keyed by its
label in snake case (\"Max Work Group Size\" is max_work_group_size).";

#[derive(clap::Args, Debug)]
#[command(after_help = EXIT_STATUS_HELP)]
pub struct Args {
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// Everything `info` reports.
#[derive(Serialize, Debug)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Devices that can run kernels (all but the virtual HOST device).
    pub usable_devices: usize,
    pub platforms: Vec<Platform>,
    pub failed_plugins: Vec<FailedPlugin>,
}

/// One initialised plugin, or the virtual `Host` platform.
#[derive(Serialize, Debug)]
pub struct Platform {
    /// The plugin; `null` for the virtual `Host` platform.
    pub plugin: Option<String>,
    /// The backend of the plugin's devices (the plugin name when it has none).
    pub backend: String,
    /// LLVM's "Platform Name".
    pub name: String,
    /// LLVM's "Platform Vendor Name".
    pub vendor_name: String,
    /// LLVM's "Platform Version".
    pub version: String,
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

/// `{x, y, z}`, as LLVM prints dimensions.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl From<[u32; 3]> for Dims {
    fn from(d: [u32; 3]) -> Self {
        Dims {
            x: d[0],
            y: d[1],
            z: d[2],
        }
    }
}

/// An `ol_device_fp_capability_flags_t` value and its flag names.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct FpCapability {
    pub value: u32,
    pub flags: Vec<&'static str>,
}

impl FpCapability {
    fn new(value: u32) -> Self {
        FpCapability {
            value,
            flags: facts::fp_capability_names(value),
        }
    }
}

/// One device and its properties.
#[derive(Serialize, Debug)]
pub struct DeviceReport {
    /// The runtime's device number; `null` for the virtual HOST device.
    pub id: Option<usize>,
    /// `null` for the virtual HOST device.
    pub plugin: Option<String>,
    /// Whether the device runs kernels (false only for the HOST device).
    pub usable: bool,
    // --- what llvm-offload-device-info prints, in its order ---
    pub platform_name: String,
    pub platform_vendor_name: String,
    pub platform_version: String,
    /// `HOST`, `CUDA`, `AMDGPU` or `UNKNOWN`.
    pub platform_backend: String,
    pub name: String,
    pub product_name: String,
    pub uid: String,
    /// `cpu`, `gpu` or `host` (LLVM prints it in capitals).
    #[serde(rename = "type")]
    pub device_type: String,
    pub driver_version: String,
    pub max_work_group_size: u32,
    pub max_work_group_size_per_dimension: Dims,
    pub max_work_size: u32,
    pub max_work_size_per_dimension: Dims,
    pub vendor_id: u32,
    pub num_compute_units: u32,
    /// MHz.
    pub max_clock_frequency: u32,
    /// MHz.
    pub memory_clock_rate: u32,
    pub address_bits: u32,
    /// Bytes.
    pub max_mem_allocation_size: u64,
    /// Bytes.
    pub global_mem_size: u64,
    /// Bytes.
    pub work_group_shared_mem_size: u64,
    pub single_precision_floating_point_capability: FpCapability,
    pub double_precision_floating_point_capability: FpCapability,
    pub half_precision_floating_point_capability: FpCapability,
    pub native_vector_width_for_char: u32,
    pub native_vector_width_for_short: u32,
    pub native_vector_width_for_int: u32,
    pub native_vector_width_for_long: u32,
    pub native_vector_width_for_float: u32,
    pub native_vector_width_for_double: u32,
    pub native_vector_width_for_half: u32,
    // --- ours (schema 1 keys kept from before) ---
    pub vendor: String,
    pub backend: String,
    pub triple: String,
    pub arch: String,
    pub global_memory_bytes: u64,
    pub group_memory_bytes: u64,
    pub compute_units: u32,
    pub max_group_size: u32,
    pub max_group_size_per_dim: [u32; 3],
    pub max_num_groups: [u32; 3],
    pub clock_mhz: u32,
}

/// The platform fields of a plugin's devices.
struct PlatformFacts {
    name: String,
    vendor_name: String,
    backend: Backend,
}

fn plugin_platform(plugin: &str, backend: Backend) -> PlatformFacts {
    PlatformFacts {
        name: plugin.to_string(),
        vendor_name: format!("offload-rs {plugin} plugin"),
        backend,
    }
}

fn device_report(d: &Device, p: &PlatformFacts) -> DeviceReport {
    let i = d.info();
    let w = facts::host_native_vector_widths();
    let max_work = |g: u32, n: u32| (g as u64 * n as u64).min(u32::MAX as u64) as u32;
    let fp = if d.shares_host_memory() {
        facts::FP_FULL_IEEE
    } else {
        0
    };
    DeviceReport {
        id: Some(d.id()),
        plugin: Some(d.plugin_name().to_string()),
        usable: true,
        platform_name: p.name.clone(),
        platform_vendor_name: p.vendor_name.clone(),
        platform_version: facts::OL_API_VERSION.to_string(),
        platform_backend: p.backend.ol_name().to_string(),
        name: i.name.clone(),
        product_name: i.product_name.clone(),
        uid: i.uid.clone(),
        device_type: i.device_type.name().to_string(),
        driver_version: i.driver_version.clone(),
        max_work_group_size: i.max_group_size,
        max_work_group_size_per_dimension: i.max_group_size_per_dim.into(),
        max_work_size: max_work(i.max_num_groups[0], i.max_group_size),
        max_work_size_per_dimension: Dims::from(
            [0, 1, 2].map(|k| max_work(i.max_num_groups[k], i.max_group_size_per_dim[k])),
        ),
        vendor_id: facts::cpu_vendor_id(&i.vendor),
        num_compute_units: i.compute_units,
        max_clock_frequency: i.clock_mhz.max(1),
        // No unprivileged source for a CPU's memory clock: the core clock.
        memory_clock_rate: i.clock_mhz.max(1),
        address_bits: i.address_bits,
        max_mem_allocation_size: i.global_memory_bytes,
        global_mem_size: i.global_memory_bytes,
        work_group_shared_mem_size: i.group_memory_bytes,
        single_precision_floating_point_capability: FpCapability::new(fp),
        double_precision_floating_point_capability: FpCapability::new(fp),
        half_precision_floating_point_capability: FpCapability::new(0),
        native_vector_width_for_char: w[0],
        native_vector_width_for_short: w[1],
        native_vector_width_for_int: w[2],
        native_vector_width_for_long: w[3],
        native_vector_width_for_float: w[4],
        native_vector_width_for_double: w[5],
        native_vector_width_for_half: w[6],
        vendor: i.vendor.clone(),
        backend: i.backend.name().to_string(),
        triple: i.triple.clone(),
        arch: i.arch.clone(),
        global_memory_bytes: i.global_memory_bytes,
        group_memory_bytes: i.group_memory_bytes,
        compute_units: i.compute_units,
        max_group_size: i.max_group_size,
        max_group_size_per_dim: i.max_group_size_per_dim,
        max_num_groups: i.max_num_groups,
        clock_mhz: i.clock_mhz,
    }
}

/// The virtual HOST device, as liboffload describes it: CPU facts borrowed
/// from a device that shares host memory, when there is one.
fn host_device_report(runtime: &Runtime) -> DeviceReport {
    let (vendor, clock, memory, cpus) = runtime
        .devices()
        .iter()
        .find(|d| d.shares_host_memory())
        .map(|d| {
            let i = d.info();
            (
                i.vendor.clone(),
                i.clock_mhz,
                i.global_memory_bytes,
                i.compute_units,
            )
        })
        .unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            ("Unknown".to_string(), 0, 0, cpus)
        });
    let w = facts::host_native_vector_widths();
    let name = "Virtual Host Device".to_string();
    DeviceReport {
        id: None,
        plugin: None,
        usable: false,
        platform_name: "Host".to_string(),
        platform_vendor_name: "Unknown platform vendor".to_string(),
        platform_version: facts::OL_API_VERSION.to_string(),
        platform_backend: "HOST".to_string(),
        name: name.clone(),
        product_name: name,
        uid: "HOST".to_string(),
        device_type: DeviceType::Host.name().to_string(),
        driver_version: format!("offload-rs {}", env!("CARGO_PKG_VERSION")),
        max_work_group_size: 1,
        max_work_group_size_per_dimension: [1, 1, 1].into(),
        max_work_size: u32::MAX,
        max_work_size_per_dimension: [u32::MAX; 3].into(),
        vendor_id: 0,
        num_compute_units: 1,
        max_clock_frequency: clock.max(1),
        memory_clock_rate: clock.max(1),
        address_bits: usize::BITS,
        max_mem_allocation_size: memory,
        global_mem_size: memory,
        work_group_shared_mem_size: 0,
        single_precision_floating_point_capability: FpCapability::new(facts::FP_FULL_IEEE),
        double_precision_floating_point_capability: FpCapability::new(facts::FP_FULL_IEEE),
        half_precision_floating_point_capability: FpCapability::new(0),
        native_vector_width_for_char: w[0],
        native_vector_width_for_short: w[1],
        native_vector_width_for_int: w[2],
        native_vector_width_for_long: w[3],
        native_vector_width_for_float: w[4],
        native_vector_width_for_double: w[5],
        native_vector_width_for_half: w[6],
        vendor,
        backend: Backend::Host.name().to_string(),
        triple: String::new(),
        arch: String::new(),
        global_memory_bytes: memory,
        group_memory_bytes: 0,
        compute_units: cpus,
        max_group_size: 1,
        max_group_size_per_dim: [1, 1, 1],
        max_num_groups: [u32::MAX; 3],
        clock_mhz: clock,
    }
}

/// Collects the report from `runtime`.
pub fn collect(runtime: &Runtime) -> Report {
    let all = runtime.devices();
    let mut platforms: Vec<Platform> = runtime
        .plugins()
        .map(|(plugin, range)| {
            let devices_of = all.get(range).unwrap_or(&[]);
            let backend = devices_of
                .first()
                .map(|d| d.info().backend)
                .unwrap_or(Backend::Other);
            let facts = plugin_platform(plugin.name(), backend);
            let devices: Vec<DeviceReport> = devices_of
                .iter()
                .map(|d| device_report(d, &facts))
                .collect();
            let backend = devices
                .first()
                .map(|d| d.backend.clone())
                .unwrap_or_else(|| plugin.name().to_string());
            Platform {
                plugin: Some(plugin.name().to_string()),
                backend,
                name: facts.name,
                vendor_name: facts.vendor_name,
                version: facts::OL_API_VERSION.to_string(),
                devices,
            }
        })
        .collect();
    let usable_devices = platforms.iter().map(|p| p.devices.len()).sum();
    // As in LLVM 22: one synthetic host platform and device, last.
    platforms.push(Platform {
        plugin: None,
        backend: Backend::Host.name().to_string(),
        name: "Host".to_string(),
        vendor_name: "Unknown platform vendor".to_string(),
        version: facts::OL_API_VERSION.to_string(),
        devices: vec![host_device_report(runtime)],
    });
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
        schema_version: SCHEMA_VERSION,
        usable_devices,
        platforms,
        failed_plugins,
    }
}

fn dims(d: Dims) -> String {
    format!("{{x: {}, y: {}, z: {}}}", d.x, d.y, d.z)
}

fn fp(c: &FpCapability) -> String {
    if c.flags.is_empty() {
        format!("{} {{ }}", c.value)
    } else {
        format!("{} {{ {} }}", c.value, c.flags.join(" "))
    }
}

/// The rows of one device: LLVM's labels and formats first, then ours.
fn device_rows(d: &DeviceReport) -> Vec<(&'static str, String)> {
    vec![
        ("Platform Name", output::text(&d.platform_name)),
        (
            "Platform Vendor Name",
            output::text(&d.platform_vendor_name),
        ),
        ("Platform Version", output::text(&d.platform_version)),
        ("Platform Backend", d.platform_backend.clone()),
        ("Name", output::text(&d.name)),
        ("Product Name", output::text(&d.product_name)),
        ("UID", output::text(&d.uid)),
        ("Type", d.device_type.to_uppercase()),
        ("Driver Version", output::text(&d.driver_version)),
        ("Max Work Group Size", d.max_work_group_size.to_string()),
        (
            "Max Work Group Size Per Dimension",
            dims(d.max_work_group_size_per_dimension),
        ),
        ("Max Work Size", d.max_work_size.to_string()),
        (
            "Max Work Size Per Dimension",
            dims(d.max_work_size_per_dimension),
        ),
        ("Vendor ID", d.vendor_id.to_string()),
        ("Num Compute Units", d.num_compute_units.to_string()),
        (
            "Max Clock Frequency",
            format!("{} MHz", d.max_clock_frequency),
        ),
        ("Memory Clock Rate", format!("{} MHz", d.memory_clock_rate)),
        ("Address Bits", d.address_bits.to_string()),
        (
            "Max Mem Allocation Size",
            output::bytes(d.max_mem_allocation_size),
        ),
        ("Global Mem Size", output::bytes(d.global_mem_size)),
        (
            "Work Group Shared Mem Size",
            output::bytes(d.work_group_shared_mem_size),
        ),
        (
            "Single Precision Floating Point Capability",
            fp(&d.single_precision_floating_point_capability),
        ),
        (
            "Double Precision Floating Point Capability",
            fp(&d.double_precision_floating_point_capability),
        ),
        (
            "Half Precision Floating Point Capability",
            fp(&d.half_precision_floating_point_capability),
        ),
        (
            "Native Vector Width For Char",
            d.native_vector_width_for_char.to_string(),
        ),
        (
            "Native Vector Width For Short",
            d.native_vector_width_for_short.to_string(),
        ),
        (
            "Native Vector Width For Int",
            d.native_vector_width_for_int.to_string(),
        ),
        (
            "Native Vector Width For Long",
            d.native_vector_width_for_long.to_string(),
        ),
        (
            "Native Vector Width For Float",
            d.native_vector_width_for_float.to_string(),
        ),
        (
            "Native Vector Width For Double",
            d.native_vector_width_for_double.to_string(),
        ),
        (
            "Native Vector Width For Half",
            d.native_vector_width_for_half.to_string(),
        ),
        ("Vendor", output::text(&d.vendor)),
        ("Backend", d.backend.clone()),
        (
            "Triple",
            if d.triple.is_empty() {
                "(none)".to_string()
            } else {
                output::text(&d.triple)
            },
        ),
        (
            "Arch",
            if d.arch.is_empty() {
                "(any)".to_string()
            } else {
                output::text(&d.arch)
            },
        ),
        (
            "Plugin",
            d.plugin
                .clone()
                .unwrap_or_else(|| "(none: names host memory, runs no kernels)".to_string()),
        ),
    ]
}

/// Renders the report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let ndev: usize = r.platforms.iter().map(|p| p.devices.len()).sum();
    let _ = writeln!(
        s,
        "{} platform(s), {ndev} device(s), {} usable",
        r.platforms.len(),
        r.usable_devices
    );
    for (pi, p) in r.platforms.iter().enumerate() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Platform {pi}: {} (backend {}, {} device(s))",
            p.plugin.as_deref().unwrap_or(&p.name),
            p.backend,
            p.devices.len()
        );
        for d in &p.devices {
            match (d.id, &d.plugin) {
                (Some(id), Some(plugin)) => {
                    let _ = writeln!(s, "  Device {id} ({plugin} {}):", output::text(&d.uid));
                }
                _ => {
                    let _ = writeln!(s, "  {} ({}):", output::text(&d.name), d.uid);
                }
            }
            for (k, v) in device_rows(d) {
                let _ = writeln!(s, "    {:<44}{v}", format!("{k}:"));
            }
        }
    }
    if r.usable_devices == 0 {
        let why = match std::env::var("OFFLOAD_PLUGINS") {
            Ok(v) => {
                format!(" (OFFLOAD_PLUGINS={v:?} enables no built-in plugin with devices)")
            }
            Err(_) => String::new(),
        };
        let _ = writeln!(s);
        let _ = writeln!(s, "no usable devices{why}");
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
    crate::check_plugin_names()?;
    let report = collect(offload::internals::runtime());
    let printed = if args.json {
        output::emit_json(&report)
    } else {
        output::emit(&render(&report))
    };
    if let Err(error) = printed {
        return Err(ExitStatusError { status: 2, error }.into());
    }
    if report.usable_devices == 0 {
        // Not an error: the report says why; the status says "none".
        return Err(ExitStatusError {
            status: 1,
            error: anyhow::Error::msg(""),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp_flags_render_like_llvm() {
        let c = FpCapability::new(facts::FP_FULL_IEEE);
        assert_eq!(
            fp(&c),
            "127 { CORRECTLY_ROUNDED_DIVIDE_SQRT ROUND_TO_NEAREST ROUND_TO_ZERO \
             ROUND_TO_INF INF_NAN DENORM FMA }"
        );
        assert_eq!(fp(&FpCapability::new(0)), "0 { }");
        assert_eq!(dims([1, 2, 3].into()), "{x: 1, y: 2, z: 3}",);
    }

    #[test]
    fn host_device_is_listed_last_and_not_usable() {
        let rt = Runtime::new(offload_core::Config::default(), &[]);
        let r = collect(&rt);
        assert_eq!(r.schema_version, SCHEMA_VERSION);
        assert_eq!(r.usable_devices, 0);
        let last = r.platforms.last().unwrap();
        assert_eq!(last.name, "Host");
        assert_eq!(last.devices[0].uid, "HOST");
        assert!(!last.devices[0].usable);
        let text = render(&r);
        assert!(text.contains("no usable devices"), "{text}");
        assert!(text.contains("UID:"), "{text}");
    }
}
