/* Reductions as clang-22 generates them:
 *   __kmpc_nvptx_parallel_reduce_nowait_v2 with clang-shaped
 *   shuffle-and-reduce and inter-warp-copy callbacks (a sum of doubles, a
 *   max of ints, and both in one list), and
 *   __kmpc_nvptx_teams_reduce_nowait_v2 with the four list<->global
 *   callbacks, the host-provided launch environment and reduction buffer
 *   (ReductionDataSize x ReductionBufferLength bytes, zeroed) and
 *   __kmpc_reduction_get_fixed_buffer.
 * The callbacks mirror clang's IR: the inter-warp copy hard-codes the warp
 * size (tid & 31, tid >> 5 for nvptx; & 63, >> 6 for amdgcn) and moves data
 * through the weak __openmp_nvptx_data_transfer_temporary_storage with
 * __kmpc_barrier around it. Team sizes: full warps, partial warps (1, 5,
 * 33, 100 threads) and warp sizes 32 and 64, in SPMD and generic mode. */
#include "omp_shapes.h"
#include "rtl.h" /* RTL_TEAM_CHUNKS */

#include <limits.h>
#include <pthread.h>

/* clang: `weak addrspace(3) global [32 x i32]` ([64 x i32] on amdgcn). */
__attribute__((weak)) volatile int32_t __openmp_nvptx_data_transfer_temporary_storage[64];
#define XFER __openmp_nvptx_data_transfer_temporary_storage

static int32_t gtid_now(void) { return __kmpc_global_thread_num(&loc); }

/* --- reduction functions (lhs op= rhs over a list of pointers) --------------- */
static void red_sum_d(void **lhs, void **rhs) { *(double *)lhs[0] += *(double *)rhs[0]; }
static void red_max_i(void **lhs, void **rhs) {
  int a = *(int *)lhs[0], b = *(int *)rhs[0];
  *(int *)lhs[0] = a > b ? a : b;
}
static void red_both(void **lhs, void **rhs) {
  *(double *)lhs[0] += *(double *)rhs[0];
  int a = *(int *)lhs[1], b = *(int *)rhs[1];
  *(int *)lhs[1] = a > b ? a : b;
}

/* --- shuffle and reduce (clang's _omp_reduction_shuffle_and_reduce_func) --- */
static int sar_do_reduce(int16_t lane, int16_t off, int16_t algo) {
  return algo == 0 || (algo == 1 && (uint16_t)lane < (uint16_t)off) ||
         (algo == 2 && (lane & 1) == 0 && off > 0);
}
static int sar_do_copy(int16_t lane, int16_t off, int16_t algo) {
  return algo == 1 && (uint16_t)lane >= (uint16_t)off;
}

static void sar_sum_d(void *rl_, int16_t lane, int16_t off, int16_t algo) {
  void **rl = rl_;
  double remote;
  void *remote_list[1] = {&remote};
  int64_t v;
  memcpy(&v, rl[0], 8);
  int64_t r = __kmpc_shuffle_int64(v, off, (int16_t)__kmpc_get_warp_size());
  memcpy(&remote, &r, 8);
  if (sar_do_reduce(lane, off, algo))
    red_sum_d(rl, remote_list);
  if (sar_do_copy(lane, off, algo))
    *(double *)rl[0] = remote;
}

static void sar_max_i(void *rl_, int16_t lane, int16_t off, int16_t algo) {
  void **rl = rl_;
  int remote;
  void *remote_list[1] = {&remote};
  remote = __kmpc_shuffle_int32(*(int32_t *)rl[0], off, (int16_t)__kmpc_get_warp_size());
  if (sar_do_reduce(lane, off, algo))
    red_max_i(rl, remote_list);
  if (sar_do_copy(lane, off, algo))
    *(int *)rl[0] = remote;
}

