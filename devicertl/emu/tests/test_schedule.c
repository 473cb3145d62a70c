/* Worksharing schedules as clang-22's generated code drives them:
 *   __kmpc_for_static_init_{4,4u,8,8u}        (33 chunked, 34 unchunked)
 *   __kmpc_distribute_static_init_{4,4u,8,8u} (91, 92, 93)
 *   __kmpc_dispatch_init/next_{4,4u,8,8u}     (dynamic, guided, runtime,
 *                                              auto, ordered kinds)
 * and the combined `distribute parallel for` shapes. Every loop must run
 * each iteration exactly once, exactly one thread (one team for distribute)
 * must see "last", and it must be the one that ran the final iteration;
 * ordered loops must run their ordered regions in iteration order.
 *
 * One launch runs many loops in a row (one per configuration, each with its
 * own counters, an implicit barrier after each as clang emits), so that
 * thousands of configurations cost a few launches. Bounds are chosen to
 * catch truncation and signedness bugs: negative lower bounds for the
 * signed variants, 3e9 for 4u, 2^40 for 8 and 2^63 for 8u; signed variants
 * also run with increments 2, -1 and -3. */
#include "omp_shapes.h"

enum { API_FOR, API_DIST, API_DISPATCH };
enum { V4, V4U, V8, V8U };
static const char *variant_name[] = {"4", "4u", "8", "8u"};
static const char *api_name[] = {"for_static_init", "distribute_static_init", "dispatch"};

typedef struct cfg {
  int32_t sched;
  int64_t lb; /* the variant's type, as bits */
  int64_t incr, chunk;
  uint64_t tc;
  uint64_t hits_off;
  /* Results (atomic). */
  int32_t last_count, last_owner, final_owner, bad, ord_next, ord_bad;
} cfg;

typedef struct res {
  int64_t lb, ub, st;
  int32_t last, seen;
} res;

static cfg *cfgs;
static int ncfg;
static int32_t *hits;
static res *team_res; /* distribute: [cfg][team][thread] */
static int api, variant;
static uint32_t n_teams, n_threads;

#define OWNER(team, tid) ((int32_t)((team) * 4096 + (tid) + 1))

static int is_chunked(int32_t s) { return s == 33 || s == 91 || s == 93; }
static int is_ordered(int32_t s) { return (s & 0xffff) >= 65 && (s & 0xffff) <= 70; }

/* Record iteration value v of configuration c; returns its index or -1. */
static int64_t mark(cfg *c, __int128 lb0, __int128 v, int32_t who) {
  __int128 diff = v - lb0;
  if (diff % c->incr != 0) {
    __atomic_fetch_add(&c->bad, 1, __ATOMIC_RELAXED);
    return -1;
  }
  __int128 q = diff / c->incr;
  if (q < 0 || q >= (__int128)c->tc) {
    __atomic_fetch_add(&c->bad, 1, __ATOMIC_RELAXED);
    return -1;
  }
  __atomic_fetch_add(&hits[c->hits_off + (uint64_t)q], 1, __ATOMIC_RELAXED);
  if ((uint64_t)q == c->tc - 1)
    __atomic_store_n(&c->final_owner, who, __ATOMIC_RELAXED);
  return (int64_t)q;
}

/* The values lb, lb+incr, ... up to ub (inclusive) as the loop body sees
 * them; for ordered loops each in an ordered region, then dispatch_fini. */
