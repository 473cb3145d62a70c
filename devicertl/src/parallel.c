/* Parallel regions: __kmpc_parallel_60 and the worker side of generic mode,
 * levels and thread numbering.
 *
 * At most one region per team is active (more than one thread): the first
 * level. Nested regions, regions inside explicit tasks, if(0) regions and
 * one-thread regions run serialised on the encountering thread inside a
 * data environment of its own (state.c), which is what omp_get_level() and
 * friends then read. The active region's facts live in team-shared memory:
 *
 *   SPMD     every thread calls __kmpc_parallel_60; threads below the team
 *            size run the outlined function directly, the rest wait at the
 *            region's closing barrier.
 *   generic  the main thread publishes the wrapper and the arguments and
 *            releases the workers (kernel.c's state machine or OpenMPOpt's
 *            custom one); workers 0..n-1 run the wrapper, so thread 0 of the
 *            region is worker 0, not the main thread. */
#include "parallel.h"
#include "state.h"

enum { SHARED_ARG_SLOTS = 32 };

typedef struct ParallelTeam {
  uint32_t level;        /* 1 while a region is active, else 0 */
  uint32_t active_level; /* 1 while that region has more than one thread */
  uint32_t team_size;    /* its threads (1 when none) */
  void *region_fn;       /* generic: the wrapper workers run; NULL: none */
  void **args;           /* generic: the published arguments */
  void *arg_slots[SHARED_ARG_SLOTS];
} ParallelTeam;

static RTL_SHARED ParallelTeam parallel_team;

static ParallelTeam *team(void) { return RTL_TEAM_PTR(ParallelTeam, parallel_team); }

void rtl_parallel_init(void) {
  ParallelTeam *t = team();
  t->level = 0;
  t->active_level = 0;
  t->team_size = 1;
  t->region_fn = NULL;
  t->args = NULL;
}

void rtl_parallel_end_kernel(void) { __atomic_store_n(&team()->region_fn, NULL, __ATOMIC_RELAXED); }

/* --- what a thread sees ---------------------------------------------------- */

uint32_t rtl_team_level(void) { return rtl_load32(&team()->level); }
uint32_t rtl_team_active_level(void) { return rtl_load32(&team()->active_level); }
uint32_t rtl_team_size(void) { return rtl_load32(&team()->team_size); }

uint32_t rtl_level(void) {
  RtlDataEnv *env = rtl_env_top();
  return env ? env->level : rtl_team_level();
}

uint32_t rtl_active_level(void) {
  RtlDataEnv *env = rtl_env_top();
  return env ? env->active_level : rtl_team_active_level();
}

uint32_t rtl_thread_num(void) {
  RtlDataEnv *env = rtl_env_top();
  if (env)
    return env->thread_num;
  /* Threads of the active region are numbered by hardware id (SPMD threads
   * and generic workers alike); the sequential part is thread 0. */
  return rtl_team_level() ? plat_thread_id() : 0;
}

uint32_t rtl_num_threads(void) {
  RtlDataEnv *env = rtl_env_top();
  if (env)
    return env->num_threads;
  return rtl_team_level() ? rtl_team_size() : 1;
}

uint32_t rtl_team_num(void) { return plat_block_id(); }
uint32_t rtl_num_teams(void) { return plat_num_blocks(); }

RTL_CONVERGENT void rtl_barrier(void) {
  uint32_t n = rtl_num_threads();
  if (n <= 1) {
    plat_fence_device();
    return;
  }
  if (n == plat_block_size())
    plat_sync_block();
  else if (n % plat_warp_size() == 0)
    plat_sync_block_partial(n);
  else
    rtl_counter_barrier(n);
}

/* --- running a region -------------------------------------------------------- */

