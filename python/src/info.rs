//! Everything `offload info --json` reports, for Python.
//!
//! This mirrors the shape of `crates/offload-cli/src/info.rs` (the report
//! lives in the command's binary crate); the facts in it come from
//! `offload_core::facts` and the device types' own names, and the pytest
//! suite compares the two documents key for key.

use offload::internals::Runtime;
use offload::Backend;
use offload_core::{facts, Device};
use pyo3::prelude::*;
use serde_json::{json, Value};

/// The `--json` schema version this mirrors.
const SCHEMA_VERSION: u32 = 1;

fn fp(value: u32) -> Value {
    json!({ "value": value, "flags": facts::fp_capability_names(value) })
}

fn dims(d: [u32; 3]) -> Value {
    json!({ "x": d[0], "y": d[1], "z": d[2] })
}

/// The platform (plugin) facts of a device of `plugin`.
pub struct PlatformFacts {
    pub name: String,
    pub vendor_name: String,
    pub backend: Backend,
}

pub fn plugin_platform(plugin: &str, backend: Backend) -> PlatformFacts {
    PlatformFacts {
        name: plugin.to_string(),
        vendor_name: format!("offload-rs {plugin} plugin"),
        backend,
    }
}

/// Adds the native vector widths to a device report.
fn report_fields(
    mut v: serde_json::Map<String, Value>,
    widths: [u32; 7],
) -> serde_json::Map<String, Value> {
    let keys = [
        "native_vector_width_for_char",
        "native_vector_width_for_short",
        "native_vector_width_for_int",
        "native_vector_width_for_long",
        "native_vector_width_for_float",
        "native_vector_width_for_double",
        "native_vector_width_for_half",
    ];
    for (k, w) in keys.iter().zip(widths) {
        v.insert((*k).to_string(), json!(w));
    }
    v
}

/// One device's report, as `offload info --json` gives it.
pub fn device_report(d: &Device, p: &PlatformFacts) -> Value {
    let i = d.info();
    let max_work = |g: u32, n: u32| (g as u64 * n as u64).min(u32::MAX as u64) as u32;
    let fpv = if d.shares_host_memory() {
        facts::FP_FULL_IEEE
    } else {
        0
    };
    let v = json!({
        "id": d.id(),
        "plugin": d.plugin_name(),
        "usable": true,
        "platform_name": p.name,
        "platform_vendor_name": p.vendor_name,
        "platform_version": facts::OL_API_VERSION,
        "platform_backend": p.backend.ol_name(),
        "name": i.name,
        "product_name": i.product_name,
        "uid": i.uid,
        "type": i.device_type.name(),
        "driver_version": i.driver_version,
        "max_work_group_size": i.max_group_size,
        "max_work_group_size_per_dimension": dims(i.max_group_size_per_dim),
        "max_work_size": max_work(i.max_num_groups[0], i.max_group_size),
        "max_work_size_per_dimension":
            dims([0, 1, 2].map(|k| max_work(i.max_num_groups[k], i.max_group_size_per_dim[k]))),
        "vendor_id": facts::cpu_vendor_id(&i.vendor),
        "num_compute_units": i.compute_units,
        "max_clock_frequency": i.clock_mhz.max(1),
        "memory_clock_rate": i.clock_mhz.max(1),
        "address_bits": i.address_bits,
        "max_mem_allocation_size": i.global_memory_bytes,
        "global_mem_size": i.global_memory_bytes,
        "work_group_shared_mem_size": i.group_memory_bytes,
        "single_precision_floating_point_capability": fp(fpv),
        "double_precision_floating_point_capability": fp(fpv),
        "half_precision_floating_point_capability": fp(0),
        "vendor": i.vendor,
        "backend": i.backend.name(),
        "triple": i.triple,
        "arch": i.arch,
        "global_memory_bytes": i.global_memory_bytes,
        "group_memory_bytes": i.group_memory_bytes,
        "compute_units": i.compute_units,
        "max_group_size": i.max_group_size,
        "max_group_size_per_dim": i.max_group_size_per_dim,
        "max_num_groups": i.max_num_groups,
        "clock_mhz": i.clock_mhz,
    });
    let Value::Object(map) = v else {
        unreachable!("json! of an object")
    };
    Value::Object(report_fields(map, facts::host_native_vector_widths()))
}

