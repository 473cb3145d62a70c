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

/* ---- Kernels for conformance.c (counterparts of LLVM's unittest device code). */

/* out[i] = i */
OFFLOAD_HOST_KERNEL(write_ids) {
  uint32_t *const *out = args;
  size_t i = offload_global_id_x(item);
  (*out)[i] = (uint32_t)i;
}

/* Mixed scalar sizes in one packed block: out[i] = a + c + i. */
struct multi_args { char a; int *b; short c; };
OFFLOAD_HOST_KERNEL(multiargs) {
  const struct multi_args *p = args;
  size_t i = offload_global_id_x(item);
  p->b[i] = p->a + p->c + (int)i;
}

/* A struct by value between scalars: out[i] = n + f.a + f.b + i. */
struct composite_args { uint32_t n; struct { int a, b; } f; uint32_t *out; };
OFFLOAD_HOST_KERNEL(composite) {
  const struct composite_args *p = args;
  size_t i = offload_global_id_x(item);
  p->out[i] = p->n + (uint32_t)p->f.a + (uint32_t)p->f.b + (uint32_t)i;
}

/* A one-byte argument block. */
uint32_t g_last_byte;
OFFLOAD_HOST_KERNEL(byte_arg) {
  const unsigned char *c = args;
  (void)item;
  __atomic_store_n(&g_last_byte, *c, __ATOMIC_RELAXED);
}

/* Dynamic group memory, no cross-item dependency: out[i] = local_id * 2. */
OFFLOAD_HOST_KERNEL(localmem) {
  uint32_t *const *out = args;
  uint32_t *shared = item->group_memory;
  uint32_t l = item->local_id[0];
  shared[l] = l * 2;
  (*out)[offload_global_id_x(item)] = shared[l];
}

/* Per-group sum of 2 per item in group memory (items of a group run in order). */
OFFLOAD_HOST_KERNEL(localmem_reduction) {
  uint32_t *const *out = args;
  uint32_t *acc = item->group_memory;
  if (item->local_id[0] == 0) *acc = 0;
  *acc += 2;
  if (item->local_id[0] == item->group_size[0] - 1) (*out)[item->group_id[0]] = *acc;
}

/* A global array written by one kernel and read by another. */
uint32_t g_global[64];
OFFLOAD_HOST_KERNEL(write_global) {
  (void)args;
  size_t i = offload_global_id_x(item);
  g_global[i] = (uint32_t)(i * 2);
}
OFFLOAD_HOST_KERNEL(read_global_array) {
  uint32_t *const *out = args;
  size_t i = offload_global_id_x(item);
  (*out)[i] = g_global[i];
}

/* Global constructors run when the program is loaded. */
static uint32_t g_ctor_value;
__attribute__((constructor)) static void set_ctor_value(void) { g_ctor_value = 100; }
OFFLOAD_HOST_KERNEL(global_ctor) {
  uint32_t *const *out = args;
  size_t i = offload_global_id_x(item);
  (*out)[i] = (uint32_t)i + g_ctor_value;
}
__attribute__((destructor)) static void clear_ctor_value(void) { g_ctor_value = 0; }
OFFLOAD_HOST_KERNEL(global_dtor) {
  (void)args;
  (void)item;
}

/* mem[idx] = idx < 2 ? 1 : mem[idx - 1] + mem[idx - 2] (ordering across queues). */
struct sequence_args { uint32_t idx; uint32_t *mem; };
OFFLOAD_HOST_KERNEL(sequence) {
  const struct sequence_args *p = args;
  (void)item;
  p->mem[p->idx] = p->idx < 2 ? 1 : p->mem[p->idx - 1] + p->mem[p->idx - 2];
}
