//! Recording kernel launches, for `offload replay` (format: docs/record-format.md).
//!
//! On when `OFFLOAD_RECORD=DIR` is set (`offload record` sets it): every
//! launch through the core (both faces, every plugin) of a selected kernel
//! (`OFFLOAD_RECORD_KERNELS=a,b`; all when unset) is recorded in its own
//! directory `DIR/launch-NNNNNN-PID/`: the image the kernel came from, its
//! name, the launch configuration and arguments, and every live range of
//! the device's allocation index (allocations, program globals, registered
//! memory) before and after the launch. A launch whose ranges exceed
//! `OFFLOAD_RECORD_MAX_BYTES` (default 256 MiB) is launched unrecorded, with
//! a warning.
//!
//! `launch.json` is written and read through one schema, `Manifest`
//! (serde), which needs the `record` feature (serde, serde_json). A build
//! without it keeps the environment handling, but a launch it would record
//! fails with an error that names the feature: a recording that silently
//! misses launches would replay as something it is not.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
#[cfg(feature = "record")]
use crate::index::{Allocation, Origin};
use crate::plugin::{KernelArgs, LaunchConfig};
use crate::program::Kernel;

/// Version of the on-disk format.
pub const FORMAT_VERSION: u32 = 1;

pub struct Recorder {
    dir: PathBuf,
    kernels: Vec<String>,
    #[cfg_attr(not(feature = "record"), allow(dead_code))]
    max_bytes: u64,
    #[cfg_attr(not(feature = "record"), allow(dead_code))]
    seq: AtomicU64,
}

/// The process's recorder, when `OFFLOAD_RECORD` is set.
pub fn active() -> Option<&'static Recorder> {
    static R: OnceLock<Option<Recorder>> = OnceLock::new();
    R.get_or_init(|| {
        let dir = std::env::var_os("OFFLOAD_RECORD").filter(|d| !d.is_empty())?;
        let kernels = std::env::var("OFFLOAD_RECORD_KERNELS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(String::from)
            .collect();
        let max_bytes =
            crate::config::env_u64("OFFLOAD_RECORD_MAX_BYTES", "a byte count", "268435456")
                .unwrap_or(256 << 20);
        Some(Recorder {
            dir: dir.into(),
            kernels,
            max_bytes,
            seq: AtomicU64::new(0),
        })
    })
    .as_ref()
}

impl Recorder {
    /// Whether launches of `kernel` are recorded.
    pub fn wants(&self, kernel: &str) -> bool {
        self.kernels.is_empty() || self.kernels.iter().any(|k| k == kernel)
    }

    /// Run `launch` (which completes the kernel) and record it.
    pub(crate) fn record(
        &self,
        device: &Device,
        kernel: &Kernel,
        args: KernelArgs<'_>,
        config: &LaunchConfig,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        #[cfg(not(feature = "record"))]
        {
            let _ = (device, args, config, launch);
            Err(feature_missing(kernel.name(), &self.dir))
        }
        #[cfg(feature = "record")]
        {
            let ranges = device.live_ranges();
            let total: u64 = ranges.iter().map(|a| a.size as u64).sum();
            let Some(image) = kernel.program().image() else {
                tracing::warn!(
                    kernel = kernel.name(),
                    "not recorded: the program was loaded before recording began"
                );
                return launch();
            };
            if total > self.max_bytes {
                tracing::warn!(
                    kernel = kernel.name(),
                    bytes = total,
                    max = self.max_bytes,
                    "not recorded: device memory exceeds OFFLOAD_RECORD_MAX_BYTES"
                );
                return launch();
            }
            let before = snapshot(device, &ranges);
            launch()?;
            let after = snapshot(device, &ranges);
            let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = self
                .dir
                .join(format!("launch-{n:06}-{}", std::process::id()));
            let write = || -> std::io::Result<()> {
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("image.bin"), image)?;
                for (i, (b, a)) in before.iter().zip(&after).enumerate() {
                    if let Some(b) = b {
                        std::fs::write(dir.join(format!("r{i}.before")), b)?;
                    }
                    if let Some(a) = a {
                        std::fs::write(dir.join(format!("r{i}.after")), a)?;
                    }
                }
                let manifest =
                    manifest(device, kernel, args, config, &ranges, &before, image.len());
                std::fs::write(dir.join("launch.json"), manifest)
            };
            write().map_err(|e| {
                Error::new(
                    ErrorCode::HostIo,
                    format!("recording {} into {}: {e}", kernel.name(), dir.display()),
                )
            })
        }
    }
}

