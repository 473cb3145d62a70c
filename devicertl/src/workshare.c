/* Worksharing loops: static schedules (for and distribute) and the dispatch
 * interface (dynamic, guided, runtime, auto, ordered).
 *
 * Every entry point converts its typed bounds into one type-independent
 * description of the iteration space (ws_space): the first value, the
 * increment and the index of the last iteration, all in 64-bit arithmetic
 * that cannot overflow. Schedules are computed on iteration indices
 * 0..last and turned back into values of the loop's type only at the end,
 * so 32/64-bit, signed/unsigned, counting up or down share one code path.
 *
 * Dispatch state (see README.md, "Worksharing and reductions"):
 *   - a loop run by a team of one thread (nested parallel regions, a
 *     serialised region, code outside any parallel region) is a "solo" loop:
 *     the whole loop is one chunk. Its state is two bits per hardware
 *     thread (done, counting down). The bounds of that chunk are the ones
 *     clang already stored into *plower / *pupper before init (it loads
 *     init's lb/ub arguments from those very variables).
 *   - a loop of a team of several threads (active level 1) uses one
 *     team-shared descriptor (ws_team) written by thread 0 between two
 *     barriers in init, plus one per-thread round counter for static
 *     schedules. The first barrier makes sure no thread still takes chunks
 *     of a previous `nowait` loop before the descriptor is overwritten.
 */
#include "rtl.h"

/* ------------------------------------------------------------------------ */
/* Loop types and the iteration space                                       */
/* ------------------------------------------------------------------------ */

/* The C type of a loop's bounds. Values travel as uint64_t holding the
 * sign-extended (signed types) or zero-extended (unsigned types) value. */
typedef struct ws_type {
  bool is_signed;
  uint8_t bits;
} ws_type;

static const ws_type WS_I32 = {true, 32};
static const ws_type WS_U32 = {false, 32};
static const ws_type WS_I64 = {true, 64};
static const ws_type WS_U64 = {false, 64};

static uint64_t ty_min(ws_type t) {
  if (!t.is_signed)
    return 0;
  return t.bits == 32 ? (uint64_t)(int64_t)INT32_MIN : (uint64_t)INT64_MIN;
}

static uint64_t ty_max(ws_type t) {
  if (t.is_signed)
    return t.bits == 32 ? (uint64_t)INT32_MAX : (uint64_t)INT64_MAX;
  return t.bits == 32 ? (uint64_t)UINT32_MAX : UINT64_MAX;
}

/* a <= b in the order of the loop's type. */
static bool ty_le(ws_type t, uint64_t a, uint64_t b) {
  return t.is_signed ? (int64_t)a <= (int64_t)b : a <= b;
}

/* |x| of a signed 64-bit value, defined for INT64_MIN too. */
static uint64_t magnitude(int64_t x) { return x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x; }

/* Iterations first, first + incr, ..., first + last * incr. */
typedef struct ws_space {
  ws_type type;
  bool empty;
  uint64_t first;
  int64_t incr;  /* never 0 */
  uint64_t last; /* index of the last iteration (trip count - 1) */
} ws_space;

static ws_space space_make(ws_type t, uint64_t lb, uint64_t ub, int64_t incr) {
  ws_space s = {.type = t, .empty = false, .first = lb, .incr = incr ? incr : 1, .last = 0};
  bool up = s.incr > 0;
  if (up ? !ty_le(t, lb, ub) : !ty_le(t, ub, lb)) {
    s.empty = true;
    return s;
  }
  /* The distance is exact in uint64_t: both ends lie in the type's range. */
  uint64_t dist = up ? ub - lb : lb - ub;
  s.last = dist / magnitude(s.incr);
  return s;
}

/* Value of iteration j (j <= last): exact, wrap-around arithmetic is only
 * an intermediate. */
static uint64_t space_value(const ws_space *s, uint64_t j) {
  return s->first + j * (uint64_t)s->incr;
}