static void sar_both(void *rl_, int16_t lane, int16_t off, int16_t algo) {
  void **rl = rl_;
  double remote_d;
  int remote_i;
  void *remote_list[2] = {&remote_d, &remote_i};
  int64_t v;
  memcpy(&v, rl[0], 8);
  int64_t r = __kmpc_shuffle_int64(v, off, (int16_t)__kmpc_get_warp_size());
  memcpy(&remote_d, &r, 8);
  remote_i = __kmpc_shuffle_int32(*(int32_t *)rl[1], off, (int16_t)__kmpc_get_warp_size());
  if (sar_do_reduce(lane, off, algo))
    red_both(rl, remote_list);
  if (sar_do_copy(lane, off, algo)) {
    *(double *)rl[0] = remote_d;
    *(int *)rl[1] = remote_i;
  }
}

/* --- inter-warp copy (clang's _omp_reduction_inter_warp_copy_func) --------- */
/* One 32-bit word of an element through the transfer storage (the thread's
 * lane and warp as clang's function derives them from its hardware id). */
#define IWC_WORD(W, LOG, PTR)                                                                  \
  do {                                                                                         \
    int32_t tid = __kmpc_get_hardware_thread_id_in_block();                                    \
    __kmpc_barrier(&loc_barrier, gtid_now());                                                  \
    if ((tid & (W - 1)) == 0)                                                                  \
      XFER[tid >> LOG] = *(PTR);                                                               \
    __kmpc_barrier(&loc_barrier, gtid_now());                                                  \
    if ((uint32_t)tid < (uint32_t)warp_num)                                                    \
      *(PTR) = XFER[tid];                                                                      \
  } while (0)

#define DEFINE_IWC(W, LOG)                                                                     \
  static void iwc_sum_d_##W(void *rl_, int32_t warp_num) {                                     \
    void **rl = rl_;                                                                           \
    for (int i = 0; i < 2; i++)                                                                \
      IWC_WORD(W, LOG, (int32_t *)rl[0] + i);                                                  \
  }                                                                                            \
  static void iwc_max_i_##W(void *rl_, int32_t warp_num) {                                     \
    void **rl = rl_;                                                                           \
    IWC_WORD(W, LOG, (int32_t *)rl[0]);                                                        \
  }                                                                                            \
  static void iwc_both_##W(void *rl_, int32_t warp_num) {                                      \
    void **rl = rl_;                                                                           \
    for (int i = 0; i < 2; i++)                                                                \
      IWC_WORD(W, LOG, (int32_t *)rl[0] + i);                                                  \
    IWC_WORD(W, LOG, (int32_t *)rl[1]);                                                        \
  }                                                                                            \
  static void iwc_sum3_##W(void *rl_, int32_t warp_num) {                                      \
    void **rl = rl_;                                                                           \
    for (int i = 0; i < 6; i++)                                                                \
      IWC_WORD(W, LOG, (int32_t *)rl[0] + i);                                                  \
  }
DEFINE_IWC(32, 5)
DEFINE_IWC(64, 6)

/* --- list <-> global buffer (clang's _omp_reduction_*_global_* funcs) -------- */
typedef struct { double s; } glob_sum_d;
typedef struct { int m; } glob_max_i;
typedef struct { double s; int m; } glob_both;

#define DEFINE_LG(KIND, G, COPY_TO, COPY_FROM, ELEMS)                                          \
  static void lgcpy_##KIND(void *buf, int idx, void *rl_) {                                    \
    void **rl = rl_;                                                                           \
    G *g = (G *)buf + idx;                                                                     \
    COPY_TO;                                                                                   \
  }                                                                                            \
  static void glcpy_##KIND(void *buf, int idx, void *rl_) {                                    \
    void **rl = rl_;                                                                           \
    G *g = (G *)buf + idx;                                                                     \
    COPY_FROM;                                                                                 \
  }                                                                                            \
  static void lgred_##KIND(void *buf, int idx, void *rl) {                                     \
    G *g = (G *)buf + idx;                                                                     \
    void *gl[] = ELEMS;                                                                        \
    red_##KIND(gl, rl);                                                                        \
  }                                                                                            \
  static void glred_##KIND(void *buf, int idx, void *rl) {                                     \
    G *g = (G *)buf + idx;                                                                     \
    void *gl[] = ELEMS;                                                                        \
    red_##KIND(rl, gl);                                                                        \
  }
