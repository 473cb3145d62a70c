//! `offload record` and `offload replay`: kernel launches captured by the
//! core (see `offload_core::record` and docs/record-format.md) and run again
//! on any device the runtime sees.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::progress::Progress;
use offload_core::plugin::{AllocKind, KernelArgs, LaunchConfig};
use offload_core::record::{Manifest, RangeOrigin, RecordedRange};
use offload_core::DevicePtr;

#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// Directory the launches are recorded in (created; an existing
    /// non-empty one is refused unless --force).
    #[arg(short, long, value_name = "DIR")]
    output: PathBuf,
    /// Record into an existing directory, deleting the recording there
    /// first (only a directory holding nothing but launch-* recordings).
    #[arg(long)]
    force: bool,
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
    crate::check_plugin_names()?;
    prepare_output(&args.output, args.force)?;
    let dir = std::fs::canonicalize(&args.output)?;
    let mut env = vec![("OFFLOAD_RECORD", dir.clone().into_os_string())];
    if !args.kernel.is_empty() {
        env.push(("OFFLOAD_RECORD_KERNELS", args.kernel.join(",").into()));
    }
    if let Some(m) = args.max_bytes {
        env.push(("OFFLOAD_RECORD_MAX_BYTES", m.to_string().into()));
    }
    let program = args.command.first().map(Path::new).unwrap_or(Path::new(""));
    let mut cmd = crate::exec::command_with_libraries(&args.command)?;
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    // The program is a child (not `exec`ed) so that its launches can be
    // counted afterwards. Like system(3), interrupts are the child's to
    // handle while it runs.
    let status = {
        let _ignore = IgnoreInterrupts::new();
        cmd.status()
    };
    let status = status.map_err(|e| crate::ExitStatusError {
        status: if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
        error: anyhow::Error::new(e).context(format!("cannot run {}", program.display())),
    })?;
    let n = launch_dirs(&dir).map(|l| l.len()).unwrap_or(0);
    eprintln!(
        "offload record: recorded {n} launch{} in {}",
        if n == 1 { "" } else { "es" },
        args.output.display()
    );
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .or_else(|| status.signal().map(|s| 128 + s))
            .unwrap_or(1);
        return Err(crate::ExitStatusError {
            status: u8::try_from(code).unwrap_or(1),
            error: anyhow::anyhow!("{} {status}", program.display()),
        }
        .into());
    }
    if n == 0 && !args.kernel.is_empty() {
        return Err(crate::ExitStatusError {
            status: 1,
            error: anyhow::anyhow!(
                "--kernel {} matched no launch of {}",
                args.kernel.join(","),
                program.display()
            ),
        }
        .into());
    }
    if n == 0 {
        eprintln!(
            "offload record: warning: {} launched no kernel through the runtime",
            program.display()
        );
    }
    Ok(())
}

/// Create `dir`, or accept an empty one; an existing recording is removed
/// with `force`, anything else refused.
fn prepare_output(dir: &Path, force: bool) -> anyhow::Result<()> {
    let entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return std::fs::create_dir_all(dir)
                .with_context(|| format!("creating {}", dir.display()));
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if entries.is_empty() {
        return Ok(());
    }
    if !force {
        bail!(
            "{} exists and is not empty: choose another directory, or --force to replace the recording there",
            dir.display()
        );
    }
    let foreign: Vec<&PathBuf> = entries
        .iter()
        .filter(|p| {
            !(p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("launch-"))
                && p.join("launch.json").is_file())
        })
        .collect();
    if let Some(f) = foreign.first() {
        bail!(
            "{} holds {} which is not a recorded launch: not removing it (--force replaces recordings only)",
            dir.display(),
            f.display()
        );
    }
    for p in entries {
        std::fs::remove_dir_all(&p).with_context(|| format!("removing {}", p.display()))?;
    }
    Ok(())
}

/// SIGINT and SIGQUIT ignored while it lives (restored on drop).
struct IgnoreInterrupts {
    old: [libc::sighandler_t; 2],
}

