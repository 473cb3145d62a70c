/* ol_bench_util.h - helpers of the ol* benchmark programs in this folder:
 * the first non-HOST device, a monotonic clock, a checked call, an image
 * read from a file. */
#ifndef OL_BENCH_UTIL_H
#define OL_BENCH_UTIL_H
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
/* Exit with the error's details when `x` fails. */
#define CHK(x)                                                          \
  do {                                                                  \
    ol_result_t r_ = (x);                                               \
    if (r_) {                                                           \
      fprintf(stderr, "%s: %s\n", #x, r_->Details ? r_->Details : "?"); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)
/* The file's bytes (exit 2 when unreadable). */
static char *read_image(const char *path, long *size) {
  FILE *f = fopen(path, "rb");
  if (!f) exit(2);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *img = malloc(n);
  if (fread(img, 1, n, f) != (size_t)n) exit(2);
  fclose(f);
  *size = n;
  return img;
}
#endif