#define E1(a) {a}
#define E2(a, b) {a, b}
DEFINE_LG(sum_d, glob_sum_d, g->s = *(double *)rl[0], *(double *)rl[0] = g->s, E1(&g->s))
DEFINE_LG(max_i, glob_max_i, g->m = *(int *)rl[0], *(int *)rl[0] = g->m, E1(&g->m))
DEFINE_LG(both, glob_both, (g->s = *(double *)rl[0], g->m = *(int *)rl[1]),
          (*(double *)rl[0] = g->s, *(int *)rl[1] = g->m), E2(&g->s, &g->m))

/* --- the reductions under test ----------------------------------------------------- */
enum { K_SUM_D, K_MAX_I, K_BOTH };
static const char *kind_name[] = {"sum of doubles", "max of ints", "sum of doubles + max of ints"};

typedef struct red_ops {
  uint64_t size; /* reduce_data_size argument: the list's element sizes */
  uint64_t glob; /* ReductionDataSize: the globalized struct */
  int nelems;
  ShuffleReductFnTy sar;
  InterWarpCopyFnTy iwc32, iwc64;
  ListGlobalFnTy lgcpy, lgred, glcpy, glred;
} red_ops;

static const red_ops OPS[] = {
    {8, sizeof(glob_sum_d), 1, sar_sum_d, iwc_sum_d_32, iwc_sum_d_64, lgcpy_sum_d, lgred_sum_d,
     glcpy_sum_d, glred_sum_d},
    {4, sizeof(glob_max_i), 1, sar_max_i, iwc_max_i_32, iwc_max_i_64, lgcpy_max_i, lgred_max_i,
     glcpy_max_i, glred_max_i},
    {16, sizeof(glob_both), 2, sar_both, iwc_both_32, iwc_both_64, lgcpy_both, lgred_both,
     glcpy_both, glred_both},
};

/* The test's parameters (set by the host before each launch). */
static int kind;
static uint32_t warp_size;
static int32_t req_threads = -1; /* generic mode: num_threads clause */
static uint32_t num_records;      /* teams reduction buffer records */

/* Each thread's contribution: exact sums (multiples of 1/4), a max that is
 * not at thread 0. */
static double val_d(uint32_t team, uint32_t t) { return (team * 1000 + t) * 0.25 + 1; }
static int val_i(uint32_t team, uint32_t t) {
  return (int)(((team * 7919u + t * 104729u) % 100003u)) - 50000;
}

/* Results. */
static double out_s;
static int out_m;
static int32_t ones;        /* threads the reduction returned 1 to (atomic) */
static int32_t one_not_t0;  /* ... that were not OpenMP thread 0 (atomic) */
static int32_t region_threads;

static void reduce_parallel(double *ls, int *lm, int32_t gtid, int *r_out) {
  const red_ops *o = &OPS[kind];
  void *list[2];
  if (kind == K_MAX_I) {
    list[0] = lm;
  } else {
    list[0] = ls;
    list[1] = lm;
  }
  int r = __kmpc_nvptx_parallel_reduce_nowait_v2(&loc, o->size, list, o->sar,
                                                 warp_size == 64 ? o->iwc64 : o->iwc32);
  (void)gtid;
  *r_out = r;
}

/* `#pragma omp parallel reduction(...)` body: the region's threads each
 * contribute; the thread the runtime returns 1 to combines into the
 * enclosing (team-level) variables. */
static void par_outlined(int32_t *gtid, int32_t *btid, double *team_s, int *team_m) {
  (void)btid;
  uint32_t team = (uint32_t)omp_get_team_num();
  uint32_t t = (uint32_t)omp_get_thread_num();
  __atomic_fetch_add(&region_threads, 1, __ATOMIC_RELAXED);
  double ls = kind == K_MAX_I ? 0 : val_d(team, t);
  int lm = kind == K_SUM_D ? INT_MIN : val_i(team, t);
  int r;
  reduce_parallel(&ls, &lm, *gtid, &r);
  if (r == 1) {
    if (t != 0)
      __atomic_fetch_add(&one_not_t0, 1, __ATOMIC_RELAXED);
    *team_s += ls;
    *team_m = lm > *team_m ? lm : *team_m;
  }
}

