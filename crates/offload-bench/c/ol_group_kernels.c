/* ol_group_kernels.c - GPU-style kernels on the first CPU device through the
 * ol* API: time per launch (launch + olSyncQueue) of the kernels of
 * plugins/host/tests/kernels/group_kernels.c.
 * Usage: ol_group_kernels group_kernels.so [ROUNDS [ONLY]]
 * (ONLY: run just the measures whose name contains it, e.g. saxpy).
 * Prints, best of ROUNDS:
 *   - matmul_tiled 1024 x 1024 (16 x 16 tiles in static group memory, two
 *     barriers per tile step): ms and GFLOP/s;
 *   - reduce_dynamic, 2^14 groups of 256 items (9 barriers per item):
 *     ms and million items/s;
 *   - matmul_loops, reduce_loops: the same two kernels with their group
 *     form (OFFLOAD_HOST_KERNEL_GROUP: the group as loops split at the
 *     barriers, run instead of coroutines);
 *   - write_global_id (no barrier, the direct path), 2^22 items in groups of
 *     256: ms and million items/s;
 *   - saxpy over 2^24 floats (groups of 256): ms and GB/s (12 bytes/element);
 *   - launch + olSyncQueue of a one-item kernel: us.
 * crates/offload-bench/c/cl_group_kernels.c runs the same kernels, written
 * in OpenCL C, on an OpenCL CPU device (PoCL). */
#include "ol_bench_util.h"
#include <stdint.h>
#include <string.h>

static const char *only;
static int want(const char *name) { return !only || strstr(name, only); }

static ol_queue_handle_t q;
static double best(int rounds, ol_symbol_handle_t k, void *args, size_t size,
                   ol_kernel_launch_size_args_t *ls) {
  double b = 1e30;
  for (int r = 0; r < rounds; r++) {
    double t = now_us();
    CHK(olLaunchKernel(q, g_dev, k, args, size, ls));
    CHK(olSyncQueue(q));
    t = (now_us() - t) / 1e3;
    if (t < b) b = t;
  }
  return b;
}

