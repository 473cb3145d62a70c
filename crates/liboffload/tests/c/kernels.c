/* kernels.c - host kernels for the liboffload tests (built with
 * clang-22 -O2 -fPIC -shared -I include). Arguments arrive as one packed
 * buffer, laid out as the structs below. */
#include "offload/host_kernel.h"

int g_counter = 42;          /* a global variable (symbol kind 1) */
double g_table[8] = {1, 2};  /* 64 bytes */

struct saxpy_args { float a; const float *x; float *y; size_t n; };
OFFLOAD_HOST_KERNEL(saxpy) {
  const struct saxpy_args *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
}

/* Sum of x[0..n) into *out with atomics (groups run concurrently). */
struct reduce_args { const int64_t *x; int64_t *out; size_t n; };
OFFLOAD_HOST_KERNEL(reduce_sum) {
  const struct reduce_args *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) __atomic_fetch_add(p->out, p->x[i], __ATOMIC_RELAXED);
}

/* Per-group partial sums in dynamic group memory; the last item of each
 * group adds the group's total (items of a group run in order). */
OFFLOAD_HOST_KERNEL(reduce_group) {
  const struct reduce_args *p = args;
  int64_t *acc = item->group_memory;
  size_t i = offload_global_id_x(item);
  if (item->local_id[0] == 0) *acc = 0;
  if (i < p->n) *acc += p->x[i];
  if (item->local_id[0] == item->group_size[0] - 1)
    __atomic_fetch_add(p->out, *acc, __ATOMIC_RELAXED);
}

struct add_args { int *x; int v; size_t n; };
OFFLOAD_HOST_KERNEL(add_value) {
  const struct add_args *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->x[i] += p->v;
}

/* 2-D: out[y * w + x] = y * 1000 + x. */
struct ids_args { uint32_t *out; uint32_t w, h; };
OFFLOAD_HOST_KERNEL(ids_2d) {
  const struct ids_args *p = args;
  size_t x = offload_global_id(item, 0), y = offload_global_id(item, 1);
  if (x < p->w && y < p->h) p->out[y * p->w + x] = (uint32_t)(y * 1000 + x);
}

/* Adds g_counter to *out (reads a global of the same image). */
OFFLOAD_HOST_KERNEL(read_global) {
  int *const *out = args;
  (void)item;
  **out += g_counter;
}

OFFLOAD_HOST_KERNEL(empty_kernel) {
  (void)args;
  (void)item;
}
