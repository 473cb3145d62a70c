/* Reductions: within a parallel region (warps, then across warps) and across
 * the teams of a kernel (through the host-allocated reduction buffer), plus
 * the shuffles clang's generated callbacks call.
 *
 * clang generates, per reduction, the callbacks this file drives:
 *   shfl(data, lane, offset, algo): fetch the value `offset` lanes down
 *     (with __kmpc_shuffle_*) and, depending on `algo`,
 *       0 (full group)       every lane combines it into its own;
 *       1 (contiguous group) lanes below `offset` combine, the others take
 *                            the fetched value as theirs (so an odd element
 *                            moves into the half that is still live);
 *       2 (dispersed lanes)  even logical lanes combine (not used here: a
 *                            parallel region's threads are always lanes
 *                            0..k-1 of its warps).
 *   cpy(data, nwarps): lane 0 of each warp stores its value to shared
 *     scratch, barrier, thread w < nwarps loads warp w's value (it calls
 *     __kmpc_barrier, so every thread of the region must call it).
 *   lgcpy/lgred(buffer, slot, data): store / combine data into a slot.
 *   glcpy/glred(buffer, slot, data): load / combine a slot into data.
 *
 * Team-shared state: the lane mask each warp's group is shuffling over
 * (red_warp_mask), written by every lane of the group before its first
 * shuffle (group_begin).
 */
#include "rtl.h"

RTL_SHARED static uint64_t red_warp_mask[RTL_MAX_THREADS / 32];

static uint64_t low_lanes(uint32_t n) { return n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1); }

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------------ */
/* Shuffles                                                                  */
/* ------------------------------------------------------------------------ */

/* Lanes the caller's warp shuffles over: the group set by group_begin; a
 * caller outside a reduction (whose lane is not in it) falls back to the
 * live lanes of its warp. */
static uint64_t shuffle_mask(void) {
  uint32_t w = plat_warp_size(), tid = plat_thread_id();
#if RTL_DEVICE_TARGET
  uint64_t m = red_warp_mask[tid / w];
#else
  uint64_t m = __atomic_load_n(&red_warp_mask[tid / w], __ATOMIC_RELAXED);
#endif
  if (!((m >> (tid % w)) & 1))
    m = plat_active_mask();
  return m;
}

/* Deferred reductions (below) call clang's shuffle-and-reduce callback with
 * these offsets; real offsets are below the warp size. */
enum { OFFSET_FOLD = 0x7ffd, OFFSET_STASH = 0x7ffe, LANE_STASH = 0x7fff };

static uint64_t stash_word(uint64_t val, int16_t delta);

RTL_EXPORT RTL_CONVERGENT int32_t __kmpc_shuffle_int32(int32_t val, int16_t delta, int16_t size) {
  if (delta == OFFSET_FOLD || delta == OFFSET_STASH)
    return (int32_t)(uint32_t)stash_word((uint32_t)val, delta);
  return plat_shfl_down_i32(shuffle_mask(), val, (uint32_t)(uint16_t)delta,
                            (uint32_t)(uint16_t)size);
}

RTL_EXPORT RTL_CONVERGENT int64_t __kmpc_shuffle_int64(int64_t val, int16_t delta, int16_t size) {
  if (delta == OFFSET_FOLD || delta == OFFSET_STASH)
    return (int64_t)stash_word((uint64_t)val, delta);
  uint64_t mask = shuffle_mask();
  uint32_t d = (uint32_t)(uint16_t)delta, w = (uint32_t)(uint16_t)size;
  uint32_t lo = (uint32_t)plat_shfl_down_i32(mask, (int32_t)(uint32_t)val, d, w);
  uint32_t hi = (uint32_t)plat_shfl_down_i32(mask, (int32_t)(uint32_t)((uint64_t)val >> 32), d, w);
  return (int64_t)(((uint64_t)hi << 32) | lo);
}

/* ------------------------------------------------------------------------ */
/* Groups of lanes                                                           */
/* ------------------------------------------------------------------------ */