#define DEFINE_VARIANT(SUF, T, ST)                                                             \
  static void run_range_##SUF(cfg *c, T lb, T ub, int32_t who, int32_t gtid, int ordered) {    \
    __int128 lb0 = (T)c->lb;                                                                   \
    uint64_t guard = 0;                                                                        \
    for (__int128 v = lb; c->incr > 0 ? v <= (__int128)ub : v >= (__int128)ub; v += c->incr) { \
      if (++guard > c->tc + 1) {                                                               \
        __atomic_fetch_add(&c->bad, 1000, __ATOMIC_RELAXED);                                   \
        return;                                                                                \
      }                                                                                        \
      if (ordered) {                                                                           \
        __kmpc_ordered(&loc, gtid);                                                            \
        int64_t k = mark(c, lb0, v, who);                                                      \
        if (k != c->ord_next)                                                                  \
          c->ord_bad++;                                                                        \
        c->ord_next++;                                                                         \
        __kmpc_end_ordered(&loc, gtid);                                                        \
        __kmpc_dispatch_fini_##SUF(&loc, gtid);                                                \
      } else {                                                                                 \
        mark(c, lb0, v, who);                                                                  \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  static T gub_##SUF(cfg *c) {                                                                 \
    return (T)((__int128)(T)c->lb + (__int128)(c->tc - 1) * c->incr);                         \
  }                                                                                            \
  /* clang's loop over what static_init returned: clip ub to the loop's,                       \
   * run [lb, ub], then (chunked) move both by the stride. */                                  \
  static void run_static_##SUF(cfg *c, int dist, uint32_t team, uint32_t tid, int32_t gtid,    \
                               res *out) {                                                     \
    T gub = gub_##SUF(c);                                                                      \
    int32_t last = 0;                                                                          \
    T lb = (T)c->lb, ub = gub;                                                                 \
    ST st = 0;                                                                                 \
    if (dist)                                                                                  \
      __kmpc_distribute_static_init_##SUF(&loc_dist, gtid, c->sched, &last, &lb, &ub, &st,     \
                                          (ST)c->incr, (ST)c->chunk);                          \
    else                                                                                       \
      __kmpc_for_static_init_##SUF(&loc_for, gtid, c->sched, &last, &lb, &ub, &st,             \
                                   (ST)c->incr, (ST)c->chunk);                                 \
    if (out) {                                                                                 \
      out->lb = (int64_t)lb;                                                                   \
      out->ub = (int64_t)ub;                                                                   \
      out->st = (int64_t)st;                                                                   \
      out->last = last;                                                                        \
      out->seen++;                                                                             \
    }                                                                                          \
    /* distribute: thread 0 runs the team's iterations; 93 deals chunks to                      \
     * every thread of every team. */                                                          \
    if (!dist || tid == 0 || c->sched == 93) {                                                 \
      int32_t who = OWNER(team, tid);                                                          \
      for (int guard = 0;; guard++) {                                                          \
        if (guard > (int)c->tc + 1) {                                                          \
          __atomic_fetch_add(&c->bad, 1000, __ATOMIC_RELAXED);                                 \
          break;                                                                               \
        }                                                                                      \
        if (c->incr > 0) {                                                                     \
          if (ub > gub)                                                                        \
            ub = gub;                                                                          \
          if (lb > ub)                                                                         \
            break;                                                                             \
        } else {                                                                               \
          if (ub < gub)                                                                        \
            ub = gub;                                                                          \
          if (lb < ub)                                                                         \
            break;                                                                             \
        }                                                                                      \
        run_range_##SUF(c, lb, ub, who, gtid, 0);                                              \
        if (!is_chunked(c->sched))                                                             \
          break;                                                                               \
        lb = (T)(lb + st);                                                                     \
        ub = (T)(ub + st);                                                                     \
      }                                                                                        \
      if (last) {                                                                              \
        __atomic_fetch_add(&c->last_count, 1, __ATOMIC_RELAXED);                               \
        __atomic_store_n(&c->last_owner, who, __ATOMIC_RELAXED);                               \
      }                                                                                        \
    } else if (last) {                                                                         \
      __atomic_fetch_add(&c->last_count, 1, __ATOMIC_RELAXED);                                 \
    }                                                                                          \
    if (dist)                                                                                  \
      __kmpc_distribute_static_fini(&loc_dist, gtid);                                          \
    else                                                                                       \
      __kmpc_for_static_fini(&loc_for, gtid);                                                  \
  }                                                                                            \
  static void run_dispatch_##SUF(cfg *c, uint32_t tid, int32_t gtid) {                         \
    int32_t who = OWNER(0, tid);                                                               \
    /* As clang: the variables dispatch_next writes hold the loop's bounds                     \
     * before dispatch_init (init's lb/ub arguments are loaded from them). */                  \
    int32_t last = 0;                                                                          \
    T lb = (T)c->lb, ub = gub_##SUF(c);                                                        \
    ST st = (ST)c->incr;                                                                       \
    __kmpc_dispatch_init_##SUF(&loc, gtid, c->sched, lb, ub, st, (ST)c->chunk);                \
    int guard = 0;                                                                             \
    while (__kmpc_dispatch_next_##SUF(&loc, gtid, &last, &lb, &ub, &st)) {                     \
      if (++guard > (int)c->tc + 1) {                                                          \
        __atomic_fetch_add(&c->bad, 1000, __ATOMIC_RELAXED);                                   \
        break;                                                                                 \
      }                                                                                        \
      run_range_##SUF(c, lb, ub, who, gtid, is_ordered(c->sched));                             \
    }                                                                                          \
    __kmpc_dispatch_deinit(&loc, gtid);                                                        \
    if (last) {                                                                                \
      __atomic_fetch_add(&c->last_count, 1, __ATOMIC_RELAXED);                                 \
      __atomic_store_n(&c->last_owner, who, __ATOMIC_RELAXED);                                 \
    }                                                                                          \
  }

