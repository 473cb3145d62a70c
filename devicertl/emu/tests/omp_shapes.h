/* What clang-22's generated device code looks like, for the host tests:
 * source locations, kernel environments, launch environments and launch
 * helpers for SPMD and generic-mode kernels. */
#ifndef EMU_TESTS_OMP_SHAPES_H
#define EMU_TESTS_OMP_SHAPES_H

#include "tf.h" /* first: it defines _GNU_SOURCE */
#include "kmpc.h"

static char loc_str[] = ";unknown;unknown;0;0;;";
/* The ident flags clang emits: plain, distribute, worksharing loop,
 * implicit barrier, single's implicit barrier. */
static IdentTy loc = {0, 2, 0, 22, loc_str};
static IdentTy loc_dist = {0, 2050, 0, 22, loc_str};
static IdentTy loc_for = {0, 514, 0, 22, loc_str};
static IdentTy loc_barrier = {0, 66, 0, 22, loc_str};
static IdentTy loc_single_barrier = {0, 322, 0, 22, loc_str};
static IdentTy loc_explicit_barrier = {0, 34, 0, 22, loc_str};

static DynamicEnvironmentTy dyn_env;

/* One kernel environment per mode, rewritten by the host before a launch
 * (clang emits one constant per kernel; the tests reuse these). */
static KernelEnvironmentTy env_generic = {{1, 1, OMP_TGT_EXEC_MODE_GENERIC, 1, 1024, -1, -1, 0, 0},
                                          &loc, &dyn_env};
static KernelEnvironmentTy env_spmd = {{0, 1, OMP_TGT_EXEC_MODE_SPMD, 1, 1024, 0, 0, 0, 0},
                                       &loc, &dyn_env};
static KernelEnvironmentTy env_generic_spmd = {
    {0, 1, OMP_TGT_EXEC_MODE_GENERIC_SPMD, 1, 1024, 0, 0, 0, 0}, &loc, &dyn_env};

__attribute__((unused)) static void env_set(KernelEnvironmentTy *e, int32_t max_threads, int32_t max_teams,
                    int32_t red_size, int32_t red_len) {
  e->Configuration.MaxThreads = max_threads;
  e->Configuration.MaxTeams = max_teams;
  e->Configuration.ReductionDataSize = red_size;
  e->Configuration.ReductionBufferLength = red_len;
}

/* What the host plugin passes as every kernel's first argument. */
static KernelLaunchEnvironmentTy launch_env;

/* An SPMD launch: `teams` blocks of `threads` threads. */
__attribute__((unused)) static void launch_spmd(uint32_t teams, uint32_t threads, uint32_t warp, uint32_t dyn,
                        emu_kernel_fn k, void **args) {
  env_set(&env_spmd, (int32_t)threads, (int32_t)teams, 0, 0);
  memset(&launch_env, 0, sizeof launch_env);
  tf_launch(teams, threads, warp, dyn, k, &launch_env, args);
}

/* A generic-mode launch: `workers` threads for parallel regions plus the
 * main warp, as the host plugin sizes it (thread_limit + warp size). */
__attribute__((unused)) static void launch_generic(uint32_t teams, uint32_t workers, uint32_t warp, uint32_t dyn,
                           emu_kernel_fn k, void **args) {
  env_set(&env_generic, (int32_t)(workers + warp), (int32_t)teams, 0, 0);
  memset(&launch_env, 0, sizeof launch_env);
  tf_launch(teams, workers + warp, warp, dyn, k, &launch_env, args);
}

__attribute__((unused)) static int tf_quick(void) { return getenv("TF_QUICK") != NULL; }

#endif
