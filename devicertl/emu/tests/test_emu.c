/* The emulator's own tests: the platform.h primitives alone, without the
 * runtime (ids, block and partial barriers with exited threads, warp masks,
 * shuffles with segments and partial warps, disjoint-mask collectives,
 * dynamic shared memory, the clock, and the diagnostics). */
#include "tf.h"
#include "platform.h"

#include <stdatomic.h>

#define MAXT 1024

/* --- ids ---------------------------------------------------------------- */
static struct rec {
  uint32_t tid, lane, bsize, bid, nblocks, wsize;
  int seen;
} recs[8][MAXT];

static void k_ids(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint32_t b = plat_block_id(), t = plat_thread_id();
  struct rec *r = &recs[b][t];
  r->tid = t;
  r->lane = plat_lane_id();
  r->bsize = plat_block_size();
  r->bid = b;
  r->nblocks = plat_num_blocks();
  r->wsize = plat_warp_size();
  r->seen++;
}

static void test_ids(void) {
  static const uint32_t sizes[] = {1, 5, 32, 33, 64, 100, 128};
  for (int w = 32; w <= 64; w += 32)
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      uint32_t n = sizes[s];
      tf_begin("ids: 3 blocks x %u threads, warp %d", n, w);
      memset(recs, 0, sizeof recs);
      tf_launch(3, n, (uint32_t)w, 0, k_ids, NULL, NULL);
      for (uint32_t b = 0; b < 3; b++)
        for (uint32_t t = 0; t < n; t++) {
          struct rec *r = &recs[b][t];
          CHECK_EQ(r->seen, 1);
          CHECK_EQ(r->tid, t);
          CHECK_EQ(r->lane, t % (uint32_t)w);
          CHECK_EQ(r->bsize, n);
          CHECK_EQ(r->bid, b);
          CHECK_EQ(r->nblocks, 3);
          CHECK_EQ(r->wsize, w);
        }
      CHECK_EQ(recs[0][n].seen, 0);
      tf_end();
    }
}

/* --- block barrier ------------------------------------------------------- */
static int slots[MAXT];

/* Write, barrier, read the neighbour's, barrier: rounds of it. Threads with
 * (tid % args[0]) == 1 leave first (when args[0] != 0), so the barrier must
 * count live threads only. */
static void k_barrier(void *dyn, void **args) {
  (void)dyn;
  uintptr_t leave_mod = (uintptr_t)args[0];
  uint32_t t = plat_thread_id(), n = plat_block_size();
  if (leave_mod && t % leave_mod == 1)
    return;
  for (int round = 0; round < 20; round++) {
    __atomic_store_n(&slots[t], round * 10000 + (int)t, __ATOMIC_RELAXED);
    plat_sync_block();
    uint32_t u = (t + 1) % n;
    while (leave_mod && u % leave_mod == 1)
      u = (u + 1) % n;
    int v = __atomic_load_n(&slots[u], __ATOMIC_RELAXED);
    CHECK_EQ(v, round * 10000 + (int)u);
    plat_sync_block();
  }
}

static void test_barrier(void) {
  static const uint32_t sizes[] = {1, 2, 31, 64, 100, 256};
  for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (uintptr_t leave = 0; leave <= 3; leave += 3) {
      tf_begin("block barrier: %u threads, %s", sizes[s],
               leave ? "a third of them exit first" : "all stay");
      uint64_t before = emu_stat_block_barriers();
      void *args[] = {(void *)leave};
      tf_launch(2, sizes[s], 32, 0, k_barrier, NULL, args);
      CHECK(emu_stat_block_barriers() - before >= 2 * 40 || sizes[s] == 1);
      tf_end();
    }
}

/* Exit while others already wait: threads >= 16 wait at the barrier, the
 * rest leave after a delay; the barrier completes when the last one leaves. */
static atomic_int exit_after;
static void k_barrier_exit_late(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint32_t t = plat_thread_id();
  if (t < 16) {
    for (int i = 0; i < 1000; i++)
      plat_yield();
    atomic_fetch_add(&exit_after, 1);
    return;
  }
  plat_sync_block();
  CHECK_EQ(atomic_load(&exit_after), 16);
}

static void test_barrier_exit_late(void) {
  tf_begin("block barrier completes when the missing threads exit");
  atomic_store(&exit_after, 0);
  tf_launch(1, 48, 32, 0, k_barrier_exit_late, NULL, NULL);
  tf_end();
}

/* --- partial barrier ------------------------------------------------------ */
/* The generic-mode shape: workers (the first n) synchronise among
 * themselves many times while the last warp waits at the block barrier. */
