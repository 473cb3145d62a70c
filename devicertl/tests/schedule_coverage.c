/* Host test of devicertl/src/workshare.c: every iteration exactly once and
 * exactly one "last" flag, for static (for, distribute, distribute+for as
 * clang-22 nests them in SPMD kernels) and dispatch schedules, 4/4u/8/8u,
 * counting up and down, empty loops, extremes of each type, thread counts
 * that do not divide the trip count, more threads than iterations.
 *
 * The rtl.h functions workshare.c uses are stubbed here (ids set by the
 * test; rtl_barrier is a pthread barrier). Build and run, also under TSan:
 *   clang-22 -std=c11 -O1 -g -Idevicertl/src devicertl/tests/schedule_coverage.c \
 *     devicertl/src/workshare.c -lpthread -o /tmp/sc && /tmp/sc
 *   (add -fsanitize=thread for the ThreadSanitizer run)
 */
#define _GNU_SOURCE
#include "rtl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stubs ---------------------------------------------------------------- */
static _Thread_local uint32_t t_tid, t_nthreads = 1, t_team, t_nteams = 1;
/* The block size and execution mode distribute init widens chunks by
 * (0 and false outside test_dpf: never). */
static _Thread_local uint32_t t_block;
static bool g_spmd;
/* The kernel's thread limit (what OpenMPOpt folds clang's chunk to); 0:
 * none. */
static uint32_t g_limit;
static pthread_barrier_t g_bar;
static bool g_threaded;
uint32_t rtl_thread_num(void) { return t_tid; }
uint32_t rtl_num_threads(void) { return t_nthreads; }
uint32_t rtl_team_num(void) { return t_team; }
uint32_t rtl_num_teams(void) { return t_nteams; }
uint32_t rtl_level(void) { return t_nthreads > 1; }
uint32_t rtl_active_level(void) { return t_nthreads > 1; }
void rtl_barrier(void) {
  if (g_threaded && t_nthreads > 1)
    pthread_barrier_wait(&g_bar);
}
uint32_t plat_thread_id(void) { return t_tid; }
uint32_t plat_block_size(void) { return t_block; }
bool rtl_is_frontend_spmd(void) { return g_spmd; }
uint32_t rtl_kernel_thread_limit(void) { return g_limit; }
void rtl_fatal(const char *what) {
  fprintf(stderr, "rtl_fatal: %s\n", what);
  abort();
}
/* What distribute_static_init told the reductions: the chunks this team's
 * loop runs (checked against the loop test_dpf runs). */
static _Thread_local uint64_t t_team_chunks;
static _Thread_local int t_team_chunks_calls;
void rtl_reduction_distribute(bool has_chunk, uint64_t first, uint64_t last, int64_t stride,
                              bool is_signed) {
  t_team_chunks = has_chunk ? rtl_loop_chunks(first, last, stride, is_signed) : 0;
  t_team_chunks_calls++;
}
static uint32_t g_run_kind = 1; static int32_t g_run_chunk = 0;
void rtl_run_schedule(uint32_t *kind, int32_t *chunk) {
  *kind = g_run_kind;
  *chunk = g_run_chunk;
}

/* entry points under test */
void __kmpc_for_static_init_4(IdentTy *, int32_t, int32_t, int32_t *, int32_t *, int32_t *,
                              int32_t *, int32_t, int32_t);
void __kmpc_for_static_init_4u(IdentTy *, int32_t, int32_t, int32_t *, uint32_t *, uint32_t *,
                               int32_t *, int32_t, int32_t);
void __kmpc_for_static_init_8(IdentTy *, int32_t, int32_t, int32_t *, int64_t *, int64_t *,
                              int64_t *, int64_t, int64_t);
void __kmpc_for_static_init_8u(IdentTy *, int32_t, int32_t, int32_t *, uint64_t *, uint64_t *,
                               int64_t *, int64_t, int64_t);
void __kmpc_distribute_static_init_4(IdentTy *, int32_t, int32_t, int32_t *, int32_t *,
                                     int32_t *, int32_t *, int32_t, int32_t);
void __kmpc_distribute_static_init_4u(IdentTy *, int32_t, int32_t, int32_t *, uint32_t *,
                                      uint32_t *, int32_t *, int32_t, int32_t);
void __kmpc_distribute_static_init_8(IdentTy *, int32_t, int32_t, int32_t *, int64_t *,
                                     int64_t *, int64_t *, int64_t, int64_t);
void __kmpc_distribute_static_init_8u(IdentTy *, int32_t, int32_t, int32_t *, uint64_t *,
                                      uint64_t *, int64_t *, int64_t, int64_t);
