/*
 * host_kernel.h - write kernels for the offload runtime's host device.
 *
 * A host kernel is an ordinary C function in an x86_64 shared object (build
 * it with `clang -O2 -fPIC -shared`). The runtime loads the object with
 * olCreateProgram (or the Rust API's Device::load_program), finds the kernel
 * by name, and runs it once per work item of the launch grid:
 *
 *   OFFLOAD_HOST_KERNEL(saxpy) {
 *     const struct { float a; const float *x; float *y; size_t n; } *p = args;
 *     size_t i = offload_global_id_x(item);
 *     if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
 *   }
 *
 * `args` is the packed argument buffer given to the launch, byte for byte
 * (lay it out as a struct, as for a CUDA kernel parameter block).
 *
 * Execution model: groups (blocks) are spread over a pool of worker threads
 * sized to the machine; the work items of one group run one after another on
 * a single worker, in x-fastest order. Hence:
 *   - group memory (`item->group_memory`, the launch's dynamic shared memory)
 *     is private to the group and persists across its work items;
 *   - barriers inside a group are NOT supported (there is no concurrent
 *     sibling to wait for); a kernel must not wait for other work items;
 *   - work items of different groups may run concurrently: use atomics for
 *     results they share (e.g. __atomic_fetch_add for a reduction).
 */
#ifndef OFFLOAD_HOST_KERNEL_H
#define OFFLOAD_HOST_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#define OFFLOAD_HOST_KERNEL_ABI_VERSION 1

/* What a work item knows about itself. Read-only for the kernel. */
typedef struct offload_host_item {
  uint32_t abi_version;     /* OFFLOAD_HOST_KERNEL_ABI_VERSION */
  uint32_t reserved;
  uint32_t num_groups[3];   /* grid size in groups, per dimension */
  uint32_t group_size[3];   /* work items per group, per dimension */
  uint32_t group_id[3];     /* this item's group */
  uint32_t local_id[3];     /* this item's index inside its group */
  void *group_memory;       /* dynamic group memory, NULL if none requested */
  uint64_t group_memory_size;
} offload_host_item_t;

#ifdef __cplusplus
#define OFFLOAD_HOST_EXTERN extern "C"
#else
#define OFFLOAD_HOST_EXTERN
#endif

/* Declares a kernel: void name(const void *args, const offload_host_item_t *item). */
#define OFFLOAD_HOST_KERNEL(name)                                              \
  OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void name(        \
      const void *args, const offload_host_item_t *item)

static inline size_t offload_global_id(const offload_host_item_t *item, int dim) {
  return (size_t)item->group_id[dim] * item->group_size[dim] + item->local_id[dim];
}
static inline size_t offload_global_id_x(const offload_host_item_t *item) {
  return offload_global_id(item, 0);
}
static inline size_t offload_global_size(const offload_host_item_t *item, int dim) {
  return (size_t)item->num_groups[dim] * item->group_size[dim];
}

#endif /* OFFLOAD_HOST_KERNEL_H */
