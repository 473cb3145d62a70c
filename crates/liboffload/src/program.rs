//! Programs, symbols, kernel launches.
//!
//! `olCreateProgram` hands the bytes to the core, which unwraps containers
//! (LLVM OffloadBinary, `1OMP` metadata header) and picks an image the device
//! can run; the host plugin loads it from an in-memory copy, so the caller's
//! buffer is not referenced afterwards. The host device (type HOST) loads no
//! programs: use one of the CPU devices of platform "host" for kernels.
//!
//! Kernels receive the argument buffer as one packed block
//! (`KernelArgs::Packed`), like a CUDA parameter block; on the host plugin a
//! kernel is `void k(const void *args, const offload_host_item_t *item)`
//! called once per work item (include/offload/host_kernel.h).

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

use offload_core::plugin::{KernelArgs, LaunchConfig};

use crate::abi;
use crate::error::{check_handle, check_ptr, err, ErrorCode, OlResult};
use crate::handles::{context, Context, Device, DeviceKind, Program, Symbol, SymbolKind};
use crate::types::*;

/// olIsValidBinary.
///
/// # Safety
/// `data` is readable for `size` bytes; `valid`, when not null, is
/// writable for one bool.
pub unsafe fn is_valid_binary(
    device: ol_device_handle_t,
    data: *const c_void,
    size: usize,
    valid: *mut bool,
) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_ptr(data, "ProgData")?;
    check_ptr(valid, "Valid")?;
    let dev = ctx.device(device, "Device")?;
    let ok = match dev.core() {
        Some(core) if size > 0 => {
            // SAFETY: `data` is not null (checked above) and readable for
            // `size` bytes (our contract).
            core.is_compatible(unsafe { abi::bytes(data, size) })
        }
        _ => false,
    };
    // SAFETY: `valid` is not null (checked above) and writable (our contract).
    unsafe { abi::write(valid, ok) };
    Ok(())
}

/// olCreateProgram.
///
/// # Safety
/// `data` is readable for `size` bytes; `out`, when not null, is writable
/// for one handle.
pub unsafe fn create_program(
    device: ol_device_handle_t,
    data: *const c_void,
    size: usize,
    out: *mut ol_program_handle_t,
) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_ptr(data, "ProgData")?;
    check_ptr(out, "Program")?;
    let dev = ctx.device(device, "Device")?;
    let core = match &dev.kind {
        DeviceKind::Plugin { core, .. } => core,
        DeviceKind::Host => {
            return Err(err(
                ErrorCode::Unsupported,
                "the host device (type HOST) does not run programs; load the program on a CPU device of platform 'host'",
            ))
        }
    };
    if size == 0 {
        // The header lists no size check; an empty image is simply not a
        // valid binary (LLVM's unittests expect OL_ERRC_INVALID_BINARY).
        return Err(err(
            ErrorCode::InvalidBinary,
            "ProgDataSize is 0: an empty image is not a valid binary",
        ));
    }
    // SAFETY: `data` is not null (checked above) and readable for `size`
    // bytes (our contract); the core copies what it keeps.
    let bytes = unsafe { abi::bytes(data, size) };
    let loaded = core
        .load_program(bytes)
        .map_err(|e| e.context(format!("olCreateProgram on {}", core.label())))?;
    let h = ctx.programs.insert(Arc::new(Program {
        device: dev.index,
        core: loaded,
        symbols: Mutex::new(HashMap::new()),
    }));
    // SAFETY: `out` is not null (checked above) and writable (our contract).
    unsafe { abi::write(out, h as ol_program_handle_t) };
    Ok(())
}

pub fn destroy_program(program: ol_program_handle_t) -> OlResult {
    let ctx = context()?;
    let p = ctx.program(program)?;
    ctx.programs.remove(program as usize);
    let symbols: Vec<usize> = p
        .symbols
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain()
        .map(|(_, h)| h)
        .collect();
    for h in symbols {
        ctx.symbols.remove(h);
    }
    Ok(())
}

