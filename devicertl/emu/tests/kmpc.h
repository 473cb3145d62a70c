/* The runtime's entry points as clang-22's generated device code declares
 * them (devicertl/notes/nv.decl), with C types, for the host tests. */
#ifndef EMU_TESTS_KMPC_H
#define EMU_TESTS_KMPC_H

#include "abi.h"

/* kernel.c */
int32_t __kmpc_target_init(KernelEnvironmentTy *env, KernelLaunchEnvironmentTy *launch_env);
void __kmpc_target_deinit(void);

/* parallel.c */
void __kmpc_parallel_60(IdentTy *ident, int32_t gtid, int32_t if_expr, int32_t num_threads,
                        int32_t proc_bind, void *fn, void *wrapper_fn, void **args, int64_t nargs,
                        int32_t strict);
void __kmpc_get_shared_variables(void ***global_args);
int32_t __kmpc_global_thread_num(IdentTy *ident);
int32_t __kmpc_get_hardware_thread_id_in_block(void);
int32_t __kmpc_get_hardware_num_threads_in_block(void);
int32_t __kmpc_get_warp_size(void);

/* workshare.c */
void __kmpc_for_static_init_4(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                              int32_t *plower, int32_t *pupper, int32_t *pstride, int32_t incr,
                              int32_t chunk);
void __kmpc_for_static_init_4u(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                               uint32_t *plower, uint32_t *pupper, int32_t *pstride, int32_t incr,
                               int32_t chunk);
void __kmpc_for_static_init_8(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                              int64_t *plower, int64_t *pupper, int64_t *pstride, int64_t incr,
                              int64_t chunk);
void __kmpc_for_static_init_8u(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                               uint64_t *plower, uint64_t *pupper, int64_t *pstride, int64_t incr,
                               int64_t chunk);
void __kmpc_for_static_fini(IdentTy *, int32_t gtid);
void __kmpc_distribute_static_init_4(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                                     int32_t *plower, int32_t *pupper, int32_t *pstride,
                                     int32_t incr, int32_t chunk);
void __kmpc_distribute_static_init_4u(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                                      uint32_t *plower, uint32_t *pupper, int32_t *pstride,
                                      int32_t incr, int32_t chunk);
void __kmpc_distribute_static_init_8(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                                     int64_t *plower, int64_t *pupper, int64_t *pstride,
                                     int64_t incr, int64_t chunk);
void __kmpc_distribute_static_init_8u(IdentTy *, int32_t gtid, int32_t sched, int32_t *plast,
                                      uint64_t *plower, uint64_t *pupper, int64_t *pstride,
                                      int64_t incr, int64_t chunk);
void __kmpc_distribute_static_fini(IdentTy *, int32_t gtid);
void __kmpc_dispatch_init_4(IdentTy *, int32_t gtid, int32_t sched, int32_t lb, int32_t ub,
                            int32_t st, int32_t chunk);
void __kmpc_dispatch_init_4u(IdentTy *, int32_t gtid, int32_t sched, uint32_t lb, uint32_t ub,
                             int32_t st, int32_t chunk);
void __kmpc_dispatch_init_8(IdentTy *, int32_t gtid, int32_t sched, int64_t lb, int64_t ub,
                            int64_t st, int64_t chunk);
void __kmpc_dispatch_init_8u(IdentTy *, int32_t gtid, int32_t sched, uint64_t lb, uint64_t ub,
                             int64_t st, int64_t chunk);
int32_t __kmpc_dispatch_next_4(IdentTy *, int32_t gtid, int32_t *plast, int32_t *plower,
                               int32_t *pupper, int32_t *pstride);
int32_t __kmpc_dispatch_next_4u(IdentTy *, int32_t gtid, int32_t *plast, uint32_t *plower,
                                uint32_t *pupper, int32_t *pstride);
int32_t __kmpc_dispatch_next_8(IdentTy *, int32_t gtid, int32_t *plast, int64_t *plower,
                               int64_t *pupper, int64_t *pstride);
int32_t __kmpc_dispatch_next_8u(IdentTy *, int32_t gtid, int32_t *plast, uint64_t *plower,
                                uint64_t *pupper, int64_t *pstride);
void __kmpc_dispatch_fini_4(IdentTy *, int32_t gtid);
void __kmpc_dispatch_fini_4u(IdentTy *, int32_t gtid);
void __kmpc_dispatch_fini_8(IdentTy *, int32_t gtid);
void __kmpc_dispatch_fini_8u(IdentTy *, int32_t gtid);
void __kmpc_dispatch_deinit(IdentTy *, int32_t gtid);

/* reduction.c */
int32_t __kmpc_nvptx_parallel_reduce_nowait_v2(IdentTy *, uint64_t reduce_data_size,
                                               void *reduce_data, ShuffleReductFnTy shfl,
                                               InterWarpCopyFnTy cpy);
