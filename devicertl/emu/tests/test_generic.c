/* Generic mode (ExecMode 1, the runtime's state machine) and generic-SPMD
 * mode (3), as clang-22 generates `target` / `target teams` regions with
 * `parallel` inside:
 *   - several parallel regions in a row, with num_threads clauses, the
 *     nthreads ICV (omp_set_num_threads), and the workers' view (thread
 *     num, num threads, level, active level, in_parallel, team num);
 *   - nested parallel (serialised: level 2, one thread, ancestor queries);
 *   - if(0) parallel (run by the main thread, inactive);
 *   - __kmpc_alloc_shared/__kmpc_free_shared as a stack shared with the
 *     workers (LIFO, 16-byte aligned, a large allocation that spills);
 *   - llvm_omp_target_dynamic_shared_alloc with dynamic shared memory;
 *   - worksharing and barriers inside a region of a partial team. */
#include "omp_shapes.h"

#define MAXR 16
#define MAXT 1024

/* What a thread saw inside a parallel region. */
typedef struct seen {
  int32_t count;                   /* threads that ran it (atomic) */
  int32_t hits[MAXT];              /* per omp thread num (atomic) */
  int32_t nthreads[MAXT];          /* omp_get_num_threads per thread */
  int32_t level, active, in_par;   /* of thread 0 */
  int32_t team;                    /* omp_get_team_num, of thread 0 */
  int32_t hw[MAXT];                /* hardware thread id per omp thread */
  int32_t bad;                     /* inconsistent views (atomic) */
} seen;

static seen *regions; /* [team][region] */
static int nregions;
static uint32_t workers, warp;

static void note(seen *s) {
  int32_t t = omp_get_thread_num();
  int32_t n = omp_get_num_threads();
  __atomic_fetch_add(&s->count, 1, __ATOMIC_RELAXED);
  if (t < 0 || t >= MAXT) {
    __atomic_fetch_add(&s->bad, 1, __ATOMIC_RELAXED);
    return;
  }
  __atomic_fetch_add(&s->hits[t], 1, __ATOMIC_RELAXED);
  s->nthreads[t] = n;
  s->hw[t] = __kmpc_get_hardware_thread_id_in_block();
  if (t == 0) {
    s->level = omp_get_level();
    s->active = omp_get_active_level();
    s->in_par = omp_in_parallel();
    s->team = omp_get_team_num();
  }
}

/* --- several regions in a row ------------------------------------------- */
static void rec_outlined(int32_t *gtid, int32_t *btid, seen *s) {
  (void)gtid;
  (void)btid;
  note(s);
}
static void rec_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  rec_outlined(&g, &btid, args[0]);
}

static const int32_t row_nt[] = {-1, 1, 5, 32, 33, 100, 2000, -1, 3};
#define NROW ((int)(sizeof row_nt / sizeof *row_nt))
static int32_t main_view_bad; /* atomic */

static void main_check_sequential(void) {
  /* The main thread between regions: the initial task of the team. */
  if (omp_get_level() != 0 || omp_get_num_threads() != 1 || omp_get_thread_num() != 0 ||
      omp_in_parallel() != 0 || omp_get_active_level() != 0)
    __atomic_fetch_add(&main_view_bad, 1, __ATOMIC_RELAXED);
}

static void scenario_rows(int32_t gtid) {
  seen *base = &regions[omp_get_team_num() * nregions];
  main_check_sequential();
  for (int r = 0; r < NROW; r++) {
    void *args[1] = {&base[r]};
    __kmpc_parallel_60(&loc, gtid, 1, row_nt[r], -1, (void *)rec_outlined, (void *)rec_wrapper,
                       args, 1, 0);
    main_check_sequential();
  }
  /* omp_set_num_threads: the next region without a clause has 4 threads;
   * a clause still wins. */
  omp_set_num_threads(4);
  void *args[1] = {&base[NROW]};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)rec_outlined, (void *)rec_wrapper, args, 1,
                     0);
  void *args2[1] = {&base[NROW + 1]};
  __kmpc_parallel_60(&loc, gtid, 1, 6, -1, (void *)rec_outlined, (void *)rec_wrapper, args2, 1,
                     0);
}

/* --- nested ---------------------------------------------------------------- */
typedef struct nest_seen {
  int32_t inner_runs;  /* atomic */
  int32_t bad;         /* atomic */
  int32_t outer_n;
} nest_seen;
static nest_seen nest;

