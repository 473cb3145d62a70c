/* Internal to kernel.c, parallel.c, state.c, sync.c, tasks.c, omp_api.c:
 * per-module initialisation and the per-thread data environments. */
#ifndef OMPDEVICE_STATE_H
#define OMPDEVICE_STATE_H

#include "rtl.h"

/* Team-shared variables are reached through generic pointers so that the
 * __atomic builtins take them; the optimiser turns the accesses back into
 * shared-memory ones. */
#define RTL_TEAM_PTR(type, var) ((type *)&(var))

/* Accessors for team state that several threads may write with the same
 * value (SPMD threads all run the sequential part of a region) and that is
 * published to other threads by a block barrier, never by spinning on it.
 * On GPUs they are plain accesses: a barrier orders them (bar.sync, s_barrier
 * with its fences), and the optimiser may merge the repeated reads of one
 * barrier interval (an SPMD kernel reads the execution mode, the region's
 * size and the ICVs several times per distribute chunk; as relaxed atomics
 * each was a `ld.relaxed.sys` of its own). The emulation keeps relaxed
 * atomics so that ThreadSanitizer sees the same protocol without reporting
 * the equal-value stores. */
#if RTL_DEVICE_TARGET
static inline uint32_t rtl_load32(const uint32_t *p) { return *p; }
static inline void rtl_store32(uint32_t *p, uint32_t v) { *p = v; }
#else
static inline uint32_t rtl_load32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline void rtl_store32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
#endif

/* The lanes that act together with the caller where lanes must not wait on
 * one another: with lockstep warps the lanes executing with it (their
 * lowest lane acts for all), otherwise the caller alone (the active mask is
 * then only a hint: hardware may report lanes that are elsewhere, and the
 * emulation reports every live lane). */
static inline uint64_t rtl_arriving_lanes(void) {
  uint64_t own = 1ull << plat_lane_id();
  if (!RTL_LOCKSTEP_WARPS)
    return own;
  uint64_t mask = plat_active_mask();
  return mask & own ? mask : own;
}

/* Wait for the other lanes of `lanes` (nothing when the caller is alone). */
static inline void rtl_sync_lanes(uint64_t lanes) {
  if (lanes & (lanes - 1))
    plat_sync_warp(lanes);
}

static inline bool rtl_is_lowest_lane(uint64_t lanes) {
  return plat_lane_id() == (uint32_t)__builtin_ctzll(lanes);
}

/* The ICVs a data environment carries (OpenMP 5.2 table 2.1, the part a
 * device uses). */
typedef struct RtlIcvs {
  uint32_t nthreads;          /* nthreads-var; 0: the team's thread count */
  uint32_t run_sched;         /* run-sched-var kind (omp_sched_t) */
  int32_t run_chunk;          /* its chunk; <= 0: the kind's default */
  uint32_t max_active_levels; /* max-active-levels-var (0 or 1 here) */
} RtlIcvs;

enum RtlEnvKind {
  RTL_ENV_ICV = 0,    /* a thread of an active region changed an ICV */
  RTL_ENV_SERIAL = 1, /* a serialised (inactive) parallel region */
  RTL_ENV_TASK = 2,   /* an explicit task, run undeferred */
};

/* A data environment of one thread, innermost first. A thread has none
 * while it runs the sequential part of a kernel or the implicit task of an
 * active region unchanged: it then reads the team's state. */
typedef struct RtlDataEnv {
  RtlIcvs icv;
  uint32_t level;        /* omp_get_level() */
  uint32_t active_level; /* omp_get_active_level() */
  uint32_t thread_num;   /* omp_get_thread_num() */
  uint32_t num_threads;  /* omp_get_num_threads() */
  uint32_t kind;         /* enum RtlEnvKind */
  uint32_t on_heap;      /* state.c allocated it (RTL_ENV_ICV) */
  struct RtlDataEnv *prev;
} RtlDataEnv;

/* --- kernel.c calls these from the thread that initialises the team ---- */
void rtl_state_init(void);
void rtl_parallel_init(void);
void rtl_sync_init(void);
/* Every thread of the block, in __kmpc_target_init, before it reads team
 * state: the calling thread's own part of it. */
void rtl_parallel_init_thread(void);
void rtl_state_init_thread(void);
/* Generic __kmpc_target_deinit, once no other thread uses the team's state. */
void rtl_state_fini(void);
/* SPMD __kmpc_target_deinit, every thread: leave without waiting for the
 * others; the last to leave frees what the team allocated, if anything. */
void rtl_state_leave_spmd(void);

/* --- state.c: data environments ---------------------------------------- */
RtlDataEnv *rtl_env_top(void);
/* Whether rtl_env_top() is not NULL, from the calling thread's own flag
 * (one plain load, which the optimiser can reuse). */
bool rtl_thread_has_env(void);
/* Make `env` the calling thread's innermost environment, starting as a copy
 * of what the thread sees now. */
void rtl_env_push(RtlDataEnv *env, uint32_t kind);
/* Leave `env` (and anything a region left above it). */
void rtl_env_pop(RtlDataEnv *env);
/* End of an implicit task: drop the ICV copies its thread made. */
void rtl_env_reset_thread(void);

/* --- state.c: ICVs of the calling thread's data environment ------------ */
RtlIcvs rtl_icvs(void);
/* The team's ICVs (what a thread without a data environment of its own
 * sees). */
RtlIcvs rtl_team_icvs(void);
void rtl_set_nthreads(uint32_t n);
void rtl_set_schedule(uint32_t kind, int32_t chunk);
void rtl_set_max_active_levels(uint32_t levels);

/* --- parallel.c: the team's view, without data environments ------------ */
uint32_t rtl_team_level(void);
uint32_t rtl_team_active_level(void);
/* Threads of the team's active region (1 when none is active). */
uint32_t rtl_team_size(void);

/* Generic mode, __kmpc_target_deinit: tell the workers there is no more
 * work (they see it after the next block barrier). */
void rtl_parallel_end_kernel(void);
/* The worker side of a generic-mode region (also OpenMPOpt's custom state
 * machines call them). */
bool __kmpc_kernel_parallel(void **work_fn);
void __kmpc_kernel_end_parallel(void);

/* --- sync.c ------------------------------------------------------------- */
/* Mutual exclusion on a 32-bit word (critical, omp locks): 0 = free. */
void rtl_lock_acquire(uint32_t *word);
int rtl_lock_try(uint32_t *word);
void rtl_lock_release(uint32_t *word);

#endif
