/* ICVs, per-thread data environments, __kmpc_alloc_shared and dynamic
 * shared memory.
 *
 * The team's ICVs live in shared memory. A thread gets its own copy (an
 * RtlDataEnv) only when it enters a data environment of its own: a
 * serialised parallel region, an explicit task, or an ICV change inside an
 * active region. The per-thread list heads sit in a heap array that the
 * first such thread allocates, so kernels that never need one pay a single
 * shared pointer. */
#include "state.h"

enum {
  /* The generic-mode main thread's stack for __kmpc_alloc_shared: the
   * variables it shares with the workers of its parallel regions. */
  MAIN_STACK_BYTES = 2048,
  STACK_ALIGN = 16,
  OMP_SCHED_STATIC = 1,
};

typedef struct StateTeam {
  RtlIcvs icv;
  RtlDataEnv **envs; /* per hardware thread id: innermost environment */
  uint32_t stack_top; /* bytes of main_stack in use */
  uint32_t departed;  /* SPMD: threads that left once envs existed */
} StateTeam;

/* Marks the list-head array while one thread allocates it. */
#define HEADS_BEING_MADE ((RtlDataEnv **)1)

static RTL_SHARED StateTeam state_team;
/* Per hardware thread: 1 while the thread has a data environment of its
 * own (its list head is not NULL). Only its own thread touches it, with
 * plain accesses, so the checks of one parallel region fold into the first
 * one: an SPMD kernel asks "environment?" several times per distribute
 * chunk (the region's entry, the loop schedule's thread number and count,
 * the region's exit), and the answer is almost always no. */
static RTL_SHARED uint8_t has_env[RTL_MAX_THREADS];
static RTL_SHARED __attribute__((aligned(STACK_ALIGN))) unsigned char main_stack[MAIN_STACK_BYTES];

static StateTeam *team(void) { return RTL_TEAM_PTR(StateTeam, state_team); }
static unsigned char *stack_base(void) { return (unsigned char *)main_stack; }

/* The list heads' memory. On NVIDIA GPUs the CUDA driver's malloc: the
 * device heap's allocator, inlined into every kernel that may make the
 * heads (any with a parallel region), raised their register count to its
 * own (56 instead of 36 per thread for a STREAM triad, 72 instead of 57
 * for a reduction: fewer resident blocks), while the driver's malloc is a
 * call of a fixed, small footprint. */
#if defined(__NVPTX__)
void *malloc(__SIZE_TYPE__ bytes);
void free(void *ptr);
static void *heads_alloc(uint64_t bytes) { return malloc(bytes); }
static void heads_free(void *ptr) { free(ptr); }
#else
static void *heads_alloc(uint64_t bytes) { return rtl_heap_alloc(bytes); }
static void heads_free(void *ptr) { rtl_heap_free(ptr); }
#endif

void rtl_state_init(void) {
  StateTeam *t = team();
  t->icv.nthreads = 0;
  t->icv.run_sched = OMP_SCHED_STATIC;
  t->icv.run_chunk = 0;
  t->icv.max_active_levels = 1;
  t->envs = NULL;
  t->stack_top = 0;
  t->departed = 0;
}

void rtl_state_fini(void) {
  StateTeam *t = team();
  /* Ordered after every use by a barrier (generic) or the count (SPMD). */
  RtlDataEnv **envs = __atomic_load_n(&t->envs, RTL_BLOCK_ORDER(__ATOMIC_ACQUIRE));
  if (envs && envs != HEADS_BEING_MADE) {
    t->envs = NULL;
    heads_free(envs);
  }
}

/* SPMD threads leave without a barrier. While no thread has made the list
 * heads (the common case: no serialised region, task or ICV change inside
 * a region) there is nothing to free and a thread just goes. Once they
 * exist, every thread that sees them counts itself out and the last one
 * frees them. Every thread does see them when they were made inside a
 * parallel region (its closing barrier orders that before the rest of the
 * kernel) or in sequential code that every thread runs (each thread then
 * used them itself). Only heads first made in sequential code that some
 * threads skip, after the last region (nothing clang or OpenMPOpt emit for
 * SPMD kernels), would let threads leave uncounted: the heads then leak
 * (block size x 8 bytes of device heap), nothing worse. */
