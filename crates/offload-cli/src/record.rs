//! `offload record` and `offload replay`: kernel launches captured by the
//! core (see `offload_core::record` and docs/record-format.md) and run again
//! on any device the runtime sees.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::DevicePtr;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// Directory the launches are recorded in (created).
    #[arg(short, long, value_name = "DIR")]
    output: PathBuf,
    /// Record only launches of this kernel (repeatable; default: all).
    #[arg(long, value_name = "NAME")]
    kernel: Vec<String>,
    /// Skip launches whose device memory exceeds this many bytes.
    #[arg(long, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// The program to run and its arguments.
    #[arg(
        value_name = "PROGRAM [ARGS]",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// A recording directory (of `offload record`) or one launch in it.
    dir: PathBuf,
    /// The device to replay on (index as `offload info` lists them).
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Compare the memory after each launch with the recording; exit status
    /// 1 when any byte differs.
    #[arg(long)]
    verify: bool,
    /// Launch each recorded kernel this many times (memory restored first).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Override the recorded number of groups (teams) in x.
    #[arg(long)]
    teams: Option<u32>,
    /// Override the recorded group size (threads) in x; the number of
    /// groups follows so the recorded grid stays covered (unless --teams).
    #[arg(long)]
    threads: Option<u32>,
}

pub fn record(args: RecordArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let dir = std::fs::canonicalize(&args.output)?;
    let mut env = vec![("OFFLOAD_RECORD", dir.into_os_string())];
    if !args.kernel.is_empty() {
        env.push(("OFFLOAD_RECORD_KERNELS", args.kernel.join(",").into()));
    }
    if let Some(m) = args.max_bytes {
        env.push(("OFFLOAD_RECORD_MAX_BYTES", m.to_string().into()));
    }
    crate::exec::run_with_env(&args.command, &env)
}

/// Set when `replay` runs again with the drop-in libraries on the path
/// (OpenMP images need `libomp.so.5` and `libomptarget.so.22.1` to load).
const CHILD: &str = "OFFLOAD_REPLAY_CHILD";

pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    if std::env::var_os(CHILD).is_none() {
        let mut command: Vec<OsString> = vec![std::env::current_exe()?.into_os_string()];
        command.extend(std::env::args_os().skip(1));
        return crate::exec::run_with_env(&command, &[(CHILD, "1".into())]);
    }
    let launches = launch_dirs(&args.dir)?;
    if launches.is_empty() {
        bail!("{}: no recorded launches", args.dir.display());
    }
    let runtime = offload::runtime();
    let Some(device) = runtime.devices().get(args.device) else {
        bail!(
            "no device {} (the runtime has {})",
            args.device,
            runtime.devices().len()
        );
    };
    let mut all_match = true;
    for dir in launches {
        all_match &= replay_one(&dir, device, &args)
            .with_context(|| format!("replaying {}", dir.display()))?;
    }
    if !all_match {
        return Err(crate::ExitStatusError {
            status: 1,
            error: anyhow::anyhow!("memory after a replayed launch differs from the recording"),
        }
        .into());
    }
    Ok(())
}

/// `dir` itself when it holds one launch, else its launch directories.
fn launch_dirs(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if dir.join("launch.json").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("launch.json").is_file())
        .collect();
    out.sort();
    Ok(out)
}

/// One recorded range as replayed.
struct Range {
    old: u64,
    new: DevicePtr,
    size: usize,
    before: Vec<u8>,
    after: Option<Vec<u8>>,
    /// How it was placed (and is released).
    placed: Placement,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// At its recorded address (freed with `free_placed`).
    Kept,
    /// In a fresh allocation.
    Moved,
    /// A global of the replayed program, found by name.
    Global,
}