/// olGetSymbol.
///
/// # Safety
/// `name`, when not null, is a NUL-terminated string; `out`, when not
/// null, is writable for one handle.
pub unsafe fn get_symbol(
    program: ol_program_handle_t,
    name: *const c_char,
    kind: ol_symbol_kind_t,
    out: *mut ol_symbol_handle_t,
) -> OlResult {
    let ctx = context()?;
    check_handle(program, "Program")?;
    check_ptr(name, "Name")?;
    check_ptr(out, "Symbol")?;
    let p = ctx.program(program)?;
    // SAFETY: `name` is not null (checked above) and NUL-terminated (our
    // contract).
    let name = unsafe { abi::c_str(name) }
        .to_str()
        .map_err(|_| err(ErrorCode::InvalidArgument, "symbol name is not valid UTF-8"))?;
    if kind.name().is_none() {
        return Err(err(
            ErrorCode::InvalidEnumeration,
            format!("ol_symbol_kind_t enum '{}' is invalid", kind.0),
        ));
    }
    let mut cache = p.symbols.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&h) = cache.get(&(name.to_string(), kind.0)) {
        // SAFETY: `out` is not null (checked above) and writable (our
        // contract).
        unsafe { abi::write(out, h as ol_symbol_handle_t) };
        return Ok(());
    }
    let sym_kind = match kind {
        ol_symbol_kind_t::OL_SYMBOL_KIND_KERNEL => SymbolKind::Kernel(p.core.kernel(name)?),
        _ => {
            let (addr, size) = p.core.global(name)?;
            SymbolKind::Global {
                addr,
                size,
                program: p.core.clone(),
            }
        }
    };
    let h = ctx.symbols.insert(Arc::new(Symbol {
        device: p.device,
        program: program as usize,
        kind: sym_kind,
    }));
    cache.insert((name.to_string(), kind.0), h);
    // SAFETY: `out` is not null (checked above) and writable (our contract).
    unsafe { abi::write(out, h as ol_symbol_handle_t) };
    Ok(())
}

fn config_from(ls: &ol_kernel_launch_size_args_t) -> OlResult<LaunchConfig> {
    let dims = match ls.dimensions {
        0 => 3,
        d @ 1..=3 => d,
        d => {
            return Err(err(
                ErrorCode::InvalidArgument,
                format!("launch has {d} dimensions; at most 3 are supported"),
            ))
        }
    };
    let pick = |v: ol_dimensions_t| {
        let all = [v.x, v.y, v.z];
        [0, 1, 2].map(|i| if i < dims { all[i] } else { 1 })
    };
    let num_groups = pick(ls.num_groups);
    let group_size = pick(ls.group_size);
    if num_groups.contains(&0) || group_size.contains(&0) {
        return Err(err(
            ErrorCode::InvalidSize,
            format!("launch size has a zero dimension: NumGroups {num_groups:?}, GroupSize {group_size:?}"),
        ));
    }
    let dyn_group_memory = u32::try_from(ls.dyn_shared_memory).map_err(|_| {
        err(
            ErrorCode::OutOfResources,
            format!(
                "{} bytes of dynamic shared memory requested",
                ls.dyn_shared_memory
            ),
        )
    })?;
    Ok(LaunchConfig {
        num_groups,
        group_size,
        dyn_group_memory,
        tripcount: 0,
    })
}

/// The symbol `kernel`, checked to be a kernel of a program of `dev`; the
/// symbol keeps the kernel's program loaded.
fn kernel_symbol(
    ctx: &Context,
    dev: &Device,
    kernel: ol_symbol_handle_t,
) -> OlResult<(Arc<Symbol>, Arc<offload_core::Kernel>)> {
    let sym = ctx.symbol(kernel, "Kernel")?;
    let SymbolKind::Kernel(k) = &sym.kind else {
        return Err(err(
            ErrorCode::SymbolKind,
            format!("Kernel {kernel:p} is a global variable, not a kernel"),
        ));
    };
    if sym.device != dev.index {
        return Err(err(
            ErrorCode::InvalidDevice,
            format!(
                "kernel {kernel:p} belongs to a program of {}, not of {}",
                ctx.devices[sym.device].label(),
                dev.label()
            ),
        ));
    }
    let k = k.clone();
    Ok((sym, k))
}