void __kmpc_dispatch_init_4(IdentTy *, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t);
void __kmpc_dispatch_init_4u(IdentTy *, int32_t, int32_t, uint32_t, uint32_t, int32_t, int32_t);
void __kmpc_dispatch_init_8(IdentTy *, int32_t, int32_t, int64_t, int64_t, int64_t, int64_t);
void __kmpc_dispatch_init_8u(IdentTy *, int32_t, int32_t, uint64_t, uint64_t, int64_t, int64_t);
int32_t __kmpc_dispatch_next_4(IdentTy *, int32_t, int32_t *, int32_t *, int32_t *, int32_t *);
int32_t __kmpc_dispatch_next_4u(IdentTy *, int32_t, int32_t *, uint32_t *, uint32_t *, int32_t *);
int32_t __kmpc_dispatch_next_8(IdentTy *, int32_t, int32_t *, int64_t *, int64_t *, int64_t *);
int32_t __kmpc_dispatch_next_8u(IdentTy *, int32_t, int32_t *, uint64_t *, uint64_t *, int64_t *);
void __kmpc_dispatch_deinit(IdentTy *, int32_t);

typedef __int128 wide;
enum { T_I32, T_U32, T_I64, T_U64 };
static const char *tname[] = {"i32", "u32", "i64", "u64"};
static wide tmin(int t) {
  return t == T_I32 ? INT32_MIN : t == T_I64 ? (wide)INT64_MIN : 0;
}
static wide tmax(int t) {
  return t == T_I32 ? INT32_MAX : t == T_U32 ? UINT32_MAX : t == T_I64 ? INT64_MAX : (wide)UINT64_MAX;
}

/* One static_init call on typed storage; values widened. */
typedef struct { wide lb, ub, st; int32_t last; } sres;
static sres call_static(bool dist, int t, int32_t sched, wide lb, wide ub, int64_t incr, int64_t chunk) {
  sres r;
  int32_t last = -1;
  switch (t) {
  case T_I32: {
    int32_t l = (int32_t)lb, u = (int32_t)ub, s = 0;
    (dist ? __kmpc_distribute_static_init_4 : __kmpc_for_static_init_4)(0, 0, sched, &last, &l, &u, &s, (int32_t)incr, (int32_t)chunk);
    r = (sres){l, u, s, last};
    break;
  }
  case T_U32: {
    uint32_t l = (uint32_t)lb, u = (uint32_t)ub;
    int32_t s = 0;
    (dist ? __kmpc_distribute_static_init_4u : __kmpc_for_static_init_4u)(0, 0, sched, &last, &l, &u, &s, (int32_t)incr, (int32_t)chunk);
    r = (sres){l, u, s, last};
    break;
  }
  case T_I64: {
    int64_t l = (int64_t)lb, u = (int64_t)ub, s = 0;
    (dist ? __kmpc_distribute_static_init_8 : __kmpc_for_static_init_8)(0, 0, sched, &last, &l, &u, &s, incr, chunk);
    r = (sres){l, u, s, last};
    break;
  }
  default: {
    uint64_t l = (uint64_t)lb, u = (uint64_t)ub;
    int64_t s = 0;
    (dist ? __kmpc_distribute_static_init_8u : __kmpc_for_static_init_8u)(0, 0, sched, &last, &l, &u, &s, incr, chunk);
    r = (sres){l, u, s, last};
    break;
  }
  }
  if (last != 0 && last != 1) {
    fprintf(stderr, "plastiter not written (%d)\n", last);
    exit(1);
  }
  return r;
}

/* ---- coverage bookkeeping: intervals in index space -------------------------- */
typedef struct { wide a, b; int owner; } ival;
/* Per-thread interval lists (no locks: they would order the threads under
 * test and hide races from ThreadSanitizer); merged after the threads join. */
static _Thread_local ival *g_iv;
static _Thread_local size_t g_niv, g_capiv;
static struct { ival *iv; size_t n; } g_thr_iv[256];
static int g_fail;
static char g_ctx[512];

static void fail(const char *msg) {
  if (g_fail++ < 20)
    fprintf(stderr, "FAIL %s: %s\n", g_ctx, msg);
}

/* Loop: values lb + k*incr, k = 0..last (last = -1: empty). */
typedef struct { wide lb, ub; int64_t incr; wide last; } loopdef;
static loopdef mkloop(wide lb, wide ub, int64_t incr) {
  loopdef L = {lb, ub, incr, -1};
  if (incr > 0 && lb <= ub) L.last = (ub - lb) / incr;
  if (incr < 0 && lb >= ub) L.last = (lb - ub) / -(wide)incr;
  return L;
}

