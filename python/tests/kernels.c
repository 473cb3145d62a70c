/* Host kernels for the Python tests (see include/offload/host_kernel.h). */
#include <string.h>
#include <time.h>
#include "offload/host_kernel.h"

/* Does nothing: launch-overhead measurements. */
OFFLOAD_HOST_KERNEL(empty) { (void)args; (void)item; }

typedef struct { float a; const float *x; float *y; uint32_t n; } saxpy_args;

OFFLOAD_HOST_KERNEL(saxpy) {
  const saxpy_args *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
}

/* Copies the argument block after `out` (its first field) into `out`:
 * lets a test check the packing byte for byte. */
typedef struct { unsigned char *out; uint32_t size; } echo_head;

OFFLOAD_HOST_KERNEL(echo_args) {
  const echo_head *h = args;
  if (offload_global_id_x(item) == 0) memcpy(h->out, args, h->size);
}

/* Each item adds its global id into sum (atomically): checks grids. */
typedef struct { uint64_t *sum; } ids_args;

OFFLOAD_HOST_KERNEL(sum_ids) {
  const ids_args *p = args;
  size_t x = offload_global_id(item, 0), y = offload_global_id(item, 1);
  size_t w = offload_global_size(item, 0);
  __atomic_fetch_add(p->sum, (uint64_t)(y * w + x), __ATOMIC_RELAXED);
}

/* Sleeps `ms` milliseconds once: a long-running kernel. */
typedef struct { uint32_t ms; } sleep_args;

OFFLOAD_HOST_KERNEL(sleep_ms) {
  const sleep_args *p = args;
  if (offload_global_id_x(item) != 0) return;
  struct timespec t = { p->ms / 1000, (long)(p->ms % 1000) * 1000000L };
  nanosleep(&t, NULL);
}