/* The value one increment past the last iteration, if the type holds it. */
static bool space_past_end(const ws_space *s, uint64_t *out) {
  uint64_t v = space_value(s, s->last);
  ws_type t = s->type;
  if (t.is_signed) {
    int64_t r;
    if (__builtin_add_overflow((int64_t)v, s->incr, &r))
      return false;
    if (r < (int64_t)ty_min(t) || r > (int64_t)ty_max(t))
      return false;
    *out = (uint64_t)r;
    return true;
  }
  uint64_t mag = magnitude(s->incr);
  if (s->incr > 0) {
    uint64_t r;
    if (__builtin_add_overflow(v, mag, &r) || r > ty_max(t))
      return false;
    *out = r;
    return true;
  }
  if (v < mag)
    return false;
  *out = v - mag;
  return true;
}

/* Trip count, saturated at UINT64_MAX (a loop over all 2^64 values). */
static uint64_t space_trip(const ws_space *s) {
  return s->last == UINT64_MAX ? UINT64_MAX : s->last + 1;
}

static uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* ------------------------------------------------------------------------ */
/* Static assignment of iterations to "entities" (threads or teams)          */
/* ------------------------------------------------------------------------ */

/* Iterations j0..j1 (indices) of one entity; `has` false when it gets none. */
typedef struct ws_range {
  bool has;
  bool is_last; /* it holds the sequentially last iteration */
  uint64_t j0, j1;
} ws_range;

/* Balanced blocks: the first (trip % n) entities get one iteration more. */
static ws_range assign_block(const ws_space *s, uint64_t id, uint64_t n) {
  ws_range r = {false, false, 0, 0};
  if (s->empty)
    return r;
  if (n == 1) /* the only case whose block size (up to 2^64) has no uint64_t */
    return (ws_range){true, true, 0, s->last};
  /* trip = q * n + rem1 with rem1 in 1..n, computed without trip itself
   * (which may be 2^64). */
  uint64_t q = s->last / n;
  uint64_t rem = s->last % n + 1;
  if (rem == n) {
    q++;
    rem = 0;
  }
  uint64_t size = q + (id < rem ? 1 : 0);
  if (size == 0)
    return r;
  r.has = true;
  r.j0 = id * q + (id < rem ? id : rem);
  r.j1 = r.j0 + (size - 1);
  r.is_last = r.j1 == s->last;
  return r;
}

/* Round-robin chunks of c iterations: entity `id` gets chunks id, id + n,
 * ...; this is its first one. */
static ws_range assign_chunk(const ws_space *s, uint64_t c, uint64_t id, uint64_t n) {
  ws_range r = {false, false, 0, 0};
  if (s->empty)
    return r;
  uint64_t last_chunk = s->last / c;
  r.is_last = last_chunk % n == id;
  if (id > last_chunk)
    return r;
  r.has = true;
  r.j0 = id * c;
  r.j1 = (s->last - r.j0 < c - 1) ? s->last : r.j0 + (c - 1);
  return r;
}

/* ceil(ceil(trip / n) / c) * c: one chunk per entity, a multiple of c
 * (UINT64_MAX, which covers any loop, where that product does not fit). */
static uint64_t balanced_chunk(const ws_space *s, uint64_t c, uint64_t n) {
  uint64_t span = s->last / n + 1; /* ceil(trip / n) */
  if (span == 0)                   /* 2^64 iterations on one entity */
    span = UINT64_MAX;
  return sat_mul(span / c + (span % c != 0), c);
}