/// The error of a launch to record in a build without the `record` feature.
#[cfg_attr(feature = "record", allow(dead_code))]
fn feature_missing(kernel: &str, dir: &std::path::Path) -> Error {
    Error::new(
        ErrorCode::Unsupported,
        format!(
            "cannot record {kernel} into {} (OFFLOAD_RECORD is set): recording needs the `record` feature of offload-core, which this build lacks (offload-runtime: features = [\"record\"])",
            dir.display()
        ),
    )
}

/// The bytes of every range (None where the device refused the read).
#[cfg(feature = "record")]
fn snapshot(device: &Device, ranges: &[Allocation]) -> Vec<Option<Vec<u8>>> {
    ranges
        .iter()
        .map(|a| {
            let mut buf = vec![0u8; a.size];
            // SAFETY: `buf` holds `a.size` bytes.
            let read = unsafe { device.copy_from_device(buf.as_mut_ptr(), a.base, a.size) };
            read.ok().map(|_| buf)
        })
        .collect()
}

/// `launch.json` (see docs/record-format.md).
#[cfg(feature = "record")]
fn manifest(
    device: &Device,
    kernel: &Kernel,
    args: KernelArgs<'_>,
    config: &LaunchConfig,
    ranges: &[Allocation],
    before: &[Option<Vec<u8>>],
    image_size: usize,
) -> String {
    let info = device.info();
    let globals = kernel.program().global_names();
    let m = Manifest {
        format: FORMAT_VERSION,
        kernel: kernel.name().to_string(),
        image: Some("image.bin".to_string()),
        image_size: Some(image_size as u64),
        device: Some(RecordedDevice {
            plugin: device.plugin_name().to_string(),
            triple: info.triple.clone(),
            uid: info.uid.clone(),
        }),
        config: RecordedConfig {
            num_groups: Some(config.num_groups.to_vec()),
            group_size: Some(config.group_size.to_vec()),
            dyn_group_memory: Some(config.dyn_group_memory),
            tripcount: Some(config.tripcount),
        },
        args: RecordedArgs::from(args),
        ranges: ranges
            .iter()
            .zip(before)
            .map(|(a, b)| RecordedRange {
                base: a.base.0,
                size: a.size as u64,
                origin: match a.origin {
                    Origin::Alloc(_) => RangeOrigin::Alloc,
                    Origin::Global => RangeOrigin::Global,
                    Origin::Registered => RangeOrigin::Registered,
                },
                name: globals
                    .iter()
                    .find(|(p, _)| *p == a.base)
                    .map(|(_, n)| n.to_string()),
                recorded: b.is_some(),
            })
            .collect(),
    };
    let mut out = m.to_json();
    out.push('\n');
    out
}

#[cfg(feature = "record")]
pub use schema::*;

/// The schema of `launch.json`, for the recorder (writer) and `offload
/// replay` (reader). Numbers have the types the runtime launches with, so
/// a value that does not fit (a group size of 2^32, a negative size) is a
/// parse error naming its field, never truncated. Unknown keys are ignored;
/// the optional ones are those recordings of format 1 may lack.
#[cfg(feature = "record")]
mod schema {
    use serde::{Deserialize, Serialize};

    use crate::plugin::KernelArgs;

    /// One recorded launch (`launch.json`).
    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
    pub struct Manifest {
        /// [`super::FORMAT_VERSION`].
        pub format: u32,
        /// The kernel's name in the image.
        pub kernel: String,
        /// The image file, relative to the launch folder (`image.bin` when
        /// absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub image: Option<String>,
        /// The image's size in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub image_size: Option<u64>,
        /// The recording device (for people; replay does not use it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub device: Option<RecordedDevice>,
        #[serde(default)]
        pub config: RecordedConfig,
        pub args: RecordedArgs,
        pub ranges: Vec<RecordedRange>,
    }

    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
    pub struct RecordedDevice {
        pub plugin: String,
        pub triple: String,
        pub uid: String,
    }

    /// The launch configuration; absent values are the defaults (1 group
    /// of 1, no dynamic group memory, no trip count).
    #[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
    pub struct RecordedConfig {
        #[serde(default)]
        pub num_groups: Option<Vec<u32>>,
        #[serde(default)]
        pub group_size: Option<Vec<u32>>,
        #[serde(default)]
        pub dyn_group_memory: Option<u32>,
        #[serde(default)]
        pub tripcount: Option<u64>,
    }

