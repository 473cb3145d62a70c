//! `#pragma omp requires` flags, merged over the registered binaries.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::abi::*;
use crate::msg;

/// The merged flags (0 until the first binary registers). Every reader
/// runs after `state::state()`, which registers binaries that waited.
static REQUIRES: AtomicI64 = AtomicI64::new(0);

pub fn requires() -> i64 {
    REQUIRES.load(Ordering::Relaxed)
}

pub fn usm() -> bool {
    requires() & REQ_UNIFIED_SHARED_MEMORY != 0
}

fn requires_clause(bit: i64) -> &'static str {
    match bit {
        REQ_REVERSE_OFFLOAD => "reverse_offload",
        REQ_UNIFIED_ADDRESS => "unified_address",
        REQ_UNIFIED_SHARED_MEMORY => "unified_shared_memory",
        _ => "dynamic_allocators",
    }
}

/// Merge the requires flags of one descriptor (fatal when inconsistent).
pub fn add_requires(flags: i64) {
    let old = REQUIRES.load(Ordering::Relaxed);
    if old == 0 {
        REQUIRES.store(flags, Ordering::Relaxed);
        return;
    }
    for bit in [
        REQ_REVERSE_OFFLOAD,
        REQ_UNIFIED_ADDRESS,
        REQ_UNIFIED_SHARED_MEMORY,
        REQ_DYNAMIC_ALLOCATORS,
    ] {
        if (old & bit) != (flags & bit) {
            msg::fatal(
                2,
                &format!(
                    "'#pragma omp requires {}' not used consistently!",
                    requires_clause(bit)
                ),
            );
        }
    }
}