DEFINE_VARIANT(4, int32_t, int32_t)
DEFINE_VARIANT(4u, uint32_t, int32_t)
DEFINE_VARIANT(8, int64_t, int64_t)
DEFINE_VARIANT(8u, uint64_t, int64_t)

static void run_cfg(cfg *c, uint32_t team, uint32_t tid, int32_t gtid, res *out) {
  switch (api * 4 + variant) {
#define CASES(SUF, V)                                                                          \
  case API_FOR * 4 + V: run_static_##SUF(c, 0, team, tid, gtid, out); break;                   \
  case API_DIST * 4 + V: run_static_##SUF(c, 1, team, tid, gtid, out); break;                  \
  case API_DISPATCH * 4 + V: run_dispatch_##SUF(c, tid, gtid); break;
    CASES(4, V4)
    CASES(4u, V4U)
    CASES(8, V8)
    CASES(8u, V8U)
  }
}

/* `#pragma omp parallel` (SPMD): every configuration's loop in turn, each
 * followed by the loop's implicit barrier. */
static void loops_outlined(int32_t *gtid, int32_t *btid) {
  (void)btid;
  uint32_t tid = (uint32_t)omp_get_thread_num();
  for (int i = 0; i < ncfg; i++) {
    run_cfg(&cfgs[i], 0, tid, *gtid, NULL);
    __kmpc_barrier(&loc_barrier, *gtid);
  }
}

/* `#pragma omp target teams distribute` shape (SPMD, every thread of the
 * team calls distribute_static_init and must get the team's bounds). */
static void teams_outlined(int32_t *gtid, int32_t *btid) {
  (void)btid;
  uint32_t team = (uint32_t)omp_get_team_num();
  uint32_t tid = (uint32_t)__kmpc_get_hardware_thread_id_in_block();
  for (int i = 0; i < ncfg; i++)
    run_cfg(&cfgs[i], team, tid, *gtid,
            &team_res[((size_t)i * n_teams + team) * n_threads + tid]);
}

static void k_loops(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_spmd, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  int32_t zero = 0, tid = gtid;
  if (api == API_DIST) {
    teams_outlined(&tid, &zero);
  } else {
    void *args[1] = {NULL};
    __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)loops_outlined, NULL, args, 0, 0);
  }
  __kmpc_target_deinit();
}
static void e_loops(void *dyn, void **args) {
  (void)args;
  k_loops(dyn);
}

/* --- configurations ---------------------------------------------------------- */

static int64_t base_lb(int v, int64_t incr) {
  switch (v) {
  case V4: return incr > 0 ? -500 : 700;
  case V4U: return 3000000000ll;
  case V8: return incr > 0 ? -(1ll << 40) - 7 : (1ll << 40) + 9;
  default: return (int64_t)((1ull << 63) + 5);
  }
}

