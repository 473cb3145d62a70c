/* async.c - queues are asynchronous and in-order (LLVM's semantics): work
 * enqueued on a queue runs on its own thread, so a host function may block
 * until the caller, after enqueuing it, releases it (LLVM's
 * ManuallyTriggeredTask, olLaunchHostFunctionKernelTest.SuccessBlocking).
 * A regression would deadlock: alarm() turns that into a failure.
 * Usage: async <kernels.so> */
#include "common.h"
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

static ol_device_handle_t H;
static ol_device_handle_t CPUS[MAX_DEVS];
static int NCPUS;
static pthread_t g_main;

/* ---- host functions */

/* Spin (yielding) until *gate != 0. */
static void block_fn(void *ud) {
  while (!__atomic_load_n((int *)ud, __ATOMIC_ACQUIRE)) sched_yield();
}

/* An append-only log of tags (host functions of one queue run one at a
 * time; functions of different queues are serialised by the atomics). */
static int g_log[4096];
static int g_nlog;
static void log_fn(void *ud) {
  int i = __atomic_fetch_add(&g_nlog, 1, __ATOMIC_ACQ_REL);
  if (i < 4096) __atomic_store_n(&g_log[i], (int)(intptr_t)ud, __ATOMIC_RELEASE);
}
static void log_reset(void) {
  g_nlog = 0;
  memset(g_log, 0, sizeof g_log);
}

static int g_on_main = -1;
static void which_thread_fn(void *ud) {
  (void)ud;
  g_on_main = pthread_equal(pthread_self(), g_main) ? 1 : 0;
}

static bool queue_empty(ol_queue_handle_t q) {
  bool empty = false;
  MUST(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, sizeof empty, &empty));
  return empty;
}
static bool event_done(ol_event_handle_t e) {
  bool done = false;
  MUST(olGetEventInfo(e, OL_EVENT_INFO_IS_COMPLETE, sizeof done, &done));
  return done;
}

static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* ---- SuccessBlocking: a host function holds back a kernel; the caller is
 * not blocked by either enqueue and releases the host function afterwards. */
static void test_blocking(ol_device_handle_t d, ol_symbol_handle_t write_ids) {
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  uint32_t *mem = NULL;
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, 64 * sizeof(uint32_t), (void **)&mem));
  memset(mem, 0, 64 * sizeof(uint32_t));
  int gate = 0;
  OK(olLaunchHostFunction(q, block_fn, &gate));
  ol_kernel_launch_size_args_t ls = {1, {1, 1, 1}, {64, 1, 1}, 0};
  OK(olLaunchKernel(q, d, write_ids, &mem, sizeof mem, &ls));
  ol_event_handle_t e;
  OK(olCreateEvent(q, &e));
  usleep(100 * 1000);
  int untouched = 1;
  for (int i = 0; i < 64; i++) untouched &= mem[i] == 0;
  CHECK(untouched);
  CHECK(!queue_empty(q)); /* OL_QUEUE_INFO_EMPTY is false while work is pending */
  CHECK(!event_done(e));  /* OL_EVENT_INFO_IS_COMPLETE reflects progress */
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncQueue(q));
  int written = 1;
  for (uint32_t i = 0; i < 64; i++) written &= mem[i] == i;
  CHECK(written);
  CHECK(queue_empty(q));
  CHECK(event_done(e));
  OK(olSyncEvent(e));
  /* Queued work progresses without any sync, on another thread than the
   * caller's (a thread blocked in olSyncQueue/olSyncEvent may run work that
   * has not started yet itself, so poll instead). */
  ol_event_handle_t e2;
  OK(olLaunchHostFunction(q, which_thread_fn, NULL));
  OK(olCreateEvent(q, &e2));
  for (int i = 0; i < 100000 && !event_done(e2); i++) usleep(10);
  CHECK(event_done(e2));
  CHECK(g_on_main == 0);
  OK(olDestroyEvent(e2));
  OK(olDestroyEvent(e));
  OK(olDestroyQueue(q));
  OK(olMemFree(mem));
}

/* ---- olWaitEvents: q2's later work waits for q1's event without blocking
 * the caller; an unrelated queue is not held up. `d2` may be another device
 * (the HOST device included). */