static void inner_outlined(int32_t *gtid, int32_t *btid, int32_t *outer_tid) {
  (void)gtid;
  (void)btid;
  __atomic_fetch_add(&nest.inner_runs, 1, __ATOMIC_RELAXED);
  int bad = omp_get_level() != 2 || omp_get_num_threads() != 1 || omp_get_thread_num() != 0 ||
            omp_get_active_level() != 1 || omp_in_parallel() != 1 ||
            omp_get_ancestor_thread_num(1) != *outer_tid || omp_get_ancestor_thread_num(2) != 0 ||
            omp_get_ancestor_thread_num(0) != 0 || omp_get_team_size(1) != nest.outer_n ||
            omp_get_team_size(2) != 1 || omp_get_team_size(0) != 1 ||
            omp_get_ancestor_thread_num(3) != -1 || omp_get_team_size(3) != -1;
  if (bad) {
    __atomic_fetch_add(&nest.bad, 1, __ATOMIC_RELAXED);
    CHECK_MSG(0,
              "nested region of outer thread %d: level %d num_threads %d thread_num %d active "
              "%d in_parallel %d ancestor(1) %d team_size(1) %d (outer n %d) team_size(2) %d",
              *outer_tid, omp_get_level(), omp_get_num_threads(), omp_get_thread_num(),
              omp_get_active_level(), omp_in_parallel(), omp_get_ancestor_thread_num(1),
              omp_get_team_size(1), nest.outer_n, omp_get_team_size(2));
  }
}
static void inner_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  inner_outlined(&g, &btid, args[0]);
}

static void outer_outlined(int32_t *gtid, int32_t *btid) {
  (void)btid;
  int32_t me = omp_get_thread_num();
  if (me == 0)
    nest.outer_n = omp_get_num_threads();
  __kmpc_barrier(&loc_barrier, *gtid);
  for (int rep = 0; rep < 2; rep++) {
    void *args[1] = {&me};
    __kmpc_parallel_60(&loc, *gtid, 1, -1, -1, (void *)inner_outlined, (void *)inner_wrapper,
                       args, 1, 0);
    /* Back in the outer region. */
    if (omp_get_thread_num() != me || omp_get_level() != 1 ||
        omp_get_num_threads() != nest.outer_n)
      __atomic_fetch_add(&nest.bad, 1, __ATOMIC_RELAXED);
  }
}
static void outer_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  (void)args;
  outer_outlined(&g, &btid);
}

static void scenario_nested(int32_t gtid) {
  void *args[1] = {NULL};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)outer_outlined, (void *)outer_wrapper, args,
                     0, 0);
}

/* --- if(0) ------------------------------------------------------------------ */
static int32_t if0_runs, if0_bad, if0_hw, main_hw;
static void if0_outlined(int32_t *gtid, int32_t *btid, int32_t *x) {
  (void)gtid;
  (void)btid;
  __atomic_fetch_add(&if0_runs, 1, __ATOMIC_RELAXED);
  if0_hw = __kmpc_get_hardware_thread_id_in_block();
  if (omp_get_level() != 1 || omp_get_num_threads() != 1 || omp_get_thread_num() != 0 ||
      omp_get_active_level() != 0 || omp_in_parallel() != 0)
    if0_bad++;
  *x += 1;
}
static void if0_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  if0_outlined(&g, &btid, args[0]);
}

static void scenario_if0(int32_t gtid) {
  main_hw = __kmpc_get_hardware_thread_id_in_block();
  int32_t *x = __kmpc_alloc_shared(4);
  *x = 10;
  void *args[1] = {x};
  __kmpc_parallel_60(&loc, gtid, 0, -1, -1, (void *)if0_outlined, (void *)if0_wrapper, args, 1, 0);
  if (*x != 11)
    if0_bad += 100;
  main_check_sequential();
  __kmpc_free_shared(x, 4);
}

/* --- alloc_shared as a stack ------------------------------------------------- */
#define BIG (256 * 1024)
static int32_t stack_bad; /* atomic */
static int32_t stack_worker_runs;