/* Every lane of `mask` (lanes 0..k-1 of the caller's warp) calls this
 * before shuffling together, so that __kmpc_shuffle_* names exactly them.
 * Every lane stores the same mask and reads back its own store, so no warp
 * sync is needed to publish it, and on GPUs (plain accesses) the optimiser
 * forwards the store to the shuffles' reads: the mask stays in a register
 * (a reduction runs once per distribute chunk of clang's combined
 * constructs). The emulation uses relaxed atomics: same protocol, and
 * ThreadSanitizer does not report the equal-value stores. */
RTL_CONVERGENT RTL_ALWAYS_INLINE static void group_begin(uint32_t lane, uint64_t mask) {
  (void)lane;
  uint64_t *slot = &red_warp_mask[plat_thread_id() / plat_warp_size()];
#if RTL_DEVICE_TARGET
  *slot = mask;
#else
  __atomic_store_n(slot, mask, __ATOMIC_RELAXED);
#endif
}

/* Combine the values of lanes 0..size-1 into lane 0. Every lane of the
 * group calls it, also lanes >= size (their values are only passed along). */
RTL_CONVERGENT RTL_ALWAYS_INLINE static void group_reduce(void *data, ShuffleReductFnTy shfl, uint32_t size,
                                        uint32_t lane) {
  uint32_t w = plat_warp_size();
  if (size == w) {
    for (uint32_t off = w / 2; off > 0; off /= 2)
      shfl(data, (int16_t)lane, (int16_t)off, 0);
    return;
  }
  /* Halve the live prefix each round, rounding up: lanes below half take
   * their partner's value, an odd last element is copied down. */
  for (uint32_t live = size; live > 1; live = (live + 1) / 2)
    shfl(data, (int16_t)lane, (int16_t)(live / 2), 1);
}

/* ------------------------------------------------------------------------ */
/* Deferred parallel reductions (SPMD composite loops)                       */
/* ------------------------------------------------------------------------ */

/* clang-22 compiles `teams distribute parallel for reduction(...)` into a
 * distribute loop of chunks of block-size iterations with one parallel
 * region per chunk, and each region ends in
 * __kmpc_nvptx_parallel_reduce_nowait_v2: a block-wide reduction per
 * iteration of each thread, more work than the loop itself. In a kernel
 * the frontend made SPMD, nothing runs between those regions (SPMD is
 * chosen only when the distribute loop's body is the parallel loop alone),
 * so nothing can read the team-level variable between chunks, and a thread
 * may carry its partial value from chunk to chunk and reduce once:
 *
 *   - __kmpc_distribute_static_init (chunked schedule) tells every thread
 *     how many chunks its team runs (rtl_reduction_distribute);
 *   - each parallel reduction then counts one chunk down. Before the last,
 *     every thread folds its value into its stash and returns 0: nobody
 *     combines. In the last, it folds its stash in and the block reduction
 *     runs as before.
 *
 * The stash is read and written through clang's own shuffle-and-reduce
 * callback, so any type and combiner work: called with OFFSET_FOLD and
 * algorithm 0 it combines what __kmpc_shuffle_* return, which is then the
 * stash; called with OFFSET_STASH, algorithm 1 and a lane above the offset
 * it copies what they return, which is then the value they were given,
 * after they stored it. Every thread of the region takes the same
 * decisions: the chunk count and the callback's words are the same in each.
 * Only regions of the whole block (<= DEFER_MAX_THREADS threads) defer, and
 * only lists of at most DEFER_WORDS shuffles; others reduce every chunk. */
enum { DEFER_MAX_THREADS = 128, DEFER_WORDS = 2 };
#define DEFER_HOLDS 0x80000000u

/* Team: whether the kernel's distribute loop defers (the per-thread state
 * below is valid) and the team's chunks, written with the same values by
 * every thread. */
typedef struct DeferTeam {
  uint64_t first, last;
  int64_t stride;
  uint32_t defer, is_signed;
} DeferTeam;
RTL_SHARED static DeferTeam red_defer_team;
/* Per thread, touched only by its own thread: chunks left in the team's
 * distribute loop (DEFER_UNCOUNTED until its first reduction counts them),
 * and DEFER_HOLDS when the stash holds a value. */
RTL_SHARED static uint32_t red_defer_state[DEFER_MAX_THREADS];
RTL_SHARED static uint8_t red_stash_cursor[DEFER_MAX_THREADS];
RTL_SHARED static uint64_t red_stash[DEFER_WORDS][DEFER_MAX_THREADS];
#define DEFER_UNCOUNTED 0x7fffffffu