static void test_wait_events(ol_device_handle_t d1, ol_device_handle_t d2) {
  ol_queue_handle_t q1, q2, q3;
  OK(olCreateQueue(d1, &q1));
  OK(olCreateQueue(d2, &q2));
  OK(olCreateQueue(d2, &q3));
  log_reset();
  int gate = 0;
  ol_event_handle_t e1, e2, e0;
  OK(olCreateEvent(q2, &e0)); /* nothing before it: complete */
  OK(olLaunchHostFunction(q1, block_fn, &gate));
  OK(olLaunchHostFunction(q1, log_fn, (void *)1));
  OK(olCreateEvent(q1, &e1));
  OK(olWaitEvents(q2, &e1, 1)); /* returns at once */
  OK(olLaunchHostFunction(q2, log_fn, (void *)2));
  OK(olCreateEvent(q2, &e2));
  OK(olLaunchHostFunction(q3, log_fn, (void *)3));
  OK(olSyncQueue(q3)); /* independent of q1: finishes while q1 is blocked */
  usleep(20 * 1000);
  CHECK(g_nlog == 1 && g_log[0] == 3);
  CHECK(event_done(e0));
  CHECK(!event_done(e1));
  CHECK(!event_done(e2));
  CHECK(!queue_empty(q1));
  CHECK(!queue_empty(q2));
  CHECK(queue_empty(q3));
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncEvent(e2));
  CHECK(event_done(e1)); /* e2 could only complete after e1 */
  CHECK(event_done(e2));
  CHECK(g_nlog == 3 && g_log[1] == 1 && g_log[2] == 2);
  /* Waiting on a complete event, and on own events, adds nothing to wait for. */
  OK(olWaitEvents(q2, &e1, 1));
  ol_event_handle_t both[2] = {e2, e1};
  OK(olWaitEvents(q2, both, 2));
  OK(olSyncQueue(q2));
  OK(olDestroyEvent(e2));
  /* A chain q2 -> q1 -> q3 of waits (no cycle: events cover earlier work). */
  gate = 0;
  log_reset();
  OK(olLaunchHostFunction(q2, block_fn, &gate));
  OK(olLaunchHostFunction(q2, log_fn, (void *)10));
  OK(olCreateEvent(q2, &e2));
  OK(olWaitEvents(q1, &e2, 1));
  OK(olLaunchHostFunction(q1, log_fn, (void *)11));
  ol_event_handle_t e3;
  OK(olCreateEvent(q1, &e3));
  OK(olWaitEvents(q3, &e3, 1));
  OK(olLaunchHostFunction(q3, log_fn, (void *)12));
  usleep(10 * 1000);
  CHECK(g_nlog == 0);
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncQueue(q3));
  CHECK(g_nlog == 3 && g_log[0] == 10 && g_log[1] == 11 && g_log[2] == 12);
  OK(olDestroyEvent(e0));
  OK(olDestroyEvent(e1));
  OK(olDestroyEvent(e2));
  OK(olDestroyEvent(e3));
  OK(olDestroyQueue(q1));
  OK(olDestroyQueue(q2));
  OK(olDestroyQueue(q3));
}

/* ---- The argument block and fill patterns are copied at enqueue time. */
struct add_args { int *x; int v; size_t n; };
static void test_args_reuse(ol_device_handle_t d, ol_symbol_handle_t add_value) {
  enum { N = 256 };
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  int *x = NULL, *y = NULL;
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, N * sizeof(int), (void **)&x));
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, N * sizeof(int), (void **)&y));
  memset(x, 0, N * sizeof(int));
  memset(y, 0, N * sizeof(int));
  int gate = 0;
  OK(olLaunchHostFunction(q, block_fn, &gate));
  ol_kernel_launch_size_args_t ls = {1, {N / 64, 1, 1}, {64, 1, 1}, 0};
  struct add_args a = {x, 1, N};
  OK(olLaunchKernel(q, d, add_value, &a, sizeof a, &ls));
  a.x = y; /* the same buffer, reused at once */
  a.v = 100;
  OK(olLaunchKernel(q, d, add_value, &a, sizeof a, &ls));
  a.v = 5000;
  a.n = 1;
  ls.NumGroups.x = 1;
  OK(olLaunchKernel(q, d, add_value, &a, sizeof a, &ls));
  memset(&a, 0xff, sizeof a); /* garbage: must not matter */
  ls.NumGroups.x = 0;         /* the launch sizes were copied too */
  /* A fill whose pattern buffer is overwritten right after the call. */
  int *z = NULL;
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, N * sizeof(int), (void **)&z));
  memset(z, 0, N * sizeof(int));
  int pattern = 0x12345678;
  OK(olMemFill(q, z, sizeof pattern, &pattern, N * sizeof(int)));
  pattern = 0;
  usleep(10 * 1000);
  CHECK(x[0] == 0 && y[0] == 0 && z[0] == 0);
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncQueue(q));
  int good = 1;
  for (int i = 0; i < N; i++) good &= x[i] == 1 && y[i] == (i == 0 ? 5100 : 100) && z[i] == 0x12345678;
  CHECK(good);
  OK(olDestroyQueue(q));
  OK(olMemFree(x));
  OK(olMemFree(y));
  OK(olMemFree(z));
}

