/* ol_queued_launches.c - ol* queued launches on one device, for comparing
 * runtimes side by side (e.g. over the remote plugin, where a queue can
 * pipeline). Usage: ol_queued_launches KERNELS.so [BATCH] [ROUNDS]
 * Device: the first non-host device. Prints, per round, the time of
 * BATCH launches enqueued back to back followed by one olSyncQueue
 * (us per launch; split into the olLaunchKernel calls and the sync that
 * waits for the rest), and the time of one launch + olSyncQueue (us). */
#include "ol_bench_util.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int batch = argc > 2 ? atoi(argv[2]) : 1000, rounds = argc > 3 ? atoi(argv[3]) : 5;
  long n;
  char *img = read_image(argv[1], &n);
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
    double te = now_us();
    CHK(olSyncQueue(q));
    double t1 = now_us();
    int single = batch / 10 > 0 ? batch / 10 : 1;
    for (int i = 0; i < single; i++) {
      CHK(olLaunchKernel(q, g_dev, k, NULL, 0, &ls));
      CHK(olSyncQueue(q));
    }
    double t2 = now_us();
    printf("round %d: queued %.3f us/launch (calls %.3f us/launch, then sync %.1f us), "
           "launch+sync %.3f us\n",
           r, (t1 - t0) / batch, (te - t0) / batch, t1 - te, (t2 - t1) / single);
  }
  CHK(olDestroyQueue(q));
  CHK(olDestroyProgram(prog));
  CHK(olShutDown());
  return 0;
}
