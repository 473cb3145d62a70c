/* What the runtime's modules use of one another. Each module (one file
 * under src/) owns its state; this header is the contract between them.
 *
 *   kernel.c     __kmpc_target_init/deinit, the generic-mode state machine,
 *                kernel/launch/device environments
 *   parallel.c   __kmpc_parallel_60, __kmpc_kernel_parallel/end_parallel,
 *                levels and thread numbering of parallel regions
 *   state.c      ICVs, __kmpc_alloc_shared/free_shared, dynamic shared memory
 *   sync.c       barriers, critical, single/master/masked, ordered, locks,
 *                flush, warp masks
 *   workshare.c  static, distribute and dispatch (dynamic/guided) schedules
 *   reduction.c  parallel and teams reductions, shuffles, fixed buffer
 *   tasks.c      tasks (run undeferred), taskgroup, taskloop, cancel
 *   omp_api.c    device-side omp_* routines
 *   libc.c       what device code may call of libc (printf on amdgcn, ...)
 *   platform_*.c the hardware (platform.h)
 */
#ifndef OMPDEVICE_RTL_H
#define OMPDEVICE_RTL_H

#include "abi.h"
#include "platform.h"

/* Build parameters of the distribute schedule (workshare.c, widened_chunk;
 * -D through DEVICERTL_CFLAGS to compare variants on a GPU): chunks per
 * team of clang's composite loops, and a cap on a chunk in clang's chunks
 * (0: none; 1: clang's chunks as they are). */
#ifndef RTL_TEAM_CHUNKS
#define RTL_TEAM_CHUNKS 8
#endif
#ifndef RTL_WIDEN_MAX
#define RTL_WIDEN_MAX 0
#endif

/* --- memory orders on GPUs ---------------------------------------------- */
/* clang-22 drops the memory scope of __scoped_atomic_* for NVPTX, and its
 * NVPTX back end treats orders unevenly: an acquire load or release store
 * becomes a system-scope one (ld.acquire.sys invalidates the L1 cache,
 * st.release.sys waits for system-wide visibility), a compare-exchange
 * gets `fence.sc.sys` and `.acquire.sys`, and every other read-modify-write
 * (add, sub, exchange, ...) becomes a plain device-scope `atom` with no
 * ordering at all, whatever order was asked for. So on GPUs every atomic
 * that orders memory is relaxed, and the ordering comes from explicit fences
 * of the right scope on both sides:
 *
 *   RTL_BLOCK_ORDER   threads of one block, with plat_fence_block()
 *   RTL_DEVICE_ORDER  threads of any team (teams reduction, device heap,
 *                     locks), with plat_fence_device() (membar.gl)
 *
 * The host emulation keeps the ordered atomic: ThreadSanitizer ignores
 * fences, and its fences are stronger anyway. */
#if RTL_DEVICE_TARGET
#define RTL_BLOCK_ORDER(order) __ATOMIC_RELAXED
#define RTL_DEVICE_ORDER(order) __ATOMIC_RELAXED
#else
#define RTL_BLOCK_ORDER(order) (order)
#define RTL_DEVICE_ORDER(order) (order)
#endif

/* --- kernel.c: facts of the running kernel ----------------------------- */
/* True when every thread runs the region (SPMD, generic-SPMD, bare). */
bool rtl_is_spmd(void);
/* True for kernels the frontend made SPMD (not generic ones OpenMPOpt
 * turned into SPMD ones, whose sequential code may run between regions). */
bool rtl_is_frontend_spmd(void);
const KernelEnvironmentTy *rtl_kernel_environment(void);
/* The kernel's thread limit as clang compiled it (the environment's
 * MaxThreads, its "omp_target_thread_limit"), 0 when it has none. */
uint32_t rtl_kernel_thread_limit(void);
/* The launch environment the host passed (may be NULL for bare kernels or
 * hosts that pass none). */
KernelLaunchEnvironmentTy *rtl_launch_environment(void);
/* `__omp_rtl_device_environment` as the host wrote it. */
const DeviceEnvironmentTy *rtl_device_environment(void);
/* Generic mode: the thread running the sequential part of the region. */
bool rtl_is_main_thread(void);
/* Threads that may take part in a parallel region of this team (block size
 * in SPMD mode, block size minus one warp in generic mode). */
uint32_t rtl_max_team_threads(void);

/* --- parallel.c: the OpenMP view of the calling thread ----------------- */
uint32_t rtl_thread_num(void);  /* omp_get_thread_num() */
uint32_t rtl_num_threads(void); /* omp_get_num_threads() */
uint32_t rtl_level(void);       /* omp_get_level() */
uint32_t rtl_active_level(void);/* omp_get_active_level() */
uint32_t rtl_team_num(void);    /* omp_get_team_num() */
uint32_t rtl_num_teams(void);   /* omp_get_num_teams() */
/* Synchronise the threads of the innermost parallel region (nothing when it
 * has one thread). */
RTL_CONVERGENT void rtl_barrier(void);

/* --- reduction.c: deferred parallel reductions ------------------------- */
void rtl_reduction_init_team(void);
/* Every thread of a team, from a chunked distribute schedule (increment
 * 1): the team's first chunk (if it has one), the loop's last iteration
 * and the stride from chunk to chunk (rtl_loop_chunks counts them, when a
 * reduction first needs it: a 64-bit division). */
void rtl_reduction_distribute(bool has_chunk, uint64_t first, uint64_t last, int64_t stride,
                              bool is_signed);

/* --- workshare.c -------------------------------------------------------- */
/* The chunks clang's distribute loop runs from `first`, `stride` at a
 * time, while not past `last`. */
uint64_t rtl_loop_chunks(uint64_t first, uint64_t last, int64_t stride, bool is_signed);

/* --- state.c ------------------------------------------------------------ */
void *rtl_alloc_shared(uint64_t bytes);
void rtl_free_shared(void *ptr, uint64_t bytes);

/* --- sync.c ------------------------------------------------------------- */
/* A barrier of the block's first `num_threads` threads (any count) on a
 * team-shared counter: teams whose size is not a multiple of the warp size,
 * and plat_sync_block_partial on AMD GPUs. Lanes of a warp that arrive
 * together arrive once, through their lowest lane. */
RTL_CONVERGENT void rtl_counter_barrier(uint32_t num_threads);

/* --- state.c: run-sched-var for schedule(runtime) ----------------------- */
/* `kind` is an omp_sched_t (1 static, 2 dynamic, 3 guided, 4 auto, maybe
 * with the 0x80000000 monotonic bit); `chunk` <= 0 means the default. */
void rtl_run_schedule(uint32_t *kind, int32_t *chunk);

/* --- libc.c: the device heap (malloc/free, tasks, overflow of the shared
 * stack). 16-byte aligned; NULL when exhausted. Thread-safe, any team. ---- */
void *rtl_heap_alloc(uint64_t bytes);
void rtl_heap_free(void *ptr);

/* --- misc --------------------------------------------------------------- */
/* Report a broken invariant (with where) and stop the kernel. */
__attribute__((noreturn)) void rtl_fatal(const char *what);

#endif
