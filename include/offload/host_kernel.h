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
 * sized to the machine; all work items of one group run on one worker.
 *   - A kernel declared with OFFLOAD_HOST_KERNEL (ABI v1 and v2): the items
 *     of a group run one after another, in x-fastest order, as plain calls
 *     (the fast path: no context switch). Since ABI v2 the macro also
 *     exports `<kernel>_offload_group`, the loop over a group's items with
 *     the body inlined, and the runtime calls that once per group. Group
 *     memory persists across the group's items. Such a kernel must not call
 *     offload_group_barrier (the launch fails with an error saying so:
 *     nobody could be waited for).
 *   - A kernel declared with OFFLOAD_HOST_KERNEL_BARRIER (ABI v2): every work
 *     item of a group is a lightweight context (a stackful coroutine with
 *     its own stack) on the group's worker thread. offload_group_barrier(item)
 *     switches to the next item of the group; once all items of the group
 *     wait at the barrier, they all go on. Group memory (dynamic and static)
 *     is shared by the group's items as on a GPU.
 *       * Stack per item: 64 KiB by default, OFFLOAD_HOST_ITEM_STACK=<bytes>
 *         (or 128K, 1M; 16 KiB..64 MiB) to change it. A guard page ends
 *         each stack: overflowing it crashes the process (SIGSEGV). Keep
 *         large arrays in group memory or device memory, not on the stack.
 *       * Every item of a group must call the barrier the same number of
 *         times. When some items of a group wait at a barrier while others
 *         have returned (a barrier in divergent control flow), the waiting
 *         items are abandoned (they never run again) and the launch fails
 *         with an error naming the group and the barrier; it never hangs.
 *         Items that reach *different* barrier calls the same number of times
 *         are not detected: they pass each other's barriers.
 *       * Cost: two stack switches per item per barrier (50-120 ns on the
 *         project's 2-core VM, mostly mispredicted returns; the group forms
 *         of its benchmark kernels ran 35-300x faster); the first launch
 *         maps the stacks, later groups and launches reuse them.
 *       * For speed, a barrier kernel may also export its group form
 *         (OFFLOAD_HOST_KERNEL_GROUP below: the group as loops over its
 *         items, split at the barriers); the runtime then calls that once
 *         per group instead of running the items as coroutines.
 *       * A kernel delivered as LLVM bitcode (`clang -O2 -fPIC -emit-llvm
 *         -c`; the runtime compiles it when loaded) gets such a group form
 *         made for it: the JIT cuts the kernel at its barrier calls into
 *         loops over the items, keeps the values that cross a barrier per
 *         item (or once, when every item holds the same), compiles the
 *         loops for the processor it runs on, and runs them instead of
 *         coroutines. It leaves a kernel to the coroutines
 *         when it cannot see every barrier (one called from another
 *         function of the module, or through another pointer) or meets
 *         code it does not handle (inline assembly, exceptions, debug
 *         info, variable-sized stack arrays); OFFLOAD_HOST_WORK_ITEM_LOOPS=0
 *         turns it off. Items that wait at different barrier calls go on
 *         together, as with coroutines; items that return while others
 *         wait fail the launch with an error naming the kernel.
 *   - Work items of different groups may run concurrently: use atomics for
 *     results they share (e.g. __atomic_fetch_add for a reduction).
 *   - A launch's groups are cut into pieces of consecutive groups (linear
 *     order, x fastest; about 16 pieces per worker thread, at most 4096
 *     groups each); a worker runs a piece's groups in order, one after
 *     another, with one call of `<kernel>_offload_groups` when the kernel
 *     exports it (group memory is the worker's: the groups of a piece see
 *     the same buffer, one after another).
 *
 * Static group memory: a kernel declares a struct of per-group arrays with
 * OFFLOAD_HOST_GROUP_STATIC(kernel, type); OFFLOAD_GROUP_STATIC(item, type)
 * is a pointer to the group's instance (uninitialised, like GPU shared
 * memory), separate from the launch's dynamic group memory:
 *
 *   struct tiles { float a[16][16], b[16][16]; };
 *   OFFLOAD_HOST_GROUP_STATIC(matmul, struct tiles);
 *   OFFLOAD_HOST_KERNEL_BARRIER(matmul) {
 *     struct tiles *t = OFFLOAD_GROUP_STATIC(item, struct tiles);
 *     ...; offload_group_barrier(item); ...
 *   }
 *
 * Declarations are exported symbols the runtime reads when it looks the
 * kernel up (`<kernel>_offload_barrier`, `<kernel>_offload_group_static_size`,
 * `<kernel>_offload_group`: the group loop of OFFLOAD_HOST_KERNEL or the
 * group form of OFFLOAD_HOST_KERNEL_GROUP, `<kernel>_offload_groups`: the
 * same over a run of consecutive groups);
 * kernels stay plain `clang -O2 -fPIC -shared` objects with no link-time
 * dependency on the runtime (the barrier is a function pointer in the item).
 * Launch limits: 1024 items per group, 1 MiB of group memory (dynamic plus
 * static), 2^48 work items per launch.
 */