/* clang-22's composite `distribute parallel for` in an SPMD kernel deals the
 * loop to teams in chunks of one block (its default, dist_schedule(static,
 * __kmpc_get_hardware_num_threads_in_block())), so each thread runs one
 * iteration per parallel region and pays the region's entry, the inner
 * schedule, the reduction's fold and the closing barrier for each (about
 * 100 instructions against the loop body's 11 on sm_90). With device LTO,
 * OpenMPOpt folds that call to the kernel's thread limit (128 by default),
 * which is not the block size when the host launches smaller teams (ours
 * runs long loops in teams of 64: two iterations per region), so either
 * value marks clang's default chunk. Without a dist_schedule clause the
 * distribute schedule is the implementation's to choose: each team gets
 * at most RTL_TEAM_CHUNKS chunks (rtl.h), dealt round robin, of 1 / RTL_TEAM_CHUNKS
 * of its share rounded up to a multiple of clang's chunk, so chunks start
 * where clang's would and stay coalesced (the inner loop strides by the
 * team's size), and each thread runs hundreds of iterations per region on
 * a long loop: enough for the compiler's interleaving (`offload
 * clang-flags`) to keep several loads in flight. Teams differ by at most
 * one chunk. Several chunks rather than one per team keep the
 * teams' concurrent accesses close together in memory (one per team cost
 * the STREAM triad 2 % on an H200). RTL_WIDEN_MAX > 0 caps a chunk at that
 * many of clang's (a reference build: 1 keeps clang's chunks). (An explicit
 * dist_schedule(static, C) with C equal to the block size or the thread
 * limit cannot be told apart and is widened too: which team runs which
 * iteration changes, nothing else; devicertl/README.md, "Limits".) */
enum { WIDEN_MAX = RTL_WIDEN_MAX, TEAM_CHUNKS = RTL_TEAM_CHUNKS };
_Static_assert(WIDEN_MAX >= 0, "RTL_WIDEN_MAX: 0 (no cap) or a cap");
_Static_assert(TEAM_CHUNKS >= 1, "RTL_TEAM_CHUNKS: at least 1");

/* How far past the loop's last value its type reaches (at least). */
static uint64_t room_above_last(const ws_space *s) {
  uint64_t v = space_value(s, s->last), top = ty_max(s->type);
  if (s->type.is_signed && (int64_t)v < 0)
    return top;
  return top - v;
}

static uint64_t widened_chunk(const ws_space *s, uint64_t c, uint64_t n) {
  if (!rtl_is_frontend_spmd() || (c != plat_block_size() && c != rtl_kernel_thread_limit()))
    return c;
  uint64_t whole = balanced_chunk(s, c, sat_mul(n, TEAM_CHUNKS)); /* a multiple of c */
  if (WIDEN_MAX > 0 && whole / c > (uint64_t)WIDEN_MAX)
    whole = c * (uint64_t)WIDEN_MAX;
  /* clang's distribute loop steps both bounds by the stride (chunk x
   * teams) in the loop's own type after every chunk, the last time from
   * bounds at most the last value: that step must stay in the type (an
   * `int` loop of 2e9 iterations would otherwise wrap to negative
   * indices). Where not even clang's chunk fits, it is clang's as is. */
  uint64_t fits = room_above_last(s) / n;
  if (whole > fits)
    whole = fits / c * c;
  return whole > c ? whole : c;
}

/* ------------------------------------------------------------------------ */
/* Static init                                                               */
/* ------------------------------------------------------------------------ */

static int32_t sched_base(int32_t sched) {
  return sched & ~(KMP_SCHED_MODIFIER_MONOTONIC | KMP_SCHED_MODIFIER_NONMONOTONIC);
}

/* Clamp a stride into the loop's signed stride type. */
static int64_t stride_value(uint64_t index_stride, int64_t incr, uint8_t bits) {
  int64_t lo = bits == 32 ? INT32_MIN : INT64_MIN;
  int64_t hi = bits == 32 ? INT32_MAX : INT64_MAX;
  int64_t r;
  if (index_stride > (uint64_t)INT64_MAX || __builtin_mul_overflow((int64_t)index_stride, incr, &r))
    return incr > 0 ? hi : lo;
  return r < lo ? lo : (r > hi ? hi : r);
}

/* Bounds for an entity without iterations: a lower bound past the loop's
 * end, so every shape clang generates (`lb <= ub`, `lb <= global_ub`,
 * `iv = lb; iv <= prev_ub`) skips; if no value lies past the end, an
 * inverted pair at the type's far end. */