impl IgnoreInterrupts {
    fn new() -> Self {
        // SAFETY: SIG_IGN installs no handler, so no code of ours can run
        // in signal context; SIGINT and SIGQUIT are valid signal numbers.
        unsafe {
            IgnoreInterrupts {
                old: [
                    libc::signal(libc::SIGINT, libc::SIG_IGN),
                    libc::signal(libc::SIGQUIT, libc::SIG_IGN),
                ],
            }
        }
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        // SAFETY: reinstalls the dispositions `new` read back from
        // signal(2): whatever this process had installed before (SIG_DFL,
        // SIG_IGN or its own handler), as valid now as it was then.
        unsafe {
            libc::signal(libc::SIGINT, self.old[0]);
            libc::signal(libc::SIGQUIT, self.old[1]);
        }
    }
}

/// Set when `replay` runs again with the drop-in libraries on the path
/// (OpenMP images need `libomp.so.5` and `libomptarget.so.22.1` to load).
const CHILD: &str = "OFFLOAD_REPLAY_CHILD";

pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    if std::env::var_os(CHILD).is_none() {
        crate::check_plugin_names()?;
        let mut command: Vec<OsString> = vec![std::env::current_exe()?.into_os_string()];
        command.extend(std::env::args_os().skip(1));
        return crate::exec::run_with_env(&command, &[(CHILD, "1".into())]);
    }
    let launches = launch_dirs(&args.dir)?;
    if launches.is_empty() {
        bail!("{}: no recorded launches", args.dir.display());
    }
    let runtime = offload::internals::runtime();
    let Some(device) = runtime.devices().get(args.device) else {
        bail!(
            "no device {} (the runtime has {})",
            args.device,
            runtime.devices().len()
        );
    };
    let (total, mut differ) = (launches.len(), 0usize);
    // A bar on a terminal for more than one launch; off a terminal, count
    // lines once the replay has run for a while.
    let mut progress = Progress::counted("offload replay", "launches", total as u64, total > 1);
    for dir in launches {
        let (matched, line) = replay_one(&dir, device, &args)
            .with_context(|| format!("replaying {}", dir.display()))?;
        progress.suspend(|| println!("{line}"));
        progress.inc();
        differ += usize::from(!matched);
    }
    drop(progress);
    let all_match = differ == 0;
    eprintln!(
        "offload replay: replayed {total} launch{} on device {}{}",
        if total == 1 { "" } else { "es" },
        args.device,
        match (args.verify, differ) {
            (false, _) => String::new(),
            (true, 0) => ": all verified".to_string(),
            (true, n) => format!(": {n} differ from the recording"),
        }
    );
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

/// The largest `launch.json` read (a manifest lists ranges, not data).
const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Ranges reached only through pointers no recorded range holds (argument
/// words that look like addresses of this process but point into no
/// recorded range) are refused: the kernel would follow them into memory
/// the replay never placed. Addresses below 4 GiB or above 2^47 (user
/// space of x86_64 and AArch64) are taken for plain values.
const POINTER_LOW: u64 = 1 << 32;
const POINTER_HIGH: u64 = 1 << 47;

/// `rel`, a file named by the recording, inside the launch folder `dir`
/// (canonical): relative, no `..`, and still inside after symbolic links
/// are resolved. Read as a regular file of at most `max` bytes.
fn read_inside(dir: &Path, rel: &str, max: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    let path = Path::new(rel);
    let plain = !rel.is_empty()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain {
        bail!("{what} {rel:?}: must name a file inside the recording's folder (relative, no '..')");
    }
    let joined = dir.join(path);
    let real =
        std::fs::canonicalize(&joined).with_context(|| format!("{what} {}", joined.display()))?;
    if !real.starts_with(dir) {
        bail!(
            "{what} {rel:?}: resolves to {}, outside the recording's folder {}",
            real.display(),
            dir.display()
        );
    }
    Ok(offload_core::files::read_regular(&real, max, what)?)
}

/// `"packed"` hex: ASCII hex digits, an even number of them, not empty.
fn unhex(hex: &str) -> anyhow::Result<Vec<u8>> {
    if hex.is_empty() {
        bail!("args.packed is empty (a kernel reads its parameter block)");
    }
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("args.packed holds characters that are not hexadecimal digits");
    }
    if !hex.len().is_multiple_of(2) {
        bail!(
            "args.packed has an odd number of hex digits ({})",
            hex.len()
        );
    }
    Ok(hex
        .as_bytes()
        .chunks_exact(2)
        .map(|p| {
            let d = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
            d(p[0]) << 4 | d(p[1])
        })
        .collect())
}