/* Record values [va, vb] executed (in the loop's direction) by `owner`. */
static void add_values(const loopdef *L, wide va, wide vb, int owner) {
  wide d = L->incr;
  if ((va - L->lb) % d != 0) { fail("chunk start not on an iteration"); return; }
  wide a = (va - L->lb) / d, b;
  /* vb may be past the last iteration only when clamped by the caller */
  b = (vb - L->lb) / d;
  if (b > L->last) b = L->last;
  if (a < 0 || a > L->last) { fail("chunk outside the loop"); return; }
  if (b < a) return;
  if (g_niv == g_capiv) {
    g_capiv = g_capiv ? 2 * g_capiv : 1024;
    g_iv = realloc(g_iv, g_capiv * sizeof *g_iv);
  }
  g_iv[g_niv++] = (ival){a, b, owner};
}

static int cmp_iv(const void *x, const void *y) {
  const ival *p = x, *q = y;
  return p->a < q->a ? -1 : p->a > q->a;
}

/* Each index 0..last exactly once; last_owner (or -1 for none) must be
 * the owner of index last. */
static void check_cover(const loopdef *L, int nlast, int last_owner) {
  qsort(g_iv, g_niv, sizeof *g_iv, cmp_iv);
  wide next = 0;
  int owner_of_last = -1;
  for (size_t i = 0; i < g_niv; i++) {
    if (g_iv[i].a != next) { fail(g_iv[i].a < next ? "iteration executed twice" : "iteration missed"); break; }
    next = g_iv[i].b + 1;
    if (g_iv[i].b == L->last) owner_of_last = g_iv[i].owner;
  }
  if (!g_fail && next != L->last + 1) fail("iterations missed at the end");
  if (L->last < 0) {
    if (nlast != 0) fail("last flag set for an empty loop");
  } else {
    if (nlast != 1) { char m[64]; snprintf(m, 64, "%d last flags", nlast); fail(m); }
    else if (last_owner != owner_of_last) fail("last flag on a thread without the last iteration");
  }
  g_niv = 0;
}

/* clang's loop shapes after static_init (incr > 0 shown; mirrored for < 0):
 *  A  (no chunk):  ub = min(ub, GUB); run [lb, ub]
 *  B1 (distribute in SPMD): for (; lb <= GUB; lb += st, ub += st) run [lb, min(ub, GUB)]
 *  B2 (for chunked): while (lb <= min(ub,GUB)) { run; lb += st; ub += st; }  */
static bool before(int64_t incr, wide a, wide b) { return incr > 0 ? a <= b : a >= b; }
static wide tighter(int64_t incr, wide a, wide b) { return incr > 0 ? (a < b ? a : b) : (a > b ? a : b); }

static void run_shape(char shape, const loopdef *L, sres r, int owner) {
  wide gub = L->ub, lb = r.lb, ub = r.ub;
  if (shape == 'A') {
    ub = tighter(L->incr, ub, gub);
    if (before(L->incr, lb, ub)) add_values(L, lb, ub, owner);
    return;
  }
  for (long guard = 0;; guard++) {
    if (guard > 3000000) { fail("chunk loop does not end"); return; }
    wide cub = tighter(L->incr, ub, gub);
    if (shape == '1') {
      if (!before(L->incr, lb, gub)) return;
      if (before(L->incr, lb, cub)) add_values(L, lb, cub, owner);
      else if (guard > 0) return; /* lb-ub distance is constant: rest is empty too */
    } else {
      if (!before(L->incr, lb, cub)) return;
      add_values(L, lb, cub, owner);
    }
    if (r.st == 0) { fail("zero stride"); return; }
    lb += r.st;
    ub += r.st;
  }
}

static long g_cases;

static void test_static(int t, int32_t sched, wide lb, wide ub, int64_t incr, int64_t chunk,
                        uint32_t nthreads, uint32_t nteams) {
  loopdef L = mkloop(lb, ub, incr);
  int32_t base = sched & 0xff;
  bool dist = base >= 91;
  bool chunkone = base == 93;
  bool chunked = base == 33 || base == 65 || base == 93 || (base == 91 && chunk > 0) ||
                 (base == 45 && chunk > 0);
  const char *shapes = chunked ? (base == 45 ? "A2" : "12") : "A";
  for (const char *sh = shapes; *sh; sh++) {
    snprintf(g_ctx, sizeof g_ctx, "%s sched %d [%lld..%lld] incr %lld chunk %lld threads %u teams %u shape %c",
             tname[t], sched, (long long)lb, (long long)ub, (long long)incr, (long long)chunk, nthreads, nteams, *sh);
    int nlast = 0, last_owner = -1;
    uint32_t nte = (dist) ? nteams : 1, nth = (dist && !chunkone) ? 1 : nthreads;
    for (uint32_t tm = 0; tm < nte; tm++)
      for (uint32_t th = 0; th < nth; th++) {
        t_team = tm; t_nteams = nte; t_tid = th; t_nthreads = nth;
        sres r = call_static(dist, t, sched, lb, ub, incr, chunk);
        int owner = (int)(tm * nth + th);
        if (r.last) { nlast++; last_owner = owner; }
        if (L.last >= 0) run_shape(*sh, &L, r, owner);
      }
    check_cover(&L, nlast, last_owner);
    g_cases++;
  }
}