static void empty_bounds(const ws_space *s, uint64_t *plb, uint64_t *pub) {
  uint64_t past;
  if (space_past_end(s, &past)) {
    *plb = past;
    *pub = space_value(s, s->last);
    return;
  }
  ws_type t = s->type;
  if (s->incr > 0) {
    *plb = ty_max(t);
    *pub = ty_max(t) - 1;
  } else {
    *plb = ty_min(t);
    *pub = ty_min(t) + 1;
  }
}

/* The chunks clang's distribute loop runs for a team (increment 1): from
 * its first chunk's lower bound, `stride` at a time, while not past the
 * loop's last value. Never more than it runs: a count too high would make
 * a deferred reduction wait for a chunk that never comes. */
uint64_t rtl_loop_chunks(uint64_t first, uint64_t last, int64_t stride, bool is_signed) {
  if (stride <= 0)
    return 0;
  bool past = is_signed ? (int64_t)first > (int64_t)last : first > last;
  return past ? 0 : (last - first) / (uint64_t)stride + 1;
}

/* The common part of every __kmpc_{for,distribute}_static_init_*. */
static void static_init(ws_type t, int32_t sched, int32_t *plast, uint64_t *plb, uint64_t *pub,
                        int64_t *pstride, int64_t incr, int64_t chunk) {
  ws_space s = space_make(t, *plb, *pub, incr);
  uint64_t global_ub = *pub, id, n, c = 0;
  bool chunked = false;
  uint32_t nthreads = rtl_num_threads(), tid = rtl_thread_num();
  if (nthreads == 0)
    nthreads = 1;
  switch (sched_base(sched)) {
  case KMP_SCHED_DISTR_STATIC_CHUNKED:
  case KMP_SCHED_DISTR_STATIC:
    id = rtl_team_num();
    n = rtl_num_teams();
    chunked = sched_base(sched) == KMP_SCHED_DISTR_STATIC_CHUNKED && chunk > 0;
    c = (uint64_t)chunk;
    break;
  case KMP_SCHED_DISTR_STATIC_CHUNKED_CHUNKONE:
    /* Chunks dealt over every thread of every team at once. */
    id = (uint64_t)rtl_team_num() * nthreads + tid;
    n = (uint64_t)rtl_num_teams() * nthreads;
    chunked = true;
    c = chunk > 0 ? (uint64_t)chunk : 1;
    break;
  case KMP_SCHED_STATIC_BALANCED_CHUNKED:
    id = tid;
    n = nthreads;
    if (chunk > 0 && !s.empty) {
      chunked = true;
      c = balanced_chunk(&s, (uint64_t)chunk, n);
    }
    break;
  case KMP_SCHED_STATIC:
  case KMP_SCHED_STATIC + KMP_SCHED_ORDERED_OFFSET:
  case 40: /* static greedy */
  case 41: /* static balanced */
    /* clang passes chunk 1 here; it means nothing. */
    id = tid;
    n = nthreads;
    break;
  default: /* static chunked, its ordered form, and anything unknown */
    id = tid;
    n = nthreads;
    chunked = chunk > 0;
    c = (uint64_t)chunk;
    break;
  }
  if (n == 0)
    n = 1;

  /* The chunks of clang's composite `distribute parallel for` (reduction.c
   * lets a thread reduce once for all of them). */
  bool composite_chunks =
      sched_base(sched) == KMP_SCHED_DISTR_STATIC_CHUNKED && chunked && s.incr == 1;
  if (composite_chunks && !s.empty)
    c = widened_chunk(&s, c, n);
  if (s.empty) { /* bounds already describe an empty loop */
    *plast = 0;
    *pstride = stride_value(1, s.incr, t.bits);
    if (composite_chunks)
      rtl_reduction_distribute(false, 0, 0, 0, t.is_signed);
    return;
  }
  ws_range r = {false, false, 0, 0};
  if (id < n) /* else a caller outside the team: no iterations */
    r = chunked ? assign_chunk(&s, c, id, n) : assign_block(&s, id, n);
  *plast = r.is_last && r.has;
  if (r.has) {
    *plb = space_value(&s, r.j0);
    *pub = space_value(&s, r.j1);
  } else {
    empty_bounds(&s, plb, pub);
  }
  *pstride = chunked ? stride_value(sat_mul(c, n), s.incr, t.bits)
                     : stride_value(space_trip(&s), s.incr, t.bits);
  if (composite_chunks)
    rtl_reduction_distribute(r.has, *plb, global_ub, *pstride, t.is_signed);
}