/// A launch dimension triple: up to 3 values (missing ones and 0 are 1;
/// the schema already refused values that do not fit 32 bits).
fn dims(v: &Option<Vec<u32>>, what: &str) -> anyhow::Result<[u32; 3]> {
    let mut out = [1u32; 3];
    let Some(a) = v else { return Ok(out) };
    if a.len() > 3 {
        bail!("config.{what}: {} dimensions (at most 3)", a.len());
    }
    for (o, &n) in out.iter_mut().zip(a) {
        // 0 is what OpenMP launches record for "the default": 1 here.
        *o = n.max(1);
    }
    Ok(out)
}

/// One range entry of the manifest, checked.
struct RangeEntry {
    index: usize,
    old: u64,
    size: usize,
    global: Option<String>,
}

/// The recorded range `i`, checked (None: recorded without data).
fn range_entry(i: usize, r: &RecordedRange) -> anyhow::Result<Option<RangeEntry>> {
    let what = format!("ranges[{i}]");
    if !r.recorded {
        return Ok(None);
    }
    let (old, size) = (r.base, r.size);
    if old == 0 {
        bail!("{what}: base 0 is no address");
    }
    if size == 0 {
        bail!("{what}: size 0");
    }
    if old.checked_add(size).is_none() {
        bail!("{what}: base {old:#x} + size {size} wraps the address space");
    }
    let size = usize::try_from(size).with_context(|| format!("{what}: size {size} too large"))?;
    let global = match r.origin {
        RangeOrigin::Global => Some(
            r.name
                .clone()
                .filter(|n| !n.is_empty())
                .with_context(|| format!("{what}: a global range without a name"))?,
        ),
        RangeOrigin::Alloc | RangeOrigin::Registered => None,
    };
    Ok(Some(RangeEntry {
        index: i,
        old,
        size,
        global,
    }))
}

