/* interop_kernels.c - a host kernel for interop_table.c, loaded through the
 * interop object's offload table (clang-22 -O2 -fPIC -shared -I include). */
#include "offload/host_kernel.h"

struct axpy_args { int a; const int *x; int *y; size_t n; };
/* y[i] = a * x[i] + y[i] */
OFFLOAD_HOST_KERNEL(axpy) {
  const struct axpy_args *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
}