/// olLaunchKernel.
///
/// # Safety
/// `args` is readable for `args_size` bytes; `launch`, when not null, is
/// readable for one `ol_kernel_launch_size_args_t`.
pub unsafe fn launch_kernel(
    queue: ol_queue_handle_t,
    device: ol_device_handle_t,
    kernel: ol_symbol_handle_t,
    args: *const c_void,
    args_size: usize,
    launch: *const ol_kernel_launch_size_args_t,
) -> OlResult {
    let ctx = context()?;
    // LLVM's order: the arguments check comes first (as in the header).
    if args_size > 0 && args.is_null() {
        return Err(err(
            ErrorCode::InvalidArgument,
            "validation failure: ArgumentsSize > 0 && ArgumentsData == NULL",
        ));
    }
    check_handle(device, "Device")?;
    check_handle(kernel, "Kernel")?;
    check_ptr(launch, "LaunchSizeArgs")?;
    let dev = ctx.device(device, "Device")?;
    let (sym, k) = kernel_symbol(ctx, dev, kernel)?;
    // SAFETY: `launch` is not null (checked above) and readable (our
    // contract).
    let config = config_from(&unsafe { abi::read(launch) })?;
    check_limits(dev, &config)?;
    // SAFETY: `args` is readable for `args_size` bytes (our contract), not
    // null when `args_size > 0` (checked above); the core copies it before
    // a queued launch returns.
    let bytes = unsafe { abi::bytes(args, args_size) };
    let DeviceKind::Plugin { core } = &dev.kind else {
        unreachable!("kernels only come from plugin devices");
    };
    if queue.is_null() {
        return core.launch(&k, KernelArgs::Packed(bytes), &config);
    }
    let q = ctx.queue(queue)?;
    if q.device != dev.index {
        return Err(err(
            ErrorCode::InvalidDevice,
            format!(
                "Queue {queue:p} belongs to {}, not to Device {device:p} ({})",
                ctx.devices[q.device].label(),
                dev.label()
            ),
        ));
    }
    // The core copies the argument buffer (the caller may reuse it as soon
    // as we return); the kernel keeps its program loaded until the launch
    // has run, even if the program is destroyed meanwhile.
    drop(sym);
    q.core.launch(&k, KernelArgs::Packed(bytes), &config)
}

/// What the device would reject when the launch runs, checked now so that
/// olLaunchKernel returns the error (as LLVM's plugins do) instead of the
/// next synchronisation.
fn check_limits(dev: &crate::handles::Device, config: &LaunchConfig) -> OlResult {
    let Some(core) = dev.core() else {
        return Ok(());
    };
    let info = core.info();
    let items = config.total_items_per_group();
    let per_dim = config
        .group_size
        .iter()
        .zip(info.max_group_size_per_dim)
        .any(|(&g, max)| max > 0 && g > max);
    if (info.max_group_size > 0 && items > info.max_group_size as u64) || per_dim {
        return Err(err(
            ErrorCode::InvalidArgument,
            format!(
                "group size {:?} exceeds {}'s limit of {} work items",
                config.group_size,
                dev.label(),
                info.max_group_size
            ),
        ));
    }
    if info.group_memory_bytes > 0 && config.dyn_group_memory as u64 > info.group_memory_bytes {
        return Err(err(
            ErrorCode::OutOfResources,
            format!(
                "{} bytes of dynamic group memory requested; {} offers {}",
                config.dyn_group_memory,
                dev.label(),
                info.group_memory_bytes
            ),
        ));
    }
    Ok(())
}

/// olCalculateOptimalOccupancy.
///
/// # Safety
/// `group_size`, when not null, is writable for one `size_t`.
pub unsafe fn optimal_occupancy(
    device: ol_device_handle_t,
    kernel: ol_symbol_handle_t,
    shared_memory: usize,
    group_size: *mut usize,
) -> OlResult {
    let ctx = context()?;
    check_handle(device, "Device")?;
    check_handle(kernel, "Kernel")?;
    check_ptr(group_size, "GroupSize")?;
    let dev = ctx.device(device, "Device")?;
    let (_sym, k) = kernel_symbol(ctx, dev, kernel)?;
    let limit = dev.core().map_or(1, |c| c.info().group_memory_bytes);
    if shared_memory as u64 > limit {
        return Err(err(
            ErrorCode::OutOfResources,
            format!(
                "{shared_memory} bytes of shared memory requested; {} offers {limit}",
                dev.label()
            ),
        ));
    }
    let n = k.preferred_group_size(shared_memory).max(1) as usize;
    // SAFETY: `group_size` is not null (checked above) and writable (our
    // contract).
    unsafe { abi::write(group_size, n) };
    Ok(())
}
