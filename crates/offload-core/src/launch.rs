//! Launch sizes of OpenMP kernels, chosen once for every plugin as LLVM's
//! generic plugin layer chooses them.
//!
//! The OpenMP face passes the program's `num_teams` and `thread_limit` as
//! they are, 0 in x where a clause was left unset. A plugin whose kernels
//! are OpenMP target regions with launch rules (a GPU: clang emits a
//! `<name>_kernel_environment` global for each) describes them with
//! [`OpenMpKernel`] (usually [`OpenMpKernel::from_environment`], from the
//! kernel environment [`crate::openmp_env`] parses): the execution mode,
//! the device's grid values within the kernel's own thread bounds, and its
//! teams-reduction buffer. The
//! core's `launch` then turns the request into the grid the plugin
//! launches ([`OpenMpKernel::resolve`]), with the user's tuning variables
//! ([`LaunchTuning`]), so every GPU plugin gets the same rules, the
//! `LIBOMPTARGET_INFO` launch line shows what actually launched, and a
//! plugin only ever sees final sizes. Kernels without a description (host,
//! ol* programs, `nvcc` code) launch with exactly the sizes they are given.
//!
//! One rule departs from LLVM on purpose: when the plugin can say how many
//! teams of a size the device runs at once
//! ([`crate::plugin::Kernel::resident_groups`]), a long SPMD loop gets that
//! many teams of [`GridValues::long_loop_threads`] threads
//! ([`OpenMpKernel::resolve_with`]).

use crate::plugin::LaunchConfig;

/// How an OpenMP kernel runs (its kernel environment's `ExecMode` byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    /// `ompx_bare`: launched with exactly the sizes the program gives, in
    /// three dimensions, without the device runtime's set-up.
    Bare,
    /// A main thread drives worker threads (`target teams` + nested
    /// `parallel`): one more warp than the thread limit.
    Generic,
    /// Every thread runs the region (`target teams distribute parallel for`).
    Spmd,
    /// Generic code the compiler turned into SPMD.
    GenericSpmd,
}

impl ExecMode {
    /// From the `OMPTgtExecModeFlags` byte; `None` for a value LLVM 22
    /// does not define.
    pub fn from_flags(flags: u8) -> Option<ExecMode> {
        match flags {
            0 => Some(ExecMode::Bare),
            1 => Some(ExecMode::Generic),
            2 => Some(ExecMode::Spmd),
            3 => Some(ExecMode::GenericSpmd),
            _ => None,
        }
    }

    /// The name LLVM's `LIBOMPTARGET_INFO` launch line uses.
    pub fn llvm_name(self) -> &'static str {
        match self {
            ExecMode::Bare => "BARE",
            ExecMode::Generic => "Generic",
            ExecMode::Spmd => "SPMD",
            ExecMode::GenericSpmd => "Generic-SPMD",
        }
    }
}

/// A device's launch geometry for OpenMP kernels (LLVM's "grid values").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridValues {
    /// Threads of a warp (wavefront).
    pub warp_size: u32,
    /// Threads per team when `thread_limit` is unset.
    pub default_threads: u32,
    /// Threads per team of a long SPMD loop that reuses teams, when
    /// `thread_limit` is unset and the plugin knows how many teams of that
    /// size the device runs at once ([`OpenMpKernel::resolve_with`]).
    pub long_loop_threads: u32,
    /// Teams when `num_teams` is unset and the trip count does not say more.
    pub default_teams: u32,
    /// Most threads per team: the device's, and the kernel's own limit.
    pub max_threads: u32,
    /// Most teams in one launch.
    pub max_teams: u32,
}

impl GridValues {
    /// NVIDIA GPUs, as LLVM's NVPTX grid values (before the device's and
    /// the kernel's own limits lower `max_threads`/`max_teams`).
    pub const NVPTX: GridValues = GridValues {
        warp_size: 32,
        default_threads: 128,
        // clang deals a composite loop out in chunks of 128 iterations (the
        // default team size it assumes); teams of 64 run two iterations
        // per thread per chunk, halving the runtime's work per iteration:
        // STREAM triad 3.75 -> 4.02 TB/s on an H200 (BENCHMARKS.md).
        long_loop_threads: 64,
        default_teams: 3200,
        max_threads: 1024,
        max_teams: 1 << 16,
    };