    /// `{"words": [...]}` (OpenMP convention) or `{"packed": "hex",
    /// "size": N}` (one parameter block); words win when both are given.
    #[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
    pub struct RecordedArgs {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub words: Option<Vec<u64>>,
        /// The block as lowercase hex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub packed: Option<String>,
        /// The block's size in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub size: Option<u64>,
    }

    impl From<KernelArgs<'_>> for RecordedArgs {
        fn from(args: KernelArgs<'_>) -> Self {
            match args {
                KernelArgs::Words(w) => RecordedArgs {
                    words: Some(w.to_vec()),
                    ..Default::default()
                },
                KernelArgs::Packed(p) => RecordedArgs {
                    packed: Some(p.iter().map(|b| format!("{b:02x}")).collect()),
                    size: Some(p.len() as u64),
                    ..Default::default()
                },
            }
        }
    }

    /// A live range of the device's allocation index at launch time.
    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
    #[serde(expecting = "an object")]
    pub struct RecordedRange {
        pub base: u64,
        pub size: u64,
        pub origin: RangeOrigin,
        /// The global's name (program globals).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub name: Option<String>,
        /// False when the device refused the read (no data files).
        pub recorded: bool,
    }

    #[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
    #[serde(rename_all = "lowercase")]
    pub enum RangeOrigin {
        Alloc,
        Global,
        Registered,
    }

    impl Manifest {
        /// Parses `launch.json`. The error names the field at fault
        /// (`config.group_size[0]: ...`) and says what it is and should be.
        pub fn from_json(bytes: &[u8]) -> std::result::Result<Manifest, String> {
            let de = &mut serde_json::Deserializer::from_slice(bytes);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                // serde's "invalid type: X, expected Y" as "X is not Y".
                let text = inner.to_string();
                let text = match text.strip_prefix("invalid type: ") {
                    Some(rest) => rest.replacen(", expected ", " is not ", 1),
                    None => text,
                };
                match path.as_str() {
                    "." => text,
                    _ => format!("{path}: {text}{}", context(&path)),
                }
            })
        }

        /// The manifest as written by the recorder.
        pub fn to_json(&self) -> String {
            serde_json::to_string_pretty(self).expect("a manifest serializes")
        }
    }

    /// What a field of the manifest is, for error messages.
    fn context(path: &str) -> &'static str {
        if path.starts_with("args") {
            " (the kernel's arguments: args.words or args.packed)"
        } else {
            ""
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "record")]
    #[test]
    fn manifests_round_trip_and_name_bad_fields() {
        use super::*;
        let m = Manifest {
            format: FORMAT_VERSION,
            kernel: "k\"\n".into(),
            image: Some("image.bin".into()),
            image_size: Some(10),
            device: None,
            config: RecordedConfig {
                num_groups: Some(vec![4, 1, 1]),
                group_size: Some(vec![u32::MAX, 1, 1]),
                dyn_group_memory: Some(0),
                tripcount: Some(7),
            },
            args: RecordedArgs::from(KernelArgs::Packed(&[0, 0xab, 0x10])),
            ranges: vec![RecordedRange {
                base: 4096,
                size: 8,
                origin: RangeOrigin::Global,
                name: Some("g".into()),
                recorded: true,
            }],
        };
        assert_eq!(m.args.packed.as_deref(), Some("00ab10"));
        assert_eq!(Manifest::from_json(m.to_json().as_bytes()).unwrap(), m);
        let mut v: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        v["config"]["group_size"][0] = (1u64 << 32).into();
        let e = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(e.starts_with("config.group_size[0]: "), "{e}");
        v["config"]["group_size"] = serde_json::Value::Null;
        v["ranges"][0] = "r".into();
        let e = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(
            e.contains("ranges[0]: string \"r\" is not an object"),
            "{e}"
        );
        v["ranges"] = serde_json::json!([]);
        v["args"]["packed"] = 7.into();
        let e = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(
            e.starts_with("args.packed: ") && e.contains("arguments"),
            "{e}"
        );
    }

    #[test]
    fn without_the_feature_recording_is_refused_by_name() {
        let e = super::feature_missing("saxpy", std::path::Path::new("/tmp/rec"));
        assert_eq!(e.code(), super::ErrorCode::Unsupported);
        let m = e.to_string();
        assert!(
            m.contains("recording needs the `record` feature of offload-core"),
            "{m}"
        );
        assert!(m.contains("saxpy") && m.contains("/tmp/rec"), "{m}");
    }
}