/* The HOST device's queues are asynchronous as well (fills, host functions). */
static void test_host_device_queue(void) {
  ol_queue_handle_t q;
  OK(olCreateQueue(H, &q));
  unsigned char *m = NULL;
  OK(olMemAlloc(H, OL_ALLOC_TYPE_HOST, 1000, (void **)&m));
  memset(m, 0, 1000);
  int gate = 0;
  OK(olLaunchHostFunction(q, block_fn, &gate));
  unsigned char pat[5] = {1, 2, 3, 4, 5};
  OK(olMemFill(q, m, sizeof pat, pat, 1000));
  memset(pat, 9, sizeof pat);
  ol_event_handle_t e;
  OK(olCreateEvent(q, &e));
  usleep(10 * 1000);
  CHECK(m[0] == 0 && !queue_empty(q) && !event_done(e));
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncEvent(e));
  int good = 1;
  for (int i = 0; i < 1000; i++) good &= m[i] == 1 + i % 5;
  CHECK(good && queue_empty(q));
  OK(olDestroyEvent(e));
  OK(olDestroyQueue(q));
  OK(olMemFree(m));
}

/* ---- Errors: what can be validated is returned by the enqueuing call (the
 * queue stays usable, nothing is enqueued, nothing is reported later). */
static ol_queue_handle_t g_self_q;
static ol_errc_t g_self_sync = OL_ERRC_SUCCESS;
static void self_sync_fn(void *ud) {
  (void)ud;
  ol_result_t r = olSyncQueue(g_self_q); /* from its own queue: would never return */
  g_self_sync = r ? r->Code : OL_ERRC_SUCCESS;
}
static void test_errors(ol_device_handle_t d, ol_symbol_handle_t add_value) {
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  int *x = NULL;
  OK(olMemAlloc(d, OL_ALLOC_TYPE_MANAGED, 64 * sizeof(int), (void **)&x));
  memset(x, 0, 64 * sizeof(int));
  int gate = 0;
  OK(olLaunchHostFunction(q, block_fn, &gate));
  struct add_args a = {x, 1, 64};
  ol_kernel_launch_size_args_t huge = {1, {1, 1, 1}, {4096, 1, 1}, 0};
  ol_kernel_launch_size_args_t zero = {1, {1, 1, 1}, {0, 1, 1}, 0};
  ol_kernel_launch_size_args_t shmem = {1, {1, 1, 1}, {64, 1, 1}, (size_t)1 << 30};
  /* Returned at once, even though the queue is blocked. */
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(q, d, add_value, &a, sizeof a, &huge));
  EXPECT(OL_ERRC_INVALID_SIZE, olLaunchKernel(q, d, add_value, &a, sizeof a, &zero));
  EXPECT(OL_ERRC_OUT_OF_RESOURCES, olLaunchKernel(q, d, add_value, &a, sizeof a, &shmem));
  int v = 1;
  EXPECT(OL_ERRC_INVALID_SIZE, olMemFill(q, x, 4, &v, 6));
  ol_kernel_launch_size_args_t ok = {1, {1, 1, 1}, {64, 1, 1}, 0};
  a.v = 7;
  OK(olLaunchKernel(q, d, add_value, &a, sizeof a, &ok));
  g_self_q = q;
  OK(olLaunchHostFunction(q, self_sync_fn, NULL));
  ol_event_handle_t e;
  OK(olCreateEvent(q, &e));
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncEvent(e)); /* the rejected launches left nothing behind */
  OK(olSyncQueue(q));
  CHECK(g_self_sync == OL_ERRC_INVALID_ARGUMENT);
  int good = 1;
  for (int i = 0; i < 64; i++) good &= x[i] == 7;
  CHECK(good);
  /* The same errors with a NULL queue (synchronous). */
  EXPECT(OL_ERRC_INVALID_ARGUMENT, olLaunchKernel(NULL, d, add_value, &a, sizeof a, &huge));
  EXPECT(OL_ERRC_OUT_OF_RESOURCES, olLaunchKernel(NULL, d, add_value, &a, sizeof a, &shmem));
  OK(olDestroyEvent(e));
  OK(olDestroyQueue(q));
  OK(olMemFree(x));
}