static void par_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  par_outlined(&g, &btid, args[0], args[1]);
}

static int teams_mode;  /* 0: parallel reduction only; 1: then teams reduction */

/* The teams-level code: a parallel region with a reduction, then (teams
 * mode) the teams reduction into the mapped variables. */
static void teams_body(int32_t gtid, int generic, double *team_s, int *team_m) {
  void *args[2] = {team_s, team_m};
  __kmpc_parallel_60(&loc, gtid, 1, generic ? req_threads : -1, -1, (void *)par_outlined,
                     generic ? (void *)par_wrapper : NULL, args, 2, 0);
  if (!teams_mode) {
    if (__kmpc_get_hardware_thread_id_in_block() == 0 || generic) {
      /* One team: publish the team's value. */
      out_s = *team_s;
      out_m = *team_m;
    }
    return;
  }
  const red_ops *o = &OPS[kind];
  void *list[2];
  if (kind == K_MAX_I) {
    list[0] = team_m;
  } else {
    list[0] = team_s;
    list[1] = team_m;
  }
  void *buf = __kmpc_reduction_get_fixed_buffer();
  int r = __kmpc_nvptx_teams_reduce_nowait_v2(&loc, buf, num_records, o->size, list, o->sar,
                                              warp_size == 64 ? o->iwc64 : o->iwc32, o->lgcpy,
                                              o->lgred, o->glcpy, o->glred);
  if (r == 1) {
    __atomic_fetch_add(&ones, 1, __ATOMIC_RELAXED);
    out_s += *team_s;
    out_m = *team_m > out_m ? *team_m : out_m;
  }
}

static void k_spmd(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_spmd, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  double team_s = 0; /* every SPMD thread has its own copy, as in clang's code */
  int team_m = INT_MIN;
  teams_body(gtid, 0, &team_s, &team_m);
  __kmpc_target_deinit();
}
static void e_spmd(void *dyn, void **args) {
  (void)args;
  k_spmd(dyn);
}

static void k_generic(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_generic, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  /* Variables a parallel region shares are globalised by clang. */
  double *team_s = __kmpc_alloc_shared(8);
  int *team_m = __kmpc_alloc_shared(4);
  *team_s = 0;
  *team_m = INT_MIN;
  teams_body(gtid, 1, team_s, team_m);
  __kmpc_free_shared(team_m, 4);
  __kmpc_free_shared(team_s, 8);
  __kmpc_target_deinit();
}
static void e_generic(void *dyn, void **args) {
  (void)args;
  k_generic(dyn);
}

static void expected(uint32_t teams, uint32_t threads, double *s, int *m) {
  *s = 0;
  *m = INT_MIN;
  for (uint32_t team = 0; team < teams; team++)
    for (uint32_t t = 0; t < threads; t++) {
      if (kind != K_MAX_I)
        *s += val_d(team, t);
      if (kind != K_SUM_D && val_i(team, t) > *m)
        *m = val_i(team, t);
    }
}

static void check_values(uint32_t teams, uint32_t threads) {
  double s;
  int m;
  expected(teams, threads, &s, &m);
  if (kind != K_MAX_I)
    CHECK_MSG(out_s == s, "sum %.17g, want %.17g", out_s, s);
  if (kind != K_SUM_D)
    CHECK_MSG(out_m == m, "max %d, want %d", out_m, m);
}

