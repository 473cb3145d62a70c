/* ol_saxpy.c - the ol* API (libLLVMOffload.so.22.1) on the first CUDA
 * device (else the first GPU: a server's through the remote plugin): load an image (PTX, cubin or fatbinary; argv[1]), run saxpy and
 * a reduction in dynamic shared memory, check the results; with --bench,
 * time the cases raw_saxpy.c times straight on the driver, in the same
 * shape (scripts/gpu-tests.sh compares the two):
 *
 *   launch_sync_us   one small launch + olSyncQueue per iteration
 *                    (raw: cuLaunchKernel + cuStreamSynchronize)
 *   launch_batch_us  ITERS small launches, one sync (per launch)
 *   h2d_pinned_MBps  64 MiB from pinned host memory (olMemAlloc
 *                    OL_ALLOC_TYPE_HOST) to device memory, olMemcpy on
 *                    the queue + olSyncQueue per copy (raw: cuMemAllocHost
 *                    memory, cuMemcpyHtoDAsync + cuStreamSynchronize)
 *   d2h_pinned_MBps  the same, device to pinned host
 *
 * Output lines `bench CASE ol VALUE`. Each case is warmed up first.
 * Usage: ol_saxpy IMAGE [--bench ITERS]
 * Exit 0: ok, 1: wrong result, 2: setup or API failure. */