void rtl_state_leave_spmd(void) {
  StateTeam *t = team();
  if (!__atomic_load_n(&t->envs, __ATOMIC_RELAXED))
    return;
  plat_fence_block(); /* this thread's use of its list before the count */
  uint32_t before = __scoped_atomic_fetch_add(&t->departed, 1u,
                                              RTL_BLOCK_ORDER(__ATOMIC_ACQ_REL),
                                              __MEMORY_SCOPE_WRKGRP);
  if (before + 1 != plat_block_size())
    return;
  plat_fence_block(); /* every other thread's use before the free */
  rtl_state_fini();
}

/* --- data environments ------------------------------------------------- */

static RtlDataEnv **make_env_heads(void) {
  uint32_t count = plat_block_size();
  RtlDataEnv **heads = heads_alloc((uint64_t)count * sizeof(*heads));
  if (!heads)
    rtl_fatal("device heap exhausted (per-thread data environments)");
  for (uint32_t i = 0; i < count; i++)
    heads[i] = NULL;
  return heads;
}

/* The per-thread list heads, made on first use. One thread of the team makes
 * them; others that need them meanwhile wait, one lane per warp so that no
 * lane waits on its own warp. */
static RtlDataEnv **env_heads(bool create) {
  RtlDataEnv ***where = &team()->envs;
  /* Every omp_get_thread_num() and the like gets here: while no thread of
   * the team has a data environment (the common case) this is one relaxed
   * load, and the acquire (a block fence) is paid only once heads exist. */
  RtlDataEnv **heads = __atomic_load_n(where, RTL_BLOCK_ORDER(__ATOMIC_ACQUIRE));
  if ((uintptr_t)heads > (uintptr_t)HEADS_BEING_MADE) {
    if (RTL_DEVICE_TARGET)
      plat_fence_block();
    return heads;
  }
  if (!create)
    return NULL;
  uint64_t lanes = rtl_arriving_lanes();
  if (rtl_is_lowest_lane(lanes)) {
    RtlDataEnv **expected = NULL;
    if (__scoped_atomic_compare_exchange_n(where, &expected, HEADS_BEING_MADE, false,
                                           RTL_BLOCK_ORDER(__ATOMIC_ACQUIRE),
                                           RTL_BLOCK_ORDER(__ATOMIC_ACQUIRE),
                                           __MEMORY_SCOPE_WRKGRP)) {
      RtlDataEnv **made = make_env_heads();
      plat_fence_block(); /* the NULL entries before the pointer */
      __scoped_atomic_store_n(where, made, RTL_BLOCK_ORDER(__ATOMIC_RELEASE),
                              __MEMORY_SCOPE_WRKGRP);
    } else {
      while (__scoped_atomic_load_n(where, RTL_BLOCK_ORDER(__ATOMIC_ACQUIRE),
                                    __MEMORY_SCOPE_WRKGRP) == HEADS_BEING_MADE)
        plat_yield();
    }
  }
  rtl_sync_lanes(lanes);
  heads = __atomic_load_n(where, RTL_BLOCK_ORDER(__ATOMIC_ACQUIRE));
  plat_fence_block();
  return heads;
}

void rtl_state_init_thread(void) { has_env[plat_thread_id()] = 0; }

bool rtl_thread_has_env(void) { return has_env[plat_thread_id()]; }

RtlDataEnv *rtl_env_top(void) {
  if (!has_env[plat_thread_id()])
    return NULL;
  RtlDataEnv **heads = env_heads(false);
  return heads ? heads[plat_thread_id()] : NULL;
}

RtlIcvs rtl_team_icvs(void) {
  RtlIcvs *icv = &team()->icv;
  RtlIcvs copy = {
      .nthreads = rtl_load32(&icv->nthreads),
      .run_sched = rtl_load32(&icv->run_sched),
      .run_chunk = (int32_t)rtl_load32((uint32_t *)&icv->run_chunk),
      .max_active_levels = rtl_load32(&icv->max_active_levels),
  };
  return copy;
}

void rtl_env_push(RtlDataEnv *env, uint32_t kind) {
  RtlDataEnv *current = rtl_env_top();
  if (current) {
    *env = *current;
  } else {
    env->icv = rtl_team_icvs();
    env->level = rtl_level();
    env->active_level = rtl_active_level();
    env->thread_num = rtl_thread_num();
    env->num_threads = rtl_num_threads();
  }
  env->kind = kind;
  env->on_heap = 0;
  env->prev = current;
  env_heads(true)[plat_thread_id()] = env;
  has_env[plat_thread_id()] = 1;
}

static void drop_heap_envs_until(RtlDataEnv **head, RtlDataEnv *stop) {
  while (*head && *head != stop) {
    RtlDataEnv *env = *head;
    *head = env->prev;
    if (env->on_heap)
      rtl_heap_free(env);
  }
}

