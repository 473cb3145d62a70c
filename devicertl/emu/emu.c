/* Host emulation of platform.h: GPU threads as pthreads.
 *
 * Model
 *   - A launch runs its blocks one after another; a block is block_size
 *     pthreads started together, each running the kernel with thread-local
 *     ids (thread, lane = thread % warp_size, warp = thread / warp_size,
 *     block). The launch returns when every thread of the last block has
 *     returned.
 *   - Threads run concurrently and independently, as on sm_70+ with
 *     independent thread scheduling: lanes of a warp are NOT in lockstep,
 *     nothing is implicitly converged, and code that relies on implicit
 *     warp-synchronous execution (reading another lane's write without a
 *     plat_sync_warp) is exposed as a race.
 *   - plat_sync_block: a barrier over the block's live threads; a thread
 *     that has returned from the kernel no longer counts (sm_70+ exited
 *     threads do not block __syncthreads).
 *   - plat_sync_block_partial(n): a second, separate barrier that releases
 *     when n threads have arrived (only threads < n may call it; n must be a
 *     multiple of the warp size and at most the block size). Exited threads
 *     do not reduce n.
 *   - Warp collectives (plat_sync_warp, plat_shfl_*): a rendezvous of the
 *     non-exited lanes of the mask (as shfl.sync/bar.warp.sync on sm_70+:
 *     exited lanes and lanes beyond the block are not waited for). Each lane
 *     publishes its value, waits for the others (same mask), reads, and
 *     waits until all have read before the slots are reused. Lanes of one
 *     warp may run collectives with disjoint masks at the same time.
 *   - plat_active_mask: the lanes of the caller's warp that have not exited
 *     (and exist). It is NOT the set of lanes converged at the call (the
 *     emulator has no notion of convergence): a superset of what hardware
 *     returns. EMU_ACTIVE_MASK=self returns the caller's lane only (a subset,
 *     and a legal answer of sm_70+ hardware when the warp has diverged).
 *   - All emulator state is under one mutex per block, so every primitive is
 *     a full acquire/release point, and the emulator is TSan-clean.
 *
 * Not modelled
 *   - Concurrent blocks (and so any inter-block waiting: a kernel that spins
 *     until another team arrives hangs), memory scopes (block/device/system
 *     fences are all __atomic_thread_fence(seq_cst)), address spaces, shared
 *     memory sizes (RTL_SHARED is a plain global; only dynamic shared memory
 *     has a size), weak GPU memory ordering, named barriers other than the
 *     two above, timing and occupancy, printf (plat_vprintf returns -1).
 */
#define _GNU_SOURCE
#include "emu.h"
#include "platform.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum wait_kind { W_NONE, W_BAR, W_PBAR, W_WARP_ARRIVE, W_WARP_DRAIN };
enum wop_state { WOP_IDLE, WOP_ARRIVED, WOP_READ };

struct emu_block;

typedef struct emu_thread {
  uint32_t tid, lane, warp;
  struct emu_block *blk;
  pthread_t handle;
  /* Under blk->mu. */
  bool exited;
  enum wait_kind wait;
  uint64_t wait_gen;
  /* The warp collective this lane is in. */
  enum wop_state wop;
  uint64_t wop_mask;
  int32_t wop_val;
  const char *wop_what;
} emu_thread;

typedef struct emu_block {
  pthread_mutex_t mu;
  pthread_cond_t bar_cv;
  pthread_cond_t *warp_cv;
  uint32_t id, size, warp_size, nwarps;
  emu_thread *threads;
  /* Under mu. */
  uint32_t live;
  uint32_t waiting; /* threads inside an emulator wait */
  uint32_t bar_arrived;
  uint64_t bar_gen;
  uint32_t pbar_arrived, pbar_n;
  uint64_t pbar_gen;
  /* Lanes alive per warp: written under mu, read atomically. */
  uint64_t *alive;
  void *dyn;
  uint32_t dyn_size;
} emu_block;