/* Typed wrappers: widen, run static_init, narrow (exact: results lie in the
 * loop's range or are the deliberate empty bounds). */
#define WS_STATIC_ENTRY(NAME, TY, T, ST)                                                     \
  RTL_EXPORT RTL_INLINE_ENTRY void NAME(IdentTy *loc, int32_t gtid, int32_t sched,           \
                                        int32_t *plast, T *plower, T *pupper, ST *pstride,  \
                                        ST incr, ST chunk) {                                \
    uint64_t lb = (uint64_t)*plower, ub = (uint64_t)*pupper;                                 \
    if ((TY).is_signed && (TY).bits == 32) {                                                 \
      lb = (uint64_t)(int64_t)(int32_t)*plower;                                              \
      ub = (uint64_t)(int64_t)(int32_t)*pupper;                                              \
    }                                                                                        \
    int64_t stride = 0;                                                                      \
    static_init(TY, sched, plast, &lb, &ub, &stride, (int64_t)incr, (int64_t)chunk);         \
    *plower = (T)lb;                                                                         \
    *pupper = (T)ub;                                                                         \
    *pstride = (ST)stride;                                                                   \
  }

WS_STATIC_ENTRY(__kmpc_for_static_init_4, WS_I32, int32_t, int32_t)
WS_STATIC_ENTRY(__kmpc_for_static_init_4u, WS_U32, uint32_t, int32_t)
WS_STATIC_ENTRY(__kmpc_for_static_init_8, WS_I64, int64_t, int64_t)
WS_STATIC_ENTRY(__kmpc_for_static_init_8u, WS_U64, uint64_t, int64_t)
/* distribute: the schedule kind (91..93) selects teams as the entities. */
WS_STATIC_ENTRY(__kmpc_distribute_static_init_4, WS_I32, int32_t, int32_t)
WS_STATIC_ENTRY(__kmpc_distribute_static_init_4u, WS_U32, uint32_t, int32_t)
WS_STATIC_ENTRY(__kmpc_distribute_static_init_8, WS_I64, int64_t, int64_t)
WS_STATIC_ENTRY(__kmpc_distribute_static_init_8u, WS_U64, uint64_t, int64_t)

RTL_EXPORT RTL_ALWAYS_INLINE void __kmpc_for_static_fini(IdentTy *loc, int32_t gtid) {}
RTL_EXPORT RTL_ALWAYS_INLINE void __kmpc_distribute_static_fini(IdentTy *loc, int32_t gtid) {}

/* ------------------------------------------------------------------------ */
/* Dispatch: state                                                           */
/* ------------------------------------------------------------------------ */

enum ws_dkind {
  WS_D_BLOCK,   /* one balanced block per thread */
  WS_D_CHUNK,   /* round-robin chunks (static with a chunk size) */
  WS_D_SERIAL,  /* the whole loop on thread 0 (ordered, and tiny loops) */
  WS_D_DYNAMIC, /* chunks of `chunk` from a shared chunk counter */
  WS_D_GUIDED,  /* shrinking chunks from a shared iteration counter */
};

/* The loop of the team's (only) active parallel region. Written by thread
 * 0 between init's two barriers; read-only afterwards except `counter`. */
typedef struct ws_team_loop {
  uint64_t counter; /* next chunk (dynamic) or next iteration (guided) */
  ws_space space;
  uint64_t chunk;
  uint32_t kind;
  uint32_t nthreads;
} ws_team_loop;

RTL_SHARED static ws_team_loop ws_team;
/* Chunks already handed to each thread of the team loop (static kinds). */
RTL_SHARED static uint32_t ws_round[RTL_MAX_THREADS];
/* Solo loops, one bit per hardware thread: chunk handed out / counts down. */
RTL_SHARED static uint32_t ws_solo_done[RTL_MAX_THREADS / 32];
RTL_SHARED static uint32_t ws_solo_down[RTL_MAX_THREADS / 32];

