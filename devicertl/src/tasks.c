/* Explicit tasks, run undeferred: a task executes on the encountering thread
 * inside __kmpc_omp_task (or between begin_if0/complete_if0) in a data
 * environment of its own, then its memory goes back to the device heap.
 * Dependences are satisfied by that order, so taskwait, taskgroup and
 * taskyield have nothing to wait for. A taskloop runs its whole iteration
 * space as the one task clang built. Cancellation is never activated
 * (OMP_CANCELLATION cannot be set for a device), so cancel and cancellation
 * points report "not cancelled". */
#include "state.h"

/* kmp_task_t as clang lays it out (CGOpenMPRuntime): shareds, routine,
 * part_id, then two kmp_cmplrdata_t unions (data1: destructors thunk). */
typedef struct KmpTask {
  void *shareds;
  TaskFnTy routine;
  int32_t part_id;
  TaskFnTy destructors;
  void *data2;
} KmpTask;

_Static_assert(offsetof(KmpTask, destructors) == 24, "kmp_task_t data1 at 24");
_Static_assert(sizeof(KmpTask) == 40, "kmp_task_t is 40 bytes");

/* kmp_tasking_flags_t bit: call data1 (destructors) after the task. */
enum { TASK_FLAG_DESTRUCTORS = 1 << 3 };

/* Taskloop fields follow kmp_task_t: lb, ub, st (int64), liter (int32). */
enum { TASKLOOP_LITER_FROM_LB = 24 };

/* What the runtime keeps in front of each task it hands out. */
typedef struct __attribute__((aligned(16))) TaskHeader {
  RtlDataEnv env;
  int32_t flags;
} TaskHeader;

static TaskHeader *header_of(void *task) { return (TaskHeader *)task - 1; }

RTL_EXPORT void *__kmpc_omp_task_alloc(IdentTy *ident, int32_t gtid, int32_t flags,
                                       size_t sizeof_task, size_t sizeof_shareds,
                                       TaskFnTy routine) {
  size_t task_bytes = (sizeof_task + sizeof(void *) - 1) & ~(sizeof(void *) - 1);
  TaskHeader *header = rtl_heap_alloc(sizeof(TaskHeader) + task_bytes + sizeof_shareds);
  if (!header)
    rtl_fatal("__kmpc_omp_task_alloc: device heap exhausted");
  header->flags = flags;
  KmpTask *task = (KmpTask *)(header + 1);
  task->shareds = sizeof_shareds ? (char *)task + task_bytes : NULL;
  task->routine = routine;
  return task;
}

/* omp_target_task_alloc adds the device id; tasks stay on this device. */
RTL_EXPORT void *__kmpc_omp_target_task_alloc(IdentTy *ident, int32_t gtid, int32_t flags,
                                              size_t sizeof_task, size_t sizeof_shareds,
                                              TaskFnTy routine, int64_t device_id) {
  return __kmpc_omp_task_alloc(ident, gtid, flags, sizeof_task, sizeof_shareds, routine);
}

static void enter_task(void *task) { rtl_env_push(&header_of(task)->env, RTL_ENV_TASK); }

static void finish_task(int32_t gtid, void *task) {
  TaskHeader *header = header_of(task);
  if (header->flags & TASK_FLAG_DESTRUCTORS)
    ((KmpTask *)task)->destructors(gtid, task);
  rtl_env_pop(&header->env);
  rtl_heap_free(header);
}

static void run_task(int32_t gtid, void *task) {
  enter_task(task);
  ((KmpTask *)task)->routine(gtid, task);
  finish_task(gtid, task);
}

/* Returns 0 (TASK_CURRENT_NOT_QUEUED): the task has already run. */
RTL_EXPORT int32_t __kmpc_omp_task(IdentTy *ident, int32_t gtid, void *task) {
  run_task(gtid, task);
  return 0;
}

RTL_EXPORT int32_t __kmpc_omp_task_with_deps(IdentTy *ident, int32_t gtid, void *task,
                                             int32_t ndeps, void *deps, int32_t ndeps_noalias,
                                             void *noalias_deps) {
  run_task(gtid, task);
  return 0;
}

/* if(0) tasks: clang calls the routine itself between these two. */
RTL_EXPORT void __kmpc_omp_task_begin_if0(IdentTy *ident, int32_t gtid, void *task) {
  enter_task(task);
}

RTL_EXPORT void __kmpc_omp_task_complete_if0(IdentTy *ident, int32_t gtid, void *task) {
  finish_task(gtid, task);
}

RTL_EXPORT void __kmpc_omp_wait_deps(IdentTy *ident, int32_t gtid, int32_t ndeps, void *deps,
                                     int32_t ndeps_noalias, void *noalias_deps) {}

RTL_EXPORT void __kmpc_omp_taskwait_deps_51(IdentTy *ident, int32_t gtid, int32_t ndeps,
                                            void *deps, int32_t ndeps_noalias,
                                            void *noalias_deps, int32_t nowait) {}

RTL_EXPORT int32_t __kmpc_omp_taskwait(IdentTy *ident, int32_t gtid) { return 0; }

RTL_EXPORT int32_t __kmpc_omp_taskyield(IdentTy *ident, int32_t gtid, int32_t end_part) {
  return 0;
}

RTL_EXPORT void __kmpc_taskgroup(IdentTy *ident, int32_t gtid) {}
RTL_EXPORT void __kmpc_end_taskgroup(IdentTy *ident, int32_t gtid) {}

/* clang normalises the loop to logical iterations lb..ub with stride st, so
 * an empty loop has ub < lb (signed). The one task runs them all and so
 * runs the last one: liter says so for lastprivate. */
RTL_EXPORT void __kmpc_taskloop(IdentTy *ident, int32_t gtid, void *task, int32_t if_val,
                                uint64_t *lb, uint64_t *ub, int64_t st, int32_t nogroup,
                                int32_t sched, uint64_t grainsize, void *task_dup) {
  int64_t lower = (int64_t)*lb, upper = (int64_t)*ub;
  bool empty = st >= 0 ? lower > upper : lower < upper;
  if (empty) {
    rtl_heap_free(header_of(task));
    return;
  }
  *(int32_t *)((char *)lb + TASKLOOP_LITER_FROM_LB) = 1;
  run_task(gtid, task);
}

/* Detached tasks complete when they return: they ran undeferred. */
RTL_EXPORT void *__kmpc_task_allow_completion_event(IdentTy *ident, int32_t gtid, void *task) {
  return task;
}

RTL_EXPORT void omp_fulfill_event(uintptr_t event) {}

RTL_EXPORT int32_t __kmpc_cancel(IdentTy *ident, int32_t gtid, int32_t kind) { return 0; }

RTL_EXPORT int32_t __kmpc_cancellationpoint(IdentTy *ident, int32_t gtid, int32_t kind) {
  return 0;
}

/* An undeferred task is an included task; like LLVM's device runtime we let
 * tasks report themselves final. */
RTL_EXPORT int omp_in_final(void) {
  RtlDataEnv *env = rtl_env_top();
  return env && env->kind == RTL_ENV_TASK;
}

RTL_EXPORT int omp_get_max_task_priority(void) { return 0; }