void rtl_env_pop(RtlDataEnv *env) {
  RtlDataEnv **head = &env_heads(true)[plat_thread_id()];
  drop_heap_envs_until(head, env);
  *head = env->prev;
  has_env[plat_thread_id()] = env->prev != NULL;
}

void rtl_env_reset_thread(void) {
  if (!has_env[plat_thread_id()])
    return;
  RtlDataEnv **heads = env_heads(false);
  if (heads)
    drop_heap_envs_until(&heads[plat_thread_id()], NULL);
  has_env[plat_thread_id()] = 0;
}

/* --- ICVs ---------------------------------------------------------------- */

RtlIcvs rtl_icvs(void) {
  RtlDataEnv *env = rtl_env_top();
  return env ? env->icv : rtl_team_icvs();
}

/* Where an ICV change goes: the thread's own environment, or NULL for the
 * team's (the sequential part of the kernel). A thread of an active region
 * gets a copy so that its change stays its own and ends with the region. */
static RtlIcvs *icvs_for_write(void) {
  RtlDataEnv *env = rtl_env_top();
  if (env)
    return &env->icv;
  if (rtl_team_level() == 0)
    return NULL;
  env = rtl_heap_alloc(sizeof(*env));
  if (!env)
    rtl_fatal("device heap exhausted (ICV copy)");
  rtl_env_push(env, RTL_ENV_ICV);
  env->on_heap = 1;
  return &env->icv;
}

void rtl_set_nthreads(uint32_t n) {
  RtlIcvs *own = icvs_for_write();
  if (own)
    own->nthreads = n;
  else
    rtl_store32(&team()->icv.nthreads, n);
}

void rtl_set_schedule(uint32_t kind, int32_t chunk) {
  RtlIcvs *own = icvs_for_write();
  if (own) {
    own->run_sched = kind;
    own->run_chunk = chunk;
  } else {
    rtl_store32(&team()->icv.run_sched, kind);
    rtl_store32((uint32_t *)&team()->icv.run_chunk, (uint32_t)chunk);
  }
}

void rtl_set_max_active_levels(uint32_t levels) {
  RtlIcvs *own = icvs_for_write();
  if (own)
    own->max_active_levels = levels;
  else
    rtl_store32(&team()->icv.max_active_levels, levels);
}

void rtl_run_schedule(uint32_t *kind, int32_t *chunk) {
  RtlIcvs icv = rtl_icvs();
  *kind = icv.run_sched;
  *chunk = icv.run_chunk;
}

/* --- __kmpc_alloc_shared ------------------------------------------------- */

/* Only the generic-mode main thread uses the shared stack: its globalised
 * variables are the ones workers read. Everyone else, and the main thread
 * once the stack is full, allocates from the device heap. */
void *rtl_alloc_shared(uint64_t bytes) {
  uint64_t size = (bytes + STACK_ALIGN - 1) & ~(uint64_t)(STACK_ALIGN - 1);
  if (rtl_is_main_thread()) {
    StateTeam *t = team();
    if (size <= MAIN_STACK_BYTES - t->stack_top) {
      void *ptr = stack_base() + t->stack_top;
      t->stack_top += (uint32_t)size;
      return ptr;
    }
  }
  void *ptr = rtl_heap_alloc(size ? size : STACK_ALIGN);
  if (!ptr)
    rtl_fatal("__kmpc_alloc_shared: device heap exhausted");
  return ptr;
}

void rtl_free_shared(void *ptr, uint64_t bytes) {
  uintptr_t offset = (uintptr_t)ptr - (uintptr_t)stack_base();
  if (offset < MAIN_STACK_BYTES) {
    /* LIFO: freeing a block frees everything above it too. */
    team()->stack_top = (uint32_t)offset;
    return;
  }
  rtl_heap_free(ptr);
}

RTL_EXPORT void *__kmpc_alloc_shared(uint64_t bytes) { return rtl_alloc_shared(bytes); }

RTL_EXPORT void __kmpc_free_shared(void *ptr, uint64_t bytes) { rtl_free_shared(ptr, bytes); }

/* --- dynamic shared memory ----------------------------------------------- */

RTL_EXPORT void *__kmpc_get_dynamic_shared(void) { return plat_dyn_shared(); }
RTL_EXPORT void *llvm_omp_target_dynamic_shared_alloc(void) { return plat_dyn_shared(); }
RTL_EXPORT void *llvm_omp_get_dynamic_shared(void) { return plat_dyn_shared(); }