static void k_partial(void *dyn, void **args) {
  (void)dyn;
  uint32_t n = (uint32_t)(uintptr_t)args[0];
  uint32_t t = plat_thread_id();
  if (t < n) {
    for (int round = 0; round < 10; round++) {
      __atomic_store_n(&slots[t], round + (int)t, __ATOMIC_RELAXED);
      plat_sync_block_partial(n);
      uint32_t u = (t + 7) % n;
      CHECK_EQ(__atomic_load_n(&slots[u], __ATOMIC_RELAXED), round + (int)u);
      plat_sync_block_partial(n);
    }
  }
  plat_sync_block();
}

static void test_partial(void) {
  for (uint32_t w = 32; w <= 64; w += 32)
    for (uint32_t warps = 1; warps <= 3; warps++) {
      tf_begin("partial barrier: %u workers + one warp, warp %u", warps * w, w);
      void *args[] = {(void *)(uintptr_t)(warps * w)};
      tf_launch(2, (warps + 1) * w, w, 0, k_partial, NULL, args);
      tf_end();
    }
}

/* --- warps ------------------------------------------------------------------ */
static uint64_t masks[MAXT];

static void k_active_mask(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint32_t t = plat_thread_id();
  uint32_t w = plat_warp_size();
  masks[t] = plat_active_mask();
  plat_sync_block();
  /* In the last warp, lanes >= 4 leave; the others wait for them to be
   * gone (a sync over the whole mask no longer waits for exited lanes). */
  uint32_t last_warp = (plat_block_size() - 1) / w;
  if (t / w == last_warp) {
    if (plat_lane_id() >= 4)
      return;
    plat_sync_warp(masks[t]);
    while ((plat_active_mask() & ~0xfull) != 0)
      plat_yield();
    /* Nobody leaves between the two syncs. */
    plat_sync_warp(0xf);
    uint64_t m = plat_active_mask();
    plat_sync_warp(0xf);
    CHECK_EQ(m, 0xf);
  }
}

static void test_active_mask(void) {
  static const uint32_t sizes[] = {8, 32, 40, 64, 100};
  for (uint32_t w = 32; w <= 64; w += 32)
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      uint32_t n = sizes[s];
      tf_begin("active mask: %u threads, warp %u", n, w);
      tf_launch(1, n, w, 0, k_active_mask, NULL, NULL);
      for (uint32_t t = 0; t < n; t++) {
        uint32_t first = t / w * w;
        uint32_t lanes = n - first < w ? n - first : w;
        uint64_t want = lanes == 64 ? ~0ull : (1ull << lanes) - 1;
        CHECK_EQ(masks[t], want);
      }
      tf_end();
    }
}

static int32_t shfl_out[MAXT][16];
static const uint32_t deltas[] = {0, 1, 2, 3, 5, 8, 16, 31, 32, 63};
#define NDELTAS (sizeof deltas / sizeof *deltas)

static int32_t val_of(uint32_t t) { return (int32_t)(t * 7 + 1000); }

static void k_shfl(void *dyn, void **args) {
  (void)dyn;
  uint32_t width = (uint32_t)(uintptr_t)args[0];
  int idx = args[1] != NULL;
  uint32_t t = plat_thread_id();
  uint64_t mask = plat_active_mask();
  for (unsigned d = 0; d < NDELTAS; d++)
    shfl_out[t][d] = idx ? plat_shfl_idx_i32(mask, val_of(t), deltas[d], width)
                         : plat_shfl_down_i32(mask, val_of(t), deltas[d], width);
}

static void test_shfl(void) {
  static const uint32_t sizes[] = {1, 7, 32, 40, 64, 100, 128};
  int quick = getenv("TF_QUICK") != NULL;
  for (uint32_t w = 32; w <= 64; w += 32)
    for (uint32_t width = 1; width <= w; width *= 2)
      for (int idx = 0; idx < 2; idx++)
        for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
          uint32_t n = sizes[s];
          if (quick && (s % 2 == 1 || (width != 1 && width != 8 && width != w)))
            continue;
          tf_begin("shfl_%s: %u threads, warp %u, width %u", idx ? "idx" : "down", n, w, width);
          void *args[] = {(void *)(uintptr_t)width, idx ? (void *)1 : NULL};
          tf_launch(1, n, w, 0, k_shfl, NULL, args);
          for (uint32_t t = 0; t < n; t++) {
            uint32_t lane = t % w, base = lane & ~(width - 1);
            for (unsigned d = 0; d < NDELTAS; d++) {
              int32_t want;
              if (idx) {
                uint32_t src = t - lane + base + (deltas[d] % width);
                want = src < n ? val_of(src) : EMU_SHFL_POISON;
              } else if (lane - base + deltas[d] < width) {
                uint32_t src = t + deltas[d];
                want = src < n ? val_of(src) : EMU_SHFL_POISON;
              } else {
                want = val_of(t);
              }
              CHECK_MSG(shfl_out[t][d] == want, "thread %u delta/src %u: %d, want %d", t,
                        deltas[d], shfl_out[t][d], want);
            }
          }
          tf_end();
        }
}