static void bit_set(uint32_t *words, uint32_t i, bool v) {
  uint32_t m = 1u << (i % 32);
  if (v)
    __atomic_fetch_or(&words[i / 32], m, __ATOMIC_RELAXED);
  else
    __atomic_fetch_and(&words[i / 32], ~m, __ATOMIC_RELAXED);
}

static bool bit_get(uint32_t *words, uint32_t i) {
  return (__atomic_load_n(&words[i / 32], __ATOMIC_RELAXED) >> (i % 32)) & 1;
}

static bool sched_is_ordered(int32_t base) { return base >= 65 && base <= 74; }

/* Resolve a dispatch schedule kind (and chunk) into one of ws_dkind. */
static uint32_t dispatch_kind(int32_t sched, int64_t *chunk) {
  int32_t base = sched_base(sched);
  if (sched_is_ordered(base))
    return WS_D_SERIAL;
  if (base == KMP_SCHED_RUNTIME || base == 47 /* runtime simd */) {
    uint32_t kind;
    int32_t c;
    rtl_run_schedule(&kind, &c);
    *chunk = c;
    switch (kind & 0x7fffffffu) { /* without omp_sched_monotonic */
    case 2: /* omp_sched_dynamic */
      return WS_D_DYNAMIC;
    case 3: /* omp_sched_guided */
      return WS_D_GUIDED;
    case 4: /* omp_sched_auto */
      return WS_D_BLOCK;
    default: /* omp_sched_static */
      return c > 0 ? WS_D_CHUNK : WS_D_BLOCK;
    }
  }
  switch (base) {
  case KMP_SCHED_DYNAMIC_CHUNKED:
  case 44: /* static steal: dynamic is a valid implementation */
    return WS_D_DYNAMIC;
  case KMP_SCHED_GUIDED_CHUNKED:
  case 39: /* trapezoidal */
  case 42: /* guided iterative */
  case 43: /* guided analytical */
  case 46: /* guided simd */
    return WS_D_GUIDED;
  case KMP_SCHED_STATIC_CHUNKED:
    return *chunk > 0 ? WS_D_CHUNK : WS_D_BLOCK;
  default: /* static, auto, balanced, ... */
    return WS_D_BLOCK;
  }
}

/* ------------------------------------------------------------------------ */
/* Dispatch: init                                                            */
/* ------------------------------------------------------------------------ */

static bool dispatch_is_solo(void) { return rtl_num_threads() <= 1; }

static void solo_init(const ws_space *s) {
  uint32_t hw = plat_thread_id();
  bit_set(ws_solo_done, hw, false);
  bit_set(ws_solo_down, hw, s->incr < 0);
}

RTL_CONVERGENT static void team_init(const ws_space *s, uint32_t kind, int64_t chunk) {
  uint32_t tid = rtl_thread_num();
  uint32_t n = rtl_num_threads();
  if (rtl_active_level() > 1)
    rtl_fatal("workshare: a dispatch loop in a nested parallel region with more than one "
              "thread (only one active level is supported)");
  /* Everyone is done with the previous loop's descriptor (nowait loops). */
  rtl_barrier();
  if (tid == 0) {
    ws_team.space = *s;
    ws_team.kind = s->last == 0 && kind != WS_D_SERIAL ? WS_D_BLOCK : kind;
    ws_team.chunk = chunk > 0 ? (uint64_t)chunk : 1;
    ws_team.nthreads = n;
    __atomic_store_n(&ws_team.counter, 0, __ATOMIC_RELAXED);
  }
  ws_round[tid] = 0;
  /* Publish the descriptor before anyone takes a chunk. */
  rtl_barrier();
}

RTL_CONVERGENT static void dispatch_init(ws_type t, int32_t sched, uint64_t lb, uint64_t ub,
                                         int64_t st, int64_t chunk) {
  ws_space s = space_make(t, lb, ub, st);
  if (dispatch_is_solo()) {
    solo_init(&s);
    return;
  }
  uint32_t kind = dispatch_kind(sched, &chunk);
  team_init(&s, kind, chunk);
}