static void run_parallel(int generic, int k, uint32_t threads, uint32_t warp) {
  kind = k;
  warp_size = warp;
  teams_mode = 0;
  out_s = 0;
  out_m = INT_MIN;
  one_not_t0 = 0;
  region_threads = 0;
  if (generic) {
    /* A team of `threads` workers asked for with num_threads, in a block
     * with more workers than that. */
    req_threads = (int32_t)threads;
    uint32_t workers = (threads + warp - 1) / warp * warp + warp;
    tf_begin("parallel reduction (%s), generic mode, num_threads(%u) of %u workers, warp %u",
             kind_name[k], threads, workers, warp);
    launch_generic(1, workers, warp, 0, e_generic, NULL);
  } else {
    req_threads = -1;
    tf_begin("parallel reduction (%s), SPMD, %u threads, warp %u", kind_name[k], threads, warp);
    launch_spmd(1, threads, warp, 0, e_spmd, NULL);
  }
  /* The runtime may give fewer threads than num_threads asks for. */
  uint32_t ran = (uint32_t)region_threads;
  CHECK_MSG(ran >= 1 && ran <= threads, "%u threads ran the region", ran);
  if (!generic || threads < warp)
    CHECK_EQ(ran, threads);
  check_values(1, ran);
  CHECK_MSG(one_not_t0 == 0, "the reduction returned 1 to %d threads other than thread 0",
            one_not_t0);
  tf_end();
}

static void run_teams(int generic, int k, uint32_t teams, uint32_t threads, uint32_t warp,
                      uint32_t records) {
  kind = k;
  warp_size = warp;
  teams_mode = 1;
  out_s = 0;
  out_m = INT_MIN;
  ones = 0;
  one_not_t0 = 0;
  region_threads = 0;
  num_records = records;
  const red_ops *o = &OPS[k];
  /* What the host plugin does for a kernel with a teams reduction. */
  size_t bytes = (size_t)o->glob * records;
  void *buffer = calloc(1, bytes);
  uint32_t block;
  if (generic) {
    req_threads = (int32_t)threads;
    block = (threads + warp - 1) / warp * warp + warp;
    env_set(&env_generic, (int32_t)block, (int32_t)teams, (int32_t)o->glob, (int32_t)records);
  } else {
    req_threads = -1;
    block = threads;
    env_set(&env_spmd, (int32_t)threads, (int32_t)teams, (int32_t)o->glob, (int32_t)records);
  }
  tf_begin("teams reduction (%s), %s, %u teams x %u threads, warp %u, %u buffer records",
           kind_name[k], generic ? "generic" : "SPMD", teams, threads, warp, records);
  KernelLaunchEnvironmentTy lenv = {0, 0, buffer};
  tf_launch(teams, block, warp, 0, generic ? e_generic : e_spmd, &lenv, NULL);
  uint32_t ran = (uint32_t)region_threads;
  CHECK_MSG(ran % teams == 0, "%u region threads over %u teams", ran, teams);
  check_values(teams, ran / teams);
  CHECK_MSG(ones == 1, "the teams reduction returned 1 to %d threads (want 1)", ones);
  CHECK_EQ(one_not_t0, 0);
  free(buffer);
  tf_end();
}

/* --- `teams distribute parallel for reduction(...)` as clang-22 emits it --- */
/* SPMD: every thread runs the distribute loop (schedule 91, chunk = block
 * size); per chunk, a parallel region runs the inner loop (schedule 33,
 * chunk 1) over the chunk and ends in the parallel reduction, whose thread
 * with 1 combines into its own team-level copy; after the loop, thread 0's
 * copy is the team's value (here added to the result directly: the teams
 * reduction is tested above). The runtime may defer the parallel reduction
 * to the team's last chunk (reduction.c): then it returns 1 once per team,
 * else once per chunk; the tests check which happened. */

/* A third kind for these tests only: three sums of doubles, more shuffles
 * than a deferred reduction keeps. */
enum { K_SUM3 = 3 };
static void red_sum3(void **lhs, void **rhs) {
  for (int i = 0; i < 3; i++)
    ((double *)lhs[0])[i] += ((double *)rhs[0])[i];
}
static void sar_sum3(void *rl_, int16_t lane, int16_t off, int16_t algo) {
  void **rl = rl_;
  double remote[3];
  void *remote_list[1] = {remote};
  for (int i = 0; i < 3; i++) {
    int64_t v;
    memcpy(&v, (double *)rl[0] + i, 8);
    int64_t r = __kmpc_shuffle_int64(v, off, (int16_t)__kmpc_get_warp_size());
    memcpy(&remote[i], &r, 8);
  }
  if (sar_do_reduce(lane, off, algo))
    red_sum3(rl, remote_list);
  if (sar_do_copy(lane, off, algo))
    memcpy(rl[0], remote, sizeof remote);
}

