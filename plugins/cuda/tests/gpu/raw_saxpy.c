/* raw_saxpy.c - the baseline for scripts/gpu-tests.sh: the same saxpy
 * launches and copies as ol_saxpy.c, straight on the CUDA driver
 * (libcuda.so.1 through dlopen; no CUDA headers needed to build).
 * Usage: raw_saxpy PTX [N] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*fn)();
static fn get(void *h, const char *s) {
  fn f = (fn)dlsym(h, s);
  if (!f) {
    fprintf(stderr, "missing %s\n", s);
    exit(2);
  }
  return f;
}
#define CK(x)                                                                  \
  do {                                                                         \
    int r_ = (x);                                                              \
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

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int iters = argc > 2 ? atoi(argv[2]) : 1000;
  const char *lib = getenv("OFFLOAD_CUDA_DRIVER");
  void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 2;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *img = calloc(1, (size_t)size + 1);
  if (fread(img, 1, (size_t)size, f) != (size_t)size) return 2;
  fclose(f);
  int dev;
  void *ctx, *mod, *k, *s;
  uint64_t dx;
  CK(get(h, "cuInit")(0));
  CK(get(h, "cuDeviceGet")(&dev, 0));
  CK(get(h, "cuDevicePrimaryCtxRetain")(&ctx, dev));
  CK(get(h, "cuCtxSetCurrent")(ctx));
  CK(get(h, "cuModuleLoadDataEx")(&mod, img, 0, NULL, NULL));
  CK(get(h, "cuModuleGetFunction")(&k, mod, "saxpy"));
  CK(get(h, "cuStreamCreate")(&s, 1));
  int n = 1 << 20;
  float *hx = calloc((size_t)n, sizeof(float));
  CK(get(h, "cuMemAlloc_v2")(&dx, (size_t)n * sizeof(float)));
  struct { int n; float a; uint64_t x, y; } sa = {32, 2.0f, dx, dx};
  size_t asz = sizeof sa;
  void *extra[] = {(void *)1, &sa, (void *)2, &asz, NULL};
  fn launch = get(h, "cuLaunchKernel"), sync = get(h, "cuStreamSynchronize");
  double t0 = now();
  for (int i = 0; i < iters; i++) CK(launch(k, 1, 1, 1, 32, 1, 1, 0, s, NULL, extra));
  CK(sync(s));
  double t1 = now();
  printf("bench raw launch+sync: %d launches, %.2f us/launch\n", iters, (t1 - t0) * 1e6 / iters);
  fn h2d = get(h, "cuMemcpyHtoDAsync_v2"), d2h = get(h, "cuMemcpyDtoHAsync_v2");
  t0 = now();
  for (int i = 0; i < 20; i++) {
    CK(h2d(dx, hx, (size_t)n * sizeof(float), s));
    CK(d2h(hx, dx, (size_t)n * sizeof(float), s));
  }
  CK(sync(s));
  t1 = now();
  printf("bench raw copies: %.1f MB/s (pageable, both ways)\n", 40.0 * n * sizeof(float) / (t1 - t0) / 1e6);
  return 0;
}
