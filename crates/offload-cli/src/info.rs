//! `offload info`: platforms, devices and device properties, like LLVM's
//! `llvm-offload-device-info`.
//!
//! The report itself (every property `llvm-offload-device-info` prints, with
//! the value our `libLLVMOffload` gives for it) is the `offload-info` crate's,
//! shared with the Python package; this module prints it as LLVM's tool does
//! or as JSON.
//!
//! `--json` prints one document; its top-level `schema_version` (now
//! [`offload_info::SCHEMA_VERSION`]) changes only when a key is removed or changes meaning.
//!
//! Exit status: 0 when at least one device can run kernels, 1 when none can
//! (the report is still printed), 2 on error.

use std::fmt::Write as _;

use offload_info::{collect, DeviceReport, Dims, FpCapability, Report};

use crate::output;
use crate::ExitStatusError;

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
    let mut rows = common_rows(d);
    if !d.target_ids.is_empty() {
        let arch = rows
            .iter()
            .position(|(k, _)| *k == "Arch")
            .map_or(rows.len(), |i| i + 1);
        rows.insert(arch, ("Target IDs", output::text(&d.target_ids.join(", "))));
    }
    rows
}

/// The rows every device has.
fn common_rows(d: &DeviceReport) -> Vec<(&'static str, String)> {
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
            d.native_vector_widths
                .native_vector_width_for_char
                .to_string(),
        ),
        (
            "Native Vector Width For Short",
            d.native_vector_widths
                .native_vector_width_for_short
                .to_string(),
        ),
        (
            "Native Vector Width For Int",
            d.native_vector_widths
                .native_vector_width_for_int
                .to_string(),
        ),
        (
            "Native Vector Width For Long",
            d.native_vector_widths
                .native_vector_width_for_long
                .to_string(),
        ),
        (
            "Native Vector Width For Float",
            d.native_vector_widths
                .native_vector_width_for_float
                .to_string(),
        ),
        (
            "Native Vector Width For Double",
            d.native_vector_widths
                .native_vector_width_for_double
                .to_string(),
        ),
        (
            "Native Vector Width For Half",
            d.native_vector_widths
                .native_vector_width_for_half
                .to_string(),
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
    use offload_core::{facts, Runtime};
    use offload_info::SCHEMA_VERSION;

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