static int64_t dpf_n;                      /* iterations */
static KernelEnvironmentTy *dpf_env;       /* SPMD or generic-SPMD */
/* The chunk clang passed: 0 the block size (a runtime call); else the
 * kernel's thread limit, which OpenMPOpt folds that call to with device
 * LTO, launched with smaller teams. */
static int64_t dpf_limit;
static int32_t dpf_ones[64];               /* per team: parallel reductions that returned 1 */
static double dpf_s, dpf_s3[3];            /* results (under dpf_lock) */
static int dpf_m;
static pthread_mutex_t dpf_lock = PTHREAD_MUTEX_INITIALIZER;

static double it_d(int64_t i) { return (double)(i % 1000) * 0.25 + 1; }
static int it_i(int64_t i) { return (int)((i * 7919) % 100003) - 50000; }

typedef struct dpf_team {
  double s, s3[3];
  int m;
} dpf_team;

static void dpf_region(int32_t *gtid, int32_t *btid, void *lb_, void *ub_, dpf_team *team) {
  (void)btid;
  int64_t lb = (int64_t)(intptr_t)lb_, ub = (int64_t)(intptr_t)ub_, st = 1;
  int32_t last = 0;
  double ls = 0, ls3[3] = {0, 0, 0};
  int lm = INT_MIN;
  __kmpc_for_static_init_8(&loc_for, *gtid, 33, &last, &lb, &ub, &st, 1, 1);
  for (int64_t i = lb; i <= (int64_t)(intptr_t)ub_; i += st) {
    ls += it_d(i);
    lm = it_i(i) > lm ? it_i(i) : lm;
    for (int j = 0; j < 3; j++)
      ls3[j] += it_d(i) * (j + 1);
  }
  __kmpc_for_static_fini(&loc_for, *gtid);
  void *list[2] = {ls3, NULL};
  int r;
  if (kind == K_SUM3) {
    r = __kmpc_nvptx_parallel_reduce_nowait_v2(&loc, 24, list, sar_sum3,
                                               warp_size == 64 ? iwc_sum3_64 : iwc_sum3_32);
  } else {
    reduce_parallel(&ls, &lm, *gtid, &r);
  }
  if (r == 1) {
    __atomic_fetch_add(&dpf_ones[omp_get_team_num()], 1, __ATOMIC_RELAXED);
    if (omp_get_thread_num() != 0)
      __atomic_fetch_add(&one_not_t0, 1, __ATOMIC_RELAXED);
    team->s += ls;
    team->m = lm > team->m ? lm : team->m;
    for (int j = 0; j < 3; j++)
      team->s3[j] += ls3[j];
  }
}

static void k_dpf(KernelLaunchEnvironmentTy *dyn_ptr) {
  if (__kmpc_target_init(dpf_env, dyn_ptr) != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  dpf_team team = {0, {0, 0, 0}, INT_MIN}; /* each SPMD thread's own copy */
  int64_t n = dpf_n, lb = 0, ub = n - 1, st = 1;
  int32_t last = 0;
  int64_t chunk = dpf_limit ? dpf_limit : (int64_t)__kmpc_get_hardware_num_threads_in_block();
  __kmpc_distribute_static_init_8(&loc_dist, gtid, 91, &last, &lb, &ub, &st, 1, chunk);
  ub = ub < n - 1 ? ub : n - 1;
  for (; lb < n; lb += st, ub = ub + st < n - 1 ? ub + st : n - 1) {
    void *args[3] = {(void *)(intptr_t)lb, (void *)(intptr_t)ub, &team};
    __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)dpf_region, NULL, args, 3, 0);
  }
  __kmpc_distribute_static_fini(&loc_dist, gtid);
  if (__kmpc_get_hardware_thread_id_in_block() == 0) {
    pthread_mutex_lock(&dpf_lock);
    dpf_s += team.s;
    dpf_m = team.m > dpf_m ? team.m : dpf_m;
    for (int j = 0; j < 3; j++)
      dpf_s3[j] += team.s3[j];
    pthread_mutex_unlock(&dpf_lock);
  }
  __kmpc_target_deinit();
}
static void e_dpf(void *dyn, void **args) {
  (void)args;
  k_dpf(dyn);
}