/* The distribute chunk clang-22's composite loop gets for a block of
 * `block` threads (workshare.c, widened_chunk): when its chunk is the block
 * size or the kernel's thread limit, in frontend-SPMD kernels only,
 * 1 / RTL_TEAM_CHUNKS of a team's share rounded up to a multiple of clang's
 * chunk (at most RTL_WIDEN_MAX of them when that is built > 0; rtl.h), and
 * small enough that clang's last step of the bounds by the stride (chunk x
 * teams) from the last value stays in the type. */
static wide expected_dist_chunk(int t, wide lb, wide ub, int64_t dchunk, uint32_t block, uint32_t nteams) {
  wide trip = ub - lb + 1, k = 1;
  if (g_spmd && (dchunk == (int64_t)block || (g_limit > 0 && dchunk == (int64_t)g_limit))) {
    wide share = (trip + (wide)nteams * RTL_TEAM_CHUNKS - 1) / ((wide)nteams * RTL_TEAM_CHUNKS);
    k = (share + dchunk - 1) / dchunk;
    if (RTL_WIDEN_MAX > 0 && k > RTL_WIDEN_MAX)
      k = RTL_WIDEN_MAX;
    wide room = ub < 0 ? tmax(t) : tmax(t) - ub;
    if (k * dchunk > room / nteams)
      k = room / nteams / dchunk;
    if (k == 0)
      k = 1;
  }
  return k * dchunk < trip ? k * dchunk : trip;
}

/* distribute (91, chunk = block size) then, per team chunk, the inner
 * `for` (33, chunk 1) iterating iv = lb; iv <= prev_ub; iv += st. */
static void test_dpf(int t, wide lb, wide ub, int64_t dchunk, uint32_t nthreads, uint32_t nteams, int64_t ichunk) {
  loopdef L = mkloop(lb, ub, 1);
  snprintf(g_ctx, sizeof g_ctx, "dpf %s [%lld..%lld] dchunk %lld ichunk %lld threads %u teams %u", tname[t],
           (long long)lb, (long long)ub, (long long)dchunk, (long long)ichunk, nthreads, nteams);
  int nlast = 0, last_owner = -1;
  for (uint32_t tm = 0; tm < nteams; tm++) {
    t_team = tm; t_nteams = nteams; t_tid = 0; t_nthreads = 1; t_block = nthreads;
    t_team_chunks_calls = 0;
    sres d = call_static(true, t, 91, lb, ub, 1, dchunk);
    if (t_team_chunks_calls != 1)
      fail("distribute init did not report its chunk count once");
    if (tm == 0 && ub >= lb && d.ub - d.lb + 1 != expected_dist_chunk(t, lb, ub, dchunk, nthreads, nteams)) {
      char m[96];
      snprintf(m, sizeof m, "first distribute chunk of %lld iterations, %lld expected",
               (long long)(d.ub - d.lb + 1),
               (long long)expected_dist_chunk(t, lb, ub, dchunk, nthreads, nteams));
      fail(m);
    }
    uint64_t reported = t_team_chunks, ran = 0;
    wide dlb = d.lb, dub = d.ub < ub ? d.ub : ub;
    for (long guard = 0; dlb <= ub; guard++, ran++) {
      if (guard > 1000000) { fail("distribute loop does not end"); break; }
      for (uint32_t th = 0; th < nthreads; th++) {
        t_tid = th; t_nthreads = nthreads;
        sres f = call_static(false, t, 33, dlb, dub, 1, ichunk);
        int owner = (int)(tm * nthreads + th);
        /* the combined construct's last iteration: inner last within the
         * team's last distribute chunk */
        if (f.last && d.last && dub == ub) { nlast++; last_owner = owner; }
        if (ichunk == 1) {
          for (wide iv = f.lb; iv <= dub; iv += f.st) add_values(&L, iv, iv, owner);
        } else {
          /* shape B2 against the distribute chunk's bound */
          loopdef inner = L;
          inner.ub = dub;
          run_shape('2', &inner, f, owner);
        }
      }
      t_tid = 0; t_nthreads = 1;
      dlb += d.st;
      dub = dub + d.st < ub ? dub + d.st : ub;
      if (d.st <= 0) { fail("bad distribute stride"); break; }
    }
    /* More than it runs would strand a deferred reduction's values. (An
     * unsigned loop "to -1" reaches the runtime as the type's whole range;
     * clang never calls it for an empty loop.) */
    if (ub >= tmin(t) && reported != ran) {
      char m[96];
      snprintf(m, sizeof m, "team %u: %llu chunks reported, %llu run", tm,
               (unsigned long long)reported, (unsigned long long)ran);
      fail(m);
    }
  }
  check_cover(&L, nlast, last_owner);
  g_cases++;
}

