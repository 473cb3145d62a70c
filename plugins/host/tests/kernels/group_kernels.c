/* group_kernels.c - GPU-style host kernels (host_kernel.h ABI v2): work-group
 * barriers, dynamic and static group memory. Built by the host plugin's and
 * liboffload's tests with `clang-22 -O2 -fPIC -shared`. */
#include <offload/host_kernel.h>

/* LLVM's localmem_reduction and localmem_static: every item puts 2 in group
 * memory `mem`, a tree reduction with a barrier per level (barriers in a
 * loop), item 0 writes the group's sum (2 x group size). Group size: a
 * power of two. */
static void reduce(const offload_host_item_t *item, uint32_t *mem, uint32_t *out) {
  uint32_t l = item->local_id[0], n = item->group_size[0];
  mem[l] = 2;
  offload_group_barrier(item);
  for (uint32_t i = n / 2; i > 0; i >>= 1) {
    if (l < i) mem[l] += mem[l + i];
    offload_group_barrier(item);
  }
  if (l == 0) out[item->group_id[0]] = mem[0];
}

/* Dynamic group memory (the launch's DynSharedMemory). */
OFFLOAD_HOST_KERNEL_BARRIER(reduce_dynamic) {
  reduce(item, item->group_memory, *(uint32_t *const *)args);
}

/* A static group array of 256 words. */
struct reduce_static_mem {
  uint32_t words[256];
};
OFFLOAD_HOST_GROUP_STATIC(reduce_static, struct reduce_static_mem);
OFFLOAD_HOST_KERNEL_BARRIER(reduce_static) {
  reduce(item, OFFLOAD_GROUP_STATIC(item, struct reduce_static_mem)->words,
         *(uint32_t *const *)args);
}

/* C = A x B (n x n floats, n a multiple of 16), 16 x 16 tiles in static
 * group memory: two barriers per tile step. Grid: (n/16, n/16) groups of
 * (16, 16). */
#define TILE 16
struct matmul_tiles {
  float a[TILE][TILE];
  float b[TILE][TILE];
};
OFFLOAD_HOST_GROUP_STATIC(matmul_tiled, struct matmul_tiles);
OFFLOAD_HOST_KERNEL_BARRIER(matmul_tiled) {
  const struct {
    const float *a, *b;
    float *c;
    uint32_t n;
  } *p = args;
  struct matmul_tiles *t = OFFLOAD_GROUP_STATIC(item, struct matmul_tiles);
  uint32_t tx = item->local_id[0], ty = item->local_id[1];
  uint32_t col = item->group_id[0] * TILE + tx, row = item->group_id[1] * TILE + ty;
  float acc = 0;
  for (uint32_t k0 = 0; k0 < p->n; k0 += TILE) {
    t->a[ty][tx] = p->a[row * p->n + k0 + tx];
    t->b[ty][tx] = p->b[(k0 + ty) * p->n + col];
    offload_group_barrier(item);
    for (uint32_t k = 0; k < TILE; k++) acc += t->a[ty][k] * t->b[k][tx];
    offload_group_barrier(item);
  }
  p->c[row * p->n + col] = acc;
}

/* The same two kernels with a group form (OFFLOAD_HOST_KERNEL_GROUP): the
 * per-item function is the reference, the group form what the runtime runs
 * (the work group as loops split at the barriers). */
OFFLOAD_HOST_KERNEL_BARRIER(reduce_loops) {
  reduce(item, item->group_memory, *(uint32_t *const *)args);
}
OFFLOAD_HOST_KERNEL_GROUP(reduce_loops) {
  uint32_t *mem = group->group_memory, *out = *(uint32_t *const *)args;
  uint32_t n = group->group_size[0];
  OFFLOAD_GROUP_FOR_ITEMS(group, it) mem[it->local_id[0]] = 2;
  for (uint32_t i = n / 2; i > 0; i >>= 1)
    OFFLOAD_GROUP_FOR_ITEMS(group, it) {
      uint32_t l = it->local_id[0];
      if (l < i) mem[l] += mem[l + i];
    }
  out[group->group_id[0]] = mem[0]; /* item 0's part after the last barrier */
}