/* expect_defer: the runtime should reduce once per team (else per chunk). */
static void run_composite(int generic_spmd, int k, int64_t n, uint32_t teams, uint32_t threads,
                          uint32_t warp, int expect_defer) {
  kind = k;
  warp_size = warp;
  dpf_n = n;
  dpf_env = generic_spmd ? &env_generic_spmd : &env_spmd;
  dpf_s = 0;
  dpf_m = INT_MIN;
  memset(dpf_s3, 0, sizeof dpf_s3);
  memset(dpf_ones, 0, sizeof dpf_ones);
  one_not_t0 = 0;
  tf_begin("distribute parallel for reduction (%s), %s, %lld iterations, %u teams x %u threads, "
           "warp %u, chunk %lld",
           k == K_SUM3 ? "three sums" : kind_name[k], generic_spmd ? "generic-SPMD" : "SPMD",
           (long long)n, teams, threads, warp, (long long)(dpf_limit ? dpf_limit : threads));
  env_set(dpf_env, dpf_limit ? (int32_t)dpf_limit : (int32_t)threads, (int32_t)teams, 0, 0);
  memset(&launch_env, 0, sizeof launch_env);
  tf_launch(teams, threads, warp, 0, e_dpf, &launch_env, NULL);
  double s = 0, s3[3] = {0, 0, 0};
  int m = INT_MIN;
  for (int64_t i = 0; i < n; i++) {
    s += it_d(i);
    m = it_i(i) > m ? it_i(i) : m;
    for (int j = 0; j < 3; j++)
      s3[j] += it_d(i) * (j + 1);
  }
  if (k == K_SUM3) {
    for (int j = 0; j < 3; j++)
      CHECK_MSG(dpf_s3[j] == s3[j], "sum %d: %.17g, want %.17g", j, dpf_s3[j], s3[j]);
  } else {
    if (k != K_MAX_I)
      CHECK_MSG(dpf_s == s, "sum %.17g, want %.17g", dpf_s, s);
    if (k != K_SUM_D)
      CHECK_MSG(dpf_m == m, "max %d, want %d", dpf_m, m);
  }
  CHECK_EQ(one_not_t0, 0);
  /* Chunks of clang's chunk (the block or the thread limit) dealt round
   * robin over the teams; in SPMD kernels 1 / RTL_TEAM_CHUNKS of a team's
   * share rounded up to a multiple of clang's (workshare.c, widened_chunk;
   * the emulation builds the runtime with rtl.h's defaults). */
  int64_t base = dpf_limit ? dpf_limit : threads, size = base;
  if (!generic_spmd && n > 0) {
    int64_t share = (n + (int64_t)teams * RTL_TEAM_CHUNKS - 1) / ((int64_t)teams * RTL_TEAM_CHUNKS);
    size = (share + base - 1) / base * base;
  }
  int64_t chunks = (n + size - 1) / size;
  for (uint32_t t = 0; t < teams; t++) {
    int64_t mine = chunks > t ? (chunks - t + teams - 1) / teams : 0;
    int64_t want = threads == 1 ? mine : expect_defer ? (mine > 0) : mine;
    CHECK_MSG(dpf_ones[t] == want, "team %u (%lld chunks): the reduction returned 1 %d times, want %lld",
              t, (long long)mine, dpf_ones[t], (long long)want);
  }
  tf_end();
}