    /// AMD GPUs (wave64), as LLVM's AMDGPU grid values. No long-loop
    /// tuning has been measured on them: long loops keep the default.
    pub const AMDGPU: GridValues = GridValues {
        warp_size: 64,
        default_threads: 256,
        long_loop_threads: 256,
        default_teams: 440,
        max_threads: 1024,
        max_teams: 1 << 16,
    };
}

/// What [`OpenMpKernel::fit_resident`] needs to know of a launch.
struct Long {
    tripcount: u64,
    threads_from_user: bool,
    max_threads: u32,
    max_teams: u32,
    dyn_group_memory: u32,
}

/// What a plugin says about one OpenMP kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenMpKernel {
    pub mode: ExecMode,
    /// The device's grid values within this kernel's own bounds.
    pub grid: GridValues,
    /// Bytes of the teams-reduction buffer each launch needs (None: no
    /// teams reduction; launches pass no launch environment).
    pub reduction_buffer: Option<u64>,
}

impl OpenMpKernel {
    /// The launch rules of a kernel with environment `env` on a device of
    /// grid values `device` (already lowered to the kernel's
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` or equivalent), as LLVM's
    /// `GenericKernelTy::init` derives them: the environment's
    /// `MaxThreads` (> 0; `thread_limit`, `ompx_attribute` launch bounds,
    /// clang's default of 128) caps every launch, its `MinThreads` (> 0)
    /// raises the default thread count.
    pub fn from_environment(
        env: &crate::openmp_env::KernelEnvironment,
        device: GridValues,
    ) -> OpenMpKernel {
        let positive = |v: i32| u32::try_from(v).ok().filter(|&v| v > 0);
        let mut grid = device;
        if let Some(max) = positive(env.max_threads) {
            grid.max_threads = grid.max_threads.min(max);
        }
        if let Some(min) = positive(env.min_threads) {
            grid.default_threads = grid.default_threads.max(min);
            grid.long_loop_threads = grid.long_loop_threads.max(min);
        }
        OpenMpKernel {
            mode: env.mode,
            grid,
            reduction_buffer: env.reduction_buffer_bytes(),
        }
    }
}

/// The user's launch tuning variables, read once ([`crate::Config`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchTuning {
    /// `OMP_NUM_TEAMS`: most teams of any launch (> 0).
    pub max_teams: Option<u32>,
    /// `OMP_TEAMS_THREAD_LIMIT`: most threads of any team (> 0).
    pub max_threads: Option<u32>,
    /// `LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT` (default 32): fewest
    /// threads per team a short SPMD loop is given.
    pub min_threads_low_trip_count: u32,
    /// `LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT` (default true): a
    /// long loop reuses the default number of teams rather than starting
    /// one per chunk of iterations.
    pub reuse_blocks_high_trip_count: bool,
    /// `LIBOMPTARGET_SHARED_MEMORY_SIZE` (default 0): dynamic shared memory
    /// every OpenMP kernel launch gets at least.
    pub min_dyn_group_memory: u32,
}

impl Default for LaunchTuning {
    fn default() -> Self {
        LaunchTuning {
            max_teams: None,
            max_threads: None,
            min_threads_low_trip_count: 32,
            reuse_blocks_high_trip_count: true,
            min_dyn_group_memory: 0,
        }
    }
}

impl OpenMpKernel {
    /// The grid for a launch the OpenMP face asked for: `num_groups[0]`
    /// is `num_teams` and `group_size[0]` `thread_limit` (0: unset).
    pub fn resolve(&self, tuning: &LaunchTuning, config: &LaunchConfig) -> LaunchConfig {
        self.resolve_with(tuning, config, &|_, _| None)
    }

    /// [`OpenMpKernel::resolve`] knowing how many teams of a size the
    /// device runs at once (`resident(threads, dyn_group_memory)`, from
    /// the plugin's occupancy calculator): a long SPMD loop that reuses
    /// teams gets exactly that many, of `long_loop_threads` threads unless
    /// `thread_limit` says otherwise. Every team then stays resident from
    /// start to end with an equal share of the chunks; a grid that
    /// overflows the device by a few teams makes them run a whole second
    /// round alone (LLVM's 3200 teams of 128 threads on an H200, 1584 at
    /// a time: STREAM triad 3.07 TB/s against 3.71 with 1584 teams).
    pub fn resolve_with(
        &self,
        tuning: &LaunchTuning,
        config: &LaunchConfig,
        resident: &dyn Fn(u32, u32) -> Option<u32>,
    ) -> LaunchConfig {
        let dyn_group_memory = config.dyn_group_memory.max(tuning.min_dyn_group_memory);
        if self.mode == ExecMode::Bare {
            // As given, in every dimension (the plugin checks the limits).
            return LaunchConfig {
                dyn_group_memory,
                ..*config
            };
        }
        let g = &self.grid;
        let max_threads = g.max_threads.min(tuning.max_threads.unwrap_or(u32::MAX));
        let max_teams = g.max_teams.min(tuning.max_teams.unwrap_or(u32::MAX));
        let user_threads = config.group_size[0];
        let mut threads = match user_threads {
            0 => g.default_threads,
            n if self.mode == ExecMode::Generic => n.saturating_add(g.warp_size),
            n => n,
        }
        .min(max_threads)
        .max(1);
        let teams = config.num_groups[0];
        let blocks = if teams > 0 {
            teams.min(max_teams)
        } else {
            let from_user = user_threads > 0;
            let blocks = self.default_blocks(tuning, config.tripcount, &mut threads, from_user);
            let long = Long {
                tripcount: config.tripcount,
                threads_from_user: from_user,
                max_threads,
                max_teams,
                dyn_group_memory,
            };
            self.fit_resident(tuning, &long, blocks, &mut threads, resident)
                .min(max_teams)
        };
        LaunchConfig {
            num_groups: [blocks.max(1), 1, 1],
            group_size: [threads, 1, 1],
            dyn_group_memory,
            ..*config
        }
    }

    /// Teams for an unset `num_teams`: from the trip count, at most the
    /// default (unless long loops may start more); an SPMD loop too short
    /// to fill them gets fewer threads per team instead (never more than
    /// `threads`).
    fn default_blocks(
        &self,
        tuning: &LaunchTuning,
        tripcount: u64,
        threads: &mut u32,
        threads_from_user: bool,
    ) -> u32 {
        let default = u64::from(self.grid.default_teams);
        let mut from_trip_count = u64::MAX;
        if tripcount > 0 {
            if self.mode == ExecMode::Spmd {
                let min_threads = tuning.min_threads_low_trip_count.clamp(1, *threads);
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
        // Long loops reuse teams rather than start more (as LLVM, without
        // reuse and without a trip count this is the team limit).
        let preferred = if tuning.reuse_blocks_high_trip_count {
            from_trip_count.min(default)
        } else {
            from_trip_count
        };
        preferred.min(u64::from(u32::MAX)) as u32
    }

    /// A long SPMD loop's teams and threads: as many teams as the device
    /// runs at once, of `long_loop_threads` threads (or, when the loop is
    /// too short to fill the device with those, of `threads`), when the
    /// loop needs at least that many teams, teams may be reused and no
    /// team limit is lower; else `blocks` and `threads` as they are.
    fn fit_resident(
        &self,
        tuning: &LaunchTuning,
        long: &Long,
        blocks: u32,
        threads: &mut u32,
        resident: &dyn Fn(u32, u32) -> Option<u32>,
    ) -> u32 {
        if self.mode != ExecMode::Spmd
            || long.tripcount == 0
            || !tuning.reuse_blocks_high_trip_count
        {
            return blocks;
        }
        let preferred = if long.threads_from_user {
            *threads
        } else {
            self.grid.long_loop_threads.min(long.max_threads).max(1)
        };
        for size in [preferred, *threads] {
            // clang's chunks are the team size it assumed (the default),
            // whatever size launches: teams past the chunks would idle.
            let chunk = size.max(self.grid.default_threads);
            let wanted = long.tripcount.div_ceil(u64::from(chunk));
            if let Some(r) = resident(size, long.dyn_group_memory) {
                if r > 0 && r <= long.max_teams && wanted >= u64::from(r) {
                    *threads = size;
                    return r;
                }
            }
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_TEAMS: u32 = GridValues::NVPTX.default_teams;
    const DEFAULT_THREADS: u32 = GridValues::NVPTX.default_threads;
    const MAX_TEAMS: u32 = GridValues::NVPTX.max_teams;

    fn kernel(mode: ExecMode) -> OpenMpKernel {
        OpenMpKernel {
            mode,
            grid: GridValues::NVPTX,
            reduction_buffer: None,
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

    fn grid_with(k: OpenMpKernel, tuning: &LaunchTuning, c: LaunchConfig) -> (u32, u32) {
        let r = k.resolve(tuning, &c);
        assert_eq!(
            (&r.num_groups[1..], &r.group_size[1..]),
            (&[1, 1][..], &[1, 1][..])
        );
        assert_eq!(r.tripcount, c.tripcount);
        (r.num_groups[0], r.group_size[0])
    }

    fn grid(k: OpenMpKernel, c: LaunchConfig) -> (u32, u32) {
        grid_with(k, &LaunchTuning::default(), c)
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
            grid: GridValues {
                max_threads: 256,
                max_teams: 100,
                ..GridValues::NVPTX
            },
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
        // Too short for the teams: a warp per team (LLVM's lit test
        // `kernel_launch_low_trip_count`: 128 iterations, [4,1,1] x [32,1,1]).
        assert_eq!(grid(spmd, omp(0, 0, 128)), (4, 32));
        assert_eq!(grid(spmd, omp(0, 0, 129)), (5, 32));
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
    fn long_spmd_loops_get_the_teams_the_device_runs_at_once() {
        let spmd = kernel(ExecMode::Spmd);
        let tuning = LaunchTuning::default();
        // 12 blocks of 128 threads per SM on 132 SMs; 25 of 64 (or 32).
        let resident = |threads: u32, dyn_memory: u32| {
            assert_eq!(dyn_memory, 16);
            Some(132 * if threads == 128 { 12 } else { 25 })
        };
        let with = |k: OpenMpKernel, t: &LaunchTuning, c: LaunchConfig| {
            let r = k.resolve_with(t, &c, &resident);
            (r.num_groups[0], r.group_size[0])
        };
        // 2^27 iterations: one round of resident teams of 64 threads, not
        // LLVM's 3200 of 128.
        assert_eq!(with(spmd, &tuning, omp(0, 0, 1 << 27)), (3300, 64));
        // A chunk of clang's 128 iterations for every one of 3300 teams.
        assert_eq!(with(spmd, &tuning, omp(0, 0, 3300 * 128)), (3300, 64));
        // Too short for 3300 teams but enough for 1584 of 128.
        assert_eq!(with(spmd, &tuning, omp(0, 0, 3299 * 128)), (1584, 128));
        // Shorter loops keep LLVM's smaller teams (all of them fit).
        assert_eq!(with(spmd, &tuning, omp(0, 0, 1000)), (32, 32));
        // thread_limit and OMP_TEAMS_THREAD_LIMIT are kept.
        assert_eq!(with(spmd, &tuning, omp(0, 128, 1 << 27)), (1584, 128));
        let limited = LaunchTuning {
            max_threads: Some(32),
            ..tuning
        };
        assert_eq!(with(spmd, &limited, omp(0, 0, 1 << 27)), (3300, 32));
        // A kernel whose MinThreads is above 64 keeps its teams' size.
        let min_threads = OpenMpKernel {
            grid: GridValues {
                default_threads: 128,
                long_loop_threads: 128,
                ..GridValues::NVPTX
            },
            ..spmd
        };
        assert_eq!(with(min_threads, &tuning, omp(0, 0, 1 << 27)), (1584, 128));
        // Clauses, no trip count, generic kernels and reuse off: as before.
        assert_eq!(with(spmd, &tuning, omp(100, 0, 1 << 27)), (100, 128));
        assert_eq!(with(spmd, &tuning, omp(0, 0, 0)), (DEFAULT_TEAMS, 128));
        let generic = kernel(ExecMode::Generic);
        assert_eq!(
            with(generic, &tuning, omp(0, 0, 1 << 27)),
            (DEFAULT_TEAMS, 128)
        );
        let no_reuse = LaunchTuning {
            reuse_blocks_high_trip_count: false,
            ..tuning
        };
        assert_eq!(with(spmd, &no_reuse, omp(0, 0, 1 << 20)), (8192, 128));
        // OMP_NUM_TEAMS still caps.
        let capped = LaunchTuning {
            max_teams: Some(1000),
            ..tuning
        };
        assert_eq!(with(spmd, &capped, omp(0, 0, 1 << 27)), (1000, 128));
        // An occupancy calculator that knows nothing changes nothing.
        let r = spmd.resolve_with(&tuning, &omp(0, 0, 1 << 27), &|_, _| None);
        assert_eq!(r.num_groups[0], DEFAULT_TEAMS);
    }

    #[test]
    fn tuning_variables_change_the_grid_as_llvms_do() {
        let spmd = kernel(ExecMode::Spmd);
        // LIBOMPTARGET_MIN_THREADS_FOR_LOW_TRIP_COUNT=8 (LLVM's lit test:
        // 128 iterations become [16,1,1] x [8,1,1]).
        let eight = LaunchTuning {
            min_threads_low_trip_count: 8,
            ..Default::default()
        };
        assert_eq!(grid_with(spmd, &eight, omp(0, 0, 128)), (16, 8));
        assert_eq!(grid_with(spmd, &eight, omp(0, 0, 129)), (17, 8));
        // OMP_TEAMS_THREAD_LIMIT lowers defaults and clauses alike.
        let limit = LaunchTuning {
            max_threads: Some(64),
            ..Default::default()
        };
        assert_eq!(grid_with(spmd, &limit, omp(0, 0, 0)), (DEFAULT_TEAMS, 64));
        assert_eq!(grid_with(spmd, &limit, omp(2, 512, 0)), (2, 64));
        // OMP_NUM_TEAMS caps teams, asked for or not.
        let teams = LaunchTuning {
            max_teams: Some(10),
            ..Default::default()
        };
        assert_eq!(grid_with(spmd, &teams, omp(0, 0, 0)), (10, 128));
        assert_eq!(grid_with(spmd, &teams, omp(50, 0, 0)), (10, 128));
        // Without block reuse a long loop gets a team per 128 iterations.
        let no_reuse = LaunchTuning {
            reuse_blocks_high_trip_count: false,
            ..Default::default()
        };
        assert_eq!(
            grid_with(spmd, &no_reuse, omp(0, 0, 1_280_000)),
            (10_000, 128)
        );
        assert_eq!(grid(spmd, omp(0, 0, 1_280_000)), (DEFAULT_TEAMS, 128));
        assert_eq!(grid_with(spmd, &no_reuse, omp(0, 0, 0)), (MAX_TEAMS, 128));
        // LIBOMPTARGET_SHARED_MEMORY_SIZE is a floor for dynamic memory.
        let shared = LaunchTuning {
            min_dyn_group_memory: 1024,
            ..Default::default()
        };
        assert_eq!(spmd.resolve(&shared, &omp(1, 1, 0)).dyn_group_memory, 1024);
        assert_eq!(
            spmd.resolve(&LaunchTuning::default(), &omp(1, 1, 0))
                .dyn_group_memory,
            16
        );
    }

    fn environment(
        mode: u8,
        min_threads: i32,
        max_threads: i32,
        reduction: [i32; 2],
    ) -> OpenMpKernel {
        let mut b = [0u8; 48];
        b[2] = mode;
        for (at, v) in [
            (4, min_threads),
            (8, max_threads),
            (20, reduction[0]),
            (24, reduction[1]),
        ] {
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        let env = crate::openmp_env::KernelEnvironment::parse("k", &b).unwrap();
        OpenMpKernel::from_environment(&env, GridValues::NVPTX)
    }

    #[test]
    fn kernel_environment_bounds_apply_as_in_llvm() {
        // clang's default MaxThreads of 128 caps a thread_limit asked for
        // at run time; MinThreads 1 leaves the default.
        let spmd = environment(2, 1, 128, [0, 0]);
        assert_eq!(spmd.grid.max_threads, 128);
        assert_eq!(grid(spmd, omp(0, 0, 0)), (DEFAULT_TEAMS, 128));
        assert_eq!(grid(spmd, omp(2, 512, 0)), (2, 128));
        // `thread_limit(256)` / launch_bounds(256): up to 256.
        let wide = environment(2, 1, 256, [0, 0]);
        assert_eq!(grid(wide, omp(2, 256, 0)), (2, 256));
        assert_eq!(grid(wide, omp(2, 0, 0)), (2, 128));
        // A generic kernel's extra warp stays within MaxThreads (LLVM:
        // thread_limit(64) -> 64 + 32, capped at 64).
        let generic = environment(1, 1, 64, [0, 0]);
        assert_eq!(grid(generic, omp(4, 64, 0)), (4, 64));
        // No bound (<= 0): the device's.
        let free = environment(1, -1, -1, [0, 0]);
        assert_eq!(grid(free, omp(4, 64, 0)), (4, 96));
        assert_eq!(grid(free, omp(4, 4096, 0)), (4, 1024));
        // MinThreads above the default raises it (never past MaxThreads).
        let min = environment(2, 256, 512, [0, 0]);
        assert_eq!(grid(min, omp(1, 0, 0)), (1, 256));
        let min = environment(2, 256, 192, [0, 0]);
        assert_eq!(grid(min, omp(1, 0, 0)), (1, 192));
        // OMP_TEAMS_THREAD_LIMIT still lowers it.
        let limit = LaunchTuning {
            max_threads: Some(64),
            ..Default::default()
        };
        assert_eq!(grid_with(wide, &limit, omp(2, 256, 0)), (2, 64));
        // The reduction buffer: data size x length, only with both.
        assert_eq!(
            environment(2, 1, 128, [8, 1024]).reduction_buffer,
            Some(8192)
        );
        assert_eq!(environment(2, 1, 128, [8, 0]).reduction_buffer, None);
        assert_eq!(environment(2, 1, 128, [0, 1024]).reduction_buffer, None);
    }

    #[test]
    fn bare_kernels_launch_as_given() {
        let bare = environment(0, 0, 0, [0, 0]);
        let c = LaunchConfig {
            num_groups: [4, 2, 3],
            group_size: [8, 4, 2],
            dyn_group_memory: 10,
            tripcount: 99,
        };
        let shared = LaunchTuning {
            min_dyn_group_memory: 64,
            ..Default::default()
        };
        assert_eq!(
            bare.resolve(&shared, &c),
            LaunchConfig {
                dyn_group_memory: 64,
                ..c
            }
        );
        assert_eq!(bare.resolve(&LaunchTuning::default(), &c), c);
    }

    #[test]
    fn exec_mode_flags_and_names() {
        assert_eq!(ExecMode::from_flags(1), Some(ExecMode::Generic));
        assert_eq!(ExecMode::from_flags(2), Some(ExecMode::Spmd));
        assert_eq!(ExecMode::from_flags(3), Some(ExecMode::GenericSpmd));
        assert_eq!(ExecMode::from_flags(0), Some(ExecMode::Bare));
        assert_eq!(ExecMode::from_flags(4), None);
        assert_eq!(ExecMode::from_flags(9), None);
        assert_eq!(ExecMode::Bare.llvm_name(), "BARE");
        assert_eq!(ExecMode::GenericSpmd.llvm_name(), "Generic-SPMD");
        assert_eq!(ExecMode::Spmd.llvm_name(), "SPMD");
    }
}