int32_t __kmpc_nvptx_teams_reduce_nowait_v2(IdentTy *, void *global_buffer,
                                            uint32_t num_records, uint64_t reduce_data_size,
                                            void *reduce_data, ShuffleReductFnTy shfl,
                                            InterWarpCopyFnTy cpy, ListGlobalFnTy lgcpy,
                                            ListGlobalFnTy lgred, ListGlobalFnTy glcpy,
                                            ListGlobalFnTy glred);
void *__kmpc_reduction_get_fixed_buffer(void);
int32_t __kmpc_shuffle_int32(int32_t val, int16_t delta, int16_t size);
int64_t __kmpc_shuffle_int64(int64_t val, int16_t delta, int16_t size);

/* sync.c */
uint64_t __kmpc_warp_active_thread_mask(void);
void __kmpc_syncwarp(uint64_t mask);
void __kmpc_barrier(IdentTy *, int32_t gtid);
void __kmpc_barrier_simple_spmd(IdentTy *, int32_t gtid);
void __kmpc_barrier_simple_generic(IdentTy *, int32_t gtid);
/* parallel.c: the worker side OpenMPOpt's custom state machines call */
bool __kmpc_kernel_parallel(void **work_fn);
void __kmpc_kernel_end_parallel(void);
typedef int32_t kmp_critical_name[8];
void __kmpc_critical(IdentTy *, int32_t gtid, kmp_critical_name *lck);
void __kmpc_end_critical(IdentTy *, int32_t gtid, kmp_critical_name *lck);
int32_t __kmpc_single(IdentTy *, int32_t gtid);
void __kmpc_end_single(IdentTy *, int32_t gtid);
int32_t __kmpc_master(IdentTy *, int32_t gtid);
void __kmpc_end_master(IdentTy *, int32_t gtid);
int32_t __kmpc_masked(IdentTy *, int32_t gtid, int32_t filter);
void __kmpc_end_masked(IdentTy *, int32_t gtid);
void __kmpc_ordered(IdentTy *, int32_t gtid);
void __kmpc_end_ordered(IdentTy *, int32_t gtid);
void __kmpc_flush(IdentTy *);

/* state.c */
void *__kmpc_alloc_shared(uint64_t bytes);
void __kmpc_free_shared(void *ptr, uint64_t bytes);
void *llvm_omp_target_dynamic_shared_alloc(void);

/* tasks.c */
TaskDescriptorTy *__kmpc_omp_task_alloc(IdentTy *, int32_t gtid, int32_t flags,
                                        uint64_t sizeof_task, uint64_t sizeof_shareds,
                                        TaskFnTy entry);
int32_t __kmpc_omp_task(IdentTy *, int32_t gtid, TaskDescriptorTy *task);
int32_t __kmpc_omp_task_with_deps(IdentTy *, int32_t gtid, TaskDescriptorTy *task, int32_t ndeps,
                                  void *deps, int32_t ndeps_noalias, void *noalias_deps);
int32_t __kmpc_omp_taskwait(IdentTy *, int32_t gtid);
int32_t __kmpc_omp_taskyield(IdentTy *, int32_t gtid, int32_t end_part);
void __kmpc_taskgroup(IdentTy *, int32_t gtid);
void __kmpc_end_taskgroup(IdentTy *, int32_t gtid);
void __kmpc_taskloop(IdentTy *, int32_t gtid, TaskDescriptorTy *task, int32_t if_val,
                     uint64_t *lb, uint64_t *ub, int64_t st, int32_t nogroup, int32_t sched,
                     uint64_t grainsize, void *task_dup);
int32_t __kmpc_cancel(IdentTy *, int32_t gtid, int32_t kind);
int32_t __kmpc_cancellationpoint(IdentTy *, int32_t gtid, int32_t kind);

/* omp_api.c */
int omp_get_thread_num(void);
int omp_get_num_threads(void);
int omp_get_max_threads(void);
int omp_get_team_num(void);
int omp_get_num_teams(void);
int omp_get_level(void);
int omp_get_active_level(void);
int omp_in_parallel(void);
int omp_get_ancestor_thread_num(int level);
int omp_get_team_size(int level);
int omp_get_thread_limit(void);
int omp_get_device_num(void);
int omp_get_num_devices(void);
int omp_get_num_procs(void);
int omp_is_initial_device(void);
int omp_get_dynamic(void);
int omp_get_nested(void);
int omp_get_max_active_levels(void);
void omp_set_num_threads(int n);
double omp_get_wtime(void);
double omp_get_wtick(void);
typedef struct omp_lock_t {
  void *lk;
} omp_lock_t;
void omp_init_lock(omp_lock_t *);
void omp_destroy_lock(omp_lock_t *);
void omp_set_lock(omp_lock_t *);
void omp_unset_lock(omp_lock_t *);
int omp_test_lock(omp_lock_t *);

#endif