/* ---- dispatch, with real threads ------------------------------------------- */
typedef struct {
  int t; int32_t sched; wide lb, ub; int64_t st, chunk; uint32_t n;
  int nested; /* run a solo (1-thread) dispatch loop inside each chunk */
  int nlast; int last_owner;
  loopdef L2; int nlast2; int last_owner2; /* second (nowait) loop */
  int32_t sched2; int64_t chunk2;
} dspec;
static dspec g_d;

/* One dispatch loop as clang emits it: lb/ub variables hold the bounds
 * before init; then next() until 0; then deinit. */
static void run_dispatch(int t, int32_t sched, wide lb, wide ub, int64_t st, int64_t chunk,
                         int owner, int *nlast, int *last_owner, const loopdef *L, int nested) {
  int32_t last = 0;
  /* typed bodies */
#define DISPATCH_BODY(T, ST, INIT, NEXT)                                                   \
  {                                                                                        \
    T l = (T)lb, u = (T)ub;                                                                \
    ST s = 1;                                                                              \
    INIT(0, 0, sched, (T)lb, (T)ub, (ST)st, (ST)chunk);                                    \
    while (NEXT(0, 0, &last, &l, &u, &s)) {                                                \
      add_values(L, (wide)l, (wide)u, owner);                                              \
      if (last) {                                                                          \
        __atomic_fetch_add(nlast, 1, __ATOMIC_RELAXED);                                    \
        __atomic_store_n(last_owner, owner, __ATOMIC_RELAXED);                             \
      }                                                                                    \
      if (nested) {                                                                        \
        /* a nested parallel region of one thread runs its own loop */                     \
        uint32_t saved_n = t_nthreads;                                                     \
        t_nthreads = 1;                                                                    \
        int32_t il = 0; int32_t iu = 4, is = 1, ilast = 0, cnt = 0;                        \
        __kmpc_dispatch_init_4(0, 0, 35, 0, 4, 1, 1);                                      \
        while (__kmpc_dispatch_next_4(0, 0, &ilast, &il, &iu, &is))                        \
          cnt += iu - il + 1;                                                              \
        __kmpc_dispatch_deinit(0, 0);                                                      \
        t_nthreads = saved_n;                                                              \
        if (cnt != 5) fail("nested solo loop lost iterations");                            \
      }                                                                                    \
      last = 0;                                                                            \
    }                                                                                      \
    __kmpc_dispatch_deinit(0, 0);                                                          \
  }
  switch (t) {
  case T_I32: DISPATCH_BODY(int32_t, int32_t, __kmpc_dispatch_init_4, __kmpc_dispatch_next_4) break;
  case T_U32: DISPATCH_BODY(uint32_t, int32_t, __kmpc_dispatch_init_4u, __kmpc_dispatch_next_4u) break;
  case T_I64: DISPATCH_BODY(int64_t, int64_t, __kmpc_dispatch_init_8, __kmpc_dispatch_next_8) break;
  default: DISPATCH_BODY(uint64_t, int64_t, __kmpc_dispatch_init_8u, __kmpc_dispatch_next_8u) break;
  }
}

static loopdef g_L1;
static void *dispatch_thread(void *arg) {
  t_tid = (uint32_t)(uintptr_t)arg;
  t_nthreads = g_d.n;
  run_dispatch(g_d.t, g_d.sched, g_d.lb, g_d.ub, g_d.st, g_d.chunk, (int)t_tid, &g_d.nlast,
               &g_d.last_owner, &g_L1, g_d.nested);
  /* nowait: straight into a second loop over a different range, recorded apart */
  run_dispatch(g_d.t, g_d.sched2, g_d.L2.lb, g_d.L2.ub, g_d.L2.incr, g_d.chunk2, (int)t_tid + 1000,
               &g_d.nlast2, &g_d.last_owner2, &g_d.L2, 0);
  g_thr_iv[t_tid].iv = g_iv;
  g_thr_iv[t_tid].n = g_niv;
  g_iv = NULL;
  g_niv = g_capiv = 0;
  return NULL;
}