#define WS_DISPATCH_INIT(NAME, TY, T, ST)                                                     \
  RTL_EXPORT RTL_CONVERGENT void NAME(IdentTy *loc, int32_t gtid, int32_t sched, T lb, T ub,  \
                                      ST st, ST chunk) {                                      \
    uint64_t l = (uint64_t)lb, u = (uint64_t)ub;                                              \
    if ((TY).is_signed && (TY).bits == 32) {                                                  \
      l = (uint64_t)(int64_t)(int32_t)lb;                                                     \
      u = (uint64_t)(int64_t)(int32_t)ub;                                                     \
    }                                                                                         \
    dispatch_init(TY, sched, l, u, (int64_t)st, (int64_t)chunk);                              \
  }

WS_DISPATCH_INIT(__kmpc_dispatch_init_4, WS_I32, int32_t, int32_t)
WS_DISPATCH_INIT(__kmpc_dispatch_init_4u, WS_U32, uint32_t, int32_t)
WS_DISPATCH_INIT(__kmpc_dispatch_init_8, WS_I64, int64_t, int64_t)
WS_DISPATCH_INIT(__kmpc_dispatch_init_8u, WS_U64, uint64_t, int64_t)

/* ------------------------------------------------------------------------ */
/* Dispatch: next                                                            */
/* ------------------------------------------------------------------------ */

/* A solo loop's only chunk is the loop itself, whose bounds the caller's
 * variables still hold (see the top of the file). */
static bool solo_next(ws_type t, uint64_t lb, uint64_t ub) {
  uint32_t hw = plat_thread_id();
  if (bit_get(ws_solo_done, hw))
    return false;
  /* Left set on every return so that an enclosing solo loop of the same
   * thread (which is inside its only chunk) also sees "done". */
  bit_set(ws_solo_done, hw, true);
  bool down = bit_get(ws_solo_down, hw);
  return down ? ty_le(t, ub, lb) : ty_le(t, lb, ub);
}

/* Chunk index k of c iterations: false when past the loop. */
static bool chunk_range(const ws_space *s, uint64_t c, uint64_t k, ws_range *r) {
  if (k > s->last / c)
    return false;
  r->has = true;
  r->j0 = k * c;
  r->j1 = (s->last - r->j0 < c - 1) ? s->last : r->j0 + (c - 1);
  return true;
}

/* Static kinds: this thread's next chunk, from its round counter. */
static bool team_next_static(uint32_t tid, ws_range *r) {
  const ws_space *s = &ws_team.space;
  uint32_t round = ws_round[tid];
  if (ws_team.kind == WS_D_CHUNK) {
    uint64_t k = (uint64_t)round * ws_team.nthreads + tid;
    if (!chunk_range(s, ws_team.chunk, k, r))
      return false;
    if (round == UINT32_MAX)
      rtl_fatal("workshare: more than 2^32 static chunks for one thread");
    ws_round[tid] = round + 1;
    return true;
  }
  if (round != 0)
    return false;
  ws_round[tid] = 1;
  if (ws_team.kind == WS_D_SERIAL) {
    if (tid != 0)
      return false;
    r->j0 = 0;
    r->j1 = s->last;
    return true;
  }
  *r = assign_block(s, tid, ws_team.nthreads);
  return r->has;
}

static bool team_next_dynamic(ws_range *r) {
  uint64_t k = __atomic_fetch_add(&ws_team.counter, 1, __ATOMIC_RELAXED);
  return chunk_range(&ws_team.space, ws_team.chunk, k, r);
}

/* Guided: each grab takes about remaining / (2 * nthreads) iterations, at
 * least the chunk size, so chunks shrink as the loop drains. */