static void stack_outlined(int32_t *gtid, int32_t *btid, int32_t *small, unsigned char *mid,
                           unsigned char *big) {
  (void)btid;
  int32_t t = omp_get_thread_num(), n = omp_get_num_threads();
  __atomic_fetch_add(&stack_worker_runs, 1, __ATOMIC_RELAXED);
  /* The main thread's values, read through the shared pointers. */
  if (*small != 42)
    __atomic_fetch_add(&stack_bad, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < 64; i++)
    if (mid[i] != (unsigned char)(i * 3))
      __atomic_fetch_add(&stack_bad, 1, __ATOMIC_RELAXED);
  for (int i = t; i < BIG; i += n)
    if (big[i] != (unsigned char)(i % 251))
      __atomic_fetch_add(&stack_bad, 1, __ATOMIC_RELAXED);
  __kmpc_barrier(&loc_barrier, *gtid);
  /* Workers write, the main thread checks after the region. */
  for (int i = t; i < BIG; i += n)
    big[i] = (unsigned char)(i % 13);
  /* A worker's own allocations: private, LIFO, aligned. */
  int32_t *mine = __kmpc_alloc_shared(4);
  int64_t *mine2 = __kmpc_alloc_shared(24);
  if (((uintptr_t)mine % 16) || ((uintptr_t)mine2 % 16))
    __atomic_fetch_add(&stack_bad, 1000, __ATOMIC_RELAXED);
  *mine = t;
  mine2[2] = -t;
  __kmpc_barrier(&loc_barrier, *gtid);
  if (*mine != t || mine2[2] != -t)
    __atomic_fetch_add(&stack_bad, 10000, __ATOMIC_RELAXED);
  __kmpc_free_shared(mine2, 24);
  __kmpc_free_shared(mine, 4);
}
static void stack_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  stack_outlined(&g, &btid, args[0], args[1], args[2]);
}

static void scenario_stack(int32_t gtid) {
  int32_t *small = __kmpc_alloc_shared(4);
  unsigned char *mid = __kmpc_alloc_shared(64);
  unsigned char *big = __kmpc_alloc_shared(BIG);
  CHECK(small && mid && big);
  CHECK((uintptr_t)small % 16 == 0 && (uintptr_t)mid % 16 == 0 && (uintptr_t)big % 16 == 0);
  CHECK(small != (int32_t *)mid && mid != big);
  *small = 42;
  for (int i = 0; i < 64; i++)
    mid[i] = (unsigned char)(i * 3);
  for (int i = 0; i < BIG; i++)
    big[i] = (unsigned char)(i % 251);
  void *args[3] = {small, mid, big};
  for (int rep = 0; rep < 2; rep++) {
    if (rep == 1)
      for (int i = 0; i < BIG; i++)
        big[i] = (unsigned char)(i % 251);
    __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)stack_outlined, (void *)stack_wrapper, args,
                       3, 0);
    for (int i = 0; i < BIG; i++)
      if (big[i] != (unsigned char)(i % 13)) {
        CHECK_MSG(0, "big[%d] = %d after the region, want %d", i, big[i], i % 13);
        break;
      }
  }
  /* Nested allocations, LIFO: a freed block's space is reused. */
  unsigned char *a = __kmpc_alloc_shared(32);
  unsigned char *b = __kmpc_alloc_shared(48);
  memset(a, 1, 32);
  memset(b, 2, 48);
  __kmpc_free_shared(b, 48);
  unsigned char *c = __kmpc_alloc_shared(48);
  memset(c, 3, 48);
  for (int i = 0; i < 32; i++)
    CHECK_EQ(a[i], 1);
  __kmpc_free_shared(c, 48);
  __kmpc_free_shared(a, 32);
  __kmpc_free_shared(big, BIG);
  __kmpc_free_shared(mid, 64);
  /* Many small ones, past any fixed-size stack, freed in reverse. */
  void *many[200];
  for (int i = 0; i < 200; i++) {
    many[i] = __kmpc_alloc_shared(40);
    memset(many[i], i, 40);
  }
  for (int i = 199; i >= 0; i--) {
    unsigned char *p = many[i];
    CHECK_MSG(p[0] == (unsigned char)i && p[39] == (unsigned char)i, "allocation %d overwritten",
              i);
    __kmpc_free_shared(p, 40);
  }
  CHECK_EQ(*small, 42);
  __kmpc_free_shared(small, 4);
}