/* Second-loop intervals are told apart by owner >= 1000. */
static void split_and_check(void) {
  ival *a = malloc((g_niv + 1) * sizeof *a), *b = malloc((g_niv + 1) * sizeof *b);
  size_t na = 0, nb = 0;
  for (size_t i = 0; i < g_niv; i++) {
    if (g_iv[i].owner >= 1000) b[nb++] = g_iv[i];
    else a[na++] = g_iv[i];
  }
  memcpy(g_iv, a, na * sizeof *a); g_niv = na;
  check_cover(&g_L1, g_d.nlast, g_d.last_owner);
  memcpy(g_iv, b, nb * sizeof *b); g_niv = nb;
  strncat(g_ctx, " [second loop]", sizeof g_ctx - strlen(g_ctx) - 1);
  check_cover(&g_d.L2, g_d.nlast2, g_d.last_owner2);
  free(a); free(b);
}

static void test_dispatch(int t, int32_t sched, wide lb, wide ub, int64_t st, int64_t chunk, uint32_t n,
                          int nested) {
  memset(&g_d, 0, sizeof g_d);
  g_d = (dspec){.t = t, .sched = sched, .lb = lb, .ub = ub, .st = st, .chunk = chunk, .n = n, .nested = nested,
                .last_owner = -1, .last_owner2 = -1};
  g_L1 = mkloop(lb, ub, st);
  /* second loop: dynamic 3 over 0..(n*5) (or guided when the first is dynamic) */
  g_d.L2 = mkloop(0, (wide)n * 5 + 2, 1);
  g_d.sched2 = (sched & 0xff) == 35 ? 36 : 35;
  g_d.chunk2 = 3;
  snprintf(g_ctx, sizeof g_ctx, "dispatch %s sched %d [%lld..%lld] st %lld chunk %lld threads %u nested %d run(%d,%d)",
           tname[t], sched, (long long)lb, (long long)ub, (long long)st, (long long)chunk, n, nested,
           g_run_kind, g_run_chunk);
  pthread_t th[256];
  g_threaded = true;
  pthread_barrier_init(&g_bar, NULL, n);
  for (uint32_t i = 0; i < n; i++) pthread_create(&th[i], NULL, dispatch_thread, (void *)(uintptr_t)i);
  for (uint32_t i = 0; i < n; i++) pthread_join(th[i], NULL);
  for (uint32_t i = 0; i < n; i++) {
    for (size_t k = 0; k < g_thr_iv[i].n; k++) {
      if (g_niv == g_capiv) {
        g_capiv = g_capiv ? 2 * g_capiv : 1024;
        g_iv = realloc(g_iv, g_capiv * sizeof *g_iv);
      }
      g_iv[g_niv++] = g_thr_iv[i].iv[k];
    }
    free(g_thr_iv[i].iv);
  }
  pthread_barrier_destroy(&g_bar);
  g_threaded = false;
  split_and_check();
  g_cases++;
}

/* ---- case generation --------------------------------------------------------- */
static void ranges(int t, void (*f)(int, wide, wide, int64_t, void *), void *ctx) {
  static const int64_t incrs[] = {1, 2, 3, 7, -1, -2, -5};
  static const wide lens[] = {0, 1, 2, 3, 5, 31, 32, 33, 64, 100, 257};
  for (size_t ii = 0; ii < sizeof incrs / sizeof *incrs; ii++) {
    int64_t incr = incrs[ii];
    wide mag = incr > 0 ? incr : -(wide)incr;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
      for (int pad = 0; pad < (mag > 1 ? 2 : 1); pad++) {
        wide len = lens[li];
        /* distance from lb to ub; an empty loop has ub one step behind lb */
        wide span = len ? (len - 1) * mag + (pad ? mag - 1 : 0) : -1;
        wide starts[7];
        int ns = 0;
        starts[ns++] = 0;
        starts[ns++] = 10;
        if (tmin(t) < 0) starts[ns++] = -37;
        if (incr > 0) {
          starts[ns++] = tmax(t) - span;
          starts[ns++] = tmin(t);
          starts[ns++] = tmax(t) - span - 3;
        } else {
          starts[ns++] = tmin(t) + span;
          starts[ns++] = tmax(t);
          starts[ns++] = tmin(t) + span + 3;
        }
        for (int si = 0; si < ns; si++) {
          wide lb = starts[si];
          wide ub = incr > 0 ? lb + span : lb - span;
          if (lb < tmin(t) || lb > tmax(t) || ub < tmin(t) || ub > tmax(t)) continue;
          f(t, lb, ub, incr, ctx);
        }
      }
  }
}