/* ---- Several threads enqueueing on one queue: each thread's calls run in
 * its call order, all of them exactly once. */
enum { ENQ_THREADS = 4, ENQ_PER_THREAD = 300 };
static ol_queue_handle_t g_shared_q;
static int g_enq_fail;
static void *enqueuer(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < ENQ_PER_THREAD; i++)
    if (olLaunchHostFunction(g_shared_q, log_fn, (void *)(intptr_t)(t * 1000 + i)))
      __atomic_add_fetch(&g_enq_fail, 1, __ATOMIC_RELAXED);
  return NULL;
}
static void test_concurrent_enqueue(ol_device_handle_t d) {
  OK(olCreateQueue(d, &g_shared_q));
  log_reset();
  int gate = 0;
  OK(olLaunchHostFunction(g_shared_q, block_fn, &gate));
  pthread_t th[ENQ_THREADS];
  for (long t = 0; t < ENQ_THREADS; t++) pthread_create(&th[t], NULL, enqueuer, (void *)t);
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE); /* release while they enqueue */
  for (int t = 0; t < ENQ_THREADS; t++) pthread_join(th[t], NULL);
  OK(olSyncQueue(g_shared_q));
  CHECK(g_enq_fail == 0);
  CHECK(g_nlog == ENQ_THREADS * ENQ_PER_THREAD);
  int last[ENQ_THREADS], ordered = 1;
  for (int t = 0; t < ENQ_THREADS; t++) last[t] = -1;
  for (int i = 0; i < g_nlog && i < 4096; i++) {
    int t = g_log[i] / 1000, k = g_log[i] % 1000;
    if (t < 0 || t >= ENQ_THREADS || k != last[t] + 1) ordered = 0;
    else last[t] = k;
  }
  CHECK(ordered);
  OK(olDestroyQueue(g_shared_q));
}

/* ---- olDestroyQueue does not wait (LLVM 22): the pending work still runs
 * and the queue's events stay valid. */
static void test_destroy_busy_queue(ol_device_handle_t d) {
  ol_queue_handle_t q;
  OK(olCreateQueue(d, &q));
  log_reset();
  int gate = 0;
  OK(olLaunchHostFunction(q, block_fn, &gate));
  OK(olLaunchHostFunction(q, log_fn, (void *)42));
  ol_event_handle_t e;
  OK(olCreateEvent(q, &e));
  OK(olDestroyQueue(q)); /* returns while the host function still blocks */
  EXPECT(OL_ERRC_INVALID_QUEUE, olLaunchHostFunction(q, log_fn, (void *)43));
  CHECK(!event_done(e));
  ol_queue_handle_t eq = NULL;
  OK(olGetEventInfo(e, OL_EVENT_INFO_QUEUE, sizeof eq, &eq));
  CHECK(eq == q);
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  OK(olSyncEvent(e));
  CHECK(event_done(e));
  CHECK(g_nlog == 1 && g_log[0] == 42);
  OK(olDestroyEvent(e));
}

/* ---- The last olShutDown drains every queue (destroyed ones too) and joins
 * their threads: none outlives the library state. */