/// The virtual HOST device (LLVM 22's last platform).
fn host_device_report(runtime: &Runtime) -> Value {
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
    let name = "Virtual Host Device";
    let v = json!({
        "id": null,
        "plugin": null,
        "usable": false,
        "platform_name": "Host",
        "platform_vendor_name": "Unknown platform vendor",
        "platform_version": facts::OL_API_VERSION,
        "platform_backend": "HOST",
        "name": name,
        "product_name": name,
        "uid": "HOST",
        "type": "host",
        "driver_version": format!("offload-rs {}", env!("CARGO_PKG_VERSION")),
        "max_work_group_size": 1,
        "max_work_group_size_per_dimension": dims([1, 1, 1]),
        "max_work_size": u32::MAX,
        "max_work_size_per_dimension": dims([u32::MAX; 3]),
        "vendor_id": 0,
        "num_compute_units": 1,
        "max_clock_frequency": clock.max(1),
        "memory_clock_rate": clock.max(1),
        "address_bits": usize::BITS,
        "max_mem_allocation_size": memory,
        "global_mem_size": memory,
        "work_group_shared_mem_size": 0,
        "single_precision_floating_point_capability": fp(facts::FP_FULL_IEEE),
        "double_precision_floating_point_capability": fp(facts::FP_FULL_IEEE),
        "half_precision_floating_point_capability": fp(0),
        "vendor": vendor,
        "backend": "host",
        "triple": "",
        "arch": "",
        "global_memory_bytes": memory,
        "group_memory_bytes": 0,
        "compute_units": cpus,
        "max_group_size": 1,
        "max_group_size_per_dim": [1, 1, 1],
        "max_num_groups": [u32::MAX, u32::MAX, u32::MAX],
        "clock_mhz": clock,
    });
    let Value::Object(map) = v else {
        unreachable!("json! of an object")
    };
    Value::Object(report_fields(map, facts::host_native_vector_widths()))
}

/// The facts of the platform (plugin) owning device `id`.
pub fn platform_of(runtime: &Runtime, id: usize) -> PlatformFacts {
    for (plugin, range) in runtime.plugins() {
        if range.contains(&id) {
            let backend = runtime
                .devices()
                .get(range.start)
                .map_or(Backend::Other, |d| d.info().backend);
            return plugin_platform(plugin.name(), backend);
        }
    }
    plugin_platform("unknown", Backend::Other)
}

/// The whole report.
pub fn report(runtime: &Runtime) -> Value {
    let all = runtime.devices();
    let mut platforms: Vec<Value> = runtime
        .plugins()
        .map(|(plugin, range)| {
            let devices_of = all.get(range).unwrap_or(&[]);
            let backend = devices_of
                .first()
                .map_or(Backend::Other, |d| d.info().backend);
            let facts = plugin_platform(plugin.name(), backend);
            let devices: Vec<Value> = devices_of
                .iter()
                .map(|d| device_report(d, &facts))
                .collect();
            let backend = devices_of.first().map_or_else(
                || plugin.name().to_string(),
                |d| d.info().backend.name().to_string(),
            );
            json!({
                "plugin": plugin.name(),
                "backend": backend,
                "name": facts.name,
                "vendor_name": facts.vendor_name,
                "version": facts::OL_API_VERSION,
                "devices": devices,
            })
        })
        .collect();
    let usable: usize = platforms
        .iter()
        .map(|p| p["devices"].as_array().map_or(0, Vec::len))
        .sum();
    platforms.push(json!({
        "plugin": null,
        "backend": "host",
        "name": "Host",
        "vendor_name": "Unknown platform vendor",
        "version": facts::OL_API_VERSION,
        "devices": [host_device_report(runtime)],
    }));
    let failed: Vec<Value> = runtime
        .failed_plugins()
        .iter()
        .map(|(name, e)| {
            json!({ "plugin": name, "code": format!("{:?}", e.code()), "error": e.message() })
        })
        .collect();
    json!({
        "schema_version": SCHEMA_VERSION,
        "usable_devices": usable,
        "platforms": platforms,
        "failed_plugins": failed,
    })
}

/// `offload info --json` as a string (``offload.info()`` parses it).
#[pyfunction]
pub fn info_json() -> String {
    report(offload::internals::runtime()).to_string()
}