/* Two groups of a warp (even and odd lanes) run collectives with disjoint
 * masks at the same time, then the whole warp together. */
static void k_disjoint(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint32_t lane = plat_lane_id(), w = plat_warp_size();
  uint64_t full = w == 64 ? ~0ull : (1ull << w) - 1;
  uint64_t even = 0x5555555555555555ull & full, odd = 0xAAAAAAAAAAAAAAAAull & full;
  uint64_t mine = lane & 1 ? odd : even;
  for (int round = 0; round < 50; round++) {
    int32_t leader = plat_shfl_idx_i32(mine, (int32_t)(lane * 100 + round), lane & 1, w);
    CHECK_EQ(leader, (int32_t)((lane & 1) * 100 + round));
    if (round % 10 == 0) {
      int32_t all = plat_shfl_idx_i32(full, (int32_t)lane, w - 1, w);
      CHECK_EQ(all, (int32_t)(w - 1));
    }
  }
  plat_sync_warp(full);
}

static void test_disjoint(void) {
  for (uint32_t w = 32; w <= 64; w += 32) {
    tf_begin("disjoint-mask collectives in one warp, warp %u", w);
    uint64_t before = emu_stat_warp_ops();
    tf_launch(1, 2 * w, w, 0, k_disjoint, NULL, NULL);
    CHECK(emu_stat_warp_ops() - before >= 2 * (100 + 5 + 1));
    tf_end();
  }
}

/* plat_sync_warp as the only synchronisation of a data exchange. */
static void k_syncwarp(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint32_t t = plat_thread_id(), lane = plat_lane_id();
  uint64_t mask = plat_active_mask();
  uint32_t lanes = (uint32_t)__builtin_popcountll(mask);
  for (int round = 0; round < 30; round++) {
    __atomic_store_n(&slots[t], round * 1000 + (int)t, __ATOMIC_RELAXED);
    plat_sync_warp(mask);
    uint32_t u = t - lane + (lane + 1) % lanes;
    CHECK_EQ(__atomic_load_n(&slots[u], __ATOMIC_RELAXED), round * 1000 + (int)u);
    plat_sync_warp(mask);
  }
}

static void test_syncwarp(void) {
  for (uint32_t w = 32; w <= 64; w += 32) {
    tf_begin("plat_sync_warp orders a data exchange, warp %u", w);
    tf_launch(2, 3 * w - 5, w, 0, k_syncwarp, NULL, NULL);
    tf_end();
  }
}

/* --- dynamic shared memory, clock ---------------------------------------------- */
static void *dyn_ptrs[8];
static uint32_t dyn_sizes[8];
static void k_dyn(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint32_t b = plat_block_id(), t = plat_thread_id();
  unsigned char *p = plat_dyn_shared();
  uint32_t n = plat_dyn_shared_size();
  if (t == 0) {
    dyn_ptrs[b] = p;
    dyn_sizes[b] = n;
  }
  if (!p)
    return;
  for (uint32_t i = t; i < n; i += plat_block_size())
    p[i] = (unsigned char)(i + b);
  plat_sync_block();
  for (uint32_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i + b)) {
      CHECK_EQ(p[i], (unsigned char)(i + b));
      break;
    }
}

static void test_dyn(void) {
  static const uint32_t sizes[] = {0, 1, 100, 4096, 65536};
  for (unsigned s = 0; s < 5; s++) {
    tf_begin("dynamic shared memory of %u bytes", sizes[s]);
    memset(dyn_ptrs, 0, sizeof dyn_ptrs);
    tf_launch(3, 64, 32, sizes[s], k_dyn, NULL, NULL);
    for (int b = 0; b < 3; b++) {
      CHECK_EQ(dyn_sizes[b], sizes[s]);
      CHECK((dyn_ptrs[b] != NULL) == (sizes[s] != 0));
    }
    tf_end();
  }
}

static void k_clock(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint64_t a = plat_nanoseconds();
  for (int i = 0; i < 100; i++)
    plat_yield();
  uint64_t b = plat_nanoseconds();
  CHECK(b >= a);
  CHECK(plat_tick_seconds() > 0 && plat_tick_seconds() < 1e-3);
  plat_fence_block();
  plat_fence_device();
  plat_fence_system();
  CHECK_EQ(plat_vprintf("x", NULL), -1);
}

static void test_clock(void) {
  tf_begin("clock, fences, vprintf");
  tf_launch(1, 4, 32, 0, k_clock, NULL, NULL);
  tf_end();
}

