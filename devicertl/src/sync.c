/* Barriers, critical sections, single/master/masked, ordered, flush, warp
 * masks and the omp_*_lock routines.
 *
 * Spin locks and the counter barrier are written for two kinds of warps:
 * with independent thread scheduling (NVIDIA sm_70+, the emulation) every
 * lane acquires for itself; with lockstep wavefronts (RTL_LOCKSTEP_WARPS)
 * a lane spinning on a lock its own wavefront holds would never let the
 * holder run, so the lanes that arrive together acquire once, through their
 * lowest lane. clang's critical construct already runs the lanes of a warp
 * one at a time (CGOpenMPRuntimeGPU::emitCriticalRegion), so there the two
 * coincide. */
#include "state.h"

/* Counter barrier word: arrivals in the low half, generation in the high. */
enum { ARRIVED_MASK = 0xffffu, GENERATION_ONE = 0x10000u };

static RTL_SHARED uint32_t barrier_word;

static uint32_t *counter(void) { return RTL_TEAM_PTR(uint32_t, barrier_word); }

void rtl_sync_init(void) { __atomic_store_n(counter(), 0u, __ATOMIC_RELAXED); }

RTL_CONVERGENT void rtl_counter_barrier(uint32_t num_threads) {
  uint64_t lanes = rtl_arriving_lanes();
  plat_fence_block();
  rtl_sync_lanes(lanes);
  if (rtl_is_lowest_lane(lanes)) {
    uint32_t count = (uint32_t)__builtin_popcountll(lanes);
    /* Ordering: the block fences around this (the atomics are relaxed on
     * GPUs, see RTL_BLOCK_ORDER). The release is a read-modify-write, so it
     * continues every arrival's release sequence and a waiter that reads it
     * synchronises with all of them. */
    uint32_t old = __scoped_atomic_fetch_add(counter(), count,
                                             RTL_BLOCK_ORDER(__ATOMIC_ACQ_REL),
                                             __MEMORY_SCOPE_WRKGRP);
    uint32_t generation = old & ~ARRIVED_MASK;
    if ((old & ARRIVED_MASK) + count == num_threads) {
      /* Last in: zero the arrivals and start the next generation at once. */
      __scoped_atomic_fetch_add(counter(), GENERATION_ONE - num_threads,
                                RTL_BLOCK_ORDER(__ATOMIC_RELEASE), __MEMORY_SCOPE_WRKGRP);
    } else {
      while ((__scoped_atomic_load_n(counter(), RTL_BLOCK_ORDER(__ATOMIC_ACQUIRE),
                                     __MEMORY_SCOPE_WRKGRP) &
              ~ARRIVED_MASK) == generation)
        plat_yield();
    }
  }
  rtl_sync_lanes(lanes);
  plat_fence_block();
}

/* --- barriers ---------------------------------------------------------------- */

/* A thread with an environment of its own, or a region smaller than the
 * block. */
RTL_COLD RTL_CONVERGENT static void barrier_slow(void) {
  if (rtl_is_spmd() && rtl_level() == 0) {
    plat_sync_block();
    return;
  }
  rtl_barrier();
}

RTL_EXPORT RTL_CONVERGENT void __kmpc_barrier(IdentTy *ident, int32_t gtid) {
  /* SPMD threads outside any region all run the sequential code: a barrier
   * there is one of the whole block, as in LLVM's runtime. So is one of an
   * active region of the whole block, the common case (clang's reduction
   * callbacks call this four times per distribute chunk): decided from the
   * thread's own flags and the region's size, without its environment. */
  if (rtl_is_spmd() && !rtl_thread_has_env() &&
      (!rtl_team_level() || rtl_team_size() == plat_block_size())) {
    plat_sync_block();
    return;
  }
  barrier_slow();
}

RTL_EXPORT RTL_CONVERGENT void __kmpc_barrier_simple_spmd(IdentTy *ident, int32_t gtid) {
  plat_sync_block();
}

RTL_EXPORT RTL_CONVERGENT void __kmpc_barrier_simple_generic(IdentTy *ident, int32_t gtid) {
  plat_sync_block();
}

/* Cancellation is never activated (tasks.c), so nothing was cancelled. */
RTL_EXPORT RTL_CONVERGENT int32_t __kmpc_cancel_barrier(IdentTy *ident, int32_t gtid) {
  __kmpc_barrier(ident, gtid);
  return 0;
}