OFFLOAD_HOST_GROUP_STATIC(matmul_loops, struct matmul_tiles);
OFFLOAD_HOST_KERNEL_BARRIER(matmul_loops) { matmul_tiled(args, item); }
OFFLOAD_HOST_KERNEL_GROUP(matmul_loops) {
  const struct {
    const float *a, *b;
    float *c;
    uint32_t n;
  } *p = args;
  struct matmul_tiles *t = OFFLOAD_GROUP_STATIC(group, struct matmul_tiles);
  /* Each item's `acc`, kept across the barriers. */
  float acc[TILE][TILE] = {{0}};
  uint32_t col0 = group->group_id[0] * TILE, row0 = group->group_id[1] * TILE;
  for (uint32_t k0 = 0; k0 < p->n; k0 += TILE) {
    OFFLOAD_GROUP_FOR_ITEMS(group, it) {
      uint32_t tx = it->local_id[0], ty = it->local_id[1];
      t->a[ty][tx] = p->a[(row0 + ty) * p->n + k0 + tx];
      t->b[ty][tx] = p->b[(k0 + ty) * p->n + col0 + tx];
    }
    /* The items' k loops interleaved (they are independent until the
     * next barrier): k outermost, so the x loop vectorises; over the
     * kernel's fixed 16 x 16 items, a trip count the compiler knows. */
    for (uint32_t k = 0; k < TILE; k++)
      for (uint32_t ty = 0; ty < TILE; ty++)
        for (uint32_t tx = 0; tx < TILE; tx++)
          acc[ty][tx] += t->a[ty][k] * t->b[k][tx];
  }
  OFFLOAD_GROUP_FOR_ITEMS(group, it) {
    uint32_t tx = it->local_id[0], ty = it->local_id[1];
    p->c[(row0 + ty) * p->n + col0 + tx] = acc[ty][tx];
  }
}

/* A group form that calls the barrier (it must not): the launch fails. */
OFFLOAD_HOST_KERNEL_BARRIER(group_form_barrier) {
  (void)args;
  offload_group_barrier(item);
}
OFFLOAD_HOST_KERNEL_GROUP(group_form_barrier) {
  (void)args;
  offload_group_barrier(group);
}

/* Inclusive prefix sum of each group's slice of `in` (Hillis-Steele in
 * dynamic group memory of 2 x group size words, double-buffered: one
 * barrier per step). */
OFFLOAD_HOST_KERNEL_BARRIER(scan_group) {
  const struct {
    const uint32_t *in;
    uint32_t *out;
  } *p = args;
  uint32_t n = item->group_size[0], l = item->local_id[0];
  size_t g = offload_global_id_x(item);
  uint32_t *buf = item->group_memory;
  uint32_t src = 0;
  buf[l] = p->in[g];
  offload_group_barrier(item);
  for (uint32_t off = 1; off < n; off <<= 1) {
    uint32_t dst = 1 - src;
    uint32_t v = buf[src * n + l];
    if (l >= off) v += buf[src * n + l - off];
    buf[dst * n + l] = v;
    src = dst;
    offload_group_barrier(item);
  }
  p->out[g] = buf[src * n + l];
}

/* 3-D groups: each item writes its linear local id to group memory; after
 * the barrier it reads its neighbour's (wrapping), so every id and the
 * sharing of the memory are checked. out[global linear id] = neighbour id. */
OFFLOAD_HOST_KERNEL_BARRIER(neighbour_3d) {
  uint32_t *const *out = args;
  const uint32_t *s = item->group_size, *l = item->local_id;
  uint32_t n = s[0] * s[1] * s[2];
  uint32_t lin = l[0] + s[0] * (l[1] + s[1] * l[2]);
  uint32_t *mem = item->group_memory;
  mem[lin] = lin;
  offload_group_barrier(item);
  uint32_t got = mem[(lin + 1) % n];
  offload_group_barrier(item);
  /* Reused after a second barrier: nobody may still be reading. */
  mem[lin] = 0;
  size_t gx = offload_global_id(item, 0), gy = offload_global_id(item, 1),
         gz = offload_global_id(item, 2);
  size_t w = offload_global_size(item, 0), h = offload_global_size(item, 1);
  (*out)[gx + w * (gy + h * gz)] = got;
}

/* Many barriers: `rounds` rounds, each item adds its id to a group counter
 * between barriers; item 0 checks the counter every round and counts the
 * rounds that were right. out[group] = good rounds. */
OFFLOAD_HOST_KERNEL_BARRIER(many_barriers) {
  const struct {
    uint32_t *out;
    uint32_t rounds;
  } *p = args;
  uint32_t *mem = item->group_memory; /* [0]: sum, [1]: good rounds */
  uint32_t n = item->group_size[0], l = item->local_id[0];
  if (l == 0) mem[1] = 0;
  for (uint32_t r = 0; r < p->rounds; r++) {
    if (l == 0) mem[0] = 0;
    offload_group_barrier(item);
    mem[0] += l + r; /* items of a group never run at the same time */
    offload_group_barrier(item);
    if (l == 0 && mem[0] == n * (n - 1) / 2 + n * r) mem[1]++;
    offload_group_barrier(item);
  }
  if (l == 0) p->out[item->group_id[0]] = mem[1];
}

