/* SPMD mode (ExecMode 2) as clang-22 generates `target teams parallel`:
 * the OpenMP view (thread num, num threads, team num, num teams, levels),
 * num_threads in SPMD, and synchronisation: critical (clang's per-lane loop
 * with __kmpc_syncwarp), single, master, masked, barriers between phases,
 * omp locks, flush, and omp_get_wtime/omp_get_wtick. Team sizes include
 * partial warps and both warp sizes. */
#include "omp_shapes.h"

#include <time.h>

#define MAXT 1024
#define MAXTEAMS 8

static int scenario;
static int32_t nt_clause = -1;

/* --- the OpenMP view ------------------------------------------------------- */
typedef struct view {
  int32_t tnum, nthreads, team, nteams, level, active, in_par, hw, hw_n, ws, seen;
} view;
static view views[MAXTEAMS][MAXT];
static view seq_views[MAXTEAMS][MAXT];

static void view_take(view *v) {
  v->tnum = omp_get_thread_num();
  v->nthreads = omp_get_num_threads();
  v->team = omp_get_team_num();
  v->nteams = omp_get_num_teams();
  v->level = omp_get_level();
  v->active = omp_get_active_level();
  v->in_par = omp_in_parallel();
  v->hw = __kmpc_get_hardware_thread_id_in_block();
  v->hw_n = __kmpc_get_hardware_num_threads_in_block();
  v->ws = __kmpc_get_warp_size();
  v->seen++;
}

static void view_outlined(int32_t *gtid, int32_t *btid) {
  (void)gtid;
  (void)btid;
  view_take(&views[omp_get_team_num()][__kmpc_get_hardware_thread_id_in_block()]);
}

/* --- critical, single, master, masked, barriers ---------------------------------- */
static kmp_critical_name crit_lock;
static int32_t crit_counter, crit_counter2;
static int32_t single_runs[16], master_runs, masked_runs, masked_none_runs;
static int32_t master_bad, masked_bad;
static int32_t phase[MAXT];
static int32_t phase_bad;
static int32_t sync_ran; /* threads that ran the region (atomic) */

static void sync_outlined(int32_t *gtid, int32_t *btid) {
  (void)btid;
  int32_t t = omp_get_thread_num(), n = omp_get_num_threads();
  __atomic_fetch_add(&sync_ran, 1, __ATOMIC_RELAXED);
  /* `#pragma omp critical` exactly as clang emits it for nvptx: every
   * thread of the warp takes its turn, with a __kmpc_syncwarp per turn. */
  uint64_t mask = __kmpc_warp_active_thread_mask();
  int32_t hw = __kmpc_get_hardware_thread_id_in_block();
  int32_t hw_n = __kmpc_get_hardware_num_threads_in_block();
  for (int32_t i = 0; i < hw_n; i++) {
    if (hw == i) {
      __kmpc_critical(&loc, *gtid, &crit_lock);
      crit_counter++;
      __kmpc_end_critical(&loc, *gtid, &crit_lock);
    }
    __kmpc_syncwarp(mask);
  }
  /* And a hot loop on the same lock (a plain C loop around it). */
  for (int rep = 0; rep < 20; rep++) {
    __kmpc_critical(&loc, *gtid, &crit_lock);
    crit_counter2 += 1;
    __kmpc_end_critical(&loc, *gtid, &crit_lock);
  }
  /* single, with the implicit barrier clang emits after it. */
  for (int rep = 0; rep < 16; rep++) {
    if (__kmpc_single(&loc, *gtid)) {
      __atomic_fetch_add(&single_runs[rep], 1, __ATOMIC_RELAXED);
      __kmpc_end_single(&loc, *gtid);
    }
    __kmpc_barrier(&loc_single_barrier, *gtid);
  }
  if (__kmpc_master(&loc, *gtid)) {
    __atomic_fetch_add(&master_runs, 1, __ATOMIC_RELAXED);
    if (t != 0)
      __atomic_fetch_add(&master_bad, 1, __ATOMIC_RELAXED);
    __kmpc_end_master(&loc, *gtid);
  }
  if (__kmpc_masked(&loc, *gtid, 3)) {
    __atomic_fetch_add(&masked_runs, 1, __ATOMIC_RELAXED);
    if (t != 3)
      __atomic_fetch_add(&masked_bad, 1, __ATOMIC_RELAXED);
    __kmpc_end_masked(&loc, *gtid);
  }
  if (__kmpc_masked(&loc, *gtid, 5000)) {
    __atomic_fetch_add(&masked_none_runs, 1, __ATOMIC_RELAXED);
    __kmpc_end_masked(&loc, *gtid);
  }
  __kmpc_barrier(&loc_barrier, *gtid);
  /* Phases: write - barrier - read the neighbour's - barrier (both kinds of
   * barrier clang emits in SPMD code). */
  for (int ph = 0; ph < 6; ph++) {
    phase[t] = ph * 10000 + t;
    /* simple_spmd is a barrier of the whole block: only where every thread
     * of the block is in the region. */
    if ((ph & 1) && nt_clause < 0)
      __kmpc_barrier_simple_spmd(&loc, *gtid);
    else
      __kmpc_barrier(&loc_explicit_barrier, *gtid);
    int32_t u = (t + 7) % n;
    if (phase[u] != ph * 10000 + u)
      __atomic_fetch_add(&phase_bad, 1, __ATOMIC_RELAXED);
    __kmpc_barrier(&loc_explicit_barrier, *gtid);
  }
  __kmpc_flush(&loc);
}

