/* Parallel regions: __kmpc_parallel_60 and the worker side of generic mode,
 * levels and thread numbering.
 *
 * At most one region per team is active (more than one thread): the first
 * level. Nested regions, regions inside explicit tasks, if(0) regions and
 * one-thread regions run serialised on the encountering thread inside a
 * data environment of its own (state.c), which is what omp_get_level() and
 * friends then read. Whether a thread is in the active region is its own
 * byte in team-shared memory (`in_region`, indexed by hardware thread id,
 * read and written only by that thread); the region's size is one
 * team-shared word:
 *
 *   SPMD     every thread calls __kmpc_parallel_60 and stores the region's
 *            size (the same value in every thread, so no thread needs to
 *            wait for another to publish it); threads below the size mark
 *            themselves in the region and run the outlined function
 *            directly; every thread then meets at the region's one closing
 *            barrier, which also keeps the next region's store of its size
 *            from racing a thread still reading this one's.
 *   generic  the main thread publishes the wrapper, the arguments and the
 *            size and releases the workers (kernel.c's state machine or
 *            OpenMPOpt's custom one); workers 0..n-1 mark themselves in
 *            __kmpc_kernel_parallel and run the wrapper, so thread 0 of the
 *            region is worker 0, not the main thread. */
#include "parallel.h"
#include "state.h"

enum { SHARED_ARG_SLOTS = 32 };

typedef struct ParallelTeam {
  uint32_t team_size;    /* threads of the latest active region */
  void *region_fn;       /* generic: the wrapper workers run; NULL: none */
  void **args;           /* generic: the published arguments */
  void *arg_slots[SHARED_ARG_SLOTS];
} ParallelTeam;

static RTL_SHARED ParallelTeam parallel_team;
/* Per hardware thread: 1 while the thread runs the implicit task of the
 * team's active region (level 1), else 0. Only its own thread touches it. */
static RTL_SHARED uint8_t in_region[RTL_MAX_THREADS];

static ParallelTeam *team(void) { return RTL_TEAM_PTR(ParallelTeam, parallel_team); }

void rtl_parallel_init(void) {
  ParallelTeam *t = team();
  rtl_store32(&t->team_size, 1);
  t->region_fn = NULL;
  t->args = NULL;
}

void rtl_parallel_init_thread(void) { in_region[plat_thread_id()] = 0; }

static bool thread_in_region(void) { return in_region[plat_thread_id()]; }
static void enter_region(void) { in_region[plat_thread_id()] = 1; }
static void leave_region(void) { in_region[plat_thread_id()] = 0; }

void rtl_parallel_end_kernel(void) { __atomic_store_n(&team()->region_fn, NULL, __ATOMIC_RELAXED); }

/* --- what a thread sees ---------------------------------------------------- */

uint32_t rtl_team_level(void) { return thread_in_region(); }
uint32_t rtl_team_active_level(void) { return thread_in_region() && rtl_team_size() > 1; }
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
  return thread_in_region() ? plat_thread_id() : 0;
}