#include <stdbool.h>
#include <stddef.h>
#include <OffloadAPI.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MUST(call)                                                             \
  do {                                                                         \
    ol_result_t r_ = (call);                                                   \
    if (r_) {                                                                  \
      fprintf(stderr, "%s failed: %d: %s\n", #call, (int)r_->Code,             \
              r_->Details ? r_->Details : "");                                 \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

enum { COPY_BYTES = 64 << 20, COPIES = 16 };

static ol_device_handle_t gpu, host, any_gpu;

static bool pick(ol_device_handle_t d, void *unused) {
  (void)unused;
  ol_platform_handle_t p;
  ol_platform_backend_t b;
  if (olGetDeviceInfo(d, OL_DEVICE_INFO_PLATFORM, sizeof p, &p) ||
      olGetPlatformInfo(p, OL_PLATFORM_INFO_BACKEND, sizeof b, &b))
    return true;
  if (b == OL_PLATFORM_BACKEND_HOST && !host) host = d;
  if (b == OL_PLATFORM_BACKEND_CUDA && !gpu) gpu = d;
  /* A GPU of another platform (a server's CUDA device through the remote
   * plugin) is the fallback. */
  ol_device_type_t t;
  if (!any_gpu && !olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof t, &t) &&
      t == OL_DEVICE_TYPE_GPU)
    any_gpu = d;
  return true;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

struct saxpy_args { int n; float a; const float *x; float *y; };

static void bench(ol_queue_handle_t q, ol_symbol_handle_t saxpy, float *dx, int iters) {
  /* A 32-element saxpy, one block: the launch is all there is. */
  struct saxpy_args sa = {32, 2.0f, dx, dx};
  ol_kernel_launch_size_args_t l1 = {1, {1, 1, 1}, {32, 1, 1}, 0};
  for (int i = 0; i < 100; i++) {
    MUST(olLaunchKernel(q, gpu, saxpy, &sa, sizeof sa, &l1));
    MUST(olSyncQueue(q));
  }
  double t0 = now();
  for (int i = 0; i < iters; i++) {
    MUST(olLaunchKernel(q, gpu, saxpy, &sa, sizeof sa, &l1));
    MUST(olSyncQueue(q));
  }
  double t1 = now();
  printf("bench launch_sync_us ol %.3f\n", (t1 - t0) * 1e6 / iters);
  t0 = now();
  for (int i = 0; i < iters; i++)
    MUST(olLaunchKernel(q, gpu, saxpy, &sa, sizeof sa, &l1));
  MUST(olSyncQueue(q));
  t1 = now();
  printf("bench launch_batch_us ol %.3f\n", (t1 - t0) * 1e6 / iters);

  /* Pinned host memory both ways. */
  unsigned char *h, *d;
  MUST(olMemAlloc(gpu, OL_ALLOC_TYPE_HOST, COPY_BYTES, (void **)&h));
  MUST(olMemAlloc(gpu, OL_ALLOC_TYPE_DEVICE, COPY_BYTES, (void **)&d));
  for (size_t i = 0; i < COPY_BYTES; i++) h[i] = (unsigned char)(i * 7 + 3);
  MUST(olMemcpy(q, d, gpu, h, host, COPY_BYTES));
  MUST(olSyncQueue(q));
  t0 = now();
  for (int i = 0; i < COPIES; i++) {
    MUST(olMemcpy(q, d, gpu, h, host, COPY_BYTES));
    MUST(olSyncQueue(q));
  }
  t1 = now();
  printf("bench h2d_pinned_MBps ol %.1f\n", (double)COPIES * COPY_BYTES / (t1 - t0) / 1e6);
  memset(h, 0, COPY_BYTES);
  MUST(olMemcpy(q, h, host, d, gpu, COPY_BYTES));
  MUST(olSyncQueue(q));
  t0 = now();
  for (int i = 0; i < COPIES; i++) {
    MUST(olMemcpy(q, h, host, d, gpu, COPY_BYTES));
    MUST(olSyncQueue(q));
  }
  t1 = now();
  printf("bench d2h_pinned_MBps ol %.1f\n", (double)COPIES * COPY_BYTES / (t1 - t0) / 1e6);
  int bad = 0;
  for (size_t i = 0; i < COPY_BYTES; i += 4093) bad += h[i] != (unsigned char)(i * 7 + 3);
  printf("pinned copies: %s\n", bad ? "WRONG" : "ok");
  MUST(olMemFree(h));
  MUST(olMemFree(d));
  if (bad) exit(1);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ol_saxpy IMAGE [--bench ITERS]\n");
    return 2;
  }
  int iters = argc > 3 && !strcmp(argv[2], "--bench") ? atoi(argv[3]) : 0;
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *img = malloc((size_t)size);
  if (fread(img, 1, (size_t)size, f) != (size_t)size) return 2;
  fclose(f);

  MUST(olInit());
  MUST(olIterateDevices(pick, NULL));
  if (!gpu) gpu = any_gpu;
  if (!gpu || !host) {
    fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  char name[256] = "";
  MUST(olGetDeviceInfo(gpu, OL_DEVICE_INFO_NAME, sizeof name, name));
  printf("device: %s\n", name);
  ol_program_handle_t prog;
  MUST(olCreateProgram(gpu, img, (size_t)size, &prog));
  ol_symbol_handle_t saxpy, reduce;
  MUST(olGetSymbol(prog, "saxpy", OL_SYMBOL_KIND_KERNEL, &saxpy));
  MUST(olGetSymbol(prog, "reduce", OL_SYMBOL_KIND_KERNEL, &reduce));
  ol_queue_handle_t q;
  MUST(olCreateQueue(gpu, &q));

  int n = 1 << 20;
  float *hx = malloc(n * sizeof(float)), *hy = malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) {
    hx[i] = (float)i;
    hy[i] = 1.0f;
  }
  float *dx, *dy;
  MUST(olMemAlloc(gpu, OL_ALLOC_TYPE_DEVICE, n * sizeof(float), (void **)&dx));
  MUST(olMemAlloc(gpu, OL_ALLOC_TYPE_DEVICE, n * sizeof(float), (void **)&dy));
  MUST(olMemcpy(q, dx, gpu, hx, host, n * sizeof(float)));
  MUST(olMemcpy(q, dy, gpu, hy, host, n * sizeof(float)));
  struct saxpy_args sa = {n, 2.0f, dx, dy};
  ol_kernel_launch_size_args_t ls = {1, {(uint32_t)(n / 256), 1, 1}, {256, 1, 1}, 0};
  MUST(olLaunchKernel(q, gpu, saxpy, &sa, sizeof sa, &ls));
  MUST(olMemcpy(q, hy, host, dy, gpu, n * sizeof(float)));
  MUST(olSyncQueue(q));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += hy[i] != 2.0f * (float)i + 1.0f;
  printf("saxpy: %s\n", bad ? "WRONG" : "ok");

  /* One block; each thread's partial sum in dynamic shared memory. */
  int m = 100000;
  int *hv = malloc(m * sizeof(int));
  for (int i = 0; i < m; i++) hv[i] = i + 1;
  int *dv;
  long long *dsum, sum = 0;
  MUST(olMemAlloc(gpu, OL_ALLOC_TYPE_DEVICE, m * sizeof(int), (void **)&dv));
  MUST(olMemAlloc(gpu, OL_ALLOC_TYPE_DEVICE, sizeof sum, (void **)&dsum));
  MUST(olMemcpy(NULL, dv, gpu, hv, host, m * sizeof(int)));
  struct { const int *in; int n; long long *out; } ra = {dv, m, dsum};
  ol_kernel_launch_size_args_t lr = {1, {1, 1, 1}, {256, 1, 1}, 256 * sizeof(long long)};
  MUST(olLaunchKernel(q, gpu, reduce, &ra, sizeof ra, &lr));
  MUST(olSyncQueue(q));
  MUST(olMemcpy(NULL, &sum, host, dsum, gpu, sizeof sum));
  int rbad = sum != (long long)m * (m + 1) / 2;
  bad += rbad;
  printf("reduce: %s (%lld)\n", rbad ? "WRONG" : "ok", sum);

  if (iters > 0 && !bad) bench(q, saxpy, dx, iters);

  MUST(olMemFree(dx));
  MUST(olMemFree(dy));
  MUST(olMemFree(dv));
  MUST(olMemFree(dsum));
  MUST(olDestroyQueue(q));
  MUST(olDestroyProgram(prog));
  MUST(olShutDown());
  return bad ? 1 : 0;
}