/* --- locks ------------------------------------------------------------------------ */
static omp_lock_t lock;
static int32_t lock_counter, lock_test_bad;
static void lock_outlined(int32_t *gtid, int32_t *btid) {
  (void)btid;
  if (omp_get_thread_num() == 0)
    omp_init_lock(&lock);
  __kmpc_barrier(&loc_barrier, *gtid);
  for (int rep = 0; rep < 10; rep++) {
    omp_set_lock(&lock);
    lock_counter++;
    omp_unset_lock(&lock);
  }
  __kmpc_barrier(&loc_barrier, *gtid);
  if (omp_get_thread_num() == 0) {
    if (!omp_test_lock(&lock))
      lock_test_bad++;
    /* Held: a second test fails. */
    if (omp_test_lock(&lock))
      lock_test_bad++;
    omp_unset_lock(&lock);
  }
  __kmpc_barrier(&loc_barrier, *gtid);
  if (omp_get_thread_num() == 0)
    omp_destroy_lock(&lock);
}

/* --- time ---------------------------------------------------------------------------- */
static int32_t time_bad;
static void time_outlined(int32_t *gtid, int32_t *btid) {
  (void)gtid;
  (void)btid;
  double t0 = omp_get_wtime();
  double prev = t0;
  for (int i = 0; i < 200; i++) {
    double t = omp_get_wtime();
    if (t < prev)
      __atomic_fetch_add(&time_bad, 1, __ATOMIC_RELAXED);
    prev = t;
  }
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
  double t1 = omp_get_wtime();
  if (!(t1 - t0 >= 0.0015 && t1 - t0 < 5))
    __atomic_fetch_add(&time_bad, 1, __ATOMIC_RELAXED);
  double tick = omp_get_wtick();
  if (!(tick > 0 && tick < 1e-3))
    __atomic_fetch_add(&time_bad, 1, __ATOMIC_RELAXED);
}


/* --- regions in a row: one closing barrier per region ---------------------------- */
/* A distribute loop's chunks as clang emits them in SPMD kernels: one
 * __kmpc_parallel_60 per chunk, each with its own num_threads, back to back
 * (no barrier of the runtime's before a region), with queries between the
 * regions right after each returns, nested serialised regions inside, and
 * ICV changes inside a region (a data environment of the thread's own, so
 * the per-thread list heads exist and __kmpc_target_deinit frees them). */
#define ROW_REGIONS 12
static const int32_t row_nt[ROW_REGIONS] = {-1, 5, 1, 40, -1, 33, 2, -1, 64, 7, 1, -1};
static int32_t row_serial_if0; /* region 3 and 9 run with if(0) */
static int32_t row_icv_change; /* threads change nthreads-var inside the regions */
static int32_t row_bad, row_ran[ROW_REGIONS], row_nested_bad, row_after_bad;

static void row_nested(int32_t *gtid, int32_t *btid, void *outer_tid, void *level_p) {
  (void)gtid;
  (void)btid;
  /* Serialised inside the active region: one level down, one thread. */
  int32_t t = (int32_t)(intptr_t)outer_tid, level = (int32_t)(intptr_t)level_p;
  int32_t active = omp_get_team_size(1) > 1; /* num_threads(1) regions are inactive */
  if (omp_get_level() != level || omp_get_active_level() != active ||
      omp_get_thread_num() != 0 || omp_get_num_threads() != 1 ||
      omp_get_ancestor_thread_num(1) != t || omp_get_ancestor_thread_num(2) != 0 ||
      omp_in_parallel() != active)
    __atomic_fetch_add(&row_nested_bad, 1, __ATOMIC_RELAXED);
}

