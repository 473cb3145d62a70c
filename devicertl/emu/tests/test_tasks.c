/* Tasks as clang-22 generates them (notes/constructs.c, the l49 kernel):
 * __kmpc_omp_task_alloc + __kmpc_omp_task with shareds copied into the
 * task's shareds block and firstprivates after the kmp_task_t header
 * (undeferred: done when __kmpc_omp_task returns), task with depend,
 * taskwait, taskgroup, taskloop (the runtime runs the task entry over
 * [lb, ub] stored in the task), taskyield, a task creating a task, and
 * tasks created concurrently by the threads of a parallel region (generic
 * and SPMD). */
#include "omp_shapes.h"

/* clang's kmp_task_t: shareds, routine, part_id, data1, data2 (40 bytes);
 * for taskloop followed by lb, ub, st, liter, reductions. */
typedef struct kmp_task {
  void *shareds;
  TaskFnTy routine;
  int32_t part_id;
  void *data1, *data2;
} kmp_task;
typedef struct kmp_task_loop {
  kmp_task h;
  uint64_t lb, ub;
  int64_t st;
  int32_t liter;
  void *reductions;
} kmp_task_loop;
_Static_assert(sizeof(kmp_task) == 40, "kmp_task_t is 40 bytes");
_Static_assert(sizeof(kmp_task_loop) == 80, "taskloop's kmp_task_t is 80 bytes");
_Static_assert(offsetof(kmp_task, shareds) == offsetof(TaskDescriptorTy, Payload), "shareds");

/* task shared(s): shareds = { int *s } */
typedef struct { int32_t *s; } shareds_1;
/* task firstprivate(v) shared(s): privates after the header */
typedef struct { kmp_task h; int32_t v; } task_priv;

static int32_t bad; /* atomic */

static int32_t entry_inc(int32_t gtid, void *task_) {
  (void)gtid;
  kmp_task *task = task_;
  shareds_1 *sh = task->shareds;
  *sh->s += 1;
  return 0;
}
static int32_t entry_priv(int32_t gtid, void *task_) {
  (void)gtid;
  task_priv *task = task_;
  shareds_1 *sh = task->h.shareds;
  *sh->s += task->v;
  return 0;
}
static int32_t entry_atomic_inc(int32_t gtid, void *task_) {
  (void)gtid;
  kmp_task *task = task_;
  shareds_1 *sh = task->shareds;
  __atomic_fetch_add(sh->s, 1, __ATOMIC_RELAXED);
  return 0;
}

/* A task whose body spawns another task. */
static int32_t entry_spawn(int32_t gtid, void *task_) {
  kmp_task *task = task_;
  shareds_1 *sh = task->shareds;
  TaskDescriptorTy *t = __kmpc_omp_task_alloc(&loc, gtid, 1, sizeof(kmp_task), sizeof(shareds_1),
                                              entry_inc);
  memcpy(t->Payload, sh, sizeof *sh);
  __kmpc_omp_task(&loc, gtid, t);
  *sh->s += 10;
  return 0;
}

/* taskloop body: for (i = lb; i <= ub; i++) hits[i]++ */
static int32_t loop_hits[64];
static int32_t entry_loop(int32_t gtid, void *task_) {
  (void)gtid;
  kmp_task_loop *task = task_;
  for (int32_t i = (int32_t)task->lb; (uint64_t)(int64_t)i <= task->ub; i++)
    __atomic_fetch_add(&loop_hits[i], 1, __ATOMIC_RELAXED);
  return 0;
}

static TaskDescriptorTy *new_task(int32_t gtid, TaskFnTy fn, int32_t *s, uint64_t size) {
  TaskDescriptorTy *t = __kmpc_omp_task_alloc(&loc, gtid, 1, size, sizeof(shareds_1), fn);
  if (!t || !t->Payload) {
    __atomic_fetch_add(&bad, 1000, __ATOMIC_RELAXED);
    return NULL;
  }
  shareds_1 sh = {s};
  memcpy(t->Payload, &sh, sizeof sh); /* clang: memcpy into task->shareds */
  return t;
}

