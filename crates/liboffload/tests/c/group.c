/* group.c - GPU-style kernels on CPU devices through the ol* API: LLVM's
 * olLaunchKernelLocalMemReductionTest and olLaunchKernelLocalMemStaticTest
 * (group sizes 64/128/256), a tiled matrix multiply, a prefix scan in
 * groups of 1024 items, many barriers in loops, a divergent barrier (an
 * error from olSyncQueue, never a hang), grid limits refused by
 * olLaunchKernel, and a queued launch that returns before its kernel can
 * finish. alarm() turns a hang into a failure.
 * Usage: group <group_kernels.so> */
#include "common.h"
#include <sched.h>
#include <unistd.h>

static ol_symbol_handle_t sym(ol_program_handle_t p, const char *name) {
  ol_symbol_handle_t k;
  MUST(olGetSymbol(p, name, OL_SYMBOL_KIND_KERNEL, &k));
  return k;
}

static void *alloc(ol_device_handle_t d, size_t bytes) {
  void *p = NULL;
  MUST(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, bytes, &p));
  return p;
}

static void test_reductions(ol_device_handle_t d, ol_queue_handle_t q, ol_program_handle_t p) {
  const char *names[] = {"reduce_dynamic", "reduce_static"};
  for (int k = 0; k < 2; k++) {
    for (uint32_t size = 64; size <= 256; size *= 2) {
      uint32_t groups = 4;
      uint32_t *out = alloc(d, groups * sizeof *out);
      memset(out, 0, groups * sizeof *out);
      ol_kernel_launch_size_args_t ls = {1, {groups, 1, 1}, {size, 1, 1}, k == 0 ? size * 4 : 0};
      OK(olLaunchKernel(q, d, sym(p, names[k]), &out, sizeof out, &ls));
      OK(olSyncQueue(q));
      for (uint32_t g = 0; g < groups; g++) {
        if (out[g] != 2 * size)
          fprintf(stderr, "%s x %u: group %u got %u\n", names[k], size, g, out[g]);
        CHECK(out[g] == 2 * size);
      }
      OK(olMemFree(out));
    }
  }
}

static void test_matmul(ol_device_handle_t d, ol_queue_handle_t q, ol_program_handle_t p) {
  enum { N = 128 };
  float *a = alloc(d, N * N * sizeof(float)), *b = alloc(d, N * N * sizeof(float)),
        *c = alloc(d, N * N * sizeof(float));
  for (int i = 0; i < N * N; i++) {
    a[i] = (float)(i % 7) - 3;
    b[i] = (float)(i % 5) * 0.5f;
    c[i] = -1;
  }
  struct {
    const float *a, *b;
    float *c;
    uint32_t n;
  } args = {a, b, c, N};
  ol_kernel_launch_size_args_t ls = {2, {N / 16, N / 16, 1}, {16, 16, 1}, 0};
  OK(olLaunchKernel(q, d, sym(p, "matmul_tiled"), &args, sizeof args, &ls));
  OK(olSyncQueue(q));
  int bad = 0;
  for (int r = 0; r < N; r++)
    for (int col = 0; col < N; col++) {
      float want = 0;
      for (int k = 0; k < N; k++) want += a[r * N + k] * b[k * N + col];
      bad += c[r * N + col] != want;
    }
  CHECK(bad == 0);
  OK(olMemFree(a));
  OK(olMemFree(b));
  OK(olMemFree(c));
}

static void test_scan(ol_device_handle_t d, ol_queue_handle_t q, ol_program_handle_t p) {
  enum { SIZE = 1024, GROUPS = 6 };
  uint32_t *in = alloc(d, SIZE * GROUPS * 4), *out = alloc(d, SIZE * GROUPS * 4);
  for (int i = 0; i < SIZE * GROUPS; i++) in[i] = (uint32_t)(i * 7 + 3) % 11;
  struct {
    const uint32_t *in;
    uint32_t *out;
  } args = {in, out};
  ol_kernel_launch_size_args_t ls = {1, {GROUPS, 1, 1}, {SIZE, 1, 1}, 2 * SIZE * 4};
  OK(olLaunchKernel(q, d, sym(p, "scan_group"), &args, sizeof args, &ls));
  OK(olSyncQueue(q));
  int bad = 0;
  for (int g = 0; g < GROUPS; g++) {
    uint32_t acc = 0;
    for (int i = 0; i < SIZE; i++) bad += out[g * SIZE + i] != (acc += in[g * SIZE + i]);
  }
  CHECK(bad == 0);
  OK(olMemFree(in));
  OK(olMemFree(out));
}