#ifndef OFFLOAD_HOST_KERNEL_H
#define OFFLOAD_HOST_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#define OFFLOAD_HOST_KERNEL_ABI_VERSION 2

/* The largest argument buffer a group loop (`<kernel>_offload_group`) is
 * called with; larger ones get one call of the kernel per item. */
#define OFFLOAD_HOST_GROUP_ARGS_MAX 4096

/* What a work item knows about itself. Read-only for the kernel. */
typedef struct offload_host_item {
  uint32_t abi_version;     /* OFFLOAD_HOST_KERNEL_ABI_VERSION */
  uint32_t args_size;       /* bytes at `args` (0 from runtimes before group loops) */
  uint32_t num_groups[3];   /* grid size in groups, per dimension */
  uint32_t group_size[3];   /* work items per group, per dimension */
  uint32_t group_id[3];     /* this item's group */
  uint32_t local_id[3];     /* this item's index inside its group */
  void *group_memory;       /* dynamic group memory, NULL if none requested */
  uint64_t group_memory_size;
  /* ABI version 2 (abi_version >= 2): */
  void (*barrier)(const struct offload_host_item *item); /* use offload_group_barrier */
  void *group_static;       /* static group memory, NULL if the kernel declares none */
  uint64_t group_static_size;
  void *runtime;            /* the runtime's; do not touch */
} offload_host_item_t;

#ifdef __cplusplus
#define OFFLOAD_HOST_EXTERN extern "C"
#else
#define OFFLOAD_HOST_EXTERN
#endif

/* Declares a kernel as one exported function, called once per work item:
 * void name(const void *args, const offload_host_item_t *item). */
#define OFFLOAD_HOST_KERNEL_ITEM(name)                                         \
  OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void name(        \
      const void *args, const offload_host_item_t *item)

/* The group loop of OFFLOAD_HOST_KERNEL (and a barrier kernel's group form,
 * OFFLOAD_HOST_KERNEL_GROUP) is compiled three times, for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the build's baseline, and
 * each call takes the best one the CPU has (__builtin_cpu_supports: x86-64
 * with clang or GCC; not an ifunc, whose resolver a relocation would call at
 * load time; the compiler's runtime library adds the constructor that reads
 * CPUID), so a plain `-O2` build gets the host's vector width and masked
 * stores. A build that
 * already targets AVX-512 (-march=native on such a host) builds just one,
 * with its own tuning, and so does one that defines OFFLOAD_HOST_NO_CLONES
 * before including this header. */
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__)) &&      \
    !defined(__AVX512F__) && !defined(OFFLOAD_HOST_NO_CLONES)
/* Features added to the build's (not an `arch=`, which would replace them:
 * with -march=native the kernel's inline helpers would then have features
 * the copy lacks, and stay calls). The AVX-512 copy is tuned as for
 * Skylake-AVX512 and later, which prefer 256-bit vectors (with 512-bit ones
 * a 16 x 16 tile loop ran 4x slower on the project's machine). */
#define OFFLOAD_HOST_V3_ "avx2,fma,bmi,bmi2,lzcnt,movbe,f16c"
#define OFFLOAD_HOST_GROUP_ENTRY_(name)                                        \
  static __attribute__((target(OFFLOAD_HOST_V3_ ",avx512f,avx512vl,avx512bw," \
                                "avx512dq,avx512cd,tune=skylake-avx512"),     \
                         noinline)) void                                       \
      name##_offload_groups_v4_(const void *args,                              \
                                const offload_host_item_t *first, uint64_t n) { \
    name##_offload_groups_loop_(args, first, n);                               \
  }                                                                            \
  static __attribute__((target(OFFLOAD_HOST_V3_), noinline)) void             \
      name##_offload_groups_v3_(const void *args,                              \
                                const offload_host_item_t *first, uint64_t n) { \
    name##_offload_groups_loop_(args, first, n);                               \
  }                                                                            \
  static __attribute__((noinline)) void name##_offload_groups_v1_(            \
      const void *args, const offload_host_item_t *first, uint64_t n) {        \
    name##_offload_groups_loop_(args, first, n);                               \
  }                                                                            \
  /* Tail calls only: no frame of its own. */                                  \
  OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void              \
      name##_offload_groups(const void *args, const offload_host_item_t *first, \
                            uint64_t n) {                                      \
    if (__builtin_cpu_supports("x86-64-v4"))                                   \
      name##_offload_groups_v4_(args, first, n);                               \
    else if (__builtin_cpu_supports("x86-64-v3"))                              \
      name##_offload_groups_v3_(args, first, n);                               \
    else                                                                       \
      name##_offload_groups_v1_(args, first, n);                               \
  }                                                                            \
  OFFLOAD_HOST_GROUP_ONE_(name)
