/* omp_api.c - the OpenMP API of our libomptarget.so.22.1 on a CUDA device,
 * from a host-only OpenMP program (clang-22 -fopenmp, no -fopenmp-targets:
 * no device image), for scripts/gpu-tests.sh:
 *
 *   - the PTX (argv[1]) registered as the program's device image with
 *     __tgt_register_lib, as the constructor of a program built with
 *     -fopenmp-targets=nvptx64-nvidia-cuda registers its image (Debian's
 *     LLVM 22 cannot build such programs: no NVPTX device runtime). As in
 *     LLVM, OpenMP counts a device only once a registered image runs on it
 *     (and under the default OMP_TARGET_OFFLOAD a first device query that
 *     finds none disables offloading for good, so none comes before);
 *   - omp_target_alloc / omp_target_memcpy (both ways and device to
 *     device) / omp_target_memset / omp_target_free on the device;
 *   - omp_target_associate_ptr / omp_target_is_present /
 *     omp_target_disassociate_ptr (a host-only build turns `target data`
 *     constructs into nothing, so associations are the mapping here);
 *   - an interop object on the device and its offload table
 *     (include/offload/interop.h): the PTX program (argv[1]) loaded with
 *     t->olCreateProgram, saxpy launched on the object's targetsync queue
 *     over omp_target_alloc memory, `interop use` waiting for it.
 *
 * Run with OFFLOAD_PLUGINS=cuda: the CUDA device is OpenMP device 0.
 * Usage: omp_api kernels.ptx   (exit 0 and last line OK: all passed). */
#include <offload/interop.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CHECK, OL, DONE: the interop tests' helpers
 * (crates/omptarget/tests/interop/check.h; the bundle step adds -I). */
#include "check.h"

enum { N = 1 << 20 };

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = malloc((size_t)n + 1);
  *size = fread(buf, 1, (size_t)n, f);
  ((char *)buf)[*size] = 0;
  fclose(f);
  return buf;
}

/* What clang's offload registration hands libomptarget (LLVM's
 * __tgt_device_image / __tgt_bin_desc); no offload entries here. */
struct tgt_device_image {
  const void *start, *end;
  void *entries_begin, *entries_end;
};
struct tgt_bin_desc {
  int32_t num_images;
  struct tgt_device_image *images;
  void *entries_begin, *entries_end;
};
void __tgt_register_lib(struct tgt_bin_desc *desc);
void __tgt_unregister_lib(struct tgt_bin_desc *desc);

static bool find_host(ol_device_handle_t d, void *data) {
  const offload_interop_table_t *t = ((void **)data)[0];
  ol_device_type_t type;
  if (t->olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof type, &type) == NULL &&
      type == OL_DEVICE_TYPE_HOST) {
    ((void **)data)[1] = d;
    return false;
  }
  return true;
}

/* The omp_target_* memory routines. */
static void memory_routines(int dev, int host) {
  float *h = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++)
    h[i] = (float)i * 0.5f;
  float *a = omp_target_alloc(N * sizeof(float), dev);
  float *b = omp_target_alloc(N * sizeof(float), dev);
  CHECK(a && b);
  if (!a || !b)
    return;
  CHECK(omp_target_memcpy(a, h, N * sizeof(float), 0, 0, dev, host) == 0);
  CHECK(omp_target_memcpy(b, a, N * sizeof(float), 0, 0, dev, dev) == 0);
  memset(back, 0, N * sizeof(float));
  CHECK(omp_target_memcpy(back, b, N * sizeof(float), 0, 0, host, dev) == 0);
  CHECK(memcmp(back, h, N * sizeof(float)) == 0);
  /* Offsets on both sides. */
  float four[4] = {0};
  CHECK(omp_target_memcpy(four, b, sizeof four, 0, 1000 * sizeof(float), host,
                          dev) == 0);
  CHECK(four[0] == 500.0f && four[3] == 501.5f);

  /* omp_target_memset returns its pointer argument. */
  CHECK(omp_target_memset(b, 0x5a, N * sizeof(float), dev) == b);
  unsigned char bytes[64];
  CHECK(omp_target_memcpy(bytes, b, sizeof bytes, 0, 12345, host, dev) == 0);
  int ok = 1;
  for (size_t i = 0; i < sizeof bytes; i++)
    ok &= bytes[i] == 0x5a;
  CHECK(ok);
  printf("omp_target_alloc/memcpy/memset: %s\n", failures ? "FAILED" : "ok");

  /* A host array associated with device memory is present, then not. */
  int before = failures;
  CHECK(!omp_target_is_present(h, dev));
  CHECK(omp_target_associate_ptr(h, a, N * sizeof(float), 0, dev) == 0);
  CHECK(omp_target_is_present(h, dev));
  CHECK(omp_target_is_present(h + 100, dev));
  CHECK(omp_target_disassociate_ptr(h, dev) == 0);
  CHECK(!omp_target_is_present(h, dev));
  printf("omp_target_associate_ptr/is_present: %s\n",
         failures == before ? "ok" : "FAILED");
  omp_target_free(a, dev);
  omp_target_free(b, dev);
  free(h);
  free(back);
}