static const uint32_t g_threads[] = {1, 2, 3, 7, 32, 33, 100};

static void static_cases(int t, wide lb, wide ub, int64_t incr, void *ctx) {
  static const int32_t scheds[] = {33, 34, 45, 65, 66, 91, 92, 93,
                                   33 | KMP_SCHED_MODIFIER_MONOTONIC, 34 | KMP_SCHED_MODIFIER_NONMONOTONIC};
  static const int64_t chunks[] = {0, 1, 2, 3, 8, 64};
  for (size_t s = 0; s < sizeof scheds / sizeof *scheds; s++)
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
      for (size_t n = 0; n < sizeof g_threads / sizeof *g_threads; n++) {
        int32_t sc = scheds[s] & 0xff;
        if ((sc == 33 || sc == 65 || sc == 93) && chunks[c] == 0) continue; /* clang always passes a chunk */
        uint32_t nth = g_threads[n], ntm = sc == 93 ? 3 : nth;
        test_static(t, scheds[s], lb, ub, incr, chunks[c], nth, ntm);
      }
}

static void huge_static(void) {
  /* trip counts beyond enumeration: blocks, one interval each */
  for (int t = 0; t < 4; t++)
    for (size_t n = 0; n < sizeof g_threads / sizeof *g_threads; n++) {
      test_static(t, 34, tmin(t), tmax(t) - 1, 1, 1, g_threads[n], 1);
      test_static(t, 34, tmin(t) + 1, tmax(t), 1, 1, g_threads[n], 1);
      test_static(t, 92, tmin(t), tmax(t) - 1, 1, 1, 1, g_threads[n]);
      test_static(t, 34, tmax(t), tmin(t), -1, 1, g_threads[n], 1);
      /* chunked shapes need chunk * threads to fit the stride type */
      test_static(t, 45, tmax(t) - ((wide)1 << 30), tmax(t) - 2, 1, 4, g_threads[n], 1);
      if (t >= T_I64) test_static(t, 33, tmax(t) - ((wide)1 << 40), tmax(t), 1, (int64_t)1 << 34, 7, 1);
      test_static(t, 34, tmin(t), tmax(t), 3, 1, g_threads[n], 1);
    }
}

/* Loops too long to enumerate: distribute init alone, for every team, as
 * clang's loop steps the bounds after each chunk (LB += ST, UB += ST in
 * the loop's type): a widened chunk never makes that step leave the type
 * (int loops of ~2^31 iterations on thousands of teams), and the chunks
 * still cover the loop, each team at most RTL_TEAM_CHUNKS of them. */
static void test_dist_steps_fit(int t, wide ub, uint32_t block, uint32_t nteams) {
  snprintf(g_ctx, sizeof g_ctx, "distribute steps %s [0..%llu] block %u teams %u", tname[t],
           (unsigned long long)ub, block, nteams);
  wide covered = 0;
  for (uint32_t tm = 0; tm < nteams; tm++) {
    t_team = tm; t_nteams = nteams; t_tid = 0; t_nthreads = 1; t_block = block;
    sres d = call_static(true, t, 91, 0, ub, 1, block);
    if (d.lb > ub)
      continue;
    if (d.st <= 0) { fail("bad distribute stride"); return; }
    wide chunk = d.ub - d.lb + 1, runs = (ub - d.lb) / d.st + 1;
    wide last_lb = d.lb + (runs - 1) * d.st;
    wide last_ub = last_lb + chunk - 1 < ub ? last_lb + chunk - 1 : ub;
    if (chunk > block && (last_lb + d.st > tmax(t) || last_ub + d.st > tmax(t))) {
      fail("a widened chunk's stride steps clang's bounds past the type's maximum");
      return;
    }
    if (chunk != expected_dist_chunk(t, 0, ub, block, block, nteams)) {
      fail("distribute chunk differs from the rule");
      return;
    }
    /* Unless the type's room made the chunk smaller, a team runs at most
     * RTL_TEAM_CHUNKS of them. */
    wide share = (ub + 1 + (wide)nteams * RTL_TEAM_CHUNKS - 1) / ((wide)nteams * RTL_TEAM_CHUNKS);
    wide full = (share + block - 1) / block * block;
    if (RTL_WIDEN_MAX == 0 && chunk == full && runs > RTL_TEAM_CHUNKS) {
      fail("a team got more than RTL_TEAM_CHUNKS widened chunks");
      return;
    }
    covered += last_ub - last_lb + 1 + (runs - 1) * chunk;
  }
  if (covered != ub + 1)
    fail("the teams' chunks do not cover the loop");
  g_cases++;
}