#else
#define OFFLOAD_HOST_GROUP_ENTRY_(name)                                        \
  OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void              \
      name##_offload_groups(const void *args, const offload_host_item_t *first, \
                            uint64_t n) {                                      \
    name##_offload_groups_loop_(args, first, n);                               \
  }                                                                            \
  OFFLOAD_HOST_GROUP_ONE_(name)
#endif
/* `<kernel>_offload_group`: one group, through `<kernel>_offload_groups`. */
#define OFFLOAD_HOST_GROUP_ONE_(name)                                          \
  OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void              \
      name##_offload_group(const void *args, const offload_host_item_t *first) { \
    name##_offload_groups(args, first, 1);                                     \
  }

/* Steps a group loop's item to the next group (x fastest). */
static inline __attribute__((always_inline)) void offload_host_next_group_(
    offload_host_item_t *it) {
  if (++it->group_id[0] == it->num_groups[0]) {
    it->group_id[0] = 0;
    if (++it->group_id[1] == it->num_groups[1]) {
      it->group_id[1] = 0;
      it->group_id[2]++;
    }
  }
}

/* Declares a kernel: the body below becomes an inline function of the work
 * item, exported as `name` (one call per item, as in ABI v1), as
 * `name_offload_group`, a loop over the items of one group (given the item
 * of local id 0), and as `name_offload_groups(args, first, count)`, the same
 * over `count` consecutive groups (x fastest) from `first`'s group on. The
 * runtime calls `name_offload_groups` once per run of groups a worker takes
 * (`name_offload_group` when a kernel exports no `_offload_groups`), and
 * either only for argument buffers of at most OFFLOAD_HOST_GROUP_ARGS_MAX
 * bytes.
 * The loop works on a copy of the arguments in a local buffer, so the
 * compiler may load them once, ahead of any branch: with the body inlined,
 * the item in registers and the bounds check of `if (i < n)` masked, it
 * vectorises over x (with -O2; see OFFLOAD_HOST_NO_CLONES above for the
 * vector width). A runtime that knows only ABI v1 calls `name` per item. */
#define OFFLOAD_HOST_KERNEL(name)                                              \
  static inline __attribute__((always_inline)) void name##_offload_item_(      \
      const void *args, const offload_host_item_t *item);                      \
  OFFLOAD_HOST_KERNEL_ITEM(name) { name##_offload_item_(args, item); }         \
  static inline __attribute__((always_inline)) void name##_offload_groups_loop_( \
      const void *args, const offload_host_item_t *first, uint64_t n) {        \
    unsigned char args_copy_[OFFLOAD_HOST_GROUP_ARGS_MAX]                      \
        __attribute__((aligned(64)));                                          \
    __builtin_memcpy(args_copy_, args, first->args_size);                      \
    args = args_copy_;                                                         \
    offload_host_item_t it = *first;                                           \
    const uint32_t nx = it.group_size[0], ny = it.group_size[1],               \
                   nz = it.group_size[2];                                      \
    for (uint64_t g = 0; g < n; g++, offload_host_next_group_(&it))            \
      for (uint32_t z = 0; z < nz; z++)                                        \
        for (uint32_t y = 0; y < ny; y++)                                      \
          for (uint32_t x = 0; x < nx; x++) {                                  \
            it.local_id[0] = x;                                                \
            it.local_id[1] = y;                                                \
            it.local_id[2] = z;                                                \
            name##_offload_item_(args, &it);                                   \
          }                                                                    \
  }                                                                            \
  OFFLOAD_HOST_GROUP_ENTRY_(name)                                              \
  static inline __attribute__((always_inline)) void name##_offload_item_(      \
      const void *args, const offload_host_item_t *item)

/* Declares a kernel whose work items call offload_group_barrier: its groups
 * run as coroutines (see the execution model above), one call per item. */
#define OFFLOAD_HOST_KERNEL_BARRIER(name)                                      \
  OFFLOAD_HOST_EXTERN __attribute__((visibility("default"), used))            \
  const uint32_t name##_offload_barrier = 1;                                   \
  OFFLOAD_HOST_KERNEL_ITEM(name)