fn replay_one(
    dir: &Path,
    device: &std::sync::Arc<offload_core::Device>,
    args: &ReplayArgs,
) -> anyhow::Result<(bool, String)> {
    let dir = &std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?;
    let manifest = Manifest::from_json(&read_inside(
        dir,
        "launch.json",
        MAX_MANIFEST_BYTES,
        "manifest",
    )?)
    .map_err(anyhow::Error::msg)
    .context("launch.json")?;
    if manifest.format != offload_core::record::FORMAT_VERSION {
        bail!("unknown recording format {}", manifest.format);
    }
    let name = manifest.kernel.as_str();
    let image_name = manifest.image.as_deref().unwrap_or("image.bin");
    // The image's size as recorded, when the manifest says (the recorder
    // writes it); the image size limit otherwise.
    let image_max = manifest
        .image_size
        .unwrap_or_else(offload_core::files::max_image_bytes);
    let image = read_inside(dir, image_name, image_max, "image")?;
    if let Some(declared) = manifest.image_size {
        if image.len() as u64 != declared {
            bail!(
                "image {image_name}: {} bytes, the manifest says {declared}",
                image.len()
            );
        }
    }

    // Every range checked before anything is allocated or loaded.
    let mut entries = Vec::new();
    for (i, r) in manifest.ranges.iter().enumerate() {
        entries.extend(range_entry(i, r)?);
    }
    let mut sorted: Vec<&RangeEntry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.old);
    for w in sorted.windows(2) {
        if w[0].old + w[0].size as u64 > w[1].old {
            bail!(
                "ranges[{}] ({:#x}, {} bytes) overlaps ranges[{}] ({:#x})",
                w[0].index,
                w[0].old,
                w[0].size,
                w[1].index,
                w[1].old
            );
        }
    }
    let mut data = Vec::new();
    for e in &entries {
        // At most the declared size + 1 byte is read: a file of another
        // size is an error, whatever it is.
        let read = |suffix: &str| {
            read_inside(
                dir,
                &format!("r{}.{suffix}", e.index),
                e.size as u64,
                &format!("ranges[{}] data", e.index),
            )
        };
        let before = read("before")?;
        if before.len() != e.size {
            bail!(
                "r{}.before: {} bytes, the range is {}",
                e.index,
                before.len(),
                e.size
            );
        }
        let after = if dir.join(format!("r{}.after", e.index)).exists() {
            let a = read("after")?;
            if a.len() != e.size {
                bail!(
                    "r{}.after: {} bytes, the range is {}",
                    e.index,
                    a.len(),
                    e.size
                );
            }
            Some(a)
        } else {
            None
        };
        data.push((before, after));
    }

    // The arguments, checked the same way.
    let in_a_range = |w: u64| {
        entries
            .iter()
            .any(|e| w >= e.old && w - e.old < e.size as u64)
    };
    let check_pointer = |i: usize, w: u64| -> anyhow::Result<()> {
        if (POINTER_LOW..POINTER_HIGH).contains(&w) && w.is_multiple_of(8) && !in_a_range(w) {
            bail!(
                "argument word {i} ({w:#x}) looks like an address but points into no recorded range"
            );
        }
        Ok(())
    };
    enum Args {
        Words(Vec<u64>),
        Packed(Vec<u8>),
    }
    let recorded_args = if let Some(words) = manifest.args.words {
        for (i, &w) in words.iter().enumerate() {
            check_pointer(i, w)?;
        }
        Args::Words(words)
    } else {
        let hex = manifest
            .args
            .packed
            .as_deref()
            .context("no arguments (args.words or args.packed)")?;
        let packed = unhex(hex)?;
        if let Some(declared) = manifest.args.size {
            if declared != packed.len() as u64 {
                bail!(
                    "args.packed: {} bytes, the manifest says {declared}",
                    packed.len()
                );
            }
        }
        for (i, chunk) in packed.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            check_pointer(i, w)?;
        }
        Args::Packed(packed)
    };
    let recorded = &manifest.config;
    let mut config = LaunchConfig {
        num_groups: dims(&recorded.num_groups, "num_groups")?,
        group_size: dims(&recorded.group_size, "group_size")?,
        dyn_group_memory: recorded.dyn_group_memory.unwrap_or(0),
        tripcount: recorded.tripcount.unwrap_or(0),
    };

    let program = device.load_program(&image)?;
    let kernel = program.kernel(name)?;

    let mut ranges = Vec::new();
    for (e, (before, after)) in entries.iter().zip(data) {
        let (new, placed) = match &e.global {
            Some(g) => {
                let (ptr, real) = program.global(g)?;
                if e.size as u64 > real {
                    bail!(
                        "ranges[{}]: {} bytes recorded for global '{g}', which has {real}",
                        e.index,
                        e.size
                    );
                }
                (ptr, Placement::Global)
            }
            None => (DevicePtr(e.old), Placement::Kept),
        };
        ranges.push(Range {
            old: e.old,
            new,
            size: e.size,
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
            .find(|r| w >= r.old && w - r.old < r.size as u64)
            .map_or(w, |r| r.new.0 + (w - r.old))
    };
    let words: Vec<u64>;
    let mut packed: Vec<u8>;
    let kernel_args = match recorded_args {
        Args::Words(w) => {
            words = w.into_iter().map(relocate).collect();
            KernelArgs::Words(&words)
        }
        Args::Packed(p) => {
            packed = p;
            for chunk in packed.chunks_exact_mut(8) {
                let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                chunk.copy_from_slice(&relocate(w).to_le_bytes());
            }
            KernelArgs::Packed(&packed)
        }
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
            // SAFETY: `before` holds exactly `size` bytes (checked when
            // read), `new` as many on the device.
            unsafe { device.copy_to_device(r.new, r.before.as_ptr(), r.size)? };
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
    let line = format!(
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
    Ok((matches, line))
}