int main(void) {
  for (int t = 0; t < 4; t++) ranges(t, static_cases, NULL);
  huge_static();
  long nstatic = g_cases;
  /* distribute + for as clang nests them in SPMD kernels */
  static const wide ns[] = {0, 1, 5, 127, 128, 129, 1000, 4099, 20011, 65537};
  /* in generic kernels, then in SPMD ones (whose chunks of one block may
   * be widened) */
  for (int spmd = 0; spmd < 2; spmd++) {
    g_spmd = spmd;
    for (int t = 0; t < 4; t++)
      for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        for (uint32_t teams = 1; teams <= 9; teams += 4)
          for (uint32_t th = 1; th <= 130; th = th * 3 + 1) {
            test_dpf(t, 0, ns[i] - 1, th, th, teams, 1);
            test_dpf(t, 0, ns[i] - 1, 8, th, teams, 2);
            /* clang's chunk folded to a thread limit twice the block (teams
             * launched smaller than clang assumed): widened; then the same
             * chunk as an explicit dist_schedule (no limit): as given. */
            g_limit = 2 * th;
            test_dpf(t, 0, ns[i] - 1, 2 * th, th, teams, 1);
            g_limit = 0;
            test_dpf(t, 0, ns[i] - 1, 2 * th, th, teams, 1);
            if (t == T_U32 || t == T_U64) test_dpf(t, tmax(t) - ns[i], tmax(t) - 1, th, th, teams, 1);
          }
  }
  /* 0.9, 0.95, 0.999 and 1.0 of each type's range on up to 4 224 teams */
  g_spmd = true;
  static const double frac[] = {0.9, 0.95, 0.999, 1.0};
  for (int t = 0; t < 4; t++)
    for (uint32_t teams = 1; teams <= 4224; teams = teams * 4 + 1)
      for (int k = 0; k < 4; k++) {
        wide ub = (wide)((double)tmax(t) * frac[k]);
        if (ub > tmax(t) - 1)
          ub = tmax(t) - 1;
        test_dist_steps_fit(t, ub, 64, teams);
        test_dist_steps_fit(t, ub, 128, teams);
      }
  g_spmd = false;
  long ndpf = g_cases - nstatic;
  /* dispatch */
  static const int32_t dscheds[] = {35, 36, 37, 38, 33, 34, 65, 66, 67, 68,
                                    35 | KMP_SCHED_MODIFIER_NONMONOTONIC, 36 | KMP_SCHED_MODIFIER_MONOTONIC};
  static const uint32_t dthreads[] = {1, 2, 3, 8, 33};
  static const int64_t dchunks[] = {1, 3, 16};
  struct { wide lb, ub; int64_t st; int t; } dr[] = {
      {0, 99, 1, T_I32}, {0, -1, 1, T_I32}, {5, 5, 1, T_I32}, {-50, 50, 1, T_I64},
      {0, 1000, 1, T_U32}, {UINT32_MAX - 40, UINT32_MAX, 1, T_U32}, {INT32_MAX - 40, INT32_MAX, 1, T_I32},
      {INT32_MIN, INT32_MIN + 40, 1, T_I32}, {UINT64_MAX - 90, UINT64_MAX, 1, T_U64},
      {INT64_MAX - 70, INT64_MAX, 1, T_I64}, {100, 0, -1, T_I32}, {99, 0, -3, T_I64}, {0, 98, 7, T_U64},
  };
  for (size_t r = 0; r < sizeof dr / sizeof *dr; r++)
    for (size_t s = 0; s < sizeof dscheds / sizeof *dscheds; s++)
      for (size_t n = 0; n < sizeof dthreads / sizeof *dthreads; n++)
        for (size_t c = 0; c < sizeof dchunks / sizeof *dchunks; c++) {
          if ((dscheds[s] & 0xff) == 37) {
            static const int32_t rk[][2] = {{1, 0}, {1, 4}, {2, 2}, {3, 1}, {4, 0}};
            for (int k = 0; k < 5; k++) {
              g_run_kind = rk[k][0];
              g_run_chunk = rk[k][1];
              test_dispatch(dr[r].t, dscheds[s], dr[r].lb, dr[r].ub, dr[r].st, dchunks[c], dthreads[n], 0);
            }
            g_run_kind = 1;
            g_run_chunk = 0;
            continue;
          }
          test_dispatch(dr[r].t, dscheds[s], dr[r].lb, dr[r].ub, dr[r].st, dchunks[c], dthreads[n], n == 2);
        }
  printf("schedule_coverage: %ld static, %ld distribute+for, %ld dispatch cases: %s\n", nstatic, ndpf,
         g_cases - nstatic - ndpf, g_fail ? "FAILED" : "ok");
  return g_fail != 0;
}