/* --- dynamic shared memory ------------------------------------------------------ */
static void *dyn_main[8];
static int32_t dyn_bad;
static void dyn_outlined(int32_t *gtid, int32_t *btid, unsigned char *p) {
  (void)gtid;
  (void)btid;
  if (llvm_omp_target_dynamic_shared_alloc() != p)
    __atomic_fetch_add(&dyn_bad, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < 256; i++)
    if (p[i] != (unsigned char)(i ^ omp_get_team_num()))
      __atomic_fetch_add(&dyn_bad, 1, __ATOMIC_RELAXED);
}
static void dyn_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  dyn_outlined(&g, &btid, args[0]);
}
static void scenario_dyn(int32_t gtid) {
  unsigned char *p = llvm_omp_target_dynamic_shared_alloc();
  dyn_main[omp_get_team_num()] = p;
  if (!p)
    return;
  for (int i = 0; i < 256; i++)
    p[i] = (unsigned char)(i ^ omp_get_team_num());
  void *args[1] = {p};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)dyn_outlined, (void *)dyn_wrapper, args, 1, 0);
}

/* --- worksharing and barriers in a partial team --------------------------------------- */
static int32_t ws_hits[4096];
static int32_t ws_n;
static int32_t ws_bad;
static int32_t phase_val[MAXT];
static kmp_critical_name ws_crit;
static int32_t ws_crit_count, ws_threads;

static void ws_outlined(int32_t *gtid, int32_t *btid) {
  (void)btid;
  int32_t t = omp_get_thread_num(), n = omp_get_num_threads();
  if (t == 0)
    ws_threads = n;
  /* write - barrier - read, several phases */
  for (int ph = 0; ph < 4; ph++) {
    phase_val[t] = ph * 1000 + t;
    __kmpc_barrier(&loc_explicit_barrier, *gtid);
    int32_t u = (t + 1) % n;
    if (phase_val[u] != ph * 1000 + u)
      __atomic_fetch_add(&ws_bad, 1, __ATOMIC_RELAXED);
    __kmpc_barrier(&loc_explicit_barrier, *gtid);
  }
  /* critical as clang emits it (each lane of the warp in turn, syncwarp on
   * __kmpc_warp_active_thread_mask()), in a team that may end mid-warp. */
  uint64_t mask = __kmpc_warp_active_thread_mask();
  int32_t hw = __kmpc_get_hardware_thread_id_in_block();
  int32_t hw_n = __kmpc_get_hardware_num_threads_in_block();
  for (int32_t i = 0; i < hw_n; i++) {
    if (hw == i) {
      __kmpc_critical(&loc, *gtid, &ws_crit);
      ws_crit_count++;
      __kmpc_end_critical(&loc, *gtid, &ws_crit);
    }
    __kmpc_syncwarp(mask);
  }
  /* schedule(dynamic, 3) */
  int32_t lb = 0, ub = ws_n - 1, st = 1, last = 0;
  __kmpc_dispatch_init_4(&loc, *gtid, 35 | KMP_SCHED_MODIFIER_NONMONOTONIC, lb, ub, st, 3);
  while (__kmpc_dispatch_next_4(&loc, *gtid, &last, &lb, &ub, &st))
    for (int32_t i = lb; i <= ub; i++)
      __atomic_fetch_add(&ws_hits[i], 1, __ATOMIC_RELAXED);
  __kmpc_dispatch_deinit(&loc, *gtid);
  __kmpc_barrier(&loc_barrier, *gtid);
  /* schedule(static) */
  lb = 0, ub = ws_n - 1, st = 1, last = 0;
  __kmpc_for_static_init_4(&loc_for, *gtid, 34, &last, &lb, &ub, &st, 1, 1);
  if (ub > ws_n - 1)
    ub = ws_n - 1;
  for (int32_t i = lb; i <= ub; i++)
    __atomic_fetch_add(&ws_hits[i], 1, __ATOMIC_RELAXED);
  __kmpc_for_static_fini(&loc_for, *gtid);
  __kmpc_barrier(&loc_barrier, *gtid);
}
static void ws_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  ws_outlined(&g, &btid);
}
static int32_t ws_nt;
static void scenario_ws(int32_t gtid) {
  void *args[1] = {NULL};
  __kmpc_parallel_60(&loc, gtid, 1, ws_nt, -1, (void *)ws_outlined, (void *)ws_wrapper, args, 0, 0);
}

/* --- dispatch loops of a one-thread team ("solo") ------------------------------------- */
/* Where clang emits dispatch for a team of one thread: an orphaned `for
 * schedule(dynamic)` in the sequential part, inside if(0) and num_threads(1)
 * regions, and inside nested (serialised) regions of every worker. */
#define SOLO_N 50
static int32_t solo_hits[4][SOLO_N];       /* main: orphaned, if(0), num_threads(1), ordered */
static int32_t nested_hits[MAXT][SOLO_N];  /* per outer thread */
static int32_t solo_ord_bad;

