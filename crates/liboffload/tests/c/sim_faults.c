/* sim_faults.c - error paths of the ol* face, driven by the simulated
 * device's injected faults (OFFLOAD_PLUGINS=sim, OFFLOAD_SIM_FAULTS set by
 * the test runner). Usage: sim_faults MODE kernels.so. Each mode provokes
 * one failure, checks the error code, then checks that the library still
 * works and that nothing was left behind. */
#include "common.h"

static ol_device_handle_t D, H;
static char *g_image;
static size_t g_image_size;

/* Round trip through a fresh allocation: the runtime is still usable. */
static void round_trip(void) {
  int in[32], out[32], *p = NULL;
  for (int i = 0; i < 32; i++) in[i] = i * 7 + 1;
  OK(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, sizeof in, (void **)&p));
  OK(olMemcpy(NULL, p, D, in, H, sizeof in));
  memset(out, 0, sizeof out);
  OK(olMemcpy(NULL, out, H, p, D, sizeof out));
  CHECK(memcmp(in, out, sizeof in) == 0);
  OK(olMemFree(p));
}

struct add_args { int *x; int v; size_t n; };

static int run(const char *mode) {
  int host[64];
  for (int i = 0; i < 64; i++) host[i] = i;
  int *p = NULL;
  if (!strcmp(mode, "alloc")) { /* OFFLOAD_SIM_FAULTS=alloc:1 */
    EXPECT(OL_ERRC_OUT_OF_RESOURCES, olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, 256, (void **)&p));
    round_trip();
    return 0;
  }
  MUST(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, sizeof host, (void **)&p));
  ol_queue_handle_t q = NULL;
  if (!strcmp(mode, "queue")) { /* queue:1 */
    EXPECT(OL_ERRC_BACKEND_FAILURE, olCreateQueue(D, &q));
    OK(olCreateQueue(D, &q));
  } else {
    MUST(olCreateQueue(D, &q));
  }
  if (!strcmp(mode, "queue")) {
    /* Checked above: the second queue works. */
  } else if (!strcmp(mode, "h2d")) { /* h2d:1 : the synchronous copy fails now */
    EXPECT(OL_ERRC_BACKEND_FAILURE, olMemcpy(NULL, p, D, host, H, sizeof host));
  } else if (!strcmp(mode, "h2d-queued")) { /* h2d:1 : the queued one at sync */
    OK(olMemcpy(q, p, D, host, H, sizeof host));
    ol_event_handle_t e;
    OK(olCreateEvent(q, &e));
    EXPECT(OL_ERRC_BACKEND_FAILURE, olSyncEvent(e));
    OK(olSyncQueue(q)); /* reported once */
    OK(olDestroyEvent(e));
  } else if (!strcmp(mode, "d2h")) { /* d2h:1 */
    EXPECT(OL_ERRC_BACKEND_FAILURE, olMemcpy(NULL, host, H, p, D, sizeof host));
    OK(olMemcpy(q, host, H, p, D, sizeof host));
    OK(olSyncQueue(q));
  } else if (!strcmp(mode, "d2d")) { /* d2d:1 */
    EXPECT(OL_ERRC_BACKEND_FAILURE, olMemcpy(NULL, p, D, p + 32, D, 32 * sizeof(int)));
  } else if (!strcmp(mode, "fill")) { /* fill:1 */
    int v = 5;
    OK(olMemFill(q, p, sizeof v, &v, sizeof host));
    EXPECT(OL_ERRC_BACKEND_FAILURE, olSyncQueue(q));
    OK(olMemFill(NULL, p, sizeof v, &v, sizeof host));
  } else if (!strcmp(mode, "load")) { /* load:1 */
    ol_program_handle_t prog;
    EXPECT(OL_ERRC_INVALID_BINARY, olCreateProgram(D, g_image, g_image_size, &prog));
    OK(olCreateProgram(D, g_image, g_image_size, &prog));
    OK(olDestroyProgram(prog));
  } else if (!strcmp(mode, "launch") || !strcmp(mode, "launch-queued")) { /* launch:1 */
    ol_program_handle_t prog;
    ol_symbol_handle_t k;
    MUST(olCreateProgram(D, g_image, g_image_size, &prog));
    MUST(olGetSymbol(prog, "add_value", OL_SYMBOL_KIND_KERNEL, &k));
    OK(olMemcpy(NULL, p, D, host, H, sizeof host));
    struct add_args a = {p, 100, 64};
    ol_kernel_launch_size_args_t ls = {1, {2, 1, 1}, {32, 1, 1}, 0};
    if (!strcmp(mode, "launch")) {
      EXPECT(OL_ERRC_BACKEND_FAILURE, olLaunchKernel(NULL, D, k, &a, sizeof a, &ls));
    } else {
      OK(olLaunchKernel(q, D, k, &a, sizeof a, &ls));
      EXPECT(OL_ERRC_BACKEND_FAILURE, olSyncQueue(q));
    }
    /* The failed launch did nothing; a second one works. */
    OK(olLaunchKernel(q, D, k, &a, sizeof a, &ls));
    OK(olSyncQueue(q));
    int out[64];
    OK(olMemcpy(NULL, out, H, p, D, sizeof out));
    int good = 1;
    for (int i = 0; i < 64; i++) good &= out[i] == i + 100;
    CHECK(good);
    OK(olDestroyProgram(prog));
  } else if (!strcmp(mode, "free")) { /* free:1 */
    /* Small blocks stay in the caching allocator; a large one reaches the
     * device's free. The core forgot it either way: freeing again is a
     * double free. */
    void *large = NULL;
    OK(olMemAlloc(D, OL_ALLOC_TYPE_DEVICE, 1 << 20, &large));
    EXPECT(OL_ERRC_BACKEND_FAILURE, olMemFree(large));
    EXPECT(OL_ERRC_INVALID_ARGUMENT, olMemFree(large));
  } else if (!strcmp(mode, "latency")) { /* OFFLOAD_SIM_LATENCY_US: slow but right */
    OK(olMemcpy(q, p, D, host, H, sizeof host));
    int out[64];
    OK(olMemcpy(q, out, H, p, D, sizeof out));
    OK(olSyncQueue(q));
    CHECK(memcmp(out, host, sizeof out) == 0);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  OK(olDestroyQueue(q));
  if (p) OK(olMemFree(p));
  round_trip();
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  g_image = read_file(argv[2], &g_image_size);
  MUST(olInit());
  collect_devices();
  D = offload_device(0);
  H = host_device();
  if (!D || !H) {
    fprintf(stderr, "no simulated device (OFFLOAD_PLUGINS=sim?)\n");
    return 2;
  }
  char name[64] = {0};
  MUST(olGetDeviceInfo(D, OL_DEVICE_INFO_NAME, sizeof name, name));
  CHECK(strstr(name, "simulated") != NULL);
  if (run(argv[1])) return 2;
  OK(olShutDown());
  free(g_image);
  return finish(argv[1]);
}
