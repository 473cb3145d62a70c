/* interop_table.c - the liboffload API of OpenMP device 0, reached through
 * an interop object's offload table, working on the same memory as OpenMP
 * target regions and omp_target_alloc. argv[1]: the host-kernel object
 * built from interop_kernels.c. Ends with OK. */
#include <offload/interop.h>
#include <omp.h>
#include <string.h>

#include "check.h"

enum { N = 1000 };

struct axpy_args { int a; const int *x; int *y; size_t n; };

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

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = malloc(n);
  *size = fread(buf, 1, n, f);
  fclose(f);
  return buf;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    printf("usage: %s kernels.so\n", argv[0]);
    return 2;
  }
  const int dev = 0;
  omp_interop_t o = omp_interop_none;
  #pragma omp interop init(targetsync: o) device(dev)
  int rc = 99;
  const offload_interop_table_t *t =
      omp_get_interop_ptr(o, (omp_interop_property_t)OMPX_IPR_OFFLOAD_TABLE, &rc);
  CHECK(rc == omp_irc_success && t && t->queue);
  if (!t || !t->queue)
    DONE();
  printf("table: version %u, %u bytes\n", t->version, t->size);

  void *ctx[2] = {(void *)t, NULL};
  OL(t->olIterateDevices(find_host, ctx));
  ol_device_handle_t host = ctx[1];
  CHECK(host != NULL);

  /* The kernel program, loaded on the interop object's device. */
  size_t size = 0;
  void *image = read_file(argv[1], &size);
  CHECK(image && size > 0);
  ol_program_handle_t prog = NULL;
  OL(t->olCreateProgram(t->device, image, size, &prog));
  free(image);
  ol_symbol_handle_t axpy = NULL;
  OL(t->olGetSymbol(prog, "axpy", OL_SYMBOL_KIND_KERNEL, &axpy));

  /* x: OpenMP device memory, filled by a target region. */
  int *x = omp_target_alloc(N * sizeof(int), dev);
  CHECK(x != NULL);
  #pragma omp target teams distribute parallel for is_device_ptr(x) device(dev)
  for (int i = 0; i < N; i++)
    x[i] = i;

  /* y: liboffload device memory, initialised by a copy on the queue. */
  int *y = NULL;
  OL(t->olMemAlloc(t->device, OL_ALLOC_TYPE_DEVICE, N * sizeof(int), (void **)&y));
  int host_y[N];
  for (int i = 0; i < N; i++)
    host_y[i] = 1000;
  OL(t->olMemcpy(t->queue, y, t->device, host_y, host, sizeof host_y));

  /* y = 3 * x + y on the targetsync queue; `interop use` waits for it. */
  struct axpy_args args = {3, x, y, N};
  ol_kernel_launch_size_args_t grid = {1, {(N + 63) / 64, 1, 1}, {64, 1, 1}, 0};
  OL(t->olLaunchKernel(t->queue, t->device, axpy, &args, sizeof args, &grid));
  #pragma omp interop use(o)

  /* The same memory in an OpenMP target region: y += 1. */
  #pragma omp target teams distribute parallel for is_device_ptr(y) device(dev)
  for (int i = 0; i < N; i++)
    y[i] += 1;

  /* Back to the host through the table: y, and x (omp_target_alloc memory). */
  int out_y[N], out_x[N];
  memset(out_y, 0, sizeof out_y);
  memset(out_x, 0, sizeof out_x);
  OL(t->olMemcpy(t->queue, out_y, host, y, t->device, sizeof out_y));
  OL(t->olMemcpy(t->queue, out_x, host, x, t->device, sizeof out_x));
  OL(t->olSyncQueue(t->queue));
  int bad = 0;
  for (int i = 0; i < N; i++)
    bad += out_y[i] != 3 * i + 1001 || out_x[i] != i;
  CHECK(bad == 0);
  printf("axpy via the table + target region: %s (y[10] = %d)\n", bad ? "wrong" : "ok",
         out_y[10]);

  /* omp_target_memcpy sees the table's memory as device memory too. */
  int first = 0;
  CHECK(omp_target_memcpy(&first, y, sizeof first, 0, 8 * sizeof(int),
                          omp_get_initial_device(), dev) == 0);
  CHECK(first == 3 * 8 + 1001);

  /* olMemcpy between an olMemAlloc and an omp_target_alloc buffer. */
  OL(t->olMemcpy(t->queue, x, t->device, y, t->device, N * sizeof(int)));
  #pragma omp interop use(o)
  int sum = 0;
  #pragma omp target teams distribute parallel for reduction(+: sum) is_device_ptr(x) device(dev) map(tofrom: sum)
  for (int i = 0; i < N; i++)
    sum += x[i] - 3 * i;
  CHECK(sum == 1001 * N);
  printf("device-to-device copy into omp_target_alloc memory: %s\n",
         sum == 1001 * N ? "ok" : "wrong");

  OL(t->olMemFree(y));
  omp_target_free(x, dev);
  OL(t->olDestroyProgram(prog));
  #pragma omp interop destroy(o)
  CHECK(o == omp_interop_none);
  DONE();
}
