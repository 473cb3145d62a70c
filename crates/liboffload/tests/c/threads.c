/* threads.c - several threads allocating, copying, launching, creating
 * queues/events and provoking errors at the same time. Usage: threads <kernels.so> */
#include "common.h"
#include <pthread.h>

#define THREADS 6
#define ITERS 150

static ol_device_handle_t H, D[2];
static ol_symbol_handle_t K[2];
static int g_thread_fail;

static void *worker(void *arg) {
  long id = (long)arg;
  int dev = (int)(id % 2);
  ol_queue_handle_t q;
  if (olCreateQueue(D[dev], &q)) {
    __atomic_add_fetch(&g_thread_fail, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  int fails = 0;
  for (int it = 0; it < ITERS; it++) {
    size_t n = 64 + (size_t)(id * 37 + it * 13) % 4000;
    int *d = NULL;
    int *h = malloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++) h[i] = (int)(i + id);
    fails += olMemAlloc(D[dev], it % 3, n * sizeof(int), (void **)&d) != NULL;
    if (!d) continue;
    fails += olMemcpy(q, d, D[dev], h, H, n * sizeof(int)) != NULL;
    /* Queues are asynchronous: a NULL-queue launch is not ordered after them. */
    if (it % 2 == 0) fails += olSyncQueue(q) != NULL;
    struct { int *x; int v; size_t n; } args = {d, (int)id, n};
    ol_kernel_launch_size_args_t ls = {1, {(uint32_t)((n + 63) / 64), 1, 1}, {64, 1, 1}, 0};
    fails += olLaunchKernel(it % 2 ? q : NULL, D[dev], K[dev], &args, sizeof args, &ls) != NULL;
    ol_event_handle_t e;
    fails += olCreateEvent(q, &e) != NULL;
    fails += olMemcpy(q, h, H, d, D[dev], n * sizeof(int)) != NULL;
    fails += olSyncEvent(e) != NULL;
    fails += olDestroyEvent(e) != NULL;
    fails += olSyncQueue(q) != NULL;
    for (size_t i = 0; i < n; i++) fails += h[i] != (int)(i + id) + (int)id;
    size_t sz = 0;
    fails += olGetMemInfo(d + n / 2, OL_MEM_INFO_SIZE, sizeof sz, &sz) != NULL || sz != n * sizeof(int);
    /* Errors under contention must stay errors: a pointer that was never
     * allocated (a double free or a destroyed handle would be racy here,
     * since another thread may get the same address right away; full.c
     * checks those single-threaded). */
    ol_result_t r = olMemFree(d + 1);
    fails += !r || r->Code != OL_ERRC_INVALID_ARGUMENT;
    fails += olMemFree(d) != NULL;
    r = olSyncEvent((ol_event_handle_t)(h + 1));
    fails += !r || r->Code != OL_ERRC_INVALID_EVENT;
    free(h);
  }
  fails += olDestroyQueue(q) != NULL;
  if (fails) {
    fprintf(stderr, "thread %ld: %d failures\n", id, fails);
    __atomic_add_fetch(&g_thread_fail, fails, __ATOMIC_RELAXED);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  MUST(olInit());
  collect_devices();
  H = host_device();
  D[0] = offload_device(0);
  D[1] = offload_device(1);
  size_t size;
  char *img = read_file(argv[1], &size);
  ol_program_handle_t prog[2];
  for (int i = 0; i < 2; i++) {
    MUST(olCreateProgram(D[i], img, size, &prog[i]));
    MUST(olGetSymbol(prog[i], "add_value", OL_SYMBOL_KIND_KERNEL, &K[i]));
  }
  free(img);
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  /* Meanwhile: init/shutdown reference counting and info queries. */
  for (int i = 0; i < 200; i++) {
    OK(olInit());
    uint32_t u;
    OK(olGetDeviceInfo(D[i % 2], OL_DEVICE_INFO_NUM_COMPUTE_UNITS, sizeof u, &u));
    OK(olShutDown());
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  CHECK(g_thread_fail == 0);
  OK(olDestroyProgram(prog[0]));
  OK(olDestroyProgram(prog[1]));
  OK(olShutDown());
  return finish("threads");
}