static void test_many_barriers(ol_device_handle_t d, ol_queue_handle_t q, ol_program_handle_t p) {
  uint32_t *out = alloc(d, 16 * 4);
  struct {
    uint32_t *out;
    uint32_t rounds;
  } args = {out, 40};
  ol_kernel_launch_size_args_t ls = {1, {16, 1, 1}, {200, 1, 1}, 8};
  OK(olLaunchKernel(q, d, sym(p, "many_barriers"), &args, sizeof args, &ls));
  OK(olSyncQueue(q));
  for (int g = 0; g < 16; g++) CHECK(out[g] == 40);
  OK(olMemFree(out));
}

static void test_errors(ol_device_handle_t d, ol_queue_handle_t q, ol_program_handle_t p) {
  uint32_t *out = alloc(d, 4 * 64 * 4);
  ol_kernel_launch_size_args_t ls = {1, {4, 1, 1}, {64, 1, 1}, 0};
  /* Divergent barrier: the launch is accepted, its sync reports it. */
  OK(olLaunchKernel(q, d, sym(p, "divergent_barrier"), &out, sizeof out, &ls));
  ol_result_t r = olSyncQueue(q);
  CHECK(r != NULL && r->Code == OL_ERRC_INVALID_ARGUMENT);
  CHECK(r && strstr(r->Details, "divergent control flow") != NULL);
  if (r) printf("divergent barrier: %s\n", r->Details);
  OK(olLaunchKernel(q, d, sym(p, "undeclared_barrier"), NULL, 0, &ls));
  r = olSyncQueue(q);
  CHECK(r != NULL && strstr(r->Details, "OFFLOAD_HOST_KERNEL_BARRIER") != NULL);
  /* Grids past 2^48 items (or overflowing 64 bits): refused by the launch. */
  ol_kernel_launch_size_args_t huge = {3, {UINT32_MAX, UINT32_MAX, UINT32_MAX}, {1024, 1, 1}, 0};
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(q, d, sym(p, "write_global_id"), &out, sizeof out, &huge));
  ol_kernel_launch_size_args_t big = {2, {1u << 20, 1u << 20, 1}, {512, 1, 1}, 0};
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(q, d, sym(p, "write_global_id"), &out, sizeof out, &big));
  OK(olSyncQueue(q));
  /* The queue and device still work. */
  ls.GroupSize.x = 64;
  ls.DynSharedMemory = 256;
  OK(olLaunchKernel(q, d, sym(p, "reduce_dynamic"), &out, sizeof out, &ls));
  OK(olSyncQueue(q));
  CHECK(out[0] == 128 && out[3] == 128);
  OK(olMemFree(out));
}

/* A launch of a kernel that waits for a flag returns before the flag is set;
 * the kernel starts without a sync; events and the queue report it running. */
static void test_async(ol_device_handle_t d, ol_program_handle_t p) {
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  int *flag = alloc(d, sizeof(int)), *started = alloc(d, sizeof(int));
  *flag = 0;
  *started = 0;
  struct {
    int *flag, *started;
  } args = {flag, started};
  ol_kernel_launch_size_args_t ls = {1, {1, 1, 1}, {1, 1, 1}, 0};
  OK(olLaunchKernel(q, d, sym(p, "wait_for_flag"), &args, sizeof args, &ls));
  while (!__atomic_load_n(started, __ATOMIC_ACQUIRE)) sched_yield();
  bool empty = true;
  OK(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, sizeof empty, &empty));
  CHECK(!empty);
  ol_event_handle_t e;
  OK(olCreateEvent(q, &e));
  bool done = true;
  OK(olGetEventInfo(e, OL_EVENT_INFO_IS_COMPLETE, sizeof done, &done));
  CHECK(!done);
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  OK(olSyncEvent(e));
  OK(olSyncQueue(q));
  OK(olDestroyEvent(e));
  OK(olMemFree(flag));
  OK(olMemFree(started));
  OK(olDestroyQueue(q));
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  alarm(120);
  MUST(olInit());
  collect_devices();
  size_t size;
  char *img = read_file(argv[1], &size);
  int ncpus = 0;
  for (ol_device_handle_t d; (d = offload_device(ncpus)) != NULL; ncpus++) {
    ol_program_handle_t p;
    ol_queue_handle_t q;
    MUST(olCreateProgram(d, img, size, &p));
    MUST(olCreateQueue(d, &q));
    test_reductions(d, q, p);
    test_matmul(d, q, p);
    test_scan(d, q, p);
    test_many_barriers(d, q, p);
    test_errors(d, q, p);
    test_async(d, p);
    OK(olDestroyQueue(q));
    OK(olDestroyProgram(p));
  }
  CHECK(ncpus >= 1);
  free(img);
  MUST(olShutDown());
  return finish("group");
}