static void invoke_region(void *fn, int32_t *gtid, int32_t *btid, void **args, int64_t nargs) {
  switch (nargs) {
  case 0:
    ((void (*)(int32_t *, int32_t *))fn)(gtid, btid);
    return;
    RTL_INVOKE_CASE(1); RTL_INVOKE_CASE(2); RTL_INVOKE_CASE(3); RTL_INVOKE_CASE(4);
    RTL_INVOKE_CASE(5); RTL_INVOKE_CASE(6); RTL_INVOKE_CASE(7); RTL_INVOKE_CASE(8);
    RTL_INVOKE_CASE(9); RTL_INVOKE_CASE(10); RTL_INVOKE_CASE(11); RTL_INVOKE_CASE(12);
    RTL_INVOKE_CASE(13); RTL_INVOKE_CASE(14); RTL_INVOKE_CASE(15); RTL_INVOKE_CASE(16);
    RTL_INVOKE_CASE(17); RTL_INVOKE_CASE(18); RTL_INVOKE_CASE(19); RTL_INVOKE_CASE(20);
    RTL_INVOKE_CASE(21); RTL_INVOKE_CASE(22); RTL_INVOKE_CASE(23); RTL_INVOKE_CASE(24);
    RTL_INVOKE_CASE(25); RTL_INVOKE_CASE(26); RTL_INVOKE_CASE(27); RTL_INVOKE_CASE(28);
    RTL_INVOKE_CASE(29); RTL_INVOKE_CASE(30); RTL_INVOKE_CASE(31); RTL_INVOKE_CASE(32);
  default:
    rtl_fatal("parallel region with more than 32 captured variables");
  }
}

/* Not inlined: the switch is large and one copy serves every caller. */
__attribute__((noinline)) static void run_outlined(void *fn, void **args, int64_t nargs) {
  int32_t gtid = (int32_t)plat_thread_id();
  int32_t btid = 0;
  invoke_region(fn, &gtid, &btid, args, nargs);
}

/* The region on the calling thread alone, one level deeper. */
static void run_serialised(void *fn, void **args, int64_t nargs) {
  RtlDataEnv env;
  rtl_env_push(&env, RTL_ENV_SERIAL);
  env.level += 1;
  env.thread_num = 0;
  env.num_threads = 1;
  run_outlined(fn, args, nargs);
  rtl_env_pop(&env);
}

/* Threads for an active region: the clause, else nthreads-var, at most the
 * team's. Any count works (barriers of odd sizes use the counter barrier). */
static uint32_t region_threads(int32_t clause) {
  uint32_t most = rtl_max_team_threads();
  uint32_t wanted = clause > 0 ? (uint32_t)clause : rtl_icvs().nthreads;
  return wanted && wanted < most ? wanted : most;
}

static bool must_serialise(int32_t if_expr) {
  return !if_expr || rtl_env_top() || rtl_team_level() > 0 || rtl_icvs().max_active_levels == 0;
}

static void set_region(uint32_t threads) {
  ParallelTeam *t = team();
  rtl_store32(&t->team_size, threads);
  rtl_store32(&t->active_level, threads > 1);
  rtl_store32(&t->level, 1);
}

static void clear_region(void) {
  ParallelTeam *t = team();
  rtl_store32(&t->level, 0);
  rtl_store32(&t->active_level, 0);
  rtl_store32(&t->team_size, 1);
}

/* SPMD: every thread is here. Each writes the same region facts; the first
 * barrier keeps them from changing under a thread still deciding whether to
 * serialise, the second closes the region. */
static void run_spmd(void *fn, void **args, int64_t nargs, int32_t num_threads) {
  uint32_t threads = region_threads(num_threads);
  plat_sync_block();
  set_region(threads);
  if (plat_thread_id() < threads) {
    run_outlined(fn, args, nargs);
    rtl_env_reset_thread();
  }
  plat_sync_block();
  clear_region();
}

/* Generic: only the main thread is here. Arguments go to team-shared memory
 * (its own stack is private to it). */
static void **publish_args(void **args, int64_t nargs) {
  ParallelTeam *t = team();
  void **slots = t->arg_slots;
  if (nargs > SHARED_ARG_SLOTS) {
    slots = rtl_heap_alloc((uint64_t)nargs * sizeof(void *));
    if (!slots)
      rtl_fatal("device heap exhausted (parallel region arguments)");
  }
  for (int64_t i = 0; i < nargs; i++)
    slots[i] = args[i];
  t->args = slots;
  return slots;
}

static void withdraw_args(void **slots) {
  ParallelTeam *t = team();
  if (slots != t->arg_slots)
    rtl_heap_free(slots);
  t->args = NULL;
}

static void run_generic(void *wrapper, void **args, int64_t nargs, uint32_t threads) {
  ParallelTeam *t = team();
  void **slots = publish_args(args, nargs);
  t->region_fn = wrapper;
  set_region(threads);
  plat_sync_block(); /* workers start */
  plat_sync_block(); /* workers are done */
  clear_region();
  t->region_fn = NULL;
  withdraw_args(slots);
}