static void row_nested2(int32_t *gtid, int32_t *btid, void *outer_tid, void *size) {
  (void)btid;
  int32_t t = (int32_t)(intptr_t)outer_tid, n = (int32_t)(intptr_t)size;
  if (omp_get_level() != 2 || omp_get_team_size(1) != n || omp_get_team_size(2) != 1 ||
      omp_get_ancestor_thread_num(1) != t)
    __atomic_fetch_add(&row_nested_bad, 1, __ATOMIC_RELAXED);
  /* And one more level. */
  void *args[2] = {outer_tid, (void *)(intptr_t)3};
  __kmpc_parallel_60(&loc, *gtid, 1, 4, -1, (void *)row_nested, NULL, args, 2, 0);
  if (omp_get_level() != 2)
    __atomic_fetch_add(&row_nested_bad, 1, __ATOMIC_RELAXED);
}

static void row_outlined(int32_t *gtid, int32_t *btid, void *region_p, void *want_p) {
  (void)btid;
  int32_t region = (int32_t)(intptr_t)region_p, want = (int32_t)(intptr_t)want_p;
  int32_t t = omp_get_thread_num(), n = omp_get_num_threads();
  int32_t hw = __kmpc_get_hardware_thread_id_in_block();
  __atomic_fetch_add(&row_ran[region], 1, __ATOMIC_RELAXED);
  if (row_serial_if0 && (region == 3 || region == 9)) {
    /* if(0): every thread runs the region alone, one level down. */
    if (t != 0 || n != 1 || omp_get_level() != 1 || omp_get_active_level() != 0 ||
        omp_in_parallel())
      __atomic_fetch_add(&row_bad, 1, __ATOMIC_RELAXED);
    return;
  }
  if (t != hw || n != want || omp_get_level() != 1 || omp_get_active_level() != (n > 1) ||
      omp_in_parallel() != (n > 1) || omp_get_team_size(1) != n)
    __atomic_fetch_add(&row_bad, 1, __ATOMIC_RELAXED);
  if (row_icv_change && (t % 3) == 0)
    omp_set_num_threads(t + 1); /* the thread's own copy, dropped at the region's end */
  void *args1[2] = {(void *)(intptr_t)t, (void *)(intptr_t)2};
  __kmpc_parallel_60(&loc, *gtid, 1, -1, -1, (void *)row_nested, NULL, args1, 2, 0);
  void *args2[2] = {(void *)(intptr_t)t, (void *)(intptr_t)n};
  __kmpc_parallel_60(&loc, *gtid, 1, 3, -1, (void *)row_nested2, NULL, args2, 2, 0);
  /* Back at level 1 with the team's view. */
  if (omp_get_level() != 1 || omp_get_thread_num() != t || omp_get_num_threads() != n)
    __atomic_fetch_add(&row_bad, 1, __ATOMIC_RELAXED);
  if (row_icv_change && (t % 3) == 0 && omp_get_max_threads() != t + 1)
    __atomic_fetch_add(&row_bad, 1, __ATOMIC_RELAXED);
}