static void solo_loop(int32_t gtid, int32_t sched, int32_t chunk, int32_t *hits, int ordered) {
  int32_t lb = 0, ub = SOLO_N - 1, st = 1, last = 0, next = 0;
  __kmpc_dispatch_init_4(&loc, gtid, sched, lb, ub, st, chunk);
  while (__kmpc_dispatch_next_4(&loc, gtid, &last, &lb, &ub, &st)) {
    for (int32_t i = lb; i <= ub; i++) {
      if (i < 0 || i >= SOLO_N) {
        __atomic_fetch_add(&solo_ord_bad, 1000, __ATOMIC_RELAXED);
        break;
      }
      if (ordered) {
        __kmpc_ordered(&loc, gtid);
        if (i != next++)
          __atomic_fetch_add(&solo_ord_bad, 1, __ATOMIC_RELAXED);
        __kmpc_end_ordered(&loc, gtid);
      }
      __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
      if (ordered)
        __kmpc_dispatch_fini_4(&loc, gtid);
    }
  }
  __kmpc_dispatch_deinit(&loc, gtid);
}

static void solo_region(int32_t *gtid, int32_t *btid, int32_t *which) {
  (void)btid;
  solo_loop(*gtid, *which == 1 ? 35 : 36, 3, solo_hits[*which], 0);
}
static void solo_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  solo_region(&g, &btid, args[0]);
}
static void solo_inner(int32_t *gtid, int32_t *btid, int32_t *outer) {
  (void)btid;
  solo_loop(*gtid, 35 | KMP_SCHED_MODIFIER_NONMONOTONIC, 4, nested_hits[*outer], 0);
}
static void solo_inner_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  solo_inner(&g, &btid, args[0]);
}
static void solo_outer(int32_t *gtid, int32_t *btid) {
  (void)btid;
  int32_t me = omp_get_thread_num();
  void *args[1] = {&me};
  __kmpc_parallel_60(&loc, *gtid, 1, -1, -1, (void *)solo_inner, (void *)solo_inner_wrapper, args,
                     1, 0);
}
static void solo_outer_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  solo_outer(&g, &btid);
}

static void scenario_solo(int32_t gtid) {
  solo_loop(gtid, 35, 2, solo_hits[0], 0); /* orphaned, sequential part */
  int32_t which = 1;
  void *args[1] = {&which};
  __kmpc_parallel_60(&loc, gtid, 0, -1, -1, (void *)solo_region, (void *)solo_wrapper, args, 1, 0);
  int32_t which2 = 2;
  void *args2[1] = {&which2};
  __kmpc_parallel_60(&loc, gtid, 1, 1, -1, (void *)solo_region, (void *)solo_wrapper, args2, 1, 0);
  solo_loop(gtid, 66, 1, solo_hits[3], 1); /* orphaned ordered loop */
  void *args3[1] = {NULL};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)solo_outer, (void *)solo_outer_wrapper, args3,
                     0, 0);
}

/* --- the kernel -------------------------------------------------------------------- */
enum { S_ROWS, S_NESTED, S_IF0, S_STACK, S_DYN, S_WS, S_SOLO };
static int scenario;

static void k_generic(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_generic, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  switch (scenario) {
  case S_ROWS: scenario_rows(gtid); break;
  case S_NESTED: scenario_nested(gtid); break;
  case S_IF0: scenario_if0(gtid); break;
  case S_STACK: scenario_stack(gtid); break;
  case S_DYN: scenario_dyn(gtid); break;
  case S_WS: scenario_ws(gtid); break;
  case S_SOLO: scenario_solo(gtid); break;
  }
  __kmpc_target_deinit();
}
static void e_generic(void *dyn, void **args) {
  (void)args;
  k_generic(dyn);
}

static void check_region(seen *s, int32_t want_max, int exact, uint32_t team, const char *what) {
  int32_t n = s->count;
  CHECK_MSG(n >= 1 && n <= want_max, "%s: %d threads ran it (at most %d)", what, n, want_max);
  if (exact)
    CHECK_MSG(n == want_max, "%s: %d threads ran it, want %d", what, n, want_max);
  CHECK_EQ(s->bad, 0);
  for (int32_t t = 0; t < n && t < MAXT; t++) {
    CHECK_MSG(s->hits[t] == 1, "%s: thread num %d ran it %d times", what, t, s->hits[t]);
    CHECK_MSG(s->nthreads[t] == n, "%s: thread %d saw omp_get_num_threads() = %d, %d ran",
              what, t, s->nthreads[t], n);
    /* A one-thread region may run on the main thread (serialised). */
    /* The main thread: the first lane of the block's last warp. */
    int32_t main_hw = (int32_t)((workers + warp - 1) & ~(warp - 1));
    CHECK_MSG(s->hw[t] >= 0 && ((uint32_t)s->hw[t] < workers || (n == 1 && s->hw[t] == main_hw)),
              "%s: thread %d runs on hardware thread %d (not a worker)", what, t, s->hw[t]);
  }
  CHECK_EQ(s->level, 1);
  CHECK_EQ(s->active, n > 1 ? 1 : 0);
  CHECK_EQ(s->in_par, n > 1 ? 1 : 0);
  CHECK_EQ(s->team, team);
}

