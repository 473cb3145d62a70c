/* Host kernels for the demo (see include/offload/host_kernel.h). */
#include "offload/host_kernel.h"

typedef struct { float a; const float *x; float *y; uint32_t n; } saxpy_args;

OFFLOAD_HOST_KERNEL(saxpy) {
  const saxpy_args *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
}

typedef struct { const float *x; double *sum; uint32_t n; } sum_args;

/* Each group accumulates in its group memory; its last item publishes. */
OFFLOAD_HOST_KERNEL(sum) {
  const sum_args *p = args;
  double *partial = item->group_memory;
  if (item->local_id[0] == 0) *partial = 0;
  size_t i = offload_global_id_x(item);
  if (i < p->n) *partial += p->x[i];
  if (item->local_id[0] == item->group_size[0] - 1) {
    /* CAS loop: there is no atomic add for double in C11 builtins. */
    double cur, next;
    do {
      cur = *(volatile double *)p->sum;
      next = cur + *partial;
    } while (!__atomic_compare_exchange((double *)p->sum, &cur, &next, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  }
}
