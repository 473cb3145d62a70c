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

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::device::Device;
use crate::error::{Error, ErrorCode, Result};
use crate::index::{Allocation, Origin};
use crate::plugin::{KernelArgs, LaunchConfig};
use crate::program::Kernel;

/// Version of the on-disk format.
pub const FORMAT_VERSION: u32 = 1;

pub struct Recorder {
    dir: PathBuf,
    kernels: Vec<String>,
    max_bytes: u64,
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
        let max_bytes = std::env::var("OFFLOAD_RECORD_MAX_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
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
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
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
            let manifest = manifest(device, kernel, args, config, &ranges, &before, image.len());
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

/// The bytes of every range (None where the device refused the read).
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32).chars().collect(),
            c => vec![c],
        })
        .collect()
}

/// `launch.json` (see docs/record-format.md).
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
    let args = match args {
        KernelArgs::Words(w) => format!(
            "{{\"words\": [{}]}}",
            w.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        ),
        KernelArgs::Packed(p) => format!("{{\"packed\": \"{}\", \"size\": {}}}", hex(p), p.len()),
    };
    let globals = kernel.program().global_names();
    let mut out = String::new();
    let _ = writeln!(out, "{{");
    let _ = writeln!(out, "  \"format\": {FORMAT_VERSION},");
    let _ = writeln!(out, "  \"kernel\": \"{}\",", escape(kernel.name()));
    let _ = writeln!(out, "  \"image\": \"image.bin\",");
    let _ = writeln!(out, "  \"image_size\": {image_size},");
    let _ = writeln!(
        out,
        "  \"device\": {{\"plugin\": \"{}\", \"triple\": \"{}\", \"uid\": \"{}\"}},",
        escape(device.plugin_name()),
        escape(&info.triple),
        escape(&info.uid)
    );
    let _ = writeln!(
        out,
        "  \"config\": {{\"num_groups\": {:?}, \"group_size\": {:?}, \"dyn_group_memory\": {}, \"tripcount\": {}}},",
        config.num_groups, config.group_size, config.dyn_group_memory, config.tripcount
    );
    let _ = writeln!(out, "  \"args\": {args},");
    let _ = writeln!(out, "  \"ranges\": [");
    for (i, a) in ranges.iter().enumerate() {
        let origin = match a.origin {
            Origin::Alloc(_) => "alloc",
            Origin::Global => "global",
            Origin::Registered => "registered",
        };
        let name = globals
            .iter()
            .find(|(p, _)| *p == a.base)
            .map(|(_, n)| format!(", \"name\": \"{}\"", escape(n)))
            .unwrap_or_default();
        let recorded = before[i].is_some();
        let _ = writeln!(
            out,
            "    {{\"base\": {}, \"size\": {}, \"origin\": \"{origin}\"{name}, \"recorded\": {recorded}}}{}",
            a.base.0,
            a.size,
            if i + 1 < ranges.len() { "," } else { "" }
        );
    }
    let _ = writeln!(out, "  ]");
    let _ = writeln!(out, "}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_json() {
        assert_eq!(escape("a\"b\\c\n"), "a\\\"b\\\\c\\u000a");
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }
}