RTL_EXPORT void __kmpc_flush(IdentTy *ident) { plat_fence_device(); }

/* --- warps --------------------------------------------------------------------- */

/* The lanes clang's critical loop waits for with __kmpc_syncwarp: the active
 * ones that are in the caller's team (threads 0..n-1 of the block in an
 * active region; the caller alone in a one-thread team). Hardware already
 * answers no more than the converged lanes; the bound matters where the
 * active mask is wider (the emulation: every live lane), e.g. a team that
 * ends mid-warp while the rest of the warp waits elsewhere. */
RTL_EXPORT uint64_t __kmpc_warp_active_thread_mask(void) {
  uint32_t lane = plat_lane_id();
  uint32_t threads = rtl_num_threads();
  if (threads <= 1)
    return 1ull << lane;
  uint32_t warp_start = plat_thread_id() - lane;
  uint32_t in_team = threads - warp_start; /* > lane: the caller is in the team */
  uint64_t team_lanes = in_team >= 64 ? ~0ull : (1ull << in_team) - 1;
  return plat_active_mask() & team_lanes;
}

RTL_EXPORT RTL_CONVERGENT void __kmpc_syncwarp(uint64_t mask) { plat_sync_warp(mask); }

/* --- spin locks ------------------------------------------------------------------ */

/* The word counts the lanes holding the lock (all of one warp). Ordering is
 * device scope (RTL_DEVICE_ORDER): a fence after taking the lock, one before
 * letting it go. (NVPTX would emit the release decrement with no ordering at
 * all, and an acquire compare-exchange at system scope.) */
static bool try_take(uint32_t *word, uint32_t holders) {
  uint32_t expected = 0;
  if (!__scoped_atomic_compare_exchange_n(word, &expected, holders, false,
                                          RTL_DEVICE_ORDER(__ATOMIC_ACQUIRE), __ATOMIC_RELAXED,
                                          __MEMORY_SCOPE_DEVICE))
    return false;
  plat_fence_device();
  return true;
}

void rtl_lock_acquire(uint32_t *word) {
  uint64_t lanes = rtl_arriving_lanes();
  if (rtl_is_lowest_lane(lanes)) {
    while (!try_take(word, (uint32_t)__builtin_popcountll(lanes)))
      plat_yield();
  }
  if (lanes & (lanes - 1)) {
    plat_sync_warp(lanes);
    plat_fence_device();
  }
}

int rtl_lock_try(uint32_t *word) { return try_take(word, 1); }

void rtl_lock_release(uint32_t *word) {
  plat_fence_device();
  __scoped_atomic_fetch_sub(word, 1u, RTL_DEVICE_ORDER(__ATOMIC_RELEASE), __MEMORY_SCOPE_DEVICE);
}

/* --- critical -------------------------------------------------------------------- */

/* kmp_critical_name is int32_t[8], zero-initialised device memory; its first
 * word is the lock. */
RTL_EXPORT void __kmpc_critical(IdentTy *ident, int32_t gtid, int32_t (*name)[8]) {
  rtl_lock_acquire((uint32_t *)name);
}

RTL_EXPORT void __kmpc_end_critical(IdentTy *ident, int32_t gtid, int32_t (*name)[8]) {
  rtl_lock_release((uint32_t *)name);
}

RTL_EXPORT void __kmpc_critical_with_hint(IdentTy *ident, int32_t gtid, int32_t (*name)[8],
                                          uint32_t hint) {
  rtl_lock_acquire((uint32_t *)name);
}

/* --- single, master, masked, ordered ----------------------------------------------- */

/* Thread 0 of the innermost region runs the single region (the generic-mode
 * main thread in sequential code); clang adds the closing barrier. */
RTL_EXPORT int32_t __kmpc_single(IdentTy *ident, int32_t gtid) { return rtl_thread_num() == 0; }
RTL_EXPORT void __kmpc_end_single(IdentTy *ident, int32_t gtid) {}

RTL_EXPORT int32_t __kmpc_master(IdentTy *ident, int32_t gtid) { return rtl_thread_num() == 0; }
RTL_EXPORT void __kmpc_end_master(IdentTy *ident, int32_t gtid) {}

RTL_EXPORT int32_t __kmpc_masked(IdentTy *ident, int32_t gtid, int32_t filter) {
  return rtl_thread_num() == (uint32_t)filter;
}
RTL_EXPORT void __kmpc_end_masked(IdentTy *ident, int32_t gtid) {}