static void composite_tests(int quick) {
  /* (iterations, teams, threads, warp) */
  static const int64_t shapes[][4] = {{1000, 3, 32, 32}, {1000, 3, 33, 32}, {4096, 4, 128, 32},
                                      {777, 2, 100, 64}, {130, 5, 64, 64},  {5, 3, 32, 32},
                                      {0, 2, 32, 32},    {64, 1, 1, 32},    {2000, 2, 5, 32}};
  for (int k = 0; k < 4; k++)
    for (unsigned s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      if (quick && k != K_BOTH && k != K_SUM3 && s != 1)
        continue;
      uint32_t threads = (uint32_t)shapes[s][2];
      run_composite(0, k, shapes[s][0], (uint32_t)shapes[s][1], threads, (uint32_t)shapes[s][3],
                    k != K_SUM3);
    }
  /* clang's chunk folded to a thread limit of twice the team's size (two
   * iterations per thread and region, widened to the team's share). */
  dpf_limit = 64;
  run_composite(0, K_BOTH, 20000, 3, 32, 32, 1);
  run_composite(0, K_SUM_D, 1000, 2, 32, 32, 1);
  dpf_limit = 0;
  /* Not deferred: kernels OpenMPOpt made SPMD, and teams above 128 threads. */
  run_composite(1, K_SUM_D, 1000, 3, 32, 32, 0);
  run_composite(1, K_BOTH, 1000, 2, 64, 64, 0);
  run_composite(0, K_SUM_D, 2000, 2, 129, 32, 0);
  if (!quick)
    run_composite(0, K_BOTH, 3000, 2, 256, 64, 0);
}

/* __kmpc_reduction_get_fixed_buffer returns the launch's buffer. */
static void *fixed_seen[4];
static void k_fixed(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_spmd, dyn_ptr);
  if (r != -1)
    return;
  if (__kmpc_get_hardware_thread_id_in_block() == 0)
    fixed_seen[omp_get_team_num()] = __kmpc_reduction_get_fixed_buffer();
  __kmpc_target_deinit();
}
static void e_fixed(void *dyn, void **args) {
  (void)args;
  k_fixed(dyn);
}

static void test_fixed_buffer(void) {
  tf_begin("__kmpc_reduction_get_fixed_buffer is the host's ReductionBuffer");
  static char buf[64];
  KernelLaunchEnvironmentTy lenv = {0, 0, buf};
  env_set(&env_spmd, 32, 3, 8, 8);
  tf_launch(3, 32, 32, 0, e_fixed, &lenv, NULL);
  for (int i = 0; i < 3; i++)
    CHECK(fixed_seen[i] == buf);
  tf_end();
}

int main(int argc, char **argv) {
  tf_init(argc, argv);
  int quick = tf_quick();
  test_fixed_buffer();
  static const uint32_t sizes[] = {1, 5, 32, 33, 64, 100, 128, 256};
  for (uint32_t warp = 32; warp <= 64; warp += 32)
    for (int k = 0; k < 3; k++)
      for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        if (quick && k != K_BOTH && sizes[s] != 33)
          continue;
        run_parallel(0, k, sizes[s], warp);
      }
  static const uint32_t gsizes[] = {1, 5, 31, 33, 64, 100};
  for (uint32_t warp = 32; warp <= 64; warp += 32)
    for (int k = 0; k < 3; k++)
      for (unsigned s = 0; s < sizeof gsizes / sizeof *gsizes; s++) {
        if (quick && k != K_BOTH && gsizes[s] != 5)
          continue;
        run_parallel(1, k, gsizes[s], warp);
      }
  /* (teams, threads, warp, records) */
  static const uint32_t tshapes[][4] = {{1, 32, 32, 1024}, {3, 33, 32, 1024}, {13, 5, 32, 4},
                                        {13, 64, 64, 4},   {7, 100, 32, 3},   {40, 1, 32, 1},
                                        {5, 32, 32, 5},    {6, 65, 64, 1024}};
  for (int generic = 0; generic < 2; generic++)
    for (int k = 0; k < 3; k++)
      for (unsigned s = 0; s < sizeof tshapes / sizeof *tshapes; s++) {
        if (quick && (k != K_BOTH || s > 3))
          continue;
        run_teams(generic, k, tshapes[s][0], tshapes[s][1], tshapes[s][2], tshapes[s][3]);
      }
  composite_tests(quick);
  return tf_summary();
}