static void test_rows(uint32_t teams, uint32_t wk, uint32_t w) {
  workers = wk;
  warp = w;
  nregions = NROW + 2;
  regions = calloc((size_t)teams * nregions, sizeof *regions);
  main_view_bad = 0;
  scenario = S_ROWS;
  tf_begin("generic: %d parallel regions in a row, %u teams, %u workers, warp %u", nregions,
           teams, wk, w);
  launch_generic(teams, wk, w, 0, e_generic, NULL);
  CHECK_EQ(main_view_bad, 0);
  for (uint32_t team = 0; team < teams; team++) {
    seen *base = &regions[team * nregions];
    for (int r = 0; r < NROW; r++) {
      char what[64];
      snprintf(what, sizeof what, "team %u region %d (num_threads %d)", team, r, row_nt[r]);
      int32_t nt = row_nt[r];
      if (nt < 0)
        check_region(&base[r], (int32_t)wk, 1, team, what);
      else
        check_region(&base[r], nt < (int32_t)wk ? nt : (int32_t)wk, nt < (int32_t)w, team, what);
    }
    check_region(&base[NROW], 4, 1, team, "after omp_set_num_threads(4)");
    check_region(&base[NROW + 1], 6, 1, team, "num_threads(6) after omp_set_num_threads(4)");
  }
  free(regions);
  tf_end();
}

static void test_nested(uint32_t wk, uint32_t w) {
  memset(&nest, 0, sizeof nest);
  scenario = S_NESTED;
  tf_begin("generic: nested parallel is serialised, %u workers, warp %u", wk, w);
  launch_generic(2, wk, w, 0, e_generic, NULL);
  CHECK_MSG(nest.inner_runs == 2 * 2 * nest.outer_n, "%d inner runs, outer team of %d",
            nest.inner_runs, nest.outer_n);
  CHECK_EQ(nest.outer_n, wk);
  CHECK_EQ(nest.bad, 0);
  tf_end();
}

static void test_if0(void) {
  if0_runs = if0_bad = 0;
  scenario = S_IF0;
  tf_begin("generic: if(0) parallel runs on the main thread, inactive");
  launch_generic(3, 64, 32, 0, e_generic, NULL);
  CHECK_EQ(if0_runs, 3);
  CHECK_EQ(if0_bad, 0);
  CHECK_EQ(if0_hw, main_hw);
  tf_end();
}

static void test_stack(uint32_t wk, uint32_t w) {
  stack_bad = 0;
  stack_worker_runs = 0;
  scenario = S_STACK;
  tf_begin("generic: __kmpc_alloc_shared stack shared with workers, %u workers, warp %u", wk, w);
  launch_generic(2, wk, w, 0, e_generic, NULL);
  CHECK_EQ(stack_bad, 0);
  CHECK_EQ(stack_worker_runs, 2 * 2 * (int)wk);
  tf_end();
}

static void test_dyn(void) {
  for (uint32_t bytes = 0; bytes <= 4096; bytes += 4096) {
    dyn_bad = 0;
    memset(dyn_main, 0, sizeof dyn_main);
    scenario = S_DYN;
    tf_begin("generic: llvm_omp_target_dynamic_shared_alloc with %u bytes", bytes + 256);
    launch_generic(3, 64, 32, bytes + 256, e_generic, NULL);
    for (int t = 0; t < 3; t++)
      CHECK(dyn_main[t] != NULL);
    CHECK_EQ(dyn_bad, 0);
    tf_end();
  }
}