static bool team_next_guided(ws_range *r) {
  const ws_space *s = &ws_team.space;
  uint64_t two_n = 2 * (uint64_t)ws_team.nthreads;
  uint64_t cur = __atomic_load_n(&ws_team.counter, __ATOMIC_RELAXED);
  for (;;) {
    if (cur > s->last)
      return false;
    uint64_t left_minus_1 = s->last - cur; /* remaining - 1, no overflow */
    uint64_t size = left_minus_1 / two_n + (left_minus_1 % two_n == two_n - 1);
    if (size < ws_team.chunk)
      size = ws_team.chunk;
    if (size - 1 > left_minus_1)
      size = left_minus_1 + 1;
    uint64_t end = cur + (size - 1); /* <= last */
    /* After the final chunk the counter saturates at last + 1 (or wraps to
     * 0 for a 2^64-iteration loop, which no program can run). */
    if (__atomic_compare_exchange_n(&ws_team.counter, &cur, end + 1, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      r->has = true;
      r->j0 = cur;
      r->j1 = end;
      return true;
    }
  }
}

static bool team_next(uint64_t *plb, uint64_t *pub, int32_t *plast) {
  ws_range r = {false, false, 0, 0};
  bool got;
  switch (ws_team.kind) {
  case WS_D_DYNAMIC:
    got = team_next_dynamic(&r);
    break;
  case WS_D_GUIDED:
    got = team_next_guided(&r);
    break;
  default:
    got = team_next_static(rtl_thread_num(), &r);
    break;
  }
  if (!got || ws_team.space.empty)
    return false;
  *plb = space_value(&ws_team.space, r.j0);
  *pub = space_value(&ws_team.space, r.j1);
  *plast = r.j1 == ws_team.space.last;
  return true;
}

#define WS_DISPATCH_NEXT(NAME, TY, T, ST)                                                     \
  RTL_EXPORT int32_t NAME(IdentTy *loc, int32_t gtid, int32_t *plast, T *plower, T *pupper,   \
                          ST *pstride) {                                                      \
    uint64_t l = (uint64_t)*plower, u = (uint64_t)*pupper;                                    \
    if ((TY).is_signed && (TY).bits == 32) {                                                  \
      l = (uint64_t)(int64_t)(int32_t)*plower;                                                \
      u = (uint64_t)(int64_t)(int32_t)*pupper;                                                \
    }                                                                                         \
    if (dispatch_is_solo()) {                                                                 \
      if (!solo_next(TY, l, u))                                                               \
        return 0;                                                                             \
      *plast = 1;                                                                             \
      *pstride = bit_get(ws_solo_down, plat_thread_id()) ? (ST)-1 : (ST)1;                    \
      return 1;                                                                               \
    }                                                                                         \
    int32_t last = 0;                                                                         \
    if (!team_next(&l, &u, &last))                                                            \
      return 0;                                                                               \
    *plower = (T)l;                                                                           \
    *pupper = (T)u;                                                                           \
    *plast = last;                                                                            \
    *pstride = (ST)ws_team.space.incr;                                                        \
    return 1;                                                                                 \
  }

WS_DISPATCH_NEXT(__kmpc_dispatch_next_4, WS_I32, int32_t, int32_t)
WS_DISPATCH_NEXT(__kmpc_dispatch_next_4u, WS_U32, uint32_t, int32_t)
WS_DISPATCH_NEXT(__kmpc_dispatch_next_8, WS_I64, int64_t, int64_t)
WS_DISPATCH_NEXT(__kmpc_dispatch_next_8u, WS_U64, uint64_t, int64_t)

/* fini: called after each iteration of an ordered loop. Ordered loops run
 * entirely on one thread in increasing order, so there is nothing to hand
 * over. deinit: the next loop's init barrier retires the descriptor. */
RTL_EXPORT void __kmpc_dispatch_fini_4(IdentTy *loc, int32_t gtid) {}
RTL_EXPORT void __kmpc_dispatch_fini_4u(IdentTy *loc, int32_t gtid) {}
RTL_EXPORT void __kmpc_dispatch_fini_8(IdentTy *loc, int32_t gtid) {}
RTL_EXPORT void __kmpc_dispatch_fini_8u(IdentTy *loc, int32_t gtid) {}
RTL_EXPORT void __kmpc_dispatch_deinit(IdentTy *loc, int32_t gtid) {}