#if RTL_DEVICE_TARGET
#define TEAM_STORE(field, v) (red_defer_team.field = (v))
#define TEAM_LOAD(field) (red_defer_team.field)
#else
#define TEAM_STORE(field, v) __atomic_store_n(&red_defer_team.field, (v), __ATOMIC_RELAXED)
#define TEAM_LOAD(field) __atomic_load_n(&red_defer_team.field, __ATOMIC_RELAXED)
#endif

void rtl_reduction_init_team(void) { TEAM_STORE(defer, 0u); }

void rtl_reduction_distribute(bool has_chunk, uint64_t first, uint64_t last, int64_t stride,
                              bool is_signed) {
  uint32_t tid = plat_thread_id();
  bool defer = rtl_is_frontend_spmd() && plat_block_size() <= DEFER_MAX_THREADS;
  TEAM_STORE(first, first);
  TEAM_STORE(last, last);
  TEAM_STORE(stride, stride);
  TEAM_STORE(is_signed, (uint32_t)is_signed);
  TEAM_STORE(defer, (uint32_t)defer);
  if (tid < DEFER_MAX_THREADS)
    red_defer_state[tid] = defer && has_chunk ? DEFER_UNCOUNTED : 0;
}

/* The thread's chunks left, counted on its first reduction of the loop. */
static uint32_t defer_state(uint32_t tid) {
  uint32_t state = red_defer_state[tid];
  if (state != DEFER_UNCOUNTED)
    return state;
  uint64_t chunks = rtl_loop_chunks(TEAM_LOAD(first), TEAM_LOAD(last), TEAM_LOAD(stride),
                                    TEAM_LOAD(is_signed));
  return chunks < DEFER_UNCOUNTED ? (uint32_t)chunks : 0;
}

/* __kmpc_shuffle_* with a reserved offset: the next word of the stash. */
static uint64_t stash_word(uint64_t val, int16_t delta) {
  uint32_t tid = plat_thread_id();
  if (tid >= DEFER_MAX_THREADS)
    rtl_fatal("reduction: a stash shuffle outside a deferred reduction");
  uint8_t word = red_stash_cursor[tid];
  if (word < UINT8_MAX)
    red_stash_cursor[tid] = word + 1;
  if (word >= DEFER_WORDS)
    return val; /* too long to keep: the caller reduces this chunk */
  if (delta == OFFSET_FOLD)
    return red_stash[word][tid];
  red_stash[word][tid] = val;
  return val;
}

/* One chunk's reduction; true when the thread's value went into its stash
 * (the caller returns 0), false when the block must reduce now (the stash,
 * if any, already folded into `data`). */
RTL_CONVERGENT RTL_ALWAYS_INLINE static bool defer_chunk(void *data, ShuffleReductFnTy shfl,
                                                         uint32_t tid) {
  uint32_t state = defer_state(tid);
  uint32_t left = state & ~DEFER_HOLDS;
  if (left)
    left--; /* this chunk */
  if (state & DEFER_HOLDS) {
    red_stash_cursor[tid] = 0;
    shfl(data, 0, OFFSET_FOLD, 0);
  }
  if (left) {
    red_stash_cursor[tid] = 0;
    shfl(data, LANE_STASH, OFFSET_STASH, 1);
    if (red_stash_cursor[tid] <= DEFER_WORDS) {
      red_defer_state[tid] = left | DEFER_HOLDS;
      return true;
    }
  }
  red_defer_state[tid] = left;
  return false;
}

/* ------------------------------------------------------------------------ */
/* Parallel reduction                                                        */
/* ------------------------------------------------------------------------ */