/* A barrier in divergent control flow: item 0 returns early. */
OFFLOAD_HOST_KERNEL_BARRIER(divergent_barrier) {
  uint32_t *const *out = args;
  if (item->local_id[0] == 0) return;
  offload_group_barrier(item);
  (*out)[offload_global_id_x(item)] = 1;
}

/* A barrier in a kernel not declared to use one. */
OFFLOAD_HOST_KERNEL(undeclared_barrier) {
  (void)args;
  offload_group_barrier(item);
}

/* Stores 1 in *started, then waits until the host sets *flag. */
OFFLOAD_HOST_KERNEL(wait_for_flag) {
  const struct {
    int *flag;
    int *started;
  } *p = args;
  (void)item;
  __atomic_store_n(p->started, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(p->flag, __ATOMIC_ACQUIRE))
    ;
}

/* Plain (ABI v1 style) kernel for comparison: writes its global id. */
OFFLOAD_HOST_KERNEL(write_global_id) {
  uint32_t *const *out = args;
  size_t i = offload_global_id_x(item);
  (*out)[i] = (uint32_t)i;
}

/* y = a x + y over n floats (no barrier: the direct path). */
OFFLOAD_HOST_KERNEL(saxpy) {
  const struct {
    float a;
    const float *x;
    float *y;
    uint32_t n;
  } *p = args;
  size_t i = offload_global_id_x(item);
  if (i < p->n) p->y[i] = p->a * p->x[i] + p->y[i];
}

/* Every item of a 3-D grid writes its linear global id, plus 1 when the
 * group memory it sees is the group's (no barrier: the group loop that
 * OFFLOAD_HOST_KERNEL exports, with dynamic group memory). */
OFFLOAD_HOST_KERNEL(write_ids_3d) {
  uint32_t *const *out = args;
  size_t w = offload_global_size(item, 0), h = offload_global_size(item, 1);
  size_t i = offload_global_id(item, 0) + w * (offload_global_id(item, 1) + h * offload_global_id(item, 2));
  uint32_t *mem = item->group_memory;
  uint32_t first = item->local_id[0] == 0 && item->local_id[1] == 0 && item->local_id[2] == 0;
  if (first)
    mem[0] = item->group_id[0] + 1000 * item->group_id[1] + 1000000 * item->group_id[2];
  uint32_t mine = item->group_id[0] + 1000 * item->group_id[1] + 1000000 * item->group_id[2];
  (*out)[i] = (uint32_t)i + (mem[0] == mine);
}

/* Call counters: how the runtime calls a kernel. */
struct call_counts {
  uint32_t *item_calls;
  uint32_t *group_calls;
};

/* Only the per-item export (an ABI v1 kernel): called once per item. */
OFFLOAD_HOST_KERNEL_ITEM(count_item_calls) {
  const struct call_counts *p = args;
  __atomic_fetch_add(p->item_calls, 1, __ATOMIC_RELAXED);
}

/* A group loop written by hand: the runtime must call it once per group,
 * with the item of local id 0 and the argument buffer's size, and never the
 * per-item export (argument buffers of up to OFFLOAD_HOST_GROUP_ARGS_MAX
 * bytes; larger ones go to the per-item export). */
OFFLOAD_HOST_KERNEL_ITEM(count_group_calls) {
  const struct call_counts *p = args;
  __atomic_fetch_add(p->item_calls, 1, __ATOMIC_RELAXED);
}
OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void
count_group_calls_offload_group(const void *args, const offload_host_item_t *first) {
  const struct call_counts *p = args;
  uint32_t bad = first->local_id[0] | first->local_id[1] | first->local_id[2];
  bad |= first->args_size < sizeof *p || first->args_size > OFFLOAD_HOST_GROUP_ARGS_MAX;
  __atomic_fetch_add(p->group_calls, bad ? 1u << 20 : 1u, __ATOMIC_RELAXED);
}

/* A barrier kernel with a group form: the runtime must call the group form
 * once per group (with the item of local id 0 and its group memory, any
 * argument size) and never run the items. */