static void k_row(KernelLaunchEnvironmentTy *dyn_ptr) {
  if (__kmpc_target_init(&env_spmd, dyn_ptr) != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  int32_t block = __kmpc_get_hardware_num_threads_in_block();
  for (int32_t r = 0; r < ROW_REGIONS; r++) {
    int32_t nt = row_nt[r];
    int32_t want = nt < 0 || nt > block ? block : nt;
    void *args[2] = {(void *)(intptr_t)r, (void *)(intptr_t)want};
    int32_t if_expr = !(row_serial_if0 && (r == 3 || r == 9));
    __kmpc_parallel_60(&loc, gtid, if_expr, nt, -1, (void *)row_outlined, NULL, args, 2, 0);
    /* Right after the region: sequential again, whatever the others do. */
    if (omp_get_level() != 0 || omp_in_parallel() || omp_get_active_level() != 0 ||
        omp_get_num_threads() != 1 || omp_get_thread_num() != 0 ||
        omp_get_max_threads() != block)
      __atomic_fetch_add(&row_after_bad, 1, __ATOMIC_RELAXED);
  }
  __kmpc_target_deinit();
}
static void e_row(void *dyn, void **args) {
  (void)args;
  k_row(dyn);
}

void *rtl_heap_alloc(uint64_t bytes);
void rtl_heap_free(void *ptr);

static void test_row(uint32_t teams, uint32_t threads, uint32_t w, int if0, int icv) {
  row_bad = row_nested_bad = row_after_bad = 0;
  memset(row_ran, 0, sizeof row_ran);
  row_serial_if0 = if0;
  row_icv_change = icv;
  tf_begin("SPMD regions in a row (num_threads -1,5,1,40,..., nested serialised%s%s): %u teams "
           "x %u threads, warp %u",
           if0 ? ", if(0)" : "", icv ? ", ICV changes" : "", teams, threads, w);
  /* The per-thread list heads a launch makes come back to the heap: the
   * same block serves the next launch and then this allocation (teams run
   * one after another here). Only where no other runtime allocation (the
   * ICV copies: 64-byte blocks) shares the heads' size class. */
  void *before = NULL, *after = NULL;
  for (int rep = 0; rep < 3; rep++) {
    launch_spmd(teams, threads, w, 0, e_row, NULL);
    void *p = rtl_heap_alloc((uint64_t)threads * sizeof(void *));
    rtl_heap_free(p);
    if (rep == 1)
      before = p;
    if (rep == 2)
      after = p;
  }
  if ((if0 || icv) && threads * sizeof(void *) + 16 > 64)
    CHECK_MSG(before == after, "the per-thread list heads were not freed (%p then %p)", before,
              after);
  for (int r = 0; r < ROW_REGIONS; r++) {
    int32_t nt = row_nt[r];
    int32_t want = nt < 0 || nt > (int32_t)threads ? (int32_t)threads : nt;
    if (if0 && (r == 3 || r == 9))
      want = (int32_t)threads;
    CHECK_MSG(row_ran[r] == (int32_t)(3 * teams) * want, "region %d ran %d times, want %d", r,
              row_ran[r], 3 * (int32_t)teams * want);
  }
  CHECK_EQ(row_bad, 0);
  CHECK_EQ(row_nested_bad, 0);
  CHECK_EQ(row_after_bad, 0);
  tf_end();
}

/* --- the kernel ------------------------------------------------------------------------- */
enum { S_VIEW, S_SYNC, S_LOCK, S_TIME };
static void k_spmd(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_spmd, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  void *fn = scenario == S_VIEW   ? (void *)view_outlined
             : scenario == S_SYNC ? (void *)sync_outlined
             : scenario == S_LOCK ? (void *)lock_outlined
                                  : (void *)time_outlined;
  if (scenario == S_VIEW)
    view_take(&seq_views[omp_get_team_num()][__kmpc_get_hardware_thread_id_in_block()]);
  void *args[1] = {NULL};
  __kmpc_parallel_60(&loc, gtid, 1, nt_clause, -1, fn, NULL, args, 0, 0);
  __kmpc_target_deinit();
}
static void e_spmd(void *dyn, void **args) {
  (void)args;
  k_spmd(dyn);
}

static void test_view(uint32_t teams, uint32_t threads, uint32_t w, int32_t nt) {
  memset(views, 0, sizeof views);
  memset(seq_views, 0, sizeof seq_views);
  scenario = S_VIEW;
  nt_clause = nt;
  tf_begin("SPMD view: %u teams x %u threads, warp %u, num_threads %d", teams, threads, w, nt);
  launch_spmd(teams, threads, w, 0, e_spmd, NULL);
  int32_t want_n = nt < 0 || nt > (int32_t)threads ? (int32_t)threads : nt;
  for (uint32_t team = 0; team < teams; team++) {
    int32_t ran = 0;
    for (uint32_t t = 0; t < threads; t++)
      ran += views[team][t].seen;
    if (nt < 0 || nt >= (int32_t)w)
      CHECK_MSG(ran >= 1 && ran <= want_n, "team %u: %d threads ran the region", team, ran);
    else
      CHECK_MSG(ran == want_n, "team %u: %d threads ran the region, want %d", team, ran, want_n);
    if (nt < 0)
      CHECK_EQ(ran, threads);
    for (uint32_t t = 0; t < threads; t++) {
      view *v = &views[team][t], *s = &seq_views[team][t];
      /* Every thread runs the sequential part in SPMD mode. */
      CHECK_EQ(s->seen, 1);
      CHECK_EQ(s->team, team);
      CHECK_EQ(s->nteams, teams);
      CHECK_EQ(s->level, 0);
      CHECK_EQ(s->hw, t);
      CHECK_EQ(s->hw_n, threads);
      CHECK_EQ(s->ws, w);
      if (!v->seen)
        continue;
      CHECK_EQ(v->seen, 1);
      CHECK_MSG(v->tnum == (int32_t)t, "team %u thread %u: omp_get_thread_num() = %d", team, t,
                v->tnum);
      CHECK_EQ(v->nthreads, ran);
      CHECK_EQ(v->team, team);
      CHECK_EQ(v->nteams, teams);
      CHECK_EQ(v->level, 1);
      CHECK_EQ(v->active, ran > 1);
      CHECK_EQ(v->in_par, ran > 1);
    }
  }
  nt_clause = -1;
  tf_end();
}

static void test_sync(uint32_t threads, uint32_t w, int32_t nt) {
  nt_clause = nt;
  uint32_t want = nt > 0 && (uint32_t)nt < threads ? (uint32_t)nt : threads;
  crit_counter = crit_counter2 = 0;
  memset(single_runs, 0, sizeof single_runs);
  master_runs = masked_runs = masked_none_runs = master_bad = masked_bad = phase_bad = 0;
  scenario = S_SYNC;
  sync_ran = 0;
  tf_begin("SPMD critical/single/master/masked/barriers: %u threads, warp %u, num_threads %d",
           threads, w, nt);
  launch_spmd(2, threads, w, 0, e_spmd, NULL);
  /* A num_threads team may be smaller than asked for (at least 1). */
  uint32_t ran = (uint32_t)sync_ran / 2;
  CHECK_MSG(ran >= 1 && ran <= want, "%u threads ran the region (want up to %u)", ran, want);
  if (nt < 0 || nt < (int32_t)w)
    CHECK_EQ(ran, want);
  threads = ran;
  CHECK_EQ(crit_counter, 2 * threads);
  CHECK_EQ(crit_counter2, 2 * 20 * threads);
  for (int i = 0; i < 16; i++)
    CHECK_MSG(single_runs[i] == 2, "single %d ran %d times in 2 teams", i, single_runs[i]);
  CHECK_EQ(master_runs, 2);
  CHECK_EQ(master_bad, 0);
  CHECK_EQ(masked_runs, threads > 3 ? 2 : 0);
  CHECK_EQ(masked_bad, 0);
  CHECK_EQ(masked_none_runs, 0);
  CHECK_EQ(phase_bad, 0);
  nt_clause = -1;
  tf_end();
}

static void test_lock(uint32_t threads) {
  lock_counter = lock_test_bad = 0;
  scenario = S_LOCK;
  tf_begin("omp locks: %u threads", threads);
  launch_spmd(1, threads, 32, 0, e_spmd, NULL);
  CHECK_EQ(lock_counter, 10 * threads);
  CHECK_EQ(lock_test_bad, 0);
  tf_end();
}

static void test_time(void) {
  time_bad = 0;
  scenario = S_TIME;
  tf_begin("omp_get_wtime is monotonic, omp_get_wtick small and positive");
  launch_spmd(2, 8, 32, 0, e_spmd, NULL);
  CHECK_EQ(time_bad, 0);
  tf_end();
}

int main(int argc, char **argv) {
  tf_init(argc, argv);
  int quick = tf_quick();
  static const uint32_t shapes[][3] = {{1, 1, 32},  {3, 5, 32},  {2, 33, 32},  {4, 100, 32},
                                       {1, 256, 32}, {2, 64, 64}, {3, 100, 64}, {1, 1024, 32}};
  for (unsigned s = 0; s < sizeof shapes / sizeof *shapes; s++)
    if (!quick || s < 4)
      test_view(shapes[s][0], shapes[s][1], shapes[s][2], -1);
  test_view(2, 64, 32, 5);
  test_view(2, 64, 32, 40);
  test_view(1, 100, 64, 1);
  static const uint32_t sync_shapes[][2] = {{1, 32}, {5, 32},   {33, 32}, {100, 32},
                                            {64, 64}, {100, 64}, {256, 32}};
  for (unsigned s = 0; s < sizeof sync_shapes / sizeof *sync_shapes; s++)
    if (!quick || s < 4)
      test_sync(sync_shapes[s][0], sync_shapes[s][1], -1);
  /* num_threads in SPMD: the region's team ends mid-warp. */
  test_sync(64, 32, 40);
  test_sync(64, 32, 5);
  test_lock(1);
  test_lock(70);
  test_time();
  static const uint32_t row_shapes[][3] = {{1, 64, 32}, {2, 100, 32}, {2, 96, 64}, {1, 1, 32},
                                           {1, 256, 32}, {2, 3, 32}};
  for (unsigned s = 0; s < sizeof row_shapes / sizeof *row_shapes; s++)
    for (int mode = 0; mode < 3; mode++)
      if (!quick || s < 3)
        test_row(row_shapes[s][0], row_shapes[s][1], row_shapes[s][2], mode == 1, mode == 2);
  return tf_summary();
}