static void test_ws(int32_t nt, int32_t n, uint32_t wk, uint32_t w) {
  memset(ws_hits, 0, sizeof ws_hits);
  ws_n = n;
  ws_nt = nt;
  ws_bad = 0;
  scenario = S_WS;
  tf_begin("generic: barriers, dynamic and static loops in a region of num_threads(%d), %u "
           "workers, warp %u, %d iterations",
           nt, wk, w, n);
  ws_crit_count = 0;
  launch_generic(1, wk, w, 0, e_generic, NULL);
  CHECK_EQ(ws_bad, 0);
  CHECK_EQ(ws_crit_count, ws_threads);
  for (int i = 0; i < n; i++)
    CHECK_MSG(ws_hits[i] == 2, "iteration %d ran %d times (want 2: one per loop)", i, ws_hits[i]);
  tf_end();
}

static void test_solo(uint32_t wk, uint32_t w) {
  memset(solo_hits, 0, sizeof solo_hits);
  memset(nested_hits, 0, sizeof nested_hits);
  solo_ord_bad = 0;
  scenario = S_SOLO;
  tf_begin("generic: dispatch loops of one-thread teams (orphaned, if(0), num_threads(1), "
           "ordered, nested), %u workers, warp %u",
           wk, w);
  launch_generic(1, wk, w, 0, e_generic, NULL);
  const char *where[] = {"orphaned dynamic", "if(0) dynamic", "num_threads(1) guided",
                         "orphaned ordered"};
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < SOLO_N; i++)
      CHECK_MSG(solo_hits[k][i] == 1, "%s loop: iteration %d ran %d times", where[k], i,
                solo_hits[k][i]);
  for (uint32_t t = 0; t < wk; t++)
    for (int i = 0; i < SOLO_N; i++)
      CHECK_MSG(nested_hits[t][i] == 1, "nested loop of outer thread %u: iteration %d ran %d times",
                t, i, nested_hits[t][i]);
  CHECK_EQ(solo_ord_bad, 0);
  tf_end();
}

/* --- OpenMPOpt's custom state machine (UseGenericStateMachine 0) --------------------------- */
/* What clang-22's device LTO emits for a generic kernel whose parallel
 * regions it knows (checked in the PTX of an sm_90 build): a worker is a
 * thread below __kmpc_get_hardware_num_threads_in_block() - warp size; the
 * others return. With thread_limit(48) the host launches 48 + 32 = 80
 * threads, so threads 48..63 leave: the runtime must not count them in the
 * team (it did: a team of 64, whose last 16 threads never came). */
static KernelEnvironmentTy env_custom = {{0, 1, OMP_TGT_EXEC_MODE_GENERIC, 1, 1024, -1, -1, 0, 0},
                                         &loc, &dyn_env};
static seen *custom_seen; /* [2]: default team, num_threads(40) */
static int32_t custom_limit, custom_bad;
static void custom_outlined(int32_t *gtid, int32_t *btid, seen *s) {
  (void)btid;
  note(s);
  __kmpc_barrier(&loc_barrier, *gtid); /* a barrier of the whole team */
  note(&s[2]);
}
static void custom_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  custom_outlined(&g, &btid, args[0]);
}
static void k_custom(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t tid = __kmpc_target_init(&env_custom, dyn_ptr);
  if (tid != -1) {
    int32_t workers_hw =
        (int32_t)__kmpc_get_hardware_num_threads_in_block() - (int32_t)__kmpc_get_warp_size();
    if (tid >= workers_hw)
      return;
    for (;;) {
      __kmpc_barrier_simple_generic(&loc, tid);
      void *fn = NULL;
      bool active = __kmpc_kernel_parallel(&fn);
      if (!fn)
        return;
      if (active) {
        ((ParallelWrapperFnTy)fn)(0, tid);
        __kmpc_kernel_end_parallel();
      }
      __kmpc_barrier_simple_generic(&loc, tid);
    }
  }
  int32_t gtid = __kmpc_global_thread_num(&loc);
  custom_limit = omp_get_thread_limit();
  if (omp_get_max_threads() != custom_limit)
    __atomic_fetch_add(&custom_bad, 1, __ATOMIC_RELAXED);
  void *args[1] = {&custom_seen[0]};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)custom_outlined, (void *)custom_wrapper, args, 1,
                     0);
  void *args2[1] = {&custom_seen[1]};
  __kmpc_parallel_60(&loc, gtid, 1, 40, -1, (void *)custom_outlined, (void *)custom_wrapper, args2,
                     1, 0);
  __kmpc_target_deinit();
}
static void e_custom(void *dyn, void **args) {
  (void)args;
  k_custom(dyn);
}
static void test_custom_state_machine(uint32_t thread_limit, uint32_t w) {
  seen *s = calloc(4, sizeof *s);
  custom_seen = s;
  custom_limit = -1;
  custom_bad = 0;
  workers = thread_limit;
  warp = w;
  tf_begin("generic: OpenMPOpt's custom state machine, thread_limit(%u) (block %u), warp %u",
           thread_limit, thread_limit + w, w);
  /* Regions 0 and 1 note into s[0], s[1] before their barrier and into
   * s[2], s[3] after it. */
  env_set(&env_custom, (int32_t)(thread_limit + w), 1, 0, 0);
  memset(&launch_env, 0, sizeof launch_env);
  tf_launch(1, thread_limit + w, w, 0, e_custom, &launch_env, NULL);
  CHECK_EQ(custom_limit, (int32_t)thread_limit);
  CHECK_EQ(custom_bad, 0);
  int32_t nt2 = thread_limit < 40 ? (int32_t)thread_limit : 40;
  check_region(&s[0], (int32_t)thread_limit, 1, 0, "default team, before its barrier");
  check_region(&s[2], (int32_t)thread_limit, 1, 0, "default team, after its barrier");
  check_region(&s[1], nt2, 1, 0, "num_threads(40), before its barrier");
  check_region(&s[3], nt2, 1, 0, "num_threads(40), after its barrier");
  free(s);
  tf_end();
}

