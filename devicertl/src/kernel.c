/* Kernel entry and exit: __kmpc_target_init/deinit, the generic-mode state
 * machine, and the kernel, launch and device environments.
 *
 * SPMD kernels (and generic kernels OpenMPOpt turned into SPMD ones, and
 * bare kernels) run the region on every thread. Generic kernels run their
 * sequential part on one main thread, the first lane of the block's last
 * warp; the warps before it are the workers of its parallel regions and the
 * rest of the main warp leaves at once. */
#include "state.h"

/* Filled in by the host plugin when it loads the image: weak and `used` so
 * that neither the optimiser folds the zeroes nor LTO drops it. */
__attribute__((used, retain, weak, visibility("protected")))
DeviceEnvironmentTy __omp_rtl_device_environment;

typedef struct KernelTeam {
  const KernelEnvironmentTy *env;
  KernelLaunchEnvironmentTy *launch;
  uint32_t exec_mode;
} KernelTeam;

static RTL_SHARED KernelTeam kernel_team;

static KernelTeam *kernel(void) { return RTL_TEAM_PTR(KernelTeam, kernel_team); }

/* (block - 1) rounded down to a warp: the first lane of the last warp, also
 * when the last warp is partial. */
static uint32_t main_thread_id(void) {
  return (plat_block_size() - 1) & ~(plat_warp_size() - 1);
}

/* Generic mode: the block less one warp, as OpenMPOpt's custom state
 * machine decides it (workers are the threads below
 * __kmpc_get_hardware_num_threads_in_block() - __kmpc_get_warp_size(); the
 * others return) and as the host sizes the block (thread_limit + one warp).
 * Never a thread of the main warp: main_thread_id() >= block - warp. With
 * a block whose size is not a multiple of the warp, the team ends mid-warp
 * (thread_limit(48): 80 threads, workers 0..47, main thread 64). */
static uint32_t generic_team_threads(void) {
  uint32_t block = plat_block_size();
  uint32_t warp = plat_warp_size();
  return block > warp ? block - warp : 0;
}

const DeviceEnvironmentTy *rtl_device_environment(void) {
  return &__omp_rtl_device_environment;
}

const KernelEnvironmentTy *rtl_kernel_environment(void) { return kernel()->env; }

uint32_t rtl_kernel_thread_limit(void) {
  const KernelEnvironmentTy *env = kernel()->env;
  int32_t max = env ? env->Configuration.MaxThreads : 0;
  return max > 0 ? (uint32_t)max : 0;
}

KernelLaunchEnvironmentTy *rtl_launch_environment(void) {
  KernelLaunchEnvironmentTy *launch = kernel()->launch;
  /* LLVM's host passes ~0 when the kernel has no teams reduction. */
  return launch == (KernelLaunchEnvironmentTy *)~(uintptr_t)0 ? NULL : launch;
}

bool rtl_is_spmd(void) { return rtl_load32(&kernel()->exec_mode) != OMP_TGT_EXEC_MODE_GENERIC; }

bool rtl_is_frontend_spmd(void) { return rtl_load32(&kernel()->exec_mode) == OMP_TGT_EXEC_MODE_SPMD; }

bool rtl_is_main_thread(void) { return !rtl_is_spmd() && plat_thread_id() == main_thread_id(); }

uint32_t rtl_max_team_threads(void) {
  return rtl_is_spmd() ? plat_block_size() : generic_team_threads();
}

/* Run by one thread before any other thread reads team state. */
static void init_team(KernelEnvironmentTy *env, KernelLaunchEnvironmentTy *launch) {
  KernelTeam *k = kernel();
  k->env = env;
  k->launch = launch;
  rtl_store32(&k->exec_mode, env->Configuration.ExecMode);
  rtl_state_init();
  rtl_parallel_init();
  rtl_sync_init();
  rtl_reduction_init_team();
}

/* Workers wait for the main thread's parallel regions. Each round is two
 * block barriers, matched by the main thread in __kmpc_parallel_60 (start,
 * end) or by __kmpc_target_deinit (start, with no work: leave). */
static void worker_state_machine(uint32_t tid) {
  for (;;) {
    plat_sync_block();
    void *work = NULL;
    bool active = __kmpc_kernel_parallel(&work);
    if (!work)
      return;
    if (active) {
      ((ParallelWrapperFnTy)work)(0, (int32_t)tid);
      __kmpc_kernel_end_parallel();
    }
    plat_sync_block();
  }
}

RTL_EXPORT RTL_ALWAYS_INLINE int32_t __kmpc_target_init(KernelEnvironmentTy *env,
                                      KernelLaunchEnvironmentTy *launch) {
  uint32_t tid = plat_thread_id();
  /* Each thread's own state, before anything reads it. */
  rtl_parallel_init_thread();
  rtl_state_init_thread();
  if (env->Configuration.ExecMode != OMP_TGT_EXEC_MODE_GENERIC) {
    if (tid == 0)
      init_team(env, launch);
    plat_sync_block();
    return -1;
  }
  /* Generic: the workers touch team state only after their first barrier,
   * which the main thread reaches after initialising it. */
  if (tid == main_thread_id()) {
    init_team(env, launch);
    return -1;
  }
  /* The main thread's warp-mates must not reach a barrier: on GPUs where a
   * barrier counts warps, one of them could complete it for the main
   * thread. */
  if (tid >= generic_team_threads())
    return (int32_t)tid;
  if (env->Configuration.UseGenericStateMachine)
    worker_state_machine(tid);
  return (int32_t)tid;
}

RTL_EXPORT RTL_ALWAYS_INLINE void __kmpc_target_deinit(void) {
  if (rtl_is_spmd()) {
    /* No barrier: each thread just leaves, unless threads made data
     * environments, whose per-thread list heads the last one out frees. */
    rtl_state_leave_spmd();
    return;
  }
  /* Generic: workers (also in a custom state machine) never get here while
   * the main thread runs; it frees the team state, then lets them leave. */
  if (!rtl_is_main_thread())
    return;
  rtl_state_fini();
  rtl_parallel_end_kernel();
  plat_sync_block();
}

RTL_EXPORT int8_t __kmpc_is_spmd_exec_mode(void) { return rtl_is_spmd(); }

/* OpenMPOpt may ask whether a hardware thread id is the generic main one. */
RTL_EXPORT int8_t __kmpc_is_generic_main_thread_id(int32_t tid) {
  return !rtl_is_spmd() && (uint32_t)tid == main_thread_id();
}
