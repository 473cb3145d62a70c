//! Device facts every face reports alike (liboffload's `olGetDeviceInfo`,
//! `offload info`, the Python package), computed here once so they cannot
//! drift apart.

/// The liboffload API version LLVM 22 reports as a platform's version.
pub const OL_API_VERSION: &str = "v0.0.1";

/// `ol_device_fp_capability_flag_t` bits and LLVM's names for them.
pub const FP_CAPABILITY_FLAGS: [(u32, &str); 7] = [
    (1, "CORRECTLY_ROUNDED_DIVIDE_SQRT"),
    (2, "ROUND_TO_NEAREST"),
    (4, "ROUND_TO_ZERO"),
    (8, "ROUND_TO_INF"),
    (16, "INF_NAN"),
    (32, "DENORM"),
    (64, "FMA"),
];

/// Every flag: what an IEEE-754 CPU unit does in hardware.
pub const FP_FULL_IEEE: u32 = 127;

/// LLVM's names of the flags set in `value`.
pub fn fp_capability_names(value: u32) -> Vec<&'static str> {
    FP_CAPABILITY_FLAGS
        .iter()
        .filter(|(bit, _)| value & bit != 0)
        .map(|&(_, name)| name)
        .collect()
}

/// Native vector widths (char, short, int, long, float, double, half) of
/// this CPU's widest SIMD unit.
pub fn host_native_vector_widths() -> [u32; 7] {
    #[cfg(target_arch = "x86_64")]
    let bytes: u32 = if std::arch::is_x86_feature_detected!("avx512f") {
        64
    } else if std::arch::is_x86_feature_detected!("avx2") {
        32
    } else {
        16
    };
    #[cfg(not(target_arch = "x86_64"))]
    let bytes: u32 = 16;
    [
        bytes,
        bytes / 2,
        bytes / 4,
        bytes / 8,
        bytes / 4,
        bytes / 8,
        0,
    ]
}

/// PCI-SIG vendor id of a CPU vendor string (0 when unknown).
pub fn cpu_vendor_id(vendor: &str) -> u32 {
    match vendor {
        "GenuineIntel" => 0x8086,
        "AuthenticAMD" => 0x1022,
        _ => 0,
    }
}

/// LLVM 22's synthetic last platform, holding the virtual HOST device.
pub const HOST_PLATFORM_NAME: &str = "Host";
/// The host platform's vendor name, as LLVM 22 reports it.
pub const HOST_PLATFORM_VENDOR: &str = "Unknown platform vendor";
/// The virtual HOST device's name and product name.
pub const HOST_DEVICE_NAME: &str = "Virtual Host Device";
/// The virtual HOST device's UID.
pub const HOST_DEVICE_UID: &str = "HOST";

/// The driver version every device of ours reports when it has none of its
/// own (the virtual HOST device).
pub fn driver_version() -> String {
    format!("offload-rs {}", env!("CARGO_PKG_VERSION"))
}

/// What the virtual HOST device reports of the CPU: borrowed from a device
/// that shares host memory (the host plugin's) when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualHost {
    pub vendor: String,
    pub clock_mhz: u32,
    pub memory_bytes: u64,
    pub cpus: u32,
}

impl VirtualHost {
    /// The facts for `runtime`'s HOST device.
    pub fn of(runtime: &crate::Runtime) -> VirtualHost {
        runtime
            .devices()
            .iter()
            .find(|d| d.shares_host_memory())
            .map(|d| {
                let i = d.info();
                VirtualHost {
                    vendor: i.vendor.clone(),
                    clock_mhz: i.clock_mhz,
                    memory_bytes: i.global_memory_bytes,
                    cpus: i.compute_units,
                }
            })
            .unwrap_or_else(|| VirtualHost {
                vendor: "Unknown".to_string(),
                clock_mhz: 0,
                memory_bytes: 0,
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_bits() {
        assert_eq!(fp_capability_names(FP_FULL_IEEE).len(), 7);
        assert_eq!(fp_capability_names(2 | 64), ["ROUND_TO_NEAREST", "FMA"]);
        assert_eq!(cpu_vendor_id("GenuineIntel"), 0x8086);
        let w = host_native_vector_widths();
        assert_eq!(w[0], 8 * w[3], "char lanes are 8x long lanes");
    }
}