uint32_t rtl_num_threads(void) {
  RtlDataEnv *env = rtl_env_top();
  if (env)
    return env->num_threads;
  return thread_in_region() ? rtl_team_size() : 1;
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

RTL_ALWAYS_INLINE static void invoke_region(void *fn, int32_t *gtid, int32_t *btid, void **args, int64_t nargs) {
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

/* Inline: __kmpc_parallel_60 is inlined at its call site, where fn and
 * nargs are constants, so the switch folds to one direct call of the
 * region (which is then inlined too) and the argument array never leaves
 * registers. */
RTL_ALWAYS_INLINE static void run_outlined(void *fn, void **args, int64_t nargs) {
  int32_t gtid = (int32_t)plat_thread_id();
  int32_t btid = 0;
  invoke_region(fn, &gtid, &btid, args, nargs);
}

/* The region on the calling thread alone, one level deeper. Inline: out of
 * line, the region would be an indirect call, and a kernel with one gets
 * registers for any function it might reach (94 per thread on sm_90 against
 * 56-72 with it inline, from the linked cubin). */
RTL_ALWAYS_INLINE static void run_serialised(void *fn, void **args, int64_t nargs) {
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
static uint32_t region_threads(int32_t clause, uint32_t nthreads_var) {
  uint32_t most = rtl_max_team_threads();
  uint32_t wanted = clause > 0 ? (uint32_t)clause : nthreads_var;
  return wanted && wanted < most ? wanted : most;
}

/* SPMD: every thread is here, and every thread stores the same size before
 * it reads it, so nothing has to be published before the region starts. The
 * closing barrier ends the region (OpenMP's implicit barrier); a thread that
 * leaves it may store the next region's size at once: every thread that read
 * this one's has reached the barrier. Threads from the size on only wait at
 * the barrier; their in_region stays 0. */
RTL_ALWAYS_INLINE static void run_spmd(void *fn, void **args, int64_t nargs, uint32_t threads) {
  rtl_store32(&team()->team_size, threads);
  if (plat_thread_id() < threads) {
    enter_region();
    run_outlined(fn, args, nargs);
    rtl_env_reset_thread();
    leave_region();
  }
  plat_sync_block();
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
  rtl_store32(&t->team_size, threads);
  plat_sync_block(); /* workers start */
  plat_sync_block(); /* workers are done */
  t->region_fn = NULL;
  withdraw_args(slots);
}

RTL_EXPORT RTL_ALWAYS_INLINE void __kmpc_parallel_60(IdentTy *ident, int32_t gtid, int32_t if_expr,
                                   int32_t num_threads, int32_t proc_bind, void *fn,
                                   void *wrapper_fn, void **args, int64_t nargs,
                                   int32_t strict) {
  /* Inside the active region, a serialised one or a task, or if(0): run
   * serialised. Otherwise the thread has no data environment of its own and
   * the team's ICVs are its. */
  if (!if_expr || thread_in_region() || rtl_thread_has_env()) {
    run_serialised(fn, args, nargs);
    return;
  }
  RtlIcvs icv = rtl_team_icvs();
  if (icv.max_active_levels == 0) {
    run_serialised(fn, args, nargs);
    return;
  }
  uint32_t threads = region_threads(num_threads, icv.nthreads);
  if (rtl_is_spmd()) {
    run_spmd(fn, args, nargs, threads);
    return;
  }
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
  bool active = fn && plat_thread_id() < rtl_team_size();
  if (active)
    enter_region();
  return active;
}

/* Called by the workers that were active (both state machines). */
RTL_EXPORT void __kmpc_kernel_end_parallel(void) {
  rtl_env_reset_thread();
  leave_region();
}

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

RTL_EXPORT RTL_ALWAYS_INLINE int32_t __kmpc_global_thread_num(IdentTy *ident) { return (int32_t)rtl_thread_num(); }

RTL_EXPORT RTL_ALWAYS_INLINE uint32_t __kmpc_get_hardware_thread_id_in_block(void) { return plat_thread_id(); }
RTL_EXPORT RTL_ALWAYS_INLINE uint32_t __kmpc_get_hardware_num_threads_in_block(void) { return plat_block_size(); }
RTL_EXPORT RTL_ALWAYS_INLINE uint32_t __kmpc_get_hardware_num_blocks(void) { return plat_num_blocks(); }
RTL_EXPORT RTL_ALWAYS_INLINE uint32_t __kmpc_get_warp_size(void) { return plat_warp_size(); }

/* clang passes num_threads and proc_bind to __kmpc_parallel_60 on GPUs and
 * the launch fixes the teams; these only exist for callers that push. */
RTL_EXPORT void __kmpc_push_num_threads(IdentTy *ident, int32_t gtid, int32_t num_threads) {}
RTL_EXPORT void __kmpc_push_proc_bind(IdentTy *ident, int32_t gtid, int32_t proc_bind) {}
RTL_EXPORT void __kmpc_push_num_teams(IdentTy *ident, int32_t gtid, int32_t num_teams,
                                      int32_t thread_limit) {}