RTL_EXPORT void __kmpc_parallel_60(IdentTy *ident, int32_t gtid, int32_t if_expr,
                                   int32_t num_threads, int32_t proc_bind, void *fn,
                                   void *wrapper_fn, void **args, int64_t nargs,
                                   int32_t strict) {
  if (must_serialise(if_expr)) {
    run_serialised(fn, args, nargs);
    return;
  }
  if (rtl_is_spmd()) {
    run_spmd(fn, args, nargs, num_threads);
    return;
  }
  uint32_t threads = region_threads(num_threads);
  if (threads <= 1 || !wrapper_fn) {
    run_serialised(fn, args, nargs);
    return;
  }
  run_generic(wrapper_fn, args, nargs, threads);
}

/* --- the worker side (generic mode) ---------------------------------------- */

RTL_EXPORT bool __kmpc_kernel_parallel(void **work_fn) {
  void *fn = __atomic_load_n(&team()->region_fn, __ATOMIC_RELAXED);
  *work_fn = fn;
  return fn && plat_thread_id() < rtl_team_size();
}

RTL_EXPORT void __kmpc_kernel_end_parallel(void) { rtl_env_reset_thread(); }

RTL_EXPORT void __kmpc_get_shared_variables(void ***args) { *args = team()->args; }

/* The pre-parallel_51 way of sharing arguments, still in OMPKinds.def. */
RTL_EXPORT void __kmpc_begin_sharing_variables(void ***args, uint64_t nargs) {
  ParallelTeam *t = team();
  void **slots = t->arg_slots;
  if (nargs > SHARED_ARG_SLOTS) {
    slots = rtl_heap_alloc(nargs * sizeof(void *));
    if (!slots)
      rtl_fatal("device heap exhausted (shared variables)");
  }
  t->args = slots;
  *args = slots;
}

RTL_EXPORT void __kmpc_end_sharing_variables(void) { withdraw_args(team()->args); }

/* --- serialised regions the compiler brackets itself ------------------------ */

RTL_EXPORT void __kmpc_serialized_parallel(IdentTy *ident, int32_t gtid) {
  RtlDataEnv *env = rtl_heap_alloc(sizeof(*env));
  if (!env)
    rtl_fatal("device heap exhausted (serialized parallel)");
  rtl_env_push(env, RTL_ENV_SERIAL);
  env->on_heap = 1;
  env->level += 1;
  env->thread_num = 0;
  env->num_threads = 1;
}

RTL_EXPORT void __kmpc_end_serialized_parallel(IdentTy *ident, int32_t gtid) {
  RtlDataEnv *env = rtl_env_top();
  if (!env || env->kind != RTL_ENV_SERIAL)
    rtl_fatal("__kmpc_end_serialized_parallel without __kmpc_serialized_parallel");
  rtl_env_pop(env);
  rtl_heap_free(env);
}

/* --- queries and hints ------------------------------------------------------ */

RTL_EXPORT uint16_t __kmpc_parallel_level(IdentTy *ident, int32_t gtid) {
  return (uint16_t)rtl_level();
}

RTL_EXPORT int32_t __kmpc_global_thread_num(IdentTy *ident) { return (int32_t)rtl_thread_num(); }

RTL_EXPORT uint32_t __kmpc_get_hardware_thread_id_in_block(void) { return plat_thread_id(); }
RTL_EXPORT uint32_t __kmpc_get_hardware_num_threads_in_block(void) { return plat_block_size(); }
RTL_EXPORT uint32_t __kmpc_get_hardware_num_blocks(void) { return plat_num_blocks(); }
RTL_EXPORT uint32_t __kmpc_get_warp_size(void) { return plat_warp_size(); }

/* clang passes num_threads and proc_bind to __kmpc_parallel_60 on GPUs and
 * the launch fixes the teams; these only exist for callers that push. */
RTL_EXPORT void __kmpc_push_num_threads(IdentTy *ident, int32_t gtid, int32_t num_threads) {}
RTL_EXPORT void __kmpc_push_proc_bind(IdentTy *ident, int32_t gtid, int32_t proc_bind) {}
RTL_EXPORT void __kmpc_push_num_teams(IdentTy *ident, int32_t gtid, int32_t num_teams,
                                      int32_t thread_limit) {}