/* Ordered regions are not ordered: like LLVM's device runtime, the body runs
 * when reached (see README). */
RTL_EXPORT void __kmpc_ordered(IdentTy *ident, int32_t gtid) {}
RTL_EXPORT void __kmpc_end_ordered(IdentTy *ident, int32_t gtid) {}

/* --- omp locks ----------------------------------------------------------------------- */

/* omp_lock_t and omp_nest_lock_t are one pointer (8 bytes) in LLVM's omp.h:
 * a simple lock uses its first word; a nestable one stores the owner
 * (global thread id + 1) and the nesting count. */
typedef struct NestLock {
  uint32_t owner;
  uint32_t count;
} NestLock;

typedef struct { void *opaque; } omp_lock_t;
typedef struct { void *opaque; } omp_nest_lock_t;

_Static_assert(sizeof(NestLock) <= sizeof(omp_nest_lock_t), "nest lock fits omp_nest_lock_t");

RTL_EXPORT void omp_init_lock(omp_lock_t *lock) {
  __atomic_store_n((uint32_t *)lock, 0u, __ATOMIC_RELAXED);
}
RTL_EXPORT void omp_destroy_lock(omp_lock_t *lock) {
  __atomic_store_n((uint32_t *)lock, 0u, __ATOMIC_RELAXED);
}
RTL_EXPORT void omp_set_lock(omp_lock_t *lock) { rtl_lock_acquire((uint32_t *)lock); }
RTL_EXPORT void omp_unset_lock(omp_lock_t *lock) { rtl_lock_release((uint32_t *)lock); }
RTL_EXPORT int omp_test_lock(omp_lock_t *lock) { return rtl_lock_try((uint32_t *)lock); }

static uint32_t my_owner_id(void) {
  return plat_block_id() * plat_block_size() + plat_thread_id() + 1;
}

RTL_EXPORT void omp_init_nest_lock(omp_nest_lock_t *lock) {
  NestLock *l = (NestLock *)lock;
  __atomic_store_n(&l->owner, 0u, __ATOMIC_RELAXED);
  l->count = 0;
}

RTL_EXPORT void omp_destroy_nest_lock(omp_nest_lock_t *lock) { omp_init_nest_lock(lock); }

static bool take_nest(NestLock *l, uint32_t me) {
  uint32_t expected = 0;
  if (!__scoped_atomic_compare_exchange_n(&l->owner, &expected, me, false,
                                          RTL_DEVICE_ORDER(__ATOMIC_ACQUIRE), __ATOMIC_RELAXED,
                                          __MEMORY_SCOPE_DEVICE))
    return false;
  plat_fence_device();
  l->count = 1;
  return true;
}

/* Nestable locks are taken per thread: on lockstep wavefronts two lanes of
 * one wavefront must not contend for the same one (see README). */
RTL_EXPORT void omp_set_nest_lock(omp_nest_lock_t *lock) {
  NestLock *l = (NestLock *)lock;
  uint32_t me = my_owner_id();
  if (__atomic_load_n(&l->owner, __ATOMIC_RELAXED) == me) {
    l->count++;
    return;
  }
  while (!take_nest(l, me))
    plat_yield();
}

RTL_EXPORT void omp_unset_nest_lock(omp_nest_lock_t *lock) {
  NestLock *l = (NestLock *)lock;
  if (--l->count == 0) {
    plat_fence_device();
    /* An exchange, not a store: NVPTX emits it at device scope. */
    (void)__scoped_atomic_exchange_n(&l->owner, 0u, RTL_DEVICE_ORDER(__ATOMIC_RELEASE),
                                     __MEMORY_SCOPE_DEVICE);
  }
}

RTL_EXPORT int omp_test_nest_lock(omp_nest_lock_t *lock) {
  NestLock *l = (NestLock *)lock;
  uint32_t me = my_owner_id();
  if (__atomic_load_n(&l->owner, __ATOMIC_RELAXED) == me)
    return (int)++l->count;
  return take_nest(l, me) ? 1 : 0;
}

/* --- ompx block synchronisation ------------------------------------------------- */

RTL_EXPORT RTL_CONVERGENT void ompx_sync_block(int ordering) { plat_sync_block(); }
RTL_EXPORT RTL_CONVERGENT void ompx_sync_block_acq_rel(void) { plat_sync_block(); }
RTL_EXPORT RTL_CONVERGENT void ompx_sync_block_divergent(int ordering) { plat_sync_block(); }