/* --- generic-SPMD (3): generic code clang's optimiser made SPMD ----------------------------- */
static int32_t gs_x;
static int32_t gs_runs, gs_bad;
static void gs_outlined(int32_t *gtid, int32_t *btid, int32_t *x) {
  (void)gtid;
  (void)btid;
  __atomic_fetch_add(&gs_runs, 1, __ATOMIC_RELAXED);
  if (*x != 7 || omp_get_num_threads() != (int)__kmpc_get_hardware_num_threads_in_block() ||
      omp_get_thread_num() != __kmpc_get_hardware_thread_id_in_block() || omp_get_level() != 1)
    __atomic_fetch_add(&gs_bad, 1, __ATOMIC_RELAXED);
}
static void gs_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  gs_outlined(&g, &btid, args[0]);
}
static void k_gen_spmd(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_generic_spmd, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  /* The sequential part, guarded to one thread, then a barrier. */
  if (__kmpc_get_hardware_thread_id_in_block() == 0)
    gs_x = 7;
  __kmpc_barrier_simple_spmd(&loc, gtid);
  void *args[1] = {&gs_x};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)gs_outlined, (void *)gs_wrapper, args, 1, 0);
  __kmpc_target_deinit();
}
static void e_gen_spmd(void *dyn, void **args) {
  (void)args;
  k_gen_spmd(dyn);
}
static void test_generic_spmd(uint32_t threads, uint32_t w) {
  gs_runs = gs_bad = 0;
  gs_x = 0;
  tf_begin("generic-SPMD mode: every thread runs the region, %u threads, warp %u", threads, w);
  env_set(&env_generic_spmd, (int32_t)threads, 2, 0, 0);
  memset(&launch_env, 0, sizeof launch_env);
  tf_launch(2, threads, w, 0, e_gen_spmd, &launch_env, NULL);
  CHECK_EQ(gs_runs, 2 * (int)threads);
  CHECK_EQ(gs_bad, 0);
  tf_end();
}

int main(int argc, char **argv) {
  tf_init(argc, argv);
  int quick = tf_quick();
  test_rows(1, 64, 32);
  test_rows(3, 96, 32);
  if (!quick)
    test_rows(2, 128, 64);
  test_nested(64, 32);
  if (!quick)
    test_nested(128, 64);
  test_if0();
  test_stack(64, 32);
  if (!quick)
    test_stack(128, 64);
  test_dyn();
  test_ws(-1, 1000, 64, 32);
  test_ws(40, 333, 64, 32);
  test_ws(5, 100, 64, 32);
  test_ws(1, 10, 64, 32);
  if (!quick)
    test_ws(70, 1000, 128, 64);
  test_solo(64, 32);
  if (!quick)
    test_solo(128, 64);
  test_rows(1, 48, 32); /* thread_limit(48): a team that ends mid-warp */
  test_custom_state_machine(48, 32);
  test_custom_state_machine(64, 32);
  test_custom_state_machine(100, 64);
  test_generic_spmd(64, 32);
  test_generic_spmd(100, 32);
  if (!quick)
    test_generic_spmd(128, 64);
  return tf_summary();
}