/* --- many threads ------------------------------------------------------------------ */
static void k_big(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  uint32_t t = plat_thread_id(), n = plat_block_size();
  uint64_t mask = plat_active_mask();
  for (int round = 0; round < 5; round++) {
    slots[t] = round + (int)t;
    plat_sync_block();
    CHECK_EQ(slots[(t + 33) % n], round + (int)((t + 33) % n));
    int32_t v = plat_shfl_down_i32(mask, (int32_t)t, 1, plat_warp_size());
    CHECK_EQ(v, plat_lane_id() + 1 < plat_warp_size() ? (int32_t)t + 1 : (int32_t)t);
    plat_sync_block();
  }
}

static void test_big(void) {
  tf_begin("1024 threads: barriers and shuffles");
  tf_launch(2, 1024, 32, 0, k_big, NULL, NULL);
  tf_end();
  tf_begin("1024 threads, warp 64");
  tf_launch(1, 1024, 64, 0, k_big, NULL, NULL);
  tf_end();
}

/* --- diagnostics (each in a child process) ---------------------------------------------- */
static void k_trap(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  if (plat_thread_id() == 3)
    plat_trap();
  plat_sync_block();
}
static void k_deadlock(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  /* Thread 0 waits at the block barrier, thread 1 in a warp sync that waits
   * for thread 0: neither can go on. */
  if (plat_thread_id() == 0)
    plat_sync_block();
  else if (plat_thread_id() == 1)
    plat_sync_warp(0x3);
}
static void k_not_in_mask(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  if (plat_thread_id() == 1)
    plat_sync_warp(0x1);
}
static void k_bad_partial(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  if (plat_thread_id() == 40)
    plat_sync_block_partial(32);
}
static void k_bad_width(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  plat_shfl_down_i32(plat_active_mask(), 1, 1, 3);
}
static void k_returns_in_wop(void *dyn, void **args) {
  (void)dyn;
  (void)args;
}
static void run_launch(void *k) {
  emu_launch_config c = {1, 64, 32, 0};
  emu_launch(&c, (emu_kernel_fn)k, NULL, NULL);
}
static void outside(void *arg) {
  (void)arg;
  plat_thread_id();
}

static void test_diagnostics(void) {
  tf_begin("plat_trap aborts the process");
  tf_expect_abort(run_launch, (void *)k_trap, "plat_trap in thread 3 of block 0");
  tf_end();
  tf_begin("a deadlock is reported");
  tf_expect_abort(run_launch, (void *)k_deadlock, "deadlock");
  tf_end();
  tf_begin("a warp collective whose mask leaves out the caller is reported");
  tf_expect_abort(run_launch, (void *)k_not_in_mask, "leaves it out");
  tf_end();
  tf_begin("plat_sync_block_partial from outside its threads is reported");
  tf_expect_abort(run_launch, (void *)k_bad_partial, "outside the first 32");
  tf_end();
  tf_begin("a shuffle width that is not a power of two is reported");
  tf_expect_abort(run_launch, (void *)k_bad_width, "power of two");
  tf_end();
  tf_begin("platform calls outside a launch are reported");
  tf_expect_abort(outside, NULL, "outside an emulated GPU thread");
  tf_end();
  tf_begin("bad launch configurations are refused");
  emu_launch_config bad[] = {{0, 32, 32, 0}, {1, 0, 32, 0}, {1, 1025, 32, 0}, {1, 32, 16, 0}};
  for (int i = 0; i < 4; i++)
    CHECK_EQ(emu_launch(&bad[i], k_returns_in_wop, NULL, NULL), -1);
  tf_end();
}

static uint64_t self_masks[64];
static void k_mask_self(void *dyn, void **args) {
  (void)dyn;
  (void)args;
  self_masks[plat_thread_id()] = plat_active_mask();
}
static void test_mask_self(void) {
  tf_begin("EMU_ACTIVE_MASK=self: the caller's lane only");
  setenv("EMU_ACTIVE_MASK", "self", 1);
  tf_launch(1, 40, 32, 0, k_mask_self, NULL, NULL);
  unsetenv("EMU_ACTIVE_MASK");
  for (int t = 0; t < 40; t++)
    CHECK_EQ(self_masks[t], 1ull << (t % 32));
  tf_end();
}

int main(int argc, char **argv) {
  tf_init(argc, argv);
  /* These tests are about the default ("alive") active mask. */
  unsetenv("EMU_ACTIVE_MASK");
  test_mask_self();
  test_ids();
  test_barrier();
  test_barrier_exit_late();
  test_partial();
  test_active_mask();
  test_shfl();
  test_disjoint();
  test_syncwarp();
  test_dyn();
  test_clock();
  test_big();
  test_diagnostics();
  return tf_summary();
}
