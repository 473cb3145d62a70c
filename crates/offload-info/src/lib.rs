//! The device report: every platform and device of a runtime with the
//! properties LLVM's `llvm-offload-device-info` prints, in one typed model
//! that `offload info` (text and `--json`) and the Python package
//! (`offload.info()`, `Device.info`) both serialise, so the two cannot
//! drift apart.
//!
//! Each property has the value our `libLLVMOffload` gives for it
//! (`crates/liboffload/src/info.rs`; the facts shared with it live in
//! `offload_core::facts`), under the key that is LLVM's label in snake case
//! ("Max Work Group Size" is `max_work_group_size`). As in LLVM 22, a last
//! platform `Host` holds the virtual HOST device (uid `HOST`): it names host
//! memory and runs no kernels.
//!
//! The JSON document's top-level `schema_version` (now [`SCHEMA_VERSION`])
//! changes only when a key is removed or changes meaning.

use offload_core::facts::{self, VirtualHost};
use offload_core::{Backend, Device, DeviceType, Runtime};
use serde::Serialize;

/// The version of the JSON document.
pub const SCHEMA_VERSION: u32 = 1;

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
    pub fn new(value: u32) -> Self {
        FpCapability {
            value,
            flags: facts::fp_capability_names(value),
        }
    }
}

/// LLVM's "Native Vector Width For ..." properties: every device reports
/// the host CPU's (what liboffload answers).
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeVectorWidths {
    pub native_vector_width_for_char: u32,
    pub native_vector_width_for_short: u32,
    pub native_vector_width_for_int: u32,
    pub native_vector_width_for_long: u32,
    pub native_vector_width_for_float: u32,
    pub native_vector_width_for_double: u32,
    pub native_vector_width_for_half: u32,
}

impl NativeVectorWidths {
    /// This CPU's widest SIMD unit's lanes per type.
    pub fn of_host() -> Self {
        let [char, short, int, long, float, double, half] = facts::host_native_vector_widths();
        NativeVectorWidths {
            native_vector_width_for_char: char,
            native_vector_width_for_short: short,
            native_vector_width_for_int: int,
            native_vector_width_for_long: long,
            native_vector_width_for_float: float,
            native_vector_width_for_double: double,
            native_vector_width_for_half: half,
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
    #[serde(flatten)]
    pub native_vector_widths: NativeVectorWidths,
    // --- ours (schema 1 keys kept from before) ---
    pub vendor: String,
    pub backend: String,
    pub triple: String,
    pub arch: String,
    /// An AMD GPU's ISAs as target IDs (`gfx90a:sramecc+:xnack-`, then
    /// its family's generic ISA): what decides which code objects it runs.
    /// Empty for other devices.
    pub target_ids: Vec<String>,
    pub global_memory_bytes: u64,
    pub group_memory_bytes: u64,
    pub compute_units: u32,
    pub max_group_size: u32,
    pub max_group_size_per_dim: [u32; 3],
    pub max_num_groups: [u32; 3],
    pub clock_mhz: u32,
}

/// The platform fields of a plugin's devices.
#[derive(Debug, Clone)]
pub struct PlatformFacts {
    pub name: String,
    pub vendor_name: String,
    pub backend: Backend,
}

/// The platform facts of a plugin named `plugin` whose devices are of
/// `backend`.
pub fn plugin_platform(plugin: &str, backend: Backend) -> PlatformFacts {
    PlatformFacts {
        name: plugin.to_string(),
        vendor_name: format!("offload-rs {plugin} plugin"),
        backend,
    }
}

/// One plugin device's report.
pub fn device_report(d: &Device, p: &PlatformFacts) -> DeviceReport {
    let i = d.info();
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
        native_vector_widths: NativeVectorWidths::of_host(),
        vendor: i.vendor.clone(),
        backend: i.backend.name().to_string(),
        triple: i.triple.clone(),
        arch: i.arch.clone(),
        target_ids: i.target_ids.iter().map(ToString::to_string).collect(),
        global_memory_bytes: i.global_memory_bytes,
        group_memory_bytes: i.group_memory_bytes,
        compute_units: i.compute_units,
        max_group_size: i.max_group_size,
        max_group_size_per_dim: i.max_group_size_per_dim,
        max_num_groups: i.max_num_groups,
        clock_mhz: i.clock_mhz,
    }
}

/// The virtual HOST device, as liboffload describes it.
pub fn host_device_report(runtime: &Runtime) -> DeviceReport {
    let VirtualHost {
        vendor,
        clock_mhz: clock,
        memory_bytes: memory,
        cpus,
    } = VirtualHost::of(runtime);
    let name = facts::HOST_DEVICE_NAME.to_string();
    DeviceReport {
        id: None,
        plugin: None,
        usable: false,
        platform_name: facts::HOST_PLATFORM_NAME.to_string(),
        platform_vendor_name: facts::HOST_PLATFORM_VENDOR.to_string(),
        platform_version: facts::OL_API_VERSION.to_string(),
        platform_backend: "HOST".to_string(),
        name: name.clone(),
        product_name: name,
        uid: facts::HOST_DEVICE_UID.to_string(),
        device_type: DeviceType::Host.name().to_string(),
        driver_version: facts::driver_version(),
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
        native_vector_widths: NativeVectorWidths::of_host(),
        vendor,
        backend: Backend::Host.name().to_string(),
        triple: String::new(),
        arch: String::new(),
        target_ids: Vec::new(),
        global_memory_bytes: memory,
        group_memory_bytes: 0,
        compute_units: cpus,
        max_group_size: 1,
        max_group_size_per_dim: [1, 1, 1],
        max_num_groups: [u32::MAX; 3],
        clock_mhz: clock,
    }
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
        name: facts::HOST_PLATFORM_NAME.to_string(),
        vendor_name: facts::HOST_PLATFORM_VENDOR.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_platform_comes_last_with_the_virtual_host_device() {
        let rt = Runtime::new(offload_core::Config::default(), &[]);
        let r = collect(&rt);
        assert_eq!((r.schema_version, r.usable_devices), (SCHEMA_VERSION, 0));
        let host = r.platforms.last().unwrap();
        assert_eq!((host.plugin.as_deref(), host.name.as_str()), (None, "Host"));
        let d = &host.devices[0];
        assert_eq!(
            (d.uid.as_str(), d.name.as_str()),
            ("HOST", "Virtual Host Device")
        );
        assert_eq!(
            (d.usable, d.id, d.device_type.as_str()),
            (false, None, "host")
        );
        // No device shares host memory here: the CPU count still comes out.
        assert!(d.compute_units >= 1);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["platforms"][0]["devices"][0]["type"], "host");
    }
}
