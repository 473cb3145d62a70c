/* raw_saxpy.c - the baseline for scripts/gpu-tests.sh: the cases
 * ol_saxpy.c --bench times, straight on the CUDA driver (libcuda.so.1, or
 * OFFLOAD_CUDA_DRIVER, through dlopen; no CUDA headers needed to build),
 * in the same shape as the plugin drives the driver:
 *
 *   launch_sync_us   cuLaunchKernel (parameters through `extra`, as the
 *                    plugin passes them) + cuStreamSynchronize per iteration
 *   launch_batch_us  ITERS launches, one cuStreamSynchronize (per launch)
 *   h2d_pinned_MBps  64 MiB, cuMemAllocHost memory to cuMemAlloc memory:
 *                    cuMemcpyHtoDAsync + cuStreamSynchronize per copy
 *   d2h_pinned_MBps  the same with cuMemcpyDtoHAsync
 *
 * on one non-blocking stream of the primary context, like the plugin's
 * queues. Checks one saxpy first. Output lines `bench CASE raw VALUE`.
 * Usage: raw_saxpy PTX [ITERS]   (exit 0 ok, 1 wrong result, 2 failure) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;

static struct {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemAllocHost_v2)(void **, size_t);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **);
} cu;

static void *get(void *h, const char *s) {
  void *f = dlsym(h, s);
  if (!f) {
    fprintf(stderr, "missing %s\n", s);
    exit(2);
  }
  return f;
}
#define LOAD(name) (*(void **)&cu.name = get(h, #name))

#define CK(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_) {                                                                  \
      fprintf(stderr, "%s -> %d\n", #x, r_);                                   \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { COPY_BYTES = 64 << 20, COPIES = 16 };

struct saxpy_args { int n; float a; CUdeviceptr x, y; };

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: raw_saxpy PTX [ITERS]\n");
    return 2;
  }
  int iters = argc > 2 ? atoi(argv[2]) : 1000;
  const char *lib = getenv("OFFLOAD_CUDA_DRIVER");
  void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  LOAD(cuInit);
  LOAD(cuDeviceGet);
  LOAD(cuDevicePrimaryCtxRetain);
  LOAD(cuCtxSetCurrent);
  LOAD(cuModuleLoadDataEx);
  LOAD(cuModuleGetFunction);
  LOAD(cuStreamCreate);
  LOAD(cuStreamSynchronize);
  LOAD(cuMemAlloc_v2);
  LOAD(cuMemFree_v2);
  LOAD(cuMemAllocHost_v2);
  LOAD(cuMemFreeHost);
  LOAD(cuMemcpyHtoDAsync_v2);
  LOAD(cuMemcpyDtoHAsync_v2);
  LOAD(cuLaunchKernel);

  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *img = calloc(1, (size_t)size + 1); /* PTX must end in a NUL */
  if (fread(img, 1, (size_t)size, f) != (size_t)size) return 2;
  fclose(f);

  int dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction k;
  CUstream s;
  CK(cu.cuInit(0));
  CK(cu.cuDeviceGet(&dev, 0));
  CK(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cu.cuCtxSetCurrent(ctx));
  CK(cu.cuModuleLoadDataEx(&mod, img, 0, NULL, NULL));
  CK(cu.cuModuleGetFunction(&k, mod, "saxpy"));
  CK(cu.cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */));

  /* One saxpy, checked: the baseline must be doing the work. */
  int n = 1 << 20;
  float *hx;
  CUdeviceptr dx, dy;
  CK(cu.cuMemAllocHost_v2((void **)&hx, (size_t)n * sizeof(float)));
  CK(cu.cuMemAlloc_v2(&dx, (size_t)n * sizeof(float)));
  CK(cu.cuMemAlloc_v2(&dy, (size_t)n * sizeof(float)));
  for (int i = 0; i < n; i++) hx[i] = (float)i;
  CK(cu.cuMemcpyHtoDAsync_v2(dx, hx, (size_t)n * sizeof(float), s));
  CK(cu.cuMemcpyHtoDAsync_v2(dy, hx, (size_t)n * sizeof(float), s));
  struct saxpy_args sa = {n, 2.0f, dx, dy};
  size_t asz = sizeof sa;
  void *extra[] = {(void *)1 /* CU_LAUNCH_PARAM_BUFFER_POINTER */, &sa,
                   (void *)2 /* CU_LAUNCH_PARAM_BUFFER_SIZE */, &asz,
                   NULL /* CU_LAUNCH_PARAM_END */};
  CK(cu.cuLaunchKernel(k, (unsigned)n / 256, 1, 1, 256, 1, 1, 0, s, NULL, extra));
  CK(cu.cuMemcpyDtoHAsync_v2(hx, dy, (size_t)n * sizeof(float), s));
  CK(cu.cuStreamSynchronize(s));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += hx[i] != 3.0f * (float)i;
  printf("raw saxpy: %s\n", bad ? "WRONG" : "ok");
  if (bad) return 1;

  /* A 32-element saxpy, one block, as ol_saxpy times it. */
  sa.n = 32;
  sa.y = dx;
  for (int i = 0; i < 100; i++) {
    CK(cu.cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, s, NULL, extra));
    CK(cu.cuStreamSynchronize(s));
  }
  double t0 = now();
  for (int i = 0; i < iters; i++) {
    CK(cu.cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, s, NULL, extra));
    CK(cu.cuStreamSynchronize(s));
  }
  double t1 = now();
  printf("bench launch_sync_us raw %.3f\n", (t1 - t0) * 1e6 / iters);
  t0 = now();
  for (int i = 0; i < iters; i++)
    CK(cu.cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, s, NULL, extra));
  CK(cu.cuStreamSynchronize(s));
  t1 = now();
  printf("bench launch_batch_us raw %.3f\n", (t1 - t0) * 1e6 / iters);

  unsigned char *hp;
  CUdeviceptr dp;
  CK(cu.cuMemAllocHost_v2((void **)&hp, COPY_BYTES));
  CK(cu.cuMemAlloc_v2(&dp, COPY_BYTES));
  for (size_t i = 0; i < COPY_BYTES; i++) hp[i] = (unsigned char)(i * 7 + 3);
  CK(cu.cuMemcpyHtoDAsync_v2(dp, hp, COPY_BYTES, s));
  CK(cu.cuStreamSynchronize(s));
  t0 = now();
  for (int i = 0; i < COPIES; i++) {
    CK(cu.cuMemcpyHtoDAsync_v2(dp, hp, COPY_BYTES, s));
    CK(cu.cuStreamSynchronize(s));
  }
  t1 = now();
  printf("bench h2d_pinned_MBps raw %.1f\n", (double)COPIES * COPY_BYTES / (t1 - t0) / 1e6);
  memset(hp, 0, COPY_BYTES);
  CK(cu.cuMemcpyDtoHAsync_v2(hp, dp, COPY_BYTES, s));
  CK(cu.cuStreamSynchronize(s));
  t0 = now();
  for (int i = 0; i < COPIES; i++) {
    CK(cu.cuMemcpyDtoHAsync_v2(hp, dp, COPY_BYTES, s));
    CK(cu.cuStreamSynchronize(s));
  }
  t1 = now();
  printf("bench d2h_pinned_MBps raw %.1f\n", (double)COPIES * COPY_BYTES / (t1 - t0) / 1e6);
  for (size_t i = 0; i < COPY_BYTES; i += 4093) bad += hp[i] != (unsigned char)(i * 7 + 3);
  printf("raw pinned copies: %s\n", bad ? "WRONG" : "ok");
  CK(cu.cuMemFreeHost(hp));
  CK(cu.cuMemFreeHost(hx));
  CK(cu.cuMemFree_v2(dp));
  CK(cu.cuMemFree_v2(dx));
  CK(cu.cuMemFree_v2(dy));
  return bad ? 1 : 0;
}