/* The launch in flight (read-only while its threads run). */
static struct {
  uint32_t num_blocks;
  emu_kernel_fn kernel;
  void *dyn_ptr;
  void **args;
} g_launch;
static int g_launch_busy; /* atomic */
static double g_hang_seconds = 30;

static _Thread_local emu_thread *t_self;

static uint64_t g_stat_bar, g_stat_wop; /* atomic */
uint64_t emu_stat_block_barriers(void) { return __atomic_load_n(&g_stat_bar, __ATOMIC_RELAXED); }
uint64_t emu_stat_warp_ops(void) { return __atomic_load_n(&g_stat_wop, __ATOMIC_RELAXED); }

/* --- diagnostics --------------------------------------------------------- */

static const char *wait_name(enum wait_kind w) {
  switch (w) {
  case W_NONE: return "running (in the kernel/runtime)";
  case W_BAR: return "in plat_sync_block";
  case W_PBAR: return "in plat_sync_block_partial";
  case W_WARP_ARRIVE: return "in a warp collective, waiting for the other lanes";
  case W_WARP_DRAIN: return "in a warp collective, waiting for the other lanes to read";
  }
  return "?";
}

/* Called with b->mu held. */
static void dump_block(emu_block *b) {
  fprintf(stderr, "emu: block %u: %u threads, warp size %u, %u live, %u waiting; "
                  "block barrier: %u arrived; partial barrier: %u of %u arrived\n",
          b->id, b->size, b->warp_size, b->live, b->waiting, b->bar_arrived, b->pbar_arrived,
          b->pbar_n);
  /* Group consecutive threads in the same state to keep it short. */
  uint32_t i = 0;
  while (i < b->size) {
    emu_thread *t = &b->threads[i];
    uint32_t j = i + 1;
    while (j < b->size) {
      emu_thread *u = &b->threads[j];
      if (u->exited != t->exited || u->wait != t->wait || u->wop_mask != t->wop_mask ||
          u->wop != t->wop)
        break;
      j++;
    }
    if (t->exited)
      fprintf(stderr, "emu:   threads %u..%u: exited\n", i, j - 1);
    else if (t->wait == W_WARP_ARRIVE || t->wait == W_WARP_DRAIN)
      fprintf(stderr, "emu:   threads %u..%u: %s (%s, mask 0x%llx)\n", i, j - 1,
              wait_name(t->wait), t->wop_what ? t->wop_what : "?",
              (unsigned long long)t->wop_mask);
    else
      fprintf(stderr, "emu:   threads %u..%u: %s\n", i, j - 1, wait_name(t->wait));
    i = j;
  }
}

__attribute__((noreturn, format(printf, 2, 3))) static void die_locked(emu_block *b,
                                                                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "emu: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (b)
    dump_block(b);
  fflush(stderr);
  abort();
}

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "emu: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  abort();
}

static emu_thread *self(const char *what) {
  emu_thread *t = t_self;
  if (!t)
    die("%s called outside an emulated GPU thread (call it from a kernel run by emu_launch)", what);
  return t;
}

/* --- waiting ---------------------------------------------------------------- */

static uint64_t lanes_existing(emu_block *b, uint32_t warp) {
  uint32_t first = warp * b->warp_size;
  uint32_t n = b->size - first < b->warp_size ? b->size - first : b->warp_size;
  return n >= 64 ? ~0ull : ((1ull << n) - 1);
}

/* The lanes of `mask` a collective waits for: those alive. */
static uint64_t participants(emu_block *b, uint32_t warp, uint64_t mask) {
  return mask & __atomic_load_n(&b->alive[warp], __ATOMIC_RELAXED);
}

static bool warp_group_arrived(emu_block *b, emu_thread *t) {
  uint64_t p = participants(b, t->warp, t->wop_mask);
  emu_thread *base = &b->threads[t->warp * b->warp_size];
  for (uint64_t m = p; m; m &= m - 1) {
    emu_thread *k = &base[__builtin_ctzll(m)];
    if (k->wop == WOP_IDLE || k->wop_mask != t->wop_mask)
      return false;
  }
  return true;
}