static const int32_t for_scheds[][2] = {{34, 1}, {33, 1}, {33, 2}, {33, 3}, {33, 8}, {33, 50}};
static const int32_t dist_scheds[][2] = {{92, 1}, {91, 1}, {91, 3}, {91, 8}, {91, 64}, {91, 2}};
/* 93 (DISTR_STATIC_CHUNKED_CHUNKONE) is not tested: clang-22 does not emit it
 * (it deals chunks over the threads of the current parallel region). */
static const int32_t dispatch_scheds[][2] = {
    {35, 1},
    {35, 4},
    {35 | KMP_SCHED_MODIFIER_NONMONOTONIC, 1},
    {35 | KMP_SCHED_MODIFIER_MONOTONIC, 3},
    {36, 1},
    {36 | KMP_SCHED_MODIFIER_NONMONOTONIC, 5},
    {37, 1},
    {38, 1},
    {66, 1}, /* ordered static */
    {65, 3}, /* ordered static chunked */
    {67, 2}, /* ordered dynamic chunked */
    {68, 1}, /* ordered guided */
};

static void build(int level, int signed_incrs) {
  static const uint64_t tcs_full[] = {1, 2, 3, 7, 31, 32, 33, 64, 100, 257, 1000};
  static const uint64_t tcs_small[] = {1, 7, 33, 100, 257};
  static const uint64_t tcs_min[] = {1, 33, 257};
  const uint64_t *tcs = level >= 2 ? tcs_full : level == 1 ? tcs_small : tcs_min;
  int ntc = level >= 2 ? 11 : level == 1 ? 5 : 3;
  int64_t incrs[4] = {1, 3, 0, 0};
  int nincr = 2;
  if (signed_incrs) {
    incrs[0] = 1, incrs[1] = 2, incrs[2] = -1, incrs[3] = -3;
    nincr = 4;
  }
  const int32_t(*scheds)[2] = api == API_FOR    ? for_scheds
                              : api == API_DIST ? dist_scheds
                                                : dispatch_scheds;
  int nsched = api == API_DISPATCH ? 12 : 6;
  ncfg = 0;
  uint64_t off = 0;
  cfgs = calloc((size_t)ntc * nincr * nsched, sizeof *cfgs);
  for (int t = 0; t < ntc; t++)
    for (int i = 0; i < nincr; i++)
      for (int s = 0; s < nsched; s++) {
        cfg *c = &cfgs[ncfg++];
        c->sched = scheds[s][0];
        c->chunk = scheds[s][1];
        c->incr = incrs[i];
        c->tc = tcs[t];
        c->lb = base_lb(variant, c->incr);
        c->hits_off = off;
        off += c->tc;
      }
  hits = calloc(off, sizeof *hits);
}

static void check_results(void) {
  for (int i = 0; i < ncfg; i++) {
    cfg *c = &cfgs[i];
    int missing = 0, dup = 0;
    for (uint64_t k = 0; k < c->tc; k++) {
      missing += hits[c->hits_off + k] == 0;
      dup += hits[c->hits_off + k] > 1;
    }
    int team_wise = api == API_DIST && c->sched != 93;
    int32_t want_last = team_wise ? (int32_t)n_threads : 1;
    int ok = !missing && !dup && !c->bad && c->last_count == want_last;
    if (!team_wise)
      ok = ok && c->last_owner == c->final_owner;
    else
      ok = ok && (c->last_owner - 1) / 4096 == (c->final_owner - 1) / 4096;
    if (is_ordered(c->sched) && api == API_DISPATCH)
      ok = ok && !c->ord_bad && c->ord_next == (int32_t)c->tc;
    CHECK_MSG(ok,
              "sched %d chunk %lld incr %lld lb %lld trip count %llu: %d missing, %d run twice "
              "or more, %d bad values, %d 'last' (want %d), last seen by %d, final iteration "
              "run by %d%s",
              c->sched & 0xffff, (long long)c->chunk, (long long)c->incr, (long long)c->lb,
              (unsigned long long)c->tc, missing, dup, c->bad, c->last_count, want_last,
              c->last_owner, c->final_owner,
              c->ord_bad ? ", ordered regions out of order" : "");
    if (team_wise) {
      for (uint32_t team = 0; team < n_teams; team++) {
        res *r0 = &team_res[((size_t)i * n_teams + team) * n_threads];
        for (uint32_t t = 0; t < n_threads; t++) {
          res *r = r0 + t;
          CHECK_MSG(r->seen == 1 && r->lb == r0->lb && r->ub == r0->ub && r->st == r0->st &&
                        r->last == r0->last,
                    "sched %d chunk %lld trip count %llu: team %u thread %u got (%lld, %lld, "
                    "%lld, last %d), thread 0 (%lld, %lld, %lld, last %d)",
                    c->sched, (long long)c->chunk, (unsigned long long)c->tc, team, t,
                    (long long)r->lb, (long long)r->ub, (long long)r->st, r->last,
                    (long long)r0->lb, (long long)r0->ub, (long long)r0->st, r0->last);
        }
      }
    }
  }
}