OFFLOAD_HOST_KERNEL_BARRIER(count_barrier_group_calls) {
  const struct call_counts *p = args;
  __atomic_fetch_add(p->item_calls, 1, __ATOMIC_RELAXED);
  offload_group_barrier(item);
}
OFFLOAD_HOST_KERNEL_GROUP(count_barrier_group_calls) {
  const struct call_counts *p = args;
  uint32_t bad = group->local_id[0] | group->local_id[1] | group->local_id[2];
  bad |= group->group_memory == NULL || group->args_size < sizeof *p;
  uint32_t items = 0;
  OFFLOAD_GROUP_FOR_ITEMS(group, it) {
    bad |= offload_local_linear_id(it) != items;
    items++;
  }
  bad |= items != group->group_size[0] * group->group_size[1] * group->group_size[2];
  __atomic_fetch_add(p->group_calls, bad ? 1u << 20 : 1u, __ATOMIC_RELAXED);
}

/* Hand-written group entries of a plain kernel: the runtime must call
 * `_offload_groups` once per run of consecutive groups (every group exactly
 * once: seen[linear group id]), and neither `_offload_group` nor the
 * per-item export. */
struct piece_counts {
  uint32_t *seen;   /* per group */
  uint32_t *counts; /* [0]: runs, [1]: single groups, [2]: item calls */
};
OFFLOAD_HOST_KERNEL_ITEM(count_piece_calls) {
  const struct piece_counts *p = args;
  (void)item;
  __atomic_fetch_add(&p->counts[2], 1, __ATOMIC_RELAXED);
}
OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void
count_piece_calls_offload_group(const void *args, const offload_host_item_t *first) {
  const struct piece_counts *p = args;
  (void)first;
  __atomic_fetch_add(&p->counts[1], 1, __ATOMIC_RELAXED);
}
OFFLOAD_HOST_EXTERN __attribute__((visibility("default"))) void
count_piece_calls_offload_groups(const void *args, const offload_host_item_t *first,
                                 uint64_t n) {
  const struct piece_counts *p = args;
  offload_host_item_t g = *first;
  for (uint64_t i = 0; i < n; i++, offload_host_next_group_(&g)) {
    uint32_t lin = g.group_id[0] + g.num_groups[0] * (g.group_id[1] + g.num_groups[1] * g.group_id[2]);
    __atomic_fetch_add(&p->seen[lin], 1, __ATOMIC_RELAXED);
  }
  __atomic_fetch_add(&p->counts[0], 1, __ATOMIC_RELAXED);
}

/* A barrier inside a function the kernel calls (kept a call): work-item
 * loops made from bitcode cannot see it, so the kernel keeps its
 * coroutines. out[global id] = the next item's id in its group. */
static __attribute__((noinline)) void barrier_helper(const offload_host_item_t *item) {
  offload_group_barrier(item);
}
OFFLOAD_HOST_KERNEL_BARRIER(barrier_in_helper) {
  uint32_t *out = *(uint32_t *const *)args;
  uint32_t *mem = item->group_memory;
  uint32_t l = item->local_id[0], n = item->group_size[0];
  mem[l] = l;
  barrier_helper(item);
  out[offload_global_id_x(item)] = mem[(l + 1) % n];
}

/* Values kept across barriers in a private array (volatile: it stays in
 * memory, its address taken) and in registers, in 2-d groups.
 * out[group * items + l] = l + 10 * ((l + items - 1) % items), l the local
 * linear id. */
OFFLOAD_HOST_KERNEL_BARRIER(private_across_barriers) {
  uint32_t *out = *(uint32_t *const *)args;
  uint32_t *mem = item->group_memory;
  uint32_t l = offload_local_linear_id(item);
  uint32_t n = item->group_size[0] * item->group_size[1] * item->group_size[2];
  volatile uint32_t priv[4];
  for (uint32_t j = 0; j < 4; j++) priv[j] = l * (j + 1);
  mem[l] = l;
  offload_group_barrier(item);
  uint32_t next = mem[(l + 1) % n];
  offload_group_barrier(item);
  mem[l] = next + priv[0] + priv[1] + priv[2] + priv[3];
  offload_group_barrier(item);
  uint32_t g = item->group_id[0] + item->num_groups[0] * item->group_id[1];
  out[g * n + l] = mem[(l + n - 1) % n];
}

/* A value computed from the loop counter, which changes before the
 * barrier after which the value is used: recomputing it after the barrier
 * would see the new counter. out[global id] = sum over r < rounds of
 * 2 * (100 * r + l), l the local id. */
OFFLOAD_HOST_KERNEL_BARRIER(counter_before_barrier) {
  const struct {
    uint32_t *out;
    uint32_t rounds;
  } *p = args;
  uint32_t *mem = item->group_memory;
  uint32_t l = item->local_id[0], sum = 0;
  for (uint32_t r = 0; r < p->rounds;) {
    uint32_t x = 100 * r + l;
    mem[l] = x;
    r++;
    offload_group_barrier(item);
    sum += mem[l] + x;
  }
  p->out[offload_global_id_x(item)] = sum;
}
