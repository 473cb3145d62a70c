//! Launch sizes of OpenMP kernels, chosen as LLVM's CUDA plugin chooses
//! them.
//!
//! An OpenMP kernel (one with a `<name>_kernel_environment` global, which
//! clang emits for every target region) gets its grid from the program's
//! `num_teams` and `thread_limit`, and where the program left them unset
//! (0 in the x dimension, as the OpenMP face passes them) from the
//! defaults of LLVM's plugins for NVPTX: 128 threads, teams enough for the
//! loop's trip count up to 3200, and one extra warp for the main thread of
//! a generic-mode kernel. Other kernels (ol* programs, `nvcc` code) launch
//! with exactly the sizes they are given.

use offload_core::plugin::LaunchConfig;

/// Threads of a warp.
pub const WARP: u32 = 32;
/// Threads per team when `thread_limit` is unset.
pub const DEFAULT_THREADS: u32 = 128;
/// Teams when `num_teams` is unset and the trip count does not say more.
pub const DEFAULT_TEAMS: u32 = 3200;
/// Most teams in one launch (before the device's own grid limit).
pub const MAX_TEAMS: u32 = 1 << 16;
/// Most threads per team (before the kernel's and device's own limits).
pub const MAX_THREADS: u32 = 1024;
/// Fewest threads per team a low-trip-count SPMD loop is given.
pub const MIN_THREADS_LOW_TRIP_COUNT: u32 = 32;

/// How an OpenMP kernel runs (its kernel environment's `ExecMode` byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    /// A main thread drives worker threads (`target teams` + nested
    /// `parallel`): one more warp than the thread limit.
    Generic,
    /// Every thread runs the region (`target teams distribute parallel for`).
    Spmd,
    /// Generic code the compiler turned into SPMD.
    GenericSpmd,
}

impl ExecMode {
    /// From the `OMPTgtExecModeFlags` byte; `None` for bare kernels.
    pub fn from_flags(flags: u8) -> Option<ExecMode> {
        match flags {
            1 => Some(ExecMode::Generic),
            2 => Some(ExecMode::Spmd),
            3 => Some(ExecMode::GenericSpmd),
            _ => None,
        }
    }
}

/// What sizes an OpenMP kernel may launch with on its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenMpKernel {
    pub mode: ExecMode,
    /// Threads per block: the kernel's, the device's and [`MAX_THREADS`].
    pub max_threads: u32,
    /// Blocks: the device's grid limit and [`MAX_TEAMS`].
    pub max_blocks: u32,
}

impl OpenMpKernel {
    /// The grid for a launch the OpenMP face asked for: `num_groups[0]`
    /// is `num_teams` and `group_size[0]` `thread_limit` (0: unset).
    pub fn resolve(&self, config: &LaunchConfig) -> LaunchConfig {
        let user_threads = config.group_size[0];
        let mut threads = match user_threads {
            0 => DEFAULT_THREADS,
            n if self.mode == ExecMode::Generic => n.saturating_add(WARP),
            n => n,
        }
        .min(self.max_threads)
        .max(1);
        let teams = config.num_groups[0];
        let blocks = if teams > 0 {
            teams.min(self.max_blocks)
        } else {
            self.default_blocks(config.tripcount, &mut threads, user_threads > 0)
        };
        LaunchConfig {
            num_groups: [blocks.max(1), 1, 1],
            group_size: [threads, 1, 1],
            ..*config
        }
    }