/* Whether the wait `t` is in can end now. */
static bool wait_done(emu_block *b, emu_thread *t) {
  switch (t->wait) {
  case W_NONE: return true;
  case W_BAR: return b->bar_gen != t->wait_gen;
  case W_PBAR: return b->pbar_gen != t->wait_gen;
  case W_WARP_ARRIVE: return warp_group_arrived(b, t);
  case W_WARP_DRAIN: return t->wop == WOP_IDLE;
  }
  return true;
}

/* With b->mu held: when every live thread waits in the emulator and no wait
 * can end, the block can never make progress. */
static void check_deadlock(emu_block *b) {
  if (b->live == 0 || b->waiting < b->live)
    return;
  for (uint32_t i = 0; i < b->size; i++) {
    emu_thread *t = &b->threads[i];
    if (t->exited)
      continue;
    if (t->wait == W_NONE || wait_done(b, t))
      return;
  }
  die_locked(b, "deadlock: every live thread of block %u waits and none can go on", b->id);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* With b->mu held: wait on `cv` until wait_done(t). */
static void wait_until(emu_block *b, emu_thread *t, pthread_cond_t *cv, enum wait_kind kind,
                       const char *what) {
  t->wait = kind;
  if (wait_done(b, t)) {
    t->wait = W_NONE;
    return;
  }
  b->waiting++;
  check_deadlock(b);
  double start = now_s();
  while (!wait_done(b, t)) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 1;
    int rc = pthread_cond_timedwait(cv, &b->mu, &dl);
    if (rc == ETIMEDOUT && !wait_done(b, t) && now_s() - start > g_hang_seconds)
      die_locked(b, "thread %u of block %u waited %.0f s %s (EMU_HANG_SECONDS); the others:",
                 t->tid, b->id, g_hang_seconds, what);
  }
  b->waiting--;
  t->wait = W_NONE;
}

/* --- ids ---------------------------------------------------------------------- */

uint32_t plat_thread_id(void) { return self("plat_thread_id")->tid; }
uint32_t plat_block_size(void) { return self("plat_block_size")->blk->size; }
uint32_t plat_block_id(void) { return self("plat_block_id")->blk->id; }
uint32_t plat_num_blocks(void) {
  self("plat_num_blocks");
  return g_launch.num_blocks;
}
uint32_t plat_warp_size(void) { return self("plat_warp_size")->blk->warp_size; }
uint32_t plat_lane_id(void) { return self("plat_lane_id")->lane; }

/* --- warps -------------------------------------------------------------------- */

/* EMU_ACTIVE_MASK=self: the caller's lane only, which sm_70+ hardware may
 * also return when the warp has diverged (a legal __activemask()). The
 * default, "alive", is every live lane of the warp. */
static int g_mask_self; /* read-only while threads run */

uint64_t plat_active_mask(void) {
  emu_thread *t = self("plat_active_mask");
  if (g_mask_self)
    return 1ull << t->lane;
  return __atomic_load_n(&t->blk->alive[t->warp], __ATOMIC_RELAXED);
}

/* The rendezvous of every warp primitive: publish `value`, wait for the
 * lanes of `mask`, return the value of lane `src` (or `fallback` when `src`
 * does not take part), then wait until every lane has read. */