static void run(int a, int v, uint32_t teams, uint32_t threads, uint32_t warp, int level) {
  api = a;
  variant = v;
  n_teams = teams;
  n_threads = threads;
  build(level, v == V4 || v == V8);
  if (a == API_DIST)
    team_res = calloc((size_t)ncfg * teams * threads, sizeof *team_res);
  tf_begin("%s_%s: %u teams x %u threads, warp %u, %d loops", api_name[a], variant_name[v], teams,
           threads, warp, ncfg);
  launch_spmd(teams, threads, warp, 0, e_loops, NULL);
  check_results();
  tf_end();
  free(cfgs);
  free(hits);
  free(team_res);
  team_res = NULL;
}

/* --- combined `distribute parallel for` (clang's SPMD shapes) ------------------- */

/* `target teams distribute parallel for` with default schedules, as the
 * l8 kernel of notes/constructs.c: distribute 91 with chunk = threads in
 * block, then for_static_init_4(33, chunk 1) whose iterations are lb, lb +
 * stride, ... up to the team chunk's ub (the returned ub is not used). */
static int32_t comb_n;
static int32_t *comb_hits;
static int32_t comb_bad;
static int comb_shape;

static void comb_inner(int32_t *gtid, int32_t *btid, int64_t prev_lb, int64_t prev_ub) {
  (void)btid;
  int32_t lb = (int32_t)prev_lb, ub = (int32_t)prev_ub, st = 1, last = 0;
  if (comb_shape == 0) {
    __kmpc_for_static_init_4(&loc_for, *gtid, 33, &last, &lb, &ub, &st, 1, 1);
    for (int32_t iv = lb; (int64_t)iv <= prev_ub; iv += st) {
      if (iv < 0 || iv >= comb_n)
        __atomic_fetch_add(&comb_bad, 1, __ATOMIC_RELAXED);
      else
        __atomic_fetch_add(&comb_hits[iv], 1, __ATOMIC_RELAXED);
    }
  } else {
    /* dist_schedule(static, 8) schedule(static, 2): the chunked loop. */
    __kmpc_for_static_init_4(&loc_for, *gtid, 33, &last, &lb, &ub, &st, 1, 2);
    for (;;) {
      if (ub > (int32_t)prev_ub)
        ub = (int32_t)prev_ub;
      if (lb > ub)
        break;
      for (int32_t iv = lb; iv <= ub; iv++) {
        if (iv < 0 || iv >= comb_n)
          __atomic_fetch_add(&comb_bad, 1, __ATOMIC_RELAXED);
        else
          __atomic_fetch_add(&comb_hits[iv], 1, __ATOMIC_RELAXED);
      }
      lb += st;
      ub += st;
    }
  }
  __kmpc_for_static_fini(&loc_for, *gtid);
}