static void *release_later(void *gate) {
  usleep(50 * 1000);
  __atomic_store_n((int *)gate, 1, __ATOMIC_RELEASE);
  return NULL;
}
static int g_done;
static void done_fn(void *ud) { __atomic_add_fetch(&g_done, (int)(intptr_t)ud, __ATOMIC_RELAXED); }
static void test_shutdown_drains(void) {
  for (int round = 0; round < 5; round++) {
    MUST(olInit());
    collect_devices();
    ol_device_handle_t d = offload_device(0);
    int before = thread_count();
    ol_queue_handle_t qa, qb, qh;
    OK(olCreateQueue(d, &qa));
    OK(olCreateQueue(d, &qb));
    OK(olCreateQueue(host_device(), &qh));
    g_done = 0;
    int gate = 0;
    pthread_t rel;
    pthread_create(&rel, NULL, release_later, &gate);
    OK(olLaunchHostFunction(qa, block_fn, &gate));
    OK(olLaunchHostFunction(qa, done_fn, (void *)1));
    OK(olLaunchHostFunction(qb, done_fn, (void *)10));
    OK(olLaunchHostFunction(qh, block_fn, &gate));
    OK(olLaunchHostFunction(qh, done_fn, (void *)100));
    OK(olDestroyQueue(qb)); /* destroyed, maybe still busy */
    CHECK(thread_count() > before);
    OK(olShutDown()); /* waits for the gate */
    CHECK(__atomic_load_n(&g_done, __ATOMIC_RELAXED) == 111);
    pthread_join(rel, NULL);
    CHECK(thread_count() == before);
  }
}

/* A queued launch of 2^40 work items (hours of work), then exit(): the
 * launch returns once enqueued and the process ends at once with status 0;
 * the queue's workers neither hold the exit nor crash it. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int exit_during_huge_launch(const char *image) {
  size_t size;
  char *img = read_file(image, &size);
  ol_program_handle_t prog;
  ol_symbol_handle_t add_value;
  ol_queue_handle_t q;
  MUST(olCreateProgram(CPUS[0], img, size, &prog));
  MUST(olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, &add_value));
  MUST(olCreateQueue(CPUS[0], &q));
  struct add_args a = {NULL, 1, 0}; /* n = 0: every item only compares */
  ol_kernel_launch_size_args_t huge = {1, {1u << 30, 1, 1}, {1024, 1, 1}, 0};
  double t0 = now_s();
  MUST(olLaunchKernel(q, CPUS[0], add_value, &a, sizeof a, &huge));
  CHECK(now_s() - t0 < 1.0); /* enqueued, not run */
  usleep(100000);            /* the workers are busy with it now */
  printf("exiting during the launch\n");
  fflush(stdout);
  exit(0);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  alarm(60); /* a deadlock fails the test instead of hanging it */
  g_main = pthread_self();
  MUST(olInit());
  collect_devices();
  H = host_device();
  for (int i = 0; i < g_ndevs; i++)
    if (g_devs[i] != H) CPUS[NCPUS++] = g_devs[i];
  CHECK(H != NULL && NCPUS >= 1);
  if (argc > 2 && !strcmp(argv[2], "exit-during-launch")) return exit_during_huge_launch(argv[1]);
  size_t size;
  char *img = read_file(argv[1], &size);
  for (int i = 0; i < NCPUS && i < 2; i++) {
    ol_device_handle_t d = CPUS[i];
    ol_program_handle_t prog;
    ol_symbol_handle_t write_ids, add_value;
    MUST(olCreateProgram(d, img, size, &prog));
    MUST(olGetSymbol(prog, "write_ids", OL_SYMBOL_KIND_KERNEL, &write_ids));
    MUST(olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, &add_value));
    test_blocking(d, write_ids);
    test_wait_events(d, d);
    test_wait_events(d, H);
    test_wait_events(H, d);
    if (NCPUS > 1) test_wait_events(d, CPUS[(i + 1) % NCPUS]);
    test_args_reuse(d, add_value);
    test_errors(d, add_value);
    test_concurrent_enqueue(d);
    test_destroy_busy_queue(d);
    OK(olDestroyProgram(prog));
  }
  free(img);
  test_host_device_queue();
  test_concurrent_enqueue(H);
  test_destroy_busy_queue(H);
  MUST(olShutDown());
  test_shutdown_drains();
  return finish("async");
}