static int32_t warp_collective(const char *what, uint64_t mask, int32_t value, int64_t src,
                               int32_t fallback) {
  emu_thread *t = self(what);
  emu_block *b = t->blk;
  pthread_mutex_lock(&b->mu);
  uint64_t me = 1ull << t->lane;
  if (!(mask & me))
    die_locked(b, "%s: thread %u (lane %u) calls it with mask 0x%llx that leaves it out", what,
               t->tid, t->lane, (unsigned long long)mask);
  if (b->warp_size < 64 && (mask >> b->warp_size))
    die_locked(b, "%s: mask 0x%llx has bits beyond warp size %u (thread %u)", what,
               (unsigned long long)mask, b->warp_size, t->tid);
  if (t->wop != WOP_IDLE)
    die_locked(b, "%s: emulator state: thread %u enters a collective while in one", what, t->tid);
  t->wop = WOP_ARRIVED;
  t->wop_mask = mask;
  t->wop_val = value;
  t->wop_what = what;
  pthread_cond_t *cv = &b->warp_cv[t->warp];
  /* Waiters only need to wake when the group is complete (or a lane
   * exits, see thread_exit). */
  if (warp_group_arrived(b, t))
    pthread_cond_broadcast(cv);
  wait_until(b, t, cv, W_WARP_ARRIVE, what);

  int32_t result = fallback;
  if (src >= 0) {
    uint64_t p = participants(b, t->warp, mask);
    if (src < 64 && (p >> src) & 1)
      result = b->threads[t->warp * b->warp_size + (uint32_t)src].wop_val;
    else
      result = EMU_SHFL_POISON;
  }
  t->wop = WOP_READ;
  /* The last reader frees the slots of the whole group. */
  uint64_t p = participants(b, t->warp, mask);
  emu_thread *base = &b->threads[t->warp * b->warp_size];
  bool all_read = true;
  for (uint64_t m = p; m; m &= m - 1)
    if (base[__builtin_ctzll(m)].wop != WOP_READ) {
      all_read = false;
      break;
    }
  if (all_read) {
    for (uint64_t m = p; m; m &= m - 1) {
      emu_thread *k = &base[__builtin_ctzll(m)];
      k->wop = WOP_IDLE;
      k->wop_mask = 0;
      k->wop_what = NULL;
    }
    __atomic_fetch_add(&g_stat_wop, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(cv);
  } else {
    wait_until(b, t, cv, W_WARP_DRAIN, what);
  }
  pthread_mutex_unlock(&b->mu);
  return result;
}

void plat_sync_warp(uint64_t mask) { warp_collective("plat_sync_warp", mask, 0, -1, 0); }

static void check_width(const char *what, uint32_t width) {
  emu_thread *t = self(what);
  if (width == 0 || (width & (width - 1)) || width > t->blk->warp_size)
    die("%s: width %u is not a power of two <= warp size %u (thread %u)", what, width,
        t->blk->warp_size, t->tid);
}

int32_t plat_shfl_down_i32(uint64_t mask, int32_t value, uint32_t delta, uint32_t width) {
  check_width("plat_shfl_down_i32", width);
  uint32_t lane = t_self->lane;
  uint32_t base = lane & ~(width - 1);
  int64_t src = -1;
  if ((uint64_t)(lane - base) + delta < width)
    src = (int64_t)lane + delta;
  /* Outside the segment: the caller's own value (still a rendezvous). */
  int32_t r = warp_collective("plat_shfl_down_i32", mask, value, src, value);
  return src < 0 ? value : r;
}

int32_t plat_shfl_idx_i32(uint64_t mask, int32_t value, uint32_t src_lane, uint32_t width) {
  check_width("plat_shfl_idx_i32", width);
  uint32_t lane = t_self->lane;
  uint32_t base = lane & ~(width - 1);
  int64_t src = base + (src_lane & (width - 1));
  return warp_collective("plat_shfl_idx_i32", mask, value, src, value);
}

/* --- block synchronisation ------------------------------------------------------ */

void plat_sync_block(void) {
  emu_thread *t = self("plat_sync_block");
  emu_block *b = t->blk;
  pthread_mutex_lock(&b->mu);
  t->wait_gen = b->bar_gen;
  if (++b->bar_arrived == b->live) {
    b->bar_arrived = 0;
    b->bar_gen++;
    __atomic_fetch_add(&g_stat_bar, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&b->bar_cv);
  } else {
    wait_until(b, t, &b->bar_cv, W_BAR, "in plat_sync_block");
  }
  pthread_mutex_unlock(&b->mu);
}

void plat_sync_block_partial(uint32_t num_threads) {
  emu_thread *t = self("plat_sync_block_partial");
  emu_block *b = t->blk;
  pthread_mutex_lock(&b->mu);
  if (num_threads == 0 || num_threads % b->warp_size || num_threads > b->size)
    die_locked(b, "plat_sync_block_partial(%u): not a multiple of warp size %u in 1..%u (thread %u)",
               num_threads, b->warp_size, b->size, t->tid);
  if (t->tid >= num_threads)
    die_locked(b, "plat_sync_block_partial(%u) called by thread %u, outside the first %u",
               num_threads, t->tid, num_threads);
  if (b->pbar_arrived > 0 && b->pbar_n != num_threads)
    die_locked(b, "plat_sync_block_partial(%u) by thread %u while %u threads wait in "
               "plat_sync_block_partial(%u)", num_threads, t->tid, b->pbar_arrived, b->pbar_n);
  b->pbar_n = num_threads;
  t->wait_gen = b->pbar_gen;
  if (++b->pbar_arrived == num_threads) {
    b->pbar_arrived = 0;
    b->pbar_gen++;
    pthread_cond_broadcast(&b->bar_cv);
  } else {
    wait_until(b, t, &b->bar_cv, W_PBAR, "in plat_sync_block_partial");
  }
  pthread_mutex_unlock(&b->mu);
}

/* --- fences, time, memory, misc ---------------------------------------------------- */

void plat_fence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void plat_fence_device(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void plat_fence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

uint64_t plat_nanoseconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double plat_tick_seconds(void) {
  struct timespec ts;
  if (clock_getres(CLOCK_MONOTONIC, &ts) != 0 || (ts.tv_sec == 0 && ts.tv_nsec == 0))
    return 1e-9;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void *plat_dyn_shared(void) { return self("plat_dyn_shared")->blk->dyn; }
uint32_t plat_dyn_shared_size(void) { return self("plat_dyn_shared_size")->blk->dyn_size; }

void plat_trap(void) {
  emu_thread *t = t_self;
  if (t)
    fprintf(stderr, "emu: plat_trap in thread %u of block %u\n", t->tid, t->blk->id);
  else
    fprintf(stderr, "emu: plat_trap outside an emulated thread\n");
  fflush(stderr);
  abort();
}

int plat_vprintf(const char *format, void *packed_args) {
  (void)format;
  (void)packed_args;
  return -1;
}

void plat_yield(void) { sched_yield(); }

/* --- launch ------------------------------------------------------------------------- */

static void thread_exit(emu_thread *t) {
  emu_block *b = t->blk;
  pthread_mutex_lock(&b->mu);
  if (t->wop != WOP_IDLE)
    die_locked(b, "thread %u returns inside a warp collective", t->tid);
  t->exited = true;
  __atomic_store_n(&b->alive[t->warp], b->alive[t->warp] & ~(1ull << t->lane), __ATOMIC_RELAXED);
  b->live--;
  /* Threads waiting at the block barrier no longer wait for this one. */
  if (b->bar_arrived > 0 && b->bar_arrived == b->live) {
    b->bar_arrived = 0;
    b->bar_gen++;
    __atomic_fetch_add(&g_stat_bar, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&b->bar_cv);
  }
  /* Collectives of this warp no longer wait for it either. */
  pthread_cond_broadcast(&b->warp_cv[t->warp]);
  check_deadlock(b);
  pthread_mutex_unlock(&b->mu);
}

static void *thread_main(void *arg) {
  emu_thread *t = arg;
  t_self = t;
  g_launch.kernel(g_launch.dyn_ptr, g_launch.args);
  thread_exit(t);
  t_self = NULL;
  return NULL;
}

static int run_block(emu_block *b, uint32_t id) {
  b->id = id;
  b->live = b->size;
  b->waiting = 0;
  b->bar_arrived = b->pbar_arrived = b->pbar_n = 0;
  for (uint32_t w = 0; w < b->nwarps; w++)
    b->alive[w] = lanes_existing(b, w);
  for (uint32_t i = 0; i < b->size; i++) {
    emu_thread *t = &b->threads[i];
    memset(t, 0, sizeof *t);
    t->tid = i;
    t->lane = i % b->warp_size;
    t->warp = i / b->warp_size;
    t->blk = b;
  }
  if (b->dyn)
    memset(b->dyn, 0xA5, b->dyn_size); /* uninitialised on a GPU: no zeros to rely on */

  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1u << 20);
  uint32_t started = 0;
  int err = 0;
  for (; started < b->size; started++) {
    err = pthread_create(&b->threads[started].handle, &attr, thread_main, &b->threads[started]);
    if (err)
      break;
  }
  pthread_attr_destroy(&attr);
  if (err) {
    /* The threads that started would wait forever for the rest. */
    die("cannot create thread %u of %u of block %u: %s", started, b->size, id, strerror(err));
  }
  for (uint32_t i = 0; i < b->size; i++)
    pthread_join(b->threads[i].handle, NULL);
  return 0;
}

int emu_launch(const emu_launch_config *cfg, emu_kernel_fn kernel, void *dyn_ptr, void **args) {
  if (!cfg || !kernel || cfg->num_blocks == 0 || cfg->block_size == 0 ||
      cfg->block_size > RTL_MAX_THREADS || (cfg->warp_size != 32 && cfg->warp_size != 64)) {
    fprintf(stderr, "emu_launch: bad configuration (blocks %u, block size %u (1..%u), warp size %u "
                    "(32 or 64))\n",
            cfg ? cfg->num_blocks : 0, cfg ? cfg->block_size : 0, RTL_MAX_THREADS,
            cfg ? cfg->warp_size : 0);
    return -1;
  }
  if (__atomic_exchange_n(&g_launch_busy, 1, __ATOMIC_ACQUIRE)) {
    fprintf(stderr, "emu_launch: a launch is already running\n");
    return -1;
  }
  const char *am = getenv("EMU_ACTIVE_MASK");
  g_mask_self = am && !strcmp(am, "self");
  const char *hang = getenv("EMU_HANG_SECONDS");
  if (hang && atof(hang) > 0)
    g_hang_seconds = atof(hang);

  g_launch.num_blocks = cfg->num_blocks;
  g_launch.kernel = kernel;
  g_launch.dyn_ptr = dyn_ptr;
  g_launch.args = args;

  emu_block b;
  memset(&b, 0, sizeof b);
  b.size = cfg->block_size;
  b.warp_size = cfg->warp_size;
  b.nwarps = (b.size + b.warp_size - 1) / b.warp_size;
  b.threads = calloc(b.size, sizeof *b.threads);
  b.warp_cv = calloc(b.nwarps, sizeof *b.warp_cv);
  b.alive = calloc(b.nwarps, sizeof *b.alive);
  b.dyn_size = cfg->dyn_shared_bytes;
  b.dyn = b.dyn_size ? aligned_alloc(64, (b.dyn_size + 63) & ~63u) : NULL;
  if (!b.threads || !b.warp_cv || !b.alive || (b.dyn_size && !b.dyn))
    die("emu_launch: out of memory");
  pthread_mutex_init(&b.mu, NULL);
  pthread_cond_init(&b.bar_cv, NULL);
  for (uint32_t w = 0; w < b.nwarps; w++)
    pthread_cond_init(&b.warp_cv[w], NULL);

  int rc = 0;
  for (uint32_t id = 0; id < cfg->num_blocks && rc == 0; id++)
    rc = run_block(&b, id);

  for (uint32_t w = 0; w < b.nwarps; w++)
    pthread_cond_destroy(&b.warp_cv[w]);
  pthread_cond_destroy(&b.bar_cv);
  pthread_mutex_destroy(&b.mu);
  free(b.dyn);
  free(b.alive);
  free(b.warp_cv);
  free(b.threads);
  __atomic_store_n(&g_launch_busy, 0, __ATOMIC_RELEASE);
  return rc;
}