/* Declares the group form of barrier kernel `name` (optional): one call per
 * work group, with `group` the item of local id 0, doing what the group's
 * items would do, as loops over the items split at the barriers (what PoCL's
 * compiler makes of an OpenCL kernel; here the kernel's author, or the tool
 * generating the C, writes it):
 *
 *   OFFLOAD_HOST_KERNEL_GROUP(name) {
 *     ...                                  (once per group)
 *     OFFLOAD_GROUP_FOR_ITEMS(group, it) { what each item does up to the
 *                                          first barrier, for item `it` }
 *     OFFLOAD_GROUP_FOR_ITEMS(group, it) { ... up to the next barrier }
 *     ...
 *   }
 *
 * The macro exports it as `name_offload_group` and, over a run of
 * consecutive groups, `name_offload_groups` (the groups of a run share the
 * worker's group memory, one after another). When a barrier kernel exports
 * it (any argument size), the runtime calls it instead of running the
 * group's items as coroutines: no stacks, no switch,
 * and loops the compiler can vectorise (built per x86-64 level, as the
 * group loop of OFFLOAD_HOST_KERNEL). It must not call
 * offload_group_barrier (the launch fails with an error saying so). A value
 * an item keeps across a barrier lives in an array indexed by the item's
 * offload_local_linear_id (at most OFFLOAD_HOST_MAX_GROUP_SIZE entries) or
 * in group memory; items of one loop may run in any order (they are
 * independent between barriers). The per-item function `name` stays the
 * reference, and what a runtime without group forms (ABI v2 before them)
 * runs. */
#define OFFLOAD_HOST_KERNEL_GROUP(name)                                        \
  static inline __attribute__((always_inline)) void name##_offload_group_body_( \
      const void *args, const offload_host_item_t *group);                     \
  static inline __attribute__((always_inline)) void name##_offload_groups_loop_( \
      const void *args, const offload_host_item_t *first, uint64_t n) {        \
    offload_host_item_t g_ = *first;                                           \
    for (uint64_t i_ = 0; i_ < n; i_++, offload_host_next_group_(&g_))         \
      name##_offload_group_body_(args, &g_);                                   \
  }                                                                            \
  OFFLOAD_HOST_GROUP_ENTRY_(name)                                              \
  static inline __attribute__((always_inline)) void name##_offload_group_body_( \
      const void *args, const offload_host_item_t *group)

/* Most work items in one group on the host device. */
#define OFFLOAD_HOST_MAX_GROUP_SIZE 1024

/* Runs the statement after it once per work item of `group`'s work group
 * (x fastest), with `it` a `offload_host_item_t *` to that item (its
 * local_id set, the rest as in `group`). `break` leaves the x loop only:
 * use `continue` to skip an item. */
#define OFFLOAD_GROUP_FOR_ITEMS(group, it)                                     \
  for (offload_host_item_t it##_item_ = *(group), *it = &it##_item_; it;       \
       it = NULL)                                                              \
    for (it##_item_.local_id[2] = 0;                                           \
         it##_item_.local_id[2] < it##_item_.group_size[2];                    \
         it##_item_.local_id[2]++)                                             \
      for (it##_item_.local_id[1] = 0;                                         \
           it##_item_.local_id[1] < it##_item_.group_size[1];                  \
           it##_item_.local_id[1]++)                                           \
        for (it##_item_.local_id[0] = 0;                                       \
             it##_item_.local_id[0] < it##_item_.group_size[0];                \
             it##_item_.local_id[0]++)

/* Reserves sizeof(type) bytes of static group memory for kernel `name`. */
#define OFFLOAD_HOST_GROUP_STATIC(name, type)                                  \
  OFFLOAD_HOST_EXTERN __attribute__((visibility("default"), used))            \
  const uint64_t name##_offload_group_static_size = sizeof(type)

/* The group's static group memory as a `type *`. */
#define OFFLOAD_GROUP_STATIC(item, type) ((type *)(item)->group_static)

/* Wait until every work item of the group has called it (kernels declared
 * with OFFLOAD_HOST_KERNEL_BARRIER only). Also orders group memory: writes
 * before it are seen by every item of the group after it. */
static inline void offload_group_barrier(const offload_host_item_t *item) {
  item->barrier(item);
}

/* The item's index in its group, x fastest: 0 .. items per group - 1. */
static inline uint32_t offload_local_linear_id(const offload_host_item_t *item) {
  return item->local_id[0] +
         item->group_size[0] * (item->local_id[1] + item->group_size[1] * item->local_id[2]);
}

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