    /// Teams for an unset `num_teams`: from the trip count, at most
    /// [`DEFAULT_TEAMS`]; an SPMD loop too short to fill them gets fewer
    /// threads per team instead (never more than `threads`).
    fn default_blocks(&self, tripcount: u64, threads: &mut u32, threads_from_user: bool) -> u32 {
        let default = u64::from(DEFAULT_TEAMS);
        let mut from_trip_count = u64::MAX;
        if tripcount > 0 {
            if self.mode == ExecMode::Spmd {
                let min_threads = MIN_THREADS_LOW_TRIP_COUNT.min(*threads);
                if threads_from_user || tripcount >= default * u64::from(*threads) {
                    // Enough parallelism for teams and threads.
                } else if tripcount >= default * u64::from(min_threads) {
                    // Enough for the teams: full warps, fewer threads.
                    let per_team = tripcount.div_ceil(default).next_power_of_two();
                    *threads = (*threads).min(per_team as u32);
                } else {
                    *threads = (*threads).min(min_threads);
                }
                from_trip_count = tripcount.div_ceil(u64::from(*threads));
            } else {
                // One team per iteration of a `distribute` loop.
                from_trip_count = tripcount;
            }
        }
        // Long loops reuse teams rather than start more.
        let preferred = from_trip_count.min(default);
        preferred.min(u64::from(self.max_blocks)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(mode: ExecMode) -> OpenMpKernel {
        OpenMpKernel {
            mode,
            max_threads: 1024,
            max_blocks: MAX_TEAMS,
        }
    }

    fn omp(teams: u32, threads: u32, tripcount: u64) -> LaunchConfig {
        LaunchConfig {
            num_groups: [teams, 1, 1],
            group_size: [threads, 1, 1],
            dyn_group_memory: 16,
            tripcount,
        }
    }

    fn grid(k: OpenMpKernel, c: LaunchConfig) -> (u32, u32) {
        let r = k.resolve(&c);
        assert_eq!(
            (&r.num_groups[1..], &r.group_size[1..]),
            (&[1, 1][..], &[1, 1][..])
        );
        assert_eq!(r.dyn_group_memory, 16);
        (r.num_groups[0], r.group_size[0])
    }

    #[test]
    fn clauses_are_honoured_within_the_limits() {
        let spmd = kernel(ExecMode::Spmd);
        assert_eq!(grid(spmd, omp(8, 64, 0)), (8, 64));
        assert_eq!(grid(spmd, omp(1 << 20, 4096, 0)), (MAX_TEAMS, 1024));
        // A generic kernel's main thread gets a warp of its own.
        assert_eq!(grid(kernel(ExecMode::Generic), omp(4, 64, 0)), (4, 96));
        assert_eq!(grid(kernel(ExecMode::GenericSpmd), omp(4, 64, 0)), (4, 64));
        // The kernel's own limit.
        let small = OpenMpKernel {
            max_threads: 256,
            max_blocks: 100,
            ..spmd
        };
        assert_eq!(grid(small, omp(0, 0, 0)), (100, 128));
        assert_eq!(grid(small, omp(0, 1000, 0)), (100, 256));
    }

    #[test]
    fn unset_sizes_follow_the_trip_count() {
        let spmd = kernel(ExecMode::Spmd);
        // No loop: the default teams and threads.
        assert_eq!(grid(spmd, omp(0, 0, 0)), (DEFAULT_TEAMS, DEFAULT_THREADS));
        // A long loop: 128 threads, teams capped at the default (reused).
        assert_eq!(grid(spmd, omp(0, 0, 10_000_000)), (DEFAULT_TEAMS, 128));
        // 409 600 iterations fill 3200 teams of 128 exactly.
        assert_eq!(grid(spmd, omp(0, 0, 409_600)), (3200, 128));
        // Fewer: teams stay near the default, threads shrink to a power of
        // two of at least a warp.
        assert_eq!(grid(spmd, omp(0, 0, 200_000)), (3125, 64));
        assert_eq!(grid(spmd, omp(0, 0, 150_000)), (2344, 64));
        // Too short for the teams: a warp per team.
        assert_eq!(grid(spmd, omp(0, 0, 1000)), (32, 32));
        assert_eq!(grid(spmd, omp(0, 0, 1)), (1, 32));
        // A user thread limit is kept.
        assert_eq!(grid(spmd, omp(0, 256, 1000)), (4, 256));
        // Generic kernels: a team per distribute iteration.
        let generic = kernel(ExecMode::Generic);
        assert_eq!(grid(generic, omp(0, 0, 10)), (10, DEFAULT_THREADS));
        assert_eq!(grid(generic, omp(0, 0, 100_000)), (DEFAULT_TEAMS, 128));
    }

    #[test]
    fn exec_mode_flags() {
        assert_eq!(ExecMode::from_flags(1), Some(ExecMode::Generic));
        assert_eq!(ExecMode::from_flags(2), Some(ExecMode::Spmd));
        assert_eq!(ExecMode::from_flags(3), Some(ExecMode::GenericSpmd));
        assert_eq!(ExecMode::from_flags(0), None);
        assert_eq!(ExecMode::from_flags(9), None);
    }
}