RTL_EXPORT RTL_CONVERGENT RTL_ALWAYS_INLINE int32_t __kmpc_nvptx_parallel_reduce_nowait_v2(
    IdentTy *loc, uint64_t reduce_data_size, void *reduce_data, ShuffleReductFnTy shfl,
    InterWarpCopyFnTy cpy) {
  uint32_t n = rtl_num_threads();
  if (n <= 1)
    return 1;
  uint32_t tid = rtl_thread_num(), w = plat_warp_size();
  /* clang's cpy callback finds warps and lanes from the hardware id. */
  if (plat_thread_id() != tid)
    rtl_fatal("parallel reduction: OpenMP thread number differs from the hardware thread id");
  uint32_t warp = tid / w, lane = tid % w;
  if (n == plat_block_size() && TEAM_LOAD(defer) && defer_chunk(reduce_data, shfl, tid))
    return 0;

  /* 1. Within each warp; the last warp of the region may be partial. */
  uint32_t in_warp = min_u32(w, n - warp * w);
  group_begin(lane, low_lanes(in_warp));
  group_reduce(reduce_data, shfl, in_warp, lane);
  if (n <= w)
    return tid == 0;

  /* 2. Warp results to the first lanes of warp 0, and combine there. */
  uint32_t nwarps = (n + w - 1) / w;
  cpy(reduce_data, (int32_t)nwarps);
  if (warp == 0) {
    group_begin(lane, low_lanes(w));
    group_reduce(reduce_data, shfl, nwarps, lane);
  }
  return tid == 0;
}

/* ------------------------------------------------------------------------ */
/* Teams reduction                                                           */
/* ------------------------------------------------------------------------ */

static KernelLaunchEnvironmentTy *reduction_env(void) {
  KernelLaunchEnvironmentTy *env = rtl_launch_environment();
  if (!env || !env->ReductionBuffer)
    rtl_fatal("teams reduction: the host passed no reduction buffer (no kernel launch "
              "environment with ReductionBuffer)");
  return env;
}

RTL_EXPORT void *__kmpc_reduction_get_fixed_buffer(void) { return reduction_env()->ReductionBuffer; }

/* Protocol over the launch environment's counters (both 0 at launch):
 *   ReductionIterCnt: teams below IterCnt + records may write their slot
 *     (team % records); it grows by `records` each time a window of that
 *     many teams has arrived, so a slot is reused only after its previous
 *     writer has finished.
 *   ReductionCnt: arrivals so far; arrival number nteams - 1 is the last
 *     team, which has then seen every deposit.
 * Ordering is device scope: relaxed atomics between plat_fence_device()s
 * (see RTL_DEVICE_ORDER in rtl.h): a release fence before each arrival,
 * an acquire fence after reading a counter another team advanced. */
static bool deposit(KernelLaunchEnvironmentTy *env, void *buf, uint32_t records, void *data,
                    ListGlobalFnTy lgcpy, ListGlobalFnTy lgred) {
  uint32_t team = rtl_team_num(), nteams = rtl_num_teams();
  while ((uint64_t)team >=
         (uint64_t)__scoped_atomic_load_n(&env->ReductionIterCnt,
                                          RTL_DEVICE_ORDER(__ATOMIC_ACQUIRE),
                                          __MEMORY_SCOPE_DEVICE) +
             records)
    plat_yield();
  plat_fence_device(); /* acquire: the slot's previous writer */
  uint32_t slot = team % records;
  if (team < records)
    lgcpy(buf, (int)slot, data); /* first use of the slot in this launch */
  else
    lgred(buf, (int)slot, data);
  plat_fence_device(); /* release: the deposit before the arrival */
  uint32_t arrival = __scoped_atomic_fetch_add(&env->ReductionCnt, 1u,
                                               RTL_DEVICE_ORDER(__ATOMIC_ACQ_REL),
                                               __MEMORY_SCOPE_DEVICE);
  if (arrival == nteams - 1)
    return true;
  if (arrival % records == records - 1) {
    /* A window is complete: open the next. The fence passes on what this
     * arrival acquired (the window's deposits) to the teams it admits. */
    plat_fence_device();
    __scoped_atomic_store_n(&env->ReductionIterCnt, arrival + 1,
                            RTL_DEVICE_ORDER(__ATOMIC_RELEASE), __MEMORY_SCOPE_DEVICE);
  }
  return false;
}

/* Every lane that reads the buffer acquires the deposits for itself. */
static void acquire_deposits(KernelLaunchEnvironmentTy *env) {
  (void)__scoped_atomic_load_n(&env->ReductionCnt, RTL_DEVICE_ORDER(__ATOMIC_ACQUIRE),
                               __MEMORY_SCOPE_DEVICE);
  plat_fence_device();
}