struct saxpy_args {
  int n;
  float a;
  const float *x;
  float *y;
};

/* saxpy from kernels.ptx through the interop object's offload table. */
static void interop_saxpy(int dev, int host, const void *ptx, size_t size) {
  int before = failures;
  omp_interop_t o = omp_interop_none;
  #pragma omp interop init(targetsync: o) device(dev)
  CHECK(o != omp_interop_none);
  if (o == omp_interop_none)
    return;
  int rc = -1;
  const offload_interop_table_t *t =
      omp_get_interop_ptr(o, (omp_interop_property_t)OMPX_IPR_OFFLOAD_TABLE, &rc);
  CHECK(rc == omp_irc_success && t && t->queue);
  if (!t || !t->queue)
    return;
  CHECK(t->version >= 1 && OFFLOAD_INTEROP_TABLE_HAS(t, olCalculateOptimalOccupancy));
  printf("interop table: version %u, %u bytes\n", t->version, t->size);
  ol_platform_backend_t backend = OL_PLATFORM_BACKEND_UNKNOWN;
  OL(t->olGetPlatformInfo(t->platform, OL_PLATFORM_INFO_BACKEND, sizeof backend,
                          &backend));
  CHECK(backend == OL_PLATFORM_BACKEND_CUDA);
  char name[256] = "";
  OL(t->olGetDeviceInfo(t->device, OL_DEVICE_INFO_NAME, sizeof name, name));
  printf("interop device: %s\n", name);
  void *ctx[2] = {(void *)t, NULL};
  OL(t->olIterateDevices(find_host, ctx));
  ol_device_handle_t hostdev = ctx[1];
  CHECK(hostdev != NULL);

  ol_program_handle_t prog = NULL;
  OL(t->olCreateProgram(t->device, ptx, size, &prog));
  ol_symbol_handle_t saxpy = NULL;
  if (prog)
    OL(t->olGetSymbol(prog, "saxpy", OL_SYMBOL_KIND_KERNEL, &saxpy));
  CHECK(saxpy != NULL);

  /* x and y: OpenMP device memory; x by omp_target_memcpy, y by the table. */
  float *hx = malloc(N * sizeof(float)), *hy = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) {
    hx[i] = (float)(i % 4096);
    hy[i] = 1.0f;
  }
  float *x = omp_target_alloc(N * sizeof(float), dev);
  float *y = omp_target_alloc(N * sizeof(float), dev);
  CHECK(x && y);
  CHECK(omp_target_memcpy(x, hx, N * sizeof(float), 0, 0, dev, host) == 0);
  if (saxpy && x && y && hostdev) {
    OL(t->olMemcpy(t->queue, y, t->device, hy, hostdev, N * sizeof(float)));
    struct saxpy_args args = {N, 3.0f, x, y};
    ol_kernel_launch_size_args_t grid = {1, {N / 256, 1, 1}, {256, 1, 1}, 0};
    OL(t->olLaunchKernel(t->queue, t->device, saxpy, &args, sizeof args, &grid));
    /* `interop use` waits for the targetsync queue. */
    #pragma omp interop use(o)
    memset(hy, 0, N * sizeof(float));
    CHECK(omp_target_memcpy(hy, y, N * sizeof(float), 0, 0, host, dev) == 0);
    int bad = 0;
    for (int i = 0; i < N; i++)
      bad += hy[i] != 3.0f * (float)(i % 4096) + 1.0f;
    CHECK(bad == 0);
    printf("saxpy through the interop table: %s (y[4097] = %g)\n",
           bad ? "WRONG" : "ok", hy[4097]);
    /* And back through the table, on its queue. */
    memset(hy, 0, N * sizeof(float));
    OL(t->olMemcpy(t->queue, hy, hostdev, y, t->device, N * sizeof(float)));
    OL(t->olSyncQueue(t->queue));
    CHECK(hy[N - 1] == 3.0f * (float)((N - 1) % 4096) + 1.0f);
  }
  omp_target_free(x, dev);
  omp_target_free(y, dev);
  free(hx);
  free(hy);
  if (prog)
    OL(t->olDestroyProgram(prog));
  #pragma omp interop destroy(o)
  CHECK(o == omp_interop_none);
  printf("interop: %s\n", failures == before ? "ok" : "FAILED");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: omp_api kernels.ptx\n");
    return 2;
  }
  size_t size = 0;
  void *ptx = read_file(argv[1], &size);
  if (!ptx || size == 0) {
    perror(argv[1]);
    return 2;
  }
  struct tgt_device_image image = {ptx, (char *)ptx + size, NULL, NULL};
  struct tgt_bin_desc desc = {1, &image, NULL, NULL};
  __tgt_register_lib(&desc);
  int n = omp_get_num_devices();
  int host = omp_get_initial_device();
  printf("OpenMP devices with the PTX image: %d (initial device %d)\n", n, host);
  CHECK(n >= 1 && host == n);
  if (n >= 1) {
    memory_routines(0, host);
    interop_saxpy(0, host, ptx, size);
  }
  __tgt_unregister_lib(&desc);
  free(ptx);
  DONE();
}
