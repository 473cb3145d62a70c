/* e2e.c - end to end: load host kernels (plain .so and the same .so inside
 * an LLVM OffloadBinary) with olCreateProgram and run grids: saxpy, two
 * reductions (atomics; group memory), a 2-D grid, queued and synchronous.
 * Usage: e2e <image> [<image> ...] */
#include "common.h"

static ol_device_handle_t H, D;

static void run_image(const char *path) {
  size_t size;
  char *img = read_file(path, &size);
  bool valid = false;
  OK(olIsValidBinary(D, img, size, &valid));
  CHECK(valid);
  ol_program_handle_t prog;
  MUST(olCreateProgram(D, img, size, &prog));
  free(img);
  ol_symbol_handle_t saxpy, reduce, reduce_group, ids;
  MUST(olGetSymbol(prog, "saxpy", OL_SYMBOL_KIND_KERNEL, &saxpy));
  MUST(olGetSymbol(prog, "reduce_sum", OL_SYMBOL_KIND_KERNEL, &reduce));
  MUST(olGetSymbol(prog, "reduce_group", OL_SYMBOL_KIND_KERNEL, &reduce_group));
  MUST(olGetSymbol(prog, "ids_2d", OL_SYMBOL_KIND_KERNEL, &ids));
  ol_queue_handle_t q;
  MUST(olCreateQueue(D, &q));

  /* saxpy over 1M elements: 4096 groups of 256. */
  size_t n = 1 << 20;
  float *hx = malloc(n * sizeof(float)), *hy = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    hx[i] = (float)i;
    hy[i] = 1.0f;
  }
  float *dx, *dy;
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, n * sizeof(float), (void **)&dx));
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, n * sizeof(float), (void **)&dy));
  OK(olMemcpy(q, dx, D, hx, H, n * sizeof(float)));
  OK(olMemcpy(q, dy, D, hy, H, n * sizeof(float)));
  struct { float a; const float *x; float *y; size_t n; } sa = {2.0f, dx, dy, n};
  ol_kernel_launch_size_args_t ls = {1, {(uint32_t)(n / 256), 1, 1}, {256, 1, 1}, 0};
  OK(olLaunchKernel(q, D, saxpy, &sa, sizeof sa, &ls));
  OK(olMemcpy(q, hy, H, dy, D, n * sizeof(float)));
  OK(olSyncQueue(q));
  int good = 1;
  for (size_t i = 0; i < n; i++) good &= hy[i] == 2.0f * (float)i + 1.0f;
  CHECK(good);
  /* A second, synchronous launch with a ragged tail (n not a multiple). */
  sa.n = n - 77;
  ol_kernel_launch_size_args_t ls2 = {1, {(uint32_t)((n - 77 + 127) / 128), 1, 1}, {128, 1, 1}, 0};
  OK(olLaunchKernel(NULL, D, saxpy, &sa, sizeof sa, &ls2));
  OK(olMemcpy(NULL, hy, H, dy, D, n * sizeof(float)));
  good = 1;
  for (size_t i = 0; i < n; i++)
    good &= hy[i] == (i < n - 77 ? 4.0f * (float)i + 1.0f : 2.0f * (float)i + 1.0f);
  CHECK(good);

  /* Reduction with atomics: sum of 1..m. */
  size_t m = 100000;
  int64_t *hv = malloc(m * sizeof(int64_t));
  for (size_t i = 0; i < m; i++) hv[i] = (int64_t)i + 1;
  int64_t *dv, *dsum, sum = 0, zero = 0;
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, m * sizeof(int64_t), (void **)&dv));
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, sizeof(int64_t), (void **)&dsum));
  OK(olMemcpy(NULL, dv, D, hv, H, m * sizeof(int64_t)));
  OK(olMemcpy(NULL, dsum, D, &zero, H, sizeof zero));
  struct { const int64_t *x; int64_t *out; size_t n; } ra = {dv, dsum, m};
  ol_kernel_launch_size_args_t lr = {1, {(uint32_t)((m + 63) / 64), 1, 1}, {64, 1, 1}, 0};
  OK(olLaunchKernel(q, D, reduce, &ra, sizeof ra, &lr));
  OK(olSyncQueue(q));
  OK(olMemcpy(NULL, &sum, H, dsum, D, sizeof sum));
  CHECK(sum == (int64_t)m * (int64_t)(m + 1) / 2);
  /* Same with per-group partial sums in dynamic group memory. */
  OK(olMemFill(q, dsum, sizeof zero, &zero, sizeof zero));
  ol_kernel_launch_size_args_t lg = {1, {(uint32_t)((m + 127) / 128), 1, 1}, {128, 1, 1}, sizeof(int64_t)};
  OK(olLaunchKernel(q, D, reduce_group, &ra, sizeof ra, &lg));
  OK(olSyncQueue(q));
  OK(olMemcpy(NULL, &sum, H, dsum, D, sizeof sum));
  CHECK(sum == (int64_t)m * (int64_t)(m + 1) / 2);

  /* 2-D grid. */
  uint32_t w = 100, h = 37;
  uint32_t *dids, *hids = malloc(w * h * sizeof(uint32_t));
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, w * h * sizeof(uint32_t), (void **)&dids));
  struct { uint32_t *out; uint32_t w, h; } ia = {dids, w, h};
  ol_kernel_launch_size_args_t l2 = {2, {(w + 15) / 16, (h + 7) / 8, 1}, {16, 8, 1}, 0};
  OK(olLaunchKernel(q, D, ids, &ia, sizeof ia, &l2));
  ol_event_handle_t ev;
  OK(olCreateEvent(q, &ev));
  OK(olSyncEvent(ev));
  OK(olDestroyEvent(ev));
  OK(olMemcpy(NULL, hids, H, dids, D, w * h * sizeof(uint32_t)));
  good = 1;
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++) good &= hids[y * w + x] == y * 1000 + x;
  CHECK(good);

  OK(olMemFree(dx));
  OK(olMemFree(dy));
  OK(olMemFree(dv));
  OK(olMemFree(dsum));
  OK(olMemFree(dids));
  OK(olDestroyQueue(q));
  OK(olDestroyProgram(prog));
  free(hx);
  free(hy);
  free(hv);
  free(hids);
  printf("image %s: ok\n", path);
}

int main(int argc, char **argv) {
  MUST(olInit());
  collect_devices();
  H = host_device();
  D = offload_device(0);
  if (!D || !H) {
    fprintf(stderr, "no offload device\n");
    return 2;
  }
  for (int i = 1; i < argc; i++) run_image(argv[i]);
  OK(olShutDown());
  return finish("e2e");
}