fn replay_one(
    dir: &Path,
    device: &std::sync::Arc<offload_core::Device>,
    args: &ReplayArgs,
) -> anyhow::Result<bool> {
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join("launch.json"))?)?;
    if manifest["format"].as_u64() != Some(offload_core::record::FORMAT_VERSION as u64) {
        bail!("unknown recording format {}", manifest["format"]);
    }
    let name = manifest["kernel"].as_str().context("no kernel name")?;
    let image = std::fs::read(dir.join(manifest["image"].as_str().unwrap_or("image.bin")))?;
    let program = device.load_program(&image)?;
    let kernel = program.kernel(name)?;

    let mut ranges = Vec::new();
    for (i, r) in manifest["ranges"]
        .as_array()
        .context("no ranges")?
        .iter()
        .enumerate()
    {
        if r["recorded"] != Value::Bool(true) {
            continue;
        }
        let old = r["base"].as_u64().context("range base")?;
        let size = r["size"].as_u64().context("range size")? as usize;
        let before = std::fs::read(dir.join(format!("r{i}.before")))?;
        let after = std::fs::read(dir.join(format!("r{i}.after"))).ok();
        let (new, placed) = match (r["origin"].as_str(), r["name"].as_str()) {
            (Some("global"), Some(g)) => (program.global(g)?.0, Placement::Global),
            _ => (DevicePtr(old), Placement::Kept),
        };
        ranges.push(Range {
            old,
            new,
            size,
            before,
            after,
            placed,
        });
    }
    // Keep the recorded addresses where the device can place memory there
    // (all of them, so pointers stored in device memory stay valid), else
    // move every range to fresh memory.
    let mut done = Vec::new();
    let mut all_kept = true;
    for r in ranges.iter().filter(|r| r.placed == Placement::Kept) {
        if device.alloc_at(r.new, r.size).is_err() {
            all_kept = false;
            break;
        }
        done.push(r.new);
    }
    if !all_kept {
        for p in done {
            let _ = device.free_placed(p);
        }
        for r in ranges.iter_mut().filter(|r| r.placed == Placement::Kept) {
            r.new = device.alloc(r.size, AllocKind::Device)?;
            r.placed = Placement::Moved;
        }
    }
    let count = |p: Placement| ranges.iter().filter(|r| r.placed == p).count();
    let (kept, relocated, globals) = (
        count(Placement::Kept),
        count(Placement::Moved),
        count(Placement::Global),
    );
    let relocate = |w: u64| {
        ranges
            .iter()
            .find(|r| w >= r.old && w < r.old + r.size as u64)
            .map_or(w, |r| r.new.0 + (w - r.old))
    };
    let words: Vec<u64>;
    let mut packed: Vec<u8>;
    let kernel_args = if let Some(w) = manifest["args"]["words"].as_array() {
        words = w
            .iter()
            .map(|v| v.as_u64().unwrap_or(0))
            .map(relocate)
            .collect();
        KernelArgs::Words(&words)
    } else {
        let hex = manifest["args"]["packed"]
            .as_str()
            .context("no arguments")?;
        packed = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
            .collect::<Result<_, _>>()?;
        for chunk in packed.chunks_exact_mut(8) {
            let w = u64::from_le_bytes(chunk.try_into().unwrap());
            chunk.copy_from_slice(&relocate(w).to_le_bytes());
        }
        KernelArgs::Packed(&packed)
    };
    let dims = |v: &Value| -> [u32; 3] {
        let a: Vec<u32> = v
            .as_array()
            .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(1) as u32).collect())
            .unwrap_or_default();
        [0, 1, 2].map(|i| a.get(i).copied().unwrap_or(1).max(1))
    };
    let mut config = LaunchConfig {
        num_groups: dims(&manifest["config"]["num_groups"]),
        group_size: dims(&manifest["config"]["group_size"]),
        dyn_group_memory: manifest["config"]["dyn_group_memory"].as_u64().unwrap_or(0) as u32,
        tripcount: manifest["config"]["tripcount"].as_u64().unwrap_or(0),
    };
    // A new group size keeps the recorded grid covered (as many groups as
    // it takes) unless the number of groups is given too.
    if let Some(t) = args.threads {
        let items = config.num_groups[0] as u64 * config.group_size[0] as u64;
        let t = t.max(1);
        config.group_size[0] = t;
        config.num_groups[0] = items.div_ceil(t as u64).clamp(1, u32::MAX as u64) as u32;
    }
    if let Some(t) = args.teams {
        config.num_groups[0] = t.max(1);
    }

    let mut times = Vec::new();
    for _ in 0..args.repeat.max(1) {
        for r in &ranges {
            // SAFETY: `before` holds `size` bytes, `new` as many on the device.
            unsafe { device.copy_to_device(r.new, r.before.as_ptr(), r.size.min(r.before.len()))? };
        }
        let t = Instant::now();
        device.launch(&kernel, kernel_args, &config)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mut matches = true;
    let mut verdict = String::new();
    if args.verify {
        for r in &ranges {
            let Some(want) = &r.after else { continue };
            let mut got = vec![0u8; r.size];
            // SAFETY: `got` holds `size` bytes.
            unsafe { device.copy_from_device(got.as_mut_ptr(), r.new, r.size)? };
            if let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) {
                matches = false;
                let n = got.iter().zip(want).filter(|(a, b)| a != b).count();
                verdict.push_str(&format!(
                    "; range {:#x} (+{}): {n} byte(s) differ, first at offset {at}",
                    r.old, r.size
                ));
            }
        }
    }
    for r in &ranges {
        let _ = match r.placed {
            Placement::Kept => device.free_placed(r.new),
            Placement::Moved => device.free(r.new),
            Placement::Global => Ok(()),
        };
    }
    let addresses = if relocated == 0 {
        "memory at the recorded addresses".to_string()
    } else {
        format!("{relocated} range(s) relocated, argument pointers adjusted (pointers stored inside device memory are not)")
    };
    println!(
        "{}: kernel {name} on device {} ({}): {} range(s) ({globals} global(s) by name; {addresses}; {kept} kept), {} launch(es), median {:.1} us{}",
        dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        args.device,
        device.info().uid,
        ranges.len(),
        times.len(),
        times[times.len() / 2],
        match (args.verify, matches) {
            (false, _) => String::new(),
            (true, true) => "; verify: OK".to_string(),
            (true, false) => format!("; verify: FAILED{verdict}"),
        }
    );
    Ok(matches)
}