/* The last team leaves the counters as the host set them, for hosts that
 * reuse a launch environment; every other team has arrived by now. Atomic
 * exchanges rather than stores: NVPTX emits read-modify-writes at device
 * scope and stores at system scope. */
static void reset_counters(KernelLaunchEnvironmentTy *env) {
  (void)__scoped_atomic_exchange_n(&env->ReductionCnt, 0u, __ATOMIC_RELAXED,
                                   __MEMORY_SCOPE_DEVICE);
  (void)__scoped_atomic_exchange_n(&env->ReductionIterCnt, 0u, __ATOMIC_RELAXED,
                                   __MEMORY_SCOPE_DEVICE);
}

/* Generic mode: only the main thread takes part; it combines alone. */
static int32_t teams_reduce_main(void *buf, uint32_t records, void *data, ListGlobalFnTy lgcpy,
                                 ListGlobalFnTy lgred, ListGlobalFnTy glcpy, ListGlobalFnTy glred) {
  KernelLaunchEnvironmentTy *env = reduction_env();
  if (!deposit(env, buf, records, data, lgcpy, lgred))
    return 0;
  acquire_deposits(env);
  uint32_t nrecs = min_u32(rtl_num_teams(), records);
  glcpy(buf, 0, data);
  for (uint32_t i = 1; i < nrecs; i++)
    glred(buf, (int)i, data);
  reset_counters(env);
  return 1;
}

/* SPMD: warp 0 takes part (thread 0 deposits); in the last team its lanes
 * each combine a strided share of the slots, then reduce across lanes. */
RTL_CONVERGENT static int32_t teams_reduce_warp0(void *buf, uint32_t records, void *data,
                                                 ShuffleReductFnTy shfl, ListGlobalFnTy lgcpy,
                                                 ListGlobalFnTy lgred, ListGlobalFnTy glcpy,
                                                 ListGlobalFnTy glred) {
  uint32_t w = plat_warp_size(), lane = plat_thread_id();
  uint32_t lanes = min_u32(w, plat_block_size());
  uint64_t mask = low_lanes(lanes);
  KernelLaunchEnvironmentTy *env = reduction_env();
  group_begin(lane, mask);
  int32_t last = 0;
  if (lane == 0)
    last = deposit(env, buf, records, data, lgcpy, lgred);
  last = plat_shfl_idx_i32(mask, last, 0, w);
  if (!last)
    return 0;
  acquire_deposits(env);
  uint32_t nrecs = min_u32(rtl_num_teams(), records);
  uint32_t active = min_u32(lanes, nrecs);
  if (lane < active) {
    glcpy(buf, (int)lane, data);
    for (uint32_t i = lane + active; i < nrecs; i += active)
      glred(buf, (int)i, data);
  }
  if (active > 1)
    group_reduce(data, shfl, active, lane);
  if (lane != 0)
    return 0;
  reset_counters(env);
  return 1;
}

RTL_EXPORT RTL_CONVERGENT int32_t __kmpc_nvptx_teams_reduce_nowait_v2(
    IdentTy *loc, void *global_buffer, uint32_t num_of_records, uint64_t reduce_data_size,
    void *reduce_data, ShuffleReductFnTy shfl, InterWarpCopyFnTy cpy, ListGlobalFnTy lgcpy,
    ListGlobalFnTy lgred, ListGlobalFnTy glcpy, ListGlobalFnTy glred) {
  bool spmd = rtl_is_spmd();
  /* Who holds the team's value: thread 0 (SPMD) or the main thread. */
  if (spmd ? plat_thread_id() >= plat_warp_size() : !rtl_is_main_thread())
    return 0;
  if (rtl_num_teams() <= 1) /* the team's value is the result */
    return spmd ? plat_thread_id() == 0 : 1;
  if (num_of_records == 0)
    rtl_fatal("teams reduction: a reduction buffer of 0 records");
  if (!spmd)
    return teams_reduce_main(global_buffer, num_of_records, reduce_data, lgcpy, lgred, glcpy,
                             glred);
  return teams_reduce_warp0(global_buffer, num_of_records, reduce_data, shfl, lgcpy, lgred, glcpy,
                            glred);
}