/* Two elements of C = A x B against the host's sums (exact: small integers). */
static void check_matmul(const float *a, const float *b, float *c, int n) {
  int at[2][2] = {{0, 0}, {n - 1, n - 2}};
  for (int e = 0; e < 2; e++) {
    int row = at[e][0], col = at[e][1];
    float want = 0;
    for (int k = 0; k < n; k++) want += a[row * n + k] * b[k * n + col];
    if (c[row * n + col] != want) printf("WRONG matmul: c[%d][%d] = %g, not %g\n", row, col, c[row * n + col], want);
    c[row * n + col] = -1;
  }
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  only = argc > 3 ? argv[3] : NULL;
  long n;
  char *img = read_image(argv[1], &n);
  CHK(olInit());
  CHK(olIterateDevices(pick, NULL));
  if (!g_dev) return 3;
  ol_program_handle_t prog;
  CHK(olCreateProgram(g_dev, img, n, &prog));
  CHK(olCreateQueue(g_dev, &q));
  ol_symbol_handle_t mm, red, plain, mml, redl;
  CHK(olGetSymbol(prog, "matmul_tiled", OL_SYMBOL_KIND_KERNEL, &mm));
  CHK(olGetSymbol(prog, "reduce_dynamic", OL_SYMBOL_KIND_KERNEL, &red));
  CHK(olGetSymbol(prog, "write_global_id", OL_SYMBOL_KIND_KERNEL, &plain));
  /* The group forms (absent from images built before them: skipped). */
  if (olGetSymbol(prog, "matmul_loops", OL_SYMBOL_KIND_KERNEL, &mml)) mml = NULL;
  if (olGetSymbol(prog, "reduce_loops", OL_SYMBOL_KIND_KERNEL, &redl)) redl = NULL;

  enum { N = 1024 };
  float *a, *b, *c;
  CHK(olMemAlloc(g_dev, OL_ALLOC_TYPE_MANAGED, N * N * 4, (void **)&a));
  CHK(olMemAlloc(g_dev, OL_ALLOC_TYPE_MANAGED, N * N * 4, (void **)&b));
  CHK(olMemAlloc(g_dev, OL_ALLOC_TYPE_MANAGED, N * N * 4, (void **)&c));
  for (int i = 0; i < N * N; i++) a[i] = b[i] = (float)(i % 3);
  struct {
    const float *a, *b;
    float *c;
    uint32_t n;
  } margs = {a, b, c, N};
  ol_kernel_launch_size_args_t mls = {2, {N / 16, N / 16, 1}, {16, 16, 1}, 0};
  double t;
  if (want("matmul_tiled")) {
    t = best(rounds, mm, &margs, sizeof margs, &mls);
    printf("matmul_tiled 1024^2: %.1f ms, %.2f GFLOP/s\n", t, 2.0 * N * N * N / t / 1e6);
    check_matmul(a, b, c, N);
  }
  if (mml && want("matmul_loops")) {
    t = best(rounds, mml, &margs, sizeof margs, &mls);
    printf("matmul_loops 1024^2: %.1f ms, %.2f GFLOP/s\n", t, 2.0 * N * N * N / t / 1e6);
    check_matmul(a, b, c, N);
  }

  uint32_t groups = 1 << 14, *out;
  CHK(olMemAlloc(g_dev, OL_ALLOC_TYPE_MANAGED, (size_t)groups * 4 << 8, (void **)&out));
  ol_kernel_launch_size_args_t rls = {1, {groups, 1, 1}, {256, 1, 1}, 256 * 4};
  if (want("reduce_dynamic")) {
    t = best(rounds, red, &out, sizeof out, &rls);
    printf("reduce_dynamic 2^14 x 256: %.1f ms, %.1f M items/s\n", t, groups * 256.0 / t / 1e3);
    if (out[0] != 512 || out[groups - 1] != 512) printf("WRONG reduction: %u\n", out[0]);
  }
  if (redl && want("reduce_loops")) {
    out[0] = out[groups - 1] = 0;
    t = best(rounds, redl, &out, sizeof out, &rls);
    printf("reduce_loops 2^14 x 256: %.1f ms, %.1f M items/s\n", t, groups * 256.0 / t / 1e3);
    if (out[0] != 512 || out[groups - 1] != 512) printf("WRONG reduction: %u\n", out[0]);
  }

  ol_kernel_launch_size_args_t pls = {1, {groups, 1, 1}, {256, 1, 1}, 0};
  if (want("write_global_id")) {
    t = best(rounds, plain, &out, sizeof out, &pls);
    printf("write_global_id 2^22 (direct): %.1f ms, %.1f M items/s\n", t, groups * 256.0 / t / 1e3);
  }

  ol_symbol_handle_t sx, empty;
  CHK(olGetSymbol(prog, "saxpy", OL_SYMBOL_KIND_KERNEL, &sx));
  CHK(olGetSymbol(prog, "write_global_id", OL_SYMBOL_KIND_KERNEL, &empty));
  uint32_t ns = 1u << 24;
  float *x, *y;
  CHK(olMemAlloc(g_dev, OL_ALLOC_TYPE_MANAGED, (size_t)ns * 4, (void **)&x));
  CHK(olMemAlloc(g_dev, OL_ALLOC_TYPE_MANAGED, (size_t)ns * 4, (void **)&y));
  for (uint32_t i = 0; i < ns; i++) x[i] = y[i] = 1;
  struct {
    float a;
    const float *x;
    float *y;
    uint32_t n;
  } sargs = {2, x, y, ns};
  ol_kernel_launch_size_args_t sls = {1, {ns / 256, 1, 1}, {256, 1, 1}, 0};
  if (want("saxpy")) {
    t = best(rounds, sx, &sargs, sizeof sargs, &sls);
    printf("saxpy 2^24: %.2f ms, %.2f GB/s\n", t, 12.0 * ns / t / 1e6);
  }

  /* Launch + sync of a one-item kernel, best of 20 x 10 000. */
  ol_kernel_launch_size_args_t one = {1, {1, 1, 1}, {1, 1, 1}, 0};
  double lat = 1e30;
  for (int r = 0; r < 20 && want("launch"); r++) {
    double t0 = now_us();
    for (int i = 0; i < 10000; i++) {
      CHK(olLaunchKernel(q, g_dev, empty, &out, sizeof out, &one));
      CHK(olSyncQueue(q));
    }
    double d = (now_us() - t0) / 10000;
    if (d < lat) lat = d;
  }
  if (want("launch")) printf("launch + sync (1 item): %.3f us\n", lat);
  CHK(olDestroyQueue(q));
  CHK(olShutDown());
  return 0;
}
