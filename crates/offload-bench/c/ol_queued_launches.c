/* ol_queued_launches.c - ol* queued launches on one device, for comparing
 * runtimes side by side (e.g. over the remote plugin, where a queue can
 * pipeline). Usage: ol_queued_launches KERNELS.so [BATCH] [ROUNDS]
 * Device: the first non-host device. Prints, per round, the time of
 * BATCH launches enqueued back to back followed by one olSyncQueue
 * (us per launch), and the time of one launch + olSyncQueue (us). */
#include <stdbool.h>
#include <stddef.h>
#include <OffloadAPI.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static ol_device_handle_t g_dev;
static bool pick(ol_device_handle_t d, void *ud) {
  (void)ud;
  ol_device_type_t t;
  if (olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof t, &t)) return true;
  if (t != OL_DEVICE_TYPE_HOST && !g_dev) g_dev = d;
  return true;
}
static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}
#define CHK(x)                                                              \
  do {                                                                      \
    ol_result_t r_ = (x);                                                   \
    if (r_) {                                                               \
      fprintf(stderr, "%s: %s\n", #x, r_->Details ? r_->Details : "?");     \
      return 1;                                                             \
    }                                                                       \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int batch = argc > 2 ? atoi(argv[2]) : 1000, rounds = argc > 3 ? atoi(argv[3]) : 5;
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 2;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *img = malloc(n);
  if (fread(img, 1, n, f) != (size_t)n) return 2;
  fclose(f);
  CHK(olInit());
  CHK(olIterateDevices(pick, NULL));
  if (!g_dev) return 3;
  ol_program_handle_t prog;
  ol_symbol_handle_t k;
  ol_queue_handle_t q;
  CHK(olCreateProgram(g_dev, img, n, &prog));
  CHK(olGetSymbol(prog, "empty_kernel", OL_SYMBOL_KIND_KERNEL, &k));
  CHK(olCreateQueue(g_dev, &q));
  ol_kernel_launch_size_args_t ls = {1, {1, 1, 1}, {1, 1, 1}, 0};
  for (int r = 0; r < rounds; r++) {
    double t0 = now_us();
    for (int i = 0; i < batch; i++) CHK(olLaunchKernel(q, g_dev, k, NULL, 0, &ls));
    CHK(olSyncQueue(q));
    double t1 = now_us();
    int single = batch / 10 > 0 ? batch / 10 : 1;
    for (int i = 0; i < single; i++) {
      CHK(olLaunchKernel(q, g_dev, k, NULL, 0, &ls));
      CHK(olSyncQueue(q));
    }
    double t2 = now_us();
    printf("round %d: queued %.3f us/launch, launch+sync %.3f us\n", r, (t1 - t0) / batch,
           (t2 - t1) / single);
  }
  CHK(olDestroyQueue(q));
  CHK(olDestroyProgram(prog));
  CHK(olShutDown());
  return 0;
}