/* The sequential part of a target region with tasks (main thread). */
static void tasks_sequential(int32_t gtid) {
  int32_t *s = __kmpc_alloc_shared(4);
  *s = 0;
  /* task shared(s) { s++ }: undeferred, so done on return. */
  TaskDescriptorTy *t = new_task(gtid, entry_inc, s, sizeof(kmp_task));
  if (t)
    __kmpc_omp_task(&loc, gtid, t);
  if (*s != 1)
    __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
  /* firstprivate value in the task */
  t = new_task(gtid, entry_priv, s, sizeof(task_priv));
  if (t) {
    ((task_priv *)t)->v = 5;
    __kmpc_omp_task(&loc, gtid, t);
  }
  if (*s != 6)
    __atomic_fetch_add(&bad, 2, __ATOMIC_RELAXED);
  /* depend(inout: s) */
  t = new_task(gtid, entry_inc, s, sizeof(kmp_task));
  struct { int64_t addr, len; uint8_t flags; } dep = {(int64_t)(intptr_t)s, 4, 3};
  if (t)
    __kmpc_omp_task_with_deps(&loc, gtid, t, 1, &dep, 0, NULL);
  __kmpc_omp_taskwait(&loc, gtid);
  if (*s != 7)
    __atomic_fetch_add(&bad, 4, __ATOMIC_RELAXED);
  /* taskgroup { task } */
  __kmpc_taskgroup(&loc, gtid);
  t = new_task(gtid, entry_inc, s, sizeof(kmp_task));
  if (t)
    __kmpc_omp_task(&loc, gtid, t);
  __kmpc_end_taskgroup(&loc, gtid);
  if (*s != 8)
    __atomic_fetch_add(&bad, 8, __ATOMIC_RELAXED);
  /* a task that creates a task */
  t = new_task(gtid, entry_spawn, s, sizeof(kmp_task));
  if (t)
    __kmpc_omp_task(&loc, gtid, t);
  __kmpc_omp_taskwait(&loc, gtid);
  if (*s != 19)
    __atomic_fetch_add(&bad, 16, __ATOMIC_RELAXED);
  /* taskloop over 0..9 in a taskgroup (clang's l49 shape) */
  __kmpc_taskgroup(&loc, gtid);
  TaskDescriptorTy *tl =
      __kmpc_omp_task_alloc(&loc, gtid, 1, sizeof(kmp_task_loop) + 8, 0, entry_loop);
  if (tl) {
    kmp_task_loop *l = (kmp_task_loop *)tl;
    l->lb = 0;
    l->ub = 9;
    l->st = 1;
    l->reductions = NULL;
    __kmpc_taskloop(&loc, gtid, tl, 1, &l->lb, &l->ub, l->st, 1, 0, 0, NULL);
  }
  __kmpc_end_taskgroup(&loc, gtid);
  __kmpc_omp_taskyield(&loc, gtid, 0);
  __kmpc_free_shared(s, 4);
}

/* Tasks from every thread of a parallel region at once. */
static int32_t par_counter;
static int32_t par_private_bad;
static void par_outlined(int32_t *gtid, int32_t *btid, int32_t *counter) {
  (void)btid;
  int32_t mine = 0;
  int32_t me = omp_get_thread_num();
  for (int i = 0; i < 5; i++) {
    TaskDescriptorTy *t = new_task(*gtid, entry_atomic_inc, counter, sizeof(kmp_task));
    if (t)
      __kmpc_omp_task(&loc, *gtid, t);
    t = new_task(*gtid, entry_inc, &mine, sizeof(kmp_task));
    if (t)
      __kmpc_omp_task(&loc, *gtid, t);
  }
  __kmpc_omp_taskwait(&loc, *gtid);
  if (mine != 5 || omp_get_thread_num() != me)
    __atomic_fetch_add(&par_private_bad, 1, __ATOMIC_RELAXED);
}
static void par_wrapper(int16_t zero, int32_t gtid) {
  (void)zero;
  int32_t btid = 0, g = gtid;
  void **args;
  __kmpc_get_shared_variables(&args);
  par_outlined(&g, &btid, args[0]);
}

static void k_generic(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_generic, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  tasks_sequential(gtid);
  void *args[1] = {&par_counter};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)par_outlined, (void *)par_wrapper, args, 1, 0);
  __kmpc_target_deinit();
}
static void e_generic(void *dyn, void **args) {
  (void)args;
  k_generic(dyn);
}

static void k_spmd(KernelLaunchEnvironmentTy *dyn_ptr) {
  int32_t r = __kmpc_target_init(&env_spmd, dyn_ptr);
  if (r != -1)
    return;
  int32_t gtid = __kmpc_global_thread_num(&loc);
  void *args[1] = {&par_counter};
  __kmpc_parallel_60(&loc, gtid, 1, -1, -1, (void *)par_outlined, NULL, args, 1, 0);
  __kmpc_target_deinit();
}
static void e_spmd(void *dyn, void **args) {
  (void)args;
  k_spmd(dyn);
}

int main(int argc, char **argv) {
  tf_init(argc, argv);
  for (uint32_t w = 32; w <= 64; w += 32) {
    tf_begin("tasks in generic mode: sequential part and a parallel region, warp %u", w);
    bad = par_counter = par_private_bad = 0;
    memset(loop_hits, 0, sizeof loop_hits);
    launch_generic(2, 2 * w, w, 0, e_generic, NULL);
    CHECK_EQ(bad, 0);
    for (int i = 0; i < 10; i++)
      CHECK_MSG(loop_hits[i] == 2, "taskloop iteration %d ran %d times in 2 teams", i,
                loop_hits[i]);
    CHECK_EQ(loop_hits[10], 0);
    CHECK_EQ(par_counter, 2 * 5 * 2 * (int)w);
    CHECK_EQ(par_private_bad, 0);
    tf_end();
  }
  static const uint32_t sizes[] = {1, 33, 100};
  for (unsigned i = 0; i < 3; i++) {
    tf_begin("tasks in SPMD mode: every thread creates tasks, %u threads", sizes[i]);
    bad = par_counter = par_private_bad = 0;
    launch_spmd(2, sizes[i], 32, 0, e_spmd, NULL);
    CHECK_EQ(bad, 0);
    CHECK_EQ(par_counter, 2 * 5 * (int)sizes[i]);
    CHECK_EQ(par_private_bad, 0);
    tf_end();
  }
  return tf_summary();
}