static void comb_teams(int32_t *gtid, int32_t *btid) {
  (void)btid;
  int32_t n = comb_n;
  int32_t gub = n - 1;
  int32_t lb = 0, ub = gub, st = 1, last = 0;
  int32_t chunk = comb_shape == 0 ? __kmpc_get_hardware_num_threads_in_block() : 8;
  __kmpc_distribute_static_init_4(&loc_dist, *gtid, 91, &last, &lb, &ub, &st, 1, chunk);
  if (ub > gub)
    ub = gub;
  for (int32_t iv = lb; iv < gub + 1;) {
    void *args[2] = {(void *)(intptr_t)lb, (void *)(intptr_t)ub};
    __kmpc_parallel_60(&loc, *gtid, 1, -1, -1, (void *)comb_inner, NULL, args, 2, 0);
    iv += st;
    lb += st;
    ub += st;
    if (ub > gub)
      ub = gub;
    iv = lb;
  }
  __kmpc_distribute_static_fini(&loc_dist, *gtid);
}

static void k_comb(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_spmd, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  int32_t zero = 0, tid = gtid;
  comb_teams(&tid, &zero);
  __kmpc_target_deinit();
}
static void e_comb(void *dyn, void **args) {
  (void)args;
  k_comb(dyn);
}

static void run_comb(int shape, int32_t n, uint32_t teams, uint32_t threads, uint32_t warp) {
  tf_begin("distribute parallel for (%s): %d iterations, %u teams x %u threads, warp %u",
           shape ? "dist_schedule(static,8) schedule(static,2)" : "default schedules", n, teams,
           threads, warp);
  comb_shape = shape;
  comb_n = n;
  comb_bad = 0;
  comb_hits = calloc((size_t)n + 1, sizeof *comb_hits);
  launch_spmd(teams, threads, warp, 0, e_comb, NULL);
  int missing = 0, dup = 0;
  for (int32_t i = 0; i < n; i++) {
    missing += comb_hits[i] == 0;
    dup += comb_hits[i] > 1;
  }
  CHECK_MSG(!missing && !dup && !comb_bad, "%d missing, %d run twice or more, %d out of range",
            missing, dup, comb_bad);
  free(comb_hits);
  tf_end();
}

int main(int argc, char **argv) {
  tf_init(argc, argv);
  int quick = tf_quick();
  /* (threads, warp, level): level 2 runs every configuration. */
  static const uint32_t team_shapes[][3] = {
      {1, 32, 2}, {5, 32, 2}, {33, 32, 2}, {100, 32, 1}, {64, 64, 1}, {100, 64, 0}};
  for (int v = 0; v < 4; v++)
    for (int a = API_FOR; a <= API_DISPATCH; a += API_DISPATCH - API_FOR)
      for (unsigned s = 0; s < sizeof team_shapes / sizeof *team_shapes; s++) {
        int level = (int)team_shapes[s][2];
        if (quick && (level < 2 || team_shapes[s][0] == 5))
          continue;
        run(a, v, 1, team_shapes[s][0], team_shapes[s][1], quick ? 0 : level);
      }
  static const uint32_t dist_shapes[][4] = {
      {1, 1, 32, 2}, {3, 32, 32, 2}, {7, 33, 32, 1}, {13, 1, 32, 2}, {40, 5, 64, 1}};
  for (int v = 0; v < 4; v++)
    for (unsigned s = 0; s < sizeof dist_shapes / sizeof *dist_shapes; s++) {
      if (quick && dist_shapes[s][3] < 2)
        continue;
      run(API_DIST, v, dist_shapes[s][0], dist_shapes[s][1], dist_shapes[s][2],
          quick ? 0 : (int)dist_shapes[s][3]);
    }
  static const int32_t comb_sizes[] = {1, 31, 100, 1000};
  for (int shape = 0; shape < 2; shape++)
    for (unsigned i = 0; i < 4; i++) {
      run_comb(shape, comb_sizes[i], 4, 32, 32);
      if (!quick)
        run_comb(shape, comb_sizes[i], 3, 100, 64);
    }
  return tf_summary();
}
